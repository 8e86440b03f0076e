/* SPDX-License-Identifier: MIT */
/* cipher.c - below the Noise handshake: secret memory, the primitives (X25519, ChaChaPoly, HMAC/HKDF-SHA256) and the transport's CipherStates. */
#include "base/internal.h"
#include "base/le.h"
#include "cipher.h"
#include "secretmem.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <stdlib.h>
#include <string.h>

#include "os/dep_sodium.h"
#include "os/deps.h"

#define KEY PM__NOISE_KEY_LEN
#define TAG PM__NOISE_TAG_LEN

/* ------------------------------------------------------------ memory */

/*
 * The blocks come from secretmem.c (guarded, locked, wiped on fork). A
 * cache of released blocks. sodium_malloc maps its block with guard
 * pages, mprotects and mlocks it; sodium_free unmaps it, which on a
 * multi-CPU machine (or VM) costs a TLB shootdown on every CPU: together
 * several times an X25519, three times over in each side of a handshake
 * (the handshake state, the transport keys, the previous link's; figures
 * in doc/benchmarks.md, "Peer link: where the time goes"). A released
 * block is zeroed and kept here instead (still guarded, locked, wiped on
 * fork), up to SECRET_CACHE of them, and reused for the same size.
 * A forked child must not use its parent's entries (their pages are zero
 * or absent there, and their canaries with them): an entry of another
 * fork generation is forgotten, never freed. The lock is only ever tried:
 * a thread that finds it taken (or a child forked while another thread
 * held it) bypasses the cache, so it can never block or deadlock.
 */
#define SECRET_CACHE 8u
static struct {
    atomic_flag busy;
    uint32_t gen;
    unsigned n;
    struct {
        void *p;
        size_t size;
    } b[SECRET_CACHE];
} cache = {.busy = ATOMIC_FLAG_INIT};

static bool cache_lock(void)
{
    if (atomic_flag_test_and_set_explicit(&cache.busy, memory_order_acquire))
        return false;
    uint32_t gen = pm__fork_gen();
    if (cache.gen != gen) {
        cache.n = 0; /* the parent's blocks: leaked in this child, never used */
        cache.gen = gen;
    }
    return true;
}

static void cache_unlock(void)
{
    atomic_flag_clear_explicit(&cache.busy, memory_order_release);
}

void *pm__noise_secret_alloc(size_t size)
{
    if (cache_lock()) {
        void *hit = NULL;
        for (unsigned i = 0; i < cache.n && hit == NULL; i++) {
            if (cache.b[i].size == size) {
                hit = cache.b[i].p;
                cache.b[i] = cache.b[--cache.n];
            }
        }
        cache_unlock();
        if (hit != NULL)
            return hit; /* zeroed when it was released */
    }
    return pm__secretmem_alloc(size);
}

/* Only in the process that allocated it: in a child the canary in front of
 * the block is wiped (or unmapped) and sodium_free would abort. The child
 * leaks a mapping of zeros, which dies with it or its exec. */
void pm__noise_secret_free(void *p, size_t size, uint32_t gen)
{
    if (p == NULL || gen != pm__fork_gen())
        return;
    sodium_memzero(p, size);
    if (cache_lock()) {
        bool kept = cache.n < SECRET_CACHE;
        if (kept) {
            cache.b[cache.n].p = p;
            cache.b[cache.n].size = size;
            cache.n++;
        }
        cache_unlock();
        if (kept)
            return;
    }
    pm__secretmem_free(p);
}

int pm__noise_sodium_ready(void)
{
    /* libsodium is loaded on first use (os/deps.h): -ELIBACC without it. */
    int rc = pm__dep_load(PM__DEP_SODIUM, NULL, 0);
    if (rc < 0)
        return rc;
    /* Idempotent and thread-safe; 1 when already done. */
    return sodium_init() < 0 ? -EIO : 0;
}

/* ------------------------------------------------------------ primitives */

/* DH(): X25519; libsodium refuses (-1) an all-zero result, the mark of a
 * low-order remote key, which would make the "secret" public. */
int pm__noise_dh(unsigned char out[KEY], const unsigned char priv[KEY], const unsigned char pub[KEY])
{
    if (crypto_scalarmult_curve25519(out, priv, pub) != 0 || sodium_is_zero(out, KEY)) {
        sodium_memzero(out, KEY);
        return -1;
    }
    return 0;
}

/* ChaChaPoly's 96-bit nonce: 32 zero bits, then n little-endian. */
static void nonce_bytes(unsigned char out[12], uint64_t n)
{
    memset(out, 0, 4);
    pm__put64(out + 4, n);
}

void pm__noise_aead_encrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad, size_t ad_len,
                            const void *in, size_t len)
{
    unsigned char nonce[12];
    nonce_bytes(nonce, n);
    (void)crypto_aead_chacha20poly1305_ietf_encrypt(out, NULL, in, len, ad, ad_len, NULL, nonce, k);
}

int pm__noise_aead_decrypt(unsigned char *out, const unsigned char *k, uint64_t n, const void *ad, size_t ad_len,
                           const unsigned char *in, size_t len)
{
    unsigned char nonce[12];
    nonce_bytes(nonce, n);
    return crypto_aead_chacha20poly1305_ietf_decrypt(out, NULL, NULL, in, len, ad, ad_len, nonce, k);
}

