/*
 * procmesh - run COMMAND in crash-isolated, restart-budgeted worker slots.
 *
 *   procmesh run [OPTIONS] -- COMMAND [ARG...]
 *   procmesh version
 *   procmesh --help | procmesh run --help
 *
 * Exit status of `run`: 0 every worker stopped by itself (graceful drain, or
 * every slot ended cleanly), 1 the drain had to SIGKILL a worker, 2 bad
 * command line or configuration, 3 every slot was retired (its restart
 * budget spent), 4 could not start (a listening socket, the first spawn).
 */
#define _GNU_SOURCE
#include <arpa/inet.h>
#include <errno.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <stddef.h>
#include <time.h>
#include <unistd.h>

#include "dconf.h"
#include "health.h"
#include "log.h"
#include "procmesh.h"

#define EXIT_DRAIN_KILLED 1
#define EXIT_USAGE 2
#define EXIT_RETIRED 3
#define EXIT_START 4

static const char usage_text[] =
    "usage: procmesh run [OPTIONS] -- COMMAND [ARG...]\n"
    "       procmesh status [--health HOST:PORT]\n"
    "       procmesh version\n"
    "\n"
    "Runs COMMAND in every worker slot, restarts it when it fails, and stops\n"
    "everything cleanly on SIGTERM/SIGINT. Every option can also be set with\n"
    "an environment variable PROCMESH_<OPTION> (upper case, '-' as '_'; for\n"
    "--listen a comma-separated list); a flag wins over the variable.\n"
    "\n"
    "  --workers N|auto          worker slots (default auto: usable CPUs)\n"
    "  --restart always|on-failure|never   (default on-failure)\n"
    "  --backoff-min MS          first restart delay (default 200)\n"
    "  --backoff-max MS          longest restart delay (default 10000)\n"
    "  --backoff-jitter F        random factor 0..1 (default 0.2)\n"
    "  --max-restarts N          per window, -1 unlimited (default 10)\n"
    "  --restart-window MS       sliding window, 0 = forever (default 60000)\n"
    "  --ready-timeout MS        (default 10000)\n"
    "  --heartbeat-timeout MS    mesh workers only, 0 = off (default 10000)\n"
    "  --stop-timeout MS         grace before SIGKILL (default 5000)\n"
    "  --system-name S           (default procmesh)\n"
    "  --hostname S              (default worker)\n"
    "  --base-port N             slot i gets port N+i (default 1)\n"
    "  --init-data TEXT|@FILE    delivered to mesh workers at init\n"
    "  --ready mesh|notify|exec  mesh: the worker calls pm_node_ready (default);\n"
    "                            notify: sd_notify READY=1 on its NOTIFY_SOCKET;\n"
    "                            exec: ready once exec succeeded\n"
    "  --listen [NAME=]tcp:HOST:PORT|unix:PATH   socket handed to every worker\n"
    "                            (LISTEN_FDS convention), repeatable\n"
    "  --min-ready N             (default: all slots)\n"
    "  --log-format text|json    (default text)\n"
    "  --log-level error|warn|info|debug   (default info)\n"
    "\n"
    "signals: SIGTERM/SIGINT drain (stop request, --stop-timeout, SIGKILL; a\n"
    "second one skips the wait); SIGHUP replaces the workers one slot at a time\n"
    "\n"
    "exit status: 0 stopped cleanly, 1 a worker had to be killed at stop,\n"
    "2 bad usage, 3 every slot retired, 4 could not start\n";

typedef struct daemon_ctx {
    const pm__dconf *conf;
    int retired;
    pm__health_state hs;
    long long oom_kills; /* memory.events oom_kill at the last look, -1 unknown */
} daemon_ctx;

/* The oom_kill count of our memory cgroup, or -1: cgroup v2 memory.events,
 * else the v1 memory controller's memory.oom_control. Our workers live in
 * our cgroup, so a rise between two exits means the kernel's OOM killer took
 * one of them. */
