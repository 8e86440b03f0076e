/* SPDX-License-Identifier: MIT */
/*
 * procmesh.c - the program: its commands and the run loop (signals, drain,
 * rolling restart) around the cluster.
 *
 *   procmesh run [OPTIONS] -- COMMAND [ARG...]
 *   procmesh status [--health HOST:PORT]
 *   procmesh keygen [--node-key | --public] FILE
 *   procmesh version
 *   procmesh --help | procmesh run --help
 *
 * Exit status of `run`: 0 every worker stopped by itself (graceful drain, or
 * every slot ended cleanly), 1 the drain had to SIGKILL a worker, 2 bad
 * command line or configuration, 3 every slot was retired (its restart
 * budget spent), 4 could not start (a listening socket, the first spawn),
 * 5 a slot ended in a failure and was not restarted (--restart never).
 * Of `status`: 0, 2 bad usage, 4 the daemon did not answer. Of `keygen`:
 * 0, 1 the file could not be written or read, 2 bad usage.
 */
#define _GNU_SOURCE
#include <fcntl.h>
#include <errno.h>
#include <limits.h>
#include <netdb.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <unistd.h>

#include <sodium.h>

#include "clock.h"
#include "core.h"
#include "dconf.h"
#include "base/defaults.h"
#include "events.h"
#include "health.h"
#include "keyreload.h"
#include "listen.h"
#include "log.h"
#include "peer/peerkeys.h"
#include "peer/secretmem.h"
#include "procmesh.h"
#include "sdnotify.h"
#include "status.h"

#define EXIT_DRAIN_KILLED 1
#define EXIT_USAGE 2
#define EXIT_RETIRED 3
#define EXIT_START 4
#define EXIT_SLOT_FAILED 5

/* The defaults in the usage text are the library's (defaults.h). */
#define STR_(x) #x
#define STR(x) STR_(x)

