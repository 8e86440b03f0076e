/* SPDX-License-Identifier: MIT */
/*
 * actions.c - the slot table's actions. Everything that happens to a slot
 * enters through pm__cluster_dispatch(): the event is looked up in the
 * state x event table (slot.c) and the action runs. turn.c, reap.c,
 * readiness.c and the hub's ops (cluster.c, pool.c) turn the loop's
 * readiness into those events:
 *   pidfd readable          -> reap (waitid) -> PM__EV_EXITED
 *   hub eventfd readable    -> the hub reads the slot's port -> READY, FAULT
 *   timerfd                 -> the due slot deadlines (a heap: only the
 *                              due ones are looked at) -> READY_TIMEOUT,
 *                              BACKOFF_DONE, STOP_TIMEOUT
 *   signalfd                -> SIGCHLD: try to reap every slot (a second
 *                              report of the same exit is dropped);
 *                              SIGTERM/SIGINT: pm_cluster_run returns -EINTR
 * No logic runs in a signal handler; there are none. The actions start
 * incarnations (incarnation.c) and call the primitives below (core.c); they
 * never call the reap or the turn.
 */
#define _GNU_SOURCE
#include "actions.h"

#include <signal.h>
#include <stdio.h>
#include <string.h>

#include "core.h"
#include "diag.h"
#include "incarnation.h"
#include "standby_fork.h"
#include "hub/hub.h"
#include "options.h"

static double rand01(pm_cluster *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
}

static void default_on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts,
                            void *arg)
{
    (void)c;
    (void)arg;
    char text[PM_ADDRESS_STRLEN];
    if (pm_address_format(a, text, sizeof(text)) < 0)
        strcpy(text, "?");
    fprintf(stderr, "procmesh: slot %u (%s) is permanently down after %u restarts\n", slot, text,
            restarts);
}

static int spawn_error_of(const pm__slot *s)
{
    if (s->start_error != 0)
        return s->start_error;
    if (s->exec_errno != 0)
        return -s->exec_errno;
    if (s->kill_reason == PM_REASON_READY_TIMEOUT)
        return -ETIMEDOUT;
    return -ECHILD;
}

/* A slot that will not start again has no use for a prepared channel. */
void pm__cluster_set_state_final(pm_cluster *c, pm__slot *s, int state)
{
    pm__cluster_set_state(c, s, state);
    pm__incarnation_spare_drop(c, s);
}

void pm__cluster_set_stopped(pm_cluster *c, pm__slot *s, int reason)
{
    pm__cluster_set_state_final(c, s, PM_SLOT_STOPPED);
    pm__slot_set_deadline(s, 0, 0);
    pm__cluster_emit(c, PM_EVENT_STOPPED, s, reason, 0);
}

/* After a failure: an input fault is restarted at once, not charged to
 * the budget (1: done here); anything else is the budget's (0). Not while
 * spawning, terminating or under the never policy: those rules come first
 * in the caller. */
static int input_restart(pm_cluster *c, pm__slot *s)
{
    if (!s->input_fault)
        return 0;
    s->input_fault = 0;
    s->input_faults++;
    c->stats.input_faults++;
    pm__cluster_set_state(c, s, PM_SLOT_BACKOFF);
    pm__slot_set_deadline(s, pm__now_ms(), PM__EV_BACKOFF_DONE);
    pm__cluster_emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_INPUT, 0);
    return 1;
}

/* The incarnation failed: restart it under the budget, or retire it. */
static void after_failure(pm_cluster *c, pm__slot *s)
{
    if (c->spawning && !s->ever_ready) {
        /* pm_cluster_spawn gives up on the first failure of a first start. */
        if (c->spawn_error == 0)
            c->spawn_error = spawn_error_of(s);
        char why[320];
        pm__spawn_detail(c, s, why, sizeof(why));
        c->event_detail = why;
        pm__cluster_set_stopped(c, s, PM_REASON_SPAWN_ABORTED);
        c->event_detail = NULL;
        return;
    }
    if (c->terminating) {
        pm__cluster_set_stopped(c, s, PM_REASON_STOP);
        return;
    }
    if (c->o->restart_policy == PM_RESTART_NEVER) {
        pm__cluster_set_stopped(c, s, PM_REASON_POLICY);
        return;
    }
    if (input_restart(c, s))
        return; /* the input's fault, not the worker's: no backoff, no budget */
    uint32_t delay = 0;
    int v = pm__budget_on_failure(&s->budget, &c->bcfg, pm__now_ms(), rand01(c), &delay);
    if (v == -ENOMEM) {
        /* Could not record the restart: try again after the longest
         * backoff rather than restarting without a budget. */
        v = PM__BUDGET_RESTART;
        delay = c->bcfg.max_backoff_ms;
    }
    if (v == PM__BUDGET_RETIRE) {
        pm__cluster_set_state_final(c, s, PM_SLOT_RETIRED);
        pm__slot_set_deadline(s, 0, 0);
        pm__cluster_emit(c, PM_EVENT_RETIRED, s, PM_REASON_BUDGET, 0);
        pm_address a;
        pm__slot_address(c, s, &a);
        a.incarnation = s->incarnation;
        void (*cb)(pm_cluster *, unsigned, const pm_address *, unsigned, void *) =
            c->o->on_down != NULL ? c->o->on_down : default_on_down;
        PM__APP_CALLBACK(c->hub, cb(c, s->index, &a, s->budget.total, c->o->on_down_arg));
        return;
    }
    pm__cluster_set_state(c, s, PM_SLOT_BACKOFF);
    pm__slot_set_deadline(s, pm__now_ms() + delay, PM__EV_BACKOFF_DONE);
    pm__cluster_emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_BACKOFF, delay);
}

