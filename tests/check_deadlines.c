/* SPDX-License-Identifier: MIT */
/*
 * check_deadlines.c - the slots' deadline heap (exact: order, moves,
 * removals, a randomized comparison with a linear scan) and, with real
 * workers, that a loop turn's work does not grow with the number of slots.
 */
#include "helpers.h"

#include "supervisor/deadlines.h"
#include "internals.h"

/* ------------------------------------------------------------ the heap */

static pm__deadlines d;

static void fresh(unsigned cap)
{
    ck_assert_int_eq(pm__deadlines_init(&d, cap), 0);
}

/* Pops every due entry at now in one pass into ids; returns how many. */
static unsigned pop_all(uint64_t now, unsigned *ids, unsigned max)
{
    unsigned n = 0, id;
    pm__deadlines_pass_begin(&d);
    while (n < max && pm__deadlines_pop_due(&d, now, &id))
        ids[n++] = id;
    return n;
}

/* id's deadline, 0 for none (the heap's layout is deadlines.h's). */
static uint64_t deadline_of(const pm__deadlines *dl, unsigned id)
{
    if (id >= dl->cap || dl->pos[id] == 0)
        return 0;
    return dl->heap[dl->pos[id] - 1].at;
}

START_TEST(test_heap_order)
{
    fresh(8);
    ck_assert_uint_eq(pm__deadlines_first(&d, NULL), 0);
    static const uint64_t at[8] = {50, 10, 40, 30, 20, 70, 60, 80};
    for (unsigned i = 0; i < 8; i++)
        pm__deadlines_set(&d, i, at[i]);
    unsigned id = 99;
    ck_assert_uint_eq(pm__deadlines_first(&d, &id), 10);
    ck_assert_uint_eq(id, 1);
    for (unsigned i = 0; i < 8; i++)
        ck_assert_uint_eq(deadline_of(&d, i), at[i]);
    /* Due at 45: 10, 20, 30, 40 in that order, nothing later. */
    unsigned ids[8];
    ck_assert_uint_eq(pop_all(45, ids, 8), 4);
    ck_assert_uint_eq(ids[0], 1);
    ck_assert_uint_eq(ids[1], 4);
    ck_assert_uint_eq(ids[2], 3);
    ck_assert_uint_eq(ids[3], 2);
    ck_assert_uint_eq(deadline_of(&d, 1), 0); /* popped: gone */
    ck_assert_uint_eq(pm__deadlines_first(&d, &id), 50);
    ck_assert_uint_eq(id, 0);
    ck_assert_uint_eq(pop_all(1000, ids, 8), 4);
    ck_assert_uint_eq(ids[0], 0);
    ck_assert_uint_eq(ids[1], 6);
    ck_assert_uint_eq(ids[2], 5);
    ck_assert_uint_eq(ids[3], 7);
    ck_assert_uint_eq(d.n, 0);
    ck_assert_uint_eq(pm__deadlines_first(&d, NULL), 0);
    pm__deadlines_free(&d);
}
END_TEST

START_TEST(test_heap_equal_deadlines)
{
    /* Equal deadlines come out lowest id first, whatever order they were
     * set in: the order a walk of the slots gives. */
    fresh(6);
    static const unsigned order[6] = {5, 2, 4, 0, 3, 1};
    for (unsigned i = 0; i < 6; i++)
        pm__deadlines_set(&d, order[i], 100);
    unsigned ids[6];
    ck_assert_uint_eq(pop_all(100, ids, 6), 6);
    for (unsigned i = 0; i < 6; i++)
        ck_assert_uint_eq(ids[i], i);
    /* Not due one ms early. */
    pm__deadlines_set(&d, 3, 100);
    ck_assert_uint_eq(pop_all(99, ids, 6), 0);
    ck_assert_uint_eq(pop_all(100, ids, 6), 1);
    pm__deadlines_free(&d);
}
END_TEST

