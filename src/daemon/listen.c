/* SPDX-License-Identifier: MIT */
/* listen.c - opening the --listen sockets (tcp:HOST:PORT, unix:PATH); see
 * listen.h. */
#define _GNU_SOURCE
#include "listen.h"

#include <errno.h>
#include <netdb.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/un.h>
#include <unistd.h>

#include "log.h"

/* The backlog holds the connections that arrive while no worker accepts,
 * e.g. while a crashed one is being replaced. */
#define PMD_LISTEN_BACKLOG 512

static int open_unix(const pmd_listen_spec *l)
{
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, l->path);
    int fd = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return -1;
    /* A stale socket file from an earlier run would make bind fail; remove
     * it only if it is a socket. */
    struct stat st;
    if (lstat(l->path, &st) == 0 && S_ISSOCK(st.st_mode))
        unlink(l->path);
    if (bind(fd, (struct sockaddr *)&sa, sizeof(sa)) < 0 || listen(fd, PMD_LISTEN_BACKLOG) < 0) {
        int saved = errno;
        close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

/* -1 with errno, or -2 when the address does not resolve (*gai set). */
static int open_tcp(const pmd_listen_spec *l, int *gai)
{
    struct addrinfo hints, *res = NULL;
    memset(&hints, 0, sizeof(hints));
    hints.ai_socktype = SOCK_STREAM;
    hints.ai_flags = AI_PASSIVE | AI_NUMERICSERV;
    char port[8];
    snprintf(port, sizeof(port), "%u", l->port);
    *gai = getaddrinfo(l->host[0] ? l->host : NULL, port, &hints, &res);
    if (*gai != 0)
        return -2;
    int fd = socket(res->ai_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    int one = 1;
    if (fd >= 0)
        setsockopt(fd, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    int ok = fd >= 0 && bind(fd, res->ai_addr, res->ai_addrlen) == 0 &&
             listen(fd, PMD_LISTEN_BACKLOG) == 0;
    int saved = errno;
    freeaddrinfo(res);
    if (!ok) {
        if (fd >= 0)
            close(fd);
        errno = saved;
        return -1;
    }
    return fd;
}

int pmd_listen_open(const pmd_dconf *c, int *fds)
{
    for (size_t i = 0; i < c->nlisten; i++) {
        const pmd_listen_spec *l = &c->listen[i];
        int gai = 0;
        int fd = l->unix_socket ? open_unix(l) : open_tcp(l, &gai);
        if (fd < 0) {
            const char *kv[] = {"listen", l->name, "error",
                                fd == -2 ? gai_strerror(gai) : strerror(errno)};
            pmd_log(PMD_LOG_ERROR, "listen_failed", kv, 2);
            while (i > 0)
                close(fds[--i]);
            return -1;
        }
        fds[i] = fd;
    }
    return (int)c->nlisten;
}
