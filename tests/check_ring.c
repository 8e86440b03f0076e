/* SPDX-License-Identifier: MIT */
/* check_ring.c - the shared-memory frame ring: one process, two processes,
 * and a hostile peer. */
#include "helpers.h"

#include <fcntl.h>
#include <sched.h>
#include <linux/futex.h>
#include <stddef.h>
#include <sys/prctl.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>

#include "channel/channel.h"
#include "channel/ring.h"
#include "os/doorbell.h"
#include "channel/shm.h"
#include "answer.h"
#include "internals.h"

/* A ring region in a MAP_SHARED mapping followed by a PROT_NONE guard page:
 * any read past the data area faults and fails the test. */
typedef struct test_ring {
    void *map;
    size_t map_size;
    void *region;
    uint64_t cap;
    uint32_t max_frame;
    int cons_efd; /* consumer parks here, producer writes it */
    int prod_efd; /* producer parks here, consumer writes it */
    pm__ring prod;
    pm__ring cons;
} test_ring;

static void tr_open(test_ring *t, uint64_t cap, uint32_t max_frame)
{
    memset(t, 0, sizeof(*t));
    size_t page = pm__page_size();
    t->cap = cap;
    t->max_frame = max_frame;
    t->map_size = pm__ring_region_size(cap) + page;
    t->map = mmap(NULL, t->map_size, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(t->map, MAP_FAILED);
    ck_assert_int_eq(mprotect((char *)t->map + t->map_size - page, page, PROT_NONE), 0);
    t->region = t->map;
    ck_assert_int_eq(pm__ring_format(t->region, cap, max_frame), 0);
    t->cons_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    t->prod_efd = eventfd(0, EFD_NONBLOCK | EFD_CLOEXEC);
    ck_assert_int_ge(t->cons_efd, 0);
    ck_assert_int_ge(t->prod_efd, 0);
    ck_assert_int_eq(pm__ring_attach(&t->prod, t->region, cap, max_frame, PM__RING_PRODUCER,
                                     t->cons_efd, t->prod_efd), 0);
    ck_assert_int_eq(pm__ring_attach(&t->cons, t->region, cap, max_frame, PM__RING_CONSUMER,
                                     t->prod_efd, t->cons_efd), 0);
}

static void tr_close(test_ring *t)
{
    munmap(t->map, t->map_size);
    close(t->cons_efd);
    close(t->prod_efd);
}

static int recv_one(pm__ring *r, void *buf, size_t cap, size_t *len)
{
    const void *p;
    int rc = pm__ring_peek(r, &p, len);
    if (rc == 1) {
        ck_assert_uint_le(*len, cap);
        memcpy(buf, p, *len);
        pm__ring_consume(r);
        pm__ring_release(r);
    }
    return rc;
}

START_TEST(test_geometry)
{
    ck_assert_int_eq(pm__ring_check_geometry(4096, 1024), 0);
    ck_assert_int_eq(pm__ring_check_geometry((uint64_t)1 << 30, 65536), 0);
    ck_assert_int_eq(pm__ring_check_geometry(2048, 64), -EINVAL);
    ck_assert_int_eq(pm__ring_check_geometry((uint64_t)1 << 31, 64), -EINVAL);
    ck_assert_int_eq(pm__ring_check_geometry(12288, 64), -EINVAL);
    ck_assert_int_eq(pm__ring_check_geometry(4096, 0), -EINVAL);
    ck_assert_int_eq(pm__ring_check_geometry(4096, 2040), 0);
    ck_assert_int_eq(pm__ring_check_geometry(4096, 2041), -EMSGSIZE);
}
END_TEST

START_TEST(test_empty_and_one)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    const void *p;
    size_t len;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 0);
    ck_assert_int_eq(pm__ring_empty(&t.cons), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "hello", 5), 0);
    ck_assert_int_eq(pm__ring_empty(&t.cons), 0);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(p, "hello", 5), 0);
    /* Peeking again returns the same frame. */
    const void *p2;
    size_t len2;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p2, &len2), 1);
    ck_assert_ptr_eq(p, p2);
    ck_assert_uint_eq(len2, 5);
    pm__ring_consume(&t.cons);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 0);
    /* The geometry pm__ring_format wrote into the shared header. */
    const struct pm__ring_shared *sh = (const void *)t.region;
    ck_assert(sh->magic == PM__RING_MAGIC && sh->version == 1);
    ck_assert_uint_eq(sh->capacity, 4096);
    ck_assert_uint_eq(sh->max_frame, 1024);
    tr_close(&t);
}
END_TEST

/* pm__ring_consumed: the producer learns when the consumer has read (and
 * handed back) a frame it sent, by where that frame ended (node_messaging.c: large
 * messages ahead of the hub). */
START_TEST(test_consumed)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "one", 3), 0);
    uint64_t end1 = pm__ring_head(&t.prod);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "two", 3), 0);
    uint64_t end2 = pm__ring_head(&t.prod);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end1), 0);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end2 + 8), -EINVAL);
    ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end1, 1), 0); /* times out */
    /* Read but not handed back: not yet. */
    const void *p;
    size_t len;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    pm__ring_consume(&t.cons);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end1), 0);
    pm__ring_release(&t.cons);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end1), 1);
    ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end1, 1), 1);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end2), 0);
    char buf[8];
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end2), 1);
    tr_close(&t);
}
END_TEST

/* A consumer that hands back an index it cannot have read (past what was
 * published, or not 8-aligned) poisons the producer's end for good:
 * pm__ring_consumed and pm__ring_wait_consumed answer -EBADMSG from then
 * on, also once the index looks plausible again, never "not yet" (0):
 * node_messaging.c's ahead_room stops a large message on it (-EPROTO)
 * rather than waiting for a hub that cannot be trusted. */
START_TEST(test_consumed_poisoned)
{
    static const uint64_t bad_tail[] = {4096, 3, 1};
    for (size_t i = 0; i < ARRAY_LEN(bad_tail); i++) {
        test_ring t;
        tr_open(&t, 4096, 1024);
        struct pm__ring_shared *sh = t.region;
        ck_assert_int_eq(pm_test_ring_send(&t.prod, "one", 3), 0);
        uint64_t end1 = pm__ring_head(&t.prod);
        ck_assert_int_eq(pm_test_ring_send(&t.prod, "two", 3), 0);
        atomic_store(&sh->tail, bad_tail[i]);
        ck_assert_int_eq(pm__ring_consumed(&t.prod, end1), -EBADMSG);
        atomic_store(&sh->tail, 0);
        ck_assert_int_eq(pm__ring_consumed(&t.prod, end1), -EBADMSG);
        ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end1, 0), -EBADMSG);
        tr_close(&t);
    }
}
END_TEST

/* The producer's checks of its caller and of the consumer's index, each at
 * its edge. A consumer index is read only when the cached one says no
 * (ring.c's fits and consumed_within): an index the consumer has scribbled
 * meanwhile is not looked at while the cache answers, so the exact fit and
 * the exact "consumed" still succeed on a ring whose consumer wrote a
 * misaligned tail, and only the next real look poisons it. */
START_TEST(test_producer_edges)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    char buf[1024] = {0};
    size_t len;
    const void *p;
    void *w;
    /* wait_space's sizes: 1..max_frame, as reserve's. */
    ck_assert_int_eq(pm__ring_wait_space(&t.prod, 0, 0), -EINVAL);
    ck_assert_int_eq(pm__ring_wait_space(&t.prod, 1025, 0), -EMSGSIZE);
    ck_assert_int_eq(pm__ring_wait_space(&t.prod, 1024, 0), 1);
    /* commit with a length of 0 or above the reservation is ignored and
     * the reservation stays open for the right one. */
    ck_assert_int_eq(pm__ring_reserve(&t.prod, 8, &w), 0);
    memcpy(w, "abcd", 4);
    pm__ring_commit(&t.prod, 0);
    pm__ring_commit(&t.prod, 9);
    ck_assert_uint_eq(pm__ring_head(&t.prod), 0);
    pm__ring_commit(&t.prod, 4);
    pm__ring_publish(&t.prod);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    ck_assert_uint_eq(len, 4);
    ck_assert_int_eq(memcmp(p, "abcd", 4), 0);
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 0);
    uint64_t end = pm__ring_head(&t.prod);
    /* wait_consumed: pos up to the head; the head itself is consumed once
     * everything was handed back, one past it is a caller error. */
    ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end, 0), 1);
    ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end + 8, 0), -EINVAL);
    ck_assert_int_eq(pm__ring_wait_consumed(&t.prod, end + 8, 1000), -EINVAL);
    /* The cache (refreshed just above) answers "consumed up to end":
     * the scribbled tail is not read. */
    atomic_store(&sh->tail, 3);
    ck_assert_int_eq(pm__ring_consumed(&t.prod, end), 1);
    tr_close(&t);
    /* 56-byte payloads, 64-byte records: an empty ring takes 64 of them,
     * the last filling it exactly, without a look at the tail. */
    tr_open(&t, 4096, 1024);
    sh = t.region;
    for (int i = 0; i < 63; i++)
        ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 56), 0);
    atomic_store(&sh->tail, 3);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 56), 0);
    /* Full: the next send looks, and the tail poisons the ring. */
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 8), -EBADMSG);
    tr_close(&t);
}
END_TEST

/* The consumer's checks of the producer's index and records, each at its
 * edge, and what a poisoned consumer no longer does. */
