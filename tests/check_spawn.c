/* SPDX-License-Identifier: MIT */
/*
 * check_spawn.c - starting a cluster with real processes: the handshake in
 * fork and exec mode, init data, spawn failures (missing program, a worker
 * that fails or never says ready, exhausted fds) and exec readiness with
 * listening sockets. Every test is bounded by Check's timeout and by its
 * own generous deadlines.
 */
#include "helpers.h"
#define PM_FAILALLOC_EXPORT /* libprocmesh.so's allocations reach them (Makefile.am) */
#include "failalloc.h" /* malloc, calloc, realloc: this program's, failing on demand */

#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "procmesh.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif

START_TEST(test_spawn_ready_terminate)
{
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_base_port(o, 7000);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_uint_eq(pm_cluster_size(c), 3);
    ck_assert_uint_eq(pm_cluster_slots(c), 3);
    pm_address a[4];
    ck_assert_int_eq(pm_cluster_addresses(c, a, 4), 3);
    for (unsigned i = 0; i < 3; i++) {
        ck_assert_str_eq(a[i].system, "procmesh");
        ck_assert_str_eq(a[i].host, "worker");
        ck_assert_uint_eq(a[i].port, 7000 + i);
        ck_assert_uint_eq(a[i].incarnation, 1);
        pm_slot_info si;
        ck_assert_int_eq(pm_cluster_slot_info(c, i, &si), 0);
        ck_assert_int_eq(si.state, PM_SLOT_READY);
        ck_assert_int_gt(si.pid, 0);
        ck_assert_uint_eq(si.restarts_total, 0);
    }
    ck_assert_int_eq(pm_cluster_slot_info(c, 3, NULL), -EINVAL);
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 3);
    ck_assert_int_eq(count(PM_EVENT_READY, -1), 3);
    ck_assert_int_ge(pm_cluster_fd(c), 0);
    /* Nothing happens in a quiet period. */
    ck_assert_int_eq(pm_cluster_run(c, 100), 0);
    ck_assert_int_eq(count(PM_EVENT_EXITED, -1), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_init_data_fork_and_exec)
{
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_init, "hello init");
    pm_options_set_init_data(o, "hello init", 10);
    pm_options_set_system_name(o, "sys");
    pm_options_set_hostname(o, "hst");
    pm_options_set_base_port(o, 100);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);

    o = opts(2);
    exec_opts(o, "init", "exec init data");
    pm_options_set_init_data(o, "exec init data", 14);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* The worker exits 0 right after ready when the data matched (9 if not). */
    RUN_UNTIL(c, count(PM_EVENT_EXITED, -1) == 2, 5000);
    ck_assert_int_eq(find(PM_EVENT_EXITED, -1, 0)->exit_code, 0);
    ck_assert_int_eq(find(PM_EVENT_EXITED, -1, 1)->exit_code, 0);
    /* on-failure: a clean exit stops the slot, without a down call. */
    RUN_UNTIL(c, pm_cluster_size(c) == 0, 5000);
    ck_assert_int_eq(downs, 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_spawn_resources_exhausted)
{
    /* fork/memfd/eventfd failing (EMFILE here, by lowering our fd limit):
     * each restart attempt is a failed start charged to the budget and
     * retried after a backoff, with no busy loop and no crash; once the
     * resource is back the slot recovers. */
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_restart_min_backoff_ms(o, 20);
    pm_options_set_restart_max_backoff_ms(o, 80);
    pm_options_set_max_restarts(o, -1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    struct rlimit old, low;
    getrlimit(RLIMIT_NOFILE, &old);
    low = old;
    /* Open fds keep working above the limit; any new fd fails. */
    low.rlim_cur = 3;
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &low), 0);
    kill(si.pid, SIGKILL);
    RUN_UNTIL(c, count(PM_EVENT_SPAWN_FAILED, 0) >= 3, 10000);
    const rec *f = find(PM_EVENT_SPAWN_FAILED, 0, 0);
    ck_assert_int_eq(f->exit_code, -EMFILE);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_BACKOFF);
    /* Backoff between attempts, not a busy loop. */
    ck_assert_uint_ge(find(PM_EVENT_SPAWN_FAILED, 0, 2)->t_ms - f->t_ms, 40);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &old), 0);
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_READY, 10000);
    pm_cluster_slot_info(c, 0, &si);
    ck_assert_uint_ge(si.restarts_total, 4);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

