/* SPDX-License-Identifier: MIT */
/* node_crash.h - the worker's crash handler (node_crash.c). */
#ifndef PM_NODE_CRASH_H
#define PM_NODE_CRASH_H

struct pm__ctl; /* channel/link.h */

/* Records this worker's crashes into ctl (its control block) from now on:
 * the module table, an alternate stack for this thread (unless it has one),
 * and the handler for every crash signal whose disposition is still the
 * default (a handler the application installed is its own business and
 * stays). */
void pm__node_crash_arm(struct pm__ctl *ctl);

/* Before ctl's memory goes: the handler must not write into it. */
void pm__node_crash_disarm(struct pm__ctl *ctl);

#endif /* PM_NODE_CRASH_H */
