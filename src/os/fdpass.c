/* SPDX-License-Identifier: MIT */
/* fdpass.c - fds over AF_UNIX sockets (SCM_RIGHTS); see fdpass.h. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "fdpass.h"

#include <string.h>

void pm__fdpass_msg(struct msghdr *mh, struct iovec *iov, void *ctl, size_t ctl_size)
{
    memset(ctl, 0, ctl_size);
    memset(mh, 0, sizeof(*mh));
    mh->msg_iov = iov;
    mh->msg_iovlen = 1;
    mh->msg_control = ctl;
    mh->msg_controllen = ctl_size;
}

void pm__fdpass_put_many(struct msghdr *mh, const int *fds, size_t n)
{
    struct cmsghdr *c = CMSG_FIRSTHDR(mh);
    c->cmsg_level = SOL_SOCKET;
    c->cmsg_type = SCM_RIGHTS;
    c->cmsg_len = CMSG_LEN(n * sizeof(int));
    memcpy(CMSG_DATA(c), fds, n * sizeof(int));
}

void pm__fdpass_put(struct msghdr *mh, int fd)
{
    pm__fdpass_put_many(mh, &fd, 1);
}

size_t pm__fdpass_take(struct msghdr *mh, int *fds, size_t room, unsigned *others)
{
    size_t n = 0;
    if (others != NULL)
        *others = 0;
    for (struct cmsghdr *c = CMSG_FIRSTHDR(mh); c != NULL; c = CMSG_NXTHDR(mh, c)) {
        if (c->cmsg_level != SOL_SOCKET || c->cmsg_type != SCM_RIGHTS) {
            if (others != NULL)
                (*others)++;
            continue;
        }
        /* cmsg_len is the kernel's; CMSG_DATA need not be aligned for an
         * int, hence the copies. */
        size_t k = (c->cmsg_len - CMSG_LEN(0)) / sizeof(int);
        for (size_t i = 0; i < k; i++) {
            int fd;
            memcpy(&fd, CMSG_DATA(c) + i * sizeof(int), sizeof(int));
            if (n < room)
                fds[n++] = fd;
            else
                pm__close(fd);
        }
    }
    return n;
}

/* Room for more fds than any record may carry, so that extra fds arrive
 * (and are closed by the caller's check) instead of being dropped by the
 * kernel with MSG_CTRUNC: either way the record is refused. */
#define RECV_FDS 8

ssize_t pm__fdpass_send(int sock, const void *rec, size_t size, const int *fds, size_t n)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(PM__FDPASS_SEND_MAX * sizeof(int))];
    } ctl;
    if (n == 0 || n > PM__FDPASS_SEND_MAX)
        return -EINVAL;
    struct iovec iov = {(void *)(uintptr_t)rec, size};
    struct msghdr mh;
    pm__fdpass_msg(&mh, &iov, ctl.buf, CMSG_SPACE(n * sizeof(int)));
    pm__fdpass_put_many(&mh, fds, n);
    ssize_t k;
    do
        k = sendmsg(sock, &mh, MSG_DONTWAIT | MSG_NOSIGNAL);
    while (k < 0 && errno == EINTR);
    if (k < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    return k;
}

ssize_t pm__fdpass_recv(int sock, void *rec, size_t size, int *fds, size_t room, size_t *nfds)
{
    union {
        struct cmsghdr h;
        char buf[CMSG_SPACE(RECV_FDS * sizeof(int))];
    } ctl;
    struct iovec iov = {rec, size};
    struct msghdr mh;
    pm__fdpass_msg(&mh, &iov, ctl.buf, sizeof(ctl.buf));
    *nfds = 0;
    ssize_t n;
    do
        n = recvmsg(sock, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
    while (n < 0 && errno == EINTR);
    if (n < 0)
        return errno == EWOULDBLOCK ? -EAGAIN : -errno;
    /* Every fd first, so that each one is closed on any failure. */
    unsigned others;
    size_t got = pm__fdpass_take(&mh, fds, room, &others);
    if ((mh.msg_flags & (MSG_CTRUNC | MSG_TRUNC)) != 0 || others > 0) {
        /* Truncated, or SCM_CREDENTIALS and the like: never sent here. */
        for (size_t i = 0; i < got; i++)
            pm__close(fds[i]);
        return -EPROTO;
    }
    *nfds = got;
    return n;
}
