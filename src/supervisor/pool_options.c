/* SPDX-License-Identifier: MIT */
/* pool_options.c - the pool's options (pm_options_set_requests_per_worker,
 * _request_queue_max, _kill_on_timeout): how main's any-worker requests
 * share the workers (hub_main.c applies them, pool.c the kill). */
#define _GNU_SOURCE
#include "options.h"

#include "base/defaults.h"

PM_EXTERN int pm_options_set_requests_per_worker(pm_options *o, int n)
{
    if (o == NULL || n < 1 || n > (int)PM__MAX_REQUESTS_PER_WORKER)
        return -EINVAL;
    o->requests_per_worker = n;
    return 0;
}

PM_EXTERN int pm_options_set_request_queue_max(pm_options *o, int n)
{
    if (o == NULL || n < 1 || (unsigned)n > PM__MAX_REQUEST_QUEUE)
        return -EINVAL;
    o->request_queue_max = n;
    return 0;
}

PM_EXTERN int pm_options_set_kill_on_timeout(pm_options *o, int on)
{
    if (o == NULL || (on != 0 && on != 1))
        return -EINVAL;
    o->kill_on_timeout = on;
    return 0;
}
