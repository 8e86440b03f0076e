/* SPDX-License-Identifier: MIT */
/* hub_main.c - main's side of the router: its requests to one worker (pm_cluster_request, here or over a link) and what reaches main (answers, on_message). */
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

/* The hash of main's requests: ids are sequential, so the low bits spread
 * them evenly. */
static pm__main_request **main_request_bucket(pm__hub *h, uint64_t id)
{
    return &h->main_requests[id & (h->main_request_buckets - 1)];
}

static pm__main_request *main_request_find(pm__hub *h, uint64_t id)
{
    if (h->main_request_buckets == 0)
        return NULL;
    for (pm__main_request *r = *main_request_bucket(h, id); r != NULL; r = r->hnext)
        if (r->id == id)
            return r;
    return NULL;
}

/* Makes room for one more request: the table doubles past one request per
 * bucket. -ENOMEM leaves it as it was. */
static int main_request_reserve(pm__hub *h)
{
    if (h->main_request_count < h->main_request_buckets)
        return 0;
    size_t nb = h->main_request_buckets ? h->main_request_buckets * 2 : 64;
    pm__main_request **v = calloc(nb, sizeof(*v));
    if (v == NULL)
        return -ENOMEM;
    for (size_t i = 0; i < h->main_request_buckets; i++) {
        pm__main_request *r = h->main_requests[i];
        while (r != NULL) {
            pm__main_request *next = r->hnext;
            r->hnext = v[r->id & (nb - 1)];
            v[r->id & (nb - 1)] = r;
            r = next;
        }
    }
    free(h->main_requests);
    h->main_requests = v;
    h->main_request_buckets = nb;
    return 0;
}

/* An any-worker request of a local port's (its callers check r->port <
 * h->nports) leaves its hands: the worker may take the next one. */
static void main_request_release_port(pm__hub *h, const pm__main_request *r)
{
    if (!r->any)
        return;
    pm__port *p = &h->ports[r->port];
    if (p->incarnation == r->target_inc && p->any_held > 0)
        p->any_held--;
}

/* Removes r from the table and from the waiting list, and forgets its
 * in-flight entry (if still there), so that a reply to it is late. */
static void main_request_unlink(pm__hub *h, pm__main_request *r)
{
    pm__main_request **pp = main_request_bucket(h, r->id);
    while (*pp != r)
        pp = &(*pp)->hnext;
    *pp = r->hnext;
    h->main_request_count--;
    if (r->port == PM__MAIN_REQUEST_WAITING) {
        pm__main_request *prev = NULL;
        for (pm__main_request *w = h->waiting; w != NULL; prev = w, w = w->wnext) {
            if (w != r)
                continue;
            if (prev == NULL)
                h->waiting = w->wnext;
            else
                prev->wnext = w->wnext;
            if (h->waiting_tail == w)
                h->waiting_tail = prev;
            h->nwaiting--;
            break;
        }
    } else if (r->port < h->nports) {
        pm__inflight e;
        pm__hub_take_inflight(h, &h->ports[r->port], PM__NODE_MAIN, r->id, &e);
        main_request_release_port(h, r);
    } else if (r->port == PM__MAIN_REQUEST_REMOTE) {
        pm__hub_link_forget(h, r->host, PM__NODE_MAIN, r->id, r->remote_port);
    }
}

/* Runs r's callback (once: r is unlinked already and freed here). data is
 * a private copy (the scratch buffer) valid during the callback. */
