/* SPDX-License-Identifier: MIT */
/*
 * internals.h - every read of a private procmesh structure the tests make.
 *
 * Some behaviour is only visible inside the supervisor or the node (a
 * per-slot counter, the loop backend, a worker's own ring). The tests reach
 * it here and nowhere else, so that when struct pm_cluster or struct
 * pm_node change shape only this file has to follow. Include after
 * helpers.h in a program linked with libpmcore (not the shared library,
 * which exports only the public symbols).
 */
#ifndef PM_TEST_INTERNALS_H
#define PM_TEST_INTERNALS_H

#include <stdint.h>
#include <stdio.h>
#include <string.h>
#include <sys/types.h>

#include "supervisor/cluster.h"
#include "hub/hub_core.h"
#include "hub/hub_int.h" /* pm__hub_purge_due */
#include "mesh/mesh_int.h"
#include "supervisor/options.h"
#include "base/defaults.h"
#include "supervisor/spare.h"
#include "os/loop.h"
#include "worker/node.h"

/* ------------------------------------------------------------ supervisor */

static inline int pm_test_slot_state(const pm_cluster *c, unsigned i)
{
    return c->slots[i].state;
}

static inline uint64_t pm_test_slot_incarnation(const pm_cluster *c, unsigned i)
{
    return c->slots[i].incarnation;
}

/* The read end of slot i's captured stdout (stream 0) or stderr (1), or
 * -1. */
static inline int pm_test_slot_output_fd(const pm_cluster *c, unsigned i, int stream)
{
    return c->slots[i].out.s[stream].fd;
}

/* Bytes of the line slot i's stream (0 stdout, 1 stderr) is assembling:
 * read from the pipe, not yet ended by a '\n'. */
static inline size_t pm_test_slot_output_pending(const pm_cluster *c, unsigned i, int stream)
{
    return c->slots[i].out.s[stream].len;
}

/* Lines dropped by the rate limit that slot i's stream keeps for the
 * incarnation's end. */
static inline unsigned pm_test_slot_output_kept(const pm_cluster *c, unsigned i, int stream)
{
    return c->slots[i].out.mem != NULL ? c->slots[i].out.mem->keep[stream].n : 0;
}

/* The state of slot i's last crash report (PM_CRASH_*), read in place:
 * pm_cluster_slot_info would copy the report into the caller's memory. */
static inline int pm_test_slot_crash_state(const pm_cluster *c, unsigned i)
{
    return c->slots[i].crash != NULL ? c->slots[i].crash->state : PM_CRASH_NONE;
}

/* Captured lines the rate limit dropped for good, every slot together. */
static inline uint64_t pm_test_output_suppressed(const pm_cluster *c)
{
    return c->output.suppressed;
}

/* Frames the hub dropped from slot i as malformed. */
static inline uint64_t pm_test_slot_malformed(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].malformed;
}

/* Frames relayed from slot i. */
static inline uint64_t pm_test_slot_relayed(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].relayed;
}

/* Undeliverable notices sent to slot i. */
static inline uint64_t pm_test_slot_undeliverable(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].undeliverable;
}

/* Requests relayed to slot i and not yet answered. */
static inline uint32_t pm_test_slot_inflight(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].ninflight;
}

/* The hub's queue of frames waiting for room in slot i's ring. */
static inline uint32_t pm_test_slot_queued_frames(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].q_frames;
}

static inline size_t pm_test_slot_queued_bytes(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].q_bytes;
}

/* Frames the hub has copied into a queue since the start, and the times a
 * sender was held with its frame left in its own ring instead (a full
 * destination, nothing for anyone else behind it). */
static inline uint64_t pm_test_hub_frames_queued(const pm_cluster *c)
{
    return c->hub->frames_queued;
}

static inline uint64_t pm_test_hub_left_waits(const pm_cluster *c)
{
    return c->hub->left_waits;
}

/* -1, or: slot i is not read because its frames waiting in the hub reached
 * their bound (or its destination is full and its frame was left in its
 * ring); the destination of the frame that did not fit. */
static inline int pm_test_slot_blocked_on(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].blocked_on;
}

/* Times host `name`'s link held a sender: its output queue was full
 * (*queue), a remote port's window was full (*window). -1: no such link. */
