/* SPDX-License-Identifier: MIT */
/*
 * port.c - a local worker's port: the hub's side of its ring pair. Reads the
 * worker's up ring (copy, validate, stamp the source from the ring), hands
 * data frames to the router (pm__hub_relay, hub_route.c: a direct call, once per
 * frame read) and handshake frames to the owner, and decides when the worker
 * must ring the hub's doorbell. The top of the hub: nothing in it calls
 * port.c, only its owner does.
 */
#define _GNU_SOURCE
#include "hub.h"

#include <string.h>

#include "channel/bigmsg.h"
#include "channel/proto.h"
#include "hub_int.h"

int pm__hub_port_open(pm__hub *h, unsigned i, pm__channel *channel, uint64_t incarnation)
{
    pm__port *p = &h->ports[i];
    p->channel = channel;
    p->incarnation = incarnation;
    /* What the incarnation before left (its flags, holds, any-worker
     * record) went when its port closed (pm__hub_port_close; a port never
     * opened is zero), and the state is the owner's to set
     * (pm__hub_port_set_state; the cluster sets STARTING first). */
    p->reading = 1;
    pm__hub_port_drop_ahead(p);
    p->big_owed = 0;
    /* Announce that the hub waits on this ring before the worker can say
     * hello, so its first publish rings the doorbell. */
    if (pm__ring_arm(&channel->rx) != 0) {
        pm__hub_mark_busy(h, p);
        return 1;
    }
    return 0;
}

void pm__hub_port_set_state(pm__hub *h, unsigned i, int state)
{
    h->ports[i].state = state;
}

/* Its busy and want_arm flags may stay as they are: every visit of a port
 * (pm__hub_port_service, pm__hub_arm_idle, pm__hub_any_arrived) looks at
 * reading first, and the port's close clears them. */
void pm__hub_port_cut(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    p->reading = 0;
}

/* Takes every record waiting on p's socket (bigmsg.h): each one checked
 * as a record (magic, the next sequence, exactly one fd, nothing
 * truncated) and kept, in order, until the frame announcing it is read.
 * Taken at once, so that nothing a worker sends waits in the kernel,
 * where each fd would count against its user's fds in flight
 * (RLIMIT_NOFILE, ETOOMANYREFS) for as long as it liked: a worker could
 * raise its end's send buffer and queue thousands. 0, or -EPROTO: a bad
 * record, or one more than PM__BIGMSG_AHEAD_MAX ahead of its frame (a
 * worker waits before that, node_messaging.c). Bounded: at most AHEAD_MAX + 1
 * records per call. Only for a port being read, whose channel
 * (pm__channel_create's) has its socket from open to close. */
static int take_records(pm__port *p)
{
    for (;;) {
        uint32_t seq = pm__bigmsg_next(p->channel->rx_seq);
        int fd;
        int rc = pm__bigmsg_recv(p->channel->sock, seq, &fd);
        if (rc == -EAGAIN)
            return 0;
        if (rc < 0)
            return -EPROTO;
        if (p->ahead_n == PM__BIGMSG_AHEAD_MAX) {
            pm__close(fd);
            return -EPROTO;
        }
        unsigned k = (p->ahead_head + p->ahead_n) % PM__BIGMSG_AHEAD_MAX;
        p->ahead[k].fd = fd;
        p->ahead[k].seq = seq;
        p->ahead_n++;
        p->channel->rx_seq = seq;
    }
}

void pm__hub_port_records(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    if (!p->reading)
        return;
    if (take_records(p) < 0) {
        p->malformed++;
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
    }
}

/* The fd of the large message p's frame announces, taken and checked once
 * (p->rx_fd keeps it while p is held back and the frame is read again).
 * 0, or -EPROTO: the announcement is malformed, its record is not the
 * oldest one taken (a frame without its record, or a record without its
 * frame), a record was bad (take_records), or the fd is not a sealed
 * memfd of the announced length within the cluster's maximum, open for
 * reading, on tmpfs and with no hole (pm__bigmsg_check: its sender paid
 * for every page). Checked without mapping: the hub never maps what it
 * routes between workers. */