static void main_request_finish(pm__hub *h, pm__main_request *r, int err, const void *data, size_t len)
{
    pm_message m;
    memset(&m, 0, sizeof(m));
    /* from: the worker it went to; all zero if it never left main. */
    if (r->port == PM__MAIN_REQUEST_REMOTE)
        pm__node_address_at(&h->names, r->host, r->remote_port, r->target_inc, &m.from);
    else if (r->port != PM__MAIN_REQUEST_WAITING)
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
    /* What the callback may ask about (pm_cluster_request_outcome): set
     * for this callback only, and put back after it, since a callback may
     * cancel another request, whose callback then runs inside this one. */
    pm__outcome_ctx saved = h->outcome;
    h->outcome.reply = &m;
    h->outcome.killed = r->killed;
    h->outcome.ending = NULL;
    const pm__ending *end = h->ending;
    if (err == -EHOSTDOWN && end != NULL && r->port == end->port &&
        r->target_inc == end->incarnation)
        h->outcome.ending = end;
    if (r->data != NULL)
        explicit_bzero(r->data, r->len);
    free(r->data);
    pm__close(r->fd);
    free(r);
    PM__HUB_CALLBACK(h, cb(h->app, &m, arg));
    h->outcome = saved;
}

/* An answer for main (a reply, or an undeliverable notice: -EHOSTDOWN when
 * the worker died holding the request) goes to its request or its
 * broadcast by id; anything else is late. A reply the hub saw after the
 * request's deadline (before the timer did) is late too: the request
 * times out, as it would have a moment later. */
static void main_answer(pm__hub *h, const pm__frame_hdr *f, const void *payload, size_t len,
                        int sealed)
{
    int err = f->type == PM__FT_REPLY ? 0 : f->error;
    if (f->request_id < PM__BCAST_ID_BASE) {
        pm__main_request *r = main_request_find(h, f->request_id);
        if (r == NULL) {
            /* Answers nothing: a worker's refusal of main's large plain
             * message (id 0, port.c refusal; pm_cluster(3): counted late). */
            h->late_replies++;
            return;
        }
        /* A remote answer is from the host and port r went to: it came
         * through the link's entry for (main, id, that port)
         * (hub_linkin.c pm__hub_link_answer; pm__hub_link_down answers
         * the entries themselves), as a local one through its port's. */
        main_request_unlink(h, r);
        /* A remote answer names the incarnation that held the request,
         * stamped by the remote hub (the request may have named none). */
        if (r->port == PM__MAIN_REQUEST_REMOTE && f->src_inc != 0)
            r->target_inc = f->src_inc;
        if (err == 0 && r->deadline_ms < (int64_t)pm__now_ms()) {
            err = -ETIMEDOUT; /* the reply is dropped and counted (pm_cluster_request) */
            h->late_replies++;
        }
        if (sealed) {
            main_request_finish(h, r, err, payload, len);
            return;
        }
        if (err == 0 && len > 0)
            memcpy(h->scratch, payload, len);
        main_request_finish(h, r, err, h->scratch, len);
        return;
    }
    if (pm__hub_bcast_result(h, f->request_id, err, payload, len) < 0)
        h->late_replies++;
}

/* A reply to main from local port p that no in-flight entry waits for:
 * late (its request timed out or was cancelled, or it answers nothing).
 * It never reaches main_answer, which trusts the entry relay_reply took
 * for who may answer which id. A worker that owes an answer (a request
 * timed out while it held it: p->stuck) and answers late is working
 * again: it may take any-worker requests once it owes none. The hub does
 * not keep which ids a worker owes, so any late answer of main's id space
 * counts; a worker can only make itself look less stuck, which gives it
 * more of main's work, never anyone else's. */
void pm__hub_main_late(pm__hub *h, pm__port *p, uint64_t request_id)
{
    h->late_replies++;
    if (request_id < PM__BCAST_ID_BASE && p->stuck > 0)
        p->stuck--;
}

/* The frame for main, delivered: payload[0..len) is either a private copy
 * to make (sealed 0) or a large message's read-only mapping of a sealed
 * memfd (sealed 1), which the worker can no longer change either. */
