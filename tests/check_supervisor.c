/*
 * check_supervisor.c - the supervisor core with real processes and real
 * signals: spawn, handshake, crashes, restart budget, backoff, terminate,
 * containment. Every test is bounded by Check's timeout and by its own
 * generous deadlines.
 */
#include "helpers.h"

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>

#include "procmesh.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif

/* ---------------------------------------------------------------- recording */

typedef struct rec {
    int type;
    unsigned slot;
    pid_t pid;
    uint64_t inc;
    int exit_code;
    int signal;
    uint32_t delay;
    unsigned restarts;
    uint64_t t_ms;
    char reason[32];
} rec;

static rec evs[4096];
static int nev;
static int downs;
static unsigned down_slot, down_restarts;
static pm_address down_addr;

static uint64_t ms(void)
{
    return pm_test_now_ns() / 1000000u;
}

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (nev >= (int)ARRAY_LEN(evs))
        return;
    rec *r = &evs[nev++];
    r->type = e->type;
    r->slot = e->slot;
    r->pid = e->pid;
    r->inc = e->incarnation;
    r->exit_code = e->exit_code;
    r->signal = e->signal;
    r->delay = e->delay_ms;
    r->restarts = e->restarts;
    r->t_ms = ms();
    snprintf(r->reason, sizeof(r->reason), "%s", e->reason ? e->reason : "");
}

static void on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg)
{
    (void)c;
    (void)arg;
    downs++;
    down_slot = slot;
    down_restarts = restarts;
    down_addr = *a;
}

static int count(int type, int slot)
{
    int n = 0;
    for (int i = 0; i < nev; i++)
        if (evs[i].type == type && (slot < 0 || evs[i].slot == (unsigned)slot))
            n++;
    return n;
}

static const rec *find(int type, int slot, int nth)
{
    for (int i = 0; i < nev; i++)
        if (evs[i].type == type && (slot < 0 || evs[i].slot == (unsigned)slot) && nth-- == 0)
            return &evs[i];
    return NULL;
}

static pm_options *opts(int workers)
{
    nev = 0;
    downs = 0;
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, workers), 0);
    pm_options_set_on_event(o, on_event, NULL);
    pm_options_set_on_permanently_down(o, on_down, NULL);
    pm_options_set_ready_timeout_ms(o, 10000);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 50);
    pm_options_set_stop_timeout_ms(o, 3000);
    pm_options_set_ring_size(o, 1 << 18);
    return o;
}

static void exec_opts(pm_options *o, const char *mode, const char *arg)
{
    char *argv[] = {"pm-test-worker", (char *)mode, (char *)arg, NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
}

/* Runs the cluster until cond holds or timeout_ms passes; fails if not. */
#define RUN_UNTIL(c, cond, timeout_ms)                                          \
    do {                                                                        \
        uint64_t end_ = ms() + (timeout_ms);                                    \
        while (!(cond) && ms() < end_)                                          \
            ck_assert_int_ge(pm_cluster_run((c), 20), 0);                       \
        ck_assert_msg((cond), "timed out waiting for: %s", #cond);              \
    } while (0)

static int gone(pid_t pid)
{
    return kill(pid, 0) < 0 && errno == ESRCH;
}

/* Every pid any STARTED event reported is gone (reaped, not a zombie). */
static void assert_all_started_gone(void)
{
    for (int i = 0; i < nev; i++)
        if (evs[i].type == PM_EVENT_STARTED)
            ck_assert_msg(gone(evs[i].pid), "pid %d still exists", (int)evs[i].pid);
}

static int slot_state(pm_cluster *c, unsigned slot)
{
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, slot, &si), 0);
    return si.state;
}

/* ---------------------------------------------------------------- bootstraps */

/* Fork-mode workers inherit the test process's signal handlers, and
 * Check's SIGTERM handler signals the whole process group: give each worker
 * the default actions first, as a real application's bootstrap would. */
static void worker_init(void)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

static void idle(void)
{
    for (;;)
        pause();
}

