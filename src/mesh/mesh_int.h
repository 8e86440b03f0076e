/* SPDX-License-Identifier: MIT */
/* mesh_int.h - what the mesh's files share: the mesh's and a connection's state, and the calls between accepting (mesh_accept.c), dialing (mesh_dial.c), a connection's life (mesh_conn.c) and the mesh as a whole (mesh.c). */
#ifndef PM_MESH_INT_H
#define PM_MESH_INT_H

#include <stdint.h>
#include <sys/socket.h>

#include "faillog.h"
#include "hub/hub.h"
#include "mesh_env.h"
#include "os/loop.h"
#include "peer/peer.h"
#include "peer/peerdns.h"

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

typedef struct pm__mesh_conn {
    pm__mesh *m;            /* its mesh */
    pm__mkeys *kg;          /* its keys' generation, NULL before it starts */
    int fd;                 /* -1: a free entry */
    uint32_t gen;           /* in its loop tags; bumped on every re-arm */
    unsigned armed;         /* PM__LOOP_IN/OUT of the outstanding arm, 0 none */
    int dialing;            /* a non-blocking connect in progress */
    int peer;               /* the target it dialled (below), or -1 (accepted) */
    int linked;             /* up and the hub's port for host */
    int host;               /* the hub's index for its host, read only while linked (set with it) */
    /* Whom it talks to: the address dialled, or the source accepted;
     * kept from the start, since a connection the peer reset has no
     * peer name left to ask the kernel for (getpeername: ENOTCONN). */
    struct sockaddr_storage addr;
    uint64_t deadline_ms;   /* the handshake's (0 once up) */
    uint64_t since_ms;
    uint64_t last_rx_ms;    /* up: bytes last received (the silence timeout) */
    uint64_t rekey_at_ms;   /* up: our next REKEY is due by time */
    uint64_t last_ping_ms;  /* up: the last heartbeat echo sent (the RTT, also when busy) */
    uint64_t pongs_seen;    /* pc.pongs when the RTT was last taken */
    int64_t rtt_us;         /* -1: none yet */
    pm__pconn pc;           /* its peer state: made before fd is set, freed on release */
    /* The orderly end (pm__mesh_conn_close): the link is gone, the fd waits
     * for the peer's CLOSE or end of stream until deadline_ms. */
    int lingering;
    int shut_wr;            /* our writing half is shut down */
    int linger_done;        /* the peer's CLOSE, end of stream or an error seen */
} pm__mesh_conn;

/* What a connection dials, its "target": 0..npeers-1 the configured peers,
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
    pm__mesh_env env;       /* its loop, hub, configuration and owner */
    pm__keyring *keys;      /* at start, until it moves into cur */
    pm__pins pins;
    int pinned;
    pm__mkeys *cur;         /* the keys new connections use */
    uint64_t key_reloads;
    int lfd;
    int lfd_armed;
    int reserve_fd;          /* /dev/null, given up to accept-and-close when out of fds */
    int accept_stalled;      /* accepting failed for lack of fds or memory: re-armed at the next flush */
    pm__mesh_rate rate;      /* the per-source handshake rate limit */
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
    pm__faillog refused;            /* the rate limit of PM_EVENT_PEER_REFUSED */
    unsigned up;
    int freeing;                    /* pm__mesh_free: no loop arms from here */
    /* Orderly ends: connections that lingered after our CLOSE, of those
     * whose peer answered with its CLOSE, whose deadline ended the wait,
     * and the frames that arrived after our CLOSE (discarded). */
    uint64_t lingered, closes_answered, linger_expired, linger_discarded;
    /* The linger's bound beside the peer timeout: PM__MESH_LINGER_MS, set
     * by mesh_new (a test makes it long, so that only what the peer does
     * can end a wait: internals.h pm_test_mesh_set_linger_ms). */
    uint64_t linger_ms;
    /* Last: a walk one past its end reads past the allocation (calloc'd
     * in mesh_new), which the sanitizer build reports; inside the struct
     * it would read the next field unseen. */
    pm__mesh_conn conns[PM__MESH_CONNS];
};

