/* SPDX-License-Identifier: MIT */
/*
 * types.h - the supervisor's private structures (struct pm_cluster, the
 * slots, the loop's tag kinds) and the few inline reads of them that every
 * module of the supervisor shares. Declarations only: what each module
 * exports is in its own header (core.h, actions.h, reap.h, turn.h, ...).
 * The hub (hub.h) sits below: the supervisor calls it, it never calls back
 * except through the pm__hub_ops table. The hub, the loop and the mesh are
 * only named here: a module that calls one includes its header.
 */
#ifndef PM_SUPERVISOR_TYPES_H
#define PM_SUPERVISOR_TYPES_H

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "base/internal.h"
#include "budget.h"
#include "os/cgroup.h"
#include "deadlines.h"
#include "channel/channel.h"
#include "os/loop.h" /* PM__TAG_INC: pm__slot_tag_current */
#include "output.h"
#include "slot.h"
#include "standby_state.h" /* pm__standby, a slot's */

/* Opaque here, held by pointer: a module that calls into one includes its
 * header (hub/hub.h, os/loop.h, mesh/mesh.h), options.h to read c->o. */
typedef struct pm__hub pm__hub;
typedef struct pm__loop pm__loop;
typedef struct pm__mesh pm__mesh;

/* Loop tag kinds (the layout: os/loop.h). */
enum { PM__TAG_SIGNAL = 1, PM__TAG_TIMER, PM__TAG_WAKE, PM__TAG_PIDFD, PM__TAG_HUB,
       PM__TAG_EXECPIPE, PM__TAG_USER, PM__TAG_NOTIFY, PM__TAG_STDOUT, PM__TAG_STDERR,
       PM__TAG_PEER, PM__TAG_PEER_LISTEN /* the mesh's (pm__mesh_env): a link's socket, the listener */,
       PM__TAG_SOCK /* a worker's large-message socket: a record arrived, or room */,
       PM__TAG_STANDBY /* a warm standby's pidfd (standby_fork.c); inc: the incarnation it would be */,
       PM__TAG_OUTPUT /* the output reader's epoll set (output.c); STDOUT and STDERR tag its pipes there */ };
_Static_assert(PM__TAG_OUTPUT <= 15, "a tag's kind has four bits (os/loop.h): no kind is left");

typedef struct pm__slot {
    unsigned index;
    int state;             /* PM_SLOT_* */
    uint64_t incarnation;  /* current or last; only grows */
    pid_t pid;             /* 0 when no process */
    int pidfd;             /* -1 when none */
    int exec_pipe;         /* exec mode: read end of the error pipe, or -1 */
    pm__channel channel;   /* hub side; channel.map NULL when none (its memfd is -1
                              also while a worker runs: pm__channel_drop_worker_ends) */
    pm__channel *spare;    /* the next incarnation's channel (and exec error pipe),
                              prepared ahead, or NULL (incarnation.c) */
    pm__standby standby;   /* warm standby on the spare channel, pid 0 when none */
    int pid_armed;         /* a poll on pidfd is outstanding */
    int hub_armed;         /* a poll on channel.hub_efd is outstanding */
    int hub_rang;          /* its doorbell rang this turn: service the port once */
    int sock_rang;         /* its fd socket woke this turn: take its records in that service */
    int sock_armed;        /* the events (PM__LOOP_*) of the poll on channel.sock, 0 none */
    int pipe_armed;        /* a poll on exec_pipe is outstanding (exec readiness) */
    int notify_fd;         /* notify readiness: this incarnation's NOTIFY_SOCKET, or -1 */
    int notify_armed;
    int watchdog;          /* the worker sent WATCHDOG=1: the heartbeat applies */
    int hello;             /* HELLO received (and INIT sent) */
    int init_sent;         /* exec mode: INIT written into the ring ahead of HELLO
                              (incarnation.c arm), so the HELLO sends no second one */
    unsigned hello_version; /* the protocol version its HELLO named */
    int joined;            /* this incarnation sent its HELLO (fork mode: has a channel from
                              the start); kept past its reap, for pm__spawn_detail */
    int ever_ready;        /* some incarnation of this slot has been ready */
    int replace;           /* stopping to be replaced (pm_cluster_restart_slot) */
    /* Its deadline (ms, CLOCK_MONOTONIC) is kept in the cluster's heap,
     * which it points at so that pm__slot_set_deadline, the only writer,
     * needs nothing but the slot. */
    pm__deadlines *deadlines;
    int deadline_event;    /* PM__EV_* fired at the deadline */
    int kill_reason;       /* why procmesh killed it (PM_REASON_*), or 0 */
    int exec_errno;        /* exec failed with this errno (0: it did not) */
    int start_error;       /* the last start failed before a process ran (-errno), or 0 */
    pm__budget budget;
    int last_exit_code;
    int last_signal;
    int last_core;
    pm_crash_report *crash; /* the last crash (crash.c), allocated on the first one */
    pm__output out;        /* captured stdout/stderr (output.c); fds -1 when not captured */
    /* Liveness. */
    uint64_t last_beats;   /* the worker's progress counter at the last check */
    uint64_t progress_ms;  /* when it last moved (or the period restarted) */
    int kill_sent;         /* SIGKILL sent to this incarnation */
    unsigned fences;
    int last_fence_reason; /* PM_REASON_*, 0 none */
    pm__cg_slot cg;        /* its cgroup (containment cgroup), reused by its incarnations */
    unsigned oom_kills;    /* OOM kills in its cgroup during the last incarnation */
    int input_fault;       /* the incarnation being reaped died holding one of main's
                              requests (pool.c) */
    unsigned input_faults; /* such deaths, restarted outside the budget */
} pm__slot;