static void deliver(pm__hub *h, const pm__frame_hdr *f, const void *payload, size_t len, int sealed)
{
    if (f->type == PM__FT_REPLY || f->type == PM__FT_UNDELIVERABLE) {
        main_answer(h, f, payload, len, sealed);
        return;
    }
    if (h->on_message == NULL) {
        if (f->src_host == PM__HOST_LOCAL && f->src < h->nports)
            h->ports[f->src].malformed++; /* nobody listens: counted, dropped */
        if (f->type == PM__FT_REQUEST) {
            /* Nobody answers here (a daemon has no on_message): the
             * requester, local or on another host, learns so now instead
             * of at its deadline. */
            uint32_t to = f->src_host == PM__HOST_LOCAL ? f->src
                                                        : PM__REMOTE_NODE(f->src_host, f->src);
            pm__hub_notice_at(h, to, f->src_inc, PM__HOST_LOCAL, PM__NODE_MAIN, 0,
                              f->request_id, -ENOENT);
        }
        return;
    }
    const void *data = payload;
    if (!sealed && len > 0) {
        memcpy(h->scratch, payload, len);
        data = h->scratch;
    }
    pm_message m;
    memset(&m, 0, sizeof(m));
    pm__node_address_at(&h->names, f->src_host, f->src, f->src_inc, &m.from);
    pm__node_address(&h->names, PM__NODE_MAIN, 0, &m.to);
    m.request_id = f->request_id;
    m.kind = f->type == PM__FT_REQUEST ? PM_MSG_REQUEST : PM_MSG_PLAIN;
    m.deadline_ms = f->deadline_ms;
    m.data = len > 0 ? data : h->scratch;
    m.len = len;
    PM__HUB_CALLBACK(h, h->on_message(h->app, &m, h->on_message_arg));
}

/* A large message main cannot map (its address space is full; the hub
 * has checked the fd, so not because of its sender): skipped and counted
 * (big_unmapped), never silently. Its sender is told -EMSGSIZE, as a
 * worker that cannot map one tells it (port.c, refusal); a reply is
 * answered to main's own request as that notice. */
static void main_refuse(pm__hub *h, const pm__frame_hdr *f)
{
    h->big_unmapped++;
    pm__frame_hdr n = *f; /* main_answer reads its type, error, id and source */
    n.type = PM__FT_UNDELIVERABLE;
    n.error = -EMSGSIZE;
    if (f->type == PM__FT_REPLY) {
        deliver(h, &n, NULL, 0, 0);
        return;
    }
    uint32_t to = f->src_host == PM__HOST_LOCAL ? f->src : PM__REMOTE_NODE(f->src_host, f->src);
    pm__hub_notice_at(h, to, f->src_inc, PM__HOST_LOCAL, PM__NODE_MAIN, 0, f->request_id,
                      -EMSGSIZE);
}

/* A frame for main: answers to its requests and broadcasts, or the
 * on_message callback. The payload is copied out of shared memory first:
 * the application parses a private copy that the worker can no longer
 * change. port.c has checked that f->len <= PM_MAX_PAYLOAD, the size of
 * the scratch buffer. A large message (h->cur_fd, checked by port.c) is
 * mapped read-only instead, and unmapped when the callback has returned. */
void pm__hub_deliver_main(pm__hub *h, const pm__frame_hdr *f, const void *payload)
{
    if ((f->flags & PM__FF_MEMFD) == 0) {
        deliver(h, f, payload, f->len, 0);
        return;
    }
    const void *map;
    size_t len = (size_t)h->cur_len;
    if (pm__bigmsg_map(h->cur_fd, len, &map) < 0) {
        main_refuse(h, f);
        return;
    }
    deliver(h, f, map, len, 1);
    munmap((void *)map, len);
}

/* The worker a request for "any worker" goes to: a ready port, still read
 * (not fenced or being killed), holding fewer than any_per_worker of
 * main's any-worker requests (by default none: so that a crash or a fence
 * ends exactly the request that caused it) and owing no answer to a
 * request that timed out (a hung worker gets no more); among those the
 * fewest of main's requests in flight (broadcasts and named requests
 * included); ties round robin, starting
 * after the port picked last. NULL: none fits, the request waits. */
