/* SPDX-License-Identifier: MIT */
/* compare.c - pm-bench compare: the same three workloads over procmesh, relay processes and Node.js. */
#define _GNU_SOURCE
#include "bench.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/prctl.h>

#ifndef PM_BENCH_SRCDIR
#define PM_BENCH_SRCDIR "."
#endif
#ifndef PM_BENCH_DATADIR
#define PM_BENCH_DATADIR "."
#endif

enum workload { W_STREAM, W_RTT, W_CRASH };
static const char *const workload_names[] = {"stream", "rtt", "crash"};

enum transport { T_FORK, T_EXEC, T_PIPES, T_UNIX, T_THREADS, T_CLUSTER, T__COUNT };
/* The relay processes have no restart of their own: under crash their rows
 * are the floor of any restart, a bare fork (+ exec) + exit + waitpid. */
static const char *const names[][T__COUNT] = {
    {"procmesh fork", "procmesh exec", "pipes relay", "unix relay", "node worker_threads",
     "node cluster"},
    {"procmesh fork", "procmesh exec", "pipes relay", "unix relay", "node worker_threads",
     "node cluster"},
    {"procmesh fork", "procmesh exec", "fork+exit+wait", "fork+exec+wait", "node worker_threads",
     "node cluster"},
};

/* What the workers of a procmesh run get as init data (fork and exec mode
 * alike): slot 0 sends or requests, slot 1 receives or answers. */
struct cmp_params {
    uint32_t workload;
    uint32_t size;
    uint64_t count;
};

/* One run's figures: stream {elapsed ns}; rtt and crash {p50, p90, p99, p999} ns. */
typedef struct result {
    uint64_t v[4];
} result;

/* ------------------------------------------------------------------ procmesh workers */

static pm_address main_address(const pm_node *n)
{
    pm_address a = *pm_node_self(n);
    snprintf(a.host, sizeof(a.host), "main");
    a.port = 0;
    a.incarnation = 0;
    return a;
}

static void percentiles(uint64_t *v, size_t n, result *r)
{
    static const double p[4] = {0.50, 0.90, 0.99, 0.999};
    sort_u64(v, n);
    for (int i = 0; i < 4; i++)
        r->v[i] = percentile(v, n, p[i]);
}

/* A worker of compare's procmesh runs. Its results go to main as a
 * message: stream "done" from the receiver, rtt the percentiles from the
 * requester. Returns the exit code (0 after the stop request). */
