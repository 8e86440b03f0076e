/* SPDX-License-Identifier: MIT */
/* node.h - the worker side of a channel (struct pm_node): node.c,
 * node_messaging.c, node_crash.c. */
#ifndef PM_NODE_H
#define PM_NODE_H

#include <stdatomic.h>
#include <unistd.h> /* getppid */

#include "base/internal.h"
#include "channel/bigmsg.h"
#include "channel/channel.h"
#include "channel/frame.h"

struct pm__init_msg; /* proto.h */


/* A message set aside by pm_node_request while it waits for its reply. */
typedef struct pm__stash {
    struct pm__stash *next;
    pm__frame_hdr h;
    int fd;               /* a large message: its checked memfd (else -1) */
    uint64_t big_len;
    unsigned char data[];
} pm__stash;

struct pm_node {
    uint32_t magic;       /* PM__MAGIC_NODE; 0 once closed */
    uint32_t gen;         /* pm__fork_gen() of the worker process */
    int heap;             /* pm_node_join allocated it (exec mode); fork mode: procmesh's */
    pm__channel channel;
    pm_address self;
    unsigned slot;
    void *init_data;
    size_t init_len;
    int ready_sent;
    pid_t supervisor;
    /* Messaging. */
    uint64_t next_req;    /* request ids */
    int cur_in_ring;      /* the last message returned is still in the ring */
    pm__stash *cur_stash; /* ... or was this stash entry */
    pm__stash *stash_head;
    pm__stash *stash_tail;
    size_t stash_bytes;
    unsigned stash_fds;   /* large messages set aside (PM__STASH_MAX_FDS) */
    const void *cur_map;  /* the last message returned was large: its mapping */
    size_t cur_map_len;
    int stopping;         /* the supervisor asked us to stop */
    int fd_armed;         /* a timed-out wait left the doorbell armed for pm_node_fd */
    uint64_t late_replies; /* answers nobody waited for any more: dropped (torture reports them) */
    /* Our large messages whose frames the hub has not consumed: where each
     * frame ends in the up ring, oldest at ahead_head (bigmsg.h,
     * PM__BIGMSG_AHEAD_MAX). */
    uint64_t ahead_end[PM__BIGMSG_AHEAD_MAX];
    unsigned ahead_head, ahead_n;
    struct pm__node_ls *ls; /* direct lanes (node_lanes.h), NULL until the first */
    unsigned lane_turn;   /* which of the hub ring and the lanes is read first */
    int lane_paced;       /* the last receive's message came by a lane and we sent
                             nothing since: the next receive paces itself
                             (node_lanes.h pm__node_ls_pace) */
    /* The address of the last local sender a message came from, made once
     * per sender (fill_msg): from_inc 0 and from_node 0: none yet. */
    pm_address from_addr;
    uint32_t from_node;
    uint64_t from_inc;
};

/* 0 when n is a live node of this process, else -EINVAL (NULL, not a node,
 * closed) or -EPERM (used in a child of the worker: the channel is the
 * worker's, and a second user would corrupt its rings). Inline: every send
 * and receive starts with it. */
static inline int pm__node_check(const pm_node *n)
{
    if (n == NULL || n->magic != PM__MAGIC_NODE)
        return -EINVAL;
    if (n->gen != atomic_load_explicit(&pm__fork_generation, memory_order_relaxed))
        return -EPERM;
    return 0;
}

/* Longest single wait between checks that the supervisor is still there. */
#define PM__WAIT_CHUNK_MS 100

/* The supervisor asked us to stop or fenced us (flags in the control
 * block): two loads, no system call. */
static inline int pm__node_told_to_stop(const pm_node *n)
{
    const struct pm__ctl *ctl = pm__channel_ctl(&n->channel);
    return n->stopping || atomic_load_explicit(&ctl->stop, memory_order_acquire) != 0 ||
           atomic_load_explicit(&ctl->fenced, memory_order_acquire) != 0;
}

/* told_to_stop, or the supervisor is gone (PDEATHSIG normally kills us
 * first; this is for when it could not). */
static inline int pm__node_shut_down(pm_node *n)
{
    return pm__node_told_to_stop(n) || getppid() != n->supervisor;
}

/* Progress for the supervisor's liveness check: a plain store to our own
 * cache line of the control block, no system call. */
static inline void pm__node_beat(pm_node *n)
{
    struct pm__ctl *ctl = n->channel.map;
    atomic_store_explicit(&ctl->beats, atomic_load_explicit(&ctl->beats, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Longest single wait: short enough to notice a dead supervisor within a
 * second and to beat at least four times per heartbeat timeout while we
 * wait (waiting for work counts as alive; a stopped process does not beat). */
static inline int pm__node_wait_chunk(const pm_node *n)
{
    uint32_t hb = pm__channel_ctl(&n->channel)->heartbeat_ms;
    int chunk = PM__WAIT_CHUNK_MS;
    if (hb > 0 && hb / 4 < (uint32_t)chunk)
        chunk = hb / 4 > 0 ? (int)(hb / 4) : 1;
    return chunk;
}

/* Runs the worker half of the handshake on an attached channel: HELLO, then
 * waits for INIT (giving up with -ESHUTDOWN when the supervisor is gone). */
int pm__node_handshake(pm_node *n);

/* Fork mode: a node over a channel the child inherited from the hub (the
 * child's copy of the hub-side struct: the fds are the same, the ends are
 * re-attached from the worker's side), with what INIT would have said
 * (init, built from the child's copy of the supervisor's state): no
 * handshake on the ring, the worker's first frame is READY. supervisor:
 * the fork's parent, which the child has checked getppid() against. */
int pm__node_from_hub_channel(pm_node *n, const pm__channel *hub, const struct pm__init_msg *init,
                           pid_t supervisor);

/* node_bigsend.c: a message above PM_MAX_PAYLOAD as a sealed memfd (wait:
 * for room, else -EAGAIN). 0 or a negative errno. */
int pm__node_send_big(pm_node *n, const pm__frame_hdr *h0, const void *data, size_t len, int wait);

/* node_lanesend.c (doc/design.md, "Direct lanes", Order). lane_send: the
 * lane's part of a send to e's peer: 1 sent on the lane; 0 the frame takes
 * the hub; -EAGAIN (wait 0), -ESHUTDOWN, -ETIMEDOUT (a request's
 * deadline); fits: the lane may carry it. */
struct pm__node_lane;
int pm__node_lane_send(pm_node *n, struct pm__node_lane *e, const pm__frame_hdr *h,
                       const void *data, size_t len, int fits, int wait);

/* In the supervisor before each fork-mode child: what the child's
 * pm__node_from_hub_channel then inherits ready-made (node_crash.h). */
void pm__node_fork_prime(void);

#endif /* PM_NODE_H */
