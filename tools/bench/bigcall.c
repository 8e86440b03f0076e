/* SPDX-License-Identifier: MIT */
/* bigcall.c - pm-bench bigcall: a 16 MiB pm_cluster_call round trip as a sealed memfd against the same bytes in 64 KiB frames through the rings. */
#include "bench.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define BIG ((size_t)16 << 20)
#define CHUNK ((size_t)PM_MAX_PAYLOAD)

/* Main's side of the chunked transfer: the reply's chunks, in order. */
static unsigned char *chunk_buf;
static size_t chunk_got;

static void on_chunk(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c;
    (void)arg;
    if (m->kind == PM_MSG_PLAIN && chunk_got + m->len <= BIG) {
        memcpy(chunk_buf + chunk_got, m->data, m->len);
        chunk_got += m->len;
    }
}

/* The worker: a large request is answered with its own bytes (one memfd
 * each way); a chunked one ("chunks" of plain messages, then a request
 * with the last chunk) is gathered, then sent back the same way, the last
 * chunk as the reply. */
static int bigcall_worker(pm_node *n, void *arg)
{
    (void)arg;
    signal(SIGTERM, SIG_DFL);
    unsigned char *buf = malloc(BIG);
    if (buf == NULL)
        return 1;
    size_t have = 0;
    pm_node_ready(n);
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc < 0)
            return rc == -ESHUTDOWN ? 0 : 1;
        if (m.kind == PM_MSG_REQUEST && m.len > PM_MAX_PAYLOAD) {
            if (pm_node_reply(n, &m, m.data, m.len) < 0)
                return 2;
            continue;
        }
        if (have + m.len <= BIG) {
            memcpy(buf + have, m.data, m.len);
            have += m.len;
        }
        if (m.kind != PM_MSG_REQUEST)
            continue;
        for (size_t off = 0; off + CHUNK < have; off += CHUNK)
            if (pm_node_send(n, &m.from, buf + off, CHUNK) < 0)
                return 3;
        if (pm_node_reply(n, &m, buf + have - CHUNK, CHUNK) < 0)
            return 4;
        have = 0;
    }
}

/* One chunked round trip: 255 plain messages and a request of 64 KiB each
 * way. Main's sends wait (loop turns) while its queue for the worker is
 * full. */
static int chunked_call(pm_cluster *c, const pm_address *a, const unsigned char *src,
                        unsigned char *dst)
{
    chunk_buf = dst;
    chunk_got = 0;
    for (size_t off = 0; off + CHUNK < BIG; off += CHUNK) {
        int rc;
        while ((rc = pm_cluster_send(c, a, src + off, CHUNK)) == -EAGAIN)
            if (pm_cluster_run(c, 1) < 0)
                return -1;
        if (rc < 0) {
            fprintf(stderr, "pm-bench bigcall: chunk send: %s\n", pm_strerror(rc));
            return -1;
        }
    }
    size_t n = 0;
    int rc;
    /* -EAGAIN: main's queue for the worker is still full of chunks. */
    while ((rc = pm_cluster_call(c, a, src + BIG - CHUNK, CHUNK, 60000, dst + BIG - CHUNK, CHUNK,
                                 &n)) == -EAGAIN)
        if (pm_cluster_run(c, 1) < 0)
            return -1;
    if (rc < 0 || n != CHUNK || chunk_got != BIG - CHUNK) {
        fprintf(stderr, "pm-bench bigcall: chunked call: %s, %zu bytes back, %zu in chunks\n",
                pm_strerror(rc), n, chunk_got);
        return -1;
    }
    return 0;
}

int cmd_bigcall(const bench_opts *opts)
{
    unsigned rounds = opts->rounds;
    unsigned char *src = malloc(BIG), *dst = malloc(BIG);
    uint64_t *memfd_ns = calloc(rounds, sizeof(uint64_t));
    uint64_t *chunk_ns = calloc(rounds, sizeof(uint64_t));
    if (src == NULL || dst == NULL || memfd_ns == NULL || chunk_ns == NULL)
        die("malloc");
    for (size_t i = 0; i < BIG; i++)
        src[i] = (unsigned char)(i * 131u);
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 1);
    pm_options_set_bootstrap(o, bigcall_worker, NULL);
    pm_options_set_on_message(o, on_chunk, NULL);
    pm_cluster *c;
    if (pm_cluster_spawn(o, &c) < 0)
        die("pm_cluster_spawn");
    pm_address a;
    if (pm_cluster_addresses(c, &a, 1) != 1)
        die("pm_cluster_addresses");
    print_machine();
    printf("bigcall: a 16 MiB pm_cluster_call round trip (16 MiB each way), %u rounds each,\n"
           "interleaved: one sealed memfd per direction vs 256 frames of 64 KiB per direction\n",
           rounds);
    /* Interleaved, so that load from elsewhere on the machine falls on both. */
    for (unsigned r = 0; r < rounds + 1; r++) {
        size_t n = 0;
        memset(dst, 0, BIG);
        uint64_t t0 = pm__now_ns();
        int rc = pm_cluster_call(c, &a, src, BIG, 60000, dst, BIG, &n);
        uint64_t t1 = pm__now_ns();
        if (rc < 0 || n != BIG || memcmp(src, dst, BIG) != 0) {
            fprintf(stderr, "pm-bench bigcall: memfd round trip failed: %s\n", pm_strerror(rc));
            return 1;
        }
        memset(dst, 0, BIG);
        uint64_t t2 = pm__now_ns();
        rc = chunked_call(c, &a, src, dst);
        uint64_t t3 = pm__now_ns();
        if (rc < 0 || memcmp(src, dst, BIG) != 0) {
            fprintf(stderr, "pm-bench bigcall: chunked round trip failed\n");
            return 1;
        }
        if (r > 0) { /* the first round warms both paths up */
            memfd_ns[r - 1] = t1 - t0;
            chunk_ns[r - 1] = t3 - t2;
        }
    }
    printf("  %-24s %12s %12s\n", "transport", "p50 ns", "p99 ns");
    uint64_t m1 = median(memfd_ns, rounds), m2 = median(chunk_ns, rounds);
    print_p50_p99(24, "memfd", memfd_ns, rounds);
    print_p50_p99(24, "ring, 64 KiB frames", chunk_ns, rounds);
    char ratio[32];
    format_ratio(ratio, sizeof(ratio), m2, m1, 2);
    printf("  memfd: %.0f MB/s, ring chunks: %.0f MB/s (2 x 16 MiB per round trip); "
           "chunks take %s the memfd's time\n",
           2.0 * (double)BIG / ((double)m1 / 1e9) / 1e6, 2.0 * (double)BIG / ((double)m2 / 1e9) / 1e6,
           ratio);
    pm_cluster_terminate(c);
    pm_options_free(o);
    free(src);
    free(dst);
    free(memfd_ns);
    free(chunk_ns);
    return 0;
}