static int take_fd(pm__hub *h, pm__port *p, const void *payload)
{
    if (p->rx_fd >= 0)
        return 0;
    /* A private copy: the worker may rewrite the shared bytes. */
    unsigned char copy[PM__ANNOUNCE_SIZE];
    memcpy(copy, payload, sizeof(copy));
    /* Zeroed: a decode that fails writes nothing, and sequence 0 is no
     * record's (pm__bigmsg_next), so nothing it left could match one. */
    pm__announce a = {0};
    if (pm__announce_decode(copy, sizeof(copy), &a) < 0)
        return -EPROTO;
    /* The record went out before its frame: if the socket's completion
     * has not been handled yet, it is waiting there now. */
    if (p->ahead_n == 0 && take_records(p) < 0)
        return -EPROTO;
    if (p->ahead_n == 0 || p->ahead[p->ahead_head].seq != a.seq)
        return -EPROTO;
    int fd = p->ahead[p->ahead_head].fd;
    p->ahead_head = (p->ahead_head + 1) % PM__BIGMSG_AHEAD_MAX;
    p->ahead_n--;
    if (pm__bigmsg_check(fd, a.len, h->max_message) < 0) {
        pm__close(fd);
        return -EPROTO;
    }
    p->rx_fd = fd;
    p->rx_len = a.len;
    return 0;
}

/*
 * An UNDELIVERABLE frame from p: p could not map a large message it was
 * sent (its address space is full) and skipped it (node_messaging.c, refuse_big).
 * Its sender is told -EMSGSIZE, as by any notice, whatever error p wrote
 * (a worker must not make another's receive return -ESHUTDOWN, say). p
 * may only refuse what it was sent: each refusal spends one large message
 * pushed to p (big_owed), and one about a request must match a request p
 * received and has not answered, like a reply (and answers it). Anything
 * else is dropped and counted as malformed.
 */
static void refusal(pm__hub *h, pm__port *p, const pm__frame_hdr *f)
{
    if (f->len != 0 || f->flags != 0 || p->big_owed == 0 ||
        (f->dst_host != PM__HOST_LOCAL && f->dst > 0xFFFFu)) {
        p->malformed++;
        return;
    }
    uint32_t to = f->dst_host == PM__HOST_LOCAL ? f->dst : PM__REMOTE_NODE(f->dst_host, f->dst);
    uint64_t to_inc = f->dst_inc;
    if (f->request_id != 0) {
        pm__inflight e;
        if (!pm__hub_take_inflight(h, p, to, f->request_id, &e)) {
            h->late_replies++;
            return;
        }
        to_inc = e.requester_inc;
    }
    p->big_owed--;
    pm__hub_notice_at(h, to, to_inc, PM__HOST_LOCAL, p->index, p->incarnation, f->request_id,
                      -EMSGSIZE);
}

/* A lane's switch-over marker (doc/design.md, "Direct lanes", Order) is
 * relayed like a message, and only between two incarnations the book
 * says share a lane: a worker cannot use it to reach anyone else. */
static int mark_ok(const pm__hub *h, const pm__port *p, const pm__frame_hdr *f)
{
    return f->dst_host == PM__HOST_LOCAL && f->len == 4 && f->request_id == 0 &&
           f->flags == 0 && f->deadline_ms == 0 && f->error == 0 &&
           pm__hub_lane_between(h, p->index, p->incarnation, f->dst, f->dst_inc);
}

/* One frame from p's ring, already copied and validated by the codec: 0 to
 * go on reading, 1 to stop this turn (the destination is full, or p was cut
 * off). */
