/* SPDX-License-Identifier: MIT */
/*
 * hub_core.h - the hub's types, and the calls of its parts (hub.h is what
 * its owner includes). The router: frames enter and leave by ports, and the
 * hub moves them between ports, stamping each with the identity of the port
 * it came in by.
 *
 * A port is anything frames enter and leave by: a local worker (its ring
 * pair, port index = slot index); main, the supervisor itself
 * (PM__NODE_MAIN: frames for it are delivered to the application's
 * on_message callback, to a broadcast's results or to a request's
 * callback); and a peer link to another host (pm__hub_link, hub_link.c:
 * frames for that host leave through the mesh's send callback).
 *
 * The hub knows nothing of processes, restarts or the loop: its owner (the
 * cluster) tells it when a port opens, becomes ready, stops or goes away
 * (pm__hub_port_*), and the hub reports what it saw through the callback
 * table pm__hub_ops: a port that broke the protocol or its memory (fault), a
 * control frame (HELLO, READY) for the lifecycle to act on. It never calls
 * into cluster.c, and no supervisor header is included by any hub file.
 */
#ifndef PM_HUB_CORE_H
#define PM_HUB_CORE_H

#include "base/internal.h"
#include "hub.h"

#include "channel/bigmsg.h"
#include "channel/frame.h"
#include "channel/channel.h"
#include "peer/linkfrag.h"

/* Bounds on what the hub holds for full destinations (doc/design.md,
 * Backpressure): per sender (its frames waiting in any destination's
 * queue), per requester (answers waiting in its own queue), and in total. */
#define PM__HOLD_MAX_FRAMES 1024u
#define PM__HOLD_MAX_BYTES ((size_t)4 << 20)
#define PM__HUB_QUEUED_MAX_BYTES ((size_t)64 << 20)
/* Large messages' fds (bigmsg.h) the hub holds in its queues, per sender
 * (and per requester for answers, and for main): past it the sender is
 * held back like a full hold, so the hub's fd table stays bounded by
 * (ports + 1) x 2 x this, plus, per port, the records taken ahead of their
 * frames (PM__BIGMSG_AHEAD_MAX, bigmsg.h: the hub reads each worker's fd
 * socket as records arrive and fences a worker past that as `protocol`)
 * and the one being read. Towards each worker, a few more wait in the
 * kernel until it reads them (the hub's end has the smallest send buffer,
 * about 6 records: src/channel/channel.c), outside this count.
 *
 * What stays open to a worker running as the supervisor's user (no --user
 * or --uid-range): the kernel counts the fds in flight per user and
 * refuses an fd send (ETOOMANYREFS) once that count passes the sender's
 * RLIMIT_NOFILE (root, CAP_SYS_RESOURCE or CAP_SYS_ADMIN exempt). A worker
 * can push its user's count up with socket pairs of its own that nobody
 * reads (each bounded by its own send buffer, but it may make many); the
 * hub cannot see or drain those. Then large sends by that user fail: the
 * hub's forwards are answered -EAGAIN to their sender (never charged to
 * the destination: hub_queue.c, send_big), main's large sends return
 * -EAGAIN, and so do the large sends of the workers of that user.
 * A user per worker (--uid-range) closes it; under --user the supervisor
 * is root and exempt, so only the workers' own large sends are hit. */
#define PM__HOLD_MAX_FDS 8u
/* Refusals (a worker's UNDELIVERABLE about a large message it could not
 * map) a port may owe: one per large message pushed to it, capped. */
#define PM__BIG_OWED_MAX 1024u

/* Requests one requester may have in flight (to all destinations), and the
 * longest a request stays in the table, deadline or not (doc/design.md, "Life
 * of a request"). */
#define PM__INFLIGHT_PER_REQUESTER 1024u
#define PM__INFLIGHT_LIFETIME_MS 300000u