static int compare_worker(pm_node *n, void *arg)
{
    (void)arg;
    const void *data;
    size_t len;
    struct cmp_params p;
    if (pm_node_init_data(n, &data, &len) < 0 || len != sizeof(p))
        return 10;
    memcpy(&p, data, sizeof(p));
    pm_node_ready(n);
    unsigned slot = pm_node_slot(n);
    pm_address peer = *pm_node_self(n), to_main = main_address(n);
    peer.port = (uint16_t)(peer.port - slot + (1 - slot));
    peer.incarnation = 0;
    char *buf = calloc(1, p.size);
    uint64_t *samples = calloc(p.count, sizeof(*samples));
    pm_message m, reply;
    int rc = 0;
    if (buf == NULL || samples == NULL || pm_node_recv(n, &m, -1) != 0) /* "start" from main */
        rc = 11;
    for (uint64_t i = 0; rc == 0 && i < p.count; i++) {
        if (p.workload == W_STREAM && slot == 0) {
            rc = pm_node_send(n, &peer, buf, p.size) == 0 ? 0 : 12;
        } else if (p.workload == W_STREAM) {
            rc = pm_node_recv(n, &m, 10000) == 0 && m.len == p.size ? 0 : 13;
        } else if (slot == 0) {
            uint64_t t0 = pm__now_ns();
            rc = pm_node_request(n, &peer, buf, p.size, 10000, &reply) == 0 ? 0 : 14;
            samples[i] = pm__now_ns() - t0;
        } else {
            rc = pm_node_recv(n, &m, 10000) == 0 && m.kind == PM_MSG_REQUEST ? 0 : 15;
            if (rc == 0)
                rc = pm_node_reply(n, &m, m.data, m.len) == 0 ? 0 : 16;
        }
    }
    if (rc == 0 && p.workload == W_STREAM && slot == 1)
        rc = pm_node_send(n, &to_main, "done", 4) == 0 ? 0 : 17;
    if (rc == 0 && p.workload == W_RTT && slot == 0) {
        result r;
        percentiles(samples, p.count, &r);
        rc = pm_node_send(n, &to_main, &r, sizeof(r)) == 0 ? 0 : 18;
    }
    free(buf);
    free(samples);
    while (rc == 0 && pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return rc;
}

int compare_worker_main(void)
{
    pm_node *n;
    if (pm_node_join(&n) < 0)
        return 1;
    int rc = compare_worker(n, NULL);
    pm_node_close(n);
    return rc;
}

/* What main got from the workers: filled by on_result. */
static struct {
    int got;
    result r;
} answer;

static void on_result(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    if (m->len == sizeof(answer.r))
        memcpy(&answer.r, m->data, sizeof(answer.r));
    answer.got = 1;
}

/* One procmesh run of the stream or rtt workload, with the library's
 * default spinning (what a user gets without tuning). 0 or -1. */
static int mesh_run(int exec_mode, int workload, size_t size, uint64_t count, result *out)
{
    int ret = -1;
    pm_cluster *c = NULL;
    pm_options *o = bench_options(2, exec_mode);
    if (exec_mode) {
        char *argv[] = {"pm-bench", "__compare", NULL};
        pm_options_set_exec(o, self_exe, argv);
    } else {
        pm_options_set_bootstrap(o, compare_worker, NULL);
    }
    struct cmp_params p = {.workload = (uint32_t)workload, .size = (uint32_t)size, .count = count};
    pm_options_set_init_data(o, &p, sizeof(p));
    pm_options_set_on_event(o, NULL, NULL);
    pm_options_set_on_message(o, on_result, NULL);
    pm_options_set_ring_size(o, RING_CAP);
    answer.got = 0;
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: compare: spawn: %s\n", pm_strerror(rc));
        c = NULL;
        goto out;
    }
    pm_address a[2];
    int n = pm_cluster_addresses(c, a, 2);
    uint64_t t0 = pm__now_ns();
    for (int i = 0; i < n && i < 2; i++)
        pm_cluster_send(c, &a[i], "start", 5);
    while (!answer.got) {
        if (pm_cluster_run(c, 10) < 0 || pm__now_ns() - t0 > 120000000000ull) {
            fprintf(stderr, "pm-bench: compare: procmesh %s did not finish\n",
                    workload_names[workload]);
            goto out;
        }
    }
    if (workload == W_STREAM)
        out->v[0] = pm__now_ns() - t0;
    else
        *out = answer.r;
    ret = 0;
out:
    if (c != NULL)
        pm_cluster_terminate(c);
    pm_options_free(o);
    return ret;
}

/* ------------------------------------------------------------------ Node.js */

static char node_path[4096];
static char js_path[4096];

/* node from PM_BENCH_NODE (empty: none) or PATH; compare.js from
 * PM_BENCH_JS, the source tree pm-bench was built from, or the installed
 * data directory. 1 when both were found. */
