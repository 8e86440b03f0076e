/* SPDX-License-Identifier: MIT */
/* fuzz_linkfrag.c - libFuzzer harness for the FRAG header codec and the receiver's reassembly rules (src/peer/linkfrag.c). */
/*
 * Input: one byte choosing max_message (just above PM_MAX_PAYLOAD up to
 * four times it), then operations, each a byte and its arguments:
 *   raw    - 24 header bytes and a payload length: any FRAG payload
 *   whole  - an honest message from first to last fragment, sizes from the
 *            input (a new msg_id, a total up to max + 1)
 *   field  - one fragment built field by field around the harness's own
 *            view: the expected offset or one off, offset 0 mid-message,
 *            the current id or another, the current total or another, the
 *            rest of the message or a piece of it
 * Every payload is decoded from a heap buffer of exactly its length (a read
 * past it is an ASan report), then, when it decodes, stepped through
 * pm__frag_rx_step.
 *
 * Oracle: decode succeeds exactly when the header follows doc/protocol.md
 * 6 (computed here independently), re-encodes to the same 24 bytes, and
 * its data lies inside total; the step's action, *dropped and *last are
 * those of a reference model of the rules; while a message is active its
 * received length never exceeds its total nor max_message; every byte of
 * the message being reassembled is counted in a per-byte map: no byte
 * arrives twice, offsets are contiguous, and a completed message has every
 * byte exactly once.
 */
#include <errno.h>

#include "channel/frame.h"
#include "fuzz.h"
#include "peer/linkfrag.h"

#define MAXP ((uint64_t)PM_MAX_PAYLOAD)
#define MAP_MAX (4 * MAXP + 1)

/* How many times each byte of the message being reassembled arrived. */
static uint8_t seen[MAP_MAX];

/* The reference model: what the rules say the receiver's state is. */
typedef struct model {
    int active;
    uint32_t id;
    uint8_t kind;
    uint64_t total;
    uint64_t got;
    uint32_t skip; /* later fragments of this refused or dropped id are ignored */
} model;

typedef struct run {
    pm__frag_rx rx;
    model m;
    uint64_t max;
    uint32_t next_id; /* the honest sender's next msg_id */
    unsigned completed;
} run;

static int decodes(const unsigned char *h, size_t len)
{
    if (len <= PM__FRAG_HDR_SIZE)
        return 0;
    size_t n = len - PM__FRAG_HDR_SIZE;
    if (n > PM__FRAG_DATA_MAX)
        return 0;
    if (h[0] != PM__FT_MSG && h[0] != PM__FT_REQUEST && h[0] != PM__FT_REPLY)
        return 0;
    if (h[1] | h[2] | h[3])
        return 0;
    uint32_t id = 0;
    uint64_t total = 0, off = 0;
    for (int i = 3; i >= 0; i--)
        id = id << 8 | h[4 + i];
    for (int i = 7; i >= 0; i--) {
        total = total << 8 | h[8 + i];
        off = off << 8 | h[16 + i];
    }
    if (id == 0 || total <= MAXP || off > total)
        return 0;
    return n <= total - off;
}

/* One FRAG payload of len bytes whose header is h (the first min(len, 24)
 * bytes count): decode, step, check. */
