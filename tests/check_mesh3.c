/* SPDX-License-Identifier: MIT */
/* check_mesh3.c - procmesh daemons linked on loopback (three hosts; two through pm-proxy): identities, a stopped host, a restarted host, a cut link, one-way loss and stall, a black hole, every request answered exactly once. */
#define _GNU_SOURCE
#include <check.h>

#include "helpers.h"
#include "proclog.h"

#include <arpa/inet.h>
#include <fcntl.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <poll.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

/*
 * Every daemon runs `procmesh run` (system t, base port 10, one exec-mode
 * worker "pm-test-worker mesh ...") with a secret file made by `procmesh
 * keygen`; its stderr is read into a log. The calling worker prints one
 * line per request it sends and exactly one per outcome ("reply N ..." or
 * "error N RC"); the daemon logs them as event=output, and the test counts
 * them. Every process dies with the test (PR_SET_PDEATHSIG; the daemons'
 * workers die with their daemon).
 */

static char dir[64];
static char secret[96];

/* Starts path with argv, its fd `capture` into a pipe, and (want_in) its
 * stdin from a pipe. */
static proc start_proc(const char *path, char *const argv[], int capture, int want_in)
{
    return proc_start(path, argv, capture, &(proc_how){.want_in = want_in, .cap = 1024 * 1024});
}

/* Waits until the process has written needle n times (reading the other
 * processes' pipes meanwhile, so no daemon blocks on a full stderr). */
static proc *all[8];
static unsigned nall;

static void wait_log(proc *r, const char *needle, int n, int timeout_ms)
{
    proc_wait_among(r, all, nall, needle, n, timeout_ms);
}

/* Reads every process's output for ms (a pause that keeps pipes drained). */
static void drain_for(int ms)
{
    uint64_t end = pm_test_ms() + (uint64_t)ms;
    while (pm_test_ms() < end)
        for (unsigned i = 0; i < nall; i++)
            if (all[i]->pid > 0)
                proc_read(all[i], 10);
}

/* The secret file every daemon of a test shares, in a fresh directory. */
static void make_secret(void)
{
    proc_make_secret(dir, sizeof(dir), secret, sizeof(secret), "mesh3");
}

static void remove_dir(void)
{
    ck_assert_int_eq(proc_remove_dir(dir), 0);
}

/* A daemon for host `host` listening on port, dialling `peers` (NULL:
 * none), whose worker runs "mesh to ms delay". */
static proc start_host(const char *host, int port, const char *peers, int timeout_ms, const char *to,
                       const char *ms, const char *delay)
{
    char listen[32], tmo[16];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    snprintf(tmo, sizeof(tmo), "%d", timeout_ms);
    proc_mesh_host h = {.host = host, .listen = listen, .peer_timeout = tmo, .secret = secret,
                        .peers = peers, .to = to, .ms = ms, .delay = delay};
    return proc_start_mesh_host(&h, NULL, NULL);
}

/* Waits until a's worker has had `more` further replies from host h. */
static void wait_more_replies(proc *a, const char *h, int more, int timeout_ms)
{
    proc_wait_more_replies(a, all, nall, h, more, timeout_ms);
}

/* ------------------------------------------------------------- three hosts */

static proc ha, hb, hc;
static int pa, pb, pc;

/* a dials b and c, b dials c; a's worker asks c's worker every 100 ms. */
static void start_three(int timeout_ms)
{
    make_secret();
    pa = pm_test_free_port();
    pb = pm_test_free_port();
    pc = pm_test_free_port();
    char peers_a[64], peers_b[32];
    snprintf(peers_a, sizeof(peers_a), "127.0.0.1:%d,127.0.0.1:%d", pb, pc);
    snprintf(peers_b, sizeof(peers_b), "127.0.0.1:%d", pc);
    hc = start_host("c", pc, NULL, timeout_ms, "-", "0", "0");
    hb = start_host("b", pb, peers_b, timeout_ms, "-", "0", "0");
    ha = start_host("a", pa, peers_a, timeout_ms, "t@c:10", "100", "0");
    nall = 0;
    all[nall++] = &ha;
    all[nall++] = &hb;
    all[nall++] = &hc;
    /* All three linked, each pair once. */
    proc_wait_linked3((proc *const[3]){&ha, &hb, &hc}, all, nall, 30000);
}

static void stop_three(void)
{
    proc_free(&ha);
    proc_free(&hb);
    proc_free(&hc);
    nall = 0;
    remove_dir();
}

/* The incarnation in the first "PREFIX<digits>" of log after `from` (0: none). */
static unsigned long long inc_after(const char *log, const char *prefix, int nth)
{
    const char *p = log;
    for (int i = 0; i <= nth && p != NULL; i++) {
        p = strstr(p, prefix);
        if (p != NULL && i < nth)
            p++;
    }
    return p == NULL ? 0 : strtoull(p + strlen(prefix), NULL, 10);
}

