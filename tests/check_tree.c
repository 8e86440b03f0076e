/* SPDX-License-Identifier: MIT */
/* check_tree.c - a slot owns its whole process tree: setsid descendants end with their incarnation (exit, crash, fence, restart, drain) before the replacement starts; per-slot limits; a fresh leaf after a kill; a delegated cgroup that holds the supervisor; the cgroup file handling on a scratch tree; pm_cluster_containment's detail truncated to its size.
 *
 * The delegated-cgroup cases (a supervisor alone in a cgroup with
 * processes of its own, as under systemd's Delegate=yes) need root and a
 * cgroup v2 controller to enable; their cluster cases need the memory
 * controller in the v2 tree (on hybrid hosts it is bound to v1, and they
 * run with the controller the tree has, through pm__cg_enable).
 *
 * The descendant cases need cgroups (a setsid() descendant leaves the
 * process group of the fallback): skipped (77) with the reason where this
 * process cannot create them. The scratch-tree cases run everywhere, so do
 * the core-dump ones (RLIMIT_CORE and dumpability of workers, --core-dir).
 */
#include "helpers.h"

#include <dirent.h>
#include <pthread.h>
#include <poll.h>
#include <fcntl.h>
#include <stdarg.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "procmesh.h"
#include "os/cgroup.h"
#include "cgroupfs_ro.h"
#include "frozenfs.h"
#include "inspect.h"
#include "internals.h"
#include "supervise.h"

/* ------------------------------------------------------------ descendants */

/* Pids of every descendant the workers left, as they reported them. */
static int tree_pipe[2] = {-1, -1};
static pid_t kids[256];
static int nkids;
static int leaked_at_restart = -1; /* -1: no replacement seen; else the count alive then */

/* Dead: no such process, or a zombie waiting for whoever adopted it. */
static int dead(pid_t pid)
{
    if (kill(pid, 0) < 0 && errno == ESRCH)
        return 1;
    char st = pm_test_proc_state(pid);
    return st == 0 || st == 'Z' || st == 'X';
}

static void collect(void)
{
    pid_t p;
    while (nkids < (int)ARRAY_LEN(kids) && read(tree_pipe[0], &p, sizeof(p)) == (ssize_t)sizeof(p))
        kids[nkids++] = p;
}

/* Alive among the descendants read from the pipe so far. */
static int alive_known(void)
{
    int n = 0;
    for (int i = 0; i < nkids; i++)
        n += !dead(kids[i]);
    return n;
}

static int alive_kids(void)
{
    collect();
    return alive_known();
}

/* Records events, and at the replacement's start how many descendants of
 * the earlier incarnation still lived (the rule: none). Only those read
 * before: STARTED comes after the replacement's fork, and a replacement
 * that runs first (a loaded machine, a fast one) has already written its
 * own descendant's pid, which is alive and not the earlier incarnation's. */
static void on_tree_event(pm_cluster *c, const pm_event *e, void *arg)
{
    on_event(c, e, arg);
    if (e->type == PM_EVENT_STARTED && e->incarnation == 2 && leaked_at_restart < 0)
        leaked_at_restart = alive_known();
}

enum { T_EXIT0, T_EXIT3, T_CRASH, T_IDLE };

/* A worker that leaves a descendant in a session of its own (setsid, then
 * a double fork so it is nobody's child in the worker's tree), reports its
 * pid, becomes ready, then on its first incarnation does what arg says. */
static int boot_tree(pm_node *n, void *arg)
{
    worker_init();
    pid_t child = fork();
    if (child == 0) {
        setsid();
        pid_t g = fork();
        if (g == 0)
            for (;;)
                pause();
        if (write(tree_pipe[1], &g, sizeof(g)) != (ssize_t)sizeof(g))
            _exit(1);
        _exit(0);
    }
    int st;
    waitpid(child, &st, 0); /* the pid is in the pipe before we are ready */
    pm_node_ready(n);
    if (pm_node_self(n)->incarnation == 1) {
        switch ((int)(intptr_t)arg) {
        case T_EXIT0:
            return 0;
        case T_EXIT3:
            return 3;
        case T_CRASH:
            raise(SIGSEGV);
            _exit(99);
        default:
            break;
        }
    }
    idle();
    return 0;
}

/* The containment a cluster gets here, with these limits (cpu_quota_us
 * per 100 ms): the mode, or -errno (-EOPNOTSUPP: a limit cannot be
 * applied); why says why. */
static int probe(uint64_t memory_max, int pids_max, uint64_t cpu_quota_us, char *why, size_t size)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_memory_max(o, memory_max);
    pm_options_set_pids_max(o, pids_max);
    pm_options_set_cpu_max(o, cpu_quota_us, cpu_quota_us > 0 ? 100000 : 0);
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    pm_options_free(o);
    if (rc < 0) {
        snprintf(why, size, "%s", pm_strerror(rc));
        return rc;
    }
    rc = pm_cluster_containment(c, why, size);
    pm_cluster_terminate(c);
    return rc;
}

/* how < 0: exec mode, the caller sets the program. */
static pm_options *tree_opts(int how)
{
    ck_assert_int_eq(pipe2(tree_pipe, O_CLOEXEC | O_NONBLOCK), 0);
    nkids = 0;
    leaked_at_restart = -1;
    pm_options *o = opts(1);
    pm_options_set_on_event(o, on_tree_event, NULL);
    if (how >= 0)
        pm_options_set_bootstrap(o, boot_tree, (void *)(intptr_t)how);
    return o;
}

/* Runs until the first descendant is known. */
static void wait_first_kid(pm_cluster *c)
{
    RUN_UNTIL(c, (collect(), nkids >= 1), 10000);
}

/* A cluster spawned with o (the spawn must succeed); o is freed. */
static pm_cluster *spawn_free(pm_options *o)
{
    pm_cluster *c = pm_test_spawn(o);
    pm_options_free(o);
    return c;
}

/* Spawns a cluster with o (freed) and runs until its first descendant is
 * known. */
static pm_cluster *spawn_tree(pm_options *o)
{
    pm_cluster *c = spawn_free(o);
    wait_first_kid(c);
    return c;
}

/* Runs until the replacement starts: nothing of the first incarnation
 * lived then. */
static void assert_replaced_clean(pm_cluster *c)
{
    RUN_UNTIL(c, leaked_at_restart >= 0, 10000);
    ck_assert_msg(leaked_at_restart == 0, "%d descendants alive when the replacement started",
                  leaked_at_restart);
}

static void finish(pm_cluster *c)
{
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    ck_assert_msg(alive_kids() == 0, "%d descendants outlived the cluster", alive_kids());
    for (int i = 0; i < nkids; i++)
        ck_assert_msg(dead(kids[i]), "descendant %d still runs", (int)kids[i]);
}

START_TEST(test_tree_exit)
{
    /* Exit 0 with on-failure: no replacement; the descendant still ends. */
    pm_cluster *c = spawn_tree(tree_opts(T_EXIT0));
    RUN_UNTIL(c, count(PM_EVENT_STOPPED, 0) == 1, 10000);
    ck_assert_msg(dead(kids[0]), "descendant %d outlived its incarnation's exit", (int)kids[0]);
    finish(c);
}
END_TEST

/* Failure then replacement: by the replacement's start, nothing of the
 * first incarnation lives. */
static void replaced(int how)
{
    pm_cluster *c = spawn_tree(tree_opts(how));
    assert_replaced_clean(c);
    ck_assert_msg(dead(kids[0]), "descendant %d outlived its incarnation", (int)kids[0]);
    finish(c);
}

START_TEST(test_tree_exit_failure)
{
    replaced(T_EXIT3);
}
END_TEST

START_TEST(test_tree_crash)
{
    replaced(T_CRASH);
}
END_TEST

START_TEST(test_tree_fence)
{
    pm_options *o = tree_opts(T_IDLE);
    /* It never beats: fenced for a hang. */
    pm_options_set_heartbeat_timeout_ms(o, 200);
    pm_cluster *c = spawn_tree(o);
    assert_replaced_clean(c);
    ck_assert_int_ge(count(PM_EVENT_FENCED, 0), 1);
    finish(c);
}
END_TEST

START_TEST(test_tree_restart)
{
    pm_cluster *c = spawn_tree(tree_opts(T_IDLE));
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    assert_replaced_clean(c);
    finish(c);
}
END_TEST

/* The unified path in /proc/<pid>/cgroup ("" when unreadable or none). */
static void unified_of(pid_t pid, char *out, size_t size)
{
    char path[64], text[1024];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    out[0] = '\0';
    if (pm_test_read_file(path, text, sizeof(text)) == 0)
        return;
    const char *p = strstr(text, "0::");
    if (p == NULL || (p != text && p[-1] != '\n'))
        return;
    p += 3;
    snprintf(out, size, "%.*s", (int)strcspn(p, "\n"), p);
}

/* The standby has joined a leaf of slot 0 other than leaf's. */
static int standby_beside(pid_t sb, const char *leaf)
{
    char mine[512];
    unified_of(sb, mine, sizeof(mine));
    return strstr(mine, "/slot0/g") != NULL && strcmp(mine, leaf) != 0;
}

