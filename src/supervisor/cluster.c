/* SPDX-License-Identifier: MIT */
/*
 * cluster.c - the top of the supervisor: making and freeing a cluster,
 * pm_cluster_spawn, _restart_slot and _terminate, and the handshake and
 * faults the hub reports up (pm__hub_ops). The slot table's actions are in
 * actions.c, the reap in reap.c, the loop turn in turn.c.
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
#include "hub/hub.h"
#include "os/loop.h"
#include "mesh/mesh.h"
#include "options.h"






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
        s->joined = 1;
        if (s->hello_version < PM__PROTO_MIN_VERSION || s->hello_version > PM__PROTO_VERSION) {
            pm__cluster_fault(c, s, PM_REASON_VERSION);
            return;
        }
        s->hello = 1;
        /* An older library would drop a lane's offer as malformed and leave
         * its record on the socket, breaking its large messages' sequence. */
        pm__hub_port_lanes_ok(c->hub, p, s->hello_version >= PM__PROTO_LANES_VERSION);
        pm__hub_port_lane_notes(c->hub, p, s->hello_version >= PM__PROTO_LANE_NOTES_VERSION);
        /* Usually INIT is in its ring already, written before the worker
         * could say HELLO: the worker finds it without a sleep, and we
         * answer nothing. */
        if (!s->init_sent && pm__incarnation_send_init(c, s) < 0)
            pm__cluster_fault(c, s, PM_REASON_PROTOCOL);
        s->init_sent = 1;
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

/* The slot table's bytes (one slot at least: an empty mapping is none). */
static size_t slots_size(unsigned n)
{
    return (n > 0 ? n : 1) * sizeof(pm__slot);
}

static void cluster_free(pm_cluster *c)
{
    if (c == NULL)
        return;
    int saved = errno;
    pm__mesh_free(c->mesh); /* before the hub: its links are hub ports */
    c->mesh = NULL;
    pm__hub_delete(c->hub);
    pm__cluster_bury(c);
    free(c->dying);
    for (unsigned i = 0; c->slots != NULL && i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        pm__close(s->pidfd);
        pm__close(s->exec_pipe);
        pm__close(s->notify_fd);
        pm__channel_close(&s->channel);
        pm__incarnation_spare_drop(c, s);
        pm__output_free(c, s);
        pm__budget_free(&s->budget);
        pm__cg_slot_close(&c->cg, &s->cg);
        pm__wipemem_free(s->crash, sizeof(*s->crash));
    }
    pm__cg_root_close(&c->cg);
    if (c->slots != NULL)
        pm__wipemem_free(c->slots, slots_size(c->nslots));
    pm__forkdrop_free(&c->incarnation_state->drop);
    pm__output_fini(c); /* after every slot abandoned the reads it had under way */
    pm__deadlines_free(&c->deadlines);
    free(c->watches);
    pm__loop_fini(c->loop);
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
    pm__errno_restore(saved);
}

/* Workers' cores: none by default (a crash loop must not fill the disk),
 * unlimited with a core directory; the cluster's copy of the options
 * carries it to every worker like any rlimit. */
static void default_core_rlimit(pm_cluster *c)
{
    if (c->o->rlimit_set[RLIMIT_CORE])
        return;
    struct rlimit rl;
    uint64_t hard = PM_RLIM_INFINITY;
    if (getrlimit(RLIMIT_CORE, &rl) == 0 && rl.rlim_max != RLIM_INFINITY)
        hard = (uint64_t)rl.rlim_max;
    c->o->rlimit_set[RLIMIT_CORE] = 1;
    pm__core_rlimit(c->o->core_dir != NULL, geteuid() == 0, hard,
                    &c->o->rlimit_soft[RLIMIT_CORE], &c->o->rlimit_hard[RLIMIT_CORE]);
}

