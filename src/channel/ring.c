/* SPDX-License-Identifier: MIT */
/*
 * ring.c - SPSC frame ring in shared memory; see ring.h for the layout and
 * doc/design.md for the rules the two ends follow.
 *
 * Memory ordering, in one paragraph. The producer writes records with plain
 * stores and then stores its index with release; the consumer loads that
 * index with acquire, so every byte of every record below the index is
 * visible to it. Symmetrically the consumer stores its index with release
 * after it has finished reading the records below it, and the producer loads
 * it with acquire before reusing that space. Nothing else needs ordering on
 * the fast path. Parking is a store-buffering (Dekker) pattern and needs a
 * full fence on both sides; see arm_flag() and wake_if_waiting().
 *
 * A wait flag says how the waiting end wants to be woken: WAIT_FD, an event
 * loop polls park_fd (pm__ring_arm), so the waker writes that eventfd;
 * WAIT_FUTEX, the end sleeps in FUTEX_WAIT on the flag itself
 * (spin_then_park), so the waker clears it and calls FUTEX_WAKE. A futex
 * park is one system call (a poll and an eventfd read would be two), and
 * the kernel's compare of the flag closes the window between the last
 * check and the sleep, as the eventfd's count does for WAIT_FD.
 */
#define _GNU_SOURCE
#include "ring.h"
#include "os/doorbell.h"

#include <linux/futex.h>
#include <poll.h>
#include <sched.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <time.h>

#define REC_PAD 1u /* record flag: padding up to the end of the data area */

/* Wait flag values (0: awake). */
#define WAIT_FD 1u    /* an event loop polls park_fd: write the eventfd */
#define WAIT_FUTEX 2u /* parked in FUTEX_WAIT on the flag: FUTEX_WAKE it */

/* One load of a record header. The atomic builtin makes it a single 64-bit
 * fetch: the compiler may not split it or load it again later, which matters
 * because the peer can change those bytes at any moment (double fetch). */
static inline uint64_t load_rec(const unsigned char *p)
{
    return __atomic_load_n((const uint64_t *)(const void *)p, __ATOMIC_RELAXED);
}

static inline void store_rec(unsigned char *p, uint32_t len, uint32_t flags)
{
    __atomic_store_n((uint64_t *)(void *)p, (uint64_t)len | ((uint64_t)flags << 32),
                     __ATOMIC_RELAXED);
}

PM__READY_TEXT static int poison(pm__ring *r)
{
    r->poisoned = 1;
    r->peek_ptr = NULL;
    return -EBADMSG;
}

PM__READY_TEXT size_t pm__ring_region_size(uint64_t cap)
{
    return PM__RING_HDR_SIZE + (size_t)cap;
}

PM__READY_TEXT int pm__ring_check_geometry(uint64_t cap, uint32_t max_frame)
{
    if (cap < PM__RING_MIN_CAP || cap > PM__RING_MAX_CAP || (cap & (cap - 1)) != 0)
        return -EINVAL;
    if (max_frame == 0)
        return -EINVAL;
    /* Worst case a frame needs its own size plus a padding record that fills
     * the rest of the data area; below cap/2 an empty ring always has room. */
    if ((uint64_t)max_frame + PM__RING_REC_HDR > cap / 2)
        return -EMSGSIZE;
    return 0;
}

int pm__ring_format(void *region, uint64_t cap, uint32_t max_frame)
{
    int rc = pm__ring_check_geometry(cap, max_frame);
    if (rc < 0)
        return rc;
    struct pm__ring_shared *sh = region;
    sh->magic = PM__RING_MAGIC;
    sh->capacity = cap;
    sh->max_frame = max_frame;
    sh->version = 1;
    atomic_store_explicit(&sh->head, 0, memory_order_relaxed);
    atomic_store_explicit(&sh->tail, 0, memory_order_relaxed);
    atomic_store_explicit(&sh->prod_waiting, 0, memory_order_relaxed);
    atomic_store_explicit(&sh->cons_waiting, 0, memory_order_relaxed);
    return 0;
}

