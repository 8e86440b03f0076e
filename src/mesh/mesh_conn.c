/* SPDX-License-Identifier: MIT */
/* mesh_conn.c - one peer connection on the loop: its loop arm, records in and out through its peer.c state, the output queue written to the socket, the link installed as a hub port and ended, its target's redial scheduled. */
#define _GNU_SOURCE
#include "mesh_int.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "os/dep_sodium.h"
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>


/*
 * No blocking call on the loop (but one: a --peers name that is not an
 * address literal is resolved with getaddrinfo when it is dialled; the
 * name of --peers-dns is resolved off the loop, peerdns.c). Each connection has one outstanding loop arm: for writing
 * alone while its connect is in progress, then for reading, or for
 * reading and writing while it has bytes queued; a change of what it waits for disarms and arms again under a
 * new generation, so a late completion of the old arm is recognised and
 * dropped. Deaths found while the hub sends (its callback) are acted on at
 * the next flush, never inside the hub's call.
 */

void pm__mkeys_put(pm__mkeys *g)
{
    if (g == NULL || --g->refs > 0)
        return;
    pm__keyring_free(g->keys);
    free(g);
}

static void emit(pm__mesh *m, int type, const pm__mesh_conn *k, const char *detail)
{
    pm_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.reason = pm_reason_name(PM_REASON_NONE);
    ev.detail = detail;
    ev.peer_host = k->pc.peer.host;
    ev.peer_incarnation = k->pc.peer.incarnation;
    m->env.ops->event(m->env.owner, &ev);
}

void pm__mesh_conn_report_down(pm__mesh *m, const pm__mesh_conn *k, int why)
{
    emit(m, PM_EVENT_PEER_DOWN, k, pm__peer_fail_name(why));
}

/* "a.b.c.d" or "v6" (with_port: "a.b.c.d:P", "[v6]:P") into buf. An
 * IPv4 source accepted on a dual-stack listener arrives v4-mapped
 * (::ffff:a.b.c.d) and is written as the IPv4 host it is, as the rate
 * limit keys it (mesh_accept.c): one host, one line, whichever listener. */
static void addr_text(const struct sockaddr_storage *ss, int with_port, char *buf, size_t size)
{
    char ip[INET6_ADDRSTRLEN] = "?";
    unsigned port = 0;
    int v6 = 0;
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *a = (const struct sockaddr_in *)ss;
        (void)inet_ntop(AF_INET, &a->sin_addr, ip, sizeof(ip));
        port = ntohs(a->sin_port);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *a = (const struct sockaddr_in6 *)ss;
        v6 = !IN6_IS_ADDR_V4MAPPED(&a->sin6_addr);
        if (v6)
            (void)inet_ntop(AF_INET6, &a->sin6_addr, ip, sizeof(ip));
        else
            (void)inet_ntop(AF_INET, &a->sin6_addr.s6_addr[12], ip, sizeof(ip));
        port = ntohs(a->sin6_port);
    }
    if (!with_port)
        snprintf(buf, size, "%s", ip);
    else
        snprintf(buf, size, v6 ? "[%s]:%u" : "%s:%u", ip, port);
}

/* PM_EVENT_PEER_REFUSED: n failures of (addr, why); host, when the
 * handshake got as far as the peer's hello. */
static void refused_event(pm__mesh *m, const char *addr, int why, const char *host, uint64_t n)
{
    pm_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = PM_EVENT_PEER_REFUSED;
    ev.reason = pm_reason_name(PM_REASON_NONE);
    ev.detail = pm__peer_fail_name(why);
    ev.peer_host = host != NULL && host[0] != '\0' ? host : NULL;
    ev.peer_address = addr;
    ev.peer_failures = n;
    m->env.ops->event(m->env.owner, &ev);
}

void pm__mesh_refused(pm__mesh *m, const struct sockaddr_storage *ss, int with_port, int why,
                      const char *host)
{
    char addr[PM__FAILLOG_ADDR];
    addr_text(ss, with_port, addr, sizeof(addr));
    /* One event per address and reason a minute: a peer that keeps
     * failing (another secret, say) must not flood the log, and an
     * operator must still see at once why a link does not come up. */
    uint64_t n = pm__faillog_note(&m->refused, addr, why, pm__now_ms());
    if (n > 0)
        refused_event(m, addr, why, host, n);
}

