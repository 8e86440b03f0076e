/* SPDX-License-Identifier: MIT */
/* cluster_messaging.c - main's side of the hub: the supervisor's public messaging calls
 * (send, reply, broadcast, and requests to one worker: request, cancel, call). */
#define _GNU_SOURCE
#include "channel/frame.h"
#include "types.h"
#include "turn.h"
#include "hub/hub.h"
#include "os/loop.h"

PM_EXTERN int pm_cluster_send(pm_cluster *c, const pm_address *to, const void *data, size_t len)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_main_send(c->hub, to, PM__FT_MSG, 0, data, len);
}

PM_EXTERN int pm_cluster_reply(pm_cluster *c, const pm_message *request, const void *data,
                               size_t len)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (request == NULL || request->kind != PM_MSG_REQUEST)
        return -EINVAL;
    return pm__hub_main_send(c->hub, &request->from, PM__FT_REPLY, request->request_id, data,
                             len);
}

PM_EXTERN int pm_cluster_broadcast(pm_cluster *c, const void *data, size_t len, int timeout_ms,
                                   void (*cb)(pm_cluster *, const pm_message *, size_t, void *),
                                   void *arg)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_broadcast(c->hub, data, len, timeout_ms, cb, arg);
}

PM_EXTERN int pm_cluster_broadcast_mesh(pm_cluster *c, const void *data, size_t len,
                                        int timeout_ms,
                                        void (*cb)(pm_cluster *, const pm_message *, size_t,
                                                   void *),
                                        void *arg)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_broadcast_mesh(c->hub, data, len, timeout_ms, cb, arg);
}

PM_EXTERN int pm_cluster_request(pm_cluster *c, const pm_address *to, const void *data,
                                 size_t len, int timeout_ms,
                                 void (*cb)(pm_cluster *, const pm_message *reply, void *arg),
                                 void *arg)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    return pm__hub_request(c->hub, to, data, len, timeout_ms, cb, arg);
}

PM_EXTERN int pm_cluster_cancel(pm_cluster *c, uint64_t id)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (id == 0)
        return -EINVAL;
    return pm__hub_cancel(c->hub, id);
}

PM_EXTERN const pm_request_outcome *pm_cluster_request_outcome(pm_cluster *c,
                                                              const pm_message *reply)
{
    if (pm__cluster_check(c) < 0)
        return NULL;
    return pm__hub_outcome(c->hub, reply);
}

/* Where pm_cluster_call's request lands its answer. */
struct call_state {
    int done;
    int err;
    void *reply;
    size_t cap;
    size_t *reply_len;
    pm_request_outcome *outcome; /* NULL: not asked for */
};

static void call_done(pm_cluster *c, const pm_message *m, void *arg)
{
    struct call_state *st = arg;
    st->done = 1;
    st->err = m->error;
    if (st->outcome != NULL) {
        const pm_request_outcome *o = pm__hub_outcome(c->hub, m);
        if (o != NULL)
            *st->outcome = *o;
        else
            st->outcome->error = m->error; /* no memory for the rest */
    }
    if (m->error != 0)
        return;
    if (st->reply_len != NULL)
        *st->reply_len = m->len;
    if (m->len > st->cap) {
        st->err = -ENOBUFS; /* *reply_len says how much room it needs */
        return;
    }
    if (m->len > 0)
        memcpy(st->reply, m->data, m->len);
}

/*
 * The blocking form of pm_cluster_request: runs the cluster's loop (every
 * other event is dispatched as by pm_cluster_run) until the request's
 * callback has run. Refused inside a callback: the loop would run inside
 * the loop, under a turn that is half done (-EDEADLK).
 */
PM_EXTERN int pm_cluster_call_outcome(pm_cluster *c, const pm_address *to, const void *data,
                                      size_t len, int timeout_ms, void *reply, size_t cap,
                                      size_t *reply_len, pm_request_outcome *outcome)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if (reply == NULL && cap > 0)
        return -EINVAL;
    if (pm__hub_in_callback(c->hub))
        return -EDEADLK;
    struct call_state st = {0, 0, reply, cap, reply_len, outcome};
    if (reply_len != NULL)
        *reply_len = 0;
    if (outcome != NULL) {
        memset(outcome, 0, sizeof(*outcome));
        outcome->exit_code = -1;
        outcome->reason = pm_reason_name(0);
    }
    int id = pm__hub_request(c->hub, to, data, len, timeout_ms, call_done, &st);
    if (id < 0)
        return id;
    c->last_signal = 0;
    PM__ENTER(c);
    while (!st.done) {
        /* No timeout of our own: the request's deadline is on the hub's
         * timer, so a turn always ends by then. */
        rc = pm__cluster_turn(c, -1);
        if (st.done)
            break;
        if (rc == 0 && c->last_signal != 0)
            rc = -EINTR; /* as pm_cluster_run: pm_cluster_last_signal says which */
        if (rc < 0) {
            /* st is on this stack frame: the request must not outlive it. */
            pm__hub_cancel(c->hub, (uint64_t)id);
            st.err = rc;
            if (outcome != NULL)
                outcome->error = rc;
            break;
        }
    }
    pm__cluster_leave(c, pm__outer_cfa == NULL);
    PM__LEAVE(c);
    return st.err;
}

PM_EXTERN int pm_cluster_call(pm_cluster *c, const pm_address *to, const void *data, size_t len,
                              int timeout_ms, void *reply, size_t cap, size_t *reply_len)
{
    return pm_cluster_call_outcome(c, to, data, len, timeout_ms, reply, cap, reply_len, NULL);
}
