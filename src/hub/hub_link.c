/* SPDX-License-Identifier: MIT */
/* hub_link.c - peer links as hub ports: frames for a remote host go over its link (wire form, the remote in-flight table), frames from a link are validated, stamped with the link's host and delivered as if local. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/bigmsg.h"
#include "base/le.h"
#include "hub_int.h"
#include "hub_link.h"

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

pm__hub_link *pm__hl_of(pm__hub *h, uint16_t host)
{
    if (h->links == NULL || host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS)
        return NULL;
    return &h->links[host];
}

/* The allocations of peer mode, on first use. 0 or -ENOMEM. */
static int links_alloc(pm__hub *h)
{
    if (h->links != NULL)
        return 0;
    h->links = calloc(PM__MAX_HOSTS, sizeof(*h->links));
    if (h->links == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < PM__MAX_HOSTS; i++) {
        h->links[i].held_head = h->links[i].held_tail = -1;
        h->links[i].wheld_head = h->links[i].wheld_tail = -1;
        h->links[i].fheld_head = h->links[i].fheld_tail = -1;
        h->links[i].tx_fd = h->links[i].rx_fd = -1;
    }
    /* The frame being encoded holds a worker's traffic: a mapping of its
     * own, zeroed in a fork-mode child (as the hub's scratch buffer). */
    void *p = mmap(NULL, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(h->links);
        h->links = NULL;
        return -ENOMEM;
    }
    (void)madvise(p, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD, MADV_WIPEONFORK);
    h->link_buf = p;
    return 0;
}

void pm__hub_links_free(pm__hub *h)
{
    if (h->links != NULL) {
        for (unsigned i = 0; i < PM__MAX_HOSTS; i++) {
            free(h->links[i].inflight);
            free(h->links[i].win.v);
            free(h->links[i].cred.v);
            pm__close(h->links[i].tx_fd);
            pm__close(h->links[i].rx_fd);
        }
        free(h->links);
        h->links = NULL;
    }
    if (h->link_buf != NULL)
        munmap(h->link_buf, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD);
    h->link_buf = NULL;
}

/* A local node's address port: 0 for the supervisor (peer mode). */
uint32_t pm__hl_port_of(const pm__hub *h, uint32_t node)
{
    return node == PM__NODE_MAIN ? 0u : h->names.base_port + node;
}

/* The local node an address port of this host names, or -ENOENT. */
int pm__hl_node_of(const pm__hub *h, uint32_t port, uint32_t *node)
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
int pm__hl_put(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload)
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

/* pm__hl_put for a frame that is dropped when the link has no room (an
 * answer, a broadcast's result): counted on the link. */
int pm__hl_put_or_drop(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                            const void *payload)
{
    int rc = pm__hl_put(h, l, f, payload);
    if (rc < 0 && l != NULL)
        l->dropped++;
    return rc;
}

void pm__hub_link_drops(const pm__hub *h, uint16_t host, uint64_t *forged, uint64_t *malformed)
{
    const pm__hub_link *l = host < PM__MAX_HOSTS && h->links != NULL ? &h->links[host] : NULL;
    *forged = l != NULL ? l->forged : 0;
    *malformed = l != NULL ? l->malformed + l->frag_dropped : 0;
}

void pm__hub_link_caps(pm__hub *h, uint16_t host, uint32_t caps)
{
    pm__hub_link *l = pm__hl_of(h, host);
    if (l != NULL)
        l->caps = caps;
}

/* The wire form of a local frame for the far end: relative hosts, our
 * address port as the source, the deadline as milliseconds remaining. */
pm__frame_hdr pm__hl_wire_hdr(const pm__hub *h, const pm__frame_hdr *f, uint32_t src_node)
{
    pm__frame_hdr w = *f;
    w.dst_host = 0;
    w.src_host = 0;
    w.src = pm__hl_port_of(h, src_node);
    if (f->deadline_ms > 0) {
        int64_t left = f->deadline_ms - (int64_t)pm__now_ms();
        w.deadline_ms = left >= 1 ? left : 1;
    }
    return w;
}

/* Remembers a request sent over l. -EBUSY when the table is full of live
 * entries. */
