/* SPDX-License-Identifier: MIT */
/* A process a test started and what it wrote: its log read from a pipe,
 * and counting lines in it (check_peerops, check_mesh3). */
#ifndef PM_TESTS_PROCLOG_H
#define PM_TESTS_PROCLOG_H

#include <poll.h>
#include <string.h>
#include <sys/types.h>
#include <unistd.h>

typedef struct proc {
    pid_t pid;
    int fd;    /* the read end of the pipe it writes its log to */
    int in;    /* a pipe to its stdin, or -1 (unused: 0 or -1) */
    int eof;
    char *log; /* what it wrote so far, NUL-terminated */
    size_t len, cap;
} proc;

/* Appends what r wrote, waiting up to ms for the first bytes; never past
 * the buffer (a full log stops growing: the tests wait on what they need
 * long before that). */
static inline void proc_read(proc *r, int ms)
{
    struct pollfd pfd = {.fd = r->fd, .events = POLLIN};
    while (!r->eof && r->len + 1 < r->cap && poll(&pfd, 1, ms) == 1) {
        ssize_t k = read(r->fd, r->log + r->len, r->cap - 1 - r->len);
        if (k <= 0) {
            r->eof = 1;
            break;
        }
        r->len += (size_t)k;
        r->log[r->len] = '\0';
        ms = 0;
    }
}

/* How many times needle occurs in text. */
static inline int count_of(const char *text, const char *needle)
{
    int n = 0;
    for (const char *p = strstr(text, needle); p != NULL; p = strstr(p + 1, needle))
        n++;
    return n;
}

#endif
