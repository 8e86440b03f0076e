/* SPDX-License-Identifier: MIT */
/* scale.c - pm-bench scale: throughput, round trip, hub CPU and memory as the number of workers grows. */
#define _GNU_SOURCE
#include "bench.h"
#include "counters.h"

#include <inttypes.h>
#include <stddef.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>

/* Under valgrind --tool=callgrind (tools/bench/hubwork.sh) only the
 * supervisor's stream phase is counted: the client requests below turn the
 * instrumentation on around it and dump one profile per N. Natively they
 * cost a few instructions outside the timed loop; without valgrind's
 * headers they are nothing. */
#if defined(__has_include)
#if __has_include(<valgrind/callgrind.h>)
#include <valgrind/callgrind.h>
#define HAVE_CALLGRIND 1
#endif
#endif
#ifndef HAVE_CALLGRIND
#define RUNNING_ON_VALGRIND 0
#define CALLGRIND_START_INSTRUMENTATION ((void)0)
#define CALLGRIND_STOP_INSTRUMENTATION ((void)0)
#define CALLGRIND_ZERO_STATS ((void)0)
#define CALLGRIND_DUMP_STATS_AT(desc) ((void)(desc))
#endif

/* Shared with the fork-mode workers (MAP_SHARED, made before the spawn). */
struct scale_shared {
    size_t size;
    uint64_t quota;       /* stream: frames each worker sends to the next (and receives) */
    unsigned rounds_each; /* rtt: requests each worker but slot 0 makes */
    _Atomic unsigned done;
    uint64_t samples[]; /* rtt: slot s's round trips at (s - 1) * rounds_each, ns */
};

static struct scale_shared *ssh;

/* Set when running under valgrind: the stream phase only, instrumented
 * (the forked workers inherit "off" and are never counted). */
static int under_callgrind;

/* ------------------------------------------------------------------ the workers */

/* The stream phase's count of frames received from the previous worker.
 * Frames may arrive before this worker's own "stream" command does. */
static uint64_t got;

static void take(pm_node *n, const pm_message *m)
{
    if (m->kind == PM_MSG_REQUEST)
        pm_node_reply(n, m, m->data, m->len);
    else if (m->kind == PM_MSG_PLAIN && m->from.port != 0)
        got++;
}

/* Each worker sends quota frames to the next while it receives quota from
 * the previous one. Sending without reading would deadlock the circle once
 * every ring and the hub's queues are full, so sends are tried, and the
 * worker reads whenever it cannot send; once it has all it should receive,
 * nobody waits for it and it may block in send, and once it has sent all
 * it blocks in receive.
 *
 * A worker that can neither send nor receive waits for a message with a
 * timeout, because the API has no wait for "room to send" (pm_node_fd is
 * readable for messages only). That timeout backs off from 1 ms to 16 ms
 * while nothing moves: at 1 ms, 256 such workers woke 256,000 times a
 * second between them, which took both CPUs of this machine and starved
 * the hub they were waiting for (the N = 256 stream made no progress in
 * 20 s). Any progress resets it. */
static void stream(pm_node *n, const pm_address *next, const char *buf)
{
    uint64_t q = ssh->quota, sent = 0;
    int wait_ms = 1;
    pm_message m;
    while (sent < q || got < q) {
        int progress = 0;
        for (int b = 0; b < 32 && sent < q; b++) {
            int rc = got >= q ? pm_node_send(n, next, buf, ssh->size)
                              : pm_node_try_send(n, next, buf, ssh->size);
            if (rc != 0)
                break;
            sent++;
            progress = 1;
        }
        while (got < q && pm_node_recv(n, &m, 0) == 0) {
            take(n, &m);
            progress = 1;
        }
        if (progress) {
            wait_ms = 1;
            continue;
        }
        int rc = pm_node_recv(n, &m, sent < q ? wait_ms : -1);
        if (rc == 0) {
            take(n, &m);
            wait_ms = 1;
        } else if (rc == -ESHUTDOWN) {
            return;
        } else if (wait_ms < 16) {
            wait_ms *= 2;
        }
    }
    atomic_fetch_add(&ssh->done, 1);
}

