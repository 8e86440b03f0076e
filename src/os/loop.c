/* SPDX-License-Identifier: MIT */
/*
 * loop.c - readiness loop on io_uring, with an epoll fallback.
 *
 * io_uring: each arm is an IORING_OP_POLL_ADD whose user_data is the tag.
 * One-shot for the fds whose notification is handled (drained, re-checked)
 * before we want the next one anyway (signalfd, timerfd, pidfds, pipes).
 * Multishot (pm__loop_arm_multi, Linux 5.13) for the hub's doorbells: each
 * write of the eventfd posts a completion, so the eventfd never needs a
 * read to drain it nor an SQE to re-arm it (its 64-bit counter, bumped once
 * per doorbell, cannot reach the saturation that would make write fail).
 * Debian 12's liburing 2.3 has no io_uring_prep_waitid, so child exits are
 * seen by polling pidfds and then calling waitid(P_PIDFD, ..., WNOHANG).
 *
 * epoll: used when io_uring_queue_init fails (kernel without io_uring,
 * kernel.io_uring_disabled, or a container seccomp profile that blocks it,
 * as Docker's default profile does), when liburing cannot be loaded (deps.h:
 * pm__dep_error says why) or when PROCMESH_LOOP=epoll. EPOLLONESHOT
 * gives it the same one-shot semantics.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "loop.h"
#include "os/dep_uring.h"
#include "os/deps.h"

#include <poll.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/mman.h>
#include <unistd.h>

#define TAG_IGNORE UINT64_MAX /* completions of our own cancel requests */

struct pm__loop {
    struct pm__loop_head head; /* first: what loop.h publishes */
    int epfd;
    struct io_uring ring;
    unsigned pending; /* io_uring: SQEs prepared, not yet submitted */
    int nofork;       /* every ring mapping is MADV_DONTFORK (rings_advise) */
};

/* The ring's mappings as io_uring_queue_exit unmaps them (liburing 2.x):
 * the SQE array (no IORING_SETUP_SQE128 here: 64 bytes each), the SQ ring
 * and, without IORING_FEAT_SINGLE_MMAP, the CQ ring apart; lengths
 * rounded up to whole pages. Returns how many (2 or 3). Pure. */
static int ring_maps(const struct io_uring *r, void *at[3], size_t len[3])
{
    size_t page = (size_t)getpagesize();
    int n = 0;
    at[n] = r->sq.sqes;
    len[n++] = sizeof(struct io_uring_sqe) * r->sq.ring_entries;
    at[n] = r->sq.ring_ptr;
    len[n++] = r->sq.ring_sz;
    if (r->cq.ring_ptr != NULL && r->cq.ring_ptr != r->sq.ring_ptr) {
        at[n] = r->cq.ring_ptr;
        len[n++] = r->cq.ring_sz;
    }
    for (int i = 0; i < n; i++)
        len[i] = (len[i] + page - 1) / page * page;
    return n;
}

/* A fork-mode worker is a fork of the supervisor, and must never reach
 * its loop: with MADV_DONTFORK on the rings (liburing's
 * io_uring_ring_dontfork does the same) a fork child is given no mapping
 * of them at all, so the child has nothing to unmap on the restart path
 * (a munmap of them there cost ~20 us a restart on a guest whose page
 * tables are virtualised, stop 69). nofork when every mapping took it; else
 * the child unmaps them as before (an munmap of a range the child was not
 * given is harmless). rings_advise: every mapping given advice, 0, or
 * -errno at the first refused. */
static int rings_advise(const struct io_uring *r, int advice)
{
    void *at[3];
    size_t len[3];
    int n = ring_maps(r, at, len);
    for (int i = 0; i < n; i++) {
        if (len[i] == 0)
            return -EINVAL; /* a liburing we misread */
        if (madvise(at[i], len[i], advice) != 0)
            return -errno;
    }
    return 0;
}

static int loop_open(pm__loop *l, unsigned entries)
{
    l->epfd = -1;
    const char *force = getenv("PROCMESH_LOOP");
    if ((force == NULL || strcmp(force, "epoll") != 0) && pm__dep_load(PM__DEP_URING, NULL, 0) == 0) {
        unsigned n = 64;
        while (n < entries * 2 && n < 32768)
            n *= 2;
        struct io_uring_params p;
        memset(&p, 0, sizeof(p));
        /* CLAMP: a large request is reduced to the kernel's maximum instead
         * of failing. */
        p.flags = IORING_SETUP_CLAMP;
        int rc = io_uring_queue_init_params(n, &l->ring, &p);
        if (rc == 0) {
            l->head.backend = PM__LOOP_URING;
            /* Multishot polls came with 5.13, as did IORING_FEAT_RSRC_TAGS,
             * the nearest feature bit the kernel reports; before it, the
             * poll's len field must be 0 and a multishot request fails. */
            l->head.multishot = (p.features & IORING_FEAT_RSRC_TAGS) != 0;
            l->nofork = rings_advise(&l->ring, MADV_DONTFORK) == 0;
            return 0;
        }
        /* -ENOSYS, -EPERM (seccomp, io_uring_disabled) and friends: fall
         * back; the supervisor's correctness does not depend on io_uring. */
    }
    l->epfd = epoll_create1(EPOLL_CLOEXEC);
    if (l->epfd < 0)
        return -errno;
    l->head.backend = PM__LOOP_EPOLL;
    return 0;
}

