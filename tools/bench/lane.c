/* SPDX-License-Identifier: MIT */
/* lane.c - pm-bench lane: a direct lane's data path between two processes, beside the hub, a pipe and the ring. */
/*
 * What a lane can cost at best, before anything brokers one (issue 26;
 * doc/design.md, "Direct lanes"): two processes attached to one lane
 * (src/channel/lane.c) with an eventfd doorbell each, frames sent with
 * pm__lane_send, received with pm__lane_recv (copied out, judged, stamped)
 * and waited for with pm__ring_wait_many, as a worker will. Beside it, in
 * the same invocation: the same traffic through the hub between two
 * fork-mode workers (relay.c), the pipe relay, a direct pipe ping-pong and
 * the bare ring's round trips (ring.c).
 */
#include "bench.h"
#include "channel/bigmsg.h"
#include "channel/lane.h"
#include "channel/laneoffer.h"
#include "channel/ringwait.h"
#include "worker/nodelane.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>

static const pm__lane_who who_a = {.self_slot = 0, .self_inc = 1, .peer_slot = 1, .peer_inc = 1};
static const pm__lane_who who_b = {.self_slot = 1, .self_inc = 1, .peer_slot = 0, .peer_inc = 1};

typedef struct lane_pair {
    int fd;
    int efd[2]; /* end k parks on efd[k]; the other end writes it */
} lane_pair;

static void pair_open(lane_pair *p)
{
    int rc = pm__lane_create(&p->fd);
    if (rc < 0) {
        errno = -rc;
        die("lane");
    }
    for (int k = 0; k < 2; k++)
        if ((p->efd[k] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC)) < 0)
            die("eventfd");
}

static void pair_close(lane_pair *p)
{
    close(p->fd);
    close(p->efd[0]);
    close(p->efd[1]);
}

static pm__lane *pair_end(const lane_pair *p, unsigned end, uint32_t spin_ns)
{
    pm__lane *l = malloc(sizeof(*l));
    if (l == NULL ||
        pm__lane_attach(l, p->fd, end, end == 0 ? &who_a : &who_b, p->efd[1 - end], p->efd[end]) < 0)
        die("lane attach");
    l->tx.spin_ns = l->rx.spin_ns = spin_ns;
    return l;
}

/* The next frame: busy (awake: poll the ring without sleeping) or parked
 * (one pm__ring_wait_many of the lane's ring, as a worker will). */
static int lane_next(pm__lane *l, int awake, pm__frame_hdr *h, const void **p)
{
    for (;;) {
        int rc = pm__lane_recv(l, h, p);
        if (rc != 0)
            return rc;
        if (awake)
            continue;
        /* Spin first for what the last waits say pays off (ring.h,
         * pm__spin_learn), as a worker's wait will; then park. */
        pm__ring *r = &l->rx;
        uint32_t budget = r->spin_budget;
        if (budget > 0 && pm__spin_cpus() >= 2) {
            uint64_t t0 = pm__now_ns(), now = t0;
            while (now - t0 < budget && pm__ring_empty(r))
                now = pm__now_ns();
            int paid = !pm__ring_empty(r);
            r->spin_budget = pm__spin_learn(budget, r->spin_ns, paid, now - t0);
            if (paid)
                continue;
        }
        uint64_t t0 = pm__now_ns();
        if (pm__ring_wait_many(&r, 1, 10000) <= 0)
            return -ETIMEDOUT;
        if (budget == 0)
            r->spin_budget = pm__spin_learn(0, r->spin_ns, 0, pm__now_ns() - t0);
    }
}

static int lane_send_wait(pm__lane *l, const pm__frame_hdr *h, const void *data, size_t len)
{
    int rc;
    while ((rc = pm__lane_send(l, h, data, len)) == -EAGAIN)
        if (pm__ring_wait_space(&l->tx, PM__FRAME_HDR_SIZE + len, 10000) <= 0)
            return -ETIMEDOUT;
    return rc;
}

