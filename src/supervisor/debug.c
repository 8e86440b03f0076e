/* SPDX-License-Identifier: MIT */
/* debug.c - the supervisor's internal counters, read in one place for pm-bench. */
#include "base/internal.h"

#include "types.h"
#include "debug.h"

/* The only reader of struct pm_cluster's fields outside the supervisor: when
 * the struct changes, this function changes with it and pm-bench does not. */
void pm__cluster_debug_counters(const pm_cluster *c, uint64_t *loop_syscalls,
                                uint64_t *ring_wakeups)
{
    uint64_t wakeups = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        wakeups += c->slots[i].channel.tx.wakeups + c->slots[i].channel.rx.wakeups;
    if (loop_syscalls != NULL)
        *loop_syscalls = pm__loop_syscalls(c->loop);
    if (ring_wakeups != NULL)
        *ring_wakeups = wakeups;
}
