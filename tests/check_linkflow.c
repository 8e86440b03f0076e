/* SPDX-License-Identifier: MIT */
/* check_linkflow.c - traffic across a peer link between two real supervisors on 127.0.0.1: backpressure into the sending worker while a remote worker does not read (flow control), local traffic flowing meanwhile. */
#include <check.h>

#include "helpers.h"

#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/resource.h>

#include "internals.h"
#include "le.h"
#include "procmesh.h"

/*
 * Host b runs in a forked process (pm_test_fork: it dies with the test),
 * host a in the test process; a dials b. Both are system "t", base port 10.
 */

static const unsigned char secret[32] = {7, 7, 7, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13,
                                         14, 15, 16, 17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29};

/* Frames of the stream: 64 bytes, the first four its sequence number. */
#define STREAM_FRAMES 60000u
#define STREAM_LEN 64u

static pm_options *host_options(const char *host, unsigned workers, int (*boot)(pm_node *, void *))
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, workers), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, host), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    ck_assert_int_eq(pm_options_add_secret(o, secret), 0);
    /* Long: a loaded machine must not drop the link mid-test. */
    ck_assert_int_eq(pm_options_set_peer_timeout_ms(o, 30000), 0);
    ck_assert_int_eq(pm_options_set_max_message(o, (size_t)8 << 20), 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, boot, NULL), 0);
    return o;
}

/* Sends text to a's supervisor, retrying while the link is not up yet. */
static void tell_a(pm_node *n, const char *text)
{
    pm_address main_a;
    if (pm_address_parse("t@a:0", &main_a) != 0)
        _exit(4);
    for (int i = 0; i < 2000; i++) {
        int rc = pm_node_send(n, &main_a, text, strlen(text));
        if (rc != -EHOSTUNREACH)
            return;
        usleep(10 * 1000); /* the link comes up: a dials us */
    }
}

/* b's worker: says its pid, then checks the stream (in order, each frame
 * once), reports when 1,000 frames arrived and when all did. */
static int sink_b(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    char text[128];
    snprintf(text, sizeof(text), "PID %ld", (long)getpid());
    tell_a(n, text);
    uint32_t next = 0, bad = 0, other = 0;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind != PM_MSG_PLAIN || m.len != STREAM_LEN) {
            other++;
            continue;
        }
        if (pm__get32(m.data) != next)
            bad++;
        next = pm__get32(m.data) + 1;
        if (next == 1000)
            tell_a(n, "AT 1000");
        if (next == STREAM_FRAMES) {
            snprintf(text, sizeof(text), "DONE %u %u %u", next, bad, other);
            tell_a(n, text);
        }
    }
}

static pid_t start_b(int port, unsigned workers, int (*boot)(pm_node *, void *))
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0)
        return pid;
    pm_options *o = host_options("b", workers, boot);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    pm_cluster *c = NULL;
    if (pm_options_set_peer_listen(o, listen) < 0 || pm_cluster_spawn(o, &c) < 0)
        _exit(3);
    for (;;)
        pm_cluster_run(c, -1);
}

/* a's workers: port 10 streams to b's worker once told "go"; 11 asks 12
 * (which answers) over and over, paced, and reports every 20 answers. */
static void report(pm_node *n, const char *text)
{
    pm_address main_a;
    if (pm_address_parse("t@a:0", &main_a) == 0)
        pm_node_send(n, &main_a, text, strlen(text));
}

static int stream_a(pm_node *n)
{
    pm_address to;
    if (pm_address_parse("t@b:10", &to) != 0)
        return 1;
    pm_message m;
    do {
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
    } while (m.kind != PM_MSG_PLAIN);
    unsigned char buf[STREAM_LEN];
    memset(buf, 'x', sizeof(buf));
    unsigned eagain = 0, errors = 0, notices = 0;
    for (uint32_t i = 0; i < STREAM_FRAMES; i++) {
        pm__put32(buf, i);
        int rc = pm_node_try_send(n, &to, buf, sizeof(buf));
        if (rc == -EAGAIN) {
            eagain++; /* held: the hub does not read our ring now */
            rc = pm_node_send(n, &to, buf, sizeof(buf));
        }
        if (rc < 0)
            errors++;
    }
    /* Any notice (-ENOBUFS, -EHOSTUNREACH) is in our ring by the time b
     * confirmed the whole stream; the test asks us after that. */
    do {
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
        if (m.kind == PM_MSG_UNDELIVERABLE)
            notices++;
    } while (m.kind != PM_MSG_PLAIN);
    char text[128];
    snprintf(text, sizeof(text), "SENT %u %u %u", eagain, errors, notices);
    report(n, text);
    for (;;)
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
}

static int ping_a(pm_node *n)
{
    pm_address to;
    if (pm_address_parse("t@a:12", &to) != 0)
        return 1;
    unsigned answers = 0;
    for (;;) {
        pm_message r;
        int rc = pm_node_request(n, &to, "ping", 4, 5000, &r);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && ++answers % 20 == 0) {
            char text[64];
            snprintf(text, sizeof(text), "PONGS %u", answers);
            report(n, text);
        }
        usleep(2000); /* paced: the supervisor's CPU is measured meanwhile */
    }
}

