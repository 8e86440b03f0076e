/* SPDX-License-Identifier: MIT */
/*
 * check_liveness.c - heartbeats, hung workers, fencing, supervisor stalls,
 * supervisor death, and a torture loop of random signals under load. Real
 * processes, real signals.
 */
#include "helpers.h"

#include <dirent.h>
#include <poll.h>
#include <sys/prctl.h>

#include "internals.h"
#include "channel/proto.h"
#include "supervisor/liveness.h"

#define RUN_UNTIL PM_RUN_UNTIL
#define ms pm_test_ms

enum role {
    L_RECV = 0,        /* receive loop; answers requests with "pong:<slot>" */
    L_SPIN_FIRST,      /* incarnation 1 spins without any procmesh call */
    L_BEAT,            /* long work, calling pm_node_beat, then L_RECV */
    L_SCRIBBLE_CTL,    /* incarnation 1 scribbles its control block, then spins */
    L_FLOOD_NO_BEAT,   /* incarnation 1 floods slot 1 through the raw ring, never beating */
    L_COUNT,           /* counts frames from slot 0 incarnation 1, reports on "count" */
    L_NO_PDEATHSIG,    /* clears PDEATHSIG; exits 9 when recv says -ESHUTDOWN */
    L_FLOOD_MAIN,      /* incarnation 1 floods main through the raw ring, never beating */
    L_SILENT_FIRST,    /* incarnation 1 sleeps silent_ms without any procmesh call, then
                          sends main "awake" */
};

static int role[8];
static unsigned beat_ms = 600; /* L_BEAT: how long the work lasts */
static unsigned silent_ms;     /* L_SILENT_FIRST: how long it is silent */

/* What main saw. */
static int fenced[8];
static char fence_reason[8][32];
static uint64_t fenced_at[8], ready_at[8][4];
static int readies[8];
static uint64_t relayed_at_fence;
static int stalls;
static uint32_t stall_ms;
static char stall_reason[32];
static char report[128];
/* L_FLOOD_MAIN: frames from slot 0's first incarnation that main got after
 * its FENCED event. */
static unsigned main_after_fence;

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)arg;
    if (e->slot >= 8)
        return;
    if (e->type == PM_EVENT_FENCED) {
        if (fenced[e->slot]++ == 0) {
            fenced_at[e->slot] = ms();
            if (e->slot == 0 && c != NULL)
                relayed_at_fence = pm_test_slot_relayed(c, 0);
        }
        snprintf(fence_reason[e->slot], sizeof(fence_reason[e->slot]), "%s", e->reason);
    } else if (e->type == PM_EVENT_READY) {
        if (readies[e->slot] < 4)
            ready_at[e->slot][readies[e->slot]] = ms();
        readies[e->slot]++;
    } else if (e->type == PM_EVENT_STALLED) {
        stalls++;
        stall_ms = e->delay_ms;
        snprintf(stall_reason, sizeof(stall_reason), "%s", e->reason);
    }
}

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    if (m->from.port == 1 && m->from.incarnation == 1 && m->len == 8) {
        main_after_fence += fenced[0] > 0; /* a flood frame */
        /* A slow reader (20 us a frame), so the flooder keeps its ring full
         * whatever the scheduler does: there is always something left to
         * read when it is fenced. */
        uint64_t until = pm_test_now_ns() + 20000;
        while (pm_test_now_ns() < until)
            ;
        return;
    }
    snprintf(report, sizeof(report), "%.*s", (int)m->len, (const char *)m->data);
}

static pm_options *opts(int workers, int hb_ms)
{
    memset(fenced, 0, sizeof(fenced));
    memset(readies, 0, sizeof(readies));
    memset(fence_reason, 0, sizeof(fence_reason));
    report[0] = '\0';
    stalls = 0;
    main_after_fence = 0;
    pm_options *o = pm_test_quick_options(workers, on_event, on_message);
    pm_options_set_heartbeat_timeout_ms(o, hb_ms);
    pm_options_set_max_restarts(o, -1);
    return o;
}

static void spin_forever(void)
{
    for (volatile uint64_t i = 0;; i++)
        ;
}

