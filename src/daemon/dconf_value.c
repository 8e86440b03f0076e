/* SPDX-License-Identifier: MIT */
/* dconf_value.c - the daemon's option value parsers: one flag's or variable's text into its field, or an error naming it. */
#define _GNU_SOURCE
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

#include "base/defaults.h"
#include "channel/bigmsg.h"

int pmd_dconf_int_value(const src *s, const char *v, long min, long max, int *out, char *err,
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

int pmd_dconf_name_value(const src *s, const char *v, char out[PM_NAME_MAX], char *err, size_t size)
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

int pmd_dconf_choice(const src *s, const char *v, const char *const *names, const int *values,
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
int pmd_dconf_host_port(const src *s, const char *v, char *host, size_t hostsize, unsigned *port,
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
    if (pmd_dconf_int_value(s, colon + 1, 0, 65535, &p, err, size) < 0)
        return fail(err, size, "%s: '%s' has no port in 0..65535", who(s, w, sizeof(w)), v);
    *port = (unsigned)p;
    return 0;
}

/* Copies the n bytes of name at v into out as a string and judges it by
 * the library's rule for a LISTEN_FDNAMES name: its setter, on scratch
 * options, with a stand-in fd (stored, never used). 0, -EINVAL or -ENOMEM. */
static int listen_name(const char *v, size_t n, char out[PM_NAME_MAX])
{
    if (n >= PM_NAME_MAX)
        return -EINVAL;
    memcpy(out, v, n);
    out[n] = '\0';
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    const int stand_in_fd = 0;
    const char *name = out;
    int rc = pm_options_set_listen_fds(o, &stand_in_fd, &name, 1);
    pm_options_free(o);
    return rc;
}

/* [NAME=]tcp:HOST:PORT | [NAME=]unix:PATH */
int pmd_dconf_listen_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
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
        int rc = listen_name(v, (size_t)(eq - v), l->name);
        if (rc == -ENOMEM)
            return rc;
        if (rc < 0)
            return fail(err, size,
                        "%s: '%s': the name before '=' must be 1..%d characters without ':' or a newline",
                        who(s, w, sizeof(w)), v, PM_NAME_MAX - 1);
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
        if (pmd_dconf_host_port(s, spec + 4, l->host, sizeof(l->host), &l->port, err, size) < 0)
            return fail(err, size, "%s: '%s' is not [NAME=]tcp:HOST:PORT", who(s, w, sizeof(w)), v);
    } else {
        return fail(err, size, "%s: '%s' is not [NAME=]tcp:HOST:PORT or [NAME=]unix:PATH",
                    who(s, w, sizeof(w)), v);
    }
    c->nlisten++;
    return 0;
}

int pmd_dconf_init_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    /* c holds no init data yet: the option is applied once a parse (a
     * flag given twice is refused, its variable read only without it). */
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
    if (f == NULL) {
        int e = errno;
        fail(err, size, "%s: cannot read '%s': %s", who(s, w, sizeof(w)), v + 1, strerror(e));
        return e == ENOMEM ? -ENOMEM : -EINVAL;
    }
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

/* SIZE: bytes, or with a K, M, G, T suffix (powers of 1024); "max" = none.
 * The smallest size is the library's (its setter judges). */
int pmd_dconf_size_value(const src *s, const char *v, uint64_t *out, char *err, size_t size)
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
    /* 0 would be the library's "none", spelled max here. */
    int ok = *v != '\0' && isdigit((unsigned char)*v) && *end == '\0' && errno == 0 && shift >= 0 &&
             x <= (UINT64_MAX >> shift) && x != 0;
    pm_options *o = ok ? pm_options_new() : NULL;
    if (ok && o == NULL)
        return -ENOMEM;
    ok = ok && pm_options_set_memory_max(o, (uint64_t)x << shift) == 0;
    pm_options_free(o);
    if (!ok)
        return fail(err, size, "%s: '%s' is not max or a size of at least %dM (bytes, or with a "
                    "K, M, G or T suffix)", who(s, w, sizeof(w)), v, PM__MIN_MEMORY_MAX >> 20);
    *out = (uint64_t)x << shift;
    return 0;
}

/* QUOTA[/PERIOD] in microseconds (period 100000 by default), or max; the
 * bounds are the library's (its setter judges). */
