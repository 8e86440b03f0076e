/* SPDX-License-Identifier: MIT */
/* check_linkfrag.c - the FRAG header codec and the receiver's reassembly rules (src/peer/linkfrag.c), every bad case, without a network. */
#include <check.h>

#include "helpers.h"

#include "channel/frame.h"
#include "peer/linkfrag.h"

#define TOTAL ((uint64_t)PM_MAX_PAYLOAD * 2 + 100)
#define MAX ((uint64_t)8 << 20)

static unsigned char buf[PM_MAX_PAYLOAD];

/* A FRAG payload of n data bytes. */
static size_t frag(uint8_t kind, uint32_t id, uint64_t total, uint64_t off, size_t n)
{
    pm__frag_hdr f = {kind, id, total, off};
    pm__frag_encode(&f, buf);
    memset(buf + PM__FRAG_HDR_SIZE, 0xab, n);
    return PM__FRAG_HDR_SIZE + n;
}

START_TEST(test_codec)
{
    pm__frag_hdr f;
    size_t n;
    size_t len = frag(PM__FT_REQUEST, 7, TOTAL, 100, 1000);
    ck_assert_int_eq(pm__frag_decode(buf, len, &f, &n), 0);
    ck_assert_uint_eq(f.kind, PM__FT_REQUEST);
    ck_assert_uint_eq(f.msg_id, 7);
    ck_assert_uint_eq(f.total, TOTAL);
    ck_assert_uint_eq(f.offset, 100);
    ck_assert_uint_eq(n, 1000);
    /* The exact bytes (doc/protocol.md): kind, 3 zero, id, total, offset. */
    static const unsigned char want[8] = {5, 0, 0, 0, 7, 0, 0, 0};
    ck_assert_mem_eq(buf, want, sizeof(want));
    ck_assert_uint_eq(buf[16], 100);
}
END_TEST

START_TEST(test_codec_refuses)
{
    pm__frag_hdr f;
    size_t n;
    /* No data, a header cut short. */
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 1, TOTAL, 0, 0), &f, &n), -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, 10, &f, &n), -EBADMSG);
    /* More than a fragment may carry. */
    ck_assert_int_eq(pm__frag_decode(buf, PM__FRAG_HDR_SIZE + PM__FRAG_DATA_MAX + 1, &f, &n),
                     -EBADMSG);
    /* Kinds other than MSG, REQUEST, REPLY. */
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_STOP, 1, TOTAL, 0, 5), &f, &n), -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_FRAG, 1, TOTAL, 0, 5), &f, &n), -EBADMSG);
    /* Reserved bytes, id 0. */
    size_t len = frag(PM__FT_MSG, 1, TOTAL, 0, 5);
    buf[2] = 1;
    ck_assert_int_eq(pm__frag_decode(buf, len, &f, &n), -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 0, TOTAL, 0, 5), &f, &n), -EBADMSG);
    /* A total that fits one frame; data past the total; an offset past it
     * (and one that would wrap). */
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 1, PM_MAX_PAYLOAD, 0, 5), &f, &n),
                     -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 1, TOTAL, TOTAL - 4, 5), &f, &n),
                     -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 1, TOTAL, TOTAL + 1, 5), &f, &n),
                     -EBADMSG);
    ck_assert_int_eq(pm__frag_decode(buf, frag(PM__FT_MSG, 1, TOTAL, UINT64_MAX, 5), &f, &n),
                     -EBADMSG);
}
END_TEST

static int step(pm__frag_rx *r, uint8_t kind, uint32_t id, uint64_t total, uint64_t off, size_t n,
                int *dropped, int *last)
{
    pm__frag_hdr f = {kind, id, total, off};
    return pm__frag_rx_step(r, &f, n, MAX, dropped, last);
}

