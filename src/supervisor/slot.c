/* SPDX-License-Identifier: MIT */
/* slot.c - the slot lifecycle table; see slot.h. */
#include "base/internal.h"
#include "slot.h"

#define I PM__A_IGNORE

/* Rows: states. Columns: READY, EXITED, READY_TIMEOUT, BACKOFF_DONE, STOP,
 * STOP_TIMEOUT, FAULT. Terminal states ignore everything: a retired or
 * stopped slot never gets another worker, whatever arrives late. */
static const unsigned char table[PM__SLOT_STATES][PM__EV_COUNT] = {
    [0] = {I, I, I, I, I, I, I},
    [PM_SLOT_STARTING] = {PM__A_READY, PM__A_FAILED, PM__A_KILL, I, PM__A_STOP_KILL, I, PM__A_KILL},
    [PM_SLOT_READY] = {I, PM__A_ENDED, I, I, PM__A_STOP_REQUEST, I, PM__A_KILL},
    [PM_SLOT_BACKOFF] = {I, I, I, PM__A_SPAWN, PM__A_CANCEL, I, I},
    [PM_SLOT_RETIRED] = {I, I, I, I, I, I, I},
    [PM_SLOT_STOPPED] = {I, I, I, I, I, I, I},
    [PM_SLOT_STOPPING] = {I, PM__A_STOPPED, I, I, I, PM__A_KILL, PM__A_KILL},
};

#undef I

int pm__slot_action(int state, int event)
{
    if (state < 0 || state >= PM__SLOT_STATES || event < 0 || event >= PM__EV_COUNT)
        return PM__A_IGNORE;
    return table[state][event];
}

PM_EXTERN const char *pm_slot_state_name(int state)
{
    static const char *const names[] = {"none",    "starting", "ready",   "backoff",
                                        "retired", "stopped",  "stopping"};
    return state >= 0 && state < PM__SLOT_STATES ? names[state] : "none";
}
