/* SPDX-License-Identifier: MIT */
/* peer.c - pm-bench peer: two supervisors linked over loopback TCP (ChaChaPoly and a null cipher) beside plain TCP; handshake time; idle CPU. */
#define _GNU_SOURCE
#include "bench.h"
#include "peer/noise.h"
#include "peer/peer.h"
#include "peer/peerkeys.h"

#include <arpa/inet.h>
#include <inttypes.h>
#include <netinet/in.h>
#include <netinet/tcp.h>
#include <poll.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/prctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <time.h>

#include <sodium.h>

/*
 * Host b (a forked process: its supervisor, one fork-mode worker at t@b:10)
 * listens on a loopback port; host a (another process, worker t@a:10) dials
 * it. a's worker drives everything: round trips to b's worker, then a
 * stream of each frame size. A stream is paced by procmesh alone, as a
 * user's would be: a's worker sends every frame with pm_node_send, and when
 * the link cannot take more (its output queue full, or b's credit window
 * for t@b:10 used up) a's hub holds the frame in the worker's ring, which
 * then fills and makes pm_node_send wait for space (src/hub/hub_link.c). Until
 * stop 18 a full link dropped frames instead, and the stream kept its own
 * window of 32 frames of 4 KiB acknowledged by b: that window, not the
 * link, then set the rate (190-200 MB/s against 680-800 MB/s without it,
 * same run). Each run is repeated with the null
 * cipher below, installed in both host processes before they start.
 */

/* ------------------------------------------------------------------ the null cipher */

/*
 * Copies the plaintext and appends a zero tag; decryption checks the tag is
 * zero, so a framing error still fails as it would with ChaChaPoly. It lives
 * here only: Makefile.am builds this file into pm-bench and nothing else,
 * and tests/layers.sh fails when a library or daemon object other than
 * cipher.c refers to pm__noise_transport_aead, the table set_aead points.
 * in and out may be the same buffer (memmove).
 */
static void null_encrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                         size_t ad_len, const void *in, size_t len)
{
    (void)k;
    (void)n;
    (void)ad;
    (void)ad_len;
    memmove(out, in, len);
    memset(out + len, 0, PM__NOISE_TAG_LEN);
}

static int null_decrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                        size_t ad_len, const unsigned char *in, size_t len)
{
    (void)k;
    (void)n;
    (void)ad;
    (void)ad_len;
    static const unsigned char zero[PM__NOISE_TAG_LEN];
    if (len < PM__NOISE_TAG_LEN || memcmp(in + len - PM__NOISE_TAG_LEN, zero, PM__NOISE_TAG_LEN) != 0)
        return -1;
    memmove(out, in, len - PM__NOISE_TAG_LEN);
    return 0;
}

static const pm__noise_aead null_aead = {null_encrypt, null_decrypt};

/* The transport's cipher from now on, process-wide (cipher.h): call it
 * before any link exists. NULL: the product's ChaChaPoly. */
static void set_aead(const pm__noise_aead *aead)
{
    static const pm__noise_aead chachapoly = {pm__noise_aead_encrypt, pm__noise_aead_decrypt};
    pm__noise_transport_aead = aead != NULL ? aead : &chachapoly;
}

/* ------------------------------------------------------------------ shared state */

#define NSIZES 2
static const size_t stream_sizes[NSIZES] = {64, 4096};

/* Shared by pm-bench, both host processes and their fork-mode workers
 * (MAP_SHARED, made before any fork). */
struct peer_shared {
    uint64_t frames[NSIZES];
    unsigned rounds;
    _Atomic int done;   /* a's worker finished (1) or failed (2) */
    char why[160];      /* what failed */
    uint64_t stream_ns[NSIZES];
    uint64_t received[NSIZES]; /* frames b's worker counted */
    uint64_t dropped[NSIZES];  /* undeliverable notices a's worker got */
    /* a's worker marks the start (2k + 1) and end (2k + 2) of stream k and
     * waits until pm-bench has read the CPU time of all four processes
     * (ack), outside the timed part. */
    _Atomic int phase, ack;
    uint64_t samples[];        /* round trips, ns */
};

static struct peer_shared *psh;

static const unsigned char bench_secret[32] = {'p', 'm', '-', 'b', 'e', 'n', 'c', 'h'};

static void fail_with(const char *what, int rc)
{
    snprintf(psh->why, sizeof(psh->why), "%s: %s", what, pm_strerror(rc));
    atomic_store(&psh->done, 2);
}

