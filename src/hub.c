/*
 * hub.c - the relay. Every frame a worker sends arrives on its own up ring;
 * cluster.c validates it and stamps its source from that ring; this module
 * routes it: to main (the on_message callback, broadcast results), to another
 * worker's down ring, or back to the sender as an undeliverable notice.
 *
 * Rules (doc/design.md has the longer version):
 *  - identity: the source is the ring's slot and incarnation, never the
 *    frame's own fields;
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
#include "cluster.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "proto.h"

#define Q_MAX_FRAMES 1024u
#define Q_MAX_BYTES ((size_t)4 << 20)
#define INFLIGHT_MAX 4096u
#define RESULT_PENDING INT_MIN

void pm__hub_slot_reset(pm__slot *s)
{
    s->q_head = s->q_tail = NULL;
    s->q_frames = 0;
    s->q_bytes = 0;
    s->blocked_on = -1;
    s->dirty = 0;
}

/* ------------------------------------------------------------------ queues */

static void unblock_senders(pm_cluster *c, unsigned d)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *t = &c->slots[i];
        if (t->blocked_on == (int)d) {
            t->blocked_on = -1;
            t->busy = 1; /* read its ring again this turn */
        }
    }
}

static void write_frame(unsigned char *p, const pm__frame_hdr *h, const void *payload, size_t len)
{
    pm__frame_hdr copy = *h;
    copy.len = (uint32_t)len;
    pm__frame_encode(&copy, p);
    if (len > 0)
        memcpy(p + PM__FRAME_HDR_SIZE, payload, len);
}

/* Puts a frame into d's ring, or its queue when the ring is full.
 * 0, -EAGAIN (queue at its bound), -EBADMSG (d's ring is corrupt). */
static int push(pm__slot *d, const pm__frame_hdr *h, const void *payload, size_t len)
{
    size_t total = PM__FRAME_HDR_SIZE + len;
    if (d->link.map == NULL)
        return -EHOSTDOWN;
    if (d->q_head == NULL) {
        void *p;
        int rc = pm__ring_reserve(&d->link.tx, total, &p);
        if (rc == 0) {
            write_frame(p, h, payload, len);
            pm__ring_commit(&d->link.tx, total);
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
    write_frame(q->data, h, payload, len);
    if (d->q_tail != NULL)
        d->q_tail->next = q;
    else
        d->q_head = q;
    d->q_tail = q;
    d->q_frames++;
    d->q_bytes += total;
    /* Ask the worker to ring our doorbell when it frees room. */
    if (pm__ring_arm_space(&d->link.tx, total) != 0)
        d->busy = 1; /* room already: flush this turn */
    return 0;
}

void pm__hub_flush(pm_cluster *c, pm__slot *d)
{
    for (;;) {
        while (d->q_head != NULL) {
            pm__qframe *q = d->q_head;
            void *p;
            int rc = pm__ring_reserve(&d->link.tx, q->len, &p);
            if (rc == -EAGAIN)
                break;
            if (rc < 0) {
                pm__cluster_fault(c, d, PM_REASON_CORRUPT_RING);
                return;
            }
            memcpy(p, q->data, q->len);
            pm__ring_commit(&d->link.tx, q->len);
            d->dirty = 1;
            d->q_head = q->next;
            if (d->q_head == NULL)
                d->q_tail = NULL;
            d->q_frames--;
            d->q_bytes -= q->len;
            free(q);
        }
        if (d->q_head == NULL) {
            pm__ring_disarm_space(&d->link.tx);
            break;
        }
        /* Publish what we wrote so the worker can drain it, then wait for
         * its release unless room appeared meanwhile. */
        pm__ring_publish(&d->link.tx);
        d->dirty = 0;
        if (pm__ring_arm_space(&d->link.tx, d->q_head->len) <= 0)
            break;
    }
    /* Unblock the senders once half the queue is free: hysteresis, so a
     * sender does not flap between blocked and unblocked on every frame. */
    if (d->q_frames <= Q_MAX_FRAMES / 2 && d->q_bytes <= Q_MAX_BYTES / 2)
        unblock_senders(c, d->index);
}

static void free_queue(pm__slot *s)
{
    pm__qframe *q = s->q_head;
    while (q != NULL) {
        pm__qframe *next = q->next;
        free(q);
        q = next;
    }
    pm__hub_slot_reset(s);
}

void pm__hub_publish(pm_cluster *c)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *s = &c->slots[i];
        if (s->dirty) {
            s->dirty = 0;
            if (s->link.map != NULL)
                pm__ring_publish(&s->link.tx);
        }
    }
}

