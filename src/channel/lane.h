/* SPDX-License-Identifier: MIT */
/*
 * lane.h - a direct lane between two workers: two SPSC rings in one sealed
 * memfd that only those two processes map (doc/design.md, "Direct lanes").
 *
 * Layout of a lane's memory (PM__LANE_SIZE bytes):
 *
 *   [0, 4096)          the lane's own page: one cache line per end, each
 *                      written by that end only (pm__lane_shared)
 *   [4096, 4096 + R)   ring 0: written by end 0 (the lower slot), read by end 1
 *   [4096 + R, +2R)    ring 1: written by end 1, read by end 0
 *   (R = pm__ring_region_size(PM__LANE_CAP))
 *
 * Both ends are workers, so neither trusts the other: each ring end
 * validates every shared value it loads (ring.h), the geometry and the
 * peer's identity come from the supervisor (never from this memory), and
 * a frame is copied out of the ring before it is checked (pm__lane_recv):
 * the peer may rewrite a frame in place after any check of the shared
 * bytes. The memfd is sealed against shrinking and growing (shm.h), so no
 * ftruncate by the peer can make an access to the mapping raise SIGBUS.
 *
 * This module is the lane's data path and its rules, with no knowledge of
 * how a lane is brokered: the supervisor makes the memory
 * (pm__lane_create) and hands its fd to both workers; each worker attaches
 * its end (pm__lane_attach) with what the supervisor told it.
 */
#ifndef PM_LANE_H
#define PM_LANE_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "frame.h"
#include "ring.h"

/* Lanes one worker holds at most (its table, and the revocation words of
 * its control block); past it, its traffic takes the hub. */
#define PM__LANES_MAX 8u
/* Each direction's ring: 64 KiB of data. */
#define PM__LANE_CAP ((uint64_t)64 << 10)
/* The largest payload a lane carries. A larger message takes the hub's
 * path, after the lane has been drained (ordering, pm__lane_drained). A
 * quarter of a ring: four such frames fit at once, and the frame the
 * receiver copies out (pm__lane's buffer) stays small. */
#define PM__LANE_MAX_PAYLOAD (16u * 1024u)
#define PM__LANE_MAX_FRAME (PM__FRAME_HDR_SIZE + PM__LANE_MAX_PAYLOAD)
#define PM__LANE_PAGE 4096u
/* Bytes of a lane's memory: its page and two rings. */
#define PM__LANE_SIZE (PM__LANE_PAGE + 2 * (PM__RING_HDR_SIZE + PM__LANE_CAP))

/* One end's line of the lane's page. hub_taken: the frames from the other
 * end that this end has taken off its hub ring (the ordering rule: the
 * other end sends on the lane only once everything it sent through the hub
 * has been taken, pm__lane_may_send). Written by this end only; the other
 * end reads it and can be misled by it only about the order of its own
 * frames to this end. */
struct pm__lane_line {
    _Alignas(PM__CACHELINE) _Atomic uint64_t hub_taken;
    /* 1 once this end has attached (pm__lane_attach): the other end writes
     * on the lane only then, so frames never go to an end that could not
     * take the lane (no memory, no address space). Its own word: a peer
     * that lies about it loses only its own frames. */
    _Atomic uint32_t attached;
};

struct pm__lane_shared {
    struct pm__lane_line end[2];
};
_Static_assert(sizeof(struct pm__lane_shared) <= PM__LANE_PAGE, "the lane's page holds its lines");

/* Who is at each end, as the supervisor said (never read from the lane). */
typedef struct pm__lane_who {
    uint32_t self_slot;
    uint64_t self_inc;
    uint32_t peer_slot;
    uint64_t peer_inc;
} pm__lane_who;

/* Why a frame read from a lane was dropped (counted in pm__lane.dropped). */
enum pm__lane_drop {
    PM__LANE_OK = 0,
    PM__LANE_DROP_MALFORMED = 1, /* the header does not decode, or a field a lane frame
                                    never sets is set (error, hosts, ids) */
    PM__LANE_DROP_TYPE = 2,      /* not MSG, REQUEST or REPLY, or a flag (a large message) */
    PM__LANE_DROP_DST = 3,       /* not addressed to this end's slot and incarnation */
    PM__LANE_DROP_REPLY = 4,     /* a reply to no request this end sent on the lane */
    PM__LANE_DROP_N
};

typedef struct pm__lane {
    void *map; /* the lane's memory, PM__LANE_SIZE bytes; NULL: not attached */
    struct pm__lane_shared *sh;
    unsigned end; /* 0 or 1: the ring this end writes */
    pm__lane_who who;
    pm__ring tx;
    pm__ring rx;
    int revoked;       /* the peer's writes end at limit (pm__lane_revoke) */
    uint64_t limit;    /* rx's producer index at the revocation */
    void *snap;        /* revoked: rx's ring as it was then, private (rx reads it) */
    uint64_t req_out;  /* the request this end sent on the lane and waits on, 0: none */
    uint64_t hub_sent; /* frames this end sent the peer through the hub */
    uint64_t hub_taken; /* frames from the peer this end took off its hub ring */
    uint64_t delivered;
    uint64_t dropped[PM__LANE_DROP_N];
    /* The frame pm__lane_recv hands out: a private copy, never the ring's
     * bytes (the peer can rewrite those after any check). */
    _Alignas(8) unsigned char buf[PM__LANE_MAX_FRAME];
} pm__lane;

