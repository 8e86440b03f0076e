/* SPDX-License-Identifier: MIT */
/*
 * check_stop.c - how a cluster stops and how it hears the outside world:
 * terminate (stop request, SIGKILL after the stop timeout, cancelled
 * backoffs, a replacement in its handshake killed), a killed supervisor
 * taking its workers with it, signals to the supervisor, the cluster fd (an
 * application's own loop on it), and the epoll fallback loop.
 */
#include "helpers.h"

#include <poll.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <sys/prctl.h>

#include "procmesh.h"
#include "internals.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif
#ifndef PM_NOTIFY_SEND
#error "PM_NOTIFY_SEND must name the pm-notify-send binary"
#endif

START_TEST(test_terminate_ignores_sigterm)
{
    pm_options *o = opts(2);
    exec_opts(o, "ignore-term", NULL);
    pm_options_set_stop_timeout_ms(o, 300);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t t0 = ms();
    ck_assert_int_eq(pm_cluster_terminate(c), 1);
    uint64_t took = ms() - t0;
    ck_assert_uint_ge(took, 290);
    ck_assert_uint_lt(took, 5000);
    assert_all_started_gone();
    ck_assert_int_eq(find(PM_EVENT_EXITED, -1, 0)->signal, SIGKILL);
    /* Our own SIGKILL, not "signal" (a signal procmesh did not send). */
    ck_assert_str_eq(find(PM_EVENT_EXITED, -1, 0)->reason, "stop-kill");
    ck_assert_str_eq(pm_reason_name(PM_REASON_STOP_KILL), "stop-kill");
    pm_options_free(o);

    /* A worker that honours SIGTERM stops by itself: 0, and quickly. */
    o = opts(2);
    exec_opts(o, "ready", NULL);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    t0 = ms();
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    ck_assert_uint_lt(ms() - t0, 2500);
    ck_assert_int_eq(find(PM_EVENT_EXITED, -1, 0)->exit_code, 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

/* The reason an exit during a stop carries: "stop" when the worker ended
 * as asked (its own exit, or our SIGTERM's default action), the signal it
 * was killed by otherwise; never "signal" for our own SIGTERM. */
START_TEST(test_stop_exit_reason)
{
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready, NULL); /* dies by SIGTERM */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->signal, SIGTERM);
    ck_assert_str_eq(e->reason, "stop");
    pm_options_free(o);

    o = opts(1);
    exec_opts(o, "ready", NULL); /* exits 0 on SIGTERM */
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->exit_code, 0);
    ck_assert_str_eq(e->reason, "stop");
    pm_options_free(o);

    /* A SIGKILL procmesh did not send, while stopping (its stop timeout
     * far off): still "signal". */
    o = opts(1);
    exec_opts(o, "ignore-term", NULL);
    pm_options_set_stop_timeout_ms(o, 30000);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    kill(si.pid, SIGKILL);
    RUN_UNTIL(c, find(PM_EVENT_EXITED, 0, 0) != NULL, 10000);
    e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_int_eq(e->signal, SIGKILL);
    ck_assert_str_eq(e->reason, "signal");
    /* Its replacement ignores SIGTERM too: killed the same way, so that
     * the terminate does not wait out the stop timeout. */
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 10000);
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    kill(si.pid, SIGKILL);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

START_TEST(test_terminate_cancels_backoff)
{
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_crash_first, (void *)(intptr_t)SIGSEGV);
    pm_options_set_restart_min_backoff_ms(o, 20000);
    pm_options_set_restart_max_backoff_ms(o, 20000);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_BACKOFF && slot_state(c, 1) == PM_SLOT_BACKOFF, 5000);
    uint64_t t0 = ms();
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    ck_assert_uint_lt(ms() - t0, 2000);
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 2);
    pm_options_free(o);
}
END_TEST

/* The pid of a replacement that reached its bootstrap, in memory shared
 * with the fork-mode workers (mapped before the spawn). */
static volatile pid_t *held_pid;

static void exit_on_term(int sig)
{
    (void)sig;
    _exit(0);
}

/* Exits 0 on SIGTERM, as a worker honouring the stop request does. The
 * first incarnation gets ready; a later one says it is in its bootstrap
 * and never gets ready. */
