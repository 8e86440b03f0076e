/* SPDX-License-Identifier: MIT */
/* hub_linkflow.c - flow control across a peer link: the per-port windows and CREDIT frames (doc/protocol.md 6, "Flow control"; the lists of held senders are in hub_linkbase.c), and main's frames onto a link, which count in the windows but are never held. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "hub_int.h"
#include "hub_linkport.h"

/* ---------------------------------------------------------------- windows */

/* The entry of port in t, or NULL. Linear probing, the key is port + 1. */
static pm__hub_link_window *window_find(const pm__hub_link_window_table *t, uint32_t port)
{
    if (t->cap == 0)
        return NULL;
    uint32_t key = port + 1;
    for (uint32_t i = (key * 2654435761u) & (t->cap - 1);; i = (i + 1) & (t->cap - 1)) {
        if (t->v[i].key == key)
            return &t->v[i];
        if (t->v[i].key == 0)
            return NULL;
    }
}

/* The entry of port, added (zero) when missing; NULL: out of memory. The
 * table grows at half full, so a probe always ends at an empty slot. Its
 * size follows the ports with frames in flight (a few), at most every
 * address port. */
static pm__hub_link_window *window_get(pm__hub_link_window_table *t, uint32_t port)
{
    pm__hub_link_window *e = window_find(t, port);
    if (e != NULL)
        return e;
    if ((t->n + 1) * 2 > t->cap) {
        uint32_t cap = t->cap == 0 ? 8 : t->cap * 2;
        pm__hub_link_window *v = calloc(cap, sizeof(*v));
        if (v == NULL)
            return NULL;
        pm__hub_link_window_table g = {v, cap, 0};
        for (uint32_t i = 0; i < t->cap; i++) {
            if (t->v[i].key == 0)
                continue;
            pm__hub_link_window *n = window_get(&g, t->v[i].key - 1); /* cannot grow: half empty */
            *n = t->v[i]; /* window_get counted it in g.n */
        }
        free(t->v);
        *t = g;
    }
    uint32_t key = port + 1;
    uint32_t i = (key * 2654435761u) & (t->cap - 1);
    while (t->v[i].key != 0)
        i = (i + 1) & (t->cap - 1);
    memset(&t->v[i], 0, sizeof(t->v[i]));
    t->v[i].key = key;
    t->n++;
    return &t->v[i];
}

/* Removes e, shifting back the entries its slot was between (no
 * tombstones: lookups stay short however long the link lives). */
static void window_del(pm__hub_link_window_table *t, pm__hub_link_window *e)
{
    uint32_t mask = t->cap - 1;
    uint32_t i = (uint32_t)(e - t->v);
    t->v[i].key = 0;
    t->n--;
    for (uint32_t j = (i + 1) & mask; t->v[j].key != 0; j = (j + 1) & mask) {
        uint32_t home = (t->v[j].key * 2654435761u) & mask;
        /* Entry j may move to the hole at i when its home is not in the
         * cyclic range (i, j]. */
        if (((j - home) & mask) >= ((j - i) & mask)) {
            t->v[i] = t->v[j];
            t->v[j].key = 0;
            i = j;
        }
    }
}

void pm__hub_link_windows_clear(pm__hub_link_window_table *t)
{
    free(t->v);
    t->v = NULL;
    t->cap = t->n = 0;
}

/* One CREDIT for e's port (doc/protocol.md 6, "Flow control"). 0, or
 * -ENOBUFS / -EHOSTUNREACH (kept, sent later). */
static int credit_put(pm__hub *h, pm__hub_link *l, pm__hub_link_window *e)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_CREDIT;
    f.src = e->key - 1;
    f.len = 8;
    unsigned char body[8];
    pm__put32(body, e->frames);
    pm__put32(body + 4, e->bytes);
    return pm__hub_link_put(h, l, &f, body);
}

/* Sends the credits owed at their step. A credit the link has no room for
 * waits for pm__hub_link_writable: the sender's window stays closed
 * meanwhile, which is what a full link means anyway. */
void pm__hub_link_send_credits(pm__hub *h, pm__hub_link *l)
{
    l->cred_unsent = 0;
    for (uint32_t i = 0; i < l->cred.cap;) {
        pm__hub_link_window *e = &l->cred.v[i];
        if (e->key == 0 || (e->frames < PM__LINK_CREDIT_FRAMES && e->bytes < PM__LINK_CREDIT_BYTES)) {
            i++;
            continue;
        }
        if (credit_put(h, l, e) < 0) {
            l->cred_unsent = 1;
            return;
        }
        window_del(&l->cred, e); /* an entry may move into slot i: look again */
    }
}

void pm__hub_link_credit(pm__hub *h, uint16_t host, uint32_t port, uint32_t bytes)
{
    pm__hub_link *l = pm__hub_link_of(h, host);
    if (l == NULL || !l->up || (l->caps & PM__PEER_CAP_CREDIT) == 0)
        return; /* a link that went down took its windows with it */
    pm__hub_link_window *e = window_get(&l->cred, port);
    if (e == NULL)
        return; /* out of memory: that window shrinks by this frame */
    e->frames++;
    e->bytes += bytes;
    if (e->frames < PM__LINK_CREDIT_FRAMES && e->bytes < PM__LINK_CREDIT_BYTES)
        return;
    if (credit_put(h, l, e) == 0)
        window_del(&l->cred, e);
    else
        l->cred_unsent = 1;
}

/* A CREDIT from host's link: port src's window opens by what it says
 * (never below zero: a credit for a window the link no longer has is
 * ignored). Held senders are read again once it is at most half full. */
