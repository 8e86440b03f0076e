/* SPDX-License-Identifier: MIT */
/* nodelane.c - a worker's table of direct lanes: adopt, revoke, find, the requests each brought. */
#include "base/internal.h"
#include "nodelane.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>

static void slot_clear(pm__node_lane *e)
{
    memset(e, 0, sizeof(*e));
    e->efd_self = -1;
    e->efd_peer = -1;
}

void pm__node_lanes_init(pm__node_lanes *t)
{
    t->live = 0;
    t->husk = NULL;
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        slot_clear(&t->at[k]);
}

int pm__node_lanes_adopt(pm__node_lanes *t, const pm__lane_offer *o, const int fds[3],
                         uint32_t self_slot, uint64_t self_inc)
{
    int rc = -EBUSY;
    pm__lane *l = NULL;
    if (o->index >= PM__LANES_MAX || t->at[o->index].lane != NULL)
        goto fail;
    rc = -ENOMEM;
    if ((l = malloc(sizeof(*l))) == NULL)
        goto fail;
    pm__lane_who who = {self_slot, self_inc, o->peer_slot, o->peer_inc};
    /* The lane's ring ends wake the peer through its doorbell and park on
     * ours (ring.h: wake_fd, park_fd). */
    rc = pm__lane_attach(l, fds[0], o->end, &who, fds[2], fds[1]);
    if (rc < 0)
        goto fail;
    pm__close(fds[0]); /* mapped: the fd is not needed any more */
    pm__node_lane *e = &t->at[o->index];
    slot_clear(e);
    e->lane = l;
    e->gen = o->gen;
    e->efd_self = fds[1];
    e->efd_peer = fds[2];
    t->live++;
    return 0;
fail:
    free(l);
    for (int k = 0; k < 3; k++)
        pm__close(fds[k]);
    return rc;
}

static void drop(pm__node_lanes *t, pm__node_lane *e)
{
    pm__lane_detach(e->lane);
    free(e->lane);
    pm__close(e->efd_self);
    pm__close(e->efd_peer);
    slot_clear(e);
    t->live--;
}

/* One revoked lane: what it still holds, then gone. */
static void finish(pm__node_lanes *t, pm__node_lane *e, const pm__node_lanes_sink *sink)
{
    pm__lane *l = e->lane;
    uint64_t waited = l->req_out;
    (void)pm__lane_revoke(l);
    pm__frame_hdr h;
    const void *p;
    while (e->marked && pm__lane_recv(l, &h, &p) == 1) {
        /* The reply to the request waited on is one of these frames when
         * it was written before the revocation. */
        if (h.type == PM__FT_REPLY && h.request_id == waited)
            waited = 0;
        sink->frame(sink->arg, &h, p);
    }
    if (waited != 0)
        sink->lost_request(sink->arg, e->lane->who.peer_slot, waited);
    drop(t, e);
}

unsigned pm__node_lanes_revoked(pm__node_lanes *t, const _Atomic uint32_t *words,
                                const pm__node_lanes_sink *sink)
{
    return pm__node_lanes_revoked_if(t, words, sink, 1);
}

unsigned pm__node_lanes_revoked_if(pm__node_lanes *t, const _Atomic uint32_t *words,
                                   const pm__node_lanes_sink *sink, int unmarked_too)
{
    return pm__node_lanes_revoked_but(t, words, sink, unmarked_too, NULL);
}

unsigned pm__node_lanes_revoked_but(pm__node_lanes *t, const _Atomic uint32_t *words,
                                    const pm__node_lanes_sink *sink, int unmarked_too,
                                    const pm__node_lane *keep)
{
    unsigned n = 0;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &t->at[k];
        /* Acquire: pairs with the supervisor's release of the word, so a
         * frame it sent after it is seen after it too. */
        if (e == keep || e->lane == NULL || (!e->marked && !unmarked_too) ||
            !pm__node_lane_revoked_by(atomic_load_explicit(&words[k], memory_order_acquire), e->gen))
            continue;
        finish(t, e, sink);
        n++;
    }
    return n;
}

unsigned pm__node_lanes_revoked_at(pm__node_lanes *t, const _Atomic uint32_t *words,
                                   const pm__node_lanes_sink *sink, unsigned k)
{
    pm__node_lane *e = k < PM__LANES_MAX ? &t->at[k] : NULL;
    /* Acquire, as in pm__node_lanes_revoked_but. */
    if (e == NULL || e->lane == NULL ||
        !pm__node_lane_revoked_by(atomic_load_explicit(&words[k], memory_order_acquire), e->gen))
        return 0;
    finish(t, e, sink);
    return 1;
}

_Static_assert(offsetof(pm__lane, buf) + PM__LANE_MAX_FRAME == sizeof(pm__lane),
               "pm__node_lanes_revoked_kept copies all but the buffer, the last member");

unsigned pm__node_lanes_revoked_kept(pm__node_lanes *t, const _Atomic uint32_t *words,
                                     const pm__node_lanes_sink *sink, unsigned k)
{
    pm__node_lane *e = k < PM__LANES_MAX ? &t->at[k] : NULL;
    /* Acquire, as in pm__node_lanes_revoked_but. One husk at a time: a
     * second last message needs a receive, which lets the first go. */
    if (e == NULL || e->lane == NULL || t->husk != NULL ||
        !pm__node_lane_revoked_by(atomic_load_explicit(&words[k], memory_order_acquire), e->gen))
        return 0;
    /* Everything but the buffer (the struct's last member) is the lane's
     * state, with no pointer into the struct itself: the copy is the lane
     * from now on; finishing it reads its last frames into the copy's own
     * buffer, never over the caller's bytes. */
    pm__lane *copy = malloc(sizeof(*copy));
    if (copy == NULL)
        return 0;
    memcpy(copy, e->lane, offsetof(pm__lane, buf));
    t->husk = e->lane;
    e->lane = copy;
    finish(t, e, sink);
    return 1;
}

void pm__node_lanes_drop_husk(pm__node_lanes *t)
{
    free(t->husk);
    t->husk = NULL;
}

pm__node_lane *pm__node_lanes_to(pm__node_lanes *t, uint32_t slot, uint64_t inc)
{
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &t->at[k];
        if (e->lane != NULL && e->lane->who.peer_slot == slot &&
            (inc == 0 || e->lane->who.peer_inc == inc))
            return e;
    }
    return NULL;
}

int pm__node_lane_asked(pm__node_lane *e, uint64_t request_id)
{
    if (e->nasked >= PM__LANE_ASKED_MAX) {
        /* The oldest is forgotten (a request the application never
         * answers must not stop the lane's later ones): if it is answered
         * after all, its reply takes the hub, which relays it to the lane's
         * requester as a LANE_REPLY, and it still arrives. */
        memmove(&e->asked[0], &e->asked[1], (PM__LANE_ASKED_MAX - 1) * sizeof(e->asked[0]));
        e->nasked--;
        e->asked_dropped++;
    }
    e->asked[e->nasked++] = request_id;
    return 0;
}

int pm__node_lane_answer(pm__node_lane *e, uint64_t request_id)
{
    for (unsigned i = 0; i < e->nasked; i++) {
        if (e->asked[i] != request_id)
            continue;
        e->asked[i] = e->asked[--e->nasked];
        return 1;
    }
    return 0;
}

void pm__node_lanes_close(pm__node_lanes *t)
{
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        if (t->at[k].lane != NULL)
            drop(t, &t->at[k]);
    pm__node_lanes_drop_husk(t);
}