/* The N of a's worker's first reply from host h (the requests before the
 * link and h's worker were up may have ended in errors). */
static long first_reply(const char *log, const char *h)
{
    char needle[32];
    snprintf(needle, sizeof(needle), " from t@%s:10#", h);
    const char *p = strstr(log, needle);
    ck_assert_ptr_nonnull(p);
    while (p > log && strncmp(p, "text=\"reply ", 12) != 0)
        p--;
    ck_assert_msg(strncmp(p, "text=\"reply ", 12) == 0, "no reply line before \"%s\"", needle);
    return strtol(p + 12, NULL, 10);
}

START_TEST(test_three_hosts_identity)
{
    start_three(5000);
    /* a's worker reaches c's worker: a's worker sees the reply come from
     * t@c:10 (stamped by a's supervisor from the link to c), and c's worker
     * saw the request come from t@a:10 (stamped by c's supervisor). */
    wait_more_replies(&ha, "c", 1, 30000);
    long k = first_reply(ha.log, "c");
    char reply[64], got[64];
    snprintf(reply, sizeof(reply), "text=\"reply %ld from t@c:10#", k);
    snprintf(got, sizeof(got), "text=\"got req %ld from t@a:10#", k);
    wait_log(&hc, got, 1, 30000);
    const char *saw = strstr(ha.log, reply);
    ck_assert_ptr_nonnull(saw);
    ck_assert_uint_ne(inc_after(saw, reply, 0), 0);
    const char *eol = strchr(saw, '\n');
    const char *who = strstr(saw, " saw t@a:10#");
    ck_assert_msg(who != NULL && (eol == NULL || who < eol), "c's worker saw another sender: %.200s", saw);
    /* The incarnation c's worker saw is the one a's worker has (a's
     * daemon logs each of its output lines under it). */
    unsigned long long a_inc = inc_after(who, " saw t@a:10#", 0);
    unsigned long long c_saw = inc_after(hc.log, got, 0);
    ck_assert_uint_eq(a_inc, c_saw);
    char own[64];
    snprintf(own, sizeof(own), "incarnation=%llu stream=stdout", a_inc);
    ck_assert_msg(strstr(ha.log, own) != NULL, "a's worker is not incarnation %llu", a_inc);
    wait_more_replies(&ha, "c", 5, 30000);
    long sent = exactly_once(ha.log, "a");
    no_duplicates(hc.log, sent, "c");
    ck_assert_int_eq(count_of(ha.log, "event=peer_down"), 0);
    stop_three();
}
END_TEST

START_TEST(test_host_stopped_briefly)
{
    /* A stop well within the peer timeout: no link drops; the request in
     * flight meanwhile is answered once, after the resume. */
    start_three(5000);
    wait_more_replies(&ha, "c", 2, 30000);
    ck_assert_int_eq(kill(hc.pid, SIGSTOP), 0);
    drain_for(1000); /* the fault: a 1 s stop (the peer timeout is 5 s) */
    ck_assert_int_eq(kill(hc.pid, SIGCONT), 0);
    wait_more_replies(&ha, "c", 5, 30000);
    ck_assert_int_eq(count_of(ha.log, "event=peer_down"), 0);
    ck_assert_int_eq(count_of(hb.log, "event=peer_down"), 0);
    long sent = exactly_once(ha.log, "a");
    /* Errors only before the first reply (the link or c's worker not up
     * yet), none across the stop. */
    long k = first_reply(ha.log, "c");
    for (long i = k + 1; i <= sent; i++) {
        char needle[64];
        snprintf(needle, sizeof(needle), "text=\"error %ld ", i);
        ck_assert_msg(strstr(ha.log, needle) == NULL, "request %ld failed across a short stop %s", i,
                      tail_of(ha.log));
    }
    no_duplicates(hc.log, sent, "c");
    stop_three();
}
END_TEST

