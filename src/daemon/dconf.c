/* SPDX-License-Identifier: MIT */
/* dconf.c - the daemon's `run` options: flags, PROCMESH_* variables,
 * defaults and validation; see dconf.h. */
#define _GNU_SOURCE
#include "dconf.h"

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

#include "defaults.h"
#include "peerkeys.h"

static int fail(char *err, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));

static int fail(char *err, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(err, size, fmt, ap);
    va_end(ap);
    return -EINVAL;
}

/* Where a value came from, for the error message. */
typedef struct src {
    const char *flag;  /* "--workers" */
    const char *var;   /* "PROCMESH_WORKERS" or NULL when from the flag */
} src;

static const char *who(const src *s, char *buf, size_t size)
{
    if (s->var != NULL)
        snprintf(buf, size, "%s (from %s)", s->flag, s->var);
    else
        snprintf(buf, size, "%s", s->flag);
    return buf;
}

static int int_value(const src *s, const char *v, long min, long max, int *out, char *err,
                     size_t size)
{
    char w[96];
    char *end;
    errno = 0;
    long x = strtol(v, &end, 10);
    if (*v == '\0' || *end != '\0' || errno != 0 || x < min || x > max || isspace((unsigned char)*v))
        return fail(err, size, "%s: '%s' is not a whole number in %ld..%ld", who(s, w, sizeof(w)), v,
                    min, max);
    *out = (int)x;
    return 0;
}

static int name_value(const src *s, const char *v, char out[PM_NAME_MAX], char *err, size_t size)
{
    /* The rule for names is the library's; its setter applies it (its pm__
     * check is not exported from the shared library the daemon links). */
    char w[96];
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    int rc = pm_options_set_hostname(o, v);
    pm_options_free(o);
    if (rc < 0)
        return fail(err, size, "%s: '%s' must be 1..%d characters of [A-Za-z0-9._-]",
                    who(s, w, sizeof(w)), v, PM_NAME_MAX - 1);
    strcpy(out, v);
    return 0;
}

static int choice(const src *s, const char *v, const char *const *names, const int *values,
                  const char *allowed, int *out, char *err, size_t size)
{
    char w[96];
    for (size_t i = 0; names[i] != NULL; i++) {
        if (strcmp(v, names[i]) == 0) {
            *out = values[i];
            return 0;
        }
    }
    return fail(err, size, "%s: '%s' is not one of %s", who(s, w, sizeof(w)), v, allowed);
}

/* HOST:PORT, with [v6]:PORT. */
static int host_port(const src *s, const char *v, char *host, size_t hostsize, unsigned *port,
                     char *err, size_t size)
{
    char w[96];
    const char *colon = strrchr(v, ':');
    if (colon == NULL || colon == v || (size_t)(colon - v) >= hostsize)
        return fail(err, size, "%s: '%s' is not HOST:PORT", who(s, w, sizeof(w)), v);
    const char *h = v;
    size_t hl = (size_t)(colon - v);
    if (h[0] == '[') {
        if (hl < 3 || h[hl - 1] != ']')
            return fail(err, size, "%s: '%s' is not HOST:PORT", who(s, w, sizeof(w)), v);
        h++;
        hl -= 2;
    }
    memcpy(host, h, hl);
    host[hl] = '\0';
    int p;
    if (int_value(s, colon + 1, 0, 65535, &p, err, size) < 0)
        return fail(err, size, "%s: '%s' has no port in 0..65535", who(s, w, sizeof(w)), v);
    *port = (unsigned)p;
    return 0;
}

