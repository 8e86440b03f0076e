/* SPDX-License-Identifier: MIT */
/* hub_link.c - peer links as hub ports: frames for a remote host go over its link, frames from a link are stamped with the link's host and delivered as if local. */
#define _GNU_SOURCE
#include "hub.h"

#include <fcntl.h>
#include <limits.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "bigmsg.h"
#include "hub_int.h"
#include "le.h"

/*
 * On a link, a frame's host fields are relative to the two ends: both are 0
 * on the wire (dst_host: the receiving host, src_host: the sending host),
 * and its node fields are address ports (0: the supervisor). The receiving
 * hub stamps src_host with the index of the host the link authenticated as;
 * a frame that names any other host (a relay through a third host, or a
 * forgery) is dropped and counted (FAULTS.md 38). The sender's port and
 * incarnation are the sending supervisor's word. A deadline crosses as
 * milliseconds remaining (at least 1), never as one host's CLOCK_MONOTONIC.
 */

static pm__hub_link *link_of(pm__hub *h, uint16_t host)
{
    if (h->links == NULL || host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS)
        return NULL;
    return &h->links[host];
}

/* The allocations of peer mode, on first use. 0 or -ENOMEM. */
static int links_alloc(pm__hub *h)
{
    if (h->links != NULL)
        return 0;
    h->links = calloc(PM__MAX_HOSTS, sizeof(*h->links));
    if (h->links == NULL)
        return -ENOMEM;
    for (unsigned i = 0; i < PM__MAX_HOSTS; i++) {
        h->links[i].held_head = h->links[i].held_tail = -1;
        h->links[i].wheld_head = h->links[i].wheld_tail = -1;
        h->links[i].fheld_head = h->links[i].fheld_tail = -1;
        h->links[i].tx_fd = h->links[i].rx_fd = -1;
    }
    /* The frame being encoded holds a worker's traffic: a mapping of its
     * own, zeroed in a fork-mode child (as the hub's scratch buffer). */
    void *p = mmap(NULL, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (p == MAP_FAILED) {
        free(h->links);
        h->links = NULL;
        return -ENOMEM;
    }
    (void)madvise(p, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD, MADV_WIPEONFORK);
    h->link_buf = p;
    return 0;
}

void pm__hub_links_free(pm__hub *h)
{
    if (h->links != NULL) {
        for (unsigned i = 0; i < PM__MAX_HOSTS; i++) {
            free(h->links[i].inflight);
            free(h->links[i].win.v);
            free(h->links[i].cred.v);
            pm__close(h->links[i].tx_fd);
            pm__close(h->links[i].rx_fd);
        }
        free(h->links);
        h->links = NULL;
    }
    if (h->link_buf != NULL)
        munmap(h->link_buf, PM__FRAME_HDR_SIZE + PM_MAX_PAYLOAD);
    h->link_buf = NULL;
}

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

static void lw_clear(pm__lwtab *t)
{
    free(t->v);
    t->v = NULL;
    t->cap = t->n = 0;
}

/* A local node's address port: 0 for the supervisor (peer mode). */
static uint32_t port_of(const pm__hub *h, uint32_t node)
{
    return node == PM__NODE_MAIN ? 0u : h->names.base_port + node;
}

/* The local node an address port of this host names, or -ENOENT. */
static int node_of(const pm__hub *h, uint32_t port, uint32_t *node)
{
    if (port == 0) {
        *node = PM__NODE_MAIN;
        return 0;
    }
    if (port < h->names.base_port || port - h->names.base_port >= h->nports)
        return -ENOENT;
    *node = port - h->names.base_port;
    return 0;
}

/* Encodes f (its fields in wire form already) with payload and hands it to
 * the link. 0, or -EHOSTUNREACH (down) / -ENOBUFS (full: the caller holds
 * the sender, or drops the frame and counts it). */
static int link_put(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, const void *payload)
{
    if (l == NULL || !l->up)
        return -EHOSTUNREACH;
    pm__frame_encode(f, h->link_buf);
    if (f->len > 0 && payload != h->link_buf + PM__FRAME_HDR_SIZE) /* a FRAG is read in place */
        memcpy(h->link_buf + PM__FRAME_HDR_SIZE, payload, f->len);
    h->link_putting++;
    int rc = l->send(l->arg, h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    h->link_putting--;
    /* Wiped at once: the buffer must not keep a worker's message around. */
    explicit_bzero(h->link_buf, PM__FRAME_HDR_SIZE + f->len);
    if (rc == 0) {
        l->frames_out++;
        return 0;
    }
    return rc == -EAGAIN ? -ENOBUFS : -EHOSTUNREACH;
}

/* link_put for a frame that is dropped when the link has no room (an
 * answer, a broadcast's result): counted on the link. */
static int link_put_or_drop(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
                            const void *payload)
{
    int rc = link_put(h, l, f, payload);
    if (rc < 0 && l != NULL)
        l->dropped++;
    return rc;
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
static void hold_on(pm__hub *h, int *head, int *tail, uint16_t host, pm__port *p)
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

static void link_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->held_waits++;
    hold_on(h, &l->held_head, &l->held_tail, host, p);
}

/* Sender p's frame for a remote port whose window is full: held until a
 * CREDIT reopens it (the same list discipline; a credit releases every
 * sender held on this link's windows, and those whose window is still
 * full are held again: a few re-reads per credit, never a loop). */
static void window_hold(pm__hub *h, pm__hub_link *l, uint16_t host, pm__port *p)
{
    l->window_waits++;
    hold_on(h, &l->wheld_head, &l->wheld_tail, host, p);
}

/* Reads again every sender on the list (head, tail). */
static void release(pm__hub *h, int *head, int *tail)
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

static void send_credits(pm__hub *h, pm__hub_link *l, int all);
static void frag_pump(pm__hub *h, pm__hub_link *l);

void pm__hub_link_writable(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL)
        return;
    release(h, &l->held_head, &l->held_tail);
    /* Called back from inside a send (the mesh wrote to make room): the
     * frame being sent is in link_buf, and a fragment sent now would pass
     * the one being sent. The credits and the cursor wait for the next
     * drain, which comes: the queue that refused them is not empty. */
    if (h->link_putting)
        return;
    if (l->cred_unsent && l->up)
        send_credits(h, l, 0);
    if (l->tx_fd >= 0)
        frag_pump(h, l);
}

void pm__hub_link_drops(const pm__hub *h, uint16_t host, uint64_t *forged, uint64_t *malformed)
{
    const pm__hub_link *l = host < PM__MAX_HOSTS && h->links != NULL ? &h->links[host] : NULL;
    *forged = l != NULL ? l->forged : 0;
    *malformed = l != NULL ? l->malformed + l->frag_dropped : 0;
}

void pm__hub_link_caps(pm__hub *h, uint16_t host, uint32_t caps)
{
    pm__hub_link *l = link_of(h, host);
    if (l != NULL)
        l->caps = caps;
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
    return link_put(h, l, &f, body);
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
    pm__hub_link *l = link_of(h, host);
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
static void link_credit_in(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f,
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
        release(h, &l->wheld_head, &l->wheld_tail);
}

/* The window of remote port `port` for one more frame of `bytes`: 0 (and
 * counted), or -EAGAIN (full: marked waiting). A link whose peer does not
 * do credits has no windows. Main's frames (force) are counted but never
 * refused: main is the application, held to no window (as it is held to no
 * per-requester cap locally); its frames only shut the window for the
 * workers until they are credited back. */
static int window_take(pm__hub_link *l, uint32_t port, uint32_t bytes, int force)
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

/* Gives back what window_take took for a frame that did not go out. */
static void window_untake(pm__hub_link *l, uint32_t port, uint32_t bytes)
{
    pm__lwin *e = (l->caps & PM__PEER_CAP_CREDIT) != 0 ? lw_find(&l->win, port) : NULL;
    if (e == NULL)
        return;
    e->frames--;
    e->bytes -= bytes;
    if (e->frames == 0 && !e->waiting)
        lw_del(&l->win, e);
}

/* The wire form of a local frame for the far end: relative hosts, our
 * address port as the source, the deadline as milliseconds remaining. */
static pm__frame_hdr wire_hdr(const pm__hub *h, const pm__frame_hdr *f, uint32_t src_node)
{
    pm__frame_hdr w = *f;
    w.dst_host = 0;
    w.src_host = 0;
    w.src = port_of(h, src_node);
    if (f->deadline_ms > 0) {
        int64_t left = f->deadline_ms - (int64_t)pm__now_ms();
        w.deadline_ms = left >= 1 ? left : 1;
    }
    return w;
}

/* Remembers a request sent over l. -EBUSY when the table is full of live
 * entries. */
static int rinflight_add(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *f, uint32_t requester,
                         uint64_t requester_inc)
{
    int64_t now = (int64_t)pm__now_ms();
    if (l->ninflight == l->cap) {
        /* Full: forget the expired first (no timer walks these tables; a
         * link carries them only as long as it is up). */
        for (uint32_t i = 0; i < l->ninflight;) {
            if (l->inflight[i].expires_ms <= now)
                l->inflight[i] = l->inflight[--l->ninflight];
            else
                i++;
        }
    }
    if (l->ninflight == l->cap) {
        if (l->cap == PM__RINFLIGHT_MAX)
            return -EBUSY;
        uint32_t cap = l->cap == 0 ? 64 : l->cap * 2;
        pm__rinflight *v = realloc(l->inflight, cap * sizeof(*v));
        if (v == NULL)
            return -EBUSY;
        l->inflight = v;
        l->cap = cap;
    }
    pm__rinflight *e = &l->inflight[l->ninflight++];
    e->requester = requester;
    e->requester_inc = requester_inc;
    e->target = f->dst;
    e->target_inc = f->dst_inc;
    e->request_id = f->request_id;
    int64_t expires = now + (int64_t)h->inflight_lifetime_ms;
    if (f->deadline_ms > 0 && f->deadline_ms < expires)
        expires = f->deadline_ms;
    e->expires_ms = expires;
    return 0;
}

/* Takes the entry an answer from port `target` to requester/id settles. */
static int rinflight_take(pm__hub_link *l, uint32_t requester, uint64_t id, uint32_t target,
                          pm__rinflight *out)
{
    for (uint32_t i = 0; i < l->ninflight; i++) {
        pm__rinflight *e = &l->inflight[i];
        if (e->requester == requester && e->request_id == id && e->target == target) {
            *out = *e;
            l->inflight[i] = l->inflight[--l->ninflight];
            return 1;
        }
    }
    return 0;
}

static void notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err);

/* ------------------------------------------------------- large messages */

void pm__hub_links_wipe(pm__hub *h)
{
    for (unsigned i = 0; h->links != NULL && i < PM__MAX_HOSTS; i++) {
        pm__close(h->links[i].tx_fd);
        pm__close(h->links[i].rx_fd);
        h->links[i].tx_fd = h->links[i].rx_fd = -1;
    }
}

/* The message being sent ended (sent whole, or its link went down): its
 * fd goes, and the senders waiting for the link's one cursor are read
 * again. */
static void frag_tx_end(pm__hub *h, pm__hub_link *l)
{
    pm__close(l->tx_fd);
    l->tx_fd = -1;
    release(h, &l->fheld_head, &l->fheld_tail);
}

/* Reads bytes of the message being sent into buf: 0, or -EIO (a sealed
 * memfd of the checked length does not come up short; if it did, the
 * message is abandoned: the receiver drops it at the next first fragment). */
static int frag_read(int fd, unsigned char *buf, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, (off_t)off);
        if (r < 0 && errno == EINTR)
            continue;
        if (r <= 0)
            return -EIO;
        buf += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/*
 * Sends fragments of l's current message while the link's output queue
 * takes them (doc/protocol.md 6, "Large messages"): a full queue stops
 * it, and the mesh's drain hook (pm__hub_link_writable) resumes it, so the
 * hub never holds more of a message than the one fragment it is sending.
 * Each fragment is read from the sealed memfd straight into the link's
 * frame buffer (wiped by link_put).
 */
static void frag_pump(pm__hub *h, pm__hub_link *l)
{
    unsigned char *body = h->link_buf + PM__FRAME_HDR_SIZE;
    while (l->tx_fd >= 0 && l->up) {
        uint64_t left = l->tx_total - l->tx_off;
        size_t n = left < PM__FRAG_DATA_MAX ? (size_t)left : PM__FRAG_DATA_MAX;
        pm__frag_hdr fh = {l->tx_hdr.type, l->tx_id, l->tx_total, l->tx_off};
        pm__frag_encode(&fh, body);
        if (frag_read(l->tx_fd, body + PM__FRAG_HDR_SIZE, n, l->tx_off) < 0) {
            explicit_bzero(body, PM__FRAG_HDR_SIZE + n);
            l->frag_dropped++;
            frag_tx_end(h, l);
            return;
        }
        pm__frame_hdr w = l->tx_hdr;
        w.type = PM__FT_FRAG;
        w.flags = 0;
        w.len = (uint32_t)(PM__FRAG_HDR_SIZE + n);
        int rc = link_put(h, l, &w, body);
        if (rc == -ENOBUFS)
            return; /* resumed when the queue drains */
        if (rc < 0)
            return; /* going down: pm__hub_link_down ends it */
        l->tx_off += n;
        if (l->tx_off == l->tx_total) {
            l->big_out++;
            frag_tx_end(h, l);
        }
    }
}

/* Starts sending the large message fd (len bytes, w its wire header) from
 * owner over l; the fd is l's from now on. */
static void frag_start(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, uint32_t owner,
                       int fd, uint64_t len)
{
    l->tx_fd = fd;
    l->tx_total = len;
    l->tx_off = 0;
    l->tx_id = l->tx_id == UINT32_MAX ? 1 : l->tx_id + 1;
    l->tx_owner = owner;
    l->tx_hdr = *w;
    frag_pump(h, l);
}

/* Takes back the entry a request just got from rinflight_add. By key, not
 * by popping the last entry: a send that brought the link down would have
 * emptied the table already (pm__hub_link_down), and a pop would wrap. */
static void unadd(pm__hub_link *l, uint32_t src, const pm__frame_hdr *f)
{
    pm__rinflight e;
    rinflight_take(l, src, f->request_id, f->dst, &e);
}

/* A frame from local port p (or main, p NULL) for a remote host. */
int pm__hub_relay_remote(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    pm__hub_link *l = link_of(h, f->dst_host);
    uint32_t src = p->index;
    int big = (f->flags & PM__FF_MEMFD) != 0;
    if (l != NULL && l->up && l->tx_fd >= 0 && (big || l->tx_owner == src)) {
        /* One large message at a time per link; and a sender whose large
         * message is still crossing sends nothing else over that link
         * meanwhile, so its frames keep their order. Held until it has
         * crossed (frag_tx_end), like any held sender. */
        hold_on(h, &l->fheld_head, &l->fheld_tail, f->dst_host, p);
        return -EAGAIN;
    }
    int frag = big && l != NULL && l->up && (l->caps & PM__PEER_CAP_FRAG) != 0;
    if (f->type == PM__FT_REPLY) {
        /* It answers a request that came over the link: p's table has it
         * under the remote requester. */
        pm__inflight e;
        uint32_t requester = PM__REMOTE_NODE(f->dst_host, f->dst & 0xFFFFu);
        if (f->dst > 0xFFFFu || !pm__hub_take_inflight(h, p, requester, f->request_id, &e)) {
            h->late_replies++;
            return 0;
        }
        pm__frame_hdr w = wire_hdr(h, f, src);
        w.dst_inc = e.requester_inc;
        if (big && frag) {
            frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
            h->cur_fd = -1; /* the link's now */
            p->relayed++;
            p->relayed_bytes += h->cur_len;
            return 0;
        }
        if (big) {
            /* A peer without large messages (or no link): the requester
             * learns so now instead of waiting for its deadline. */
            notice_port(h, requester, e.requester_inc, port_of(h, src), p->incarnation,
                        f->request_id, -EMSGSIZE);
            return 0;
        }
        /* A reply never waits (the replier is never held back, as locally):
         * a link without room drops it, counted; the requester's deadline
         * ends its wait. */
        if (link_put_or_drop(h, l, &w, payload) < 0)
            h->replies_dropped++;
        else
            p->relayed++;
        return 0;
    }
    if (l == NULL || !l->up) {
        h->unreachable++;
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EHOSTUNREACH);
        return 0;
    }
    if (big && !frag) {
        /* A peer that does not take large messages (hello bit 1). */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EMSGSIZE);
        return 0;
    }
    if (f->type == PM__FT_REQUEST && rinflight_add(h, l, f, src, p->incarnation) < 0) {
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, -EBUSY);
        return 0;
    }
    if (big) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. Its request entry is made first, so the link
         * going down mid-message answers it -EHOSTUNREACH, once. */
        pm__frame_hdr w = wire_hdr(h, f, src);
        frag_start(h, l, &w, src, h->cur_fd, h->cur_len);
        h->cur_fd = -1;
        p->relayed++;
        p->relayed_bytes += h->cur_len;
        return 0;
    }
    /* The destination's window first: a remote worker that does not read
     * holds back only the senders that write to it. */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f->len;
    if (window_take(l, f->dst, wbytes, 0) < 0) {
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        window_hold(h, l, f->dst_host, p);
        return -EAGAIN;
    }
    pm__frame_hdr w = wire_hdr(h, f, src);
    int rc = link_put(h, l, &w, payload);
    if (rc < 0)
        window_untake(l, f->dst, wbytes);
    if (rc == -ENOBUFS) {
        /* The link is full: the sender waits, its frame stays in its ring
         * and is read again when the link drains (link_hold). */
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        link_hold(h, l, f->dst_host, p);
        return -EAGAIN;
    }
    if (rc < 0) {
        /* The link went down while sending: its requests are answered by
         * pm__hub_link_down; this frame is answered here. */
        if (f->type == PM__FT_REQUEST)
            unadd(l, src, f); /* retried, or answered here */
        pm__hub_notice_at(h, src, p->incarnation, f->dst_host, f->dst, f->dst_inc,
                          f->request_id, rc);
        return 0;
    }
    p->relayed++;
    p->relayed_bytes += f->len;
    return 0;
}