/*
 * Every allocation the supervisor makes while spawning fails in turn
 * (failalloc.h: the k-th from the spawn's start, k = 1, 2, ... until a
 * spawn makes fewer), fork mode and exec mode: the spawn fails with an
 * error, or (a failure the code works around) succeeds with workers that
 * hold only their own fds and none of the supervisor's mappings; either
 * way no process and no fd is left once it failed or the cluster ended,
 * and it never crashes (before the fix in cluster.c slots_zero it did:
 * a failure before the slots' sentinels closed fd 0 and dereferenced
 * the output reader not yet made). The first spawn, unarmed, loads what is loaded once
 * (liburing, the unwinder).
 */
/* The open fds of process pid. */
static int proc_fds(pid_t pid)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/fd", (int)pid);
    DIR *d = opendir(path);
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n;
}

/* 1 when a mapping of process pid names what. */
static int proc_maps(pid_t pid, const char *what)
{
    char path[64], line[512];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int found = 0;
    while (!found && fgets(line, sizeof(line), f) != NULL)
        found = strstr(line, what) != NULL;
    fclose(f);
    return found;
}

/* 1 when pid was exec'd with the variable var (NAME=value) set. */
static int proc_environ_has(pid_t pid, const char *var)
{
    char path[64], buf[65536];
    snprintf(path, sizeof(path), "/proc/%d/environ", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    size_t got = 0;
    ssize_t k;
    while (got < sizeof(buf) - 1 && (k = read(fd, buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)k;
    close(fd);
    size_t n = strlen(var);
    for (size_t i = 0; i < got; i += strlen(buf + i) + 1) {
        buf[got] = '\0';
        if (strncmp(buf + i, var, n + 1) == 0)
            return 1;
    }
    return 0;
}

START_TEST(test_spawn_alloc_failures)
{
    if (!pm_failalloc_here("test_spawn_alloc_failures"))
        return;
    ck_assert_int_eq(setenv("PM_ALLOC_ENV", "kept", 1), 0);
    pm_options *o = opts(2);
    if (_i)
        exec_opts(o, "run", NULL);
    else
        pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    int fds0 = pm_test_count_fds();
    long failed = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 5000);
        c = NULL;
        pm_failalloc_arm(k);
        int rc = pm_cluster_spawn(o, &c);
        int hit = pm_failalloc_disarm();
        if (rc == 0) {
            /* Worked around, never by handing a worker what is not its
             * own: each holds what the test held and its channel's four
             * fds, at most (the plan of what a fork child drops is made
             * in the supervisor: forkdrop.c). */
            for (unsigned i = 0; i < 2; i++) {
                pm_slot_info si;
                ck_assert_int_eq(pm_cluster_slot_info(c, i, &si), 0);
                int held = proc_fds(si.pid);
                ck_assert_msg(held <= fds0 + 4, "allocation %ld failed, spawn 0: worker %u holds "
                              "%d fds, the test %d", k, i, held, fds0);
                ck_assert_msg(!proc_maps(si.pid, "io_uring"), "allocation %ld failed, spawn 0: "
                              "worker %u maps the supervisor's io_uring", k, i);
                /* Nor by leaving out what it is owed: an exec'd worker has
                 * the supervisor's environment (a template that could not
                 * be copied fails the spawn instead). */
                ck_assert_msg(!_i || proc_environ_has(si.pid, "PM_ALLOC_ENV=kept"),
                              "allocation %ld failed, spawn 0: worker %u started without the "
                              "supervisor's environment", k, i);
            }
            ck_assert_int_eq(pm_cluster_terminate(c), 0);
        } else {
            ck_assert_msg(rc < 0 && hit, "allocation %ld (%s): spawn returned %d", k,
                          hit ? "failed" : "none failed", rc);
            failed++;
        }
        errno = 0;
        ck_assert_msg(waitpid(-1, NULL, WNOHANG) == -1 && errno == ECHILD,
                      "allocation %ld failed, spawn %d: a child is left", k, rc);
        ck_assert_msg(pm_test_count_fds() == fds0, "allocation %ld failed, spawn %d: %d fds, "
                      "%d before", k, rc, pm_test_count_fds(), fds0);
        if (!hit)
            break;
    }
    ck_assert_int_gt(failed, 10);
    pm_options_free(o);
}
END_TEST

START_TEST(test_spawn_missing_program)
{
    pm_options *o = opts(2);
    pm_options_set_exec(o, "/nonexistent/procmesh-worker", NULL);
    pm_cluster *c = NULL;
    uint64_t t0 = ms();
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ENOENT);
    ck_assert_ptr_null(c);
    /* Seen through the pidfd at once, not at the ready timeout. */
    ck_assert_uint_lt(ms() - t0, 5000);
    ck_assert_int_ge(count(PM_EVENT_STARTED, -1), 1);
    ck_assert_str_eq(find(PM_EVENT_EXITED, -1, 0)->reason, "exec");
    assert_all_started_gone();
    pm_options_free(o);

    char path[] = "/tmp/pm-noexec-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    close(fd);
    chmod(path, 0644); /* not executable, even for root */
    o = opts(1);
    pm_options_set_exec(o, path, NULL);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EACCES);
    unlink(path);
    assert_all_started_gone();
    pm_options_free(o);

    o = opts(1);
    pm_options_set_exec(o, "no-such-program-in-path", NULL);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ENOENT);
    pm_options_free(o);
}
END_TEST