/* The router, with the options it applies. 0 or -errno. */
static int hub_setup(pm_cluster *c)
{
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
    int rc = pm__hub_new(&c->hub, c->nslots, &names, c, &hub_ops, c);
    if (rc < 0)
        return rc;
    if (pm__options_peer_mode(c->o)) {
        pm__hub_peer_mode(c->hub);
        /* Incarnations start from a random base at each start, so a
         * restarted host's workers never reuse a number its peers saw
         * (a frame for the old one gets -ESTALE). Below 2^62: room to
         * count up. */
        uint64_t base = 0;
        if (getrandom(&base, sizeof(base), 0) != (ssize_t)sizeof(base))
            return -errno;
        base = (base >> 2) | 1u;
        for (unsigned i = 0; i < c->nslots; i++)
            c->slots[i].incarnation = base;
    }
    pm__hub_config cfg = {
        .on_message = c->o->on_message,
        .on_message_arg = c->o->on_message_arg,
        .drain_timeout_ms = (uint64_t)c->o->drain_timeout_ms,
        .max_message = c->o->max_message,
        .requests_per_worker = (uint32_t)c->o->requests_per_worker,
        .request_queue_max = (size_t)c->o->request_queue_max,
        .kill_on_timeout = c->o->kill_on_timeout,
    };
    pm__hub_configure(c->hub, &cfg);
    return 0;
}

/* Every slot without a process, and the restart budget's settings. */
/* Every slot's fds at their sentinels, as soon as the table exists:
 * cluster_free closes what a slot holds, and a later step of the
 * creation that fails (the deadlines, the hub) sends it there, where
 * calloc's zeros would have been fd 0, closed once per field (and the
 * output reader, not made yet, dereferenced). Found by check_spawn
 * test_spawn_alloc_failures. */
static void slots_zero(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        s->pidfd = s->exec_pipe = s->notify_fd = -1;
        s->standby.pidfd = s->standby.go_fd = -1;
        s->out.s[0].fd = s->out.s[1].fd = -1;
        pm__channel_zero(&s->channel);
        pm__budget_init(&s->budget);
        pm__cg_slot_zero(&s->cg);
    }
}

static void slots_init(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        s->index = i;
        s->deadlines = &c->deadlines;
        pm__cluster_set_state(c, s, PM_SLOT_BACKOFF); /* no process yet; started at once below */
        s->last_exit_code = -1;
    }
    c->self = getpid();
    c->channel_params.ring_cap = c->o->ring_size;
    c->channel_params.supervisor_pid = c->self;
    c->channel_params.heartbeat_ms = (uint32_t)c->o->heartbeat_timeout_ms;
    c->channel_params.max_message = c->o->max_message;
    c->bcfg.min_backoff_ms = (uint32_t)c->o->min_backoff_ms;
    c->bcfg.max_backoff_ms = (uint32_t)c->o->max_backoff_ms;
    c->bcfg.random_factor = c->o->random_factor;
    c->bcfg.max_restarts = c->o->max_restarts;
    c->bcfg.window_ms = (uint32_t)c->o->restart_window_ms;
    if (getrandom(&c->rng, sizeof(c->rng), GRND_NONBLOCK) != sizeof(c->rng))
        c->rng = pm__now_ns() ^ ((uint64_t)getpid() << 32);
    c->rng |= 1; /* xorshift must not start at 0 */
}

/* The loop and the cluster's own fds in it: the timer, the wake-up
 * eventfd, the signalfd when the cluster handles signals. 0 or -errno. */
static int loop_setup(pm_cluster *c)
{
    /* Per slot: its pidfd and doorbell, and its two output pipes when
     * captured. */
    int rc = pm__loop_init(&c->loop, (c->o->output == PM_OUTPUT_CAPTURE ? 4 : 2) * c->nslots + 8);
    if (rc < 0)
        return rc;
    c->timerfd = timerfd_create(CLOCK_MONOTONIC, TFD_NONBLOCK | TFD_CLOEXEC);
    c->wakefd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (c->timerfd < 0 || c->wakefd < 0)
        return -errno;
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
        if (c->sigfd < 0)
            return -errno;
        pm__loop_arm(c->loop, c->sigfd, PM__TAG(PM__TAG_SIGNAL, 0, 0));
    }
    pm__loop_arm(c->loop, c->timerfd, PM__TAG(PM__TAG_TIMER, 0, 0));
    pm__loop_arm(c->loop, c->wakefd, PM__TAG(PM__TAG_WAKE, 0, 0));
    /* The threads that read the captured output wake the loop through
     * the same eventfd (output.c, start_read). */
    return pm__output_init(c, c->wakefd);
}

/* The cluster and the parts only one module uses, in one allocation: c
 * first, so that free(c) frees them all. */