/* A streams o->frames messages of o->size bytes to B. */
static int lane_stream(const bench_opts *o, uint64_t *ns)
{
    lane_pair lp;
    pair_open(&lp);
    int ctl[2];
    ctl_open(ctl);
    pid_t pid = fork_or_die();
    if (pid == 0) {
        pm__lane *b = pair_end(&lp, 1, PM__RING_DEFAULT_SPIN_NS);
        ctl_send(ctl[1]);
        for (uint64_t seq = 0; seq < o->frames; seq++) {
            pm__frame_hdr h;
            const void *p;
            uint64_t got = 0;
            if (lane_next(b, 0, &h, &p) != 1 || h.len != o->size)
                _exit(3);
            memcpy(&got, p, h.len < 8 ? h.len : 8);
            if (h.len >= 8 && got != seq)
                _exit(4);
        }
        ctl_send(ctl[1]);
        _exit(0);
    }
    pm__lane *a = pair_end(&lp, 0, PM__RING_DEFAULT_SPIN_NS);
    char *buf = calloc(1, o->size);
    pm__frame_hdr h = {.type = PM__FT_MSG};
    ctl_wait(ctl[0]);
    uint64_t t0 = pm__now_ns();
    int ok = 1;
    for (uint64_t seq = 0; seq < o->frames && ok; seq++) {
        memcpy(buf, &seq, o->size < 8 ? o->size : 8);
        ok = lane_send_wait(a, &h, buf, o->size) == 0;
    }
    if (ok)
        ctl_wait(ctl[0]);
    *ns = pm__now_ns() - t0;
    if (getenv("PM_BENCH_DEBUG"))
        fprintf(stderr, "lane stream: sender wake-ups %" PRIu64 ", parks %" PRIu64 "\n",
                a->tx.wakeups, a->tx.parks);
    if (!ok)
        kill(pid, SIGKILL);
    int rc = wait_child(pid);
    free(buf);
    pm__lane_detach(a);
    free(a);
    close_pair(ctl);
    pair_close(&lp);
    return ok && rc == 0 ? 0 : -1;
}

/* A requests, B replies, o->rounds times: A records each round trip. */
static int lane_request_reply(const bench_opts *o, int awake, uint64_t *samples)
{
    lane_pair lp;
    pair_open(&lp);
    uint32_t spin = awake ? UINT32_MAX : 0;
    char *buf = calloc(1, o->size);
    pid_t pid = fork_or_die();
    if (pid == 0) {
        pm__lane *b = pair_end(&lp, 1, spin);
        for (unsigned i = 0; i < o->rounds; i++) {
            pm__frame_hdr h;
            const void *p;
            if (lane_next(b, awake, &h, &p) != 1 || h.type != PM__FT_REQUEST)
                _exit(3);
            pm__frame_hdr r = {.type = PM__FT_REPLY, .request_id = h.request_id};
            if (lane_send_wait(b, &r, buf, o->size) != 0)
                _exit(4);
        }
        _exit(0);
    }
    pm__lane *a = pair_end(&lp, 0, spin);
    int ok = 1;
    for (unsigned i = 0; i < o->rounds && ok; i++) {
        uint64_t t0 = pm__now_ns();
        pm__frame_hdr q = {.type = PM__FT_REQUEST, .request_id = i + 1}, h;
        const void *p;
        ok = lane_send_wait(a, &q, buf, o->size) == 0 && lane_next(a, awake, &h, &p) == 1 &&
             h.type == PM__FT_REPLY;
        samples[i] = pm__now_ns() - t0;
    }
    if (!ok)
        kill(pid, SIGKILL);
    int rc = wait_child(pid);
    free(buf);
    pm__lane_detach(a);
    free(a);
    pair_close(&lp);
    return ok && rc == 0 ? 0 : -1;
}

/* What one lane's set-up and tear-down cost in system calls and time,
 * every step of both sides in this one process (no wake-ups, no frames):
 * the supervisor's (the memfd made, formatted and unmapped, two eventfds,
 * one record to each worker, the three fds closed) and each worker's (the
 * record taken, the memfd mapped and closed, the lane unmapped and its
 * doorbells closed at the end). n lanes; the ns of each in samples. */
