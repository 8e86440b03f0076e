/* SPDX-License-Identifier: MIT */
/* channel.c - a worker's shared memory and doorbells; see channel.h. */
#define _GNU_SOURCE
#include "channel.h"

#include <errno.h>
#include <fcntl.h>
#include <stdio.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/socket.h>
#include <unistd.h>

#include "os/doorbell.h"
#include "shm.h"

PM__READY_TEXT void pm__channel_zero(pm__channel *l)
{
    memset(l, 0, sizeof(*l));
    /* -1 hidden from the optimizer: gcc -O2 otherwise loads the pair of
     * -1s from .rodata, a page a fork child has not mapped yet: one more
     * page fault on its way to READY (doc/benchmarks.md, stop 58). */
    int none = -1;
#if defined(__GNUC__) || defined(__clang__)
    __asm__("" : "+r"(none));
#endif
    l->memfd = l->hub_efd = l->node_efd = l->node_wake = l->sock = l->node_sock = none;
}

PM__READY_TEXT static size_t channel_size(uint64_t cap)
{
    return PM__CTL_SIZE + 2 * pm__ring_region_size(cap);
}

PM__READY_TEXT static void *down_region(const pm__channel *l, uint64_t cap)
{
    (void)cap;
    return (char *)l->map + PM__CTL_SIZE;
}

PM__READY_TEXT static void *up_region(const pm__channel *l, uint64_t cap)
{
    return (char *)l->map + PM__CTL_SIZE + pm__ring_region_size(cap);
}

/* The control block's fields, as channel.h gives them. */
static void ctl_fill(struct pm__ctl *ctl, unsigned slot, uint64_t incarnation,
                     const pm__channel_params *p)
{
    ctl->magic = PM__CTL_MAGIC;
    ctl->version = PM__CTL_VERSION;
    ctl->slot = slot;
    ctl->incarnation = incarnation;
    ctl->ring_cap = p->ring_cap;
    ctl->max_frame = PM__CHANNEL_MAX_FRAME;
    ctl->supervisor_pid = (int32_t)p->supervisor_pid;
    ctl->heartbeat_ms = p->heartbeat_ms;
    ctl->max_message = p->max_message;
}

/* Writes the first data page of the ring at region (a zero where zeros
 * are: nothing a reader sees changes). Its handshake writes it anyway. */
static void touch_first_data_page(void *region)
{
    *(volatile uint64_t *)(void *)((unsigned char *)region + PM__RING_HDR_SIZE) = 0;
}

/* The hub's doorbell, an eventfd the worker writes; the worker's, one end
 * of a socket pair (channel.h, node_wake), each end its own open file
 * description, the worker's made read-only and the hub's write-only. The
 * hub's send is non-blocking by its flags (ring.c wake): a full socket
 * (thousands of unread rings) refuses it, the worker having a wake-up
 * waiting anyway; a worker that is gone makes it fail, without SIGPIPE.
 * 0 or -errno (the caller closes what was made). */
static int make_doorbells(pm__channel *l)
{
    l->hub_efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (l->hub_efd < 0)
        return -errno;
    return pm__doorbell_pair(&l->node_efd, &l->node_wake);
}

