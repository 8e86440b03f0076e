/* SPDX-License-Identifier: MIT */
/*
 * node_lanes.c - a worker's use of its direct lanes (doc/design.md, "Direct
 * lanes"): the hub's lane frames (an offer, a revocation's wake-up, a
 * peer's switch-over marker), the revocations read from the control block,
 * which path a frame to a peer takes, reading the lanes in turn, the wait
 * on the hub ring and every lane at once, pm_node_fd's epoll fd. No wait
 * here: node_messaging.c waits, and asks this file what to wait for.
 */
#define _GNU_SOURCE
#include "node_lanes.h"

#include <errno.h>

#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>

#include "base/le.h"
#include "channel/bigmsg.h"
#include "channel/proto.h"
#include "channel/ringwait.h"
#include "nodelane.h"
#include "os/doorbell.h"

struct pm__node_ls {
    pm__node_lanes t;
    pm__channel *ch;     /* the node's channel: its hub ring, socket, doorbell */
    uint32_t slot;       /* the node's slot and incarnation */
    uint64_t inc;
    /* A revoked lane's frames written before the revocation: kept by the
     * node for its next receive (node_messaging.c's stash). */
    void (*keep)(void *arg, const pm__frame_hdr *h, const void *payload);
    void *keep_arg;
    int epfd;            /* pm_node_fd's, once it was asked for; -1 */
    /* The waits' own epoll fd (edge-triggered: ringwait.h
     * pm__ring_wait_edge), made at the first wait: the hub's doorbell
     * (data PM__LANES_MAX) and each marked lane's (data: its index); -1,
     * or -2 once epoll was refused (the waits poll from then on). */
    int wait_ep;
    unsigned waits; /* edge waits since the doorbells were last drained */
    unsigned rr;         /* the index read first next time (fairness) */
    uint64_t lost_req;   /* a request whose lane was revoked before its reply */
    uint64_t bad_marks;  /* markers naming no lane of ours */
    uint64_t handed;     /* frames kept and requests lost by finished lanes */
    uint64_t stale_offers; /* offers of lanes revoked before they were read */
    uint64_t counted_at; /* the hub ring position counted last (pm__node_lane_took) */
    pm__node_lane *last; /* the lane the last frame came by */
};

pm__node_ls *pm__node_ls_new(pm__channel *ch, uint32_t slot, uint64_t inc,
                             void (*keep)(void *, const pm__frame_hdr *, const void *), void *arg)
{
    pm__node_ls *s = calloc(1, sizeof(*s));
    if (s == NULL)
        return NULL;
    pm__node_lanes_init(&s->t);
    s->ch = ch;
    s->slot = slot;
    s->inc = inc;
    s->keep = keep;
    s->keep_arg = arg;
    s->epfd = -1;
    s->wait_ep = -1;
    s->counted_at = UINT64_MAX;
    return s;
}

void pm__node_ls_free(pm__node_ls *s)
{
    if (s == NULL)
        return;
    pm__node_lanes_close(&s->t);
    pm__close(s->epfd);
    if (s->wait_ep >= 0)
        pm__close(s->wait_ep);
    free(s);
}

void pm__node_ls_drop_husk(pm__node_ls *s)
{
    if (s != NULL && s->t.husk != NULL)
        pm__node_lanes_drop_husk(&s->t);
}

int pm__node_ls_live(const pm__node_ls *s)
{
    return s != NULL && s->t.live > 0;
}

unsigned pm__node_ls_held(const pm__node_ls *s)
{
    return s != NULL ? s->t.live : 0;
}

/* ------------------------------------------------------------ revocation */

static void keep_frame(void *arg, const pm__frame_hdr *h, const void *payload)
{
    pm__node_ls *s = arg;
    s->keep(s->keep_arg, h, payload);
    s->handed++;
}

static void lost_request(void *arg, uint32_t peer_slot, uint64_t id)
{
    (void)peer_slot;
    pm__node_ls *s = arg;
    s->lost_req = id;
    s->handed++;
}

/* Where a finished lane's frames and lost request go. */
static pm__node_lanes_sink sink_of(pm__node_ls *s)
{
    return (pm__node_lanes_sink){keep_frame, lost_request, s};
}

/* Finishes the revoked lanes (the unmarked ones too if unmarked_too) but
 * keep; the last lane is forgotten if it went. */
