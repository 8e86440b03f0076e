/* SPDX-License-Identifier: MIT */
/*
 * watchset.c - an epoll set polled through its one fd (watchset.h).
 * epoll_ctl and the readiness check read a pipe's counts without its
 * mutex, which a worker can hold (offread.h). The set holds no reference
 * to a watched file, but since Linux 6.10 it takes one while it polls it
 * (epi_fget): an fd leaves the set (pm__watchset_del) on the thread that
 * polls the set, before anyone else may close it.
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "watchset.h"

#include <string.h>
#include <sys/epoll.h>

/* Ready fds taken at once (the caller's max is bounded by this: the stack
 * array). */
#define READY_MAX 64

int pm__watchset_new(void)
{
    int fd = epoll_create1(EPOLL_CLOEXEC);
    return fd < 0 ? -errno : fd;
}

static int watch_ctl(int set, int op, int fd, uint64_t tag)
{
    struct epoll_event ev;
    memset(&ev, 0, sizeof(ev));
    /* One-shot: a pipe whose read is under way is not reported again
     * until its result was taken; level-triggered: one with bytes left is
     * reported at once when watched again. */
    ev.events = EPOLLIN | EPOLLONESHOT;
    ev.data.u64 = tag;
    return epoll_ctl(set, op, fd, &ev) < 0 ? -errno : 0;
}

int pm__watchset_add(int set, int fd, uint64_t tag)
{
    return watch_ctl(set, EPOLL_CTL_ADD, fd, tag);
}

int pm__watchset_mod(int set, int fd, uint64_t tag)
{
    return watch_ctl(set, EPOLL_CTL_MOD, fd, tag);
}

void pm__watchset_del(int set, int fd)
{
    (void)epoll_ctl(set, EPOLL_CTL_DEL, fd, NULL); /* ENOENT: never watched, as good */
}

int pm__watchset_ready(int set, uint64_t *tags, int max)
{
    struct epoll_event ev[READY_MAX];
    if (max > READY_MAX)
        max = READY_MAX;
    int n;
    do
        n = epoll_wait(set, ev, max, 0);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return -errno;
    for (int i = 0; i < n; i++)
        tags[i] = ev[i].data.u64;
    return n;
}