static long long oom_kill_count(void)
{
    char line[512], v2[600] = "", v1[600] = "";
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *path = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;
        if (path == NULL)
            continue;
        path++;
        const char *rel = strcmp(path, "/") == 0 ? "" : path;
        if (strncmp(line, "0::", 3) == 0)
            snprintf(v2, sizeof(v2), "/sys/fs/cgroup%s/memory.events", rel);
        else if (strstr(line, ":memory:") != NULL)
            snprintf(v1, sizeof(v1), "/sys/fs/cgroup/memory%s/memory.oom_control", rel);
    }
    fclose(f);
    const char *files[] = {v2, v1};
    for (int i = 0; i < 2; i++) {
        if (files[i][0] == '\0' || (f = fopen(files[i], "re")) == NULL)
            continue;
        long long n = -1;
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "oom_kill %lld", &n) == 1)
                break;
        fclose(f);
        if (n >= 0)
            return n;
    }
    return -1;
}

static const pm__dconf *g_conf;

static void logkv(int level, const char *event, const char *const *kv, size_t nkv)
{
    pm__log(g_conf->log_format, g_conf->log_level, level, event, kv, nkv);
}

static const char *signame(int sig, char *buf, size_t size)
{
    const char *abbrev = sigabbrev_np(sig);
    if (abbrev != NULL)
        snprintf(buf, size, "SIG%s", abbrev);
    else
        snprintf(buf, size, "%d", sig);
    return buf;
}

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    daemon_ctx *d = arg;
    char slot[16], pid[16], inc[24], v1[32], sig[32];
    snprintf(slot, sizeof(slot), "%u", e->slot);
    snprintf(pid, sizeof(pid), "%d", (int)e->pid);
    snprintf(inc, sizeof(inc), "%llu", (unsigned long long)e->incarnation);
    switch (e->type) {
    case PM_EVENT_STARTED: {
        d->hs.spawn_failures = 0;
        const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc};
        logkv(PM__LOG_INFO, "started", kv, 3);
        break;
    }
    case PM_EVENT_READY: {
        const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc};
        logkv(PM__LOG_INFO, "ready", kv, 3);
        break;
    }
    case PM_EVENT_EXITED:
        if (strcmp(e->reason, "ready-timeout") == 0) {
            d->hs.exits_ready_timeout++;
        } else if (strcmp(e->reason, "heartbeat") == 0 || strcmp(e->reason, "corrupt-ring") == 0 ||
                   strcmp(e->reason, "protocol") == 0) {
            d->hs.exits_fenced++;
        } else if (e->signal == SIGKILL && strcmp(e->reason, "signal") == 0) {
            long long now = oom_kill_count();
            int oom = now >= 0 && d->oom_kills >= 0 && now > d->oom_kills;
            d->oom_kills = now;
            if (oom) {
                d->hs.exits_oom++;
                const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc,
                                    "signal", "SIGKILL", "reason", "oom"};
                logkv(PM__LOG_WARN, "exited", kv, 5);
                break;
            }
            d->hs.exits_signal++;
        } else if (e->signal != 0) {
            d->hs.exits_signal++;
        } else if (e->exit_code == 0) {
            d->hs.exits_clean++;
        } else {
            d->hs.exits_failed++;
        }
        if (e->signal != 0) {
            const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc,
                                "signal", signame(e->signal, sig, sizeof(sig)),
                                "core_dumped", e->core_dumped ? "true" : "false",
                                "reason", e->reason};
            logkv(PM__LOG_WARN, "exited", kv, 6);
        } else {
            snprintf(v1, sizeof(v1), "%d", e->exit_code);
            const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc,
                                "exit_code", v1, "reason", e->reason};
            logkv(e->exit_code == 0 ? PM__LOG_INFO : PM__LOG_WARN, "exited", kv, 5);
        }
        break;
    case PM_EVENT_RESTART_SCHEDULED: {
        snprintf(v1, sizeof(v1), "%u", e->delay_ms);
        const char *kv[] = {"slot", slot, "delay_ms", v1};
        logkv(PM__LOG_INFO, "restart_scheduled", kv, 2);
        break;
    }
    case PM_EVENT_RETIRED: {
        snprintf(v1, sizeof(v1), "%u", e->restarts);
        const char *kv[] = {"slot", slot, "restarts", v1};
        logkv(PM__LOG_ERROR, "retired", kv, 2);
        d->retired++;
        break;
    }
    case PM_EVENT_STOPPED: {
        const char *kv[] = {"slot", slot, "reason", e->reason};
        logkv(PM__LOG_INFO, "stopped", kv, 2);
        break;
    }
    case PM_EVENT_SPAWN_FAILED: {
        d->hs.spawn_failures++;
        const char *kv[] = {"slot", slot, "error", pm_strerror(e->exit_code)};
        logkv(PM__LOG_ERROR, "spawn_failed", kv, 2);
        break;
    }
    case PM_EVENT_FENCED: {
        const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc, "reason", e->reason};
        logkv(PM__LOG_WARN, "fenced", kv, 4);
        break;
    }
    case PM_EVENT_STOPPING: {
        const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc};
        logkv(PM__LOG_INFO, "stopping", kv, 3);
        break;
    }
    case PM_EVENT_STALLED: {
        snprintf(v1, sizeof(v1), "%u", e->delay_ms);
        const char *kv[] = {"stall_ms", v1, "reason", e->reason};
        logkv(PM__LOG_WARN, "stall", kv, 2);
        break;
    }
    default:
        break;
    }
}

