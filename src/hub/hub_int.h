/* SPDX-License-Identifier: MIT */
/* hub_int.h - what hub_route.c (routing, in flight), hub_queue.c (queues), hub_main.c (main's requests), hub_bcast.c (broadcasts) and the link port (hub_link*.c) share; nothing else includes it. */
#ifndef PM_HUB_INT_H
#define PM_HUB_INT_H

#include <limits.h>

#include "hub_core.h"

/* A broadcast result or request not answered yet. */
#define RESULT_PENDING INT_MIN

/* hub_lane.c (doc/design.md, "Direct lanes"): a frame relayed from p to
 * a local worker, counted for the pair (a lane is set up once it earns
 * one and both ends can take it at once); whether the two incarnations
 * share a lane; the lanes of p's ending incarnation revoked at their other
 * ends (pm__hub_port_close). */
void pm__hub_lane_count(pm__hub *h, const pm__port *p, const pm__frame_hdr *f);
int pm__hub_lane_between(const pm__hub *h, uint32_t a, uint64_t ainc, uint32_t b, uint64_t binc);
void pm__hub_lanes_end(pm__hub *h, const pm__port *p);
void pm__hub_lanes_free(pm__hub *h);

/* hub_queue.c: */
int pm__hub_push(pm__hub *h, pm__port *d, const pm__frame_hdr *f, const void *payload, size_t len,
                uint32_t charge);
/* The same for a large message: f announces it (PM__FF_MEMFD), fd is its
 * sealed memfd of big_len bytes. On 0 the fd is the hub's (sent on, or
 * queued); on failure the caller still owns it. */
int pm__hub_push_fd(pm__hub *h, pm__port *d, const pm__frame_hdr *f, int fd, uint64_t big_len,
                    uint32_t charge);
pm__frame_hdr pm__hub_main_hdr(int type, const pm__port *p);
/* Frees a frame that left d's queue (delivered or dropped). */
void pm__hub_dequeue(pm__hub *h, pm__port *d, pm__qframe *q);
/* hub_core.c: */
int pm__hub_add_inflight(pm__hub *h, pm__port *target, uint32_t requester, uint64_t requester_inc,
                        uint64_t id, int64_t deadline);
int pm__hub_take_inflight(pm__hub *h, pm__port *target, uint32_t requester, uint64_t id,
                         pm__inflight *out);
/* The same for an answer naming its requester's incarnation (0: any): a
 * remote requester's entries are not purged when it restarts, so an old
 * and a new request of the same id may both wait here. */
int pm__hub_take_inflight_inc(pm__hub *h, pm__port *target, uint32_t requester,
                              uint64_t requester_inc, uint64_t id, pm__inflight *out);
void pm__hub_drop_last_inflight(pm__hub *h, pm__port *target);
/* hub_core.c: the hub's timer forgets the requests in flight past their
 * deadline or lifetime (pm__hub_fire); a closing port's table is detached
 * (the caller answers it: *n entries) and the requests it made forgotten. */
void pm__hub_purge_due(pm__hub *h, uint64_t now);
pm__inflight *pm__hub_detach_inflight(pm__hub *h, pm__port *p, uint32_t *n);
void pm__hub_forget_requests_of(pm__hub *h, const pm__port *p);
/* Forgets, in every port's table, each entry forget(h, entry, arg) names. */
void pm__hub_forget_inflight_if(pm__hub *h, int (*forget)(pm__hub *, const pm__inflight *, const void *),
                                const void *arg);
int pm__hub_check_dest(const pm__hub *h, uint32_t node, uint64_t inc);
/* The bytes a relayed frame carries, for the counters (a large message's:
 * its memfd's, h->cur_len). Every frame counted in a port's relayed
 * frames adds these to its relayed bytes. */
static inline uint64_t pm__hub_relay_len(const pm__hub *h, const pm__frame_hdr *f)
{
    return (f->flags & PM__FF_MEMFD) != 0 ? h->cur_len : f->len;
}

/* hub_main.c: */
void pm__hub_deliver_main(pm__hub *h, const pm__frame_hdr *f, const void *payload);
/* A reply to main from p that no in-flight entry waits for: counted late;
 * one answer fewer p owes (pm__port.stuck). */