static int recv_loop(pm_node *n, int r)
{
    pm_message m;
    uint32_t counted = 0;
    for (;;) {
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return r == L_NO_PDEATHSIG ? 9 : 0;
        if (rc < 0)
            return 30;
        if (m.kind == PM_MSG_REQUEST) {
            char out[16];
            int len = snprintf(out, sizeof(out), "pong:%u", pm_node_slot(n));
            pm_node_reply(n, &m, out, (size_t)len);
        } else if (m.len == 5 && memcmp(m.data, "count", 5) == 0) {
            char out[32];
            int len = snprintf(out, sizeof(out), "count %u", counted);
            pm_address main_addr = {.system = "procmesh", .host = "main"};
            pm_node_send(n, &main_addr, out, (size_t)len);
        } else if (m.from.port == 1 && m.from.incarnation == 1 && m.len == 8) {
            counted++;
        }
    }
}

static int worker(pm_node *n, void *arg)
{
    (void)arg;
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    int r = role[pm_node_slot(n)];
    int first = pm_node_self(n)->incarnation == 1;
    if (r == L_NO_PDEATHSIG)
        prctl(PR_SET_PDEATHSIG, 0);
    pm_node_ready(n);
    if (first && r == L_SPIN_FIRST)
        spin_forever();
    if (r == L_BEAT) {
        uint64_t end = ms() + beat_ms;
        while (ms() < end) {
            uint64_t t = ms() + 20;
            while (ms() < t)
                ;
            pm_node_beat(n);
        }
    }
    if (first && r == L_SCRIBBLE_CTL) {
        uint64_t seed = 77;
        unsigned char *ctl = pm_test_node_map(n);
        for (size_t i = 0; i < PM__CTL_SIZE; i++)
            ctl[i] = (unsigned char)pm_test_rand(&seed);
        spin_forever();
    }
    if (first && r == L_SILENT_FIRST) {
        /* Neither a procmesh call nor a wait in pm_node_recv: as silent as
         * a hung worker. In slices, so that a signal cannot cut it short. */
        uint64_t end = ms() + silent_ms;
        while (ms() < end)
            usleep(100000);
        pm_address main_addr = {.system = "procmesh", .host = "main"};
        if (pm_node_send(n, &main_addr, "awake", 5) != 0)
            return 41;
    }
    if (first && (r == L_FLOOD_NO_BEAT || r == L_FLOOD_MAIN)) {
        pm_message m;
        if (pm_node_recv(n, &m, 10000) != 0) /* "start" */
            return 40;
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_MSG;
        h.dst = r == L_FLOOD_MAIN ? PM__NODE_MAIN : 1;
        for (uint64_t seq = 0;; seq++) {
            /* Raw ring writes: no heartbeat, so the hub fences us while we
             * are still writing. */
            while (pm__frame_send(pm_test_node_tx(n), &h, &seq, 8) == -EAGAIN)
                ;
        }
    }
    return recv_loop(n, r);
}

/* ---------------------------------------------------------------- tests */

