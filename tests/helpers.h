/* SPDX-License-Identifier: MIT */
/*
 * helpers.h - shared by every Check program in tests/.
 *
 * Each program builds one Suite and hands it to pm_test_main(), which runs it
 * in Check's fork mode (a crashing test fails alone), prints Check's summary
 * and maps the result to the automake exit codes: 0 pass, 1 fail, 77 skip.
 */
#ifndef PM_TEST_HELPERS_H
#define PM_TEST_HELPERS_H

#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <stdarg.h>
#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <stddef.h>
#include <linux/filter.h>
#include <linux/seccomp.h>
#include <sys/file.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <time.h>
#include <unistd.h>

#include "procmesh.h"

/* Tests crash workers on purpose and expect to see the signal: keep ASan's
 * own SIGSEGV/SIGBUS handlers out of the way in sanitizer builds. */
__attribute__((used, visibility("default"))) const char *__asan_default_options(void);
__attribute__((used, visibility("default"))) const char *__asan_default_options(void)
{
    return "handle_segv=0:handle_sigbus=0:handle_sigfpe=0:handle_sigill=0:handle_abort=0";
}

/* Every test case gets a timeout; a long one may raise it, never remove it.
 * Generous on purpose: a slow shared CI machine must not flake. */
#define PM_TEST_TIMEOUT 60

#define ARRAY_LEN(a) (sizeof(a) / sizeof((a)[0]))

/* A function that crashes on purpose must crash the way it says, not as
 * the sanitizers would have them (UBSan turns a null store into an abort). */
#if defined(__clang__)
#define CRASHER __attribute__((noinline, no_sanitize("address", "undefined")))
#else
#define CRASHER __attribute__((noinline, no_sanitize_address, no_sanitize_undefined))
#endif

/* Runs in each test's own process (Check's fork mode) before the test.
 * Check's runner installs SIGTERM and SIGINT handlers that signal the
 * whole process group, and the test process inherits them; a fork-mode
 * worker would inherit them in turn, so procmesh's stop (a SIGTERM to the
 * worker) would signal the test itself. A real application that does not
 * handle these signals has the default actions: so does each test. */
static inline void pm_test_default_signals(void)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

static inline TCase *pm_tcase(const char *name, int timeout_s)
{
    TCase *tc = tcase_create(name);
    tcase_set_timeout(tc, timeout_s > 0 ? timeout_s : PM_TEST_TIMEOUT);
    tcase_add_checked_fixture(tc, pm_test_default_signals, NULL);
    return tc;
}

/* One test case per test, named after it, so that CK_RUN_CASE=test_name
 * runs just that one. */
