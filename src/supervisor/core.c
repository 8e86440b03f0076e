/* SPDX-License-Identifier: MIT */
/*
 * core.c - the supervisor's primitives on one slot: the event to the
 * application, the state mirrored in the hub's port, signals, cutting a
 * worker off and releasing what it had, ending its process tree, the polls
 * on its port's doorbell and fd socket. What decides (the slot table's
 * actions, the reap, the turn) sits above and calls these; nothing here
 * calls back up.
 */
#define _GNU_SOURCE
#include "core.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "diag.h"
#include "hub/hub.h"
#include "os/doorbell.h"
#include "os/loop.h"
#include "options.h"
#include "os/spawn.h"

/* Empties an eventfd or timerfd: what fired matters, not how often. */
void pm__slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a)
{
    pm__node_address(pm__hub_names(c->hub), s->index, pm__slot_has_process(s) ? s->incarnation : 0, a);
}

void pm__cluster_emit(pm_cluster *c, int type, const pm__slot *s, int reason, uint32_t delay)
{
    if (c->o->on_event == NULL)
        return;
    pm_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.slot = s->index;
    ev.pid = s->pid;
    ev.incarnation = s->incarnation;
    ev.delay_ms = delay;
    ev.restarts = s->budget.total;
    ev.reason_code = reason;
    ev.reason = pm_reason_name(reason);
    ev.detail = c->event_detail;
    if (type == PM_EVENT_EXITED) {
        ev.exit_code = s->last_exit_code;
        ev.signal = s->last_signal;
        ev.core_dumped = s->last_core;
        ev.oom_kills = s->oom_kills;
    } else if (type == PM_EVENT_SPAWN_FAILED) {
        ev.exit_code = s->last_exit_code;
    } else if (type == PM_EVENT_FENCED && reason == PM_REASON_VERSION) {
        ev.worker_version = s->hello_version;
    }
    PM__APP_CALLBACK(c->hub, c->o->on_event(c, &ev, c->o->on_event_arg));
}

/* The slot's state, mirrored in its port: the hub lets only a ready port
 * receive, and a ready or stopping one send. */
void pm__cluster_set_state(pm_cluster *c, pm__slot *s, int state)
{
    static const int port_state[] = {
        [PM_SLOT_STARTING] = PM__PORT_STARTING,
        [PM_SLOT_READY] = PM__PORT_READY,
        [PM_SLOT_STOPPING] = PM__PORT_STOPPING,
        [PM_SLOT_BACKOFF] = PM__PORT_CLOSED,
        [PM_SLOT_STOPPED] = PM__PORT_CLOSED,
        [PM_SLOT_RETIRED] = PM__PORT_CLOSED,
    };
    s->state = state;
    pm__hub_port_set_state(c->hub, s->index, port_state[state]);
}

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

/* Stops reading the slot's ring for good (this incarnation). */
void pm__cluster_disarm_hub(pm_cluster *c, pm__slot *s)
{
    if (s->hub_armed) {
        pm__loop_disarm(c->loop, s->channel.hub_efd, PM__TAG(PM__TAG_HUB, s->index, s->incarnation));
        s->hub_armed = 0;
    }
    if (s->sock_armed) {
        pm__loop_disarm(c->loop, s->channel.sock, PM__TAG(PM__TAG_SOCK, s->index, s->incarnation));
        s->sock_armed = 0;
    }
    s->hub_rang = 0;
    s->sock_rang = 0;
    pm__hub_port_cut(c->hub, s->index);
}

/* Everything the dead incarnation had: its pidfd, its error pipe, its
 * memory (unmapped and closed, never reused). */
void pm__cluster_release(pm_cluster *c, pm__slot *s)
{
    pm__cluster_release_keep(c, s, NULL);
}

/* A reaped incarnation's memory and channel fds are let go at the end of
 * the turn, not at the reap: with no backoff the turn forks the
 * replacement (its deadline fires after the completions), and a munmap and
 * four closes (about 0.1 ms on a 2-CPU VM) need not come before that fork.
 * A child forked meanwhile drops them with the slots' fds (forkdrop.c
 * plan_own); the mapping is never copied into a fork (channel.h,
 * pm__channel_adopt_fork). NULL (close now) without memory for the list. */
pm__channel *pm__cluster_dying(pm_cluster *c)
{
    if (c->ndying == c->dying_cap) {
        unsigned cap = c->dying_cap == 0 ? 4 : c->dying_cap * 2;
        pm__channel *v = realloc(c->dying, cap * sizeof(*v));
        if (v == NULL)
            return NULL;
        c->dying = v;
        c->dying_cap = cap;
    }
    return &c->dying[c->ndying++];
}

