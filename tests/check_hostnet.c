/* SPDX-License-Identifier: MIT */
/* check_hostnet.c - what a hostile network gets: every attack of tests/pm-bad-peer against a supervisor with a working worker, each closed and counted by reason while local traffic flows. */
#define _GNU_SOURCE
#include <check.h>

#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <stdlib.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/syscall.h>
#include <sys/wait.h>

#include "channel/proto.h"
#include "mesh/faillog.h"
#include "internals.h"
#include "mesh/mesh.h"
#include "peer/peer.h"
#include "procmesh.h"

/*
 * The supervisor under attack (host "a" of system "t") runs in the test
 * process, listening on a free port of 127.0.0.1, with one worker that
 * asks it "ping" in a loop (main answers every request): the local
 * traffic that must keep flowing. The attacker is tests/pm-bad-peer, one
 * process per attack (it dies with the test).
 */

static const unsigned char secret1[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                          17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
#define SECRET1_HEX "0102030405060708090a0b0c0d0e0f101112131415161718191a1b1c1d1e1f20"

/* Requests main answered, and frames that should never have arrived. */
static unsigned pongs;
static unsigned ping_failures; /* the worker's requests to main that failed */
static unsigned forged_delivered;
static unsigned first_delivered; /* MSGs "first" (pm-bad-peer two-links-first-frames) */
static struct pm_test_peer_events peer_events;

/* test_worker_forged_host: the worker's first frame forges its source
 * host (and incarnation); who main was told sent it. */
static int forge_host;
static int forged_seen;
static pm_address forged_from;

static void on_main(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)arg;
    if (m->len == 8 && memcmp(m->data, "sourcing", 8) == 0) {
        forged_seen++;
        forged_from = m->from;
        return;
    }
    if (m->len == 6 && memcmp(m->data, "forged", 6) == 0) {
        forged_delivered++;
        return;
    }
    if (m->len == 5 && memcmp(m->data, "first", 5) == 0) {
        first_delivered++;
        return;
    }
    if (m->len == 6 && memcmp(m->data, "failed", 6) == 0) {
        ping_failures++;
        return;
    }
    if (m->kind == PM_MSG_REQUEST && pm_cluster_reply(c, m, "pong", 4) == 0)
        pongs++;
}

/* The worker: ping main, a few ms apart, until asked to stop. */
static int pinger(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address main_a;
    if (pm_address_parse("t@main:0", &main_a) != 0) /* this host's supervisor */
        return 1;
    if (forge_host) {
        /* Bypass the API: a frame to main claiming remote host 1 and an
         * incarnation no slot has. */
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_MSG;
        h.dst = PM__NODE_MAIN;
        h.src_host = 1;
        h.src_inc = 9;
        if (pm__frame_send(pm_test_node_tx(n), &h, "sourcing", 8) != 0)
            return 2;
    }
    for (;;) {
        pm_message r;
        int rc = pm_node_request(n, &main_a, "ping", 4, 5000, &r);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            pm_node_send(n, &main_a, "failed", 6); /* main answers every ping */
        /* Paced: the traffic only has to keep flowing, not load the
         * machine the attacks share. */
        usleep(5 * 1000);
    }
}

/* The worker of test_no_frag_reply_refused: pings main three times (as
 * start_host waits for), then answers requests: "big" with more than
 * PM_MAX_PAYLOAD bytes, anything else with "pong". */
static int big_replier(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address main_a;
    if (pm_address_parse("t@main:0", &main_a) != 0)
        return 1;
    for (int i = 0; i < 3; i++) {
        pm_message r;
        if (pm_node_request(n, &main_a, "ping", 4, 5000, &r) < 0)
            return 2;
    }
    static char big[PM_MAX_PAYLOAD + 4096];
    memset(big, 'B', sizeof(big));
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc != 0 || m.kind != PM_MSG_REQUEST)
            continue;
        if (m.len == 3 && memcmp(m.data, "big", 3) == 0)
            rc = pm_node_reply(n, &m, big, sizeof(big));
        else
            rc = pm_node_reply(n, &m, "pong", 4);
        if (rc < 0)
            return 3; /* the slot would restart: the test sees it */
    }
}

/* The worker of test_window_exact: pings main three times (as start_host
 * waits for), then, told "go", sends MSGs of stream_len bytes to port 10
 * of host b (pm-bad-peer) for as long as it runs; a send that finds the
 * window shut waits in its ring. */
static size_t stream_len = 8;

static int streamer(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address main_a, to;
    if (pm_address_parse("t@main:0", &main_a) != 0 || pm_address_parse("t@b:10", &to) != 0)
        return 1;
    for (int i = 0; i < 3; i++) {
        pm_message r;
        if (pm_node_request(n, &main_a, "ping", 4, 5000, &r) < 0)
            return 2;
    }
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && m.kind == PM_MSG_PLAIN)
            break;
    }
    static char buf[60000];
    memset(buf, 's', sizeof(buf));
    for (;;) {
        int rc = pm_node_send(n, &to, buf, stream_len);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == -EHOSTUNREACH)
            usleep(5 * 1000); /* the link ended: the test is ending too */
    }
}

static int (*bootstrap)(pm_node *, void *) = pinger;
static int the_port;

/* PEER_REFUSED events, and the last one's count, reason, address and
 * host ("(none)": the event named none). */
static unsigned refused_events;
static uint64_t refused_count;
static char refused_reason[32], refused_address[64], refused_host[64];

/* The last PEER_DOWN's reason. */
static char down_reason[32];

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    pm_test_count_peer_events(c, e, arg);
    if (e->type == PM_EVENT_PEER_DOWN)
        snprintf(down_reason, sizeof(down_reason), "%s", e->detail != NULL ? e->detail : "");
    if (e->type != PM_EVENT_PEER_REFUSED)
        return;
    refused_events++;
    refused_count = e->peer_failures;
    snprintf(refused_reason, sizeof(refused_reason), "%s", e->detail);
    snprintf(refused_address, sizeof(refused_address), "%s", e->peer_address);
    snprintf(refused_host, sizeof(refused_host), "%s", e->peer_host != NULL ? e->peer_host : "(none)");
}

/* Where start_host listens: "[::]" for a dual-stack listener. */
static const char *listen_host = "127.0.0.1";

static pm_cluster *start_host(const char *name, int peer_timeout_ms, const char *peer)
{
    the_port = pm_test_free_port();
    pm_options *o = pm_test_host_options(name, 1, secret1, peer_timeout_ms, bootstrap);
    if (peer != NULL)
        ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    ck_assert_int_eq(pm_options_set_on_message(o, on_main, NULL), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_event, &peer_events), 0);
    char listen[32];
    snprintf(listen, sizeof(listen), "%s:%d", listen_host, the_port);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    /* Counted fds start from the spare too (made on the turns after the
     * spawn). */
    PM_RUN_UNTIL(c, pongs >= 3 && pm_test_successors_made(c), 20000);
    return c;
}

static pm_cluster *start_a(int peer_timeout_ms)
{
    return start_host("a", peer_timeout_ms, NULL);
}

/* Starts pm-bad-peer with attack (as host `as`). */
static pid_t bad_peer(const char *attack, const char *as)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        char port[16];
        snprintf(port, sizeof(port), "%d", the_port);
        execl(PM_BAD_PEER, "pm-bad-peer", port, "t", SECRET1_HEX, attack, as, (char *)NULL);
        _exit(127);
    }
    return pid;
}

/* 1 once pid has exited (its status in *status). Asked again after that
 * (PM_RUN_UNTIL evaluates its condition once more), still 1. */
static pid_t reaped;

static int exited(pid_t pid, int *status)
{
    if (reaped == pid)
        return 1;
    if (waitpid(pid, status, WNOHANG) != pid)
        return 0;
    reaped = pid;
    return 1;
}

/* Runs one attack and checks what it got: pm-bad-peer saw the connection
 * closed (its exit 0), the failure counted under `why`, and main answered
 * the worker's requests while it lasted. One the peer closed (its CLOSE,
 * `why` closed) lingers, answering it (doc/protocol.md 7). Returns how
 * many connections lingered meanwhile: 0 for an end by an error (after an
 * error a side waits for nothing), which the callers that need it assert
 * (a replay's capture, a real link ended in order, lingers). */
static uint64_t attack(pm_cluster *c, const char *name, int why)
{
    uint64_t lingered0 = c->mesh->lingered;
    unsigned refused0 = refused_events;
    uint64_t before = pm__mesh_fails(c->mesh, why);
    unsigned pongs0 = pongs;
    pid_t pid = bad_peer(name, "x");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer %s: exit status 0x%x (1: not closed, 3: setup)", name, status);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, why) > before, 10000);
    PM_RUN_UNTIL(c, pongs > pongs0 + 2, 10000);
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 0, 10000);
    uint64_t lingered = c->mesh->lingered - lingered0;
    if (why == PM__PF_CLOSED) {
        ck_assert_msg(lingered > 0, "%s: the peer's CLOSE was not answered in order", name);
        /* An end the peer asked for is no refusal (doc/protocol.md 8). */
        ck_assert_uint_eq(refused_events, refused0);
    }
    return lingered;
}

/* An attack that ends the connection by an error: nothing lingers. */
static void attack_err(pm_cluster *c, const char *name, int why)
{
    uint64_t lingered = attack(c, name, why);
    ck_assert_msg(lingered == 0, "%s (%s): lingered %llu times after an error", name, pm__peer_fail_name(why),
                  (unsigned long long)lingered);
}

/* The linger bound of the tests whose waits must end by what the peer
 * does: with the peer timeout of start_a(30000), a 30 s deadline, longer
 * than any step of theirs takes, so only a wait that the peer cannot end
 * (a fault) reaches it, and is counted expired. */
#define LONG_LINGER_MS 60000u

static unsigned lingering_now(pm_cluster *c)
{
    uint64_t lingered, answered, expired, discarded;
    unsigned lingering;
    pm_test_mesh_close_stats(c->mesh, &lingered, &answered, &expired, &discarded, &lingering);
    return lingering;
}

