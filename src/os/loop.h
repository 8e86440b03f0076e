/* SPDX-License-Identifier: MIT */
/*
 * loop.h - the supervisor's readiness loop: one-shot "tell me when this fd is
 * readable" requests, identified by a 64-bit tag, on io_uring; epoll when
 * io_uring is unavailable.
 *
 * Semantics shared by both backends: pm__loop_arm() asks for one
 * notification; once it is delivered the caller re-arms if it wants another.
 * pm__loop_arm_multi() asks for one notification per wake-up of the fd (each
 * write of an eventfd), the fd staying registered: the caller need not drain
 * an eventfd armed this way, nor re-arm it, until a notification says the
 * registration ended (io_uring stops a multishot poll when its completion
 * queue overflows; before Linux 5.13 every poll is one-shot).
 * pm__loop_disarm() must be called before closing an fd that is armed.
 * A notification may still arrive for a tag after it was disarmed (io_uring
 * cancels asynchronously), so callers put a generation in their tags and
 * drop stale ones.
 */
#ifndef PM_LOOP_H
#define PM_LOOP_H

#include <stddef.h>
#include <stdint.h>

/* A tag's layout: kind in the top 4 bits, slot in the next 28, then the
 * low 32 bits of an incarnation or generation, so a late completion about
 * something that is gone is recognised and dropped. The kinds are the
 * loop owner's (supervisor/types.h). */
#define PM__TAG(kind, slot, inc) \
    (((uint64_t)(kind) << 60) | ((uint64_t)(slot) << 32) | ((inc) & 0xffffffffu))
#define PM__TAG_KIND(t) ((int)((t) >> 60))
#define PM__TAG_SLOT(t) ((unsigned)(((t) >> 32) & 0x0fffffffu))
#define PM__TAG_INC(t) ((t) & 0xffffffffu)

enum pm__loop_backend { PM__LOOP_URING = 1, PM__LOOP_EPOLL = 2 };

/* Opaque: only loop.c sees the io_uring instance (and so <liburing.h>). */
typedef struct pm__loop pm__loop;

/* The first member of every pm__loop: what a reader outside loop.c may see
 * of it (a pm__loop pointer converts to a pointer to its head). No product
 * path reads it: the tests (tests/internals.h) check which backend runs,
 * and pm-bench counts the loop's system calls per frame. Only loop.c
 * writes it. */
struct pm__loop_head {
    int backend;       /* PM__LOOP_URING or PM__LOOP_EPOLL */
    int multishot;     /* io_uring: multishot polls exist (Linux 5.13) */
    uint64_t syscalls; /* waits and submissions (io_uring_enter, epoll_wait) */
};

/* A new loop in *out (NULL on failure). entries: how many fds may be
 * armed at once (rounded up as needed). Uses io_uring unless the kernel or
 * a seccomp policy refuses it, or the environment variable
 * PROCMESH_LOOP=epoll asks for epoll. */
int pm__loop_init(pm__loop **out, unsigned entries);
/* Closes and frees it; NULL is a no-op. */
void pm__loop_fini(pm__loop *l);

int pm__loop_arm(pm__loop *l, int fd, uint64_t tag);
int pm__loop_arm_multi(pm__loop *l, int fd, uint64_t tag);
/* The same for readability (PM__LOOP_IN), writability (PM__LOOP_OUT) or
 * either: one notification when any of them holds (or the fd failed). One
 * outstanding arm per fd: to change the events, disarm and arm again under
 * a new tag (a socket that has bytes to write asks for both). */
enum { PM__LOOP_IN = 1u, PM__LOOP_OUT = 2u };
int pm__loop_arm_ev(pm__loop *l, int fd, uint64_t tag, unsigned events);
/* pm__loop_arm_multi for any of these events: one notification per
 * wake-up of the fd that concerns them (a socket: a record arrived, its
 * peer freed room), whatever its state before. Where only one-shot polls
 * exist (io_uring before Linux 5.13) it is pm__loop_arm_ev, which fires at
 * once on a state that holds (a writable socket): the caller asks only for
 * what it waits for (core.c asks a socket for room only once it refused a
 * record). */
int pm__loop_arm_multi_ev(pm__loop *l, int fd, uint64_t tag, unsigned events);
int pm__loop_disarm(pm__loop *l, int fd, uint64_t tag);
/* 1 where a disarmed registration completes once more (io_uring: the
 * removed poll's own completion, more 0), which the caller may wait for to
 * arm it again; 0 where it ends silently (epoll), and an arm of the same
 * fd changes its events in place instead. */
int pm__loop_disarm_completes(const pm__loop *l);

/* Submits what is prepared (io_uring), so that pm__loop_fd() reflects it. */
int pm__loop_flush(pm__loop *l);

/* Waits up to timeout_ms (-1 forever, 0 poll) and stores up to max tags of
 * fds that became readable (or failed). For a tag armed with
 * pm__loop_arm_multi, more[i] (more may be NULL) is 1 when its registration
 * stays armed, 0 when it is over and the caller must drain and re-arm (for
 * a one-shot tag it means nothing). Returns the count or -errno. */
int pm__loop_wait(pm__loop *l, int timeout_ms, uint64_t *tags, unsigned char *more, int max);

/* 1 when a completion is waiting (io_uring: without a system call; epoll:
 * always 0, the caller's wait finds out). */
int pm__loop_ready(pm__loop *l);

/* An fd readable whenever pm__loop_wait has something to return. */
int pm__loop_fd(const pm__loop *l);

/* Closes the loop's own fds in a forked child (without touching the shared
 * io_uring instance's state beyond our mapping of it). The memory stays:
 * l must not be used afterwards, except by pm__loop_fini. */
void pm__loop_forget(pm__loop *l);

/* What a forked child that never runs the loop again inherits of it, for
 * the child to close and unmap with the rest of what it drops (in one
 * close_range run and one munmap of adjacent mappings, not a call each):
 * the fd (io_uring's or epoll's) in *fd, and the ring's mappings, their
 * lengths rounded up to whole pages, in at/len. Returns how many mappings
 * (0 with epoll, and when the rings are MADV_DONTFORK, as pm__loop_init
 * makes them where the kernel lets it: a child has none; at most 2), or -1
 * when the rings are mapped apart and not DONTFORK (a kernel before 5.4:
 * the caller calls pm__loop_forget instead). Reads l
 * only: nothing is written to the loop, which the child shares
 * copy-on-write with the supervisor, so it must not use the loop
 * afterwards. Pure: no system call. */
int pm__loop_child_drop(const pm__loop *l, int *fd, void *at[2], size_t len[2]);
/* For the tests: undoes pm__loop_init's MADV_DONTFORK on the rings, so
 * that the next fork copies them and its child unmaps them, as where the
 * kernel refused the madvise (check_containment). 0 or -errno. */
int pm__loop_fork_rings(pm__loop *l);

#endif /* PM_LOOP_H */
