/* SPDX-License-Identifier: MIT */
/* lane.c - a direct lane between two workers: its memory, its rules, copy then validate. */
#define _GNU_SOURCE
#include "base/internal.h"
#include "lane.h"
#include "proto.h"
#include "shm.h"

#include <stdlib.h>
#include <string.h>
#include <unistd.h>

/* Where ring `which` (0 or 1) starts in a lane's memory: its offset, and
 * its address in a mapping. */
static size_t ring_off(unsigned which)
{
    return PM__LANE_PAGE + (size_t)which * pm__ring_region_size(PM__LANE_CAP);
}

static unsigned char *ring_at(void *map, unsigned which)
{
    return (unsigned char *)map + ring_off(which);
}

int pm__lane_create(int *fd_out)
{
    /* The supervisor makes lanes (hub_lane.c): past its RLIMIT_FSIZE the
     * ftruncate below would raise SIGXFSZ, whose default action ends it
     * (shm.c pm__memfd_size_ok: asked first, as every memfd's size). */
    int rc = pm__memfd_size_ok(PM__LANE_SIZE);
    if (rc < 0)
        return rc;
    int fd = pm__memfd_new("procmesh-lane");
    if (fd < 0)
        return fd;
    if (ftruncate(fd, (off_t)PM__LANE_SIZE) < 0) {
        rc = -errno;
        goto fail;
    }
    if ((rc = pm__memfd_seal(fd, PM__SEAL_RING)) < 0)
        goto fail;
    /* Each ring's header written with pwrite, never through a mapping:
     * the supervisor maps no lane, even briefly (a munmap of a mapping
     * it touched costs a TLB shootdown on every CPU that ran the
     * supervisor, tens of microseconds in a VM, in the loop's turn). The
     * geometry is for a reader that trusts the creator (a debugger, a
     * test); the ends never read it back (ring.h). A constant
     * pm__ring_check_geometry accepts, so formatting cannot fail
     * (check_lane test_create_sealed reads both headers back). The two
     * header pages are charged to the supervisor's cgroup; the lane's page
     * and each ring's data pages to the worker that first writes them
     * (doc/design.md, "Direct lanes", Memory). */
    for (unsigned k = 0; k < 2; k++) {
        struct pm__ring_shared hdr;
        memset(&hdr, 0, sizeof(hdr));
        (void)pm__ring_format(&hdr, PM__LANE_CAP, PM__LANE_MAX_FRAME);
        ssize_t w = pwrite(fd, &hdr, sizeof(hdr), (off_t)ring_off(k));
        if (w != (ssize_t)sizeof(hdr)) {
            rc = w < 0 ? -errno : -EIO;
            goto fail;
        }
    }
    *fd_out = fd;
    return 0;
fail:
    pm__close(fd);
    return rc;
}

int pm__lane_attach(pm__lane *l, int fd, unsigned end, const pm__lane_who *who, int wake_fd,
                    int park_fd)
{
    if (end > 1 || who == NULL || who->self_slot == who->peer_slot)
        return -EINVAL;
    memset(l, 0, offsetof(pm__lane, buf));
    void *map;
    int rc = pm__shm_map(fd, PM__LANE_SIZE, &map);
    if (rc < 0)
        return rc;
    rc = pm__ring_attach(&l->tx, ring_at(map, end), PM__LANE_CAP, PM__LANE_MAX_FRAME,
                         PM__RING_PRODUCER, wake_fd, park_fd);
    if (rc == 0)
        rc = pm__ring_attach(&l->rx, ring_at(map, 1 - end), PM__LANE_CAP, PM__LANE_MAX_FRAME,
                             PM__RING_CONSUMER, wake_fd, park_fd);
    if (rc < 0) {
        /* A ring whose indices were already impossible: the peer got there
         * first (attach validates them once). Nothing is kept. */
        pm__shm_unmap(map, PM__LANE_SIZE);
        return rc;
    }
    l->map = map;
    l->sh = map;
    l->end = end;
    l->who = *who;
    /* The peer's doorbell is a socket's end (hub_lane.c): sent on, never
     * written (ring.c wake); -1 (none) keeps the rings from waking. */
    l->tx.wake_sock = l->rx.wake_sock = 1;
    /* Release: the peer that sees it may write to us; our rings' state
     * above is ready before. */
    atomic_store_explicit(&l->sh->end[end].attached, 1, memory_order_release);
    return 0;
}

