/* SPDX-License-Identifier: MIT */
/* hub_linkflow.c - flow control across a peer link: senders held by a full link, a full flow window or the large-message cursor, the per-port windows and CREDIT frames (doc/protocol.md 6, "Flow control"). */
#define _GNU_SOURCE
#include "hub_core.h"

#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "hub_int.h"
#include "hub_link.h"

/* ---------------------------------------------------------------- windows */

/* The entry of port in t, or NULL. Linear probing, the key is port + 1. */
static pm__lwin *lw_find(const pm__lwtab *t, uint32_t port)
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
static pm__lwin *lw_get(pm__lwtab *t, uint32_t port)
{
    pm__lwin *e = lw_find(t, port);
    if (e != NULL)
        return e;
    if ((t->n + 1) * 2 > t->cap) {
        uint32_t cap = t->cap == 0 ? 8 : t->cap * 2;
        pm__lwin *v = calloc(cap, sizeof(*v));
        if (v == NULL)
            return NULL;
        pm__lwtab g = {v, cap, 0};
        for (uint32_t i = 0; i < t->cap; i++) {
            if (t->v[i].key == 0)
                continue;
            pm__lwin *n = lw_get(&g, t->v[i].key - 1); /* cannot grow: half empty */
            *n = t->v[i]; /* lw_get counted it in g.n */
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
static void lw_del(pm__lwtab *t, pm__lwin *e)
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

void pm__hl_lw_clear(pm__lwtab *t)
{
    free(t->v);
    t->v = NULL;
    t->cap = t->n = 0;
}

/*
 * Backpressure across a link: sender p's frame found host's output queue
 * full. p is held exactly like a sender waiting for a full local
 * destination: the frame stays unconsumed in its ring (port.c stops reading
 * it), and it is read again when the link's output queue has drained below
 * half (pm__hub_link_writable, from the mesh's write path) or the link goes
 * down (its frame is then answered -EHOSTUNREACH). Other senders keep
 * flowing; only the link's own senders wait for it. The list is intrusive
 * (pm__port.link_next): nothing is allocated per held sender.
 */
void pm__hl_hold_on(pm__hub *h, int *head, int *tail, uint16_t host, pm__port *p)
{
    p->blocked_on = PM__BLOCKED_LINK;
    if (p->link_held != 0)
        return; /* listed already: on this link, or (its queue was reset when
                   an earlier incarnation ended) on another link, which lets
                   go of it at its next drain; read again, it finds this link
                   full and is listed here then */
    p->link_held = host;
    p->link_next = -1;
    if (*tail >= 0)
        h->ports[*tail].link_next = (int)p->index;
    else
        *head = (int)p->index;
    *tail = (int)p->index;
}

void pm__hl_link_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->held_waits++;
    pm__hl_hold_on(h, &l->held_head, &l->held_tail, host, p);
}

/* Sender p's frame for a remote port whose window is full: held until a
 * CREDIT reopens it (the same list discipline; a credit releases every
 * sender held on this link's windows, and those whose window is still
 * full are held again: a few re-reads per credit, never a loop). */
void pm__hl_window_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->window_waits++;
    pm__hl_hold_on(h, &l->wheld_head, &l->wheld_tail, host, p);
}

/* Reads again every sender on the list (head, tail). */
void pm__hl_release(pm__hub *h, int *head, int *tail)
{
    if (*head < 0)
        return;
    /* Detached first: a sender read again may be held here again. */
    int i = *head;
    *head = *tail = -1;
    while (i >= 0) {
        pm__port *p = &h->ports[i];
        i = p->link_next;
        p->link_held = 0;
        p->link_next = -1;
        if (p->blocked_on == PM__BLOCKED_LINK) {
            p->blocked_on = -1;
            pm__hub_mark_busy(h, p); /* read again this turn or the next */
        }
    }
}

/* One CREDIT for e's port (doc/protocol.md 6, "Flow control"). 0, or
 * -ENOBUFS / -EHOSTUNREACH (kept, sent later). */
static int credit_put(pm__hub *h, pm__hub_link *l, pm__lwin *e)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_CREDIT;
    f.src = e->key - 1;
    f.len = 8;
    unsigned char body[8];
    pm__put32(body, e->frames);
    pm__put32(body + 4, e->bytes);
    return pm__hl_put(h, l, &f, body);
}