void pm__mesh_refused_flush(pm__mesh *m, uint64_t now)
{
    /* A peer that stopped failing within its window: the failures held
     * back since its last line would otherwise never reach the log. */
    char addr[PM__FAILLOG_ADDR];
    int why;
    uint64_t n;
    while ((n = pm__faillog_due(&m->refused, now, addr, &why)) > 0)
        refused_event(m, addr, why, NULL, n);
}

/* k ended before its link came up, for reason why (a failure; its state
 * is PM__PC_DEAD). A dialled connection is named by its target's address
 * and port, an accepted one by its source's address only (its port is
 * ephemeral: every retry a new one); and by the host its hello claimed:
 * peer.c fills peer.host from a hello that decoded whole, else it stays
 * "", which refused_event reports as no host. */
static void conn_refused(pm__mesh *m, const pm__mesh_conn *k, int why)
{
    pm__mesh_refused(m, &k->addr, k->pc.initiator, why, k->pc.peer.host);
}

static uint64_t conn_tag(const pm__mesh *m, const pm__mesh_conn *k)
{
    return PM__TAG(m->env.tag_conn, (unsigned)(k - m->conns), k->gen);
}

/* Asks the loop for what k waits for now: writing alone while the connect
 * is in progress, else reading, and writing while bytes are queued. */
void pm__mesh_conn_arm(pm__mesh *m, pm__mesh_conn *k)
{
    size_t n = 0;
    (void)pm__pconn_output(&k->pc, &n);
    unsigned want = k->dialing ? PM__LOOP_OUT : PM__LOOP_IN | (n > 0 ? PM__LOOP_OUT : 0u);
    /* Lingering with nothing more to read (the peer's CLOSE or end of
     * stream seen), it waits only to write: a readable end of stream would
     * wake the loop at once, again and again. (linger_done is set only
     * while k lingers; pm__mesh_conn_new starts both at 0.) */
    if (k->linger_done)
        want = PM__LOOP_OUT;
    if (k->armed == want)
        return;
    if (k->armed != 0) {
        pm__loop_disarm(m->env.loop, k->fd, conn_tag(m, k));
        k->gen++; /* a completion of the old arm is stale from here on */
    }
    k->armed = pm__loop_arm_ev(m->env.loop, k->fd, conn_tag(m, k), want) == 0 ? want : 0;
}

/* Gives back what k holds: its loop arm, its fd, its peer.c state and its
 * keys. Its other fields stay as they were: every reader of an entry
 * tests fd first, and pm__mesh_conn_new starts the next connection from
 * zeros. */
void pm__mesh_conn_release(pm__mesh *m, pm__mesh_conn *k)
{
    if (k->fd < 0)
        return;
    if (k->armed != 0)
        pm__loop_disarm(m->env.loop, k->fd, conn_tag(m, k));
    pm__close(k->fd);
    k->fd = -1;
    k->gen++; /* a completion of its arm already queued is stale */
    pm__pconn_free(&k->pc);
    pm__mkeys_put(k->kg); /* after the state that borrowed it */
}

/* The connection may end in order (doc/protocol.md 7): it tried to send
 * its CLOSE (close_sent: queued, in the room every other record leaves
 * for it; peer.c tries only with a transport, which lives until pm__mesh_conn_release,
 * so its receiving side still works), and the end
 * is not an error (after an error a side waits for nothing) nor the
 * peer's silence (waiting for it would be pointless). */
static int conn_may_linger(const pm__mesh_conn *k, int why)
{
    return k->pc.close_sent && (why == PM__PF_LOCAL || why == PM__PF_DUPLICATE || why == PM__PF_CLOSED);
}

/* k ends at once after an error, its CLOSE (if any) written: unread bytes
 * in its socket would make close(2) answer with a reset, and a reset can
 * discard our CLOSE before the peer reads it. What is readable now is
 * read and dropped first, bounded (a peer cannot keep us here); what
 * arrives later still meets a reset. */