PM__READY_TEXT int pm__ring_attach(pm__ring *r, void *region, uint64_t cap, uint32_t max_frame, int role,
                    int wake_fd, int park_fd)
{
    int rc = pm__ring_check_geometry(cap, max_frame);
    if (rc < 0)
        return rc;
    if (role != PM__RING_PRODUCER && role != PM__RING_CONSUMER)
        return -EINVAL;
    memset(r, 0, sizeof(*r));
    r->sh = region;
    r->data = (unsigned char *)region + PM__RING_HDR_SIZE;
    r->cap = cap;
    r->mask = cap - 1;
    r->max_frame = max_frame;
    r->spin_ns = PM__RING_DEFAULT_SPIN_NS;
    r->spin_budget = PM__SPIN_START_NS;
    r->wake_fd = wake_fd;
    r->park_fd = park_fd;
    r->futex_ok = 1;
    /* Start from the shared indices once, validated: attaching to a fresh
     * region they are 0; attaching later (a benchmark, a test) they must be
     * plausible or the ring starts poisoned. */
    uint64_t h = atomic_load_explicit(&r->sh->head, memory_order_acquire);
    uint64_t t = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    if (t > h || h - t > cap || ((h | t) & 7) != 0)
        return poison(r);
    if (role == PM__RING_PRODUCER) {
        r->head = r->published = h;
        r->tail_cache = t;
    } else {
        r->tail = r->released = t;
        r->head_cache = h;
    }
    return 0;
}

/* Writes the eventfd of the other end. The counter saturating (EAGAIN) is
 * harmless: the other end is then certainly going to wake up. */
PM__READY_TEXT static int wake(pm__ring *r)
{
    if (r->wake_fd < 0)
        return 0;
    uint64_t one = 1;
    /* A doorbell whose reader must not share our open file description is
     * one end of a socket pair (channel.c make_doorbells, hub_lane.c):
     * MSG_DONTWAIT makes this call non-blocking whatever anyone did to the
     * file's flags, and MSG_NOSIGNAL keeps a reader that is gone from
     * killing us with SIGPIPE (a pipe did: torture, stop 40). An eventfd
     * answers ENOTSOCK once, and is written from then on. */
    if (r->wake_sock >= 0) {
        ssize_t n = send(r->wake_fd, &one, sizeof(one), MSG_DONTWAIT | MSG_NOSIGNAL);
        if (n < 0 && errno == ENOTSOCK)
            r->wake_sock = -1;
        else
            r->wake_sock = 1;
    }
    /* Raw (rawsys.h): a fork-mode worker's READY comes through here, and
     * libc's write would be one more stretch of its text to fault in. */
    if (r->wake_sock < 0)
        (void)pm__sys3(SYS_write, r->wake_fd, &one, sizeof(one));
    r->wakeups++;
    return 1;
}

/* Wakes the other end sleeping in FUTEX_WAIT on flag. Not FUTEX_PRIVATE:
 * the flag lives in memory shared with another process. If it is not
 * asleep yet, its FUTEX_WAIT finds the flag cleared and returns at once. */
PM__READY_TEXT static int wake_futex(pm__ring *r, _Atomic uint32_t *flag)
{
    (void)pm__sys6(SYS_futex, (long)(uint32_t *)flag, FUTEX_WAKE, 1, 0, 0, 0);
    r->wakeups++;
    return 1;
}

/*
 * After storing our index: if the other end announced that it is parking,
 * wake it. The seq_cst fence orders our index store before the load of its
 * flag; the other end fences between storing its flag and re-reading our
 * index (arm_flag). With both fences at least one side sees the other's
 * store, so a wake-up can never be lost: either it sees our index and does
 * not sleep, or we see its flag and wake it. An end that is awake (flag
 * clear) costs the waker no system call at all.
 */
