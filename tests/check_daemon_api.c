/* SPDX-License-Identifier: MIT */
/* check_daemon_api.c - what procmesh(1) documents and check_daemon does not cover, on the real binary. */
/*
 * Each test starts the real procmesh with real workers: the words of a
 * failed first start, /readyz below --min-ready and during a drain, the
 * values of /metrics samples, --log-level, --init-data, --workers auto under
 * an affinity mask and a cgroup cpu.max, exit 0 once every slot ended
 * cleanly, the child subreaper, `procmesh version` and a TCP --listen.
 * Every process a test starts dies with it (PR_SET_PDEATHSIG), and every
 * wait is for a condition, bounded, failing with what it waited for. The
 * helpers are copies of check_daemon.c's (that program grows elsewhere).
 */
#include "helpers.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "supervisor/options.h"
#include "procmesh.h"
#include "proclog.h"

#ifndef PM_DAEMON_BIN
#error "PM_DAEMON_BIN must name the procmesh binary"
#endif

/* ---------------------------------------------------------------- processes */

static proc start_full(char *const argv[], char *const envp[], int capture, proc_pre_exec pre,
                       void *arg)
{
    return proc_start(PM_DAEMON_BIN, argv, capture, &(proc_how){.envp = envp, .pre = pre, .arg = arg});
}

static proc start(char *const argv[], char *const envp[])
{
    return start_full(argv, envp, STDERR_FILENO, NULL, NULL);
}

static char *base_env[] = {"PATH=/usr/bin:/bin", NULL};

/* The command line of pid with its NULs as spaces ("" when gone). */
static void cmdline_of(int pid, char *buf, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/cmdline", pid);
    buf[0] = '\0';
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return;
    ssize_t k = read(fd, buf, size - 1);
    close(fd);
    if (k <= 0)
        return;
    for (ssize_t i = 0; i < k; i++)
        if (buf[i] == '\0')
            buf[i] = ' ';
    buf[k] = '\0';
}

/* ---------------------------------------------------------------- HTTP */

/* Waits until the sample name reads want. */
static void wait_metric(int port, const char *name, long long want, int timeout_ms)
{
    uint64_t end = pm_test_ms() + (uint64_t)timeout_ms;
    long long v;
    while ((v = http_metric(port, name)) != want && pm_test_ms() < end)
        usleep(20000);
    ck_assert_msg(v == want, "waited %d ms for %s to read %lld; it reads %lld", timeout_ms, name,
                  want, v);
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_start_failed_in_words)
{
    /* A worker that ends during its handshake (here: it never joins, it
     * exits 1) makes the first start fail: exit 4, and the start_failed line
     * says so in words, not "No child processes". */
    static char out[16384];
    char *a[] = {"procmesh", "run", "--workers", "1", "--max-restarts", "0", "--", "sh", "-c",
                 "exit 1", NULL};
    proc p = start(a, base_env);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 4, "exit %d, log:\n%s", rc, out);
    ck_assert_msg(strstr(out, "event=start_failed error=\"worker exited with code 1 before it was "
                              "ready; it never opened its link") != NULL,
                  "no start_failed line in words; log:\n%s", out);
    /* It never joined: the line names the readiness modes that fit. */
    ck_assert_msg(strstr(out, "--ready exec or --ready notify") != NULL, "no hint; log:\n%s", out);
    ck_assert_ptr_null(strstr(out, "No child processes"));
    /* The stopped line carries the same words. */
    ck_assert_ptr_nonnull(strstr(out, "event=stopped slot=0 reason=spawn-aborted detail="));
    /* A failed exec still says which errno, in words. */
    char *b[] = {"procmesh", "run", "--workers", "1", "--", "/nonexistent/worker", NULL};
    p = start(b, base_env);
    rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 4, "exit %d, log:\n%s", rc, out);
    ck_assert_msg(strstr(out, "event=start_failed error=\"exec of the worker failed: No such file "
                              "or directory\"") != NULL,
                  "no start_failed line for the missing program; log:\n%s", out);
}
END_TEST