/* Sends the credits owed at their step (all: every one owed). A credit
 * the link has no room for waits for pm__hub_link_writable: the sender's
 * window stays closed meanwhile, which is what a full link means anyway. */
static void send_credits(pm__hub *h, pm__hub_link *l, int all)
{
    l->cred_unsent = 0;
    for (uint32_t i = 0; i < l->cred.cap;) {
        pm__lwin *e = &l->cred.v[i];
        if (e->key == 0 || (!all && e->frames < PM__LINK_CREDIT_FRAMES &&
                            e->bytes < PM__LINK_CREDIT_BYTES)) {
            i++;
            continue;
        }
        if (credit_put(h, l, e) < 0) {
            l->cred_unsent = 1;
            return;
        }
        lw_del(&l->cred, e); /* an entry may move into slot i: look again */
    }
}

void pm__hub_link_credit(pm__hub *h, uint16_t host, uint32_t port, uint32_t bytes)
{
    pm__hub_link *l = pm__hl_of(h, host);
    if (l == NULL || !l->up || (l->caps & PM__PEER_CAP_CREDIT) == 0)
        return; /* a link that went down took its windows with it */
    pm__lwin *e = lw_get(&l->cred, port);
    if (e == NULL)
        return; /* out of memory: that window shrinks by this frame */
    e->frames++;
    e->bytes += bytes;
    if (e->frames < PM__LINK_CREDIT_FRAMES && e->bytes < PM__LINK_CREDIT_BYTES)
        return;
    if (credit_put(h, l, e) == 0)
        lw_del(&l->cred, e);
    else
        l->cred_unsent = 1;
}

/* A CREDIT from host's link: port src's window opens by what it says
 * (never below zero: a credit for a window the link no longer has is
 * ignored). Held senders are read again once it is at most half full. */
void pm__hl_credit_in(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                           const unsigned char *payload)
{
    if (f->dst != 0 || f->len != 8 || f->request_id != 0) {
        l->malformed++;
        return;
    }
    pm__lwin *e = lw_find(&l->win, f->src);
    if (e == NULL)
        return;
    uint32_t frames = pm__get32(payload), bytes = pm__get32(payload + 4);
    e->frames -= frames < e->frames ? frames : e->frames;
    e->bytes -= bytes < e->bytes ? bytes : e->bytes;
    int waiting = e->waiting;
    if (waiting && e->frames <= PM__LINK_WIN_FRAMES / 2 && e->bytes <= PM__LINK_WIN_BYTES / 2)
        e->waiting = waiting = 0;
    if (e->frames == 0 && e->bytes == 0 && !e->waiting)
        lw_del(&l->win, e);
    if (!waiting)
        pm__hl_release(h, &l->wheld_head, &l->wheld_tail);
}

/* The window of remote port `port` for one more frame of `bytes`: 0 (and
 * counted), or -EAGAIN (full: marked waiting). A link whose peer does not
 * do credits has no windows. Main's frames (force) are counted but never
 * refused: main is the application, held to no window (as it is held to no
 * per-requester cap locally); its frames only shut the window for the
 * workers until they are credited back. */
int pm__hl_window_take(pm__hub_link *l, uint32_t port, uint32_t bytes, int force)
{
    if ((l->caps & PM__PEER_CAP_CREDIT) == 0)
        return 0;
    pm__lwin *e = lw_get(&l->win, port);
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

/* Gives back what pm__hl_window_take took for a frame that did not go out. */
void pm__hl_window_untake(pm__hub_link *l, uint32_t port, uint32_t bytes)
{
    pm__lwin *e = (l->caps & PM__PEER_CAP_CREDIT) != 0 ? lw_find(&l->win, port) : NULL;
    if (e == NULL)
        return;
    e->frames--;
    e->bytes -= bytes;
    if (e->frames == 0 && !e->waiting)
        lw_del(&l->win, e);
}

void pm__hub_link_writable(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = pm__hl_of(h, host);
    if (l == NULL)
        return;
    pm__hl_release(h, &l->held_head, &l->held_tail);
    /* Called back from inside a send (the mesh wrote to make room): the
     * frame being sent is in link_buf, and a fragment sent now would pass
     * the one being sent. The credits and the cursor wait for the next
     * drain, which comes: the queue that refused them is not empty. */
    if (h->link_putting)
        return;
    if (l->cred_unsent && l->up)
        send_credits(h, l, 0);
    if (l->tx_fd >= 0)
        pm__hl_frag_pump(h, l);
}