static const char usage_text[] =
    "usage: procmesh run [OPTIONS] -- COMMAND [ARG...]\n"
    "       procmesh status [--health HOST:PORT]\n"
    "       procmesh keygen [--node-key | --public] FILE\n"
    "       procmesh version\n"
    "\n"
    "Runs COMMAND in every worker slot, restarts it when it fails, and stops\n"
    "everything cleanly on SIGTERM/SIGINT. Every option can also be set with\n"
    "an environment variable PROCMESH_<OPTION> (upper case, '-' as '_'; for\n"
    "--listen a comma-separated list); a flag wins over the variable.\n"
    "\n"
    "  --workers N|auto          worker slots (default auto: usable CPUs)\n"
    "  --restart always|on-failure|never   (default on-failure)\n"
    "  --backoff-min MS          first restart delay (default " STR(PM__DEFAULT_MIN_BACKOFF_MS) ")\n"
    "  --backoff-max MS          longest restart delay (default " STR(PM__DEFAULT_MAX_BACKOFF_MS) ")\n"
    "  --backoff-jitter F        random factor 0..1 (default " STR(PM__DEFAULT_RANDOM_FACTOR) ")\n"
    "  --max-restarts N          per window, -1 unlimited (default " STR(PM__DEFAULT_MAX_RESTARTS) ")\n"
    "  --restart-window MS       sliding window, 0 = forever (default " STR(PM__DEFAULT_RESTART_WINDOW_MS) ")\n"
    "  --ready-timeout MS        (default " STR(PM__DEFAULT_READY_TIMEOUT_MS) ")\n"
    "  --heartbeat-timeout MS    mesh workers only, 0 = off (default " STR(PM__DEFAULT_HEARTBEAT_TIMEOUT_MS) ")\n"
    "  --stop-timeout MS         grace before SIGKILL (default " STR(PM__DEFAULT_STOP_TIMEOUT_MS) ")\n"
    "  --drain-timeout MS        report a worker whose full ring holds frames back\n"
    "                            this long, 0 = off (default " STR(PM__DEFAULT_DRAIN_TIMEOUT_MS) ")\n"
    "  --fence-not-draining yes|no   also fence it (default no; yes turns\n"
    "                            direct lanes off: every frame through the hub)\n"
    "  --direct-lanes yes|no     two workers that talk get a lane of their own\n"
    "                            (cgroup containment; default yes)\n"
    "  --containment auto|cgroup|process-group   how a slot's process tree is\n"
    "                            held (default auto: cgroups where possible)\n"
    "  --memory-max SIZE|max     per-slot memory limit (cgroup; K/M/G suffix)\n"
    "  --pids-max N|max          per-slot process and thread limit (cgroup)\n"
    "  --cpu-max QUOTA[/PERIOD]|max   per-slot CPU time in us per period (cgroup)\n"
    "  --rlimit NAME=N|SOFT:HARD every worker's rlimit (as, core, nofile ...),\n"
    "                            repeatable; 'unlimited' for none\n"
    "  --system-name S           (default " PM__DEFAULT_SYSTEM_NAME ")\n"
    "  --hostname S              (default " PM__DEFAULT_HOSTNAME ")\n"
    "  --base-port N             slot i gets port N+i (default " STR(PM__DEFAULT_BASE_PORT) ")\n"
    "  --init-data TEXT|@FILE    delivered to mesh workers at init\n"
    "  --ready mesh|notify|exec  mesh: the worker calls pm_node_ready (default);\n"
    "                            notify: sd_notify READY=1 on its NOTIFY_SOCKET;\n"
    "                            exec: ready once exec succeeded\n"
    "  --listen [NAME=]tcp:HOST:PORT|unix:PATH   socket handed to every worker\n"
    "                            (LISTEN_FDS convention), repeatable\n"
    "  --min-ready N             (default: all slots; 0 counts as 1)\n"
    "  --log-format text|json    (default text)\n"
    "  --log-level error|warn|info|debug   (default info)\n"
    "  --user USER[:GROUP]       workers drop to this user (procmesh runs as root)\n"
    "  --uid-range FIRST:COUNT   slot i runs as uid FIRST+i (root; siblings apart)\n"
    "  --no-new-privs yes|no     PR_SET_NO_NEW_PRIVS for workers (default yes)\n"
    "  --seccomp off|basic|strict   worker system-call filter (default off;\n"
    "                            strict: fork-mode workers only, refused here)\n"
    "  --seccomp-action errno|kill  a denied call fails with EPERM (default)\n"
    "                            or kills the worker\n"
    "  --output capture|inherit  workers' stdout/stderr as tagged log lines\n"
    "                            (event=output, default) or passed through\n"
    "  --max-message SIZE[K|M|G] largest message between mesh workers and the\n"
    "                            supervisor; above 64K they travel as sealed\n"
    "                            memfds (default 64M)\n"
    "  --core-dir DIR            workers' cores: RLIMIT_CORE unlimited, dumpable;\n"
    "                            kernel.core_pattern must name DIR (checked at\n"
    "                            start). Default: no cores (RLIMIT_CORE 0)\n"
    "\n"
    "peer links (peers in /status):\n"
    "  --peer-listen HOST:PORT   accept peers here\n"
    "  --peers HOST:PORT[,...]   connect to these peers\n"
    "  --peers-dns NAME:PORT     peers from every address of NAME (re-resolved\n"
    "                            every 30 s; a headless Service)\n"
    "  --peer-timeout MS         handshake and silence bound (default " STR(PM__DEFAULT_PEER_TIMEOUT_MS) ")\n"
    "  --secret-file FILE        the mesh's 32-byte pre-shared secret; twice for\n"
    "                            rotation (current, next); see procmesh keygen\n"
    "  --insecure-no-secret      peer links without a secret (anyone may join)\n"
    "  --allow-insecure-secret-mode   accept key files group or others can read\n"
    "  --node-key FILE           this host's static key (created 0600 if missing;\n"
    "                            default: a new key per start)\n"
    "  --peer-keys FILE          pin peers: lines 'HOST BASE64-PUBLIC-KEY'\n"
    "\n"
    "signals: SIGTERM/SIGINT drain (stop request, --stop-timeout, SIGKILL; a\n"
    "second one skips the wait); SIGUSR2 re-reads the --secret-file files (peer\n"
    "mode: the handshakes to come use them; links stay up, no worker restarts);\n"
    "SIGHUP does the same, then replaces the workers one slot at a time\n"
    "\n"
    "exit status: 0 stopped cleanly, 1 a worker had to be killed at stop,\n"
    "2 bad usage, 3 every slot retired, 4 could not start, 5 a slot ended in\n"
    "a failure and was not restarted (--restart never)\n"
    "\n"
    "procmesh keygen FILE writes a new secret (64 hex characters, mode 0600) and\n"
    "prints its id; --node-key FILE a new static key, printing its public key;\n"
    "--public FILE prints the public key of an existing static key file.\n";

