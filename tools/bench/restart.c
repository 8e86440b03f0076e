/* SPDX-License-Identifier: MIT */
/* restart.c - pm-bench restart: crash-to-ready latency of a worker beside a bare fork+exit+wait. */
#define _GNU_SOURCE /* memfd_create */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/eventfd.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#ifndef P_PIDFD
#define P_PIDFD 3 /* glibc < 2.36 */
#endif

#include "os/seccomp_filter.h"

#define NOBODY 65534

static void print_lat(const char *name, uint64_t *v, size_t n, uint64_t base_p50)
{
    sort_u64(v, n);
    uint64_t p50 = percentile(v, n, 0.5), p99 = percentile(v, n, 0.99);
    char ratio[32];
    format_ratio(ratio, sizeof(ratio), p50, base_p50, 2);
    printf("  %-34s %10.3f %10.3f %14s\n", name, (double)p50 / 1e6, (double)p99 / 1e6, ratio);
}

/* From a worker's ready to its kill (--settle-ms). */
static uint64_t settle_ns = 10000000ull;

void restart_set_settle_ms(unsigned ms)
{
    settle_ns = (uint64_t)ms * 1000000ull;
}

/* Bare fork + _exit + waitpid (or fork + exec + wait): the floor of any
 * restart, measured the same way. */
void restart_baseline(int exec_mode, unsigned rounds, uint64_t *v)
{
    for (unsigned i = 0; i < rounds; i++) {
        uint64_t t0 = pm__now_ns();
        pid_t pid = fork();
        if (pid == 0) {
            if (exec_mode) {
                char *argv[] = {"pm-bench", "__child", NULL};
                execv(self_exe, argv);
            }
            _exit(0);
        }
        waitpid(pid, NULL, 0);
        v[i] = pm__now_ns() - t0;
    }
}

/* ------------------------------------------------------------------ the floor of a restart */

/* The least a restart of this design costs, without procmesh: a worker
 * that has run (it idles in pause) is SIGKILLed; the supervisor learns of
 * the death by its pidfd (poll), reaps it (waitid P_PIDFD), and starts the
 * replacement (fork, or vfork + exec of this program), which writes a word
 * into a page of shared memory (exec: mapped from a memfd first) and rings
 * an eventfd; the supervisor's poll on the eventfd returns: ready. One
 * death, one wake-up on it, one start, one shared page, one wake-up on
 * readiness: what any supervisor that hears of a crash from the kernel
 * and of readiness through shared memory pays on this machine, beside the
 * baseline's start and exit. procmesh adds to it its loop (io_uring), its
 * containment, the channel, the handshake and its bookkeeping. */
static int floor_memfd = -1, floor_efd = -1;
static volatile uint64_t *floor_word;

/* The replacement's part: say ready through the page and the eventfd,
 * then idle until killed. */
static void floor_ready(volatile uint64_t *word, int efd)
{
    uint64_t one = 1;
    *word += 1;
    if (write(efd, &one, sizeof(one)) != sizeof(one))
        _exit(1);
    for (;;)
        pause();
}

/* "pm-bench __floor MEMFD EFD": the exec-mode replacement. */
int floor_child_main(int argc, char **argv)
{
    if (argc < 4)
        return 2;
    int memfd = atoi(argv[2]), efd = atoi(argv[3]);
    void *at = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, memfd, 0);
    if (at == MAP_FAILED)
        return 1;
    floor_ready(at, efd);
    return 0;
}

/* The floor's leaf when its row contains the replacement in a cgroup
 * (cgfloor.c): made once, as procmesh keeps a slot's leaf from one
 * incarnation to the next. dir_fd -1: no cgroup. */
static cgfloor_leaf_t floor_leaf = {-1, -1};