#define PM_ADD_TEST(suite, fn, timeout_s)              \
    do {                                               \
        TCase *tc_ = pm_tcase(#fn, (timeout_s));       \
        tcase_add_test(tc_, fn);                       \
        suite_add_tcase((suite), tc_);                 \
    } while (0)

/* The same for a table-driven test: fn runs once for each _i in
 * [start, end), each in its own process, each with the time bound. */
#define PM_ADD_LOOP_TEST(suite, fn, start, end, timeout_s)  \
    do {                                                    \
        TCase *tc_ = pm_tcase(#fn, (timeout_s));            \
        tcase_add_loop_test(tc_, fn, (start), (end));       \
        suite_add_tcase((suite), tc_);                      \
    } while (0)

/* This process's CPU time (the supervisor's: its workers are other
 * processes), user and system, in microseconds. */
static inline uint64_t pm_test_cpu_us(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (uint64_t)(ru.ru_utime.tv_sec + ru.ru_stime.tv_sec) * 1000000u +
           (uint64_t)(ru.ru_utime.tv_usec + ru.ru_stime.tv_usec);
}

/* Caps this process's address space room bytes above what it maps now
 * (RLIMIT_AS), so that the next allocation larger than room fails; *before
 * gets the limit to put back. Not under a sanitizer, whose shadow memory
 * the cap would take (pm_test_sanitized). */
static inline void pm_test_cap_address_space(size_t room, struct rlimit *before)
{
    unsigned long pages = 0;
    FILE *f = fopen("/proc/self/statm", "r");
    ck_assert_ptr_nonnull(f);
    ck_assert_int_eq(fscanf(f, "%lu", &pages), 1);
    fclose(f);
    ck_assert_int_eq(getrlimit(RLIMIT_AS, before), 0);
    struct rlimit cap = *before;
    cap.rlim_cur = (rlim_t)pages * (rlim_t)sysconf(_SC_PAGESIZE) + room;
    ck_assert_int_eq(setrlimit(RLIMIT_AS, &cap), 0);
}

/* 1 when running under a sanitizer build (tests may scale their loops down). */
static inline int pm_test_sanitized(void)
{
#if defined(__SANITIZE_ADDRESS__)
    return 1;
#elif defined(__has_feature)
#if __has_feature(address_sanitizer)
    return 1;
#endif
#endif
    return 0;
}

static inline uint64_t pm_test_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* xorshift64*: deterministic test randomness, seeded per test. */
static inline uint64_t pm_test_rand(uint64_t *s)
{
    uint64_t x = *s;
    x ^= x >> 12;
    x ^= x << 25;
    x ^= x >> 27;
    *s = x;
    return x * 0x2545F4914F6CDD1DULL;
}

static inline uint64_t pm_test_ms(void)
{
    return pm_test_now_ns() / 1000000u;
}

/* Runs a cluster in slices of 10 ms until cond holds; fails the test if it
 * does not within timeout_ms. cond is evaluated once per slice and never
 * again after it held, so a condition that sends (pm_cluster_request(...)
 * != -EAGAIN) sends once. (Needs procmesh.h at the point of use.) */
#define PM_RUN_UNTIL(c, cond, timeout_ms)                                       \
    do {                                                                        \
        uint64_t end_ = pm_test_ms() + (timeout_ms);                            \
        int ok_;                                                                \
        while (!(ok_ = !!(cond)) && pm_test_ms() < end_)                        \
            ck_assert_int_ge(pm_cluster_run((c), 10), 0);                       \
        ck_assert_msg(ok_, "timed out waiting for: %s", #cond);                 \
    } while (0)

/* Reads fd to EOF (or until buf is full) and NUL-terminates. */
static inline size_t pm_test_read_all(int fd, char *buf, size_t size)
{
    size_t got = 0;
    ssize_t k;
    while (got + 1 < size && (k = read(fd, buf + got, size - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    return got;
}

/* This process's stderr (fd 2) into a new file, for a test that reads what
 * the library itself writes there; path (at least 32 bytes) gets the
 * file's name. Returns the saved fd for pm_test_stderr_restore. */
static inline int pm_test_stderr_to_file(char *path)
{
    strcpy(path, "/tmp/pm-stderr-XXXXXX");
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    fflush(stderr);
    int saved = dup(2);
    ck_assert_int_ge(saved, 0);
    ck_assert_int_eq(dup2(fd, 2), 2);
    close(fd);
    return saved;
}

static inline void pm_test_stderr_restore(int saved)
{
    fflush(stderr);
    ck_assert_int_eq(dup2(saved, 2), 2);
    close(saved);
}

/* A file's text so far, NUL-terminated (at most size - 1 bytes). */
static inline size_t pm_test_read_file(const char *path, char *buf, size_t size)
{
    buf[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return 0;
    size_t got = fread(buf, 1, size - 1, f);
    buf[got] = '\0';
    fclose(f);
    return got;
}

/* A process's state letter from /proc/PID/stat ('R', 'S', 'D', 'Z', ...),
 * or 0 when it is gone (no such process, or its stat unreadable). The
 * name may hold spaces and parentheses: the state follows the last ')'. */
static inline char pm_test_proc_state(pid_t pid)
{
    char path[64], text[512];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    size_t n = pm_test_read_file(path, text, sizeof(text));
    const char *p = n > 0 ? strrchr(text, ')') : NULL;
    return p != NULL && p[1] == ' ' ? p[2] : 0;
}

/* Fills free fds of this process with /dev/null (out[], at most cap)
 * until open fails or cap is reached: how many. */
static inline unsigned pm_test_fill_fds(int *out, unsigned cap)
{
    unsigned n = 0;
    int fd;
    while (n < cap && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        out[n++] = fd;
    return n;
}

/* Waits for pid with a bound; kills it if it overstays. Returns the wait
 * status, or -1 if it had to be killed. Never leaves a zombie. */
static inline int pm_test_reap(pid_t pid, int timeout_ms)
{
    uint64_t end = pm_test_now_ns() + (uint64_t)timeout_ms * 1000000u;
    int status = 0;
    for (;;) {
        pid_t r = waitpid(pid, &status, WNOHANG);
        if (r == pid)
            return status;
        if (r < 0)
            return -1;
        if (pm_test_now_ns() > end) {
            kill(pid, SIGKILL);
            waitpid(pid, &status, 0);
            return -1;
        }
        usleep(1000);
    }
}

/* Binds a TCP socket to 127.0.0.1:port (0: the kernel picks) without
 * SO_REUSEADDR and closes it: the port it got, or -1. Without
 * SO_REUSEADDR the bind also fails on a port in TIME_WAIT. */
static inline int pm_test_try_port(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    sa.sin_port = htons((uint16_t)port);
    socklen_t len = sizeof(sa);
    int ok = bind(fd, (struct sockaddr *)&sa, sizeof(sa)) == 0 &&
             getsockname(fd, (struct sockaddr *)&sa, &len) == 0;
    close(fd);
    return ok ? ntohs(sa.sin_port) : -1;
}

/* The ports pm_test_free_port hands out: [*lo, *hi], below (or else
 * above) the kernel's ephemeral range; 0 when neither side has room. */
#define PM_TEST_PORTS_FLOOR 10000
#define PM_TEST_PORTS_MIN 2000
static inline int pm_test_port_range(int *lo, int *hi)
{
    int elo = 32768, ehi = 60999;
    FILE *f = fopen("/proc/sys/net/ipv4/ip_local_port_range", "r");
    if (f != NULL) {
        if (fscanf(f, "%d %d", &elo, &ehi) != 2)
            elo = 32768, ehi = 60999;
        fclose(f);
    }
    if (elo - PM_TEST_PORTS_FLOOR >= PM_TEST_PORTS_MIN) {
        *lo = PM_TEST_PORTS_FLOOR;
        *hi = elo - 1;
    } else if (65535 - ehi >= PM_TEST_PORTS_MIN) {
        *lo = ehi + 1;
        *hi = 65535;
    } else {
        return 0;
    }
    return 1;
}

/* A TCP port on 127.0.0.1 nobody holds now, for a process the test starts
 * to listen on. The kernel's own choice (bind to port 0) is not enough:
 * that port comes from the ephemeral range, where every connect() on the
 * machine takes its local port and every other test's port 0 lands too,
 * and it is free again the moment we close it; with the whole suite
 * running at once on many CPUs, another test could take it before our
 * daemon binds it, and the daemon exits "Address already in use" (a CI
 * failure at stop 47 looked like that). So the ports come from outside
 * the ephemeral range, where the kernel never hands one out, in turn,
 * from one counter that every test process on the machine shares (a file
 * under /tmp, locked while it moves), each checked free with a bind: two
 * tests running at once never get the same port, and a port comes round
 * again only after thousands of others. The kernel's port 0 only when no
 * such range exists or the file cannot be used (another user's). */
static inline int pm_test_free_port(void)
{
    static int warned;
    int lo, hi, port = -1;
    const char *why = NULL;
    /* O_NOFOLLOW and the checks below: the suite runs as root, and a
     * file under /tmp may be anyone's. */
    int ranged = pm_test_port_range(&lo, &hi);
    int fd = ranged ? open("/tmp/procmesh-test-ports", O_RDWR | O_CREAT | O_CLOEXEC | O_NOFOLLOW, 0666)
                    : -1;
    struct stat st;
    if (!ranged)
        why = "no room outside ip_local_port_range";
    else if (fd < 0)
        why = "cannot open it";
    else if (fstat(fd, &st) < 0 || !S_ISREG(st.st_mode) || st.st_uid != geteuid())
        why = "not a regular file of this user";
    /* Held for a few system calls; a holder stopped with it (a test
     * SIGSTOPped mid-call) costs a fallback after 5 s, not a hang. */
    int locked = 0;
    for (int i = 0; why == NULL && i < 5000 && !(locked = flock(fd, LOCK_EX | LOCK_NB) == 0); i++)
        usleep(1000);
    if (why == NULL && !locked)
        why = "locked by another process for 5 s";
    if (locked) {
        char buf[16] = "";
        ssize_t k = pread(fd, buf, sizeof(buf) - 1, 0);
        long next = k > 0 ? strtol(buf, NULL, 10) : 0; /* garbage: out of range, lo */
        for (int tries = hi - lo + 1; tries > 0 && port < 0; tries--) {
            if (next < lo || next > hi)
                next = lo;
            port = pm_test_try_port((int)next++);
        }
        /* Fixed width, so the write needs no truncation. If it does not
         * land, the next caller would start from the same place and could
         * get the port this one hands out before its daemon binds it: the
         * kernel's port 0 instead. */
        int n = snprintf(buf, sizeof(buf), "%010ld\n", next);
        if (pwrite(fd, buf, (size_t)n, 0) != n) {
            port = -1;
            why = "cannot write it";
        }
    }
    if (fd >= 0)
        close(fd); /* drops the lock */
    if (why != NULL && !warned++)
        fprintf(stderr, "pm_test_free_port: /tmp/procmesh-test-ports: %s: ports from the kernel "
                        "(bind to port 0), which another test could take before the daemon binds\n",
                why);
    if (port < 0)
        port = pm_test_try_port(0);
    ck_assert_int_gt(port, 0);
    return port;
}

/* fork() for every process a test starts itself: the child is SIGKILLed
 * when the test process ends, however it ends (a failed assertion, Check's
 * timeout), so no helper outlives its test. The getppid() check closes the
 * race of the test dying between fork and prctl. Tests are single-threaded,
 * so "the parent thread" of PDEATHSIG is the test process. */
static inline pid_t pm_test_fork(void)
{
    pid_t parent = getpid();
    pid_t pid = fork();
    if (pid == 0 && (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent))
        _exit(126);
    return pid;
}

/* Installs the seccomp program f (n instructions) on the calling thread,
 * no_new_privs set first. 0 or -errno. */
static inline int pm_test_filter_install(struct sock_filter *f, unsigned short n)
{
    struct sock_fprog prog = {n, f};
    if (prctl(PR_SET_NO_NEW_PRIVS, 1, 0, 0, 0) != 0 ||
        prctl(PR_SET_SECCOMP, SECCOMP_MODE_FILTER, &prog) != 0)
        return -errno;
    return 0;
}

/* A seccomp filter of the calling process's own returning ret for the
 * call nr (SECCOMP_RET_ERRNO | e to fake a kernel without it, or
 * SECCOMP_RET_TRAP), everything else allowed; no_new_privs set. 0 or
 * -errno. For a test's own process (Check's fork: it ends with the test)
 * or a child of it. */
static inline int pm_test_filter_call(long nr, uint32_t ret)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, ret),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return pm_test_filter_install(f, (unsigned short)(sizeof(f) / sizeof(f[0])));
}

/* pm_test_filter_call for the calls nr whose argument arg (0-5) has value
 * in its low 32 bits only (madvise's advice, a flag): the others allowed.
 * x86-64 and other little-endian ABIs (the low word comes first). */
static inline int pm_test_filter_call_arg(long nr, unsigned arg, uint32_t value, uint32_t ret)
{
    struct sock_filter f[] = {
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, offsetof(struct seccomp_data, nr)),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, (uint32_t)nr, 0, 3),
        BPF_STMT(BPF_LD | BPF_W | BPF_ABS, (uint32_t)offsetof(struct seccomp_data, args[0]) + 8 * arg),
        BPF_JUMP(BPF_JMP | BPF_JEQ | BPF_K, value, 0, 1),
        BPF_STMT(BPF_RET | BPF_K, ret),
        BPF_STMT(BPF_RET | BPF_K, SECCOMP_RET_ALLOW),
    };
    return pm_test_filter_install(f, (unsigned short)(sizeof(f) / sizeof(f[0])));
}

/* Waits until child pid sleeps in one of the system calls nrs, as its
 * /proc/PID/syscall shows (an event, not a delay: the first field is the
 * call's number while the task sleeps in it, "running" otherwise). Read
 * by the parent, which Yama's ptrace scope allows where a child reading
 * its parent's would not be. 0, or -errno when the file cannot be read (a
 * kernel without it) or after some 60 s without the call (-ETIMEDOUT). */
static inline int pm_test_wait_in(pid_t pid, const long *nrs, size_t n)
{
    char path[64], line[128];
    snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
    for (int tries = 0; tries < 600000; tries++) {
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            return -errno;
        ssize_t k = read(fd, line, sizeof(line) - 1);
        int e = errno;
        close(fd);
        if (k < 0)
            return -e;
        line[k] = '\0';
        if (line[0] >= '0' && line[0] <= '9') {
            long nr = strtol(line, NULL, 10);
            for (size_t i = 0; i < n; i++)
                if (nr == nrs[i])
                    return 0;
        }
        usleep(100);
    }
    return -ETIMEDOUT;
}

/* A field of /proc/PID/status (pid 0: this process) as a number: its
 * voluntary context switches, its threads; -1 without it, -2 when the
 * process is a zombie (its counts no longer move). */
static inline long pm_test_status_field(pid_t pid, const char *field)
{
    char path[64], buf[8192];
    if (pid == 0)
        snprintf(path, sizeof(path), "/proc/self/status");
    else
        snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t k = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    if (k <= 0)
        return -1;
    buf[k] = '\0';
    if (strstr(buf, "\nState:\tZ") != NULL)
        return -2;
    char key[64];
    snprintf(key, sizeof(key), "\n%s:", field);
    const char *v = strstr(buf, key);
    return v == NULL ? -1 : strtol(v + strlen(key), NULL, 10);
}

/* This process's threads, or -1. */
static inline long pm_test_threads(void)
{
    return pm_test_status_field(0, "Threads");
}

/* Waits until child pid, asleep in a wait that times out and is made
 * again, has gone to sleep `sleeps` more times than now: each of its
 * waits that ended empty and was made again is one more voluntary switch
 * (an event: on a slow machine it takes longer, never fails). 0, or
 * -ETIMEDOUT after some 60 s, -ENOENT without the count, -ESRCH once it
 * is a zombie (it ended: no wait of its will end again). */
static inline int pm_test_wait_sleeps(pid_t pid, long sleeps)
{
    long s0 = pm_test_status_field(pid, "voluntary_ctxt_switches");
    if (s0 < 0)
        return s0 == -2 ? -ESRCH : -ENOENT;
    for (int tries = 0; tries < 60000; tries++) {
        long s = pm_test_status_field(pid, "voluntary_ctxt_switches");
        if (s < 0)
            return s == -2 ? -ESRCH : -ENOENT;
        if (s >= s0 + sleeps)
            return 0;
        usleep(1000);
    }
    return -ETIMEDOUT;
}

/* The same, then SIGUSR1 to it. */
static inline int pm_test_signal_when_in(pid_t pid, const long *nrs, size_t n)
{
    int rc = pm_test_wait_in(pid, nrs, n);
    if (rc == 0 && kill(pid, SIGUSR1) != 0)
        rc = -errno;
    return rc;
}

/* The suite marks every process it starts with PM_TEST_RUN in the
 * environment (Makefile.am, AM_TESTS_ENVIRONMENT), so tests/leftovers.sh
 * can find any that outlived it. A test that execs with an environment of
 * its own passes the mark on with this: "PM_TEST_RUN=..." in buf, or NULL
 * outside the suite (end of the envp list then). */
static inline char *pm_test_run_env(char *buf, size_t size)
{
    const char *v = getenv("PM_TEST_RUN");
    if (v == NULL || (size_t)snprintf(buf, size, "PM_TEST_RUN=%s", v) >= size)
        return NULL;
    return buf;
}

/* This process's fds whose target (readlink of /proc/self/fd/N) contains
 * text. */
/* The lowest fd free now: the next one open() would return. */
static inline int pm_test_lowest_free_fd(void)
{
    int fd = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    close(fd);
    return fd;
}

/* RLIMIT_NOFILE's soft limit set to soft (the hard one kept); *was gets
 * the limits before, for setrlimit to put back. */
static inline void pm_test_nofile_soft(rlim_t soft, struct rlimit *was)
{
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, was), 0);
    struct rlimit now = *was;
    now.rlim_cur = soft;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &now), 0);
}

