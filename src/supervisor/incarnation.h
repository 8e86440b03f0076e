/* SPDX-License-Identifier: MIT */
/* incarnation.h - starting the next incarnation of a slot (incarnation.c);
 * its spare: spare.h. */
#ifndef PM_SUPERVISOR_INCARNATION_H
#define PM_SUPERVISOR_INCARNATION_H

#include "types.h"
#include "forkdrop.h"
#include "spare.h" /* pm__incarnation_spare_drop and _prepare */

/* The incarnation start's part of the cluster (c->incarnation_state). */
struct pm__incarnation_state {
    uint64_t sig_ignored;  /* exec mode: the signals ignored at the first start */
    int sig_ignored_known;
    pm__forkdrop drop;     /* fork mode: what the next child drops (forkdrop.h) */
    /* What the next child reads of its slot, copied here before its fork:
     * the slot table is memory no fork shares (cluster.c). */
    pm__channel channel;   /* fork mode: its channel */
    pm__cg_slot cg;        /* its cgroup's handles (pm__spawn_req.cg) */
};

/* Starts the next incarnation of s. 0, or -errno with nothing left behind
 * (no process, no fd, no memory); -EADDRINUSE is not the slot's fault (see
 * incarnation.c). */
int pm__incarnation_start(pm_cluster *c, pm__slot *s);

/* Writes INIT (slot, address, init data) into s's ring: 0, or -errno. */
int pm__incarnation_send_init(pm_cluster *c, pm__slot *s);

/* Forks a process for incarnation inc of s on channel l that sets itself up as
 * fork_child does, then blocks reading the eventfd go_fd: a write of 1 runs
 * the bootstrap. Its pid, or -errno. */
pid_t pm__incarnation_fork_standby(pm_cluster *c, pm__slot *s, pm__channel *l, uint64_t inc,
                                   int go_fd);

#endif /* PM_SUPERVISOR_INCARNATION_H */