static void act_ignore(pm_cluster *c, pm__slot *s)
{
    (void)c;
    (void)s;
}

void pm__cluster_prepare_next(pm_cluster *c, pm__slot *s)
{
    pm__incarnation_spare_prepare(c, s);
    /* The leaf a restart after a kill is born into, and where a standby
     * waits: made before the standby's fork. */
    pm__cg_slot_prepare(&s->cg);
    pm__standby_prepare(c, s); /* on the spare, when asked for */
}

/* A spawn of N workers made every successor between its forks and its
 * readies: serial work in the supervisor (a channel's dozen system calls, a
 * standby's whole fork) before pm_cluster_spawn could return, and more fds
 * and mappings for each later fork child to drop. They are made on the
 * turns after it instead, a batch per turn so that no turn stalls on a
 * large cluster. A slot ready again since (a restart after the spawn)
 * prepared its own in act_ready: the calls find it done. One not ready now
 * gets its successor at its next ready. A crash before its turn restarts
 * as one before ready does: its channel is made at the start. */
#define PM__PREPARE_BATCH 32u

int pm__cluster_prepare_due(pm_cluster *c)
{
    if (!c->prepare_due)
        return 0;
    unsigned end = c->prepare_at + PM__PREPARE_BATCH;
    for (; c->prepare_at < c->nslots && c->prepare_at < end; c->prepare_at++) {
        pm__slot *s = &c->slots[c->prepare_at];
        if (s->state == PM_SLOT_READY)
            pm__cluster_prepare_next(c, s);
    }
    c->prepare_due = c->prepare_at < c->nslots;
    return c->prepare_due;
}

static void act_ready(pm_cluster *c, pm__slot *s)
{
    pm__cluster_set_state(c, s, PM_SLOT_READY);
    if (!s->ever_ready)
        c->ever_ready++;
    s->ever_ready = 1;
    pm__slot_set_deadline(s, 0, 0);
    /* The heartbeat period starts at ready: a slow start is the ready
     * timeout's business, never a hang. */
    s->progress_ms = pm__now_ms();
    s->last_beats = atomic_load_explicit(&((const struct pm__ctl *)s->channel.map)->beats,
                                         memory_order_relaxed);
    pm__budget_on_ready(&s->budget, pm__now_ms());
    uint64_t inc = s->incarnation;
    pm__cluster_emit(c, PM_EVENT_READY, s, PM_REASON_READY, 0);
    /* Now that the worker is up, off the path to ready: its successor's
     * channel; unless the event's callback already stopped the slot (a
     * stopped slot drops its spare and must not get a new one). Inside
     * pm_cluster_spawn, on the turns after it (pm__cluster_prepare_due). */
    if (s->state == PM_SLOT_READY && s->incarnation == inc && !c->spawning)
        pm__cluster_prepare_next(c, s);
}

static void act_failed(pm_cluster *c, pm__slot *s)
{
    after_failure(c, s);
}

static void act_ended(pm_cluster *c, pm__slot *s)
{
    int clean = s->last_exit_code == 0 && s->last_signal == 0 && s->kill_reason == 0;
    if (!clean) {
        after_failure(c, s);
        return;
    }
    if (c->o->restart_policy == PM_RESTART_ALWAYS && !c->terminating) {
        after_failure(c, s); /* a restart like any other, under the same budget */
        return;
    }
    pm__cluster_set_stopped(c, s, PM_REASON_EXIT);
}

static void act_kill(pm_cluster *c, pm__slot *s)
{
    (void)c;
    pm__cluster_signal(s, SIGKILL);
    pm__slot_set_deadline(s, 0, 0);
    if (s->state == PM_SLOT_STOPPING)
        c->any_killed = 1;
}

