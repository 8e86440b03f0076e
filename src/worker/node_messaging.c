/* SPDX-License-Identifier: MIT */
/*
 * node_messaging.c - the worker side's messages: send, try_send, reply,
 * recv and request over the channel's rings, large messages as sealed memfds
 * (bigmsg.h), the stash of messages a request waits past, beats.
 */
#define _GNU_SOURCE
#include "node.h"

#include <poll.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "channel/bigmsg.h"
#include "channel/proto.h"
#include "node_lanes.h"
#include "os/doorbell.h"

#define PM__STASH_MAX ((size_t)4 << 20)
/* Large messages pm_node_request may set aside (their fds stay open). */
#define PM__STASH_MAX_FDS 64u

/* Whether a frame of this type may still be sent, from the control block
 * alone (two loads, no system call on the send path). Fenced: nothing (the
 * hub no longer reads our ring, so a "sent" frame would be lost silently).
 * Asked to stop: no new messages or requests (pm_node_send documents
 * -ESHUTDOWN from then on), but replies, so a worker can finish the
 * requests it already has: the hub still relays from a stopping worker. */
static int refused(pm_node *n, int type)
{
    const struct pm__ctl *ctl = pm__channel_ctl(&n->channel);
    if (atomic_load_explicit(&ctl->fenced, memory_order_acquire) != 0)
        return 1;
    if (type == PM__FT_REPLY)
        return 0;
    return n->stopping || atomic_load_explicit(&ctl->stop, memory_order_acquire) != 0;
}

PM_EXTERN int pm_node_beat(pm_node *n)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    pm__node_beat(n);
    return pm__node_shut_down(n) ? -ESHUTDOWN : 0;
}

/* What names this mesh's nodes, from what this worker knows about its own
 * address (the number of slots is not known here: the hub answers -ENOENT
 * past the last one). */
static pm__names names_of(const pm_node *n)
{
    const struct pm__ctl *ctl = pm__channel_ctl(&n->channel);
    pm__names names = {n->self.system, n->self.host, (unsigned)n->self.port - n->slot, UINT32_MAX,
                       ctl->peer_mode ? &ctl->hosts : NULL};
    return names;
}

static void fill_msg(pm_node *n, const pm__frame_hdr *h, const void *data, pm_message *m)
{
    /* (a large message's data and len are set by the caller afterwards)
     * Every field is written, so no memset: a stream's receiver fills one
     * message per frame. A local sender's address is made once and kept
     * (its names do not change for this node's life); another host's is
     * made each time (the hosts' table is the hub's). */
    if (h->src_host != PM__HOST_LOCAL) {
        pm__names names = names_of(n);
        pm__node_address_at(&names, h->src_host, h->src, h->src_inc, &m->from);
    } else {
        if (h->src != n->from_node || h->src_inc != n->from_inc || n->from_inc == 0) {
            pm__names names = names_of(n);
            pm__node_address_at(&names, h->src_host, h->src, h->src_inc, &n->from_addr);
            n->from_node = h->src;
            n->from_inc = h->src_inc;
        }
        m->from = n->from_addr;
    }
    m->to = n->self;
    m->request_id = h->request_id;
    m->kind = h->type == PM__FT_REQUEST ? PM_MSG_REQUEST
              : h->type == PM__FT_REPLY ? PM_MSG_REPLY
              : h->type == PM__FT_UNDELIVERABLE ? PM_MSG_UNDELIVERABLE
                                                : PM_MSG_PLAIN;
    m->error = h->error;
    m->deadline_ms = h->deadline_ms;
    m->data = data;
    m->len = h->len;
}

/* Undoes the arming a timed-out receive left for pm_node_fd. Only when it
 * is set: the flag shares its cache line with our index, and a store on
 * every receive would bounce that line to the hub for nothing. The
 * doorbell the hub may have rung meanwhile is drained here, once: our own
 * waits park on a futex and never read it, and left full it would keep
 * pm_node_fd readable for a caller's poll. */
