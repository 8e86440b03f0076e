/*
 * pm-raw-worker - an exec-mode worker that speaks the protocol by hand,
 * bypassing pm_node_join, to show what the supervisor does with frames the
 * library would never send:
 *
 *   hello-version N    HELLO naming protocol version N, then wait
 *
 * Linked with the static core (libpmcore.la) for the internal ring API.
 */
#define _GNU_SOURCE
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "internal.h"
#include "le.h"
#include "link.h"
#include "node.h"
#include "proto.h"

int main(int argc, char **argv)
{
    if (argc < 3 || strcmp(argv[1], "hello-version") != 0) {
        fprintf(stderr, "usage: pm-raw-worker hello-version N\n");
        return 2;
    }
    const char *env = getenv(PM__NODE_ENV);
    int memfd, node_efd, hub_efd;
    if (env == NULL || sscanf(env, "%d,%d,%d", &memfd, &node_efd, &hub_efd) != 3)
        return 3;
    pm__link l;
    if (pm__link_attach(&l, memfd, node_efd, hub_efd) < 0)
        return 4;
    unsigned char v[4];
    pm__put32(v, (uint32_t)strtoul(argv[2], NULL, 10));
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_HELLO;
    h.dst = PM__NODE_MAIN;
    if (pm__frame_send(&l.tx, &h, v, sizeof(v)) != 0)
        return 5;
    for (;;)
        pause(); /* the supervisor fences us */
}
