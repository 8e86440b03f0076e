/* SPDX-License-Identifier: MIT */
/*
 * deadlines.h - the slots' deadlines as a binary min-heap, so that a loop
 * turn finds the earliest one and the due ones in O(log N), never by a
 * walk of every slot.
 *
 * Pure data, no system call but the one mapping at init (deadlines.c
 * says why it is not the heap): ids are slot indexes 0..cap-1, each with at
 * most one deadline (ms, 0 = none). Every array is allocated once at init
 * for cap ids, so setting, moving or removing a deadline never allocates
 * and never fails. Entries are ordered by (at, id): equal deadlines come
 * out lowest id first, the order a walk of the slots would give.
 */
#ifndef PM_DEADLINES_H
#define PM_DEADLINES_H

#include <stdint.h>

typedef struct pm__dl_entry {
    uint64_t at;  /* ms, never 0 */
    unsigned id;
} pm__dl_entry;

typedef struct pm__deadlines {
    unsigned n;          /* entries in heap */
    unsigned cap;        /* ids 0..cap-1 */
    pm__dl_entry *heap;  /* heap[0] is the earliest */
    unsigned *pos;       /* pos[id]: its index in heap + 1; 0 = no deadline */
    uint64_t *popped;    /* popped[id]: the pass in which it last fired */
    uint64_t pass;       /* pm__deadlines_pass_begin's count */
} pm__deadlines;

/* 0, or -ENOMEM with nothing allocated. */
int pm__deadlines_init(pm__deadlines *d, unsigned cap);
void pm__deadlines_free(pm__deadlines *d);

/* Sets id's deadline to at (moving it if it had one); at 0 removes it.
 * O(log n). An id >= cap is ignored. */
void pm__deadlines_set(pm__deadlines *d, unsigned id, uint64_t at);

/* The earliest deadline (0 when there is none), and its id in *id when
 * id is not NULL. O(1). */
uint64_t pm__deadlines_first(const pm__deadlines *d, unsigned *id);

/* Firing the due deadlines: pass_begin, then pop_due until it returns 0.
 * pop_due removes the earliest deadline if it is <= now and its id has not
 * fired yet in this pass, and returns 1 with the id. An id whose action
 * sets a deadline that is already due again (a start that failed at once,
 * restarted without a delay) therefore fires once per pass, not in a loop:
 * it is found due by the next pass. */
void pm__deadlines_pass_begin(pm__deadlines *d);
int pm__deadlines_pop_due(pm__deadlines *d, uint64_t now, unsigned *id);

#endif /* PM_DEADLINES_H */
