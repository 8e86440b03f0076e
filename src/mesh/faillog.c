/* SPDX-License-Identifier: MIT */
/* faillog.c - one log line per peer address and reason per minute (faillog.h). */
#include "faillog.h"

#include <stdio.h>
#include <string.h>

/* The entry of (addr, reason), or the one to reuse for it: a free one,
 * else the one seen least recently. *found says which. */
static pm__faillog_entry *slot_of(pm__faillog *t, const char *addr, int reason, int *found)
{
    pm__faillog_entry *free_e = NULL, *oldest = NULL;
    *found = 0;
    for (unsigned i = 0; i < PM__FAILLOG_ENTRIES; i++) {
        pm__faillog_entry *e = &t->e[i];
        if (e->addr[0] == '\0') {
            if (free_e == NULL)
                free_e = e;
            continue;
        }
        if (e->reason == reason && strcmp(e->addr, addr) == 0) {
            *found = 1;
            return e;
        }
        if (oldest == NULL || e->seen_ms < oldest->seen_ms)
            oldest = e;
    }
    return free_e != NULL ? free_e : oldest;
}

/* Whether e's window (from its last report) has ended at now_ms. A clock
 * that went back (a caller's mistake) must not hold lines back for ever:
 * the window counts from the report either way. */
static int window_over(const pm__faillog_entry *e, uint64_t now_ms)
{
    return now_ms < e->reported_ms || now_ms - e->reported_ms >= PM__FAILLOG_WINDOW_MS;
}

uint64_t pm__faillog_note(pm__faillog *t, const char *addr, int reason, uint64_t now_ms)
{
    char key[PM__FAILLOG_ADDR];
    snprintf(key, sizeof(key), "%s", addr != NULL && addr[0] != '\0' ? addr : "?");
    int found;
    pm__faillog_entry *e = slot_of(t, key, reason, &found);
    if (!found) {
        memcpy(e->addr, key, sizeof(key));
        e->reason = reason;
        e->reported_ms = now_ms;
        e->seen_ms = now_ms;
        e->held = 0;
        return 1;
    }
    e->seen_ms = now_ms;
    e->held++;
    if (!window_over(e, now_ms))
        return 0;
    uint64_t n = e->held;
    e->held = 0;
    e->reported_ms = now_ms;
    return n;
}

uint64_t pm__faillog_next(const pm__faillog *t)
{
    uint64_t next = 0;
    for (unsigned i = 0; i < PM__FAILLOG_ENTRIES; i++) {
        const pm__faillog_entry *e = &t->e[i];
        if (e->addr[0] == '\0' || e->held == 0)
            continue;
        uint64_t at = e->reported_ms + PM__FAILLOG_WINDOW_MS;
        if (next == 0 || at < next)
            next = at;
    }
    return next;
}

uint64_t pm__faillog_due(pm__faillog *t, uint64_t now_ms, char addr[PM__FAILLOG_ADDR], int *reason)
{
    for (unsigned i = 0; i < PM__FAILLOG_ENTRIES; i++) {
        pm__faillog_entry *e = &t->e[i];
        if (e->addr[0] == '\0' || e->held == 0 || !window_over(e, now_ms))
            continue;
        memcpy(addr, e->addr, PM__FAILLOG_ADDR);
        *reason = e->reason;
        uint64_t n = e->held;
        e->held = 0;
        e->reported_ms = now_ms;
        return n;
    }
    return 0;
}
