/*
 * pm-bench - procmesh's benchmark tool. It measures and prints; it asserts
 * nothing (performance targets are checked by people reading its output,
 * never by timed tests).
 *
 *   pm-bench ring [--frames N] [--size S] [--runs R] [--rounds K]
 *
 * Exit codes: 0 done, 1 a measurement failed (e.g. a frame was lost: the
 * transport is broken, not slow), 2 bad command line.
 */
#define _GNU_SOURCE
#include "internal.h"
#include "procmesh.h"
#include "ring.h"
#include "shm.h"
#include "cluster.h"
#include "node.h"

#include <fcntl.h>
#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/utsname.h>
#include <sys/wait.h>

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

#define RING_CAP ((uint64_t)1 << 20)
#define RING_MAX_FRAME (64u * 1024u)
#define SPIN_FOREVER UINT32_MAX

static const char usage[] =
    "usage: pm-bench ring [--frames N] [--size S] [--runs R] [--rounds K]\n"
    "       pm-bench restart [--rounds K]\n"
    "       pm-bench spawn [--runs R]\n"
    "       pm-bench relay [--frames N] [--rounds K] [--runs R]\n"
    "       pm-bench daemon [--runs R]\n"
    "\n"
    "  ring   stream N frames of S bytes from one process to another over the\n"
    "         shared-memory ring, a pipe and a Unix socketpair (one write per\n"
    "         frame), then ping-pong K round trips over each (ring awake and\n"
    "         parked). Prints frames/s, MB/s, ratios and p50/p99 latencies.\n"
    "\n"
    "  --frames N   frames per stream run (default 2000000)\n"
    "  --size S     frame payload bytes, 1..65536 (default 64)\n"
    "  --runs R     stream runs per transport; the median is printed (default 3)\n"
    "  --rounds K   ping-pong round trips per transport (default 50000)\n"
    "\n"
    "  restart  crash-to-ready latency: SIGKILL a worker and time until its\n"
    "           replacement is ready (backoff 0), K rounds (default 300), fork\n"
    "           and exec mode, beside a bare fork+exit+wait (and fork+exec+wait)\n"
    "           baseline.\n"
    "  spawn    time for pm_cluster_spawn to bring N = 1, 8, 64 workers to\n"
    "           ready, median of R runs (default 5), fork and exec mode, beside\n"
    "           N bare forks (and fork+execs) that each report over a pipe.\n"
    "\n"
    "exit status: 0 done, 1 a measurement failed, 2 bad command line\n";

typedef struct bench_opts {
    uint64_t frames;
    size_t size;
    unsigned runs;
    unsigned rounds;
} bench_opts;

/* ------------------------------------------------------------------ helpers */

