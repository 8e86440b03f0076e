/* SPDX-License-Identifier: MIT */
/* dconf_types.h - the daemon's `run` configuration as data: what the option
 * table (dconf.c) and the value parsers (dconf_value.c) both fill, so that
 * neither includes the other's header. */
#ifndef PMD_DCONF_TYPES_H
#define PMD_DCONF_TYPES_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

#define PMD_MAX_LISTEN 16
#define PMD_MAX_PEERS 64      /* the library's bound on pm_options_add_peer */
#define PMD_PEER_ADDR_MAX 264 /* "HOST:PORT" with a 255-byte host */

typedef struct pmd_listen_spec {
    char name[PM_NAME_MAX];
    int unix_socket;        /* 1: path, 0: tcp host:port */
    char path[108];
    char host[256];
    unsigned port;
} pmd_listen_spec;

typedef struct pmd_dconf {
    int workers;            /* 0 = auto */
    int restart;            /* PM_RESTART_* */
    int backoff_min, backoff_max;
    double jitter;
    int max_restarts, restart_window, ready_timeout, heartbeat_timeout, stop_timeout;
    int drain_timeout;      /* ms, 0 = off */
    int fence_not_draining; /* 0 or 1 */
    int direct_lanes;       /* 0 or 1 */
    char system_name[PM_NAME_MAX];
    char hostname[PM_NAME_MAX];
    int base_port;
    char *init_data;        /* text, or the contents of @FILE (malloc'd) */
    size_t init_len;
    int ready;              /* PM_READY_* */
    pmd_listen_spec listen[PMD_MAX_LISTEN];
    size_t nlisten;
    char health_host[256];  /* empty: no health endpoint */
    unsigned health_port;
    int min_ready;          /* -1: all slots */
    int log_format, log_level; /* PMD_LOG_* */
    /* Containment: per-slot limits (0 none) and rlimits (--rlimit, repeats). */
    int containment;        /* 0 auto, PM_CONTAIN_* */
    uint64_t memory_max;
    int pids_max;
    uint64_t cpu_quota, cpu_period;
    unsigned char rlimit_set[16];
    uint64_t rlimit_soft[16], rlimit_hard[16];
    int user;               /* --user given: workers run as uid:gid */
    unsigned uid, gid;
    unsigned uid_first, uid_count; /* --uid-range; count 0 = none */
    int no_new_privs;       /* 0 or 1 */
    int seccomp, seccomp_action; /* PM_SECCOMP_* */
    size_t max_message;     /* bytes (--max-message SIZE[K|M|G]) */
    int output;             /* PM_OUTPUT_*: workers' stdout/stderr into the log (capture) */
    /* Peer links: parsed and validated; not yet run (see procmesh.c). */
    int peer_flags;         /* 1 when any peer-link option was given */
    char peer_listen[PMD_PEER_ADDR_MAX]; /* "" = none */
    char peers[PMD_MAX_PEERS][PMD_PEER_ADDR_MAX];
    size_t npeers;
    char peers_dns[PMD_PEER_ADDR_MAX];
    int peer_timeout;       /* ms */
    char *secret_file[2];   /* current, next (malloc'd); NULL = not given */
    size_t nsecret_files;
    int insecure_no_secret, allow_insecure_secret_mode;
    char *node_key;         /* malloc'd path, NULL: a new key per start */
    char *peer_keys;        /* malloc'd path, NULL: no pinning */
    const char *core_dir;   /* --core-dir: an existing directory, or NULL (no cores) */
    char **argv;            /* COMMAND [ARG...], pointers into the caller's argv */
    int argc;
} pmd_dconf;

#endif /* PMD_DCONF_TYPES_H */
