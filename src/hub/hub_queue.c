/* SPDX-License-Identifier: MIT */
/* hub_queue.c - the hub's queues: a frame into its destination's ring, or its queue charged to the sender, large messages' fds included. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/bigmsg.h"
#include "hub_int.h"
#include "channel/proto.h"

/* Reads sender t again this turn (its hold drained, or the total did). */
static void unblock(pm__hub *h, pm__port *t)
{
    t->blocked_on = -1;
    t->left = 0;
    pm__hub_mark_busy(h, t);
}

static void write_frame(unsigned char *p, const pm__frame_hdr *f, const void *payload, size_t len)
{
    pm__frame_hdr copy = *f;
    copy.len = (uint32_t)len;
    pm__frame_encode(&copy, p);
    if (len > 0)
        memcpy(p + PM__FRAME_HDR_SIZE, payload, len);
}

/* A frame header from main to port p's current incarnation. */
pm__frame_hdr pm__hub_main_hdr(int type, const pm__port *p)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.src = PM__NODE_MAIN;
    f.dst = p->index;
    f.dst_inc = p->incarnation;
    return f;
}

/* The hold a queued frame is charged to: the sender's frames waiting
 * anywhere, main's, or the destination's answers. */
static void charge_of(pm__hub *h, pm__port *d, uint32_t charge, uint32_t **frames, size_t **bytes,
                      uint32_t **fds)
{
    if (charge == PM__CHARGE_ANSWER) {
        *frames = &d->ans_frames;
        *bytes = &d->ans_bytes;
        *fds = &d->ans_fds;
    } else if (charge == PM__CHARGE_LANE) {
        *frames = &d->note_frames;
        *bytes = &d->note_bytes;
        *fds = &d->note_fds;
    } else if (charge == PM__NODE_MAIN) {
        *frames = &h->main_held_frames;
        *bytes = &h->main_held_bytes;
        *fds = &h->main_held_fds;
    } else {
        *frames = &h->ports[charge].held_frames;
        *bytes = &h->ports[charge].held_bytes;
        *fds = &h->ports[charge].held_fds;
    }
}

/* Frees a frame that left d's queue (delivered or dropped). Wiped first:
 * freed heap memory is inherited by fork-mode workers as it is. A sender
 * held back by its bound is read again once its hold is half free
 * (hysteresis, so it does not flap on every frame); O(1) per frame. */
void pm__hub_dequeue(pm__hub *h, pm__port *d, pm__qframe *q)
{
    d->q_head = q->next;
    if (d->q_head == NULL)
        d->q_tail = NULL;
    if (q->waiter >= 0) {
        /* A place holder: its sender is read again now (d has room, or d
         * is gone and the sender's frame gets its notice), unless it was
         * read again meanwhile. A sender of a later incarnation held on d
         * for its own frame just tries once more. */
        pm__port *t = &h->ports[q->waiter];
        if (t->blocked_on == (int)d->index && t->left)
            unblock(h, t);
        free(q);
        return;
    }
    d->q_frames--;
    d->q_bytes -= q->len;
    h->queued_bytes -= q->len;
    if (q->credit_host != 0) /* delivered or dropped: the sender's window opens */
        pm__hub_link_credit(h, q->credit_host, q->credit_port, q->len);
    uint32_t *frames, *fds;
    size_t *bytes;
    charge_of(h, d, q->charge, &frames, &bytes, &fds);
    (*frames)--;
    *bytes -= q->len;
    if (q->fd >= 0) {
        (*fds)--;
        pm__close(q->fd); /* sent on (the socket holds its own reference) or dropped */
    }
    if (q->charge < h->nports) {
        pm__port *t = &h->ports[q->charge];
        if (t->blocked_on >= 0 && t->held_frames <= PM__HOLD_MAX_FRAMES / 2 &&
            t->held_bytes <= PM__HOLD_MAX_BYTES / 2 && t->held_fds <= PM__HOLD_MAX_FDS / 2)
            unblock(h, t);
    }
    explicit_bzero(q->data, q->len);
    free(q);
    /* Senders that waited for the total: all may try again (rare, so a
     * scan of the ports is fine here). */
    if (h->queued_full && h->queued_bytes <= PM__HUB_QUEUED_MAX_BYTES / 2) {
        h->queued_full = 0;
        for (unsigned i = 0; i < h->nports; i++) {
            pm__port *t = &h->ports[i];
            if (t->blocked_on >= 0 && t->held_frames < PM__HOLD_MAX_FRAMES &&
                t->held_bytes < PM__HOLD_MAX_BYTES && t->held_fds < PM__HOLD_MAX_FDS)
                unblock(h, t);
        }
    }
}

