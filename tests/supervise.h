/* SPDX-License-Identifier: MIT */
/*
 * supervise.h - shared by the supervisor programs (check_spawn,
 * check_restart, check_stop, check_containment, check_api,
 * check_exec_ready, ...): every event a cluster emits is recorded with the
 * time it arrived, so a test can assert on the sequence afterwards; and the
 * fork-mode bootstraps those tests run. Include after helpers.h; not every
 * program uses every helper.
 */
#ifndef PM_TEST_SUPERVISE_H
#define PM_TEST_SUPERVISE_H

#include "procmesh.h"

#define PM_UNUSED __attribute__((unused))

/* ---------------------------------------------------------------- recording */

typedef struct rec {
    int type;
    unsigned slot;
    pid_t pid;
    uint64_t inc;
    int exit_code;
    int signal;
    int core;
    uint32_t delay;
    unsigned restarts;
    uint64_t t_ms;
    char reason[32];
    char detail[200];
} rec;

PM_UNUSED static rec evs[4096];
PM_UNUSED static int nev;
PM_UNUSED static int downs;
PM_UNUSED static unsigned down_slot, down_restarts;
PM_UNUSED static pm_address down_addr;

PM_UNUSED static uint64_t ms(void)
{
    return pm_test_now_ns() / 1000000u;
}

/* Appends e to evs (the first ARRAY_LEN(evs) events of a test); for an
 * on_event of a program's own that looks at some events first. */
PM_UNUSED static void record_event(const pm_event *e)
{
    if (nev >= (int)ARRAY_LEN(evs))
        return;
    rec *r = &evs[nev++];
    r->type = e->type;
    r->slot = e->slot;
    r->pid = e->pid;
    r->inc = e->incarnation;
    r->exit_code = e->exit_code;
    r->signal = e->signal;
    r->core = e->core_dumped;
    r->delay = e->delay_ms;
    r->restarts = e->restarts;
    r->t_ms = ms();
    snprintf(r->reason, sizeof(r->reason), "%s", e->reason ? e->reason : "");
    snprintf(r->detail, sizeof(r->detail), "%s", e->detail ? e->detail : "");
}

PM_UNUSED static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    record_event(e);
}

PM_UNUSED static void on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg)
{
    (void)c;
    (void)arg;
    downs++;
    down_slot = slot;
    down_restarts = restarts;
    down_addr = *a;
}

PM_UNUSED static int count(int type, int slot)
{
    int n = 0;
    for (int i = 0; i < nev; i++)
        if (evs[i].type == type && (slot < 0 || evs[i].slot == (unsigned)slot))
            n++;
    return n;
}

PM_UNUSED static const rec *find(int type, int slot, int nth)
{
    for (int i = 0; i < nev; i++)
        if (evs[i].type == type && (slot < 0 || evs[i].slot == (unsigned)slot) && nth-- == 0)
            return &evs[i];
    return NULL;
}

PM_UNUSED static pm_options *opts(int workers)
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

#ifdef PM_TEST_WORKER /* a program built without pm-test-worker has no exec mode */
PM_UNUSED static void exec_opts(pm_options *o, const char *mode, const char *arg)
{
    char *argv[] = {"pm-test-worker", (char *)mode, (char *)arg, NULL};
    ck_assert_int_eq(pm_options_set_exec(o, PM_TEST_WORKER, argv), 0);
}
#endif

/* Runs the cluster until cond holds or timeout_ms passes; fails if not. */
#define RUN_UNTIL(c, cond, timeout_ms)                                          \
    do {                                                                        \
        uint64_t end_ = ms() + (timeout_ms);                                    \
        while (!(cond) && ms() < end_)                                          \
            ck_assert_int_ge(pm_cluster_run((c), 20), 0);                       \
        ck_assert_msg((cond), "timed out waiting for: %s", #cond);              \
    } while (0)

PM_UNUSED static int gone(pid_t pid)
{
    return kill(pid, 0) < 0 && errno == ESRCH;
}

/* Every pid any STARTED event reported is gone (reaped, not a zombie). */
PM_UNUSED static void assert_all_started_gone(void)
{
    for (int i = 0; i < nev; i++)
        if (evs[i].type == PM_EVENT_STARTED)
            ck_assert_msg(gone(evs[i].pid), "pid %d still exists", (int)evs[i].pid);
}

PM_UNUSED static int slot_state(pm_cluster *c, unsigned slot)
{
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, slot, &si), 0);
    return si.state;
}

/* ---------------------------------------------------------------- bootstraps */

/* Fork-mode workers inherit the test process's signal handlers, and
 * Check's SIGTERM handler signals the whole process group: give each worker
 * the default actions first, as a real application's bootstrap would. */
PM_UNUSED static void worker_init(void)
{
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
}

PM_UNUSED static void idle(void)
{
    for (;;)
        pause();
}

PM_UNUSED static int boot_ready(pm_node *n, void *arg)
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
PM_UNUSED static int boot_crash_first(pm_node *n, void *arg)
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

PM_UNUSED static int boot_crash_always(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    pm_node_ready(n);
    if (pm_node_self(n)->incarnation > 1)
        raise(SIGSEGV);
    idle();
    return 0;
}

PM_UNUSED static int boot_ready_then_exit(pm_node *n, void *arg)
{
    worker_init();
    pm_node_ready(n);
    usleep(100000);
    return (int)(intptr_t)arg;
}

PM_UNUSED static int boot_ready_once(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_self(n)->incarnation == 1)
        pm_node_ready(n);
    idle();
    return 0;
}

PM_UNUSED static int boot_fail_slot2(pm_node *n, void *arg)
{
    worker_init();
    (void)arg;
    if (pm_node_slot(n) == 2)
        return 1;
    pm_node_ready(n);
    idle();
    return 0;
}

PM_UNUSED static int boot_crash_in_handshake(pm_node *n, void *arg)
{
    worker_init();
    (void)n;
    (void)arg;
    raise(SIGSEGV);
    return 0;
}

PM_UNUSED static int boot_init(pm_node *n, void *arg)
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

#endif /* PM_TEST_SUPERVISE_H */
