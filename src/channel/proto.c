/* SPDX-License-Identifier: MIT */
/* proto.c - handshake payloads and frame send/receive over a ring. */
#include "base/internal.h"
#include "base/le.h"
#include "proto.h"

#include <string.h>


void pm__init_encode(const pm__init_msg *m, void *buf)
{
    unsigned char *p = buf;
    memset(p, 0, PM__INIT_FIXED);
    pm__put32(p, m->slot);
    pm__put16(p + 4, m->addr.port);
    pm__put64(p + 8, m->addr.incarnation);
    memcpy(p + 16, m->addr.system, strnlen(m->addr.system, PM_NAME_MAX - 1));
    memcpy(p + 80, m->addr.host, strnlen(m->addr.host, PM_NAME_MAX - 1));
    pm__put32(p + 144, m->len);
    if (m->len > 0)
        memcpy(p + PM__INIT_FIXED, m->data, m->len);
}

PM__READY_TEXT int pm__init_decode(const void *buf, size_t size, pm__init_msg *m)
{
    const unsigned char *p = buf;
    if (size < PM__INIT_FIXED || p[6] != 0 || p[7] != 0)
        return -EBADMSG;
    pm__init_msg out;
    memset(&out, 0, sizeof(out));
    out.slot = pm__get32(p);
    out.addr.port = pm__get16(p + 4);
    out.addr.incarnation = pm__get64(p + 8);
    memcpy(out.addr.system, p + 16, PM_NAME_MAX);
    memcpy(out.addr.host, p + 80, PM_NAME_MAX);
    if (out.addr.system[PM_NAME_MAX - 1] != '\0' || out.addr.host[PM_NAME_MAX - 1] != '\0' ||
        !pm__name_valid(out.addr.system) || !pm__name_valid(out.addr.host))
        return -EBADMSG;
    out.len = pm__get32(p + 144);
    if (out.len > PM_MAX_INIT_DATA || size != PM__INIT_FIXED + (size_t)out.len)
        return -EBADMSG;
    out.data = out.len > 0 ? p + PM__INIT_FIXED : NULL;
    *m = out;
    return 0;
}

PM__READY_TEXT int pm__frame_send(pm__ring *r, const pm__frame_hdr *h, const void *payload, size_t len)
{
    /* The header's length field is 32 bits, and the sum below must not
     * wrap: no ring takes a frame that long anyway. */
    if (len > UINT32_MAX - PM__FRAME_HDR_SIZE)
        return -EMSGSIZE;
    void *p;
    int rc = pm__ring_reserve(r, PM__FRAME_HDR_SIZE + len, &p);
    if (rc < 0)
        return rc;
    pm__frame_hdr copy = *h;
    copy.len = (uint32_t)len;
    pm__frame_encode(&copy, p);
    if (len > 0)
        memcpy((char *)p + PM__FRAME_HDR_SIZE, payload, len);
    pm__ring_commit(r, PM__FRAME_HDR_SIZE + len);
    pm__ring_publish(r);
    return 0;
}

PM__READY_TEXT int pm__frame_recv(pm__ring *r, size_t max_payload, pm__frame_hdr *h, const void **payload)
{
    const void *p;
    size_t len;
    int rc = pm__ring_peek(r, &p, &len);
    if (rc <= 0)
        return rc;
    /* Decode from a private copy of the header: the peer may rewrite the
     * shared bytes between our checks and our use (double fetch). */
    unsigned char hdr[PM__FRAME_HDR_SIZE];
    if (len < PM__FRAME_HDR_SIZE) {
        pm__ring_consume(r);
        return -EINVAL;
    }
    memcpy(hdr, p, PM__FRAME_HDR_SIZE);
    /* decode checks the header's length field against the record length
     * we hold privately; it never reads beyond hdr. */
    rc = pm__frame_decode_header(hdr, len, max_payload, h);
    if (rc < 0) {
        pm__ring_consume(r);
        return rc == -EPROTO ? -EPROTO : -EINVAL;
    }
    *payload = (const char *)p + PM__FRAME_HDR_SIZE;
    return 1;
}
