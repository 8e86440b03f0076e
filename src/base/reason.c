/* SPDX-License-Identifier: MIT */
/* reason.c - the one table of event and fence reason strings (enum pm_reason). */
#include "internal.h"

static const char *const names[PM_REASON__COUNT] = {
    [PM_REASON_NONE] = "",
    [PM_REASON_SPAWN] = "spawn",
    [PM_REASON_READY] = "ready",
    [PM_REASON_EXIT] = "exit",
    [PM_REASON_SIGNAL] = "signal",
    [PM_REASON_EXEC] = "exec",
    [PM_REASON_READY_TIMEOUT] = "ready-timeout",
    [PM_REASON_HEARTBEAT] = "heartbeat",
    [PM_REASON_CORRUPT_RING] = "corrupt-ring",
    [PM_REASON_PROTOCOL] = "protocol",
    [PM_REASON_STOP] = "stop",
    [PM_REASON_BACKOFF] = "backoff",
    [PM_REASON_REPLACE] = "replace",
    [PM_REASON_BUDGET] = "budget",
    [PM_REASON_POLICY] = "policy",
    [PM_REASON_SPAWN_ABORTED] = "spawn-aborted",
    [PM_REASON_NOTIFY] = "notify",
    [PM_REASON_STALL] = "stall",
    [PM_REASON_SUSPEND] = "suspend",
    [PM_REASON_VERSION] = "version",
    [PM_REASON_NAME_TAKEN] = "name-taken",
    [PM_REASON_NOT_DRAINING] = "not-draining",
    [PM_REASON_STOP_KILL] = "stop-kill",
    [PM_REASON_TIMEOUT] = "timeout",
    [PM_REASON_INPUT] = "input",
};

PM_EXTERN const char *pm_reason_name(int code)
{
    if (code < 0 || code >= PM_REASON__COUNT || names[code] == NULL)
        return "unknown";
    return names[code];
}
