/* SPDX-License-Identifier: MIT */
/* fuzz_lane.c - libFuzzer harness for a lane's reader against a hostile peer: what it delivers always obeys the lane's rules. */
/*
 * One lane (a real sealed memfd, made once) with both ends in this
 * process: end 0 is the peer, end 1 the receiver under test. The input is
 * a sequence of operations: the peer's honest sends (pm__lane_send), raw
 * frames it writes past the library (any header: forged sources, notices,
 * replies nobody asked for, large-message flags), stores of any value at
 * any offset of the lane's memory (its page, both rings' indices, records,
 * payloads), the receiver's receives, sends, a revocation and the ordering
 * counts. The oracle is the lane's promises, not a model of the bytes:
 * - a frame delivered is MSG, REQUEST or a REPLY to the request the
 *   receiver waits on, addressed to the receiver, with the peer's
 *   identity as the supervisor gave it, at most PM__LANE_MAX_PAYLOAD bytes,
 *   its payload in the receiver's private buffer (every byte read: ASan
 *   sees an overrun);
 * - once the ring is broken (-EBADMSG) it stays broken;
 * - after a revocation nothing is read past the index it took, also once
 *   the reader's view of the producer index has moved past it.
 */
#include <errno.h>
#include <stdatomic.h>
#include <sys/mman.h>
#include <unistd.h>

#include "fuzz.h"
#include "channel/lane.h"
#include "channel/proto.h"

static const pm__lane_who peer = {.self_slot = 1, .self_inc = 7, .peer_slot = 3, .peer_inc = 9};
static const pm__lane_who self = {.self_slot = 3, .self_inc = 9, .peer_slot = 1, .peer_inc = 7};

static int lane_fd = -1;
static unsigned char *raw; /* the harness's own view, for resets and hostile stores */

static void check_delivered(const pm__lane *l, const pm__frame_hdr *h, const void *p,
                            uint64_t reply_id)
{
    FUZZ_ASSERT(h->type == PM__FT_MSG || h->type == PM__FT_REQUEST || h->type == PM__FT_REPLY);
    if (h->type == PM__FT_REPLY)
        FUZZ_ASSERT(reply_id != 0 && h->request_id == reply_id);
    FUZZ_ASSERT(h->flags == 0 && h->error == 0);
    FUZZ_ASSERT(h->src == self.peer_slot && h->src_inc == self.peer_inc && h->src_host == 0);
    FUZZ_ASSERT(h->dst == self.self_slot && h->dst_inc == self.self_inc && h->dst_host == 0);
    FUZZ_ASSERT(h->len <= PM__LANE_MAX_PAYLOAD);
    const unsigned char *b = p;
    FUZZ_ASSERT(b == l->buf + PM__FRAME_HDR_SIZE);
    volatile unsigned sum = 0;
    for (uint32_t i = 0; i < h->len; i++)
        sum += b[i];
    (void)sum;
}

static void raw_frame(pm__lane *a, fuzz_in *in)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)(fuzz_u8(in) % 15);
    h.flags = fuzz_u8(in) % 4 == 0 ? PM__FF_MEMFD : 0;
    h.dst = fuzz_u8(in) % 2 ? self.self_slot : fuzz_u8(in);
    h.dst_inc = fuzz_u8(in) % 2 ? self.self_inc : fuzz_u8(in);
    h.src = fuzz_u32(in);
    h.src_inc = fuzz_u64(in);
    h.request_id = fuzz_u8(in) % 4;
    h.deadline_ms = fuzz_u8(in) % 3 == 0 ? 5 : 0;
    h.error = fuzz_u8(in) % 5 == 0 ? -EIO : 0;
    h.src_host = fuzz_u8(in) % 5 == 0;
    h.dst_host = fuzz_u8(in) % 5 == 0;
    size_t len = fuzz_u16(in) % (PM__LANE_MAX_PAYLOAD + 64);
    void *dst;
    size_t total = PM__FRAME_HDR_SIZE + len;
    if (total > PM__LANE_MAX_FRAME)
        total = PM__LANE_MAX_FRAME;
    if (pm__ring_reserve(&a->tx, total, &dst) != 0)
        return;
    memset(dst, 0x5a, total);
    h.len = (uint32_t)(fuzz_u8(in) % 8 == 0 ? fuzz_u32(in) : total - PM__FRAME_HDR_SIZE);
    pm__frame_encode(&h, dst);
    if (fuzz_u8(in) % 8 == 0)
        ((unsigned char *)dst)[0] = fuzz_u8(in); /* the version */
    pm__ring_commit(&a->tx, total);
    pm__ring_publish(&a->tx);
}

