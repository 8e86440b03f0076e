/* SPDX-License-Identifier: MIT */
/* mesh.c - the supervisor's peer links on its loop: a non-blocking TCP listener and dialer, one peer.c state machine per connection, a link that comes up becomes a hub port. */
#define _GNU_SOURCE
#include "mesh.h"

#include <fcntl.h>
#include <netdb.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sodium.h>
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>

#include "cluster.h"
#include "peer.h"
#include "peerdns.h"

/*
 * No blocking call on the loop (but one: a --peers name that is not an
 * address literal is resolved with getaddrinfo when it is dialled; the
 * name of --peers-dns is resolved off the loop, peerdns.c). Each connection has one outstanding loop arm, for reading, or
 * for reading and writing while it has bytes queued or a connect is in
 * progress; a change of what it waits for disarms and arms again under a
 * new generation, so a late completion of the old arm is recognised and
 * dropped. Deaths found while the hub sends (its callback) are acted on at
 * the next flush, never inside the hub's call.
 */

/* The keys a handshake uses, with the rest of its configuration. A
 * connection holds the generation it started with until it closes (its
 * peer.c state borrows the configuration), so new secrets
 * (pm_cluster_set_secrets) swap in between handshakes: one under way
 * finishes with the keys it began with, and a link that is up stays up. */
typedef struct pm__mkeys {
    pm__pconn_cfg cfg;
    pm__keyring *keys;
    unsigned refs;          /* the connections using it, + 1 while current */
} pm__mkeys;

typedef struct pm__mconn {
    pm_cluster *c;
    pm__mkeys *kg;          /* its keys' generation, NULL before it starts */
    int fd;                 /* -1: a free entry */
    uint32_t gen;           /* in its loop tags; bumped on every re-arm */
    unsigned armed;         /* PM__LOOP_IN/OUT of the outstanding arm, 0 none */
    int dialing;            /* a non-blocking connect in progress */
    int peer;               /* the target it dialled (below), or -1 (accepted) */
    int linked;             /* up and the hub's port for host */
    int host;               /* the hub's index for its host once up, else -1 */
    uint64_t deadline_ms;   /* the handshake's (0 once up) */
    uint64_t since_ms;
    uint64_t last_rx_ms;    /* up: bytes last received (the silence timeout) */
    uint64_t last_tx_ms;    /* up: a record last queued or bytes sent (heartbeats) */
    uint64_t rekey_at_ms;   /* up: our next REKEY is due by time */
    uint64_t last_ping_ms;  /* up: the last heartbeat echo sent (the RTT, also when busy) */
    uint64_t pongs_seen;    /* pc.pongs when the RTT was last taken */
    int64_t rtt_us;         /* -1: none yet */
    pm__pconn pc;
    int pc_live;            /* pc initialised (freed on close) */
} pm__mconn;

/* What a connection dials, its "target": 0..npeers-1 the o->peers entries,
 * PM__MAX_PEERS + d the d-th address of --peers-dns. */
#define MESH_TARGETS ((int)(PM__MAX_PEERS + PM__PEERDNS_MAX))
#define DNS_TARGET(d) (PM__MAX_PEERS + (int)(d))

/* One address of the --peers-dns name. */
typedef struct pm__dtarget {
    int live;               /* in the last answer (or a link to it is up) */
    int self;               /* it was ourselves: never dialled again */
    pm__peerdns_addr a;
    char host[64];          /* who answered there last, "" unknown */
} pm__dtarget;

struct pm__mesh {
    pm__keyring *keys;      /* at start, until it moves into cur */
    pm__pins pins;
    int pinned;
    pm__mkeys *cur;         /* the keys new connections use */
    uint64_t key_reloads;
    int lfd;
    int lfd_armed;
    int spare_fd;            /* /dev/null, given up to accept-and-close when out of fds */
    int accept_stalled;      /* accepting failed for lack of fds or memory: re-armed at the next flush */
    pm__mesh_rate rate;      /* the per-source handshake rate limit */
    pm__mconn conns[PM__MESH_CONNS];
    int dial_conn[MESH_TARGETS];    /* the connection of each target, or -1 */
    uint64_t redial_at[MESH_TARGETS]; /* 0: none due */
    uint32_t backoff_ms[MESH_TARGETS];
    /* --peers-dns (peerdns.c resolves; the policy is here). */
    pm__peerdns *dns;
    pm__dtarget dt[PM__PEERDNS_MAX];
    uint64_t dns_at;                /* the next resolution; 0 while one runs */
    uint32_t dns_backoff_ms;        /* while it fails; 0 after a success */
    int dns_armed;
    uint64_t dns_ok, dns_failed;
    unsigned char *rbuf;            /* MADV_WIPEONFORK: received traffic */
    uint64_t fails[PM__PF_COUNT_];
    uint64_t dial_failed;
    unsigned up;
};

static pm__mesh *mesh_of(const pm_cluster *c)
{
    return c->mesh;
}

static void keys_put(pm__mkeys *g)
{
    if (g == NULL || --g->refs > 0)
        return;
    pm__keyring_free(g->keys);
    free(g);
}

/* "HOST:PORT" or "[v6]:PORT" into its host and port strings. Validated by
 * pm__peer_addr_valid when it was set. */
static int split_addr(const char *s, char *host, size_t hsize, char *port, size_t psize)
{
    const char *colon = strrchr(s, ':');
    if (colon == NULL)
        return -EINVAL;
    const char *h = s;
    size_t hl = (size_t)(colon - s);
    if (hl >= 2 && h[0] == '[' && h[hl - 1] == ']') {
        h++;
        hl -= 2;
    }
    if (hl + 1 > hsize || strlen(colon + 1) + 1 > psize)
        return -EINVAL;
    memcpy(host, h, hl);
    host[hl] = '\0';
    strcpy(port, colon + 1);
    return 0;
}

static int resolve(const char *addr, int passive, struct sockaddr_storage *ss, socklen_t *len)
{
    char host[256], port[8];
    if (split_addr(addr, host, sizeof(host), port, sizeof(port)) < 0)
        return -EINVAL;
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_family = AF_UNSPEC;
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_NUMERICSERV | (passive ? AI_PASSIVE : 0);
    int rc = getaddrinfo(host, port, &hints, &res);
    if (rc != 0 || res == NULL)
        return -EADDRNOTAVAIL;
    memcpy(ss, res->ai_addr, res->ai_addrlen);
    *len = res->ai_addrlen;
    freeaddrinfo(res);
    return 0;
}