START_TEST(test_readyz_min_ready_and_metric_values)
{
    /* Two slots, --min-ready 2: one worker killed (its restart 10 min away)
     * leaves one ready, below the minimum: /readyz 503 "not ready", and the
     * samples of /metrics say exactly what happened. With --min-ready 1 the
     * same loss keeps /readyz at 200, and with --min-ready 0 too (not "all
     * slots"); 0 counts as 1: the second worker killed as well, 503. */
    static char body[65536], out[65536];
    for (int min = 2; min >= 0; min--) {
        int port = pm_test_free_port();
        char health[64], mr[8];
        http_addr(port, health, sizeof(health));
        snprintf(mr, sizeof(mr), "%d", min);
        char *a[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--min-ready", mr,
                     "--backoff-min", "600000", "--backoff-max", "600000", "--backoff-jitter", "0",
                     "--health", health, "--", "sleep", "100", NULL};
        proc p = start(a, base_env);
        http_wait(port, "/readyz", 200, 20000);
        ck_assert_int_eq(http_metric(port, "procmesh_workers"), 2);
        ck_assert_int_eq(http_metric(port, "procmesh_workers_ready"), 2);
        ck_assert_int_eq(http_metric(port, "procmesh_exits_total{cause=\"signal\"}"), 0);
        int kids[4];
        ck_assert_int_eq(proc_children(p.pid, kids, 4), 2);
        /* Which slot it was, from the started lines. */
        char needle[64];
        snprintf(needle, sizeof(needle), " pid=%d ", kids[0]);
        const char *line = strstr(p.log, needle);
        for (int i = 0; line == NULL && i < 100; i++) {
            proc_read(&p, 50);
            line = strstr(p.log, needle);
        }
        ck_assert_msg(line != NULL, "no log line names worker %d; log:\n%s", kids[0], p.log);
        const char *bol = line;
        while (bol > p.log && bol[-1] != '\n')
            bol--;
        const char *sl = strstr(bol, "slot=");
        ck_assert_ptr_nonnull(sl);
        int slot = atoi(sl + 5);
        kill(kids[0], SIGKILL);
        wait_metric(port, "procmesh_workers_ready", 1, 20000);
        if (min == 2) {
            http_wait(port, "/readyz", 503, 20000);
            ck_assert_int_eq(http_get(port, "/readyz", body, sizeof(body)), 503);
            ck_assert_str_eq(body, "not ready\n");
        } else {
            ck_assert_int_eq(http_get(port, "/readyz", body, sizeof(body)), 200);
            ck_assert_str_eq(body, "ready\n");
        }
        /* Still alive and well: /healthz is about starting workers. */
        ck_assert_int_eq(http_get(port, "/healthz", body, sizeof(body)), 200);
        char name[96];
        snprintf(name, sizeof(name), "procmesh_slot_ready{slot=\"%d\"}", slot);
        ck_assert_int_eq(http_metric(port, name), 0);
        snprintf(name, sizeof(name), "procmesh_slot_ready{slot=\"%d\"}", 1 - slot);
        ck_assert_int_eq(http_metric(port, name), 1);
        ck_assert_int_eq(http_metric(port, "procmesh_workers"), 2);
        ck_assert_int_eq(http_metric(port, "procmesh_exits_total{cause=\"signal\"}"), 1);
        ck_assert_int_eq(http_metric(port, "procmesh_exits_total{cause=\"failure\"}"), 0);
        ck_assert_int_eq(http_metric(port, "procmesh_exits_total{cause=\"clean\"}"), 0);
        ck_assert_int_eq(http_metric(port, "procmesh_orphans_reaped_total"), 0);
        ck_assert_int_eq(http_metric(port, "procmesh_frames_relayed_total"), 0);
        /* A restart counts once it is charged to the budget, that is once
         * scheduled (here 10 s away); the other slot has none. */
        snprintf(name, sizeof(name), "procmesh_slot_restarts_total{slot=\"%d\"}", slot);
        ck_assert_int_eq(http_metric(port, name), 1);
        snprintf(name, sizeof(name), "procmesh_slot_restarts_total{slot=\"%d\"}", 1 - slot);
        ck_assert_int_eq(http_metric(port, name), 0);
        if (min == 0) {
            kill(kids[1], SIGKILL);
            http_wait(port, "/readyz", 503, 20000);
            ck_assert_int_eq(http_metric(port, "procmesh_workers_ready"), 0);
        }
        kill(p.pid, SIGTERM);
        int rc = proc_finish(&p, out, sizeof(out), 20000);
        ck_assert_msg(rc == 0, "--min-ready %d: exit %d, log:\n%s", min, rc, out);
        ck_assert_ptr_nonnull(strstr(out, "signal=SIGKILL"));
    }
}
END_TEST

