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
