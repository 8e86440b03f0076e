/* SPDX-License-Identifier: MIT */
/* actions.h - the slot table's actions (actions.c): every event that
 * happens to a slot enters here. */
#ifndef PM_SUPERVISOR_ACTIONS_H
#define PM_SUPERVISOR_ACTIONS_H

#include "types.h"

/* Runs the action the slot table gives for (s->state, event). */
void pm__cluster_dispatch(pm_cluster *c, pm__slot *s, int event);
/* The slot stops for good (reason PM_REASON_*): no deadline, the STOPPED
 * event. */
void pm__cluster_set_stopped(pm_cluster *c, pm__slot *s, int reason);
/* pm__cluster_set_state for a state the slot does not start again from
 * (STOPPED, RETIRED): its prepared link, and the standby on it, go too. */
void pm__cluster_set_state_final(pm_cluster *c, pm__slot *s, int state);

#endif /* PM_SUPERVISOR_ACTIONS_H */
