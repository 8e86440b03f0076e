/* SPDX-License-Identifier: MIT */
/*
 * hub.h - the router, as its owners see it (the cluster, and the mesh for
 * its links): an opaque pm__hub, its set-up and configuration, what it
 * reports (pm__hub_ops), routing a turn's ports, main's sends and
 * requests, the hub's deadlines, closing a port, peer links, fork mode,
 * and the few reads and writes of its state its owner needs. The hub's
 * types and the calls between its parts are in hub_core.h, which includes
 * this; nothing outside src/hub/ includes hub_core.h (tests aside).
 */
#ifndef PM_HUB_H
#define PM_HUB_H

#include <stddef.h>
#include <stdint.h>

#include "base/address.h"

typedef struct pm__hub pm__hub;
typedef struct pm__port pm__port;
struct pm__channel;

/* What the hub reports to its owner. */
typedef struct pm__hub_ops {
    /* Port p broke the protocol (PM_REASON_PROTOCOL) or its shared memory
     * (PM_REASON_CORRUPT_RING). The owner must cut it off before returning
     * (pm__hub_port_cut), so the hub reads nothing more from it. */
    void (*fault)(void *owner, unsigned p, int reason);
    /* A handshake frame (PM__FT_HELLO, PM__FT_READY) from port p; payload
     * is a private copy of at most PM__HUB_CONTROL_MAX bytes. */
    void (*control)(void *owner, unsigned p, int type, const void *payload, size_t len);
    /* Port p's down ring stayed full for the drain timeout while frames
     * waited for it (once per stall). The owner reports it and may fence
     * p (PM_REASON_NOT_DRAINING). */
    void (*not_draining)(void *owner, unsigned p);
    /* One of main's requests to port p timed out while p's incarnation
     * held it (pm_options_set_kill_on_timeout): the owner kills p and
     * cuts it off before returning. NULL: never asked. */
    void (*timed_out)(void *owner, unsigned p);
} pm__hub_ops;

/* How the incarnation behind a port ended, set by the owner around
 * pm__hub_port_close: the -EHOSTDOWN answers that closing gives main's
 * requests carry it (pm_request_outcome). */
typedef struct pm__ending {
    unsigned port;
    uint64_t incarnation;
    int exit_code;
    int signal;
    int core_dumped;
    int reason;             /* PM_REASON_* of its EXITED event */
    const pm_crash_report *crash; /* that incarnation's, or NULL */
} pm__ending;

/* What the owner configures from its options, once, after pm__hub_new
 * (before the first port opens). */
typedef struct pm__hub_config {
    void (*on_message)(pm_cluster *, const pm_message *, void *); /* NULL: dropped */
    void *on_message_arg;
    uint64_t drain_timeout_ms;  /* 0: never report a port not draining */
    size_t max_message;         /* pm_options_set_max_message */
    uint32_t requests_per_worker; /* pm_options_set_requests_per_worker */
    size_t request_queue_max;   /* pm_options_set_request_queue_max */
    int kill_on_timeout;        /* pm_options_set_kill_on_timeout */
} pm__hub_config;

/* Where a port is in its life, as far as traffic goes. */
enum pm__port_state {
    PM__PORT_CLOSED = 0,   /* no incarnation: nothing in, nothing out */
    PM__PORT_STARTING,     /* handshake frames only; traffic is dropped and counted */
    PM__PORT_READY,        /* sends and receives */
    PM__PORT_STOPPING      /* still sends (replies, last words); receives nothing new */
};

/* Runs an application callback with the hub's callback depth raised, so
 * that pm_cluster_call from inside it is refused (-EDEADLK) instead of
 * running the loop inside the loop. Every callback procmesh runs on the
 * supervisor goes through it (the hub's own: PM__HUB_CALLBACK). */
#define PM__APP_CALLBACK(h, call)  \
    do {                           \
        pm__hub_callback_enter(h); \
        call;                      \
        pm__hub_callback_leave(h); \
    } while (0)