/* What the daemon does between two turns of the loop, wherever it waits:
 * the health endpoint's header timeouts and accept pauses, and the
 * log_suppressed lines. */
static void between_turns(pmd_health *health, pmd_events *ev)
{
    pmd_health_tick(health);
    pmd_events_tick(ev);
}

/*
 * SIGHUP: replace the workers one slot at a time; the next slot is replaced
 * only after the previous replacement is ready, so at most one slot is down
 * at a time and never more than N workers (one per slot) are alive. The
 * listening sockets stay open throughout, and the health endpoint keeps its
 * limits (a replacement may take long to be ready). Returns 0, or -EINTR
 * when a SIGTERM/SIGINT arrived meanwhile (the caller drains).
 */
static int rolling_restart(pm_cluster *c, pmd_health *health, pmd_events *ev)
{
    pmd_log(PMD_LOG_INFO, "rolling_restart_begin", NULL, 0);
    unsigned n = pm_cluster_slots(c);
    for (unsigned i = 0; i < n; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        if (si.state != PM_SLOT_READY || pm_cluster_restart_slot(c, i) < 0)
            continue;
        uint64_t old = si.incarnation;
        for (;;) {
            int rc = pm_cluster_run(c, 100);
            between_turns(health, ev);
            if (rc == -EINTR && pm_cluster_last_signal(c) != SIGHUP)
                return -EINTR;
            pm_slot_info now;
            pm_cluster_slot_info(c, i, &now);
            if ((now.state == PM_SLOT_READY && now.incarnation > old) ||
                now.state == PM_SLOT_RETIRED || now.state == PM_SLOT_STOPPED)
                break;
        }
    }
    pmd_log(PMD_LOG_INFO, "rolling_restart_end", NULL, 0);
    return 0;
}

/* Stops the workers (drain) and frees the cluster. The health endpoint
 * lives in the cluster's loop, which this frees: it is closed first, so
 * probes during the drain see a refused connection, which orchestrators
 * treat as not ready. */
static int terminate(pm_cluster *c, pmd_health **health)
{
    pmd_health_stop(*health);
    *health = NULL;
    return pm_cluster_terminate(c);
}

/* getenv for pmd_dconf_parse, whose lookup returns const char *. */
static const char *env_get(const char *name)
{
    return getenv(name);
}

/* "HOST:PORT" or "[V6ADDR]:PORT" into host (brackets taken off); 0, or -1
 * when it is not that shape or the port is not a number 1-65535: a bad
 * argument, not a daemon that did not answer. */
static int split_host_port(const char *addr, char *host, size_t size)
{
    const char *colon = strrchr(addr, ':');
    if (colon == NULL || colon == addr)
        return -1;
    const char *port = colon + 1;
    size_t plen = strlen(port);
    if (plen == 0 || plen > 5 || strspn(port, "0123456789") != plen || atoi(port) < 1 ||
        atoi(port) > 65535)
        return -1;
    const char *h = addr;
    size_t hlen = (size_t)(colon - addr);
    if (h[0] == '[') {
        if (hlen < 3 || h[hlen - 1] != ']')
            return -1;
        h++;
        hlen -= 2;
    }
    if (hlen == 0 || hlen >= size)
        return -1;
    memcpy(host, h, hlen);
    host[hlen] = '\0';
    return 0;
}