static int take_frame(pm__hub *h, pm__port *p, pm__frame_hdr *f, const void *payload)
{
    if ((f->flags & PM__FF_MEMFD) != 0 && take_fd(h, p, payload) < 0) {
        p->malformed++;
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
        return 1;
    }
    /* The ring admits frames up to PM__CHANNEL_MAX_FRAME (room for INIT), but
     * nothing a worker may send is longer than PM_MAX_PAYLOAD: every
     * consumer of a worker's frame (main's receive buffer, another worker's
     * recv) is sized for that. Checked here, once, for every destination: a
     * longer frame is a protocol fault. */
    if (f->len > PM_MAX_PAYLOAD) {
        p->malformed++;
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
        return 1;
    }
    if (f->type == PM__FT_LANE_MARK && !mark_ok(h, p, f)) {
        pm__ring_consume(&p->channel->rx);
        p->malformed++;
        return 0;
    }
    if (f->type == PM__FT_MSG || f->type == PM__FT_REQUEST || f->type == PM__FT_REPLY ||
        f->type == PM__FT_LANE_MARK) {
        if (p->state != PM__PORT_READY && p->state != PM__PORT_STOPPING) {
            pm__ring_consume(&p->channel->rx);
            pm__close(p->rx_fd);
            p->rx_fd = -1;
            p->malformed++; /* traffic before ready */
            return 0;
        }
        /* Identity comes from the ring, never from the frame. */
        f->src = p->index;
        f->src_inc = p->incarnation;
        f->src_host = PM__HOST_LOCAL;
        h->cur_fd = p->rx_fd;
        h->cur_len = p->rx_len;
        p->rx_fd = -1;
        int rc = pm__hub_relay(h, p, f, payload);
        if (rc == -EAGAIN) {
            p->rx_fd = h->cur_fd; /* kept for the next read of this frame */
            h->cur_fd = -1;
            return 1; /* the destination is full: leave it in the ring */
        }
        /* Passed on (the hub set cur_fd to -1), delivered to main (mapped
         * and unmapped), or dropped: the hub's reference goes now. */
        pm__close(h->cur_fd);
        h->cur_fd = -1;
        pm__ring_consume(&p->channel->rx);
        if (f->type != PM__FT_LANE_MARK)
            pm__hub_lane_count(h, p, f);
        return 0;
    }
    if (f->type == PM__FT_UNDELIVERABLE &&
        (p->state == PM__PORT_READY || p->state == PM__PORT_STOPPING)) {
        pm__frame_hdr u = *f; /* the header is a private copy; nothing else is read */
        pm__ring_consume(&p->channel->rx);
        refusal(h, p, &u);
        return 0;
    }
    if (f->type != PM__FT_HELLO && f->type != PM__FT_READY) {
        pm__ring_consume(&p->channel->rx);
        p->malformed++; /* a type only the hub sends */
        return 0;
    }
    /* Handshake frames are tiny: copy before the record is released, then
     * let the owner judge them. */
    unsigned char copy[PM__HUB_CONTROL_MAX];
    size_t len = f->type == PM__FT_READY ? 0 /* any payload is ignored */ : f->len;
    if (len <= sizeof(copy) && len > 0)
        memcpy(copy, payload, len);
    pm__ring_consume(&p->channel->rx);
    if (len > sizeof(copy)) {
        h->ops->fault(h->owner, p->index, PM_REASON_PROTOCOL);
        return 1;
    }
    h->ops->control(h->owner, p->index, f->type, copy, len);
    return !p->reading;
}