/* hub_owner.c: */
void pm__hub_callback_enter(pm__hub *h);
void pm__hub_callback_leave(pm__hub *h);
/* 1 inside an application callback (PM__APP_CALLBACK). */
int pm__hub_in_callback(const pm__hub *h);

/* hub_owner.c: the hub made and freed for an owner that holds it by
 * pointer (hub_route.c's pm__hub_init for one embedded, tests and fuzzers), its
 * configuration, and the reads and writes of its state the owner makes. */
/* A new hub of nports local ports in *out (NULL on failure): 0 or -ENOMEM. */
int pm__hub_new(pm__hub **out, unsigned nports, const pm__names *names, pm_cluster *app,
                const pm__hub_ops *ops, void *owner);
/* Frees it (pm__hub_free first); NULL is a no-op. */
void pm__hub_delete(pm__hub *h);
void pm__hub_configure(pm__hub *h, const pm__hub_config *cfg);
/* The names the hub addresses nodes by. */
const pm__names *pm__hub_names(const pm__hub *h);
/* How the incarnation being closed ended, around pm__hub_port_close
 * (NULL after): its requests' -EHOSTDOWN answers carry it. */
void pm__hub_set_ending(pm__hub *h, const pm__ending *e);
/* 1 when frames were read since the last call; resets it (once a turn,
 * before the loop sleeps: is traffic flowing?). */
int pm__hub_take_active(pm__hub *h);
/* 1 once pm__hub_cancel_all ran: main's new requests are refused. */
int pm__hub_requests_closed(const pm__hub *h);
/* Port p: the hub still reads its up ring (not cut off); it has work left
 * over for the next turn; its socket refused an fd and the owner must
 * service it once the socket is writable. */
int pm__hub_port_reading(const pm__hub *h, unsigned p);
int pm__hub_port_busy(const pm__hub *h, unsigned p);
int pm__hub_port_sock_full(const pm__hub *h, unsigned p);
/* Port p has work for the next turn (the owner could not wait for it). */
void pm__hub_port_retry(pm__hub *h, unsigned p);
/* Adds the hub's counters (every port's and its own) into *out. */
void pm__hub_stats(const pm__hub *h, struct pm_cluster_stats *out);

/* hub_route.c: the hub's deadlines, main's side, fork mode, hosts, closing a port. */

/* The hub's deadlines (broadcasts, drain timeouts, expiry of requests in
 * flight): the earliest (0 none), and firing the due ones. */
uint64_t pm__hub_next_deadline(const pm__hub *h);
void pm__hub_fire(pm__hub *h, uint64_t now_ms);
/* Main's sends (pm_cluster_send/reply/broadcast): to a ready port. */
int pm__hub_main_send(pm__hub *h, const pm_address *to, int type, uint64_t request_id,
                      const void *data, size_t len);

/* Fork mode, in the supervisor just before a fork: hands fn every fd of
 * other workers' traffic the hub holds (large messages queued, taken
 * ahead, being read or crossing a link), for the child to close. Reads
 * only. Returns 1 when some port's queue holds frames (the child must
 * wipe the ports: pm__hub_wipe_data's ports), else 0. */
int pm__hub_child_fds(const pm__hub *h, void (*fn)(void *arg, int fd), void *arg);
/* Fork mode, in the child before the bootstrap runs: wipes every copy of
 * other workers' traffic the child inherited from the hub (queued frames,
 * walked only when ports is set; broadcast replies; requests waiting; the
 * scratch buffer is MADV_WIPEONFORK). Its fds were closed by the plan
 * made with pm__hub_child_fds. */
void pm__hub_wipe_data(pm__hub *h, int ports);
/* The stop request: control-block flag and a STOP frame. */
void pm__hub_stop_request(pm__hub *h, unsigned p);
/* A frame from main to port p's current incarnation. 0 or -errno. */
int pm__hub_send_control(pm__hub *h, unsigned p, int type, const void *payload, size_t len);