static pid_t floor_start(int exec_mode)
{
    if (!exec_mode) {
        pid_t pid = fork();
        /* Fork mode joins by a write, as procmesh's fork child does
         * (clone3 into a cgroup skips glibc's fork handlers). */
        if (pid == 0 && floor_leaf.dir_fd >= 0 && write(floor_leaf.procs_fd, "0", 1) != 1)
            _exit(1);
        if (pid == 0)
            floor_ready(floor_word, floor_efd);
        return pid;
    }
    char m[16], e[16];
    snprintf(m, sizeof(m), "%d", floor_memfd);
    snprintf(e, sizeof(e), "%d", floor_efd);
    char *argv[] = {"pm-bench", "__floor", m, e, NULL};
    /* Exec mode is born in it: clone3 CLONE_INTO_CGROUP, the vfork-style
     * clone of procmesh's exec spawn. */
    if (floor_leaf.dir_fd >= 0)
        return cgfloor_vfork_exec(&floor_leaf, self_exe, argv);
    pid_t pid = vfork();
    if (pid == 0) {
        execv(self_exe, argv);
        _exit(127);
    }
    return pid;
}

/* The standby floor's: forked ahead (after the ready before, off the
 * timed path), in the cgroup when there is one, it waits for a word on
 * the go eventfd, as procmesh's warm standby does, then says ready. */
static int floor_go = -1;

static pid_t floor_start_standby(void)
{
    pid_t pid = fork();
    if (pid != 0)
        return pid;
    uint64_t go;
    if ((floor_leaf.dir_fd >= 0 && write(floor_leaf.procs_fd, "0", 1) != 1) ||
        read(floor_go, &go, sizeof(go)) != sizeof(go))
        _exit(1);
    floor_ready(floor_word, floor_efd);
    return 0; /* not reached */
}

static int floor_wait(int fd)
{
    struct pollfd p = {fd, POLLIN, 0};
    while (poll(&p, 1, 10000) < 0)
        if (errno != EINTR)
            return -1;
    return p.revents != 0 ? 0 : -1;
}

/* Per row, when phases is not NULL: kill -> reaped, reaped -> forked,
 * forked -> ready (ns per round), and the page faults and context switches
 * of the supervisor and of its reaped workers, summed over the rounds. */
typedef struct restart_phases {
    uint64_t *reap, *fork, *ready;
    long sup_minflt, sup_majflt, sup_nvcsw, sup_nivcsw, kid_minflt;
} restart_phases;

/* What this process (self) and its reaped children (kids) spent between
 * the two readings, into ph. */
static void phases_usage(restart_phases *ph, const struct rusage *self0, const struct rusage *self1,
                         const struct rusage *kids0, const struct rusage *kids1)
{
    ph->sup_minflt = self1->ru_minflt - self0->ru_minflt;
    ph->sup_majflt = self1->ru_majflt - self0->ru_majflt;
    ph->sup_nvcsw = self1->ru_nvcsw - self0->ru_nvcsw;
    ph->sup_nivcsw = self1->ru_nivcsw - self0->ru_nivcsw;
    ph->kid_minflt = kids1->ru_minflt - kids0->ru_minflt;
}

/* K rounds of the floor, each replacement in a cgroup when cg (the leaf
 * made before the rounds), forked ahead and let go by an eventfd after
 * the reap when standby (fork mode); 0, -1 if a step failed (said on
 * stderr), or -EOPNOTSUPP when cg and there is no cgroup to make (said
 * too). *kid_minflt: the minor faults of the reaped children, per round.
 * ph, when not NULL: the phases of each round, as the procmesh rows', so
 * that a gap between a row and its floor is put in one phase, and this
 * process's faults (a fork makes its written pages copy-on-write). */