/* Reads up to one turn's worth of frames from the port's up ring. */
static void read_ring(pm__hub *h, pm__port *p)
{
    p->busy = 0;
    p->want_arm = 0;
    int drained = 0;
    for (int i = 0; i < PM__FRAMES_PER_TURN && p->reading && p->blocked_on == -1; i++) {
        pm__frame_hdr f;
        const void *payload;
        int rc = pm__frame_recv(&p->channel->rx, PM__CHANNEL_MAX_FRAME, &f, &payload);
        if (rc == 0) {
            drained = 1;
            break;
        }
        h->active = 1;
        if (rc == -EBADMSG) {
            h->ops->fault(h->owner, p->index, PM_REASON_CORRUPT_RING);
            return;
        }
        if (rc < 0) {
            p->malformed++;
            continue;
        }
        if (take_frame(h, p, &f, payload))
            break;
    }
    if (!p->reading)
        return;
    pm__ring_release(&p->channel->rx);
    if (p->blocked_on != -1 && !p->left)
        return; /* a blocked sender (a full destination or link) is read again
                   when it is unblocked */
    if (drained || p->left) {
        /* Armed just before the loop sleeps (arm_idle), so a busy hub lets
         * its workers publish without ringing. Until then the port is on
         * the arm list, which is what keeps a frame published meanwhile
         * from being left unread: arm_idle (or the spin, any_arrived)
         * looks at its ring again before the loop can sleep. A sender
         * held with its frame left in its ring is armed the same way,
         * beyond what was scanned: its next frame may be for someone
         * else, who must not wait for its held destination. */
        p->want_arm = 1;
        if (!p->in_arm) {
            p->in_arm = 1;
            h->arm.v[h->arm.n++] = p->index;
        }
    } else {
        pm__hub_mark_busy(h, p); /* its batch is over: at the end of the next pass */
    }
}

/* A sender held with its frame left in its ring published more: read it
 * again at once if a frame behind is for anyone else (it must not wait for
 * the held destination; the full destination's frames then go to its
 * queue as usual), else stay held and armed beyond what was seen. */
static int still_left(pm__hub *h, pm__port *p)
{
    pm__port *d = &h->ports[p->blocked_on];
    int rc = d->channel != NULL ? pm__ring_scan(&p->channel->rx, &p->scan_pos, pm__hub_not_for, d) : 1;
    if (rc == 0) {
        p->want_arm = 1;
        if (!p->in_arm) {
            p->in_arm = 1;
            h->arm.v[h->arm.n++] = p->index;
        }
        return 1;
    }
    p->blocked_on = -1;
    p->left = 0;
    return 0;
}

void pm__hub_port_service(pm__hub *h, unsigned i)
{
    pm__port *p = &h->ports[i];
    if (!p->reading)
        return;
    if (p->q_head != NULL)
        pm__hub_flush(h, p); /* it made room in its down ring */
    if (!p->reading)
        return;
    pm__ring_disarm(&p->channel->rx);
    if (p->left && p->blocked_on >= 0 && still_left(h, p))
        return;
    read_ring(h, p);
}

/*
 * The arm protocol. Every readable port is in exactly one of these states
 * at the end of a turn, so no frame can wait in a ring that nothing will
 * look at:
 *  - on the ready list (busy: its batch cap was reached, it was unblocked,
 *    its queue has room; or its doorbell rang): serviced next turn, and
 *    the loop does not sleep while the list is not empty (pm__hub_any_busy);
 *  - on the arm list (want_arm: drained this turn, not armed yet): armed
 *    here before the loop sleeps;
 *  - armed (cons_waiting set in its ring): the worker rings the doorbell
 *    on its next publish, and the doorbell's completion puts it on the
 *    ready list (pm__hub_mark_rang);
 *  - blocked (blocked_on != -1: a full destination, or a full link) or cut
 *    off: not read on purpose; unblocking puts it on the ready list.
 * Only ports on the arm list are touched here: the cost is the ports that
 * drained this turn, not N.
 */