void pm__hub_link_credit_in(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                      const unsigned char *payload)
{
    if (f->dst != 0 || f->len != 8 || f->request_id != 0) {
        l->malformed++;
        return;
    }
    pm__hub_link_window *e = window_find(&l->win, f->src);
    if (e == NULL)
        return;
    uint32_t frames = pm__get32(payload), bytes = pm__get32(payload + 4);
    e->frames -= frames < e->frames ? frames : e->frames;
    e->bytes -= bytes < e->bytes ? bytes : e->bytes;
    int waiting = e->waiting;
    if (e->frames <= PM__LINK_WIN_FRAMES / 2 && e->bytes <= PM__LINK_WIN_BYTES / 2)
        e->waiting = waiting = 0;
    if (e->frames == 0 && e->bytes == 0) /* not waiting, then: cleared above */
        window_del(&l->win, e);
    if (!waiting)
        pm__hub_link_release(h, &l->window_held_head, &l->window_held_tail);
}

/* The window of remote port `port` for one more frame of `bytes`: 0 (and
 * counted), or -EAGAIN (full: marked waiting). A link whose peer does not
 * do credits has no windows. Main's frames (force) are counted but never
 * refused: main is the application, held to no window (as it is held to no
 * per-requester cap locally); its frames only shut the window for the
 * workers until they are credited back. */
int pm__hub_link_window_take(pm__hub_link *l, uint32_t port, uint32_t bytes, int force)
{
    if ((l->caps & PM__PEER_CAP_CREDIT) == 0)
        return 0;
    pm__hub_link_window *e = window_get(&l->win, port);
    if (e == NULL)
        return -EAGAIN;
    if (!force && (e->frames >= PM__LINK_WIN_FRAMES || e->bytes + bytes > PM__LINK_WIN_BYTES)) {
        e->waiting = 1;
        return -EAGAIN;
    }
    e->frames++;
    e->bytes += bytes;
    return 0;
}

/* Gives back what pm__hub_link_window_take took for a frame that did not go out. */
void pm__hub_link_window_untake(pm__hub_link *l, uint32_t port, uint32_t bytes)
{
    pm__hub_link_window *e = (l->caps & PM__PEER_CAP_CREDIT) != 0 ? window_find(&l->win, port) : NULL;
    if (e == NULL)
        return;
    e->frames--;
    e->bytes -= bytes;
    if (e->frames == 0 && !e->waiting)
        window_del(&l->win, e);
}

/* Main's send or reply to a remote node (pm_cluster_send/reply). */
int pm__hub_link_main_send(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc, int type,
                           uint64_t request_id, const void *data, size_t len)
{
    pm__frame_hdr f;
    pm__hub_link *l = pm__hub_link_main_frame(h, host, (uint8_t)type, port, len, &f);
    if (l == NULL)
        return -EHOSTUNREACH;
    /* A large message of main's still crossing goes first: main's frames
     * to one host keep their order. */
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN;
    f.dst_inc = inc;
    f.request_id = request_id;
    if (len > PM_MAX_PAYLOAD) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. */
        pm__frame_hdr w = pm__hub_link_wire_hdr(h, &f, PM__NODE_MAIN);
        return pm__hub_link_main_big(h, l, &w, data, len);
    }
    /* Main is never held: a full link is -EAGAIN (try later). */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    int counted = type == PM__FT_MSG; /* a REPLY never is (the other: main's REQUEST, below) */
    if (counted && pm__hub_link_window_take(l, port, wbytes, 1) < 0)
        return -EAGAIN;
    pm__frame_hdr w = pm__hub_link_wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = pm__hub_link_put(h, l, &w, data);
    if (rc < 0 && counted)
        pm__hub_link_window_untake(l, port, wbytes);
    return rc == -ENOBUFS ? -EAGAIN : rc;
}

int pm__hub_link_main_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                              uint64_t id, int64_t deadline_ms, const void *data, size_t len)
{
    pm__frame_hdr f;
    pm__hub_link *l = pm__hub_link_main_frame(h, host, PM__FT_REQUEST, port, len, &f);
    if (l == NULL)
        return -EHOSTUNREACH;
    f.dst_inc = inc;
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN; /* main's large message still crossing goes first */
    if (len > PM_MAX_PAYLOAD) {
        /* The entry first, so the link going down mid-message answers the
         * request -EHOSTUNREACH, once. */
        int added = pm__hub_link_inflight_add(h, l, &f, PM__NODE_MAIN, 0);
        if (added < 0)
            return added;
        pm__frame_hdr w = pm__hub_link_wire_hdr(h, &f, PM__NODE_MAIN);
        int rc = pm__hub_link_main_big(h, l, &w, data, len);
        if (rc < 0) {
            pm__remote_inflight e;
            pm__hub_link_inflight_take(l, PM__NODE_MAIN, id, port, &e);
        }
        return rc;
    }
    /* The entry first: the link may go down inside send, and its answer
     * (-EHOSTUNREACH) must find the request. */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    if (pm__hub_link_window_take(l, port, wbytes, 1) < 0)
        return -ENOMEM;
    int added = pm__hub_link_inflight_add(h, l, &f, PM__NODE_MAIN, 0);
    if (added < 0) {
        pm__hub_link_window_untake(l, port, wbytes);
        return added;
    }
    pm__frame_hdr w = pm__hub_link_wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = pm__hub_link_put(h, l, &w, data);
    if (rc < 0) {
        pm__remote_inflight e;
        pm__hub_link_window_untake(l, port, wbytes);
        pm__hub_link_inflight_take(l, PM__NODE_MAIN, id, port, &e);
        return rc == -ENOBUFS ? -EAGAIN : rc;
    }
    return 0;
}
