/* SPDX-License-Identifier: MIT */
/* check_fallbacks.c - the old-kernel fallbacks, taken because a seccomp filter refuses the new calls. */
/*
 * Each test installs, in its own process (Check's fork mode gives every
 * test one), a seccomp filter that answers close_range, io_uring_setup,
 * pidfd_open and pidfd_send_signal with ENOSYS, as a kernel older than 5.1
 * (io_uring), 5.3 (pidfd) or 5.11 (close_range) would. A cluster then has
 * to run on what is left: the epoll loop, exits found by SIGCHLD and waitid
 * (or by scanning when it may not touch signals), signals sent by kill(),
 * and close-on-exec by walking /proc/self/fd. Each test asserts that the
 * fallback was really taken (through tests/internals.h, and a leaked fd
 * that only the walk can have caught) and that the cluster still works:
 * spawn, messages both ways, a crash and its restart, terminate.
 *
 * The RuntimeDefault cases do the same with the profile a container
 * runtime's default seccomp profile amounts to for procmesh: io_uring_setup
 * and clone3 refused, with EPERM (Docker's and containerd's answer to a call
 * not on their list) or ENOSYS (their answer for clone3, so that glibc
 * falls back); and, as root, with the cgroup filesystem read-only in a
 * mount namespace of the test's own, as in a pod: workers must start,
 * restart and be contained by process groups.
 *
 * The diagnostics' default: without an on_diagnostic callback, the
 * library's own diagnostic goes to stderr as "procmesh: MESSAGE".
 *
 * The missing-library cases: liburing, libsodium and libseccomp are loaded
 * on first use (src/os/deps.h); each is made unloadable here as it would
 * be on a host without it, by failing the product's own dlopen of its
 * SONAME (hide_library), and what depends on it must give up with the
 * library's name in the reason, the rest working.
 */
#include "helpers.h"

#include <dirent.h>
#include <dlfcn.h>
#include <fcntl.h>
#include <linux/audit.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sched.h>
#include <stddef.h>
#include <sys/mount.h>
#include <sys/resource.h>
#include <sys/syscall.h>

#include "procmesh.h"
#include "answer.h" /* PM_AUDIT_ARCH */
#include "internals.h"
#include "dconf.h"
#include "os/deps.h"
#include "os/seccomp_filter.h"
#include "peer/peerkeys.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif


#ifndef CLOSE_RANGE_CLOEXEC
#define CLOSE_RANGE_CLOEXEC (1U << 2)
#endif

#if defined(PM_AUDIT_ARCH) && defined(__NR_close_range) && defined(__NR_io_uring_setup) &&      \
    defined(__NR_pidfd_open) && defined(__NR_pidfd_send_signal)
#define PM_CAN_FILTER 1
#endif

#ifdef PM_AUDIT_ARCH
/* Installs the filter prog (n instructions) on this process and all it
 * starts (inherited across fork, kept across execve). */
static inline void install_filter(struct sock_filter *prog, size_t n)
{
    struct sock_fprog fprog = {.len = (unsigned short)n, .filter = prog};
    /* Without no_new_privs only a CAP_SYS_ADMIN process may install a
     * filter; with it anyone may, and nothing we exec can gain privileges
     * that would let it escape the filter. */
    ck_assert_msg(prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) == 0, "PR_SET_NO_NEW_PRIVS: %s",
                  strerror(errno));
    ck_assert_msg(syscall(SYS_seccomp, SECCOMP_SET_MODE_FILTER, 0, &fprog) == 0,
                  "SECCOMP_SET_MODE_FILTER: %s", strerror(errno));
}
#endif

#ifdef PM_CAN_FILTER
/* Refuses the four calls with ENOSYS in this process and everything it
 * starts (a seccomp filter is inherited across fork and kept across
 * execve). Another architecture's calls (a 32-bit binary on a 64-bit
 * kernel) get through untouched: the numbers below are this one's. */
static void refuse_new_calls(void)
{
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PM_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_close_range, 4, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 3, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pidfd_open, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_pidfd_send_signal, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | (ENOSYS & SECCOMP_RET_DATA)),
    };
    install_filter(prog, ARRAY_LEN(prog));
}
#endif

