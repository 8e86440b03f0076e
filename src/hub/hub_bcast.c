/* SPDX-License-Identifier: MIT */
/* hub_bcast.c - main's broadcasts: to this host's ready workers (pm_cluster_broadcast) and mesh-wide (pm_cluster_broadcast_mesh), each worker's result collected once. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include "channel/bigmsg.h"
#include "hub_int.h"
#include "base/le.h"
#include "channel/proto.h"

static pm__bcast *find_bcast(pm__hub *h, uint64_t id)
{
    for (pm__bcast *b = h->bcasts; b != NULL; b = b->next)
        if (id >= b->first_id && id - b->first_id < b->n)
            return b;
    return NULL;
}

/* A finished broadcast's results and their private copies of the
 * workers' replies, each wiped before the heap may hand it on. */
static void free_results(pm_message *results, void **bufs, size_t n)
{
    for (size_t i = 0; i < n; i++) {
        if (bufs[i] != NULL)
            explicit_bzero(bufs[i], results[i].len);
        free(bufs[i]);
    }
    free(bufs);
    free(results);
}

void pm__hub_bcast_complete(pm__hub *h, pm__bcast *b)
{
    pm__bcast **pp = &h->bcasts;
    while (*pp != NULL && *pp != b)
        pp = &(*pp)->next;
    if (*pp == b)
        *pp = b->next;
    /* Unlinked first: the callback may start another broadcast. */
    PM__HUB_CALLBACK(h, b->cb(h->app, b->results, b->n, b->arg));
    free_results(b->results, b->bufs, b->n);
    free(b);
}

void pm__hub_bcast_end_pending(pm__hub *h, pm__bcast *b, int err)
{
    for (size_t i = 0; i < b->n; i++) {
        if (b->results[i].error != RESULT_PENDING)
            continue;
        b->results[i].error = err;
        /* Forget the request so a late reply is dropped and counted
         * (filed under the origin's supervisor for a remote host's
         * fan-out: left in place, a late reply would cross the link as a
         * plain REPLY nobody asked for, even over a later connection). */
        uint32_t node;
        pm__inflight e;
        if (pm__address_node(&h->names, &b->results[i].from, &node) == 0 && node < h->nports)
            pm__hub_take_inflight(h, &h->ports[node],
                                  b->src_host == PM__HOST_LOCAL ? PM__NODE_MAIN
                                                                : PM__REMOTE_NODE(b->src_host, 0),
                                  b->first_id + i, &e);
    }
}

/* Every local broadcast still waiting ends now: its pending results
 * -ECANCELED (their requests forgotten), its callback run. The list is
 * taken first: a callback that starts another broadcast adds to a new
 * list, which this does not walk (it ends like any, or at pm__hub_free). */
void pm__hub_bcast_cancel_all(pm__hub *h)
{
    pm__bcast *b = h->bcasts;
    h->bcasts = NULL;
    while (b != NULL) {
        pm__bcast *next = b->next;
        pm__hub_bcast_end_pending(h, b, -ECANCELED);
        pm__hub_bcast_complete(h, b); /* unlinked already: not found, not unlinked */
        b = next;
    }
}

/* Records one broadcast result. Returns 0, or -EALREADY for a duplicate or
 * an id that belongs to no broadcast (the caller counts it). */
int pm__hub_bcast_result(pm__hub *h, uint64_t id, int err, const void *data, size_t len)
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

/* Sends request id to d for broadcast b: 0, or the error its result gets. */
static int bcast_send(pm__hub *h, pm__port *d, const pm__bcast *b, uint64_t id,
                      const void *data, size_t len)
{
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_REQUEST, d);
    f.request_id = id;
    f.deadline_ms = b->deadline_ms;
    uint32_t requester = PM__NODE_MAIN;
    if (b->src_host != PM__HOST_LOCAL) {
        /* A remote host's mesh broadcast: the worker sees it as what it
         * is, a request from that host's supervisor (system@host:0), as it
         * would see that supervisor's pm_cluster_request; the identity is
         * the link's, never ours. Its reply, addressed there, comes back
         * through pm__hub_relay_remote, which finds this entry under the
         * remote requester and settles it here (pm__hub_bcast_of). */
        f.src_host = b->src_host;
        f.src = 0;
        requester = PM__REMOTE_NODE(b->src_host, 0);
    }
    int rc = pm__hub_add_inflight(h, d, requester, 0, id, b->deadline_ms);
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

int pm__hub_bcast_of(pm__hub *h, uint64_t id, uint16_t host)
{
    const pm__bcast *b = id >= PM__BCAST_ID_BASE ? find_bcast(h, id) : NULL;
    return b != NULL && host != PM__HOST_LOCAL && b->src_host == host;
}

