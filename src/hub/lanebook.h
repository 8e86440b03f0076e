/* SPDX-License-Identifier: MIT */
/*
 * lanebook.h - the broker's book of direct lanes (doc/design.md, "Direct
 * lanes"): which pairs of local workers talk enough to be given a lane,
 * which lanes exist, and which end when an incarnation ends. Pure: no
 * system call, no memory of the lanes themselves (channel/lane.h makes
 * them; the supervisor keeps no fd and no mapping of one).
 *
 * A lane joins two incarnations, never slots: it ends with either. Each
 * worker numbers its lanes by an index (0 .. PM__LANEBOOK_PER_WORKER - 1),
 * the slot of its control block where the supervisor writes the
 * revocation of that lane (the lane's generation: a number no other lane
 * of this book ever had). An index is free again as soon as its lane is
 * revoked: the worker finds the revocation word written before any later
 * frame of the supervisor's naming that index, and finishes with the old
 * lane first.
 */
#ifndef PM_LANEBOOK_H
#define PM_LANEBOOK_H

#include <stddef.h>
#include <stdint.h>

#include "channel/lane.h"

/* Lanes one worker holds at most; past it, its traffic takes the hub. */
#define PM__LANEBOOK_PER_WORKER PM__LANES_MAX
/* Frames the hub relays between a pair (both ways) before it offers them
 * a lane: a pair that exchanged a handful of frames pays no lane (132 KiB
 * of memory, six fds passed, a set-up). */
#define PM__LANEBOOK_AFTER 64u
/* Peers whose traffic each worker's row counts at once; a new peer takes
 * the place of the one with the fewest frames, the first of them in the
 * row. An entry with no frames is unused (new, or its pair's count
 * cleared when the pair got its lane or an end of it ended), so a new
 * peer takes the first unused entry when there is one, and a pair whose
 * count was cleared is counted again like a new one. The choices follow
 * from the calls alone: the same calls give the same book. */
#define PM__LANEBOOK_COUNTED 4u

typedef struct pm__lanebook_end {
    uint32_t slot;
    uint64_t inc;
    uint32_t index; /* the lane's index in that worker's table */
} pm__lanebook_end;

typedef struct pm__lanebook_lane {
    uint32_t gen; /* 0: the entry is free */
    pm__lanebook_end end[2]; /* end[0] is the lower slot: it writes ring 0 (lane.h) */
} pm__lanebook_lane;

typedef struct pm__lanebook_tally {
    uint32_t peer;
    uint64_t inc, peer_inc;
    uint32_t frames; /* 0: unused */
} pm__lanebook_tally;

typedef struct pm__lanebook {
    unsigned nslots;
    pm__lanebook_lane *lanes; /* nslots * PER_WORKER / 2 entries */
    size_t nlanes;
    uint32_t *index_used;        /* per slot: a bit per index in use */
    uint32_t *at;                /* per slot and index: its lane's entry + 1 (0: none),
                                    so a lookup costs PER_WORKER steps, not the book */
    pm__lanebook_tally *counts;  /* per slot: COUNTED entries */
    uint32_t next_gen;
} pm__lanebook;

/* A book for nslots slots: 0 or -ENOMEM (-EINVAL for 0 slots). */
int pm__lanebook_init(pm__lanebook *b, unsigned nslots);
void pm__lanebook_free(pm__lanebook *b);

/* One frame relayed between incarnation ainc of slot a and binc of slot b
 * (either way). 1 when the pair has now earned a lane: it has none, both
 * have a free index, and its count reached PM__LANEBOOK_AFTER (the caller
 * then makes the lane and calls pm__lanebook_add); else 0. A pair that
 * has a lane (its large frames still take the hub) is counted again from
 * 0 whenever its count reaches PM__LANEBOOK_AFTER. */
int pm__lanebook_count(pm__lanebook *b, uint32_t a, uint64_t ainc, uint32_t b_slot, uint64_t binc);

/* Books a lane between the two incarnations: *out says both ends (lower
 * slot first) with their indexes and the lane's generation. 0, -EEXIST
 * (the pair has one), -ENOSPC (one of them holds PER_WORKER lanes),
 * -EINVAL (a slot out of range, or a = b). */
int pm__lanebook_add(pm__lanebook *b, uint32_t a, uint64_t ainc, uint32_t b_slot, uint64_t binc,
                     pm__lanebook_lane *out);

/* Incarnation inc of slot has ended (reaped with all its processes): the
 * lanes it was in are taken out of the book and written to out, up to cap,
 * for the caller to revoke at the other end. Returns how many; while that
 * is cap, more may be left: call again (PER_WORKER is enough for one
 * call). Once none is left, its pair counts go too. */
unsigned pm__lanebook_end_of(pm__lanebook *b, uint32_t slot, uint64_t inc, pm__lanebook_lane *out,
                             unsigned cap);

/* The lane of generation gen is taken out of the book, both its indexes
 * freed: a set-up that did not complete (hub_lane.c). 1 if it was there. */
int pm__lanebook_cancel(pm__lanebook *b, uint32_t gen);

/* The lane between the two incarnations, or NULL. */
const pm__lanebook_lane *pm__lanebook_find(const pm__lanebook *b, uint32_t a, uint64_t ainc,
                                           uint32_t b_slot, uint64_t binc);

/* Lanes slot holds now. */
unsigned pm__lanebook_held(const pm__lanebook *b, uint32_t slot);

#endif /* PM_LANEBOOK_H */