static int rinflight_add(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, uint32_t requester,
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
        if (l->cap == PM__RINFLIGHT_MAX)
            return -EBUSY;
        uint32_t cap = l->cap == 0 ? 64 : l->cap * 2;
        pm__rinflight *v = realloc(l->inflight, cap * sizeof(*v));
        if (v == NULL)
            return -EBUSY;
        l->inflight = v;
        l->cap = cap;
    }
    pm__rinflight *e = &l->inflight[l->ninflight++];
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

/* Takes the entry an answer from port `target` to requester/id settles. */
static int rinflight_take(pm__hub_link *l, uint32_t requester, uint64_t id, uint32_t target,
                          pm__rinflight *out)
{
    for (uint32_t i = 0; i < l->ninflight; i++) {
        pm__rinflight *e = &l->inflight[i];
        if (e->requester == requester && e->request_id == id && e->target == target) {
            *out = *e;
            l->inflight[i] = l->inflight[--l->ninflight];
            return 1;
        }
    }
    return 0;
}

/* Takes back the entry a request just got from rinflight_add. By key, not
 * by popping the last entry: a send that brought the link down would have
 * emptied the table already (pm__hub_link_down), and a pop would wrap. */
static void unadd(pm__hub_link *l, uint32_t src, const pm__frame_hdr *f)
{
    pm__rinflight e;
    rinflight_take(l, src, f->request_id, f->dst, &e);
}

/* p's REPLY to a request that came over host f->dst_host's link (l, NULL
 * or down when it is unreachable): to main when it answers a remote mesh
 * broadcast fanned out here, else onto the link; frag: a large message the
 * link takes as FRAGs, big: a large message. Always consumed (0). */
static int relay_remote_reply(pm__hub *h, pm__hub_link *l, pm__port *p, pm__frame_hdr *f,
                              const void *payload, int frag, int big)
{
    uint32_t src = p->index;
    /* It answers a request that came over the link: p's table has it
     * under the remote requester. */
    pm__inflight e;
    uint32_t requester = PM__REMOTE_NODE(f->dst_host, f->dst & 0xFFFFu);
    if (f->dst > 0xFFFFu || !pm__hub_take_inflight(h, p, requester, f->request_id, &e)) {
        h->late_replies++;
        return 0;
    }
    if (f->dst == 0 && pm__hub_bcast_of(h, f->request_id, f->dst_host)) {
        /* p's answer to a remote host's mesh broadcast fanned out
         * here: it is p's result of our broadcast (remote_bcast_done
         * sends the BRESULTs), never a plain REPLY over the link. */
        pm__hub_deliver_main(h, f, payload);
        p->relayed++;
        return 0;
    }
    if (l == NULL || !l->up) {
        /* The requester's host is unreachable, whatever the reply's
         * size: counted as any frame to that host (-EHOSTUNREACH). No
         * notice can cross a link that is down, and the requester's
         * own hub answered its request -EHOSTUNREACH when the link
         * went down there. */
        h->unreachable++;
        h->replies_dropped++;
        return 0;
    }
    pm__frame_hdr w = pm__hl_wire_hdr(h, f, src);
    w.dst_inc = e.requester_inc;
    if (frag) {
        pm__hl_frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
        h->cur_fd = -1; /* the link's now */
        p->relayed++;
        p->relayed_bytes += h->cur_len;
        return 0;
    }
    if (big) {
        /* A peer without large messages (or no link): the requester
         * learns so now instead of waiting for its deadline. */
        pm__hl_notice_port(h, requester, e.requester_inc, pm__hl_port_of(h, src), p->incarnation,
                    f->request_id, -EMSGSIZE);
        return 0;
    }
    /* A reply never waits (the replier is never held back, as locally):
     * a link without room drops it, counted; the requester's deadline
     * ends its wait. */
    if (pm__hl_put_or_drop(h, l, &w, payload) < 0)
        h->replies_dropped++;
    else
        p->relayed++;
    return 0;
}

/* A frame (not a reply, not a large message) from p onto link l, whose
 * host is up: within the destination's window and the link's buffer, else
 * p is held (-EAGAIN) or answered. */