struct pm_cluster {
    uint32_t magic;         /* PM__MAGIC_CLUSTER; 0 once freed */
    uint32_t gen;           /* pm__fork_gen() of the process that created it */
    /* The fields below are the shared core. A module's own fields are its
     * part, declared in its header: c->turn_state, c->liveness and
     * c->incarnation_state (modules above this header: incomplete to the
     * others, allocated with the cluster in cluster.c), c->output and
     * c->watches. */
    pm_options *o;
    unsigned nslots;
    pm__slot *slots;
    pm__hub *hub;           /* the router; port i is slot i (opaque: hub.h) */
    pm__loop *loop;         /* opaque (os/loop.h): NULL until created */
    int sigfd;
    int timerfd;
    int wakefd;
    /* The stack at the outermost public call that runs the loop (the CFA
     * of pm_cluster_spawn, _run or _call), NULL outside one: a fork-mode
     * child zeroes the supervisor's frames below it (spawn.c). */
    void *entry_cfa;
    sigset_t old_mask;
    int mask_changed;
    struct pm__incarnation_state *incarnation_state; /* incarnation.c's (incarnation.h) */
    pid_t self;
    struct pm__turn_state *turn_state; /* turn.c's (turn.h) */
    int last_signal;
    int spawning;           /* inside pm_cluster_spawn */
    int spawn_error;
    unsigned ever_ready;    /* slots that have been ready at least once */
    unsigned prepare_at;    /* the next slot whose successor pm__cluster_prepare_due prepares */
    int prepare_due;        /* set at the end of pm_cluster_spawn: prepare_at .. nslots are due */
    const char *event_detail; /* pm_event.detail of the event being emitted, or NULL */
    int terminating;
    int any_killed;
    int poll_children;      /* no pidfd and no signalfd: scan on a short timer */
    uint64_t rng;
    pm__budget_cfg bcfg;
    pm__channel_params channel_params; /* every channel's (cluster.c, at creation) */
    char *exec_path;        /* resolved against PATH */
    uint64_t next_check;    /* liveness check deadline (ms), 0 = off */
    struct pm__liveness_state *liveness; /* liveness.c's (liveness.h) */
    struct pm_cluster_stats stats; /* the counters kept here rather than per slot */
    struct pm__watch *watches; /* PM__MAX_WATCH entries (watch.h), allocated on first use */
    char **env;             /* environment template for exec mode */
    size_t nenv;
    pm__output_totals output; /* output.c's (output.h) */
    pm__cg_root cg;         /* containment: the cluster's cgroups, or process groups */
    /* The channels of the incarnations reaped (reap.c), closed at the end
     * of a turn when no replacement is on its way to READY
     * (pm__cluster_bury_turn), so that a replacement started at once is
     * forked first and not kept waiting for them; a fork child drops
     * their fds (forkdrop.c plan_own). */
    pm__channel *dying;
    unsigned ndying, dying_cap;
    pm__mesh *mesh;         /* peer links (mesh.h), NULL without peer mode */
    pm__deadlines deadlines; /* every slot's deadline, earliest first (deadlines.h) */
    /* How much work a turn does per slot (tests/check_deadlines.c): turns,
     * and slots the turn itself looked at (deadlines fired, exits looked
     * for). The liveness check's walk is counted apart, per check: it runs
     * at a fixed period, not per turn. */
    uint64_t turns;
    uint64_t turn_visits;
    uint64_t liveness_checks;
    uint64_t liveness_visits;
    uint64_t standby_taken;  /* starts that took a warm standby (standby.c) */
};

/* 0 when c is a live cluster of this process, else -EINVAL (NULL or not
 * a cluster) or -EPERM (created in another process: this is a fork of it). */
static inline int pm__cluster_check(const pm_cluster *c)
{
    if (c == NULL || c->magic != PM__MAGIC_CLUSTER)
        return -EINVAL;
    if (c->gen != atomic_load_explicit(&pm__fork_generation, memory_order_relaxed))
        return -EPERM;
    return 0;
}

static inline int pm__slot_has_process(const pm__slot *s)
{
    return s->pid > 0;
}

/* A completion tagged with s's slot is about its current incarnation only
 * when s has a process and the tag carries that incarnation (its low 32
 * bits: os/loop.h). One armed for an incarnation that died, delivered
 * after the next one started, is not the new one's: dropped. */
static inline int pm__slot_tag_current(const pm__slot *s, uint64_t tag)
{
    return pm__slot_has_process(s) && PM__TAG_INC(tag) == (s->incarnation & 0xffffffffu);
}

/* Sets (at > 0) or clears (at 0) the slot's one deadline: O(log N). */
static inline void pm__slot_set_deadline(pm__slot *s, uint64_t at, int event)
{
    pm__deadlines_set(s->deadlines, s->index, at);
    s->deadline_event = event;
}

/* Brackets a public function that may run the loop and so fork a worker:
 * notes where the library's frames begin on the caller's stack (the
 * outermost call wins). Every return path must pass PM__LEAVE. */
#define PM__ENTER(c) void *pm__outer_cfa = pm__enter((c), __builtin_dwarf_cfa())
#define PM__LEAVE(c) ((c)->entry_cfa = pm__outer_cfa)
static inline void *pm__enter(pm_cluster *c, void *cfa)
{
    void *outer = c->entry_cfa;
    if (outer == NULL)
        c->entry_cfa = cfa;
    return outer;
}

#endif /* PM_SUPERVISOR_TYPES_H */
