/* SPDX-License-Identifier: MIT */
/*
 * node_lanesend.c - a worker's frames to a peer it shares a direct lane
 * with (doc/design.md, "Direct lanes", Order): which path each takes, the
 * wait for the switch to the lane.
 */
#define _GNU_SOURCE
#include "node.h"

#include <time.h>

#include "channel/proto.h"
#include "node_lanes.h"

/* A stream to a peer we now share a lane with would never take it: our
 * lane frames wait until the peer has taken our hub frames, and a stream's
 * receiver is always a ring behind, so each frame sent meanwhile through
 * the hub is one more to take (the stream measured no faster with lanes,
 * stop 40). A blocking send therefore waits for the switch, polling the
 * peer's words (it rings no doorbell for them), while the peer keeps
 * taking our hub frames (PM__LANE_SWITCH_WAIT_MS past its last progress:
 * a deep backlog on a slow machine still drains), PM__LANE_SWITCH_MAX_MS
 * at most, never past the request's deadline. 1 the lane may take the
 * frame now; 0 it takes the hub: a peer that does not get there (busy,
 * stopped, hostile) costs us no more than that wait once per back-off
 * (node_lanes.h). */
static int lane_switch_wait(pm_node *n, pm__node_lane *e, const pm__frame_hdr *h)
{
    uint64_t now = pm__now_ms();
    if (!pm__node_lane_switch_due(e, now))
        return 0;
    uint64_t cap = now + PM__LANE_SWITCH_MAX_MS, end = now + PM__LANE_SWITCH_WAIT_MS;
    if (h->deadline_ms > 0 && (uint64_t)h->deadline_ms < cap)
        cap = (uint64_t)h->deadline_ms;
    uint64_t taken = pm__lane_peer_taken(e->lane);
    const struct timespec pause = {0, 20000};
    for (; now < end && now < cap; now = pm__now_ms()) {
        /* Seen ready: the lane is ours from now on (pm__node_lane_path
         * keeps on_lane), not judged again on the peer's words, which a
         * hostile peer could flip so that each send waited again (a review
         * of stop 41). */
        if (pm__node_lane_path(e, 1) == 1)
            return 1;
        if (pm__node_shut_down(n) || pm__node_ls_gone(n->ls, e))
            return 0;
        uint64_t t = pm__lane_peer_taken(e->lane);
        if (t != taken) {
            taken = t;
            end = now + PM__LANE_SWITCH_WAIT_MS;
        }
        pm__node_beat(n);
        nanosleep(&pause, NULL);
    }
    pm__node_lane_switch_missed(e, now);
    return 0;
}

/* The lane's part of a send to e's peer (doc/design.md, "Direct lanes",
 * Order): 1 sent on the lane; 0 the frame takes the hub (the lane does
 * not carry it, the peer has not taken our hub frames yet, or the lane is
 * gone or broken); -EAGAIN (no wait), -ESHUTDOWN. fits: the lane may
 * carry this frame. A frame for the hub while our lane frames are unread
 * waits for them first, so it cannot overtake them. */
int pm__node_lane_send(pm_node *n, pm__node_lane *e, const pm__frame_hdr *h, const void *data,
                     size_t len, int fits, int wait)
{
    if (h->type == PM__FT_REPLY) {
        /* A reply never waits (a requester that does not read its lane
         * would hold its server here for good: a review of stop 40): on
         * the lane if there is room now, else through the hub, which
         * relays it as a LANE_REPLY, bounded by our own hold there. Its
         * order with our other frames to the requester cannot be seen: a
         * requester takes its reply as its request's answer and anything
         * else that came meanwhile later, from its stash, whatever order
         * they came in. */
        if (fits && pm__node_lane_path(e, fits) == 1 && pm__lane_send(e->lane, h, data, len) == 0)
            return 1;
        return 0;
    }
    for (;;) {
        int path = pm__node_lane_path(e, fits);
        if (path == 0 && fits && wait && lane_switch_wait(n, e, h))
            continue;
        if (path == 0)
            return 0;
        int rc = -EAGAIN;
        if (path == 1) {
            pm__node_beat(n);
            rc = pm__lane_send(e->lane, h, data, len);
            if (rc == 0)
                return 1;
            if (rc != -EAGAIN) {
                e->broken = 1; /* the peer broke our ring's indices */
                e->on_lane = 0;
                return 0;
            }
        }
        if (!wait)
            return -EAGAIN;
        if (pm__node_shut_down(n))
            return -ESHUTDOWN;
        /* A request waits no longer than its own deadline. */
        if (h->deadline_ms > 0 && pm__now_ms() >= (uint64_t)h->deadline_ms)
            return -ETIMEDOUT;
        pm__node_beat(n);
        rc = path == 1 ? pm__ring_wait_space(&e->lane->tx, PM__FRAME_HDR_SIZE + len, pm__node_wait_chunk(n))
                       : pm__ring_wait_consumed(&e->lane->tx, pm__ring_head(&e->lane->tx),
                                                pm__node_wait_chunk(n));
        if (rc < 0) {
            e->broken = 1;
            e->on_lane = 0;
        }
        /* The peer may have ended while we waited: its lane is then
         * revoked and the frame takes the hub (which answers for a dead
         * peer). Only looked at: the lane is finished by the next receive,
         * not here, where data may point into the lane's buffer (a reply
         * that echoes the request it answers). */
        if (pm__node_ls_gone(n->ls, e))
            return 0;
    }
}
