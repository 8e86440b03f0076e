/* SPDX-License-Identifier: MIT */
/* check_peerops.c - running a mesh: peers from DNS, secrets swapped on a live cluster, periodic REKEY under traffic (real supervisors on 127.0.0.1). */
#include <check.h>

#include "helpers.h"

#include <arpa/inet.h>
#include <netinet/in.h>
#include <stdio.h>
#include <string.h>
#include <sys/socket.h>

#include "internals.h"
#include "mesh.h"
#include "peer.h"
#include "procmesh.h"

/*
 * Host b runs in a forked process (pm_test_fork: it dies with the test),
 * host a in the test process, as in check_link.c. Names resolve without
 * any DNS server: "localhost" is 127.0.0.1 through /etc/hosts or glibc's
 * own rule, and a name under ".invalid" never resolves (RFC 6761).
 */

static const unsigned char k1[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                     17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const unsigned char k2[32] __attribute__((unused)) = {7, 7, 7, 7, 7};
static const unsigned char k3[32] __attribute__((unused)) = {9, 9, 9};

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

/* A worker that answers every request with its payload, until shutdown. */
static int echo_worker(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc == 0 && m.kind == PM_MSG_REQUEST)
            pm_node_reply(n, &m, m.data, m.len);
    }
}

static pm_options *host_options(const char *host, const unsigned char *secret)
{
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, 1), 0);
    ck_assert_int_eq(pm_options_set_system_name(o, "t"), 0);
    ck_assert_int_eq(pm_options_set_hostname(o, host), 0);
    ck_assert_int_eq(pm_options_set_base_port(o, 10), 0);
    if (secret != NULL)
        ck_assert_int_eq(pm_options_add_secret(o, secret), 0);
    ck_assert_int_eq(pm_options_set_peer_timeout_ms(o, 3000), 0);
    ck_assert_int_eq(pm_options_set_bootstrap(o, echo_worker, NULL), 0);
    return o;
}

static unsigned peer_ups, peer_downs;

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_PEER_UP)
        peer_ups++;
    if (e->type == PM_EVENT_PEER_DOWN)
        peer_downs++;
}

/* Host b, listening on 127.0.0.1:port, until the test ends. With dns, b
 * also has --peers-dns localhost:port, as every pod of a StatefulSet names
 * the Service it is part of: it finds its own address there. */
static pid_t start_b(int port, const unsigned char *s1, const unsigned char *s2, int dns)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0)
        return pid;
    pm_options *o = host_options("b", s1);
    if (s2 != NULL && pm_options_add_secret(o, s2) < 0)
        _exit(3);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    if (pm_options_set_peer_listen(o, listen) < 0)
        _exit(3);
    char name[40];
    snprintf(name, sizeof(name), "localhost:%d", port);
    if (dns && pm_options_set_peers_dns(o, name) < 0)
        _exit(3);
    pm_cluster *c = NULL;
    if (pm_cluster_spawn(o, &c) < 0)
        _exit(3);
    for (;;)
        pm_cluster_run(c, -1);
}

/* Host a: one worker; peers_dns or a static peer as given. */
static pm_cluster *start_a(const char *dns, const char *peer, const unsigned char *secret)
{
    pm_options *o = host_options("a", secret);
    if (dns != NULL)
        ck_assert_int_eq(pm_options_set_peers_dns(o, dns), 0);
    if (peer != NULL)
        ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_event, NULL), 0);
    peer_ups = peer_downs = 0;
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    return c;
}

START_TEST(test_dns_links)
{
    /* a knows b only as "localhost:PORT": it resolves the name off the loop,
     * dials the address and links; requests flow. */
    int port = free_port();
    pid_t b = start_b(port, k1, NULL, 0);
    char name[40];
    snprintf(name, sizeof(name), "localhost:%d", port);
    pm_cluster *a = start_a(name, NULL, k1);
    PM_RUN_UNTIL(a, peer_ups == 1 && pm__mesh_links_up(a) == 1, 20000);
    uint64_t ok, failed;
    unsigned targets;
    pm__mesh_dns_stats(a, &ok, &failed, &targets);
    ck_assert_uint_ge(ok, 1);
    ck_assert_uint_ge(targets, 1);
    kill(b, SIGKILL);
    pm_test_reap(b, 5000);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

START_TEST(test_dns_self_skipped)
{
    /* A supervisor whose --peers-dns name holds its own address (a pod of
     * the StatefulSet) dials itself once, learns from the hello that it is
     * itself, and never dials that address again. */
    int port = free_port();
    char listen[32], name[40];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    snprintf(name, sizeof(name), "localhost:%d", port);
    pm_options *o = host_options("a", k1);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    ck_assert_int_eq(pm_options_set_peers_dns(o, name), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_event, NULL), 0);
    peer_ups = 0;
    pm_cluster *a = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &a), 0);
    pm_options_free(o);
    PM_RUN_UNTIL(a, pm__mesh_fails(a, PM__PF_SELF) >= 1, 20000);
    uint64_t ok, failed;
    unsigned targets;
    PM_RUN_UNTIL(a, (pm__mesh_dns_stats(a, &ok, &failed, &targets), targets == 0) &&
                        pm__mesh_fails(a, PM__PF_SELF) >= 1, 20000);
    /* Both ends of the connection to itself counted it: the dialling one
     * and the accepting one. Past three redial backoffs there is no more. */
    uint64_t self = pm__mesh_fails(a, PM__PF_SELF);
    uint64_t until = pm_test_ms() + 3 * PM__MESH_REDIAL_MIN_MS * 4;
    PM_RUN_UNTIL(a, pm_test_ms() >= until, 10000);
    ck_assert_uint_le(pm__mesh_fails(a, PM__PF_SELF), self + 1);
    ck_assert_uint_eq(peer_ups, 0);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

START_TEST(test_dns_unresolvable_retried)
{
    /* A name that does not resolve: the supervisor starts and serves its
     * workers, the resolution is retried with backoff and each failure is
     * counted. */
    pm_cluster *a = start_a("no-such-host.invalid:7946", NULL, k1);
    PM_RUN_UNTIL(a, ({
                     uint64_t ok, failed;
                     unsigned targets;
                     pm__mesh_dns_stats(a, &ok, &failed, &targets);
                     failed >= 2;
                 }),
                 30000);
    pm_address w;
    ck_assert_int_eq(pm_address_parse("t@a:10", &w), 0);
    char got[16];
    size_t n = 0;
    int rc = pm_cluster_call(a, &w, "local", 5, 10000, got, sizeof(got), &n);
    ck_assert_msg(rc == 0 && n == 5, "a local request while DNS fails: %s", pm_strerror(rc));
    uint64_t ok, failed;
    unsigned targets;
    pm__mesh_dns_stats(a, &ok, &failed, &targets);
    ck_assert_uint_eq(ok, 0);
    ck_assert_uint_eq(targets, 0);
    ck_assert_uint_eq(pm__mesh_links_up(a), 0);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peerops");
    PM_ADD_TEST(s, test_dns_links, 60);
    PM_ADD_TEST(s, test_dns_self_skipped, 60);
    PM_ADD_TEST(s, test_dns_unresolvable_retried, 60);
    return pm_test_main(s);
}
