/* SPDX-License-Identifier: MIT */
/*
 * defaults.c - pm-bench relay's "defaults" rows (issue 26): the paused
 * request/reply written as a user writes it, with nothing but procmesh.h:
 * pm_options_new, two fork-mode workers and a bootstrap, main blocked in
 * pm_cluster_run(c, -1), worker 0 asking worker 1 every period; beside the
 * pipe relay such a user writes: three forked processes (requester, relay,
 * replier), pipes of the kernel's default size, the same cadence.
 *
 * pm-bench's own paused row (relay.c) differs from this in what it set up
 * for its other rows (a 1 ms loop tick in main, a "start" message, the
 * spin limits written into the node); these rows are the reference that
 * has none of it, so that a difference between them and that row, or
 * between two machines, can be traced. The shared page only carries the
 * measurements out; nothing here reaches inside procmesh.
 */
#define _GNU_SOURCE
#include "defaults.h"

#include "procmesh.h"

#include <errno.h>
#include <fcntl.h>
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
#include <unistd.h>

#define MSG_SIZE 64

struct def_shared {
    unsigned rounds;
    unsigned period_us;
    int cadence;
    _Atomic int failed;
    uint64_t csw[3]; /* requester, replier, relay (pipes) */
    uint64_t samples[];
};

static struct def_shared *dsh;

/* Whether PM_BENCH_DEFAULTS names `what` (a toggle toward pm-bench's row). */
static int toggled(const char *what)
{
    const char *s = getenv("PM_BENCH_DEFAULTS");
    size_t n = strlen(what);
    while (s != NULL && *s != '\0') {
        if (strncmp(s, what, n) == 0 && (s[n] == '\0' || s[n] == ','))
            return 1;
        s = strchr(s, ',');
        if (s != NULL)
            s++;
    }
    return 0;
}

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static uint64_t csw_self(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
}

/* Waits for the next request's turn: `next` is the schedule's last slot
 * (DEFAULTS_SCHEDULE), unused by a plain sleep. */
static void cadence_wait(struct timespec *next)
{
    if (dsh->cadence == DEFAULTS_SLEEP) {
        struct timespec ts = {.tv_sec = dsh->period_us / 1000000u,
                              .tv_nsec = (long)(dsh->period_us % 1000000u) * 1000};
        while (nanosleep(&ts, &ts) < 0 && errno == EINTR)
            ;
        return;
    }
    next->tv_nsec += (long)dsh->period_us * 1000;
    while (next->tv_nsec >= 1000000000) {
        next->tv_nsec -= 1000000000;
        next->tv_sec++;
    }
    /* A slot already past (a late round trip) fires at once. */
    while (clock_nanosleep(CLOCK_MONOTONIC, TIMER_ABSTIME, next, NULL) == EINTR)
        ;
}

/* ------------------------------------------------------------------ procmesh */

static const pm_address main_addr = {.system = "procmesh", .host = "main"};

static int requester(pm_node *n)
{
    char buf[MSG_SIZE] = {0};
    pm_address peer = *pm_node_self(n);
    peer.port++; /* slot 1 */
    peer.incarnation = 0;
    pm_message r;
    /* The replier may not be ready yet: a user retries the first request. */
    int rc = -1;
    for (int tries = 0; tries < 5000 && rc != 0; tries++)
        if ((rc = pm_node_request(n, &peer, buf, sizeof(buf), 10000, &r)) != 0)
            usleep(1000);
    uint64_t csw0 = csw_self();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (unsigned i = 0; rc == 0 && i < dsh->rounds; i++) {
        cadence_wait(&next);
        uint64_t t0 = now_ns();
        rc = pm_node_request(n, &peer, buf, sizeof(buf), 10000, &r);
        dsh->samples[i] = now_ns() - t0;
    }
    dsh->csw[0] = csw_self() - csw0;
    if (rc != 0) {
        fprintf(stderr, "pm-bench: defaults: request: %s\n", pm_strerror(rc));
        atomic_store(&dsh->failed, 1);
        pm_node_send(n, &main_addr, "done", 4);
    } else {
        /* The replier reports to main once it has counted its part. */
        pm_node_send(n, &peer, "done", 4);
    }
    return 0;
}

