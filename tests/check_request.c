/* SPDX-License-Identifier: MIT */
/*
 * check_request.c - main asks one worker (pm_cluster_request, _cancel,
 * _call) with real processes: one callback per request on every path
 * (reply, timeout, late reply, crash, fence, cancel, terminate), the
 * any-worker pick (fewest in flight, round robin among ties) across
 * crashes, timeouts and fences, waiting for a ready worker, and the
 * blocking form's errors (-ENOBUFS, -EINTR, -EDEADLK ...).
 */
#include "helpers.h"

#include <limits.h>

#include "internals.h"

#define RUN_UNTIL PM_RUN_UNTIL

/* ---------------------------------------------------------------- the worker */

/* Fork-mode workers act on the request's text:
 *   "echo:X"   answers "slot<N>:X"
 *   "hold"     keeps it; a plain message "release" answers every kept one
 *              with "held<N>"
 *   "late:MS"  sleeps MS ms, then answers "late"
 *   "crash"    dies of SIGSEGV
 *   "hang"     spins without any procmesh call (fenced: heartbeat)
 *   "note"     sends main a plain message "#note", then answers "noted"
 *   "term"     sends SIGTERM to the supervisor, answers nothing
 *   "askmain"  asks main, answers "askmain:RC" with pm_node_request's result */
#define MAX_HELD 256

static int worker(pm_node *n, void *arg)
{
    (void)arg;
    /* Check's fork mode leaves handlers a fork-mode worker inherits. */
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    unsigned slot = pm_node_slot(n);
    pm_message held[MAX_HELD];
    int nheld = 0;
    pm_node_ready(n);
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            return 10;
        char text[64];
        size_t len = m.len < sizeof(text) - 1 ? m.len : sizeof(text) - 1;
        memcpy(text, m.data, len);
        text[len] = '\0';
        if (m.kind == PM_MSG_PLAIN && strcmp(text, "release") == 0) {
            char out[32];
            int k = snprintf(out, sizeof(out), "held%u", slot);
            for (int i = 0; i < nheld; i++)
                pm_node_reply(n, &held[i], out, (size_t)k);
            nheld = 0;
            continue;
        }
        if (m.kind != PM_MSG_REQUEST)
            continue;
        if (strncmp(text, "echo:", 5) == 0) {
            char out[96];
            int k = snprintf(out, sizeof(out), "slot%u:%s", slot, text + 5);
            pm_node_reply(n, &m, out, (size_t)k);
        } else if (strcmp(text, "hold") == 0 && nheld < MAX_HELD) {
            held[nheld] = m;
            held[nheld].data = NULL; /* only from and request_id are needed */
            held[nheld].len = 0;
            nheld++;
        } else if (strncmp(text, "late:", 5) == 0) {
            usleep((useconds_t)atoi(text + 5) * 1000u);
            pm_node_reply(n, &m, "late", 4);
        } else if (strcmp(text, "crash") == 0) {
            raise(SIGSEGV); /* a real signal, also in sanitizer builds */
        } else if (strcmp(text, "hang") == 0) {
            for (volatile int spin = 1; spin;)
                ;
        } else if (strcmp(text, "note") == 0) {
            pm_address main_addr = {.system = "procmesh", .host = "main"};
            pm_node_send(n, &main_addr, "#note", 5);
            pm_node_reply(n, &m, "noted", 5);
        } else if (strcmp(text, "term") == 0) {
            kill(getppid(), SIGTERM);
        } else if (strcmp(text, "askmain") == 0) {
            /* Asks main (30 s deadline), answers with the outcome. */
            pm_address main_addr = {.system = "procmesh", .host = "main"};
            pm_message r;
            int asked = pm_node_request(n, &main_addr, "?", 1, 30000, &r);
            char out[32];
            int k = snprintf(out, sizeof(out), "askmain:%d", asked);
            pm_node_reply(n, &m, out, (size_t)k);
        }
    }
}