int pmd_dconf_cpu_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    if (strcmp(v, "max") == 0) {
        c->cpu_quota = c->cpu_period = 0;
        return 0;
    }
    char *end;
    errno = 0;
    unsigned long long q = strtoull(v, &end, 10), p = 100000;
    int digits = isdigit((unsigned char)*v); /* strtoull takes a sign or blanks first */
    if (*end == '/') {
        digits = digits && isdigit((unsigned char)end[1]);
        p = strtoull(end + 1, &end, 10);
    }
    /* A quota of 0 would be the library's "none", spelled max here. */
    int ok = digits && *end == '\0' && errno == 0 && q != 0;
    pm_options *o = ok ? pm_options_new() : NULL;
    if (ok && o == NULL)
        return -ENOMEM;
    ok = ok && pm_options_set_cpu_max(o, q, p) == 0;
    pm_options_free(o);
    if (!ok)
        return fail(err, size, "%s: '%s' is not max or QUOTA[/PERIOD] in microseconds (quota "
                    "%d..%llu, period %d..%d; 2 CPUs: 200000/100000)", who(s, w, sizeof(w)), v,
                    PM__MIN_CPU_QUOTA_US, PM__MAX_CPU_QUOTA_US, PM__MIN_CPU_PERIOD_US,
                    PM__MAX_CPU_PERIOD_US);
    c->cpu_quota = q;
    c->cpu_period = p;
    return 0;
}

/* NAME=VALUE: VALUE is N, SOFT:HARD, or unlimited for either. */
int pmd_dconf_rlimit_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
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
        if (k == 0 && *p == '\0') /* N alone: the hard limit too */
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

int pmd_dconf_lookup_errno(int e)
{
    return e == 0 || e == ENOENT || e == ESRCH || e == EBADF || e == EPERM ? -ENOENT : -e;
}

static int lookup_failed(void)
{
    return pmd_dconf_lookup_errno(errno);
}

/* A user or group: a number, or a name from the user/group database. 0,
 * -ENOENT, or the lookup's error. */
static int id_value(const char *v, int group, unsigned *out, unsigned *primary_gid)
{
    char *end;
    errno = 0;
    unsigned long x = strtoul(v, &end, 10);
    if (*v != '\0' && isdigit((unsigned char)*v) && *end == '\0' && errno == 0 &&
        x < 0xffffffffUL) {
        *out = (unsigned)x;
        if (primary_gid != NULL) {
            errno = 0;
            struct passwd *pw = getpwuid((uid_t)x);
            int rc = pw == NULL ? lookup_failed() : 0;
            if (rc < 0 && rc != -ENOENT)
                return rc;
            *primary_gid = pw != NULL ? (unsigned)pw->pw_gid : (unsigned)x;
        }
        return 0;
    }
    errno = 0;
    if (group) {
        struct group *gr = getgrnam(v);
        if (gr == NULL)
            return lookup_failed();
        *out = (unsigned)gr->gr_gid;
        return 0;
    }
    struct passwd *pw = getpwnam(v);
    if (pw == NULL)
        return lookup_failed();
    *out = (unsigned)pw->pw_uid;
    if (primary_gid != NULL)
        *primary_gid = (unsigned)pw->pw_gid;
    return 0;
}

/* id_value's refusal of a user's or group's name, in words. */
static int id_failed(const src *s, int rc, const char *what, const char *name, char *err, size_t size)
{
    char w[96];
    if (rc == -ENOMEM)
        return rc;
    if (rc == -ENOENT)
        return fail(err, size, "%s: no %s '%s'", who(s, w, sizeof(w)), what, name);
    return fail(err, size, "%s: looking up %s '%s': %s", who(s, w, sizeof(w)), what, name,
                strerror(-rc));
}

/* USER[:GROUP]; without GROUP, the user's primary group (or, for a number
 * with no account, the same number). */
