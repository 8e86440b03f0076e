/* SPDX-License-Identifier: MIT */
/*
 * channel.h - one worker's channel to the hub: a sealed memfd holding a control
 * block and two rings, plus two eventfd doorbells.
 *
 *   [0, C)                           control block (hub writes, worker reads;
 *                                    its crash record: the reverse); from
 *                                    offset 4096 the mesh's host table
 *   [C, C + R)                       ring "down": hub -> worker
 *   [C + R, C + 2R)                  ring "up":   worker -> hub
 *   (C = PM__CTL_SIZE)
 *   (R = pm__ring_region_size(cap))
 *
 * hub_efd: the hub parks on it; the worker writes it. node_efd: the reverse.
 * sock / node_sock: the two ends of a SOCK_SEQPACKET socketpair that
 * carries the fds of messages larger than a frame (bigmsg.h); the hub
 * keeps sock, the worker gets node_sock.
 * The worker trusts the hub (it is its parent and its supervisor) and reads
 * the geometry from the control block; the hub never reads back anything
 * from this memory except through its validated ring ends, and the
 * supervisor reads the crash record once, after the reap, as a copy it
 * validates (crash.h).
 */
#ifndef PM_CHANNEL_H
#define PM_CHANNEL_H

#include "base/address.h" /* pm__hosts: the host table in the control block */
#include "os/crash.h"
#include "lane.h" /* PM__LANES_MAX: the revocation words */
#include "ring.h"

#define PM__CTL_MAGIC 0x6c7468686d707070ull /* "ppmhhtl" */
/* Version 2: the host table (peer links) and a control block of 16 KiB. */
#define PM__CTL_VERSION 2u
#define PM__CTL_SIZE 16384u
/* A ring record carries a frame header and up to PM_MAX_INIT_DATA (or a
 * maximal payload) plus the init fields: keep that much headroom. */
#define PM__CHANNEL_MAX_FRAME (PM_MAX_INIT_DATA + 512u)

struct pm__ctl {
    uint64_t magic;
    uint32_t version;
    uint32_t slot;
    uint64_t incarnation;
    uint64_t ring_cap;
    uint32_t max_frame;
    int32_t supervisor_pid;
    uint32_t heartbeat_ms; /* 0: off; the worker's waits check in at least 4x as often */
    uint64_t max_message;  /* the cluster's largest message (pm_options_set_max_message) */
    /* Set by the hub to ask the worker to stop (it also sends a STOP frame),
     * or to tell it that it was fenced. The worker only reads them; the hub
     * never reads them back. */
    _Alignas(64) _Atomic uint32_t stop;
    _Atomic uint32_t fenced;
    /* Written only by the worker, read by the hub: progress. The hub only
     * compares the counter with its last value, so no value a worker writes
     * can do more than make it look alive or hung. */
    _Alignas(128) _Atomic uint64_t beats;
    _Atomic uint32_t waiting; /* 1 while blocked in pm_node_recv */
    /* Written only by the worker's fatal-signal handler (node_crash.c), read by
     * the supervisor once after the reap (crash.c). Its own cache lines:
     * nothing the hub writes shares them. */
    _Alignas(128) struct pm__crash_rec crash;
    /* The mesh's hosts (internal.h), for addresses of other hosts: the hub
     * appends, the worker reads (pm__hosts_find). peer_mode 1: the mesh
     * has peer links (the supervisor is port 0 of its host). Its own
     * pages, away from everything the worker writes. */
    _Alignas(4096) uint32_t peer_mode;
    pm__hosts hosts;
    /* Direct lanes (lane.h; doc/design.md, "Direct lanes", Revocation):
     * the supervisor writes the generation of this worker's lane k into
     * word k once that lane's other end can no longer write; the worker
     * reads them before it reads a lane. Written before any later frame
     * of the supervisor's that names index k. Past the host table: a
     * worker of an older library never reads them. */
    _Alignas(64) _Atomic uint32_t lane_revoked[PM__LANES_MAX];
};
_Static_assert(sizeof(struct pm__ctl) <= PM__CTL_SIZE, "the control block fits its pages");

typedef struct pm__channel {
    int memfd;
    int hub_efd;   /* an eventfd: the worker writes it, the hub polls and drains it */
    int node_efd;  /* the worker's doorbell: its end of a socket pair, which it polls */
    int node_wake; /* hub side only: the pair's other end, which the hub sends on
                      (MSG_DONTWAIT | MSG_NOSIGNAL). Not an eventfd, so that the
                      worker holds none of the open file description the hub
                      writes through: an eventfd's O_NONBLOCK is the
                      description's, and a worker that cleared it and filled the
                      counter made the hub's write block forever (a review of
                      stop 40); not a pipe, whose write kills the writer with
                      SIGPIPE once the reader is gone */
    int sock;      /* hub's end of the fd socket (worker side: its own end) */
    int node_sock; /* hub side only: the worker's end, until the channel closes */
    uint32_t tx_seq; /* records sent on sock / received, bigmsg.h */
    uint32_t rx_seq;
    void *map;
    size_t map_size;
    int nofork;  /* hub side: 1 when a fork of this process does not copy map
                    (MADV_DONTFORK, pm__channel_create) */
    pm__ring tx; /* hub: down producer; worker: up producer */
    pm__ring rx; /* hub: up consumer; worker: down consumer */
} pm__channel;

