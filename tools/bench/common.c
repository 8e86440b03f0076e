/* SPDX-License-Identifier: MIT */
/* common.c - what pm-bench's subcommands share: options, baseline processes, statistics, output. */
#define _GNU_SOURCE
#include "bench.h"
#include "channel/channel.h"

#include <fcntl.h>
#include <inttypes.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/utsname.h>
#include <sys/wait.h>

char self_exe[4096];

/* ------------------------------------------------------------------ options */

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

int parse_options(int argc, char **argv, unsigned allowed, bench_opts *o)
{
    for (int i = 2; i < argc; i++) {
        uint64_t v;
        const char *opt = argv[i];
        if (strcmp(opt, "--help") == 0)
            return 1;
        if (strcmp(opt, "--quick") == 0 && (allowed & OPT_QUICK)) {
            o->quick = 1;
            continue;
        }
        if (i + 1 >= argc) {
            fprintf(stderr, "pm-bench: %s: unknown option or missing value\n", opt);
            return -1;
        }
        const char *val = argv[++i];
        if (strcmp(opt, "--frames") == 0 && (allowed & OPT_FRAMES)) {
            /* The bound keeps frames * size within 64 bits. */
            if (parse_u64(opt, val, 1, UINT64_MAX / 65536, &v) < 0)
                return -1;
            o->frames = v;
        } else if (strcmp(opt, "--size") == 0 && (allowed & OPT_SIZE)) {
            if (parse_u64(opt, val, 1, RING_MAX_FRAME, &v) < 0)
                return -1;
            o->size = (size_t)v;
        } else if (strcmp(opt, "--runs") == 0 && (allowed & OPT_RUNS)) {
            if (parse_u64(opt, val, 1, 101, &v) < 0)
                return -1;
            o->runs = (unsigned)v;
        } else if (strcmp(opt, "--rounds") == 0 && (allowed & OPT_ROUNDS)) {
            if (parse_u64(opt, val, 1, 100000000, &v) < 0)
                return -1;
            o->rounds = (unsigned)v;
        } else if (strcmp(opt, "--csv") == 0 && (allowed & OPT_CSV)) {
            if (csv_out != NULL)
                fclose(csv_out);
            int fresh = access(val, F_OK) != 0;
            csv_out = fopen(val, "ae"); /* close-on-exec: exec-mode children must not inherit it as fd 3 */
            if (csv_out == NULL) {
                fprintf(stderr, "pm-bench: --csv: cannot open '%s': %s\n", val, strerror(errno));
                return -1;
            }
            if (fresh)
                fputs("bench,workload,size,who,metric,value\n", csv_out);
        } else if (strcmp(opt, "--pause-us") == 0 && (allowed & OPT_PAUSE)) {
            if (parse_u64(opt, val, 0, 1000000, &v) < 0)
                return -1;
            o->pause_us = (unsigned)v;
        } else if (strcmp(opt, "--max") == 0 && (allowed & OPT_MAX)) {
            if (parse_u64(opt, val, 2, 1024, &v) < 0)
                return -1;
            o->max_n = (unsigned)v;
        } else if (strcmp(opt, "--row") == 0 && (allowed & OPT_ROW)) {
            if (parse_u64(opt, val, 1, 64, &v) < 0)
                return -1;
            o->row = (unsigned)v;
        } else if (strcmp(opt, "--settle-ms") == 0 && (allowed & OPT_SETTLE)) {
            if (parse_u64(opt, val, 0, 10000, &v) < 0)
                return -1;
            o->settle_ms = (unsigned)v;
        } else if (strcmp(opt, "--privileges") == 0 && (allowed & OPT_PRIVILEGES)) {
            if (strcmp(val, "on") != 0 && strcmp(val, "off") != 0) {
                fprintf(stderr, "pm-bench: --privileges: '%s' is not on or off\n", val);
                return -1;
            }
            o->privileges = strcmp(val, "on") == 0;
        } else {
            fprintf(stderr, "pm-bench %s: unknown option '%s' (see pm-bench --help)\n", argv[1],
                    opt);
            return -1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ exec-mode entries */

int worker_main(void)
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

int child_main(int argc, char **argv)
{
    if (argc > 2 && strcmp(argv[2], "ring") == 0) {
        struct stat st;
        void *m = fstat(4, &st) == 0 ? mmap(NULL, (size_t)st.st_size, PROT_READ | PROT_WRITE, MAP_SHARED, 4, 0)
                                     : MAP_FAILED;
        if (m == MAP_FAILED)
            return 1;
        *(volatile char *)((char *)m + PM__CTL_SIZE) = 1;
    }
    char c = 'r';
    return write(3, &c, 1) == 1 ? 0 : 1;
}

/* ------------------------------------------------------------------ the supervisor */

volatile uint64_t ready_inc;
volatile uint64_t ready_at_ns;

static int boot_idle(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    for (;;)
        pause();
    return 0;
}

static void on_ready(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)arg;
    if (e->type == PM_EVENT_READY) {
        ready_at_ns = pm__now_ns();
        ready_inc = e->incarnation;
        /* pm_cluster_run runs for its whole timeout unless stopped. */
        pm_cluster_stop(c);
    }
}

int bench_lanes = -1;

int pm_bench_capture(void)
{
    const char *output = getenv("PM_BENCH_OUTPUT");
    return output != NULL && strcmp(output, "capture") == 0;
}

static void discard_output(pm_cluster *c, const pm_output_line *l, void *arg)
{
    (void)c, (void)l, (void)arg;
}

pm_options *bench_options(int workers, int exec_mode)
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
    /* PM_BENCH_LANES=0: every frame through the hub (the star, as before
     * direct lanes), to compare with the default in the same session. */
    /* PM_BENCH_OUTPUT=capture: the workers' stdout and stderr captured
     * (pipes per incarnation, read on threads, drained at each reap), the
     * lines discarded: what capture adds to a restart. */
    if (pm_bench_capture()) {
        pm_options_set_output(o, PM_OUTPUT_CAPTURE);
        pm_options_set_on_output(o, discard_output, NULL);
    }
    /* PM_BENCH_CONTAIN=pgroup: process groups, never a cgroup (what
     * containment in cgroups costs a spawn or a restart, same run). */
    const char *contain = getenv("PM_BENCH_CONTAIN");
    if (contain != NULL && strcmp(contain, "pgroup") != 0) {
        fprintf(stderr, "pm-bench: PM_BENCH_CONTAIN: '%s' is not \"pgroup\" (unset it for the default)\n",
                contain);
        exit(2);
    }
    if (contain != NULL)
        pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP);
    const char *lanes = getenv("PM_BENCH_LANES");
    if (bench_lanes >= 0)
        pm_options_set_direct_lanes(o, bench_lanes);
    else if (lanes != NULL)
        pm_options_set_direct_lanes(o, strcmp(lanes, "0") != 0);
    return o;
}

