/* SPDX-License-Identifier: MIT */
/* peerkeys.h - the peer links' key material: pre-shared secrets and their ids, the node's static key pair, pinned peer keys. */
#ifndef PM_PEERKEYS_H
#define PM_PEERKEYS_H

/*
 * What a supervisor needs to admit a peer (doc/protocol.md, "Keys"):
 *
 *   - up to two pre-shared secrets of 32 bytes (current and next, for
 *     rotation without downtime), each with a public 8-byte id;
 *   - its static X25519 key pair (from --node-key, or made per start);
 *   - optionally, pinned peer keys: "host base64-public-key" lines.
 *
 * The secrets and the static private key live in a pm__keyring, one block of
 * sodium_malloc'd memory marked MADV_WIPEONFORK (or MADV_DONTFORK) so a forked
 * worker never sees them (doc/reliability.md, fault 33); they are wiped when
 * freed and compared only in constant time. Nothing here logs, and no error
 * text ever holds a key byte.
 *
 * The daemon validates key files and writes them (`procmesh keygen`) with
 * the calls marked PM__DAEMON_API, which the shared library exports for it
 * (base/internal.h).
 *
 * Errors: negative errno, with a sentence in why (when why is not NULL)
 * naming what was wrong:
 *   -EINVAL        malformed content (empty, short, long, not hex, all zeros,
 *                  a bad line in a peer-keys file) or a caller error
 *   -EPERM         a key file readable or writable by group or others, and
 *                  insecure modes were not allowed
 *   -ENOSPC        a third secret (at most two)
 *   -EEXIST        a secret given twice
 *   -ENOMEM        no (secret) memory
 *   other          from open/read/write (the file named in why)
 */

#include <stddef.h>
#include <stdint.h>

#include "base/internal.h"

#define PM__PEER_KEY_LEN 32u    /* a secret, a private or a public key */
#define PM__PEER_KEY_ID_LEN 8u  /* a secret's public id */
#define PM__PEER_MAX_SECRETS 2u /* current and next */
#define PM__PEER_KEY_B64_LEN 44u /* standard base64 of 32 bytes, with its '=' */
#define PM__PEER_PINS_MAX_FILE ((size_t)1 << 20) /* the largest --peer-keys file read */

/* The label of the key id: id = HMAC-SHA256(key = secret, label)[0..8). */
#define PM__PEER_KEY_ID_LABEL "procmesh psk id v1"

/* ---- pure: bytes in, key out -------------------------------------- */

/*
 * A key file's contents: exactly 32 raw bytes, or 64 hex characters (either
 * case) and an optional "\n". An all-zero key is refused (a default, never
 * a secret). Constant time in the key bytes (sodium_hex2bin).
 */
int pm__peer_key_parse(const void *buf, size_t len, unsigned char out[PM__PEER_KEY_LEN],
                       char *why, size_t whysize);

/* The id of a secret. Never all zeros for an accepted secret: all zeros
 * means "no secret" on the wire, so pm__keyring_add_secret refuses the
 * (2^-64) key whose id would be. */
PM__DAEMON_API void pm__peer_key_id(const unsigned char key[PM__PEER_KEY_LEN],
                                    unsigned char id[PM__PEER_KEY_ID_LEN]);

/* Standard base64 (with padding) of a public key: 44 characters and a NUL. */
PM__DAEMON_API void pm__peer_key_b64(const unsigned char pub[PM__PEER_KEY_LEN],
                                     char out[PM__PEER_KEY_B64_LEN + 1]);

/* The rule for host names (that of pm__name_valid_n in address.c: 1..63
 * characters of [A-Za-z0-9._-]); repeated here so the daemon can link this
 * module alone. tests/check_peerkeys.c checks that both agree. */
int pm__peer_host_valid(const char *s, size_t n);

/* ---- key files ------------------------------------------------------- */

/*
 * Reads a key file (a secret or a node key): a regular file of at most 65
 * bytes that group and others cannot access (mode & 077 == 0), unless
 * allow_insecure_mode. The bytes read are wiped from the stack.
 */
PM__DAEMON_API int pm__peer_key_load(const char *path, int allow_insecure_mode,
                                     unsigned char out[PM__PEER_KEY_LEN], char *why, size_t whysize);