static void on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg)
{
    (void)c;
    (void)arg;
    (void)slot;
    (void)restarts;
    char text[PM_ADDRESS_STRLEN];
    pm_address_format(a, text, sizeof(text));
    const char *kv[] = {"address", text};
    logkv(PM__LOG_ERROR, "permanently_down", kv, 1);
}

/* Creates the listening sockets, close-on-exec (procmesh hands them to the
 * workers explicitly). Returns the count, or -1 with a log line. */
static int open_listeners(const pm__dconf *c, int *fds)
{
    for (size_t i = 0; i < c->nlisten; i++) {
        const pm__d_listen *l = &c->listen[i];
        int fd = -1;
        if (l->unix_socket) {
            struct sockaddr_un sa;
            memset(&sa, 0, sizeof(sa));
            sa.sun_family = AF_UNIX;
            strcpy(sa.sun_path, l->path);
            fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
            struct stat st;
            /* A stale socket file from an earlier run would make bind fail;
             * remove it only if it is a socket. */
            if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode))
                unlink(l->path);
            if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, 512) < 0)
                goto fail;
        } else {
            struct addrinfo hints, *res = NULL;
            memset(&hints, 0, sizeof(hints));
            hints.ai_socktype = SOCK_STREAM;
            hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
            char port[8];
            snprintf(port, sizeof(port), "%u", l->port);
            int g = getaddrinfo(l->host[0] ? l->host : NULL, port, &hints, &res);
            if (g != 0) {
                const char *kv[] = {"listen", l->name, "error", gai_strerror(g)};
                logkv(PM__LOG_ERROR, "listen_failed", kv, 2);
                return -1;
            }
            fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
            int one = 1;
            if (fd >= 0)
                setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
            int ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 && listen(fd, 512) == 0;
            freeaddrinfo(res);
            if (!ok)
                goto fail;
        }
        fds[i] = fd;
        continue;
    fail: {
        const char *kv[] = {"listen", l->name, "error", strerror(errno)};
        logkv(PM__LOG_ERROR, "listen_failed", kv, 2);
        if (fd >= 0)
            close(fd);
        return -1;
    }
    }
    return (int)c->nlisten;
}

/*
 * SIGHUP: replace the workers one slot at a time; the next slot is replaced
 * only after the previous replacement is ready, so at most one slot is down
 * at a time and never more than N workers (one per slot) are alive. The
 * listening sockets stay open throughout. Returns 0, or -EINTR when a
 * SIGTERM/SIGINT arrived meanwhile (the caller drains).
 */