int pmd_dconf_user_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96], name[256];
    const char *colon = strchr(v, ':');
    size_t n = colon != NULL ? (size_t)(colon - v) : strlen(v);
    if (n == 0 || n >= sizeof(name) || (colon != NULL && colon[1] == '\0'))
        return fail(err, size, "%s: '%s' is not USER[:GROUP]", who(s, w, sizeof(w)), v);
    memcpy(name, v, n);
    name[n] = '\0';
    unsigned uid, gid;
    int rc = id_value(name, 0, &uid, &gid);
    if (rc < 0)
        return id_failed(s, rc, "user", name, err, size);
    if (colon != NULL && (rc = id_value(colon + 1, 1, &gid, NULL)) < 0)
        return id_failed(s, rc, "group", colon + 1, err, size);
    /* The library's setter refuses root (uid or gid 0) and -1; it judges. */
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -ENOMEM;
    rc = pm_options_set_user(o, (uid_t)uid, (gid_t)gid);
    pm_options_free(o);
    if (rc < 0)
        return fail(err, size,
                    "%s: '%s' is root (uid or gid 0) or id -1: the workers would keep every privilege",
                    who(s, w, sizeof(w)), v);
    c->user = 1;
    c->uid = uid;
    c->gid = gid;
    return 0;
}

/* FIRST:COUNT; the bounds are the library's (its setter judges). */
int pmd_dconf_uid_range_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    unsigned long first, count;
    char *end;
    errno = 0;
    first = strtoul(v, &end, 10);
    int ok = isdigit((unsigned char)*v) && *end == ':' && errno == 0;
    const char *cs = ok ? end + 1 : v;
    count = ok ? strtoul(cs, &end, 10) : 0;
    /* A count of 0 would be the library's "none": no flag spells that. */
    ok = ok && isdigit((unsigned char)*cs) && *end == '\0' && errno == 0 && count != 0 &&
         first <= (uid_t)-1 && count <= UINT_MAX;
    pm_options *o = ok ? pm_options_new() : NULL;
    if (ok && o == NULL)
        return -ENOMEM;
    ok = ok && pm_options_set_uid_range(o, (uid_t)first, (unsigned)count) == 0;
    pm_options_free(o);
    if (!ok)
        return fail(err, size, "%s: '%s' is not FIRST:COUNT with FIRST >= 1, COUNT in 1..%d, below uid %u",
                    who(s, w, sizeof(w)), v, PM_MAX_WORKERS, (unsigned)(uid_t)-1);
    c->uid_first = (unsigned)first;
    c->uid_count = (unsigned)count;
    return 0;
}

/* SIZE with an optional K, M or G suffix (powers of 1024), in the range
 * the library's setter accepts. */
int pmd_dconf_msg_size_value(const src *s, const char *v, size_t *out, char *err, size_t size)
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
    int ok = isdigit((unsigned char)*v) && *end == '\0' && errno == 0 && x <= (SIZE_MAX >> shift);
    pm_options *o = ok ? pm_options_new() : NULL;
    if (ok && o == NULL)
        return -ENOMEM;
    ok = ok && pm_options_set_max_message(o, (size_t)(x << shift)) == 0;
    pm_options_free(o);
    if (!ok)
        return fail(err, size, "%s: '%s' is not a size in %zu..%zu bytes (suffix K, M or G allowed)",
                    who(s, w, sizeof(w)), v, (size_t)PM_MAX_PAYLOAD, PM__BIGMSG_MAX);
    *out = (size_t)(x << shift);
    return 0;
}

/* HOST:PORT as the library takes it (its check is not exported from the
 * shared library: its setter applies it). */
int pmd_dconf_peer_addr(const src *s, const char *v, char out[PMD_PEER_ADDR_MAX], char *err, size_t size)
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
int pmd_dconf_peers_value(const src *s, const char *v, pmd_dconf *c, char *err, size_t size)
{
    char w[96];
    const char *p = v;
    /* c holds no peers yet: the option is applied once a parse. */
    for (;;) {
        size_t n = strcspn(p, ",");
        char one[PMD_PEER_ADDR_MAX];
        if (n == 0 || n >= sizeof(one))
            return fail(err, size, "%s: '%s' is not HOST:PORT[,HOST:PORT...]", who(s, w, sizeof(w)), v);
        if (c->npeers == PMD_MAX_PEERS)
            return fail(err, size, "%s: at most %d peers", who(s, w, sizeof(w)), PMD_MAX_PEERS);
        memcpy(one, p, n);
        one[n] = '\0';
        int rc = pmd_dconf_peer_addr(s, one, c->peers[c->npeers], err, size);
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

int pmd_dconf_path_value(const src *s, const char *v, char **out, char *err, size_t size)
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
