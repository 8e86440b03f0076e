/* SPDX-License-Identifier: MIT */
/*
 * hub_route.c - the router: moves validated, stamped frames between ports (local
 * workers and main), answers what cannot be delivered, remembers requests in
 * flight, holds back senders whose destination is full, and runs main's
 * broadcasts and main's requests to one worker (pm_cluster_request).
 *
 * Rules (doc/design.md has the longer version):
 *  - identity: the source is the port a frame came in by (port.c stamps
 *    it), never the frame's own fields;
 *  - undeliverable: a destination that is unknown (-ENOENT), not ready
 *    (-EHOSTDOWN) or of another incarnation (-ESTALE) is answered at once;
 *  - requests in flight to a worker are remembered, so its death answers
 *    them (-EHOSTDOWN) and a reply from a later incarnation answers nothing;
 *  - no worker delays another's traffic to anyone but itself: a full down
 *    ring spills into that destination's queue, charged to the sender; only
 *    a sender whose own hold is at its bound waits (the hub stops reading
 *    it), and its frames to others flow until then. Replies and notices
 *    never wait: charged to the requester they are for, dropped and counted
 *    past its bound. A queue that makes no progress for the drain timeout
 *    is reported (not-draining). Memory stays bounded per sender, per
 *    requester and in total;
 *  - in flight: at most PM__INFLIGHT_PER_REQUESTER per requester, each
 *    forgotten at its deadline or after the maximum lifetime;
 *  - copies of traffic in the supervisor's memory are wiped before they are
 *    freed, and in a fork-mode child (pm__hub_wipe_data).
 * The queues themselves (push, flush, large messages' fds) are in hub_queue.c.
 */
#define _GNU_SOURCE
#include "hub.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/bigmsg.h"
#include "base/defaults.h"
#include "hub_int.h"
#include "channel/proto.h"

/* What a port's queue leaves behind once it is empty (free_queue), and a
 * new port's start. The queue's own counts are not set here: dequeuing
 * every frame takes each one's charge off (and a new port is calloc'd),
 * so a count left nonzero is an accounting bug for the tests to see
 * (test_lone_port_close), not one to paper over. */
static void port_reset(pm__port *p)
{
    p->stall_since_ms = 0;
    p->sock_full = 0;
    p->drain_reported = 0;
    p->blocked_on = -1;
    p->left = 0;
    p->scan_pos = 0;
    p->dirty = 0;
}

/* The scratch buffer holds the last frame a worker sent to main. It lives
 * in its own private anonymous mapping marked MADV_WIPEONFORK, so that a
 * fork-mode worker finds it zeroed (malloc'd memory cannot be marked).
 * Kernels before 4.14 refuse the advice: then pm__hub_wipe_data clears it in the
 * child instead. */
static unsigned char *scratch_map(int *mapped)
{
    void *p = mmap(NULL, PM_MAX_PAYLOAD, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED)
        return NULL;
    *mapped = madvise(p, PM_MAX_PAYLOAD, MADV_WIPEONFORK) == 0;
    return p;
}

static void lists_free(pm__hub *h)
{
    pm__portlist *l[] = {&h->ready, &h->pass, &h->arm, &h->dirty, &h->timed};
    for (size_t i = 0; i < PM__ARRAY_SIZE(l); i++) {
        free(l[i]->v);
        l[i]->v = NULL;
        l[i]->n = 0;
    }
}

/* Each list holds every port at most once: nports entries, allocated once. */
static int lists_alloc(pm__hub *h, unsigned nports)
{
    pm__portlist *l[] = {&h->ready, &h->pass, &h->arm, &h->dirty, &h->timed};
    for (size_t i = 0; i < PM__ARRAY_SIZE(l); i++) {
        l[i]->v = calloc(nports ? nports : 1, sizeof(unsigned));
        if (l[i]->v == NULL) {
            lists_free(h);
            return -ENOMEM;
        }
    }
    return 0;
}

/* What the parts below hub_route.c call up at run time (pm__hub_up). */
static const pm__hub_up up_calls = {
    .deliver_main = pm__hub_deliver_main,
    .link_notice = pm__hub_link_notice,
};

