/* SPDX-License-Identifier: MIT */
/* fuzz_wport.h - a local worker's port made by hand for the hub harnesses: its memory, its rings from both ends, its fd socket. */
/*
 * Shared by fuzz_hub.c and fuzz_link.c (one copy of the scaffolding, so a
 * change to the link layout is made once). A port's control block and two
 * rings of the smallest capacity that takes a maximal frame
 * (PM__CHANNEL_MAX_FRAME) live in one heap block of exactly the link's size,
 * with no doorbells (eventfds of -1: no system call, deterministic). The
 * harness holds the worker's ends (up: producer, down: consumer); the hub
 * gets link (what the cluster would own).
 */
#ifndef PM_FUZZ_WPORT_H
#define PM_FUZZ_WPORT_H

#include <stdatomic.h>
#include <sys/socket.h>
#include <unistd.h>

#include "fuzz.h"
#include "hub/hub_core.h"

#define CAP ((uint64_t)1 << 18) /* the smallest ring that takes PM__CHANNEL_MAX_FRAME */

typedef struct wport {
    unsigned char *map;
    size_t size;
    pm__channel channel; /* the hub's ends (what the cluster owns) */
    pm__ring up;        /* the worker's ends */
    pm__ring down;
    uint64_t inc;       /* incarnation now; 1, 2, ... */
    int open;
    int cut;            /* a fault was reported: nothing from it until restarted */
    int hello;
    int down_tainted;   /* the worker wrote its own consumer index: its down ring may be garbage */
    int up_tainted;     /* the worker scribbled over its up ring: it may have hidden
                           its frames from the hub, which only hurts itself */
    uint64_t dirty[2];  /* bytes of each data area (down, up) written since the last zeroing */
    int wsock;          /* the worker's end of its fd socket (the hub's is channel.sock) */
    uint32_t tx_seq;    /* the worker's last record sent honestly */
    uint32_t rx_seq;    /* the last record it took from the hub */
} wport;

static inline void *ring_region(const wport *p, int up)
{
    return p->map + PM__CTL_SIZE + (up ? pm__ring_region_size(CAP) : 0);
}

/* The block, once per process (it is reused by every run: only what was
 * written is zeroed again, channel_fresh). */
static inline void wport_alloc(wport *p)
{
    p->channel.sock = p->wsock = -1;
    p->size = PM__CTL_SIZE + 2 * pm__ring_region_size(CAP);
    p->map = aligned_alloc(4096, p->size);
    FUZZ_ASSERT(p->map != NULL);
    memset(p->map, 0, p->size);
}

/* Every write into a data area lands below its producer's index (or at a
 * hostile offset, noted when made): zeroing that much is zeroing all. */
static inline void note_dirty(wport *p)
{
    uint64_t down = p->channel.tx.head, up = p->up.head;
    if (down > p->dirty[0])
        p->dirty[0] = down < CAP ? down : CAP;
    if (up > p->dirty[1])
        p->dirty[1] = up < CAP ? up : CAP;
}

static inline void socks_close(wport *p)
{
    if (p->channel.sock >= 0)
        close(p->channel.sock);
    if (p->wsock >= 0)
        close(p->wsock); /* fds still in flight are freed by the kernel */
    p->channel.sock = p->wsock = -1;
}

/* Fresh, zeroed memory for a new incarnation, both ends attached. Only
 * what was written is zeroed (the whole block is 1.5 MiB a run): each run
 * starts from the same bytes, so a crash reproduces. */
static inline void channel_fresh(wport *p)
{
    note_dirty(p);
    socks_close(p);
    memset(p->map, 0, PM__CTL_SIZE);
    for (int up = 0; up <= 1; up++) {
        unsigned char *r = ring_region(p, up);
        memset(r, 0, PM__RING_HDR_SIZE + p->dirty[up]);
        p->dirty[up] = 0;
    }
    pm__channel_zero(&p->channel);
    p->channel.map = p->map;
    p->channel.map_size = p->size;
    int sv[2], one = 1;
    FUZZ_ASSERT(socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) == 0);
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    (void)setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    p->channel.sock = sv[0];
    p->wsock = sv[1];
    p->tx_seq = p->rx_seq = 0;
    struct pm__ctl *ctl = (struct pm__ctl *)p->map;
    ctl->magic = PM__CTL_MAGIC;
    ctl->version = 1;
    ctl->incarnation = p->inc;
    ctl->ring_cap = CAP;
    ctl->max_frame = PM__CHANNEL_MAX_FRAME;
    FUZZ_ASSERT(pm__ring_format(ring_region(p, 0), CAP, PM__CHANNEL_MAX_FRAME) == 0);
    FUZZ_ASSERT(pm__ring_format(ring_region(p, 1), CAP, PM__CHANNEL_MAX_FRAME) == 0);
    FUZZ_ASSERT(pm__ring_attach(&p->channel.tx, ring_region(p, 0), CAP, PM__CHANNEL_MAX_FRAME,
                                PM__RING_PRODUCER, -1, -1) == 0);
    FUZZ_ASSERT(pm__ring_attach(&p->channel.rx, ring_region(p, 1), CAP, PM__CHANNEL_MAX_FRAME,
                                PM__RING_CONSUMER, -1, -1) == 0);
    FUZZ_ASSERT(pm__ring_attach(&p->down, ring_region(p, 0), CAP, PM__CHANNEL_MAX_FRAME,
                                PM__RING_CONSUMER, -1, -1) == 0);
    FUZZ_ASSERT(pm__ring_attach(&p->up, ring_region(p, 1), CAP, PM__CHANNEL_MAX_FRAME,
                                PM__RING_PRODUCER, -1, -1) == 0);
    p->cut = 0;
    p->hello = 0;
    p->down_tainted = 0;
    p->up_tainted = 0;
}

/* Publishes what port i's worker committed to its up ring. The publish
 * took the hub's flag if it was armed: its doorbell rang, and the loop's
 * completion for it puts the port on the ready list (supervisor/core.c,
 * pm__cluster_on_doorbell). */
static inline void wport_publish(pm__hub *h, wport *p, unsigned i)
{
    struct pm__ring_shared *sh = ring_region(p, 1);
    uint32_t armed = atomic_load(&sh->cons_waiting);
    pm__ring_publish(&p->up);
    if (armed != 0 && atomic_load(&sh->cons_waiting) == 0)
        pm__hub_mark_rang(h, i);
}

#endif /* PM_FUZZ_WPORT_H */