static int find_node(void)
{
    const char *env = getenv("PM_BENCH_NODE");
    if (env != NULL) {
        snprintf(node_path, sizeof(node_path), "%s", env);
    } else {
        node_path[0] = '\0';
        const char *path = getenv("PATH");
        char *copy = strdup(path != NULL ? path : "/usr/bin:/bin"), *save = NULL;
        for (char *d = strtok_r(copy, ":", &save); d != NULL && node_path[0] == '\0';
             d = strtok_r(NULL, ":", &save)) {
            snprintf(node_path, sizeof(node_path), "%s/node", d);
            if (access(node_path, X_OK) != 0)
                node_path[0] = '\0';
        }
        free(copy);
    }
    if (node_path[0] == '\0' || access(node_path, X_OK) != 0)
        return 0;
    env = getenv("PM_BENCH_JS");
    if (env != NULL)
        snprintf(js_path, sizeof(js_path), "%s", env);
    else if (snprintf(js_path, sizeof(js_path), "%s/compare.js", PM_BENCH_SRCDIR) > 0 &&
             access(js_path, R_OK) != 0)
        snprintf(js_path, sizeof(js_path), "%s/compare.js", PM_BENCH_DATADIR);
    if (access(js_path, R_OK) != 0) {
        fprintf(stderr, "pm-bench: compare: node found but not %s (set PM_BENCH_JS)\n", js_path);
        return 0;
    }
    return 1;
}

/* One run of compare.js; its "result ..." line into out. 0 or -1. */
static int node_run(int cluster, int workload, size_t size, uint64_t count, result *out)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        die("pipe");
    pid_t parent = getpid();
    pid_t pid = fork_or_die();
    if (pid == 0) {
        /* node and its cluster workers die with pm-bench (the workers exit
         * when their IPC channel to the primary closes). */
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) < 0 || getppid() != parent)
            _exit(126);
        dup2(p[1], 1);
        char sz[32], cnt[32];
        snprintf(sz, sizeof(sz), "%zu", size > 0 ? size : 1); /* crash: unused */
        snprintf(cnt, sizeof(cnt), "%" PRIu64, count);
        char *argv[] = {"node", js_path, cluster ? "cluster" : "threads",
                        (char *)workload_names[workload], sz, cnt, NULL};
        execv(node_path, argv);
        _exit(127);
    }
    close(p[1]);
    char buf[512];
    size_t have = 0;
    ssize_t k;
    while ((k = read(p[0], buf + have, sizeof(buf) - 1 - have)) > 0 || (k < 0 && errno == EINTR))
        have += k > 0 ? (size_t)k : 0;
    buf[have] = '\0';
    close(p[0]);
    int status = wait_child(pid);
    result r = {{0, 0, 0, 0}};
    int want = workload == W_STREAM ? 1 : 4;
    int got = sscanf(buf, "result %" SCNu64 " %" SCNu64 " %" SCNu64 " %" SCNu64, &r.v[0], &r.v[1],
                     &r.v[2], &r.v[3]);
    if (status != 0 || got != want) {
        fprintf(stderr, "pm-bench: compare: node %s %s failed (exit %d, output '%s')\n",
                cluster ? "cluster" : "worker_threads", workload_names[workload], status, buf);
        return -1;
    }
    *out = r;
    return 0;
}

/* ------------------------------------------------------------------ the command */

struct counts {
    uint64_t stream[2]; /* procmesh and the relay processes, per size */
    unsigned rounds, crash_rounds;
};

/* Node moves far fewer frames a second: its counts are cut so that each run
 * takes about as long as procmesh's (rates are compared, not times). */
static uint64_t node_count(const struct counts *k, int workload, int z, int cluster)
{
    uint64_t v = workload == W_STREAM ? k->stream[z] / (cluster ? 50 : 10)
                 : workload == W_RTT  ? k->rounds / (cluster ? 10 : 5)
                                      : k->crash_rounds / (cluster ? 30 : 10);
    uint64_t min = workload == W_STREAM ? 200 : workload == W_RTT ? 20 : 3;
    return v > min ? v : min;
}

