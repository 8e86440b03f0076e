/* SPDX-License-Identifier: MIT */
/* laneoffer.c - a lane's hand-over and revocation: its record (three fds in one message), its offer's and its wake-up's codecs. */
#include "base/internal.h"
#include "base/le.h"
#include "lane.h"
#include "laneoffer.h"
#include "os/fdpass.h"

#include <string.h>

#define LANE_MAGIC 0x4e4c4d50u /* "PMLN" */

void pm__lane_offer_encode(const pm__lane_offer *o, void *buf)
{
    unsigned char *p = buf;
    pm__put32(p, o->seq);
    pm__put32(p + 4, o->index);
    pm__put32(p + 8, o->gen);
    pm__put32(p + 12, o->end);
    pm__put32(p + 16, o->peer_slot);
    pm__put64(p + 20, o->peer_inc);
}

int pm__lane_offer_decode(const void *buf, size_t len, pm__lane_offer *o)
{
    if (len != PM__LANE_OFFER_SIZE)
        return -EBADMSG;
    const unsigned char *p = buf;
    pm__lane_offer v = {pm__get32(p),      pm__get32(p + 4),  pm__get32(p + 8),
                        pm__get32(p + 12), pm__get32(p + 16), pm__get64(p + 20)};
    if (v.seq == 0 || v.gen == 0 || v.index >= PM__LANES_MAX || v.end > 1)
        return -EBADMSG;
    *o = v;
    return 0;
}

void pm__lane_revoked_encode(uint32_t index, uint32_t gen, void *buf)
{
    unsigned char *p = buf;
    pm__put32(p, index);
    pm__put32(p + 4, gen);
}

int pm__lane_revoked_decode(const void *buf, size_t len, uint32_t *index, uint32_t *gen)
{
    if (len != PM__LANE_REVOKED_SIZE)
        return -EBADMSG;
    const unsigned char *p = buf;
    uint32_t k = pm__get32(p), g = pm__get32(p + 4);
    if (k >= PM__LANES_MAX || g == 0)
        return -EBADMSG;
    *index = k;
    *gen = g;
    return 0;
}

int pm__lane_record_send(int sock, uint32_t seq, const int fds[3])
{
    unsigned char rec[PM__LANE_RECORD];
    pm__put32(rec, LANE_MAGIC);
    pm__put32(rec + 4, seq);
    ssize_t n = pm__fdpass_send(sock, rec, sizeof(rec), fds, 3);
    if (n < 0)
        return (int)n;
    return n == (ssize_t)sizeof(rec) ? 0 : -EIO;
}

int pm__lane_record_recv(int sock, uint32_t seq, int fds[3])
{
    unsigned char rec[PM__LANE_RECORD + 1];
    int got[16];
    size_t nfds;
    ssize_t n = pm__fdpass_recv(sock, rec, sizeof(rec), got, PM__ARRAY_SIZE(got), &nfds);
    if (n < 0)
        return (int)n;
    if (n != PM__LANE_RECORD || pm__get32(rec) != LANE_MAGIC || pm__get32(rec + 4) != seq ||
        nfds != 3) {
        for (size_t i = 0; i < nfds; i++)
            pm__close(got[i]);
        return -EPROTO;
    }
    memcpy(fds, got, 3 * sizeof(int));
    return 0;
}
