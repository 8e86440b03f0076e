/*
 * hub.c - the router: moves validated, stamped frames between ports (local
 * workers and main), answers what cannot be delivered, remembers requests in
 * flight, holds back senders whose destination is full, and runs main's
 * broadcasts.
 *
 * Rules (doc/design.md has the longer version):
 *  - identity: the source is the port a frame came in by (port.c stamps
 *    it), never the frame's own fields;
 *  - undeliverable: a destination that is unknown (-ENOENT), not ready
 *    (-EHOSTDOWN) or of another incarnation (-ESTALE) is answered at once;
 *  - requests in flight to a worker are remembered, so its death answers
 *    them (-EHOSTDOWN) and a reply from a later incarnation answers nothing;
 *  - backpressure: a full down ring spills into a bounded per-destination
 *    queue; past the bound the hub stops reading the senders feeding it, so
 *    their own rings fill and they wait. Nothing is dropped silently and
 *    memory stays bounded.
 */
#define _GNU_SOURCE
#include "hub.h"

#include <limits.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define Q_MAX_FRAMES 1024u
#define Q_MAX_BYTES ((size_t)4 << 20)
#define INFLIGHT_MAX 4096u
#define RESULT_PENDING INT_MIN

static void port_reset(pm__port *p)
{
    p->q_head = p->q_tail = NULL;
    p->q_frames = 0;
    p->q_bytes = 0;
    p->blocked_on = -1;
    p->dirty = 0;
}

int pm__hub_init(pm__hub *h, unsigned nports, const pm__names *names, pm_cluster *app,
                 const pm__hub_ops *ops, void *owner)
{
    memset(h, 0, sizeof(*h));
    h->ports = calloc(nports ? nports : 1, sizeof(*h->ports));
    h->scratch = malloc(PM_MAX_PAYLOAD);
    if (h->ports == NULL || h->scratch == NULL) {
        free(h->ports);
        free(h->scratch);
        h->ports = NULL;
        h->scratch = NULL;
        return -ENOMEM;
    }
    h->nports = nports;
    for (unsigned i = 0; i < nports; i++) {
        h->ports[i].index = i;
        port_reset(&h->ports[i]);
    }
    h->names = *names;
    h->names.nslots = nports;
    h->app = app;
    h->ops = ops;
    h->owner = owner;
    return 0;
}

/* ------------------------------------------------------------------ queues */

static void unblock_senders(pm__hub *h, unsigned d)
{
    for (unsigned i = 0; i < h->nports; i++) {
        pm__port *t = &h->ports[i];
        if (t->blocked_on == (int)d) {
            t->blocked_on = -1;
            t->busy = 1; /* read its ring again this turn */
        }
    }
}

static void write_frame(unsigned char *p, const pm__frame_hdr *f, const void *payload, size_t len)
{
    pm__frame_hdr copy = *f;
    copy.len = (uint32_t)len;
    pm__frame_encode(&copy, p);
    if (len > 0)
        memcpy(p + PM__FRAME_HDR_SIZE, payload, len);
}

/* A frame header from main to port p's current incarnation. */
static pm__frame_hdr main_hdr(int type, const pm__port *p)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.src = PM__NODE_MAIN;
    f.dst = p->index;
    f.dst_inc = p->incarnation;
    return f;
}

/* Puts a frame into d's ring, or its queue when the ring is full.
 * 0, -EAGAIN (queue at its bound), -EBADMSG (d's ring is corrupt),
 * -EHOSTDOWN (d has no ring). */