START_TEST(test_spawn_failure_kills_siblings)
{
    pm_options *o = opts(4);
    pm_options_set_bootstrap(o, boot_fail_slot2, NULL);
    pm_cluster *c = NULL;
    uint64_t t0 = ms();
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ECHILD);
    ck_assert_ptr_null(c);
    ck_assert_uint_lt(ms() - t0, 5000); /* well under the 10 s ready timeout */
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 4);
    assert_all_started_gone();
    /* Nothing left for us to reap either: no zombie. */
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
    pm_options_free(o);

    o = opts(2);
    pm_options_set_bootstrap(o, boot_crash_in_handshake, NULL);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ECHILD);
    ck_assert_int_eq(find(PM_EVENT_EXITED, -1, 0)->signal, SIGSEGV);
    assert_all_started_gone();
    pm_options_free(o);

    /* An exec-mode worker that exits before joining. */
    o = opts(3);
    exec_opts(o, "early", "7");
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ECHILD);
    assert_all_started_gone();
    pm_options_free(o);

    /* A worker that never says ready: -ETIMEDOUT, and it is gone. */
    o = opts(2);
    exec_opts(o, "never-ready", NULL);
    pm_options_set_ready_timeout_ms(o, 300);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ETIMEDOUT);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_ready_mode_exec_and_listen_fds)
{
    /* A program that does not link libprocmesh: ready once exec succeeded;
     * it gets the listening socket as fd 3 with LISTEN_FDS, LISTEN_FDNAMES
     * and LISTEN_PID = its own pid, and no procmesh fds. */
    char dir[] = "/tmp/pm-listen-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char out[64], script[512];
    snprintf(out, sizeof(out), "%s/env", dir);
    snprintf(script, sizeof(script),
             "echo \"$LISTEN_FDS $LISTEN_FDNAMES $LISTEN_PID $$ $PROCMESH_NODE\" > %s.tmp;"
             " mv %s.tmp %s; exec sleep 60",
             out, out, out);
    int sock = socket(AF_UNIX, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(sock, 0);
    pm_options *o = opts(1);
    char *argv[] = {"sh", "-c", script, NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    const char *names[] = {"web"};
    ck_assert_int_eq(pm_options_set_listen_fds(o, &sock, names, 1), 0);
    pm_options_set_heartbeat_timeout_ms(o, 100); /* must not apply: no heartbeat source */
    pm_cluster *c;
    uint64_t t0 = ms();
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_uint_lt(ms() - t0, 3000);
    RUN_UNTIL(c, access(out, R_OK) == 0, 5000);
    ck_assert_int_eq(pm_cluster_run(c, 400), 0); /* four heartbeat timeouts */
    ck_assert_int_eq(count(PM_EVENT_EXITED, -1), 0);
    FILE *f = fopen(out, "r");
    ck_assert_ptr_nonnull(f);
    char line[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    line[strcspn(line, "\n")] = '\0';
    fclose(f);
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    char want[128];
    snprintf(want, sizeof(want), "1 web %d %d ", (int)si.pid, (int)si.pid);
    ck_assert_str_eq(line, want);
    /* What the worker holds, read from outside once the shell has become
     * `sleep` (the shell's own fds are blurred by the ones it saves around
     * redirections): stdin/out/err and the listening socket as fd 3, no
     * procmesh fd (no memfd, no doorbell: PROCMESH_NODE was empty above). */
    char path[64], comm[32] = "";
    snprintf(path, sizeof(path), "/proc/%d/comm", (int)si.pid);
    RUN_UNTIL(c, (f = fopen(path, "r")) != NULL && (fgets(comm, sizeof(comm), f), fclose(f), 1) &&
                     strcmp(comm, "sleep\n") == 0,
              5000);
    char fds[256] = "";
    for (int fd = 0; fd < 1024; fd++) { /* above any fd a worker gets here */
        char target[128];
        snprintf(path, sizeof(path), "/proc/%d/fd/%d", (int)si.pid, fd);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k < 0)
            continue;
        target[k] = '\0';
        snprintf(fds + strlen(fds), sizeof(fds) - strlen(fds), "%d ", fd);
        if (fd == 3) {
            struct stat st;
            ck_assert_int_eq(fstat(sock, &st), 0);
            snprintf(want, sizeof(want), "socket:[%llu]", (unsigned long long)st.st_ino);
            ck_assert_str_eq(target, want);
        }
    }
    ck_assert_str_eq(fds, "0 1 2 3 ");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    close(sock);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);

    o = opts(1);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_ready, NULL), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    ck_assert_int_eq(pm_options_validate(o, NULL, 0), -EINVAL);
    const char *bad[] = {"a:b"};
    ck_assert_int_eq(pm_options_set_listen_fds(o, &sock, bad, 1), -EINVAL);
    pm_options_free(o);
}
END_TEST

