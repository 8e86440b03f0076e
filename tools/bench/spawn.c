/* SPDX-License-Identifier: MIT */
/* spawn.c - pm-bench spawn: time to bring N workers to ready beside N bare children. */
#include "bench.h"

#include <dirent.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/wait.h>

/* N bare children that each write one byte to a pipe: the floor of
 * bringing N processes up and hearing from each. With cg, each in a
 * cgroup of its own made for it (cgfloor.c, open): the leaf made and
 * opened in the timed part, a fork child joining it by a write, an exec
 * child born in it (clone3, not held until its execve, as the burst of a
 * procmesh spawn is not); removed after. */
static uint64_t baseline_spawn(int exec_mode, int n, int cg)
{
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    cgfloor_leaf_t *leaves = cg ? calloc((size_t)n, sizeof(*leaves)) : NULL;
    if (pids == NULL || (cg && leaves == NULL))
        die("calloc");
    /* The bench's procmesh.<pid> directory is the one its clusters use
     * too, removed by each cluster's end: made again for each run. */
    char why[400];
    if (cg && cgfloor_open(why, sizeof(why)) < 0) {
        fprintf(stderr, "pm-bench: spawn floor: %s\n", why);
        exit(1);
    }
    uint64_t t0 = pm__now_ns();
    for (int i = 0; i < n; i++) {
        if (cg && cgfloor_leaf((unsigned)i, &leaves[i]) < 0)
            die("spawn floor: a cgroup");
        if (cg && exec_mode)
            pids[i] = cgfloor_clone_into(&leaves[i], 0);
        else
            pids[i] = fork();
        if (pids[i] < 0)
            die("fork");
        if (pids[i] == 0 && cg && !exec_mode && write(leaves[i].procs_fd, "0", 1) != 1)
            _exit(1);
        /* The child has its copy (fork) or was born in it (exec): ours
         * would only add two fds a child to every later fork. */
        if (pids[i] > 0 && cg)
            cgfloor_leaf_close(&leaves[i]);
        if (pids[i] == 0) {
            if (exec_mode) {
                dup2(p[1], 3);
                char *argv[] = {"pm-bench", "__child", NULL};
                execv(self_exe, argv);
                _exit(1);
            }
            char c = 'r';
            _exit(write(p[1], &c, 1) == 1 ? 0 : 1);
        }
    }
    char buf[64];
    for (int got = 0; got < n;) {
        ssize_t k = read(p[0], buf, sizeof(buf) < (size_t)(n - got) ? sizeof(buf) : (size_t)(n - got));
        if (k <= 0)
            die("read");
        got += (int)k;
    }
    uint64_t t = pm__now_ns() - t0;
    for (int i = 0; i < n; i++)
        waitpid(pids[i], NULL, 0);
    for (int i = 0; cg && i < n; i++)
        cgfloor_leaf_remove((unsigned)i, &leaves[i]);
    if (cg)
        cgfloor_close();
    free(leaves);
    free(pids);
    close(p[0]);
    close(p[1]);
    return t;
}

/* The supervisor holds about 8 fds per fork-mode worker (9 exec), 14
 * with the spare (17 exec; kept only below half the limit): N = 1024
 * needs some 9,500 to start, 35,000 for every spare, above the usual
 * soft RLIMIT_NOFILE of 1024 (count_fds prints the figures).
 * Raised to the hard limit, as the procmesh daemon does at start; the
 * number is printed. */
static void raise_nofile(void)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < rl.rlim_max) {
        rl.rlim_cur = rl.rlim_max;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0)
        printf("RLIMIT_NOFILE soft %llu\n", (unsigned long long)rl.rlim_cur);
}

/* Open fds of this process. */
static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n - 3; /* ".", ".." and the directory's own fd */
}

/* The supervisor's fds per worker, after the spawn and once the turns
 * after it have made every spare (made 32 slots per turn): what
 * RLIMIT_NOFILE must allow for N workers. Untimed. */