static void emit(pm_cluster *c, int type, const pm__mconn *k, const char *detail)
{
    if (c->o->on_event == NULL)
        return;
    pm_event ev;
    memset(&ev, 0, sizeof(ev));
    ev.type = type;
    ev.reason = pm_reason_name(PM_REASON_NONE);
    ev.detail = detail;
    ev.peer_host = k->pc.peer.host;
    ev.peer_incarnation = k->pc.peer.incarnation;
    PM__APP_CALLBACK(&c->hub, c->o->on_event(c, &ev, c->o->on_event_arg));
}

static uint64_t conn_tag(const pm__mesh *m, const pm__mconn *k)
{
    return PM__TAG(PM__TAG_PEER, (unsigned)(k - m->conns), k->gen);
}

/* Asks the loop for what k waits for now: reading, and writing while bytes
 * are queued or the connect is in progress. */
static void conn_arm(pm_cluster *c, pm__mconn *k)
{
    pm__mesh *m = mesh_of(c);
    size_t n = 0;
    if (k->pc_live)
        (void)pm__pconn_output(&k->pc, &n);
    unsigned want = k->dialing ? PM__LOOP_OUT : PM__LOOP_IN | (n > 0 ? PM__LOOP_OUT : 0u);
    if (k->armed == want)
        return;
    if (k->armed != 0) {
        pm__loop_disarm(&c->loop, k->fd, conn_tag(m, k));
        k->gen++; /* a completion of the old arm is stale from here on */
    }
    k->armed = pm__loop_arm_ev(&c->loop, k->fd, conn_tag(m, k), want) == 0 ? want : 0;
}

/* b ms +-25 %: hosts that lost each other at once do not redial (or
 * resolve) in step. */
static uint64_t jittered(uint32_t b, uint64_t now)
{
    uint32_t r = 0;
    if (getrandom(&r, sizeof(r), GRND_NONBLOCK) != (ssize_t)sizeof(r))
        r = (uint32_t)now;
    return b * 3u / 4u + r % (b / 2u + 1u);
}

static void schedule_redial(pm__mesh *m, int peer, uint64_t now)
{
    uint32_t b = m->backoff_ms[peer];
    b = b == 0 ? PM__MESH_REDIAL_MIN_MS : (b * 2 > PM__MESH_REDIAL_MAX_MS ? PM__MESH_REDIAL_MAX_MS : b * 2);
    m->backoff_ms[peer] = b;
    m->redial_at[peer] = now + jittered(b, now);
}

/* The --peers-dns address target i stands for, or NULL (a configured peer). */
static pm__dtarget *dns_target(pm__mesh *m, int i)
{
    return i >= PM__MAX_PEERS && i < MESH_TARGETS ? &m->dt[i - PM__MAX_PEERS] : NULL;
}

/* Target i exists and may be dialled. */
static int target_dialable(const pm_cluster *c, const pm__mesh *m, int i)
{
    if (i < PM__MAX_PEERS)
        return i < (int)c->o->npeers;
    const pm__dtarget *t = &m->dt[i - PM__MAX_PEERS];
    return t->live && !t->self;
}

/* A link with host name `host` is up. */
static int host_linked(const pm__mesh *m, const char *host)
{
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked && strcmp(m->conns[j].pc.peer.host, host) == 0)
            return 1;
    return 0;
}

/* Ends k: the hub port goes down first (its requests in flight answered),
 * then the fd is closed; a configured peer is redialled after backoff. */
static void conn_close(pm_cluster *c, pm__mconn *k)
{
    pm__mesh *m = mesh_of(c);
    if (k->fd < 0)
        return;
    int why = k->pc_live && k->pc.state == PM__PC_DEAD ? k->pc.fail : PM__PF_LOCAL;
    if (why <= PM__PF_NONE || why >= PM__PF_COUNT_)
        why = PM__PF_LOCAL;
    if (k->linked) {
        k->linked = 0;
        m->up--;
        pm__hub_link_down(&c->hub, (uint16_t)k->host);
        emit(c, PM_EVENT_PEER_DOWN, k, pm__peer_fail_name(why));
    }
    m->fails[why]++;
    if (k->armed != 0)
        pm__loop_disarm(&c->loop, k->fd, conn_tag(m, k));
    pm__close(k->fd);
    k->fd = -1;
    k->armed = 0;
    k->gen++;
    if (k->pc_live)
        pm__pconn_free(&k->pc);
    k->pc_live = 0;
    keys_put(k->kg); /* after the state that borrowed it */
    k->kg = NULL;
    if (k->peer >= 0) {
        pm__dtarget *t = dns_target(m, k->peer);
        m->dial_conn[k->peer] = -1;
        if (t != NULL && why == PM__PF_SELF)
            t->self = 1; /* our own address in the answer: not dialled again */
        if (t == NULL || !t->self)
            schedule_redial(m, k->peer, pm__now_ms());
    }
}

/* Backpressure across a link: once k's output queue is below half, the
 * hub reads the senders it held for it again (pm__hub_link_writable; O(1)
 * when none is held). Half, so a sender does not flap on every record. */
static void conn_drained(pm__mconn *k)
{
    size_t n;
    (void)pm__pconn_output(&k->pc, &n);
    if (k->linked && n < PM__PCONN_OUT_CAP / 2)
        pm__hub_link_writable(&k->c->hub, (uint16_t)k->host);
}

/* Writes what k has queued until the socket is full. A write error kills
 * the link (the peer sees truncation). */