static void act_spawn(pm_cluster *c, pm__slot *s)
{
    pm__slot_set_deadline(s, 0, 0);
    s->start_error = 0;
    int rc = pm__incarnation_start(c, s);
    if (rc == 0)
        return;
    s->start_error = rc;
    /* fork, memfd or mmap failed (EAGAIN, EMFILE, ENOMEM): a failed start,
     * charged to the budget and retried after the backoff. */
    s->last_exit_code = rc;
    int taken = rc == -EADDRINUSE;
    pm__cluster_emit(c, PM_EVENT_SPAWN_FAILED, s, taken ? PM_REASON_NAME_TAKEN : PM_REASON_SPAWN, 0);
    if (c->spawning && c->spawn_error == 0)
        c->spawn_error = rc;
    if (taken && !c->spawning && !c->terminating) {
        /* Every fresh random name for the notify socket was taken: another
         * process's doing (doc/reliability.md, fault 32), never the slot's, so
         * it is not charged to the budget; the longest backoff keeps it from
         * looping. */
        uint32_t delay = c->bcfg.max_backoff_ms > 1000 ? c->bcfg.max_backoff_ms : 1000;
        pm__cluster_set_state(c, s, PM_SLOT_BACKOFF);
        pm__slot_set_deadline(s, pm__now_ms() + delay, PM__EV_BACKOFF_DONE);
        pm__cluster_emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_BACKOFF, delay);
        return;
    }
    after_failure(c, s);
}

static void act_stop_request(pm_cluster *c, pm__slot *s)
{
    pm__cluster_set_state(c, s, PM_SLOT_STOPPING);
    /* The stop request: in band (a flag in the control block and a STOP
     * frame, so pm_node_recv returns -ESHUTDOWN) and SIGTERM for workers
     * that do not read their messages. */
    pm__hub_stop_request(c->hub, s->index);
    pm__cluster_signal(s, SIGTERM);
    if (c->o->stop_timeout_ms == 0) {
        pm__cluster_signal(s, SIGKILL);
        c->any_killed = 1;
        pm__slot_set_deadline(s, 0, 0);
        return;
    }
    pm__slot_set_deadline(s, pm__now_ms() + (uint64_t)c->o->stop_timeout_ms, PM__EV_STOP_TIMEOUT);
}

static void act_stop_kill(pm_cluster *c, pm__slot *s)
{
    /* A replacement still in its handshake is killed, never registered. */
    pm__cluster_set_state(c, s, PM_SLOT_STOPPING);
    s->kill_reason = PM_REASON_STOP;
    pm__cluster_signal(s, SIGKILL);
    pm__slot_set_deadline(s, 0, 0);
    c->any_killed = 1;
}

static void act_cancel(pm_cluster *c, pm__slot *s)
{
    pm__cluster_set_stopped(c, s, PM_REASON_STOP);
}

static void act_stopped(pm_cluster *c, pm__slot *s)
{
    if (s->replace && !c->terminating) {
        /* A replacement asked for by pm_cluster_restart_slot: start it now,
         * without a backoff and without charging the budget. */
        s->replace = 0;
        pm__cluster_set_state(c, s, PM_SLOT_BACKOFF);
        pm__slot_set_deadline(s, pm__now_ms(), PM__EV_BACKOFF_DONE);
        pm__cluster_emit(c, PM_EVENT_RESTART_SCHEDULED, s, PM_REASON_REPLACE, 0);
        return;
    }
    pm__cluster_set_stopped(c, s, PM_REASON_STOP);
}

static void (*const actions[PM__A_COUNT])(pm_cluster *, pm__slot *) = {
    [PM__A_IGNORE] = act_ignore,
    [PM__A_READY] = act_ready,
    [PM__A_FAILED] = act_failed,
    [PM__A_ENDED] = act_ended,
    [PM__A_KILL] = act_kill,
    [PM__A_SPAWN] = act_spawn,
    [PM__A_STOP_REQUEST] = act_stop_request,
    [PM__A_STOP_KILL] = act_stop_kill,
    [PM__A_CANCEL] = act_cancel,
    [PM__A_STOPPED] = act_stopped,
};

void pm__cluster_dispatch(pm_cluster *c, pm__slot *s, int event)
{
    actions[pm__slot_action(s->state, event)](c, s);
}

/* The due slot deadlines (the timerfd fired), as events to the slot table.
 * Only the due slots, earliest first, from the heap: a turn with no
 * due deadline looks at none. Each slot fires at most once per pass
 * (see pm__deadlines_pop_due): an action that sets a deadline already
 * due again is fired by the next turn, never looped on here. */
void pm__cluster_fire_deadlines(pm_cluster *c, uint64_t now)
{
    unsigned id;
    pm__deadlines_pass_begin(&c->deadlines);
    while (pm__deadlines_pop_due(&c->deadlines, now, &id)) {
        pm__slot *s = &c->slots[id];
        int ev = s->deadline_event;
        s->deadline_event = 0;
        c->turn_visits++;
        if (ev == PM__EV_READY_TIMEOUT && s->kill_reason == 0)
            s->kill_reason = PM_REASON_READY_TIMEOUT;
        pm__cluster_dispatch(c, s, ev);
    }
}