static inline int pm_test_link_waits(pm_cluster *c, const char *name, uint64_t *queue,
                                     uint64_t *window)
{
    int idx = pm__hub_host_index(c->hub, name);
    if (idx <= 0 || c->hub->links == NULL)
        return -1;
    *queue = c->hub->links[idx].held_waits;
    *window = c->hub->links[idx].window_waits;
    return 0;
}

/* Host `name`'s link: 1 while a large message is being sent over it
 * (*off: bytes sent so far), 0 when none, -1 no such link. */
static inline int pm_test_link_tx(pm_cluster *c, const char *name, uint64_t *off)
{
    int idx = pm__hub_host_index(c->hub, name);
    if (idx <= 0 || c->hub->links == NULL)
        return -1;
    *off = c->hub->links[idx].tx_off;
    return c->hub->links[idx].tx_fd >= 0;
}

/* Marks the channels (and spares) of every slot but `except` as copied by
 * a fork (nofork 0, as where MADV_DONTFORK failed), or back (on 0): a
 * fork child's drop plan then lists their mappings to unmap, which the
 * child finds not mapped (they were not copied) and unmaps harmlessly.
 * The plan's list of mappings grows past its first size that way. */
static inline void pm_test_pretend_copied(pm_cluster *c, unsigned except, int on)
{
    for (unsigned i = 0; i < c->nslots; i++) {
        if (i == except)
            continue;
        c->slots[i].channel.nofork = !on;
        if (c->slots[i].spare != NULL)
            c->slots[i].spare->nofork = !on;
    }
}

/* The inode of slot i's shared memory, from the supervisor's mapping of it
 * in /proc/self/maps (its memfd is closed once the worker runs:
 * pm__channel_drop_worker_ends); 0 when it has none. */
static inline unsigned long long pm_test_slot_memfd_ino(const pm_cluster *c, unsigned i)
{
    const void *at = c->slots[i].channel.map;
    FILE *f = fopen("/proc/self/maps", "r");
    if (at == NULL || f == NULL) {
        if (f != NULL)
            fclose(f);
        return 0;
    }
    char line[512];
    unsigned long long ino = 0;
    while (ino == 0 && fgets(line, sizeof(line), f) != NULL) {
        unsigned long start;
        unsigned long long n;
        if (sscanf(line, "%lx-%*x %*s %*s %*s %llu", &start, &n) == 2 && start == (uintptr_t)at)
            ino = n;
    }
    fclose(f);
    return ino;
}

/* The supervisor's fds of slot i's running incarnation that only its
 * worker uses (its memfd, its doorbell's end): -1 each once it runs. */
static inline int pm_test_slot_worker_ends(const pm_cluster *c, unsigned i, int *memfd, int *node_efd)
{
    *memfd = c->slots[i].channel.memfd;
    *node_efd = c->slots[i].channel.node_efd;
    return 0;
}

/* Where the slot table is and its bytes (a fork-mode worker reads its
 * inherited copy: test_fork_worker_has_no_slot_table). */
static inline void pm_test_slot_table(const pm_cluster *c, const unsigned char **at, size_t *len)
{
    *at = (const unsigned char *)c->slots;
    *len = c->nslots * sizeof(*c->slots);
}

/* 1 once the loop made the successors (spare, standby, cgroup leaf) of
 * the slots that became ready inside pm_cluster_spawn: it makes them on the
 * turns after the spawn, so the supervisor's fd count settles only then. */
static inline int pm_test_successors_made(const pm_cluster *c)
{
    return !c->prepare_due;
}

/* The memfd of slot i's spare channel (the next incarnation's, prepared
 * ahead), or -1 when it has none. */
static inline int pm_test_slot_spare_memfd(const pm_cluster *c, unsigned i)
{
    return c->slots[i].spare != NULL ? c->slots[i].spare->memfd : -1;
}

/* Slot i's notify socket (sd_notify readiness), and the one made ahead
 * with its spare for the next incarnation; -1 when it has none. */
static inline int pm_test_slot_notify_fd(const pm_cluster *c, unsigned i)
{
    return c->slots[i].notify_fd;
}

static inline int pm_test_slot_spare_notify(const pm_cluster *c, unsigned i)
{
    return c->slots[i].spare != NULL ? pm__spare_of(&c->slots[i])->notify_fd : -1;
}