static int worker_a(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    unsigned port = pm_node_self(n)->port;
    if (port == 10)
        return stream_a(n);
    if (port == 11)
        return ping_a(n);
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && m.kind == PM_MSG_REQUEST)
            pm_node_reply(n, &m, "pong", 4);
    }
}

/* What a's supervisor heard. */
static long b_pid;
static int b_at, b_done, a_sent;
static unsigned b_next, b_bad, b_other, a_eagain, a_errors, a_notices, pongs;

static void on_main(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    char text[128];
    size_t n = m->len < sizeof(text) - 1 ? m->len : sizeof(text) - 1;
    memcpy(text, m->data, n);
    text[n] = '\0';
    if (sscanf(text, "PID %ld", &b_pid) == 1)
        return;
    if (strcmp(text, "AT 1000") == 0)
        b_at = 1;
    else if (sscanf(text, "DONE %u %u %u", &b_next, &b_bad, &b_other) == 3)
        b_done = 1;
    else if (sscanf(text, "SENT %u %u %u", &a_eagain, &a_errors, &a_notices) == 3)
        a_sent = 1;
    else
        (void)sscanf(text, "PONGS %u", &pongs);
}

static double cpu_seconds(void)
{
    struct rusage ru;
    getrusage(RUSAGE_SELF, &ru);
    return (double)ru.ru_utime.tv_sec + (double)ru.ru_stime.tv_sec +
           ((double)ru.ru_utime.tv_usec + (double)ru.ru_stime.tv_usec) / 1e6;
}

static pm_cluster *start_a(int port, unsigned workers, int (*boot)(pm_node *, void *))
{
    pm_options *o = host_options("a", workers, boot);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    ck_assert_int_eq(pm_options_set_on_message(o, on_main, NULL), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    return c;
}

/*
 * A worker on b stops reading mid-stream (SIGSTOP): a's sender is held
 * (its try_send says -EAGAIN, its ring is not read: blocked on the link),
 * a's supervisor idles meanwhile, a's other workers keep talking; after
 * SIGCONT every frame arrives once, in order, and no notice came back.
 */
START_TEST(test_stream_to_stopped_remote)
{
    int port = pm_test_free_port();
    pid_t b = start_b(port, 1, sink_b);
    pm_cluster *c = start_a(port, 3, worker_a);
    PM_RUN_UNTIL(c, b_pid > 0, 20000);
    pm_address s;
    ck_assert_int_eq(pm_address_parse("t@a:10", &s), 0);
    PM_RUN_UNTIL(c, pm_cluster_send(c, &s, "go", 2) == 0, 10000);
    PM_RUN_UNTIL(c, b_at, 20000);
    ck_assert_int_eq(kill((pid_t)b_pid, SIGSTOP), 0);
    /* Held by b's worker's window once the frames in flight are in. */
    PM_RUN_UNTIL(c, pm_test_slot_blocked_on(c, 0) == PM__BLOCKED_LINK, 20000);
    unsigned p0 = pongs;
    double cpu0 = cpu_seconds();
    uint64_t t0 = pm_test_ms();
    PM_RUN_UNTIL(c, pongs >= p0 + 100, 30000); /* local traffic flows */
    double cpu = cpu_seconds() - cpu0;
    double wall = (double)(pm_test_ms() - t0) / 1000.0;
    ck_assert_int_eq(pm_test_slot_blocked_on(c, 0), PM__BLOCKED_LINK); /* still held */
    ck_assert_int_eq(b_done, 0);
    /* The held sender costs nothing per turn: the supervisor only relays
     * the paced pings (measured a few %; generous for a loaded machine). */
    ck_assert_msg(cpu < 0.5 * wall + 0.05, "supervisor CPU %.3f s over %.3f s", cpu, wall);
    ck_assert_int_eq(kill((pid_t)b_pid, SIGCONT), 0);
    PM_RUN_UNTIL(c, b_done, 60000);
    ck_assert_uint_eq(b_next, STREAM_FRAMES);
    ck_assert_uint_eq(b_bad, 0);
    ck_assert_uint_eq(b_other, 0);
    PM_RUN_UNTIL(c, pm_cluster_send(c, &s, "end", 3) == 0, 10000);
    PM_RUN_UNTIL(c, a_sent, 20000);
    ck_assert_uint_gt(a_eagain, 0);
    ck_assert_uint_eq(a_errors, 0);
    ck_assert_uint_eq(a_notices, 0);
    uint64_t qw = 0, ww = 0;
    ck_assert_int_eq(pm_test_link_waits(c, "b", &qw, &ww), 0);
    ck_assert_uint_gt(ww, 0);
    fprintf(stderr, "linkflow: held %u times (try_send -EAGAIN), link waits: queue %llu window %llu; supervisor CPU %.3f s over %.3f s while held\n",
            a_eagain, (unsigned long long)qw, (unsigned long long)ww, cpu, wall);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    kill(b, SIGKILL);
    waitpid(b, NULL, 0);
}
END_TEST

static Suite *linkflow_suite(void)
{
    Suite *s = suite_create("linkflow");
    PM_ADD_TEST(s, test_stream_to_stopped_remote, 120);
    return s;
}

int main(void)
{
    return pm_test_main(linkflow_suite());
}