/* ------------------------------------------------------------------ in flight */

static int add_inflight(pm__slot *target, uint32_t requester, uint64_t requester_inc,
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
static int take_inflight(pm__slot *target, uint32_t requester, uint64_t id, pm__inflight *out)
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

static void main_address(const pm_cluster *c, pm_address *a)
{
    memset(a, 0, sizeof(*a));
    strcpy(a->system, c->o->system_name);
    strcpy(a->host, "main");
}

PM_EXTERN int pm_cluster_self(const pm_cluster *c, pm_address *out)
{
    if (c == NULL || out == NULL)
        return -EINVAL;
    main_address(c, out);
    return 0;
}

static pm__bcast *find_bcast(pm_cluster *c, uint64_t id)
{
    for (pm__bcast *b = c->bcasts; b != NULL; b = b->next)
        if (id >= b->first_id && id - b->first_id < b->n)
            return b;
    return NULL;
}

static void bcast_complete(pm_cluster *c, pm__bcast *b)
{
    pm__bcast **pp = &c->bcasts;
    while (*pp != NULL && *pp != b)
        pp = &(*pp)->next;
    if (*pp == b)
        *pp = b->next;
    /* Unlinked first: the callback may start another broadcast. */
    b->cb(c, b->results, b->n, b->arg);
    for (size_t i = 0; i < b->n; i++)
        free(b->bufs[i]);
    free(b->bufs);
    free(b->results);
    free(b);
}

/* Records one broadcast result. Returns 0, or -EALREADY for a duplicate or
 * an id that belongs to no broadcast (the caller counts it). */
static int bcast_result(pm_cluster *c, uint64_t id, int err, const void *data, size_t len)
{
    pm__bcast *b = find_bcast(c, id);
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
        bcast_complete(c, b);
    return 0;
}

static void fill_from(const pm_cluster *c, uint32_t node, uint64_t inc, pm_address *a)
{
    if (node == PM__NODE_MAIN) {
        main_address(c, a);
        return;
    }
    memset(a, 0, sizeof(*a));
    strcpy(a->system, c->o->system_name);
    strcpy(a->host, c->o->hostname);
    a->port = (uint16_t)(c->o->base_port + (int)node);
    a->incarnation = inc;
}

/* A frame for main: broadcast replies, or the on_message callback. The
 * payload is copied out of shared memory first: the application parses a
 * private copy that the worker can no longer change. */
static void deliver_main(pm_cluster *c, const pm__frame_hdr *h, const void *payload)
{
    if (h->type == PM__FT_REPLY || h->type == PM__FT_UNDELIVERABLE) {
        if (bcast_result(c, h->request_id, h->type == PM__FT_REPLY ? 0 : h->error, payload,
                         h->len) < 0)
            c->late_replies++;
        return;
    }
    if (c->o->on_message == NULL) {
        c->slots[h->src].malformed++; /* nobody listens: counted, dropped */
        return;
    }
    if (h->len > 0)
        memcpy(c->scratch, payload, h->len);
    pm_message m;
    memset(&m, 0, sizeof(m));
    fill_from(c, h->src, h->src_inc, &m.from);
    main_address(c, &m.to);
    m.request_id = h->request_id;
    m.kind = h->type == PM__FT_REQUEST ? PM_MSG_REQUEST : PM_MSG_PLAIN;
    m.deadline_ms = h->deadline_ms;
    m.data = c->scratch;
    m.len = h->len;
    c->o->on_message(c, &m, c->o->on_message_arg);
}

/* ------------------------------------------------------------------ routing */

/* Tells `to` (a slot, or main) that its frame about `about` could not be
 * delivered. A notice that finds no room is counted, never blocks. */
static void notice(pm_cluster *c, uint32_t to, uint64_t to_inc, uint32_t about,
                   uint64_t about_inc, uint64_t request_id, int err)
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
        deliver_main(c, &n, NULL);
        return;
    }
    if (to >= c->nslots)
        return;
    pm__slot *s = &c->slots[to];
    if (s->link.map == NULL || s->incarnation != to_inc) {
        c->notices_dropped++;
        return;
    }
    s->undeliverable++;
    if (push(s, &n, NULL, 0) < 0)
        c->notices_dropped++;
}