/* The read end of slot i's spare stdout (k 0) or stderr (k 1) pipe, made
 * ahead with the spare under captured output, or -1 when it has none. */
static inline int pm_test_slot_spare_out(const pm_cluster *c, unsigned i, int k)
{
    return c->slots[i].spare != NULL ? pm__spare_of(&c->slots[i])->out[k][0] : -1;
}

/* The read end of slot i's running incarnation's stdout (k 0) or stderr
 * (k 1) pipe, -1 when its output is not captured. */
static inline int pm_test_slot_out(const pm_cluster *c, unsigned i, int k)
{
    return c->slots[i].out.s[k].fd;
}

/* The pid of slot i's warm standby (pm_options_set_warm_standby), 0 when
 * it has none. */
static inline pid_t pm_test_slot_standby_pid(const pm_cluster *c, unsigned i)
{
    return c->slots[i].standby.pid;
}

/* The supervisor's end of slot i's standby's go eventfd; the standby
 * waits in a read of the same fd number (a fork keeps the numbers). */
static inline int pm_test_slot_standby_go_fd(const pm_cluster *c, unsigned i)
{
    return c->slots[i].standby.go_fd;
}

/* How many starts took a warm standby so far. */
static inline uint64_t pm_test_standby_taken(const pm_cluster *c)
{
    return c->standby_taken;
}

/* The worker's end of slot i's fd socket (large messages), as the
 * supervisor holds it. */
static inline int pm_test_slot_node_sock(const pm_cluster *c, unsigned i)
{
    return c->slots[i].channel.node_sock;
}

/* Large messages' fds the hub holds in its queues for slot i as a sender,
 * and for main (PM__HOLD_MAX_FDS each). */
static inline uint32_t pm_test_slot_held_fds(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].held_fds;
}

/* 1 while slot i's fd socket has refused one of the hub's records and the
 * hub waits for room in it (hub_queue.c). */
static inline int pm_test_slot_sock_full(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].sock_full;
}

static inline uint32_t pm_test_main_held_fds(const pm_cluster *c)
{
    return c->hub->main_held_fds;
}

/* System calls the supervisor's loop made (waits and submissions), from
 * the head loop.h publishes. */
static inline uint64_t pm_test_loop_syscalls(const pm_cluster *c)
{
    return ((const struct pm__loop_head *)(const void *)c->loop)->syscalls;
}

/* Requests slot i has in flight (to anyone). */
static inline uint32_t pm_test_requests_out(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].requests_out;
}

/* Entry i of slot's table of requests in flight to it: its requester
 * (a port, PM__NODE_MAIN), request id, the requester's deadline (0: none)
 * and when the hub forgets it (hub_core.c pm__hub_add_inflight). */
typedef struct {
    uint32_t requester;
    uint64_t id;
    int64_t deadline_ms, expires_ms;
} pm_test_inflight;

static inline pm_test_inflight pm_test_inflight_entry(const pm_cluster *c, unsigned slot,
                                                      uint32_t i)
{
    const pm__inflight *e = &c->hub->ports[slot].inflight[i];
    return (pm_test_inflight){e->requester, e->request_id, e->deadline_ms, e->expires_ms};
}

/* The hub's purge of expired requests, run now as if the clock said
 * now_ms (its timer would, once due): deterministic where waiting for the
 * timer would decide by the machine's speed. */
static inline void pm_test_purge_at(pm_cluster *c, uint64_t now_ms)
{
    c->hub->next_purge_ms = now_ms;
    pm__hub_purge_due(c->hub, now_ms);
}

/* 1 when the hub holds slot i's channel (from the spawn on, ready or
 * not). */
static inline int pm_test_port_attached(const pm_cluster *c, unsigned i)
{
    return c->hub->ports[i].channel != NULL;
}

/* Entries in every table, and those of main's in slot's. */
static inline uint64_t pm_test_hub_inflight_total(const pm__hub *h)
{
    return h->inflight_total;
}

static inline uint64_t pm_test_inflight_total(const pm_cluster *c)
{
    return pm_test_hub_inflight_total(c->hub);
}

