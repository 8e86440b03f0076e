/* SPDX-License-Identifier: MIT */
/* relay.c - pm-bench relay: worker -> hub -> worker against a relay process over pipes, sockets. */
#include "bench.h"
#include "counters.h"
#include "defaults.h"
#include "worker/node.h"
#include "channel/ring.h"

#include <inttypes.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>

/* Shared with the fork-mode workers (MAP_SHARED, made before the spawn). */
struct relay_shared {
    uint64_t frames;
    size_t size;
    unsigned rounds;
    uint32_t spin_ns;
    int pingpong;        /* 0 stream, 1 ping-pong, 2 paused requests */
    unsigned pause_us;   /* paused requests: the pause before each */
    _Atomic int done;
    uint64_t worker_syscalls[2];
    uint64_t worker_csw[2]; /* context switches during the timed part */
    uint64_t samples[]; /* ping-pong round trips, ns */
};

static struct relay_shared *rsh;

/* Context switches of this process so far, voluntary and involuntary: a
 * count the load of other processes changes far less than a time. */
static uint64_t csw_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

/* The pause before a paused request. */
static void pause_us(unsigned us)
{
    struct timespec ts = {.tv_sec = us / 1000000u, .tv_nsec = (long)(us % 1000000u) * 1000};
    while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
        ;
}

/* ------------------------------------------------------------------ procmesh */

static uint64_t node_syscalls(const pm_node *n)
{
    /* A wake-up is one write(); a park is one futex() (poll() + read() where
     * futexes are refused). */
    return n->channel.tx.wakeups + n->channel.rx.wakeups + n->channel.tx.parks + n->channel.rx.parks;
}

static int relay_worker(pm_node *n, void *arg)
{
    (void)arg;
    n->channel.rx.spin_ns = rsh->spin_ns;
    n->channel.tx.spin_ns = rsh->spin_ns;
    /* No yielding between spin checks: with more spinners than CPUs the
     * waits' gate (pm__ring_wait_gated) parks instead (doc/design.md,
     * "Adaptive spinning"). */
    pm_node_ready(n);
    unsigned slot = pm_node_slot(n);
    pm_address peer = *pm_node_self(n);
    peer.port = (uint16_t)(peer.port - slot + (1 - slot));
    peer.incarnation = 0;
    pm_message m;
    char *buf = calloc(1, rsh->size);
    if (pm_node_recv(n, &m, -1) != 0) /* "start" from main */
        return 1;
    uint64_t csw0 = csw_self();
    if (rsh->pingpong == 2) {
        /* A request/reply service that is not saturated: every request
         * finds the replier, the hub and the requester asleep. */
        for (unsigned i = 0; i < rsh->rounds; i++) {
            if (slot == 0) {
                pause_us(rsh->pause_us);
                pm_message r;
                uint64_t t0 = pm__now_ns();
                if (pm_node_request(n, &peer, buf, rsh->size, 10000, &r) != 0)
                    return 7;
                rsh->samples[i] = pm__now_ns() - t0;
            } else if (pm_node_recv(n, &m, 10000) != 0 || pm_node_reply(n, &m, buf, rsh->size) != 0) {
                return 8;
            }
        }
    } else if (rsh->pingpong) {
        for (unsigned i = 0; i < rsh->rounds; i++) {
            uint64_t t0 = pm__now_ns();
            if (slot == 0 && pm_node_send(n, &peer, buf, rsh->size) != 0)
                return 2;
            if (pm_node_recv(n, &m, 10000) != 0)
                return 3;
            if (slot == 1 && pm_node_send(n, &peer, buf, rsh->size) != 0)
                return 4;
            if (slot == 0)
                rsh->samples[i] = pm__now_ns() - t0;
        }
    } else if (slot == 0) {
        for (uint64_t i = 0; i < rsh->frames; i++)
            if (pm_node_send(n, &peer, buf, rsh->size) != 0)
                return 5;
    } else {
        for (uint64_t i = 0; i < rsh->frames; i++)
            if (pm_node_recv(n, &m, 10000) != 0 || m.len != rsh->size)
                return 6;
    }
    rsh->worker_csw[slot] = csw_self() - csw0;
    rsh->worker_syscalls[slot] = node_syscalls(n);
    if (rsh->pingpong ? slot == 0 : slot == 1)
        atomic_store(&rsh->done, 1);
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    free(buf);
    return 0;
}