/* Who a queued frame is charged to: a sender's port index or PM__NODE_MAIN
 * (a message or request it sent), or PM__CHARGE_ANSWER (a reply or notice,
 * charged to the port it waits for). */
#define PM__CHARGE_ANSWER 0xFFFFFFFEu
/* A revocation's wake-up (hub_lane.c), charged to the lane notes of the
 * port it waits for: never dropped at main's hold or the hub's total (a
 * worker that never learns of a revocation may wait on its lane for
 * good: a review of stop 45), bounded by construction (one per lane the
 * port holds, PM__LANES_MAX, and no lane is offered to a port whose queue
 * is not empty) and here at twice that. */
#define PM__CHARGE_LANE 0xFFFFFFFDu
#define PM__LANE_NOTES_MAX 16u

/* A frame waiting for room in a destination's ring: header and payload,
 * ready to copy. */
typedef struct pm__qframe {
    struct pm__qframe *next;
    uint32_t len;
    uint32_t charge;        /* PM__CHARGE_ANSWER, a port index or PM__NODE_MAIN */
    int fd;                 /* a large message's sealed memfd, or -1; the
                               announcement's sequence is written when it is sent */
    uint64_t big_len;
    uint16_t credit_host;   /* it came over this host's link (credit-based flow
                               control): credited back when it leaves; 0 none */
    uint32_t credit_port;   /* the address port the sender's window counts it for */
    int waiter;             /* -1, or a place holder carrying no frame: this sender
                               waits with its frame left in its own ring (no copy)
                               and is read again when the queue gets here and
                               the destination's ring has room for need bytes */
    uint32_t need;          /* a place holder's: the size of the waiter's frame */
    unsigned char data[];
} pm__qframe;

/* A request relayed to a worker and not yet answered. */
typedef struct pm__inflight {
    uint32_t requester;     /* node: slot or PM__NODE_MAIN */
    uint64_t requester_inc;
    uint64_t request_id;
    uint64_t target_inc;
    int64_t deadline_ms;    /* 0 none */
    int64_t expires_ms;     /* forgotten then: the deadline, at most the lifetime */
} pm__inflight;

/* A broadcast from main waiting for its results. */
typedef struct pm__bcast {
    struct pm__bcast *next;
    uint64_t first_id;      /* request ids first_id .. first_id + n - 1 */
    size_t n;
    size_t pending;
    int64_t deadline_ms;
    pm_message *results;
    void **bufs;            /* private copies of the replies */
    void (*cb)(pm_cluster *, const pm_message *, size_t, void *);
    void *arg;
    uint16_t src_host;      /* PM__HOST_LOCAL: main's own; else the host whose mesh
                               broadcast this fans out (its workers see it from
                               that host's supervisor, port 0) */
} pm__bcast;

/* One remote host's part of a mesh broadcast: its supervisor fans out to
 * its own ready workers and sends a BRESULT per worker, then a BDONE. */
typedef struct pm__mesh_broadcast_part {
    uint64_t id;            /* the BCAST frame's request_id (broadcast id space) */
    uint16_t host;
    int done;               /* settled: BDONE, link down, deadline */
    uint32_t got;           /* BRESULTs received */
} pm__mesh_broadcast_part;

/* A mesh broadcast (pm_cluster_broadcast_mesh) waiting for its parts: the
 * local broadcast and one part per remote host. Results grow as they come
 * (a remote host's number of workers is not known in advance). */
typedef struct pm__mesh_broadcast {
    struct pm__mesh_broadcast *next;
    struct pm__hub *hub_;   /* for the local broadcast's callback */
    int64_t deadline_ms;
    size_t pending;         /* parts not settled (the local one included) */
    pm__mesh_broadcast_part *parts;
    size_t nparts;
    pm_message *results;
    void **bufs;            /* private copies of the results' data */
    size_t n, cap;
    void (*cb)(pm_cluster *, const pm_message *, size_t, void *);
    void *arg;
} pm__mesh_broadcast;

