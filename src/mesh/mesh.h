/* SPDX-License-Identifier: MIT */
/* mesh.h - the supervisor's peer links on its loop: the TCP listener, the dialer and one peer.c state machine per connection. The mesh sits below the supervisor: it is given its loop, its hub and its configuration (pm__mesh_env) and reports up through pm__mesh_ops; it never sees the cluster. */
#ifndef PM_MESH_H
#define PM_MESH_H

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

/* Peer mode, after the loop exists: keys (the node key file, created 0600
 * when missing, or a key pair for this start), pins, the listener bound
 * and listening, the configured peers dialled. 0 with *out set, or -errno;
 * why (when not NULL) names what failed. */
int pm__mesh_init(pm__mesh **out, const pm__mesh_env *env, char *why, size_t whysize);
/* Closes every link (a CLOSE record where the transport is up, best
 * effort) and frees everything. NULL: nothing. */
void pm__mesh_free(pm__mesh *m);
/* Fork mode, in the child: closes the mesh's fds, touches nothing else
 * (the keys are in MADV_WIPEONFORK memory and are never freed there). */
void pm__mesh_forget(pm__mesh *m);
/* A loop completion with one of the mesh's tag kinds. */
void pm__mesh_ready(pm__mesh *m, uint64_t tag);
/* Writes what the links queued, closes the dead ones, arms the loop. */
void pm__mesh_flush(pm__mesh *m);
/* The earliest handshake deadline or redial (ms, 0 none), and firing them. */
uint64_t pm__mesh_next_deadline(const pm__mesh *m);
void pm__mesh_fire(pm__mesh *m, uint64_t now_ms);

/* The accessors below take NULL (no peer mode) and answer nothing. */
/* Counters for tests and /metrics: links up now, links that came up,
 * failures of reason why (PM__PF_*). */
unsigned pm__mesh_links_up(const pm__mesh *m);
uint64_t pm__mesh_fails(const pm__mesh *m, int why);
/* The public view of the links (pm_cluster_peers): up to cap into out,
 * returns how many there are. */
size_t pm__mesh_peers(const pm__mesh *m, pm_peer_info *out, size_t cap);
/* Swaps the pre-shared secrets (n of 32 bytes at keys) for every handshake
 * from now on; links up and handshakes under way keep theirs. -ENOTCONN
 * when not in peer mode, -EINVAL for none, more than two, or a cluster that
 * runs without a secret; the keyring's errors (-EEXIST, -EINVAL, -ENOMEM). */
int pm__mesh_set_secrets(pm__mesh *m, const unsigned char *keys, unsigned n);
/* REKEY records sent and received by the connections open now. */
void pm__mesh_rekeys(const pm__mesh *m, uint64_t *out, uint64_t *in);
/* Batching over the live links: frames sent, FRAMES records sealed, and
 * frames staged now (sealed at the turn's end). */
void pm__mesh_batch_stats(const pm__mesh *m, uint64_t *frames, uint64_t *records,
                          uint64_t *staged);
/* Tests only: every linked connection's stream ends as if truncated; the
 * links die at the turn's end with what they staged unsent. */
void pm__mesh_test_truncate(pm__mesh *m);
/* Orderly ends (doc/protocol.md 7): connections that lingered after our
 * CLOSE, whose peer answered it with its own CLOSE, whose wait ended at the
 * deadline, frames discarded after our CLOSE, and connections lingering
 * now. */
void pm__mesh_close_stats(const pm__mesh *m, uint64_t *lingered, uint64_t *answered,
                          uint64_t *expired, uint64_t *discarded, unsigned *lingering);
/* Tests only: ends every link now as a local shutdown does (CLOSE reason 0,
 * reason `local`): the orderly end. */
void pm__mesh_test_close(pm__mesh *m);
/* --peers-dns: resolutions that answered, that failed (or answered
 * nothing), and the addresses dialled now (our own excluded). */
void pm__mesh_dns_stats(const pm__mesh *m, uint64_t *ok, uint64_t *failed, unsigned *targets);

#endif /* PM_MESH_H */