#if defined(PM_AUDIT_ARCH) && defined(__NR_io_uring_setup) && defined(__NR_clone3)
#define PM_CAN_FILTER_RD 1
/* A RuntimeDefault profile, as far as procmesh is concerned: io_uring_setup
 * and clone3 answered with err (EPERM or ENOSYS), everything else let
 * through (pidfds included: the runtimes' profiles allow them). */
static void refuse_like_runtime_default(int err)
{
    struct sock_filter prog[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, arch)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, PM_AUDIT_ARCH, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_io_uring_setup, 2, 0),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, __NR_clone3, 1, 0),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ERRNO | ((unsigned)err & SECCOMP_RET_DATA)),
    };
    install_filter(prog, ARRAY_LEN(prog));
}
#endif

/* errno of a call that failed, 0 when it succeeded (its fd closed). */
static int call_errno(long rc)
{
    if (rc < 0)
        return errno;
    close((int)rc);
    return 0;
}

static int probe_close_range(void)
{
    /* Far above any fd we hold: marks nothing when it works. */
    return call_errno(syscall(__NR_close_range, 4000u, 4001u, CLOSE_RANGE_CLOEXEC));
}

static int probe_io_uring(void)
{
    unsigned char params[120]; /* struct io_uring_params, zeroed: a valid request */
    memset(params, 0, sizeof(params));
    return call_errno(syscall(__NR_io_uring_setup, 1u, params));
}

static int probe_pidfd_open(void)
{
    return call_errno(syscall(__NR_pidfd_open, getpid(), 0u));
}

static int probe_pidfd_signal(void)
{
    /* Signal 0 through a bad pidfd: EBADF when the call exists. */
    return call_errno(syscall(__NR_pidfd_send_signal, -1, 0, NULL, 0u));
}

/* ---------------------------------------------------------------- the cluster side */

/* The filter of the test refuses pidfd_open (the old-kernel cases) or lets
 * it through (the RuntimeDefault cases). */
static int pidfd_refused = 1;

static struct {
    char last[8][512]; /* what slot i last sent main */
    unsigned got[8];   /* messages from slot i */
    int exited_signal; /* the signal of the last EXITED event */
    unsigned ready;    /* READY events */
    uint64_t ready_inc[8];
} seen;

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_EXITED)
        seen.exited_signal = e->signal;
    if (e->type == PM_EVENT_READY && e->slot < 8) {
        seen.ready++;
        seen.ready_inc[e->slot] = e->incarnation;
    }
}

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    unsigned slot = (unsigned)m->from.port - 1; /* base port 1 */
    if (slot >= 8 || m->kind != PM_MSG_PLAIN)
        return;
    size_t n = m->len < sizeof(seen.last[0]) - 1 ? m->len : sizeof(seen.last[0]) - 1;
    memcpy(seen.last[slot], m->data, n);
    seen.last[slot][n] = '\0';
    seen.got[slot]++;
}

/* The fork-mode worker: pm-test-worker's echo mode, in the child. */
static int boot_echo(pm_node *n, void *arg)
{
    (void)arg;
    /* A fork of the test process inherits Check's SIGTERM handler, which
     * signals the test's whole process group: our stop's SIGTERM must end
     * this worker alone. (Set before ready; the stop comes after.) */
    signal(SIGTERM, SIG_DFL);
    if (pm_node_ready(n) < 0)
        return 101;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0 || m.kind != PM_MSG_PLAIN)
            continue;
        if (m.len == 5 && memcmp(m.data, "crash", 5) == 0)
            raise(SIGSEGV);
        char out[600];
        int len = snprintf(out, sizeof(out), "echo:%.*s", (int)(m.len < 500 ? m.len : 500),
                           (const char *)m.data);
        pm_node_send(n, &m.from, out, (size_t)len);
    }
}

static pm_options *opts(unsigned workers, int handle_signals)
{
    memset(&seen, 0, sizeof(seen));
    pm_options *o = pm_test_quick_options((int)workers, on_event, on_message);
    ck_assert_int_eq(pm_options_set_handle_signals(o, handle_signals), 0);
    ck_assert_int_eq(pm_options_set_stop_timeout_ms(o, 5000), 0);
    return o;
}