/* The hub's system calls: its loop's waits and its wake-ups of the workers. */
static uint64_t hub_syscalls(const pm_cluster *c)
{
    uint64_t loop, wakeups;
    bench_counters(c, &loop, &wakeups);
    return loop + wakeups;
}

/* One procmesh relay run between slot 0 and slot 1 through the hub, as
 * rsh->pingpong says. awake: 1 everyone spins, 0 nobody spins, 2 the default
 * spins of a stream, 3 the options' defaults (a service left as configured).
 * Returns 0 and the elapsed time, the system calls counted and the context
 * switches of all three processes (csw may be NULL). */
static int mesh_relay(int awake, uint64_t *ns, uint64_t *syscalls, uint64_t *csw)
{
    int ret = -1;
    pm_cluster *c = NULL;
    pm_options *o = bench_options(2, 0);
    pm_options_set_bootstrap(o, relay_worker, NULL);
    pm_options_set_on_event(o, NULL, NULL);
    pm_options_set_ring_size(o, 1 << 20);
    /* Streaming: the hub may poll for 50 us after a burst; awake ping-pong:
     * everyone spins for the whole run; parked: nobody spins; defaults: what
     * pm_options_new and the ring chose. */
    if (awake != 3)
        pm_options_set_hub_spin_us(o, awake == 1 ? 1000000 : awake == 0 ? 0 : 50);
    rsh->spin_ns = awake == 1 ? UINT32_MAX : awake == 0 ? 0 : PM__RING_DEFAULT_SPIN_NS;
    atomic_store(&rsh->done, 0);
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: spawn: %s\n", pm_strerror(rc));
        c = NULL;
        goto out;
    }
    uint64_t hub0 = hub_syscalls(c);
    uint64_t csw0 = csw_self();
    uint64_t t0 = pm__now_ns();
    pm_address a[2];
    int n = pm_cluster_addresses(c, a, 2);
    for (int i = 0; i < n && i < 2; i++)
        pm_cluster_send(c, &a[i], "start", 5);
    while (!atomic_load(&rsh->done)) {
        if (pm_cluster_run(c, 1) < 0 || pm__now_ns() - t0 > 120000000000ull) {
            fprintf(stderr, "pm-bench: relay did not finish\n");
            goto out;
        }
    }
    *ns = pm__now_ns() - t0;
    *syscalls = hub_syscalls(c) - hub0 + rsh->worker_syscalls[0] + rsh->worker_syscalls[1];
    if (csw != NULL)
        *csw = csw_self() - csw0 + rsh->worker_csw[0] + rsh->worker_csw[1];
    if (getenv("PM_BENCH_DEBUG")) {
        uint64_t loop, wakeups;
        bench_counters(c, &loop, &wakeups);
        fprintf(stderr, "syscalls: hub loop %llu, hub wakes %llu, sender %llu, receiver %llu\n",
                (unsigned long long)loop, (unsigned long long)wakeups,
                (unsigned long long)rsh->worker_syscalls[0],
                (unsigned long long)rsh->worker_syscalls[1]);
    }
    ret = 0;
out:
    if (c != NULL)
        pm_cluster_terminate(c);
    pm_options_free(o);
    return ret;
}

/* ------------------------------------------------------------------ the baselines */

/* The relay process: forwards whole frames from in[d] to out[d], d = 0, 1,
 * one write per frame; reads in large chunks. Runs until killed. */
