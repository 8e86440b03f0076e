/*
 * frame.c - frame header codec. Pure: no system calls, no allocation.
 * Explicit little-endian byte order so the same codec serves peer links
 * between hosts later.
 */
#include "internal.h"
#include "frame.h"

static void put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static void put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static void put64(unsigned char *p, uint64_t v)
{
    for (int i = 0; i < 8; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

static uint16_t get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static uint32_t get32(const unsigned char *p)
{
    uint32_t v = 0;
    for (int i = 3; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

static uint64_t get64(const unsigned char *p)
{
    uint64_t v = 0;
    for (int i = 7; i >= 0; i--)
        v = (v << 8) | p[i];
    return v;
}

void pm__frame_encode(const pm__frame_hdr *h, void *buf)
{
    unsigned char *p = buf;
    p[0] = PM__FRAME_VERSION;
    p[1] = h->type;
    put16(p + 2, h->flags);
    put32(p + 4, h->len);
    put32(p + 8, h->dst);
    put32(p + 12, h->src);
    put64(p + 16, h->dst_inc);
    put64(p + 24, h->src_inc);
    put64(p + 32, h->request_id);
    put64(p + 40, (uint64_t)h->deadline_ms);
    put32(p + 48, (uint32_t)h->error);
    put32(p + 52, 0);
}

int pm__frame_decode(const void *buf, size_t size, size_t max_payload, pm__frame_hdr *out)
{
    if (buf == NULL || size < PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    return pm__frame_decode_header(buf, size, max_payload, out);
}

int pm__frame_decode_header(const void *hdr, size_t size, size_t max_payload, pm__frame_hdr *out)
{
    const unsigned char *p = hdr;
    if (size < PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    if (p[0] != PM__FRAME_VERSION)
        return -EPROTO;
    pm__frame_hdr h;
    h.version = p[0];
    h.type = p[1];
    h.flags = get16(p + 2);
    h.len = get32(p + 4);
    h.dst = get32(p + 8);
    h.src = get32(p + 12);
    h.dst_inc = get64(p + 16);
    h.src_inc = get64(p + 24);
    h.request_id = get64(p + 32);
    h.deadline_ms = (int64_t)get64(p + 40);
    h.error = (int32_t)get32(p + 48);
    if (h.type == 0 || h.type > PM__FT_MAX_ || h.flags != 0 || get32(p + 52) != 0)
        return -EBADMSG;
    if (h.len > max_payload || (size_t)h.len != size - PM__FRAME_HDR_SIZE)
        return -EBADMSG;
    if (h.error > 0 || h.deadline_ms < 0)
        return -EBADMSG;
    *out = h;
    return 0;
}

const char *pm__frame_type_name(unsigned type)
{
    static const char *const names[] = {
        "invalid", "hello", "init", "ready", "msg", "request", "reply", "undeliverable", "stop",
    };
    return type < PM__ARRAY_SIZE(names) ? names[type] : "invalid";
}
