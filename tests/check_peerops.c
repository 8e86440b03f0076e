/* SPDX-License-Identifier: MIT */
/* check_peerops.c - running a mesh: peers from DNS, secrets swapped on a live cluster, periodic REKEY under traffic (real supervisors on 127.0.0.1). */
#define _GNU_SOURCE
#include <check.h>

#include "helpers.h"
#include "proclog.h"

#include <arpa/inet.h>
#include <dirent.h>
#include <fcntl.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/ioctl.h>
#include <sys/prctl.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/timerfd.h>
#include <sys/wait.h>
#include <unistd.h>

#include "internals.h"
#include "mesh/mesh.h"
#include "supervisor/options.h"
#include "peer/peer.h"
#include "peer/peerkeys.h"
#include "peer/secretmem.h"
#include "procmesh.h"

/*
 * Host b runs in a forked process (pm_test_fork: it dies with the test),
 * host a in the test process, as in check_link.c. Names resolve without
 * any DNS server: "localhost" is 127.0.0.1 through /etc/hosts or glibc's
 * own rule, and a name under ".invalid" never resolves (RFC 6761).
 */

static const unsigned char k1[32] = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16,
                                     17, 18, 19, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29, 30, 31, 32};
static const unsigned char k2[32] = {7, 7, 7, 7, 7};
static const unsigned char k3[32] = {9, 9, 9};

static pm_options *host_options(const char *host, const unsigned char *secret)
{
    return pm_test_host_options(host, 1, secret, 3000, pm_test_answer_worker); /* echoes */
}

static struct pm_test_peer_events peer_events;
static int stop_at; /* nonzero: an event of this type stops pm_cluster_run */

static void on_peer_event(pm_cluster *c, const pm_event *e, void *arg)
{
    pm_test_count_peer_events(c, e, arg);
    if (stop_at != 0 && (int)e->type == stop_at)
        pm_cluster_stop(c);
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
    char name[40];
    snprintf(name, sizeof(name), "localhost:%d", port);
    if (dns && pm_options_set_peers_dns(o, name) < 0)
        _exit(3);
    pm_test_serve_host(o, port, 0);
}

/* Host a: one worker; peers_dns, a static peer and a listening address
 * as given (NULL: none). */
static pm_cluster *start_a_on(const char *dns, const char *peer, const char *listen,
                              const unsigned char *secret)
{
    pm_options *o = host_options("a", secret);
    if (dns != NULL)
        ck_assert_int_eq(pm_options_set_peers_dns(o, dns), 0);
    if (peer != NULL)
        ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    if (listen != NULL)
        ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_peer_event, &peer_events), 0);
    peer_events = (struct pm_test_peer_events){0};
    stop_at = 0;
    pm_cluster *c = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    pm_options_free(o);
    /* The spares are made on the turns after the spawn; a test counting
     * fds from a link that came up inside the spawn counts from here. */
    PM_RUN_UNTIL(c, pm_test_successors_made(c), 10000);
    return c;
}

static pm_cluster *start_a(const char *dns, const char *peer, const unsigned char *secret)
{
    return start_a_on(dns, peer, NULL, secret);
}

/* Host a with no peer to dial and no --peers-dns, listening on a free
 * port: a mesh whose targets only the test's answers make. */
static pm_cluster *start_a_listening(void)
{
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", pm_test_free_port());
    pm_cluster *c = start_a_on(NULL, NULL, listen, k1);
    ck_assert_ptr_nonnull(c->mesh);
    return c;
}

/* b (secret k1) on a free port and a dialling it (static peer); b's pid in
 * *b. */
static pm_cluster *start_pair(pid_t *b)
{
    int port = pm_test_free_port();
    *b = start_b(port, k1, NULL, 0);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    return start_a(NULL, peer, k1);
}

START_TEST(test_dns_links)
{
    /* a knows b only as "localhost:PORT": it resolves the name off the loop,
     * dials the address and links; requests flow; the name is resolved
     * again 30 s later. */
    int port = pm_test_free_port();
    pid_t b = start_b(port, k1, NULL, 0);
    char name[40];
    snprintf(name, sizeof(name), "localhost:%d", port);
    uint64_t t0 = pm__now_ms();
    pm_cluster *a = start_a(name, NULL, k1);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(a->mesh) == 1, 20000);
    uint64_t ok, failed;
    unsigned targets;
    pm_test_mesh_dns_stats(a->mesh, &ok, &failed, &targets);
    ck_assert_uint_ge(ok, 1);
    ck_assert_uint_ge(targets, 1);
    /* Resolved again 30 s (+-25 %) after a resolution that answered
     * (procmesh(1), --peers-dns), which came after t0 and before now. */
    PM_RUN_UNTIL(a, pm_test_mesh_dns_at(a->mesh) != 0, 10000);
    uint64_t at = pm_test_mesh_dns_at(a->mesh), now = pm__now_ms();
    ck_assert_msg(at >= t0 + 22500 && at <= now + 37500,
                  "next resolution %lld ms after the start, %lld ms from now",
                  (long long)(at - t0), (long long)(at - now));
    ck_assert_uint_eq(failed, 0);
    /* A resolution that answers ends the backoff of the failures before
     * it (none again: a next failure's is the minimum, check_link
     * test_mesh_backoff_rows). */
    pm__mesh *m = a->mesh;
    m->dns_backoff_ms = 8 * PM__PEERDNS_RETRY_MIN_MS;
    pm__mesh_dns_resolve(m, pm__now_ms());
    PM_RUN_UNTIL(a, m->dns_ok > ok, 20000);
    ck_assert_uint_eq(m->dns_backoff_ms, 0);
    ck_assert_uint_eq(m->dns_failed, 0);
    pm_test_end_hosts(a, b);
}
END_TEST

START_TEST(test_dns_self_skipped)
{
    /* A supervisor whose --peers-dns name holds its own address (a pod of
     * the StatefulSet) dials itself once, learns from the hello that it is
     * itself, and never dials that address again. */
    int port = pm_test_free_port();
    char listen[32], name[40];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    snprintf(name, sizeof(name), "localhost:%d", port);
    pm_options *o = host_options("a", k1);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    ck_assert_int_eq(pm_options_set_peers_dns(o, name), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_peer_event, &peer_events), 0);
    peer_events = (struct pm_test_peer_events){0};
    stop_at = 0;
    pm_cluster *a = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &a), 0);
    pm_options_free(o);
    PM_RUN_UNTIL(a, pm__mesh_fails(a->mesh, PM__PF_SELF) >= 1, 20000);
    uint64_t ok, failed;
    unsigned targets;
    PM_RUN_UNTIL(a, (pm_test_mesh_dns_stats(a->mesh, &ok, &failed, &targets), targets == 0) &&
                        pm__mesh_fails(a->mesh, PM__PF_SELF) >= 1, 20000);
    /* The dialling end counted it (it reads its own name in message 2);
     * the accepting end sees the dialler hang up before message 3
     * ("truncated"). Past three redial backoffs there is no more. */
    uint64_t self = pm__mesh_fails(a->mesh, PM__PF_SELF);
    uint64_t until = pm_test_ms() + 3 * PM__MESH_REDIAL_MIN_MS * 4;
    PM_RUN_UNTIL(a, pm_test_ms() >= until, 10000);
    ck_assert_uint_le(pm__mesh_fails(a->mesh, PM__PF_SELF), self + 1);
    ck_assert_uint_eq(peer_events.ups, 0);
    /* Reaching ourselves is no refusal (doc/protocol.md 8): the dialling
     * end reports nothing; the accepting end's hang-up is a failure
     * ("truncated" from 127.0.0.1), reported once (one line a minute). */
    ck_assert_uint_eq(peer_events.refused, 1);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

/* The last "peers_dns_failed" diagnostic, and how many came. */
static char dns_diag[512];
static unsigned dns_diags;

static void on_dns_diag(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c;
    (void)arg;
    if (strcmp(topic, "peers_dns_failed") != 0)
        return;
    snprintf(dns_diag, sizeof(dns_diag), "%s", message);
    dns_diags++;
}

START_TEST(test_dns_unresolvable_retried)
{
    /* A name that does not resolve: the supervisor starts and serves its
     * workers, the resolution is retried with backoff and each failure is
     * counted, and said once ("peers_dns_failed") with the resolver's
     * reason. */
    pm_options *o = host_options("a", k1);
    ck_assert_int_eq(pm_options_set_peers_dns(o, "no-such-host.invalid:7946"), 0);
    ck_assert_int_eq(pm_options_set_on_diagnostic(o, on_dns_diag, NULL), 0);
    dns_diags = 0;
    pm_cluster *a = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &a), 0);
    pm_options_free(o);
    PM_RUN_UNTIL(a, ({
                     uint64_t ok, failed;
                     unsigned targets;
                     pm_test_mesh_dns_stats(a->mesh, &ok, &failed, &targets);
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
    pm_test_mesh_dns_stats(a->mesh, &ok, &failed, &targets);
    ck_assert_uint_eq(ok, 0);
    ck_assert_uint_eq(targets, 0);
    ck_assert_uint_eq(pm_test_mesh_links_up(a->mesh), 0);
    ck_assert_uint_eq(dns_diags, failed);
    /* "peers-dns: NAME: REASON (attempt N; ...)", REASON getaddrinfo's
     * (the name not found, or no resolver to ask), never "no address",
     * which is said of an answer without one. */
    ck_assert_msg(strstr(dns_diag, "peers-dns: no-such-host.invalid: ") == dns_diag &&
                      strstr(dns_diag, ": no address") == NULL && strstr(dns_diag, "(attempt ") != NULL,
                  "%s", dns_diag);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

START_TEST(test_dns_resolve_armed)
{
    /* A resolution started by hand (pm__mesh_dns_resolve, as the timer
     * does when it is due): its fd is watched by the loop and no next one
     * is due while it runs; its failure is taken when the fd is readable,
     * counted once, and the next one is due after the backoff. */
    pm_cluster *a = start_a("no-such-host.invalid:7946", NULL, k1);
    pm__mesh *m = a->mesh;
    /* The first resolution's failure taken, and its thread gone: it
     * closes its own end of the eventfd when it ends, which would free an
     * fd below the limit set next. */
    PM_RUN_UNTIL(a, m->dns_failed >= 1 && pm__peerdns_fd(m->dns) < 0 && !m->dns_armed && pm_test_threads() == 1,
                 30000);

    /* No fd left for the resolution's eventfd: it cannot start; counted
     * as a failure at once and retried after the backoff. */
    struct rlimit rl0;
    ck_assert_int_eq(getrlimit(RLIMIT_NOFILE, &rl0), 0);
    int fill[256], nfill = 0, top = -1;
    DIR *dir = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(dir);
    for (struct dirent *e; (e = readdir(dir)) != NULL;)
        if (atoi(e->d_name) > top)
            top = atoi(e->d_name);
    closedir(dir);
    struct rlimit rl = rl0;
    rl.rlim_cur = (rlim_t)top + 1;
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl), 0);
    int f;
    while (nfill < (int)ARRAY_LEN(fill) && (f = open("/dev/null", O_RDONLY | O_CLOEXEC)) >= 0)
        fill[nfill++] = f;
    ck_assert_int_eq(errno, EMFILE);
    uint64_t f0 = m->dns_failed, now0 = pm__now_ms();
    pm__mesh_dns_resolve(m, now0);
    ck_assert_uint_eq(m->dns_failed, f0 + 1);
    ck_assert_int_lt(pm__peerdns_fd(m->dns), 0);
    ck_assert_int_eq(m->dns_armed, 0);
    ck_assert_uint_ge(m->dns_at, now0 + m->dns_backoff_ms * 3 / 4);
    while (nfill > 0)
        close(fill[--nfill]);
    ck_assert_int_eq(setrlimit(RLIMIT_NOFILE, &rl0), 0);

    /* Started by hand, its eventfd on fd 0 (stdin closed: the first fd
     * free, an fd like any). */
    (void)close(0);
    f0 = m->dns_failed;
    m->dns_at = 1; /* due long ago: a value the start must clear */
    uint64_t t1 = pm__now_ms();
    pm__mesh_dns_resolve(m, t1);
    ck_assert_int_eq(pm__peerdns_fd(m->dns), 0);
    ck_assert_int_eq(m->dns_armed, 1);
    ck_assert_uint_eq(m->dns_at, 0);
    ck_assert_uint_eq(m->dns_failed, f0);
    /* Due again while it runs, as when the loop could not watch it (its
     * arm refused: not armed, a retry due): its result is taken if it is
     * there, else it is watched; no second resolution starts. (The first
     * arm stays in the loop: its completion finds the fd watched again or
     * not armed, either harmless.) */
    m->dns_armed = 0;
    pm__mesh_dns_resolve(m, pm__now_ms());
    if (m->dns_failed == f0) { /* not done yet (nearly always): watched again */
        ck_assert_int_eq(pm__peerdns_fd(m->dns), 0);
        ck_assert_int_eq(m->dns_armed, 1);
        ck_assert_uint_eq(m->dns_at, 0);
    } else { /* done: its failure taken */
        ck_assert_uint_eq(m->dns_failed, f0 + 1);
        ck_assert_int_lt(pm__peerdns_fd(m->dns), 0);
    }
    PM_RUN_UNTIL(a, m->dns_failed > f0, 30000);
    ck_assert_uint_eq(m->dns_failed, f0 + 1);
    ck_assert_int_eq(m->dns_armed, 0);
    ck_assert_int_lt(pm__peerdns_fd(m->dns), 0);
    ck_assert_uint_eq(m->dns_ok, 0);
    /* Past at least two failures the backoff is at least 2 s (+-25 %). */
    ck_assert_uint_ge(m->dns_backoff_ms, 2 * PM__PEERDNS_RETRY_MIN_MS);
    ck_assert_uint_ge(m->dns_at, t1 + m->dns_backoff_ms * 3 / 4);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

/* ------------------------------------------------ the answer's targets */

/* A listener on every address, on a port the kernel picks (*port), that
 * never accepts: a dial to 127.0.0.x:*port connects (the kernel's backlog
 * takes it) and then waits in the handshake, never linked. */
static int listen_any(int *port)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l, 0);
    int one = 1;
    ck_assert_int_eq(setsockopt(l, SOL_SOCKET, SO_REUSEADDR, &one, sizeof(one)), 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_ANY);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 128), 0);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    return l;
}

