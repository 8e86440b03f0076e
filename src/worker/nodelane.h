/* SPDX-License-Identifier: MIT */
/*
 * nodelane.h - a worker's direct lanes (doc/design.md, "Direct lanes"):
 * the table of the lanes its supervisor handed it, numbered as the
 * supervisor numbered them; the revocations it finds in its control block
 * (each lane's frames written before it handed on, the request waiting on
 * it failed); the lane to a given peer; the requests received on each lane
 * and not yet answered (a reply takes the lane its request came by, and
 * only that one). The node's send, receive and wait (node_messaging.c)
 * are built on these; nothing here waits or chooses a path.
 */
#ifndef PM_NODELANE_H
#define PM_NODELANE_H

#include <stdatomic.h>
#include <stdint.h>

#include "channel/lane.h"
#include "channel/laneoffer.h"

/* Requests one lane may have brought and this worker not yet answered;
 * one more makes the oldest forgotten and counted (its reply, if it ever
 * comes, takes the hub, which relays it as a LANE_REPLY: it still
 * arrives). */
#define PM__LANE_ASKED_MAX 64u

typedef struct pm__node_lane {
    pm__lane *lane;   /* NULL: the index is free */
    uint32_t gen;
    int efd_self;     /* this end's doorbell: the peer writes it, we poll it */
    int efd_peer;     /* the peer's doorbell: we write it */
    int marked;       /* the peer's switch-over marker was taken: the lane may be read */
    int mark_sent;    /* ours is in the up ring: we may write on the lane, counts start */
    int on_lane;      /* our frames to the peer take the lane now (else the hub) */
    int broken;       /* the peer broke a ring of the lane: neither read nor written */
    int bell_hung;    /* the peer closed its end of our doorbell: read, never waited on */
    uint64_t switch_after_ms; /* a send waits for the switch to the lane again from then */
    uint32_t switch_backoff_ms; /* the pause after the last wait that missed, 0 after a switch */
    unsigned nasked;
    uint64_t asked[PM__LANE_ASKED_MAX];
    uint64_t asked_dropped;
} pm__node_lane;

typedef struct pm__node_lanes {
    pm__node_lane at[PM__LANES_MAX];
    unsigned live; /* lanes attached */
    /* A lane finished while the caller's last message was in its buffer
     * (pm__node_lanes_revoked_kept): its memory, kept until that message
     * is let go (pm__node_lanes_drop_husk); NULL. */
    pm__lane *husk;
} pm__node_lanes;

/* What a revocation hands back (pm__node_lanes_revoked): every frame the
 * peer wrote before it, in order (payload in the lane's private buffer,
 * valid during the call), then the request this worker was waiting on
 * over the lane, if any (it fails: -EHOSTDOWN). */
typedef struct pm__node_lanes_sink {
    void (*frame)(void *arg, const pm__frame_hdr *h, const void *payload);
    void (*lost_request)(void *arg, uint32_t peer_slot, uint64_t request_id);
    void *arg;
} pm__node_lanes_sink;

/* A lane of generation gen is revoked once its index's word holds gen or
 * a later generation. The supervisor makes a lane at an index only after
 * the index's last lane was revoked, so the words of one index only grow
 * (serial numbers, wrapping after 2^32 lanes; 0: never revoked). A later
 * word is what a worker sees when this lane's wake-up was lost (no memory
 * in the supervisor; dropped at main's bound before stop 45) and the
 * index's next lane was revoked too before it looked. */
static inline int pm__node_lane_revoked_by(uint32_t word, uint32_t gen)
{
    return word != 0 && (int32_t)(word - gen) >= 0;
}

/* An empty table (every index free, fds -1). */
void pm__node_lanes_init(pm__node_lanes *t);

/* Attaches the lane the supervisor offered (o, decoded) with the fds of
 * its record (memfd, this end's doorbell, the peer's doorbell): the memfd
 * is mapped and closed, the doorbells kept. 0; -EBUSY when index o->index
 * still holds a lane (the caller reads the revocations first: the
 * supervisor wrote the old lane's before offering a new one there);
 * -ENOMEM; or attach's error. On any failure all three fds are closed. */
int pm__node_lanes_adopt(pm__node_lanes *t, const pm__lane_offer *o, const int fds[3],
                         uint32_t self_slot, uint64_t self_inc);

/* Revokes every lane whose word in words (the control block's
 * lane_revoked) says so (pm__node_lane_revoked_by): hands its frames written before
 * the revocation to sink->frame (only once marked: before its marker
 * the peer's lane frames cannot be in order with the hub's, and the
 * marker died with the peer), its waited-on request to
 * sink->lost_request, then detaches it and closes its doorbells. Returns
 * how many were revoked. */
unsigned pm__node_lanes_revoked(pm__node_lanes *t, const _Atomic uint32_t *words,
                                const pm__node_lanes_sink *sink);
/* The same, leaving unmarked lanes as they are unless unmarked_too: the
 * peer's marker may still be on its way in the hub ring, ahead of the
 * revocation's wake-up frame; the lane is finished (its frames kept)
 * when that frame is taken, or before the next offer at its index
 * (pm__node_lanes_revoked_at). */
unsigned pm__node_lanes_revoked_if(pm__node_lanes *t, const _Atomic uint32_t *words,
                                   const pm__node_lanes_sink *sink, int unmarked_too);
/* Lane k alone, marked or not, if its word says so: the caller took a
 * frame written after that lane's revocation (its wake-up, or an offer
 * for index k), so every frame its dead peer sent through the hub, a
 * marker among them, is already behind the worker. 1 finished, 0 not. */
unsigned pm__node_lanes_revoked_at(pm__node_lanes *t, const _Atomic uint32_t *words,
                                   const pm__node_lanes_sink *sink, unsigned k);
/* The same as pm__node_lanes_revoked_if, never finishing keep (the lane
 * whose buffer still holds the caller's last message: skipped by this
 * very pass, so a revocation of it written while the others are finished
 * cannot free it; a review of stop 42). keep may be NULL. */
unsigned pm__node_lanes_revoked_but(pm__node_lanes *t, const _Atomic uint32_t *words,
                                    const pm__node_lanes_sink *sink, int unmarked_too,
                                    const pm__node_lane *keep);

/* Lane k alone, as pm__node_lanes_revoked_at, when it is the lane the
 * caller's last message came by, which may still be in use (a send of
 * those bytes, after a receive): the lane is finished on a copy of its
 * state, and its own memory, the buffer holding the message, becomes the
 * husk. 1 finished; 0 not revoked, no memory, or a husk already held. */
unsigned pm__node_lanes_revoked_kept(pm__node_lanes *t, const _Atomic uint32_t *words,
                                     const pm__node_lanes_sink *sink, unsigned k);
/* The caller let its last message go: the husk, if any, is freed. */
void pm__node_lanes_drop_husk(pm__node_lanes *t);

/* The live lane to incarnation inc of slot (inc 0: whichever holds it),
 * or NULL. */
pm__node_lane *pm__node_lanes_to(pm__node_lanes *t, uint32_t slot, uint64_t inc);

/* A request came on e's lane: remembered for the reply (0; the oldest
 * forgotten past PM__LANE_ASKED_MAX). Its reply: 1 and forgotten when e
 * brought it, 0 when not (the reply takes the hub; the hub judges it). */
int pm__node_lane_asked(pm__node_lane *e, uint64_t request_id);
int pm__node_lane_answer(pm__node_lane *e, uint64_t request_id);

/* Detaches every lane and closes its doorbells (the node closes). */
void pm__node_lanes_close(pm__node_lanes *t);

#endif /* PM_NODELANE_H */