static void disarm(pm_node *n)
{
    if (!n->fd_armed)
        return;
    n->fd_armed = 0;
    if (atomic_load_explicit(&n->channel.rx.sh->cons_waiting, memory_order_relaxed) != 0)
        pm__ring_disarm(&n->channel.rx);
    pm__doorbell_drain(n->channel.node_efd);
    pm__node_ls_disarm(n->ls);
}

/* Lets go of the message returned last: its ring space or its stash entry. */
static void drop_current(pm_node *n)
{
    if (n->cur_in_ring) {
        pm__ring_consume(&n->channel.rx);
        n->cur_in_ring = 0;
        /* Hand space back in batches; a wait releases everything anyway. */
        if (n->channel.rx.tail - n->channel.rx.released >= n->channel.rx.cap / 8)
            pm__ring_release(&n->channel.rx);
    }
    free(n->cur_stash);
    n->cur_stash = NULL;
    pm__node_ls_drop_husk(n->ls);
    if (n->cur_map != NULL) {
        munmap((void *)n->cur_map, n->cur_map_len);
        n->cur_map = NULL;
    }
}

/* The fd of the large message the frame at the head of our ring announces:
 * its record is taken from our socket (the hub sends it before the frame)
 * and checked like any sender's: the hub passes on fds it did not map, and
 * the memfd came from another worker. All but the scan for holes, which
 * the sending host's hub made (pm__bigmsg_check_from_hub). 0 with *fd and
 * *len, -EPROTO. */
static int take_big(pm_node *n, const void *payload, int *fd, uint64_t *len)
{
    unsigned char copy[PM__ANNOUNCE_SIZE];
    memcpy(copy, payload, sizeof(copy));
    pm__announce a;
    if (n->channel.sock < 0 || pm__announce_decode(copy, sizeof(copy), &a) < 0 ||
        a.seq != pm__bigmsg_next(n->channel.rx_seq) ||
        pm__bigmsg_recv(n->channel.sock, a.seq, fd) < 0)
        return -EPROTO;
    n->channel.rx_seq = a.seq;
    if (pm__bigmsg_check_from_hub(*fd, a.len, (size_t)pm__channel_ctl(&n->channel)->max_message) < 0) {
        pm__close(*fd);
        return -EPROTO;
    }
    *len = a.len;
    return 0;
}

/* Maps a checked large message as the current one: m shows all of it. */
static int show_big(pm_node *n, int fd, uint64_t len, pm_message *m)
{
    const void *map;
    int rc = pm__bigmsg_map(fd, (size_t)len, &map);
    pm__close(fd);
    if (rc < 0)
        return rc;
    n->cur_map = map;
    n->cur_map_len = (size_t)len;
    m->data = map;
    m->len = (size_t)len;
    return 0;
}

/* A large message we cannot map (our address space is full: RLIMIT_AS,
 * vm.max_map_count) is skipped, never an error of the
 * receive, and its sender is told -EMSGSIZE with the one UNDELIVERABLE
 * frame a worker may send (the hub checks it against what it delivered to
 * us). A reply has nobody waiting to tell. */
static void refuse_big(pm_node *n, const pm__frame_hdr *h)
{
    if (h->type == PM__FT_REPLY)
        return;
    pm__frame_hdr u;
    memset(&u, 0, sizeof(u));
    u.type = PM__FT_UNDELIVERABLE;
    u.dst_host = h->src_host;
    u.dst = h->src;
    u.dst_inc = h->src_inc;
    u.request_id = h->request_id;
    u.error = -EMSGSIZE;
    while (pm__frame_send(&n->channel.tx, &u, NULL, 0) == -EAGAIN && !pm__node_shut_down(n))
        (void)pm__ring_wait_space(&n->channel.tx, PM__FRAME_HDR_SIZE, pm__node_wait_chunk(n));
}

