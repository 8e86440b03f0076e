/* SPDX-License-Identifier: MIT */
/*
 * cluster.h - the supervisor's private structures (struct pm_cluster, the
 * slots) and what its modules share: cluster.c (the lifecycle core),
 * incarnation.c, turn.c (one loop turn), liveness.c, notify.c, watch.c, query.c, main_port.c.
 * The hub (hub.h) sits below: the supervisor calls it, it never calls back
 * except through the pm__hub_ops table.
 */
#ifndef PM_CLUSTER_H
#define PM_CLUSTER_H

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "budget.h"
#include "os/cgroup.h"
#include "deadlines.h"
#include "hub/hub.h"
#include "channel/link.h"
#include "os/loop.h"
#include "options.h"
#include "output.h"
#include "mesh/mesh.h"
#include "slot.h"

/* Loop tag kinds (the layout: os/loop.h). */
enum { PM__TAG_SIGNAL = 1, PM__TAG_TIMER, PM__TAG_WAKE, PM__TAG_PIDFD, PM__TAG_HUB,
       PM__TAG_EXECPIPE, PM__TAG_USER, PM__TAG_NOTIFY, PM__TAG_STDOUT, PM__TAG_STDERR,
       PM__TAG_PEER, PM__TAG_PEER_LISTEN /* the mesh's (pm__mesh_env): a link's socket, the listener */,
       PM__TAG_SOCK /* a worker's large-message socket: a record arrived, or room */,
       PM__TAG_STANDBY /* a warm standby's pidfd (standby.c); inc: the incarnation it would be */ };

/* An application fd watched by the loop (pm_cluster_watch_fd). */
typedef struct pm__watch {
    int fd;                 /* -1: free */
    uint32_t gen;           /* bumped on every (un)watch: stale completions are dropped */
    int armed;
    void (*cb)(pm_cluster *, int, void *);
    void *arg;
} pm__watch;

#define PM__MAX_WATCH 1024

/* Fork mode with pm_options_set_warm_standby: the next incarnation, forked
 * ahead onto the spare link and blocked until the crash it replaces
 * (standby.c). pid 0: none. */
typedef struct pm__standby {
    pid_t pid;
    int pidfd;            /* polled (PM__TAG_STANDBY) while armed */
    int go_fd;            /* its go eventfd: writing 1 starts it (a blocking read there) */
    int armed;
    uint64_t incarnation; /* the incarnation it becomes; its link is the slot's spare */
} pm__standby;

typedef struct pm__slot {
    unsigned index;
    int state;             /* PM_SLOT_* */
    uint64_t incarnation;  /* current or last; only grows */
    pid_t pid;             /* 0 when no process */
    int pidfd;             /* -1 when none */
    int exec_pipe;         /* exec mode: read end of the error pipe, or -1 */
    pm__link link;         /* hub side; link.memfd -1 when none */
    pm__link *spare;       /* the next incarnation's link (and exec error pipe),
                              prepared ahead, or NULL (incarnation.c) */
    pm__standby standby;   /* warm standby on the spare link, pid 0 when none */
    int pid_armed;         /* a poll on pidfd is outstanding */
    int hub_armed;         /* a poll on link.hub_efd is outstanding */
    int hub_rang;          /* its doorbell rang this turn: service the port once */
    int sock_armed;        /* the events (PM__LOOP_*) of the poll on link.sock, 0 none */
    int pipe_armed;        /* a poll on exec_pipe is outstanding (exec readiness) */
    int notify_fd;         /* notify readiness: this incarnation's NOTIFY_SOCKET, or -1 */
    int notify_armed;
    int watchdog;          /* the worker sent WATCHDOG=1: the heartbeat applies */
    int hello;             /* HELLO received and INIT sent */
    unsigned hello_version; /* the protocol version its HELLO named */
    int linked;            /* this incarnation sent its HELLO (fork mode: has a link from
                              the start); kept past its reap, for pm__spawn_detail */
    int ever_ready;        /* some incarnation of this slot has been ready */
    int replace;           /* stopping to be replaced (pm_cluster_restart_slot) */
    /* Its deadline (ms, CLOCK_MONOTONIC) is kept in the cluster's heap,
     * which it points at so that pm__slot_set_deadline, the only writer,
     * needs nothing but the slot; read it with pm__slot_deadline. */
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
    pm_options *o;
    unsigned nslots;
    pm__slot *slots;
    pm__hub hub;            /* the router; port i is slot i */
    pm__loop loop;
    int sigfd;
    int timerfd;
    int wakefd;
    /* The stack at the outermost public call that runs the loop (the CFA
     * of pm_cluster_spawn, _run or _call), NULL outside one: a fork-mode
     * child zeroes the supervisor's frames below it (spawn.c). */
    void *entry_cfa;
    sigset_t old_mask;
    int mask_changed;
    uint64_t sig_ignored;   /* exec mode: the signals ignored at the first start (incarnation.c) */
    int sig_ignored_known;
    pid_t self;
    uint32_t hub_spin_budget; /* the hub's learnt spin before sleeping, ns (turn.c) */
    uint64_t timer_at;      /* deadline the timerfd is set to, 0 none; never
                               later than the next deadline, maybe earlier */
    atomic_int stop;
    int last_signal;
    int spawning;           /* inside pm_cluster_spawn */
    int spawn_error;
    const char *event_detail; /* pm_event.detail of the event being emitted, or NULL */
    int terminating;
    int any_killed;
    int poll_children;      /* no pidfd and no signalfd: scan on a short timer */
    uint64_t rng;
    pm__budget_cfg bcfg;
    char *exec_path;        /* resolved against PATH */
    uint64_t next_check;    /* liveness check deadline (ms), 0 = off */
    uint64_t last_check_mono; /* CLOCK_MONOTONIC / CLOCK_BOOTTIME ms at the last check */
    uint64_t last_check_boot;
    struct pm_cluster_stats stats; /* the counters kept here rather than per slot */
    pm__watch *watches;     /* PM__MAX_WATCH entries, allocated on first use */
    char **env;             /* environment template for exec mode */
    size_t nenv;
    uint64_t output_suppressed; /* captured lines dropped by the rate limit (output.c) */
    pm__cg_root cg;         /* containment: the cluster's cgroups, or process groups */
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

/* Sets (at > 0) or clears (at 0) the slot's one deadline: O(log N). */
static inline void pm__slot_set_deadline(pm__slot *s, uint64_t at, int event)
{
    pm__deadlines_set(s->deadlines, s->index, at);
    s->deadline_event = event;
}

/* The slot's deadline, 0 for none. */
static inline uint64_t pm__slot_deadline(const pm__slot *s)
{
    return pm__deadlines_at(s->deadlines, s->index);
}

/* The address of a slot: with its incarnation while it has a process. */
static inline void pm__slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a)
{
    pm__node_address(&c->hub.names, s->index, pm__slot_has_process(s) ? s->incarnation : 0, a);
}