START_TEST(test_tree_standby)
{
    /* pm_options_set_warm_standby: the standby waits in a leaf of the
     * slot's cgroup beside the incarnation's (joined by its own write as
     * it starts), so the kill of the incarnation's leaf at its reap ends
     * the descendant it left and never the standby; the standby then
     * becomes the next incarnation where it waits, moved by no write on
     * the crash's path, and nothing of the first incarnation lives when
     * it starts. */
    pm_options *o = tree_opts(T_IDLE);
    ck_assert_int_eq(pm_options_set_warm_standby(o, 1), 0);
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    pm_cluster *c = spawn_tree(o);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    pid_t first = si.pid;
    char leaf[512], sb_leaf[512], after[512];
    unified_of(first, leaf, sizeof(leaf));
    ck_assert_msg(strstr(leaf, "/slot0/g") != NULL, "the worker is in %s", leaf);
    RUN_UNTIL(c, pm_test_slot_standby_pid(c, 0) > 0, 10000);
    pid_t sb = pm_test_slot_standby_pid(c, 0);
    RUN_UNTIL(c, standby_beside(sb, leaf), 10000);
    unified_of(sb, sb_leaf, sizeof(sb_leaf));
    ck_assert_int_eq(kill(first, SIGKILL), 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_msg(dead(kids[0]), "descendant %d outlived its incarnation", (int)kids[0]);
    assert_replaced_clean(c);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(si.pid, sb);
    ck_assert_int_eq(si.incarnation, 2);
    unified_of(sb, after, sizeof(after));
    ck_assert_str_eq(after, sb_leaf);
    finish(c);
}
END_TEST

START_TEST(test_tree_drain)
{
    pm_options *o = tree_opts(T_IDLE);
    pm_options_set_workers(o, 3);
    pm_cluster *c = spawn_free(o);
    RUN_UNTIL(c, (collect(), nkids >= 3), 10000);
    finish(c);
}
END_TEST

/* The pid the exec worker's shell wrote to tree_pipe as a line of text
 * (not for on_tree_event's binary reads), read while c runs (10 s at
 * most); fails the test unless it is a pid. */
static pid_t read_pid_line(pm_cluster *c)
{
    char buf[64];
    uint64_t end = ms() + 10000;
    size_t got = 0;
    while (ms() < end && memchr(buf, '\n', got) == NULL) {
        ck_assert_int_ge(pm_cluster_run(c, 20), 0);
        ssize_t k = read(tree_pipe[0], buf + got, sizeof(buf) - 1 - got);
        if (k > 0)
            got += (size_t)k;
    }
    buf[got] = '\0';
    pid_t pid = (pid_t)atoi(buf);
    ck_assert_msg(pid > 0, "no pid from the exec worker: '%s'", buf);
    return pid;
}

/* Exec mode (clone3 into the cgroup, or the child's write): a shell whose
 * setsid'd background job outlives it. */
START_TEST(test_tree_exec_crash)
{
    pm_options *o = tree_opts(-1);
    int fd = tree_pipe[1];
    ck_assert_int_eq(pm_options_set_pass_fds(o, &fd, 1), 0);
    char *argv[] = {"sh", "-c",
                    "setsid sleep 1000 & printf '%d\\n' $! >&3; "
                    "kill -SEGV $$",
                    NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    /* The pipe carries text here: not for on_tree_event's binary reads. */
    pm_options_set_on_event(o, on_event, NULL);
    pm_cluster *c = spawn_free(o);
    pid_t first = read_pid_line(c);
    RUN_UNTIL(c, find(PM_EVENT_EXITED, 0, 0) != NULL, 10000);
    ck_assert_msg(dead(first), "exec worker's setsid job %d outlived its crash", (int)first);
    /* The replacements run after a cgroup kill (each in a fresh leaf, or
     * in the killed one when none could be made): each must live to crash
     * by itself (SIGSEGV), never be killed at birth. */
    RUN_UNTIL(c, find(PM_EVENT_EXITED, 0, 2) != NULL, 10000);
    for (int i = 1; i <= 2; i++)
        ck_assert_msg(find(PM_EVENT_EXITED, 0, i)->signal == SIGSEGV,
                      "incarnation %d ended by signal %d, not its own SIGSEGV", i + 1,
                      find(PM_EVENT_EXITED, 0, i)->signal);
    pm_cluster_terminate(c);
}
END_TEST

/* ------------------------------------------------------------ limits */

static unsigned last_oom;
static void on_oom_event(pm_cluster *c, const pm_event *e, void *arg)
{
    on_event(c, e, arg);
    if (e->type == PM_EVENT_EXITED && e->incarnation == 1)
        last_oom = e->oom_kills;
}

/* First incarnation: touches memory until the OOM killer ends it. It
 * beats as it goes: reaching the limit can take longer than the heartbeat
 * timeout on a loaded machine (the kernel reclaims before it kills), and
 * only the OOM kill may end it. */
static int boot_hog(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    if (pm_node_self(n)->incarnation == 1) {
        for (size_t mb = 0; mb < 4096; mb++) {
            char *p = malloc(1 << 20);
            if (p == NULL)
                _exit(98);
            memset(p, (int)mb | 1, 1 << 20);
            pm_node_beat(n);
        }
        _exit(97);
    }
    idle();
    return 0;
}

START_TEST(test_limit_memory_oom)
{
    last_oom = 0;
    pm_options *o = opts(1);
    pm_options_set_on_event(o, on_oom_event, NULL);
    pm_options_set_bootstrap(o, boot_hog, NULL);
    ck_assert_int_eq(pm_options_set_memory_max(o, 64u << 20), 0);
    pm_cluster *c = spawn_free(o);
    RUN_UNTIL(c, find(PM_EVENT_EXITED, 0, 0) != NULL, 30000);
    const rec *r = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_int_eq(r->signal, SIGKILL);
    ck_assert_msg(last_oom >= 1, "the OOM kill was not counted in the slot's cgroup (exit reason %s)",
                  r->reason);
    pm_cluster_terminate(c);
}
END_TEST

/* A worker's report of len bytes at buf to the test (tree_pipe), then
 * ready and serving until it is stopped. */
static int report_and_serve(pm_node *n, const void *buf, size_t len)
{
    if (write(tree_pipe[1], buf, len) < 0)
        _exit(1);
    pm_node_ready(n);
    idle();
    return 0;
}

/* The options of a test whose one worker runs boot and reports through a
 * new tree_pipe. */
static pm_options *reporter_opts(int (*boot)(pm_node *, void *))
{
    ck_assert_int_eq(pipe2(tree_pipe, O_CLOEXEC), 0);
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot, NULL);
    return o;
}

/* Forks until fork fails; writes how many it made and the errno. */
static int boot_forker(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    int made = 0, err = 0;
    for (; made < 64; made++) {
        pid_t p = fork();
        if (p == 0) {
            for (;;)
                pause();
        }
        if (p < 0) {
            err = errno;
            break;
        }
    }
    int msg[2] = {made, err};
    return report_and_serve(n, msg, sizeof(msg));
}

START_TEST(test_limit_pids)
{
    pm_options *o = reporter_opts(boot_forker);
    ck_assert_int_eq(pm_options_set_pids_max(o, 8), 0);
    pm_cluster *c = spawn_free(o);
    int msg[2];
    ck_assert_int_eq(read(tree_pipe[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
    ck_assert_msg(msg[0] < 8 && msg[1] == EAGAIN, "made %d children, errno %d", msg[0], msg[1]);
    pm_cluster_terminate(c);
}
END_TEST

/* test_limit_atfork_thread: an application's pthread_atfork child
 * handler that starts a thread, which runs in a fork-mode worker before
 * procmesh's own code does. */
static void *atfork_sleeper(void *arg)
{
    (void)arg;
    for (;;)
        pause();
    return NULL;
}

static void atfork_start_thread(void)
{
    pthread_t t;
    if (pthread_create(&t, NULL, atfork_sleeper, NULL) == 0)
        pthread_detach(t);
}

/* The text of path (a /proc cgroup file), NUL-terminated; 0 or -1. */
static int read_small(const char *path, char *buf, size_t size)
{
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd < 0)
        return -1;
    ssize_t n = read(fd, buf, size - 1);
    close(fd);
    if (n < 0)
        return -1;
    buf[n] = '\0';
    return 0;
}

/* Reports its thread count and whether every thread's cgroups (every
 * hierarchy, v1 and v2: /proc/self/task/<tid>/cgroup) are its main
 * thread's. */
static int boot_threads_cgroup(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    char main_cg[4096], cg[4096], path[300];
    int threads = 0, same = read_small("/proc/self/cgroup", main_cg, sizeof(main_cg)) == 0;
    DIR *d = opendir("/proc/self/task");
    struct dirent *e;
    while (d != NULL && (e = readdir(d)) != NULL) {
        if (e->d_name[0] == '.')
            continue;
        threads++;
        snprintf(path, sizeof(path), "/proc/self/task/%s/cgroup", e->d_name);
        if (read_small(path, cg, sizeof(cg)) < 0 || strcmp(cg, main_cg) != 0)
            same = 0;
    }
    if (d != NULL)
        closedir(d);
    int msg[2] = {threads, same};
    return report_and_serve(n, msg, sizeof(msg));
}

START_TEST(test_lone_thread)
{
    /* pm__cg_lone_thread, which picks a child's v1 join: 1 in a process of
     * one thread, 0 once it has two (procfs's count of /proc/self/task),
     * in a child of the test so that the count is its own. */
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        int one = pm__cg_lone_thread();
        pthread_t t;
        if (pthread_create(&t, NULL, atfork_sleeper, NULL) != 0)
            _exit(9);
        int two = pm__cg_lone_thread();
        _exit(one * 2 + two);
    }
    int status = 0;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 2,
                  "lone: %d with one thread, %d with two (status 0x%x)", WEXITSTATUS(status) >> 1,
                  WEXITSTATUS(status) & 1, status);
}
END_TEST

START_TEST(test_limit_atfork_thread)
{
    /* A fork-mode worker with limits is two threads when procmesh joins
     * it to its slot's cgroups: the second, an application's atfork
     * handler's, must end up where the first does. On a hybrid host (the
     * limits' controllers in v1 hierarchies) a lone thread joins through
     * the tasks file, which moves that thread only; a child of more
     * threads must join through cgroup.procs, or the handler's thread
     * stays in the supervisor's pids and memory cgroups, outside the
     * limits (cgroup_slot.c pm__cg_lone_thread). */
    ck_assert_int_eq(pthread_atfork(NULL, NULL, atfork_start_thread), 0);
    pm_options *o = reporter_opts(boot_threads_cgroup);
    ck_assert_int_eq(pm_options_set_pids_max(o, 64), 0);
    pm_cluster *c = spawn_free(o);
    int msg[2];
    ck_assert_int_eq(read(tree_pipe[0], msg, sizeof(msg)), (ssize_t)sizeof(msg));
    ck_assert_msg(msg[0] >= 2, "the worker has %d thread(s): the atfork handler's did not start", msg[0]);
    ck_assert_msg(msg[1] == 1, "a thread of the worker is in other cgroups than its main thread");
    pm_cluster_terminate(c);
}
END_TEST

/* Spins until it is stopped (fork mode; the test asks for no heartbeat). */
static int boot_spin(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    volatile unsigned long spins = 0;
    for (;;)
        spins++;
    return 0;
}

static int ends_with(const char *s, const char *tail)
{
    size_t ls = strlen(s), lt = strlen(tail);
    return ls >= lt && strcmp(s + ls - lt, tail) == 0;
}

/* The directory that holds slot 0's cpu limit, found from where its worker
 * pid is: the slot's v2 directory above the worker's leaf (slot0/g<K>), or
 * (*v2 0: the cluster's detail names it a v1 limit) the worker's own group
 * in the v1 cpu hierarchy. Fails unless the worker is in the cluster's
 * slot 0. */
static void cpu_limit_dir(pid_t pid, const char *detail, char *dir, size_t size, int *v2)
{
    static char mi[1 << 16];
    char text[4096], rel[PM__CG_PATH], v1[PM__CG_NCTRL][PM__CG_PATH], mnt[PM__CG_PATH],
        root[PM__CG_PATH], m1[PM__CG_NCTRL][PM__CG_PATH], r1[PM__CG_NCTRL][PM__CG_PATH],
        path[64], mark[48];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    ck_assert_int_gt(pm_test_read_file(path, text, sizeof(text)), 0);
    ck_assert_int_gt(pm_test_read_file("/proc/self/mountinfo", mi, sizeof(mi)), 0);
    ck_assert_int_eq(pm__cg_parse_self(text, rel, sizeof(rel), v1), 0);
    pm__cg_parse_mounts(mi, mnt, root, m1, r1);
    snprintf(mark, sizeof(mark), "/procmesh.%d.", (int)getpid());
    *v2 = strstr(detail, ", v1 limits ") == NULL;
    if (*v2) {
        char *leaf = strrchr(rel, '/');
        ck_assert_msg(leaf != NULL && strncmp(leaf, "/g", 2) == 0, "the worker is in %s", rel);
        *leaf = '\0';
        ck_assert_msg(strstr(rel, mark) != NULL && ends_with(rel, "/slot0"),
                      "the worker's leaf is not below the cluster's slot0: %s", rel);
        ck_assert_int_eq(pm__cg_join(dir, size, mnt, root, rel), 0);
    } else {
        ck_assert_msg(strstr(v1[PM__CG_CPU], mark) != NULL && ends_with(v1[PM__CG_CPU], "/slot0"),
                      "the worker's v1 cpu group is %s, not the cluster's slot0", v1[PM__CG_CPU]);
        ck_assert_int_eq(pm__cg_join(dir, size, m1[PM__CG_CPU], r1[PM__CG_CPU], v1[PM__CG_CPU]), 0);
    }
}

/* nr_throttled of a cpu.stat file, -1 when it has none. */
static long long nr_throttled(const char *path)
{
    char text[1024];
    if (pm_test_read_file(path, text, sizeof(text)) == 0)
        return -1;
    const char *p = strstr(text, "nr_throttled ");
    return p != NULL && (p == text || p[-1] == '\n') ? strtoll(p + 13, NULL, 10) : -1;
}

/* pm_options(3) set_cpu_max: the quota is applied. While the worker runs,
 * the cgroup it is in (its slot's, or the slot's group in the v1 cpu
 * hierarchy of a hybrid host) holds 20 ms per 100 ms, and the kernel
 * enforces it: the worker, which would take a whole CPU, is throttled. */
START_TEST(test_limit_cpu)
{
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_spin, NULL);
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 0), 0);
    ck_assert_int_eq(pm_options_set_cpu_max(o, 20000, 100000), 0);
    pm_cluster *c = spawn_free(o);
    char why[320], dir[PM__CG_PATH], text[256], path[PM__CG_PATH + 32];
    ck_assert_int_eq(pm_cluster_containment(c, why, sizeof(why)), PM_CONTAIN_CGROUP);
    ck_assert_msg(strstr(why, "cpu") != NULL, "containment without the cpu limit: %s", why);
    int v2;
    cpu_limit_dir(find(PM_EVENT_STARTED, 0, 0)->pid, why, dir, sizeof(dir), &v2);
    if (v2) {
        snprintf(path, sizeof(path), "%s/cpu.max", dir);
        pm_test_read_file(path, text, sizeof(text));
        ck_assert_msg(strcmp(text, "20000 100000\n") == 0, "%s: '%s'", path, text);
    } else {
        snprintf(path, sizeof(path), "%s/cpu.cfs_period_us", dir);
        pm_test_read_file(path, text, sizeof(text));
        ck_assert_msg(strcmp(text, "100000\n") == 0, "%s: '%s'", path, text);
        snprintf(path, sizeof(path), "%s/cpu.cfs_quota_us", dir);
        pm_test_read_file(path, text, sizeof(text));
        ck_assert_msg(strcmp(text, "20000\n") == 0, "%s: '%s'", path, text);
    }
    snprintf(path, sizeof(path), "%s/cpu.stat", dir);
    RUN_UNTIL(c, nr_throttled(path) > 0, 20000);
    pm_cluster_terminate(c);
}
END_TEST

/* rlimits: the worker sees what was set. */
static int boot_rlimit(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    struct rlimit rl;
    getrlimit(RLIMIT_NOFILE, &rl);
    uint64_t v[2] = {rl.rlim_cur, rl.rlim_max};
    return report_and_serve(n, v, sizeof(v));
}

START_TEST(test_rlimit)
{
    pm_options *o = reporter_opts(boot_rlimit);
    ck_assert_int_eq(pm_options_set_rlimit(o, RLIMIT_NOFILE, 100, 200), 0);
    pm_cluster *c = spawn_free(o);
    uint64_t v[2];
    ck_assert_int_eq(read(tree_pipe[0], v, sizeof(v)), (ssize_t)sizeof(v));
    ck_assert_int_eq(v[0], 100);
    ck_assert_int_eq(v[1], 200);
    pm_cluster_terminate(c);
}
END_TEST

START_TEST(test_setters_refuse)
{
    pm_options *o = pm_options_new();
    ck_assert_int_eq(pm_options_set_memory_max(o, 4096), -EINVAL);
    ck_assert_int_eq(pm_options_set_memory_max(NULL, 1 << 30), -EINVAL);
    ck_assert_int_eq(pm_options_set_memory_max(o, 0), 0);
    ck_assert_int_eq(pm_options_set_pids_max(o, -1), -EINVAL);
    ck_assert_int_eq(pm_options_set_pids_max(o, 5000000), -EINVAL);
    ck_assert_int_eq(pm_options_set_cpu_max(o, 50000, 100), -EINVAL);
    ck_assert_int_eq(pm_options_set_cpu_max(o, 10, 100000), -EINVAL);
    ck_assert_int_eq(pm_options_set_cpu_max(o, 50000, 100000), 0);
    ck_assert_int_eq(pm_options_set_rlimit(o, RLIMIT_NOFILE, 200, 100), -EINVAL);
    ck_assert_int_eq(pm_options_set_rlimit(o, 99, 1, 1), -EINVAL);
    ck_assert_int_eq(pm_options_set_rlimit(o, -1, 1, 1), -EINVAL);
    ck_assert_int_eq(pm_options_set_rlimit(o, RLIMIT_CORE, 0, PM_RLIM_INFINITY), 0);
    pm_options_free(o);
}
END_TEST

/* ------------------------------------------------------------ core dumps */

/* The "Max core file size" soft and hard limits of pid, from
 * /proc/PID/limits ("0", "unlimited" ...). */
