/* SPDX-License-Identifier: MIT */
/*
 * core.h - the supervisor's primitives on one slot, below everything that
 * decides (core.c): the event to the application, the state mirrored in
 * the hub's port, signals, cutting a worker off and releasing what it had,
 * ending its process tree, and the polls on its port's doorbell and socket.
 * Nothing here calls up into the state machine (actions.c), the reap
 * (reap.c) or the turn (turn.c).
 */
#ifndef PM_SUPERVISOR_CORE_H
#define PM_SUPERVISOR_CORE_H

#include "types.h"

/* The address of a slot: with its incarnation while it has a process. */
void pm__slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a);


void pm__cluster_emit(pm_cluster *c, int type, const pm__slot *s, int reason, uint32_t delay);
/* Sets the slot's state and mirrors it in its port. */
void pm__cluster_set_state(pm_cluster *c, pm__slot *s, int state);

/* Signals s's process (through its pidfd); stops reading its ring for good;
 * releases everything the dead incarnation had. */
void pm__cluster_signal(pm__slot *s, int sig);
void pm__cluster_disarm_hub(pm_cluster *c, pm__slot *s);
void pm__cluster_release(pm_cluster *c, pm__slot *s);
/* pm__cluster_release, but the channel is moved into *keep (when not NULL)
 * for the caller to close, its port already closed. */
void pm__cluster_release_keep(pm_cluster *c, pm__slot *s, pm__channel *keep);
/* A place for a reaped incarnation's channel until it is buried, or NULL;
 * pm__cluster_bury closes them all (the cluster's free), and
 * pm__cluster_bury_turn at a turn's end unless a replacement is still on
 * its way to READY (at most PM__DYING_KEEP kept). */
pm__channel *pm__cluster_dying(pm_cluster *c);
void pm__cluster_bury(pm_cluster *c);
void pm__cluster_bury_turn(pm_cluster *c);

/* Ends what is left of the incarnation's process tree, its worker being
 * dead: a SIGKILL to its process group while the worker is unreaped (its
 * zombie keeps the group id from being reused), and, after the reap, its
 * cgroup killed and waited until empty (bounded), counting OOM kills. */
void pm__cluster_end_group(pm__slot *s);
void pm__cluster_end_tree(pm_cluster *c, pm__slot *s);

/* Services the slot's port once: its doorbell rang or it had work left over. */
void pm__cluster_on_hub(pm_cluster *c, pm__slot *s);
/* Each port with work this turn (the hub's ready list), once, in order. */
void pm__cluster_service_ports(pm_cluster *c);
/* Watches the slot's fd socket while its port is read. */
void pm__cluster_arm_sock(pm_cluster *c, pm__slot *s);
/* The loop's completions about the slot's port (more: the registration
 * goes on): its doorbell (PM__TAG_HUB), its fd socket (PM__TAG_SOCK). */
void pm__cluster_on_doorbell(pm_cluster *c, pm__slot *s, int more);
void pm__cluster_on_sock(pm_cluster *c, pm__slot *s, int more);

#endif /* PM_SUPERVISOR_CORE_H */
