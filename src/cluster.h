/* cluster.h - the supervisor's private structures (struct pm_cluster). */
#ifndef PM_CLUSTER_H
#define PM_CLUSTER_H

#include <signal.h>
#include <stdatomic.h>

#include "budget.h"
#include "link.h"
#include "loop.h"
#include "options.h"
#include "slot.h"

typedef struct pm__slot {
    unsigned index;
    int state;             /* PM_SLOT_* */
    uint64_t incarnation;  /* current or last; only grows */
    pid_t pid;             /* 0 when no process */
    int pidfd;             /* -1 when none */
    int exec_pipe;         /* exec mode: read end of the error pipe, or -1 */
    pm__link link;         /* hub side; link.memfd -1 when none */
    int pid_armed;         /* a poll on pidfd is outstanding */
    int hub_armed;         /* a poll on link.hub_efd is outstanding */
    int reading;           /* the hub reads this incarnation's ring (not fenced) */
    int busy;              /* its inbound ring had more than one turn's work */
    int hello;             /* HELLO received and INIT sent */
    int ever_ready;        /* some incarnation of this slot has been ready */
    uint64_t deadline;     /* ms, CLOCK_MONOTONIC; 0 = none */
    int deadline_event;    /* PM__EV_* fired at deadline */
    const char *kill_reason; /* why procmesh killed it, or NULL */
    int exec_errno;        /* exec failed with this errno (0: it did not) */
    pm__budget budget;
    int last_exit_code;
    int last_signal;
    int last_core;
    uint64_t malformed;    /* frames dropped from this slot */
} pm__slot;

struct pm_cluster {
    pm_options *o;
    unsigned nslots;
    pm__slot *slots;
    pm__loop loop;
    int sigfd;
    int timerfd;
    int wakefd;
    sigset_t old_mask;
    int mask_changed;
    pid_t self;
    uint64_t timer_at;      /* deadline the timerfd is set to, 0 none */
    atomic_int stop;
    int last_signal;
    int spawning;           /* inside pm_cluster_spawn */
    int spawn_error;
    int terminating;
    int any_killed;
    int poll_children;      /* no pidfd and no signalfd: scan on a short timer */
    uint64_t rng;
    pm__budget_cfg bcfg;
    char *exec_path;        /* resolved against PATH */
    char **env;             /* environment template for exec mode */
    size_t nenv;
};

#endif /* PM_CLUSTER_H */