static int rolling_restart(pm_cluster *c, const pm__dconf *conf)
{
    logkv(PM__LOG_INFO, "rolling_restart_begin", NULL, 0);
    unsigned n = pm_cluster_slots(c);
    for (unsigned i = 0; i < n; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        if (si.state != PM_SLOT_READY || pm_cluster_restart_slot(c, i) < 0)
            continue;
        uint64_t old = si.incarnation;
        for (;;) {
            int rc = pm_cluster_run(c, 100);
            if (rc == -EINTR && pm_cluster_last_signal(c) != SIGHUP)
                return -EINTR;
            pm_slot_info now;
            pm_cluster_slot_info(c, i, &now);
            if ((now.state == PM_SLOT_READY && now.incarnation > old) ||
                now.state == PM_SLOT_RETIRED || now.state == PM_SLOT_STOPPED)
                break;
        }
    }
    (void)conf;
    logkv(PM__LOG_INFO, "rolling_restart_end", NULL, 0);
    return 0;
}

/* Terminate, serving /readyz (503) and the rest while workers stop; the
 * endpoint is closed just before the cluster is freed. */
static int pm__terminate(pm_cluster *c, pm__health **health)
{
    /* The health endpoint lives in the cluster's loop, which terminate frees:
     * close it first. Probes during the drain see a refused connection,
     * which orchestrators treat as not ready. */
    pm__health_stop(*health);
    *health = NULL;
    return pm_cluster_terminate(c);
}

/* The systemd notify protocol towards our own service manager, if any. */
static void notify_self(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path))
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path)));
    (void)n;
    close(fd);
}

/* WATCHDOG_USEC/2 in ms when systemd watches us (and WATCHDOG_PID, if set,
 * is us), else 0. */
static uint64_t watchdog_interval_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *wpid = getenv("WATCHDOG_PID");
    if (usec == NULL || getenv("NOTIFY_SOCKET") == NULL)
        return 0;
    if (wpid != NULL && atoi(wpid) != (int)getpid())
        return 0;
    unsigned long long us = strtoull(usec, NULL, 10);
    return us >= 2000 ? us / 2000 : 0;
}

static uint64_t mono_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

static const char *env_get(const char *name)
{
    return getenv(name);
}

/* procmesh status [--health HOST:PORT]: GET /status and print the slot
 * table. Exit 0, 2 bad usage, 4 cannot reach the daemon. */
