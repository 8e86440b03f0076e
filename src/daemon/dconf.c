/* SPDX-License-Identifier: MIT */
/* dconf.c - the daemon's `run` options: flags, PROCMESH_* variables,
 * defaults and validation; see dconf.h. */
#define _GNU_SOURCE
#include "dconf.h"
#include "dconf_value.h"

#include <ctype.h>
#include <errno.h>
#include <grp.h>
#include <pwd.h>
#include <limits.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>
#include <sys/stat.h>

#include <sodium.h>

#include "base/defaults.h"
#include "os/deps.h"
#include "peer/peerkeys.h"
#include "peer/secretmem.h"

enum opt_id {
    O_WORKERS, O_RESTART, O_BACKOFF_MIN, O_BACKOFF_MAX, O_JITTER, O_MAX_RESTARTS,
    O_RESTART_WINDOW, O_READY_TIMEOUT, O_HEARTBEAT, O_STOP_TIMEOUT, O_SYSTEM_NAME, O_HOSTNAME,
    O_BASE_PORT, O_INIT_DATA, O_READY, O_LISTEN, O_HEALTH, O_MIN_READY, O_LOG_FORMAT,
    O_LOG_LEVEL, O_DRAIN_TIMEOUT, O_FENCE_NOT_DRAINING, O_DIRECT_LANES, O_MEMORY_MAX, O_PIDS_MAX, O_CPU_MAX,
    O_RLIMIT, O_CONTAINMENT, O_USER, O_UID_RANGE, O_NO_NEW_PRIVS, O_SECCOMP, O_SECCOMP_ACTION,
    O_CORE_DIR, O_OUTPUT, O_MAX_MESSAGE,
    /* Peer links (O_PEER_FIRST..O_COUNT - 1: any of them sets peer_flags). */
    O_PEER_LISTEN, O_PEERS, O_PEERS_DNS, O_PEER_TIMEOUT, O_SECRET_FILE, O_INSECURE_NO_SECRET,
    O_ALLOW_INSECURE_SECRET_MODE, O_NODE_KEY, O_PEER_KEYS, O_COUNT
};
#define O_PEER_FIRST O_PEER_LISTEN

/* Flags written bare (--insecure-no-secret), or as --flag=yes|no, and as
 * yes|no in their variable. */
static int bare(int id)
{
    return id == O_INSECURE_NO_SECRET || id == O_ALLOW_INSECURE_SECRET_MODE;
}

static const struct {
    const char *flag;
    const char *var;
} opts[O_COUNT] = {
    [O_WORKERS] = {"--workers", "PROCMESH_WORKERS"},
    [O_RESTART] = {"--restart", "PROCMESH_RESTART"},
    [O_BACKOFF_MIN] = {"--backoff-min", "PROCMESH_BACKOFF_MIN"},
    [O_BACKOFF_MAX] = {"--backoff-max", "PROCMESH_BACKOFF_MAX"},
    [O_JITTER] = {"--backoff-jitter", "PROCMESH_BACKOFF_JITTER"},
    [O_MAX_RESTARTS] = {"--max-restarts", "PROCMESH_MAX_RESTARTS"},
    [O_RESTART_WINDOW] = {"--restart-window", "PROCMESH_RESTART_WINDOW"},
    [O_READY_TIMEOUT] = {"--ready-timeout", "PROCMESH_READY_TIMEOUT"},
    [O_HEARTBEAT] = {"--heartbeat-timeout", "PROCMESH_HEARTBEAT_TIMEOUT"},
    [O_STOP_TIMEOUT] = {"--stop-timeout", "PROCMESH_STOP_TIMEOUT"},
    [O_SYSTEM_NAME] = {"--system-name", "PROCMESH_SYSTEM_NAME"},
    [O_HOSTNAME] = {"--hostname", "PROCMESH_HOSTNAME"},
    [O_BASE_PORT] = {"--base-port", "PROCMESH_BASE_PORT"},
    [O_INIT_DATA] = {"--init-data", "PROCMESH_INIT_DATA"},
    [O_READY] = {"--ready", "PROCMESH_READY"},
    [O_LISTEN] = {"--listen", "PROCMESH_LISTEN"},
    [O_HEALTH] = {"--health", "PROCMESH_HEALTH"},
    [O_MIN_READY] = {"--min-ready", "PROCMESH_MIN_READY"},
    [O_LOG_FORMAT] = {"--log-format", "PROCMESH_LOG_FORMAT"},
    [O_LOG_LEVEL] = {"--log-level", "PROCMESH_LOG_LEVEL"},
    [O_DRAIN_TIMEOUT] = {"--drain-timeout", "PROCMESH_DRAIN_TIMEOUT"},
    [O_FENCE_NOT_DRAINING] = {"--fence-not-draining", "PROCMESH_FENCE_NOT_DRAINING"},
    [O_DIRECT_LANES] = {"--direct-lanes", "PROCMESH_DIRECT_LANES"},
    [O_MEMORY_MAX] = {"--memory-max", "PROCMESH_MEMORY_MAX"},
    [O_PIDS_MAX] = {"--pids-max", "PROCMESH_PIDS_MAX"},
    [O_CPU_MAX] = {"--cpu-max", "PROCMESH_CPU_MAX"},
    [O_RLIMIT] = {"--rlimit", "PROCMESH_RLIMIT"},
    [O_CONTAINMENT] = {"--containment", "PROCMESH_CONTAINMENT"},
    [O_USER] = {"--user", "PROCMESH_USER"},
    [O_UID_RANGE] = {"--uid-range", "PROCMESH_UID_RANGE"},
    [O_NO_NEW_PRIVS] = {"--no-new-privs", "PROCMESH_NO_NEW_PRIVS"},
    [O_SECCOMP] = {"--seccomp", "PROCMESH_SECCOMP"},
    [O_SECCOMP_ACTION] = {"--seccomp-action", "PROCMESH_SECCOMP_ACTION"},
    [O_OUTPUT] = {"--output", "PROCMESH_OUTPUT"},
    [O_MAX_MESSAGE] = {"--max-message", "PROCMESH_MAX_MESSAGE"},
    [O_PEER_LISTEN] = {"--peer-listen", "PROCMESH_PEER_LISTEN"},
    [O_PEERS] = {"--peers", "PROCMESH_PEERS"},
    [O_PEERS_DNS] = {"--peers-dns", "PROCMESH_PEERS_DNS"},
    [O_PEER_TIMEOUT] = {"--peer-timeout", "PROCMESH_PEER_TIMEOUT"},
    [O_SECRET_FILE] = {"--secret-file", "PROCMESH_SECRET_FILE"},
    [O_INSECURE_NO_SECRET] = {"--insecure-no-secret", "PROCMESH_INSECURE_NO_SECRET"},
    [O_ALLOW_INSECURE_SECRET_MODE] = {"--allow-insecure-secret-mode", "PROCMESH_ALLOW_INSECURE_SECRET_MODE"},
    [O_NODE_KEY] = {"--node-key", "PROCMESH_NODE_KEY"},
    [O_PEER_KEYS] = {"--peer-keys", "PROCMESH_PEER_KEYS"},
    [O_CORE_DIR] = {"--core-dir", "PROCMESH_CORE_DIR"},
};

