/* SPDX-License-Identifier: MIT */
/* notify.c - the sd_notify readiness socket of an incarnation, and its pure datagram parser. */
#define _GNU_SOURCE
#include "base/internal.h"

#include "notify.h"
#include "fdpass.h"

#include <stdio.h>
#include <string.h>
#include <sys/random.h>
#include <sys/socket.h>
#include <sys/un.h>

unsigned pm__notify_parse(const char *buf, size_t len)
{
    static const struct {
        const char *line;
        unsigned flag;
    } known[] = {
        {"READY=1", PM__NOTIFY_READY},
        {"WATCHDOG=1", PM__NOTIFY_WATCHDOG},
        {"STOPPING=1", PM__NOTIFY_STOPPING},
    };
    unsigned flags = 0;
    size_t i = 0;
    while (i < len) {
        const char *nl = memchr(buf + i, '\n', len - i);
        size_t n = nl != NULL ? (size_t)(nl - (buf + i)) : len - i;
        for (size_t k = 0; k < PM__ARRAY_SIZE(known); k++)
            if (n == strlen(known[k].line) && memcmp(buf + i, known[k].line, n) == 0)
                flags |= known[k].flag;
        i += n + 1;
    }
    return flags;
}

static int urandom(void *buf, size_t len)
{
    /* Flags 0: blocks only until the kernel's pool is first initialised,
     * once per boot; never a short read for 16 bytes. */
    ssize_t n = getrandom(buf, len, 0);
    if (n < 0)
        return -errno;
    return (size_t)n == len ? 0 : -EIO;
}

int (*pm__notify_random)(void *buf, size_t len) = urandom;

/* One try: a fresh random name, bound. 0 with *fd set, or -errno. */
static int bind_fresh(int fd, pid_t supervisor, unsigned slot, uint64_t inc, char *name,
                      size_t size)
{
    unsigned char rnd[PM__NOTIFY_RANDOM_BYTES];
    int rc = pm__notify_random(rnd, sizeof(rnd));
    if (rc < 0)
        return rc;
    char hex[2 * sizeof(rnd) + 1];
    for (size_t i = 0; i < sizeof(rnd); i++)
        snprintf(hex + 2 * i, 3, "%02x", rnd[i]);
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    int len = snprintf(sa.sun_path + 1, sizeof(sa.sun_path) - 1, "procmesh/%d/%u/%llu/%s",
                       (int)supervisor, slot, (unsigned long long)inc, hex);
    if (len < 0 || (size_t)len >= sizeof(sa.sun_path) - 1)
        return -ENAMETOOLONG;
    if ((size_t)snprintf(name, size, "@%s", sa.sun_path + 1) >= size)
        return -ENAMETOOLONG;
    if (bind(fd, (struct sockaddr *)&sa,
             (socklen_t)(offsetof(struct sockaddr_un, sun_path) + 1 + (size_t)len)) < 0)
        return -errno;
    return 0;
}

/* In the abstract namespace: nothing to clean up on disk, but any local
 * process in our network namespace can bind a name there first. The
 * pid/slot/incarnation part is for people reading /proc/net/unix; the
 * random part makes the name unguessable, and it is drawn afresh for each
 * incarnation, so seeing the current name (in /proc/net/unix) tells nothing
 * about the next. A name taken anyway is retried under a new one. */
int pm__notify_open(pid_t supervisor, unsigned slot, uint64_t inc, char *name, size_t size)
{
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    int one = 1;
    int rc = -EADDRINUSE;
    if (fd < 0 || setsockopt(fd, SOL_SOCKET, SO_PASSCRED, &one, sizeof(one)) < 0) {
        rc = -errno;
        goto fail;
    }
    for (int i = 0; i < PM__NOTIFY_TRIES && rc == -EADDRINUSE; i++)
        rc = bind_fresh(fd, supervisor, slot, inc, name, size);
    if (rc < 0)
        goto fail;
    return fd;

fail:
    pm__close(fd);
    return rc;
}

/* The sender's pid from the credentials; passed fds (FDSTORE=1 is not
 * supported) are closed. 0 when there are no credentials. */
static pid_t sender_of(struct msghdr *mh)
{
    pid_t from = 0;
    for (struct cmsghdr *cm = CMSG_FIRSTHDR(mh); cm != NULL; cm = CMSG_NXTHDR(mh, cm)) {
        if (cm->cmsg_level == SOL_SOCKET && cm->cmsg_type == SCM_CREDENTIALS) {
            struct ucred cr;
            memcpy(&cr, CMSG_DATA(cm), sizeof(cr));
            from = cr.pid;
        }
    }
    (void)pm__fdpass_take(mh, NULL, 0, NULL);
    return from;
}

unsigned pm__notify_read(int fd, pid_t from, uint64_t *dropped)
{
    unsigned flags = 0;
    for (int i = 0; i < 16; i++) {
        char buf[4096];
        union {
            struct cmsghdr h;
            char b[CMSG_SPACE(sizeof(struct ucred)) + CMSG_SPACE(16 * sizeof(int))];
        } ctl;
        struct iovec iov = {buf, sizeof(buf)};
        struct msghdr mh;
        pm__fdpass_msg(&mh, &iov, ctl.b, sizeof(ctl.b));
        ssize_t n = recvmsg(fd, &mh, MSG_DONTWAIT | MSG_CMSG_CLOEXEC);
        if (n < 0)
            break;
        if (sender_of(&mh) != from) {
            (*dropped)++; /* not the slot's worker: forged or a child */
            continue;
        }
        flags |= pm__notify_parse(buf, (size_t)n);
    }
    return flags;
}