/* Unmaps the ring and closes the fds; the memory stays. */
static void loop_close(pm__loop *l)
{
    if (l->head.backend == PM__LOOP_URING)
        io_uring_queue_exit(&l->ring);
    pm__close(l->epfd);
    l->epfd = -1;
    l->head.backend = 0;
}

int pm__loop_init(pm__loop **out, unsigned entries)
{
    *out = NULL;
    pm__loop *l = calloc(1, sizeof(*l));
    if (l == NULL)
        return -ENOMEM;
    int rc = loop_open(l, entries);
    if (rc < 0) {
        free(l);
        return rc;
    }
    *out = l;
    return 0;
}

void pm__loop_fini(pm__loop *l)
{
    if (l == NULL)
        return;
    int saved = errno;
    loop_close(l);
    free(l);
    errno = saved;
}

PM__READY_TEXT void pm__loop_forget(pm__loop *l)
{
    /* In a forked child the ring's memory, where it was not DONTFORK
     * (rings_advise), is a MAP_SHARED mapping of the parent's instance;
     * io_uring_queue_exit only unmaps and closes our references, which is
     * exactly what the child must do (an unmap of a range the child was
     * not given is harmless). */
    loop_close(l);
}

int pm__loop_fork_rings(pm__loop *l)
{
    if (l->head.backend != PM__LOOP_URING)
        return 0;
    l->nofork = 0; /* first: a refusal part-way leaves some copied, which the child unmaps */
    return rings_advise(&l->ring, MADV_DOFORK);
}

PM__READY_TEXT int pm__loop_child_drop(const pm__loop *l, int *fd, void *at[2], size_t len[2])
{
    *fd = l->head.backend == PM__LOOP_URING ? l->ring.ring_fd : l->epfd;
    if (l->head.backend != PM__LOOP_URING || l->nofork)
        return 0; /* epoll maps nothing; a DONTFORK ring is not the child's */
    void *a[3];
    size_t n_len[3];
    int n = ring_maps(&l->ring, a, n_len);
    if (n > 2)
        return -1; /* IORING_FEAT_SINGLE_MMAP absent: a third mapping */
    for (int i = 0; i < n; i++) {
        at[i] = a[i];
        len[i] = n_len[i];
    }
    return n;
}

static struct io_uring_sqe *get_sqe(pm__loop *l)
{
    struct io_uring_sqe *sqe = io_uring_get_sqe(&l->ring);
    if (sqe == NULL) {
        /* SQ full: hand what we have to the kernel and try again. */
        io_uring_submit(&l->ring);
        l->pending = 0;
        sqe = io_uring_get_sqe(&l->ring);
    }
    return sqe;
}

int pm__loop_arm(pm__loop *l, int fd, uint64_t tag)
{
    return pm__loop_arm_ev(l, fd, tag, PM__LOOP_IN);
}

/* PM__LOOP_IN/OUT as poll(2) bits (io_uring) and as epoll bits. */
static unsigned poll_bits(unsigned events)
{
    return (events & PM__LOOP_IN ? POLLIN : 0u) | (events & PM__LOOP_OUT ? POLLOUT : 0u);
}

static uint32_t epoll_bits(unsigned events)
{
    return (events & PM__LOOP_IN ? EPOLLIN : 0u) | (events & PM__LOOP_OUT ? EPOLLOUT : 0u);
}

/* The fd's one epoll registration, replaced, or added if it has none. */
static int epoll_set(pm__loop *l, int fd, uint32_t bits, uint64_t tag)
{
    struct epoll_event ev = {.events = bits, .data.u64 = tag};
    if (epoll_ctl(l->epfd, EPOLL_CTL_MOD, fd, &ev) == 0)
        return 0;
    if (errno == ENOENT && epoll_ctl(l->epfd, EPOLL_CTL_ADD, fd, &ev) == 0)
        return 0;
    return -errno;
}

int pm__loop_arm_ev(pm__loop *l, int fd, uint64_t tag, unsigned events)
{
    if (l->head.backend == PM__LOOP_URING) {
        struct io_uring_sqe *sqe = get_sqe(l);
        if (sqe == NULL)
            return -EBUSY;
        io_uring_prep_poll_add(sqe, fd, poll_bits(events));
        io_uring_sqe_set_data64(sqe, tag);
        l->pending++;
        return 0;
    }
    /* One registration per fd in epoll: a caller that wants both
     * directions asks for both in one arm, under one tag. */
    return epoll_set(l, fd, epoll_bits(events) | EPOLLONESHOT, tag);
}