static int boot_replacement_held(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    signal(SIGTERM, exit_on_term);
    if (pm_node_self(n)->incarnation > 1) {
        *held_pid = getpid();
        idle();
    }
    if (pm_node_ready(n) < 0)
        return 50;
    idle();
    return 0;
}

/* pm_cluster(3): terminate "kills a replacement still in its handshake".
 * Slot 0's replacement (pm_cluster_restart_slot) is held in its handshake
 * (_i 0: fork mode, in its bootstrap; 1: exec mode, joined and waiting for
 * a file before its READY). Both exit 0 on SIGTERM: the stop request would
 * end them cleanly, and terminate would return 0. Killed instead: SIGKILL,
 * terminate's 1, never ready, the process gone once terminate returns. */
START_TEST(test_terminate_kills_starting_replacement)
{
    char dir[] = "/tmp/pm-held-XXXXXX", go[64], joined[64];
    ck_assert_ptr_nonnull(mkdtemp(dir));
    snprintf(go, sizeof(go), "%s/go", dir);
    snprintf(joined, sizeof(joined), "%s/joined", dir);
    held_pid = mmap(NULL, sizeof(*held_pid), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert(held_pid != MAP_FAILED);
    *held_pid = 0;
    pm_options *o = opts(1);
    /* Nothing here ends by a timeout: neither the stop's nor the ready's. */
    pm_options_set_stop_timeout_ms(o, 30000);
    pm_options_set_ready_timeout_ms(o, 50000);
    if (_i == 0) {
        pm_options_set_bootstrap(o, boot_replacement_held, NULL);
    } else {
        char *argv[] = {"pm-test-worker", "ready-on", go, joined, NULL};
        ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
        FILE *f = fopen(go, "w"); /* the first incarnation gets ready */
        ck_assert_ptr_nonnull(f);
        fclose(f);
    }
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    if (_i == 1) {
        ck_assert_int_eq(unlink(go), 0);     /* the next one never gets ready */
        ck_assert_int_eq(unlink(joined), 0); /* the first one's */
    }
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    RUN_UNTIL(c, count(PM_EVENT_STARTED, 0) == 2, 10000);
    pid_t pid = find(PM_EVENT_STARTED, 0, 1)->pid;
    if (_i == 0)
        RUN_UNTIL(c, *held_pid == pid, 10000);
    else
        RUN_UNTIL(c, access(joined, F_OK) == 0, 10000);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_STARTING);
    ck_assert_int_eq(pm_cluster_terminate(c), 1);
    ck_assert_msg(gone(pid), "the replacement %d outlived terminate", (int)pid);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 1);
    const rec *e = find(PM_EVENT_EXITED, 0, 1);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->pid, pid);
    ck_assert_msg(e->signal == SIGKILL, "the replacement ended by signal %d, exit code %d (%s)",
                  e->signal, e->exit_code, e->reason);
    ck_assert_str_eq(e->reason, "stop-kill");
    assert_all_started_gone();
    pm_options_free(o);
    munmap((void *)held_pid, sizeof(*held_pid));
    char cmd[64];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

START_TEST(test_supervisor_killed)
{
    /* A supervisor process spawns 3 workers and is SIGKILLed: every worker
     * must be gone within a second. We are the subreaper, so the orphans
     * come to us and we can tell "exited" from "still running". */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pid_t pids[3];
    pid_t sup = pm_test_fork_supervisor(o, pids, 3);
    pm_options_free(o);
    kill(sup, SIGKILL);
    ck_assert_int_ne(pm_test_reap(sup, 5000), -1);
    uint64_t t0 = ms();
    for (int i = 0; i < 3; i++) {
        int status = pm_test_reap(pids[i], 1500);
        ck_assert_msg(status != -1, "worker %d outlived its supervisor", (int)pids[i]);
        ck_assert(WIFSIGNALED(status) && WTERMSIG(status) == SIGKILL);
    }
    ck_assert_uint_le(ms() - t0, 1500);
}
END_TEST

