/* SPDX-License-Identifier: MIT */
/*
 * check_restart.c - what the supervisor does when workers end: crashes by
 * every signal and exit code, restart policies, the backoff between
 * restarts, retirement when the budget is spent, the ready timeout, and
 * many workers dying at once. Real processes and real signals.
 */
#include "helpers.h"


#include "procmesh.h"
#include "supervise.h"

#ifndef PM_TEST_WORKER
#error "PM_TEST_WORKER must name the pm-test-worker binary"
#endif

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

START_TEST(test_crash_exec_segv)
{
    /* Exec mode: every incarnation crashes after ready; the budget (2)
     * retires it with exactly one down call. */
    pm_options *o = opts(1);
    exec_opts(o, "segv", NULL);
    pm_options_set_max_restarts(o, 2);
    pm_cluster *c;
    /* The worker publishes READY and crashes at once, so its exit is often
     * handled before the READY is read. doc/design.md: a READY published
     * just before dying is still read when the exit is handled. So the
     * first incarnation did become ready, spawn succeeds, and only then do
     * the crashes count against the budget. */
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 3);
    ck_assert_int_eq(count(PM_EVENT_EXITED, 0), 3);
    ck_assert_int_eq(downs, 1);
    ck_assert_uint_eq(down_restarts, 2);
    for (int k = 0; k < 3; k++)
        ck_assert_int_eq(find(PM_EVENT_EXITED, 0, k)->signal, SIGSEGV);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
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
    /* Stop it between two incarnations, when no process exists: nothing
     * has to be killed. (READY is not enough: the worker may already have
     * exited, unseen, and terminate would then meet its replacement in its
     * handshake and kill it.) */
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_BACKOFF || slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
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
    /* Between incarnations, as above: nothing to kill. */
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_BACKOFF || slot_state(c, 0) == PM_SLOT_RETIRED, 10000);
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
    /* The crash loop goes on. Stop it between two incarnations (in backoff,
     * or retired once the budget is spent): no worker has to be killed. */
    RUN_UNTIL(c, slot_state(c, 0) == PM_SLOT_BACKOFF || slot_state(c, 0) == PM_SLOT_RETIRED,
              10000);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
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
    /* Killed no earlier than the timeout after its fork. The STARTED event
     * is emitted some time after the fork (a few ms on a loaded machine), so
     * measure from the previous incarnation's exit, which came before it. */
    ck_assert_uint_ge(e->t_ms - find(PM_EVENT_EXITED, 0, 0)->t_ms, 300);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    assert_all_started_gone();
    pm_options_free(o);
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

int main(void)
{
    Suite *s = suite_create("restart");
    PM_ADD_TEST(s, test_crash_segv, 60);
    PM_ADD_TEST(s, test_crash_abort, 60);
    PM_ADD_TEST(s, test_crash_exit3, 60);
    PM_ADD_LOOP_TEST(s, test_crash_other_signals, 0, 4, 60);
    PM_ADD_TEST(s, test_crash_exec_segv, 60);
    PM_ADD_TEST(s, test_clean_exit_policies, 60);
    PM_ADD_TEST(s, test_backoff_delays, 60);
    PM_ADD_TEST(s, test_retire_budget, 60);
    PM_ADD_TEST(s, test_ready_timeout_counts, 60);
    PM_ADD_TEST(s, test_many_crash_at_once, 60);
    return pm_test_main(s);
}
