/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - the supervisor's lifecycle core: the slot table's actions,
 * starting incarnations, faults, spawn and terminate (reaping: reap.c).
 *
 * Everything that happens to a slot enters through pm__cluster_dispatch():
 * an event is looked up in the state x event table (slot.c) and the action
 * function runs. turn.c turns the loop's readiness into those events:
 *   pidfd readable          -> reap (waitid) -> PM__EV_EXITED
 *   hub eventfd readable    -> the hub reads the slot's port -> READY, FAULT
 *   timerfd                 -> the due slot deadlines (a heap: only the
 *                              due ones are looked at) -> READY_TIMEOUT,
 *                              BACKOFF_DONE, STOP_TIMEOUT
 *   signalfd                -> SIGCHLD: try to reap every slot (a second
 *                              report of the same exit is dropped);
 *                              SIGTERM/SIGINT: pm_cluster_run returns -EINTR
 * No logic runs in a signal handler; there are none.
 */
#define _GNU_SOURCE
#include "cluster.h"

#include <fcntl.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/resource.h>
#include <sys/signalfd.h>
#include <sys/timerfd.h>
#include <sys/un.h>
#include <sys/wait.h>

#include "worker/node.h"
#include "os/notify.h"
#include "base/le.h"
#include "channel/proto.h"
#include "os/spawn.h"