/* A request from main to one worker (pm_cluster_request) whose callback
 * has not run yet. Sent: it has an entry in its worker's in-flight table
 * (requester PM__NODE_MAIN), which answers it -EHOSTDOWN when the worker
 * dies. Waiting (any worker, none ready): it keeps a copy of its payload
 * until a worker is ready or its deadline passes. */
typedef struct pm__main_request {
    struct pm__main_request *hnext; /* chain of its hash bucket (by id) */
    struct pm__main_request *wnext; /* the waiting list, oldest first */
    uint64_t id;            /* 1..INT_MAX: pm_cluster_request returns it as an int */
    uint32_t port;          /* the worker it went to, or PM__MAIN_REQUEST_WAITING */
    uint64_t target_inc;
    int64_t deadline_ms;
    void (*cb)(pm_cluster *, const pm_message *, void *);
    void *arg;
    unsigned char *data;    /* waiting only: the payload, copied */
    size_t len;
    int fd;                 /* waiting only, a large message: its sealed memfd (else -1) */
    int taken;              /* waiting, and being taken off the list */
    int any;                /* sent to NULL: counted in its port's any_held */
    int killed;             /* timed out, and its worker was killed for it */
    uint16_t host;          /* PM__MAIN_REQUEST_REMOTE: the host index it went to */
    uint32_t remote_port;   /* PM__MAIN_REQUEST_REMOTE: the address port it went to */
} pm__main_request;

#define PM__MAIN_REQUEST_WAITING UINT32_MAX
/* Sent over a link to a worker of another host: the link's table has it
 * (requester PM__NODE_MAIN), which answers it -EHOSTUNREACH when the link
 * goes down; the remote hub's table answers it -EHOSTDOWN. */
#define PM__MAIN_REQUEST_REMOTE (UINT32_MAX - 1)



/* Runs an application callback with the hub's callback depth raised, so
 * that pm_cluster_call from inside it is refused (-EDEADLK) instead of
 * running the loop inside the loop. The hub's own callbacks; its owner's go through
 * PM__APP_CALLBACK (hub.h). */
#define PM__HUB_CALLBACK(h, call) \
    do {                          \
        (h)->cb_depth++;          \
        call;                     \
        (h)->cb_depth--;          \
    } while (0)

/* pm__port.blocked_on of a sender whose frame a peer link's output queue
 * had no room for: read again when that link drains below half
 * (pm__hub_link_writable) or goes down. */
#define PM__BLOCKED_LINK (-2)

