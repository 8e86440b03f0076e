/* SPDX-License-Identifier: MIT */
/*
 * pm-raw-worker - an exec-mode worker that speaks the protocol by hand,
 * bypassing pm_node_join, to show what the supervisor does with frames the
 * library would never send:
 *
 *   hello-version N    HELLO naming protocol version N, then wait
 *   hello-len N        HELLO of N bytes (at most 4096): this protocol's version
 *                      in the first four (as much of it as fits), zeros after
 *                      it, then READY, then wait
 *   hello-twice        HELLO, READY, then a second HELLO, then wait
 *   ready-first        READY before any HELLO, then wait
 *   forbidden T        HELLO, READY, a frame of type T (2 INIT, 7
 *                      UNDELIVERABLE, 8 STOP) to main, then the message
 *                      "after" to main, then wait
 *   early-traffic      HELLO, the message "before" to main, READY, the
 *                      message "after" to main, then wait
 *   init-first         before any HELLO, wait (up to 30 s) for the first
 *                      frame from the supervisor; then HELLO, READY, and on
 *                      each message from main the message "init N first F
 *                      slot S inc I" to main: N the INITs received so far,
 *                      F 1 if the first frame was an INIT for this slot
 *                      and incarnation
 *
 * With "later" as the last argument, the first incarnation of a slot does a
 * plain HELLO and READY instead and only later ones misbehave (so that
 * pm_cluster_spawn succeeds and the fault is charged as a restart).
 *
 * Linked with the static core (libpmcore.la) for the internal ring API.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "base/internal.h"
#include "base/defaults.h" /* PM__NODE_ENV */
#include "base/le.h"
#include "channel/channel.h"
#include "worker/node.h"
#include "channel/proto.h"

static pm__channel l;

static void frame(int type, const void *payload, size_t len)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.dst = PM__NODE_MAIN;
    if (pm__frame_send(&l.tx, &h, payload, len) != 0)
        _exit(5);
}

static void hello(uint32_t version)
{
    unsigned char v[4];
    pm__put32(v, version);
    frame(PM__FT_HELLO, v, sizeof(v));
}

static void text(const char *s)
{
    frame(PM__FT_MSG, s, strlen(s));
}

/* The next frame from the supervisor, waiting up to timeout_ms: its type
 * (the INIT decoded into *m), or -1 if none came. */
static int next_frame(int timeout_ms, pm__init_msg *m, unsigned char *buf, size_t size)
{
    pm__frame_hdr h;
    const void *payload;
    while (pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload) == 0)
        if (pm__ring_wait(&l.rx, timeout_ms) <= 0)
            return -1;
    int type = h.type;
    if (type == PM__FT_INIT) {
        if (h.len > size)
            _exit(6);
        memcpy(buf, payload, h.len);
        if (pm__init_decode(buf, h.len, m) < 0)
            _exit(7);
    }
    pm__ring_consume(&l.rx);
    pm__ring_release(&l.rx);
    return type;
}

/* Is INIT in the ring before the HELLO (incarnation.c arm)? And is it the
 * only one (no second INIT as the HELLO's answer)? */
static void init_first(void)
{
    static unsigned char buf[4096];
    pm__init_msg m;
    int inits = 0, first = 0;
    unsigned slot = ~0u;
    uint64_t inc = 0;
    if (next_frame(30000, &m, buf, sizeof(buf)) == PM__FT_INIT) {
        inits++;
        slot = m.slot;
        inc = m.addr.incarnation;
        first = inc == pm__channel_ctl(&l)->incarnation;
    }
    hello(PM__PROTO_VERSION);
    frame(PM__FT_READY, NULL, 0);
    for (;;) {
        int type = next_frame(-1, &m, buf, sizeof(buf));
        if (type == PM__FT_INIT)
            inits++;
        if (type == PM__FT_MSG) {
            char t[96];
            snprintf(t, sizeof(t), "init %d first %d slot %u inc %llu", inits, first, slot,
                     (unsigned long long)inc);
            text(t);
        }
    }
}

int main(int argc, char **argv)
{
    if (argc < 2) {
        fprintf(stderr, "usage: pm-raw-worker MODE [ARG] [later]\n");
        return 2;
    }
    const char *mode = argv[1];
    const char *env = getenv(PM__NODE_ENV);
    int memfd, node_efd, hub_efd, sock = -1;
    if (env == NULL || sscanf(env, "%d,%d,%d,%d", &memfd, &node_efd, &hub_efd, &sock) < 3)
        return 3;
    if (pm__channel_attach(&l, memfd, node_efd, hub_efd, sock) < 0)
        return 4;
    if (strcmp(argv[argc - 1], "later") == 0 && pm__channel_ctl(&l)->incarnation == 1) {
        hello(PM__PROTO_VERSION);
        frame(PM__FT_READY, NULL, 0);
    } else if (strcmp(mode, "hello-version") == 0 && argc >= 3) {
        hello((uint32_t)strtoul(argv[2], NULL, 10));
    } else if (strcmp(mode, "hello-len") == 0 && argc >= 3) {
        static unsigned char v[4096];
        size_t n = strtoul(argv[2], NULL, 10);
        pm__put32(v, PM__PROTO_VERSION);
        frame(PM__FT_HELLO, v, n < sizeof(v) ? n : sizeof(v));
        frame(PM__FT_READY, NULL, 0);
    } else if (strcmp(mode, "hello-twice") == 0) {
        hello(PM__PROTO_VERSION);
        frame(PM__FT_READY, NULL, 0);
        hello(PM__PROTO_VERSION);
    } else if (strcmp(mode, "ready-first") == 0) {
        frame(PM__FT_READY, NULL, 0);
    } else if (strcmp(mode, "forbidden") == 0 && argc >= 3) {
        hello(PM__PROTO_VERSION);
        frame(PM__FT_READY, NULL, 0);
        frame(atoi(argv[2]), "x", 1);
        text("after");
    } else if (strcmp(mode, "init-first") == 0) {
        init_first();
    } else if (strcmp(mode, "early-traffic") == 0) {
        hello(PM__PROTO_VERSION);
        text("before");
        frame(PM__FT_READY, NULL, 0);
        text("after");
    } else {
        fprintf(stderr, "pm-raw-worker: unknown mode %s\n", mode);
        return 2;
    }
    for (;;)
        pause(); /* the supervisor fences or stops us */
}