/* 127.0.0.x:port as a resolution gives it. */
static pm__peerdns_addr addr_of(int x, int port)
{
    pm__peerdns_addr a;
    memset(&a, 0, sizeof(a));
    struct sockaddr_in *sa = (struct sockaddr_in *)&a.ss;
    sa->sin_family = AF_INET;
    sa->sin_port = htons((uint16_t)port);
    sa->sin_addr.s_addr = htonl(0x7f000000u | (uint32_t)x);
    a.len = sizeof(*sa);
    return a;
}

/* The target of address x, or -1 when no live target has it. */
static int target_of(const pm__mesh *m, const pm__peerdns_addr *x)
{
    for (unsigned d = 0; d < PM__PEERDNS_MAX; d++)
        if (m->dt[d].live && m->dt[d].a.len == x->len && memcmp(&m->dt[d].a.ss, &x->ss, x->len) == 0)
            return (int)d;
    return -1;
}

/* Connections open, and targets live. */
static unsigned conns_open(const pm__mesh *m)
{
    unsigned n = 0;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        n += m->conns[j].fd >= 0;
    return n;
}

static unsigned targets_live(const pm__mesh *m)
{
    unsigned n = 0;
    for (unsigned d = 0; d < PM__PEERDNS_MAX; d++)
        n += m->dt[d].live != 0;
    return n;
}

/* The dial of DNS target d made a connection (open, not linked: the
 * listener never answers), the connection's index. */
static int dialled(const pm__mesh *m, int d)
{
    int j = m->dial_conn[PM__MAX_PEERS + d];
    ck_assert_msg(j >= 0, "target %d: not dialled", d);
    ck_assert_int_ge(m->conns[j].fd, 0);
    ck_assert_int_eq(m->conns[j].linked, 0);
    ck_assert_int_eq(m->conns[j].peer, PM__MAX_PEERS + d);
    return j;
}

START_TEST(test_configured_peer_self)
{
    /* A --peers entry that is this host's own listener: the dial reaches
     * ourselves, counted `self`, never a link; a configured peer has no
     * DNS target to mark, so it stays configured and is dialled again
     * after its backoff (an operator's list may name every host). */
    char addr[32];
    snprintf(addr, sizeof(addr), "127.0.0.1:%d", pm_test_free_port());
    pm_cluster *a = start_a_on(NULL, addr, addr, k1);
    pm__mesh *m = a->mesh;
    PM_RUN_UNTIL(a, pm__mesh_fails(m, PM__PF_SELF) >= 2, 20000); /* dialled again */
    ck_assert_uint_eq(peer_events.ups, 0);
    ck_assert_uint_eq(pm_test_mesh_links_up(m), 0);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

START_TEST(test_dns_target_failure_redialled)
{
    /* A --peers-dns target whose dial fails (nothing listens there) is
     * dialled again after its backoff: only an answer from ourselves
     * marks a target never to dial again (mesh_conn.c,
     * pm__mesh_conn_close). The answer is given by hand, as in
     * test_dns_merge_rows. */
    pm_cluster *a = start_a_listening();
    pm__mesh *m = a->mesh;
    pm__peerdns_addr X = addr_of(1, pm_test_free_port()); /* refused */
    pm__peerdns_addr r[] = {X};
    pm__mesh_dns_merge(m, r, 1);
    ck_assert_int_ge(dialled(m, 0), 0);
    PM_RUN_UNTIL(a, m->dial_conn[PM__MAX_PEERS] == -1 && m->redial_at[PM__MAX_PEERS] != 0, 20000);
    ck_assert_int_eq(m->dt[0].self, 0);
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS), 1);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
}
END_TEST

START_TEST(test_dns_merge_rows)
{
    /* pm__mesh_dns_merge given answers directly (a has no --peers-dns of
     * its own, so no resolution adds, removes or opens anything), each row
     * what the next answer does to the targets and their connections. */
    int port;
    int l = listen_any(&port);
    pm_cluster *a = start_a_listening();
    pm__mesh *m = a->mesh;
    ck_assert_uint_eq(conns_open(m), 0);
    pm__peerdns_addr A = addr_of(1, port), B = addr_of(2, port), C = addr_of(3, port);
    /* stdin closed: the first dial's socket is fd 0, a connection like any */
    (void)close(0);

    /* Two new addresses: the first free targets, in order, dialled at once. */
    pm__peerdns_addr r1[] = {A, B};
    pm__mesh_dns_merge(m, r1, 2);
    ck_assert_int_eq(target_of(m, &A), 0);
    ck_assert_int_eq(target_of(m, &B), 1);
    int jA = dialled(m, 0), jB = dialled(m, 1);
    ck_assert_int_eq(jA, 0); /* the first connection: index 0 is handled like the rest */
    ck_assert_int_eq(m->conns[jA].fd, 0);
    ck_assert_int_ne(jA, jB);
    ck_assert_uint_eq(conns_open(m), 2);
    ck_assert_uint_eq(targets_live(m), 2);
    /* Which targets may be dialled: a configured peer's index only below
     * their number (a has none), a DNS target while live and not self. */
    ck_assert_int_eq(pm__mesh_target_dialable(m, 0), 0);
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS - 1), 0);
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS), 1);
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS + 1), 1);
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS + 2), 0);
    m->dt[1].self = 1;
    ck_assert_int_eq(pm__mesh_target_dialable(m, PM__MAX_PEERS + 1), 0);
    m->dt[1].self = 0;

    /* {B, C}: A is gone, its connection (not linked) closed and its
     * target freed, then taken by C; B keeps its target and connection
     * (not dialled again). */
    pm__peerdns_addr r2[] = {B, C};
    pm__mesh_dns_merge(m, r2, 2);
    ck_assert_int_eq(target_of(m, &A), -1);
    ck_assert_int_eq(target_of(m, &B), 1);
    ck_assert_int_eq(target_of(m, &C), 0);
    ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS + 1], jB);
    (void)dialled(m, 0);
    ck_assert_uint_eq(conns_open(m), 2);
    ck_assert_uint_eq(targets_live(m), 2);

    /* The same address twice in one answer, and B's port changed: one
     * target each; B's old port is gone. */
    pm__peerdns_addr B2 = addr_of(2, port + 1 > 65535 ? port - 1 : port + 1);
    pm__peerdns_addr r3[] = {C, C, B2};
    pm__mesh_dns_merge(m, r3, 3);
    ck_assert_int_eq(target_of(m, &C), 0);
    ck_assert_int_eq(target_of(m, &B), -1);
    ck_assert_int_eq(target_of(m, &B2), 1);
    ck_assert_uint_eq(targets_live(m), 2);

    /* An empty answer: every target goes, and every connection not linked
     * with it; nothing is redialled. */
    pm__mesh_dns_merge(m, NULL, 0);
    ck_assert_uint_eq(targets_live(m), 0);
    for (unsigned d = 0; d < PM__PEERDNS_MAX; d++) {
        ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS + d], -1);
        ck_assert_uint_eq(m->redial_at[PM__MAX_PEERS + d], 0);
        ck_assert_uint_eq(m->backoff_ms[PM__MAX_PEERS + d], 0);
    }
    PM_RUN_UNTIL(a, conns_open(m) == 0, 10000);

    /* More addresses than targets: the first PM__PEERDNS_MAX each take
     * one, the rest are left (not dialled: no more connections). */
    pm__peerdns_addr many[PM__PEERDNS_MAX + 2];
    for (unsigned i = 0; i < ARRAY_LEN(many); i++)
        many[i] = addr_of(10 + (int)i, port);
    /* ... and nothing of the mesh past the targets is touched (a search
     * past the last target would read and write there), up to the
     * connection table (the struct's last member), which the dials fill. */
    static unsigned char tail0[sizeof(pm__mesh)];
    const size_t past = offsetof(pm__mesh, dt) + sizeof(m->dt);
    const size_t upto = offsetof(pm__mesh, conns);
    ck_assert_uint_gt(upto, past);
    memcpy(tail0, (unsigned char *)m + past, upto - past);
    pm__mesh_dns_merge(m, many, ARRAY_LEN(many));
    ck_assert(memcmp(tail0, (unsigned char *)m + past, upto - past) == 0);
    ck_assert_uint_eq(targets_live(m), PM__PEERDNS_MAX);
    for (unsigned i = 0; i < ARRAY_LEN(many); i++)
        ck_assert_int_eq(target_of(m, &many[i]), i < PM__PEERDNS_MAX ? (int)i : -1);
    ck_assert_uint_eq(conns_open(m), PM__PEERDNS_MAX);
    /* The same answer again changes nothing. */
    pm__mesh_dns_merge(m, many, ARRAY_LEN(many));
    ck_assert_uint_eq(targets_live(m), PM__PEERDNS_MAX);
    ck_assert_uint_eq(conns_open(m), PM__PEERDNS_MAX);
    pm__mesh_dns_merge(m, NULL, 0);
    PM_RUN_UNTIL(a, conns_open(m) == 0, 10000);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    close(l);
}
END_TEST