static pm__port *pick_worker(pm__hub *h)
{
    pm__port *best = NULL;
    for (unsigned k = 1; k <= h->nports; k++) {
        pm__port *p = &h->ports[(h->main_request_rr + k) % h->nports];
        if (pm__hub_check_dest(h, p->index, 0) < 0 || !p->reading ||
            p->any_held >= h->any_per_worker || p->stuck > 0)
            continue;
        if (best == NULL || p->main_inflight < best->main_inflight)
            best = p;
    }
    if (best != NULL)
        h->main_request_rr = best->index;
    return best;
}

int pm__hub_port_holds_main(const pm__hub *h, unsigned p)
{
    return h->ports[p].main_inflight > 0 || h->ports[p].stuck > 0;
}

/* Sends r to d: an in-flight entry (so d's death answers it), then the
 * frame, which carries the deadline so the worker can skip expired work.
 * 0, or -EAGAIN (main's hold is full), -EHOSTDOWN (d's ring is corrupt: d
 * is fenced), -ENOMEM; nothing is left behind on failure. */
static int main_request_send(pm__hub *h, pm__main_request *r, pm__port *d, const void *data, size_t len, int fd)
{
    int rc = pm__hub_add_inflight(h, d, PM__NODE_MAIN, 0, r->id, r->deadline_ms);
    if (rc < 0)
        return rc;
    pm__frame_hdr f = pm__hub_main_hdr(PM__FT_REQUEST, d);
    f.request_id = r->id;
    f.deadline_ms = r->deadline_ms;
    /* A large request (fd >= 0): on success the fd is the hub's. */
    rc = fd >= 0 ? pm__hub_push_fd(h, d, &f, fd, len, PM__NODE_MAIN)
                 : pm__hub_push(h, d, &f, data, len, PM__NODE_MAIN);
    if (rc < 0) {
        pm__hub_drop_last_inflight(h, d);
        if (rc == -EBADMSG) {
            h->ops->fault(h->owner, d->index, PM_REASON_CORRUPT_RING);
            rc = -EHOSTDOWN;
        }
        return rc == -ETOOMANYREFS ? -EAGAIN : rc; /* refused for now (send_big) */
    }
    r->port = d->index;
    r->target_inc = d->incarnation;
    if (r->any)
        d->any_held++;
    /* Published now rather than at the end of the turn: the caller may be
     * about to wait (pm_cluster_call) or may not run the loop soon. */
    if (d->dirty) {
        d->dirty = 0;
        pm__ring_publish(&d->channel->tx);
    }
    return 0;
}

/* Requests that waited for a ready worker go out, oldest first, as long
 * as there is one. A request that cannot be sent for lack of room (main's
 * hold is full) waits for a later turn; any other failure is its answer. */
void pm__hub_main_request_dispatch_waiting(pm__hub *h)
{
    while (h->waiting != NULL) {
        pm__main_request *r = h->waiting;
        pm__port *d = pick_worker(h);
        if (d == NULL)
            return;
        int rc = main_request_send(h, r, d, r->data, r->len, r->fd);
        if (rc == -EAGAIN)
            return;
        if (rc == 0)
            r->fd = -1; /* the hub's now */
        /* Off the waiting list (r->port is set only on success). */
        h->waiting = r->wnext;
        if (h->waiting == NULL)
            h->waiting_tail = NULL;
        h->nwaiting--;
        r->wnext = NULL;
        if (r->data != NULL)
            explicit_bzero(r->data, r->len);
        free(r->data);
        r->data = NULL;
        if (rc < 0) {
            pm__main_request **pp = main_request_bucket(h, r->id);
            while (*pp != r)
                pp = &(*pp)->hnext;
            *pp = r->hnext;
            h->main_request_count--;
            main_request_finish(h, r, rc, NULL, 0);
        }
    }
}