static inline uint32_t pm_test_main_inflight(const pm_cluster *c, unsigned slot)
{
    return c->hub->ports[slot].main_inflight;
}

/* Shortens the maximum lifetime of a request in flight (default
 * PM__INFLIGHT_LIFETIME_MS), so a test can see it expire. */
static inline void pm_test_set_inflight_lifetime(pm_cluster *c, uint64_t ms)
{
    c->hub->inflight_lifetime_ms = ms;
}

/* The id the next pm_cluster_request gets is the one after this (ids wrap
 * within 1..INT_MAX). */
static inline void pm_test_set_last_request_id(pm_cluster *c, uint32_t id)
{
    c->hub->main_request_last_id = id;
}

/* Replies that arrived when nobody waited for them any more. */
static inline uint64_t pm_test_late_replies(const pm_cluster *c)
{
    return c->hub->late_replies;
}

/* 1 once the supervisor ran its first liveness check (a stall can only be
 * measured from one). */
static inline int pm_test_liveness_checked(const pm_cluster *c)
{
    return c->liveness->last_check_mono != 0;
}

/* PM__LOOP_URING or PM__LOOP_EPOLL. */
static inline int pm_test_loop_backend(const pm_cluster *c)
{
    return ((const struct pm__loop_head *)(const void *)c->loop)->backend;
}

/* Slot i's pidfd: -1 when it has none (no process, or a kernel without
 * pidfd_open: exits are then found by SIGCHLD and waitid, or by scanning). */
static inline int pm_test_slot_pidfd(const pm_cluster *c, unsigned i)
{
    return c->slots[i].pidfd;
}

/* 1 when exits are looked for by scanning (no pidfds and no signals). */
static inline int pm_test_poll_children(const pm_cluster *c)
{
    return c->poll_children;
}

/* The options object's fields, to assert the defaults the header states. */
static inline const struct pm_options *pm_test_options(const pm_options *o)
{
    return o;
}

/* ------------------------------------------------------------ worker side */

/* The worker's mapping of its own shared memory (the control block first). */
static inline void *pm_test_node_map(pm_node *n)
{
    return n->channel.map;
}

/* The crash record in the worker's control block (crash.h), to scribble. */
static inline struct pm__crash_rec *pm_test_node_crash_record(pm_node *n)
{
    return &((struct pm__ctl *)n->channel.map)->crash;
}

/* The worker's up ring (worker -> hub), to write raw frames into. */
static inline pm__ring *pm_test_node_tx(pm_node *n)
{
    return &n->channel.tx;
}

/* The worker's down ring (hub -> worker), to read raw frames from. */
static inline pm__ring *pm_test_node_rx(pm_node *n)
{
    return &n->channel.rx;
}

/* One frame written and published at once, as a worker's sends do
 * (reserve, copy, commit, publish): a raw frame into a ring. */
static inline int pm_test_ring_send(pm__ring *r, const void *data, size_t len)
{
    void *p;
    int rc = pm__ring_reserve(r, len, &p);
    if (rc < 0)
        return rc;
    memcpy(p, data, len);
    pm__ring_commit(r, len);
    pm__ring_publish(r);
    return 0;
}

/* The doorbell the worker rings to wake the hub. */
static inline int pm_test_node_hub_efd(const pm_node *n)
{
    return n->channel.hub_efd;
}

/* Replies (and notices about requests) the worker dropped because nobody
 * waited for them any more. */
/* A worker's channel (its fd socket and rings), for hostile large messages. */
static inline pm__channel *pm_test_node_channel(pm_node *n)
{
    return &n->channel;
}

static inline uint64_t pm_test_node_late_replies(const pm_node *n)
{
    return n->late_replies;
}

/* ------------------------------------------------------------ peer links */

/* A hub's counters for its link to host index `host` (hub_link.c). */
static inline uint64_t pm_test_link_forged(const pm__hub *h, unsigned host)
{
    return h->links[host].forged;
}

static inline uint64_t pm_test_link_malformed(const pm__hub *h, unsigned host)
{
    return h->links[host].malformed;
}

static inline uint64_t pm_test_hub_late_replies(const pm__hub *h)
{
    return h->late_replies;
}

