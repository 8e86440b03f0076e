/* SPDX-License-Identifier: MIT */
/* reap.c - ending an incarnation: a fault cuts it off and kills it; its
 * exit is collected, reported and drives the slot; the loop's exit events
 * (a pidfd, the signalfd's SIGCHLD) are handled here; orphans are killed. The
 * primitives it uses (signal, release, ending the tree) are core.c's. */
#define _GNU_SOURCE
#include "reap.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/signalfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "actions.h"
#include "diag.h"
#include "core.h"
#include "os/spawn.h"
#include "pool.h"
#include "readiness.h"
#include "standby_fork.h"
#include "hub/hub.h"
#include "os/loop.h"
#include "options.h"

/* A fault found by the hub: the worker is killed; the exit that follows is
 * charged as a failure with this reason. */
void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason)
{
    if (!pm__slot_has_process(s) || !pm__hub_port_reading(c->hub, s->index))
        return; /* already cut off */
    if (s->kill_reason == 0)
        s->kill_reason = reason;
    pm__cluster_disarm_hub(c, s); /* never read from this incarnation again */
    /* Tell the worker, in case the SIGKILL below takes a while to land (a
     * process in uninterruptible sleep): its next procmesh call returns
     * -ESHUTDOWN. */
    struct pm__ctl *ctl = s->channel.map;
    if (ctl != NULL) {
        atomic_store_explicit(&ctl->fenced, 1, memory_order_release);
        atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    }
    s->fences++;
    s->last_fence_reason = reason;
    if (reason == PM_REASON_HEARTBEAT)
        c->stats.fences_heartbeat++;
    else if (reason == PM_REASON_CORRUPT_RING)
        c->stats.fences_corrupt_ring++;
    else if (reason == PM_REASON_NOT_DRAINING)
        ; /* counted by the hub as not_draining */
    else
        c->stats.fences_protocol++;
    pm__cluster_emit(c, PM_EVENT_FENCED, s, reason, 0);
    pm__cluster_dispatch(c, s, PM__EV_FAULT);
}

/* waitid without blocking: through the pidfd when the kernel knows
 * P_PIDFD (5.4), else by pid, which is just as safe here because nobody but
 * this supervisor reaps its children, so the pid cannot have been reused.
 * flags: 0 or WNOWAIT (look, leave the zombie). */
static int wait_nohang(const pm__slot *s, siginfo_t *si, int flags)
{
    if (s->pidfd >= 0) {
        if (waitid((idtype_t)P_PIDFD, (id_t)s->pidfd, si, WEXITED | WNOHANG | flags) == 0)
            return 0;
        if (errno != EINVAL)
            return -errno;
    }
    if (waitid(P_PID, (id_t)s->pid, si, WEXITED | WNOHANG | flags) == 0)
        return 0;
    return -errno;
}

/* Why the incarnation ended (PM_REASON_*), from its exit status and what
 * procmesh did to it. */
static int exit_reason(const pm__slot *s)
{
    /* Asked to stop, it ended by its exit or by our SIGTERM: that is the
     * stop's doing ("stop"), not a crash. Any other signal while stopping
     * is still reported as the signal it was. */
    int stopped = s->state == PM_SLOT_STOPPING &&
                  (s->last_signal == 0 || s->last_signal == SIGTERM);
    /* Ended by the SIGKILL we sent to end a stop (the stop timeout, a stop
     * timeout of 0, a terminate that kills at once): our own doing, which
     * "signal" (a signal procmesh did not send) would misreport. A
     * SIGKILL seen before ours went out is someone else's (the OOM killer). */
    int stop_killed = s->state == PM_SLOT_STOPPING && s->last_signal == SIGKILL && s->kill_sent &&
                      (s->kill_reason == 0 || s->kill_reason == PM_REASON_STOP);
    return stop_killed           ? PM_REASON_STOP_KILL
           : s->kill_reason != 0 ? s->kill_reason
           : s->exec_errno != 0  ? PM_REASON_EXEC
           : stopped             ? PM_REASON_STOP
           : s->last_signal != 0 ? PM_REASON_SIGNAL
                                 : PM_REASON_EXIT;
}
/* Its last words, from the pipes it leaves: a stream the drain could not
 * read to its end is said (a process that outlived the worker holds its
 * pipe: output.c). */