static int push(pm__port *d, const pm__frame_hdr *f, const void *payload, size_t len)
{
    size_t total = PM__FRAME_HDR_SIZE + len;
    if (d->link == NULL)
        return -EHOSTDOWN;
    if (d->q_head == NULL) {
        void *p;
        int rc = pm__ring_reserve(&d->link->tx, total, &p);
        if (rc == 0) {
            write_frame(p, f, payload, len);
            pm__ring_commit(&d->link->tx, total);
            d->dirty = 1;
            return 0;
        }
        if (rc != -EAGAIN)
            return rc;
    }
    if (d->q_frames >= Q_MAX_FRAMES || d->q_bytes + total > Q_MAX_BYTES)
        return -EAGAIN;
    pm__qframe *q = malloc(sizeof(*q) + total);
    if (q == NULL)
        return -EAGAIN;
    q->next = NULL;
    q->len = (uint32_t)total;
    write_frame(q->data, f, payload, len);
    if (d->q_tail != NULL)
        d->q_tail->next = q;
    else
        d->q_head = q;
    d->q_tail = q;
    d->q_frames++;
    d->q_bytes += total;
    /* Ask the worker to ring our doorbell when it frees room. */
    if (pm__ring_arm_space(&d->link->tx, total) != 0)
        d->busy = 1; /* room already: flush this turn */
    return 0;
}

void pm__hub_flush(pm__hub *h, pm__port *d)
{
    for (;;) {
        while (d->q_head != NULL) {
            pm__qframe *q = d->q_head;
            void *p;
            int rc = pm__ring_reserve(&d->link->tx, q->len, &p);
            if (rc == -EAGAIN)
                break;
            if (rc < 0) {
                h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
                return;
            }
            memcpy(p, q->data, q->len);
            pm__ring_commit(&d->link->tx, q->len);
            d->dirty = 1;
            d->q_head = q->next;
            if (d->q_head == NULL)
                d->q_tail = NULL;
            d->q_frames--;
            d->q_bytes -= q->len;
            free(q);
        }
        if (d->q_head == NULL) {
            pm__ring_disarm_space(&d->link->tx);
            break;
        }
        /* Publish what we wrote so the worker can drain it, then wait for
         * its release unless room appeared meanwhile. */
        pm__ring_publish(&d->link->tx);
        d->dirty = 0;
        if (pm__ring_arm_space(&d->link->tx, d->q_head->len) <= 0)
            break;
    }
    /* Unblock the senders once half the queue is free: hysteresis, so a
     * sender does not flap between blocked and unblocked on every frame. */
    if (d->q_frames <= Q_MAX_FRAMES / 2 && d->q_bytes <= Q_MAX_BYTES / 2)
        unblock_senders(h, d->index);
}

static void free_queue(pm__port *p)
{
    pm__qframe *q = p->q_head;
    while (q != NULL) {
        pm__qframe *next = q->next;
        free(q);
        q = next;
    }
    port_reset(p);
}

void pm__hub_publish(pm__hub *h)
{
    for (unsigned i = 0; i < h->nports; i++) {
        pm__port *p = &h->ports[i];
        if (p->dirty) {
            p->dirty = 0;
            if (p->link != NULL)
                pm__ring_publish(&p->link->tx);
        }
    }
}

/* ------------------------------------------------------------------ in flight */

static int add_inflight(pm__port *target, uint32_t requester, uint64_t requester_inc,
                        uint64_t id, int64_t deadline)
{
    if (target->ninflight == target->inflight_cap) {
        /* Make room by forgetting requests whose requester gave up. */
        int64_t now = (int64_t)pm__now_ms();
        uint32_t k = 0;
        for (uint32_t i = 0; i < target->ninflight; i++) {
            pm__inflight *e = &target->inflight[i];
            if (e->deadline_ms == 0 || e->deadline_ms > now)
                target->inflight[k++] = *e;
        }
        target->ninflight = k;
    }
    if (target->ninflight == target->inflight_cap) {
        if (target->inflight_cap >= INFLIGHT_MAX)
            return -EBUSY;
        uint32_t cap = target->inflight_cap ? target->inflight_cap * 2 : 16;
        pm__inflight *v = realloc(target->inflight, cap * sizeof(*v));
        if (v == NULL)
            return -EBUSY;
        target->inflight = v;
        target->inflight_cap = cap;
    }
    pm__inflight *e = &target->inflight[target->ninflight++];
    e->requester = requester;
    e->requester_inc = requester_inc;
    e->request_id = id;
    e->target_inc = target->incarnation;
    e->deadline_ms = deadline;
    return 0;
}

