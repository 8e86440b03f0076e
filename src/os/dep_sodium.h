/* SPDX-License-Identifier: MIT */
/* dep_sodium.h - <sodium.h> for the library: each function procmesh calls reached through the table deps.c fills on first use. */
#ifndef PM_DEP_SODIUM_H
#define PM_DEP_SODIUM_H

#include "config.h"

#include <sodium.h>

/* Every libsodium function the library calls (deps.c resolves each by
 * name; a call to one not listed here fails to link: -Wl,-z,defs). */
#define PM__SODIUM_FNS(X)                                                                          \
    X(crypto_aead_chacha20poly1305_ietf_decrypt)                                                   \
    X(crypto_aead_chacha20poly1305_ietf_encrypt)                                                   \
    X(crypto_auth_hmacsha256_final)                                                                \
    X(crypto_auth_hmacsha256_init)                                                                 \
    X(crypto_auth_hmacsha256_update)                                                               \
    X(crypto_hash_sha256)                                                                          \
    X(crypto_hash_sha256_final)                                                                    \
    X(crypto_hash_sha256_init)                                                                     \
    X(crypto_hash_sha256_update)                                                                   \
    X(crypto_scalarmult_curve25519)                                                                \
    X(crypto_scalarmult_curve25519_base)                                                           \
    X(randombytes_buf)                                                                             \
    X(sodium_base642bin)                                                                           \
    X(sodium_bin2base64)                                                                           \
    X(sodium_bin2hex)                                                                              \
    X(sodium_free)                                                                                 \
    X(sodium_hex2bin)                                                                              \
    X(sodium_init)                                                                                 \
    X(sodium_is_zero)                                                                              \
    X(sodium_malloc)                                                                               \
    X(sodium_memcmp)                                                                               \
    X(sodium_memzero)

#if PM_LAZY_DEPS
#ifndef PM__DEP_MEMBER
/* A table member: a pointer of the function's own type. */
#define PM__DEP_MEMBER(f) __typeof__(f) *f;
#endif
struct pm__sodium_fns {
    PM__SODIUM_FNS(PM__DEP_MEMBER)
};
/* The table, libsodium loaded on first use (os/deps.c). A caller that can
 * do without it asks pm__dep_load (os/deps.h) first; reached without that
 * and unloadable, it aborts with the reason rather than call through a
 * null pointer. */
const struct pm__sodium_fns *pm__sodium(void);

#ifndef PM__DEPS_IMPL
/* A macro's own name is not expanded again inside it: PM__SODIUM(f)
 * names the member f. */
#define PM__SODIUM(f) (pm__sodium()->f)
#define crypto_aead_chacha20poly1305_ietf_decrypt PM__SODIUM(crypto_aead_chacha20poly1305_ietf_decrypt)
#define crypto_aead_chacha20poly1305_ietf_encrypt PM__SODIUM(crypto_aead_chacha20poly1305_ietf_encrypt)
#define crypto_auth_hmacsha256_final PM__SODIUM(crypto_auth_hmacsha256_final)
#define crypto_auth_hmacsha256_init PM__SODIUM(crypto_auth_hmacsha256_init)
#define crypto_auth_hmacsha256_update PM__SODIUM(crypto_auth_hmacsha256_update)
#define crypto_hash_sha256 PM__SODIUM(crypto_hash_sha256)
#define crypto_hash_sha256_final PM__SODIUM(crypto_hash_sha256_final)
#define crypto_hash_sha256_init PM__SODIUM(crypto_hash_sha256_init)
#define crypto_hash_sha256_update PM__SODIUM(crypto_hash_sha256_update)
#define crypto_scalarmult_curve25519 PM__SODIUM(crypto_scalarmult_curve25519)
#define crypto_scalarmult_curve25519_base PM__SODIUM(crypto_scalarmult_curve25519_base)
#define randombytes_buf PM__SODIUM(randombytes_buf)
#define sodium_base642bin PM__SODIUM(sodium_base642bin)
#define sodium_bin2base64 PM__SODIUM(sodium_bin2base64)
#define sodium_bin2hex PM__SODIUM(sodium_bin2hex)
#define sodium_free PM__SODIUM(sodium_free)
#define sodium_hex2bin PM__SODIUM(sodium_hex2bin)
#define sodium_init PM__SODIUM(sodium_init)
#define sodium_is_zero PM__SODIUM(sodium_is_zero)
#define sodium_malloc PM__SODIUM(sodium_malloc)
#define sodium_memcmp PM__SODIUM(sodium_memcmp)
#define sodium_memzero PM__SODIUM(sodium_memzero)
#endif /* !PM__DEPS_IMPL */
#endif /* PM_LAZY_DEPS */

#endif /* PM_DEP_SODIUM_H */