START_TEST(test_dns_target_of_linked_host)
{
    /* a links to b through an answer given by hand, its socket on fd 0 (a
     * supervisor whose stdin is closed: the first fd free). A target whose
     * address last answered as b is not dialled while that link is up:
     * looked at again later (one link per pair). When b's address leaves
     * the answer, the link stays, as a link of its own: its end later
     * touches nothing of the target that took its place. While it
     * lingers after our CLOSE it is no link: b's other addresses are
     * dialled again. */
    int port = pm_test_free_port(), lport;
    pid_t b = start_b(port, k1, NULL, 0);
    int l = listen_any(&lport);
    pm_cluster *a = start_a_listening();
    pm__mesh *m = a->mesh;
    (void)close(0);
    pm__peerdns_addr at_b = addr_of(1, port);
    pm__mesh_dns_merge(m, &at_b, 1);
    int jb = dialled(m, 0);
    ck_assert_int_eq(m->conns[jb].fd, 0);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    pm__mesh_conn *up = pm_test_mesh_up_conn(m);
    ck_assert_ptr_eq(up, &m->conns[jb]);
    ck_assert_int_eq(up->peer, PM__MAX_PEERS);
    ck_assert_str_eq(m->dt[0].host, "b");

    /* Target x with another address, whose host was b, c, or not known. */
    int x = (int)PM__PEERDNS_MAX - 1;
    static const struct {
        const char *host;
        int dials;
    } rows[] = {{"b", 0}, {"c", 1}, {"", 1}};
    for (size_t r = 0; r < ARRAY_LEN(rows); r++) {
        m->dt[x].live = 1;
        m->dt[x].a = addr_of(5, lport);
        snprintf(m->dt[x].host, sizeof(m->dt[x].host), "%s", rows[r].host);
        uint64_t t0 = pm__now_ms();
        pm__mesh_dial(m, PM__MAX_PEERS + x);
        if (rows[r].dials) {
            (void)dialled(m, x);
        } else {
            ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS + x], -1);
            ck_assert_uint_ge(m->redial_at[PM__MAX_PEERS + x], t0 + PM__MESH_REDIAL_MAX_MS * 3 / 4);
        }
        /* x leaves the answer (b's address stays in it) */
        pm__mesh_dns_merge(m, &at_b, 1);
        ck_assert_int_eq(m->dt[x].live, 0);
        ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS + x], -1);
        ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS], jb);
    }

    /* b's address leaves the answer: the link stays, no longer the
     * target's; a new address takes the target. */
    pm__mesh_dns_merge(m, NULL, 0);
    ck_assert_uint_eq(pm_test_mesh_links_up(m), 1);
    ck_assert_int_eq(up->peer, -1);
    pm__peerdns_addr n1 = addr_of(6, lport);
    pm__mesh_dns_merge(m, &n1, 1);
    int jn = dialled(m, 0);
    /* The listener never answers: that handshake must not reach its
     * deadline while the test waits for the link's end. */
    m->conns[jn].deadline_ms = UINT64_MAX;

    /* The link ends, b stopped: our CLOSE goes unanswered, the connection
     * lingers and is no link. A target whose host was b is dialled. */
    ck_assert_int_eq(kill(b, SIGSTOP), 0);
    uint64_t l0 = m->lingered;
    pm_test_mesh_close(m);
    /* The turn that starts the linger returns before any turn could end
     * it (at its deadline, 1 s on); held from here until b answers. */
    PM_RUN_UNTIL(a, peer_events.downs == 1 && m->lingered > l0, 20000);
    ck_assert(up->fd >= 0 && up->lingering); /* fd first: a released entry keeps its fields */
    up->deadline_ms = UINT64_MAX;
    ck_assert_uint_eq(pm_test_mesh_links_up(m), 0);
    m->dt[x].live = 1;
    m->dt[x].a = addr_of(5, lport);
    snprintf(m->dt[x].host, sizeof(m->dt[x].host), "b");
    pm__mesh_dial(m, PM__MAX_PEERS + x);
    m->conns[dialled(m, x)].deadline_ms = UINT64_MAX;
    ck_assert_int_eq(kill(b, SIGCONT), 0);
    /* Its end touched nothing of the new address's target, and nothing is
     * redialled. */
    PM_RUN_UNTIL(a, up->fd < 0, 20000); /* its linger over, the entry released */
    ck_assert_int_eq(m->dial_conn[PM__MAX_PEERS], jn);
    ck_assert_int_ge(m->conns[jn].fd, 0);
    for (unsigned t = 0; t < PM__PEERDNS_MAX; t++)
        ck_assert_uint_eq(m->redial_at[PM__MAX_PEERS + t], 0);
    pm_test_end_hosts(a, b);
    close(l);
}
END_TEST

/* ------------------------------------------------------------ key rotation */

/* One request from main to b's worker over the link, answered with its
 * own payload. The first (first != 0) is asked again while b answers
 * -EHOSTDOWN: the link can come up inside b's pm_cluster_spawn, before its
 * worker is ready (a CI run under ASan saw it, stop 48); later ones must
 * be answered at once. */
static void call_b(pm_cluster *a, const char *what, int first)
{
    pm_address w;
    ck_assert_int_eq(pm_address_parse("t@b:10", &w), 0);
    char got[32];
    size_t n = 0;
    uint64_t end = pm_test_ms() + 20000;
    int rc;
    while ((rc = pm_cluster_call(a, &w, what, strlen(what), 10000, got, sizeof(got), &n)) == -EHOSTDOWN &&
           first && pm_test_ms() < end)
        ck_assert_int_ge(pm_cluster_run(a, 50), 0);
    ck_assert_msg(rc == 0 && n == strlen(what) && memcmp(got, what, n) == 0,
                  "%s: %s (%zu bytes)", what, pm_strerror(rc), n);
}

/* REKEY records a has sent. */
static uint64_t rekeys_out(const pm_cluster *a)
{
    uint64_t out, in;
    pm_test_mesh_rekeys(a->mesh, &out, &in);
    return out;
}

/* Host b on 127.0.0.1:port with a peer timeout of 600 s: a host linked to
 * it sends it a heartbeat every 200 s (a third of the idle time b
 * announces), never within a test. */
static pid_t start_b_quiet(int port)
{
    pid_t b = pm_test_fork();
    ck_assert_int_ge(b, 0);
    if (b == 0)
        pm_test_serve_host(pm_test_host_options("b", 1, k1, 600000, pm_test_answer_worker), port, 0);
    return b;
}

/* Host a for the tests of the mesh's deadlines: one worker, listening on
 * 127.0.0.1:lport (0: a free port), a peer or two to dial and a
 * --peers-dns name (NULL: none), a peer timeout of 600 s (no heartbeat to
 * a quiet b within a test), no worker liveness checks (their timer would
 * wake its loop every few seconds), and stdin closed: its next socket
 * takes fd 0 (a supervisor whose stdin is closed gets fd 0 for its next
 * socket). A stdin closed already is opened first, onto /dev/null, so that
 * the spawn does not take fd 0 for its own. */
static pm_cluster *start_a_quiet(int lport, const char *peer, const char *peer2, const char *dns)
{
    if (fcntl(0, F_GETFD) < 0)
        ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", lport != 0 ? lport : pm_test_free_port());
    pm_options *o = pm_test_host_options("a", 1, k1, 600000, pm_test_answer_worker);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    if (peer != NULL)
        ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    if (peer2 != NULL)
        ck_assert_int_eq(pm_options_add_peer(o, peer2), 0);
    if (dns != NULL)
        ck_assert_int_eq(pm_options_set_peers_dns(o, dns), 0);
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 0), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_peer_event, &peer_events), 0);
    peer_events = (struct pm_test_peer_events){0};
    stop_at = 0;
    pm_cluster *a = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &a), 0);
    pm_options_free(o);
    (void)close(0);
    return a;
}

/* The timer let go of the deadlines that went away: it is only ever moved
 * earlier while set (turn.c), so it may still wait for one (the worker's
 * ready timeout, a request answered since), which would wake a run below
 * whatever the mesh gave it. Disarmed, the next turn sets it to the
 * earliest deadline there is now. */
static void fresh_timer(pm_cluster *a)
{
    struct itimerspec off;
    memset(&off, 0, sizeof(off));
    ck_assert_int_eq(timerfd_settime(a->timerfd, 0, &off, NULL), 0);
    a->turn_state->timer_at = 0;
}

/* Until the hub has no deadline: the main's requests answered, the one
 * it keeps for the earliest of them (hub_main.c, moved only when due) gone
 * by. Then no deadline but the mesh's can wake a's loop. */
static void quiet_hub(pm_cluster *a)
{
    PM_RUN_UNTIL(a, pm__hub_next_deadline(a->hub) == 0, 30000);
}

/* One long pm_cluster_run of a until an event of this type stops it: how
 * long it took, in ms. A run that returned every few ms would fire the due
 * deadlines at each of its turns and hide one the timer was never given;
 * this one wakes only for the deadlines the timer has now (fresh_timer)
 * and for what a's sockets bring. Its callers leave a's loop no other
 * deadline within 30 s (a quiet hub, no heartbeat, no redial), so their
 * bound (30 s) tells a deadline the timer had from one it never had, and
 * leaves a loaded machine far more than enough past the deadline (3 s)
 * to wake up. */
static uint64_t run_until_event(pm_cluster *a, int type)
{
    stop_at = type;
    fresh_timer(a);
    uint64_t t0 = pm_test_ms();
    ck_assert_int_ge(pm_cluster_run(a, 60000), 0);
    stop_at = 0;
    return pm_test_ms() - t0;
}

/* a dials a listener that accepts (the kernel's backlog) and never
 * answers, as its --peers-dns target 0: the connection, its connect done
 * and its handshake under way. */
static pm__mesh_conn *dial_silent(pm_cluster *a, int lport)
{
    pm__mesh *m = a->mesh;
    pm__peerdns_addr at = addr_of(1, lport);
    pm__mesh_dns_merge(m, &at, 1);
    int j = dialled(m, 0);
    PM_RUN_UNTIL(a, !m->conns[j].dialing, 20000);
    return &m->conns[j];
}

/* A link on fd 0 is a link like any other. a's dial to b takes fd 0 (the
 * answer given by hand, as in test_dns_target_of_linked_host). Both hosts
 * announce 600 s of idle time, so no heartbeat (whose record seals what is
 * staged before it) comes within the test: a's requests cross the link
 * because the turn's flush sealed and wrote them. pm_cluster_peers lists the link.
 * Its deadlines are the loop's own: a REKEY made due 3 s from now goes
 * out then, and with b stopped and a's silence bound brought to 3 s from
 * now (its last record made now), the link goes down then
 * (run_until_event). */
START_TEST(test_link_on_fd_zero)
{
    int port = pm_test_free_port();
    pid_t b = start_b_quiet(port);
    pm_cluster *a = start_a_quiet(0, NULL, NULL, NULL);
    pm__mesh *m = a->mesh;
    pm__peerdns_addr at_b = addr_of(1, port);
    pm__mesh_dns_merge(m, &at_b, 1);
    int jb = dialled(m, 0);
    pm__mesh_conn *k = &m->conns[jb];
    ck_assert_int_eq(k->fd, 0);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    /* Their 10 s deadlines end the calls long before any heartbeat. */
    call_b(a, "over fd 0", 1);
    call_b(a, "and back", 0);
    pm_peer_info pi[4];
    ck_assert_int_eq(pm_cluster_peers(a, pi, 4), 1);
    ck_assert_str_eq(pi[0].host, "b");
    ck_assert_str_eq(pi[0].state, "up");
    ck_assert_uint_ge(pi[0].frames_out, 2);
    ck_assert_uint_ge(pi[0].frames_in, 2);

    /* REKEY by time: due 3 s from now, sent then (its time is read back
     * from the next one's, rekey_ms after it), not when the run ends. */
    uint64_t records, ms;
    pm_test_mesh_rekey_bounds(m, &records, &ms);
    quiet_hub(a);
    uint64_t due = pm__now_ms() + 3000;
    k->rekey_at_ms = due;
    fresh_timer(a);
    ck_assert_int_ge(pm_cluster_run(a, 10000), 0);
    ck_assert_uint_eq(rekeys_out(a), 1);
    ck_assert_msg(k->rekey_at_ms - ms >= due && k->rekey_at_ms - ms < due + 5000,
                  "REKEY sent %lld ms after it was due", (long long)(k->rekey_at_ms - ms - due));

    ck_assert_int_eq(kill(b, SIGSTOP), 0);
    k->last_rx_ms = pm__now_ms();
    m->env.cfg.timeout_ms = 3000;
    uint64_t turns = a->turns;
    uint64_t took = run_until_event(a, PM_EVENT_PEER_DOWN);
    ck_assert_uint_eq(peer_events.downs, 1);
    ck_assert_uint_lt(a->turns - turns, 500); /* woken by the bound, not turning */
    ck_assert_uint_eq(pm__mesh_fails(m, PM__PF_TIMEOUT), 1);
    ck_assert_msg(took < 30000, "b's silence judged after %llu ms (due after 3 s)",
                  (unsigned long long)took);
    ck_assert_int_eq(kill(b, SIGCONT), 0);
    pm_test_end_hosts(a, b);
}
END_TEST

/* The handshake's deadline on fd 0: a's dial to a listener that accepts
 * (the kernel's backlog) and never answers ends when its deadline, brought
 * to 3 s from now, says (run_until_event), refused at once (the address's
 * first failure). */