/* Consumes a frame nobody will read (a late answer): a large message's
 * record is taken too, so the next one's sequence still matches. */
static void discard(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    int fd;
    uint64_t len;
    if ((h->flags & PM__FF_MEMFD) != 0 && take_big(n, payload, &fd, &len) == 0)
        pm__close(fd);
    pm__ring_consume(&n->channel.rx);
}

/* The spin gate of a worker waiting for a frame (doc/design.md, "Adaptive
 * spinning"). Every frame to us comes through the hub, so the hub is the
 * one other spinner a worker must leave a CPU for: while the hub is awake
 * (it has not announced a sleep on our up ring: it is working, or spinning
 * for the next frame) we spin only if a CPU is left beside it and the
 * process doing the work. On two CPUs a worker that handed its frame to an
 * awake hub therefore parks at once and leaves the hub, the receiver of
 * that frame, to spin: three spinners on two CPUs would take the CPU the
 * working process needs. A parked hub leaves the CPU to us. */
static int may_spin(const pm_node *n)
{
    return pm__spin_gate(pm__spin_cpus(), pm__ring_consumer_parked(&n->channel.tx) ? 0u : 1u);
}

static int lane_control(pm_node *n, const pm__frame_hdr *h, const void *payload);

/* What next_frame found: a frame peeked in the hub ring (consumed by the
 * caller), a frame from a lane (copied out already: nothing to consume),
 * or frames a revoked lane left in the stash (or a request it lost). */
enum { FROM_HUB = 1, FROM_LANE = 2, FROM_STASH = 3 };

/* The lanes' share of a receive: revocations first (their frames go to
 * the stash), then, every other call, the lanes before the hub ring, so
 * that neither the hub nor a lane can keep the other waiting. */
static int lanes_first(pm_node *n, pm__frame_hdr *h, const void **payload)
{
    if (pm__node_ls_revoked(n->ls) > 0)
        return FROM_STASH;
    if ((n->lane_turn ^= 1) != 0 && pm__node_ls_next(n->ls, h, payload) == 1)
        return FROM_LANE;
    return 0;
}

/* Waits for the next frame until *deadline_ms and peeks it: timeout_ms
 * < 0 waits for ever; *deadline_ms 0 is set to timeout_ms from the first
 * wait, so a receive that finds its frame reads no clock (a stream's
 * receiver did, once per frame). FROM_HUB, FROM_LANE or FROM_STASH with *h and *payload,
 * -ETIMEDOUT, -ESHUTDOWN, -EPROTO. STOP frames, lane frames of the hub
 * and malformed frames are consumed here. */
