/* SPDX-License-Identifier: MIT */
/* diag.h - the supervisor's words about what went wrong (diag.c). */
#ifndef PM_SUPERVISOR_DIAG_H
#define PM_SUPERVISOR_DIAG_H

#include "types.h"

/* Why the first start of s failed, in words (pm_event.detail of the STOPPED
 * "spawn-aborted" event): pm_cluster_spawn can only return an errno, and
 * -ECHILD ("No child processes") says nothing about a worker that exited
 * during its handshake. */
void pm__spawn_detail(const pm_cluster *c, const pm__slot *s, char *buf, size_t size);
/* One of the supervisor's diagnostics (pm_options_set_on_diagnostic): to
 * o's callback with topic and the formatted message, else stderr. c is NULL
 * before the cluster is made. */
void pm__diag(const pm_options *o, pm_cluster *c, const char *topic, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));

#endif /* PM_SUPERVISOR_DIAG_H */