int pm__loop_arm_multi(pm__loop *l, int fd, uint64_t tag)
{
    return pm__loop_arm_multi_ev(l, fd, tag, PM__LOOP_IN);
}

int pm__loop_arm_multi_ev(pm__loop *l, int fd, uint64_t tag, unsigned events)
{
    if (l->head.backend == PM__LOOP_URING) {
        if (!l->head.multishot)
            return pm__loop_arm_ev(l, fd, tag, events); /* each completion says "over" */
        struct io_uring_sqe *sqe = get_sqe(l);
        if (sqe == NULL)
            return -EBUSY;
        io_uring_prep_poll_multishot(sqe, fd, poll_bits(events));
        io_uring_sqe_set_data64(sqe, tag);
        l->pending++;
        return 0;
    }
    /* Edge-triggered: every write of an eventfd wakes its wait queue, and
     * each wake-up queues one event, readable or not before (a socket: a
     * record arriving, room freed by its peer's read). */
    return epoll_set(l, fd, epoll_bits(events) | EPOLLET, tag);
}

int pm__loop_disarm_completes(const pm__loop *l)
{
    return l->head.backend == PM__LOOP_URING;
}

int pm__loop_disarm(pm__loop *l, int fd, uint64_t tag)
{
    if (l->head.backend == PM__LOOP_URING) {
        struct io_uring_sqe *sqe = get_sqe(l);
        if (sqe == NULL)
            return -EBUSY;
        /* The poll holds its own reference to the file, so closing fd
         * alone would leave it armed; remove it by its tag. */
        io_uring_prep_poll_remove(sqe, tag);
        io_uring_sqe_set_data64(sqe, TAG_IGNORE);
        l->pending++;
        return 0;
    }
    if (epoll_ctl(l->epfd, EPOLL_CTL_DEL, fd, NULL) < 0 && errno != ENOENT)
        return -errno;
    return 0;
}

int pm__loop_flush(pm__loop *l)
{
    if (l->head.backend != PM__LOOP_URING || l->pending == 0)
        return 0;
    int rc = io_uring_submit(&l->ring);
    if (rc < 0)
        return rc;
    l->pending = 0;
    return 0;
}

static int uring_wait(pm__loop *l, int timeout_ms, uint64_t *tags, unsigned char *more, int max)
{
    struct io_uring_cqe *cqe;
    int rc = 0;
    if (timeout_ms == 0 && l->pending == 0) {
        /* A poll with nothing to submit: the completion ring is shared
         * memory, so look at it without entering the kernel. This keeps a
         * busy hub (work left over every turn) free of system calls. */
    } else if (timeout_ms < 0) {
        rc = io_uring_submit_and_wait(&l->ring, 1);
    } else {
        struct __kernel_timespec ts = {.tv_sec = timeout_ms / 1000,
                                       .tv_nsec = (long long)(timeout_ms % 1000) * 1000000};
        rc = io_uring_submit_and_wait_timeout(&l->ring, &cqe, 1, &ts, NULL);
    }
    if (l->pending != 0 || timeout_ms != 0)
        l->head.syscalls++;
    l->pending = 0;
    if (rc < 0 && rc != -ETIME && rc != -EINTR && rc != -EAGAIN && rc != -EBUSY)
        return rc;
    int n = 0;
    unsigned head, seen = 0;
    io_uring_for_each_cqe(&l->ring, head, cqe)
    {
        if (n == max)
            break;
        seen++;
        uint64_t tag = io_uring_cqe_get_data64(cqe);
        if (tag == TAG_IGNORE)
            continue;
        if (more != NULL)
            more[n] = (cqe->flags & IORING_CQE_F_MORE) != 0;
        tags[n++] = tag;
    }
    io_uring_cq_advance(&l->ring, seen);
    return n;
}

int pm__loop_wait(pm__loop *l, int timeout_ms, uint64_t *tags, unsigned char *more, int max)
{
    if (l->head.backend == PM__LOOP_URING)
        return uring_wait(l, timeout_ms, tags, more, max);
    struct epoll_event evs[64];
    int cap = max < 64 ? max : 64;
    l->head.syscalls++;
    int n = epoll_wait(l->epfd, evs, cap, timeout_ms);
    if (n < 0)
        return errno == EINTR ? 0 : -errno;
    for (int i = 0; i < n; i++) {
        tags[i] = evs[i].data.u64;
        /* An epoll registration never ends by itself; for a one-shot tag
         * the caller does not look. */
        if (more != NULL)
            more[i] = 1;
    }
    return n;
}

int pm__loop_fd(const pm__loop *l)
{
    return l->head.backend == PM__LOOP_URING ? l->ring.ring_fd : l->epfd;
}

int pm__loop_ready(pm__loop *l)
{
    return l->head.backend == PM__LOOP_URING && io_uring_cq_ready(&l->ring) > 0;
}