/* Main's large message (len > PM_MAX_PAYLOAD, w its wire header) to l:
 * sealed into a memfd of its own and sent by l's cursor, as a worker's is.
 * Main is never held: a cursor busy with another message is -EAGAIN (try
 * later). 0, -EMSGSIZE (the peer takes no large messages), or the
 * memfd's error. */
static int main_big(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, const void *data,
                    size_t len)
{
    if ((l->caps & PM__PEER_CAP_FRAG) == 0)
        return -EMSGSIZE;
    if (l->tx_fd >= 0)
        return -EAGAIN;
    int fd = pm__hub_main_memfd(h, data, len);
    if (fd < 0)
        return fd;
    frag_start(h, l, w, PM__NODE_MAIN, fd, len);
    return 0;
}

/* Main's send or reply to a remote node (pm_cluster_send/reply). */
int pm__hub_link_main_send(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc, int type,
                           uint64_t request_id, const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    /* A large message of main's still crossing goes first: main's frames
     * to one host keep their order. */
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN;
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.len = (uint32_t)len;
    f.dst = port;
    f.dst_inc = inc;
    f.request_id = request_id;
    f.src = PM__NODE_MAIN;
    if (len > PM_MAX_PAYLOAD) {
        /* Not counted in the destination's window: one message at a time
         * per link bounds it. */
        pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
        return main_big(h, l, &w, data, len);
    }
    /* Main is never held: a full link is -EAGAIN (try later). */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    int counted = type == PM__FT_MSG || type == PM__FT_REQUEST;
    if (counted && window_take(l, port, wbytes, 1) < 0)
        return -EAGAIN;
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = link_put(h, l, &w, data);
    if (rc < 0 && counted)
        window_untake(l, port, wbytes);
    return rc == -ENOBUFS ? -EAGAIN : rc;
}