/* A large message's frame leaves for d: its record (fd and the next
 * sequence of d's channel) goes on d's socket first, then the announcement
 * with that sequence is written into the frame at buf (header and
 * PM__ANNOUNCE_SIZE bytes), so that d finds the record waiting when it
 * reads the frame. 0; -EAGAIN: d's socket is full (d does not take its
 * fds); -ETOOMANYREFS: the kernel refuses the fd for now, whatever d does
 * (ETOOMANYREFS: the supervisor's user has more fds in flight than its
 * RLIMIT_NOFILE, which any process of that user can cause, hub.h;
 * ENOBUFS, ENOMEM), so the frame's sender is told -EAGAIN and d is not
 * charged; -EBADMSG: d's end refuses (d shut its socket down). */
static int send_big(pm__port *d, unsigned char *buf, int fd, uint64_t big_len)
{
    uint32_t seq = pm__bigmsg_next(d->channel->tx_seq);
    int rc = pm__bigmsg_send(d->channel->sock, fd, seq);
    if (rc == -EAGAIN)
        return rc;
    if (rc == -ETOOMANYREFS || rc == -ENOBUFS || rc == -ENOMEM)
        return -ETOOMANYREFS;
    if (rc < 0)
        return -EBADMSG;
    d->channel->tx_seq = seq;
    pm__announce a = {big_len, seq};
    pm__announce_encode(&a, buf + PM__FRAME_HDR_SIZE);
    return 0;
}

/* A queued large message for d whose fd the kernel refused (send_big,
 * -ETOOMANYREFS): dropped, and its sender told -EAGAIN, as it would have
 * been had the refusal come when it was sent; d is not charged. A reply's
 * sender is not waiting for anything: its requester, d, is told. */
static void refuse_queued(pm__hub *h, pm__port *d, pm__qframe *q)
{
    pm__frame_hdr f;
    int ok = pm__frame_decode_header(q->data, q->len, PM__CHANNEL_MAX_FRAME, &f) == 0;
    pm__hub_dequeue(h, d, q);
    h->fd_refused++;
    if (!ok) /* cannot be: the hub wrote it */
        return;
    if (f.type == PM__FT_REPLY) {
        pm__hub_notice_at(h, d->index, d->incarnation, f.src_host, f.src, f.src_inc,
                          f.request_id, -EAGAIN);
        return;
    }
    uint32_t from = f.src_host == PM__HOST_LOCAL ? f.src : PM__REMOTE_NODE(f.src_host, f.src);
    pm__inflight e;
    if (f.type == PM__FT_REQUEST && !pm__hub_take_inflight(h, d, from, f.request_id, &e))
        return; /* answered already (it expired) */
    pm__hub_notice_at(h, from, f.src_inc, PM__HOST_LOCAL, d->index, d->incarnation, f.request_id,
                      -EAGAIN);
}

/* For pm__ring_scan: 0 while a frame of the sender's ring is a message or
 * a request to local port d without a large message's fd (the kind that
 * may wait in the sender's ring for d), 1 at anything else. The header is
 * decoded from a private copy: the sender may rewrite it meanwhile (and so
 * mislead only the decision about its own frames). */
