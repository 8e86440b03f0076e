/* SPDX-License-Identifier: MIT */
/* lanebook.c - the broker's book of direct lanes: pair counts, lanes, their ends. */
#include "base/internal.h"
#include "lanebook.h"

#include <stdlib.h>
#include <string.h>

int pm__lanebook_init(pm__lanebook *b, unsigned nslots)
{
    memset(b, 0, sizeof(*b));
    if (nslots == 0)
        return -EINVAL;
    b->nslots = nslots;
    /* Each lane has two ends: the book never holds more than this. */
    b->nlanes = (size_t)nslots * PM__LANEBOOK_PER_WORKER / 2 + 1;
    b->lanes = calloc(b->nlanes, sizeof(*b->lanes));
    b->index_used = calloc(nslots, sizeof(*b->index_used));
    b->at = calloc((size_t)nslots * PM__LANEBOOK_PER_WORKER, sizeof(*b->at));
    b->counts = calloc((size_t)nslots * PM__LANEBOOK_COUNTED, sizeof(*b->counts));
    b->next_gen = 1;
    if (b->lanes == NULL || b->index_used == NULL || b->at == NULL || b->counts == NULL) {
        pm__lanebook_free(b);
        return -ENOMEM;
    }
    return 0;
}

void pm__lanebook_free(pm__lanebook *b)
{
    free(b->lanes);
    free(b->index_used);
    free(b->at);
    free(b->counts);
    memset(b, 0, sizeof(*b));
}

static int same_end(const pm__lanebook_end *e, uint32_t slot, uint64_t inc)
{
    return e->slot == slot && e->inc == inc;
}

/* The lane at index k of slot, or NULL. */
static pm__lanebook_lane *lane_at(const pm__lanebook *b, uint32_t slot, unsigned k)
{
    uint32_t i = b->at[(size_t)slot * PM__LANEBOOK_PER_WORKER + k];
    return i == 0 ? NULL : &b->lanes[i - 1];
}

/* Both ends' indexes say which lane they hold (or 0). */
static void set_at(pm__lanebook *b, const pm__lanebook_lane *l, uint32_t v)
{
    for (int e = 0; e < 2; e++)
        b->at[(size_t)l->end[e].slot * PM__LANEBOOK_PER_WORKER + l->end[e].index] = v;
}

/* A lane leaves the book: its indexes free, its entry free. */
static void take_out(pm__lanebook *b, pm__lanebook_lane *l)
{
    for (int e = 0; e < 2; e++)
        b->index_used[l->end[e].slot] &= ~(1u << l->end[e].index);
    set_at(b, l, 0);
    l->gen = 0;
}

const pm__lanebook_lane *pm__lanebook_find(const pm__lanebook *b, uint32_t a, uint64_t ainc,
                                           uint32_t b_slot, uint64_t binc)
{
    if (a >= b->nslots || b_slot >= b->nslots)
        return NULL;
    /* Only a's own lanes: at most PER_WORKER steps (a worker may send a
     * marker or a reply on every frame it writes: hub_lane.c). */
    for (unsigned k = 0; k < PM__LANEBOOK_PER_WORKER; k++) {
        const pm__lanebook_lane *l = lane_at(b, a, k);
        if (l == NULL)
            continue;
        if ((same_end(&l->end[0], a, ainc) && same_end(&l->end[1], b_slot, binc)) ||
            (same_end(&l->end[1], a, ainc) && same_end(&l->end[0], b_slot, binc)))
            return l;
    }
    return NULL;
}

unsigned pm__lanebook_held(const pm__lanebook *b, uint32_t slot)
{
    return slot < b->nslots ? (unsigned)__builtin_popcount(b->index_used[slot]) : 0;
}

/* The lowest free index of slot, or -1. */
static int free_index(const pm__lanebook *b, uint32_t slot)
{
    for (unsigned k = 0; k < PM__LANEBOOK_PER_WORKER; k++)
        if ((b->index_used[slot] & (1u << k)) == 0)
            return (int)k;
    return -1;
}

/* The count of the pair in slot's row, made if missing (taking the place
 * of the entry with the fewest frames). */
static pm__lanebook_tally *count_of(pm__lanebook *b, uint32_t slot, uint64_t inc, uint32_t peer,
                                    uint64_t peer_inc)
{
    pm__lanebook_tally *row = &b->counts[(size_t)slot * PM__LANEBOOK_COUNTED];
    pm__lanebook_tally *least = &row[0];
    for (unsigned k = 0; k < PM__LANEBOOK_COUNTED; k++) {
        pm__lanebook_tally *c = &row[k];
        if (c->frames != 0 && c->peer == peer && c->peer_inc == peer_inc && c->inc == inc)
            return c;
        if (c->frames < least->frames)
            least = c;
    }
    *least = (pm__lanebook_tally){.peer = peer, .inc = inc, .peer_inc = peer_inc, .frames = 0};
    return least;
}