/* ---------------------------------------------------------------- main's side */

/* One request's outcome, filled by its callback. */
struct result {
    int calls;
    int err;
    unsigned slot;      /* from.port - 1; UINT32_MAX when from is empty */
    uint64_t inc;
    char text[64];
    int nested;         /* what a call made from inside the callback returned */
};

static struct result results[256];
static int on_message_calls;
static int deadlk_in_message = 1;
static int exited_events, fenced_events;
static int nested_in_event = 1;
static pm_cluster *event_cluster;

static void on_result(pm_cluster *c, const pm_message *m, void *arg)
{
    struct result *r = arg;
    r->calls++;
    r->err = m->error;
    r->slot = m->from.system[0] != '\0' ? (unsigned)(m->from.port - 1) : UINT32_MAX;
    r->inc = m->from.incarnation;
    size_t len = m->len < sizeof(r->text) - 1 ? m->len : sizeof(r->text) - 1;
    if (m->error == 0)
        memcpy(r->text, m->data, len);
    r->text[m->error == 0 ? len : 0] = '\0';
    ck_assert_int_eq(m->kind, PM_MSG_REPLY);
    /* The blocking form inside a callback would run the loop in the loop. */
    char buf[8];
    r->nested = pm_cluster_call(c, NULL, "echo:x", 6, 1000, buf, sizeof(buf), NULL);
}

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)arg;
    on_message_calls++;
    deadlk_in_message = pm_cluster_call(c, NULL, "echo:x", 6, 1000, NULL, 0, NULL);
}

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)arg;
    if (e->type == PM_EVENT_EXITED)
        exited_events++;
    if (e->type == PM_EVENT_FENCED)
        fenced_events++;
    if (c == event_cluster && e->type == PM_EVENT_READY)
        nested_in_event = pm_cluster_call(c, NULL, "echo:x", 6, 1000, NULL, 0, NULL);
}

static pm_options *opts(int workers)
{
    memset(results, 0, sizeof(results));
    on_message_calls = 0;
    exited_events = fenced_events = 0;
    event_cluster = NULL;
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, workers);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_options_set_on_message(o, on_message, NULL);
    pm_options_set_on_event(o, on_event, NULL);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 50);
    pm_options_set_stop_timeout_ms(o, 2000);
    pm_options_set_ring_size(o, 256 * 1024);
    return o;
}

static pm_address slot_addr(unsigned slot, uint64_t inc)
{
    pm_address a;
    memset(&a, 0, sizeof(a));
    strcpy(a.system, "procmesh");
    strcpy(a.host, "worker");
    a.port = (uint16_t)(1 + slot);
    a.incarnation = inc;
    return a;
}

static int request(pm_cluster *c, int to_slot, const char *text, int timeout_ms,
                   struct result *r)
{
    pm_address a = slot_addr((unsigned)to_slot, 0);
    return pm_cluster_request(c, to_slot < 0 ? NULL : &a, text, strlen(text), timeout_ms,
                              on_result, r);
}

/* Every request of a test has had its one callback, and a round trip
 * after it brought no second one. */
static void assert_once(pm_cluster *c, int n)
{
    struct result probe;
    memset(&probe, 0, sizeof(probe));
    ck_assert_int_gt(request(c, -1, "echo:probe", 10000, &probe), 0);
    RUN_UNTIL(c, probe.calls == 1, 10000);
    for (int i = 0; i < n; i++)
        ck_assert_msg(results[i].calls == 1, "request %d had %d callbacks", i, results[i].calls);
}

/* Callbacks run for results[from .. to-1]. */
static int calls_in(int from, int to)
{
    int n = 0;
    for (int i = from; i < to; i++)
        n += results[i].calls;
    return n;
}