/* A local worker's port. */
struct pm__port {
    unsigned index;
    int state;             /* PM__PORT_* */
    uint64_t incarnation;  /* of the process behind it now */
    pm__channel *channel;  /* its ring pair (owned by the cluster), NULL when closed */
    int reading;           /* the hub reads its up ring (not cut off) */
    int want_arm;          /* drained: arm its doorbell before the loop sleeps */
    int busy;              /* its up ring had more than one turn's work */
    int dirty;             /* its down ring has unpublished frames */
    int blocked_on;        /* its hold is full: not read until it half drains; the
                              destination of the frame that did not fit, or -1;
                              PM__BLOCKED_LINK: a link's output queue was full */
    int left;              /* blocked_on a full destination with its frame left in
                              its ring, nothing copied (every frame behind it was
                              for that destination too); scan_pos: how far its
                              ring was seen to hold only such frames */
    uint64_t scan_pos;
    /* Held by a full link (hub_link.c): the host whose list it is on (0:
     * none) and the next port on that list (FIFO, -1 at its end). The
     * list costs nothing per held sender beyond these. */
    uint16_t link_held;
    int link_next;
    pm__qframe *q_head;    /* frames waiting for room in its down ring */
    pm__qframe *q_tail;
    uint32_t q_frames;
    size_t q_bytes;
    uint32_t ans_frames;   /* of those, answers (replies, notices) to it */
    size_t ans_bytes;
    uint32_t held_frames;  /* frames from it waiting in any port's queue */
    size_t held_bytes;
    uint32_t held_fds;     /* of those, large messages (PM__HOLD_MAX_FDS) */
    uint32_t ans_fds;      /* large answers to it waiting in its own queue */
    uint32_t note_frames;  /* revocations' wake-ups to it waiting in its queue */
    size_t note_bytes;
    uint32_t note_fds;     /* always 0 (charge_of's third count) */
    uint64_t rx_len;
    int rx_fd;             /* the checked fd of the large message at the head of its
                              up ring, kept while the sender is held back; -1 */
    struct {
        int fd;
        uint32_t seq;
    } ahead[PM__BIGMSG_AHEAD_MAX]; /* records taken off its fd socket before their
                              frames were read (port.c), oldest at ahead_head */
    unsigned ahead_head, ahead_n;
    uint32_t big_owed;     /* large messages pushed to it that it may still refuse
                              (port.c, refusal), at most PM__BIG_OWED_MAX */
    uint64_t stall_since_ms; /* its queue waits without progress since; 0: empty */
    int sock_full;         /* its socket refused an fd: the owner waits until it is
                              writable, then services the port (pm__hub_flush) */
    int drain_reported;    /* this stall was reported (not-draining) */
    pm__inflight *inflight; /* requests relayed to it, unanswered */
    uint32_t ninflight;
    uint32_t inflight_cap;
    uint32_t requests_out; /* entries in any table with it as the requester */
    uint32_t main_inflight; /* entries in its table from main (requests, broadcasts):
                               the any-worker pick takes the fewest */
    uint32_t any_held;     /* main's any-worker requests it holds (the pick's bound,
                              pm_options_set_requests_per_worker) */
    uint32_t stuck;        /* main's requests to it that timed out and are not
                              answered yet: no any-worker request until 0 */
    uint64_t relayed;      /* frames relayed from it */
    uint64_t relayed_bytes;
    uint64_t undeliverable; /* notices sent to it */
    uint64_t malformed;    /* frames dropped from it */
    int lanes_ok;          /* its library takes direct lanes (hub_lane.c): set by the
                              owner for this incarnation, cleared at its close */
    int lane_notes;        /* and a revocation's wake-up naming its lane (protocol 4) */
    /* Set while the port's index is on the hub's list of that name
     * (pm__hub_mark_*), so it is listed at most once; cleared only when the
     * list lets go of it. The list may hold a port whose flag (busy,
     * want_arm, dirty) was cleared since: its visit finds nothing to do. */
    unsigned char in_ready, in_arm, in_dirty, in_timed;
};

/* A set of port indexes in the order they were added: the hub's work lists
 * (doc/design.md, "Life of a frame": a turn costs the ports with work).
 * Capacity nports, each port at most once (its in_* flag), so adding never
 * fails. */
typedef struct pm__portlist {
    unsigned *v;
    unsigned n;
} pm__portlist;



/* What the request callback running now is told (pm_cluster_request_outcome). */
typedef struct pm__outcome_ctx {
    const pm_message *reply; /* the callback's message; NULL outside one */
    int killed;
    const pm__ending *ending; /* -EHOSTDOWN from this end, or NULL */
} pm__outcome_ctx;

#define PM__HUB_CONTROL_MAX 64u

/* A request a local requester sent over a link, not answered yet: a link
 * going down answers it -EHOSTUNREACH at once. */
typedef struct pm__remote_inflight {
    uint32_t requester;     /* slot or PM__NODE_MAIN */
    uint32_t target;        /* the remote address port */
    uint64_t requester_inc;
    uint64_t target_inc;
    uint64_t request_id;
    int64_t expires_ms;     /* forgotten then: its deadline, at most the lifetime */
} pm__remote_inflight;