static int boot_ready(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_ready(n) < 0)
        return 50;
    idle();
    return 0;
}

/* First incarnation: ready, then dies by the signal in arg (or exits with
 * -arg); later incarnations: ready and idle. */
static int boot_crash_first(pm_node *n, void *arg)
{
    worker_init();
    int how = (int)(intptr_t)arg;
    pm_node_ready(n);
    if (pm_node_self(n)->incarnation == 1) {
        usleep(50000);
        if (how > 0) {
            if (how == SIGABRT)
                abort();
            raise(how);
            _exit(99); /* a signal that was ignored or handled */
        }
        return -how;
    }
    idle();
    return 0;
}

static int boot_crash_always(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    if (pm_node_self(n)->incarnation > 1)
        raise(SIGSEGV);
    idle();
    return 0;
}

static int boot_ready_then_exit(pm_node *n, void *arg)
{
    worker_init();
    pm_node_ready(n);
    usleep(100000);
    return (int)(intptr_t)arg;
}

static int boot_ready_once(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_self(n)->incarnation == 1)
        pm_node_ready(n);
    idle();
    return 0;
}

static int boot_fail_slot2(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_slot(n) == 2)
        return 1;
    pm_node_ready(n);
    idle();
    return 0;
}

static int boot_crash_in_handshake(pm_node *n, void *arg)
{
    worker_init();
    (void)n;
    (void)arg;
    raise(SIGSEGV);
    return 0;
}

static int boot_init(pm_node *n, void *arg)
{
    worker_init();
    const void *data;
    size_t len;
    pm_node_init_data(n, &data, &len);
    const char *want = arg;
    if (len != strlen(want) || memcmp(data, want, len) != 0)
        return 9;
    char text[PM_ADDRESS_STRLEN];
    pm_address_format(pm_node_self(n), text, sizeof(text));
    char expect[64];
    snprintf(expect, sizeof(expect), "sys@hst:%u#1", 100 + pm_node_slot(n));
    if (strcmp(text, expect) != 0)
        return 8;
    pm_node_ready(n);
    idle();
    return 0;
}

/* ---------------------------------------------------------------- tests */

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

static void crash_case(int how, int want_signal, int want_code)
{
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_crash_first, (void *)(intptr_t)how);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_READY, -1) == 4, 10000);
    for (unsigned s = 0; s < 2; s++) {
        const rec *e = find(PM_EVENT_EXITED, (int)s, 0);
        ck_assert_ptr_nonnull(e);
        ck_assert_int_eq(e->signal, want_signal);
        ck_assert_int_eq(e->exit_code, want_code);
        ck_assert_uint_eq(e->inc, 1);
        ck_assert_int_eq(count(PM_EVENT_RESTART_SCHEDULED, (int)s), 1);
        ck_assert_uint_eq(find(PM_EVENT_READY, (int)s, 1)->inc, 2);
        pm_slot_info si;
        pm_cluster_slot_info(c, s, &si);
        ck_assert_int_eq(si.state, PM_SLOT_READY);
        ck_assert_uint_eq(si.restarts_total, 1);
        ck_assert_uint_eq(si.restarts_in_window, 1);
        ck_assert_int_eq(si.last_signal, want_signal);
        ck_assert_int_eq(si.last_exit_code, want_code);
        ck_assert_uint_eq(si.incarnation, 2);
    }
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}

START_TEST(test_crash_segv)
{
    crash_case(SIGSEGV, SIGSEGV, -1);
}
END_TEST

START_TEST(test_crash_abort)
{
    crash_case(SIGABRT, SIGABRT, -1);
}
END_TEST

START_TEST(test_crash_exit3)
{
    crash_case(-3, 0, 3);
}
END_TEST