static int next_frame(pm_node *n, uint64_t *deadline_ms, int timeout_ms, pm__frame_hdr *h,
                      const void **payload)
{
    int forever = timeout_ms < 0;
    /* Whether the supervisor might be gone: only after a wait that saw
     * nothing for a whole chunk. A parked round trip then makes no getppid()
     * call, and a dead supervisor is still noticed within a chunk. */
    int quiet = 0;
    for (;;) {
        int rc = pm__node_ls_live(n->ls) ? lanes_first(n, h, payload) : 0;
        if (rc != 0)
            return rc;
        rc = pm__frame_recv(&n->channel.rx, PM__CHANNEL_MAX_FRAME, h, payload);
        if (rc == -EBADMSG)
            return -EPROTO; /* our supervisor wrote nonsense: nothing to do */
        if (rc < 0)
            continue; /* malformed frame, consumed */
        if (rc == 1) {
            if (h->type == PM__FT_STOP) {
                pm__ring_consume(&n->channel.rx);
                n->stopping = 1;
                return -ESHUTDOWN;
            }
            if (h->type == PM__FT_LANE || h->type == PM__FT_LANE_MARK) {
                int handed = lane_control(n, h, *payload);
                pm__ring_consume(&n->channel.rx);
                /* An unmarked lane is finished only here (at its wake-up,
                 * or the offer that reuses its index): its frames are in
                 * the stash, or the request waiting on it is lost, and
                 * the caller must look before it waits again (a request
                 * waited out its deadline: a review of stop 45). */
                if (handed)
                    return FROM_STASH;
                continue;
            }
            pm__node_ls_took(n->ls, h);
            return FROM_HUB;
        }
        if (pm__node_ls_next(n->ls, h, payload) == 1)
            return FROM_LANE;
        if (quiet ? pm__node_shut_down(n) : pm__node_told_to_stop(n))
            return -ESHUTDOWN;
        pm__node_beat(n);
        int wait = pm__node_wait_chunk(n);
        if (!forever) {
            uint64_t now = pm__now_ms();
            if (*deadline_ms == 0)
                *deadline_ms = now + (uint64_t)timeout_ms;
            if (now >= *deadline_ms) {
                /* Leave the doorbells armed so pm_node_fd turns readable
                 * when the next frame arrives; emptied first: the edge
                 * waits leave bytes in them, for which pm_node_fd (level-
                 * triggered) would turn readable at once (a review of stop
                 * 41). Before the arming, so a wake-up sent for it stays. */
                pm__doorbell_drain(n->channel.node_efd);
                pm__node_ls_drain(n->ls);
                if (pm__ring_arm(&n->channel.rx) != 0)
                    continue;
                n->fd_armed = 1;
                if (pm__node_ls_arm(n->ls) != 0)
                    continue;
                return -ETIMEDOUT;
            }
            if (*deadline_ms - now < (uint64_t)wait)
                wait = (int)(*deadline_ms - now);
        }
        struct pm__ctl *ctl = n->channel.map;
        atomic_store_explicit(&ctl->waiting, 1, memory_order_relaxed);
        /* With lanes, one wait on every ring (a lane's peer may answer on
         * any of them); else the hub ring's own. */
        rc = pm__node_ls_live(n->ls) ? pm__node_ls_wait(n->ls, wait, may_spin(n))
                                    : pm__ring_wait_gated(&n->channel.rx, wait, may_spin(n));
        atomic_store_explicit(&ctl->waiting, 0, memory_order_relaxed);
        if (rc < 0)
            return -EPROTO;
        quiet = rc == 0;
    }
}

/* Keeps the frame for pm_node_recv; from_ring: it is the frame peeked in
 * the hub ring (consumed once kept), else a private copy (a lane's). */
static int stash_frame(pm_node *n, const pm__frame_hdr *h, const void *payload, int from_ring)
{
    int big = (h->flags & PM__FF_MEMFD) != 0;
    if (n->stash_bytes + h->len > PM__STASH_MAX || (big && n->stash_fds >= PM__STASH_MAX_FDS))
        return -ENOBUFS;
    pm__stash *e = malloc(sizeof(*e) + h->len);
    if (e == NULL)
        return -ENOBUFS;
    e->next = NULL;
    e->h = *h;
    e->fd = -1;
    e->big_len = 0;
    if (big) {
        int rc = take_big(n, payload, &e->fd, &e->big_len);
        if (rc < 0) {
            free(e);
            return rc;
        }
        n->stash_fds++;
    }
    memcpy(e->data, payload, h->len);
    if (n->stash_tail != NULL)
        n->stash_tail->next = e;
    else
        n->stash_head = e;
    n->stash_tail = e;
    n->stash_bytes += h->len;
    if (from_ring)
        pm__ring_consume(&n->channel.rx);
    return 0;
}

static int stash_current(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    return stash_frame(n, h, payload, 1);
}

/* A frame a revoked lane held (node_lanes.h), or one from a live lane a
 * request's wait sets aside: a private copy. */
static int stash_copy(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    return stash_frame(n, h, payload, 0);
}

static void keep_revoked(void *arg, const pm__frame_hdr *h, const void *payload)
{
    /* With no room in the stash the frame is dropped: a message silently,
     * and a reply to the request this worker waits on with it, which then
     * waits for its deadline rather than say -ENOBUFS (a gap: reliability.md,
     * stop 71; a revoked lane holding frames while 4 MiB wait in the stash). */
    (void)stash_copy(arg, h, payload);
}