static int restart_floor(int exec_mode, int cg, int standby, unsigned rounds, uint64_t *v,
                         double *kid_minflt, restart_phases *ph)
{
    struct rusage k0, k1, s0, s1;
    int rc = -1, pidfd = -1;
    pid_t pid = -1, next = -1;
    uint64_t x, one = 1;
    char why[400];
    if (cg && cgfloor_open(why, sizeof(why)) < 0) {
        printf("  %-34s (skipped: %s)\n", "floor in a cgroup", why);
        return -EOPNOTSUPP;
    }
    if (cg && cgfloor_leaf(0, &floor_leaf) < 0) {
        perror("pm-bench: restart floor: its cgroup");
        cgfloor_close();
        return -1;
    }
    floor_memfd = memfd_create("pm-bench-floor", 0);
    floor_efd = eventfd(0, 0);
    floor_go = standby ? eventfd(0, 0) : -1;
    if (floor_memfd < 0 || floor_efd < 0 || (standby && floor_go < 0) || ftruncate(floor_memfd, 4096) < 0)
        goto out;
    floor_word = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_SHARED, floor_memfd, 0);
    if (floor_word == MAP_FAILED)
        goto out;
    if ((pid = floor_start(exec_mode)) < 0 || floor_wait(floor_efd) < 0 ||
        read(floor_efd, &x, sizeof(x)) != sizeof(x))
        goto out;
    getrusage(RUSAGE_CHILDREN, &k0);
    getrusage(RUSAGE_SELF, &s0);
    for (unsigned i = 0; i < rounds; i++) {
        if (standby && (next = floor_start_standby()) < 0)
            goto out;
        /* as the procmesh rows run their loop settle_ns after ready */
        usleep((useconds_t)(settle_ns / 1000));
        if ((pidfd = (int)syscall(SYS_pidfd_open, pid, 0)) < 0)
            goto out;
        uint64_t t0 = pm__now_ns();
        kill(pid, SIGKILL);
        siginfo_t si;
        if (floor_wait(pidfd) < 0 || waitid((idtype_t)P_PIDFD, (id_t)pidfd, &si, WEXITED) < 0)
            goto out;
        uint64_t t_reaped = pm__now_ns();
        close(pidfd);
        pidfd = -1;
        if (standby) {
            pid = next;
            next = -1;
            if (write(floor_go, &one, sizeof(one)) != sizeof(one))
                goto out;
        } else if ((pid = floor_start(exec_mode)) < 0) {
            goto out;
        }
        uint64_t t_forked = pm__now_ns();
        if (floor_wait(floor_efd) < 0 || read(floor_efd, &x, sizeof(x)) != sizeof(x))
            goto out;
        v[i] = pm__now_ns() - t0;
        if (ph != NULL) {
            ph->reap[i] = t_reaped - t0;
            ph->fork[i] = t_forked - t_reaped;
            ph->ready[i] = t0 + v[i] - t_forked;
        }
    }
    getrusage(RUSAGE_CHILDREN, &k1);
    getrusage(RUSAGE_SELF, &s1);
    *kid_minflt = (double)(k1.ru_minflt - k0.ru_minflt) / rounds;
    if (ph != NULL)
        phases_usage(ph, &s0, &s1, &k0, &k1);
    rc = 0;
out:
    if (rc < 0)
        perror("pm-bench: restart floor");
    if (pid > 0) {
        kill(pid, SIGKILL);
        waitpid(pid, NULL, 0);
    }
    if (next > 0) {
        kill(next, SIGKILL);
        waitpid(next, NULL, 0);
    }
    if (floor_go >= 0)
        close(floor_go);
    floor_go = -1;
    if (pidfd >= 0)
        close(pidfd);
    if (floor_word != NULL && floor_word != MAP_FAILED)
        munmap((void *)floor_word, 4096);
    floor_word = NULL;
    if (floor_memfd >= 0)
        close(floor_memfd);
    if (floor_efd >= 0)
        close(floor_efd);
    floor_memfd = floor_efd = -1;
    if (cg) {
        cgfloor_leaf_remove(0, &floor_leaf);
        cgfloor_close();
    }
    return rc;
}