/* Peer mode: the supervisor is port 0 of its host, and the host table
 * starts with this host (names.host). Before the first port opens. */
void pm__hub_peer_mode(pm__hub *h);
/* The index of a remote host name, assigned on first sight and never
 * reused (written to every open port's control block before it is
 * returned, so no worker sees a frame from a host it cannot name).
 * -ENOSPC past PM__MAX_HOSTS - 1 hosts; -EINVAL for our own name. */
int pm__hub_host_index(pm__hub *h, const char *name);
/* Writes the peer mode and the host table into a new incarnation's control
 * block (before its process starts). */
void pm__hub_hosts_copy(const pm__hub *h, struct pm__channel *l);

/* The incarnation is gone: requests in flight to it are answered
 * -EHOSTDOWN, its own are forgotten, its queue dropped, its senders
 * unblocked, the port closed. */
void pm__hub_port_close(pm__hub *h, unsigned p);

/* hub_core.c: */
/* A turn's work lists. */
/* Publishes every ring written this turn (one wake-up per ring at most). */
void pm__hub_publish(pm__hub *h);
/* Its doorbell rang: on the ready list, without claiming work left over. */
void pm__hub_mark_rang(pm__hub *h, unsigned p);
/* One turn's pass over the ready list: begin detaches it (ports marked
 * from then on wait for the next pass), next hands out its ports one by
 * one (0 at the end). */
void pm__hub_pass_begin(pm__hub *h);
int pm__hub_pass_next(pm__hub *h, unsigned *p);

/* hub_bcast.c: */
int pm__hub_broadcast(pm__hub *h, const void *data, size_t len, int timeout_ms,
                      void (*cb)(pm_cluster *, const pm_message *, size_t, void *), void *arg);
/* pm_cluster_broadcast_mesh: the local broadcast, and a BCAST to every
 * host this hub has an index for; cb runs once, after every result. */
int pm__hub_broadcast_mesh(pm__hub *h, const void *data, size_t len, int timeout_ms,
                           void (*cb)(pm_cluster *, const pm_message *, size_t, void *),
                           void *arg);
/* hub_main.c: */
/* Main's requests to one worker (pm_cluster_request): to NULL means any
 * ready worker (the fewest of main's requests in flight, round robin among
 * ties; none ready: it waits until one is, or its deadline). Returns the id
 * (> 0) or a negative errno (then cb never runs); cb runs exactly once. */
int pm__hub_request(pm__hub *h, const pm_address *to, const void *data, size_t len,
                    int timeout_ms, void (*cb)(pm_cluster *, const pm_message *, void *),
                    void *arg);
/* 1 when port p's incarnation holds one of main's requests (in flight,
 * or timed out and not answered): its death is the input's fault. p <
 * h->nports (pool.c passes a slot's index). */
int pm__hub_port_holds_main(const pm__hub *h, unsigned p);
/* pm_cluster_request_outcome: NULL unless reply is the message of the
 * request callback running now. */
const pm_request_outcome *pm__hub_outcome(pm__hub *h, const pm_message *reply);
/* Its callback runs now with -ECANCELED; a reply later is late. 0, or
 * -ENOENT when id is not pending (answered, cancelled or never issued). */
int pm__hub_cancel(pm__hub *h, uint64_t id);
/* pm_cluster_terminate: every pending request and broadcast of main gets
 * -ECANCELED now, and new requests are refused (-ESHUTDOWN). */
void pm__hub_cancel_all(pm__hub *h);
/* hub_link.c: peer links as ports (the mesh calls these). */
/* The link to host (an index of pm__hub_host_index) is up: frames for that
 * host go to send(arg, ...). */
void pm__hub_link_up(pm__hub *h, uint16_t host, int (*send)(void *, const void *, size_t),
                     void *arg);
/* It went down: the requests in flight over it are answered -EHOSTUNREACH
 * now; frames for the host are answered so until a link is up again. */