static int revoked_but(pm__node_ls *s, int unmarked_too, const pm__node_lane *keep)
{
    if (!pm__node_ls_live(s))
        return 0;
    const struct pm__ctl *ctl = pm__channel_ctl(s->ch);
    pm__node_lanes_sink sink = sink_of(s);
    unsigned k = pm__node_lanes_revoked_but(&s->t, ctl->lane_revoked, &sink, unmarked_too, keep);
    if (k > 0 && s->last != keep)
        s->last = NULL;
    return (int)k;
}

static int revoked(pm__node_ls *s, int unmarked_too)
{
    return revoked_but(s, unmarked_too, NULL);
}

int pm__node_ls_revoked(pm__node_ls *s)
{
    return revoked(s, 0);
}

/* At the wake-up of a supervisor of stop 44 or before, which names no
 * lane: every revoked lane, unmarked too (design.md, Known gaps: an
 * unmarked one may still have its marker behind that wake-up). */
static int revoked_all(pm__node_ls *s)
{
    return revoked(s, 1);
}

/* Lane k alone, marked or not, once its word says revoked, unless it is
 * of a later generation than gen (the index's next lane: gen's went
 * already). The caller took a frame written after the revocation of gen's
 * lane (its wake-up, or the offer that reuses k), so every frame its dead
 * peer sent through the hub, its marker among them, was ahead of it.
 * 1 finished; the last lane forgotten if it went. */
static int finish_at(pm__node_ls *s, uint32_t k, uint32_t gen)
{
    pm__node_lane *e = &s->t.at[k];
    if (e->lane == NULL || (int32_t)(e->gen - gen) > 0)
        return 0;
    const struct pm__ctl *ctl = pm__channel_ctl(s->ch);
    pm__node_lanes_sink sink = sink_of(s);
    if (pm__node_lanes_revoked_at(&s->t, ctl->lane_revoked, &sink, k) == 0)
        return 0;
    if (s->last == e)
        s->last = NULL;
    return 1;
}

/* Lane k, revoked, holding the caller's last message (a send path's
 * s->last): finished on a copy, its buffer kept until that message is let
 * go (nodelane.h, the husk). 1 finished. */
static int finish_kept(pm__node_ls *s, uint32_t k)
{
    const struct pm__ctl *ctl = pm__channel_ctl(s->ch);
    pm__node_lanes_sink sink = sink_of(s);
    if (pm__node_lanes_revoked_kept(&s->t, ctl->lane_revoked, &sink, k) == 0)
        return 0;
    s->last = NULL;
    return 1;
}

/* A revocation's wake-up naming its lane (laneoffer.h): that lane is
 * finished, marked or not, and the marked revoked ones, as at any look;
 * an unmarked other lane waits for its own wake-up, or for the offer that
 * reuses its index, since a wake-up of another lane may be ahead of its
 * marker (the gap the review of stop 42 found: its peer's last frames
 * were dropped). keep (a send path's last lane, whose buffer may hold
 * what the caller sends) is skipped by the pass and finished on its own
 * with its buffer kept. 1: the wake-up was taken. A lane the last message
 * came by is marked, so the next receive finishes it anyway if this one
 * could not (no memory). */
static int revoked_named(pm__node_ls *s, const pm__frame_hdr *h, const void *payload,
                         const pm__node_lane *keep)
{
    uint32_t k, gen;
    (void)revoked_but(s, 0, keep);
    /* The supervisor is trusted: a bad note is a bug, and ignored. */
    if (pm__lane_revoked_decode(payload, h->len, &k, &gen) < 0)
        return 1;
    if (keep != NULL && &s->t.at[k] == keep)
        (void)finish_kept(s, k);
    else
        (void)finish_at(s, k, gen);
    return 1;
}

int pm__node_ls_lost(pm__node_ls *s, uint64_t id)
{
    if (s == NULL || s->lost_req != id || id == 0)
        return 0;
    s->lost_req = 0;
    return 1;
}

/* --------------------------------------------------------- the hub's frames */

/* Our switch-over marker to the peer, through the hub: it tells the peer
 * that every frame we sent it through the hub before the lane is ahead of
 * the marker, so it may read the lane once it has taken the marker. We
 * write on the lane only once the marker is in our up ring. */
