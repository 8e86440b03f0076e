/* SPDX-License-Identifier: MIT */
/* daemon.c - pm-bench daemon: idle CPU and memory of the procmesh program with four workers. */
#include "bench.h"

#include <fcntl.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* utime + stime of pid, in clock ticks, or -1. */
static long long cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return -1;
    size_t n = fread(buf, 1, sizeof(buf) - 1, f);
    fclose(f);
    buf[n] = '\0';
    /* The command name may hold spaces and parentheses: the fields start
     * after its last ')'. */
    char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    /* after ") ": state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime */
    if (p == NULL || sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st) != 2)
        return -1;
    return (long long)(ut + st);
}

/* CPU time of pid's main thread in ns from /proc/PID/schedstat (ns
 * resolution), or -1 where the kernel lacks it. */
static long long cpu_ns(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
    FILE *f = fopen(path, "r");
    unsigned long long ns = 0;
    int ok = f != NULL && fscanf(f, "%llu", &ns) == 1;
    if (f != NULL)
        fclose(f);
    return ok ? (long long)ns : -1;
}

static long rss_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %ld kB", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

/* The procmesh program: beside us in a build tree, or in PATH. */
static const char *procmesh_path(char *buf, size_t size)
{
    char dir[4096];
    snprintf(dir, sizeof(dir), "%s", self_exe);
    char *slash = strrchr(dir, '/');
    if (slash != NULL) {
        *slash = '\0';
        snprintf(buf, size, "%s/../src/daemon/procmesh", dir);
        if (access(buf, X_OK) == 0)
            return buf;
        snprintf(buf, size, "%s/procmesh", dir);
        if (access(buf, X_OK) == 0)
            return buf;
    }
    return "procmesh";
}

static int children(pid_t pid, pid_t *out, int max)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    FILE *f = fopen(path, "r");
    int n = 0, c;
    while (f != NULL && n < max && fscanf(f, "%d", &c) == 1)
        out[n++] = c;
    if (f != NULL)
        fclose(f);
    return n;
}

int cmd_daemon(const bench_opts *opts)
{
    unsigned runs = opts->runs;
    char pm[4200];
    const char *prog = procmesh_path(pm, sizeof(pm));
    long tck = sysconf(_SC_CLK_TCK);
    print_machine();
    printf("daemon: %s run --workers 4 -- pm-bench __worker (mesh, idle), 10 s per run, "
           "median of %u runs\n", prog, runs);
    uint64_t *sup = calloc(runs, sizeof(uint64_t)), *wrk = calloc(runs, sizeof(uint64_t)),
             *rss = calloc(runs, sizeof(uint64_t));
    int unit_ns = 0;
    for (unsigned r = 0; r < runs; r++) {
        pid_t pid = fork();
        if (pid == 0) {
            int nul = open("/dev/null", O_WRONLY);
            dup2(nul, 2);
            execlp(prog, "procmesh", "run", "--workers", "4", "--", self_exe, "__worker", (char *)NULL);
            _exit(127);
        }
        pid_t kids[8];
        int nk = 0;
        for (int i = 0; i < 200 && nk < 4; i++) {
            usleep(20000);
            nk = children(pid, kids, 8);
        }
        if (nk < 4) {
            fprintf(stderr, "pm-bench: procmesh did not start its workers (is it installed?)\n");
            kill(pid, SIGKILL);
            wait_child(pid);
            return 1;
        }
        sleep(1); /* let start-up settle */
        /* schedstat (ns) when the kernel has it, else utime+stime (ticks). */
        int ns = cpu_ns(pid) >= 0;
        long long s0 = ns ? cpu_ns(pid) : cpu_ticks(pid), w0 = 0, s1, w1 = 0;
        for (int i = 0; i < nk; i++)
            w0 += ns ? cpu_ns(kids[i]) : cpu_ticks(kids[i]);
        sleep(10);
        s1 = ns ? cpu_ns(pid) : cpu_ticks(pid);
        for (int i = 0; i < nk; i++)
            w1 += ns ? cpu_ns(kids[i]) : cpu_ticks(kids[i]);
        /* CPU in millipercent of one core, to keep the median integral. */
        double per_s = ns ? 1e9 : (double)tck;
        sup[r] = (uint64_t)((double)(s1 - s0) * 100000.0 / (10.0 * per_s));
        wrk[r] = (uint64_t)((double)(w1 - w0) * 100000.0 / (10.0 * per_s));
        unit_ns = ns;
        rss[r] = (uint64_t)rss_kib(pid);
        kill(pid, SIGTERM);
        wait_child(pid);
    }
    printf("  supervisor CPU, idle:        %.3f %% of one core (target < 0.5 %%)\n",
           (double)median(sup, runs) / 1000.0);
    printf("  4 idle workers CPU, total:   %.3f %% of one core\n", (double)median(wrk, runs) / 1000.0);
    printf("  supervisor RSS:              %llu KiB\n", (unsigned long long)median(rss, runs));
    if (unit_ns)
        printf("  (CPU from /proc/PID/schedstat, nanoseconds)\n");
    else
        printf("  (CPU from /proc/PID/stat at %ld ticks/s: resolution %.2f %%)\n", tck,
               100.0 / (10.0 * (double)tck));
    free(sup);
    free(wrk);
    free(rss);
    return 0;
}