static void conn_drop_unread(pm__mesh *m, pm__mesh_conn *k)
{
    for (unsigned i = 0; i < PM__MESH_READS_PER_TURN; i++) {
        ssize_t r = recv(k->fd, m->rbuf, PM__MESH_READ_BUF, MSG_DONTWAIT);
        if (r <= 0)
            break;
        explicit_bzero(m->rbuf, (size_t)r);
    }
}

/*
 * Ends k: the hub port goes down first (its requests in flight answered),
 * the end is counted by its reason, and a configured peer is redialled
 * after backoff. Then either the fd is closed at once, or, where our CLOSE
 * went out in an orderly end, k lingers (doc/protocol.md 7): our queue
 * drains, our writing half is shut down, and the peer's records are read
 * (discarded, counted) until its CLOSE or end of stream, for at most
 * min(peer timeout, m->linger_ms: PM__MESH_LINGER_MS). Closing at once would lose our
 * CLOSE whenever unread bytes sit in our socket: the kernel then resets
 * the connection, and a reset discards what the peer had not read yet, so
 * the peer would see truncation. A lingering connection is no link: it
 * holds no hub port, is not listed by pm_cluster_peers and its target may
 * be dialled again meanwhile.
 */
void pm__mesh_conn_close(pm__mesh *m, pm__mesh_conn *k)
{
    if (k->fd < 0 || k->lingering)
        return;
    /* A dead state's fail is one of the reasons: peer.c sets it only from
     * its constants (die, pm__pconn_close's callers). */
    int why = k->pc.state == PM__PC_DEAD ? k->pc.fail : PM__PF_LOCAL;
    if (k->linked) {
        k->linked = 0;
        m->up--;
        pm__hub_link_down(m->env.hub, (uint16_t)k->host);
        emit(m, PM_EVENT_PEER_DOWN, k, pm__peer_fail_name(why));
    } else if (why != PM__PF_CLOSED && why != PM__PF_LOCAL && why != PM__PF_SELF) {
        conn_refused(m, k, why); /* the ends that are failures (doc/protocol.md 8) */
    }
    m->fails[why]++;
    /* Frames discarded before the linger (a first record of frames on a
     * link closed as it came up): counted with those after our CLOSE
     * (pm__mesh_conn_linger adds only what it discards itself). */
    m->linger_discarded += k->pc.frames_after_close;
    if (k->peer >= 0) {
        pm__dtarget *t = pm__mesh_dns_target(m, k->peer);
        m->dial_conn[k->peer] = -1;
        if (t != NULL && why == PM__PF_SELF)
            t->self = 1; /* our own address in the answer: not dialled again */
        if (t == NULL || !t->self)
            pm__mesh_schedule_redial(m, k->peer, pm__now_ms());
    }
    if (!conn_may_linger(k, why)) {
        if (k->pc.close_sent && !m->freeing)
            conn_drop_unread(m, k);
        pm__mesh_conn_release(m, k);
        return;
    }
    uint64_t wait = (uint64_t)m->env.cfg.timeout_ms;
    k->lingering = 1;
    /* The peer's CLOSE started it: ours answers it, nothing more to read. */
    k->linger_done = k->pc.close_received;
    k->deadline_ms = pm__now_ms() + (wait < m->linger_ms ? wait : m->linger_ms);
    m->lingered++;
    if (pm__mesh_conn_linger(m, k)) {
        pm__mesh_conn_release(m, k);
        return;
    }
    if (!m->freeing) /* pm__mesh_free waits on its own, without the loop */
        pm__mesh_conn_arm(m, k);
}