static void send_mark(pm__node_ls *s, pm__node_lane *e)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_LANE_MARK;
    h.dst = e->lane->who.peer_slot;
    h.dst_inc = e->lane->who.peer_inc;
    unsigned char gen[4];
    pm__put32(gen, e->gen);
    if (pm__frame_send(&s->ch->tx, &h, gen, sizeof(gen)) == 0)
        e->mark_sent = 1;
}

/* A doorbell the waits take edges from (data: its index). Registered
 * from a lane's marker on: before it the lane is not waited on. */
static void edge_watch(pm__node_ls *s, int fd, uint32_t index)
{
    struct epoll_event ev = {.events = EPOLLIN | EPOLLET, .data.u32 = index};
    if (s->wait_ep < 0 || epoll_ctl(s->wait_ep, EPOLL_CTL_ADD, fd, &ev) == 0 || errno == EEXIST)
        return;
    /* Not watched (ENOMEM, or fs.epoll.max_user_watches spent, which any
     * process of our uid can do): a lane left out would wait a whole chunk
     * for each frame. The waits poll every doorbell from now on. */
    pm__close(s->wait_ep);
    s->wait_ep = -2;
}

static void watch(pm__node_ls *s, int fd)
{
    struct epoll_event ev = {.events = EPOLLIN, .data.fd = fd};
    if (s->epfd >= 0)
        (void)epoll_ctl(s->epfd, EPOLL_CTL_ADD, fd, &ev);
}

/* Empties lane e's doorbell. A peer that closed its end of it (alive: a
 * dead one's lane is revoked and goes) can never ring it again, and it
 * reads end of file for ever: a level-triggered wait on it (pm_node_fd,
 * the poll fallback) would return at once every time and spin. It leaves
 * every wait; the lane is still read whenever we look (each wait's last
 * look, a wait slice ending), so the peer slows only its own frames. */
static void drain_bell(pm__node_ls *s, pm__node_lane *e)
{
    if (e->bell_hung || !pm__doorbell_drain(e->efd_self))
        return;
    e->bell_hung = 1;
    if (s->wait_ep >= 0)
        (void)epoll_ctl(s->wait_ep, EPOLL_CTL_DEL, e->efd_self, NULL);
    if (s->epfd >= 0)
        (void)epoll_ctl(s->epfd, EPOLL_CTL_DEL, e->efd_self, NULL);
}

/* finish: revocations are read first (any lane may be finished); else the
 * caller made sure the offer's index is free. */
static void offer(pm__node_ls *s, const pm__frame_hdr *h, const void *payload, int finish)
{
    unsigned char copy[PM__LANE_OFFER_SIZE];
    pm__lane_offer o;
    if (h->len != sizeof(copy))
        return;
    memcpy(copy, payload, sizeof(copy));
    /* The supervisor is trusted: a bad offer is a bug, and its record (if
     * any) cannot be told apart from the next large message's. */
    if (pm__lane_offer_decode(copy, sizeof(copy), &o) < 0 ||
        o.seq != pm__bigmsg_next(s->ch->rx_seq))
        return;
    int fds[3];
    if (pm__lane_record_recv(s->ch->sock, o.seq, fds) < 0)
        return;
    s->ch->rx_seq = o.seq;
    /* The revocation of the lane this index held was written before this
     * offer: read it first, so the index is free (the marked revoked
     * lanes go too, as at any look; an unmarked other one waits for its
     * own wake-up). */
    if (finish) {
        (void)revoked(s, 0);
        (void)finish_at(s, o.index, o.gen);
    }
    /* An offer read late, its lane revoked already: the word holds its
     * generation or a later one (pm__node_lane_revoked_by). Adopted, it
     * would be a lane to an incarnation that ended, taking our frames to
     * nobody (a review of stop 40: two offers at one index read after both
     * ended). Nothing was written on it: a peer writes on a lane only once
     * we attached (pm__node_lane_switch_ready). */
    uint32_t word = atomic_load_explicit(&pm__channel_ctl(s->ch)->lane_revoked[o.index],
                                         memory_order_acquire);
    if (pm__node_lane_revoked_by(word, o.gen)) {
        s->stale_offers++;
        for (int k = 0; k < 3; k++)
            pm__close(fds[k]);
        return;
    }
    if (pm__node_lanes_adopt(&s->t, &o, fds, s->slot, s->inc) < 0)
        return;
    pm__node_lane *e = &s->t.at[o.index];
    watch(s, e->efd_self);
    send_mark(s, e);
}