START_TEST(test_host_stopped_past_timeout)
{
    /* A stop past the peer timeout (1 s): a and b drop their links to c,
     * a's request in flight is answered -EHOSTUNREACH once; after the
     * resume everyone relinks and c's answers resume. */
    start_three(1000);
    wait_more_replies(&ha, "c", 2, 30000);
    ck_assert_int_eq(kill(hc.pid, SIGSTOP), 0);
    wait_log(&ha, "event=peer_down host=c", 1, 20000);
    wait_log(&hb, "event=peer_down host=c", 1, 20000);
    wait_log(&ha, "text=\"error ", 1, 20000);
    ck_assert_int_eq(kill(hc.pid, SIGCONT), 0);
    wait_log(&ha, "event=peer_up host=c", 2, 30000);
    wait_log(&hb, "event=peer_up host=c", 2, 30000);
    wait_more_replies(&ha, "c", 3, 30000);
    long sent = exactly_once(ha.log, "a");
    char needle[64];
    snprintf(needle, sizeof(needle), "text=\"error %ld -113\"", last_of(ha.log, "text=\"error "));
    ck_assert_msg(strstr(ha.log, needle) != NULL, "the request in flight ended otherwise %s",
                  strstr(ha.log, needle) != NULL ? "" : tail_of(ha.log));
    no_duplicates(hc.log, sent, "c");
    stop_three();
}
END_TEST

START_TEST(test_host_killed_and_restarted)
{
    start_three(5000);
    wait_more_replies(&ha, "c", 2, 30000);
    unsigned long long link1 = inc_after(ha.log, "event=peer_up host=c incarnation=", 0);
    char first[64];
    snprintf(first, sizeof(first), "text=\"reply %ld from t@c:10#", first_reply(ha.log, "c"));
    unsigned long long worker1 = inc_after(ha.log, first, 0);
    proc_free(&hc);
    wait_log(&ha, "event=peer_down host=c", 1, 20000);
    wait_log(&hb, "event=peer_down host=c", 1, 20000);
    char *old_log = strdup(ha.log);
    ck_assert_ptr_nonnull(old_log);
    hc = start_host("c", pc, NULL, 5000, "-", "0", "0");
    all[2] = &hc;
    wait_log(&ha, "event=peer_up host=c", 2, 30000);
    wait_log(&hb, "event=peer_up host=c", 2, 30000);
    /* A new supervisor incarnation on the link, and a new worker
     * incarnation behind t@c:10 (random base per start). */
    unsigned long long link2 = inc_after(ha.log, "event=peer_up host=c incarnation=", 1);
    ck_assert_uint_ne(link2, 0);
    ck_assert_uint_ne(link1, link2);
    wait_more_replies(&ha, "c", 2, 30000);
    long last = last_of(ha.log, "text=\"reply ");
    char prefix[64];
    snprintf(prefix, sizeof(prefix), "text=\"reply %ld from t@c:10#", last);
    unsigned long long worker2 = inc_after(ha.log, prefix, 0);
    ck_assert_uint_ne(worker2, 0);
    ck_assert_uint_ne(worker1, worker2);
    exactly_once(ha.log, "a");
    free(old_log);
    stop_three();
}
END_TEST

/* ------------------------------------------------------------- partitions */

static proc px;

/* Sends a command to the proxy and waits for its "ok". */
static void proxy_cmd(const char *cmd)
{
    int before = count_of(px.log, "ok\n");
    ck_assert_int_eq(write(px.in, cmd, strlen(cmd)), (ssize_t)strlen(cmd));
    wait_log(&px, "ok\n", before + 1, 10000);
}

/* b listens; a dials b through pm-proxy; a's worker asks b's worker every
 * 100 ms, and b's worker answers after 1 s, so a request is nearly always
 * in flight when the link breaks. */
static void start_pair(int timeout_ms)
{
    make_secret();
    pa = pm_test_free_port();
    pb = pm_test_free_port();
    char pb_text[16];
    snprintf(pb_text, sizeof(pb_text), "%d", pb);
    char *argv[] = {"pm-proxy", "0", pb_text, NULL};
    px = start_proc(PM_PROXY, argv, STDOUT_FILENO, 1);
    nall = 0;
    all[nall++] = &px;
    wait_log(&px, "ready ", 1, 10000);
    int pp = atoi(strstr(px.log, "ready ") + 6);
    ck_assert_int_gt(pp, 0);
    char peers_a[32];
    snprintf(peers_a, sizeof(peers_a), "127.0.0.1:%d", pp);
    hb = start_host("b", pb, NULL, timeout_ms, "-", "0", "1000");
    ha = start_host("a", pa, peers_a, timeout_ms, "t@b:10", "100", "0");
    all[nall++] = &ha;
    all[nall++] = &hb;
    wait_log(&ha, "event=peer_up host=b", 1, 30000);
    wait_log(&hb, "event=peer_up host=a", 1, 30000);
    wait_more_replies(&ha, "b", 1, 30000);
}

static void stop_pair(void)
{
    proc_free(&ha);
    proc_free(&hb);
    proc_free(&px);
    nall = 0;
    remove_dir();
}

/* The partition ends: the link comes up again (a sees b up a second time,
 * and b sees a if both_ends), a's requests get replies again, each was
 * answered exactly once and b handled none twice; then both hosts stop. */
