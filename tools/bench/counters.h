/* SPDX-License-Identifier: MIT */
/*
 * counters.h - read-only counters of the supervisor's internals for pm-bench
 * (counters.c), so that no subcommand reads struct pm_cluster's fields itself.
 */
#ifndef PM_BENCH_COUNTERS_H
#define PM_BENCH_COUNTERS_H

#include <stdint.h>

#include "procmesh.h"

/* The system calls the supervisor's loop has made, and the wake-up writes
 * the hub's ends of all slot rings have made, since the spawn. Either
 * pointer may be NULL. */
void bench_counters(const pm_cluster *c, uint64_t *loop_syscalls, uint64_t *ring_wakeups);

#endif /* PM_BENCH_COUNTERS_H */
