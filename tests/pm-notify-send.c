/* SPDX-License-Identifier: MIT */
/*
 * pm-notify-send - a tiny sd_notify client for the tests.
 *
 *   pm-notify-send [--fork] [--delay MS] [--repeat N] MESSAGE [-- COMMAND [ARG...]]
 *
 * Sends MESSAGE (e.g. READY=1) to $NOTIFY_SOCKET ('@' = abstract), from this
 * process, or from a forked child with --fork (a forgery as far as the
 * supervisor is concerned), after MS milliseconds, N times in a row (a
 * worker that floods); then execs COMMAND, so that the process that sent is
 * the one that goes on running.
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

static int send_once(const char *msg)
{
    const char *path = getenv("NOTIFY_SOCKET");
    if (path == NULL || path[0] == '\0' || strlen(path) >= sizeof(((struct sockaddr_un *)0)->sun_path))
        return 1;
    struct sockaddr_un sa;
    memset(&sa, 0, sizeof(sa));
    sa.sun_family = AF_UNIX;
    strcpy(sa.sun_path, path);
    if (path[0] == '@')
        sa.sun_path[0] = '\0';
    int fd = socket(AF_UNIX, SOCK_DGRAM | SOCK_CLOEXEC, 0);
    socklen_t len = (socklen_t)(offsetof(struct sockaddr_un, sun_path) + strlen(path));
    ssize_t n = sendto(fd, msg, strlen(msg), 0, (struct sockaddr *)&sa, len);
    close(fd);
    return n == (ssize_t)strlen(msg) ? 0 : 1;
}

int main(int argc, char **argv)
{
    int i = 1, forked = 0, delay = 0, repeat = 1;
    for (; i < argc && strncmp(argv[i], "--", 2) == 0 && strcmp(argv[i], "--") != 0; i++) {
        if (strcmp(argv[i], "--fork") == 0)
            forked = 1;
        else if (strcmp(argv[i], "--delay") == 0 && i + 1 < argc)
            delay = atoi(argv[++i]);
        else if (strcmp(argv[i], "--repeat") == 0 && i + 1 < argc)
            repeat = atoi(argv[++i]);
    }
    if (i >= argc) {
        fprintf(stderr, "usage: pm-notify-send [--fork] [--delay MS] [--repeat N] MESSAGE [-- COMMAND...]\n");
        return 2;
    }
    const char *msg = argv[i++];
    usleep((useconds_t)delay * 1000);
    if (forked) {
        pid_t p = fork();
        if (p == 0)
            _exit(send_once(msg));
        waitpid(p, NULL, 0);
    } else {
        for (int k = 0; k < repeat; k++)
            if (send_once(msg) != 0)
                return 1;
    }
    if (i < argc && strcmp(argv[i], "--") == 0 && i + 1 < argc) {
        execvp(argv[i + 1], argv + i + 1);
        return 127;
    }
    return 0;
}
