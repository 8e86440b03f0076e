/* SPDX-License-Identifier: MIT */
/*
 * procmesh.h - the public interface of libprocmesh.
 *
 * procmesh supervises worker processes: a supervisor forks them, links each
 * one to itself by a pair of single-producer/single-consumer rings in shared
 * memory, relays frames between them and restarts crashed workers under a
 * restart budget.
 *
 * Conventions (the same for every function declared here):
 *  - every call that can fail returns 0 (or a non-negative count) on success
 *    and a negative errno value on failure; pm_strerror() describes it;
 *  - handles are opaque, so the ABI can evolve without breaking callers;
 *  - bad input changes nothing: NULL, an out-of-range value or a handle of
 *    the wrong kind gives -EINVAL (functions without an error return give
 *    0 or NULL, and void ones do nothing); a pm_cluster used in another
 *    process than the one that spawned it (a fork of the supervisor, such
 *    as a fork-mode worker) or a pm_node used in a child of its worker
 *    gives -EPERM, because the rings and processes behind it are not that
 *    process's to touch;
 *  - names are NUL-terminated and at most PM_NAME_MAX - 1 bytes long.
 */
#ifndef PROCMESH_H
#define PROCMESH_H

#include <stddef.h>
#include <stdint.h>
#include <sys/types.h>

