/* SPDX-License-Identifier: MIT */
/*
 * turn.c - the order of one turn of the supervisor's loop: spin or arm
 * before sleeping, wait for readiness, hand each completion to the module
 * that owns its kind (reap.c, core.c, output.c, readiness.c, standby,
 * watch.c, the mesh), service the ports with work, fire the due deadlines
 * in their order, publish what the hub wrote. It handles only its own two
 * fds: the timer it points at the earliest deadline, and the wake-up of
 * pm_cluster_stop. Also pm_cluster_run, the loop of turns.
 */
#define _GNU_SOURCE
#include "turn.h"

#include <string.h>
#include <sys/timerfd.h>

#include "actions.h"
#include "core.h"
#include "liveness.h"
#include "readiness.h"
#include "reap.h"
#include "standby_fork.h"
#include "watch.h"
#include "hub/hub.h"
#include "os/loop.h"
#include "mesh/mesh.h"
#include "options.h"

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
    if (next == c->turn_state->timer_at)
        return 0;
    /* Only ever moved earlier while it is set. Every request the hub
     * forwards adds a deadline and its reply removes it; following each
     * change would cost two timerfd_settime calls per request. A timer
     * left at a deadline that went away fires early, once: fire_due finds
     * nothing due and the next turn sets it to the real next deadline. */
    if (c->turn_state->timer_at != 0 && (next == 0 || next > c->turn_state->timer_at))
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
    c->turn_state->timer_at = next;
    return 0;
}

/* The due deadlines, each to its owner, in this order. */
static void fire_due(pm_cluster *c)
{
    uint64_t now = pm__now_ms();
    /* Liveness first: after a stall of our own, no worker may be judged on
     * the silence before it is given a fresh period. */
    if (c->next_check != 0 && now >= c->next_check)
        pm__liveness_check(c, now);
    pm__hub_fire(c->hub, now);
    pm__mesh_fire(c->mesh, now);
    pm__cluster_fire_deadlines(c, now);
}

/* The supervisor's own counters (its timerfd, its wake eventfd): no one
 * else holds them, so a plain non-blocking read (doorbell.c is for the
 * shared ones). */
static void drain_own(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

static void on_timer(pm_cluster *c)
{
    drain_own(c->timerfd);
    c->turn_state->timer_at = 0; /* fired: rearm_timer sets it again */
    pm__loop_arm(c->loop, c->timerfd, PM__TAG(PM__TAG_TIMER, 0, 0));
}

static void on_wake(pm_cluster *c)
{
    drain_own(c->wakefd);
    pm__loop_arm(c->loop, c->wakefd, PM__TAG(PM__TAG_WAKE, 0, 0));
    /* Emptied first: a read that finishes after the collect started
     * writes the eventfd again and is taken in the next turn. */
    pm__output_collect(c);
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
        pm__reap_on_signal(c);
        return;
    case PM__TAG_TIMER:
        on_timer(c);
        return;
    case PM__TAG_WAKE:
        on_wake(c);
        return;
    case PM__TAG_OUTPUT:
        pm__output_on_ready(c);
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
    if (!pm__slot_tag_current(s, tag))
        return;
    on_slot_tag(c, s, kind, more);
}

/* What the hub's spin looks at besides its rings (pm__hub_spin). */
static int loop_ready(void *loop)
{
    return pm__loop_ready(loop);
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
        if (active && pm__hub_spin(c->hub, c->o->hub_spin_us, loop_ready, c->loop, &sleep_t0))
            timeout_ms = 0;
        else if (pm__hub_arm_idle(c->hub))
            timeout_ms = 0;
    }
    if (c->poll_children && (timeout_ms < 0 || timeout_ms > PM__SCAN_MS))
        timeout_ms = PM__SCAN_MS;
    /* What the application or the last turn queued on peer links goes out
     * before the loop sleeps, and the pipes it let go of to their closing
     * thread (one wake-up for the turn's closes). */
    pm__mesh_flush(c->mesh);
    pm__output_kick(c);
    int rc = pm__cluster_rearm_timer(c);
    if (rc < 0)
        return rc;
    int n = pm__loop_wait(c->loop, timeout_ms, tags, more, 64);
    if (n < 0)
        return n;
    if (timeout_ms != 0)
        pm__hub_spin_slept(c->hub, c->o->hub_spin_us, sleep_t0);
    for (int i = 0; i < n; i++)
        handle_tag(c, tags[i], more[i]);
    /* The ports with work, after every completion of the turn (a doorbell
     * or a fd socket only marks its port). */
    pm__cluster_service_ports(c);
    if (c->poll_children)
        pm__cluster_reap_all(c);
    fire_due(c);
    pm__cluster_bury_turn(c); /* after the restarts fire_due forked, once they are ready (core.c) */
    /* One publish (and at most one wake-up) per destination per turn. */
    pm__hub_publish(c->hub);
    pm__mesh_flush(c->mesh);
    return 0;
}