START_TEST(test_handshake_attacks)
{
    pm_cluster *c = start_a(2000);
    attack_err(c, "wrong-key", PM__PF_HS_DECRYPT);
    attack_err(c, "unknown-key-id", PM__PF_KEY_ID);
    attack_err(c, "bad-magic", PM__PF_PREAMBLE);
    attack_err(c, "other-system", PM__PF_SYSTEM);
    attack_err(c, "tamper-prologue", PM__PF_HS_DECRYPT);
    attack_err(c, "reflect", PM__PF_HS_DECRYPT);
    unsigned ups = peer_events.ups;
    /* The replays first make a real link (their capture), then fail. */
    (void)attack(c, "replay-msg3", PM__PF_HS_DECRYPT);
    ck_assert_uint_eq(peer_events.ups, ups + 1);
    /* XX cannot tell a replayed message 1 from a new one: it simply never
     * completes and dies at the handshake deadline. */
    (void)attack(c, "replay-msg1", PM__PF_TIMEOUT);
    ck_assert_uint_eq(peer_events.ups, ups + 2);
    attack_err(c, "slow-handshake", PM__PF_TIMEOUT);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_record_attacks)
{
    pm_cluster *c = start_a(2000);
    unsigned ups = peer_events.ups;
    /* Each after a real handshake (the attacker holds the secret): the
     * link is up, then broken. */
    attack_err(c, "truncated", PM__PF_TRUNCATED);
    attack_err(c, "reordered", PM__PF_RECORD);
    attack_err(c, "duplicated", PM__PF_RECORD);
    attack_err(c, "bitflip", PM__PF_RECORD);
    attack_err(c, "oversize", PM__PF_RECORD);
    ck_assert_uint_eq(peer_events.ups, ups + 5);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_record_errors_close_one)
{
    /* doc/protocol.md 8: a record the supervisor refuses (an unknown type,
     * a HEARTBEAT of a 1-byte body, a frame of length 0, a length above
     * 262140) gets CLOSE 1 before the connection closes; a segment that
     * fails to authenticate wipes the keys, so the stream just ends.
     * pm-bad-peer reads the CLOSE and checks its reason. */
    pm_cluster *c = start_a(2000);
    attack_err(c, "unknown-type", PM__PF_RECORD);
    attack_err(c, "heartbeat-1", PM__PF_RECORD);
    attack_err(c, "zero-frame", PM__PF_RECORD);
    attack_err(c, "oversize-close", PM__PF_RECORD);
    attack_err(c, "bitflip-close", PM__PF_RECORD);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_bytes_after_close_ignored)
{
    /* Bytes after the peer's CLOSE are never read, whether they arrive in
     * the same read as the CLOSE or after it: both end as "closed", the
     * CLOSE answered with CLOSE 0. */
    pm_cluster *c = start_a(2000);
    uint64_t record0 = pm__mesh_fails(c->mesh, PM__PF_RECORD);
    uint64_t answered0 = c->mesh->closes_answered, expired0 = c->mesh->linger_expired;
    /* CLOSE before any record: the link never came up, and an end the
     * peer asked for is still no refusal (attack() asserts it). */
    unsigned ups0 = peer_events.ups;
    attack(c, "close-first", PM__PF_CLOSED);
    ck_assert_uint_eq(peer_events.ups, ups0);
    attack(c, "close-junk-same", PM__PF_CLOSED);
    attack(c, "close-junk-later", PM__PF_CLOSED);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_RECORD), record0);
    /* Each linger was started by the peer's CLOSE: ours answers it and
     * nothing more is read (mesh_conn.c, linger_done from close_received),
     * so none waited for an answer it already had, none reached its
     * deadline, and no CLOSE counts as answering ours. */
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    ck_assert_uint_eq(c->mesh->closes_answered, answered0);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_first_record_frames_delivered)
{
    /* A peer whose first record after message 3 is a FRAMES record (a
     * request to our supervisor) instead of a HEARTBEAT: the record brings
     * the link up, and its frames are delivered (main answers the request)
     * rather than lost, once: two more requests after it, each answered
     * once (pm-bad-peer checks the counts; the held record taken again at
     * every later input, peer.c's mutant at `c->held &&`, answers twice). */
    pm_cluster *c = start_a(2000);
    unsigned ups = peer_events.ups;
    attack(c, "first-frames", PM__PF_CLOSED);
    ck_assert_uint_eq(peer_events.ups, ups + 1);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* Runs attack name as host b and waits for pm-bad-peer's exit 0 (it
 * checks what the supervisor answered), then for its link to be gone. */
static void run_b(pm_cluster *c, const char *name)
{
    pid_t pid = bad_peer(name, "b");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 90000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer %s: exit status 0x%x (1: not what doc/protocol.md says, 3: setup)", name,
                  status);
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 0, 10000);
}

START_TEST(test_two_links_one_initiator)
{
    /* doc/protocol.md 2: a host that dials us twice (same name, same
     * incarnation) keeps the link that came up first; the later one is
     * closed with CLOSE 0 before it is installed, counted `local`, and
     * reported up never. The first still carries a request (pm-bad-peer
     * checks main's answer over it after the close) and ends as our peer's
     * own CLOSE, counted `closed`. */
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    uint64_t local0 = pm__mesh_fails(c->mesh, PM__PF_LOCAL);
    uint64_t closed0 = pm__mesh_fails(c->mesh, PM__PF_CLOSED);
    unsigned ups = peer_events.ups, downs = peer_events.downs, refused0 = refused_events;
    uint64_t expired0 = c->mesh->linger_expired;
    uint64_t answered0 = c->mesh->closes_answered;
    run_b(c, "two-links");
    /* pm-bad-peer answered our CLOSE of the later link with its own
     * (its library's pconn does): that wait ended by the answer, and
     * none at the deadline. */
    ck_assert_uint_eq(c->mesh->closes_answered, answered0 + 1);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, PM__PF_CLOSED) == closed0 + 1, 10000);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_LOCAL), local0 + 1);
    ck_assert_uint_eq(refused_events, refused0); /* neither end is a refusal */
    ck_assert_uint_eq(peer_events.ups, ups + 1);
    ck_assert_uint_eq(peer_events.downs, downs + 1);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* pm-bad-peer's attack as host b, linked to c on fd 0: a supervisor whose
 * stdin is closed gets it for its next socket (a closed stdin is opened
 * onto /dev/null first, so that the close frees fd 0). Its pid. */
static pid_t link_on_fd_zero(pm_cluster *c, const char *attack)
{
    if (fcntl(0, F_GETFD) < 0)
        ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
    ck_assert_int_eq(close(0), 0); /* the accepted connection takes fd 0 */
    pid_t pid = bad_peer(attack, "b");
    int status = 0;
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 1 || exited(pid, &status), 30000);
    ck_assert_msg(reaped != pid, "pm-bad-peer %s ended before the link came up: 0x%x", attack, status);
    pm__mesh_conn *k = pm_test_mesh_up_conn(c->mesh);
    ck_assert_ptr_nonnull(k);
    ck_assert_int_eq(k->fd, 0);
    return pid;
}

/* SIGUSR1s the test process took (test_terminate_waits_for_close_answer). */
static volatile sig_atomic_t usr1_seen;

static void on_usr1(int sig)
{
    (void)sig;
    usr1_seen++;
}

/* The cluster terminated while a link is up (mesh.c linger_all): our CLOSE
 * goes out and the end waits, without the loop, for the peer's answer,
 * which pm-bad-peer late-answer sends 300 ms late; it is read (no reset
 * comes back to the peer) before the socket closes, and the wait sleeps
 * meanwhile (the supervisor's CPU time, not the wall clock, is bounded:
 * about 2 ms here for the whole terminate). The link sits on fd
 * 0 (a supervisor whose stdin is closed gets it for its next socket),
 * which the wait must not take for "no connection"; the link is reported
 * down once (and a connection in its handshake not at all); a signal that comes
 * meanwhile (pm-bad-peer sends SIGUSR1 every 20 ms once our CLOSE reached it) does not
 * end the wait. */
START_TEST(test_terminate_waits_for_close_answer)
{
    /* pm-bad-peer signals us while we wait for its answer: the wait's poll
     * returns EINTR (a handler without SA_RESTART, which poll ignores
     * anyway) and must wait on. */
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = on_usr1;
    ck_assert_int_eq(sigaction(SIGUSR1, &sa, NULL), 0);
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* the wait ends by the peer, not the bound */
    ck_assert_int_eq(setenv("PM_BAD_PEER_SIGNAL_PARENT", "1", 1), 0);
    pid_t pid = link_on_fd_zero(c, "late-answer");
    ck_assert_int_eq(unsetenv("PM_BAD_PEER_SIGNAL_PARENT"), 0);
    /* And a connection that says nothing, in its handshake at the end:
     * no link, so no link reported down. */
    int quiet = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(quiet, 0);
    struct sockaddr_in to = {.sin_family = AF_INET, .sin_port = htons((uint16_t)the_port)};
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(connect(quiet, (struct sockaddr *)&to, sizeof(to)), 0);
    PM_RUN_UNTIL(c, pm_cluster_peers(c, NULL, 0) == 2, 20000);
    struct timespec c0, c1;
    ck_assert_int_eq(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c0), 0);
    uint64_t t0 = pm_test_ms();
    unsigned downs = peer_events.downs;
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    uint64_t took = pm_test_ms() - t0;
    /* The link going away with the cluster is reported down, once (the
     * daemon logs peer_down at shutdown: procmesh(1)). */
    ck_assert_uint_eq(peer_events.downs, downs + 1);
    ck_assert_int_eq(clock_gettime(CLOCK_PROCESS_CPUTIME_ID, &c1), 0);
    /* Ended by the answer, not by the bound (the peer timeout, 30 s): a
     * supervisor that never read it would close at the bound, with the
     * answer unread, after pm-bad-peer had exited content. */
    ck_assert_msg(took < 15000, "terminate took %llu ms: the wait ended at its bound, not at the answer",
                  (unsigned long long)took);
    /* The wait (300 ms and more: the peer's answer is late) sleeps in
     * poll(2) for what it waits for: a wait that woke for a socket it can
     * always write to would spin through it, on the CPU. */
    double cpu_ms = (double)(c1.tv_sec - c0.tv_sec) * 1e3 + (double)(c1.tv_nsec - c0.tv_nsec) / 1e6;
    ck_assert_msg(cpu_ms < 100, "terminate spent %.0f ms of CPU waiting 300 ms for a CLOSE", cpu_ms);
    int st = pm_test_reap(pid, 30000);
    ck_assert_msg(st == 0, "pm-bad-peer late-answer: exit status 0x%x (1: its answer was reset)", st);
    ck_assert_int_ge(usr1_seen, 1);
    close(quiet);
}
END_TEST

/* The same end with a peer that never answers (pm-bad-peer hold, which
 * reads nothing and gives up after 30 s): the wait ends at its bound,
 * brought to 300 ms, while the peer still holds its end, and the socket
 * is closed all the same: the link's fd, 0, is free after
 * pm_cluster_terminate. */
START_TEST(test_terminate_linger_bound)
{
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, 300);
    pid_t pid = link_on_fd_zero(c, "hold");
    int status = 0;
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    /* Ended by the bound: the peer, which gives up after 30 s, still holds
     * its end. */
    ck_assert_msg(waitpid(pid, &status, WNOHANG) == 0,
                  "terminate returned only once the peer gave up: the bound did not end the wait");
    errno = 0;
    ck_assert_msg(fcntl(0, F_GETFD) < 0 && errno == EBADF, "fd 0, the link's, still open after terminate");
    kill(pid, SIGKILL);
    pm_test_reap(pid, 10000);
}
END_TEST

