/* SPDX-License-Identifier: MIT */
/*
 * readiness.c - what a worker says about itself outside its ring: READY=1,
 * WATCHDOG=1 and STOPPING=1 on its NOTIFY_SOCKET (notify readiness), and
 * its exec pipe (exec readiness: EOF when exec succeeded, else its errno).
 * Read when the loop reports them, and once more at the reap, so that what
 * it said just before it died counts whichever the loop saw first.
 */
#define _GNU_SOURCE
#include "readiness.h"

#include <errno.h>
#include <unistd.h>

#include "actions.h"
#include "core.h"
#include "os/notify.h"
#include "os/loop.h"
#include "options.h"

/* What the worker said on its NOTIFY_SOCKET. Order inside one read does
 * not matter: READY is acted on first, as systemd does. Also called when the
 * worker is reaped, before its exit is handled: a READY=1 it sent just
 * before exiting is still queued on the socket, and it was ready whichever
 * of the two reports the loop happened to see first. */
void pm__cluster_read_notify(pm_cluster *c, pm__slot *s)
{
    if (s->notify_fd < 0)
        return;
    /* The credentials were stamped at send time, so the pid still matches
     * after the sender has exited. */
    unsigned what = pm__notify_read(s->notify_fd, s->pid, &c->stats.notify_dropped);
    if (what & PM__NOTIFY_READY)
        pm__cluster_dispatch(c, s, PM__EV_READY);
    if (what & PM__NOTIFY_WATCHDOG) {
        s->watchdog = 1;
        s->progress_ms = pm__now_ms();
    }
    if (what & PM__NOTIFY_STOPPING)
        pm__cluster_emit(c, PM_EVENT_STOPPING, s, PM_REASON_NOTIFY, 0);
}

void pm__readiness_on_notify(pm_cluster *c, pm__slot *s)
{
    s->notify_armed = 0;
    pm__cluster_read_notify(c, s);
    if (s->notify_fd >= 0 &&
        pm__loop_arm(c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
}

void pm__readiness_on_exec_pipe(pm_cluster *c, pm__slot *s)
{
    s->pipe_armed = 0;
    int e = 0;
    ssize_t k = read(s->exec_pipe, &e, sizeof(e));
    if (k == 0)
        pm__cluster_dispatch(c, s, PM__EV_READY); /* exec succeeded */
    else if (k == (ssize_t)sizeof(e))
        s->exec_errno = e; /* the exit follows */
    else if (k < 0 && errno == EAGAIN &&
             pm__loop_arm(c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation)) == 0)
        s->pipe_armed = 1;
}

int pm__exec_pipe_verdict(long got, int err, int exit_code, int signal)
{
    /* The child wrote errno before exiting (spawn.c child_fail; after a
     * clone(CLONE_VFORK) the parent wrote it before the clone returned), so
     * a failure is there by now. */
    if (got == (long)sizeof(int))
        return PM__EXEC_FAILED;
    /* End of file: the child's copy of the write end went at its exec. */
    if (got == 0)
        return PM__EXEC_DONE;
    /* Empty but open (EAGAIN): another child of ours holds a copy of the
     * write end, taken at its own fork while the pipe was open (a slot's
     * spare error pipe is made ahead of need; another cluster's spawn of
     * several forks its children, spawn.h no_wait). A clone(CLONE_VFORK)
     * child lets its parent go at its execve's exec_mmap, before
     * do_close_on_exec drops its close-on-exec fds, so on a loaded machine
     * it may still hold them when the worker whose pipe it is has exec'd
     * and exited (check_exec_ready test_ready_then_exit_under_load failed
     * so in a CI run). Every failure before the exec is written before the
     * child exits, so one that exited with a status and wrote nothing
     * exec'd; one killed by a signal may have died before its exec. */
    if (got < 0 && err == EAGAIN && exit_code >= 0 && signal == 0)
        return PM__EXEC_DONE;
    return PM__EXEC_UNKNOWN;
}

void pm__readiness_exec_at_reap(pm_cluster *c, pm__slot *s)
{
    if (s->exec_pipe < 0 || s->exec_errno != 0)
        return;
    int e = 0;
    ssize_t k = read(s->exec_pipe, &e, sizeof(e));
    int v = pm__exec_pipe_verdict((long)k, k < 0 ? errno : 0, s->last_exit_code, s->last_signal);
    if (v == PM__EXEC_FAILED)
        s->exec_errno = e;
    else if (v == PM__EXEC_DONE && c->o->ready_mode == PM_READY_EXEC &&
             s->state == PM_SLOT_STARTING && s->kill_reason == 0)
        /* Exec succeeded, so it was ready (PM_READY_EXEC), even if this
         * exit is seen before the pipe's own completion. */
        pm__cluster_dispatch(c, s, PM__EV_READY);
}
