/* SPDX-License-Identifier: MIT */
/*
 * liveness.c - hung workers and a stalled supervisor: the periodic check of
 * every ready worker's progress counter (or notify WATCHDOG=1), and of the
 * supervisor's own lateness, so that its silence is never blamed on them.
 */
#define _GNU_SOURCE
#include "liveness.h"

#include "reap.h"
#include "hub/hub.h"
#include "options.h"

#include <string.h>
#include <time.h>

static uint64_t boottime_ms(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_BOOTTIME, &ts);
    return (uint64_t)ts.tv_sec * 1000u + (uint64_t)ts.tv_nsec / 1000000u;
}

/* How often the liveness check runs: four times per heartbeat timeout. */
uint64_t pm__liveness_period(const pm_cluster *c)
{
    uint64_t p = (uint64_t)c->o->heartbeat_timeout_ms / 4;
    return p < 5 ? 5 : p;
}

/* The stall between two checks (liveness.h): pure, so that the suspend
 * rule, which no test can make happen, is asserted on its arithmetic. */
uint64_t pm__liveness_stall(uint64_t dm, uint64_t db, uint64_t period, uint64_t timeout,
                            int *reason)
{
    uint64_t late = dm > period ? dm - period : 0;
    uint64_t suspended = db > dm ? db - dm : 0;
    uint64_t stall = late > suspended ? late : suspended;
    if (stall <= timeout / 2)
        return 0;
    *reason = suspended > late ? PM_REASON_SUSPEND : PM_REASON_STALL;
    return stall;
}

/*
 * The liveness check (a timer, every heartbeat_timeout / 4, at least 5 ms
 * apart).
 *
 * First the supervisor checks itself: if this check runs later than it
 * should by more than half the timeout (we were stopped, starved, or the
 * application did not call pm_cluster_run), or CLOCK_BOOTTIME ran ahead of
 * CLOCK_MONOTONIC by as much (the machine was suspended: MONOTONIC stops,
 * BOOTTIME does not), the silence was ours: every worker gets a fresh period
 * and the stall is counted and reported, instead of fencing workers for it.
 *
 * Then each ready worker: its progress counter (advanced by every procmesh
 * call it makes, and periodically while it waits in pm_node_recv) is
 * compared with the last value seen. Unchanged for longer than the timeout:
 * hung, fenced. Only change is read, never the value's meaning, so a worker
 * that scribbles on it can at worst look alive or hung.
 */
void pm__liveness_check(pm_cluster *c, uint64_t now)
{
    uint64_t timeout = (uint64_t)c->o->heartbeat_timeout_ms;
    uint64_t period = pm__liveness_period(c);
    uint64_t boot = boottime_ms();
    if (c->liveness->last_check_mono != 0) {
        int reason = 0;
        uint64_t stall = pm__liveness_stall(now - c->liveness->last_check_mono,
                                            boot - c->liveness->last_check_boot, period,
                                            timeout, &reason);
        if (stall != 0) {
            c->stats.stalls++;
            if (stall > c->stats.longest_stall_ms)
                c->stats.longest_stall_ms = stall;
            for (unsigned i = 0; i < c->nslots; i++)
                c->slots[i].progress_ms = now;
            if (c->o->on_event != NULL) {
                pm_event ev;
                memset(&ev, 0, sizeof(ev));
                ev.type = PM_EVENT_STALLED;
                ev.delay_ms = stall > UINT32_MAX ? UINT32_MAX : (uint32_t)stall;
                ev.reason_code = reason;
                ev.reason = pm_reason_name(ev.reason_code);
                PM__APP_CALLBACK(c->hub, c->o->on_event(c, &ev, c->o->on_event_arg));
            }
        }
    }
    c->liveness->last_check_mono = now;
    c->liveness->last_check_boot = boot;
    /* Every slot, once per period: O(N) per check, at a fixed rate (four
     * checks per heartbeat timeout) whatever the traffic; never per turn,
     * since the check runs only when its own deadline comes due. Counted
     * apart from the turn's visits (tests/check_deadlines.c). */
    c->liveness_checks++;
    if (c->o->ready_mode != PM_READY_EXEC)
        c->liveness_visits += c->nslots;
    for (unsigned i = 0; i < c->nslots && c->o->ready_mode != PM_READY_EXEC; i++) {
        pm__slot *s = &c->slots[i];
        if (s->state != PM_SLOT_READY || !pm__hub_port_reading(c->hub, i))
            continue;
        if (c->o->ready_mode == PM_READY_NOTIFY) {
            /* As under systemd's WatchdogSec: only a worker that sends
             * WATCHDOG=1 is held to it; silence otherwise is not a hang. */
            if (s->watchdog && now - s->progress_ms > timeout)
                pm__cluster_fault(c, s, PM_REASON_HEARTBEAT);
            continue;
        }
        const struct pm__ctl *ctl = s->channel.map;
        uint64_t beats = atomic_load_explicit(&ctl->beats, memory_order_relaxed);
        if (beats != s->last_beats) {
            s->last_beats = beats;
            s->progress_ms = now;
        } else if (now - s->progress_ms > timeout) {
            pm__cluster_fault(c, s, PM_REASON_HEARTBEAT);
        }
    }
    c->next_check = now + period;
}
