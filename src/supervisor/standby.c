/* SPDX-License-Identifier: MIT */
/*
 * standby.c - the warm standby (pm_options_set_warm_standby): per slot, the
 * next fork-mode incarnation forked ahead onto the spare channel, set up, and
 * blocked on an eventfd until the crash it replaces. Here: what the start
 * of an incarnation does with one (take it, start it, end it, drop a dead
 * one), below incarnation.c; forking it and its death while it waits:
 * standby_fork.c, above.
 *
 * Why: a fork-mode restart spends most of its time in the fork (the page
 * tables of the supervisor copied) and in the new process's first page
 * faults (every text page it runs faults in a fork child, whose page tables
 * hold no file pages), not in procmesh's own work. A standby has paid all
 * of it before the crash, as pre-forking servers (Apache prefork,
 * php-fpm's spare servers) do. Figures: doc/benchmarks.md.
 *
 * The rules it keeps:
 * - Single activation: a standby is not an incarnation. It holds no channel
 *   the hub serves (its ring is the spare, no port of the hub), runs no
 *   application code, and becomes the slot's incarnation only in
 *   pm__incarnation_start, after the one before it was reaped.
 * - Fencing: its memory is the spare, fresh after the fork of the
 *   incarnation before it. A standby that died while waiting may have
 *   written anything there, so its spare is dropped with it, never used.
 * - No live process left behind: its pidfd is polled, so a death is reaped
 *   at once; stopping, retiring, terminating and freeing the cluster end
 *   it (the spare's drop does); it dies with the supervisor (the parent-
 *   death signal fork_child's set-up gives every child).
 * - Containment: it waits in the slot's cgroup, in the leaf made ahead
 *   for the next incarnation (joined by its own write when it starts,
 *   off the crash path), not in the current incarnation's leaf, so that
 *   the kill of the cgroup of the incarnation it replaces cannot reach
 *   it; the slot's limits cover it meanwhile. Taken, its leaf becomes the
 *   slot's (pm__cg_slot_advance): no process is moved on the way from
 *   the crash, a write that could wait for an RCU grace period (5-20 ms
 *   after a quiet spell, doc/benchmarks.md stop 62). Where no leaf was
 *   made ahead it is moved when taken (pm__cg_slot_move). Its process
 *   group is its own from the fork.
 */
#define _GNU_SOURCE
#include "standby.h"

#include <errno.h>
#include <poll.h>
#include <sys/wait.h>
#include <unistd.h>

#include "os/cgroup.h"
#include "os/spawn.h"
#include "os/loop.h"

static void disarm(pm_cluster *c, pm__slot *s)
{
    if (!s->standby.armed)
        return;
    pm__loop_disarm(c->loop, s->standby.pidfd,
                    PM__TAG(PM__TAG_STANDBY, s->index, s->standby.incarnation));
    s->standby.armed = 0;
}

/* Kill and reap; the slot's record cleared. Through the pidfd only: the
 * application may have reaped a dead standby itself (a SIGCHLD handler with
 * waitpid(-1), which reap.c allows for), and then its pid may already be
 * another process's; the pidfd still names the dead one, so the signal fails
 * (ESRCH) and nothing else is hit (doc/reliability.md, fault 16: nothing is
 * sent to a reaped pid), and waitid on it says ECHILD. kill() and waitpid() by
 * pid only without a pidfd, which is only pm__standby_prepare's failure path,
 * where the child is certainly ours and unreaped.
 *
 * The wait blocks: a SIGKILLed process ends unless it sleeps
 * uninterruptibly, and terminate's rule (it returns only when every
 * process is reaped) holds for standbys too. */
void pm__standby_end(pm_cluster *c, pm__slot *s)
{
    pm__standby *b = &s->standby;
    if (b->pid <= 0)
        return;
    int saved = errno;
    disarm(c, s);
    if (b->pidfd >= 0) {
        (void)pm__pidfd_signal(b->pidfd, SIGKILL);
        siginfo_t si;
        while (waitid((idtype_t)P_PIDFD, (id_t)b->pidfd, &si, WEXITED) < 0 && errno == EINTR)
            ;
    } else {
        (void)kill(b->pid, SIGKILL);
        while (waitpid(b->pid, NULL, 0) < 0 && errno == EINTR)
            ;
    }
    pm__close(b->pidfd);
    pm__close(b->go_fd);
    b->pid = 0;
    b->pidfd = b->go_fd = -1;
    pm__cg_slot_standby_drop(&s->cg); /* the fds of the leaf it waited in */
    pm__errno_restore(saved);
}


/* 1 when the standby has exited but its poll's completion has not been
 * handled yet (both can be in the same turn). */
static int standby_dead(const pm__standby *b)
{
    struct pollfd p = {b->pidfd, POLLIN, 0};
    return poll(&p, 1, 0) > 0;
}

/* A standby made for another incarnation needs no check here: it lives on
 * the spare made for that incarnation, which channel_take finds unfit and
 * drops, and it with it. */
int pm__standby_dead(const pm__slot *s)
{
    return s->standby.pid > 0 && standby_dead(&s->standby);
}

pid_t pm__standby_take(pm_cluster *c, pm__slot *s)
{
    pm__standby *b = &s->standby;
    if (b->pid <= 0)
        return 0; /* none, or ended with an unfit spare by channel_take */
    if (c->cg.mode == PM_CONTAIN_CGROUP) {
        /* Its leaf becomes the slot's; a standby that joined none (or
         * whose leaf cannot be made current) is moved into the current
         * one instead, a write that may wait for a grace period. */
        int rc = pm__cg_slot_advance(&s->cg, b->leaf_gen);
        if (rc < 0)
            rc = pm__cg_slot_move(&s->cg, b->pid);
        /* Its leaf's fds, unless the advance took them. */
        pm__cg_slot_standby_drop(&s->cg);
        if (rc < 0) {
            pm__standby_end(c, s);
            return rc;
        }
    }
    /* Its poll is the slot's from here (PM__TAG_PIDFD, armed by the
     * caller); the standby's tag is cancelled, and a completion of it
     * already queued finds no standby of that incarnation. */
    disarm(c, s);
    pid_t pid = b->pid;
    c->standby_taken++;
    s->pidfd = b->pidfd;
    b->pid = 0;
    b->pidfd = -1;
    return pid; /* go_fd stays until pm__standby_go */
}

void pm__standby_go(pm__slot *s)
{
    uint64_t one = 1;
    /* An eventfd write of 1 cannot block or fail short of overflow; if the
     * standby died meanwhile, its pidfd reports the exit like any. */
    ssize_t n = write(s->standby.go_fd, &one, sizeof(one));
    (void)n;
    pm__close(s->standby.go_fd);
    s->standby.go_fd = -1;
}