/* Where a round's time goes: the times (pm__now_ns) of the events of the
 * round under way, set by on_phase. EXITED = the supervisor reaped the
 * killed worker; STARTED = the replacement was forked; READY = it
 * completed the handshake. */
static uint64_t t_exited, t_started;


static void on_phase(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)arg;
    if (e->type == PM_EVENT_EXITED)
        t_exited = pm__now_ns();
    else if (e->type == PM_EVENT_STARTED)
        t_started = pm__now_ns();
    else if (e->type == PM_EVENT_READY) {
        ready_at_ns = pm__now_ns();
        ready_inc = e->incarnation; /* as bench_options' handler does */
        pm_cluster_stop(c);
    }
}

static int rounds_phased(pm_options *o, unsigned rounds, uint64_t *v, restart_phases *ph);

/* K crash-to-ready rounds of a one-worker cluster spawned with o. 0, 1,
 * or -EOPNOTSUPP when o asks for a containment this host cannot give. */
int restart_rounds(pm_options *o, unsigned rounds, uint64_t *v)
{
    return rounds_phased(o, rounds, v, NULL);
}

static int rounds_phased(pm_options *o, unsigned rounds, uint64_t *v, restart_phases *ph)
{
    pm_cluster *c;
    struct rusage self0, self1, kids0, kids1;
    if (ph != NULL)
        pm_options_set_on_event(o, on_phase, NULL);
    int rc = pm_cluster_spawn(o, &c);
    if (rc == -EOPNOTSUPP)
        return rc; /* this containment is not available on this host */
    if (rc == -EINVAL && pm_bench_capture())
        return rc; /* a warm standby refuses captured output (the caller says so) */
    if (rc < 0) {
        fprintf(stderr, "pm-bench: spawn: %s\n", pm_strerror(rc));
        return 1;
    }
    getrusage(RUSAGE_SELF, &self0);
    getrusage(RUSAGE_CHILDREN, &kids0);
    for (unsigned i = 0; i < rounds; i++) {
        /* A crash does not come the instant the worker is ready: the loop
         * runs for settle_ns first (10 ms unless --settle-ms: what follows
         * ready, such as a warm standby's fork and set-up, is done by
         * then), in every row. */
        uint64_t settle = pm__now_ns() + settle_ns;
        while (pm__now_ns() < settle)
            if (pm_cluster_run(c, 1) < 0)
                break;
        pm_slot_info si;
        pm_cluster_slot_info(c, 0, &si);
        uint64_t want = si.incarnation + 1;
        /* The phase handler's times written now, before the kill: a warm
         * standby forked after the last ready shares their page
         * copy-on-write, and the first write after a fork takes a fault
         * (3-4 us on this guest) that is the bench's, not procmesh's (the
         * floor rows keep their times on the stack, already written).
         * Only these two: ready_at_ns and ready_inc are written after the
         * READY's time is taken, and they share a page with the library's
         * own data, whose faults are procmesh's to pay. */
        t_exited = t_started = 0;
        uint64_t t0 = pm__now_ns();
        kill(si.pid, SIGKILL);
        while (ready_inc != want) {
            if (pm_cluster_run(c, 1000) < 0 || pm__now_ns() - t0 > 10000000000ull) {
                fprintf(stderr, "pm-bench: no replacement became ready\n");
                pm_cluster_terminate(c);
                return 1;
            }
        }
        /* Until the READY event, not until pm_cluster_run returns: the
         * turn that handled READY goes on to prepare what comes after the
         * worker (the next spare channel; with a warm standby, its fork),
         * which is not on the crash's path. */
        v[i] = ready_at_ns - t0;
        if (ph != NULL) {
            ph->reap[i] = t_exited - t0;
            ph->fork[i] = t_started - t_exited;
            ph->ready[i] = t0 + v[i] - t_started;
        }
    }
    getrusage(RUSAGE_SELF, &self1);
    getrusage(RUSAGE_CHILDREN, &kids1);
    /* The workers reaped during the rounds (the first incarnation
     * included, the last one not: one per round either way). */
    if (ph != NULL)
        phases_usage(ph, &self0, &self1, &kids0, &kids1);
    pm_cluster_terminate(c);
    return 0;
}