/* Unlinks, in one pass over the table, every request whose deadline is
 * at or before now (every request when all is set) and returns them as a
 * list chained by hnext; *next gets the earliest deadline left (0 none).
 * The callbacks run afterwards, over the detached list: they may add or
 * cancel requests without disturbing a walk, and a cancel of one already
 * taken finds it gone (-ENOENT) while its own callback is still to come. */
static pm__main_request *main_request_take_due(pm__hub *h, int64_t now, int all, int64_t *next)
{
    pm__main_request *taken = NULL;
    int waiting_taken = 0;
    *next = 0;
    for (size_t i = 0; i < h->main_request_buckets; i++) {
        pm__main_request **pp = &h->main_requests[i];
        while (*pp != NULL) {
            pm__main_request *r = *pp;
            if (!all && r->deadline_ms > now) {
                if (*next == 0 || r->deadline_ms < *next)
                    *next = r->deadline_ms;
                pp = &r->hnext;
                continue;
            }
            *pp = r->hnext;
            h->main_request_count--;
            if (r->port == PM__MAIN_REQUEST_WAITING) {
                r->taken = 1;
                waiting_taken = 1;
            } else if (r->port < h->nports) {
                pm__inflight e;
                if (pm__hub_take_inflight(h, &h->ports[r->port], PM__NODE_MAIN, r->id, &e) &&
                    !all)
                    r->killed = -1; /* its worker holds it still: see pm__hub_main_request_expire */
                main_request_release_port(h, r);
            } else if (r->port == PM__MAIN_REQUEST_REMOTE) {
                pm__hub_link_forget(h, r->host, PM__NODE_MAIN, r->id, r->remote_port);
            }
            r->hnext = taken;
            taken = r;
        }
    }
    if (waiting_taken) {
        /* One pass over the waiting list drops every taken request. */
        pm__main_request **wp = &h->waiting;
        h->waiting_tail = NULL;
        while (*wp != NULL) {
            if ((*wp)->taken) {
                *wp = (*wp)->wnext;
                h->nwaiting--;
            } else {
                h->waiting_tail = *wp;
                wp = &(*wp)->wnext;
            }
        }
    }
    return taken;
}

/* r timed out while its worker's incarnation held it: the worker owes an
 * answer (no any-worker request until it gives it or ends), and with
 * kill_on_timeout it is killed now, before any callback runs, so the
 * callbacks see it cut off. 1 when it was killed. "Held" is what
 * main_request_take_due found a moment ago, with no callback in between:
 * the in-flight entry of the port's current incarnation (an ended
 * incarnation's entries went with pm__hub_port_close). */
static int main_request_timed_out(pm__hub *h, const pm__main_request *r)
{
    pm__port *p = &h->ports[r->port];
    p->stuck++;
    if (!h->kill_on_timeout || h->ops->timed_out == NULL || !p->reading)
        return 0;
    h->ops->timed_out(h->owner, p->index);
    return 1;
}

/* Requests past their deadline: -ETIMEDOUT, and their in-flight entries
 * are forgotten so that a reply after this is dropped and counted late.
 * main_request_due_ms is a lower bound of the deadlines (lowered on insert, never
 * raised on removal), so the table is walked only when one may be due. */
void pm__hub_main_request_expire(pm__hub *h, int64_t now)
{
    if (h->main_request_due_ms == 0 || now < h->main_request_due_ms) /* none may be due */
        return;
    int64_t next;
    pm__main_request *r = main_request_take_due(h, now, 0, &next);
    h->main_request_due_ms = next; /* callbacks that add requests lower it again */
    for (pm__main_request *t = r; t != NULL; t = t->hnext)
        if (t->killed == -1)
            t->killed = main_request_timed_out(h, t);
    while (r != NULL) {
        pm__main_request *following = r->hnext;
        main_request_finish(h, r, -ETIMEDOUT, NULL, 0);
        r = following;
    }
}

/* The next free id of main's requests: returned as an int, they wrap
 * within 1..INT_MAX, skipping those still pending. */