/* [NAME=]tcp:HOST:PORT | [NAME=]unix:PATH */
static int listen_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    if (c->nlisten == PMD_MAX_LISTEN)
        return fail(err, size, "%s: at most %d listening sockets", who(s, w, sizeof(w)),
                    PMD_MAX_LISTEN);
    pmd_listen_spec *l = &c->listen[c->nlisten];
    memset(l, 0, sizeof(*l));
    const char *eq = strchr(v, '=');
    const char *spec = v;
    if (eq != NULL && strncmp(v, "tcp:", 4) != 0 && strncmp(v, "unix:", 5) != 0) {
        size_t n = (size_t)(eq - v);
        if (n == 0 || n >= PM_NAME_MAX || memchr(v, ':', n) != NULL)
            return fail(err, size, "%s: '%s': the name before '=' must be 1..63 characters without ':'",
                        who(s, w, sizeof(w)), v);
        memcpy(l->name, v, n);
        spec = eq + 1;
    } else {
        snprintf(l->name, sizeof(l->name), "listen%zu", c->nlisten);
    }
    if (strncmp(spec, "unix:", 5) == 0) {
        size_t n = strlen(spec + 5);
        if (n == 0 || n >= sizeof(l->path))
            return fail(err, size, "%s: '%s': the unix socket path must be 1..%zu bytes",
                        who(s, w, sizeof(w)), v, sizeof(l->path) - 1);
        l->unix_socket = 1;
        strcpy(l->path, spec + 5);
    } else if (strncmp(spec, "tcp:", 4) == 0) {
        if (host_port(s, spec + 4, l->host, sizeof(l->host), &l->port, err, size) < 0)
            return fail(err, size, "%s: '%s' is not [NAME=]tcp:HOST:PORT", who(s, w, sizeof(w)), v);
    } else {
        return fail(err, size, "%s: '%s' is not [NAME=]tcp:HOST:PORT or [NAME=]unix:PATH",
                    who(s, w, sizeof(w)), v);
    }
    c->nlisten++;
    return 0;
}

static int init_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    free(c->init_data);
    c->init_data = NULL;
    c->init_len = 0;
    if (v[0] != '@') {
        size_t n = strlen(v);
        if (n > PM_MAX_INIT_DATA)
            return fail(err, size, "%s: %zu bytes, at most %d", who(s, w, sizeof(w)), n,
                        PM_MAX_INIT_DATA);
        c->init_data = strdup(v);
        c->init_len = n;
        return c->init_data != NULL ? 0 : -ENOMEM;
    }
    FILE *f = fopen(v + 1, "rb");
    if (f == NULL)
        return fail(err, size, "%s: cannot read '%s': %s", who(s, w, sizeof(w)), v + 1,
                    strerror(errno));
    char *buf = malloc(PM_MAX_INIT_DATA + 1);
    size_t n = buf != NULL ? fread(buf, 1, PM_MAX_INIT_DATA + 1, f) : 0;
    fclose(f);
    if (buf == NULL)
        return -ENOMEM;
    if (n > PM_MAX_INIT_DATA) {
        free(buf);
        return fail(err, size, "%s: '%s' is larger than %d bytes", who(s, w, sizeof(w)), v + 1,
                    PM_MAX_INIT_DATA);
    }
    c->init_data = buf;
    c->init_len = n;
    return 0;
}