/* Page faults of each fork-mode worker from its fork to its bootstrap
 * (getrusage in the child counts from the fork), by slot; shared with the
 * children (MAP_SHARED, made before the spawn). */
#define FAULT_SLOTS 160
static long *faults;

static int boot_faults(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    unsigned slot = pm_node_self(n)->port - 1;
    if (slot < FAULT_SLOTS)
        __atomic_store_n(&faults[slot], ru.ru_minflt, __ATOMIC_RELEASE);
    if (pm_node_ready(n) < 0)
        return 50;
    idle();
    return 0;
}

static int cmp_long(const void *a, const void *b)
{
    long x = *(const long *)a, y = *(const long *)b;
    return (x > y) - (x < y);
}

/* The median page faults of n fork-mode workers before their code runs. */
static long median_faults(unsigned n)
{
    memset(faults, 0, FAULT_SLOTS * sizeof(long));
    pm_options *o = opts((int)n);
    pm_options_set_bootstrap(o, boot_faults, NULL);
    pm_options_set_base_port(o, 1);
    pm_options_set_ring_size(o, 1 << 16);
    pm_options_set_ready_timeout_ms(o, 60000);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    long v[FAULT_SLOTS];
    for (unsigned i = 0; i < n; i++)
        v[i] = __atomic_load_n(&faults[i], __ATOMIC_ACQUIRE);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
    for (unsigned i = 0; i < n; i++)
        ck_assert_msg(v[i] > 0, "worker %u did not report its page faults", i);
    qsort(v, n, sizeof(v[0]), cmp_long);
    return v[n / 2];
}

/* A fork-mode child drops every other slot's fds and mapping without
 * writing to the slot table it shares copy-on-write with the supervisor
 * (pm__channel_release_copy, pm__cg_slot_release_copy): the page faults a new
 * worker takes before its code runs do not grow with the number of slots.
 * Writing the sentinels copied the whole table into every child: about
 * one fault per few slots, O(N) per spawn, a spawn of N workers O(N^2). */