START_TEST(test_readyz_during_drain)
{
    /* Once the drain begins, readiness is false: the endpoint closes before
     * the workers are stopped (procmesh.c, terminate()), so a probe during
     * the drain is refused, never 200. The worker ignores SIGTERM and the
     * stop timeout is long, so the drain lasts until the second SIGTERM. */
    static char out[65536];
    int port = pm_test_free_port();
    char health[64];
    http_addr(port, health, sizeof(health));
    char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--stop-timeout",
                 "30000", "--health", health, "--", "sh", "-c",
                 "trap '' TERM; echo term-ignored; exec sleep 100", NULL};
    proc p = start(a, base_env);
    http_wait(port, "/readyz", 200, 20000);
    /* Ready in exec mode means the exec succeeded, not that sh has run its
     * trap yet: a SIGTERM before it ends the drain at once. The worker's
     * output is captured into the log (event=output) once it has. */
    proc_wait_log(&p, "term-ignored", 1, 20000);
    kill(p.pid, SIGTERM);
    proc_wait_log(&p, "event=drain_begin", 1, 20000);
    /* The drain is under way (no drain_end yet): not ready. */
    char body[4096];
    for (int i = 0; i < 5; i++) {
        int code = http_get(port, "/readyz", body, sizeof(body));
        ck_assert_msg(code != 200, "/readyz answered 200 during the drain");
        usleep(20000);
    }
    proc_read(&p, 0);
    ck_assert_msg(strstr(p.log, "event=drain_end") == NULL,
                  "the drain ended before the probes; log:\n%s", p.log);
    kill(p.pid, SIGTERM);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 1, "exit %d (want 1: the worker was killed), log:\n%s", rc, out);
}
END_TEST

START_TEST(test_log_level_filters)
{
    /* A worker that crashes at once, budget 1: started/ready (info), exited
     * by SIGSEGV (warn), retired and exit (error). Each level writes its
     * own and the more severe lines, nothing below. */
    static const struct {
        const char *level;
        int info, warn, error;
    } cases[] = {
        {"debug", 1, 1, 1}, {"info", 1, 1, 1}, {"warn", 0, 1, 1}, {"error", 0, 0, 1}};
    static char out[65536];
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--max-restarts", "1",
                     "--backoff-min", "10", "--backoff-max", "20", "--log-level",
                     (char *)cases[i].level, "--", "sh", "-c", "sleep 0.1; kill -SEGV $$", NULL};
        proc p = start(a, base_env);
        int rc = proc_finish(&p, out, sizeof(out), 20000);
        ck_assert_msg(rc == 3, "--log-level %s: exit %d, log:\n%s", cases[i].level, rc, out);
        ck_assert_msg((strstr(out, "level=info") != NULL) == cases[i].info,
                      "--log-level %s: info lines %s; log:\n%s", cases[i].level,
                      cases[i].info ? "missing" : "written", out);
        ck_assert_msg((strstr(out, "event=started") != NULL) == cases[i].info,
                      "--log-level %s: started line; log:\n%s", cases[i].level, out);
        ck_assert_msg((strstr(out, "level=warn event=exited") != NULL) == cases[i].warn,
                      "--log-level %s: warn exited line; log:\n%s", cases[i].level, out);
        ck_assert_msg((strstr(out, "level=error event=retired") != NULL) == cases[i].error,
                      "--log-level %s: error retired line; log:\n%s", cases[i].level, out);
    }
}
END_TEST

START_TEST(test_init_data_and_clean_exit_0)
{
    /* --init-data reaches every mesh worker; pm-test-worker `init TEXT`
     * exits 0 when it got TEXT, else 9. Workers that all exit 0 end their
     * slots (on-failure), and procmesh exits 0 with "all slots stopped". */
    static char out[65536];
    char *a[] = {"procmesh", "run", "--workers", "2", "--init-data", "hello mesh", "--",
                 PM_TEST_WORKER, "init", "hello mesh", NULL};
    proc p = start(a, base_env);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 0, "exit %d, log:\n%s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "event=exited slot=0"));
    ck_assert_ptr_nonnull(strstr(out, "event=exited slot=1"));
    ck_assert_ptr_null(strstr(out, "exit_code=9"));
    ck_assert_ptr_nonnull(strstr(out, "event=exit reason=\"all slots stopped\""));
    /* From a file (@FILE), bytes as they are; a mismatch is seen (exit 9,
     * a failure: retired after a budget of 0, exit 3). */
    char dir[] = "/tmp/pm-init-XXXXXX", file[96], arg[100];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/data", dir);
    FILE *f = fopen(file, "w");
    ck_assert_ptr_nonnull(f);
    fputs("from a file", f);
    fclose(f);
    snprintf(arg, sizeof(arg), "@%s", file);
    char *b[] = {"procmesh", "run", "--workers", "1", "--init-data", arg, "--", PM_TEST_WORKER,
                 "init", "from a file", NULL};
    p = start(b, base_env);
    rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 0, "@FILE: exit %d, log:\n%s", rc, out);
    char *c[] = {"procmesh", "run", "--workers", "1", "--max-restarts", "0", "--init-data", arg,
                 "--", PM_TEST_WORKER, "init", "something else", NULL};
    p = start(c, base_env);
    rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 3, "mismatch: exit %d, log:\n%s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "exit_code=9"));
    unlink(file);
    rmdir(dir);
}
END_TEST