int pm__hub_not_for(const void *rec, size_t len, void *arg)
{
    const pm__port *d = arg;
    unsigned char hdr[PM__FRAME_HDR_SIZE];
    pm__frame_hdr f;
    if (len < sizeof(hdr))
        return 1;
    memcpy(hdr, rec, sizeof(hdr));
    if (pm__frame_decode_header(hdr, len, PM__CHANNEL_MAX_FRAME, &f) < 0)
        return 1;
    return !((f.type == PM__FT_MSG || f.type == PM__FT_REQUEST) && (f.flags & PM__FF_MEMFD) == 0 &&
             f.dst_host == PM__HOST_LOCAL && f.dst == d->index);
}

/*
 * d's ring is full and nothing waits for it: may sender s wait with its
 * frame left in its own ring instead of a copy in d's queue? Only if every
 * frame s has published behind this one is for d too, so holding s back
 * delays no traffic of s to anyone else (the backpressure rule). Then a
 * place holder (no frame) goes into d's queue, which reads s again when d
 * has room, and s's doorbell is armed beyond what was scanned
 * (pm__hub_arm_idle), so a later frame of s for someone else is seen and s
 * is read again at once (pm__hub_port_service). A single-destination
 * stream to a slower reader so costs one copy per frame, from ring to
 * ring: queued, each frame would be copied three times (in, out, wiped)
 * through up to 4 MiB of heap per sender, and a hub slower than the reader
 * would never empty the queue again.
 * 1 when s waits so (the caller returns -EAGAIN), 0 to queue as usual.
 */
static int leave_in_ring(pm__hub *h, pm__port *s, pm__port *d, size_t total)
{
    s->scan_pos = 0;
    if (pm__ring_scan(&s->channel->rx, &s->scan_pos, pm__hub_not_for, d) != 0)
        return 0;
    pm__qframe *q = malloc(sizeof(*q));
    if (q == NULL)
        return 0;
    memset(q, 0, sizeof(*q));
    q->fd = -1;
    q->waiter = (int)s->index;
    q->need = (uint32_t)total;
    d->q_head = d->q_tail = q;
    d->stall_since_ms = pm__now_ms(); /* the drain timeout starts */
    d->drain_reported = 0;
    pm__hub_mark_timed(h, d);
    /* Ask d to ring our doorbell when it frees room; room already: flush
     * (which reads s again) this turn. */
    if (pm__ring_arm_space(&d->channel->tx, total) != 0)
        pm__hub_mark_busy(h, d);
    h->left_now = 1;
    h->left_waits++;
    return 1;
}

/* Puts a frame into d's ring, or d's queue when the ring is full (or
 * frames already wait: order per sender and destination is kept), charged
 * as `charge` says. 0; -EAGAIN: the sender's hold (or the total) is at its
 * bound, the sender waits; -ENOBUFS: an answer finds the requester's
 * answers (or the total) at its bound, the caller drops and counts it;
 * -EBADMSG: d's ring is corrupt; -EHOSTDOWN: d has no ring. With fd >= 0
 * the frame announces a large message (its payload is rewritten when it
 * leaves, send_big) and the fd is the hub's on success; -ETOOMANYREFS:
 * the kernel refused the fd for now (send_big): nothing is queued, and the
 * caller answers the frame's sender -EAGAIN without charging d. */