START_TEST(test_heap_update_and_remove)
{
    fresh(5);
    for (unsigned i = 0; i < 5; i++)
        pm__deadlines_set(&d, i, 100 + 10 * i); /* 100 110 120 130 140 */
    unsigned id;
    /* Moved later: the root goes down. */
    pm__deadlines_set(&d, 0, 135);
    ck_assert_uint_eq(pm__deadlines_first(&d, &id), 110);
    ck_assert_uint_eq(id, 1);
    /* Moved earlier: a leaf comes up to the root. */
    pm__deadlines_set(&d, 4, 50);
    ck_assert_uint_eq(pm__deadlines_first(&d, &id), 50);
    ck_assert_uint_eq(id, 4);
    /* Set to the same value: nothing changes. */
    pm__deadlines_set(&d, 4, 50);
    ck_assert_uint_eq(d.n, 5);
    /* Removal of the root. */
    pm__deadlines_set(&d, 4, 0);
    ck_assert_uint_eq(d.n, 4);
    ck_assert_uint_eq(deadline_of(&d, 4), 0);
    ck_assert_uint_eq(pm__deadlines_first(&d, &id), 110);
    ck_assert_uint_eq(id, 1);
    /* Removal of the last entry in the array. */
    unsigned last = d.heap[d.n - 1].id;
    pm__deadlines_set(&d, last, 0);
    ck_assert_uint_eq(d.n, 3);
    ck_assert_uint_eq(deadline_of(&d, last), 0);
    /* Removing what is not there, or an id out of range: no effect. */
    pm__deadlines_set(&d, last, 0);
    pm__deadlines_set(&d, 4, 0);
    pm__deadlines_set(&d, 5, 10);
    pm__deadlines_set(&d, 1000, 10);
    ck_assert_uint_eq(d.n, 3);
    ck_assert_uint_eq(deadline_of(&d, 1000), 0);
    /* Every position agrees with the heap. */
    for (unsigned i = 0; i < d.n; i++)
        ck_assert_uint_eq(d.pos[d.heap[i].id], i + 1);
    /* Down to empty. */
    for (unsigned i = 0; i < 5; i++)
        pm__deadlines_set(&d, i, 0);
    ck_assert_uint_eq(d.n, 0);
    ck_assert_uint_eq(pm__deadlines_first(&d, NULL), 0);
    pm__deadlines_free(&d);
}
END_TEST

START_TEST(test_heap_once_per_pass)
{
    /* An id set due again while its pass runs (a start that failed at
     * once, restarted with no delay) waits for the next pass, and so does
     * what is behind it; nothing is lost. */
    fresh(3);
    pm__deadlines_set(&d, 0, 10);
    pm__deadlines_set(&d, 1, 20);
    unsigned id;
    pm__deadlines_pass_begin(&d);
    ck_assert(pm__deadlines_pop_due(&d, 30, &id));
    ck_assert_uint_eq(id, 0);
    pm__deadlines_set(&d, 0, 5); /* due again, earliest */
    ck_assert(!pm__deadlines_pop_due(&d, 30, &id));
    ck_assert_uint_eq(d.n, 2);
    pm__deadlines_pass_begin(&d);
    ck_assert(pm__deadlines_pop_due(&d, 30, &id));
    ck_assert_uint_eq(id, 0);
    ck_assert(pm__deadlines_pop_due(&d, 30, &id));
    ck_assert_uint_eq(id, 1);
    ck_assert(!pm__deadlines_pop_due(&d, 30, &id));
    /* Empty and zero-capacity heaps. */
    pm__deadlines_free(&d);
    fresh(0);
    pm__deadlines_set(&d, 0, 10);
    pm__deadlines_pass_begin(&d);
    ck_assert(!pm__deadlines_pop_due(&d, 100, &id));
    pm__deadlines_free(&d);
}
END_TEST

/* The earliest (at, id) by a linear scan, as turn.c used to find it. */
static uint64_t scan_first(const uint64_t *at, unsigned n, unsigned *id)
{
    uint64_t best = 0;
    for (unsigned i = 0; i < n; i++)
        if (at[i] != 0 && (best == 0 || at[i] < best)) {
            best = at[i];
            *id = i;
        }
    return best;
}