/* sched_setaffinity to the first CPU of the test's own mask. */
static int one_cpu(void *arg)
{
    (void)arg;
    cpu_set_t set, one;
    if (sched_getaffinity(0, sizeof(set), &set) < 0)
        return -errno;
    CPU_ZERO(&one);
    for (int i = 0; i < CPU_SETSIZE; i++) {
        if (CPU_ISSET(i, &set)) {
            CPU_SET(i, &one);
            break;
        }
    }
    return sched_setaffinity(0, sizeof(one), &one) < 0 ? -errno : 0;
}

/* The number of slots procmesh --workers auto made, from /metrics. */
static long long auto_workers(proc_pre_exec pre, void *arg)
{
    static char out[65536];
    int port = pm_test_free_port();
    char health[64];
    http_addr(port, health, sizeof(health));
    char *a[] = {"procmesh", "run", "--workers", "auto", "--ready", "exec", "--health", health, "--",
                 "sleep", "100", NULL};
    proc p = start_full(a, base_env, STDERR_FILENO, pre, arg);
    http_wait(port, "/readyz", 200, 20000);
    long long n = http_metric(port, "procmesh_workers");
    kill(p.pid, SIGTERM);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 0, "exit %d, log:\n%s", rc, out);
    return n;
}

START_TEST(test_workers_auto_affinity)
{
    /* --workers auto counts the CPUs procmesh may use: all of the test's
     * without a mask, one under a one-CPU mask (taskset -c N). */
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    long long mine = CPU_COUNT(&set);
    if (mine > PM_MAX_WORKERS)
        mine = PM_MAX_WORKERS;
    int quota = 0; /* a cgroup cpu.max on us lowers the count too */
    long long n = auto_workers(NULL, NULL);
    ck_assert_msg(n == mine || (n < mine && (quota = 1)),
                  "--workers auto made %lld slots; this process may use %lld CPUs", n, mine);
    if (quota)
        fprintf(stderr, "note: a cgroup cpu.max holds auto to %lld of %lld CPUs\n", n, mine);
    ck_assert_int_eq(auto_workers(one_cpu, NULL), 1);
}
END_TEST

/* The cgroup v2 directory a test may create a child cgroup with the cpu
 * controller under, or "" (no v2 mount with cpu enabled for children). */
static void cpu_cgroup_parent(char *out, size_t size)
{
    out[0] = '\0';
    static const char *const roots[] = {"/sys/fs/cgroup", "/sys/fs/cgroup/unified"};
    for (size_t i = 0; i < ARRAY_LEN(roots); i++) {
        char path[256], line[512] = "";
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", roots[i]);
        FILE *f = fopen(path, "r");
        if (f == NULL)
            continue;
        if (fgets(line, sizeof(line), f) == NULL)
            line[0] = '\0';
        fclose(f);
        for (char *t = strtok(line, " \n"); t != NULL; t = strtok(NULL, " \n")) {
            if (strcmp(t, "cpu") == 0) {
                snprintf(out, size, "%s", roots[i]);
                return;
            }
        }
    }
}

/* Writes text into the file at path: 0 or -errno. */
static int write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0)
        return -errno;
    ssize_t k = write(fd, text, strlen(text));
    int err = k < 0 ? -errno : 0;
    close(fd);
    return err;
}

/* Moves this (child) process into the cgroup directory arg. */
static int join_cgroup(void *arg)
{
    char path[300], pid[24];
    snprintf(path, sizeof(path), "%s/cgroup.procs", (const char *)arg);
    snprintf(pid, sizeof(pid), "%d", (int)getpid());
    return write_file(path, pid);
}

