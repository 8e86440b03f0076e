/* SPDX-License-Identifier: MIT */
/*
 * options.c - pm_options: setters with range checks, validation of the
 * combination, deep copy, and the "auto" worker count. The setters of how
 * the workers are confined (privileges, containment, limits):
 * options_contain.c.
 */
#define _GNU_SOURCE
#include "options.h"
#include "base/address.h"
#include "channel/bigmsg.h"

#include <limits.h>
#include <sched.h>
#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>

#include "base/defaults.h"
#include "channel/ring.h"
#include "os/seccomp_filter.h"

PM_EXTERN pm_options *pm_options_new(void)
{
    pm_options *o = calloc(1, sizeof(*o));
    if (o == NULL)
        return NULL;
    o->workers = PM__DEFAULT_WORKERS;
    strcpy(o->system_name, PM__DEFAULT_SYSTEM_NAME);
    strcpy(o->hostname, PM__DEFAULT_HOSTNAME);
    o->base_port = PM__DEFAULT_BASE_PORT;
    o->restart_policy = PM__DEFAULT_RESTART_POLICY;
    o->ready_timeout_ms = PM__DEFAULT_READY_TIMEOUT_MS;
    o->min_backoff_ms = PM__DEFAULT_MIN_BACKOFF_MS;
    o->max_backoff_ms = PM__DEFAULT_MAX_BACKOFF_MS;
    o->random_factor = PM__DEFAULT_RANDOM_FACTOR;
    o->max_restarts = PM__DEFAULT_MAX_RESTARTS;
    o->restart_window_ms = PM__DEFAULT_RESTART_WINDOW_MS;
    o->stop_timeout_ms = PM__DEFAULT_STOP_TIMEOUT_MS;
    o->ring_size = PM__RING_DEFAULT_CAP;
    o->max_message = PM__DEFAULT_MAX_MESSAGE;
    o->handle_signals = PM__DEFAULT_HANDLE_SIGNALS;
    o->heartbeat_timeout_ms = PM__DEFAULT_HEARTBEAT_TIMEOUT_MS;
    o->drain_timeout_ms = PM__DEFAULT_DRAIN_TIMEOUT_MS;
    o->fence_not_draining = PM__DEFAULT_FENCE_NOT_DRAINING;
    o->requests_per_worker = PM__DEFAULT_REQUESTS_PER_WORKER;
    o->request_queue_max = PM__DEFAULT_REQUEST_QUEUE_MAX;
    o->kill_on_timeout = PM__DEFAULT_KILL_ON_TIMEOUT;
    o->direct_lanes = PM__DEFAULT_DIRECT_LANES;
    o->ready_mode = PM__DEFAULT_READY_MODE;
    o->no_new_privs = PM__DEFAULT_NO_NEW_PRIVS;
    o->protect_supervisor = PM__DEFAULT_PROTECT_SUPERVISOR;
    o->seccomp = PM__DEFAULT_SECCOMP;
    o->seccomp_action = PM__DEFAULT_SECCOMP_ACTION;
    o->output = PM__DEFAULT_OUTPUT;
    o->peer_timeout_ms = PM__DEFAULT_PEER_TIMEOUT_MS;
    o->rekey_records = PM__DEFAULT_REKEY_RECORDS;
    o->rekey_ms = PM__DEFAULT_REKEY_MS;
    return o;
}

static void free_argv(char **argv)
{
    if (argv == NULL)
        return;
    for (char **p = argv; *p != NULL; p++)
        free(*p);
    free(argv);
}

PM_EXTERN void pm_options_free(pm_options *o)
{
    if (o == NULL)
        return;
    free(o->exec_path);
    free_argv(o->exec_argv);
    free(o->init_data);
    free(o->core_dir);
    if (o->seccomp_prog != NULL) {
        pm__seccomp_free(o->seccomp_prog);
        free(o->seccomp_prog);
    }
    pm__keyring_free(o->keys);
    free(o->node_key_file);
    free(o->peer_keys_file);
    free(o);
}

PM_EXTERN int pm_options_set_workers(pm_options *o, int n)
{
    if (o == NULL || n < 0 || n > PM_MAX_WORKERS)
        return -EINVAL;
    o->workers = n;
    return 0;
}

PM_EXTERN int pm_options_set_bootstrap(pm_options *o, int (*fn)(pm_node *, void *), void *arg)
{
    if (o == NULL || fn == NULL)
        return -EINVAL;
    o->bootstrap = fn;
    o->bootstrap_arg = arg;
    return 0;
}

