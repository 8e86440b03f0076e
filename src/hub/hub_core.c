/* SPDX-License-Identifier: MIT */
/*
 * hub_core.c - what every part of the hub uses and that uses no other part:
 * the work lists (ports to service, rings to publish, ports with a
 * deadline), the table of requests in flight, the check of a destination,
 * main's large messages, closing a port's large-message fds. Everything
 * above it (the link port, queues, broadcasts, main's requests, routing,
 * ports) calls down into it; where a lower part must reach a higher one it
 * goes through h->up (pm__hub_up).
 */
#define _GNU_SOURCE
#include "hub_core.h"

#include <stdlib.h>

#include "channel/bigmsg.h"
#include "channel/shm.h" /* pm__memfd_size_ok */
#include "hub_int.h"

/* How often expired requests are forgotten (at most; sooner with a
 * shorter lifetime). */
#define PURGE_EVERY_MS 1000u

/* ------------------------------------------------------------------ work lists */

static void list_add(pm__portlist *l, unsigned char *in, unsigned i)
{
    if (*in)
        return;
    *in = 1;
    l->v[l->n++] = i;
}

void pm__hub_mark_busy(pm__hub *h, pm__port *p)
{
    p->busy = 1;
    list_add(&h->ready, &p->in_ready, p->index);
}

void pm__hub_mark_rang(pm__hub *h, unsigned i)
{
    if (i < h->nports)
        list_add(&h->ready, &h->ports[i].in_ready, i);
}

void pm__hub_mark_dirty(pm__hub *h, pm__port *p)
{
    p->dirty = 1;
    list_add(&h->dirty, &p->in_dirty, p->index);
}

void pm__hub_mark_timed(pm__hub *h, pm__port *p)
{
    list_add(&h->timed, &p->in_timed, p->index);
}

void pm__hub_pass_begin(pm__hub *h)
{
    /* Swap rather than copy: the pass is the old ready list, and ready
     * starts empty. A port marked during the pass while it still waits in
     * it (in_ready set) is not listed again: its visit serves it. */
    pm__portlist t = h->pass;
    h->pass = h->ready;
    h->ready = t;
    h->ready.n = 0;
    h->pass_pos = 0;
}

int pm__hub_pass_next(pm__hub *h, unsigned *i)
{
    if (h->pass_pos >= h->pass.n)
        return 0;
    *i = h->pass.v[h->pass_pos++];
    /* Off the list before its service: work it has left after this visit
     * (its batch cap) puts it at the end of the next pass. */
    h->ports[*i].in_ready = 0;
    return 1;
}

void pm__hub_publish(pm__hub *h)
{
    for (unsigned k = 0; k < h->dirty.n; k++) {
        pm__port *p = &h->ports[h->dirty.v[k]];
        p->in_dirty = 0;
        if (p->dirty) {
            p->dirty = 0;
            if (p->channel != NULL)
                pm__ring_publish(&p->channel->tx);
        }
    }
    h->dirty.n = 0;
}

/* ------------------------------------------------------------------ in flight */

/* The count of entries a requester has in the tables; main's is not
 * capped (it is the application itself, and its broadcasts always have a
 * deadline). */
static uint32_t *requests_out(pm__hub *h, uint32_t requester)
{
    return requester < h->nports ? &h->ports[requester].requests_out : NULL;
}

/* Forgets entry i of target's table (the last entry takes its place). */
static void forget_inflight(pm__hub *h, pm__port *target, uint32_t i)
{
    uint32_t *out = requests_out(h, target->inflight[i].requester);
    if (out != NULL)
        (*out)--;
    if (target->inflight[i].requester == PM__NODE_MAIN)
        target->main_inflight--;
    h->inflight_total--;
    target->inflight[i] = target->inflight[--target->ninflight];
}

void pm__hub_forget_inflight_if(pm__hub *h, int (*forget)(pm__hub *, const pm__inflight *, const void *),
                                const void *arg)
{
    for (unsigned t = 0; t < h->nports; t++) {
        pm__port *p = &h->ports[t];
        for (uint32_t i = 0; i < p->ninflight;) {
            if (forget(h, &p->inflight[i], arg))
                forget_inflight(h, p, i); /* i now holds the last entry */
            else
                i++;
        }
    }
}

static int expired(pm__hub *h, const pm__inflight *e, const void *now)
{
    (void)h;
    return e->expires_ms <= *(const int64_t *)now;
}

/* Forgets every request whose requester gave up (deadline) or that
 * outlived the maximum lifetime. Runs from the hub's timer at most every
 * PURGE_EVERY_MS, never per frame. */
static void purge_inflight(pm__hub *h, int64_t now)
{
    pm__hub_forget_inflight_if(h, expired, &now);
}

static void schedule_purge(pm__hub *h, uint64_t now)
{
    if (h->next_purge_ms == 0) {
        uint64_t every = h->inflight_lifetime_ms / 2;
        if (every > PURGE_EVERY_MS)
            every = PURGE_EVERY_MS;
        h->next_purge_ms = now + (every ? every : 1);
    }
}

/* Remembers a request relayed to target. -EBUSY when the requester has
 * PM__INFLIGHT_PER_REQUESTER in flight already: that requester alone is
 * refused, so no requester can fill another's way to target. -ENOMEM. */