int pm__hub_link_main_request(pm__hub *h, uint16_t host, uint32_t port, uint64_t inc,
                              uint64_t id, int64_t deadline_ms, const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REQUEST;
    f.len = (uint32_t)len;
    f.dst = port;
    f.dst_inc = inc;
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    f.src = PM__NODE_MAIN;
    if (l->tx_fd >= 0 && l->tx_owner == PM__NODE_MAIN)
        return -EAGAIN; /* main's large message still crossing goes first */
    if (len > PM_MAX_PAYLOAD) {
        /* The entry first, so the link going down mid-message answers the
         * request -EHOSTUNREACH, once. */
        if (rinflight_add(h, l, &f, PM__NODE_MAIN, 0) < 0)
            return -EBUSY;
        pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
        int rc = main_big(h, l, &w, data, len);
        if (rc < 0) {
            pm__rinflight e;
            rinflight_take(l, PM__NODE_MAIN, id, port, &e);
        }
        return rc;
    }
    /* The entry first: the link may go down inside send, and its answer
     * (-EHOSTUNREACH) must find the request. */
    uint32_t wbytes = PM__FRAME_HDR_SIZE + f.len;
    if (window_take(l, port, wbytes, 1) < 0)
        return -ENOMEM;
    if (rinflight_add(h, l, &f, PM__NODE_MAIN, 0) < 0) {
        window_untake(l, port, wbytes);
        return -EBUSY;
    }
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    int rc = link_put(h, l, &w, data);
    if (rc < 0) {
        pm__rinflight e;
        window_untake(l, port, wbytes);
        rinflight_take(l, PM__NODE_MAIN, id, port, &e);
        return rc == -ENOBUFS ? -EAGAIN : rc;
    }
    return 0;
}

