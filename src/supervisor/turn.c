/* SPDX-License-Identifier: MIT */
/*
 * turn.c - one turn of the supervisor's loop: wait for readiness, turn each
 * completion into a slot event or a port service, fire the due deadlines,
 * publish what the hub wrote. Also pm_cluster_run and pm_cluster_stop.
 */
#define _GNU_SOURCE
#include "cluster.h"

#include <string.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/wait.h>

#include "os/notify.h"

/* Without pidfds and signals, how often exits are looked for. */
#define PM__SCAN_MS 50

/* Empties an eventfd or timerfd: what fired matters, not how often. */
static void drain_counter(int fd)
{
    uint64_t v;
    ssize_t n = read(fd, &v, sizeof(v));
    (void)n;
}

/* Points the timerfd at the earliest deadline: the hub's, the peer
 * links', the liveness check's, and the slots' (the top of their heap:
 * O(1), whatever N). */
int pm__cluster_rearm_timer(pm_cluster *c)
{
    uint64_t next = pm__hub_next_deadline(&c->hub);
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
     * park while it is awake, node.c may_spin), so it spins whenever a CPU
     * is left for the process doing the work: never on one CPU. */
    if (budget == 0 || !pm__spin_gate(pm__spin_cpus(), 0))
        return 0;
    do {
        if (pm__hub_any_arrived(&c->hub) || pm__loop_ready(&c->loop)) {
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

/* Services the slot's port once this turn: its doorbell rang or its ring
 * had work left over. The doorbell stays registered (a multishot poll) for
 * as long as the port is read; it is registered again only when the loop
 * said that the registration ended (turn()). */
void pm__cluster_on_hub(pm_cluster *c, pm__slot *s)
{
    const pm__port *p = &c->hub.ports[s->index];
    s->hub_rang = 0;
    pm__hub_port_service(&c->hub, s->index);
    if (p->reading && !s->hub_armed &&
        pm__loop_arm_multi(&c->loop, s->link.hub_efd,
                           PM__TAG(PM__TAG_HUB, s->index, s->incarnation)) == 0)
        s->hub_armed = 1;
    pm__cluster_arm_sock(c, s);
}

/*
 * The slot's fd socket (bigmsg.h), watched for as long as its port is
 * read, for two things: records arriving, which the hub takes at once
 * (pm__hub_port_records: a record left in the kernel counts against the
 * worker's user's fds in flight for as long as the worker likes); and,
 * once the socket refused one of the hub's records (sock_full), room
 * again (the worker took one), which services the port to flush its
 * queue. One registration for both, per wake-up (pm__loop_arm_multi_ev:
 * a new record, or room freed), so a socket that stays readable or
 * writable costs nothing more; it ends only when the loop says so (more
 * 0). Where polls are one-shot (io_uring before Linux 5.13) it asks for
 * room only while sock_full (a writable socket would complete it at once,
 * every turn); a refusal while it waits for records alone cancels it, and
 * the cancellation's completion, like any, arms it again with room asked
 * for. Retrying every turn instead would keep the hub busy, and a busy hub
 * never arms the doorbells of the ports it drained (pm__hub_arm_idle).
 */
#define SOCK_CANCELLING 0x100

void pm__cluster_arm_sock(pm_cluster *c, pm__slot *s)
{
    const pm__port *p = &c->hub.ports[s->index];
    if (!p->reading || s->link.sock < 0)
        return;
    int multi = pm__loop_has_multi(&c->loop);
    if (s->sock_armed) {
        if (multi || !p->sock_full || (s->sock_armed & (PM__LOOP_OUT | SOCK_CANCELLING)) != 0)
            return;
        if (pm__loop_disarm(&c->loop, s->link.sock,
                            PM__TAG(PM__TAG_SOCK, s->index, s->incarnation)) == 0)
            s->sock_armed |= SOCK_CANCELLING;
        else
            pm__hub_mark_busy(&c->hub, &c->hub.ports[s->index]); /* next turn, then */
        return;
    }
    unsigned ev = PM__LOOP_IN | (multi || p->sock_full ? PM__LOOP_OUT : 0u);
    if (pm__loop_arm_multi_ev(&c->loop, s->link.sock,
                              PM__TAG(PM__TAG_SOCK, s->index, s->incarnation), ev) == 0)
        s->sock_armed = (int)ev;
    else
        pm__hub_mark_busy(&c->hub, &c->hub.ports[s->index]); /* cannot wait for it: next turn */
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
    pm__hub_fire(&c->hub, now);
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

static void on_notify(pm_cluster *c, pm__slot *s)
{
    pm__cluster_read_notify(c, s);
    if (s->notify_fd >= 0 &&
        pm__loop_arm(&c->loop, s->notify_fd, PM__TAG(PM__TAG_NOTIFY, s->index, s->incarnation)) == 0)
        s->notify_armed = 1;
}

static void handle_tag(pm_cluster *c, uint64_t tag, int more)
{
    int kind = PM__TAG_KIND(tag);
    if (kind == PM__TAG_SIGNAL) {
        on_signal(c);
        pm__loop_arm(&c->loop, c->sigfd, PM__TAG(PM__TAG_SIGNAL, 0, 0));
        return;
    }
    if (kind == PM__TAG_TIMER) {
        drain_counter(c->timerfd);
        c->timer_at = 0; /* fired: rearm_timer sets it again */
        pm__loop_arm(&c->loop, c->timerfd, PM__TAG(PM__TAG_TIMER, 0, 0));
        return;
    }
    if (kind == PM__TAG_WAKE) {
        drain_counter(c->wakefd);
        pm__loop_arm(&c->loop, c->wakefd, PM__TAG(PM__TAG_WAKE, 0, 0));
        return;
    }
    if (kind == PM__TAG_PEER || kind == PM__TAG_PEER_LISTEN) {
        pm__mesh_ready(c->mesh, tag);
        return;
    }
    unsigned idx = PM__TAG_SLOT(tag);
    if (kind == PM__TAG_USER) {
        pm__watch_fire(c, idx, (uint32_t)PM__TAG_INC(tag));
        return;
    }
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
    if (kind == PM__TAG_PIDFD) {
        s->pid_armed = 0;
        if (!pm__cluster_try_reap(c, s) && s->pidfd >= 0 &&
            pm__loop_arm(&c->loop, s->pidfd, PM__TAG(PM__TAG_PIDFD, s->index, s->incarnation)) == 0)
            s->pid_armed = 1;
    } else if (kind == PM__TAG_HUB) {
        if (!more) {
            /* The registration ended (a one-shot poll, or io_uring stopped
             * the multishot one): drain the doorbell before it is armed
             * again, or the new poll would fire at once. The ring is the
             * truth, the count is not. */
            s->hub_armed = 0;
            drain_counter(s->link.hub_efd);
        }
        /* Serviced once after all completions: a worker writing its
         * doorbell in a loop gets no more reading than one turn's cap. */
        s->hub_rang = 1;
        pm__hub_mark_rang(&c->hub, idx);
    } else if (kind == PM__TAG_SOCK) {
        /* Records arrived: taken now. Or room (or the socket failed: the
         * flush then finds out): the records that waited for it go now. */
        if (!more)
            s->sock_armed = 0;
        pm__hub_port_records(&c->hub, idx);
        if (c->hub.ports[idx].sock_full) {
            s->hub_rang = 1;
            pm__hub_mark_rang(&c->hub, idx);
        }
        if (!more)
            pm__cluster_arm_sock(c, s);
    } else if (kind == PM__TAG_STDOUT || kind == PM__TAG_STDERR) {
        pm__output_ready(c, s, kind);
    } else if (kind == PM__TAG_NOTIFY) {
        s->notify_armed = 0;
        on_notify(c, s);
    } else if (kind == PM__TAG_EXECPIPE) {
        s->pipe_armed = 0;
        int e = 0;
        ssize_t k = read(s->exec_pipe, &e, sizeof(e));
        if (k == 0)
            pm__cluster_dispatch(c, s, PM__EV_READY); /* exec succeeded */
        else if (k == (ssize_t)sizeof(e))
            s->exec_errno = e; /* the exit follows */
        else if (k < 0 && errno == EAGAIN &&
                 pm__loop_arm(&c->loop, s->exec_pipe, PM__TAG(PM__TAG_EXECPIPE, s->index, s->incarnation)) == 0)
            s->pipe_armed = 1;
    }
}

/* One turn: wait up to timeout_ms for readiness, handle it, fire deadlines.
 * Returns 0 or a negative errno from the loop itself. */
int pm__cluster_turn(pm_cluster *c, int timeout_ms)
{
    uint64_t tags[64];
    unsigned char more[64];
    c->turns++;
    if (pm__hub_any_busy(&c->hub))
        timeout_ms = 0;
    uint64_t sleep_t0 = 0;
    if (timeout_ms != 0) {
        /* About to sleep: spin first if traffic is flowing and the hub is
         * allowed to (pm_options_set_hub_spin_us), then arm the doorbells
         * of the drained rings. */
        if (c->hub.active && c->o->hub_spin_us > 0 && spin_for_work(c, &sleep_t0))
            timeout_ms = 0;
        else if (pm__hub_arm_idle(&c->hub))
            timeout_ms = 0;
    }
    c->hub.active = 0;
    if (c->poll_children && (timeout_ms < 0 || timeout_ms > PM__SCAN_MS))
        timeout_ms = PM__SCAN_MS;
    /* What the application or the last turn queued on peer links goes out
     * before the loop sleeps. */
    pm__mesh_flush(c->mesh);
    int rc = pm__cluster_rearm_timer(c);
    if (rc < 0)
        return rc;
    int n = pm__loop_wait(&c->loop, timeout_ms, tags, more, 64);
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
    pm__hub_pass_begin(&c->hub);
    while (pm__hub_pass_next(&c->hub, &pi)) {
        if (pi >= c->nslots)
            continue;
        pm__slot *s = &c->slots[pi];
        if ((s->hub_rang || c->hub.ports[pi].busy) && pm__slot_has_process(s))
            pm__cluster_on_hub(c, s);
    }
    if (c->poll_children)
        pm__cluster_reap_all(c);
    fire_due(c);
    /* One publish (and at most one wake-up) per destination per turn. */
    pm__hub_publish(&c->hub);
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
    pm__loop_flush(&c->loop);
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