/*
 * Writes a new random key to path as 64 hex characters and "\n", created
 * with mode 0600 (O_EXCL: an existing file is never overwritten, -EEXIST).
 * The key is returned in out when out is not NULL.
 */
PM__DAEMON_API int pm__peer_key_create(const char *path, unsigned char out[PM__PEER_KEY_LEN], char *why,
                                       size_t whysize);

/* ---- the keyring: secrets and the static key in secret memory ------- */

typedef struct pm__keyring pm__keyring;

PM__DAEMON_API int pm__keyring_new(pm__keyring **out);

/* Adds a pre-shared secret (copied into secret memory); its id is computed.
 * -ENOSPC past two, -EEXIST for the same secret twice (constant time),
 * -EINVAL for an all-zero key or one whose id is all zeros. */
int pm__keyring_add_secret(pm__keyring *kr, const unsigned char key[PM__PEER_KEY_LEN]);

/* Number of secrets (0..2), and the i-th's id and key. The key pointer is
 * into secret memory, valid until the keyring is freed: pass it straight to
 * pm__noise_hs_set_psk, never copy it into ordinary memory. */
unsigned pm__keyring_nsecrets(const pm__keyring *kr);
int pm__keyring_secret_id(const pm__keyring *kr, unsigned i, unsigned char id[PM__PEER_KEY_ID_LEN]);
const unsigned char *pm__keyring_secret(const pm__keyring *kr, unsigned i);

/* The secret whose id is id (a responder accepts either of its two):
 * its index, or -ENOKEY. */
int pm__keyring_find(const pm__keyring *kr, const unsigned char id[PM__PEER_KEY_ID_LEN]);

/* The static key pair: from a private key, or a new random one (a node
 * without --node-key gets a new identity per start). */
PM__DAEMON_API int pm__keyring_set_static(pm__keyring *kr,
                                          const unsigned char priv[PM__PEER_KEY_LEN]);
int pm__keyring_random_static(pm__keyring *kr);
/* The static private key (secret memory, as pm__keyring_secret) and the
 * public key; NULL / -ENOKEY before one is set. */
const unsigned char *pm__keyring_static_priv(const pm__keyring *kr);
PM__DAEMON_API int pm__keyring_static_pub(const pm__keyring *kr,
                                          unsigned char pub[PM__PEER_KEY_LEN]);

/* A deep copy (another secret block). NULL on ENOMEM (errno set). */
pm__keyring *pm__keyring_dup(const pm__keyring *kr);

/* Wipes and frees. In a forked child only the ordinary memory is released:
 * the secret pages there are zeros or absent, and sodium_free would abort. */
PM__DAEMON_API void pm__keyring_free(pm__keyring *kr);

/* How many keyrings this process made and has not freed: what a test
 * reads to see that keys no longer in use are wiped and given back (a
 * keyring replaced by pm_cluster_set_secrets, once its last connection
 * closed), not kept until exit. A forked child starts from its parent's
 * count and never lowers it (it frees none of their secret memory). */
unsigned long pm__keyring_live(void);

/* ---- pinned peer keys (--peer-keys) ---------------------------------- */

typedef struct pm__pin {
    char host[64];
    unsigned char pub[PM__PEER_KEY_LEN];
} pm__pin;

typedef struct pm__pins {
    pm__pin *v;
    size_t n;
} pm__pins;

/*
 * Parses a peer-keys file: lines "HOST BASE64-PUBLIC-KEY" (blanks or tabs
 * between, around), blank lines and lines starting with '#' skipped. A host
 * may have several lines (any of its keys is accepted: static key
 * rotation). On error why names the line: "line 3: ...". out is filled only
 * on success (free with pm__pins_free).
 */
int pm__pins_parse(const char *text, size_t len, pm__pins *out, char *why, size_t whysize);

/* Reads and parses path (at most PM__PEER_PINS_MAX_FILE bytes). Public
 * keys are not secret: no mode check. */
PM__DAEMON_API int pm__pins_load(const char *path, pm__pins *out, char *why, size_t whysize);

/* 1 when pub is one of host's pinned keys (constant time over the keys),
 * 0 when host has no line or none of its keys matches. */
int pm__pins_allow(const pm__pins *p, const char *host, const unsigned char pub[PM__PEER_KEY_LEN]);

PM__DAEMON_API void pm__pins_free(pm__pins *p);

#endif /* PM_PEERKEYS_H */