/* Options whose value is one word of a list, each stored as an int. */
static const char *const yes_no[] = {"yes", "no", NULL};
static const int yes_no_val[] = {1, 0};
static const char *const restart_n[] = {"always", "on-failure", "never", NULL};
static const int restart_val[] = {PM_RESTART_ALWAYS, PM_RESTART_ON_FAILURE, PM_RESTART_NEVER};
static const char *const log_format_n[] = {"text", "json", NULL};
static const int log_format_val[] = {PMD_LOG_TEXT, PMD_LOG_JSON};
static const char *const log_level_n[] = {"error", "warn", "info", "debug", NULL};
static const int log_level_val[] = {PMD_LOG_ERROR, PMD_LOG_WARN, PMD_LOG_INFO, PMD_LOG_DEBUG};
static const char *const containment_n[] = {"auto", "cgroup", "process-group", NULL};
static const int containment_val[] = {0, PM_CONTAIN_CGROUP, PM_CONTAIN_PROCESS_GROUP};
static const char *const seccomp_n[] = {"off", "basic", "strict", NULL};
static const int seccomp_val[] = {PM_SECCOMP_OFF, PM_SECCOMP_BASIC, PM_SECCOMP_STRICT};
static const char *const seccomp_action_n[] = {"errno", "kill", NULL};
static const int seccomp_action_val[] = {PM_SECCOMP_ERRNO, PM_SECCOMP_KILL};
static const char *const ready_n[] = {"mesh", "notify", "exec", NULL};
static const int ready_val[] = {PM_READY_MESH, PM_READY_NOTIFY, PM_READY_EXEC};
static const char *const output_n[] = {"capture", "inherit", NULL};
static const int output_val[] = {PM_OUTPUT_CAPTURE, PM_OUTPUT_INHERIT};