/* Slot i's current address. */
static pm_address addr_of(pm_cluster *c, unsigned i)
{
    pm_address a[8];
    ck_assert_int_ge(pm_cluster_addresses(c, a, 8), (int)i + 1);
    return a[i];
}

/* Sends text to slot i and runs the cluster until its echo comes back. */
static void round_trip(pm_cluster *c, unsigned i, const char *text)
{
    unsigned before = seen.got[i];
    pm_address a = addr_of(c, i);
    ck_assert_int_eq(pm_cluster_send(c, &a, text, strlen(text)), 0);
    PM_RUN_UNTIL(c, seen.got[i] > before, 20000);
    char want[600];
    snprintf(want, sizeof(want), "echo:%s", text);
    ck_assert_str_eq(seen.last[i], want);
}

/* What every cluster under the filter must show: the epoll loop, and no
 * pidfd for any live worker. */
static void assert_fallbacks(pm_cluster *c, unsigned workers, int handle_signals)
{
    ck_assert_msg(pm_test_loop_backend(c) == PM__LOOP_EPOLL,
                  "the loop runs on backend %d, not epoll, with io_uring_setup refused",
                  pm_test_loop_backend(c));
    if (!pidfd_refused)
        return;
    for (unsigned i = 0; i < workers; i++)
        ck_assert_msg(pm_test_slot_pidfd(c, i) == -1, "slot %u holds pidfd %d with pidfd_open "
                      "refused", i, pm_test_slot_pidfd(c, i));
    /* Without pidfds, exits come from SIGCHLD (signalfd + waitid) when the
     * cluster handles signals, else from scanning on a timer. */
    ck_assert_int_eq(pm_test_poll_children(c), !handle_signals);
}

/* The life of a cluster under the filter: spawn, messages, a crash of slot
 * 0 and its restart, messages to the new incarnation, terminate. */
static void exercise(pm_options *o, unsigned workers, int handle_signals)
{
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    assert_fallbacks(c, workers, handle_signals);
    for (unsigned i = 0; i < workers; i++)
        round_trip(c, i, "ping");
    uint64_t inc = pm_test_slot_incarnation(c, 0);
    pm_address a = addr_of(c, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "crash", 5), 0);
    PM_RUN_UNTIL(c, seen.exited_signal == SIGSEGV, 20000);
    PM_RUN_UNTIL(c, seen.ready_inc[0] > inc && pm_test_slot_state(c, 0) == PM_SLOT_READY, 20000);
    assert_fallbacks(c, workers, handle_signals);
    round_trip(c, 0, "after the crash");
    for (unsigned i = 1; i < workers; i++)
        round_trip(c, i, "still here");
    /* Every worker stops by itself on the stop request: 0, all reaped. */
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
}

#ifdef PM_CAN_FILTER
/* Fork mode under the filter: two echo workers' exercise, with or without
 * the cluster handling signals. */
static void exercise_fork_mode(int handle_signals)
{
    refuse_new_calls();
    pm_options *o = opts(2, handle_signals);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    exercise(o, 2, handle_signals);
    pm_options_free(o);
}
#endif

/* ---------------------------------------------------------------- tests */

START_TEST(test_filter_refuses_the_new_calls)
{
#ifdef PM_CAN_FILTER
    /* Before: this kernel has the calls (or the test proves nothing new). */
    int had_close_range = probe_close_range() != ENOSYS, had_uring = probe_io_uring() != ENOSYS,
        had_pidfd = probe_pidfd_open() != ENOSYS;
    if (!had_close_range || !had_uring || !had_pidfd)
        fprintf(stderr, "note: the kernel itself lacks:%s%s%s\n", had_close_range ? "" : " close_range",
                had_uring ? "" : " io_uring", had_pidfd ? "" : " pidfd");
    refuse_new_calls();
    ck_assert_int_eq(probe_close_range(), ENOSYS);
    ck_assert_int_eq(probe_io_uring(), ENOSYS);
    ck_assert_int_eq(probe_pidfd_open(), ENOSYS);
    ck_assert_int_eq(probe_pidfd_signal(), ENOSYS);
    /* Nothing else: an ordinary call still works. */
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    close(fd);
    /* And it holds in a child, as it will in the workers. */
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(probe_close_range() == ENOSYS && probe_pidfd_open() == ENOSYS ? 0 : 1);
    int status = pm_test_reap(pid, 10000);
    ck_assert_msg(status != -1 && WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "the filter does not hold in a child (status %d)", status);
#endif
}
END_TEST

