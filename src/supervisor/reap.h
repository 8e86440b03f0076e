/* SPDX-License-Identifier: MIT */
/* reap.h - ending an incarnation: a fault cuts it off and kills it, its
 * exit is collected and drives the slot (reap.c). */
#ifndef PM_SUPERVISOR_REAP_H
#define PM_SUPERVISOR_REAP_H

#include "types.h"

/* Cuts a worker off and kills it; its exit is charged as a failure with
 * this reason (PM_REASON_*). */
void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason);
/* Collects the exit status if the process has ended and drives the slot.
 * 1 when reaped. */
int pm__cluster_try_reap(pm_cluster *c, pm__slot *s);
/* Its pidfd's poll completed (PM__TAG_PIDFD): reaped, or polled again. */
void pm__reap_on_pidfd(pm_cluster *c, pm__slot *s);
/* The signalfd is readable (PM__TAG_SIGNAL): SIGCHLD reaps, any other
 * signal is kept in c->last_signal; the signalfd is polled again. */
void pm__reap_on_signal(pm_cluster *c);
/* Tries to reap every slot. */
void pm__cluster_reap_all(pm_cluster *c);
/* Kills and reaps orphans re-parented to us (process-group containment). */
void pm__cluster_kill_orphans(void);

#endif /* PM_SUPERVISOR_REAP_H */