static const struct choice {
    int id;
    const char *const *names;
    const int *values;
    const char *allowed;
    size_t off; /* of the int in pmd_dconf */
} choices[] = {
    {O_RESTART, restart_n, restart_val, "always, on-failure, never", offsetof(pmd_dconf, restart)},
    {O_READY, ready_n, ready_val, "mesh, notify, exec", offsetof(pmd_dconf, ready)},
    {O_LOG_FORMAT, log_format_n, log_format_val, "text, json", offsetof(pmd_dconf, log_format)},
    {O_LOG_LEVEL, log_level_n, log_level_val, "error, warn, info, debug", offsetof(pmd_dconf, log_level)},
    {O_FENCE_NOT_DRAINING, yes_no, yes_no_val, "yes, no", offsetof(pmd_dconf, fence_not_draining)},
    {O_DIRECT_LANES, yes_no, yes_no_val, "yes, no", offsetof(pmd_dconf, direct_lanes)},
    {O_CONTAINMENT, containment_n, containment_val, "auto, cgroup, process-group",
     offsetof(pmd_dconf, containment)},
    {O_NO_NEW_PRIVS, yes_no, yes_no_val, "yes, no", offsetof(pmd_dconf, no_new_privs)},
    {O_SECCOMP, seccomp_n, seccomp_val, "off, basic, strict", offsetof(pmd_dconf, seccomp)},
    {O_SECCOMP_ACTION, seccomp_action_n, seccomp_action_val, "errno, kill",
     offsetof(pmd_dconf, seccomp_action)},
    {O_OUTPUT, output_n, output_val, "capture, inherit", offsetof(pmd_dconf, output)},
    {O_INSECURE_NO_SECRET, yes_no, yes_no_val, "yes, no", offsetof(pmd_dconf, insecure_no_secret)},
    {O_ALLOW_INSECURE_SECRET_MODE, yes_no, yes_no_val, "yes, no",
     offsetof(pmd_dconf, allow_insecure_secret_mode)},
};

/* Options whose value is a whole number, stored as an int. The library's
 * setter is the one place of each range (options.c, options_contain.c):
 * the daemon asks it rather than repeat its bounds. Where the library
 * reads 0 as "none" (--workers, --pids-max), the daemon spells that with a
 * word, so a number there is at least 1. --min-ready is the daemon's own
 * option, with its own range. */
static const struct int_opt {
    int id;
    int (*set)(pm_options *, int); /* the library's check; NULL: min..max */
    const char *zero;              /* the word for 0, or NULL */
    long min, max;
    size_t off; /* of the int in pmd_dconf */
} int_opts[] = {
    {O_WORKERS, pm_options_set_workers, "auto", 0, 0, offsetof(pmd_dconf, workers)},
    {O_BACKOFF_MIN, pm_options_set_restart_min_backoff_ms, NULL, 0, 0, offsetof(pmd_dconf, backoff_min)},
    {O_BACKOFF_MAX, pm_options_set_restart_max_backoff_ms, NULL, 0, 0, offsetof(pmd_dconf, backoff_max)},
    {O_MAX_RESTARTS, pm_options_set_max_restarts, NULL, 0, 0, offsetof(pmd_dconf, max_restarts)},
    {O_RESTART_WINDOW, pm_options_set_restart_window_ms, NULL, 0, 0, offsetof(pmd_dconf, restart_window)},
    {O_READY_TIMEOUT, pm_options_set_ready_timeout_ms, NULL, 0, 0, offsetof(pmd_dconf, ready_timeout)},
    {O_HEARTBEAT, pm_options_set_heartbeat_timeout_ms, NULL, 0, 0, offsetof(pmd_dconf, heartbeat_timeout)},
    {O_STOP_TIMEOUT, pm_options_set_stop_timeout_ms, NULL, 0, 0, offsetof(pmd_dconf, stop_timeout)},
    {O_BASE_PORT, pm_options_set_base_port, NULL, 0, 0, offsetof(pmd_dconf, base_port)},
    {O_MIN_READY, NULL, NULL, 0, PM_MAX_WORKERS, offsetof(pmd_dconf, min_ready)},
    {O_DRAIN_TIMEOUT, pm_options_set_drain_timeout_ms, NULL, 0, 0, offsetof(pmd_dconf, drain_timeout)},
    {O_PEER_TIMEOUT, pm_options_set_peer_timeout_ms, NULL, 0, 0, offsetof(pmd_dconf, peer_timeout)},
    {O_PIDS_MAX, pm_options_set_pids_max, "max", 0, 0, offsetof(pmd_dconf, pids_max)},
};

/* The last value set accepts from in (a value it accepts) towards out (one
 * it refuses, or one past the ints), by bisection: each setter accepts one
 * interval. */
static long long setter_edge(int (*set)(pm_options *, int), pm_options *o, long long in,
                             long long out)
{
    while (llabs(out - in) > 1) {
        long long mid = in + (out - in) / 2;
        if (set(o, (int)mid) == 0)
            in = mid;
        else
            out = mid;
    }
    return in;
}

/* The whole numbers set accepts, lo..hi, around ok (the field's default or
 * last value, which it accepted): a refusal then names the library's
 * range. 0, or -ENOMEM. */
static int setter_range(int (*set)(pm_options *, int), int ok, long *lo, long *hi)
{
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    *lo = (long)setter_edge(set, o, ok, (long long)INT_MIN - 1);
    *hi = (long)setter_edge(set, o, ok, (long long)INT_MAX + 1);
    pm_options_free(o);
    return 0;
}

/* A whole-number option into its field: the number is the library's to
 * judge (the range its setter accepts), or min..max for the daemon's own. */
