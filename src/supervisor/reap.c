/* SPDX-License-Identifier: MIT */
/* reap.c - ending an incarnation: signalling it, reaping it, releasing what it held, killing what is left. */
#define _GNU_SOURCE
#include "cluster.h"

#include <dirent.h>
#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

#include "os/spawn.h"

void pm__cluster_signal(pm__slot *s, int sig)
{
    if (!pm__slot_has_process(s))
        return;
    /* Through the pidfd: the pid itself may belong to another process once
     * reaped. Without pidfd support, kill() is still safe here because only
     * this supervisor reaps its children and this one is not reaped yet. */
    if (s->pidfd >= 0)
        (void)pm__pidfd_signal(s->pidfd, sig);
    else
        (void)kill(s->pid, sig);
    if (sig == SIGKILL)
        s->kill_sent = 1;
}

/* A fault found by the hub: the worker is killed; the exit that follows is
 * charged as a failure with this reason. */
void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason)
{
    if (!pm__slot_has_process(s) || !c->hub.ports[s->index].reading)
        return; /* already cut off */
    if (s->kill_reason == 0)
        s->kill_reason = reason;
    pm__cluster_disarm_hub(c, s); /* never read from this incarnation again */
    /* Tell the worker, in case the SIGKILL below takes a while to land (a
     * process in uninterruptible sleep): its next procmesh call returns
     * -ESHUTDOWN. */
    struct pm__ctl *ctl = s->link.map;
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

/* Stops reading the slot's ring for good (this incarnation). */
void pm__cluster_disarm_hub(pm_cluster *c, pm__slot *s)
{
    if (s->hub_armed) {
        pm__loop_disarm(&c->loop, s->link.hub_efd, PM__TAG(PM__TAG_HUB, s->index, s->incarnation));
        s->hub_armed = 0;
    }
    if (s->sock_armed) {
        pm__loop_disarm(&c->loop, s->link.sock, PM__TAG(PM__TAG_SOCK, s->index, s->incarnation));
        s->sock_armed = 0;
    }
    s->hub_rang = 0;
    pm__hub_port_cut(&c->hub, s->index);
}

/* Everything the dead incarnation had: its pidfd, its error pipe, its
 * memory (unmapped and closed, never reused). */
void pm__cluster_release(pm_cluster *c, pm__slot *s)
{
    pm__cluster_disarm_hub(c, s);
    if (s->pid_armed) {
        pm__loop_disarm(&c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation));
        s->pid_armed = 0;
    }
    pm__close(s->pidfd);
    s->pidfd = -1;
    if (s->pipe_armed) {
        pm__loop_disarm(&c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation));
        s->pipe_armed = 0;
    }
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    if (s->notify_armed) {
        pm__loop_disarm(&c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation));
        s->notify_armed = 0;
    }
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__output_close(c, s);
    pm__hub_port_close(&c->hub, s->index);
    pm__link_close(&s->link);
    s->pid = 0;
    s->hello = 0;
    s->kill_sent = 0;
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

/* Longest wait for a killed cgroup to empty: only processes stuck in
 * uninterruptible sleep outlast a SIGKILL, and the loop must go on. */
#define PM__TREE_WAIT_MS 1000

void pm__cluster_end_group(pm__slot *s)
{
    /* The worker made itself the leader of group s->pid (pm__child_contain)
     * and is a zombie now, so the id cannot belong to anyone else; ESRCH
     * means nothing of it is left in the group. */
    (void)kill(-s->pid, SIGKILL);
}

void pm__cluster_end_tree(pm_cluster *c, pm__slot *s)
{
    s->oom_kills = 0;
    if (c->cg.mode != PM_CONTAIN_CGROUP || s->cg.events_fd < 0)
        return;
    int rc = pm__cg_slot_end(&s->cg, PM__TREE_WAIT_MS, &s->oom_kills);
    if (rc < 0)
        /* The replacement starts anyway (the slot must not stay down for a
         * process the kernel will not let die); said once per occurrence. */
        pm__diag(c->o, c, "cgroup_not_empty",
                 "slot %u: its cgroup did not empty within %d ms after cgroup.kill (%s): a "
                 "process in uninterruptible sleep? the next incarnation starts beside it",
                 s->index, PM__TREE_WAIT_MS, pm_strerror(rc));
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
    pm__hub_port_service(&c->hub, s->index);
    pm__cluster_read_notify(c, s);
    if (s->exec_pipe >= 0 && s->exec_errno == 0) {
        int e = 0;
        /* The child wrote errno before exiting, so it is already there; and
         * the process is gone, so the write end is closed: the read gives
         * errno or EOF, never EAGAIN. */
        ssize_t k = read(s->exec_pipe, &e, sizeof(e));
        if (k == (ssize_t)sizeof(e))
            s->exec_errno = e;
        else if (k == 0 && c->o->ready_mode == PM_READY_EXEC && s->state == PM_SLOT_STARTING &&
                 s->kill_reason == 0)
            /* EOF: exec succeeded, so it was ready (PM_READY_EXEC), even if
             * this exit is seen before the pipe's own completion. */
            pm__cluster_dispatch(c, s, PM__EV_READY);
    }
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
    int reason = stop_killed          ? PM_REASON_STOP_KILL
                 : s->kill_reason != 0 ? s->kill_reason
                 : s->exec_errno != 0 ? PM_REASON_EXEC
                 : stopped            ? PM_REASON_STOP
                 : s->last_signal != 0 ? PM_REASON_SIGNAL
                                       : PM_REASON_EXIT;
    pm__crash_collect(&s->crash, s->link.map != NULL ? (const void *)&pm__link_ctl(&s->link)->crash : NULL,
                      s->incarnation, s->last_signal, s->last_core);
    /* Its last words first: what it wrote just before it died is still in
     * its pipes, and belongs before the report of its end. */
    pm__output_drain(c, s);
    pm__cluster_emit(c, PM_EVENT_EXITED, s, reason, 0);
    /* The close answers main's requests it held -EHOSTDOWN, with this. */
    pm__ending end;
    pm__pool_on_death(c, s, reason, &end);
    pm__cluster_release(c, s);
    c->hub.ending = NULL;
    pm__cluster_dispatch(c, s, PM__EV_EXITED);
    return 1;
}

/* Kills and reaps every process of the cluster. Only returns when all are
 * gone. First through the loop (so events are reported), then, if the loop
 * fails, by blocking waits. */
void pm__cluster_kill_all(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (pm__slot_has_process(s)) {
            pm__cluster_set_state(c, s, PM_SLOT_STOPPING);
            if (s->kill_reason == 0)
                s->kill_reason = PM_REASON_STOP;
            pm__cluster_signal(s, SIGKILL);
        }
        pm__slot_set_deadline(s, 0, 0);
    }
    for (;;) {
        int alive = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            alive += pm__slot_has_process(&c->slots[i]);
        if (alive == 0)
            return;
        if (pm__cluster_turn(c, 100) < 0)
            break;
        pm__cluster_reap_all(c);
    }
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (!pm__slot_has_process(s))
            continue;
        siginfo_t si;
        pm__cluster_signal(s, SIGKILL);
        while (waitid(P_PID, (id_t)s->pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
            ;
        pm__cluster_end_group(s);
        while (waitid(P_PID, (id_t)s->pid, &si, WEXITED) < 0 && errno == EINTR)
            ;
        pm__cluster_end_tree(c, s);
        pm__cluster_release(c, s);
        pm__cluster_set_state(c, s, PM_SLOT_STOPPED);
    }
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
