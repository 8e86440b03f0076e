/* SPDX-License-Identifier: MIT */
/* fuzz_frame.c - libFuzzer harness for the frame header codec (pm__frame_decode). */
/*
 * Input: one byte choosing max_payload, then the frame bytes. The frame is
 * copied into a buffer of exactly its size, so a read one byte past it is
 * an ASan report. Oracle: decode either fails with -EPROTO / -EBADMSG and
 * leaves *out untouched, or succeeds with a header that the encoder writes
 * back byte for byte (the codec has one wire form per header) and whose
 * length agrees with the buffer and the maximum.
 */
#include <errno.h>

#include "channel/frame.h"
#include "fuzz.h"

/* Field by field: the struct has tail padding that a copy need not keep. */
static int same_hdr(const pm__frame_hdr *a, const pm__frame_hdr *b)
{
    return a->version == b->version && a->type == b->type && a->flags == b->flags &&
           a->len == b->len && a->dst == b->dst && a->src == b->src && a->dst_inc == b->dst_inc &&
           a->src_inc == b->src_inc && a->request_id == b->request_id &&
           a->deadline_ms == b->deadline_ms && a->error == b->error &&
           a->dst_host == b->dst_host && a->src_host == b->src_host;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    static const size_t maxes[] = {0, 1, 64, 4096, 64 * 1024, SIZE_MAX};
    size_t max_payload = maxes[data[0] % (sizeof(maxes) / sizeof(maxes[0]))];
    data++;
    size--;

    unsigned char *buf = malloc(size ? size : 1);
    if (buf == NULL)
        return 0;
    memcpy(buf, data, size);

    pm__frame_hdr out, untouched;
    memset(&out, 0xa5, sizeof(out));
    memcpy(&untouched, &out, sizeof(out));
    int rc = pm__frame_decode(buf, size, max_payload, &out);
    if (rc < 0) {
        FUZZ_ASSERT(rc == -EPROTO || rc == -EBADMSG);
        FUZZ_ASSERT(memcmp(&out, &untouched, sizeof(out)) == 0); /* *out only on success */
    } else {
        FUZZ_ASSERT(rc == 0);
        FUZZ_ASSERT(size >= PM__FRAME_HDR_SIZE && out.len == size - PM__FRAME_HDR_SIZE);
        FUZZ_ASSERT(out.len <= max_payload);
        FUZZ_ASSERT(out.type != 0 && out.type <= PM__FT_MAX_);
        FUZZ_ASSERT(out.version == PM__FRAME_VERSION && (out.flags == 0 || out.flags == PM__FF_MEMFD));
        FUZZ_ASSERT(out.error <= 0 && out.deadline_ms >= 0);
        FUZZ_ASSERT(out.dst_host < PM__MAX_HOSTS && out.src_host < PM__MAX_HOSTS);
        /* One wire form per header: the encoder writes back the same bytes. */
        unsigned char again[PM__FRAME_HDR_SIZE];
        pm__frame_encode(&out, again);
        FUZZ_ASSERT(memcmp(again, buf, PM__FRAME_HDR_SIZE) == 0);
        /* The header-only entry point agrees, reading a private copy. */
        pm__frame_hdr h2;
        FUZZ_ASSERT(pm__frame_decode_header(again, size, max_payload, &h2) == 0);
        FUZZ_ASSERT(same_hdr(&h2, &out));
    }
    free(buf);
    return 0;
}
