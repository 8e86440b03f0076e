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

#include "channel/bigmsg.h"
#include "channel/proto.h"
#include "os/doorbell.h"

#define PM__STASH_MAX ((size_t)4 << 20)
/* Large messages pm_node_request may set aside (their fds stay open). */
#define PM__STASH_MAX_FDS 64u
/* Longest single wait between checks that the supervisor is still there. */
#define PM__WAIT_CHUNK_MS 100

/* The supervisor asked us to stop or fenced us (flags in the control
 * block): two loads, no system call. */
static int told_to_stop(const pm_node *n)
{
    const struct pm__ctl *ctl = pm__channel_ctl(&n->channel);
    return n->stopping || atomic_load_explicit(&ctl->stop, memory_order_acquire) != 0 ||
           atomic_load_explicit(&ctl->fenced, memory_order_acquire) != 0;
}

/* told_to_stop, or the supervisor is gone (PDEATHSIG normally kills us
 * first; this is for when it could not). */
static int shut_down(pm_node *n)
{
    return told_to_stop(n) || getppid() != n->supervisor;
}

/* Progress for the supervisor's liveness check: a plain store to our own
 * cache line of the control block, no system call. */
static inline void beat(pm_node *n)
{
    struct pm__ctl *ctl = n->channel.map;
    atomic_store_explicit(&ctl->beats, atomic_load_explicit(&ctl->beats, memory_order_relaxed) + 1,
                          memory_order_relaxed);
}

/* Longest single wait: short enough to notice a dead supervisor within a
 * second and to beat at least four times per heartbeat timeout while we
 * wait (waiting for work counts as alive; a stopped process does not beat). */
static int wait_chunk(const pm_node *n)
{
    uint32_t hb = pm__channel_ctl(&n->channel)->heartbeat_ms;
    int chunk = PM__WAIT_CHUNK_MS;
    if (hb > 0 && hb / 4 < (uint32_t)chunk)
        chunk = hb / 4 > 0 ? (int)(hb / 4) : 1;
    return chunk;
}

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
    beat(n);
    return shut_down(n) ? -ESHUTDOWN : 0;
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

static void fill_msg(const pm_node *n, const pm__frame_hdr *h, const void *data, pm_message *m)
{
    /* (a large message's data and len are set by the caller afterwards) */
    memset(m, 0, sizeof(*m));
    pm__names names = names_of(n);
    pm__node_address_at(&names, h->src_host, h->src, h->src_inc, &m->from);
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
 * vm.max_map_count) is skipped and counted, never an error of the
 * receive, and its sender is told -EMSGSIZE with the one UNDELIVERABLE
 * frame a worker may send (the hub checks it against what it delivered to
 * us). A reply has nobody waiting to tell. */
static void refuse_big(pm_node *n, const pm__frame_hdr *h)
{
    n->big_skipped++;
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
    while (pm__frame_send(&n->channel.tx, &u, NULL, 0) == -EAGAIN && !shut_down(n))
        (void)pm__ring_wait_space(&n->channel.tx, PM__FRAME_HDR_SIZE, wait_chunk(n));
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

/* Waits for the next frame until deadline_ms (0: none; now: poll) and
 * peeks it. 1 with *h and *payload, -ETIMEDOUT, -ESHUTDOWN, -EPROTO. STOP
 * frames and malformed frames are consumed here. */
static int next_frame(pm_node *n, uint64_t deadline_ms, int forever, pm__frame_hdr *h,
                      const void **payload)
{
    /* Whether the supervisor might be gone: only after a wait that saw
     * nothing for a whole chunk. A parked round trip then makes no getppid()
     * call, and a dead supervisor is still noticed within a chunk. */
    int quiet = 0;
    for (;;) {
        int rc = pm__frame_recv(&n->channel.rx, PM__CHANNEL_MAX_FRAME, h, payload);
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
            return 1;
        }
        if (quiet ? shut_down(n) : told_to_stop(n))
            return -ESHUTDOWN;
        beat(n);
        int wait = wait_chunk(n);
        if (!forever) {
            uint64_t now = pm__now_ms();
            if (now >= deadline_ms) {
                /* Leave the doorbell armed so pm_node_fd turns readable
                 * when the next frame arrives. */
                if (pm__ring_arm(&n->channel.rx) != 0)
                    continue;
                n->fd_armed = 1;
                return -ETIMEDOUT;
            }
            if (deadline_ms - now < (uint64_t)wait)
                wait = (int)(deadline_ms - now);
        }
        struct pm__ctl *ctl = n->channel.map;
        atomic_store_explicit(&ctl->waiting, 1, memory_order_relaxed);
        rc = pm__ring_wait_gated(&n->channel.rx, wait, may_spin(n));
        atomic_store_explicit(&ctl->waiting, 0, memory_order_relaxed);
        if (rc < 0)
            return -EPROTO;
        quiet = rc == 0;
    }
}

