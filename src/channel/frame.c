/* SPDX-License-Identifier: MIT */
/*
 * frame.c - frame header codec. Pure: no system calls, no allocation.
 * Explicit little-endian byte order (le.h), so the same bytes can cross a
 * peer link between hosts of different byte order.
 */
#include "base/internal.h"
#include "base/le.h"
#include "frame.h"
#include "bigmsg.h"

PM__READY_TEXT void pm__frame_encode(const pm__frame_hdr *h, void *buf)
{
    unsigned char *p = buf;
    p[0] = PM__FRAME_VERSION;
    p[1] = h->type;
    pm__put16(p + 2, h->flags);
    pm__put32(p + 4, h->len);
    pm__put32(p + 8, h->dst);
    pm__put32(p + 12, h->src);
    pm__put64(p + 16, h->dst_inc);
    pm__put64(p + 24, h->src_inc);
    pm__put64(p + 32, h->request_id);
    pm__put64(p + 40, (uint64_t)h->deadline_ms);
    pm__put32(p + 48, (uint32_t)h->error);
    pm__put16(p + 52, h->dst_host);
    pm__put16(p + 54, h->src_host);
}

PM__READY_TEXT int pm__frame_decode(const void *buf, size_t size, size_t max_payload, pm__frame_hdr *out)
{
    if (buf == NULL || size < PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    return pm__frame_decode_header(buf, size, max_payload, out);
}

PM__READY_TEXT int pm__frame_decode_header(const void *hdr, size_t size, size_t max_payload, pm__frame_hdr *out)
{
    const unsigned char *p = hdr;
    if (size < PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    if (p[0] != PM__FRAME_VERSION)
        return -EPROTO;
    pm__frame_hdr h;
    h.version = p[0];
    h.type = p[1];
    h.flags = pm__get16(p + 2);
    h.len = pm__get32(p + 4);
    h.dst = pm__get32(p + 8);
    h.src = pm__get32(p + 12);
    h.dst_inc = pm__get64(p + 16);
    h.src_inc = pm__get64(p + 24);
    h.request_id = pm__get64(p + 32);
    h.deadline_ms = (int64_t)pm__get64(p + 40);
    h.error = (int32_t)pm__get32(p + 48);
    h.dst_host = pm__get16(p + 52);
    h.src_host = pm__get16(p + 54);
    if (h.type == 0 || h.type > PM__FT_MAX_ || (h.flags & ~PM__FF_MEMFD) != 0)
        return -EBADMSG;
    if (h.dst_host >= PM__MAX_HOSTS || h.src_host >= PM__MAX_HOSTS)
        return -EBADMSG;
    /* An announcement (bigmsg.h) is one of the three data frames and
     * carries exactly its 16 bytes: the rest of the message is elsewhere. */
    if ((h.flags & PM__FF_MEMFD) != 0 &&
        ((h.type != PM__FT_MSG && h.type != PM__FT_REQUEST && h.type != PM__FT_REPLY) ||
         h.len != PM__ANNOUNCE_SIZE))
        return -EBADMSG;
    if (h.len > max_payload || (size_t)h.len != size - PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    if (h.error > 0 || h.deadline_ms < 0)
        return -EBADMSG;
    *out = h;
    return 0;
}