static double rand01(pm_cluster *c)
{
    uint64_t x = c->rng;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    c->rng = x;
    return (double)((x * 0x2545F4914F6CDD1DULL) >> 11) * 0x1.0p-53;
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
    PM__APP_CALLBACK(&c->hub, c->o->on_event(c, &ev, c->o->on_event_arg));
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
    pm__hub_port_set_state(&c->hub, s->index, port_state[state]);
    /* A slot that will not start again has no use for a prepared link. */
    if (state == PM_SLOT_STOPPED || state == PM_SLOT_RETIRED)
        pm__incarnation_spare_drop(c, s);
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

static void set_stopped(pm_cluster *c, pm__slot *s, int reason)
{
    pm__cluster_set_state(c, s, PM_SLOT_STOPPED);
    pm__slot_set_deadline(s, 0, 0);
    pm__cluster_emit(c, PM_EVENT_STOPPED, s, reason, 0);
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
        set_stopped(c, s, PM_REASON_SPAWN_ABORTED);
        c->event_detail = NULL;
        return;
    }
    if (c->terminating) {
        set_stopped(c, s, PM_REASON_STOP);
        return;
    }
    if (c->o->restart_policy == PM_RESTART_NEVER) {
        set_stopped(c, s, PM_REASON_POLICY);
        return;
    }
    if (pm__pool_input_restart(c, s))
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
        pm__cluster_set_state(c, s, PM_SLOT_RETIRED);
        pm__slot_set_deadline(s, 0, 0);
        pm__cluster_emit(c, PM_EVENT_RETIRED, s, PM_REASON_BUDGET, 0);
        pm_address a;
        pm__slot_address(c, s, &a);
        a.incarnation = s->incarnation;
        void (*cb)(pm_cluster *, unsigned, const pm_address *, unsigned, void *) =
            c->o->on_down != NULL ? c->o->on_down : default_on_down;
        PM__APP_CALLBACK(&c->hub, cb(c, s->index, &a, s->budget.total, c->o->on_down_arg));
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

static void act_ready(pm_cluster *c, pm__slot *s)
{
    pm__cluster_set_state(c, s, PM_SLOT_READY);
    s->ever_ready = 1;
    pm__slot_set_deadline(s, 0, 0);
    /* The heartbeat period starts at ready: a slow start is the ready
     * timeout's business, never a hang. */
    s->progress_ms = pm__now_ms();
    s->last_beats = atomic_load_explicit(&((const struct pm__ctl *)s->link.map)->beats,
                                         memory_order_relaxed);
    pm__budget_on_ready(&s->budget, pm__now_ms());
    uint64_t inc = s->incarnation;
    pm__cluster_emit(c, PM_EVENT_READY, s, PM_REASON_READY, 0);
    /* Now that the worker is up, off the path to ready: its successor's
     * link; unless the event's callback already stopped the slot (a
     * stopped slot drops its spare and must not get a new one). */
    if (s->state == PM_SLOT_READY && s->incarnation == inc) {
        pm__incarnation_spare_prepare(c, s);
        pm__standby_prepare(c, s); /* on the spare, when asked for */
        pm__cg_slot_prepare(&s->cg); /* the leaf a restart after a kill is born into */
    }
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
    set_stopped(c, s, PM_REASON_EXIT);
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
    pm__hub_stop_request(&c->hub, s->index);
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
    set_stopped(c, s, PM_REASON_STOP);
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
    set_stopped(c, s, PM_REASON_STOP);
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

static int send_init(pm_cluster *c, pm__slot *s)
{
    unsigned char *buf = malloc(pm__init_size(c->o->init_len));
    if (buf == NULL)
        return -ENOMEM;
    pm__init_msg m;
    m.slot = s->index;
    pm__slot_address(c, s, &m.addr);
    m.data = c->o->init_data;
    m.len = (uint32_t)c->o->init_len;
    pm__init_encode(&m, buf);
    int rc = pm__hub_send_control(&c->hub, s->index, PM__FT_INIT, buf, pm__init_size(m.len));
    free(buf);
    return rc;
}

/* A handshake frame from slot p's port (pm__hub_ops.control). */
static void on_control(void *owner, unsigned p, int type, const void *payload, size_t len)
{
    pm_cluster *c = owner;
    pm__slot *s = &c->slots[p];
    if (type == PM__FT_HELLO) {
        if (s->hello || len != 4) {
            pm__cluster_fault(c, s, PM_REASON_PROTOCOL);
            return;
        }
        /* A worker linked against a libprocmesh of another protocol version
         * (an exec-mode program built against another release): said with
         * both versions, and charged as a failed start like any other. */
        s->hello_version = pm__get32(payload);
        s->linked = 1;
        if (s->hello_version != PM__PROTO_VERSION) {
            pm__cluster_fault(c, s, PM_REASON_VERSION);
            return;
        }
        s->hello = 1;
        if (send_init(c, s) < 0)
            pm__cluster_fault(c, s, PM_REASON_PROTOCOL);
        return;
    }
    if (!s->hello) { /* READY before HELLO */
        pm__cluster_fault(c, s, PM_REASON_PROTOCOL);
        return;
    }
    pm__cluster_dispatch(c, s, PM__EV_READY);
}

/* A port broke the protocol or its memory (pm__hub_ops.fault). */
static void on_port_fault(void *owner, unsigned p, int reason)
{
    pm_cluster *c = owner;
    pm__cluster_fault(c, &c->slots[p], reason);
}

/* Frames waited for slot p's full ring past the drain timeout
 * (pm__hub_ops.not_draining): reported, and fenced if the options say so. */
static void on_not_draining(void *owner, unsigned p)
{
    pm_cluster *c = owner;
    pm__slot *s = &c->slots[p];
    pm__cluster_emit(c, PM_EVENT_NOT_DRAINING, s, PM_REASON_NOT_DRAINING, 0);
    if (c->o->fence_not_draining)
        pm__cluster_fault(c, s, PM_REASON_NOT_DRAINING);
}

static const pm__hub_ops hub_ops = {on_port_fault, on_control, on_not_draining,
                                    pm__pool_timed_out};

static void cluster_free(pm_cluster *c)
{
    if (c == NULL)
        return;
    int saved = errno;
    pm__mesh_free(c->mesh); /* before the hub: its links are hub ports */
    c->mesh = NULL;
    pm__hub_free(&c->hub);
    for (unsigned i = 0; c->slots != NULL && i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        pm__close(s->pidfd);
        pm__close(s->exec_pipe);
        pm__close(s->notify_fd);
        pm__link_close(&s->link);
        pm__incarnation_spare_drop(c, s);
        pm__output_free(&s->out);
        pm__budget_free(&s->budget);
        pm__cg_slot_close(&c->cg, &s->cg);
        pm__wipemem_free(s->crash, sizeof(*s->crash));
    }
    pm__cg_root_close(&c->cg);
    free(c->slots);
    pm__deadlines_free(&c->deadlines);
    free(c->watches);
    if (c->loop.backend != 0)
        pm__loop_fini(&c->loop);
    pm__close(c->sigfd);
    pm__close(c->timerfd);
    pm__close(c->wakefd);
    if (c->mask_changed)
        pthread_sigmask(SIG_SETMASK, &c->old_mask, NULL);
    pm__env_free(c->env, c->nenv);
    free(c->exec_path);
    pm_options_free(c->o);
    c->magic = 0; /* a stale pointer is refused, not trusted */
    free(c);
    errno = saved;
}

static int cluster_create(const pm_options *o, pm_cluster **out)
{
    int rc;
    pm_cluster *c = calloc(1, sizeof(*c));
    if (c == NULL)
        return -ENOMEM;
    c->magic = PM__MAGIC_CLUSTER;
    c->gen = pm__fork_gen();
    c->sigfd = c->timerfd = c->wakefd = -1;
    c->hub_spin_budget = PM__SPIN_START_NS;
    /* The spin gate's CPU count, read now: fork-mode workers inherit it,
     * and under the strict seccomp filter they may not ask the kernel. */
    (void)pm__spin_cpus();
    c->o = pm__options_dup(o);
    if (c->o == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    if (!c->o->rlimit_set[RLIMIT_CORE]) {
        /* Workers' cores: none by default (a crash loop must not fill the
         * disk), unlimited with a core directory; the cluster's copy of
         * the options carries it to every worker like any rlimit. */
        struct rlimit rl;
        uint64_t hard = PM_RLIM_INFINITY;
        if (getrlimit(RLIMIT_CORE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY)
            hard = (uint64_t)rl.rlim_max;
        c->o->rlimit_set[RLIMIT_CORE] = 1;
        pm__core_rlimit(c->o->core_dir != NULL, geteuid() == 0, hard,
                        &c->o->rlimit_soft[RLIMIT_CORE], &c->o->rlimit_hard[RLIMIT_CORE]);
    }
    c->nslots = (unsigned)pm__options_workers(c->o);
    c->slots = calloc(c->nslots, sizeof(*c->slots));
    if (c->slots == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = pm__deadlines_init(&c->deadlines, c->nslots);
    if (rc < 0)
        goto fail;
    if (pm__options_peer_mode(c->o) && !c->o->hostname_set) {
        /* Peer mode names hosts: the default is the machine's name (the pod
         * name under Kubernetes) when it is a valid name. */
        char host[256];
        host[sizeof(host) - 1] = '\0';
        if (gethostname(host, sizeof(host) - 1) == 0 && pm__name_valid(host))
            memcpy(c->o->hostname, host, strlen(host) + 1); /* valid: < PM_NAME_MAX */
    }
    pm__names names = {c->o->system_name, c->o->hostname, (unsigned)c->o->base_port, c->nslots,
                       NULL};
    rc = pm__hub_init(&c->hub, c->nslots, &names, c, &hub_ops, c);
    if (rc < 0)
        goto fail;
    if (pm__options_peer_mode(c->o)) {
        pm__hub_peer_mode(&c->hub);
        /* Incarnations start from a random base at each start, so a
         * restarted host's workers never reuse a number its peers saw
         * (a frame for the old one gets -ESTALE). Below 2^62: room to
         * count up. */
        uint64_t base = 0;
        if (getrandom(&base, sizeof(base), 0) != (ssize_t)sizeof(base)) {
            rc = -errno;
            goto fail;
        }
        base = (base >> 2) | 1u;
        for (unsigned i = 0; i < c->nslots; i++)
            c->slots[i].incarnation = base;
    }
    c->hub.on_message = c->o->on_message;
    c->hub.on_message_arg = c->o->on_message_arg;
    c->hub.drain_timeout_ms = (uint64_t)c->o->drain_timeout_ms;
    c->hub.max_message = c->o->max_message;
    c->hub.any_per_worker = (uint32_t)c->o->requests_per_worker;
    c->hub.queue_max = (size_t)c->o->request_queue_max;
    c->hub.kill_on_timeout = c->o->kill_on_timeout;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        s->index = i;
        s->deadlines = &c->deadlines;
        pm__cluster_set_state(c, s, PM_SLOT_BACKOFF); /* no process yet; started at once below */
        s->pidfd = s->exec_pipe = s->notify_fd = -1;
        s->standby.pidfd = s->standby.go_fd = -1;
        s->out.s[0].fd = s->out.s[1].fd = -1;
        s->last_exit_code = -1;
        pm__link_zero(&s->link);
        pm__budget_init(&s->budget);
        pm__cg_slot_zero(&s->cg);
    }
    c->self = getpid();
    c->bcfg.min_backoff_ms = (uint32_t)c->o->min_backoff_ms;
    c->bcfg.max_backoff_ms = (uint32_t)c->o->max_backoff_ms;
    c->bcfg.random_factor = c->o->random_factor;
    c->bcfg.max_restarts = c->o->max_restarts;
    c->bcfg.window_ms = (uint32_t)c->o->restart_window_ms;
    if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng))
        c->rng = pm__now_ns() ^ ((uint64_t)getpid() << 32);
    c->rng |= 1; /* xorshift must not start at 0 */
    if (c->o->exec_path != NULL) {
        c->exec_path = pm__exec_resolve(c->o->exec_path);
        if (c->exec_path == NULL || pm__env_template(&c->env, &c->nenv) < 0) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    /* Per slot: its pidfd and doorbell, and its two output pipes when
     * captured. */
    rc = pm__loop_init(&c->loop, (c->o->output == PM_OUTPUT_CAPTURE ? 4 : 2) * c->nslots + 8);
    if (rc < 0)
        goto fail;
    c->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->timerfd < 0 || c->wakefd < 0) {
        rc = -errno;
        goto fail;
    }
    if (c->o->handle_signals) {
        sigset_t set;
        sigemptyset(&set);
        sigaddset(&set, SIGCHLD);
        sigaddset(&set, SIGTERM);
        sigaddset(&set, SIGINT);
        sigaddset(&set, SIGHUP);
        /* Blocked so that they queue for the signalfd instead of running
         * their default action. */
        pthread_sigmask(SIG_BLOCK, &set, &c->old_mask);
        c->mask_changed = 1;
        c->sigfd = signalfd(-1, &set, SFD_NONBLOCK | SFD_CLOEXEC);
        if (c->sigfd < 0) {
            rc = -errno;
            goto fail;
        }
        pm__loop_arm(&c->loop, c->sigfd, PM__TAG(PM__TAG_SIGNAL, 0, 0));
    }
    pm__loop_arm(&c->loop, c->timerfd, PM__TAG(PM__TAG_TIMER, 0, 0));
    pm__loop_arm(&c->loop, c->wakefd, PM__TAG(PM__TAG_WAKE, 0, 0));
    if (c->o->heartbeat_timeout_ms > 0)
        c->next_check = pm__now_ms() + pm__liveness_period(c);
    if (pm__options_peer_mode(c->o)) {
        char why[256];
        rc = pm__peers_start(c, why, sizeof(why));
        if (rc < 0) {
            /* The errno alone would not say which file or address. */
            pm__diag(c->o, NULL, "peer_links_failed", "peer links: %s",
                     why[0] != '\0' ? why : strerror(-rc));
            goto fail;
        }
    }
    *out = c;
    return 0;
fail:
    cluster_free(c);
    return rc;
}

/* Containment, ahead of any incarnation: the cluster's cgroup directory
 * and one per slot with its limits (cgroup.h), so that no restart makes a
 * directory or writes a limit. Without cgroups: process groups, unless a
 * limit was asked for (-EOPNOTSUPP, never silently dropped). */
static int contain_setup(pm_cluster *c, char *why, size_t size)
{
    pm__cg_limits lim = {c->o->memory_max, c->o->pids_max, c->o->cpu_quota_us,
                         c->o->cpu_period_us};
    int limited = lim.memory_max > 0 || lim.pids_max > 0 || lim.cpu_quota_us > 0;
    if (c->o->containment == PM_CONTAIN_PROCESS_GROUP) {
        c->cg.mode = PM_CONTAIN_PROCESS_GROUP;
        snprintf(c->cg.why, sizeof(c->cg.why), "process group per incarnation: cgroups not wanted");
        if (limited) {
            snprintf(why, size, "limits need cgroups, and containment is process-group");
            return -EOPNOTSUPP;
        }
        return 0;
    }
    int rc = pm__cg_root_setup_self(&c->cg, &lim);
    if (rc == 0 && c->cg.mode != PM_CONTAIN_CGROUP && c->o->containment == PM_CONTAIN_CGROUP)
        rc = -EOPNOTSUPP;
    if (rc < 0) {
        snprintf(why, size, "%s", c->cg.why);
        return rc;
    }
    for (unsigned i = 0; c->cg.mode == PM_CONTAIN_CGROUP && i < c->nslots; i++) {
        rc = pm__cg_slot_open(&c->cg, i, &lim, &c->slots[i].cg, why, size);
        if (rc == 0)
            continue;
        if (limited || c->o->containment == PM_CONTAIN_CGROUP)
            return -EOPNOTSUPP;
        /* No limit needs it: process groups for every slot rather than a
         * cluster with two kinds of slots. */
        for (unsigned k = 0; k < i; k++)
            pm__cg_slot_close(&c->cg, &c->slots[k].cg);
        pm__cg_root_close(&c->cg);
        c->cg.mode = PM_CONTAIN_PROCESS_GROUP;
        if (snprintf(c->cg.why, sizeof(c->cg.why), "process group per incarnation: %s", why) < 0)
            c->cg.why[0] = '\0';
    }
    return 0;
}

PM_EXTERN int pm_cluster_containment(const pm_cluster *c, char *detail, size_t size)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (detail != NULL && size > 0)
        snprintf(detail, size, "%s", c->cg.why);
    return c->cg.mode;
}

PM_EXTERN int pm_cluster_spawn(const pm_options *o, pm_cluster **out)
{
    if (out == NULL)
        return -EINVAL;
    *out = NULL;
    int rc = pm_options_validate(o, NULL, 0);
    if (rc < 0)
        return rc;
    pm_cluster *c = NULL;
    rc = cluster_create(o, &c);
    if (rc < 0)
        return rc;
    char why[320];
    rc = contain_setup(c, why, sizeof(why));
    if (rc < 0) {
        /* Said in words in each slot's STOPPED "spawn-aborted" event. */
        c->event_detail = why;
        for (unsigned i = 0; i < c->nslots; i++)
            set_stopped(c, &c->slots[i], PM_REASON_SPAWN_ABORTED);
        c->event_detail = NULL;
        cluster_free(c);
        return rc;
    }
    c->spawning = 1;
    c->entry_cfa = __builtin_dwarf_cfa(); /* PM__ENTER, for a cluster just made */
    for (unsigned i = 0; i < c->nslots && c->spawn_error == 0; i++)
        pm__cluster_dispatch(c, &c->slots[i], PM__EV_BACKOFF_DONE);
    for (;;) {
        if (c->spawn_error != 0)
            break;
        /* Done once every slot has been ready: one that was ready and has
         * exited since is handled by the normal rules, not as a failed
         * spawn. */
        unsigned ready = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            ready += c->slots[i].ever_ready;
        if (ready == c->nslots)
            break;
        rc = pm__cluster_turn(c, -1);
        /* SIGHUP asks to replace running workers; while they are still
         * being started there is nothing to replace: it is dropped. */
        if (c->last_signal == SIGHUP)
            c->last_signal = 0;
        if (rc == 0 && c->last_signal != 0)
            rc = -EINTR;
        if (rc < 0) {
            c->spawn_error = rc;
            break;
        }
    }
    if (c->spawn_error != 0) {
        rc = c->spawn_error;
        pm__cluster_kill_all(c);
        cluster_free(c);
        return rc;
    }
    c->spawning = 0;
    c->entry_cfa = NULL;
    pm__loop_flush(&c->loop);
    *out = c;
    return 0;
}

PM_EXTERN int pm_cluster_restart_slot(pm_cluster *c, unsigned slot)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (slot >= c->nslots)
        return -EINVAL;
    pm__slot *s = &c->slots[slot];
    if (s->state != PM_SLOT_READY)
        return -EBUSY;
    /* The usual stop (request, then SIGKILL after the stop timeout); the
     * replacement starts once the old incarnation is reaped, so the slot
     * never has two live incarnations. */
    s->replace = 1;
    pm__cluster_dispatch(c, s, PM__EV_STOP);
    pm__hub_publish(&c->hub);
    pm__loop_flush(&c->loop);
    pm__cluster_rearm_timer(c);
    return 0;
}