/* Supervisor side: a lane's memory, sealed, both rings formatted (with
 * pwrite: the supervisor never maps a lane, so a fork of it inherits
 * none). 0 with *fd (the caller hands it to both workers and closes it),
 * or -errno with nothing left open. */
int pm__lane_create(int *fd);

/* Worker side: maps the lane's memory from fd (which must be sealed against
 * shrinking and at least PM__LANE_SIZE bytes: -EINVAL otherwise; fd may be
 * closed afterwards) and attaches this end: end 0 or 1 as the supervisor
 * said, who from the supervisor. wake_fd wakes the peer (its doorbell),
 * park_fd is this end's doorbell; either may be -1 (no parking). 0 or
 * -errno with nothing mapped. */
int pm__lane_attach(pm__lane *l, int fd, unsigned end, const pm__lane_who *who, int wake_fd,
                    int park_fd);

/* Unmaps; the lane is then detached (l->map NULL). Safe on a detached lane. */
void pm__lane_detach(pm__lane *l);

/*
 * The rules of a frame copied out of a lane (frame, len: a private copy),
 * pure: decodes it and returns 0 with *out stamped (src and src_inc are the
 * peer's from who, src_host local, dst_inc this end's incarnation), or the
 * pm__lane_drop reason. reply_id: the request this end waits on from the
 * peer on this lane (0: none; a REPLY is accepted only for it).
 */
int pm__lane_judge(const pm__lane_who *who, uint64_t reply_id, const void *frame, size_t len,
                   pm__frame_hdr *out);

/* Sends one frame to the peer: MSG, REQUEST (request_id not 0) or REPLY,
 * no flags, at most PM__LANE_MAX_PAYLOAD bytes. The source and destination
 * fields are this lane's (what h says of them is not used). A REQUEST
 * becomes the one this end waits on (req_out). 0, -EAGAIN when the ring is
 * full, -EINVAL (a type or flag a lane does not carry), -EMSGSIZE, -EPIPE
 * once revoked, -EBADMSG when the ring is poisoned. */
int pm__lane_send(pm__lane *l, const pm__frame_hdr *h, const void *payload, size_t len);

/*
 * The next frame from the peer: 1 with *h (stamped, pm__lane_judge) and
 * *payload (h->len bytes in the lane's private buffer, valid until the next
 * call), 0 when there is none (or the lane is revoked and every frame
 * written before the revocation was read, or every frame published when
 * this call first looked was refused: a peer flooding refused frames
 * cannot keep the reader in one call; a wait's arming looks again, so
 * nothing is slept on), -EBADMSG when the peer broke the
 * ring (poisoned: nothing more is read from it, revoked or not). Frames the rules refuse
 * are consumed, counted in l->dropped and skipped. A REPLY accepted ends
 * the wait of req_out.
 */
int pm__lane_recv(pm__lane *l, pm__frame_hdr *h, const void **payload);

/*
 * The supervisor said the peer can no longer write (its incarnation ended
 * and was reaped with every process of its containment; doc/design.md,
 * "Direct lanes"): the peer's producer index is read now, once, and the
 * ring's bytes are copied now, once, into private memory: the frames up to
 * that index are still delivered, from the copy, and nothing written after
 * the revocation (a frame past the index, or a rewrite of one below it by a
 * process that still maps the lane) is ever read. Sends fail with -EPIPE
 * from then on. Idempotent (the first index stays). 0; -EBADMSG when the
 * index read is impossible (poisoned), -ENOMEM when there is no memory for
 * the copy: nothing more is delivered then.
 */
int pm__lane_revoke(pm__lane *l);

/* Ordering across the lane and the hub (doc/design.md, "Direct lanes",
 * Order): a frame to the peer through the hub is counted with
 * pm__lane_sent_via_hub; a frame from the peer taken off the hub ring with
 * pm__lane_took_from_hub (published for the peer). pm__lane_may_send: 1
 * when the peer has taken every frame this end sent it through the hub, so
 * a frame on the lane cannot overtake them. pm__lane_drained: 1 when the
 * peer has read every frame this end put on the lane and handed the space
 * back (a reader does when it finds the lane empty, every quarter of the
 * ring, and before it sleeps), so a frame through the hub cannot overtake
 * them (0 not yet, -EBADMSG). */
void pm__lane_sent_via_hub(pm__lane *l);
void pm__lane_took_from_hub(pm__lane *l);
int pm__lane_may_send(const pm__lane *l);
/* The peer's count of our hub frames it took (its word, unchecked: only a
 * wait's measure of progress). */
uint64_t pm__lane_peer_taken(const pm__lane *l);
/* 1 once the peer has attached its end (its word of the lane's page). */
int pm__lane_peer_attached(const pm__lane *l);
int pm__lane_drained(pm__lane *l);

#endif /* PM_LANE_H */