int pm__hub_broadcast(pm__hub *h, const void *data, size_t len, int timeout_ms,
                      void (*cb)(pm_cluster *, const pm_message *, size_t, void *), void *arg)
{
    return pm__hub_broadcast_for(h, PM__HOST_LOCAL, data, len, timeout_ms, cb, arg);
}

int pm__hub_broadcast_for(pm__hub *h, uint16_t src_host, const void *data, size_t len,
                          int timeout_ms,
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
    b->src_host = src_host;
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
            pm__hub_bcast_result(h, id, rc, NULL, 0);
    }
    if (--b->pending == 0)
        pm__hub_bcast_complete(h, b);
    pm__hub_publish(h);
    return 0;
}

/* ------------------------------------------------------------------ mesh broadcasts */

/* Appends one result (data copied). A result that finds no memory is kept
 * as -ENOMEM if there is a place for it; only a result array that cannot
 * grow loses it (counted late: the caller sees fewer results). */
static void mb_add(pm__hub *h, pm__mesh_broadcast *mb, const pm_address *from, uint64_t id, int err,
                   const void *data, size_t len)
{
    if (mb->n == mb->cap) {
        size_t cap = mb->cap ? mb->cap * 2 : 16;
        pm_message *r = realloc(mb->results, cap * sizeof(*r));
        if (r != NULL)
            mb->results = r;
        void **b = r != NULL ? realloc(mb->bufs, cap * sizeof(*b)) : NULL;
        if (b == NULL) {
            h->late_replies++;
            return;
        }
        mb->bufs = b;
        mb->cap = cap;
    }
    pm_message *m = &mb->results[mb->n];
    memset(m, 0, sizeof(*m));
    m->from = *from;
    pm__node_address(&h->names, PM__NODE_MAIN, 0, &m->to);
    m->request_id = id;
    m->kind = PM_MSG_REPLY;
    m->error = err;
    mb->bufs[mb->n] = NULL;
    if (err == 0 && len > 0) {
        void *copy = malloc(len);
        if (copy == NULL) {
            m->error = -ENOMEM;
        } else {
            memcpy(copy, data, len);
            mb->bufs[mb->n] = copy;
            m->data = copy;
            m->len = len;
        }
    }
    mb->n++;
}

/* Runs mb's callback once every part is settled, then frees it. */
static void mb_settle(pm__hub *h, pm__mesh_broadcast *mb)
{
    if (--mb->pending > 0)
        return;
    pm__mesh_broadcast **pp = &h->mesh_broadcasts;
    while (*pp != NULL && *pp != mb)
        pp = &(*pp)->next;
    if (*pp == mb)
        *pp = mb->next;
    /* Unlinked first: the callback may start another one. */
    PM__HUB_CALLBACK(h, mb->cb(h->app, mb->results, mb->n, mb->arg));
    free_results(mb->results, mb->bufs, mb->n);
    free(mb->parts);
    free(mb);
}

/* A remote host's part ends without (all of) its results: one result from
 * that host's supervisor, system@host:0, with err. */
static void mb_part_fail(pm__hub *h, pm__mesh_broadcast *mb, pm__mesh_broadcast_part *p, int err)
{
    pm_address from;
    pm__node_address_at(&h->names, p->host, PM__NODE_MAIN, 0, &from);
    p->done = 1;
    mb_add(h, mb, &from, p->id, err, NULL, 0);
    mb_settle(h, mb);
}

/* The local broadcast's results, copied into the mesh broadcast. */
static void mb_local_done(pm_cluster *c, const pm_message *results, size_t n, void *arg)
{
    (void)c;
    pm__mesh_broadcast *mb = arg;
    pm__hub *h = mb->hub_;
    for (size_t i = 0; i < n; i++)
        mb_add(h, mb, &results[i].from, results[i].request_id, results[i].error,
               results[i].data, results[i].len);
    mb_settle(h, mb);
}

static pm__mesh_broadcast_part *mb_find_part(pm__hub *h, uint64_t id, uint16_t host, pm__mesh_broadcast **out)
{
    for (pm__mesh_broadcast *mb = h->mesh_broadcasts; mb != NULL; mb = mb->next)
        for (size_t i = 0; i < mb->nparts; i++)
            if (mb->parts[i].id == id && mb->parts[i].host == host && !mb->parts[i].done) {
                *out = mb;
                return &mb->parts[i];
            }
    return NULL;
}

