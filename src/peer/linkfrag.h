/* SPDX-License-Identifier: MIT */
/* linkfrag.h - a large message as a sequence of FRAG frames on a peer link: the fragment header codec and the receiver's reassembly rules, pure (no fds, no clock). */
#ifndef PM_LINKFRAG_H
#define PM_LINKFRAG_H

#include <stddef.h>
#include <stdint.h>

#include "procmesh.h"

/*
 * doc/protocol.md 6, "Large messages": a message above PM_MAX_PAYLOAD
 * crosses a link as FRAG frames whose payload is this 24-byte header and
 * then the fragment's bytes:
 *
 *   offset size field
 *   0      1    kind: the message's frame type (4 MSG, 5 REQUEST, 6 REPLY)
 *   1      3    zero
 *   4      4    msg_id: u32, per link and direction, 1, 2, 3 ... (wraps,
 *               never 0)
 *   8      8    total: u64, the message's length, > PM_MAX_PAYLOAD
 *   16     8    offset: u64, where this fragment's bytes go
 *
 * The fragments of one message go in order and back to back (the first at
 * offset 0, each next at the end of the one before, the last ending at
 * total), each with 1 .. PM__FRAG_DATA_MAX bytes; one message at a time
 * per link and direction (its fragments are never interleaved with another
 * message's fragments; other frames may come between them).
 */
#define PM__FRAG_HDR_SIZE 24u
#define PM__FRAG_DATA_MAX (PM_MAX_PAYLOAD - PM__FRAG_HDR_SIZE)

typedef struct pm__frag_hdr {
    uint8_t kind;
    uint32_t msg_id;
    uint64_t total;
    uint64_t offset;
} pm__frag_hdr;

void pm__frag_encode(const pm__frag_hdr *f, unsigned char out[PM__FRAG_HDR_SIZE]);
/* Decodes the payload of a FRAG frame (len bytes: header and data).
 * 0 (*data_len: the fragment's bytes), or -EBADMSG: shorter than the
 * header, no data or more than PM__FRAG_DATA_MAX, a kind other than MSG,
 * REQUEST or REPLY, non-zero reserved bytes, msg_id 0, total not above
 * PM_MAX_PAYLOAD, or the data running past total. */
int pm__frag_decode(const unsigned char *p, size_t len, pm__frag_hdr *out, size_t *data_len);

/* The receiver's state for one link: at most one message being
 * reassembled. */
typedef struct pm__frag_rx {
    int active;             /* a message is being reassembled */
    uint32_t msg_id;
    uint8_t kind;
    uint64_t total;
    uint64_t got;           /* bytes received: the next offset expected */
    uint32_t skip_id;       /* fragments of this id are ignored (refused or
                               dropped message); 0 none */
} pm__frag_rx;

/* What the caller does with a fragment (pm__frag_rx_step). */
enum pm__frag_action {
    PM__FRAG_BEGIN = 1, /* a new message of total bytes: allocate, then write the data */
    PM__FRAG_DATA,      /* write the data at its offset */
    PM__FRAG_TOO_BIG,   /* total is above max: refuse the message (-EMSGSIZE to its
                           sender); its later fragments are ignored */
    PM__FRAG_IGNORE,    /* a later fragment of a refused or dropped message */
    PM__FRAG_BAD        /* out of order, overlapping, a mismatch, an unknown id: the
                           message being reassembled (if any) is dropped, counted */
};

/*
 * One fragment f of data_len bytes (decoded). Returns a PM__FRAG_* action;
 * *dropped is set to 1 when a message being reassembled was abandoned by
 * this fragment (BAD, or a new message's first fragment: the caller frees
 * its buffer and counts it); *last to 1 when, after writing this
 * fragment's data, the message is complete (BEGIN or DATA).
 */
int pm__frag_rx_step(pm__frag_rx *r, const pm__frag_hdr *f, size_t data_len, uint64_t max,
                     int *dropped, int *last);

#endif /* PM_LINKFRAG_H */
