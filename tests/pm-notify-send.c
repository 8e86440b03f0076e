/* SPDX-License-Identifier: MIT */
/*
 * pm-notify-send - a tiny sd_notify client for the tests.
 *
 *   pm-notify-send [--fork] [--delay MS] [--repeat N] [--fds N] MESSAGE [-- COMMAND [ARG...]]
 *
 * Sends MESSAGE (e.g. READY=1) to $NOTIFY_SOCKET ('@' = abstract), from this
 * process, or from a forked child with --fork (a forgery as far as the
 * supervisor is concerned), after MS milliseconds, N times in a row (a
 * worker that floods); then execs COMMAND, so that the process that sent is
 * the one that goes on running. With --fds N the message carries N copies
 * of a pipe's write end (SCM_RIGHTS; this process keeps none), and COMMAND
 * runs only once the pipe's read end is at its end, every copy closed by
 * the receiver (exit 9 after 20 s without that).
 */
#define _GNU_SOURCE
#include <stddef.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/socket.h>
#include <sys/un.h>
#include <sys/wait.h>
#include <unistd.h>

/* --fds: the write end to pass (-1: none) and how many copies. */
static int pass_fd = -1, pass_n;

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
    union {
        struct cmsghdr h;
        char b[CMSG_SPACE(16 * sizeof(int))];
    } ctl;
    memset(&ctl, 0, sizeof(ctl));
    struct iovec iov = {(void *)msg, strlen(msg)};
    struct msghdr mh = {.msg_name = &sa, .msg_namelen = len, .msg_iov = &iov, .msg_iovlen = 1};
    if (pass_fd >= 0 && pass_n > 0 && pass_n <= 16) {
        mh.msg_control = ctl.b;
        mh.msg_controllen = CMSG_SPACE((size_t)pass_n * sizeof(int));
        struct cmsghdr *c = CMSG_FIRSTHDR(&mh);
        c->cmsg_level = SOL_SOCKET;
        c->cmsg_type = SCM_RIGHTS;
        c->cmsg_len = CMSG_LEN((size_t)pass_n * sizeof(int));
        for (int k = 0; k < pass_n; k++)
            memcpy(CMSG_DATA(c) + (size_t)k * sizeof(int), &pass_fd, sizeof(int));
    }
    ssize_t n = sendmsg(fd, &mh, 0);
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
        else if (strcmp(argv[i], "--fds") == 0 && i + 1 < argc)
            pass_n = atoi(argv[++i]);
    }
    if (i >= argc) {
        fprintf(stderr, "usage: pm-notify-send [--fork] [--delay MS] [--repeat N] [--fds N] MESSAGE "
                        "[-- COMMAND...]\n");
        return 2;
    }
    const char *msg = argv[i++];
    int pipe_rd = -1;
    if (pass_n > 0) {
        int p[2];
        if (pipe2(p, O_CLOEXEC | O_NONBLOCK) < 0)
            return 1;
        pipe_rd = p[0];
        pass_fd = p[1];
    }
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
    if (pipe_rd >= 0) {
        /* Ours closed: only the receiver's copies hold the pipe open. */
        close(pass_fd);
        struct pollfd pfd = {.fd = pipe_rd, .events = POLLIN};
        char c;
        int closed = 0;
        for (int k = 0; k < 200 && !closed; k++)
            closed = poll(&pfd, 1, 100) == 1 && read(pipe_rd, &c, 1) == 0;
        if (!closed)
            return 9;
        close(pipe_rd);
    }
    if (i < argc && strcmp(argv[i], "--") == 0 && i + 1 < argc) {
        execvp(argv[i + 1], argv + i + 1);
        return 127;
    }
    return 0;
}