int pm__mesh_conn_linger(pm__mesh *m, pm__mesh_conn *k)
{
    pm__mesh_conn_write(k); /* a write error drops the queue: nothing more goes out */
    size_t n;
    (void)pm__pconn_output(&k->pc, &n);
    if (n == 0 && !k->shut_wr) {
        /* Our CLOSE is out: the peer reads end of stream after it. */
        (void)shutdown(k->fd, SHUT_WR);
        k->shut_wr = 1;
    }
    uint64_t frames = k->pc.frames_after_close;
    for (unsigned i = 0; i < PM__MESH_READS_PER_TURN && !k->linger_done; i++) {
        ssize_t r = recv(k->fd, m->rbuf, PM__MESH_READ_BUF, MSG_DONTWAIT);
        if (r > 0) {
            int rc = pm__pconn_linger(&k->pc, m->rbuf, (size_t)r);
            explicit_bzero(m->rbuf, (size_t)r);
            if (rc == 1)
                m->closes_answered++; /* the peer's CLOSE came after ours */
            if (rc != 0)
                k->linger_done = 1;
            continue;
        }
        if (r == 0 || (errno != EAGAIN && errno != EINTR))
            k->linger_done = 1; /* end of stream, or the connection failed */
        break;
    }
    m->linger_discarded += k->pc.frames_after_close - frames;
    /* Done once nothing more can come (the peer's CLOSE, end of stream, an
     * error) and nothing more must go (our queue out, our half shut). */
    return k->linger_done && k->shut_wr;
}

/* Backpressure across a link: once k's output queue is below half, the
 * hub reads the senders it held for it again (pm__hub_link_writable; O(1)
 * when none is held). Half, so a sender does not flap on every record. */
static void conn_drained(pm__mesh_conn *k)
{
    size_t n;
    (void)pm__pconn_output(&k->pc, &n);
    if (k->linked && n < PM__PCONN_OUT_CAP / 2)
        pm__hub_link_writable(k->m->env.hub, (uint16_t)k->host);
}

/* Writes what k has queued until the socket is full. A write error kills
 * the link (the peer sees truncation). */
void pm__mesh_conn_write(pm__mesh_conn *k)
{
    while (k->fd >= 0 && !k->dialing) {
        size_t n;
        const unsigned char *p = pm__pconn_output(&k->pc, &n);
        if (n == 0)
            return;
        ssize_t w = send(k->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            pm__pconn_sent(&k->pc, (size_t)w);
            conn_drained(k);
            continue;
        }
        if (w < 0 && (errno == EAGAIN || errno == EINTR))
            return;
        if (k->pc.state != PM__PC_DEAD)
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_TRUNCATED);
        pm__pconn_sent(&k->pc, n); /* nothing more can go out */
        return;
    }
}

/*
 * The hub's way into a link (pm__hub_link.send): 0, the frame is taken and
 * goes out this loop turn; -EAGAIN, no room (hub_link.c holds a worker
 * sender until conn_drained says the queue is below half; an answer is
 * dropped and counted; main gets -EAGAIN). The frame
 * is staged (batching, doc/protocol.md 6): the frames of one turn share
 * FRAMES records, sealed when the stage fills and in pm__mesh_flush at the
 * turn's end, so a lone frame waits for no company. Staged frames die with
 * the link like queued ones; pm__hub_link_down answers their requests.
 */
static int conn_send(void *arg, const void *frame, size_t len)
{
    pm__mesh_conn *k = arg;
    int rc = pm__pconn_stage(&k->pc, frame, len);
    if (rc == -EAGAIN) {
        pm__mesh_conn_write(k); /* room may come from the socket at once */
        rc = pm__pconn_stage(&k->pc, frame, len);
    }
    return rc;
}

/* A frame of a FRAMES record (during pm__pconn_input). */
static void conn_frame(void *arg, const unsigned char *frame, size_t len)
{
    pm__mesh_conn *k = arg;
    if (k->linked)
        pm__hub_link_frame(k->m->env.hub, (uint16_t)k->host, frame, len);
}

/* Which of two links between the same hosts stays: the one whose
 * initiator has the bytewise smaller host name (doc/protocol.md 2). */
static const char *initiator_name(const pm__mesh *m, const pm__mesh_conn *k)
{
    return k->pc.initiator ? pm__hub_names(m->env.hub)->host : k->pc.peer.host;
}

/* k's handshake finished and a record arrived: install it as the host's
 * port, unless a link with that host already stays. */