static void terminate(pm_cluster *c)
{
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_reply)
{
    pm_options *o = opts(2);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    int id = request(c, 1, "echo:hi", 10000, &results[0]);
    ck_assert_int_gt(id, 0);
    ck_assert_int_eq(results[0].calls, 0); /* only ever from the loop */
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_eq(results[0].err, 0);
    ck_assert_str_eq(results[0].text, "slot1:hi");
    ck_assert_uint_eq(results[0].slot, 1);
    ck_assert_uint_eq(results[0].inc, pm_test_slot_incarnation(c, 1));
    ck_assert_int_eq(results[0].nested, -EDEADLK);
    /* A second request gets another id; the first is no longer pending. */
    int id2 = request(c, 0, "echo:again", 10000, &results[1]);
    ck_assert_int_gt(id2, 0);
    ck_assert_int_ne(id2, id);
    ck_assert_int_eq(pm_cluster_cancel(c, (uint64_t)id), -ENOENT);
    RUN_UNTIL(c, results[1].calls == 1, 10000);
    ck_assert_str_eq(results[1].text, "slot0:again");
    assert_once(c, 2);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), 0);
    terminate(c);
    pm_options_free(o);
}
END_TEST

START_TEST(test_timeout_then_late_reply)
{
    pm_options *o = opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t late0 = pm_test_late_replies(c);
    ck_assert_int_gt(request(c, 0, "late:600", 100, &results[0]), 0);
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_eq(results[0].err, -ETIMEDOUT);
    ck_assert_uint_eq(results[0].slot, 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0); /* forgotten at the deadline */
    /* The answer still comes: dropped and counted, no second callback. */
    RUN_UNTIL(c, pm_test_late_replies(c) == late0 + 1, 10000);
    assert_once(c, 1);
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_eq(st.late_replies, late0 + 1);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* Any-worker requests across a crash: the poison request crashes one
 * worker and is answered -EHOSTDOWN, never retried elsewhere; the pick
 * skips the restarting slot and takes it again once it is ready. */
START_TEST(test_crash_not_retried)
{
    pm_options *o = opts(2);
    pm_options_set_restart_min_backoff_ms(o, 300);
    pm_options_set_restart_max_backoff_ms(o, 300);
    pm_options_set_restart_random_factor(o, 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t inc1 = pm_test_slot_incarnation(c, 1);
    /* Both idle: the round robin starts at slot 0. */
    ck_assert_int_gt(request(c, -1, "crash", 10000, &results[0]), 0);
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_eq(results[0].err, -EHOSTDOWN);
    ck_assert_uint_eq(results[0].slot, 0);
    pm_slot_info info;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    ck_assert_int_eq(info.last_signal, SIGSEGV);
    ck_assert_int_ne(info.state, PM_SLOT_READY);
    /* Slot 0 restarts after 300 ms: meanwhile everything goes to slot 1. */
    ck_assert_int_gt(request(c, -1, "echo:a", 10000, &results[1]), 0);
    ck_assert_int_gt(request(c, -1, "echo:b", 10000, &results[2]), 0);
    RUN_UNTIL(c, results[1].calls == 1 && results[2].calls == 1, 10000);
    ck_assert_uint_eq(results[1].slot, 1);
    ck_assert_uint_eq(results[2].slot, 1);
    RUN_UNTIL(c, pm_test_slot_state(c, 0) == PM_SLOT_READY, 10000);
    /* Idle again: ties, round robin from after slot 1. */
    ck_assert_int_gt(request(c, -1, "echo:c", 10000, &results[3]), 0);
    RUN_UNTIL(c, results[3].calls == 1, 10000);
    ck_assert_uint_eq(results[3].slot, 0);
    ck_assert_uint_eq(results[3].inc, pm_test_slot_incarnation(c, 0));
    ck_assert_int_gt(request(c, -1, "echo:d", 10000, &results[4]), 0);
    RUN_UNTIL(c, results[4].calls == 1, 10000);
    ck_assert_uint_eq(results[4].slot, 1);
    /* One crash in all: the poison never reached slot 1. */
    ck_assert_int_eq(exited_events, 1);
    ck_assert_uint_eq(pm_test_slot_incarnation(c, 1), inc1);
    assert_once(c, 5);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* A worker fenced while it holds the request: -EHOSTDOWN. While it holds
 * it, the any-worker pick prefers the other (fewest in flight). */
START_TEST(test_fence)
{
    pm_options *o = opts(2);
    pm_options_set_heartbeat_timeout_ms(o, 400);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_gt(request(c, -1, "hang", 20000, &results[0]), 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 1);
    /* Slot 0 holds one, slot 1 none: twice to slot 1 (the second after
     * the first was answered, so slot 1 is back at 0 < 1). */
    ck_assert_int_gt(request(c, -1, "echo:a", 10000, &results[1]), 0);
    RUN_UNTIL(c, results[1].calls == 1, 10000);
    ck_assert_int_gt(request(c, -1, "echo:b", 10000, &results[2]), 0);
    RUN_UNTIL(c, results[2].calls == 1, 10000);
    ck_assert_uint_eq(results[1].slot, 1);
    ck_assert_uint_eq(results[2].slot, 1);
    RUN_UNTIL(c, results[0].calls == 1, 20000);
    ck_assert_int_eq(results[0].err, -EHOSTDOWN);
    ck_assert_uint_eq(results[0].slot, 0);
    ck_assert_int_eq(fenced_events, 1);
    pm_slot_info info;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &info), 0);
    ck_assert_uint_eq(info.fences, 1);
    ck_assert_str_eq(info.last_fence_reason, "heartbeat");
    assert_once(c, 3);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* The pick: fewest of main's requests in flight, ties round robin. */
START_TEST(test_fewest_round_robin)
{
    pm_options *o = opts(3);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* Idle: 0, 1, 2, 0 ... */
    for (int i = 0; i < 4; i++) {
        ck_assert_int_gt(request(c, -1, "echo:rr", 10000, &results[i]), 0);
        RUN_UNTIL(c, results[i].calls == 1, 10000);
        ck_assert_uint_eq(results[i].slot, (unsigned)i % 3);
    }
    /* Held: slot 0 two, slot 1 one, slot 2 none (last picked: 0). */
    ck_assert_int_gt(request(c, 0, "hold", 20000, &results[4]), 0);
    ck_assert_int_gt(request(c, 0, "hold", 20000, &results[5]), 0);
    ck_assert_int_gt(request(c, 1, "hold", 20000, &results[6]), 0);
    static const unsigned want[] = {2, 1, 2, 0, 1, 2};
    uint32_t held[3] = {2, 1, 0};
    for (int i = 0; i < 6; i++) {
        ck_assert_int_gt(request(c, -1, "hold", 20000, &results[7 + i]), 0);
        held[want[i]]++;
        for (unsigned s = 0; s < 3; s++)
            ck_assert_msg(pm_test_slot_inflight(c, s) == held[s],
                          "pick %d: slot %u holds %u, want %u", i, s,
                          pm_test_slot_inflight(c, s), held[s]);
    }
    for (unsigned s = 0; s < 3; s++)
        ck_assert_uint_eq(held[s], 3);
    for (unsigned s = 0; s < 3; s++) {
        pm_address a = slot_addr(s, 0);
        ck_assert_int_eq(pm_cluster_send(c, &a, "release", 7), 0);
    }
    RUN_UNTIL(c, calls_in(4, 13) == 9, 10000);
    for (int i = 0; i < 6; i++) {
        ck_assert_int_eq(results[7 + i].err, 0);
        ck_assert_uint_eq(results[7 + i].slot, want[i]);
        char text[16];
        snprintf(text, sizeof(text), "held%u", want[i]);
        ck_assert_str_eq(results[7 + i].text, text);
    }
    assert_once(c, 13);
    terminate(c);
    pm_options_free(o);
}
END_TEST

START_TEST(test_cancel)
{
    pm_options *o = opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t late0 = pm_test_late_replies(c);
    int id = request(c, 0, "hold", 20000, &results[0]);
    ck_assert_int_gt(id, 0);
    ck_assert_int_eq(pm_cluster_cancel(c, (uint64_t)id), 0);
    ck_assert_int_eq(results[0].calls, 1); /* at once, before cancel returned */
    ck_assert_int_eq(results[0].err, -ECANCELED);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    ck_assert_int_eq(pm_cluster_cancel(c, (uint64_t)id), -ENOENT);
    ck_assert_int_eq(pm_cluster_cancel(c, 0), -EINVAL);
    ck_assert_int_eq(pm_cluster_cancel(c, UINT64_MAX), -ENOENT);
    ck_assert_int_eq(pm_cluster_cancel(NULL, 1), -EINVAL);
    /* The worker answers it anyway: late. */
    pm_address a = slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "release", 7), 0);
    RUN_UNTIL(c, pm_test_late_replies(c) == late0 + 1, 10000);
    assert_once(c, 1);
    terminate(c);
    pm_options_free(o);
}
END_TEST