void pm__hub_link_forget(pm__hub *h, uint16_t host, uint32_t requester, uint64_t id,
                         uint32_t port)
{
    pm__hub_link *l = link_of(h, host);
    pm__rinflight e;
    if (l != NULL)
        rinflight_take(l, requester, id, port, &e);
}

int pm__hub_link_bcast(pm__hub *h, uint16_t host, uint64_t id, int64_t deadline_ms,
                       const void *data, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up) {
        h->unreachable++;
        return -EHOSTUNREACH;
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_BCAST;
    f.len = (uint32_t)len;
    f.dst = 0; /* the remote supervisor */
    f.request_id = id;
    f.deadline_ms = deadline_ms;
    pm__frame_hdr w = wire_hdr(h, &f, PM__NODE_MAIN);
    return link_put(h, l, &w, data);
}

/* A remote host's mesh broadcast, fanned out here: who to send the
 * results to. */
struct remote_bcast {
    pm__hub *h;
    uint16_t host;
    uint64_t id;
};

/* Our local broadcast for a remote host ended: a BRESULT per worker (from
 * its address port and incarnation, with its error and reply), then a
 * BDONE with how many BRESULTs went out, so the far end can tell a result
 * the link had no room for from one never sent. */
static void remote_bcast_done(pm_cluster *c, const pm_message *results, size_t n, void *arg)
{
    (void)c;
    struct remote_bcast *rb = arg;
    pm__hub *h = rb->h;
    pm__hub_link *l = link_of(h, rb->host);
    uint32_t sent = 0;
    for (size_t i = 0; i < n && l != NULL && l->up; i++) {
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_BRESULT;
        f.src = results[i].from.port;
        f.src_inc = results[i].from.incarnation;
        f.request_id = rb->id;
        f.error = results[i].error;
        f.len = results[i].error == 0 ? (uint32_t)results[i].len : 0;
        if (results[i].error == 0 && results[i].len > PM_MAX_PAYLOAD) {
            /* A large reply: more than one frame, which a link cannot
             * carry yet (link_buf holds one). */
            f.error = -EMSGSIZE;
            f.len = 0;
        }
        if (link_put_or_drop(h, l, &f, results[i].data) == 0)
            sent++;
    }
    if (l != NULL && l->up) {
        pm__frame_hdr d;
        memset(&d, 0, sizeof(d));
        d.type = PM__FT_BDONE;
        d.request_id = rb->id;
        d.len = 4;
        unsigned char count[4];
        pm__put32(count, sent);
        (void)link_put_or_drop(h, l, &d, count); /* lost: the far end's deadline settles it */
    }
    free(rb);
}