START_TEST(test_linger_ends_at_end_of_stream)
{
    /* doc/protocol.md 7: after its CLOSE a side waits for the peer's CLOSE
     * or the end of its stream. The later of two links (as above) gets our
     * CLOSE 0 and lingers; pm-bad-peer answers with the end of its stream
     * alone. With the deadline out of reach, only that end can finish the
     * wait: it is read as an end (mesh_conn.c's linger loop, `r > 0`: a
     * read of 0 taken as bytes would wait on), and nothing expires. */
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    uint64_t lingered0 = c->mesh->lingered, expired0 = c->mesh->linger_expired;
    uint64_t answered0 = c->mesh->closes_answered;
    run_b(c, "two-links-eof");
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    /* The later link's wait, and the first link's end (pm-bad-peer's
     * CLOSE, answered by ours). */
    ck_assert_uint_eq(c->mesh->lingered, lingered0 + 2);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_uint_eq(c->mesh->closes_answered, answered0); /* no CLOSE came after ours */
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_linger_ends_at_close_answer)
{
    /* The same wait ended by the peer's CLOSE alone: pm-bad-peer answers
     * our CLOSE of the later link with its own and keeps its stream open
     * (until the test kills it). With the deadline out of reach, its CLOSE
     * is what ends the wait (mesh_conn.c's linger loop, `rc != 0`): counted
     * answered, nothing expired. */
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    uint64_t lingered0 = c->mesh->lingered, expired0 = c->mesh->linger_expired;
    uint64_t answered0 = c->mesh->closes_answered;
    pid_t pid = bad_peer("two-links-open", "b");
    int status = 0;
    PM_RUN_UNTIL(c, (c->mesh->closes_answered > answered0 && lingering_now(c) == 0) || exited(pid, &status),
                 60000);
    if (reaped != pid)
        kill(pid, SIGKILL); /* not once reaped: its pid may be another's */
    PM_RUN_UNTIL(c, exited(pid, &status), 10000);
    ck_assert_msg(WIFSIGNALED(status), "pm-bad-peer two-links-open ended by itself: exit status 0x%x", status);
    ck_assert_uint_eq(c->mesh->lingered, lingered0 + 1);
    ck_assert_uint_eq(c->mesh->closes_answered, answered0 + 1);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_linger_counts_frames_after_close)
{
    /* Frames that come after our CLOSE are read and discarded, and
     * counted (doc/protocol.md 7): pm-bad-peer answers our CLOSE of the
     * later link with a record of three frames, then its CLOSE and the end
     * of its stream. */
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    uint64_t discarded0 = c->mesh->linger_discarded, answered0 = c->mesh->closes_answered;
    uint64_t expired0 = c->mesh->linger_expired;
    run_b(c, "two-links-frames");
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    ck_assert_uint_eq(c->mesh->linger_discarded, discarded0 + 3);
    ck_assert_uint_eq(c->mesh->closes_answered, answered0 + 1);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    /* The frames of the record a link is closed on as it comes up (the
     * later link's first record, two MSGs to main): discarded before the
     * linger, counted with those after our CLOSE, and not delivered. */
    discarded0 = c->mesh->linger_discarded;
    run_b(c, "two-links-first-frames");
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    ck_assert_uint_eq(c->mesh->linger_discarded, discarded0 + 2);
    ck_assert_uint_eq(first_delivered, 0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_no_frag_reply_refused)
{
    /* doc/protocol.md "Frames on a link": a worker's REPLY above
     * PM_MAX_PAYLOAD to a request from a peer whose hello lacks capability
     * bit 1 does not cross; the requester gets UNDELIVERABLE -EMSGSIZE
     * from the worker's port (pm-bad-peer checks it, and that a small
     * request after it is answered). The worker is unharmed: the same
     * incarnation, no restart. */
    bootstrap = big_replier;
    pm_cluster *c = start_a(30000);
    pm_slot_info si0, si1;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si0), 0);
    run_b(c, "no-frag");
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si1), 0);
    ck_assert_uint_eq(si1.incarnation, si0.incarnation);
    ck_assert_uint_eq(si1.restarts_total, si0.restarts_total);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_forged_notices_dropped)
{
    /* A peer authenticated as b sends our worker undeliverable notices
     * under every request id from 1 to 3000, while the worker's requests
     * to its own main (ids in that range) are in flight. None answers a
     * request the worker sent over b's link: each is dropped and counted
     * late, and no ping fails. */
    pm_cluster *c = start_a(2000);
    uint64_t closed0 = pm__mesh_fails(c->mesh, PM__PF_CLOSED);
    uint64_t late0 = pm_test_hub_late_replies(c->hub);
    pid_t pid = bad_peer("forged-notices", "b");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer forged-notices: 0x%x", status);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, PM__PF_CLOSED) > closed0, 10000);
    ck_assert_uint_ge(pm_test_hub_late_replies(c->hub), late0 + 3000);
    unsigned pongs0 = pongs;
    PM_RUN_UNTIL(c, pongs > pongs0 + 2, 10000);
    ck_assert_uint_eq(ping_failures, 0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_forged_host_dropped)
{
    /* A peer authenticated as b sends a frame claiming host c: dropped and
     * counted on b's link, never delivered; b's own CLOSE ends the link. */
    pm_cluster *c = start_a(2000);
    uint64_t closed0 = pm__mesh_fails(c->mesh, PM__PF_CLOSED);
    pid_t pid = bad_peer("forged-host", "b");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pm-bad-peer forged-host: 0x%x",
                  status);
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 0 && peer_events.ups == 1, 10000);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, PM__PF_CLOSED) > closed0, 10000);
    int b = pm__hub_host_index(c->hub, "b");
    ck_assert_int_ge(b, 1);
    ck_assert_uint_eq(pm_test_link_forged(c->hub, (unsigned)b), 1);
    ck_assert_uint_eq(forged_delivered, 0);
    unsigned pongs0 = pongs;
    PM_RUN_UNTIL(c, pongs > pongs0 + 2, 10000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* A peer-mode supervisor knows other hosts by index: a local worker's
 * frame naming host 1 as its source must still reach main as the local
 * worker, its true incarnation (the hub stamps every source field from the
 * ring, design.md). Without peers every host index names the local one,
 * which is why test_spoofed_source (check_messaging) cannot see this. */
START_TEST(test_worker_forged_host)
{
    forge_host = 1;
    pm_cluster *c = start_a(2000);
    PM_RUN_UNTIL(c, forged_seen == 1, 10000);
    pm_address w;
    ck_assert_int_eq(pm_cluster_addresses(c, &w, 1), 1);
    ck_assert_str_eq(forged_from.host, w.host);
    ck_assert_uint_eq(forged_from.port, w.port);
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, 0, &si), 0);
    ck_assert_uint_eq(forged_from.incarnation, si.incarnation); /* not the forged 9 */
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_silent_peer_close_three)
{
    /* doc/protocol.md 7 and 8: a side that receives nothing for its own
     * idle_ms (the peer timeout, 2 s here) sends CLOSE 3 and closes.
     * pm-bad-peer completes a real handshake, sends its first record and
     * then nothing (it reads the supervisor's PINGs and never answers
     * them): it must read a CLOSE of reason 3 before the end of the
     * stream. The link was up, so its end is a peer_down, reason timeout. */
    pm_cluster *c = start_a(2000);
    unsigned ups = peer_events.ups, downs = peer_events.downs;
    attack(c, "silent", PM__PF_TIMEOUT);
    ck_assert_uint_eq(peer_events.ups, ups + 1);
    ck_assert_uint_eq(peer_events.downs, downs + 1);
    ck_assert_str_eq(down_reason, "timeout");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_hello_version_min)
{
    /* doc/protocol.md 5: the version in use (the preamble's
     * "procmesh-link/1", 1) must equal min(own max_version, the peer's),
     * else close. A hello of max_version 2 (a peer that speaks more): min
     * is 1, accepted, the supervisor sends its first record (pm-bad-peer
     * then ends the stream without one of its own: `truncated`, never up).
     * A hello of max_version 0: min is 0, closed before any record,
     * counted and reported as `version`. */
    pm_cluster *c = start_a(2000);
    unsigned ups = peer_events.ups;
    attack(c, "version-2", PM__PF_TRUNCATED);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_VERSION), 0);
    attack(c, "version-0", PM__PF_VERSION);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_VERSION), 1);
    ck_assert_str_eq(refused_reason, "version");
    /* Refused after its hello: the event names the host it claimed. */
    ck_assert_str_eq(refused_host, "x");
    ck_assert_uint_eq(peer_events.ups, ups);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_window_exact)
{
    /* doc/protocol.md 6, "Flow control": at most 512 MSG and REQUEST
     * frames and 2 MiB (56 + payload each) per port not credited back.
     * The worker streams MSGs to pm-bad-peer's port 10 (host b), which
     * announces credits and sends none; once the worker is held by the
     * window, main sends b's port 10 one MSG (main is held by no window:
     * it goes at once) behind everything the worker got onto the link.
     * pm-bad-peer counts the worker's frames before main's: 512 of 64
     * bytes, 34 of 60,056 (35 would pass 2 MiB), none after; its CREDIT
     * for them lets the worker's frames flow again. */
    static const size_t lens[] = {8, 60000};
    stream_len = lens[_i];
    bootstrap = streamer;
    pm_cluster *c = start_a(30000);
    pid_t pid = bad_peer("window", "b");
    int status = 0;
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 1 || exited(pid, &status), 30000);
    ck_assert_msg(pm_test_mesh_links_up(c->mesh) == 1, "no link: pm-bad-peer exit status 0x%x", status);
    pm_address w, to;
    ck_assert_int_eq(pm_address_parse("t@a:10", &w), 0);
    ck_assert_int_eq(pm_address_parse("t@b:10", &to), 0);
    int sent = 0;
    PM_RUN_UNTIL(c, sent || (sent = pm_cluster_send(c, &w, "go", 2) == 0), 10000);
    uint64_t qw = 0, ww = 0;
    PM_RUN_UNTIL(c, pm_test_link_waits(c, "b", &qw, &ww) == 0 && ww > 0 &&
                        pm_test_slot_blocked_on(c, 0) == PM__BLOCKED_LINK, 30000);
    /* Not held by the window; -EAGAIN only while the link's output queue
     * is full of the worker's last frames (its window shut behind them). */
    int mrc = -EAGAIN;
    PM_RUN_UNTIL(c, mrc != -EAGAIN || (mrc = pm_cluster_send(c, &to, "mark", 4)) != -EAGAIN, 10000);
    ck_assert_int_eq(mrc, 0);
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer window (%zu-byte MSGs): exit status 0x%x (1: not what doc/protocol.md says, "
                  "3: setup)", stream_len, status);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* Bytes waiting in the output queues of c's links, and each linked
 * connection's send buffer set to small (0: left as it is). */
static size_t link_output(pm_cluster *c, int small)
{
    size_t total = 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++) {
        pm__mesh_conn *k = &c->mesh->conns[j];
        if (k->fd < 0 || !k->linked)
            continue;
        if (small > 0)
            (void)setsockopt(k->fd, SOL_SOCKET, SO_SNDBUF, &small, sizeof(small));
        size_t n;
        (void)pm__pconn_output(&k->pc, &n);
        total += n;
    }
    return total;
}

/* Host a with the linger bound out of reach, linked with pm-bad-peer
 * attack (host b, which reads nothing), and the worker streaming
 * 60,000-byte MSGs to it until the link's output queue holds bytes and
 * the worker waits for it (the kernel's buffers made small on both
 * ends). pm-bad-peer's pid into *pid, the expired lingers so far into
 * *expired0. */
static pm_cluster *start_full_link(const char *attack, pid_t *pid, uint64_t *expired0)
{
    stream_len = 60000;
    bootstrap = streamer;
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    *expired0 = c->mesh->linger_expired;
    *pid = bad_peer(attack, "b");
    int status = 0;
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 1 || exited(*pid, &status), 30000);
    ck_assert_msg(pm_test_mesh_links_up(c->mesh) == 1, "no link: pm-bad-peer exit status 0x%x", status);
    (void)link_output(c, 4096);
    pm_address w;
    ck_assert_int_eq(pm_address_parse("t@a:10", &w), 0);
    int sent = 0;
    PM_RUN_UNTIL(c, sent || (sent = pm_cluster_send(c, &w, "go", 2) == 0), 10000);
    PM_RUN_UNTIL(c, link_output(c, 0) > 0 && pm_test_slot_blocked_on(c, 0) == PM__BLOCKED_LINK, 30000);
    return c;
}