/* SIZE: bytes, or with a K, M, G, T suffix (powers of 1024); "max" = none. */
static int size_value(const src *s, const char *v, uint64_t *out, char *err, size_t size)
{
    char w[96];
    if (strcmp(v, "max") == 0) {
        *out = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    int shift = 0;
    if (*end != '\0' && end[1] == '\0') {
        const char *u = strchr("KMGT", toupper((unsigned char)*end));
        shift = u != NULL ? 10 * (int)(u - "KMGT" + 1) : -1;
        end++;
    }
    if (*v == '\0' || !isdigit((unsigned char)*v) || *end != '\0' || errno != 0 || shift < 0 ||
        x > (UINT64_MAX >> shift) || (x << shift) < 1048576)
        return fail(err, size, "%s: '%s' is not max or a size of at least 1M (bytes, or with a "
                    "K, M, G or T suffix)", who(s, w, sizeof(w)), v);
    *out = (uint64_t)x << shift;
    return 0;
}

/* QUOTA[/PERIOD] in microseconds (period 100000 by default), or max. */
static int cpu_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    if (strcmp(v, "max") == 0) {
        c->cpu_quota = c->cpu_period = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long q = strtoull(v, &end, 10), p = 100000;
    if (*end == '/')
        p = strtoull(end + 1, &end, 10);
    if (!isdigit((unsigned char)*v) || *end != '\0' || errno != 0 || p < 1000 || p > 1000000 ||
        q < 1000 || q > 1000000ULL * 1000000)
        return fail(err, size, "%s: '%s' is not max or QUOTA[/PERIOD] in microseconds (quota at "
                    "least 1000, period 1000..1000000; 2 CPUs: 200000/100000)",
                    who(s, w, sizeof(w)), v);
    c->cpu_quota = q;
    c->cpu_period = p;
    return 0;
}

/* NAME=VALUE: VALUE is N, SOFT:HARD, or unlimited for either. */
static int rlimit_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    static const struct {
        const char *name;
        int res;
    } names[] = {
        {"as", RLIMIT_AS}, {"core", RLIMIT_CORE}, {"cpu", RLIMIT_CPU}, {"data", RLIMIT_DATA},
        {"fsize", RLIMIT_FSIZE}, {"locks", RLIMIT_LOCKS}, {"memlock", RLIMIT_MEMLOCK},
        {"msgqueue", RLIMIT_MSGQUEUE}, {"nice", RLIMIT_NICE}, {"nofile", RLIMIT_NOFILE},
        {"nproc", RLIMIT_NPROC}, {"rss", RLIMIT_RSS}, {"rtprio", RLIMIT_RTPRIO},
        {"rttime", RLIMIT_RTTIME}, {"sigpending", RLIMIT_SIGPENDING}, {"stack", RLIMIT_STACK},
    };
    char w[96];
    const char *eq = strchr(v, '=');
    int res = -1;
    for (size_t i = 0; eq != NULL && i < sizeof(names) / sizeof(names[0]); i++)
        if (strlen(names[i].name) == (size_t)(eq - v) && strncmp(v, names[i].name, (size_t)(eq - v)) == 0)
            res = names[i].res;
    if (res < 0)
        return fail(err, size, "%s: '%s' is not NAME=VALUE with NAME one of as, core, cpu, data, "
                    "fsize, locks, memlock, msgqueue, nice, nofile, nproc, rss, rtprio, rttime, "
                    "sigpending, stack", who(s, w, sizeof(w)), v);
    uint64_t lim[2];
    const char *p = eq + 1;
    for (int k = 0; k < 2; k++) {
        char *end;
        if (strncmp(p, "unlimited", 9) == 0) {
            lim[k] = PM_RLIM_INFINITY;
            end = (char *)p + 9;
        } else {
            errno = 0;
            lim[k] = isdigit((unsigned char)*p) ? strtoull(p, &end, 10) : (end = (char *)p, 0);
            if (end == p || errno != 0)
                break;
        }
        p = end;
        if (k == 0 && *p == '\0')
            lim[1] = lim[0];
        if (*p == '\0') {
            if (lim[0] > lim[1])
                break;
            c->rlimit_set[res] = 1;
            c->rlimit_soft[res] = lim[0];
            c->rlimit_hard[res] = lim[1];
            return 0;
        }
        if (k == 0 && *p == ':')
            p++;
        else
            break;
    }
    return fail(err, size, "%s: '%s': the value must be N, SOFT:HARD (soft at most hard) or "
                "unlimited", who(s, w, sizeof(w)), v);
}

/* A user or group: a number, or a name from the user/group database. */
static int id_value(const char *v, int group, unsigned *out, unsigned *primary_gid)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (*v != '\0' && isdigit((unsigned char)*v) && *end == '\0' && errno == 0 &&
        x < 0xffffffffUL) {
        *out = (unsigned)x;
        if (primary_gid != NULL) {
            struct passwd *pw = getpwuid((uid_t)x);
            *primary_gid = pw != NULL ? (unsigned)pw->pw_gid : (unsigned)x;
        }
        return 0;
    }
    if (group) {
        struct group *gr = getgrnam(v);
        if (gr == NULL)
            return -ENOENT;
        *out = (unsigned)gr->gr_gid;
        return 0;
    }
    struct passwd *pw = getpwnam(v);
    if (pw == NULL)
        return -ENOENT;
    *out = (unsigned)pw->pw_uid;
    if (primary_gid != NULL)
        *primary_gid = (unsigned)pw->pw_gid;
    return 0;
}

/* USER[:GROUP]; without GROUP, the user's primary group (or, for a number
 * with no account, the same number). */
