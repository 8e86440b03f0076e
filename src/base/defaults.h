/* SPDX-License-Identifier: MIT */
/*
 * defaults.h - the default of each pm_options setting that the procmesh
 * daemon exposes as a flag. pm_options_new() and the daemon (its parsed
 * defaults and its --help text) both read them here, so they cannot drift.
 * A header rather than PM_EXTERN getters: the daemon is built in this tree,
 * and a dozen getters would grow the public API for one in-tree caller.
 * Plain literals: the daemon's usage text stringizes them.
 */
#ifndef PM_DEFAULTS_H
#define PM_DEFAULTS_H

#define PM__DEFAULT_WORKERS 0 /* auto: usable CPUs */
#define PM__DEFAULT_RESTART_POLICY PM_RESTART_ON_FAILURE
#define PM__DEFAULT_MIN_BACKOFF_MS 200
#define PM__DEFAULT_MAX_BACKOFF_MS 10000
#define PM__DEFAULT_RANDOM_FACTOR 0.2
#define PM__DEFAULT_MAX_RESTARTS 10
#define PM__DEFAULT_RESTART_WINDOW_MS 60000
#define PM__DEFAULT_READY_TIMEOUT_MS 10000
#define PM__DEFAULT_HEARTBEAT_TIMEOUT_MS 10000
#define PM__DEFAULT_DRAIN_TIMEOUT_MS 10000
#define PM__DEFAULT_FENCE_NOT_DRAINING 0
#define PM__DEFAULT_STOP_TIMEOUT_MS 5000
/* A library takes none of its application's signals unless asked; the
 * daemon turns it on. */
#define PM__DEFAULT_HANDLE_SIGNALS 0
/* The pool (pm_cluster_request to any worker): one request per worker, so a
 * crash ends exactly the request that caused it; the rest wait in main. */
#define PM__DEFAULT_REQUESTS_PER_WORKER 1
#define PM__DEFAULT_REQUEST_QUEUE_MAX 4096
#define PM__MAX_REQUEST_QUEUE (1u << 20)
#define PM__MAX_REQUESTS_PER_WORKER 1024 /* PM__INFLIGHT_PER_REQUESTER */
#define PM__DEFAULT_KILL_ON_TIMEOUT 0
/* Direct lanes between workers that talk (doc/design.md, "Direct lanes"). */
#define PM__DEFAULT_DIRECT_LANES 1
#define PM__DEFAULT_SYSTEM_NAME "procmesh"
#define PM__DEFAULT_HOSTNAME "worker"
#define PM__DEFAULT_BASE_PORT 1
#define PM__DEFAULT_READY_MODE PM_READY_MESH
/* Containment limits: none by default; the bounds their setters check. */
#define PM__MIN_MEMORY_MAX 1048576
#define PM__MAX_PIDS_MAX 4194304
/* cpu.max: the kernel's bounds for a period and a quota, in microseconds. */
#define PM__MIN_CPU_PERIOD_US 1000
#define PM__MAX_CPU_PERIOD_US 1000000
#define PM__MIN_CPU_QUOTA_US 1000
#define PM__MAX_CPU_QUOTA_US 1000000000000ULL
#define PM__DEFAULT_NO_NEW_PRIVS 1
#define PM__DEFAULT_PROTECT_SUPERVISOR 0 /* the daemon protects itself always */
#define PM__DEFAULT_SECCOMP PM_SECCOMP_OFF
#define PM__DEFAULT_SECCOMP_ACTION PM_SECCOMP_ERRNO
/* The library passes output through (no program changes behaviour); the
 * daemon captures it into its log unless told --output inherit. */
#define PM__DEFAULT_OUTPUT PM_OUTPUT_INHERIT
#define PM__DEFAULT_DAEMON_OUTPUT PM_OUTPUT_CAPTURE
#define PM__DEFAULT_PEER_TIMEOUT_MS 5000 /* peer links: handshake and silence bound */
/* A peer link sends a REKEY record after this many records or this long,
 * whichever comes first (doc/protocol.md 6, "Nonces and Rekey"). */
#define PM__DEFAULT_REKEY_RECORDS (UINT64_C(1) << 20)
#define PM__DEFAULT_REKEY_MS (UINT64_C(10) * 60 * 1000)
#define PM__DEFAULT_MAX_MESSAGE (64 * 1024 * 1024) /* bytes */

/* Resource limits a worker may be given: RLIMIT_NLIMITS on Linux. */
#define PM__MAX_RLIMIT 16

/* The environment variable through which a spawned worker finds its
 * channel's fds (spawn.c writes it, node.c reads and removes it). */
#define PM__NODE_ENV "PROCMESH_NODE"

#endif /* PM_DEFAULTS_H */
