/* SPDX-License-Identifier: MIT */
/* turn.h - one turn of the supervisor's loop, and the timer (turn.c). */
#ifndef PM_SUPERVISOR_TURN_H
#define PM_SUPERVISOR_TURN_H

#include "types.h"

/* Waits up to timeout_ms for readiness, handles it, fires the due
 * deadlines. 0 or a negative errno from the loop itself. */
int pm__cluster_turn(pm_cluster *c, int timeout_ms);
int pm__cluster_rearm_timer(pm_cluster *c);

#endif /* PM_SUPERVISOR_TURN_H */
