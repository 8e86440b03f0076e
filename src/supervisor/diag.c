/* SPDX-License-Identifier: MIT */
/*
 * diag.c - the supervisor's words about what went wrong: its own
 * diagnostics (to the application's callback, else stderr) and the detail
 * of a first start that failed.
 */
#define _GNU_SOURCE
#include "diag.h"
#include "hub/hub.h"
#include "options.h"

#include <stdarg.h>
#include <stdio.h>
#include <string.h>

PM_EXTERN int pm_options_set_on_diagnostic(pm_options *o,
                                           void (*cb)(pm_cluster *, const char *, const char *,
                                                      void *),
                                           void *arg)
{
    if (o == NULL)
        return -EINVAL;
    o->on_diagnostic = cb;
    o->on_diagnostic_arg = arg;
    return 0;
}

void pm__diag(const pm_options *o, pm_cluster *c, const char *topic, const char *fmt, ...)
{
    char msg[512];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(msg, sizeof(msg), fmt, ap);
    va_end(ap);
    if (o->on_diagnostic == NULL) {
        fprintf(stderr, "procmesh: %s\n", msg);
        return;
    }
    if (c == NULL) {
        o->on_diagnostic(NULL, topic, msg, o->on_diagnostic_arg);
        return;
    }
    PM__APP_CALLBACK(c->hub, o->on_diagnostic(c, topic, msg, o->on_diagnostic_arg));
}

/* A mesh-mode program that never sent its HELLO most likely does not use
 * libprocmesh at all: the usual mistake with a plain program under the
 * default readiness, which otherwise reads as a slow start. */
static const char no_link_hint[] =
    "; it never opened its link to the supervisor (pm_node_join): a program "
    "without libprocmesh needs --ready exec or --ready notify";
static const char no_link_yet_hint[] =
    "; it had not opened its link to the supervisor (pm_node_join): a program "
    "without libprocmesh needs --ready exec or --ready notify, a slow one a "
    "longer --ready-timeout";

void pm__spawn_detail(const pm_cluster *c, const pm__slot *s, char *buf, size_t size)
{
    int hint = c->o->ready_mode == PM_READY_MESH && c->o->exec_path != NULL && !s->joined &&
               s->start_error == 0 && s->exec_errno == 0;
    if (s->start_error != 0)
        snprintf(buf, size, "the worker could not be started: %s", pm_strerror(s->start_error));
    else if (s->exec_errno != 0)
        snprintf(buf, size, "exec of the worker failed: %s", pm_strerror(-s->exec_errno));
    else if (s->kill_reason == PM_REASON_READY_TIMEOUT)
        snprintf(buf, size, "worker was not ready within %d ms", c->o->ready_timeout_ms);
    else if (s->kill_reason != 0)
        snprintf(buf, size, "worker was fenced (%s) before it was ready",
                 pm_reason_name(s->kill_reason));
    else if (s->last_signal != 0)
        snprintf(buf, size, "worker was killed by signal %d (%s) before it was ready",
                 s->last_signal, strsignal(s->last_signal));
    else if (s->last_exit_code >= 0)
        snprintf(buf, size, "worker exited with code %d before it was ready", s->last_exit_code);
    else
        snprintf(buf, size, "worker ended before it was ready");
    size_t len = strlen(buf);
    if (hint && len < size)
        snprintf(buf + len, size - len, "%s",
                 s->kill_reason == PM_REASON_READY_TIMEOUT ? no_link_yet_hint : no_link_hint);
}
