/* SPDX-License-Identifier: MIT */
/* ring.c - pm-bench ring: the shared-memory ring against a pipe and a socketpair. */
#include "bench.h"
#include "channel/ring.h"
#include "channel/shm.h"

#include <inttypes.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/eventfd.h>

#define SPIN_FOREVER UINT32_MAX

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
    ctl_open(ctl);
    pid_t pid = fork_or_die();
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
    close_pair(ctl);
    link_close(&l);
    return rc == 0 ? 0 : -1;
}

static int fd_stream(int kind, const bench_opts *o, stream_result *res)
{
    int fds[2], ctl[2];
    fd_pair(kind, fds);
    ctl_open(ctl);
    pid_t pid = fork_or_die();
    if (pid == 0) {
        ctl_send(ctl[1]);
        if (drain(fds[0], o->frames * o->size) < 0)
            _exit(3);
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
    close_pair(fds);
    close_pair(ctl);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ ping-pong */

/* One frame written and published at once (reserve, copy, commit,
 * publish), as a worker's sends do. */
static int ring_send(pm__ring *r, const void *data, size_t len)
{
    void *p;
    int rc = pm__ring_reserve(r, len, &p);
    if (rc < 0)
        return rc;
    memcpy(p, data, len);
    pm__ring_commit(r, len);
    pm__ring_publish(r);
    return 0;
}

/* B echoes every frame back to A; A records each round trip. */
int ring_pingpong(const bench_opts *o, uint32_t spin_ns, uint64_t *samples)
{
    ring_link l;
    link_open(&l);
    char *buf = calloc(1, o->size);
    pid_t pid = fork_or_die();
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
            if (ring_send(&tx, buf, len) != 0)
                _exit(4);
        }
        _exit(0);
    }
    pm__ring tx, rx;
    link_end(&l, 1, &tx, &rx, spin_ns);
    int ok = 0;
    for (unsigned i = 0; i < o->rounds; i++) {
        uint64_t t0 = pm__now_ns();
        if (ring_send(&tx, buf, o->size) != 0 || pm__ring_wait(&rx, 10000) != 1)
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

int fd_pingpong(int kind, const bench_opts *o, uint64_t *samples)
{
    int ab[2], ba[2];
    fd_pair(kind, ab);
    fd_pair(kind, ba);
    char *buf = calloc(1, o->size);
    pid_t pid = fork_or_die();
    if (pid == 0)
        _exit(echo(ab[0], ba[1], buf, o->size, o->rounds) < 0 ? 3 : 0);
    for (unsigned i = 0; i < o->rounds; i++) {
        uint64_t t0 = pm__now_ns();
        if (write_all(ab[1], buf, o->size) < 0 || read_all(ba[0], buf, o->size) < 0)
            die("ping-pong");
        samples[i] = pm__now_ns() - t0;
    }
    int rc = wait_child(pid);
    free(buf);
    close_pair(ab);
    close_pair(ba);
    return rc == 0 ? 0 : -1;
}

/* ------------------------------------------------------------------ the command */

int cmd_ring(const bench_opts *o)
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
        char ratio[32];
        format_ratio(ratio, sizeof(ratio), med[k], k > 0 ? med[0] : 0, 1);
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
        print_p50_p99(12, rt[k], s, o->rounds);
    }
    free(s);
    return 0;
}