static void heal_and_check(int both_ends)
{
    proxy_cmd("pass\n");
    wait_log(&ha, "event=peer_up host=b", 2, 30000);
    if (both_ends)
        wait_log(&hb, "event=peer_up host=a", 2, 30000);
    wait_more_replies(&ha, "b", 2, 30000);
    long sent = exactly_once(ha.log, "a");
    no_duplicates(hb.log, sent, "b");
    stop_pair();
}

/* Waits for b's worker to take a request (it then holds it for 1 s). */
static void wait_request_held(void)
{
    char needle[64];
    snprintf(needle, sizeof(needle), "text=\"got req %ld from ", last_of(hb.log, "text=\"got req ") + 1);
    wait_log(&hb, needle, 1, 20000);
}

START_TEST(test_partition_cut_and_heal)
{
    start_pair(3000);
    wait_request_held();
    proxy_cmd("cut\n");
    /* Both ends see the connection end; a's request in flight is answered
     * -EHOSTUNREACH at once, not at its 20 s deadline. */
    wait_log(&ha, "event=peer_down host=b", 1, 20000);
    wait_log(&hb, "event=peer_down host=a", 1, 20000);
    wait_log(&ha, "-113\"", 1, 20000);
    drain_for(500);
    heal_and_check(1);
}
END_TEST

START_TEST(test_partition_one_way_loss)
{
    /* a's bytes to b are lost; b's to a still arrive. b hears nothing
     * past its peer timeout and drops the link (its CLOSE reaches a), so
     * both ends see it down; a's request in flight is answered once. */
    start_pair(2000);
    wait_request_held();
    uint64_t t0 = pm_test_ms();
    proxy_cmd("drop a2b\n");
    wait_log(&hb, "event=peer_down host=a", 1, 20000);
    wait_log(&ha, "event=peer_down host=b", 1, 20000);
    /* A bound, not a timing: the loss is found by the timeout, not by luck
     * (generous for a loaded machine). */
    ck_assert_uint_lt(pm_test_ms() - t0, 15000);
    wait_log(&ha, "-113\"", 1, 20000);
    heal_and_check(0);
}
END_TEST

START_TEST(test_partition_one_way_stall)
{
    /* a's bytes to b back up (not read): the same as loss to b, but a's
     * socket fills; still both ends drop the link and relink after. */
    start_pair(2000);
    wait_request_held();
    proxy_cmd("stall a2b\n");
    wait_log(&hb, "event=peer_down host=a", 1, 20000);
    wait_log(&ha, "event=peer_down host=b", 1, 20000);
    heal_and_check(0);
}
END_TEST

/* 1 when a line of log holds both a and b. */
static int line_has(const char *log, const char *a, const char *b)
{
    for (const char *p = strstr(log, a); p != NULL; p = strstr(p + 1, a)) {
        const char *bol = p, *eol = strchr(p, '\n');
        while (bol > log && bol[-1] != '\n')
            bol--;
        const char *q = strstr(bol, b);
        if (q != NULL && (eol == NULL || q < eol))
            return 1;
    }
    return 0;
}

START_TEST(test_partition_black_hole)
{
    /* Nothing passes either way and no FIN or RST arrives (a path that
     * dropped every packet): each end finds the other silent on its own,
     * within its peer timeout, and closes ("timeout"); a's request in
     * flight is answered once; after the heal they relink. */
    start_pair(2000);
    wait_request_held();
    proxy_cmd("stall a2b\n");
    proxy_cmd("stall b2a\n");
    wait_log(&ha, "event=peer_down host=b", 1, 20000);
    wait_log(&hb, "event=peer_down host=a", 1, 20000);
    ck_assert_msg(line_has(ha.log, "event=peer_down host=b", "reason=timeout"), "a: not by silence %s",
                  tail_of(ha.log));
    ck_assert_msg(line_has(hb.log, "event=peer_down host=a", "reason=timeout"), "b: not by silence %s",
                  tail_of(hb.log));
    wait_log(&ha, "-113\"", 1, 20000);
    proxy_cmd("cut\n"); /* the stalled connection goes; new ones pass again */
    heal_and_check(0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("mesh3");
    PM_ADD_TEST(s, test_three_hosts_identity, 90);
    PM_ADD_TEST(s, test_host_stopped_briefly, 90);
    PM_ADD_TEST(s, test_host_stopped_past_timeout, 120);
    PM_ADD_TEST(s, test_host_killed_and_restarted, 120);
    PM_ADD_TEST(s, test_partition_cut_and_heal, 120);
    PM_ADD_TEST(s, test_partition_one_way_loss, 120);
    PM_ADD_TEST(s, test_partition_one_way_stall, 120);
    PM_ADD_TEST(s, test_partition_black_hole, 120);
    return pm_test_main(s);
}