static char **dup_argv(const char *path, char *const argv[])
{
    size_t n = 0;
    if (argv != NULL)
        while (argv[n] != NULL)
            n++;
    size_t count = n > 0 ? n : 1;
    char **out = calloc(count + 1, sizeof(*out));
    if (out == NULL)
        return NULL;
    for (size_t i = 0; i < count; i++) {
        out[i] = strdup(n > 0 ? argv[i] : path);
        if (out[i] == NULL) {
            free_argv(out);
            return NULL;
        }
    }
    return out;
}

PM_EXTERN int pm_options_set_exec(pm_options *o, const char *path, char *const argv[])
{
    if (o == NULL || path == NULL || path[0] == '\0')
        return -EINVAL;
    char *p = strdup(path);
    char **a = dup_argv(path, argv);
    if (p == NULL || a == NULL) {
        free(p);
        free_argv(a);
        return -ENOMEM;
    }
    free(o->exec_path);
    free_argv(o->exec_argv);
    o->exec_path = p;
    o->exec_argv = a;
    return 0;
}

PM_EXTERN int pm_options_set_pass_fds(pm_options *o, const int *fds, size_t n)
{
    if (o == NULL || n > PM__MAX_PASS_FDS || (n > 0 && fds == NULL))
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (fds[i] < 0)
            return -EINVAL;
    if (n > 0)
        memcpy(o->pass_fds, fds, n * sizeof(*fds));
    o->npass_fds = n;
    o->listen_env = 0;
    return 0;
}

PM_EXTERN int pm_options_set_listen_fds(pm_options *o, const int *fds, const char *const *names,
                                        size_t n)
{
    if (o == NULL || n > PM__MAX_PASS_FDS || (n > 0 && fds == NULL))
        return -EINVAL;
    for (size_t i = 0; names != NULL && i < n; i++) {
        const char *nm = names[i] != NULL ? names[i] : "unknown";
        size_t len = strlen(nm);
        if (len == 0 || len >= PM_NAME_MAX || strchr(nm, ':') != NULL || strchr(nm, '\n'))
            return -EINVAL;
    }
    int rc = pm_options_set_pass_fds(o, fds, n);
    if (rc < 0)
        return rc;
    for (size_t i = 0; i < n; i++)
        snprintf(o->fd_names[i], PM_NAME_MAX, "%s",
                 names != NULL && names[i] != NULL ? names[i] : "unknown");
    o->listen_env = 1;
    return 0;
}

PM_EXTERN int pm_options_set_ready_mode(pm_options *o, int mode)
{
    if (o == NULL || (mode != PM_READY_MESH && mode != PM_READY_EXEC && mode != PM_READY_NOTIFY))
        return -EINVAL;
    o->ready_mode = mode;
    return 0;
}

PM_EXTERN int pm_options_set_reap_orphans(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->reap_orphans = on;
    return 0;
}

PM_EXTERN int pm_options_set_system_name(pm_options *o, const char *s)
{
    if (o == NULL || !pm__name_valid(s))
        return -EINVAL;
    strcpy(o->system_name, s);
    return 0;
}

PM_EXTERN int pm_options_set_hostname(pm_options *o, const char *s)
{
    if (o == NULL || !pm__name_valid(s))
        return -EINVAL;
    strcpy(o->hostname, s);
    o->hostname_set = 1;
    return 0;
}

PM_EXTERN int pm_options_set_base_port(pm_options *o, int port)
{
    if (o == NULL || port < 0 || port > 65535)
        return -EINVAL;
    o->base_port = port;
    return 0;
}

PM_EXTERN int pm_options_set_init_data(pm_options *o, const void *data, size_t len)
{
    if (o == NULL || len > PM_MAX_INIT_DATA || (len > 0 && data == NULL))
        return -EINVAL;
    void *copy = NULL;
    if (len > 0) {
        copy = malloc(len);
        if (copy == NULL)
            return -ENOMEM;
        memcpy(copy, data, len);
    }
    free(o->init_data);
    o->init_data = copy;
    o->init_len = len;
    return 0;
}

PM_EXTERN int pm_options_set_restart_policy(pm_options *o, int policy)
{
    if (o == NULL || (policy != PM_RESTART_ALWAYS && policy != PM_RESTART_ON_FAILURE &&
                      policy != PM_RESTART_NEVER))
        return -EINVAL;
    o->restart_policy = policy;
    return 0;
}

