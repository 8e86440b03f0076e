/* SPDX-License-Identifier: MIT */
/* deadlines.c - the slots' deadlines as a binary min-heap; see deadlines.h. */
#include "base/internal.h"
#include "deadlines.h"

#include <errno.h>
#include <stdlib.h>

/* (at, id) order: ties by id keep the result independent of the heap's
 * shape, and equal to a walk of the slots in index order. */
static int before(const pm__dl_entry *a, const pm__dl_entry *b)
{
    return a->at < b->at || (a->at == b->at && a->id < b->id);
}

static void place(pm__deadlines *d, unsigned i, pm__dl_entry e)
{
    d->heap[i] = e;
    d->pos[e.id] = i + 1;
}

/* Moves the entry at i towards the root while it is earlier than its
 * parent. */
static void sift_up(pm__deadlines *d, unsigned i)
{
    pm__dl_entry e = d->heap[i];
    while (i > 0) {
        unsigned parent = (i - 1) / 2;
        if (!before(&e, &d->heap[parent]))
            break;
        place(d, i, d->heap[parent]);
        i = parent;
    }
    place(d, i, e);
}

/* Moves the entry at i towards the leaves while a child is earlier. */
static void sift_down(pm__deadlines *d, unsigned i)
{
    pm__dl_entry e = d->heap[i];
    for (;;) {
        unsigned l = 2 * i + 1, best = i;
        const pm__dl_entry *b = &e;
        if (l < d->n && before(&d->heap[l], b)) {
            best = l;
            b = &d->heap[l];
        }
        if (l + 1 < d->n && before(&d->heap[l + 1], b))
            best = l + 1;
        if (best == i)
            break;
        place(d, i, d->heap[best]);
        i = best;
    }
    place(d, i, e);
}

/* The three arrays' bytes for cap ids (at least one each), in that order,
 * each aligned for its type (heap's entries are 8-byte aligned, pos's
 * unsigneds end on a 4-byte boundary that popped's 8-byte words round). */
static size_t arrays_size(unsigned cap, size_t *pos_at, size_t *popped_at)
{
    size_t n = cap > 0 ? cap : 1;
    *pos_at = n * sizeof(pm__dl_entry);
    *popped_at = PM__ALIGN8(*pos_at + n * sizeof(unsigned));
    return *popped_at + n * sizeof(uint64_t);
}

/* One mapping that a fork does not share (pm__wipemem_alloc): the
 * supervisor sets the new incarnation's READY deadline right after its
 * fork, and on heap memory shared copy-on-write with the child that write
 * was a page fault on the crash-to-ready path, the child waiting on the
 * same CPU (doc/benchmarks.md, stop 58). No worker reads it. */
int pm__deadlines_init(pm__deadlines *d, unsigned cap)
{
    size_t pos_at, popped_at;
    size_t size = arrays_size(cap, &pos_at, &popped_at);
    unsigned char *m = pm__wipemem_alloc(size); /* zeroed */
    d->n = 0;
    d->cap = cap;
    d->pass = 0;
    if (m == NULL) {
        d->heap = NULL;
        d->pos = NULL;
        d->popped = NULL;
        d->cap = 0;
        return -ENOMEM;
    }
    d->heap = (pm__dl_entry *)(void *)m;
    d->pos = (unsigned *)(void *)(m + pos_at);
    d->popped = (uint64_t *)(void *)(m + popped_at);
    return 0;
}

void pm__deadlines_free(pm__deadlines *d)
{
    size_t pos_at, popped_at;
    if (d->heap != NULL)
        pm__wipemem_free(d->heap, arrays_size(d->cap, &pos_at, &popped_at));
    d->heap = NULL;
    d->pos = NULL;
    d->popped = NULL;
    d->n = d->cap = 0;
}

/* Removes the entry at heap index i: the last entry takes its place and
 * goes up or down from there. */
static void remove_at(pm__deadlines *d, unsigned i)
{
    d->pos[d->heap[i].id] = 0;
    d->n--;
    if (i == d->n)
        return; /* it was the last: nothing moves */
    pm__dl_entry last = d->heap[d->n];
    place(d, i, last);
    if (i > 0 && before(&last, &d->heap[(i - 1) / 2]))
        sift_up(d, i);
    else
        sift_down(d, i);
}

void pm__deadlines_set(pm__deadlines *d, unsigned id, uint64_t at)
{
    if (id >= d->cap)
        return;
    unsigned p = d->pos[id];
    if (at == 0) {
        if (p != 0)
            remove_at(d, p - 1);
        return;
    }
    if (p == 0) {
        /* n < cap: each id is in the heap at most once. */
        place(d, d->n, (pm__dl_entry){at, id});
        d->n++;
        sift_up(d, d->n - 1);
        return;
    }
    uint64_t old = d->heap[p - 1].at;
    d->heap[p - 1].at = at;
    if (at < old)
        sift_up(d, p - 1);
    else if (at > old)
        sift_down(d, p - 1);
}

uint64_t pm__deadlines_first(const pm__deadlines *d, unsigned *id)
{
    if (d->n == 0)
        return 0;
    if (id != NULL)
        *id = d->heap[0].id;
    return d->heap[0].at;
}

void pm__deadlines_pass_begin(pm__deadlines *d)
{
    d->pass++;
}

int pm__deadlines_pop_due(pm__deadlines *d, uint64_t now, unsigned *id)
{
    if (d->n == 0 || d->heap[0].at > now)
        return 0;
    unsigned first = d->heap[0].id;
    /* Fired already in this pass and due again: leave it, and what is
     * behind it, to the next pass (the timer is then set to a deadline
     * already past, so that pass comes at once). */
    if (d->popped[first] == d->pass)
        return 0;
    d->popped[first] = d->pass;
    remove_at(d, 0);
    *id = first;
    return 1;
}