START_TEST(test_consumer_edges)
{
    test_ring t;
    const void *p;
    size_t len;
    /* An index that moves backwards (still within a capacity of what was
     * handed back), or is odd, poisons: pm__ring_beyond refreshes it. */
    static const uint64_t bad_head[] = {16, 33};
    for (size_t i = 0; i < ARRAY_LEN(bad_head); i++) {
        tr_open(&t, 4096, 1024);
        struct pm__ring_shared *sh = t.region;
        ck_assert_int_eq(pm_test_ring_send(&t.prod, "one", 3), 0);
        ck_assert_int_eq(pm_test_ring_send(&t.prod, "two", 3), 0);
        ck_assert_int_eq(pm__ring_beyond(&t.cons, 0), 1);
        atomic_store(&sh->head, bad_head[i]);
        ck_assert_msg(pm__ring_beyond(&t.cons, 0) == -EBADMSG, "head %llu accepted",
                      (unsigned long long)bad_head[i]);
        tr_close(&t);
    }
    /* A padding record not followed by a frame in what was published (it
     * reaches past the index): poison, though a frame from an earlier lap
     * is still at the start of the data area. */
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    unsigned char *data = (unsigned char *)t.region + PM__RING_HDR_SIZE;
    uint64_t rec = 5;
    memcpy(data, &rec, 8);
    memcpy(data + 8, "hello", 5);
    atomic_store(&sh->head, 4080);
    atomic_store(&sh->tail, 4080);
    pm__ring cons;
    ck_assert_int_eq(pm__ring_attach(&cons, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1), 0);
    rec = 8 | ((uint64_t)1 << 32);
    memcpy(data + 4080, &rec, 8);
    atomic_store(&sh->head, 4088);
    ck_assert_int_eq(pm__ring_peek(&cons, &p, &len), -EBADMSG);
    tr_close(&t);
    /* Frames seen but not looked at since are there without a look at the
     * producer's index (has_data): a scribbled one poisons only the look
     * that needs it. A poisoned consumer hands nothing back. */
    tr_open(&t, 4096, 1024);
    sh = t.region;
    t.cons.spin_ns = t.cons.spin_budget = 0;
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "one", 3), 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "two", 3), 0);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    pm__ring_consume(&t.cons);
    atomic_store(&sh->head, 3);
    ck_assert_int_eq(pm__ring_wait(&t.cons, 0), 1);
    ck_assert_int_eq(pm__ring_arm(&t.cons), 1);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    ck_assert_int_eq(memcmp(p, "two", 3), 0);
    pm__ring_consume(&t.cons);
    /* Now nothing is left unseen: the look poisons, so the ring is not
     * "empty", and the 16 bytes of "two" are not handed back. */
    ck_assert_uint_eq(atomic_load(&sh->tail), 16);
    ck_assert_int_eq(pm__ring_empty(&t.cons), 0);
    ck_assert_int_eq(pm__ring_release(&t.cons), 0);
    ck_assert_uint_eq(atomic_load(&sh->tail), 16);
    ck_assert_int_eq(pm__ring_arm(&t.cons), -EBADMSG);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 0);
    ck_assert_uint_eq(atomic_load(&sh->tail), 16);
    tr_close(&t);
    /* The same look from pm__ring_arm: it says so and stays disarmed. */
    tr_open(&t, 4096, 1024);
    sh = t.region;
    atomic_store(&sh->head, 3);
    ck_assert_int_eq(pm__ring_arm(&t.cons), -EBADMSG);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 0);
    tr_close(&t);
}
END_TEST

START_TEST(test_full_and_sizes)
{
    test_ring t;
    tr_open(&t, 4096, 2040);
    void *p;
    ck_assert_int_eq(pm__ring_reserve(&t.prod, 0, &p), -EINVAL);
    ck_assert_int_eq(pm__ring_reserve(&t.prod, 2041, &p), -EMSGSIZE);
    /* 56-byte payload -> 64-byte records: exactly 64 fit in 4 KiB. */
    char buf[2048];
    memset(buf, 0xab, sizeof(buf));
    int n = 0;
    while (pm_test_ring_send(&t.prod, buf, 56) == 0)
        n++;
    ck_assert_int_eq(n, 64);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1), -EAGAIN);
    size_t len;
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 56), 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1), -EAGAIN);
    int got = 0;
    while (recv_one(&t.cons, buf, sizeof(buf), &len) == 1)
        got++;
    ck_assert_int_eq(got, 64);
    /* A maximal frame always fits an empty ring, even behind padding. */
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 8), 0);
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    memset(buf, 0x5a, 2040);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 2040), 0);
    memset(buf, 0, sizeof(buf));
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_uint_eq(len, 2040);
    for (size_t i = 0; i < 2040; i++)
        ck_assert_int_eq((unsigned char)buf[i], 0x5a);
    tr_close(&t);
}
END_TEST

START_TEST(test_wrap_padding)
{
    test_ring t;
    tr_open(&t, 4096, 1500);
    uint64_t seed = 42;
    unsigned char out[1500], in[1500];
    uint32_t sent = 0, received = 0;
    /* Random sizes through many wraps, the ring kept partly full so padding
     * records land at every offset. */
    while (received < 20000) {
        size_t len = 1 + pm_test_rand(&seed) % 1500;
        for (size_t i = 0; i < len; i++)
            out[i] = (unsigned char)(sent + i * 7);
        memcpy(out, &sent, len < 4 ? len : 4);
        int rc = pm_test_ring_send(&t.prod, out, len);
        if (rc == 0) {
            sent++;
            continue;
        }
        ck_assert_int_eq(rc, -EAGAIN);
        size_t got;
        ck_assert_int_eq(pm__ring_empty(&t.cons), 0);
        while (recv_one(&t.cons, in, sizeof(in), &got) == 1) {
            /* Plain comparisons, one assertion: each Check assertion is a
             * message to the runner, far too slow per byte. */
            for (size_t i = 0; i < got; i++)
                out[i] = (unsigned char)(received + i * 7);
            memcpy(out, &received, got < 4 ? got : 4);
            if (memcmp(in, out, got) != 0)
                ck_abort_msg("frame %u corrupted or out of order", received);
            received++;
        }
    }
    ck_assert_uint_gt(t.prod.head, 4096 * 100);
    tr_close(&t);
}
END_TEST

START_TEST(test_batching)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    for (uint32_t i = 0; i < 10; i++) {
        void *p;
        ck_assert_int_eq(pm__ring_reserve(&t.prod, 100, &p), 0);
        ck_assert_int_eq(((uintptr_t)p) & 7, 0);
        /* A second reservation while one is open is a caller error. */
        void *q;
        ck_assert_int_eq(pm__ring_reserve(&t.prod, 8, &q), -EINVAL);
        memcpy(p, &i, sizeof(i));
        pm__ring_commit(&t.prod, sizeof(i)); /* shorter than reserved */
    }
    const void *p;
    size_t len;
    /* Nothing is visible before publish. */
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 0);
    ck_assert_int_eq(pm__ring_publish(&t.prod), 0); /* consumer awake: no system call */
    for (uint32_t i = 0; i < 10; i++) {
        ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
        ck_assert_uint_eq(len, 4);
        uint32_t v;
        memcpy(&v, p, 4);
        ck_assert_uint_eq(v, i);
        pm__ring_consume(&t.cons);
    }
    ck_assert_int_eq(pm__ring_release(&t.cons), 0);
    ck_assert_uint_eq(t.prod.wakeups, 0);
    ck_assert_uint_eq(t.cons.wakeups, 0);
    tr_close(&t);
}
END_TEST

START_TEST(test_doorbell)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    /* Armed consumer: the next publish makes exactly one wake-up call. */
    ck_assert_int_eq(pm__ring_arm(&t.cons), 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "x", 1), 0);
    ck_assert_uint_eq(t.prod.wakeups, 1);
    uint64_t v = 0;
    ck_assert_int_eq(read(t.cons_efd, &v, sizeof(v)), 8);
    ck_assert_uint_eq(v, 1);
    pm__ring_disarm(&t.cons);
    /* Arming with data present refuses to sleep. */
    ck_assert_int_eq(pm__ring_arm(&t.cons), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "y", 1), 0);
    ck_assert_uint_eq(t.prod.wakeups, 1);
    /* wait() with data present returns at once; with none it times out. */
    ck_assert_int_eq(pm__ring_wait(&t.cons, 1000), 1);
    size_t len;
    char buf[8];
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    /* A consumer parked in FUTEX_WAIT (flag 2): the publish takes the flag
     * and makes one FUTEX_WAKE, counted as a wake-up like the eventfd's. */
    struct pm__ring_shared *sh = t.region;
    atomic_store(&sh->cons_waiting, 2);
    void *w;
    ck_assert_int_eq(pm__ring_reserve(&t.prod, 1, &w), 0);
    pm__ring_commit(&t.prod, 1);
    ck_assert_int_eq(pm__ring_publish(&t.prod), 1);
    ck_assert_uint_eq(t.prod.wakeups, 2);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 0);
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    uint64_t t0 = pm_test_now_ns();
    ck_assert_int_eq(pm__ring_wait(&t.cons, 50), 0);
    ck_assert_uint_ge(pm_test_now_ns() - t0, 40 * 1000000u);
    ck_assert_uint_ge(t.cons.parks, 1);
    tr_close(&t);
}
END_TEST

START_TEST(test_spin_learn)
{
    /* A spin that paid off covers twice the wait it saw, never above the
     * cap and never below what it had. */
    ck_assert_uint_eq(pm__spin_learn(5000, 100000, 1, 6000), 12000);
    ck_assert_uint_eq(pm__spin_learn(20000, 100000, 1, 6000), 20000);
    ck_assert_uint_eq(pm__spin_learn(5000, 8000, 1, 6000), 8000);
    ck_assert_uint_eq(pm__spin_learn(0, 100000, 1, 10), PM__SPIN_MIN_NS);
    /* One that did not: halved, then nothing. */
    uint32_t b = 8 * PM__SPIN_MIN_NS;
    int n = 0;
    while (b > 0 && n < 32) {
        b = pm__spin_learn(b, 100000, 0, 1000000);
        n++;
    }
    ck_assert_uint_eq(b, 0);
    ck_assert_int_eq(n, 4);
    /* Not spinning: a long sleep keeps it so, a short one tries again. */
    ck_assert_uint_eq(pm__spin_learn(0, 100000, 0, 1000000), 0);
    ck_assert_uint_eq(pm__spin_learn(0, 100000, 0, 4000), 8000 + PM__SPIN_MIN_NS);
    /* A cap of 0 (spinning turned off) is never exceeded. */
    ck_assert_uint_eq(pm__spin_learn(0, 0, 0, 10), 0);
    ck_assert_uint_eq(pm__spin_learn(5000, 0, 1, 10), 0);
}
END_TEST