START_TEST(test_workers_auto_cpu_max)
{
    /* The parser the library applies to cgroup v2 cpu.max, against a
     * scratch file written the way the kernel shows it: QUOTA PERIOD
     * rounded up to whole CPUs, "max" no limit (0), anything else refused. */
    static const struct {
        const char *text;
        int want;
    } cases[] = {{"max 100000\n", 0},         {"150000 100000\n", 2}, {"100000 100000\n", 1},
                 {"50000 100000\n", 1},       {"400000 100000\n", 4}, {"1 1000000\n", 1},
                 {"max 0\n", -EINVAL},        {"0 100000\n", -EINVAL}, {"-5 100000\n", -EINVAL},
                 {"100000\n", -EINVAL},       {"abc 100000\n", -EINVAL},
                 {"100000 100000 7\n", -EINVAL}, {"\n", -EINVAL}};
    char dir[] = "/tmp/pm-cpumax-XXXXXX", file[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(file, sizeof(file), "%s/cpu.max", dir);
    for (size_t i = 0; i < ARRAY_LEN(cases); i++) {
        FILE *f = fopen(file, "w");
        ck_assert_ptr_nonnull(f);
        fputs(cases[i].text, f);
        fclose(f);
        char buf[128] = "";
        f = fopen(file, "r");
        ck_assert_ptr_nonnull(f);
        ck_assert_ptr_nonnull(fgets(buf, sizeof(buf), f));
        fclose(f);
        ck_assert_msg(pm__cpu_max_parse(buf) == cases[i].want, "cpu.max \"%.*s\": %d, want %d",
                      (int)strcspn(cases[i].text, "\n"), cases[i].text, pm__cpu_max_parse(buf),
                      cases[i].want);
    }
    unlink(file);
    rmdir(dir);

    /* The real thing where the host allows it: a child cgroup with cpu.max
     * "100000 100000" (one CPU) makes --workers auto start one slot. */
    char parent[256];
    cpu_cgroup_parent(parent, sizeof(parent));
    cpu_set_t set;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(set), &set), 0);
    if (parent[0] == '\0' || CPU_COUNT(&set) < 2) {
        fprintf(stderr, "note: real cpu.max not tested: %s\n",
                parent[0] == '\0' ? "no cgroup v2 tree with the cpu controller enabled"
                                  : "this process may use a single CPU anyway");
        return;
    }
    char cg[300], max[340];
    snprintf(cg, sizeof(cg), "%s/pm-test-cpumax-%d", parent, (int)getpid());
    if (mkdir(cg, 0755) < 0) {
        fprintf(stderr, "note: real cpu.max not tested: mkdir %s: %s\n", cg, strerror(errno));
        return;
    }
    snprintf(max, sizeof(max), "%s/cpu.max", cg);
    int rc = write_file(max, "100000 100000");
    long long n = -1;
    if (rc == 0)
        n = auto_workers(join_cgroup, cg);
    else
        fprintf(stderr, "note: real cpu.max not tested: write %s: %s\n", max, strerror(-rc));
    /* procmesh and its workers are gone (auto_workers reaped it): the
     * cgroup is empty and can go. */
    rmdir(cg);
    if (rc == 0)
        ck_assert_msg(n == 1, "--workers auto under cpu.max \"100000 100000\": %lld slots", n);
}
END_TEST

START_TEST(test_subreaper_not_pid1)
{
    /* Not PID 1, procmesh makes itself a child subreaper: a process its
     * worker leaves behind (a subshell's background job) is re-parented to
     * procmesh, reaped when it dies and counted. */
    static char out[65536];
    ck_assert_int_ne(getpid(), 1);
    int port = pm_test_free_port();
    char health[64];
    http_addr(port, health, sizeof(health));
    char *a[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--health", health, "--",
                 "sh", "-c", "(sleep 101 &); exec sleep 100", NULL};
    proc p = start(a, base_env);
    http_wait(port, "/readyz", 200, 20000);
    /* The orphan appears among procmesh's children once its subshell ended. */
    int orphan = 0;
    uint64_t end = pm_test_ms() + 20000;
    while (orphan == 0 && pm_test_ms() < end) {
        int kids[8];
        int n = proc_children(p.pid, kids, 8);
        for (int i = 0; i < n && i < 8; i++) {
            char cmd[256];
            cmdline_of(kids[i], cmd, sizeof(cmd));
            if (strcmp(cmd, "sleep 101 ") == 0)
                orphan = kids[i];
        }
        if (orphan == 0)
            usleep(20000);
    }
    ck_assert_msg(orphan != 0, "waited 20 s for the orphan `sleep 101` to be procmesh's child");
    ck_assert_int_eq(http_metric(port, "procmesh_orphans_reaped_total"), 0);
    kill(orphan, SIGKILL);
    wait_metric(port, "procmesh_orphans_reaped_total", 1, 20000);
    /* Reaped, so no zombie of it is left; the worker was not disturbed. */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d", orphan);
    struct stat st;
    ck_assert_msg(stat(path, &st) < 0, "the orphan %d is still listed (a zombie)", orphan);
    ck_assert_int_eq(http_metric(port, "procmesh_workers_ready"), 1);
    kill(p.pid, SIGTERM);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 0, "exit %d, log:\n%s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "orphans_reaped=1"));
}
END_TEST