START_TEST(test_heap_random_against_scan)
{
    enum { N = 97, STEPS = 20000 };
    static uint64_t at[N];
    memset(at, 0, sizeof(at));
    uint64_t seed = 0x5eed;
    fresh(N);
    uint64_t now = 1000;
    for (unsigned step = 0; step < STEPS; step++) {
        unsigned id = (unsigned)(pm_test_rand(&seed) % N);
        unsigned r = (unsigned)(pm_test_rand(&seed) % 10);
        if (r < 2) {
            at[id] = 0;
        } else if (r < 9) {
            /* A narrow range, so that equal deadlines are common. */
            at[id] = now + pm_test_rand(&seed) % 50;
        } else {
            /* Fire what is due, and compare the order with the scan. */
            now += pm_test_rand(&seed) % 20;
            pm__deadlines_pass_begin(&d);
            unsigned got;
            while (pm__deadlines_pop_due(&d, now, &got)) {
                unsigned want = N;
                uint64_t w = scan_first(at, N, &want);
                ck_assert_msg(w != 0 && w <= now, "step %u: popped %u, nothing due", step, got);
                ck_assert_msg(got == want, "step %u: popped %u, scan says %u", step, got, want);
                at[got] = 0;
            }
            unsigned want = N;
            uint64_t w = scan_first(at, N, &want);
            ck_assert_msg(w == 0 || w > now, "step %u: slot %u due and not popped", step, want);
            continue;
        }
        pm__deadlines_set(&d, id, at[id]);
        unsigned hid = N, sid = N;
        uint64_t h = pm__deadlines_first(&d, &hid);
        uint64_t s = scan_first(at, N, &sid);
        ck_assert_msg(h == s, "step %u: first %llu, scan %llu", step, (unsigned long long)h,
                      (unsigned long long)s);
        if (s != 0)
            ck_assert_uint_eq(hid, sid);
        ck_assert_uint_eq(deadline_of(&d, id), at[id]);
    }
    pm__deadlines_free(&d);
}
END_TEST

/* ------------------------------------------------- a turn's work vs N */

/* Incarnation 1 exits (failure) right after READY when exit_first is set;
 * every other one waits for messages until told to stop. */
static int exit_first;

static int idle_worker(pm_node *n, void *arg)
{
    (void)arg;
    /* Check's handler (inherited through the fork) would signal the
     * test's whole process group on the stop request's SIGTERM. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    pm_node_ready(n);
    if (exit_first && pm_node_self(n)->incarnation == 1)
        return 3;
    pm_message m;
    for (;;) {
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            return 30;
    }
}

static pm_options *scale_opts(int workers)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, workers);
    pm_options_set_bootstrap(o, idle_worker, NULL);
    pm_options_set_heartbeat_timeout_ms(o, 200); /* a liveness check every 50 ms */
    pm_options_set_ring_size(o, 64 * 1024);
    pm_options_set_stop_timeout_ms(o, 2000);
    pm_options_set_ready_timeout_ms(o, 30000);
    return o;
}

/* N idle workers, liveness on: the turns that run (the liveness timer's,
 * the test's own slices) look at no slot; the liveness check looks at
 * each slot once per check (at its fixed period, not per turn). */
static void idle_visits(int workers)
{
    exit_first = 0;
    pm_options *o = scale_opts(workers);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    uint64_t t0 = pm_test_cluster_turns(c), v0 = pm_test_cluster_turn_visits(c);
    uint64_t k0 = pm_test_liveness_checks(c), kv0 = pm_test_liveness_visits(c);
    PM_RUN_UNTIL(c, pm_test_liveness_checks(c) >= k0 + 10 && pm_test_cluster_turns(c) >= t0 + 20,
                 20000);
    uint64_t turns = pm_test_cluster_turns(c) - t0;
    uint64_t visits = pm_test_cluster_turn_visits(c) - v0;
    uint64_t checks = pm_test_liveness_checks(c) - k0;
    uint64_t lvisits = pm_test_liveness_visits(c) - kv0;
    fprintf(stderr, "N=%d: %llu turns, %llu slot visits by turns, %llu liveness checks "
            "visiting %llu slots\n", workers, (unsigned long long)turns,
            (unsigned long long)visits, (unsigned long long)checks, (unsigned long long)lvisits);
    ck_assert_msg(visits == 0, "N=%d: %llu slot visits in %llu idle turns (want none)", workers,
                  (unsigned long long)visits, (unsigned long long)turns);
    ck_assert_msg(lvisits == checks * (uint64_t)workers,
                  "N=%d: liveness visited %llu slots in %llu checks (want N per check)", workers,
                  (unsigned long long)lvisits, (unsigned long long)checks);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}

