/* SPDX-License-Identifier: MIT */
/*
 * pm-raw-worker - an exec-mode worker that speaks the protocol by hand,
 * bypassing pm_node_join, to show what the supervisor does with frames the
 * library would never send:
 *
 *   hello-version N    HELLO naming protocol version N, then wait
 *   hello-len N        HELLO of N bytes (at most 16): this protocol's version
 *                      in the first four (as much of it as fits), zeros after
 *                      it, then READY, then wait
 *   hello-twice        HELLO, READY, then a second HELLO, then wait
 *   ready-first        READY before any HELLO, then wait
 *   forbidden T        HELLO, READY, a frame of type T (2 INIT, 7
 *                      UNDELIVERABLE, 8 STOP) to main, then the message
 *                      "after" to main, then wait
 *   early-traffic      HELLO, the message "before" to main, READY, the
 *                      message "after" to main, then wait
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
        unsigned char v[16] = {0};
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