START_TEST(test_reassembly)
{
    pm__frag_rx r;
    memset(&r, 0, sizeof(r));
    int dropped, last;
    uint64_t a = PM__FRAG_DATA_MAX;
    ck_assert_int_eq(step(&r, PM__FT_MSG, 1, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert(!dropped && !last && r.active);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 1, TOTAL, a, a, &dropped, &last), PM__FRAG_DATA);
    ck_assert(!last);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 1, TOTAL, 2 * a, TOTAL - 2 * a, &dropped, &last),
                     PM__FRAG_DATA);
    ck_assert(last && !dropped && !r.active);
    /* The next message begins. */
    ck_assert_int_eq(step(&r, PM__FT_REPLY, 2, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert(!dropped);
}
END_TEST

START_TEST(test_reassembly_bad)
{
    pm__frag_rx r;
    int dropped, last;
    uint64_t a = PM__FRAG_DATA_MAX;
    /* A fragment of a message that never began (unknown id). */
    memset(&r, 0, sizeof(r));
    ck_assert_int_eq(step(&r, PM__FT_MSG, 4, TOTAL, a, a, &dropped, &last), PM__FRAG_BAD);
    ck_assert(!dropped);
    /* Out of order (a gap), then its later fragments are ignored. */
    ck_assert_int_eq(step(&r, PM__FT_MSG, 5, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 5, TOTAL, 2 * a, 10, &dropped, &last), PM__FRAG_BAD);
    ck_assert(dropped && !r.active);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 5, TOTAL, 2 * a + 10, 10, &dropped, &last),
                     PM__FRAG_IGNORE);
    /* Overlapping (a repeat). */
    ck_assert_int_eq(step(&r, PM__FT_MSG, 6, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 6, TOTAL, a - 1, a, &dropped, &last), PM__FRAG_BAD);
    ck_assert(dropped);
    /* Another id, total or kind mid-message. */
    ck_assert_int_eq(step(&r, PM__FT_MSG, 7, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 8, TOTAL, a, a, &dropped, &last), PM__FRAG_BAD);
    ck_assert(dropped);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 9, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 9, TOTAL + 1, a, a, &dropped, &last), PM__FRAG_BAD);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 10, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_REQUEST, 10, TOTAL, a, a, &dropped, &last), PM__FRAG_BAD);
    /* A new message while one is half done: the old one is dropped. */
    ck_assert_int_eq(step(&r, PM__FT_MSG, 11, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert_int_eq(step(&r, PM__FT_MSG, 12, TOTAL, 0, a, &dropped, &last), PM__FRAG_BEGIN);
    ck_assert(dropped && r.active && r.msg_id == 12);
}
END_TEST

START_TEST(test_too_big)
{
    pm__frag_rx r;
    memset(&r, 0, sizeof(r));
    int dropped, last;
    uint64_t a = PM__FRAG_DATA_MAX;
    /* Refused before anything is allocated; its fragments are ignored. */
    ck_assert_int_eq(step(&r, PM__FT_REQUEST, 3, MAX + 1, 0, a, &dropped, &last),
                     PM__FRAG_TOO_BIG);
    ck_assert(!r.active);
    ck_assert_int_eq(step(&r, PM__FT_REQUEST, 3, MAX + 1, a, a, &dropped, &last), PM__FRAG_IGNORE);
    /* Exactly the maximum is fine. */
    ck_assert_int_eq(step(&r, PM__FT_MSG, 4, MAX, 0, a, &dropped, &last), PM__FRAG_BEGIN);
}
END_TEST

static Suite *linkfrag_suite(void)
{
    Suite *s = suite_create("linkfrag");
    PM_ADD_TEST(s, test_codec, 0);
    PM_ADD_TEST(s, test_codec_refuses, 0);
    PM_ADD_TEST(s, test_reassembly, 0);
    PM_ADD_TEST(s, test_reassembly_bad, 0);
    PM_ADD_TEST(s, test_too_big, 0);
    return s;
}

int main(void)
{
    return pm_test_main(linkfrag_suite());
}
