/* SPDX-License-Identifier: MIT */
/*
 * hub_lane.c - the hub as the broker of direct lanes (doc/design.md,
 * "Direct lanes"): it counts the frames it relays between two local
 * workers, gives a pair that talks enough a lane (the memory and two
 * doorbells handed to both over their fd sockets, then an offer on each
 * down ring), and revokes a lane at the other end once an incarnation in
 * it has ended. It keeps no lane fd and no lane mapping past the call that
 * made the lane: no fork of the supervisor inherits one.
 */
#define _GNU_SOURCE
#include "hub_int.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "channel/lane.h"
#include "channel/laneoffer.h"
#include "hub/lanebook.h"
#include "os/doorbell.h"

/* The numbers procmesh.h promises are the ones the lanes use. */
_Static_assert(PM_DIRECT_LANE_AFTER == PM__LANEBOOK_AFTER, "procmesh.h: lane after");
_Static_assert(PM_DIRECT_LANE_MAX_PAYLOAD == PM__LANE_MAX_PAYLOAD, "procmesh.h: lane payload");
_Static_assert(PM_DIRECT_LANES_MAX == PM__LANES_MAX, "procmesh.h: lanes per worker");
_Static_assert(PM_DIRECT_LANE_BYTES == PM__LANE_SIZE, "procmesh.h: lane bytes");

int pm__hub_lanes_enable(pm__hub *h)
{
    if (h->book != NULL)
        return 0;
    pm__lanebook *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    int rc = pm__lanebook_init(b, h->nports);
    if (rc < 0) {
        free(b);
        return rc;
    }
    h->book = b;
    return 0;
}

void pm__hub_lanes_free(pm__hub *h)
{
    if (h->book == NULL)
        return;
    pm__lanebook_free(h->book);
    free(h->book);
    h->book = NULL;
}

void pm__hub_port_lanes_ok(pm__hub *h, unsigned i, int ok)
{
    h->ports[i].lanes_ok = ok != 0;
}

void pm__hub_port_lane_notes(pm__hub *h, unsigned i, int named)
{
    h->ports[i].lane_notes = named != 0;
}

/* A port that may take a lane now: ready, its library speaks lanes, and
 * nothing waits for its down ring (an offer is never queued: it would
 * name a record the worker had long taken, or overtake nothing it must). */
static int may_offer(const pm__port *p)
{
    return p->channel != NULL && p->state == PM__PORT_READY && p->lanes_ok &&
           p->channel->sock >= 0 && p->q_head == NULL;
}

/* The offer frame for one end, written into the room reserved at at. */
static void write_offer(pm__port *p, void *at, uint32_t seq, const pm__lanebook_lane *l,
                        unsigned end)
{
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_LANE, p);
    f.len = PM__LANE_OFFER_SIZE;
    pm__lane_offer o = {seq, l->end[end].index, l->gen, end, l->end[1 - end].slot,
                        l->end[1 - end].inc};
    pm__frame_encode(&f, at);
    pm__lane_offer_encode(&o, (unsigned char *)at + PM__FRAME_HDR_SIZE);
}

/* Writes the revocation of lane gen at index of port p (its control block,
 * release: the worker reads the word with acquire, then looks at the
 * lane), then a frame that wakes it to look and names the lane. The frame
 * goes behind everything the dead peer sent p through the hub (its queue
 * for p included: pm__hub_push keeps order), so p knows at it that the
 * peer's switch-over marker, if any, is behind it too (laneoffer.h). */
static void revoke_at(pm__hub *h, pm__port *p, uint32_t index, uint32_t gen)
{
    struct pm__ctl *ctl = p->channel->map;
    atomic_store_explicit(&ctl->lane_revoked[index], gen, memory_order_release);
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_LANE, p);
    unsigned char note[PM__LANE_REVOKED_SIZE];
    pm__lane_revoked_encode(index, gen, note);
    /* Never dropped at a bound shared with other traffic (PM__CHARGE_LANE):
     * an unmarked lane is finished only at its own wake-up or the offer
     * that reuses its index, and a request waiting on it fails only then.
     * A library of protocol 3 takes a wake-up without a payload, which it
     * reads as "look at every revocation" (and an 8-byte one as a bad
     * offer). */
    int named = p->lane_notes;
    (void)pm__hub_push(h, p, &f, named ? note : NULL, named ? sizeof(note) : 0, PM__CHARGE_LANE);
    h->lanes_revoked++;
}

/* The supervisor keeps none of a lane's fds past its hand-over. */
static void close_all(int fd, int bell[2][2])
{
    pm__close(fd);
    for (int k = 0; k < 2; k++) {
        pm__close(bell[k][0]);
        pm__close(bell[k][1]);
    }
}

/* Makes the lane the book just booked (l) and hands it to both ends. 0, or
 * a negative errno with the booking undone and nothing sent, or 0 with the
 * lane already revoked at the end that got it when the other end's socket
 * refused its record (that end must still get its offer: the record it
 * holds is numbered in its sequence). */
