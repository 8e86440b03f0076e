/* SPDX-License-Identifier: MIT */
/* standby_fork.h - a warm standby forked ahead, and its death while it
 * waits (standby_fork.c). */
#ifndef PM_SUPERVISOR_STANDBY_FORK_H
#define PM_SUPERVISOR_STANDBY_FORK_H

#include "types.h"

/* After the spare is made at ready: forks the standby onto it; best
 * effort, errno preserved. */
void pm__standby_prepare(pm_cluster *c, pm__slot *s);
/* Its pidfd's poll completed (PM__TAG_STANDBY): the standby died while
 * waiting. */
void pm__standby_on_exit(pm_cluster *c, pm__slot *s, uint64_t tag);
/* reap_orphans: pid is a standby of some slot (then ended and reaped). */
int pm__standby_reap_pid(pm_cluster *c, pid_t pid);

#endif /* PM_SUPERVISOR_STANDBY_FORK_H */