/* ------------------------------------------------------------------ the workers */

/* b's worker: echoes requests, counts stream frames, answers "end" with
 * the count of frames it got since the last "end". */
static int worker_b(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    uint64_t count = 0;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            continue;
        if (m.kind == PM_MSG_REQUEST) {
            if (m.len == 3 && memcmp(m.data, "end", 3) == 0) {
                pm_node_reply(n, &m, &count, sizeof(count));
                count = 0;
            } else {
                pm_node_reply(n, &m, m.data, m.len);
            }
        } else if (m.kind == PM_MSG_PLAIN && m.len >= sizeof(uint64_t)) {
            count++;
        }
    }
}

/* Sequence numbers of stream k start at k << 40 (a frame's first 8 bytes). */
#define SEQ_BASE(k) ((uint64_t)(k) << 40)

/* Counts the undeliverable notices waiting in a's worker after a stream
 * (none are expected: a held sender is never answered -ENOBUFS). */
static uint64_t drain_notices(pm_node *n)
{
    uint64_t dropped = 0;
    pm_message m;
    while (pm_node_recv(n, &m, 0) == 0)
        if (m.kind == PM_MSG_UNDELIVERABLE)
            dropped++;
    return dropped;
}

/* Marks a phase and waits for pm-bench to take its CPU snapshot. */
static void mark(int phase)
{
    atomic_store(&psh->phase, phase);
    uint64_t t0 = pm__now_ns();
    while (atomic_load(&psh->ack) != phase && pm__now_ns() - t0 < 10000000000ull)
        usleep(200);
}

/* One stream of frames of `size` bytes to b's worker, paced by the link's
 * backpressure; the time is from the first send to the reply to "end",
 * which follows every frame on the link. */
static int stream(pm_node *n, const pm_address *to, int k)
{
    size_t size = stream_sizes[k];
    unsigned char *buf = calloc(1, size);
    if (buf == NULL)
        return -ENOMEM;
    uint64_t base = SEQ_BASE(k);
    int rc = 0;
    mark(2 * k + 1);
    uint64_t t0 = pm__now_ns();
    for (uint64_t i = 0; i < psh->frames[k] && rc == 0; i++) {
        uint64_t seq = base + i;
        memcpy(buf, &seq, sizeof(seq));
        rc = pm_node_send(n, to, buf, size);
    }
    pm_message r;
    if (rc == 0)
        rc = pm_node_request(n, to, "end", 3, 30000, &r);
    if (rc == 0 && r.len == sizeof(uint64_t)) {
        psh->stream_ns[k] = pm__now_ns() - t0;
        memcpy(&psh->received[k], r.data, sizeof(uint64_t));
        psh->dropped[k] = drain_notices(n);
    }
    mark(2 * k + 2);
    free(buf);
    return rc;
}

/* a's worker: waits for the link, then round trips, then the streams. */
static int worker_a(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_address to;
    if (pm_address_parse("t@b:10", &to) != 0)
        return 1;
    unsigned char ping[64] = {0};
    pm_message r;
    int rc = -EHOSTUNREACH;
    /* Until the link is up (a few redials at most) and b's worker is ready
     * (before that b's hub answers -EHOSTDOWN). */
    for (int i = 0; i < 3000 && (rc == -EHOSTUNREACH || rc == -EHOSTDOWN || rc == -ENOENT); i++) {
        rc = pm_node_request(n, &to, ping, sizeof(ping), 5000, &r);
        if (rc < 0)
            usleep(10 * 1000);
    }
    if (rc < 0) {
        fail_with("the link to b did not come up", rc);
        goto idle;
    }
    for (unsigned i = 0; i < 200; i++) /* warm-up, not timed */
        if ((rc = pm_node_request(n, &to, ping, sizeof(ping), 5000, &r)) < 0)
            break;
    for (unsigned i = 0; i < psh->rounds && rc == 0; i++) {
        uint64_t t0 = pm__now_ns();
        rc = pm_node_request(n, &to, ping, sizeof(ping), 5000, &r);
        psh->samples[i] = pm__now_ns() - t0;
    }
    if (rc < 0) {
        fail_with("request/reply to b", rc);
        goto idle;
    }
    for (int k = 0; k < NSIZES; k++) {
        if ((rc = stream(n, &to, k)) < 0) {
            fail_with(k == 0 ? "stream of 64 B frames" : "stream of 4 KiB frames", rc);
            goto idle;
        }
    }
    atomic_store(&psh->done, 1);
idle:
    for (;;) {
        pm_message m;
        if (pm_node_recv(n, &m, -1) == -ESHUTDOWN)
            return 0;
    }
}

