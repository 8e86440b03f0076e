/* SPDX-License-Identifier: MIT */
/* noise_state.h - the layout of a Noise handshake state: noise.c's, and the test hooks' (tests/hooks.h) that set the fixed values the published vectors need. */
#ifndef PM_NOISE_STATE_H
#define PM_NOISE_STATE_H

/*
 * Only noise.c makes and changes a state through this layout; every other
 * product file sees pm__noise_hs as opaque (noise.h). The tests read and
 * set what no product path reaches (a remote static of a pre-message, a
 * fixed ephemeral key, the handshake hash, where the secrets lie) through
 * it, so the library carries no function only a test calls.
 */

#include <stdbool.h>
#include <stdint.h>

#include "noise.h"

#define PM__NOISE_MAX_MSGS 4   /* the longest patterns (X1K1, ...) have 4 messages */
#define PM__NOISE_MAX_TOKENS 8 /* "e, ee, se, s, es" plus a psk at each end */

struct pm__noise_hs_secret {
    unsigned char ck[PM__NOISE_KEY_LEN];
    unsigned char k[PM__NOISE_KEY_LEN];
    unsigned char s[PM__NOISE_KEY_LEN]; /* our static private key */
    unsigned char e[PM__NOISE_KEY_LEN]; /* our ephemeral private key */
    unsigned char psk[PM__NOISE_MAX_PSKS][PM__NOISE_KEY_LEN];
};

struct pm__noise_hs {
    uint32_t gen; /* pm__fork_gen() when made: another process gets -EPERM */
    int err;      /* 0, or the error that made the state unusable */
    struct pm__noise_hs_secret *sec;
    /* The pattern, with its psk tokens in place. */
    uint8_t tok[PM__NOISE_MAX_MSGS][PM__NOISE_MAX_TOKENS];
    uint8_t ntok[PM__NOISE_MAX_MSGS];
    unsigned nmsg;
    bool pre_s[2]; /* [0] initiator's, [1] responder's pre-message "s" */
    bool psk_mode;
    unsigned npsk, psk_set, psk_used; /* psk_set: a bit per index */
    /* Progress. */
    bool initiator, started, split;
    unsigned msg; /* index of the next message */
    /* fixed_e: e was set beforehand, the next e token does not take a new
     * pair; only the tests set it (the published vectors fix e). */
    bool has_k, has_s, has_e, fixed_e, has_rs, has_re;
    uint64_t n;   /* the handshake cipher's nonce */
    unsigned char h[PM__NOISE_KEY_LEN];
    unsigned char s_pub[PM__NOISE_KEY_LEN], e_pub[PM__NOISE_KEY_LEN];
    unsigned char rs[PM__NOISE_KEY_LEN], re[PM__NOISE_KEY_LEN];
};

#endif /* PM_NOISE_STATE_H */