static void drain_output(pm_cluster *c, pm__slot *s)
{
    int err[2];
    if (pm__output_drain(c, s, err) == 0)
        return;
    for (int i = 0; i < 2; i++)
        if (err[i] < 0)
            pm__diag(c->o, c, "output_drain_abandoned",
                     "slot %u incarnation %llu: %s left unread: %s", s->index,
                     (unsigned long long)s->incarnation, i == 0 ? "stdout" : "stderr",
                     err[i] == -ETIMEDOUT
                         ? "its read did not return within a second (a process that outlived "
                           "the worker holds the pipe, e.g. in splice())"
                     : err[i] == -EBUSY
                         ? "not read: the pipes of the slot's earlier incarnations are still "
                           "held by processes that outlived them"
                         : strerror(-err[i]));
}


/* Collects the exit status if the process has ended and drives the slot.
 * Returns 1 when reaped. A second report about the same exit (pidfd and
 * SIGCHLD both fire) finds no process and does nothing. */
int pm__cluster_try_reap(pm_cluster *c, pm__slot *s)
{
    if (!pm__slot_has_process(s))
        return 0;
    siginfo_t si;
    memset(&si, 0, sizeof(si));
    int rc = wait_nohang(s, &si, WNOWAIT);
    if (rc == 0 && si.si_pid != 0) {
        /* Ended: its descendants end with it, before it is reaped (see
         * pm__cluster_end_group), then it is reaped. */
        pm__cluster_end_group(s);
        siginfo_t again;
        memset(&again, 0, sizeof(again));
        (void)wait_nohang(s, &again, 0);
    }
    if (rc == 0 && si.si_pid != 0)
        pm__cluster_end_tree(c, s);
    if (rc == -ECHILD) {
        /* Someone else (an application SIGCHLD handler calling
         * waitpid(-1)) took the status: the process is gone, how is lost. */
        s->last_exit_code = -1;
        s->last_signal = 0;
        s->last_core = 0;
    } else if (rc < 0 || si.si_pid == 0) {
        return 0; /* still running */
    } else if (si.si_code == CLD_EXITED) {
        s->last_exit_code = si.si_status;
        s->last_signal = 0;
        s->last_core = 0;
    } else {
        s->last_exit_code = -1;
        s->last_signal = si.si_status;
        s->last_core = si.si_code == CLD_DUMPED;
    }
    /* A READY published just before the exit still counts: read what the
     * worker completed before its end is handled. The loop may report the
     * exit (pidfd, SIGCHLD) before or after the readiness (ring, notify
     * socket, exec pipe) in the same turn or the next: scheduling decides,
     * so the outcome must not depend on it. */
    pm__hub_port_service(c->hub, s->index);
    pm__cluster_read_notify(c, s);
    pm__readiness_exec_at_reap(c, s);
    int reason = exit_reason(s);
    pm__crash_collect(&s->crash, s->channel.map != NULL ? (const void *)&pm__channel_ctl(&s->channel)->crash : NULL,
                      s->incarnation, s->last_signal, s->last_core);
    /* Its last words first: what it wrote just before it died is still in
     * its pipes, and belongs before the report of its end. */
    drain_output(c, s);
    pm__cluster_emit(c, PM_EVENT_EXITED, s, reason, 0);
    /* The close answers main's requests it held -EHOSTDOWN, with this. */
    pm__ending end;
    pm__pool_on_death(c, s, reason, &end);
    pm__cluster_release_keep(c, s, pm__cluster_dying(c));
    pm__hub_set_ending(c->hub, NULL);
    pm__cluster_dispatch(c, s, PM__EV_EXITED);
    return 1;
}

void pm__reap_on_pidfd(pm_cluster *c, pm__slot *s)
{
    s->pid_armed = 0;
    if (!pm__cluster_try_reap(c, s) && s->pidfd >= 0 &&
        pm__loop_arm(c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation)) == 0)
        s->pid_armed = 1;
}

/* Tries to reap every slot: a waitid per slot with a process. Only where
 * nothing else reports exits (no pidfd and no signalfd, poll_children),
 * and when the cluster ends. */
void pm__cluster_reap_all(pm_cluster *c)
{
    c->turn_visits += c->nslots;
    for (unsigned i = 0; i < c->nslots; i++)
        pm__cluster_try_reap(c, &c->slots[i]);
}