START_TEST(test_fork_mode_sigchld)
{
#ifdef PM_CAN_FILTER
    exercise_fork_mode(1);
#endif
}
END_TEST

START_TEST(test_fork_mode_scan)
{
#ifdef PM_CAN_FILTER
    /* handle_signals 0: no signalfd either, so exits are found by the
     * periodic scan (waitid WNOHANG per slot). */
    exercise_fork_mode(0);
#endif
}
END_TEST

/* The fd numbers in an "fds 0 1 2 ..." answer; returns how many. */
static int parse_fds(const char *text, int *out, int cap)
{
    ck_assert_msg(strncmp(text, "fds", 3) == 0, "not an fd list: %s", text);
    int n = 0;
    const char *p = text + 3;
    char *end;
    for (long v = strtol(p, &end, 10); end != p; p = end, v = strtol(p, &end, 10))
        if (n < cap)
            out[n++] = (int)v;
    return n;
}

START_TEST(test_exec_mode_cloexec_walk)
{
#ifdef PM_CAN_FILTER
    /* An fd the supervisor holds without close-on-exec (as an application
     * might) must not reach an exec worker. close_range is refused and the
     * fd lies above RLIMIT_NOFILE, so only the walk over /proc/self/fd can
     * have marked it. */
    refuse_new_calls();
    enum { LEAK = 200 };
    int fd = open("/dev/null", O_RDONLY); /* no O_CLOEXEC on purpose */
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(dup2(fd, LEAK), LEAK); /* dup2 never sets FD_CLOEXEC */
    close(fd);
    ck_assert_int_eq(fcntl(LEAK, F_GETFD) & FD_CLOEXEC, 0);
    /* Below the leaked fd: the last resort (fcntl on every fd up to the
     * limit) cannot see it, so if it is caught, the walk caught it. */
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    rl.rlim_cur = LEAK / 2;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    pm_options *o = opts(2, 1);
    char *argv[] = {PM_TEST_WORKER, "echo", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    assert_fallbacks(c, 2, 1);
    for (unsigned i = 0; i < 2; i++) {
        unsigned before = seen.got[i];
        pm_address a = addr_of(c, i);
        ck_assert_int_eq(pm_cluster_send(c, &a, "fds", 3), 0);
        PM_RUN_UNTIL(c, seen.got[i] > before, 20000);
        int fds[64];
        int n = parse_fds(seen.last[i], fds, 64);
        /* stdin/out/err, its memfd, two doorbells and its fd socket: 0..6,
         * nothing else. */
        ck_assert_msg(n == 7, "slot %u holds %d fds (%s), want 7", i, n, seen.last[i]);
        for (int k = 0; k < n; k++) {
            ck_assert_msg(fds[k] != LEAK, "slot %u inherited fd %d: %s", i, LEAK, seen.last[i]);
            ck_assert_msg(fds[k] <= 6, "slot %u holds fd %d: %s", i, fds[k], seen.last[i]);
        }
    }
    /* Ours stays open and inheritable: the mark was set in the child only. */
    ck_assert_int_eq(fcntl(LEAK, F_GETFD) & FD_CLOEXEC, 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    /* The rest of a cluster's life, exec mode. */
    o = opts(2, 1);
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
    exercise(o, 2, 1);
    pm_options_free(o);
    close(LEAK);
#endif
}
END_TEST

#ifdef PM_CAN_FILTER_RD
static int probe_clone3(void)
{
    /* No arguments: EINVAL (or E2BIG) when the call exists. */
    return call_errno(syscall(__NR_clone3, NULL, (size_t)0));
}

/* An exec-mode cluster's life under the RuntimeDefault-like filter
 * (containment as the machine allows: a cgroup as root here). */
static void runtime_default(int err)
{
    refuse_like_runtime_default(err);
    ck_assert_int_eq(probe_io_uring(), err);
    ck_assert_int_eq(probe_clone3(), err);
    pidfd_refused = 0;
    char *argv[] = {PM_TEST_WORKER, "echo", NULL};
    pm_options *o = opts(2, 1);
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
    exercise(o, 2, 1);
    pm_options_free(o);
    /* Fork mode too (fork_into's clone3 is only for exec mode). */
    o = opts(2, 1);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    exercise(o, 2, 1);
    pm_options_free(o);
}
#endif

START_TEST(test_runtime_default_eperm)
{
#ifdef PM_CAN_FILTER_RD
    runtime_default(EPERM);
#endif
}
END_TEST

START_TEST(test_runtime_default_enosys)
{
#ifdef PM_CAN_FILTER_RD
    runtime_default(ENOSYS);
#endif
}
END_TEST

#ifdef PM_CAN_FILTER_RD
/* Every cgroup filesystem read-only in a mount namespace of this test
 * process's own (the host's mounts are untouched): a pod's view. 0, or a
 * reason to skip. */
static const char *cgroupfs_read_only(void)
{
    if (geteuid() != 0)
        return "needs root (a mount namespace and a remount)";
    if (unshare(CLONE_NEWNS) < 0)
        return "unshare(CLONE_NEWNS) refused";
    if (mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0)
        return "cannot make the mounts private";
    FILE *f = fopen("/proc/self/mountinfo", "re");
    ck_assert_ptr_nonnull(f);
    char line[1024];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        char mnt[512], type[64];
        const char *dash = strstr(line, " - ");
        if (dash == NULL || sscanf(line, "%*s %*s %*s %*s %511s", mnt) != 1 ||
            sscanf(dash + 3, "%63s", type) != 1)
            continue;
        if (strcmp(type, "cgroup") != 0 && strcmp(type, "cgroup2") != 0)
            continue;
        ck_assert_msg(mount(NULL, mnt, NULL, MS_BIND | MS_REMOUNT | MS_RDONLY, NULL) == 0,
                      "remount %s read-only: %s", mnt, strerror(errno));
        n++;
    }
    fclose(f);
    return n > 0 ? NULL : "no cgroup filesystem mounted";
}
#endif

START_TEST(test_runtime_default_readonly_cgroupfs)
{
#ifdef PM_CAN_FILTER_RD
    /* As in a pod under RuntimeDefault: io_uring and clone3 refused
     * (EPERM), the cgroup filesystem read-only. The cluster runs on epoll
     * and fork, contains each incarnation in a process group, and a crash
     * takes the worker's own child with it. */
    const char *skip = cgroupfs_read_only();
    if (skip != NULL) {
        fprintf(stderr, "note: test_runtime_default_readonly_cgroupfs skipped: %s\n", skip);
        return;
    }
    refuse_like_runtime_default(EPERM);
    pidfd_refused = 0;
    char dir[] = "/tmp/pm-rd-XXXXXX", script[512];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    /* The shell's background child stays in its process group (no job
     * control); the shell then becomes the worker (exec keeps the pid). */
    snprintf(script, sizeof(script), "sleep 1000 & echo $! > %s/bg-$$; exec %s echo", dir, PM_TEST_WORKER);
    char *argv[] = {"/bin/sh", "-c", script, NULL};
    pm_options *o = opts(2, 1);
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    char detail[320];
    ck_assert_msg(pm_cluster_containment(c, detail, sizeof(detail)) == PM_CONTAIN_PROCESS_GROUP,
                  "containment with a read-only cgroupfs: %s", detail);
    assert_fallbacks(c, 2, 1);
    round_trip(c, 0, "ping");
    round_trip(c, 1, "ping");
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    char path[128];
    snprintf(path, sizeof(path), "%s/bg-%d", dir, (int)si.pid);
    FILE *f = fopen(path, "r");
    ck_assert_msg(f != NULL, "%s: %s", path, strerror(errno));
    int bg = 0;
    ck_assert_int_eq(fscanf(f, "%d", &bg), 1);
    fclose(f);
    ck_assert_int_eq(kill(bg, 0), 0);
    ck_assert_int_eq(getpgid(bg), si.pid); /* in the worker's own group */
    uint64_t inc = pm_test_slot_incarnation(c, 0);
    pm_address a = addr_of(c, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "crash", 5), 0);
    PM_RUN_UNTIL(c, seen.exited_signal == SIGSEGV, 20000);
    PM_RUN_UNTIL(c, seen.ready_inc[0] > inc && pm_test_slot_state(c, 0) == PM_SLOT_READY, 20000);
    /* The group was killed before the worker was reaped; the sleep is our
     * subreaper-less grandchild: gone, or a zombie about to be reaped by
     * init. Either way it no longer runs. */
    char stat[64], st = 'R';
    snprintf(stat, sizeof(stat), "/proc/%d/stat", bg);
    f = fopen(stat, "r");
    if (f != NULL) {
        ck_assert_int_eq(fscanf(f, "%*d %*s %c", &st), 1);
        fclose(f);
    }
    ck_assert_msg(f == NULL || st == 'Z' || st == 'X', "the crashed worker's child %d still runs (%c)", bg, st);
    round_trip(c, 0, "after the crash");
    round_trip(c, 1, "still here");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    /* No system("rm -rf"): glibc's posix_spawn gives up on clone3's EPERM. */
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
        if (e->d_name[0] != '.')
            unlinkat(dirfd(d), e->d_name, 0);
    closedir(d);
    ck_assert_int_eq(rmdir(dir), 0);
#endif
}
END_TEST