static int hand_over(pm__hub *h, const pm__lanebook_lane *l)
{
    pm__port *e[2] = {&h->ports[l->end[0].slot], &h->ports[l->end[1].slot]};
    size_t total = PM__FRAME_HDR_SIZE + PM__LANE_OFFER_SIZE;
    void *at[2] = {NULL, NULL};
    /* Each end's doorbell is a socket pair (pm__doorbell_pair): the end
     * that reads it holds the reading side, its peer the writing side, two
     * open file descriptions. Never an eventfd: the peer would share the
     * description its wake-ups are written through, and by clearing its
     * O_NONBLOCK and filling the counter make the writer's next wake block
     * for good (a review of stop 40); never a pipe: a writer whose reader
     * died would get SIGPIPE (torture, stop 40), and every end of a pipe
     * shares one mutex, which splice() holds while it blocks on its
     * source: a peer splicing from an idle socket into the pipe puts its
     * reader's read, even RWF_NOWAIT, in uninterruptible sleep for as long
     * as it likes (a review of stop 42, which had moved lanes to pipes
     * whose writer's end was reopened read-write: they woke a parked round
     * trip about 1 us sooner, 1.12x a direct pipe's against 1.18-1.21x). */
    int fd = -1, bell[2][2] = {{-1, -1}, {-1, -1}}, sent = 0;
    int rc = pm__ring_reserve(&e[0]->channel->tx, total, &at[0]);
    if (rc < 0)
        goto fail;
    rc = pm__ring_reserve(&e[1]->channel->tx, total, &at[1]);
    if (rc < 0)
        goto fail;
    rc = pm__lane_create(&fd);
    if (rc < 0)
        goto fail;
    for (int k = 0; k < 2; k++)
        if ((rc = pm__doorbell_pair(&bell[k][0], &bell[k][1])) < 0)
            goto fail;
    uint32_t seq[2];
    for (int k = 0; k < 2; k++) {
        int fds[3] = {fd, bell[k][0], bell[1 - k][1]};
        seq[k] = pm__bigmsg_next(e[k]->channel->tx_seq);
        rc = pm__lane_record_send(e[k]->channel->sock, seq[k], fds);
        if (rc < 0)
            break;
        e[k]->channel->tx_seq = seq[k];
        sent++;
    }
    if (sent == 0)
        goto fail;
    if (sent == 1) {
        /* End 0 holds the record, end 1 does not: end 0 gets its offer (its
         * sequence moved on) with the lane revoked before it, so it drops
         * the lane as soon as it has taken it; end 1 hears nothing. */
        pm__ring_unreserve(&e[1]->channel->tx);
        struct pm__ctl *ctl = e[0]->channel->map;
        atomic_store_explicit(&ctl->lane_revoked[l->end[0].index], l->gen, memory_order_release);
        pm__lanebook_cancel(h->book, l->gen);
        h->lane_failed++;
    }
    for (int k = 0; k < sent; k++) {
        write_offer(e[k], at[k], seq[k], l, (unsigned)k);
        pm__ring_commit(&e[k]->channel->tx, total);
        pm__hub_mark_dirty(h, e[k]);
    }
    close_all(fd, bell);
    h->lanes_made += sent == 2;
    return 0;
fail:
    if (at[0] != NULL)
        pm__ring_unreserve(&e[0]->channel->tx);
    if (at[1] != NULL)
        pm__ring_unreserve(&e[1]->channel->tx);
    close_all(fd, bell);
    pm__lanebook_cancel(h->book, l->gen);
    h->lane_failed++;
    return rc;
}

void pm__hub_lane_count(pm__hub *h, const pm__port *p, const pm__frame_hdr *f)
{
    /* A frame to the sender itself counts for nothing: the book refuses
     * a pair of one slot (pm__lanebook_count). */
    if (h->book == NULL || f->dst_host != PM__HOST_LOCAL || f->dst >= h->nports)
        return;
    pm__port *d = &h->ports[f->dst];
    if (!pm__lanebook_count(h->book, p->index, p->incarnation, d->index, d->incarnation))
        return;
    /* Earned. Set up now only when both ends can take it at once; else the
     * next frame between them asks again (the count stays at its mark). */
    if (!may_offer(p) || !may_offer(d))
        return;
    pm__lanebook_lane l;
    if (pm__lanebook_add(h->book, p->index, p->incarnation, d->index, d->incarnation, &l) < 0)
        return;
    (void)hand_over(h, &l);
}

int pm__hub_lane_between(const pm__hub *h, uint32_t a, uint64_t ainc, uint32_t b, uint64_t binc)
{
    return h->book != NULL && pm__lanebook_find(h->book, a, ainc, b, binc) != NULL;
}

void pm__hub_lanes_end(pm__hub *h, const pm__port *p)
{
    if (h->book == NULL)
        return;
    pm__lanebook_lane v[PM__LANEBOOK_PER_WORKER];
    unsigned n;
    do {
        n = pm__lanebook_end_of(h->book, p->index, p->incarnation, v, PM__LANEBOOK_PER_WORKER);
        for (unsigned i = 0; i < n; i++) {
            const pm__lanebook_end *o = v[i].end[0].slot == p->index ? &v[i].end[1] : &v[i].end[0];
            pm__port *q = &h->ports[o->slot];
            /* The other end's incarnation is still the one in the lane (an
             * ended one took its lanes out of the book when it ended). */
            if (q->channel != NULL && q->incarnation == o->inc)
                revoke_at(h, q, o->index, v[i].gen);
        }
    } while (n == PM__LANEBOOK_PER_WORKER);
}
