/* SPDX-License-Identifier: MIT */
/* liveness.h - hung workers and a stalled supervisor (liveness.c). */
#ifndef PM_SUPERVISOR_LIVENESS_H
#define PM_SUPERVISOR_LIVENESS_H

#include <stdint.h>

#include "types.h"

/* The liveness check's part of the cluster (c->liveness). */
struct pm__liveness_state {
    uint64_t last_check_mono; /* CLOCK_MONOTONIC / CLOCK_BOOTTIME ms at the last check */
    uint64_t last_check_boot;
};

uint64_t pm__liveness_period(const pm_cluster *c);

/* Pure: the supervisor's own stall between two checks, from the
 * CLOCK_MONOTONIC (dm) and CLOCK_BOOTTIME (db) ms that passed between
 * them: how late the check ran past its period, or how far BOOTTIME ran
 * ahead of MONOTONIC (a suspend: MONOTONIC stops, BOOTTIME does not),
 * whichever is larger. 0 when it is at most half the heartbeat timeout
 * (nobody's silence to excuse); else the stall in ms, and *reason
 * PM_REASON_SUSPEND when the suspend is the larger part, PM_REASON_STALL
 * otherwise. */
uint64_t pm__liveness_stall(uint64_t dm, uint64_t db, uint64_t period, uint64_t timeout,
                            int *reason);
void pm__liveness_check(pm_cluster *c, uint64_t now);

#endif /* PM_SUPERVISOR_LIVENESS_H */