/* procmesh status [--health HOST:PORT]: GET /status and print the slot
 * table. Exit 0, 2 bad usage (a bad HOST:PORT too), 4 cannot reach the
 * daemon (a name that does not resolve, no answer). */
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
    if (split_host_port(addr, host, sizeof(host)) < 0) {
        fprintf(stderr, "procmesh status: --health: '%s' is not HOST:PORT (a port 1-65535; "
                "[ADDRESS]:PORT for IPv6)\n", addr);
        return EXIT_USAGE;
    }
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV;
    if (getaddrinfo(host, strrchr(addr, ':') + 1, &hints, &res) != 0) {
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
    pmd_status_print(stdout, body + 4);
    return 0;
}

/* --core-dir: says at start whether kernel.core_pattern (host-wide; procmesh
 * changes neither it nor the workers' directory) puts the cores in dir. */
static void log_core_dir(const char *dir)
{
    char pattern[256], cwd[PATH_MAX], abs[PATH_MAX], why[1024];
    if (realpath(dir, abs) == NULL)
        snprintf(abs, sizeof(abs), "%s", dir);
    int fd = open("/proc/sys/kernel/core_pattern", O_RDONLY | O_CLOEXEC);
    ssize_t n = fd >= 0 ? read(fd, pattern, sizeof(pattern) - 1) : -1;
    int err = errno;
    if (fd >= 0)
        close(fd);
    if (n < 0) {
        const char *kv[] = {"dir", abs, "error", strerror(err),
                            "detail", "cannot read /proc/sys/kernel/core_pattern: where cores go is unknown"};
        pmd_log(PMD_LOG_WARN, "core_dir", kv, 3);
        return;
    }
    pattern[n] = '\0';
    pattern[strcspn(pattern, "\n")] = '\0';
    int where = pmd_core_pattern_check(pattern, abs, getcwd(cwd, sizeof(cwd)), why, sizeof(why));
    const char *kv[] = {"dir", abs, "core_pattern", pattern, "detail", why};
    pmd_log(where == PMD_CORE_IN_DIR ? PMD_LOG_INFO : PMD_LOG_WARN, "core_dir", kv, 3);
}

/* The log format asked for, looked up before the options are parsed, so
 * that a bad option is already reported as a JSON line when json was asked
 * for: in json mode every line procmesh writes on stderr is JSON (workers'
 * own lines too, unless --output inherit hands them stderr itself). */
static int early_log_format(int argc, char **argv)
{
    const char *v = getenv("PROCMESH_LOG_FORMAT");
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--log-format") == 0 && i + 1 < argc)
            v = argv[++i];
        else if (strncmp(argv[i], "--log-format=", 13) == 0)
            v = argv[i] + 13;
    }
    return v != NULL && strcmp(v, "json") == 0 ? PMD_LOG_JSON : PMD_LOG_TEXT;
}

/* A bad option or configuration, in the log's format. */
static void run_error(const char *err)
{
    if (!pmd_log_json()) {
        fprintf(stderr, "procmesh run: %s\n", err);
        return;
    }
    const char *kv[] = {"error", err};
    pmd_log(PMD_LOG_ERROR, "bad_usage", kv, 1);
}

/* The library's diagnostics (peers-dns failures and the like) as log
 * lines, so that they are JSON in json mode too. */
static void on_diagnostic(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c;
    (void)arg;
    const char *kv[] = {"detail", message};
    pmd_log(strcmp(topic, "peer_links_failed") == 0 ? PMD_LOG_ERROR : PMD_LOG_WARN, topic, kv, 1);
}

/* What `procmesh run` holds from its configuration to its exit. */
typedef struct run_state {
    pmd_dconf *conf;
    pm_options *o;
    int fds[PMD_MAX_LISTEN]; /* the --listen sockets, passed to the workers */
    int nfds;
    pmd_health_state hs;
    pmd_events ev;           /* its hs points at hs above */
    pm_cluster *c;
    pmd_health *health;      /* NULL: no health endpoint */
} run_state;