static void core_limits_of(pid_t pid, char *soft, char *hard)
{
    char path[64], text[4096];
    snprintf(path, sizeof(path), "/proc/%d/limits", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s: %s", path, strerror(errno));
    ssize_t n = read(fd, text, sizeof(text) - 1);
    close(fd);
    ck_assert_int_gt(n, 0);
    text[n] = '\0';
    const char *line = strstr(text, "Max core file size");
    ck_assert_ptr_nonnull(line);
    ck_assert_int_eq(sscanf(line + strlen("Max core file size"), "%31s %31s", soft, hard), 2);
}

/* Reports its RLIMIT_CORE and dumpable state, then serves. */
static int boot_core(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    struct rlimit rl;
    getrlimit(RLIMIT_CORE, &rl);
    uint64_t v[3] = {rl.rlim_cur, rl.rlim_max, (uint64_t)prctl(PR_GET_DUMPABLE, 0, 0, 0, 0)};
    return report_and_serve(n, v, sizeof(v));
}

/* Spawns one fork-mode boot_core worker with o; v: what it reported, the
 * limits in its /proc/PID/limits. */
static void run_core(pm_options *o, uint64_t v[3], char *soft, char *hard)
{
    pm_options_set_bootstrap(o, boot_core, NULL);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(read(tree_pipe[0], v, 3 * sizeof(uint64_t)), (ssize_t)(3 * sizeof(uint64_t)));
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    core_limits_of(si.pid, soft, hard);
    pm_cluster_terminate(c);
}

/* Exec mode with a program that leaves its limits alone (a sanitizer
 * build's pm-test-worker lowers its own RLIMIT_CORE: ASan's
 * disable_coredump), ready once exec'd. */
static void exec_sleeper(pm_options *o)
{
    char *argv[] = {"sleep", "1000", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sleep", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
}

/* Default: no core directory, RLIMIT_CORE soft 0 (the hard limit stays the
 * supervisor's), fork and exec mode. */
START_TEST(test_core_default)
{
    ck_assert_int_eq(pipe2(tree_pipe, O_CLOEXEC), 0);
    struct rlimit mine;
    ck_assert_int_eq(getrlimit(RLIMIT_CORE, &mine), 0);
    pm_options *o = opts(1);
    uint64_t v[3];
    char soft[32], hard[32];
    run_core(o, v, soft, hard);
    pm_options_free(o);
    ck_assert_int_eq(v[0], 0);
    ck_assert_int_eq(v[1], mine.rlim_max);
    ck_assert_str_eq(soft, "0");

    o = opts(1);
    exec_sleeper(o);
    pm_cluster *c = spawn_free(o);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    core_limits_of(si.pid, soft, hard);
    ck_assert_str_eq(soft, "0");
    pm_cluster_terminate(c);
}
END_TEST

/* With a core directory: RLIMIT_CORE unlimited and the worker dumpable,
 * also after the supervisor made itself non-dumpable (_i 0) and after a
 * credential change (_i 1, root only); _i 2 is the control: the same user
 * change without a core directory leaves it non-dumpable, without cores. */
START_TEST(test_core_dir)
{
    if (_i > 0 && geteuid() != 0) {
        fprintf(stderr, "note: test_core_dir %d needs root (--user); not run\n", _i);
        return;
    }
    ck_assert_int_eq(pipe2(tree_pipe, O_CLOEXEC), 0);
    char dir[] = "/tmp/pm-cores-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pm_options *o = opts(1);
    if (_i < 2)
        ck_assert_int_eq(pm_options_set_core_dir(o, dir), 0);
    if (_i == 0)
        ck_assert_int_eq(pm_options_set_protect_supervisor(o, 1), 0);
    else
        ck_assert_int_eq(pm_options_set_user(o, 65534, 65534), 0);
    uint64_t v[3];
    char soft[32], hard[32];
    run_core(o, v, soft, hard);
    pm_options_free(o);
    ck_assert_int_eq(rmdir(dir), 0);
    if (_i < 2) {
        ck_assert_msg(v[0] == RLIM_INFINITY && v[1] == RLIM_INFINITY,
                      "RLIMIT_CORE %llu/%llu, want unlimited", (unsigned long long)v[0],
                      (unsigned long long)v[1]);
        ck_assert_str_eq(soft, "unlimited");
        ck_assert_str_eq(hard, "unlimited");
        ck_assert_int_eq(v[2], 1);
    } else {
        ck_assert_int_eq(v[0], 0);
        ck_assert_int_eq(v[2], 0);
    }
}
END_TEST

/* Exec mode with a core directory; an explicit RLIMIT_CORE wins over it. */
START_TEST(test_core_dir_exec_and_rlimit)
{
    char dir[] = "/tmp/pm-cores-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    pm_options *o = opts(1);
    exec_sleeper(o);
    ck_assert_int_eq(pm_options_set_core_dir(o, dir), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    char soft[32], hard[32];
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    core_limits_of(si.pid, soft, hard);
    ck_assert_str_eq(soft, "unlimited");
    pm_cluster_terminate(c);

    ck_assert_int_eq(pm_options_set_rlimit(o, RLIMIT_CORE, 4096, 8192), 0);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    core_limits_of(si.pid, soft, hard);
    ck_assert_str_eq(soft, "4096");
    ck_assert_str_eq(hard, "8192");
    pm_cluster_terminate(c);
    pm_options_free(o);
    ck_assert_int_eq(rmdir(dir), 0);
}
END_TEST

/* A core directory must exist and be a directory, now and at spawn. */
START_TEST(test_core_dir_refused)
{
    pm_options *o = pm_options_new();
    pm_options_set_bootstrap(o, boot_ready, NULL);
    ck_assert_int_eq(pm_options_set_core_dir(NULL, "/tmp"), -EINVAL);
    ck_assert_int_eq(pm_options_set_core_dir(o, ""), -EINVAL);
    ck_assert_int_eq(pm_options_set_core_dir(o, "/nonexistent/pm-cores"), -ENOENT);
    ck_assert_int_eq(pm_options_set_core_dir(o, "/dev/null"), -ENOTDIR);
    ck_assert_int_eq(pm_options_set_core_dir(o, NULL), 0);
    char dir[] = "/tmp/pm-cores-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_int_eq(pm_options_set_core_dir(o, dir), 0);
    ck_assert_int_eq(pm_options_validate(o, NULL, 0), 0);
    ck_assert_int_eq(rmdir(dir), 0);
    char why[256];
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -ENOENT);
    ck_assert_msg(strstr(why, "core_dir") != NULL && strstr(why, dir + 5) != NULL, "why: %s", why);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -ENOENT);
    pm_options_free(o);
}
END_TEST

/* pm_options(3) set_rlimit: "set by each worker before it runs (exec mode:
 * a refusal is reported as the exec's errno)". A hard RLIMIT_NOFILE above
 * fs.nr_open is refused even to root, with EPERM: the spawn fails with
 * -EPERM, the exit is the exec's ("exec") and the STOPPED "spawn-aborted"
 * detail names the error; the program never ran. */
START_TEST(test_rlimit_exec_refused)
{
    char text[64];
    ck_assert_int_gt(pm_test_read_file("/proc/sys/fs/nr_open", text, sizeof(text)), 0);
    uint64_t over = strtoull(text, NULL, 10) + 1;
    pm_options *o = opts(1);
    exec_sleeper(o);
    ck_assert_int_eq(pm_options_set_rlimit(o, RLIMIT_NOFILE, over, over), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EPERM);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    const rec *r = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_msg(r != NULL, "no EXITED event");
    ck_assert_str_eq(r->reason, "exec");
    r = find(PM_EVENT_STOPPED, 0, 0);
    ck_assert_msg(r != NULL, "no STOPPED event");
    ck_assert_str_eq(r->reason, "spawn-aborted");
    ck_assert_msg(strstr(r->detail, pm_strerror(-EPERM)) != NULL, "detail: %s", r->detail);
    assert_all_started_gone();
}
END_TEST

/* Removes dir and the files in it. */
static void remove_dir(const char *dir)
{
    DIR *d = opendir(dir);
    ck_assert_ptr_nonnull(d);
    for (struct dirent *e = readdir(d); e != NULL; e = readdir(d))
        if (strcmp(e->d_name, ".") != 0 && strcmp(e->d_name, "..") != 0)
            ck_assert_msg(unlinkat(dirfd(d), e->d_name, 0) == 0, "unlink %s/%s: %s", dir,
                          e->d_name, strerror(errno));
    closedir(d);
    ck_assert_int_eq(rmdir(dir), 0);
}

/* design.md, Core dumps: "procmesh never writes kernel.core_pattern"
 * (pm_options(3): it "changes no more than it changes the workers' working
 * directory"). A cluster with a core directory whose first worker crashes
 * (a shell's SIGSEGV; its core goes wherever the host's pattern says: into
 * the core directory, our working directory meanwhile, for a relative one),
 * and its replacement: the pattern is the same after. As root, in a mount
 * namespace of this test's own, a file of ours stands in for the sysctl
 * meanwhile, so that any write lands there, one of the same text too (its
 * modification time moves), and the host's pattern is never at risk. */
START_TEST(test_core_pattern_untouched)
{
    static const char sysctl[] = "/proc/sys/kernel/core_pattern";
    char before[512], after[512], standin[] = "/tmp/pm-corepat-XXXXXX";
    ck_assert_msg(pm_test_read_file(sysctl, before, sizeof(before)) > 0, "cannot read %s", sysctl);
    int fd = mkstemp(standin);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, before, strlen(before)), (ssize_t)strlen(before));
    close(fd);
    const struct timespec long_ago[2] = {{946684800, 0}, {946684800, 0}}; /* 2000-01-01 */
    ck_assert_int_eq(utimensat(AT_FDCWD, standin, long_ago, 0), 0);
    const char *no_standin =
        geteuid() != 0 ? "needs root"
        : unshare(CLONE_NEWNS) < 0 ? "unshare(CLONE_NEWNS) refused"
        : mount(NULL, "/", NULL, MS_REC | MS_PRIVATE, NULL) < 0 ? "cannot make the mounts private"
        : mount(standin, sysctl, NULL, MS_BIND, NULL) < 0 ? "cannot bind a file over the sysctl"
        : NULL;
    if (no_standin != NULL)
        fprintf(stderr, "note: test_core_pattern_untouched compares the pattern only, without a "
                        "stand-in (%s)\n", no_standin);

    char dir[] = "/tmp/pm-cores-XXXXXX", cwd[4096];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    ck_assert_ptr_nonnull(getcwd(cwd, sizeof(cwd)));
    ck_assert_int_eq(chdir(dir), 0);
    pm_options *o = opts(1);
    ck_assert_int_eq(pm_options_set_core_dir(o, dir), 0);
    /* The first incarnation leaves a mark and crashes; the next one runs. */
    char *argv[] = {"sh", "-c",
                    "if [ -e crashed ]; then exec sleep 1000; fi; : > crashed; kill -SEGV $$", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    pm_cluster *c = spawn_free(o);
    RUN_UNTIL(c, find(PM_EVENT_READY, 0, 1) != NULL, 20000);
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->signal, SIGSEGV);
    pm_cluster_terminate(c);
    ck_assert_int_eq(chdir(cwd), 0);
    remove_dir(dir);

    ck_assert_msg(pm_test_read_file(sysctl, after, sizeof(after)) > 0, "cannot read %s", sysctl);
    ck_assert_msg(strcmp(after, before) == 0, "kernel.core_pattern was '%s', is '%s'", before,
                  after);
    if (no_standin == NULL) {
        struct stat st;
        ck_assert_int_eq(stat(standin, &st), 0);
        ck_assert_msg(st.st_mtim.tv_sec == long_ago[1].tv_sec,
                      "the stand-in for kernel.core_pattern was written (modified at %lld)",
                      (long long)st.st_mtim.tv_sec);
        ck_assert_int_eq(umount(sysctl), 0);
        ck_assert_msg(pm_test_read_file(sysctl, after, sizeof(after)) > 0 &&
                          strcmp(after, before) == 0,
                      "kernel.core_pattern was '%s', is '%s'", before, after);
    }
    ck_assert_int_eq(unlink(standin), 0);
}
END_TEST

/* ------------------------------------------------------------ scratch tree */

static char scratch[256];

static void put(const char *rel, const char *text)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", scratch, rel);
    int fd = open(path, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0644);
    ck_assert_msg(fd >= 0, "create %s: %s", path, strerror(errno));
    ck_assert_int_eq(write(fd, text, strlen(text)), (ssize_t)strlen(text));
    close(fd);
}

static void get(const char *rel, char *buf, size_t size)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", scratch, rel);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_msg(fd >= 0, "open %s", path);
    pm_test_read_all(fd, buf, size);
    close(fd);
}

static void sub(const char *rel)
{
    char path[512];
    snprintf(path, sizeof(path), "%s/%s", scratch, rel);
    ck_assert_int_eq(mkdir(path, 0755), 0);
}