static void mark(pm__node_ls *s, const pm__frame_hdr *h, const void *payload)
{
    unsigned char gen[4];
    pm__node_lane *e = NULL;
    if (h->len == sizeof(gen) && h->src_host == PM__HOST_LOCAL) {
        memcpy(gen, payload, sizeof(gen));
        e = pm__node_lanes_to(&s->t, h->src, h->src_inc);
        if (e != NULL && e->gen != pm__get32(gen))
            e = NULL;
    }
    if (e == NULL) {
        s->bad_marks++;
        return;
    }
    /* Every frame the peer sent us through the hub before its lane is
     * behind us now: its lane may be read, and the counts start. */
    e->marked = 1;
    if (!e->bell_hung)
        edge_watch(s, e->efd_self, (uint32_t)(e - s->t.at));
}

int pm__node_ls_control(pm__node_ls *s, const pm__frame_hdr *h, const void *payload)
{
    uint64_t handed = s->handed;
    if (h->type == PM__FT_LANE_MARK)
        mark(s, h, payload);
    else if (h->len == 0)
        (void)revoked_all(s); /* an older supervisor's wake-up */
    else if (h->len == PM__LANE_REVOKED_SIZE)
        (void)revoked_named(s, h, payload, NULL); /* the wake-up of a revocation */
    else
        offer(s, h, payload, 1);
    return s->handed != handed;
}

/* The revocations read from a send path: every revoked lane finished but
 * the one the last message came by (its bytes, in that lane's buffer, may
 * be what the caller sends: they stay until the next receive, which
 * finishes it). 1 when no revoked lane was left. */
static int revoked_early(pm__node_ls *s)
{
    const pm__node_lane *last = s->last;
    /* last is skipped by the pass itself: checked first and finished by a
     * second reading of its word, it could be revoked in between (the
     * others' finishing takes tens of microseconds) and freed under the
     * caller's bytes (a review of stop 42). s->last stays: not finished. */
    (void)revoked_but(s, 1, last);
    return last == NULL || last->lane == NULL || !pm__node_ls_gone(s, last);
}

int pm__node_ls_control_early(pm__node_ls *s, const pm__frame_hdr *h, const void *payload)
{
    if (h->type == PM__FT_LANE_MARK) {
        mark(s, h, payload);
        return 1;
    }
    if (h->type != PM__FT_LANE)
        return 0;
    /* A revocation's wake-up: taken here too, or a worker that only sends
     * would stop at it and never read the offers behind it (its stream
     * would stay on the hub after its peer restarted). */
    if (h->len == 0)
        return revoked_early(s);
    if (h->len == PM__LANE_REVOKED_SIZE)
        return revoked_named(s, h, payload, s->last);
    unsigned char copy[PM__LANE_OFFER_SIZE];
    pm__lane_offer o;
    if (h->len != sizeof(copy))
        return 0;
    memcpy(copy, payload, sizeof(copy));
    if (pm__lane_offer_decode(copy, sizeof(copy), &o) < 0 || o.index >= PM__LANES_MAX)
        return 0;
    /* The index's old lane was revoked before this offer was written (its
     * wake-up may have been lost: a supervisor out of memory, or one of
     * stop 44 and before, which dropped it at main's bound): that lane alone is
     * finished here (the last message's with its buffer kept), never another
     * (a lane revoked after this offer was queued may still have its
     * marker behind it: design.md, "Direct lanes", Revocation). */
    const pm__node_lane *old = &s->t.at[o.index];
    if (old->lane != NULL &&
        !(old == s->last ? finish_kept(s, o.index) : finish_at(s, o.index, o.gen)))
        return 0;
    offer(s, h, payload, 0);
    return 1;
}

