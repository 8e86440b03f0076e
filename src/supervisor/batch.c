/* SPDX-License-Identifier: MIT */
/*
 * batch.c - pm_cluster_map: N inputs through the pool, N outcomes in input
 * order. Each input is one any-worker request (hub_main.c gives a worker
 * one at a time by default, so a crash or a hang is blamed on exactly the
 * input that caused it); they are handed out as workers can take them, at
 * most workers x requests_per_worker at a time, so none waits in main long
 * enough for its deadline to run out while others are being parsed.
 */
#define _GNU_SOURCE
#include "types.h"
#include "turn.h"
#include "hub/hub.h"
#include "os/loop.h"
#include "options.h"

#include <stdlib.h>
#include <string.h>

struct map_state;

/* One input's request: its callback argument. */
struct map_ref {
    struct map_state *st;
    size_t i;
    int id;                 /* the request id while it is pending, else 0 */
};

struct map_state {
    pm_cluster *c;
    const pm_map_input *in;
    pm_map_result *res;
    struct map_ref *refs;
    size_t n, next, done, answered;
    size_t inflight, window;
    int timeout_ms;
    int interrupted;        /* a signal ended the batch: what is cut short is -EINTR */
};

static void map_done(pm_cluster *c, const pm_message *m, void *arg)
{
    struct map_ref *ref = arg;
    struct map_state *st = ref->st;
    pm_map_result *r = &st->res[ref->i];
    ref->id = 0;
    st->inflight--;
    st->done++;
    r->error = m->error;
    if (m->error == 0) {
        r->len = m->len;
        if (m->len > 0) {
            r->reply = malloc(m->len);
            if (r->reply == NULL) {
                r->error = -ENOMEM;
                r->len = 0;
                return;
            }
            memcpy(r->reply, m->data, m->len);
        }
        st->answered++;
        return;
    }
    if (st->interrupted)
        r->error = -EINTR;
    const pm_request_outcome *o = pm__hub_outcome(c->hub, m);
    r->outcome = malloc(sizeof(*r->outcome));
    if (r->outcome != NULL && o != NULL) {
        *r->outcome = *o;
        r->outcome->error = r->error;
    } else {
        free(r->outcome);
        r->outcome = NULL;
    }
}

/* Hands inputs to the pool while the window has room. An input the pool
 * refuses outright (-EMSGSIZE, -ENOMEM ...) gets that error as its
 * outcome; -EAGAIN (main's queue is full of others' requests) waits for
 * the next turn. */
static void map_submit(struct map_state *st)
{
    while (st->next < st->n && st->inflight < st->window) {
        size_t i = st->next;
        struct map_ref *ref = &st->refs[i];
        ref->st = st;
        ref->i = i;
        int id = pm__hub_request(st->c->hub, NULL, st->in[i].data, st->in[i].len,
                                 st->timeout_ms, map_done, ref);
        if (id == -EAGAIN && st->inflight > 0)
            return;
        st->next++;
        if (id < 0) {
            st->res[i].error = id;
            st->done++;
            continue;
        }
        /* The callback cannot have run yet: it runs only from the loop. */
        ref->id = id;
        st->inflight++;
    }
}

/* A signal ended the batch: the pending requests are cancelled (their
 * callbacks run now) and the inputs never handed out get -EINTR too. */
static void map_interrupt(struct map_state *st)
{
    st->interrupted = 1;
    for (size_t i = 0; i < st->next; i++)
        if (st->refs[i].id != 0)
            pm__hub_cancel(st->c->hub, (uint64_t)st->refs[i].id);
    for (; st->next < st->n; st->next++, st->done++)
        st->res[st->next].error = -EINTR;
}

static int map_check(const pm_cluster *c, const pm_map_input *inputs, size_t n, int timeout_ms,
                     const pm_map_result *results)
{
    int rc = pm__cluster_check(c);
    if (rc < 0)
        return rc;
    if ((n > 0 && (inputs == NULL || results == NULL)) || timeout_ms <= 0)
        return -EINVAL;
    for (size_t i = 0; i < n; i++)
        if (inputs[i].data == NULL && inputs[i].len > 0)
            return -EINVAL;
    /* Before the callback check: while terminate runs, the application's
     * code runs only in the callbacks terminate makes (a cancelled
     * request's, an event's), so -EDEADLK first would make the documented
     * -ESHUTDOWN unreachable (pm_cluster_map(3)). */
    if (pm__hub_requests_closed(c->hub))
        return -ESHUTDOWN;
    if (pm__hub_in_callback(c->hub))
        return -EDEADLK;
    return 0;
}

PM_EXTERN long pm_cluster_map(pm_cluster *c, const pm_map_input *inputs, size_t n,
                              int timeout_ms, pm_map_result *results)
{
    int rc = map_check(c, inputs, n, timeout_ms, results);
    if (rc < 0)
        return rc;
    struct map_state st;
    memset(&st, 0, sizeof(st));
    st.refs = calloc(n > 0 ? n : 1, sizeof(*st.refs));
    if (st.refs == NULL)
        return -ENOMEM;
    memset(results, 0, n * sizeof(*results));
    st.c = c;
    st.in = inputs;
    st.res = results;
    st.n = n;
    st.timeout_ms = timeout_ms;
    st.window = (size_t)c->nslots * (size_t)c->o->requests_per_worker;
    c->last_signal = 0;
    PM__ENTER(c);
    for (;;) {
        map_submit(&st);
        if (st.done == st.n)
            break;
        /* No timeout of our own: every pending request is on the hub's
         * timer, so a turn ends by its deadline at the latest. */
        rc = pm__cluster_turn(c, -1);
        if (rc == 0 && c->last_signal != 0)
            rc = -EINTR;
        if (rc < 0) {
            map_interrupt(&st);
            break;
        }
    }
    pm__cluster_leave(c, pm__outer_cfa == NULL);
    PM__LEAVE(c);
    free(st.refs);
    return (long)st.answered;
}

PM_EXTERN void pm_map_results_free(pm_map_result *results, size_t n)
{
    for (size_t i = 0; results != NULL && i < n; i++) {
        free(results[i].reply);
        free(results[i].outcome);
        memset(&results[i], 0, sizeof(results[i]));
    }
}
