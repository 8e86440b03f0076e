/* main_port.c - main's side of the hub: the supervisor's public messaging calls. */
#define _GNU_SOURCE
#include "cluster.h"

PM_EXTERN int pm_cluster_send(pm_cluster *c, const pm_address *to, const void *data, size_t len)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_main_send(&c->hub, to, PM__FT_MSG, 0, data, len);
}

PM_EXTERN int pm_cluster_reply(pm_cluster *c, const pm_message *request, const void *data,
                               size_t len)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (request == NULL || request->kind != PM_MSG_REQUEST)
        return -EINVAL;
    return pm__hub_main_send(&c->hub, &request->from, PM__FT_REPLY, request->request_id, data,
                             len);
}

PM_EXTERN int pm_cluster_broadcast(pm_cluster *c, const void *data, size_t len, int timeout_ms,
                                   void (*cb)(pm_cluster *, const pm_message *, size_t, void *),
                                   void *arg)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_broadcast(&c->hub, data, len, timeout_ms, cb, arg);
}
