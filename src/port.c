/* SPDX-License-Identifier: MIT */
/*
 * port.c - a local worker's port: the hub's side of its ring pair. Reads the
 * worker's up ring (copy, validate, stamp the source from the ring), hands
 * data frames to the router and handshake frames to the owner, and decides
 * when the worker must ring the hub's doorbell.
 */
#define _GNU_SOURCE
#include "hub.h"

#include <string.h>

#include "proto.h"

int pm__hub_port_open(pm__hub *h, unsigned i, pm__link *link, uint64_t incarnation)
{
    pm__port *p = &h->ports[i];
    p->link = link;
    p->incarnation = incarnation;
    p->state = PM__PORT_STARTING;
    p->reading = 1;
    p->busy = 0;
    p->want_arm = 0;
    /* Announce that the hub waits on this ring before the worker can say
     * hello, so its first publish rings the doorbell. */
    if (pm__ring_arm(&link->rx) != 0) {
        p->busy = 1;
        return 1;
    }
    return 0;
}

void pm__hub_port_set_state(pm__hub *h, unsigned i, int state)
{
    h->ports[i].state = state;
}

void pm__hub_port_cut(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    p->reading = 0;
    p->busy = 0;
    p->want_arm = 0;
}

/* One frame from p's ring, already copied and validated by the codec: 0 to
 * go on reading, 1 to stop this turn (the destination is full, or p was cut
 * off). */
static int take_frame(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    /* The ring admits frames up to PM__LINK_MAX_FRAME (room for INIT), but
     * nothing a worker may send is longer than PM_MAX_PAYLOAD: every
     * consumer of a worker's frame (main's receive buffer, another worker's
     * recv) is sized for that. Checked here, once, for every destination: a
     * longer frame is a protocol fault. */
    if (f->len > PM_MAX_PAYLOAD) {
        p->malformed++;
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
        return 1;
    }
    if (f->type == PM__FT_MSG || f->type == PM__FT_REQUEST || f->type == PM__FT_REPLY) {
        if (p->state != PM__PORT_READY && p->state != PM__PORT_STOPPING) {
            pm__ring_consume(&p->link->rx);
            p->malformed++; /* traffic before ready */
            return 0;
        }
        /* Identity comes from the ring, never from the frame. */
        f->src = p->index;
        f->src_inc = p->incarnation;
        if (pm__hub_relay(h, p, f, payload) == -EAGAIN)
            return 1; /* the destination is full: leave it in the ring */
        pm__ring_consume(&p->link->rx);
        return 0;
    }
    if (f->type != PM__FT_HELLO && f->type != PM__FT_READY) {
        pm__ring_consume(&p->link->rx);
        p->malformed++; /* a type only the hub sends */
        return 0;
    }
    /* Handshake frames are tiny: copy before the record is released, then
     * let the owner judge them. */
    unsigned char copy[PM__HUB_CONTROL_MAX];
    size_t len = f->type == PM__FT_READY      ? 0 /* any payload is ignored */
                 : f->len <= sizeof(copy) ? f->len
                                          : sizeof(copy) + 1;
    if (len <= sizeof(copy) && len > 0)
        memcpy(copy, payload, len);
    pm__ring_consume(&p->link->rx);
    if (len > sizeof(copy)) {
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
        return 1;
    }
    h->ops->control(h->owner, p->index, f->type, copy, len);
    return !p->reading;
}

/* Reads up to one turn's worth of frames from the port's up ring. */
static void read_ring(pm__hub *h, pm__port *p)
{
    p->busy = 0;
    p->want_arm = 0;
    int drained = 0;
    for (int i = 0; i < PM__FRAMES_PER_TURN && p->reading && p->blocked_on < 0; i++) {
        pm__frame_hdr f;
        const void *payload;
        int rc = pm__frame_recv(&p->link->rx, PM__LINK_MAX_FRAME, &f, &payload);
        if (rc == 0) {
            drained = 1;
            break;
        }
        h->active = 1;
        if (rc == -EBADMSG) {
            h->ops->fault(h->owner, p->index, PM_REASON_CORRUPT_RING);
            return;
        }
        if (rc < 0) {
            p->malformed++;
            continue;
        }
        if (take_frame(h, p, &f, payload))
            break;
    }
    if (!p->reading)
        return;
    pm__ring_release(&p->link->rx);
    if (p->blocked_on >= 0)
        return; /* a blocked sender is read again when it is unblocked */
    if (drained)
        p->want_arm = 1; /* armed just before the loop sleeps (arm_idle) */
    else
        p->busy = 1; /* its turn is over; more next turn */
}

void pm__hub_port_service(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    if (!p->reading)
        return;
    if (p->q_head != NULL)
        pm__hub_flush(h, p); /* it made room in its down ring */
    if (!p->reading)
        return;
    pm__ring_disarm(&p->link->rx);
    read_ring(h, p);
}

int pm__hub_arm_idle(pm__hub *h)
{
    int work = 0;
    for (unsigned i = 0; i < h->nports; i++) {
        pm__port *p = &h->ports[i];
        if (!p->want_arm)
            continue;
        p->want_arm = 0;
        if (!p->reading || p->blocked_on >= 0)
            continue;
        int more = pm__ring_arm(&p->link->rx);
        if (more < 0) {
            h->ops->fault(h->owner, p->index, PM_REASON_CORRUPT_RING);
        } else if (more > 0) {
            p->busy = 1;
            work = 1;
        }
    }
    return work;
}

int pm__hub_any_arrived(pm__hub *h)
{
    for (unsigned i = 0; i < h->nports; i++) {
        pm__port *p = &h->ports[i];
        if (p->want_arm && p->reading && p->blocked_on < 0 && !pm__ring_empty(&p->link->rx)) {
            p->busy = 1;
            return 1;
        }
    }
    return 0;
}

int pm__hub_any_busy(const pm__hub *h)
{
    for (unsigned i = 0; i < h->nports; i++)
        if (h->ports[i].busy)
            return 1;
    return 0;
}