START_TEST(test_version)
{
    /* `procmesh version` and `--version`: "procmesh X.Y.Z" on stdout, the
     * library's version, exit 0. */
    static char out[4096];
    char want[128];
    snprintf(want, sizeof(want), "procmesh %s\n", pm_version_string());
    ck_assert_int_gt(strlen(pm_version_string()), 0);
    char *a[] = {"procmesh", "version", NULL};
    proc p = start_full(a, base_env, STDOUT_FILENO, NULL, NULL);
    ck_assert_int_eq(proc_finish(&p, out, sizeof(out), 10000), 0);
    ck_assert_str_eq(out, want);
    char *b[] = {"procmesh", "--version", NULL};
    p = start_full(b, base_env, STDOUT_FILENO, NULL, NULL);
    ck_assert_int_eq(proc_finish(&p, out, sizeof(out), 10000), 0);
    ck_assert_str_eq(out, want);
    /* X.Y.Z: three numbers. */
    unsigned x, y, z;
    ck_assert_int_eq(sscanf(pm_version_string(), "%u.%u.%u", &x, &y, &z), 3);
}
END_TEST

/* Connects to port, sends line, reads the answer: its length or -1. */
static int tcp_ask(int port, const char *line, char *reply, size_t size)
{
    int fd = http_connect(port);
    if (fd < 0)
        return -1;
    ssize_t w = write(fd, line, strlen(line));
    size_t k = w > 0 ? pm_test_read_all(fd, reply, size) : 0;
    close(fd);
    return k > 0 ? (int)k : -1;
}

START_TEST(test_listen_tcp)
{
    /* --listen NAME=tcp:HOST:PORT: procmesh binds it and hands it to every
     * worker as fd 3 (LISTEN_FDS=1, LISTEN_PID its own pid: pm-test-worker
     * `serve` checks both); each connection is answered by one of the
     * workers, and a crash never closes the socket. */
    static char out[65536];
    int port = pm_test_free_port(), hport = pm_test_free_port();
    char listen[64], health[64];
    snprintf(listen, sizeof(listen), "web=tcp:127.0.0.1:%d", port);
    http_addr(hport, health, sizeof(health));
    char *a[] = {"procmesh", "run", "--workers", "2", "--ready", "exec", "--backoff-min", "50",
                 "--backoff-max", "100", "--listen", listen, "--health", health, "--",
                 PM_TEST_WORKER, "serve", NULL};
    proc p = start(a, base_env);
    http_wait(hport, "/readyz", 200, 20000);
    int kids[4];
    ck_assert_int_eq(proc_children(p.pid, kids, 4), 2);
    char reply[128];
    for (int i = 0; i < 10; i++) {
        int k = tcp_ask(port, "hi\n", reply, sizeof(reply));
        ck_assert_msg(k > 0, "no answer on tcp port %d", port);
        int pid = 0;
        ck_assert_int_eq(sscanf(reply, "pong %d", &pid), 1);
        ck_assert_msg(pid == kids[0] || pid == kids[1], "answered by %d, not a worker (%d, %d)",
                      pid, kids[0], kids[1]);
    }
    ck_assert_int_eq(tcp_ask(port, "CRASH\n", reply, sizeof(reply)), -1);
    int k = tcp_ask(port, "after\n", reply, sizeof(reply));
    ck_assert_msg(k > 0, "the socket did not survive the crash");
    http_wait(hport, "/readyz", 200, 20000);
    kill(p.pid, SIGTERM);
    int rc = proc_finish(&p, out, sizeof(out), 20000);
    ck_assert_msg(rc == 0, "exit %d, log:\n%s", rc, out);
    ck_assert_ptr_nonnull(strstr(out, "signal=SIGSEGV"));
}
END_TEST