/* Requests one host's link may have in flight (all requesters). */
#define PM__REMOTE_INFLIGHT_MAX 65536u

/* Flow control on a link (doc/design.md, "Backpressure"; doc/protocol.md
 * 6, "Flow control"): a sender's hub may have at most this many MSG and
 * REQUEST frames (and bytes, header included) for one remote address port
 * not yet credited back; the receiver credits them back in steps of a
 * quarter as they leave its hands (into the destination's ring, or
 * dropped). The window is well below the receiver's per-destination bound
 * on answers (PM__HOLD_MAX_*), so a full destination never drops a link's
 * frames for lack of room while one or two hosts stream to it. */
#define PM__LINK_WIN_FRAMES 512u
#define PM__LINK_WIN_BYTES ((uint32_t)2 << 20)
#define PM__LINK_CREDIT_FRAMES (PM__LINK_WIN_FRAMES / 4)
#define PM__LINK_CREDIT_BYTES (PM__LINK_WIN_BYTES / 4)
/* Hello capability bits this version sets (doc/protocol.md 4). */
#define PM__PEER_CAP_CREDIT 0x1u
/* ... and large messages as FRAG frames (doc/protocol.md 6). */
#define PM__PEER_CAP_FRAG 0x2u

/* One address port's window (sender) or credit not yet sent (receiver):
 * an entry of a small open-addressing table keyed by port + 1 (0: empty). */
typedef struct pm__hub_link_window {
    uint32_t key;
    uint32_t frames;
    uint32_t bytes;
    uint32_t waiting;       /* sender: a sender is held on this window */
} pm__hub_link_window;

typedef struct pm__hub_link_window_table {
    pm__hub_link_window *v;
    uint32_t cap, n;        /* cap a power of two (0 before the first entry) */
} pm__hub_link_window_table;

/* A peer link as the hub sees it: a port to a remote host (hub_link.c).
 * The mesh (mesh.c) owns the connection and tells the hub when it is up
 * and down; the hub hands it whole frames through send. */
typedef struct pm__hub_link {
    int up;
    /* Connections so far (pm__hub_link_up): a remote host's broadcast
     * answers on the connection its BCAST came in on only. Over a later
     * one (the host may be a new incarnation whose ids start again) its
     * results could pass for those of another broadcast of the same id. */
    uint64_t conn;
    /* Queues one frame (header and payload, contiguous) on the link. 0;
     * -EAGAIN: the link's buffer is full; another negative errno: the link
     * is going down. */
    int (*send)(void *arg, const void *frame, size_t len);
    void *arg;
    pm__remote_inflight *inflight;
    uint32_t ninflight, cap;
    uint64_t frames_in, frames_out; /* taken from the link, put on it (fuzz_link checks both) */
    uint64_t forged;        /* frames claiming another host than the link's, dropped */
    uint64_t malformed;     /* frames that failed to decode or route, dropped */
    uint64_t dropped;       /* frames the link had no room for */
    /* Senders held because the link's output queue was full (port
     * indexes, FIFO through pm__port.link_next; -1 empty). */
    int held_head, held_tail;
    uint64_t held_waits;    /* times a sender was held by this link */
    /* Credit-based flow (the peer announced PM__PEER_CAP_CREDIT): windows
     * per remote port, senders held on one (a list like held_*), credits
     * owed to the peer per local address port. */
    uint32_t caps;
    pm__hub_link_window_table win, cred;
    int window_held_head, window_held_tail;
    int cred_unsent;        /* a credit found the link full: sent when it drains */
    uint64_t window_waits;  /* times a sender was held by a full window */
    /* Large messages (peer announced PM__PEER_CAP_FRAG): the one being sent
     * as FRAG frames, paced by the output queue (its sealed memfd, read
     * with pread; -1 none), the senders waiting for it (a list like
     * held_*), and the one being reassembled into a memfd of its own. */
    int tx_fd;
    uint64_t tx_total, tx_off;
    uint32_t tx_id;         /* the last message id used (0 none yet) */
    uint32_t tx_owner;      /* its sender's port, or PM__NODE_MAIN */
    pm__frame_hdr tx_hdr;   /* its wire header (type the message's) */
    int frag_held_head, frag_held_tail;
    pm__frag_rx rx;
    int rx_fd;
    pm__frame_hdr rx_hdr;   /* the first fragment's header, made local */
    uint64_t big_out, big_in; /* large messages sent, received whole */
    uint64_t frag_dropped;  /* messages abandoned mid-way or refused */
} pm__hub_link;

