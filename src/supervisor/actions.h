/* SPDX-License-Identifier: MIT */
/* actions.h - the slot table's actions (actions.c): every event that
 * happens to a slot enters here. */
#ifndef PM_SUPERVISOR_ACTIONS_H
#define PM_SUPERVISOR_ACTIONS_H

#include "types.h"

/* Runs the action the slot table gives for (s->state, event). */
void pm__cluster_dispatch(pm_cluster *c, pm__slot *s, int event);
/* The slot deadlines due at now (ms), each slot's event dispatched, at
 * most once per slot per call. */
void pm__cluster_fire_deadlines(pm_cluster *c, uint64_t now);
/* The slot stops for good (reason PM_REASON_*): no deadline, the STOPPED
 * event. */
void pm__cluster_set_stopped(pm_cluster *c, pm__slot *s, int reason);
/* pm__cluster_set_state for a state the slot does not start again from
 * (STOPPED, RETIRED): its prepared channel, and the standby on it, go too. */
void pm__cluster_set_state_final(pm_cluster *c, pm__slot *s, int state);

/* What comes after s's ready incarnation, prepared ahead of any crash: its
 * successor's channel, the warm standby on it (when asked for), the cgroup
 * leaf it is born into. Best effort, errno preserved. */
void pm__cluster_prepare_next(pm_cluster *c, pm__slot *s);
/* The successors of the slots that became ready inside pm_cluster_spawn,
 * PM__PREPARE_BATCH slots per call: 1 while some are still due (the
 * caller's turn must not sleep), 0 when none is. */
int pm__cluster_prepare_due(pm_cluster *c);

#endif /* PM_SUPERVISOR_ACTIONS_H */