/* ---------------------------------------------------------------- diagnostics without a callback */

static int diag_calls;
static char diag_said_topic[64], diag_said[512];

static void on_diag_keep(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c, (void)arg;
    diag_calls++;
    snprintf(diag_said_topic, sizeof(diag_said_topic), "%s", topic);
    snprintf(diag_said, sizeof(diag_said), "%s", message);
}

/* Options whose peer links cannot be set up: their listen address is
 * taken (at, "127.0.0.1:PORT", is bound and listened on by the test). */
static pm_options *diag_opts(const char *at)
{
    pm_options *o = opts(1, 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    ck_assert_int_eq(pm_options_set_insecure_no_secret(o, 1), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, "a"), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    ck_assert_int_eq(pm_options_set_peer_listen(o, at), 0);
    return o;
}

/* pm_options(3) set_on_diagnostic: "Without a callback, each is written
 * to stderr as procmesh: MESSAGE." A diagnostic made twice the same way
 * (peer_links_failed: the listen address is taken), once to a callback
 * that keeps its words, once without one, the test's stderr in a file:
 * that file holds the line "procmesh: " and the callback's message. */
START_TEST(test_diagnostic_default_stderr)
{
    int hold = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(hold, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(hold, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(hold, 1), 0);
    socklen_t salen = sizeof(sa);
    ck_assert_int_eq(getsockname(hold, (struct sockaddr *)&sa, &salen), 0);
    char listen_at[32];
    snprintf(listen_at, sizeof(listen_at), "127.0.0.1:%d", ntohs(sa.sin_port));

    diag_calls = 0;
    pm_options *o = diag_opts(listen_at);
    ck_assert_int_eq(pm_options_set_on_diagnostic(o, on_diag_keep, NULL), 0);
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    ck_assert_int_lt(rc, 0);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    ck_assert_int_eq(diag_calls, 1);
    ck_assert_str_eq(diag_said_topic, "peer_links_failed");
    /* Its words name the address (or, on a host without libsodium, that). */
    ck_assert_msg(strstr(diag_said, listen_at) != NULL || strstr(diag_said, "libsodium") != NULL,
                  "diagnostic '%s'", diag_said);

    o = diag_opts(listen_at);
    char path[32];
    int saved = pm_test_stderr_to_file(path);
    int rc2 = pm_cluster_spawn(o, &c);
    pm_test_stderr_restore(saved);
    ck_assert_int_eq(rc2, rc);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    char text[1024], want[600];
    pm_test_read_file(path, text, sizeof(text));
    unlink(path);
    snprintf(want, sizeof(want), "procmesh: %s\n", diag_said);
    /* A whole line of its own (a library that cannot be loaded here, such
     * as liburing, says so on a line before it). */
    const char *at = strstr(text, want);
    while (at != NULL && at != text && at[-1] != '\n')
        at = strstr(at + 1, want);
    ck_assert_msg(at != NULL, "stderr without a callback:\n%s\nnot the line\n%s", text, want);
    ck_assert_int_eq(diag_calls, 1); /* the callback was not kept */
    close(hold);
}
END_TEST

/* ---------------------------------------------------------------- missing libraries */

#define PM_NO_SUCH_SONAME "libpm-no-such-library.so.0"

#if PM_LAZY_DEPS
static const char *hidden_soname;

/* From now on, in this (forked) test process, the library named by soname
 * (configure's PM_SONAME_*) cannot be loaded. */
static void hide_library(const char *soname)
{
    hidden_soname = soname;
}

/*
 * This program's dlopen stands in for libc's: deps.o is linked into it
 * (libpmcore.la), and the executable's definition comes first in symbol
 * lookup. The hidden SONAME is opened as PM_NO_SUCH_SONAME instead, so it
 * fails with the real loader's words, as on a host without the library;
 * everything else goes through unchanged.
 */
void *dlopen(const char *file, int mode)
{
    static void *(*real)(const char *, int);
    if (real == NULL) {
        void *sym = dlsym(RTLD_NEXT, "dlopen");
        memcpy(&real, &sym, sizeof(real));
    }
    if (file != NULL && hidden_soname != NULL && strcmp(file, hidden_soname) == 0)
        file = PM_NO_SUCH_SONAME;
    return real(file, mode);
}

/* The reason names the library and what dlopen said about the SONAME. */
static void assert_reason(enum pm__dep d, const char *lib)
{
    char why[256] = "";
    ck_assert_int_eq(pm__dep_load(d, why, sizeof(why)), -ELIBACC);
    ck_assert_msg(strstr(why, lib) != NULL && strstr(why, PM_NO_SUCH_SONAME) != NULL,
                  "reason '%s' names neither %s nor the SONAME", why, lib);
    ck_assert_str_eq(pm__dep_error(d), why);
}

/* liburing missing: the loop runs on epoll, and the cluster works. */
START_TEST(test_missing_liburing_epoll)
{
    hide_library(PM_SONAME_URING);
    pm_options *o = opts(2, 1);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_test_loop_backend(c), PM__LOOP_EPOLL);
    round_trip(c, 0, "ping");
    round_trip(c, 1, "ping");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    assert_reason(PM__DEP_URING, "liburing");
}
END_TEST

static char diag_topic[64], diag_msg[512];

static void on_diag(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c, (void)arg;
    snprintf(diag_topic, sizeof(diag_topic), "%s", topic);
    snprintf(diag_msg, sizeof(diag_msg), "%s", message);
}

/* libsodium missing: peer links and secrets are refused with the reason;
 * the same cluster without peers starts. */
START_TEST(test_missing_libsodium_peers_refused)
{
    hide_library(PM_SONAME_SODIUM);
    pm_options *o = opts(1, 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    pm_options_set_on_diagnostic(o, on_diag, NULL);
    unsigned char key[32] = {1};
    ck_assert_int_eq(pm_options_add_secret(o, key), -ELIBACC);
    ck_assert_int_eq(pm_options_set_insecure_no_secret(o, 1), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, "a"), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    ck_assert_int_eq(pm_options_set_peer_listen(o, "127.0.0.1:1"), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ELIBACC);
    ck_assert_str_eq(diag_topic, "peer_links_failed");
    ck_assert_msg(strstr(diag_msg, "libsodium") != NULL && strstr(diag_msg, PM_NO_SUCH_SONAME) != NULL,
                  "diagnostic '%s'", diag_msg);
    pm_options_free(o);
    /* The daemon's key calls say the same: the library that could not be
     * loaded, not "libsodium failed to initialise"; no key file made. */
    char why[512] = "", path[64];
    unsigned char out[32];
    snprintf(path, sizeof(path), "/tmp/pm-fallback-key.%d", (int)getpid());
    ck_assert_int_eq(pm__peer_key_create(path, out, why, sizeof(why)), -ELIBACC);
    ck_assert_msg(strstr(why, "libsodium") != NULL && strstr(why, PM_NO_SUCH_SONAME) != NULL, "create: '%s'",
                  why);
    ck_assert_int_eq(access(path, F_OK), -1);
    pm__keyring *kr = (pm__keyring *)&why;
    ck_assert_int_eq(pm__keyring_new(&kr), -ELIBACC);
    ck_assert_ptr_null(kr);
    pm__pins pins;
    why[0] = '\0';
    ck_assert_int_eq(pm__pins_parse("", 0, &pins, why, sizeof(why)), -ELIBACC);
    ck_assert_msg(strstr(why, "libsodium") != NULL && strstr(why, PM_NO_SUCH_SONAME) != NULL, "pins: '%s'", why);
    assert_reason(PM__DEP_SODIUM, "libsodium");
    o = opts(1, 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot_echo, NULL), 0);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    round_trip(c, 0, "ping");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

static const char *no_env(const char *name)
{
    (void)name;
    return NULL;
}

/* libseccomp missing: the option is refused, as without it at build. */
START_TEST(test_missing_libseccomp_option_refused)
{
#ifdef PM_SONAME_SECCOMP
    hide_library(PM_SONAME_SECCOMP);
#endif
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_seccomp(o, PM_SECCOMP_BASIC), -ENOTSUP);
    ck_assert_int_eq(pm_options_set_seccomp(o, PM_SECCOMP_OFF), 0);
    pm_options_free(o);
#ifdef HAVE_SECCOMP
    assert_reason(PM__DEP_SECCOMP, "libseccomp");
    /* The builder itself, reached without the option's check: -ENOTSUP,
     * nothing built. */
    pm__seccomp_prog p;
    ck_assert_int_eq(pm__seccomp_build(PM_SECCOMP_BASIC, PM_SECCOMP_ERRNO, getpid(), &p), -ENOTSUP);
    ck_assert_ptr_null(p.insns);
    ck_assert_uint_eq(p.len, 0);
    /* Nor can the calls its rules name be listed. */
    pm__seccomp_named r[4];
    ck_assert_int_eq(pm__seccomp_named_rules(PM_SECCOMP_BASIC, r, 4), -ENOTSUP);
    ck_assert_int_eq(pm__seccomp_named_rules(PM_SECCOMP_STRICT, r, 4), -ENOTSUP);
    /* `procmesh run --seccomp basic` says why, in the loader's words. */
    char *argv[] = {"--seccomp", "basic", "--", "/bin/true", NULL};
    pmd_dconf dc;
    char err[512];
    ck_assert_int_eq(pmd_dconf_parse(&dc, 4, argv, no_env, err, sizeof(err)), 0);
    pm_options *opts_out = NULL;
    ck_assert_int_eq(pmd_dconf_options(&dc, &opts_out, err, sizeof(err)), -ENOTSUP);
    ck_assert_ptr_null(opts_out);
    ck_assert_msg(strncmp(err, "--seccomp: ", 11) == 0 && strstr(err, "libseccomp") != NULL &&
                      strstr(err, PM_NO_SUCH_SONAME) != NULL && strstr(err, "only off is available") != NULL,
                  "'%s'", err);
    pmd_dconf_free(&dc);
#endif
}
END_TEST
#endif /* PM_LAZY_DEPS: linked directly, a library cannot be missing at run time */

int main(void)
{
#ifndef PM_CAN_FILTER
    pm_test_skip("no seccomp filter for this architecture (or no syscall numbers for the calls)");
#endif
    Suite *s = suite_create("fallbacks");
    PM_ADD_TEST(s, test_filter_refuses_the_new_calls, 30);
    PM_ADD_TEST(s, test_fork_mode_sigchld, 60);
    PM_ADD_TEST(s, test_fork_mode_scan, 60);
    PM_ADD_TEST(s, test_exec_mode_cloexec_walk, 60);
    PM_ADD_TEST(s, test_runtime_default_eperm, 90);
    PM_ADD_TEST(s, test_runtime_default_enosys, 90);
    PM_ADD_TEST(s, test_runtime_default_readonly_cgroupfs, 60);
    PM_ADD_TEST(s, test_diagnostic_default_stderr, 30);
#if PM_LAZY_DEPS
    PM_ADD_TEST(s, test_missing_liburing_epoll, 60);
    PM_ADD_TEST(s, test_missing_libsodium_peers_refused, 60);
    PM_ADD_TEST(s, test_missing_libseccomp_option_refused, 30);
#endif
    return pm_test_main(s);
}