static void honest_send(pm__lane *l, fuzz_in *in)
{
    static unsigned char pay[PM__LANE_MAX_PAYLOAD];
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)(PM__FT_MSG + fuzz_u8(in) % 3);
    h.request_id = 1 + fuzz_u8(in) % 3;
    size_t len = fuzz_u16(in) % (PM__LANE_MAX_PAYLOAD + 2);
    int rc = pm__lane_send(l, &h, pay, len);
    FUZZ_ASSERT(rc == 0 || rc == -EAGAIN || rc == -EMSGSIZE || rc == -EPIPE || rc == -EBADMSG);
    if (len > PM__LANE_MAX_PAYLOAD)
        FUZZ_ASSERT(rc == -EMSGSIZE || rc == -EPIPE);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (lane_fd < 0) {
        if (pm__lane_create(&lane_fd) != 0)
            abort();
        raw = mmap(NULL, PM__LANE_SIZE, PROT_READ | PROT_WRITE, MAP_SHARED, lane_fd, 0);
        if (raw == MAP_FAILED)
            abort();
    }
    /* A fresh lane for each input: zeroed, both rings formatted. */
    memset(raw, 0, PM__LANE_SIZE);
    for (unsigned i = 0; i < 2; i++)
        pm__ring_format(raw + PM__LANE_PAGE + i * (PM__RING_HDR_SIZE + PM__LANE_CAP),
                        PM__LANE_CAP, PM__LANE_MAX_FRAME);
    static pm__lane a, b;
    if (pm__lane_attach(&a, lane_fd, 0, &peer, -1, -1) != 0 ||
        pm__lane_attach(&b, lane_fd, 1, &self, -1, -1) != 0)
        abort();
    fuzz_in in = {data, size};
    int broken = 0;
    while (fuzz_more(&in)) {
        switch (fuzz_u8(&in) % 8) {
        case 0:
            honest_send(&a, &in);
            break;
        case 1:
            raw_frame(&a, &in);
            break;
        case 2: {
            size_t at = fuzz_u32(&in) % (PM__LANE_SIZE - 8);
            uint64_t v = fuzz_u64(&in);
            memcpy(raw + at, &v, sizeof(v));
            break;
        }
        case 3: {
            pm__frame_hdr h;
            const void *p;
            uint64_t reply_id = b.req_out;
            int rc = pm__lane_recv(&b, &h, &p);
            FUZZ_ASSERT(rc == 0 || rc == 1 || rc == -EBADMSG);
            FUZZ_ASSERT(!broken || rc == -EBADMSG);
            broken = rc == -EBADMSG;
            if (rc == 1)
                check_delivered(&b, &h, p, reply_id);
            /* A frame delivered after a revocation ends at or before its
             * index. (The reader's position alone may pass it: a padding
             * record skipped to reach a frame past the index, not read.) */
            if (rc == 1 && b.revoked)
                FUZZ_ASSERT(b.rx.tail <= b.limit);
            break;
        }
        case 4:
            honest_send(&b, &in);
            break;
        case 5: {
            int rc = pm__lane_revoke(&b);
            FUZZ_ASSERT(rc == 0 || rc == -EBADMSG || rc == -ENOMEM);
            if (rc == -EBADMSG)
                broken = 1;
            break;
        }
        case 6:
            switch (fuzz_u8(&in) % 3) {
            case 0:
                pm__lane_sent_via_hub(&b);
                break;
            case 1:
                pm__lane_took_from_hub(&b);
                break;
            default:
                /* The reader's view of the producer index moves on (a
                 * wait's arming, a scan); after a revocation it reads
                 * its copy of the ring, whose index is the limit. */
                if (!broken) {
                    (void)pm__ring_beyond(&b.rx, 0);
                    broken = b.rx.poisoned;
                }
                break;
            }
            (void)pm__lane_may_send(&b);
            FUZZ_ASSERT(pm__lane_drained(&b) >= -EBADMSG);
            break;
        default: {
            /* The peer drains what the receiver sent it: its own reads. */
            pm__frame_hdr h;
            const void *p;
            (void)pm__lane_recv(&a, &h, &p);
            break;
        }
        }
    }
    pm__lane_detach(&a);
    pm__lane_detach(&b);
    return 0;
}