void pm__node_ls_took(pm__node_ls *s, const pm__frame_hdr *h)
{
    if (!pm__node_ls_live(s) || h->src_host != PM__HOST_LOCAL ||
        (h->type != PM__FT_MSG && h->type != PM__FT_REQUEST && h->type != PM__FT_REPLY &&
         h->type != PM__FT_LANE_REPLY))
        return;
    /* Counted once per frame, however often it is peeked (a request's wait
     * may leave a frame in the ring and see it again). */
    if (s->counted_at == s->ch->rx.tail)
        return;
    pm__node_lane *e = pm__node_lanes_to(&s->t, h->src, h->src_inc);
    if (e == NULL || !e->marked)
        return;
    s->counted_at = s->ch->rx.tail;
    pm__lane_took_from_hub(e->lane);
}

/* ------------------------------------------------------------- sending */

int pm__node_ls_gone(const pm__node_ls *s, const pm__node_lane *e)
{
    /* Acquire, as the revocation's own read (nodelane.c). */
    const struct pm__ctl *ctl = pm__channel_ctl(s->ch);
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        if (&s->t.at[k] == e)
            return pm__node_lane_revoked_by(
                atomic_load_explicit(&ctl->lane_revoked[k], memory_order_acquire), e->gen);
    return 1;
}

pm__node_lane *pm__node_ls_to(pm__node_ls *s, const pm__frame_hdr *h)
{
    if (!pm__node_ls_live(s) || h->dst_host != PM__HOST_LOCAL || h->dst == PM__NODE_MAIN)
        return NULL;
    pm__node_lane *e = pm__node_lanes_to(&s->t, h->dst, h->dst_inc);
    /* A peer whose lane is revoked has ended: the frame takes the hub,
     * which answers for it (-EHOSTDOWN, -ESTALE), as it would have before
     * the lane. The lane itself is finished by the next receive. */
    if (e == NULL || pm__node_ls_gone(s, e))
        return NULL;
    if (!e->mark_sent)
        send_mark(s, e);
    /* Before our marker, a frame through the hub is ahead of it: not
     * counted, as the peer does not count it either. */
    return e->mark_sent ? e : NULL;
}

int pm__node_lane_path(pm__node_lane *e, int lane_fits)
{
    if (e->broken)
        return 0;
    if (lane_fits) {
        /* Never to an end that has not attached (it could not take the
         * lane: our frames would be lost). */
        if (e->on_lane || pm__node_lane_switch_ready(e)) {
            e->on_lane = 1;
            e->switch_backoff_ms = 0;
            return 1;
        }
        return 0;
    }
    if (!e->on_lane)
        return 0;
    int d = pm__lane_drained(e->lane);
    if (d == 0)
        return -EAGAIN;
    if (d < 0)
        e->broken = 1;
    e->on_lane = 0;
    return 0;
}

/* ------------------------------------------------------------- receiving */

int pm__node_ls_next(pm__node_ls *s, pm__frame_hdr *h, const void **payload)
{
    if (!pm__node_ls_live(s))
        return 0;
    for (unsigned i = 0; i < PM__LANES_MAX; i++) {
        unsigned k = (s->rr + i) % PM__LANES_MAX;
        pm__node_lane *e = &s->t.at[k];
        if (e->lane == NULL || !e->marked || e->broken)
            continue;
        int rc = pm__lane_recv(e->lane, h, payload);
        if (rc == 1) {
            /* The next call starts past this lane: a peer that floods its
             * lane delays its own frames, not the other lanes'. */
            s->rr = k + 1;
            s->last = e;
            return 1;
        }
        if (rc < 0)
            e->broken = 1; /* the peer broke its ring: never read again */
    }
    return 0;
}

pm__node_lane *pm__node_ls_last(pm__node_ls *s)
{
    return s != NULL ? s->last : NULL;
}

int pm__node_ls_reply_ok(pm__node_ls *s, const pm__frame_hdr *h, uint64_t id)
{
    if (!pm__node_ls_live(s) || h->request_id != id || h->src_host != PM__HOST_LOCAL)
        return 0;
    pm__node_lane *e = pm__node_lanes_to(&s->t, h->src, h->src_inc);
    if (e == NULL || e->lane->req_out != id)
        return 0;
    e->lane->req_out = 0;
    return 1;
}

void pm__node_ls_forget(pm__node_ls *s, uint64_t id)
{
    if (!pm__node_ls_live(s))
        return;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &s->t.at[k];
        if (e->lane != NULL && e->lane->req_out == id)
            e->lane->req_out = 0;
    }
}

/* --------------------------------------------------------------- waiting */

