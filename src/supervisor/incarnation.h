/* SPDX-License-Identifier: MIT */
/* incarnation.h - starting the next incarnation of a slot, and its spare
 * link (incarnation.c). */
#ifndef PM_SUPERVISOR_INCARNATION_H
#define PM_SUPERVISOR_INCARNATION_H

#include "types.h"

/* Starts the next incarnation of s. 0, or -errno with nothing left behind
 * (no process, no fd, no memory); -EADDRINUSE is not the slot's fault (see
 * incarnation.c). */
int pm__incarnation_start(pm_cluster *c, pm__slot *s);
/* Closes and frees s's spare link, if it has one, and ends (kills and
 * reaps) the standby waiting on it (errno preserved). */
void pm__incarnation_spare_drop(pm_cluster *c, pm__slot *s);
/* Prepares s's next incarnation's link (the spare) if it has none; best
 * effort, errno preserved. Called when the incarnation becomes ready. */
void pm__incarnation_spare_prepare(pm_cluster *c, pm__slot *s);
/* 1 when every fd of fds sits below half of RLIMIT_NOFILE: what is prepared
 * ahead (spares, standbys) must never take the fds that the slots' own
 * starts need. */
int pm__fds_affordable(const int *fds, size_t n);
/* Forks a process for incarnation inc of s on link l that sets itself up as
 * fork_child does, then blocks reading the eventfd go_fd: a write of 1 runs
 * the bootstrap. Its pid, or -errno. */
pid_t pm__incarnation_fork_standby(pm_cluster *c, pm__slot *s, pm__link *l, uint64_t inc,
                                   int go_fd);

#endif /* PM_SUPERVISOR_INCARNATION_H */
