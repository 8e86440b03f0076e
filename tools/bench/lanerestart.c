/* SPDX-License-Identifier: MIT */
/* lanerestart.c - pm-bench lane's restart rows: a worker killed while its peer talks to it over a lane. */
/*
 * Issue 26 asks for the cost of a restart with lanes, measured. Two
 * fork-mode workers: slot 0 sends requests to slot 1 without pause (each
 * answered with slot 1's incarnation), so when main kills slot 1 there is
 * a lane in use with frames on it (lanes on) or the same traffic through
 * the hub (lanes off). Per round, main waits until slot 0's answers come
 * from the current incarnation (and, lanes on, over a lane to it: the
 * pair earned one after 64 frames), then SIGKILLs slot 1 and times
 *   - kill -> READY of the replacement (the supervisor's restart, which
 *     now also revokes the lane at slot 0: a store and a frame), and
 *   - kill -> slot 0's first answer from the replacement (what the peer
 *     sees: its request fails -EHOSTDOWN when the lane is revoked, the
 *     next ones are undeliverable until the replacement is ready; slot 0
 *     retries after 50 us).
 */
#include "bench.h"
#include "worker/node.h"
#include "worker/node_lanes.h"

#include <signal.h>
#include <stdatomic.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

struct lr_shared {
    _Atomic uint64_t answer_inc; /* the incarnation slot 0's last answer came from */
    _Atomic uint64_t answer_ns;  /* when the first answer from it came */
    _Atomic uint64_t lane_inc;   /* the incarnation at the other end of slot 0's lane, 0 none */
    _Atomic uint64_t answers;    /* answers from answer_inc */
    _Atomic int stop;
};
static struct lr_shared *lr;
static volatile uint64_t lr_ready_inc, lr_ready_ns;

static int lr_worker(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    if (pm_node_slot(n) == 1) {
        uint64_t inc = pm_node_self(n)->incarnation;
        for (;;) {
            int rc = pm_node_recv(n, &m, -1);
            if (rc == -ESHUTDOWN)
                return 0;
            if (rc == 0 && m.kind == PM_MSG_REQUEST)
                pm_node_reply(n, &m, &inc, sizeof(inc));
        }
    }
    pm_address to = *pm_node_self(n);
    to.port = (uint16_t)(to.port + 1);
    to.incarnation = 0;
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.dst = 1;
    while (!atomic_load(&lr->stop)) {
        uint64_t inc;
        if (pm_node_request(n, &to, "q", 1, 1000, &m) != 0 || m.len != sizeof(inc)) {
            usleep(50);
            continue;
        }
        memcpy(&inc, m.data, sizeof(inc));
        if (inc != atomic_load(&lr->answer_inc)) {
            atomic_store(&lr->answer_ns, pm__now_ns());
            atomic_store(&lr->answers, 0);
            atomic_store(&lr->answer_inc, inc);
        }
        atomic_fetch_add(&lr->answers, 1);
        pm__node_lane *e = pm__node_ls_to(n->ls, &h);
        atomic_store(&lr->lane_inc, e != NULL && e->marked ? e->lane->who.peer_inc : 0);
    }
    while (pm_node_recv(n, &m, -1) != -ESHUTDOWN)
        ;
    return 0;
}

static void lr_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_READY && e->slot == 1) {
        lr_ready_ns = pm__now_ns();
        lr_ready_inc = e->incarnation;
    }
}

/* Runs the cluster until cond holds (checked every 1 ms of its loop), at
 * most 10 s. 0, or -1 on a timeout or a failed turn. */
static int run_until(pm_cluster *c, int (*cond)(uint64_t), uint64_t want)
{
    uint64_t end = pm__now_ns() + 10000000000ull;
    while (!cond(want)) {
        if (pm_cluster_run(c, 1) < 0 || pm__now_ns() > end)
            return -1;
    }
    return 0;
}

static int lr_lanes;
static int settled(uint64_t inc)
{
    /* 100 answers from inc, over a lane to it when lanes are on. */
    return atomic_load(&lr->answer_inc) == inc && atomic_load(&lr->answers) >= 100 &&
           (!lr_lanes || atomic_load(&lr->lane_inc) == inc);
}
static int is_ready(uint64_t inc)
{
    return lr_ready_inc == inc;
}
static int answered(uint64_t inc)
{
    return atomic_load(&lr->answer_inc) == inc;
}

int lane_restart_run(int lanes, unsigned rounds, uint64_t *ready, uint64_t *answer)
{
    int rc = -1;
    pm_cluster *c = NULL;
    lr = mmap(NULL, sizeof(*lr), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_ANONYMOUS, -1, 0);
    if (lr == MAP_FAILED)
        return -1;
    memset(lr, 0, sizeof(*lr));
    lr_lanes = lanes;
    lr_ready_inc = 0;
    pm_options *o = bench_options(2, 0);
    pm_options_set_bootstrap(o, lr_worker, NULL);
    pm_options_set_on_event(o, lr_event, NULL);
    pm_options_set_direct_lanes(o, lanes);
    if (pm_cluster_spawn(o, &c) < 0)
        goto out;
    for (unsigned i = 0; i < rounds; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, 1, &si);
        if (run_until(c, settled, si.incarnation) < 0) {
            fprintf(stderr, "pm-bench: lane restart: round %u never settled\n", i);
            goto out;
        }
        uint64_t want = si.incarnation + 1, t0 = pm__now_ns();
        kill(si.pid, SIGKILL);
        if (run_until(c, is_ready, want) < 0 || run_until(c, answered, want) < 0) {
            fprintf(stderr, "pm-bench: lane restart: no answer from the replacement\n");
            goto out;
        }
        ready[i] = lr_ready_ns - t0;
        answer[i] = atomic_load(&lr->answer_ns) - t0;
    }
    rc = 0;
out:
    atomic_store(&lr->stop, 1);
    if (c != NULL)
        pm_cluster_terminate(c);
    pm_options_free(o);
    munmap(lr, sizeof(*lr));
    return rc;
}