typedef struct cluster_alloc {
    struct pm_cluster c;
    struct pm__turn_state turn;
    struct pm__liveness_state liveness;
    struct pm__incarnation_state incarnation;
} cluster_alloc;

static int cluster_create(const pm_options *o, pm_cluster **out)
{
    int rc;
    cluster_alloc *all = calloc(1, sizeof(*all));
    if (all == NULL)
        return -ENOMEM;
    pm_cluster *c = &all->c;
    c->turn_state = &all->turn;
    c->liveness = &all->liveness;
    c->incarnation_state = &all->incarnation;
    c->magic = PM__MAGIC_CLUSTER;
    c->gen = pm__fork_gen();
    c->sigfd = c->timerfd = c->wakefd = -1;
    /* The spin gate's CPU count, read now: fork-mode workers inherit it,
     * and under the strict seccomp filter they may not ask the kernel. */
    (void)pm__spin_cpus();
    c->o = pm__options_dup(o);
    if (c->o == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    default_core_rlimit(c);
    c->nslots = (unsigned)pm__options_workers(c->o);
    /* A mapping of its own that no fork shares (pm__wipemem_alloc, zeroed):
     * a fork-mode worker has nothing of any slot (incarnation.c gives its
     * child copies of what it reads), and the supervisor's writes to its
     * slot right after the fork are no copy-on-write faults on the
     * crash-to-ready path (doc/benchmarks.md, stop 58). */
    c->slots = pm__wipemem_alloc(slots_size(c->nslots));
    if (c->slots == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    slots_zero(c);
    rc = pm__deadlines_init(&c->deadlines, c->nslots);
    if (rc < 0)
        goto fail;
    rc = hub_setup(c);
    if (rc < 0)
        goto fail;
    slots_init(c);
    if (c->o->exec_path != NULL) {
        c->exec_path = pm__exec_resolve(c->o->exec_path);
        if (c->exec_path == NULL || pm__env_template(&c->env, &c->nenv) < 0) {
            rc = -ENOMEM;
            goto fail;
        }
    }
    rc = loop_setup(c);
    if (rc < 0)
        goto fail;
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
        pm__cluster_set_state_final(c, s, PM_SLOT_STOPPED);
    }
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
            pm__cluster_set_stopped(c, &c->slots[i], PM_REASON_SPAWN_ABORTED);
        c->event_detail = NULL;
        cluster_free(c);
        return rc;
    }
    /* Direct lanes only where a revoked lane can have no writer left: in
     * a cgroup, killed and emptied before its port closes; a process
     * group's setsid() descendant could outlive its worker and go on
     * writing (doc/design.md, "Direct lanes", Revocation). Without memory
     * for the book, no lanes: every frame takes the hub, as before. */
    /* Fencing a worker that does not drain needs every frame through the
     * hub, which is what measures it. */
    if (c->o->direct_lanes && !c->o->fence_not_draining && c->cg.mode == PM_CONTAIN_CGROUP &&
        c->nslots > 1)
        (void)pm__hub_lanes_enable(c->hub);
    c->spawning = 1;
    c->entry_cfa = __builtin_dwarf_cfa(); /* PM__ENTER, for a cluster just made */
    for (unsigned i = 0; i < c->nslots && c->spawn_error == 0; i++)
        pm__cluster_dispatch(c, &c->slots[i], PM__EV_BACKOFF_DONE);
    for (;;) {
        if (c->spawn_error != 0)
            break;
        /* Done once every slot has been ready: one that was ready and has
         * exited since is handled by the normal rules, not as a failed
         * spawn. Counted by act_ready, not recounted per turn (O(N) turns
         * of an O(N) count made a large spawn O(N^2)). */
        if (c->ever_ready == c->nslots)
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
    /* The successors are made on the turns after this (actions.c). */
    c->prepare_at = 0;
    c->prepare_due = 1;
    /* The last turn read the readies: their rings are armed here, or an
     * application that only waits on pm_cluster_fd would never hear of
     * the workers' first messages. */
    pm__cluster_leave(c, 1);
    c->entry_cfa = NULL;
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
    pm__hub_publish(c->hub);
    pm__loop_flush(c->loop);
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
    pm__hub_cancel_all(c->hub);
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