static __attribute__((noreturn)) void fd_relay_process(const int in[2], const int out[2],
                                                      size_t size)
{
    size_t have[2] = {0, 0};
    char *pend[2] = {malloc(1 << 17), malloc(1 << 17)};
    for (;;) {
        struct pollfd p[2] = {{in[0], POLLIN, 0}, {in[1], POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        for (int d = 0; d < 2; d++) {
            if (!(p[d].revents & (POLLIN | POLLHUP)))
                continue;
            ssize_t k = read(in[d], pend[d] + have[d], (1 << 16));
            if (k <= 0)
                _exit(0);
            have[d] += (size_t)k;
            size_t off = 0;
            for (; have[d] - off >= size; off += size)
                if (write_all(out[d], pend[d] + off, size) < 0)
                    _exit(1);
            memmove(pend[d], pend[d] + off, have[d] - off);
            have[d] -= off;
        }
    }
}

/* The same relay done by a plain process over pipes (kind 0) or Unix
 * stream sockets (kind 1): sender -> relay -> receiver, one write per frame
 * on both hops. Ping-pong: A -> relay -> B -> relay -> A; paused
 * (pingpong 2): the same with rsh->pause_us before each of A's frames.
 * *csw (may be NULL): the context switches of the three processes. */
static int fd_relay(int kind, int pingpong, uint64_t *ns, uint64_t *csw)
{
    int a2r[2], r2b[2], b2r[2], r2a[2], ctl[2];
    fd_pair(kind, a2r);
    fd_pair(kind, r2b);
    fd_pair(kind, b2r);
    fd_pair(kind, r2a);
    ctl_open(ctl);
    size_t size = rsh->size;
    uint64_t frames = pingpong ? rsh->rounds : rsh->frames;
    pid_t relay = fork_or_die();
    if (relay == 0)
        fd_relay_process((const int[2]){a2r[0], b2r[0]}, (const int[2]){r2b[1], r2a[1]}, size);
    pid_t b = fork_or_die();
    if (b == 0) {
        char *buf = malloc(1 << 16);
        ctl_send(ctl[1]);
        uint64_t c0 = csw_self();
        if ((pingpong ? echo(r2b[0], b2r[1], buf, size, frames) : drain(r2b[0], frames * size)) < 0)
            _exit(1);
        rsh->worker_csw[1] = csw_self() - c0;
        ctl_send(ctl[1]);
        _exit(0);
    }
    char *buf = calloc(1, size);
    ctl_wait(ctl[0]);
    uint64_t csw0 = csw_self();
    uint64_t t0 = pm__now_ns();
    for (uint64_t i = 0; i < frames; i++) {
        if (pingpong == 2)
            pause_us(rsh->pause_us);
        uint64_t s0 = pm__now_ns();
        if (write_all(a2r[1], buf, size) < 0)
            die("relay write");
        if (pingpong) {
            if (read_all(r2a[0], buf, size) < 0)
                die("relay read");
            rsh->samples[i] = pm__now_ns() - s0;
        }
    }
    ctl_wait(ctl[0]);
    *ns = pm__now_ns() - t0;
    uint64_t csw_a = csw_self() - csw0;
    free(buf);
    close_pair(a2r);
    close_pair(r2b);
    close_pair(b2r);
    close_pair(r2a);
    close_pair(ctl);
    int rc = wait_child(b);
    kill(relay, SIGKILL);
    /* The relay's whole life: its start-up adds a handful to thousands. */
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    while (wait4(relay, NULL, 0, &ru) < 0 && errno == EINTR)
        ;
    if (csw != NULL)
        *csw = csw_a + rsh->worker_csw[1] + (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
    return rc == 0 ? 0 : -1;
}

/* One run of fd_relay (mesh 0: kind) or mesh_relay (mesh 1: awake) for
 * another subcommand, on a shared block of its own: both read their
 * parameters from rsh, which the processes of the run share (MAP_SHARED,
 * made before they are forked), and the requester's samples are copied
 * out. The caller's rsh is put back. */
static int relay_run(int mesh, int how, int pingpong, size_t size, uint64_t count, uint64_t *ns,
                     uint64_t *samples)
{
    size_t shsize = sizeof(struct relay_shared) + (pingpong ? count : 0) * sizeof(uint64_t);
    struct relay_shared *saved = rsh;
    rsh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rsh == MAP_FAILED) {
        rsh = saved;
        return -1;
    }
    rsh->size = size;
    rsh->frames = count;
    rsh->rounds = (unsigned)count;
    rsh->pingpong = pingpong;
    uint64_t sc;
    int rc = mesh ? mesh_relay(how, ns, &sc, NULL) : fd_relay(how, pingpong, ns, NULL);
    if (rc == 0 && pingpong)
        memcpy(samples, rsh->samples, count * sizeof(uint64_t));
    munmap(rsh, shsize);
    rsh = saved;
    return rc;
}

int fd_relay_run(int kind, int pingpong, size_t size, uint64_t count, uint64_t *ns,
                 uint64_t *samples)
{
    return relay_run(0, kind, pingpong, size, count, ns, samples);
}

int mesh_relay_run(int awake, int pingpong, size_t size, uint64_t count, uint64_t *ns,
                   uint64_t *samples)
{
    return relay_run(1, awake, pingpong, size, count, ns, samples);
}

/* ------------------------------------------------------------------ the command */

/* Requests of the paused round trip at most (the example: 1,500). */
#define PAUSED_ROUNDS 1500u

/* The 1-minute load average beside the figures: above the CPU count the
 * machine was busy and the times say more about the others than about us. */
static void print_load(void)
{
    double la[1];
    if (getloadavg(la, 1) == 1)
        printf("load average %.2f on %ld cpus%s\n", la[0], sysconf(_SC_NPROCESSORS_ONLN),
               la[0] >= 0.5 ? " (busy: compare counts, not times)" : "");
}

/* One round-trip row: p50/p99 of rsh->samples, context switches of all the
 * processes per round trip, and procmesh's counted system calls (0: not
 * counted, a baseline). */
static uint64_t print_rt(const char *name, unsigned n, uint64_t csw, uint64_t syscalls)
{
    char sys[32];
    sort_u64(rsh->samples, n);
    if (syscalls > 0)
        snprintf(sys, sizeof(sys), "%.2f", (double)syscalls / n);
    else
        snprintf(sys, sizeof(sys), "-");
    printf("  %-22s %12" PRIu64 " %12" PRIu64 " %10.2f %12s\n", name,
           percentile(rsh->samples, n, 0.50), percentile(rsh->samples, n, 0.99), (double)csw / n, sys);
    return percentile(rsh->samples, n, 0.50);
}

int cmd_relay(const bench_opts *opts)
{
    static const size_t sizes[] = {64, 4096};
    static const char *const names[] = {"procmesh", "pipes", "unix"};
    static const char *const rt[] = {"procmesh awake", "procmesh parked", "pipes", "unix"};
    unsigned runs = opts->runs, rounds = opts->rounds;
    size_t shsize = sizeof(struct relay_shared) + (size_t)rounds * sizeof(uint64_t);
    rsh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rsh == MAP_FAILED)
        die("mmap");
    print_machine();
    uint64_t *v = calloc(runs, sizeof(*v));
    /* PM_BENCH_ONLY="procmesh parked" (a row's name): that row alone, no
     * stream, so that strace -f -c or perf sees one transport's round trips;
     * "paused": the paused table alone. */
    const char *only = getenv("PM_BENCH_ONLY");
    if (only != NULL)
        goto round_trips;
    printf("relay stream: worker -> hub -> worker, median of %u runs\n", runs);
    printf("  %-6s %-12s %14s %10s %16s %18s\n", "size", "transport", "frames/s", "MB/s",
           "syscalls/frame", "procmesh speed-up");
    /* PM_BENCH_STREAM=<size> (64 or 4096): that stream alone, no round
     * trips, so that a bisect or perf record sees one stream. */
    const char *stream = getenv("PM_BENCH_STREAM");
    for (size_t z = 0; z < PM__ARRAY_SIZE(sizes); z++) {
        if (stream != NULL && strtoul(stream, NULL, 10) != sizes[z])
            continue;
        rsh->size = sizes[z];
        rsh->frames = opts->frames ? opts->frames : (sizes[z] == 64 ? 1000000 : 200000);
        rsh->pingpong = 0;
        uint64_t med[3], sys = 0;
        for (int k = 0; k < 3; k++) {
            for (unsigned r = 0; r < runs; r++) {
                uint64_t sc = 0;
                int rc = k == 0 ? mesh_relay(2, &v[r], &sc, NULL) : fd_relay(k - 1, 0, &v[r], NULL);
                if (rc < 0)
                    return 1;
                if (k == 0)
                    sys += sc;
            }
            med[k] = median(v, runs);
        }
        for (int k = 0; k < 3; k++) {
            double secs = (double)med[k] / 1e9;
            char ratio[32], sysf[32];
            format_ratio(ratio, sizeof(ratio), med[k], k > 0 ? med[0] : 0, 1);
            /* A baseline makes at least one write per frame on each hop. */
            if (k > 0)
                snprintf(sysf, sizeof(sysf), ">= 2.0000");
            else
                snprintf(sysf, sizeof(sysf), "%.4f", (double)sys / (double)(rsh->frames * runs));
            printf("  %-6zu %-12s %14.0f %10.1f %16s %18s\n", sizes[z], names[k],
                   (double)rsh->frames / secs, (double)rsh->frames * (double)sizes[z] / secs / 1e6,
                   sysf, ratio);
        }
    }
    if (stream != NULL)
        goto out;
round_trips:
    rsh->size = 64;
    rsh->rounds = rounds;
    rsh->pingpong = 1;
    print_load();
    printf("relay round trip: worker -> worker -> worker via the hub, %u rounds of 64 B\n", rounds);
    printf("  %-22s %12s %12s %10s %12s\n", "transport", "p50 ns", "p99 ns", "csw/rt",
           "syscalls/rt");
    for (int k = 0; k < 4; k++) {
        uint64_t t, sc = 0, csw = 0;
        if (only != NULL && strcmp(only, rt[k]) != 0)
            continue;
        int rc = k < 2 ? mesh_relay(k == 0 ? 1 : 0, &t, &sc, &csw) : fd_relay(k - 2, 1, &t, &csw);
        if (rc < 0)
            return 1;
        print_rt(rt[k], rounds, csw, k < 2 ? sc : 0);
    }
    if (opts->pause_us > 0) {
        /* Each round sleeps: a smaller count keeps the run short. */
        unsigned prounds = rounds < PAUSED_ROUNDS ? rounds : PAUSED_ROUNDS;
        rsh->rounds = prounds;
        rsh->pingpong = 2;
        rsh->pause_us = opts->pause_us;
        printf("relay request/reply after a pause of %u us: %u requests of 64 B, "
               "everyone asleep before each\n",
               opts->pause_us, prounds);
        printf("  %-22s %12s %12s %10s %12s\n", "transport", "p50 ns", "p99 ns", "csw/rt",
               "syscalls/rt");
        /* Then the same requests as a user writes them (defaults.c): a
         * cluster with the options' defaults and main blocked in
         * pm_cluster_run(c, -1), beside a relay process over default-sized
         * pipes; a sleep before each request, then an absolute schedule. */
        static const char *const prow[] = {"procmesh paused",   "pipes paused",
                                           "defaults, sleep",   "user pipes, sleep",
                                           "defaults, schedule", "user pipes, schedule"};
        uint64_t p50[6] = {0};
        for (int k = 0; k < 6; k++) {
            uint64_t t, sc = 0, csw = 0;
            if (only != NULL && strcmp(only, "paused") != 0 && strcmp(only, prow[k]) != 0)
                continue;
            int rc = k == 0   ? mesh_relay(3, &t, &sc, &csw)
                     : k == 1 ? fd_relay(0, 2, &t, &csw)
                              : defaults_relay(k % 2, k < 4 ? DEFAULTS_SLEEP : DEFAULTS_SCHEDULE,
                                               prounds, opts->pause_us, rsh->samples, &csw);
            if (rc < 0)
                return 1;
            p50[k] = print_rt(prow[k], prounds, csw, k == 0 ? sc : 0);
        }
        /* Each procmesh row against the pipe relay of its own kind. */
        printf("  p50 over its pipes:");
        for (int k = 0; k < 6; k += 2) {
            char ratio[32];
            format_ratio(ratio, sizeof(ratio), p50[k], p50[k + 1], 2);
            printf(" %s %s%s", prow[k], p50[k] ? ratio : "-", k < 4 ? ";" : "\n");
        }
        print_load();
    }
out:
    free(v);
    munmap(rsh, shsize);
    return 0;
}
