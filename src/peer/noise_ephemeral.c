/* SPDX-License-Identifier: MIT */
/* noise_ephemeral.c - GENERATE_KEYPAIR() for the handshake's e token, with one pair prepared ahead between handshakes. */
#include "base/internal.h"
#include "noise_ephemeral.h"

#include <stdatomic.h>
#include <stdbool.h>
#include <string.h>

#include "os/dep_sodium.h"

#include "cipher.h" /* secret memory */

#define KEY PM__NOISE_KEY_LEN

/*
 * The prepared ephemeral key pair (pm__noise_ephemeral_prepare): generated
 * between handshakes, taken by the next handshake that writes an e token,
 * and wiped as it is taken, so it serves one handshake only, as Noise's
 * GENERATE_KEYPAIR() would. Its private half lives in secret memory
 * (allocated once per process generation, never freed: a forked child
 * forgets it, as cipher.c's cache does). The lock is only tried: a
 * thread that finds it taken generates its own pair inline.
 */
static struct {
    atomic_flag busy;
    uint32_t gen;
    bool ready;
    unsigned char *priv;
    unsigned char pub[KEY];
} prepared = {.busy = ATOMIC_FLAG_INIT};

static bool prepared_lock(void)
{
    if (atomic_flag_test_and_set_explicit(&prepared.busy, memory_order_acquire))
        return false;
    uint32_t gen = pm__fork_gen();
    if (prepared.gen != gen) {
        prepared.priv = NULL; /* the parent's page: zero or absent here */
        prepared.ready = false;
        prepared.gen = gen;
    }
    return true;
}

static void prepared_unlock(void)
{
    atomic_flag_clear_explicit(&prepared.busy, memory_order_release);
}

int pm__noise_ephemeral_prepare(void)
{
    int rc = pm__noise_sodium_ready();
    if (rc < 0)
        return rc;
    if (!prepared_lock())
        return 0; /* another thread is at it */
    if (!prepared.ready) {
        if (prepared.priv == NULL)
            prepared.priv = pm__noise_secret_alloc(KEY);
        if (prepared.priv == NULL) {
            rc = -ENOMEM;
        } else {
            randombytes_buf(prepared.priv, KEY);
            crypto_scalarmult_curve25519_base(prepared.pub, prepared.priv);
            prepared.ready = true;
        }
    }
    prepared_unlock();
    return rc;
}

/* Moves the prepared pair into priv and pub, once: true when there was one. */
static bool take_prepared(unsigned char priv[KEY], unsigned char pub[KEY])
{
    if (!prepared_lock())
        return false;
    bool took = prepared.ready;
    if (took) {
        memcpy(priv, prepared.priv, KEY);
        memcpy(pub, prepared.pub, KEY);
        sodium_memzero(prepared.priv, KEY);
        sodium_memzero(prepared.pub, KEY);
        prepared.ready = false;
    }
    prepared_unlock();
    return took;
}

void pm__noise_ephemeral_take(unsigned char priv[KEY], unsigned char pub[KEY])
{
    if (!take_prepared(priv, pub)) {
        randombytes_buf(priv, KEY);
        crypto_scalarmult_curve25519_base(pub, priv);
    }
}
