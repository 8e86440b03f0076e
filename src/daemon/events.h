/*
 * events.h - the daemon's view of cluster events: one log line per event,
 * and the counters they feed (exits by cause, with OOM kills told apart
 * from other SIGKILLs; consecutive failed starts; retired slots).
 */
#ifndef PMD_EVENTS_H
#define PMD_EVENTS_H

#include "health.h"
#include "procmesh.h"

typedef struct pmd_events {
    pmd_health_state *hs; /* exit counters and failed starts, for /metrics and /healthz */
    unsigned retired;     /* slots retired: exit status 3 once none is left */
    long long oom_kills;  /* our memory cgroup's oom_kill count at the last look, -1 unknown */
} pmd_events;

/* Takes the first look at the OOM count, so that a later rise is ours. */
void pmd_events_init(pmd_events *ev, pmd_health_state *hs);

/* pm_options_set_on_event and pm_options_set_on_permanently_down callbacks;
 * arg is the pmd_events. */
void pmd_on_event(pm_cluster *c, const pm_event *e, void *arg);
void pmd_on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg);

#endif /* PMD_EVENTS_H */
