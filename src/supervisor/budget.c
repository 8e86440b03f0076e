/* SPDX-License-Identifier: MIT */
/* budget.c - restart budget and backoff; see budget.h. Pure. */
#include "base/internal.h"
#include "budget.h"

#include <stdlib.h>
#include <string.h>

void pm__budget_init(pm__budget *b)
{
    memset(b, 0, sizeof(*b));
}

void pm__budget_free(pm__budget *b)
{
    free(b->times);
    memset(b, 0, sizeof(*b));
}

void pm__budget_on_ready(pm__budget *b, uint64_t now_ms)
{
    b->ready = 1;
    b->ready_since = now_ms;
}

uint32_t pm__budget_backoff(const pm__budget_cfg *cfg, unsigned n)
{
    uint64_t d = cfg->min_backoff_ms;
    /* Double n-1 times, stopping as soon as the cap is reached so the shift
     * can never overflow whatever n is. */
    for (unsigned i = 1; i < n && d < cfg->max_backoff_ms; i++)
        d *= 2;
    return d > cfg->max_backoff_ms ? cfg->max_backoff_ms : (uint32_t)d;
}

/* Index of the first restart time still inside the window. */
static unsigned first_in_window(const pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms)
{
    if (cfg->window_ms == 0)
        return 0;
    unsigned i = 0;
    /* A restart at time t is inside the window while now - t < window. */
    while (i < b->ntimes && now_ms - b->times[i] >= cfg->window_ms)
        i++;
    return i;
}

unsigned pm__budget_in_window(const pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms)
{
    if (cfg->max_restarts < 0)
        return b->ntimes;
    return b->ntimes - first_in_window(b, cfg, now_ms);
}

/* Appends now_ms to the window. Unlimited budgets and never-forgetting
 * windows only need the count, not the times. */
static int record(pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms)
{
    if (cfg->max_restarts < 0 || cfg->window_ms == 0) {
        b->ntimes++;
        return 0;
    }
    if (b->ntimes == b->cap) {
        unsigned cap = b->cap ? b->cap * 2 : 4;
        if (cap > (unsigned)cfg->max_restarts + 1)
            cap = (unsigned)cfg->max_restarts + 1;
        uint64_t *t = realloc(b->times, cap * sizeof(*t));
        if (t == NULL)
            return -ENOMEM;
        b->times = t;
        b->cap = cap;
    }
    b->times[b->ntimes++] = now_ms;
    return 0;
}

int pm__budget_on_failure(pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms,
                          double rand01, uint32_t *delay_ms)
{
    /* A long enough ready period forgives the earlier crashes' backoff. */
    if (b->ready && now_ms - b->ready_since >= cfg->max_backoff_ms)
        b->consecutive = 0;
    b->ready = 0;

    if (cfg->max_restarts >= 0 && cfg->window_ms > 0) {
        unsigned drop = first_in_window(b, cfg, now_ms);
        if (drop > 0) {
            memmove(b->times, b->times + drop, (b->ntimes - drop) * sizeof(*b->times));
            b->ntimes -= drop;
        }
    }
    if (cfg->max_restarts >= 0 && b->ntimes >= (unsigned)cfg->max_restarts)
        return PM__BUDGET_RETIRE;
    if (record(b, cfg, now_ms) < 0)
        return -ENOMEM;
    b->consecutive++;
    b->total++;
    double base = pm__budget_backoff(cfg, b->consecutive);
    double f = cfg->random_factor;
    double scale = (1.0 - f) + 2.0 * f * rand01; /* uniform in [1-f, 1+f) */
    double d = base * scale + 0.5;
    *delay_ms = d >= 4294967295.0 ? UINT32_MAX : (uint32_t)d;
    return PM__BUDGET_RESTART;
}