static int replier(pm_node *n)
{
    char buf[MSG_SIZE] = {0};
    pm_message m;
    uint64_t csw0 = 0;
    int first = 1;
    for (;;) {
        int rc = pm_node_recv(n, &m, -1);
        if (rc != 0)
            return rc == -ESHUTDOWN ? 0 : 1;
        if (m.kind == PM_MSG_REQUEST) {
            if (first)
                csw0 = csw_self();
            first = 0;
            pm_node_reply(n, &m, buf, sizeof(buf));
        } else if (m.len == 4 && memcmp(m.data, "done", 4) == 0) {
            dsh->csw[1] = csw_self() - csw0;
            pm_node_send(n, &main_addr, "done", 4);
        }
    }
}

static int bootstrap(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    int rc = pm_node_slot(n) == 0 ? requester(n) : replier(n);
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return rc;
}

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    if (m->len == 4 && memcmp(m->data, "done", 4) == 0) {
        *(int *)arg = 1;
        pm_cluster_stop(c);
    }
}

static int mesh_defaults(uint64_t *main_csw)
{
    static int done; /* set by on_message, from inside pm_cluster_run */
    done = 0;
    pm_options *o = pm_options_new();
    if (o == NULL)
        return -1;
    pm_options_set_workers(o, 2);
    pm_options_set_bootstrap(o, bootstrap, NULL);
    pm_options_set_on_message(o, on_message, &done);
    if (toggled("bench")) {
        pm_options_set_restart_min_backoff_ms(o, 0);
        pm_options_set_restart_max_backoff_ms(o, 0);
        pm_options_set_restart_random_factor(o, 0);
        pm_options_set_max_restarts(o, -1);
        pm_options_set_handle_signals(o, 0);
        pm_options_set_ring_size(o, 1 << 20);
    }
    int tick = toggled("tick") ? 1 : -1;
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    pm_options_free(o);
    if (rc < 0) {
        fprintf(stderr, "pm-bench: defaults: spawn: %s\n", pm_strerror(rc));
        return -1;
    }
    uint64_t csw0 = csw_self();
    while (!done && (rc = pm_cluster_run(c, tick)) >= 0)
        ;
    *main_csw = csw_self() - csw0;
    pm_cluster_terminate(c);
    if (rc < 0)
        fprintf(stderr, "pm-bench: defaults: run: %s\n", pm_strerror(rc));
    return rc < 0 || atomic_load(&dsh->failed) ? -1 : 0;
}

/* ------------------------------------------------------------------ pipes */

