/* SPDX-License-Identifier: MIT */
/*
 * hub_linkport.h - what the files of the hub's link port share, bottom to
 * top: hub_linkbase.c (a link, its wire form, putting a frame, its requests
 * in flight, held senders), hub_linkbig.c (the FRAG cursor), hub_linkflow.c
 * (windows, credits, main's frames), hub_linkin.c (frames from a link into
 * this host), hub_linkbcast.c (a remote host's mesh broadcast) and
 * hub_link.c (the port itself). Each calls only the files before it. A
 * header of no file of its own (the hub's calls into the link port are in
 * hub_int.h and hub_core.h); nothing else includes it.
 */
#ifndef PM_HUB_LINKPORT_H
#define PM_HUB_LINKPORT_H

#include "hub_core.h"

/* hub_linkbase.c: the bottom of the link port. */

/* host's link, or NULL (not peer mode, the local host, out of range). */
pm__hub_link *pm__hub_link_of(pm__hub *h, uint16_t host);
/* For a frame of main's to host: its link when up, with *f cleared and its
 * type, length, destination port and source (main) set; else NULL with the
 * frame counted unreachable (the caller returns -EHOSTUNREACH). */
pm__hub_link *pm__hub_link_main_frame(pm__hub *h, uint16_t host, uint8_t type, uint32_t port, size_t len,
                                pm__frame_hdr *f);
/* A local node's address port: 0 for the supervisor (peer mode). */
uint32_t pm__hub_link_port_of(const pm__hub *h, uint32_t node);
/* The local node an address port of this host names, or -ENOENT. */
int pm__hub_link_node_of(const pm__hub *h, uint32_t port, uint32_t *node);
/* Encodes f (wire form) with payload onto l. 0, or -EHOSTUNREACH (down) /
 * -ENOBUFS (full). _or_drop: a frame that is dropped on failure, counted. */
int pm__hub_link_put(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload);
int pm__hub_link_put_or_drop(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload);
/* The wire form of a local frame from src_node for the far end. */
pm__frame_hdr pm__hub_link_wire_hdr(const pm__hub *h, const pm__frame_hdr *f, uint32_t src_node);
/* An undeliverable notice for a remote requester about our address port. */
void pm__hub_link_notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err);
/* The table of requests sent over l: an entry for request f from
 * requester (0, -EBUSY when full of live entries, or -ENOMEM when it
 * cannot grow), and taking the entry
 * an answer from port target to requester/id settles (1, or 0: none). */
int pm__hub_link_inflight_add(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, uint32_t requester,
                        uint64_t requester_inc);
int pm__hub_link_inflight_take(pm__hub_link *l, uint32_t requester, uint64_t id, uint32_t target,
                         pm__remote_inflight *out);
/* The same for an answer that names the requester's incarnation (inc; 0:
 * any; main's entries, incarnation 0, take any): an entry of another
 * incarnation is not taken (a worker that
 * restarted and asks again under the same id is not answered the old
 * question's answer). */
int pm__hub_link_inflight_take_inc(pm__hub_link *l, uint32_t requester, uint64_t inc, uint64_t id,
                                   uint32_t target, pm__remote_inflight *out);
/* Holds sender p on the list (head, tail) of host's link; _link_hold: the
 * link's output queue is full; _window_hold: the destination's window is. */
void pm__hub_link_hold_on(pm__hub *h, int *head, int *tail, uint16_t host, pm__port *p);
void pm__hub_link_queue_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p);
void pm__hub_link_window_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p);
/* Reads again every sender on the list (head, tail). */
void pm__hub_link_release(pm__hub *h, int *head, int *tail);

/* hub_linkbig.c: large messages onto a link as FRAG frames. */

/* The message being sent ended: its fd closed, senders waiting for the
 * cursor read again. */
void pm__hub_link_frag_tx_end(pm__hub *h, pm__hub_link *l);
/* Sends fragments while the link takes them. */
void pm__hub_link_frag_pump(pm__hub *h, pm__hub_link *l);
/* Starts sending large message fd (len bytes, w its wire header) from
 * owner over l; the fd is l's from now on. */
void pm__hub_link_frag_start(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, uint32_t owner, int fd,
                       uint64_t len);
/* Main's large message to l: 0, -EMSGSIZE, -EAGAIN or the memfd's error. */
int pm__hub_link_main_big(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, const void *data,
                    size_t len);

/* hub_linkflow.c: windows and credits. */

void pm__hub_link_windows_clear(pm__hub_link_window_table *t);
/* A CREDIT frame from l. */
void pm__hub_link_credit_in(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                      const unsigned char *payload);
/* Remote port's window for one more frame: 0, or -EAGAIN (full). */
int pm__hub_link_window_take(pm__hub_link *l, uint32_t port, uint32_t bytes, int force);
void pm__hub_link_window_untake(pm__hub_link *l, uint32_t port, uint32_t bytes);
/* Sends the credits l owes at their step; what the link has no room for
 * waits for its next drain. */
void pm__hub_link_send_credits(pm__hub *h, pm__hub_link *l);

/* hub_linkin.c: frames from a link into this host. */

/* A message or request from host's link for local node `node`: 1 when it
 * waits in the node's queue (credited when it leaves), else 0. */
int pm__hub_link_deliver(pm__hub *h, pm__hub_link *l, uint16_t host, pm__frame_hdr *f,
                   const unsigned char *payload, uint32_t node);
/* A reply or notice from the link for local requester `node`. */
void pm__hub_link_answer(pm__hub *h, pm__hub_link *l, pm__frame_hdr *f, const unsigned char *payload,
                   uint32_t node);
/* A FRAG from host's link. */
void pm__hub_link_frag_in(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                    const unsigned char *payload);

/* hub_linkbcast.c: a BCAST from host's link, fanned out here. */
/* The timeout of the fan-out of a BCAST with `left` ms to its origin's
 * deadline: a quarter of it less, at most 200 ms less, at least 1 ms and
 * at most INT_MAX (doc/protocol.md 6, "Mesh broadcast"). Pure. */
int pm__hub_link_bcast_timeout(int64_t left);
void pm__hub_link_bcast_in(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                     const unsigned char *payload);

#endif /* PM_HUB_LINKPORT_H */
