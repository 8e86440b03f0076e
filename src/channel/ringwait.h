/* SPDX-License-Identifier: MIT */
/*
 * ringwait.h - one wait on many rings: a worker's hub ring and its direct
 * lanes at once (doc/design.md, "Direct lanes", Waiting), without spinning.
 *
 * Each ring is armed (its producer will then write the ring's doorbell,
 * ring.h pm__ring_arm), and arming checks the ring once more, so a frame
 * published before the flag was set is never slept on; then every
 * doorbell is polled at once. Each producer has a doorbell of its own: a
 * peer worker holds only the doorbell of its own lane, so by draining it
 * it can swallow no wake-up but its own.
 */
#ifndef PM_RINGWAIT_H
#define PM_RINGWAIT_H

#include "ring.h"

/* The most rings one wait takes: the hub ring and up to 31 lanes. */
#define PM__RINGWAIT_MAX 32u

/*
 * Waits until one of the n consumer rings may have a frame, for up to
 * timeout_ms (-1: no limit; 0: arm, check, return). Every ring's park_fd
 * must be a non-blocking doorbell (an eventfd, or a socket pair's reading
 * end: os/doorbell.h) its
 * producer writes (-EINVAL otherwise, or
 * for n of 0 or above PM__RINGWAIT_MAX). Returns 1 when some ring may have
 * a frame (a poisoned one counts: its next read says -EBADMSG, and the
 * caller must leave it out of the next wait, as it must a revoked lane,
 * whose ring may hold frames past the revocation that are never read and
 * would make every wait return at once), 0 on timeout or a signal,
 * or -errno from poll. Every ring is disarmed on return, and each doorbell
 * that rang is drained (a spurious wake-up costs one more check).
 */
int pm__ring_wait_many(pm__ring *const *rings, unsigned n, int timeout_ms);

/*
 * The same wait, through epfd: an epoll fd the caller made and keeps,
 * holding every ring's doorbell with EPOLLET. A doorbell is not drained
 * per wake-up (a parked round trip then makes two system calls a side,
 * epoll_wait and the peer's send, where the poll, the drain and the send
 * made three): each send is one edge, taken once by one epoll_wait. The
 * doorbells that rang are in ev[0..*nev) (ev has room for n), with the
 * data the caller registered, so that it drains each now and then before
 * its buffer could fill (a full doorbell refuses sends, and a refused send
 * makes no edge). Returns as pm__ring_wait_many; -errno from epoll_wait
 * (e.g. a seccomp policy's refusal: the caller falls back to
 * pm__ring_wait_many).
 */
struct epoll_event;
int pm__ring_wait_edge(pm__ring *const *rings, unsigned n, int epfd, int timeout_ms,
                       struct epoll_event *ev, int *nev);

#endif /* PM_RINGWAIT_H */
