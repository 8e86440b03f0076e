/* SPDX-License-Identifier: MIT */
/*
 * check_spare.c - the next incarnation's channel, prepared ahead: taken by the
 * restart, fresh memory each time, invisible to every worker, and released
 * without a leak when the slot retires or the cluster stops with one
 * prepared. And the warm standby forked onto it (standby.c): taken by the
 * restart, in the cgroup of the incarnation it replaces, running the
 * bootstrap only then, reaped when it dies waiting, ended with the cluster
 * or the supervisor.
 */
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/stat.h>
#include <sys/wait.h>

#include "procmesh.h"
#include "internals.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif

/* ------------------------------------------------------------ what a process holds */

/* Mappings of procmesh's memfds (the channels), in /proc/self/maps. */
static int count_channel_maps(void)
{
    FILE *f = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    int n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strstr(line, "memfd:procmesh-slot") != NULL)
            n++;
    fclose(f);
    return n;
}

static unsigned long long ino_of(int fd)
{
    struct stat st;
    ck_assert_int_eq(fstat(fd, &st), 0);
    return (unsigned long long)st.st_ino;
}

static void kill_slot(pm_cluster *c, unsigned slot)
{
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, slot, &si), 0);
    ck_assert_int_gt(si.pid, 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0);
}

static pm_options *spare_opts(int workers)
{
    pm_options *o = opts(workers);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    return o;
}

/* ------------------------------------------------------------ tests */

START_TEST(test_spare_taken_by_restart)
{
    /* Once a worker is started its slot holds the next channel; the restart
     * takes exactly that one, and the one after it is prepared anew: three
     * different memfds, none shared between two incarnations. */
    pm_options *o = spare_opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_spare_memfd(c, 0) >= 0, 10000);
    unsigned long long first = pm_test_slot_memfd_ino(c, 0);
    unsigned long long spare = ino_of(pm_test_slot_spare_memfd(c, 0));
    ck_assert_msg(first != spare, "the spare is the running incarnation's memory");
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_uint_eq(find(PM_EVENT_READY, 0, 1)->inc, 2);
    ck_assert_msg(pm_test_slot_memfd_ino(c, 0) == spare,
                  "the replacement did not get the prepared link");
    ck_assert_int_ge(pm_test_slot_spare_memfd(c, 0), 0);
    unsigned long long next = ino_of(pm_test_slot_spare_memfd(c, 0));
    ck_assert_msg(next != spare && next != first, "a link was reused for another incarnation");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* The report pipe of boot_check_own: inherited by the fork-mode workers. */
static int report_fd = -1;
static int check_pipes;     /* captured output: no pipe but fds 1 and 2 and the test's */
static int test_fds[64], ntest_fds = -1; /* the test process's own fds (Check's, the report's):
                                           fork-mode workers inherit them; -1: not noted */

/* Records the fds this process holds (before a spawn). */
static void note_test_fds(void)
{
    ntest_fds = 0;
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d) && ntest_fds < (int)ARRAY_LEN(test_fds))
            test_fds[ntest_fds++] = atoi(e->d_name);
    closedir(d);
}

static int test_fd(int fd)
{
    for (int i = 0; i < ntest_fds; i++)
        if (test_fds[i] == fd)
            return 1;
    return 0;
}

/* Writes "S I ok\n", or "S I bad: what\n" when this worker holds an fd or
 * maps memory of procmesh that is not its own incarnation's channel. */
static int boot_check_own(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    if (pm_node_ready(n) < 0)
        return 50;
    unsigned slot = pm_node_slot(n);
    unsigned long long inc = (unsigned long long)pm_node_self(n)->incarnation;
    char own[64], bad[800] = "";
    snprintf(own, sizeof(own), "memfd:procmesh-slot%u-inc%llu ", slot, inc);
    FILE *f = fopen("/proc/self/maps", "r");
    char line[512];
    while (f != NULL && fgets(line, sizeof(line), f) != NULL) {
        const char *m = strstr(line, "memfd:procmesh-");
        if (m != NULL && strncmp(m, own, strlen(own)) != 0)
            snprintf(bad, sizeof(bad), "maps %.*s", (int)strcspn(m, "\n"), m);
    }
    if (f != NULL)
        fclose(f);
    else
        snprintf(bad, sizeof(bad), "cannot read its maps");
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    int sockets = 0;
    while (d != NULL && (e = readdir(d)) != NULL) {
        char path[300], target[300];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, target, sizeof(target) - 1);
        if (k <= 0)
            continue;
        target[k] = '\0';
        /* "/memfd:procmesh-slot0-inc1 (deleted)" */
        const char *m = strstr(target, "memfd:procmesh-");
        if (m != NULL && strncmp(m, own, strlen(own)) != 0)
            snprintf(bad, sizeof(bad), "holds fd %s: %s", e->d_name, target);
        /* Another incarnation's captured output: a spare's pipes. */
        int fd = atoi(e->d_name);
        if (check_pipes && strncmp(target, "pipe:", 5) == 0 && fd != 1 && fd != 2 &&
            !test_fd(fd))
            snprintf(bad, sizeof(bad), "holds fd %s: %s", e->d_name, target);
        /* Its own two sockets (its doorbell's end, its end of the fd
         * socket), never the hub's end of either. */
        sockets += ntest_fds >= 0 && strncmp(target, "socket:", 7) == 0 && !test_fd(fd);
    }
    if (d != NULL)
        closedir(d);
    if (sockets > 2)
        snprintf(bad, sizeof(bad), "holds %d sockets, its own are 2", sockets);
    char out[1024];
    int len = snprintf(out, sizeof(out), "%u %llu %s%s\n", slot, inc, bad[0] ? "bad: " : "ok",
                       bad);
    if (write(report_fd, out, (size_t)len) != len)
        return 51;
    idle();
    return 0;
}