static int push_any(pm__hub *h, pm__port *d, const pm__frame_hdr *f, const void *payload,
                    size_t len, uint32_t charge, int fd, uint64_t big_len)
{
    size_t total = PM__FRAME_HDR_SIZE + len;
    if (d->channel == NULL)
        return -EHOSTDOWN;
    if (d->q_head == NULL) {
        void *p;
        int rc = pm__ring_reserve(&d->channel->tx, total, &p);
        if (rc == 0) {
            write_frame(p, f, payload, len);
            if (fd >= 0) {
                /* Refused: -EAGAIN queues it below, the rest goes back
                 * to the caller (the `rc != -EAGAIN` return). */
                rc = send_big(d, p, fd, big_len);
                if (rc < 0)
                    pm__ring_unreserve(&d->channel->tx);
                h->fd_refused += rc == -ETOOMANYREFS;
            }
        }
        if (rc == 0) {
            pm__ring_commit(&d->channel->tx, total);
            pm__hub_mark_dirty(h, d);
            pm__close(fd);
            return 0;
        }
        if (rc != -EAGAIN)
            return rc;
        /* Set only around the push of leave_from's own frame, charged to
         * it, without a large message (hub_route.c pm__hub_relay). */
        if (h->leave_from != NULL && leave_in_ring(h, h->leave_from, d, total))
            return -EAGAIN;
    }
    int full = charge == PM__CHARGE_ANSWER || charge == PM__CHARGE_LANE ? -ENOBUFS : -EAGAIN;
    uint32_t *frames, *fds;
    size_t *bytes;
    charge_of(h, d, charge, &frames, &bytes, &fds);
    if (charge == PM__CHARGE_LANE ? *frames >= PM__LANE_NOTES_MAX
                                  : *frames >= PM__HOLD_MAX_FRAMES ||
                                        *bytes + total > PM__HOLD_MAX_BYTES ||
                                        (fd >= 0 && *fds >= PM__HOLD_MAX_FDS))
        return full;
    if (charge != PM__CHARGE_LANE && h->queued_bytes + total > PM__HUB_QUEUED_MAX_BYTES) {
        h->queued_full = 1;
        return full;
    }
    pm__qframe *q = malloc(sizeof(*q) + total);
    if (q == NULL)
        return full;
    q->next = NULL;
    q->len = (uint32_t)total;
    q->charge = charge;
    q->fd = fd;
    q->big_len = big_len;
    q->credit_host = 0;
    q->credit_port = 0;
    q->waiter = -1;
    write_frame(q->data, f, payload, len);
    h->frames_queued++;
    if (d->q_tail != NULL) {
        d->q_tail->next = q;
    } else {
        d->q_head = q;
        d->stall_since_ms = pm__now_ms(); /* the drain timeout starts */
        d->drain_reported = 0;
        pm__hub_mark_timed(h, d);
    }
    d->q_tail = q;
    d->q_frames++;
    d->q_bytes += total;
    h->queued_bytes += total;
    (*frames)++;
    *bytes += total;
    if (fd >= 0)
        (*fds)++;
    /* Ask the worker to ring our doorbell when it frees room. */
    if (pm__ring_arm_space(&d->channel->tx, total) != 0)
        pm__hub_mark_busy(h, d); /* room already: flush this turn */
    return 0;
}

int pm__hub_push(pm__hub *h, pm__port *d, const pm__frame_hdr *f, const void *payload, size_t len,
                uint32_t charge)
{
    return push_any(h, d, f, payload, len, charge, -1, 0);
}

int pm__hub_push_fd(pm__hub *h, pm__port *d, const pm__frame_hdr *f, int fd, uint64_t big_len,
                    uint32_t charge)
{
    unsigned char ann[PM__ANNOUNCE_SIZE] = {0}; /* written when it leaves */
    pm__frame_hdr g = *f;
    g.flags = PM__FF_MEMFD;
    int rc = push_any(h, d, &g, ann, sizeof(ann), charge, fd, big_len);
    if (rc == 0 && d->big_owed < PM__BIG_OWED_MAX)
        d->big_owed++; /* d may refuse it: port.c, refusal */
    return rc;
}

/* The room a queued entry needs in its destination's ring. */
static uint32_t qneed(const pm__qframe *q)
{
    return q->waiter >= 0 ? q->need : q->len;
}