/* 0 when node/inc names a slot that can take a frame now, else why not. */
static int check_dest(const pm_cluster *c, uint32_t node, uint64_t inc)
{
    if (node >= c->nslots)
        return -ENOENT;
    const pm__slot *d = &c->slots[node];
    if (d->state != PM_SLOT_READY || d->link.map == NULL)
        return -EHOSTDOWN;
    if (inc != 0 && inc != d->incarnation)
        return -ESTALE;
    return 0;
}

int pm__hub_relay(pm_cluster *c, pm__slot *s, pm__frame_hdr *h, const void *payload)
{
    uint32_t src = s->index;
    if (h->type == PM__FT_REPLY) {
        /* A reply answers a request this slot's incarnation received and
         * has not answered yet; anything else is late or forged. */
        pm__inflight e;
        if (!take_inflight(s, h->dst, h->request_id, &e)) {
            c->late_replies++;
            return 0;
        }
        if (e.deadline_ms != 0 && e.deadline_ms < (int64_t)pm__now_ms()) {
            c->late_replies++; /* the requester gave up */
            if (h->dst == PM__NODE_MAIN)
                deliver_main(c, h, payload); /* the broadcast may still be open */
            return 0;
        }
        if (h->dst == PM__NODE_MAIN) {
            deliver_main(c, h, payload);
            s->relayed++;
            return 0;
        }
        if (check_dest(c, h->dst, e.requester_inc) < 0) {
            c->late_replies++;
            return 0;
        }
        h->dst_inc = e.requester_inc;
        int rc = push(&c->slots[h->dst], h, payload, h->len);
        if (rc == -EAGAIN) {
            /* Keep the request open: the reply is retried. */
            add_inflight(s, e.requester, e.requester_inc, e.request_id, e.deadline_ms);
            s->blocked_on = (int)h->dst;
            c->stats.ring_full_waits++;
            return -EAGAIN;
        }
        if (rc < 0) {
            pm__cluster_fault(c, &c->slots[h->dst], PM_REASON_CORRUPT_RING);
            return 0;
        }
        s->relayed++;
        s->relayed_bytes += h->len;
        return 0;
    }
    /* A message or a request. */
    if (h->dst == PM__NODE_MAIN) {
        deliver_main(c, h, payload);
        s->relayed++;
        s->relayed_bytes += h->len;
        return 0;
    }
    int err = check_dest(c, h->dst, h->dst_inc);
    if (err < 0) {
        notice(c, src, s->incarnation, h->dst, h->dst_inc, h->request_id, err);
        return 0;
    }
    pm__slot *d = &c->slots[h->dst];
    h->dst_inc = d->incarnation;
    if (h->type == PM__FT_REQUEST &&
        add_inflight(d, src, s->incarnation, h->request_id, h->deadline_ms) < 0) {
        notice(c, src, s->incarnation, h->dst, d->incarnation, h->request_id, -EBUSY);
        return 0;
    }
    int rc = push(d, h, payload, h->len);
    if (rc == -EAGAIN) {
        if (h->type == PM__FT_REQUEST)
            d->ninflight--; /* the entry just added: the frame is retried */
        s->blocked_on = (int)d->index;
        c->stats.ring_full_waits++;
        return -EAGAIN;
    }
    if (rc < 0) {
        /* d's ring is corrupt: d is fenced; a request gets its answer when
         * d's death is seen, a plain message is answered now. */
        pm__cluster_fault(c, d, PM_REASON_CORRUPT_RING);
        if (h->type != PM__FT_REQUEST)
            notice(c, src, s->incarnation, h->dst, d->incarnation, 0, -EHOSTDOWN);
        return 0;
    }
    s->relayed++;
    s->relayed_bytes += h->len;
    return 0;
}

