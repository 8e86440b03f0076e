/* SPDX-License-Identifier: MIT */
/* mesh.c - the supervisor's peer links as one object: started and freed with the cluster, its loop completions dispatched, its timers, the end of a loop turn, its counters and the public calls that read them. */
#define _GNU_SOURCE
#include "mesh.h"
#include "mesh_int.h"

#include <fcntl.h>
#include <netdb.h>
#include <poll.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "os/dep_sodium.h"
#include "os/deps.h"
#include <sys/mman.h>
#include <sys/random.h>
#include <sys/socket.h>


void pm__mesh_ready(pm__mesh *m, uint64_t tag)
{
    if (m == NULL)
        return;
    if (PM__TAG_KIND(tag) == m->env.tag_listen) {
        if (PM__TAG_SLOT(tag) == 1) {
            if (m->dns != NULL && m->dns_armed)
                pm__mesh_dns_ready(m);
            return;
        }
        pm__mesh_on_listen(m);
        return;
    }
    unsigned j = PM__TAG_SLOT(tag);
    if (j >= PM__MESH_CONNS)
        return;
    pm__mesh_conn *k = &m->conns[j];
    if (k->fd < 0 || PM__TAG_INC(tag) != (k->gen & 0xffffffffu))
        return; /* an arm of a connection that is gone or was re-armed */
    k->armed = 0;
    if (k->lingering) {
        if (pm__mesh_conn_linger(m, k))
            pm__mesh_conn_release(m, k);
        else
            pm__mesh_conn_arm(m, k);
        return;
    }
    if (k->dialing) {
        /* A dialing connection is armed for writability alone, and a
         * connecting TCP socket polls writable only once connected or
         * failed (tcp_poll): SO_ERROR holds 0 or the connect's error here,
         * never EINPROGRESS (the completions of earlier arms, a removal's
         * included, were turned away by the generation above). */
        int err = 0;
        socklen_t el = sizeof(err);
        if (getsockopt(k->fd, SOL_SOCKET, SO_ERROR, &err, &el) < 0)
            err = errno;
        if (err != 0) {
            pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
            m->fails[PM__PF_LOCAL]--; /* a dial that failed is no connection's end: its redial is due */
            pm__mesh_conn_close(m, k);
            return;
        }
        k->dialing = 0;
    }
    pm__mesh_conn_read(m, k);
    pm__mesh_conn_write(k);
    if (k->pc.state == PM__PC_DEAD) {
        pm__mesh_conn_close(m, k);
        return;
    }
    pm__mesh_conn_arm(m, k);
}

void pm__mesh_flush(pm__mesh *m)
{
    if (m == NULL)
        return;
    if (m->accept_stalled && m->lfd >= 0) {
        /* Accepting stalled (out of fds without a reserve fd, or of memory):
         * one more try a turn, never a busy loop of its own. */
        pm__mesh_reserve_fd_reopen(m);
        m->accept_stalled = 0;
        if (!m->lfd_armed && pm__loop_arm(m->env.loop, m->lfd, LISTEN_TAG(m)) == 0)
            m->lfd_armed = 1;
    }
    /* The next handshake's ephemeral key pair, made now, after this turn's
     * messages went out: a handshake then spends no time on it (a no-op
     * while one waits; on failure the handshake makes its own). */
    (void)pm__noise_ephemeral_prepare();
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *k = &m->conns[j];
        if (k->fd < 0 || k->lingering)
            continue; /* a lingering one is armed for what it waits for */
        /* The staged frames, sealed now (at the end of a turn and before
         * the loop sleeps): never later, so a lone request is not delayed. */
        (void)pm__pconn_flush_stage(&k->pc); /* a failure closes the link */
        pm__mesh_conn_rekey(m, k, pm__now_ms());
        pm__mesh_conn_write(k);
        /* Writing drains the queue, and the drain hook may stage more (a
         * large message's cursor, held senders' frames read again...). Those
         * frames must not wait past this turn: nothing else may wake the
         * loop (the peer waits for the rest of the message), so they are
         * sealed and written too, while the socket takes them. After 64
         * passes the rest is sealed and queued, and the socket's
         * writability brings the loop back for it. */
        for (int pass = 0; k->pc.stage_n > 0; pass++) {
            size_t queued;
            (void)pm__pconn_output(&k->pc, &queued);
            if (queued > 0)
                break; /* the socket is full: its writability comes back */
            (void)pm__pconn_flush_stage(&k->pc);
            if (pass == 64)
                break;
            pm__mesh_conn_write(k);
        }
        if (k->pc.state == PM__PC_DEAD)
            pm__mesh_conn_close(m, k);
        else
            pm__mesh_conn_arm(m, k);
    }
}

