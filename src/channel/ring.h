/* SPDX-License-Identifier: MIT */
/*
 * ring.h - a single-producer/single-consumer ring of variable-length frames
 * in shared memory, between two processes that do not trust each other.
 *
 * Layout of one ring's region (see doc/design.md for the picture):
 *
 *   [0, 4096)            shared header: geometry line, producer line,
 *                        consumer line, each 128-byte aligned
 *   [4096, 4096 + cap)   data: records, 8-byte aligned, never split
 *
 * A record is an 8-byte header (u32 payload length, u32 flags: 0 a frame,
 * 1 padding) followed by the payload, padded to a multiple of 8. A record
 * that would cross the end of the data area is preceded by a padding record
 * filling the rest of it.
 * The indices are 64-bit byte counts that only grow; index & (cap - 1) is the
 * offset in the data area.
 *
 * Each process holds a pm__ring for its end. Geometry (capacity, mask, base
 * pointer, maximum frame) lives in that private struct and is never re-read
 * from shared memory. Every shared value (the other side's index, a record
 * header) is loaded once into a local and validated before use; a value that
 * cannot come from a correct peer poisons the ring and every later call
 * returns -EBADMSG.
 */
#ifndef PM_RING_H
#define PM_RING_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "base/internal.h"

#define PM__RING_HDR_SIZE 4096u
#define PM__RING_MIN_CAP ((uint64_t)4096)
#define PM__RING_MAX_CAP ((uint64_t)1 << 30)
#define PM__RING_DEFAULT_CAP ((uint64_t)1 << 20)
#define PM__RING_DEFAULT_MAX_FRAME (64u * 1024u)
#define PM__RING_DEFAULT_SPIN_NS 5000u
#define PM__RING_REC_HDR 8u
#define PM__RING_MAGIC 0x676e6972686d7070ull /* "ppmhring" */

enum pm__ring_role { PM__RING_PRODUCER = 1, PM__RING_CONSUMER = 2 };

/* The shared header. Only the creator writes the geometry line, and only the
 * end that trusts the creator (a worker trusts its supervisor) reads it. */
struct pm__ring_shared {
    uint64_t magic;
    uint64_t capacity;
    uint32_t max_frame;
    uint32_t version;
    /* Written only by the producer. */
    _Alignas(PM__CACHELINE) _Atomic uint64_t head;
    _Atomic uint32_t prod_waiting; /* producer is parked waiting for space:
                                      1 poll its eventfd, 2 in FUTEX_WAIT here */
    /* Written only by the consumer. */
    _Alignas(PM__CACHELINE) _Atomic uint64_t tail;
    _Atomic uint32_t cons_waiting; /* consumer is parked waiting for data (as above) */
};

typedef struct pm__ring {
    /* Private geometry: never re-read from shared memory. */
    struct pm__ring_shared *sh;
    unsigned char *data;
    uint64_t cap;
    uint64_t mask;
    uint32_t max_frame;
    uint32_t spin_ns; /* the longest spin before parking (0: park at once) */
    uint32_t spin_budget; /* what the next wait spins, learnt (pm__spin_learn) */
    int poisoned;
    int wake_fd; /* doorbell to write to wake the other end (an eventfd, or one end
                    of a socket pair where the other end is untrusted: channel.h),
                    or -1 */
    int park_fd; /* doorbell this end's event loop polls (the eventfd, or the
                    socket's end), or -1 (spin only) */
    int wake_sock; /* wake_fd is a socket (1), an eventfd (-1), not known yet (0) */
    int futex_ok; /* waits park in FUTEX_WAIT on the flag (0: refused, poll park_fd) */
    int park_hung; /* park_fd read end of file: nobody can ring it again (ring.c park) */

    /* Producer state. */
    uint64_t head;       /* next byte to write (reserved records included) */
    uint64_t published;  /* last head stored to shared memory */
    uint64_t tail_cache; /* last validated consumer index */
    uint64_t resv_at;    /* index of the reserved record */
    uint32_t resv_len;   /* its maximum payload length, 0 when none */

    /* Consumer state. */
    uint64_t tail;       /* next byte to read */
    uint64_t released;   /* last tail stored to shared memory */
    uint64_t head_cache; /* last validated producer index */
    const void *peek_ptr; /* the peeked frame (private copy of its bounds) */
    uint32_t peek_len;
    uint32_t peek_total; /* bytes to skip when the peeked frame is consumed */

    /* Counters (private, never trusted from shared memory). */
    uint64_t wakeups; /* wake-up system calls made */
    uint64_t parks;   /* times this end blocked */
} pm__ring;

