/* SPDX-License-Identifier: MIT */
/* peers.c - the supervisor's side of the peer links: the mesh started with its environment (loop, hub, configuration from the options) and what it reports up (events, diagnostics), and the public calls about the links (pm_cluster_peers, pm_cluster_peer_failures, pm_cluster_set_secrets) on the mesh's accessors. */
#include "peers.h"

#include "diag.h"

#include "peer/peer.h"
#include "hub/hub.h"
#include "mesh/mesh.h"
#include "options.h"

/* pm__mesh_ops.event: PM_EVENT_PEER_UP, _DOWN, _REFUSED to the application. */
static void mesh_event(void *owner, const pm_event *ev)
{
    pm_cluster *c = owner;
    if (c->o->on_event != NULL)
        PM__APP_CALLBACK(c->hub, c->o->on_event(c, ev, c->o->on_event_arg));
}

/* pm__mesh_ops.diag */
static void mesh_diag(void *owner, const char *topic, const char *msg)
{
    pm_cluster *c = owner;
    pm__diag(c->o, c, topic, "%s", msg);
}

static const pm__mesh_ops mesh_ops = {mesh_event, mesh_diag};

int pm__peers_start(pm_cluster *c, char *why, size_t whysize)
{
    const pm_options *o = c->o;
    pm__mesh_env env = {
        .loop = c->loop,
        .hub = c->hub,
        .cfg = {.listen = o->peer_listen,
                .peers = o->peers,
                .npeers = o->npeers,
                .peers_dns = o->peers_dns,
                .keys = o->keys,
                .node_key_file = o->node_key_file,
                .peer_keys_file = o->peer_keys_file,
                .timeout_ms = o->peer_timeout_ms,
                .rekey_records = o->rekey_records,
                .rekey_ms = o->rekey_ms},
        .tag_conn = PM__TAG_PEER,
        .tag_listen = PM__TAG_PEER_LISTEN,
        .ops = &mesh_ops,
        .owner = c,
    };
    return pm__mesh_init(&c->mesh, &env, why, whysize);
}

PM_EXTERN int pm_cluster_set_secrets(pm_cluster *c, const unsigned char *keys, unsigned n)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__mesh_set_secrets(c->mesh, keys, n);
}

PM_EXTERN int pm_cluster_peers(const pm_cluster *c, pm_peer_info *out, size_t cap)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (out == NULL && cap > 0)
        return -EINVAL;
    return (int)pm__mesh_peers(c->mesh, out, cap);
}

PM_EXTERN int pm_cluster_peer_failures(const pm_cluster *c, const char **names, uint64_t *counts,
                                       size_t cap)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if ((names == NULL || counts == NULL) && cap > 0)
        return -EINVAL;
    if (c->mesh == NULL)
        return 0; /* not in peer mode: no reasons to report */
    /* PM__PF_NONE is not a reason. */
    size_t n = 0;
    for (int why = PM__PF_NONE + 1; why < PM__PF_COUNT_; why++, n++) {
        if (n < cap) {
            names[n] = pm__peer_fail_name(why);
            counts[n] = pm__mesh_fails(c->mesh, why);
        }
    }
    return (int)n;
}
