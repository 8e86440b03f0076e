/* SPDX-License-Identifier: MIT */
/* wake-pingpong.c - what one wake-up of a sleeping process costs on this machine, by three kernel mechanisms, outside procmesh. */
/*
 * Two processes ping-pong N times; each round trip is two wake-ups of a
 * process asleep in the kernel. Mode 0: FUTEX_WAIT / FUTEX_WAKE on shared
 * memory (procmesh's parked ring); 1: a pipe each way (write / blocking
 * read: the pipe relay's mechanism, whose wake-up carries the scheduler's
 * "sync" hint); 2: an eventfd each way. An optional gap (us) before each
 * round trip lets both ends sleep that long first ("cold" wake-ups).
 *
 *   cc -O2 -o /tmp/wake-pingpong tools/bench/wake-pingpong.c
 *   /tmp/wake-pingpong MODE [GAP_US]      # prints p50 and p99 per round trip
 *
 * doc/benchmarks.md, "Quiet run of stop 20", uses it to show that a parked
 * round trip's cost here is the wake-up's, whatever the mechanism.
 */
#define _GNU_SOURCE
#include <linux/futex.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#define ROUNDS 20000

static uint64_t now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (uint64_t)t.tv_sec * 1000000000ull + (uint64_t)t.tv_nsec;
}

static int cmp(const void *a, const void *b)
{
    uint64_t x = *(const uint64_t *)a, y = *(const uint64_t *)b;
    return x < y ? -1 : x > y;
}

static void fwait(_Atomic uint32_t *f, uint32_t v)
{
    while (atomic_load(f) == v)
        syscall(SYS_futex, f, FUTEX_WAIT, v, NULL, NULL, 0);
}

static void fwake(_Atomic uint32_t *f)
{
    atomic_fetch_add(f, 1);
    syscall(SYS_futex, f, FUTEX_WAKE, 1, NULL, NULL, 0);
}

static void hop(int mode, int out, int in, _Atomic uint32_t *wake, _Atomic uint32_t *wait,
                uint32_t seen)
{
    uint64_t x = 1;
    char c = 1;
    if (mode == 0) {
        fwake(wake);
        fwait(wait, seen);
    } else if (mode == 1) {
        if (write(out, &c, 1) != 1 || read(in, &c, 1) != 1)
            exit(1);
    } else {
        if (write(out, &x, 8) != 8 || read(in, &x, 8) != 8)
            exit(1);
    }
}

int main(int argc, char **argv)
{
    if (argc < 2 || argc > 3) {
        fprintf(stderr, "usage: wake-pingpong 0|1|2 [gap_us]  (futex, pipe, eventfd)\n");
        return 2;
    }
    int mode = atoi(argv[1]);
    unsigned gap = argc == 3 ? (unsigned)atoi(argv[2]) : 0;
    unsigned rounds = gap > 0 ? 200 : ROUNDS;
    static uint64_t v[ROUNDS];
    _Atomic uint32_t *sh = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    int a[2], b[2];
    if (sh == MAP_FAILED || pipe(a) < 0 || pipe(b) < 0)
        return 1;
    if (mode == 2) {
        a[0] = a[1] = eventfd(0, 0);
        b[0] = b[1] = eventfd(0, 0);
    }
    pid_t pid = fork();
    if (pid == 0) {
        uint64_t x;
        char c;
        for (unsigned i = 0; i < rounds; i++) {
            if (mode == 0) {
                fwait(&sh[0], i);
                fwake(&sh[16]);
            } else if (mode == 1) {
                if (read(a[0], &c, 1) != 1 || write(b[1], &c, 1) != 1)
                    _exit(1);
            } else {
                if (read(a[0], &x, 8) != 8 || write(b[1], &x, 8) != 8)
                    _exit(1);
            }
        }
        _exit(0);
    }
    for (unsigned i = 0; i < rounds; i++) {
        if (gap > 0)
            usleep(gap);
        uint64_t t0 = now_ns();
        hop(mode, a[1], b[0], &sh[0], &sh[16], i);
        v[i] = now_ns() - t0;
    }
    waitpid(pid, NULL, 0);
    qsort(v, rounds, sizeof(v[0]), cmp);
    static const char *const names[] = {"futex", "pipe", "eventfd"};
    printf("%s gap %u us: p50 %.1f us p99 %.1f us (%u round trips)\n", names[mode % 3], gap,
           (double)v[rounds / 2] / 1e3, (double)v[rounds * 99 / 100] / 1e3, rounds);
    return 0;
}