START_TEST(test_handshake_deadline_on_fd_zero)
{
    int lport;
    int l = listen_any(&lport);
    pm_cluster *a = start_a_quiet(0, NULL, NULL, NULL);
    pm__mesh *m = a->mesh;
    pm__mesh_conn *k = dial_silent(a, lport);
    ck_assert_int_eq(k->fd, 0);
    k->deadline_ms = pm__now_ms() + 3000;
    uint64_t turns = a->turns;
    uint64_t took = run_until_event(a, PM_EVENT_PEER_REFUSED);
    ck_assert_uint_eq(peer_events.refused, 1);
    /* Woken by the deadline, a few turns (one here; one each 50 ms where
     * the kernel has no pidfd): a handshaking connection gives the timer
     * no heartbeat, silence or rekey time (it has none yet: one would be
     * due at once, and the loop would turn without rest, thousands of
     * turns in 3 s). */
    ck_assert_uint_lt(a->turns - turns, 500);
    ck_assert_uint_eq(pm__mesh_fails(m, PM__PF_TIMEOUT), 1);
    ck_assert_int_lt(k->fd, 0);
    ck_assert_msg(took < 30000, "the handshake ended after %llu ms (due after 3 s)", (unsigned long long)took);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    close(l);
}
END_TEST

/* The next --peers-dns resolution is the loop's deadline too: made due 3 s
 * from now, it is made then, and its answer is in well before a run of 12
 * s ends (a resolution started only by the run's last turn answers after
 * it). The name answers a's own address (test_dns_self_skipped): a's dial
 * finds itself and the target is not dialled again, so the resolution is
 * the only deadline a's loop has. Then beside a later resolution, an
 * earlier deadline is the one the timer keeps. */
START_TEST(test_dns_refresh_on_time)
{
    int lport = pm_test_free_port();
    char dns[40];
    snprintf(dns, sizeof(dns), "127.0.0.1:%d", lport);
    pm_cluster *a = start_a_quiet(lport, NULL, NULL, dns);
    pm__mesh *m = a->mesh;
    PM_RUN_UNTIL(a, m->dns_ok >= 1 && m->dt[0].self && pm__mesh_fails(m, PM__PF_SELF) >= 1 &&
                        conns_open(m) == 0 && pm__mesh_next_deadline(m) == m->dns_at,
                 20000);
    quiet_hub(a);
    uint64_t ok = m->dns_ok;
    ck_assert_uint_gt(m->dns_at, 0);
    m->dns_at = pm__now_ms() + 3000;
    fresh_timer(a);
    ck_assert_int_ge(pm_cluster_run(a, 12000), 0);
    ck_assert_uint_eq(m->dns_ok, ok + 1);
    ck_assert_uint_eq(m->dns_failed, 0);

    /* An earlier deadline beside the resolution's: a handshake with a
     * listener that never answers, due in 3 s, the resolution in 20 s. */
    int l = listen_any(&lport);
    dial_silent(a, lport)->deadline_ms = pm__now_ms() + 3000;
    m->dns_at = pm__now_ms() + 20000;
    uint64_t took = run_until_event(a, PM_EVENT_PEER_REFUSED);
    ck_assert_uint_eq(pm__mesh_fails(m, PM__PF_TIMEOUT), 1);
    ck_assert_msg(took < 15000, "the handshake ended after %llu ms (due after 3 s)", (unsigned long long)took);

    /* The resolution is due at its own millisecond (pm__mesh_fire given
     * that reading of the clock; the loop's timer wakes in it): started,
     * its time is no longer that one. */
    uint64_t now = pm__now_ms();
    m->dns_at = now;
    pm__mesh_fire(m, now);
    ck_assert_uint_ne(m->dns_at, now);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    close(l);
}
END_TEST

/* The refused connections' held-back line is the loop's deadline too. a
 * dials a listener that accepts (the kernel's backlog) and never answers:
 * each handshake ends at its deadline (brought near), refused. The first
 * is reported at once; the second, within the minute, is held back; its
 * line, made due 3 s from now, comes then (run_until_event), standing for
 * it, while a third handshake waits for a later deadline. */
START_TEST(test_refused_flush_on_time)
{
    int lport;
    int l = listen_any(&lport);
    pm_cluster *a = start_a_quiet(0, NULL, NULL, NULL);
    pm__mesh *m = a->mesh;
    pm__peerdns_addr at = addr_of(1, lport);
    pm__mesh_dns_merge(m, &at, 1);
    for (uint64_t n = 1; n <= 2; n++) {
        PM_RUN_UNTIL(a, m->dial_conn[PM__MAX_PEERS] >= 0 && !m->conns[m->dial_conn[PM__MAX_PEERS]].dialing,
                     20000);
        m->conns[m->dial_conn[PM__MAX_PEERS]].deadline_ms = pm__now_ms();
        PM_RUN_UNTIL(a, pm__mesh_fails(m, PM__PF_TIMEOUT) == n, 20000);
    }
    ck_assert_uint_eq(peer_events.refused, 1);
    /* The third handshake under way, its deadline (600 s) later than the
     * line's: the timer must have the earlier of the two. */
    PM_RUN_UNTIL(a, m->dial_conn[PM__MAX_PEERS] >= 0 && !m->conns[m->dial_conn[PM__MAX_PEERS]].dialing,
                 20000);
    pm__faillog_entry *held = NULL;
    for (unsigned i = 0; i < PM__FAILLOG_ENTRIES; i++)
        if (m->refused.e[i].addr[0] != '\0' && m->refused.e[i].held > 0)
            held = &m->refused.e[i];
    ck_assert_ptr_nonnull(held);
    ck_assert_uint_eq(held->held, 1);
    ck_assert_int_eq(held->reason, PM__PF_TIMEOUT);
    /* (CLOCK_MONOTONIC is past a minute: the test runs minutes after boot.) */
    held->reported_ms = pm__now_ms() + 3000 - PM__FAILLOG_WINDOW_MS;
    ck_assert_uint_eq(pm__mesh_next_deadline(m), held->reported_ms + PM__FAILLOG_WINDOW_MS);
    uint64_t took = run_until_event(a, PM_EVENT_PEER_REFUSED);
    ck_assert_uint_eq(peer_events.refused, 2);
    ck_assert_uint_eq(held->held, 0);
    ck_assert_msg(took >= 2500 && took < 30000, "the held-back line came after %llu ms (due after 3 s)",
                  (unsigned long long)took);
    /* The other way round: a line held back until a minute from now, the
     * third handshake's deadline in 3 s: the deadline given to the timer
     * (pm__mesh_next_deadline) is the handshake's. */
    int j = m->dial_conn[PM__MAX_PEERS];
    ck_assert_int_ge(j, 0);
    uint64_t now = pm__now_ms();
    held->held = 1;
    held->reported_ms = now;
    m->conns[j].deadline_ms = now + 3000;
    ck_assert_uint_eq(pm__mesh_next_deadline(m), now + 3000);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    close(l);
}
END_TEST

/* protocol.md 6, REKEY: procmesh's own bounds, 2^20 records or 10 minutes,
 * as a cluster with the default options has them (test_rekey_under_traffic
 * shortens them to see many): the link's deadline is 10 minutes after it
 * came up, and the record that makes 2^20 brings a REKEY, after which the
 * link still carries requests both ways. */
START_TEST(test_rekey_default_bounds)
{
    uint64_t t0 = pm__now_ms();
    pid_t b;
    pm_cluster *a = start_pair(&b);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(a->mesh) == 1, 20000);
    uint64_t now = pm__now_ms();
    uint64_t records, ms;
    pm_test_mesh_rekey_bounds(a->mesh, &records, &ms);
    ck_assert_uint_eq(records, UINT64_C(1) << 20);
    ck_assert_uint_eq(ms, UINT64_C(600000));
    pm__mesh_conn *k = pm_test_mesh_up_conn(a->mesh);
    ck_assert_ptr_nonnull(k);
    /* Due 10 minutes after the link came up, which was after t0 and
     * before now. */
    ck_assert_msg(k->rekey_at_ms >= t0 + 600000 && k->rekey_at_ms <= now + 600000,
                  "REKEY due %llu ms after the test's start",
                  (unsigned long long)(k->rekey_at_ms - t0));
    call_b(a, "before", 1);
    uint64_t out0, in0, out, in;
    pm_test_mesh_rekeys(a->mesh, &out0, &in0);
    ck_assert_uint_eq(out0, 0);
    ck_assert_uint_lt(k->pc.records_since_rekey, records);
    /* One record short of the bound (the count, not the cipher's nonces:
     * b sees nothing of it): the request's record makes 2^20, and the same
     * flush that sealed it sends REKEY (pm__mesh_flush: seal, then judge
     * the count), before the reply can have come back. */
    k->pc.records_since_rekey = records - 1;
    uint64_t tb = pm__now_ms();
    call_b(a, "at the bound", 0);
    uint64_t ta = pm__now_ms();
    pm_test_mesh_rekeys(a->mesh, &out, &in);
    ck_assert_uint_eq(out, 1);
    ck_assert_uint_lt(k->pc.records_since_rekey, 16);
    /* b rekeyed its receiving key with the record: what follows is read. */
    call_b(a, "after", 0);
    pm_test_mesh_rekeys(a->mesh, &out, &in);
    ck_assert_uint_eq(out, 1);
    ck_assert_uint_eq(pm_test_mesh_links_up(a->mesh), 1);
    /* That REKEY moved the time bound too: the next is due rekey_ms after
     * it (made between tb and ta), not sooner. Then due by time alone (the
     * bound made due now, no record counted): a REKEY follows, and the
     * next is due rekey_ms after that one (mesh_conn.c pm__mesh_conn_rekey). */
    ck_assert_msg(k->rekey_at_ms >= tb + ms && k->rekey_at_ms <= ta + ms, "next REKEY due at %lld ms past tb",
                  (long long)(k->rekey_at_ms - tb));
    uint64_t t1 = pm__now_ms();
    k->rekey_at_ms = t1;
    PM_RUN_UNTIL(a, rekeys_out(a) == 2, 20000);
    uint64_t t2 = pm__now_ms();
    ck_assert_msg(k->rekey_at_ms >= t1 + ms && k->rekey_at_ms <= t2 + ms, "next REKEY due in %lld ms",
                  (long long)(k->rekey_at_ms - t2));
    ck_assert_uint_eq(pm_test_mesh_links_up(a->mesh), 1);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    (void)b;
}
END_TEST

/* A host named host that dials 127.0.0.1:port with secret s, until the test
 * ends. */
static pid_t start_dialer(const char *host, int port, const unsigned char *s)
{
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid > 0)
        return pid;
    pm_test_serve_host(host_options(host, s), 0, port);
}

/* Host b in this process, secret K1, listening on a free port (*port),
 * its peer events counted from zero. */
static pm_cluster *start_b_here(int *port)
{
    *port = pm_test_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", *port);
    pm_options *o = host_options("b", k1);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    ck_assert_int_eq(pm_options_set_on_event(o, on_peer_event, &peer_events), 0);
    peer_events = (struct pm_test_peer_events){0};
    stop_at = 0;
    pm_cluster *b = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &b), 0);
    pm_options_free(o);
    return b;
}