/* cluster.c: the lifecycle core. */
/* Runs the action the slot table gives for (s->state, event). */
void pm__cluster_dispatch(pm_cluster *c, pm__slot *s, int event);
/* Why the first start of s failed, in words (pm_event.detail of the STOPPED
 * "spawn-aborted" event): pm_cluster_spawn can only return an errno, and
 * -ECHILD ("No child processes") says nothing about a worker that exited
 * during its handshake. diag.c. */
void pm__spawn_detail(const pm_cluster *c, const pm__slot *s, char *buf, size_t size);
/* One of the supervisor's diagnostics (pm_options_set_on_diagnostic): to
 * o's callback with topic and the formatted message, else stderr. c is NULL
 * before the cluster is made. diag.c. */
void pm__diag(const pm_options *o, pm_cluster *c, const char *topic, const char *fmt, ...)
    __attribute__((format(printf, 4, 5)));
/* (reap.c) Cuts a worker off and kills it; its exit is charged as a failure with
 * this reason (PM_REASON_*). */
void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason);
/* Collects the exit status if the process has ended and drives the slot.
 * 1 when reaped. */
int pm__cluster_try_reap(pm_cluster *c, pm__slot *s);
void pm__cluster_emit(pm_cluster *c, int type, const pm__slot *s, int reason, uint32_t delay);
/* Sets the slot's state and mirrors it in its port. */
void pm__cluster_set_state(pm_cluster *c, pm__slot *s, int state);

/* Ends what is left of the incarnation's process tree, its worker being
 * dead: a SIGKILL to its process group while the worker is unreaped (its
 * zombie keeps the group id from being reused), and, after the reap, its
 * cgroup killed and waited until empty (bounded), counting OOM kills. */
void pm__cluster_end_group(pm__slot *s);
void pm__cluster_end_tree(pm_cluster *c, pm__slot *s);

/* reap.c: ending an incarnation. Signals s's process (through its pidfd);
 * stops reading its ring for good; releases everything the dead
 * incarnation had; kills and reaps every process of the cluster (returns
 * when all are gone); kills and reaps orphans re-parented to us. */
void pm__cluster_signal(pm__slot *s, int sig);
void pm__cluster_disarm_hub(pm_cluster *c, pm__slot *s);
void pm__cluster_release(pm_cluster *c, pm__slot *s);
void pm__cluster_kill_all(pm_cluster *c);
void pm__cluster_kill_orphans(void);

/* incarnation.c: starts the next incarnation of s. 0, or -errno with
 * nothing left behind (no process, no fd, no memory); -EADDRINUSE is not
 * the slot's fault (see incarnation.c). */
int pm__incarnation_start(pm_cluster *c, pm__slot *s);
/* Closes and frees s's spare link, if it has one, and ends (kills and
 * reaps) the standby waiting on it (errno preserved). */
void pm__incarnation_spare_drop(pm_cluster *c, pm__slot *s);
/* 1 when every fd of fds sits below half of RLIMIT_NOFILE: what is prepared
 * ahead (spares, standbys) must never take the fds that the slots' own
 * starts need (incarnation.c). */
