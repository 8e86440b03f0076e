/* SPDX-License-Identifier: MIT */
/* fuzz_ring.c - libFuzzer harness for the ring consumer against a hostile producer, checked by a reference model. */
/*
 * One ring of the smallest capacity (4 KiB, maximal frame 2040 bytes, so
 * frames wrap and need padding records often) in a heap block of exactly
 * its size: any read or write past it is an ASan report. The input is a
 * sequence of operations: the honest producer (pm__ring_reserve / commit /
 * publish), the consumer (peek / consume / release / arm / empty), and a
 * hostile producer that stores any value into the shared producer index,
 * the consumer's index or any record header, as a worker can.
 *
 * The reference model is a FIFO of the frames committed and published
 * (length, fill pattern, where each ends) and the byte positions of both
 * ends. While no hostile write happened the ring must behave exactly like
 * the model: reserve fits exactly when the model says the frame fits, peek
 * returns the model's next frame with its bytes, or 0 when the model has
 * nothing published. After a hostile write the model no longer says what
 * comes, only what may: a frame inside the data area no longer than the
 * maximum, nothing, or -EBADMSG, and once -EBADMSG always -EBADMSG.
 */
#include <errno.h>

#include "fuzz.h"
#include "channel/ring.h"

#define CAP ((uint64_t)4096)
#define MAX_FRAME ((uint32_t)(CAP / 2 - 8))
#define MQ 1024 /* model FIFO; at most CAP / 16 frames are ever outstanding */

typedef struct model {
    uint32_t len[MQ];
    uint8_t seed[MQ];
    uint64_t start[MQ];   /* producer index of this frame's record */
    uint64_t end[MQ];     /* producer index just past it */
    uint64_t read, pub, committed; /* FIFO positions (frame counts) */
    uint64_t head;        /* producer index after the last commit */
    uint64_t tail;        /* consumer index after the last consume */
    uint64_t released;    /* consumer index the producer has seen */
    int resv;             /* a reservation is open */
    uint32_t resv_len;
    uint64_t resv_at;
    uint8_t resv_seed;
    int peeked;           /* the consumer holds a peeked frame */
} model;

static uint8_t pattern(uint8_t seed, size_t i)
{
    return (uint8_t)(seed + i * 31u + (i >> 8));
}

/* The bytes of a record the consumer may hand out: inside the data area,
 * after its 8-byte record header, 8-byte aligned, 1..MAX_FRAME long. Every
 * byte is read, so ASan sees any overrun. */
static void check_bounds(const pm__ring *r, const void *p, size_t len)
{
    const unsigned char *b = p;
    FUZZ_ASSERT(b >= r->data + PM__RING_REC_HDR && b <= r->data + CAP);
    FUZZ_ASSERT(((uintptr_t)(b - r->data) & 7) == 0);
    FUZZ_ASSERT(len >= 1 && len <= MAX_FRAME && len <= (size_t)(r->data + CAP - b));
    volatile unsigned sum = 0;
    for (size_t i = 0; i < len; i++)
        sum += b[i];
    (void)sum;
}