static void conn_up(pm__mesh *m, pm__mesh_conn *k)
{
    pm__dtarget *t = k->peer >= 0 ? pm__mesh_dns_target(m, k->peer) : NULL;
    if (t != NULL) /* who answers at that address, whether this link stays or not */
        snprintf(t->host, sizeof(t->host), "%s", k->pc.peer.host);
    int idx = pm__hub_host_index(m->env.hub, k->pc.peer.host);
    if (idx < 0) {
        pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
        return;
    }
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *o = &m->conns[j];
        if (o == k || o->fd < 0 || !o->linked || o->host != idx)
            continue;
        if (k->pc.peer.incarnation != o->pc.peer.incarnation) {
            /* Another incarnation of a host we have a live link with: a
             * restarted host, or a holder of the secret claiming its name.
             * It replaces the old link only if it proved the host's pinned
             * key (the handshake checked it), or if the old link has been
             * silent for the peer timeout; otherwise it is refused, so an
             * unpinned mesh member cannot cut a live host off. Frames for
             * the old incarnation's workers then get -ESTALE from the new
             * one (worker incarnations start from a random base). */
            uint64_t now = pm__now_ms();
            if (!m->pinned && now - o->last_rx_ms < (uint64_t)m->env.cfg.timeout_ms) {
                pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_DUPLICATE);
                return;
            }
            pm__pconn_close(&o->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            pm__mesh_conn_write(o);
            pm__mesh_conn_close(m, o);
            continue;
        }
        if (strcmp(initiator_name(m, k), initiator_name(m, o)) < 0) {
            pm__pconn_close(&o->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            pm__mesh_conn_write(o);
            pm__mesh_conn_close(m, o);
        } else {
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            return;
        }
    }
    k->host = idx;
    k->linked = 1;
    k->deadline_ms = 0;
    k->last_rx_ms = k->last_ping_ms = pm__now_ms();
    k->rekey_at_ms = k->last_ping_ms + m->env.cfg.rekey_ms;
    m->up++;
    if (k->peer >= 0)
        m->backoff_ms[k->peer] = 0;
    pm__hub_link_up(m->env.hub, (uint16_t)idx, conn_send, k);
    pm__hub_link_caps(m->env.hub, (uint16_t)idx, k->pc.peer.capabilities);
    emit(m, PM_EVENT_PEER_UP, k, NULL);
}

/* Feeds received bytes to k's state machine. */
static void conn_input(pm__mesh *m, pm__mesh_conn *k, const unsigned char *p, size_t n)
{
    /* After PM__PCE_UP once more, even with no byte left: a first record
     * of frames is delivered by that call, now that the link is a port. */
    while (k->pc.state != PM__PC_DEAD) {
        size_t used = n;
        int ev = pm__pconn_input(&k->pc, p, n, &used);
        if (used > n)
            used = n;
        p += used;
        n -= used;
        if (ev != PM__PCE_UP)
            break;
        conn_up(m, k);
    }
}

void pm__mesh_conn_read(pm__mesh *m, pm__mesh_conn *k)
{
    for (unsigned i = 0; i < PM__MESH_READS_PER_TURN && k->pc.state != PM__PC_DEAD; i++) {
        ssize_t r = recv(k->fd, m->rbuf, PM__MESH_READ_BUF, MSG_DONTWAIT);
        if (r > 0) {
            k->last_rx_ms = pm__now_ms();
            conn_input(m, k, m->rbuf, (size_t)r);
            explicit_bzero(m->rbuf, (size_t)r);
            if (k->pc.pongs != k->pongs_seen) {
                /* Our stamp came back: the stamp is our clock in us, never
                 * the peer's. */
                k->pongs_seen = k->pc.pongs;
                uint64_t now_us = pm__now_ns() / 1000u;
                if (k->pc.pong_stamp <= now_us)
                    k->rtt_us = (int64_t)(now_us - k->pc.pong_stamp);
            }
            /* A short read emptied the socket: another recv would only say
             * EAGAIN (a system call per event). Bytes that arrive from now
             * on are not missed: the arm that follows (io_uring poll or
             * one-shot epoll, both level-triggered) sees them at once. */
            if ((size_t)r < PM__MESH_READ_BUF)
                return;
            continue;
        }
        if (r == 0) {
            (void)pm__pconn_eof(&k->pc);
            return;
        }
        if (errno == EAGAIN || errno == EINTR)
            return;
        pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_TRUNCATED);
        return;
    }
}

