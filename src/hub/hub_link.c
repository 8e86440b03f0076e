/* SPDX-License-Identifier: MIT */
/* hub_link.c - peer links as hub ports, the top of the link port: a worker's frame for a remote host routed onto its link (held, answered or sent), a frame from a link validated, stamped with the link's host and handed on by kind, a link up, down or drained. The parts below: hub_linkbase.c, hub_linkbig.c, hub_linkflow.c, hub_linkin.c, hub_linkbcast.c. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "hub_int.h"
#include "hub_linkport.h"

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
        h->links[i].window_held_head = h->links[i].window_held_tail = -1;
        h->links[i].frag_held_head = h->links[i].frag_held_tail = -1;
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

void pm__hub_link_drops(const pm__hub *h, uint16_t host, uint64_t *forged, uint64_t *malformed)
{
    const pm__hub_link *l = host < PM__MAX_HOSTS && h->links != NULL ? &h->links[host] : NULL;
    *forged = l != NULL ? l->forged : 0;
    *malformed = l != NULL ? l->malformed + l->frag_dropped : 0;
}

void pm__hub_link_caps(pm__hub *h, uint16_t host, uint32_t caps)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l != NULL)
        l->caps = caps;
}

/* Takes back the entry a request just got from pm__hub_link_inflight_add. By key, not
 * by popping the last entry: a send that brought the link down would have
 * emptied the table already (pm__hub_link_down), and a pop would wrap. */
static void unadd(pm__hub_link *l, uint32_t src, const pm__frame_hdr *f)
{
    pm__remote_inflight e;
    pm__hub_link_inflight_take_inc(l, src, f->src_inc, f->request_id, f->dst, &e);
}

/* p's REPLY to a request that came over host f->dst_host's link (l): to
 * main when it answers a remote mesh broadcast fanned out here, else onto
 * the link; late when p's table has no such request (never asked, or
 * forgotten: its deadline, or the link went down); frag: a large message
 * the link takes as FRAGs, big: a large message. Always consumed (0). */
