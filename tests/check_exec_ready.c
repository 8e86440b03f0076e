/* SPDX-License-Identifier: MIT */
/* check_exec_ready.c - readiness and exit seen in either order give one outcome, and a failed first start says why. */
/*
 * A worker that became ready and exited at once reports two things to the
 * loop: its readiness (the exec pipe's EOF, a READY=1 datagram, a READY
 * frame) and its exit (pidfd, SIGCHLD). Which completion the loop handles
 * first is up to the scheduler; the outcome must not be. Each mode is run
 * here with the exit forced to be seen first, and many times beside CPU
 * hogs. Real processes, real signals.
 */
#include "helpers.h"

#include "procmesh.h"
#include "internals.h"
#include "supervise.h"
#include "supervisor/readiness.h"

#include <fcntl.h>
#include <sys/stat.h> /* fchmod */

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif
#ifndef PM_NOTIFY_SEND
#error "PM_NOTIFY_SEND must name the pm-notify-send binary"
#endif

/* ---------------------------------------------------------------- events */

/* Block in STARTED until the worker has exited, so its pidfd and its
 * readiness are both pending when the loop next waits, pidfd first. */
static int wait_exit_in_started;

static void record(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_STARTED && wait_exit_in_started) {
        siginfo_t si;
        /* WNOWAIT: see the exit without reaping; procmesh reaps. */
        while (waitid(P_PID, (id_t)e->pid, &si, WEXITED | WNOWAIT) < 0 && errno == EINTR)
            ;
    }
    record_event(e);
}

static void quiet_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned r, void *arg)
{
    (void)c, (void)slot, (void)a, (void)r, (void)arg;
}

static int retired(pm_cluster *c, unsigned n)
{
    for (unsigned i = 0; i < n; i++) {
        pm_slot_info si;
        if (pm_cluster_slot_info(c, i, &si) < 0 || si.state != PM_SLOT_RETIRED)
            return 0;
    }
    return 1;
}

/* ---------------------------------------------------------------- workers */

enum { MODE_EXEC, MODE_NOTIFY, MODE_MESH, MODE_COUNT };
static const char *const mode_name[] = {"exec", "notify", "mesh"};

/* A worker that becomes ready by the mode's rule, then exits with 1 at once:
 * `sh -c 'exit 1'` (the reproducer), pm-notify-send READY=1 then
 * exec false (the same pid sends and exits), pm-test-worker exit 1 (READY
 * frame, then exit). */
static pm_options *ready_then_exit(int mode, unsigned workers)
{
    nev = 0;
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, (int)workers), 0);
    pm_options_set_on_event(o, record, NULL);
    pm_options_set_on_permanently_down(o, quiet_down, NULL);
    pm_options_set_max_restarts(o, 1);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 20);
    pm_options_set_ring_size(o, 1 << 18);
    if (mode == MODE_EXEC) {
        char *argv[] = {"sh", "-c", "exit 1", NULL};
        ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
        ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    } else if (mode == MODE_NOTIFY) {
        char *argv[] = {"pm-notify-send", "READY=1", "--", "false", NULL};
        ck_assert_int_eq(pm_options_set_exec(o, PM_NOTIFY_SEND, argv), 0);
        ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_NOTIFY), 0);
    } else {
        char *argv[] = {"pm-test-worker", "exit", "1", NULL};
        ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
    }
    return o;
}

/* The one outcome: spawn succeeds (every worker was ready), each slot runs
 * two incarnations that are each ready and then exit with 1, and the budget
 * (1 restart) retires it. Never a failed spawn. */
