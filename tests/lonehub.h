/* SPDX-License-Identifier: MIT */
/* lonehub.h - a lone hub for tests: a pm__hub with no cluster around it,
 * whose ports' worker ends live in the test's own process, so that what
 * the hub does with a frame is decided by the test's calls alone, never by
 * how fast another process runs (check_api; check_bigmsg has one of its
 * own, with two ports and a fault counter). */
#ifndef PM_TEST_LONEHUB_H
#define PM_TEST_LONEHUB_H

#include <check.h>
#include <string.h>
#include <unistd.h>

#include "internals.h"
#include "channel/bigmsg.h"
#include "channel/proto.h"

static inline void lone_fault(void *owner, unsigned p, int reason)
{
    (void)owner;
    ck_abort_msg("port %u faulted (%d)", p, reason);
}

static inline void lone_control(void *owner, unsigned p, int type, const void *payload, size_t len)
{
    (void)owner;
    (void)payload;
    (void)len;
    ck_abort_msg("port %u: a control frame (%d)", p, type);
}

static inline void lone_drain(void *owner, unsigned p)
{
    (void)owner;
    (void)p;
}

static const pm__hub_ops lone_ops = {lone_fault, lone_control, lone_drain, NULL};

/* A hub of nports closed ports, no cluster around it, its owner's calls
 * ops. */
static inline pm__hub *lone_hub_with(unsigned nports, const pm__hub_ops *ops)
{
    static const pm__names names = {"t", "a", 10, 1, NULL};
    pm__hub *h;
    ck_assert_int_eq(pm__hub_new(&h, nports, &names, NULL, ops, NULL), 0);
    return h;
}

/* The same, a fault or a control frame failing the test. */
static inline pm__hub *lone_hub(unsigned nports)
{
    return lone_hub_with(nports, &lone_ops);
}

/* A port of a lone hub over a real channel (pm__channel_create, the
 * worker's end adopted in this process: the rings and doorbell a worker
 * has), index 1, ready. Its worker's end in *worker. */
static inline void lone_port_at(pm__hub *h, unsigned index, pm__channel *hub_end, pm__channel *worker)
{
    pm__channel_params cp = {.ring_cap = 1u << 20, .supervisor_pid = getpid(),
                             .max_message = PM_MAX_PAYLOAD};
    ck_assert_int_eq(pm__channel_create(hub_end, index, 1, &cp), 0);
    ck_assert_int_eq(pm__hub_port_open(h, index, hub_end, 1), 0);
    pm__hub_port_set_state(h, index, PM__PORT_READY);
    ck_assert_int_eq(pm__channel_adopt(worker, hub_end), 0);
}

static inline void lone_port(pm__hub *h, pm__channel *hub_end, pm__channel *worker)
{
    lone_port_at(h, 1, hub_end, worker);
}

/* Ports 1 and 2, ready, their ends in hub_end[0..1] and worker[0..1]. */
static inline void lone_ports_1_2(pm__hub *h, pm__channel hub_end[2], pm__channel worker[2])
{
    lone_port_at(h, 1, &hub_end[0], &worker[0]);
    lone_port_at(h, 2, &hub_end[1], &worker[1]);
}

/* Lone port i's down ring filled with main's control frames (what a worker
 * that never reads has been sent): the next frame for it finds no room.
 * The frames written. */
static inline unsigned lone_ring_full(pm__hub *h, unsigned i)
{
    char filler[64];
    memset(filler, 'f', sizeof(filler));
    unsigned n = 0;
    int rc;
    while ((rc = pm__hub_send_control(h, i, PM__FT_MSG, filler, sizeof(filler))) == 0)
        n++;
    ck_assert_int_eq(rc, -EAGAIN);
    while ((rc = pm__hub_send_control(h, i, PM__FT_MSG, NULL, 0)) == 0)
        n++; /* no header-only frame fits either */
    ck_assert_int_eq(rc, -EAGAIN);
    return n;
}

/* Every frame in a lone worker's down ring, read: their count. */
static inline unsigned lone_read_frames(pm__hub *h, pm__channel *worker)
{
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    unsigned n = 0;
    while (pm__frame_recv(&worker->rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
        n++;
        pm__ring_consume(&worker->rx);
    }
    pm__ring_release(&worker->rx);
    return n;
}

/* A message for lone port d from port 0, as the hub relays it. */
static inline pm__frame_hdr lone_msg_to(unsigned d)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.src = 0;
    f.dst = d;
    f.dst_inc = 1;
    return f;
}

/* The length a lone hub's large messages announce (the memfd behind is
 * not read here). */
#define LONE_BIG_LEN ((uint64_t)PM_MAX_PAYLOAD + 1)

/* A large message's fd (a sealed memfd of one byte), at fd `at` if >= 0. */
static inline int lone_big_fd(int at)
{
    int fd = pm__bigmsg_create("b", 1);
    ck_assert_int_ge(fd, 0);
    if (at < 0 || fd == at)
        return fd;
    ck_assert_int_eq(dup2(fd, at), at);
    close(fd);
    return at;
}

/* The frame f a lone worker read (its payload at payload) carries len
 * bytes: inline, or as a large message (large) its announcement, and on
 * the worker's socket the memfd (closed here). */
static inline void lone_expect_payload(pm__channel *worker, const pm__frame_hdr *f,
                                       const void *payload, uint64_t len, int large)
{
    if (!large) {
        ck_assert_uint_eq(f->flags, 0);
        ck_assert_uint_eq(f->len, len);
        return;
    }
    ck_assert_uint_eq(f->flags, PM__FF_MEMFD);
    pm__announce a;
    ck_assert_int_eq(pm__announce_decode(payload, f->len, &a), 0);
    ck_assert_uint_eq(a.len, len);
    int big = -1;
    ck_assert_int_eq(pm__bigmsg_recv(worker->sock, a.seq, &big), 0);
    close(big);
}

/* What the hub's calls up (pm__hub_up) got: a notice for main, or back
 * over a link. */
static int lone_up_main, lone_up_link;
static pm__frame_hdr lone_up_hdr;
static uint64_t lone_up_args[6];

static inline void lone_up_deliver_main(pm__hub *h, const pm__frame_hdr *f, const void *payload)
{
    (void)h, (void)payload;
    lone_up_main++;
    lone_up_hdr = *f;
}

static inline void lone_up_link_notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                                uint64_t about_inc, uint64_t request_id, int err)
{
    (void)h;
    lone_up_link++;
    uint64_t a[6] = {to, to_inc, about, about_inc, request_id, (uint64_t)(int64_t)err};
    memcpy(lone_up_args, a, sizeof(a));
}

static const pm__hub_up lone_up = {lone_up_deliver_main, lone_up_link_notice};

#endif /* PM_TEST_LONEHUB_H */
