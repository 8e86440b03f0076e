/* SPDX-License-Identifier: MIT */
/*
 * doorbell.c - emptying an eventfd doorbell without ever blocking.
 *
 * Every doorbell is shared: the supervisor reads the hub_efd a worker
 * writes, a worker reads the node_efd the supervisor writes, a lane's end
 * reads the eventfd its peer writes. Sharing the fd shares its open file
 * description, and O_NONBLOCK belongs to the description, not to the fd:
 * the other holder can clear it (fcntl F_SETFL, ioctl FIONBIO), ring,
 * and take the count itself between our poll and our read, and a plain
 * read() then blocks until it writes again, which it need never do: one
 * worker would hang the supervisor's loop, or a peer its receiver's wait
 * (check_lane test_doorbell_made_blocking; found by a review, stop 39).
 * RWF_NOWAIT asks for EAGAIN on this call whatever the file's flags
 * (eventfd honours it since Linux 5.12, commit 12aceb89b0bc). Where the
 * kernel refuses the flag (EOPNOTSUPP before 5.12) or a seccomp filter
 * refuses preadv2, read() is the fallback, and the flag governs again
 * (doc/reliability.md, the faults table: the doorbell made blocking).
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "doorbell.h"

#include <stdint.h>
#include <sys/uio.h>
#include <unistd.h>

void pm__doorbell_drain(int fd)
{
    int saved = errno;
    uint64_t v;
    struct iovec iov = {&v, sizeof(v)};
    /* EAGAIN: someone took the count first; EINTR: the next wait sees the
     * count again. Anything else: the call itself is refused. */
    if (preadv2(fd, &iov, 1, -1, RWF_NOWAIT) < 0 && errno != EAGAIN && errno != EINTR) {
        ssize_t n = read(fd, &v, sizeof(v));
        (void)n;
    }
    pm__errno_restore(saved);
}