/* One run of transport t. 0, or -1 when it failed. */
static int run_one(int t, int workload, size_t size, int z, const struct counts *k, result *r,
                   uint64_t *scratch, uint64_t *count)
{
    *count = workload == W_STREAM ? k->stream[z] : workload == W_RTT ? k->rounds : k->crash_rounds;
    if (t == T_THREADS || t == T_CLUSTER) {
        *count = node_count(k, workload, z, t == T_CLUSTER);
        return node_run(t == T_CLUSTER, workload, size, *count, r);
    }
    if (workload == W_CRASH) {
        if (t == T_PIPES || t == T_UNIX) {
            restart_baseline(t == T_UNIX, k->crash_rounds, scratch);
        } else {
            pm_options *o = bench_options(1, t == T_EXEC);
            int rc = restart_rounds(o, k->crash_rounds, scratch);
            pm_options_free(o);
            if (rc != 0)
                return -1;
        }
        percentiles(scratch, k->crash_rounds, r);
        return 0;
    }
    if (t == T_FORK || t == T_EXEC)
        return mesh_run(t == T_EXEC, workload, size, *count, r);
    if (fd_relay_run(t == T_UNIX, workload == W_RTT, size, *count, &r->v[0], scratch) < 0)
        return -1;
    if (workload == W_RTT)
        percentiles(scratch, *count, r);
    return 0;
}

/* Crash workload, after its table: procmesh fork mode with a warm standby
 * (pm_options_set_warm_standby), opt-in and so a row of its own, with its
 * speed-up over each baseline of the same run (med). 0 or -1. */
static int standby_row(const struct counts *k, unsigned runs, double med[][4], int have_node,
                       uint64_t *scratch, uint64_t *sorted)
{
    static const char *const name = "procmesh fork standby";
    result r[101];
    for (unsigned i = 0; i < runs; i++) {
        pm_options *o = bench_options(1, 0);
        pm_options_set_warm_standby(o, 1);
        int rc = restart_rounds(o, k->crash_rounds, scratch);
        pm_options_free(o);
        if (rc != 0)
            return -1;
        percentiles(scratch, k->crash_rounds, &r[i]);
    }
    double m[4];
    for (int j = 0; j < 4; j++) {
        for (unsigned i = 0; i < runs; i++)
            sorted[i] = r[i].v[j];
        m[j] = (double)median(sorted, runs);
    }
    printf("  %-22s %10.3f %10.3f %10.3f %10.3f\n", name, m[0] / 1e6, m[1] / 1e6, m[2] / 1e6,
           m[3] / 1e6);
    static const char *const pct[4] = {"p50_ns", "p90_ns", "p99_ns", "p999_ns"};
    for (int j = 0; j < 4; j++)
        csv_row("compare", "crash", 0, name, pct[j], m[j]);
    printf("    its speed-up:");
    for (int t = T_PIPES; t < T__COUNT; t++) {
        if ((t == T_THREADS || t == T_CLUSTER) && !have_node)
            continue;
        double f = med[t][0] / m[0];
        printf(" %s %.2fx;", names[W_CRASH][t], f);
        csv_row("compare", "crash", 0, names[W_CRASH][t], "standby_speedup", f);
    }
    printf(" over procmesh fork without it %.2fx\n", med[T_FORK][0] / m[0]);
    return 0;
}

/* Prints a workload's table: each transport's median over the runs, and
 * for every baseline how many times faster procmesh fork and exec are. */