/* Removes and returns (in *out) the entry for this answer, if any. */
static int take_inflight(pm__port *target, uint32_t requester, uint64_t id, pm__inflight *out)
{
    for (uint32_t i = 0; i < target->ninflight; i++) {
        pm__inflight *e = &target->inflight[i];
        if (e->requester == requester && e->request_id == id &&
            e->target_inc == target->incarnation) {
            *out = *e;
            *e = target->inflight[--target->ninflight];
            return 1;
        }
    }
    return 0;
}

/* ------------------------------------------------------------------ main */

static pm__bcast *find_bcast(pm__hub *h, uint64_t id)
{
    for (pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        if (id >= b->first_id && id - b->first_id < b->n)
            return b;
    return NULL;
}

static void bcast_complete(pm__hub *h, pm__bcast *b)
{
    pm__bcast **pp = &h->bcasts;
    while (*pp != NULL && *pp != b)
        pp = &(*pp)->next;
    if (*pp == b)
        *pp = b->next;
    /* Unlinked first: the callback may start another broadcast. */
    b->cb(h->app, b->results, b->n, b->arg);
    for (size_t i = 0; i < b->n; i++)
        free(b->bufs[i]);
    free(b->bufs);
    free(b->results);
    free(b);
}

/* Records one broadcast result. Returns 0, or -EALREADY for a duplicate or
 * an id that belongs to no broadcast (the caller counts it). */
static int bcast_result(pm__hub *h, uint64_t id, int err, const void *data, size_t len)
{
    pm__bcast *b = find_bcast(h, id);
    if (b == NULL)
        return -EALREADY;
    pm_message *r = &b->results[id - b->first_id];
    if (r->error != RESULT_PENDING)
        return -EALREADY;
    r->error = err;
    if (err == 0 && len > 0) {
        void *copy = malloc(len);
        if (copy == NULL) {
            r->error = -ENOMEM;
        } else {
            memcpy(copy, data, len);
            b->bufs[id - b->first_id] = copy;
            r->data = copy;
            r->len = len;
        }
    }
    if (--b->pending == 0)
        bcast_complete(h, b);
    return 0;
}

/* A frame for main: broadcast replies, or the on_message callback. The
 * payload is copied out of shared memory first: the application parses a
 * private copy that the worker can no longer change. port.c has checked
 * that f->len <= PM_MAX_PAYLOAD, the size of the scratch buffer. */
static void deliver_main(pm__hub *h, const pm__frame_hdr *f, const void *payload)
{
    if (f->type == PM__FT_REPLY || f->type == PM__FT_UNDELIVERABLE) {
        if (bcast_result(h, f->request_id, f->type == PM__FT_REPLY ? 0 : f->error, payload,
                         f->len) < 0)
            h->late_replies++;
        return;
    }
    if (h->on_message == NULL) {
        h->ports[f->src].malformed++; /* nobody listens: counted, dropped */
        return;
    }
    if (f->len > 0)
        memcpy(h->scratch, payload, f->len);
    pm_message m;
    memset(&m, 0, sizeof(m));
    pm__node_address(&h->names, f->src, f->src_inc, &m.from);
    pm__node_address(&h->names, PM__NODE_MAIN, 0, &m.to);
    m.request_id = f->request_id;
    m.kind = f->type == PM__FT_REQUEST ? PM_MSG_REQUEST : PM_MSG_PLAIN;
    m.deadline_ms = f->deadline_ms;
    m.data = h->scratch;
    m.len = f->len;
    h->on_message(h->app, &m, h->on_message_arg);
}

/* ------------------------------------------------------------------ routing */

/* Tells `to` (a port, or main) that its frame about `about` could not be
 * delivered. A notice that finds no room is counted, never blocks. */
static void notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about, uint64_t about_inc,
                   uint64_t request_id, int err)
{
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.src = about;
    n.src_inc = about_inc;
    n.dst = to;
    n.dst_inc = to_inc;
    n.request_id = request_id;
    n.error = err;
    if (to == PM__NODE_MAIN) {
        deliver_main(h, &n, NULL);
        return;
    }
    if (to >= h->nports)
        return;
    pm__port *p = &h->ports[to];
    if (p->link == NULL || p->incarnation != to_inc) {
        h->notices_dropped++;
        return;
    }
    p->undeliverable++;
    if (push(p, &n, NULL, 0) < 0)
        h->notices_dropped++;
}