static void requests(pm_node *n, const pm_address *server, const char *buf, unsigned slot)
{
    pm_message reply;
    uint64_t *v = &ssh->samples[(size_t)(slot - 1) * ssh->rounds_each];
    for (unsigned i = 0; i < ssh->rounds_each; i++) {
        uint64_t t0 = pm__now_ns();
        if (pm_node_request(n, server, buf, ssh->size, 30000, &reply) != 0)
            _exit(3);
        v[i] = pm__now_ns() - t0;
    }
    atomic_fetch_add(&ssh->done, 1);
}

/* Waits for main's commands ("s" stream, "r" requests); slot 0 answers the
 * requests of all the others. */
static int scale_worker(pm_node *n, void *arg)
{
    pm_node_ready(n);
    unsigned slot = pm_node_slot(n), workers = (unsigned)(uintptr_t)arg;
    pm_address next = *pm_node_self(n), server = next;
    next.port = (uint16_t)(next.port - slot + (slot + 1) % workers);
    next.incarnation = 0;
    server.port = (uint16_t)(server.port - slot);
    server.incarnation = 0;
    char *buf = calloc(1, ssh->size);
    pm_message m;
    int rc;
    while ((rc = pm_node_recv(n, &m, -1)) != -ESHUTDOWN) {
        if (rc != 0)
            continue;
        if (m.kind == PM_MSG_PLAIN && m.from.port == 0 && m.len == 1) {
            if (((const char *)m.data)[0] == 's')
                stream(n, &next, buf);
            else if (slot != 0)
                requests(n, &server, buf, slot);
        } else {
            take(n, &m);
        }
    }
    free(buf);
    return 0;
}

/* ------------------------------------------------------------------ memory */

/* The supervisor's private memory: Private_Clean + Private_Dirty of its
 * non-shared mappings (the 'p' in /proc/self/smaps' permissions; the rings
 * are shared mappings and never counted there), and the ring pages really
 * resident (mincore over the rings' shared mappings: a page counts once a
 * worker or the hub wrote it, whoever faulted it in), in KiB. */
static void memory(double *priv_out, double *ring_out)
{
    long priv = 0, ring_kib = 0;
    FILE *f = fopen("/proc/self/smaps", "r");
    char line[512];
    int ring = 0, private_map = 0;
    long page = sysconf(_SC_PAGESIZE);
    unsigned char *vec = NULL;
    size_t veclen = 0;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        unsigned long lo, hi;
        char perms[8];
        long kib;
        if (sscanf(line, "%lx-%lx %7s ", &lo, &hi, perms) == 3) {
            ring = strstr(line, "/memfd:procmesh-slot") != NULL;
            private_map = perms[3] == 'p';
            size_t pages = (hi - lo) / (unsigned long)page;
            if (ring && pages > veclen) {
                free(vec);
                vec = malloc(pages);
                veclen = vec != NULL ? pages : 0;
            }
            if (ring && vec != NULL && mincore((void *)lo, hi - lo, vec) == 0)
                for (size_t i = 0; i < pages; i++)
                    ring_kib += (vec[i] & 1) ? page / 1024 : 0;
        } else if (private_map && !ring && (sscanf(line, "Private_Clean: %ld kB", &kib) == 1 ||
                                            sscanf(line, "Private_Dirty: %ld kB", &kib) == 1)) {
            priv += kib;
        }
    }
    free(vec);
    if (f != NULL)
        fclose(f);
    *priv_out = (double)priv;
    *ring_out = (double)ring_kib;
}

/* ------------------------------------------------------------------ one N */

/* The most one phase of one point may take: on a busy machine N = 256
 * must not hold it for long. A capped phase reports what it did. 60 s, or
 * PM_BENCH_SCALE_CAP seconds (make bench-report bounds its duration so). */
#define POINT_CAP_DEFAULT_S 60u
static unsigned point_cap_s = POINT_CAP_DEFAULT_S;
#define POINT_CAP_S point_cap_s
/* Spawning 256 or 1,024 workers on a loaded 2-core machine can take longer
 * than the default ready timeout (10 s) per worker: the benchmark measures
 * the time, it does not judge it. A spawn that cannot finish in 60 s fails
 * (printed) and the run goes on. Not PM_BENCH_SCALE_CAP: a phase that hits
 * its cap still reports a rate, a spawn that hits its timeout reports
 * nothing, so a shorter cap must not cost the spawn points. */