static uint64_t main_request_next_id(pm__hub *h)
{
    do
        h->main_request_last_id = h->main_request_last_id >= INT_MAX ? 1 : h->main_request_last_id + 1;
    while (main_request_find(h, h->main_request_last_id) != NULL);
    return h->main_request_last_id;
}

static void main_request_insert(pm__hub *h, pm__main_request *r)
{
    pm__main_request **b = main_request_bucket(h, r->id);
    r->hnext = *b;
    *b = r;
    h->main_request_count++;
    if (h->main_request_due_ms == 0 || r->deadline_ms < h->main_request_due_ms)
        h->main_request_due_ms = r->deadline_ms;
}

/*
 * Main's request to address port `port` of remote host `host`. Only
 * workers answer main's requests: port 0 (that host's supervisor) is
 * -EINVAL, as main is for itself (talk to a supervisor with
 * pm_cluster_send). The request goes over the link at once with its
 * deadline as milliseconds remaining; its answer is exactly one of: the
 * reply, -ETIMEDOUT (our timer), -EHOSTDOWN (the remote worker died
 * holding it: the remote hub's notice), -ESTALE or -ENOENT (the remote hub
 * refused the address), -EHOSTUNREACH (the link went down first).
 */
static int remote_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                          const void *data, size_t len, int timeout_ms,
                          void (*cb)(pm_cluster *, const pm_message *, void *), void *arg)
{
    if (port == 0)
        return -EINVAL;
    if (h->main_request_count >= INT_MAX - 1)
        return -EAGAIN;
    if (main_request_reserve(h) < 0)
        return -ENOMEM;
    pm__main_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->fd = -1;
    r->id = main_request_next_id(h);
    r->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    r->cb = cb;
    r->arg = arg;
    r->port = PM__MAIN_REQUEST_REMOTE;
    r->host = host;
    r->remote_port = port;
    r->target_inc = inc;
    int rc = pm__hub_link_main_request(h, host, port, inc, r->id, r->deadline_ms, data, len);
    if (rc < 0) {
        free(r);
        return rc;
    }
    main_request_insert(h, r);
    return (int)r->id;
}

/* A new request of main's, not sent yet: its id and deadline, and above
 * PM_MAX_PAYLOAD its payload sealed in a memfd now (a waiting request keeps
 * the memfd, not a copy). 0, or -ENOMEM / the memfd's error. */
static int main_request_new(pm__hub *h, const void *data, size_t len, int timeout_ms,
                    void (*cb)(pm_cluster *, const pm_message *, void *), void *arg,
                    pm__main_request **out)
{
    pm__main_request *r = calloc(1, sizeof(*r));
    if (r == NULL)
        return -ENOMEM;
    r->fd = -1;
    if (len > PM_MAX_PAYLOAD) {
        r->fd = pm__hub_main_memfd(h, data, len);
        if (r->fd < 0) {
            int rc = r->fd;
            free(r);
            return rc;
        }
        r->len = len;
    }
    r->id = main_request_next_id(h);
    r->deadline_ms = (int64_t)pm__now_ms() + timeout_ms;
    r->cb = cb;
    r->arg = arg;
    r->port = PM__MAIN_REQUEST_WAITING;
    *out = r;
    return 0;
}