/* The channels kept at most while replacements start: past it the turn
 * buries them anyway (a slot that crash-loops keeps a few, not more). */
#define PM__DYING_KEEP 8

/* At a turn's end. A replacement forked this turn (or earlier) runs its
 * way to READY while the supervisor waits for it; the munmap and the five
 * closes of the channels it replaced would be on that way (a child that
 * gets the CPU only when its parent sleeps waits for them), so they wait
 * until no slot is STARTING: the turn that reads READY buries them. The
 * slots are scanned only while something waits to be buried. A child
 * forked meanwhile drops those fds with the slots' (forkdrop.c
 * plan_own); their mappings are never copied into a fork. */
void pm__cluster_bury_turn(pm_cluster *c)
{
    if (c->ndying == 0)
        return;
    if (c->ndying < PM__DYING_KEEP)
        for (unsigned i = 0; i < c->nslots; i++)
            if (c->slots[i].state == PM_SLOT_STARTING && pm__slot_has_process(&c->slots[i]))
                return;
    pm__cluster_bury(c);
}

void pm__cluster_bury(pm_cluster *c)
{
    /* Released, not zeroed: past ndying no entry is read again (the next
     * pm__cluster_dying overwrites it whole), and the list shares a heap
     * page copy-on-write with the replacement just forked, so zeroing
     * the entries would copy that page while the child starts. */
    for (unsigned i = 0; i < c->ndying; i++)
        pm__channel_release_copy(&c->dying[i]);
    if (c->ndying != 0)
        c->ndying = 0;
}

void pm__cluster_release_keep(pm_cluster *c, pm__slot *s, pm__channel *keep)
{
    pm__cluster_disarm_hub(c, s);
    if (s->pid_armed) {
        pm__loop_disarm(c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation));
        s->pid_armed = 0;
    }
    pm__close(s->pidfd);
    s->pidfd = -1;
    if (s->pipe_armed) {
        pm__loop_disarm(c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation));
        s->pipe_armed = 0;
    }
    pm__close(s->exec_pipe);
    s->exec_pipe = -1;
    if (s->notify_armed) {
        pm__loop_disarm(c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation));
        s->notify_armed = 0;
    }
    pm__close(s->notify_fd);
    s->notify_fd = -1;
    pm__output_close(c, s);
    pm__hub_port_close(c->hub, s->index);
    if (keep != NULL) {
        /* The hub no longer knows it (the port is closed): the caller
         * unmaps and closes it later. */
        *keep = s->channel;
        pm__channel_zero(&s->channel);
    } else {
        pm__channel_close(&s->channel);
    }
    s->pid = 0;
    s->hello = 0;
    s->init_sent = 0;
    s->kill_sent = 0;
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
                 "slot %u: its cgroup did not empty within %d ms after it was killed (%s): a "
                 "process in uninterruptible sleep? the next incarnation starts beside it",
                 s->index, PM__TREE_WAIT_MS, pm_strerror(rc));
}

/* Services the slot's port once this turn: its doorbell rang or its ring
 * had work left over. The doorbell stays registered (a multishot poll) for
 * as long as the port is read; it is registered again only when the loop
 * said that the registration ended (pm__cluster_on_doorbell). */
