/* SPDX-License-Identifier: MIT */
/* node_crash.h - the worker's crash handler (node_crash.c). */
#ifndef PM_NODE_CRASH_H
#define PM_NODE_CRASH_H

struct pm__ctl; /* channel/channel.h */

/* Records this worker's crashes into ctl (its control block) from now on:
 * the module table, an alternate stack for this thread (unless it has one),
 * and the handler for every crash signal whose disposition is still the
 * default (a handler the application installed is its own business and
 * stays). */
void pm__node_crash_arm(struct pm__ctl *ctl);

/* In a supervisor, before each fork-mode child is forked: the module table
 * refreshed and the alternate stack mapped here, once, where the pages are
 * already the process's; the child inherits both, and its
 * pm__node_crash_arm_forked neither walks the loaded modules nor maps. */
void pm__node_crash_prime(void);
/* pm__node_crash_arm in a fork child of a primed supervisor, before any
 * code but procmesh's runs in it (one thread, nothing else installing
 * handlers): each handler is set and, when it replaced one the application
 * had installed, put back, one call each rather than a look and a set. */
void pm__node_crash_arm_forked(struct pm__ctl *ctl);

/* Before ctl's memory goes: the handler must not write into it. */
void pm__node_crash_disarm(struct pm__ctl *ctl);

#endif /* PM_NODE_CRASH_H */