/* pm__ring_attach: a role that is neither end is refused, and the indices
 * found in the shared header (attaching later: a benchmark, a test, a
 * restarted end) are taken only when a correct pair of ends could have left
 * them; otherwise the ring starts poisoned. One row per condition, the
 * others valid. */
START_TEST(test_attach)
{
    static const struct {
        uint64_t head, tail;
        int ok;
    } rows[] = {
        {0, 0, 1},
        {8, 8, 1},                      /* aligned, bit 3 set */
        {4096, 0, 1},                   /* exactly full */
        {4096 + 8, 0, 0},               /* head more than the capacity ahead */
        {8, 16, 0},                     /* tail past head */
        {0, (uint64_t)0 - 8, 0},        /* tail past head by more than 2^64 - cap */
        {4, 0, 0},                      /* misaligned head */
        {1, 0, 0},                      /* misaligned head, odd */
        {16, 2, 0},                     /* misaligned tail */
    };
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    pm__ring r;
    /* An end starts with the default spin cap and start budget, parks on
     * its own fd, wakes the other's, and in FUTEX_WAIT while allowed. */
    ck_assert_uint_eq(t.cons.spin_ns, PM__RING_DEFAULT_SPIN_NS);
    ck_assert_uint_eq(t.cons.spin_budget, PM__SPIN_START_NS);
    ck_assert_int_eq(t.cons.park_fd, t.cons_efd);
    ck_assert_int_eq(t.cons.wake_fd, t.prod_efd);
    ck_assert_int_eq(t.prod.park_fd, t.prod_efd);
    ck_assert_int_eq(t.cons.futex_ok, 1);
    ck_assert_int_eq(pm__ring_attach(&r, t.region, 4096, 1024, 0, -1, -1), -EINVAL);
    ck_assert_int_eq(pm__ring_attach(&r, t.region, 4096, 1024, 3, -1, -1), -EINVAL);
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        memset((unsigned char *)t.region + PM__RING_HDR_SIZE, 0, 4096);
        atomic_store(&sh->head, rows[i].head);
        atomic_store(&sh->tail, rows[i].tail);
        pm__ring prod, cons;
        int want = rows[i].ok ? 0 : -EBADMSG;
        ck_assert_msg(pm__ring_attach(&prod, t.region, 4096, 1024, PM__RING_PRODUCER, -1, -1) == want &&
                          pm__ring_attach(&cons, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1) == want,
                      "row %zu: attach should return %d", i, want);
        const void *p;
        size_t len;
        if (!rows[i].ok) {
            ck_assert_int_eq(pm__ring_peek(&cons, &p, &len), -EBADMSG);
            ck_assert_int_eq(pm_test_ring_send(&prod, "x", 1), -EBADMSG);
            continue;
        }
        if (rows[i].head - rows[i].tail == 4096) {
            /* Full: the producer starts from the indices it found. */
            ck_assert_int_eq(pm_test_ring_send(&prod, "x", 1), -EAGAIN);
            continue;
        }
        /* Empty (nothing published yet): nothing to read, and what the
         * producer sends next lands where the consumer reads. */
        ck_assert_int_eq(pm__ring_peek(&cons, &p, &len), 0);
        ck_assert_int_eq(pm_test_ring_send(&prod, "abc", 3), 0);
        ck_assert_int_eq(pm__ring_peek(&cons, &p, &len), 1);
        ck_assert_uint_eq(len, 3);
        ck_assert_int_eq(memcmp(p, "abc", 3), 0);
    }
    /* The tail found at attach is the consumer's from then on: one moved
     * below it afterwards is a tail moving backwards. */
    atomic_store(&sh->head, 64);
    atomic_store(&sh->tail, 64);
    ck_assert_int_eq(pm__ring_attach(&r, t.region, 4096, 1024, PM__RING_PRODUCER, -1, -1), 0);
    atomic_store(&sh->tail, 8);
    int rc;
    char buf[1000] = {0};
    while ((rc = pm_test_ring_send(&r, buf, sizeof(buf))) == 0)
        ;
    ck_assert_int_eq(rc, -EBADMSG);
    tr_close(&t);
}
END_TEST

/* The record layout of ring.h, as a producer written from it alone would
 * lay it out: a header u32 length | u32 flags (0 a frame, 1 padding to the
 * end of the data area), the payload padded to 8. Read both ways: the
 * library's producer writes it, the library's consumer accepts it. */
START_TEST(test_layout)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    unsigned char *data = (unsigned char *)t.region + PM__RING_HDR_SIZE;
    /* Written by hand: a frame at 0, then a padding record at 4080 and the
     * frame it is published with at 0 again. */
    uint64_t rec = 5;
    memcpy(data, &rec, 8);
    memcpy(data + 8, "hello", 5);
    atomic_store(&sh->head, 16);
    const void *p;
    size_t len;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    ck_assert_uint_eq(len, 5);
    ck_assert_int_eq(memcmp(p, "hello", 5), 0);
    pm__ring_consume(&t.cons);
    pm__ring_release(&t.cons);
    atomic_store(&sh->head, 4080);
    atomic_store(&sh->tail, 4080);
    pm__ring cons;
    ck_assert_int_eq(pm__ring_attach(&cons, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1), 0);
    rec = 8 | ((uint64_t)1 << 32);
    memcpy(data + 4080, &rec, 8);
    rec = 3;
    memcpy(data, &rec, 8);
    memcpy(data + 8, "abc", 3);
    atomic_store(&sh->head, 4096 + 16);
    ck_assert_int_eq(pm__ring_peek(&cons, &p, &len), 1);
    ck_assert_uint_eq(len, 3);
    ck_assert_int_eq(memcmp(p, "abc", 3), 0);
    ck_assert_ptr_eq(p, data + 8);
    /* Written by the library: the same bytes. */
    pm__ring prod;
    atomic_store(&sh->head, 4080);
    atomic_store(&sh->tail, 4080);
    memset(data, 0, 4096);
    ck_assert_int_eq(pm__ring_attach(&prod, t.region, 4096, 1024, PM__RING_PRODUCER, -1, -1), 0);
    ck_assert_int_eq(pm_test_ring_send(&prod, "abcdefghi", 9), 0); /* 24 bytes: 16 left */
    ck_assert_uint_eq(atomic_load(&sh->head), 4096 + 24);
    memcpy(&rec, data + 4080, 8);
    ck_assert_uint_eq(rec, 8 | ((uint64_t)1 << 32));
    memcpy(&rec, data, 8);
    ck_assert_uint_eq(rec, 9);
    ck_assert_int_eq(memcmp(data + 8, "abcdefghi", 9), 0);
    tr_close(&t);
}
END_TEST

/* Poisoned is for good, also for a frame the consumer peeked and still
 * holds when another call (the hub's pm__ring_beyond and pm__ring_scan)
 * finds the producer's index implausible: it is not handed out again, and
 * a producer that puts the index right afterwards changes nothing. */
START_TEST(test_poison_held_frame)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    const void *p;
    size_t len;
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "abc", 3), 0);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    atomic_store(&sh->head, 3);
    ck_assert_int_eq(pm__ring_beyond(&t.cons, 0), -EBADMSG);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), -EBADMSG);
    atomic_store(&sh->head, 16);
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), -EBADMSG);
    ck_assert_int_eq(pm__ring_beyond(&t.cons, 0), -EBADMSG);
    uint64_t pos = 0;
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, NULL, NULL), -1);
    ck_assert_int_eq(pm__ring_wait(&t.cons, 0), -EBADMSG);
    tr_close(&t);
}
END_TEST

/* The hub's calls (hub_queue.c, port.c): pm__ring_arm_space and
 * pm__ring_arm_beyond leave the wait flag set (1: write my eventfd) only
 * when they return 0, and the other end's next release or publish writes
 * that eventfd once; pm__ring_scan walks the frames past the one held and
 * past *pos, stops where fn says, and reports a record it cannot trust.
 * A wait of 0 ms never blocks. */
static int count_frames(const void *payload, size_t len, void *arg)
{
    int *n = arg;
    (*n)++;
    return len == 7 ? 1 : 0; /* a 7-byte frame stops the scan */
}

START_TEST(test_hub_calls)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    char buf[1024] = {0};
    size_t len;
    uint64_t v;
    ck_assert_int_eq(pm__ring_wait(&t.cons, 0), 0);
    while (pm_test_ring_send(&t.prod, buf, 1000) == 0)
        ;
    ck_assert_int_eq(pm__ring_wait_space(&t.prod, 1000, 0), 0);
    ck_assert_int_eq(pm__ring_arm_space(&t.prod, 1000), 0);
    ck_assert_uint_eq(atomic_load(&sh->prod_waiting), 1);
    /* A release that hands nothing back wakes no one: the wait stays
     * announced for the release that frees space. */
    ck_assert_int_eq(pm__ring_release(&t.cons), 0);
    ck_assert_int_eq(read(t.prod_efd, &v, sizeof(v)), -1);
    ck_assert_int_eq(errno, EAGAIN);
    ck_assert_uint_eq(atomic_load(&sh->prod_waiting), 1);
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(read(t.prod_efd, &v, sizeof(v)), 8);
    ck_assert_uint_eq(v, 1);
    ck_assert_int_eq(pm__ring_arm_space(&t.prod, 1000), 1);
    ck_assert_uint_eq(atomic_load(&sh->prod_waiting), 0);
    while (recv_one(&t.cons, buf, sizeof(buf), &len) == 1)
        ;
    uint64_t pos = pm__ring_head(&t.prod);
    ck_assert_int_eq(pm__ring_beyond(&t.cons, pos), 0);
    ck_assert_int_eq(pm__ring_arm_beyond(&t.cons, pos), 0);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "one", 3), 0);
    ck_assert_int_eq(read(t.cons_efd, &v, sizeof(v)), 8);
    ck_assert_uint_eq(v, 1);
    ck_assert_int_eq(pm__ring_beyond(&t.cons, pos), 1);
    ck_assert_int_eq(pm__ring_arm_beyond(&t.cons, pos), 1);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 0);
    ck_assert_int_eq(pm__ring_beyond(&t.cons, pm__ring_head(&t.prod)), 0);
    /* Scan: "one" is held by a peek, so the scan starts after it. */
    const void *p;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "two", 3), 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "three", 5), 0);
    int n = 0;
    pos = 0;
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, count_frames, &n), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(pos, pm__ring_head(&t.prod));
    /* A pos beyond what was published (stale) is not trusted: the scan
     * starts over after the held frame. */
    pos = pm__ring_head(&t.prod) + 64;
    n = 0;
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, count_frames, &n), 0);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(pos, pm__ring_head(&t.prod));
    /* Again from pos: nothing new; then only what came after it, up to
     * the frame fn stops at (pos stays before it). */
    n = 0;
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, count_frames, &n), 0);
    ck_assert_int_eq(n, 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "four", 4), 0);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, "stop it", 7), 0);
    uint64_t before = pos;
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, count_frames, &n), 1);
    ck_assert_int_eq(n, 2);
    ck_assert_uint_eq(pos, before);
    /* A record it cannot trust: -1. */
    unsigned char *data = (unsigned char *)t.region + PM__RING_HDR_SIZE;
    uint64_t bad = 0;
    pos = pm__ring_head(&t.prod);
    memcpy(data + (pos & 4095), &bad, 8);
    atomic_store(&sh->head, pm__ring_head(&t.prod) + 16);
    ck_assert_int_eq(pm__ring_scan(&t.cons, &pos, count_frames, &n), -1);
    tr_close(&t);
}
END_TEST