/* HMAC-SHA256(key, a || b). */
static void hmac(unsigned char out[KEY], const unsigned char key[KEY], const void *a, size_t a_len, const void *b,
                 size_t b_len)
{
    crypto_auth_hmacsha256_state st;
    crypto_auth_hmacsha256_init(&st, key, KEY);
    if (a_len > 0)
        crypto_auth_hmacsha256_update(&st, a, a_len);
    if (b_len > 0)
        crypto_auth_hmacsha256_update(&st, b, b_len);
    crypto_auth_hmacsha256_final(&st, out);
    sodium_memzero(&st, sizeof(st));
}

/* HKDF(ck, ikm, 2 or 3) of rev 34 4.3. o1 may be ck itself (MixKey writes
 * the new chaining key over the old): ck is read only for the temp key. */
void pm__noise_hkdf(const unsigned char *ck, const void *ikm, size_t ikm_len, unsigned char *o1, unsigned char *o2,
                    unsigned char *o3)
{
    static const unsigned char b1 = 1, b2 = 2, b3 = 3;
    unsigned char tk[KEY];
    hmac(tk, ck, ikm, ikm_len, NULL, 0);
    hmac(o1, tk, &b1, 1, NULL, 0);
    hmac(o2, tk, o1, KEY, &b2, 1);
    if (o3 != NULL)
        hmac(o3, tk, o2, KEY, &b3, 1);
    sodium_memzero(tk, sizeof(tk));
}

/* ------------------------------------------------------------ transport */

static const pm__noise_aead chachapoly = {pm__noise_aead_encrypt, pm__noise_aead_decrypt};
/* Written only by pm-bench before its supervisors start (no link exists,
 * no other thread runs), read by the loop thread: a plain pointer. */
const pm__noise_aead *pm__noise_transport_aead = &chachapoly;

static int tr_fail(pm__noise_transport *t, int err)
{
    t->err = err;
    sodium_memzero(t->sec, sizeof(*t->sec));
    return err;
}

static int tr_check(const pm__noise_transport *t)
{
    if (t == NULL)
        return -EINVAL;
    if (t->gen != pm__fork_gen())
        return -EPERM;
    return t->err;
}

/* REKEY(k) = ENCRYPT(k, 2^64-1, "", 32 zero bytes)[0..32): the key changes,
 * the counter does not (rev 34 4.2, 11.3). */
static void rekey(pm__noise_transport *t, int dir)
{
    static const unsigned char zeros[KEY];
    unsigned char buf[KEY + TAG];
    pm__noise_transport_aead->encrypt(buf, t->sec->k[dir], UINT64_MAX, NULL, 0, zeros, KEY);
    memcpy(t->sec->k[dir], buf, KEY);
    sodium_memzero(buf, sizeof(buf));
}

/* After each message: the periodic Rekey(), counted the same on both sides. */
static void advance(pm__noise_transport *t, int dir)
{
    t->n[dir]++;
    if (t->rekey_every > 0 && t->n[dir] % t->rekey_every == 0)
        rekey(t, dir);
}

int pm__noise_encrypt(pm__noise_transport *t, const void *ad, size_t ad_len, const void *in, size_t len,
                      void *out, size_t cap, size_t *out_len)
{
    int rc = tr_check(t);
    if (rc < 0)
        return rc;
    if (out == NULL || out_len == NULL || (in == NULL && len > 0) || (ad == NULL && ad_len > 0) || !t->can[1])
        return -EINVAL;
    if (len > PM__NOISE_MAX_MSG - TAG)
        return -EMSGSIZE;
    if (cap < len + TAG)
        return -ENOBUFS;
    if (t->n[1] >= PM__NOISE_NONCE_LIMIT)
        return tr_fail(t, -EOVERFLOW);
    pm__noise_transport_aead->encrypt(out, t->sec->k[1], t->n[1], ad, ad_len, in, len);
    advance(t, 1);
    *out_len = len + TAG;
    return 0;
}

int pm__noise_decrypt(pm__noise_transport *t, const void *ad, size_t ad_len, const void *in, size_t len,
                      void *out, size_t cap, size_t *out_len)
{
    int rc = tr_check(t);
    if (rc < 0)
        return rc;
    if ((in == NULL && len > 0) || (out == NULL && cap > 0) || out_len == NULL || (ad == NULL && ad_len > 0) ||
        !t->can[0])
        return -EINVAL;
    if (len < TAG || len > PM__NOISE_MAX_MSG)
        return tr_fail(t, -EBADMSG);
    if (cap < len - TAG)
        return -ENOBUFS;
    if (t->n[0] >= PM__NOISE_NONCE_LIMIT)
        return tr_fail(t, -EOVERFLOW);
    if (pm__noise_transport_aead->decrypt(out, t->sec->k[0], t->n[0], ad, ad_len, in, len) != 0)
        return tr_fail(t, -EBADMSG);
    advance(t, 0);
    *out_len = len - TAG;
    return 0;
}

int pm__noise_rekey(pm__noise_transport *t, int tx)
{
    int rc = tr_check(t);
    if (rc < 0)
        return rc;
    rekey(t, tx ? 1 : 0);
    return 0;
}

void pm__noise_transport_free(pm__noise_transport *t)
{
    if (t == NULL)
        return;
    pm__noise_secret_free(t->sec, sizeof(*t->sec), t->gen);
    sodium_memzero(t, sizeof(*t));
    free(t);
}