START_TEST(test_crash_other_signals)
{
    static const int sigs[] = {SIGBUS, SIGILL, SIGFPE, SIGKILL};
    crash_case(sigs[_i], sigs[_i], -1);
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

START_TEST(test_crash_exec_segv)
{
    /* Exec mode: every incarnation crashes after ready; the budget (2)
     * retires it with exactly one down call. */
    pm_options *o = opts(1);
    exec_opts(o, "segv", NULL);
    pm_options_set_max_restarts(o, 2);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    /* The crash may be seen before or after READY of the first incarnation:
     * a crash during the handshake fails spawn; both are fine here. */
    if (rc == 0) {
        RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
        ck_assert_int_eq(downs, 1);
        ck_assert_uint_eq(down_restarts, 2);
        ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->signal, SIGSEGV);
        ck_assert_int_eq(pm_cluster_terminate(c), 0);
    } else {
        ck_assert_int_eq(rc, -ECHILD);
    }
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_clean_exit_policies)
{
    /* always: a clean exit restarts. */
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready_then_exit, (void *)0);
    pm_options_set_restart_policy(o, PM_RESTART_ALWAYS);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_STARTED, 0) >= 3, 10000);
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->exit_code, 0);
    /* 1 when terminate caught a replacement in its handshake and killed it. */
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);

    /* on-failure: a clean exit stops the slot; size drops; no down call. */
    o = opts(2);
    pm_options_set_bootstrap(o, boot_ready_then_exit, (void *)0);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_cluster_size(c) == 0, 10000);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_STOPPED);
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 2);
    ck_assert_int_eq(count(PM_EVENT_STOPPED, -1), 2);
    ck_assert_int_eq(downs, 0);
    pm_address a[2];
    ck_assert_int_eq(pm_cluster_addresses(c, a, 2), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);

    /* on-failure: exit 4 restarts. */
    o = opts(1);
    pm_options_set_bootstrap(o, boot_ready_then_exit, (void *)4);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, count(PM_EVENT_STARTED, 0) >= 2, 10000);
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->exit_code, 4);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    pm_options_free(o);

    /* never: even a failure is not restarted. */
    o = opts(1);
    pm_options_set_bootstrap(o, boot_ready_then_exit, (void *)4);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, pm_cluster_size(c) == 0, 10000);
    ck_assert_int_eq(pm_cluster_run(c, 200), 0);
    ck_assert_int_eq(count(PM_EVENT_STARTED, 0), 1);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_STOPPED);
    ck_assert_int_eq(downs, 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_backoff_delays)
{
    /* Crash loop with backoff 100, 200, 400, 400 ms and no jitter: the gap
     * between an exit and the next start follows it (generous tolerance
     * above, none below). */
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_crash_always, NULL);
    pm_options_set_restart_min_backoff_ms(o, 100);
    pm_options_set_restart_max_backoff_ms(o, 400);
    pm_options_set_restart_random_factor(o, 0.0);
    pm_options_set_max_restarts(o, 5);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* Incarnation 1 does not crash: kill it to start the loop. */
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    kill(si.pid, SIGKILL);
    RUN_UNTIL(c, count(PM_EVENT_STARTED, 0) >= 5, 15000);
    static const uint32_t want[] = {100, 200, 400, 400};
    for (int k = 0; k < 4; k++) {
        const rec *ex = find(PM_EVENT_EXITED, 0, k);
        const rec *rs = find(PM_EVENT_RESTART_SCHEDULED, 0, k);
        const rec *st = find(PM_EVENT_STARTED, 0, k + 1);
        ck_assert_uint_eq(rs->delay, want[k]);
        uint64_t gap = st->t_ms - ex->t_ms;
        ck_assert_msg(gap + 2 >= want[k] && gap <= want[k] + 500,
                      "restart %d: gap %llu ms for a backoff of %u ms", k, (unsigned long long)gap,
                      want[k]);
    }
    /* The crash loop goes on: terminate may catch a start and kill it (1). */
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_retire_budget)
{
    pm_options *o = opts(2);
    pm_options_set_bootstrap(o, boot_crash_always, NULL);
    pm_options_set_max_restarts(o, 3);
    pm_options_set_base_port(o, 500);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    pm_cluster_slot_info(c, 1, &si);
    kill(si.pid, SIGKILL);
    RUN_UNTIL(c, slot_state(c, 1) == PM_SLOT_RETIRED, 10000);
    /* Let any late report arrive: nothing may restart a retired slot. */
    ck_assert_int_eq(pm_cluster_run(c, 300), 0);
    ck_assert_int_eq(downs, 1);
    ck_assert_uint_eq(down_slot, 1);
    ck_assert_uint_eq(down_restarts, 3);
    ck_assert_uint_eq(down_addr.port, 501);
    ck_assert_int_eq(count(PM_EVENT_STARTED, 1), 4);
    ck_assert_int_eq(count(PM_EVENT_RETIRED, 1), 1);
    ck_assert_uint_eq(find(PM_EVENT_RETIRED, 1, 0)->restarts, 3);
    ck_assert_uint_eq(pm_cluster_size(c), 1);
    pm_address a[2];
    ck_assert_int_eq(pm_cluster_addresses(c, a, 2), 1);
    ck_assert_uint_eq(a[0].port, 500);
    pm_cluster_slot_info(c, 1, &si);
    ck_assert_int_eq(si.pid, 0);
    ck_assert_uint_eq(si.restarts_total, 3);
    ck_assert_int_eq(slot_state(c, 0), PM_SLOT_READY);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    ck_assert_int_eq(downs, 1);
    assert_all_started_gone();
    pm_options_free(o);
}
END_TEST