static int relay_remote_frame(pm__hub *h, pm__hub_link *l, pm__port *p, pm__frame_hdr *f,
                              const void *payload)
{
    uint32_t src = p->index;
    /* The destination's window first: a remote worker that does not read
     * holds back only the senders that write to it. */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f->len;
    if (pm__hl_window_take(l, f->dst, wbytes, 0) < 0) {
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hl_window_hold(h, l, f->dst_host, p);
        return -EAGAIN;
    }
    pm__frame_hdr w = pm__hl_wire_hdr(h, f, src);
    int rc = pm__hl_put(h, l, &w, payload);
    if (rc < 0)
        pm__hl_window_untake(l, f->dst, wbytes);
    if (rc == -ENOBUFS) {
        /* The link is full: the sender waits, its frame stays in its ring
         * and is read again when the link drains (pm__hl_link_hold). */
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hl_link_hold(h, l, f->dst_host, p);
        return -EAGAIN;
    }
    if (rc < 0) {
        /* The link went down while sending: its requests are answered by
         * pm__hub_link_down; this frame is answered here. */
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, rc);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += f->len;
    return 0;
}

/* A frame from local port p (or main, p NULL) for a remote host. */
int pm__hub_relay_remote(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__hub_link *l = pm__hl_of(h, f->dst_host);
    uint32_t src = p->index;
    int big = (f->flags & PM__FF_MEMFD) != 0;
    if (l != NULL && l->up && l->tx_fd >= 0 && (big || l->tx_owner == src)) {
        /* One large message at a time per link; and a sender whose large
         * message is still crossing sends nothing else over that link
         * meanwhile, so its frames keep their order. Held until it has
         * crossed (pm__hl_frag_tx_end), like any held sender. */
        pm__hl_hold_on(h, &l->fheld_head, &l->fheld_tail, f->dst_host, p);
        return -EAGAIN;
    }
    int frag = big && l != NULL && l->up && (l->caps & PM__PEER_CAP_FRAG) != 0;
    if (f->type == PM__FT_REPLY)
        return relay_remote_reply(h, l, p, f, payload, big && frag, big);
    if (l == NULL || !l->up) {
        h->unreachable++;
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EHOSTUNREACH);
        return 0;
    }
    if (big && !frag) {
        /* A peer that does not take large messages (hello bit 1). */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EMSGSIZE);
        return 0;
    }
    if (f->type == PM__FT_REQUEST && rinflight_add(h, l, f, src, p->incarnation) < 0) {
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EBUSY);
        return 0;
    }
    if (big) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. Its request entry is made first, so the link
         * going down mid-message answers it -EHOSTUNREACH, once. */
        pm__frame_hdr w = pm__hl_wire_hdr(h, f, src);
        pm__hl_frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
        h->cur_fd = -1;
        p->relayed++;
        p->relayed_bytes += h->cur_len;
        return 0;
    }
    return relay_remote_frame(h, l, p, f, payload);
}

pm__hub_link *pm__hl_main_frame(pm__hub *h, uint16_t host, uint8_t type, uint32_t port, size_t len,
                                pm__frame_hdr *f)
{
    pm__hub_link *l = pm__hl_of(h, host);
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

/* Main's send or reply to a remote node (pm_cluster_send/reply). */
int pm__hub_link_main_send(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc, int type,
                           uint64_t request_id, const void *data, size_t len)
{
    pm__frame_hdr f;
    pm__hub_link *l = pm__hl_main_frame(h, host, (uint8_t)type, port, len, &f);
    if (l == NULL)
        return -EHOSTUNREACH;
    /* A large message of main's still crossing goes first: main's frames
     * to one host keep their order. */
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN;
    f.dst_inc = inc;
    f.request_id = request_id;
    if (len > PM_MAX_PAYLOAD) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. */
        pm__frame_hdr w = pm__hl_wire_hdr(h, &f, PM__NODE_MAIN);
        return pm__hl_main_big(h, l, &w, data, len);
    }
    /* Main is never held: a full link is -EAGAIN (try later). */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    int counted = type == PM__FT_MSG || type == PM__FT_REQUEST;
    if (counted && pm__hl_window_take(l, port, wbytes, 1) < 0)
        return -EAGAIN;
    pm__frame_hdr w = pm__hl_wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = pm__hl_put(h, l, &w, data);
    if (rc < 0 && counted)
        pm__hl_window_untake(l, port, wbytes);
    return rc == -ENOBUFS ? -EAGAIN : rc;
}

