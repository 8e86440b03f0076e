/* SPDX-License-Identifier: MIT */
/* pool.h - main's any-worker requests and the slots (pool.c). */
#ifndef PM_SUPERVISOR_POOL_H
#define PM_SUPERVISOR_POOL_H

#include "hub/hub.h" /* pm__ending */
#include "types.h"

/* pm__hub_ops.timed_out: kills p (reason "timeout"), cut off at once. */
void pm__pool_timed_out(void *owner, unsigned p);
/* At the reap, before pm__cluster_release: notes whether s died of its
 * input and hands the hub how it ended (*e, which must outlive the
 * release; the caller clears it after (pm__hub_set_ending)). */
void pm__pool_on_death(pm_cluster *c, pm__slot *s, int reason, pm__ending *e);

#endif /* PM_SUPERVISOR_POOL_H */