static int apply_int(pmd_dconf *c, const struct int_opt *io, const src *s, const char *v, char *err,
                     size_t size)
{
    char w[96];
    int *field = (int *)(void *)((char *)c + io->off);
    long min = io->min, max = io->max;
    if (io->zero != NULL && strcmp(v, io->zero) == 0) {
        *field = 0;
        return 0;
    }
    if (io->set != NULL && setter_range(io->set, *field, &min, &max) < 0)
        return -ENOMEM;
    if (io->zero == NULL)
        return pmd_dconf_int_value(s, v, min, max, field, err, size);
    if (min < 1)
        min = 1;
    if (pmd_dconf_int_value(s, v, min, max, field, err, size) < 0)
        return fail(err, size, "%s: '%s' is not %s or a whole number in %ld..%ld", who(s, w, sizeof(w)),
                    v, io->zero, min, max);
    return 0;
}

/* A table option (choices, int_opts) into its field: 0 or -EINVAL with
 * err filled; 1 when id is in neither table. */
static int apply_table(pmd_dconf *c, int id, const src *s, const char *v, char *err, size_t size)
{
    for (size_t k = 0; k < sizeof(choices) / sizeof(choices[0]); k++) {
        const struct choice *ch = &choices[k];
        if (ch->id == id)
            return pmd_dconf_choice(s, v, ch->names, ch->values, ch->allowed,
                                    (int *)(void *)((char *)c + ch->off), err, size);
    }
    for (size_t k = 0; k < sizeof(int_opts) / sizeof(int_opts[0]); k++) {
        const struct int_opt *io = &int_opts[k];
        if (io->id == id)
            return apply_int(c, io, s, v, err, size);
    }
    return 1;
}

/* --backoff-jitter: a number, in the range the library's setter accepts. */
static int apply_jitter(pmd_dconf *c, const src *s, const char *v, char *err, size_t size)
{
    char w[96], *end;
    errno = 0;
    double f = strtod(v, &end);
    int ok = *v != '\0' && *end == '\0' && errno == 0;
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    ok = ok && pm_options_set_restart_random_factor(o, f) == 0;
    pm_options_free(o);
    if (!ok)
        return fail(err, size, "%s: '%s' is not a number in 0..1", who(s, w, sizeof(w)), v);
    c->jitter = f;
    return 0;
}

/* --core-dir: an existing directory (the library checks it again when it
 * takes it; this names the flag and says what to do). */