static int table(int workload, size_t size, int z, const struct counts *k, unsigned runs,
                 int have_node)
{
    double med[T__COUNT][4];
    uint64_t *scratch = calloc(k->rounds > k->crash_rounds ? k->rounds : k->crash_rounds,
                               sizeof(*scratch));
    uint64_t *sorted = calloc(runs, sizeof(*sorted));
    int ret = 0;
    if (workload == W_STREAM)
        printf("relay stream, %zu B frames: A -> broker -> B (frames/s)\n", size);
    else if (workload == W_RTT)
        printf("request/reply round trip through the broker, %zu B (us)\n", size);
    else
        printf("crash-to-replacement-ready, SIGKILL or terminate until ready (ms)\n");
    if (workload == W_STREAM)
        printf("  %-22s %14s %12s %14s %14s\n", "transport", "frames/s", "MB/s", "fork speed-up",
               "exec speed-up");
    else
        printf("  %-22s %10s %10s %10s %10s %14s %14s\n", "transport", "p50", "p90", "p99", "p999",
               "fork speed-up", "exec speed-up");
    for (int t = 0; t < T__COUNT && ret == 0; t++) {
        if ((t == T_THREADS || t == T_CLUSTER) && !have_node) {
            printf("  %-22s skipped: node not on PATH (install nodejs)\n", names[workload][t]);
            continue;
        }
        uint64_t count = 0;
        result r[101];
        for (unsigned i = 0; i < runs && ret == 0; i++)
            ret = run_one(t, workload, size, z, k, &r[i], scratch, &count);
        if (ret != 0)
            break;
        for (int j = 0; j < 4; j++) {
            for (unsigned i = 0; i < runs; i++)
                sorted[i] = r[i].v[j];
            med[t][j] = (double)median(sorted, runs);
        }
        if (workload == W_STREAM)
            med[t][0] = (double)count * 1e9 / med[t][0]; /* frames/s */
        char fx[32] = "-", ex[32] = "-";
        if (t >= T_PIPES) {
            /* Speed-up: a rate over the baseline's, or the baseline's time
             * over ours. */
            double f = workload == W_STREAM ? med[T_FORK][0] / med[t][0] : med[t][0] / med[T_FORK][0];
            double e = workload == W_STREAM ? med[T_EXEC][0] / med[t][0] : med[t][0] / med[T_EXEC][0];
            snprintf(fx, sizeof(fx), "%.2fx", f);
            snprintf(ex, sizeof(ex), "%.2fx", e);
            csv_row("compare", workload_names[workload], size, names[workload][t], "fork_speedup", f);
            csv_row("compare", workload_names[workload], size, names[workload][t], "exec_speedup", e);
        }
        if (workload == W_STREAM) {
            printf("  %-22s %14.0f %12.1f %14s %14s\n", names[workload][t], med[t][0],
                   med[t][0] * (double)size / 1e6, fx, ex);
            csv_row("compare", "stream", size, names[workload][t], "frames_per_s", med[t][0]);
        } else {
            double unit = workload == W_RTT ? 1e3 : 1e6;
            printf("  %-22s %10.3f %10.3f %10.3f %10.3f %14s %14s\n", names[workload][t],
                   med[t][0] / unit, med[t][1] / unit, med[t][2] / unit, med[t][3] / unit, fx, ex);
            static const char *const pct[4] = {"p50_ns", "p90_ns", "p99_ns", "p999_ns"};
            for (int j = 0; j < 4; j++)
                csv_row("compare", workload_names[workload], size, names[workload][t], pct[j],
                        med[t][j]);
        }
    }
    if (ret == 0 && workload == W_CRASH)
        ret = standby_row(k, runs, med, have_node, scratch, sorted);
    free(scratch);
    free(sorted);
    return ret;
}

int cmd_compare(const bench_opts *opts)
{
    struct counts k = {
        .stream = {opts->frames ? opts->frames : 1000000, opts->frames ? opts->frames : 200000},
        .rounds = opts->rounds,
        .crash_rounds = opts->rounds / 10 > 3 ? opts->rounds / 10 : 3,
    };
    unsigned runs = opts->runs;
    if (opts->quick) {
        k = (struct counts){.stream = {2000, 500}, .rounds = 50, .crash_rounds = 5};
        runs = 1;
    }
    int have_node = find_node();
    print_machine();
    print_build();
    printf("compare: median of %u runs of each transport, all in this invocation%s\n", runs,
           opts->quick ? " (--quick: tiny counts, not a measurement)" : "");
    if (!have_node)
        printf("node: skipped: node not on PATH (install nodejs, or set PM_BENCH_NODE)\n");
    static const size_t sizes[] = {64, 4096};
    for (int z = 0; z < 2; z++)
        if (table(W_STREAM, sizes[z], z, &k, runs, have_node) != 0)
            return 1;
    if (table(W_RTT, 64, 0, &k, runs, have_node) != 0 || table(W_CRASH, 0, 0, &k, runs, have_node) != 0)
        return 1;
    return 0;
}