START_TEST(test_rotation_without_downtime)
{
    /* b (this process) listens with K1; a links with K1. b takes K1+K2 (as
     * on SIGHUP): a's link stays up. a restarts with K2 only and links
     * again; c, down during the rotation, comes with K1 and links (b still
     * accepts it). b drops K1: d with K1 only is refused, counted as a
     * wrong key id, and the links up stay up. */
    int port;
    pm_cluster *b = start_b_here(&port);

    pid_t a = start_dialer("a", port, k1);
    PM_RUN_UNTIL(b, peer_events.ups == 1 && pm_test_mesh_links_up(b->mesh) == 1, 20000);

    unsigned char both[64];
    memcpy(both, k1, 32);
    memcpy(both + 32, k2, 32);
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 2), 0);
    /* The link up is not touched; a few heartbeats later it is still up. */
    uint64_t until = pm_test_ms() + 1500;
    PM_RUN_UNTIL(b, pm_test_ms() >= until, 10000);
    ck_assert_uint_eq(peer_events.downs, 0);
    ck_assert_uint_eq(pm_test_mesh_links_up(b->mesh), 1);

    kill(a, SIGKILL);
    pm_test_reap(a, 5000);
    PM_RUN_UNTIL(b, peer_events.downs == 1, 20000);
    a = start_dialer("a", port, k2);
    PM_RUN_UNTIL(b, peer_events.ups == 2 && pm_test_mesh_links_up(b->mesh) == 1, 20000);
    pid_t c = start_dialer("c", port, k1);
    PM_RUN_UNTIL(b, peer_events.ups == 3 && pm_test_mesh_links_up(b->mesh) == 2, 20000);

    ck_assert_int_eq(pm_cluster_set_secrets(b, k2, 1), 0);
    uint64_t key_id0 = pm__mesh_fails(b->mesh, PM__PF_KEY_ID);
    pid_t d = start_dialer("d", port, k1);
    PM_RUN_UNTIL(b, pm__mesh_fails(b->mesh, PM__PF_KEY_ID) >= key_id0 + 1, 20000);
    ck_assert_uint_eq(peer_events.ups, 3);
    ck_assert_uint_eq(pm_test_mesh_links_up(b->mesh), 2);
    ck_assert_uint_eq(peer_events.downs, 1);

    /* Bad calls change nothing. */
    uint64_t reloads = b->mesh->key_reloads;
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 3), -EINVAL);
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 0), -EINVAL);
    ck_assert_int_eq(pm_cluster_set_secrets(b, NULL, 1), -EINVAL);
    ck_assert_uint_eq(b->mesh->key_reloads, reloads);
    memcpy(both + 32, k2, 32);
    memcpy(both, k2, 32);
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 2), -EEXIST);
    static const unsigned char zero[32];
    ck_assert_int_eq(pm_cluster_set_secrets(b, zero, 1), -EINVAL);
    for (pid_t *p = (pid_t[]){a, c, d, 0}; *p != 0; p++) {
        kill(*p, SIGKILL);
        pm_test_reap(*p, 5000);
    }
    ck_assert_int_ge(pm_cluster_terminate(b), 0);
}
END_TEST

START_TEST(test_set_secrets_frees_old)
{
    /* A replaced keyring is wiped and given back once nothing uses it
     * (mesh.c, pm__mesh_set_secrets): at once when no connection holds
     * it, after its last connection closes otherwise; never kept until
     * exit. Read off the process's count of keyrings. */
    int port;
    pm_cluster *b = start_b_here(&port);
    unsigned char both[64];
    memcpy(both, k1, 32);
    memcpy(both + 32, k2, 32);

    unsigned long idle = pm__keyring_live();
    ck_assert_int_eq(pm_cluster_set_secrets(b, k2, 1), 0);
    ck_assert_uint_eq(pm__keyring_live(), idle);
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 2), 0);
    ck_assert_uint_eq(pm__keyring_live(), idle);

    /* A link up holds the keyring it was made with. */
    pid_t a = start_dialer("a", port, k1);
    PM_RUN_UNTIL(b, peer_events.ups == 1 && pm_test_mesh_links_up(b->mesh) == 1, 20000);
    unsigned long linked = pm__keyring_live();
    ck_assert_uint_eq(linked, idle); /* a link makes no keyring of its own */
    ck_assert_int_eq(pm_cluster_set_secrets(b, k2, 1), 0);
    ck_assert_uint_eq(pm__keyring_live(), linked + 1); /* the new one beside the held one */
    ck_assert_int_eq(pm_cluster_set_secrets(b, both, 2), 0);
    ck_assert_uint_eq(pm__keyring_live(), linked + 1); /* the one between: held by nothing */
    kill(a, SIGKILL);
    pm_test_reap(a, 5000);
    PM_RUN_UNTIL(b, peer_events.downs == 1 && pm__keyring_live() == idle, 20000);
    ck_assert_uint_eq(pm_test_mesh_links_up(b->mesh), 0);
    ck_assert_int_ge(pm_cluster_terminate(b), 0);
}
END_TEST

/* The last "peer_links_failed" diagnostic: why a spawn's links failed. */
static char links_diag[512];

static void on_links_diag(pm_cluster *c, const char *topic, const char *message, void *arg)
{
    (void)c;
    (void)arg;
    if (strcmp(topic, "peer_links_failed") == 0)
        snprintf(links_diag, sizeof(links_diag), "%s", message);
}

START_TEST(test_key_files_refused_at_spawn)
{
    /* A --peer-keys or --node-key file that cannot be used fails the spawn
     * with the file's error, said with the file's name and what is wrong
     * with it (the loader's own words, not a bare errno), and leaves
     * nothing behind: no cluster, no worker (the mesh is set up before any
     * worker is forked, and its half-made keys are given back). One row
     * per file and fault. */
    char dir[] = "/tmp/pm-keyfiles-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char missing[64], badpin[64], badnode[64];
    snprintf(missing, sizeof(missing), "%s/none", dir);
    snprintf(badpin, sizeof(badpin), "%s/pins", dir);
    snprintf(badnode, sizeof(badnode), "%s/node.key", dir);
    FILE *f = fopen(badpin, "w");
    ck_assert_ptr_nonnull(f);
    fputs("# a comment\nother not-a-key\n", f);
    fclose(f);
    int fd = open(badnode, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, "zz", 2), 2);
    close(fd);
    static const struct {
        int node;  /* 1: the node key file, 0: the peer keys file */
        int which; /* 0 missing, 1 malformed */
        int err;   /* the spawn's error */
        const char *says; /* in its diagnostic, beside the file's name */
    } rows[] = {{0, 0, -ENOENT, "cannot open"},
                {0, 1, -EINVAL, "line 2: the key must be"},
                {1, 1, -EINVAL, "is 2 bytes"}};
    unsigned long rings = pm__keyring_live();
    for (unsigned i = 0; i < sizeof(rows) / sizeof(rows[0]); i++) {
        pm_options *o = host_options("b", k1);
        char listen[32];
        snprintf(listen, sizeof(listen), "127.0.0.1:%d", pm_test_free_port());
        ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0); /* a mesh to set up */
        const char *path = rows[i].node ? badnode : rows[i].which == 0 ? missing : badpin;
        if (rows[i].node)
            ck_assert_int_eq(pm_options_set_node_key_file(o, path), 0);
        else
            ck_assert_int_eq(pm_options_set_peer_keys_file(o, path), 0);
        ck_assert_int_eq(pm_options_set_on_diagnostic(o, on_links_diag, NULL), 0);
        links_diag[0] = '\0';
        pm_cluster *c = NULL;
        int rc = pm_cluster_spawn(o, &c);
        pm_options_free(o);
        ck_assert_msg(rc == rows[i].err, "row %u (%s): spawn %d, expected %d", i, path, rc, rows[i].err);
        ck_assert_msg(strstr(links_diag, path) != NULL && strstr(links_diag, rows[i].says) != NULL,
                      "row %u: said \"%s\"", i, links_diag);
        ck_assert_ptr_null(c);
        ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1); /* no child of ours, live or dead */
        ck_assert_int_eq(errno, ECHILD);
        ck_assert_uint_eq(pm__keyring_live(), rings);
    }
    unlink(badpin);
    unlink(badnode);
    rmdir(dir);
}
END_TEST

/* A mesh without a listener opens no fd of its own at start: whatever it
 * holds as "none" must not be fd 0. A cluster whose links only dial (no
 * --peer-listen) ends, and its supervisor's stdin is the one it had. */
START_TEST(test_no_listener_keeps_stdin)
{
    struct stat before, after;
    if (fcntl(0, F_GETFD) < 0)
        ck_assert_int_eq(open("/dev/null", O_RDONLY), 0);
    ck_assert_int_eq(fstat(0, &before), 0);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", pm_test_free_port());
    pm_cluster *a = start_a(NULL, peer, k1);
    PM_RUN_UNTIL(a, pm__mesh_fails(a->mesh, PM__PF_LOCAL) >= 1 || a->mesh->redial_at[0] != 0, 20000);
    ck_assert_int_ge(pm_cluster_terminate(a), 0);
    ck_assert_int_eq(fstat(0, &after), 0);
    ck_assert_uint_eq(after.st_dev, before.st_dev);
    ck_assert_uint_eq(after.st_ino, before.st_ino);
}
END_TEST

/* The stall rule: a supervisor that was the one stopped (here: its loop
 * not run for longer than its peer timeout) finds its peer's heartbeats
 * waiting in the socket when the silence falls due, reads them before it
 * judges (a turn takes its completions before its deadlines; the
 * silence's own read covers a completion not taken yet: this test holds
 * the two together, either one alone keeps the link), and keeps the
 * link. a's timeout is 3 s (b sends a heartbeat every second), b's 600 s
 * (b does not judge a's own silence meanwhile). */
START_TEST(test_stalled_supervisor_keeps_link)
{
    int port = pm_test_free_port();
    pid_t b = start_b_quiet(port);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    pm_cluster *a = start_a(NULL, peer, k1);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(a->mesh) == 1, 20000);
    pm__mesh_conn *k = pm_test_mesh_up_conn(a->mesh);
    ck_assert_ptr_nonnull(k);
    uint64_t rx = k->last_rx_ms;
    while (pm__now_ms() < rx + 5000)
        usleep(100 * 1000); /* a stalled: 5 s, past its 3 s */
    ck_assert_uint_le(pm__mesh_conn_silence_at(a->mesh, k), pm__now_ms());
    ck_assert_int_ge(pm_cluster_run(a, 0), 0); /* one turn: the silence is due */
    ck_assert_uint_gt(k->last_rx_ms, rx);
    PM_RUN_UNTIL(a, pm__now_ms() > k->last_rx_ms + 500, 20000);
    ck_assert_uint_eq(peer_events.downs, 0);
    ck_assert_uint_eq(pm__mesh_fails(a->mesh, PM__PF_TIMEOUT), 0);
    ck_assert_int_eq(pm_test_mesh_links_up(a->mesh), 1);
    pm_test_end_hosts(a, b);
}
END_TEST

START_TEST(test_links_give_back_secrets)
{
    /* A connection's key memory (its handshake and transport states) is
     * given back when it ends: links made and ended over and over hold no
     * more secret memory after the third than after the first (freed
     * blocks are wiped and reused, cipher.c). */
    int port;
    pm_cluster *b = start_b_here(&port);
    unsigned long after[4] = {0};
    for (unsigned i = 1; i <= 3; i++) {
        pid_t a = start_dialer("a", port, k1);
        PM_RUN_UNTIL(b, peer_events.ups == i && pm_test_mesh_links_up(b->mesh) == 1, 20000);
        kill(a, SIGKILL);
        pm_test_reap(a, 5000);
        PM_RUN_UNTIL(b, peer_events.downs == i && conns_open(b->mesh) == 0, 20000);
        after[i] = pm__secretmem_live();
    }
    ck_assert_msg(after[2] == after[1] && after[3] == after[1],
                  "secret blocks held after each link ended: %lu, %lu, %lu", after[1], after[2], after[3]);
    ck_assert_int_ge(pm_cluster_terminate(b), 0);
}
END_TEST

START_TEST(test_set_secrets_without_secret)
{
    /* A cluster started without a secret (Noise_XX) cannot be given one
     * later: the mode is chosen at start. */
    int port = pm_test_free_port();
    char listen[32];
    snprintf(listen, sizeof(listen), "127.0.0.1:%d", port);
    pm_options *o = host_options("b", NULL);
    ck_assert_int_eq(pm_options_set_insecure_no_secret(o, 1), 0);
    ck_assert_int_eq(pm_options_set_peer_listen(o, listen), 0);
    pm_cluster *b = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &b), 0);
    pm_options_free(o);
    ck_assert_int_eq(pm_cluster_set_secrets(b, k1, 1), -EINVAL);
    ck_assert_int_ge(pm_cluster_terminate(b), 0);
}
END_TEST

/* --------------------------------------------------- the daemon on SIGHUP */

/* Writes key (32 bytes) to path as 64 hex characters, mode 0600, replacing
 * the file at once (rename), as a Secret volume does. */
