/* SPDX-License-Identifier: MIT */
/* hub_main.c - main's side of the router: its broadcasts and its requests to one worker (pm_cluster_request), and what reaches main. */
#define _GNU_SOURCE
#include "hub.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "hub_int.h"
#include "proto.h"

static pm__bcast *find_bcast(pm__hub *h, uint64_t id)
{
    for (pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        if (id >= b->first_id && id - b->first_id < b->n)
            return b;
    return NULL;
}

void pm__hub_bcast_complete(pm__hub *h, pm__bcast *b)
{
    pm__bcast **pp = &h->bcasts;
    while (*pp != NULL && *pp != b)
        pp = &(*pp)->next;
    if (*pp == b)
        *pp = b->next;
    /* Unlinked first: the callback may start another broadcast. */
    PM__APP_CALLBACK(h, b->cb(h->app, b->results, b->n, b->arg));
    for (size_t i = 0; i < b->n; i++) {
        /* A worker's reply: wiped before the heap may hand it on. */
        if (b->bufs[i] != NULL)
            explicit_bzero(b->bufs[i], b->results[i].len);
        free(b->bufs[i]);
    }
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
        pm__hub_bcast_complete(h, b);
    return 0;
}

/* The hash of main's requests: ids are sequential, so the low bits spread
 * them evenly. */
static pm__mreq **mreq_bucket(pm__hub *h, uint64_t id)
{
    return &h->mreqs[id & (h->mreq_buckets - 1)];
}

static pm__mreq *mreq_find(pm__hub *h, uint64_t id)
{
    if (h->mreq_buckets == 0)
        return NULL;
    for (pm__mreq *r = *mreq_bucket(h, id); r != NULL; r = r->hnext)
        if (r->id == id)
            return r;
    return NULL;
}

/* Makes room for one more request: the table doubles past one request per
 * bucket. -ENOMEM leaves it as it was. */
static int mreq_reserve(pm__hub *h)
{
    if (h->nmreqs < h->mreq_buckets)
        return 0;
    size_t nb = h->mreq_buckets ? h->mreq_buckets * 2 : 64;
    pm__mreq **v = calloc(nb, sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < h->mreq_buckets; i++) {
        pm__mreq *r = h->mreqs[i];
        while (r != NULL) {
            pm__mreq *next = r->hnext;
            r->hnext = v[r->id & (nb - 1)];
            v[r->id & (nb - 1)] = r;
            r = next;
        }
    }
    free(h->mreqs);
    h->mreqs = v;
    h->mreq_buckets = nb;
    return 0;
}

/* Removes r from the table and from the waiting list, and forgets its
 * in-flight entry (if still there), so that a reply to it is late. */
static void mreq_unlink(pm__hub *h, pm__mreq *r)
{
    pm__mreq **pp = mreq_bucket(h, r->id);
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    h->nmreqs--;
    if (r->port == PM__MREQ_WAITING) {
        pm__mreq *prev = NULL;
        for (pm__mreq *w = h->waiting; w != NULL; prev = w, w = w->wnext) {
            if (w != r)
                continue;
            if (prev == NULL)
                h->waiting = w->wnext;
            else
                prev->wnext = w->wnext;
            if (h->waiting_tail == w)
                h->waiting_tail = prev;
            break;
        }
    } else if (r->port < h->nports) {
        pm__inflight e;
        pm__hub_take_inflight(h, &h->ports[r->port], PM__NODE_MAIN, r->id, &e);
    }
}

/* Runs r's callback (once: r is unlinked already and freed here). data is
 * a private copy (the scratch buffer) valid during the callback. */
static void mreq_finish(pm__hub *h, pm__mreq *r, int err, const void *data, size_t len)
{
    pm_message m;
    memset(&m, 0, sizeof(m));
    /* from: the worker it went to; all zero if it never left main. */
    if (r->port != PM__MREQ_WAITING)
        pm__node_address(&h->names, r->port, r->target_inc, &m.from);
    pm__node_address(&h->names, PM__NODE_MAIN, 0, &m.to);
    m.request_id = r->id;
    m.kind = PM_MSG_REPLY;
    m.error = err;
    m.deadline_ms = r->deadline_ms;
    m.data = err == 0 ? data : NULL;
    m.len = err == 0 ? len : 0;
    void (*cb)(pm_cluster *, const pm_message *, void *) = r->cb;
    void *arg = r->arg;
    if (r->data != NULL)
        explicit_bzero(r->data, r->len);
    free(r->data);
    free(r);
    PM__APP_CALLBACK(h, cb(h->app, &m, arg));
}

/* An answer for main (a reply, or an undeliverable notice: -EHOSTDOWN when
 * the worker died holding the request) goes to its request or its
 * broadcast by id; anything else is late. A reply the hub saw after the
 * request's deadline (before the timer did) is late too: the request
 * times out, as it would have a moment later. */
static void main_answer(pm__hub *h, const pm__frame_hdr *f, const void *payload)
{
    int err = f->type == PM__FT_REPLY ? 0 : f->error;
    if (f->request_id < PM__BCAST_ID_BASE) {
        pm__mreq *r = mreq_find(h, f->request_id);
        if (r == NULL) {
            h->late_replies++;
            return;
        }
        mreq_unlink(h, r);
        if (err == 0 && r->deadline_ms < (int64_t)pm__now_ms())
            err = -ETIMEDOUT;
        if (err == 0 && f->len > 0)
            memcpy(h->scratch, payload, f->len);
        mreq_finish(h, r, err, h->scratch, f->len);
        return;
    }
    if (bcast_result(h, f->request_id, err, payload, f->len) < 0)
        h->late_replies++;
}

/* A frame for main: answers to its requests and broadcasts, or the
 * on_message callback. The payload is copied out of shared memory first:
 * the application parses a private copy that the worker can no longer
 * change. port.c has checked that f->len <= PM_MAX_PAYLOAD, the size of
 * the scratch buffer. */
void pm__hub_deliver_main(pm__hub *h, const pm__frame_hdr *f, const void *payload)
{
    if (f->type == PM__FT_REPLY || f->type == PM__FT_UNDELIVERABLE) {
        main_answer(h, f, payload);
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
    PM__APP_CALLBACK(h, h->on_message(h->app, &m, h->on_message_arg));
}

/* The worker a request for "any worker" goes to: among the ready ports,
 * the one with the fewest of main's requests in flight; ties are broken
 * round robin, starting after the port picked last. NULL: none ready. */
static pm__port *pick_worker(pm__hub *h)
{
    pm__port *best = NULL;
    for (unsigned k = 1; k <= h->nports; k++) {
        pm__port *p = &h->ports[(h->mreq_rr + k) % h->nports];
        if (pm__hub_check_dest(h, p->index, 0) < 0)
            continue;
        if (best == NULL || p->main_inflight < best->main_inflight)
            best = p;
    }
    if (best != NULL)
        h->mreq_rr = best->index;
    return best;
}

/* Sends r to d: an in-flight entry (so d's death answers it), then the
 * frame, which carries the deadline so the worker can skip expired work.
 * 0, or -EAGAIN (main's hold is full), -EHOSTDOWN (d's ring is corrupt: d
 * is fenced), -ENOMEM; nothing is left behind on failure. */
static int mreq_send(pm__hub *h, pm__mreq *r, pm__port *d, const void *data, size_t len)
{
    int rc = pm__hub_add_inflight(h, d, PM__NODE_MAIN, 0, r->id, r->deadline_ms);
    if (rc < 0)
        return rc;
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_REQUEST, d);
    f.request_id = r->id;
    f.deadline_ms = r->deadline_ms;
    rc = pm__hub_push(h, d, &f, data, len, PM__NODE_MAIN);
    if (rc < 0) {
        pm__hub_drop_last_inflight(h, d);
        if (rc == -EBADMSG) {
            h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
            rc = -EHOSTDOWN;
        }
        return rc;
    }
    r->port = d->index;
    r->target_inc = d->incarnation;
    /* Published now rather than at the end of the turn: the caller may be
     * about to wait (pm_cluster_call) or may not run the loop soon. */
    if (d->dirty) {
        d->dirty = 0;
        pm__ring_publish(&d->link->tx);
    }
    return 0;
}

/* Requests that waited for a ready worker go out, oldest first, as long
 * as there is one. A request that cannot be sent for lack of room (main's
 * hold is full) waits for a later turn; any other failure is its answer. */
void pm__hub_mreq_dispatch_waiting(pm__hub *h)
{
    while (h->waiting != NULL) {
        pm__mreq *r = h->waiting;
        pm__port *d = pick_worker(h);
        if (d == NULL)
            return;
        int rc = mreq_send(h, r, d, r->data, r->len);
        if (rc == -EAGAIN)
            return;
        /* Off the waiting list (r->port is set only on success). */
        h->waiting = r->wnext;
        if (h->waiting == NULL)
            h->waiting_tail = NULL;
        r->wnext = NULL;
        explicit_bzero(r->data, r->len);
        free(r->data);
        r->data = NULL;
        if (rc < 0) {
            pm__mreq **pp = mreq_bucket(h, r->id);
            while (*pp != r)
                pp = &(*pp)->hnext;
            *pp = r->hnext;
            h->nmreqs--;
            mreq_finish(h, r, rc, NULL, 0);
        }
    }
}

/* Unlinks, in one pass over the table, every request whose deadline is
 * at or before now (every request when all is set) and returns them as a
 * list chained by hnext; *next gets the earliest deadline left (0 none).
 * The callbacks run afterwards, over the detached list: they may add or
 * cancel requests without disturbing a walk, and a cancel of one already
 * taken finds it gone (-ENOENT) while its own callback is still to come. */
static pm__mreq *mreq_take_due(pm__hub *h, int64_t now, int all, int64_t *next)
{
    pm__mreq *taken = NULL;
    int waiting_taken = 0;
    *next = 0;
    for (size_t i = 0; i < h->mreq_buckets; i++) {
        pm__mreq **pp = &h->mreqs[i];
        while (*pp != NULL) {
            pm__mreq *r = *pp;
            if (!all && r->deadline_ms > now) {
                if (*next == 0 || r->deadline_ms < *next)
                    *next = r->deadline_ms;
                pp = &r->hnext;
                continue;
            }
            *pp = r->hnext;
            h->nmreqs--;
            if (r->port == PM__MREQ_WAITING) {
                r->taken = 1;
                waiting_taken = 1;
            } else if (r->port < h->nports) {
                pm__inflight e;
                pm__hub_take_inflight(h, &h->ports[r->port], PM__NODE_MAIN, r->id, &e);
            }
            r->hnext = taken;
            taken = r;
        }
    }
    if (waiting_taken) {
        /* One pass over the waiting list drops every taken request. */
        pm__mreq **wp = &h->waiting;
        h->waiting_tail = NULL;
        while (*wp != NULL) {
            if ((*wp)->taken) {
                *wp = (*wp)->wnext;
            } else {
                h->waiting_tail = *wp;
                wp = &(*wp)->wnext;
            }
        }
    }
    return taken;
}

/* Requests past their deadline: -ETIMEDOUT, and their in-flight entries
 * are forgotten so that a reply after this is dropped and counted late.
 * mreq_due_ms is a lower bound of the deadlines (lowered on insert, never
 * raised on removal), so the table is walked only when one may be due. */
void pm__hub_mreq_expire(pm__hub *h, int64_t now)
{
    if (h->mreq_due_ms == 0 || now < h->mreq_due_ms)
        return;
    int64_t next;
    pm__mreq *r = mreq_take_due(h, now, 0, &next);
    h->mreq_due_ms = next; /* callbacks that add requests lower it again */
    while (r != NULL) {
        pm__mreq *following = r->hnext;
        mreq_finish(h, r, -ETIMEDOUT, NULL, 0);
        r = following;
    }
}

int pm__hub_request(pm__hub *h, const pm_address *to, const void *data, size_t len,
                    int timeout_ms, void (*cb)(pm_cluster *, const pm_message *, void *),
                    void *arg)
{
    if (cb == NULL || timeout_ms <= 0 || (data == NULL && len > 0))
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD)
        return -EMSGSIZE;
    if (h->mreq_closed)
        return -ESHUTDOWN;
    pm__port *d = NULL;
    if (to != NULL) {
        uint32_t node;
        int rc = pm__address_node(&h->names, to, &node);
        if (rc < 0)
            return rc;
        if (node == PM__NODE_MAIN)
            return -EINVAL; /* main does not ask itself */
        rc = pm__hub_check_dest(h, node, to->incarnation);
        if (rc < 0)
            return rc;
        d = &h->ports[node];
    } else {
        /* Older waiting requests first, so a new one cannot overtake them. */
        pm__hub_mreq_dispatch_waiting(h);
        if (h->waiting == NULL)
            d = pick_worker(h);
    }
    if (h->nmreqs >= INT_MAX - 1)
        return -EAGAIN; /* every id is taken (not in practice) */
    if (mreq_reserve(h) < 0)
        return -ENOMEM;
    pm__mreq *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    /* Ids are returned as an int: they wrap within 1..INT_MAX, skipping
     * those still pending. */
    do
        h->mreq_last_id = h->mreq_last_id >= INT_MAX ? 1 : h->mreq_last_id + 1;
    while (mreq_find(h, h->mreq_last_id) != NULL);
    r->id = h->mreq_last_id;
    r->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    r->cb = cb;
    r->arg = arg;
    r->port = PM__MREQ_WAITING;
    if (d != NULL) {
        int rc = mreq_send(h, r, d, data, len);
        if (rc < 0) {
            free(r);
            return rc;
        }
    } else {
        /* No worker ready: it waits with a private copy of its payload. */
        r->data = malloc(len ? len : 1);
        if (r->data == NULL) {
            free(r);
            return -ENOMEM;
        }
        if (len > 0)
            memcpy(r->data, data, len);
        r->len = len;
        if (h->waiting_tail != NULL)
            h->waiting_tail->wnext = r;
        else
            h->waiting = r;
        h->waiting_tail = r;
    }
    pm__mreq **b = mreq_bucket(h, r->id);
    r->hnext = *b;
    *b = r;
    h->nmreqs++;
    if (h->mreq_due_ms == 0 || r->deadline_ms < h->mreq_due_ms)
        h->mreq_due_ms = r->deadline_ms;
    return (int)r->id;
}