void pm__cluster_on_hub(pm_cluster *c, pm__slot *s)
{
    s->hub_rang = 0;
    pm__hub_port_service(c->hub, s->index);
    /* Records that arrived (pm__cluster_on_sock): taken after the ring's
     * frames, every turn they come, whether the port's frames are read or
     * held (a record left in the kernel counts against its user's fds in
     * flight). */
    if (s->sock_rang) {
        s->sock_rang = 0;
        pm__hub_port_records(c->hub, s->index);
    }
    if (pm__hub_port_reading(c->hub, s->index) && !s->hub_armed &&
        pm__loop_arm_multi(c->loop, s->channel.hub_efd,
                           PM__TAG(PM__TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
    pm__cluster_arm_sock(c, s);
}

/* The ports with work (the hub's ready list: doorbells that rang,
 * batches cut at their cap, senders unblocked), once each, in the
 * order they became ready; never a scan of every slot. */
void pm__cluster_service_ports(pm_cluster *c)
{
    unsigned pi;
    pm__hub_pass_begin(c->hub);
    while (pm__hub_pass_next(c->hub, &pi)) {
        if (pi >= c->nslots)
            continue;
        pm__slot *s = &c->slots[pi];
        if ((s->hub_rang || pm__hub_port_busy(c->hub, pi)) && pm__slot_has_process(s))
            pm__cluster_on_hub(c, s);
    }
}

/*
 * The slot's fd socket (bigmsg.h), watched for as long as its port is
 * read, for two things: records arriving, which the hub takes at once
 * (pm__hub_port_records: a record left in the kernel counts against the
 * worker's user's fds in flight for as long as the worker likes); and,
 * once the socket refused one of the hub's records (sock_full), room
 * again (the worker took one), which services the port to flush its
 * queue. One registration, per wake-up (pm__loop_arm_multi_ev: a new
 * record, or room freed), so a socket that stays readable or writable
 * costs nothing more; it ends only when the loop says so (more 0). Room
 * is asked for only once the socket has refused a record: an empty
 * socket is writable, so asking from the start would complete the poll
 * as soon as it is armed, at every start of an incarnation, and the
 * completion's read (pm__hub_port_records: a recvmsg that finds nothing,
 * its EAGAIN written into errno's page, which a fork-mode child shares
 * until the supervisor copies it) would come between the fork and the
 * supervisor's sleep, while the new worker waits for the CPU. A refusal
 * while the poll waits for records alone cancels it, and the
 * cancellation's completion, like any, arms it again with room asked for
 * (a multishot poll keeps asking for it until the loop ends it; a
 * one-shot one, io_uring before Linux 5.13, is armed again without it
 * once the socket has room, or a writable socket would complete it every
 * turn). Retrying every turn instead would keep the hub busy, and a busy
 * hub never arms the doorbells of the ports it drained
 * (pm__hub_arm_idle).
 */
#define SOCK_CANCELLING 0x100

void pm__cluster_arm_sock(pm_cluster *c, pm__slot *s)
{
    if (!pm__hub_port_reading(c->hub, s->index) || s->channel.sock < 0)
        return;
    int sock_full = pm__hub_port_sock_full(c->hub, s->index);
    uint64_t tag = PM__TAG(PM__TAG_SOCK, s->index, s->incarnation);
    if (s->sock_armed) {
        if (!sock_full || (s->sock_armed & (PM__LOOP_OUT | SOCK_CANCELLING)) != 0)
            return;
        if (pm__loop_disarm_completes(c->loop)) {
            if (pm__loop_disarm(c->loop, s->channel.sock, tag) == 0)
                s->sock_armed |= SOCK_CANCELLING;
            else
                pm__hub_port_retry(c->hub, s->index); /* next turn, then */
            return;
        }
        /* epoll: no completion would come to arm it again; the arm below
         * changes the registration's events in place. */
    }
    unsigned ev = PM__LOOP_IN | (sock_full ? PM__LOOP_OUT : 0u);
    if (pm__loop_arm_multi_ev(c->loop, s->channel.sock, tag, ev) == 0)
        s->sock_armed = (int)ev;
    else
        pm__hub_port_retry(c->hub, s->index); /* cannot wait for it: next turn */
}

void pm__cluster_on_doorbell(pm_cluster *c, pm__slot *s, int more)
{
    if (!more) {
        /* The registration ended (a one-shot poll, or io_uring stopped
         * the multishot one): drain the doorbell before it is armed
         * again, or the new poll would fire at once. The ring is the
         * truth, the count is not. */
        s->hub_armed = 0;
        pm__doorbell_drain(s->channel.hub_efd);
    }
    /* Serviced once after all completions: a worker writing its
     * doorbell in a loop gets no more reading than one turn's cap. */
    s->hub_rang = 1;
    pm__hub_mark_rang(c->hub, s->index);
}

void pm__cluster_on_sock(pm_cluster *c, pm__slot *s, int more)
{
    /* Records arrived, or room (or the socket failed: the flush then
     * finds out). Both are the turn's service's (pm__cluster_on_hub),
     * once after all completions like a doorbell's: the records are taken
     * there after the ring is read, so that what the worker published
     * before it sent a record is read before the record is judged (a
     * READY and then a bad record make a ready worker fenced and
     * restarted, not a first start that failed: check_bigmsg
     * test_hostile_fenced, bad-record-late), and the records that waited
     * for room go in the service's flush. Reading the port here instead
     * would read it once more per completion, past the turn's cap. */
    if (!more)
        s->sock_armed = 0; /* armed again by the service */
    s->sock_rang = 1;
    s->hub_rang = 1;
    pm__hub_mark_rang(c->hub, s->index);
}
