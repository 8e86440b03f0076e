/* SPDX-License-Identifier: MIT */
/* startcost.c - what starting a program costs: fork+exec+wait of each program given, rounds interleaved, with the child's own page faults. */
/*
 *   cc -O2 -o /tmp/startcost tools/bench/startcost.c
 *   /tmp/startcost ROUNDS PROGRAM...   # each PROGRAM run with no argument
 *
 * One round runs every program once, in turn, so that the load of the
 * machine falls on all of them alike. Per program: the wall time of
 * fork+execve+wait4 (p50, p99, over ROUNDS samples) and the child's minor
 * and major page faults (wait4's rusage: the child's own, from its exec to
 * its exit; p50). tools/bench/startcost.sh builds the programs it compares:
 * libc only, linked with libprocmesh, and linked with libprocmesh and its
 * three dependencies, as a worker mapped them before they were loaded on
 * first use.
 */
#define _GNU_SOURCE
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define MAX_PROGS 8

extern char **environ;

static uint64_t now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

static int cmp_u64(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static uint64_t pct(uint64_t *v, int n, int p)
{
    qsort(v, (size_t)n, sizeof(*v), cmp_u64);
    int i = (int)(((int64_t)n * p) / 100);
    return v[i < n ? i : n - 1];
}

/* One fork+exec+wait of path: its wall time (ns) and the child's faults. */
static int run_once(const char *path, uint64_t *ns, uint64_t *minflt, uint64_t *majflt)
{
    char *argv[] = {(char *)path, NULL};
    uint64_t t0 = now_ns();
    pid_t pid = fork();
    if (pid < 0)
        return -1;
    if (pid == 0) {
        execve(path, argv, environ);
        _exit(127);
    }
    int st;
    struct rusage ru;
    if (wait4(pid, &st, 0, &ru) != pid)
        return -1;
    *ns = now_ns() - t0;
    if (!WIFEXITED(st) || WEXITSTATUS(st) != 0) {
        fprintf(stderr, "startcost: %s did not exit 0 (status %d)\n", path, st);
        return -1;
    }
    *minflt = (uint64_t)ru.ru_minflt;
    *majflt = (uint64_t)ru.ru_majflt;
    return 0;
}

int main(int argc, char **argv)
{
    if (argc < 3 || argc - 2 > MAX_PROGS) {
        fprintf(stderr, "usage: startcost ROUNDS PROGRAM... (at most %d programs)\n", MAX_PROGS);
        return 2;
    }
    int rounds = atoi(argv[1]), nprog = argc - 2;
    if (rounds < 1) {
        fprintf(stderr, "startcost: ROUNDS must be at least 1\n");
        return 2;
    }
    uint64_t *ns[MAX_PROGS], *minf[MAX_PROGS], *majf[MAX_PROGS];
    for (int p = 0; p < nprog; p++) {
        ns[p] = calloc((size_t)rounds, sizeof(uint64_t));
        minf[p] = calloc((size_t)rounds, sizeof(uint64_t));
        majf[p] = calloc((size_t)rounds, sizeof(uint64_t));
        if (ns[p] == NULL || minf[p] == NULL || majf[p] == NULL)
            return 1;
    }
    for (int r = 0; r < rounds; r++)
        for (int p = 0; p < nprog; p++)
            if (run_once(argv[2 + p], &ns[p][r], &minf[p][r], &majf[p][r]) < 0)
                return 1;
    printf("%-40s %8s %10s %10s %10s %10s\n", "program", "rounds", "p50 us", "p99 us", "minflt p50",
           "majflt p50");
    for (int p = 0; p < nprog; p++) {
        uint64_t p50 = pct(ns[p], rounds, 50), p99 = pct(ns[p], rounds, 99);
        printf("%-40s %8d %10.1f %10.1f %10llu %10llu\n", argv[2 + p], rounds, (double)p50 / 1e3,
               (double)p99 / 1e3, (unsigned long long)pct(minf[p], rounds, 50),
               (unsigned long long)pct(majf[p], rounds, 50));
    }
    return 0;
}
