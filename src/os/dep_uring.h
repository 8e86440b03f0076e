/* SPDX-License-Identifier: MIT */
/* dep_uring.h - <liburing.h> for the loop: each liburing function it calls reached through the table deps.c fills on first use. */
#ifndef PM_DEP_URING_H
#define PM_DEP_URING_H

#include "config.h"

#include <liburing.h>

/* Every liburing function the library calls; the rest of what loop.c
 * uses (io_uring_get_sqe, the prep helpers, the completion walk) is
 * inline in liburing.h and needs no library. */
#define PM__URING_FNS(X)                                                                           \
    X(io_uring_queue_init_params)                                                                  \
    X(io_uring_queue_exit)                                                                         \
    X(io_uring_submit)                                                                             \
    X(io_uring_submit_and_wait)                                                                    \
    X(io_uring_submit_and_wait_timeout)

#if PM_LAZY_DEPS
#ifndef PM__DEP_MEMBER
/* A table member: a pointer of the function's own type. */
#define PM__DEP_MEMBER(f) __typeof__(f) *f;
#endif
struct pm__uring_fns {
    PM__URING_FNS(PM__DEP_MEMBER)
};
/* The table, liburing loaded on first use (os/deps.c). A caller that can
 * do without it asks pm__dep_load (os/deps.h) first; reached without that
 * and unloadable, it aborts with the reason rather than call through a
 * null pointer. */
const struct pm__uring_fns *pm__uring(void);

#ifndef PM__DEPS_IMPL
#define PM__URING(f) (pm__uring()->f)
#define io_uring_queue_init_params PM__URING(io_uring_queue_init_params)
#define io_uring_queue_exit PM__URING(io_uring_queue_exit)
#define io_uring_submit PM__URING(io_uring_submit)
#define io_uring_submit_and_wait PM__URING(io_uring_submit_and_wait)
#define io_uring_submit_and_wait_timeout PM__URING(io_uring_submit_and_wait_timeout)
#endif /* !PM__DEPS_IMPL */
#endif /* PM_LAZY_DEPS */

#endif /* PM_DEP_URING_H */
