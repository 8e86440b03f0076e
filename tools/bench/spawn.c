/* SPDX-License-Identifier: MIT */
/* spawn.c - pm-bench spawn: time to bring N workers to ready beside N bare children. */
#define _GNU_SOURCE
#include "bench.h"

#include "channel/channel.h"
#include "channel/ring.h"

#include <dirent.h>
#include <fcntl.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/epoll.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

/* The kernel objects procmesh makes for each worker's channel, made as
 * channel.c makes them (pm__channel_create: a sealed memfd holding both
 * rings, mapped and not copied by a fork, its control page and each
 * ring's first pages written, the hub's eventfd, the worker's one-way
 * doorbell pair, the fd-passing SEQPACKET pair with the least send
 * buffer), and its pidfd after the fork. What a supervisor of this design
 * pays per worker before any bookkeeping of its own. */
typedef struct chan_floor_t {
    int memfd, efd, db[2], sp[2], pidfd;
    void *map;
} chan_floor_t;

/* Which child holds each fd of the floor (-2: the cluster's loop, -1:
 * none of the floor's), so that a child drops exactly the others'. */
static int *fd_owner;
static int fd_owner_max = -1;

static void own_fd(int fd, int who)
{
    if (fd < 0)
        return;
    if (fd > fd_owner_max) {
        int *o = realloc(fd_owner, ((size_t)fd + 1) * sizeof(*o));
        if (o == NULL)
            die("realloc");
        for (int k = fd_owner_max + 1; k <= fd; k++)
            o[k] = -1;
        fd_owner = o;
        fd_owner_max = fd;
    }
    fd_owner[fd] = who;
}

static void chan_floor_make(chan_floor_t *ch, size_t size, int who)
{
    ch->memfd = memfd_create("pm-bench-floor", MFD_CLOEXEC | MFD_ALLOW_SEALING);
    if (ch->memfd < 0 || ftruncate(ch->memfd, (off_t)size) < 0 ||
        fcntl(ch->memfd, F_ADD_SEALS, F_SEAL_SEAL | F_SEAL_SHRINK | F_SEAL_GROW) < 0)
        die("spawn floor: a memfd");
    ch->map = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, ch->memfd, 0);
    if (ch->map == MAP_FAILED)
        die("spawn floor: mmap");
    (void)madvise(ch->map, size, MADV_DONTFORK);
    /* The control page and, for each ring, its header and first data page
     * (ring.c's format, channel.c's touch_first_data_page). */
    size_t region = pm__ring_region_size(256 * 1024);
    memset(ch->map, 0, PM__CTL_SIZE);
    for (int r = 0; r < 2; r++) {
        char *at = (char *)ch->map + PM__CTL_SIZE + (size_t)r * region;
        memset(at, 0, 64);
        at[PM__RING_HDR_SIZE] = 0;
    }
    ch->efd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    if (ch->efd < 0 || socketpair(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ch->db) < 0 ||
        socketpair(AF_UNIX, SOCK_SEQPACKET | SOCK_CLOEXEC | SOCK_NONBLOCK, 0, ch->sp) < 0)
        die("spawn floor: a doorbell");
    (void)shutdown(ch->db[0], SHUT_WR);
    (void)shutdown(ch->db[1], SHUT_RD);
    int one = 1;
    (void)setsockopt(ch->sp[0], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    (void)setsockopt(ch->sp[1], SOL_SOCKET, SO_SNDBUF, &one, sizeof(one));
    ch->pidfd = -1;
    int fds[] = {ch->memfd, ch->efd, ch->db[0], ch->db[1], ch->sp[0], ch->sp[1]};
    for (size_t k = 0; k < PM__ARRAY_SIZE(fds); k++)
        own_fd(fds[k], who);
}

static void chan_floor_free(chan_floor_t *ch, size_t size)
{
    int fds[] = {ch->memfd, ch->efd, ch->db[0], ch->db[1], ch->sp[0], ch->sp[1], ch->pidfd};
    for (size_t i = 0; i < PM__ARRAY_SIZE(fds); i++)
        if (fds[i] >= 0) {
            own_fd(fds[i], -1);
            close(fds[i]);
        }
    munmap(ch->map, size);
}

/* The cluster's loop, once per spawn: an io_uring with its rings mapped
 * as liburing maps them (MAP_POPULATE), a timerfd and an eventfd; where
 * io_uring is refused, an epoll fd, as procmesh falls back to. */
typedef struct loop_floor_t {
    int fds[3];
    void *maps[2];
    size_t lens[2];
} loop_floor_t;