#define READY_TIMEOUT_MS (POINT_CAP_DEFAULT_S * 1000)

/* An environment variable as an unsigned decimal number: 0 when unset or
 * empty, 1 with *v, -1 when it is not one (no sign, no trailing text). */
static int env_number(const char *name, const char **text, unsigned long long *v)
{
    const char *env = getenv(name);
    *text = env;
    if (env == NULL || *env == '\0')
        return 0;
    char *end;
    errno = 0;
    *v = strtoull(env, &end, 10);
    return errno == 0 && *end == '\0' && env[0] != '-' ? 1 : -1;
}

/* PM_BENCH_SCALE_CAP: 1 to 3600 seconds. 0, or -1 with the reason printed. */
static int read_cap(void)
{
    const char *env;
    unsigned long long v;
    int rc = env_number("PM_BENCH_SCALE_CAP", &env, &v);
    if (rc == 0)
        return 0;
    if (rc < 0 || v < 1 || v > 3600) {
        fprintf(stderr, "pm-bench: scale: PM_BENCH_SCALE_CAP: '%s' is not a number of seconds from 1 to 3600\n",
                env);
        return -1;
    }
    point_cap_s = (unsigned)v;
    return 0;
}

/* PM_BENCH_RING: each worker's ring size in bytes (default RING_CAP, 1 MiB).
 * The hub's CPU per frame grows with N mostly through the ring memory a
 * stream sweeps (N x ring size; see doc/benchmarks.md, "scale"): smaller
 * rings show it. Checked by pm_options_set_ring_size itself (a power of two
 * from 256 KiB to 1 GiB), so that a size the library refuses is never
 * taken here and then silently left at bench_options' 256 KiB. 0, or -1
 * with the reason printed. */
static uint64_t ring_bytes = RING_CAP;
static int read_ring(void)
{
    const char *env;
    unsigned long long v;
    int rc = env_number("PM_BENCH_RING", &env, &v);
    if (rc == 0)
        return 0;
    if (rc > 0 && v <= SIZE_MAX) {
        pm_options *o = pm_options_new();
        rc = o != NULL ? pm_options_set_ring_size(o, (size_t)v) : -ENOMEM;
        pm_options_free(o);
    } else {
        rc = -EINVAL;
    }
    if (rc < 0) {
        fprintf(stderr,
                "pm-bench: scale: PM_BENCH_RING: '%s' is not a ring size in bytes (a power of two from 256 KiB "
                "to 1 GiB)\n",
                env);
        return -1;
    }
    ring_bytes = v;
    return 0;
}

struct figures {
    double fps, stream_cpu_ns, rtt_p50, rtt_p99, rtt_cpu_ns, rps;
    double capped; /* 1 when a phase hit POINT_CAP_S */
    double stream_sys, rtt_sys; /* the hub's system calls per frame relayed */
    double anon_idle, ring_idle, anon_after, ring_after; /* KiB */
};

/* The supervisor thread's CPU (the loop runs on it; workers are other
 * processes). */
static uint64_t cpu_ns_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_THREAD, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec) * 1000u;
}

/* The hub's system calls: its loop's waits and its wake-ups of the workers
 * (frames per system call is how well the hub batches). */
static uint64_t hub_syscalls(const pm_cluster *c)
{
    uint64_t loop, wakeups;
    bench_counters(c, &loop, &wakeups);
    return loop + wakeups;
}

static uint64_t relayed(const pm_cluster *c)
{
    struct pm_cluster_stats st;
    pm_cluster_stats(c, &st);
    return st.frames_relayed;
}

/* Sends a command to every worker and runs the loop until `want` of them
 * are done, or POINT_CAP_S. Returns the elapsed ns (0 when the loop
 * failed), the frames relayed meanwhile and the supervisor's CPU ns per
 * frame relayed; *capped is set when the cap ended it. */