START_TEST(test_spinning_worker_fenced)
{
    memset(role, 0, sizeof(role));
    role[0] = L_SPIN_FIRST;
    pm_options *o = opts(2, 300);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    RUN_UNTIL(c, readies[0] >= 2, 10000);
    ck_assert_int_eq(fenced[0], 1);
    ck_assert_str_eq(fence_reason[0], "heartbeat");
    uint64_t after = fenced_at[0] - ready_at[0][0];
    ck_assert_msg(after >= 300 && after <= 300 + 75 + 1000, "fenced %llu ms after ready",
                  (unsigned long long)after);
    pm_slot_info si;
    pm_cluster_slot_info(c, 0, &si);
    ck_assert_uint_eq(si.fences, 1);
    ck_assert_str_eq(si.last_fence_reason, "heartbeat");
    ck_assert_int_eq(si.last_signal, SIGKILL);
    ck_assert_uint_eq(si.incarnation, 2);
    ck_assert_int_eq(fenced[1], 0);
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_eq(st.fences_heartbeat, 1);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_waiting_and_beating_not_fenced)
{
    /* Slot 0 waits in recv for five timeouts; slot 1 works for three
     * timeouts, calling pm_node_beat every 20 ms of its own. Neither is
     * fenced. The timeout is long beside the beat: the working worker is
     * a busy loop, and on a loaded machine the scheduler may keep it off
     * the CPU for more than a short timeout, when it is silent and rightly
     * fenced. */
    memset(role, 0, sizeof(role));
    role[1] = L_BEAT;
    const int hb = 1000;
    beat_ms = 3 * hb;
    pm_options *o = opts(2, hb);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    int saw_waiting = 0;
    uint64_t end = ms() + 5 * hb;
    while (ms() < end) {
        ck_assert_int_eq(pm_cluster_run(c, 20), 0);
        pm_slot_info si;
        pm_cluster_slot_info(c, 0, &si);
        saw_waiting |= si.waiting;
        /* A waiting worker's beat stays fresh. The bound is generous
         * (10x the timeout): on a loaded machine a turn of this loop may
         * itself take longer than the timeout; what matters is that the
         * age does not grow without end and neither slot is fenced. */
        ck_assert_uint_lt(si.heartbeat_age_ms, 10 * hb);
    }
    ck_assert(saw_waiting);
    ck_assert_int_eq(fenced[0], 0);
    ck_assert_int_eq(fenced[1], 0);
    pm_test_finish(c, o);
}
END_TEST

/* pm_options(3), set_heartbeat_timeout_ms: 0 turns it off. A mesh worker
 * silent for half as long again as the default timeout (10 s, plus a
 * check period: when the default would have fenced it at the latest) is
 * left alone: its "awake", sent at the end of the silence, arrives from
 * its first incarnation, and nothing was fenced or restarted. A fenced
 * incarnation's frames are never relayed, so the message is the proof. */
START_TEST(test_heartbeat_zero_off)
{
    memset(role, 0, sizeof(role));
    role[0] = L_SILENT_FIRST;
    silent_ms = PM__DEFAULT_HEARTBEAT_TIMEOUT_MS * 3 / 2;
    pm_options *o = opts(1, 0);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    RUN_UNTIL(c, report[0] != '\0' || fenced[0] > 0 || readies[0] > 1, silent_ms + 30000);
    ck_assert_msg(fenced[0] == 0, "fenced (%s) with the heartbeat timeout 0", fence_reason[0]);
    ck_assert_str_eq(report, "awake");
    ck_assert_int_eq(readies[0], 1);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_int_eq(si.state, PM_SLOT_READY);
    ck_assert_uint_eq(si.incarnation, 1);
    ck_assert_uint_eq(si.fences, 0);
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_eq(st.fences_heartbeat, 0);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_sigstopped_worker_fenced)
{
    memset(role, 0, sizeof(role));
    pm_options *o = opts(2, 300);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    pm_slot_info si;
    pm_cluster_slot_info(c, 1, &si);
    kill(si.pid, SIGSTOP);
    uint64_t t0 = ms();
    RUN_UNTIL(c, readies[1] >= 2, 10000);
    ck_assert_str_eq(fence_reason[1], "heartbeat");
    ck_assert_uint_ge(fenced_at[1] - t0, 250);
    ck_assert_int_eq(fenced[0], 0);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_scribbled_control_block)
{
    memset(role, 0, sizeof(role));
    role[0] = L_SCRIBBLE_CTL;
    pm_options *o = opts(2, 300);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    RUN_UNTIL(c, readies[0] >= 2, 10000);
    ck_assert_int_ge(fenced[0], 1);
    /* The other worker and the supervisor are untouched. */
    pm_slot_info si;
    pm_cluster_slot_info(c, 1, &si);
    ck_assert_int_eq(si.state, PM_SLOT_READY);
    ck_assert_uint_eq(si.incarnation, 1);
    pm_address a = pm_test_slot_addr(1, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "count", 5), 0);
    RUN_UNTIL(c, report[0] != '\0', 5000);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_fenced_frames_never_relayed)
{
    /* Slot 0 floods slot 1 through its raw ring without beating; it is fenced
     * while still writing. Slot 1 must receive exactly the frames the hub had
     * relayed when it fenced slot 0: nothing written after that moment. */
    memset(role, 0, sizeof(role));
    role[0] = L_FLOOD_NO_BEAT;
    role[1] = L_COUNT;
    pm_options *o = opts(2, 300);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    pm_address a0 = pm_test_slot_addr(0, 0), a1 = pm_test_slot_addr(1, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "start", 5), 0);
    RUN_UNTIL(c, readies[0] >= 2, 10000);
    ck_assert_str_eq(fence_reason[0], "heartbeat");
    ck_assert_uint_gt(relayed_at_fence, 0);
    ck_assert_int_eq(pm_cluster_run(c, 300), 0);
    ck_assert_int_eq(pm_cluster_send(c, &a1, "count", 5), 0);
    RUN_UNTIL(c, report[0] != '\0', 5000);
    char want[32];
    snprintf(want, sizeof(want), "count %llu", (unsigned long long)relayed_at_fence);
    ck_assert_str_eq(report, want);
    /* Slot 0's replacement is ready (readies[0] >= 2) and slot 1 answered:
     * both end on SIGTERM. */
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_fenced_frames_never_reach_main)
{
    /* The same fence, with main as the destination: main never holds a
     * sender back (on_message runs in the hub's read) and reads slowly, so
     * the flooder's ring is still full of frames when it is fenced, and
     * reading it even once more (say when its exit is reaped) would hand
     * them to main. None may arrive after the FENCED event. */
    memset(role, 0, sizeof(role));
    role[0] = L_FLOOD_MAIN;
    pm_options *o = opts(1, 300);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    pm_address a0 = pm_test_slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "start", 5), 0);
    RUN_UNTIL(c, readies[0] >= 2, 10000);
    ck_assert_str_eq(fence_reason[0], "heartbeat");
    ck_assert_uint_gt(relayed_at_fence, 0);
    ck_assert_int_eq(pm_cluster_run(c, 300), 0);
    ck_assert_msg(main_after_fence == 0, "%u frames of the fenced incarnation reached main",
                  main_after_fence);
    pm_test_finish(c, o);
}
END_TEST