START_TEST(test_parsers)
{
    /* A cluster directory's name, one row a rule (ns 77). */
    static const struct {
        const char *name;
        long pid;
    } dirs[] = {
        {"procmesh.123.77.4", 123},  {"procmesh.123.77", 123},     {"procmesh.123.78.4", -1},
        {"procmesh.123.7.4", -1},    {"procmesh.123.77.", -1},     {"procmesh.123.77.4x", -1},
        {"procmesh.123.77x", -1},    {"procmesh.123", -1},         {"procmesh.0.77.1", -1},
        {"procmesh.-5.77.1", -1},    {"procmesh.+5.77.1", -1},     {"procmesh. 5.77.1", -1},
        {"procmesh.5..77", -1},      {"procmesh.5.+77", -1},       {"procmesh.", -1},
        {"procmesh5.77.1", -1},      {"other.5.77.1", -1},         {"procmesh.5.77.1.2", -1},
        {"procmesh.99999999999999999999.77.1", -1},
        {"procmesh.5.99999999999999999999999.1", -1},
    };
    for (size_t i = 0; i < ARRAY_LEN(dirs); i++)
        ck_assert_msg(pm__cg_cluster_dir_pid(dirs[i].name, 77) == dirs[i].pid, "%s: %ld, not %ld", dirs[i].name,
                      pm__cg_cluster_dir_pid(dirs[i].name, 77), dirs[i].pid);

    char v2[PM__CG_PATH], v1[PM__CG_NCTRL][PM__CG_PATH];
    ck_assert_int_eq(pm__cg_parse_self("12:pids:/a\n4:memory:/process_api/x\n2:cpu,cpuacct:/c\n"
                                       "0::/sys.slice/p.service\n",
                                       v2, sizeof(v2), v1), 0);
    ck_assert_str_eq(v2, "/sys.slice/p.service");
    ck_assert_str_eq(v1[PM__CG_MEMORY], "/process_api/x");
    ck_assert_str_eq(v1[PM__CG_PIDS], "/a");
    ck_assert_str_eq(v1[PM__CG_CPU], "/c");
    ck_assert_int_eq(pm__cg_parse_self("garbage\n", v2, sizeof(v2), v1), -EINVAL);

    char m2[PM__CG_PATH], r2[PM__CG_PATH], m1[PM__CG_NCTRL][PM__CG_PATH], r1[PM__CG_NCTRL][PM__CG_PATH];
    pm__cg_parse_mounts("31 30 0:28 / /sys/fs/cgroup/cpu,cpuacct rw - cgroup cgroup rw,cpu,cpuacct\n"
                        "34 30 0:31 / /sys/fs/cgroup/memory rw - cgroup cgroup rw,memory\n"
                        "40 30 0:37 /sys.slice /sys/fs/cgroup/uni\\040fied rw shared:9 - cgroup2 "
                        "cgroup2 rw\n",
                        m2, r2, m1, r1);
    ck_assert_str_eq(m2, "/sys/fs/cgroup/uni fied");
    ck_assert_str_eq(r2, "/sys.slice");
    ck_assert_str_eq(m1[PM__CG_CPU], "/sys/fs/cgroup/cpu,cpuacct");
    ck_assert_str_eq(m1[PM__CG_MEMORY], "/sys/fs/cgroup/memory");
    ck_assert_str_eq(m1[PM__CG_PIDS], "");

    char out[PM__CG_PATH];
    ck_assert_int_eq(pm__cg_join(out, sizeof(out), "/m", "/", "/a/b"), 0);
    ck_assert_str_eq(out, "/m/a/b");
    ck_assert_int_eq(pm__cg_join(out, sizeof(out), "/m", "/", "/"), 0);
    ck_assert_str_eq(out, "/m");
    ck_assert_int_eq(pm__cg_join(out, sizeof(out), "/m", "/sys.slice", "/sys.slice/p"), 0);
    ck_assert_str_eq(out, "/m/p");
    ck_assert_int_eq(pm__cg_join(out, sizeof(out), "/m", "/sys.slice", "/other/p"), -ENOENT);
    ck_assert_int_eq(pm__cg_join(out, sizeof(out), "/m", "/sys", "/sys.slice"), -ENOENT);

    ck_assert_int_eq(pm__cg_parse_populated("populated 1\nfrozen 0\n"), 1);
    ck_assert_int_eq(pm__cg_parse_populated("frozen 0\npopulated 0\n"), 0);
    ck_assert_int_eq(pm__cg_parse_populated("frozen 0\n"), -EINVAL);
    ck_assert_int_eq(pm__cg_parse_oom_kill("low 0\nhigh 0\nmax 9\noom 2\noom_kill 2\n"), 2);
    ck_assert_int_eq(pm__cg_parse_oom_kill("oom_kill_disable 0\nunder_oom 0\noom_kill 7\n"), 7);
    ck_assert_int_eq(pm__cg_parse_oom_kill("oom 1\n"), -1);
    ck_assert_int_eq(pm__cg_has_word("cpuset cpu io memory pids\n", "memory"), 1);
    ck_assert_int_eq(pm__cg_has_word("cpuset cpu io memory pids\n", "cpuacct"), 0);
}
END_TEST

/* The v2 file handling, on a scratch directory standing in for cgroupfs:
 * discovery, the controllers enabled, limits written, the OOM count read
 * from memory.events, an empty cgroup seen as such. */
/* The end of s's incarnation in the scratch tree, its current leaf below
 * slot never emptying (its stand-in cgroup.events keeps saying populated
 * 1): the wait is bounded and says so, the leaf is killed. */
static void end_never_empty(pm__cg_slot *s, const char *slot)
{
    char f[160];
    unsigned oom;
    snprintf(f, sizeof(f), "%s/g%u/cgroup.events", slot, s->gen);
    put(f, "populated 1\nfrozen 0\n");
    ck_assert_int_eq(pm__cg_slot_end(s, 50, &oom), -ETIMEDOUT);
}

/* A leaf's files, as cgroupfs gives a cgroup (leaf g<gen> of slot, a
 * path in the scratch tree), or their removal, as cgroupfs lets a cgroup
 * go once it is empty (an rmdir of the leaf then works). */
static const char *const leaf_files[] = {"cgroup.procs", "cgroup.kill", "cgroup.events"};

static void leaf_files_made(const char *slot, unsigned gen)
{
    char f[200];
    for (size_t i = 0; i < ARRAY_LEN(leaf_files); i++) {
        snprintf(f, sizeof(f), "%s/g%u/%s", slot, gen, leaf_files[i]);
        put(f, strcmp(leaf_files[i], "cgroup.events") == 0 ? "populated 0\nfrozen 0\n" : "");
    }
}

static void leaf_files_gone(const char *slot, unsigned gen)
{
    char full[600];
    for (size_t i = 0; i < ARRAY_LEN(leaf_files); i++) {
        snprintf(full, sizeof(full), "%s/%s/g%u/%s", scratch, slot, gen, leaf_files[i]);
        ck_assert_int_eq(unlink(full), 0);
    }
}

/* 1 when scratch/rel exists. */
static int there(const char *rel)
{
    char path[512];
    struct stat st;
    snprintf(path, sizeof(path), "%s/%.200s", scratch, rel);
    return stat(path, &st) == 0;
}