PM__READY_TEXT static int wake_if_waiting(pm__ring *r, _Atomic uint32_t *flag)
{
    atomic_thread_fence(memory_order_seq_cst);
    /* One wake-up per announced wait: the first publish that sees the flag
     * takes it (exchange to 0) and wakes; the ones after it, until the
     * other end runs and announces a new wait, make no system call (an
     * eventfd's count, or the flag no longer matching FUTEX_WAIT's value,
     * keeps the wake-up pending meanwhile). The plain load first keeps the
     * common case (flag clear) free of writes to a cache line the other end
     * owns. The value says how to wake; any other value a hostile peer
     * writes gets the eventfd, as before. */
    if (atomic_load_explicit(flag, memory_order_relaxed) == 0)
        return 0;
    uint32_t how = atomic_exchange_explicit(flag, 0, memory_order_relaxed);
    if (how == 0)
        return 0;
    return how == WAIT_FUTEX ? wake_futex(r, flag) : wake(r);
}

/* The other half of the pattern: store our flag (how we want to be woken),
 * then fence before the caller re-reads the other end's index. */
PM__READY_TEXT static void arm_flag(_Atomic uint32_t *flag, uint32_t how)
{
    atomic_store_explicit(flag, how, memory_order_relaxed);
    atomic_thread_fence(memory_order_seq_cst);
}

/* Sleeps in FUTEX_WAIT while the flag still says WAIT_FUTEX, up to
 * timeout_ms. 1 woken (or the flag changed: a waker took it), 0 timed out or
 * interrupted (the caller re-checks everything anyway). A kernel or a
 * seccomp policy that refuses the call turns futex parking off for this
 * end: the caller re-checks and parks on the eventfd from then on. */
PM__READY_TEXT static int park_futex(pm__ring *r, _Atomic uint32_t *flag, int timeout_ms)
{
    struct timespec ts, *tp = NULL;
    if (timeout_ms >= 0) {
        ts.tv_sec = timeout_ms / 1000;
        ts.tv_nsec = (long)(timeout_ms % 1000) * 1000000;
        tp = &ts;
    }
    r->parks++;
    if (syscall(SYS_futex, (uint32_t *)flag, FUTEX_WAIT, WAIT_FUTEX, tp, NULL, 0) == 0)
        return 1;
    if (errno == EAGAIN)
        return 1;
    if (errno != ETIMEDOUT && errno != EINTR)
        r->futex_ok = 0;
    return 0;
}

/* A park on a doorbell nobody can ring any more sleeps this long at most
 * and looks again. */
#define PM__RING_HUNG_PARK_MS 1

/* Blocks on the eventfd for up to timeout_ms and drains it. 1 woken, 0 timed
 * out or interrupted (the caller re-checks everything anyway). */
