/* SPDX-License-Identifier: MIT */
/* record_state.h - the layout of a record state and its one sealing step: record.c's, and the test hooks' (tests/hooks.h) that play a hostile or worn-out peer. */
#ifndef PM_RECORD_STATE_H
#define PM_RECORD_STATE_H

/*
 * Only record.c makes and changes a state through this layout; every other
 * product file sees pm__rec as opaque (record.h). The tests reach through
 * it what no product path reaches in a test's time (a nonce near its limit)
 * or must never do (seal a record its receiver refuses), so the library
 * carries no function only a test calls.
 */

#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "record.h"

struct pm__rec {
    pm__noise_transport *t;
    /* 0, or the error that killed a direction (sticky). A receiving error
     * leaves the sending direction usable: its key and nonce are its own,
     * so the CLOSE 1 that reports the error can still go out. Only a
     * failure of the transport itself (a segment that did not
     * authenticate wipes both keys, cipher.c) ends both, and then
     * sealing fails on its own. */
    int rx_err, tx_err;
    bool sent_close, got_close, got_any;
    uint16_t close_reason;
    /* Our own count of each direction's nonces: one per segment, as the
     * transport counts them, so the nonce limit is known before a record is
     * started rather than in the middle of one. */
    uint64_t n_tx, n_rx;
    /* The decoder: the length bytes, then the ciphertext into rx. */
    unsigned char hdr[PM__REC_HDR];
    unsigned hdr_got;
    uint32_t ct_len;
    size_t ct_got;
    unsigned char *rx; /* PM__REC_MAX_CT bytes, in the state's own mapping (record.c) */
    unsigned char *tx; /* PM__REC_MAX_PLAIN bytes: a record's plaintext; the same mapping */
};

/* Encrypts src[0..plain) (r->tx, or a caller's FRAMES plaintext) as one
 * record into out, segment by segment straight from src: no copy of the
 * plaintext on the way. is_close: the record that may use the last nonce,
 * which every other record leaves for it. Whatever src says: every caller
 * in record.c has checked it (the seals of record.h). */
int pm__rec_seal(pm__rec *r, const unsigned char *src, size_t plain, bool is_close, void *out, size_t cap,
                 size_t *out_len);

#endif /* PM_RECORD_STATE_H */