void pm__hub_slot_gone(pm_cluster *c, pm__slot *s)
{
    /* Requests in flight to the dead incarnation: answered now. The array is
     * detached first, because answering may run callbacks. */
    pm__inflight *v = s->inflight;
    uint32_t n = s->ninflight;
    s->ninflight = 0;
    for (uint32_t i = 0; i < n; i++) {
        pm__inflight *e = &v[i];
        if (e->target_inc != s->incarnation)
            continue;
        notice(c, e->requester, e->requester_inc, s->index, e->target_inc, e->request_id,
               -EHOSTDOWN);
    }
    /* Its own requests to others will find no requester any more; drop
     * them now rather than at their replies. */
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *t = &c->slots[i];
        uint32_t k = 0;
        for (uint32_t j = 0; j < t->ninflight; j++) {
            pm__inflight *e = &t->inflight[j];
            if (!(e->requester == s->index && e->requester_inc == s->incarnation))
                t->inflight[k++] = *e;
        }
        t->ninflight = k;
    }
    free_queue(s);
    unblock_senders(c, s->index);
    s->blocked_on = -1;
}

void pm__hub_stop_request(pm_cluster *c, pm__slot *s)
{
    if (s->link.map == NULL)
        return;
    struct pm__ctl *ctl = s->link.map;
    /* Release: the worker reads the flag, then anything we wrote before. */
    atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    pm__frame_hdr h = pm__main_hdr(PM__FT_STOP, s);
    (void)push(s, &h, NULL, 0);
    s->dirty = 0;
    pm__ring_publish(&s->link.tx);
}

uint64_t pm__hub_next_deadline(const pm_cluster *c)
{
    uint64_t next = 0;
    for (const pm__bcast *b = c->bcasts; b != NULL; b = b->next)
        if (next == 0 || (uint64_t)b->deadline_ms < next)
            next = (uint64_t)b->deadline_ms;
    return next;
}

void pm__hub_fire(pm_cluster *c, uint64_t now)
{
    pm__bcast *b = c->bcasts;
    while (b != NULL) {
        pm__bcast *next = b->next;
        if ((uint64_t)b->deadline_ms <= now) {
            for (size_t i = 0; i < b->n; i++) {
                if (b->results[i].error != RESULT_PENDING)
                    continue;
                b->results[i].error = -ETIMEDOUT;
                /* Forget the request so a late reply is dropped and counted. */
                unsigned slot = (unsigned)(b->results[i].from.port - c->o->base_port);
                pm__inflight e;
                if (slot < c->nslots)
                    take_inflight(&c->slots[slot], PM__NODE_MAIN, b->first_id + i, &e);
            }
            b->pending = 0;
            bcast_complete(c, b);
            next = c->bcasts; /* the callback may have changed the list */
        }
        b = next;
    }
}

void pm__hub_free(pm_cluster *c)
{
    while (c->bcasts != NULL) {
        pm__bcast *b = c->bcasts;
        for (size_t i = 0; i < b->n; i++)
            if (b->results[i].error == RESULT_PENDING)
                b->results[i].error = -ECANCELED;
        bcast_complete(c, b);
    }
    for (unsigned i = 0; c->slots != NULL && i < c->nslots; i++) {
        free_queue(&c->slots[i]);
        free(c->slots[i].inflight);
        c->slots[i].inflight = NULL;
    }
    free(c->scratch);
    c->scratch = NULL;
}

/* ------------------------------------------------------------------ public */