int pm__fds_affordable(const int *fds, size_t n);
/* Forks a process for incarnation inc of s on link l that sets itself up as
 * fork_child does, then blocks reading the eventfd go_fd: a write of 1 runs
 * the bootstrap. Its pid, or -errno. */
pid_t pm__incarnation_fork_standby(pm_cluster *c, pm__slot *s, pm__link *l, uint64_t inc,
                                   int go_fd);

/* standby.c: the warm standby (pm_options_set_warm_standby). */
/* After the spare is made at ready: forks the standby onto it; best
 * effort, errno preserved. */
void pm__standby_prepare(pm_cluster *c, pm__slot *s);
/* Ends s's standby (SIGKILL through its pidfd, reaped); errno preserved. */
void pm__standby_end(pm_cluster *c, pm__slot *s);
/* Before the spare is taken: a standby that has died is reaped and the
 * spare it held dropped (its memory was another process's). */
void pm__standby_check(pm_cluster *c, pm__slot *s);
/* Makes the waiting standby incarnation s->incarnation (whose link was just
 * taken): moved into the slot's cgroup, started. Its pid with s->pidfd set,
 * 0 when there is none for this incarnation, or -errno (the standby was
 * ended; the caller must not use the link it held). */
pid_t pm__standby_take(pm_cluster *c, pm__slot *s);
/* Its pidfd's poll completed: the standby died while waiting. */
void pm__standby_on_exit(pm_cluster *c, pm__slot *s, uint64_t tag);
/* Starts the standby taken by pm__standby_take (writes its eventfd). */
void pm__standby_go(pm__slot *s);
/* reap_orphans: pid is a standby of some slot (then ended and reaped). */
int pm__standby_reap_pid(pm_cluster *c, pid_t pid);
/* Prepares s's next incarnation's link (the spare) if it has none; best
 * effort, errno preserved. Called when the incarnation becomes ready. */
void pm__incarnation_spare_prepare(pm_cluster *c, pm__slot *s);

/* turn.c: one loop turn, and the timer. */
int pm__cluster_turn(pm_cluster *c, int timeout_ms);
int pm__cluster_rearm_timer(pm_cluster *c);
/* Services the slot's port once: its doorbell rang or it had work left over. */
void pm__cluster_on_hub(pm_cluster *c, pm__slot *s);
/* Watches the slot's fd socket while its port is read (turn.c). */
void pm__cluster_arm_sock(pm_cluster *c, pm__slot *s);
void pm__cluster_reap_all(pm_cluster *c);
/* Reads and acts on what a notify-mode worker sent (READY=1, WATCHDOG=1,
 * STOPPING=1); also run when it is reaped, before its exit is handled. */
void pm__cluster_read_notify(pm_cluster *c, pm__slot *s);

/* liveness.c */
uint64_t pm__liveness_period(const pm_cluster *c);
void pm__liveness_check(pm_cluster *c, uint64_t now);

/* output.c: a worker's captured stdout and stderr. */
/* Creates the incarnation's two pipes: our read ends in s->out, the write
 * ends (close-on-exec; the child dup2s them onto 1 and 2, the caller closes
 * them after the fork) in wfd. 0 or -errno with nothing left open. */
int pm__output_open(pm_cluster *c, pm__slot *s, int wfd[2]);
/* Asks the loop to report the read ends readable. */
void pm__output_arm(pm_cluster *c, pm__slot *s);
/* A read end is readable (kind PM__TAG_STDOUT or PM__TAG_STDERR): reads a
 * bounded slice, delivers its lines, arms again. */
void pm__output_ready(pm_cluster *c, pm__slot *s, int kind);
/* After the reap, before the exit is reported: reads what is left (bounded),
 * delivers the last partial line and the suppressed count, closes. */
void pm__output_drain(pm_cluster *c, pm__slot *s);
/* Closes the read ends without reading (disarmed first). */
void pm__output_close(pm_cluster *c, pm__slot *s);
/* Closes and frees everything of a slot's output (cluster teardown). */
void pm__output_free(pm__output *o);

/* pool.c: main's any-worker requests and the slots. */
/* pm__hub_ops.timed_out: kills p (reason "timeout"), cut off at once. */
void pm__pool_timed_out(void *owner, unsigned p);
/* At the reap, before pm__cluster_release: notes whether s died of its
 * input and hands the hub how it ended (*e, which must outlive the
 * release; the caller clears c->hub.ending after it). */
void pm__pool_on_death(pm_cluster *c, pm__slot *s, int reason, pm__ending *e);
/* After a failure: 1 when s died of its input and was restarted at once
 * (outside the budget), else 0. */
int pm__pool_input_restart(pm_cluster *c, pm__slot *s);

/* peers.c: peer mode, after the loop exists: the mesh (c->mesh) started
 * with its environment. 0 or -errno; why names what failed. */
int pm__peers_start(pm_cluster *c, char *why, size_t whysize);

/* watch.c */
void pm__watch_fire(pm_cluster *c, unsigned idx, uint32_t gen);

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

#endif /* PM_CLUSTER_H */