static inline int pm_test_fds_to(const char *text)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300], target[600];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = e->d_name[0] != '.' ? readlink(path, target, sizeof(target) - 1) : -1;
        if (k > 0) {
            target[k] = '\0';
            n += strstr(target, text) != NULL;
        }
    }
    closedir(d);
    return n;
}

/* The fds open in this process now (not the one that reads the list). */
static inline int pm_test_count_fds(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d))
            n++;
    closedir(d);
    return n;
}

/* Each open fd of this process and what it is, to stderr: what a test
 * that compares fd counts prints when they differ. */
static inline void pm_test_show_fds(const char *when)
{
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return;
    fprintf(stderr, "fds %s:\n", when);
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.' || atoi(e->d_name) == dirfd(d))
            continue;
        char path[300], target[256];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        target[k < 0 ? 0 : k] = '\0';
        fprintf(stderr, "  %s -> %s\n", e->d_name, target);
    }
    closedir(d);
}

/* The address of slot slot's worker in a cluster with the default system
 * and host names ("procmesh", "worker"): port 1 + slot; incarnation inc
 * (0: whichever is current). */
static inline pm_address pm_test_slot_addr(unsigned slot, uint64_t inc)
{
    pm_address a;
    memset(&a, 0, sizeof(a));
    strcpy(a.system, "procmesh");
    strcpy(a.host, "worker");
    a.port = (uint16_t)(1 + slot);
    a.incarnation = inc;
    return a;
}

