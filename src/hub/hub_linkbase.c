/* SPDX-License-Identifier: MIT */
/* hub_linkbase.c - the bottom of the link port: the link of a host, a frame's wire form and address ports, putting a frame onto a link, the table of requests in flight over it, the lists of senders a link holds, and main's frames that need nothing more (a notice, a mesh broadcast's BCAST, forgetting a request). Calls no other file of the link port. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <stdlib.h>
#include <string.h>

#include "hub_int.h"
#include "hub_linkport.h"

/*
 * On a link, a frame's host fields are relative to the two ends: both are 0 on
 * the wire (dst_host: the receiving host, src_host: the sending host), and its
 * node fields are address ports (0: the supervisor). The receiving hub stamps
 * src_host with the index of the host the link authenticated as; a frame that
 * names any other host (a relay through a third host, or a forgery) is dropped
 * and counted (doc/reliability.md, fault 38). The sender's port and
 * incarnation are the sending supervisor's word. A deadline crosses as
 * milliseconds remaining (at least 1), never as one host's CLOCK_MONOTONIC.
 */

pm__hub_link *pm__hub_link_of(pm__hub *h, uint16_t host)
{
    if (h->links == NULL || host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS)
        return NULL;
    return &h->links[host];
}

/* A local node's address port: 0 for the supervisor (peer mode). */
uint32_t pm__hub_link_port_of(const pm__hub *h, uint32_t node)
{
    return node == PM__NODE_MAIN ? 0u : h->names.base_port + node;
}

/* The local node an address port of this host names, or -ENOENT. */
int pm__hub_link_node_of(const pm__hub *h, uint32_t port, uint32_t *node)
{
    if (port == 0) {
        *node = PM__NODE_MAIN;
        return 0;
    }
    if (port < h->names.base_port || port - h->names.base_port >= h->nports)
        return -ENOENT;
    *node = port - h->names.base_port;
    return 0;
}

/* Encodes f (its fields in wire form already) with payload and hands it to
 * the link. 0, or -EHOSTUNREACH (down) / -ENOBUFS (full: the caller holds
 * the sender, or drops the frame and counts it). */
int pm__hub_link_put(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload)
{
    if (l == NULL || !l->up)
        return -EHOSTUNREACH;
    pm__frame_encode(f, h->link_buf);
    if (f->len > 0 && payload != h->link_buf + PM__FRAME_HDR_SIZE) /* a FRAG is read in place */
        memcpy(h->link_buf + PM__FRAME_HDR_SIZE, payload, f->len);
    h->link_putting++;
    int rc = l->send(l->arg, h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    h->link_putting--;
    /* Wiped at once: the buffer must not keep a worker's message around. */
    explicit_bzero(h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    if (rc == 0) {
        l->frames_out++;
        return 0;
    }
    return rc == -EAGAIN ? -ENOBUFS : -EHOSTUNREACH;
}

/* pm__hub_link_put for a frame that is dropped when the link has no room (an
 * answer, a broadcast's result): counted on the link. */
int pm__hub_link_put_or_drop(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                       const void *payload)
{
    int rc = pm__hub_link_put(h, l, f, payload);
    if (rc < 0 && l != NULL)
        l->dropped++;
    return rc;
}

/* The wire form of a local frame for the far end: relative hosts, our
 * address port as the source, the deadline as milliseconds remaining. */
pm__frame_hdr pm__hub_link_wire_hdr(const pm__hub *h, const pm__frame_hdr *f, uint32_t src_node)
{
    pm__frame_hdr w = *f;
    w.dst_host = 0;
    w.src_host = 0;
    w.src = pm__hub_link_port_of(h, src_node);
    if (f->deadline_ms > 0) {
        int64_t left = f->deadline_ms - (int64_t)pm__now_ms();
        w.deadline_ms = left >= 1 ? left : 1;
    }
    return w;
}

/* Remembers a request sent over l. -EBUSY when the table is full of live
 * entries. */
int pm__hub_link_inflight_add(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, uint32_t requester,
                        uint64_t requester_inc)
{
    int64_t now = (int64_t)pm__now_ms();
    if (l->ninflight == l->cap) {
        /* Full: forget the expired first (no timer walks these tables; a
         * link carries them only as long as it is up). */
        for (uint32_t i = 0; i < l->ninflight;) {
            if (l->inflight[i].expires_ms <= now)
                l->inflight[i] = l->inflight[--l->ninflight];
            else
                i++;
        }
    }
    if (l->ninflight == l->cap) {
        if (l->cap == PM__REMOTE_INFLIGHT_MAX)
            return -EBUSY;
        uint32_t cap = l->cap == 0 ? 64 : l->cap * 2;
        pm__remote_inflight *v = realloc(l->inflight, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        l->inflight = v;
        l->cap = cap;
    }
    pm__remote_inflight *e = &l->inflight[l->ninflight++];
    e->requester = requester;
    e->requester_inc = requester_inc;
    e->target = f->dst;
    e->target_inc = f->dst_inc;
    e->request_id = f->request_id;
    int64_t expires = now + (int64_t)h->inflight_lifetime_ms;
    if (f->deadline_ms > 0 && f->deadline_ms < expires)
        expires = f->deadline_ms;
    e->expires_ms = expires;
    return 0;
}

/* Takes the entry an answer from port `target` to requester/id settles:
 * 1 (copied to *out), or 0. */
int pm__hub_link_inflight_take(pm__hub_link *l, uint32_t requester, uint64_t id, uint32_t target,
                         pm__remote_inflight *out)
{
    return pm__hub_link_inflight_take_inc(l, requester, 0, id, target, out);
}

int pm__hub_link_inflight_take_inc(pm__hub_link *l, uint32_t requester, uint64_t inc, uint64_t id,
                                   uint32_t target, pm__remote_inflight *out)
{
    for (uint32_t i = 0; i < l->ninflight; i++) {
        pm__remote_inflight *e = &l->inflight[i];
        if (e->requester == requester && e->request_id == id && e->target == target &&
            (inc == 0 || e->requester_inc == 0 || e->requester_inc == inc)) { /* main's: 0 */
            *out = *e;
            l->inflight[i] = l->inflight[--l->ninflight];
            return 1;
        }
    }
    return 0;
}

pm__hub_link *pm__hub_link_main_frame(pm__hub *h, uint16_t host, uint8_t type, uint32_t port, size_t len,
                                pm__frame_hdr *f)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return NULL;
    }
    memset(f, 0, sizeof(*f));
    f->type = type;
    f->len = (uint32_t)len;
    f->dst = port;
    f->src = PM__NODE_MAIN;
    return l;
}

/* An undeliverable notice for a remote requester (to: PM__REMOTE_NODE)
 * about our address port about_port. */
void pm__hub_link_notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err)
{
    pm__hub_link *l = pm__hub_link_of(h, PM__REMOTE_HOST(to));
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.dst = PM__REMOTE_PORT(to);
    n.dst_inc = to_inc;
    n.src = about_port;
    n.src_inc = about_inc;
    n.request_id = request_id;
    n.error = err;
    if (pm__hub_link_put_or_drop(h, l, &n, NULL) < 0)
        h->notices_dropped++;
}