/* ---------------------------------------------------------------- corruption */

static void corrupt_case(int which)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    unsigned char *data = (unsigned char *)t.region + PM__RING_HDR_SIZE;
    char buf[64] = "abcdefgh";
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 16), 0); /* 24-byte record at 0 */
    const void *p;
    size_t len;
    switch (which) {
    case 0: /* head moves backwards */
        ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), 1);
        pm__ring_consume(&t.cons);
        atomic_store(&sh->head, 8);
        break;
    case 1: /* head more than the capacity ahead */
        atomic_store(&sh->head, 4096 + 8);
        t.cons.head_cache = 0;
        break;
    case 2: /* misaligned head */
        atomic_store(&sh->head, 27);
        t.cons.head_cache = 0;
        break;
    case 3: /* zero length record */
        *(uint64_t *)data = 0;
        break;
    case 4: /* length over the maximum frame */
        *(uint64_t *)data = 1025;
        break;
    case 5: /* length past the published end */
        *(uint64_t *)data = 17;
        break;
    case 6: /* unknown flags */
        *(uint64_t *)data = 16 | ((uint64_t)4 << 32);
        break;
    case 7: /* padding record at offset 0: no progress */
        *(uint64_t *)data = 4088 | ((uint64_t)1 << 32);
        break;
    case 8: /* padding record that points past the end */
        atomic_store(&sh->head, 0);
        atomic_store(&sh->tail, 0);
        {
            pm__ring c2;
            ck_assert_int_eq(pm__ring_attach(&c2, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1), 0);
            c2.tail = c2.released = 4000;
            c2.head_cache = 4000;
            atomic_store(&sh->head, 4096 + 32);
            *(uint64_t *)(data + 4000) = 200 | ((uint64_t)1 << 32);
            ck_assert_int_eq(pm__ring_peek(&c2, &p, &len), -EBADMSG);
            ck_assert_int_eq(pm__ring_peek(&c2, &p, &len), -EBADMSG);
        }
        tr_close(&t);
        return;
    case 9: /* record longer than the space left before the end */
        atomic_store(&sh->head, 0);
        {
            pm__ring c2;
            ck_assert_int_eq(pm__ring_attach(&c2, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1), 0);
            c2.tail = c2.released = c2.head_cache = 4080;
            atomic_store(&sh->head, 4096 + 64);
            *(uint64_t *)(data + 4080) = 64;
            ck_assert_int_eq(pm__ring_peek(&c2, &p, &len), -EBADMSG);
        }
        tr_close(&t);
        return;
    }
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), -EBADMSG);
    /* Poisoned for good, whatever is repaired afterwards. */
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &len), -EBADMSG);
    ck_assert_int_eq(pm__ring_wait(&t.cons, 10), -EBADMSG);
    tr_close(&t);
}

START_TEST(test_corrupt_consumer_side)
{
    corrupt_case(_i);
}
END_TEST

START_TEST(test_corrupt_producer_side)
{
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    char buf[1024] = {0};
    while (pm_test_ring_send(&t.prod, buf, 1000) == 0)
        ;
    /* The consumer claims to have read more than was ever published. */
    atomic_store(&sh->tail, t.prod.published + 8);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1000), -EBADMSG);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1), -EBADMSG);
    tr_close(&t);

    tr_open(&t, 4096, 1024);
    sh = t.region;
    while (pm_test_ring_send(&t.prod, buf, 1000) == 0)
        ;
    size_t len;
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1000), 0);
    /* ... and now moves its index backwards. */
    atomic_store(&sh->tail, 0);
    while (pm_test_ring_send(&t.prod, buf, 8) == 0)
        ;
    ck_assert_int_eq(pm_test_ring_send(&t.prod, buf, 1000), -EBADMSG);
    tr_close(&t);
}
END_TEST

START_TEST(test_shm_sealed)
{
    int fd;
    void *map;
    size_t size = pm__ring_region_size(4096);
    ck_assert_int_eq(pm__shm_create("pm-test", size, &fd, &map), 0);
    ck_assert_int_ne(fcntl(fd, F_GETFD) & FD_CLOEXEC, 0);
    /* The other end cannot shrink or grow the object: no SIGBUS for us. */
    ck_assert_int_eq(ftruncate(fd, 0), -1);
    ck_assert_int_eq(errno, EPERM);
    ck_assert_int_eq(ftruncate(fd, (off_t)size * 2), -1);
    ck_assert_int_eq(fcntl(fd, F_ADD_SEALS, F_SEAL_WRITE), -1);
    void *map2;
    ck_assert_int_eq(pm__shm_map(fd, size, &map2), 0);
    ck_assert_int_eq(pm__shm_map(fd, size * 2, &map2 /* too big */), -EINVAL);
    ck_assert_int_eq(pm__shm_create("pm-test", 100, &fd, &map), -EINVAL);
    int plain = memfd_create("unsealed", MFD_CLOEXEC);
    ck_assert_int_ge(plain, 0);
    ck_assert_int_eq(ftruncate(plain, (off_t)size), 0);
    ck_assert_int_eq(pm__shm_map(plain, size, &map2), -EPERM);
    /* The whole object: only between its bounds, only sealed, and its
     * size said. */
    size_t got = 0;
    void *map3 = NULL;
    ck_assert_int_eq(pm__shm_map_whole(fd, size, size, &map3, &got), 0);
    ck_assert_ptr_nonnull(map3);
    ck_assert_uint_eq(got, size);
    ck_assert_int_eq(pm__shm_map_whole(fd, size + 1, size * 2, &map3, &got), -EINVAL);
    ck_assert_int_eq(pm__shm_map_whole(fd, 1, size - 1, &map3, &got), -EINVAL);
    ck_assert_int_eq(pm__shm_map_whole(plain, 1, size, &map3, &got), -EPERM);
}
END_TEST

/* Pages of [off, off + len) of a mapping that are in memory. mincore on a
 * shared mapping of a memfd reports the object's pages, whichever process
 * touched them. */
static size_t resident_pages(void *map, size_t off, size_t len)
{
    size_t page = pm__page_size(), n = len / page, count = 0;
    unsigned char *vec = malloc(n);
    ck_assert_ptr_nonnull(vec);
    ck_assert_int_eq(mincore((char *)map + off, len, vec), 0);
    for (size_t i = 0; i < n; i++)
        count += vec[i] & 1;
    free(vec);
    return count;
}

/* Memory at rest (doc/design.md, "Life of a frame"): a worker's rings cost
 * memory in proportion to what was written. A new channel has no data page of
 * either ring in memory (nothing formats, clears or touches them: the
 * memfd's pages are allocated on first write); frames written fault in
 * only the pages they were written to. */
START_TEST(test_untouched_ring_pages)
{
    pm__channel l;
    const uint64_t cap = (uint64_t)1 << 20;
    size_t page = pm__page_size();
    const pm__channel_params p = {.ring_cap = cap, .supervisor_pid = getpid(), .heartbeat_ms = 1000,
                                  .max_message = PM_MAX_PAYLOAD};
    ck_assert_int_eq(pm__channel_create(&l, 0, 1, &p), 0);
    size_t down = PM__CTL_SIZE + PM__RING_HDR_SIZE;
    size_t up = PM__CTL_SIZE + pm__ring_region_size(cap) + PM__RING_HDR_SIZE;
    /* Each ring's first data page, written at creation (channel.c: every
     * handshake writes it within its first frames), and no other. */
    ck_assert_msg(resident_pages(l.map, down, cap) == 1 && resident_pages(l.map, down, page) == 1,
                  "a new down ring has %zu data pages in memory, wants its first only",
                  resident_pages(l.map, down, cap));
    ck_assert_msg(resident_pages(l.map, up, cap) == 1 && resident_pages(l.map, up, page) == 1,
                  "a new up ring has %zu data pages in memory, wants its first only",
                  resident_pages(l.map, up, cap));
    /* The whole channel: the control block's and the two ring headers' pages
     * at most, and those two. */
    size_t meta = PM__CTL_SIZE / page + 2 * (PM__RING_HDR_SIZE / page) + 2;
    ck_assert_msg(resident_pages(l.map, 0, l.map_size) <= meta,
                  "a new link has %zu pages in memory, wants at most %zu",
                  resident_pages(l.map, 0, l.map_size), meta);
    /* 3 pages' worth of frames into the down ring: those pages (one more
     * when a frame straddles a page), nothing in the up ring. */
    unsigned char buf[1000];
    memset(buf, 0x5a, sizeof(buf));
    size_t written = 0;
    while (written < 3 * page) {
        ck_assert_int_eq(pm_test_ring_send(&l.tx, buf, sizeof(buf)), 0);
        written += PM__RING_REC_HDR + sizeof(buf);
    }
    size_t want = (written + page - 1) / page;
    size_t got = resident_pages(l.map, down, cap);
    ck_assert_msg(got >= want - 1 && got <= want, "%zu bytes written: %zu data pages in memory, wants %zu",
                  written, got, want);
    ck_assert_uint_eq(resident_pages(l.map, up, cap), 1);
    pm__channel_close(&l);
}
END_TEST

