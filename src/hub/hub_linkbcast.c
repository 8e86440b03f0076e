/* SPDX-License-Identifier: MIT */
/* hub_linkbcast.c - a remote host's mesh broadcast (main's BCAST to a host is pm__hub_link_bcast, hub_linkbase.c): its BCAST fanned out to our ready workers with a BRESULT per worker and a BDONE back (doc/protocol.md 6). */
#define _GNU_SOURCE
#include "hub_core.h"

#include <limits.h>
#include <stdlib.h>
#include <string.h>

#include "base/le.h"
#include "hub_int.h"
#include "hub_linkport.h"

/* A remote host's mesh broadcast, fanned out here: who to send the
 * results to. */
struct remote_bcast {
    pm__hub *h;
    uint16_t host;
    uint64_t id;
    uint64_t conn; /* the connection the BCAST came in on (pm__hub_link.conn) */
};

/* Our local broadcast for a remote host ended: a BRESULT per worker (from
 * its address port and incarnation, with its error and reply), then a
 * BDONE with how many BRESULTs went out, so the far end can tell a result
 * the link had no room for from one never sent. */
static void remote_bcast_done(pm_cluster *c, const pm_message *results, size_t n, void *arg)
{
    (void)c;
    struct remote_bcast *rb = arg;
    pm__hub *h = rb->h;
    /* Never NULL: the BCAST came in on this host's link, and the links
     * outlive every broadcast (pm__hub_free ends the broadcasts before it
     * frees the links). A link that went down since gets nothing, even
     * when it is up again: the far end settled this host when it went
     * (doc/protocol.md 6), and over the new connection (perhaps to a new
     * incarnation of that host, whose broadcast ids start again) the
     * results could pass for those of another broadcast. Nothing is
     * counted as dropped for lack of room. */
    pm__hub_link *l = pm__hub_link_of(h, rb->host);
    if (!l->up || l->conn != rb->conn) {
        free(rb);
        return;
    }
    /* The mesh's send never takes the link down itself (a write error
     * closes the connection, which the mesh takes down later); were one
     * to, the puts after it would be refused and counted dropped. */
    uint32_t sent = 0;
    for (size_t i = 0; i < n; i++) {
        pm__frame_hdr f;
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_BRESULT;
        f.src = results[i].from.port;
        f.src_inc = results[i].from.incarnation;
        f.request_id = rb->id;
        f.error = results[i].error;
        f.len = (uint32_t)results[i].len; /* 0 with an error (pm__hub_bcast_result) */
        if (results[i].len > PM_MAX_PAYLOAD) {
            /* A large reply: more than one frame, which a link cannot
             * carry yet (link_buf holds one). */
            f.error = -EMSGSIZE;
            f.len = 0;
        }
        if (pm__hub_link_put_or_drop(h, l, &f, results[i].data) == 0)
            sent++;
    }
    pm__frame_hdr d;
    memset(&d, 0, sizeof(d));
    d.type = PM__FT_BDONE;
    d.request_id = rb->id;
    d.len = 4;
    unsigned char count[4];
    pm__put32(count, sent);
    (void)pm__hub_link_put_or_drop(h, l, &d, count); /* lost: the far end's deadline settles it */
    free(rb);
}

int pm__hub_link_bcast_timeout(int64_t left)
{
    int64_t margin = left / 4 < 200 ? left / 4 : 200;
    int64_t timeout = left - margin;
    if (timeout < 1)
        return 1;
    return timeout > INT_MAX ? INT_MAX : (int)timeout;
}

/* A BCAST from host's link: our own broadcast to our ready snapshot,
 * ending a little before the far end's deadline (doc/protocol.md 6) so
 * that its results can still cross. */
void pm__hub_link_bcast_in(pm__hub *h, pm__hub_link *l, uint16_t host, const pm__frame_hdr *f,
                     const unsigned char *payload)
{
    /* Its length is within PM_MAX_PAYLOAD: pm__hub_link_frame decoded it
     * with that bound. */
    if (f->dst != 0 || f->deadline_ms == 0) {
        l->malformed++;
        return;
    }
    int timeout = pm__hub_link_bcast_timeout(f->deadline_ms - (int64_t)pm__now_ms());
    struct remote_bcast *rb = malloc(sizeof(*rb));
    if (rb == NULL) {
        l->dropped++; /* the far end's deadline settles it */
        return;
    }
    rb->h = h;
    rb->host = host;
    rb->id = f->request_id;
    rb->conn = l->conn;
    if (pm__hub_broadcast_for(h, host, payload, f->len, timeout, remote_bcast_done, rb) < 0) {
        free(rb);
        l->dropped++;
    }
}
