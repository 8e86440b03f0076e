/* SPDX-License-Identifier: MIT */
/* noise_ephemeral.h - the handshake's ephemeral key pairs (noise_ephemeral.c). */
#ifndef PM_NOISE_EPHEMERAL_H
#define PM_NOISE_EPHEMERAL_H

#include "cipher.h" /* PM__NOISE_KEY_LEN */

/*
 * Generates the next handshake's ephemeral key pair now, off the critical
 * path (the mesh calls it at the end of a loop turn): the next e token
 * written (any handshake state of this process) takes it and wipes it, so
 * it is fresh and used once, as Noise's GENERATE_KEYPAIR() requires; a
 * handshake that finds none generates its own as before. Idempotent while
 * one waits. 0, -ENOMEM (no secret memory), -EIO (libsodium).
 */
int pm__noise_ephemeral_prepare(void);

/* GENERATE_KEYPAIR() for an e token: the prepared pair when there is one
 * (it is wiped as it is taken), else a new one generated here. priv is in
 * the handshake's secret memory. */
void pm__noise_ephemeral_take(unsigned char priv[PM__NOISE_KEY_LEN], unsigned char pub[PM__NOISE_KEY_LEN]);

#endif /* PM_NOISE_EPHEMERAL_H */