/* ------------------------------------------------------------------ the hosts */

/* A loopback TCP port nobody listens on now (bound to 0, read, closed). */
static int free_port(void)
{
    int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (fd < 0 || bind(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
        getsockname(fd, (struct sockaddr *)&sa, &len) != 0)
        die("a loopback port");
    close(fd);
    return ntohs(sa.sin_port);
}

/* A host process: dies with pm-bench; runs its supervisor until killed. */
static pid_t start_host(const char *host, int port, int null_cipher)
{
    pid_t parent = getpid();
    pid_t pid = fork_or_die();
    if (pid > 0)
        return pid;
    /* The parent may have died before prctl: then exit at once. */
    if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
        _exit(1);
    if (null_cipher)
        set_aead(&null_aead);
    pm_options *o = pm_options_new();
    char hp[32];
    snprintf(hp, sizeof(hp), "127.0.0.1:%d", port);
    int b = strcmp(host, "b") == 0;
    if (o == NULL || pm_options_set_workers(o, 1) < 0 || pm_options_set_system_name(o, "t") < 0 ||
        pm_options_set_hostname(o, host) < 0 || pm_options_set_base_port(o, 10) < 0 ||
        pm_options_add_secret(o, bench_secret) < 0 || pm_options_set_ring_size(o, 1 << 20) < 0 ||
        pm_options_set_heartbeat_timeout_ms(o, 0) < 0 ||
        pm_options_set_bootstrap(o, b ? worker_b : worker_a, NULL) < 0 ||
        (b ? pm_options_set_peer_listen(o, hp) : pm_options_add_peer(o, hp)) < 0)
        _exit(2);
    pm_cluster *c = NULL;
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "pm-bench peer: host %s: spawn: %s\n", host, pm_strerror(rc));
        _exit(3);
    }
    for (;;)
        pm_cluster_run(c, -1);
}

/* CPU ticks (user + system) of pid and of its children (the worker). */
static uint64_t cpu_ticks(pid_t pid)
{
    char path[64], buf[1024];
    uint64_t sum = 0;
    snprintf(path, sizeof(path), "/proc/%d/stat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) != NULL) {
            /* Fields 14 and 15, after the ")" that ends the command name. */
            const char *p = strrchr(buf, ')');
            unsigned long ut = 0, st = 0;
            if (p != NULL && sscanf(p + 2, "%*c %*d %*d %*d %*d %*d %*u %*u %*u %*u %*u %lu %lu", &ut, &st) == 2)
                sum += ut + st;
        }
        fclose(f);
    }
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    f = fopen(path, "re");
    if (f != NULL) {
        int child;
        while (fscanf(f, "%d", &child) == 1)
            sum += cpu_ticks(child);
        fclose(f);
    }
    return sum;
}

/* Nanoseconds on a CPU of pid's main thread (/proc/PID/schedstat: exact,
 * unlike the clock ticks of /proc/PID/stat), and of its children's when
 * kids is set (the worker). */
static uint64_t cpu_ns(pid_t pid, int kids)
{
    char path[64];
    unsigned long long ns = 0;
    snprintf(path, sizeof(path), "/proc/%d/schedstat", (int)pid);
    FILE *f = fopen(path, "re");
    if (f != NULL) {
        if (fscanf(f, "%llu", &ns) != 1)
            ns = 0;
        fclose(f);
    }
    uint64_t sum = ns;
    snprintf(path, sizeof(path), "/proc/%d/task/%d/children", (int)pid, (int)pid);
    f = kids ? fopen(path, "re") : NULL;
    if (f != NULL) {
        int child;
        while (fscanf(f, "%d", &child) == 1)
            sum += cpu_ns(child, 0);
        fclose(f);
    }
    return sum;
}

struct pair_result {
    uint64_t rtt_p50, rtt_p99;
    uint64_t ns[NSIZES], received[NSIZES], dropped[NSIZES];
    double idle_cpu[2]; /* % of one CPU, host a and b (supervisor + worker) */
    uint64_t cpu_hubs[NSIZES], cpu_all[NSIZES]; /* ns on a CPU during stream k */
};