/* A BCAST from host's link: our own broadcast to our ready snapshot,
 * ending a little before the far end's deadline (a quarter of what is
 * left, at most 200 ms early) so that its results can still cross. */
static void link_bcast(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                       const unsigned char *payload)
{
    if (f->dst != 0 || f->deadline_ms == 0 || f->len > PM_MAX_PAYLOAD) {
        l->malformed++;
        return;
    }
    int64_t left = f->deadline_ms - (int64_t)pm__now_ms();
    int64_t margin = left / 4 < 200 ? left / 4 : 200;
    int64_t timeout = left - margin;
    if (timeout < 1)
        timeout = 1;
    if (timeout > INT_MAX)
        timeout = INT_MAX;
    struct remote_bcast *rb = malloc(sizeof(*rb));
    if (rb == NULL) {
        l->dropped++; /* the far end's deadline settles it */
        return;
    }
    rb->h = h;
    rb->host = host;
    rb->id = f->request_id;
    if (pm__hub_broadcast(h, payload, f->len, (int)timeout, remote_bcast_done, rb) < 0) {
        free(rb);
        l->dropped++;
    }
}

/* An undeliverable notice for a remote requester (to: PM__REMOTE_NODE)
 * about our address port about_port. */
static void notice_port(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about_port,
                        uint64_t about_inc, uint64_t request_id, int err)
{
    pm__hub_link *l = link_of(h, PM__REMOTE_HOST(to));
    pm__frame_hdr n;
    memset(&n, 0, sizeof(n));
    n.type = PM__FT_UNDELIVERABLE;
    n.dst = PM__REMOTE_PORT(to);
    n.dst_inc = to_inc;
    n.src = about_port;
    n.src_inc = about_inc;
    n.request_id = request_id;
    n.error = err;
    if (link_put_or_drop(h, l, &n, NULL) < 0)
        h->notices_dropped++;
}

