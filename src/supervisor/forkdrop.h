/* SPDX-License-Identifier: MIT */
/* forkdrop.h - what a fork-mode child drops of the supervisor: planned in
 * the supervisor before each fork, carried out by the child (forkdrop.c). */
#ifndef PM_SUPERVISOR_FORKDROP_H
#define PM_SUPERVISOR_FORKDROP_H

#include "types.h"

/* The plan: every fd to close (a bitmap) and every mapping to unmap
 * (sorted by address), kept in the cluster and made again before each
 * fork (the slots' fds change between forks). All zero is an empty plan
 * with nothing allocated. */
typedef struct pm__forkdrop {
    uint64_t *bits;     /* bit fd set: the child closes fd */
    size_t words;       /* allocated words of bits */
    int maxfd;          /* the highest fd set; -1 none (or 0 with bits NULL) */
    struct pm__forkdrop_map {
        uintptr_t at;
        size_t len;
    } *maps;
    size_t nmaps, maps_cap;
    int loop_forget;    /* the loop's rings are mapped apart and not DONTFORK: pm__loop_forget */
    int hub_ports;      /* some port holds queued frames: the child wipes the ports */
    int failed;         /* no memory for the plan */
} pm__forkdrop;

/* In the supervisor, just before a fork-mode fork onto channel own: plans
 * the child's drop of every slot's fds and rings but own, of the
 * supervisor's own fds, of the loop and of the fds the hub holds. 0, or
 * -ENOMEM (the fork must not happen: the child would keep what it
 * cannot name). */
int pm__forkdrop_plan(pm__forkdrop *d, const pm_cluster *c, const pm__channel *own);

/* In the fork child: carries out the plan made just before its fork,
 * closes the output reader's fds, and wipes the copies of other workers'
 * traffic the hub holds. Async-signal-safe; writes no page it shares
 * with the supervisor but those the closes and unmaps touch in the
 * kernel. */
void pm__forkdrop_run(const pm__forkdrop *d, pm_cluster *c);

/* Frees the plan's memory (the cluster's end). */
void pm__forkdrop_free(pm__forkdrop *d);

#endif /* PM_SUPERVISOR_FORKDROP_H */