int pm__lane_peer_attached(const pm__lane *l)
{
    return atomic_load_explicit(&l->sh->end[1 - l->end].attached, memory_order_acquire) == 1;
}

void pm__lane_detach(pm__lane *l)
{
    if (l->map == NULL)
        return;
    pm__shm_unmap(l->map, PM__LANE_SIZE);
    free(l->snap);
    l->snap = NULL;
    l->map = NULL;
    l->sh = NULL;
}

static int lane_type(unsigned type)
{
    return type == PM__FT_MSG || type == PM__FT_REQUEST || type == PM__FT_REPLY;
}

/* The fields a correct sender's library writes for each type: a message
 * has no request id and no deadline, a request and a reply have an id;
 * no lane frame names another host or carries an error (notices never
 * take a lane). */
static int fields_valid(const pm__frame_hdr *h)
{
    if (h->error != 0 || h->dst_host != PM__HOST_LOCAL || h->src_host != PM__HOST_LOCAL)
        return 0;
    if (h->type == PM__FT_MSG)
        return h->request_id == 0 && h->deadline_ms == 0;
    return h->request_id != 0;
}

int pm__lane_judge(const pm__lane_who *who, uint64_t reply_id, const void *frame, size_t len,
                   pm__frame_hdr *out)
{
    pm__frame_hdr h;
    if (pm__frame_decode(frame, len, PM__LANE_MAX_PAYLOAD, &h) < 0)
        return PM__LANE_DROP_MALFORMED;
    if (!lane_type(h.type) || h.flags != 0)
        return PM__LANE_DROP_TYPE;
    if (!fields_valid(&h))
        return PM__LANE_DROP_MALFORMED;
    /* Incarnation 0 addresses whoever holds the slot, as through the hub;
     * any other must be this end's: a lane joins two incarnations only. */
    if (h.dst != who->self_slot || (h.dst_inc != 0 && h.dst_inc != who->self_inc))
        return PM__LANE_DROP_DST;
    /* A reply is the peer's answer to the request this end sent it on this
     * lane, and to nothing else: the peer cannot answer a request it did
     * not get, nor one another worker got. */
    if (h.type == PM__FT_REPLY && (reply_id == 0 || h.request_id != reply_id))
        return PM__LANE_DROP_REPLY;
    /* Identity from the channel: whatever the peer wrote, the sender is
     * the incarnation the supervisor put at the other end. */
    h.src = who->peer_slot;
    h.src_inc = who->peer_inc;
    h.dst_inc = who->self_inc;
    *out = h;
    return PM__LANE_OK;
}

int pm__lane_send(pm__lane *l, const pm__frame_hdr *h, const void *payload, size_t len)
{
    if (l->revoked)
        return -EPIPE;
    if (!lane_type(h->type) || h->flags != 0 || (h->type != PM__FT_MSG && h->request_id == 0))
        return -EINVAL;
    if (len > PM__LANE_MAX_PAYLOAD)
        return -EMSGSIZE;
    pm__frame_hdr c = *h;
    c.src = l->who.self_slot;
    c.src_inc = l->who.self_inc;
    c.dst = l->who.peer_slot;
    c.dst_inc = l->who.peer_inc;
    c.src_host = c.dst_host = PM__HOST_LOCAL;
    c.error = 0;
    if (c.type == PM__FT_MSG) {
        c.request_id = 0;
        c.deadline_ms = 0;
    }
    int rc = pm__frame_send(&l->tx, &c, payload, len);
    if (rc == 0 && c.type == PM__FT_REQUEST)
        l->req_out = c.request_id;
    return rc;
}