void pm__hub_link_forget(pm__hub *h, uint16_t host, uint32_t requester, uint64_t id,
                         uint32_t port)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    pm__remote_inflight e;
    if (l != NULL)
        pm__hub_link_inflight_take(l, requester, id, port, &e);
}

/*
 * Backpressure across a link: sender p's frame found host's output queue
 * full. p is held exactly like a sender waiting for a full local
 * destination: the frame stays unconsumed in its ring (port.c stops reading
 * it), and it is read again when the link's output queue has drained below
 * half (pm__hub_link_writable, from the mesh's write path) or the link goes
 * down (its frame is then answered -EHOSTUNREACH). Other senders keep
 * flowing; only the link's own senders wait for it. The list is intrusive
 * (pm__port.link_next): nothing is allocated per held sender.
 */
void pm__hub_link_hold_on(pm__hub *h, int *head, int *tail, uint16_t host, pm__port *p)
{
    p->blocked_on = PM__BLOCKED_LINK;
    if (p->link_held != 0)
        return; /* listed already: on this link, or (its queue was reset when
                   an earlier incarnation ended) on another link, which lets
                   go of it at its next drain; read again, it finds this link
                   full and is listed here then */
    p->link_held = host;
    p->link_next = -1;
    if (*tail >= 0)
        h->ports[*tail].link_next = (int)p->index;
    else
        *head = (int)p->index;
    *tail = (int)p->index;
}

void pm__hub_link_queue_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->held_waits++;
    pm__hub_link_hold_on(h, &l->held_head, &l->held_tail, host, p);
}

/* Sender p's frame for a remote port whose window is full: held until a
 * CREDIT reopens it (the same list discipline; a credit releases every
 * sender held on this link's windows, and those whose window is still
 * full are held again: a few re-reads per credit, never a loop). */
void pm__hub_link_window_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->window_waits++;
    pm__hub_link_hold_on(h, &l->window_held_head, &l->window_held_tail, host, p);
}

/* Reads again every sender on the list (head, tail). */
void pm__hub_link_release(pm__hub *h, int *head, int *tail)
{
    if (*head < 0)
        return;
    /* Detached first: a sender read again may be held here again. */
    int i = *head;
    *head = *tail = -1;
    while (i >= 0) {
        pm__port *p = &h->ports[i];
        i = p->link_next;
        p->link_held = 0;
        p->link_next = -1;
        if (p->blocked_on == PM__BLOCKED_LINK) {
            p->blocked_on = -1;
            pm__hub_mark_busy(h, p); /* read again this turn or the next */
        }
    }
}

int pm__hub_link_bcast(pm__hub *h, uint16_t host, uint64_t id, int64_t deadline_ms,
                       const void *data, size_t len)
{
    pm__frame_hdr f;
    /* dst port 0: the remote supervisor */
    pm__hub_link *l = pm__hub_link_main_frame(h, host, PM__FT_BCAST, 0, len, &f);
    if (l == NULL)
        return -EHOSTUNREACH;
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    pm__frame_hdr w = pm__hub_link_wire_hdr(h, &f, PM__NODE_MAIN);
    return pm__hub_link_put(h, l, &w, data);
}