START_TEST(test_ready_timeout_counts)
{
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready_once, NULL);
    pm_options_set_ready_timeout_ms(o, 300);
    pm_options_set_max_restarts(o, 2);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    kill(si.pid, SIGKILL);
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
    ck_assert_int_eq(downs, 1);
    const rec *e = find(PM_EVENT_EXITED, 0, 1);
    ck_assert_str_eq(e->reason, "ready-timeout");
    ck_assert_int_eq(e->signal, SIGKILL);
    /* Killed no earlier than the timeout after its start. */
    ck_assert_uint_ge(e->t_ms + 2 - find(PM_EVENT_STARTED, 0, 1)->t_ms, 300);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
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

START_TEST(test_supervisor_killed)
{
    /* A supervisor process spawns 3 workers and is SIGKILLed: every worker
     * must be gone within a second. We are the subreaper, so the orphans
     * come to us and we can tell "exited" from "still running". */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t sup = fork();
    ck_assert_int_ge(sup, 0);
    if (sup == 0) {
        close(p[0]);
        pm_options *o = opts(3);
        pm_options_set_bootstrap(o, boot_ready, NULL);
        pm_cluster *c;
        if (pm_cluster_spawn(o, &c) != 0)
            _exit(1);
        for (unsigned i = 0; i < 3; i++) {
            pm_slot_info si;
            pm_cluster_slot_info(c, i, &si);
            if (write(p[1], &si.pid, sizeof(si.pid)) != sizeof(si.pid))
                _exit(2);
        }
        for (;;)
            pm_cluster_run(c, -1);
    }
    close(p[1]);
    pid_t pids[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(read(p[0], &pids[i], sizeof(pids[i])), sizeof(pids[i]));
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

START_TEST(test_many_crash_at_once)
{
    const int n = 8;
    pm_options *o = opts(n);
    pm_options_set_bootstrap(o, boot_ready, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pid_t pids[8];
    for (int i = 0; i < n; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, (unsigned)i, &si);
        pids[i] = si.pid;
    }
    for (int i = 0; i < n; i++)
        kill(pids[i], SIGKILL);
    RUN_UNTIL(c, count(PM_EVENT_READY, -1) == 2 * n, 10000);
    ck_assert_int_eq(pm_cluster_run(c, 300), 0);
    for (int i = 0; i < n; i++) {
        ck_assert_int_eq(count(PM_EVENT_STARTED, i), 2);
        ck_assert_int_eq(count(PM_EVENT_EXITED, i), 1);
        ck_assert_int_eq(count(PM_EVENT_RESTART_SCHEDULED, i), 1);
        ck_assert(gone(pids[i]));
    }
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    pm_options_free(o);
}
END_TEST

/* Fork mode: what the child holds. */
static int report_fd = -1;

static int boot_inspect(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    char mine[64], buf[512], bad[1024] = "";
    snprintf(mine, sizeof(mine), "procmesh-slot%u-", pm_node_slot(n));
    DIR *d = opendir("/proc/self/fd");
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        char path[300];
        snprintf(path, sizeof(path), "/proc/self/fd/%s", e->d_name);
        ssize_t k = readlink(path, buf, sizeof(buf) - 1);
        if (k <= 0)
            continue;
        buf[k] = '\0';
        if ((strstr(buf, "procmesh-slot") && !strstr(buf, mine)) || strstr(buf, "io_uring") ||
            strstr(buf, "signalfd") || strstr(buf, "timerfd") || strstr(buf, "pidfd"))
            snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "fd %s;", buf);
    }
    closedir(d);
    FILE *m = fopen("/proc/self/maps", "r");
    while (fgets(buf, sizeof(buf), m) != NULL)
        if ((strstr(buf, "procmesh-slot") && !strstr(buf, mine)) || strstr(buf, "io_uring"))
            snprintf(bad + strlen(bad), sizeof(bad) - strlen(bad), "map %s;", buf);
    fclose(m);
    char line[1200];
    int len = snprintf(line, sizeof(line), "%u %s\n", pm_node_slot(n), bad[0] ? bad : "clean");
    if (write(report_fd, line, (size_t)len) != len)
        return 3;
    idle();
    return 0;
}