START_TEST(test_sweep_stale)
{
    /* cgroup.c sweep_stale, at a cluster's setup, on a scratch tree (plain
     * directories, which rmdir removes when empty as cgroupfs does): what
     * a supervisor killed before its cleanup left in the parent goes,
     * procmesh.<pid>.<ns>.<k> and the older procmesh.<pid>.<ns> with their
     * slot<N>/g<K>, when the pid is dead in our pid namespace; a live
     * pid's, another namespace's, a name with anything after the number,
     * and anything not procmesh's stay. */
    snprintf(scratch, sizeof(scratch), "/tmp/pm-cg-sweep.%d", (int)getpid());
    ck_assert_int_eq(mkdir(scratch, 0755), 0);
    sub("svc");
    put("svc/cgroup.controllers", "");
    struct stat st;
    ck_assert_int_eq(stat("/proc/self/ns/pid", &st), 0);
    unsigned long long ns = (unsigned long long)st.st_ino;
    pid_t dead = pm_test_fork();
    ck_assert_int_ge(dead, 0);
    if (dead == 0)
        _exit(0);
    pm_test_reap(dead, 10000);
    ck_assert_int_eq(kill(dead, 0), -1);
    char rel[40][128];
    int gone[40], n = 0;
#define DIR_(want_gone, ...)                                        \
    do {                                                            \
        snprintf(rel[n], sizeof(rel[n]), __VA_ARGS__);              \
        sub(rel[n]);                                                \
        gone[n++] = (want_gone);                                    \
    } while (0)
    DIR_(1, "svc/procmesh.%d.%llu.3", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu.3/slot0", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu.3/slot0/g1", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu.3/slot1", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu/slot0", (int)dead, ns);
    DIR_(1, "svc/procmesh.%d.%llu/slot0/g2", (int)dead, ns);
    DIR_(0, "svc/procmesh.%d.%llu.1", (int)getppid(), ns);       /* alive */
    DIR_(0, "svc/procmesh.%d.%llu.1", (int)dead, ns + 1);        /* another namespace */
    DIR_(0, "svc/procmesh.%d.%llu.1x", (int)dead, ns);           /* not a number */
    DIR_(0, "svc/procmesh.%d.%llu.", (int)dead, ns);
    DIR_(0, "svc/procmesh.%d.%llux", (int)dead, ns);
    DIR_(0, "svc/procmesh.%d", (int)dead);
    DIR_(0, "svc/other.%d.%llu.1", (int)dead, ns);
    /* Ours by name, from before us (our pid come back, or an execve): the
     * next number has a slot (and may hold processes), the one after it
     * is empty. The setup takes neither the first, nor a name ahead. */
    unsigned next = atomic_load(&pm__cg_clusters) + 1;
    DIR_(0, "svc/procmesh.%d.%llu.%u", (int)getpid(), ns, next);
    DIR_(0, "svc/procmesh.%d.%llu.%u/slot0", (int)getpid(), ns, next);
#undef DIR_
    char mi[512];
    snprintf(mi, sizeof(mi), "40 30 0:37 / %s rw - cgroup2 cgroup2 rw\n", scratch);
    pm__cg_limits none;
    memset(&none, 0, sizeof(none));
    pm__cg_root r;
    ck_assert_int_eq(pm__cg_root_setup(&r, "0::/svc\n", mi, &none), 0);
    ck_assert_int_eq(r.mode, PM_CONTAIN_CGROUP);
    for (int i = 0; i < n; i++)
        ck_assert_msg(there(rel[i]) == !gone[i], "%s %s", rel[i], gone[i] ? "left" : "removed");
    /* Ours, made by the setup, is procmesh.<pid>.<ns>.<k>, past the one
     * with a slot. */
    char mine[128], want[128];
    snprintf(mine, sizeof(mine), "svc/%s", r.name);
    snprintf(want, sizeof(want), "procmesh.%d.%llu.%u", (int)getpid(), ns, next + 1);
    ck_assert_str_eq(r.name, want);
    ck_assert(there(mine));
    pm__cg_root_close(&r);
    ck_assert(!there(mine));
    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", scratch);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_scratch_v2)
{
    /* fd 0 free, as in a supervisor started without stdin: a leaf's
     * directory may be fd 0 (the slot's directory takes it first, then
     * the leaf a kill rotates to), and it is a leaf like any. */
    close(0);
    snprintf(scratch, sizeof(scratch), "/tmp/pm-cg-scratch.%d", (int)getpid());
    ck_assert_int_eq(mkdir(scratch, 0755), 0);
    sub("svc");
    put("svc/cgroup.controllers", "cpu io memory pids\n");
    put("svc/cgroup.subtree_control", "");
    char own[96], slot[128];
    struct stat ns;
    ck_assert_int_eq(stat("/proc/self/ns/pid", &ns), 0);
    /* This process's next cluster number: the directory the setup below
     * makes (cgroup.h, pm__cg_clusters). */
    snprintf(own, sizeof(own), "svc/procmesh.%d.%llu.%u", (int)getpid(), (unsigned long long)ns.st_ino,
             atomic_load(&pm__cg_clusters) + 1);
    snprintf(slot, sizeof(slot), "%s/slot0", own);
    /* Directories cgroupfs would fill in: made ahead with their files.
     * The cluster's directory without its slot: an existing one that
     * holds a slot is another process's, and the setup would take the
     * next number (test_sweep_stale). */
    sub(own);
    char f[160];
    snprintf(f, sizeof(f), "%s/cgroup.subtree_control", own);
    put(f, "");
    snprintf(f, sizeof(f), "%s/cgroup.kill", own);
    put(f, "");

    char mi[512];
    snprintf(mi, sizeof(mi), "40 30 0:37 / %s rw - cgroup2 cgroup2 rw\n", scratch);
    pm__cg_limits lim = {256u << 20, 32, 50000, 100000};
    pm__cg_root r;
    ck_assert_int_eq(pm__cg_root_setup(&r, "0::/svc\n", mi, &lim), 0);
    ck_assert_int_eq(r.mode, PM_CONTAIN_CGROUP);
    ck_assert_int_eq(r.has_kill, 1);
    ck_assert_int_eq(r.v2_ctrl[PM__CG_MEMORY] + r.v2_ctrl[PM__CG_PIDS] + r.v2_ctrl[PM__CG_CPU], 3);
    char buf[256];
    get("svc/cgroup.subtree_control", buf, sizeof(buf));
    ck_assert_msg(strstr(buf, "+cpu") != NULL, "subtree_control: '%s'", buf);

    sub(slot);
    const char *files[] = {"memory.max", "memory.swap.max", "pids.max", "cpu.max"};
    for (size_t i = 0; i < ARRAY_LEN(files); i++) {
        snprintf(f, sizeof(f), "%s/%s", slot, files[i]);
        put(f, "");
    }
    /* The slot's limits are in slot0, its processes in a leaf below it:
     * g1 for the first incarnation, g2 for the one after a kill, g3 after
     * a second. */
    for (unsigned g = 1; g <= 3; g++) {
        snprintf(f, sizeof(f), "%s/g%u", slot, g);
        sub(f);
        leaf_files_made(slot, g);
    }
    snprintf(f, sizeof(f), "%s/memory.events", slot);
    put(f, "low 0\nhigh 0\nmax 0\noom 0\noom_kill 1\n");

    pm__cg_slot s;
    memset(&s, 0, sizeof(s)); /* every fd the open does not set would read 0: open (zero) sets them */
    char why[256] = "";
    ck_assert_msg(pm__cg_slot_open(&r, 0, &lim, &s, why, sizeof(why)) == 0, "%s", why);
    ck_assert_int_eq(s.standby_procs_fd, -1);
    ck_assert_int_eq(s.standby_leaf.dir_fd, -1);
    ck_assert_int_eq(s.standby_leaf.procs_fd, -1);
    ck_assert_int_eq(s.standby_leaf.events_fd, -1);
    snprintf(f, sizeof(f), "%s/memory.max", slot);
    get(f, buf, sizeof(buf));
    ck_assert_str_eq(buf, "268435456");
    snprintf(f, sizeof(f), "%s/pids.max", slot);
    get(f, buf, sizeof(buf));
    ck_assert_str_eq(buf, "32");
    snprintf(f, sizeof(f), "%s/cpu.max", slot);
    get(f, buf, sizeof(buf));
    ck_assert_str_eq(buf, "50000 100000");
    ck_assert_int_eq(s.oom_base, 1);
    ck_assert_int_eq(pm__cg_slot_populated(&s), 0);

    /* The kernel counted two more OOM kills in this incarnation. */
    snprintf(f, sizeof(f), "%s/memory.events", slot);
    put(f, "low 0\nhigh 0\nmax 4\noom 2\noom_kill 3\n");
    unsigned oom = 9;
    ck_assert_int_eq(pm__cg_slot_end(&s, 100, &oom), 0);
    ck_assert_int_eq(oom, 2);
    ck_assert_int_eq(pm__cg_slot_end(&s, 100, &oom), 0);
    ck_assert_int_eq(oom, 0);

    /* Never empties (a stand-in file that keeps saying populated 1): the
     * wait is bounded and says so. */
    ck_assert_int_eq(s.gen, 1);
    end_never_empty(&s, slot);
    /* g1 was killed: the next incarnation gets g2 (never a killed leaf),
     * and g1 is the one to remove once it empties. */
    ck_assert_int_eq(s.killed, 0);
    ck_assert_int_eq(s.gen, 2);
    ck_assert_int_eq(s.retired, 1);
    ck_assert_int_eq(pm__cg_slot_populated(&s), 0);
    /* Once g2's incarnation is ready (pm__cg_slot_prepare): g1, empty now
     * (its files gone, as cgroupfs lets a cgroup go), is removed through
     * g2's ".."; the leaf for the next kill, g3, is made ahead and held by
     * no fd. */
    char full[512];
    leaf_files_gone(slot, 1);
    pm__cg_slot_prepare(&s);
    snprintf(full, sizeof(full), "%s/%s/g1", scratch, slot);
    ck_assert_msg(access(full, F_OK) < 0 && errno == ENOENT, "the retired leaf %s is still there", full);
    ck_assert_int_eq(s.retired, 0);
    ck_assert_uint_eq(s.next_gen, 3);
    snprintf(f, sizeof(f), "%s/g3", slot);
    ck_assert_int_eq(pm_test_fds_to(f), 0);
    /* A second kill takes g3, the leaf made ahead; g2 is retired. */
    end_never_empty(&s, slot);
    ck_assert_int_eq(s.gen, 3);
    ck_assert_int_eq(s.retired, 2);
    ck_assert_uint_eq(s.next_gen, 0);
    ck_assert_int_eq(pm__cg_slot_populated(&s), 0);

    /* A warm standby's leaves (pm__cg_slot_advance). g2 empties and goes
     * at the next ready, which makes g4 ahead (its files put in, as
     * cgroupfs would). */
    leaf_files_gone(slot, 2);
    pm__cg_slot_prepare(&s);
    ck_assert_int_eq(s.retired, 0);
    ck_assert_uint_eq(s.next_gen, 4);
    leaf_files_made(slot, 4);
    /* The standby's fork gets g4's cgroup.procs (standby_procs_fd); the
     * leaf (its directory, cgroup.procs, cgroup.events) stays open while
     * the standby waits, so that its take opens nothing. */
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 4);
    snprintf(f, sizeof(f), "%s/g4", slot);
    ck_assert_int_eq(pm_test_fds_to(f), 3);
    ck_assert_int_eq(s.standby_procs_fd, s.standby_leaf.procs_fd);
    pm__cg_slot_standby_close(&s);
    ck_assert_int_eq(s.standby_procs_fd, -1);
    ck_assert_int_eq(pm_test_fds_to(f), 3);
    /* Dropped (the standby ended): no fd on g4, still the leaf ahead. */
    pm__cg_slot_standby_drop(&s);
    ck_assert_int_eq(pm_test_fds_to(f), 0);
    ck_assert_int_eq(s.standby_leaf.dir_fd, -1);
    ck_assert_int_eq(s.standby_leaf.procs_fd, -1);
    ck_assert_int_eq(s.standby_leaf.events_fd, -1);
    ck_assert_uint_eq(s.next_gen, 4);
    /* Dropped before its fork was over (no close): the alias goes too. */
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 4);
    pm__cg_slot_standby_drop(&s);
    ck_assert_int_eq(s.standby_procs_fd, -1);
    ck_assert_int_eq(pm_test_fds_to(f), 0);
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 4);
    pm__cg_slot_standby_close(&s);
    int held = s.standby_leaf.dir_fd;
    /* A leaf that is neither the current one nor the one ahead: refused,
     * nothing changed (the caller moves the standby instead). */
    ck_assert_int_eq(pm__cg_slot_advance(&s, 0), -ESTALE);
    ck_assert_int_eq(pm__cg_slot_advance(&s, 2), -ESTALE);
    ck_assert_int_eq(pm__cg_slot_advance(&s, 5), -ESTALE);
    ck_assert_int_eq(s.gen, 3);
    ck_assert_uint_eq(s.next_gen, 4);
    ck_assert_int_eq(s.standby_leaf.dir_fd, held);
    /* Taken from g4 while g3 is empty: g4 is the slot's, through the fds
     * the standby's leaf held (none opened), g3 the leaf ahead (the next
     * standby's), none retired, no fd held on g3. */
    ck_assert_int_eq(pm__cg_slot_advance(&s, 4), 0);
    ck_assert_int_eq(s.dir_fd, held);
    ck_assert_int_eq(s.standby_leaf.dir_fd, -1);
    ck_assert_int_eq(pm_test_fds_to(f), 3);
    ck_assert_int_eq(s.gen, 4);
    ck_assert_uint_eq(s.next_gen, 3);
    ck_assert_int_eq(s.retired, 0);
    ck_assert_int_eq(pm__cg_slot_populated(&s), 0); /* g4's files, open */
    snprintf(f, sizeof(f), "%s/g3", slot);
    ck_assert_int_eq(pm_test_fds_to(f), 0);
    ck_assert_int_eq(pm__cg_slot_advance(&s, 4), 0); /* already the slot's */
    ck_assert_int_eq(s.gen, 4);
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 3);
    pm__cg_slot_standby_close(&s);
    /* Taken from g3 while g4 still holds a process (a kill that could not
     * be written): g4 is retired, never the leaf ahead. */
    snprintf(f, sizeof(f), "%s/g4/cgroup.events", slot);
    put(f, "populated 1\nfrozen 0\n");
    ck_assert_int_eq(pm__cg_slot_advance(&s, 3), 0);
    ck_assert_int_eq(s.gen, 3);
    ck_assert_int_eq(s.retired, 4);
    ck_assert_uint_eq(s.next_gen, 0);
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 0); /* none ahead until the next ready */
    ck_assert_int_eq(s.standby_procs_fd, -1);
    ck_assert_int_eq(pm__cg_slot_advance(&s, 0), -ESTALE); /* none ahead, none joined */
    /* Two kills before a ready: g3 is killed with g4 still retired (g4
     * empty by now, g5 made ahead by hand as pm__cg_slot_prepare would
     * make it, and a standby waiting in it): the older retired leaf, g4,
     * is removed at once, g3 retired, and g5 is the slot's through the
     * standby leaf's fds. */
    leaf_files_gone(slot, 4);
    snprintf(f, sizeof(f), "%s/g5", slot);
    sub(f);
    leaf_files_made(slot, 5);
    s.last_gen = s.next_gen = 5;
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 5);
    pm__cg_slot_standby_close(&s);
    held = s.standby_leaf.dir_fd;
    end_never_empty(&s, slot);
    ck_assert_int_eq(s.gen, 5);
    ck_assert_int_eq(s.dir_fd, held);
    ck_assert_int_eq(s.standby_leaf.dir_fd, -1);
    ck_assert_int_eq(s.retired, 3);
    snprintf(full, sizeof(full), "%s/%s/g4", scratch, slot);
    ck_assert_msg(access(full, F_OK) < 0 && errno == ENOENT, "the older retired leaf %s is still there", full);
    /* Closed while a standby waits (here in the current leaf, g5, named
     * as the one ahead): every fd, the standby leaf's too, closed and
     * forgotten. */
    s.next_gen = 5;
    ck_assert_uint_eq(pm__cg_slot_standby_open(&s), 5);
    pm__cg_slot_standby_close(&s);
    pm__cg_slot_close_fds(&s);
    ck_assert_int_eq(s.dir_fd, -1);
    ck_assert_int_eq(s.procs_fd, -1);
    ck_assert_int_eq(s.events_fd, -1);
    ck_assert_int_eq(s.standby_leaf.dir_fd, -1);
    ck_assert_int_eq(s.standby_leaf.procs_fd, -1);
    ck_assert_int_eq(s.standby_leaf.events_fd, -1);
    snprintf(f, sizeof(f), "%s/g5", slot);
    ck_assert_int_eq(pm_test_fds_to(f), 0);

    /* A limit without any controller for it: refused, with the reason. */
    pm__cg_root r2;
    put("svc/cgroup.controllers", "cpu io\n");
    pm__cg_limits mem = {256u << 20, 0, 0, 0};
    ck_assert_int_eq(pm__cg_root_setup(&r2, "0::/svc\n", mi, &mem), -EOPNOTSUPP);
    ck_assert_msg(strstr(r2.why, "memory") != NULL, "why: %s", r2.why);
    /* No v2 tree at all: process groups, and a limit is refused. */
    ck_assert_int_eq(pm__cg_root_setup(&r2, "0::/svc\n", "", &mem), -EOPNOTSUPP);
    pm__cg_limits none = {0, 0, 0, 0};
    ck_assert_int_eq(pm__cg_root_setup(&r2, "0::/svc\n", "", &none), 0);
    ck_assert_int_eq(r2.mode, PM_CONTAIN_PROCESS_GROUP);
    ck_assert_msg(strstr(r2.why, "process group") != NULL, "why: %s", r2.why);

    char cmd[300];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", scratch);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

/* ------------------------------------------------------------ a delegated cgroup holding procmesh */

START_TEST(test_enable_decide)
{
    unsigned n = 9;
    /* Alone in a cgroup that refuses: move into a leaf. */
    ck_assert_int_eq(pm__cg_enable_decide(-EBUSY, 0, "42\n", 42, &n), PM__CG_ENABLE_MOVE_SELF);
    ck_assert_int_eq(n, 0);
    /* Others beside it (a pid of another namespace reads 0): counted, no move. */
    ck_assert_int_eq(pm__cg_enable_decide(-EBUSY, 0, "41\n42\n0\n", 42, &n), PM__CG_ENABLE_SHARED);
    ck_assert_int_eq(n, 2);
    ck_assert_int_eq(pm__cg_enable_decide(-EBUSY, 0, "7\n", 42, &n), PM__CG_ENABLE_SHARED);
    ck_assert_int_eq(n, 1);
    /* The root, another error, or a cgroup we are not in: the error stands. */
    ck_assert_int_eq(pm__cg_enable_decide(-EBUSY, 1, "42\n", 42, &n), PM__CG_ENABLE_FAIL);
    ck_assert_int_eq(pm__cg_enable_decide(-EACCES, 0, "42\n", 42, &n), PM__CG_ENABLE_FAIL);
    ck_assert_int_eq(pm__cg_enable_decide(-EBUSY, 0, "", 42, &n), PM__CG_ENABLE_FAIL);
}
END_TEST

/* The test process's own v2 cgroup directory, and a controller it offers
 * its children ("memory" when it can, for the cluster case). */
static char deleg_own[PM__CG_PATH];
static char deleg_ctrl[16];
static int deleg_enabled; /* enabled by deleg_probe: disabled again at the end */

/* why, for a skip: 77. */
static int skip_why(char *why, size_t size, const char *fmt, ...) __attribute__((format(printf, 3, 4)));
static int skip_why(char *why, size_t size, const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    if (vsnprintf(why, size, fmt, ap) < 0)
        why[0] = '\0';
    va_end(ap);
    return 77;
}

/* Whether cgroups can be made below our own v2 cgroup with a controller
 * enabled: 0, or 77 with why. Enables the controller in our own cgroup's
 * subtree_control when it is not (the test runs as root). */
static int deleg_probe(char *why, size_t size)
{
    char self[4096], mi[1 << 16], rel[PM__CG_PATH], v1[PM__CG_NCTRL][PM__CG_PATH];
    char mnt[PM__CG_PATH], root[PM__CG_PATH], m1[PM__CG_NCTRL][PM__CG_PATH],
        r1[PM__CG_NCTRL][PM__CG_PATH], text[512], path[PM__CG_PATH + 64];
    int fd = open("/proc/self/cgroup", O_RDONLY | O_CLOEXEC), fd2 = open("/proc/self/mountinfo", O_RDONLY | O_CLOEXEC);
    if (fd < 0 || fd2 < 0)
        return skip_why(why, size, "no /proc");
    pm_test_read_all(fd, self, sizeof(self));
    pm_test_read_all(fd2, mi, sizeof(mi));
    close(fd);
    close(fd2);
    pm__cg_parse_mounts(mi, mnt, root, m1, r1);
    if (geteuid() != 0 || pm__cg_parse_self(self, rel, sizeof(rel), v1) < 0 || rel[0] == '\0' ||
        mnt[0] == '\0' || pm__cg_join(deleg_own, sizeof(deleg_own), mnt, root, rel) < 0)
        return skip_why(why, size, "needs root and a cgroup v2 tree");
    snprintf(path, sizeof(path), "%s/cgroup.controllers", deleg_own);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    text[0] = '\0';
    if (fd >= 0) {
        pm_test_read_all(fd, text, sizeof(text));
        close(fd);
    }
    const char *pick[] = {"memory", "pids", "cpu", "hugetlb", "io"};
    deleg_ctrl[0] = '\0';
    for (size_t i = 0; i < ARRAY_LEN(pick) && deleg_ctrl[0] == '\0'; i++)
        if (pm__cg_has_word(text, pick[i]))
            snprintf(deleg_ctrl, sizeof(deleg_ctrl), "%s", pick[i]);
    if (deleg_ctrl[0] == '\0')
        return skip_why(why, size, "the cgroup v2 tree offers no controller here");
    char plus[24];
    snprintf(plus, sizeof(plus), "+%s", deleg_ctrl);
    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", deleg_own);
    fd = open(path, O_RDONLY | O_CLOEXEC);
    text[0] = '\0';
    if (fd >= 0) {
        pm_test_read_all(fd, text, sizeof(text));
        close(fd);
    }
    if (pm__cg_has_word(text, deleg_ctrl))
        return 0;
    deleg_enabled = 1;
    fd = open(path, O_WRONLY | O_CLOEXEC);
    int ok = fd >= 0 && write(fd, plus, strlen(plus)) == (ssize_t)strlen(plus);
    int e = errno;
    if (fd >= 0)
        close(fd);
    if (!ok)
        return skip_why(why, size, "cannot enable %s below %s: %s", deleg_ctrl, deleg_own,
                        strerror(e));
    return 0;
}