/* A remote requester in a local port's in-flight table: its host index
 * and address port (never a slot, PM__NODE_MAIN or PM__CHARGE_ANSWER). */
#define PM__REMOTE_BIT 0x80000000u
#define PM__REMOTE_NODE(host, port) (PM__REMOTE_BIT | ((uint32_t)(host) << 16) | (uint32_t)(port))
#define PM__IS_REMOTE_NODE(n) (((n) & 0xFF800000u) == PM__REMOTE_BIT)
#define PM__REMOTE_HOST(n) ((uint16_t)(((n) >> 16) & 0x7Fu))
#define PM__REMOTE_PORT(n) ((uint32_t)((n) & 0xFFFFu))

/* Main's broadcast ids start above every request id (1..INT_MAX), so an
 * answer finds its request or its broadcast by its id alone. */
#define PM__BCAST_ID_BASE ((uint64_t)1 << 32)

/* The calls a lower part of the hub makes into a higher one, set by
 * pm__hub_init (hub_route.c). The parts form a stack, each calling only those
 * below it: hub_core.c; the link port's sending side (hub_linkbase.c,
 * hub_linkbig.c, hub_linkflow.c); hub_queue.c; hub_bcast.c; hub_main.c;
 * the link port's receiving side (hub_linkin.c, hub_linkbcast.c,
 * hub_link.c); hub_route.c; port.c. Only an undeliverable notice goes the other
 * way (pm__hub_notice_at, hub_queue.c, which the queue itself needs for a
 * frame its flush refuses): to main or back over a link, through this
 * table, once per notice, never per frame relayed. */
struct pm__hub;
typedef struct pm__hub_up {
    /* hub_main.c: a notice for main (pm__hub_deliver_main). */
    void (*deliver_main)(struct pm__hub *h, const pm__frame_hdr *f, const void *payload);
    /* hub_linkin.c: a notice for a requester on another host, or a
     * worker's end settling a remote mesh broadcast's result
     * (pm__hub_link_notice). */
    void (*link_notice)(struct pm__hub *h, uint32_t to, uint64_t to_inc, uint32_t about,
                        uint64_t about_inc, uint64_t request_id, int err);
} pm__hub_up;