int pm__lane_recv(pm__lane *l, pm__frame_hdr *h, const void **payload)
{
    /* One call reads at most the frames published when it first looked
     * (the producer index it had or refreshed then): a peer that keeps
     * writing frames the rules refuse, as fast as they are dropped, cannot
     * hold the reader in here while its hub ring and other lanes wait. */
    int looked = 0;
    for (;;) {
        /* Broken stays broken, revoked or not (ring.h: poisoned). */
        if (l->rx.poisoned)
            return -EBADMSG;
        if (l->revoked && l->rx.tail >= l->limit)
            return 0;
        if (looked && l->rx.peek_ptr == NULL && l->rx.tail == l->rx.head_cache) {
            pm__ring_release(&l->rx); /* all read that was there: as empty */
            return 0;
        }
        looked = 1;
        const void *p;
        size_t len;
        int rc = pm__ring_peek(&l->rx, &p, &len);
        if (rc == 0) /* all read: hand the space back now */
            pm__ring_release(&l->rx);
        if (rc <= 0)
            return rc;
        /* Copy, then validate: everything below reads the private copy
         * only. len is at most the ring's maximum frame (ring.h checked
         * the record), which is the buffer's size. */
        memcpy(l->buf, p, len);
        pm__ring_consume(&l->rx);
        /* Space goes back a quarter of the ring at a time (and whenever the
         * ring is found empty, above, or this end arms it to sleep: ring.h
         * pm__ring_arm): one store to the line the writer reads per many
         * frames, not per frame, while a stream flows; and at once when
         * this was the last frame published as far as we know, so that the
         * peer sees the lane drained without waiting for our next look (a
         * frame of its for the hub waits for that: node_lanesend.c; stop
         * 41 tried handing it back only when asked, and a writer whose
         * reader had taken everything and then stopped reading for a while
         * waited for its drain all that time: check_lanemesh
         * test_lane_switch_bounded). A reader that keeps pace with a
         * stream would do this after every frame; it paces itself instead
         * (node_lanes.h pm__node_ls_pace). */
        if (l->rx.tail - l->rx.released >= PM__LANE_CAP / 4 || l->rx.tail == l->rx.head_cache)
            pm__ring_release(&l->rx);
        int why = pm__lane_judge(&l->who, l->req_out, l->buf, len, h);
        if (why != PM__LANE_OK) {
            l->dropped[why]++;
            continue;
        }
        if (h->type == PM__FT_REPLY)
            l->req_out = 0;
        l->delivered++;
        *payload = l->buf + PM__FRAME_HDR_SIZE;
        return 1;
    }
}

int pm__lane_revoke(pm__lane *l)
{
    if (l->revoked)
        return l->rx.poisoned ? -EBADMSG : 0;
    l->revoked = 1;
    /* The producer's index, read once and validated as any (ring.h): the
     * last frame the peer published before it could no longer write. */
    int rc = pm__ring_beyond(&l->rx, 0);
    l->limit = rc < 0 ? l->rx.tail : l->rx.head_cache;
    if (rc < 0) /* broken: nothing more is read (the limit is the tail) */
        return rc;
    /* The bytes below the limit as they are now: whatever still maps the
     * lane (a worker's fork, a process it passed the fd to) may rewrite a
     * frame in place after this, and the reader must not see it. One copy
     * of the data area, read from from now on: a private ring whose
     * producer index is the limit. The reader holds no peeked frame here
     * (pm__lane_recv consumes what it peeks before it returns). */
    size_t size = PM__RING_HDR_SIZE + (size_t)PM__LANE_CAP;
    struct pm__ring_shared *copy = aligned_alloc(PM__RING_HDR_SIZE, size);
    if (copy == NULL) {
        l->limit = l->rx.tail;
        return -ENOMEM;
    }
    memset(copy, 0, PM__RING_HDR_SIZE);
    atomic_store_explicit(&copy->head, l->limit, memory_order_relaxed);
    atomic_store_explicit(&copy->tail, l->rx.released, memory_order_relaxed);
    memcpy((unsigned char *)copy + PM__RING_HDR_SIZE, l->rx.data, (size_t)PM__LANE_CAP);
    l->snap = copy;
    l->rx.sh = copy;
    l->rx.data = (unsigned char *)copy + PM__RING_HDR_SIZE;
    return 0;
}

void pm__lane_sent_via_hub(pm__lane *l)
{
    l->hub_sent++;
}

void pm__lane_took_from_hub(pm__lane *l)
{
    l->hub_taken++;
    /* Release: not needed for the count itself (the peer only compares
     * it), but it orders the count after our reads of the frames it
     * counts, as any consumer index. */
    atomic_store_explicit(&l->sh->end[l->end].hub_taken, l->hub_taken, memory_order_release);
}

int pm__lane_may_send(const pm__lane *l)
{
    uint64_t taken = pm__lane_peer_taken(l);
    /* The peer's word, unchecked: a peer that overstates it only lets our
     * frames to it overtake each other, which is its own loss. */
    return taken >= l->hub_sent;
}

uint64_t pm__lane_peer_taken(const pm__lane *l)
{
    return atomic_load_explicit(&l->sh->end[1 - l->end].hub_taken, memory_order_acquire);
}

int pm__lane_drained(pm__lane *l)
{
    return pm__ring_consumed(&l->tx, pm__ring_head(&l->tx));
}
