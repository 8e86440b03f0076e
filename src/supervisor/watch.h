/* SPDX-License-Identifier: MIT */
/* watch.h - application fds watched by the supervisor's loop (watch.c). */
#ifndef PM_SUPERVISOR_WATCH_H
#define PM_SUPERVISOR_WATCH_H

#include "types.h"

/* The poll of watch idx completed (PM__TAG_USER): its callback, unless it
 * was unwatched meanwhile (gen). */
void pm__watch_fire(pm_cluster *c, unsigned idx, uint32_t gen);

#endif /* PM_SUPERVISOR_WATCH_H */