static void one_outcome(int mode, unsigned workers)
{
    pm_options *o = ready_then_exit(mode, workers);
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    const rec *ab = find(PM_EVENT_STOPPED, -1, 0);
    ck_assert_msg(rc == 0, "%s: pm_cluster_spawn: %s (%s)", mode_name[mode], pm_strerror(rc),
                  ab != NULL ? ab->detail : "no STOPPED event");
    PM_RUN_UNTIL(c, retired(c, workers), 20000);
    for (unsigned s = 0; s < workers; s++) {
        ck_assert_int_eq(count(PM_EVENT_READY, (int)s), 2);
        ck_assert_int_eq(count(PM_EVENT_EXITED, (int)s), 2);
        ck_assert_int_eq(count(PM_EVENT_RETIRED, (int)s), 1);
    }
    ck_assert_int_eq(count(PM_EVENT_STOPPED, -1), 0);
    for (int i = 0; i < nev; i++)
        if (evs[i].type == PM_EVENT_EXITED)
            ck_assert_int_eq(evs[i].exit_code, 1);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}

START_TEST(test_exit_seen_before_ready)
{
    /* _i: the mode (exec, notify). The exit is already pending when the
     * loop first waits after the start, so the pidfd (armed first) is
     * handled first. Not mesh: its worker needs the hub's INIT before it
     * can say READY, so the supervisor cannot wait for its exit here; its
     * READY is read from the ring when the exit is handled, and the run
     * under load below covers it. */
    wait_exit_in_started = 1;
    one_outcome(_i, 1);
    wait_exit_in_started = 0;
}
END_TEST

/* Two busy children: the loaded node. They die with the test. */
static pid_t hogs[2];

static void hogs_start(void)
{
    for (size_t i = 0; i < ARRAY_LEN(hogs); i++) {
        hogs[i] = pm_test_fork();
        ck_assert_int_ge(hogs[i], 0);
        if (hogs[i] == 0)
            for (;;)
                __asm__ volatile("" ::: "memory");
    }
}

static void hogs_stop(void)
{
    for (size_t i = 0; i < ARRAY_LEN(hogs); i++) {
        kill(hogs[i], SIGKILL);
        pm_test_reap(hogs[i], 5000);
    }
}

START_TEST(test_ready_then_exit_under_load)
{
    /* The reproducer, `procmesh run --workers 2 --ready exec
     * --max-restarts 1 -- sh -c 'exit 1'` beside two CPU hogs, failed to
     * start in 11 of 20 runs; here 10 runs per mode (4 under sanitizers), and
     * the deterministic test above fails on the first without the fix. */
    int runs = pm_test_sanitized() ? 4 : 10;
    hogs_start();
    for (int r = 0; r < runs; r++)
        one_outcome(_i, 2);
    hogs_stop();
}
END_TEST

/* Another child of the supervisor's holds the error pipe of the next
 * incarnation open: a clone(CLONE_VFORK) child of another slot does, from
 * the moment its exec lets the supervisor go until the exec has closed
 * its close-on-exec fds (a loaded machine stretches that; a CI run lost a
 * READY to it). Here a child of the test, forked once the spare (made at
 * READY) is there, holds it for the whole run: the replacement's pipe
 * never reaches end of file, and its READY must still be seen from how it
 * ended (an exit with a status and no errno written: it exec'd). Fails
 * without pm__exec_pipe_verdict's EAGAIN rule (one READY, checked). */
