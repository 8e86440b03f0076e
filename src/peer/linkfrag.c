/* SPDX-License-Identifier: MIT */
/* linkfrag.c - the FRAG frame's header codec and the rules a receiver reassembles a large message by (doc/protocol.md 6, "Large messages"). */
#include "linkfrag.h"

#include <errno.h>
#include <string.h>

#include "channel/frame.h"
#include "base/le.h"

void pm__frag_encode(const pm__frag_hdr *f, unsigned char out[PM__FRAG_HDR_SIZE])
{
    memset(out, 0, PM__FRAG_HDR_SIZE);
    out[0] = f->kind;
    pm__put32(out + 4, f->msg_id);
    pm__put64(out + 8, f->total);
    pm__put64(out + 16, f->offset);
}

int pm__frag_decode(const unsigned char *p, size_t len, pm__frag_hdr *out, size_t *data_len)
{
    if (len <= PM__FRAG_HDR_SIZE || len - PM__FRAG_HDR_SIZE > PM__FRAG_DATA_MAX)
        return -EBADMSG;
    pm__frag_hdr f;
    f.kind = p[0];
    if (f.kind != PM__FT_MSG && f.kind != PM__FT_REQUEST && f.kind != PM__FT_REPLY)
        return -EBADMSG;
    if (p[1] != 0 || p[2] != 0 || p[3] != 0)
        return -EBADMSG;
    f.msg_id = pm__get32(p + 4);
    f.total = pm__get64(p + 8);
    f.offset = pm__get64(p + 16);
    size_t n = len - PM__FRAG_HDR_SIZE;
    /* offset <= total first, so offset + n cannot wrap. */
    if (f.msg_id == 0 || f.total <= PM_MAX_PAYLOAD || f.offset > f.total || n > f.total - f.offset)
        return -EBADMSG;
    *out = f;
    *data_len = n;
    return 0;
}

int pm__frag_rx_step(pm__frag_rx *r, const pm__frag_hdr *f, size_t data_len, uint64_t max,
                     int *dropped, int *last)
{
    *dropped = 0;
    *last = 0;
    if (f->offset == 0) {
        /* A new message. One at a time: a message still being reassembled
         * is abandoned (its sender gave up on it, or broke the rule). */
        *dropped = r->active;
        r->active = 0;
        if (f->total > max) {
            r->skip_id = f->msg_id;
            return PM__FRAG_TOO_BIG;
        }
        r->active = 1;
        r->skip_id = 0;
        r->msg_id = f->msg_id;
        r->kind = f->kind;
        r->total = f->total;
        r->got = data_len;
        *last = r->got == r->total;
        if (*last)
            r->active = 0;
        return PM__FRAG_BEGIN;
    }
    if (!r->active) {
        if (r->skip_id != 0 && f->msg_id == r->skip_id)
            return PM__FRAG_IGNORE;
        return PM__FRAG_BAD; /* an unknown id, or a message that never began */
    }
    if (f->msg_id != r->msg_id || f->kind != r->kind || f->total != r->total ||
        f->offset != r->got) {
        /* Out of order, overlapping, a gap, another message's fragment: the
         * one being reassembled cannot be completed any more. */
        *dropped = 1;
        r->active = 0;
        r->skip_id = r->msg_id;
        return PM__FRAG_BAD;
    }
    r->got += data_len;
    *last = r->got == r->total;
    if (*last)
        r->active = 0;
    return PM__FRAG_DATA;
}
