/* SPDX-License-Identifier: MIT */
/*
 * turn.c - one turn of the supervisor's loop: wait for readiness, hand each
 * completion to the module that owns its kind, service the ports with
 * work, fire the due deadlines, publish what the hub wrote. Also
 * pm_cluster_run and pm_cluster_stop.
 */
#define _GNU_SOURCE
#include "turn.h"

#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#include "actions.h"
#include "core.h"
#include "liveness.h"
#include "readiness.h"
#include "reap.h"
#include "standby_fork.h"
#include "watch.h"

/* Without pidfds and signals, how often exits are looked for. */
#define PM__SCAN_MS 50


/* Points the timerfd at the earliest deadline: the hub's, the peer
 * links', the liveness check's, and the slots' (the top of their heap:
 * O(1), whatever N). */
int pm__cluster_rearm_timer(pm_cluster *c)
{
    uint64_t next = pm__hub_next_deadline(c->hub);
    uint64_t mesh = pm__mesh_next_deadline(c->mesh);
    if (mesh != 0 && (next == 0 || mesh < next))
        next = mesh;
    if (c->next_check != 0 && (next == 0 || c->next_check < next))
        next = c->next_check;
    uint64_t slot = pm__deadlines_first(&c->deadlines, NULL);
    if (slot != 0 && (next == 0 || slot < next))
        next = slot;
    if (next == c->timer_at)
        return 0;
    /* Only ever moved earlier while it is set. Every request the hub
     * forwards adds a deadline and its reply removes it; following each
     * change would cost two timerfd_settime calls per request. A timer
     * left at a deadline that went away fires early, once: fire_due finds
     * nothing due and the next turn sets it to the real next deadline. */
    if (c->timer_at != 0 && (next == 0 || next > c->timer_at))
        return 0;
    struct itimerspec its;
    memset(&its, 0, sizeof(its));
    if (next != 0) {
        /* A deadline already past still needs a non-zero value: zero would
         * disarm the timer. */
        uint64_t ns = next * 1000000u;
        its.it_value.tv_sec = (time_t)(ns / 1000000000u);
        its.it_value.tv_nsec = (long)(ns % 1000000000u);
        if (its.it_value.tv_sec == 0 && its.it_value.tv_nsec == 0)
            its.it_value.tv_nsec = 1;
    }
    if (timerfd_settime(c->timerfd, TFD_TIMER_ABSTIME, &its, NULL) < 0)
        return -errno;
    c->timer_at = next;
    return 0;
}

/* The hub's spin cap in ns (pm_options_set_hub_spin_us, at most 1 s). */
static uint32_t hub_spin_cap(const pm_cluster *c)
{
    return c->o->hub_spin_us * 1000u;
}

/* Spins up to the learnt budget (at most the hub spin time; see
 * pm__spin_learn) for a frame on a drained ring or a loop completion.
 * 1 when there is work; 0 and *t0 (when the spin began) when the loop must
 * sleep, so that the sleep's length can be learnt from (learn_sleep). */
static int spin_for_work(pm_cluster *c, uint64_t *t0)
{
    uint32_t cap = hub_spin_cap(c);
    uint32_t budget = c->hub_spin_budget < cap ? c->hub_spin_budget : cap;
    uint64_t start = pm__now_ns(), now = start, prev = start;
    *t0 = start;
    /* The gate: the hub is the one spinner a relay path needs (the workers
     * park while it is awake, node_messaging.c may_spin), so it spins whenever a CPU
     * is left for the process doing the work: never on one CPU. */
    if (budget == 0 || !pm__spin_gate(pm__spin_cpus(), 0))
        return 0;
    do {
        if (pm__hub_any_arrived(c->hub) || pm__loop_ready(c->loop)) {
            c->hub_spin_budget = pm__spin_learn(c->hub_spin_budget, cap, 1, now - start);
            return 1;
        }
        now = pm__now_ns();
        if (pm__spin_preempted(prev, now)) {
            /* Descheduled mid-spin: no CPU was free for it. Sleep now and
             * spin no more until a quick sleep says otherwise
             * (learn_sleep). */
            c->hub_spin_budget = 0;
            return 0;
        }
        prev = now;
    } while (now < start + budget);
    c->hub_spin_budget = pm__spin_learn(budget, cap, 0, now - start);
    /* Halved already: learn_sleep must not halve it again. */
    *t0 = 0;
    return 0;
}