static int apply_core_dir(pmd_dconf *c, const src *s, const char *v, char *err, size_t size)
{
    char w[96];
    struct stat st;
    int e = *v == '\0' ? EINVAL : stat(v, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
    if (e != 0)
        return fail(err, size, "%s: '%s' %s", who(s, w, sizeof(w)), v,
                    e == EINVAL    ? "is empty: give the directory for the workers' cores"
                    : e == ENOENT  ? "does not exist: create the directory first"
                    : e == ENOTDIR ? "is not a directory"
                                   : strerror(e));
    c->core_dir = v;
    return 0;
}

/* The peer-link options that are not in a table. */
static int apply_peer(pmd_dconf *c, int id, const src *s, const char *v, char *err, size_t size)
{
    char w[96];
    switch (id) {
    case O_PEER_LISTEN:
        return pmd_dconf_peer_addr(s, v, c->peer_listen, err, size);
    case O_PEERS:
        return pmd_dconf_peers_value(s, v, c, err, size);
    case O_PEERS_DNS:
        return pmd_dconf_peer_addr(s, v, c->peers_dns, err, size);
    case O_SECRET_FILE:
        if (c->nsecret_files == 2)
            return fail(err, size, "%s: given more than twice (the current and the next secret)",
                        who(s, w, sizeof(w)));
        return pmd_dconf_path_value(s, v, &c->secret_file[c->nsecret_files++], err, size);
    case O_NODE_KEY:
        return pmd_dconf_path_value(s, v, &c->node_key, err, size);
    case O_PEER_KEYS:
        return pmd_dconf_path_value(s, v, &c->peer_keys, err, size);
    }
    return -EINVAL;
}

/* One option's value v (from s) into c: 0, or -EINVAL with err naming the
 * option, the value and what is allowed. */
static int apply(pmd_dconf *c, int id, const src *s, const char *v, char *err, size_t size)
{
    int rc = apply_table(c, id, s, v, err, size);
    if (rc <= 0)
        return rc;
    switch (id) {
    case O_JITTER:
        return apply_jitter(c, s, v, err, size);
    case O_SYSTEM_NAME:
        return pmd_dconf_name_value(s, v, c->system_name, err, size);
    case O_HOSTNAME:
        return pmd_dconf_name_value(s, v, c->hostname, err, size);
    case O_INIT_DATA:
        return pmd_dconf_init_value(s, v, c, err, size);
    case O_LISTEN:
        return pmd_dconf_listen_value(s, v, c, err, size);
    case O_HEALTH:
        return pmd_dconf_host_port(s, v, c->health_host, sizeof(c->health_host), &c->health_port, err, size);
    case O_MEMORY_MAX:
        return pmd_dconf_size_value(s, v, &c->memory_max, err, size);
    case O_CPU_MAX:
        return pmd_dconf_cpu_value(s, v, c, err, size);
    case O_RLIMIT:
        return pmd_dconf_rlimit_value(s, v, c, err, size);
    case O_USER:
        return pmd_dconf_user_value(s, v, c, err, size);
    case O_UID_RANGE:
        return pmd_dconf_uid_range_value(s, v, c, err, size);
    case O_MAX_MESSAGE:
        return pmd_dconf_msg_size_value(s, v, &c->max_message, err, size);
    case O_CORE_DIR:
        return apply_core_dir(c, s, v, err, size);
    }
    return apply_peer(c, id, s, v, err, size);
}

static void defaults(pmd_dconf *c)
{
    memset(c, 0, sizeof(*c));
    c->workers = PM__DEFAULT_WORKERS;
    c->restart = PM__DEFAULT_RESTART_POLICY;
    c->backoff_min = PM__DEFAULT_MIN_BACKOFF_MS;
    c->backoff_max = PM__DEFAULT_MAX_BACKOFF_MS;
    c->jitter = PM__DEFAULT_RANDOM_FACTOR;
    c->max_restarts = PM__DEFAULT_MAX_RESTARTS;
    c->restart_window = PM__DEFAULT_RESTART_WINDOW_MS;
    c->ready_timeout = PM__DEFAULT_READY_TIMEOUT_MS;
    c->heartbeat_timeout = PM__DEFAULT_HEARTBEAT_TIMEOUT_MS;
    c->stop_timeout = PM__DEFAULT_STOP_TIMEOUT_MS;
    c->drain_timeout = PM__DEFAULT_DRAIN_TIMEOUT_MS;
    c->fence_not_draining = PM__DEFAULT_FENCE_NOT_DRAINING;
    c->direct_lanes = PM__DEFAULT_DIRECT_LANES;
    strcpy(c->system_name, PM__DEFAULT_SYSTEM_NAME);
    strcpy(c->hostname, PM__DEFAULT_HOSTNAME);
    c->base_port = PM__DEFAULT_BASE_PORT;
    c->ready = PM__DEFAULT_READY_MODE;
    c->min_ready = -1;
    c->log_format = PMD_LOG_TEXT;
    c->log_level = PMD_LOG_INFO;
    c->no_new_privs = PM__DEFAULT_NO_NEW_PRIVS;
    c->seccomp = PM__DEFAULT_SECCOMP;
    c->seccomp_action = PM__DEFAULT_SECCOMP_ACTION;
    c->output = PM__DEFAULT_DAEMON_OUTPUT;
    c->peer_timeout = PM__DEFAULT_PEER_TIMEOUT_MS;
    c->max_message = PM__DEFAULT_MAX_MESSAGE;
}

/* The option a flag argument names ("--workers" or "--workers=4"), or -1;
 * *flen is the length of its name. */
static int flag_id(const char *a, size_t *flen)
{
    const char *eq = strchr(a, '=');
    *flen = eq != NULL ? (size_t)(eq - a) : strlen(a);
    for (int k = 0; k < O_COUNT; k++)
        if (strlen(opts[k].flag) == *flen && strncmp(a, opts[k].flag, *flen) == 0)
            return k;
    return -1;
}

/* The flags, up to "--" or the end: each applied to c and marked in seen.
 * *next is the index of the command (after "--"). 0 or a negative errno
 * with err filled. */
static int parse_flags(pmd_dconf *c, int argc, char **argv, int seen[O_COUNT], int *next, char *err,
                       size_t errsize)
{
    int i = 0, rc;
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(a, "--", 2) != 0)
            return fail(err, errsize, "'%s': expected an option or '--' before the command", a);
        size_t flen;
        int id = flag_id(a, &flen);
        if (id < 0)
            return fail(err, errsize, "'%.*s': unknown option (see procmesh run --help)", (int)flen, a);
        const char *v = a[flen] == '=' ? a + flen + 1 : NULL;
        if (v == NULL && bare(id)) {
            v = "yes";
        } else if (v == NULL) {
            if (i + 1 >= argc)
                return fail(err, errsize, "%s: missing value", opts[id].flag);
            v = argv[++i];
        }
        if (seen[id] && id != O_LISTEN && id != O_SECRET_FILE && id != O_RLIMIT)
            return fail(err, errsize, "%s: given twice", opts[id].flag);
        seen[id] = 1;
        c->peer_flags |= id >= O_PEER_FIRST;
        src s = {opts[id].flag, NULL};
        if ((rc = apply(c, id, &s, v, err, errsize)) < 0)
            return rc;
    }
    *next = i;
    return 0;
}

/* The PROCMESH_* variables of the options no flag gave. --listen and
 * --rlimit take a comma-separated list there. 0 or a negative errno with
 * err filled. */