static int lane_setup_teardown(unsigned n, uint64_t *samples)
{
    int sock[2][2];
    for (int k = 0; k < 2; k++)
        if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sock[k]) < 0)
            die("socketpair");
    pm__node_lanes t[2];
    uint32_t seq = 0;
    for (unsigned i = 0; i < n; i++) {
        uint64_t t0 = pm__now_ns();
        int fd, efd[2];
        if (pm__lane_create(&fd) < 0)
            return -1;
        efd[0] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        efd[1] = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
        seq = pm__bigmsg_next(seq);
        for (int k = 0; k < 2; k++) {
            int fds[3] = {fd, efd[k], efd[1 - k]};
            if (pm__lane_record_send(sock[k][0], seq, fds) < 0)
                return -1;
        }
        close(fd);
        close(efd[0]);
        close(efd[1]);
        for (int k = 0; k < 2; k++) {
            int got[3];
            pm__node_lanes_init(&t[k]);
            if (pm__lane_record_recv(sock[k][1], seq, got) < 0)
                return -1;
            pm__lane_offer of = {seq, 0, i + 1, (uint32_t)k, (uint32_t)(1 - k), 1};
            if (pm__node_lanes_adopt(&t[k], &of, got, (uint32_t)k, 1) < 0)
                return -1;
        }
        pm__node_lanes_close(&t[0]);
        pm__node_lanes_close(&t[1]);
        samples[i] = pm__now_ns() - t0;
    }
    for (int k = 0; k < 2; k++)
        close_pair(sock[k]);
    return 0;
}