static uint64_t phase(pm_cluster *c, char cmd, unsigned want, uint64_t *frames_out,
                      double *cpu_per_frame, double *sys_per_frame, double *capped)
{
    pm_address *a = calloc(PM_MAX_WORKERS, sizeof(*a));
    int n = pm_cluster_addresses(c, a, PM_MAX_WORKERS);
    atomic_store(&ssh->done, 0);
    if (under_callgrind) {
        /* Counting starts here, in the supervisor only: the workers were
         * forked with the instrumentation off and stay so. */
        CALLGRIND_START_INSTRUMENTATION;
        CALLGRIND_ZERO_STATS;
    }
    uint64_t cpu0 = cpu_ns_self(), f0 = relayed(c), s0 = hub_syscalls(c), t0 = pm__now_ns();
    for (int i = 0; i < n; i++)
        pm_cluster_send(c, &a[i], &cmd, 1);
    free(a);
    while (atomic_load(&ssh->done) < want) {
        if (pm_cluster_run(c, 1) < 0)
            return 0;
        if (pm__now_ns() - t0 > (uint64_t)POINT_CAP_S * 1000000000u) {
            printf("  (N = %u: %s phase capped at %u s, %u of %u workers done; figures from what it did)\n",
                   (unsigned)n, cmd == 's' ? "stream" : "request", POINT_CAP_S,
                   atomic_load(&ssh->done), want);
            *capped = 1;
            break;
        }
    }
    uint64_t t = pm__now_ns() - t0, frames = relayed(c) - f0;
    if (under_callgrind) {
        /* The dump's description carries what hubwork.sh divides by. */
        char desc[96];
        snprintf(desc, sizeof(desc), "pm-bench scale stream N=%d frames=%" PRIu64, n, frames);
        CALLGRIND_DUMP_STATS_AT(desc);
        CALLGRIND_STOP_INSTRUMENTATION;
    }
    *frames_out = frames;
    *cpu_per_frame = frames ? (double)(cpu_ns_self() - cpu0) / (double)frames : 0;
    *sys_per_frame = frames ? (double)(hub_syscalls(c) - s0) / (double)frames : 0;
    return t;
}

static int one_n(unsigned workers, uint64_t total, struct figures *fg)
{
    ssh->size = 64;
    ssh->quota = total / workers > 0 ? total / workers : 1;
    pm_options *o = bench_options((int)workers, 0);
    pm_options_set_ready_timeout_ms(o, READY_TIMEOUT_MS);
    pm_options_set_bootstrap(o, scale_worker, (void *)(uintptr_t)workers);
    pm_options_set_on_event(o, NULL, NULL);
    /* read_ring checked it: a failure here would be a library change. */
    int rc = pm_options_set_ring_size(o, ring_bytes);
    pm_cluster *c;
    if (rc == 0)
        rc = pm_cluster_spawn(o, &c);
    pm_options_free(o);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: scale: spawn of %u: %s\n", workers, pm_strerror(rc));
        return -1;
    }
    int ret = -1;
    got = 0;
    fg->capped = 0;
    memory(&fg->anon_idle, &fg->ring_idle);
    uint64_t frames;
    uint64_t t = phase(c, 's', workers, &frames, &fg->stream_cpu_ns, &fg->stream_sys, &fg->capped);
    if (t == 0)
        goto out;
    /* Frames the hub relayed (each worker's to the next, once each): a
     * capped phase counts what it moved. */
    fg->fps = (double)frames * 1e9 / (double)t;
    if (under_callgrind) {
        /* Only the stream phase is profiled: the rest would only take time. */
        ret = 0;
        goto out;
    }
    size_t ns = (size_t)(workers - 1) * ssh->rounds_each;
    memset(ssh->samples, 0, ns * sizeof(uint64_t));
    t = phase(c, 'r', workers - 1, &frames, &fg->rtt_cpu_ns, &fg->rtt_sys, &fg->capped);
    if (t == 0)
        goto out;
    /* Only the round trips that completed (a capped phase leaves zeros). */
    size_t k = 0;
    for (size_t i = 0; i < ns; i++)
        if (ssh->samples[i] != 0)
            ssh->samples[k++] = ssh->samples[i];
    fg->rps = (double)k * 1e9 / (double)t;
    sort_u64(ssh->samples, k);
    fg->rtt_p50 = k ? (double)percentile(ssh->samples, k, 0.5) : 0;
    fg->rtt_p99 = k ? (double)percentile(ssh->samples, k, 0.99) : 0;
    memory(&fg->anon_after, &fg->ring_after);
    ret = 0;
out:
    pm_cluster_terminate(c);
    return ret;
}

/* ------------------------------------------------------------------ the command */

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_d(double *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_double);
    return v[n / 2];
}