START_TEST(test_exec_pipe_held_open)
{
    char flag[64];
    snprintf(flag, sizeof(flag), "/tmp/pm-exec-held.%d", (int)getpid());
    unlink(flag);
    char script[160];
    snprintf(script, sizeof(script), "while [ ! -e %s ]; do sleep 0.01; done; exit 1", flag);
    pm_options *o = ready_then_exit(MODE_EXEC, 1);
    char *argv[] = {"sh", "-c", script, NULL};
    ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* The spare (the next incarnation's error pipe among it) is made once
     * the first is ready, in a turn of the loop. */
    PM_RUN_UNTIL(c, c->slots[0].spare != NULL, 10000);
    pid_t holder = pm_test_fork();
    ck_assert_int_ge(holder, 0);
    if (holder == 0) {
        for (;;)
            pause();
    }
    int fd = open(flag, O_CREAT | O_WRONLY | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    PM_RUN_UNTIL(c, retired(c, 1), 20000);
    unlink(flag);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 2);
    ck_assert_int_eq(count(PM_EVENT_EXITED, 0), 2);
    for (int i = 0; i < nev; i++)
        if (evs[i].type == PM_EVENT_EXITED)
            ck_assert_int_eq(evs[i].exit_code, 1);
    kill(holder, SIGKILL);
    pm_test_reap(holder, 5000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* What the error pipe says at the reap, one row per case
 * (pm__exec_pipe_verdict): an errno written is a failure whatever the
 * exit; end of file is an exec; an empty pipe another child still holds
 * open (EAGAIN) is an exec only for a child that exited with a status
 * (every failure before the exec is written first), unknown for one a
 * signal killed or whose status was lost. */
START_TEST(test_exec_pipe_verdict)
{
    static const struct {
        long got;
        int err, code, sig, want;
    } rows[] = {
        {(long)sizeof(int), 0, 127, 0, PM__EXEC_FAILED},
        {(long)sizeof(int), 0, -1, SIGKILL, PM__EXEC_FAILED},
        {0, 0, 1, 0, PM__EXEC_DONE},
        {0, 0, -1, SIGSEGV, PM__EXEC_DONE},
        {-1, EAGAIN, 1, 0, PM__EXEC_DONE},
        {-1, EAGAIN, 0, 0, PM__EXEC_DONE},
        {-1, EAGAIN, -1, SIGKILL, PM__EXEC_UNKNOWN},
        {-1, EAGAIN, -1, 0, PM__EXEC_UNKNOWN}, /* status lost (ECHILD) */
        {-1, EIO, 1, 0, PM__EXEC_UNKNOWN},
        {2, 0, 1, 0, PM__EXEC_UNKNOWN}, /* a short write: never one of ours */
    };
    for (size_t i = 0; i < ARRAY_LEN(rows); i++)
        ck_assert_msg(pm__exec_pipe_verdict(rows[i].got, rows[i].err, rows[i].code, rows[i].sig) ==
                          rows[i].want,
                      "row %zu", i);
}
END_TEST

/* ---------------------------------------------------------------- why a first start failed */

/* Set by a test whose spawn has several workers, each of which may fail
 * the same way before the spawn ends: their events may carry the same
 * detail (only the same). */
static int spawn_fails_several;

static void spawn_fails(pm_options *o, int want_rc, const char *want_detail)
{
    pm_options_set_on_event(o, record, NULL);
    pm_options_set_ring_size(o, 1 << 18);
    nev = 0;
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    ck_assert_msg(rc == want_rc, "pm_cluster_spawn returned %s, want %s", pm_strerror(rc),
                  pm_strerror(want_rc));
    ck_assert_ptr_null(c);
    const rec *e = find(PM_EVENT_STOPPED, -1, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_str_eq(e->reason, "spawn-aborted");
    ck_assert_str_eq(e->detail, want_detail);
    /* Only that event carries a detail (or, with several workers, the
     * same detail for another that failed alike). */
    for (int i = 0; i < nev; i++)
        if (&evs[i] != e && !(spawn_fails_several && strcmp(evs[i].detail, want_detail) == 0))
            ck_assert_str_eq(evs[i].detail, "");
    pm_options_free(o);
}

START_TEST(test_spawn_detail_exit_code)
{
    /* The words: a worker that ends during its handshake. */
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    char *argv[] = {"pm-test-worker", "early", "1", NULL};
    pm_options_set_exec(o, PM_TEST_WORKER, argv);
    /* It exits before pm_node_join: said, with the readiness modes that
     * fit a program without libprocmesh. */
    spawn_fails(o, -ECHILD, "worker exited with code 1 before it was ready; it never opened its link "
                            "to the supervisor (pm_node_join): a program without libprocmesh needs "
                            "--ready exec or --ready notify");
}
END_TEST

START_TEST(test_spawn_detail_signal)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    char *argv[] = {"sh", "-c", "kill -SEGV $$", NULL};
    pm_options_set_exec(o, "/bin/sh", argv);
    char want[320];
    snprintf(want, sizeof(want), "worker was killed by signal %d (%s) before it was ready; it never "
             "opened its link to the supervisor (pm_node_join): a program without libprocmesh needs "
             "--ready exec or --ready notify", SIGSEGV, strsignal(SIGSEGV));
    spawn_fails(o, -ECHILD, want);
}
END_TEST

START_TEST(test_spawn_detail_ready_timeout)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    /* Long enough for the join (through libtool's wrapper script) on a
     * slow machine: a worker that joined gets no hint. */
    pm_options_set_ready_timeout_ms(o, 5000);
    char *argv[] = {"pm-test-worker", "never-ready", NULL};
    pm_options_set_exec(o, PM_TEST_WORKER, argv);
    spawn_fails(o, -ETIMEDOUT, "worker was not ready within 5000 ms");
}
END_TEST

START_TEST(test_spawn_detail_exec)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_exec(o, "/nonexistent/pm-no-such-worker", NULL);
    spawn_fails(o, -ENOENT, "exec of the worker failed: No such file or directory");
}
END_TEST

/* The same exact errors from the vfork spawn's child (spawn.c), which
 * hands a failed step's errno to the parent through memory rather than the
 * error pipe: _i bit 0: a program that exists but is not executable (else
 * a missing one); bit 1: under --user nobody (when root) and seccomp basic
 * (when built with libseccomp), so every privilege step runs before the
 * failing execve; bit 2: two workers, whose children are forked
 * (spawn.h no_wait) and report through the error pipe. */
START_TEST(test_spawn_detail_exec_contained)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, _i & 4 ? 2 : 1);
    spawn_fails_several = (_i & 4) != 0;
    char path[] = "/tmp/pm-noexec-XXXXXX";
    int fd = -1;
    if (_i & 1) {
        /* Mode 0644 and under /tmp: execve says EACCES, to root too. */
        fd = mkstemp(path);
        ck_assert_int_ge(fd, 0);
        ck_assert_int_eq(write(fd, "#!/bin/sh\nexit 0\n", 18), 18);
        ck_assert_int_eq(fchmod(fd, 0644), 0);
        close(fd);
        pm_options_set_exec(o, path, NULL);
    } else {
        pm_options_set_exec(o, "/nonexistent/pm-no-such-worker", NULL);
    }
    if (_i & 2) {
        if (geteuid() == 0)
            ck_assert_int_eq(pm_options_set_user(o, 65534, 65534), 0);
        (void)pm_options_set_seccomp(o, PM_SECCOMP_BASIC); /* -ENOTSUP without libseccomp */
    }
    if (_i & 1)
        spawn_fails(o, -EACCES, "exec of the worker failed: Permission denied");
    else
        spawn_fails(o, -ENOENT, "exec of the worker failed: No such file or directory");
    if (fd >= 0)
        unlink(path);
}
END_TEST