/* A cluster's options as the process-level tests start from: workers,
 * the two callbacks (arg NULL), quick restarts (backoff 10 to 50 ms), a 2 s
 * stop timeout and 256 KiB rings. The caller adds what its tests need. */
static inline pm_options *pm_test_quick_options(int workers,
                                                void (*on_event)(pm_cluster *, const pm_event *, void *),
                                                void (*on_message)(pm_cluster *, const pm_message *, void *))
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    pm_options_set_workers(o, workers);
    pm_options_set_on_message(o, on_message, NULL);
    pm_options_set_on_event(o, on_event, NULL);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 50);
    pm_options_set_stop_timeout_ms(o, 2000);
    pm_options_set_ring_size(o, 256 * 1024);
    return o;
}

/* A cluster spawned with o (the spawn must succeed). */
static inline pm_cluster *pm_test_spawn(const pm_options *o)
{
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    return c;
}

/* The end of a test's cluster: terminated (every worker ended on the
 * SIGTERM: 0), its options freed. */
static inline void pm_test_finish(pm_cluster *c, pm_options *o)
{
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}

/* Forks a supervisor process (pm_test_fork: it dies with the test) that
 * spawns a cluster with o, sends back the worker pids of its first n slots
 * and runs the cluster until killed (exit 1: the spawn failed). Returns the
 * supervisor's pid, the workers' in pids[0..n-1]. The caller still owns o. */