/* Resolves an address of this mesh to a slot (or main). */
static int resolve(const pm_cluster *c, const pm_address *to, uint32_t *node)
{
    if (to == NULL || strncmp(to->system, c->o->system_name, PM_NAME_MAX) != 0)
        return -ENOENT;
    if (strncmp(to->host, "main", PM_NAME_MAX) == 0 && to->port == 0) {
        *node = PM__NODE_MAIN;
        return 0;
    }
    if (strncmp(to->host, c->o->hostname, PM_NAME_MAX) != 0 || to->port < c->o->base_port ||
        (unsigned)(to->port - c->o->base_port) >= c->nslots)
        return -ENOENT;
    *node = (uint32_t)(to->port - c->o->base_port);
    return 0;
}

static int main_send(pm_cluster *c, const pm_address *to, int type, uint64_t request_id,
                     const void *data, size_t len)
{
    if (c == NULL || (data == NULL && len > 0))
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE;
    uint32_t node;
    int rc = resolve(c, to, &node);
    if (rc < 0)
        return rc;
    if (node == PM__NODE_MAIN)
        return -EINVAL; /* main does not send to itself */
    rc = check_dest(c, node, to->incarnation);
    if (rc < 0)
        return rc;
    pm__slot *d = &c->slots[node];
    pm__frame_hdr h = pm__main_hdr(type, d);
    h.request_id = request_id;
    rc = push(d, &h, data, len);
    if (rc == -EBADMSG) {
        pm__cluster_fault(c, d, PM_REASON_CORRUPT_RING);
        return -EHOSTDOWN;
    }
    if (rc == 0 && d->dirty) {
        d->dirty = 0;
        pm__ring_publish(&d->link.tx);
    }
    return rc;
}

PM_EXTERN int pm_cluster_send(pm_cluster *c, const pm_address *to, const void *data, size_t len)
{
    return main_send(c, to, PM__FT_MSG, 0, data, len);
}

PM_EXTERN int pm_cluster_reply(pm_cluster *c, const pm_message *request, const void *data,
                               size_t len)
{
    if (request == NULL || request->kind != PM_MSG_REQUEST)
        return -EINVAL;
    return main_send(c, &request->from, PM__FT_REPLY, request->request_id, data, len);
}

PM_EXTERN int pm_cluster_broadcast(pm_cluster *c, const void *data, size_t len, int timeout_ms,
                                   void (*cb)(pm_cluster *, const pm_message *, size_t, void *),
                                   void *arg)
{
    if (c == NULL || cb == NULL || timeout_ms <= 0 || (data == NULL && len > 0))
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE;
    size_t n = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        n += c->slots[i].state == PM_SLOT_READY;
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
    b->first_id = c->next_req + 1;
    c->next_req += n;
    b->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    b->next = c->bcasts;
    c->bcasts = b;
    size_t k = 0;
    for (unsigned i = 0; i < c->nslots; i++) {
        pm__slot *d = &c->slots[i];
        if (d->state != PM_SLOT_READY)
            continue;
        pm_message *r = &b->results[k];
        uint64_t id = b->first_id + k;
        k++;
        fill_from(c, d->index, d->incarnation, &r->from);
        main_address(c, &r->to);
        r->request_id = id;
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
    for (unsigned i = 0; i < c->nslots && k < n; i++) {
        pm__slot *d = &c->slots[i];
        if (d->state != PM_SLOT_READY)
            continue;
        uint64_t id = b->first_id + k;
        k++;
        pm__frame_hdr h = pm__main_hdr(PM__FT_REQUEST, d);
        h.request_id = id;
        h.deadline_ms = b->deadline_ms;
        int rc = add_inflight(d, PM__NODE_MAIN, 0, id, b->deadline_ms);
        if (rc == 0) {
            rc = push(d, &h, data, len);
            if (rc < 0)
                d->ninflight--;
            if (rc == -EBADMSG) {
                pm__cluster_fault(c, d, PM_REASON_CORRUPT_RING);
                rc = -EHOSTDOWN;
            }
        }
        if (rc < 0)
            bcast_result(c, id, rc == -EBUSY ? -EAGAIN : rc, NULL, 0);
    }
    if (--b->pending == 0)
        bcast_complete(c, b);
    pm__hub_publish(c);
    return 0;
}