START_TEST(test_fork_child_faults_flat_in_n)
{
    faults = mmap(NULL, FAULT_SLOTS * sizeof(long), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(faults, MAP_FAILED);
    long few = median_faults(4);
    long many = median_faults(FAULT_SLOTS);
    /* A margin for the larger hub's own structures (its port table is
     * touched by the hub wipe), far below one fault per slot. */
    ck_assert_msg(many <= few + 16, "page faults before the worker's code: %ld with %d slots, %ld with 4", many,
                  FAULT_SLOTS, few);
    munmap(faults, FAULT_SLOTS * sizeof(long));
}
END_TEST

/* The SigIgn and SigCgt masks the exec'd worker of pid wrote (the script
 * of test_exec_signal_dispositions), waited for. */
static void worker_sigs(pm_cluster *c, const char *dir, pid_t pid, unsigned long long *ign,
                        unsigned long long *cgt)
{
    char path[128], line[128];
    snprintf(path, sizeof(path), "%s/s.%d", dir, (int)pid);
    RUN_UNTIL(c, access(path, R_OK) == 0, 10000);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int got = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        got += sscanf(line, "SigIgn: %llx", ign) + sscanf(line, "SigCgt: %llx", cgt);
    fclose(f);
    ck_assert_int_eq(got, 2);
}

#define SIGBIT(sig) (1ULL << ((sig) - 1))

static void on_usr2(int sig)
{
    (void)sig;
}

/* An exec'd worker starts with no handler of the supervisor's and with the
 * signals ignored when the cluster's first worker started back at SIG_DFL
 * (the clone resets the handlers, the child the listed ones); a signal the
 * application ignores after that is kept ignored, as exec keeps SIG_IGN
 * (pm_options(3)). */
START_TEST(test_exec_signal_dispositions)
{
    char dir[] = "/tmp/pm-sigs-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char script[512];
    snprintf(script, sizeof(script),
             "grep -E '^Sig(Ign|Cgt)' /proc/$$/status > %s/t.$$; mv %s/t.$$ %s/s.$$; exec sleep 60",
             dir, dir, dir);
    ck_assert_ptr_ne(signal(SIGUSR1, SIG_IGN), SIG_ERR);
    ck_assert_ptr_ne(signal(SIGPIPE, SIG_IGN), SIG_ERR);
    ck_assert_ptr_ne(signal(SIGUSR2, on_usr2), SIG_ERR);
    pm_options *o = opts(1);
    char *argv[] = {"sh", "-c", script, NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    unsigned long long ign = 0, cgt = 0;
    worker_sigs(c, dir, si.pid, &ign, &cgt);
    ck_assert_msg(!(ign & (SIGBIT(SIGUSR1) | SIGBIT(SIGPIPE))), "worker ignores %llx", ign);
    ck_assert_msg(!(cgt & SIGBIT(SIGUSR2)), "worker catches %llx", cgt);
    /* Ignored from now on: the next incarnation keeps it ignored; the
     * others stay reset. */
    ck_assert_ptr_ne(signal(SIGURG, SIG_IGN), SIG_ERR);
    pid_t old = si.pid;
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    RUN_UNTIL(c, pm_cluster_slot_info(c, 0, &si) == 0 && si.state == PM_SLOT_READY && si.pid != old,
              10000);
    worker_sigs(c, dir, si.pid, &ign, &cgt);
    ck_assert_msg(ign & SIGBIT(SIGURG), "worker ignores %llx", ign);
    ck_assert_msg(!(ign & (SIGBIT(SIGUSR1) | SIGBIT(SIGPIPE))), "worker ignores %llx", ign);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* How slot 0's first incarnation ended, for a failure's message: its
 * EXITED event's status, reason and detail, or that none came. */
static const char *first_end(char *buf, size_t size)
{
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    if (e == NULL)
        snprintf(buf, size, "no EXITED event");
    else
        snprintf(buf, size, "exit %d, signal %d, reason %s, %s", e->exit_code, e->signal, e->reason,
                 e->detail);
    return buf;
}

/* Spawns o's one worker, which must become ready (what: the spawn's
 * conditions, for the message), ends the cluster and frees o. */
static void spawn_one_ready(pm_options *o, const char *what)
{
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    char end[300];
    ck_assert_msg(rc == 0, "spawn %s: %s (the worker: %s)", what, pm_strerror(rc), first_end(end, sizeof(end)));
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_READY);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 1);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}

/* pm_options(3), set_exec: a name without "/" is searched in PATH. The
 * test worker's directory is put in PATH behind one that does not exist,
 * and the working directory has no such program: the spawn succeeds only
 * if the bare name was found there (the worker joins and says ready). */
START_TEST(test_spawn_name_in_path)
{
    const char *worker = PM_TEST_WORKER;
    const char *slash = strrchr(worker, '/');
    ck_assert_ptr_nonnull(slash);
    const char *old = getenv("PATH");
    char path[8192];
    int len = snprintf(path, sizeof(path), "/nonexistent/procmesh-bin:%.*s:%s", (int)(slash - worker),
                       worker, old != NULL ? old : "/usr/bin:/bin");
    ck_assert_int_lt(len, (int)sizeof(path));
    ck_assert_int_eq(setenv("PATH", path, 1), 0);
    ck_assert_int_eq(chdir("/"), 0);
    pm_options *o = opts(1);
    char *argv[] = {"pm-test-worker", "ready", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, slash + 1, argv), 0);
    char what[8300];
    snprintf(what, sizeof(what), "of \"%s\" with PATH=%s", slash + 1, path);
    spawn_one_ready(o, what);
}
END_TEST