static inline pid_t pm_test_fork_supervisor(pm_options *o, pid_t *pids, unsigned n)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t sup = pm_test_fork();
    ck_assert_int_ge(sup, 0);
    if (sup == 0) {
        close(p[0]);
        pm_cluster *c = NULL;
        if (pm_cluster_spawn(o, &c) != 0)
            _exit(1);
        for (unsigned i = 0; i < n; i++) {
            pm_slot_info si;
            pm_cluster_slot_info(c, i, &si);
            if (write(p[1], &si.pid, sizeof(si.pid)) != sizeof(si.pid))
                _exit(2);
        }
        for (;;)
            pm_cluster_run(c, -1);
    }
    close(p[1]);
    for (unsigned i = 0; i < n; i++)
        ck_assert_int_eq(read(p[0], &pids[i], sizeof(pids[i])), (ssize_t)sizeof(pids[i]));
    close(p[0]);
    return sup;
}

/* A worker's report to main: '#' and the formatted text (the '#' tells a
 * test's report from the other traffic main gets), at most 199 bytes. */
static inline void pm_test_say(pm_node *n, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static inline void pm_test_say(pm_node *n, const char *fmt, ...)
{
    char buf[200];
    buf[0] = '#';
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(buf + 1, sizeof(buf) - 1, fmt, ap);
    va_end(ap);
    if (len > (int)sizeof(buf) - 2)
        len = (int)sizeof(buf) - 2;
    pm_address main_addr = {.system = "procmesh", .host = "main"};
    pm_node_send(n, &main_addr, buf, (size_t)len + 1);
}

/* Main's side of pm_test_say: a '#' text shorter than 256 bytes from the
 * worker of slot s (port s + 1, s < nslots) is copied into last[s], NUL-
 * terminated. Returns s, or -1 (nothing copied) for any other message. */
static inline int pm_test_keep_said(char (*last)[256], unsigned nslots, const pm_message *m)
{
    if (m->len == 0 || m->len >= 256 || ((const char *)m->data)[0] != '#')
        return -1;
    unsigned slot = (unsigned)(m->from.port - 1);
    if (slot >= nslots)
        return -1;
    memcpy(last[slot], m->data, m->len);
    last[slot][m->len] = '\0';
    return (int)slot;
}

/* ---------------------------------------------------------------- two supervisors */

/* One host of a two-supervisor test: `workers` workers running boot in
 * system "t" on host `host`, ports from 10, secret added unless NULL, the
 * given peer timeout. The caller adds what its tests need. */
static inline pm_options *pm_test_host_options(const char *host, int workers, const unsigned char *secret,
                                               int peer_timeout_ms, int (*boot)(pm_node *, void *))
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, workers), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, host), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    if (secret != NULL)
        ck_assert_int_eq(pm_options_add_secret(o, secret), 0);
    ck_assert_int_eq(pm_options_set_peer_timeout_ms(o, peer_timeout_ms), 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot, NULL), 0);
    return o;
}