START_TEST(test_signals_and_fd)
{
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_options_set_handle_signals(o, 1); /* opt-in for the library */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* SIGTERM to the supervisor: run returns -EINTR, nothing is lost. */
    raise(SIGTERM);
    ck_assert_int_eq(pm_cluster_run(c, 2000), -EINTR);
    ck_assert_int_eq(pm_cluster_last_signal(c), SIGTERM);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_READY);
    /* The cluster fd turns readable when a worker dies. */
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    kill(si.pid, SIGKILL);
    struct pollfd pfd = {.fd = pm_cluster_fd(c), .events = POLLIN};
    ck_assert_int_eq(poll(&pfd, 1, 5000), 1);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 5000);
    /* pm_cluster_stop from a callback-free context makes run(-1) return. */
    pm_cluster_stop(c);
    ck_assert_int_eq(pm_cluster_run(c, -1), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
}
END_TEST

START_TEST(test_epoll_backend)
{
    /* The fallback loop for kernels or containers without io_uring. */
    setenv("PROCMESH_LOOP", "epoll", 1);
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_crash_first, (void *)(intptr_t)SIGSEGV);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_msg(pm_test_loop_backend(c) == PM__LOOP_EPOLL,
                  "PROCMESH_LOOP=epoll, but the loop backend is %d", pm_test_loop_backend(c));
    RUN_UNTIL(c, count(PM_EVENT_READY, -1) == 4, 10000);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
    unsetenv("PROCMESH_LOOP");
}
END_TEST

/*
 * test_embedded_run_zero: pm_cluster(3), Embedding: "pm_cluster_fd() gives
 * a file descriptor that is readable whenever pm_cluster_run() has work;
 * put it in another event loop and call pm_cluster_run(c, 0) when it
 * fires." The worker waits for main's "go", then plays EMB_ROUNDS rounds of
 * ping-pong with main (each ping published into a ring the hub drained a
 * turn before: its doorbell must be armed by then). Then, on main's
 * "burst", sent while main runs no turn, it puts EMB_BURST messages for
 * main in its ring (more than one turn reads of a port, 256: what is left
 * after a run must keep the fd readable), says so in shared memory, and
 * waits in pm_node_recv.
 */
#define EMB_ROUNDS 100u
#define EMB_BURST 1000u

static unsigned emb_pings, emb_burst, emb_bad;
static int emb_pong_rc;
static _Atomic int *emb_burst_sent; /* shared with the worker (made before the spawn) */

static int boot_embedded(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_ready(n) < 0)
        return 50;
    pm_address to_main = {.system = "procmesh", .host = "main"};
    pm_message m;
    if (pm_node_recv(n, &m, 30000) < 0 || m.len != 2 || memcmp(m.data, "go", 2) != 0)
        return 51;
    char text[32];
    for (unsigned i = 0; i < EMB_ROUNDS; i++) {
        int len = snprintf(text, sizeof(text), "ping %u", i);
        if (pm_node_send(n, &to_main, text, (size_t)len) < 0)
            return 52;
        if (pm_node_recv(n, &m, 30000) < 0 || m.len != 4 || memcmp(m.data, "pong", 4) != 0)
            return 53;
    }
    if (pm_node_recv(n, &m, 30000) < 0 || m.len != 5 || memcmp(m.data, "burst", 5) != 0)
        return 54;
    /* 1000 records of at most 80 bytes: a third of the 256 KiB ring, so
     * no send waits for main. */
    for (unsigned i = 0; i < EMB_BURST; i++) {
        int len = snprintf(text, sizeof(text), "burst %u", i);
        if (pm_node_send(n, &to_main, text, (size_t)len) < 0)
            return 55;
    }
    atomic_store(emb_burst_sent, 1);
    /* Waiting in recv until the stop. */
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

/* Main's side: each ping answered with a pong, every message in order. */
static void on_message_embedded(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)arg;
    char text[32];
    unsigned i;
    if (m->len >= sizeof(text)) {
        emb_bad++;
        return;
    }
    memcpy(text, m->data, m->len);
    text[m->len] = '\0';
    if (sscanf(text, "ping %u", &i) == 1 && i == emb_pings) {
        emb_pings++;
        int rc = pm_cluster_send(c, &m->from, "pong", 4);
        if (rc != 0)
            emb_pong_rc = rc;
    } else if (sscanf(text, "burst %u", &i) == 1 && i == emb_burst) {
        emb_burst++;
    } else {
        emb_bad++;
    }
}

/* The application's own loop, as pm_cluster(3) describes it: poll on the
 * cluster fd, pm_cluster_run(c, 0) whenever it is readable, nothing else
 * (no blocking run, no run on a timer), until *got reaches want or 30 s
 * pass. Returns the runs it made. */