static int parse_env(pmd_dconf *c, const int seen[O_COUNT], pmd_getenv env, char *err, size_t errsize)
{
    int rc;
    for (int k = 0; k < O_COUNT; k++) {
        if (seen[k])
            continue;
        const char *v = env(opts[k].var);
        if (v == NULL)
            continue;
        src s = {opts[k].flag, opts[k].var};
        c->peer_flags |= k >= O_PEER_FIRST;
        if (k != O_LISTEN && k != O_RLIMIT) {
            if ((rc = apply(c, k, &s, v, err, errsize)) < 0)
                return rc;
            continue;
        }
        char *copy = strdup(v), *save = NULL;
        if (copy == NULL)
            return -ENOMEM;
        rc = 0;
        for (char *t = strtok_r(copy, ",", &save); t != NULL && rc == 0; t = strtok_r(NULL, ",", &save))
            rc = apply(c, k, &s, t, err, errsize);
        free(copy);
        if (rc < 0)
            return rc;
    }
    return 0;
}

/* The library's names for the options it checks across (its messages
 * start with one and may name another), and the daemon's flag for each. */
static const struct {
    const char *field;
    const char *flag;
} lib_names[] = {
    {"restart_max_backoff_ms", "--backoff-max"},
    {"restart_min_backoff_ms", "--backoff-min"},
    {"base_port", "--base-port"},
    {"hostname", "--hostname"},
};

/* why, a message of pm_options_validate, into err with each library name
 * replaced by its flag. Returns 1 when why starts with one of them (a
 * check this step asked for), else 0. */
static int retell(const char *why, char *err, size_t errsize)
{
    const size_t nnames = sizeof(lib_names) / sizeof(lib_names[0]);
    int ours = 0;
    size_t len = 0;
    err[0] = '\0';
    while (*why != '\0' && len + 1 < errsize) {
        size_t k = 0;
        while (k < nnames && strncmp(why, lib_names[k].field, strlen(lib_names[k].field)) != 0)
            k++;
        if (k < nnames) {
            ours |= len == 0;
            len += (size_t)snprintf(err + len, errsize - len, "%s", lib_names[k].flag);
            why += strlen(lib_names[k].field);
        } else {
            err[len++] = *why++;
            err[len] = '\0';
        }
        if (len >= errsize)
            len = errsize - 1;
    }
    return ours;
}

/* The checks across options that the library makes (pm_options_validate:
 * the backoff bounds, base_port + workers within 65535) are made by the
 * library, on options holding only the fields they read, with its message
 * retold in the daemon's flags. Anything else it reports is left to
 * pmd_dconf_options, which validates the whole set. */
static int check_with_library(const pmd_dconf *c, char *err, size_t errsize)
{
    char why[256] = "";
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    /* A stand-in program, not the real one: pm_options_validate stops at
     * the first thing it refuses and checks the program first, so a
     * program it refuses (an empty name) would hide the checks across
     * options. The real one is checked when pmd_dconf_options sets it. */
    static const char *const stand_in[] = {"procmesh-check", NULL};
    int rc = pm_options_set_exec(o, stand_in[0], (char *const *)stand_in);
    rc = rc ? rc : pm_options_set_workers(o, c->workers);
    rc = rc ? rc : pm_options_set_base_port(o, c->base_port);
    rc = rc ? rc : pm_options_set_restart_min_backoff_ms(o, c->backoff_min);
    rc = rc ? rc : pm_options_set_restart_max_backoff_ms(o, c->backoff_max);
    rc = rc ? rc : pm_options_validate(o, why, sizeof(why));
    pm_options_free(o);
    if (rc == -ENOMEM)
        return rc;
    if (rc < 0 && retell(why, err, errsize))
        return -EINVAL;
    err[0] = '\0';
    return 0;
}

/* The checks across options, once all are known. 0 or -EINVAL with err
 * naming the option that is wrong. The ones below have no library
 * equivalent at this point: --min-ready is the daemon's, and the library
 * counts secrets only once pmd_dconf_peer_files has read their files. */
static int check_across(const pmd_dconf *c, char *err, size_t errsize)
{
    int rc = check_with_library(c, err, errsize);
    if (rc < 0)
        return rc;
    if (c->min_ready > 0 && c->workers > 0 && c->min_ready > c->workers)
        return fail(err, errsize, "--min-ready: %d is more than the %d workers", c->min_ready,
                    c->workers);
    int peer_mode = c->peer_listen[0] != '\0' || c->npeers > 0 || c->peers_dns[0] != '\0';
    if (c->insecure_no_secret && c->nsecret_files > 0)
        return fail(err, errsize, "--insecure-no-secret: contradicts --secret-file (give one or the other)");
    if (peer_mode && c->nsecret_files == 0 && !c->insecure_no_secret)
        return fail(err, errsize,
                    "--secret-file: peer links (--peer-listen, --peers, --peers-dns) need a pre-shared "
                    "secret; write one with 'procmesh keygen FILE', or run without one with "
                    "--insecure-no-secret");
    return 0;
}