static int during_terminate = 1;

static void on_cancelled(pm_cluster *c, const pm_message *m, void *arg)
{
    on_result(c, m, arg);
    /* From here on new requests are refused. */
    during_terminate = pm_cluster_request(c, NULL, "echo:x", 6, 1000, on_result, &results[63]);
}

/* A request waiting for a worker when terminate is called. */
START_TEST(test_terminate_cancels)
{
    pm_options *o = opts(2);
    pm_options_set_restart_min_backoff_ms(o, 5000);
    pm_options_set_restart_max_backoff_ms(o, 5000);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    /* Both crash and restart only after 5 s: none is ready. */
    ck_assert_int_gt(request(c, 0, "crash", 10000, &results[2]), 0);
    ck_assert_int_gt(request(c, 1, "crash", 10000, &results[3]), 0);
    RUN_UNTIL(c, results[2].calls == 1 && results[3].calls == 1, 10000);
    ck_assert_int_gt(pm_cluster_request(c, NULL, "echo:w", 6, 20000, on_cancelled, &results[4]),
                     0);
    ck_assert_int_eq(results[4].calls, 0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    ck_assert_int_eq(results[2].err, -EHOSTDOWN);
    ck_assert_int_eq(results[3].err, -EHOSTDOWN);
    ck_assert_int_eq(results[4].calls, 1);
    ck_assert_int_eq(results[4].err, -ECANCELED);
    ck_assert_int_eq(results[4].nested, -EDEADLK);
    ck_assert_int_eq(during_terminate, -ESHUTDOWN);
    ck_assert_int_eq(results[63].calls, 0);
    pm_options_free(o);
}
END_TEST

/* Requests held by live workers when terminate is called: -ECANCELED
 * before anything stops, not -EHOSTDOWN as each worker exits. */
START_TEST(test_terminate_cancels_held)
{
    pm_options *o = opts(2);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_gt(request(c, 0, "hold", 20000, &results[0]), 0);
    ck_assert_int_gt(request(c, -1, "hold", 20000, &results[1]), 0);
    RUN_UNTIL(c, pm_test_slot_inflight(c, 0) == 1 && pm_test_slot_inflight(c, 1) == 1, 10000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(results[i].calls, 1);
        ck_assert_int_eq(results[i].err, -ECANCELED);
    }
    pm_options_free(o);
}
END_TEST

/* Any worker, none ready: the request waits, then goes to the worker that
 * becomes ready. */
START_TEST(test_wait_for_ready)
{
    pm_options *o = opts(1);
    pm_options_set_restart_min_backoff_ms(o, 300);
    pm_options_set_restart_max_backoff_ms(o, 300);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_gt(request(c, 0, "crash", 10000, &results[0]), 0);
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_eq(results[0].err, -EHOSTDOWN);
    ck_assert_int_ne(pm_test_slot_state(c, 0), PM_SLOT_READY);
    /* Named: refused at once. Any: waits. */
    ck_assert_int_eq(request(c, 0, "echo:w", 10000, &results[1]), -EHOSTDOWN);
    ck_assert_int_gt(request(c, -1, "echo:w1", 20000, &results[1]), 0);
    ck_assert_int_gt(request(c, -1, "echo:w2", 20000, &results[2]), 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    RUN_UNTIL(c, results[1].calls == 1 && results[2].calls == 1, 20000);
    ck_assert_int_eq(results[1].err, 0);
    ck_assert_str_eq(results[1].text, "slot0:w1");
    ck_assert_str_eq(results[2].text, "slot0:w2");
    ck_assert_uint_eq(results[1].inc, pm_test_slot_incarnation(c, 0));
    ck_assert_uint_gt(results[1].inc, 1);
    assert_once(c, 3);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* Any worker, none ready, none comes in time: -ETIMEDOUT, from empty. */
START_TEST(test_wait_timeout)
{
    pm_options *o = opts(1);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_gt(request(c, 0, "crash", 10000, &results[0]), 0);
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_gt(request(c, -1, "echo:never", 200, &results[1]), 0);
    RUN_UNTIL(c, results[1].calls == 1, 10000);
    ck_assert_int_eq(results[1].err, -ETIMEDOUT);
    ck_assert_uint_eq(results[1].slot, UINT32_MAX);
    /* A bounded run after it: still one callback. */
    ck_assert_int_eq(pm_cluster_run(c, 100), 0);
    ck_assert_int_eq(results[1].calls, 1);
    terminate(c);
    pm_options_free(o);
}
END_TEST

START_TEST(test_call)
{
    pm_options *o = opts(2);
    pm_options_set_max_message(o, PM_MAX_PAYLOAD); /* one byte more: -EMSGSIZE */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    char buf[64];
    size_t n = 99;
    ck_assert_int_eq(pm_cluster_call(c, NULL, "echo:one", 8, 10000, buf, sizeof(buf), &n), 0);
    ck_assert_uint_eq(n, 9);
    ck_assert_int_eq(memcmp(buf, "slot0:one", 9), 0);
    pm_address a1 = slot_addr(1, 0);
    ck_assert_int_eq(pm_cluster_call(c, &a1, "echo:two", 8, 10000, buf, sizeof(buf), &n), 0);
    ck_assert_int_eq(memcmp(buf, "slot1:two", 9), 0);
    /* Too small: -ENOBUFS and the size needed. */
    ck_assert_int_eq(pm_cluster_call(c, &a1, "echo:three", 10, 10000, buf, 4, &n), -ENOBUFS);
    ck_assert_uint_eq(n, 11);
    ck_assert_int_eq(pm_cluster_call(c, &a1, "echo:z", 6, 10000, NULL, 0, &n), -ENOBUFS);
    ck_assert_uint_eq(n, 7);
    /* Other events keep being dispatched while it waits. */
    deadlk_in_message = 1;
    ck_assert_int_eq(pm_cluster_call(c, &a1, "note", 4, 10000, buf, sizeof(buf), NULL), 0);
    ck_assert_int_eq(on_message_calls, 1);
    ck_assert_int_eq(deadlk_in_message, -EDEADLK);
    /* The errors. */
    static char big[PM_MAX_PAYLOAD + 1];
    ck_assert_int_eq(pm_cluster_call(c, &a1, big, sizeof(big), 1000, buf, sizeof(buf), &n),
                     -EMSGSIZE);
    ck_assert_int_eq(pm_cluster_call(c, &a1, "late:600", 8, 100, buf, sizeof(buf), &n),
                     -ETIMEDOUT);
    ck_assert_int_eq(pm_cluster_call(c, &a1, "crash", 5, 10000, buf, sizeof(buf), &n),
                     -EHOSTDOWN);
    ck_assert_int_eq(pm_cluster_call(c, NULL, "x", 1, 1000, NULL, 5, &n), -EINVAL);
    ck_assert_int_eq(pm_cluster_call(c, NULL, "x", 1, 0, buf, sizeof(buf), &n), -EINVAL);
    ck_assert_int_eq(pm_cluster_call(NULL, NULL, "x", 1, 1000, buf, sizeof(buf), &n), -EINVAL);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* SIGTERM while pm_cluster_call waits: -EINTR, the request cancelled. */
START_TEST(test_call_eintr)
{
    pm_options *o = opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    char buf[16];
    ck_assert_int_eq(pm_cluster_call(c, NULL, "term", 4, 20000, buf, sizeof(buf), NULL), -EINTR);
    ck_assert_int_eq(pm_cluster_last_signal(c), SIGTERM);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    /* The cluster still serves. */
    ck_assert_int_eq(pm_cluster_call(c, NULL, "echo:after", 10, 10000, buf, sizeof(buf), NULL),
                     0);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* -EDEADLK from on_event (a READY after a restart). */
START_TEST(test_call_deadlk_event)
{
    pm_options *o = opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    event_cluster = c;
    nested_in_event = 1;
    char buf[16];
    ck_assert_int_eq(pm_cluster_call(c, NULL, "crash", 5, 10000, buf, sizeof(buf), NULL),
                     -EHOSTDOWN);
    RUN_UNTIL(c, nested_in_event != 1, 10000);
    ck_assert_int_eq(nested_in_event, -EDEADLK);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* Many requests time out in the same turn: each callback once, every
 * in-flight entry forgotten, every reply after that late. */
START_TEST(test_many_timeouts)
{
    pm_options *o = opts(2);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t late0 = pm_test_late_replies(c);
    for (int i = 0; i < 200; i++)
        ck_assert_int_gt(request(c, -1, "hold", 300, &results[i]), 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 100); /* fewest in flight: evenly */
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), 100);
    RUN_UNTIL(c, calls_in(0, 200) == 200, 10000);
    for (int i = 0; i < 200; i++) {
        ck_assert_int_eq(results[i].calls, 1);
        ck_assert_int_eq(results[i].err, -ETIMEDOUT);
    }
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), 0);
    for (unsigned s = 0; s < 2; s++) {
        pm_address a = slot_addr(s, 0);
        ck_assert_int_eq(pm_cluster_send(c, &a, "release", 7), 0);
    }
    RUN_UNTIL(c, pm_test_late_replies(c) == late0 + 200, 10000);
    assert_once(c, 200);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* Ids are ints: they wrap from INT_MAX to 1, skipping pending ones. */
START_TEST(test_id_wrap)
{
    pm_options *o = opts(1);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    int first = request(c, 0, "hold", 20000, &results[0]);
    ck_assert_int_eq(first, 1);
    pm_test_set_last_request_id(c, INT_MAX - 1);
    ck_assert_int_eq(request(c, 0, "echo:max", 10000, &results[1]), INT_MAX);
    ck_assert_int_eq(request(c, 0, "echo:two", 10000, &results[2]), 2); /* 1 is pending */
    RUN_UNTIL(c, results[1].calls == 1 && results[2].calls == 1, 10000);
    ck_assert_str_eq(results[1].text, "slot0:max");
    ck_assert_str_eq(results[2].text, "slot0:two");
    pm_address a = slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "release", 7), 0);
    RUN_UNTIL(c, results[0].calls == 1, 10000);
    ck_assert_int_eq(results[0].err, 0);
    terminate(c);
    pm_options_free(o);
}
END_TEST

/* A supervisor without a message callback answers a worker's request to
 * main at once with -ENOENT (not at the request's 30 s deadline). */
START_TEST(test_main_without_callback)
{
    pm_options *o = opts(1);
    ck_assert_int_eq(pm_options_set_on_message(o, NULL, NULL), 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    uint64_t t0 = pm_test_ms();
    ck_assert_int_gt(request(c, 0, "askmain", 60000, &results[0]), 0);
    RUN_UNTIL(c, results[0].calls == 1, 60000);
    ck_assert_int_eq(results[0].err, 0);
    ck_assert_str_eq(results[0].text, "askmain:-2"); /* -ENOENT */
    /* Well before the worker's own 30 s deadline. */
    ck_assert_msg(pm_test_ms() - t0 < 25000, "answered after %llu ms",
                  (unsigned long long)(pm_test_ms() - t0));
    terminate(c);
    pm_options_free(o);
}
END_TEST

START_TEST(test_bad_input)
{
    pm_options *o = opts(1);
    pm_options_set_max_message(o, PM_MAX_PAYLOAD); /* one byte more: -EMSGSIZE */
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    struct result *r = &results[0];
    pm_address a = slot_addr(0, 0);
    pm_address self;
    ck_assert_int_eq(pm_cluster_self(c, &self), 0);
    ck_assert_int_eq(pm_cluster_request(NULL, &a, "x", 1, 100, on_result, r), -EINVAL);
    ck_assert_int_eq(pm_cluster_request(c, &a, "x", 1, 100, NULL, r), -EINVAL);
    ck_assert_int_eq(pm_cluster_request(c, &a, "x", 1, 0, on_result, r), -EINVAL);
    ck_assert_int_eq(pm_cluster_request(c, &a, "x", 1, -1, on_result, r), -EINVAL);
    ck_assert_int_eq(pm_cluster_request(c, &a, NULL, 1, 100, on_result, r), -EINVAL);
    ck_assert_int_eq(pm_cluster_request(c, &self, "x", 1, 100, on_result, r), -EINVAL);
    static char big[PM_MAX_PAYLOAD + 1];
    ck_assert_int_eq(pm_cluster_request(c, &a, big, sizeof(big), 100, on_result, r), -EMSGSIZE);
    pm_address far = slot_addr(5, 0);
    ck_assert_int_eq(pm_cluster_request(c, &far, "x", 1, 100, on_result, r), -ENOENT);
    pm_address stale = slot_addr(0, pm_test_slot_incarnation(c, 0) + 1);
    ck_assert_int_eq(pm_cluster_request(c, &stale, "x", 1, 100, on_result, r), -ESTALE);
    ck_assert_int_eq(pm_cluster_run(c, 50), 0);
    ck_assert_int_eq(r->calls, 0); /* no callback for a refused request */
    /* An empty request is fine. */
    ck_assert_int_gt(pm_cluster_request(c, &a, NULL, 0, 1000, on_result, r), 0);
    terminate(c);
    pm_options_free(o);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("request");
    PM_ADD_TEST(s, test_reply, 0);
    PM_ADD_TEST(s, test_main_without_callback, 0);
    PM_ADD_TEST(s, test_timeout_then_late_reply, 0);
    PM_ADD_TEST(s, test_crash_not_retried, 0);
    PM_ADD_TEST(s, test_fence, 0);
    PM_ADD_TEST(s, test_fewest_round_robin, 0);
    PM_ADD_TEST(s, test_cancel, 0);
    PM_ADD_TEST(s, test_terminate_cancels, 0);
    PM_ADD_TEST(s, test_terminate_cancels_held, 0);
    PM_ADD_TEST(s, test_wait_for_ready, 0);
    PM_ADD_TEST(s, test_wait_timeout, 0);
    PM_ADD_TEST(s, test_call, 0);
    PM_ADD_TEST(s, test_call_eintr, 0);
    PM_ADD_TEST(s, test_call_deadlk_event, 0);
    PM_ADD_TEST(s, test_many_timeouts, 0);
    PM_ADD_TEST(s, test_id_wrap, 0);
    PM_ADD_TEST(s, test_bad_input, 0);
    return pm_test_main(s);
}