static void write_file(const char *path, const char *text)
{
    int fd = open(path, O_WRONLY | O_CLOEXEC);
    if (fd < 0 || write(fd, text, strlen(text)) != (ssize_t)strlen(text))
        _exit(110);
    close(fd);
}

/* The cgroup v2 path of process pid ("0::/a/b" -> "/a/b"). */
static void cgroup_of(pid_t pid, char *out, size_t size)
{
    char path[64], text[2048];
    snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    out[0] = '\0';
    if (fd < 0)
        return;
    pm_test_read_all(fd, text, sizeof(text));
    close(fd);
    const char *p = strstr(text, "0::");
    if (p != NULL && (p == text || p[-1] == '\n'))
        snprintf(out, size, "%.*s", (int)strcspn(p + 3, "\n"), p + 3);
}

static char spawn_why[320];
static void on_deleg_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_STOPPED && e->detail != NULL && spawn_why[0] == '\0')
        snprintf(spawn_why, sizeof(spawn_why), "%s", e->detail);
}

/* In the child, alone in T (or not): what a supervisor started there
 * does. The controller alone (pm__cg_enable), or a whole cluster with a
 * limit when the controller is one procmesh limits. Reports on fd: "rc
 * <n>\n", the why, then its own cgroup and (cluster) each slot's limit. */
static void deleg_child(const char *t, int cluster, int fd)
{
    char out[2048], dir[2 * PM__CG_PATH + 64], mine[PM__CG_PATH], why[512] = "";
    snprintf(dir, sizeof(dir), "%s/cgroup.procs", t);
    write_file(dir, "0");
    int rc;
    char limits[256] = "";
    if (!cluster) {
        pm__cg_root r;
        memset(&r, 0, sizeof(r));
        snprintf(dir, sizeof(dir), "%s/procmesh.test", t);
        if (mkdir(dir, 0755) < 0)
            _exit(111);
        rc = pm__cg_enable(&r, t, 0, dir, deleg_ctrl);
        snprintf(why, sizeof(why), "%s", r.why);
    } else {
        pm_options *o = pm_options_new();
        pm_options_set_workers(o, 2);
        pm_options_set_bootstrap(o, boot_ready, NULL);
        pm_options_set_on_event(o, on_deleg_event, NULL);
        pm_options_set_memory_max(o, 64u << 20);
        pm_cluster *c = NULL;
        rc = pm_cluster_spawn(o, &c);
        pm_options_free(o);
        snprintf(why, sizeof(why), "%s", spawn_why);
        if (rc == 0) {
            for (int i = 0; i < 2; i++) {
                char lim[64] = "?";
                snprintf(dir, sizeof(dir), "%s/slot%d/memory.max", c->cg.v2, i);
                int lf = open(dir, O_RDONLY | O_CLOEXEC);
                if (lf >= 0) {
                    pm_test_read_all(lf, lim, sizeof(lim));
                    close(lf);
                }
                snprintf(limits + strlen(limits), sizeof(limits) - strlen(limits), "%.*s;",
                         (int)strcspn(lim, "\n"), lim);
            }
            pm_cluster_containment(c, why, sizeof(why));
            pm_cluster_terminate(c);
        }
        /* No worker of it may be left: spawn failed or terminate ended them. */
        if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD)
            _exit(112);
    }
    cgroup_of(getpid(), mine, sizeof(mine));
    int n = snprintf(out, sizeof(out), "rc %d\nwhy %s\ncg %s\nlimits %s\n", rc, why, mine, limits);
    if (write(fd, out, (size_t)n) != n)
        _exit(113);
    _exit(0);
}

/* _i: bit 0 another process shares T, bit 1 a whole cluster. A child
 * alone in T (the unit's cgroup under Delegate=yes, systemd 252) enables
 * a controller below it: it moved into T/supervisor, T holds no process,
 * and the controller is on for T's children; a cluster's slots get their
 * limit. With another process in T: nothing is moved, and the error
 * counts it. */
START_TEST(test_delegated_cgroup)
{
    int shared = _i & 1, cluster = (_i & 2) != 0;
    if (cluster && strcmp(deleg_ctrl, "memory") != 0)
        return; /* main said so; the cluster case needs the memory controller in v2 */
    char t[PM__CG_PATH + 64], path[2 * PM__CG_PATH], rel_t[PM__CG_PATH], buf[2048];
    snprintf(t, sizeof(t), "%s/pm-deleg.%d", deleg_own, (int)getpid());
    ck_assert_int_eq(mkdir(t, 0755), 0);
    pid_t other = -1;
    if (shared) {
        other = pm_test_fork();
        if (other == 0)
            for (;;)
                pause();
        char pid[16];
        snprintf(pid, sizeof(pid), "%d", (int)other);
        snprintf(path, sizeof(path), "%s/cgroup.procs", t);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        ck_assert_int_eq(write(fd, pid, strlen(pid)), (ssize_t)strlen(pid));
        close(fd);
    }
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    pid_t kid = pm_test_fork();
    if (kid == 0) {
        close(p[0]);
        deleg_child(t, cluster, p[1]);
    }
    close(p[1]);
    pm_test_read_all(p[0], buf, sizeof(buf));
    close(p[0]);
    int st = pm_test_reap(kid, 30000);
    char other_cg[PM__CG_PATH] = "";
    if (other > 0) {
        cgroup_of(other, other_cg, sizeof(other_cg));
        kill(other, SIGKILL);
        pm_test_reap(other, 10000);
    }
    /* What T holds now, then cleaned up before any assertion. */
    char sub_ctl[256] = "";
    snprintf(path, sizeof(path), "%s/cgroup.subtree_control", t);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    if (fd >= 0) {
        pm_test_read_all(fd, sub_ctl, sizeof(sub_ctl));
        close(fd);
    }
    pm__cg_rmdir_tree(t, 3);
    int gone = access(t, F_OK) < 0;

    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %#x: %s", st, buf);
    ck_assert_msg(gone, "%s left behind", t);
    snprintf(rel_t, sizeof(rel_t), "%s", strstr(buf, "cg ") + 3);
    rel_t[strcspn(rel_t, "\n")] = '\0';
    char want[64];
    snprintf(want, sizeof(want), "/pm-deleg.%d%s", (int)getpid(), shared ? "" : "/supervisor");
    size_t lr = strlen(rel_t), lw = strlen(want);
    ck_assert_msg(lr >= lw && strcmp(rel_t + lr - lw, want) == 0, "the supervisor is in %s, "
                  "want ...%s", rel_t, want);
    if (shared) {
        ck_assert_msg(strstr(buf, "rc -95\n") != NULL, "report: %s", buf);
        ck_assert_msg(strstr(buf, "1 other process shares") != NULL &&
                      strstr(buf, "Delegate=yes") != NULL, "why: %s", buf);
        ck_assert_msg(strstr(other_cg, "/pm-deleg.") != NULL &&
                      strstr(other_cg, "/supervisor") == NULL, "the other process moved: %s",
                      other_cg);
        return;
    }
    ck_assert_msg(strstr(buf, "rc 0\n") != NULL, "report: %s", buf);
    ck_assert_msg(pm__cg_has_word(sub_ctl, deleg_ctrl), "%s not enabled below T: '%s'",
                  deleg_ctrl, sub_ctl);
    if (cluster)
        ck_assert_msg(strstr(buf, "limits 67108864;67108864;") != NULL &&
                      strstr(buf, "limits memory") != NULL, "report: %s", buf);
}
END_TEST

/* ------------------------------------------------------------ without cgroups, or none wanted */

static char first_stop[320]; /* the first STOPPED event's detail, whole */

static void on_refused_event(pm_cluster *c, const pm_event *e, void *arg)
{
    on_event(c, e, arg);
    if (e->type == PM_EVENT_STOPPED && first_stop[0] == '\0')
        snprintf(first_stop, sizeof(first_stop), "%s", e->detail != NULL ? e->detail : "(none)");
}

/* Every slot of a refused spawn: no worker started, each STOPPED
 * "spawn-aborted". */
static void assert_spawn_aborted(int nslots)
{
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 0);
    for (int slot = 0; slot < nslots; slot++) {
        const rec *r = find(PM_EVENT_STOPPED, slot, 0);
        ck_assert_msg(r != NULL, "slot %d: no STOPPED event", slot);
        ck_assert_str_eq(r->reason, "spawn-aborted");
    }
}

/* On a host where no cgroup can be made (the cgroup filesystems read-only
 * in this test's own mount namespace, as in a pod), what needs one is
 * refused, never dropped: _i 0 PM_CONTAIN_CGROUP (pm_options(3): "cgroups
 * or pm_cluster_spawn(3) fails with -EOPNOTSUPP"); _i 1, 2, 3 a memory,
 * pids or cpu limit under the default containment ("A limit that needs a
 * cgroup this host cannot give makes pm_cluster_spawn(3) fail with
 * -EOPNOTSUPP, the reason in the STOPPED "spawn-aborted" event's detail; it
 * is never silently ignored"). No worker starts, each slot is STOPPED with
 * a reason that names the cause. First the same cluster without the
 * request (_i 0): it starts, with process groups, so the refusal is the
 * request's and not a broken host's. */
START_TEST(test_contain_refused)
{
    const char *cannot = pm_test_cgroupfs_read_only();
    ck_assert_msg(cannot == NULL, "main's probe could, this test cannot: %s", cannot);
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_on_event(o, on_refused_event, NULL);
    first_stop[0] = '\0';
    pm_cluster *c = NULL;
    if (_i == 0) {
        char why[320];
        c = pm_test_spawn(o);
        ck_assert_msg(pm_cluster_containment(c, why, sizeof(why)) == PM_CONTAIN_PROCESS_GROUP,
                      "containment with the cgroup filesystems read-only: %s", why);
        pm_cluster_terminate(c);
        c = NULL;
        nev = 0;
        first_stop[0] = '\0';
        ck_assert_int_eq(pm_options_set_containment(o, PM_CONTAIN_CGROUP), 0);
    } else if (_i == 1) {
        ck_assert_int_eq(pm_options_set_memory_max(o, 64u << 20), 0);
    } else if (_i == 2) {
        ck_assert_int_eq(pm_options_set_pids_max(o, 32), 0);
    } else {
        ck_assert_int_eq(pm_options_set_cpu_max(o, 50000, 100000), 0);
    }
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EOPNOTSUPP);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    assert_spawn_aborted(2);
    ck_assert_msg(strstr(first_stop, "cgroup") != NULL &&
                      strstr(first_stop, strerror(EROFS)) != NULL,
                  "the reason does not name the cause: %s", first_stop);
    if (_i > 0)
        ck_assert_msg(strstr(first_stop, "limit") != NULL, "the reason does not name the limit: %s",
                      first_stop);
}
END_TEST

/* The directories a cluster of this process would make its cgroups in: its
 * own v2 cgroup and its own group in each v1 hierarchy procmesh uses for
 * limits ("" where there is none). */
static void own_cgroup_dirs(char dirs[1 + PM__CG_NCTRL][PM__CG_PATH])
{
    static char mi[1 << 16];
    char self[4096], rel[PM__CG_PATH], v1[PM__CG_NCTRL][PM__CG_PATH], mnt[PM__CG_PATH],
        root[PM__CG_PATH], m1[PM__CG_NCTRL][PM__CG_PATH], r1[PM__CG_NCTRL][PM__CG_PATH];
    ck_assert_int_gt(pm_test_read_file("/proc/self/cgroup", self, sizeof(self)), 0);
    ck_assert_int_gt(pm_test_read_file("/proc/self/mountinfo", mi, sizeof(mi)), 0);
    pm__cg_parse_mounts(mi, mnt, root, m1, r1);
    ck_assert_int_eq(pm__cg_parse_self(self, rel, sizeof(rel), v1), 0);
    if (mnt[0] == '\0' || rel[0] == '\0' || pm__cg_join(dirs[0], PM__CG_PATH, mnt, root, rel) < 0)
        dirs[0][0] = '\0';
    for (int i = 0; i < PM__CG_NCTRL; i++)
        if (m1[i][0] == '\0' || v1[i][0] == '\0' ||
            pm__cg_join(dirs[1 + i], PM__CG_PATH, m1[i], r1[i], v1[i]) < 0)
            dirs[1 + i][0] = '\0';
}

/* A procmesh.<our pid>.* directory in any of dirs: its name, or NULL. */
static const char *cluster_dir_in(char dirs[1 + PM__CG_NCTRL][PM__CG_PATH])
{
    static char found[PM__CG_PATH + 300];
    char prefix[32];
    snprintf(prefix, sizeof(prefix), "procmesh.%d.", (int)getpid());
    for (int i = 0; i < 1 + PM__CG_NCTRL; i++) {
        DIR *d = dirs[i][0] != '\0' ? opendir(dirs[i]) : NULL;
        struct dirent *e;
        while (d != NULL && (e = readdir(d)) != NULL) {
            if (strncmp(e->d_name, prefix, strlen(prefix)) == 0) {
                snprintf(found, sizeof(found), "%.*s/%s", PM__CG_PATH, dirs[i], e->d_name);
                closedir(d);
                return found;
            }
        }
        if (d != NULL)
            closedir(d);
    }
    return NULL;
}

