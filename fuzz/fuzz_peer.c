/* SPDX-License-Identifier: MIT */
/* fuzz_peer.c - libFuzzer harness for a peer link's responder (pm__pconn_input): hostile bytes before and during the handshake. */
/*
 * Input: a mode byte, then the stream. Mode 0: the whole stream is the
 * attacker's. Mode 1: a valid preamble for this mesh and key id comes
 * first (what an observer of a real connection could replay), then the
 * attacker's bytes. Chunk sizes come from the mode byte's high bits.
 * Oracle: the link never comes up (nobody here holds the initiator's
 * static key and the psk together with the ephemeral the responder
 * chose), every event is NONE or DEAD, DEAD is sticky, a dead responder
 * has a failure reason, the output queue stays within its bound, and the
 * responder writes at most message 2 (it answers nothing before a whole
 * preamble and message 1).
 */
#include <errno.h>
#include <sodium.h>

#include "fuzz.h"
#include "peer/peer.h"

static pm__keyring *kr;
static const unsigned char secret[32] = {1, 2, 3};

int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size)
{
    if (size < 1)
        return 0;
    if (kr == NULL) {
        FUZZ_ASSERT(sodium_init() >= 0);
        FUZZ_ASSERT(pm__keyring_new(&kr) == 0);
        FUZZ_ASSERT(pm__keyring_add_secret(kr, secret) == 0);
        FUZZ_ASSERT(pm__keyring_random_static(kr) == 0);
    }
    unsigned mode = data[0] & 1, chunk = 1u + (data[0] >> 1);
    data++;
    size--;
    pm__pconn_cfg cfg = {"sys", "b", 77, 5000, kr, NULL};
    static pm__pconn c; /* ~1.2 KiB of buffers: not on the fuzzer's stack */
    FUZZ_ASSERT(pm__pconn_init(&c, &cfg, 0) == 0);
    int dead = 0;
    if (mode == 1) {
        unsigned char id[PM__PEER_KEY_ID_LEN], pre[PM__PEER_PREAMBLE_MAX];
        pm__peer_key_id(secret, id);
        size_t n = pm__peer_preamble("sys", id, pre), used;
        FUZZ_ASSERT(pm__pconn_input(&c, pre, n, &used) == PM__PCE_NONE && used == n);
    }
    for (size_t off = 0; off < size;) {
        size_t n = size - off < chunk ? size - off : chunk, used = 0;
        int ev = pm__pconn_input(&c, data + off, n, &used);
        FUZZ_ASSERT(ev == PM__PCE_NONE || ev == PM__PCE_DEAD);
        FUZZ_ASSERT(used <= n);
        if (ev == PM__PCE_DEAD) {
            FUZZ_ASSERT(c.state == PM__PC_DEAD && c.fail != PM__PF_NONE);
            dead = 1;
            break;
        }
        FUZZ_ASSERT(used == n);
        off += n;
    }
    /* A live link has taken no CLOSE (one ends it): its end of stream is
     * truncation. */
    if (!dead) {
        FUZZ_ASSERT(pm__pconn_eof(&c) == PM__PCE_DEAD);
        FUZZ_ASSERT(c.fail == PM__PF_TRUNCATED);
    }
    size_t out;
    (void)pm__pconn_output(&c, &out);
    FUZZ_ASSERT(out <= 4 + PM__PEER_HS_MSG_MAX); /* message 2 at most */
    FUZZ_ASSERT(c.state != PM__PC_UP && c.state != PM__PC_SPLIT);
    pm__pconn_free(&c);
    return 0;
}