static void conn_write(pm__mconn *k)
{
    while (k->fd >= 0 && k->pc_live && !k->dialing) {
        size_t n;
        const unsigned char *p = pm__pconn_output(&k->pc, &n);
        if (n == 0)
            return;
        ssize_t w = send(k->fd, p, n, MSG_NOSIGNAL | MSG_DONTWAIT);
        if (w > 0) {
            pm__pconn_sent(&k->pc, (size_t)w);
            k->last_tx_ms = pm__now_ms();
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
    pm__mconn *k = arg;
    int rc = pm__pconn_stage(&k->pc, frame, len);
    if (rc == -EAGAIN) {
        conn_write(k); /* room may come from the socket at once */
        rc = pm__pconn_stage(&k->pc, frame, len);
    }
    return rc;
}

/* A frame of a FRAMES record (during pm__pconn_input). */
static void conn_frame(void *arg, const unsigned char *frame, size_t len)
{
    pm__mconn *k = arg;
    if (k->linked)
        pm__hub_link_frame(&k->c->hub, (uint16_t)k->host, frame, len);
}

/* Which of two links between the same hosts stays: the one whose
 * initiator has the bytewise smaller host name (doc/protocol.md 2). */
static const char *initiator_name(const pm_cluster *c, const pm__mconn *k)
{
    return k->pc.initiator ? c->hub.names.host : k->pc.peer.host;
}

/* k's handshake finished and a record arrived: install it as the host's
 * port, unless a link with that host already stays. */
static void conn_up(pm_cluster *c, pm__mconn *k)
{
    pm__mesh *m = mesh_of(c);
    pm__dtarget *t = k->peer >= 0 ? dns_target(m, k->peer) : NULL;
    if (t != NULL) /* who answers at that address, whether this link stays or not */
        snprintf(t->host, sizeof(t->host), "%s", k->pc.peer.host);
    int idx = pm__hub_host_index(&c->hub, k->pc.peer.host);
    if (idx < 0) {
        pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
        return;
    }
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mconn *o = &m->conns[j];
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
            if (!m->pinned && now - o->last_rx_ms < (uint64_t)c->o->peer_timeout_ms) {
                pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_DUPLICATE);
                return;
            }
            pm__pconn_close(&o->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            conn_write(o);
            conn_close(c, o);
            continue;
        }
        if (strcmp(initiator_name(c, k), initiator_name(c, o)) < 0) {
            pm__pconn_close(&o->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            conn_write(o);
            conn_close(c, o);
        } else {
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            return;
        }
    }
    k->host = idx;
    k->linked = 1;
    k->deadline_ms = 0;
    k->last_rx_ms = k->last_tx_ms = k->last_ping_ms = pm__now_ms();
    k->rekey_at_ms = k->last_tx_ms + c->o->rekey_ms;
    m->up++;
    if (k->peer >= 0)
        m->backoff_ms[k->peer] = 0;
    pm__hub_link_up(&c->hub, (uint16_t)idx, conn_send, k);
    pm__hub_link_caps(&c->hub, (uint16_t)idx, k->pc.peer.capabilities);
    emit(c, PM_EVENT_PEER_UP, k, NULL);
}

/* Feeds received bytes to k's state machine. */
static void conn_input(pm_cluster *c, pm__mconn *k, const unsigned char *p, size_t n)
{
    while (n > 0 && k->pc.state != PM__PC_DEAD) {
        size_t used = n;
        int ev = pm__pconn_input(&k->pc, p, n, &used);
        if (used > n)
            used = n;
        p += used;
        n -= used;
        if (ev == PM__PCE_UP)
            conn_up(c, k);
        else
            break;
    }
}

static void conn_read(pm_cluster *c, pm__mconn *k)
{
    pm__mesh *m = mesh_of(c);
    for (unsigned i = 0; i < PM__MESH_READS_PER_TURN && k->pc.state != PM__PC_DEAD; i++) {
        ssize_t r = recv(k->fd, m->rbuf, PM__MESH_READ_BUF, MSG_DONTWAIT);
        if (r > 0) {
            k->last_rx_ms = pm__now_ms();
            conn_input(c, k, m->rbuf, (size_t)r);
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

static pm__mconn *conn_new(pm_cluster *c, int fd, int peer, int initiator)
{
    pm__mesh *m = mesh_of(c);
    pm__mconn *k = NULL;
    for (unsigned j = 0; j < PM__MESH_CONNS && k == NULL; j++)
        if (m->conns[j].fd < 0)
            k = &m->conns[j];
    if (k == NULL)
        return NULL;
    if (pm__pconn_init(&k->pc, &m->cur->cfg, initiator) < 0)
        return NULL;
    k->pc_live = 1;
    k->kg = m->cur;
    k->kg->refs++;
    k->c = c;
    k->pc.on_frame = conn_frame;
    k->pc.on_frame_arg = k;
    k->fd = fd;
    k->armed = 0;
    k->dialing = 0;
    k->peer = peer;
    k->linked = 0;
    k->host = -1;
    k->rtt_us = -1;
    k->pongs_seen = 0;
    k->since_ms = pm__now_ms();
    k->deadline_ms = k->since_ms + (uint64_t)c->o->peer_timeout_ms;
    int one = 1;
    (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
    return k;
}

/* Dials target i (non-blocking). A failure schedules a redial. */
static void dial(pm_cluster *c, int i)
{
    pm__mesh *m = mesh_of(c);
    m->redial_at[i] = 0;
    struct sockaddr_storage ss;
    socklen_t len;
    int fd = -1;
    pm__dtarget *t = dns_target(m, i);
    if (t != NULL) {
        if (t->host[0] != '\0' && host_linked(m, t->host)) {
            /* Another address of the name reaches the same host (a host
             * listening on several), and one link per pair is the rule:
             * look again later, in case that link goes. */
            m->redial_at[i] = pm__now_ms() + jittered(PM__MESH_REDIAL_MAX_MS, pm__now_ms());
            return;
        }
        memcpy(&ss, &t->a.ss, sizeof(ss));
        len = t->a.len;
    } else if (resolve(c->o->peers[i], 0, &ss, &len) < 0) {
        goto fail;
    }
    fd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (fd < 0)
        goto fail;
    int rc = connect(fd, (struct sockaddr *)&ss, len);
    if (rc < 0 && errno != EINPROGRESS)
        goto fail;
    pm__mconn *k = conn_new(c, fd, i, 1);
    if (k == NULL)
        goto fail;
    k->dialing = rc < 0;
    m->dial_conn[i] = (int)(k - m->conns);
    conn_arm(c, k);
    return;
fail:
    pm__close(fd);
    m->dial_failed++;
    schedule_redial(m, i, pm__now_ms());
}

int pm__mesh_rate_take(pm__mesh_rate *t, const unsigned char addr[16], uint64_t now_ms)
{
    pm__mesh_rate_src *e = NULL, *lru = &t->src[0];
    for (unsigned i = 0; i < PM__MESH_RATE_SOURCES && e == NULL; i++) {
        pm__mesh_rate_src *s = &t->src[i];
        if (s->last_ms != 0 && memcmp(s->addr, addr, 16) == 0)
            e = s;
        else if (s->last_ms < lru->last_ms)
            lru = s; /* a free entry (0) is the least recent of all */
    }
    const uint32_t full = PM__MESH_RATE_BURST * 1000u;
    if (e == NULL) {
        e = lru; /* a new source starts with a full bucket */
        memcpy(e->addr, addr, 16);
        e->mtokens = full;
    } else if (now_ms > e->last_ms) {
        /* PER_S tokens a second are PER_S thousandths a millisecond. */
        uint64_t add = (now_ms - e->last_ms) * PM__MESH_RATE_PER_S;
        e->mtokens = add >= full - e->mtokens ? full : e->mtokens + (uint32_t)add;
    }
    e->last_ms = now_ms;
    if (e->mtokens < 1000u)
        return 0;
    e->mtokens -= 1000u;
    return 1;
}

/* The rate limit's key for a source address (pm__mesh_rate_src.addr). */
static void rate_key(const struct sockaddr_storage *ss, unsigned char key[16])
{
    memset(key, 0, 16);
    if (ss->ss_family == AF_INET) {
        const struct sockaddr_in *v4 = (const struct sockaddr_in *)ss;
        key[10] = key[11] = 0xff;
        memcpy(key + 12, &v4->sin_addr, 4);
    } else if (ss->ss_family == AF_INET6) {
        const struct sockaddr_in6 *v6 = (const struct sockaddr_in6 *)ss;
        static const unsigned char mapped[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        /* A v4-mapped source is that IPv4 host; any other by its /64. */
        memcpy(key, &v6->sin6_addr, memcmp(&v6->sin6_addr, mapped, 12) == 0 ? 16 : 8);
    }
}

/* Takes back the spare fd after it was spent (single-threaded: the fd
 * just closed is the lowest free one and nobody else can take it first,
 * but a worker start between turns may have). -1 when none is free. */
static void spare_reopen(pm__mesh *m)
{
    if (m->spare_fd < 0)
        m->spare_fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
}

/*
 * Out of fds (EMFILE, ENFILE), the pending connection stays queued and the
 * listener stays readable: arming it again would wake the loop at once for
 * as long as no fd frees up, and the peer would wait in the backlog for
 * nothing. So the spare fd held for this moment is given up, the
 * connection is accepted with it and closed at once (the peer sees the
 * close and redials with its backoff), and the spare is taken back: the
 * backlog drains and nothing spins (libuv's uv__emfile_trick). Without a
 * spare (or out of memory, ENOBUFS/ENOMEM) accepting stalls until the next
 * loop turn's flush arms the listener again. 1: the loop may go on
 * accepting; 0: stop.
 */
static int accept_starved(pm__mesh *m)
{
    m->fails[PM__PF_NO_FDS]++;
    if (errno != EMFILE && errno != ENFILE)
        return 0;
    if (m->spare_fd < 0)
        return 0;
    pm__close(m->spare_fd);
    m->spare_fd = -1;
    int fd = accept4(m->lfd, NULL, NULL, SOCK_CLOEXEC);
    pm__close(fd);
    spare_reopen(m);
    return m->spare_fd >= 0;
}

/* The listener is readable: accepts what waits (a bounded number). */
static void on_listen(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    m->lfd_armed = 0;
    for (int i = 0; i < 16; i++) {
        struct sockaddr_storage from;
        socklen_t flen = sizeof(from);
        memset(&from, 0, sizeof(from));
        int fd = accept4(m->lfd, (struct sockaddr *)&from, &flen, SOCK_NONBLOCK | SOCK_CLOEXEC);
        if (fd < 0 && (errno == EMFILE || errno == ENFILE || errno == ENOBUFS || errno == ENOMEM)) {
            if (accept_starved(m))
                continue;
            m->accept_stalled = 1;
            return;
        }
        if (fd < 0)
            break;
        unsigned char key[16];
        rate_key(&from, key);
        if (!pm__mesh_rate_take(&m->rate, key, pm__now_ms() | 1u)) {
            /* Over its source's rate: closed before anything is allocated
             * for it, and it takes no unauthenticated slot. */
            pm__close(fd);
            m->fails[PM__PF_RATE]++;
            continue;
        }
        /* Unauthenticated connections are bounded: the oldest is cut, so a
         * flood cannot keep a real peer out for longer than its handshake. */
        unsigned unauth = 0;
        pm__mconn *oldest = NULL;
        for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
            pm__mconn *o = &m->conns[j];
            if (o->fd < 0 || o->linked || o->peer >= 0)
                continue;
            unauth++;
            if (oldest == NULL || o->since_ms < oldest->since_ms)
                oldest = o;
        }
        if (unauth >= PM__MESH_UNAUTH_MAX && oldest != NULL) {
            pm__pconn_close(&oldest->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            conn_close(c, oldest);
        }
        pm__mconn *k = conn_new(c, fd, -1, 0);
        if (k == NULL) {
            pm__close(fd);
            m->fails[PM__PF_LOCAL]++;
            continue;
        }
        conn_arm(c, k);
    }
    if (pm__loop_arm(&c->loop, m->lfd, PM__TAG(PM__TAG_PEER_LISTEN, 0, 0)) == 0)
        m->lfd_armed = 1;
}

/* ---- peers from DNS -----------------------------------------------------
 * The name is resolved at start, then every PM__PEERDNS_REFRESH_MS while it
 * answers, and after a capped, jittered backoff while it fails or answers
 * nothing (each failure counted and written to stderr once per attempt,
 * which the backoff bounds). An address that appears is dialled at once;
 * one that is gone is no longer dialled (a link up to it stays until it
 * ends by itself: the pod may still be draining). Our own address is found
 * by the handshake (the hello's host name is ours: PM__PF_SELF) and never
 * dialled again while it stays in the answer. The result comes back on
 * the loop with tag PM__TAG_PEER_LISTEN, slot 1 (the listener is slot 0). */

#define DNS_TAG PM__TAG(PM__TAG_PEER_LISTEN, 1, 0)

static void dns_schedule(pm__mesh *m, int ok, uint64_t now)
{
    if (ok) {
        m->dns_backoff_ms = 0;
        m->dns_at = now + jittered(PM__PEERDNS_REFRESH_MS, now);
        return;
    }
    uint32_t b = m->dns_backoff_ms;
    b = b == 0 ? PM__PEERDNS_RETRY_MIN_MS
               : (b * 2 > PM__PEERDNS_RETRY_MAX_MS ? PM__PEERDNS_RETRY_MAX_MS : b * 2);
    m->dns_backoff_ms = b;
    m->dns_at = now + jittered(b, now);
}

static void dns_ready(pm_cluster *c);

static void dns_resolve(pm_cluster *c, uint64_t now)
{
    pm__mesh *m = mesh_of(c);
    m->dns_at = 0;
    if (pm__peerdns_fd(m->dns) >= 0) {
        /* A lookup whose fd the loop could not watch: its result is taken
         * now if it is there, else watched (or looked at again later). */
        dns_ready(c);
        return;
    }
    int rc = pm__peerdns_start(m->dns);
    if (rc == 0) {
        if (pm__loop_arm(&c->loop, pm__peerdns_fd(m->dns), DNS_TAG) == 0)
            m->dns_armed = 1;
        else /* not watched: the next dns_resolve takes the result */
            m->dns_at = now + PM__PEERDNS_RETRY_MIN_MS;
        return;
    }
    m->dns_failed++;
    fprintf(stderr, "procmesh: peers-dns: %s: cannot start a resolution: %s\n", pm__peerdns_name(m->dns),
            strerror(-rc));
    dns_schedule(m, 0, now);
}

/* The new answer a[0..n): targets that are gone stop being dialled, new
 * ones are dialled at once. */
static void dns_merge(pm_cluster *c, const pm__peerdns_addr *a, size_t n)
{
    pm__mesh *m = mesh_of(c);
    for (unsigned d = 0; d < PM__PEERDNS_MAX; d++) {
        pm__dtarget *t = &m->dt[d];
        if (!t->live)
            continue;
        int kept = 0;
        for (size_t i = 0; i < n && !kept; i++)
            kept = a[i].len == t->a.len && memcmp(&a[i].ss, &t->a.ss, a[i].len) == 0;
        if (kept)
            continue;
        int j = m->dial_conn[DNS_TARGET(d)];
        if (j >= 0) {
            pm__mconn *k = &m->conns[j];
            k->peer = -1; /* not redialled; it counts as a link of its own now */
            if (!k->linked) {
                pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
                conn_close(c, k);
            }
        }
        memset(t, 0, sizeof(*t));
        m->dial_conn[DNS_TARGET(d)] = -1;
        m->redial_at[DNS_TARGET(d)] = 0;
        m->backoff_ms[DNS_TARGET(d)] = 0;
    }
    for (size_t i = 0; i < n; i++) {
        int have = 0;
        for (unsigned d = 0; d < PM__PEERDNS_MAX && !have; d++)
            have = m->dt[d].live && a[i].len == m->dt[d].a.len && memcmp(&a[i].ss, &m->dt[d].a.ss, a[i].len) == 0;
        unsigned d = 0;
        while (!have && d < PM__PEERDNS_MAX && (m->dt[d].live || m->dial_conn[DNS_TARGET(d)] >= 0))
            d++;
        if (have || d == PM__PEERDNS_MAX)
            continue;
        m->dt[d].live = 1;
        m->dt[d].a = a[i];
        dial(c, DNS_TARGET(d));
    }
}

/* The resolution is done (its eventfd is readable). */
static void dns_ready(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    m->dns_armed = 0;
    pm__peerdns_addr a[PM__PEERDNS_MAX];
    int gai = 0;
    int n = pm__peerdns_take(m->dns, a, PM__PEERDNS_MAX, &gai);
    if (n == -EAGAIN) {
        if (pm__loop_arm(&c->loop, pm__peerdns_fd(m->dns), DNS_TAG) == 0)
            m->dns_armed = 1;
        else
            m->dns_at = pm__now_ms() + PM__PEERDNS_RETRY_MIN_MS;
        return;
    }
    uint64_t now = pm__now_ms();
    if (n < 0) {
        /* Keeps the targets of the last answer: a DNS server that is down
         * for a while does not take the links (or their redials) away. */
        m->dns_failed++;
        fprintf(stderr, "procmesh: peers-dns: %s: %s (attempt %llu; retried with backoff)\n",
                pm__peerdns_name(m->dns), gai != 0 ? gai_strerror(gai) : "no address",
                (unsigned long long)m->dns_failed);
        dns_schedule(m, 0, now);
        return;
    }
    m->dns_ok++;
    dns_merge(c, a, (size_t)n);
    dns_schedule(m, 1, now);
}

void pm__mesh_ready(pm_cluster *c, uint64_t tag)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return;
    if (PM__TAG_KIND(tag) == PM__TAG_PEER_LISTEN) {
        if (PM__TAG_SLOT(tag) == 1) {
            if (m->dns != NULL && m->dns_armed)
                dns_ready(c);
            return;
        }
        on_listen(c);
        return;
    }
    unsigned j = PM__TAG_SLOT(tag);
    if (j >= PM__MESH_CONNS)
        return;
    pm__mconn *k = &m->conns[j];
    if (k->fd < 0 || PM__TAG_INC(tag) != (k->gen & 0xffffffffu))
        return; /* an arm of a connection that is gone or was re-armed */
    k->armed = 0;
    if (k->dialing) {
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
            err = errno;
        if (err == EINPROGRESS || err == EALREADY) {
            conn_arm(c, k);
            return;
        }
        if (err != 0) {
            m->dial_failed++;
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            m->fails[PM__PF_LOCAL]--; /* counted as a failed dial instead */
            conn_close(c, k);
            return;
        }
        k->dialing = 0;
    }
    conn_read(c, k);
    conn_write(k);
    if (k->pc.state == PM__PC_DEAD) {
        conn_close(c, k);
        return;
    }
    conn_arm(c, k);
}

/*
 * Our REKEY (doc/protocol.md 6): after o->rekey_records records or
 * o->rekey_ms, whichever first. The record count is judged here, at the
 * end of each loop turn (a busy turn may pass it by a turn's records), the
 * time by the mesh's deadline. A full output queue delays it briefly; the
 * deadline is moved so that a timer never fires in a loop meanwhile.
 */
static void conn_rekey(pm_cluster *c, pm__mconn *k, uint64_t now)
{
    if (!k->linked || k->pc.state != PM__PC_UP)
        return;
    if (k->pc.records_since_rekey < c->o->rekey_records && now < k->rekey_at_ms)
        return;
    int rc = pm__pconn_rekey(&k->pc);
    k->rekey_at_ms = now + (rc == -EAGAIN ? PM__MESH_REDIAL_MIN_MS : c->o->rekey_ms);
}

void pm__mesh_flush(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return;
    if (m->accept_stalled && m->lfd >= 0) {
        /* Accepting stalled (out of fds without a spare, or of memory):
         * one more try a turn, never a busy loop of its own. */
        spare_reopen(m);
        m->accept_stalled = 0;
        if (!m->lfd_armed && pm__loop_arm(&c->loop, m->lfd, PM__TAG(PM__TAG_PEER_LISTEN, 0, 0)) == 0)
            m->lfd_armed = 1;
    }
    /* The next handshake's ephemeral key pair, made now, after this turn's
     * messages went out: a handshake then spends no time on it (a no-op
     * while one waits; on failure the handshake makes its own). */
    (void)pm__noise_ephemeral_prepare();
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mconn *k = &m->conns[j];
        if (k->fd < 0)
            continue;
        /* The staged frames, sealed now (at the end of a turn and before
         * the loop sleeps): never later, so a lone request is not delayed. */
        if (k->pc_live)
            (void)pm__pconn_flush_stage(&k->pc); /* a failure closes the link */
        conn_rekey(c, k, pm__now_ms());
        conn_write(k);
        /* Writing drains the queue, and the drain hook may stage more (a
         * large message's cursor, held senders' frames read again...). Those
         * frames must not wait past this turn: nothing else may wake the
         * loop (the peer waits for the rest of the message), so they are
         * sealed and written too, while the socket takes them. After 64
         * passes the rest is sealed and queued, and the socket's
         * writability brings the loop back for it. */
        for (int pass = 0; k->pc_live && k->pc.stage_n > 0; pass++) {
            size_t queued;
            (void)pm__pconn_output(&k->pc, &queued);
            if (queued > 0)
                break; /* the socket is full: its writability comes back */
            (void)pm__pconn_flush_stage(&k->pc);
            if (pass == 64)
                break;
            conn_write(k);
        }
        if (k->pc.state == PM__PC_DEAD)
            conn_close(c, k);
        else
            conn_arm(c, k);
    }
}

/* Up: when k must send a HEARTBEAT (a third of the idle time its peer
 * announced, doc/protocol.md 7), and when its silence ends it (our own
 * idle time, the peer timeout). */
static uint64_t heartbeat_at(const pm__mconn *k)
{
    uint32_t idle = k->pc.peer.idle_ms < PM__PEER_IDLE_MIN_MS ? PM__PEER_IDLE_MIN_MS
                                                               : k->pc.peer.idle_ms;
    /* Every heartbeat is an echo, sent when the link is idle and on a busy
     * link as well, so its RTT stays current. */
    uint64_t last = k->last_tx_ms < k->last_ping_ms ? k->last_tx_ms : k->last_ping_ms;
    return last + idle / 3u;
}

static uint64_t silence_at(const pm_cluster *c, const pm__mconn *k)
{
    return k->last_rx_ms + (uint64_t)c->o->peer_timeout_ms;
}

uint64_t pm__mesh_next_deadline(const pm_cluster *c)
{
    const pm__mesh *m = mesh_of(c);
    uint64_t next = 0;
    if (m == NULL)
        return 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        const pm__mconn *k = &m->conns[j];
        uint64_t d[4] = {k->fd >= 0 ? k->deadline_ms : 0, 0, 0, 0};
        if (k->fd >= 0 && k->linked) {
            d[1] = heartbeat_at(k);
            d[2] = silence_at(c, k);
            d[3] = k->rekey_at_ms;
        }
        for (int i = 0; i < 4; i++)
            if (d[i] != 0 && (next == 0 || d[i] < next))
                next = d[i];
    }
    for (int i = 0; i < MESH_TARGETS; i++) {
        uint64_t d = m->redial_at[i];
        if (d != 0 && target_dialable(c, m, i) && (next == 0 || d < next))
            next = d;
    }
    if (m->dns_at != 0 && (next == 0 || m->dns_at < next))
        next = m->dns_at;
    return next;
}

void pm__mesh_fire(pm_cluster *c, uint64_t now)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mconn *k = &m->conns[j];
        if (k->fd >= 0 && k->deadline_ms != 0 && k->deadline_ms <= now) {
            /* The handshake did not finish within the peer timeout. */
            pm__pconn_close(&k->pc, PM__REC_CLOSE_TIMEOUT, PM__PF_TIMEOUT);
            conn_close(c, k);
            continue;
        }
        if (k->fd < 0 || !k->linked)
            continue;
        if (silence_at(c, k) <= now) {
            /* Before judging the peer, read what waits: if this supervisor
             * was the one stopped (SIGSTOP, a suspended VM), the peer's
             * heartbeats are in the socket and the link lives (the stall
             * rule, without a clock of its own). */
            conn_read(c, k);
            if (k->pc.state != PM__PC_DEAD && silence_at(c, k) <= now)
                pm__pconn_close(&k->pc, PM__REC_CLOSE_TIMEOUT, PM__PF_TIMEOUT);
            if (k->pc.state == PM__PC_DEAD) {
                conn_write(k);
                conn_close(c, k);
                continue;
            }
        }
        if (k->rekey_at_ms <= now) {
            conn_rekey(c, k, now);
            conn_write(k);
        }
        if (heartbeat_at(k) <= now) {
            /* Queued counts as sent: a full socket must not make the timer
             * fire again at once. */
            (void)pm__pconn_ping(&k->pc, pm__now_ns() / 1000u);
            k->last_tx_ms = k->last_ping_ms = now;
            conn_write(k);
        }
    }
    for (int i = 0; i < MESH_TARGETS; i++)
        if (m->redial_at[i] != 0 && m->redial_at[i] <= now && m->dial_conn[i] < 0 &&
            target_dialable(c, m, i))
            dial(c, i);
    if (m->dns_at != 0 && m->dns_at <= now)
        dns_resolve(c, now);
}

/* The node key: loaded from its file, created (0600) when missing; or a
 * fresh pair for this start without a file. */
static int load_static(pm_cluster *c, pm__mesh *m, char *why, size_t whysize)
{
    if (c->o->node_key_file == NULL)
        return pm__keyring_random_static(m->keys);
    unsigned char *key = sodium_malloc(PM__PEER_KEY_LEN);
    if (key == NULL)
        return -ENOMEM;
    int rc = pm__peer_key_load(c->o->node_key_file, 0, key, why, whysize);
    if (rc == -ENOENT)
        rc = pm__peer_key_create(c->o->node_key_file, key, why, whysize);
    if (rc == 0)
        rc = pm__keyring_set_static(m->keys, key);
    sodium_free(key);
    return rc;
}

static int listen_on(pm_cluster *c, pm__mesh *m)
{
    struct sockaddr_storage ss;
    socklen_t len;
    int rc = resolve(c->o->peer_listen, 1, &ss, &len);
    if (rc < 0)
        return rc;
    m->lfd = socket(ss.ss_family, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
    if (m->lfd < 0)
        return -errno;
    int one = 1;
    /* A restarted supervisor binds again while old connections linger in
     * TIME_WAIT. */
    (void)setsockopt(m->lfd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    if (bind(m->lfd, (struct sockaddr *)&ss, len) < 0 || listen(m->lfd, 64) < 0)
        return -errno;
    rc = pm__loop_arm(&c->loop, m->lfd, PM__TAG(PM__TAG_PEER_LISTEN, 0, 0));
    if (rc == 0)
        m->lfd_armed = 1;
    spare_reopen(m); /* best effort: without it, accept_starved stalls instead */
    return rc;
}

int pm__mesh_init(pm_cluster *c, char *why, size_t whysize)
{
    char dummy[8];
    if (why == NULL) {
        why = dummy;
        whysize = sizeof(dummy);
    }
    why[0] = '\0';
    pm__mesh *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return -ENOMEM;
    m->lfd = -1;
    m->spare_fd = -1;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        m->conns[j].fd = -1;
    for (size_t i = 0; i < MESH_TARGETS; i++)
        m->dial_conn[i] = -1;
    c->mesh = m;
    int rc;
    void *buf = mmap(NULL, PM__MESH_READ_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (buf == MAP_FAILED) {
        rc = -ENOMEM;
        goto fail;
    }
    (void)madvise(buf, PM__MESH_READ_BUF, MADV_WIPEONFORK);
    m->rbuf = buf;
    if (c->o->keys != NULL)
        m->keys = pm__keyring_dup(c->o->keys);
    else if (pm__keyring_new(&m->keys) < 0)
        m->keys = NULL;
    if (m->keys == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    rc = load_static(c, m, why, whysize);
    if (rc < 0) {
        if (why[0] == '\0')
            snprintf(why, whysize, "node key: %s", strerror(-rc));
        goto fail;
    }
    if (c->o->peer_keys_file != NULL) {
        rc = pm__pins_load(c->o->peer_keys_file, &m->pins, why, whysize);
        if (rc < 0)
            goto fail;
        m->pinned = 1;
    }
    m->cur = calloc(1, sizeof(*m->cur));
    if (m->cur == NULL) {
        rc = -ENOMEM;
        goto fail;
    }
    m->cur->refs = 1;
    m->cur->keys = m->keys;
    m->keys = NULL;
    pm__pconn_cfg *cfg = &m->cur->cfg;
    cfg->system = c->hub.names.system;
    cfg->host = c->hub.names.host;
    uint64_t inc = 0;
    if (getrandom(&inc, sizeof(inc), 0) != (ssize_t)sizeof(inc))
        inc = pm__now_ns();
    cfg->incarnation = inc | 1u;
    cfg->idle_ms = (uint32_t)c->o->peer_timeout_ms;
    cfg->keys = m->cur->keys;
    cfg->pins = m->pinned ? &m->pins : NULL;
    if (c->o->peer_listen[0] != '\0') {
        rc = listen_on(c, m);
        if (rc < 0) {
            snprintf(why, whysize, "peer listen %s: %s", c->o->peer_listen, strerror(-rc));
            goto fail;
        }
    }
    for (size_t i = 0; i < c->o->npeers; i++)
        dial(c, (int)i);
    if (c->o->peers_dns[0] != '\0') {
        rc = pm__peerdns_new(&m->dns, c->o->peers_dns);
        if (rc < 0) {
            snprintf(why, whysize, "peers-dns %s: %s", c->o->peers_dns, strerror(-rc));
            goto fail;
        }
        /* The first answer comes back on the loop: a name that does not
         * resolve yet (pods start in any order) is retried, never fatal.
         * The lookup starts at the first loop turn, not here: pm_cluster_spawn
         * forks its first workers before any turn, and a fork-mode worker
         * forked while the resolver thread is inside the allocator hangs
         * under ASan's allocator (GCC 12's has no fork handlers). Later
         * starts can still meet a lookup (a few ms every 30 s): see
         * doc/design.md "Peers from DNS". */
        m->dns_at = pm__now_ms();
    }
    return 0;
fail:
    pm__mesh_free(c);
    return rc;
}

void pm__mesh_free(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return;
    int saved = errno;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mconn *k = &m->conns[j];
        if (k->fd < 0)
            continue;
        k->peer = -1; /* no redial */
        /* Going away with the cluster: no events, the hub is freed next. */
        if (k->linked) {
            k->linked = 0;
            m->up--;
        }
        if (k->pc_live) {
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            conn_write(k); /* the CLOSE, best effort: never waits */
        }
        conn_close(c, k);
    }
    if (m->lfd >= 0) {
        if (m->lfd_armed)
            pm__loop_disarm(&c->loop, m->lfd, PM__TAG(PM__TAG_PEER_LISTEN, 0, 0));
        pm__close(m->lfd);
    }
    if (m->dns != NULL) {
        if (m->dns_armed)
            pm__loop_disarm(&c->loop, pm__peerdns_fd(m->dns), DNS_TAG);
        pm__peerdns_free(m->dns); /* a lookup still running is abandoned */
    }
    pm__close(m->spare_fd);
    if (m->rbuf != NULL)
        munmap(m->rbuf, PM__MESH_READ_BUF);
    keys_put(m->cur); /* every connection let go of it above */
    if (m->pinned)
        pm__pins_free(&m->pins);
    pm__keyring_free(m->keys);
    free(m);
    c->mesh = NULL;
    errno = saved;
}

void pm__mesh_forget(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return;
    pm__close(m->lfd);
    pm__close(m->spare_fd);
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        pm__close(m->conns[j].fd);
    pm__peerdns_forget(m->dns);
}

unsigned pm__mesh_links_up(const pm_cluster *c)
{
    const pm__mesh *m = mesh_of(c);
    return m == NULL ? 0 : m->up;
}

void pm__mesh_batch_stats(const pm_cluster *c, uint64_t *frames, uint64_t *records,
                          uint64_t *staged)
{
    const pm__mesh *m = mesh_of(c);
    *frames = *records = *staged = 0;
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++) {
        const pm__mconn *k = &m->conns[j];
        if (k->fd < 0 || !k->pc_live)
            continue;
        *frames += k->pc.frames_out;
        *records += k->pc.frame_records_out;
        *staged += k->pc.stage_n;
    }
}

void pm__mesh_test_truncate(pm_cluster *c)
{
    pm__mesh *m = mesh_of(c);
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked)
            (void)pm__pconn_eof(&m->conns[j].pc);
}

/* New secrets for the handshakes to come (pm_cluster_set_secrets): a new
 * keyring with the same static key, a new generation; the old one is freed
 * when its last connection closes. */
int pm__mesh_set_secrets(pm_cluster *c, const unsigned char *keys, unsigned n)
{
    pm__mesh *m = mesh_of(c);
    if (m == NULL || m->cur == NULL)
        return -ENOTCONN;
    unsigned had = pm__keyring_nsecrets(m->cur->keys);
    /* The mode (XXpsk3 or XX without a secret) is chosen at start: a
     * reload that would switch it is a mistake, never a downgrade. */
    if (keys == NULL || n == 0 || n > PM__PEER_MAX_SECRETS || had == 0)
        return -EINVAL;
    pm__mkeys *g = calloc(1, sizeof(*g));
    if (g == NULL)
        return -ENOMEM;
    int rc = pm__keyring_new(&g->keys);
    for (unsigned i = 0; rc == 0 && i < n; i++)
        rc = pm__keyring_add_secret(g->keys, keys + (size_t)i * PM__PEER_KEY_LEN);
    if (rc == 0)
        rc = pm__keyring_set_static(g->keys, pm__keyring_static_priv(m->cur->keys));
    if (rc < 0) {
        pm__keyring_free(g->keys);
        free(g);
        return rc;
    }
    g->cfg = m->cur->cfg;
    g->cfg.keys = g->keys;
    g->refs = 1;
    keys_put(m->cur);
    m->cur = g;
    m->key_reloads++;
    return 0;
}

PM_EXTERN int pm_cluster_set_secrets(pm_cluster *c, const unsigned char *keys, unsigned n)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__mesh_set_secrets(c, keys, n);
}

void pm__mesh_rekeys(const pm_cluster *c, uint64_t *out, uint64_t *in)
{
    const pm__mesh *m = mesh_of(c);
    *out = *in = 0;
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].pc_live) {
            *out += m->conns[j].pc.rekeys_out;
            *in += m->conns[j].pc.rekeys_in;
        }
}

