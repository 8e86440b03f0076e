/* SPDX-License-Identifier: MIT */
/* mesh_env.h - what the mesh is given (pm__mesh_env: its loop, hub, configuration and owner; pm__mesh_ops: what it reports up) and its fixed bounds, shared by the mesh's files and its owner without the mesh's calls. */
#ifndef PM_MESH_ENV_H
#define PM_MESH_ENV_H

#include <stddef.h>
#include <stdint.h>

#include "base/internal.h"

/* Peer links: "HOST:PORT" (a DNS name of up to 253 bytes, or [IPv6]) and
 * the number of --peers. */
#define PM__PEER_ADDR_MAX 264
#define PM__MAX_PEERS 64

/* Connections at once (linked, handshaking and dialing together), and of
 * those, accepted ones not yet authenticated: past it the oldest is cut. */
#define PM__MESH_CONNS 64u
#define PM__MESH_UNAUTH_MAX 16u
/* Bytes read from one connection per readiness (a busy link yields to the
 * rest of the loop), in reads of the buffer's size. */
#define PM__MESH_READ_BUF 65536u
#define PM__MESH_READS_PER_TURN 4u
/* Redialling a configured peer: from MIN doubling to MAX, +-25 % jitter. */
#define PM__MESH_REDIAL_MIN_MS 100u
#define PM__MESH_REDIAL_MAX_MS 5000u
/* An orderly end waits for the peer's CLOSE at most this long (and at most
 * the peer timeout): doc/protocol.md 7. */
#define PM__MESH_LINGER_MS 1000u

/*
 * The per-source handshake rate limit: a token bucket per source address
 * (an IPv6 source by its /64, what one host is usually given), BURST
 * connections at once and PER_S a second after that; a connection past it
 * is accepted and closed at once, before anything is allocated for it.
 * The table is fixed (SOURCES entries, the least recently seen evicted):
 * its memory does not grow with the sources a flood uses. A flood from
 * more sources than the table holds can evict its own entries and get
 * fresh bursts; that is what the bound on unauthenticated connections
 * (the oldest cut) is for. The table keeps one noisy source from filling
 * those slots while others try to link.
 */
#define PM__MESH_RATE_SOURCES 64u
#define PM__MESH_RATE_BURST 32u
#define PM__MESH_RATE_PER_S 8u

typedef struct pm__mesh_rate_src {
    unsigned char addr[16];  /* IPv4 as ::ffff:a.b.c.d; IPv6 its /64, the rest 0 */
    uint32_t mtokens;        /* thousandths of a handshake */
    uint64_t last_ms;        /* 0: a free entry */
} pm__mesh_rate_src;

typedef struct pm__mesh_rate {
    pm__mesh_rate_src src[PM__MESH_RATE_SOURCES];
} pm__mesh_rate;

/* Pure: may a handshake from addr start at now_ms (now_ms > 0)? 1 (a token
 * taken) or 0 (refused). */
int pm__mesh_rate_take(pm__mesh_rate *t, const unsigned char addr[16], uint64_t now_ms);

struct sockaddr_storage;
/* Pure: the rate limit's source of an accepted connection, as addr above:
 * an IPv4 host and a v4-mapped IPv6 one are the same source; any other
 * IPv6 source is its /64 (a host holds a /64, and counting each of its
 * 2^64 addresses apart would give each connection a fresh bucket); any
 * other family is all zero. */
void pm__mesh_rate_key(const struct sockaddr_storage *ss, unsigned char key[16]);

typedef struct pm__mesh pm__mesh;
struct pm__loop;
struct pm__hub;
struct pm__keyring;

/* What the mesh is configured with, filled by its owner from the options.
 * The strings and the peers point into memory that outlives the mesh. */
typedef struct pm__mesh_cfg {
    const char *listen;             /* "HOST:PORT" to listen on, "" none */
    const char (*peers)[PM__PEER_ADDR_MAX]; /* the configured peers, npeers of them */
    size_t npeers;
    const char *peers_dns;          /* a name whose addresses are dialled, "" none */
    const struct pm__keyring *keys; /* the secrets (copied at init), NULL none */
    const char *node_key_file;      /* NULL: a fresh key pair for this start */
    const char *peer_keys_file;     /* NULL: no pinning */
    int timeout_ms;                 /* the peer timeout */
    uint64_t rekey_records;         /* a link's REKEY: after this many records */
    uint64_t rekey_ms;              /* or this long, whichever first */
} pm__mesh_cfg;

/* What the mesh reports to its owner. Neither call may free the mesh. */
typedef struct pm__mesh_ops {
    /* A peer event for the application: PM_EVENT_PEER_UP, _PEER_DOWN (also
     * from pm__mesh_free) or _PEER_REFUSED (rate-limited already). */
    void (*event)(void *owner, const pm_event *ev);
    /* A diagnostic (topic, the message formatted). */
    void (*diag)(void *owner, const char *topic, const char *msg);
} pm__mesh_ops;

/* The mesh's environment, copied by pm__mesh_init. */
typedef struct pm__mesh_env {
    struct pm__loop *loop;
    struct pm__hub *hub;            /* a link that is up is the port of its host */
    pm__mesh_cfg cfg;
    /* The loop tag kinds (the top bits of a tag) the owner gives the mesh:
     * a connection's socket (slot: the connection), and the listener
     * (slot 0) and the --peers-dns resolution (slot 1). */
    int tag_conn;
    int tag_listen;
    const pm__mesh_ops *ops;
    void *owner;
} pm__mesh_env;

#endif /* PM_MESH_ENV_H */