/* What the workers reported so far (read without blocking), in lines. */
static char reports[8192];
static size_t reports_len;

static int report_lines(int fd)
{
    ssize_t k;
    while (reports_len + 1 < sizeof(reports) &&
           (k = read(fd, reports + reports_len, sizeof(reports) - 1 - reports_len)) > 0)
        reports_len += (size_t)k;
    reports[reports_len] = '\0';
    int n = 0;
    for (size_t i = 0; i < reports_len; i++)
        n += reports[i] == '\n';
    return n;
}

START_TEST(test_spare_invisible_to_workers)
{
    /* Slots 0 and 1 both hold spares when slot 1's replacement is forked
     * (and slot 1's own spare for incarnation 3 is made right after): no
     * worker, first or replacement, holds or maps any channel but its own.
     * _i 1: with captured output, whose spares hold the next incarnation's
     * stdout and stderr pipes: no worker holds a pipe but its own fds 1
     * and 2 (and the test's report pipe it inherits). */
    int p[2];
    ck_assert_int_eq(pipe2(p, O_NONBLOCK), 0);
    report_fd = p[1];
    check_pipes = _i;
    note_test_fds();
    pm_options *o = spare_opts(2);
    if (_i)
        ck_assert_int_eq(pm_options_set_output(o, PM_OUTPUT_CAPTURE), 0);
    pm_options_set_bootstrap(o, boot_check_own, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* The spawn's successors are made on the turns after it. */
    RUN_UNTIL(c, pm_test_slot_spare_memfd(c, 0) >= 0 && pm_test_slot_spare_memfd(c, 1) >= 0, 10000);
    RUN_UNTIL(c, report_lines(p[0]) == 2, 10000);
    kill_slot(c, 1);
    RUN_UNTIL(c, report_lines(p[0]) == 3, 10000);
    /* The replacement writes its report after its READY, which the loop may
     * not have read yet: terminated in its handshake, it would be killed
     * (terminate's 1). */
    RUN_UNTIL(c, count(PM_EVENT_READY, 1) == 2, 10000);
    close(p[1]);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    char *buf = reports;
    int lines = 0;
    char *save = NULL;
    for (char *l = strtok_r(buf, "\n", &save); l != NULL; l = strtok_r(NULL, "\n", &save)) {
        unsigned slot;
        unsigned long long inc;
        char verdict[8];
        ck_assert_msg(sscanf(l, "%u %llu %7s", &slot, &inc, verdict) == 3, "bad report: %s", l);
        ck_assert_msg(strcmp(verdict, "ok") == 0, "worker %s", l);
        lines++;
    }
    ck_assert_msg(lines == 3, "%d worker reports, want 3 (slot 0, slot 1 twice)", lines);
    pm_options_free(o);
}
END_TEST

START_TEST(test_spare_dropped_on_retire)
{
    /* A slot with no restart left retires with a spare prepared: the spare
     * goes at once, and after the cluster is freed the test process holds
     * the fds and channel mappings it held before. */
    int fds0 = pm_test_count_fds(), maps0 = count_channel_maps();
    pm_options *o = spare_opts(2);
    pm_options_set_max_restarts(o, 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_spare_memfd(c, 0) >= 0 && pm_test_slot_spare_memfd(c, 1) >= 0, 10000);
    int held = pm_test_count_fds();
    kill_slot(c, 0);
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
    ck_assert_int_eq(pm_test_slot_spare_memfd(c, 0), -1);
    /* Slot 0's channel, spare and pidfd are gone; slot 1's are all there. */
    ck_assert_int_lt(pm_test_count_fds(), held);
    ck_assert_int_ge(pm_test_slot_spare_memfd(c, 1), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert_int_eq(pm_test_count_fds(), fds0);
    ck_assert_int_eq(count_channel_maps(), maps0);
}
END_TEST

START_TEST(test_spare_dropped_on_terminate)
{
    /* Stopped with every slot holding a spare (one slot restarted once, so
     * its spare is a second-generation one): no fd, no mapping left. */
    int fds0 = pm_test_count_fds(), maps0 = count_channel_maps();
    pm_options *o = spare_opts(3);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    kill_slot(c, 2);
    RUN_UNTIL(c, count(PM_EVENT_READY, 2) == 2, 10000);
    for (unsigned i = 0; i < 3; i++)
        ck_assert_int_ge(pm_test_slot_spare_memfd(c, i), 0);
    ck_assert_int_eq(count_channel_maps(), maps0 + 6);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert_int_eq(pm_test_count_fds(), fds0);
    ck_assert_int_eq(count_channel_maps(), maps0);
}
END_TEST

/* The gate of boot_gated: each worker reads one byte before it says ready. */
static int gate[2] = {-1, -1};

static int boot_gated(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    char b;
    if (read(gate[0], &b, 1) != 1)
        return 52;
    if (pm_node_ready(n) < 0)
        return 50;
    idle();
    return 0;
}

START_TEST(test_spare_made_at_ready)
{
    /* The successor's channel is made once the incarnation is ready, not
     * between its fork and its ready (where it took the CPU the new worker
     * was waiting for): while the replacement has not said ready its slot
     * holds no spare (it took the one made ahead); once it has, it holds
     * a new one. */
    ck_assert_int_eq(pipe(gate), 0);
    pm_options *o = spare_opts(1);
    pm_options_set_bootstrap(o, boot_gated, NULL);
    ck_assert_int_eq(write(gate[1], "1", 1), 1); /* the first incarnation's */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_spare_memfd(c, 0) >= 0, 10000);
    unsigned long long spare = ino_of(pm_test_slot_spare_memfd(c, 0));
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_STARTED, 0) == 2, 10000);
    ck_assert_msg(pm_test_slot_memfd_ino(c, 0) == spare,
                  "the replacement did not get the prepared link");
    /* Turns of the loop while it waits at the gate: still no spare. */
    for (int i = 0; i < 5; i++)
        ck_assert_int_ge(pm_cluster_run(c, 10), 0);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 1);
    ck_assert_int_eq(pm_test_slot_spare_memfd(c, 0), -1);
    ck_assert_int_eq(write(gate[1], "2", 1), 1);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_ge(pm_test_slot_spare_memfd(c, 0), 0);
    ck_assert_msg(ino_of(pm_test_slot_spare_memfd(c, 0)) != spare,
                  "a link was reused for another incarnation");
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