static void feed(run *r, const unsigned char h[PM__FRAG_HDR_SIZE], size_t len)
{
    unsigned char *p = malloc(len ? len : 1);
    if (p == NULL)
        return;
    memcpy(p, h, len < PM__FRAG_HDR_SIZE ? len : PM__FRAG_HDR_SIZE);
    pm__frag_hdr f;
    size_t n = 0;
    memset(&f, 0x5a, sizeof(f));
    int rc = pm__frag_decode(p, len, &f, &n);
    int want = decodes(p, len);
    FUZZ_ASSERT(rc == 0 || rc == -EBADMSG);
    FUZZ_ASSERT((rc == 0) == want);
    if (rc != 0) {
        free(p);
        return;
    }
    unsigned char again[PM__FRAG_HDR_SIZE];
    pm__frag_encode(&f, again);
    FUZZ_ASSERT(memcmp(again, p, PM__FRAG_HDR_SIZE) == 0);
    free(p);
    FUZZ_ASSERT(n == len - PM__FRAG_HDR_SIZE && n >= 1 && n <= PM__FRAG_DATA_MAX);
    FUZZ_ASSERT(f.offset <= f.total && n <= f.total - f.offset && f.total > MAXP);

    /* What the rules say (doc/protocol.md 6 and linkfrag.h). */
    model *m = &r->m;
    int want_act, want_dropped = 0;
    if (f.offset == 0) {
        want_dropped = m->active;
        if (f.total > r->max) {
            want_act = PM__FRAG_TOO_BIG;
            m->active = 0;
            m->skip = f.msg_id;
        } else {
            want_act = PM__FRAG_BEGIN;
            *m = (model){1, f.msg_id, f.kind, f.total, 0, 0};
            memset(seen, 0, (size_t)f.total); /* total <= max < MAP_MAX */
        }
    } else if (!m->active) {
        want_act = m->skip != 0 && f.msg_id == m->skip ? PM__FRAG_IGNORE : PM__FRAG_BAD;
    } else if (f.msg_id != m->id || f.kind != m->kind || f.total != m->total ||
               f.offset != m->got) {
        want_act = PM__FRAG_BAD;
        want_dropped = 1;
        m->active = 0;
        m->skip = m->id;
    } else {
        want_act = PM__FRAG_DATA;
    }

    pm__frag_rx before = r->rx;
    int dropped = -1, last = -1;
    int act = pm__frag_rx_step(&r->rx, &f, n, r->max, &dropped, &last);
    FUZZ_ASSERT(act == want_act);
    FUZZ_ASSERT(dropped == want_dropped);
    FUZZ_ASSERT(dropped == 0 || before.active); /* only a message that was there is dropped */
    FUZZ_ASSERT(last == 0 || act == PM__FRAG_BEGIN || act == PM__FRAG_DATA);
    if (act == PM__FRAG_BEGIN)
        FUZZ_ASSERT(f.offset == 0 && f.total <= r->max);
    if (act == PM__FRAG_DATA)
        FUZZ_ASSERT(before.active && before.msg_id == f.msg_id && before.got == f.offset);

    if (act == PM__FRAG_BEGIN || act == PM__FRAG_DATA) {
        /* The caller writes the data at f.offset: count every byte. */
        FUZZ_ASSERT(f.offset + n <= m->total && m->total <= r->max);
        for (uint64_t i = f.offset; i < f.offset + n; i++)
            FUZZ_ASSERT(seen[i]++ == 0); /* no byte twice */
        m->got += n;
        FUZZ_ASSERT(last == (m->got == m->total));
        if (last) {
            for (uint64_t i = 0; i < m->total; i++)
                FUZZ_ASSERT(seen[i] == 1); /* every byte, exactly once */
            m->active = 0;
            r->completed++;
        }
    }
    /* The receiver agrees with the model, and stays inside its bounds. */
    FUZZ_ASSERT(r->rx.active == m->active);
    if (r->rx.active) {
        FUZZ_ASSERT(r->rx.msg_id == m->id && r->rx.got == m->got && r->rx.total == m->total);
        FUZZ_ASSERT(r->rx.got < r->rx.total && r->rx.total <= r->max);
    } else {
        FUZZ_ASSERT(r->rx.skip_id == m->skip || act == PM__FRAG_BEGIN);
    }
}

static void header(unsigned char h[PM__FRAG_HDR_SIZE], uint8_t kind, uint32_t id, uint64_t total,
                   uint64_t off)
{
    pm__frag_hdr f = {kind, id, total, off};
    pm__frag_encode(&f, h);
}

static const uint8_t kinds[] = {PM__FT_MSG, PM__FT_REQUEST, PM__FT_REPLY};