/* One linked pair, cipher or null, measured; then idle for idle_ms. */
static int run_pair(int null_cipher, unsigned idle_ms, struct pair_result *out)
{
    int port = free_port();
    atomic_store(&psh->done, 0);
    psh->why[0] = '\0';
    pid_t b = start_host("b", port, null_cipher);
    pid_t a = start_host("a", port, null_cipher);
    int ret = 1;
    uint64_t t0 = pm__now_ns();
    uint64_t hubs0 = 0, all0 = 0;
    atomic_store(&psh->phase, 0);
    atomic_store(&psh->ack, 0);
    while (atomic_load(&psh->done) == 0) {
        int ph = atomic_load(&psh->phase);
        if (ph != atomic_load(&psh->ack)) {
            uint64_t hubs = cpu_ns(a, 0) + cpu_ns(b, 0), everyone = cpu_ns(a, 1) + cpu_ns(b, 1);
            if (ph % 2 == 1) {
                hubs0 = hubs;
                all0 = everyone;
            } else {
                out->cpu_hubs[ph / 2 - 1] = hubs - hubs0;
                out->cpu_all[ph / 2 - 1] = everyone - all0;
            }
            atomic_store(&psh->ack, ph);
            continue;
        }
        int st;
        if (waitpid(a, &st, WNOHANG) == a || waitpid(b, &st, WNOHANG) > 0) {
            fprintf(stderr, "pm-bench peer: a host process exited\n");
            goto out;
        }
        if (pm__now_ns() - t0 > 600000000000ull) {
            fprintf(stderr, "pm-bench peer: no result within 600 s\n");
            goto out;
        }
        usleep(1000);
    }
    if (atomic_load(&psh->done) != 1) {
        fprintf(stderr, "pm-bench peer: %s\n", psh->why);
        goto out;
    }
    sort_u64(psh->samples, psh->rounds);
    out->rtt_p50 = percentile(psh->samples, psh->rounds, 0.50);
    out->rtt_p99 = percentile(psh->samples, psh->rounds, 0.99);
    for (int k = 0; k < NSIZES; k++) {
        out->ns[k] = psh->stream_ns[k];
        out->received[k] = psh->received[k];
        out->dropped[k] = psh->dropped[k];
    }
    /* Idle: links up, heartbeats only. */
    uint64_t ca = cpu_ticks(a), cb = cpu_ticks(b), i0 = pm__now_ns();
    usleep(idle_ms * 1000);
    double secs = (double)(pm__now_ns() - i0) / 1e9, hz = (double)sysconf(_SC_CLK_TCK);
    out->idle_cpu[0] = 100.0 * (double)(cpu_ticks(a) - ca) / hz / secs;
    out->idle_cpu[1] = 100.0 * (double)(cpu_ticks(b) - cb) / hz / secs;
    ret = 0;
out:
    kill(a, SIGKILL);
    kill(b, SIGKILL);
    wait_child(a);
    wait_child(b);
    return ret;
}

/* ------------------------------------------------------------------ plain TCP */

/* A connected loopback TCP pair with Nagle off on both ends. */
static void tcp_pair(int fds[2])
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 1) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0)
        die("tcp listen");
    fds[0] = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    if (fds[0] < 0 || connect(fds[0], (struct sockaddr *)&sa, sizeof(sa)) != 0)
        die("tcp connect");
    fds[1] = accept4(l, NULL, NULL, SOCK_CLOEXEC);
    if (fds[1] < 0)
        die("tcp accept");
    close(l);
    int one = 1;
    for (int i = 0; i < 2; i++)
        (void)setsockopt(fds[i], IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
}

/* Ping-pong of `rounds` 64-byte messages (samples, ns) or a stream of
 * `frames` frames of `size` bytes, one write each, drained in large reads
 * and acknowledged with one byte (elapsed ns). 0 or -1. */
static int tcp_run(int pingpong, size_t size, uint64_t count, uint64_t *samples, uint64_t *ns)
{
    int fds[2];
    tcp_pair(fds);
    unsigned char *buf = calloc(1, size);
    if (buf == NULL)
        die("calloc");
    pid_t pid = fork_or_die();
    if (pid == 0) {
        close(fds[0]);
        int rc = pingpong ? echo(fds[1], fds[1], buf, size, count)
                          : drain(fds[1], count * size) < 0 || write_all(fds[1], "k", 1) < 0 ? -1 : 0;
        _exit(rc < 0 ? 1 : 0);
    }
    close(fds[1]);
    int rc = 0;
    uint64_t t0 = pm__now_ns();
    for (uint64_t i = 0; i < count && rc == 0; i++) {
        uint64_t r0 = pm__now_ns();
        rc = write_all(fds[0], buf, size);
        if (pingpong && rc == 0) {
            rc = read_all(fds[0], buf, size);
            samples[i] = pm__now_ns() - r0;
        }
    }
    if (!pingpong && rc == 0)
        rc = read_all(fds[0], buf, 1);
    *ns = pm__now_ns() - t0;
    close(fds[0]);
    free(buf);
    if (wait_child(pid) != 0)
        rc = -1;
    return rc;
}

