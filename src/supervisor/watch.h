/* SPDX-License-Identifier: MIT */
/* watch.h - application fds watched by the supervisor's loop (watch.c). */
#ifndef PM_SUPERVISOR_WATCH_H
#define PM_SUPERVISOR_WATCH_H

#include "types.h"

/* An application fd watched by the loop (pm_cluster_watch_fd). */
typedef struct pm__watch {
    int fd;                 /* -1: free */
    uint32_t gen;           /* bumped on every (un)watch: stale completions are dropped */
    int armed;
    void (*cb)(pm_cluster *, int, void *);
    void *arg;
} pm__watch;

#define PM__MAX_WATCH 1024

/* The poll of watch idx completed (PM__TAG_USER): its callback, unless it
 * was unwatched meanwhile (gen). */
void pm__watch_fire(pm_cluster *c, unsigned idx, uint32_t gen);

#endif /* PM_SUPERVISOR_WATCH_H */
