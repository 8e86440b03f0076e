/* SPDX-License-Identifier: MIT */
/* check_budget.c - the pure parts of the supervisor: restart budget,
 * backoff arithmetic and the slot state x event table. Exact, no clock. */
#include "helpers.h"

#include "supervisor/budget.h"
#include "procmesh.h"
#include "supervisor/slot.h"
#include "supervisor/types.h" /* pm__slot_tag_current */

static pm__budget_cfg cfg(uint32_t min, uint32_t max, double f, int n, uint32_t window)
{
    pm__budget_cfg c = {min, max, f, n, window};
    return c;
}

START_TEST(test_backoff_sequence)
{
    pm__budget_cfg c = cfg(200, 10000, 0.0, -1, 60000);
    static const uint32_t want[] = {200, 400, 800, 1600, 3200, 6400, 10000, 10000, 10000};
    for (unsigned n = 1; n <= ARRAY_LEN(want); n++)
        ck_assert_uint_eq(pm__budget_backoff(&c, n), want[n - 1]);
    /* No overflow however many restarts. */
    ck_assert_uint_eq(pm__budget_backoff(&c, 1000000), 10000);
    c = cfg(0, 10000, 0.0, -1, 0);
    ck_assert_uint_eq(pm__budget_backoff(&c, 5), 0);
    c = cfg(300, 300, 0.0, -1, 0);
    ck_assert_uint_eq(pm__budget_backoff(&c, 3), 300);

    /* The same sequence through on_failure with no jitter. */
    pm__budget b;
    pm__budget_init(&b);
    c = cfg(200, 10000, 0.0, -1, 60000);
    uint64_t t = 1000;
    for (unsigned n = 1; n <= ARRAY_LEN(want); n++) {
        uint32_t d = 0;
        ck_assert_int_eq(pm__budget_on_failure(&b, &c, t, 0.5, &d), PM__BUDGET_RESTART);
        ck_assert_uint_eq(d, want[n - 1]);
        t += 10;
    }
    ck_assert_uint_eq(b.total, ARRAY_LEN(want));
    pm__budget_free(&b);
}
END_TEST

START_TEST(test_jitter_bounds)
{
    pm__budget_cfg c = cfg(1000, 1000, 0.2, -1, 0);
    pm__budget b;
    pm__budget_init(&b);
    uint32_t d;
    /* rand01 = 0 gives the low bound, -> 1 the high bound. */
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1, 0.0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 800);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 2, 0.5, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 1000);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 3, 0.999999, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 1200);
    uint64_t seed = 5;
    for (int i = 0; i < 10000; i++) {
        double r = (double)(pm_test_rand(&seed) >> 11) * 0x1.0p-53;
        ck_assert_int_eq(pm__budget_on_failure(&b, &c, 4, r, &d), PM__BUDGET_RESTART);
        ck_assert_uint_ge(d, 800);
        ck_assert_uint_le(d, 1200);
    }
    c.random_factor = 1.0;
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 5, 0.0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 0);
    pm__budget_free(&b);
}
END_TEST