/* An honest message, first to last fragment (doc/protocol.md 6). */
static void whole(run *r, fuzz_in *in)
{
    uint32_t id = r->next_id++;
    if (id == 0)
        id = r->next_id++;
    uint8_t kind = kinds[fuzz_u8(in) % 3];
    /* Up to one byte above max: the too-big path too. */
    uint64_t total = MAXP + 1 + fuzz_u32(in) % (r->max - MAXP + 1);
    unsigned char h[PM__FRAG_HDR_SIZE];
    for (uint64_t off = 0; off < total;) {
        /* Past the input's end full fragments, so the loop stays short. */
        uint16_t k = fuzz_u16(in);
        uint64_t n = k ? 1 + k % PM__FRAG_DATA_MAX : PM__FRAG_DATA_MAX;
        if (n > total - off)
            n = total - off;
        header(h, kind, id, total, off);
        feed(r, h, PM__FRAG_HDR_SIZE + (size_t)n);
        if (total > r->max)
            break; /* the rest would be ignored: one is enough */
        off += n;
    }
}

/* One fragment built field by field around the model's view. */
static void field(run *r, fuzz_in *in)
{
    model *m = &r->m;
    uint8_t sel = fuzz_u8(in);
    uint8_t kind = (sel & 3) < 3 ? kinds[sel & 3 ? (sel & 3) - 1 : 0] : fuzz_u8(in);
    if ((sel & 3) == 0)
        kind = m->kind ? m->kind : PM__FT_MSG;
    uint32_t id;
    switch ((sel >> 2) & 3) {
    case 0: id = m->id; break;
    case 1: id = m->id + 1; break;
    case 2: id = m->skip; break;
    default: id = fuzz_u8(in); break;
    }
    uint64_t total;
    switch ((sel >> 4) & 3) {
    case 0: total = m->total ? m->total : MAXP + 1; break;
    case 1: total = MAXP + 1 + fuzz_u16(in); break;
    case 2: total = r->max + (fuzz_u8(in) & 1); break;
    default: total = fuzz_u64(in); break;
    }
    uint64_t off;
    uint8_t o = fuzz_u8(in);
    switch (o & 7) {
    case 0:
    case 1: off = m->got; break;
    case 2: off = 0; break;
    case 3: off = m->got - 1; break;
    case 4: off = m->got + 1; break;
    case 5: off = total - 1; break;
    default: off = fuzz_u64(in) % (total + 2 ? total + 2 : 1); break;
    }
    uint64_t n;
    switch ((o >> 3) & 3) {
    case 0: n = total - off; break;
    case 1: n = PM__FRAG_DATA_MAX; break;
    case 2: n = 1; break;
    default: n = fuzz_u16(in); break;
    }
    if (n > PM__FRAG_DATA_MAX + 1)
        n = PM__FRAG_DATA_MAX + 1; /* one above the limit at most: it must be refused */
    unsigned char h[PM__FRAG_HDR_SIZE];
    header(h, kind, id, total, off);
    feed(r, h, PM__FRAG_HDR_SIZE + (size_t)n);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    fuzz_in in = {data, size};
    static const uint64_t maxes[] = {MAXP + 1, MAXP + PM__FRAG_DATA_MAX, 2 * MAXP + 100,
                                     4 * MAXP};
    run r;
    memset(&r, 0, sizeof(r));
    r.max = maxes[fuzz_u8(&in) % 4];
    r.next_id = 1;
    /* Bounded: a long input is still a fast run. */
    for (int ops = 0; fuzz_more(&in) && ops < 256; ops++) {
        switch (fuzz_u8(&in) % 3) {
        case 0: {
            unsigned char h[PM__FRAG_HDR_SIZE];
            memset(h, 0, sizeof(h));
            fuzz_bytes(&in, h, sizeof(h));
            feed(&r, h, fuzz_u32(&in) % (MAXP + 8));
            break;
        }
        case 1: whole(&r, &in); break;
        default: field(&r, &in); break;
        }
    }
    return 0;
}
