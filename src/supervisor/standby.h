/* SPDX-License-Identifier: MIT */
/*
 * standby.h - the warm standby (pm_options_set_warm_standby). standby.c:
 * what the start of an incarnation does with one (below incarnation.c);
 * standby_fork.c: forking one ahead, and its death while it waits (above
 * incarnation.c, whose fork it uses).
 */
#ifndef PM_SUPERVISOR_STANDBY_H
#define PM_SUPERVISOR_STANDBY_H

#include "types.h"

/* Ends s's standby (SIGKILL through its pidfd, reaped); errno preserved. */
void pm__standby_end(pm_cluster *c, pm__slot *s);
/* 1 when s has a standby and it has exited (its poll's completion may not
 * be handled yet): before the spare is taken, the caller drops the spare
 * (pm__incarnation_spare_drop, which ends and reaps the standby), whose
 * memory was another process's. */
int pm__standby_dead(const pm__slot *s);
/* Makes the waiting standby incarnation s->incarnation (whose channel was just
 * taken): moved into the slot's cgroup, started. Its pid with s->pidfd set,
 * 0 when there is none for this incarnation, or -errno (the standby was
 * ended; the caller must not use the channel it held). */
pid_t pm__standby_take(pm_cluster *c, pm__slot *s);
/* Starts the standby taken by pm__standby_take (writes its eventfd). */
void pm__standby_go(pm__slot *s);

#endif /* PM_SUPERVISOR_STANDBY_H */