/* The lanes' state, made when first needed. NULL without memory. */
static pm__node_ls *lanes_of(pm_node *n)
{
    if (n->ls == NULL)
        n->ls = pm__node_ls_new(&n->channel, n->slot, n->self.incarnation, keep_revoked, n);
    return n->ls;
}

/* A lane frame of the hub's: an offer, a revocation's wake-up, a
 * peer's marker. Without memory for the lanes' state an offer's record
 * is still taken, so the record sequence stays whole. 1 when a lane it
 * finished left frames in the stash or lost a request. */
static int lane_control(pm_node *n, const pm__frame_hdr *h, const void *payload)
{
    pm__node_ls *s = lanes_of(n);
    if (s != NULL)
        return pm__node_ls_control(s, h, payload);
    int fds[3];
    pm__lane_offer o;
    if (h->type == PM__FT_LANE && h->len == PM__LANE_OFFER_SIZE &&
        pm__lane_offer_decode(payload, h->len, &o) == 0 &&
        pm__lane_record_recv(n->channel.sock, o.seq, fds) == 0) {
        n->channel.rx_seq = o.seq;
        for (int k = 0; k < 3; k++)
            pm__close(fds[k]);
    }
    return 0;
}

static int node_fd(pm_node *n)
{
    pm__node_ls *s = lanes_of(n);
    return s != NULL ? pm__node_ls_fd(s) : -ENOMEM;
}

/* A reply (or a notice about a request) nobody waits for any more. */
static int is_late_answer(const pm__frame_hdr *h)
{
    return h->type == PM__FT_REPLY || h->type == PM__FT_LANE_REPLY ||
           (h->type == PM__FT_UNDELIVERABLE && h->request_id != 0);
}

/* A request that came by a lane is remembered, so that its reply takes
 * that lane (nodelane.h); 0, or -ENOBUFS: dropped and counted, its
 * requester waits for its own deadline. */
static int lane_asked(pm_node *n, const pm__frame_hdr *h)
{
    pm__node_lane *e = pm__node_ls_last(n->ls);
    if (h->type != PM__FT_REQUEST || e == NULL)
        return 0;
    return pm__node_lane_asked(e, h->request_id);
}

/* A worker that only sends never reads its hub ring: an offer or a
 * peer's marker waiting there would never be taken, and its stream would
 * never take the lane (stop 40 measured it no faster with lanes). So a send
 * to a local worker takes the hub's lane frames at the head of the ring,
 * none behind another frame (those wait for a receive, in order); the
 * lane the last message came by is finished with its buffer kept until
 * that message is let go (node_lanes.h pm__node_ls_control_early, the
 * husk: drop_current). The current message, still at the
 * head (a sender's last receive), is consumed first: its bytes stay ours,
 * and the caller's, until the ring's space is handed back, which only a
 * receive does (drop_current, a wait on the hub ring). */
static void lane_frames_at_head(pm_node *n)
{
    pm__frame_hdr h;
    const void *p;
    if (n->cur_in_ring) {
        pm__ring_consume(&n->channel.rx);
        n->cur_in_ring = 0;
    }
    while (pm__frame_recv(&n->channel.rx, PM__CHANNEL_MAX_FRAME, &h, &p) == 1 &&
           (h.type == PM__FT_LANE || h.type == PM__FT_LANE_MARK)) {
        pm__node_ls *s = lanes_of(n);
        if (s == NULL || !pm__node_ls_control_early(s, &h, p))
            return;
        pm__ring_consume(&n->channel.rx);
    }
}