/* The phases of a row, p50 each, and the faults per round. */
static void print_phases(restart_phases *ph, unsigned rounds, const char *who)
{
    sort_u64(ph->reap, rounds);
    sort_u64(ph->fork, rounds);
    sort_u64(ph->ready, rounds);
    printf("    phases p50 ms: kill->reaped %.3f, reaped->forked %.3f, forked->ready %.3f\n",
           (double)percentile(ph->reap, rounds, 0.5) / 1e6,
           (double)percentile(ph->fork, rounds, 0.5) / 1e6,
           (double)percentile(ph->ready, rounds, 0.5) / 1e6);
    printf("    per round: %s %.1f minor faults, %.2f voluntary + %.2f involuntary "
           "switches; worker %.1f minor faults\n",
           who, (double)ph->sup_minflt / rounds, (double)ph->sup_nvcsw / rounds,
           (double)ph->sup_nivcsw / rounds, (double)ph->kid_minflt / rounds);
}

/* A floor row: its latencies against base and its phases (the parent's
 * faults and switches are pm-bench's own: one sleep per round, not the
 * procmesh rows' ten turns of the settle), or why it was skipped. */
static void floor_row(int exec_mode, int cg, int standby, unsigned rounds, uint64_t *b, uint64_t base,
                      const char *label)
{
    double flt;
    restart_phases ph = {calloc(rounds, sizeof(uint64_t)), calloc(rounds, sizeof(uint64_t)),
                         calloc(rounds, sizeof(uint64_t)), 0, 0, 0, 0, 0};
    int ok = ph.reap != NULL && ph.fork != NULL && ph.ready != NULL;
    int rc = restart_floor(exec_mode, cg, standby, rounds, b, &flt, ok ? &ph : NULL);
    if (rc == 0) {
        print_lat(label, b, rounds, base);
        if (ok)
            print_phases(&ph, rounds, "pm-bench");
        else
            printf("    per round: worker %.1f minor faults\n", flt);
    } else if (rc != -EOPNOTSUPP) {
        printf("  %-34s (failed: said above)\n", label);
    }
    free(ph.reap);
    free(ph.fork);
    free(ph.ready);
}

/* --privileges on: the workers under nobody (root only) and seccomp basic
 * (built with libseccomp only); appended to label: which applied. */
static void privileged(pm_options *o, char *label, size_t size)
{
    int user = geteuid() == 0 && pm_options_set_user(o, NOBODY, NOBODY) == 0;
    int sc = pm__seccomp_available() && pm_options_set_seccomp(o, PM_SECCOMP_BASIC) == 0;
    size_t n = strlen(label);
    snprintf(label + n, size - n, " %s%s%s", user ? "+user" : "", sc ? "+seccomp" : "",
             user || sc ? "" : "(none: not root, no libseccomp)");
}

