/* SPDX-License-Identifier: MIT */
/* A process a test started and what it wrote: its log read from a pipe,
 * counting lines in it, waiting for lines, and what a request loop's log
 * must show (check_daemon, check_daemon_api, check_peerops, check_mesh3,
 * check_netns). */
#ifndef PM_TESTS_PROCLOG_H
#define PM_TESTS_PROCLOG_H

#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
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

/* ---- the log of a request loop (pm-test-worker's "sent N" / "reply N
 * from ..." / "error N ..." lines; check_mesh3, check_netns). These assert,
 * so check.h comes first. */

/* The end of a log on stderr: Check's messages have a size limit, so a
 * failure message names what was awaited and the log goes here. */
static inline const char *tail_of(const char *log)
{
    size_t n = strlen(log);
    const char *t = n > 6000 ? log + n - 6000 : log;
    fprintf(stderr, "---- log (last %zu bytes) ----\n%s\n---- end of log ----\n", strlen(t), t);
    return "(log on stderr)";
}

/* Waits until r has written needle n times, reading the pipes of others
 * (nothers of them, r among them or not) meanwhile so that no process
 * blocks on a full pipe. Fails the test, its log's end on stderr, when that
 * does not happen within timeout_ms or r closes its output first. */
static inline void proc_wait_among(proc *r, proc *const *others, size_t nothers, const char *needle,
                                   int n, int timeout_ms)
{
    uint64_t end = pm_test_ms() + (uint64_t)timeout_ms;
    while (count_of(r->log, needle) < n && !r->eof && pm_test_ms() < end) {
        proc_read(r, 50);
        for (size_t i = 0; i < nothers; i++)
            if (others[i] != r && others[i]->pid > 0)
                proc_read(others[i], 0);
    }
    ck_assert_msg(count_of(r->log, needle) >= n,
                  "waited %d ms for %d line(s) with \"%s\"%s; %s", timeout_ms, n,
                  needle, r->eof ? " (the process closed its output)" : "",
                  count_of(r->log, needle) >= n ? "" : tail_of(r->log));
}

/* Waits until r has written needle n times (proc_wait_among, no others). */
static inline void proc_wait_log(proc *r, const char *needle, int n, int timeout_ms)
{
    proc_wait_among(r, NULL, 0, needle, n, timeout_ms);
}

/* Counts the caller's lines in log: requests sent (the highest N), and
 * fails unless every request has exactly one outcome (the last may still
 * be in flight: at most one). Returns the highest N sent. */
static inline long exactly_once(const char *log, const char *who)
{
    long sent = 0;
    char needle[64];
    for (;;) {
        snprintf(needle, sizeof(needle), "text=\"sent %ld\"", sent + 1);
        if (strstr(log, needle) == NULL)
            break;
        sent++;
    }
    /* Every case waits for replies first: no "sent" line means the log
     * format changed, not that nothing was sent. */
    ck_assert_msg(sent >= 2, "%s: no requests found in the log %s", who, sent >= 2 ? "" : tail_of(log));
    for (long i = 1; i <= sent; i++) {
        snprintf(needle, sizeof(needle), "text=\"reply %ld from ", i);
        int replies = count_of(log, needle);
        snprintf(needle, sizeof(needle), "text=\"error %ld ", i);
        int errors = count_of(log, needle);
        ck_assert_msg(replies + errors == 1 || (i == sent && replies + errors == 0),
                      "%s: request %ld got %d replies and %d errors (exactly one expected); %s",
                      who, i, replies, errors, replies + errors == 1 ? "" : tail_of(log));
    }
    return sent;
}

/* No request was delivered twice to the answering worker. */
static inline void no_duplicates(const char *log, long sent, const char *who)
{
    char needle[64];
    for (long i = 1; i <= sent; i++) {
        snprintf(needle, sizeof(needle), "text=\"got req %ld from ", i);
        ck_assert_msg(count_of(log, needle) <= 1, "%s: request %ld delivered %d times %s", who, i,
                      count_of(log, needle), count_of(log, needle) <= 1 ? "" : tail_of(log));
    }
}

/* The highest N with a line "PREFIX N " in log (0: none). */
static inline long last_of(const char *log, const char *prefix)
{
    long best = 0;
    size_t pl = strlen(prefix);
    for (const char *p = strstr(log, prefix); p != NULL; p = strstr(p + 1, prefix)) {
        long v = strtol(p + pl, NULL, 10);
        if (v > best)
            best = v;
    }
    return best;
}

#endif