int pm__hub_request(pm__hub *h, const pm_address *to, const void *data, size_t len,
                    int timeout_ms, void (*cb)(pm_cluster *, const pm_message *, void *),
                    void *arg)
{
    if (cb == NULL || timeout_ms <= 0 || (data == NULL && len > 0))
        return -EINVAL;
    if (len > h->max_message)
        return -EMSGSIZE;
    if (h->main_request_closed)
        return -ESHUTDOWN;
    pm__port *d = NULL;
    uint16_t host = PM__HOST_LOCAL;
    uint32_t node = 0;
    if (to != NULL) {
        int rc = pm__address_route(&h->names, to, &host, &node);
        if (rc < 0)
            return rc;
        if (host != PM__HOST_LOCAL)
            return remote_request(h, host, node, to->incarnation, data, len, timeout_ms, cb,
                                  arg);
        if (node == PM__NODE_MAIN)
            return -EINVAL; /* main does not ask itself */
        rc = pm__hub_check_dest(h, node, to->incarnation);
        if (rc < 0)
            return rc;
        d = &h->ports[node];
    } else {
        /* Older waiting requests first, so a new one cannot overtake them. */
        pm__hub_main_request_dispatch_waiting(h);
        if (h->waiting == NULL)
            d = pick_worker(h);
        if (d == NULL && h->nwaiting >= h->queue_max)
            return -EAGAIN; /* main's queue is full: the caller holds the input */
    }
    if (h->main_request_count >= INT_MAX - 1)
        return -EAGAIN; /* every id is taken (not in practice) */
    if (main_request_reserve(h) < 0)
        return -ENOMEM;
    pm__main_request *r = NULL;
    int made = main_request_new(h, data, len, timeout_ms, cb, arg, &r);
    if (made < 0)
        return made;
    r->any = to == NULL;
    if (d != NULL) {
        int rc = main_request_send(h, r, d, data, len, r->fd);
        if (rc < 0) {
            pm__close(r->fd);
            free(r);
            return rc;
        }
        r->fd = -1; /* the hub's now (r->len is read with r->data only) */
    } else if (r->fd < 0) {
        /* No worker ready: it waits with a private copy of its payload. */
        r->data = malloc(len ? len : 1);
        if (r->data == NULL) {
            free(r);
            return -ENOMEM;
        }
        if (len > 0)
            memcpy(r->data, data, len);
        r->len = len;
    }
    if (d == NULL) {
        if (h->waiting_tail != NULL)
            h->waiting_tail->wnext = r;
        else
            h->waiting = r;
        h->waiting_tail = r;
        h->nwaiting++;
    }
    main_request_insert(h, r);
    return (int)r->id;
}

const pm_request_outcome *pm__hub_outcome(pm__hub *h, const pm_message *reply)
{
    if (reply == NULL || reply != h->outcome.reply)
        return NULL;
    if (h->outcome_buf == NULL) {
        h->outcome_buf = malloc(sizeof(*h->outcome_buf));
        if (h->outcome_buf == NULL)
            return NULL;
    }
    pm_request_outcome *o = h->outcome_buf;
    memset(o, 0, sizeof(*o));
    o->error = reply->error;
    o->worker = reply->from;
    o->exit_code = -1;
    o->killed = h->outcome.killed;
    const pm__ending *e = h->outcome.ending;
    if (e != NULL) {
        o->ended = 1;
        o->exit_code = e->exit_code;
        o->signal = e->signal;
        o->core_dumped = e->core_dumped;
        o->reason_code = e->reason;
        if (e->crash != NULL)
            o->crash = *e->crash;
    }
    o->reason = pm_reason_name(o->reason_code);
    return o;
}

int pm__hub_cancel(pm__hub *h, uint64_t id)
{
    pm__main_request *r = id >= PM__BCAST_ID_BASE ? NULL : main_request_find(h, id);
    if (r == NULL)
        return -ENOENT;
    main_request_unlink(h, r);
    main_request_finish(h, r, -ECANCELED, NULL, 0);
    return 0;
}

void pm__hub_cancel_all(pm__hub *h)
{
    h->main_request_closed = 1; /* the callbacks below cannot add any */
    int64_t next;
    pm__main_request *r = main_request_take_due(h, 0, 1, &next);
    h->main_request_due_ms = 0;
    while (r != NULL) {
        pm__main_request *following = r->hnext;
        main_request_finish(h, r, -ECANCELED, NULL, 0);
        r = following;
    }
    /* Broadcasts too (pm_cluster(3): -ECANCELED "when the cluster was
     * terminated first"), rather than -EHOSTDOWN as the workers exit. */
    pm__hub_bcast_cancel_all(h);
    pm__hub_mesh_broadcast_fire(h, 0, 1, -ECANCELED);
}

