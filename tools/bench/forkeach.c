/* SPDX-License-Identifier: MIT */
/*
 * forkeach.c - pm-bench batch's baseline: the same batch with one fork per
 * input, at most W children at a time, the hand-written way (a pipe per
 * child for its answer, waitpid for how it ended). Exact blame (the pid
 * names the input), no pool, no restart budget, no hang timeout.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <errno.h>
#include <fcntl.h>
#include <signal.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>
#include <unistd.h>

struct child {
    pid_t pid;
    int fd;       /* read end of its answer pipe */
    size_t input;
};

/* Runs one input in a fresh child: the answer on fd, or the crash. */
static void child_run(const char *in, int fd)
{
    if (strcmp(in, "crash") == 0)
        raise(SIGSEGV);
    char out[64];
    size_t n = batch_answer(in, out, sizeof(out));
    (void)write_all(fd, out, n);
    _exit(0);
}

static int start(struct child *ch, const char *in, size_t i)
{
    int p[2];
    if (pipe2(p, O_CLOEXEC) < 0)
        return -1;
    pid_t pid = fork();
    if (pid < 0) {
        close_pair(p);
        return -1;
    }
    if (pid == 0) {
        close(p[0]);
        child_run(in, p[1]);
    }
    close(p[1]);
    ch->pid = pid;
    ch->fd = p[0];
    ch->input = i;
    return 0;
}

/* 0 with every outcome checked (answers right, crashes blamed on their
 * input, nothing else), -1 otherwise. */
int forkeach_batch(const char *const *inputs, size_t n, unsigned w, size_t *wrong)
{
    struct child *kids = calloc(w, sizeof(*kids));
    if (kids == NULL)
        return -1;
    size_t next = 0, done = 0;
    unsigned running = 0;
    *wrong = 0;
    while (done < n) {
        for (unsigned k = 0; k < w && next < n; k++) {
            if (kids[k].pid != 0)
                continue;
            if (start(&kids[k], inputs[next], next) < 0)
                die("fork-per-input: fork");
            next++;
            running++;
        }
        int status;
        pid_t pid = waitpid(-1, &status, 0);
        if (pid < 0) {
            if (errno == EINTR)
                continue;
            die("fork-per-input: waitpid");
        }
        unsigned k = 0;
        while (k < w && kids[k].pid != pid)
            k++;
        if (k == w)
            continue; /* not ours */
        char buf[64];
        ssize_t got = read(kids[k].fd, buf, sizeof(buf));
        close(kids[k].fd);
        const char *in = inputs[kids[k].input];
        if (strcmp(in, "crash") == 0) {
            if (!WIFSIGNALED(status) || WTERMSIG(status) != SIGSEGV)
                (*wrong)++;
        } else {
            char want[64];
            size_t wn = batch_answer(in, want, sizeof(want));
            if (!WIFEXITED(status) || got != (ssize_t)wn || memcmp(buf, want, wn) != 0)
                (*wrong)++;
        }
        kids[k].pid = 0;
        running--;
        done++;
    }
    free(kids);
    return *wrong == 0 ? 0 : -1;
}
