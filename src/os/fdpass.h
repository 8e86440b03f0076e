/* SPDX-License-Identifier: MIT */
/* fdpass.h - fds over AF_UNIX sockets (SCM_RIGHTS): the message shape of a large message's record (channel/bigmsg.c), a lane's (channel/laneoffer.c) and a readiness datagram (notify.c). */
#ifndef PM_FDPASS_H
#define PM_FDPASS_H

#include <stddef.h>
#include <sys/socket.h>

/* mh carries one buffer (iov) and the control buffer ctl of ctl_size bytes
 * (a union with struct cmsghdr, for its alignment), zeroed. */
void pm__fdpass_msg(struct msghdr *mh, struct iovec *iov, void *ctl, size_t ctl_size);

/* mh (its control buffer at least CMSG_SPACE(sizeof(int))) passes fd. */
void pm__fdpass_put(struct msghdr *mh, int fd);
/* The same for n fds in one SCM_RIGHTS message (a control buffer of at
 * least CMSG_SPACE(n * sizeof(int))): a lane's record (laneoffer.h). */
void pm__fdpass_put_many(struct msghdr *mh, const int *fds, size_t n);

/* The fds every SCM_RIGHTS message of a received mh carries, in order: the
 * first room of them go into fds, the others are closed (a received fd is
 * ours to close). Returns how many went into fds; *others (when not NULL)
 * counts the control messages of any other kind (SCM_CREDENTIALS...). */
size_t pm__fdpass_take(struct msghdr *mh, int *fds, size_t room, unsigned *others);

/* The most fds pm__fdpass_send passes in one record. */
#define PM__FDPASS_SEND_MAX 4u

/* Sends one record (rec, size bytes) with fds[0..n) in one SCM_RIGHTS
 * message, without blocking: whole or not at all (SOCK_SEQPACKET). The
 * bytes sent, -EAGAIN (the socket is full), -EINVAL (n is 0 or above
 * PM__FDPASS_SEND_MAX), or -errno. The fds stay the caller's. */
ssize_t pm__fdpass_send(int sock, const void *rec, size_t size, const int *fds, size_t n);

/* Receives one record of up to size bytes without blocking (close-on-exec
 * fds): its length, with the fds it carried in fds (up to room, the rest
 * closed) and their count in *nfds; -EAGAIN when none is there; -EPROTO
 * (every fd closed, *nfds 0) when the record or its control data was
 * truncated or carried anything but fds; or -errno. The caller judges the
 * bytes and the count, and closes the fds when it refuses them. */
ssize_t pm__fdpass_recv(int sock, void *rec, size_t size, int *fds, size_t room, size_t *nfds);

#endif /* PM_FDPASS_H */