static int node_send(pm_node *n, const pm_address *to, int type, uint64_t request_id,
                     int64_t deadline_ms, const void *data, size_t len, int wait)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    n->lane_paced = 0; /* an exchange, not a stream: its answer is looked for at once */
    if (data == NULL && len > 0)
        return -EINVAL;
    if (len > PM_MAX_PAYLOAD &&
        (len > pm__channel_ctl(&n->channel)->max_message || n->channel.sock < 0))
        return -EMSGSIZE;
    uint32_t node;
    uint16_t host;
    pm__names names = names_of(n);
    rc = pm__address_route(&names, to, &host, &node);
    if (rc < 0)
        return rc;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.dst_host = host;
    h.dst = node;
    h.dst_inc = node == PM__NODE_MAIN || (host != PM__HOST_LOCAL && node == 0) ? 0 : to->incarnation;
    h.request_id = request_id;
    h.deadline_ms = deadline_ms;
    /* src and src_inc are left 0: the hub stamps them from our ring. */
    if (refused(n, type))
        return -ESHUTDOWN;
    /* Past lane_frames_at_head nothing on a send path finishes a revoked
     * lane (node_lanes.h), so e stays attached through this call. */
    if (h.dst_host == PM__HOST_LOCAL && h.dst != PM__NODE_MAIN)
        lane_frames_at_head(n);
    pm__node_lane *e = pm__node_ls_to(n->ls, &h);
    if (e != NULL) {
        /* A reply takes the lane only when its request came by it (asked
         * first: the request is forgotten whatever path the reply takes,
         * a review of stop 40 found large replies leaving it behind). */
        int asked = type == PM__FT_REPLY && pm__node_lane_answer(e, request_id);
        int fits = len <= PM__LANE_MAX_PAYLOAD && (type != PM__FT_REPLY || asked);
        rc = pm__node_lane_send(n, e, &h, data, len, fits, wait);
        if (rc != 0)
            return rc < 0 ? rc : 0;
    }
    if (len > PM_MAX_PAYLOAD) {
        rc = pm__node_send_big(n, &h, data, len, wait);
    } else {
        for (;;) {
            pm__node_beat(n);
            rc = pm__frame_send(&n->channel.tx, &h, data, len);
            if (rc != -EAGAIN || !wait)
                break;
            if (pm__node_shut_down(n))
                return -ESHUTDOWN;
            rc = pm__ring_wait_space(&n->channel.tx, PM__FRAME_HDR_SIZE + len, pm__node_wait_chunk(n));
            if (rc < 0)
                break;
        }
    }
    /* Through the hub to a peer we share a lane with: counted, so that our
     * next lane frame waits until the peer has taken this one. */
    if (rc == 0 && e != NULL)
        pm__lane_sent_via_hub(e->lane);
    return rc == -EBADMSG ? -EPROTO : rc;
}

PM_EXTERN int pm_node_send(pm_node *n, const pm_address *to, const void *data, size_t len)
{
    return node_send(n, to, PM__FT_MSG, 0, 0, data, len, 1);
}

PM_EXTERN int pm_node_try_send(pm_node *n, const pm_address *to, const void *data, size_t len)
{
    return node_send(n, to, PM__FT_MSG, 0, 0, data, len, 0);
}

PM_EXTERN int pm_node_reply(pm_node *n, const pm_message *request, const void *data, size_t len)
{
    if (request == NULL || request->kind != PM_MSG_REQUEST)
        return -EINVAL;
    return node_send(n, &request->from, PM__FT_REPLY, request->request_id, 0, data, len, 1);
}

/* What starts every wait for a message: a live node and somewhere to put
 * the message, the previous message released, the doorbell disarmed. */
static int begin_wait(pm_node *n, const pm_message *out)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    if (out == NULL)
        return -EINVAL;
    drop_current(n);
    disarm(n);
    return 0;
}

/* The current ring frame h announces a large message: take, check and map
 * it. -EPROTO when the hub sent nonsense (it is trusted: nothing to do),
 * -EMSGSIZE when we cannot map it (refused: refuse_big). */
