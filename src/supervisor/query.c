/* SPDX-License-Identifier: MIT */
/* query.c - what the application may ask of a running cluster: sizes, addresses, slot info, counters. */
#define _GNU_SOURCE
#include "types.h"

#include <string.h>

#include "core.h" /* pm__slot_address */
#include "hub/hub.h"
#include "os/loop.h"
#include "options.h"

PM_EXTERN int pm_cluster_self(const pm_cluster *c, pm_address *out)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (out == NULL)
        return -EINVAL;
    pm__node_address(pm__hub_names(c->hub), PM__NODE_MAIN, 0, out);
    return 0;
}

PM_EXTERN size_t pm_cluster_size(const pm_cluster *c)
{
    if (pm__cluster_check(c) < 0)
        return 0;
    size_t n = 0;
    for (unsigned i = 0; i < c->nslots; i++)
        n += c->slots[i].state != PM_SLOT_RETIRED && c->slots[i].state != PM_SLOT_STOPPED;
    return n;
}

PM_EXTERN int pm_cluster_addresses(const pm_cluster *c, pm_address *out, size_t cap)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (out == NULL && cap > 0)
        return -EINVAL;
    size_t n = 0;
    for (unsigned i = 0; i < c->nslots; i++) {
        const pm__slot *s = &c->slots[i];
        if (s->state == PM_SLOT_RETIRED || s->state == PM_SLOT_STOPPED)
            continue;
        if (n < cap)
            pm__slot_address(c, s, &out[n]);
        n++;
    }
    return (int)n;
}

PM_EXTERN int pm_cluster_fd(const pm_cluster *c)
{
    int rc = pm__cluster_check(c);
    return rc < 0 ? rc : pm__loop_fd(c->loop);
}

PM_EXTERN unsigned pm_cluster_slots(const pm_cluster *c)
{
    return pm__cluster_check(c) == 0 ? c->nslots : 0;
}

PM_EXTERN int pm_cluster_last_signal(const pm_cluster *c)
{
    return pm__cluster_check(c) == 0 ? c->last_signal : 0;
}

PM_EXTERN int pm_cluster_slot_info(const pm_cluster *c, unsigned slot, pm_slot_info *info)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (info == NULL || slot >= c->nslots)
        return -EINVAL;
    const pm__slot *s = &c->slots[slot];
    memset(info, 0, sizeof(*info));
    info->state = s->state;
    info->pid = s->pid;
    info->incarnation = s->incarnation;
    info->restarts_in_window = pm__budget_in_window(&s->budget, &c->bcfg, pm__now_ms());
    info->restarts_total = s->budget.total;
    info->last_exit_code = s->last_exit_code;
    info->last_signal = s->last_signal;
    /* Only where heartbeats exist: an exec worker never beats and a notify
     * worker only once it sent WATCHDOG=1; their age since ready would grow
     * without bound and set off any alert on it. At least 1, so that 0
     * keeps meaning "none". */
    int beats = c->o->ready_mode == PM_READY_MESH || (c->o->ready_mode == PM_READY_NOTIFY && s->watchdog);
    if (s->state == PM_SLOT_READY && s->progress_ms != 0 && beats) {
        uint64_t age = pm__now_ms() - s->progress_ms;
        info->heartbeat_age_ms = age == 0 ? 1 : age > UINT32_MAX ? UINT32_MAX : (uint32_t)age;
    }
    info->last_fence_reason = s->last_fence_reason != 0 ? pm_reason_name(s->last_fence_reason) : NULL;
    info->fences = s->fences;
    info->input_faults = s->input_faults;
    info->kill_pending = s->kill_sent && pm__slot_has_process(s);
    if (s->crash != NULL)
        info->last_crash = *s->crash;
    if (s->channel.map != NULL)
        info->waiting = atomic_load_explicit(&((const struct pm__ctl *)s->channel.map)->waiting,
                                             memory_order_relaxed) != 0;
    return 0;
}

PM_EXTERN int pm_cluster_stats(const pm_cluster *c, struct pm_cluster_stats *out)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (out == NULL)
        return -EINVAL;
    *out = c->stats;
    pm__hub_stats(c->hub, out);
    out->input_faults = c->stats.input_faults;
    return 0;
}