static int user_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96], name[256];
    const char *colon = strchr(v, ':');
    size_t n = colon != NULL ? (size_t)(colon - v) : strlen(v);
    if (n == 0 || n >= sizeof(name) || (colon != NULL && colon[1] == '\0'))
        return fail(err, size, "%s: '%s' is not USER[:GROUP]", who(s, w, sizeof(w)), v);
    memcpy(name, v, n);
    name[n] = '\0';
    unsigned uid, gid;
    if (id_value(name, 0, &uid, &gid) < 0)
        return fail(err, size, "%s: no user '%s'", who(s, w, sizeof(w)), name);
    if (colon != NULL && id_value(colon + 1, 1, &gid, NULL) < 0)
        return fail(err, size, "%s: no group '%s'", who(s, w, sizeof(w)), colon + 1);
    if (uid == 0 || gid == 0)
        return fail(err, size, "%s: '%s' is root (uid or gid 0): the workers would keep every privilege",
                    who(s, w, sizeof(w)), v);
    c->user = 1;
    c->uid = uid;
    c->gid = gid;
    return 0;
}

/* FIRST:COUNT */
static int uid_range_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    unsigned long first, count;
    char *end;
    errno = 0;
    first = strtoul(v, &end, 10);
    int ok = isdigit((unsigned char)*v) && *end == ':' && errno == 0;
    const char *cs = ok ? end + 1 : v;
    count = ok ? strtoul(cs, &end, 10) : 0;
    ok = ok && isdigit((unsigned char)*cs) && *end == '\0' && errno == 0;
    if (!ok || first == 0 || count == 0 || count > PM_MAX_WORKERS || first + count > 0xffffffffUL)
        return fail(err, size,
                    "%s: '%s' is not FIRST:COUNT with FIRST >= 1, COUNT in 1..%d, below uid 4294967295",
                    who(s, w, sizeof(w)), v, PM_MAX_WORKERS);
    c->uid_first = (unsigned)first;
    c->uid_count = (unsigned)count;
    return 0;
}

/* SIZE with an optional K, M or G suffix (powers of 1024), within
 * lo..hi bytes. */
static int msg_size_value(const src *s, const char *v, size_t lo, size_t hi, size_t *out, char *err,
                      size_t size)
{
    char w[96];
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v, &end, 10);
    unsigned shift = 0;
    if (*end == 'K' || *end == 'k')
        shift = 10;
    else if (*end == 'M' || *end == 'm')
        shift = 20;
    else if (*end == 'G' || *end == 'g')
        shift = 30;
    if (shift != 0)
        end++;
    if (!isdigit((unsigned char)*v) || *end != '\0' || errno != 0 || x > (hi >> shift) ||
        (x << shift) < lo)
        return fail(err, size, "%s: '%s' is not a size in %zu..%zu bytes (suffix K, M or G allowed)",
                    who(s, w, sizeof(w)), v, lo, hi);
    *out = (size_t)(x << shift);
    return 0;
}

enum opt_id {
    O_WORKERS, O_RESTART, O_BACKOFF_MIN, O_BACKOFF_MAX, O_JITTER, O_MAX_RESTARTS,
    O_RESTART_WINDOW, O_READY_TIMEOUT, O_HEARTBEAT, O_STOP_TIMEOUT, O_SYSTEM_NAME, O_HOSTNAME,
    O_BASE_PORT, O_INIT_DATA, O_READY, O_LISTEN, O_HEALTH, O_MIN_READY, O_LOG_FORMAT,
    O_LOG_LEVEL, O_DRAIN_TIMEOUT, O_FENCE_NOT_DRAINING, O_MEMORY_MAX, O_PIDS_MAX, O_CPU_MAX,
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

/* HOST:PORT as the library takes it (its check is not exported from the
 * shared library: its setter applies it). */
static int peer_addr(const src *s, const char *v, char out[PMD_PEER_ADDR_MAX], char *err, size_t size)
{
    char w[96];
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    int rc = pm_options_set_peer_listen(o, v);
    pm_options_free(o);
    if (rc < 0)
        return fail(err, size,
                    "%s: '%s' is not HOST:PORT (a host name, IPv4 address or [IPv6], port 1..65535)",
                    who(s, w, sizeof(w)), v);
    strcpy(out, v);
    return 0;
}

/* --peers HOST:PORT[,HOST:PORT...] */
static int peers_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    const char *p = v;
    c->npeers = 0;
    for (;;) {
        size_t n = strcspn(p, ",");
        char one[PMD_PEER_ADDR_MAX];
        if (n == 0 || n >= sizeof(one))
            return fail(err, size, "%s: '%s' is not HOST:PORT[,HOST:PORT...]", who(s, w, sizeof(w)), v);
        if (c->npeers == PMD_MAX_PEERS)
            return fail(err, size, "%s: at most %d peers", who(s, w, sizeof(w)), PMD_MAX_PEERS);
        memcpy(one, p, n);
        one[n] = '\0';
        int rc = peer_addr(s, one, c->peers[c->npeers], err, size);
        if (rc < 0)
            return rc;
        for (size_t i = 0; i < c->npeers; i++)
            if (strcmp(c->peers[i], one) == 0)
                return fail(err, size, "%s: '%s' is given twice", who(s, w, sizeof(w)), one);
        c->npeers++;
        if (p[n] == '\0')
            return 0;
        p += n + 1;
    }
}