/* The rings a wait watches: the hub's, then every lane that may be read. */
static unsigned rings_of(pm__node_ls *s, pm__ring **v)
{
    unsigned m = 0;
    v[m++] = &s->ch->rx;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &s->t.at[k];
        if (e->lane != NULL && e->marked && !e->broken && !e->bell_hung)
            v[m++] = &e->lane->rx;
    }
    return m;
}

/* 1 when one of the m rings may have a frame (a broken one counts: its
 * next read says so). */
static int any_data(pm__ring *const *v, unsigned m)
{
    for (unsigned k = 0; k < m; k++)
        if (!pm__ring_empty(v[k]))
            return 1;
    return 0;
}

/* Every lane's doorbell emptied (drain_bell: a hung-up one leaves the
 * waits). */
static void drain_bells(pm__node_ls *s)
{
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        if (s->t.at[k].lane != NULL)
            drain_bell(s, &s->t.at[k]);
}

/* The waits' epoll fd, made at the first wait with every doorbell a wait
 * watches (the hub's, the marked lanes'); -1 where epoll is refused. */
static int edge_fd(pm__node_ls *s)
{
    if (s->wait_ep != -1)
        return s->wait_ep;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0) {
        s->wait_ep = -2;
        return -1;
    }
    s->wait_ep = fd;
    edge_watch(s, s->ch->node_efd, PM__LANES_MAX);
    for (uint32_t k = 0; k < PM__LANES_MAX; k++)
        if (s->t.at[k].lane != NULL && s->t.at[k].marked && !s->t.at[k].bell_hung)
            edge_watch(s, s->t.at[k].efd_self, k);
    return fd;
}

/* One wait on m rings through the edge-triggered epoll fd (ringwait.h):
 * no drain per wake-up. Every doorbell is drained after PM__EDGE_DRAIN
 * waits and when a wait times out: a well-behaved writer sends at most
 * once per arming of its ring, and each wait arms once, so a doorbell
 * holds at most that many sends (a socket refuses more after about 270
 * here, and a refused send makes no edge). Counted by waits, not by
 * edges: edges merge, and a wait that finds a frame while arming takes no
 * edge at all (a review of stop 41). An edge from a lane no wait watches
 * (broken) takes its doorbell out of the set: its peer could otherwise
 * wake us for nothing; so does a hang-up (drain_bell). Falls back to
 * pm__ring_wait_many where epoll is refused. */
#define PM__EDGE_DRAIN 32u
static int wait_edges(pm__node_ls *s, pm__ring *const *v, unsigned m, int timeout_ms)
{
    int ep = edge_fd(s);
    struct epoll_event ev[1 + PM__LANES_MAX];
    int nev = 0;
    int rc = ep < 0 ? -ENOSYS : pm__ring_wait_edge(v, m, ep, timeout_ms, ev, &nev);
    if (rc == -ENOSYS || rc == -EPERM || rc == -EACCES) {
        if (ep >= 0) {
            pm__close(ep);
            s->wait_ep = -2;
        }
        rc = pm__ring_wait_many(v, m, timeout_ms);
        /* Woken with every ring empty: a doorbell may have hung up (it
         * polls readable for ever, drain_bell). */
        if (rc > 0 && !any_data(v, m))
            drain_bells(s);
        return rc;
    }
    for (int i = 0; i < nev; i++) {
        uint32_t k = ev[i].data.u32;
        pm__node_lane *e = k < PM__LANES_MAX ? &s->t.at[k] : NULL;
        if (e == NULL || e->lane == NULL)
            continue;
        if (e->broken)
            (void)epoll_ctl(ep, EPOLL_CTL_DEL, e->efd_self, NULL);
        else if (ev[i].events & (EPOLLHUP | EPOLLRDHUP | EPOLLERR))
            drain_bell(s, e);
    }
    if (rc == 0 || ++s->waits >= PM__EDGE_DRAIN) {
        s->waits = 0;
        (void)pm__doorbell_drain(s->ch->node_efd);
        drain_bells(s);
    }
    return rc;
}