int pm__hub_init(pm__hub *h, unsigned nports, const pm__names *names, pm_cluster *app,
                 const pm__hub_ops *ops, void *owner)
{
    memset(h, 0, sizeof(*h));
    /* On failure nothing is left to free: h is no hub then, and its owner
     * (pm__hub_new) frees only the struct. */
    h->scratch = scratch_map(&h->scratch_mapped);
    if (h->scratch == NULL)
        return -ENOMEM;
    h->ports = calloc(nports ? nports : 1, sizeof(*h->ports));
    if (h->ports == NULL || lists_alloc(h, nports) < 0) {
        free(h->ports);
        munmap(h->scratch, PM_MAX_PAYLOAD);
        return -ENOMEM; /* (lists_alloc freed its own) */
    }
    h->nports = nports;
    h->inflight_lifetime_ms = PM__INFLIGHT_LIFETIME_MS;
    h->any_per_worker = 1;
    h->queue_max = PM__DEFAULT_REQUEST_QUEUE_MAX;
    h->next_req = PM__BCAST_ID_BASE;
    h->cur_fd = -1;
    h->spin_budget = PM__SPIN_START_NS;
    h->max_message = PM_MAX_PAYLOAD;
    h->main_request_rr = nports ? nports - 1 : 0; /* the first pick starts at port 0 */
    for (unsigned i = 0; i < nports; i++) {
        h->ports[i].index = i;
        h->ports[i].rx_fd = -1;
        h->ports[i].ahead_n = 0;
        port_reset(&h->ports[i]);
    }
    h->names = *names;
    h->names.nslots = nports;
    h->app = app;
    h->ops = ops;
    h->up = &up_calls;
    h->owner = owner;
    return 0;
}

static void free_queue(pm__hub *h, pm__port *p)
{
    while (p->q_head != NULL)
        pm__hub_dequeue(h, p, p->q_head);
    port_reset(p);
}

/* ------------------------------------------------------------------ routing */

static void notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about, uint64_t about_inc,
                   uint64_t request_id, int err)
{
    pm__hub_notice_at(h, to, to_inc, PM__HOST_LOCAL, about, about_inc, request_id, err);
}

/* Pushes a relayed frame to d; a large message's fd (h->cur_fd) is passed
 * on as it is: the hub never maps or copies what it routes between
 * workers. */
static int relay_push(pm__hub *h, pm__port *d, const pm__frame_hdr *f, const void *payload,
                      uint32_t charge)
{
    if ((f->flags & PM__FF_MEMFD) == 0)
        return pm__hub_push(h, d, f, payload, f->len, charge);
    int rc = pm__hub_push_fd(h, d, f, h->cur_fd, h->cur_len, charge);
    if (rc == 0) {
        h->cur_fd = -1;
        h->big_relayed++;
    }
    return rc;
}

/* A reply the hub has no record of, from p to a local worker it shares a
 * lane with: the answer to a request that came by the lane, too large for
 * it (doc/design.md, "Direct lanes"). Relayed as PM__FT_LANE_REPLY, so the
 * requester matches it with the request it sent on that lane itself and
 * takes no such frame for a request that went through the hub. 1 when
 * relayed (or dropped for want of room, counted), 0 when it is not one. */
static int lane_reply(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    /* (A destination past the last port has no lane: the book checks.) */
    if (!pm__hub_lane_between(h, p->index, p->incarnation, f->dst, f->dst_inc))
        return 0;
    f->type = PM__FT_LANE_REPLY;
    /* Charged to its sender, never to the requester's bound on answers:
     * the hub cannot tell it from a reply to nothing, and a sender with a
     * lane could otherwise fill its peer's bound with them and have its
     * genuine answers dropped (a review of stop 40). Past the sender's own
     * hold it is dropped and counted: a reply never waits. */
    int rc = relay_push(h, &h->ports[f->dst], f, payload, p->index);
    if (rc < 0) {
        h->replies_dropped++;
        return 1;
    }
    p->relayed++;
    p->relayed_bytes += pm__hub_relay_len(h, f);
    return 1;
}

/* A reply from p: it answers a request p's incarnation received and has not
 * answered yet; anything else is late or forged. A reply never waits: a
 * requester whose answers are at their bound asked and did not read, and
 * the reply is dropped and counted (exactly once is promised to requesters
 * that read). So p, the replier, is never held back by its requesters. */