static int relay_remote_reply(pm__hub *h, pm__hub_link *l, pm__port *p, pm__frame_hdr *f,
                              const void *payload, int frag, int big)
{
    uint32_t src = p->index;
    /* It answers a request that came over the link: p's table has it
     * under the remote requester. */
    pm__inflight e;
    uint32_t requester = PM__REMOTE_NODE(f->dst_host, f->dst & 0xFFFFu);
    if (f->dst > 0xFFFFu ||
        !pm__hub_take_inflight_inc(h, p, requester, f->dst_inc, f->request_id, &e)) {
        h->late_replies++;
        return 0;
    }
    if (f->dst == 0 && pm__hub_bcast_of(h, f->request_id, f->dst_host)) {
        /* p's answer to a remote host's mesh broadcast fanned out
         * here: it is p's result of our broadcast (remote_bcast_done
         * sends the BRESULTs), never a plain REPLY over the link. */
        pm__hub_deliver_main(h, f, payload);
        p->relayed++;
        p->relayed_bytes += pm__hub_relay_len(h, f);
        return 0;
    }
    /* The requester's link is up: pm__hub_link_down forgot every request
     * that came over it (taken above, this one did not). */
    pm__frame_hdr w = pm__hub_link_wire_hdr(h, f, src);
    w.dst_inc = e.requester_inc;
    if (frag) {
        pm__hub_link_frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
        h->cur_fd = -1; /* the link's now */
        p->relayed++;
        p->relayed_bytes += h->cur_len;
        return 0;
    }
    if (big) {
        /* A peer without large messages (or no link): the requester
         * learns so now instead of waiting for its deadline. */
        pm__hub_link_notice_port(h, requester, e.requester_inc, pm__hub_link_port_of(h, src), p->incarnation,
                    f->request_id, -EMSGSIZE);
        return 0;
    }
    /* A reply never waits (the replier is never held back, as locally):
     * a link without room drops it, counted; the requester's deadline
     * ends its wait. */
    if (pm__hub_link_put_or_drop(h, l, &w, payload) < 0) {
        h->replies_dropped++;
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += pm__hub_relay_len(h, f);
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
    if (pm__hub_link_window_take(l, f->dst, wbytes, 0) < 0) {
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hub_link_window_hold(h, l, f->dst_host, p);
        return -EAGAIN;
    }
    pm__frame_hdr w = pm__hub_link_wire_hdr(h, f, src);
    int rc = pm__hub_link_put(h, l, &w, payload);
    if (rc < 0)
        pm__hub_link_window_untake(l, f->dst, wbytes);
    if (rc == -ENOBUFS) {
        /* The link is full: the sender waits, its frame stays in its ring
         * and is read again when the link drains (pm__hub_link_queue_hold). */
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hub_link_queue_hold(h, l, f->dst_host, p);
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

/* A frame from local port p for a remote host (main's go through
 * hub_linkflow.c: pm__hub_link_main_send and _main_request). */
int pm__hub_relay_remote(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__hub_link *l = pm__hub_link_of(h, f->dst_host);
    uint32_t src = p->index;
    int big = (f->flags & PM__FF_MEMFD) != 0;
    if (l != NULL && l->up && l->tx_fd >= 0 && (big || l->tx_owner == src)) {
        /* One large message at a time per link; and a sender whose large
         * message is still crossing sends nothing else over that link
         * meanwhile, so its frames keep their order. Held until it has
         * crossed (pm__hub_link_frag_tx_end), like any held sender. */
        pm__hub_link_hold_on(h, &l->frag_held_head, &l->frag_held_tail, f->dst_host, p);
        return -EAGAIN;
    }
    int frag = big && l != NULL && l->up && (l->caps & PM__PEER_CAP_FRAG) != 0;
    if (f->type == PM__FT_REPLY)
        return relay_remote_reply(h, l, p, f, payload, frag, big);
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
    int added = f->type == PM__FT_REQUEST ? pm__hub_link_inflight_add(h, l, f, src, p->incarnation) : 0;
    if (added < 0) {
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, added);
        return 0;
    }
    if (big) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. Its request entry is made first, so the link
         * going down mid-message answers it -EHOSTUNREACH, once. */
        pm__frame_hdr w = pm__hub_link_wire_hdr(h, f, src);
        pm__hub_link_frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
        h->cur_fd = -1;
        p->relayed++;
        p->relayed_bytes += h->cur_len;
        return 0;
    }
    return relay_remote_frame(h, l, p, f, payload);
}

void pm__hub_link_up(pm__hub *h, uint16_t host, int (*send)(void *, const void *, size_t),
                     void *arg)
{
    if (host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS || links_alloc(h) < 0)
        return;
    pm__hub_link *l = &h->links[host];
    pm__hub_link_windows_clear(&l->win);
    pm__hub_link_windows_clear(&l->cred);
    l->tx_id = 0;
    memset(&l->rx, 0, sizeof(l->rx));
    l->up = 1;
    l->conn++;
    l->send = send;
    l->arg = arg;
}

/* A request that came over host's link (from its main or a worker), not
 * a worker's part of host's mesh broadcast (our own broadcast for host,
 * whose entries are under host's port 0 too). */
static int came_over(pm__hub *h, const pm__inflight *e, const void *host)
{
    uint16_t from = *(const uint16_t *)host;
    return PM__IS_REMOTE_NODE(e->requester) && PM__REMOTE_HOST(e->requester) == from &&
           !(PM__REMOTE_PORT(e->requester) == 0 && pm__hub_bcast_of(h, e->request_id, from));
}

void pm__hub_link_down(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l == NULL || !l->up) /* no table, never up, or down already */
        return;
    l->up = 0;
    l->send = NULL;
    l->arg = NULL;
    /* Its held senders are read again: their frames are answered
     * -EHOSTUNREACH now (pm__hub_relay_remote), not when it comes back.
     * Windows and credits were the connection's: a new one starts empty. */
    pm__hub_link_release(h, &l->held_head, &l->held_tail);
    pm__hub_link_release(h, &l->window_held_head, &l->window_held_tail);
    /* The requests that came over it are forgotten (their requesters'
     * hubs answer them -EHOSTUNREACH as it goes there): a reply is late
     * from now on, never sent over a later connection, where it could
     * settle another request of the same id (a restarted host's main
     * numbers its requests from 1 again). */
    pm__hub_forget_inflight_if(h, came_over, &host);
    pm__hub_link_windows_clear(&l->win);
    pm__hub_link_windows_clear(&l->cred);
    l->cred_unsent = 0;
    l->caps = 0;
    /* A large message half sent or half received dies with the link: its
     * request (if it was one) is in the table answered below. */
    if (l->tx_fd >= 0)
        l->frag_dropped++;
    pm__hub_link_frag_tx_end(h, l);
    if (l->rx.active)
        l->frag_dropped++;
    pm__close(l->rx_fd);
    l->rx_fd = -1;
    memset(&l->rx, 0, sizeof(l->rx));
    /* Detached first: answering may run callbacks that send again. */
    pm__remote_inflight *v = l->inflight;
    uint32_t n = l->ninflight;
    l->inflight = NULL;
    l->ninflight = l->cap = 0;
    for (uint32_t i = 0; i < n; i++)
        pm__hub_notice_at(h, v[i].requester, v[i].requester_inc, host, v[i].target,
                          v[i].target_inc, v[i].request_id, -EHOSTUNREACH);
    free(v);
    pm__hub_mesh_broadcast_host_down(h, host);
}