/* --help or -h before any "--": prints the usage and returns 1. */
static int run_wants_help(int argc, char **argv)
{
    for (int i = 0; i < argc && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--help") == 0 || strcmp(argv[i], "-h") == 0) {
            fputs(usage_text, stdout);
            return 1;
        }
    }
    return 0;
}

/* Parses the options and the environment into r->conf and the library's
 * options r->o, reading the peer-link key files. 0, or the exit status
 * after the error was logged. */
static int run_configure(run_state *r, int argc, char **argv)
{
    char err[512];
    pmd_log_setup(early_log_format(argc, argv), PMD_LOG_INFO);
    if (pmd_dconf_parse(r->conf, argc, argv, env_get, err, sizeof(err)) < 0) {
        run_error(err);
        return EXIT_USAGE;
    }
    pmd_log_setup(r->conf->log_format, r->conf->log_level);
    /* A worker running under our uid must not ptrace us or read our memory
     * through /proc: non-dumpable, before any worker exists. (No core dump
     * of the daemon afterwards, which is the price.) */
    if (prctl(PR_SET_DUMPABLE, 0, 0, 0, 0) < 0) {
        const char *kv[] = {"error", strerror(errno)};
        pmd_log(PMD_LOG_WARN, "not_dumpable_failed", kv, 2);
    }
    if (pmd_dconf_options(r->conf, &r->o, err, sizeof(err)) < 0) {
        run_error(err);
        return EXIT_USAGE;
    }
    pm_options_set_on_diagnostic(r->o, on_diagnostic, NULL);
    if (r->conf->peer_flags) {
        /* The key files are read (and bad ones named) before anything
         * starts. */
        if (pmd_dconf_peer_files(r->conf, r->o, err, sizeof(err)) < 0) {
            run_error(err);
            pm_options_free(r->o);
            pmd_dconf_free(r->conf);
            return EXIT_USAGE;
        }
        if (r->conf->insecure_no_secret) {
            const char *kv[] = {"reason", "--insecure-no-secret: anyone who reaches the peer port can join "
                                          "unless --peer-keys pins static keys"};
            pmd_log(PMD_LOG_WARN, "peer_links_insecure", kv, 1);
        }
    }
    if (r->conf->core_dir != NULL)
        log_core_dir(r->conf->core_dir);
    return 0;
}

/* Becomes the reaper of re-parented orphans, opens the --listen sockets for
 * the workers and installs the daemon's callbacks. 0, or the exit status. */
static int run_prepare(run_state *r)
{
    /* Orphans re-parented to us must be reaped: as PID 1 that is automatic,
     * elsewhere we become a child subreaper so the same holds. */
    if (getpid() != 1)
        prctl(PR_SET_CHILD_SUBREAPER, 1);
    r->nfds = pmd_listen_open(r->conf, r->fds);
    if (r->nfds < 0) {
        pm_options_free(r->o);
        return EXIT_START;
    }
    if (r->nfds > 0) {
        const char *names[PMD_MAX_LISTEN];
        for (int i = 0; i < r->nfds; i++)
            names[i] = r->conf->listen[i].name;
        /* dconf judged each name with this setter already; a refusal here
         * would leave the workers without LISTEN_FDS, so it is not ignored. */
        int rc = pm_options_set_listen_fds(r->o, r->fds, names, (size_t)r->nfds);
        if (rc < 0) {
            const char *kv[] = {"error", pm_strerror(rc), "option", "--listen"};
            pmd_log(PMD_LOG_ERROR, "start_failed", kv, 2);
            for (int i = 0; i < r->nfds; i++)
                close(r->fds[i]);
            pm_options_free(r->o);
            return EXIT_START;
        }
    }
    memset(&r->hs, 0, sizeof(r->hs));
    r->hs.min_ready = r->conf->min_ready;
    pmd_events_init(&r->ev, &r->hs);
    pm_options_set_on_event(r->o, pmd_on_event, &r->ev);
    pm_options_set_on_permanently_down(r->o, pmd_on_down, &r->ev);
    pm_options_set_on_output(r->o, pmd_on_output, &r->ev);
    return 0;
}