int pm__hub_add_inflight(pm__hub *h, pm__port *target, uint32_t requester, uint64_t requester_inc,
                        uint64_t id, int64_t deadline)
{
    uint32_t *out = requests_out(h, requester);
    if (out != NULL && *out >= PM__INFLIGHT_PER_REQUESTER)
        return -EBUSY;
    if (target->ninflight == target->inflight_cap) {
        /* The table is bounded by the requesters' caps: at most
         * (ports + main's broadcasts) entries, grown on demand. */
        uint32_t cap = target->inflight_cap ? target->inflight_cap * 2 : 16;
        pm__inflight *v = realloc(target->inflight, cap * sizeof(*v));
        if (v == NULL)
            return -ENOMEM;
        target->inflight = v;
        target->inflight_cap = cap;
    }
    uint64_t now = pm__now_ms();
    int64_t expires = (int64_t)(now + h->inflight_lifetime_ms);
    pm__inflight *e = &target->inflight[target->ninflight++];
    e->requester = requester;
    e->requester_inc = requester_inc;
    e->request_id = id;
    e->target_inc = target->incarnation;
    e->deadline_ms = deadline;
    /* A worker's request without a deadline (or with one far away) would
     * otherwise stay forever if never answered. Main's broadcasts keep
     * their own deadline, whatever the application chose. */
    if (deadline > 0 && (deadline < expires || requester == PM__NODE_MAIN))
        expires = deadline;
    e->expires_ms = expires;
    if (out != NULL)
        (*out)++;
    if (requester == PM__NODE_MAIN)
        target->main_inflight++;
    h->inflight_total++;
    schedule_purge(h, now);
    return 0;
}

/* Undoes the add_inflight just made (its frame is retried later). */
void pm__hub_drop_last_inflight(pm__hub *h, pm__port *target)
{
    forget_inflight(h, target, target->ninflight - 1);
}

/* Removes and returns (in *out) the entry for this answer, if any. */
int pm__hub_take_inflight(pm__hub *h, pm__port *target, uint32_t requester, uint64_t id,
                         pm__inflight *out)
{
    return pm__hub_take_inflight_inc(h, target, requester, 0, id, out);
}

int pm__hub_take_inflight_inc(pm__hub *h, pm__port *target, uint32_t requester,
                              uint64_t requester_inc, uint64_t id, pm__inflight *out)
{
    for (uint32_t i = 0; i < target->ninflight; i++) {
        pm__inflight *e = &target->inflight[i];
        if (e->requester == requester && e->request_id == id &&
            e->target_inc == target->incarnation &&
            (requester_inc == 0 || e->requester_inc == requester_inc)) {
            *out = *e;
            forget_inflight(h, target, i);
            return 1;
        }
    }
    return 0;
}

/* From the hub's timer: forgets the expired requests when their purge is
 * due, and schedules the next while any is left. */
void pm__hub_purge_due(pm__hub *h, uint64_t now)
{
    if (h->next_purge_ms != 0 && now >= h->next_purge_ms) {
        h->next_purge_ms = 0;
        purge_inflight(h, (int64_t)now);
        if (h->inflight_total > 0)
            schedule_purge(h, now);
    }
}

/* Port p's incarnation is gone: its table, detached (answering may run
 * callbacks) and uncounted; the caller answers the entries in it. */
pm__inflight *pm__hub_detach_inflight(pm__hub *h, pm__port *p, uint32_t *n)
{
    pm__inflight *v = p->inflight;
    *n = p->ninflight;
    p->ninflight = 0;
    p->main_inflight = 0;
    for (uint32_t k = 0; k < *n; k++) {
        uint32_t *out = requests_out(h, v[k].requester);
        if (out != NULL)
            (*out)--;
        h->inflight_total--;
    }
    return v;
}

/* Forgets every request port p's incarnation made to others: no requester
 * is left for their answers. */
static int made_by(pm__hub *h, const pm__inflight *e, const void *port)
{
    (void)h;
    const pm__port *p = port;
    return e->requester == p->index && e->requester_inc == p->incarnation;
}

void pm__hub_forget_requests_of(pm__hub *h, const pm__port *p)
{
    pm__hub_forget_inflight_if(h, made_by, p);
}

/* 0 when node/inc names a port that can take a frame now, else why not. */
int pm__hub_check_dest(const pm__hub *h, uint32_t node, uint64_t inc)
{
    if (node >= h->nports)
        return -ENOENT;
    const pm__port *d = &h->ports[node];
    if (d->state != PM__PORT_READY || d->channel == NULL)
        return -EHOSTDOWN;
    if (inc != 0 && inc != d->incarnation)
        return -ESTALE;
    return 0;
}

int pm__hub_main_memfd(const pm__hub *h, const void *data, size_t len)
{
    (void)h; /* len was checked against max_message by main's calls */
    /* Within the supervisor's RLIMIT_FSIZE, asked first: past it the
     * write would raise SIGXFSZ and end the supervisor (a worker's own
     * pm__bigmsg_create is left to the limit its operator gave it). */
    int rc = pm__memfd_size_ok(len);
    return rc < 0 ? rc : pm__bigmsg_create(data, len);
}

/* Closes the fds p holds for large messages: the records taken ahead of
 * their frames and the one of the frame being read. */
void pm__hub_port_drop_ahead(pm__port *p)
{
    while (p->ahead_n > 0) {
        pm__close(p->ahead[p->ahead_head].fd);
        p->ahead_head = (p->ahead_head + 1) % PM__BIGMSG_AHEAD_MAX;
        p->ahead_n--;
    }
    if (p->rx_fd >= 0) {
        pm__close(p->rx_fd);
        p->rx_fd = -1;
    }
}