/* ---------------------------------------------------------------- two processes */

#define STREAM_MAX 2000

static void fill(unsigned char *b, size_t len, uint64_t seq)
{
    /* Sequence number first, then a pseudo-random pattern derived from it,
     * a word at a time: any lost, duplicated, reordered or torn frame fails
     * the comparison. */
    uint64_t s = seq * 0x9E3779B97F4A7C15ULL + 1;
    memcpy(b, &seq, len < 8 ? len : 8);
    for (size_t i = 8; i < len; i += 8) {
        uint64_t w = pm_test_rand(&s);
        memcpy(b + i, &w, len - i < 8 ? len - i : 8);
    }
}

static void maybe_stall(uint64_t *seed)
{
    /* About once every 20k frames, stop for up to 300 us: long enough for
     * the other side to give up spinning and park. */
    if (pm_test_rand(seed) % 20000 == 0)
        usleep((useconds_t)(pm_test_rand(seed) % 300));
}

START_TEST(test_two_process_stream)
{
    const uint64_t frames = pm_test_sanitized() ? 1000000 : 4000000;
    test_ring t;
    tr_open(&t, 1u << 16, STREAM_MAX);
    t.cons.spin_ns = 2000;
    t.prod.spin_ns = 2000;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint64_t seed = 7, other = 1234;
        for (uint64_t seq = 0; seq < frames; seq++) {
            size_t len = 1 + pm_test_rand(&seed) % STREAM_MAX;
            void *p;
            int rc;
            while ((rc = pm__ring_reserve(&t.prod, len, &p)) == -EAGAIN)
                if (pm__ring_wait_space(&t.prod, len, 5000) <= 0)
                    _exit(3);
            if (rc < 0)
                _exit(2);
            fill(p, len, seq);
            pm__ring_commit(&t.prod, len);
            /* Publish in batches of random size. */
            if (pm_test_rand(&other) % 8 == 0)
                pm__ring_publish(&t.prod);
            maybe_stall(&other);
        }
        pm__ring_publish(&t.prod);
        _exit(0);
    }
    uint64_t seed = 7, stall_seed = 99;
    unsigned char *want = malloc(STREAM_MAX);
    for (uint64_t seq = 0; seq < frames; seq++) {
        size_t len = 1 + pm_test_rand(&seed) % STREAM_MAX;
        /* Plain ifs in the hot loop: a Check assertion per frame would cost
         * more than the ring. */
        int rc = pm__ring_wait(&t.cons, 10000);
        if (rc != 1)
            ck_abort_msg("frame %llu: wait returned %d", (unsigned long long)seq, rc);
        const void *p;
        size_t got;
        if (pm__ring_peek(&t.cons, &p, &got) != 1 || got != len)
            ck_abort_msg("frame %llu: bad peek or length", (unsigned long long)seq);
        fill(want, len, seq);
        if (memcmp(p, want, len) != 0)
            ck_abort_msg("frame %llu corrupted or reordered", (unsigned long long)seq);
        pm__ring_consume(&t.cons);
        if (seq % 32 == 0)
            pm__ring_release(&t.cons);
        maybe_stall(&stall_seed);
    }
    pm__ring_release(&t.cons);
    const void *p;
    size_t got;
    ck_assert_int_eq(pm__ring_peek(&t.cons, &p, &got), 0);
    int status = pm_test_reap(pid, 10000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "producer status %d", status);
    free(want);
    tr_close(&t);
}
END_TEST

START_TEST(test_spin_gate)
{
    /* A spin needs a CPU beside the one doing the work: never on one CPU,
     * on two only with nobody else spinning. */
    ck_assert_int_eq(pm__spin_gate(1, 0), 0);
    ck_assert_int_eq(pm__spin_gate(2, 0), 1);
    ck_assert_int_eq(pm__spin_gate(2, 1), 0);
    ck_assert_int_eq(pm__spin_gate(4, 2), 1);
    ck_assert_int_eq(pm__spin_gate(4, 3), 0);
    ck_assert_int_eq(pm__spin_gate(0, 0), 0);
    ck_assert_uint_ge(pm__spin_cpus(), 1);
    ck_assert_uint_eq(pm__spin_cpus(), pm__spin_cpus());
    /* A gap between two clock reads of a spin above the bound: preempted. */
    ck_assert_int_eq(pm__spin_preempted(1000, 1000 + PM__SPIN_PREEMPT_NS), 0);
    ck_assert_int_eq(pm__spin_preempted(1000, 1001 + PM__SPIN_PREEMPT_NS), 1);
    /* The producer sees whether its consumer announced a sleep. */
    test_ring t;
    tr_open(&t, 4096, 1024);
    ck_assert_int_eq(pm__ring_consumer_parked(&t.prod), 0);
    ck_assert_int_eq(pm__ring_arm(&t.cons), 0);
    ck_assert_int_eq(pm__ring_consumer_parked(&t.prod), 1);
    pm__ring_disarm(&t.cons);
    ck_assert_int_eq(pm__ring_consumer_parked(&t.prod), 0);
    /* A gated wait parks at once and leaves the learnt budget alone. */
    t.cons.spin_ns = 1000000000u;
    t.cons.spin_budget = 1000000000u;
    ck_assert_int_eq(pm__ring_wait_gated(&t.cons, 20, 0), 0);
    ck_assert_uint_ge(t.cons.parks, 1);
    ck_assert_uint_eq(t.cons.spin_budget, 1000000000u);
    ck_assert_int_eq(pm__ring_consumer_parked(&t.prod), 0);
    tr_close(&t);
}
END_TEST

/* Leaves the stack below the caller's frame all ones: what an uninitialized
 * local of the next call would find. */
static __attribute__((noinline)) void dirty_stack(void)
{
    volatile unsigned char junk[16384];
    memset((void *)junk, 0xff, sizeof(junk));
}

/* pm__spin_cpus counts the CPUs this process may run on (its affinity
 * mask), not the ones online: a process held to one CPU has no second one
 * for a spin. Asked first in a child held to one CPU (the count is cached
 * per process). */
START_TEST(test_spin_cpus_mask)
{
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &set))
        cpu++;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        CPU_ZERO(&set);
        CPU_SET(cpu, &set);
        if (sched_setaffinity(0, sizeof(set), &set) != 0)
            _exit(100);
        _exit((int)pm__spin_cpus());
    }
    int status = pm_test_reap(pid, 30000);
    ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 1,
                  "held to one CPU: %d CPUs (status %d)", WIFEXITED(status) ? WEXITSTATUS(status) : -1, status);
    /* sched_getaffinity refused (a seccomp policy): the online count, never
     * a count of the mask it did not fill (the stack below is all ones). */
    pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        if (pm_test_answer(SYS_sched_getaffinity, PM_ANSWER_ANY, 0, EPERM) != 0)
            _exit(0); /* no seccomp here: nothing to check */
        long online = sysconf(_SC_NPROCESSORS_ONLN);
        dirty_stack();
        _exit(pm__spin_cpus() == (online > 0 ? (unsigned)online : 1u) ? 0 : 1);
    }
    status = pm_test_reap(pid, 30000);
    ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "sched_getaffinity refused: not the online count (status %d)", status);
}
END_TEST

/* The 'S' of /proc/pid/stat: the process sleeps in a system call. */
static int proc_sleeping(pid_t pid)
{
    char path[64], buf[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    size_t n = pm_test_read_file(path, buf, sizeof(buf));
    const char *e = n > 0 ? strrchr(buf, ')') : NULL;
    return e != NULL && e[1] == ' ' && e[2] == 'S';
}

/* What a wait learns about spinning (ring.c's spin_then_park): a spin that
 * kept its CPU and was not met (the frame came after the park) halves the
 * budget; one that lost its CPU forgets it (0) and nothing is learnt from
 * the wait; a gated wait (no spin allowed) learns nothing, and nor does a
 * wait that ends in -EBADMSG. A child consumer with a 4 us budget waits,
 * this process answers once it has announced its park (row 1: once it
 * sleeps in FUTEX_WAIT, with an impossible index). Five rounds a row: a
 * budget kept at 4000 in a round that learns (or halved in one that must
 * not) is the failure; 0 (preempted) is always allowed where a spin ran. */
START_TEST(test_wait_learns)
{
    enum { ROUNDS = 5, B = 4000 };
    const int gated = _i == 2, hostile = _i == 1;
    struct shared {
        _Atomic int round;
        int rc[ROUNDS];
        uint32_t budget[ROUNDS];
    } *sm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(sm, MAP_FAILED);
    test_ring t[ROUNDS];
    for (int i = 0; i < ROUNDS; i++)
        tr_open(&t[i], 4096, 64);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int i = 0; i < ROUNDS; i++) {
            t[i].cons.spin_ns = 1000000;
            t[i].cons.spin_budget = B;
            sm->rc[i] = pm__ring_wait_gated(&t[i].cons, 20000, !gated);
            sm->budget[i] = t[i].cons.spin_budget;
            atomic_store(&sm->round, i + 1);
        }
        _exit(0);
    }
    for (int i = 0; i < ROUNDS; i++) {
        struct pm__ring_shared *sh = t[i].region;
        uint64_t end = pm_test_ms() + 20000;
        while ((atomic_load(&sh->cons_waiting) == 0 || (hostile && !proc_sleeping(pid))) && pm_test_ms() < end)
            usleep(100);
        ck_assert_msg(atomic_load(&sh->cons_waiting) != 0, "round %d: the child never parked", i);
        if (hostile) {
            atomic_store(&sh->head, 3);
            atomic_store(&sh->cons_waiting, 0);
            syscall(SYS_futex, (uint32_t *)&sh->cons_waiting, FUTEX_WAKE, 1, NULL, NULL, 0);
        } else {
            ck_assert_int_eq(pm_test_ring_send(&t[i].prod, "x", 1), 0);
        }
        while (atomic_load(&sm->round) <= i && pm_test_ms() < end)
            usleep(100);
    }
    int status = pm_test_reap(pid, 30000);
    ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    for (int i = 0; i < ROUNDS; i++) {
        ck_assert_msg(sm->rc[i] == (hostile ? -EBADMSG : 1), "row %d round %d: wait returned %d", _i, i, sm->rc[i]);
        uint32_t b = sm->budget[i];
        if (gated)
            ck_assert_msg(b == B, "gated round %d: budget %u, wants %u kept", i, b, B);
        else if (hostile)
            ck_assert_msg(b == B || b == 0, "round %d: budget %u after -EBADMSG, wants %u (or 0)", i, b, B);
        else
            ck_assert_msg(b == B / 2 || b == 0, "round %d: budget %u, wants %u (or 0)", i, b, B / 2);
    }
    for (int i = 0; i < ROUNDS; i++)
        tr_close(&t[i]);
    munmap(sm, 4096);
}
END_TEST

