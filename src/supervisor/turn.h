/* SPDX-License-Identifier: MIT */
/* turn.h - one turn of the supervisor's loop, and the timer (turn.c). */
#ifndef PM_SUPERVISOR_TURN_H
#define PM_SUPERVISOR_TURN_H

#include <stdatomic.h>
#include <stdint.h>

#include "types.h"

/* The turn's part of the cluster (c->turn_state). */
struct pm__turn_state {
    uint64_t timer_at; /* deadline the timerfd is set to, 0 none; never
                          later than the next deadline, maybe earlier */
    atomic_int stop;   /* pm_cluster_stop: the running pm_cluster_run returns */
};

/* Waits up to timeout_ms for readiness, handles it, fires the due
 * deadlines. 0 or a negative errno from the loop itself. */
int pm__cluster_turn(pm_cluster *c, int timeout_ms);
int pm__cluster_rearm_timer(pm_cluster *c);
/* Before a public call that ran turns returns (outermost: not from inside
 * a callback): arms the drained rings' doorbells and makes the loop's fd
 * readable if work is left, submits, sets the timer, so that the fd says
 * whether pm_cluster_run has work (turn.c). */
void pm__cluster_leave(pm_cluster *c, int outermost);

#endif /* PM_SUPERVISOR_TURN_H */