/* What reserve must return for len now, by the model's arithmetic. */
static int model_reserve(const model *m, size_t len, uint64_t *pad)
{
    *pad = 0;
    if (len == 0 || m->resv)
        return -EINVAL;
    if (len > MAX_FRAME)
        return -EMSGSIZE;
    uint64_t total = PM__RING_REC_HDR + ((len + 7) & ~(uint64_t)7);
    uint64_t room = CAP - (m->head & (CAP - 1));
    *pad = room < total ? room : 0;
    return m->head - m->released + total + *pad <= CAP ? 0 : -EAGAIN;
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    size_t region_size = pm__ring_region_size(CAP);
    unsigned char *region = aligned_alloc(PM__CACHELINE, region_size);
    static model m;
    if (region == NULL)
        return 0;
    memset(region, 0, region_size);
    memset(&m, 0, sizeof(m));
    pm__ring prod, cons;
    FUZZ_ASSERT(pm__ring_format(region, CAP, MAX_FRAME) == 0);
    FUZZ_ASSERT(pm__ring_attach(&prod, region, CAP, MAX_FRAME, PM__RING_PRODUCER, -1, -1) == 0);
    FUZZ_ASSERT(pm__ring_attach(&cons, region, CAP, MAX_FRAME, PM__RING_CONSUMER, -1, -1) == 0);
    struct pm__ring_shared *sh = (struct pm__ring_shared *)region;

    int tainted = 0;  /* a hostile write happened: the model only bounds */
    int poisoned = 0; /* the consumer said -EBADMSG */
    fuzz_in in = {data, size};
    while (fuzz_more(&in)) {
        uint8_t op = fuzz_u8(&in);
        switch (op % 12) {
        case 0: { /* honest producer: reserve and fill */
            size_t len = fuzz_u16(&in) % (MAX_FRAME + 16);
            uint8_t seed = fuzz_u8(&in);
            void *p = NULL;
            uint64_t pad;
            int want = model_reserve(&m, len, &pad);
            int rc = pm__ring_reserve(&prod, len, &p);
            if (!tainted)
                FUZZ_ASSERT(rc == want);
            else
                FUZZ_ASSERT(rc == 0 || rc == -EINVAL || rc == -EMSGSIZE || rc == -EAGAIN ||
                            rc == -EBADMSG);
            if (rc == 0) {
                /* Even a producer misled by a hostile consumer index
                 * writes only inside its data area. */
                unsigned char *b = p;
                FUZZ_ASSERT(b >= prod.data + PM__RING_REC_HDR && b + len <= prod.data + CAP);
                for (size_t i = 0; i < len; i++)
                    b[i] = pattern(seed, i);
                m.resv = 1;
                m.resv_len = (uint32_t)len;
                m.resv_at = m.head + pad;
                m.resv_seed = seed;
            }
            break;
        }
        case 1: { /* honest producer: commit 1..reserved bytes (or a bad length: ignored) */
            uint16_t k = fuzz_u16(&in);
            size_t len = m.resv && (k & 0x8000) == 0 ? 1 + k % m.resv_len : k;
            int valid = m.resv && len >= 1 && len <= m.resv_len;
            pm__ring_commit(&prod, len);
            if (!valid)
                break;
            uint64_t q = m.committed % MQ;
            m.len[q] = (uint32_t)len;
            m.seed[q] = m.resv_seed;
            m.start[q] = m.resv_at;
            m.head = m.resv_at + PM__RING_REC_HDR + ((len + 7) & ~(uint64_t)7);
            m.end[q] = m.head;
            m.committed++;
            m.resv = 0;
            break;
        }
        case 2: /* honest producer: publish */
            pm__ring_publish(&prod);
            m.pub = m.committed;
            break;
        case 3: { /* consumer: peek */
            const void *p = NULL;
            size_t len = 0;
            int rc = pm__ring_peek(&cons, &p, &len);
            if (poisoned)
                FUZZ_ASSERT(rc == -EBADMSG); /* poison is for good */
            if (!tainted) {
                if (m.read < m.pub) {
                    uint64_t q = m.read % MQ;
                    FUZZ_ASSERT(rc == 1 && len == m.len[q]);
                    check_bounds(&cons, p, len);
                    for (size_t i = 0; i < len; i++)
                        FUZZ_ASSERT(((const uint8_t *)p)[i] == pattern(m.seed[q], i));
                    /* A padding record in front of it is passed over at
                     * peek: a release may hand it back already. */
                    m.tail = m.start[q];
                } else {
                    FUZZ_ASSERT(rc == 0);
                }
            } else {
                FUZZ_ASSERT(rc == 1 || rc == 0 || rc == -EBADMSG);
                if (rc == 1)
                    check_bounds(&cons, p, len);
            }
            poisoned |= rc == -EBADMSG;
            m.peeked = rc == 1;
            break;
        }
        case 4: /* consumer: consume the peeked frame */
            pm__ring_consume(&cons);
            if (m.peeked && !tainted) {
                m.tail = m.end[m.read % MQ];
                m.read++;
            }
            m.peeked = 0;
            break;
        case 5: /* consumer: release */
            pm__ring_release(&cons);
            if (!tainted) {
                FUZZ_ASSERT(cons.tail == m.tail);
                m.released = m.tail;
            }
            break;
        case 6: { /* consumer: arm (releases first) and disarm */
            int rc = pm__ring_arm(&cons);
            if (!tainted) {
                FUZZ_ASSERT(rc == (m.read < m.pub));
                m.released = m.tail;
            } else {
                FUZZ_ASSERT(rc == 1 || rc == 0 || rc == -EBADMSG);
            }
            if (poisoned)
                FUZZ_ASSERT(rc == -EBADMSG || cons.peek_ptr != NULL);
            pm__ring_disarm(&cons);
            break;
        }
        case 7: { /* consumer: empty */
            int e = pm__ring_empty(&cons);
            if (!tainted)
                FUZZ_ASSERT(e == (m.read == m.pub));
            break;
        }
        case 8: { /* producer: arm for space, as the hub does for a full down ring */
            size_t len = 1 + fuzz_u16(&in) % MAX_FRAME;
            uint64_t pad;
            int rc = pm__ring_arm_space(&prod, len);
            if (!tainted && !m.resv)
                FUZZ_ASSERT(rc == (model_reserve(&m, len, &pad) == 0));
            pm__ring_disarm_space(&prod);
            break;
        }
        case 9: { /* hostile: the producer index, near its value or anywhere */
            uint64_t v = fuzz_u64(&in);
            uint64_t h = atomic_load_explicit(&sh->head, memory_order_relaxed);
            if (v & 1)
                v = h + (uint64_t)(int64_t)(int8_t)(v >> 8) * 8;
            atomic_store_explicit(&sh->head, v, memory_order_release);
            tainted = 1;
            break;
        }
        case 10: { /* hostile: a record header (or any 8 bytes) in the data area */
            uint16_t off = fuzz_u16(&in);
            uint32_t len = fuzz_u32(&in);
            uint32_t flags = fuzz_u8(&in) % 4;
            if (off & 0x8000) /* aimed at the record the consumer reads next */
                off = (uint16_t)(cons.tail & (CAP - 1));
            off &= (uint16_t)(CAP - 8);
            if (len & 0x80000000u)
                len = len % (MAX_FRAME + 64); /* plausible lengths */
            uint64_t rec = (uint64_t)len | (uint64_t)flags << 32;
            memcpy(cons.data + off, &rec, sizeof(rec));
            tainted = 1;
            break;
        }
        case 11: /* hostile: the consumer's index (the other end's reader is the victim) */
            atomic_store_explicit(&sh->tail, fuzz_u64(&in), memory_order_release);
            tainted = 1;
            break;
        }
        /* The consumer's own indices stay ordered whatever was written. */
        FUZZ_ASSERT(cons.released <= cons.tail && cons.tail <= cons.head_cache);
        FUZZ_ASSERT(cons.head_cache - cons.released <= CAP);
    }
    free(region);
    return 0;
}
