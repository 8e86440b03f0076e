/* SPDX-License-Identifier: MIT */
/* hub_link.c - peer links as hub ports: frames for a remote host go over its link, frames from a link are stamped with the link's host and delivered as if local. */
#define _GNU_SOURCE
#include "hub.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hub_int.h"
#include "le.h"

/*
 * On a link, a frame's host fields are relative to the two ends: both are 0
 * on the wire (dst_host: the receiving host, src_host: the sending host),
 * and its node fields are address ports (0: the supervisor). The receiving
 * hub stamps src_host with the index of the host the link authenticated as;
 * a frame that names any other host (a relay through a third host, or a
 * forgery) is dropped and counted (FAULTS.md 38). The sender's port and
 * incarnation are the sending supervisor's word. A deadline crosses as
 * milliseconds remaining (at least 1), never as one host's CLOCK_MONOTONIC.
 */

static pm__hub_link *link_of(pm__hub *h, uint16_t host)
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
        for (unsigned i = 0; i < PM__MAX_HOSTS; i++)
            free(h->links[i].inflight);
        free(h->links);
        h->links = NULL;
    }
    if (h->link_buf != NULL)
        munmap(h->link_buf, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD);
    h->link_buf = NULL;
}

/* A local node's address port: 0 for the supervisor (peer mode). */
static uint32_t port_of(const pm__hub *h, uint32_t node)
{
    return node == PM__NODE_MAIN ? 0u : h->names.base_port + node;
}

/* The local node an address port of this host names, or -ENOENT. */
static int node_of(const pm__hub *h, uint32_t port, uint32_t *node)
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
 * the link. 0, or -EHOSTUNREACH (down) / -ENOBUFS (full), counted. */
static int link_put(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload)
{
    if (l == NULL || !l->up)
        return -EHOSTUNREACH;
    pm__frame_encode(f, h->link_buf);
    if (f->len > 0)
        memcpy(h->link_buf + PM__FRAME_HDR_SIZE, payload, f->len);
    int rc = l->send(l->arg, h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    /* Wiped at once: the buffer must not keep a worker's message around. */
    explicit_bzero(h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    if (rc == 0) {
        l->frames_out++;
        return 0;
    }
    l->dropped++;
    return rc == -EAGAIN ? -ENOBUFS : -EHOSTUNREACH;
}

/* The wire form of a local frame for the far end: relative hosts, our
 * address port as the source, the deadline as milliseconds remaining. */
static pm__frame_hdr wire_hdr(const pm__hub *h, const pm__frame_hdr *f, uint32_t src_node)
{
    pm__frame_hdr w = *f;
    w.dst_host = 0;
    w.src_host = 0;
    w.src = port_of(h, src_node);
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

static void notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err);

/* A frame from local port p (or main, p NULL) for a remote host. */
int pm__hub_relay_remote(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__hub_link *l = link_of(h, f->dst_host);
    uint32_t src = p->index;
    if (f->type == PM__FT_REPLY) {
        /* It answers a request that came over the link: p's table has it
         * under the remote requester. */
        pm__inflight e;
        uint32_t requester = PM__REMOTE_NODE(f->dst_host, f->dst & 0xFFFFu);
        if (f->dst > 0xFFFFu || !pm__hub_take_inflight(h, p, requester, f->request_id, &e)) {
            h->late_replies++;
            return 0;
        }
        if ((f->flags & PM__FF_MEMFD) != 0) {
            /* A large reply cannot cross (yet): the requester learns so
             * now instead of waiting for its deadline. */
            notice_port(h, requester, e.requester_inc, port_of(h, src), p->incarnation,
                        f->request_id, -EMSGSIZE);
            return 0;
        }
        pm__frame_hdr w = wire_hdr(h, f, src);
        w.dst_inc = e.requester_inc;
        if (link_put(h, l, &w, payload) < 0)
            h->replies_dropped++;
        else
            p->relayed++;
        return 0;
    }
    if (l == NULL || !l->up) {
        h->unreachable++;
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EHOSTUNREACH);
        return 0;
    }
    if ((f->flags & PM__FF_MEMFD) != 0) {
        /* A large message's bytes are a memfd on this host: they do not
         * cross a link yet (doc/design.md, "Peer links"). */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EMSGSIZE);
        return 0;
    }
    if (f->type == PM__FT_REQUEST && rinflight_add(h, l, f, src, p->incarnation) < 0) {
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EBUSY);
        return 0;
    }
    pm__frame_hdr w = wire_hdr(h, f, src);
    int rc = link_put(h, l, &w, payload);
    if (rc < 0) {
        /* No backpressure into the sender across a link yet: a full link
         * answers -ENOBUFS, as a full requester's queue does. */
        if (f->type == PM__FT_REQUEST)
            l->ninflight--; /* the entry just added is the last */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, rc);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += f->len;
    return 0;
}