/* 0 when node/inc names a port that can take a frame now, else why not. */
static int check_dest(const pm__hub *h, uint32_t node, uint64_t inc)
{
    if (node >= h->nports)
        return -ENOENT;
    const pm__port *d = &h->ports[node];
    if (d->state != PM__PORT_READY || d->link == NULL)
        return -EHOSTDOWN;
    if (inc != 0 && inc != d->incarnation)
        return -ESTALE;
    return 0;
}

/* A reply from p: it answers a request p's incarnation received and has not
 * answered yet; anything else is late or forged. */
static int relay_reply(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__inflight e;
    if (!take_inflight(p, f->dst, f->request_id, &e)) {
        h->late_replies++;
        return 0;
    }
    if (e.deadline_ms != 0 && e.deadline_ms < (int64_t)pm__now_ms()) {
        h->late_replies++; /* the requester gave up */
        if (f->dst == PM__NODE_MAIN)
            deliver_main(h, f, payload); /* the broadcast may still be open */
        return 0;
    }
    if (f->dst == PM__NODE_MAIN) {
        deliver_main(h, f, payload);
        p->relayed++;
        return 0;
    }
    if (check_dest(h, f->dst, e.requester_inc) < 0) {
        h->late_replies++;
        return 0;
    }
    f->dst_inc = e.requester_inc;
    int rc = push(&h->ports[f->dst], f, payload, f->len);
    if (rc == -EAGAIN) {
        /* Keep the request open: the reply is retried. */
        add_inflight(p, e.requester, e.requester_inc, e.request_id, e.deadline_ms);
        p->blocked_on = (int)f->dst;
        h->ring_full_waits++;
        return -EAGAIN;
    }
    if (rc < 0) {
        h->ops->fault(h->owner, f->dst, PM_REASON_CORRUPT_RING);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += f->len;
    return 0;
}

int pm__hub_relay(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    uint32_t src = p->index;
    if (f->type == PM__FT_REPLY)
        return relay_reply(h, p, f, payload);
    /* A message or a request. */
    if (f->dst == PM__NODE_MAIN) {
        deliver_main(h, f, payload);
        p->relayed++;
        p->relayed_bytes += f->len;
        return 0;
    }
    int err = check_dest(h, f->dst, f->dst_inc);
    if (err < 0) {
        notice(h, src, p->incarnation, f->dst, f->dst_inc, f->request_id, err);
        return 0;
    }
    pm__port *d = &h->ports[f->dst];
    f->dst_inc = d->incarnation;
    if (f->type == PM__FT_REQUEST &&
        add_inflight(d, src, p->incarnation, f->request_id, f->deadline_ms) < 0) {
        notice(h, src, p->incarnation, f->dst, d->incarnation, f->request_id, -EBUSY);
        return 0;
    }
    int rc = push(d, f, payload, f->len);
    if (rc == -EAGAIN) {
        if (f->type == PM__FT_REQUEST)
            d->ninflight--; /* the entry just added: the frame is retried */
        p->blocked_on = (int)d->index;
        h->ring_full_waits++;
        return -EAGAIN;
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
    p->relayed_bytes += f->len;
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
    pm__inflight *v = p->inflight;
    uint32_t n = p->ninflight;
    p->ninflight = 0;
    for (uint32_t k = 0; k < n; k++) {
        pm__inflight *e = &v[k];
        if (e->target_inc != p->incarnation)
            continue;
        notice(h, e->requester, e->requester_inc, p->index, e->target_inc, e->request_id,
               -EHOSTDOWN);
    }
    /* Its own requests to others will find no requester any more; drop
     * them now rather than at their replies. */
    for (unsigned t = 0; t < h->nports; t++) {
        pm__port *o = &h->ports[t];
        uint32_t k = 0;
        for (uint32_t j = 0; j < o->ninflight; j++) {
            pm__inflight *e = &o->inflight[j];
            if (!(e->requester == p->index && e->requester_inc == p->incarnation))
                o->inflight[k++] = *e;
        }
        o->ninflight = k;
    }
    free_queue(p);
    unblock_senders(h, p->index);
    p->link = NULL;
}

void pm__hub_stop_request(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    if (p->link == NULL)
        return;
    struct pm__ctl *ctl = p->link->map;
    /* Release: the worker reads the flag, then anything we wrote before. */
    atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    pm__frame_hdr f = main_hdr(PM__FT_STOP, p);
    (void)push(p, &f, NULL, 0);
    p->dirty = 0;
    pm__ring_publish(&p->link->tx);
}

int pm__hub_send_control(pm__hub *h, unsigned i, int type, const void *payload, size_t len)
{
    pm__port *p = &h->ports[i];
    if (p->link == NULL)
        return -EHOSTDOWN;
    pm__frame_hdr f = main_hdr(type, p);
    return pm__frame_send(&p->link->tx, &f, payload, len);
}

uint64_t pm__hub_next_deadline(const pm__hub *h)
{
    uint64_t next = 0;
    for (const pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        if (next == 0 || (uint64_t)b->deadline_ms < next)
            next = (uint64_t)b->deadline_ms;
    return next;
}

void pm__hub_fire(pm__hub *h, uint64_t now)
{
    pm__bcast *b = h->bcasts;
    while (b != NULL) {
        pm__bcast *next = b->next;
        if ((uint64_t)b->deadline_ms <= now) {
            for (size_t i = 0; i < b->n; i++) {
                if (b->results[i].error != RESULT_PENDING)
                    continue;
                b->results[i].error = -ETIMEDOUT;
                /* Forget the request so a late reply is dropped and counted. */
                uint32_t node;
                pm__inflight e;
                if (pm__address_node(&h->names, &b->results[i].from, &node) == 0 &&
                    node < h->nports)
                    take_inflight(&h->ports[node], PM__NODE_MAIN, b->first_id + i, &e);
            }
            b->pending = 0;
            bcast_complete(h, b);
            next = h->bcasts; /* the callback may have changed the list */
        }
        b = next;
    }
}

void pm__hub_free(pm__hub *h)
{
    while (h->bcasts != NULL) {
        pm__bcast *b = h->bcasts;
        for (size_t i = 0; i < b->n; i++)
            if (b->results[i].error == RESULT_PENDING)
                b->results[i].error = -ECANCELED;
        bcast_complete(h, b);
    }
    for (unsigned i = 0; h->ports != NULL && i < h->nports; i++) {
        free_queue(&h->ports[i]);
        free(h->ports[i].inflight);
    }
    free(h->ports);
    h->ports = NULL;
    free(h->scratch);
    h->scratch = NULL;
}

/* ------------------------------------------------------------------ main's sends */

int pm__hub_main_send(pm__hub *h, const pm_address *to, int type, uint64_t request_id,
                      const void *data, size_t len)
{
    if (data == NULL && len > 0)
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE;
    uint32_t node;
    int rc = pm__address_node(&h->names, to, &node);
    if (rc < 0)
        return rc;
    if (node == PM__NODE_MAIN)
        return -EINVAL; /* main does not send to itself */
    rc = check_dest(h, node, to->incarnation);
    if (rc < 0)
        return rc;
    pm__port *d = &h->ports[node];
    pm__frame_hdr f = main_hdr(type, d);
    f.request_id = request_id;
    rc = push(d, &f, data, len);
    if (rc == -EBADMSG) {
        h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
        return -EHOSTDOWN;
    }
    if (rc == 0 && d->dirty) {
        d->dirty = 0;
        pm__ring_publish(&d->link->tx);
    }
    return rc;
}

/* Sends request id to d for broadcast b: 0, or the error its result gets. */
static int bcast_send(pm__hub *h, pm__port *d, const pm__bcast *b, uint64_t id,
                      const void *data, size_t len)
{
    pm__frame_hdr f = main_hdr(PM__FT_REQUEST, d);
    f.request_id = id;
    f.deadline_ms = b->deadline_ms;
    int rc = add_inflight(d, PM__NODE_MAIN, 0, id, b->deadline_ms);
    if (rc < 0)
        return -EAGAIN; /* its in-flight table is full: try again later */
    rc = push(d, &f, data, len);
    if (rc < 0)
        d->ninflight--;
    if (rc == -EBADMSG) {
        h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
        rc = -EHOSTDOWN;
    }
    return rc;
}

int pm__hub_broadcast(pm__hub *h, const void *data, size_t len, int timeout_ms,
                      void (*cb)(pm_cluster *, const pm_message *, size_t, void *), void *arg)
{
    if (cb == NULL || timeout_ms <= 0 || (data == NULL && len > 0))
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE;
    size_t n = 0;
    for (unsigned i = 0; i < h->nports; i++)
        n += h->ports[i].state == PM__PORT_READY;
    pm__bcast *b = calloc(1, sizeof(*b));
    if (b == NULL)
        return -ENOMEM;
    b->results = calloc(n ? n : 1, sizeof(*b->results));
    b->bufs = calloc(n ? n : 1, sizeof(*b->bufs));
    if (b->results == NULL || b->bufs == NULL) {
        free(b->results);
        free(b->bufs);
        free(b);
        return -ENOMEM;
    }
    b->n = n;
    b->cb = cb;
    b->arg = arg;
    b->first_id = h->next_req + 1;
    h->next_req += n;
    b->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    b->next = h->bcasts;
    h->bcasts = b;
    size_t k = 0;
    for (unsigned i = 0; i < h->nports; i++) {
        pm__port *d = &h->ports[i];
        if (d->state != PM__PORT_READY)
            continue;
        pm_message *r = &b->results[k];
        r->request_id = b->first_id + k;
        k++;
        pm__node_address(&h->names, d->index, d->incarnation, &r->from);
        pm__node_address(&h->names, PM__NODE_MAIN, 0, &r->to);
        r->kind = PM_MSG_REPLY;
        r->error = RESULT_PENDING;
        b->pending++;
    }
    /* Send after the snapshot is complete, so that a result arriving early
     * (a synchronous failure below) finds every entry in place. One extra
     * pending count guards b: it cannot complete (and be freed) before the
     * loop is done with it. */
    b->pending++;
    k = 0;
    for (unsigned i = 0; i < h->nports && k < n; i++) {
        pm__port *d = &h->ports[i];
        if (d->state != PM__PORT_READY)
            continue;
        uint64_t id = b->first_id + k;
        k++;
        int rc = bcast_send(h, d, b, id, data, len);
        if (rc < 0)
            bcast_result(h, id, rc, NULL, 0);
    }
    if (--b->pending == 0)
        bcast_complete(h, b);
    pm__hub_publish(h);
    return 0;
}