int cmd_restart(const bench_opts *opts)
{
    unsigned rounds = opts->rounds;
    restart_set_settle_ms(opts->settle_ms);
    print_machine();
    printf("restart: crash-to-ready latency, %u rounds, backoff 0, %u ms from ready to kill (ms)\n",
           rounds, opts->settle_ms);
    printf("  %-34s %10s %10s %14s\n", "what", "p50 ms", "p99 ms", "vs baseline");
    uint64_t *v = calloc(rounds, sizeof(*v)), *b = calloc(rounds, sizeof(*b));
    /* Rows: fork mode; exec mode with containment off (process group),
     * on (its cgroup), on with limits (memory and pids: on hybrid hosts the
     * v1 cgroups are joined too), all in the same run; with --privileges on
     * each also under nobody and seccomp basic. A row whose containment
     * this host cannot give is said and skipped. */
    /* id: the row's number for --row, kept when rows are added (7 came
     * after the exec rows, printed with the fork rows). */
    static const struct {
        unsigned id;
        int exec_mode, containment, limits, standby;
        const char *name;
    } rows[] = {
        {1, 0, 0, 0, 0, "procmesh fork mode"},
        {7, 0, PM_CONTAIN_PROCESS_GROUP, 0, 0, "fork mode, process group"},
        {2, 0, 0, 0, 1, "fork mode, warm standby"},
        {3, 0, PM_CONTAIN_PROCESS_GROUP, 0, 1, "fork, standby, process group"},
        {4, 1, PM_CONTAIN_PROCESS_GROUP, 0, 0, "exec, process group"},
        {5, 1, PM_CONTAIN_CGROUP, 0, 0, "exec, cgroup"},
        {6, 1, PM_CONTAIN_CGROUP, 1, 0, "exec, cgroup+limits"},
    };
    uint64_t base = 0;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        int exec_mode = rows[r].exec_mode;
        if (opts->row != 0 && opts->row != rows[r].id)
            continue;
        if (opts->row == 0 && (r == 0 || rows[r - 1].exec_mode != exec_mode)) {
            restart_baseline(exec_mode, rounds, b);
            print_lat(exec_mode ? "baseline fork+exec+wait" : "baseline fork+exit+wait", b, rounds, 0);
            base = percentile(b, rounds, 0.5);
            floor_row(exec_mode, 0, 0, rounds, b, base,
                      exec_mode ? "floor (kill, pidfd, exec, page)" : "floor (kill, pidfd, fork, page)");
            floor_row(exec_mode, 1, 0, rounds, b, base,
                      exec_mode ? "floor, born in a cgroup" : "floor, joining a cgroup");
            /* The warm standby's floor: the replacement forked ahead, let
             * go by an eventfd once the dead one is reaped. */
            for (int cg = 0; !exec_mode && cg < 2; cg++)
                floor_row(0, cg, 1, rounds, b, base,
                          cg ? "floor, standby in a cgroup" : "floor, standby (eventfd go)");
        }
        for (int priv = 0; priv <= opts->privileges; priv++) {
            char label[64];
            pm_options *o = bench_options(1, exec_mode);
            pm_options_set_containment(o, rows[r].containment);
            pm_options_set_warm_standby(o, rows[r].standby);
            if (rows[r].limits) {
                pm_options_set_memory_max(o, 1ull << 30);
                pm_options_set_pids_max(o, 1024);
            }
            snprintf(label, sizeof(label), "%s", rows[r].name);
            if (priv)
                privileged(o, label, sizeof(label));
            restart_phases ph = {calloc(rounds, sizeof(uint64_t)), calloc(rounds, sizeof(uint64_t)),
                                 calloc(rounds, sizeof(uint64_t)), 0, 0, 0, 0, 0};
            int rc = ph.reap != NULL && ph.fork != NULL && ph.ready != NULL
                         ? rounds_phased(o, rounds, v, &ph)
                         : restart_rounds(o, rounds, v);
            pm_options_free(o);
            if (rc == -EOPNOTSUPP || rc != 0) {
                free(ph.reap);
                free(ph.fork);
                free(ph.ready);
            }
            if (rc == -EOPNOTSUPP) {
                printf("  %-34s (not available here)\n", label);
                continue;
            }
            if (rc == -EINVAL && rows[r].standby && pm_bench_capture()) {
                printf("  %-34s (no standby with captured output)\n", label);
                continue;
            }
            if (rc != 0)
                return rc;
            print_lat(label, v, rounds, base);
            if (ph.reap != NULL && ph.fork != NULL && ph.ready != NULL)
                print_phases(&ph, rounds, "supervisor");
            free(ph.reap);
            free(ph.fork);
            free(ph.ready);
        }
    }
    free(v);
    free(b);
    return 0;
}