struct pm__hub {
    pm__port *ports;
    unsigned nports;
    pm__names names;
    pm_cluster *app;        /* handed to the application's callbacks, never dereferenced */
    const pm__hub_ops *ops;
    const pm__hub_up *up;   /* calls up the hub's stack (pm__hub_up) */
    void *owner;
    void (*on_message)(pm_cluster *, const pm_message *, void *);
    void *on_message_arg;
    pm__bcast *bcasts;      /* broadcasts waiting for results */
    pm__mesh_broadcast *mesh_broadcasts; /* mesh broadcasts waiting for their parts */
    uint64_t next_req;      /* main's broadcast ids (above INT_MAX, PM__BCAST_ID_BASE) */
    pm__main_request **main_requests; /* main's requests by id (hash, main_request_buckets chains) */
    size_t main_request_buckets; /* a power of two, 0 before the first request */
    size_t main_request_count;
    pm__main_request *waiting; /* requests for any worker while none is ready, FIFO */
    pm__main_request *waiting_tail;
    uint32_t main_request_last_id; /* the last id handed out (ids wrap within 1..INT_MAX) */
    unsigned main_request_rr; /* the port picked last (round robin among ties) */
    int64_t main_request_due_ms; /* no request's deadline is earlier; 0 none */
    int main_request_closed; /* pm_cluster_terminate began: no new requests */
    size_t nwaiting;        /* on the waiting list */
    size_t queue_max;       /* pm_options_set_request_queue_max */
    uint32_t any_per_worker; /* pm_options_set_requests_per_worker */
    int kill_on_timeout;    /* pm_options_set_kill_on_timeout */
    const pm__ending *ending; /* the incarnation being closed, or NULL */
    pm__outcome_ctx outcome; /* the request callback running now */
    pm_request_outcome *outcome_buf; /* filled on demand by the getter */
    unsigned cb_depth;      /* application callbacks running (PM__HUB_CALLBACK) */
    unsigned char *scratch; /* private copy of a frame delivered to main; in a
                               MADV_WIPEONFORK mapping (scratch_mapped) */
    int scratch_mapped;
    int active;             /* frames were read in the current turn */
    uint32_t spin_budget;   /* learnt spin before the loop sleeps, ns (pm__hub_spin) */
    uint32_t main_held_frames; /* main's frames waiting in queues */
    size_t main_held_bytes;
    uint32_t main_held_fds;
    size_t max_message;     /* pm_options_set_max_message */
    int cur_fd;             /* the large message being relayed now (port.c sets it, the
                               hub takes it by setting -1; port.c closes what is left) */
    uint64_t cur_len;
    uint64_t big_relayed;   /* large messages forwarded between workers (fd passed on) */
    uint64_t fd_refused;    /* large messages whose fd the kernel refused for now
                               (send_big): their senders were told -EAGAIN */
    size_t queued_bytes;    /* every queue together (PM__HUB_QUEUED_MAX_BYTES) */
    int queued_full;        /* a sender waits for the total to drop */
    uint64_t inflight_total; /* entries in all tables */
    uint64_t next_purge_ms; /* forget expired requests then; 0 none */
    uint64_t inflight_lifetime_ms; /* PM__INFLIGHT_LIFETIME_MS (tests shorten it) */
    uint64_t drain_timeout_ms; /* 0: never report */
    uint64_t late_replies;  /* replies nobody waits for any more */
    uint64_t notices_dropped; /* undeliverable notices with no room (counted) */
    uint64_t big_unmapped;  /* large messages to main it could not map: refused */
    uint64_t replies_dropped; /* replies to a requester whose queue was full */
    uint64_t not_draining;  /* stalls reported (ops->not_draining) */
    uint64_t ring_full_waits; /* a sender held back by a full destination */
    pm__port *leave_from;   /* the local sender whose frame is being pushed, when its
                               frame may be left in its ring (hub_queue.c): set
                               by pm__hub_relay only, around the push of that
                               sender's own frame, charged to it, no fd */
    int left_now;           /* the push just refused left the frame in its ring */
    uint64_t frames_queued; /* frames copied into a queue (tests: copies per frame) */
    uint64_t left_waits;    /* senders held with their frame left in their ring */
    /* Peer links (doc/design.md, "Life of a remote request"): the host table
     * (index 0 is this host), copied into every worker's control block. */
    int peer_mode;
    pm__hosts hosts;
    uint64_t unreachable;   /* frames for a host with no link up, answered -EHOSTUNREACH */
    pm__hub_link *links;    /* PM__MAX_HOSTS entries (peer mode), by host index */
    unsigned char *link_buf; /* one frame being sent over a link (MADV_WIPEONFORK) */
    int link_putting;       /* inside a link's send (which may write and so call
                               pm__hub_link_writable back): link_buf is in use */
    /* The work lists: a loop turn visits the ports on them, never every
     * port, so its cost follows the ports with work, not N. */
    pm__portlist ready;     /* to service (busy, or its doorbell rang), FIFO */
    pm__portlist pass;      /* the ready list detached for this turn's pass */
    unsigned pass_pos;      /* the next entry of pass to visit */
    pm__portlist arm;       /* drained (want_arm): doorbells to arm before sleeping */
    pm__portlist dirty;     /* down rings written and not yet published */
    pm__portlist timed;     /* ports with a deadline of their own: a queue waiting
                               (drain timeout) or a socket retry */
    /* Direct lanes (hub_lane.c): the book, NULL while lanes are off. */
    struct pm__lanebook *book;
    uint64_t lanes_made;    /* lanes handed to both ends */
    uint64_t lanes_revoked; /* revocations written to a live end */
    uint64_t lane_failed;   /* set-ups given up (no memory, fds, or a full socket) */
};