START_TEST(test_window_sliding)
{
    /* 3 restarts per 1000 ms. */
    pm__budget_cfg c = cfg(0, 0, 0.0, 3, 1000);
    pm__budget b;
    pm__budget_init(&b);
    uint32_t d;
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 0, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 100, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 200, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(pm__budget_in_window(&b, &c, 200), 3);
    /* The 4th within the window would exceed it: retire. */
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 999, 0, &d), PM__BUDGET_RETIRE);
    ck_assert_uint_eq(b.total, 3);
    pm__budget_free(&b);

    /* Once the oldest has left the window there is room again. */
    pm__budget_init(&b);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 0, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 100, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 200, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(pm__budget_in_window(&b, &c, 1000), 2); /* t=0 left at exactly 1000 */
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1000, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1050, 0, &d), PM__BUDGET_RETIRE);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1100, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(pm__budget_in_window(&b, &c, 5000), 0);
    /* A long run of spaced failures never retires. */
    for (uint64_t t = 10000; t < 1000000; t += 400)
        ck_assert_int_eq(pm__budget_on_failure(&b, &c, t, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_le(b.cap, 4);
    pm__budget_free(&b);
}
END_TEST

START_TEST(test_window_zero_and_unlimited)
{
    pm__budget b;
    uint32_t d;
    /* Window 0: the count never resets. */
    pm__budget_cfg c = cfg(0, 0, 0.0, 2, 0);
    pm__budget_init(&b);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 0, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1000000000, 0, &d), PM__BUDGET_RESTART);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 5000000000ull, 0, &d), PM__BUDGET_RETIRE);
    ck_assert_uint_eq(pm__budget_in_window(&b, &c, 9000000000ull), 2);
    pm__budget_free(&b);
    /* max_restarts 0: the first failure retires. */
    c = cfg(0, 0, 0.0, 0, 1000);
    pm__budget_init(&b);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 0, 0, &d), PM__BUDGET_RETIRE);
    pm__budget_free(&b);
    /* -1: unlimited, and no memory grows with it. */
    c = cfg(1, 100, 0.0, -1, 1000);
    pm__budget_init(&b);
    for (int i = 0; i < 100000; i++)
        ck_assert_int_eq(pm__budget_on_failure(&b, &c, (uint64_t)i, 0, &d), PM__BUDGET_RESTART);
    ck_assert_ptr_null(b.times);
    ck_assert_uint_eq(b.total, 100000);
    pm__budget_free(&b);
}
END_TEST

START_TEST(test_consecutive_reset)
{
    pm__budget_cfg c = cfg(100, 1000, 0.0, -1, 0);
    pm__budget b;
    pm__budget_init(&b);
    uint32_t d;
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 0, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 100);
    pm__budget_on_ready(&b, 100);
    /* Ready for less than max backoff (1000): the backoff keeps growing. */
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1099, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 200);
    pm__budget_on_ready(&b, 1300);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 1400, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 400);
    /* Ready for exactly max backoff: forgiven, back to the minimum. */
    pm__budget_on_ready(&b, 2000);
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 3000, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 100);
    ck_assert_uint_eq(b.consecutive, 1);
    /* A failure before ready (never ready) does not reset it. */
    ck_assert_int_eq(pm__budget_on_failure(&b, &c, 90000, 0, &d), PM__BUDGET_RESTART);
    ck_assert_uint_eq(d, 200);
    pm__budget_free(&b);
}
END_TEST