START_TEST(test_linger_writes_its_queue_out)
{
    /* doc/protocol.md 7: a side's CLOSE goes out after everything it
     * queued before it, and the peer's CLOSE does not cut that short: the
     * linger ends once our output is out and our half shut, not at the
     * peer's CLOSE alone (mesh_conn.c, pm__mesh_conn_linger). The worker
     * streams 60,000-byte MSGs to pm-bad-peer (host b), which reads
     * nothing; once the link's output queue holds some (the kernel's
     * buffers made small on both ends), pm-bad-peer sends its CLOSE and
     * then reads: every queued frame, our CLOSE, the end. The deadline is
     * out of reach: only the writing out can end the wait. */
    uint64_t expired0;
    pid_t pid;
    pm_cluster *c = start_full_link("close-full", &pid, &expired0);
    int status = 0;
    ck_assert_int_eq(kill(pid, SIGUSR1), 0);
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer close-full: exit status 0x%x (1: our queue or our CLOSE did not reach it)",
                  status);
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_linger_after_reset)
{
    /* A link we close in order while its queue waits for a peer that
     * reads nothing (the worker streams to pm-bad-peer `hold`), whose
     * process is then killed with our bytes unread: its kernel answers
     * with a reset. The write that meets it kills our state, drops the
     * queue and shuts our half, the next read ends the wait: nothing is
     * left spinning to the deadline (mesh_conn.c pm__mesh_conn_write). */
    uint64_t expired0;
    pid_t pid;
    pm_cluster *c = start_full_link("hold", &pid, &expired0);
    int status = 0;
    pm_test_mesh_close(c->mesh); /* our CLOSE, queued behind what waits */
    PM_RUN_UNTIL(c, lingering_now(c) == 1, 10000);
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, exited(pid, &status), 10000);
    PM_RUN_UNTIL(c, lingering_now(c) == 0, 10000);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_lingering_link_is_no_link)
{
    /* A connection that lingers after our CLOSE is no link any more: host
     * b, whose link we close in order (pm_test_mesh_close) and which
     * holds that connection open without answering, dials again with
     * the same incarnation. The new link comes up and carries main's
     * answer (pm-bad-peer checks it); the lingering one, its host
     * still recorded, is not the host's live link (mesh_conn.c conn_up
     * compares linked connections only). The linger then ends at b's
     * end of stream, none at its deadline. */
    pm_cluster *c = start_a(30000);
    pm_test_mesh_set_linger_ms(c->mesh, LONG_LINGER_MS); /* a wait ends by the peer, not the deadline */
    unsigned ups = peer_events.ups;
    uint64_t expired0 = c->mesh->linger_expired;
    pid_t pid = bad_peer("relink", "b");
    int status = 0;
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 1 || exited(pid, &status), 30000);
    ck_assert_msg(pm_test_mesh_links_up(c->mesh) == 1, "no link: pm-bad-peer exit status 0x%x", status);
    pm_test_mesh_close(c->mesh);
    PM_RUN_UNTIL(c, exited(pid, &status), 90000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer relink: exit status 0x%x (1: the second link did not carry main's answer)",
                  status);
    PM_RUN_UNTIL(c, lingering_now(c) == 0 && pm_test_mesh_links_up(c->mesh) == 0, 10000);
    ck_assert_uint_eq(peer_events.ups, ups + 2);
    ck_assert_uint_eq(c->mesh->linger_expired, expired0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_credit_exact)
{
    /* doc/protocol.md 6, "Flow control": a receiver sends what it owes
     * for a port when that reaches 128 frames or 512 KiB, as one CREDIT.
     * pm-bad-peer (host b) sends MSGs to our supervisor's port 0 and
     * checks each edge: no CREDIT after 127 frames, one for 128 after the
     * 128th; none after 8 frames of 60,056 bytes, one for 9 and 540,504
     * bytes after the 9th. */
    pm_cluster *c = start_a(30000);
    run_b(c, "credit");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* 127.0.0.1:port. */
static struct sockaddr_in loopback_at(int port)
{
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_port = htons((uint16_t)port);
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    return sa;
}

/* A raw TCP connection to our supervisor's peer port (the test's own fd). */
static int raw_connect(int port)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa = loopback_at(port);
    ck_assert_int_eq(connect(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    return fd;
}

/* 1 when the supervisor closed its end of fd (EOF or a reset). */
static int closed_by_peer(int fd)
{
    char b;
    ssize_t k = recv(fd, &b, 1, MSG_DONTWAIT);
    return k == 0 || (k < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

START_TEST(test_connections_bound)
{
    /* doc/protocol.md 2, "What a responder admits": 64 connections in all
     * (links, handshakes, dials); past that an accepted connection is
     * closed at once, counted `local`. pm-bad-peer brings 64 links up
     * (hosts h0..h63, each from its own source address: the per-source
     * rate limit is not what refuses) and keeps them; one more connection
     * is closed before anything is read (the handshake deadline is a
     * minute away), while the 64 links stay. */
    ck_assert_uint_eq(PM__MESH_CONNS, 64);
    pm_cluster *c = start_a(60000);
    pid_t pid = bad_peer("hold-64", "x");
    int status = 0;
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == PM__MESH_CONNS || exited(pid, &status), 60000);
    ck_assert_msg(pm_test_mesh_links_up(c->mesh) == PM__MESH_CONNS,
                  "%u links up; pm-bad-peer exit status 0x%x (3: setup)", pm_test_mesh_links_up(c->mesh),
                  status);
    uint64_t local0 = pm__mesh_fails(c->mesh, PM__PF_LOCAL), rate0 = pm__mesh_fails(c->mesh, PM__PF_RATE),
             timeout0 = pm__mesh_fails(c->mesh, PM__PF_TIMEOUT);
    int fd = raw_connect(the_port);
    PM_RUN_UNTIL(c, closed_by_peer(fd), 10000);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_LOCAL), local0 + 1);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_RATE), rate0);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_TIMEOUT), timeout0);
    ck_assert_uint_eq(pm_test_mesh_links_up(c->mesh), PM__MESH_CONNS);
    close(fd);
    kill(pid, SIGKILL);
    waitpid(pid, NULL, 0);
    PM_RUN_UNTIL(c, pm_test_mesh_links_up(c->mesh) == 0, 20000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_rate_limit_pure)
{
    /* One source gets BURST handshakes at once, then PER_S a second; the
     * others are not affected; the table never grows past its size. */
    pm__mesh_rate t;
    memset(&t, 0, sizeof(t));
    unsigned char x[16] = {0}, y[16] = {0};
    x[15] = 1;
    y[15] = 2;
    uint64_t now = 1000;
    for (unsigned i = 0; i < PM__MESH_RATE_BURST; i++)
        ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 1);
    ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 0);
    ck_assert_int_eq(pm__mesh_rate_take(&t, y, now), 1);
    /* A second later: PER_S more, not one more. */
    now += 1000;
    for (unsigned i = 0; i < PM__MESH_RATE_PER_S; i++)
        ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 1);
    ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 0);
    /* Long quiet: the bucket refills to BURST, never past it. */
    now += 3600 * 1000;
    for (unsigned i = 0; i < PM__MESH_RATE_BURST; i++)
        ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 1);
    ck_assert_int_eq(pm__mesh_rate_take(&t, x, now), 0);
    /* More sources than entries: the least recently seen is evicted (x,
     * the oldest after y and the newcomers, comes back with a full
     * bucket). */
    now += 1;
    ck_assert_int_eq(pm__mesh_rate_take(&t, y, now), 1);
    for (unsigned i = 0; i < PM__MESH_RATE_SOURCES; i++) {
        unsigned char z[16] = {0};
        z[0] = 9;
        z[14] = (unsigned char)(i >> 8);
        z[15] = (unsigned char)i;
        ck_assert_int_eq(pm__mesh_rate_take(&t, z, now + 1 + i), 1);
    }
    ck_assert_int_eq(pm__mesh_rate_take(&t, x, now + 1000), 1);
    /* The all-zero key (the source of an address family without one,
     * "::"): a new source like any other, its full bucket at once, never
     * a free entry's empty one refilled by the clock (1 ms: 8
     * thousandths of a token). */
    memset(&t, 0, sizeof(t));
    unsigned char zero[16] = {0};
    for (unsigned i = 0; i < PM__MESH_RATE_BURST; i++)
        ck_assert_int_eq(pm__mesh_rate_take(&t, zero, 1), 1);
    ck_assert_int_eq(pm__mesh_rate_take(&t, zero, 1), 0);
}
END_TEST

/* The key of one source address written as text (inet_pton: a dotted
 * quad is an AF_INET source, anything else AF_INET6); "unix" an AF_UNIX
 * one. */
static void key_of(const char *text, unsigned char key[16])
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    struct sockaddr_in *v4 = (struct sockaddr_in *)&ss;
    struct sockaddr_in6 *v6 = (struct sockaddr_in6 *)&ss;
    if (strcmp(text, "unix") == 0)
        ss.ss_family = AF_UNIX;
    else if (inet_pton(AF_INET, text, &v4->sin_addr) == 1)
        ss.ss_family = AF_INET;
    else {
        ck_assert_msg(inet_pton(AF_INET6, text, &v6->sin6_addr) == 1, "%s", text);
        ss.ss_family = AF_INET6;
    }
    /* Every byte of the key written, and none past it. */
    unsigned char buf[32];
    memset(buf, 0xaa, sizeof(buf));
    pm__mesh_rate_key(&ss, buf);
    for (size_t i = 16; i < sizeof(buf); i++)
        ck_assert_msg(buf[i] == 0xaa, "%s: byte %zu past the key written", text, i);
    memcpy(key, buf, 16);
}

START_TEST(test_rate_key_rows)
{
    /* doc/protocol.md 2: the handshake rate limit counts an IPv4 host, a
     * v4-mapped IPv6 source as that IPv4 host, and any other IPv6 source
     * by its /64. One row a rule: two sources, and whether they are one
     * source for the limit. */
    static const struct {
        const char *a, *b;
        int same;
    } rows[] = {
        {"127.0.0.1", "::ffff:127.0.0.1", 1},     /* mapped = the IPv4 host */
        {"127.0.0.1", "127.0.0.2", 0},            /* IPv4 hosts apart */
        {"::ffff:10.0.0.1", "::ffff:10.0.0.2", 0}, /* mapped: the last byte counts */
        {"::ffff:10.0.0.1", "::ffff:11.0.0.1", 0}, /* and the first of the four */
        {"2001:db8:1:2::1", "2001:db8:1:2:ffff::9", 1}, /* one /64 */
        {"2001:db8:1:2::1", "2001:db8:1:2:8000::1", 1}, /* byte 8 is not the prefix's */
        {"2001:db8:1:2::1", "2001:db8:1:3::1", 0},  /* byte 7 is */
        {"::1", "::2", 1},                         /* ::/64 */
        {"::1", "::ffff:0.0.0.1", 0},              /* mapped is not ::/64 */
        /* Eleven bytes of the mapped prefix and not the twelfth: an IPv6
         * source of ::/64 like ::1, not an IPv4 host. */
        {"::fe:0:1", "::1", 1},
        {"::ff00:0:1", "::1", 1},
        {"0:0:0:0:0:1:ffff:1", "::1", 1},
        {"unix", "::", 1},                         /* no address: all zero */
        {"127.0.0.1", "::", 0},
        {"2001:db8::1", "::", 0},
    };
    for (size_t i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        unsigned char ka[16], kb[16];
        key_of(rows[i].a, ka);
        key_of(rows[i].b, kb);
        ck_assert_msg((memcmp(ka, kb, 16) == 0) == rows[i].same, "row %zu: %s and %s %s one source", i,
                      rows[i].a, rows[i].b, rows[i].same ? "are" : "are not");
    }
    /* The key's form, which the table compares whole: an IPv4 host is
     * ::ffff:a.b.c.d, an IPv6 source's /64 has its other 8 bytes 0. */
    unsigned char k[16], want[16] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff, 10, 1, 2, 3};
    key_of("10.1.2.3", k);
    ck_assert_int_eq(memcmp(k, want, 16), 0);
    key_of("::ffff:10.1.2.3", k);
    ck_assert_int_eq(memcmp(k, want, 16), 0);
    unsigned char want6[16] = {0x20, 0x01, 0x0d, 0xb8, 0, 1, 0, 2};
    key_of("2001:db8:1:2:aaaa:bbbb:cccc:dddd", k);
    ck_assert_int_eq(memcmp(k, want6, 16), 0);
    unsigned char zero[16] = {0};
    key_of("unix", k);
    ck_assert_int_eq(memcmp(k, zero, 16), 0);
}
END_TEST