int pm__hub_link_main_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                              uint64_t id, int64_t deadline_ms, const void *data, size_t len)
{
    pm__frame_hdr f;
    pm__hub_link *l = pm__hl_main_frame(h, host, PM__FT_REQUEST, port, len, &f);
    if (l == NULL)
        return -EHOSTUNREACH;
    f.dst_inc = inc;
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN; /* main's large message still crossing goes first */
    if (len > PM_MAX_PAYLOAD) {
        /* The entry first, so the link going down mid-message answers the
         * request -EHOSTUNREACH, once. */
        if (rinflight_add(h, l, &f, PM__NODE_MAIN, 0) < 0)
            return -EBUSY;
        pm__frame_hdr w = pm__hl_wire_hdr(h, &f, PM__NODE_MAIN);
        int rc = pm__hl_main_big(h, l, &w, data, len);
        if (rc < 0) {
            pm__rinflight e;
            rinflight_take(l, PM__NODE_MAIN, id, port, &e);
        }
        return rc;
    }
    /* The entry first: the link may go down inside send, and its answer
     * (-EHOSTUNREACH) must find the request. */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    if (pm__hl_window_take(l, port, wbytes, 1) < 0)
        return -ENOMEM;
    if (rinflight_add(h, l, &f, PM__NODE_MAIN, 0) < 0) {
        pm__hl_window_untake(l, port, wbytes);
        return -EBUSY;
    }
    pm__frame_hdr w = pm__hl_wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = pm__hl_put(h, l, &w, data);
    if (rc < 0) {
        pm__rinflight e;
        pm__hl_window_untake(l, port, wbytes);
        rinflight_take(l, PM__NODE_MAIN, id, port, &e);
        return rc == -ENOBUFS ? -EAGAIN : rc;
    }
    return 0;
}

void pm__hub_link_forget(pm__hub *h, uint16_t host, uint32_t requester, uint64_t id,
                         uint32_t port)
{
    pm__hub_link *l = pm__hl_of(h, host);
    pm__rinflight e;
    if (l != NULL)
        rinflight_take(l, requester, id, port, &e);
}

/* An undeliverable notice for a remote requester (to: PM__REMOTE_NODE)
 * about our address port about_port. */
void pm__hl_notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err)
{
    pm__hub_link *l = pm__hl_of(h, PM__REMOTE_HOST(to));
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.dst = PM__REMOTE_PORT(to);
    n.dst_inc = to_inc;
    n.src = about_port;
    n.src_inc = about_inc;
    n.request_id = request_id;
    n.error = err;
    if (pm__hl_put_or_drop(h, l, &n, NULL) < 0)
        h->notices_dropped++;
}

void pm__hub_link_notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                         uint64_t about_inc, uint64_t request_id, int err)
{
    if (PM__REMOTE_PORT(to) == 0 && pm__hub_bcast_of(h, request_id, PM__REMOTE_HOST(to))) {
        /* A worker holding a remote host's mesh broadcast ended (or its
         * request could not reach it): the broadcast's result here, which
         * goes back as its BRESULT, not a notice over the link. */
        if (pm__hub_bcast_result(h, request_id, err, NULL, 0) < 0)
            h->late_replies++;
        return;
    }
    pm__hl_notice_port(h, to, to_inc, pm__hl_port_of(h, about), about_inc, request_id, err);
}

void pm__hub_link_up(pm__hub *h, uint16_t host, int (*send)(void *, const void *, size_t),
                     void *arg)
{
    if (host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS || links_alloc(h) < 0)
        return;
    pm__hub_link *l = &h->links[host];
    pm__hl_lw_clear(&l->win);
    pm__hl_lw_clear(&l->cred);
    l->tx_id = 0;
    memset(&l->rx, 0, sizeof(l->rx));
    l->up = 1;
    l->send = send;
    l->arg = arg;
}