static int write_full(int fd, const char *p, size_t len)
{
    while (len > 0) {
        ssize_t k = write(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static int read_full(int fd, char *p, size_t len)
{
    while (len > 0) {
        ssize_t k = read(fd, p, len);
        if (k < 0 && errno == EINTR)
            continue;
        if (k <= 0)
            return -1;
        p += k;
        len -= (size_t)k;
    }
    return 0;
}

static int open_pipe(int fds[2])
{
    if (pipe2(fds, O_CLOEXEC) < 0)
        return -1;
    if (toggled("bigpipes"))
        (void)fcntl(fds[1], F_SETPIPE_SZ, 1 << 20);
    return 0;
}

/* The relay: whatever comes in on in[d] goes out on out[d], message by
 * message, until both inputs close. */
static __attribute__((noreturn)) void relay_process(const int in[2], const int out[2])
{
    char buf[MSG_SIZE];
    for (;;) {
        struct pollfd p[2] = {{in[0], POLLIN, 0}, {in[1], POLLIN, 0}};
        if (poll(p, 2, -1) < 0)
            continue;
        for (int d = 0; d < 2; d++)
            if (p[d].revents & (POLLIN | POLLHUP))
                if (read_full(in[d], buf, sizeof(buf)) < 0 ||
                    write_full(out[d], buf, sizeof(buf)) < 0)
                    _exit(0);
    }
}

static void pipe_requester(int to_relay, int from_relay)
{
    char buf[MSG_SIZE] = {0};
    uint64_t csw0 = csw_self();
    struct timespec next;
    clock_gettime(CLOCK_MONOTONIC, &next);
    for (unsigned i = 0; i < dsh->rounds; i++) {
        cadence_wait(&next);
        uint64_t t0 = now_ns();
        if (write_full(to_relay, buf, sizeof(buf)) < 0 ||
            read_full(from_relay, buf, sizeof(buf)) < 0) {
            atomic_store(&dsh->failed, 1);
            break;
        }
        dsh->samples[i] = now_ns() - t0;
    }
    dsh->csw[0] = csw_self() - csw0;
}

static int pipe_defaults(void)
{
    int a2r[2], r2b[2], b2r[2], r2a[2];
    if (open_pipe(a2r) < 0 || open_pipe(r2b) < 0 || open_pipe(b2r) < 0 || open_pipe(r2a) < 0)
        return -1;
    pid_t relay = fork();
    if (relay == 0)
        relay_process((const int[2]){a2r[0], b2r[0]}, (const int[2]){r2b[1], r2a[1]});
    pid_t b = relay > 0 ? fork() : -1;
    if (b < 0) {
        perror("pm-bench: defaults: fork");
        exit(1);
    }
    if (b == 0) {
        /* The replier: answers until the relay closes its pipe. */
        char buf[MSG_SIZE];
        close(r2b[1]);
        uint64_t csw0 = csw_self();
        while (read_full(r2b[0], buf, sizeof(buf)) == 0 && write_full(b2r[1], buf, sizeof(buf)) == 0)
            ;
        dsh->csw[1] = csw_self() - csw0;
        _exit(0);
    }
    pid_t a = -1;
    if (toggled("mainreq")) {
        pipe_requester(a2r[1], r2a[0]);
    } else if ((a = fork()) == 0) {
        pipe_requester(a2r[1], r2a[0]);
        _exit(0);
    } else if (a < 0) {
        atomic_store(&dsh->failed, 1);
    }
    int status;
    if (a > 0)
        waitpid(a, &status, 0);
    int *all[] = {a2r, r2b, b2r, r2a};
    for (size_t i = 0; i < sizeof(all) / sizeof(all[0]); i++) {
        close(all[i][0]);
        close(all[i][1]);
    }
    /* The relay's whole life, a handful of switches more than its part. */
    kill(relay, SIGKILL);
    struct rusage ru;
    memset(&ru, 0, sizeof(ru));
    while (wait4(relay, NULL, 0, &ru) < 0 && errno == EINTR)
        ;
    dsh->csw[2] = (uint64_t)ru.ru_nvcsw + (uint64_t)ru.ru_nivcsw;
    waitpid(b, &status, 0);
    return atomic_load(&dsh->failed) ? -1 : 0;
}

/* ------------------------------------------------------------------ the entry */

int defaults_relay(int pipes, int cadence, unsigned rounds, unsigned period_us, uint64_t *samples,
                   uint64_t *csw)
{
    size_t size = sizeof(struct def_shared) + (size_t)rounds * sizeof(uint64_t);
    dsh = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (dsh == MAP_FAILED)
        return -1;
    dsh->rounds = rounds;
    dsh->period_us = period_us;
    dsh->cadence = cadence;
    uint64_t main_csw = 0;
    int rc = pipes ? pipe_defaults() : mesh_defaults(&main_csw);
    if (rc == 0) {
        memcpy(samples, dsh->samples, (size_t)rounds * sizeof(uint64_t));
        *csw = main_csw + dsh->csw[0] + dsh->csw[1] + dsh->csw[2];
    }
    munmap(dsh, size);
    dsh = NULL;
    return rc;
}
