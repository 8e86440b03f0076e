/* SPDX-License-Identifier: MIT */
/* sdnotify.c - sd_notify towards procmesh's own service manager; see
 * sdnotify.h. */
#define _GNU_SOURCE
#include "sdnotify.h"

#include <stddef.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <unistd.h>

void pmd_notify(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0')
        return;
    struct sockaddr_un sa;
    if (strlen(path) >= sizeof(sa.sun_path))
        return;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    if (path[0] == '@')
        sa.sun_path[0] = '\0'; /* an abstract socket */
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    if (fd < 0)
        return;
    ssize_t n = sendto(fd, msg, strlen(msg), MSG_NOSIGNAL, (struct sockaddr *)&sa,
                       (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path)));
    (void)n;
    close(fd);
}

uint64_t pmd_watchdog_interval_ms(void)
{
    const char *usec = getenv("WATCHDOG_USEC"), *wpid = getenv("WATCHDOG_PID");
    if (usec == NULL || getenv("NOTIFY_SOCKET") == NULL)
        return 0;
    if (wpid != NULL && atoi(wpid) != (int)getpid())
        return 0;
    unsigned long long us = strtoull(usec, NULL, 10);
    return us >= 2000 ? us / 2000 : 0;
}