/* Main's send or reply to a remote node (pm_cluster_send/reply). */
int pm__hub_link_main_send(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc, int type,
                           uint64_t request_id, const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE; /* one frame at most crosses a link (link_buf's size) */
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.len = (uint32_t)len;
    f.dst = port;
    f.dst_inc = inc;
    f.request_id = request_id;
    f.src = PM__NODE_MAIN;
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = link_put(h, l, &w, data);
    return rc == -ENOBUFS ? -EAGAIN : rc;
}

int pm__hub_link_main_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                              uint64_t id, int64_t deadline_ms, const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REQUEST;
    f.len = (uint32_t)len;
    f.dst = port;
    f.dst_inc = inc;
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    f.src = PM__NODE_MAIN;
    /* The entry first: the link may go down inside send, and its answer
     * (-EHOSTUNREACH) must find the request. */
    if (rinflight_add(h, l, &f, PM__NODE_MAIN, 0) < 0)
        return -EBUSY;
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = link_put(h, l, &w, data);
    if (rc < 0) {
        pm__rinflight e;
        rinflight_take(l, PM__NODE_MAIN, id, port, &e);
        return rc == -ENOBUFS ? -EAGAIN : rc;
    }
    return 0;
}

void pm__hub_link_forget(pm__hub *h, uint16_t host, uint32_t requester, uint64_t id,
                         uint32_t port)
{
    pm__hub_link *l = link_of(h, host);
    pm__rinflight e;
    if (l != NULL)
        rinflight_take(l, requester, id, port, &e);
}

int pm__hub_link_bcast(pm__hub *h, uint16_t host, uint64_t id, int64_t deadline_ms,
                       const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_BCAST;
    f.len = (uint32_t)len;
    f.dst = 0; /* the remote supervisor */
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    return link_put(h, l, &w, data);
}

/* A remote host's mesh broadcast, fanned out here: who to send the
 * results to. */
struct remote_bcast {
    pm__hub *h;
    uint16_t host;
    uint64_t id;
};

/* Our local broadcast for a remote host ended: a BRESULT per worker (from
 * its address port and incarnation, with its error and reply), then a
 * BDONE with how many BRESULTs went out, so the far end can tell a result
 * the link had no room for from one never sent. */
static void remote_bcast_done(pm_cluster *c, const pm_message *results, size_t n, void *arg)
{
    (void)c;
    struct remote_bcast *rb = arg;
    pm__hub *h = rb->h;
    pm__hub_link *l = link_of(h, rb->host);
    uint32_t sent = 0;
    for (size_t i = 0; i < n && l != NULL && l->up; i++) {
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_BRESULT;
        f.src = results[i].from.port;
        f.src_inc = results[i].from.incarnation;
        f.request_id = rb->id;
        f.error = results[i].error;
        f.len = results[i].error == 0 ? (uint32_t)results[i].len : 0;
        if (results[i].error == 0 && results[i].len > PM_MAX_PAYLOAD) {
            /* A large reply: more than one frame, which a link cannot
             * carry yet (link_buf holds one). */
            f.error = -EMSGSIZE;
            f.len = 0;
        }
        if (link_put(h, l, &f, results[i].data) == 0)
            sent++;
    }
    if (l != NULL && l->up) {
        pm__frame_hdr d;
        memset(&d, 0, sizeof(d));
        d.type = PM__FT_BDONE;
        d.request_id = rb->id;
        d.len = 4;
        unsigned char count[4];
        pm__put32(count, sent);
        (void)link_put(h, l, &d, count); /* lost: the far end's deadline settles it */
    }
    free(rb);
}

/* A BCAST from host's link: our own broadcast to our ready snapshot,
 * ending a little before the far end's deadline (a quarter of what is
 * left, at most 200 ms early) so that its results can still cross. */
static void link_bcast(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                       const unsigned char *payload)
{
    if (f->dst != 0 || f->deadline_ms == 0 || f->len > PM_MAX_PAYLOAD) {
        l->malformed++;
        return;
    }
    int64_t left = f->deadline_ms - (int64_t)pm__now_ms();
    int64_t margin = left / 4 < 200 ? left / 4 : 200;
    int64_t timeout = left - margin;
    if (timeout < 1)
        timeout = 1;
    if (timeout > INT_MAX)
        timeout = INT_MAX;
    struct remote_bcast *rb = malloc(sizeof(*rb));
    if (rb == NULL) {
        l->dropped++; /* the far end's deadline settles it */
        return;
    }
    rb->h = h;
    rb->host = host;
    rb->id = f->request_id;
    if (pm__hub_broadcast(h, payload, f->len, (int)timeout, remote_bcast_done, rb) < 0) {
        free(rb);
        l->dropped++;
    }
}