/* SIGCHLD without reap_orphans. A worker whose pidfd is polled needs
 * nothing here: that poll's completion names its slot (PM__TAG_PIDFD), so
 * its exit costs O(1). Only a worker without one (a kernel without pidfds,
 * or an arm that failed) is looked for with a waitid. The walk reads two
 * fields per slot and makes no system call for a watched one; it runs per
 * SIGCHLD (an exit), never per turn. */
static void reap_unwatched(pm_cluster *c)
{
    c->turn_visits += c->nslots;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (pm__slot_has_process(s) && !s->pid_armed)
            pm__cluster_try_reap(c, s);
    }
}

/* As PID 1 or a subreaper: every child that has exited, worker or not.
 * WNOWAIT peeks without reaping, so a worker is reaped by its own path
 * (try_reap, which reports it) and anything else here. */
static void reap_children(pm_cluster *c)
{
    for (;;) {
        siginfo_t si;
        memset(&si, 0, sizeof(si));
        if (waitid(P_ALL, 0, &si, WEXITED | WNOHANG | WNOWAIT) < 0 || si.si_pid == 0)
            break;
        /* Which slot, if any: a walk of the pids (memory only), once per
         * exited child, never per turn. */
        pm__slot *w = NULL;
        c->turn_visits += c->nslots;
        for (unsigned i = 0; i < c->nslots && w == NULL; i++)
            if (c->slots[i].pid == si.si_pid)
                w = &c->slots[i];
        if (w != NULL) {
            if (!pm__cluster_try_reap(c, w))
                break; /* cannot happen: it is a zombie; never loop on it */
        } else if (pm__standby_reap_pid(c, si.si_pid)) {
            /* A warm standby that died: reaped by its own path. */
        } else {
            while (waitpid(si.si_pid, NULL, 0) < 0 && errno == EINTR)
                ;
            c->stats.orphans_reaped++;
        }
    }
}

/* The signalfd is readable (PM__TAG_SIGNAL): a SIGCHLD is an exit to
 * reap; any other signal is recorded for pm_cluster_run to return on. */
void pm__reap_on_signal(pm_cluster *c)
{
    struct signalfd_siginfo si[16];
    ssize_t n;
    while ((n = read(c->sigfd, si, sizeof(si))) > 0) {
        for (size_t i = 0; i < (size_t)n / sizeof(si[0]); i++) {
            if (si[i].ssi_signo == SIGCHLD) {
                if (c->o->reap_orphans)
                    reap_children(c);
                else
                    reap_unwatched(c);
            }
            else
                c->last_signal = (int)si[i].ssi_signo;
        }
    }
    pm__loop_arm(c->loop, c->sigfd, PM__TAG(PM__TAG_SIGNAL, 0, 0));
}

/* Process-group fallback, for a supervisor that reaps orphans (PID 1 or a
 * subreaper): what a worker's setsid() descendant left is re-parented to
 * us, outside every process group we kill. At the end, with every worker
 * reaped, each child still listed in /proc/self/task/<tid>/children is such
 * a descendant (reap_orphans says this process's children are ours to
 * take): SIGKILLed (an unreaped child's pid cannot be reused) and reaped,
 * each waited for at most a second. Without CONFIG_PROC_CHILDREN nothing is
 * listed and they are left to whoever reaps after us. */
void pm__cluster_kill_orphans(void)
{
    char path[64], text[4096];
    pid_t pids[256];
    int n = 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        snprintf(path, sizeof(path), "/proc/self/task/%.16s/children", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, text, sizeof(text) - 1);
        pm__close(fd);
        text[k > 0 ? k : 0] = '\0';
        for (char *p = text, *end; n < (int)PM__ARRAY_SIZE(pids); p = end) {
            long pid = strtol(p, &end, 10);
            if (end == p)
                break;
            pids[n++] = (pid_t)pid;
        }
    }
    if (d != NULL)
        closedir(d);
    for (int i = 0; i < n; i++)
        (void)kill(pids[i], SIGKILL);
    for (int i = 0; i < n; i++) {
        uint64_t end = pm__now_ms() + 1000;
        while (waitpid(pids[i], NULL, WNOHANG) == 0 && pm__now_ms() < end)
            usleep(1000);
    }
}