int pm__hub_cancel(pm__hub *h, uint64_t id)
{
    pm__mreq *r = id >= PM__BCAST_ID_BASE ? NULL : mreq_find(h, id);
    if (r == NULL)
        return -ENOENT;
    mreq_unlink(h, r);
    mreq_finish(h, r, -ECANCELED, NULL, 0);
    return 0;
}

void pm__hub_cancel_all(pm__hub *h)
{
    h->mreq_closed = 1; /* the callbacks below cannot add any */
    int64_t next;
    pm__mreq *r = mreq_take_due(h, 0, 1, &next);
    h->mreq_due_ms = 0;
    while (r != NULL) {
        pm__mreq *following = r->hnext;
        mreq_finish(h, r, -ECANCELED, NULL, 0);
        r = following;
    }
}

/* Sends request id to d for broadcast b: 0, or the error its result gets. */
static int bcast_send(pm__hub *h, pm__port *d, const pm__bcast *b, uint64_t id,
                      const void *data, size_t len)
{
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_REQUEST, d);
    f.request_id = id;
    f.deadline_ms = b->deadline_ms;
    int rc = pm__hub_add_inflight(h, d, PM__NODE_MAIN, 0, id, b->deadline_ms);
    if (rc < 0)
        return -EAGAIN; /* no memory for its in-flight table: try again later */
    rc = pm__hub_push(h, d, &f, data, len, PM__NODE_MAIN);
    if (rc < 0)
        pm__hub_drop_last_inflight(h, d);
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
        pm__hub_bcast_complete(h, b);
    pm__hub_publish(h);
    return 0;
}
