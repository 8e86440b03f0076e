/* SPDX-License-Identifier: MIT */
/*
 * spare.c - the next incarnation's resources prepared ahead (the spare):
 * its channel, in exec mode its error pipe, with captured output its two
 * pipes; made once the incarnation before is ready, taken by
 * pm__incarnation_start (incarnation.c), dropped when the slot stops.
 */
#define _GNU_SOURCE
#include "spare.h"
#include "core.h"
#include "output.h"
#include "standby.h"

#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "os/notify.h"
#include "os/spawn.h"
#include "options.h"

/* Creating a channel (memfd_create, ftruncate, the seals, mmap, the
 * first-touch faults of the ring headers and of each ring's first data
 * page, two eventfds, a socketpair and its two buffer sizes) between the
 * reap and the fork would put it on the crash-to-ready path. It is made
 * ahead instead: once an incarnation is ready, the supervisor prepares the
 * channel of the one after it. Fencing holds:
 * a spare is a fresh memfd (and fresh doorbells and socket) made after the
 * fork of the incarnation before it, so no process that ever ran holds a
 * byte of it; every fork child closes every slot's spare (fork_child), and
 * exec children never see it (close-on-exec, and the exec replaces the
 * mappings). The spare goes when the slot stops or retires
 * (pm__cluster_set_state_final) or the cluster is freed.
 *
 * Exec mode, the error pipe the same way (spare_pipe says when): made
 * after the spawn of the incarnation before, both ends close-on-exec, so
 * no process that ever ran a worker's code holds an end; the write end
 * goes to the new child only. Another slot's vfork child holds a copy
 * from its clone until its exec has closed its close-on-exec fds, which
 * is after the exec let us go (exec_mmap comes before do_close_on_exec):
 * a worker that exec'd and exited at once can be reaped while that copy
 * is still open, its pipe empty but not at EOF. readiness.c
 * (pm__exec_pipe_verdict) reads that case from how the worker ended. */

static void spare_close_pipes(pm__spare *sp)
{
    pm__close(sp->notify_fd);
    pm__close(sp->err_pipe[0]);
    pm__close(sp->err_pipe[1]);
    for (int i = 0; i < 2; i++) {
        pm__close(sp->out[i][0]);
        pm__close(sp->out[i][1]);
    }
}

void pm__incarnation_spare_drop(pm_cluster *c, pm__slot *s)
{
    /* A standby lives on the spare: it goes first, and with it. */
    pm__standby_end(c, s);
    if (s->spare == NULL)
        return;
    int saved = errno;
    pm__spare *sp = pm__spare_of(s);
    pm__channel_close(&sp->channel);
    spare_close_pipes(sp);
    free(sp);
    s->spare = NULL;
    pm__errno_restore(saved);
}

/* The error pipe of an exec child: both ends close-on-exec (the child's
 * end is the report channel of its clone-to-exec steps only: a successful
 * exec closes it, which is the EOF the parent reads); ours non-blocking,
 * read by the loop. 0 or -errno. */
int pm__err_pipe_open(int p[2])
{
    if (pipe2(p, O_CLOEXEC) < 0)
        return -errno;
    (void)fcntl(p[0], F_SETFL, O_NONBLOCK);
    return 0;
}

/* A spare may serve only the incarnation it was made for, with the
 * geometry and settings the cluster uses now. It is our own memory, mapped
 * by no worker (a warm standby maps it, but its fields read here are set
 * before that standby's fork and checked only by the supervisor, and a
 * standby that died is dropped with its spare before this runs): reading
 * its control block is safe. */
static int spare_fits(const pm_cluster *c, const pm__slot *s, const pm__channel *l)
{
    return pm__channel_made_for(l, s->index, s->incarnation, &c->channel_params);
}

/* The channel (and, when the spare has them, the exec error pipe into
 * err_pipe and the output pipes into out) for the incarnation now
 * starting: the spare when it fits, a new channel otherwise (and -1s). 0 or
 * -errno. */
int pm__spare_take(pm_cluster *c, pm__slot *s, int err_pipe[2], int out[2][2], int *notify_fd,
                   char *notify, size_t size)
{
    *notify_fd = -1;
    if (s->spare != NULL && spare_fits(c, s, s->spare)) {
        /* By value: nothing points into the pm__channel itself (its rings
         * point into the mapping). */
        pm__spare *sp = pm__spare_of(s);
        s->channel = sp->channel;
        err_pipe[0] = sp->err_pipe[0];
        err_pipe[1] = sp->err_pipe[1];
        memcpy(out, sp->out, sizeof(sp->out));
        *notify_fd = sp->notify_fd;
        if (sp->notify_fd >= 0)
            snprintf(notify, size, "%s", sp->notify);
        free(sp);
        s->spare = NULL;
        return 0;
    }
    pm__incarnation_spare_drop(c, s);
    return pm__channel_create(&s->channel, s->index, s->incarnation, &c->channel_params);
}

