/* SPDX-License-Identifier: MIT */
/* check_hostnet.c - what a hostile network gets: every attack of tests/pm-bad-peer against a supervisor with a working worker, each closed and counted by reason while local traffic flows. */
#include <check.h>

#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>
#include <sys/wait.h>

#include "internals.h"
#include "mesh.h"
#include "peer.h"
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

static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(fd, 0);
    struct sockaddr_in sa;
    memset(&sa, 0, sizeof(sa));
    sa.sin_family = AF_INET;
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(fd, (struct sockaddr *)&sa, sizeof(sa)), 0);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(getsockname(fd, (struct sockaddr *)&sa, &len), 0);
    close(fd);
    return ntohs(sa.sin_port);
}

/* Requests main answered, and frames that should never have arrived. */
static unsigned pongs;
static unsigned forged_delivered;
static unsigned peer_ups;

static void on_main(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)arg;
    if (m->len == 6 && memcmp(m->data, "forged", 6) == 0) {
        forged_delivered++;
        return;
    }
    if (m->kind == PM_MSG_REQUEST && pm_cluster_reply(c, m, "pong", 4) == 0)
        pongs++;
}

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_PEER_UP)
        peer_ups++;
}

/* The worker: ping main, a few ms apart, until asked to stop. */
static int pinger(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address main_a;
    if (pm_address_parse("t@a:0", &main_a) != 0)
        return 1;
    for (;;) {
        pm_message r;
        int rc = pm_node_request(n, &main_a, "ping", 4, 5000, &r);
        if (rc == -ESHUTDOWN)
            return 0;
        /* Paced: the traffic only has to keep flowing, not load the
         * machine the attacks share. */
        usleep(5 * 1000);
    }
}

static int the_port;

static pm_cluster *start_a(int peer_timeout_ms)
{
    the_port = free_port();
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, 1), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, "a"), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    ck_assert_int_eq(pm_options_add_secret(o, secret1), 0);
    ck_assert_int_eq(pm_options_set_peer_timeout_ms(o, peer_timeout_ms), 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, pinger, NULL), 0);
    ck_assert_int_eq(pm_options_set_on_message(o, on_main, NULL), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_event, NULL), 0);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", the_port);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    PM_RUN_UNTIL(c, pongs >= 3, 20000);
    return c;
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
 * the worker's requests while it lasted. */
static void attack(pm_cluster *c, const char *name, int why)
{
    uint64_t before = pm__mesh_fails(c, why);
    unsigned pongs0 = pongs;
    pid_t pid = bad_peer(name, "x");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0,
                  "pm-bad-peer %s: exit status 0x%x (1: not closed, 3: setup)", name, status);
    PM_RUN_UNTIL(c, pm__mesh_fails(c, why) > before, 10000);
    PM_RUN_UNTIL(c, pongs > pongs0 + 2, 10000);
    PM_RUN_UNTIL(c, pm__mesh_links_up(c) == 0, 10000);
}

START_TEST(test_handshake_attacks)
{
    pm_cluster *c = start_a(2000);
    attack(c, "wrong-key", PM__PF_HS_DECRYPT);
    attack(c, "unknown-key-id", PM__PF_KEY_ID);
    attack(c, "bad-magic", PM__PF_PREAMBLE);
    attack(c, "other-system", PM__PF_SYSTEM);
    attack(c, "tamper-prologue", PM__PF_HS_DECRYPT);
    attack(c, "reflect", PM__PF_HS_DECRYPT);
    unsigned ups = peer_ups;
    /* The replays first make a real link (their capture), then fail. */
    attack(c, "replay-msg3", PM__PF_HS_DECRYPT);
    ck_assert_uint_eq(peer_ups, ups + 1);
    /* XX cannot tell a replayed message 1 from a new one: it simply never
     * completes and dies at the handshake deadline. */
    attack(c, "replay-msg1", PM__PF_TIMEOUT);
    ck_assert_uint_eq(peer_ups, ups + 2);
    attack(c, "slow-handshake", PM__PF_TIMEOUT);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_record_attacks)
{
    pm_cluster *c = start_a(2000);
    unsigned ups = peer_ups;
    /* Each after a real handshake (the attacker holds the secret): the
     * link is up, then broken. */
    attack(c, "truncated", PM__PF_TRUNCATED);
    attack(c, "reordered", PM__PF_RECORD);
    attack(c, "duplicated", PM__PF_RECORD);
    attack(c, "bitflip", PM__PF_RECORD);
    attack(c, "oversize", PM__PF_RECORD);
    ck_assert_uint_eq(peer_ups, ups + 5);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

START_TEST(test_forged_host_dropped)
{
    /* A peer authenticated as b sends a frame claiming host c: dropped and
     * counted on b's link, never delivered; b's own CLOSE ends the link. */
    pm_cluster *c = start_a(2000);
    uint64_t closed0 = pm__mesh_fails(c, PM__PF_CLOSED);
    pid_t pid = bad_peer("forged-host", "b");
    int status = 0;
    PM_RUN_UNTIL(c, exited(pid, &status), 60000);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "pm-bad-peer forged-host: 0x%x",
                  status);
    PM_RUN_UNTIL(c, pm__mesh_links_up(c) == 0 && peer_ups == 1, 10000);
    PM_RUN_UNTIL(c, pm__mesh_fails(c, PM__PF_CLOSED) > closed0, 10000);
    int b = pm__hub_host_index(&c->hub, "b");
    ck_assert_int_ge(b, 1);
    ck_assert_uint_eq(pm_test_link_forged(&c->hub, (unsigned)b), 1);
    ck_assert_uint_eq(forged_delivered, 0);
    unsigned pongs0 = pongs;
    PM_RUN_UNTIL(c, pongs > pongs0 + 2, 10000);
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("hostnet");
    PM_ADD_TEST(s, test_handshake_attacks, 180);
    PM_ADD_TEST(s, test_record_attacks, 120);
    PM_ADD_TEST(s, test_forged_host_dropped, 60);
    return pm_test_main(s);
}