static void die(const char *what)
{
    fprintf(stderr, "pm-bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

static int write_all(int fd, const void *buf, size_t len)
{
    const char *p = buf;
    while (len > 0) {
        ssize_t n = write(fd, p, len);
        if (n < 0) {
            if (errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

static int read_all(int fd, void *buf, size_t len)
{
    char *p = buf;
    while (len > 0) {
        ssize_t n = read(fd, p, len);
        if (n <= 0) {
            if (n < 0 && errno == EINTR)
                continue;
            return -1;
        }
        p += n;
        len -= (size_t)n;
    }
    return 0;
}

/* A one-byte control channel between the two benchmark processes. */
static void ctl_send(int fd)
{
    char c = 'x';
    if (write_all(fd, &c, 1) < 0)
        die("control pipe");
}

static void ctl_wait(int fd)
{
    char c;
    if (read_all(fd, &c, 1) < 0)
        die("control pipe");
}

static int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t median(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    return v[n / 2];
}

static uint64_t percentile(const uint64_t *sorted, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

static int parse_u64(const char *opt, const char *s, uint64_t min, uint64_t max, uint64_t *out)
{
    char *end;
    errno = 0;
    unsigned long long v = strtoull(s, &end, 10);
    if (s[0] == '\0' || s[0] == '-' || *end != '\0' || errno != 0 || v < min || v > max) {
        fprintf(stderr, "pm-bench: %s: '%s' is not a whole number in %" PRIu64 "..%" PRIu64 "\n",
                opt, s, min, max);
        return -1;
    }
    *out = v;
    return 0;
}

/* ------------------------------------------------------------------ a ring pair */

/* Two rings in one sealed memfd: a->b and b->a, each with its own doorbell
 * eventfds, inherited across fork. */
typedef struct ring_link {
    void *map;
    size_t map_size;
    int efd_a; /* process A parks here */
    int efd_b; /* process B parks here */
    void *ab;  /* region of the a->b ring */
    void *ba;  /* region of the b->a ring */
} ring_link;

static void link_open(ring_link *l)
{
    size_t one = pm__ring_region_size(RING_CAP);
    l->map_size = 2 * one;
    int fd;
    int rc = pm__shm_create("pm-bench", l->map_size, &fd, &l->map);
    if (rc < 0) {
        errno = -rc;
        die("shared memory");
    }
    close(fd);
    l->ab = l->map;
    l->ba = (char *)l->map + one;
    pm__ring_format(l->ab, RING_CAP, RING_MAX_FRAME);
    pm__ring_format(l->ba, RING_CAP, RING_MAX_FRAME);
    l->efd_a = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    l->efd_b = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    if (l->efd_a < 0 || l->efd_b < 0)
        die("eventfd");
}

static void link_close(ring_link *l)
{
    pm__shm_unmap(l->map, l->map_size);
    close(l->efd_a);
    close(l->efd_b);
}

/* Producer side in process A on ring a->b, consumer in B; or the reverse. */
static void link_end(ring_link *l, int is_a, pm__ring *tx, pm__ring *rx, uint32_t spin_ns)
{
    int mine = is_a ? l->efd_a : l->efd_b, theirs = is_a ? l->efd_b : l->efd_a;
    pm__ring_attach(tx, is_a ? l->ab : l->ba, RING_CAP, RING_MAX_FRAME, PM__RING_PRODUCER, theirs, mine);
    pm__ring_attach(rx, is_a ? l->ba : l->ab, RING_CAP, RING_MAX_FRAME, PM__RING_CONSUMER, theirs, mine);
    tx->spin_ns = rx->spin_ns = spin_ns;
}

/* ------------------------------------------------------------------ streaming */

typedef struct stream_result {
    uint64_t ns;
    uint64_t syscalls; /* wake-up system calls on the producer side (ring only) */
} stream_result;

static int ring_stream(const bench_opts *o, stream_result *res)
{
    ring_link l;
    link_open(&l);
    int ctl[2];
    if (pipe2(ctl, O_CLOEXEC) < 0)
        die("pipe");
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        pm__ring tx, rx;
        link_end(&l, 0, &tx, &rx, PM__RING_DEFAULT_SPIN_NS);
        ctl_send(ctl[1]);
        for (uint64_t seq = 0; seq < o->frames; seq++) {
            const void *p;
            size_t len;
            uint64_t got = 0;
            int rc;
            /* Drain without waiting while frames are there; hand the space
             * back and wait (spin, then park) only when the ring is empty. */
            while ((rc = pm__ring_peek(&rx, &p, &len)) == 0) {
                pm__ring_release(&rx);
                if (pm__ring_wait(&rx, 10000) != 1)
                    _exit(3);
            }
            if (rc < 0)
                _exit(3);
            memcpy(&got, p, len < 8 ? len : 8);
            if (len != o->size || (len >= 8 && got != seq))
                _exit(4);
            pm__ring_consume(&rx);
            if ((seq & 63) == 63)
                pm__ring_release(&rx);
        }
        pm__ring_release(&rx);
        ctl_send(ctl[1]);
        _exit(0);
    }
    pm__ring tx, rx;
    link_end(&l, 1, &tx, &rx, PM__RING_DEFAULT_SPIN_NS);
    ctl_wait(ctl[0]);
    uint64_t t0 = pm__now_ns();
    for (uint64_t seq = 0; seq < o->frames; seq++) {
        void *p;
        int rc;
        while ((rc = pm__ring_reserve(&tx, o->size, &p)) == -EAGAIN)
            pm__ring_wait_space(&tx, o->size, 10000);
        if (rc < 0)
            break;
        memcpy(p, &seq, o->size < 8 ? o->size : 8);
        pm__ring_commit(&tx, o->size);
        /* Publish in batches: one release store (and at most one wake-up)
         * per 64 frames instead of per frame. */
        if ((seq & 63) == 63)
            pm__ring_publish(&tx);
    }
    pm__ring_publish(&tx);
    ctl_wait(ctl[0]);
    res->ns = pm__now_ns() - t0;
    res->syscalls = tx.wakeups + tx.parks;
    int rc = wait_child(pid);
    close(ctl[0]);
    close(ctl[1]);
    link_close(&l);
    return rc == 0 ? 0 : -1;
}

/* kind 0: pipe, 1: Unix socketpair. Both sized to hold as much as the ring. */
static void fd_pair(int kind, int fds[2])
{
    if (kind == 0) {
        if (pipe2(fds, O_CLOEXEC) < 0)
            die("pipe");
        (void)fcntl(fds[1], F_SETPIPE_SZ, (int)RING_CAP);
    } else {
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0, fds) < 0)
            die("socketpair");
        int sz = (int)RING_CAP;
        (void)setsockopt(fds[0], SOL_SOCKET, SO_RCVBUF, &sz, sizeof(sz));
        (void)setsockopt(fds[1], SOL_SOCKET, SO_SNDBUF, &sz, sizeof(sz));
    }
}

static int fd_stream(int kind, const bench_opts *o, stream_result *res)
{
    int fds[2], ctl[2];
    fd_pair(kind, fds);
    if (pipe2(ctl, O_CLOEXEC) < 0)
        die("pipe");
    uint64_t total = o->frames * o->size;
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        /* The reader drains in large reads: the comparison is one write per
         * frame against one ring record per frame, reads are not the limit. */
        char *buf = malloc(1 << 16);
        ctl_send(ctl[1]);
        while (total > 0) {
            ssize_t n = read(fds[0], buf, total < (1 << 16) ? total : (1 << 16));
            if (n <= 0)
                _exit(3);
            total -= (uint64_t)n;
        }
        ctl_send(ctl[1]);
        _exit(0);
    }
    char *frame = calloc(1, o->size);
    ctl_wait(ctl[0]);
    uint64_t t0 = pm__now_ns();
    for (uint64_t seq = 0; seq < o->frames; seq++) {
        memcpy(frame, &seq, o->size < 8 ? o->size : 8);
        if (write_all(fds[1], frame, o->size) < 0)
            die("write");
    }
    ctl_wait(ctl[0]);
    res->ns = pm__now_ns() - t0;
    res->syscalls = o->frames;
    free(frame);
    int rc = wait_child(pid);
    close(fds[0]);
    close(fds[1]);
    close(ctl[0]);
    close(ctl[1]);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ ping-pong */

/* B echoes every frame back to A; A records each round trip. */
static int ring_pingpong(const bench_opts *o, uint32_t spin_ns, uint64_t *samples)
{
    ring_link l;
    link_open(&l);
    char *buf = calloc(1, o->size);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        pm__ring tx, rx;
        link_end(&l, 0, &tx, &rx, spin_ns);
        for (unsigned i = 0; i < o->rounds; i++) {
            const void *p;
            size_t len;
            if (pm__ring_wait(&rx, 10000) != 1 || pm__ring_peek(&rx, &p, &len) != 1)
                _exit(3);
            memcpy(buf, p, len);
            pm__ring_consume(&rx);
            pm__ring_release(&rx);
            if (pm__ring_send(&tx, buf, len) != 0)
                _exit(4);
        }
        _exit(0);
    }
    pm__ring tx, rx;
    link_end(&l, 1, &tx, &rx, spin_ns);
    int ok = 0;
    for (unsigned i = 0; i < o->rounds; i++) {
        uint64_t t0 = pm__now_ns();
        if (pm__ring_send(&tx, buf, o->size) != 0 || pm__ring_wait(&rx, 10000) != 1)
            goto out;
        const void *p;
        size_t len;
        pm__ring_peek(&rx, &p, &len);
        memcpy(buf, p, len);
        pm__ring_consume(&rx);
        pm__ring_release(&rx);
        samples[i] = pm__now_ns() - t0;
    }
    ok = 1;
out:
    if (!ok)
        kill(pid, SIGKILL);
    int rc = wait_child(pid);
    free(buf);
    link_close(&l);
    return ok && rc == 0 ? 0 : -1;
}

static int fd_pingpong(int kind, const bench_opts *o, uint64_t *samples)
{
    int ab[2], ba[2];
    fd_pair(kind, ab);
    fd_pair(kind, ba);
    char *buf = calloc(1, o->size);
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    if (pid == 0) {
        for (unsigned i = 0; i < o->rounds; i++)
            if (read_all(ab[0], buf, o->size) < 0 || write_all(ba[1], buf, o->size) < 0)
                _exit(3);
        _exit(0);
    }
    for (unsigned i = 0; i < o->rounds; i++) {
        uint64_t t0 = pm__now_ns();
        if (write_all(ab[1], buf, o->size) < 0 || read_all(ba[0], buf, o->size) < 0)
            die("ping-pong");
        samples[i] = pm__now_ns() - t0;
    }
    int rc = wait_child(pid);
    free(buf);
    close(ab[0]);
    close(ab[1]);
    close(ba[0]);
    close(ba[1]);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ ring command */

static void print_machine(void)
{
    struct utsname u;
    uname(&u);
    printf("machine: %ld cpus online, %s %s %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.sysname,
           u.release, u.machine);
}

static int cmd_ring(const bench_opts *o)
{
    static const char *const names[] = {"ring", "pipe", "socketpair"};
    uint64_t med[3], sys[3];
    uint64_t *runs = calloc(o->runs, sizeof(*runs));
    print_machine();
    printf("stream: %" PRIu64 " frames of %zu bytes, median of %u runs\n", o->frames, o->size,
           o->runs);
    for (int k = 0; k < 3; k++) {
        stream_result r = {0, 0};
        for (unsigned i = 0; i < o->runs; i++) {
            int rc = k == 0 ? ring_stream(o, &r) : fd_stream(k - 1, o, &r);
            if (rc < 0) {
                fprintf(stderr, "pm-bench: %s stream failed (frames lost or reordered)\n", names[k]);
                return 1;
            }
            runs[i] = r.ns;
        }
        med[k] = median(runs, o->runs);
        sys[k] = r.syscalls;
    }
    printf("  %-12s %14s %12s %16s %14s\n", "transport", "frames/s", "MB/s", "syscalls/frame",
           "ring speed-up");
    for (int k = 0; k < 3; k++) {
        double secs = (double)med[k] / 1e9;
        double fps = (double)o->frames / secs;
        double mbs = (double)o->frames * (double)o->size / secs / 1e6;
        char ratio[32] = "-";
        if (k > 0)
            snprintf(ratio, sizeof(ratio), "%.1fx", (double)med[k] / (double)med[0]);
        printf("  %-12s %14.0f %12.1f %16.4f %14s\n", names[k], fps, mbs,
               (double)sys[k] / (double)o->frames, ratio);
    }
    free(runs);

    printf("round trip: %u rounds of %zu bytes each way\n", o->rounds, o->size);
    printf("  %-12s %12s %12s\n", "transport", "p50 ns", "p99 ns");
    uint64_t *s = calloc(o->rounds, sizeof(*s));
    static const char *const rt[] = {"ring awake", "ring parked", "pipe", "socketpair"};
    for (int k = 0; k < 4; k++) {
        int rc = k == 0   ? ring_pingpong(o, SPIN_FOREVER, s)
                 : k == 1 ? ring_pingpong(o, 0, s)
                          : fd_pingpong(k - 2, o, s);
        if (rc < 0) {
            fprintf(stderr, "pm-bench: %s round trip failed\n", rt[k]);
            return 1;
        }
        qsort(s, o->rounds, sizeof(*s), cmp_u64);
        printf("  %-12s %12" PRIu64 " %12" PRIu64 "\n", rt[k], percentile(s, o->rounds, 0.50),
               percentile(s, o->rounds, 0.99));
    }
    free(s);
    return 0;
}

/* ------------------------------------------------------------------ supervisor */

static char self_exe[4096];

/* The exec-mode worker: pm-bench re-executes itself with this argument. */
static int worker_main(void)
{
    pm_node *n;
    if (pm_node_join(&n) < 0 || pm_node_ready(n) < 0)
        return 1;
    /* Idle the way a real worker idles: waiting for work (which keeps the
     * heartbeat alive) until asked to stop. */
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    pm_node_close(n);
    return 0;
}

/* pm-bench __child: the exec baseline's child, reports on fd 3 and exits. */
static int child_main(void)
{
    char c = 'r';
    return write(3, &c, 1) == 1 ? 0 : 1;
}

static int boot_idle(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    for (;;)
        pause();
    return 0;
}

static volatile uint64_t ready_inc;

static void on_ready(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)arg;
    if (e->type == PM_EVENT_READY) {
        ready_inc = e->incarnation;
        /* pm_cluster_run runs for its whole timeout unless stopped. */
        pm_cluster_stop(c);
    }
}

static pm_options *bench_options(int workers, int exec_mode)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, workers);
    if (exec_mode) {
        char *argv[] = {"pm-bench", "__worker", NULL};
        pm_options_set_exec(o, self_exe, argv);
    } else {
        pm_options_set_bootstrap(o, boot_idle, NULL);
    }
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    pm_options_set_restart_random_factor(o, 0);
    pm_options_set_max_restarts(o, -1);
    pm_options_set_handle_signals(o, 0);
    pm_options_set_ring_size(o, 256 * 1024);
    pm_options_set_on_event(o, on_ready, NULL);
    return o;
}

static void print_lat(const char *name, uint64_t *v, size_t n, uint64_t base_p50)
{
    qsort(v, n, sizeof(*v), cmp_u64);
    uint64_t p50 = percentile(v, n, 0.5), p99 = percentile(v, n, 0.99);
    char ratio[32] = "-";
    if (base_p50 > 0)
        snprintf(ratio, sizeof(ratio), "%.2fx", (double)p50 / (double)base_p50);
    printf("  %-26s %10.3f %10.3f %14s\n", name, (double)p50 / 1e6, (double)p99 / 1e6, ratio);
}

/* Bare fork + _exit + waitpid (or fork + exec + wait): the floor of any
 * restart, measured the same way. */
static void baseline_restart(int exec_mode, unsigned rounds, uint64_t *v)
{
    for (unsigned i = 0; i < rounds; i++) {
        uint64_t t0 = pm__now_ns();
        pid_t pid = fork();
        if (pid == 0) {
            if (exec_mode) {
                char *argv[] = {"pm-bench", "__child", NULL};
                execv(self_exe, argv);
            }
            _exit(0);
        }
        waitpid(pid, NULL, 0);
        v[i] = pm__now_ns() - t0;
    }
}

static int cmd_restart(unsigned rounds)
{
    print_machine();
    printf("restart: crash-to-ready latency, %u rounds, backoff 0 (ms)\n", rounds);
    printf("  %-26s %10s %10s %14s\n", "what", "p50 ms", "p99 ms", "vs baseline");
    uint64_t *v = calloc(rounds, sizeof(*v)), *b = calloc(rounds, sizeof(*b));
    for (int exec_mode = 0; exec_mode < 2; exec_mode++) {
        baseline_restart(exec_mode, rounds, b);
        qsort(b, rounds, sizeof(*b), cmp_u64);
        uint64_t base = percentile(b, rounds, 0.5);
        pm_options *o = bench_options(1, exec_mode);
        pm_cluster *c;
        int rc = pm_cluster_spawn(o, &c);
        if (rc < 0) {
            fprintf(stderr, "pm-bench: spawn: %s\n", pm_strerror(rc));
            return 1;
        }
        for (unsigned i = 0; i < rounds; i++) {
            pm_slot_info si;
            pm_cluster_slot_info(c, 0, &si);
            uint64_t want = si.incarnation + 1;
            uint64_t t0 = pm__now_ns();
            kill(si.pid, SIGKILL);
            while (ready_inc != want) {
                if (pm_cluster_run(c, 1000) < 0 || pm__now_ns() - t0 > 10000000000ull) {
                    fprintf(stderr, "pm-bench: no replacement became ready\n");
                    return 1;
                }
            }
            v[i] = pm__now_ns() - t0;
        }
        pm_cluster_terminate(c);
        pm_options_free(o);
        print_lat(exec_mode ? "baseline fork+exec+wait" : "baseline fork+exit+wait", b, rounds, 0);
        print_lat(exec_mode ? "procmesh exec mode" : "procmesh fork mode", v, rounds, base);
    }
    free(v);
    free(b);
    return 0;
}

/* N bare children that each write one byte to a pipe: the floor of
 * bringing N processes up and hearing from each. */
static uint64_t baseline_spawn(int exec_mode, int n)
{
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    uint64_t t0 = pm__now_ns();
    for (int i = 0; i < n; i++) {
        pids[i] = fork();
        if (pids[i] == 0) {
            if (exec_mode) {
                dup2(p[1], 3);
                char *argv[] = {"pm-bench", "__child", NULL};
                execv(self_exe, argv);
                _exit(1);
            }
            char c = 'r';
            _exit(write(p[1], &c, 1) == 1 ? 0 : 1);
        }
    }
    char buf[64];
    for (int got = 0; got < n;) {
        ssize_t k = read(p[0], buf, sizeof(buf) < (size_t)(n - got) ? sizeof(buf) : (size_t)(n - got));
        if (k <= 0)
            die("read");
        got += (int)k;
    }
    uint64_t t = pm__now_ns() - t0;
    for (int i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
    free(pids);
    close(p[0]);
    close(p[1]);
    return t;
}

static int cmd_spawn(unsigned runs)
{
    static const int counts[] = {1, 8, 64};
    print_machine();
    printf("spawn: time until N workers are ready, median of %u runs (ms)\n", runs);
    printf("  %-6s %-6s %14s %14s %12s\n", "mode", "N", "procmesh ms", "baseline ms", "ratio");
    uint64_t *v = calloc(runs, sizeof(*v)), *b = calloc(runs, sizeof(*b));
    for (int exec_mode = 0; exec_mode < 2; exec_mode++) {
        for (size_t k = 0; k < ARRAY_LEN(counts); k++) {
            int n = counts[k];
            for (unsigned r = 0; r < runs; r++) {
                b[r] = baseline_spawn(exec_mode, n);
                pm_options *o = bench_options(n, exec_mode);
                pm_cluster *c;
                uint64_t t0 = pm__now_ns();
                int rc = pm_cluster_spawn(o, &c);
                v[r] = pm__now_ns() - t0;
                if (rc < 0) {
                    fprintf(stderr, "pm-bench: spawn of %d: %s\n", n, pm_strerror(rc));
                    return 1;
                }
                pm_cluster_terminate(c);
                pm_options_free(o);
            }
            uint64_t mv = median(v, runs), mb = median(b, runs);
            printf("  %-6s %-6d %14.3f %14.3f %11.2fx\n", exec_mode ? "exec" : "fork", n,
                   (double)mv / 1e6, (double)mb / 1e6, (double)mv / (double)mb);
        }
    }
    free(v);
    free(b);
    return 0;
}

/* ------------------------------------------------------------------ relay */

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

static uint64_t hub_syscalls(pm_cluster *c)
{
    uint64_t n = c->loop.syscalls;
    for (unsigned i = 0; i < c->nslots; i++)
        n += c->slots[i].link.tx.wakeups + c->slots[i].link.rx.wakeups;
    return n;
}

/* One procmesh relay run: stream (or ping-pong) between slot 0 and slot 1
 * through the hub. Returns 0 and the elapsed time and system calls. */
static int mesh_relay(int awake, uint64_t *ns, uint64_t *syscalls)
{
    pm_options *o = bench_options(2, 0);
    pm_options_set_bootstrap(o, relay_worker, NULL);
    pm_options_set_on_event(o, NULL, NULL);
    pm_options_set_ring_size(o, 1 << 20);
    /* Streaming: the hub may poll for 50 us after a burst; awake ping-pong:
     * everyone spins for the whole run; parked: nobody spins. */
    pm_options_set_hub_spin_us(o, awake == 1 ? 1000000 : awake == 0 ? 0 : 50);
    rsh->spin_ns = awake == 1 ? UINT32_MAX : awake == 0 ? 0 : PM__RING_DEFAULT_SPIN_NS;
    atomic_store(&rsh->done, 0);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: spawn: %s\n", pm_strerror(rc));
        pm_options_free(o);
        return -1;
    }
    uint64_t hub0 = hub_syscalls(c);
    uint64_t t0 = pm__now_ns();
    for (unsigned i = 0; i < 2; i++) {
        pm_address a;
        pm__slot_address(c, &c->slots[i], &a);
        pm_cluster_send(c, &a, "start", 5);
    }
    while (!atomic_load(&rsh->done)) {
        if (pm_cluster_run(c, 1) < 0 || pm__now_ns() - t0 > 120000000000ull) {
            fprintf(stderr, "pm-bench: relay did not finish\n");
            pm_cluster_terminate(c);
            pm_options_free(o);
            return -1;
        }
    }
    *ns = pm__now_ns() - t0;
    *syscalls = hub_syscalls(c) - hub0 + rsh->worker_syscalls[0] + rsh->worker_syscalls[1];
    if (getenv("PM_BENCH_DEBUG"))
        fprintf(stderr, "syscalls: hub loop %llu, hub wakes %llu, sender %llu, receiver %llu\n",
                (unsigned long long)c->loop.syscalls,
                (unsigned long long)(hub_syscalls(c) - c->loop.syscalls),
                (unsigned long long)rsh->worker_syscalls[0],
                (unsigned long long)rsh->worker_syscalls[1]);
    pm_cluster_terminate(c);
    pm_options_free(o);
    return 0;
}

/* The same relay done by a plain process over pipes (kind 0) or Unix
 * stream sockets (kind 1): sender -> relay -> receiver, one write per frame
 * on both hops; the relay reads in large chunks and forwards frame by frame.
 * Ping-pong: A -> relay -> B -> relay -> A. */
static int fd_relay(int kind, int pingpong, uint64_t *ns)
{
    int a2r[2], r2b[2], b2r[2], r2a[2], ctl[2];
    fd_pair(kind, a2r);
    fd_pair(kind, r2b);
    fd_pair(kind, b2r);
    fd_pair(kind, r2a);
    if (pipe2(ctl, O_CLOEXEC) < 0)
        die("pipe");
    size_t size = rsh->size;
    uint64_t frames = pingpong ? rsh->rounds : rsh->frames;
    pid_t relay = fork();
    if (relay == 0) {
        /* Forward whole frames from a2r to r2b and from b2r to r2a. */
        char *buf = malloc(1 << 16);
        size_t have[2] = {0, 0};
        char *pend[2] = {malloc(1 << 17), malloc(1 << 17)};
        int in[2] = {a2r[0], b2r[0]}, out[2] = {r2b[1], r2a[1]};
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
        (void)buf;
    }
    pid_t b = fork();
    if (b == 0) {
        char *buf = malloc(1 << 16);
        ctl_send(ctl[1]);
        if (pingpong) {
            for (uint64_t i = 0; i < frames; i++)
                if (read_all(r2b[0], buf, size) < 0 || write_all(b2r[1], buf, size) < 0)
                    _exit(1);
        } else {
            uint64_t total = frames * size;
            while (total > 0) {
                ssize_t k = read(r2b[0], buf, total < (1 << 16) ? total : (1 << 16));
                if (k <= 0)
                    _exit(1);
                total -= (uint64_t)k;
            }
        }
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
    int fds[] = {a2r[0], a2r[1], r2b[0], r2b[1], b2r[0], b2r[1], r2a[0], r2a[1], ctl[0], ctl[1]};
    for (size_t i = 0; i < ARRAY_LEN(fds); i++)
        close(fds[i]);
    int rc = wait_child(b);
    kill(relay, SIGKILL);
    wait_child(relay);
    return rc == 0 ? 0 : -1;
}

static int cmd_relay(uint64_t frames_opt, unsigned rounds, unsigned runs)
{
    static const size_t sizes[] = {64, 4096};
    size_t shsize = sizeof(struct relay_shared) + (size_t)rounds * sizeof(uint64_t);
    rsh = mmap(NULL, shsize, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (rsh == MAP_FAILED)
        die("mmap");
    print_machine();
    uint64_t *v = calloc(runs, sizeof(*v));
    printf("relay stream: worker -> hub -> worker, median of %u runs\n", runs);
    printf("  %-6s %-12s %14s %10s %16s %18s\n", "size", "transport", "frames/s", "MB/s",
           "syscalls/frame", "procmesh speed-up");
    for (size_t z = 0; z < ARRAY_LEN(sizes); z++) {
        rsh->size = sizes[z];
        rsh->frames = frames_opt ? frames_opt : (sizes[z] == 64 ? 1000000 : 200000);
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
        static const char *const names[] = {"procmesh", "pipes", "unix"};
        for (int k = 0; k < 3; k++) {
            double secs = (double)med[k] / 1e9;
            char ratio[32] = "-", sysf[32] = "-";
            if (k > 0)
                snprintf(ratio, sizeof(ratio), "%.1fx", (double)med[k] / (double)med[0]);
            else
                snprintf(sysf, sizeof(sysf), "%.4f", (double)sys / (double)(rsh->frames * runs));
            if (k > 0)
                snprintf(sysf, sizeof(sysf), ">= 2.0000");
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
    static const char *const rt[] = {"procmesh awake", "procmesh parked", "pipes", "unix"};
    for (int k = 0; k < 4; k++) {
        uint64_t t, sc;
        int rc = k < 2 ? mesh_relay(k == 0 ? 1 : 0, &t, &sc) : fd_relay(k - 2, 1, &t);
        if (rc < 0)
            return 1;
        qsort(rsh->samples, rounds, sizeof(uint64_t), cmp_u64);
        printf("  %-22s %12" PRIu64 " %12" PRIu64 "\n", rt[k], percentile(rsh->samples, rounds, 0.5),
               percentile(rsh->samples, rounds, 0.99));
    }
    free(v);
    munmap(rsh, shsize);
    return 0;
}

/* ------------------------------------------------------------------ daemon */

/* utime + stime of pid, in clock ticks, or -1. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* CPU time of pid's main thread in ns from /proc/PID/schedstat (ns
 * resolution), or -1 where the kernel lacks it. */
static long long cpu_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long ns = 0;
    int ok = f != NULL && fscanf(f, "%llu", &ns) == 1;
    if (f != NULL)
        fclose(f);
    return ok ? (long long)ns : -1;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

/* The procmesh program: beside us in a build tree, or in PATH. */
static const char *procmesh_path(char *buf, size_t size)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", self_exe);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
        snprintf(buf, size, "%s/../src/daemon/procmesh", dir);
        if (access(buf, X_OK) == 0)
            return buf;
        snprintf(buf, size, "%s/procmesh", dir);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return "procmesh";
}

static int children(pid_t pid, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f != NULL && n < max && fscanf(f, "%d", &c) == 1)
        out[n++] = c;
    if (f != NULL)
        fclose(f);
    return n;
}

static int cmd_daemon(unsigned runs)
{
    char pm[4200];
    const char *prog = procmesh_path(pm, sizeof(pm));
    long tck = sysconf(_SC_CLK_TCK);
    print_machine();
    printf("daemon: %s run --workers 4 -- pm-bench __worker (mesh, idle), 10 s per run, "
           "median of %u runs\n", prog, runs);
    uint64_t *sup = calloc(runs, sizeof(uint64_t)), *wrk = calloc(runs, sizeof(uint64_t)),
             *rss = calloc(runs, sizeof(uint64_t));
    int unit_ns = 0;
    for (unsigned r = 0; r < runs; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            int nul = open("/dev/null", O_WRONLY);
            dup2(nul, 2);
            execlp(prog, "procmesh", "run", "--workers", "4", "--", self_exe, "__worker", (char *)NULL);
            _exit(127);
        }
        pid_t kids[8];
        int nk = 0;
        for (int i = 0; i < 200 && nk < 4; i++) {
            usleep(20000);
            nk = children(pid, kids, 8);
        }
        if (nk < 4) {
            fprintf(stderr, "pm-bench: procmesh did not start its workers (is it installed?)\n");
            kill(pid, SIGKILL);
            wait_child(pid);
            return 1;
        }
        sleep(1); /* let start-up settle */
        /* schedstat (ns) when the kernel has it, else utime+stime (ticks). */
        int ns = cpu_ns(pid) >= 0;
        long long s0 = ns ? cpu_ns(pid) : cpu_ticks(pid), w0 = 0, s1, w1 = 0;
        for (int i = 0; i < nk; i++)
            w0 += ns ? cpu_ns(kids[i]) : cpu_ticks(kids[i]);
        sleep(10);
        s1 = ns ? cpu_ns(pid) : cpu_ticks(pid);
        for (int i = 0; i < nk; i++)
            w1 += ns ? cpu_ns(kids[i]) : cpu_ticks(kids[i]);
        /* CPU in millipercent of one core, to keep the median integral. */
        double per_s = ns ? 1e9 : (double)tck;
        sup[r] = (uint64_t)((double)(s1 - s0) * 100000.0 / (10.0 * per_s));
        wrk[r] = (uint64_t)((double)(w1 - w0) * 100000.0 / (10.0 * per_s));
        unit_ns = ns;
        rss[r] = (uint64_t)rss_kib(pid);
        kill(pid, SIGTERM);
        wait_child(pid);
    }
    printf("  supervisor CPU, idle:        %.3f %% of one core (target < 0.5 %%)\n",
           (double)median(sup, runs) / 1000.0);
    printf("  4 idle workers CPU, total:   %.3f %% of one core\n", (double)median(wrk, runs) / 1000.0);
    printf("  supervisor RSS:              %llu KiB\n", (unsigned long long)median(rss, runs));
    if (unit_ns)
        printf("  (CPU from /proc/PID/schedstat, nanoseconds)\n");
    else
        printf("  (CPU from /proc/PID/stat at %ld ticks/s: resolution %.2f %%)\n", tck,
               100.0 / (10.0 * (double)tck));
    free(sup);
    free(wrk);
    free(rss);
    return 0;
}

int main(int argc, char **argv)
{
    bench_opts o = {.frames = 2000000, .size = 64, .runs = 3, .rounds = 50000};
    if (argc >= 2 && strcmp(argv[1], "__worker") == 0)
        return worker_main();
    if (argc >= 2 && strcmp(argv[1], "__child") == 0)
        return child_main();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const char *cmd = argv[1];
    if (strcmp(cmd, "ring") != 0 && strcmp(cmd, "restart") != 0 && strcmp(cmd, "spawn") != 0 &&
        strcmp(cmd, "relay") != 0 && strcmp(cmd, "daemon") != 0) {
        fprintf(stderr,
                "pm-bench: unknown command '%s' (commands: ring, restart, spawn, relay, daemon)\n",
                cmd);
        return 2;
    }
    int rounds_set = 0, runs_set = 0, frames_set = 0;
    for (int i = 2; i < argc; i++) {
        uint64_t v;
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0) {
            fputs(usage, stdout);
            return 0;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pm-bench: %s: unknown option or missing value\n", opt);
            return 2;
        }
        const char *val = argv[++i];
        if (strcmp(opt, "--frames") == 0 && (strcmp(cmd, "ring") == 0 || strcmp(cmd, "relay") == 0)) {
            if (parse_u64(opt, val, 1, UINT64_MAX / 65536, &v) < 0)
                return 2;
            o.frames = v;
            frames_set = 1;
        } else if (strcmp(opt, "--size") == 0 && strcmp(cmd, "ring") == 0) {
            if (parse_u64(opt, val, 1, RING_MAX_FRAME, &v) < 0)
                return 2;
            o.size = (size_t)v;
        } else if (strcmp(opt, "--runs") == 0 && strcmp(cmd, "restart") != 0) {
            if (parse_u64(opt, val, 1, 101, &v) < 0)
                return 2;
            o.runs = (unsigned)v;
            runs_set = 1;
        } else if (strcmp(opt, "--rounds") == 0 && strcmp(cmd, "spawn") != 0) {
            if (parse_u64(opt, val, 1, 100000000, &v) < 0)
                return 2;
            o.rounds = (unsigned)v;
            rounds_set = 1;
        } else {
            fprintf(stderr, "pm-bench %s: unknown option '%s' (see pm-bench --help)\n", cmd, opt);
            return 2;
        }
    }
    ssize_t k = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (k <= 0)
        die("readlink /proc/self/exe");
    self_exe[k] = '\0';
    if (strcmp(cmd, "restart") == 0)
        return cmd_restart(rounds_set ? o.rounds : 300);
    if (strcmp(cmd, "spawn") == 0)
        return cmd_spawn(runs_set ? o.runs : 5);
    if (strcmp(cmd, "daemon") == 0)
        return cmd_daemon(runs_set ? o.runs : 3);
    if (strcmp(cmd, "relay") == 0)
        return cmd_relay(frames_set ? o.frames : 0, rounds_set ? o.rounds : 20000,
                         runs_set ? o.runs : 3);
    return cmd_ring(&o);
}