static int relay_reply(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__inflight e;
    if (!pm__hub_take_inflight(h, p, f->dst, f->request_id, &e)) {
        if (f->dst == PM__NODE_MAIN) {
            pm__hub_main_late(h, p, f->request_id); /* counted there */
            return 0;
        }
        if (lane_reply(h, p, f, payload))
            return 0;
        h->late_replies++;
        return 0;
    }
    if (e.deadline_ms != 0 && e.deadline_ms < (int64_t)pm__now_ms()) {
        /* Main decides (hub_main.c main_answer): a broadcast still open
         * takes it (its timer has not run), a request gets -ETIMEDOUT
         * now; main counts it late when nobody takes it. */
        if (f->dst == PM__NODE_MAIN)
            pm__hub_deliver_main(h, f, payload);
        else
            h->late_replies++; /* the requester gave up */
        return 0;
    }
    if (f->dst == PM__NODE_MAIN) {
        pm__hub_deliver_main(h, f, payload);
        p->relayed++;
        p->relayed_bytes += pm__hub_relay_len(h, f);
        return 0;
    }
    if (pm__hub_check_dest(h, f->dst, e.requester_inc) < 0) {
        h->late_replies++;
        return 0;
    }
    f->dst_inc = e.requester_inc;
    int rc = relay_push(h, &h->ports[f->dst], f, payload, PM__CHARGE_ANSWER);
    if (rc == -ENOBUFS || rc == -ETOOMANYREFS) {
        h->replies_dropped++;
        if (rc == -ETOOMANYREFS) /* refused for now (send_big): the request fails */
            notice(h, f->dst, e.requester_inc, p->index, p->incarnation, f->request_id, -EAGAIN);
        return 0;
    }
    if (rc < 0) {
        h->ops->fault(h->owner, f->dst, PM_REASON_CORRUPT_RING);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += pm__hub_relay_len(h, f);
    return 0;
}

int pm__hub_relay(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    uint32_t src = p->index;
    if (f->dst_host != PM__HOST_LOCAL)
        return pm__hub_relay_remote(h, p, f, payload); /* over its link (hub_link.c) */
    if (f->type == PM__FT_REPLY)
        return relay_reply(h, p, f, payload);
    /* A message or a request. */
    if (f->dst == PM__NODE_MAIN) {
        pm__hub_deliver_main(h, f, payload);
        p->relayed++;
        p->relayed_bytes += pm__hub_relay_len(h, f);
        return 0;
    }
    int err = pm__hub_check_dest(h, f->dst, f->dst_inc);
    if (err < 0) {
        notice(h, src, p->incarnation, f->dst, f->dst_inc, f->request_id, err);
        return 0;
    }
    pm__port *d = &h->ports[f->dst];
    f->dst_inc = d->incarnation;
    if (f->type == PM__FT_REQUEST &&
        pm__hub_add_inflight(h, d, src, p->incarnation, f->request_id, f->deadline_ms) < 0) {
        /* Over its own cap: this requester alone is refused. */
        notice(h, src, p->incarnation, f->dst, d->incarnation, f->request_id, -EBUSY);
        return 0;
    }
    /* A full d may hold p with its frame left in its ring (no copy) if p
     * has nothing for anyone else behind it (hub_queue.c, leave_in_ring). */
    h->leave_from = (f->flags & PM__FF_MEMFD) == 0 ? p : NULL;
    h->left_now = 0;
    int rc = relay_push(h, d, f, payload, src);
    h->leave_from = NULL;
    if (rc == -EAGAIN) {
        if (f->type == PM__FT_REQUEST)
            pm__hub_drop_last_inflight(h, d); /* the frame is retried */
        p->left = h->left_now;
        p->blocked_on = (int)d->index;
        h->ring_full_waits++;
        return -EAGAIN;
    }
    if (rc == -ETOOMANYREFS) {
        /* The kernel refused the fd for now (send_big): p is told, d is
         * not charged. */
        if (f->type == PM__FT_REQUEST)
            pm__hub_drop_last_inflight(h, d);
        notice(h, src, p->incarnation, f->dst, d->incarnation, f->request_id, -EAGAIN);
        return 0;
    }
    if (rc < 0) {
        /* d's ring is corrupt: d is fenced; a request gets its answer when
         * d's death is seen, a plain message is answered now. */
        h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
        if (f->type != PM__FT_REQUEST)
            notice(h, src, p->incarnation, f->dst, d->incarnation, 0, -EHOSTDOWN);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += pm__hub_relay_len(h, f);
    return 0;
}

void pm__hub_port_close(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    p->reading = 0;
    p->busy = 0;
    p->want_arm = 0;
    p->state = PM__PORT_CLOSED;
    /* Requests in flight to the dead incarnation: answered now. The array is
     * detached first, because answering may run callbacks. */
    uint32_t n;
    pm__inflight *v = pm__hub_detach_inflight(h, p, &n);
    for (uint32_t k = 0; k < n; k++) {
        pm__inflight *e = &v[k];
        if (e->target_inc != p->incarnation)
            continue;
        notice(h, e->requester, e->requester_inc, p->index, e->target_inc, e->request_id,
               -EHOSTDOWN);
    }
    /* Its any-worker requests were all answered above (or had timed out):
     * the next incarnation starts with a clean record. */
    p->any_held = 0;
    p->stuck = 0;
    /* Its own requests to others will find no requester any more; drop
     * them now rather than at their replies. */
    pm__hub_forget_requests_of(h, p);
    /* Frames waiting for it are dropped (their senders are read again);
     * its own frames waiting for others stay charged to it until they are
     * delivered, so a quick replacement cannot double the hold. */
    free_queue(h, p);
    pm__hub_port_drop_ahead(p);
    /* Its lanes end with it: revoked at their other ends. The owner closes
     * a port only once its incarnation was reaped with every process of
     * its containment, so no writer of these lanes is left (doc/design.md,
     * "Direct lanes", Revocation). */
    pm__hub_lanes_end(h, p);
    p->lanes_ok = 0;
    p->lane_notes = 0;
    p->channel = NULL;
}

void pm__hub_stop_request(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    if (p->channel == NULL)
        return;
    struct pm__ctl *ctl = p->channel->map;
    /* Release: the worker reads the flag, then anything we wrote before. */
    atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_STOP, p);
    (void)pm__hub_push(h, p, &f, NULL, 0, PM__NODE_MAIN);
    p->dirty = 0;
    pm__ring_publish(&p->channel->tx);
}

int pm__hub_send_control(pm__hub *h, unsigned i, int type, const void *payload, size_t len)
{
    pm__port *p = &h->ports[i];
    if (p->channel == NULL)
        return -EHOSTDOWN;
    pm__frame_hdr f = pm__hub_main_hdr(type, p);
    return pm__frame_send(&p->channel->tx, &f, payload, len);
}

/* ------------------------------------------------------------------ main's requests: sending */

static void earliest(uint64_t *next, uint64_t t)
{
    if (t != 0 && (*next == 0 || t < *next))
        *next = t;
}

/* Once per loop turn: the ports' own deadlines come from the timed list
 * (ports with a queue waiting or a socket retry), never from every port. */
uint64_t pm__hub_next_deadline(const pm__hub *h)
{
    uint64_t next = 0;
    for (const pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        earliest(&next, (uint64_t)b->deadline_ms);
    for (const pm__mesh_broadcast *mb = h->mesh_broadcasts; mb != NULL; mb = mb->next)
        earliest(&next, (uint64_t)mb->deadline_ms);
    earliest(&next, (uint64_t)h->main_request_due_ms);
    if (h->inflight_total > 0)
        earliest(&next, h->next_purge_ms);
    for (unsigned k = 0; k < h->timed.n; k++) {
        const pm__port *p = &h->ports[h->timed.v[k]];
        if (h->drain_timeout_ms != 0 && p->stall_since_ms != 0 && !p->drain_reported)
            earliest(&next, p->stall_since_ms + h->drain_timeout_ms);
    }
    return next;
}

/* Queues that waited the drain timeout without progress: reported once per
 * stall. Their senders are not blamed: they were held back by p. */
static void check_draining(pm__hub *h, pm__port *p, uint64_t now)
{
    /* (A closed port has no stall: its queue went with it, port_reset.) */
    if (h->drain_timeout_ms == 0 || p->stall_since_ms == 0 || p->drain_reported ||
        now < p->stall_since_ms + h->drain_timeout_ms)
        return;
    p->drain_reported = 1;
    h->not_draining++;
    h->ops->not_draining(h->owner, p->index);
}

void pm__hub_fire(pm__hub *h, uint64_t now)
{
    /* Main's requests expire before the purge: an entry of main's expires
     * at its request's deadline, so a purge due in the same turn would
     * forget it first, and the expiry would then not see that the worker
     * still holds the request: the hung worker would not be marked as
     * owing an answer (it would get the next input, blamed in its turn)
     * nor killed under kill_on_timeout (test_pool_timeout_at_purge). */
    pm__hub_main_request_expire(h, (int64_t)now);
    pm__hub_purge_due(h, now);
    /* The timed list: visited, and compacted to the ports that still have
     * a deadline. The ops callback may fence a port (its queue freed,
     * port_reset); it stays listed until the next visit finds it idle. */
    unsigned kept = 0;
    for (unsigned k = 0; k < h->timed.n; k++) {
        pm__port *p = &h->ports[h->timed.v[k]];
        check_draining(h, p, now);
        if (p->stall_since_ms != 0)
            h->timed.v[kept++] = p->index;
        else
            p->in_timed = 0;
    }
    h->timed.n = kept;
    pm__hub_main_request_dispatch_waiting(h);
    pm__bcast *b = h->bcasts;
    while (b != NULL) {
        pm__bcast *next = b->next;
        if ((uint64_t)b->deadline_ms <= now) {
            pm__hub_bcast_end_pending(h, b, -ETIMEDOUT);
            pm__hub_bcast_complete(h, b); /* (frees b) */
            next = h->bcasts; /* the callback may have changed the list */
        }
        b = next;
    }
    /* After the local broadcasts: a mesh broadcast's local part has the
     * earlier deadline, so it is settled by now. */
    pm__hub_mesh_broadcast_fire(h, (int64_t)now, 0, -ETIMEDOUT);
}

void pm__hub_free(pm__hub *h)
{
    /* The mesh is gone already (pm__mesh_free runs first): nothing below
     * may send on a link. */
    for (unsigned i = 0; h->links != NULL && i < PM__MAX_HOSTS; i++) {
        h->links[i].up = 0;
        h->links[i].send = NULL;
        h->links[i].caps = 0; /* as pm__hub_link_down: a down link has none */
    }
    pm__hub_cancel_all(h);
    free(h->outcome_buf);
    h->outcome_buf = NULL;
    free(h->main_requests);
    h->main_requests = NULL;
    h->main_request_buckets = 0;
    /* Broadcasts a callback above started (cancel_all ended the others). */
    while (h->bcasts != NULL)
        pm__hub_bcast_cancel_all(h);
    pm__hub_mesh_broadcast_fire(h, 0, 1, -ECANCELED);
    for (unsigned i = 0; h->ports != NULL && i < h->nports; i++) {
        free_queue(h, &h->ports[i]);
        pm__hub_port_drop_ahead(&h->ports[i]);
        free(h->ports[i].inflight);
    }
    free(h->ports);
    h->ports = NULL;
    pm__hub_lanes_free(h);
    lists_free(h);
    if (h->scratch != NULL)
        munmap(h->scratch, PM_MAX_PAYLOAD);
    h->scratch = NULL;
    pm__hub_links_free(h);
}

int pm__hub_child_fds(const pm__hub *h, void (*fn)(void *arg, int fd), void *arg)
{
    int queued = 0;
    pm__hub_links_child_fds(h, fn, arg); /* large messages crossing links */
    /* Large messages the hub holds are other workers' traffic too: the
     * child closes its copies of their fds. */
    for (unsigned i = 0; i < h->nports; i++) {
        const pm__port *p = &h->ports[i];
        for (const pm__qframe *q = p->q_head; q != NULL; q = q->next) {
            queued = 1;
            if (q->fd >= 0)
                fn(arg, q->fd);
        }
        for (unsigned k = 0; k < p->ahead_n; k++)
            fn(arg, p->ahead[(p->ahead_head + k) % PM__BIGMSG_AHEAD_MAX].fd);
        if (p->rx_fd >= 0)
            fn(arg, p->rx_fd);
    }
    for (const pm__main_request *r = h->waiting; r != NULL; r = r->wnext)
        if (r->fd >= 0)
            fn(arg, r->fd);
    return queued;
}

/* Reads only what it wipes: the child shares every page of the hub with
 * the supervisor copy-on-write, and each page it touched would cost it a
 * fault on its way to ready (the ports, a few cache lines each, are
 * walked only when some queue holds frames). */
PM__READY_TEXT void pm__hub_wipe_data(pm__hub *h, int ports)
{
    /* Zeroed by the kernel already when MADV_WIPEONFORK took. (A live hub
     * has its scratch buffer and its ports: pm__hub_init.) */
    if (!h->scratch_mapped)
        explicit_bzero(h->scratch, PM_MAX_PAYLOAD);
    for (unsigned i = 0; ports && i < h->nports; i++)
        for (pm__qframe *q = h->ports[i].q_head; q != NULL; q = q->next)
            explicit_bzero(q->data, q->len);
    for (pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        for (size_t i = 0; i < b->n; i++)
            if (b->bufs[i] != NULL)
                explicit_bzero(b->bufs[i], b->results[i].len);
    for (pm__mesh_broadcast *mb = h->mesh_broadcasts; mb != NULL; mb = mb->next)
        for (size_t i = 0; i < mb->n; i++)
            if (mb->bufs[i] != NULL)
                explicit_bzero(mb->bufs[i], mb->results[i].len);
    for (pm__main_request *r = h->waiting; r != NULL; r = r->wnext)
        if (r->data != NULL)
            explicit_bzero(r->data, r->len);
}

/* ------------------------------------------------------------------ main's sends */

int pm__hub_main_send(pm__hub *h, const pm_address *to, int type, uint64_t request_id,
                      const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return -EINVAL;
    if (len > h->max_message)
        return -EMSGSIZE;
    uint32_t node;
    uint16_t host;
    int rc = pm__address_route(&h->names, to, &host, &node);
    if (rc < 0)
        return rc;
    if (host != PM__HOST_LOCAL)
        return pm__hub_link_main_send(h, host, node, to->incarnation, type, request_id, data, len);
    if (node == PM__NODE_MAIN)
        return -EINVAL; /* main does not send to itself */
    rc = pm__hub_check_dest(h, node, to->incarnation);
    if (rc < 0)
        return rc;
    pm__port *d = &h->ports[node];
    pm__frame_hdr f = pm__hub_main_hdr(type, d);
    f.request_id = request_id;
    /* Main's reply never waits on a requester that does not read either. */
    uint32_t charge = type == PM__FT_REPLY ? PM__CHARGE_ANSWER : PM__NODE_MAIN;
    if (len > PM_MAX_PAYLOAD) {
        int fd = pm__hub_main_memfd(h, data, len);
        if (fd < 0)
            return fd;
        rc = pm__hub_push_fd(h, d, &f, fd, len, charge);
        if (rc < 0)
            pm__close(fd);
    } else {
        rc = pm__hub_push(h, d, &f, data, len, charge);
    }
    if (rc == -ENOBUFS) {
        h->replies_dropped++;
        return 0;
    }
    if (rc == -EBADMSG) {
        h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
        return -EHOSTDOWN;
    }
    if (rc == -ETOOMANYREFS)
        return -EAGAIN; /* refused for now (send_big); d is not charged */
    if (rc == 0 && d->dirty) {
        d->dirty = 0;
        pm__ring_publish(&d->channel->tx);
    }
    return rc;
}


/* ------------------------------------------------------------------ hosts */

void pm__hub_peer_mode(pm__hub *h)
{
    h->peer_mode = 1;
    snprintf(h->hosts.name[0], PM_NAME_MAX, "%s", h->names.host);
    atomic_store_explicit(&h->hosts.count, 1, memory_order_release);
    h->names.hosts = &h->hosts;
}

/* Copies entries [from, count) and then count into a worker's table. The
 * release store of count pairs with the worker's acquire load in
 * pm__hosts_find: a worker that sees the new count sees the whole name. */
static void hosts_publish(const pm__hub *h, struct pm__ctl *ctl, uint32_t from)
{
    uint32_t count = atomic_load_explicit(&h->hosts.count, memory_order_relaxed);
    for (uint32_t i = from; i < count; i++)
        memcpy(ctl->hosts.name[i], h->hosts.name[i], PM_NAME_MAX);
    atomic_store_explicit(&ctl->hosts.count, count, memory_order_release);
}

void pm__hub_hosts_copy(const pm__hub *h, pm__channel *l)
{
    struct pm__ctl *ctl = l->map;
    if (!h->peer_mode)
        return;
    ctl->peer_mode = 1;
    hosts_publish(h, ctl, 0);
}

int pm__hub_host_index(pm__hub *h, const char *name)
{
    if (!h->peer_mode || !pm__name_valid(name) || strcmp(name, h->hosts.name[0]) == 0)
        return -EINVAL;
    int idx = pm__hosts_find(&h->hosts, name);
    if (idx > 0)
        return idx;
    uint32_t count = atomic_load_explicit(&h->hosts.count, memory_order_relaxed);
    if (count >= PM__MAX_HOSTS)
        return -ENOSPC;
    snprintf(h->hosts.name[count], PM_NAME_MAX, "%s", name);
    atomic_store_explicit(&h->hosts.count, count + 1, memory_order_release);
    for (unsigned i = 0; i < h->nports; i++)
        if (h->ports[i].channel != NULL)
            hosts_publish(h, h->ports[i].channel->map, count);
    return (int)count;
}