int cmd_lane(const bench_opts *o)
{
    print_machine();
    double la[1];
    if (getloadavg(la, 1) == 1)
        printf("load average %.2f\n", la[0]);
    printf("lane stream: %" PRIu64 " frames of %zu bytes, worker to worker, median of %u runs\n",
           o->frames, o->size, o->runs);
    printf("  %-24s %14s %18s\n", "path", "frames/s", "lane speed-up");
    uint64_t *v = calloc(o->runs, sizeof(*v));
    uint64_t med[3];
    /* The data path alone (two processes attached to one lane), then two
     * workers of a cluster (the library choosing the lane after 64 frames,
     * set-up included), then the same cluster with lanes off. */
    static const char *const sn[] = {"lane", "cluster, lanes", "through the hub"};
    for (int k = 0; k < 3; k++) {
        bench_lanes = k == 1;
        for (unsigned r = 0; r < o->runs; r++) {
            int rc = k == 0 ? lane_stream(o, &v[r])
                            : mesh_relay_run(2, 0, o->size, o->frames, &v[r], NULL);
            if (rc < 0) {
                fprintf(stderr, "pm-bench: %s stream failed\n", sn[k]);
                return 1;
            }
        }
        med[k] = median(v, o->runs);
    }
    for (int k = 0; k < 3; k++) {
        char ratio[32];
        format_ratio(ratio, sizeof(ratio), med[k], k > 0 ? med[0] : 0, 2);
        printf("  %-24s %14.0f %18s\n", sn[k], (double)o->frames / ((double)med[k] / 1e9), ratio);
    }
    printf("  cluster speed-up over the hub: %.2fx\n", (double)med[2] / (double)med[1]);
    free(v);

    printf("round trip: %u rounds of %zu bytes each way (request, reply)\n", o->rounds, o->size);
    printf("  %-24s %12s %12s\n", "path", "p50 ns", "p99 ns");
    uint64_t *s = calloc(o->rounds, sizeof(*s));
    /* "cluster, lanes": two workers of a cluster, requests and replies
     * through pm_node_request and pm_node_recv (the lane made after 64
     * frames), awake (the hub spinning, the workers' learnt spin) and
     * parked; "hub parked": the same with lanes off. */
    static const char *const rt[] = {"lane awake",          "cluster, lanes awake", "ring awake",
                                     "lane parked",         "cluster, lanes parked", "hub parked",
                                     "pipe relay",          "pipe direct",           "ring parked"};
    uint64_t p50[9];
    for (int k = 0; k < 9; k++) {
        uint64_t ns;
        bench_lanes = k == 1 || k == 4;
        int rc = k == 0   ? lane_request_reply(o, 1, s)
                 : k == 1 ? mesh_relay_run(1, 1, o->size, o->rounds, &ns, s)
                 : k == 2 ? ring_pingpong(o, UINT32_MAX, s)
                 : k == 3 ? lane_request_reply(o, 0, s)
                 : k == 4 || k == 5 ? mesh_relay_run(0, 1, o->size, o->rounds, &ns, s)
                 : k == 6 ? fd_relay_run(0, 1, o->size, o->rounds, &ns, s)
                 : k == 7 ? fd_pingpong(0, o, s)
                          : ring_pingpong(o, 0, s);
        if (rc < 0) {
            fprintf(stderr, "pm-bench: %s round trip failed\n", rt[k]);
            return 1;
        }
        print_p50_p99(24, rt[k], s, o->rounds);
        p50[k] = percentile(s, o->rounds, 0.50); /* sorted by the print */
    }
    bench_lanes = -1;
    /* The targets, as same-run ratios of the p50s. */
    printf("  cluster, lanes parked: %.2fx the pipe relay, %.2fx a direct pipe, %.2fx the hub\n",
           (double)p50[4] / (double)p50[6], (double)p50[4] / (double)p50[7],
           (double)p50[4] / (double)p50[5]);
    printf("  cluster, lanes awake: %.2fx the ring awake\n", (double)p50[1] / (double)p50[2]);
    free(s);
    /* The set-up and tear-down of one lane, both sides' steps in one
     * process: about 13 system calls for the supervisor's side (memfd,
     * ftruncate, seals, mmap, munmap, 2 eventfds, 2 sendmsg, 3 close) and
     * 4 for each worker's (recvmsg, fstat, mmap, close), then munmap and
     * two closes each at the end. */
    unsigned nset = 2000;
    uint64_t *u = calloc(nset, sizeof(*u));
    if (u == NULL || lane_setup_teardown(nset, u) < 0) {
        fprintf(stderr, "pm-bench: lane set-up failed\n");
        free(u);
        return 1;
    }
    printf("set-up and tear-down of one lane, both sides' steps in one process, %u lanes\n", nset);
    printf("  %-24s %12s %12s\n", "path", "p50 ns", "p99 ns");
    print_p50_p99(24, "lane set-up + tear-down", u, nset);
    free(u);
    /* A restart with a lane in use (lanerestart.c), lanes on and off. */
    unsigned nr = o->rounds / 100 < 2 ? 2 : o->rounds / 100 > 200 ? 200 : o->rounds / 100;
    uint64_t *rv = calloc(nr, sizeof(*rv)), *av = calloc(nr, sizeof(*av));
    if (rv == NULL || av == NULL)
        return 1;
    printf("restart of a worker its peer talks to without pause, %u rounds: kill -> "
           "replacement ready, kill -> the peer's first answer from it\n",
           nr);
    printf("  %-24s %12s %12s\n", "path", "p50 ns", "p99 ns");
    uint64_t rp50[2], ap50[2];
    for (int on = 1; on >= 0; on--) {
        if (lane_restart_run(on, nr, rv, av) < 0) {
            fprintf(stderr, "pm-bench: lane restart failed\n");
            return 1;
        }
        print_p50_p99(24, on ? "lanes: ready" : "lanes off: ready", rv, nr);
        print_p50_p99(24, on ? "lanes: first answer" : "lanes off: first answer", av, nr);
        rp50[on] = percentile(rv, nr, 0.50);
        ap50[on] = percentile(av, nr, 0.50);
    }
    printf("  restart with lanes over lanes off: ready %.2fx, first answer %.2fx\n",
           (double)rp50[1] / (double)rp50[0], (double)ap50[1] / (double)ap50[0]);
    free(rv);
    free(av);
    return 0;
}