struct uring_params_floor {
    uint32_t sq_entries, cq_entries, flags, sq_thread_cpu, sq_thread_idle, features, wq_fd, resv[3];
    struct {
        uint32_t head, tail, ring_mask, ring_entries, flags, dropped, array, resv1;
        uint64_t user_addr;
    } sq_off;
    struct {
        uint32_t head, tail, ring_mask, ring_entries, overflow, cqes, flags, resv1;
        uint64_t user_addr;
    } cq_off;
};

static void loop_floor_make(loop_floor_t *l)
{
    memset(l, 0, sizeof(*l));
    struct uring_params_floor prm;
    memset(&prm, 0, sizeof(prm));
    l->fds[0] = (int)syscall(SYS_io_uring_setup, 64u, &prm);
    if (l->fds[0] >= 0) {
        /* One mapping for both rings (IORING_FEAT_SINGLE_MMAP, 5.4), one
         * for the submission entries. */
        size_t sq = prm.sq_off.array + prm.sq_entries * 4u, cq = prm.cq_off.cqes + prm.cq_entries * 16u;
        l->lens[0] = sq > cq ? sq : cq;
        l->lens[1] = prm.sq_entries * 64u;
        l->maps[0] = mmap(NULL, l->lens[0], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, l->fds[0], 0);
        l->maps[1] = mmap(NULL, l->lens[1], PROT_READ | PROT_WRITE, MAP_SHARED | MAP_POPULATE, l->fds[0],
                          0x10000000);
        for (int i = 0; i < 2; i++)
            if (l->maps[i] == MAP_FAILED)
                l->maps[i] = NULL;
    } else {
        l->fds[0] = epoll_create1(EPOLL_CLOEXEC);
    }
    l->fds[1] = timerfd_create(CLOCK_MONOTONIC, TFD_CLOEXEC | TFD_NONBLOCK);
    l->fds[2] = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
    for (int i = 0; i < 3; i++)
        own_fd(l->fds[i], -2);
}

static void loop_floor_free(loop_floor_t *l)
{
    for (int i = 0; i < 2; i++)
        if (l->maps[i] != NULL)
            munmap(l->maps[i], l->lens[i]);
    for (int i = 0; i < 3; i++)
        if (l->fds[i] >= 0) {
            own_fd(l->fds[i], -1);
            close(l->fds[i]);
        }
}

/* The fork child of channel i: drops every fd of the floor that is not
 * its own (the loop's and the other children's, runs of consecutive
 * numbers one close_range each, as forkdrop.c does) and the loop's
 * mappings, maps its ring and writes to it. */
static void chan_floor_child(const chan_floor_t *ch, int i, const loop_floor_t *l, size_t size)
{
    for (int fd = 0; fd <= fd_owner_max;) {
        if (fd_owner[fd] == -1 || fd_owner[fd] == i) {
            fd++;
            continue;
        }
        int last = fd;
        while (last + 1 <= fd_owner_max && fd_owner[last + 1] != -1 && fd_owner[last + 1] != i)
            last++;
        (void)syscall(SYS_close_range, (unsigned)fd, (unsigned)last, 0u);
        fd = last + 1;
    }
    for (int k = 0; k < 2; k++)
        if (l->maps[k] != NULL)
            munmap(l->maps[k], l->lens[k]);
    void *m = mmap(NULL, size, PROT_READ | PROT_WRITE, MAP_SHARED, ch->memfd, 0);
    if (m == MAP_FAILED)
        _exit(1);
    *(volatile char *)((char *)m + PM__CTL_SIZE) = 1;
}

/* N bare children that each write one byte to a pipe: the floor of
 * bringing N processes up and hearing from each. With cg, each in a
 * cgroup of its own made for it (cgfloor.c, open): the leaf made and
 * opened in the timed part, a fork child joining it by a write, an exec
 * child born in it (clone3, not held until its execve, as the burst of a
 * procmesh spawn is not); removed after. */
