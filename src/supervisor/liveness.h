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
void pm__liveness_check(pm_cluster *c, uint64_t now);

#endif /* PM_SUPERVISOR_LIVENESS_H */