static int recv_big(pm_node *n, const pm__frame_hdr *h, const void *payload, pm_message *m)
{
    int fd;
    uint64_t len;
    int rc = take_big(n, payload, &fd, &len);
    if (rc == 0 && show_big(n, fd, len, m) < 0) {
        refuse_big(n, h);
        rc = -EMSGSIZE;
    }
    if (rc < 0) {
        m->data = NULL;
        m->len = 0;
    }
    return rc;
}

/* The oldest stashed message as the current one: 1 (m filled), 0 when
 * the stash is empty. A reply there is late (a revoked lane's, its
 * request answered or given up): dropped. */
static int from_stash(pm_node *n, pm_message *m)
{
    while (n->stash_head != NULL) {
        pm__stash *e = n->stash_head;
        n->stash_head = e->next;
        if (n->stash_head == NULL)
            n->stash_tail = NULL;
        n->stash_bytes -= e->h.len;
        n->cur_stash = e;
        if (is_late_answer(&e->h)) {
            n->late_replies++;
            drop_current(n);
            continue;
        }
        fill_msg(n, &e->h, e->data, m);
        if (e->fd < 0)
            return 1;
        n->stash_fds--;
        int fd = e->fd;
        e->fd = -1;
        if (show_big(n, fd, e->big_len, m) == 0)
            return 1;
        refuse_big(n, &e->h);
        drop_current(n);
    }
    return 0;
}

PM_EXTERN int pm_node_recv(pm_node *n, pm_message *m, int timeout_ms)
{
    int rc = begin_wait(n, m);
    if (rc < 0)
        return rc;
    pm__node_beat(n);
    if (from_stash(n, m))
        return 0;
    if (n->stopping)
        return -ESHUTDOWN;
    if (n->lane_paced) {
        n->lane_paced = 0;
        pm__node_ls_pace(n->ls);
    }
    uint64_t deadline = 0; /* from the first wait (next_frame) */
    for (;;) {
        pm__frame_hdr h;
        const void *payload;
        rc = next_frame(n, &deadline, timeout_ms, &h, &payload);
        if (rc < 0)
            return rc;
        if (rc == FROM_STASH) {
            if (from_stash(n, m))
                return 0;
            continue;
        }
        if (rc == FROM_LANE) {
            /* A copy in the lane's buffer, nothing to consume. A reply
             * here answers no request (none waits in a receive). */
            if (h.type == PM__FT_REPLY) {
                n->late_replies++;
                continue;
            }
            if (lane_asked(n, &h) < 0)
                continue;
            fill_msg(n, &h, payload, m);
            n->lane_paced = 1;
            return 0;
        }
        if (is_late_answer(&h)) {
            discard(n, &h, payload);
            n->late_replies++;
            continue;
        }
        fill_msg(n, &h, payload, m);
        n->cur_in_ring = 1;
        if ((h.flags & PM__FF_MEMFD) == 0)
            return 0;
        rc = recv_big(n, &h, payload, m);
        if (rc != -EMSGSIZE)
            return rc;
        drop_current(n); /* skipped: on to the next message */
    }
}

static int await_reply(pm_node *n, uint64_t id, uint64_t deadline, int forever, pm_message *reply);

PM_EXTERN int pm_node_request(pm_node *n, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, pm_message *reply)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
    if (reply == NULL)
        return -EINVAL;
    uint64_t id = ++n->next_req;
    uint64_t deadline = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    /* Sent before the last message is let go (begin_wait): data may be
     * that message, forwarded as it came (a large one's mapping, a stash
     * entry, ring space; a review of stop 41 found it unmapped first). */
    rc = node_send(n, to, PM__FT_REQUEST, id, (int64_t)deadline, data, len, 1);
    int began = begin_wait(n, reply);
    if (rc < 0 || began < 0)
        return rc < 0 ? rc : began;
    rc = await_reply(n, id, deadline, timeout_ms < 0, reply);
    if (rc < 0)
        pm__node_ls_forget(n->ls, id); /* a lane's late reply is then dropped */
    return rc;
}

