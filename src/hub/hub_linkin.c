/* SPDX-License-Identifier: MIT */
/* hub_linkin.c - frames from a peer link into this host: a message or request delivered to a local node as if local, an answer to a local requester, a notice back to a remote requester, a large message reassembled from its FRAGs into a sealed memfd (doc/protocol.md 6, "Large messages"). */
#define _GNU_SOURCE
#include "hub_core.h"

#include <fcntl.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "channel/bigmsg.h"
#include "channel/shm.h"
#include "base/le.h"
#include "hub_int.h"
#include "hub_linkport.h"

/* An undeliverable notice for requester `to` on another host about local
 * node `about`: over the link; or, for a request of a remote host's mesh
 * broadcast fanned out here, that broadcast's result. */
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
    pm__hub_link_notice_port(h, to, to_inc, pm__hub_link_port_of(h, about), about_inc, request_id, err);
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
int pm__hub_link_deliver(pm__hub *h, pm__hub_link *l, uint16_t host, pm__frame_hdr *f,
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
    if (rc == 0) {
        /* Queued (a new tail: a refused push queues nothing): credited
         * when it leaves. A large message took none of the window. */
        if (d->q_tail == last || (f->flags & PM__FF_MEMFD) != 0)
            return 0;
        d->q_tail->credit_host = host;
        d->q_tail->credit_port = pm__hub_link_port_of(h, node);
        return 1;
    }
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
void pm__hub_link_answer(pm__hub *h, pm__hub_link *l, pm__frame_hdr *f,
                   const unsigned char *payload, uint32_t node)
{
    pm__remote_inflight e;
    /* By incarnation too (dst_inc, protocol.md 6; 0: any): an answer
     * meant for an earlier incarnation of the requester, which restarted
     * and asked again under the same id, is late, not the new question's
     * answer; the new one's entry stays. */
    int known = f->request_id != 0 &&
                pm__hub_link_inflight_take_inc(l, node, f->dst_inc, f->request_id, f->src, &e);
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

/* ------------------------------------------------------- large messages */

/* The message reassembled on l is whole: sealed (nobody can change it
 * after the hub's check, as for a worker's memfd) and delivered as if a
 * local worker had sent it, through the fd path (doc/design.md, "Life of a
 * large message"); identity stamped from the link like any frame of it. */
static void frag_deliver(pm__hub *h, pm__hub_link *l, uint16_t host)
{
    int fd = l->rx_fd;
    l->rx_fd = -1;
    if (pm__memfd_seal(fd, PM__SEAL_FROZEN) < 0) {
        pm__close(fd);
        l->frag_dropped++;
        return;
    }
    l->big_in++;
    pm__frame_hdr f = l->rx_hdr;
    f.flags = PM__FF_MEMFD; /* its length is h->cur_len; the queue writes its own announce */
    /* The fd is handed to the routing code as a worker's is (port.c): it
     * takes it by setting h->cur_fd to -1; what is left is closed here. */
    int saved_fd = h->cur_fd;
    uint64_t saved_len = h->cur_len;
    h->cur_fd = fd;
    h->cur_len = l->rx.total;
    uint32_t node;
    int err = pm__hub_link_node_of(h, f.dst, &node);
    if (f.type == PM__FT_REPLY) {
        if (err < 0)
            l->malformed++;
        else
            pm__hub_link_answer(h, l, &f, NULL, node);
    } else if (err < 0) {
        pm__hub_link_notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc, f.request_id,
                    err);
    } else {
        (void)pm__hub_link_deliver(h, l, host, &f, NULL, node);
    }
    pm__close(h->cur_fd);
    h->cur_fd = saved_fd;
    h->cur_len = saved_len;
}

/* A FRAG from host's link (f: its header made local; doc/protocol.md 6,
 * "Large messages"). Bad fragments drop the message being reassembled and
 * count it (frag_dropped); the link stays up: a peer that breaks the rule
 * loses its own message, nothing else. A message above our max_message is
 * refused before anything is allocated, with -EMSGSIZE to its sender. */
void pm__hub_link_frag_in(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                    const unsigned char *payload)
{
    pm__frag_hdr fh;
    size_t n;
    int dropped = 0, last = 0, act;
    if (pm__frag_decode(payload, f->len, &fh, &n) < 0) {
        l->malformed++;
        dropped = l->rx.active;
        /* The message it belongs to is lost: its later fragments (which
         * may decode) are ignored, not counted again one by one. Its id is
         * the one being reassembled, else what this header names (0, no
         * id, when it is too short to name one). */
        l->rx.skip_id = l->rx.active ? l->rx.msg_id
                                     : f->len >= PM__FRAG_HDR_SIZE ? pm__get32(payload + 4) : 0;
        l->rx.active = 0;
        act = PM__FRAG_IGNORE;
    } else {
        act = pm__frag_rx_step(&l->rx, &fh, n, h->max_message, &dropped, &last);
    }
    if (dropped) {
        pm__close(l->rx_fd);
        l->rx_fd = -1;
        l->frag_dropped++;
    }
    switch (act) {
    case PM__FRAG_TOO_BIG:
        l->frag_dropped++;
        if (fh.kind != PM__FT_REPLY) /* a reply too big is late for its requester */
            pm__hub_link_notice_port(h, PM__REMOTE_NODE(host, f->src), f->src_inc, f->dst, f->dst_inc,
                        f->request_id, -EMSGSIZE);
        return;
    case PM__FRAG_BAD:
        if (!dropped)
            l->frag_dropped++;
        return;
    case PM__FRAG_BEGIN: {
        /* Sized now (sparse: pages are allocated as fragments land),
         * within our RLIMIT_FSIZE (pm__memfd_size_ok: past it the kernel
         * would raise SIGXFSZ). */
        int fd = pm__memfd_size_ok(fh.total) < 0 ? -EFBIG : pm__memfd_new("procmesh-link");
        if (fd < 0 || ftruncate(fd, (off_t)fh.total) < 0) {
            pm__close(fd);
            l->rx.active = 0;
            l->rx.skip_id = fh.msg_id;
            l->frag_dropped++;
            if (fh.kind != PM__FT_REPLY)
                pm__hub_link_notice_port(h, PM__REMOTE_NODE(host, f->src), f->src_inc, f->dst, f->dst_inc,
                            f->request_id, -ENOBUFS);
            return;
        }
        l->rx_fd = fd;
        l->rx_hdr = *f;
        l->rx_hdr.type = fh.kind;
        break;
    }
    case PM__FRAG_DATA:
        break;
    default:
        return;
    }
    const unsigned char *data = payload + PM__FRAG_HDR_SIZE;
    size_t done = 0;
    while (done < n) {
        /* No EINTR retry: a memfd's pwrite waits on nothing a signal
         * interrupts. */
        ssize_t w = pwrite(l->rx_fd, data + done, n - done, (off_t)(fh.offset + done));
        if (w <= 0) {
            pm__close(l->rx_fd);
            l->rx_fd = -1;
            l->rx.active = 0;
            l->rx.skip_id = fh.msg_id;
            l->frag_dropped++;
            return;
        }
        done += (size_t)w;
    }
    if (last)
        frag_deliver(h, l, host);
}
