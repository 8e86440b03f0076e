/* SPDX-License-Identifier: MIT */
/*
 * cipher.h - what the Noise handshake (noise.c) stands on and splits into
 * (cipher.c): secret memory, the primitives (X25519, ChaChaPoly, HKDF) and
 * the transport, a pair of cipher states with their nonces. Errors as in
 * noise.h. Pure: no sockets and no I/O.
 */
#ifndef PM_CIPHER_H
#define PM_CIPHER_H

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#define PM__NOISE_KEY_LEN 32u   /* DHLEN, HASHLEN, cipher and psk key size */
#define PM__NOISE_TAG_LEN 16u
#define PM__NOISE_MAX_MSG 65535u /* Noise's bound on any message */

/* Transport messages a direction carries before both sides Rekey() it (in
 * lockstep: they count the same messages). 2^20 records of 4 KiB are 4 GiB. */
#define PM__NOISE_REKEY_EVERY (UINT64_C(1) << 20)

/* The first nonce a cipher refuses. Noise reserves 2^64-1 (Rekey uses it);
 * the margin below it is never reached in practice, but a link that gets
 * there must close rather than wrap. */
#define PM__NOISE_NONCE_LIMIT (UINT64_MAX - UINT64_C(65535))

typedef struct pm__noise_transport pm__noise_transport;

/*
 * A transport message: ENCRYPT(k, n++, ad, in) into out (len + 16 bytes,
 * at most PM__NOISE_MAX_MSG), *out_len set. in and out may be the same
 * buffer, they must not otherwise overlap.
 */
int pm__noise_encrypt(pm__noise_transport *t, const void *ad, size_t ad_len, const void *in, size_t len,
                      void *out, size_t cap, size_t *out_len);

/* DECRYPT(k, n++, ad, in): -EBADMSG (and the transport is unusable) for a
 * message that fails authentication: tampered, truncated, replayed,
 * reordered or from another session. */
int pm__noise_decrypt(pm__noise_transport *t, const void *ad, size_t ad_len, const void *in, size_t len,
                      void *out, size_t cap, size_t *out_len);

/* The transport's AEAD: ChaChaPoly (pm__noise_aead_encrypt/decrypt's
 * shape). The handshake always uses ChaChaPoly. */
typedef struct pm__noise_aead {
    void (*encrypt)(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad, size_t ad_len,
                    const void *in, size_t len);
    int (*decrypt)(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad, size_t ad_len,
                   const unsigned char *in, size_t len);
} pm__noise_aead;
/* The table every transport message and Rekey() uses, process-wide:
 * ChaChaPoly. No product path changes it. pm-bench points it at its null
 * cipher (tools/bench/peer.c, built into pm-bench only) before any link
 * exists, both ends alike, to measure what the cryptography costs on the
 * same link code; no library or daemon object refers to it but cipher.c
 * (tests/layers.sh checks). */
extern const pm__noise_aead *pm__noise_transport_aead;

/* Rekey() of rev 34 11.3 now, on the sending (tx) or receiving direction:
 * k = first 32 bytes of ENCRYPT(k, 2^64-1, "", zeros); the nonce goes on. */
int pm__noise_rekey(pm__noise_transport *t, int tx);

void pm__noise_transport_free(pm__noise_transport *t);

/* ---- what noise.c and cipher.c share ------------------------------- */

struct pm__noise_tr_secret {
    unsigned char k[2][PM__NOISE_KEY_LEN]; /* [1] sending, [0] receiving */
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
/* libsodium loaded (os/deps.h) and sodium_init(): 0, -ELIBACC or -EIO. */
int pm__noise_sodium_ready(void);
/* X25519; -1 (out wiped) for an all-zero result (a low-order remote key). */
int pm__noise_dh(unsigned char out[PM__NOISE_KEY_LEN], const unsigned char priv[PM__NOISE_KEY_LEN], const unsigned char pub[PM__NOISE_KEY_LEN]);
/* ChaChaPoly with nonce n; decrypt: 0, or -1 when the tag does not match. */
void pm__noise_aead_encrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                            size_t ad_len, const void *in, size_t len);
int pm__noise_aead_decrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad,
                           size_t ad_len, const unsigned char *in, size_t len);
/* HKDF(ck, ikm, 2 or 3) of rev 34 4.3 (o3 NULL for 2); o1 may be ck. */
void pm__noise_hkdf(const unsigned char *ck, const void *ikm, size_t ikm_len, unsigned char *o1,
                    unsigned char *o2, unsigned char *o3);

#endif /* PM_CIPHER_H */