static int stash_current(pm_node *n, const pm__frame_hdr *h, const void *payload)
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
    pm__ring_consume(&n->channel.rx);
    return 0;
}

/* A reply (or a notice about a request) nobody waits for any more. */
static int is_late_answer(const pm__frame_hdr *h)
{
    return h->type == PM__FT_REPLY || (h->type == PM__FT_UNDELIVERABLE && h->request_id != 0);
}

/* Room for one more record ahead of its frame (bigmsg.h): forgets our
 * large frames the hub has consumed, and waits (or -EAGAIN without wait)
 * while PM__BIGMSG_AHEAD_MAX are not. The hub takes records off the socket
 * as they arrive and fences a worker past that many, so this, not the
 * socket's buffer, is what holds a sender back before its frames are
 * read. 0, -EAGAIN, -ESHUTDOWN, -EPROTO (our ring is poisoned). */
static int ahead_room(pm_node *n, int wait)
{
    for (;;) {
        while (n->ahead_n > 0) {
            int rc = pm__ring_consumed(&n->channel.tx, n->ahead_end[n->ahead_head]);
            if (rc < 0)
                return -EPROTO;
            if (rc == 0)
                break;
            n->ahead_head = (n->ahead_head + 1) % PM__BIGMSG_AHEAD_MAX;
            n->ahead_n--;
        }
        if (n->ahead_n < PM__BIGMSG_AHEAD_MAX)
            return 0;
        if (!wait)
            return -EAGAIN;
        if (shut_down(n))
            return -ESHUTDOWN;
        beat(n);
        if (pm__ring_wait_consumed(&n->channel.tx, n->ahead_end[n->ahead_head], wait_chunk(n)) < 0)
            return -EPROTO;
    }
}

/* Sends a large message (above PM_MAX_PAYLOAD) as a sealed memfd: room in
 * the ring is reserved first, then the record goes on the socket, then the
 * frame is committed, so that the hub always finds the record when it
 * reads the frame and a record never goes without its frame. A record the
 * kernel refuses for now (our user's fds in flight past our RLIMIT_NOFILE,
 * or no memory: hub.h) is -EAGAIN. */