void pm__hub_link_down(pm__hub *h, uint16_t host);
/* The capability bits host's peer announced (its hello), right after
 * pm__hub_link_up. */
void pm__hub_link_caps(pm__hub *h, uint16_t host, uint32_t caps);
/* The frames host's link dropped: claiming another host (*forged), failing
 * to decode or route, or large messages abandoned (*malformed). Zeros for
 * a host without a link. */
void pm__hub_link_drops(const pm__hub *h, uint16_t host, uint64_t *forged, uint64_t *malformed);
/* host's link drained its output queue below half (mesh.c's write path):
 * the senders it held are read again. O(1) when it holds none. */
void pm__hub_link_writable(pm__hub *h, uint16_t host);
/* A frame received on host's link: validated, stamped with the link's host
 * and delivered as if local (doc/design.md, "Life of a remote request"). */
void pm__hub_link_frame(pm__hub *h, uint16_t host, const unsigned char *frame, size_t len);

/* port.c: a local worker's port, the hub's side of its ring pair. */
/* A new incarnation behind port p: link attached, handshake frames read.
 * Returns 1 when its ring already has work (read it this turn), else 0:
 * the caller arms the doorbell (link->hub_efd). */
int pm__hub_port_open(pm__hub *h, unsigned p, struct pm__channel *channel, uint64_t incarnation);
void pm__hub_port_set_state(pm__hub *h, unsigned p, int state);
/* Direct lanes between local workers (doc/design.md, "Direct lanes",
 * hub_lane.c): turned on once, by the owner, when the containment lets a
 * lane be revoked with no writer left (cgroups); 0 or -ENOMEM. A port's
 * incarnation may be given lanes once the owner says its library takes
 * them (fork mode, or an exec'd worker's HELLO of version 3 or later). */
int pm__hub_lanes_enable(pm__hub *h);
void pm__hub_port_lanes_ok(pm__hub *h, unsigned p, int ok);
/* Its library reads a revocation's wake-up naming the lane (protocol 4 and
 * later, fork mode); else the wake-up has no payload (laneoffer.h). */
void pm__hub_port_lane_notes(pm__hub *h, unsigned p, int named);
/* Never read from this incarnation again (fenced, or it ended). */
void pm__hub_port_cut(pm__hub *h, unsigned p);
/* Its fd socket is readable: takes the records waiting there (at once,
 * bigmsg.h); a bad record or one too many ahead of its frame is a protocol
 * fault (ops->fault). */
void pm__hub_port_records(pm__hub *h, unsigned p);
/* The doorbell rang or the port had work left: flush what waits for room
 * in its down ring, then read up to one turn of its up ring. */
void pm__hub_port_service(pm__hub *h, unsigned p);
/* Before the loop sleeps: arms the doorbells of drained ports (deferred to
 * here so a busy hub lets its workers publish without a system call).
 * Returns 1 when some port has work after all. */
int pm__hub_arm_idle(pm__hub *h);
/* 1 when a drained, readable port's ring is no longer empty (spinning). */
int pm__hub_any_arrived(pm__hub *h);
/* Before the loop sleeps, after a turn that read frames (the caller
 * checks: pm__hub_take_active), with a spin of up to spin_us allowed
 * (pm_options_set_hub_spin_us): spins up to the learnt budget for a frame
 * on a drained ring or ready(arg) (the owner's loop has a completion). 1
 * when work arrived: do not sleep. 0 when the loop must sleep; *t0 is then
 * what to pass to pm__hub_spin_slept after the sleep. */
int pm__hub_spin(pm__hub *h, unsigned spin_us, int (*ready)(void *arg), void *arg, uint64_t *t0);
/* After the loop slept: learns from how soon it woke (t0 from
 * pm__hub_spin; nothing when 0). */
void pm__hub_spin_slept(pm__hub *h, unsigned spin_us, uint64_t t0);
/* 1 when some port has work left over for the next turn. */
int pm__hub_any_busy(const pm__hub *h);

#endif /* PM_HUB_H */
