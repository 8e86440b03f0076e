/* SPDX-License-Identifier: MIT */
/*
 * hub.h - the router, as its owner (the cluster) sees it: set-up, routing
 * of a port's frames, main's sends, the hub's deadlines, closing a port,
 * fork mode. The hub's types and the calls of its parts (ports, queues,
 * main's requests, broadcasts, peer links) are in hub_core.h, included
 * here; hub.c sits on top of them, and port.c (a worker's port, which hands
 * every frame it reads to pm__hub_relay) on top of hub.c.
 */
#ifndef PM_HUB_H
#define PM_HUB_H

#include "hub_core.h"

/* hub.c: set-up, routing, main's side. */
int pm__hub_init(pm__hub *h, unsigned nports, const pm__names *names, pm_cluster *app,
                 const pm__hub_ops *ops, void *owner);
void pm__hub_free(pm__hub *h);
/* Relays a validated, stamped frame from port p. 0: consumed (delivered,
 * queued, dropped and counted, or answered undeliverable); -EAGAIN: p's
 * hold is full, leave the frame in p's ring and stop reading p until its
 * frames drain (backpressure). */
int pm__hub_relay(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload);

/* The hub's deadlines (broadcasts, drain timeouts, expiry of requests in
 * flight): the earliest (0 none), and firing the due ones. */
uint64_t pm__hub_next_deadline(const pm__hub *h);
void pm__hub_fire(pm__hub *h, uint64_t now_ms);
/* Main's sends (pm_cluster_send/reply/broadcast): to a ready port. */
int pm__hub_main_send(pm__hub *h, const pm_address *to, int type, uint64_t request_id,
                      const void *data, size_t len);

/* Fork mode, in the child before the bootstrap runs: wipes every copy of
 * other workers' traffic the child inherited from the hub (queued frames,
 * broadcast replies; the scratch buffer is MADV_WIPEONFORK). */
void pm__hub_wipe(pm__hub *h);
/* The stop request: control-block flag and a STOP frame. */
void pm__hub_stop_request(pm__hub *h, unsigned p);
/* A frame from main to port p's current incarnation. 0 or -errno. */
int pm__hub_send_control(pm__hub *h, unsigned p, int type, const void *payload, size_t len);

/* Peer mode: the supervisor is port 0 of its host, and the host table
 * starts with this host (names.host). Before the first port opens. */
void pm__hub_peer_mode(pm__hub *h);
/* The index of a remote host name, assigned on first sight and never
 * reused (written to every open port's control block before it is
 * returned, so no worker sees a frame from a host it cannot name).
 * -ENOSPC past PM__MAX_HOSTS - 1 hosts; -EINVAL for our own name. */
int pm__hub_host_index(pm__hub *h, const char *name);
/* Writes the peer mode and the host table into a new incarnation's control
 * block (before its process starts). */
void pm__hub_hosts_copy(const pm__hub *h, pm__channel *l);

/* The incarnation is gone: requests in flight to it are answered
 * -EHOSTDOWN, its own are forgotten, its queue dropped, its senders
 * unblocked, the port closed. */
void pm__hub_port_close(pm__hub *h, unsigned p);

#endif /* PM_HUB_H */