/* A TCP connection from address src to dst:port (IPv4 or IPv6 text). */
static int src_connect(const char *src, const char *dst, int port)
{
    struct sockaddr_storage a, b;
    socklen_t len;
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    struct sockaddr_in *a4 = (struct sockaddr_in *)&a, *b4 = (struct sockaddr_in *)&b;
    struct sockaddr_in6 *a6 = (struct sockaddr_in6 *)&a, *b6 = (struct sockaddr_in6 *)&b;
    if (inet_pton(AF_INET, src, &a4->sin_addr) == 1) {
        a4->sin_family = b4->sin_family = AF_INET;
        b4->sin_port = htons((uint16_t)port);
        ck_assert_int_eq(inet_pton(AF_INET, dst, &b4->sin_addr), 1);
        len = sizeof(*a4);
    } else {
        ck_assert_int_eq(inet_pton(AF_INET6, src, &a6->sin6_addr), 1);
        a6->sin6_family = b6->sin6_family = AF_INET6;
        b6->sin6_port = htons((uint16_t)port);
        ck_assert_int_eq(inet_pton(AF_INET6, dst, &b6->sin6_addr), 1);
        len = sizeof(*a6);
    }
    int fd = socket(a.ss_family, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_msg(bind(fd, (struct sockaddr *)&a, len) == 0, "bind %s: %s", src, strerror(errno));
    ck_assert_msg(connect(fd, (struct sockaddr *)&b, len) == 0, "connect %s -> %s:%d: %s", src, dst, port,
                  strerror(errno));
    return fd;
}

/* n connections from src to dst on cluster c's peer port, each one
 * accepted (held as an unauthenticated connection) or refused for its
 * source's rate (closed at once), then closed again. How many were
 * refused. */
static unsigned connect_batch(pm_cluster *c, const char *src, const char *dst, unsigned n)
{
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == 0, 20000);
    uint64_t rate0 = pm__mesh_fails(c->mesh, PM__PF_RATE);
    int fds[PM__MESH_UNAUTH_MAX];
    ck_assert_uint_le(n, PM__MESH_UNAUTH_MAX); /* none cut for room */
    for (unsigned i = 0; i < n; i++)
        fds[i] = src_connect(src, dst, the_port);
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) + (pm__mesh_fails(c->mesh, PM__PF_RATE) - rate0) == n,
                 20000);
    unsigned refused = (unsigned)(pm__mesh_fails(c->mesh, PM__PF_RATE) - rate0);
    for (unsigned i = 0; i < n; i++)
        close(fds[i]);
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == 0, 20000);
    return refused;
}

/* This machine has an IPv6 loopback to connect from, and a listener on
 * [::] takes IPv4 connections too (net.ipv6.bindv6only 0, the kernel's
 * default; procmesh sets no IPV6_V6ONLY of its own). */
static int have_ipv6_loopback(void)
{
    char v[8] = "";
    if (pm_test_read_file("/proc/sys/net/ipv6/bindv6only", v, sizeof(v)) <= 0 || v[0] != '0')
        return 0;
    int fd = socket(AF_INET6, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in6 a;
    memset(&a, 0, sizeof(a));
    a.sin6_family = AF_INET6;
    a.sin6_addr = in6addr_loopback;
    int ok = fd >= 0 && bind(fd, (struct sockaddr *)&a, sizeof(a)) == 0;
    if (fd >= 0)
        close(fd);
    return ok;
}

/* The hosts start_host makes listen on [::], dual stack, when this
 * machine has one (1); else on 127.0.0.1, said on stderr for test (0).
 * This test's process only (fork mode). */
static int listen_dual_stack(const char *test)
{
    int v6 = have_ipv6_loopback();
    if (!v6)
        fprintf(stderr, "%s: no dual-stack IPv6 loopback: an IPv4 listener only\n", test);
    listen_host = v6 ? "[::]" : "127.0.0.1";
    return v6;
}

START_TEST(test_rate_limit_sources)
{
    /* doc/protocol.md 2, through the real accept path: while 127.0.0.1's
     * bucket is empty, 127.0.0.2 still gets its own burst, and so does
     * ::1. The listener is on [::], dual stack: the IPv4 connections
     * arrive as v4-mapped IPv6 sources, and each is still its own IPv4
     * host (not the /64 ::ffff:0:0/64 they would all share). No accept is
     * counted as out of fds. Without an IPv6 loopback (or with
     * bindv6only): an IPv4 listener and the two IPv4 hosts only (said on
     * stderr). */
    int v6 = listen_dual_stack("test_rate_limit_sources");
    pm_cluster *c = start_a(60000);
    /* 127.0.0.1's bucket emptied through the table (test_flood_1000 spends
     * one with real connections), and seen last an hour from now, so that
     * no refill comes however slowly this machine connects: its next
     * connection is refused. */
    struct sockaddr_storage one;
    memset(&one, 0, sizeof(one));
    ((struct sockaddr_in *)&one)->sin_family = AF_INET;
    ck_assert_int_eq(inet_pton(AF_INET, "127.0.0.1", &((struct sockaddr_in *)&one)->sin_addr), 1);
    unsigned char key[16];
    pm__mesh_rate_key(&one, key);
    uint64_t ahead = pm__now_ms() + 3600 * 1000;
    while (pm__mesh_rate_take(&c->mesh->rate, key, ahead))
        ;
    ck_assert_uint_eq(connect_batch(c, "127.0.0.1", "127.0.0.1", 1), 1);
    /* Another host, at once: its own full bucket (one shared with
     * 127.0.0.1 would refuse these 8 for a second). */
    ck_assert_uint_eq(connect_batch(c, "127.0.0.2", "127.0.0.1", 8), 0);
    if (v6)
        ck_assert_uint_eq(connect_batch(c, "::1", "::1", 8), 0);
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_NO_FDS), 0);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* The highest fd number open in this process. */
static int highest_fd(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int hi = -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        if (e->d_name[0] != '.' && atoi(e->d_name) != dirfd(d) && atoi(e->d_name) > hi)
            hi = atoi(e->d_name);
    closedir(d);
    return hi;
}

/* Fills every free fd of this process with /dev/null (out[], at most
 * cap): how many. */
static unsigned fill_fds(int *out, unsigned cap)
{
    unsigned n = pm_test_fill_fds(out, cap);
    ck_assert(n == cap || errno == EMFILE);
    return n;
}

/* 1 when fd is open. */
static int fd_open(int fd)
{
    return fd >= 0 && fcntl(fd, F_GETFD) >= 0;
}

