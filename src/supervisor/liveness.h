/* SPDX-License-Identifier: MIT */
/* liveness.h - hung workers and a stalled supervisor (liveness.c). */
#ifndef PM_SUPERVISOR_LIVENESS_H
#define PM_SUPERVISOR_LIVENESS_H

#include "types.h"

uint64_t pm__liveness_period(const pm_cluster *c);
void pm__liveness_check(pm_cluster *c, uint64_t now);

#endif /* PM_SUPERVISOR_LIVENESS_H */
