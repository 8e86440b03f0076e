/* SPDX-License-Identifier: MIT */
/* hub_linkbig.c - large messages onto a peer link: the sender's FRAG cursor reading a sealed memfd, one message at a time per link (doc/protocol.md 6, "Large messages"); the receiver's reassembly is in hub_linkin.c. */
#define _GNU_SOURCE
#include "hub_core.h"

#include <string.h>
#include <unistd.h>

#include "hub_int.h"
#include "hub_linkport.h"

/* ------------------------------------------------------- large messages */

void pm__hub_links_child_fds(const pm__hub *h, void (*fn)(void *arg, int fd), void *arg)
{
    for (unsigned i = 0; h->links != NULL && i < PM__MAX_HOSTS; i++) {
        if (h->links[i].tx_fd >= 0)
            fn(arg, h->links[i].tx_fd);
        if (h->links[i].rx_fd >= 0)
            fn(arg, h->links[i].rx_fd);
    }
}

/* The message being sent ended (sent whole, or its link went down): its
 * fd goes, and the senders waiting for the link's one cursor are read
 * again. */
void pm__hub_link_frag_tx_end(pm__hub *h, pm__hub_link *l)
{
    pm__close(l->tx_fd);
    l->tx_fd = -1;
    pm__hub_link_release(h, &l->frag_held_head, &l->frag_held_tail);
}

/* Reads bytes of the message being sent into buf: 0, or -EIO (a sealed
 * memfd of the checked length does not come up short; if it did, the
 * message is abandoned: the receiver drops it at the next first fragment).
 * No EINTR retry: a memfd's pread waits on nothing a signal interrupts.
 * Never a hole: every fd sent here passed pm__bigmsg_check at this hub
 * (port.c: no hole in its length, sealed against punching one) or was
 * written whole by it (main's), so a pread allocates nothing: this host
 * never pays for pages a remote receiver's sender did not. */
static int frag_read(int fd, unsigned char *buf, size_t n, uint64_t off)
{
    while (n > 0) {
        ssize_t r = pread(fd, buf, n, (off_t)off);
        if (r <= 0)
            return -EIO;
        buf += r;
        n -= (size_t)r;
        off += (uint64_t)r;
    }
    return 0;
}

/*
 * Sends fragments of l's current message while the link's output queue
 * takes them (doc/protocol.md 6, "Large messages"): a full queue stops
 * it, and the mesh's drain hook (pm__hub_link_writable) resumes it, so the
 * hub never holds more of a message than the one fragment it is sending.
 * Each fragment is read from the sealed memfd straight into the link's
 * frame buffer (wiped by pm__hub_link_put).
 */
void pm__hub_link_frag_pump(pm__hub *h, pm__hub_link *l)
{
    unsigned char *body = h->link_buf + PM__FRAME_HDR_SIZE;
    /* No test of l->up: nothing pumps a link that is down (the pump runs
     * from a new message or a drain of an up link; pm__hub_link_down and
     * pm__hub_free end or drop its message); were it to run, the put fails
     * and the fragment read is wiped below. */
    while (l->tx_fd >= 0) {
        uint64_t left = l->tx_total - l->tx_off;
        size_t n = left < PM__FRAG_DATA_MAX ? (size_t)left : PM__FRAG_DATA_MAX;
        pm__frag_hdr fh = {l->tx_hdr.type, l->tx_id, l->tx_total, l->tx_off};
        pm__frag_encode(&fh, body);
        if (frag_read(l->tx_fd, body + PM__FRAG_HDR_SIZE, n, l->tx_off) < 0) {
            explicit_bzero(body, PM__FRAG_HDR_SIZE + n);
            l->frag_dropped++;
            pm__hub_link_frag_tx_end(h, l);
            return;
        }
        pm__frame_hdr w = l->tx_hdr;
        w.type = PM__FT_FRAG;
        w.flags = 0;
        w.len = (uint32_t)(PM__FRAG_HDR_SIZE + n);
        /* -ENOBUFS: resumed when the queue drains (pm__hub_link_writable);
         * -EHOSTUNREACH: the link is going down, and pm__hub_link_down
         * ends the message. A put that was sent wiped the buffer; one
         * refused before it (a link down) did not: wiped here, so
         * link_buf never keeps a worker's message. */
        if (pm__hub_link_put(h, l, &w, body) < 0) {
            explicit_bzero(body, PM__FRAG_HDR_SIZE + n);
            return;
        }
        l->tx_off += n;
        if (l->tx_off == l->tx_total) {
            l->big_out++;
            pm__hub_link_frag_tx_end(h, l);
        }
    }
}

/* Starts sending the large message fd (len bytes, w its wire header) from
 * owner over l; the fd is l's from now on. */
void pm__hub_link_frag_start(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, uint32_t owner,
                       int fd, uint64_t len)
{
    l->tx_fd = fd;
    l->tx_total = len;
    l->tx_off = 0;
    l->tx_id = l->tx_id == UINT32_MAX ? 1 : l->tx_id + 1;
    l->tx_owner = owner;
    l->tx_hdr = *w;
    pm__hub_link_frag_pump(h, l);
}

/* Main's large message (len > PM_MAX_PAYLOAD, w its wire header) to l:
 * sealed into a memfd of its own and sent by l's cursor, as a worker's is.
 * Main is never held: a cursor busy with another message is -EAGAIN (try
 * later). 0, -EMSGSIZE (the peer takes no large messages), or the
 * memfd's error. */
int pm__hub_link_main_big(pm__hub *h, pm__hub_link *l, const pm__frame_hdr *w, const void *data,
                    size_t len)
{
    if ((l->caps & PM__PEER_CAP_FRAG) == 0)
        return -EMSGSIZE;
    if (l->tx_fd >= 0)
        return -EAGAIN;
    int fd = pm__hub_main_memfd(h, data, len);
    if (fd < 0)
        return fd;
    pm__hub_link_frag_start(h, l, w, PM__NODE_MAIN, fd, len);
    return 0;
}