uint64_t pm__mesh_next_deadline(const pm__mesh *m)
{
    uint64_t next = 0;
    if (m == NULL)
        return 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        const pm__mesh_conn *k = &m->conns[j];
        uint64_t d[4] = {k->fd >= 0 ? k->deadline_ms : 0, 0, 0, 0};
        if (k->fd >= 0 && k->linked) {
            d[1] = pm__mesh_conn_heartbeat_at(k);
            d[2] = pm__mesh_conn_silence_at(m, k);
            d[3] = k->rekey_at_ms;
        }
        for (int i = 0; i < 4; i++)
            if (d[i] != 0 && (next == 0 || d[i] < next))
                next = d[i];
    }
    for (int i = 0; i < MESH_TARGETS; i++) {
        uint64_t d = m->redial_at[i];
        if (d != 0 && pm__mesh_target_dialable(m, i) && (next == 0 || d < next))
            next = d;
    }
    if (m->dns_at != 0 && (next == 0 || m->dns_at < next))
        next = m->dns_at;
    uint64_t flush = pm__faillog_next(&m->refused);
    if (flush != 0 && (next == 0 || flush < next))
        next = flush;
    return next;
}

void pm__mesh_fire(pm__mesh *m, uint64_t now)
{
    if (m == NULL)
        return;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *k = &m->conns[j];
        if (k->fd >= 0 && k->lingering) {
            if (k->deadline_ms <= now) {
                /* The peer never answered our CLOSE nor ended its stream. */
                m->linger_expired++;
                pm__mesh_conn_release(m, k);
            }
            continue;
        }
        if (k->fd >= 0 && k->deadline_ms != 0 && k->deadline_ms <= now) {
            /* The handshake did not finish within the peer timeout. */
            pm__pconn_close(&k->pc, PM__REC_CLOSE_TIMEOUT, PM__PF_TIMEOUT);
            pm__mesh_conn_close(m, k);
            continue;
        }
        if (k->fd < 0 || !k->linked)
            continue;
        if (pm__mesh_conn_silence_at(m, k) <= now) {
            /* Before judging the peer, read what waits: if this supervisor
             * was the one stopped (SIGSTOP, a suspended VM), the peer's
             * heartbeats are in the socket and the link lives (the stall
             * rule, without a clock of its own). */
            pm__mesh_conn_read(m, k);
            if (k->pc.state != PM__PC_DEAD && pm__mesh_conn_silence_at(m, k) <= now)
                pm__pconn_close(&k->pc, PM__REC_CLOSE_TIMEOUT, PM__PF_TIMEOUT);
            if (k->pc.state == PM__PC_DEAD) {
                pm__mesh_conn_write(k);
                pm__mesh_conn_close(m, k);
                continue;
            }
        }
        if (k->rekey_at_ms <= now) {
            pm__mesh_conn_rekey(m, k, now);
            pm__mesh_conn_write(k);
        }
        if (pm__mesh_conn_heartbeat_at(k) <= now) {
            /* Queued counts as sent: a full socket must not make the timer
             * fire again at once. */
            (void)pm__pconn_ping(&k->pc, pm__now_ns() / 1000u);
            k->last_ping_ms = now;
            pm__mesh_conn_write(k);
        }
    }
    for (int i = 0; i < MESH_TARGETS; i++)
        if (m->redial_at[i] != 0 && m->redial_at[i] <= now && m->dial_conn[i] < 0 &&
            pm__mesh_target_dialable(m, i))
            pm__mesh_dial(m, i);
    if (m->dns_at != 0 && m->dns_at <= now)
        pm__mesh_dns_resolve(m, now);
    pm__mesh_refused_flush(m, now);
}