void pm__hub_mesh_broadcast_frame(pm__hub *h, uint16_t host, const pm__frame_hdr *f,
                          const unsigned char *payload)
{
    pm__mesh_broadcast *mb;
    pm__mesh_broadcast_part *p = mb_find_part(h, f->request_id, host, &mb);
    if (p == NULL) {
        h->late_replies++; /* settled already (deadline), or never ours */
        return;
    }
    if (f->type == PM__FT_BRESULT) {
        pm_address from;
        pm__node_address_at(&h->names, host, f->src, f->src_inc, &from);
        p->got++;
        mb_add(h, mb, &from, f->request_id, f->error, payload, f->len);
        return;
    }
    /* BDONE: results the remote sent that did not arrive (its link's
     * buffer was full) settle as one -ENOBUFS result from the host. */
    uint32_t count = f->len == 4 ? pm__get32(payload) : 0;
    if (count != p->got) {
        mb_part_fail(h, mb, p, -ENOBUFS);
        return;
    }
    p->done = 1;
    mb_settle(h, mb);
}

void pm__hub_mesh_broadcast_host_down(pm__hub *h, uint16_t host)
{
    pm__mesh_broadcast *mb = h->mesh_broadcasts;
    while (mb != NULL) {
        pm__mesh_broadcast *next = mb->next;
        pm__mesh_broadcast_part *p = NULL;
        for (size_t i = 0; i < mb->nparts && p == NULL; i++)
            if (mb->parts[i].host == host && !mb->parts[i].done)
                p = &mb->parts[i];
        if (p != NULL) {
            /* The callback may run and change the list: start over. */
            mb_part_fail(h, mb, p, -EHOSTUNREACH);
            next = h->mesh_broadcasts;
        }
        mb = next;
    }
}

void pm__hub_mesh_broadcast_fire(pm__hub *h, int64_t now, int all, int err)
{
    pm__mesh_broadcast *mb = h->mesh_broadcasts;
    while (mb != NULL) {
        pm__mesh_broadcast *next = mb->next;
        if (all || mb->deadline_ms <= now) {
            pm__mesh_broadcast_part *p = NULL;
            for (size_t i = 0; i < mb->nparts && p == NULL; i++) /* the first part not done */
                if (!mb->parts[i].done)
                    p = &mb->parts[i];
            if (p != NULL) {
                mb_part_fail(h, mb, p, err);
                next = h->mesh_broadcasts; /* again: it may have more parts, or be gone */
            }
        }
        mb = next;
    }
}

int pm__hub_broadcast_mesh(pm__hub *h, const void *data, size_t len, int timeout_ms,
                           void (*cb)(pm_cluster *, const pm_message *, size_t, void *),
                           void *arg)
{
    /* The other arguments are the local broadcast's, which checks them
     * before anything is sent (pm__hub_broadcast_for: -EINVAL, -EMSGSIZE;
     * then mb is freed below); its callback is ours, never NULL. */
    if (cb == NULL)
        return -EINVAL;
    uint32_t nhosts = h->peer_mode ? atomic_load_explicit(&h->hosts.count, memory_order_relaxed)
                                   : 1;
    pm__mesh_broadcast *mb = calloc(1, sizeof(*mb));
    if (mb == NULL)
        return -ENOMEM;
    mb->hub_ = h;
    mb->parts = calloc(nhosts, sizeof(*mb->parts));
    if (mb->parts == NULL) {
        free(mb);
        return -ENOMEM;
    }
    mb->cb = cb;
    mb->arg = arg;
    /* Every part is pending, plus one guard: no part settling early (a
     * host without a link, an empty local snapshot) may complete mb
     * before every part is out. */
    mb->nparts = nhosts - 1;
    mb->pending = 1 + mb->nparts + 1;
    for (uint32_t i = 0; i < mb->nparts; i++) {
        mb->parts[i].host = (uint16_t)(i + 1);
        mb->parts[i].id = ++h->next_req;
    }
    int rc = pm__hub_broadcast(h, data, len, timeout_ms, mb_local_done, mb);
    if (rc < 0) {
        free(mb->parts);
        free(mb);
        return rc;
    }
    /* Set after the local broadcast's own, so that its deadline (fired
     * first, pm__hub_fire) has always passed when this one does. */
    mb->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    mb->next = h->mesh_broadcasts;
    h->mesh_broadcasts = mb;
    for (size_t i = 0; i < mb->nparts; i++) {
        pm__mesh_broadcast_part *p = &mb->parts[i];
        rc = pm__hub_link_bcast(h, p->host, p->id, mb->deadline_ms, data, len);
        if (rc < 0)
            mb_part_fail(h, mb, p, rc == -ENOBUFS ? -ENOBUFS : -EHOSTUNREACH);
    }
    mb_settle(h, mb); /* the guard */
    return 0;
}

