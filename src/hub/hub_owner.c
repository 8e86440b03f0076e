/* SPDX-License-Identifier: MIT */
/*
 * hub_owner.c - the hub held by pointer: made, configured and freed for
 * its owner, and the few reads and writes of its state the owner makes,
 * so that struct pm__hub stays the hub's own (hub.h publishes no field).
 * None of these runs per frame: per event or per port visited in a turn.
 */
#include "hub_core.h"

#include <stdlib.h>

int pm__hub_new(pm__hub **out, unsigned nports, const pm__names *names, pm_cluster *app,
                const pm__hub_ops *ops, void *owner)
{
    *out = NULL;
    pm__hub *h = malloc(sizeof(*h));
    if (h == NULL)
        return -ENOMEM;
    int rc = pm__hub_init(h, nports, names, app, ops, owner);
    if (rc < 0) {
        free(h);
        return rc;
    }
    *out = h;
    return 0;
}

void pm__hub_delete(pm__hub *h)
{
    if (h == NULL)
        return;
    pm__hub_free(h);
    free(h);
}

void pm__hub_configure(pm__hub *h, const pm__hub_config *cfg)
{
    h->on_message = cfg->on_message;
    h->on_message_arg = cfg->on_message_arg;
    h->drain_timeout_ms = cfg->drain_timeout_ms;
    h->max_message = cfg->max_message;
    h->any_per_worker = cfg->requests_per_worker;
    h->queue_max = cfg->request_queue_max;
    h->kill_on_timeout = cfg->kill_on_timeout;
}

PM__READY_TEXT const pm__names *pm__hub_names(const pm__hub *h)
{
    return &h->names;
}

void pm__hub_set_ending(pm__hub *h, const pm__ending *e)
{
    h->ending = e;
}

int pm__hub_take_active(pm__hub *h)
{
    int active = h->active;
    h->active = 0;
    return active;
}

int pm__hub_requests_closed(const pm__hub *h)
{
    return h->main_request_closed;
}

void pm__hub_callback_enter(pm__hub *h)
{
    h->cb_depth++;
}

void pm__hub_callback_leave(pm__hub *h)
{
    h->cb_depth--;
}

int pm__hub_in_callback(const pm__hub *h)
{
    return h->cb_depth > 0;
}

int pm__hub_port_reading(const pm__hub *h, unsigned p)
{
    return h->ports[p].reading;
}

int pm__hub_port_busy(const pm__hub *h, unsigned p)
{
    return h->ports[p].busy;
}

int pm__hub_port_sock_full(const pm__hub *h, unsigned p)
{
    return h->ports[p].sock_full;
}

void pm__hub_port_retry(pm__hub *h, unsigned p)
{
    pm__hub_mark_busy(h, &h->ports[p]);
}

void pm__hub_stats(const pm__hub *h, struct pm_cluster_stats *out)
{
    for (unsigned i = 0; i < h->nports; i++) {
        const pm__port *p = &h->ports[i];
        out->frames_relayed += p->relayed;
        out->bytes_relayed += p->relayed_bytes;
        out->malformed_dropped += p->malformed;
        out->undeliverable += p->undeliverable;
    }
    out->late_replies = h->late_replies;
    out->ring_full_waits = h->ring_full_waits;
    out->notices_dropped = h->notices_dropped;
    out->replies_dropped = h->replies_dropped;
    out->not_draining = h->not_draining;
}