/* Main's request id in the hub's table: its record, NULL if none. */
static inline pm__main_request *pm_test_main_request(const pm__hub *h, int id)
{
    for (size_t b = 0; b < h->main_request_buckets; b++)
        for (pm__main_request *r = h->main_requests[b]; r != NULL; r = r->hnext)
            if (r->id == (uint64_t)id)
                return r;
    return NULL;
}

/* Large messages a link abandoned or refused (hub_linkbig.c). */
static inline uint64_t pm_test_link_frag_dropped(const pm__hub *h, unsigned host)
{
    return h->links[host].frag_dropped;
}

/* Frames a hub built by a test dropped from port i as malformed. */
static inline uint64_t pm_test_hub_port_malformed(const pm__hub *h, unsigned i)
{
    return h->ports[i].malformed;
}

/* What holds port i of a hub built by a test back: its large messages
 * waiting in queues (PM__HOLD_MAX_FDS), and the port it is blocked on
 * (-1: none). */
static inline uint32_t pm_test_hub_port_held_fds(const pm__hub *h, unsigned i)
{
    return h->ports[i].held_fds;
}

static inline int pm_test_hub_port_blocked_on(const pm__hub *h, unsigned i)
{
    return h->ports[i].blocked_on;
}

/* The fd number in slot k of port i's records taken ahead (port.c), stale
 * once its frame was read. */
static inline int pm_test_hub_port_ahead_fd(const pm__hub *h, unsigned i, unsigned k)
{
    return h->ports[i].ahead[k].fd;
}

/* The spin budget a hub has learnt, in ns (pm__hub_spin), read and set. */
static inline uint32_t pm_test_hub_spin_budget(const pm__hub *h)
{
    return h->spin_budget;
}

static inline void pm_test_hub_set_spin_budget(pm__hub *h, uint32_t ns)
{
    h->spin_budget = ns;
}

/* The largest message a hub built by a test takes (pm_options_set_max_message). */
static inline void pm_test_hub_set_max_message(pm__hub *h, size_t max)
{
    h->max_message = max;
}

/* Frames for a host with no link up, answered -EHOSTUNREACH (or, for a
 * reply, dropped: its requester's hub answers it). */
static inline uint64_t pm_test_cluster_unreachable(const pm_cluster *c)
{
    return c->hub->unreachable;
}

/* The peer links' counters and the tests' ways to end them, read from the
 * mesh's state (mesh_int.h). Each takes NULL (no peer mode). */

/* Links up now. */
static inline unsigned pm_test_mesh_links_up(const pm__mesh *m)
{
    return m == NULL ? 0 : m->up;
}

/* Accepted connections whose handshake has not ended yet (the ones
 * PM__MESH_UNAUTH_MAX bounds, counted as mesh_accept.c counts them). */
static inline unsigned pm_test_mesh_unauth(const pm__mesh *m)
{
    unsigned n = 0;
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++) {
        const pm__mesh_conn *o = &m->conns[j];
        n += o->fd >= 0 && !o->linked && !o->lingering && o->peer < 0;
    }
    return n;
}

/* REKEY records sent and received by the connections open now. */
static inline void pm_test_mesh_rekeys(const pm__mesh *m, uint64_t *out, uint64_t *in)
{
    *out = *in = 0;
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0) {
            *out += m->conns[j].pc.rekeys_out;
            *in += m->conns[j].pc.rekeys_in;
        }
}

/* Batching over c's live peer links: frames sent, FRAMES records sealed,
 * frames staged now (sealed at the turn's end). */
static inline void pm_test_link_batch(const pm_cluster *c, uint64_t *frames, uint64_t *records,
                                      uint64_t *staged)
{
    *frames = *records = *staged = 0;
    for (unsigned j = 0; c->mesh != NULL && j < PM__MESH_CONNS; j++) {
        const pm__mesh_conn *k = &c->mesh->conns[j];
        if (k->fd < 0)
            continue;
        *frames += k->pc.frames_out;
        *records += k->pc.frame_records_out;
        *staged += k->pc.stage_n;
    }
}

/* The linger's bound (min(peer timeout, this), 1 s by default) made ms:
 * a test that sets it longer than any of its waits decides a linger's end
 * by what the peer does, never by the deadline. */
static inline void pm_test_mesh_set_linger_ms(pm__mesh *m, uint64_t ms)
{
    m->linger_ms = ms;
}