void pm__hub_link_notice(pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                         uint64_t about_inc, uint64_t request_id, int err)
{
    notice_port(h, to, to_inc, port_of(h, about), about_inc, request_id, err);
}

void pm__hub_link_up(pm__hub *h, uint16_t host, int (*send)(void *, const void *, size_t),
                     void *arg)
{
    if (host == PM__HOST_LOCAL || host >= PM__MAX_HOSTS || links_alloc(h) < 0)
        return;
    pm__hub_link *l = &h->links[host];
    lw_clear(&l->win);
    lw_clear(&l->cred);
    l->tx_id = 0;
    memset(&l->rx, 0, sizeof(l->rx));
    l->up = 1;
    l->send = send;
    l->arg = arg;
}

void pm__hub_link_down(pm__hub *h, uint16_t host)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up)
        return;
    l->up = 0;
    l->send = NULL;
    l->arg = NULL;
    /* Its held senders are read again: their frames are answered
     * -EHOSTUNREACH now (pm__hub_relay_remote), not when it comes back.
     * Windows and credits were the connection's: a new one starts empty. */
    release(h, &l->held_head, &l->held_tail);
    release(h, &l->wheld_head, &l->wheld_tail);
    lw_clear(&l->win);
    lw_clear(&l->cred);
    l->cred_unsent = 0;
    l->caps = 0;
    /* A large message half sent or half received dies with the link: its
     * request (if it was one) is in the table answered below. */
    if (l->tx_fd >= 0)
        l->frag_dropped++;
    frag_tx_end(h, l);
    if (l->rx.active)
        l->frag_dropped++;
    pm__close(l->rx_fd);
    l->rx_fd = -1;
    memset(&l->rx, 0, sizeof(l->rx));
    /* Detached first: answering may run callbacks that send again. */
    pm__rinflight *v = l->inflight;
    uint32_t n = l->ninflight;
    l->inflight = NULL;
    l->ninflight = l->cap = 0;
    for (uint32_t i = 0; i < n; i++)
        pm__hub_notice_at(h, v[i].requester, v[i].requester_inc, host, v[i].target,
                          v[i].target_inc, v[i].request_id, -EHOSTUNREACH);
    free(v);
    pm__hub_mbcast_host_down(h, host);
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
static int link_deliver(pm__hub *h, pm__hub_link *l, uint16_t host, pm__frame_hdr *f,
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
    if (rc == 0 && d->q_tail != last && (f->flags & PM__FF_MEMFD) == 0) {
        d->q_tail->credit_host = host; /* queued: credited when it leaves */
        d->q_tail->credit_port = port_of(h, node);
        return 1;
    }
    if (rc == 0)
        return 0;
    if (f->type == PM__FT_REQUEST)
        pm__hub_drop_last_inflight(h, d);
    if (rc == -EBADMSG)
        h->ops->fault(h->owner, node, PM_REASON_CORRUPT_RING);
    l->dropped++;
    pm__hub_link_notice(h, requester, f->src_inc, node, d->incarnation, f->request_id,
                        rc == -EBADMSG ? -EHOSTDOWN : -ENOBUFS);
    return 0;
}