/* A spare holds six fds (eight with the exec error pipe, four more with
 * the output pipes): it is kept only while they sit below half the
 * fd limit (fds are allocated lowest first, so the highest of them tells
 * how many are in use), so that spares never take the fds that the slots'
 * own channels, pidfds and pipes need: a large cluster under a small limit
 * simply restarts without them. */
int pm__fds_affordable(const int *fds, size_t n)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) < 0)
        return 0;
    if (rl.rlim_cur == RLIM_INFINITY)
        return 1;
    for (size_t i = 0; i < n; i++)
        if (fds[i] >= 0 && (rlim_t)fds[i] >= rl.rlim_cur / 2) /* -1: none */
            return 0;
    return 1;
}

static int spare_affordable(const pm__spare *sp)
{
    int fds[PM__CHANNEL_NFDS + 7];
    pm__channel_fds(&sp->channel, fds);
    fds[PM__CHANNEL_NFDS] = sp->err_pipe[0];
    fds[PM__CHANNEL_NFDS + 1] = sp->err_pipe[1];
    memcpy(&fds[PM__CHANNEL_NFDS + 2], sp->out, sizeof(sp->out));
    fds[PM__CHANNEL_NFDS + 6] = sp->notify_fd;
    return pm__fds_affordable(fds, sizeof(fds) / sizeof(fds[0]));
}

/* Exec mode prepares the error pipe too, when the spawn is the vfork
 * clone: a forked exec child (the fallback) holds copies of every
 * close-on-exec fd until its exec, and a spare pipe existing while another
 * slot's child is in that window could keep its write end open after its
 * own worker died, when the reap reads it for EOF (reap.c). A pipe made at
 * the start, after every earlier child's fork, has no such copy. */
static int spare_pipe(const pm_cluster *c)
{
    return c->o->exec_path != NULL && pm__spawn_waits_exec();
}

/* Captured output: the two pipes too, by the same rule (their write ends
 * would keep a pipe from EOF where a forked exec child held a copy). In
 * fork mode every fork child closes every spare's (incarnation.c). */
static int spare_output(const pm_cluster *c)
{
    return c->o->output == PM_OUTPUT_CAPTURE && (c->o->exec_path == NULL || pm__spawn_waits_exec());
}

/* The pipes the spare holds besides its channel, when it holds them, and
 * with sd_notify readiness the next incarnation's notify socket (its name
 * holds the incarnation; fenced as the channel is: made after the fork of the
 * incarnation before, close-on-exec, its name told to no process yet).
 * That socket is best effort: without it the start opens its own. 0 or
 * -errno (what was made is in sp, for the caller to close). */
static int spare_pipes(const pm_cluster *c, const pm__slot *s, pm__spare *sp)
{
    int rc;
    if (c->o->exec_path != NULL && c->o->ready_mode == PM_READY_NOTIFY) {
        rc = pm__notify_open(c->self, s->index, s->incarnation + 1, sp->notify, sizeof(sp->notify));
        sp->notify_fd = rc >= 0 ? rc : -1;
    }
    if (spare_pipe(c) && (rc = pm__err_pipe_open(sp->err_pipe)) < 0)
        return rc;
    if (spare_output(c)) {
        int out[2][2];
        if ((rc = pm__output_pipes(out)) < 0)
            return rc;
        memcpy(sp->out, out, sizeof(out));
    }
    return 0;
}

/* Best effort: without a spare the next start creates its channel itself.
 * errno preserved (called on the success path).
 *
 * Called once the incarnation is ready (actions.c act_ready), not right
 * after its fork: on two CPUs the child often waits for the CPU its parent
 * is on (the wake-up of a new task prefers the parent's CPU when the other
 * is busy), so the channel's system calls and first-touch faults made then
 * would delay the worker's start, on the very path the spare keeps clear.
 * A worker that dies before ready restarts without one (its channel is made
 * at the start). */
void pm__incarnation_spare_prepare(pm_cluster *c, pm__slot *s)
{
    if (s->spare != NULL)
        return;
    int saved = errno;
    pm__spare *sp = malloc(sizeof(*sp));
    if (sp != NULL &&
        pm__channel_create(&sp->channel, s->index, s->incarnation + 1, &c->channel_params) == 0) {
        sp->err_pipe[0] = sp->err_pipe[1] = -1;
        sp->out[0][0] = sp->out[0][1] = sp->out[1][0] = sp->out[1][1] = -1;
        sp->notify_fd = -1;
        if (spare_pipes(c, s, sp) == 0 && spare_affordable(sp)) {
            s->spare = &sp->channel;
            sp = NULL;
        } else {
            pm__channel_close(&sp->channel);
            spare_close_pipes(sp);
        }
    }
    free(sp);
    pm__errno_restore(saved);
}