/*
 * Before a public call that ran turns returns to the application (outermost
 * 1; a call made from a callback leaves it to the call around it, whose turn
 * is not over). From then on the loop's fd must say whether
 * pm_cluster_run has work (pm_cluster(3), Embedding), whatever the last
 * turn was: an application may wait on the fd alone and call
 * pm_cluster_run(c, 0) when it is readable. A turn arms the doorbells of
 * the rings it drained only before it sleeps (pm__hub_arm_idle); a turn
 * that does not sleep (pm_cluster_run with 0), or the last turn of any
 * call (it read frames after its sleep), leaves them on the arm list,
 * where a worker's publish rings nothing and the fd never turns readable:
 * the worker stalls for as long as the application waits on it. So they
 * are armed here. Work left that the next turn would do without sleeping
 * (a port at its batch cap, a frame the arm found, successors to prepare)
 * has no fd of its own: the wake-up eventfd makes the loop's fd readable,
 * so that the application's wait returns at once and its next
 * pm_cluster_run(c, 0) does it. Nothing is written when nothing is left,
 * so the fd does not stay readable with nothing to do.
 */
void pm__cluster_leave(pm_cluster *c, int outermost)
{
    if (outermost) {
        /* Arm, then ask whether work is left, in this order: pm__ring_arm
         * sets the wait flag and looks at the ring again after a full
         * fence, so a frame published before the worker could see the
         * flag puts its port on the ready list (any_busy below), and one
         * published after it rings the doorbell, whose completion makes
         * the fd readable. Asking first would lose a frame published
         * between the question and the arm. */
        pm__hub_arm_idle(c->hub);
        /* What a fault the arm found wrote (pm__hub_arm_idle: a corrupt
         * ring is fenced): published as a turn's end would. */
        pm__hub_publish(c->hub);
        if (pm__hub_any_busy(c->hub) || c->prepare_due) {
            uint64_t one = 1;
            ssize_t n = write(c->wakefd, &one, sizeof(one));
            (void)n; /* only fails when the counter is full: readable anyway */
        }
    }
    pm__output_kick(c); /* the application may not run a turn for a while */
    pm__loop_flush(c->loop);
    pm__cluster_rearm_timer(c);
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
        if (atomic_exchange(&c->turn_state->stop, 0))
            break;
        if (timeout_ms >= 0 && pm__now_ms() >= end)
            break;
    }
    pm__cluster_leave(c, pm__outer_cfa == NULL);
    PM__LEAVE(c);
    return rc;
}

PM_EXTERN void pm_cluster_stop(pm_cluster *c)
{
    /* Async-signal-safe: atomic loads and a write(). */
    if (pm__cluster_check(c) < 0)
        return;
    atomic_store(&c->turn_state->stop, 1);
    uint64_t one = 1;
    ssize_t n = write(c->wakefd, &one, sizeof(one));
    (void)n;
}