/* A worker that answers every request until it is asked to stop: with the
 * NUL-terminated text arg, or (arg NULL) with the request's own payload. */
static inline int pm_test_answer_worker(pm_node *n, void *arg)
{
    const char *text = arg;
    pm_node_ready(n);
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && m.kind == PM_MSG_REQUEST)
            pm_node_reply(n, &m, text != NULL ? text : m.data, text != NULL ? strlen(text) : m.len);
    }
}

/* A worker that becomes ready and receives (and drops) everything until it
 * is asked to stop. */
static inline int pm_test_idle_worker(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

/* The peer links' ups and downs a cluster reported: an on_event that
 * counts them into the struct pm_test_peer_events its arg points to. */
struct pm_test_peer_events {
    unsigned ups, downs, refused;
};

static inline void pm_test_count_peer_events(pm_cluster *c, const pm_event *e, void *arg)
{
    struct pm_test_peer_events *p = arg;
    (void)c;
    if (e->type == PM_EVENT_PEER_UP)
        p->ups++;
    if (e->type == PM_EVENT_PEER_DOWN)
        p->downs++;
    if (e->type == PM_EVENT_PEER_REFUSED)
        p->refused++;
}

/* In a forked host (pm_test_fork: it dies with the test): listens for
 * peers on 127.0.0.1:listen_port and dials 127.0.0.1:dial_port (each only
 * if > 0), spawns the cluster and runs it until killed. Exits 3 if a step
 * fails, which the other host sees as a peer that never comes up. */
static inline __attribute__((noreturn)) void pm_test_serve_host(pm_options *o, int listen_port, int dial_port)
{
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", listen_port);
    if (listen_port > 0 && pm_options_set_peer_listen(o, addr) < 0)
        _exit(3);
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", dial_port);
    if (dial_port > 0 && pm_options_add_peer(o, addr) < 0)
        _exit(3);
    pm_cluster *c = NULL;
    if (pm_cluster_spawn(o, &c) < 0)
        _exit(3);
    for (;;)
        pm_cluster_run(c, -1);
}

/* A worker's report to host a's supervisor ("t@a:0": system "t" as
 * pm_test_host_options names it), sent once. */
static inline void pm_test_report_to_a(pm_node *n, const char *text)
{
    pm_address main_a;
    if (pm_address_parse("t@a:0", &main_a) == 0)
        pm_node_send(n, &main_a, text, strlen(text));
}

/* The end of a two-supervisor test: the forked host b (pm_test_serve_host)
 * is killed and reaped, the test's own cluster a terminated. */
static inline void pm_test_end_hosts(pm_cluster *a, pid_t b)
{
    kill(b, SIGKILL);
    pm_test_reap(b, 5000);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}

/* A worker's request to a worker behind a peer supervisor, asked again
 * every 50 ms while the peer link is not up yet (-EHOSTUNREACH: the
 * supervisor still dials) or the far worker is not ready (-EHOSTDOWN: its
 * supervisor answers for a slot still starting); at most `tries` asks
 * (0: until another answer). Returns the last answer. */
static inline int pm_test_request_linked(pm_node *n, const pm_address *to, const void *data, size_t len,
                                         int timeout_ms, pm_message *r, int tries)
{
    int rc;
    for (int i = 0;; i++) {
        rc = pm_node_request(n, to, data, len, timeout_ms, r);
        if (rc != -EHOSTUNREACH && rc != -EHOSTDOWN)
            return rc;
        if (tries > 0 && i + 1 >= tries)
            return rc;
        usleep(50 * 1000);
    }
}

/* Skip the whole program (exit 77) with the reason on stderr. */
static inline void pm_test_skip(const char *why)
{
    fprintf(stderr, "SKIP: %s\n", why);
    exit(77);
}

static inline int pm_test_main(Suite *s)
{
    SRunner *sr = srunner_create(s);
    /* Fork mode unless CK_FORK=no (a debugger's run): Check reads it. */
    srunner_set_fork_status(sr, CK_FORK_GETENV);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    return failed == 0 ? EXIT_SUCCESS : EXIT_FAILURE;
}

#endif /* PM_TEST_HELPERS_H */
