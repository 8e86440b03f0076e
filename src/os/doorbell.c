/* SPDX-License-Identifier: MIT */
/*
 * doorbell.c - a doorbell: the one-way socket pair a reader must not share,
 * and emptying one without ever blocking.
 *
 * A doorbell is an eventfd or, where its reader must not share the open
 * file description its writer writes through, one end of a socket pair
 * (pm__doorbell_pair: a worker's, the supervisor sends on the other end,
 * channel.h node_wake; a lane's, each end's sent on by its peer). An
 * eventfd shared with an untrusted holder shares its O_NONBLOCK, which
 * belongs to the description, not to the fd: the holder can clear it
 * (fcntl F_SETFL, ioctl FIONBIO), ring, and take the
 * count itself between our poll and our read, and a plain read() then
 * blocks until it writes again, which it need never do (check_lane
 * test_doorbell_made_blocking; found by a review, stop 39); and it can
 * fill the counter so that a write blocks (the reason the doorbells a
 * worker reads are socket pairs now: a review, stop 40). RWF_NOWAIT asks for
 * EAGAIN on this call whatever the file's flags (eventfd honours it since
 * Linux 5.12, commit 12aceb89b0bc). Where the kernel refuses the flag
 * (EOPNOTSUPP before 5.12) or a seccomp filter refuses preadv2, read() is
 * the fallback, and the flag governs again (doc/reliability.md, the
 * faults table: the doorbell made blocking). A socket pair's reading end
 * is its reader's own description: nobody else can make it block. Not a
 * pipe's: every end of a pipe shares the pipe's mutex, and splice() holds
 * it while blocked on its source, so a writer can hold its reader's read
 * (RWF_NOWAIT included) in uninterruptible sleep (stop 42).
 */
#define _GNU_SOURCE
#include "base/internal.h"
#include "doorbell.h"

#include <stdint.h>
#include <sys/socket.h>
#include <sys/uio.h>
#include <unistd.h>

int pm__doorbell_pair(int *rd, int *wr)
{
    int sv[2];
    if (socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, sv) < 0)
        return -errno;
    /* One way only: the reader cannot fill the writer's side with bytes
     * nobody reads (kernel memory), nor the writer read its own rings. */
    (void)shutdown(sv[0], SHUT_WR);
    (void)shutdown(sv[1], SHUT_RD);
    *rd = sv[0];
    *wr = sv[1];
    return 0;
}

int pm__doorbell_drain(int fd)
{
    int saved = errno, hung_up = 0;
    /* An eventfd gives its whole count in one read of 8 bytes; a socket
     * doorbell (a worker's, channel.h node_wake; a lane's) holds 8 bytes
     * a ring, read until a read comes back short, so one drain leaves it
     * empty (at most its buffer). */
    uint64_t v[32];
    struct iovec iov = {v, sizeof(v)};
    for (int i = 0; i < 256; i++) {
        /* EAGAIN: empty, or someone took the count first; EINTR: the next
         * wait sees it again. Anything else: the call itself is refused. */
        ssize_t n = preadv2(fd, &iov, 1, -1, RWF_NOWAIT);
        if (n < 0 && errno != EAGAIN && errno != EINTR)
            n = read(fd, v, sizeof(v));
        /* 0: end of file, a socket pair whose every writing end is closed
         * (an eventfd never reads 0). It stays readable for ever: a wait
         * that polls it must stop watching it, or it spins. */
        hung_up = n == 0;
        if (n < (ssize_t)sizeof(v))
            break;
    }
    pm__errno_restore(saved);
    return hung_up;
}