/* An undeliverable notice for a remote requester (to: PM__REMOTE_NODE)
 * about our address port about_port. */
static void notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err)
{
    pm__hub_link *l = link_of(h, PM__REMOTE_HOST(to));
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.dst = PM__REMOTE_PORT(to);
    n.dst_inc = to_inc;
    n.src = about_port;
    n.src_inc = about_inc;
    n.request_id = request_id;
    n.error = err;
    if (link_put(h, l, &n, NULL) < 0)
        h->notices_dropped++;
}

void pm__hub_link_notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                         uint64_t about_inc, uint64_t request_id, int err)
{
    notice_port(h, to, to_inc, port_of(h, about), about_inc, request_id, err);
}

void pm__hub_link_up(pm__hub *h, uint16_t host, int (*send)(void *, const void *, size_t),
                     void *arg)
{
    if (host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS || links_alloc(h) < 0)
        return;
    pm__hub_link *l = &h->links[host];
    l->up = 1;
    l->send = send;
    l->arg = arg;
}

void pm__hub_link_down(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up)
        return;
    l->up = 0;
    l->send = NULL;
    l->arg = NULL;
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

/* A message or request from the link for local node `node`. */
static void link_deliver(pm__hub *h, pm__hub_link *l, uint16_t host, pm__frame_hdr *f,
                         const unsigned char *payload, uint32_t node)
{
    uint32_t requester = PM__REMOTE_NODE(host, f->src);
    if (node == PM__NODE_MAIN) {
        pm__hub_deliver_main(h, f, payload);
        return;
    }
    int err = pm__hub_check_dest(h, node, f->dst_inc);
    if (err < 0) {
        pm__hub_link_notice(h, requester, f->src_inc, node, f->dst_inc, f->request_id, err);
        return;
    }
    pm__port *d = &h->ports[node];
    f->dst = node;
    f->dst_inc = d->incarnation;
    if (f->type == PM__FT_REQUEST &&
        pm__hub_add_inflight(h, d, requester, f->src_inc, f->request_id, f->deadline_ms) < 0) {
        pm__hub_link_notice(h, requester, f->src_inc, node, d->incarnation, f->request_id, -EBUSY);
        return;
    }
    /* Charged as an answer: a link is never held back (it would hold every
     * sender of that host); past the destination's bound it is refused. */
    int rc = pm__hub_push(h, d, f, payload, f->len, PM__CHARGE_ANSWER);
    if (rc == 0)
        return;
    if (f->type == PM__FT_REQUEST)
        pm__hub_drop_last_inflight(h, d);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, node, PM_REASON_CORRUPT_RING);
    l->dropped++;
    pm__hub_link_notice(h, requester, f->src_inc, node, d->incarnation, f->request_id,
                        rc == -EBADMSG ? -EHOSTDOWN : -ENOBUFS);
}

/* A reply or notice from the link for local requester `node`. */
static void link_answer(pm__hub *h, pm__hub_link *l, pm__frame_hdr *f,
                        const unsigned char *payload, uint32_t node)
{
    pm__rinflight e;
    int known = f->request_id != 0 && rinflight_take(l, node, f->request_id, f->src, &e);
    /* Main takes answers only to its own requests over this link: a notice
     * about anything else (a pm_cluster_send, a forgery) would otherwise
     * settle whatever local request or broadcast shares its id. */
    if (!known && (f->type == PM__FT_REPLY || node == PM__NODE_MAIN)) {
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
    int rc = pm__hub_push(h, &h->ports[node], f, payload, f->len, PM__CHARGE_ANSWER);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, node, PM_REASON_CORRUPT_RING);
    if (rc < 0)
        h->replies_dropped++;
}

void pm__hub_link_frame(pm__hub *h, uint16_t host, const unsigned char *frame, size_t len)
{
    pm__hub_link *l = link_of(h, host);
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
    int err = node_of(h, f.dst, &node);
    switch (f.type) {
    case PM__FT_MSG:
    case PM__FT_REQUEST:
        if (err < 0) {
            notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc,
                        f.request_id, err);
            return;
        }
        link_deliver(h, l, host, &f, payload, node);
        return;
    case PM__FT_REPLY:
    case PM__FT_UNDELIVERABLE:
        /* A notice is a negative errno and nothing else (protocol.md 6): an
         * error of 0 with a payload would read as a reply. */
        if (err < 0 || (f.type == PM__FT_UNDELIVERABLE && (f.error >= 0 || f.len != 0))) {
            l->malformed++;
            return;
        }
        link_answer(h, l, &f, payload, node);
        return;
    case PM__FT_BCAST:
        link_bcast(h, l, host, &f, payload);
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