/* pm_options(3), set_exec: a name without "/" is searched in PATH as
 * execvp searches it. The working directory is the test worker's, and a
 * directory of this test's (made in the build tree: /tmp may be noexec)
 * holds a decoy of the same name that exits at once, or a directory of
 * that name:
 * _i 0: PATH ":<decoys>": the empty entry is the working directory, and
 *       comes first: the worker starts; and its restart after the
 *       application has left that directory (chdir) still finds it (the
 *       path was made absolute when it was looked up);
 * _i 1: PATH "<dirs>:<the worker's>": a directory of the program's name
 *       is no program: skipped, the worker found after it;
 * _i 2: PATH without the worker's directory and no empty entry: not
 *       found, and the spawn fails -ENOENT, even though the working
 *       directory holds a program of that name (execve would run a bare
 *       name from there);
 * _i 3: PATH "<files>:<the worker's>": a file of the name that nobody
 *       may execute (mode 0644, so not root either) is skipped too. */
START_TEST(test_spawn_name_search)
{
    const char *worker = PM_TEST_WORKER;
    const char *slash = strrchr(worker, '/');
    ck_assert_ptr_nonnull(slash);
    char dir[4096], here[4096], made[] = "pm-path-decoy.XXXXXX", decoy[4200], prog[4400], path[8500];
    snprintf(dir, sizeof(dir), "%.*s", (int)(slash - worker), worker);
    ck_assert_ptr_nonnull(getcwd(here, sizeof(here)));
    ck_assert_ptr_nonnull(mkdtemp(made));
    snprintf(decoy, sizeof(decoy), "%s/%s", here, made);
    snprintf(prog, sizeof(prog), "%s/%s", decoy, slash + 1);
    if (_i == 1) {
        ck_assert_int_eq(mkdir(prog, 0755), 0);
    } else {
        FILE *f = fopen(prog, "w");
        ck_assert_ptr_nonnull(f);
        fputs("#!/bin/sh\nexit 3\n", f);
        fclose(f);
        ck_assert_int_eq(chmod(prog, _i == 3 ? 0644 : 0755), 0);
        ck_assert_msg((access(prog, X_OK) == 0) == (_i != 3), "the decoy %s %s be run", prog,
                      _i == 3 ? "can" : "cannot");
    }
    if (_i == 2)
        snprintf(path, sizeof(path), "/nonexistent/procmesh-bin");
    else
        snprintf(path, sizeof(path), _i == 0 ? ":%s" : "%s:%s", decoy, dir); /* 1, 3: decoys first */
    ck_assert_int_eq(chdir(dir), 0);
    ck_assert_int_eq(setenv("PATH", path, 1), 0);
    pm_options *o = opts(1);
    char *argv[] = {"pm-test-worker", "ready", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, slash + 1, argv), 0);
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    if (_i == 2) {
        ck_assert_msg(rc == -ENOENT, "spawn of \"%s\" with PATH=%s from a directory holding it: %s",
                      slash + 1, path, pm_strerror(rc));
    } else {
        char end[300];
        ck_assert_msg(rc == 0, "spawn of \"%s\" from %s with PATH=%s: %s (the worker: %s)", slash + 1, dir,
                      path, pm_strerror(rc), first_end(end, sizeof(end)));
        ck_assert_int_eq(slot_state(c, 0), PM_SLOT_READY);
        if (_i == 0) {
            ck_assert_int_eq(chdir("/"), 0);
            pm_slot_info si;
            ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
            pid_t old = si.pid;
            ck_assert_int_eq(kill(old, SIGKILL), 0);
            RUN_UNTIL(c, pm_cluster_slot_info(c, 0, &si) == 0 && si.state == PM_SLOT_READY && si.pid != old,
                      10000);
            ck_assert_uint_eq(si.incarnation, 2);
        }
        ck_assert_int_eq(pm_cluster_terminate(c), 0);
    }
    assert_all_started_gone();
    pm_options_free(o);
    ck_assert_int_eq(_i == 1 ? rmdir(prog) : unlink(prog), 0);
    ck_assert_int_eq(rmdir(decoy), 0);
}
END_TEST

/* pm_options(3), set_exec: with PATH unset (_i 0) or empty (_i 1), a bare
 * name is searched in procmesh's default list, /usr/local/bin:/usr/bin:/bin
 * (glibc's execvp would search /bin:/usr/bin, and an empty PATH as the
 * working directory alone). The program is sleep (coreutils), ready once
 * exec'd: the spawn succeeds only if it was found there. */