void pm__mesh_dns_stats(const pm_cluster *c, uint64_t *ok, uint64_t *failed, unsigned *targets)
{
    const pm__mesh *m = mesh_of(c);
    *ok = m == NULL ? 0 : m->dns_ok;
    *failed = m == NULL ? 0 : m->dns_failed;
    *targets = 0;
    for (unsigned d = 0; m != NULL && d < PM__PEERDNS_MAX; d++)
        *targets += m->dt[d].live && !m->dt[d].self;
}

uint64_t pm__mesh_fails(const pm_cluster *c, int why)
{
    const pm__mesh *m = mesh_of(c);
    return m == NULL || why < 0 || why >= PM__PF_COUNT_ ? 0 : m->fails[why];
}

/* The public view of connection k. */
static void conn_info(const pm__hub *h, const pm__mconn *k, uint64_t now, pm_peer_info *out)
{
    memset(out, 0, sizeof(*out));
    out->initiator = k->pc.initiator;
    out->state = k->dialing ? "connecting" : k->linked ? "up" : "handshake";
    if (k->pc.state >= PM__PC_SPLIT) {
        snprintf(out->host, sizeof(out->host), "%s", k->pc.peer.host);
        out->incarnation = k->pc.peer.incarnation;
    }
    out->rtt_us = k->rtt_us;
    out->age_ms = now >= k->since_ms ? now - k->since_ms : 0;
    out->frames_in = k->pc.frames_in;
    out->frames_out = k->pc.frames_out;
    out->bytes_in = k->pc.bytes_in;
    out->bytes_out = k->pc.bytes_out;
    out->records_in = k->pc.frame_records_in;
    out->records_out = k->pc.frame_records_out;
    if (k->linked && k->host >= 0)
        pm__hub_link_drops(h, (uint16_t)k->host, &out->frames_forged, &out->frames_malformed);
}

PM_EXTERN int pm_cluster_peers(const pm_cluster *c, pm_peer_info *out, size_t cap)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (out == NULL && cap > 0)
        return -EINVAL;
    const pm__mesh *m = mesh_of(c);
    if (m == NULL)
        return 0;
    uint64_t now = pm__now_ms();
    size_t n = 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        const pm__mconn *k = &m->conns[j];
        if (k->fd < 0 || !k->pc_live)
            continue;
        if (n < cap)
            conn_info(&c->hub, k, now, &out[n]);
        n++;
    }
    return (int)n;
}

PM_EXTERN int pm_cluster_peer_failures(const pm_cluster *c, const char **names, uint64_t *counts,
                                       size_t cap)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if ((names == NULL || counts == NULL) && cap > 0)
        return -EINVAL;
    if (mesh_of(c) == NULL)
        return 0; /* not in peer mode: no reasons to report */
    /* PM__PF_NONE is not a reason. */
    size_t n = 0;
    for (int why = PM__PF_NONE + 1; why < PM__PF_COUNT_; why++, n++) {
        if (n < cap) {
            names[n] = pm__peer_fail_name(why);
            counts[n] = pm__mesh_fails(c, why);
        }
    }
    return (int)n;
}