static int cmd_status(int argc, char **argv)
{
    const char *addr = getenv("PROCMESH_HEALTH");
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: procmesh status [--health HOST:PORT]  (default $PROCMESH_HEALTH)\n");
            return 0;
        }
        if (strcmp(argv[i], "--health") == 0 && i + 1 < argc)
            addr = argv[++i];
        else if (strncmp(argv[i], "--health=", 9) == 0)
            addr = argv[i] + 9;
        else {
            fprintf(stderr, "procmesh status: '%s': unknown option (allowed: --health HOST:PORT)\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    if (addr == NULL) {
        fprintf(stderr, "procmesh status: --health HOST:PORT is required (or PROCMESH_HEALTH)\n");
        return EXIT_USAGE;
    }
    char host[256];
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr || (size_t)(colon - addr) >= sizeof(host)) {
        fprintf(stderr, "procmesh status: --health: '%s' is not HOST:PORT\n", addr);
        return EXIT_USAGE;
    }
    memcpy(host, addr, (size_t)(colon - addr));
    host[colon - addr] = '\0';
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    if (getaddrinfo(host, colon + 1, &hints, &res) != 0) {
        fprintf(stderr, "procmesh status: cannot resolve '%s'\n", addr);
        return EXIT_START;
    }
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct timeval tv = {5, 0};
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
    int ok = fd >= 0 && connect(fd, res->ai_addr, res->ai_addrlen) == 0;
    freeaddrinfo(res);
    static char buf[1 << 20];
    size_t got = 0;
    if (ok) {
        const char req[] = "GET /status HTTP/1.1\r\nHost: procmesh\r\n\r\n";
        ok = write(fd, req, sizeof(req) - 1) == (ssize_t)(sizeof(req) - 1);
        ssize_t k;
        while (ok && got + 1 < sizeof(buf) && (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
            got += (size_t)k;
    }
    if (fd >= 0)
        close(fd);
    buf[got] = '\0';
    char *body = strstr(buf, "\r\n\r\n");
    if (!ok || body == NULL || strncmp(buf, "HTTP/1.1 200", 12) != 0) {
        fprintf(stderr, "procmesh status: no answer from %s\n", addr);
        return EXIT_START;
    }
    printf("%-5s %-9s %-8s %-11s %-8s %-10s %s\n", "SLOT", "STATE", "PID", "INCARNATION",
           "RESTARTS", "LAST EXIT", "HEARTBEAT AGE");
    for (char *p = strstr(body, "{\"slot\":"); p != NULL; p = strstr(p + 1, "{\"slot\":")) {
        unsigned slot, restarts, age;
        char state[16];
        int pid, code, sig;
        unsigned long long inc;
        if (sscanf(p,
                   "{\"slot\":%u,\"state\":\"%15[a-z]\",\"pid\":%d,\"incarnation\":%llu,"
                   "\"restarts\":%u,\"last_exit_code\":%d,\"last_signal\":%d,"
                   "\"heartbeat_age_ms\":%u}",
                   &slot, state, &pid, &inc, &restarts, &code, &sig, &age) != 8)
            continue;
        char last[32] = "-";
        if (sig != 0)
            signame(sig, last, sizeof(last));
        else if (code >= 0)
            snprintf(last, sizeof(last), "exit %d", code);
        printf("%-5u %-9s %-8d %-11llu %-8u %-10s %.1fs\n", slot, state, pid, inc, restarts, last,
               age / 1000.0);
    }
    return 0;
}

static int cmd_run(int argc, char **argv)
{
    static pm__dconf conf;
    char err[512];
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 0;
        }
    }
    if (pm__dconf_parse(&conf, argc, argv, env_get, err, sizeof(err)) < 0) {
        fprintf(stderr, "procmesh run: %s\n", err);
        return EXIT_USAGE;
    }
    g_conf = &conf;
    pm_options *o;
    if (pm__dconf_options(&conf, &o, err, sizeof(err)) < 0) {
        fprintf(stderr, "procmesh run: %s\n", err);
        return EXIT_USAGE;
    }
    /* Orphans re-parented to us must be reaped: as PID 1 that is automatic,
     * elsewhere we become a child subreaper so the same holds. */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    int fds[PM__D_MAX_LISTEN];
    int nfds = open_listeners(&conf, fds);
    if (nfds < 0) {
        pm_options_free(o);
        return EXIT_START;
    }
    if (nfds > 0) {
        const char *names[PM__D_MAX_LISTEN];
        for (int i = 0; i < nfds; i++)
            names[i] = conf.listen[i].name;
        pm_options_set_listen_fds(o, fds, names, (size_t)nfds);
    }
    daemon_ctx d;
    memset(&d, 0, sizeof(d));
    d.conf = &conf;
    d.hs.min_ready = conf.min_ready;
    d.oom_kills = oom_kill_count();
    pm_options_set_on_event(o, on_event, &d);
    pm_options_set_on_permanently_down(o, on_down, &d);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc == -EINTR) {
        /* SIGTERM/SIGINT while the workers were starting: they were killed
         * and reaped by pm_cluster_spawn; that is a drain that had to kill. */
        const char *kv[] = {"workers_killed", "true", "during", "start"};
        logkv(PM__LOG_INFO, "drain_end", kv, 2);
        pm_options_free(o);
        return EXIT_DRAIN_KILLED;
    }
    if (rc < 0) {
        const char *kv[] = {"error", pm_strerror(rc), "command", conf.argv[0]};
        logkv(PM__LOG_ERROR, "start_failed", kv, 2);
        pm_options_free(o);
        return EXIT_START;
    }
    pm__health *health = NULL;
    if (conf.health_host[0] != '\0' || conf.health_port != 0) {
        health = pm__health_start(c, conf.health_host, conf.health_port, &d.hs);
        if (health == NULL) {
            const char *kv[] = {"health", conf.health_host, "error", strerror(errno)};
            logkv(PM__LOG_ERROR, "health_failed", kv, 2);
            pm_cluster_terminate(c);
            pm_options_free(o);
            return EXIT_START;
        }
    }
    int status = 0;
    /* pm_cluster_spawn returned: every slot is ready. */
    notify_self("READY=1");
    uint64_t wd = watchdog_interval_ms(), next_wd = wd ? mono_ms() : 0;
    for (;;) {
        if (wd && mono_ms() >= next_wd) {
            notify_self("WATCHDOG=1");
            next_wd = mono_ms() + wd;
        }
        rc = pm_cluster_run(c, wd && wd < 1000 ? (int)wd : 1000);
        pm__health_tick(health);
        if (rc == -EINTR && pm_cluster_last_signal(c) == SIGHUP)
            rc = rolling_restart(c, &conf);
        if (rc == -EINTR) {
            char sig[32];
            const char *kv[] = {"signal", signame(pm_cluster_last_signal(c), sig, sizeof(sig))};
            logkv(PM__LOG_INFO, "drain_begin", kv, 1);
            d.hs.draining = 1; /* /readyz says no from now on */
            notify_self("STOPPING=1");
            struct pm_cluster_stats st;
            pm_cluster_stats(c, &st);
            rc = pm__terminate(c, &health);
            status = rc == 0 ? 0 : EXIT_DRAIN_KILLED;
            char orphans[24];
            snprintf(orphans, sizeof(orphans), "%llu", (unsigned long long)st.orphans_reaped);
            const char *kv2[] = {"workers_killed", rc == 0 ? "false" : "true", "orphans_reaped",
                                 orphans};
            logkv(PM__LOG_INFO, "drain_end", kv2, 2);
            break;
        }
        if (rc < 0) {
            const char *kv[] = {"error", pm_strerror(rc)};
            logkv(PM__LOG_ERROR, "loop_failed", kv, 1);
            pm__terminate(c, &health);
            status = EXIT_START;
            break;
        }
        if (pm_cluster_size(c) == 0) {
            /* Nothing left to supervise: every slot retired (the orchestrator
             * should restart us) or ended for good. */
            status = d.retired > 0 ? EXIT_RETIRED : 0;
            const char *kv[] = {"reason", d.retired > 0 ? "all slots retired" : "all slots stopped"};
            logkv(d.retired > 0 ? PM__LOG_ERROR : PM__LOG_INFO, "exit", kv, 1);
            pm__terminate(c, &health);
            break;
        }
    }
    pm_options_free(o);
    for (int i = 0; i < nfds; i++)
        close(fds[i]);
    pm__dconf_free(&conf);
    return status;
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fputs(usage_text, stderr);
        return EXIT_USAGE;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "--help") == 0 || strcmp(cmd, "-h") == 0 || strcmp(cmd, "help") == 0) {
        fputs(usage_text, stdout);
        return 0;
    }
    if (strcmp(cmd, "version") == 0 || strcmp(cmd, "--version") == 0) {
        printf("procmesh %s\n", pm_version_string());
        return 0;
    }
    if (strcmp(cmd, "run") == 0)
        return cmd_run(argc - 2, argv + 2);
    if (strcmp(cmd, "status") == 0)
        return cmd_status(argc - 2, argv + 2);
    fprintf(stderr,
            "procmesh: unknown command '%s' (commands: run, status, version; see procmesh --help)\n",
            cmd);
    return EXIT_USAGE;
}
