/* SPDX-License-Identifier: MIT */
/*
 * node_lanes.h - a worker's use of its direct lanes (doc/design.md, "Direct
 * lanes"), below the node: it is given the node's channel and identity and
 * a place to keep a revoked lane's frames, and never calls the node.
 * node_messaging.c sends, receives and waits with it; node.c frees it.
 */
#ifndef PM_NODE_LANES_H
#define PM_NODE_LANES_H

#include <stdint.h>

#include "channel/channel.h"
#include "channel/frame.h"
#include "nodelane.h"

typedef struct pm__node_ls pm__node_ls;

/* The lanes' state of a node (made on its first lane, or pm_node_fd):
 * ch, the node's channel; slot and inc, its identity as the supervisor
 * gave it; keep(arg, ...) keeps a frame a revoked lane held for the next
 * receive. NULL without memory. */
pm__node_ls *pm__node_ls_new(pm__channel *ch, uint32_t slot, uint64_t inc,
                             void (*keep)(void *arg, const pm__frame_hdr *h, const void *payload),
                             void *arg);
void pm__node_ls_free(pm__node_ls *s); /* NULL: nothing */
/* The caller let its last message go (a receive, a request's wait): the
 * memory of a lane finished under it, if any, goes (nodelane.h, the
 * husk). NULL: nothing. */
void pm__node_ls_drop_husk(pm__node_ls *s);
/* Lanes are attached (s may be NULL). */
int pm__node_ls_live(const pm__node_ls *s);
/* How many lanes are attached (s may be NULL). */
unsigned pm__node_ls_held(const pm__node_ls *s);
/* The revocations in the control block: each revoked lane's frames kept,
 * its waited-on request lost. How many lanes were revoked. */
int pm__node_ls_revoked(pm__node_ls *s);
/* 1 (once) when request id was lost with its lane: -EHOSTDOWN. */
int pm__node_ls_lost(pm__node_ls *s, uint64_t id);
/* A PM__FT_LANE or PM__FT_LANE_MARK frame off the hub ring (the caller
 * consumes it afterwards): an offer adopted (its marker sent), a
 * revocation's wake-up, a peer's marker. 1 when a lane it finished left
 * frames for the stash or lost a request (the caller looks there before
 * it waits again), else 0. */
int pm__node_ls_control(pm__node_ls *s, const pm__frame_hdr *h, const void *payload);
/* The same from a send path, for the lane frame at the head of the hub
 * ring: a peer's marker, a revocation's wake-up, an offer (at an index
 * whose revoked lane is finished first, that lane alone). The lane the
 * last message came by is finished here on a copy of its state, its
 * buffer kept as the husk (the data being sent, and the caller's
 * pm_message, may lie in it until the message is let go). 1 taken (the
 * caller consumes it); 0 left for the next receive: an offer whose index
 * holds a lane that could not be finished (not revoked, no memory for
 * the copy, a husk held already), or a wake-up of an older supervisor
 * (no lane named) while the last message's lane is revoked. */
int pm__node_ls_control_early(pm__node_ls *s, const pm__frame_hdr *h, const void *payload);
/* A frame taken off the hub ring: counted for its sender's lane. */
void pm__node_ls_took(pm__node_ls *s, const pm__frame_hdr *h);
/* 1 when e's revocation is in the control block (its peer has ended), read
 * without finishing the lane (which a receive, or a lane frame of the
 * hub's, does). */
int pm__node_ls_gone(const pm__node_ls *s, const pm__node_lane *e);
/* The lane a frame to h's destination concerns (our marker sent, not
 * revoked), or NULL. */
pm__node_lane *pm__node_ls_to(pm__node_ls *s, const pm__frame_hdr *h);
/* The path of the next frame to e's peer: 1 the lane, 0 the hub, -EAGAIN
 * the hub once the lane is drained. fits: the frame is one a lane carries. */
int pm__node_lane_path(pm__node_lane *e, int fits);
/* The switch to the lane a blocking send may wait for (node_lanesend.c,
 * lane_switch_wait): pm__node_lane_switch_due, 1 when e is not on the lane
 * yet, not broken and no back-off holds (now_ms); _ready, 1 once the
 * peer has attached and taken every frame we sent it through the hub;
 * _missed, a wait that ended without it: the next waits after a back-off
 * that doubles, PM__LANE_SWITCH_BACKOFF_MS up to 16 times that. A wait
 * lasts PM__LANE_SWITCH_WAIT_MS past the peer's last progress (its count
 * of our hub frames taken), PM__LANE_SWITCH_MAX_MS at most. */
#define PM__LANE_SWITCH_WAIT_MS 10u
#define PM__LANE_SWITCH_MAX_MS 200u
#define PM__LANE_SWITCH_BACKOFF_MS 100u
int pm__node_lane_switch_due(const pm__node_lane *e, uint64_t now_ms);
int pm__node_lane_switch_ready(const pm__node_lane *e);
void pm__node_lane_switch_missed(pm__node_lane *e, uint64_t now_ms);
/* The next frame from any lane, the lanes in turn: 1 or 0; the lane it
 * came by. */
int pm__node_ls_next(pm__node_ls *s, pm__frame_hdr *h, const void **payload);
pm__node_lane *pm__node_ls_last(pm__node_ls *s);
/* A PM__FT_LANE_REPLY answers request id, sent on the lane to its sender. */
int pm__node_ls_reply_ok(pm__node_ls *s, const pm__frame_hdr *h, uint64_t id);
/* The wait for request id ended: a lane's reply to it is late from now. */
void pm__node_ls_forget(pm__node_ls *s, uint64_t id);
/* One wait on the hub ring and every lane that may be read: a spin first
 * when may_spin (the learnt budget, as a ring's own wait), then one park on
 * every doorbell (ringwait.h). */
int pm__node_ls_wait(pm__node_ls *s, int timeout_ms, int may_spin);
/* A receive of a worker reading a stream on a lane (its last message came
 * by a lane, and it has sent nothing since): when it has taken every frame
 * it knew of on its lanes, it waits PM__LANE_PACE_NS before it looks
 * again, spinning, where a CPU is left beside the writer. A reader that
 * looks as soon as it has caught up takes each frame the moment it is
 * published, so each publish must take back the cache line of the
 * writer's index, and the publish's fence (ring.c wake_if_waiting) waits
 * for it: the two ends then go in lock-step, a frame at a time (stop 41:
 * 4.4-5.5M frames/s on this guest); a reader a few frames behind takes
 * them in one look (14.7-15.8M). An exchange (a send since) never waits
 * here: its answer is looked for at once. */
#define PM__LANE_PACE_NS 1000u
void pm__node_ls_pace(pm__node_ls *s);
/* Empties every lane's doorbell (this end's), e.g. before pm_node_fd is
 * armed. Nothing without lanes. */
void pm__node_ls_drain(pm__node_ls *s);
/* pm_node_fd's arming of the lanes: 1 when a frame is there already. */
int pm__node_ls_arm(pm__node_ls *s);
void pm__node_ls_disarm(pm__node_ls *s);
/* pm_node_fd's epoll fd (made on the first call): the hub's doorbell and
 * each lane's. */
int pm__node_ls_fd(pm__node_ls *s);

#endif /* PM_NODE_LANES_H */