void pm__hub_main_late(pm__hub *h, pm__port *p, uint64_t request_id);
/* hub_bcast.c: */
void pm__hub_bcast_complete(pm__hub *h, pm__bcast *b);
/* Ends every local broadcast still waiting, its pending results -ECANCELED. */
void pm__hub_bcast_cancel_all(pm__hub *h);
/* b's results still pending become err, their requests forgotten (a late
 * reply is counted late, never relayed). */
void pm__hub_bcast_end_pending(pm__hub *h, pm__bcast *b, int err);
/* Records one result of a local broadcast (request id). 0,
 * or -EALREADY (a duplicate, or no broadcast has that id). */
int pm__hub_bcast_result(pm__hub *h, uint64_t id, int err, const void *data, size_t len);
/* pm__hub_broadcast for a remote host's mesh broadcast (src_host: its
 * index; PM__HOST_LOCAL is main's own): each worker gets the request from
 * system@src_host:0, and its reply is still this broadcast's result. */
int pm__hub_broadcast_for(pm__hub *h, uint16_t src_host, const void *data, size_t len,
                          int timeout_ms,
                          void (*cb)(pm_cluster *, const pm_message *, size_t, void *), void *arg);
/* 1 when id is a request of a live broadcast fanned out here for host's
 * mesh broadcast (pm__hub_broadcast_for): an answer to system@host:0 under
 * that id is its result, settled here, not a reply for the link. */
int pm__hub_bcast_of(pm__hub *h, uint64_t id, uint16_t host);
/* hub_main.c: */
void pm__hub_main_request_dispatch_waiting(pm__hub *h);
void pm__hub_main_request_expire(pm__hub *h, int64_t now);
/* hub_queue.c: an undeliverable notice to `to` (a port, main, or a remote
 * requester) about node `about` of host about_host. */
void pm__hub_notice_at(pm__hub *h, uint32_t to, uint64_t to_inc, uint16_t about_host,
                       uint32_t about, uint64_t about_inc, uint64_t request_id, int err);
/* The link port: hub_link.c (relay_remote, links_free), hub_linkflow.c
 * (main_send, main_request, credit), hub_linkin.c (notice), hub_linkbase.c
 * (bcast, forget). */
int pm__hub_relay_remote(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload);
void pm__hub_links_free(pm__hub *h);
/* type: PM__FT_MSG (pm_cluster_send) or PM__FT_REPLY (pm_cluster_reply). */
int pm__hub_link_main_send(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc, int type,
                           uint64_t request_id, const void *data, size_t len);
/* Main's request id to address port `port` of `host` over its link: an
 * entry in the link's table, then the frame. 0, or -EHOSTUNREACH (no link
 * up), -EBUSY (its table is full), -EAGAIN (the link's buffer is full). */
int pm__hub_link_main_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                              uint64_t id, int64_t deadline_ms, const void *data, size_t len);
/* A frame that came over host's link for address port `port` (bytes:
 * header included) left the hub's hands: owed back to the sender. */
void pm__hub_link_credit(pm__hub *h, uint16_t host, uint32_t port, uint32_t bytes);
void pm__hub_link_notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                         uint64_t about_inc, uint64_t request_id, int err);
/* Sends a mesh broadcast's BCAST (id, deadline, payload) to host's link.
 * 0, or -EHOSTUNREACH / -ENOBUFS. */
int pm__hub_link_bcast(pm__hub *h, uint16_t host, uint64_t id, int64_t deadline_ms,
                       const void *data, size_t len);
/* Forgets main's request id to host/port in the link's table (answered,
 * timed out or cancelled here), so that an answer after this is late. */
void pm__hub_link_forget(pm__hub *h, uint16_t host, uint32_t requester, uint64_t id,
                         uint32_t port);

/* hub_bcast.c: a BRESULT or BDONE from host's link (validated: a known
 * part of that host, not settled), and a link gone down (its parts settle
 * as one -EHOSTUNREACH result each). */
void pm__hub_mesh_broadcast_frame(pm__hub *h, uint16_t host, const pm__frame_hdr *f,
                                  const unsigned char *payload);
void pm__hub_mesh_broadcast_host_down(pm__hub *h, uint16_t host);
/* Settles what is due (deadline) or everything (all, with err). */
void pm__hub_mesh_broadcast_fire(pm__hub *h, int64_t now, int all, int err);

#endif /* PM_HUB_INT_H */