START_TEST(test_reserve_fd_rows)
{
    /* mesh_accept.c's accept out of fds (libuv's uv__emfile_trick), one row
     * a state of the reserve fd, in this process's own supervisor with
     * every fd taken (RLIMIT_NOFILE just above what it holds). The test's
     * connections are made before the fds run out (connect needs none).
     * 1. The reserve held: the connection is accepted with it and closed
     *    at once (counted no_fds), the reserve taken back (open).
     * 2. The reserve is fd 0 (a supervisor started without stdin): the
     *    same, and it stays 0; taking it back again keeps it, opening
     *    nothing.
     * 3. No reserve: accepting stalls (counted no_fds, the connection left
     *    waiting, not closed); once an fd frees up, the next turn arms the
     *    listener again and the connection is accepted. */
    pm_cluster *c = start_a(60000);
    pm__mesh *m = c->mesh;
    ck_assert(fd_open(m->reserve_fd));
    int cl[3];
    for (int i = 0; i < 3; i++) {
        cl[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_ge(cl[i], 0);
    }
    struct sockaddr_in sa = loopback_at(the_port);
    struct rlimit rl0, rl;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl0), 0);
    rl = rl0;
    rl.rlim_cur = (rlim_t)highest_fd() + 1 + 16;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    static int fill[4096];
    unsigned nfill = fill_fds(fill, 4096 - 2);
    ck_assert_uint_lt(nfill, 4096 - 2); /* every fd taken */

    /* 1 */
    uint64_t nofds = pm__mesh_fails(m, PM__PF_NO_FDS);
    ck_assert_int_eq(connect(cl[0], (struct sockaddr *)&sa, sizeof(sa)), 0);
    PM_RUN_UNTIL(c, closed_by_peer(cl[0]), 20000);
    ck_assert_uint_ge(pm__mesh_fails(m, PM__PF_NO_FDS), nofds + 1);
    ck_assert_msg(fd_open(m->reserve_fd), "the reserve fd %d was not taken back", m->reserve_fd);
    ck_assert_uint_eq(pm_test_mesh_unauth(m), 0);

    /* 2: the reserve moved to fd 0, its old number filled again. */
    int r = m->reserve_fd;
    ck_assert_int_eq(dup2(r, 0), 0);
    close(r);
    ck_assert_int_eq(fill_fds(fill + nfill, 1), 1);
    nfill++;
    m->reserve_fd = 0;
    nofds = pm__mesh_fails(m, PM__PF_NO_FDS);
    ck_assert_int_eq(connect(cl[1], (struct sockaddr *)&sa, sizeof(sa)), 0);
    PM_RUN_UNTIL(c, closed_by_peer(cl[1]), 20000);
    ck_assert_uint_ge(pm__mesh_fails(m, PM__PF_NO_FDS), nofds + 1);
    ck_assert_int_eq(m->reserve_fd, 0);
    ck_assert(fd_open(0));
    pm__mesh_reserve_fd_reopen(m);
    ck_assert_int_eq(m->reserve_fd, 0);

    /* 3: no reserve, its fd 0 filled again. */
    close(0);
    m->reserve_fd = -1;
    ck_assert_int_eq(fill_fds(fill + nfill, 1), 1);
    nfill++;
    nofds = pm__mesh_fails(m, PM__PF_NO_FDS);
    ck_assert_int_eq(connect(cl[2], (struct sockaddr *)&sa, sizeof(sa)), 0);
    PM_RUN_UNTIL(c, pm__mesh_fails(m, PM__PF_NO_FDS) >= nofds + 1, 20000);
    ck_assert(!closed_by_peer(cl[2]));
    ck_assert_uint_eq(pm_test_mesh_unauth(m), 0);
    close(fill[--nfill]);
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(m) == 1, 20000);
    ck_assert(!closed_by_peer(cl[2]));

    while (nfill > 0)
        close(fill[--nfill]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl0), 0);
    for (int i = 0; i < 3; i++)
        close(cl[i]);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_unauth_cap_fd0)
{
    /* The bound of PM__MESH_UNAUTH_MAX unauthenticated connections counts
     * one held on fd 0 (a supervisor started without stdin) like any
     * other: one connection past the bound cuts the oldest, and the count
     * stays at the bound. */
    pm_cluster *c = start_a(60000);
    int fds[PM__MESH_UNAUTH_MAX + 1];
    /* The test's own sockets made first, so that fd 0, freed after them,
     * is the one the supervisor's first accept takes. */
    for (unsigned i = 0; i <= PM__MESH_UNAUTH_MAX; i++) {
        fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        ck_assert_int_gt(fds[i], 0);
    }
    close(0);
    struct sockaddr_in sa = loopback_at(the_port);
    for (unsigned i = 0; i < PM__MESH_UNAUTH_MAX; i++) {
        ck_assert_int_eq(connect(fds[i], (struct sockaddr *)&sa, sizeof(sa)), 0);
        PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == i + 1, 20000);
    }
    ck_assert_int_eq(fcntl(0, F_GETFD), FD_CLOEXEC); /* the supervisor's end of the first */
    uint64_t local0 = pm__mesh_fails(c->mesh, PM__PF_LOCAL);
    unsigned refused0 = refused_events;
    uint64_t lingered0 = c->mesh->lingered;
    ck_assert_int_eq(connect(fds[PM__MESH_UNAUTH_MAX], (struct sockaddr *)&sa, sizeof(sa)), 0);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, PM__PF_LOCAL) == local0 + 1, 20000);
    ck_assert_uint_eq(refused_events, refused0); /* cut by us: no refusal of the peer's */
    /* Cut before any transport: no CLOSE could be sent, so it has none
     * to wait for an answer to (doc/protocol.md 7): closed, not lingering. */
    ck_assert_uint_eq(c->mesh->lingered, lingered0);
    PM_RUN_UNTIL(c, closed_by_peer(fds[0]), 20000); /* the oldest, its end on fd 0 */
    ck_assert_int_eq(fcntl(0, F_GETFD), -1);
    ck_assert_uint_eq(pm_test_mesh_unauth(c->mesh), PM__MESH_UNAUTH_MAX);
    for (unsigned i = 0; i <= PM__MESH_UNAUTH_MAX; i++)
        close(fds[i]);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_unauth_cap_cuts_oldest)
{
    /* The connection the bound cuts is the oldest by its age, not the
     * first of the table: the first slot freed and taken again by a newer
     * connection, one more past the bound cuts the second, older one. */
    pm_cluster *c = start_a(60000);
    ck_assert_int_eq(c->mesh->lfd_armed, 1); /* watched from the start, before any connection */
    int fds[PM__MESH_UNAUTH_MAX + 2];
    for (unsigned i = 0; i < PM__MESH_UNAUTH_MAX; i++) {
        fds[i] = raw_connect(the_port);
        PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == i + 1, 20000);
    }
    /* The next ones a millisecond later at least: younger by the clock. */
    uint64_t t = pm__now_ms();
    while (pm__now_ms() < t + 2)
        usleep(500);
    close(fds[0]);
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == PM__MESH_UNAUTH_MAX - 1, 20000);
    fds[PM__MESH_UNAUTH_MAX] = raw_connect(the_port); /* takes the first slot */
    PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == PM__MESH_UNAUTH_MAX, 20000);
    uint64_t local0 = pm__mesh_fails(c->mesh, PM__PF_LOCAL), lingered0 = c->mesh->lingered;
    fds[PM__MESH_UNAUTH_MAX + 1] = raw_connect(the_port);
    PM_RUN_UNTIL(c, pm__mesh_fails(c->mesh, PM__PF_LOCAL) == local0 + 1, 20000);
    /* Cut before any transport: it sent no CLOSE, so it waits for no
     * answer (doc/protocol.md 7): closed at once, never lingering. */
    ck_assert_uint_eq(c->mesh->lingered, lingered0);
    PM_RUN_UNTIL(c, closed_by_peer(fds[1]), 20000);
    ck_assert(!closed_by_peer(fds[PM__MESH_UNAUTH_MAX]));
    ck_assert_uint_eq(pm_test_mesh_unauth(c->mesh), PM__MESH_UNAUTH_MAX);
    for (unsigned i = 1; i < ARRAY_LEN(fds); i++)
        close(fds[i]);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

static char listen_diag[512];

static void on_listen_diag(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c;
    (void)arg;
    if (strcmp(topic, "peer_links_failed") == 0)
        snprintf(listen_diag, sizeof(listen_diag), "%s", message);
}

START_TEST(test_listen_in_use)
{
    /* --peer-listen on an address another socket listens on: the spawn
     * fails with EADDRINUSE, says which address ("peer_links_failed"),
     * and leaves no worker behind. */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l, 0);
    struct sockaddr_in sa = loopback_at(0);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &len), 0);
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", ntohs(sa.sin_port));
    pm_options *o = pm_test_host_options("a", 1, secret1, 60000, bootstrap);
    ck_assert_int_eq(pm_options_set_peer_listen(o, addr), 0);
    ck_assert_int_eq(pm_options_set_on_diagnostic(o, on_listen_diag, NULL), 0);
    listen_diag[0] = '\0';
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EADDRINUSE);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    ck_assert_msg(strstr(listen_diag, addr) != NULL, "%s", listen_diag);
    errno = 0;
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
    close(l);
}
END_TEST

/* Accepts a connection waiting on listener l, once: 1 when one was. */
static int accepted_one(int l, int *out)
{
    if (*out < 0)
        *out = accept4(l, NULL, NULL, SOCK_NONBLOCK | SOCK_CLOEXEC);
    return *out >= 0;
}

START_TEST(test_unauth_cap_counts_no_dial)
{
    /* The bound on unauthenticated connections is on those accepted: a
     * connection this host dialled (to its peer 0, here a listener that
     * never answers) is not one of them, so PM__MESH_UNAUTH_MAX accepted
     * ones cut nothing, and the dial is left to its own deadline. */
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(l, 0);
    int port = pm_test_free_port();
    struct sockaddr_in sa = loopback_at(port);
    int one = 1;
    (void)setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one));
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 4), 0);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    pm_cluster *c = start_host("a", 60000, peer);
    int dial = -1;
    PM_RUN_UNTIL(c, accepted_one(l, &dial), 20000);
    uint64_t local0 = pm__mesh_fails(c->mesh, PM__PF_LOCAL);
    int fds[PM__MESH_UNAUTH_MAX];
    for (unsigned i = 0; i < PM__MESH_UNAUTH_MAX; i++) {
        fds[i] = raw_connect(the_port);
        PM_RUN_UNTIL(c, pm_test_mesh_unauth(c->mesh) == i + 1, 20000);
    }
    ck_assert_uint_eq(pm__mesh_fails(c->mesh, PM__PF_LOCAL), local0);
    ck_assert(!closed_by_peer(dial));
    for (unsigned i = 0; i < PM__MESH_UNAUTH_MAX; i++)
        close(fds[i]);
    close(dial);
    close(l);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_accept_errno_rows)
{
    /* mesh_accept.c's accept errors, one row an errno, each faked by a
     * seccomp filter of this process's own on the listener's accept4 (its
     * flags SOCK_NONBLOCK | SOCK_CLOEXEC; the reserve's accept4, with
     * SOCK_CLOEXEC alone, is let through): out of fds (EMFILE, and ENFILE
     * for the whole system) spends the reserve fd, so the waiting
     * connection is accepted and closed at once; out of memory (ENOBUFS,
     * ENOMEM) stalls, leaving it waiting. Each counted no_fds. */
    static const struct {
        int err, trick;
    } rows[] = {{EMFILE, 1}, {ENFILE, 1}, {ENOBUFS, 0}, {ENOMEM, 0}};
    pm_cluster *c = start_a(60000);
    pm__mesh *m = c->mesh;
    ck_assert_int_eq(pm_test_filter_call_arg(SYS_accept4, 3, SOCK_NONBLOCK | SOCK_CLOEXEC,
                                             SECCOMP_RET_ERRNO | (uint32_t)rows[_i].err),
                     0);
    uint64_t nofds = pm__mesh_fails(m, PM__PF_NO_FDS);
    int cl = raw_connect(the_port);
    if (rows[_i].trick) {
        PM_RUN_UNTIL(c, closed_by_peer(cl), 20000);
        ck_assert(fd_open(m->reserve_fd));
    } else {
        PM_RUN_UNTIL(c, pm__mesh_fails(m, PM__PF_NO_FDS) >= nofds + 1, 20000);
        ck_assert(!closed_by_peer(cl));
    }
    ck_assert_uint_ge(pm__mesh_fails(m, PM__PF_NO_FDS), nofds + 1);
    ck_assert_uint_eq(pm_test_mesh_unauth(m), 0);
    /* The listener is watched again after the turn, and the mesh knows
     * it: the flush arms it only when not (never twice), and the free
     * disarms it. */
    ck_assert_int_eq(m->lfd_armed, 1);
    close(cl);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_refused_log_pure)
{
    /* One line per address and reason per window, each carrying the
     * failures it stands for; pairs are independent; the table does not
     * grow past its size (the least recently seen pair is evicted). */
    pm__faillog t;
    memset(&t, 0, sizeof(t));
    uint64_t now = 5000, w = PM__FAILLOG_WINDOW_MS;
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now), 1);
    for (unsigned i = 1; i <= 9; i++) /* held back within the window */
        ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + i * 1000), 0);
    /* Another reason, another address: each its own line at once. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_TIMEOUT, now + 1), 1);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.2", PM__PF_KEY_ID, now + 2), 1);
    /* One ms before the window ends: still held; at its end: a line for
     * the 9 held back and this one. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + w - 1), 0);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + w), 11);
    /* The next window counts from that line. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + w + 1), 0);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + 2 * w), 2);
    /* A long quiet: the first failure after it stands for itself. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + 10 * w), 1);
    /* More pairs than entries: the pair seen least recently gives its
     * entry up, and is new again when it fails next (a line at once, where
     * a pair still held would be held back). */
    memset(&t, 0, sizeof(t));
    char a[32];
    for (unsigned i = 0; i < PM__FAILLOG_ENTRIES; i++) {
        snprintf(a, sizeof(a), "h%u", i);
        ck_assert_uint_eq(pm__faillog_note(&t, a, PM__PF_HELLO, 1 + i), 1);
    }
    ck_assert_uint_eq(pm__faillog_note(&t, "h0", PM__PF_HELLO, 100), 0); /* h1 is now the oldest */
    ck_assert_uint_eq(pm__faillog_note(&t, "new", PM__PF_HELLO, 101), 1);
    ck_assert_uint_eq(pm__faillog_note(&t, "h0", PM__PF_HELLO, 102), 0);  /* kept */
    ck_assert_uint_eq(pm__faillog_note(&t, "h1", PM__PF_HELLO, 103), 1);  /* evicted: new */
    ck_assert_uint_eq(pm__faillog_note(&t, "h0", PM__PF_HELLO, 1 + w), 3); /* held 2 + this */
}
END_TEST