START_TEST(test_peers_in_status_and_metrics)
{
    /* Two daemons linked on loopback (b dials a): /status, procmesh status
     * and /metrics show the peer (state, host, incarnation, RTT from the
     * heartbeat echo, frames and bytes) and the failures by reason; the
     * log says peer_up, and peer_down with its reason when b goes. */
    char dir[] = "/tmp/pm-peers-XXXXXX", secret[96];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(secret, sizeof(secret), "%s/secret", dir);
    int sfd = open(secret, O_WRONLY | O_CREAT | O_EXCL | O_CLOEXEC, 0600);
    ck_assert_int_ge(sfd, 0);
    const char hex[] = "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20\n";
    ck_assert_int_eq(write(sfd, hex, sizeof(hex) - 1), (ssize_t)(sizeof(hex) - 1));
    close(sfd);
    int pa = pm_test_free_port(), ha = pm_test_free_port(), hb = pm_test_free_port();
    char listen_a[64], peer_b[64], health_a[64], health_b[64];
    snprintf(listen_a, sizeof(listen_a), "127.0.0.1:%d", pa);
    snprintf(peer_b, sizeof(peer_b), "127.0.0.1:%d", pa);
    http_addr(ha, health_a, sizeof(health_a));
    http_addr(hb, health_b, sizeof(health_b));
    char *aa[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--hostname", "a",
                  "--base-port", "10", "--secret-file", secret, "--peer-listen", listen_a,
                  "--peer-timeout", "1000", "--health", health_a, "--", "sleep", "100", NULL};
    char *ab[] = {"procmesh", "run", "--workers", "1", "--ready", "exec", "--hostname", "b",
                  "--base-port", "10", "--secret-file", secret, "--peers", peer_b,
                  "--peer-timeout", "1000", "--health", health_b, "--", "sleep", "100", NULL};
    proc a = start(aa, base_env);
    http_wait(ha, "/readyz", 200, 20000);
    proc b = start(ab, base_env);
    wait_metric(ha, "procmesh_peer_links_up", 1, 30000);
    wait_metric(hb, "procmesh_peer_links_up", 1, 30000);
    proc_wait_log(&a, "peer_up", 1, 10000);
    ck_assert_ptr_nonnull(strstr(a.log, "host=b"));
    /* The RTT comes with the first echo (every third of the peer timeout). */
    static char body[65536];
    uint64_t end = pm_test_ms() + 20000;
    int code;
    while (((code = http_get(ha, "/status", body, sizeof(body))) != 200 || strstr(body, "\"rtt_us\":-1") != NULL ||
            strstr(body, "\"rtt_us\":") == NULL) &&
           pm_test_ms() < end)
        usleep(50000);
    ck_assert_msg(code == 200 && strstr(body, "\"rtt_us\":-1") == NULL, "no RTT in /status: %s", body);
    ck_assert_msg(strstr(body, "\"peer_host\":\"b\",\"peer_state\":\"up\",\"initiator\":0") != NULL,
                  "/status: %s", body);
    ck_assert_ptr_nonnull(strstr(body, "\"peer_incarnation\":"));
    ck_assert_ptr_null(strstr(body, "\"peer_incarnation\":\"0\""));
    ck_assert_ptr_nonnull(strstr(body, "\"peer_failures\":{\"preamble\":0,"));
    ck_assert_ptr_nonnull(strstr(body, "\"rate_limited\":0"));
    ck_assert_ptr_nonnull(strstr(body, "\"records_in\":0,\"records_out\":"));
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_failures_total{reason=\"key_id\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_links_ended_total{reason=\"key_id\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_frames_total{host=\"b\",direction=\"in\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_bytes_total{host=\"b\",direction=\"out\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_records_total{host=\"b\",direction=\"in\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_frames_dropped_total{host=\"b\",reason=\"forged\"}"), 0);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_frames_dropped_total{host=\"b\",reason=\"malformed\"}"), 0);
    ck_assert_int_ge(http_metric(ha, "procmesh_peer_rtt_seconds{host=\"b\"}"), 0);
    /* procmesh status: the peers table under the slots. */
    char *sa[] = {"procmesh", "status", "--health", health_a, NULL};
    proc st = start_full(sa, base_env, STDOUT_FILENO, NULL, NULL);
    static char table[8192];
    ck_assert_int_eq(proc_finish(&st, table, sizeof(table), 10000), 0);
    ck_assert_msg(strstr(table, "PEER             STATE") != NULL, "procmesh status:\n%s", table);
    ck_assert_msg(strstr(table, "RECORDS IN/OUT") != NULL, "procmesh status:\n%s", table);
    ck_assert_msg(strstr(table, "\nb                up ") != NULL, "procmesh status:\n%s", table);
    /* b goes: a logs peer_down with the reason (b's CLOSE: "closed", which
     * b's orderly end delivers: it reads until a's answering CLOSE before it
     * closes, so unread bytes never turn its end into a reset), and counts
     * it as an ended link, not as a failure. */
    static char out[65536];
    kill(b.pid, SIGTERM);
    ck_assert_int_eq(proc_finish(&b, out, sizeof(out), 20000), 0);
    proc_wait_log(&a, "peer_down", 1, 20000);
    ck_assert_msg(strstr(a.log, "reason=closed") != NULL, "peer_down without reason=closed:\n%s",
                  a.log);
    wait_metric(ha, "procmesh_peer_links_up", 0, 10000);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_links_ended_total{reason=\"closed\"}"), 1);
    /* Only up links have an RTT sample: none now. */
    static char rbody[65536];
    ck_assert_int_eq(http_get(ha, "/metrics", rbody, sizeof(rbody)), 200);
    ck_assert_msg(strstr(rbody, "\nprocmesh_peer_rtt_seconds{") == NULL, "an RTT of a link that is down:\n%s", rbody);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_links_ended_total{reason=\"truncated\"}"), 0);
    /* An orderly end is no failure: no such series. */
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_failures_total{reason=\"closed\"}"), -1);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_failures_total{reason=\"local\"}"), -1);
    ck_assert_int_eq(http_metric(ha, "procmesh_peer_failures_total{reason=\"truncated\"}"), 0);
    /* Every reason series names a reason (lowercase and '_'), each once;
     * the ended links list every reason, the failures all but the three
     * orderly ones. */
    static char mbody[65536];
    ck_assert_int_eq(http_get(ha, "/metrics", mbody, sizeof(mbody)), 200);
    static const char *const series[] = {"procmesh_peer_links_ended_total{reason=\"",
                                         "procmesh_peer_failures_total{reason=\""};
    int lines[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (const char *at = mbody; (at = strstr(at, series[k])) != NULL; at++) {
            if (at != mbody && at[-1] != '\n')
                continue; /* a HELP or TYPE line's mention */
            const char *r = at + strlen(series[k]), *q = r;
            while ((*q >= 'a' && *q <= 'z') || *q == '_')
                q++;
            ck_assert_msg(q > r && q[0] == '"' && q[1] == '}', "a reason series: %.60s", at);
            char dup[96];
            snprintf(dup, sizeof(dup), "\n%.*s\"}", (int)(q - at), at);
            ck_assert_msg(strstr(strstr(mbody, dup) + 1, dup) == NULL, "twice: %.60s", at);
            lines[k]++;
        }
    ck_assert_int_ge(lines[0], 10);
    ck_assert_int_eq(lines[1], lines[0] - 3);
    kill(a.pid, SIGTERM);
    ck_assert_int_eq(proc_finish(&a, out, sizeof(out), 20000), 0);
    unlink(secret);
    rmdir(dir);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("daemon_api");
    PM_ADD_TEST(s, test_start_failed_in_words, 60);
    PM_ADD_TEST(s, test_readyz_min_ready_and_metric_values, 90);
    PM_ADD_TEST(s, test_readyz_during_drain, 60);
    PM_ADD_TEST(s, test_log_level_filters, 90);
    PM_ADD_TEST(s, test_init_data_and_clean_exit_0, 60);
    PM_ADD_TEST(s, test_workers_auto_affinity, 60);
    PM_ADD_TEST(s, test_workers_auto_cpu_max, 60);
    PM_ADD_TEST(s, test_subreaper_not_pid1, 60);
    PM_ADD_TEST(s, test_version, 30);
    PM_ADD_TEST(s, test_listen_tcp, 60);
    PM_ADD_TEST(s, test_peers_in_status_and_metrics, 120);
    return pm_test_main(s);
}