static int path_value(const src *s, const char *v, char **out, char *err, size_t size)
{
    char w[96];
    if (v[0] == '\0')
        return fail(err, size, "%s: empty file name", who(s, w, sizeof(w)));
    char *copy = strdup(v);
    if (copy == NULL)
        return -ENOMEM;
    free(*out);
    *out = copy;
    return 0;
}

static int apply(pmd_dconf *c, int id, const src *s, const char *v, char *err, size_t size)
{
    char w[96];
    switch (id) {
    case O_WORKERS:
        if (strcmp(v, "auto") == 0) {
            c->workers = 0;
            return 0;
        }
        if (int_value(s, v, 1, PM_MAX_WORKERS, &c->workers, err, size) < 0)
            return fail(err, size, "%s: '%s' is not auto or a whole number in 1..%d",
                        who(s, w, sizeof(w)), v, PM_MAX_WORKERS);
        return 0;
    case O_RESTART: {
        static const char *const n[] = {"always", "on-failure", "never", NULL};
        static const int val[] = {PM_RESTART_ALWAYS, PM_RESTART_ON_FAILURE, PM_RESTART_NEVER};
        return choice(s, v, n, val, "always, on-failure, never", &c->restart, err, size);
    }
    case O_BACKOFF_MIN:
        return int_value(s, v, 0, INT_MAX, &c->backoff_min, err, size);
    case O_BACKOFF_MAX:
        return int_value(s, v, 0, INT_MAX, &c->backoff_max, err, size);
    case O_JITTER: {
        char *end;
        errno = 0;
        double f = strtod(v, &end);
        if (*v == '\0' || *end != '\0' || errno != 0 || !(f >= 0.0 && f <= 1.0))
            return fail(err, size, "%s: '%s' is not a number in 0..1", who(s, w, sizeof(w)), v);
        c->jitter = f;
        return 0;
    }
    case O_MAX_RESTARTS:
        return int_value(s, v, -1, PM_MAX_RESTARTS_LIMIT, &c->max_restarts, err, size);
    case O_RESTART_WINDOW:
        return int_value(s, v, 0, INT_MAX, &c->restart_window, err, size);
    case O_READY_TIMEOUT:
        return int_value(s, v, 1, INT_MAX, &c->ready_timeout, err, size);
    case O_HEARTBEAT:
        return int_value(s, v, 0, INT_MAX, &c->heartbeat_timeout, err, size);
    case O_STOP_TIMEOUT:
        return int_value(s, v, 0, INT_MAX, &c->stop_timeout, err, size);
    case O_SYSTEM_NAME:
        return name_value(s, v, c->system_name, err, size);
    case O_HOSTNAME:
        return name_value(s, v, c->hostname, err, size);
    case O_BASE_PORT:
        return int_value(s, v, 0, 65535, &c->base_port, err, size);
    case O_INIT_DATA:
        return init_value(s, v, c, err, size);
    case O_READY: {
        static const char *const n[] = {"mesh", "notify", "exec", NULL};
        static const int val[] = {PM_READY_MESH, PM_READY_NOTIFY, PM_READY_EXEC};
        return choice(s, v, n, val, "mesh, notify, exec", &c->ready, err, size);
    }
    case O_LISTEN:
        return listen_value(s, v, c, err, size);
    case O_HEALTH:
        return host_port(s, v, c->health_host, sizeof(c->health_host), &c->health_port, err, size);
    case O_MIN_READY:
        return int_value(s, v, 0, PM_MAX_WORKERS, &c->min_ready, err, size);
    case O_LOG_FORMAT: {
        static const char *const n[] = {"text", "json", NULL};
        static const int val[] = {PMD_LOG_TEXT, PMD_LOG_JSON};
        return choice(s, v, n, val, "text, json", &c->log_format, err, size);
    }
    case O_LOG_LEVEL: {
        static const char *const n[] = {"error", "warn", "info", "debug", NULL};
        static const int val[] = {PMD_LOG_ERROR, PMD_LOG_WARN, PMD_LOG_INFO, PMD_LOG_DEBUG};
        return choice(s, v, n, val, "error, warn, info, debug", &c->log_level, err, size);
    }
    case O_DRAIN_TIMEOUT:
        return int_value(s, v, 0, INT_MAX, &c->drain_timeout, err, size);
    case O_FENCE_NOT_DRAINING: {
        static const char *const n[] = {"yes", "no", NULL};
        static const int val[] = {1, 0};
        return choice(s, v, n, val, "yes, no", &c->fence_not_draining, err, size);
    }
    case O_MEMORY_MAX:
        return size_value(s, v, &c->memory_max, err, size);
    case O_PIDS_MAX:
        if (strcmp(v, "max") == 0) {
            c->pids_max = 0;
            return 0;
        }
        return int_value(s, v, 1, PM__MAX_PIDS_MAX, &c->pids_max, err, size);
    case O_CPU_MAX:
        return cpu_value(s, v, c, err, size);
    case O_RLIMIT:
        return rlimit_value(s, v, c, err, size);
    case O_CONTAINMENT: {
        static const char *const n[] = {"auto", "cgroup", "process-group", NULL};
        static const int val[] = {0, PM_CONTAIN_CGROUP, PM_CONTAIN_PROCESS_GROUP};
        return choice(s, v, n, val, "auto, cgroup, process-group", &c->containment, err, size);
    }
    case O_USER:
        return user_value(s, v, c, err, size);
    case O_UID_RANGE:
        return uid_range_value(s, v, c, err, size);
    case O_NO_NEW_PRIVS: {
        static const char *const n[] = {"yes", "no", NULL};
        static const int val[] = {1, 0};
        return choice(s, v, n, val, "yes, no", &c->no_new_privs, err, size);
    }
    case O_SECCOMP: {
        static const char *const n[] = {"off", "basic", "strict", NULL};
        static const int val[] = {PM_SECCOMP_OFF, PM_SECCOMP_BASIC, PM_SECCOMP_STRICT};
        return choice(s, v, n, val, "off, basic, strict", &c->seccomp, err, size);
    }
    case O_SECCOMP_ACTION: {
        static const char *const n[] = {"errno", "kill", NULL};
        static const int val[] = {PM_SECCOMP_ERRNO, PM_SECCOMP_KILL};
        return choice(s, v, n, val, "errno, kill", &c->seccomp_action, err, size);
    }
    case O_OUTPUT: {
        static const char *const n[] = {"capture", "inherit", NULL};
        static const int val[] = {PM_OUTPUT_CAPTURE, PM_OUTPUT_INHERIT};
        return choice(s, v, n, val, "capture, inherit", &c->output, err, size);
    }
    case O_PEER_LISTEN:
        return peer_addr(s, v, c->peer_listen, err, size);
    case O_PEERS:
        return peers_value(s, v, c, err, size);
    case O_PEERS_DNS:
        return peer_addr(s, v, c->peers_dns, err, size);
    case O_PEER_TIMEOUT:
        return int_value(s, v, 1, INT_MAX, &c->peer_timeout, err, size);
    case O_SECRET_FILE:
        if (c->nsecret_files == 2)
            return fail(err, size, "%s: given more than twice (the current and the next secret)",
                        who(s, w, sizeof(w)));
        return path_value(s, v, &c->secret_file[c->nsecret_files++], err, size);
    case O_INSECURE_NO_SECRET:
    case O_ALLOW_INSECURE_SECRET_MODE: {
        static const char *const n[] = {"yes", "no", NULL};
        static const int val[] = {1, 0};
        return choice(s, v, n, val, "yes, no", id == O_INSECURE_NO_SECRET ? &c->insecure_no_secret
                                                                          : &c->allow_insecure_secret_mode,
                      err, size);
    }
    case O_NODE_KEY:
        return path_value(s, v, &c->node_key, err, size);
    case O_PEER_KEYS:
        return path_value(s, v, &c->peer_keys, err, size);
    case O_MAX_MESSAGE:
        return msg_size_value(s, v, PM_MAX_PAYLOAD, (size_t)UINT32_MAX, &c->max_message, err, size);
    case O_CORE_DIR: {
        struct stat st;
        int e = *v == '\0' ? EINVAL : stat(v, &st) < 0 ? errno : S_ISDIR(st.st_mode) ? 0 : ENOTDIR;
        if (e != 0)
            return fail(err, size, "%s: '%s' %s", who(s, w, sizeof(w)), v,
                        e == EINVAL     ? "is empty: give the directory for the workers' cores"
                        : e == ENOENT   ? "does not exist: create the directory first"
                        : e == ENOTDIR ? "is not a directory"
                                        : strerror(e));
        c->core_dir = v;
        return 0;
    }
    }
    return -EINVAL;
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

int pmd_dconf_parse(pmd_dconf *c, int argc, char **argv, pmd_getenv env, char *err,
                    size_t errsize)
{
    int seen[O_COUNT] = {0};
    int i = 0, rc;
    defaults(c);
    err[0] = '\0';
    /* Flags first, so that they win: an option given as a flag is not read
     * from the environment. --listen may repeat. */
    for (; i < argc; i++) {
        const char *a = argv[i];
        if (strcmp(a, "--") == 0) {
            i++;
            break;
        }
        if (strncmp(a, "--", 2) != 0)
            return fail(err, errsize, "'%s': expected an option or '--' before the command", a);
        const char *eq = strchr(a, '=');
        size_t flen = eq != NULL ? (size_t)(eq - a) : strlen(a);
        int id = -1;
        for (int k = 0; k < O_COUNT; k++)
            if (strlen(opts[k].flag) == flen && strncmp(a, opts[k].flag, flen) == 0)
                id = k;
        if (id < 0)
            return fail(err, errsize, "'%.*s': unknown option (see procmesh run --help)", (int)flen, a);
        const char *v = eq != NULL ? eq + 1 : NULL;
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
    for (int k = 0; k < O_COUNT; k++) {
        if (seen[k])
            continue;
        const char *v = env(opts[k].var);
        if (v == NULL)
            continue;
        src s = {opts[k].flag, opts[k].var};
        c->peer_flags |= k >= O_PEER_FIRST;
        if (k == O_LISTEN || k == O_RLIMIT) {
            /* A comma-separated list in the environment. */
            char *copy = strdup(v), *save = NULL;
            if (copy == NULL)
                return -ENOMEM;
            for (char *t = strtok_r(copy, ",", &save); t != NULL; t = strtok_r(NULL, ",", &save)) {
                if ((rc = apply(c, k, &s, t, err, errsize)) < 0) {
                    free(copy);
                    return rc;
                }
            }
            free(copy);
            continue;
        }
        if ((rc = apply(c, k, &s, v, err, errsize)) < 0)
            return rc;
    }
    if (i >= argc)
        return fail(err, errsize, "missing COMMAND: procmesh run [OPTIONS] -- COMMAND [ARG...]");
    c->argv = argv + i;
    c->argc = argc - i;
    if (c->backoff_max < c->backoff_min)
        return fail(err, errsize, "--backoff-max: %d is below --backoff-min %d", c->backoff_max,
                    c->backoff_min);
    if (c->workers > 0 && c->base_port + c->workers - 1 > 65535)
        return fail(err, errsize, "--base-port: %d + %d workers - 1 exceeds 65535", c->base_port,
                    c->workers);
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

void pmd_dconf_free(pmd_dconf *c)
{
    free(c->init_data);
    c->init_data = NULL;
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
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    int rc = 0;
    rc = rc ? rc : pm_options_set_workers(o, c->workers);
    rc = rc ? rc : pm_options_set_exec(o, c->argv[0], c->argv);
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
    if (rc == 0 && c->uid_count > 0)
        rc = pm_options_set_uid_range(o, (uid_t)c->uid_first, c->uid_count);
    rc = rc ? rc : pm_options_set_no_new_privs(o, c->no_new_privs);
    rc = rc ? rc : pm_options_set_max_message(o, c->max_message);
    rc = rc ? rc : pm_options_set_seccomp_action(o, c->seccomp_action);
    rc = rc ? rc : pm_options_set_output(o, c->output);
    if (rc == 0 && c->core_dir != NULL && (rc = pm_options_set_core_dir(o, c->core_dir)) < 0)
        snprintf(err, errsize, "--core-dir: '%s': %s", c->core_dir, pm_strerror(rc));
    if (rc == 0 && (rc = pm_options_set_seccomp(o, c->seccomp)) == -ENOTSUP)
        snprintf(err, errsize, "--seccomp: procmesh was built without libseccomp (configure "
                               "--with-seccomp); only off is available");
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
    unsigned char *key = sodium_malloc(PM__PEER_KEY_LEN);
    if (key == NULL)
        return -ENOMEM;
    int rc = pm__peer_key_load(path, allow, key, why, sizeof(why));
    if (rc == 0) {
        rc = pm_options_add_secret(o, key);
        if (rc == -EEXIST)
            snprintf(why, sizeof(why), "'%s' holds the same secret as the other --secret-file", path);
        else if (rc < 0)
            snprintf(why, sizeof(why), "'%s': %s", path, pm_strerror(rc));
    }
    sodium_free(key); /* zeroes it */
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
    /* Before any sodium_malloc: it needs the page size sodium_init reads. */
    if (sodium_init() < 0)
        return fail(err, errsize, "peer links: libsodium failed to initialise");
    for (size_t i = 0; i < c->nsecret_files && rc == 0; i++)
        rc = add_secret_file(c->secret_file[i], c->allow_insecure_secret_mode, o, err, errsize);
    if (rc < 0)
        return rc;
    if (c->node_key != NULL) {
        /* Created when missing: the host's identity from now on. The key
         * itself is checked and dropped; the cluster reads the file again. */
        unsigned char *key = sodium_malloc(PM__PEER_KEY_LEN);
        if (key == NULL)
            return -ENOMEM;
        rc = pm__peer_key_load(c->node_key, c->allow_insecure_secret_mode, key, why, sizeof(why));
        if (rc == -ENOENT)
            rc = pm__peer_key_create(c->node_key, NULL, why, sizeof(why));
        sodium_free(key);
        if (rc < 0)
            return fail(err, errsize, "--node-key: %s", why);
        rc = pm_options_set_node_key_file(o, c->node_key);
    }
    if (rc == 0 && c->peer_keys != NULL) {
        pm__pins pins;
        rc = pm__pins_load(c->peer_keys, &pins, why, sizeof(why));
        if (rc < 0)
            return fail(err, errsize, "--peer-keys: %s", why);
        pm__pins_free(&pins);
        rc = pm_options_set_peer_keys_file(o, c->peer_keys);
    }
    if (rc == 0 && c->peer_listen[0] != '\0')
        rc = pm_options_set_peer_listen(o, c->peer_listen);
    for (size_t i = 0; rc == 0 && i < c->npeers; i++)
        rc = pm_options_add_peer(o, c->peers[i]);
    if (rc == 0 && c->peers_dns[0] != '\0')
        rc = pm_options_set_peers_dns(o, c->peers_dns);
    if (rc == 0)
        rc = pm_options_validate(o, err, errsize);
    if (rc < 0 && err[0] == '\0')
        snprintf(err, errsize, "peer links: %s", pm_strerror(rc));
    return rc;
}