static void count_fds(pm_cluster *c, int n, int fds0)
{
    int spawned = open_fds() - fds0;
    for (int t = 0; t < n / 32 + 2; t++)
        (void)pm_cluster_run(c, 0);
    int spared = open_fds() - fds0;
    printf("  (N = %d: %d fds after the spawn, %.1f per worker; %d, %.1f per worker, with the spares)\n",
           n, spawned, (double)spawned / n, spared, (double)spared / n);
}

int cmd_spawn(const bench_opts *opts)
{
    static const int all[] = {1, 8, 64, 256, 1024};
    int counts[PM__ARRAY_SIZE(all)];
    size_t ncounts = 0;
    unsigned max = opts->max_n != 0 ? opts->max_n : 64;
    for (size_t k = 0; k < PM__ARRAY_SIZE(all); k++)
        if ((unsigned)all[k] <= max)
            counts[ncounts++] = all[k];
    unsigned runs = opts->runs;
    print_machine();
    raise_nofile();
    printf("spawn: time until N workers are ready, median of %u runs (ms)\n", runs);
    printf("  %-6s %-6s %14s %14s %12s\n", "mode", "N", "procmesh ms", "baseline ms", "ratio");
    int fds0 = open_fds();
    uint64_t *v = calloc(runs, sizeof(*v)), *b = calloc(runs, sizeof(*b)), *f = calloc(runs, sizeof(*f));
    /* The floor in a cgroup per child, beside the bare baseline: what
     * procmesh's default containment costs on this kernel alone. */
    char why[400];
    int cg = opts->row == 0 && cgfloor_open(why, sizeof(why)) == 0;
    if (cg)
        cgfloor_close(); /* a probe: each run makes its own (baseline_spawn) */
    if (opts->row == 0 && !cg)
        printf("  (no floor in cgroups: %s)\n", why);
    else if (cg)
        printf("  (floor: N bare children, each in a cgroup made for it; ratios to the bare baseline)\n");
    for (int exec_mode = 0; exec_mode < 2; exec_mode++) {
        /* --row 1: fork mode only, 2: exec mode only; no baseline (for
         * strace -c, perf stat). */
        if (opts->row != 0 && opts->row != (unsigned)exec_mode + 1)
            continue;
        for (size_t k = 0; k < ncounts; k++) {
            int n = counts[k];
            for (unsigned r = 0; r < runs; r++) {
                b[r] = opts->row != 0 ? 1 : baseline_spawn(exec_mode, n, 0);
                f[r] = cg ? baseline_spawn(exec_mode, n, 1) : 0;
                pm_options *o = bench_options(n, exec_mode);
                /* 1,024 exec'd workers start at once on a few CPUs: the
                 * last is ready seconds after its fork, past the default
                 * 10 s ready timeout on a slow or loaded machine (seen:
                 * -ETIMEDOUT here). This measures the time, not the
                 * timeout. */
                if (n > 64)
                    pm_options_set_ready_timeout_ms(o, 300000);
                pm_cluster *c;
                uint64_t t0 = pm__now_ns();
                int rc = pm_cluster_spawn(o, &c);
                v[r] = pm__now_ns() - t0;
                if (rc < 0) {
                    fprintf(stderr, "pm-bench: spawn of %d: %s\n", n, pm_strerror(rc));
                    return 1;
                }
                if (r == 0)
                    count_fds(c, n, fds0);
                pm_cluster_terminate(c);
                pm_options_free(o);
            }
            uint64_t mv = median(v, runs), mb = median(b, runs), mf = median(f, runs);
            if (cg)
                printf("  %-6s %-6d %14s %14.3f %11.2fx   floor in cgroups\n", exec_mode ? "exec" : "fork", n,
                       "-", (double)mf / 1e6, (double)mf / (double)mb);
            if (opts->row != 0)
                printf("  %-6s %-6d %14.3f %14s %12s\n", exec_mode ? "exec" : "fork", n,
                       (double)mv / 1e6, "-", "-");
            else
                printf("  %-6s %-6d %14.3f %14.3f %11.2fx\n", exec_mode ? "exec" : "fork", n,
                       (double)mv / 1e6, (double)mb / 1e6, (double)mv / (double)mb);
        }
    }
    free(v);
    free(b);
    free(f);
    return 0;
}