/* ------------------------------------------------------------------ handshakes */

/* Drives one connection's state machine until it is up or dead. */
static int drive(int fd, pm__pconn *pc)
{
    unsigned char in[4096];
    for (;;) {
        size_t n;
        const unsigned char *p;
        while ((p = pm__pconn_output(pc, &n)) != NULL && n > 0) {
            if (write_all(fd, p, n) < 0)
                return -1;
            pm__pconn_sent(pc, n);
        }
        if (pc->state == PM__PC_UP)
            return 0;
        if (pc->state == PM__PC_DEAD)
            return -1;
        ssize_t k = read(fd, in, sizeof(in));
        if (k <= 0)
            return -1;
        size_t off = 0;
        while (off < (size_t)k) {
            size_t used = 0;
            int ev = pm__pconn_input(pc, in + off, (size_t)k - off, &used);
            off += used;
            if (ev == PM__PCE_DEAD)
                return -1;
            if (ev != PM__PCE_UP)
                break;
        }
    }
}

static pm__keyring *bench_keyring(void)
{
    pm__keyring *kr = NULL;
    if (sodium_init() < 0 || pm__keyring_new(&kr) < 0 || pm__keyring_add_secret(kr, bench_secret) < 0 ||
        pm__keyring_random_static(kr) < 0)
        die("keyring");
    return kr;
}

/* `count` handshakes, each from connect() to the initiator's link up (its
 * first valid record from the responder, as in the mesh), against a
 * responder process; samples in ns. 0 or -1. */
static int handshakes(unsigned count, uint64_t *samples)
{
    int l = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    struct sockaddr_in sa = {.sin_family = AF_INET, .sin_addr.s_addr = htonl(INADDR_LOOPBACK)};
    socklen_t len = sizeof(sa);
    if (l < 0 || bind(l, (struct sockaddr *)&sa, sizeof(sa)) != 0 || listen(l, 16) != 0 ||
        getsockname(l, (struct sockaddr *)&sa, &len) != 0)
        die("handshake listen");
    pid_t parent = getpid();
    pid_t pid = fork_or_die();
    if (pid == 0) {
        if (prctl(PR_SET_PDEATHSIG, SIGKILL) != 0 || getppid() != parent)
            _exit(1);
        pm__keyring *kr = bench_keyring();
        pm__pconn_cfg cfg = {"t", "b", 2, 5000, kr, NULL};
        for (unsigned i = 0; i < count; i++) {
            int fd = accept4(l, NULL, NULL, SOCK_CLOEXEC);
            if (fd < 0)
                _exit(1);
            int one = 1;
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            pm__pconn pc;
            if (pm__pconn_init(&pc, &cfg, 0) < 0)
                _exit(1);
            (void)drive(fd, &pc);
            pm__pconn_free(&pc);
            close(fd);
            (void)pm__noise_ephemeral_prepare(); /* as the mesh does after a turn */
        }
        _exit(0);
    }
    close(l);
    pm__keyring *kr = bench_keyring();
    pm__pconn_cfg cfg = {"t", "a", 1, 5000, kr, NULL};
    int rc = 0;
    for (unsigned i = 0; i < count && rc == 0; i++) {
        /* The mesh makes the next ephemeral key pair at the end of a loop
         * turn, never during a handshake: so here, before the clock. */
        (void)pm__noise_ephemeral_prepare();
        uint64_t t0 = pm__now_ns();
        int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
        int one = 1;
        pm__pconn pc;
        if (fd < 0 || connect(fd, (struct sockaddr *)&sa, sizeof(sa)) != 0 ||
            pm__pconn_init(&pc, &cfg, 1) < 0) {
            rc = -1;
        } else {
            (void)setsockopt(fd, IPPROTO_TCP, TCP_NODELAY, &one, sizeof(one));
            rc = drive(fd, &pc);
            samples[i] = pm__now_ns() - t0;
            pm__pconn_free(&pc);
        }
        if (fd >= 0)
            close(fd);
    }
    pm__keyring_free(kr);
    if (rc != 0)
        kill(pid, SIGKILL);
    if (wait_child(pid) != 0)
        rc = -1;
    return rc;
}