START_TEST(test_refused_log_flush)
{
    /* A pair that stops failing within its window: at the window's end its
     * held-back failures get a line of their own (the caller's timer asks
     * pm__faillog_next when, and pm__faillog_due for the line), exactly
     * once; a pair with nothing held back never has a line due. */
    pm__faillog t;
    memset(&t, 0, sizeof(t));
    char addr[PM__FAILLOG_ADDR];
    int why = -1;
    uint64_t now = 5000, w = PM__FAILLOG_WINDOW_MS;
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now), 1);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.2", PM__PF_TIMEOUT, now + 10), 1);
    ck_assert_uint_eq(pm__faillog_next(&t), 0); /* nothing held back */
    ck_assert_uint_eq(pm__faillog_due(&t, now + 10 * w, addr, &why), 0);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + 1000), 0);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + 2000), 0);
    ck_assert_uint_eq(pm__faillog_next(&t), now + w);
    /* One ms early: nothing due; at the window's end: the 2 held back. */
    ck_assert_uint_eq(pm__faillog_due(&t, now + w - 1, addr, &why), 0);
    ck_assert_uint_eq(pm__faillog_due(&t, now + w, addr, &why), 2);
    ck_assert_str_eq(addr, "10.0.0.1");
    ck_assert_int_eq(why, PM__PF_KEY_ID);
    ck_assert_uint_eq(pm__faillog_due(&t, now + w, addr, &why), 0); /* once */
    ck_assert_uint_eq(pm__faillog_next(&t), 0);
    /* The flushed line starts a new window: a failure right after it is
     * held back, and due a window after the flush. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.1", PM__PF_KEY_ID, now + w + 1), 0);
    ck_assert_uint_eq(pm__faillog_next(&t), now + 2 * w);
    /* Two pairs due at once: one line each, in turn. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.4", PM__PF_TIMEOUT, now + w + 2), 1);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.4", PM__PF_TIMEOUT, now + w + 3), 0);
    uint64_t total = 0, n;
    unsigned lines = 0;
    while ((n = pm__faillog_due(&t, now + 3 * w, addr, &why)) > 0) {
        total += n;
        lines++;
    }
    ck_assert_uint_eq(lines, 2);
    ck_assert_uint_eq(total, 2);
    /* A clock that went back never holds a line back for ever. */
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.3", PM__PF_HELLO, now + 4 * w), 1);
    ck_assert_uint_eq(pm__faillog_note(&t, "10.0.0.3", PM__PF_HELLO, now + 4 * w + 1), 0);
    ck_assert_uint_eq(pm__faillog_due(&t, now, addr, &why), 1);
}
END_TEST

/* A listener on addr (an address literal), port from the kernel; its
 * port in *port. */
static int listen_on(const char *addr, int *port)
{
    struct sockaddr_storage ss;
    memset(&ss, 0, sizeof(ss));
    socklen_t len;
    int v6 = strchr(addr, ':') != NULL;
    if (v6) {
        struct sockaddr_in6 *a = (struct sockaddr_in6 *)&ss;
        a->sin6_family = AF_INET6;
        ck_assert_int_eq(inet_pton(AF_INET6, addr, &a->sin6_addr), 1);
        len = sizeof(*a);
    } else {
        struct sockaddr_in *a = (struct sockaddr_in *)&ss;
        a->sin_family = AF_INET;
        ck_assert_int_eq(inet_pton(AF_INET, addr, &a->sin_addr), 1);
        len = sizeof(*a);
    }
    int fd = socket(ss.ss_family, SOCK_STREAM | SOCK_CLOEXEC | SOCK_NONBLOCK, 0);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&ss, len), 0);
    ck_assert_int_eq(listen(fd, 8), 0);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&ss, &len), 0);
    *port = ntohs(v6 ? ((struct sockaddr_in6 *)&ss)->sin6_port : ((struct sockaddr_in *)&ss)->sin_port);
    return fd;
}

/* Accepts what waits on lfd and resets it at once (SO_LINGER 0: close
 * sends RST, whatever was read): how many. */
static unsigned accept_reset(int lfd)
{
    unsigned n = 0;
    int fd;
    while ((fd = accept4(lfd, NULL, NULL, SOCK_CLOEXEC)) >= 0) {
        struct linger lg = {.l_onoff = 1, .l_linger = 0};
        ck_assert_int_eq(setsockopt(fd, SOL_SOCKET, SO_LINGER, &lg, sizeof(lg)), 0);
        close(fd);
        n++;
    }
    return n;
}

START_TEST(test_refused_dialled_address)
{
    /* A dialled peer that refuses us (here it resets every connection at
     * once, during the handshake: then the kernel has no peer name left to
     * give) is named in PEER_REFUSED by the address and port we dialled,
     * in the text --peers takes: "a.b.c.d:P", "[v6]:P". An accepted one is
     * named by its source address alone (test_refused_log_flushed). One
     * row per family; the IPv6 row is skipped, said on stderr, without an
     * IPv6 loopback. The peer timeout is long: the handshake ends by the
     * reset, never by its deadline. */
    static const char *const rows[] = {"127.0.0.1", "::1"};
    for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        int v6 = strchr(rows[i], ':') != NULL;
        if (v6 && !have_ipv6_loopback()) {
            fprintf(stderr, "test_refused_dialled_address: no IPv6 loopback: row %s skipped\n", rows[i]);
            continue;
        }
        int port = 0;
        int l = listen_on(rows[i], &port);
        char peer[64];
        snprintf(peer, sizeof(peer), v6 ? "[%s]:%d" : "%s:%d", rows[i], port);
        refused_events = 0;
        refused_address[0] = '\0';
        pm_cluster *c = start_host("a", 60000, peer);
        unsigned accepted = 0;
        PM_RUN_UNTIL(c, (accepted += accept_reset(l)) > 0 && refused_events > 0, 20000);
        ck_assert_str_eq(refused_reason, pm__peer_fail_name(PM__PF_TRUNCATED));
        ck_assert_msg(strcmp(refused_address, peer) == 0, "row %s: the event names '%s', not '%s'",
                      rows[i], refused_address, peer);
        ck_assert_str_eq(refused_host, "(none)");
        ck_assert_int_ge(pm_cluster_terminate(c), 0);
        close(l);
    }
}
END_TEST

START_TEST(test_refused_address_v4_mapped)
{
    /* On a dual-stack listener ([::]) an IPv4 peer arrives v4-mapped
     * (::ffff:127.0.0.1); PEER_REFUSED names it as the IPv4 host it is,
     * "127.0.0.1", as on an IPv4 listener and as the rate limit counts
     * it. Without a dual-stack IPv6 loopback: an IPv4 listener only (said
     * on stderr), as test_rate_limit_sources does. */
    (void)listen_dual_stack("test_refused_address_v4_mapped");
    pm_cluster *c = start_a(2000);
    attack(c, "wrong-key", PM__PF_HS_DECRYPT);
    ck_assert_uint_eq(refused_events, 1);
    ck_assert_str_eq(refused_address, "127.0.0.1");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_refused_log_flushed)
{
    /* The mesh's timers report what faillog held back: a peer refused
     * twice (a wrong secret, from one address) gets one event at once
     * (count 1); its second failure is held; when the window ends with no
     * third, the mesh's next deadline is due by then, and firing it
     * reports the held failure (count 1), once. The time is passed to
     * pm__mesh_fire, so no test waits the 60 s. */
    pm_cluster *c = start_a(2000);
    attack(c, "wrong-key", PM__PF_HS_DECRYPT);
    ck_assert_uint_eq(refused_events, 1);
    ck_assert_uint_eq(refused_count, 1);
    /* Refused before the peer's hello: no host to name (never an empty
     * one). */
    ck_assert_str_eq(refused_host, "(none)");
    uint64_t t0 = pm_test_ms();
    attack(c, "wrong-key", PM__PF_HS_DECRYPT);
    ck_assert_uint_eq(refused_events, 1); /* held back */
    uint64_t next = pm__mesh_next_deadline(c->mesh);
    ck_assert_uint_ne(next, 0);
    ck_assert_uint_le(next, t0 + PM__FAILLOG_WINDOW_MS);
    pm__mesh_fire(c->mesh, pm_test_ms() + PM__FAILLOG_WINDOW_MS);
    ck_assert_uint_eq(refused_events, 2);
    ck_assert_uint_eq(refused_count, 1);
    ck_assert_str_eq(refused_reason, pm__peer_fail_name(PM__PF_HS_DECRYPT));
    ck_assert_str_eq(refused_address, "127.0.0.1");
    ck_assert_str_eq(refused_host, "(none)"); /* a flushed line names none */
    pm__mesh_fire(c->mesh, pm_test_ms() + PM__FAILLOG_WINDOW_MS);
    ck_assert_uint_eq(refused_events, 2);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* This process's resident set (kB). */
static unsigned long rss_kb(void)
{
    FILE *f = fopen("/proc/self/status", "r");
    ck_assert_ptr_nonnull(f);
    char line[256];
    unsigned long kb = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (sscanf(line, "VmRSS: %lu", &kb) == 1)
            break;
    fclose(f);
    return kb;
}

static unsigned max_fds;
static unsigned long max_rss;

static int sample(void)
{
    unsigned n = pm_test_count_fds();
    unsigned long r = rss_kb();
    if (n > max_fds)
        max_fds = n;
    if (r > max_rss)
        max_rss = r;
    return 1;
}

/* 1000 TCP connections to port from 127.0.0.2, in batches as this process's
 * fd limit allows; each sends the first bytes of a preamble and is held
 * open until its batch is done. Exits 0, or 3 when it could not open its
 * sockets. */
static void flood(int port)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) == 0 && rl.rlim_cur < 1100 && rl.rlim_max > rl.rlim_cur) {
        rl.rlim_cur = rl.rlim_max < 1100 ? rl.rlim_max : 1100;
        (void)setrlimit(RLIMIT_NOFILE, &rl);
    }
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0 || rl.rlim_cur < 64)
        _exit(3);
    unsigned batch = rl.rlim_cur - 32 < 500 ? (unsigned)rl.rlim_cur - 32 : 500;
    static int fds[500];
    struct sockaddr_in to, from;
    memset(&to, 0, sizeof(to));
    to.sin_family = AF_INET;
    to.sin_port = htons((uint16_t)port);
    to.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    from = to;
    from.sin_port = 0;
    from.sin_addr.s_addr = htonl(0x7f000002); /* 127.0.0.2: not the real peer's source */
    for (unsigned done = 0; done < 1000;) {
        unsigned n = 1000 - done < batch ? 1000 - done : batch;
        for (unsigned i = 0; i < n; i++) {
            fds[i] = socket(AF_INET, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0);
            if (fds[i] < 0 || bind(fds[i], (struct sockaddr *)&from, sizeof(from)) < 0)
                _exit(3);
            (void)connect(fds[i], (struct sockaddr *)&to, sizeof(to));
        }
        /* Each connected one says "PMLINK" and stays, for up to 2 s. */
        for (unsigned i = 0; i < n; i++) {
            struct pollfd pf = {.fd = fds[i], .events = POLLOUT};
            if (poll(&pf, 1, 2000 / (int)n + 1) == 1)
                (void)send(fds[i], "PMLINK", 6, MSG_NOSIGNAL | MSG_DONTWAIT);
        }
        for (unsigned i = 0; i < n; i++)
            close(fds[i]);
        done += n;
    }
    _exit(0);
}