/* Orderly ends (doc/protocol.md 7): connections that lingered after our
 * CLOSE, whose peer answered it with its own CLOSE, whose wait ended at the
 * deadline, frames discarded after our CLOSE, and connections lingering now. */
static inline void pm_test_mesh_close_stats(const pm__mesh *m, uint64_t *lingered, uint64_t *answered,
                                            uint64_t *expired, uint64_t *discarded, unsigned *lingering)
{
    *lingered = *answered = *expired = *discarded = 0;
    *lingering = 0;
    if (m == NULL)
        return;
    *lingered = m->lingered;
    *answered = m->closes_answered;
    *expired = m->linger_expired;
    *discarded = m->linger_discarded;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        *lingering += m->conns[j].fd >= 0 && m->conns[j].lingering;
}

/* --peers-dns: resolutions that answered, that failed (or answered
 * nothing), and the addresses dialled now (our own excluded). */
static inline void pm_test_mesh_dns_stats(const pm__mesh *m, uint64_t *ok, uint64_t *failed,
                                          unsigned *targets)
{
    *ok = m == NULL ? 0 : m->dns_ok;
    *failed = m == NULL ? 0 : m->dns_failed;
    *targets = 0;
    for (unsigned d = 0; m != NULL && d < PM__PEERDNS_MAX; d++)
        *targets += m->dt[d].live && !m->dt[d].self;
}

/* Every linked connection's stream ends as if truncated; the links die at
 * the turn's end with what they staged unsent. */
static inline void pm_test_mesh_truncate(pm__mesh *m)
{
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked)
            (void)pm__pconn_eof(&m->conns[j].pc);
}

/* Ends every link now as a local shutdown does (CLOSE reason 0, reason
 * `local`): the orderly end, at the turn's end in pm__mesh_flush. */
static inline void pm_test_mesh_close(pm__mesh *m)
{
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked)
            pm__pconn_close(&m->conns[j].pc, PM__REC_CLOSE_SHUTDOWN, PM__PF_LOCAL);
}

/* The connection of m's one link up, or NULL: its REKEY state (the
 * deadline rekey_at_ms, pc.records_since_rekey) for check_peerops. */
static inline pm__mesh_conn *pm_test_mesh_up_conn(pm__mesh *m)
{
    for (unsigned j = 0; m != NULL && j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].linked &&
            m->conns[j].pc.state == PM__PC_UP)
            return &m->conns[j];
    return NULL;
}

/* When m resolves its --peers-dns name next (pm__now_ms), 0 while a
 * resolution is under way or without one. */
static inline uint64_t pm_test_mesh_dns_at(const pm__mesh *m)
{
    return m == NULL ? 0 : m->dns_at;
}

/* The REKEY bounds m's links use (records, ms). */
static inline void pm_test_mesh_rekey_bounds(const pm__mesh *m, uint64_t *records, uint64_t *ms)
{
    *records = m->env.cfg.rekey_records;
    *ms = m->env.cfg.rekey_ms;
}

/* A link's REKEY interval (records, ms; 0 keeps a default). */
static inline void pm_test_options_set_rekey(pm_options *o, uint64_t records, uint64_t ms)
{
    o->rekey_records = records != 0 ? records : PM__DEFAULT_REKEY_RECORDS;
    o->rekey_ms = ms != 0 ? ms : PM__DEFAULT_REKEY_MS;
}

/* A turn's work (turn.c, liveness.c): loop turns, the slots those turns
 * looked at, liveness checks and the slots they looked at. */
static inline uint64_t pm_test_cluster_turns(const pm_cluster *c)
{
    return c->turns;
}

static inline uint64_t pm_test_cluster_turn_visits(const pm_cluster *c)
{
    return c->turn_visits;
}

static inline uint64_t pm_test_liveness_checks(const pm_cluster *c)
{
    return c->liveness_checks;
}

static inline uint64_t pm_test_liveness_visits(const pm_cluster *c)
{
    return c->liveness_visits;
}

/* 1 when exits are found by scanning the slots (no pidfds, no signalfd). */
static inline int pm_test_cluster_polls_children(const pm_cluster *c)
{
    return c->poll_children;
}

#endif /* PM_TEST_INTERNALS_H */
