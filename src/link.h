/* SPDX-License-Identifier: MIT */
/*
 * link.h - one worker's link to the hub: a sealed memfd holding a control
 * block and two rings, plus two eventfd doorbells.
 *
 *   [0, 4096)                        control block (hub writes, worker reads;
 *                                    its crash record: the reverse)
 *   [4096, 4096 + R)                 ring "down": hub -> worker
 *   [4096 + R, 4096 + 2R)            ring "up":   worker -> hub
 *   (R = pm__ring_region_size(cap))
 *
 * hub_efd: the hub parks on it; the worker writes it. node_efd: the reverse.
 * The worker trusts the hub (it is its parent and its supervisor) and reads
 * the geometry from the control block; the hub never reads back anything
 * from this memory except through its validated ring ends, and the
 * supervisor reads the crash record once, after the reap, as a copy it
 * validates (crash.h).
 */
#ifndef PM_LINK_H
#define PM_LINK_H

#include "crash.h"
#include "ring.h"

#define PM__CTL_MAGIC 0x6c7468686d707070ull /* "ppmhhtl" */
#define PM__CTL_SIZE 4096u
/* A ring record carries a frame header and up to PM_MAX_INIT_DATA (or a
 * maximal payload) plus the init fields: keep that much headroom. */
#define PM__LINK_MAX_FRAME (PM_MAX_INIT_DATA + 512u)

struct pm__ctl {
    uint64_t magic;
    uint32_t version;
    uint32_t slot;
    uint64_t incarnation;
    uint64_t ring_cap;
    uint32_t max_frame;
    int32_t supervisor_pid;
    uint32_t heartbeat_ms; /* 0: off; the worker's waits check in at least 4x as often */
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
    /* Written only by the worker's fatal-signal handler (node.c), read by
     * the supervisor once after the reap (crash.c). Its own cache lines:
     * nothing the hub writes shares them. */
    _Alignas(128) struct pm__crash_rec crash;
};
_Static_assert(sizeof(struct pm__ctl) <= PM__CTL_SIZE, "the control block fits its page");

typedef struct pm__link {
    int memfd;
    int hub_efd;
    int node_efd;
    void *map;
    size_t map_size;
    pm__ring tx; /* hub: down producer; worker: up producer */
    pm__ring rx; /* hub: up consumer; worker: down consumer */
} pm__link;

/* Sets every fd to -1 and the map to NULL (the sentinels). */
void pm__link_zero(pm__link *l);

/* Hub side: creates the memory and the doorbells and attaches the hub's
 * ends. Returns 0 or -errno with nothing left open. */
int pm__link_create(pm__link *l, unsigned slot, uint64_t incarnation, uint64_t ring_cap,
                    pid_t supervisor, uint32_t heartbeat_ms);

/* Worker side: maps an inherited memfd and attaches the worker's ends. */
int pm__link_attach(pm__link *l, int memfd, int node_efd, int hub_efd);

/* The control block (worker side: trusted; hub side: written once). */
static inline const struct pm__ctl *pm__link_ctl(const pm__link *l)
{
    return (const struct pm__ctl *)l->map;
}

/* Unmaps and closes everything; keeps errno. */
void pm__link_close(pm__link *l);

#endif /* PM_LINK_H */