/*
 * Adaptive spinning, for the ring's waits and the hub's loop. A spin pays
 * off only when the other end runs meanwhile on another CPU and answers
 * within the spin; otherwise it burns a CPU the other end may be waiting
 * for (two CPUs, three spinners) and then parks anyway. So the budget is
 * learnt from the last waits, never above the configured cap:
 * - the spin paid off after `waited` ns: cover twice that (never less
 *   than now, at least PM__SPIN_MIN_NS);
 * - it did not: halve the budget; below PM__SPIN_MIN_NS stop spinning;
 * - not spinning, and the park ended within PM__SPIN_PROBE_NS: the other
 *   end answers quickly again, spin twice that long next time.
 * A service idle between requests (waits of milliseconds) stops spinning
 * after a few waits; a busy round trip keeps its spin; on one CPU, where a
 * spin can never pay off, the budget keeps falling back to nothing.
 */
#define PM__SPIN_START_NS 50000u
#define PM__SPIN_MIN_NS 1000u
#define PM__SPIN_PROBE_NS 50000u
/* Two clock reads of one spin further apart than this: the spinner was
 * descheduled in between, so no CPU was free for it. It stops at once and
 * forgets its budget (a spin that loses its CPU delays whoever took it). */
#define PM__SPIN_PREEMPT_NS 20000u

/* One pause of a spin: tells the CPU we busy-wait (a sibling hyperthread
 * gets the core, the loop exits its speculation cheaply). */
static inline void pm__cpu_relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#elif defined(__aarch64__)
    __asm__ __volatile__("yield" ::: "memory");
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

/* The CPUs this process may run on (its affinity mask, else the online
 * count), read once per process: what a spin gate compares with. */
unsigned pm__spin_cpus(void);

/* Whether a spin may start, given how many other processes on the path of
 * a message are known to be spinning: only while a CPU is left for the one
 * doing the work (fewer than cpus - 1 others spin). */
static inline int pm__spin_gate(unsigned cpus, unsigned others)
{
    return cpus >= 2 && others < cpus - 1;
}

/* A spin was preempted (PM__SPIN_PREEMPT_NS): nothing to learn from how
 * long it lasted except that it must not spin again until a park shows
 * that the other end answers quickly (the probe of pm__spin_learn). */
static inline int pm__spin_preempted(uint64_t prev, uint64_t now)
{
    return now - prev > PM__SPIN_PREEMPT_NS;
}

static inline uint32_t pm__spin_learn(uint32_t budget, uint32_t cap, int paid, uint64_t waited)
{
    uint64_t b;
    if (paid) {
        b = 2 * waited;
        if (b < budget)
            b = budget;
        if (b < PM__SPIN_MIN_NS)
            b = PM__SPIN_MIN_NS;
    } else if (budget > 0) {
        b = budget / 2;
        if (b < PM__SPIN_MIN_NS)
            b = 0;
    } else {
        b = waited < PM__SPIN_PROBE_NS ? 2 * waited + PM__SPIN_MIN_NS : 0;
    }
    return b < cap ? (uint32_t)b : cap;
}

/* Bytes a ring of `cap` bytes needs in a shared region (header + data). */
size_t pm__ring_region_size(uint64_t cap);

/* Checks a geometry: cap a power of two in [4 KiB, 1 GiB], max_frame in
 * [1, cap / 2 - 8] so that an empty ring always takes a maximal frame even
 * behind a padding record. Returns 0, -EINVAL or -EMSGSIZE. */
int pm__ring_check_geometry(uint64_t cap, uint32_t max_frame);

/* The creator formats a zeroed region: writes the geometry, zero indices. */
int pm__ring_format(void *region, uint64_t cap, uint32_t max_frame);

/* Attaches one end. Geometry comes from the caller's private knowledge.
 * wake_fd is written to wake the other end, park_fd is waited on; either may
 * be -1 (no parking: wait calls spin only). The ring does not own the fds. */
int pm__ring_attach(pm__ring *r, void *region, uint64_t cap, uint32_t max_frame, int role,
                    int wake_fd, int park_fd);

/* ---- producer ---- */

/* Reserves room for a frame of up to len payload bytes and points *payload at
 * it (8-byte aligned). Returns 0, -EAGAIN when the ring is full, -EMSGSIZE
 * when len exceeds the maximum frame, -EINVAL for len 0 or a reservation
 * already open, -EBADMSG when poisoned. Nothing is visible to the consumer
 * until commit and publish. */
int pm__ring_reserve(pm__ring *r, size_t len, void **payload);

/* Seals the reserved frame with its real length (1..reserved length). */
void pm__ring_commit(pm__ring *r, size_t len);
/* Gives up the reservation made last (nothing was written to the ring's
 * indices yet): a large message whose fd could not be sent (bigmsg.h). */
void pm__ring_unreserve(pm__ring *r);