int pmd_dconf_parse(pmd_dconf *c, int argc, char **argv, pmd_getenv env, char *err,
                    size_t errsize)
{
    int seen[O_COUNT] = {0};
    int i = 0, rc;
    defaults(c);
    err[0] = '\0';
    /* Flags first, so that they win: an option given as a flag is not read
     * from the environment. --listen may repeat. */
    if ((rc = parse_flags(c, argc, argv, seen, &i, err, errsize)) < 0 ||
        (rc = parse_env(c, seen, env, err, errsize)) < 0)
        goto out;
    if (i >= argc) {
        rc = fail(err, errsize, "missing COMMAND: procmesh run [OPTIONS] -- COMMAND [ARG...]");
        goto out;
    }
    c->argv = argv + i;
    c->argc = argc - i;
    rc = check_across(c, err, errsize);
out:
    /* An allocation that failed says so, where nothing said more. */
    if (rc == -ENOMEM && err[0] == '\0')
        snprintf(err, errsize, "reading the options: %s", strerror(ENOMEM));
    return rc;
}

void pmd_dconf_free(pmd_dconf *c)
{
    free(c->init_data);
    c->init_data = NULL;
    c->init_len = 0;
    for (size_t i = 0; i < 2; i++) {
        free(c->secret_file[i]);
        c->secret_file[i] = NULL;
    }
    c->nsecret_files = 0;
    free(c->node_key);
    free(c->peer_keys);
    c->node_key = c->peer_keys = NULL;
}

int pmd_dconf_options(const pmd_dconf *c, pm_options **out, char *err, size_t errsize)
{
    err[0] = '\0'; /* a refusal below without words of its own gets pm_strerror's */
    pm_options *o = pm_options_new();
    /* The daemon owns its process: SIGTERM/SIGINT drain, SIGHUP reloads,
     * SIGCHLD reaps (the library's default leaves signals alone). */
    int rc = o == NULL ? -ENOMEM : pm_options_set_handle_signals(o, 1);
    rc = rc ? rc : pm_options_set_workers(o, c->workers);
    if (rc == 0 && (rc = pm_options_set_exec(o, c->argv[0], c->argv)) == -EINVAL)
        snprintf(err, errsize, "COMMAND: '%s' is not a program (give its path or name after '--')",
                 c->argv[0]);
    rc = rc ? rc : pm_options_set_restart_policy(o, c->restart);
    rc = rc ? rc : pm_options_set_restart_min_backoff_ms(o, c->backoff_min);
    rc = rc ? rc : pm_options_set_restart_max_backoff_ms(o, c->backoff_max);
    rc = rc ? rc : pm_options_set_restart_random_factor(o, c->jitter);
    rc = rc ? rc : pm_options_set_max_restarts(o, c->max_restarts);
    rc = rc ? rc : pm_options_set_restart_window_ms(o, c->restart_window);
    rc = rc ? rc : pm_options_set_ready_timeout_ms(o, c->ready_timeout);
    rc = rc ? rc : pm_options_set_heartbeat_timeout_ms(o, c->heartbeat_timeout);
    rc = rc ? rc : pm_options_set_stop_timeout_ms(o, c->stop_timeout);
    rc = rc ? rc : pm_options_set_drain_timeout_ms(o, c->drain_timeout);
    rc = rc ? rc : pm_options_set_fence_not_draining(o, c->fence_not_draining);
    rc = rc ? rc : pm_options_set_direct_lanes(o, c->direct_lanes);
    rc = rc ? rc : pm_options_set_system_name(o, c->system_name);
    rc = rc ? rc : pm_options_set_hostname(o, c->hostname);
    rc = rc ? rc : pm_options_set_base_port(o, c->base_port);
    rc = rc ? rc : pm_options_set_init_data(o, c->init_data, c->init_len);
    rc = rc ? rc : pm_options_set_ready_mode(o, c->ready);
    rc = rc ? rc : pm_options_set_reap_orphans(o, 1);
    rc = rc ? rc : pm_options_set_containment(o, c->containment);
    rc = rc ? rc : pm_options_set_memory_max(o, c->memory_max);
    rc = rc ? rc : pm_options_set_pids_max(o, c->pids_max);
    rc = rc ? rc : pm_options_set_cpu_max(o, c->cpu_quota, c->cpu_period);
    for (int r = 0; r < 16; r++)
        if (c->rlimit_set[r])
            rc = rc ? rc : pm_options_set_rlimit(o, r, c->rlimit_soft[r], c->rlimit_hard[r]);
    if (rc == 0 && c->user)
        rc = pm_options_set_user(o, (uid_t)c->uid, (gid_t)c->gid);
    if (rc == 0 && c->uid_count > 0) /* a uid range */
        rc = pm_options_set_uid_range(o, (uid_t)c->uid_first, c->uid_count);
    rc = rc ? rc : pm_options_set_no_new_privs(o, c->no_new_privs);
    rc = rc ? rc : pm_options_set_max_message(o, c->max_message);
    rc = rc ? rc : pm_options_set_seccomp_action(o, c->seccomp_action);
    rc = rc ? rc : pm_options_set_output(o, c->output);
    if (rc == 0 && c->core_dir != NULL && (rc = pm_options_set_core_dir(o, c->core_dir)) < 0)
        snprintf(err, errsize, "--core-dir: '%s': %s", c->core_dir, pm_strerror(rc));
    if (rc == 0 && (rc = pm_options_set_seccomp(o, c->seccomp)) == -ENOTSUP) {
        /* The library loads libseccomp on first use (os/deps.h); its
         * loader says why it could not. */
        char why[200];
        if (pm__dep_load(PM__DEP_SECCOMP, why, sizeof(why)) == 0)
            snprintf(why, sizeof(why), "libseccomp refused");
        snprintf(err, errsize, "--seccomp: %s (configure --with-seccomp, or install libseccomp); "
                               "only off is available", why);
    }
    rc = rc ? rc : pm_options_set_peer_timeout_ms(o, c->peer_timeout);
    rc = rc ? rc : pm_options_set_insecure_no_secret(o, c->insecure_no_secret);
    /* The peer addresses and key files follow in pmd_dconf_peer_files: they
     * need the secrets, which need reading files. */
    if (rc == 0)
        rc = pm_options_validate(o, err, errsize);
    if (rc < 0) {
        if (err[0] == '\0')
            snprintf(err, errsize, "invalid configuration: %s", pm_strerror(rc));
        pm_options_free(o);
        return rc;
    }
    *out = o;
    return 0;
}