/* A gated wait (pm__ring_wait_gated, may_spin 0) does not spin at all, so
 * it learns nothing even when the frame comes right after its first check
 * (where a spin would have met it): a child publishes a frame whenever the
 * ring is empty, this process consumes with gated waits, many times, and
 * the budget of 0 it started with stays 0 (the quick-park probe of a wait
 * allowed to spin would raise it). */
START_TEST(test_gated_no_spin)
{
    test_ring t;
    tr_open(&t, 4096, 64);
    struct pm__ring_shared *sh = t.region;
    t.cons.spin_ns = 1000000;
    t.cons.spin_budget = 0;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (;;)
            if (atomic_load(&sh->tail) == t.prod.head && pm_test_ring_send(&t.prod, "x", 1) != 0)
                _exit(2);
    }
    for (int i = 0; i < 20000; i++) {
        if (pm__ring_wait_gated(&t.cons, 10000, 0) != 1)
            ck_abort_msg("round %d: no frame", i);
        char buf[8];
        size_t len;
        while (recv_one(&t.cons, buf, sizeof(buf), &len) == 1)
            ;
        if (t.cons.spin_budget != 0)
            ck_abort_msg("round %d: a gated wait learnt a budget of %u", i, t.cons.spin_budget);
    }
    kill(pid, SIGKILL);
    pm_test_reap(pid, 5000);
    tr_close(&t);
}
END_TEST

/* A spin that keeps its CPU to the end and is not met keeps its budget
 * when the wait then times out (nothing is learnt from a timeout); one that
 * loses its CPU mid-spin forgets it. Kept: a 20 us spin, tried until one
 * round was not preempted (on a busy machine some are). Lost: this process
 * and a busy child held to one CPU, a spin of up to 4 s that the scheduler
 * cuts within its first time slices. */
START_TEST(test_spin_preempted)
{
    test_ring t;
    tr_open(&t, 4096, 64);
    int kept = 0;
    for (int i = 0; i < 200 && !kept; i++) {
        t.cons.spin_ns = t.cons.spin_budget = 20000;
        ck_assert_int_eq(pm__ring_wait(&t.cons, 1), 0);
        kept = t.cons.spin_budget == 20000;
    }
    ck_assert_msg(kept, "no 20 us spin in 200 kept its budget");
    cpu_set_t set, all;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &all))
        cpu++;
    CPU_ZERO(&set);
    CPU_SET(cpu, &set);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(set), &set), 0);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        for (;;)
            ;
    t.cons.spin_ns = t.cons.spin_budget = 4000000000u;
    ck_assert_int_eq(pm__ring_wait(&t.cons, 1), 0);
    kill(pid, SIGKILL);
    pm_test_reap(pid, 5000);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(all), &all), 0);
    ck_assert_uint_eq(t.cons.spin_budget, 0);
    tr_close(&t);
}
END_TEST

START_TEST(test_two_process_pingpong_parked)
{
    /* Round trips with spinning turned off: every hand-off parks and every
     * publish must wake the other side; a lost wake-up hangs and times out.
     * _i 0: the ends park in FUTEX_WAIT; 1: as where futexes are refused,
     * on their eventfds; 2: in FUTEX_WAIT with a large spin budget that
     * the spin gate refuses (pm__ring_wait_gated), as a worker parks
     * while its hub is awake. */
    test_ring a, b;
    tr_open(&a, 4096, 64);
    tr_open(&b, 4096, 64);
    a.cons.spin_ns = b.cons.spin_ns = _i == 2 ? 1000000000u : 0;
    a.cons.spin_budget = b.cons.spin_budget = _i == 2 ? 1000000000u : 0;
    a.cons.futex_ok = b.cons.futex_ok = _i != 1;
    int gated = _i == 2;
    const int rounds = 20000;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        for (int i = 0; i < rounds; i++) {
            if (pm__ring_wait_gated(&a.cons, 5000, !gated) != 1)
                _exit(3);
            const void *p;
            size_t len;
            uint32_t v;
            if (pm__ring_peek(&a.cons, &p, &len) != 1 || len != 4)
                _exit(4);
            memcpy(&v, p, 4);
            pm__ring_consume(&a.cons);
            pm__ring_release(&a.cons);
            v++;
            if (pm_test_ring_send(&b.prod, &v, 4) != 0)
                _exit(5);
        }
        _exit(0);
    }
    for (uint32_t i = 0; i < (uint32_t)rounds; i++) {
        const void *p;
        size_t len;
        uint32_t v = 0;
        if (pm_test_ring_send(&a.prod, &i, 4) != 0 || pm__ring_wait_gated(&b.cons, 5000, !gated) != 1 ||
            pm__ring_peek(&b.cons, &p, &len) != 1)
            ck_abort_msg("round %u: lost hand-off", i);
        memcpy(&v, p, 4);
        if (v != i + 1)
            ck_abort_msg("round %u: got %u", i, v);
        pm__ring_consume(&b.cons);
        pm__ring_release(&b.cons);
    }
    ck_assert_uint_gt(b.cons.parks, 0);
    int status = pm_test_reap(pid, 10000);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    tr_close(&a);
    tr_close(&b);
}
END_TEST

/* The wait flags hold the values design.md and ring.h give them, so that a
 * waker written from the layout alone wakes the right way: 1 "write my
 * eventfd" (an event loop's pm__ring_arm, or where futexes are refused), 2
 * "I sleep in FUTEX_WAIT on this flag". A consumer process parks in
 * FUTEX_WAIT; the flag it shows is 2, and this process wakes it with
 * FUTEX_WAKE alone, as the layout says, with no eventfd written. */
START_TEST(test_wait_flag_values)
{
    test_ring t;
    tr_open(&t, 4096, 64);
    struct pm__ring_shared *sh = t.region;
    ck_assert_int_eq(pm__ring_arm(&t.cons), 0);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 1);
    pm__ring_disarm(&t.cons);
    ck_assert_uint_eq(atomic_load(&sh->cons_waiting), 0);
    t.cons.spin_ns = t.cons.spin_budget = 0;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(pm__ring_wait(&t.cons, 60000) == 1 ? 0 : 1);
    uint64_t end = pm_test_now_ns() + 30000000000ull;
    uint32_t flag;
    while ((flag = atomic_load(&sh->cons_waiting)) == 0 && pm_test_now_ns() < end)
        usleep(1000);
    ck_assert_uint_eq(flag, 2);
    /* A producer written from the layout: a record, the index, then take
     * the flag and FUTEX_WAKE. */
    uint64_t rec = 1;
    memcpy((unsigned char *)t.region + PM__RING_HDR_SIZE, &rec, 8);
    atomic_store(&sh->head, 16);
    ck_assert_uint_eq(atomic_exchange(&sh->cons_waiting, 0), 2);
    syscall(SYS_futex, (uint32_t *)&sh->cons_waiting, FUTEX_WAKE, 1, NULL, NULL, 0);
    int status = pm_test_reap(pid, 30000);
    ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the parked consumer was not woken by FUTEX_WAKE (status %d)", status);
    tr_close(&t);
}
END_TEST

/* fd 0 is an fd like any other (a daemon's stdin closed and reused):
 * an end whose eventfds are fd 0 wakes the other end through it and parks
 * on it, not as if it had none (spinning, -1). */
START_TEST(test_fd_zero)
{
    test_ring t;
    tr_open(&t, 4096, 64);
    ck_assert_int_eq(dup2(t.cons_efd, 0), 0);
    ck_assert_int_eq(pm__ring_attach(&t.prod, t.region, 4096, 64, PM__RING_PRODUCER, 0, t.prod_efd), 0);
    ck_assert_int_eq(pm__ring_attach(&t.cons, t.region, 4096, 64, PM__RING_CONSUMER, t.prod_efd, 0), 0);
    ck_assert_int_eq(pm__ring_arm(&t.cons), 0);
    void *w;
    ck_assert_int_eq(pm__ring_reserve(&t.prod, 1, &w), 0);
    pm__ring_commit(&t.prod, 1);
    ck_assert_int_eq(pm__ring_publish(&t.prod), 1);
    ck_assert_uint_eq(t.prod.wakeups, 1);
    uint64_t v = 0;
    ck_assert_int_eq(read(0, &v, sizeof(v)), 8);
    ck_assert_uint_eq(v, 1);
    pm__ring_disarm(&t.cons);
    char buf[8];
    size_t len;
    ck_assert_int_eq(recv_one(&t.cons, buf, sizeof(buf), &len), 1);
    /* Parks on fd 0 (poll, as where futexes are refused), counted. */
    t.cons.spin_ns = t.cons.spin_budget = 0;
    t.cons.futex_ok = 0;
    ck_assert_int_eq(pm__ring_wait(&t.cons, 20), 0);
    ck_assert_uint_ge(t.cons.parks, 1);
    tr_close(&t);
}
END_TEST

/* A park on a doorbell whose writing end is closed (a lane's peer that
 * closed its end of ours, alive), where futexes are refused: the doorbell
 * reads end of file for ever, so each poll would return at once and the
 * wait spun for its whole slice (design.md, Direct lanes, Known gaps (3)).
 * Once it has read end of file the end sleeps 1 ms at a time instead: a
 * 200 ms wait parks at most about 200 times (it spun tens of thousands). */