#define PM__SET_MS(name, field, min)                   \
    PM_EXTERN int name(pm_options *o, int ms)          \
    {                                                  \
        if (o == NULL || ms < (min))                   \
            return -EINVAL;                            \
        o->field = ms;                                 \
        return 0;                                      \
    }

PM__SET_MS(pm_options_set_ready_timeout_ms, ready_timeout_ms, 1)
PM__SET_MS(pm_options_set_restart_min_backoff_ms, min_backoff_ms, 0)
PM__SET_MS(pm_options_set_restart_max_backoff_ms, max_backoff_ms, 0)
PM__SET_MS(pm_options_set_restart_window_ms, restart_window_ms, 0)
PM__SET_MS(pm_options_set_stop_timeout_ms, stop_timeout_ms, 0)
PM__SET_MS(pm_options_set_heartbeat_timeout_ms, heartbeat_timeout_ms, 0)
PM__SET_MS(pm_options_set_drain_timeout_ms, drain_timeout_ms, 0)

PM_EXTERN int pm_options_set_fence_not_draining(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->fence_not_draining = on;
    return 0;
}

PM_EXTERN int pm_options_set_restart_random_factor(pm_options *o, double f)
{
    /* Written so that NaN fails too. */
    if (o == NULL || !(f >= 0.0 && f <= 1.0))
        return -EINVAL;
    o->random_factor = f;
    return 0;
}

PM_EXTERN int pm_options_set_max_restarts(pm_options *o, int n)
{
    if (o == NULL || n < -1 || n > PM_MAX_RESTARTS_LIMIT)
        return -EINVAL;
    o->max_restarts = n;
    return 0;
}

PM_EXTERN int pm_options_set_ring_size(pm_options *o, size_t bytes)
{
    if (o == NULL || bytes < PM__MIN_RING_SIZE || bytes > PM__RING_MAX_CAP ||
        (bytes & (bytes - 1)) != 0)
        return -EINVAL;
    o->ring_size = bytes;
    return 0;
}

PM_EXTERN int pm_options_set_max_message(pm_options *o, size_t bytes)
{
    if (o == NULL || bytes < PM_MAX_PAYLOAD || bytes > PM__BIGMSG_MAX)
        return -EINVAL;
    o->max_message = bytes;
    return 0;
}

PM_EXTERN int pm_options_set_on_permanently_down(
    pm_options *o, void (*cb)(pm_cluster *, unsigned, const pm_address *, unsigned, void *),
    void *arg)
{
    if (o == NULL)
        return -EINVAL;
    o->on_down = cb;
    o->on_down_arg = arg;
    return 0;
}

PM_EXTERN int pm_options_set_on_event(pm_options *o,
                                      void (*cb)(pm_cluster *, const pm_event *, void *),
                                      void *arg)
{
    if (o == NULL)
        return -EINVAL;
    o->on_event = cb;
    o->on_event_arg = arg;
    return 0;
}

PM_EXTERN int pm_options_set_on_message(pm_options *o,
                                        void (*cb)(pm_cluster *, const pm_message *, void *),
                                        void *arg)
{
    if (o == NULL)
        return -EINVAL;
    o->on_message = cb;
    o->on_message_arg = arg;
    return 0;
}

PM_EXTERN int pm_options_set_hub_spin_us(pm_options *o, int us)
{
    if (o == NULL || us < 0 || us > 1000000)
        return -EINVAL;
    o->hub_spin_us = (unsigned)us;
    return 0;
}

PM_EXTERN int pm_options_set_direct_lanes(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->direct_lanes = on;
    return 0;
}

PM_EXTERN int pm_options_set_warm_standby(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->warm_standby = on;
    return 0;
}

PM_EXTERN int pm_options_set_handle_signals(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->handle_signals = on;
    return 0;
}

/* ------------------------------------------------------------------ output */

PM_EXTERN int pm_options_set_output(pm_options *o, int mode)
{
    if (o == NULL || (mode != PM_OUTPUT_INHERIT && mode != PM_OUTPUT_CAPTURE))
        return -EINVAL;
    o->output = mode;
    return 0;
}

PM_EXTERN int pm_options_set_on_output(pm_options *o,
                                       void (*cb)(pm_cluster *, const pm_output_line *, void *),
                                       void *arg)
{
    if (o == NULL)
        return -EINVAL;
    o->on_output = cb;
    o->on_output_arg = arg;
    return 0;
}

