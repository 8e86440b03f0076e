/* SPDX-License-Identifier: MIT */
/* counters.c - the supervisor's internal counters pm-bench reports, read in one place. */
#include "base/internal.h"

#include "os/loop.h"
#include "supervisor/types.h"
#include "counters.h"

/* pm-bench's only reader of struct pm_cluster's fields: when the struct
 * changes, this function changes with it and the subcommands do not. */
void bench_counters(const pm_cluster *c, uint64_t *loop_syscalls, uint64_t *ring_wakeups)
{
    uint64_t wakeups = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        wakeups += c->slots[i].channel.tx.wakeups + c->slots[i].channel.rx.wakeups;
    if (loop_syscalls != NULL)
        *loop_syscalls = pm__loop_syscalls(c->loop);
    if (ring_wakeups != NULL)
        *ring_wakeups = wakeups;
}
