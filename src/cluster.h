/* cluster.h - the supervisor's private structures (struct pm_cluster). */
#ifndef PM_CLUSTER_H
#define PM_CLUSTER_H

#include <signal.h>
#include <stdatomic.h>
#include <string.h>

#include "budget.h"
#include "link.h"
#include "loop.h"
#include "options.h"
#include "slot.h"
#include "frame.h"

/* A frame waiting for room in a destination's ring: header and payload,
 * ready to copy. */
typedef struct pm__qframe {
    struct pm__qframe *next;
    uint32_t len;
    unsigned char data[];
} pm__qframe;

/* A request relayed to a worker and not yet answered. */
typedef struct pm__inflight {
    uint32_t requester;     /* node: slot or PM__NODE_MAIN */
    uint64_t requester_inc;
    uint64_t request_id;
    uint64_t target_inc;
    int64_t deadline_ms;    /* 0 none */
} pm__inflight;

/* A broadcast from main waiting for its results. */
typedef struct pm__bcast {
    struct pm__bcast *next;
    uint64_t first_id;      /* request ids first_id .. first_id + n - 1 */
    size_t n;
    size_t pending;
    int64_t deadline_ms;
    pm_message *results;
    void **bufs;            /* private copies of the replies */
    void (*cb)(pm_cluster *, const pm_message *, size_t, void *);
    void *arg;
} pm__bcast;

/* An application fd watched by the loop (pm_cluster_watch_fd). */
typedef struct pm__watch {
    int fd;                 /* -1: free */
    uint32_t gen;           /* bumped on every (un)watch: stale completions are dropped */
    int armed;
    void (*cb)(pm_cluster *, int, void *);
    void *arg;
} pm__watch;

#define PM__MAX_WATCH 1024

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
    int pipe_armed;        /* a poll on exec_pipe is outstanding (exec readiness) */
    int notify_fd;         /* notify readiness: this incarnation's NOTIFY_SOCKET, or -1 */
    int notify_armed;
    int watchdog;          /* the worker sent WATCHDOG=1: the heartbeat applies */
    int reading;           /* the hub reads this incarnation's ring (not fenced) */
    int want_arm;          /* drained: arm its doorbell before the loop sleeps */
    int busy;              /* its inbound ring had more than one turn's work */
    int hello;             /* HELLO received and INIT sent */
    int ever_ready;        /* some incarnation of this slot has been ready */
    int replace;           /* stopping to be replaced (pm_cluster_restart_slot) */
    uint64_t deadline;     /* ms, CLOCK_MONOTONIC; 0 = none */
    int deadline_event;    /* PM__EV_* fired at deadline */
    int kill_reason;       /* why procmesh killed it (PM_REASON_*), or 0 */
    int exec_errno;        /* exec failed with this errno (0: it did not) */
    pm__budget budget;
    int last_exit_code;
    int last_signal;
    int last_core;
    uint64_t malformed;    /* frames dropped from this slot */
    /* Messaging (hub.c). */
    pm__qframe *q_head;    /* frames waiting for room in this slot's ring */
    pm__qframe *q_tail;
    uint32_t q_frames;
    size_t q_bytes;
    int blocked_on;        /* this slot is not read until that slot drains; -1 */
    int dirty;             /* its down ring has unpublished frames */
    pm__inflight *inflight; /* requests relayed to this slot, unanswered */
    uint32_t ninflight;
    uint32_t inflight_cap;
    uint64_t relayed;      /* frames relayed from this slot */
    uint64_t relayed_bytes;
    uint64_t undeliverable; /* notices sent to this slot */
    /* Liveness. */
    uint64_t last_beats;   /* the worker's progress counter at the last check */
    uint64_t progress_ms;  /* when it last moved (or the period restarted) */
    int kill_sent;         /* SIGKILL sent to this incarnation */
    unsigned fences;
    int last_fence_reason; /* PM_REASON_*, 0 none */
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
    pm__bcast *bcasts;      /* broadcasts waiting for results */
    uint64_t next_req;      /* main's request ids */
    unsigned char *scratch; /* private copy of a frame delivered to main */
    int active;             /* frames were read in the current turn */
    int ncpus;              /* CPUs this process may use */
    uint64_t next_check;    /* liveness check deadline (ms), 0 = off */
    uint64_t last_check_mono; /* CLOCK_MONOTONIC / CLOCK_BOOTTIME ms at the last check */
    uint64_t last_check_boot;
    struct pm_cluster_stats stats; /* the counters kept here rather than per slot */
    pm__watch *watches;     /* PM__MAX_WATCH entries, allocated on first use */
    uint64_t late_replies;  /* replies nobody waits for any more */
    uint64_t notices_dropped; /* undeliverable notices with no room (counted) */
    char **env;             /* environment template for exec mode */
    size_t nenv;
};

/* A frame header from main to slot d's current incarnation. */
static inline pm__frame_hdr pm__main_hdr(int type, const pm__slot *d)
{
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = (uint8_t)type;
    h.src = PM__NODE_MAIN;
    h.dst = d->index;
    h.dst_inc = d->incarnation;
    return h;
}

/* hub.c: the relay. */
void pm__hub_slot_reset(pm__slot *s);
/* Relays a validated, stamped frame from slot s. 0: consumed (delivered,
 * queued, or answered undeliverable); -EAGAIN: the destination is full,
 * leave the frame in s's ring and stop reading s (backpressure). */
int pm__hub_relay(pm_cluster *c, pm__slot *s, pm__frame_hdr *h, const void *payload);
/* Moves queued frames into d's ring; unblocks senders once d has room. */
void pm__hub_flush(pm_cluster *c, pm__slot *d);
/* Publishes every ring written this turn (one wake-up per ring at most). */
void pm__hub_publish(pm_cluster *c);
/* The incarnation of s is gone: answer requests in flight to it with
 * -EHOSTDOWN, forget its own, drop its queue, unblock its senders. */
void pm__hub_slot_gone(pm_cluster *c, pm__slot *s);
/* The stop request: control-block flag and a STOP frame. */
void pm__hub_stop_request(pm_cluster *c, pm__slot *s);
/* Broadcast deadlines: the earliest (0 none), and firing the due ones. */
uint64_t pm__hub_next_deadline(const pm_cluster *c);
void pm__hub_fire(pm_cluster *c, uint64_t now_ms);
void pm__hub_free(pm_cluster *c);
/* Fault helper implemented in cluster.c. */
void pm__cluster_fault(pm_cluster *c, pm__slot *s, int reason);
void pm__slot_address(const pm_cluster *c, const pm__slot *s, pm_address *a);

#endif /* PM_CLUSTER_H */
