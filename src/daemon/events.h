/* SPDX-License-Identifier: MIT */
/*
 * events.h - the daemon's view of cluster events: one log line per event
 * (rate-limited per slot: a worker must not be able to flood the log, nor
 * silence the supervisor's record of its lifecycle),
 * and the counters they feed (exits by cause, with OOM kills told apart
 * from other SIGKILLs; consecutive failed starts; retired slots).
 */
#ifndef PMD_EVENTS_H
#define PMD_EVENTS_H

#include <stdint.h>

#include "health.h"
#include "procmesh.h"

/* Lines about one slot that its worker controls (STOPPING=1 from a notify
 * worker, not-draining): PMD_LOG_BURST at once, then PMD_LOG_PER_S a
 * second. */
#define PMD_LOG_BURST 20
#define PMD_LOG_PER_S 2
/* The supervisor's record of what happened to a slot (started, ready,
 * exited, restart_scheduled, spawn_failed, fenced) is not the worker's to
 * silence: those lines have a limit of their own, far above any restart
 * loop the backoff allows, and what passes it is counted in a
 * lifecycle_suppressed line. stopped and retired (one each per slot and
 * stop) are always written. */
#define PMD_LIFE_BURST 200
#define PMD_LIFE_PER_S 50

typedef struct pmd_log_bucket {
    double tokens;       /* lines that may be written now, up to burst */
    uint64_t at_ms;      /* when tokens was last brought up to date */
    uint64_t suppressed; /* lines held back since the last report of them */
    unsigned burst;      /* PMD_LOG_BURST or PMD_LIFE_BURST */
    unsigned per_s;      /* PMD_LOG_PER_S or PMD_LIFE_PER_S */
} pmd_log_bucket;

/* The log's limits for one slot. */
typedef struct pmd_slot_log {
    pmd_log_bucket worker; /* lines its worker controls */
    pmd_log_bucket life;   /* lifecycle lines */
    uint64_t life_exits;   /* exits among the lifecycle lines held back */
    uint64_t inc_first;    /* the incarnations they were about (0: none yet) */
    uint64_t inc_last;
    uint64_t life_reported_ms; /* when its last lifecycle_suppressed line was written (0: never) */
} pmd_slot_log;

typedef struct pmd_events {
    pmd_health_state *hs; /* exit counters and failed starts, for /metrics and /healthz */
    unsigned retired;     /* slots retired: exit status 3 once none is left */
    unsigned failed_stops; /* slots stopped after a failure, not restarted (--restart
                              never): exit status 5 */
    long long oom_kills;  /* our memory cgroup's oom_kill count at the last look, -1 unknown */
    int contain_logged;   /* the containment line was written (at the first event) */
    int slot_oom;         /* each slot has its own memory cgroup: pm_event.oom_kills is exact */
    pmd_slot_log *slots;  /* per slot, grown on first use */
    unsigned nslots;
    pmd_slot_log fallback; /* shared by the slots that got no limits of their own (out of memory) */
    /* Why the first start failed, in words: the detail of the first STOPPED
     * "spawn-aborted" event (the one behind pm_cluster_spawn's errno; the
     * workers killed after it get their own). "" when none came. */
    char start_error[320];
} pmd_events;

/* Takes the first look at the OOM count, so that a later rise is ours. */
void pmd_events_init(pmd_events *ev, pmd_health_state *hs);
void pmd_events_free(pmd_events *ev);

/* A full bucket of burst lines refilled at per_s a second, at now_ms. */
pmd_log_bucket pmd_log_bucket_new(unsigned burst, unsigned per_s, uint64_t now_ms);

/* Takes a token from b at now_ms: 1 when a line may be written. Pure. */
int pmd_log_bucket_take(pmd_log_bucket *b, uint64_t now_ms);

/* Writes the log_suppressed and lifecycle_suppressed lines of each slot
 * that had lines held back and may log again; call about once a second. */
void pmd_events_tick(pmd_events *ev);

/* pm_options_set_on_event and pm_options_set_on_permanently_down callbacks;
 * arg is the pmd_events. */
void pmd_on_event(pm_cluster *c, const pm_event *e, void *arg);
void pmd_on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg);

/* pm_options_set_on_output callback: a worker's captured line as an
 * "output" log line at info (rate-limited by the library, per slot). */
void pmd_on_output(pm_cluster *c, const pm_output_line *l, void *arg);

#endif /* PMD_EVENTS_H */
