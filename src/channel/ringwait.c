/* SPDX-License-Identifier: MIT */
/* ringwait.c - one wait on many rings: arm each, check each once more, poll every doorbell. */
#include "base/internal.h"
#include "ringwait.h"
#include "os/doorbell.h"

#include <poll.h>
#include <sys/epoll.h>
#include <unistd.h>

/* Arms rings[0..n): the count armed before one turned out to have a frame
 * (or to be poisoned: ready is then 1), else n. */
static unsigned arm_all(pm__ring *const *rings, unsigned n, int *ready)
{
    for (unsigned i = 0; i < n; i++) {
        /* pm__ring_arm sets the flag, then looks again: a frame published
         * before the producer could see the flag is found here, not slept
         * on. One that is there is left armed by nobody (arm disarms). */
        if (pm__ring_arm(rings[i]) != 0) {
            *ready = 1;
            return i;
        }
    }
    return n;
}

static int poll_all(pm__ring *const *rings, unsigned n, int timeout_ms)
{
    struct pollfd p[PM__RINGWAIT_MAX];
    for (unsigned i = 0; i < n; i++)
        p[i] = (struct pollfd){.fd = rings[i]->park_fd, .events = POLLIN, .revents = 0};
    int k = poll(p, n, timeout_ms);
    if (k < 0)
        return errno == EINTR ? 0 : -errno;
    for (unsigned i = 0; i < n && k > 0; i++) {
        if (p[i].revents == 0)
            continue;
        /* Reset the count, or the next poll returns at once. The peer
         * holding this doorbell may have drained it first, or made it
         * blocking: the drain never blocks (doorbell.c). */
        pm__doorbell_drain(p[i].fd);
    }
    return k > 0;
}

int pm__ring_wait_many(pm__ring *const *rings, unsigned n, int timeout_ms)
{
    if (n == 0 || n > PM__RINGWAIT_MAX)
        return -EINVAL;
    for (unsigned i = 0; i < n; i++)
        if (rings[i]->park_fd < 0)
            return -EINVAL;
    int ready = 0;
    unsigned armed = arm_all(rings, n, &ready);
    if (!ready)
        ready = poll_all(rings, n, timeout_ms);
    for (unsigned i = 0; i < armed; i++)
        pm__ring_disarm(rings[i]);
    return ready;
}

int pm__ring_wait_edge(pm__ring *const *rings, unsigned n, int epfd, int timeout_ms,
                       struct epoll_event *ev, int *nev)
{
    *nev = 0;
    if (n == 0 || n > PM__RINGWAIT_MAX || epfd < 0)
        return -EINVAL;
    int ready = 0;
    unsigned armed = arm_all(rings, n, &ready);
    if (!ready) {
        int k = epoll_wait(epfd, ev, (int)n, timeout_ms);
        if (k < 0)
            ready = errno == EINTR ? 0 : -errno;
        else
            *nev = k;
        if (k > 0)
            ready = 1;
    }
    for (unsigned i = 0; i < armed; i++)
        pm__ring_disarm(rings[i]);
    return ready;
}