/* A peer's deadline, milliseconds left (> 0), made absolute: up to
 * INT64_MAX may come, which saturates (never expires) rather than
 * overflow. */
static int64_t absolute_deadline(int64_t left)
{
    int64_t now = (int64_t)pm__now_ms();
    return left > INT64_MAX - now ? INT64_MAX : left + now;
}

void pm__hub_link_frame(pm__hub *h, uint16_t host, const unsigned char *frame, size_t len)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l == NULL || !l->up)
        return;
    pm__frame_hdr f;
    /* The decode refuses a negative deadline and a positive error too. */
    if (pm__frame_decode(frame, len, PM_MAX_PAYLOAD, &f) < 0) {
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
    l->frames_in++; /* read by fuzz_link's oracle, beside forged and malformed */
    /* The identity comes from the link, never from the frame. */
    f.src_host = host;
    if (f.src > 0xFFFFu) {
        l->malformed++; /* not an address port */
        return;
    }
    if (f.deadline_ms > 0)
        f.deadline_ms = absolute_deadline(f.deadline_ms);
    const unsigned char *payload = frame + PM__FRAME_HDR_SIZE;
    uint32_t node;
    int err = pm__hub_link_node_of(h, f.dst, &node);
    switch (f.type) {
    case PM__FT_MSG:
    case PM__FT_REQUEST: {
        /* Whatever happens to it, the frame is credited back: now, or when
         * it leaves the destination's queue. */
        uint32_t port = f.dst, bytes = PM__FRAME_HDR_SIZE + f.len;
        if (err < 0)
            pm__hub_link_notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc,
                        f.request_id, err);
        if (err < 0 || pm__hub_link_deliver(h, l, host, &f, payload, node) == 0)
            pm__hub_link_credit(h, host, port, bytes);
        return;
    }
    case PM__FT_CREDIT:
        pm__hub_link_credit_in(h, l, &f, payload);
        return;
    case PM__FT_FRAG:
        pm__hub_link_frag_in(h, l, host, &f, payload);
        return;
    case PM__FT_REPLY:
    case PM__FT_UNDELIVERABLE:
        /* A notice is a negative errno and nothing else (protocol.md 6): an
         * error of 0 with a payload would read as a reply. */
        if (err < 0 || (f.type == PM__FT_UNDELIVERABLE && (f.error >= 0 || f.len != 0))) {
            l->malformed++;
            return;
        }
        pm__hub_link_answer(h, l, &f, payload, node);
        return;
    case PM__FT_BCAST:
        pm__hub_link_bcast_in(h, l, host, &f, payload);
        return;
    case PM__FT_BRESULT:
    case PM__FT_BDONE:
        /* A BRESULT's payload is the worker's reply, so an error result
         * has none (protocol.md 6): one with both would read as a reply
         * that failed, whose data the application might trust. */
        if (f.dst != 0 || f.request_id < PM__BCAST_ID_BASE ||
            (f.type == PM__FT_BRESULT && f.error != 0 && f.len != 0) ||
            (f.type == PM__FT_BDONE && (f.len != 4 || f.error != 0))) {
            l->malformed++;
            return;
        }
        pm__hub_mesh_broadcast_frame(h, host, &f, payload);
        return;
    default:
        l->malformed++; /* lifecycle frames never cross a link */
        return;
    }
}

void pm__hub_link_writable(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l == NULL)
        return;
    pm__hub_link_release(h, &l->held_head, &l->held_tail);
    /* Called back from inside a send (the mesh wrote to make room): the
     * frame being sent is in link_buf, and a fragment sent now would pass
     * the one being sent. The credits and the cursor wait for the next
     * drain, which comes: the queue that refused them is not empty. */
    if (h->link_putting)
        return;
    if (l->cred_unsent && l->up)
        pm__hub_link_send_credits(h, l);
    if (l->tx_fd >= 0)
        pm__hub_link_frag_pump(h, l);
}