/* Moves what `from` queued into `to`; 1 when bytes moved. */
static int move_bytes(pm__pconn *from, pm__pconn *to)
{
    size_t len, used;
    const unsigned char *p = pm__pconn_output(from, &len);
    if (p == NULL || len == 0)
        return 0;
    for (size_t off = 0; off < len && to->state != PM__PC_DEAD; off += used)
        if (pm__pconn_input(to, p + off, len - off, &used) == PM__PCE_DEAD)
            break;
    pm__pconn_sent(from, len);
    return 1;
}

/* This thread's CPU time, ns. */
static uint64_t thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (uint64_t)ts.tv_sec * 1000000000u + (uint64_t)ts.tv_nsec;
}

/* The same handshakes in one process without sockets: the CPU time of
 * both sides' cryptography and state machines together (a thread CPU
 * clock, so waiting for a CPU on a busy machine does not count). */
static int handshakes_in_memory(unsigned count, uint64_t *samples)
{
    pm__keyring *ka = bench_keyring(), *kb = bench_keyring();
    pm__pconn_cfg ca = {"t", "a", 1, 5000, ka, NULL}, cb = {"t", "b", 2, 5000, kb, NULL};
    int rc = 0;
    for (unsigned i = 0; i < count && rc == 0; i++) {
        pm__pconn a, b;
        /* One spare pair per process: one side takes it, the other makes
         * its own inside the clock (the figure is both sides' CPU). */
        (void)pm__noise_ephemeral_prepare();
        uint64_t t0 = thread_cpu_ns();
        if (pm__pconn_init(&a, &ca, 1) < 0 || pm__pconn_init(&b, &cb, 0) < 0)
            die("pm__pconn_init");
        for (int k = 0; k < 20; k++)
            if (!move_bytes(&a, &b) && !move_bytes(&b, &a))
                break;
        samples[i] = thread_cpu_ns() - t0;
        rc = a.state == PM__PC_UP && b.state == PM__PC_UP ? 0 : -1;
        pm__pconn_free(&a);
        pm__pconn_free(&b);
    }
    pm__keyring_free(ka);
    pm__keyring_free(kb);
    return rc;
}

/* What b's side does with a frame in memory: copies it out, as the hub
 * copies it into the worker's ring. */
static unsigned char sink[PM__REC_MAX_FRAME];
static uint64_t sunk;

static void sink_frame(void *arg, const unsigned char *frame, size_t len)
{
    (void)arg;
    memcpy(sink, frame, len);
    sunk++;
}

/* The link's own CPU per frame, without sockets or other processes: frames
 * of `size` bytes staged on one side (`batch` a turn, then flushed), their
 * records fed to the other side, which copies each frame out. A thread CPU
 * clock: what load on the machine disturbs least. ns per frame, or 0. */
static uint64_t link_cpu_in_memory(int null_cipher, size_t size, unsigned batch, uint64_t frames)
{
    set_aead(null_cipher ? &null_aead : NULL);
    pm__keyring *ka = bench_keyring(), *kb = bench_keyring();
    pm__pconn_cfg ca = {"t", "a", 1, 5000, ka, NULL}, cb = {"t", "b", 2, 5000, kb, NULL};
    pm__pconn a, b;
    uint64_t ns = 0;
    unsigned char *frame = calloc(1, size);
    if (frame == NULL || pm__pconn_init(&a, &ca, 1) < 0 || pm__pconn_init(&b, &cb, 0) < 0)
        die("pm__pconn_init");
    for (int k = 0; k < 20; k++)
        if (!move_bytes(&a, &b) && !move_bytes(&b, &a))
            break;
    b.on_frame = sink_frame;
    sunk = 0;
    if (a.state == PM__PC_UP && b.state == PM__PC_UP) {
        uint64_t t0 = thread_cpu_ns();
        for (uint64_t i = 0; i < frames; i++) {
            memcpy(frame, &i, sizeof(i));
            int rc = pm__pconn_stage(&a, frame, size);
            if (rc == -EAGAIN) {
                move_bytes(&a, &b);
                rc = pm__pconn_stage(&a, frame, size);
            }
            if (rc < 0)
                break;
            if ((i + 1) % batch == 0 || i + 1 == frames) {
                (void)pm__pconn_flush_stage(&a);
                move_bytes(&a, &b);
            }
        }
        ns = sunk == frames ? (thread_cpu_ns() - t0) / frames : 0;
    }
    pm__pconn_free(&a);
    pm__pconn_free(&b);
    pm__keyring_free(ka);
    pm__keyring_free(kb);
    free(frame);
    set_aead(NULL);
    return ns;
}