pm__mesh_conn *pm__mesh_conn_new(pm__mesh *m, int fd, int peer, int initiator,
                                 const struct sockaddr_storage *addr)
{
    pm__mesh_conn *k = NULL;
    for (unsigned j = 0; j < PM__MESH_CONNS && k == NULL; j++)
        if (m->conns[j].fd < 0)
            k = &m->conns[j];
    if (k == NULL)
        return NULL;
    /* The entry still holds what its last connection left (release gives
     * back resources, not fields): start from zeros, all but the
     * generation, which goes on so that a late completion of the last
     * connection's arm stays stale for this one. */
    uint32_t gen = k->gen;
    memset(k, 0, sizeof(*k));
    k->gen = gen;
    k->fd = -1; /* still free if the state cannot be made */
    if (pm__pconn_init(&k->pc, &m->cur->cfg, initiator) < 0)
        return NULL;
    k->kg = m->cur;
    k->kg->refs++;
    k->m = m;
    k->pc.on_frame = conn_frame;
    k->pc.on_frame_arg = k;
    k->fd = fd;
    k->addr = *addr;
    k->peer = peer;
    k->rtt_us = -1;
    k->since_ms = pm__now_ms();
    k->deadline_ms = k->since_ms + (uint64_t)m->env.cfg.timeout_ms;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return k;
}

/*
 * Our REKEY (doc/protocol.md 6): after o->rekey_records records or
 * o->rekey_ms, whichever first. The record count is judged here, at the
 * end of each loop turn (a busy turn may pass it by a turn's records), the
 * time by the mesh's deadline. A full output queue delays it briefly; the
 * deadline is moved so that a timer never fires in a loop meanwhile.
 */
void pm__mesh_conn_rekey(pm__mesh *m, pm__mesh_conn *k, uint64_t now)
{
    if (!k->linked || k->pc.state != PM__PC_UP)
        return;
    if (k->pc.records_since_rekey < m->env.cfg.rekey_records && now < k->rekey_at_ms)
        return;
    int rc = pm__pconn_rekey(&k->pc);
    k->rekey_at_ms = now + (rc == -EAGAIN ? PM__MESH_REDIAL_MIN_MS : m->env.cfg.rekey_ms);
}

/* Up: when k must send a HEARTBEAT (a third of the idle time its peer
 * announced, doc/protocol.md 7), and when its silence ends it (our own
 * idle time, the peer timeout). */
uint64_t pm__mesh_conn_heartbeat_at(const pm__mesh_conn *k)
{
    uint32_t idle = k->pc.peer.idle_ms < PM__PEER_IDLE_MIN_MS ? PM__PEER_IDLE_MIN_MS
                                                               : k->pc.peer.idle_ms;
    /* Every heartbeat is an echo, sent when the link is idle and on a busy
     * link as well, so its RTT stays current: a third of idle after the
     * last one, whatever went out since. */
    return k->last_ping_ms + idle / 3u;
}

uint64_t pm__mesh_conn_silence_at(const pm__mesh *m, const pm__mesh_conn *k)
{
    return k->last_rx_ms + (uint64_t)m->env.cfg.timeout_ms;
}

/* b ms +-25 %: hosts that lost each other at once do not redial (or
 * resolve) in step. */
uint64_t pm__mesh_jittered(uint32_t b, uint64_t now)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (uint32_t)now;
    return b * 3u / 4u + r % (b / 2u + 1u);
}

uint32_t pm__mesh_backoff_next(uint32_t b, uint32_t min, uint32_t max)
{
    return b == 0 ? min : (b > max / 2 ? max : b * 2);
}

void pm__mesh_schedule_redial(pm__mesh *m, int peer, uint64_t now)
{
    uint32_t b = pm__mesh_backoff_next(m->backoff_ms[peer], PM__MESH_REDIAL_MIN_MS, PM__MESH_REDIAL_MAX_MS);
    m->backoff_ms[peer] = b;
    m->redial_at[peer] = now + pm__mesh_jittered(b, now);
}