START_TEST(test_spawn_spares_after_spawn)
{
    /* pm_cluster_spawn makes no successor between its forks and readies:
     * it returns with every slot ready and no spare, so no worker of the
     * spawn had another's channel to drop. The turns after it make them, at
     * most 32 slots' per turn (one turn cannot stall on a large cluster):
     * 40 slots take two turns. Their fds (about 18 each with a spare)
     * sit below half the fd limit, where spares are kept. */
    struct rlimit rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl), 0);
    if (rl.rlim_cur < 4096 && rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < 4096 ? rl.rlim_max : 4096;
        ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    }
    ck_assert_msg(rl.rlim_cur >= 2048, "RLIMIT_NOFILE %llu: 40 slots' spares need 2048",
                  (unsigned long long)rl.rlim_cur);
    pm_options *o = spare_opts(40);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    for (unsigned i = 0; i < 40; i++) {
        ck_assert_int_eq(slot_state(c, i), PM_SLOT_READY);
        ck_assert_int_eq(pm_test_slot_spare_memfd(c, i), -1);
    }
    ck_assert_int_ge(pm_cluster_run(c, 0), 0); /* one turn */
    for (unsigned i = 0; i < 40; i++)
        ck_assert_msg((pm_test_slot_spare_memfd(c, i) >= 0) == (i < 32),
                      "slot %u: spare %d after the first turn", i, pm_test_slot_spare_memfd(c, i));
    ck_assert_int_ge(pm_cluster_run(c, 0), 0);
    for (unsigned i = 0; i < 40; i++)
        ck_assert_int_ge(pm_test_slot_spare_memfd(c, i), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

START_TEST(test_spare_output_pipes)
{
    /* Captured output: the spare holds the next incarnation's two pipes
     * too, and the restart takes exactly those (no pipe2 between the reap
     * and the fork). */
    pm_options *o = spare_opts(1);
    pm_options_set_output(o, PM_OUTPUT_CAPTURE);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_spare_out(c, 0, 0) >= 0, 10000);
    unsigned long long out = ino_of(pm_test_slot_spare_out(c, 0, 0));
    unsigned long long err = ino_of(pm_test_slot_spare_out(c, 0, 1));
    ck_assert_msg(out != ino_of(pm_test_slot_out(c, 0, 0)), "the spare's pipe is the running one's");
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_msg(ino_of(pm_test_slot_out(c, 0, 0)) == out && ino_of(pm_test_slot_out(c, 0, 1)) == err,
                  "the replacement did not get the prepared pipes");
    RUN_UNTIL(c, pm_test_slot_spare_out(c, 0, 0) >= 0, 10000);
    ck_assert(ino_of(pm_test_slot_spare_out(c, 0, 0)) != out);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* ------------------------------------------------------------ warm standby */

/* The cgroup line of /proc/<pid>/cgroup for the unified hierarchy, or of
 * the whole file when there is none ("" when unreadable). */
static void cgroup_of(pid_t pid, char *out, size_t size)
{
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    out[0] = '\0';
    FILE *f = fopen(path, "r");
    if (f == NULL)
        return;
    size_t n = fread(out, 1, size - 1, f);
    out[n] = '\0';
    fclose(f);
}

/* The unified hierarchy's path in a /proc/<pid>/cgroup text ("" when it
 * has none), and that path without its last component (the slot's
 * directory when the path is a leaf's). */
static void unified_path(const char *text, char *out, size_t size)
{
    const char *p = strstr(text, "0::");
    out[0] = '\0';
    if (p == NULL || (p != text && p[-1] != '\n'))
        return;
    p += 3;
    size_t n = strcspn(p, "\n");
    snprintf(out, size, "%.*s", (int)n, p);
}

static void parent_path(const char *path, char *out, size_t size)
{
    snprintf(out, size, "%s", path);
    char *slash = strrchr(out, '/');
    if (slash != NULL)
        *slash = '\0';
}

/* The standby has joined a cgroup of the slot (its own write, as it
 * starts): its unified path is under slot<N>. */
static int standby_in_slot(pid_t sb)
{
    char text[1024], path[512];
    cgroup_of(sb, text, sizeof(text));
    unified_path(text, path, sizeof(path));
    return strstr(path, "/slot0/") != NULL;
}

static pm_options *standby_opts(int workers)
{
    pm_options *o = spare_opts(workers);
    ck_assert_int_eq(pm_options_set_warm_standby(o, 1), 0);
    return o;
}

START_TEST(test_standby_takes_over)
{
    /* Once ready, the slot holds a standby: a process of its own group,
     * not the worker. With cgroups it waits in the slot's cgroup, in a
     * leaf of its own beside the worker's (the kill of the worker's leaf
     * cannot reach it). The crash makes it the next incarnation (the same
     * pid) without moving it: it stays in that leaf, under the slot's
     * limits as the one before was, holding no memory of any other
     * incarnation (boot_check_own); once that one is ready, a new standby
     * waits behind it. */
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    report_fd = p[1];
    note_test_fds();
    ck_assert_int_eq(fcntl(p[0], F_SETFL, O_NONBLOCK), 0);
    reports_len = 0;
    pm_options *o = standby_opts(1);
    pm_options_set_bootstrap(o, boot_check_own, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    pid_t first = si.pid;
    ck_assert_int_ne(sb, first);
    RUN_UNTIL(c, getpgid(sb) == sb, 10000); /* set by the standby itself, after its fork */
    /* The first incarnation writes its report after its READY, which is
     * also what makes the standby: killed before it wrote, it would never
     * write, and the second line below would never come (CI saw this). */
    RUN_UNTIL(c, report_lines(p[0]) == 1, 10000);
    char cg_before[1024], cg_after[1024], cg_waiting[1024];
    char first_leaf[512], sb_leaf[512], first_slot[512], sb_slot[512], after_leaf[512];
    cgroup_of(first, cg_before, sizeof(cg_before));
    unified_path(cg_before, first_leaf, sizeof(first_leaf));
    int leaves = strstr(first_leaf, "/slot0/") != NULL; /* cgroup containment here */
    if (leaves) {
        RUN_UNTIL(c, standby_in_slot(sb), 10000);
        cgroup_of(sb, cg_waiting, sizeof(cg_waiting));
        unified_path(cg_waiting, sb_leaf, sizeof(sb_leaf));
        parent_path(first_leaf, first_slot, sizeof(first_slot));
        parent_path(sb_leaf, sb_slot, sizeof(sb_slot));
        ck_assert_str_eq(sb_slot, first_slot);
        ck_assert_str_ne(sb_leaf, first_leaf);
    }
    ck_assert_int_eq(kill(first, SIGKILL), 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(si.pid, sb);
    ck_assert_uint_eq(find(PM_EVENT_READY, 0, 1)->inc, 2);
    cgroup_of(sb, cg_after, sizeof(cg_after));
    if (leaves) {
        /* Not moved: the leaf it waited in is the slot's now. */
        ck_assert_str_eq(cg_after, cg_waiting);
        unified_path(cg_after, after_leaf, sizeof(after_leaf));
        ck_assert_str_eq(after_leaf, sb_leaf);
    } else {
        ck_assert_str_eq(cg_after, cg_before);
    }
    RUN_UNTIL(c, report_lines(p[0]) == 2, 10000);
    ck_assert_msg(strstr(reports, "0 2 ok\n") != NULL, "the standby's worker reported: %s", reports);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t next = pm_test_slot_standby_pid(c, 0);
    ck_assert_int_ne(next, sb);
    if (leaves) {
        /* The next standby waits in a leaf of the slot other than the
         * current one: the one the first incarnation left, when the reap
         * found it empty (two leaves take turns), or one made after it
         * was killed, if the reap still saw it populated. */
        char next_text[1024], next_leaf[512], next_slot[512];
        RUN_UNTIL(c, standby_in_slot(next), 10000);
        cgroup_of(next, next_text, sizeof(next_text));
        unified_path(next_text, next_leaf, sizeof(next_leaf));
        parent_path(next_leaf, next_slot, sizeof(next_slot));
        ck_assert_str_eq(next_slot, first_slot);
        ck_assert_str_ne(next_leaf, sb_leaf);
    }
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert(gone(first) && gone(sb) && gone(next));
    close(p[0]);
    close(p[1]);
    report_fd = -1;
}
END_TEST

/* The bootstraps that ran, in memory shared with the fork-mode workers
 * (mapped before the spawn): a standby that ran its bootstrap ahead of its
 * start would be counted here. */
struct boots {
    int n;
    pid_t prev;       /* set by the test before it kills that incarnation */
    pid_t pid[8];     /* who ran the bootstrap, in order */
    uint64_t inc[8];  /* as which incarnation */
    int prev_gone[8]; /* prev had been reaped (no process, no zombie) then */
};
static struct boots *boots;

static int boot_counted(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    pid_t prev = __atomic_load_n(&boots->prev, __ATOMIC_SEQ_CST);
    int prev_gone = prev > 0 && kill(prev, 0) < 0 && errno == ESRCH;
    int i = __atomic_fetch_add(&boots->n, 1, __ATOMIC_SEQ_CST);
    if (i < 8) {
        boots->pid[i] = getpid();
        boots->inc[i] = pm_node_self(n)->incarnation;
        boots->prev_gone[i] = prev_gone;
    }
    if (pm_node_ready(n) < 0)
        return 50;
    idle();
    return 0;
}

/* 1 when pid is blocked in a read of fd: /proc/PID/syscall gives the call's
 * number, then its arguments in hex ("running" or -1 when in none). */
static int waits_in_read(pid_t pid, int fd)
{
    char path[64], text[256];
    snprintf(path, sizeof(path), "/proc/%d/syscall", (int)pid);
    if (pm_test_read_file(path, text, sizeof(text)) == 0)
        return 0;
    long nr;
    unsigned long arg0;
    return sscanf(text, "%ld 0x%lx", &nr, &arg0) == 2 && nr == SYS_read &&
           arg0 == (unsigned long)fd;
}

/* pm_options(3) set_warm_standby: the standby "runs none of the bootstrap
 * ... until the crash makes it the slot's incarnation; only then ... does
 * the bootstrap run" (doc/design.md: not until its predecessor was reaped).
 * Every bootstrap counts itself in shared memory. The standby is looked at
 * once it waits for its start (blocked reading its go eventfd): the count
 * is still the one incarnation. At the crash it grows by one, run by the
 * standby as incarnation 2, its predecessor reaped by then; the standby
 * made behind it waits the same way, and the terminate that ends it runs
 * no bootstrap either. */
START_TEST(test_standby_runs_no_bootstrap_before_crash)
{
    boots = mmap(NULL, sizeof(*boots), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(boots != MAP_FAILED);
    memset(boots, 0, sizeof(*boots));
    pm_options *o = standby_opts(1);
    pm_options_set_bootstrap(o, boot_counted, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(boots->n, 1);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    pid_t first = si.pid;
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    int go = pm_test_slot_standby_go_fd(c, 0);
    /* Had it run the bootstrap, it would be counted (and wait elsewhere). */
    RUN_UNTIL(c, boots->n > 1 || waits_in_read(sb, go), 10000);
    ck_assert_msg(boots->n == 1, "the standby %d ran the bootstrap before the crash (count %d)",
                  (int)sb, boots->n);
    __atomic_store_n(&boots->prev, first, __ATOMIC_SEQ_CST);
    ck_assert_int_eq(kill(first, SIGKILL), 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_eq(boots->n, 2);
    ck_assert_int_eq(boots->pid[1], sb);
    ck_assert_uint_eq(boots->inc[1], 2);
    ck_assert_msg(boots->prev_gone[1], "the standby's bootstrap ran before %d was reaped", (int)first);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t next = pm_test_slot_standby_pid(c, 0);
    ck_assert_int_ne(next, sb);
    go = pm_test_slot_standby_go_fd(c, 0);
    RUN_UNTIL(c, boots->n > 2 || waits_in_read(next, go), 10000);
    ck_assert_msg(boots->n == 2, "the standby %d ran the bootstrap before a crash (count %d)",
                  (int)next, boots->n);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert(gone(next));
    ck_assert_int_eq(boots->n, 2);
    munmap(boots, sizeof(*boots));
    boots = NULL;
}
END_TEST

/* A standby killed from outside while it waits is reaped at once (no
 * zombie) and its spare dropped with it (another process had that memory);
 * the next crash restarts by fork, and the next ready makes a standby
 * again. orphans: as a subreaper reaping every child (reap_children), where
 * the standby must be reaped as the standby, not counted as an orphan. */
static void standby_killed(int orphans)
{
    pm_options *o = standby_opts(1);
    if (orphans) {
        ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
        ck_assert_int_eq(pm_options_set_handle_signals(o, 1), 0); /* reap_orphans needs it */
        ck_assert_int_eq(pm_options_set_reap_orphans(o, 1), 0);
    }
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    ck_assert_int_eq(kill(sb, SIGKILL), 0);
    RUN_UNTIL(c, gone(sb), 10000);
    ck_assert_int_eq(pm_test_slot_standby_pid(c, 0), 0);
    ck_assert_int_eq(pm_test_slot_spare_memfd(c, 0), -1);
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_ne(si.pid, sb);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    ck_assert_int_ge(pm_test_slot_spare_memfd(c, 0), 0);
    pid_t next = pm_test_slot_standby_pid(c, 0);
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_eq(st.orphans_reaped, 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert(gone(next));
}

START_TEST(test_standby_killed_is_reaped)
{
    standby_killed(0);
}
END_TEST

START_TEST(test_standby_killed_is_reaped_subreaper)
{
    standby_killed(1);
}
END_TEST

START_TEST(test_standby_ended_with_cluster)
{
    /* Retired and terminated slots end their standbys: reaped, and every
     * fd and mapping of the cluster released. Slot 1 crashes on every
     * incarnation after the first with no restart allowed after that. */
    int fds0 = pm_test_count_fds(), maps0 = count_channel_maps();
    pm_options *o = standby_opts(2);
    ck_assert_int_eq(pm_options_set_max_restarts(o, 0), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0 && pm_test_slot_standby_pid(c, 1) > 0, 10000);
    pid_t sb0 = pm_test_slot_standby_pid(c, 0), sb1 = pm_test_slot_standby_pid(c, 1);
    kill_slot(c, 1);
    RUN_UNTIL(c, slot_state(c, 1) == PM_SLOT_RETIRED, 10000);
    RUN_UNTIL(c, gone(sb1), 10000);
    ck_assert_int_eq(pm_test_slot_standby_pid(c, 1), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert(gone(sb0));
    ck_assert_int_eq(pm_test_count_fds(), fds0);
    ck_assert_int_eq(count_channel_maps(), maps0);
}
END_TEST

START_TEST(test_standby_dies_with_supervisor)
{
    /* The supervisor SIGKILLed: its worker and its standby die too (the
     * parent-death signal), reaped here as their subreaper. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t sup = fork();
    ck_assert_int_ge(sup, 0);
    if (sup == 0) {
        close(p[0]);
        pm_options *o = standby_opts(1);
        pm_cluster *c;
        if (pm_cluster_spawn(o, &c) < 0)
            _exit(1);
        uint64_t end = ms() + 10000;
        while (pm_test_slot_standby_pid(c, 0) == 0 && ms() < end)
            pm_cluster_run(c, 20);
        pm_slot_info si;
        pm_cluster_slot_info(c, 0, &si);
        pid_t pids[2] = {si.pid, pm_test_slot_standby_pid(c, 0)};
        if (write(p[1], pids, sizeof(pids)) != (ssize_t)sizeof(pids))
            _exit(2);
        for (;;)
            pm_cluster_run(c, 1000);
    }
    close(p[1]);
    pid_t pids[2];
    ck_assert_int_eq(read(p[0], pids, sizeof(pids)), (ssize_t)sizeof(pids));
    close(p[0]);
    ck_assert_int_gt(pids[0], 0);
    ck_assert_int_gt(pids[1], 0);
    ck_assert_int_eq(kill(sup, SIGKILL), 0);
    ck_assert_int_eq(waitpid(sup, NULL, 0), sup);
    int left = 2;
    uint64_t end = ms() + 10000;
    while (left > 0 && ms() < end) {
        pid_t w = waitpid(-1, NULL, WNOHANG);
        if (w == pids[0] || w == pids[1])
            left--;
        else if (w <= 0)
            usleep(1000);
    }
    ck_assert_msg(left == 0, "%d of the worker and its standby outlived the supervisor", left);
}
END_TEST

START_TEST(test_standby_bad_options)
{
    /* Refused with a reason: another value than 0 or 1; exec mode; captured
     * output. */
    pm_options *o = standby_opts(1);
    ck_assert_int_eq(pm_options_set_warm_standby(o, 2), -EINVAL);
    ck_assert_int_eq(pm_options_set_warm_standby(NULL, 1), -EINVAL);
    char why[256];
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    ck_assert_int_eq(pm_options_set_output(o, PM_OUTPUT_CAPTURE), 0);
    ck_assert_int_lt(pm_options_validate(o, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "warm_standby") != NULL, "why: %s", why);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINVAL);
    pm_options_free(o);
    o = opts(1);
    exec_opts(o, "serve", NULL);
    ck_assert_int_eq(pm_options_set_warm_standby(o, 1), 0);
    ck_assert_int_lt(pm_options_validate(o, why, sizeof(why)), 0);
    ck_assert_msg(strstr(why, "warm_standby") != NULL && strstr(why, "fork") != NULL, "why: %s", why);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINVAL);
    pm_options_free(o);
}
END_TEST

/* A process with pid want, not our child (its parent exits): clone3's
 * set_tid, else ns_last_pid. Returns the pid it got. */
static pid_t attack_take_pid(pid_t want)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t mid = fork();
    ck_assert_int_ge(mid, 0);
    if (mid == 0) {
        pid_t got = -1;
        struct {
            uint64_t flags, pidfd, child_tid, parent_tid, exit_signal, stack, stack_size, tls,
                set_tid, set_tid_size, cgroup;
        } a;
        memset(&a, 0, sizeof(a));
        pid_t tid = want;
        a.exit_signal = SIGCHLD;
        a.set_tid = (uint64_t)(uintptr_t)&tid;
        a.set_tid_size = 1;
        long r = syscall(SYS_clone3, &a, sizeof(a));
        if (r == 0) {
            for (;;)
                pause();
        }
        got = (pid_t)r;
        for (int i = 0; got != want && i < 2000; i++) {
            if (got > 0)
                kill(got, SIGKILL), waitpid(got, NULL, 0);
            int fd = open("/proc/sys/kernel/ns_last_pid", O_WRONLY);
            if (fd >= 0) {
                char t[16];
                int n = snprintf(t, sizeof(t), "%d", (int)want - 1);
                if (write(fd, t, (size_t)n) < 0) {}
                close(fd);
            }
            got = fork();
            if (got == 0) {
                for (;;)
                    pause();
            }
        }
        if (write(p[1], &got, sizeof(got)) < 0) {}
        _exit(0);
    }
    pid_t got;
    ck_assert_int_eq(read(p[0], &got, sizeof(got)), (ssize_t)sizeof(got));
    waitpid(mid, NULL, 0);
    close(p[0]);
    close(p[1]);
    return got;
}

START_TEST(test_standby_reaped_by_application)
{
    /* The application reaps a dead standby itself (a SIGCHLD handler with
     * waitpid(-1), which procmesh allows for) and its pid goes to an
     * unrelated process: the supervisor, finding the standby dead, signals
     * and waits through the standby's pidfd only, so the process now
     * holding that pid is never hit. Root only (clone3 set_tid). */
    pm_options *o = standby_opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    ck_assert_int_eq(kill(sb, SIGKILL), 0);
    ck_assert_int_eq(waitpid(sb, NULL, 0), sb);
    pid_t v = attack_take_pid(sb);
    ck_assert_msg(v == sb, "could not give pid %d to another process (got %d)", (int)sb, (int)v);
    int vfd = (int)syscall(SYS_pidfd_open, v, 0);
    ck_assert_int_ge(vfd, 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) == 0, 10000);
    struct pollfd pf = {vfd, POLLIN, 0};
    int dead = poll(&pf, 1, 300) > 0;
    (void)kill(v, SIGKILL);
    close(vfd);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    ck_assert_msg(!dead, "pid %d, a standby's once, now another process's, was killed", (int)v);
}
END_TEST

/* RssFile of a process, in KiB (-1 unknown). */
static long rss_file_kib(pid_t pid)
{
    char path[64], line[256];
    snprintf(path, sizeof(path), "/proc/%d/status", (int)pid);
    FILE *f = fopen(path, "r");
    long kib = -1;
    while (f != NULL && fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "RssFile: %ld", &kib) == 1)
            break;
    if (f != NULL)
        fclose(f);
    return kib;
}

START_TEST(test_standby_reads_no_mapped_file)
{
    /* A standby reads nothing in ahead of the worker it will be: with 64
     * MiB of an application's read-only data file mapped, the standby's
     * file pages stay far below it (an earlier version mapped every
     * read-only file mapping before waiting). */
    const size_t size = 64u << 20;
    char path[] = "/tmp/pm-check-spare-XXXXXX";
    int fd = mkstemp(path);
    ck_assert_int_ge(fd, 0);
    unlink(path);
    ck_assert_int_eq(ftruncate(fd, (off_t)size), 0);
    void *m = mmap(NULL, size, PROT_READ, MAP_PRIVATE, fd, 0);
    ck_assert(m != MAP_FAILED);
    close(fd);
    pm_options *o = standby_opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    /* Its set-up (and so the population) is done once it waits: its
     * process group is set first, the code mapped after; wait for both by
     * letting its file pages stop growing. */
    long last = -2, now = rss_file_kib(sb);
    for (int i = 0; i < 100 && now != last; i++) {
        ck_assert_int_ge(pm_cluster_run(c, 20), 0);
        last = now;
        now = rss_file_kib(sb);
    }
    ck_assert_int_ge(now, 0);
    ck_assert_msg(now < 32 * 1024, "the standby mapped %ld KiB of file pages", now);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    munmap(m, size);
}
END_TEST

START_TEST(test_standby_within_fd_limit)
{
    /* What is prepared ahead never takes the fds that starts need: with the
     * fd table filled past half of RLIMIT_NOFILE, a slot keeps neither a
     * spare nor a standby, and restarts fork as without the option. */
    struct rlimit rl = {64, 64};
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int held[64], nheld = 0;
    int fd;
    while ((fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0 && fd < 33)
        held[nheld++] = fd;
    ck_assert_int_ge(fd, 33);
    close(fd);
    pm_options *o = standby_opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    for (int i = 0; i < 10; i++)
        ck_assert_int_ge(pm_cluster_run(c, 10), 0);
    ck_assert_int_eq(pm_test_slot_standby_pid(c, 0), 0);
    ck_assert_int_eq(pm_test_slot_spare_memfd(c, 0), -1);
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_eq(pm_test_standby_taken(c), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    for (int i = 0; i < nheld; i++)
        close(held[i]);
}
END_TEST

/* Fork mode: answers each message to its sender with "echo:" and the
 * message (pm-test-worker's echo mode in exec mode). */
static int boot_echo(pm_node *n, void *arg)
{
    (void)arg;
    if (pm_node_ready(n) < 0)
        return 50;
    pm_message m;
    char out[128];
    while (pm_node_recv(n, &m, -1) == 0) {
        if (m.kind != PM_MSG_PLAIN)
            continue;
        int k = snprintf(out, sizeof(out), "echo:%.*s", (int)(m.len < 64 ? m.len : 64),
                         (const char *)m.data);
        pm_node_send(n, &m.from, out, (size_t)k);
    }
    return 0;
}

static char echoed[128]; /* main's last message, as text */

static void on_echo(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    snprintf(echoed, sizeof(echoed), "%.*s", (int)(m->len < 100 ? m->len : 100), (const char *)m->data);
}

/* The inode of slot slot's spare memfd (0: none). */
static unsigned long long spare_ino(const pm_cluster *c, unsigned slot)
{
    int fd = pm_test_slot_spare_memfd(c, slot);
    struct stat st;
    return fd >= 0 && fstat(fd, &st) == 0 ? (unsigned long long)st.st_ino : 0;
}


/* Slot slot's running incarnation: the supervisor holds neither its memfd
 * nor its doorbell's end (pm__channel_drop_worker_ends: each fd held per
 * worker is copied by every later fork and closed by every child), and
 * the worker still answers a request, through the doorbell and the ring. */
static void assert_worker_ends_dropped(pm_cluster *c, unsigned slot, unsigned inc)
{
    int memfd, node_efd;
    pm_test_slot_worker_ends(c, slot, &memfd, &node_efd);
    ck_assert_int_eq(memfd, -1);
    ck_assert_int_eq(node_efd, -1);
    char name[64];
    snprintf(name, sizeof(name), "/memfd:procmesh-slot%u-inc%u ", slot, inc);
    ck_assert_msg(pm_test_fds_to(name) == 0, "the supervisor holds %s", name);
    ck_assert_uint_ne(pm_test_slot_memfd_ino(c, slot), 0); /* its mapping stays */
    pm_address a = pm_test_slot_addr(slot, 0);
    echoed[0] = '\0';
    ck_assert_int_eq(pm_cluster_send(c, &a, "ping", 4), 0);
    RUN_UNTIL(c, echoed[0] != '\0', 20000);
    ck_assert_msg(strcmp(echoed, "echo:ping") == 0, "slot %u answered %s", slot, echoed);
}

/* Fork mode (_i 0), exec mode (_i 1) and fork mode with a warm standby
 * (_i 2): the worker's ends are closed in the supervisor once it runs, at
 * the spawn and at a restart (which takes the spare, or the standby forked
 * on it: their ends are held until then), and the worker serves. */
START_TEST(test_worker_ends_dropped)
{
    pm_options *o = opts(2);
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    if (_i != 1)
        pm_options_set_bootstrap(o, boot_echo, NULL);
    else
        exec_opts(o, "echo", NULL);
    if (_i == 2)
        ck_assert_int_eq(pm_options_set_warm_standby(o, 1), 0);
    pm_options_set_on_message(o, on_echo, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, -1) == 2 && pm_test_slot_spare_memfd(c, 0) >= 0 &&
                     (_i != 2 || pm_test_slot_standby_pid(c, 0) > 0), 20000);
    for (unsigned i = 0; i < 2; i++)
        assert_worker_ends_dropped(c, i, 1);
    unsigned long long spare = spare_ino(c, 0);
    kill_slot(c, 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 20000);
    ck_assert_msg(pm_test_slot_memfd_ino(c, 0) == spare, "the restart did not take the spare");
    if (_i == 2)
        ck_assert_uint_eq(pm_test_standby_taken(c), 1);
    assert_worker_ends_dropped(c, 0, 2);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("spare");
    PM_ADD_TEST(s, test_spare_taken_by_restart, 30);
    PM_ADD_LOOP_TEST(s, test_worker_ends_dropped, 0, 3, 60);
    PM_ADD_LOOP_TEST(s, test_spare_invisible_to_workers, 0, 2, 30);
    PM_ADD_TEST(s, test_spare_dropped_on_retire, 30);
    PM_ADD_TEST(s, test_spare_dropped_on_terminate, 30);
    PM_ADD_TEST(s, test_spare_made_at_ready, 30);
    PM_ADD_TEST(s, test_spawn_spares_after_spawn, 60);
    PM_ADD_TEST(s, test_spare_output_pipes, 30);
    PM_ADD_TEST(s, test_standby_takes_over, 30);
    PM_ADD_TEST(s, test_standby_runs_no_bootstrap_before_crash, 30);
    PM_ADD_TEST(s, test_standby_killed_is_reaped, 30);
    PM_ADD_TEST(s, test_standby_killed_is_reaped_subreaper, 30);
    PM_ADD_TEST(s, test_standby_ended_with_cluster, 30);
    PM_ADD_TEST(s, test_standby_dies_with_supervisor, 30);
    PM_ADD_TEST(s, test_standby_bad_options, 30);
    PM_ADD_TEST(s, test_standby_reads_no_mapped_file, 30);
    PM_ADD_TEST(s, test_standby_within_fd_limit, 30);
    if (geteuid() == 0)
        PM_ADD_TEST(s, test_standby_reaped_by_application, 30);
    else
        fprintf(stderr, "check_spare: not root: test_standby_reaped_by_application left out "
                        "(it gives a pid to another process with clone3 set_tid)\n");
    SRunner *r = srunner_create(s);
    srunner_run_all(r, CK_NORMAL);
    int failed = srunner_ntests_failed(r);
    srunner_free(r);
    return failed == 0 ? 0 : 1;
}
