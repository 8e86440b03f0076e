/* SPDX-License-Identifier: MIT */
/* fuzz.h - what every libFuzzer harness shares: the entry point and a reader of the input bytes. */
#ifndef PM_FUZZ_H
#define PM_FUZZ_H

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

/* A harness checks its oracle with FUZZ_ASSERT: a broken promise is a crash
 * libFuzzer saves, with the promise named on stderr. */
#define FUZZ_ASSERT(cond)                                                               \
    do {                                                                                \
        if (!(cond)) {                                                                  \
            fprintf(stderr, "%s:%d: broken promise: %s\n", __FILE__, __LINE__, #cond);  \
            abort();                                                                    \
        }                                                                               \
    } while (0)

/* The input read as a stream of operations and their arguments. Past its
 * end every read yields 0, so any prefix of an input is a valid input. */
typedef struct fuzz_in {
    const uint8_t *p;
    size_t left;
} fuzz_in;

static inline int fuzz_more(const fuzz_in *in)
{
    return in->left > 0;
}

static inline uint8_t fuzz_u8(fuzz_in *in)
{
    if (in->left == 0)
        return 0;
    in->left--;
    return *in->p++;
}

static inline uint16_t fuzz_u16(fuzz_in *in)
{
    uint16_t lo = fuzz_u8(in);
    return (uint16_t)(lo | (uint16_t)fuzz_u8(in) << 8);
}

static inline uint32_t fuzz_u32(fuzz_in *in)
{
    uint32_t lo = fuzz_u16(in);
    return lo | (uint32_t)fuzz_u16(in) << 16;
}

static inline uint64_t fuzz_u64(fuzz_in *in)
{
    uint64_t lo = fuzz_u32(in);
    return lo | (uint64_t)fuzz_u32(in) << 32;
}

/* Up to n bytes into out; returns how many there were. */
static inline size_t fuzz_bytes(fuzz_in *in, void *out, size_t n)
{
    size_t k = n < in->left ? n : in->left;
    memcpy(out, in->p, k);
    in->p += k;
    in->left -= k;
    return k;
}

#endif /* PM_FUZZ_H */