START_TEST(test_park_hung_doorbell)
{
    test_ring t;
    tr_open(&t, 4096, 64);
    int bell[2];
    ck_assert_int_eq(pm__doorbell_pair(&bell[0], &bell[1]), 0);
    close(bell[1]);
    ck_assert_int_eq(pm__ring_attach(&t.cons, t.region, 4096, 64, PM__RING_CONSUMER, -1, bell[0]), 0);
    t.cons.spin_ns = t.cons.spin_budget = 0;
    t.cons.futex_ok = 0;
    ck_assert_int_eq(pm__ring_wait(&t.cons, 200), 0);
    ck_assert_int_eq(t.cons.park_hung, 1);
    ck_assert_msg(t.cons.parks <= 260, "%llu parks in 200 ms", (unsigned long long)t.cons.parks);
    ck_assert_uint_ge(t.cons.parks, 2);
    close(bell[0]);
    tr_close(&t);
}
END_TEST

/* How a park takes each answer of its system call, made by a seccomp
 * filter in a child (ring.c's park_futex and park): a wake-up (0), the flag
 * already changed (EAGAIN), a timeout or an interruption leave futex
 * parking on, and the wait goes on checking (and parking) until its
 * deadline; a refusal (ENOSYS, EPERM: a kernel or a seccomp policy without
 * futexes) turns it off for this end, which parks on its eventfd from then
 * on. For the eventfd's poll: nothing ready (0) or an interruption go on
 * until the deadline, with the doorbell's count left alone; any other
 * failure is the wait's answer. errno holds a stale EBADF on entry: no
 * answer may be taken from it. */
static const struct {
    int poll;    /* 0: the filter answers FUTEX_WAIT; 1: poll and ppoll */
    int err;     /* the answer: 0 (the call "succeeds") or this errno */
    int rc;      /* what the 100 ms wait returns */
    int futex_ok; /* futex parking afterwards */
} park_rows[] = {
    {0, 0, 0, 1},      {0, EAGAIN, 0, 1}, {0, ETIMEDOUT, 0, 1}, {0, EINTR, 0, 1},
    {0, ENOSYS, 0, 0}, {0, EPERM, 0, 0},  {1, 0, 0, 0},         {1, EINTR, 0, 0},
    {1, ENOMEM, -ENOMEM, 0},
};

static int refuse_calls(int poll_calls, int err)
{
    /* FUTEX_WAIT (op 0) on a shared flag: the ring's park; the C library's
     * own futexes are private ones (FUTEX_PRIVATE_FLAG set), let through. */
    if (!poll_calls)
        return pm_test_answer(SYS_futex, 1, FUTEX_WAIT, err);
#ifdef SYS_poll
    int rc = pm_test_answer(SYS_poll, PM_ANSWER_ANY, 0, err);
    if (rc < 0)
        return rc;
#endif
    return pm_test_answer(SYS_ppoll, PM_ANSWER_ANY, 0, err);
}

START_TEST(test_park_answers)
{
    struct result {
        int installed, rc, futex_ok, count_left;
        uint64_t parks;
    } *res = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(res, MAP_FAILED);
    test_ring t;
    tr_open(&t, 4096, 64);
    t.cons.spin_ns = t.cons.spin_budget = 0;
    t.cons.futex_ok = !park_rows[_i].poll;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        res->installed = refuse_calls(park_rows[_i].poll, park_rows[_i].err);
        if (res->installed < 0)
            _exit(0);
        uint64_t one = 1, v;
        if (park_rows[_i].poll && write(t.cons_efd, &one, 8) != 8) /* a pending doorbell */
            _exit(2);
        errno = EBADF;
        res->rc = pm__ring_wait(&t.cons, 100);
        res->futex_ok = t.cons.futex_ok;
        res->parks = t.cons.parks;
        res->count_left = read(t.cons_efd, &v, 8) == 8;
        _exit(0);
    }
    int status = pm_test_reap(pid, 30000);
    ck_assert_msg(status >= 0 && WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %d", status);
    if (res->installed < 0) {
        fprintf(stderr, "test_park_answers: no seccomp filter here (%s), not checked\n", strerror(-res->installed));
        return;
    }
    ck_assert_msg(res->rc == park_rows[_i].rc, "row %d: wait returned %d, wants %d", _i, res->rc,
                  park_rows[_i].rc);
    ck_assert_msg(res->futex_ok == park_rows[_i].futex_ok, "row %d: futex_ok %d", _i, res->futex_ok);
    /* A park that returned without a frame is followed by another until
     * the deadline: 100 ms of calls the filter answers at once. */
    if (park_rows[_i].rc == 0)
        ck_assert_msg(res->parks >= 2, "row %d: %llu parks", _i, (unsigned long long)res->parks);
    if (park_rows[_i].poll)
        ck_assert_msg(res->count_left, "row %d: the doorbell's count was drained", _i);
    munmap(res, 4096);
    tr_close(&t);
}
END_TEST

/* ---------------------------------------------------------------- hostile peer */

START_TEST(test_hostile_producer)
{
    /* A second process writes random garbage into the shared header and the
     * data while this one consumes. Every call must return a frame, empty or
     * -EBADMSG; nothing may read outside the mapping (the guard page would
     * fault), hang or crash. After a poison the consumer re-attaches and goes
     * on, to cover as many garbage patterns as possible in the time. */
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    unsigned char *data = (unsigned char *)t.region + PM__RING_HDR_SIZE;
    /* Set by this process when the garbage produced no frame in the first
     * window: the writer then only publishes one plausible record at a time
     * (see below). Shared, outside the ring. */
    volatile uint32_t *calm = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne((void *)calm, MAP_FAILED);
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint64_t seed = (uint64_t)getpid() * 31 + 1;
        for (;;) {
            uint64_t r = pm_test_rand(&seed);
            if (*calm) {
                /* A record only into an empty ring, so the consumer finds
                 * it whenever it runs. */
                uint64_t h = atomic_load(&sh->head);
                if (h == atomic_load(&sh->tail) && (h & 7) == 0) {
                    *(volatile uint64_t *)(data + (h & 4095)) = 8;
                    atomic_store(&sh->head, h + 16);
                }
                continue;
            }
            switch (r % 16) {
            case 0: atomic_store(&sh->head, pm_test_rand(&seed)); break;
            case 1: atomic_store(&sh->head, atomic_load(&sh->head) + (pm_test_rand(&seed) % 64) * 8); break;
            case 2: atomic_store(&sh->tail, pm_test_rand(&seed)); break;
            case 3: sh->capacity = pm_test_rand(&seed); sh->max_frame = (uint32_t)r; break;
            case 4: {
                uint64_t off = (pm_test_rand(&seed) % 512) * 8;
                *(volatile uint64_t *)(data + off) = pm_test_rand(&seed) % 4096 | ((pm_test_rand(&seed) % 3) << 32);
                break;
            }
            case 5: data[pm_test_rand(&seed) % 4096] = (unsigned char)r; break;
            case 6: atomic_store(&sh->cons_waiting, (uint32_t)r); break;
            default: {
                /* Sometimes behave: a plausible record and head. */
                uint64_t h = atomic_load(&sh->head) & ~(uint64_t)7;
                *(volatile uint64_t *)(data + (h & 4095)) = 8;
                atomic_store(&sh->head, h + 16);
            }
            }
        }
    }
    /* At least 1.5 s of garbage; longer (up to 30 s) until both a frame and
     * a poison were seen: on a loaded machine or under ASan 1.5 s may hold
     * neither, and a fixed window would make that a failure. When both
     * processes share one CPU they never write and read at the same time:
     * the consumer only ever sees what a whole time slice of garbage left,
     * which is all but never a frame. So once the window passed without
     * one, the writer calms down (the poison path reformats the ring) and
     * the frame path is taken anyway. */
    uint64_t start = pm_test_now_ns(), end = start + 1500000000ull, hard_end = start + 30000000000ull;
    uint64_t frames = 0, poisons = 0, empties = 0, sum = 0;
    while (pm_test_now_ns() < end || ((frames == 0 || poisons == 0) && pm_test_now_ns() < hard_end)) {
        if (frames == 0 && poisons > 0 && !*calm && pm_test_now_ns() >= end) {
            *calm = 1;
            pm__ring_format(t.region, 4096, 1024);
            int ar = pm__ring_attach(&t.cons, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1);
            if (ar != 0 && ar != -EBADMSG)
                ck_abort_msg("attach returned %d", ar);
        }
        const void *p;
        size_t len;
        int rc = pm__ring_peek(&t.cons, &p, &len);
        if (rc == 1) {
            const unsigned char *b = p;
            if (len < 1 || len > 1024 || b < data || b + len > data + 4096)
                ck_abort_msg("frame out of bounds: %p + %zu", p, len);
            for (size_t i = 0; i < len; i++)
                sum += b[i];
            pm__ring_consume(&t.cons);
            pm__ring_release(&t.cons);
            frames++;
        } else if (rc == 0) {
            empties++;
            int w = pm__ring_wait(&t.cons, 0);
            if (w != 0 && w != 1 && w != -EBADMSG)
                ck_abort_msg("wait returned %d", w);
        } else {
            if (rc != -EBADMSG)
                ck_abort_msg("peek returned %d", rc);
            poisons++;
            /* Start over on freshly formatted memory, as the hub does with a
             * restarted worker, so that the garbage meets a live consumer
             * again; an attach that already finds implausible indices starts
             * poisoned, which is also fine. */
            pm__ring_format(t.region, 4096, 1024);
            int ar = pm__ring_attach(&t.cons, t.region, 4096, 1024, PM__RING_CONSUMER, -1, -1);
            if (ar != 0 && ar != -EBADMSG)
                ck_abort_msg("attach returned %d", ar);
        }
    }
    kill(pid, SIGKILL);
    pm_test_reap(pid, 5000);
    ck_assert_msg(poisons > 0 && frames > 0,
                  "timed out waiting for a frame and a poison: %llu frames, %llu poisoned",
                  (unsigned long long)frames, (unsigned long long)poisons);
    fprintf(stderr, "hostile producer: %llu frames, %llu empty, %llu poisoned (sum %llu)%s\n",
            (unsigned long long)frames, (unsigned long long)empties,
            (unsigned long long)poisons, (unsigned long long)sum,
            *calm ? ", the frames after the garbage calmed down" : "");
    munmap((void *)calm, 4096);
    tr_close(&t);
}
END_TEST