/* Runs a cluster in a child "supervisor" process that reports over a pipe:
 * "pid P" for each worker once it has made its first liveness check, then,
 * when it gets SIGTERM, or 2 heartbeat timeouts after its first stall when
 * `until_stall` is set (the time a wrongly fenced worker would take to be
 * fenced), one line "stalls S last-stall D REASON fences F". */
static pid_t supervisor_child(int hb_ms, int workers, int wfd, int until_stall)
{
    pid_t pid = pm_test_fork();
    if (pid != 0)
        return pid;
    pm_options *o = opts(workers, hb_ms);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_options_set_handle_signals(o, 1); /* SIGTERM ends its run loop */
    pm_cluster *c;
    if (pm_cluster_spawn(o, &c) != 0)
        _exit(1);
    while (!pm_test_liveness_checked(c))
        if (pm_cluster_run(c, 10) < 0)
            _exit(4);
    for (unsigned i = 0; i < (unsigned)workers; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        char line[64];
        int len = snprintf(line, sizeof(line), "pid %d\n", (int)si.pid);
        if (write(wfd, line, (size_t)len) != len)
            _exit(2);
    }
    if (until_stall) {
        uint64_t end = ms() + 30000;
        while (stalls == 0 && ms() < end)
            if (pm_cluster_run(c, 10) < 0)
                _exit(4);
        end = ms() + 2 * (uint64_t)hb_ms;
        while (ms() < end)
            if (pm_cluster_run(c, 10) < 0)
                _exit(4);
    } else {
        while (pm_cluster_run(c, -1) != -EINTR)
            ;
    }
    struct pm_cluster_stats st;
    pm_cluster_stats(c, &st);
    char line[160];
    int len = snprintf(line, sizeof(line), "stalls %llu last-stall %u %s fences %llu\n",
                       (unsigned long long)st.stalls, (unsigned)stall_ms,
                       stall_reason[0] ? stall_reason : "-",
                       (unsigned long long)(st.fences_heartbeat + st.fences_corrupt_ring +
                                            st.fences_protocol));
    pm_cluster_terminate(c);
    _exit(write(wfd, line, (size_t)len) == len ? 0 : 3);
}