int pm__channel_create(pm__channel *l, unsigned slot, uint64_t incarnation,
                       const pm__channel_params *p)
{
    const uint64_t cap = p->ring_cap;
    char name[64];
    int rc;
    pm__channel_zero(l);
    /* The name shows in /proc/PID/maps and fd links: slot and incarnation
     * make a leak or a mix-up visible. */
    snprintf(name, sizeof(name), "procmesh-slot%u-inc%llu", slot, (unsigned long long)incarnation);
    size_t size = channel_size(cap);
    /* Not copied by a fork (channel.h, pm__channel_adopt_fork), from the
     * moment it exists: under the lock a fork of another cluster's worker
     * in another thread also takes (base/internal.h). Best effort: where
     * the madvise fails the mapping is copied, and a fork-mode child
     * unmaps it (incarnation.c drop_channel). */
    pm__fork_serial_lock();
    rc = pm__shm_create(name, size, &l->memfd, &l->map);
    if (rc == 0)
        l->nofork = madvise(l->map, size, MADV_DONTFORK) == 0;
    pm__fork_serial_unlock();
    if (rc < 0)
        goto fail;
    l->map_size = size;
    if ((rc = make_doorbells(l)) < 0)
        goto fail;
    /* SEQPACKET keeps each fd's record whole and in order; non-blocking
     * on the hub's end (the hub never waits), the worker's end too (it
     * polls when it must wait, checking on its supervisor meanwhile). */
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0) {
        rc = -errno;
        goto fail;
    }
    /* The smallest send buffers the kernel allows (it raises 1 to
     * SOCK_MIN_SNDBUF: about 6 records). A record stays charged to its
     * sender's buffer until the receiver takes it, so this bounds the fds
     * waiting in either direction's socket; by default (212992 bytes) about
     * 280 could wait in one that is not read, each pinning up to
     * max_message bytes and counting against the sending uid's fds in
     * flight (RLIMIT_NOFILE, ETOOMANYREFS), past the hub's own cap on the
     * fds it queues (PM__HOLD_MAX_FDS). Best effort: a failure leaves the
     * default, which is correct, only deeper. */
    int one = 1;
    (void)setsockopt(sv[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    (void)setsockopt(sv[1], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    l->sock = sv[0];
    l->node_sock = sv[1];
    ctl_fill(l->map, slot, incarnation, p);
    if ((rc = pm__ring_format(down_region(l, cap), cap, PM__CHANNEL_MAX_FRAME)) < 0 ||
        (rc = pm__ring_format(up_region(l, cap), cap, PM__CHANNEL_MAX_FRAME)) < 0)
        goto fail;
    /* Each ring's first data page, here: a channel is made ahead of its
     * incarnation (spare.c: after the worker before was ready), off the
     * crash's path, and every handshake writes both pages within its first
     * frames (INIT down; HELLO and READY up), so an idle worker holds them
     * either way; only a spare not yet taken holds them sooner. Made here,
     * INIT's write when the port opens and the hub's read of the HELLO or
     * READY take no page fault in the supervisor. The worker, an exec'd
     * one or a fork child (whose page tables hold none of the channel),
     * reads the up ring's header first, and the kernel maps the resident
     * pages around a read fault (fault-around, 64 KiB): its first frame's
     * write takes no fault of its own on the way to ready. */
    touch_first_data_page(down_region(l, cap));
    touch_first_data_page(up_region(l, cap));
    /* The hub produces on "down" (waking the worker through node_wake,
     * parking on hub_efd when the ring is full) and consumes "up". */
    if ((rc = pm__ring_attach(&l->tx, down_region(l, cap), cap, PM__CHANNEL_MAX_FRAME,
                              PM__RING_PRODUCER, l->node_wake, l->hub_efd)) < 0 ||
        (rc = pm__ring_attach(&l->rx, up_region(l, cap), cap, PM__CHANNEL_MAX_FRAME,
                              PM__RING_CONSUMER, l->node_wake, l->hub_efd)) < 0)
        goto fail;
    l->tx.wake_sock = l->rx.wake_sock = 1; /* node_wake: a socket (ring.c wake) */
    return 0;
fail:
    pm__channel_close(l);
    return rc;
}

int pm__channel_made_for(const pm__channel *l, unsigned slot, uint64_t incarnation,
                         const pm__channel_params *p)
{
    const struct pm__ctl *ctl = l->map;
    return ctl->incarnation == incarnation && ctl->slot == slot && ctl->ring_cap == p->ring_cap &&
           ctl->supervisor_pid == (int32_t)p->supervisor_pid &&
           ctl->heartbeat_ms == p->heartbeat_ms && ctl->max_message == p->max_message;
}

PM__READY_TEXT int pm__channel_attach(pm__channel *l, int memfd, int node_efd, int hub_efd, int sock)
{
    int rc;
    pm__channel_zero(l);
    /* The whole object at once, its geometry read from the mapping: the
     * object is sealed against shrinking, and its size is what the
     * supervisor made for that geometry (pm__channel_create), which is
     * checked below before a ring is looked at. One mapping and one fault
     * on the control block where a look at it first took two of each on
     * every exec'd worker's start. */
    rc = pm__shm_map_whole(memfd, channel_size(PM__RING_MIN_CAP), channel_size(PM__RING_MAX_CAP),
                           &l->map, &l->map_size);
    if (rc < 0)
        return rc;
    l->memfd = memfd;
    l->node_efd = node_efd;
    l->hub_efd = hub_efd;
    l->sock = sock;
    const struct pm__ctl *ctl = l->map;
    uint64_t cap = ctl->ring_cap;
    uint32_t max_frame = ctl->max_frame;
    if (ctl->magic != PM__CTL_MAGIC || ctl->version != PM__CTL_VERSION ||
        pm__ring_check_geometry(cap, max_frame) < 0 || l->map_size != channel_size(cap)) {
        rc = -EPROTO;
        goto fail;
    }
    if ((rc = pm__ring_attach(&l->rx, down_region(l, cap), cap, max_frame, PM__RING_CONSUMER,
                              hub_efd, node_efd)) < 0 ||
        (rc = pm__ring_attach(&l->tx, up_region(l, cap), cap, max_frame, PM__RING_PRODUCER,
                              hub_efd, node_efd)) < 0)
        goto fail;
    l->rx.wake_sock = l->tx.wake_sock = -1; /* hub_efd: an eventfd (as in adopt) */
    return 0;
fail:
    pm__shm_unmap(l->map, l->map_size);
    pm__channel_zero(l);
    return rc;
}

PM__READY_TEXT int pm__channel_adopt(pm__channel *l, const pm__channel *hub)
{
    pm__channel_zero(l);
    const struct pm__ctl *ctl = hub->map;
    if (ctl == NULL || ctl->magic != PM__CTL_MAGIC || ctl->version != PM__CTL_VERSION)
        return -EPROTO;
    uint64_t cap = ctl->ring_cap;
    uint32_t max_frame = ctl->max_frame;
    if (pm__ring_check_geometry(cap, max_frame) < 0 || hub->map_size != channel_size(cap))
        return -EPROTO;
    l->map = hub->map;
    l->map_size = hub->map_size;
    l->memfd = hub->memfd;
    l->node_efd = hub->node_efd;
    l->hub_efd = hub->hub_efd;
    l->sock = hub->node_sock;
    int rc;
    if ((rc = pm__ring_attach(&l->rx, down_region(l, cap), cap, max_frame, PM__RING_CONSUMER,
                              l->hub_efd, l->node_efd)) < 0 ||
        (rc = pm__ring_attach(&l->tx, up_region(l, cap), cap, max_frame, PM__RING_PRODUCER,
                              l->hub_efd, l->node_efd)) < 0) {
        pm__channel_zero(l); /* the mapping and fds stay the caller's */
        return rc;
    }
    /* The worker wakes the hub through an eventfd: written, never sent
     * on (a strict seccomp filter knows no send). */
    l->rx.wake_sock = l->tx.wake_sock = -1;
    return 0;
}

PM__READY_TEXT int pm__channel_adopt_fork(pm__channel *l, const pm__channel *hub)
{
    if (!hub->nofork)
        return pm__channel_adopt(l, hub);
    /* Raw calls (rawsys.h): this is the fork child's way to READY. mmap's
     * raw form is not the same call everywhere (i386's takes a struct):
     * libc's where the calls are not inline. */
    pm__channel mine = *hub;
#if PM__RAWSYS
    long at = pm__sys6(SYS_mmap, 0, (long)hub->map_size, PROT_READ | PROT_WRITE, MAP_SHARED,
                       hub->memfd, 0);
    if (pm__sys_failed(at))
        return (int)at;
    mine.map = (void *)at;
#else
    mine.map = mmap(NULL, hub->map_size, PROT_READ | PROT_WRITE, MAP_SHARED, hub->memfd, 0);
    if (mine.map == MAP_FAILED)
        return -errno;
#endif
    int rc = pm__channel_adopt(l, &mine);
    if (rc < 0)
        (void)pm__sys2(SYS_munmap, mine.map, mine.map_size);
    return rc;
}

PM__READY_TEXT void pm__channel_fds(const pm__channel *l, int fds[PM__CHANNEL_NFDS])
{
    fds[0] = l->memfd;
    fds[1] = l->hub_efd;
    fds[2] = l->node_efd;
    fds[3] = l->sock;
    fds[4] = l->node_sock;
    fds[5] = l->node_wake;
}

void pm__channel_release_copy(const pm__channel *l)
{
    int fds[PM__CHANNEL_NFDS];
    pm__shm_unmap(l->map, l->map_size);
    pm__channel_fds(l, fds);
    for (int i = 0; i < PM__CHANNEL_NFDS; i++)
        pm__close(fds[i]);
}

void pm__channel_drop_worker_ends(pm__channel *l)
{
    pm__close(l->memfd);
    pm__close(l->node_efd);
    l->memfd = l->node_efd = -1;
}

void pm__channel_close(pm__channel *l)
{
    pm__channel_release_copy(l);
    pm__channel_zero(l);
}
