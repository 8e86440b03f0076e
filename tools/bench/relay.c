/* SPDX-License-Identifier: MIT */
/* relay.c - pm-bench relay: worker -> hub -> worker against a relay process over pipes, sockets. */
#include "bench.h"
#include "debug.h"
#include "node.h"
#include "ring.h"

#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

/* Shared with the fork-mode workers (MAP_SHARED, made before the spawn). */
struct relay_shared {
    uint64_t frames;
    size_t size;
    unsigned rounds;
    uint32_t spin_ns;
    int pingpong;
    _Atomic int done;
    uint64_t worker_syscalls[2];
    uint64_t samples[]; /* ping-pong round trips, ns */
};

static struct relay_shared *rsh;

/* ------------------------------------------------------------------ procmesh */

static uint64_t node_syscalls(const pm_node *n)
{
    /* A wake-up is one write(); a park is poll() + read(). */
    return n->link.tx.wakeups + n->link.rx.wakeups + 2 * (n->link.tx.parks + n->link.rx.parks);
}

static int relay_worker(pm_node *n, void *arg)
{
    (void)arg;
    n->link.rx.spin_ns = rsh->spin_ns;
    n->link.tx.spin_ns = rsh->spin_ns;
    /* Two workers and the hub all spinning need three CPUs; with fewer,
     * spinners yield to each other between checks. */
    n->link.rx.spin_yield = n->link.tx.spin_yield = rsh->spin_ns > 0 && sysconf(_SC_NPROCESSORS_ONLN) < 3;
    pm_node_ready(n);
    unsigned slot = pm_node_slot(n);
    pm_address peer = *pm_node_self(n);
    peer.port = (uint16_t)(peer.port - slot + (1 - slot));
    peer.incarnation = 0;
    pm_message m;
    char *buf = calloc(1, rsh->size);
    if (pm_node_recv(n, &m, -1) != 0) /* "start" from main */
        return 1;
    if (rsh->pingpong) {
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
    pm__cluster_debug_counters(c, &loop, &wakeups);
    return loop + wakeups;
}

/* One procmesh relay run: stream (or ping-pong) between slot 0 and slot 1
 * through the hub. awake: 1 everyone spins, 0 nobody spins, 2 the default
 * spins of a stream. Returns 0 and the elapsed time and system calls. */
static int mesh_relay(int awake, uint64_t *ns, uint64_t *syscalls)
{
    int ret = -1;
    pm_cluster *c = NULL;
    pm_options *o = bench_options(2, 0);
    pm_options_set_bootstrap(o, relay_worker, NULL);
    pm_options_set_on_event(o, NULL, NULL);
    pm_options_set_ring_size(o, 1 << 20);
    /* Streaming: the hub may poll for 50 us after a burst; awake ping-pong:
     * everyone spins for the whole run; parked: nobody spins. */
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
    if (getenv("PM_BENCH_DEBUG")) {
        uint64_t loop, wakeups;
        pm__cluster_debug_counters(c, &loop, &wakeups);
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
 * on both hops. Ping-pong: A -> relay -> B -> relay -> A. */
static int fd_relay(int kind, int pingpong, uint64_t *ns)
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
        if ((pingpong ? echo(r2b[0], b2r[1], buf, size, frames) : drain(r2b[0], frames * size)) < 0)
            _exit(1);
        ctl_send(ctl[1]);
        _exit(0);
    }
    char *buf = calloc(1, size);
    ctl_wait(ctl[0]);
    uint64_t t0 = pm__now_ns();
    for (uint64_t i = 0; i < frames; i++) {
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
    free(buf);
    close_pair(a2r);
    close_pair(r2b);
    close_pair(b2r);
    close_pair(r2a);
    close_pair(ctl);
    int rc = wait_child(b);
    kill(relay, SIGKILL);
    wait_child(relay);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ the command */

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
    printf("relay stream: worker -> hub -> worker, median of %u runs\n", runs);
    printf("  %-6s %-12s %14s %10s %16s %18s\n", "size", "transport", "frames/s", "MB/s",
           "syscalls/frame", "procmesh speed-up");
    for (size_t z = 0; z < PM__ARRAY_SIZE(sizes); z++) {
        rsh->size = sizes[z];
        rsh->frames = opts->frames ? opts->frames : (sizes[z] == 64 ? 1000000 : 200000);
        rsh->pingpong = 0;
        uint64_t med[3], sys = 0;
        for (int k = 0; k < 3; k++) {
            for (unsigned r = 0; r < runs; r++) {
                uint64_t sc = 0;
                int rc = k == 0 ? mesh_relay(2, &v[r], &sc) : fd_relay(k - 1, 0, &v[r]);
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
    rsh->size = 64;
    rsh->rounds = rounds;
    rsh->pingpong = 1;
    printf("relay round trip: worker -> worker -> worker via the hub, %u rounds of 64 B\n", rounds);
    printf("  %-22s %12s %12s\n", "transport", "p50 ns", "p99 ns");
    for (int k = 0; k < 4; k++) {
        uint64_t t, sc;
        int rc = k < 2 ? mesh_relay(k == 0 ? 1 : 0, &t, &sc) : fd_relay(k - 2, 1, &t);
        if (rc < 0)
            return 1;
        print_p50_p99(22, rt[k], rsh->samples, rounds);
    }
    free(v);
    munmap(rsh, shsize);
    return 0;
}