/* A legitimate host b dialling port, until the test ends. */
static pid_t legit_b(int port)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0)
        return pid;
    pm_test_serve_host(pm_test_host_options("b", 1, secret1, 3000, pm_test_idle_worker), 0, port);
}

START_TEST(test_flood_1000)
{
    /* 1,000 connections against a's peer port while b links and a's worker
     * keeps asking a: a stays within its fd and memory bounds, b's link
     * comes up and stays up, nothing crashes. */
    pm_cluster *c = start_a(3000);
    unsigned base_fds = pm_test_count_fds();
    unsigned long base_rss = rss_kb();
    max_fds = base_fds;
    max_rss = base_rss;
    unsigned pongs0 = pongs;
    pid_t fl = pm_test_fork();
    ck_assert_int_ge(fl, 0);
    if (fl == 0)
        flood(the_port);
    pid_t b = legit_b(the_port);
    int status = 0;
    PM_RUN_UNTIL(c, sample() && exited(fl, &status), 120000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "the flood process: 0x%x", status);
    PM_RUN_UNTIL(c, sample() && peer_events.ups >= 1 && pm_test_mesh_links_up(c->mesh) == 1, 60000);
    ck_assert_uint_eq(peer_events.ups, 1); /* up once, and it stayed up */
    ck_assert_uint_ge(pm__mesh_fails(c->mesh, PM__PF_RATE), 1);
    ck_assert_uint_gt(pongs, pongs0);
    /* Bounds: a connection table of PM__MESH_CONNS (and the reserve fd); the
     * memory of that many handshaking connections. */
    ck_assert_msg(max_fds <= base_fds + PM__MESH_CONNS + 2, "fds went from %u to %u", base_fds,
                  max_fds);
    unsigned long bound_kb = PM__MESH_CONNS * (PM__PCONN_OUT_CAP + PM__REC_MAX_CT) / 1024 + 16384;
    ck_assert_msg(max_rss <= base_rss + bound_kb, "RSS went from %lu kB to %lu kB (bound +%lu)",
                  base_rss, max_rss, bound_kb);
    /* The flood's connections are all gone again. */
    PM_RUN_UNTIL(c, (unsigned)pm_test_count_fds() <= base_fds + 1, 20000);
    kill(b, SIGKILL);
    pm_test_reap(b, 5000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

/* Host b of the fd test: a supervisor with a low fd limit in its own
 * process, told what to do over cmd and answering over ack: 'f' fills
 * every free fd ('F'), 'r' frees them ('R'), 'p' sends its count of
 * answered requests (4 bytes). 'S' once it runs. */
static void fd_host(int port, int cmd, int ack)
{
    struct rlimit rl;
    if (getrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(3);
    rl.rlim_cur = 128;
    if (setrlimit(RLIMIT_NOFILE, &rl) != 0)
        _exit(3);
    pm_options *o = pm_test_host_options("b", 1, secret1, 2000, pinger);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    pm_cluster *c = NULL;
    if (pm_options_set_on_message(o, on_main, NULL) < 0 || pm_options_set_peer_listen(o, listen) < 0 ||
        pm_cluster_spawn(o, &c) < 0)
        _exit(3);
    (void)fcntl(cmd, F_SETFL, O_NONBLOCK);
    if (write(ack, "S", 1) != 1)
        _exit(3);
    static int fill[128];
    unsigned nfill = 0;
    for (;;) {
        pm_cluster_run(c, 10);
        char k;
        if (read(cmd, &k, 1) != 1)
            continue;
        if (k == 'f') {
            int fd;
            while (nfill < 128 && (fd = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
                fill[nfill++] = fd;
            if (write(ack, "F", 1) != 1)
                _exit(3);
        } else if (k == 'r') {
            while (nfill > 0)
                close(fill[--nfill]);
            if (write(ack, "R", 1) != 1)
                _exit(3);
        } else if (k == 'p') {
            uint32_t n = pongs;
            if (write(ack, &n, sizeof(n)) != (ssize_t)sizeof(n))
                _exit(3);
        }
    }
}

/* Sends cmd to the fd host and reads its n-byte answer into out, running
 * cluster c meanwhile. */
static int ack_fd = -1, cmd_fd = -1;
static unsigned char answer[4];
static size_t answered;

static int got_answer(size_t n)
{
    ssize_t r = read(ack_fd, answer + answered, n - answered);
    if (r > 0)
        answered += (size_t)r;
    return answered == n;
}

static void ask(pm_cluster *c, char cmd, size_t n)
{
    answered = 0;
    ck_assert_int_eq(write(cmd_fd, &cmd, 1), 1);
    if (c != NULL) {
        PM_RUN_UNTIL(c, got_answer(n), 20000);
        return;
    }
    uint64_t end = pm_test_ms() + 20000;
    while (!got_answer(n) && pm_test_ms() < end)
        usleep(10 * 1000);
    ck_assert_msg(answered == n, "host b did not answer '%c'", cmd);
}

static uint32_t b_pongs(pm_cluster *c)
{
    ask(c, 'p', 4);
    uint32_t n;
    memcpy(&n, answer, 4);
    return n;
}

/* CPU time (ms) pid has used. */
static uint64_t cpu_ms(pid_t pid)
{
    char path[64], buf[1024];
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    int fd = open(path, O_RDONLY | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    ssize_t n = read(fd, buf, sizeof(buf) - 1);
    close(fd);
    ck_assert_int_gt(n, 0);
    buf[n] = '\0';
    const char *p = strrchr(buf, ')');
    unsigned long long ut = 0, st = 0;
    ck_assert_int_eq(sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %llu %llu", &ut, &st), 2);
    return (ut + st) * 1000u / (uint64_t)sysconf(_SC_CLK_TCK);
}

START_TEST(test_accept_out_of_fds)
{
    /* b runs out of fds: a's dials are accepted and closed at once (counted
     * no_fds; b neither spins nor leaves them hanging), b keeps serving its
     * worker; fds freed, a's next dial links. */
    int port = pm_test_free_port();
    int p2c[2], c2p[2];
    ck_assert_int_eq(pipe2(p2c, O_CLOEXEC), 0);
    ck_assert_int_eq(pipe2(c2p, O_CLOEXEC | O_NONBLOCK), 0);
    pid_t b = pm_test_fork();
    ck_assert_int_ge(b, 0);
    if (b == 0) {
        close(p2c[1]);
        close(c2p[0]);
        fd_host(port, p2c[0], c2p[1]);
    }
    close(p2c[0]);
    close(c2p[1]);
    cmd_fd = p2c[1];
    ack_fd = c2p[0];
    answered = 0;
    uint64_t end = pm_test_ms() + 20000;
    while (!got_answer(1) && pm_test_ms() < end)
        usleep(10 * 1000);
    ck_assert_msg(answered == 1 && answer[0] == 'S', "host b did not start");

    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    ask(NULL, 'f', 1);
    ck_assert_int_eq(answer[0], 'F');
    pm_cluster *a = start_host("a", 2000, peer);
    uint32_t served0 = b_pongs(a);
    uint64_t t0 = pm_test_ms(), cpu0 = cpu_ms(b);
    uint64_t fails0 = pm__mesh_fails(a->mesh, PM__PF_TRUNCATED);
    PM_RUN_UNTIL(a, pm__mesh_fails(a->mesh, PM__PF_TRUNCATED) >= fails0 + 3, 30000);
    uint64_t wall = pm_test_ms() - t0, cpu = cpu_ms(b) - cpu0;
    ck_assert_uint_eq(peer_events.ups, 0);
    /* Not a busy loop: a spinning b would use all the CPU it is given. */
    ck_assert_msg(cpu * 2 < wall + 200, "b used %llu ms of CPU in %llu ms out of fds",
                  (unsigned long long)cpu, (unsigned long long)wall);
    uint32_t served1 = b_pongs(a);
    ck_assert_msg(served1 > served0, "b stopped serving its worker while out of fds");
    ask(a, 'r', 1);
    ck_assert_int_eq(answer[0], 'R');
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(a->mesh) == 1, 30000);
    ck_assert_uint_gt(b_pongs(a), served1);
    pm_test_end_hosts(a, b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostnet");
    PM_ADD_TEST(s, test_handshake_attacks, 180);
    PM_ADD_TEST(s, test_record_attacks, 120);
    PM_ADD_TEST(s, test_forged_host_dropped, 60);
    PM_ADD_TEST(s, test_worker_forged_host, 60);
    PM_ADD_TEST(s, test_forged_notices_dropped, 60);
    PM_ADD_TEST(s, test_rate_limit_pure, 10);
    PM_ADD_TEST(s, test_rate_key_rows, 10);
    PM_ADD_TEST(s, test_rate_limit_sources, 120);
    PM_ADD_TEST(s, test_reserve_fd_rows, 120);
    PM_ADD_LOOP_TEST(s, test_accept_errno_rows, 0, 4, 60);
    PM_ADD_TEST(s, test_unauth_cap_fd0, 60);
    PM_ADD_TEST(s, test_unauth_cap_cuts_oldest, 60);
    PM_ADD_TEST(s, test_listen_in_use, 30);
    PM_ADD_TEST(s, test_unauth_cap_counts_no_dial, 60);
    PM_ADD_TEST(s, test_refused_log_pure, 10);
    PM_ADD_TEST(s, test_refused_log_flush, 10);
    PM_ADD_TEST(s, test_refused_log_flushed, 120);
    PM_ADD_TEST(s, test_refused_dialled_address, 120);
    PM_ADD_TEST(s, test_refused_address_v4_mapped, 60);
    PM_ADD_TEST(s, test_record_errors_close_one, 120);
    PM_ADD_TEST(s, test_bytes_after_close_ignored, 60);
    PM_ADD_TEST(s, test_first_record_frames_delivered, 60);
    PM_ADD_TEST(s, test_two_links_one_initiator, 120);
    PM_ADD_TEST(s, test_terminate_waits_for_close_answer, 120);
    PM_ADD_TEST(s, test_terminate_linger_bound, 120);
    PM_ADD_TEST(s, test_linger_ends_at_end_of_stream, 240);
    PM_ADD_TEST(s, test_linger_ends_at_close_answer, 120);
    PM_ADD_TEST(s, test_linger_counts_frames_after_close, 240);
    PM_ADD_TEST(s, test_linger_writes_its_queue_out, 240);
    PM_ADD_TEST(s, test_lingering_link_is_no_link, 240);
    PM_ADD_TEST(s, test_linger_after_reset, 120);
    PM_ADD_TEST(s, test_no_frag_reply_refused, 120);
    PM_ADD_TEST(s, test_flood_1000, 240);
    PM_ADD_TEST(s, test_accept_out_of_fds, 120);
    PM_ADD_TEST(s, test_silent_peer_close_three, 60);
    PM_ADD_TEST(s, test_hello_version_min, 60);
    PM_ADD_LOOP_TEST(s, test_window_exact, 0, 2, 120);
    PM_ADD_TEST(s, test_credit_exact, 120);
    PM_ADD_TEST(s, test_connections_bound, 180);
    return pm_test_main(s);
}