/* ------------------------------------------------------------------ the command */

static void print_load(const char *when)
{
    char buf[128] = "?";
    FILE *f = fopen("/proc/loadavg", "re");
    if (f != NULL) {
        if (fgets(buf, sizeof(buf), f) == NULL)
            strcpy(buf, "?\n");
        fclose(f);
    }
    printf("load average %s: %s", when, buf);
}

static double mbps(uint64_t frames, size_t size, uint64_t ns)
{
    return ns == 0 ? 0 : (double)frames * (double)size / ((double)ns / 1e9) / 1e6;
}

static double fps(uint64_t frames, uint64_t ns)
{
    return ns == 0 ? 0 : (double)frames / ((double)ns / 1e9);
}

int cmd_peer(const bench_opts *o)
{
    uint64_t frames[NSIZES];
    frames[0] = o->quick ? 2000 : o->frames;
    frames[1] = o->quick ? 200 : (o->frames / 8 > 0 ? o->frames / 8 : 1);
    unsigned rounds = o->quick ? 200 : o->rounds;
    unsigned nhs = o->quick ? 20 : 500;
    unsigned idle_ms = o->quick ? 500 : 3000;

    psh = mmap(NULL, sizeof(*psh) + rounds * sizeof(uint64_t), PROT_READ | PROT_WRITE,
               MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (psh == MAP_FAILED)
        die("mmap");
    psh->rounds = rounds;
    for (int k = 0; k < NSIZES; k++)
        psh->frames[k] = frames[k];

    print_machine();
    print_build();
    print_load("at start");
    printf("peer: hosts a and b, two supervisor processes on 127.0.0.1, one fork-mode\n"
           "worker each; a's worker -> a's hub -> TCP -> b's hub -> b's worker\n");
    fflush(stdout);

    struct pair_result pr[2];
    memset(pr, 0, sizeof(pr));
    for (int null_cipher = 0; null_cipher < 2; null_cipher++)
        if (run_pair(null_cipher, idle_ms, &pr[null_cipher]) != 0)
            return 1;

    uint64_t *tcp_samples = calloc(rounds, sizeof(uint64_t));
    uint64_t tcp_rtt_ns, tcp_ns[NSIZES];
    if (tcp_samples == NULL || tcp_run(1, 64, rounds, tcp_samples, &tcp_rtt_ns) != 0)
        return 1;
    for (int k = 0; k < NSIZES; k++)
        if (tcp_run(0, stream_sizes[k], frames[k], NULL, &tcp_ns[k]) != 0)
            return 1;
    sort_u64(tcp_samples, rounds);

    uint64_t *hs = calloc(nhs, sizeof(uint64_t));
    if (hs == NULL || handshakes(nhs, hs) != 0) {
        fprintf(stderr, "pm-bench peer: a handshake failed\n");
        return 1;
    }
    sort_u64(hs, nhs);
    uint64_t *hm = calloc(nhs, sizeof(uint64_t));
    if (hm == NULL || handshakes_in_memory(nhs, hm) != 0) {
        fprintf(stderr, "pm-bench peer: a handshake in memory failed\n");
        return 1;
    }
    sort_u64(hm, nhs);

    static const char *const who[2] = {"procmesh chachapoly", "procmesh null cipher"};
    char ratio[32];
    printf("\nrequest/reply round trip, 64 B, %u rounds  p50 ns       p99 ns\n", rounds);
    for (int i = 0; i < 2; i++) {
        printf("  %-24s %12" PRIu64 " %12" PRIu64 "\n", who[i], pr[i].rtt_p50, pr[i].rtt_p99);
        csv_row("peer", "rtt", 64, who[i], "p50_ns", (double)pr[i].rtt_p50);
    }
    printf("  %-24s %12" PRIu64 " %12" PRIu64 "\n", "tcp ping-pong", percentile(tcp_samples, rounds, 0.5),
           percentile(tcp_samples, rounds, 0.99));
    format_ratio(ratio, sizeof(ratio), pr[0].rtt_p50, pr[1].rtt_p50, 2);
    printf("  chachapoly / null p50: %s (target <= 1.2x)\n", ratio);
    format_ratio(ratio, sizeof(ratio), pr[1].rtt_p50, percentile(tcp_samples, rounds, 0.5), 1);
    printf("  null / tcp p50: %s (the two hubs and two rings)\n", ratio);

    for (int k = 0; k < NSIZES; k++) {
        size_t s = stream_sizes[k];
        printf("\nstream, %zu B frames, %" PRIu64 " frames     frames/s         MB/s  received  dropped\n", s,
               frames[k]);
        for (int i = 0; i < 2; i++) {
            double f = fps(pr[i].received[k], pr[i].ns[k]);
            printf("  %-24s %12.0f %12.1f %9" PRIu64 " %8" PRIu64 "\n", who[i], f,
                   mbps(pr[i].received[k], s, pr[i].ns[k]), pr[i].received[k], pr[i].dropped[k]);
            csv_row("peer", "stream", s, who[i], "frames_per_s", f);
        }
        printf("  %-24s %12.0f %12.1f\n", "tcp stream", fps(frames[k], tcp_ns[k]),
               mbps(frames[k], s, tcp_ns[k]));
        /* CPU per frame does not depend on what else the machine runs as
         * much as a rate does: the figure to compare on a busy machine. */
        printf("  CPU ns per frame          hubs     all four (2 supervisors + 2 workers)\n");
        for (int i = 0; i < 2; i++) {
            uint64_t f = pr[i].received[k] > 0 ? pr[i].received[k] : 1;
            printf("  %-24s %6" PRIu64 " %12" PRIu64 "\n", who[i], pr[i].cpu_hubs[k] / f, pr[i].cpu_all[k] / f);
            csv_row("peer", "stream", s, who[i], "hub_cpu_ns_per_frame", (double)pr[i].cpu_hubs[k] / (double)f);
        }
        double enc = fps(pr[0].received[k], pr[0].ns[k]), nul = fps(pr[1].received[k], pr[1].ns[k]);
        printf("  chachapoly / null: %.2fx (target >= 0.5x); target %s\n", nul > 0 ? enc / nul : 0.0,
               k == 0 ? ">= 1000000 frames/s" : ">= 500 MB/s");
    }

    printf("\nhandshake, connect to link up, %u      p50 us       p99 us\n", nhs);
    printf("  %-24s %12.1f %12.1f (target p50 <= 1000 us)\n", "XXpsk3 over TCP", percentile(hs, nhs, 0.5) / 1e3,
           percentile(hs, nhs, 0.99) / 1e3);
    printf("  %-24s %12.1f %12.1f (CPU time of both sides, no sockets)\n", "XXpsk3 in memory, CPU",
           percentile(hm, nhs, 0.5) / 1e3, percentile(hm, nhs, 0.99) / 1e3);
    csv_row("peer", "handshake", 0, "procmesh", "p50_ns", (double)percentile(hs, nhs, 0.5));

    /* The link code alone, both sides in this thread: the figure that a
     * busy machine disturbs least (median of 3 runs each). */
    printf("\nlink in memory (stage, seal, open, copy out), CPU ns per frame, batches of 8\n");
    for (int k = 0; k < NSIZES; k++) {
        uint64_t per[2];
        for (int i = 0; i < 2; i++) {
            uint64_t r[3];
            for (int j = 0; j < 3; j++)
                r[j] = link_cpu_in_memory(i, stream_sizes[k], 8, o->quick ? 2000 : 200000 / (k == 0 ? 1 : 8));
            sort_u64(r, 3);
            per[i] = r[1];
        }
        printf("  %5zu B  chachapoly %7" PRIu64 "  null %7" PRIu64 "  (%.0f / %.0f MB/s of one CPU)\n",
               stream_sizes[k], per[0], per[1], per[0] ? stream_sizes[k] * 1e3 / (double)per[0] : 0.0,
               per[1] ? stream_sizes[k] * 1e3 / (double)per[1] : 0.0);
        csv_row("peer", "link_cpu", stream_sizes[k], who[0], "ns_per_frame", (double)per[0]);
        csv_row("peer", "link_cpu", stream_sizes[k], who[1], "ns_per_frame", (double)per[1]);
    }

    printf("\nidle linked pair over %.1f s, %% of one CPU   host a  host b (supervisor + worker)\n",
           idle_ms / 1e3);
    for (int i = 0; i < 2; i++)
        printf("  %-24s %8.2f %7.2f\n", who[i], pr[i].idle_cpu[0], pr[i].idle_cpu[1]);
    print_load("at end");
    free(hs);
    free(hm);
    free(tcp_samples);
    munmap(psh, sizeof(*psh) + rounds * sizeof(uint64_t));
    return 0;
}
