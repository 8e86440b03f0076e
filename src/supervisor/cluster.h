/* SPDX-License-Identifier: MIT */
/*
 * cluster.h - the top of the supervisor (cluster.c: pm_cluster_spawn,
 * _terminate, _restart_slot), and every header of the modules below it,
 * for cluster.c and the tests (tests/internals.h). A module of the
 * supervisor includes the headers of what it uses, never this one.
 *
 * Bottom to top: types.h (the structures; it includes output.h and
 * standby_state.h, whose types a slot holds), diag, output, watch; core (the
 * primitives on one slot); standby; incarnation; standby_fork; actions (the
 * slot table's actions); readiness; pool; reap; liveness; turn; peers;
 * cluster.
 */
#ifndef PM_CLUSTER_H
#define PM_CLUSTER_H

#include "types.h"

#include "actions.h"
#include "core.h"
#include "diag.h"
#include "incarnation.h"
#include "liveness.h"
#include "peers.h"
#include "pool.h"
#include "readiness.h"
#include "reap.h"
#include "standby.h"
#include "standby_fork.h"
#include "turn.h"
#include "watch.h"

/* Kills and reaps every process of the cluster; returns when all are gone. */
void pm__cluster_kill_all(pm_cluster *c);

#endif /* PM_CLUSTER_H */
