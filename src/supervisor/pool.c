/* SPDX-License-Identifier: MIT */
/*
 * pool.c - the supervisor's side of the pool: main's any-worker requests
 * (hub_main.c routes them one per worker) meet the slots here.
 *
 *  - A worker whose request timed out is killed when kill_on_timeout asks
 *    for it (the hub's timed_out op), its exit reported "timeout".
 *  - A worker that dies holding one of main's requests died of its input:
 *    it is restarted at once and counted apart (input_faults), outside the
 *    restart budget, so a batch with many crashing inputs never retires a
 *    slot; deaths outside a request and failed starts stay under the
 *    budget. Noted here at the reap; the restart is the slot table's
 *    (actions.c input_restart).
 *  - How the incarnation ended is handed to the hub while it closes the
 *    port, so each -EHOSTDOWN it gives carries it (pm_request_outcome):
 *    no later query can race a restart.
 */
#define _GNU_SOURCE
#include "pool.h"

#include "actions.h"
#include "channel/proto.h"
#include "core.h"
#include "hub/hub.h"

/* pm__hub_ops.timed_out: one of main's requests timed out in p's hands
 * and the options say to kill it. Cut off first (the hub reads nothing
 * more from it and routes nothing to it), then SIGKILL; the exit that
 * follows is reported with reason "timeout". Not a fence: the worker did
 * nothing wrong by the protocol, its input hung it. */
void pm__pool_timed_out(void *owner, unsigned p)
{
    pm_cluster *c = owner;
    pm__slot *s = &c->slots[p];
    if (!pm__slot_has_process(s) || !pm__hub_port_reading(c->hub, p))
        return;
    if (s->kill_reason == 0)
        s->kill_reason = PM_REASON_TIMEOUT;
    pm__cluster_disarm_hub(c, s);
    struct pm__ctl *ctl = s->channel.map;
    if (ctl != NULL) /* its next procmesh call returns -ESHUTDOWN, if it makes one */
        atomic_store_explicit(&ctl->stop, 1, memory_order_release);
    pm__cluster_dispatch(c, s, PM__EV_FAULT); /* the slot table's kill */
}

/* At the reap, before the port is closed: whether the incarnation died of
 * its input, and how it ended, for the answers the close gives. */
void pm__pool_on_death(pm_cluster *c, pm__slot *s, int reason, pm__ending *e)
{
    s->input_fault = reason != PM_REASON_STOP &&
                     (pm__hub_port_holds_main(c->hub, s->index) ||
                      s->kill_reason == PM_REASON_TIMEOUT);
    e->port = s->index;
    e->incarnation = s->incarnation;
    e->exit_code = s->last_exit_code;
    e->signal = s->last_signal;
    e->core_dumped = s->last_core;
    e->reason = reason;
    e->crash = s->crash != NULL && s->crash->incarnation == s->incarnation ? s->crash : NULL;
    pm__hub_set_ending(c->hub, e);
}