static unsigned embedded_loop(pm_cluster *c, const unsigned *got, unsigned want)
{
    struct pollfd pfd = {.fd = pm_cluster_fd(c), .events = POLLIN};
    ck_assert_int_ge(pfd.fd, 0);
    uint64_t end = ms() + 30000;
    unsigned runs = 0;
    while (*got < want && ms() < end) {
        int k = poll(&pfd, 1, 1000);
        ck_assert_msg(k >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        if (k > 0) {
            ck_assert_int_ge(pm_cluster_run(c, 0), 0);
            runs++;
        }
    }
    return runs;
}

/* The default loop (io_uring where the kernel has it) and, _i 1, the epoll
 * one. The liveness check is off, so no timer of the cluster's own makes
 * the fd readable now and then: a stall is not hidden by a tick that runs
 * a turn every 2.5 s. Then, the traffic over, the fd must not stay readable
 * with nothing to do: of at most 50 polls of 200 ms, one times out. */
START_TEST(test_embedded_run_zero)
{
    if (_i == 1)
        setenv("PROCMESH_LOOP", "epoll", 1);
    emb_burst_sent = mmap(NULL, sizeof(*emb_burst_sent), PROT_READ | PROT_WRITE,
                          MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(emb_burst_sent, MAP_FAILED);
    atomic_store(emb_burst_sent, 0);
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_embedded, NULL);
    pm_options_set_on_message(o, on_message_embedded, NULL);
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 0), 0);
    emb_pings = emb_burst = emb_bad = 0;
    emb_pong_rc = 0;
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    if (_i == 1)
        ck_assert_int_eq(pm_test_loop_backend(c), PM__LOOP_EPOLL);
    /* Straight from the spawn to the application's loop: what the spawn's
     * last turn read must not leave the worker's ring unarmed. */
    pm_address a = pm_test_slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "go", 2), 0);
    unsigned runs = embedded_loop(c, &emb_pings, EMB_ROUNDS);
    ck_assert_msg(emb_pings == EMB_ROUNDS,
                  "main got %u of %u pings in 30 s of polling pm_cluster_fd (%u runs; "
                  "worker exits: %d)",
                  emb_pings, EMB_ROUNDS, runs, count(PM_EVENT_EXITED, 0));
    /* The burst, while main runs no turn: main's send publishes at once
     * (outside a turn, as inside one: the pong went out in the middle of
     * the turn that read its ping, so a burst sent on the pong alone would
     * be read by that turn). */
    ck_assert_int_eq(pm_cluster_send(c, &a, "burst", 5), 0);
    uint64_t end = ms() + 20000;
    while (!atomic_load(emb_burst_sent) && ms() < end)
        usleep(1000);
    ck_assert_msg(atomic_load(emb_burst_sent), "the worker did not send its burst (exits: %d)",
                  count(PM_EVENT_EXITED, 0));
    ck_assert_uint_eq(emb_burst, 0);
    runs = embedded_loop(c, &emb_burst, EMB_BURST);
    ck_assert_msg(emb_burst == EMB_BURST,
                  "main got %u of %u burst messages in 30 s of polling pm_cluster_fd (%u runs)",
                  emb_burst, EMB_BURST, runs);
    ck_assert_uint_eq(emb_bad, 0);
    ck_assert_int_eq(emb_pong_rc, 0);
    struct pollfd pfd = {.fd = pm_cluster_fd(c), .events = POLLIN};
    unsigned timeouts = 0, readable = 0;
    for (int t = 0; t < 50 && timeouts == 0; t++) {
        int k = poll(&pfd, 1, 200);
        ck_assert_msg(k >= 0 || errno == EINTR, "poll: %s", strerror(errno));
        if (k > 0) {
            readable++;
            ck_assert_int_ge(pm_cluster_run(c, 0), 0);
        }
        timeouts += k == 0;
    }
    ck_assert_msg(timeouts > 0, "the cluster fd was readable at each of %u polls with no traffic",
                  readable);
    ck_assert_int_eq(count(PM_EVENT_EXITED, 0), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    munmap((void *)emb_burst_sent, sizeof(*emb_burst_sent));
    unsetenv("PROCMESH_LOOP");
}
END_TEST