/* Sets every fd to -1 and the map to NULL (the sentinels). */
void pm__channel_zero(pm__channel *l);

/* What every channel of a cluster is made with, written into its control
 * block: the supervisor fills it once, when the cluster is created. */
typedef struct pm__channel_params {
    uint64_t ring_cap;      /* each ring's capacity (pm_options_set_ring_size) */
    pid_t supervisor_pid;   /* the worker checks on it while it waits */
    uint32_t heartbeat_ms;  /* 0: off */
    uint64_t max_message;   /* the cluster's largest message (pm_options_set_max_message) */
} pm__channel_params;

/* Hub side: creates the memory and the doorbells for incarnation of slot,
 * made with p, and attaches the hub's ends. Returns 0 or -errno with
 * nothing left open. */
int pm__channel_create(pm__channel *l, unsigned slot, uint64_t incarnation,
                       const pm__channel_params *p);

/* Hub side: 1 when l, a channel this process made, was made for
 * incarnation of slot with p, else 0. It reads the control block: only for
 * a channel no worker has run on (a spare, spare.c). */
int pm__channel_made_for(const pm__channel *l, unsigned slot, uint64_t incarnation,
                         const pm__channel_params *p);

/* Worker side: maps an inherited memfd and attaches the worker's ends.
 * sock is the worker's end of the fd socket, or -1 (a worker started
 * without one cannot send or receive messages larger than a frame). */
int pm__channel_attach(pm__channel *l, int memfd, int node_efd, int hub_efd, int sock);

/* Worker side, over a channel this process holds the hub's end of (the
 * tests' harnesses; a fork child through pm__channel_adopt_fork): the
 * worker's ends over hub's mapping as it is (no second mmap, no fstat or
 * seal checks: it is the supervisor's own, made by pm__channel_create) and
 * the worker's fds (memfd, doorbells, node_sock as its sock). On success l
 * owns the mapping and those fds; hub's other fds (its sock) stay the
 * caller's to close, and hub must no longer be closed or unmapped. 0 or
 * -EPROTO. */
int pm__channel_adopt(pm__channel *l, const pm__channel *hub);

/* pm__channel_adopt in a fork child, whose fork did not copy hub's mapping
 * (nofork: every channel's is MADV_DONTFORK from its creation, the
 * worker's own too): mapped here from hub's memfd, then adopted. A fork
 * copies every mapping of the supervisor it does not skip, one per worker
 * (each fork then O(N), a spawn of N fork-mode workers O(N^2), and each
 * child unmapping the others' rings again: check_containment
 * test_forks_copy_no_channel), and copying the worker's own one meant
 * marking it MADV_DOFORK before the fork and MADV_DONTFORK after: two
 * system calls and a write of the slot's page (shared with the child by
 * then, so copied) in the supervisor, between the fork and its sleep,
 * while the child waited for its CPU. The child maps it instead: one
 * mmap, and no more page faults than the copied mapping cost, since a
 * fork copies no page-table entries of a shared mapping of a file (they
 * are faulted in). Where the madvise failed at creation (the mapping was
 * copied), hub's mapping is adopted as it is. 0, -EPROTO, or the mmap's
 * -errno. */
int pm__channel_adopt_fork(pm__channel *l, const pm__channel *hub);

/* The control block (worker side: trusted; hub side: written once). */
static inline const struct pm__ctl *pm__channel_ctl(const pm__channel *l)
{
    return (const struct pm__ctl *)l->map;
}

/* Unmaps and closes everything; keeps errno. */
/* A fork child's copy of a channel that is not its own: closes the fds and
 * unmaps without writing to *l. Writing (the sentinels of pm__channel_close)
 * would copy-on-write the page the struct shares with the supervisor: with
 * N slots each new worker took O(N) such faults, each a TLB flush, and a
 * spawn of N workers grew as N^2. The child must not use *l afterwards. */
void pm__channel_release_copy(const pm__channel *l);

/* The fds pm__channel_release_copy closes, into fds (-1 where none): for a
 * caller that closes many channels' fds together (a fork child, by runs of
 * close_range) and unmaps their mappings itself. */
#define PM__CHANNEL_NFDS 6
void pm__channel_fds(const pm__channel *l, int fds[PM__CHANNEL_NFDS]);

void pm__channel_close(pm__channel *l);

/* Hub side, once the worker runs on l (its fork returned, its exec is done,
 * or a standby forked on l was taken): closes what only the worker uses,
 * the memfd (the hub keeps its mapping) and the worker's doorbell end, and
 * sets them to -1. Every fork of this process copies each fd it holds and
 * every child closes each one (close_range, execve's close-on-exec), so
 * each fd held per worker costs every later spawn and restart, and a spawn
 * of N workers grows with N^2 of them (doc/benchmarks.md, stop 59).
 * node_sock stays: the hub's hold on it keeps the fd socket from ever
 * reading end-of-file, which take_records (port.c) would count as a
 * malformed record and could race the reap of a worker that just died
 * (a fault charged to the wrong reason). The doorbell's end may go: the
 * hub's send on node_wake ignores a reader that is gone (ring.c wake). */
void pm__channel_drop_worker_ends(pm__channel *l);

#endif /* PM_CHANNEL_H */
