/* SPDX-License-Identifier: MIT */
/* fuzz_noise.c - libFuzzer harness for the Noise handshake message reader (pm__noise_read_message). */
/*
 * Two sides of a deterministic handshake (fixed static and ephemeral keys,
 * the same prologue) run honestly up to the message the input replaces.
 * Input: a byte choosing the protocol (XXpsk3 or XX) and which message is
 * replaced (1, 2 or 3), a byte choosing the reader's payload capacity, then
 * the message, copied into a buffer of exactly its size.
 *
 * Oracle:
 *   - the result is 0, -EBADMSG or -ENOBUFS; -ENOBUFS only when the
 *     payload would not fit, and then the state is untouched (the honest
 *     message is still read afterwards);
 *   - after -EBADMSG the state is unusable: the honest message is refused
 *     with the same error;
 *   - messages 2 and 3 carry a static key under keys the attacker does not
 *     have: they are accepted only if they are the honest message byte for
 *     byte (no forgery). Message 1 of XXpsk3 is authenticated only with
 *     public values, and of XX not at all: accepted at the right length,
 *     with its payload length reported exactly.
 */
#include <errno.h>

#include "fuzz.h"
#include "peer/noise.h"
#include "../tests/hooks.h"

static const char *const names[] = {"Noise_XXpsk3_25519_ChaChaPoly_SHA256", "Noise_XX_25519_ChaChaPoly_SHA256"};

static void side(pm__noise_hs **hs, int proto, int initiator)
{
    static const unsigned char psk[32] = {9, 9, 9};
    unsigned char s[32], e[32];
    memset(s, initiator ? 0x21 : 0x43, sizeof(s));
    memset(e, initiator ? 0x65 : 0x87, sizeof(e));
    FUZZ_ASSERT(pm__noise_hs_new(hs, names[proto], initiator, "PMLINK", 6, NULL) == 0);
    FUZZ_ASSERT(pm_test_noise_set_static(*hs, s) == 0);
    if (proto == 0)
        FUZZ_ASSERT(pm__noise_hs_set_psk(*hs, 0, psk) == 0);
    FUZZ_ASSERT(pm_test_noise_set_ephemeral(*hs, e) == 0);
}

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 2)
        return 0;
    int proto = data[0] & 1;
    unsigned target = (data[0] >> 1) % 3; /* 0-based message index */
    static const size_t caps[] = {0, 1, 19, 82, 512, 65535};
    size_t cap = caps[data[1] % (sizeof(caps) / sizeof(caps[0]))];
    data += 2;
    size = size - 2;

    pm__noise_hs *hs[2];
    side(&hs[0], proto, 1);
    side(&hs[1], proto, 0);
    unsigned char honest[512], payload[65535], back[65535];
    size_t honest_len = 0, plen;
    /* A payload in messages 2 and 3, as the links carry (a hello). */
    static const unsigned char hello[19 + 5] = {1, 1, 0, 0, 0, 0, 1, 2, 3, 4, 5, 6, 7, 8, 0x88, 0x13, 0, 0, 5,
                                                'a', 'l', 'p', 'h', 'a'};
    for (unsigned m = 0; m <= target; m++) {
        pm__noise_hs *w = hs[m % 2], *r = hs[1 - m % 2];
        const void *p = m == 0 ? NULL : hello;
        size_t pl = m == 0 ? 0 : sizeof(hello);
        FUZZ_ASSERT(pm__noise_write_message(w, p, pl, honest, sizeof(honest), &honest_len) == 0);
        if (m < target)
            FUZZ_ASSERT(pm__noise_read_message(r, honest, honest_len, back, sizeof(back), &plen) == 0);
    }
    pm__noise_hs *reader = hs[1 - target % 2];

    unsigned char *msg = malloc(size ? size : 1); /* exactly its size */
    memcpy(msg, data, size);
    int rc = pm__noise_read_message(reader, msg, size, cap ? payload : NULL, cap, &plen);
    FUZZ_ASSERT(rc == 0 || rc == -EBADMSG || rc == -ENOBUFS);
    int same = size == honest_len && memcmp(msg, honest, size) == 0;
    size_t fixed = target == 0 ? (proto == 0 ? 48 : 32) : target == 1 ? 96 : 64;
    if (rc == -ENOBUFS) {
        /* Refused before reading: the right size for the pattern, the
         * payload too big for cap. The honest message still reads. */
        FUZZ_ASSERT(size >= fixed && size - fixed > cap && size <= PM__NOISE_MAX_MSG);
        FUZZ_ASSERT(pm__noise_read_message(reader, honest, honest_len, back, sizeof(back), &plen) == 0);
    } else if (rc == -EBADMSG) {
        FUZZ_ASSERT(!same); /* the honest message is never refused */
        FUZZ_ASSERT(pm__noise_read_message(reader, honest, honest_len, back, sizeof(back), &plen) == -EBADMSG);
        FUZZ_ASSERT(pm__noise_hs_done(reader) == -EBADMSG);
    } else {
        FUZZ_ASSERT(size >= fixed && plen == size - fixed && plen <= cap);
        if (target > 0)
            FUZZ_ASSERT(same); /* no forgery of a message with a static key */
        if (same && target > 0)
            FUZZ_ASSERT(plen == sizeof(hello) && memcmp(payload, hello, plen) == 0);
    }
    free(msg);
    pm__noise_hs_free(hs[0]);
    pm__noise_hs_free(hs[1]);
    return 0;
}