static void write_key(const char *path, const unsigned char *key)
{
    char tmp[256], hex[65];
    snprintf(tmp, sizeof(tmp), "%s.tmp", path);
    for (int i = 0; i < 32; i++)
        snprintf(hex + 2 * i, 3, "%02x", key[i]);
    int fd = open(tmp, O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(write(fd, hex, 64), 64);
    ck_assert_int_eq(write(fd, "\n", 1), 1);
    close(fd);
    ck_assert_int_eq(rename(tmp, path), 0);
}

/* dir/name, its path in path, written with key (write_key). */
static void key_file(char path[static 128], const char *dir, const char *name, const unsigned char *key)
{
    snprintf(path, 128, "%s/%s", dir, name);
    write_key(path, key);
}

START_TEST(test_daemon_key_reload_during_start)
{
    /* A SIGUSR2 sent while the workers are still starting is kept and acted
     * on once they are (procmesh(1), SIGNALS), never dropped: the key file
     * may have changed since the daemon read it. The worker says ready only
     * once the test has signalled: kill() returns with the signal pending
     * on the daemon, which takes it before it next runs any code of its
     * own, so before it reads that READY. */
    char dir[] = "/tmp/pm-early-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char b1[128], go[160], listen[32];
    key_file(b1, dir, "b", k1);
    snprintf(go, sizeof(go), "%s/go", dir);
    http_free_listen(listen, sizeof(listen));
    char *argv[] = {"procmesh", "run", "--system-name", "t", "--hostname", "b",
                    "--base-port", "10", "--workers", "1", "--peer-listen", listen,
                    "--secret-file", b1, "--", PM_TEST_WORKER, "ready-on", go, NULL};
    proc b = proc_start(PM_DAEMON_BIN, argv, STDERR_FILENO, NULL);
    proc_wait_log(&b, "event=started slot=0", 1, 20000);
    ck_assert_int_eq(count_of(b.log, "event=ready slot=0"), 0);
    write_key(b1, k2); /* the key changed after the daemon read it */
    kill(b.pid, SIGUSR2);
    int fd = open(go, O_WRONLY | O_CREAT | O_CLOEXEC, 0600);
    ck_assert_int_ge(fd, 0);
    close(fd);
    proc_wait_log(&b, "event=ready slot=0", 1, 20000);
    proc_wait_log(&b, "event=peer_keys_reloaded secrets=1", 1, 20000);
    ck_assert_msg(count_of(b.log, "event=exited") == 0, "a worker exited:\n%s", b.log);
    kill(b.pid, SIGTERM);
    static char out[1 << 16];
    ck_assert_int_eq(proc_finish(&b, out, sizeof(out), 20000), 0);
    unlink(go);
    unlink(b1);
    rmdir(dir);
}
END_TEST

START_TEST(test_daemon_key_reload_rotation)
{
    /* Daemons on 127.0.0.1. b holds K1 and K3 (the next secret's file
     * holds a stale key); c (K1) links. a has K2 only: refused. b's next
     * file becomes K2, SIGUSR2: b logs the reload, a links, c's link stays.
     * Then the rotation's last step: b's first file becomes K2 and the next
     * one is removed, SIGUSR2: one secret, the links stay. Key reload
     * restarts nothing: b's worker keeps its incarnation throughout. A
     * SIGHUP re-reads the keys too, and replaces the worker. */
    char dir[] = "/tmp/pm-rot-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char b1[128], b2[128], fa[128], fc[128], listen[32];
    key_file(b1, dir, "b-current", k1);
    key_file(b2, dir, "b-next", k3);
    key_file(fa, dir, "a", k2);
    key_file(fc, dir, "c", k1);
    http_free_listen(listen, sizeof(listen));
    proc b = proc_start_sleeper("b", listen, 0, b1, b2);
    proc c = proc_start_sleeper("c", listen, 1, fc, NULL);
    proc_wait_log(&b, "event=peer_up host=c", 1, 20000);
    proc a = proc_start_sleeper("a", listen, 1, fa, NULL);
    /* a dials and is refused (a wrong key id) until b knows K2: b's log
     * shows no link with a before the reload. */
    proc_wait_log(&b, "event=ready slot=0 pid=", 1, 20000);
    write_key(b2, k2);
    ck_assert_int_eq(count_of(b.log, "event=peer_up host=a"), 0);
    kill(b.pid, SIGUSR2);
    proc_wait_log(&b, "event=peer_keys_reloaded secrets=2", 1, 20000);
    proc_wait_log(&b, "event=peer_up host=a", 1, 20000);
    proc_wait_log(&a, "event=peer_up host=b", 1, 20000);

    write_key(b1, k2);
    ck_assert_int_eq(unlink(b2), 0);
    kill(b.pid, SIGUSR2);
    proc_wait_log(&b, "event=peer_keys_reloaded secrets=1", 1, 20000);
    /* A bad file keeps the keys in use. */
    int fd = open(b1, O_WRONLY | O_TRUNC | O_CLOEXEC);
    ck_assert_int_ge(fd, 0);
    close(fd);
    kill(b.pid, SIGUSR2);
    proc_wait_log(&b, "event=peer_keys_reload_failed", 1, 20000);
    ck_assert_msg(count_of(b.log, "event=peer_down") == 0, "a link went down over the rotation:\n%s", b.log);
    /* Nothing restarted: one start, no exit, no rolling restart. */
    ck_assert_msg(count_of(b.log, "event=started") == 1 && count_of(b.log, "event=exited") == 0 &&
                      count_of(b.log, "event=rolling_restart_begin") == 0,
                  "a key reload restarted a worker:\n%s", b.log);
    /* SIGHUP: the same reload, then the rolling restart. */
    write_key(b1, k2);
    kill(b.pid, SIGHUP);
    proc_wait_log(&b, "event=peer_keys_reloaded secrets=1", 2, 20000);
    proc_wait_log(&b, "event=rolling_restart_end", 1, 20000);
    ck_assert_msg(count_of(b.log, "event=started") == 2, "SIGHUP did not replace the worker:\n%s", b.log);
    proc_free(&a);
    proc_free(&c);
    proc_free(&b);
    ck_assert_int_eq(proc_remove_dir(dir), 0);
}
END_TEST

START_TEST(test_daemon_logs_refused_and_shutdown)
{
    /* b (K1) listens; c (K1) links with it; a (K2) dials it and is refused
     * at the preamble (an unknown key id). An operator sees why in b's log
     * without reading /metrics: one peer_refused line with a's address,
     * the reason and the count it stands for (a redials, but the next line
     * for that address and reason waits a minute). a logs its side: b
     * closed its handshake. Then c stops (SIGTERM): its link logs peer_down
     * as procmesh(1) says. */
    char dir[] = "/tmp/pm-refused-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char fb[128], fa[128], listen[32], needle[96];
    key_file(fb, dir, "b", k1);
    key_file(fa, dir, "a", k2);
    int port = http_free_listen(listen, sizeof(listen));
    proc b = proc_start_sleeper("b", listen, 0, fb, NULL);
    proc c = proc_start_sleeper("c", listen, 1, fb, NULL);
    proc_wait_log(&b, "event=peer_up host=c", 1, 20000);
    proc_wait_log(&c, "event=peer_up host=b", 1, 20000);
    proc a = proc_start_sleeper("a", listen, 1, fa, NULL);
    proc_wait_log(&b, "event=peer_refused address=127.0.0.1 reason=key_id count=1", 1, 20000);
    snprintf(needle, sizeof(needle), "event=peer_refused address=127.0.0.1:%d reason=truncated count=1", port);
    proc_wait_log(&a, needle, 1, 20000);
    /* a's second refusal (its redial backoff starts at 100 ms) is held
     * back: a's own line for it comes only after a minute too. */
    ck_assert_int_eq(count_of(b.log, "event=peer_refused"), 1);
    ck_assert_int_eq(count_of(b.log, "event=peer_up host=a"), 0);
    kill(c.pid, SIGTERM);
    proc_wait_log(&c, "event=peer_down host=b", 1, 20000);
    ck_assert_msg(strstr(c.log, "reason=local") != NULL, "c's peer_down at shutdown:\n%s", c.log);
    proc_wait_log(&b, "event=peer_down host=c", 1, 20000);
    proc_free(&a);
    proc_free(&c);
    proc_free(&b);
    ck_assert_int_eq(proc_remove_dir(dir), 0);
}
END_TEST

/* -------------------------------------------------------------- records */

#define BURST 64

static unsigned burst_ok, burst_other;
static int probe_rc;
static unsigned probe_done;

static void on_burst(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    if (m->error == 0)
        burst_ok++;
    else
        burst_other++;
}

static void on_probe(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    probe_rc = m->error;
    probe_done++;
}

START_TEST(test_records_per_link)
{
    /* a's supervisor asks b's echo worker BURST requests at once: they go
     * out in one loop turn and share FRAMES records, so a's link shows
     * fewer records than frames out, and at most as many as frames in. */
    pid_t b;
    pm_cluster *a = start_pair(&b);
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1, 20000);
    pm_address to;
    ck_assert_int_eq(pm_address_parse("t@b:10", &to), 0);
    /* Until b's worker is ready (-EHOSTDOWN while its slot starts). */
    uint64_t end = pm_test_ms() + 20000;
    probe_rc = -EHOSTDOWN;
    while (probe_rc != 0 && pm_test_ms() < end) {
        unsigned before = probe_done;
        ck_assert_int_gt(pm_cluster_request(a, &to, "p", 1, 5000, on_probe, NULL), 0);
        PM_RUN_UNTIL(a, probe_done > before, 10000);
        if (probe_rc != 0)
            ck_assert_int_ge(pm_cluster_run(a, 50), 0);
    }
    ck_assert_msg(probe_rc == 0, "b's worker never answered: %d", probe_rc);
    for (int i = 0; i < BURST; i++)
        ck_assert_int_gt(pm_cluster_request(a, &to, "burst", 5, 10000, on_burst, NULL), 0);
    PM_RUN_UNTIL(a, burst_ok + burst_other == BURST, 30000);
    ck_assert_uint_eq(burst_ok, BURST);
    pm_peer_info info;
    ck_assert_int_eq(pm_cluster_peers(a, &info, 1), 1);
    ck_assert_str_eq(info.host, "b");
    ck_assert_msg(info.frames_out >= BURST && info.records_out >= 1 &&
                      info.records_out < info.frames_out,
                  "out: %llu frames in %llu records", (unsigned long long)info.frames_out,
                  (unsigned long long)info.records_out);
    ck_assert_msg(info.frames_in >= BURST && info.records_in >= 1 &&
                      info.records_in <= info.frames_in,
                  "in: %llu frames in %llu records", (unsigned long long)info.frames_in,
                  (unsigned long long)info.records_in);
    pm_test_end_hosts(a, b);
}
END_TEST

/* -------------------------------------------------------------------- REKEY */

#define REKEY_REQUESTS 3000

/* a's worker: REKEY_REQUESTS requests to b's worker once the link is up,
 * each answered with its own payload; then tells a's supervisor. */
static int traffic_worker(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address to, main_a;
    if (pm_address_parse("t@b:10", &to) != 0 || pm_address_parse("t@a:0", &main_a) != 0)
        return 1;
    char text[64];
    pm_message r;
    int rc = pm_test_request_linked(n, &to, "first", 5, 5000, &r, 1200);
    int i = 0;
    for (; rc == 0 && i < REKEY_REQUESTS; i++) {
        char q[32];
        int len = snprintf(q, sizeof(q), "q%d", i);
        rc = pm_node_request(n, &to, q, (size_t)len, 10000, &r);
        if (rc == 0 && (r.len != (size_t)len || memcmp(r.data, q, r.len) != 0))
            rc = -EBADMSG;
    }
    snprintf(text, sizeof(text), rc == 0 ? "OK %d" : "ERR %d at %d", rc == 0 ? i : rc, i);
    pm_node_send(n, &main_a, text, strlen(text));
    pm_message m;
    for (;;)
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
}

static char report[128];

static void on_report(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    size_t n = m->len < sizeof(report) - 1 ? m->len : sizeof(report) - 1;
    memcpy(report, m->data, n);
    report[n] = '\0';
}

START_TEST(test_rekey_under_traffic)
{
    /* Both hosts REKEY every 4 records or 20 ms: thousands of requests
     * and replies cross the link through hundreds of key changes in each
     * direction, every one answered with its own payload. */
    int port = pm_test_free_port();
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm_options *o = host_options("b", k1);
        pm_test_options_set_rekey(o, 4, 20);
        pm_test_serve_host(o, port, 0);
    }
    pm_options *o = host_options("a", k1);
    pm_test_options_set_rekey(o, 4, 20);
    ck_assert_int_eq(pm_options_set_bootstrap(o, traffic_worker, NULL), 0);
    ck_assert_int_eq(pm_options_set_on_message(o, on_report, NULL), 0);
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    ck_assert_int_eq(pm_options_add_peer(o, peer), 0);
    pm_cluster *a = NULL;
    ck_assert_int_eq(pm_cluster_spawn(o, &a), 0);
    pm_options_free(o);
    report[0] = '\0';
    PM_RUN_UNTIL(a, report[0] != '\0', 60000);
    char want[32];
    snprintf(want, sizeof(want), "OK %d", REKEY_REQUESTS);
    ck_assert_str_eq(report, want);
    uint64_t out, in;
    pm_test_mesh_rekeys(a->mesh, &out, &in);
    ck_assert_msg(out >= 100 && in >= 100, "REKEY records sent %llu, received %llu",
                  (unsigned long long)out, (unsigned long long)in);
    ck_assert_uint_eq(pm_test_mesh_links_up(a->mesh), 1);
    pm_test_end_hosts(a, pid);
}
END_TEST

