/* SPDX-License-Identifier: MIT */
/*
 * node_bigsend.c - a worker's large messages on their way out: each a
 * sealed memfd whose record goes on the channel's socket ahead of its
 * frame (bigmsg.h), and the bound on records ahead of their frames.
 */
#define _GNU_SOURCE
#include "node.h"

#include <poll.h>

#include "channel/bigmsg.h"
#include "channel/proto.h"

/* Room for one more record ahead of its frame (bigmsg.h): forgets our
 * large frames the hub has consumed, and waits (or -EAGAIN without wait)
 * while PM__BIGMSG_AHEAD_MAX are not. The hub takes records off the socket
 * as they arrive and fences a worker past that many, so this, not the
 * socket's buffer, is what holds a sender back before its frames are
 * read. 0, -EAGAIN, -ESHUTDOWN, -EPROTO (our ring is poisoned). */
static int ahead_room(pm_node *n, int wait)
{
    for (;;) {
        while (n->ahead_n > 0) {
            int rc = pm__ring_consumed(&n->channel.tx, n->ahead_end[n->ahead_head]);
            if (rc < 0)
                return -EPROTO;
            if (rc == 0)
                break;
            n->ahead_head = (n->ahead_head + 1) % PM__BIGMSG_AHEAD_MAX;
            n->ahead_n--;
        }
        if (n->ahead_n < PM__BIGMSG_AHEAD_MAX)
            return 0;
        if (!wait)
            return -EAGAIN;
        if (pm__node_shut_down(n))
            return -ESHUTDOWN;
        pm__node_beat(n);
        if (pm__ring_wait_consumed(&n->channel.tx, n->ahead_end[n->ahead_head], pm__node_wait_chunk(n)) < 0)
            return -EPROTO;
    }
}

/* Sends a large message (above PM_MAX_PAYLOAD) as a sealed memfd: room in
 * the ring is reserved first, then the record goes on the socket, then the
 * frame is committed, so that the hub always finds the record when it
 * reads the frame and a record never goes without its frame. A record the
 * kernel refuses for now (our user's fds in flight past our RLIMIT_NOFILE,
 * or no memory: hub.h) is -EAGAIN. */
int pm__node_send_big(pm_node *n, const pm__frame_hdr *h0, const void *data, size_t len, int wait)
{
    int fd = pm__bigmsg_create(data, len);
    if (fd < 0)
        return fd == -EMFILE || fd == -ENFILE || fd == -ENOMEM ? -ENOBUFS : fd;
    pm__frame_hdr h = *h0;
    h.flags = PM__FF_MEMFD;
    h.len = PM__ANNOUNCE_SIZE;
    size_t total = PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE;
    int rc;
    for (;;) {
        pm__node_beat(n);
        void *p;
        if ((rc = ahead_room(n, wait)) < 0)
            break;
        rc = pm__ring_reserve(&n->channel.tx, total, &p);
        if (rc == 0) {
            uint32_t seq = pm__bigmsg_next(n->channel.tx_seq);
            rc = pm__bigmsg_send(n->channel.sock, fd, seq);
            if (rc == 0) {
                n->channel.tx_seq = seq;
                pm__frame_encode(&h, p);
                pm__announce a = {len, seq};
                pm__announce_encode(&a, (char *)p + PM__FRAME_HDR_SIZE);
                pm__ring_commit(&n->channel.tx, total);
                pm__ring_publish(&n->channel.tx);
                n->ahead_end[(n->ahead_head + n->ahead_n++) % PM__BIGMSG_AHEAD_MAX] =
                    pm__ring_head(&n->channel.tx);
                break;
            }
            pm__ring_unreserve(&n->channel.tx);
            if (rc == -ETOOMANYREFS || rc == -ENOBUFS || rc == -ENOMEM) {
                pm__close(fd);
                return -EAGAIN; /* refused for now, not a wait given up */
            }
            if (rc != -EAGAIN)
                break;
            /* The hub has not taken our earlier fds yet. */
            if (!wait || pm__node_shut_down(n))
                break;
            struct pollfd pfd = {n->channel.sock, POLLOUT, 0};
            (void)poll(&pfd, 1, pm__node_wait_chunk(n));
            continue;
        }
        if (rc != -EAGAIN || !wait)
            break;
        if (pm__node_shut_down(n)) {
            rc = -ESHUTDOWN;
            break;
        }
        rc = pm__ring_wait_space(&n->channel.tx, total, pm__node_wait_chunk(n));
        if (rc < 0)
            break;
    }
    pm__close(fd); /* sent: the socket holds its own reference */
    if (rc == -EAGAIN && wait)
        rc = -ESHUTDOWN; /* gave up waiting because we must stop */
    return rc == -EBADMSG ? -EPROTO : rc;
}