int pm__lanebook_count(pm__lanebook *b, uint32_t a, uint64_t ainc, uint32_t b_slot, uint64_t binc)
{
    if (a >= b->nslots || b_slot >= b->nslots || a == b_slot)
        return 0;
    /* The pair is counted in the row of its lower slot, so both
     * directions add up in one place. */
    uint32_t lo = a < b_slot ? a : b_slot, hi = a < b_slot ? b_slot : a;
    uint64_t loinc = a < b_slot ? ainc : binc, hiinc = a < b_slot ? binc : ainc;
    pm__lanebook_tally *c = count_of(b, lo, loinc, hi, hiinc);
    if (c->frames < UINT32_MAX)
        c->frames++;
    if (c->frames < PM__LANEBOOK_AFTER)
        return 0;
    /* A pair with a lane whose frames still take the hub (large ones):
     * counted again from 0, so the book is searched once per
     * PM__LANEBOOK_AFTER of them, not per frame. Before the free indexes
     * are looked at: with an end that holds PER_WORKER lanes, a count
     * that never restarted would keep its entry for good, never the one
     * with the fewest frames, and the row's other peers would share what
     * is left of it (pm__lanebook_add clears a count for the same
     * reason). */
    if (pm__lanebook_find(b, lo, loinc, hi, hiinc) != NULL) {
        c->frames = 0;
        return 0;
    }
    if (free_index(b, lo) < 0 || free_index(b, hi) < 0)
        return 0; /* earned, and given as soon as both have an index free */
    return 1;
}

int pm__lanebook_add(pm__lanebook *b, uint32_t a, uint64_t ainc, uint32_t b_slot, uint64_t binc,
                     pm__lanebook_lane *out)
{
    if (a >= b->nslots || b_slot >= b->nslots || a == b_slot)
        return -EINVAL;
    if (pm__lanebook_find(b, a, ainc, b_slot, binc) != NULL)
        return -EEXIST;
    int ia = free_index(b, a), ib = free_index(b, b_slot);
    if (ia < 0 || ib < 0)
        return -ENOSPC;
    pm__lanebook_lane *l = NULL;
    for (size_t i = 0; i < b->nlanes && l == NULL; i++)
        if (b->lanes[i].gen == 0)
            l = &b->lanes[i];
    if (l == NULL)
        return -ENOSPC; /* cannot be: every lane holds an index at each end */
    pm__lanebook_end ea = {a, ainc, (uint32_t)ia}, eb = {b_slot, binc, (uint32_t)ib};
    l->end[0] = a < b_slot ? ea : eb;
    l->end[1] = a < b_slot ? eb : ea;
    /* Generations are never 0 (a free entry) and never repeat within the
     * book's life: 2^32 - 1 lanes made. */
    l->gen = b->next_gen++;
    if (b->next_gen == 0)
        b->next_gen = 1;
    b->index_used[a] |= 1u << ia;
    b->index_used[b_slot] |= 1u << ib;
    set_at(b, l, (uint32_t)(l - b->lanes) + 1);
    /* The pair's count has done its work: its frames take the lane now,
     * so left in the row it would stay there for the life of the lane with
     * the most frames, never replaced, and the worker's other peers would
     * share what is left of the row (two of them taking turns in the last
     * entry never reach PM__LANEBOOK_AFTER). */
    uint32_t lo = l->end[0].slot, hi = l->end[1].slot;
    pm__lanebook_tally *row = &b->counts[(size_t)lo * PM__LANEBOOK_COUNTED];
    for (unsigned k = 0; k < PM__LANEBOOK_COUNTED; k++)
        if (row[k].peer == hi && row[k].inc == l->end[0].inc &&
            row[k].peer_inc == l->end[1].inc)
            row[k].frames = 0;
    *out = *l;
    return 0;
}

int pm__lanebook_cancel(pm__lanebook *b, uint32_t gen)
{
    for (size_t i = 0; gen != 0 && i < b->nlanes; i++) {
        pm__lanebook_lane *l = &b->lanes[i];
        if (l->gen != gen)
            continue;
        take_out(b, l);
        return 1;
    }
    return 0;
}

unsigned pm__lanebook_end_of(pm__lanebook *b, uint32_t slot, uint64_t inc, pm__lanebook_lane *out,
                             unsigned cap)
{
    if (slot >= b->nslots)
        return 0;
    unsigned n = 0;
    for (unsigned k = 0; k < PM__LANEBOOK_PER_WORKER && n < cap; k++) {
        pm__lanebook_lane *l = lane_at(b, slot, k);
        if (l == NULL || !(same_end(&l->end[0], slot, inc) || same_end(&l->end[1], slot, inc)))
            continue;
        out[n++] = *l;
        take_out(b, l);
    }
    if (n == cap)
        return n; /* maybe more: the caller calls again (lanebook.h) */
    /* Its counts: in its own row, and as a peer in the others'. */
    for (size_t i = 0; i < (size_t)b->nslots * PM__LANEBOOK_COUNTED; i++) {
        pm__lanebook_tally *c = &b->counts[i];
        uint32_t owner = (uint32_t)(i / PM__LANEBOOK_COUNTED);
        if ((owner == slot && c->inc == inc) || (c->peer == slot && c->peer_inc == inc))
            c->frames = 0;
    }
    return n;
}