/* A reply or notice from the link for local requester `node`. */
static void link_answer(pm__hub *h, pm__hub_link *l, pm__frame_hdr *f,
                        const unsigned char *payload, uint32_t node)
{
    pm__rinflight e;
    int known = f->request_id != 0 && rinflight_take(l, node, f->request_id, f->src, &e);
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

/* The message reassembled on l is whole: sealed (nobody can change it
 * after the hub's check, as for a worker's memfd) and delivered as if a
 * local worker had sent it, through the fd path (doc/design.md, "Large
 * messages"); identity stamped from the link like any frame of it. */
static void frag_deliver(pm__hub *h, pm__hub_link *l, uint16_t host)
{
    int fd = l->rx_fd;
    l->rx_fd = -1;
    if (fcntl(fd, F_ADD_SEALS, F_SEAL_SHRINK | F_SEAL_GROW | F_SEAL_WRITE | F_SEAL_SEAL) < 0) {
        pm__close(fd);
        l->frag_dropped++;
        return;
    }
    l->big_in++;
    pm__frame_hdr f = l->rx_hdr;
    f.flags = PM__FF_MEMFD;
    f.len = PM__ANNOUNCE_SIZE;
    /* The fd is handed to the routing code as a worker's is (port.c): it
     * takes it by setting h->cur_fd to -1; what is left is closed here. */
    int saved_fd = h->cur_fd;
    uint64_t saved_len = h->cur_len;
    h->cur_fd = fd;
    h->cur_len = l->rx.total;
    uint32_t node;
    int err = node_of(h, f.dst, &node);
    if (f.type == PM__FT_REPLY) {
        if (err < 0)
            l->malformed++;
        else
            link_answer(h, l, &f, NULL, node);
    } else if (err < 0) {
        notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc, f.request_id,
                    err);
    } else {
        (void)link_deliver(h, l, host, &f, NULL, node);
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
static void link_frag_in(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                         const unsigned char *payload)
{
    pm__frag_hdr fh;
    size_t n;
    int dropped = 0, last = 0, act;
    if (pm__frag_decode(payload, f->len, &fh, &n) < 0) {
        l->malformed++;
        dropped = l->rx.active;
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
            notice_port(h, PM__REMOTE_NODE(host, f->src), f->src_inc, f->dst, f->dst_inc,
                        f->request_id, -EMSGSIZE);
        return;
    case PM__FRAG_BAD:
        if (!dropped)
            l->frag_dropped++;
        return;
    case PM__FRAG_BEGIN: {
        /* Sized now (sparse: pages are allocated as fragments land). */
        int fd = memfd_create("procmesh-link", MFD_CLOEXEC | MFD_ALLOW_SEALING);
        if (fd < 0 || ftruncate(fd, (off_t)fh.total) < 0) {
            pm__close(fd);
            l->rx.active = 0;
            l->rx.skip_id = fh.msg_id;
            l->frag_dropped++;
            if (fh.kind != PM__FT_REPLY)
                notice_port(h, PM__REMOTE_NODE(host, f->src), f->src_inc, f->dst, f->dst_inc,
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
        ssize_t w = pwrite(l->rx_fd, data + done, n - done, (off_t)(fh.offset + done));
        if (w < 0 && errno == EINTR)
            continue;
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

void pm__hub_link_frame(pm__hub *h, uint16_t host, const unsigned char *frame, size_t len)
{
    pm__hub_link *l = link_of(h, host);
    if (l == NULL || !l->up)
        return;
    pm__frame_hdr f;
    if (pm__frame_decode(frame, len, PM_MAX_PAYLOAD, &f) < 0 || f.deadline_ms < 0) {
        l->malformed++;
        return;
    }
    if (f.src_host != 0 || f.dst_host != 0) {
        l->forged++; /* it claims a host other than the link's */
        return;
    }
    if ((f.flags & PM__FF_MEMFD) != 0) {
        l->malformed++; /* an announcement of an fd no link can carry */
        return;
    }
    l->frames_in++;
    /* The identity comes from the link, never from the frame. */
    f.src_host = host;
    if (f.src > 0xFFFFu) {
        l->malformed++; /* not an address port */
        return;
    }
    if (f.deadline_ms > 0)
        f.deadline_ms += (int64_t)pm__now_ms();
    const unsigned char *payload = frame + PM__FRAME_HDR_SIZE;
    uint32_t node;
    int err = node_of(h, f.dst, &node);
    switch (f.type) {
    case PM__FT_MSG:
    case PM__FT_REQUEST: {
        /* Whatever happens to it, the frame is credited back: now, or when
         * it leaves the destination's queue. */
        uint32_t port = f.dst, bytes = PM__FRAME_HDR_SIZE + f.len;
        if (err < 0)
            notice_port(h, PM__REMOTE_NODE(host, f.src), f.src_inc, f.dst, f.dst_inc,
                        f.request_id, err);
        if (err < 0 || link_deliver(h, l, host, &f, payload, node) == 0)
            pm__hub_link_credit(h, host, port, bytes);
        return;
    }
    case PM__FT_CREDIT:
        link_credit_in(h, l, &f, payload);
        return;
    case PM__FT_FRAG:
        link_frag_in(h, l, host, &f, payload);
        return;
    case PM__FT_REPLY:
    case PM__FT_UNDELIVERABLE:
        /* A notice is a negative errno and nothing else (protocol.md 6): an
         * error of 0 with a payload would read as a reply. */
        if (err < 0 || (f.type == PM__FT_UNDELIVERABLE && (f.error >= 0 || f.len != 0))) {
            l->malformed++;
            return;
        }
        link_answer(h, l, &f, payload, node);
        return;
    case PM__FT_BCAST:
        link_bcast(h, l, host, &f, payload);
        return;
    case PM__FT_BRESULT:
    case PM__FT_BDONE:
        if (f.dst != 0 || f.request_id < PM__BCAST_ID_BASE ||
            (f.type == PM__FT_BDONE && (f.len != 4 || f.error != 0))) {
            l->malformed++;
            return;
        }
        pm__hub_mbcast_frame(h, host, &f, payload);
        return;
    default:
        l->malformed++; /* lifecycle frames never cross a link */
        return;
    }
}