void pm__hub_link_down(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = pm__hl_of(h, host);
    if (l == NULL || !l->up)
        return;
    l->up = 0;
    l->send = NULL;
    l->arg = NULL;
    /* Its held senders are read again: their frames are answered
     * -EHOSTUNREACH now (pm__hub_relay_remote), not when it comes back.
     * Windows and credits were the connection's: a new one starts empty. */
    pm__hl_release(h, &l->held_head, &l->held_tail);
    pm__hl_release(h, &l->wheld_head, &l->wheld_tail);
    pm__hl_lw_clear(&l->win);
    pm__hl_lw_clear(&l->cred);
    l->cred_unsent = 0;
    l->caps = 0;
    /* A large message half sent or half received dies with the link: its
     * request (if it was one) is in the table answered below. */
    if (l->tx_fd >= 0)
        l->frag_dropped++;
    pm__hl_frag_tx_end(h, l);
    if (l->rx.active)
        l->frag_dropped++;
    pm__close(l->rx_fd);
    l->rx_fd = -1;
    memset(&l->rx, 0, sizeof(l->rx));
    /* Detached first: answering may run callbacks that send again. */
    pm__rinflight *v = l->inflight;
    uint32_t n = l->ninflight;
    l->inflight = NULL;
    l->ninflight = l->cap = 0;
    for (uint32_t i = 0; i < n; i++)
        pm__hub_notice_at(h, v[i].requester, v[i].requester_inc, host, v[i].target,
                          v[i].target_inc, v[i].request_id, -EHOSTUNREACH);
    free(v);
    pm__hub_mbcast_host_down(h, host);
}

/* Pushes a frame from a link to local port d, charged as an answer; a
 * large message reassembled here (PM__FF_MEMFD) goes on d's fd path with
 * h->cur_fd, which d's queue takes on success. */
static int deliver_push(pm__hub *h, pm__port *d, const pm__frame_hdr *f, const void *payload)
{
    if ((f->flags & PM__FF_MEMFD) == 0)
        return pm__hub_push(h, d, f, payload, f->len, PM__CHARGE_ANSWER);
    int rc = pm__hub_push_fd(h, d, f, h->cur_fd, h->cur_len, PM__CHARGE_ANSWER);
    if (rc == 0)
        h->cur_fd = -1;
    return rc;
}

/* A message or request from the link for local node `node`. 1 when it
 * waits in the node's queue (tagged: credited back when it leaves), else 0
 * (delivered or refused: the caller credits it now). */
int pm__hl_deliver(pm__hub *h, pm__hub_link *l, uint16_t host, pm__frame_hdr *f,
                        const unsigned char *payload, uint32_t node)
{
    uint32_t requester = PM__REMOTE_NODE(host, f->src);
    if (node == PM__NODE_MAIN) {
        pm__hub_deliver_main(h, f, payload);
        return 0;
    }
    int err = pm__hub_check_dest(h, node, f->dst_inc);
    if (err < 0) {
        pm__hub_link_notice(h, requester, f->src_inc, node, f->dst_inc, f->request_id, err);
        return 0;
    }
    pm__port *d = &h->ports[node];
    f->dst = node;
    f->dst_inc = d->incarnation;
    if (f->type == PM__FT_REQUEST &&
        pm__hub_add_inflight(h, d, requester, f->src_inc, f->request_id, f->deadline_ms) < 0) {
        pm__hub_link_notice(h, requester, f->src_inc, node, d->incarnation, f->request_id, -EBUSY);
        return 0;
    }
    /* Charged as an answer: a link is never held back (it would hold every
     * sender of that host); past the destination's bound it is refused. */
    pm__qframe *last = d->q_tail;
    int rc = deliver_push(h, d, f, payload);
    if (rc == 0 && d->q_tail != last && (f->flags & PM__FF_MEMFD) == 0) {
        d->q_tail->credit_host = host; /* queued: credited when it leaves */
        d->q_tail->credit_port = pm__hl_port_of(h, node);
        return 1;
    }
    if (rc == 0)
        return 0;
    if (f->type == PM__FT_REQUEST)
        pm__hub_drop_last_inflight(h, d);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, node, PM_REASON_CORRUPT_RING);
    l->dropped++;
    pm__hub_link_notice(h, requester, f->src_inc, node, d->incarnation, f->request_id,
                        rc == -EBADMSG        ? -EHOSTDOWN
                        : rc == -ETOOMANYREFS ? -EAGAIN /* refused for now (send_big) */
                                              : -ENOBUFS);
    return 0;
}

