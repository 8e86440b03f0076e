/* SPDX-License-Identifier: MIT */
/*
 * standby_fork.c - a warm standby forked ahead (pm_options_set_warm_standby),
 * and its death while it waits. Above incarnation.c, whose fork it uses;
 * what the start of an incarnation does with a standby (take it, start it,
 * end it) is standby.c's, below incarnation.c. The rules a standby keeps:
 * standby.c.
 */
#define _GNU_SOURCE
#include "standby_fork.h"

#include <errno.h>
#include <sys/eventfd.h>

#include "incarnation.h"
#include "os/cgroup.h"
#include "os/spawn.h"
#include "os/loop.h"
#include "options.h"

void pm__standby_prepare(pm_cluster *c, pm__slot *s)
{
    pm__standby *b = &s->standby;
    if (!c->o->warm_standby || c->o->exec_path != NULL || s->spare == NULL || b->pid > 0 ||
        c->terminating)
        return;
    int saved = errno;
    /* Blocking in the child (it waits in read); the supervisor only ever
     * writes it, which an eventfd never blocks. An eventfd rather than a
     * pipe: a write to a pipe whose reader died would raise SIGPIPE here. */
    int go = eventfd(0, EFD_CLOEXEC);
    if (go < 0)
        goto out;
    /* Its two fds (this one and its pidfd) are held for as long as it
     * waits: only while they are affordable, as the spare's are. */
    if (!pm__fds_affordable(&go, 1)) {
        pm__close(go);
        goto out;
    }
    uint64_t inc = s->incarnation + 1;
    /* It waits in the slot's leaf made ahead (pm__cg_slot_prepare, just
     * before), joined by its own write as it starts: taking it at the
     * crash then moves no process, whose write to cgroup.procs could wait
     * for an RCU grace period on the crash's path (cgroup.c). The slot's
     * limits cover it meanwhile; the kill of the current leaf does not
     * reach it. Without such a leaf it is moved when taken. */
    unsigned leaf = c->cg.mode == PM_CONTAIN_CGROUP ? pm__cg_slot_standby_open(&s->cg) : 0;
    /* Its leaf's three fds are held while it waits too (its take opens
     * nothing): by the same rule, else it joins none and is moved when
     * taken. */
    const pm__cg_leaf *sl = &s->cg.standby_leaf;
    int leaf_fds[3] = {sl->dir_fd, sl->procs_fd, sl->events_fd};
    if (leaf != 0 && !pm__fds_affordable(leaf_fds, 3)) {
        pm__cg_slot_standby_drop(&s->cg);
        leaf = 0;
    }
    pid_t pid = pm__incarnation_fork_standby(c, s, s->spare, inc, go);
    pm__cg_slot_standby_close(&s->cg);
    if (pid < 0) {
        pm__cg_slot_standby_drop(&s->cg);
        pm__close(go);
        goto out;
    }
    int pidfd = pm__pidfd_open(pid);
    b->pid = pid;
    b->pidfd = pidfd;
    b->go_fd = go;
    b->incarnation = inc;
    b->leaf_gen = leaf;
    if (pidfd >= 0 && pm__fds_affordable(&pidfd, 1) &&
        pm__loop_arm(c->loop, pidfd, PM__TAG(PM__TAG_STANDBY, s->index, inc)) == 0)
        b->armed = 1;
    else
        /* Nothing would report its death at once (no pidfd: Linux < 5.3,
         * or no poll): it would wait as a zombie until taken. No standby
         * then, and no spare either: that process mapped it, and its
         * memory is never another incarnation's. Restarts fork as without
         * the option. */
        pm__incarnation_spare_drop(c, s);
out:
    pm__errno_restore(saved);
}

void pm__standby_on_exit(pm_cluster *c, pm__slot *s, uint64_t tag)
{
    pm__standby *b = &s->standby;
    if (b->pid <= 0 || PM__TAG_INC(tag) != (b->incarnation & 0xffffffffu))
        return; /* taken or ended since: the completion of a cancelled poll */
    b->armed = 0;
    /* It died while waiting (killed from outside; or its set-up failed).
     * Its spare goes too: that memory was a process's that is not ours
     * to trust. The next restart forks, and the next ready makes both
     * again. */
    pm__incarnation_spare_drop(c, s);
}

int pm__standby_reap_pid(pm_cluster *c, pid_t pid)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (s->standby.pid == pid) {
            pm__incarnation_spare_drop(c, s);
            return 1;
        }
    }
    return 0;
}