/* Makes every committed frame visible and wakes a parked consumer.
 * Returns 1 if a wake-up system call was made, 0 if not. */
int pm__ring_publish(pm__ring *r);

/* Waits until a frame of len bytes fits: spins, then parks as
 * pm__ring_wait does.
 * Returns 1 when it fits, 0 on timeout (timeout_ms < 0: forever), or a
 * negative errno. */
int pm__ring_wait_space(pm__ring *r, size_t len, int timeout_ms);

/* The producer's index: where the next frame starts, so just past the
 * last one committed. */
static inline uint64_t pm__ring_head(const pm__ring *r)
{
    return r->head;
}

/* 1 when the consumer has handed back everything before pos (an index
 * pm__ring_head returned), 0 if not yet, -EBADMSG; and a wait for it that
 * spins, then parks as pm__ring_wait_space does (1, 0 on timeout, or a
 * negative errno). The consumer releases in order, so this is "it has
 * read the frame that ends at pos". */
int pm__ring_consumed(pm__ring *r, uint64_t pos);
int pm__ring_wait_consumed(pm__ring *r, uint64_t pos, int timeout_ms);

/* For event loops, the producer's mirror of pm__ring_arm: announce that we
 * wait for room for len bytes. Returns 1 (flag cleared) if it fits already,
 * 0 when armed (the consumer's next release writes its wake_fd), -EBADMSG. */
int pm__ring_arm_space(pm__ring *r, size_t len);
void pm__ring_disarm_space(pm__ring *r);

/* ---- consumer ---- */

/* Looks at the next frame without consuming it: 1 with *payload and *len set
 * (pointing into shared memory: copy before parsing), 0 when empty, -EBADMSG
 * when the producer's index or the record is impossible. Peeking twice
 * returns the same frame and bounds. */
int pm__ring_peek(pm__ring *r, const void **payload, size_t *len);

/* Drops the frame returned by the last successful peek. */
void pm__ring_consume(pm__ring *r);

/* Hands the consumed space back to the producer and wakes it if it is parked
 * waiting for space. Returns 1 if a wake-up system call was made. */
int pm__ring_release(pm__ring *r);

/* Spins for spin_ns, then parks (FUTEX_WAIT on its wait flag; poll on
 * park_fd where futexes are refused) until a frame is there. The producer
 * wakes it with FUTEX_WAKE, or writes wake_fd for an end armed with
 * pm__ring_arm. Returns 1 when a frame can be peeked, 0 on timeout, or a
 * negative errno (-EBADMSG). */
int pm__ring_wait(pm__ring *r, int timeout_ms);

/* pm__ring_wait that spins only if may_spin (a spin gate said a CPU is free
 * for it); otherwise it parks at once after one check. */
int pm__ring_wait_gated(pm__ring *r, int timeout_ms, int may_spin);

/* 1 while the consumer end has announced that it sleeps (its wait flag is
 * set), 0 while it is awake: working or spinning. The producer's view of
 * its consumer, for a spin gate (node_messaging.c: a worker's hub). */
int pm__ring_consumer_parked(const pm__ring *r);

/* For event loops that wait on many rings: announce that this consumer is
 * about to sleep. Returns 1 (and stays awake) if a frame arrived meanwhile,
 * 0 when armed (the producer will now write wake_fd), or -EBADMSG. */
int pm__ring_arm(pm__ring *r);

/* The loop woke up: the producer need not write wake_fd any more. */
void pm__ring_disarm(pm__ring *r);

/* 1 when the consumer has nothing to read (refreshes the producer index). */
int pm__ring_empty(pm__ring *r);

/* Looks at the records published after the frame peeked last (or after
 * *pos, a position an earlier scan returned, when that is further on)
 * without consuming anything, calling fn with each record's payload (in
 * shared memory: copy before parsing) until fn returns non-zero.
 * Returns 1 when fn did, 0 when every record up to the producer's index
 * was seen (*pos is then that index), -1 when a record is impossible (not
 * poisoned for that: the next peek judges it) or the producer's index is
 * (poisoned, as a peek would). Speculative: a producer that rewrites what
 * it published only misleads decisions about itself. */
int pm__ring_scan(pm__ring *r, uint64_t *pos, int (*fn)(const void *payload, size_t len, void *arg),
                  void *arg);

/* pm__ring_arm for a consumer that leaves the frames up to pos unread on
 * purpose (a held sender): announce the wait, then 1 (and disarmed) if
 * something was published beyond pos, 0 when armed, -EBADMSG. */
int pm__ring_arm_beyond(pm__ring *r, uint64_t pos);

/* 1 when something was published beyond pos (no arming). */
int pm__ring_beyond(pm__ring *r, uint64_t pos);

#endif /* PM_RING_H */
