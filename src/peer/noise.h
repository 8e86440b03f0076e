/* SPDX-License-Identifier: MIT */
/* noise.h - the Noise Protocol Framework (rev 34) handshake for 25519/ChaChaPoly/SHA256; the transport it splits into is cipher.h. */
#ifndef PM_NOISE_H
#define PM_NOISE_H

/*
 * The cryptographic core of the peer links: Noise_XXpsk3_25519_ChaChaPoly_SHA256
 * is the protocol procmesh uses, but the token machinery is generic, so every
 * pattern of the spec's sections 7.4-7.6 (one-way, fundamental, deferred)
 * with any psk modifiers works; the published test vectors check all of them
 * (tests/check_noise.c). See doc/protocol.md, "Handshake and transport
 * cryptography".
 *
 * Pure: no sockets and no I/O. The only system calls are the ones libsodium
 * makes to allocate guarded memory (sodium_malloc) and one madvise() that
 * keeps that memory from a forked child.
 *
 * Use, for one side of one handshake:
 *
 *   pm__noise_hs_new(&hs, "Noise_XXpsk3_25519_ChaChaPoly_SHA256", initiator,
 *                    prologue, prologue_len, &why);
 *   pm__noise_hs_set_static_pair(hs, priv, pub);  keys the pattern needs
 *   pm__noise_hs_set_psk(hs, 0, psk);
 *   while (!pm__noise_hs_done(hs))
 *       pm__noise_write_message(...) or pm__noise_read_message(...),
 *       in the pattern's order (the initiator writes first)
 *   pm__noise_hs_remote_static(hs, rs);           authenticate the peer
 *   pm__noise_split(hs, PM__NOISE_REKEY_EVERY, &t);
 *   pm__noise_hs_free(hs);
 *   pm__noise_encrypt(t, ...) / pm__noise_decrypt(t, ...), pm__noise_transport_free(t)
 *
 * Errors (negative errno; nothing is logged, no key is ever printed):
 *   -EINVAL            a caller error: NULL, a setter after the first message,
 *                      a message out of turn, split before the end ...
 *   -EPROTONOSUPPORT   the protocol name (the why string names the part)
 *   -ENOKEY            a key the pattern needs was not set
 *   -EMSGSIZE          a message would exceed the 65535 bytes of Noise
 *   -ENOBUFS           the caller's output buffer is too small (state untouched)
 *   -EBADMSG           a message that does not decrypt, is too short or too
 *                      long, or carries a key whose DH is all zeros; the state
 *                      is then unusable and its keys wiped
 *   -EKEYREJECTED      a DH made while writing gave zeros: the peer's key
 *                      (set by the caller, or received in an earlier message)
 *                      is of low order; the state is then unusable
 *   -EOVERFLOW         a transport nonce reached PM__NOISE_NONCE_LIMIT: close
 *                      the link (the state is then unusable)
 *   -EPERM             the state was made in another process (before a fork)
 *   -ENOMEM            no secret memory
 * Once a state is unusable, every call returns the error that made it so.
 */

#include <stddef.h>
#include <stdint.h>

#include "cipher.h"
#include "noise_ephemeral.h"

#define PM__NOISE_MAX_PSKS 4u


typedef struct pm__noise_hs pm__noise_hs;
typedef struct pm__noise_transport pm__noise_transport;

/*
 * A handshake state for one side. name: "Noise_<pattern><modifiers>_25519_
 * ChaChaPoly_SHA256", modifiers "psk0".."pskN" joined by '+'. The prologue is
 * mixed in at once. On -EPROTONOSUPPORT or -EINVAL, *why (if why is not NULL)
 * is a static string naming what was wrong.
 */
int pm__noise_hs_new(pm__noise_hs **out, const char *name, int initiator, const void *prologue,
                     size_t prologue_len, const char **why);

/* The same with its public key, which the caller derived from priv once
 * (a keyring at load): no base-point multiplication per handshake. A pub
 * that is not priv's makes the handshake fail at the peer. */
int pm__noise_hs_set_static_pair(pm__noise_hs *hs, const unsigned char priv[PM__NOISE_KEY_LEN],
                                 const unsigned char pub[PM__NOISE_KEY_LEN]);

/* pm__noise_ephemeral_prepare: noise_ephemeral.h. */

/* The index-th pre-shared key (index counts the psk modifiers in the order
 * of the name: "psk0+psk2" has 0 and 1). */
int pm__noise_hs_set_psk(pm__noise_hs *hs, unsigned index, const unsigned char psk[PM__NOISE_KEY_LEN]);

/* Bytes pm__noise_write_message will produce for payload_len bytes of
 * payload, or a negative errno (not our turn, done, too big). */
long pm__noise_write_size(const pm__noise_hs *hs, size_t payload_len);

/*
 * Writes the next handshake message, carrying payload, into out[0..cap).
 * payload and out must not overlap. Returns 0 and the length in *out_len.
 */
int pm__noise_write_message(pm__noise_hs *hs, const void *payload, size_t payload_len, void *out,
                            size_t cap, size_t *out_len);

/*
 * Reads the next handshake message msg[0..len): any bytes at all (hostile
 * input); nothing is allocated, no byte outside msg[0..len) is read. The
 * payload goes to payload[0..cap), its length to *payload_len.
 */
int pm__noise_read_message(pm__noise_hs *hs, const void *msg, size_t len, void *payload, size_t cap,
                           size_t *payload_len);

/* 1 once the last handshake message has been written or read. */
int pm__noise_hs_done(const pm__noise_hs *hs);

/* The peer's static public key, once received (or set); -ENOKEY before. */
int pm__noise_hs_remote_static(const pm__noise_hs *hs, unsigned char out[PM__NOISE_KEY_LEN]);

/*
 * Split(): the two transport cipher states of a finished handshake, this
 * side's sending and receiving direction. Each direction rekeys after every
 * rekey_every messages (0: never; PM__NOISE_REKEY_EVERY for the links); both
 * sides must use the same value. The handshake state stays for
 * hs_remote_static; free it soon, it holds the chaining key.
 */
int pm__noise_split(pm__noise_hs *hs, uint64_t rekey_every, pm__noise_transport **out);

/* Wipes and frees. In a forked child only the ordinary memory is released:
 * the secret pages there are wiped or absent, sodium_free would abort. */
void pm__noise_hs_free(pm__noise_hs *hs);

#endif /* PM_NOISE_H */