/* The supervisor holds about 9 fds per worker (its channel 4, pidfd, exec
 * pipe, cgroup 3; captured output 2 more) and 8 more for the next
 * incarnation's channel and pipe prepared ahead, kept only below half the
 * limit: 1,024 workers need some 9,500 to start, 35,000 for every slot to
 * keep its spare, far above the usual soft RLIMIT_NOFILE of 1,024. The daemon
 * uses no select(), so it raises its own soft limit to the hard one, as
 * systemd does for itself; its workers keep the limit the daemon was
 * started with (a program using select() breaks on an fd past 1,023)
 * unless --rlimit nofile says otherwise. Best effort: a refusal leaves the
 * limit as it was, and a cluster too large for it fails with EMFILE. */
static void raise_nofile(run_state *r)
{
    static struct rlimit rl; /* as the daemon was started (a reload runs this again) */
    static int raised;
    if (!raised) {
        struct rlimit up;
        if (getrlimit(RLIMIT_NOFILE, &rl) < 0 || rl.rlim_cur >= rl.rlim_max)
            return;
        up.rlim_cur = up.rlim_max = rl.rlim_max;
        if (setrlimit(RLIMIT_NOFILE, &up) < 0)
            return;
        raised = 1;
    }
    if (!r->conf->rlimit_set[RLIMIT_NOFILE])
        (void)pm_options_set_rlimit(r->o, RLIMIT_NOFILE,
                                    rl.rlim_cur == RLIM_INFINITY ? PM_RLIM_INFINITY : rl.rlim_cur,
                                    rl.rlim_max == RLIM_INFINITY ? PM_RLIM_INFINITY : rl.rlim_max);
}

/* Starts the workers (every slot ready when it returns) and the health
 * endpoint. 0, or the exit status after the failure was logged. */
static int run_start(run_state *r)
{
    raise_nofile(r);
    pmd_keyreload_early();
    int rc = pm_cluster_spawn(r->o, &r->c);
    if (rc == -EINTR) {
        /* SIGTERM/SIGINT while the workers were starting: they were killed
         * and reaped by pm_cluster_spawn; that is a drain that had to kill. */
        const char *kv[] = {"workers_killed", "true", "during", "start"};
        pmd_log(PMD_LOG_INFO, "drain_end", kv, 2);
        pmd_events_free(&r->ev);
        pm_options_free(r->o);
        return EXIT_DRAIN_KILLED;
    }
    if (rc < 0) {
        /* The library's words for the first failure when it gave them
         * ("worker exited with code 1 before it was ready"), else the errno. */
        const char *why = r->ev.start_error[0] != '\0' ? r->ev.start_error : pm_strerror(rc);
        const char *kv[] = {"error", why, "command", r->conf->argv[0]};
        pmd_log(PMD_LOG_ERROR, "start_failed", kv, 2);
        pmd_events_free(&r->ev);
        pm_options_free(r->o);
        return EXIT_START;
    }
    r->health = NULL;
    if (r->conf->health_host[0] != '\0' || r->conf->health_port != 0) {
        r->health = pmd_health_start(r->c, r->conf->health_host, r->conf->health_port, &r->hs);
        if (r->health == NULL) {
            const char *kv[] = {"health", r->conf->health_host, "error", strerror(errno)};
            pmd_log(PMD_LOG_ERROR, "health_failed", kv, 2);
            pm_cluster_terminate(r->c);
            pmd_events_free(&r->ev);
            pm_options_free(r->o);
            return EXIT_START;
        }
    }
    return 0;
}

/* SIGTERM/SIGINT: stops every worker within the stop timeout and returns
 * the exit status (a drain that had to kill, a slot failed before, or 0). */