START_TEST(test_hostile_consumer)
{
    /* The mirror image: the consumer end scribbles its index and flags
     * while this process produces. The producer only ever succeeds, sees a
     * full ring or -EBADMSG, and its bounded waits return. */
    test_ring t;
    tr_open(&t, 4096, 1024);
    struct pm__ring_shared *sh = t.region;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        uint64_t seed = 12345;
        for (;;) {
            uint64_t r = pm_test_rand(&seed);
            if (r % 3 == 0)
                atomic_store(&sh->tail, pm_test_rand(&seed));
            else if (r % 3 == 1)
                atomic_store(&sh->tail, atomic_load(&sh->head));
            else
                atomic_store(&sh->prod_waiting, (uint32_t)r);
        }
    }
    uint64_t end = pm_test_now_ns() + 1000000000ull;
    uint64_t ok = 0, full = 0, bad = 0;
    char buf[1024] = {0};
    while (pm_test_now_ns() < end) {
        int rc = pm_test_ring_send(&t.prod, buf, 1 + ok % 1024);
        if (rc == 0) {
            ok++;
        } else if (rc == -EAGAIN) {
            full++;
            int w = pm__ring_wait_space(&t.prod, 100, 1);
            if (w != 0 && w != 1 && w != -EBADMSG)
                ck_abort_msg("wait_space returned %d", w);
        } else {
            if (rc != -EBADMSG)
                ck_abort_msg("send returned %d", rc);
            bad++;
            pm__ring_format(t.region, 4096, 1024);
            int ar = pm__ring_attach(&t.prod, t.region, 4096, 1024, PM__RING_PRODUCER, -1, -1);
            if (ar != 0 && ar != -EBADMSG)
                ck_abort_msg("attach returned %d", ar);
        }
    }
    kill(pid, SIGKILL);
    pm_test_reap(pid, 5000);
    ck_assert_uint_gt(bad, 0);
    tr_close(&t);
}
END_TEST

/* design.md, "The other end is untrusted" 6: a hostile end flipping wait
 * flags costs at most a spurious or a missed wake-up of its own traffic,
 * never blocks the other; no wait with a timeout blocks for ever. An
 * honest child consumes ring a and produces into ring b, parking in every
 * wait (no spin): _i 0 in FUTEX_WAIT, 1 on its eventfd (as where futexes
 * are refused). This process is the other end of both and hostile: it
 * publishes into a and consumes from b correctly but never wakes anyone,
 * writes random values into every wait flag of both rings (the child's
 * included: a flag cleared while the child sleeps is a missed wake-up, one
 * set while it does not a spurious one) and keeps the eventfds the child
 * writes to wake it saturated. The child's publishes and releases return,
 * each bounded wait returns 0 or 1, and both streams make progress: the
 * child ends by itself, exit 0. A wait that blocked for ever would keep it
 * past the bound of its reap. */
START_TEST(test_hostile_wait_flags)
{
    /* The product's doorbells are non-blocking, as the ones here: a
     * saturated counter makes the waker's write fail at once (EAGAIN). */
    pm__channel l;
    const pm__channel_params cp = {.ring_cap = (uint64_t)1 << 20, .supervisor_pid = getpid(), .heartbeat_ms = 0,
                                   .max_message = PM_MAX_PAYLOAD};
    ck_assert_int_eq(pm__channel_create(&l, 0, 1, &cp), 0);
    ck_assert(fcntl(l.hub_efd, F_GETFL) & O_NONBLOCK);
    ck_assert(fcntl(l.node_efd, F_GETFL) & O_NONBLOCK);
    pm__channel_close(&l);

    test_ring a, b;
    tr_open(&a, 4096, 64);
    tr_open(&b, 4096, 64);
    a.cons.spin_ns = a.cons.spin_budget = b.prod.spin_ns = b.prod.spin_budget = 0;
    a.cons.futex_ok = b.prod.futex_ok = _i == 0;
    const int rounds = 150;
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        unsigned got = 0, sent = 0;
        unsigned char buf[32] = {0};
        for (int i = 0; i < rounds; i++) {
            int w = pm__ring_wait(&a.cons, 20);
            if (w != 0 && w != 1)
                _exit(2);
            const void *p;
            size_t len;
            int rc;
            while ((rc = pm__ring_peek(&a.cons, &p, &len)) == 1) {
                pm__ring_consume(&a.cons);
                pm__ring_release(&a.cons); /* wakes per a flag the other end wrote */
                got++;
            }
            if (rc != 0)
                _exit(3);
            while ((rc = pm_test_ring_send(&b.prod, buf, sizeof(buf))) == 0)
                sent++; /* each publish wakes per a flag the other end wrote */
            if (rc != -EAGAIN)
                _exit(4);
            w = pm__ring_wait_space(&b.prod, sizeof(buf), 20);
            if (w != 0 && w != 1)
                _exit(5);
        }
        _exit(got > 0 && sent > 0 ? 0 : 6);
    }
    static const uint32_t values[] = {0, 1, 2, 3, 0xffffffffu};
    uint64_t seed = 77;
    unsigned char *adata = (unsigned char *)a.region + PM__RING_HDR_SIZE;
    struct pm__ring_shared *ash = a.region, *bsh = b.region;
    const uint64_t full = 0xfffffffffffffffeull;
    int status = -1;
    unsigned saturations = 0;
    uint64_t end = pm_test_ms() + 30000;
    while (pm_test_ms() < end) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            break;
        ck_assert_int_eq(r, 0);
        /* a: one record into an empty ring, published without a wake-up. */
        uint64_t h = atomic_load(&ash->head);
        if (h == atomic_load(&ash->tail)) {
            *(volatile uint64_t *)(adata + (h & 4095)) = 8; /* length 8, flags 0 */
            atomic_store(&ash->head, h + 16);
        }
        /* b: everything consumed, without a wake-up. */
        atomic_store(&bsh->tail, atomic_load(&bsh->head));
        /* Every flag, to anything. */
        atomic_store(&ash->cons_waiting, values[pm_test_rand(&seed) % 5]);
        atomic_store(&ash->prod_waiting, values[pm_test_rand(&seed) % 5]);
        atomic_store(&bsh->cons_waiting, values[pm_test_rand(&seed) % 5]);
        atomic_store(&bsh->prod_waiting, values[pm_test_rand(&seed) % 5]);
        /* The counters the child's wake-ups write, at their maximum (a
         * wake-up of the child's between the read and the write leaves a
         * counter short of it this round). */
        uint64_t v;
        int saturated = 0;
        for (int k = 0; k < 2; k++) {
            int efd = k == 0 ? a.prod_efd : b.cons_efd;
            ssize_t rd = read(efd, &v, 8);
            (void)rd;
            saturated += write(efd, &full, 8) == 8;
        }
        saturations += saturated;
        usleep(2000);
    }
    if (status == -1) {
        kill(pid, SIGKILL);
        pm_test_reap(pid, 5000);
        ck_abort_msg("the honest end did not finish its %d bounded rounds in 30 s (blocked?)", rounds);
    }
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the honest end: status %d", status);
    ck_assert_uint_gt(saturations, 0);
    tr_close(&a);
    tr_close(&b);
}
END_TEST

static Suite *ring_suite(void)
{
    Suite *s = suite_create("ring");
    TCase *tc = pm_tcase("single-process", 30);
    tcase_add_test(tc, test_geometry);
    tcase_add_test(tc, test_empty_and_one);
    tcase_add_test(tc, test_consumed);
    tcase_add_test(tc, test_consumed_poisoned);
    tcase_add_test(tc, test_producer_edges);
    tcase_add_test(tc, test_consumer_edges);
    tcase_add_test(tc, test_full_and_sizes);
    tcase_add_test(tc, test_wrap_padding);
    tcase_add_test(tc, test_batching);
    tcase_add_test(tc, test_doorbell);
    tcase_add_test(tc, test_spin_learn);
    tcase_add_test(tc, test_spin_gate);
    tcase_add_test(tc, test_shm_sealed);
    tcase_add_test(tc, test_untouched_ring_pages);
    suite_add_tcase(s, tc);
    tc = pm_tcase("layout", 60);
    tcase_add_test(tc, test_attach);
    tcase_add_test(tc, test_layout);
    tcase_add_test(tc, test_poison_held_frame);
    tcase_add_test(tc, test_wait_flag_values);
    tcase_add_test(tc, test_hub_calls);
    tcase_add_test(tc, test_fd_zero);
    tcase_add_test(tc, test_park_hung_doorbell);
    tcase_add_loop_test(tc, test_park_answers, 0, (int)ARRAY_LEN(park_rows));
    suite_add_tcase(s, tc);
    tc = pm_tcase("corruption", 30);
    tcase_add_loop_test(tc, test_corrupt_consumer_side, 0, 10);
    tcase_add_test(tc, test_corrupt_producer_side);
    suite_add_tcase(s, tc);
    tc = pm_tcase("two-process", 120);
    tcase_add_test(tc, test_two_process_stream);
    tcase_add_loop_test(tc, test_two_process_pingpong_parked, 0, 3);
    suite_add_tcase(s, tc);
    tc = pm_tcase("spin", 60);
    tcase_add_test(tc, test_spin_cpus_mask);
    tcase_add_loop_test(tc, test_wait_learns, 0, 3);
    tcase_add_test(tc, test_gated_no_spin);
    tcase_add_test(tc, test_spin_preempted);
    suite_add_tcase(s, tc);
    tc = pm_tcase("hostile", 60);
    tcase_add_test(tc, test_hostile_producer);
    tcase_add_test(tc, test_hostile_consumer);
    tcase_add_loop_test(tc, test_hostile_wait_flags, 0, 2);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return pm_test_main(ring_suite());
}