PM__READY_TEXT static int park(pm__ring *r, int timeout_ms)
{
    r->parks++;
    if (PM__UNLIKELY(r->park_hung)) {
        /* The doorbell's other end is closed (a lane's peer closed its end
         * of ours, alive: nothing revokes the lane): it reads end of file
         * for ever, and a poll on it would return at once each time, so a
         * wait for room on the lane, where futexes are refused, spun until
         * its slice ended (design.md, Direct lanes, Known gaps (3)). Short
         * sleeps instead: the ring is looked at again after each. */
        int ms = timeout_ms < 0 || timeout_ms > PM__RING_HUNG_PARK_MS ? PM__RING_HUNG_PARK_MS
                                                                     : timeout_ms;
        (void)poll(NULL, 0, ms);
        return 0;
    }
    struct pollfd p = {.fd = r->park_fd, .events = POLLIN, .revents = 0};
    int n = poll(&p, 1, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    /* Never blocks, whoever shares it (doorbell.c); 1 at end of file. */
    if (n > 0 && pm__doorbell_drain(r->park_fd))
        r->park_hung = 1;
    return n > 0;
}

PM__READY_TEXT static uint64_t deadline_after(uint64_t now, int timeout_ms)
{
    return timeout_ms < 0 ? UINT64_MAX : now + (uint64_t)timeout_ms * 1000000u;
}

/* Milliseconds left until deadline, rounded up, or -1 for none. */
PM__READY_TEXT static int ms_left(uint64_t deadline)
{
    if (deadline == UINT64_MAX)
        return -1;
    uint64_t now = pm__now_ns();
    if (now >= deadline)
        return 0;
    uint64_t ms = (deadline - now + 999999u) / 1000000u;
    return ms > INT32_MAX ? INT32_MAX : (int)ms;
}

/* ---------------------------------------------------------------- producer */

/* Re-reads the consumer's index. Acquire pairs with the release in
 * pm__ring_release: the consumer's reads of the space it hands back are done
 * before we overwrite it. A correct consumer's index never moves backwards,
 * never passes what we published and stays 8-byte aligned. */
PM__READY_TEXT static int refresh_tail(pm__ring *r)
{
    uint64_t t = atomic_load_explicit(&r->sh->tail, memory_order_acquire);
    if (t < r->tail_cache || t > r->published || (t & 7) != 0)
        return poison(r);
    r->tail_cache = t;
    return 0;
}

/* Bytes a frame of len needs at the current head, padding included. */
PM__READY_TEXT static uint64_t bytes_needed(const pm__ring *r, size_t len, uint64_t *pad)
{
    uint64_t total = PM__RING_REC_HDR + PM__ALIGN8(len);
    uint64_t room = r->cap - (r->head & r->mask);
    *pad = room < total ? room : 0;
    return total + *pad;
}

/* 1 if a frame of len fits now, 0 if not, or -EBADMSG. The shared index is
 * read only when the cached one says the ring is full. */
PM__READY_TEXT static int fits(pm__ring *r, size_t len)
{
    uint64_t pad;
    uint64_t need = bytes_needed(r, len, &pad);
    if (r->head - r->tail_cache + need <= r->cap)
        return 1;
    if (refresh_tail(r) < 0)
        return -EBADMSG;
    return r->head - r->tail_cache + need <= r->cap;
}

/* Asks for ownership of the two cache lines PM__RING_AHEAD bytes past the
 * reserved record, where the frames after it will be written. The
 * consumer read those lines on the previous lap (and keeps them in its
 * cache, the ring being small), so each first write to one must take it
 * back; the publish's fence (wake_if_waiting) waits for every store before
 * it, so without this each frame paid those transfers in turn: on a guest
 * where a line costs a few hundred ns to move, a 64 B stream on a lane ran
 * at 4.4M frames/s, and at 12M with it (stop 41; the hub's path, whose
 * workers write through here too, 7M -> 9M). A prefetch never faults and
 * changes nothing the consumer sees. x86-64: PREFETCHW (a NOP on the few
 * CPUs without it; GCC emits it only with -mprfchw); elsewhere the
 * compiler's write prefetch. */
#define PM__RING_AHEAD 1024u
PM__READY_TEXT static inline void prefetch_ahead(const pm__ring *r)
{
    for (uint64_t k = 0; k < 2; k++) {
        const unsigned char *q = r->data + ((r->resv_at + PM__RING_AHEAD + 64 * k) & r->mask);
#if defined(__x86_64__)
        __asm__ volatile("prefetchw %0" ::"m"(*q));
#else
        __builtin_prefetch(q, 1, 3);
#endif
    }
}

PM__READY_TEXT int pm__ring_reserve(pm__ring *r, size_t len, void **payload)
{
    if (PM__UNLIKELY(r->poisoned))
        return -EBADMSG;
    if (PM__UNLIKELY(len == 0 || r->resv_len != 0))
        return -EINVAL;
    if (PM__UNLIKELY(len > r->max_frame))
        return -EMSGSIZE;
    int rc = fits(r, len);
    if (rc <= 0)
        return rc < 0 ? rc : -EAGAIN;
    uint64_t pad;
    (void)bytes_needed(r, len, &pad);
    r->resv_at = r->head + pad;
    r->resv_len = (uint32_t)len;
    prefetch_ahead(r);
    *payload = r->data + (r->resv_at & r->mask) + PM__RING_REC_HDR;
    return 0;
}

PM__READY_TEXT void pm__ring_commit(pm__ring *r, size_t len)
{
    if (r->resv_len == 0 || len == 0 || len > r->resv_len)
        return; /* programming error: nothing reserved or a bad length */
    if (r->resv_at != r->head) {
        /* The padding record is written only now, together with its frame,
         * so a published index never ends on a padding record. */
        uint64_t room = r->resv_at - r->head;
        store_rec(r->data + (r->head & r->mask), (uint32_t)(room - PM__RING_REC_HDR), REC_PAD);
    }
    store_rec(r->data + (r->resv_at & r->mask), (uint32_t)len, 0);
    r->head = r->resv_at + PM__RING_REC_HDR + PM__ALIGN8(len);
    r->resv_len = 0;
}

void pm__ring_unreserve(pm__ring *r)
{
    r->resv_len = 0;
}

PM__READY_TEXT int pm__ring_publish(pm__ring *r)
{
    if (r->head == r->published)
        return 0;
    /* Release: every record byte written above is visible to a consumer
     * that loads this index with acquire (refresh_head). */
    atomic_store_explicit(&r->sh->head, r->head, memory_order_release);
    r->published = r->head;
    return wake_if_waiting(r, &r->sh->cons_waiting);
}

/* fits() with the signature spin_then_park() wants. */
PM__READY_TEXT static int space_for(pm__ring *r, size_t len)
{
    return fits(r, len);
}

static int spin_then_park(pm__ring *r, int (*cond)(pm__ring *, size_t), size_t arg,
                          _Atomic uint32_t *flag, int timeout_ms, int may_spin);

PM__READY_TEXT int pm__ring_wait_space(pm__ring *r, size_t len, int timeout_ms)
{
    if (len == 0 || len > r->max_frame)
        return len == 0 ? -EINVAL : -EMSGSIZE;
    /* The consumer can only free space for frames it can see. */
    pm__ring_publish(r);
    return spin_then_park(r, space_for, len, &r->sh->prod_waiting, timeout_ms, 1);
}

/* 1 when at most `back` bytes before the producer's head are still the
 * consumer's (not handed back), 0 if more, -EBADMSG. */
static int consumed_within(pm__ring *r, size_t back)
{
    if (r->head - r->tail_cache <= back)
        return 1;
    if (refresh_tail(r) < 0)
        return -EBADMSG;
    return r->head - r->tail_cache <= back;
}

int pm__ring_consumed(pm__ring *r, uint64_t pos)
{
    if (PM__UNLIKELY(r->poisoned))
        return -EBADMSG;
    return pos > r->head ? -EINVAL : consumed_within(r, (size_t)(r->head - pos));
}

int pm__ring_wait_consumed(pm__ring *r, uint64_t pos, int timeout_ms)
{
    if (PM__UNLIKELY(r->poisoned))
        return -EBADMSG;
    if (pos > r->head)
        return -EINVAL;
    pm__ring_publish(r);
    return spin_then_park(r, consumed_within, (size_t)(r->head - pos), &r->sh->prod_waiting,
                          timeout_ms, 1);
}

int pm__ring_arm_space(pm__ring *r, size_t len)
{
    arm_flag(&r->sh->prod_waiting, WAIT_FD);
    int rc = fits(r, len);
    if (rc != 0)
        pm__ring_disarm_space(r);
    return rc;
}

void pm__ring_disarm_space(pm__ring *r)
{
    atomic_store_explicit(&r->sh->prod_waiting, 0, memory_order_relaxed);
}

/* ---------------------------------------------------------------- consumer */

/* Re-reads the producer's index. Acquire pairs with the release in
 * pm__ring_publish. A correct producer's index never moves backwards, never
 * gets more than the capacity ahead of what we handed back, and stays
 * 8-byte aligned. */
PM__READY_TEXT static int refresh_head(pm__ring *r)
{
    uint64_t h = atomic_load_explicit(&r->sh->head, memory_order_acquire);
    if (h < r->head_cache || h - r->released > r->cap || (h & 7) != 0)
        return poison(r);
    r->head_cache = h;
    return 0;
}

/* A record as the consumer found it: the padding skipped to reach it (0,
 * or the rest of the data area), where its header is in the data area, its
 * length and what it takes in the ring. */
struct rec_at {
    uint64_t pad;
    uint64_t off;
    uint32_t len;
    uint32_t total;
};

/* The one check of an untrusted record, for pm__ring_peek and
 * pm__ring_scan: the record at position at (below head_cache), one padding
 * record skipped. Each header is loaded once (load_rec) and only the local
 * copy is checked and used, so nothing is read outside the data area, however
 * the producer rewrites it meanwhile. 0 with *f, -1 when the producer wrote
 * nonsense. */
static inline int decode_at(const pm__ring *r, uint64_t at, struct rec_at *f)
{
    uint64_t avail = r->head_cache - at;
    uint64_t off = at & r->mask;
    uint64_t room = r->cap - off;
    uint64_t rec = load_rec(r->data + off);
    uint32_t rlen = (uint32_t)rec;
    uint32_t flags = (uint32_t)(rec >> 32);

    f->pad = 0;
    if (flags == REC_PAD) {
        /* A padding record runs exactly to the end of the data area, is
         * never at its start (that would make no progress) and is always
         * followed by a frame published with it. */
        if (off == 0 || rlen != room - PM__RING_REC_HDR || room >= avail)
            return -1;
        f->pad = room;
        avail -= room;
        off = 0;
        room = r->cap;
        rec = load_rec(r->data);
        rlen = (uint32_t)rec;
        flags = (uint32_t)(rec >> 32);
    }
    if (flags != 0 || rlen == 0 || rlen > r->max_frame)
        return -1;
    uint64_t total = PM__RING_REC_HDR + PM__ALIGN8((uint64_t)rlen);
    if (total > room || total > avail)
        return -1;
    f->off = off;
    f->len = rlen;
    f->total = (uint32_t)total;
    return 0;
}

PM__READY_TEXT int pm__ring_peek(pm__ring *r, const void **payload, size_t *len)
{
    if (r->peek_ptr != NULL) {
        *payload = r->peek_ptr;
        *len = r->peek_len;
        return 1;
    }
    if (PM__UNLIKELY(r->poisoned))
        return -EBADMSG;
    if (r->tail == r->head_cache) {
        if (refresh_head(r) < 0)
            return -EBADMSG;
        if (r->tail == r->head_cache)
            return 0;
    }
    struct rec_at f;
    if (decode_at(r, r->tail, &f) < 0)
        return poison(r);
    r->tail += f.pad;
    r->peek_ptr = r->data + f.off + PM__RING_REC_HDR;
    r->peek_len = f.len;
    r->peek_total = f.total;
    *payload = r->peek_ptr;
    *len = f.len;
    return 1;
}

PM__READY_TEXT void pm__ring_consume(pm__ring *r)
{
    if (r->peek_ptr == NULL)
        return;
    r->tail += r->peek_total;
    r->peek_ptr = NULL;
}

PM__READY_TEXT int pm__ring_release(pm__ring *r)
{
    if (r->tail == r->released || r->poisoned)
        return 0;
    /* Release: our reads of the frames below tail are complete before the
     * producer (acquire in refresh_tail) can see the space as free. */
    atomic_store_explicit(&r->sh->tail, r->tail, memory_order_release);
    r->released = r->tail;
    return wake_if_waiting(r, &r->sh->prod_waiting);
}

/* 1 when a frame is there to peek, 0 when empty, -EBADMSG. */
PM__READY_TEXT static int has_data(pm__ring *r)
{
    if (r->poisoned)
        return -EBADMSG;
    if (r->peek_ptr != NULL || r->tail != r->head_cache)
        return 1;
    if (refresh_head(r) < 0)
        return -EBADMSG;
    return r->tail != r->head_cache;
}

int pm__ring_empty(pm__ring *r)
{
    return has_data(r) == 0;
}

int pm__ring_arm(pm__ring *r)
{
    /* A producer waiting for space must see what we consumed before we
     * sleep, or both ends could sleep forever. */
    pm__ring_release(r);
    arm_flag(&r->sh->cons_waiting, WAIT_FD);
    int rc = has_data(r);
    if (rc != 0)
        pm__ring_disarm(r);
    return rc;
}

void pm__ring_disarm(pm__ring *r)
{
    atomic_store_explicit(&r->sh->cons_waiting, 0, memory_order_relaxed);
}

PM__READY_TEXT static int data_for(pm__ring *r, size_t unused)
{
    (void)unused;
    return has_data(r);
}

PM__READY_TEXT int pm__ring_wait(pm__ring *r, int timeout_ms)
{
    return pm__ring_wait_gated(r, timeout_ms, 1);
}

PM__READY_TEXT int pm__ring_wait_gated(pm__ring *r, int timeout_ms, int may_spin)
{
    /* A producer waiting for space must see what we consumed before we
     * sleep, or both ends could sleep forever. */
    pm__ring_release(r);
    return spin_then_park(r, data_for, 0, &r->sh->cons_waiting, timeout_ms, may_spin);
}

int pm__ring_scan(pm__ring *r, uint64_t *pos, int (*fn)(const void *payload, size_t len, void *arg),
                  void *arg)
{
    if (r->poisoned || refresh_head(r) < 0)
        return -1;
    uint64_t at = r->tail + (r->peek_ptr != NULL ? r->peek_total : 0);
    if (*pos > at && *pos <= r->head_cache)
        at = *pos; /* records before it were seen by an earlier scan */
    while (at < r->head_cache) {
        /* The checks of pm__ring_peek, so nothing here reads outside the
         * data area whatever the producer writes meanwhile. */
        struct rec_at f;
        if (decode_at(r, at, &f) < 0)
            return -1;
        if (fn(r->data + f.off + PM__RING_REC_HDR, f.len, arg) != 0)
            return 1;
        at += f.pad + f.total;
    }
    *pos = at;
    return 0;
}

int pm__ring_beyond(pm__ring *r, uint64_t pos)
{
    if (r->poisoned || refresh_head(r) < 0)
        return -EBADMSG;
    return r->head_cache > pos;
}

int pm__ring_arm_beyond(pm__ring *r, uint64_t pos)
{
    /* The fence in arm_flag pairs with the producer's after its publish
     * (wake_if_waiting): a publish it made before it could see our flag
     * is seen by the load of its index below, so nothing published
     * beyond pos waits for a doorbell that will not ring. */
    arm_flag(&r->sh->cons_waiting, WAIT_FD);
    int rc = pm__ring_beyond(r, pos);
    if (rc != 0)
        pm__ring_disarm(r);
    return rc;
}

int pm__ring_consumer_parked(const pm__ring *r)
{
    /* Relaxed: a hint for a spin decision, never for a wake-up. A stale
     * value costs one spin that does not pay, or one park that a spin
     * would have saved; the wake-up protocol (wake_if_waiting) is what
     * keeps every frame from being stranded. */
    return atomic_load_explicit(&r->sh->cons_waiting, memory_order_relaxed) != 0;
}

unsigned pm__spin_cpus(void)
{
    /* Cached per process; a fork inherits the value with the mask. Racing
     * first calls in two threads store the same number. */
    static _Atomic unsigned cached;
    unsigned n = atomic_load_explicit(&cached, memory_order_relaxed);
    if (n != 0)
        return n;
    cpu_set_t set;
    long online;
    if (sched_getaffinity(0, sizeof(set), &set) == 0 && CPU_COUNT(&set) > 0)
        n = (unsigned)CPU_COUNT(&set);
    else if ((online = sysconf(_SC_NPROCESSORS_ONLN)) > 0)
        n = (unsigned)online;
    else
        n = 1;
    atomic_store_explicit(&cached, n, memory_order_relaxed);
    return n;
}

/*
 * The one waiting strategy of both ends: check, spin for the learnt budget
 * (at most spin_ns; see pm__spin_learn; none unless may_spin) checking
 * again, stopping early if the spin lost its CPU, then announce the
 * wait in our flag, check once more (the fence in arm_flag pairs with
 * wake_if_waiting on the other end, so a change made before the other end
 * read our flag is seen here) and park: in FUTEX_WAIT on the flag, or on
 * the eventfd where futexes are refused.
 * Returns cond's first non-zero result, 0 on timeout, or a negative errno.
 */
PM__READY_TEXT static int spin_then_park(pm__ring *r, int (*cond)(pm__ring *, size_t), size_t arg,
                          _Atomic uint32_t *flag, int timeout_ms, int may_spin)
{
    /* The check first: a wait whose condition already holds (an exec'd
     * worker finding INIT in its ring before it waits) reads no clock. Its
     * first clock_gettime in a process faults in the vDSO's data pages, two
     * page faults on the way to ready for a deadline never needed; the
     * deadline now starts after one check, which changes nothing. */
    int rc = cond(r, arg);
    if (rc != 0)
        return rc;
    uint64_t t0 = pm__now_ns();
    uint64_t deadline = deadline_after(t0, timeout_ms);
    uint32_t budget = r->spin_budget < r->spin_ns ? r->spin_budget : r->spin_ns;
    /* Learn from this wait only if it was allowed to spin (the gate says
     * nothing about how fast the other end answers) and the spin kept its
     * CPU. */
    int learn = may_spin;
    if (!may_spin)
        budget = 0; /* the gate: no CPU free; the learnt budget is kept */
    if (budget > 0) {
        uint64_t spin_end = t0 + budget;
        uint64_t prev = t0, now;
        /* Never sched_yield between checks: with more spinners than CPUs
         * a yield is a wait for a time slice (milliseconds: the tail the
         * awake round trip had). A spin that loses its CPU parks instead. */
        do {
            for (int i = 0; i < 32; i++)
                pm__cpu_relax();
            if ((rc = cond(r, arg)) != 0) {
                if (rc > 0)
                    r->spin_budget = pm__spin_learn(r->spin_budget, r->spin_ns, 1,
                                                    pm__now_ns() - t0);
                return rc;
            }
            now = pm__now_ns();
            if (pm__spin_preempted(prev, now)) {
                /* Descheduled mid-spin: the CPU went to someone else, maybe
                 * the very end we wait for. Park now and spin no more until
                 * the quick-park probe of pm__spin_learn says otherwise. */
                r->spin_budget = 0;
                learn = 0;
                break;
            }
            prev = now;
        } while (now < spin_end);
    }
    for (;;) {
        int left = ms_left(deadline);
        if (left == 0)
            return 0;
        if (r->park_fd < 0) {
            /* No way to park: spin (yielding) until the deadline. */
            sched_yield();
        } else {
            uint32_t how = r->futex_ok ? WAIT_FUTEX : WAIT_FD;
            arm_flag(flag, how);
            rc = cond(r, arg);
            if (rc == 0)
                rc = how == WAIT_FUTEX ? park_futex(r, flag, left) : park(r, left);
            atomic_store_explicit(flag, 0, memory_order_relaxed);
            if (rc < 0)
                return rc;
        }
        /* Woken, timed out or interrupted: check again. */
        rc = cond(r, arg);
        if (rc != 0) {
            if (rc > 0 && learn)
                r->spin_budget = pm__spin_learn(budget, r->spin_ns, 0, pm__now_ns() - t0);
            return rc;
        }
    }
}