#ifdef __cplusplus
extern "C" {
#endif

#if defined(__GNUC__) && __GNUC__ >= 4
#define PM_EXTERN __attribute__((visibility("default")))
#else
#define PM_EXTERN
#endif

#define PM_VERSION_MAJOR 0
#define PM_VERSION_MINOR 1
#define PM_VERSION_PATCH 0
/* The worker <-> supervisor protocol version (HELLO); bumped with any change
 * to the frames or the handshake, and recorded in NEWS. Fork-mode workers,
 * the supervisor's own code, skip HELLO/INIT and say READY first. 3: direct
 * lanes between workers; 4: a lane's revocation names the lane; a
 * supervisor also takes an exec'd worker of version 2 (it gets no lane) or
 * 3 (its revocations name none). */
#define PM_PROTOCOL_VERSION 4

/* Room for a name (system or host) including its terminating NUL. */
#define PM_NAME_MAX 64
/* Room for any formatted address, "system@host:port#incarnation" plus NUL. */
#define PM_ADDRESS_STRLEN (2 * (PM_NAME_MAX - 1) + 1 + 1 + 5 + 1 + 20 + 1)

/* The library's version as "MAJOR.MINOR.PATCH"; never NULL. */
PM_EXTERN const char *pm_version_string(void);

/*
 * A static description of an error code returned by any pm_ function (a
 * negative errno value); also accepts a positive errno. Never NULL, thread
 * safe, the string must not be freed.
 */
PM_EXTERN const char *pm_strerror(int err);

/*
 * The address of a node of a mesh. `system` names the mesh, `host` the
 * machine or role ("main" for the supervisor), `port` the slot's port and
 * `incarnation` which life of that slot (0 = unspecified, matches any).
 */
typedef struct pm_address {
    char system[PM_NAME_MAX];
    char host[PM_NAME_MAX];
    uint16_t port;
    uint64_t incarnation;
} pm_address;

/*
 * Writes "system@host:port" (plus "#incarnation" when it is not 0) and a
 * terminating NUL into buf. Returns the length written without the NUL, or
 * -ENOSPC when buf is too small (buf then holds an empty string if size > 0),
 * or -EINVAL when addr holds a name that is empty, unterminated or has a
 * character that parsing would reject.
 */
PM_EXTERN int pm_address_format(const pm_address *addr, char *buf, size_t size);

/*
 * Parses the text form written by pm_address_format(). Names are 1 to
 * PM_NAME_MAX - 1 characters from [A-Za-z0-9._-]; the port is a decimal
 * 0..65535 and the incarnation a decimal 1..2^64-1, both without sign,
 * blanks or leading zeros. Returns 0, or -EINVAL on any malformed text
 * (out is then left untouched).
 */
PM_EXTERN int pm_address_parse(const char *text, pm_address *out);

/* 1 when both addresses name the same node: same names and port, and the
 * same incarnation unless either of them is 0 (unspecified). */
PM_EXTERN int pm_address_match(const pm_address *a, const pm_address *b);


/* ------------------------------------------------------------------------
 * Supervisor: options
 *
 * An options object describes a cluster before it is spawned. Every setter
 * returns 0, or -EINVAL for a value out of range (the object is then left
 * unchanged); pm_cluster_spawn() checks the combination again.
 * ---------------------------------------------------------------------- */

typedef struct pm_options pm_options;
typedef struct pm_cluster pm_cluster;
typedef struct pm_node pm_node;

/* Most workers a cluster may have. */
#define PM_MAX_WORKERS 4096
/* Largest init data (pm_options_set_init_data) and frame payload. */
#define PM_MAX_INIT_DATA (64 * 1024)
/* Largest max_restarts other than -1 (unlimited). */
#define PM_MAX_RESTARTS_LIMIT 10000

enum pm_restart_policy {
    PM_RESTART_ALWAYS = 1,     /* restart after any exit, clean ones too */
    PM_RESTART_ON_FAILURE = 2, /* restart after a failure only (default) */
    PM_RESTART_NEVER = 3       /* never restart */
};

enum pm_event_type {
    PM_EVENT_STARTED = 1,          /* a worker process was forked (pid, incarnation) */
    PM_EVENT_READY = 2,            /* it completed the handshake */
    PM_EVENT_EXITED = 3,           /* it was reaped: exit_code, or signal and core_dumped */
    PM_EVENT_RESTART_SCHEDULED = 4, /* the slot restarts after delay_ms */
    PM_EVENT_RETIRED = 5,          /* the slot used up its restart budget (restarts) */
    PM_EVENT_STOPPED = 6,          /* the slot stopped for good without failing */
    PM_EVENT_SPAWN_FAILED = 7,     /* a start failed before a process ran (exit_code = -errno) */
    PM_EVENT_FENCED = 8,           /* the hub cut a worker off and killed it (reason:
                                      "heartbeat", "corrupt-ring", "protocol",
                                      "version", "not-draining") */
    PM_EVENT_STALLED = 9,          /* the supervisor itself was not running for delay_ms
                                      (SIGSTOP, suspend, starvation); slot is 0 */
    PM_EVENT_STOPPING = 10,        /* a notify-mode worker announced STOPPING=1 */
    PM_EVENT_NOT_DRAINING = 11,    /* frames waited for the slot's full ring longer than the
                                      drain timeout (reason "not-draining"); once per stall,
                                      see pm_options_set_drain_timeout_ms */
    PM_EVENT_PEER_UP = 12,         /* a peer link came up: peer_host, peer_incarnation (the
                                      remote supervisor's, random per start); slot 0 */
    PM_EVENT_PEER_DOWN = 13,       /* a peer link went down: peer_host, peer_incarnation, and
                                      why in detail ("truncated": the connection ended without
                                      CLOSE, "closed": the peer closed it, "record", "timeout",
                                      "local" ...); slot 0 */
    PM_EVENT_PEER_REFUSED = 14     /* peer connections that ended before their link came up
                                      (a refused or failed handshake): the reason in detail
                                      ("key_id", "handshake_decrypt", "timeout", ...), the
                                      peer's address in peer_address, and peer_failures, how
                                      many such ends this one event stands for: at most one
                                      event per address and reason a minute; slot 0 */
};

/*
 * Why an event happened. One code per reason string: pm_reason_name(code)
 * is the string pm_event.reason carries (the table in src/base/reason.c is the
 * only place they are spelled).
 */
enum pm_reason {
    PM_REASON_NONE = 0,          /* "" */
    PM_REASON_SPAWN = 1,         /* "spawn": STARTED, SPAWN_FAILED */
    PM_REASON_READY = 2,         /* "ready": READY */
    PM_REASON_EXIT = 3,          /* "exit": EXITED by itself; STOPPED after a clean exit */
    PM_REASON_SIGNAL = 4,        /* "signal": EXITED on a signal procmesh did not send */
    PM_REASON_EXEC = 5,          /* "exec": EXITED because exec failed */
    PM_REASON_READY_TIMEOUT = 6, /* "ready-timeout": killed, not ready in time */
    PM_REASON_HEARTBEAT = 7,     /* "heartbeat": FENCED, hung */
    PM_REASON_CORRUPT_RING = 8,  /* "corrupt-ring": FENCED, scribbled its memory */
    PM_REASON_PROTOCOL = 9,      /* "protocol": FENCED, broke the frame protocol */
    PM_REASON_STOP = 10,         /* "stop": EXITED/STOPPED by a stop or terminate (an exit
                                    ended by procmesh's SIGKILL is "stop-kill") */
    PM_REASON_BACKOFF = 11,      /* "backoff": RESTART_SCHEDULED after a failure */
    PM_REASON_REPLACE = 12,      /* "replace": RESTART_SCHEDULED by pm_cluster_restart_slot */
    PM_REASON_BUDGET = 13,       /* "budget": RETIRED */
    PM_REASON_POLICY = 14,       /* "policy": STOPPED, the restart policy says never */
    PM_REASON_SPAWN_ABORTED = 15, /* "spawn-aborted": STOPPED, pm_cluster_spawn gave up */
    PM_REASON_NOTIFY = 16,       /* "notify": STOPPING=1 from a notify worker */
    PM_REASON_STALL = 17,        /* "stall": STALLED, the supervisor did not run */
    PM_REASON_SUSPEND = 18,      /* "suspend": STALLED, the machine was suspended */
    PM_REASON_VERSION = 19,      /* "version": FENCED, the worker's libprocmesh speaks another
                                    protocol version (pm_event.worker_version) */
    PM_REASON_NAME_TAKEN = 20,   /* "name-taken": SPAWN_FAILED, a name procmesh binds (the
                                    notify socket) was taken under every fresh random name;
                                    someone else's doing: retried after the longest backoff
                                    (1 s at least), never charged to the slot's budget */
    PM_REASON_NOT_DRAINING = 21, /* "not-draining": NOT_DRAINING; FENCED with
                                    pm_options_set_fence_not_draining */
    PM_REASON_STOP_KILL = 22,    /* "stop-kill": EXITED on procmesh's own SIGKILL, sent to end
                                    a stop: the worker had not ended within the stop timeout
                                    (or the timeout is 0, or pm_cluster_terminate had to kill
                                    at once) */
    PM_REASON_TIMEOUT = 23,      /* "timeout": EXITED, killed because one of main's requests
                                    timed out in its hands (pm_options_set_kill_on_timeout) */
    PM_REASON_INPUT = 24,        /* "input": RESTART_SCHEDULED at once, without backoff or
                                    budget: it died holding one of main's requests (the
                                    input's fault, pm_slot_info.input_faults) */
    PM_REASON__COUNT
};

/* The reason's string ("exit", "heartbeat" ...); "" for PM_REASON_NONE,
 * "unknown" for a code out of range. Static storage. */
PM_EXTERN const char *pm_reason_name(int code);

/*
 * A lifecycle event, passed to the on_event callback. Fields that do not
 * apply are 0 (exit_code is -1 when the worker was killed by a signal).
 * `reason` is the short static string pm_reason_name(reason_code).
 * procmesh allocates pm_event: fields are only ever added at the end.
 */
typedef struct pm_event {
    int type;
    unsigned slot;
    pid_t pid;
    uint64_t incarnation;
    int exit_code;
    int signal;
    int core_dumped;
    uint32_t delay_ms;
    unsigned restarts;
    const char *reason;
    int reason_code;               /* enum pm_reason */
    unsigned worker_version;       /* FENCED "version": the protocol version the worker's
                                      libprocmesh said HELLO with (ours: PM_PROTOCOL_VERSION) */
    const char *detail;            /* STOPPED "spawn-aborted": why the first start failed, in
                                      words ("worker exited with code 1 before it was ready",
                                      "worker was not ready within 10000 ms", "exec of the
                                      worker failed: ..."), valid during the callback; the
                                      text behind pm_cluster_spawn's errno. NULL otherwise. */
    unsigned oom_kills;            /* EXITED: OOM kills counted in the slot's own cgroup
                                      during this incarnation (pm_options_set_memory_max) */
    const char *peer_host;         /* PEER_UP, PEER_DOWN: the host name the link authenticated
                                      as; PEER_REFUSED: the name the peer's hello claimed when
                                      the handshake got that far, unauthenticated (NULL when
                                      it failed before, for a rate refusal and for failures
                                      held back and reported when their minute ends); valid
                                      during the callback; NULL otherwise */
    uint64_t peer_incarnation;     /* PEER_UP, PEER_DOWN: the remote supervisor's incarnation */
    const char *peer_address;      /* PEER_REFUSED: "ADDRESS" of a connection accepted (its
                                      source), "ADDRESS:PORT" ("[ADDRESS]:PORT" for IPv6) of one
                                      dialled, valid during the callback; NULL otherwise */
    uint64_t peer_failures;        /* PEER_REFUSED: the failures the event stands for (1, or
                                      more after a minute of failures held back) */
} pm_event;

PM_EXTERN pm_options *pm_options_new(void);
PM_EXTERN void pm_options_free(pm_options *o);

/* n > 0 workers, or 0 for auto: the CPUs this process may really use
 * (sched_getaffinity, and the cgroup v2 cpu.max quota rounded up, whichever
 * is smaller). At most PM_MAX_WORKERS. Default auto. */
PM_EXTERN int pm_options_set_workers(pm_options *o, int n);

/* Fork mode: fn runs in the forked child with its node already joined; it
 * calls pm_node_ready() once it can serve; its return value is the child's
 * exit code. The child shares the parent's memory image copy-on-write, so the
 * parent must be fork-safe (see README). */
PM_EXTERN int pm_options_set_bootstrap(pm_options *o, int (*fn)(pm_node *, void *), void *arg);

/* Exec mode: the child execs path with argv (NULL: { path, NULL }); the
 * program calls pm_node_join() and pm_node_ready(). Both are copied. */
PM_EXTERN int pm_options_set_exec(pm_options *o, const char *path, char *const argv[]);

/* Exec mode: file descriptors every worker inherits, in this order, as fds
 * 3, 4, ... (the systemd LISTEN_FDS convention). Copied; at most 64. */
PM_EXTERN int pm_options_set_pass_fds(pm_options *o, const int *fds, size_t n);

PM_EXTERN int pm_options_set_system_name(pm_options *o, const char *s); /* default "procmesh" */
PM_EXTERN int pm_options_set_hostname(pm_options *o, const char *s);    /* default "worker" */
/* Slot i gets port base + i; base + workers - 1 must fit in 65535. Default 1. */
PM_EXTERN int pm_options_set_base_port(pm_options *o, int port);
/* Bytes delivered to every worker at init (copied; up to PM_MAX_INIT_DATA). */
PM_EXTERN int pm_options_set_init_data(pm_options *o, const void *data, size_t len);
PM_EXTERN int pm_options_set_restart_policy(pm_options *o, int policy);
PM_EXTERN int pm_options_set_ready_timeout_ms(pm_options *o, int ms);       /* > 0, default 10000 */
PM_EXTERN int pm_options_set_restart_min_backoff_ms(pm_options *o, int ms); /* >= 0, default 200 */
PM_EXTERN int pm_options_set_restart_max_backoff_ms(pm_options *o, int ms); /* >= 0, default 10000 */
PM_EXTERN int pm_options_set_restart_random_factor(pm_options *o, double f); /* [0,1], default 0.2 */
/* -1 = unlimited, else 0..PM_MAX_RESTARTS_LIMIT restarts per window. Default 10. */
PM_EXTERN int pm_options_set_max_restarts(pm_options *o, int n);
/* Sliding window in ms; 0 = the count never resets. Default 60000. */
PM_EXTERN int pm_options_set_restart_window_ms(pm_options *o, int ms);
/* Grace between the stop request and SIGKILL, >= 0. Default 5000. */
PM_EXTERN int pm_options_set_stop_timeout_ms(pm_options *o, int ms);
/* Called exactly once when a slot is retired. Default: one line on stderr. */
PM_EXTERN int pm_options_set_on_permanently_down(
    pm_options *o,
    void (*cb)(pm_cluster *, unsigned slot, const pm_address *, unsigned restarts, void *),
    void *arg);
/* The supervisor's own diagnostics that are no event of a slot: a
 * --peers-dns name that does not resolve ("peers_dns_failed"), peer links
 * that cannot be set up ("peer_links_failed"), a slot's cgroup that did not
 * empty after cgroup.kill ("cgroup_not_empty"), a captured stream left
 * unread at the reap because its read did not return within a second (a
 * descendant of the worker holds its pipe), or not read at all (descendants
 * of the slot's earlier workers hold theirs: "output_drain_abandoned"). cb
 * gets a short stable topic (those in quotes) and the message in words,
 * valid during the call;
 * it may be called before pm_cluster_spawn returns (c is then NULL).
 * Default (cb NULL): "procmesh: MESSAGE" on stderr. */
PM_EXTERN int pm_options_set_on_diagnostic(pm_options *o,
                                           void (*cb)(pm_cluster *c, const char *topic,
                                                      const char *message, void *arg),
                                           void *arg);
/* Called for every lifecycle event, from pm_cluster_spawn/run/terminate. */
PM_EXTERN int pm_options_set_on_event(pm_options *o,
                                      void (*cb)(pm_cluster *, const pm_event *, void *),
                                      void *arg);
/* 1: the cluster blocks SIGCHLD, SIGTERM, SIGINT and SIGHUP in the
 * calling thread and reads them from a signalfd; SIGTERM, SIGINT and SIGHUP
 * make pm_cluster_run, pm_cluster_call and pm_cluster_map return -EINTR
 * (pm_cluster_last_signal says which); SIGTERM/SIGINT during
 * pm_cluster_spawn make it fail with -EINTR, a SIGHUP then is dropped (the
 * workers are being started anyway). The procmesh daemon turns it on.
 * 0 (default): a library takes none of its application's signals. They
 * keep their dispositions (SIGINT ends the program by default, as the
 * application expects), pm_cluster_run/call/map never return -EINTR and
 * pm_cluster_last_signal stays 0; reap_orphans cannot be on (it needs
 * SIGCHLD): pm_options_set_reap_orphans takes the value, but
 * pm_options_validate and pm_cluster_spawn refuse the combination with
 * -EINVAL, naming both options. Worker exits are seen through pidfds
 * (Linux 5.3 for pidfd_open, 5.4 for waitid(P_PIDFD)); on an older kernel,
 * without a pidfd, the supervisor looks for exited workers on a 50 ms timer
 * while it runs, so an exit can be seen up to 50 ms late. */
PM_EXTERN int pm_options_set_handle_signals(pm_options *o, int on);

/* While frames are flowing, the hub polls the rings for up to us
 * microseconds before it sleeps, so workers can hand it frames without a
 * wake-up system call: lower latency and fewer system calls for a busy mesh,
 * at the cost of that much CPU after each burst. 0..1000000, default 0. The
 * limit is a cap: the hub spins for what recent waits say pays off (twice a
 * wait that a spin caught) and sleeps at once while spins do not pay off
 * (no free CPU for it, or traffic too sparse). Workers' waits do the same
 * within their own few microseconds. Where CPUs are few the spinning is
 * shared out: the hub never spins on one CPU, and with fewer than three a
 * worker parks at once while the hub is awake (the hub spins for it); a
 * spin that loses its CPU to another process stops and parks. */
PM_EXTERN int pm_options_set_hub_spin_us(pm_options *o, int us);

/* Two local workers that exchange PM_DIRECT_LANE_AFTER frames get a direct
 * lane: a pair of rings in shared memory only those two map, on which
 * their messages, requests and the replies to those requests then travel
 * without the supervisor (two wake-ups a round trip instead of four).
 * Everything else keeps taking the supervisor: messages to or from main,
 * broadcasts, notices, messages larger than PM_DIRECT_LANE_MAX_PAYLOAD.
 * The receiving library stamps the sender from what the supervisor told
 * it, never from the lane, and copies each frame out before checking it.
 * A lane ends with either worker's incarnation: what the ended worker
 * wrote on it before is still delivered, nothing after, and a request
 * waiting on it fails -EHOSTDOWN. Lanes need cgroup containment (a revoked lane must have no writer left:
 * pm_cluster_containment), and an exec'd worker's libprocmesh of protocol
 * version 3 or later; otherwise, with 0 here, or with
 * pm_options_set_fence_not_draining (which needs every frame through the
 * supervisor to see who does not drain), every frame takes the
 * supervisor. The supervisor's drain timeout does not see a lane: a
 * worker that leaves its lane unread holds up its peer's sends on it
 * (pm_node_try_send: -EAGAIN) and is not reported. Each worker holds at most PM_DIRECT_LANES_MAX lanes of
 * PM_DIRECT_LANE_BYTES each, paid for by the worker's own cgroup for the
 * pages it writes. 0 or 1, default 1. */
PM_EXTERN int pm_options_set_direct_lanes(pm_options *o, int on);
#define PM_DIRECT_LANE_AFTER 64
#define PM_DIRECT_LANE_MAX_PAYLOAD 16384
#define PM_DIRECT_LANES_MAX 8
#define PM_DIRECT_LANE_BYTES (140 * 1024)

/* Fork mode: 1 keeps, per slot, the next incarnation forked ahead and
 * waiting (a warm standby), so that a crash is replaced without a fork, a
 * cgroup write by the child or the new process's page faults on the way
 * to ready. The standby is forked once the incarnation it would replace is
 * ready, from the supervisor as it is at that moment (not as it is at the
 * crash: what the application changed in its memory in between is not
 * seen by the replacement), and it is set up (its ring memory, fresh as
 * always; its process group, rlimits, user and seccomp filter) but runs
 * none of the bootstrap (only what any fork child runs: pthread_atfork
 * child handlers) and can reach no one until the crash makes it the slot's
 * incarnation; only then is it moved into the slot's cgroup and does the
 * bootstrap run. It costs one more process per slot (copy-on-write
 * memory), counted until then in the supervisor's cgroup and in the
 * workers' user's process limit, and dies with the supervisor, the slot's
 * stop or retirement and pm_cluster_terminate, all of which reap it. A standby that dies while it
 * waits (killed from outside) is reaped and the next restart forks as
 * usual. Not with exec mode or captured output (pm_cluster_spawn:
 * -EINVAL). Default 0. */
PM_EXTERN int pm_options_set_warm_standby(pm_options *o, int on);

/* A worker that neither made progress (any procmesh call, pm_node_beat) nor
 * waited in pm_node_recv for longer than ms is hung: fenced ("heartbeat"),
 * killed and restarted under the budget. 0 = off. Default 10000. */
PM_EXTERN int pm_options_set_heartbeat_timeout_ms(pm_options *o, int ms);

/* A worker's down ring that stays full while frames wait for it (the hub
 * queues them, charged to their senders) for longer than ms, with no frame
 * taken, is reported: PM_EVENT_NOT_DRAINING, counted in
 * pm_cluster_stats.not_draining. Once per stall. 0 = off. Default 10000. */
PM_EXTERN int pm_options_set_drain_timeout_ms(pm_options *o, int ms);

/* 1: such a worker is also fenced (reason "not-draining"), killed and
 * restarted under the budget; the frames waiting for it are dropped and its
 * senders read again. Default 0 (reported only). */
PM_EXTERN int pm_options_set_fence_not_draining(pm_options *o, int on);

/*
 * The pool: how main's requests to any worker (pm_cluster_request and
 * pm_cluster_call with to == NULL, pm_cluster_map) share the workers.
 *
 * By default a worker holds at most one of them at a time; the others wait
 * in main, oldest first, each under its own deadline. So when a worker
 * crashes, is fenced or is killed, exactly one request ends with
 * -EHOSTDOWN: the one that was in its hands, and its outcome says how the
 * worker ended (pm_cluster_request_outcome). n > 1 lets a worker hold up
 * to n (1..1024): more throughput for short requests (no wait in main
 * between two), but a crash then ends every request the worker held, the
 * innocent ones with the guilty, and nothing tells them apart. Default 1.
 */
PM_EXTERN int pm_options_set_requests_per_worker(pm_options *o, int n);
/* How many any-worker requests may wait in main for a worker: 1..1048576,
 * default 4096. Past it pm_cluster_request returns -EAGAIN at once. */
PM_EXTERN int pm_options_set_request_queue_max(pm_options *o, int n);
/* A worker that holds one of main's requests when its deadline passes gets
 * no further any-worker request until it answers (the late answer is
 * dropped and counted) or ends. 1: it is killed at once instead (SIGKILL,
 * its EXITED event with reason "timeout"), and restarted as for an input
 * that crashed it (no backoff, not charged to the budget): a hung parse
 * never blocks a worker for long. The request's outcome says it was
 * killed. Default 0. */
PM_EXTERN int pm_options_set_kill_on_timeout(pm_options *o, int on);

/* Bytes of each of a worker's two rings: a power of two from 256 KiB to
 * 1 GiB. Default 1 MiB. */
PM_EXTERN int pm_options_set_ring_size(pm_options *o, size_t bytes);

/* The largest message the cluster carries, in bytes: from PM_MAX_PAYLOAD
 * (64 KiB) to 4 GiB - 1; default 64 MiB; -EINVAL outside. A message above
 * PM_MAX_PAYLOAD travels as a sealed memfd over the worker's socket instead
 * of through its ring (doc/design.md, Large messages); the send, request,
 * reply and call functions of main and of workers take it transparently and
 * return -EMSGSIZE above this limit. A worker that sends a larger one, or
 * an unsealed or foreign fd, is fenced (reason protocol). A large message
 * to another host (a worker's or main's) crosses its peer link in fragments
 * and is reassembled there within that host's limit (an -EMSGSIZE answer
 * above it); main's returns -EAGAIN while its previous large message to
 * that host is still crossing (doc/design.md, Peer links). A supervisor
 * under an RLIMIT_FSIZE below a message (systemd's LimitFSIZE=) refuses
 * main's with -EFBIG and a peer's with -ENOBUFS to its sender, rather
 * than be ended by SIGXFSZ. */
PM_EXTERN int pm_options_set_max_message(pm_options *o, size_t bytes);

enum pm_ready_mode {
    PM_READY_MESH = 1, /* the worker links libprocmesh: pm_node_join + pm_node_ready (default) */
    PM_READY_EXEC = 2, /* exec mode: ready as soon as exec succeeded; no heartbeat */
    PM_READY_NOTIFY = 3 /* exec mode: the systemd notify protocol on the worker's own
                           NOTIFY_SOCKET: READY=1, WATCHDOG=1 (heartbeat), STOPPING=1;
                           only datagrams from the worker's own pid count */
};

/* How a worker becomes ready. PM_READY_EXEC needs exec mode; such workers do
 * not get procmesh's memory or fds (they do not link libprocmesh) and their
 * stop request is SIGTERM alone. */
PM_EXTERN int pm_options_set_ready_mode(pm_options *o, int mode);

/* Exec mode: sockets every worker inherits as fds 3, 4, ... with the systemd
 * socket-activation variables LISTEN_FDS, LISTEN_FDNAMES (names may be NULL:
 * "unknown") and LISTEN_PID set to the worker's own pid. Copied; replaces
 * pm_options_set_pass_fds. Names: 1..63 characters, no ':'. */
PM_EXTERN int pm_options_set_listen_fds(pm_options *o, const int *fds, const char *const *names,
                                        size_t n);

/* 1: reap every child that is not a worker as well (for a supervisor that
 * is PID 1 or a child subreaper, whose orphans are re-parented to it), and
 * count them in pm_cluster_stats.orphans_reaped. Needs handle_signals:
 * without it, pm_options_validate and pm_cluster_spawn fail with -EINVAL.
 * Off by default: a library must not steal its application's children. */
PM_EXTERN int pm_options_set_reap_orphans(pm_options *o, int on);

/*
 * Containment: a slot owns its whole process tree. When an incarnation ends
 * (exit, crash, fence, stop, drain) every process it started ends with it,
 * before the replacement starts. Where procmesh can create cgroups (v2, as
 * root or in a delegated subtree, e.g. systemd Delegate=yes) each slot runs
 * in its own cgroup, <own cgroup>/procmesh.<pid>/slot<N>, killed
 * (cgroup.kill) and waited until empty at the end of each incarnation; a
 * worker that can write to the delegated tree could move itself out, so
 * the guarantee is complete only when workers run under another uid or in
 * a cgroup namespace. Elsewhere each incarnation is its own process group,
 * killed when the worker is reaped: a setsid() descendant leaves the group
 * and escapes (a supervisor that reaps orphans kills the ones re-parented
 * to it in pm_cluster_terminate). pm_cluster_containment says which applies.
 *
 * Limits per slot need cgroups (v2 controllers, or on hybrid hosts the v1
 * memory/pids/cpu hierarchies); a limit that cannot be applied on this host
 * makes pm_cluster_spawn fail with -EOPNOTSUPP (the reason in the STOPPED
 * "spawn-aborted" event's detail), never silently ignored. Each setter
 * refuses bad values with -EINVAL; 0 removes the limit.
 *   memory_max: bytes, >= 1 MiB (memory.max, or memory.limit_in_bytes);
 *     an OOM kill in the slot is reported as pm_event.oom_kills.
 *   pids_max: processes and threads of the slot, 1..4194304 (pids.max).
 *   cpu_max: quota_us of CPU time per period_us (cpu.max "QUOTA PERIOD";
 *     period 1000..1000000, quota >= 1000; 2 CPUs = 200000, 100000).
 *   rlimit: any RLIMIT_* resource (RLIMIT_AS, RLIMIT_NOFILE, RLIMIT_CORE ...),
 *     soft <= hard, PM_RLIM_INFINITY for none; set by each worker before
 *     it runs (exec mode: a refusal is reported as the exec's errno).
 */
#define PM_RLIM_INFINITY UINT64_MAX
enum pm_containment { PM_CONTAIN_PROCESS_GROUP = 1, PM_CONTAIN_CGROUP = 2 };
PM_EXTERN int pm_options_set_memory_max(pm_options *o, uint64_t bytes);
PM_EXTERN int pm_options_set_pids_max(pm_options *o, int n);
PM_EXTERN int pm_options_set_cpu_max(pm_options *o, uint64_t quota_us, uint64_t period_us);
PM_EXTERN int pm_options_set_rlimit(pm_options *o, int resource, uint64_t soft, uint64_t hard);
/* Workers' core dumps. Without a core directory (default) every worker gets
 * RLIMIT_CORE soft 0 (the hard limit stays the supervisor's): a crash loop
 * does not fill the disk. With dir (an existing directory, kept as an
 * absolute path; -ENOENT, -ENOTDIR, -EINVAL for ""; NULL unsets) workers
 * get RLIMIT_CORE unlimited (the supervisor's hard limit when that is lower
 * and it is not root) and fork-mode workers are made dumpable again after
 * any credential change (exec mode: exec does it). pm_options_set_rlimit
 * for RLIMIT_CORE wins over both. Where a core goes is the kernel's
 * kernel.core_pattern, host-wide: procmesh changes neither it nor the
 * workers' working directory, so it must name dir (e.g.
 * dir/core.%e.%p.%t); a relative pattern writes into each worker's working
 * directory, a |pipe pattern hands the core to that program. The procmesh
 * daemon checks the pattern at start and warns. */
PM_EXTERN int pm_options_set_core_dir(pm_options *o, const char *dir);
/* 0 (default): cgroups where procmesh can create them, else process groups;
 * PM_CONTAIN_CGROUP: cgroups or pm_cluster_spawn fails (-EOPNOTSUPP);
 * PM_CONTAIN_PROCESS_GROUP: never create a cgroup (e.g. as root under a
 * service manager that did not delegate procmesh's cgroup: systemd without
 * Delegate=yes). */
PM_EXTERN int pm_options_set_containment(pm_options *o, int mode);
/* PM_CONTAIN_CGROUP or PM_CONTAIN_PROCESS_GROUP, and the detail in words
 * (where the cgroups are, which limits are applied how, or why there are
 * none) in detail when not NULL; -EINVAL/-EPERM as pm_cluster_* calls. */
PM_EXTERN int pm_cluster_containment(const pm_cluster *c, char *detail, size_t size);
/* ------------------------------------------------------------------------
 * Supervisor: the workers' standard output and standard error
 * (doc/design.md, "Worker output").
 * ---------------------------------------------------------------------- */

enum pm_output_mode {
    PM_OUTPUT_INHERIT = 1, /* workers write to the supervisor's own fds 1 and 2 (default) */
    PM_OUTPUT_CAPTURE = 2  /* a pipe per stream and incarnation, read on the loop, split
                              into lines and delivered tagged (pm_options_set_on_output) */
};

enum pm_output_stream {
    PM_OUTPUT_NONE = 0,    /* the end-of-incarnation report of suppressed lines */
    PM_OUTPUT_STDOUT = 1,
    PM_OUTPUT_STDERR = 2
};

/* Longest line delivered, in bytes; a longer one comes in pieces. */
#define PM_OUTPUT_LINE_MAX 4096
/* The rate limit per slot (both streams together): a token bucket of
 * PM_OUTPUT_BURST lines refilled at PM_OUTPUT_PER_S lines a second. */
#define PM_OUTPUT_BURST 1000
#define PM_OUTPUT_PER_S 500

/*
 * One line a worker wrote, without its '\n'. text holds len bytes and a
 * terminating NUL (the bytes themselves may hold NULs: len says), valid
 * during the callback. truncated is 1 when the line was longer than
 * PM_OUTPUT_LINE_MAX and goes on in the next piece; the piece that ends it
 * has 0. suppressed counts the slot's lines dropped by the rate limit
 * since the last one delivered. Each stream keeps the last lines the limit
 * dropped (up to 16 lines and 4 KiB) and delivers them past it when the
 * stream ends (after the reap, before the exit is reported), so a worker's
 * last words are never lost to a burst it wrote before them. A record with
 * stream PM_OUTPUT_NONE and len 0 reports, at the incarnation's end, lines
 * suppressed after the last one delivered. procmesh allocates
 * pm_output_line: fields are only ever added at the end. In fork mode the
 * supervisor keeps captured bytes only in memory other workers inherit
 * zeroed; a copy the callback makes is the application's to keep from its
 * fork-mode workers.
 */
typedef struct pm_output_line {
    unsigned slot;
    pid_t pid;
    uint64_t incarnation;
    int stream;            /* enum pm_output_stream */
    const char *text;
    size_t len;
    int truncated;
    uint64_t suppressed;
} pm_output_line;

/* PM_OUTPUT_INHERIT (default) or PM_OUTPUT_CAPTURE. Captured, each
 * incarnation's stdout and stderr are pipes the supervisor reads on its loop
 * (never blocking, a bounded number of bytes per turn, so a worker that
 * floods them slows down itself, not the loop); after the worker is reaped
 * its pipes are read to their end before its exit is reported, so what it
 * wrote just before a crash is delivered. A worker's C library buffers
 * stdout written to a pipe: fork-mode workers get it line-buffered, exec-mode
 * programs must flush (or write stderr) for their last words to count. */
PM_EXTERN int pm_options_set_output(pm_options *o, int mode);

/* Captured lines go to cb, from pm_cluster_run (or spawn, call, terminate).
 * Default (cb NULL): one write to the supervisor's stderr per line,
 * "procmesh: slot=S pid=P incarnation=I stream=stdout|stderr
 * [truncated=1] [suppressed=N]: TEXT". */
PM_EXTERN int pm_options_set_on_output(pm_options *o,
                                       void (*cb)(pm_cluster *, const pm_output_line *, void *),
                                       void *arg);

/* ------------------------------------------------------------------------
 * Supervisor: what a worker may do to its supervisor and its siblings
 * (doc/privileges.md says what each level protects against).
 * ---------------------------------------------------------------------- */

/* Workers drop to uid/gid before exec (or the bootstrap): supplementary
 * groups cleared, then setgid, then setuid, each checked, and the
 * parent-death signal armed again (a credential change clears it). A worker
 * under another uid cannot signal, ptrace or read the memory of its
 * supervisor. Needs a supervisor running as root (euid 0):
 * pm_options_validate and pm_cluster_spawn refuse it otherwise (-EPERM).
 * uid and gid are neither -1 nor 0; (uid_t)-1, (gid_t)-1 unsets. Default:
 * unset, workers run as the supervisor does. */
PM_EXTERN int pm_options_set_user(pm_options *o, uid_t uid, gid_t gid);

/* Slot i runs as uid first + i (0 <= i < count), so workers cannot signal
 * or ptrace each other either; its gid is the one of pm_options_set_user
 * when set, else the same number as its uid. count must cover every slot;
 * the range must not hold 0 or (uid_t)-1. Needs root like
 * pm_options_set_user. count 0 unsets (default). */
PM_EXTERN int pm_options_set_uid_range(pm_options *o, uid_t first, unsigned count);

/* 1 (default): workers run with PR_SET_NO_NEW_PRIVS: no exec of theirs
 * (set-user-ID programs, file capabilities) can gain privileges the worker
 * does not have. 0 leaves it off. */
PM_EXTERN int pm_options_set_no_new_privs(pm_options *o, int on);

/* 1: the supervisor marks itself non-dumpable (PR_SET_DUMPABLE 0) before
 * its first worker starts, so a worker under the same uid cannot ptrace it
 * or read its memory through /proc/PID/mem; a side effect is that the
 * process writes no core dump afterwards. Default 0: in the library the
 * supervisor is the application itself, and its core dumps are the user's.
 * (The procmesh daemon always does it.) Fork-mode workers get their own
 * dumpability back. */
PM_EXTERN int pm_options_set_protect_supervisor(pm_options *o, int on);

enum pm_seccomp_level {
    PM_SECCOMP_OFF = 0,    /* no filter (default) */
    PM_SECCOMP_BASIC = 1,  /* deny what reaches outside: ptrace, process_vm_*, pidfd_open,
                              pidfd_send_signal, tkill, mount, keyctl, bpf, perf_event_open,
                              ... ; and every call that sends a signal or changes an rlimit,
                              a scheduling policy, an affinity or an I/O priority acts on the
                              worker itself only (kill, tgkill, rt_sigqueueinfo, F_SETOWN,
                              prlimit64, sched_set*, setpriority, ioprio_set: 0 or its own
                              pid; the group and user forms refused), plus Landlock signal
                              scoping where the kernel has it (Linux 6.12+); everything else
                              runs. The cost: a basic worker cannot signal, renice or limit
                              its own children or its other threads by tid, nor use
                              F_SETOWN_EX; its children inherit the filter with the worker's
                              pid in it, so they may signal the worker but not themselves by
                              pid (raise() fails in them; setrlimit, nice, affinity of 0
                              work). A worker under the supervisor's uid can still write
                              what that uid owns, the supervisor's cgroups included
                              (doc/privileges.md): only pm_options_set_user or
                              pm_options_set_uid_range close that */
    PM_SECCOMP_STRICT = 2  /* fork mode only: exactly the calls libprocmesh's worker side
                              makes (ring I/O, futex, poll, clock_gettime, getppid, memory,
                              exit, the crash handler's re-raise to itself, and large
                              messages: memfd_create, F_ADD_SEALS/F_GET_SEALS, sendmsg,
                              recvmsg); for compute workers that only talk through procmesh.
                              A strict worker sends and receives large messages like any
                              other, from main, a sibling or another host */
};

enum pm_seccomp_action {
    PM_SECCOMP_ERRNO = 1,  /* a denied call fails with EPERM (default) */
    PM_SECCOMP_KILL = 2    /* a denied call kills the worker (SIGSYS) */
};

/* A system-call filter every worker loads last, just before exec (or the
 * bootstrap), with libseccomp: -ENOTSUP for any level but PM_SECCOMP_OFF
 * when procmesh was built without it. Loading a filter needs no_new_privs,
 * or a root supervisor with pm_options_set_user unset. */
PM_EXTERN int pm_options_set_seccomp(pm_options *o, int level);

/* What a denied call does: PM_SECCOMP_ERRNO (default) or PM_SECCOMP_KILL. */
PM_EXTERN int pm_options_set_seccomp_action(pm_options *o, int action);
/* ---- Peer links (procmesh hosts linked over TCP, doc/protocol.md) ----
 * pm_cluster_spawn listens and dials (non-blocking, on the supervisor's
 * loop); a link that comes up is reported as PM_EVENT_PEER_UP, and from then
 * on remote addresses ("system@host:port") reach that host's workers with
 * the same API; a link that goes down (PM_EVENT_PEER_DOWN) answers that
 * host's requests in flight -EHOSTUNREACH at once; a link silent for the
 * peer timeout is closed (heartbeats keep an idle one up) and a peer of
 * pm_options_add_peer is redialled with backoff. The frames sent over a
 * link during one loop turn share encrypted records, sealed at the turn's
 * end at the latest (no timer delays a lone message). A mesh broadcast
 * (pm_cluster_broadcast_mesh) reaches every host's workers; messages above
 * PM_MAX_PAYLOAD cross as fragments; a full link holds its senders back.
 * A connection that ends before its link came up is reported as
 * PM_EVENT_PEER_REFUSED, rate-limited. */

/* Where this supervisor accepts peers: "HOST:PORT" (a name, an IPv4
 * address or "[IPv6]"; port 1..65535). NULL: none (default). */
PM_EXTERN int pm_options_set_peer_listen(pm_options *o, const char *host_port);
/* A peer to connect to, "HOST:PORT"; repeatable, at most 64 distinct
 * (-EEXIST for one given twice, -ENOSPC past 64). */
PM_EXTERN int pm_options_add_peer(pm_options *o, const char *host_port);
/* Peers found by resolving "NAME:PORT": every A and AAAA record of NAME
 * (a Kubernetes headless Service) is dialled. Resolved off the supervisor's
 * loop (a short-lived thread per lookup, signals blocked in it), again every
 * 30 s, and with backoff from 1 s to 30 s (+-25 % jitter) while it fails or
 * answers nothing (each failure counted and written to stderr); a name that
 * does not resolve yet never stops pm_cluster_spawn. Addresses that leave
 * the answer are no longer dialled; this supervisor's own address (found by
 * the handshake) is dialled once and then skipped. NULL: none. */
PM_EXTERN int pm_options_set_peers_dns(pm_options *o, const char *name_port);
/* The mesh's 32-byte pre-shared secret, copied into memory a forked worker
 * never sees. At most two (current and next, for rotation: a responder
 * accepts either, an initiator uses the first): -ENOSPC for a third,
 * -EEXIST for the same one twice, -EINVAL for all zeros. Peer mode needs one
 * unless pm_options_set_insecure_no_secret. */
PM_EXTERN int pm_options_add_secret(pm_options *o, const unsigned char key[32]);
/* Key rotation in a running cluster: replaces its secrets with n (1 or 2)
 * secrets of 32 bytes, consecutive at keys (the current first), copied into
 * memory a forked worker never sees. Handshakes from now on use them; one
 * under way finishes with the keys it began with, and links that are up stay
 * up. The library reads no file: the caller reads its key files (the
 * daemon does on SIGHUP) and passes the bytes. The static key, the pins and
 * the mode (with or without a secret) stay those of the start. 0;
 * -ENOTCONN not in peer mode; -EINVAL NULL keys, n 0 or above 2, an
 * all-zero secret, or a cluster without a secret; -EEXIST the same secret
 * twice; -ENOMEM. */
PM_EXTERN int pm_cluster_set_secrets(pm_cluster *c, const unsigned char *keys, unsigned n);
/* 1: peer links without a pre-shared secret (Noise_XX: still encrypted, but
 * anyone who reaches the port may join unless peer keys are pinned).
 * Default 0. Not together with a secret. */
PM_EXTERN int pm_options_set_insecure_no_secret(pm_options *o, int on);
/* This host's static key file (created 0600 when missing). NULL (default):
 * a new key pair at every start. Copied. */
PM_EXTERN int pm_options_set_node_key_file(pm_options *o, const char *path);
/* Pinned peer keys: lines "HOST BASE64-PUBLIC-KEY"; a peer whose static key
 * is not pinned for the host it claims is refused. NULL (default): no
 * pinning (the secret admits). Copied. */
PM_EXTERN int pm_options_set_peer_keys_file(pm_options *o, const char *path);
/* A handshake must end, and a link hear from its peer, within ms (> 0).
 * Default 5000. */
PM_EXTERN int pm_options_set_peer_timeout_ms(pm_options *o, int ms);

/* 0 when the options can spawn a cluster; else a negative errno and, when
 * why is not NULL, the first problem in words naming the option and value. */
PM_EXTERN int pm_options_validate(const pm_options *o, char *why, size_t size);

/* ------------------------------------------------------------------------
 * Supervisor: the cluster
 * ---------------------------------------------------------------------- */

enum pm_slot_state {
    PM_SLOT_STARTING = 1, /* a process runs its handshake */
    PM_SLOT_READY = 2,    /* a process is ready */
    PM_SLOT_BACKOFF = 3,  /* no process; a restart is scheduled */
    PM_SLOT_RETIRED = 4,  /* restart budget used up; never restarts */
    PM_SLOT_STOPPED = 5,  /* stopped for good without failing */
    PM_SLOT_STOPPING = 6  /* asked to stop (or killed); waiting until it is reaped */
};

/* The state's name as procmesh prints it ("starting", "ready" ...); "none"
 * for anything else. A static string. */
PM_EXTERN const char *pm_slot_state_name(int state);

/*
 * The last crash of a slot: what a worker that links libprocmesh (fork mode,
 * or exec mode after pm_node_join) recorded in its fatal-signal handler
 * (SIGSEGV, SIGBUS, SIGFPE, SIGILL, SIGABRT, SIGTRAP, SIGSYS), copied out
 * and validated by the supervisor after the reap. Fixed size.
 *
 * frames[0] is the faulting function (its pc), the next ones are return
 * addresses. A call through a NULL or stale function pointer faults at a pc
 * that is no code (0, or an address in no module): frames[0] is that pc,
 * frames[1] the return address into the function that made the call (on
 * x86_64 and aarch64, read from the signal context), then its callers. A frame in a module known at join has module >= 0 and offset =
 * address - the module's load bias, so `addr2line -f -e modules[module]
 * 0xOFFSET` names its function and line (for a return address, OFFSET - 1
 * names the call). Modules loaded after join (dlopen) are not known: their
 * frames have module -1 and only the absolute address.
 */
#define PM_CRASH_FRAMES 32
#define PM_CRASH_MODULES 8
#define PM_CRASH_PATH_MAX 192

enum pm_crash_state {
    PM_CRASH_NONE = 0,       /* no crash by a recorded signal yet */
    PM_CRASH_RECORDED = 1,   /* a valid record: every field is filled */
    PM_CRASH_UNRECORDED = 2, /* died of a recorded signal but left no record (it does not
                                link libprocmesh or had not joined, its application owns
                                the signal, or it died before the record was written) */
    PM_CRASH_INVALID = 3     /* a record that failed validation (half-written, scribbled,
                                not the signal it died of): nothing of it is shown */
};

typedef struct pm_crash_frame {
    uint64_t addr;   /* absolute address in the worker */
    int module;      /* index into modules, or -1 */
    uint64_t offset; /* addr - the module's load bias (module >= 0) */
} pm_crash_frame;

typedef struct pm_crash_report {
    int state;               /* enum pm_crash_state; the rest is 0 for NONE */
    uint64_t incarnation;    /* the incarnation that crashed */
    int signal;              /* from the exit status (trusted) */
    int core_dumped;         /* from the exit status (trusted) */
    /* RECORDED only: */
    int code;                /* si_code */
    char code_name[16];      /* "SEGV_MAPERR", "BUS_ADRERR", "FPE_INTDIV", "SI_TKILL" ...,
                                or the number in decimal */
    uint64_t fault_addr;     /* si_addr (SIGSEGV/BUS/FPE/ILL/TRAP from the kernel), else 0 */
    uint64_t pc;             /* program counter (0 where unsupported: not x86_64/aarch64) */
    int pc_module;           /* index into modules, or -1 */
    uint64_t pc_offset;
    unsigned nframes;
    pm_crash_frame frames[PM_CRASH_FRAMES];
    unsigned nmodules;
    char modules[PM_CRASH_MODULES][PM_CRASH_PATH_MAX]; /* paths, printable ASCII */
} pm_crash_report;

typedef struct pm_slot_info {
    int state;
    pid_t pid; /* 0 when no process */
    uint64_t incarnation;
    unsigned restarts_in_window;
    unsigned restarts_total;
    int last_exit_code; /* -1 when the last exit was by a signal, or none yet */
    int last_signal;
    uint32_t heartbeat_age_ms;     /* since the worker last made progress, at least 1 where
                                      heartbeats exist (a ready mesh worker, a notify worker
                                      after its first WATCHDOG=1); 0: none */
    const char *last_fence_reason; /* static string, or NULL */
    unsigned fences;               /* times this slot was fenced */
    int kill_pending;              /* SIGKILL sent, process not reaped yet */
    int waiting;                   /* the worker says it waits in pm_node_recv */
    pm_crash_report last_crash;    /* the slot's last crash by a recorded signal (kept
                                      across restarts until the next one); added at the
                                      end, see NEWS */
    unsigned input_faults;         /* incarnations that died holding one of main's
                                      requests (crash, fence, exit or kill on timeout):
                                      restarted at once, outside the restart budget */
} pm_slot_info;

/* Mesh-wide figures. A struct tag, not a typedef: in C a typedef named
 * pm_cluster_stats would collide with the function of the same name. */
struct pm_cluster_stats {
    uint64_t stalls;            /* times the supervisor found it had not been running */
    uint64_t longest_stall_ms;
    uint64_t frames_relayed;
    uint64_t bytes_relayed;
    uint64_t malformed_dropped;
    uint64_t undeliverable;     /* notices sent */
    uint64_t late_replies;      /* replies nobody waited for any more, dropped */
    uint64_t fences_heartbeat;
    uint64_t fences_corrupt_ring;
    uint64_t fences_protocol;
    uint64_t orphans_reaped;    /* children that were not workers (reap_orphans) */
    uint64_t ring_full_waits;   /* times a sender was held back by a full destination */
    uint64_t notify_dropped;    /* notify datagrams not from the slot's worker, dropped */
    uint64_t notices_dropped;   /* undeliverable notices that found no room or no
                                   live requester, dropped (added in interface 1) */
    uint64_t replies_dropped;   /* replies to a requester that did not read its ring
                                   (its queued answers at their bound), dropped */
    uint64_t not_draining;      /* times a worker's full ring held frames past the
                                   drain timeout (PM_EVENT_NOT_DRAINING) */
    uint64_t input_faults;      /* workers that died holding one of main's requests
                                   (pm_slot_info.input_faults, all slots) */
};

/*
 * Forks every slot, runs the handshake and returns when all are ready. On
 * any failure (a bootstrap that fails, an exec of a missing program, a ready
 * timeout) it kills every worker it started, waits until each one is reaped,
 * frees everything and returns the error (-ENOENT and other exec errnos as
 * such, -ETIMEDOUT for a ready timeout, -ECHILD for a worker that ended
 * during its handshake, -EINVAL for options that do not validate). The
 * reason in words (which exit code or signal, say) is the `detail` of the
 * STOPPED "spawn-aborted" event on_event receives before it returns.
 */
PM_EXTERN int pm_cluster_spawn(const pm_options *o, pm_cluster **out);

/* Slots with a live or restarting worker (not retired, not stopped). */
PM_EXTERN size_t pm_cluster_size(const pm_cluster *c);

/* Writes the addresses of those slots (up to cap) and returns how many
 * there are (which may exceed cap). */
PM_EXTERN int pm_cluster_addresses(const pm_cluster *c, pm_address *out, size_t cap);

/* Dispatches events for up to timeout_ms (0: what is ready now, -1: until
 * pm_cluster_stop()). Returns 0, -EINTR when SIGTERM/SIGINT arrived (see
 * pm_options_set_handle_signals), or another negative errno. */
PM_EXTERN int pm_cluster_run(pm_cluster *c, int timeout_ms);

/* Makes pm_cluster_run return soon. Safe from callbacks, other threads and
 * signal handlers. */
PM_EXTERN void pm_cluster_stop(pm_cluster *c);

/* A file descriptor that is readable whenever pm_cluster_run has work, to
 * embed procmesh in another event loop. */
PM_EXTERN int pm_cluster_fd(const pm_cluster *c);

/* The number of slots the cluster was spawned with. */
PM_EXTERN unsigned pm_cluster_slots(const pm_cluster *c);

PM_EXTERN int pm_cluster_slot_info(const pm_cluster *c, unsigned slot, pm_slot_info *info);

PM_EXTERN int pm_cluster_stats(const pm_cluster *c, struct pm_cluster_stats *out);

/* One peer link's connection (peer mode): pm_cluster_peers. Callers
 * allocate it: it grows at its end, and each growth is an incompatible
 * interface before 1.0 (NEWS, "Compatibility policy"). */
typedef struct pm_peer_info {
    char host[PM_NAME_MAX];  /* the host it authenticated as; "" before its hello */
    const char *state;       /* static string: "connecting" (our dial in progress),
                                "handshake", "up" */
    int initiator;           /* 1: this supervisor dialled it */
    uint64_t incarnation;    /* the peer supervisor's (random per start), 0 before */
    int64_t rtt_us;          /* round trip of the last heartbeat echo, -1 none yet */
    uint64_t age_ms;         /* since the TCP connection */
    uint64_t frames_in, frames_out; /* frames carried each way */
    uint64_t bytes_in, bytes_out;   /* their bytes (frame headers included) */
    uint64_t records_in, records_out; /* the FRAMES records that carried them: a record
                                         holds one frame or more (frames / records is
                                         the batching); heartbeats and rekeys not counted */
    uint64_t frames_forged;    /* frames from it claiming another host: dropped */
    uint64_t frames_malformed; /* frames from it that failed to decode or route, and
                                  large messages it abandoned mid-way: dropped */
} pm_peer_info;

/* The peer connections (linked and handshaking), up to cap into out;
 * returns how many there are (which may exceed cap). 0 outside peer mode. */
PM_EXTERN int pm_cluster_peers(const pm_cluster *c, pm_peer_info *out, size_t cap);

/* Peer connections that ended, by reason: up to cap reasons into names (a
 * static string each: "key_id", "handshake_decrypt", "record", "timeout",
 * "rate_limited", ...) and counts (since the start); returns how many
 * reasons there are (0 outside peer mode). The list and its order are
 * fixed for a build. */
PM_EXTERN int pm_cluster_peer_failures(const pm_cluster *c, const char **names, uint64_t *counts,
                                       size_t cap);

/* Replaces the worker of a ready slot: the stop request, SIGKILL after the
 * stop timeout, and once it is reaped a new incarnation at once (no backoff,
 * not charged to the budget). 0, -EBUSY when the slot is not ready, -EINVAL. */
PM_EXTERN int pm_cluster_restart_slot(pm_cluster *c, unsigned slot);

/* Embedding more fds in the supervisor's own loop (a health endpoint, say):
 * cb runs once, from pm_cluster_run, when fd is readable (or has an error);
 * call pm_cluster_watch_fd again from cb for the next time. At most 1024
 * fds. pm_cluster_unwatch_fd before closing a watched fd. 0 or -errno. */
PM_EXTERN int pm_cluster_watch_fd(pm_cluster *c, int fd, void (*cb)(pm_cluster *, int, void *),
                                  void *arg);
PM_EXTERN int pm_cluster_unwatch_fd(pm_cluster *c, int fd);

/* The signal that made pm_cluster_run return -EINTR, or 0. */
PM_EXTERN int pm_cluster_last_signal(const pm_cluster *c);

/*
 * Asks every worker to stop, waits up to the stop timeout, SIGKILLs what is
 * left and returns only when every worker process is reaped. Cancels pending
 * restarts. Every pending pm_cluster_request gets its callback with
 * -ECANCELED first, and new requests are refused (-ESHUTDOWN) from then on.
 * Frees the cluster (c is invalid afterwards). Returns 0 when every
 * worker stopped by itself within the timeout, 1 when some had to be killed,
 * or a negative errno (the workers are reaped all the same).
 */
PM_EXTERN int pm_cluster_terminate(pm_cluster *c);

/* ------------------------------------------------------------------------
 * Messaging
 *
 * The mesh is a star: the supervisor ("main", address "<system>@main:0") is
 * the hub and relays every frame. The sender of every frame is stamped by the
 * hub from the ring it arrived on, never taken from the payload.
 * ---------------------------------------------------------------------- */

/* Largest payload of one frame. Larger messages, up to the cluster's
 * pm_options_set_max_message (default 64 MiB), travel as a sealed memfd and
 * reach the receiver as one pm_message with the whole length, mapped
 * read-only until the next receive (workers) or until the callback returns
 * (main). */
#define PM_MAX_PAYLOAD (64 * 1024)

enum pm_message_kind {
    PM_MSG_PLAIN = 1,
    PM_MSG_REQUEST = 2,
    PM_MSG_REPLY = 3,
    PM_MSG_UNDELIVERABLE = 4 /* error says why; request_id names the request */
};

/*
 * A received message. `from` carries the sender's incarnation, so a restarted
 * worker is told apart from its predecessor. `error` is 0, or a negative
 * errno for undeliverable notices and broadcast results. `deadline_ms` is
 * absolute CLOCK_MONOTONIC milliseconds, 0 = none. `data` stays valid until
 * the next receive call on the same node (or, on the supervisor, until the
 * callback returns).
 */
typedef struct pm_message {
    pm_address from;
    pm_address to;
    uint64_t request_id;
    int kind;
    int error;
    int64_t deadline_ms;
    const void *data;
    size_t len;
} pm_message;

/* Frames addressed to main arrive here (from pm_cluster_run). Without a
 * callback (cb NULL, the default) a message to main is dropped and counted,
 * and a request to main, local or from another host, is answered at once
 * with an undeliverable notice, error -ENOENT. */
PM_EXTERN int pm_options_set_on_message(pm_options *o,
                                        void (*cb)(pm_cluster *, const pm_message *, void *),
                                        void *arg);

/* main -> a worker. -ENOENT (not an address of this mesh), -EHOSTDOWN (slot
 * not ready: restarting, retired, stopped), -ESTALE (incarnation given and
 * not the current one), -EMSGSIZE (len above pm_options_set_max_message),
 * -EAGAIN (its queue is full; for another host: its link's output queue is
 * full, try again later: main is never held; above PM_MAX_PAYLOAD also when
 * the kernel refuses the memfd for now, ETOOMANYREFS: the supervisor's user
 * has more fds in flight than its RLIMIT_NOFILE, which a worker of that
 * user can cause, doc/design.md "Life of a large message"). Above PM_MAX_PAYLOAD the
 * bytes are copied once into a sealed memfd, which the worker maps. */
PM_EXTERN int pm_cluster_send(pm_cluster *c, const pm_address *to, const void *data, size_t len);

/* Answers a PM_MSG_REQUEST received by on_message. Errors as pm_cluster_send. */
PM_EXTERN int pm_cluster_reply(pm_cluster *c, const pm_message *request, const void *data,
                               size_t len);

/*
 * Sends one request to every worker that is ready now and later calls cb once
 * (from pm_cluster_run) with one result per worker of that snapshot: `from`
 * is the worker, `error` 0 with its reply in data/len, -ETIMEDOUT, or
 * -EHOSTDOWN if it died or was retired meanwhile (-EAGAIN if its queue was
 * full). timeout_ms > 0. With no ready worker, cb runs at once with n = 0.
 * Returns 0 or a negative errno (nothing is sent then).
 */
PM_EXTERN int pm_cluster_broadcast(pm_cluster *c, const void *data, size_t len, int timeout_ms,
                                   void (*cb)(pm_cluster *, const pm_message *results, size_t n,
                                              void *arg),
                                   void *arg);

/*
 * The mesh-wide form (peer mode; otherwise the same as
 * pm_cluster_broadcast): the local broadcast, and the request sent to the
 * supervisor of every host this one has linked with since it started, which
 * fans it out to its own ready workers and returns one result per worker
 * (`from` = that worker's address on its host, with its incarnation).
 * Each remote worker receives the request from this host's supervisor
 * (m.from = system@thishost:0, as for a pm_cluster_request from here) and
 * answers it with pm_node_reply as any request; its reply is its result.
 * A host that cannot be reached (no link now, or the link goes down before
 * its results are in) settles as one result with from = system@host:0 and
 * -EHOSTUNREACH; one whose results do not arrive by the deadline as one
 * with -ETIMEDOUT (-ENOBUFS: its link had no room for some of them). A
 * remote worker's reply above PM_MAX_PAYLOAD cannot cross in its one result
 * frame: that worker's result is -EMSGSIZE, with no data. cb
 * runs exactly once, after every result (in the order they settled). Errors as
 * pm_cluster_broadcast.
 */
PM_EXTERN int pm_cluster_broadcast_mesh(pm_cluster *c, const void *data, size_t len,
                                        int timeout_ms,
                                        void (*cb)(pm_cluster *, const pm_message *results,
                                                   size_t n, void *arg),
                                        void *arg);

/*
 * Main asks one worker and gets its answer. `to` names the worker (an
 * incarnation in it must be the current one), or is NULL for any worker of
 * the pool: a ready one that holds none of main's any-worker requests (up
 * to pm_options_set_requests_per_worker) and owes no answer to one that
 * timed out; among those the fewest of main's requests in flight
 * (broadcasts included), ties round robin. When none fits, the request
 * waits in main (oldest first, at most pm_options_set_request_queue_max)
 * until one does, under its own timeout. So a crash, fence or kill ends
 * exactly the any-worker request its worker held. The worker gets it from
 * pm_node_recv as PM_MSG_REQUEST, with the deadline in deadline_ms, and
 * answers with pm_node_reply. What happened to the request (which worker,
 * how it ended) is pm_cluster_request_outcome, inside the callback.
 *
 * cb runs exactly once, from pm_cluster_run (or pm_cluster_call, cancel,
 * terminate), with reply->error:
 *   0           the answer, in reply->data/len (valid during the callback);
 *   -ETIMEDOUT  no answer within timeout_ms (> 0); a reply after that is
 *               dropped and counted (pm_cluster_stats.late_replies);
 *   -EHOSTDOWN  the worker died or was fenced while it held the request
 *               (its outcome says how that incarnation ended). It is never
 *               retried on another worker: an input that crashes one
 *               worker must not crash them all. The worker is restarted
 *               at once, outside the restart budget (an input fault);
 *   -ECANCELED  pm_cluster_cancel, or pm_cluster_terminate (every pending
 *               request is cancelled before terminate stops anything).
 * reply->from is the worker with its incarnation (all zero when the request
 * never left main), reply->request_id the id returned here.
 *
 * Peer mode: `to` may name a worker of another host. The request crosses
 * the link at once, its deadline as milliseconds remaining; besides the
 * answers above (-EHOSTDOWN, -ESTALE and -ENOENT come from the remote
 * supervisor) it may end with -EHOSTUNREACH when the link goes down first.
 * A host with no link up is -EHOSTUNREACH at once; port 0 of any host (a
 * supervisor) is -EINVAL: only workers answer main's requests. Remote
 * payloads are limited to PM_MAX_PAYLOAD (-EMSGSIZE above).
 *
 * Returns the request id (> 0; ids wrap within 1..INT_MAX, never reused
 * while pending), or a negative errno and cb never runs: -EINVAL (cb NULL,
 * timeout_ms <= 0, data NULL with len > 0, `to` is main), -EMSGSIZE (len >
 * pm_options_set_max_message), -ENOENT / -EHOSTDOWN / -ESTALE for `to` as
 * pm_cluster_send, -EAGAIN (main's queue for that worker is full, or a
 * large request refused for now, as pm_cluster_send), -EAGAIN also for
 * to == NULL when main's queue of waiting requests is full,
 * -ESHUTDOWN (pm_cluster_terminate is running), -ENOMEM.
 */
PM_EXTERN int pm_cluster_request(pm_cluster *c, const pm_address *to, const void *data,
                                 size_t len, int timeout_ms,
                                 void (*cb)(pm_cluster *, const pm_message *reply, void *arg),
                                 void *arg);

/* Cancels a pending request: its callback runs at once, before this
 * returns, with -ECANCELED; a reply later is dropped as late. 0, or -ENOENT
 * when id is not pending (already answered, cancelled, or never issued). */
PM_EXTERN int pm_cluster_cancel(pm_cluster *c, uint64_t id);

/*
 * The blocking form of pm_cluster_request: runs the cluster's loop (every
 * other event keeps being dispatched, as in pm_cluster_run) until the
 * answer. Returns 0 with the reply copied into reply (up to cap bytes) and
 * its length in *reply_len (reply_len may be NULL), or a negative errno:
 * the errors of pm_cluster_request (-EMSGSIZE only when the request itself
 * is too large), -ETIMEDOUT, -EHOSTDOWN, -ENOBUFS when the reply does not
 * fit cap (*reply_len is then the size needed), -EINTR when a signal that
 * makes pm_cluster_run return -EINTR arrives first (SIGTERM, SIGINT, SIGHUP:
 * pm_cluster_last_signal says which; the request is cancelled), -EDEADLK
 * when called from inside a procmesh callback (on_message, on_event,
 * on_permanently_down, broadcast and request callbacks, watch callbacks).
 * pm_cluster_stop does not end it: the next pm_cluster_run returns soon.
 */
PM_EXTERN int pm_cluster_call(pm_cluster *c, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, void *reply, size_t cap, size_t *reply_len);

/*
 * What happened to one of main's requests, for that request and no other:
 * filled by procmesh at the moment its answer is decided, so nothing that
 * happens to the worker afterwards (a restart, another crash) changes it.
 */
typedef struct pm_request_outcome {
    int error;               /* as reply->error: 0, -ETIMEDOUT, -EHOSTDOWN ... */
    pm_address worker;       /* the worker that held it, with its incarnation (all
                                zero when it never left main) */
    int killed;              /* -ETIMEDOUT: 1 when that worker was killed for it
                                (pm_options_set_kill_on_timeout) */
    int ended;               /* -EHOSTDOWN from a worker of this host: 1, and the
                                fields below say how that incarnation ended */
    int exit_code;           /* its exit code, -1 when a signal ended it */
    int signal;              /* the signal that ended it, or 0 */
    int core_dumped;
    int reason_code;         /* enum pm_reason of its EXITED event: "signal", "exit",
                                "heartbeat", "timeout", "corrupt-ring" ... */
    const char *reason;      /* pm_reason_name(reason_code), static */
    pm_crash_report crash;   /* its crash report when it left one (state RECORDED:
                                fault code, address, frames), else state NONE or
                                UNRECORDED */
} pm_request_outcome;

/* Inside the callback of pm_cluster_request, with the reply it was given:
 * that request's outcome, valid during the callback (like reply->data).
 * NULL for any other message, or outside the callback. */
PM_EXTERN const pm_request_outcome *pm_cluster_request_outcome(pm_cluster *c,
                                                              const pm_message *reply);

/* pm_cluster_call, and the request's outcome copied into *outcome (when not
 * NULL) whenever the request was issued (any return but the errors that
 * refuse it before: -EINVAL, -EDEADLK ...; outcome->error is then 0 and
 * outcome->worker empty). */
PM_EXTERN int pm_cluster_call_outcome(pm_cluster *c, const pm_address *to, const void *data,
                                      size_t len, int timeout_ms, void *reply, size_t cap,
                                      size_t *reply_len, pm_request_outcome *outcome);

/* ------------------------------------------------------------------------
 * The batch: N inputs through the pool, N outcomes in input order
 * ---------------------------------------------------------------------- */

typedef struct pm_map_input {
    const void *data;        /* the request's bytes (read during pm_cluster_map) */
    size_t len;
} pm_map_input;

typedef struct pm_map_result {
    int error;               /* 0: answered; else the request's error (-EHOSTDOWN,
                                -ETIMEDOUT, -EINTR when a signal cut the batch short,
                                -ENOMEM ...) */
    void *reply;             /* error 0: the answer, malloc'd (NULL when empty) */
    size_t len;
    pm_request_outcome *outcome; /* error != 0 and the request was issued: what
                                    happened to it, malloc'd; else NULL */
} pm_map_result;

/*
 * Runs every input through the pool as one any-worker request each
 * (pm_cluster_request with to == NULL, so one input per worker by default:
 * a crash or a hang is blamed on the one input that caused it, the others
 * are answered) and returns when each has its outcome, written to
 * results[i] for inputs[i]. Nothing is retried: an input that crashed a
 * worker is not given to another. Inputs are handed to the pool as workers
 * can take them (at most workers x requests_per_worker at a time), each
 * under its own timeout_ms from that moment. Runs the cluster's loop like
 * pm_cluster_call (other events are dispatched meanwhile) and is refused
 * inside a callback (-EDEADLK).
 *
 * Returns the number of inputs answered (error 0), with every results[i]
 * written; free them with pm_map_results_free. A signal that makes
 * pm_cluster_run return -EINTR ends the batch early: the inputs in flight
 * are cancelled and those not answered get -EINTR. A negative errno means
 * nothing was run and results is untouched: -EINVAL (NULL with n > 0,
 * timeout_ms <= 0, an input with data NULL and len > 0), -EDEADLK,
 * -ESHUTDOWN, -EPERM.
 */
PM_EXTERN long pm_cluster_map(pm_cluster *c, const pm_map_input *inputs, size_t n,
                              int timeout_ms, pm_map_result *results);

/* Frees what pm_cluster_map allocated in results[0..n) (replies, outcomes)
 * and zeroes them; the array itself is the caller's. */
PM_EXTERN void pm_map_results_free(pm_map_result *results, size_t n);

/* main's own address. */
PM_EXTERN int pm_cluster_self(const pm_cluster *c, pm_address *out);

/* ------------------------------------------------------------------------
 * Worker side
 * ---------------------------------------------------------------------- */

/* Exec mode: joins the cluster that started this process (found through the
 * environment variable PROCMESH_NODE): says hello, receives init. Returns 0,
 * -ENOENT when the process was not started by procmesh, -EPROTO on a
 * protocol mismatch, -ESHUTDOWN when the supervisor went away. */
PM_EXTERN int pm_node_join(pm_node **out);
PM_EXTERN const pm_address *pm_node_self(const pm_node *n);
PM_EXTERN unsigned pm_node_slot(const pm_node *n);
/* The init data (pointer valid for the node's life, may be NULL with 0). */
PM_EXTERN int pm_node_init_data(const pm_node *n, const void **data, size_t *len);
/* Tells the supervisor that this worker is ready. Idempotent. */
PM_EXTERN int pm_node_ready(pm_node *n);
/* Sends a plain message. Waits (spin, then park) while the outbound ring is
 * full. Above PM_MAX_PAYLOAD the bytes go into a sealed memfd passed over
 * the worker's socket (one copy; the supervisor passes it on unmapped).
 * Returns 0, -ENOENT for an address outside this mesh, -EMSGSIZE (above the
 * cluster's pm_options_set_max_message), -EAGAIN (a large message the
 * kernel refuses for now: this user's fds in flight are past this
 * process's RLIMIT_NOFILE; doc/design.md "Life of a large message"),
 * -ESHUTDOWN once the supervisor asked this worker to stop or went away.
 * A large message waits while 8 of this worker's earlier ones are not yet
 * read by the supervisor (PM__BIGMSG_AHEAD_MAX).
 * Delivery failures come back later as PM_MSG_UNDELIVERABLE messages. To
 * another host the same backpressure holds: while the destination's flow
 * window or the link's output queue is full the supervisor stops reading
 * this worker's ring, so the send waits (doc/design.md, Backpressure). */
PM_EXTERN int pm_node_send(pm_node *n, const pm_address *to, const void *data, size_t len);
/* The same, but -EAGAIN instead of waiting when the ring is full. */
PM_EXTERN int pm_node_try_send(pm_node *n, const pm_address *to, const void *data, size_t len);
/* Receives the next message: 0, -ETIMEDOUT (timeout_ms: 0 poll, -1 forever),
 * -ESHUTDOWN once the supervisor asks this worker to stop or is gone. A
 * large message this process cannot map (its address space is full) is
 * skipped, not returned: its sender gets an undeliverable notice
 * (-EMSGSIZE) and the receive goes on to the next message. */
PM_EXTERN int pm_node_recv(pm_node *n, pm_message *m, int timeout_ms);
/* Sends a request and waits for its reply: 0 with *reply filled, -ETIMEDOUT,
 * the undeliverable reason (-EHOSTDOWN, -ENOENT, -ESTALE, -EAGAIN: a large
 * request or reply the kernel refused to pass on for now, see
 * pm_node_send; -EMSGSIZE when the receiver could not map a large
 * request ...), -ESHUTDOWN, -EMSGSIZE (the request above the cluster's
 * maximum, or a large reply this process cannot map: skipped).
 * Messages that arrive meanwhile are kept for pm_node_recv: up to 4 MiB of
 * messages of at most PM_MAX_PAYLOAD bytes, and at most 64 large messages
 * (their fds stay open meanwhile). When that store is full the reply can
 * no longer be reached: -ENOBUFS at once (the reply, if it comes, is
 * dropped as late), the message that did not fit left for pm_node_recv. */
PM_EXTERN int pm_node_request(pm_node *n, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, pm_message *reply);
/* Answers a request received with pm_node_recv. Still allowed after the
 * stop request (to finish the requests in hand); -ESHUTDOWN once fenced. */
PM_EXTERN int pm_node_reply(pm_node *n, const pm_message *request, const void *data, size_t len);
/* Readable when a message may be waiting, after pm_node_recv returned
 * -ETIMEDOUT (which arms it; the next receive disarms it): for embedding a
 * worker in its own loop. */
PM_EXTERN int pm_node_fd(const pm_node *n);

/* Tells the supervisor this worker is alive during long work that makes no
 * other procmesh call. No system call. */
PM_EXTERN int pm_node_beat(pm_node *n);

/* Exec mode: releases the node (its memory mapping, fds and init data)
 * before the process exits; the supervisor sees the exit as usual. NULL is
 * accepted. Fork mode: the node belongs to procmesh, do not close it. */
PM_EXTERN void pm_node_close(pm_node *n);

#ifdef __cplusplus
}
#endif

#endif /* PROCMESH_H */