/* One line from f, waiting at most timeout_ms for it; fails naming what.
 * f must be unbuffered (poll sees only what stdio has not read ahead). */
static void read_line(FILE *f, char *buf, size_t size, int timeout_ms, const char *what)
{
    struct pollfd pfd = {.fd = fileno(f), .events = POLLIN};
    ck_assert_msg(poll(&pfd, 1, timeout_ms) == 1, "timed out waiting for %s", what);
    ck_assert_msg(fgets(buf, (int)size, f) != NULL, "EOF waiting for %s", what);
}

START_TEST(test_supervisor_stopped_no_fence)
{
    /* The supervisor and its workers are stopped together (a frozen
     * cgroup, a suspended VM) for two heartbeat timeouts. The freeze
     * reaches the workers first: the supervisor still sees them silent for
     * a third of the timeout, so when it resumes their last beat is older
     * than the timeout. It resumes 200 ms before them, so its first look
     * comes before any has beaten again. The silence was its own: no worker
     * may be fenced for it (the fresh period after a stall), and the stall
     * is reported once, with its length. */
    memset(role, 0, sizeof(role));
    const int hb = 1200;
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t sup = supervisor_child(hb, 2, p[1], 1);
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    setvbuf(f, NULL, _IONBF, 0);
    char line[160];
    int pids[2];
    for (int i = 0; i < 2; i++) {
        read_line(f, line, sizeof(line), 20000, "a worker pid from the supervisor");
        ck_assert_int_eq(sscanf(line, "pid %d", &pids[i]), 1);
    }
    pid_t freezer = pm_test_fork();
    ck_assert_int_ge(freezer, 0);
    if (freezer == 0) {
        kill(pids[0], SIGSTOP);
        kill(pids[1], SIGSTOP);
        usleep(400000);
        kill(sup, SIGSTOP);
        usleep(2500000);
        kill(sup, SIGCONT);
        usleep(200000);
        kill(pids[0], SIGCONT);
        kill(pids[1], SIGCONT);
        _exit(0);
    }
    int status = pm_test_reap(freezer, 10000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "freezer status %d", status);
    read_line(f, line, sizeof(line), 40000, "the supervisor's report after its stall");
    unsigned long long st = 0, fences = 99;
    unsigned last = 0;
    char reason[32] = "";
    ck_assert_msg(sscanf(line, "stalls %llu last-stall %u %31s fences %llu", &st, &last, reason,
                         &fences) == 4, "report: %s", line);
    ck_assert_msg(fences == 0, "a worker was fenced for the supervisor's stall: %s", line);
    ck_assert_msg(st == 1, "want exactly one stall: %s", line);
    ck_assert_str_eq(reason, "stall");
    /* Stopped for 2.5 s; the check that measures it was due up to a check
     * period (hb / 4) after the stop. Generous above. */
    ck_assert_msg(last >= 2500 - 2 * hb / 4 && last <= 2500 + 5000, "stall of %u ms reported", last);
    status = pm_test_reap(sup, 10000);
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 0);
    fclose(f);
}
END_TEST

/* A suspended machine cannot be made here, so the rule that tells a
 * suspend from a stall is asserted on its arithmetic (pure), the same
 * function pm__liveness_check feeds with the two clocks: the stall is the
 * larger of the check's lateness (MONOTONIC past its period) and
 * BOOTTIME's lead over MONOTONIC; excused only past half the timeout; named
 * "suspend" when the lead is the larger part. */