START_TEST(test_backoff_ends_with_a_link)
{
    /* doc/protocol.md 2: redials after failures back off, and a link that
     * comes up starts the backoff again. a dials b (its one configured
     * peer, target 0) before b listens: the refused dials grow the
     * target's backoff; b starts, the link comes up, and the backoff is
     * back to none (mesh_conn.c conn_up, for every target, the first
     * included). */
    int port = pm_test_free_port();
    char peer[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    pm_cluster *a = start_a(NULL, peer, k1);
    PM_RUN_UNTIL(a, a->mesh->backoff_ms[0] > 0, 20000);
    pid_t b = start_b(port, k1, NULL, 0);
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1, 30000);
    ck_assert_uint_eq(a->mesh->backoff_ms[0], 0);
    pm_test_end_hosts(a, b);
}
END_TEST

/* The linked connection of a's mesh (the first), or NULL. */
static const pm__mesh_conn *linked_conn(const pm_cluster *a)
{
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        if (a->mesh->conns[j].fd >= 0 && a->mesh->conns[j].linked)
            return &a->mesh->conns[j];
    return NULL;
}

/* A listener whose accept queue is full (backlog 0, one connection queued
 * and never taken): a dial to it stays in its TCP handshake, its SYNs
 * dropped (Linux drops a SYN for a full accept queue before any SYN
 * cookie). The listener's port in *port; the queued client in *client. */
static int listen_full(int *port, int *client)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(l, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_port = 0};
    sa.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    ck_assert_int_eq(bind(l, (struct sockaddr *)&sa, sizeof(sa)), 0);
    ck_assert_int_eq(listen(l, 0), 0);
    socklen_t len = sizeof(sa);
    ck_assert_int_eq(getsockname(l, (struct sockaddr *)&sa, &len), 0);
    *port = ntohs(sa.sin_port);
    *client = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    ck_assert_int_ge(*client, 0);
    ck_assert_int_eq(connect(*client, (struct sockaddr *)&sa, sizeof(sa)), 0);
    /* Queued (its handshake's last ACK taken: a listener's tcpi_unacked
     * is its accept queue's length), so the next SYN finds it full. */
    uint64_t end = pm_test_ms() + 20000;
    struct tcp_info ti;
    socklen_t tl;
    do {
        memset(&ti, 0, sizeof(ti));
        tl = sizeof(ti);
        ck_assert_int_eq(getsockopt(l, IPPROTO_TCP, TCP_INFO, &ti, &tl), 0);
    } while (ti.tcpi_unacked < 1 && pm_test_ms() < end && usleep(1000) == 0);
    ck_assert_uint_ge(ti.tcpi_unacked, 1);
    return l;
}

/* The entry of pm_cluster_peers' list in state st, or NULL. */
static const pm_peer_info *info_in(const pm_peer_info *pi, int n, const char *st)
{
    for (int i = 0; i < n; i++)
        if (strcmp(pi[i].state, st) == 0)
            return &pi[i];
    return NULL;
}

/* pm_cluster_peers(3), field by field (procmesh.h pm_peer_info): a's link
 * to b after three calls (b's host and incarnation, a the initiator, the
 * frames, their bytes with their headers, the records that carried them,
 * nothing dropped, its age since the connection); a handshake with a
 * listener that never answers ("handshake", no host or incarnation yet);
 * a dial whose SYN a full accept queue drops ("connecting"), which a
 * stale completion does not take for connected. The count is returned
 * whatever cap is, and nothing is written past cap. */
START_TEST(test_peer_info_fields)
{
    uint64_t t0 = pm_test_ms();
    pid_t b;
    pm_cluster *a = start_pair(&b);
    pm__mesh *m = a->mesh;
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    uint64_t t_up = pm_test_ms();
    call_b(a, "one", 1);
    call_b(a, "two", 0);
    call_b(a, "three", 0);
    usleep(50 * 1000);
    pm_peer_info pi[4];
    ck_assert_int_eq(pm_cluster_peers(a, pi, 4), 1);
    uint64_t now = pm_test_ms();
    ck_assert_str_eq(pi[0].host, "b");
    ck_assert_str_eq(pi[0].state, "up");
    ck_assert_int_eq(pi[0].initiator, 1);
    ck_assert_uint_eq(pi[0].incarnation & 1u, 1); /* random | 1: never 0 */
    ck_assert_uint_ge(pi[0].frames_out, 3);
    ck_assert_uint_ge(pi[0].frames_in, 3);
    ck_assert_uint_ge(pi[0].bytes_out, pi[0].frames_out * PM__FRAME_HDR_SIZE);
    ck_assert_uint_ge(pi[0].bytes_in, pi[0].frames_in * PM__FRAME_HDR_SIZE);
    ck_assert(pi[0].records_out >= 1 && pi[0].records_out <= pi[0].frames_out);
    ck_assert(pi[0].records_in >= 1 && pi[0].records_in <= pi[0].frames_in);
    ck_assert_uint_eq(pi[0].frames_forged, 0);
    ck_assert_uint_eq(pi[0].frames_malformed, 0);
    ck_assert_msg(pi[0].age_ms >= now - t_up && pi[0].age_ms <= now - t0 + 1,
                  "age %llu ms: the link came up %llu ms ago, the test began %llu ms ago",
                  (unsigned long long)pi[0].age_ms, (unsigned long long)(now - t_up),
                  (unsigned long long)(now - t0));

    int ls, lf, client, ps, pf;
    ls = listen_any(&ps);
    lf = listen_full(&pf, &client);
    pm__peerdns_addr at[2] = {addr_of(1, ps), addr_of(1, pf)};
    pm__mesh_dns_merge(m, at, 2);
    PM_RUN_UNTIL(a, pm_cluster_peers(a, pi, 4) == 3 && info_in(pi, 3, "handshake") != NULL, 20000);
    const pm_peer_info *h = info_in(pi, 3, "handshake"), *d = info_in(pi, 3, "connecting");
    ck_assert_ptr_nonnull(d);
    ck_assert_str_eq(h->host, "");
    ck_assert_uint_eq(h->incarnation, 0);
    ck_assert_int_eq(h->initiator, 1);
    ck_assert_str_eq(d->host, "");
    ck_assert_int_eq(d->initiator, 1);
    ck_assert_ptr_nonnull(info_in(pi, 3, "up"));

    /* A completion of an earlier arm of the dialling entry (a removal's,
     * say, which comes after the entry was taken again) is no news of
     * this connection: it is still connecting, not taken for connected. */
    int jd = -1;
    for (unsigned j = 0; j < PM__MESH_CONNS; j++)
        if (m->conns[j].fd >= 0 && m->conns[j].dialing)
            jd = (int)j;
    ck_assert_int_ge(jd, 0);
    pm__mesh_ready(m, PM__TAG(m->env.tag_conn, (unsigned)jd, m->conns[jd].gen - 1));
    ck_assert_int_eq(m->conns[jd].dialing, 1);
    ck_assert_int_eq(pm_cluster_peers(a, pi, 4), 3);
    ck_assert_ptr_nonnull(info_in(pi, 3, "connecting"));

    /* Three, whatever cap says; none written past it. */
    memset(pi, 0x5a, sizeof(pi));
    ck_assert_int_eq(pm_cluster_peers(a, pi, 1), 3);
    ck_assert_ptr_nonnull(pi[0].state);
    const unsigned char *after = (const unsigned char *)&pi[1];
    for (size_t i = 0; i < sizeof(pi) - sizeof(pi[0]); i++)
        ck_assert_uint_eq(after[i], 0x5a);
    ck_assert_int_eq(pm_cluster_peers(a, NULL, 0), 3);
    pm_test_end_hosts(a, b);
    close(client);
    close(lf);
    close(ls);
}
END_TEST

START_TEST(test_rtt_from_echoes_only)
{
    /* pm_peer_info.rtt_us is the round trip of the last heartbeat echo
     * (procmesh.h): it changes when a PONG comes back, and only then. a
     * waits for a first one, then asks b's echo worker request after
     * request (each a read of the link); over every request during which
     * no PONG came, the RTT a reports stays what it was, exactly
     * (mesh_conn.c's read: the echo counted seen, the RTT taken from a new
     * one only). */
    pid_t b;
    pm_cluster *a = start_pair(&b);
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1, 20000);
    pm_peer_info info;
    /* Before the first echo comes back: -1, none yet (not 0). */
    const pm__mesh_conn *k0 = linked_conn(a);
    ck_assert_ptr_nonnull(k0);
    uint64_t pongs0 = k0->pc.pongs;
    ck_assert_int_eq(pm_cluster_peers(a, &info, 1), 1);
    if (pongs0 == 0)
        ck_assert_int_eq(info.rtt_us, -1);
    PM_RUN_UNTIL(a, pm_cluster_peers(a, &info, 1) == 1 && info.rtt_us >= 0, 20000);
    pm_address to;
    ck_assert_int_eq(pm_address_parse("t@b:10", &to), 0);
    unsigned quiet = 0; /* requests answered with no PONG in between */
    for (int i = 0; i < 400 && quiet < 20; i++) {
        const pm__mesh_conn *k = linked_conn(a);
        ck_assert_ptr_nonnull(k);
        uint64_t pongs = k->pc.pongs;
        ck_assert_int_eq(pm_cluster_peers(a, &info, 1), 1);
        int64_t rtt = info.rtt_us;
        unsigned before = probe_done;
        ck_assert_int_gt(pm_cluster_request(a, &to, "p", 1, 5000, on_probe, NULL), 0);
        PM_RUN_UNTIL(a, probe_done > before, 10000);
        k = linked_conn(a);
        ck_assert_ptr_nonnull(k);
        ck_assert_int_eq(pm_cluster_peers(a, &info, 1), 1);
        if (probe_rc != 0 || k->pc.pongs != pongs)
            continue; /* b's worker not up yet, or a PONG came: the RTT may move */
        quiet++;
        ck_assert_msg(info.rtt_us == rtt, "the RTT moved from %lld to %lld us with no echo between",
                      (long long)rtt, (long long)info.rtt_us);
    }
    ck_assert_uint_ge(quiet, 20);
    pm_test_end_hosts(a, b);
}
END_TEST

/* -------------------------------------------------------- the orderly end */

typedef struct close_stats {
    uint64_t lingered, answered, expired, discarded;
    unsigned lingering;
} close_stats;

static close_stats closes(const pm_cluster *c)
{
    close_stats s;
    pm_test_mesh_close_stats(c->mesh, &s.lingered, &s.answered, &s.expired, &s.discarded, &s.lingering);
    return s;
}

/* A redial is the loop's deadline too: a's link to b (a configured peer)
 * ended in order, its redial brought to 3 s from now is made then and the
 * link comes back (run_until_event): not at the next other wake-up, nor
 * when a later deadline is due (the handshake of a's second peer, a
 * listener that never answers, and a redial time set for that peer). */
