/* SPDX-License-Identifier: MIT */
/*
 * slot.h - the slot lifecycle as an explicit state x event table (after
 * s6-supervise's actions[][]). Pure data: the supervisor (actions.c) feeds
 * events, looks up the action and runs it; the action sets the next state,
 * because some outcomes (restart or retire) depend on the budget.
 *
 * States are the public PM_SLOT_* values.
 */
#ifndef PM_SLOT_H
#define PM_SLOT_H

#include "procmesh.h"

enum pm__slot_event {
    PM__EV_READY = 0,      /* the worker said READY */
    PM__EV_EXITED,         /* its process was reaped */
    PM__EV_READY_TIMEOUT,  /* no READY within the ready timeout */
    PM__EV_BACKOFF_DONE,   /* the backoff delay is over */
    PM__EV_STOP,           /* terminate (or drain) asks the slot to stop */
    PM__EV_STOP_TIMEOUT,   /* the stop grace period is over */
    PM__EV_FAULT,          /* fenced: protocol violation, corrupt ring or hung (heartbeat) */
    PM__EV_COUNT
};

enum pm__slot_action {
    PM__A_IGNORE = 0,   /* nothing to do: a late or duplicate report */
    PM__A_READY,        /* STARTING -> READY */
    PM__A_FAILED,       /* the incarnation ended before READY: always a failure */
    PM__A_ENDED,        /* a READY incarnation ended: clean or failure, per policy */
    PM__A_KILL,         /* SIGKILL through the pidfd; wait for EXITED */
    PM__A_SPAWN,        /* start the next incarnation */
    PM__A_STOP_REQUEST, /* READY -> STOPPING: stop request, stop timer */
    PM__A_STOP_KILL,    /* STARTING -> STOPPING: killed at once, never registered */
    PM__A_CANCEL,       /* BACKOFF -> STOPPED: the restart will not happen */
    PM__A_STOPPED,      /* STOPPING -> STOPPED once reaped */
    PM__A_COUNT
};

#define PM__SLOT_STATES 7 /* PM_SLOT_* are 1..6; row 0 is unused */

/* The action for an event in a state; PM__A_IGNORE for anything unknown. */
int pm__slot_action(int state, int event);

#endif /* PM_SLOT_H */
