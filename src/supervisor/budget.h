/* SPDX-License-Identifier: MIT */
/*
 * budget.h - restart budget and backoff arithmetic. Pure: no clock, no
 * random source, no system call of its own; the caller passes the time and a
 * uniform random number in, so tests can drive it exactly.
 *
 * Rules:
 *  - backoff: the n-th consecutive restart waits min(max, min * 2^(n-1)),
 *    scaled by a uniform factor in [1 - f, 1 + f];
 *  - the consecutive count resets once an incarnation has stayed ready for
 *    max backoff ms;
 *  - budget: at most max_restarts restarts within a sliding window of
 *    window_ms (0: the count never resets; max_restarts -1: unlimited); the
 *    restart that would exceed it retires the slot instead.
 */
#ifndef PM_BUDGET_H
#define PM_BUDGET_H

#include <stdint.h>

typedef struct pm__budget_cfg {
    uint32_t min_backoff_ms;
    uint32_t max_backoff_ms;
    double random_factor; /* f in [0, 1] */
    int max_restarts;     /* -1 unlimited */
    uint32_t window_ms;   /* 0: never forget */
} pm__budget_cfg;

typedef struct pm__budget {
    uint64_t *times;      /* restart times (ms) inside the window, oldest first */
    unsigned ntimes;
    unsigned cap;         /* allocated entries of times */
    unsigned consecutive; /* restarts since the last long-enough ready period */
    unsigned total;       /* restarts ever */
    uint64_t ready_since; /* ms when the current incarnation became ready; 0 none */
    int ready;
} pm__budget;

enum pm__budget_verdict { PM__BUDGET_RESTART = 1, PM__BUDGET_RETIRE = 2 };

void pm__budget_init(pm__budget *b);
void pm__budget_free(pm__budget *b);

/* The current incarnation became ready at now_ms. */
void pm__budget_on_ready(pm__budget *b, uint64_t now_ms);

/*
 * The current incarnation ended and wants a restart at now_ms. rand01 is a
 * uniform number in [0, 1). Returns PM__BUDGET_RESTART with *delay_ms set
 * (the restart is counted), PM__BUDGET_RETIRE when the budget is spent, or
 * -ENOMEM when the window could not grow (treat as a retire-free restart
 * failure: the caller retries later).
 */
int pm__budget_on_failure(pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms,
                          double rand01, uint32_t *delay_ms);

/* Restarts inside the window ending at now_ms. */
unsigned pm__budget_in_window(const pm__budget *b, const pm__budget_cfg *cfg, uint64_t now_ms);

/* The backoff before the n-th consecutive restart (n >= 1), before jitter. */
uint32_t pm__budget_backoff(const pm__budget_cfg *cfg, unsigned n);

#endif /* PM_BUDGET_H */