START_TEST(test_spawn_name_default_path)
{
    ck_assert_msg(access("/bin/sleep", X_OK) == 0 || access("/usr/bin/sleep", X_OK) == 0,
                  "this test needs sleep in /bin or /usr/bin");
    if (_i == 0)
        ck_assert_int_eq(unsetenv("PATH"), 0);
    else
        ck_assert_int_eq(setenv("PATH", "", 1), 0);
    ck_assert_int_eq(chdir("/"), 0);
    pm_options *o = opts(1);
    char *argv[] = {"sleep", "1000", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "sleep", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    spawn_one_ready(o, _i == 0 ? "of sleep with PATH unset" : "of sleep with PATH empty");
}
END_TEST

/* The SigBlk mask a "sigmask" worker reported on fd (one line each), read
 * while the cluster runs; fails after 20 s without one. */
static unsigned long long worker_sigblk(pm_cluster *c, int fd)
{
    char line[128];
    size_t got = 0;
    uint64_t end = ms() + 20000;
    while ((got == 0 || line[got - 1] != '\n') && got < sizeof(line) - 1 && ms() < end) {
        struct pollfd pfd = {.fd = fd, .events = POLLIN};
        if (poll(&pfd, 1, 0) == 1) {
            ck_assert_int_eq(read(fd, line + got, 1), 1); /* one byte: never past the line */
            got++;
        } else {
            ck_assert_int_ge(pm_cluster_run(c, 20), 0);
        }
    }
    line[got] = '\0';
    unsigned long long mask = 0;
    ck_assert_msg(sscanf(line, "SigBlk: %llx", &mask) == 1, "the worker's report: '%s'", line);
    return mask;
}

/* pm_options(3), set_exec: an exec'd worker starts with the signal mask the
 * caller had before the cluster. The test blocks SIGUSR1 and SIGPROF
 * first; with handle_signals (_i 1) the cluster then blocks SIGCHLD,
 * SIGTERM, SIGINT and SIGHUP in this thread too, which no worker may
 * inherit. The first worker (started by the spawn) and a replacement
 * (started from the loop) each report the mask they started with. */
START_TEST(test_exec_signal_mask)
{
    sigset_t set, before;
    sigemptyset(&set);
    sigaddset(&set, SIGUSR1);
    sigaddset(&set, SIGPROF);
    ck_assert_int_eq(sigprocmask(SIG_BLOCK, &set, NULL), 0);
    ck_assert_int_eq(sigprocmask(SIG_SETMASK, NULL, &before), 0);
    unsigned long long want = 0;
    for (int sig = 1; sig <= 64; sig++)
        if (sigismember(&before, sig) == 1)
            want |= SIGBIT(sig);
    ck_assert(want & SIGBIT(SIGUSR1));
    ck_assert(!(want & SIGBIT(SIGTERM)));
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pm_options *o = opts(1);
    exec_opts(o, "sigmask", NULL);
    ck_assert_int_eq(pm_options_set_pass_fds(o, &p[1], 1), 0);
    ck_assert_int_eq(pm_options_set_handle_signals(o, _i), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    sigset_t now;
    ck_assert_int_eq(sigprocmask(SIG_SETMASK, NULL, &now), 0);
    ck_assert_int_eq(sigismember(&now, SIGTERM), _i); /* what the workers must not get */
    unsigned long long got = worker_sigblk(c, p[0]);
    ck_assert_msg(got == want, "the first worker started with SigBlk %016llx, the caller had %016llx",
                  got, want);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    pid_t old = si.pid;
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    RUN_UNTIL(c, pm_cluster_slot_info(c, 0, &si) == 0 && si.state == PM_SLOT_READY && si.pid != old,
              10000);
    got = worker_sigblk(c, p[0]);
    ck_assert_msg(got == want, "the replacement started with SigBlk %016llx, the caller had %016llx",
                  got, want);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    close(p[0]);
    close(p[1]);
}
END_TEST

/* The fork child's wipe of its dead stack (scrub.c) stops at the bottom of
 * the forking thread's stack. A thread on a stack the application gave it
 * (pthread_attr_setstack: glibc adds no guard page) may have memory of its
 * own right below, resident; the wipe's walk down the resident pages went
 * on into it and gave it back, so the child read zeros there (its heap, or
 * the application's globals, in a real program). Here four pages of 0x5a
 * lie right below such a stack, itself written whole (resident, as a
 * stack that once ran deep is); the cluster is spawned and run from that
 * thread, and its fork-mode worker checks the pages once ready: exit 0,
 * or 70 when one was wiped. */
enum { GIVEN_BELOW = 4 * 4096, GIVEN_STACK = 1 << 20 };
static unsigned char *given_below;
static int given_exit = -1, given_rc = 1;

static int boot_check_given_below(pm_node *n, void *arg)
{
    (void)arg;
    if (pm_node_ready(n) < 0)
        return 60;
    for (size_t i = 0; i < GIVEN_BELOW; i++)
        if (given_below[i] != 0x5a)
            return 70;
    return 0;
}

/* No ck_assert here (another thread): the main thread judges. */
static void *spawn_on_given_stack(void *arg)
{
    pm_options *o = arg;
    pm_cluster *c;
    given_rc = pm_cluster_spawn(o, &c);
    if (given_rc < 0)
        return NULL;
    uint64_t end = ms() + 30000;
    while (count(PM_EVENT_EXITED, 0) + count(PM_EVENT_STOPPED, 0) < 1 && ms() < end)
        (void)pm_cluster_run(c, 100);
    pm_slot_info si;
    if (pm_cluster_slot_info(c, 0, &si) == 0 && count(PM_EVENT_EXITED, 0) >= 1)
        given_exit = si.last_signal != 0 ? 1000 + si.last_signal : si.last_exit_code;
    given_rc = pm_cluster_terminate(c);
    return NULL;
}

START_TEST(test_fork_wipe_stops_at_given_stack)
{
    unsigned char *region = mmap(NULL, GIVEN_BELOW + GIVEN_STACK, PROT_READ | PROT_WRITE,
                                 MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(region, MAP_FAILED);
    given_below = region;
    memset(region, 0x5a, GIVEN_BELOW);
    memset(region + GIVEN_BELOW, 0, GIVEN_STACK); /* every stack page resident */
    pm_options *o = opts(1);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_options_set_bootstrap(o, boot_check_given_below, NULL);
    pthread_attr_t a;
    pthread_t t;
    ck_assert_int_eq(pthread_attr_init(&a), 0);
    ck_assert_int_eq(pthread_attr_setstack(&a, region + GIVEN_BELOW, GIVEN_STACK), 0);
    ck_assert_int_eq(pthread_create(&t, &a, spawn_on_given_stack, o), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
    pthread_attr_destroy(&a);
    ck_assert_int_ge(given_rc, 0);
    ck_assert_msg(given_exit == 0, "the worker read the memory below its forking thread's stack wiped (exit %d)",
                  given_exit);
    for (size_t i = 0; i < GIVEN_BELOW; i++)
        ck_assert_int_eq(region[i], 0x5a); /* the supervisor's own, untouched */
    assert_all_started_gone();
    pm_options_free(o);
    munmap(region, GIVEN_BELOW + GIVEN_STACK);
}
END_TEST


int main(void)
{
    Suite *s = suite_create("spawn");
    PM_ADD_TEST(s, test_spawn_ready_terminate, 60);
    PM_ADD_TEST(s, test_init_data_fork_and_exec, 60);
    PM_ADD_TEST(s, test_spawn_missing_program, 60);
    PM_ADD_LOOP_TEST(s, test_spawn_alloc_failures, 0, 2, 300);
    PM_ADD_TEST(s, test_spawn_failure_kills_siblings, 30); /* a spawn that hangs on live siblings (mutant 07) fails sooner */
    PM_ADD_TEST(s, test_spawn_resources_exhausted, 60);
    PM_ADD_TEST(s, test_ready_mode_exec_and_listen_fds, 60);
    PM_ADD_TEST(s, test_fork_child_faults_flat_in_n, 240);
    PM_ADD_TEST(s, test_exec_signal_dispositions, 60);
    PM_ADD_TEST(s, test_spawn_name_in_path, 60);
    PM_ADD_LOOP_TEST(s, test_spawn_name_search, 0, 4, 60);
    PM_ADD_LOOP_TEST(s, test_spawn_name_default_path, 0, 2, 60);
    PM_ADD_TEST(s, test_fork_wipe_stops_at_given_stack, 60);
    PM_ADD_LOOP_TEST(s, test_exec_signal_mask, 0, 2, 60);
    return pm_test_main(s);
}