/* One secret file into o, through secret memory: the key never lies in
 * ordinary memory of the daemon. */
static int add_secret_file(const char *path, int allow, pm_options *o, char *err, size_t errsize)
{
    char why[384];
    unsigned char *key = pm__secretmem_alloc(PM__PEER_KEY_LEN);
    if (key == NULL) {
        fail(err, errsize, "--secret-file: no memory for the key: %s", strerror(ENOMEM));
        return -ENOMEM;
    }
    int rc = pm__peer_key_load(path, allow, key, why, sizeof(why));
    if (rc == 0) {
        rc = pm_options_add_secret(o, key);
        if (rc == -EEXIST)
            snprintf(why, sizeof(why), "'%s' holds the same secret as the other --secret-file", path);
        else if (rc < 0)
            snprintf(why, sizeof(why), "'%s': %s", path, pm_strerror(rc));
    }
    pm__secretmem_free(key); /* wipes it */
    if (rc < 0) {
        fail(err, errsize, "--secret-file: %s", why);
        return rc == -ENOMEM ? rc : -EINVAL;
    }
    return 0;
}

int pmd_dconf_peer_files(const pmd_dconf *c, pm_options *o, char *err, size_t errsize)
{
    char why[384];
    int rc = 0;
    err[0] = '\0';
    /* Before any secret memory: sodium_malloc, under pm__secretmem_alloc,
     * needs the page size sodium_init reads. */
    if (sodium_init() < 0)
        return fail(err, errsize, "peer links: libsodium failed to initialise");
    for (size_t i = 0; i < c->nsecret_files && rc == 0; i++)
        rc = add_secret_file(c->secret_file[i], c->allow_insecure_secret_mode, o, err, errsize);
    if (rc < 0)
        return rc;
    if (c->node_key != NULL) {
        /* Created when missing: the host's identity from now on. The key
         * itself is checked and dropped; the cluster reads the file again. */
        unsigned char *key = pm__secretmem_alloc(PM__PEER_KEY_LEN);
        if (key == NULL) {
            fail(err, errsize, "--node-key: no memory for the key: %s", strerror(ENOMEM));
            return -ENOMEM;
        }
        rc = pm__peer_key_load(c->node_key, c->allow_insecure_secret_mode, key, why, sizeof(why));
        if (rc == -ENOENT)
            rc = pm__peer_key_create(c->node_key, NULL, why, sizeof(why));
        pm__secretmem_free(key);
        if (rc < 0) {
            fail(err, errsize, "--node-key: %s", why);
            return rc == -ENOMEM ? rc : -EINVAL;
        }
        rc = pm_options_set_node_key_file(o, c->node_key);
    }
    if (rc == 0 && c->peer_keys != NULL) {
        pm__pins pins;
        rc = pm__pins_load(c->peer_keys, &pins, why, sizeof(why));
        if (rc < 0) {
            fail(err, errsize, "--peer-keys: %s", why);
            return rc == -ENOMEM ? rc : -EINVAL;
        }
        pm__pins_free(&pins);
        rc = pm_options_set_peer_keys_file(o, c->peer_keys);
    }
    if (rc == 0 && c->peer_listen[0] != '\0')
        rc = pm_options_set_peer_listen(o, c->peer_listen);
    for (size_t i = 0; rc == 0 && i < c->npeers; i++)
        rc = pm_options_add_peer(o, c->peers[i]);
    if (rc == 0 && c->peers_dns[0] != '\0')
        rc = pm_options_set_peers_dns(o, c->peers_dns);
    /* The checks that need the peer options (base_port and hostname
     * with peer links), told in the daemon's flags. */
    if (rc == 0 && (rc = pm_options_validate(o, why, sizeof(why))) < 0)
        (void)retell(why, err, errsize);
    if (rc < 0 && err[0] == '\0')
        snprintf(err, errsize, "peer links: %s", pm_strerror(rc));
    return rc;
}