START_TEST(test_stall_or_suspend_rule)
{
    static const struct {
        uint64_t dm, db, period, timeout;
        uint64_t stall;
        int reason;
    } rows[] = {
        /* on time, clocks together: nothing */
        {300, 300, 300, 1200, 0, 0},
        /* late by exactly half the timeout: not yet a stall */
        {900, 900, 300, 1200, 0, 0},
        /* one ms more: a stall of 601 */
        {901, 901, 300, 1200, 601, PM_REASON_STALL},
        /* suspended: MONOTONIC ran one period, BOOTTIME 5 s */
        {300, 5300, 300, 1200, 5000, PM_REASON_SUSPEND},
        /* BOOTTIME ahead by exactly half the timeout: not yet */
        {300, 900, 300, 1200, 0, 0},
        {300, 901, 300, 1200, 601, PM_REASON_SUSPEND},
        /* both: the larger names it */
        {2300, 3000, 300, 1200, 2000, PM_REASON_STALL},
        {1000, 4000, 300, 1200, 3000, PM_REASON_SUSPEND},
        /* equal parts: a stall (the suspend must be the larger) */
        {1300, 2300, 300, 1200, 1000, PM_REASON_STALL},
        /* BOOTTIME behind MONOTONIC (cannot be; reads as no suspend) */
        {300, 100, 300, 1200, 0, 0},
        /* early (dm under the period): not late */
        {10, 10, 300, 1200, 0, 0},
        /* a timeout of 1: half is 0, any lateness counts */
        {6, 6, 5, 1, 1, PM_REASON_STALL},
        {5, 5, 5, 1, 0, 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int reason = -1;
        uint64_t got = pm__liveness_stall(rows[i].dm, rows[i].db, rows[i].period,
                                          rows[i].timeout, &reason);
        ck_assert_msg(got == rows[i].stall, "row %zu: stall %llu, want %llu", i,
                      (unsigned long long)got, (unsigned long long)rows[i].stall);
        if (rows[i].stall != 0)
            ck_assert_msg(reason == rows[i].reason, "row %zu: reason %d, want %d", i, reason,
                          rows[i].reason);
        else
            ck_assert_msg(reason == -1, "row %zu: reason written without a stall", i);
    }
}
END_TEST

START_TEST(test_supervisor_death_recv_shutdown)
{
    /* A worker without PDEATHSIG, blocked in pm_node_recv, learns within a
     * second that its supervisor is gone (-ESHUTDOWN) and exits (9). */
    memset(role, 0, sizeof(role));
    role[0] = L_NO_PDEATHSIG;
    ck_assert_int_eq(prctl(PR_SET_CHILD_SUBREAPER, 1), 0);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    pid_t sup = supervisor_child(10000, 1, p[1], 0);
    close(p[1]);
    FILE *f = fdopen(p[0], "r");
    setvbuf(f, NULL, _IONBF, 0);
    char line[160];
    read_line(f, line, sizeof(line), 20000, "the worker's pid from the supervisor");
    int wpid = 0;
    ck_assert_int_eq(sscanf(line, "pid %d", &wpid), 1);
    kill(sup, SIGKILL);
    pm_test_reap(sup, 5000);
    uint64_t t0 = ms();
    int status = pm_test_reap(wpid, 1500);
    ck_assert_msg(status != -1, "the worker outlived its supervisor");
    ck_assert(WIFEXITED(status) && WEXITSTATUS(status) == 9);
    ck_assert_uint_le(ms() - t0, 1200);
    fclose(f);
}
END_TEST

/* ---------------------------------------------------------------- torture */

static int bc_sent, bc_refused, bc_done, bc_bad;
static size_t bc_last_n;
static int bc_last_errors; /* results of the last broadcast with error != 0 */

static void on_bcast(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c;
    (void)arg;
    bc_done++;
    bc_last_n = n;
    bc_last_errors = 0;
    for (size_t i = 0; i < n; i++)
        bc_last_errors += r[i].error != 0;
    for (size_t i = 0; i < n; i++) {
        int e = r[i].error;
        if (e == 0) {
            char want[16];
            snprintf(want, sizeof(want), "pong:%u", (unsigned)(r[i].from.port - 1));
            if (r[i].len != strlen(want) || memcmp(r[i].data, want, r[i].len) != 0)
                bc_bad++;
        } else if (e != -ETIMEDOUT && e != -EHOSTDOWN && e != -EAGAIN) {
            bc_bad++;
        }
    }
}

START_TEST(test_torture)
{
    memset(role, 0, sizeof(role));
    const int workers = 4, rounds = pm_test_sanitized() ? 150 : 300;
    int fds_before = pm_test_count_fds();
    pm_options *o = opts(workers, 200);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_cluster *c = pm_test_spawn(o);
    uint64_t seed = 4242;
    bc_sent = bc_refused = bc_done = bc_bad = 0;
    static const int sigs[] = {SIGKILL, SIGSTOP, SIGSEGV};
    for (int r = 0; r < rounds; r++) {
        unsigned slot = (unsigned)(pm_test_rand(&seed) % workers);
        pm_slot_info si;
        pm_cluster_slot_info(c, slot, &si);
        if (si.pid > 0 && si.state == PM_SLOT_READY && pm_test_rand(&seed) % 3 == 0)
            kill(si.pid, sigs[pm_test_rand(&seed) % 3]);
        /* Only bad arguments or no memory refuse a broadcast: none here. */
        int rc = pm_cluster_broadcast(c, "ping", 4, 300, on_bcast, NULL);
        if (rc == 0)
            bc_sent++;
        else
            bc_refused++;
        ck_assert_int_eq(pm_cluster_run(c, 15), 0);
    }
    /* Everything answered exactly once, every slot back to ready. */
    RUN_UNTIL(c, bc_done == bc_sent, 10000);
    uint64_t end = ms() + 15000;
    for (;;) {
        int ready = 0;
        for (int i = 0; i < workers; i++) {
            pm_slot_info si;
            pm_cluster_slot_info(c, (unsigned)i, &si);
            ready += si.state == PM_SLOT_READY;
        }
        if (ready == workers || ms() > end)
            break;
        ck_assert_int_eq(pm_cluster_run(c, 20), 0);
    }
    for (int i = 0; i < workers; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, (unsigned)i, &si);
        ck_assert_int_eq(si.state, PM_SLOT_READY);
    }
    ck_assert_int_eq(bc_bad, 0);
    ck_assert_msg(bc_refused == 0 && bc_sent == rounds, "%d of %d broadcasts refused", bc_refused,
                  rounds);
    ck_assert_msg(bc_done == bc_sent, "%d broadcasts issued, %d answered", bc_sent, bc_done);
    /* One more broadcast: every worker answers, and answers well. */
    int before = bc_done;
    ck_assert_int_eq(pm_cluster_broadcast(c, "ping", 4, 5000, on_bcast, NULL), 0);
    RUN_UNTIL(c, bc_done == before + 1, 10000);
    ck_assert_msg(bc_last_n == (size_t)workers, "the final broadcast reached %zu of %d workers",
                  bc_last_n, workers);
    ck_assert_msg(bc_last_errors == 0, "%d workers failed the final broadcast", bc_last_errors);
    ck_assert_int_eq(bc_bad, 0);
    /* Every worker just answered, so none is stopped: each ends on SIGTERM. */
    pm_test_finish(c, o);
    ck_assert_int_eq(pm_test_count_fds(), fds_before);
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
}
END_TEST


int main(void)
{
    Suite *s = suite_create("liveness");
    PM_ADD_TEST(s, test_spinning_worker_fenced, 60);
    PM_ADD_TEST(s, test_waiting_and_beating_not_fenced, 60);
    PM_ADD_TEST(s, test_heartbeat_zero_off, 90);
    PM_ADD_TEST(s, test_sigstopped_worker_fenced, 60);
    PM_ADD_TEST(s, test_scribbled_control_block, 60);
    PM_ADD_TEST(s, test_fenced_frames_never_relayed, 60);
    PM_ADD_TEST(s, test_fenced_frames_never_reach_main, 60);
    PM_ADD_TEST(s, test_supervisor_stopped_no_fence, 60);
    PM_ADD_TEST(s, test_stall_or_suspend_rule, 10);
    PM_ADD_TEST(s, test_supervisor_death_recv_shutdown, 60);
    PM_ADD_TEST(s, test_torture, 120);
    return pm_test_main(s);
}