/* Frames read from one port per turn: a flooding worker waits for the next
 * turn instead of starving the others. */
#define PM__FRAMES_PER_TURN 256

/* hub_core.c: */
/* Large messages from main (pm_cluster_send/reply/request/call above
 * PM_MAX_PAYLOAD): a sealed memfd of data, or the memfd's -errno. len is
 * at most max_message: main's calls refuse a longer one -EMSGSIZE first
 * (pm__hub_main_send, pm__hub_request; check_bigmsg test_round_trips_fork). */
int pm__hub_main_memfd(const pm__hub *h, const void *data, size_t len);
/* Closes the large messages' fds port p holds (taken ahead of their
 * frames, or being read; hub_core.c). */
void pm__hub_port_drop_ahead(pm__port *p);
/* hub_queue.c: */
/* Moves queued frames into d's ring; unblocks senders once d has room.
 * Sets d->sock_full when d's socket refused a large message's fd: the
 * owner then services d again once that socket is writable. */
void pm__hub_flush(pm__hub *h, pm__port *d);
/* hub_core.c: */
/* Work lists. Marks p busy and puts it on the ready list (at its end: a
 * port is visited once per pass, in the order it became ready, so none
 * starves). */
void pm__hub_mark_busy(pm__hub *h, pm__port *p);
/* Its down ring has unpublished frames (pm__hub_publish). */
void pm__hub_mark_dirty(pm__hub *h, pm__port *p);
/* It has a deadline of its own now (stall_since_ms: the drain timeout). */
void pm__hub_mark_timed(pm__hub *h, pm__port *p);
/* hub_queue.c: */
/* For pm__ring_scan over a sender's ring: 0 while a frame is a message or
 * request to local port arg (a pm__port *) that may wait in the sender's
 * ring, 1 at anything else (hub_queue.c). */
int pm__hub_not_for(const void *rec, size_t len, void *arg);

/* hub_route.c: set-up of a hub its owner embeds (hub_owner.c's pm__hub_new
 * for one held by pointer), and routing a port's frames. pm__hub_init: 0,
 * or -ENOMEM with nothing left to free (not a hub: no pm__hub_free). */
int pm__hub_init(pm__hub *h, unsigned nports, const pm__names *names, pm_cluster *app,
                 const pm__hub_ops *ops, void *owner);
void pm__hub_free(pm__hub *h);
/* Relays a validated, stamped frame from port p. 0: consumed (delivered,
 * queued, dropped and counted, or answered undeliverable); -EAGAIN: p's
 * hold is full, leave the frame in p's ring and stop reading p until its
 * frames drain (backpressure). */
int pm__hub_relay(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload);

/* hub_linkbig.c: */
/* Fork mode, in the supervisor before a fork: hands fn the links'
 * large-message fds (the memfds being sent and reassembled are other
 * workers' traffic), for the child to close. */
void pm__hub_links_child_fds(const pm__hub *h, void (*fn)(void *arg, int fd), void *arg);

#endif /* PM_HUB_CORE_H */
