/* SPDX-License-Identifier: MIT */
/* options.h - the pm_options object, shared by the supervisor modules. */
#ifndef PM_OPTIONS_H
#define PM_OPTIONS_H

#include "base/internal.h"
#include "base/defaults.h" /* PM__MAX_RLIMIT */
#include "mesh/mesh_env.h" /* PM__PEER_ADDR_MAX, PM__MAX_PEERS */
#include "peer/peerkeys.h"

#define PM__MAX_PASS_FDS 64
/* The smallest ring that still takes a maximal frame (PM__CHANNEL_MAX_FRAME)
 * behind a padding record. */
#define PM__MIN_RING_SIZE ((size_t)256 * 1024)

struct pm_options {
    int workers; /* 0 = auto */
    int (*bootstrap)(pm_node *, void *);
    void *bootstrap_arg;
    char *exec_path;
    char **exec_argv; /* NULL-terminated copy */
    int pass_fds[PM__MAX_PASS_FDS];
    size_t npass_fds;
    char system_name[PM_NAME_MAX];
    char hostname[PM_NAME_MAX];
    int base_port;
    void *init_data;
    size_t init_len;
    int restart_policy;
    int ready_timeout_ms;
    int min_backoff_ms;
    int max_backoff_ms;
    double random_factor;
    int max_restarts;
    int restart_window_ms;
    int stop_timeout_ms;
    size_t ring_size;
    size_t max_message;             /* bytes, PM_MAX_PAYLOAD .. PM__BIGMSG_MAX */
    int handle_signals;
    unsigned hub_spin_us;
    int direct_lanes;               /* lanes between workers that talk (hub_lane.c) */
    int warm_standby;               /* fork mode: a started replacement waits per slot (standby.c) */
    int heartbeat_timeout_ms;
    int drain_timeout_ms;           /* 0: never report a full ring */
    int fence_not_draining;
    int requests_per_worker;        /* the pool: any-worker requests a worker holds */
    int request_queue_max;          /* any-worker requests waiting in main */
    int kill_on_timeout;
    int ready_mode;
    int reap_orphans;
    int listen_env;                 /* pass_fds are listening sockets: LISTEN_* */
    /* Containment (cgroup.h): per-slot limits, 0 = none; rlimits per
     * resource, applied by each worker before it runs anything. */
    int containment;                /* 0 auto, PM_CONTAIN_* */
    uint64_t memory_max;
    int pids_max;
    uint64_t cpu_quota_us, cpu_period_us;
    unsigned char rlimit_set[PM__MAX_RLIMIT];
    uint64_t rlimit_soft[PM__MAX_RLIMIT], rlimit_hard[PM__MAX_RLIMIT];
    /* Workers' core dumps: NULL, RLIMIT_CORE soft 0; else an absolute
     * directory, RLIMIT_CORE unlimited and fork-mode workers dumpable
     * (pm__core_rlimit; an explicit rlimit for RLIMIT_CORE wins). */
    char *core_dir;
    char fd_names[PM__MAX_PASS_FDS][PM_NAME_MAX];
    void (*on_down)(pm_cluster *, unsigned, const pm_address *, unsigned, void *);
    void *on_down_arg;
    void (*on_event)(pm_cluster *, const pm_event *, void *);
    void *on_event_arg;
    void (*on_message)(pm_cluster *, const pm_message *, void *);
    void *on_message_arg;
    /* Privileges (spawn.c pm__child_privileges). */
    int set_user;                   /* uid/gid given */
    uid_t uid;
    gid_t gid;
    uid_t uid_first;                /* uid_count > 0: slot i runs as uid_first + i */
    unsigned uid_count;
    int no_new_privs;
    int protect_supervisor;
    int seccomp;                    /* PM_SECCOMP_* */
    int seccomp_action;
    /* Worker output (output.c). */
    int output;                     /* PM_OUTPUT_* */
    void (*on_output)(pm_cluster *, const pm_output_line *, void *);
    void *on_output_arg;
    /* The supervisor's diagnostics (diag.c); NULL: stderr. */
    void (*on_diagnostic)(pm_cluster *, const char *, const char *, void *);
    void *on_diagnostic_arg;
    /* The cluster's copy only: the filter, built once for its supervisor
     * (incarnation.c) and freed with the options. NULL in the user's. */
    struct pm__seccomp_prog *seccomp_prog;
    /* Peer links: stored and validated, not yet acted on. */
    char peer_listen[PM__PEER_ADDR_MAX]; /* "" = none */
    char peers[PM__MAX_PEERS][PM__PEER_ADDR_MAX];
    size_t npeers;
    char peers_dns[PM__PEER_ADDR_MAX];   /* "" = none */
    pm__keyring *keys;                   /* the secrets (secret memory); NULL = none */
    int insecure_no_secret;
    char *node_key_file;                 /* NULL: a new key pair per start */
    char *peer_keys_file;                /* NULL: no pinning */
    int peer_timeout_ms;
    int hostname_set;                    /* pm_options_set_hostname was called */
    /* When a link sends REKEY: after this many records or ms, whichever
     * first (defaults PM__DEFAULT_REKEY_*; tests shorten them here). */
    uint64_t rekey_records;
    uint64_t rekey_ms;
};

/* 1 when peer links are asked for (a listen address, peers or peers DNS). */
int pm__options_peer_mode(const pm_options *o);

/* "HOST:PORT": a host of 1..255 bytes without blanks, control characters
 * or a '/', or "[v6]"; a port of 1..65535 without sign or leading zero.
 * 1 when valid. Pure. */
int pm__peer_addr_valid(const char *s);

/* Deep copy (the cluster keeps its own; never the built filter). NULL on
 * ENOMEM. */
pm_options *pm__options_dup(const pm_options *o);

/* The RLIMIT_CORE of a worker whose options set none (pure): without a
 * core directory the soft limit is 0 and the hard one stays the
 * supervisor's (hard), so a worker may still raise its own deliberately;
 * with one both are unlimited, or the supervisor's hard limit when that is
 * lower and it may not raise it (may_raise: CAP_SYS_RESOURCE, as root). */
void pm__core_rlimit(int core_dir, int may_raise, uint64_t hard, uint64_t *soft_out,
                     uint64_t *hard_out);

/* The worker count options ask for, with auto resolved. */
int pm__options_workers(const pm_options *o);

/* CPUs this process may use: affinity, capped by the cgroup v2 quota. */
int pm__cpus_available(void);

/* Parses a cgroup v2 cpu.max ("max 100000" or "QUOTA PERIOD") into a CPU
 * count rounded up; 0 for no limit; -EINVAL when malformed. Pure. */
int pm__cpu_max_parse(const char *text);

#endif /* PM_OPTIONS_H */