/* workers that are ready at once: exec'd pm-test-worker, or forked. */
static pm_options *ready_opts(int workers, int exec)
{
    pm_options *o = opts(workers);
    if (exec)
        exec_opts(o, "ready", NULL);
    else
        pm_options_set_bootstrap(o, boot_ready, NULL);
    return o;
}

/* pm_options(3) set_containment: "PM_CONTAIN_PROCESS_GROUP: never create a
 * cgroup", here where the default makes them. Fork and exec mode: each
 * worker is in the test's own cgroups (v2 and every v1 hierarchy), in a
 * process group of its own, and no procmesh.<pid>.* directory appears
 * beside the test's cgroups. A limit under it, which needs a cgroup, is
 * refused (-EOPNOTSUPP, the reason in STOPPED) rather than given by one. */
START_TEST(test_contain_process_group)
{
    static char dirs[1 + PM__CG_NCTRL][PM__CG_PATH];
    char mine[4096], theirs[4096], path[64], why[320];
    own_cgroup_dirs(dirs);
    ck_assert_int_gt(pm_test_read_file("/proc/self/cgroup", mine, sizeof(mine)), 0);
    for (int exec = 0; exec < 2; exec++) {
        pm_options *o = ready_opts(2, exec);
        ck_assert_int_eq(pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP), 0);
        pm_cluster *c = spawn_free(o);
        ck_assert_int_eq(pm_cluster_containment(c, why, sizeof(why)), PM_CONTAIN_PROCESS_GROUP);
        for (unsigned slot = 0; slot < 2; slot++) {
            pm_slot_info si;
            ck_assert_int_eq(pm_cluster_slot_info(c, slot, &si), 0);
            snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)si.pid);
            ck_assert_int_gt(pm_test_read_file(path, theirs, sizeof(theirs)), 0);
            ck_assert_msg(strcmp(theirs, mine) == 0, "the %s worker of slot %u is in\n%snot in the "
                          "supervisor's\n%s", exec ? "exec" : "fork", slot, theirs, mine);
            ck_assert_int_eq(getpgid(si.pid), si.pid);
        }
        const char *made = cluster_dir_in(dirs);
        ck_assert_msg(made == NULL, "process-group containment made %s", made);
        pm_cluster_terminate(c);
    }
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_on_event(o, on_refused_event, NULL);
    first_stop[0] = '\0';
    ck_assert_int_eq(pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP), 0);
    ck_assert_int_eq(pm_options_set_memory_max(o, 64u << 20), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EOPNOTSUPP);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    assert_spawn_aborted(1);
    ck_assert_msg(strstr(first_stop, "limit") != NULL &&
                      strstr(first_stop, "process-group") != NULL,
                  "the reason: %s", first_stop);
    const char *made = cluster_dir_in(dirs);
    ck_assert_msg(made == NULL, "a refused process-group cluster made %s", made);
}
END_TEST


START_TEST(test_two_clusters_apart)
{
    /* Two clusters of one process at once, in fork and in exec mode: each
     * has a cgroup directory of its own (their slot 0 is not one cgroup),
     * and terminating one, which kills its slots' cgroups, leaves the
     * other's worker running: not killed, not restarted. */
    for (int exec = 0; exec < 2; exec++) {
        pm_cluster *c[2];
        pm_slot_info si[2];
        char cg[2][4096], why[2][320], path[64];
        for (int k = 0; k < 2; k++) {
            c[k] = spawn_free(ready_opts(1, exec));
            ck_assert_int_eq(pm_cluster_containment(c[k], why[k], sizeof(why[k])), PM_CONTAIN_CGROUP);
            ck_assert_int_eq(pm_cluster_slot_info(c[k], 0, &si[k]), 0);
            snprintf(path, sizeof(path), "/proc/%d/cgroup", (int)si[k].pid);
            ck_assert_int_gt(pm_test_read_file(path, cg[k], sizeof(cg[k])), 0);
        }
        ck_assert_msg(strcmp(why[0], why[1]) != 0, "both clusters in %s", why[0]);
        ck_assert_msg(strcmp(cg[0], cg[1]) != 0, "both slot 0 workers in\n%s", cg[0]);
        ck_assert_int_ge(pm_cluster_terminate(c[0]), 0);
        /* The first one's end is over: a kill of the second's worker
         * would have landed (a zombie now, or already restarted). */
        char st = pm_test_proc_state(si[1].pid);
        ck_assert_msg(st != 0 && st != 'Z' && st != 'X', "the other cluster's %s worker %d: state '%c'",
                      exec ? "exec" : "fork", (int)si[1].pid, st ? st : '?');
        pm_cluster_run(c[1], 50);
        pm_slot_info after;
        ck_assert_int_eq(pm_cluster_slot_info(c[1], 0, &after), 0);
        ck_assert_int_eq(after.pid, si[1].pid);
        ck_assert_uint_eq(after.incarnation, si[1].incarnation);
        ck_assert_int_ge(pm_cluster_terminate(c[1]), 0);
    }
}
END_TEST

/* pm_cluster(3) pm_cluster_containment: the detail in words "truncated to
 * size bytes". With the default containment and with process groups: the
 * whole detail first (a buffer far larger than it); then each size from 0
 * to past its length gives the same mode and writes within size bytes
 * only (a sentinel after them untouched), a NUL-terminated prefix of the
 * detail of size - 1 bytes or the whole, nothing for size 0; NULL detail
 * writes nothing and still says the mode. */
START_TEST(test_containment_detail_truncated)
{
    for (int pg = 0; pg < 2; pg++) {
        pm_options *o = opts(1);
        pm_options_set_bootstrap(o, boot_ready, NULL);
        if (pg)
            ck_assert_int_eq(pm_options_set_containment(o, PM_CONTAIN_PROCESS_GROUP), 0);
        pm_cluster *c = spawn_free(o);
        char full[2048];
        memset(full, '#', sizeof(full));
        int mode = pm_cluster_containment(c, full, sizeof(full));
        ck_assert(mode == PM_CONTAIN_CGROUP || mode == PM_CONTAIN_PROCESS_GROUP);
        if (pg)
            ck_assert_int_eq(mode, PM_CONTAIN_PROCESS_GROUP);
        size_t len = strnlen(full, sizeof(full));
        ck_assert_msg(len > 8 && len + 1 < sizeof(full), "the detail (%zu bytes): %.*s", len,
                      (int)(len < 200 ? len : 200), full);
        ck_assert_int_eq(pm_cluster_containment(c, NULL, 0), mode);
        ck_assert_int_eq(pm_cluster_containment(c, NULL, 64), mode);
        for (size_t size = 0; size <= len + 2; size++) {
            char buf[sizeof(full) + 16];
            memset(buf, '#', sizeof(buf));
            ck_assert_int_eq(pm_cluster_containment(c, buf, size), mode);
            size_t k = size;
            while (k < sizeof(buf) && buf[k] == '#')
                k++;
            ck_assert_msg(k == sizeof(buf), "size %zu: byte %zu written", size, k);
            if (size == 0)
                continue;
            size_t want = len < size - 1 ? len : size - 1;
            ck_assert_msg(strnlen(buf, size) == want, "size %zu: %zu bytes before the NUL, want %zu",
                          size, strnlen(buf, size), want);
            ck_assert(memcmp(buf, full, want) == 0);
        }
        ck_assert_int_eq(pm_cluster_terminate(c), 0);
    }
}
END_TEST

/* ------------------------------------------------------------ no worker holds a cgroup.kill */

/* Fork mode: the report of what the worker holds (inspect.h) to the test
 * through tree_pipe, once ready; then it serves. */
static int boot_inspect(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    int fd = dup(tree_pipe[1]);
    FILE *out = fd >= 0 ? fdopen(fd, "w") : NULL;
    if (out == NULL)
        _exit(1);
    pm_test_inspect(out, pm_node_slot(n), (unsigned long long)pm_node_self(n)->incarnation);
    fclose(out);
    idle();
    return 0;
}


/* Lines of text that are exactly "end". */
static int report_ends(const char *text)
{
    int n = strncmp(text, "end\n", 4) == 0;
    for (const char *p = text; (p = strstr(p, "\nend\n")) != NULL; p += 4)
        n++;
    return n;
}

/* An exec-mode cluster of one shell that starts a setsid job (out of its
 * process group, in its cgroup leaf), says the job's pid on the tree pipe
 * and waits; ready at its exec. */
static pm_cluster *setsid_job_cluster(void)
{
    pm_options *o = tree_opts(-1);
    int fd = tree_pipe[1];
    ck_assert_int_eq(pm_options_set_pass_fds(o, &fd, 1), 0);
    char *argv[] = {"sh", "-c", "setsid sleep 1000 & printf '%d\\n' $! >&3; exec sleep 1000",
                    NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    pm_options_set_on_event(o, on_event, NULL);
    pm_cluster *c = spawn_free(o);
    return c;
}

/* Dead, read through fd, an open /proc/<pid>/stat: the process is gone
 * (the read fails) or a zombie. */
static int stat_dead(int fd)
{
    char buf[512];
    ssize_t n = pread(fd, buf, sizeof(buf) - 1, 0);
    if (n <= 0)
        return 1;
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    return p != NULL && p[1] == ' ' && (p[2] == 'Z' || p[2] == 'X');
}

/* doc/reliability.md, fault 21 (the supervisor out of fds) with a tree:
 * the worker's setsid job, out of its process group, still dies with its
 * incarnation when the supervisor cannot open one more fd. The leaf's
 * cgroup.kill is opened only when written (cgroup_slot.c kill_leaf), so at
 * the limit it cannot be; the kill then falls back to the pids listed in
 * cgroup.procs, read through the leaf's fd the supervisor holds. */
START_TEST(test_tree_kill_out_of_fds)
{
    pm_cluster *c = setsid_job_cluster();
    RUN_UNTIL(c, find(PM_EVENT_READY, 0, 0) != NULL, 10000);
    pid_t job = read_pid_line(c);
    pid_t p1 = find(PM_EVENT_STARTED, 0, 0)->pid;
    /* The job's state is read through an fd opened now: at the limit no
     * /proc file can be opened to look (dead() would fail open). */
    char path[64];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)job);
    int statfd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(statfd, 0);
    ck_assert(!stat_dead(statfd));
    /* No fd left: the limit just above the highest open fd, every hole
     * below it filled. */
    struct rlimit saved, lim;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &saved), 0);
    int top = open("/dev/null", O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(top, 0);
    lim.rlim_cur = (rlim_t)top + 1;
    lim.rlim_max = saved.rlim_max;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &lim), 0);
    static int fillers[4096];
    int nfill = (int)pm_test_fill_fds(fillers, ARRAY_LEN(fillers));
    ck_assert_int_eq(open("/dev/null", O_RDONLY | O_CLOEXEC), -1);
    ck_assert_int_eq(errno, EMFILE);
    ck_assert_int_eq(kill(p1, SIGKILL), 0);
    uint64_t end = ms() + 10000;
    while (!stat_dead(statfd) && ms() < end)
        (void)pm_cluster_run(c, 20);
    int gone = stat_dead(statfd);
    for (int i = 0; i < nfill; i++)
        close(fillers[i]);
    close(top);
    close(statfd);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &saved), 0);
    if (!gone)
        kill(job, SIGKILL);
    ck_assert_msg(gone, "the setsid job %d outlived its incarnation while the supervisor was out of fds",
                  (int)job);
    pm_cluster_terminate(c);
}
END_TEST

/* Trust rules: "a worker holds only its own memory and fds, never another
 * slot's, a spare's or a cgroup.kill". The supervisor holds each slot's
 * leaf directory, one openat from its cgroup.kill (which it opens only to
 * write it, cgroup_slot.c kill_leaf); each of two workers, fork (_i 0) and exec (_i 1) mode,
 * lists its fds with readlink (inspect.h): none is a cgroup.kill, and none
 * points anywhere in the cluster's cgroups (procmesh.<pid>.*: a directory
 * fd there would reach a cgroup.kill through openat). */
START_TEST(test_no_cgroup_kill_held)
{
    ck_assert_int_eq(pipe2(tree_pipe, O_CLOEXEC | O_NONBLOCK), 0);
    pm_options *o = opts(2);
    if (_i == 0) {
        pm_options_set_bootstrap(o, boot_inspect, NULL);
    } else {
        exec_opts(o, "inspect", NULL);
        ck_assert_int_eq(pm_options_set_pass_fds(o, &tree_pipe[1], 1), 0);
    }
    pm_cluster *c = spawn_free(o);
    char why[320];
    ck_assert_int_eq(pm_cluster_containment(c, why, sizeof(why)), PM_CONTAIN_CGROUP);
    /* What there is to leak: the supervisor's own handles, a leaf
     * directory and its files per slot, and no cgroup.kill held open. */
    char mark[48];
    snprintf(mark, sizeof(mark), "/procmesh.%d.", (int)getpid());
    int handles = pm_test_fds_to(mark);
    ck_assert_msg(handles >= 2, "the supervisor holds %d handles in its cgroups for 2 slots", handles);
    ck_assert_int_eq(pm_test_fds_to("/cgroup.kill"), 0);
    static char buf[16384];
    size_t got = 0;
    uint64_t end = ms() + 20000;
    buf[0] = '\0';
    while (report_ends(buf) < 2 && ms() < end && got < sizeof(buf) - 1) {
        ck_assert_int_ge(pm_cluster_run(c, 20), 0);
        ssize_t k = read(tree_pipe[0], buf + got, sizeof(buf) - 1 - got);
        if (k > 0) {
            got += (size_t)k;
            buf[got] = '\0';
        }
    }
    ck_assert_msg(report_ends(buf) == 2, "not both workers' reports: %s", buf);
    ck_assert_msg(strstr(buf, "\nfd 0 ") != NULL, "a report without fds: %s", buf);
    ck_assert_msg(strstr(buf, "cgroup.kill") == NULL, "%s mode: a worker holds a cgroup.kill:\n%s",
                  _i ? "exec" : "fork", buf);
    ck_assert_msg(strstr(buf, mark) == NULL, "%s mode: a worker holds a handle in the cluster's "
                  "cgroups (%s):\n%s", _i ? "exec" : "fork", mark, buf);
    pm_cluster_terminate(c);
}
END_TEST