/* Median over the runs of one field of struct figures. */
static double field_median(const struct figures *fg, unsigned runs, size_t offset, double *tmp)
{
    for (unsigned i = 0; i < runs; i++)
        memcpy(&tmp[i], (const char *)&fg[i] + offset, sizeof(double));
    return median_d(tmp, runs);
}
#define FIELD_MEDIAN(runs, fg, field, tmp) field_median(fg, runs, offsetof(struct figures, field), tmp)

static uint64_t spawn_time(unsigned n, int exec_mode)
{
    pm_options *o = bench_options((int)n, exec_mode);
    pm_options_set_ready_timeout_ms(o, READY_TIMEOUT_MS);
    pm_cluster *c;
    uint64_t t0 = pm__now_ns();
    int rc = pm_cluster_spawn(o, &c);
    uint64_t t = pm__now_ns() - t0;
    pm_options_free(o);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: scale: spawn of %u: %s\n", n, pm_strerror(rc));
        return 0;
    }
    pm_cluster_terminate(c);
    return t;
}

int cmd_scale(const bench_opts *opts)
{
    static const unsigned full[] = {2, 4, 8, 16, 64, 256};
    static const unsigned quick[] = {2, 4, 8};
    static const unsigned spawn_full[] = {2, 16, 64, 256, 1024};
    static const unsigned spawn_quick[] = {2, 8, 32};
    const unsigned *ns = opts->quick ? quick : full, *sn = opts->quick ? spawn_quick : spawn_full;
    size_t nn = opts->quick ? PM__ARRAY_SIZE(quick) : PM__ARRAY_SIZE(full);
    size_t ns_spawn = opts->quick ? PM__ARRAY_SIZE(spawn_quick) : PM__ARRAY_SIZE(spawn_full);
    uint64_t frames = opts->quick ? 2000 : opts->frames;
    unsigned rounds = opts->quick ? 40 : opts->rounds, runs = opts->quick ? 1 : opts->runs;
    if (read_cap() < 0 || read_ring() < 0)
        return 1;
    under_callgrind = RUNNING_ON_VALGRIND != 0;
    print_machine();
    print_build();
    printf("scale: fork mode, 64 B frames, %" PRIu64 " KiB rings, median of %u runs%s\n", ring_bytes >> 10, runs,
           opts->quick ? " (--quick: tiny counts, not a measurement)" : "");
    printf("  stream: %" PRIu64 " frames in all, each worker to the next; requests: %u in all,\n"
           "  every worker but slot 0 asking slot 0, one at a time; hub CPU = the supervisor's\n"
           "  thread's getrusage over the phase / frames it relayed; sys/f = the hub's system\n"
           "  calls (loop waits + wake-ups) per frame relayed; memory in KiB (priv: the\n"
           "  supervisor's private memory, smaps Private_* of non-shared mappings; rings:\n"
           "  ring pages resident, per worker); each phase capped at %u s\n",
           frames, rounds, POINT_CAP_S);
    if (under_callgrind)
        printf("  under valgrind: the stream phase only, profiled by callgrind (one dump per N,\n"
               "  tools/bench/hubwork.sh); the other columns are 0, spawn-to-ready is skipped\n");
    printf("  %5s %12s %9s %6s %10s %10s %9s %10s %6s %8s %8s %8s %9s %8s\n", "N", "frames/s",
           "cpu ns/f", "sys/f", "req/s", "rtt p50us", "p99 us", "cpu ns/f", "sys/f", "priv", "after",
           "target", "ring/w", "after");
    struct figures *fg = calloc(runs, sizeof(*fg));
    int failed = 0;
    double *tmp = calloc(runs, sizeof(*tmp));
    for (size_t k = 0; k < nn; k++) {
        unsigned n = ns[k];
        if (opts->max_n != 0 && n > opts->max_n)
            continue; /* --max: a shared machine */
        unsigned each = rounds / (n - 1) > 10 ? rounds / (n - 1) : 10;
        size_t shsize = sizeof(struct scale_shared) + (size_t)(n - 1) * each * sizeof(uint64_t);
        ssh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
        if (ssh == MAP_FAILED)
            die("mmap");
        ssh->rounds_each = each;
        int ok = 1;
        for (unsigned r = 0; r < runs && ok; r++)
            ok = one_n(n, frames, &fg[r]) == 0;
        munmap(ssh, shsize);
        if (!ok) {
            /* The reason is printed above; the other points still run. */
            printf("  %5u  failed (see above)\n", n);
            failed = 1;
            continue;
        }
        double fps = FIELD_MEDIAN(runs, fg, fps, tmp), scpu = FIELD_MEDIAN(runs, fg, stream_cpu_ns, tmp);
        double rps = FIELD_MEDIAN(runs, fg, rps, tmp), p50 = FIELD_MEDIAN(runs, fg, rtt_p50, tmp);
        double p99 = FIELD_MEDIAN(runs, fg, rtt_p99, tmp), rcpu = FIELD_MEDIAN(runs, fg, rtt_cpu_ns, tmp);
        double ai = FIELD_MEDIAN(runs, fg, anon_idle, tmp), aa = FIELD_MEDIAN(runs, fg, anon_after, tmp);
        double ri = FIELD_MEDIAN(runs, fg, ring_idle, tmp), ra = FIELD_MEDIAN(runs, fg, ring_after, tmp);
        double target = 4096 + 64.0 * n;
        double ssys = FIELD_MEDIAN(runs, fg, stream_sys, tmp), rsys = FIELD_MEDIAN(runs, fg, rtt_sys, tmp);
        printf("  %5u %12.0f %9.0f %6.3f %10.0f %10.1f %9.1f %10.0f %6.2f %8.0f %8.0f %8.0f %9.1f %8.1f\n", n,
               fps, scpu, ssys, rps, p50 / 1e3, p99 / 1e3, rcpu, rsys, ai, aa, target, ri / n, ra / n);
        const struct {
            const char *w, *m;
            double v;
        } rows[] = {
            {"stream", "frames_per_s", fps},     {"stream", "hub_cpu_ns_per_frame", scpu},
            {"rtt", "requests_per_s", rps},      {"rtt", "p50_ns", p50},
            {"rtt", "p99_ns", p99},              {"rtt", "hub_cpu_ns_per_frame", rcpu},
            {"memory", "anon_idle_kib", ai},     {"memory", "anon_after_kib", aa},
            {"memory", "target_kib", target},    {"memory", "ring_idle_kib_per_worker", ri / n},
            {"memory", "ring_after_kib_per_worker", ra / n},
            {"point", "capped", FIELD_MEDIAN(runs, fg, capped, tmp)},
            {"stream", "hub_syscalls_per_frame", FIELD_MEDIAN(runs, fg, stream_sys, tmp)},
            {"rtt", "hub_syscalls_per_frame", FIELD_MEDIAN(runs, fg, rtt_sys, tmp)},
        };
        for (size_t i = 0; i < PM__ARRAY_SIZE(rows); i++)
            csv_row("scale", rows[i].w, n, "procmesh fork", rows[i].m, rows[i].v);
    }
    free(fg);
    if (under_callgrind) {
        free(tmp);
        return failed;
    }
    printf("spawn-to-ready: pm_cluster_spawn of N idle workers (256 KiB rings), median of %u runs (ms);\n"
           "  ready timeout %u s (a spawn past it fails and is printed as -1)\n",
           runs, POINT_CAP_DEFAULT_S);
    printf("  %5s %12s %12s\n", "N", "fork ms", "exec ms");
    uint64_t *v = calloc(runs, sizeof(*v));
    for (size_t k = 0; k < ns_spawn; k++) {
        double med[2];
        if (opts->max_n != 0 && sn[k] > opts->max_n)
            continue;
        for (int exec_mode = 0; exec_mode < 2; exec_mode++) {
            int ok = 1;
            for (unsigned r = 0; r < runs && ok; r++)
                ok = (v[r] = spawn_time(sn[k], exec_mode)) != 0;
            if (!ok) {
                med[exec_mode] = -1; /* printed as negative: failed, reason above */
                failed = 1;
                continue;
            }
            med[exec_mode] = (double)median(v, runs) / 1e6;
            csv_row("scale", "spawn", sn[k], exec_mode ? "procmesh exec" : "procmesh fork", "ms",
                    med[exec_mode]);
        }
        printf("  %5u %12.3f %12.3f\n", sn[k], med[0], med[1]);
    }
    free(v);
    free(tmp);
    return failed;
}