/* ------------------------------------------------------------------ peer links */

int pm__options_peer_mode(const pm_options *o)
{
    return o->peer_listen[0] != '\0' || o->npeers > 0 || o->peers_dns[0] != '\0';
}

int pm__peer_addr_valid(const char *s)
{
    if (s == NULL)
        return 0;
    size_t len = strnlen(s, PM__PEER_ADDR_MAX);
    const char *colon = strrchr(s, ':');
    if (len >= PM__PEER_ADDR_MAX || colon == NULL)
        return 0;
    size_t hl = (size_t)(colon - s);
    const char *port = colon + 1;
    size_t pl = len - hl - 1;
    if (pl == 0 || pl > 5 || port[0] == '0')
        return 0;
    long p = 0;
    for (size_t i = 0; i < pl; i++) {
        if (port[i] < '0' || port[i] > '9')
            return 0;
        p = p * 10 + (port[i] - '0');
    }
    if (p < 1 || p > 65535)
        return 0;
    const char *h = s;
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2; /* an IPv6 literal: its colons are inside the brackets */
    } else if (memchr(h, ':', hl) != NULL) {
        return 0;
    }
    if (hl == 0 || hl > 255)
        return 0;
    for (size_t i = 0; i < hl; i++) {
        unsigned char c = (unsigned char)h[i];
        if (c <= ' ' || c == 0x7f || c == '/' || c == '[' || c == ']')
            return 0;
    }
    return 1;
}

static int set_addr(char *dst, const char *s)
{
    if (s == NULL) {
        dst[0] = '\0';
        return 0;
    }
    if (!pm__peer_addr_valid(s))
        return -EINVAL;
    strcpy(dst, s);
    return 0;
}

PM_EXTERN int pm_options_set_peer_listen(pm_options *o, const char *host_port)
{
    return o == NULL ? -EINVAL : set_addr(o->peer_listen, host_port);
}

PM_EXTERN int pm_options_add_peer(pm_options *o, const char *host_port)
{
    if (o == NULL || !pm__peer_addr_valid(host_port))
        return -EINVAL;
    for (size_t i = 0; i < o->npeers; i++)
        if (strcmp(o->peers[i], host_port) == 0)
            return -EEXIST;
    if (o->npeers == PM__MAX_PEERS)
        return -ENOSPC;
    strcpy(o->peers[o->npeers++], host_port);
    return 0;
}

PM_EXTERN int pm_options_set_peers_dns(pm_options *o, const char *name_port)
{
    return o == NULL ? -EINVAL : set_addr(o->peers_dns, name_port);
}

PM_EXTERN int pm_options_add_secret(pm_options *o, const unsigned char key[32])
{
    if (o == NULL || key == NULL)
        return -EINVAL;
    if (o->keys == NULL) {
        int rc = pm__keyring_new(&o->keys);
        if (rc < 0)
            return rc;
    }
    return pm__keyring_add_secret(o->keys, key);
}

PM_EXTERN int pm_options_set_insecure_no_secret(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->insecure_no_secret = on;
    return 0;
}

static int set_path(char **dst, const char *path)
{
    char *copy = NULL;
    if (path != NULL) {
        if (path[0] == '\0')
            return -EINVAL;
        copy = strdup(path);
        if (copy == NULL)
            return -ENOMEM;
    }
    free(*dst);
    *dst = copy;
    return 0;
}

PM_EXTERN int pm_options_set_node_key_file(pm_options *o, const char *path)
{
    return o == NULL ? -EINVAL : set_path(&o->node_key_file, path);
}

PM_EXTERN int pm_options_set_peer_keys_file(pm_options *o, const char *path)
{
    return o == NULL ? -EINVAL : set_path(&o->peer_keys_file, path);
}

PM__SET_MS(pm_options_set_peer_timeout_ms, peer_timeout_ms, 1)

/* ------------------------------------------------------------------ CPUs */

int pm__cpu_max_parse(const char *text)
{
    char quota[32];
    unsigned long long period;
    char tail;
    if (text == NULL || sscanf(text, "%31s %llu %c", quota, &period, &tail) != 2)
        return -EINVAL;
    if (strcmp(quota, "max") == 0)
        return period > 0 ? 0 : -EINVAL;
    char *end;
    errno = 0;
    unsigned long long q = strtoull(quota, &end, 10);
    if (*end != '\0' || errno != 0 || quota[0] == '-' || q == 0 || period == 0)
        return -EINVAL;
    unsigned long long cpus = (q + period - 1) / period;
    return cpus > INT_MAX ? INT_MAX : (int)cpus;
}