START_TEST(test_idle_turns_visit_no_slot)
{
    idle_visits(2);
    idle_visits(64);
}
END_TEST

static unsigned count_state(const pm_cluster *c, int n, int state)
{
    unsigned k = 0;
    for (int i = 0; i < n; i++)
        k += pm_test_slot_state(c, (unsigned)i) == state;
    return k;
}

static unsigned second_incarnations(const pm_cluster *c, int n)
{
    unsigned k = 0;
    for (int i = 0; i < n; i++)
        k += pm_test_slot_incarnation(c, (unsigned)i) >= 2;
    return k;
}

/* Every worker exits after its first READY and waits out a long backoff:
 * N deadlines pending. The turns while they wait look at no slot; each
 * backoff that ends is one visit (the fire), so the whole restart costs N
 * visits, not N per turn. Exits are reported by the pidfds (no signalfd),
 * each naming its slot. */
static void backoff_visits(int workers)
{
    exit_first = 1;
    pm_options *o = scale_opts(workers);
    pm_options_set_handle_signals(o, 0);
    pm_options_set_restart_min_backoff_ms(o, 1500);
    pm_options_set_restart_max_backoff_ms(o, 1500);
    pm_options_set_restart_random_factor(o, 0.0);
    pm_options_set_max_restarts(o, -1);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    if (pm_test_cluster_polls_children(c)) {
        pm_cluster_terminate(c);
        pm_test_skip("no pidfds: exits are found by a scan of the slots");
    }
    /* Each slot still in its first incarnation (ready and about to exit,
     * or exited and in its backoff) has one backoff deadline to fire;
     * one already started again has none (its ready timeout is far). */
    uint64_t t0 = pm_test_cluster_turns(c), v0 = pm_test_cluster_turn_visits(c);
    unsigned waiting = 0;
    for (int i = 0; i < workers; i++)
        waiting += pm_test_slot_incarnation(c, (unsigned)i) == 1;
    /* Until every one of them is ready again. */
    PM_RUN_UNTIL(c, count_state(c, workers, PM_SLOT_READY) == (unsigned)workers &&
                        second_incarnations(c, workers) == (unsigned)workers,
                 30000);
    uint64_t turns = pm_test_cluster_turns(c) - t0;
    uint64_t visits = pm_test_cluster_turn_visits(c) - v0;
    fprintf(stderr, "N=%d: %u backoffs waited out in %llu turns, %llu slot visits\n", workers,
            waiting, (unsigned long long)turns, (unsigned long long)visits);
    ck_assert_msg(visits == waiting, "N=%d: %llu slot visits for %u backoffs over %llu turns "
                  "(want one per backoff)", workers, (unsigned long long)visits, waiting,
                  (unsigned long long)turns);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}

START_TEST(test_backoff_turns_visit_due_slots_only)
{
    backoff_visits(2);
    backoff_visits(64);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("deadlines");
    PM_ADD_TEST(s, test_heap_order, 30);
    PM_ADD_TEST(s, test_heap_equal_deadlines, 30);
    PM_ADD_TEST(s, test_heap_update_and_remove, 30);
    PM_ADD_TEST(s, test_heap_once_per_pass, 30);
    PM_ADD_TEST(s, test_heap_random_against_scan, 60);
    PM_ADD_TEST(s, test_idle_turns_visit_no_slot, 120);
    PM_ADD_TEST(s, test_backoff_turns_visit_due_slots_only, 120);
    return pm_test_main(s);
}