/* ------------------------------------------------------------------ processes and pipes */

void die(const char *what)
{
    fprintf(stderr, "pm-bench: %s: %s\n", what, strerror(errno));
    exit(1);
}

int write_all(int fd, const void *buf, size_t len)
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

int read_all(int fd, void *buf, size_t len)
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

pid_t fork_or_die(void)
{
    pid_t pid = fork();
    if (pid < 0)
        die("fork");
    return pid;
}

void close_pair(const int fds[2])
{
    close(fds[0]);
    close(fds[1]);
}

void ctl_open(int ctl[2])
{
    if (pipe2(ctl, O_CLOEXEC) < 0)
        die("pipe");
}

void ctl_send(int fd)
{
    char c = 'x';
    if (write_all(fd, &c, 1) < 0)
        die("control pipe");
}

void ctl_wait(int fd)
{
    char c;
    if (read_all(fd, &c, 1) < 0)
        die("control pipe");
}

int wait_child(pid_t pid)
{
    int status;
    while (waitpid(pid, &status, 0) < 0)
        if (errno != EINTR)
            return -1;
    return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

void fd_pair(int kind, int fds[2])
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

/* Large reads: the comparison is one write per frame against one ring
 * record per frame; reads are not the limit. */
int drain(int fd, uint64_t total)
{
    char *buf = malloc(1 << 16);
    int rc = buf != NULL ? 0 : -1;
    while (rc == 0 && total > 0) {
        ssize_t n = read(fd, buf, total < (1 << 16) ? total : (1 << 16));
        if (n <= 0)
            rc = -1;
        else
            total -= (uint64_t)n;
    }
    free(buf);
    return rc;
}

int echo(int in, int out, void *buf, size_t size, uint64_t n)
{
    for (uint64_t i = 0; i < n; i++)
        if (read_all(in, buf, size) < 0 || write_all(out, buf, size) < 0)
            return -1;
    return 0;
}

/* ------------------------------------------------------------------ statistics */

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

void sort_u64(uint64_t *v, size_t n)
{
    qsort(v, n, sizeof(*v), cmp_u64);
}

uint64_t median(uint64_t *v, size_t n)
{
    sort_u64(v, n);
    return v[n / 2];
}

uint64_t percentile(const uint64_t *sorted, size_t n, double p)
{
    size_t i = (size_t)(p * (double)(n - 1) + 0.5);
    return sorted[i < n ? i : n - 1];
}

/* ------------------------------------------------------------------ output */

void print_machine(void)
{
    struct utsname u;
    uname(&u);
    printf("machine: %ld cpus online, %s %s %s\n", sysconf(_SC_NPROCESSORS_ONLN), u.sysname,
           u.release, u.machine);
}

void print_build(void)
{
#if defined(PM_BENCH_CC) && defined(PM_BENCH_CFLAGS)
    printf("build: %s %s, %s\n", PM_BENCH_CC, PM_BENCH_CFLAGS, __VERSION__);
#else
    printf("build: %s\n", __VERSION__);
#endif
}

FILE *csv_out;

void csv_row(const char *bench, const char *workload, uint64_t size, const char *who,
             const char *metric, double value)
{
    if (csv_out == NULL)
        return;
    fprintf(csv_out, "%s,%s,%" PRIu64 ",%s,%s,%.6g\n", bench, workload, size, who, metric, value);
    fflush(csv_out);
}

void print_p50_p99(int width, const char *name, uint64_t *v, size_t n)
{
    sort_u64(v, n);
    printf("  %-*s %12" PRIu64 " %12" PRIu64 "\n", width, name, percentile(v, n, 0.50),
           percentile(v, n, 0.99));
}

void format_ratio(char *buf, size_t size, uint64_t t, uint64_t base, int decimals)
{
    if (base == 0)
        snprintf(buf, size, "-");
    else
        snprintf(buf, size, "%.*fx", decimals, (double)t / (double)base);
}