int pm__hub_arm_idle(pm__hub *h)
{
    int work = 0;
    for (unsigned k = 0; k < h->arm.n; k++) {
        pm__port *p = &h->ports[h->arm.v[k]];
        p->in_arm = 0;
        if (!p->want_arm)
            continue; /* serviced again since it drained, or cut off */
        p->want_arm = 0;
        if (!p->reading || (p->blocked_on != -1 && !p->left))
            continue;
        /* pm__ring_arm sets the flag, then (a full fence, paired with the
         * worker's after its publish) looks at the ring again: a frame
         * published before the worker could see the flag is found here and
         * the port goes back on the ready list instead of waiting for a
         * doorbell that will never ring. */
        int more = p->left ? pm__ring_arm_beyond(&p->channel->rx, p->scan_pos)
                           : pm__ring_arm(&p->channel->rx);
        if (more < 0) {
            h->ops->fault(h->owner, p->index, PM_REASON_CORRUPT_RING);
        } else if (more > 0) {
            pm__hub_mark_busy(h, p);
            work = 1;
        }
    }
    h->arm.n = 0;
    return work;
}

/* Spinning: only the ports drained since the last arm can have a frame
 * that rings nothing (they are not armed); armed ones ring their doorbell,
 * which the spin sees as a loop completion. */
int pm__hub_any_arrived(pm__hub *h)
{
    for (unsigned k = 0; k < h->arm.n; k++) {
        pm__port *p = &h->ports[h->arm.v[k]];
        if (!p->want_arm || !p->reading)
            continue;
        if (p->left ? pm__ring_beyond(&p->channel->rx, p->scan_pos) > 0
                    : p->blocked_on == -1 && !pm__ring_empty(&p->channel->rx)) {
            pm__hub_mark_busy(h, p);
            return 1;
        }
    }
    return 0;
}

/* The hub's spin cap in ns (pm_options_set_hub_spin_us, at most 1 s). */
static uint32_t hub_spin_cap(unsigned spin_us)
{
    return spin_us * 1000u;
}

/* Before the loop sleeps, after a turn that read frames (h->active) and
 * with spin_us > 0: spins up to the learnt budget (at most spin_us; see
 * pm__spin_learn) for a frame on a drained ring or for ready(arg), the
 * owner's loop having a completion. 1 when there is work; 0 and *t0 (when
 * the spin began, or 0) when the loop must sleep, so that the sleep's
 * length can be learnt from (pm__hub_spin_slept). */
int pm__hub_spin(pm__hub *h, unsigned spin_us, int (*ready)(void *arg), void *arg, uint64_t *t0)
{
    *t0 = 0;
    if (spin_us == 0)
        return 0;
    uint32_t cap = hub_spin_cap(spin_us);
    uint32_t budget = h->spin_budget < cap ? h->spin_budget : cap;
    uint64_t start = pm__now_ns(), now = start, prev = start;
    *t0 = start;
    /* The gate: the hub is the one spinner a relay path needs (the workers
     * park while it is awake, node_messaging.c may_spin), so it spins whenever a CPU
     * is left for the process doing the work: never on one CPU. */
    if (budget == 0 || !pm__spin_gate(pm__spin_cpus(), 0))
        return 0;
    do {
        if (pm__hub_any_arrived(h) || ready(arg)) {
            h->spin_budget = pm__spin_learn(h->spin_budget, cap, 1, now - start);
            return 1;
        }
        now = pm__now_ns();
        if (pm__spin_preempted(prev, now)) {
            /* Descheduled mid-spin: no CPU was free for it. Sleep now and
             * spin no more until a quick sleep says otherwise
             * (pm__hub_spin_slept). */
            h->spin_budget = 0;
            return 0;
        }
        prev = now;
    } while (now < start + budget);
    h->spin_budget = pm__spin_learn(budget, cap, 0, now - start);
    /* Halved already: pm__hub_spin_slept must not halve it again. */
    *t0 = 0;
    return 0;
}

/* After a sleep that followed a spin budget of 0: a sleep that ended soon
 * says a spin could pay off again. */
void pm__hub_spin_slept(pm__hub *h, unsigned spin_us, uint64_t t0)
{
    if (t0 != 0 && h->spin_budget == 0)
        h->spin_budget = pm__spin_learn(0, hub_spin_cap(spin_us), 0, pm__now_ns() - t0);
}

int pm__hub_any_busy(const pm__hub *h)
{
    return h->ready.n > 0;
}