START_TEST(test_redial_on_time)
{
    int port = pm_test_free_port();
    pid_t b = start_b(port, k1, NULL, 0);
    int lport;
    int l = listen_any(&lport);
    char peer[32], silent[32];
    snprintf(peer, sizeof(peer), "127.0.0.1:%d", port);
    snprintf(silent, sizeof(silent), "127.0.0.1:%d", lport);
    pm_cluster *a = start_a_quiet(0, peer, silent, NULL);
    pm__mesh *m = a->mesh;
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    pm_test_mesh_close(m);
    ck_assert_int_ge(pm_cluster_run(a, 0), 0); /* the flush ends it: redial scheduled */
    ck_assert_uint_eq(peer_events.downs, 1);
    ck_assert_int_lt(m->dial_conn[0], 0);
    ck_assert_uint_gt(m->redial_at[0], 0);
    /* Held off while the connection lingers (b answers our CLOSE), so that
     * the run below has no deadline but the redial's. */
    m->redial_at[0] = pm__now_ms() + 60000;
    PM_RUN_UNTIL(a, closes(a).lingering == 0 && m->dial_conn[1] >= 0 && !m->conns[m->dial_conn[1]].dialing,
                 20000);
    ck_assert_int_lt(m->dial_conn[0], 0);
    uint64_t due = pm__now_ms() + 3000;
    m->redial_at[0] = due;
    m->redial_at[1] = due + 57000; /* the other peer's, later (never due: it is dialled) */
    uint64_t took = run_until_event(a, PM_EVENT_PEER_UP);
    ck_assert_uint_eq(peer_events.ups, 2);
    ck_assert_uint_ge(pm__now_ms(), due);
    ck_assert_msg(took < 30000, "redialled after %llu ms (due after 3 s)", (unsigned long long)took);
    pm_test_end_hosts(a, b);
    close(l);
}
END_TEST

START_TEST(test_orderly_close)
{
    /* a ends its link as a stop or a replaced link does (CLOSE reason 0):
     * it shuts down its writing half and reads until b's CLOSE, which b
     * sends only in answer to ours (doc/protocol.md 7); then a closes the
     * fd. When a has redialled, a holds as many fds as with the first link:
     * nothing of the ended connection is left. */
    pid_t b;
    pm_cluster *a = start_pair(&b);
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1, 20000);
    size_t fds_linked = pm_test_count_fds();
    pm_test_mesh_close(a->mesh);
    PM_RUN_UNTIL(a, closes(a).answered == 1 && closes(a).lingering == 0, 20000);
    close_stats s = closes(a);
    ck_assert_uint_eq(s.lingered, 1);
    ck_assert_uint_eq(s.expired, 0);
    ck_assert_uint_eq(pm__mesh_fails(a->mesh, PM__PF_LOCAL), 1);
    ck_assert_uint_eq(pm__mesh_fails(a->mesh, PM__PF_TRUNCATED), 0);
    ck_assert_uint_eq(peer_events.downs, 1);
    /* a configured peer: redialled after its backoff */
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1 && peer_events.ups == 2, 20000);
    ck_assert_uint_eq(pm_test_count_fds(), fds_linked);
    pm_test_end_hosts(a, b);
}
END_TEST

START_TEST(test_orderly_close_silent_peer)
{
    /* b is stopped: it never answers a's CLOSE. a waits at most
     * min(peer timeout, 1 s), then closes the fd anyway. */
    pid_t b;
    pm_cluster *a = start_pair(&b);
    PM_RUN_UNTIL(a, pm_test_mesh_links_up(a->mesh) == 1, 20000);
    ck_assert_int_eq(kill(b, SIGSTOP), 0);
    pm_test_mesh_close(a->mesh);
    PM_RUN_UNTIL(a, closes(a).expired == 1 && closes(a).lingering == 0, 20000);
    close_stats s = closes(a);
    ck_assert_uint_eq(s.lingered, 1);
    ck_assert_uint_eq(s.answered, 0);
    pm_test_end_hosts(a, b);
}
END_TEST

/* A lingering connection on fd 0 ends as any other: a's link to b (its
 * dial on fd 0) closed in order while b is stopped waits for b's CLOSE at
 * most min(peer timeout, 1 s), then is closed (test_orderly_close_silent_peer). */
START_TEST(test_linger_on_fd_zero)
{
    int port = pm_test_free_port();
    pid_t b = start_b(port, k1, NULL, 0);
    pm_cluster *a = start_a_quiet(0, NULL, NULL, NULL);
    pm__mesh *m = a->mesh;
    pm__peerdns_addr at_b = addr_of(1, port);
    pm__mesh_dns_merge(m, &at_b, 1);
    int jb = dialled(m, 0);
    ck_assert_int_eq(m->conns[jb].fd, 0);
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    /* The target given up, its link kept as a link of its own: its end
     * brings no redial, whose socket would take fd 0 and the entry. */
    pm__mesh_dns_merge(m, NULL, 0);
    ck_assert_int_eq(pm_test_mesh_links_up(m), 1);
    ck_assert_int_eq(kill(b, SIGSTOP), 0);
    pm_test_mesh_close(m);
    PM_RUN_UNTIL(a, closes(a).lingering == 1 || closes(a).expired == 1, 20000);
    if (closes(a).lingering == 1) {
        /* Its bound is due at its own millisecond (pm__mesh_fire given
         * that reading of the clock; the loop's timer wakes in it). */
        /* No link any more: pm_cluster_peers does not list it. */
        ck_assert_int_eq(pm_cluster_peers(a, NULL, 0), 0);
        uint64_t now = pm__now_ms();
        m->conns[jb].deadline_ms = now;
        pm__mesh_fire(m, now);
        ck_assert_uint_eq(closes(a).lingering, 0);
    }
    ck_assert_uint_eq(closes(a).expired, 1);
    ck_assert_uint_eq(closes(a).lingered, 1);
    ck_assert_uint_eq(closes(a).answered, 0);
    ck_assert_int_lt(m->conns[jb].fd, 0);
    ck_assert_int_eq(kill(b, SIGCONT), 0);
    pm_test_end_hosts(a, b);
}
END_TEST

/* Bytes waiting in fd's receive queue. */
static int unread(int fd)
{
    int n = 0;
    ck_assert_int_eq(ioctl(fd, FIONREAD, &n), 0);
    return n;
}

/* Every deadline of a link is due at its own millisecond: the loop's
 * timer is set for that millisecond (turn.c), and a fire that waited for
 * the next one would find nothing due when it wakes, and the loop would
 * turn without rest until the millisecond passed. pm__mesh_fire is given
 * the reading of the clock each deadline is made equal to: the REKEY
 * goes (mesh.c, and mesh_conn.c's bound by time), the heartbeat goes; b's
 * answer to it, waiting unread, is read by the silence check before it
 * judges, and the link lives (the stall rule); b's silence (b stopped,
 * what it sent before read) ends the link, the
 * configured peer's redial dials, and that handshake's deadline ends it.
 * test_linger_on_fd_zero does the same for a linger's bound,
 * test_dns_refresh_on_time for the next resolution. */
START_TEST(test_deadlines_due_at_their_millisecond)
{
    pid_t b;
    pm_cluster *a = start_pair(&b);
    pm__mesh *m = a->mesh;
    PM_RUN_UNTIL(a, peer_events.ups == 1 && pm_test_mesh_links_up(m) == 1, 20000);
    pm__mesh_conn *k = pm_test_mesh_up_conn(m);
    ck_assert_ptr_nonnull(k);

    uint64_t now = pm__now_ms(), r0 = rekeys_out(a);
    k->rekey_at_ms = now;
    pm__mesh_fire(m, now);
    ck_assert_uint_eq(rekeys_out(a), r0 + 1);

    uint32_t idle = k->pc.peer.idle_ms < PM__PEER_IDLE_MIN_MS ? PM__PEER_IDLE_MIN_MS : k->pc.peer.idle_ms;
    now = pm__now_ms();
    k->last_ping_ms = now - idle / 3u;
    ck_assert_uint_eq(pm__mesh_conn_heartbeat_at(k), now);
    pm__mesh_fire(m, now);
    ck_assert_uint_eq(k->last_ping_ms, now); /* sent */

    /* The stall rule at the silence's own millisecond: b's answer to that
     * heartbeat waits unread (a's loop has not run), as a stopped
     * supervisor finds its peer's records when it runs again; the silence
     * check reads it first, and the link lives. */
    uint64_t end = pm_test_ms() + 20000;
    while (unread(k->fd) == 0 && pm_test_ms() < end)
        usleep(1000);
    ck_assert_int_gt(unread(k->fd), 0);
    now = pm__now_ms();
    k->last_rx_ms = now - (uint64_t)m->env.cfg.timeout_ms;
    pm__mesh_fire(m, now);
    ck_assert_int_eq(pm_test_mesh_links_up(m), 1);
    ck_assert_uint_gt(k->last_rx_ms, now - (uint64_t)m->env.cfg.timeout_ms);

    /* b stopped, and what it sent before (its answers) read: the silence
     * check's own read finds nothing. */
    ck_assert_int_eq(kill(b, SIGSTOP), 0);
    int st;
    ck_assert_int_eq(waitpid(b, &st, WUNTRACED), b);
    ck_assert(WIFSTOPPED(st));
    PM_RUN_UNTIL(a, k->fd < 0 || unread(k->fd) == 0, 20000);
    ck_assert_int_ge(k->fd, 0);
    uint64_t timeouts = pm__mesh_fails(m, PM__PF_TIMEOUT);
    now = pm__now_ms();
    k->last_rx_ms = now - (uint64_t)m->env.cfg.timeout_ms;
    pm__mesh_fire(m, now);
    ck_assert_uint_eq(pm__mesh_fails(m, PM__PF_TIMEOUT), timeouts + 1);
    ck_assert_int_eq(pm_test_mesh_links_up(m), 0);

    ck_assert_int_lt(m->dial_conn[0], 0);
    ck_assert_uint_ne(m->redial_at[0], 0);
    now = pm__now_ms();
    m->redial_at[0] = now;
    pm__mesh_fire(m, now);
    int j = m->dial_conn[0];
    ck_assert_int_ge(j, 0); /* dialled */

    now = pm__now_ms();
    m->conns[j].deadline_ms = now;
    pm__mesh_fire(m, now);
    ck_assert_uint_eq(pm__mesh_fails(m, PM__PF_TIMEOUT), timeouts + 2);
    ck_assert_int_lt(m->conns[j].fd, 0);
    ck_assert_int_eq(kill(b, SIGCONT), 0);
    pm_test_end_hosts(a, b);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("peerops");
    PM_ADD_TEST(s, test_dns_links, 60);
    PM_ADD_TEST(s, test_dns_self_skipped, 60);
    PM_ADD_TEST(s, test_dns_unresolvable_retried, 60);
    PM_ADD_TEST(s, test_dns_resolve_armed, 90);
    PM_ADD_TEST(s, test_dns_target_failure_redialled, 60);
    PM_ADD_TEST(s, test_configured_peer_self, 60);
    PM_ADD_TEST(s, test_dns_merge_rows, 60);
    PM_ADD_TEST(s, test_dns_target_of_linked_host, 60);
    PM_ADD_TEST(s, test_link_on_fd_zero, 120);
    PM_ADD_TEST(s, test_handshake_deadline_on_fd_zero, 120);
    PM_ADD_TEST(s, test_dns_refresh_on_time, 120);
    PM_ADD_TEST(s, test_refused_flush_on_time, 120);
    PM_ADD_TEST(s, test_redial_on_time, 120);
    PM_ADD_TEST(s, test_deadlines_due_at_their_millisecond, 120);
    PM_ADD_TEST(s, test_peer_info_fields, 120);
    PM_ADD_TEST(s, test_rotation_without_downtime, 90);
    PM_ADD_TEST(s, test_set_secrets_frees_old, 60);
    PM_ADD_TEST(s, test_key_files_refused_at_spawn, 30);
    PM_ADD_TEST(s, test_no_listener_keeps_stdin, 30);
    PM_ADD_TEST(s, test_stalled_supervisor_keeps_link, 60);
    PM_ADD_TEST(s, test_links_give_back_secrets, 90);
    PM_ADD_TEST(s, test_set_secrets_without_secret, 30);
    PM_ADD_TEST(s, test_daemon_key_reload_during_start, 60);
    PM_ADD_TEST(s, test_daemon_key_reload_rotation, 90);
    PM_ADD_TEST(s, test_daemon_logs_refused_and_shutdown, 90);
    PM_ADD_TEST(s, test_rekey_under_traffic, 120);
    PM_ADD_TEST(s, test_rekey_default_bounds, 60);
    PM_ADD_TEST(s, test_records_per_link, 60);
    PM_ADD_TEST(s, test_rtt_from_echoes_only, 90);
    PM_ADD_TEST(s, test_backoff_ends_with_a_link, 90);
    PM_ADD_TEST(s, test_orderly_close, 60);
    PM_ADD_TEST(s, test_orderly_close_silent_peer, 60);
    PM_ADD_TEST(s, test_linger_on_fd_zero, 60);
    return pm_test_main(s);
}