/* The reply a revoked lane left in the stash (written before the
 * revocation): 1 with it as the current message. */
static int stashed_reply(pm_node *n, uint64_t id, pm_message *reply)
{
    for (pm__stash **pp = &n->stash_head, *prev = NULL; *pp != NULL; prev = *pp, pp = &(*pp)->next) {
        pm__stash *e = *pp;
        if (e->h.type != PM__FT_REPLY || e->h.request_id != id)
            continue;
        *pp = e->next;
        if (n->stash_tail == e)
            n->stash_tail = prev;
        n->stash_bytes -= e->h.len;
        n->cur_stash = e;
        fill_msg(n, &e->h, e->data, reply);
        return 1;
    }
    return 0;
}

static int await_reply(pm_node *n, uint64_t id, uint64_t deadline, int forever, pm_message *reply)
{
    for (;;) {
        /* A revocation read anywhere (here, in a send, before an offer)
         * may have kept the reply, or lost the request with its lane. */
        if (n->stash_head != NULL && stashed_reply(n, id, reply))
            return 0;
        if (pm__node_ls_lost(n->ls, id))
            return -EHOSTDOWN; /* its lane's peer ended before answering */
        pm__frame_hdr h;
        const void *payload;
        int rc = next_frame(n, &deadline, forever ? -1 : 0, &h, &payload);
        if (rc < 0)
            return rc;
        if (rc == FROM_STASH)
            continue;
        if (rc == FROM_LANE) {
            /* The lane's rules let through only the reply to the request
             * this worker sent on it and waits on: this one. */
            if (h.type == PM__FT_REPLY && h.request_id == id) {
                fill_msg(n, &h, payload, reply);
                return 0;
            }
            if (h.type == PM__FT_REPLY || lane_asked(n, &h) < 0)
                continue;
            if (stash_copy(n, &h, payload) < 0)
                return -ENOBUFS;
            continue;
        }
        if (h.type == PM__FT_LANE_REPLY) {
            /* Our request went by a lane and its reply, too large for it,
             * came through the hub: ours only if it is from that lane's
             * peer (the hub stamped the sender). */
            if (!pm__node_ls_reply_ok(n->ls, &h, id)) {
                discard(n, &h, payload);
                n->late_replies++;
                continue;
            }
            h.type = PM__FT_REPLY;
            fill_msg(n, &h, payload, reply);
            n->cur_in_ring = 1;
            if ((h.flags & PM__FF_MEMFD) != 0)
                return recv_big(n, &h, payload, reply);
            return 0;
        }
        if ((h.type == PM__FT_REPLY || h.type == PM__FT_UNDELIVERABLE) && h.request_id == id) {
            fill_msg(n, &h, payload, reply);
            n->cur_in_ring = 1;
            if ((h.flags & PM__FF_MEMFD) != 0)
                return recv_big(n, &h, payload, reply);
            return h.type == PM__FT_REPLY ? 0 : (h.error < 0 ? h.error : -EHOSTDOWN);
        }
        if (is_late_answer(&h)) {
            discard(n, &h, payload);
            n->late_replies++;
            continue;
        }
        /* Someone else's message: keep it for pm_node_recv. With the stash
         * full we can no longer reach our reply: say so at once. (Waiting
         * out the deadline here would not beat, and a request timeout
         * longer than the heartbeat timeout would get us fenced.) */
        if (stash_current(n, &h, payload) < 0)
            return -ENOBUFS;
    }
}

/* An epoll fd holding the hub's doorbell and every lane's (made on the
 * first call, kept: a caller may keep the number), so the fd keeps its
 * meaning once lanes come: readable when a frame may be waiting on any
 * ring. The node is the caller's; const only in the signature. */
PM_EXTERN int pm_node_fd(const pm_node *n)
{
    int rc = pm__node_check(n);
    return rc < 0 ? rc : node_fd((pm_node *)n);
}