/* ---------------------------------------------------------------- notify watchdog */

/* One notify-mode worker's options, events recorded from nothing. */
static pm_options *notify_opts(void)
{
    nev = 0;
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_on_event(o, record, NULL);
    pm_options_set_on_permanently_down(o, quiet_down, NULL);
    pm_options_set_ring_size(o, 1 << 18);
    return o;
}

START_TEST(test_notify_without_watchdog_not_fenced)
{
    /* As under systemd's WatchdogSec, only a notify worker that sends
     * WATCHDOG=1 is held to the heartbeat (_i = 1: it sends one, then
     * falls silent, and is fenced; _i = 0: it never sends one and lives). */
    pm_options *o = notify_opts();
    pm_options_set_heartbeat_timeout_ms(o, 200);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    char *argv0[] = {"pm-notify-send", "READY=1", "--", "sleep", "30", NULL};
    char *argv1[] = {"pm-notify-send", "READY=1\nWATCHDOG=1", "--", "sleep", "30", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_NOTIFY_SEND, _i ? argv1 : argv0), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_NOTIFY), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    if (_i) {
        PM_RUN_UNTIL(c, count(PM_EVENT_FENCED, 0) == 1, 10000);
        const rec *e = find(PM_EVENT_FENCED, -1, 0);
        ck_assert_str_eq(e->reason, "heartbeat");
    } else {
        /* Ten heartbeat timeouts of silence. */
        uint64_t end = pm_test_ms() + 2000;
        while (pm_test_ms() < end)
            ck_assert_int_ge(pm_cluster_run(c, 50), 0);
        ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
        pm_slot_info si;
        pm_cluster_slot_info(c, 0, &si);
        ck_assert_int_eq(si.state, PM_SLOT_READY);
    }
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* The next incarnation's notify socket is made with its spare, once the
 * incarnation before is ready, not on the way from a crash to ready: the
 * replacement gets that very socket and says READY on it. */