/* A reply or notice from the link for local requester `node`. */
void pm__hl_answer(pm__hub *h, pm__hub_link *l, pm__frame_hdr *f,
                        const unsigned char *payload, uint32_t node)
{
    pm__rinflight e;
    int known = f->request_id != 0 && rinflight_take(l, node, f->request_id, f->src, &e);
    /* Main takes answers only to its own requests over this link: a notice
     * about anything else (a pm_cluster_send, a forgery) would otherwise
     * settle whatever local request or broadcast shares its id. A worker
     * likewise: a notice with a request id answers one of its requests
     * over this link or nothing (pm_node_request matches by id alone, so
     * a peer could otherwise fail the worker's call to a local worker);
     * only notices about messages (id 0) pass without an entry. */
    if (!known && (f->type == PM__FT_REPLY || node == PM__NODE_MAIN || f->request_id != 0)) {
        h->late_replies++;
        return;
    }
    if (known && e.expires_ms < (int64_t)pm__now_ms() && f->type == PM__FT_REPLY &&
        node != PM__NODE_MAIN) {
        h->late_replies++; /* the requester gave up */
        return;
    }
    uint64_t inc = known ? e.requester_inc : f->dst_inc;
    if (node == PM__NODE_MAIN) {
        pm__hub_deliver_main(h, f, payload);
        return;
    }
    if (pm__hub_check_dest(h, node, inc) < 0) {
        h->late_replies++;
        return;
    }
    f->dst = node;
    f->dst_inc = h->ports[node].incarnation;
    int rc = deliver_push(h, &h->ports[node], f, payload);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, node, PM_REASON_CORRUPT_RING);
    if (rc < 0)
        h->replies_dropped++;
}

void pm__hub_link_frame(pm__hub *h, uint16_t host, const unsigned char *frame, size_t len)
{
    pm__hub_link *l = pm__hl_of(h, host);
    if (l == NULL || !l->up)
        return;
    pm__frame_hdr f;
    if (pm__frame_decode(frame, len, PM_MAX_PAYLOAD, &f) < 0 || f.deadline_ms < 0) {
        l->malformed++;
        return;
    }
    if (f.src_host != 0 || f.dst_host != 0) {
        l->forged++; /* it claims a host other than the link's */
        return;
    }
    if ((f.flags & PM__FF_MEMFD) != 0) {
        l->malformed++; /* an announcement of an fd no link can carry */
        return;
    }
    l->frames_in++;
    /* The identity comes from the link, never from the frame. */
    f.src_host = host;
    if (f.src > 0xFFFFu) {
        l->malformed++; /* not an address port */
        return;
    }
    if (f.deadline_ms > 0)
        f.deadline_ms += (int64_t)pm__now_ms();
    const unsigned char *payload = frame + PM__FRAME_HDR_SIZE;
    uint32_t node;
    int err = pm__hl_node_of(h, f.dst, &node);
    switch (f.type) {
    case PM__FT_MSG:
    case PM__FT_REQUEST: {
        /* Whatever happens to it, the frame is credited back: now, or when
         * it leaves the destination's queue. */
        uint32_t port = f.dst, bytes = PM__FRAME_HDR_SIZE + f.len;
        if (err < 0)
            pm__hl_notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc,
                        f.request_id, err);
        if (err < 0 || pm__hl_deliver(h, l, host, &f, payload, node) == 0)
            pm__hub_link_credit(h, host, port, bytes);
        return;
    }
    case PM__FT_CREDIT:
        pm__hl_credit_in(h, l, &f, payload);
        return;
    case PM__FT_FRAG:
        pm__hl_frag_in(h, l, host, &f, payload);
        return;
    case PM__FT_REPLY:
    case PM__FT_UNDELIVERABLE:
        /* A notice is a negative errno and nothing else (protocol.md 6): an
         * error of 0 with a payload would read as a reply. */
        if (err < 0 || (f.type == PM__FT_UNDELIVERABLE && (f.error >= 0 || f.len != 0))) {
            l->malformed++;
            return;
        }
        pm__hl_answer(h, l, &f, payload, node);
        return;
    case PM__FT_BCAST:
        pm__hl_bcast_in(h, l, host, &f, payload);
        return;
    case PM__FT_BRESULT:
    case PM__FT_BDONE:
        if (f.dst != 0 || f.request_id < PM__BCAST_ID_BASE ||
            (f.type == PM__FT_BDONE && (f.len != 4 || f.error != 0))) {
            l->malformed++;
            return;
        }
        pm__hub_mbcast_frame(h, host, &f, payload);
        return;
    default:
        l->malformed++; /* lifecycle frames never cross a link */
        return;
    }
}