void pm__node_ls_pace(pm__node_ls *s)
{
    if (!pm__node_ls_live(s) || pm__spin_cpus() < 2)
        return;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        const pm__node_lane *e = &s->t.at[k];
        /* Frames known and not taken yet: no pause, they are read now. */
        if (e->lane != NULL && e->marked && !e->broken &&
            (e->lane->rx.peek_ptr != NULL || e->lane->rx.tail != e->lane->rx.head_cache))
            return;
    }
    uint64_t t0 = pm__now_ns();
    do {
        for (int i = 0; i < 8; i++)
            pm__cpu_relax();
    } while (pm__now_ns() - t0 < PM__LANE_PACE_NS);
}

int pm__node_ls_wait(pm__node_ls *s, int timeout_ms, int may_spin)
{
    pm__ring *v[1 + PM__LANES_MAX];
    unsigned m = rings_of(s, v);
    /* The ring's own strategy (ring.c spin_then_park) over every ring at
     * once: spin for the learnt budget, kept in the hub ring's state (one
     * budget per wait, whichever ring answers), then park. A lane's peer
     * answers without the hub, so a spin here pays off exactly when the
     * ring's own awake round trip would. */
    pm__ring *rx = &s->ch->rx;
    uint32_t budget = rx->spin_budget < rx->spin_ns ? rx->spin_budget : rx->spin_ns;
    uint64_t t0 = pm__now_ns(), prev = t0, now = t0;
    int learn = may_spin;
    if (may_spin && budget > 0) {
        do {
            for (int i = 0; i < 32; i++)
                pm__cpu_relax();
            if (any_data(v, m)) {
                rx->spin_budget = pm__spin_learn(rx->spin_budget, rx->spin_ns, 1, pm__now_ns() - t0);
                return 1;
            }
            now = pm__now_ns();
            if (pm__spin_preempted(prev, now)) {
                rx->spin_budget = 0; /* lost its CPU: park, as ring.c does */
                learn = 0;
                break;
            }
            prev = now;
        } while (now < t0 + budget);
    }
    int rc = wait_edges(s, v, m, timeout_ms);
    if (rc > 0 && learn)
        rx->spin_budget = pm__spin_learn(budget, rx->spin_ns, 0, pm__now_ns() - t0);
    return rc;
}

void pm__node_ls_drain(pm__node_ls *s)
{
    if (!pm__node_ls_live(s))
        return;
    drain_bells(s);
}

int pm__node_ls_arm(pm__node_ls *s)
{
    if (!pm__node_ls_live(s))
        return 0;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &s->t.at[k];
        if (e->lane == NULL || !e->marked || e->broken || e->bell_hung)
            continue;
        int rc = pm__ring_arm(&e->lane->rx);
        if (rc != 0) {
            pm__node_ls_disarm(s);
            return 1; /* a frame is there (or the ring broke: read it to see) */
        }
    }
    return 0;
}

void pm__node_ls_disarm(pm__node_ls *s)
{
    if (!pm__node_ls_live(s))
        return;
    for (unsigned k = 0; k < PM__LANES_MAX; k++) {
        pm__node_lane *e = &s->t.at[k];
        if (e->lane == NULL)
            continue;
        pm__ring_disarm(&e->lane->rx);
        drain_bell(s, e);
    }
}

int pm__node_ls_fd(pm__node_ls *s)
{
    if (s->epfd >= 0)
        return s->epfd;
    int fd = epoll_create1(EPOLL_CLOEXEC);
    if (fd < 0)
        return -errno;
    s->epfd = fd;
    watch(s, s->ch->node_efd);
    for (unsigned k = 0; k < PM__LANES_MAX; k++)
        if (s->t.at[k].lane != NULL && !s->t.at[k].bell_hung)
            watch(s, s->t.at[k].efd_self);
    return fd;
}

int pm__node_lane_switch_ready(const pm__node_lane *e)
{
    return pm__lane_peer_attached(e->lane) && pm__lane_may_send(e->lane);
}

int pm__node_lane_switch_due(const pm__node_lane *e, uint64_t now_ms)
{
    return !e->broken && !e->on_lane && now_ms >= e->switch_after_ms;
}

void pm__node_lane_switch_missed(pm__node_lane *e, uint64_t now_ms)
{
    uint32_t b = e->switch_backoff_ms;
    b = b == 0 ? PM__LANE_SWITCH_BACKOFF_MS : b < 16 * PM__LANE_SWITCH_BACKOFF_MS ? 2 * b : b;
    e->switch_backoff_ms = b;
    e->switch_after_ms = now_ms + b;
}