static int run_drain(run_state *r)
{
    char sig[32];
    const char *kv[] = {"signal", pmd_signal_name(pm_cluster_last_signal(r->c), sig, sizeof(sig))};
    pmd_log(PMD_LOG_INFO, "drain_begin", kv, 1);
    r->hs.draining = 1; /* /readyz says no from now on */
    pmd_notify("STOPPING=1");
    struct pm_cluster_stats st;
    pm_cluster_stats(r->c, &st);
    int rc = terminate(r->c, &r->health);
    /* A slot that had failed for good before the drain still says so (exit
     * 5), unless the drain itself had to kill (exit 1). */
    int status = rc != 0 ? EXIT_DRAIN_KILLED : r->ev.failed_stops > 0 ? EXIT_SLOT_FAILED : 0;
    char orphans[24];
    snprintf(orphans, sizeof(orphans), "%llu", (unsigned long long)st.orphans_reaped);
    const char *kv2[] = {"workers_killed", rc == 0 ? "false" : "true", "orphans_reaped", orphans};
    pmd_log(PMD_LOG_INFO, "drain_end", kv2, 2);
    return status;
}

/* Nothing left to supervise: every slot retired (the orchestrator should
 * restart us) or ended for good; the exit status is 0 only when every one
 * ended cleanly. */
static int run_all_ended(run_state *r)
{
    const pmd_events *ev = &r->ev;
    int status = ev->retired > 0 ? EXIT_RETIRED : ev->failed_stops > 0 ? EXIT_SLOT_FAILED : 0;
    const char *why = ev->retired > 0        ? "all slots retired"
                      : ev->failed_stops > 0 ? "a slot ended in a failure and was not restarted"
                                             : "all slots stopped";
    char failed[16];
    snprintf(failed, sizeof(failed), "%u", ev->failed_stops);
    const char *kv[] = {"reason", why, "failed_slots", failed};
    pmd_log(status != 0 ? PMD_LOG_ERROR : PMD_LOG_INFO, "exit", kv, 2);
    terminate(r->c, &r->health);
    return status;
}

/* The supervision loop: turns of the cluster, the systemd watchdog, key
 * reloads (SIGUSR2, SIGHUP), rolling restarts (SIGHUP), until a drain, a
 * loop failure or no slot left. Returns the exit status. */
static int run_loop(run_state *r)
{
    pmd_keyreload kr;
    pmd_keyreload_arm(&kr, r->c);
    /* pm_cluster_spawn returned: every slot is ready. */
    pmd_notify("READY=1");
    uint64_t wd = pmd_watchdog_interval_ms(), next_wd = wd ? pmd_now_ms() : 0;
    int status = 0;
    for (;;) {
        if (wd && pmd_now_ms() >= next_wd) {
            pmd_notify("WATCHDOG=1");
            next_wd = pmd_now_ms() + wd;
        }
        int rc = pm_cluster_run(r->c, wd && wd < 1000 ? (int)wd : 1000);
        between_turns(r->health, &r->ev);
        if (kr.pending) {
            kr.pending = 0;
            pmd_keys_reload(r->c, r->conf, "SIGUSR2");
        }
        if (rc == -EINTR && pm_cluster_last_signal(r->c) == SIGHUP) {
            if (r->conf->peer_flags)
                pmd_keys_reload(r->c, r->conf, "SIGHUP");
            rc = rolling_restart(r->c, r->health, &r->ev);
        }
        if (rc == -EINTR) {
            status = run_drain(r);
            break;
        }
        if (rc < 0) {
            const char *kv[] = {"error", pm_strerror(rc)};
            pmd_log(PMD_LOG_ERROR, "loop_failed", kv, 1);
            terminate(r->c, &r->health);
            status = EXIT_START;
            break;
        }
        if (pm_cluster_size(r->c) == 0) {
            status = run_all_ended(r);
            break;
        }
    }
    pmd_keyreload_close(&kr);
    return status;
}