/* The tightest cpu.max from this process's cgroup up to the root; 0 when
 * none applies or cgroup v2 is not mounted where we look. */
static int cgroup_cpus(void)
{
    char line[4096], path[4096 + 64];
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return 0;
    char *rel = NULL;
    while (fgets(line, sizeof(line), f) != NULL) {
        if (strncmp(line, "0::", 3) == 0) { /* the cgroup v2 line */
            rel = line + 3;
            rel[strcspn(rel, "\n")] = '\0';
            break;
        }
    }
    fclose(f);
    if (rel == NULL)
        return 0;
    int best = 0;
    for (;;) {
        snprintf(path, sizeof(path), "/sys/fs/cgroup%s/cpu.max", strcmp(rel, "/") == 0 ? "" : rel);
        FILE *m = fopen(path, "re");
        if (m != NULL) {
            char buf[128];
            if (fgets(buf, sizeof(buf), m) != NULL) {
                int n = pm__cpu_max_parse(buf);
                if (n > 0 && (best == 0 || n < best))
                    best = n;
            }
            fclose(m);
        }
        char *slash = strrchr(rel, '/');
        if (slash == NULL || slash == rel)
            break;
        *slash = '\0';
    }
    return best;
}

int pm__cpus_available(void)
{
    cpu_set_t set;
    int n = 0;
    if (sched_getaffinity(0, sizeof(set), &set) == 0)
        n = CPU_COUNT(&set);
    if (n <= 0) {
        long c = sysconf(_SC_NPROCESSORS_ONLN);
        n = c > 0 ? (int)c : 1;
    }
    int q = cgroup_cpus();
    if (q > 0 && q < n)
        n = q;
    return n > PM_MAX_WORKERS ? PM_MAX_WORKERS : n;
}

int pm__options_workers(const pm_options *o)
{
    return o->workers > 0 ? o->workers : pm__cpus_available();
}

/* ------------------------------------------------------------------ validate */

static int why_fmt(char *why, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));

static int why_fmt(char *why, size_t size, const char *fmt, ...)
{
    if (why != NULL && size > 0) {
        va_list ap;
        va_start(ap, fmt);
        vsnprintf(why, size, fmt, ap);
        va_end(ap);
    }
    return -EINVAL;
}

/* The privilege options against each other and against who we run as. */
static int validate_privileges(const pm_options *o, int workers, char *why, size_t size)
{
    uid_t me = geteuid();
    int drop = o->set_user || o->uid_count > 0;
    if (drop && me != 0) {
        (void)why_fmt(why, size, "%s: changing the workers' user needs root; procmesh runs as uid %u",
                      o->set_user ? "user" : "uid_range", (unsigned)me);
        return -EPERM;
    }
    if (o->uid_count > 0 && o->uid_count < (unsigned)workers)
        return why_fmt(why, size, "uid_range: %u uids from %u for %d workers; every slot needs its own",
                       o->uid_count, (unsigned)o->uid_first, workers);
    if (o->seccomp != PM_SECCOMP_OFF && !pm__seccomp_available())
        return why_fmt(why, size, "seccomp: procmesh was built without libseccomp");
    if (o->seccomp == PM_SECCOMP_STRICT && o->exec_path != NULL)
        return why_fmt(why, size, "seccomp: strict is for fork-mode workers (an exec'd program's "
                                  "loader needs more calls); use basic in exec mode");
    /* Without no_new_privs the kernel loads a filter only for a holder of
     * CAP_SYS_ADMIN, which a worker gives up with its uid. */
    if (o->seccomp != PM_SECCOMP_OFF && !o->no_new_privs && (drop || me != 0))
        return why_fmt(why, size, "seccomp: needs no_new_privs when the workers %s",
                       drop ? "change user" : "do not run as root");
    return 0;
}