void pm__hub_flush(pm__hub *h, pm__port *d)
{
    int moved = 0;
    d->sock_full = 0;
    for (;;) {
        while (d->q_head != NULL) {
            pm__qframe *q = d->q_head;
            void *p;
            if (q->waiter >= 0) {
                /* Its sender is read again only once its frame fits. Let
                 * go early (d serviced because it rang or sent, not because
                 * it read), the sender would find d still full and wait
                 * again behind a new place holder with a fresh drain clock:
                 * a d that never reads but keeps ringing would never be
                 * reported not draining, and each time the hub would scan
                 * the sender's ring again. */
                int rc = pm__ring_reserve(&d->channel->tx, q->need, &p);
                if (rc == -EAGAIN)
                    break;
                if (rc < 0) {
                    h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
                    return;
                }
                pm__ring_unreserve(&d->channel->tx);
                pm__hub_dequeue(h, d, q); /* reads its sender again */
                continue;
            }
            int rc = pm__ring_reserve(&d->channel->tx, q->len, &p);
            if (rc == -EAGAIN)
                break;
            if (rc < 0) {
                h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
                return;
            }
            memcpy(p, q->data, q->len);
            if (q->fd >= 0 && (rc = send_big(d, p, q->fd, q->big_len)) < 0) {
                pm__ring_unreserve(&d->channel->tx);
                if (rc == -ETOOMANYREFS) {
                    refuse_queued(h, d, q);
                    continue;
                }
                if (rc != -EAGAIN) {
                    h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
                    return;
                }
                /* d has not taken the fds already sent to it. Its ring
                 * has room, so no doorbell will say when it does: the
                 * owner waits for d's socket to become writable (d took a
                 * record) and services d again then. Retrying every turn
                 * instead would spin the supervisor for as long as d does
                 * not read. */
                d->sock_full = 1;
                break;
            }
            pm__ring_commit(&d->channel->tx, q->len);
            pm__hub_mark_dirty(h, d);
            moved = 1;
            pm__hub_dequeue(h, d, q);
        }
        if (d->q_head == NULL) {
            pm__ring_disarm_space(&d->channel->tx);
            break;
        }
        if (d->sock_full)
            break;
        /* Publish what we wrote so the worker can drain it, then wait for
         * its release unless room appeared meanwhile. */
        pm__ring_publish(&d->channel->tx);
        d->dirty = 0;
        if (pm__ring_arm_space(&d->channel->tx, qneed(d->q_head)) <= 0)
            break;
    }
    /* Progress restarts the drain timeout; an empty queue stops it. */
    if (d->q_head == NULL) {
        d->stall_since_ms = 0;
        d->drain_reported = 0;
    } else if (moved) {
        d->stall_since_ms = pm__now_ms();
        d->drain_reported = 0;
    }
}

/* Tells `to` (a port, or main) that its frame about `about` could not be
 * delivered. A notice never waits: charged to `to`'s answers, dropped and
 * counted past their bound. */
void pm__hub_notice_at(pm__hub *h, uint32_t to, uint64_t to_inc, uint16_t about_host,
                       uint32_t about, uint64_t about_inc, uint64_t request_id, int err)
{
    if (PM__IS_REMOTE_NODE(to)) {
        /* A requester on another host: back over its link. */
        if (about_host == PM__HOST_LOCAL)
            h->up->link_notice(h, to, to_inc, about, about_inc, request_id, err);
        return;
    }
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.src_host = about_host;
    n.src = about;
    n.src_inc = about_inc;
    n.dst = to;
    n.dst_inc = to_inc;
    n.request_id = request_id;
    n.error = err;
    if (to == PM__NODE_MAIN) {
        h->up->deliver_main(h, &n, NULL);
        return;
    }
    if (to >= h->nports)
        return;
    pm__port *p = &h->ports[to];
    if (p->channel == NULL || p->incarnation != to_inc) {
        h->notices_dropped++;
        return;
    }
    p->undeliverable++;
    int rc = pm__hub_push(h, p, &n, NULL, 0, PM__CHARGE_ANSWER);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, p->index, PM_REASON_CORRUPT_RING);
    if (rc < 0)
        h->notices_dropped++;
}