/* The --peers-dns address target i stands for, or NULL (a configured peer). */
static inline pm__dtarget *pm__mesh_dns_target(pm__mesh *m, int i)
{
    return i >= PM__MAX_PEERS && i < MESH_TARGETS ? &m->dt[i - PM__MAX_PEERS] : NULL;
}

/* The listener's loop tag, and the --peers-dns resolution's: the listen
 * kind, slots 0 and 1. */
#define LISTEN_TAG(m) PM__TAG((m)->env.tag_listen, 0, 0)
#define DNS_TAG(m) PM__TAG((m)->env.tag_listen, 1, 0)

/* mesh_conn.c: one connection. */
void pm__mkeys_put(pm__mkeys *g);
pm__mesh_conn *pm__mesh_conn_new(pm__mesh *m, int fd, int peer, int initiator,
                                 const struct sockaddr_storage *addr);
void pm__mesh_conn_arm(pm__mesh *m, pm__mesh_conn *k);
void pm__mesh_conn_read(pm__mesh *m, pm__mesh_conn *k);
void pm__mesh_conn_write(pm__mesh_conn *k);
void pm__mesh_conn_close(pm__mesh *m, pm__mesh_conn *k);
/* PM_EVENT_PEER_DOWN for k, reason why (pm__mesh_free: no hub call). */
void pm__mesh_conn_report_down(pm__mesh *m, const pm__mesh_conn *k, int why);
/* A connection from (or to, with_port) ss ended before its link came up,
 * for reason why: counted in PM_EVENT_PEER_REFUSED, rate-limited. host is
 * the name its hello gave, or NULL. */
void pm__mesh_refused(pm__mesh *m, const struct sockaddr_storage *ss, int with_port, int why,
                      const char *host);
/* The refused-connection lines whose window ended with failures held back
 * (faillog.h), reported at now. */
void pm__mesh_refused_flush(pm__mesh *m, uint64_t now);
void pm__mesh_conn_release(pm__mesh *m, pm__mesh_conn *k);
/* One step of a lingering connection's I/O: 1 when it is done (release it). */
int pm__mesh_conn_linger(pm__mesh *m, pm__mesh_conn *k);
void pm__mesh_conn_rekey(pm__mesh *m, pm__mesh_conn *k, uint64_t now);
uint64_t pm__mesh_conn_heartbeat_at(const pm__mesh_conn *k);
uint64_t pm__mesh_conn_silence_at(const pm__mesh *m, const pm__mesh_conn *k);
/* b ms +-25 %. */
uint64_t pm__mesh_jittered(uint32_t b, uint64_t now);
/* The backoff after b (pure): min after none (0), then doubling, capped at
 * max; for the redials and the --peers-dns retries alike. */
uint32_t pm__mesh_backoff_next(uint32_t b, uint32_t min, uint32_t max);
/* The next redial of target peer, after its backoff. */
void pm__mesh_schedule_redial(pm__mesh *m, int peer, uint64_t now);

/* mesh_dial.c: targets, dialing, redial, --peers-dns. */
int pm__mesh_resolve(const char *addr, int passive, struct sockaddr_storage *ss, socklen_t *len);
int pm__mesh_target_dialable(const pm__mesh *m, int i);
void pm__mesh_dial(pm__mesh *m, int i);
void pm__mesh_dns_resolve(pm__mesh *m, uint64_t now);
void pm__mesh_dns_ready(pm__mesh *m);
/* Takes the answer a[0..n): targets no longer in it stop being dialled (a
 * link up to one stays, as a link of its own), new addresses take a free
 * target each and are dialled at once. */
void pm__mesh_dns_merge(pm__mesh *m, const pm__peerdns_addr *a, size_t n);

/* mesh_accept.c: the listener. */
int pm__mesh_listen_on(pm__mesh *m);
void pm__mesh_on_listen(pm__mesh *m);
void pm__mesh_reserve_fd_reopen(pm__mesh *m);

#endif /* PM_MESH_INT_H */