PM_EXTERN int pm_cluster_terminate(pm_cluster *c)
{
    /* In a fork of the supervisor (a fork-mode worker) the cluster is not
     * ours to stop: refusing leaves the real supervisor's workers alone. */
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    c->terminating = 1;
    c->last_signal = 0;
    /* Main's requests end here, answered -ECANCELED before anything stops,
     * rather than -EHOSTDOWN one by one as the workers exit. */
    pm__hub_cancel_all(&c->hub);
    for (unsigned i = 0; i < c->nslots; i++)
        pm__cluster_dispatch(c, &c->slots[i], PM__EV_STOP);
    for (;;) {
        int alive = 0;
        for (unsigned i = 0; i < c->nslots; i++)
            alive += pm__slot_has_process(&c->slots[i]);
        if (alive == 0)
            break;
        rc = pm__cluster_turn(c, 1000);
        /* A second SIGTERM/SIGINT, or a broken loop: skip the grace period. */
        if (rc < 0 || c->last_signal != 0) {
            c->any_killed = 1;
            pm__cluster_kill_all(c);
            break;
        }
    }
    int killed = c->any_killed;
    if (c->o->reap_orphans && c->cg.mode == PM_CONTAIN_PROCESS_GROUP)
        pm__cluster_kill_orphans();
    cluster_free(c);
    return rc < 0 ? rc : killed;
}