static int send_big(pm_node *n, const pm__frame_hdr *h0, const void *data, size_t len, int wait)
{
    int fd = pm__bigmsg_create(data, len);
    if (fd < 0)
        return fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM ? -ENOBUFS : fd;
    pm__frame_hdr h = *h0;
    h.flags = PM__FF_MEMFD;
    h.len = PM__ANNOUNCE_SIZE;
    size_t total = PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE;
    int rc;
    for (;;) {
        beat(n);
        void *p;
        if ((rc = ahead_room(n, wait)) < 0)
            break;
        rc = pm__ring_reserve(&n->channel.tx, total, &p);
        if (rc == 0) {
            uint32_t seq = pm__bigmsg_next(n->channel.tx_seq);
            rc = pm__bigmsg_send(n->channel.sock, fd, seq);
            if (rc == 0) {
                n->channel.tx_seq = seq;
                pm__frame_encode(&h, p);
                pm__announce a = {len, seq};
                pm__announce_encode(&a, (char *)p + PM__FRAME_HDR_SIZE);
                pm__ring_commit(&n->channel.tx, total);
                pm__ring_publish(&n->channel.tx);
                n->ahead_end[(n->ahead_head + n->ahead_n++) % PM__BIGMSG_AHEAD_MAX] =
                    pm__ring_head(&n->channel.tx);
                break;
            }
            pm__ring_unreserve(&n->channel.tx);
            if (rc == -ETOOMANYREFS || rc == -ENOBUFS || rc == -ENOMEM) {
                pm__close(fd);
                return -EAGAIN; /* refused for now, not a wait given up */
            }
            if (rc != -EAGAIN)
                break;
            /* The hub has not taken our earlier fds yet. */
            if (!wait || shut_down(n))
                break;
            struct pollfd pfd = {n->channel.sock, POLLOUT, 0};
            (void)poll(&pfd, 1, wait_chunk(n));
            continue;
        }
        if (rc != -EAGAIN || !wait)
            break;
        if (shut_down(n)) {
            rc = -ESHUTDOWN;
            break;
        }
        rc = pm__ring_wait_space(&n->channel.tx, total, wait_chunk(n));
        if (rc < 0)
            break;
    }
    pm__close(fd); /* sent: the socket holds its own reference */
    if (rc == -EAGAIN && wait)
        rc = -ESHUTDOWN; /* gave up waiting because we must stop */
    return rc == -EBADMSG ? -EPROTO : rc;
}

static int node_send(pm_node *n, const pm_address *to, int type, uint64_t request_id,
                     int64_t deadline_ms, const void *data, size_t len, int wait)
{
    int rc = pm__node_check(n);
    if (rc < 0)
        return rc;
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
    if (len > PM_MAX_PAYLOAD)
        return send_big(n, &h, data, len, wait);
    for (;;) {
        beat(n);
        rc = pm__frame_send(&n->channel.tx, &h, data, len);
        if (rc != -EAGAIN || !wait)
            return rc == -EBADMSG ? -EPROTO : rc;
        if (shut_down(n))
            return -ESHUTDOWN;
        rc = pm__ring_wait_space(&n->channel.tx, PM__FRAME_HDR_SIZE + len, wait_chunk(n));
        if (rc < 0)
            return rc == -EBADMSG ? -EPROTO : rc;
    }
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

PM_EXTERN int pm_node_recv(pm_node *n, pm_message *m, int timeout_ms)
{
    int rc = begin_wait(n, m);
    if (rc < 0)
        return rc;
    beat(n);
    while (n->stash_head != NULL) {
        pm__stash *e = n->stash_head;
        n->stash_head = e->next;
        if (n->stash_head == NULL)
            n->stash_tail = NULL;
        n->stash_bytes -= e->h.len;
        n->cur_stash = e;
        fill_msg(n, &e->h, e->data, m);
        if (e->fd < 0)
            return 0;
        n->stash_fds--;
        int fd = e->fd;
        e->fd = -1;
        if (show_big(n, fd, e->big_len, m) == 0)
            return 0;
        refuse_big(n, &e->h);
        drop_current(n);
    }
    if (n->stopping)
        return -ESHUTDOWN;
    uint64_t deadline = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    for (;;) {
        pm__frame_hdr h;
        const void *payload;
        rc = next_frame(n, deadline, timeout_ms < 0, &h, &payload);
        if (rc < 0)
            return rc;
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

PM_EXTERN int pm_node_request(pm_node *n, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, pm_message *reply)
{
    int rc = begin_wait(n, reply);
    if (rc < 0)
        return rc;
    uint64_t id = ++n->next_req;
    uint64_t deadline = timeout_ms < 0 ? 0 : pm__now_ms() + (uint64_t)timeout_ms;
    rc = node_send(n, to, PM__FT_REQUEST, id, (int64_t)deadline, data, len, 1);
    if (rc < 0)
        return rc;
    for (;;) {
        pm__frame_hdr h;
        const void *payload;
        rc = next_frame(n, deadline, timeout_ms < 0, &h, &payload);
        if (rc < 0)
            return rc;
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

PM_EXTERN int pm_node_fd(const pm_node *n)
{
    int rc = pm__node_check(n);
    return rc < 0 ? rc : n->channel.node_efd;
}