START_TEST(test_notify_socket_made_ahead)
{
    pm_options *o = notify_opts();
    pm_options_set_restart_min_backoff_ms(o, 0);
    pm_options_set_restart_max_backoff_ms(o, 0);
    char *argv[] = {"pm-notify-send", "READY=1", "--", "sleep", "30", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_NOTIFY_SEND, argv), 0);
    ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_NOTIFY), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    PM_RUN_UNTIL(c, pm_test_slot_spare_notify(c, 0) >= 0, 10000);
    struct stat st;
    ck_assert_int_eq(fstat(pm_test_slot_spare_notify(c, 0), &st), 0);
    ino_t ahead = st.st_ino;
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(kill(si.pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_ge(pm_test_slot_notify_fd(c, 0), 0);
    ck_assert_int_eq(fstat(pm_test_slot_notify_fd(c, 0), &st), 0);
    ck_assert_msg(st.st_ino == ahead, "the replacement did not get the notify socket made ahead");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

/* An exec'd mesh worker, ready, maps none of the libraries only a
 * supervisor calls: libprocmesh loads liburing, libsodium and libseccomp on
 * first use (src/os/deps.h), and a worker never uses them. */
START_TEST(test_worker_maps_no_supervisor_libraries)
{
    nev = 0;
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, 1), 0);
    pm_options_set_on_event(o, record, NULL);
    char *argv[] = {"pm-test-worker", "ready", NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(si.state, PM_SLOT_READY);
    char path[64], line[1024];
    snprintf(path, sizeof(path), "/proc/%d/maps", (int)si.pid);
    FILE *f = fopen(path, "r");
    ck_assert_ptr_nonnull(f);
    int procmesh = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        procmesh |= strstr(line, "libprocmesh") != NULL;
        ck_assert_msg(strstr(line, "liburing") == NULL && strstr(line, "libsodium") == NULL &&
                          strstr(line, "libseccomp") == NULL,
                      "the worker maps %s", line);
    }
    fclose(f);
    /* It is the worker itself (not the libtool wrapper) that was read. */
    ck_assert_msg(procmesh, "no libprocmesh in %s", path);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("exec_ready");
    PM_ADD_LOOP_TEST(s, test_exit_seen_before_ready, MODE_EXEC, MODE_MESH, 60);
    PM_ADD_LOOP_TEST(s, test_ready_then_exit_under_load, 0, MODE_COUNT, 240);
    PM_ADD_TEST(s, test_exec_pipe_verdict, 10);
    PM_ADD_TEST(s, test_exec_pipe_held_open, 60);
    PM_ADD_TEST(s, test_spawn_detail_exit_code, 30);
    PM_ADD_TEST(s, test_spawn_detail_signal, 30);
    PM_ADD_TEST(s, test_spawn_detail_ready_timeout, 30);
    PM_ADD_TEST(s, test_spawn_detail_exec, 30);
    PM_ADD_TEST(s, test_worker_maps_no_supervisor_libraries, 30);
    PM_ADD_LOOP_TEST(s, test_spawn_detail_exec_contained, 0, 8, 60);
    PM_ADD_LOOP_TEST(s, test_notify_without_watchdog_not_fenced, 0, 2, 30);
    PM_ADD_TEST(s, test_notify_socket_made_ahead, 30);
    return pm_test_main(s);
}
