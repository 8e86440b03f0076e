/* SPDX-License-Identifier: MIT */
/* faillog.h - the rate limit of the log of refused peer connections: one line per peer address and reason per minute, carrying the failures it stands for (doc/protocol.md, "Conventions"). */
#ifndef PM_FAILLOG_H
#define PM_FAILLOG_H

/*
 * Pure: no clock (the time is passed in), no allocation, a fixed table.
 * Each failure is noted with the peer's address (text) and the reason
 * (PM__PF_*). The first failure of an (address, reason) is reported at
 * once, standing for itself; later ones within PM__FAILLOG_WINDOW_MS of
 * the last report are held back and counted; the first failure after the
 * window is reported standing for itself and every one held back since.
 * A pair whose window ends with failures held back and no new failure is
 * reported then, by the caller's timer (pm__faillog_next, _due), standing
 * for those: a peer that stops failing still gets its count logged. So a
 * host refused twice a second writes one line a minute, and an operator
 * whose link does not come up sees why at once.
 *
 * The table holds PM__FAILLOG_ENTRIES pairs; a new pair takes the entry
 * seen least recently, whose held-back failures then never reach the log
 * (they stay counted in the metrics, which are exact). Memory does not
 * grow with the number of sources.
 */

#include <stdint.h>

#define PM__FAILLOG_WINDOW_MS 60000u
#define PM__FAILLOG_ENTRIES 64u
#define PM__FAILLOG_ADDR 64u /* "[v6 address]:port" and a NUL */

typedef struct pm__faillog_entry {
    char addr[PM__FAILLOG_ADDR]; /* "" : a free entry */
    int reason;
    uint64_t reported_ms;        /* its last report */
    uint64_t seen_ms;            /* its last failure (eviction order) */
    uint64_t held;               /* failures since that report */
} pm__faillog_entry;

typedef struct pm__faillog {
    pm__faillog_entry e[PM__FAILLOG_ENTRIES];
} pm__faillog;

/*
 * One failure of (addr, reason) at now_ms. Returns how many failures the
 * line to write now stands for (this one and those held back), or 0: no
 * line now (held back, carried by the next line for the pair). An addr
 * longer than the table keeps is cut (the cut text is the key).
 */
uint64_t pm__faillog_note(pm__faillog *t, const char *addr, int reason, uint64_t now_ms);

/* When the next held-back line is due (the end of the window of a pair
 * with failures held back), or 0: none is. */
uint64_t pm__faillog_next(const pm__faillog *t);

/*
 * A line due at now_ms (a pair whose window ended with failures held
 * back): its address into addr, its reason into *reason; returns how many
 * failures it stands for, and the pair's window starts again at now_ms.
 * 0: no line is due. Call until it returns 0.
 */
uint64_t pm__faillog_due(pm__faillog *t, uint64_t now_ms, char addr[PM__FAILLOG_ADDR], int *reason);

#endif /* PM_FAILLOG_H */