/* The node key: loaded from its file, created (0600) when missing; or a
 * fresh pair for this start without a file. */
static int load_static(pm__mesh *m, char *why, size_t whysize)
{
    if (m->env.cfg.node_key_file == NULL)
        return pm__keyring_random_static(m->keys);
    unsigned char *key = sodium_malloc(PM__PEER_KEY_LEN);
    if (key == NULL)
        return -ENOMEM;
    int rc = pm__peer_key_load(m->env.cfg.node_key_file, 0, key, why, whysize);
    if (rc == -ENOENT) {
        /* The load's "cannot open" is no failure once the file is made:
         * left in why, it would name the cause of a later one. */
        why[0] = '\0';
        rc = pm__peer_key_create(m->env.cfg.node_key_file, key, why, whysize);
    }
    if (rc == 0)
        rc = pm__keyring_set_static(m->keys, key);
    sodium_free(key);
    return rc;
}

/* The mesh with nothing open yet (every fd -1) and its receive buffer,
 * which a forked worker never sees (MADV_WIPEONFORK). NULL: no memory. */
static pm__mesh *mesh_new(const pm__mesh_env *env)
{
    pm__mesh *m = calloc(1, sizeof(*m));
    if (m == NULL)
        return NULL;
    m->lfd = -1;
    m->reserve_fd = -1;
    m->linger_ms = PM__MESH_LINGER_MS;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        m->conns[j].fd = -1;
    for (size_t i = 0; i < MESH_TARGETS; i++)
        m->dial_conn[i] = -1;
    m->env = *env;
    void *buf = mmap(NULL, PM__MESH_READ_BUF, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (buf == MAP_FAILED) {
        free(m);
        return NULL;
    }
    (void)madvise(buf, PM__MESH_READ_BUF, MADV_WIPEONFORK);
    m->rbuf = buf;
    return m;
}

/* The keys' first generation: the secrets, the node key, the pins, and
 * the handshake configuration every connection starts from. */
static int keys_setup(pm__mesh *m, char *why, size_t whysize)
{
    if (m->env.cfg.keys != NULL)
        m->keys = pm__keyring_dup(m->env.cfg.keys);
    else if (pm__keyring_new(&m->keys) < 0)
        m->keys = NULL;
    if (m->keys == NULL)
        return -ENOMEM;
    int rc = load_static(m, why, whysize);
    if (rc < 0) {
        if (why[0] == '\0')
            snprintf(why, whysize, "node key: %s", strerror(-rc));
        return rc;
    }
    if (m->env.cfg.peer_keys_file != NULL) {
        rc = pm__pins_load(m->env.cfg.peer_keys_file, &m->pins, why, whysize);
        if (rc < 0)
            return rc;
        m->pinned = 1;
    }
    m->cur = calloc(1, sizeof(*m->cur));
    if (m->cur == NULL)
        return -ENOMEM;
    m->cur->refs = 1;
    m->cur->keys = m->keys;
    m->keys = NULL;
    pm__pconn_cfg *cfg = &m->cur->cfg;
    cfg->system = pm__hub_names(m->env.hub)->system;
    cfg->host = pm__hub_names(m->env.hub)->host;
    uint64_t inc = 0;
    if (getrandom(&inc, sizeof(inc), 0) != (ssize_t)sizeof(inc))
        inc = pm__now_ns();
    cfg->incarnation = inc | 1u;
    cfg->idle_ms = (uint32_t)m->env.cfg.timeout_ms;
    cfg->keys = m->cur->keys;
    cfg->pins = m->pinned ? &m->pins : NULL;
    return 0;
}

/* The listener, the configured peers dialled, --peers-dns to resolve. */
static int links_start(pm__mesh *m, char *why, size_t whysize)
{
    const pm__mesh_cfg *cfg = &m->env.cfg;
    if (cfg->listen[0] != '\0') {
        int rc = pm__mesh_listen_on(m);
        if (rc < 0) {
            snprintf(why, whysize, "peer listen %s: %s", cfg->listen, strerror(-rc));
            return rc;
        }
    }
    for (size_t i = 0; i < cfg->npeers; i++)
        pm__mesh_dial(m, (int)i);
    if (cfg->peers_dns[0] != '\0') {
        int rc = pm__peerdns_new(&m->dns, cfg->peers_dns);
        if (rc < 0) {
            snprintf(why, whysize, "peers-dns %s: %s", cfg->peers_dns, strerror(-rc));
            return rc;
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
}

int pm__mesh_init(pm__mesh **out, const pm__mesh_env *env, char *why, size_t whysize)
{
    char dummy[8];
    if (why == NULL) {
        why = dummy;
        whysize = sizeof(dummy);
    }
    why[0] = '\0';
    /* libsodium is loaded on first use (os/deps.h): without it no link can
     * be made, and the reason says which library and why. */
    int rc = pm__dep_load(PM__DEP_SODIUM, why, whysize);
    if (rc < 0)
        return rc;
    pm__mesh *m = mesh_new(env);
    if (m == NULL)
        return -ENOMEM;
    rc = keys_setup(m, why, whysize);
    if (rc == 0)
        rc = links_start(m, why, whysize);
    if (rc < 0) {
        pm__mesh_free(m);
        return rc;
    }
    *out = m;
    return 0;
}

/*
 * The cluster is going away: the connections that sent their CLOSE wait
 * together, without the loop, for their peers' CLOSE or end of stream, at
 * most min(peer timeout, m->linger_ms) in all; then every fd is
 * closed. A procmesh peer answers at once (its loop reads our CLOSE); a
 * peer that is stopped or gone costs that bound once, not per link.
 */
static void linger_all(pm__mesh *m)
{
    uint64_t end = 0;
    for (;;) {
        struct pollfd pf[PM__MESH_CONNS];
        nfds_t n = 0;
        for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
            pm__mesh_conn *k = &m->conns[j];
            if (k->fd < 0 || !k->lingering) /* every open one lingers by now */
                continue;
            if (pm__mesh_conn_linger(m, k)) {
                pm__mesh_conn_release(m, k);
                continue;
            }
            if (end == 0 || k->deadline_ms < end)
                end = k->deadline_ms;
            size_t queued;
            (void)pm__pconn_output(&k->pc, &queued);
            pf[n].fd = k->fd;
            pf[n].events = (short)((k->linger_done ? 0 : POLLIN) | (queued > 0 ? POLLOUT : 0));
            pf[n].revents = 0;
            n++;
        }
        uint64_t now = pm__now_ms();
        if (n == 0 || now >= end)
            break;
        if (poll(pf, n, (int)(end - now)) < 0 && errno != EINTR)
            break;
    }
    /* The bound passed, or poll failed (nothing counted: the mesh is
     * freed next). */
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *k = &m->conns[j];
        if (k->fd >= 0 && k->lingering)
            pm__mesh_conn_release(m, k);
    }
}

void pm__mesh_free(pm__mesh *m)
{
    if (m == NULL)
        return;
    int saved = errno;
    m->freeing = 1;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *k = &m->conns[j];
        if (k->fd < 0)
            continue;
        /* Its loop arm stays until pm__mesh_conn_release removes it: no
         * completion is taken from here on (the loop does not run), and a
         * lingering one is waited for below, without the loop. */
        if (k->lingering)
            continue;
        /* Going away with the cluster: the link is reported down (the
         * daemon logs peer_down at shutdown, as procmesh(1) says), but the
         * hub is not called: it is freed next, with what it holds. */
        if (k->linked) {
            k->linked = 0;
            pm__mesh_conn_report_down(m, k, PM__PF_LOCAL);
        }
        pm__pconn_close(&k->pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
        pm__mesh_conn_write(k); /* the CLOSE, best effort: never waits */
        pm__mesh_conn_close(m, k);
    }
    linger_all(m);
    if (m->lfd >= 0) {
        if (m->lfd_armed)
            pm__loop_disarm(m->env.loop, m->lfd, LISTEN_TAG(m));
        /* Stops listening now: the io_uring's poll holds the socket open
         * past this close until the ring's teardown, which the kernel
         * finishes in a worker after the loop is freed, and meanwhile a
         * new listener on the address (a cluster spawned again at once)
         * would be refused with EADDRINUSE. A socket no longer listening
         * does not stand in the way of an SO_REUSEADDR bind. */
        (void)shutdown(m->lfd, SHUT_RDWR);
        pm__close(m->lfd);
    }
    if (m->dns != NULL) {
        if (m->dns_armed)
            pm__loop_disarm(m->env.loop, pm__peerdns_fd(m->dns), DNS_TAG(m));
        pm__peerdns_free(m->dns); /* a lookup still running is abandoned */
    }
    pm__close(m->reserve_fd);
    /* The removals of the polls disarmed above, submitted now: each poll
     * holds its socket open past the close until its removal is
     * processed, and the loop may not turn again (watch.c does the same). */
    (void)pm__loop_flush(m->env.loop);
    if (m->rbuf != NULL)
        munmap(m->rbuf, PM__MESH_READ_BUF);
    pm__mkeys_put(m->cur); /* every connection let go of it above */
    if (m->pinned)
        pm__pins_free(&m->pins);
    pm__keyring_free(m->keys);
    free(m);
    errno = saved;
}

PM__READY_TEXT void pm__mesh_forget(pm__mesh *m)
{
    if (m == NULL)
        return;
    pm__close(m->lfd);
    pm__close(m->reserve_fd);
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        pm__close(m->conns[j].fd);
    pm__peerdns_forget(m->dns);
}

/* New secrets for the handshakes to come (pm_cluster_set_secrets): a new
 * keyring with the same static key, a new generation; the old one is freed
 * when its last connection closes. */
int pm__mesh_set_secrets(pm__mesh *m, const unsigned char *keys, unsigned n)
{
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
    pm__mkeys_put(m->cur);
    m->cur = g;
    m->key_reloads++;
    return 0;
}

uint64_t pm__mesh_fails(const pm__mesh *m, int why)
{
    return m == NULL || why < 0 || why >= PM__PF_COUNT_ ? 0 : m->fails[why];
}

/* The public view of connection k. */
static void conn_info(const pm__hub *h, const pm__mesh_conn *k, uint64_t now, pm_peer_info *out)
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
    if (k->linked)
        pm__hub_link_drops(h, (uint16_t)k->host, &out->frames_forged, &out->frames_malformed);
}

size_t pm__mesh_peers(const pm__mesh *m, pm_peer_info *out, size_t cap)
{
    if (m == NULL)
        return 0;
    uint64_t now = pm__now_ms();
    size_t n = 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        const pm__mesh_conn *k = &m->conns[j];
        if (k->fd < 0 || k->lingering)
            continue; /* a lingering connection is no link any more */
        if (n < cap)
            conn_info(m->env.hub, k, now, &out[n]);
        n++;
    }
    return n;
}
