/* SPDX-License-Identifier: MIT */
/* le.h - little-endian put/get of 16/32/64-bit values: the one byte-order helper of every wire format. */
#ifndef PM_LE_H
#define PM_LE_H

#include <stdint.h>

static inline void pm__put16(unsigned char *p, uint16_t v)
{
    p[0] = (unsigned char)v;
    p[1] = (unsigned char)(v >> 8);
}

static inline void pm__put32(unsigned char *p, uint32_t v)
{
    for (int i = 0; i < 4; i++)
        p[i] = (unsigned char)(v >> (8 * i));
}

/* Two halves, not a loop of eight bytes: gcc 12 at -O2 merges pm__put32's
 * four byte stores into one store but neither unrolls nor merges the loop
 * of eight, and the frame header's four 64-bit fields are on the hub's path
 * for every relayed frame (doc/benchmarks.md, "Hub work per frame vs N"). */
static inline void pm__put64(unsigned char *p, uint64_t v)
{
    pm__put32(p, (uint32_t)v);
    pm__put32(p + 4, (uint32_t)(v >> 32));
}

static inline uint16_t pm__get16(const unsigned char *p)
{
    return (uint16_t)(p[0] | (p[1] << 8));
}

static inline uint32_t pm__get32(const unsigned char *p)
{
    return (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 | (uint32_t)p[3] << 24;
}

static inline uint64_t pm__get64(const unsigned char *p)
{
    return (uint64_t)pm__get32(p) | (uint64_t)pm__get32(p + 4) << 32;
}

#endif /* PM_LE_H */