START_TEST(test_containment_fork)
{
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    report_fd = p[1];
    pm_options *o = opts(3);
    pm_options_set_bootstrap(o, boot_inspect, NULL);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    char buf[4096];
    size_t got = 0;
    while (got < sizeof(buf) - 1) {
        int lines = 0;
        for (size_t i = 0; i < got; i++)
            lines += buf[i] == '\n';
        if (lines == 3)
            break;
        ssize_t k = read(p[0], buf + got, sizeof(buf) - 1 - got);
        ck_assert_int_gt(k, 0);
        got += (size_t)k;
    }
    buf[got] = '\0';
    ck_assert_msg(strstr(buf, "fd ") == NULL && strstr(buf, "map ") == NULL, "leaked: %s", buf);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
}
END_TEST

START_TEST(test_containment_exec)
{
    /* Exec mode: the worker holds exactly stdin/out/err, the fd we passed
     * (fd 3), its memfd and its two doorbells (4, 5, 6), and maps only its
     * own slot's memory. */
    pm_options *o = opts(2);
    int p[2];
    ck_assert_int_eq(pipe2(p, O_CLOEXEC), 0);
    exec_opts(o, "inspect", NULL);
    ck_assert_int_eq(pm_options_set_pass_fds(o, &p[1], 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    close(p[1]);
    char buf[8192];
    size_t got = 0;
    ssize_t k;
    /* Both reports, then EOF once both workers closed fd 3. */
    while ((k = read(p[0], buf + got, sizeof(buf) - 1 - got)) > 0)
        got += (size_t)k;
    buf[got] = '\0';
    int ends = 0;
    for (char *line = strtok(buf, "\n"); line != NULL; line = strtok(NULL, "\n")) {
        static unsigned slot;
        if (sscanf(line, "slot %u", &slot) == 1)
            continue;
        if (strcmp(line, "end") == 0) {
            ends++;
            continue;
        }
        int fd;
        char target[512];
        if (sscanf(line, "fd %d %511s", &fd, target) == 2) {
            ck_assert_msg(fd <= 6, "unexpected fd: %s", line);
            if (fd == 4) {
                char want[64];
                snprintf(want, sizeof(want), "procmesh-slot%u-", slot);
                ck_assert_msg(strstr(target, want) != NULL, "fd 4 is %s", target);
            }
            if (fd == 5 || fd == 6)
                ck_assert_str_eq(target, "anon_inode:[eventfd]");
            continue;
        }
        if (strncmp(line, "map ", 4) == 0) {
            char want[64];
            snprintf(want, sizeof(want), "procmesh-slot%u-", slot);
            ck_assert_msg(strstr(line, want) != NULL, "foreign mapping: %s", line);
        }
    }
    ck_assert_int_eq(ends, 2);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    pm_options_free(o);
}
END_TEST

START_TEST(test_signals_and_fd)
{
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_ready, NULL);
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
    RUN_UNTIL(c, count(PM_EVENT_READY, -1) == 4, 10000);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
    unsetenv("PROCMESH_LOOP");
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
             " ls /proc/$$/fd | sort -n | tr '\\n' ' ' >> %s.tmp; mv %s.tmp %s; exec sleep 60",
             out, out, out, out);
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
    char line[256] = "", fdline[256] = "";
    ck_assert_ptr_nonnull(fgets(line, sizeof(line), f));
    fclose(f);
    char *nl = strchr(line, '\n');
    if (nl != NULL) {
        snprintf(fdline, sizeof(fdline), "%s", nl + 1);
        *nl = '\0';
    }
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    char want[128];
    snprintf(want, sizeof(want), "1 web %d %d ", (int)si.pid, (int)si.pid);
    ck_assert_str_eq(line, want);
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

START_TEST(test_reap_orphans)
{
    /* As a subreaper, orphans come to the supervisor: with reap_orphans
     * they are reaped and counted, workers still go their own way. */
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    pm_options *o = opts(1);
    pm_options_set_bootstrap(o, boot_crash_first, (void *)(intptr_t)SIGSEGV);
    ck_assert_int_eq(pm_options_set_reap_orphans(o, 1), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* A grandchild orphaned to us: a child that forks and exits at once. */
    pid_t mid = fork();
    if (mid == 0) {
        if (fork() == 0) {
            usleep(100000);
            _exit(0);
        }
        _exit(0);
    }
    struct pm_cluster_stats st;
    RUN_UNTIL(c, (pm_cluster_stats(c, &st), st.orphans_reaped >= 2), 5000);
    RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 5000); /* the worker crash was still seen */
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->signal, SIGSEGV);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("supervisor");
    TCase *tc = pm_tcase("lifecycle", 60);
    tcase_add_test(tc, test_spawn_ready_terminate);
    tcase_add_test(tc, test_init_data_fork_and_exec);
    tcase_add_test(tc, test_crash_segv);
    tcase_add_test(tc, test_crash_abort);
    tcase_add_test(tc, test_crash_exit3);
    tcase_add_loop_test(tc, test_crash_other_signals, 0, 4);
    tcase_add_test(tc, test_crash_exec_segv);
    tcase_add_test(tc, test_clean_exit_policies);
    tcase_add_test(tc, test_backoff_delays);
    tcase_add_test(tc, test_retire_budget);
    tcase_add_test(tc, test_ready_timeout_counts);
    suite_add_tcase(s, tc);
    tc = pm_tcase("spawn-and-stop", 60);
    tcase_add_test(tc, test_spawn_missing_program);
    tcase_add_test(tc, test_spawn_failure_kills_siblings);
    tcase_add_test(tc, test_terminate_ignores_sigterm);
    tcase_add_test(tc, test_terminate_cancels_backoff);
    tcase_add_test(tc, test_supervisor_killed);
    tcase_add_test(tc, test_many_crash_at_once);
    tcase_add_test(tc, test_spawn_resources_exhausted);
    suite_add_tcase(s, tc);
    tc = pm_tcase("containment", 60);
    tcase_add_test(tc, test_containment_fork);
    tcase_add_test(tc, test_containment_exec);
    tcase_add_test(tc, test_signals_and_fd);
    tcase_add_test(tc, test_epoll_backend);
    tcase_add_test(tc, test_ready_mode_exec_and_listen_fds);
    tcase_add_test(tc, test_reap_orphans);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