/* ------------------------------------------------------------ leaves */

/* Exec mode after a kill (a setsid job made the cgroup non-empty at the
 * reap): the replacement is born into a fresh leaf, since a killed cgroup
 * takes no clone3 child and a write to cgroup.procs would wait for an RCU
 * grace period on the restart path; the killed leaf is gone once the
 * replacement is ready, and the tree's descendants still ended first. */
START_TEST(test_tree_exec_leaf)
{
    pm_cluster *c = setsid_job_cluster();
    char why[320], cg[PM__CG_PATH], dir[PM__CG_PATH + 64];
    ck_assert_int_eq(pm_cluster_containment(c, why, sizeof(why)), PM_CONTAIN_CGROUP);
    RUN_UNTIL(c, find(PM_EVENT_READY, 0, 0) != NULL, 10000);
    /* The setsid job exists (its pid came) before the kill: the leaf is
     * not empty at the reap. */
    pid_t job = read_pid_line(c);
    pid_t p1 = find(PM_EVENT_STARTED, 0, 0)->pid;
    cgroup_of(p1, cg, sizeof(cg));
    ck_assert_msg(strstr(cg, "/slot0/g1") != NULL, "first incarnation in %s", cg);
    ck_assert_int_eq(kill(p1, SIGKILL), 0);
    RUN_UNTIL(c, find(PM_EVENT_READY, 0, 1) != NULL, 10000);
    pid_t p2 = find(PM_EVENT_STARTED, 0, 1)->pid;
    cgroup_of(p2, cg, sizeof(cg));
    ck_assert_msg(strstr(cg, "/slot0/g2") != NULL, "the replacement is in %s", cg);
    /* "cgroup v2 <dir>, ...": the cluster's directory. */
    ck_assert_msg(strncmp(why, "cgroup v2 ", 10) == 0, "containment: %s", why);
    snprintf(dir, sizeof(dir), "%.*s/slot0/g1", (int)strcspn(why + 10, ","), why + 10);
    ck_assert_msg(access(dir, F_OK) < 0 && errno == ENOENT, "the killed leaf %s is still there",
                  dir);
    dir[strlen(dir) - 1] = '2';
    ck_assert_msg(access(dir, F_OK) == 0, "no %s", dir);
    ck_assert_msg(dead(job), "the setsid job %d outlived its incarnation", (int)job);
    pm_cluster_terminate(c);
}
END_TEST

/* ------------------------------------------------------------ not empty */

static int not_empty_diags;  /* "cgroup_not_empty" diagnostics */
static int diag_at_nev = -1; /* events recorded when the first came */
static char not_empty_msg[512];


/* The first incarnation leaves a child (in the slot's cgroup, its own
 * process group) writing to the frozen filesystem, waits until it sleeps
 * uninterruptibly, and crashes; the replacement only serves. */
static int boot_stuck(pm_node *n, void *arg)
{
    (void)arg;
    worker_init();
    if (pm_node_self(n)->incarnation == 1) {
        pid_t g = fork();
        if (g == 0) {
            char path[128];
            snprintf(path, sizeof(path), "%s/f", frozen_mnt);
            int fd = open(path, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
            _exit(fd >= 0 ? 0 : 1);
        }
        if (g < 0 || write(tree_pipe[1], &g, sizeof(g)) != (ssize_t)sizeof(g))
            _exit(1);
        pm_node_ready(n);
        for (int i = 0; i < 3000 && pm_test_proc_state(g) != 'D'; i++)
            usleep(10000);
        raise(SIGSEGV);
        _exit(99);
    }
    pm_node_ready(n);
    idle();
    return 0;
}

static void on_not_empty(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c;
    (void)arg;
    if (strcmp(topic, "cgroup_not_empty") != 0)
        return;
    if (not_empty_diags++ == 0) {
        diag_at_nev = nev;
        snprintf(not_empty_msg, sizeof(not_empty_msg), "%s", message);
    }
}

/* design.md, Life of a crash 3; pm_options(3) set_on_diagnostic: a slot's
 * cgroup that does not empty after cgroup.kill is waited for at most 1 s;
 * then "cgroup_not_empty" is said and the replacement starts, beside what
 * the kernel would not let die. */
START_TEST(test_tree_not_empty)
{
    char why[256];
    if (frozen_setup(why, sizeof(why)) < 0)
        ck_abort_msg("the probe found a loop-mounted ext4, the test did not: %s", why);
    frozen_guard();
    ck_assert_int_eq(frozen_cmd("fsfreeze -f %s", frozen_mnt), 0);
    pm_options *o = tree_opts(T_IDLE);
    pm_options_set_bootstrap(o, boot_stuck, NULL);
    pm_options_set_on_diagnostic(o, on_not_empty, NULL);
    not_empty_diags = 0;
    diag_at_nev = -1;
    pm_cluster *c = spawn_tree(o);
    pid_t stuck = kids[0];
    RUN_UNTIL(c, find(PM_EVENT_READY, 0, 1) != NULL, 30000);
    /* The replacement started while the child still lived, stuck in D:
     * past the wait, beside it. */
    ck_assert_msg(leaked_at_restart == 1, "%d of the first incarnation's descendants alive at "
                  "the replacement's start, 1 expected", leaked_at_restart);
    ck_assert_int_eq(pm_test_proc_state(stuck), 'D');
    ck_assert_int_eq(not_empty_diags, 1);
    ck_assert_msg(strstr(not_empty_msg, "slot 0") != NULL &&
                      strstr(not_empty_msg, "1000 ms") != NULL,
                  "message: %s", not_empty_msg);
    /* Said before the replacement was started, not after. */
    const rec *st2 = find(PM_EVENT_STARTED, 0, 1);
    ck_assert_ptr_nonnull(st2);
    ck_assert_msg(diag_at_nev >= 0 && diag_at_nev <= (int)(st2 - evs),
                  "cgroup_not_empty after the replacement's STARTED (%d, %d)", diag_at_nev,
                  (int)(st2 - evs));
    /* Thawed, the SIGKILL it got lands: it ends, and the cluster with it
     * leaves nothing. */
    ck_assert_int_eq(frozen_cmd("fsfreeze -u %s", frozen_mnt), 0);
    RUN_UNTIL(c, dead(stuck), 10000);
    finish(c);
    ck_assert_int_eq(not_empty_diags, 1);
    frozen_teardown();
}
END_TEST

/* Appends a line "fmt..." to the skip list. */
static void skipped(char *list, size_t size, const char *fmt, ...)
    __attribute__((format(printf, 3, 4)));
static void skipped(char *list, size_t size, const char *fmt, ...)
{
    size_t len = strlen(list);
    va_list ap;
    va_start(ap, fmt);
    int n = vsnprintf(list + len, size - len, fmt, ap);
    va_end(ap);
    len = n < 0 ? len : strlen(list);
    if (len + 1 < size) {
        list[len] = '\n';
        list[len + 1] = '\0';
    }
}

/* A slot's record on its own: zeroed, every fd -1 and no OOM file; the
 * fds listed for a fork child are exactly PM__CG_SLOT_NFDS; a close of
 * its fds touches nothing else. */
START_TEST(test_slot_fields)
{
    pm__cg_slot s;
    memset(&s, 0x5a, sizeof(s));
    pm__cg_slot_zero(&s);
    ck_assert_int_eq(s.oom_base, -1);
    ck_assert_str_eq(s.oom_file, "");
    for (int i = 0; i < PM__CG_NCTRL; i++)
        ck_assert_int_eq(s.v1_procs[i], -1);
    int fds[PM__CG_SLOT_NFDS + 1];
    fds[PM__CG_SLOT_NFDS] = 12345;
    pm__cg_slot_fds(&s, fds);
    for (int i = 0; i < PM__CG_SLOT_NFDS; i++)
        ck_assert_int_eq(fds[i], -1);
    ck_assert_int_eq(fds[PM__CG_SLOT_NFDS], 12345);
    snprintf(s.oom_file, sizeof(s.oom_file), "kept");
    pm__cg_slot_close_fds(&s);
    ck_assert_str_eq(s.oom_file, "kept");
    for (int i = 0; i < PM__CG_NCTRL; i++)
        ck_assert_int_eq(s.v1_procs[i], -1);
}
END_TEST

int main(void)
{
    /* What this host offers decides which cases can run; the others are
     * skipped, and the program then exits 77 with the reasons once the
     * cases that could run have passed. */
    char why_tree[320], why_limits[320], why_cpu[320], why_ro[320];
    int tree = probe(0, 0, 0, why_tree, sizeof(why_tree)) == PM_CONTAIN_CGROUP;
    int limits =
        tree && probe(64u << 20, 8, 0, why_limits, sizeof(why_limits)) == PM_CONTAIN_CGROUP;
    int cpu = tree && probe(0, 0, 20000, why_cpu, sizeof(why_cpu)) == PM_CONTAIN_CGROUP;
    int ro = pm_test_cgroupfs_read_only_probe(why_ro, sizeof(why_ro)) == 0;
    Suite *s = suite_create("tree");
    PM_ADD_TEST(s, test_parsers, 0);
    PM_ADD_TEST(s, test_scratch_v2, 0);
    PM_ADD_TEST(s, test_sweep_stale, 0);
    PM_ADD_TEST(s, test_slot_fields, 0);
    PM_ADD_TEST(s, test_setters_refuse, 0);
    PM_ADD_TEST(s, test_rlimit, 0);
    PM_ADD_TEST(s, test_rlimit_exec_refused, 0);
    PM_ADD_TEST(s, test_core_default, 0);
    PM_ADD_LOOP_TEST(s, test_core_dir, 0, 3, 60);
    PM_ADD_TEST(s, test_core_dir_exec_and_rlimit, 0);
    PM_ADD_TEST(s, test_core_dir_refused, 0);
    PM_ADD_TEST(s, test_core_pattern_untouched, 0);
    PM_ADD_TEST(s, test_contain_process_group, 0);
    PM_ADD_TEST(s, test_containment_detail_truncated, 0);
    if (ro)
        PM_ADD_LOOP_TEST(s, test_contain_refused, 0, 4, 60);
    if (tree) {
        PM_ADD_TEST(s, test_two_clusters_apart, 0);
        PM_ADD_TEST(s, test_tree_exit, 0);
        PM_ADD_TEST(s, test_tree_exit_failure, 0);
        PM_ADD_TEST(s, test_tree_crash, 0);
        PM_ADD_TEST(s, test_tree_fence, 0);
        PM_ADD_TEST(s, test_tree_restart, 0);
        PM_ADD_TEST(s, test_tree_drain, 0);
        PM_ADD_TEST(s, test_tree_standby, 0);
        PM_ADD_TEST(s, test_tree_exec_crash, 0);
        PM_ADD_TEST(s, test_tree_exec_leaf, 0);
        PM_ADD_TEST(s, test_tree_kill_out_of_fds, 0);
        PM_ADD_LOOP_TEST(s, test_no_cgroup_kill_held, 0, 2, 60);
    }
    char why_frozen[320];
    int frozen = tree && frozen_probe(why_frozen, sizeof(why_frozen)) == 0;
    if (frozen)
        PM_ADD_TEST(s, test_tree_not_empty, 60);
    if (limits) {
        PM_ADD_TEST(s, test_limit_memory_oom, 0);
        PM_ADD_TEST(s, test_limit_pids, 0);
        PM_ADD_TEST(s, test_limit_atfork_thread, 0);
    }
    if (cpu)
        PM_ADD_TEST(s, test_limit_cpu, 0);
    char why_deleg[320];
    int deleg = deleg_probe(why_deleg, sizeof(why_deleg)) == 0;
    PM_ADD_TEST(s, test_enable_decide, 0);
    PM_ADD_TEST(s, test_lone_thread, 0);
    if (deleg) PM_ADD_LOOP_TEST(s, test_delegated_cgroup, 0, 4, 60);
    int rc = pm_test_main(s);
    if (deleg_enabled) {
        char path[PM__CG_PATH + 64], minus[24];
        snprintf(path, sizeof(path), "%s/cgroup.subtree_control", deleg_own);
        snprintf(minus, sizeof(minus), "-%s", deleg_ctrl);
        int fd = open(path, O_WRONLY | O_CLOEXEC);
        /* Refused while another run's cgroups still use it: theirs to leave. */
        if (fd >= 0 && write(fd, minus, strlen(minus)) < 0)
            (void)0;
        if (fd >= 0)
            close(fd);
    }
    if (rc != EXIT_SUCCESS)
        return rc;
    if (deleg && strcmp(deleg_ctrl, "memory") != 0)
        fprintf(stderr, "note: test_delegated_cgroup ran with the %s controller; its cluster "
                "cases need memory in the cgroup v2 tree and were skipped\n", deleg_ctrl);
    char skips[2048] = "";
    if (!deleg)
        skipped(skips, sizeof(skips), "test_delegated_cgroup: %s", why_deleg);
    if (!tree)
        skipped(skips, sizeof(skips), "the descendant and limit cases and "
                "test_no_cgroup_kill_held need cgroups (cgroup v2, as root or delegated; a "
                "setsid descendant escapes the process-group fallback by design); this host: %s",
                why_tree);
    if (tree && !limits)
        skipped(skips, sizeof(skips), "the limit cases: %s", why_limits);
    if (tree && !cpu)
        skipped(skips, sizeof(skips), "test_limit_cpu (no cpu controller for the limit): %s",
                why_cpu);
    if (!ro)
        skipped(skips, sizeof(skips), "test_contain_refused: %s", why_ro);
    if (tree && !frozen)
        skipped(skips, sizeof(skips), "test_tree_not_empty (a process cgroup.kill cannot end): %s",
                why_frozen);
    if (skips[0] != '\0') {
        fprintf(stderr, "SKIP: the other cases passed; not tested here:\n%s", skips);
        return 77;
    }
    return rc;
}