/* After a sleep that followed a spin budget of 0: a sleep that ended soon
 * says a spin could pay off again. */
static void learn_sleep(pm_cluster *c, uint64_t t0)
{
    if (t0 != 0 && c->hub_spin_budget == 0)
        c->hub_spin_budget = pm__spin_learn(0, hub_spin_cap(c), 0, pm__now_ns() - t0);
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

static void on_signal(pm_cluster *c)
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
}

static void fire_due(pm_cluster *c)
{
    uint64_t now = pm__now_ms();
    /* Liveness first: after a stall of our own, no worker may be judged on
     * the silence before it is given a fresh period. */
    if (c->next_check != 0 && now >= c->next_check)
        pm__liveness_check(c, now);
    pm__hub_fire(c->hub, now);
    pm__mesh_fire(c->mesh, now);
    /* Only the due slots, earliest first, from the heap: a turn with no
     * due deadline looks at none. Each slot fires at most once per pass
     * (see pm__deadlines_pop_due): an action that sets a deadline already
     * due again is fired by the next turn, never looped on here. */
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



static void on_timer(pm_cluster *c)
{
    pm__drain_counter(c->timerfd);
    c->timer_at = 0; /* fired: rearm_timer sets it again */
    pm__loop_arm(c->loop, c->timerfd, PM__TAG(PM__TAG_TIMER, 0, 0));
}

static void on_wake(pm_cluster *c)
{
    pm__drain_counter(c->wakefd);
    pm__loop_arm(c->loop, c->wakefd, PM__TAG(PM__TAG_WAKE, 0, 0));
}

/* A completion about a slot's incarnation: to the module that owns its
 * kind. */
static void on_slot_tag(pm_cluster *c, pm__slot *s, int kind, int more)
{
    switch (kind) {
    case PM__TAG_PIDFD:
        pm__reap_on_pidfd(c, s);
        break;
    case PM__TAG_HUB:
        pm__cluster_on_doorbell(c, s, more);
        break;
    case PM__TAG_SOCK:
        pm__cluster_on_sock(c, s, more);
        break;
    case PM__TAG_STDOUT:
    case PM__TAG_STDERR:
        pm__output_ready(c, s, kind);
        break;
    case PM__TAG_NOTIFY:
        pm__readiness_on_notify(c, s);
        break;
    case PM__TAG_EXECPIPE:
        pm__readiness_on_exec_pipe(c, s);
        break;
    default:
        break;
    }
}

/* Each kind of completion goes to the module that owns it (the tag's
 * layout: os/loop.h). */
static void handle_tag(pm_cluster *c, uint64_t tag, int more)
{
    int kind = PM__TAG_KIND(tag);
    switch (kind) {
    case PM__TAG_SIGNAL:
        on_signal(c);
        pm__loop_arm(c->loop, c->sigfd, PM__TAG(PM__TAG_SIGNAL, 0, 0));
        return;
    case PM__TAG_TIMER:
        on_timer(c);
        return;
    case PM__TAG_WAKE:
        on_wake(c);
        return;
    case PM__TAG_PEER:
    case PM__TAG_PEER_LISTEN:
        pm__mesh_ready(c->mesh, tag);
        return;
    case PM__TAG_USER:
        pm__watch_fire(c, PM__TAG_SLOT(tag), (uint32_t)PM__TAG_INC(tag));
        return;
    default:
        break;
    }
    unsigned idx = PM__TAG_SLOT(tag);
    if (idx >= c->nslots)
        return;
    pm__slot *s = &c->slots[idx];
    if (kind == PM__TAG_STANDBY) {
        pm__standby_on_exit(c, s, tag); /* not about the slot's process */
        return;
    }
    /* A completion about an incarnation that is gone: drop it. */
    if (!pm__slot_has_process(s) || PM__TAG_INC(tag) != (s->incarnation & 0xffffffffu))
        return;
    on_slot_tag(c, s, kind, more);
}

/* One turn: wait up to timeout_ms for readiness, handle it, fire deadlines.
 * Returns 0 or a negative errno from the loop itself. */
int pm__cluster_turn(pm_cluster *c, int timeout_ms)
{
    uint64_t tags[64];
    unsigned char more[64];
    c->turns++;
    if (pm__cluster_prepare_due(c) || pm__hub_any_busy(c->hub))
        timeout_ms = 0;
    uint64_t sleep_t0 = 0;
    int active = pm__hub_take_active(c->hub); /* frames were read last turn */
    if (timeout_ms != 0) {
        /* About to sleep: spin first if traffic is flowing and the hub is
         * allowed to (pm_options_set_hub_spin_us), then arm the doorbells
         * of the drained rings. */
        if (active && c->o->hub_spin_us > 0 && spin_for_work(c, &sleep_t0))
            timeout_ms = 0;
        else if (pm__hub_arm_idle(c->hub))
            timeout_ms = 0;
    }
    if (c->poll_children && (timeout_ms < 0 || timeout_ms > PM__SCAN_MS))
        timeout_ms = PM__SCAN_MS;
    /* What the application or the last turn queued on peer links goes out
     * before the loop sleeps. */
    pm__mesh_flush(c->mesh);
    int rc = pm__cluster_rearm_timer(c);
    if (rc < 0)
        return rc;
    int n = pm__loop_wait(c->loop, timeout_ms, tags, more, 64);
    if (n < 0)
        return n;
    if (timeout_ms != 0)
        learn_sleep(c, sleep_t0);
    for (int i = 0; i < n; i++)
        handle_tag(c, tags[i], more[i]);
    /* The ports with work (the hub's ready list: doorbells that rang,
     * batches cut at their cap, senders unblocked), once each, in the
     * order they became ready; never a scan of every slot. */
    unsigned pi;
    pm__hub_pass_begin(c->hub);
    while (pm__hub_pass_next(c->hub, &pi)) {
        if (pi >= c->nslots)
            continue;
        pm__slot *s = &c->slots[pi];
        if ((s->hub_rang || pm__hub_port_busy(c->hub, pi)) && pm__slot_has_process(s))
            pm__cluster_on_hub(c, s);
    }
    if (c->poll_children)
        pm__cluster_reap_all(c);
    fire_due(c);
    /* One publish (and at most one wake-up) per destination per turn. */
    pm__hub_publish(c->hub);
    pm__mesh_flush(c->mesh);
    return 0;
}

PM_EXTERN int pm_cluster_run(pm_cluster *c, int timeout_ms)
{
    int rc0 = pm__cluster_check(c);
    if (rc0 < 0)
        return rc0;
    uint64_t end = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    int rc = 0;
    c->last_signal = 0;
    PM__ENTER(c);
    for (;;) {
        int wait = -1;
        if (timeout_ms >= 0) {
            uint64_t now = pm__now_ms();
            wait = now >= end ? 0 : (int)(end - now);
        }
        rc = pm__cluster_turn(c, wait);
        if (rc < 0)
            break;
        if (c->last_signal != 0) {
            rc = -EINTR;
            break;
        }
        if (atomic_exchange(&c->stop, 0))
            break;
        if (timeout_ms >= 0 && pm__now_ms() >= end)
            break;
    }
    PM__LEAVE(c);
    pm__loop_flush(c->loop);
    pm__cluster_rearm_timer(c);
    return rc;
}

PM_EXTERN void pm_cluster_stop(pm_cluster *c)
{
    /* Async-signal-safe: atomic loads and a write(). */
    if (pm__cluster_check(c) < 0)
        return;
    atomic_store(&c->stop, 1);
    uint64_t one = 1;
    ssize_t n = write(c->wakefd, &one, sizeof(one));
    (void)n;
}