/* `procmesh run`: configure, prepare, start, supervise, then release what
 * the run held. Returns the exit status (see the usage text). */
static int cmd_run(int argc, char **argv)
{
    static pmd_dconf conf;
    static run_state r;
    int status;
    if (run_wants_help(argc, argv))
        return 0;
    r.conf = &conf;
    if ((status = run_configure(&r, argc, argv)) != 0 || (status = run_prepare(&r)) != 0 ||
        (status = run_start(&r)) != 0)
        return status;
    status = run_loop(&r);
    pmd_events_free(&r.ev);
    pm_options_free(r.o);
    for (int i = 0; i < r.nfds; i++)
        close(r.fds[i]);
    pmd_dconf_free(&conf);
    return status;
}

/* procmesh keygen [--node-key | --public] FILE. Never overwrites a file,
 * never prints a secret: a secret's id, or a static key's public half. */
static int cmd_keygen(int argc, char **argv)
{
    const char *mode = NULL, *path = NULL;
    for (int i = 0; i < argc; i++) {
        if (strcmp(argv[i], "--help") == 0) {
            printf("usage: procmesh keygen [--node-key | --public] FILE\n");
            return 0;
        }
        if ((strcmp(argv[i], "--node-key") == 0 || strcmp(argv[i], "--public") == 0) && mode == NULL)
            mode = argv[i];
        else if (argv[i][0] != '-' && path == NULL)
            path = argv[i];
        else {
            fprintf(stderr, "procmesh keygen: '%s': unexpected (usage: procmesh keygen [--node-key | --public] FILE)\n",
                    argv[i]);
            return EXIT_USAGE;
        }
    }
    if (path == NULL) {
        fprintf(stderr, "procmesh keygen: FILE is required (usage: procmesh keygen [--node-key | --public] FILE)\n");
        return EXIT_USAGE;
    }
    char why[384];
    pm__keyring *kr = NULL;
    int rc = pm__keyring_new(&kr);
    if (rc < 0) {
        fprintf(stderr, "procmesh keygen: no secret memory: %s\n", strerror(-rc));
        return 1;
    }
    /* The key only ever lives in secret memory (guarded, never dumped,
     * wiped when freed). */
    unsigned char *key = pm__secretmem_alloc(PM__PEER_KEY_LEN);
    if (key == NULL) {
        pm__keyring_free(kr);
        fprintf(stderr, "procmesh keygen: no secret memory\n");
        return 1;
    }
    if (mode == NULL) {
        rc = pm__peer_key_create(path, key, why, sizeof(why));
        if (rc == 0) {
            unsigned char id[PM__PEER_KEY_ID_LEN];
            char hex[2 * PM__PEER_KEY_ID_LEN + 1];
            pm__peer_key_id(key, id);
            for (size_t i = 0; i < sizeof(id); i++)
                snprintf(hex + 2 * i, 3, "%02x", id[i]);
            printf("key id %s\n", hex);
        }
    } else {
        rc = strcmp(mode, "--node-key") == 0 ? pm__peer_key_create(path, key, why, sizeof(why))
                                             : pm__peer_key_load(path, 0, key, why, sizeof(why));
        if (rc == 0)
            rc = pm__keyring_set_static(kr, key);
        unsigned char pub[PM__PEER_KEY_LEN];
        char b64[PM__PEER_KEY_B64_LEN + 1];
        if (rc == 0 && pm__keyring_static_pub(kr, pub) == 0) {
            pm__peer_key_b64(pub, b64);
            printf("%s\n", b64);
        }
    }
    pm__secretmem_free(key);
    pm__keyring_free(kr);
    if (rc < 0) {
        fprintf(stderr, "procmesh keygen: %s\n", why);
        return 1;
    }
    return 0;
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
    if (strcmp(cmd, "keygen") == 0)
        return cmd_keygen(argc - 2, argv + 2);
    fprintf(stderr,
            "procmesh: unknown command '%s' (commands: run, status, keygen, version; see procmesh --help)\n",
            cmd);
    return EXIT_USAGE;
}