/* pm_options(3): "In the exec and notify modes the stop request is SIGTERM
 * alone." Such a worker has no ring for a STOP frame; and no other signal
 * comes with the SIGTERM. A shell worker logs every catchable signal it
 * gets, the stop timeout far off (no SIGKILL meanwhile). Once SIGTERM is in
 * its log the test sends SIGUSR1 as an end mark, on which it exits 0: a
 * signal sent with the stop request was pending before the mark, so its
 * line is in the log by then. _i: 0 exec mode, 1 notify mode. */
START_TEST(test_exec_stop_is_sigterm_alone)
{
    char dir[] = "/tmp/pm-stopsig-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    /* Once d/quit exists a worker exits at once on SIGTERM, so that the
     * terminate at the end does not wait out the stop timeout for the
     * replacement. The check comes before the line: the first worker's
     * SIGTERM line is written before the test makes the file, and it stays
     * until the mark. */
    char script[1024];
    snprintf(script, sizeof(script),
             "d=%s; log=$d/log.$$;"
             " for s in HUP INT QUIT ABRT USR2 PIPE ALRM CONT URG WINCH; do"
             " trap \"echo $s >> $log\" $s; done;"
             " trap '[ -e $d/quit ] && exit 0; echo TERM >> $log' TERM;"
             " trap 'echo USR1 >> $log; exit 0' USR1;"
             " echo $$ > $d/t.$$; mv $d/t.$$ $d/up.$$;"
             " while :; do sleep 0.1; done",
             dir);
    pm_options *o = opts(1);
    if (_i == 0) {
        char *argv[] = {"sh", "-c", script, NULL};
        ck_assert_int_eq(pm_options_set_exec(o, "/bin/sh", argv), 0);
        ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_EXEC), 0);
    } else {
        char *argv[] = {"pm-notify-send", "READY=1", "--", "/bin/sh", "-c", script, NULL};
        ck_assert_int_eq(pm_options_set_exec(o, PM_NOTIFY_SEND, argv), 0);
        ck_assert_int_eq(pm_options_set_ready_mode(o, PM_READY_NOTIFY), 0);
    }
    pm_options_set_stop_timeout_ms(o, 30000);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    char up[96], logpath[96], quit[96], text[256];
    snprintf(up, sizeof(up), "%s/up.%d", dir, (int)si.pid);
    snprintf(logpath, sizeof(logpath), "%s/log.%d", dir, (int)si.pid);
    snprintf(quit, sizeof(quit), "%s/quit", dir);
    RUN_UNTIL(c, access(up, R_OK) == 0, 10000); /* its traps are set */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0); /* the stop request */
    RUN_UNTIL(c, (pm_test_read_file(logpath, text, sizeof(text)), strstr(text, "TERM\n") != NULL),
              10000);
    FILE *f = fopen(quit, "w");
    ck_assert_ptr_nonnull(f);
    fclose(f);
    ck_assert_int_eq(kill(si.pid, SIGUSR1), 0);
    RUN_UNTIL(c, find(PM_EVENT_EXITED, 0, 0) != NULL, 10000);
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_int_eq(e->pid, si.pid);
    ck_assert_msg(e->signal == 0 && e->exit_code == 0, "the worker ended by signal %d, exit code %d",
                  e->signal, e->exit_code);
    pm_test_read_file(logpath, text, sizeof(text));
    ck_assert_str_eq(text, "TERM\nUSR1\n");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    char cmd[128];
    snprintf(cmd, sizeof(cmd), "rm -rf %s", dir);
    ck_assert_int_eq(system(cmd), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("stop");
    PM_ADD_TEST(s, test_terminate_ignores_sigterm, 60);
    PM_ADD_TEST(s, test_stop_exit_reason, 60);
    PM_ADD_TEST(s, test_terminate_cancels_backoff, 60);
    PM_ADD_LOOP_TEST(s, test_terminate_kills_starting_replacement, 0, 2, 60);
    PM_ADD_TEST(s, test_supervisor_killed, 60);
    PM_ADD_TEST(s, test_signals_and_fd, 60);
    PM_ADD_TEST(s, test_epoll_backend, 60);
    PM_ADD_LOOP_TEST(s, test_embedded_run_zero, 0, 2, 120);
    PM_ADD_LOOP_TEST(s, test_exec_stop_is_sigterm_alone, 0, 2, 60);
    return pm_test_main(s);
}