static uint64_t baseline_spawn(int exec_mode, int n, int cg, int chan)
{
    int p[2];
    if (pipe(p) < 0)
        die("pipe");
    pid_t *pids = calloc((size_t)n, sizeof(*pids));
    cgfloor_leaf_t *leaves = cg ? calloc((size_t)n, sizeof(*leaves)) : NULL;
    if (pids == NULL || (cg && leaves == NULL))
        die("calloc");
    /* The floor's own procmesh.<pid>.<ns>.<k> directory (cgfloor.c),
     * made again for each run, as each cluster makes its own. */
    char why[400];
    if (cg && cgfloor_open(why, sizeof(why)) < 0) {
        fprintf(stderr, "pm-bench: spawn floor: %s\n", why);
        exit(1);
    }
    /* With chan (fork mode): the cluster's loop too, once per spawn, and
     * each child's channel. The pipe is not the floor's: every child
     * keeps its write end. */
    chan_floor_t *chs = chan ? calloc((size_t)n, sizeof(*chs)) : NULL;
    size_t csize = PM__CTL_SIZE + 2 * pm__ring_region_size(256 * 1024); /* bench_options' rings */
    if (chan && chs == NULL)
        die("calloc");
    loop_floor_t loop;
    uint64_t t0 = pm__now_ns();
    if (chan)
        loop_floor_make(&loop);
    for (int i = 0; i < n; i++) {
        if (chan)
            chan_floor_make(&chs[i], csize, i);
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
        if (pids[i] == 0 && chan && !exec_mode)
            chan_floor_child(&chs[i], i, &loop, csize);
        if (pids[i] > 0 && chan) {
            chs[i].pidfd = (int)syscall(SYS_pidfd_open, pids[i], 0u);
            own_fd(chs[i].pidfd, i);
            /* The worker's ends, as procmesh closes them after a fork. */
            own_fd(chs[i].db[1], -1);
            own_fd(chs[i].sp[1], -1);
            close(chs[i].db[1]);
            close(chs[i].sp[1]);
            chs[i].db[1] = chs[i].sp[1] = -1;
        }
        /* The child has its copy (fork) or was born in it (exec): ours
         * would only add two fds a child to every later fork. */
        if (pids[i] > 0 && cg)
            cgfloor_leaf_close(&leaves[i]);
        if (pids[i] == 0) {
            if (exec_mode) {
                /* With chan: the ring at fd 4; every other fd of the
                 * floor is close-on-exec, so the execve drops them (as
                 * it does procmesh's). */
                dup2(p[1], 3);
                if (chan)
                    dup2(chs[i].memfd, 4);
                char *argv[] = {"pm-bench", "__child", chan ? "ring" : NULL, NULL};
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
    for (int i = 0; chan && i < n; i++)
        chan_floor_free(&chs[i], csize);
    free(chs);
    if (chan)
        loop_floor_free(&loop);
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
    uint64_t *v = calloc(runs, sizeof(*v)), *b = calloc(runs, sizeof(*b)), *f = calloc(runs, sizeof(*f)),
             *fc = calloc(runs, sizeof(*fc));
    /* The floor in a cgroup per child, beside the bare baseline: what
     * procmesh's default containment costs on this kernel alone. */
    char why[400];
    int cg = opts->row == 0 && cgfloor_open(why, sizeof(why)) == 0;
    if (cg)
        cgfloor_close(); /* a probe: each run makes its own (baseline_spawn) */
    if (opts->row == 0 && !cg)
        printf("  (no floor in cgroups: %s)\n", why);
    else if (cg)
        printf("  (floor: N bare children, each in a cgroup made for it; with channels: also each one's\n"
               "   channel as procmesh makes it and the cluster's loop, each child dropping the others'\n"
               "   fds (a fork child by close_range, an exec'd one by its execve) and mapping its ring;\n"
               "   ratios to the bare baseline)\n");
    for (int exec_mode = 0; exec_mode < 2; exec_mode++) {
        /* --row 1: fork mode only, 2: exec mode only; no baseline (for
         * strace -c, perf stat). */
        if (opts->row != 0 && opts->row != (unsigned)exec_mode + 1)
            continue;
        for (size_t k = 0; k < ncounts; k++) {
            int n = counts[k];
            for (unsigned r = 0; r < runs; r++) {
                b[r] = opts->row != 0 ? 1 : baseline_spawn(exec_mode, n, 0, 0);
                f[r] = cg ? baseline_spawn(exec_mode, n, 1, 0) : 0;
                fc[r] = cg ? baseline_spawn(exec_mode, n, 1, 1) : 0;
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
            uint64_t mv = median(v, runs), mb = median(b, runs), mf = median(f, runs), mfc = median(fc, runs);
            if (cg)
                printf("  %-6s %-6d %14s %14.3f %11.2fx   floor in cgroups\n", exec_mode ? "exec" : "fork", n,
                       "-", (double)mf / 1e6, (double)mf / (double)mb);
            if (cg)
                printf("  %-6s %-6d %14s %14.3f %11.2fx   floor in cgroups, with channels\n",
                       exec_mode ? "exec" : "fork", n, "-", (double)mfc / 1e6, (double)mfc / (double)mb);
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
    free(fc);
    return 0;
}