START_TEST(test_slot_table)
{
    /* Every cell of the table, written out here independently of
     * src/supervisor/slot.c, so that a changed cell is a failing test. Columns:
     * READY, EXITED, READY_TIMEOUT, BACKOFF_DONE, STOP, STOP_TIMEOUT, FAULT. */
    enum { I = PM__A_IGNORE };
    static const int want[PM__SLOT_STATES][PM__EV_COUNT] = {
        [0] = {I, I, I, I, I, I, I},
        [PM_SLOT_STARTING] = {PM__A_READY, PM__A_FAILED, PM__A_KILL, I, PM__A_STOP_KILL, I,
                              PM__A_KILL},
        [PM_SLOT_READY] = {I, PM__A_ENDED, I, I, PM__A_STOP_REQUEST, I, PM__A_KILL},
        [PM_SLOT_BACKOFF] = {I, I, I, PM__A_SPAWN, PM__A_CANCEL, I, I},
        [PM_SLOT_RETIRED] = {I, I, I, I, I, I, I},
        [PM_SLOT_STOPPED] = {I, I, I, I, I, I, I},
        [PM_SLOT_STOPPING] = {I, PM__A_STOPPED, I, I, I, PM__A_KILL, PM__A_KILL},
    };
    ck_assert_int_eq(PM__EV_COUNT, 7);
    ck_assert_int_eq(PM__SLOT_STATES, 7);
    static const char *const event_names[] = {"ready", "exited", "ready-timeout", "backoff-done",
                                              "stop",  "stop-timeout", "fault"};
    for (int st = 0; st < PM__SLOT_STATES; st++)
        for (int e = 0; e < PM__EV_COUNT; e++)
            ck_assert_msg(pm__slot_action(st, e) == want[st][e], "state %s, event %s: action %d, want %d",
                          pm_slot_state_name(st), event_names[e], pm__slot_action(st, e),
                          want[st][e]);
    /* The FAULT row: a worker breaking the protocol is killed wherever it
     * is alive (starting, ready, or already stopping), and nothing else
     * reacts to it. */
    ck_assert_int_eq(pm__slot_action(PM_SLOT_STARTING, PM__EV_FAULT), PM__A_KILL);
    ck_assert_int_eq(pm__slot_action(PM_SLOT_READY, PM__EV_FAULT), PM__A_KILL);
    ck_assert_int_eq(pm__slot_action(PM_SLOT_STOPPING, PM__EV_FAULT), PM__A_KILL);
    ck_assert_int_eq(pm__slot_action(PM_SLOT_BACKOFF, PM__EV_FAULT), PM__A_IGNORE);
    /* No exit report can respawn anything directly: only BACKOFF spawns. */
    for (int st = 0; st < PM__SLOT_STATES; st++)
        for (int e = 0; e < PM__EV_COUNT; e++)
            if (pm__slot_action(st, e) == PM__A_SPAWN)
                ck_assert(st == PM_SLOT_BACKOFF && e == PM__EV_BACKOFF_DONE);
    /* Out of range: ignored. */
    ck_assert_int_eq(pm__slot_action(-1, 0), PM__A_IGNORE);
    ck_assert_int_eq(pm__slot_action(99, 0), PM__A_IGNORE);
    ck_assert_int_eq(pm__slot_action(PM_SLOT_READY, -1), PM__A_IGNORE);
    ck_assert_int_eq(pm__slot_action(PM_SLOT_READY, 99), PM__A_IGNORE);
    /* Every state and event has its name. */
    static const char *const states[] = {"none",    "starting", "ready",   "backoff",
                                         "retired", "stopped",  "stopping"};
    for (int st = 0; st < PM__SLOT_STATES; st++)
        ck_assert_str_eq(pm_slot_state_name(st), states[st]);
    ck_assert_str_eq(pm_slot_state_name(99), "none");
}
END_TEST

/* One loop carries every slot's completions, each tagged with the
 * incarnation it was armed for (os/loop.h): one that arrives after that
 * incarnation died, when the slot has no process or has the next one, is
 * dropped, never handled as the new incarnation's (turn.c handle_tag). */
START_TEST(test_stale_completion_tag)
{
    pm__slot s;
    memset(&s, 0, sizeof(s));
    s.index = 3;
    s.incarnation = 2;
    s.pid = 0;
    /* No process: nothing is current, not even its own incarnation. */
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_PIDFD, 3, 2)), 0);
    s.pid = 4242;
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_PIDFD, 3, 2)), 1);
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_EXECPIPE, 3, 2)), 1);
    /* The dead incarnation's, and one not made yet: dropped. */
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_PIDFD, 3, 1)), 0);
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_HUB, 3, 3)), 0);
    /* The tag keeps the low 32 bits: incarnation 2^32 + 2 is tagged 2. */
    s.incarnation = (1ULL << 32) + 2;
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_SOCK, 3, s.incarnation)), 1);
    ck_assert_int_eq(pm__slot_tag_current(&s, PM__TAG(PM__TAG_SOCK, 3, 1)), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("budget");
    TCase *tc = pm_tcase("budget", 30);
    tcase_add_test(tc, test_backoff_sequence);
    tcase_add_test(tc, test_jitter_bounds);
    tcase_add_test(tc, test_window_sliding);
    tcase_add_test(tc, test_window_zero_and_unlimited);
    tcase_add_test(tc, test_consecutive_reset);
    suite_add_tcase(s, tc);
    tc = pm_tcase("slot-table", 30);
    tcase_add_test(tc, test_slot_table);
    tcase_add_test(tc, test_stale_completion_tag);
    suite_add_tcase(s, tc);
    return pm_test_main(s);
}