PM_EXTERN int pm_options_validate(const pm_options *o, char *why, size_t size)
{
    if (why != NULL && size > 0)
        why[0] = '\0';
    if (o == NULL)
        return why_fmt(why, size, "options: NULL");
    if (o->bootstrap == NULL && o->exec_path == NULL)
        return why_fmt(why, size, "bootstrap/exec: neither is set; exactly one is required");
    if (o->bootstrap != NULL && o->exec_path != NULL)
        return why_fmt(why, size, "bootstrap/exec: both are set (exec \"%s\"); exactly one is required",
                       o->exec_path);
    if (o->npass_fds > 0 && o->bootstrap != NULL)
        return why_fmt(why, size, "pass_fds: %zu fds given in fork mode; they apply to exec mode only",
                       o->npass_fds);
    int workers = pm__options_workers(o);
    if (o->base_port + workers - 1 > 65535)
        return why_fmt(why, size, "base_port: %d + %d workers - 1 exceeds 65535", o->base_port,
                       workers);
    if (o->ready_mode != PM_READY_MESH && o->exec_path == NULL)
        return why_fmt(why, size, "ready_mode: exec and notify readiness need exec mode");
    if (o->warm_standby && o->exec_path != NULL)
        return why_fmt(why, size, "warm_standby: is for fork-mode workers (exec mode starts a "
                                  "replacement by exec, after the crash)");
    if (o->warm_standby && o->output == PM_OUTPUT_CAPTURE)
        return why_fmt(why, size, "warm_standby: not with captured output (a standby would need "
                                  "its pipes before the incarnation it replaces has ended)");
    if (o->reap_orphans && !o->handle_signals)
        return why_fmt(why, size, "reap_orphans: needs handle_signals (SIGCHLD)");
    if (o->max_backoff_ms < o->min_backoff_ms)
        return why_fmt(why, size, "restart_max_backoff_ms: %d is below restart_min_backoff_ms %d",
                       o->max_backoff_ms, o->min_backoff_ms);
    for (size_t i = 0; i < o->npass_fds; i++)
        for (size_t j = 0; j < i; j++)
            if (o->pass_fds[i] == o->pass_fds[j])
                return why_fmt(why, size, "pass_fds: fd %d is given twice", o->pass_fds[i]);
    unsigned nsecrets = pm__keyring_nsecrets(o->keys);
    if (o->insecure_no_secret && nsecrets > 0)
        return why_fmt(why, size, "insecure_no_secret: set together with %u pre-shared secret(s)", nsecrets);
    int peer_mode = pm__options_peer_mode(o);
    if (peer_mode && nsecrets == 0 && !o->insecure_no_secret)
        return why_fmt(why, size,
                       "peer links: no pre-shared secret (pm_options_add_secret), and "
                       "insecure_no_secret is not set");
    if (peer_mode && o->base_port < 1)
        return why_fmt(why, size, "base_port: 0 with peer links (port 0 is the supervisor)");
    if (peer_mode && strcmp(o->hostname, "main") == 0)
        return why_fmt(why, size, "hostname: 'main' with peer links (it names the local "
                                  "supervisor)");
    if (o->core_dir != NULL) {
        struct stat st;
        int err = stat(o->core_dir, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (err != 0) {
            (void)why_fmt(why, size, "core_dir: '%s': %s", o->core_dir, strerror(err));
            return -err;
        }
    }
    return validate_privileges(o, workers, why, size);
}

pm_options *pm__options_dup(const pm_options *o)
{
    pm_options *c = malloc(sizeof(*c));
    if (c == NULL)
        return NULL;
    *c = *o;
    c->exec_path = NULL;
    c->exec_argv = NULL;
    c->init_data = NULL;
    c->core_dir = NULL;
    c->seccomp_prog = NULL; /* built for one supervisor; the copy builds its own */
    c->keys = NULL;
    c->node_key_file = NULL;
    c->peer_keys_file = NULL;
    if (o->keys != NULL && (c->keys = pm__keyring_dup(o->keys)) == NULL)
        goto fail;
    if (set_path(&c->node_key_file, o->node_key_file) < 0 ||
        set_path(&c->peer_keys_file, o->peer_keys_file) < 0)
        goto fail;
    if (o->exec_path != NULL && pm_options_set_exec(c, o->exec_path, o->exec_argv) < 0)
        goto fail;
    if (o->init_len > 0 && pm_options_set_init_data(c, o->init_data, o->init_len) < 0)
        goto fail;
    if (o->core_dir != NULL && (c->core_dir = strdup(o->core_dir)) == NULL)
        goto fail;
    return c;
fail:
    pm_options_free(c);
    return NULL;
}
