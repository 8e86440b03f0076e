/* SPDX-License-Identifier: MIT */
/* noise_int.h - what noise.c (handshake) and noise_cipher.c (primitives, transport) share; nothing else includes it. */
#ifndef PM_NOISE_INT_H
#define PM_NOISE_INT_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "noise.h"

#define KEY PM__NOISE_KEY_LEN
#define TAG PM__NOISE_TAG_LEN

struct pm__noise_tr_secret {
    unsigned char k[2][KEY]; /* [1] sending, [0] receiving */
};

struct pm__noise_transport {
    uint32_t gen;
    int err;
    bool can[2];  /* a one-way pattern's responder only receives */
    uint64_t n[2];
    uint64_t rekey_every;
    struct pm__noise_tr_secret *sec;
};

/* Secret memory: libsodium's guarded block, wiped or absent in a forked
 * child; NULL with errno set. Freed only by the process generation that
 * allocated it (gen). */
void *pm__noise_secret_alloc(size_t size);
void pm__noise_secret_free(void *p, size_t size, uint32_t gen);
/* sodium_init(): 0 or -EIO. */
int pm__noise_sodium_ready(void);
/* X25519; -1 (out wiped) for an all-zero result (a low-order remote key). */
int pm__noise_dh(unsigned char out[KEY], const unsigned char priv[KEY], const unsigned char pub[KEY]);
/* ChaChaPoly with nonce n; decrypt: 0, or -1 when the tag does not match. */
void pm__noise_aead_encrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                            size_t ad_len, const void *in, size_t len);
int pm__noise_aead_decrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                           size_t ad_len, const unsigned char *in, size_t len);
/* HKDF(ck, ikm, 2 or 3) of rev 34 4.3 (o3 NULL for 2); o1 may be ck. */
void pm__noise_hkdf(const unsigned char *ck, const void *ikm, size_t ikm_len, unsigned char *o1,
                    unsigned char *o2, unsigned char *o3);

#endif /* PM_NOISE_INT_H */
