/* SPDX-License-Identifier: MIT */
/* check_api.c - library behaviour the header and doc/design.md promise, each asserted with real processes and signals. */
/*
 * pm_cluster_restart_slot, watch_fd, hub_spin_us, handle_signals = 0,
 * SIGHUP/SIGTERM, pm_cluster_stop from everywhere, core_dumped and
 * kill_pending, handshake and protocol faults from a raw worker, the
 * in-flight cap and main's backpressure, pm_node_request keeping messages,
 * pm_node_send after the stop request, pm_node_join's errors, every
 * default the header states.
 */
#include "helpers.h"
#include "failalloc.h" /* malloc, calloc, realloc: this program's, failing on demand */
#include "failmmap.h"  /* mmap: this program's, refusing a length on demand */

#include <dirent.h>
#include <fcntl.h>
#include <poll.h>
#include <pthread.h>
#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <sys/eventfd.h>
#include <sys/mman.h>
#include <sys/time.h>
#include <sys/wait.h>

#include "internals.h"
#include "channel/proto.h"
#include "supervise.h"
#include "lonehub.h"

#ifndef PM_RAW_WORKER
#error "PM_RAW_WORKER must name the pm-raw-worker binary"
#endif

/* ---------------------------------------------------------------- events, messages */

/* Highest number of worker processes alive at once, per slot: a STARTED
 * while the slot's previous pid still exists would make it 2. */
static int overlap;
static pid_t last_pid[8];

static void record(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_STARTED && e->slot < ARRAY_LEN(last_pid)) {
        pid_t prev = last_pid[e->slot];
        if (prev > 0 && kill(prev, 0) == 0)
            overlap = 1; /* the predecessor is still there (running or a zombie) */
        last_pid[e->slot] = e->pid;
    }
    record_event(e);
}

/* Text messages main received ("#..."), in order. */
static char texts[64][128];
static int ntexts;

/* The arg every message to main came with: pm_options_set_on_message's. */
static void *on_message_arg;

static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    on_message_arg = arg;
    if (m->kind == PM_MSG_REQUEST && m->len == 3 && memcmp(m->data, "ask", 3) == 0) {
        /* Three plain messages before the reply: the requester must keep
         * them for pm_node_recv. */
        pm_cluster_send(c, &m->from, "m1", 2);
        pm_cluster_send(c, &m->from, "m2", 2);
        pm_cluster_send(c, &m->from, "m3", 2);
        pm_cluster_reply(c, m, "r", 1);
        return;
    }
    if (ntexts < (int)ARRAY_LEN(texts))
        snprintf(texts[ntexts++], sizeof(texts[0]), "%.*s", (int)m->len, (const char *)m->data);
}

static int got_text(const char *t)
{
    for (int i = 0; i < ntexts; i++)
        if (strcmp(texts[i], t) == 0)
            return 1;
    return 0;
}

static void quiet_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned r, void *arg)
{
    (void)c, (void)slot, (void)a, (void)r, (void)arg;
}

/* ---------------------------------------------------------------- fork-mode workers */

enum role {
    W_READY = 0,     /* ready, then waits; SIGTERM ends it */
    W_RECV,          /* ready, receives until -ESHUTDOWN, exits 0 */
    W_ASK_MAIN,      /* requests "ask" of main, then receives what came meanwhile */
    W_ASK_MAIN_NOMEM, /* W_ASK_MAIN with the first allocation of the request failing */
    W_SEND_AFTER_STOP, /* ignores SIGTERM; after recv says -ESHUTDOWN, pm_node_send: exits 7
                          when that says -ESHUTDOWN too, 8 otherwise */
    W_REQUESTS,      /* 4097 raw requests to slot 1, which never answers */
    W_NEVER_READY,   /* joins, never ready */
    W_WHO,           /* ready, tells main its slot, incarnation and init data; from
                        incarnation 2 on then sends a HELLO, as an exec worker would */
    W_STUBBORN,      /* ignores SIGTERM and the stop request: ready, then pause() */
    W_HOLDER,        /* ignores SIGTERM; keeps the first request it receives (exit 9 if it
                        has no deadline), answers it "late-ok" once recv says -ESHUTDOWN:
                        exits 7 when that reply says 0, 8 otherwise */
    W_ASK_SLOT0,     /* on main's "go", requests slot 0 (10 s) and tells main the outcome */
    W_MAIN_GONE,     /* a plain message to main, then a request (10 s): exits 7 when the
                        request ends -ENOENT, 8 otherwise */
    W_ECHO,          /* answers every request "ok" until asked to stop */
    W_TO_NOWHERE,    /* on main's "go", a raw request to node `nowhere`; tells main
                        "#nowhere error=E" with the undeliverable notice's error */
    W_DEADLINES,     /* on main's "go", three raw requests to slot 1: id 1 without a deadline,
                        id 2 due in 60 s, id 3 in 600 s; tells main "#deadlines D2 D3" */
    W_REVERSE,       /* takes two requests, then answers the later first, each
                        "for-P#I" (P, I: its requester's address's port, the slot + 1,
                        and incarnation); tells
                        main "#reversed ID1 ID2" (their request ids) */
    W_AFTER_STOP,    /* pm_node_ready twice (the second must say 0), ignores SIGTERM; once
                        recv says -ESHUTDOWN: 7 when beat, recv, try_send, request and
                        send all say -ESHUTDOWN too, else 20 + a bit per call that did not */
};

static int role[8];
static uint32_t nowhere; /* W_TO_NOWHERE's destination, set before the spawn */

static pm_address main_addr(void)
{
    pm_address a;
    ck_assert_int_eq(pm_address_parse("procmesh@main:0", &a), 0);
    return a;
}

static void tell_main(pm_node *n, const char *fmt, ...)
{
    char buf[128];
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(buf, sizeof(buf), fmt, ap);
    va_end(ap);
    pm_address m = main_addr();
    pm_node_send(n, &m, buf, strlen(buf));
}

static int worker(pm_node *n, void *arg)
{
    (void)arg;
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    int r = role[pm_node_slot(n)];
    if (r == W_NEVER_READY)
        for (;;)
            pause();
    if (r == W_SEND_AFTER_STOP || r == W_AFTER_STOP || r == W_STUBBORN || r == W_HOLDER)
        signal(SIGTERM, SIG_IGN);
    if (pm_node_ready(n) < 0)
        return 50;
    if (r == W_AFTER_STOP && pm_node_ready(n) != 0)
        return 53;
    if (r == W_AFTER_STOP) { /* no init data set: NULL and 0 */
        const void *d = &r;
        size_t l = 99;
        if (pm_node_init_data(n, &d, &l) != 0 || d != NULL || l != 0)
            return 54;
    }
    if (r == W_AFTER_STOP)
        tell_main(n, "#ready twice"); /* behind anything the second call sent */
    pm_message m;
    switch (r) {
    case W_RECV:
        while (pm_node_recv(n, &m, -1) == 0)
            ;
        return 0;
    case W_ASK_MAIN:
    case W_ASK_MAIN_NOMEM: {
        pm_address to = main_addr();
        pm_message rep;
        /* NOMEM: the request's first allocation, its store's for m1. */
        if (role[pm_node_slot(n)] == W_ASK_MAIN_NOMEM)
            pm_failalloc_arm(1);
        int rc = pm_node_request(n, &to, "ask", 3, 10000, &rep);
        int fired = pm_failalloc_disarm();
        char got[16] = "";
        if (rc == 0)
            snprintf(got, sizeof(got), "%.*s", (int)rep.len, (const char *)rep.data);
        char kept[3][8] = {"", "", ""};
        /* NOMEM: -ENOBUFS came at m1, before main may have written m2 and
         * m3 (its reply, behind them, is then dropped as late). */
        int wait_ms = role[pm_node_slot(n)] == W_ASK_MAIN_NOMEM ? 10000 : 0;
        for (int i = 0; i < 3; i++)
            if (pm_node_recv(n, &m, wait_ms) == 0)
                snprintf(kept[i], sizeof(kept[i]), "%.*s", (int)m.len, (const char *)m.data);
        if (role[pm_node_slot(n)] == W_ASK_MAIN_NOMEM)
            tell_main(n, "#ask rc=%d kept=%s,%s,%s fired=%d", rc, kept[0], kept[1], kept[2], fired);
        else
            tell_main(n, "#ask rc=%d reply=%s kept=%s,%s,%s", rc, got, kept[0], kept[1], kept[2]);
        break;
    }
    case W_SEND_AFTER_STOP: {
        int rc;
        while ((rc = pm_node_recv(n, &m, -1)) == 0)
            ;
        if (rc != -ESHUTDOWN)
            return 9;
        pm_address to = main_addr();
        return pm_node_send(n, &to, "x", 1) == -ESHUTDOWN ? 7 : 8;
    }
    case W_HOLDER: {
        int rc;
        pm_message req;
        while ((rc = pm_node_recv(n, &m, -1)) == 0 && m.kind != PM_MSG_REQUEST)
            ;
        if (rc != 0)
            return 10;
        req = m; /* pm_node_reply reads its sender and id, not its data */
        if (req.deadline_ms <= 0)
            return 9;
        while ((rc = pm_node_recv(n, &m, -1)) == 0)
            ;
        if (rc != -ESHUTDOWN)
            return 11;
        return pm_node_reply(n, &req, "late-ok", 7) == 0 ? 7 : 8;
    }
    case W_ASK_SLOT0: {
        if (pm_node_recv(n, &m, 30000) != 0)
            return 51;
        pm_address to = pm_test_slot_addr(0, 0);
        pm_message rep;
        int rc = pm_node_request(n, &to, "q", 1, 10000, &rep);
        tell_main(n, "#asked rc=%d reply=%.*s", rc, rc == 0 ? (int)rep.len : 0,
                  rc == 0 ? (const char *)rep.data : "");
        break;
    }
    case W_MAIN_GONE: {
        pm_address to = main_addr();
        pm_message rep;
        if (pm_node_send(n, &to, "x", 1) != 0)
            return 9;
        return pm_node_request(n, &to, "y", 1, 10000, &rep) == -ENOENT ? 7 : 8;
    }
    case W_TO_NOWHERE: {
        if (pm_node_recv(n, &m, 30000) != 0)
            return 51;
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_REQUEST;
        h.dst = nowhere;
        h.request_id = 77;
        while (pm__frame_send(pm_test_node_tx(n), &h, "q", 1) == -EAGAIN)
            pm_node_beat(n);
        pm__ring *rx = pm_test_node_rx(n);
        for (uint64_t end = ms() + 30000; ms() < end;) {
            const void *payload;
            int rc = pm__frame_recv(rx, PM__CHANNEL_MAX_FRAME, &h, &payload);
            if (rc == 0) {
                pm_node_beat(n);
                pm__ring_wait(rx, 100);
                continue;
            }
            if (rc < 0)
                break;
            pm__ring_consume(rx);
            pm__ring_release(rx);
            if (h.type == PM__FT_UNDELIVERABLE && h.request_id == 77) {
                tell_main(n, "#nowhere error=%d", h.error);
                break;
            }
        }
        while (pm_node_recv(n, &m, -1) == 0)
            ;
        return 0;
    }
    case W_DEADLINES: {
        if (pm_node_recv(n, &m, 30000) != 0)
            return 51;
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_REQUEST;
        h.dst = 1;
        int64_t now = (int64_t)pm__now_ms(), due[4] = {0, 0, now + 60000, now + 600000};
        for (uint64_t id = 1; id <= 3; id++) {
            h.request_id = id;
            h.deadline_ms = due[id];
            while (pm__frame_send(pm_test_node_tx(n), &h, "q", 1) == -EAGAIN)
                pm_node_beat(n);
        }
        tell_main(n, "#deadlines %lld %lld", (long long)due[2], (long long)due[3]);
        while (pm_node_recv(n, &m, -1) == 0)
            ;
        return 0;
    }
    case W_REVERSE: {
        pm_message req[2];
        for (int got = 0; got < 2;) {
            if (pm_node_recv(n, &m, 30000) != 0)
                return 51;
            if (m.kind == PM_MSG_REQUEST)
                req[got++] = m; /* pm_node_reply reads its sender and id, not its data */
        }
        for (int i = 1; i >= 0; i--) {
            char a[32];
            snprintf(a, sizeof(a), "for-%u#%llu", (unsigned)req[i].from.port,
                     (unsigned long long)req[i].from.incarnation);
            if (pm_node_reply(n, &req[i], a, strlen(a)) != 0)
                return 52;
        }
        tell_main(n, "#reversed %llu %llu", (unsigned long long)req[0].request_id,
                  (unsigned long long)req[1].request_id);
        while (pm_node_recv(n, &m, -1) == 0)
            ;
        return 0;
    }
    case W_ECHO:
        while (pm_node_recv(n, &m, -1) == 0)
            if (m.kind == PM_MSG_REQUEST)
                pm_node_reply(n, &m, "ok", 2);
        return 0;
    case W_AFTER_STOP: {
        int rc;
        while ((rc = pm_node_recv(n, &m, -1)) == 0)
            ;
        if (rc != -ESHUTDOWN)
            return 9;
        pm_address to = main_addr();
        pm_message rep;
        int bad = 0;
        bad |= (pm_node_beat(n) != -ESHUTDOWN) << 0;
        bad |= (pm_node_recv(n, &m, 0) != -ESHUTDOWN) << 1;
        bad |= (pm_node_try_send(n, &to, "x", 1) != -ESHUTDOWN) << 2;
        bad |= (pm_node_request(n, &to, "x", 1, 1000, &rep) != -ESHUTDOWN) << 3;
        bad |= (pm_node_send(n, &to, "x", 1) != -ESHUTDOWN) << 4;
        return bad == 0 ? 7 : 20 + bad;
    }
    case W_REQUESTS: {
        /* Raw request frames (pm_node_request would wait for each reply):
         * the hub remembers each as in flight to slot 1, which never reads
         * or answers. The 4097th finds the table full. First main's "go":
         * slot 1 may not be ready yet while pm_cluster_spawn runs. */
        if (pm_node_recv(n, &m, 30000) != 0)
            return 51;
        pm__frame_hdr h;
        memset(&h, 0, sizeof(h));
        h.type = PM__FT_REQUEST;
        h.dst = 1;
        for (uint64_t id = 1; id <= 4097; id++) {
            h.request_id = id;
            while (pm__frame_send(pm_test_node_tx(n), &h, "q", 1) == -EAGAIN)
                pm_node_beat(n);
        }
        /* Read raw too: pm_node_recv drops a notice about a request it did
         * not make itself (a late answer). */
        pm__ring *rx = pm_test_node_rx(n);
        for (uint64_t end = ms() + 30000; ms() < end;) {
            const void *payload;
            int rc = pm__frame_recv(rx, PM__CHANNEL_MAX_FRAME, &h, &payload);
            if (rc == 0) {
                pm_node_beat(n);
                pm__ring_wait(rx, 100);
                continue;
            }
            if (rc < 0)
                break;
            pm__ring_consume(rx);
            pm__ring_release(rx);
            if (h.type == PM__FT_UNDELIVERABLE) {
                tell_main(n, "#undeliverable id=%llu error=%d", (unsigned long long)h.request_id,
                          h.error);
                break;
            }
        }
        break;
    }
    case W_WHO: {
        const void *data;
        size_t len;
        if (pm_node_init_data(n, &data, &len) < 0)
            return 52;
        uint64_t inc = pm_node_self(n)->incarnation;
        tell_main(n, "#who slot=%u inc=%llu init=%.*s", pm_node_slot(n), (unsigned long long)inc,
                  (int)len, (const char *)data);
        if (inc >= 2) {
            pm__frame_hdr h;
            memset(&h, 0, sizeof(h));
            h.type = PM__FT_HELLO;
            h.dst = PM__NODE_MAIN;
            unsigned char ver[4] = {PM__PROTO_VERSION, 0, 0, 0};
            while (pm__frame_send(pm_test_node_tx(n), &h, ver, sizeof(ver)) == -EAGAIN)
                pm_node_beat(n);
        }
        break;
    }
    default:
        break;
    }
    for (;;)
        pause();
}

static pm_options *opts_base(int workers)
{
    nev = 0;
    ntexts = 0;
    overlap = 0;
    memset(last_pid, 0, sizeof(last_pid));
    pm_options *o = pm_options_new();
    ck_assert_ptr_nonnull(o);
    ck_assert_int_eq(pm_options_set_workers(o, workers), 0);
    pm_options_set_on_event(o, record, NULL);
    pm_options_set_on_message(o, on_message, texts); /* its arg: checked, on_message_arg */
    pm_options_set_on_permanently_down(o, quiet_down, NULL);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 50);
    pm_options_set_stop_timeout_ms(o, 3000);
    pm_options_set_ring_size(o, 1 << 18);
    return o;
}

/* Fork mode: the workers run worker() with their slot's role. */
static pm_options *role_opts(int workers)
{
    pm_options *o = opts_base(workers);
    pm_options_set_bootstrap(o, worker, NULL);
    return o;
}

static pm_slot_info info(pm_cluster *c, unsigned slot)
{
    pm_slot_info si;
    ck_assert_int_eq(pm_cluster_slot_info(c, slot, &si), 0);
    return si;
}

/* ---------------------------------------------------------------- defaults */

START_TEST(test_header_defaults)
{
    /* The values include/procmesh.h states, spelled here again on purpose:
     * src/base/defaults.h could drift from the header's comments. */
    pm_options *o = pm_options_new();
    const struct pm_options *v = pm_test_options(o);
    ck_assert_int_eq(v->workers, 0); /* auto */
    ck_assert_str_eq(v->system_name, "procmesh");
    ck_assert_str_eq(v->hostname, "worker");
    ck_assert_int_eq(v->base_port, 1);
    ck_assert_int_eq(v->restart_policy, PM_RESTART_ON_FAILURE);
    ck_assert_int_eq(v->ready_timeout_ms, 10000);
    ck_assert_int_eq(v->min_backoff_ms, 200);
    ck_assert_int_eq(v->max_backoff_ms, 10000);
    ck_assert_double_eq(v->random_factor, 0.2);
    ck_assert_int_eq(v->max_restarts, 10);
    ck_assert_int_eq(v->restart_window_ms, 60000);
    ck_assert_int_eq(v->stop_timeout_ms, 5000);
    ck_assert_int_eq(v->handle_signals, 0); /* opt-in for the library */
    ck_assert_int_eq(v->requests_per_worker, 1);
    ck_assert_int_eq(v->request_queue_max, 4096);
    ck_assert_int_eq(v->kill_on_timeout, 0);
    ck_assert_uint_eq(v->hub_spin_us, 0);
    ck_assert_int_eq(v->heartbeat_timeout_ms, 10000);
    ck_assert_uint_eq(v->ring_size, 1u << 20);
    ck_assert_int_eq(v->ready_mode, PM_READY_MESH);
    ck_assert_int_eq(v->reap_orphans, 0);
    ck_assert_ptr_null(v->init_data);
    ck_assert_uint_eq(v->init_len, 0);
    ck_assert_ptr_null(v->exec_path);
    ck_assert_ptr_null(v->bootstrap);
    ck_assert_uint_eq(v->npass_fds, 0);
    ck_assert_ptr_null(v->on_down);
    ck_assert_ptr_null(v->on_event);
    ck_assert_ptr_null(v->on_message);
    /* Neither a bootstrap nor a program: nothing to spawn, and said so. */
    char why[256] = "";
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_msg(why[0] != '\0', "validate gave no reason");
    pm_options_free(o);
}
END_TEST

/* Slot 0 (W_ASK_MAIN) asks main; the three plain messages main sent
 * before its reply were kept, in order, for pm_node_recv. Frees o. */
static void ask_keeps_messages(pm_options *o)
{
    role[0] = W_ASK_MAIN;
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, ntexts >= 1, 10000);
    ck_assert_str_eq(texts[0], "#ask rc=0 reply=r kept=m1,m2,m3");
    pm_test_finish(c, o);
}

START_TEST(test_hub_spin_us)
{
    pm_options *o = role_opts(1);
    /* Range 0..1000000; a refused value leaves the object unchanged. */
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, 300), 0);
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, -1), -EINVAL);
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, 1000001), -EINVAL);
    ck_assert_uint_eq(pm_test_options(o)->hub_spin_us, 300);
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, 1000000), 0);
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, 0), 0);
    ck_assert_int_eq(pm_options_set_hub_spin_us(o, 300), 0);
    /* With spinning on, requests and replies still flow, with nothing lost
     * (the spin only delays the hub's sleep). */
    ask_keeps_messages(o);
}
END_TEST

/* ---------------------------------------------------------------- the hub's spin */

/*
 * pm__hub_spin (hub.h), driven on a hub of its own: before the loop
 * sleeps it spins up to its learnt budget (at most spin_us) for a frame on
 * a drained ring or for the owner's readiness, here spin_ready, which
 * counts the calls. What each case asserts is the spin's outcome, never
 * how long it took: a spin that the scheduler interrupts (it then stops
 * and forgets its budget) is retried, as check_ring's spin cases do.
 */
struct spin_probe {
    int calls;    /* times the spin asked */
    int ready_at; /* the call that answers ready (0: never) */
    int nap_us;   /* the first call sleeps this long: the spin loses its CPU */
};

static int spin_ready(void *arg)
{
    struct spin_probe *s = arg;
    s->calls++;
    if (s->nap_us > 0 && s->calls == 1)
        usleep((useconds_t)s->nap_us);
    return s->ready_at > 0 && s->calls >= s->ready_at;
}


/* The wipe-on-fork mappings of this process ("wf" in its smaps): the
 * hub's scratch buffer is one. */
static unsigned wipe_on_fork_maps(void)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    unsigned n = 0;
    while (fgets(line, sizeof(line), f) != NULL)
        if (strncmp(line, "VmFlags:", 8) == 0 && strstr(line, " wf") != NULL)
            n++;
    fclose(f);
    return n;
}

/* pm__hub_free frees everything a hub holds, its scratch mapping
 * included, and is safe to call again (every pointer it frees is reset):
 * an embedded hub with ports, a queued frame and a request in flight. */
/* 1 when addr lies in a mapping of this process marked wipe-on-fork.
 * (By address, not by count: the kernel merges adjacent mappings of the
 * same kind into one.) */
static int wipe_on_fork_at(const void *addr)
{
    FILE *f = fopen("/proc/self/smaps", "r");
    ck_assert_ptr_nonnull(f);
    char line[512];
    uintptr_t a = (uintptr_t)addr, lo = 0, hi = 0;
    int found = 0;
    while (fgets(line, sizeof(line), f) != NULL) {
        unsigned long s0, e0;
        if (sscanf(line, "%lx-%lx ", &s0, &e0) == 2) {
            lo = s0;
            hi = e0;
        } else if (strncmp(line, "VmFlags:", 8) == 0 && a >= lo && a < hi) {
            found = strstr(line, " wf") != NULL;
        }
    }
    fclose(f);
    return found;
}

START_TEST(test_hub_free_twice)
{
    static const pm__names names = {"t", "a", 10, 1, NULL};
    pm__hub h;
    ck_assert_int_eq(pm__hub_init(&h, 3, &names, NULL, &lone_ops, NULL), 0);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(&h, hub_end, worker);
    const void *scratch = h.scratch;
    ck_assert_int_eq(wipe_on_fork_at(scratch), h.scratch_mapped);
    (void)lone_ring_full(&h, 1);
    pm__frame_hdr f = lone_msg_to(1);
    ck_assert_int_eq(pm__hub_push(&h, &h.ports[1], &f, "q", 1, PM__NODE_MAIN), 0);
    ck_assert_int_eq(pm__hub_add_inflight(&h, &h.ports[2], 1, 1, 5, 0), 0);
    pm__hub_free(&h);
    ck_assert_ptr_null(h.ports);
    ck_assert_ptr_null(h.scratch);
    ck_assert_int_eq(wipe_on_fork_at(scratch), 0); /* unmapped */
    pm__hub_free(&h);
}
END_TEST

/* A hub made while memory runs out: its scratch buffer's mapping refused,
 * then every allocation of pm__hub_new failing in turn (k = 1, 2, ...
 * until one makes fewer): each fails -ENOMEM and hands out nothing, nor
 * leaves a mapping behind; the first that meets no failure a hub. */
START_TEST(test_hub_new_out_of_memory)
{
    static const pm__names names = {"t", "a", 10, 1, NULL};
    /* Its scratch buffer refused: -ENOMEM, nothing handed out. */
    pm__hub *h = (pm__hub *)&names; /* anything but NULL */
    pm_test_mmap_fail_len = PM_MAX_PAYLOAD;
    int rc = pm__hub_new(&h, 4, &names, NULL, &lone_ops, NULL);
    pm_test_mmap_fail_len = 0;
    ck_assert_int_eq(rc, -ENOMEM);
    ck_assert_ptr_null(h);
    if (!PM_FAILALLOC) {
        fprintf(stderr, "note: test_hub_new_out_of_memory's allocations fail in the build "
                        "without a sanitizer only (the sanitizer's malloc is its own)\n");
        return;
    }
    /* Each allocation failing in turn: -ENOMEM, nothing handed out or left
     * mapped (the scratch buffer given back). */
    unsigned maps0 = wipe_on_fork_maps();
    long failed = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 1000);
        h = (pm__hub *)&names;
        pm_failalloc_arm(k);
        rc = pm__hub_new(&h, 4, &names, NULL, &lone_ops, NULL);
        int hit = pm_failalloc_disarm();
        if (!hit) {
            ck_assert_int_eq(rc, 0);
            ck_assert_ptr_nonnull(h);
            ck_assert_int_eq(wipe_on_fork_at(h->scratch), h->scratch_mapped);
            pm__hub_delete(h);
            ck_assert_uint_eq(wipe_on_fork_maps(), maps0);
            break;
        }
        ck_assert_msg(rc == -ENOMEM, "allocation %ld failed: pm__hub_new returned %d", k, rc);
        ck_assert_ptr_null(h);
        ck_assert_uint_eq(wipe_on_fork_maps(), maps0);
        failed++;
    }
    ck_assert_int_gt(failed, 1);
    pm__hub_delete(NULL); /* nothing to free: nothing done */
}
END_TEST

/* A table of requests in flight grows on demand (16 entries, then
 * doubled); when it cannot grow the request is refused -ENOMEM (its
 * requester is told, hub_route.c) and nothing is counted: the table, the
 * requester's count, main's and the hub's total stay as they were, and
 * the next request, with memory, goes in. */
START_TEST(test_inflight_table_cannot_grow)
{
    if (!pm_failalloc_here("test_inflight_table_cannot_grow"))
        return;
    pm__hub *h = lone_hub(2);
    pm__port *t = &h->ports[1];
    for (uint64_t id = 1; id <= 16; id++)
        ck_assert_int_eq(pm__hub_add_inflight(h, t, PM__NODE_MAIN, 0, id, 0), 0);
    ck_assert_uint_eq(t->inflight_cap, 16);
    for (int requester = 0; requester < 2; requester++) {
        uint32_t who = requester == 0 ? PM__NODE_MAIN : 0;
        uint32_t out0 = h->ports[0].requests_out;
        pm_failalloc_arm(1);
        int rc = pm__hub_add_inflight(h, t, who, 0, 17, 0);
        int hit = pm_failalloc_disarm();
        ck_assert(hit);
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_uint_eq(t->ninflight, 16);
        ck_assert_uint_eq(t->inflight_cap, 16);
        ck_assert_uint_eq(t->main_inflight, 16);
        ck_assert_uint_eq(h->ports[0].requests_out, out0);
        ck_assert_uint_eq(pm_test_hub_inflight_total(h), 16);
        pm__inflight e;
        ck_assert_int_eq(pm__hub_take_inflight(h, t, who, 17, &e), 0);
    }
    ck_assert_int_eq(pm__hub_add_inflight(h, t, 0, 0, 17, 0), 0);
    ck_assert_uint_eq(t->ninflight, 17);
    ck_assert_uint_eq(t->inflight_cap, 32);
    ck_assert_uint_eq(h->ports[0].requests_out, 1);
    pm__hub_delete(h);
}
END_TEST

/* One spin of the hub with budget ns learnt, spin_us allowed, the probe
 * fresh; its result, *t0 and the probe for the caller. */
static int spin_once(pm__hub *h, uint32_t budget, unsigned spin_us, struct spin_probe *s, int ready_at,
                     uint64_t *t0)
{
    *s = (struct spin_probe){.ready_at = ready_at};
    pm_test_hub_set_spin_budget(h, budget);
    *t0 = 12345; /* overwritten in every case */
    return pm__hub_spin(h, spin_us, spin_ready, s, t0);
}

/* Spinning off (spin_us 0), or nothing learnt (a budget of 0): no spin,
 * not one look at the owner's loop. Off gives no start time (nothing to
 * learn from the sleep); a budget of 0 gives it, and a quick sleep after
 * it is what lets spinning start again, a long one does not; no start
 * time, nothing is learnt. */
START_TEST(test_hub_spin_off_or_nothing_learnt)
{
    pm__hub *h = lone_hub(1);
    struct spin_probe s;
    uint64_t t0;
    ck_assert_int_eq(spin_once(h, 20000, 0, &s, 1, &t0), 0);
    ck_assert_uint_eq(t0, 0);
    ck_assert_int_eq(s.calls, 0);
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 20000);

    ck_assert_int_eq(spin_once(h, 0, 300, &s, 1, &t0), 0);
    ck_assert_uint_ne(t0, 0);
    ck_assert_int_eq(s.calls, 0);
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 0);
    pm__hub_spin_slept(h, 300, 0);
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 0);
    pm__hub_spin_slept(h, 300, pm__now_ns() - 1000000000u); /* a sleep of a second */
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 0);
    int learnt = 0;
    for (int i = 0; i < 200 && !learnt; i++) {
        pm__hub_spin_slept(h, 300, pm__now_ns()); /* a sleep that ended at once */
        learnt = pm_test_hub_spin_budget(h) != 0;
    }
    ck_assert_msg(learnt, "no quick sleep in 200 gave a spin budget");
    ck_assert_uint_le(pm_test_hub_spin_budget(h), 300000);
    /* A budget learnt already is not the sleep's to change. */
    pm_test_hub_set_spin_budget(h, 20000);
    pm__hub_spin_slept(h, 300, pm__now_ns());
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 20000);
    pm__hub_delete(h);
}
END_TEST

/* On one CPU a spin cannot pay off (design.md, the hub's spin: "never on
 * one CPU"): it does not start, and the budget is kept for when the
 * process may run on more. */
START_TEST(test_hub_spin_one_cpu)
{
    cpu_set_t all, one;
    ck_assert_int_eq(sched_getaffinity(0, sizeof(all), &all), 0);
    int cpu = 0;
    while (!CPU_ISSET(cpu, &all))
        cpu++;
    CPU_ZERO(&one);
    CPU_SET(cpu, &one);
    ck_assert_int_eq(sched_setaffinity(0, sizeof(one), &one), 0);
    ck_assert_uint_eq(pm__spin_cpus(), 1); /* read once per process: first here */
    pm__hub *h = lone_hub(1);
    struct spin_probe s;
    uint64_t t0;
    ck_assert_int_eq(spin_once(h, 20000, 300, &s, 1, &t0), 0);
    ck_assert_int_eq(s.calls, 0);
    ck_assert_uint_ne(t0, 0);
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 20000);
    pm__hub_delete(h);
}
END_TEST

/* With a CPU to spare: the owner's loop answering ready on the third look
 * ends the spin with 1 (do not sleep), and a spin that paid keeps at
 * least its budget; one that never sees work ends with 0, having halved
 * its budget already (*t0 0: the sleep must not halve it again), and the
 * budget it spins is at most spin_us; a spin that loses its CPU stops at
 * once with 0 and forgets its budget, its start time given for the
 * sleep's probe. */
START_TEST(test_hub_spin_outcomes)
{
    if (pm__spin_cpus() < 2) {
        fprintf(stderr, "test_hub_spin_outcomes: one CPU, the spin is gated (test_hub_spin_one_cpu)\n");
        return;
    }
    pm__hub *h = lone_hub(1);
    struct spin_probe s;
    uint64_t t0;
    int rc = 0;
    for (int i = 0; i < 200 && rc != 1; i++)
        rc = spin_once(h, 20000, 1000000, &s, 3, &t0);
    ck_assert_msg(rc == 1, "no spin in 200 saw the loop ready");
    ck_assert_int_eq(s.calls, 3);
    ck_assert_uint_ge(pm_test_hub_spin_budget(h), 20000);

    int kept = 0;
    for (int i = 0; i < 200 && !kept; i++) {
        ck_assert_int_eq(spin_once(h, 20000, 300, &s, 0, &t0), 0);
        kept = pm_test_hub_spin_budget(h) != 0; /* else it lost its CPU */
    }
    ck_assert_msg(kept, "no 20 us spin in 200 kept its CPU");
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 10000);
    ck_assert_uint_eq(t0, 0);
    ck_assert_int_ge(s.calls, 1);

    /* 4 us learnt, 2 us allowed: 2 us spun, and halved. */
    kept = 0;
    for (int i = 0; i < 200 && !kept; i++) {
        ck_assert_int_eq(spin_once(h, 4000, 2, &s, 0, &t0), 0);
        kept = pm_test_hub_spin_budget(h) != 0;
    }
    ck_assert_msg(kept, "no 2 us spin in 200 kept its CPU");
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 1000);

    s = (struct spin_probe){.nap_us = 2000};
    pm_test_hub_set_spin_budget(h, 20000);
    ck_assert_int_eq(pm__hub_spin(h, 300, spin_ready, &s, &t0), 0);
    ck_assert_int_eq(s.calls, 1);
    ck_assert_uint_eq(pm_test_hub_spin_budget(h), 0);
    ck_assert_uint_ne(t0, 0);
    pm__hub_delete(h);
}
END_TEST

/* A frame from the worker's end of lone_port, to slot 0 (never read here). */
static void lone_send(pm__channel *worker)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 0;
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, "x", 1), 0);
}

static uint64_t doorbell_count(int efd)
{
    uint64_t v = 0;
    return read(efd, &v, sizeof(v)) == (ssize_t)sizeof(v) ? v : 0;
}

/* What a lone hub's broadcast callback got: its count, and the first
 * result's error and data. */
static int lone_bcast_calls;
static size_t lone_bcast_n;
static int lone_bcast_err;
static char lone_bcast_data[16];

static void lone_bcast_done(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)arg;
    lone_bcast_calls++;
    lone_bcast_n = n;
    lone_bcast_err = n > 0 ? r[0].error : 1;
    snprintf(lone_bcast_data, sizeof(lone_bcast_data), "%.*s", n > 0 ? (int)r[0].len : 0,
             n > 0 && r[0].data != NULL ? (const char *)r[0].data : "");
}

/* The worker of a lone port answers the broadcast request waiting in its
 * ring with text (its length in *len if not NULL); the hub reads it when
 * the test services the port. The request's id. */
static uint64_t lone_answer_with(pm__hub *h, pm__channel *worker, const char *text, uint32_t *len)
{
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    ck_assert_int_eq(pm__frame_recv(&worker->rx, PM__CHANNEL_MAX_FRAME, &f, &payload), 1);
    ck_assert_uint_eq(f.type, PM__FT_REQUEST);
    uint64_t id = f.request_id;
    if (len != NULL)
        *len = f.len;
    pm__ring_consume(&worker->rx);
    pm__ring_release(&worker->rx);
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REPLY;
    f.dst = PM__NODE_MAIN;
    f.request_id = id;
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, text, strlen(text)), 0);
    return id;
}

static void lone_answer(pm__hub *h, pm__channel *worker)
{
    (void)lone_answer_with(h, worker, "pong", NULL);
}

/*
 * pm_cluster_broadcast while memory runs out (hub_bcast.c), on a lone hub
 * with one ready port: every allocation of the call fails in turn. The
 * broadcast's own (its record and its two arrays): -ENOMEM, no callback,
 * nothing left. The port's table of requests in flight: that worker's
 * result is -EAGAIN at once, the callback runs, the others' go on. None:
 * the request is sent; its answer's copy then finds no memory: that
 * result is -ENOMEM without data, and the callback still runs, once; with
 * memory, the answer itself.
 */
START_TEST(test_lone_broadcast_out_of_memory)
{
    if (!pm_failalloc_here("test_lone_broadcast_out_of_memory"))
        return;
    long enomem = 0, eagain = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 100);
        pm__hub *h = lone_hub(2);
        pm__channel hub_end, worker;
        lone_port(h, &hub_end, &worker);
        lone_bcast_calls = 0;
        pm_failalloc_arm(k);
        int rc = pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_done, NULL);
        int hit = pm_failalloc_disarm();
        if (rc < 0) {
            ck_assert(hit);
            ck_assert_int_eq(rc, -ENOMEM);
            ck_assert_int_eq(lone_bcast_calls, 0);
            enomem++;
        } else if (lone_bcast_calls == 1) {
            ck_assert(hit);
            ck_assert_uint_eq(lone_bcast_n, 1);
            ck_assert_int_eq(lone_bcast_err, -EAGAIN); /* no room to remember it */
            eagain++;
        } else {
            ck_assert(!hit);
            ck_assert_int_eq(lone_bcast_calls, 0);
            lone_answer(h, &worker);
            pm_failalloc_arm(1);
            pm__hub_port_service(h, 1);
            ck_assert(pm_failalloc_disarm());
            ck_assert_int_eq(lone_bcast_calls, 1);
            ck_assert_int_eq(lone_bcast_err, -ENOMEM); /* its copy found no memory */
            ck_assert_str_eq(lone_bcast_data, "");
            /* Again with memory: the answer itself. */
            lone_bcast_calls = 0;
            ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_done, NULL), 0);
            lone_answer(h, &worker);
            pm__hub_port_service(h, 1);
            ck_assert_int_eq(lone_bcast_calls, 1);
            ck_assert_int_eq(lone_bcast_err, 0);
            ck_assert_str_eq(lone_bcast_data, "pong");
        }
        pm__hub_delete(h); /* the channels stay mapped: a handful, until the test ends */
        if (!hit)
            break;
    }
    ck_assert_int_eq(enomem, 3);
    ck_assert_int_eq(eagain, 1);
}
END_TEST

/* A requester that never reads asks a node that does not exist, over and
 * over (a lone hub's port, its worker's end in this process, which never
 * reads: no process whose speed could decide it): each request is
 * answered by an undeliverable notice until its ring and what the hub may
 * hold for it (PM__HOLD_MAX_FRAMES) are full; the notices past that are
 * dropped and counted (pm_cluster_stats notices_dropped), and the hub
 * goes on reading the port, no fault. */
START_TEST(test_lone_notices_dropped)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REQUEST;
    f.dst = 7; /* no such node */
    struct pm_cluster_stats st;
    uint64_t sent = 0;
    for (int round = 0; round < 10000; round++) {
        while (pm__frame_send(&worker.tx, &f, "q", 1) == 0)
            f.request_id = ++sent;
        pm__hub_port_service(h, 1);
        memset(&st, 0, sizeof(st));
        pm__hub_stats(h, &st);
        if (st.notices_dropped > 0)
            break;
    }
    ck_assert_uint_ge(st.notices_dropped, 1);
    ck_assert_uint_gt(st.undeliverable, PM__HOLD_MAX_FRAMES); /* the ring's and the hold's */
    pm__hub_delete(h);
}
END_TEST

/* Every result of a lone hub's broadcast, as its callback got them. */
static int lone_all_calls;
static size_t lone_all_n;
static int lone_all_err[4];
static char lone_all_data[4][16];
static uint64_t lone_all_id[4];
static int lone_all_kind[4];

static void lone_bcast_all(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)arg;
    lone_all_calls++;
    lone_all_n = n;
    for (size_t i = 0; i < n && i < 4; i++) {
        lone_all_err[i] = r[i].error;
        lone_all_id[i] = r[i].request_id;
        lone_all_kind[i] = (int)r[i].kind;
        snprintf(lone_all_data[i], sizeof(lone_all_data[i]), "%.*s", (int)r[i].len,
                 r[i].data != NULL ? (const char *)r[i].data : "");
    }
}

/* pm__hub_broadcast's arguments, each wrong with the others right: no
 * callback, a timeout that is not positive, data missing for its length
 * (-EINVAL), a payload over PM_MAX_PAYLOAD (-EMSGSIZE); none sends
 * anything. No data and no length is an empty broadcast, which goes; so
 * does one of PM_MAX_PAYLOAD bytes. */
START_TEST(test_lone_broadcast_arguments)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    lone_all_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 0, lone_bcast_all, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, -1, lone_bcast_all, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast(h, NULL, 1, 60000, lone_bcast_all, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast(h, "b", (size_t)PM_MAX_PAYLOAD + 1, 60000, lone_bcast_all, NULL),
                     -EMSGSIZE);
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &payload), 0);
    ck_assert_int_eq(lone_all_calls, 0);

    ck_assert_int_eq(pm__hub_broadcast(h, NULL, 0, 60000, lone_bcast_all, NULL), 0);
    uint32_t len = 1;
    (void)lone_answer_with(h, &worker, "pong", &len);
    ck_assert_uint_eq(len, 0);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_all_calls, 1);
    ck_assert_uint_eq(lone_all_n, 1);
    ck_assert_int_eq(lone_all_err[0], 0);
    ck_assert_str_eq(lone_all_data[0], "pong");

    /* The largest payload goes, whole. */
    static char big[PM_MAX_PAYLOAD];
    memset(big, 'p', sizeof(big));
    ck_assert_int_eq(pm__hub_broadcast(h, big, sizeof(big), 60000, lone_bcast_all, NULL), 0);
    (void)lone_answer_with(h, &worker, "pong", &len);
    ck_assert_uint_eq(len, PM_MAX_PAYLOAD);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_all_calls, 2);
    ck_assert_uint_eq(lone_all_n, 1);
    pm__hub_delete(h);
}
END_TEST

/*
 * A broadcast's results, each taken once (hub_bcast.c
 * pm__hub_bcast_result, on a lone hub with two ready ports): an id of no
 * broadcast (below the first, one past the last, far past it) and a
 * second result for an id that has one are refused -EALREADY and change
 * nothing; the callback runs once, when the last worker answered, with
 * each worker's own answer. The callers count a refused one late; a
 * peer reaches this with an id of its choosing (a request of its system
 * node refused here, hub_linkin.c pm__hub_link_notice), for the
 * broadcasts its host asked for: pm__hub_bcast_of tells those apart, by
 * the id and the host together.
 */
START_TEST(test_lone_broadcast_results_once)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    lone_all_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_all, NULL), 0);
    uint64_t first = lone_answer_with(h, &worker[0], "one", NULL);
    ck_assert_uint_ge(first, PM__BCAST_ID_BASE);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_all_calls, 0);
    ck_assert_int_eq(pm__hub_bcast_result(h, first - 1, -ESTALE, NULL, 0), -EALREADY);
    ck_assert_int_eq(pm__hub_bcast_result(h, first + 2, -ESTALE, NULL, 0), -EALREADY);
    ck_assert_int_eq(pm__hub_bcast_result(h, first + 1000, -ESTALE, NULL, 0), -EALREADY);
    ck_assert_int_eq(pm__hub_bcast_result(h, 7, -ESTALE, NULL, 0), -EALREADY);
    ck_assert_int_eq(pm__hub_bcast_result(h, first, -ESTALE, NULL, 0), -EALREADY); /* answered */
    ck_assert_int_eq(lone_all_calls, 0);
    /* The local broadcast is nobody's remote one. */
    ck_assert_int_eq(pm__hub_bcast_of(h, first, PM__HOST_LOCAL), 0);
    ck_assert_int_eq(pm__hub_bcast_of(h, first, 3), 0);

    ck_assert_uint_eq(lone_answer_with(h, &worker[1], "two", NULL), first + 1);
    pm__hub_port_service(h, 2);
    ck_assert_int_eq(lone_all_calls, 1);
    ck_assert_uint_eq(lone_all_n, 2);
    ck_assert_int_eq(lone_all_err[0], 0);
    ck_assert_str_eq(lone_all_data[0], "one");
    ck_assert_int_eq(lone_all_err[1], 0);
    ck_assert_str_eq(lone_all_data[1], "two");
    ck_assert_int_eq(pm__hub_bcast_result(h, first + 1, -ESTALE, NULL, 0), -EALREADY); /* ended */

    /* Host 3's mesh broadcast fanned out here: its ids are host 3's, no
     * other host's, and only while it runs. */
    lone_all_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast_for(h, 3, "m", 1, 60000, lone_bcast_all, NULL), 0);
    uint64_t m = first + 2;
    ck_assert_int_eq(pm__hub_bcast_of(h, m, 3), 1);
    ck_assert_int_eq(pm__hub_bcast_of(h, m + 1, 3), 1);
    ck_assert_int_eq(pm__hub_bcast_of(h, m + 2, 3), 0);
    ck_assert_int_eq(pm__hub_bcast_of(h, m - 1, 3), 0);
    ck_assert_int_eq(pm__hub_bcast_of(h, m, 4), 0);
    ck_assert_int_eq(pm__hub_bcast_of(h, m, PM__HOST_LOCAL), 0);
    ck_assert_int_eq(pm__hub_bcast_result(h, m, -ESTALE, NULL, 0), 0);
    ck_assert_int_eq(pm__hub_bcast_result(h, m, -ESTALE, NULL, 0), -EALREADY);
    ck_assert_int_eq(pm__hub_bcast_result(h, m + 1, -ENOTCONN, NULL, 0), 0);
    ck_assert_int_eq(lone_all_calls, 1);
    ck_assert_int_eq(lone_all_err[0], -ESTALE);
    ck_assert_int_eq(lone_all_err[1], -ENOTCONN);
    ck_assert_int_eq(pm__hub_bcast_of(h, m, 3), 0); /* over */
    pm__hub_delete(h);
}
END_TEST

/* Each broadcast's own results: a callback per broadcast, its arg the
 * count it bumps and the text it keeps. */
struct lone_own {
    int calls;
    int err;
    char data[16];
    uint64_t request_id;
    int kind;
};

static void lone_bcast_own(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c;
    struct lone_own *o = arg;
    o->calls++;
    o->err = n == 1 ? r[0].error : 1;
    o->request_id = n == 1 ? r[0].request_id : 0;
    o->kind = n == 1 ? (int)r[0].kind : -1;
    snprintf(o->data, sizeof(o->data), "%.*s", n == 1 ? (int)r[0].len : 0,
             n == 1 && r[0].data != NULL ? (const char *)r[0].data : "");
}

/* Two broadcasts at once, the second started before the first's answer:
 * each request carries its broadcast's deadline and an id of its own,
 * each answer settles its own broadcast, and each callback runs once with
 * its own answer. */
START_TEST(test_lone_broadcasts_overlap)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    struct lone_own one = {0}, two = {0};
    uint64_t t0 = pm__now_ms();
    ck_assert_int_eq(pm__hub_broadcast(h, "1", 1, 60000, lone_bcast_own, &one), 0);
    ck_assert_int_eq(pm__hub_broadcast(h, "2", 1, 90000, lone_bcast_own, &two), 0);
    uint64_t t1 = pm__now_ms();
    pm__hub_publish(h);
    pm__frame_hdr f[2];
    const void *payload;
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f[i], &payload), 1);
        ck_assert_uint_eq(f[i].type, PM__FT_REQUEST);
        ck_assert_int_ge(f[i].deadline_ms, (int64_t)t0 + (i == 0 ? 60000 : 90000));
        ck_assert_int_le(f[i].deadline_ms, (int64_t)t1 + (i == 0 ? 60000 : 90000));
        pm__ring_consume(&worker.rx);
    }
    pm__ring_release(&worker.rx);
    /* The first broadcast's answer first: under the second's ids it would
     * settle the second (the list's head). */
    for (int i = 0; i < 2; i++) {
        pm__frame_hdr r;
        memset(&r, 0, sizeof(r));
        r.type = PM__FT_REPLY;
        r.dst = PM__NODE_MAIN;
        r.request_id = f[i].request_id;
        ck_assert_int_eq(pm__frame_send(&worker.tx, &r, i == 0 ? "first" : "second", i == 0 ? 5 : 6), 0);
        pm__hub_port_service(h, 1);
        ck_assert_int_eq(one.calls, 1);
        ck_assert_int_eq(two.calls, i == 1);
    }
    ck_assert_int_eq(one.err, 0);
    ck_assert_str_eq(one.data, "first");
    ck_assert_int_eq(two.err, 0);
    ck_assert_str_eq(two.data, "second");
    /* Each result a reply to its own request. */
    ck_assert_uint_eq(one.request_id, f[0].request_id);
    ck_assert_uint_eq(two.request_id, f[1].request_id);
    ck_assert_int_eq(one.kind, PM_MSG_REPLY);
    ck_assert_int_eq(two.kind, PM_MSG_REPLY);
    pm__hub_delete(h);
}
END_TEST

/*
 * A mesh broadcast's results grow their array 16 at a time (hub_bcast.c
 * mb_add); an array that cannot grow loses that one result, counted late
 * (pm_cluster_stats late_replies): the callback still runs, once, with
 * the others. On a lone hub (no peers: the local part only) with 17
 * ready workers that answer with no payload (no copies to make), every
 * allocation of the last answer's service fails in turn.
 */
START_TEST(test_lone_mesh_results_cannot_grow)
{
    enum { N = 17 };
    pm__hub *h = lone_hub(N + 1);
    static pm__channel hub_end[N], worker[N];
    for (unsigned i = 0; i < N; i++)
        lone_port_at(h, i + 1, &hub_end[i], &worker[i]);
    long lost = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 20);
        lone_all_calls = 0;
        ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", 1, 60000, lone_bcast_all, NULL), 0);
        uint64_t id0 = lone_answer_with(h, &worker[0], "", NULL);
        for (unsigned i = 1; i < N; i++)
            (void)lone_answer_with(h, &worker[i], "", NULL);
        for (unsigned i = 0; i < N - 1; i++)
            pm__hub_port_service(h, i + 1);
        ck_assert_int_eq(lone_all_calls, 0);
        uint64_t late = pm_test_hub_late_replies(h);
        pm_failalloc_arm(k);
        pm__hub_port_service(h, N);
        int hit = pm_failalloc_disarm();
        ck_assert_int_eq(lone_all_calls, 1);
        if (!hit) {
            ck_assert_uint_eq(lone_all_n, N);
            ck_assert_uint_eq(lone_all_id[0], id0);
            ck_assert_uint_eq(lone_all_id[1], id0 + 1);
            ck_assert_int_eq(lone_all_kind[0], PM_MSG_REPLY);
            ck_assert_uint_eq(pm_test_hub_late_replies(h), late);
            break;
        }
        ck_assert_uint_eq(lone_all_n, N - 1);
        ck_assert_uint_eq(pm_test_hub_late_replies(h), late + 1);
        /* Each result names its worker's request (the first's is lost
         * when the first growth failed). */
        ck_assert_uint_eq(lone_all_id[0], k <= 2 ? id0 + 1 : id0);
        lost++;
    }
    /* The first result's two arrays, the 17th's two; under a sanitizer
     * (its malloc is its own) nothing fails: the 17 results, where an
     * array that did not grow would overflow. */
    ck_assert_int_eq(lost, PM_FAILALLOC ? 4 : 0);
    pm__hub_delete(h);
}
END_TEST

/* A mesh broadcast's copy of a worker's reply finds no memory: that
 * result is -ENOMEM without data (the local part's copy, or the mesh
 * broadcast's own), or, when its array cannot grow, lost and counted
 * late; the callback runs once either way. A lone hub, one worker, every
 * allocation of the answer's service failing in turn. */
START_TEST(test_lone_mesh_result_out_of_memory)
{
    if (!pm_failalloc_here("test_lone_mesh_result_out_of_memory"))
        return;
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    long enomem = 0, lost = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 20);
        lone_all_calls = 0;
        ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", 1, 60000, lone_bcast_all, NULL), 0);
        (void)lone_answer_with(h, &worker, "pong", NULL);
        uint64_t late = pm_test_hub_late_replies(h);
        pm_failalloc_arm(k);
        pm__hub_port_service(h, 1);
        int hit = pm_failalloc_disarm();
        ck_assert_int_eq(lone_all_calls, 1);
        if (!hit) {
            ck_assert_uint_eq(lone_all_n, 1);
            ck_assert_int_eq(lone_all_err[0], 0);
            ck_assert_str_eq(lone_all_data[0], "pong");
            break;
        }
        if (lone_all_n == 0) {
            ck_assert_uint_eq(pm_test_hub_late_replies(h), late + 1);
            lost++;
        } else {
            ck_assert_uint_eq(lone_all_n, 1);
            ck_assert_int_eq(lone_all_err[0], -ENOMEM);
            ck_assert_str_eq(lone_all_data[0], "");
            ck_assert_uint_eq(pm_test_hub_late_replies(h), late);
            enomem++;
        }
    }
    ck_assert_int_eq(enomem, 2); /* the local part's copy, the mesh broadcast's */
    ck_assert_int_eq(lost, 2);   /* its two arrays */
    pm__hub_delete(h);
}
END_TEST

/* Two mesh broadcasts at once, the first settled first (not the list's
 * head): each callback once with its own answer, and the hub's list
 * keeps only what is still running (a settled one left on it would be
 * used after it is freed when the hub walks the list at its end). */
START_TEST(test_lone_mesh_overlap)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    struct lone_own one = {0}, two = {0};
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "1", 1, 60000, lone_bcast_own, &one), 0);
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "2", 1, 60000, lone_bcast_own, &two), 0);
    (void)lone_answer_with(h, &worker, "first", NULL);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(one.calls, 1);
    ck_assert_int_eq(two.calls, 0);
    (void)lone_answer_with(h, &worker, "second", NULL);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(one.calls, 1);
    ck_assert_int_eq(two.calls, 1);
    ck_assert_str_eq(one.data, "first");
    ck_assert_str_eq(two.data, "second");
    pm__hub_delete(h);
    ck_assert_int_eq(one.calls, 1);
    ck_assert_int_eq(two.calls, 1);
}
END_TEST

/* pm__hub_broadcast_mesh's arguments, each wrong with the others right
 * (-EINVAL, -EMSGSIZE: nothing sent, no callback); no data and no length,
 * and PM_MAX_PAYLOAD bytes, go. Then every allocation of the call failing
 * in turn: its own two (the broadcast and its parts) and the local
 * broadcast's three, -ENOMEM, nothing sent, no callback; the worker's
 * in-flight table: its result -EAGAIN at once, the callback once. */
START_TEST(test_lone_mesh_arguments_and_memory)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    lone_all_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", 1, 60000, NULL, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", 1, 0, lone_bcast_all, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, NULL, 1, 60000, lone_bcast_all, NULL), -EINVAL);
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", (size_t)PM_MAX_PAYLOAD + 1, 60000, lone_bcast_all,
                                            NULL), -EMSGSIZE);
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &payload), 0);
    ck_assert_int_eq(lone_all_calls, 0);
    static char big[PM_MAX_PAYLOAD];
    for (int i = 0; i < 2; i++) {
        ck_assert_int_eq(pm__hub_broadcast_mesh(h, i == 0 ? NULL : big, i == 0 ? 0 : sizeof(big), 60000,
                                                lone_bcast_all, NULL), 0);
        uint32_t len = 1;
        (void)lone_answer_with(h, &worker, "pong", &len);
        ck_assert_uint_eq(len, i == 0 ? 0 : PM_MAX_PAYLOAD);
        pm__hub_port_service(h, 1);
        ck_assert_int_eq(lone_all_calls, i + 1);
        ck_assert_uint_eq(lone_all_n, 1);
        ck_assert_str_eq(lone_all_data[0], "pong");
    }
    if (!PM_FAILALLOC) {
        fprintf(stderr, "note: test_lone_mesh_arguments_and_memory's allocation failures run in the "
                        "build without a sanitizer only (the sanitizer's malloc is its own)\n");
        pm__hub_delete(h);
        return;
    }
    long enomem = 0, eagain = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 20);
        /* A fresh hub each time: its port has no in-flight table yet. */
        pm__hub_delete(h);
        h = lone_hub(2);
        lone_port(h, &hub_end, &worker);
        lone_all_calls = 0;
        pm_failalloc_arm(k);
        int rc = pm__hub_broadcast_mesh(h, "m", 1, 60000, lone_bcast_all, NULL);
        int hit = pm_failalloc_disarm();
        if (rc < 0) {
            ck_assert(hit);
            ck_assert_int_eq(rc, -ENOMEM);
            ck_assert_int_eq(lone_all_calls, 0);
            pm__hub_publish(h);
            ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &payload), 0);
            enomem++;
        } else if (lone_all_calls == 1) {
            ck_assert(hit);
            ck_assert_uint_eq(lone_all_n, 1);
            ck_assert_int_eq(lone_all_err[0], -EAGAIN);
            eagain++;
        } else {
            ck_assert(!hit);
            (void)lone_answer_with(h, &worker, "pong", NULL);
            pm__hub_port_service(h, 1);
            ck_assert_int_eq(lone_all_calls, 1);
            ck_assert_str_eq(lone_all_data[0], "pong");
            break;
        }
    }
    ck_assert_int_eq(enomem, 5);
    ck_assert_int_eq(eagain, 1);
    pm__hub_delete(h);
}
END_TEST

/* The rows of test_lone_lane_offer_conditions: how port 2 stands when
 * the pair's count reaches its mark. */
enum {
    LANE_READY, LANE_SOCK_FD0, LANE_STARTING, LANE_STOPPING, LANE_NOT_SPOKEN, LANE_NO_SOCKET,
    LANE_QUEUE, LANE_PEER_GONE, LANE_SENDER_GONE, LANE_TO_SELF, LANE_TO_REMOTE, LANE_TO_NOWHERE,
    LANE_SENDER_NOT_SPOKEN, LANE_ROWS
};
static const char *const lane_rows[LANE_ROWS] = {
    "ready", "its fd socket at fd 0", "starting", "stopping", "its library without lanes",
    "no fd socket", "frames waiting for its ring", "its worker's end of the fd socket closed",
    "the sender's worker's end of the fd socket closed", "the frames to the sender itself",
    "the frames to node 2 of another host", "the frames to the first node past the last",
    "the sender's library without lanes"};

/* File descriptors open in this process. */
static int fds_open(void)
{
    DIR *d = opendir("/proc/self/fd");
    ck_assert_ptr_nonnull(d);
    int n = 0;
    while (readdir(d) != NULL)
        n++;
    closedir(d);
    return n;
}

/*
 * A lane is offered only to a pair that can take it at once (hub_lane.c
 * may_offer): both ready, both libraries speaking lanes, both with an fd
 * socket (any fd, 0 included), nothing waiting for either's ring (an
 * offer must not overtake what the hub holds for a worker). A lone
 * hub with lanes on, ports 1 and 2 over real channels: port 1's worker
 * sends PM_DIRECT_LANE_AFTER messages to port 2, which stands as the row
 * says. Ready (and a socket at fd 0): the lane is made, an offer in each
 * ring, and no fd of the lane left open here. Any other row: none,
 * nothing in the rings but the traffic; and
 * where the condition can pass (a start that ends, a library that speaks
 * lanes after all), the next frame between them gets the lane: the count
 * waits at its mark. A worker whose end of the fd socket is gone: the
 * lane fails (counted), the other end gets its offer already revoked, or
 * (the first end's) nothing at all; the rings work on. Frames to the
 * sender itself, to another host or to no node count for no lane.
 */
START_TEST(test_lone_lane_offer_conditions)
{
    const int row = _i;
    pm__hub *h = lone_hub(3);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__hub_port_lanes_ok(h, 1, 1);
    pm__hub_port_lanes_ok(h, 2, 1);
    switch (row) {
    case LANE_SOCK_FD0:
        close(0);
        ck_assert_int_eq(dup2(hub_end[1].sock, 0), 0);
        close(hub_end[1].sock);
        hub_end[1].sock = 0;
        break;
    case LANE_STARTING: pm__hub_port_set_state(h, 2, PM__PORT_STARTING); break;
    case LANE_STOPPING: pm__hub_port_set_state(h, 2, PM__PORT_STOPPING); break;
    case LANE_NOT_SPOKEN: pm__hub_port_lanes_ok(h, 2, 0); break;
    case LANE_SENDER_NOT_SPOKEN: pm__hub_port_lanes_ok(h, 1, 0); break;
    case LANE_NO_SOCKET:
        close(hub_end[1].sock);
        hub_end[1].sock = -1;
        break;
    case LANE_PEER_GONE:
        close(worker[1].sock); /* the same fd as the hub end's node_sock */
        worker[1].sock = hub_end[1].node_sock = -1;
        break;
    case LANE_SENDER_GONE:
        close(worker[0].sock);
        worker[0].sock = hub_end[0].node_sock = -1;
        break;
    case LANE_QUEUE: {
        char filler[64] = {0};
        while (pm__hub_send_control(h, 2, PM__FT_MSG, filler, sizeof(filler)) == 0)
            ;
        break;
    }
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 2;
    f.dst = row == LANE_TO_SELF ? 1 : row == LANE_TO_NOWHERE ? 3 : 2;
    f.dst_host = row == LANE_TO_REMOTE ? 1 : 0;
    int fds0 = fds_open();
    for (unsigned i = 0; i < PM_DIRECT_LANE_AFTER; i++) {
        if (row == LANE_QUEUE && i == PM_DIRECT_LANE_AFTER - 1) {
            /* Port 2's worker empties its ring: room for an offer now,
             * but the frames the hub holds for it would be overtaken. */
            ck_assert_ptr_nonnull(h->ports[2].q_head);
            const void *pl;
            pm__frame_hdr g;
            while (pm__frame_recv(&worker[1].rx, PM__CHANNEL_MAX_FRAME, &g, &pl) == 1)
                pm__ring_consume(&worker[1].rx);
            pm__ring_release(&worker[1].rx);
        }
        ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
        if (row == LANE_QUEUE) {
            /* A frame for main behind it: the hub queues the one for the
             * full ring instead of leaving it in this ring (hub_queue.c
             * leave_in_ring), so that it is passed on, and counted. */
            pm__frame_hdr m = f;
            m.dst = PM__NODE_MAIN;
            ck_assert_int_eq(pm__frame_send(&worker[0].tx, &m, "m", 1), 0);
        }
        pm__hub_port_service(h, 1);
    }
    int lane = row == LANE_READY || row == LANE_SOCK_FD0;
    ck_assert_msg(h->lanes_made == (uint64_t)lane, "%s: %llu lanes made", lane_rows[row],
                  (unsigned long long)h->lanes_made);
    /* The offer, last in port 1's ring (behind any notices). */
    pm__hub_publish(h);
    const void *payload;
    int offers = 0;
    while (pm__frame_recv(&worker[0].rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
        offers += f.type == PM__FT_LANE;
        pm__ring_consume(&worker[0].rx);
    }
    pm__ring_release(&worker[0].rx);
    /* The supervisor keeps none of a lane's fds past its hand-over. */
    ck_assert_int_eq(fds_open(), fds0);
    if (row == LANE_SENDER_GONE) {
        /* Port 1's record refused first: nothing sent to either, counted;
         * both rings take the next frame as ever. */
        ck_assert_int_eq(offers, 0);
        ck_assert_uint_eq(h->lane_failed, 1);
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_MSG;
        f.dst = 2;
        ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
        pm__hub_port_service(h, 1);
        f.dst = 1;
        ck_assert_int_eq(pm__frame_send(&worker[1].tx, &f, "y", 1), 0);
        pm__hub_port_service(h, 2);
        pm__hub_publish(h);
        unsigned got[2] = {0, 0};
        for (int k = 0; k < 2; k++)
            while (pm__frame_recv(&worker[k].rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
                got[k] += f.type == PM__FT_MSG;
                pm__ring_consume(&worker[k].rx);
            }
        ck_assert_uint_eq(got[0], 1);
        ck_assert_uint_eq(got[1], PM_DIRECT_LANE_AFTER + 1);
        goto out;
    }
    if (row == LANE_PEER_GONE) {
        /* Port 1 holds its record (sent first): it gets its offer, the
         * lane revoked before it; port 2 hears nothing, and its ring takes
         * the next frame as ever (nothing left reserved in it). */
        ck_assert_int_eq(offers, 1);
        ck_assert_uint_eq(h->lane_failed, 1);
        const struct pm__ctl *ctl = hub_end[0].map;
        int revoked = 0;
        for (unsigned i = 0; i < PM__LANES_MAX; i++)
            revoked += atomic_load(&ctl->lane_revoked[i]) != 0;
        ck_assert_int_eq(revoked, 1);
        memset(&f, 0, sizeof(f));
        f.type = PM__FT_MSG;
        f.dst = 2;
        ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
        pm__hub_port_service(h, 1);
        pm__hub_publish(h);
        unsigned got = 0;
        while (pm__frame_recv(&worker[1].rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
            got += f.type == PM__FT_MSG;
            pm__ring_consume(&worker[1].rx);
        }
        ck_assert_uint_eq(got, PM_DIRECT_LANE_AFTER + 1);
        goto out;
    }
    ck_assert_int_eq(offers, lane);
    if (row != LANE_STARTING && row != LANE_STOPPING && row != LANE_NOT_SPOKEN &&
        row != LANE_SENDER_NOT_SPOKEN)
        goto out;
    /* The condition passes: the next frame gets the lane. */
    if (row == LANE_NOT_SPOKEN || row == LANE_SENDER_NOT_SPOKEN)
        pm__hub_port_lanes_ok(h, row == LANE_NOT_SPOKEN ? 2 : 1, 1);
    else
        pm__hub_port_set_state(h, 2, PM__PORT_READY);
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 2;
    ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
    pm__hub_port_service(h, 1);
    ck_assert_msg(h->lanes_made == 1, "%s, then passing: %llu lanes made", lane_rows[row],
                  (unsigned long long)h->lanes_made);
out:
    pm__hub_delete(h);
}
END_TEST

/* Lanes turned on while memory runs out (pm__hub_lanes_enable): each
 * allocation failing in turn is -ENOMEM with lanes still off (no lane
 * between any pair); then on, and on again is 0. Turned off (twice: the
 * second does nothing) and on again, the hub's book is a new one. */
START_TEST(test_lone_lanes_enable_and_free)
{
    pm__hub *h = lone_hub(3);
    ck_assert_int_eq(pm__hub_lane_between(h, 1, 1, 2, 1), 0); /* lanes off */
    long failed = 0;
    for (long k = 1; PM_FAILALLOC; k++) {
        ck_assert_int_lt(k, 50);
        pm_failalloc_arm(k);
        int rc = pm__hub_lanes_enable(h);
        int hit = pm_failalloc_disarm();
        if (!hit) {
            ck_assert_int_eq(rc, 0);
            break;
        }
        ck_assert_int_eq(rc, -ENOMEM);
        ck_assert_int_eq(pm__hub_lane_between(h, 1, 1, 2, 1), 0);
        failed++;
    }
    ck_assert_int_ge(failed, PM_FAILALLOC ? 2 : 0);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    pm__hub_lanes_free(h);
    pm__hub_lanes_free(h);
    ck_assert_int_eq(pm__hub_lane_between(h, 1, 1, 2, 1), 0);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    ck_assert_int_eq(pm__hub_lane_between(h, 1, 1, 2, 1), 0);
    pm__hub_delete(h);
}
END_TEST

/* Frames in a lone worker's down ring, of type `type`, all read. */
static unsigned lone_drain_count(pm__hub *h, pm__channel *worker, int type)
{
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    unsigned n = 0;
    while (pm__frame_recv(&worker->rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
        n += f.type == type;
        pm__ring_consume(&worker->rx);
    }
    pm__ring_release(&worker->rx);
    return n;
}

/* A lane's end (either: the one that asked first, then the other) whose
 * incarnation ends (pm__hub_lanes_end): the lane is revoked at the other
 * end, in its control block and by a wake-up on its down ring (named,
 * since its library takes named ones), counted once; the ended end hears
 * nothing, and the pair has no lane any more. */
START_TEST(test_lone_lane_revoked_at_other_end)
{
    const unsigned ended = _i == 0 ? 1 : 2, other = 3 - ended;
    pm__hub *h = lone_hub(3);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    for (unsigned i = 1; i <= 2; i++) {
        pm__hub_port_lanes_ok(h, i, 1);
        pm__hub_port_lane_notes(h, i, 1);
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 2;
    for (unsigned i = 0; i < PM_DIRECT_LANE_AFTER; i++) {
        ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
        pm__hub_port_service(h, 1);
    }
    ck_assert_uint_eq(h->lanes_made, 1);
    ck_assert(pm__hub_lane_between(h, 1, 1, 2, 1));
    ck_assert_uint_eq(lone_drain_count(h, &worker[0], PM__FT_LANE), 1); /* the offers */
    ck_assert_uint_eq(lone_drain_count(h, &worker[1], PM__FT_LANE), 1);

    pm__hub_lanes_end(h, &h->ports[ended]);
    ck_assert_uint_eq(h->lanes_revoked, 1);
    ck_assert_uint_eq(lone_drain_count(h, &worker[other - 1], PM__FT_LANE), 1);
    ck_assert_uint_eq(lone_drain_count(h, &worker[ended - 1], PM__FT_LANE), 0);
    const struct pm__ctl *ctl[2] = {hub_end[0].map, hub_end[1].map};
    int revoked[2] = {0, 0};
    for (int k = 0; k < 2; k++)
        for (unsigned i = 0; i < PM__LANES_MAX; i++)
            revoked[k] += atomic_load(&ctl[k]->lane_revoked[i]) != 0;
    ck_assert_int_eq(revoked[other - 1], 1);
    ck_assert_int_eq(revoked[ended - 1], 0);
    ck_assert(!pm__hub_lane_between(h, 1, 1, 2, 1));
    pm__hub_delete(h);
}
END_TEST

static int lone_faults, lone_fault_port, lone_fault_reason;

static void lone_fault_count(void *owner, unsigned p, int reason)
{
    (void)owner;
    lone_faults++;
    lone_fault_port = (int)p;
    lone_fault_reason = reason;
}

static const pm__hub_ops lone_fault_ops = {lone_fault_count, lone_control, lone_drain, NULL};

/* A broadcast to a worker whose ring is corrupt (it scribbled the index
 * it reads at, found when its ring is full): the hub faults the worker
 * (PM_REASON_CORRUPT_RING, once), forgets the request, and that worker's
 * result is -EHOSTDOWN, as for a worker that died, not the ring's own
 * error; the callback runs once. */
START_TEST(test_lone_broadcast_corrupt_ring)
{
    pm__hub *h = lone_hub_with(2, &lone_fault_ops);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    char filler[64];
    memset(filler, 'f', sizeof(filler));
    long sent = 0;
    int rc;
    while ((rc = pm__hub_send_control(h, 1, PM__FT_MSG, filler, sizeof(filler))) == 0)
        sent++;
    ck_assert_int_eq(rc, -EAGAIN); /* full, and still sound */
    ck_assert_int_gt(sent, 1000);
    atomic_store(&worker.rx.sh->tail, 3); /* no index a frame can start at */
    lone_faults = 0;
    lone_bcast_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_done, NULL), 0);
    ck_assert_int_eq(lone_faults, 1);
    ck_assert_int_eq(lone_fault_port, 1);
    ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
    ck_assert_int_eq(lone_bcast_calls, 1);
    ck_assert_uint_eq(lone_bcast_n, 1);
    ck_assert_int_eq(lone_bcast_err, -EHOSTDOWN);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    pm__hub_delete(h);
}
END_TEST

/* What the free hook saw: blocks that still held the marker. */
static const char lone_marker[] = "pong-secret-7f3a";
static int lone_marker_freed;

static void lone_marker_hook(const void *p, size_t size)
{
    if (memmem(p, size, lone_marker, sizeof(lone_marker) - 1) != NULL)
        lone_marker_freed++;
}

/* A broadcast's private copies of the workers' replies are wiped before
 * the heap has them back (hub_bcast.c free_results): no block freed while
 * the broadcast ends still holds a reply, which the callback did get. */
START_TEST(test_lone_broadcast_copies_wiped)
{
    if (!pm_failalloc_here("test_lone_broadcast_copies_wiped"))
        return;
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    lone_all_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_all, NULL), 0);
    (void)lone_answer_with(h, &worker, lone_marker, NULL);
    lone_marker_freed = 0;
    pm_failalloc_free_hook = lone_marker_hook;
    pm__hub_port_service(h, 1);
    pm_failalloc_free_hook = NULL;
    ck_assert_int_eq(lone_all_calls, 1);
    ck_assert_str_eq(lone_all_data[0], "pong-secret-7f3");
    ck_assert_int_eq(lone_marker_freed, 0);
    pm__hub_delete(h);
}
END_TEST

/* ---------------------------------------------------------------- the hub's queues */

/* d's worker reads everything and the hub moves d's queue into the room,
 * until both are empty: the frames the worker read. */
static unsigned lone_flush_all(pm__hub *h, unsigned d, pm__channel *worker)
{
    unsigned n = 0;
    for (int round = 0; round < 100000 && h->ports[d].q_head != NULL; round++) {
        n += lone_read_frames(h, worker);
        pm__hub_port_service(h, d);
    }
    ck_assert_ptr_null(h->ports[d].q_head);
    return n + lone_read_frames(h, worker);
}

/* The hold a charge is counted in (hub_queue.c charge_of), read back. */
struct lone_hold {
    uint32_t frames;
    size_t bytes;
    uint32_t fds;
};

static struct lone_hold lone_hold_of(const pm__hub *h, unsigned d, uint32_t charge)
{
    const pm__port *p = &h->ports[d];
    if (charge == PM__CHARGE_ANSWER)
        return (struct lone_hold){p->ans_frames, p->ans_bytes, p->ans_fds};
    if (charge == PM__CHARGE_LANE)
        return (struct lone_hold){p->note_frames, p->note_bytes, p->note_fds};
    if (charge == PM__NODE_MAIN)
        return (struct lone_hold){h->main_held_frames, h->main_held_bytes, h->main_held_fds};
    p = &h->ports[charge];
    return (struct lone_hold){p->held_frames, p->held_bytes, p->held_fds};
}

/*
 * What a full destination's queue takes, charged to whom (hub_queue.c
 * push_any, hub_core.h): a sender's frames, main's, and a port's answers
 * each up to PM__HOLD_MAX_FRAMES frames, PM__HOLD_MAX_BYTES bytes and
 * PM__HOLD_MAX_FDS large messages; lane notes up to PM__LANE_NOTES_MAX,
 * whatever their bytes or the total; everything but lane notes up to
 * PM__HUB_QUEUED_MAX_BYTES together. Past a bound a sender's or main's
 * frame is refused -EAGAIN (it waits), an answer or a note -ENOBUFS (the
 * caller drops and counts it); the refused large message's fd is still
 * the caller's. One row per bound and charge, every other bound far off.
 * What was queued is counted where it is charged, and once the worker
 * reads, all of it arrives in order, the large messages' records on its
 * socket, and every count is back to 0, no fd left open.
 */
#define QB_FRAMES 0
#define QB_BYTES 1
#define QB_FDS 2
#define QB_TOTAL 3
static const struct lone_bound_row {
    const char *what;
    int bound;
    uint32_t charge;
    int fd0; /* 1: the first large message at fd 0; 2: the refused one */
    unsigned accepted;
    int full;
} lone_bound_rows[] = {
    {"a port's frames", QB_FRAMES, 0, 0, PM__HOLD_MAX_FRAMES, -EAGAIN},
    {"main's frames", QB_FRAMES, PM__NODE_MAIN, 0, PM__HOLD_MAX_FRAMES, -EAGAIN},
    {"answers", QB_FRAMES, PM__CHARGE_ANSWER, 0, PM__HOLD_MAX_FRAMES, -ENOBUFS},
    {"lane notes", QB_FRAMES, PM__CHARGE_LANE, 0, PM__LANE_NOTES_MAX, -ENOBUFS},
    {"a port's bytes", QB_BYTES, 0, 0, 64, -EAGAIN},
    {"main's bytes", QB_BYTES, PM__NODE_MAIN, 0, 64, -EAGAIN},
    {"answers' bytes", QB_BYTES, PM__CHARGE_ANSWER, 0, 64, -ENOBUFS},
    {"lane notes' bytes (none)", QB_BYTES, PM__CHARGE_LANE, 0, PM__LANE_NOTES_MAX, -ENOBUFS},
    {"a port's large messages", QB_FDS, 0, 0, PM__HOLD_MAX_FDS, -EAGAIN},
    {"main's large messages", QB_FDS, PM__NODE_MAIN, 0, PM__HOLD_MAX_FDS, -EAGAIN},
    {"answers' large messages", QB_FDS, PM__CHARGE_ANSWER, 0, PM__HOLD_MAX_FDS, -ENOBUFS},
    {"the first large message at fd 0", QB_FDS, 0, 1, PM__HOLD_MAX_FDS, -EAGAIN},
    {"the refused large message at fd 0", QB_FDS, 0, 2, PM__HOLD_MAX_FDS, -EAGAIN},
    {"the total, a port's", QB_TOTAL, 0, 0, 1, -EAGAIN},
    {"the total, answers", QB_TOTAL, PM__CHARGE_ANSWER, 0, 1, -ENOBUFS},
    {"the total, lane notes (none)", QB_TOTAL, PM__CHARGE_LANE, 0, PM__LANE_NOTES_MAX, -ENOBUFS},
};

START_TEST(test_lone_queue_bounds)
{
    const struct lone_bound_row *row = &lone_bound_rows[_i];
    /* 64 frames of 64 KiB make PM__HOLD_MAX_BYTES exactly. */
    ck_assert_uint_eq(PM__HOLD_MAX_BYTES % 65536, 0);
    const size_t total = row->bound == QB_BYTES  ? PM__HOLD_MAX_BYTES / 64
                         : row->bound == QB_FDS ? PM__FRAME_HDR_SIZE + PM__ANNOUNCE_SIZE
                                                : PM__FRAME_HDR_SIZE;
    static unsigned char payload[65536];
    memset(payload, 'p', sizeof(payload));
    pm__hub *h = lone_hub(3);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    int fds0 = fds_open();
    int stdin_copy = dup(0);
    ck_assert_int_ge(stdin_copy, 0);
    /* A port with no ring (port 2, closed) takes nothing: -EHOSTDOWN. */
    pm__frame_hdr none = lone_msg_to(2);
    ck_assert_int_eq(pm__hub_push(h, &h->ports[2], &none, NULL, 0, row->charge), -EHOSTDOWN);
    unsigned fillers = lone_ring_full(h, 1);
    size_t extra = 0; /* the total's row: what other queues would hold */
    if (row->bound == QB_TOTAL)
        extra = PM__HUB_QUEUED_MAX_BYTES - (row->charge == PM__CHARGE_LANE ? 0 : total);
    h->queued_bytes += extra;
    d->drain_reported = 1;
    pm__frame_hdr f = lone_msg_to(1);
    unsigned n = 0;
    int rc, fd = -1;
    for (;; n++) {
        ck_assert_uint_le(n, PM__HOLD_MAX_FRAMES + 1);
        f.request_id = n + 1;
        if (row->bound == QB_FDS) {
            fd = lone_big_fd((row->fd0 == 1 && n == 0) || (row->fd0 == 2 && n == PM__HOLD_MAX_FDS) ? 0 : -1);
            rc = pm__hub_push_fd(h, d, &f, fd, LONE_BIG_LEN, row->charge);
        } else {
            rc = pm__hub_push(h, d, &f, payload, total - PM__FRAME_HDR_SIZE, row->charge);
        }
        if (rc != 0)
            break;
        fd = -1;
        ck_assert_uint_ne(d->stall_since_ms, 0); /* the drain timeout runs */
        ck_assert_int_eq(d->drain_reported, 0);
    }
    ck_assert_msg(n == row->accepted && rc == row->full, "%s: %u queued, then %d", row->what, n, rc);
    if (fd >= 0) {
        ck_assert_int_ge(fcntl(fd, F_GETFD), 0); /* still the caller's, open */
        close(fd);
    }
    if (row->bound == QB_TOTAL && row->charge != PM__CHARGE_LANE)
        ck_assert_int_eq(h->queued_full, 1);
    struct lone_hold held = lone_hold_of(h, 1, row->charge);
    ck_assert_uint_eq(held.frames, n);
    ck_assert_uint_eq(held.bytes, n * total);
    ck_assert_uint_eq(held.fds, row->bound == QB_FDS ? n : 0);
    ck_assert_uint_eq(d->big_owed, row->bound == QB_FDS ? n : 0);
    ck_assert_uint_eq(d->q_frames, n);
    ck_assert_uint_eq(d->q_bytes, n * total);
    ck_assert_uint_eq(h->queued_bytes - extra, n * total);
    ck_assert_uint_eq(h->frames_queued, n);
    h->queued_bytes -= extra;

    /* The worker reads: every frame arrives, the queued ones in order. */
    pm__hub_publish(h);
    unsigned got = 0, msgs = 0;
    uint32_t seq = 0;
    for (int round = 0; round < 100000 && got < fillers + n; round++) {
        pm__frame_hdr r;
        const void *data;
        while (pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &r, &data) == 1) {
            if (got++ >= fillers) {
                ck_assert_uint_eq(r.request_id, ++msgs);
                ck_assert_uint_eq(r.len, total - PM__FRAME_HDR_SIZE);
                if (row->bound == QB_FDS) {
                    pm__announce a;
                    ck_assert_int_eq(pm__announce_decode(data, r.len, &a), 0);
                    ck_assert_uint_eq(r.flags, PM__FF_MEMFD);
                    ck_assert_uint_eq(a.len, LONE_BIG_LEN);
                    seq = pm__bigmsg_next(seq);
                    ck_assert_uint_eq(a.seq, seq);
                    int big = -1;
                    ck_assert_int_eq(pm__bigmsg_recv(worker.sock, seq, &big), 0);
                    close(big);
                } else {
                    ck_assert_uint_eq(r.flags, 0);
                }
            }
            pm__ring_consume(&worker.rx);
        }
        pm__ring_release(&worker.rx);
        pm__hub_port_service(h, 1);
        pm__hub_publish(h);
    }
    ck_assert_uint_eq(got, fillers + n);
    ck_assert_ptr_null(d->q_head);
    held = lone_hold_of(h, 1, row->charge);
    ck_assert_uint_eq(held.frames, 0);
    ck_assert_uint_eq(held.bytes, 0);
    ck_assert_uint_eq(held.fds, 0);
    ck_assert_uint_eq(d->q_frames, 0);
    ck_assert_uint_eq(d->q_bytes, 0);
    ck_assert_uint_eq(h->queued_bytes, 0);
    ck_assert_uint_eq(d->stall_since_ms, 0); /* an empty queue stops the drain timeout */
    ck_assert_int_eq(dup2(stdin_copy, 0), 0);
    close(stdin_copy);
    ck_assert_int_eq(fds_open(), fds0);
    pm__hub_delete(h);
}
END_TEST

/* A sender at its bound of large messages (PM__HOLD_MAX_FDS) is held only
 * for those: its plain frames are still queued, its next large message
 * is refused -EAGAIN (hub_queue.c push_any). */
START_TEST(test_lone_fd_bound_only_fds)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    (void)lone_ring_full(h, 1);
    pm__frame_hdr f = lone_msg_to(1);
    for (unsigned k = 0; k < PM__HOLD_MAX_FDS; k++)
        ck_assert_int_eq(pm__hub_push_fd(h, d, &f, lone_big_fd(-1), LONE_BIG_LEN, 0), 0);
    ck_assert_int_eq(pm__hub_push(h, d, &f, "p", 1, 0), 0);
    ck_assert_uint_eq(h->ports[0].held_frames, PM__HOLD_MAX_FDS + 1);
    int fd = lone_big_fd(-1);
    ck_assert_int_eq(pm__hub_push_fd(h, d, &f, fd, LONE_BIG_LEN, 0), -EAGAIN);
    close(fd);
    pm__hub_delete(h);
}
END_TEST

/* What a lone hub sent on its link, counted. */
static unsigned lone_link_sent;

static int lone_link_send(void *arg, const void *frame, size_t len)
{
    (void)arg, (void)frame, (void)len;
    lone_link_sent++;
    return 0;
}

/*
 * A frame queued for a local port returns credit to a peer link only when
 * it came from that link (hub_queue.c: a queued frame's credit_host is 0
 * unless hub_linkin.c tags it): local frames leaving a queue send nothing
 * on a link that takes credits, whatever the heap held where their queue
 * entry was made (the program's malloc fills each block with host 1's
 * index, the link's).
 */
START_TEST(test_lone_local_frames_no_credit)
{
    if (!pm_failalloc_here("test_lone_local_frames_no_credit"))
        return;
    pm__hub *h = lone_hub(2);
    pm__hub_peer_mode(h);
    ck_assert_int_eq(pm__hub_host_index(h, "b"), 1);
    pm__hub_link_up(h, 1, lone_link_send, NULL);
    pm__hub_link_caps(h, 1, PM__PEER_CAP_CREDIT);
    lone_link_sent = 0;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    (void)lone_ring_full(h, 1);
    pm__frame_hdr f = lone_msg_to(1);
    pm_failalloc_fill = 1; /* host 1, port 0x00010001 */
    for (unsigned k = 0; k < PM__LINK_WIN_FRAMES; k++)
        ck_assert_int_eq(pm__hub_push(h, &h->ports[1], &f, "x", 1, PM__NODE_MAIN), 0);
    pm_failalloc_fill = 0;
    (void)lone_flush_all(h, 1, &worker);
    ck_assert_uint_eq(lone_link_sent, 0);
    pm__hub_delete(h);
}
END_TEST

/* Frames for lone port 0, charged to `charge`, pushed into its queue
 * (its ring full): n of them with `payload` bytes each, or large messages
 * if fds. */
static void lone_queue_for(pm__hub *h, uint32_t charge, unsigned n, size_t payload, int fds)
{
    static unsigned char data[65536];
    pm__frame_hdr f = lone_msg_to(0);
    for (unsigned k = 0; k < n; k++) {
        int rc;
        if (fds) {
            int fd = lone_big_fd(-1);
            rc = pm__hub_push_fd(h, &h->ports[0], &f, fd, LONE_BIG_LEN, charge);
        } else {
            rc = pm__hub_push(h, &h->ports[0], &f, data, payload, charge);
        }
        ck_assert_int_eq(rc, 0);
    }
    ck_assert_ptr_nonnull(h->ports[0].q_head);
}

/* A sender marked held by a full destination (as hub_route.c does when
 * its hold or the total is at its bound), not yet read again. */
static void lone_hold_back(pm__port *t, int on)
{
    t->blocked_on = on;
    t->left = 0;
    t->busy = 0;
}

/*
 * A sender held back by its bound is read again once its hold is half
 * free (hub_queue.c pm__hub_dequeue: hysteresis, so that it does not flap
 * on every frame): frames, bytes and large messages each at most half
 * their bound, and not one frame earlier; once read again, the frames of
 * it that leave later do not mark it again. One row per measure, the
 * others far from theirs. The full destination is port 0, which a held
 * sender's blocked_on of 0 names; the frames leave it dropped
 * (pm__hub_dequeue), one at a time.
 */
static const struct lone_half_row {
    const char *what;
    unsigned queued;
    size_t payload;
    int fds;
    unsigned freed_at; /* the frame whose leaving frees the sender */
} lone_half_rows[] = {
    {"frames", 600, 0, 0, 600 - PM__HOLD_MAX_FRAMES / 2},
    {"bytes", 64, 65536 - PM__FRAME_HDR_SIZE, 0, 32},
    {"large messages", PM__HOLD_MAX_FDS, 0, 1, PM__HOLD_MAX_FDS / 2},
};

START_TEST(test_lone_hold_half_free)
{
    const struct lone_half_row *row = &lone_half_rows[_i];
    pm__hub *h = lone_hub(3);
    pm__channel hub_end, worker;
    lone_port_at(h, 0, &hub_end, &worker);
    (void)lone_ring_full(h, 0);
    lone_queue_for(h, 1, row->queued, row->payload, row->fds);
    pm__port *d = &h->ports[0], *t = &h->ports[1];
    lone_hold_back(t, 0);
    for (unsigned k = 1; k <= row->queued; k++) {
        pm__hub_dequeue(h, d, d->q_head);
        if (k < row->freed_at) {
            ck_assert_msg(t->blocked_on == 0 && !t->busy, "%s: read again after %u of %u", row->what,
                          k, row->queued);
        } else if (k == row->freed_at) {
            ck_assert_msg(t->blocked_on == -1 && t->busy, "%s: still held after %u (%u frames held)",
                          row->what, k, t->held_frames);
            t->busy = 0;
        } else {
            ck_assert_msg(!t->busy, "%s: marked again at %u", row->what, k);
        }
    }
    ck_assert_uint_eq(t->held_frames, 0);
    ck_assert_uint_eq(t->held_bytes, 0);
    ck_assert_uint_eq(t->held_fds, 0);
    ck_assert_ptr_null(d->q_head);
    ck_assert_ptr_null(d->q_tail);
    pm__hub_delete(h);
}
END_TEST

/*
 * Senders that waited for the total (PM__HUB_QUEUED_MAX_BYTES, every
 * queue together) are read again once the total is half free, not one
 * byte earlier, and then only those whose own hold is under every bound:
 * one at its frames', one at its bytes', one at its large messages'
 * bound stay held (hub_queue.c pm__hub_dequeue); a sender not held is not
 * marked, and once the total was half free the next frame to leave reads
 * nobody again. What the other queues of a hub would hold is added to
 * the total by hand.
 */
START_TEST(test_lone_total_half_free)
{
    pm__hub *h = lone_hub(6);
    pm__channel hub_end, worker;
    lone_port_at(h, 0, &hub_end, &worker);
    (void)lone_ring_full(h, 0);
    pm__port *d = &h->ports[0];
    lone_queue_for(h, 5, 3, 0, 0); /* a sender not held: these frames leave */
    lone_queue_for(h, 2, PM__HOLD_MAX_FRAMES, 0, 0);
    lone_queue_for(h, 3, 64, 65536 - PM__FRAME_HDR_SIZE, 0);
    lone_queue_for(h, 4, PM__HOLD_MAX_FDS, 0, 1);
    ck_assert_uint_eq(h->ports[3].held_bytes, PM__HOLD_MAX_BYTES);
    for (unsigned i = 1; i <= 4; i++)
        lone_hold_back(&h->ports[i], 0); /* port 1 holds nothing: it waits for the total */
    lone_hold_back(&h->ports[5], -1);
    /* Two frames of port 5 bring the total to half exactly. */
    const size_t extra = PM__HUB_QUEUED_MAX_BYTES / 2 - (h->queued_bytes - 2 * PM__FRAME_HDR_SIZE);
    h->queued_bytes += extra;
    h->queued_full = 1;
    pm__hub_dequeue(h, d, d->q_head);
    ck_assert_uint_eq(h->queued_bytes, PM__HUB_QUEUED_MAX_BYTES / 2 + PM__FRAME_HDR_SIZE);
    ck_assert_int_eq(h->queued_full, 1);
    for (unsigned i = 1; i <= 5; i++)
        ck_assert_msg(!h->ports[i].busy, "port %u read again one frame early", i);
    pm__hub_dequeue(h, d, d->q_head);
    ck_assert_int_eq(h->queued_full, 0);
    ck_assert_msg(h->ports[1].blocked_on == -1 && h->ports[1].busy, "port 1 still held");
    for (unsigned i = 2; i <= 4; i++)
        ck_assert_msg(h->ports[i].blocked_on == 0 && !h->ports[i].busy,
                      "port %u read again at its own bound", i);
    ck_assert_msg(!h->ports[5].busy, "port 5, not held, marked");
    lone_hold_back(&h->ports[1], 0);
    pm__hub_dequeue(h, d, d->q_head);
    ck_assert_msg(h->ports[1].blocked_on == 0 && !h->ports[1].busy, "read again, the total not full");
    h->queued_bytes -= extra;
    pm__hub_delete(h);
}
END_TEST


/*
 * An undeliverable notice (hub_queue.c pm__hub_notice_at) goes where its
 * `to` says, with every field it names: to a ready port's current
 * incarnation, into its ring (counted in its undeliverable); to main,
 * through main's delivery; to a requester on another host, back over the
 * link, but only about a worker of this host (a remote worker's frame is
 * that host's to answer). To a port's older incarnation or a closed port
 * (even to the very incarnation that ended) it is dropped and counted
 * (notices_dropped), not counted as the port's undeliverable; to no port
 * of this hub (an index past the last) nothing at all. A port whose
 * answers are at their bound: dropped and counted, no fault; whose ring
 * is corrupt: the port is faulted (PM_REASON_CORRUPT_RING), the notice
 * dropped and counted.
 */
enum { NOTE_PORT, NOTE_OLD_INC, NOTE_CLOSED, NOTE_CLOSED_LAST_INC, NOTE_PAST_LAST, NOTE_MAIN, NOTE_LINK,
       NOTE_LINK_REMOTE, NOTE_ANSWERS_FULL, NOTE_CORRUPT, NOTE_ROWS };

START_TEST(test_lone_notice_at)
{
    pm__hub *h = lone_hub_with(3, &lone_fault_ops);
    h->up = &lone_up;
    lone_up_main = lone_up_link = 0;
    lone_faults = 0;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker); /* port 1, incarnation 1 */
    pm__port *p = &h->ports[1];
    uint32_t to = 1;
    uint64_t to_inc = 1;
    uint16_t about_host = 3;
    int dropped = 0, in_ring = 0;
    switch (_i) {
    case NOTE_PORT:
        in_ring = 1;
        break;
    case NOTE_OLD_INC:
        to_inc = 2;
        dropped = 1;
        break;
    case NOTE_CLOSED:
        to = 2;
        dropped = 1;
        break;
    case NOTE_CLOSED_LAST_INC: {
        /* Port 2's incarnation 1 ended: a notice to it finds no ring. */
        static pm__channel hub2, worker2;
        lone_port_at(h, 2, &hub2, &worker2);
        pm__hub_port_close(h, 2);
        to = 2;
        dropped = 1;
        break;
    }
    case NOTE_PAST_LAST:
        to = 3;
        break;
    case NOTE_MAIN:
        to = PM__NODE_MAIN;
        break;
    case NOTE_LINK:
        about_host = PM__HOST_LOCAL;
        /* fall through */
    case NOTE_LINK_REMOTE:
        to = PM__REMOTE_NODE(4, 2);
        break;
    case NOTE_ANSWERS_FULL:
        (void)lone_ring_full(h, 1);
        for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
            pm__hub_notice_at(h, 1, 1, 3, 5, 7, 9, -EHOSTDOWN);
        ck_assert_uint_eq(p->ans_frames, PM__HOLD_MAX_FRAMES);
        ck_assert_uint_eq(h->notices_dropped, 0);
        p->undeliverable = 0;
        dropped = 1;
        break;
    case NOTE_CORRUPT:
        (void)lone_ring_full(h, 1);
        atomic_store(&worker.rx.sh->tail, 3); /* no index a frame can start at */
        dropped = 1;
        break;
    }
    pm__hub_notice_at(h, to, to_inc, about_host, 5, 7, 9, -EHOSTDOWN);
    ck_assert_uint_eq(h->notices_dropped, (uint64_t)dropped);
    ck_assert_int_eq(lone_faults, _i == NOTE_CORRUPT);
    if (_i == NOTE_CORRUPT)
        ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
    ck_assert_uint_eq(p->undeliverable, in_ring || _i >= NOTE_ANSWERS_FULL);
    ck_assert_uint_eq(h->ports[2].undeliverable, 0);
    ck_assert_int_eq(lone_up_main, _i == NOTE_MAIN);
    ck_assert_int_eq(lone_up_link, _i == NOTE_LINK);
    if (_i == NOTE_LINK) {
        uint64_t want[6] = {to, 1, 5, 7, 9, (uint64_t)(int64_t)-EHOSTDOWN};
        ck_assert_mem_eq(lone_up_args, want, sizeof(want));
    }
    pm__frame_hdr n = lone_up_hdr;
    if (in_ring) {
        pm__hub_publish(h);
        const void *payload;
        ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &n, &payload), 1);
        pm__ring_consume(&worker.rx);
        ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &n, &payload), 0);
    }
    if (in_ring || _i == NOTE_MAIN) {
        ck_assert_uint_eq(n.type, PM__FT_UNDELIVERABLE);
        ck_assert_uint_eq(n.src_host, 3);
        ck_assert_uint_eq(n.src, 5);
        ck_assert_uint_eq(n.src_inc, 7);
        ck_assert_uint_eq(n.dst, to);
        ck_assert_uint_eq(n.dst_inc, 1);
        ck_assert_uint_eq(n.request_id, 9);
        ck_assert_int_eq(n.error, -EHOSTDOWN);
        ck_assert_uint_eq(n.len, 0);
    } else if (_i != NOTE_ANSWERS_FULL) {
        pm__hub_publish(h);
        const void *payload;
        if (_i != NOTE_CORRUPT)
            ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &n, &payload), 0);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * pm__hub_not_for (hub_queue.c), the scan that decides whether a sender
 * may wait for a full destination d with its frames left in its ring: 0
 * (may wait) only for a message or a request to d on this host without a
 * large message; 1 for anything else, a record too short for a header
 * or one whose header does not decode included. One row per condition,
 * the others as for a frame that may wait.
 */
static const struct lone_scan_row {
    const char *what;
    int type;
    unsigned flags;
    uint16_t dst_host;
    uint32_t dst;
    size_t payload; /* bytes after the header */
    size_t record;  /* the record's length if not header + payload */
    int not_for;
} lone_scan_rows[] = {
    {"a message to d", PM__FT_MSG, 0, PM__HOST_LOCAL, 2, 0, 0, 0},
    {"a message to d with a payload", PM__FT_MSG, 0, PM__HOST_LOCAL, 2, 3, 0, 0},
    {"a request to d", PM__FT_REQUEST, 0, PM__HOST_LOCAL, 2, 0, 0, 0},
    {"a reply to d", PM__FT_REPLY, 0, PM__HOST_LOCAL, 2, 0, 0, 1},
    {"a large message to d", PM__FT_MSG, PM__FF_MEMFD, PM__HOST_LOCAL, 2, PM__ANNOUNCE_SIZE, 0, 1},
    {"a message to d's index on another host", PM__FT_MSG, 0, 2, 2, 0, 0, 1},
    {"a message to another port", PM__FT_MSG, 0, PM__HOST_LOCAL, 1, 0, 0, 1},
    {"a record shorter than a header", PM__FT_MSG, 0, PM__HOST_LOCAL, 2, 0, PM__FRAME_HDR_SIZE - 1, 1},
    {"a header that does not decode", PM__FT_MSG, 0, PM__HOST_LOCAL, 2, 5, PM__FRAME_HDR_SIZE, 1},
};

START_TEST(test_lone_scan_not_for)
{
    const struct lone_scan_row *row = &lone_scan_rows[_i];
    pm__hub *h = lone_hub(3);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.version = PM__FRAME_VERSION;
    f.type = (uint8_t)row->type;
    f.flags = (uint16_t)row->flags;
    f.dst_host = row->dst_host;
    f.dst = row->dst;
    f.len = (uint32_t)row->payload;
    unsigned char raw[PM__FRAME_HDR_SIZE + 64];
    memset(raw, 0, sizeof(raw));
    pm__frame_encode(&f, raw);
    size_t len = row->record != 0 ? row->record : PM__FRAME_HDR_SIZE + row->payload;
    ck_assert_msg(pm__hub_not_for(raw, len, &h->ports[2]) == row->not_for, "%s", row->what);
    pm__hub_delete(h);
}
END_TEST

/* The fds pm__hub_child_fds named. */
static int lone_child_fds[8], lone_child_nfds;

static void lone_child_fd(void *arg, int fd)
{
    (void)arg;
    if (lone_child_nfds < 8)
        lone_child_fds[lone_child_nfds] = fd;
    lone_child_nfds++;
}

/*
 * A sender whose destination d has a full ring and nothing queued waits
 * with its frame left in its own ring, no copy, when every frame it has
 * published behind is for d too (hub_queue.c leave_in_ring): a place
 * holder in d's queue, d's drain timeout running; once d's worker has
 * made room for that frame, the place holder leaves and the sender is
 * read again, and its frames go ring to ring, none ever copied into a
 * queue. A frame behind for anyone else: the frames for d are queued as
 * usual (copies) and the sender is read on. The place holder reads its
 * sender again only if the sender still waits for d with its frame left:
 * not once it waits for another destination, nor when it is held on d by
 * its own bound.
 */
enum { LEFT_ALL_FOR_D, LEFT_ONE_FOR_OTHER, LEFT_THEN_OTHER_DEST, LEFT_THEN_BOUND, LEFT_ROWS };

static void lone_send_to(pm__channel *worker, uint32_t dst, uint64_t id)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = dst;
    f.request_id = id;
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, "m", 1), 0);
}

START_TEST(test_lone_left_in_ring)
{
    pm__hub *h = lone_hub(4);
    pm__channel hub_end[3], worker[3];
    for (unsigned i = 1; i <= 3; i++)
        lone_port_at(h, i, &hub_end[i - 1], &worker[i - 1]);
    pm__port *s = &h->ports[1], *d = &h->ports[2], *e = &h->ports[3];
    unsigned fillers = lone_ring_full(h, 2);
    (void)lone_ring_full(h, 3);
    lone_send_to(&worker[0], 2, 1);
    lone_send_to(&worker[0], 2, 2);
    lone_send_to(&worker[0], _i == LEFT_ONE_FOR_OTHER ? 0 : 2, 3);
    d->drain_reported = 1; /* from an earlier stall */
    pm__hub_port_service(h, 1);
    if (_i == LEFT_ONE_FOR_OTHER) {
        /* Both frames for d copied into its queue; the third, for a
         * closed port, answered undeliverable. */
        ck_assert_uint_eq(h->left_waits, 0);
        ck_assert_uint_eq(h->frames_queued, 2);
        ck_assert_uint_eq(d->q_frames, 2);
        ck_assert_int_eq(s->blocked_on, -1);
        ck_assert_int_eq(s->left, 0);
        ck_assert_uint_eq(lone_flush_all(h, 2, &worker[1]), fillers + 2);
        pm__hub_delete(h);
        return;
    }
    ck_assert_uint_eq(h->left_waits, 1);
    ck_assert_uint_eq(h->frames_queued, 0);
    ck_assert_int_eq(s->blocked_on, 2);
    ck_assert_int_eq(s->left, 1);
    ck_assert_ptr_nonnull(d->q_head);
    ck_assert_int_eq(d->q_head->waiter, 1);
    ck_assert_uint_eq(d->q_head->need, PM__FRAME_HDR_SIZE + 1);
    ck_assert_uint_eq(d->q_frames, 0);
    ck_assert_uint_eq(d->q_bytes, 0);
    ck_assert_uint_ne(d->stall_since_ms, 0); /* the drain timeout starts afresh */
    ck_assert_int_eq(d->drain_reported, 0);
    ck_assert_int_eq(d->in_timed, 1);
    ck_assert_int_eq(d->busy, 0); /* no room: it is read again when its worker frees some */
    lone_child_nfds = 0; /* a place holder holds no fd a fork child must close */
    ck_assert_int_eq(pm__hub_child_fds(h, lone_child_fd, NULL), 1);
    ck_assert_int_eq(lone_child_nfds, 0);
    if (_i == LEFT_THEN_OTHER_DEST) {
        /* A frame for e behind: s is read on, its frames for d are copied
         * behind the place holder, and it waits for e, left in its ring. */
        lone_send_to(&worker[0], 3, 4);
        pm__hub_port_service(h, 1);
        ck_assert_uint_eq(h->frames_queued, 3);
        ck_assert_int_eq(s->blocked_on, 3);
        ck_assert_int_eq(s->left, 1);
        ck_assert_int_eq(e->q_head->waiter, 1);
        s->busy = 0;
        pm__hub_dequeue(h, d, d->q_head); /* d's place holder leaves */
        ck_assert_int_eq(s->blocked_on, 3);
        ck_assert_int_eq(s->busy, 0);
        pm__hub_delete(h);
        return;
    }
    if (_i == LEFT_THEN_BOUND) {
        s->left = 0; /* as hub_route.c marks a sender held by its bound */
        s->busy = 0;
        pm__hub_dequeue(h, d, d->q_head);
        ck_assert_int_eq(s->blocked_on, 2);
        ck_assert_int_eq(s->busy, 0);
        pm__hub_delete(h);
        return;
    }
    /* d's worker reads: the place holder leaves, s is read again. */
    ck_assert_uint_eq(lone_read_frames(h, &worker[1]), fillers);
    pm__hub_port_service(h, 2);
    ck_assert_ptr_null(d->q_head);
    ck_assert_int_eq(s->blocked_on, -1);
    ck_assert_int_eq(s->left, 0);
    ck_assert_int_eq(s->busy, 1);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(lone_read_frames(h, &worker[1]), 3);
    ck_assert_uint_eq(h->frames_queued, 0);
    ck_assert_uint_eq(h->left_waits, 1);
    pm__hub_delete(h);
}
END_TEST

/*
 * A sender held because its own hold is full is not one whose frame was
 * left in its ring (hub_route.c relay_message resets what the push says
 * for every push): after port 1's frame is left in its ring for full port
 * 2, port 3, whose hold at port 2 is full, is held with its frame not
 * left (it is read again when its hold frees half, not by a place
 * holder).
 */
START_TEST(test_lone_held_not_left)
{
    pm__hub *h = lone_hub(4);
    pm__channel hub_end[3], worker[3];
    for (unsigned i = 1; i <= 3; i++)
        lone_port_at(h, i, &hub_end[i - 1], &worker[i - 1]);
    (void)lone_ring_full(h, 2);
    lone_send_to(&worker[0], 2, 1);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(h->ports[1].left, 1);
    pm__frame_hdr g = lone_msg_to(2);
    for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
        ck_assert_int_eq(pm__hub_push(h, &h->ports[2], &g, NULL, 0, 3), 0);
    lone_send_to(&worker[2], 2, 1);
    pm__hub_port_service(h, 3);
    ck_assert_int_eq(h->ports[3].blocked_on, 2);
    ck_assert_int_eq(h->ports[3].left, 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * The drain timeout of a queue (hub_queue.c pm__hub_flush): a flush that
 * moves a frame but leaves others restarts it (progress), one that moves
 * nothing leaves it running, and an emptied queue stops it; each start
 * forgets that the destination was reported not draining.
 */
START_TEST(test_lone_flush_progress)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    unsigned fillers = lone_ring_full(h, 1);
    static unsigned char data[65536 - PM__FRAME_HDR_SIZE];
    pm__frame_hdr f = lone_msg_to(1);
    for (unsigned k = 0; k < 20; k++) /* 1.25 MiB: more than the ring */
        ck_assert_int_eq(pm__hub_push(h, d, &f, data, sizeof(data), 0), 0);
    d->stall_since_ms = 1;
    d->drain_reported = 1;
    ck_assert_uint_eq(lone_read_frames(h, &worker), fillers);
    pm__hub_port_service(h, 1);
    ck_assert_uint_gt(d->q_frames, 0);
    ck_assert_uint_lt(d->q_frames, 20);
    ck_assert_uint_gt(d->stall_since_ms, 1);
    ck_assert_int_eq(d->drain_reported, 0);
    d->stall_since_ms = 1;
    d->drain_reported = 1;
    unsigned queued = d->q_frames;
    pm__hub_port_service(h, 1); /* nothing read meanwhile: nothing moves */
    ck_assert_uint_eq(d->q_frames, queued);
    ck_assert_uint_eq(d->stall_since_ms, 1);
    ck_assert_int_eq(d->drain_reported, 1);
    ck_assert_uint_eq(lone_flush_all(h, 1, &worker), 20);
    ck_assert_uint_eq(d->stall_since_ms, 0);
    ck_assert_int_eq(d->drain_reported, 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * A destination that does not take the records of its large messages
 * (its socket full) gets the next one queued, charged like any frame,
 * not lost; the flush then waits for the socket (sock_full: the owner
 * services the port when it is writable) instead of retrying every turn,
 * the frame still queued. Once the worker takes its records, the frame
 * leaves, and every announcement arrives in order with its record. What
 * a destination may still refuse (big_owed) stops at PM__BIG_OWED_MAX.
 */
START_TEST(test_lone_big_socket_full)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    int fds0 = fds_open();
    d->big_owed = PM__BIG_OWED_MAX - 2;
    pm__frame_hdr f = lone_msg_to(1);
    unsigned sent = 0;
    while (d->q_head == NULL) {
        ck_assert_uint_lt(sent, 100000);
        f.request_id = ++sent;
        ck_assert_int_eq(pm__hub_push_fd(h, d, &f, lone_big_fd(-1), LONE_BIG_LEN, 0), 0);
    }
    ck_assert_uint_gt(sent, 2);
    ck_assert_uint_eq(d->big_owed, PM__BIG_OWED_MAX);
    ck_assert_uint_eq(h->ports[0].held_fds, 1);
    ck_assert_uint_eq(d->q_frames, 1);
    pm__hub_port_service(h, 1); /* the socket still full */
    ck_assert_int_eq(d->sock_full, 1);
    ck_assert_uint_eq(d->q_frames, 1);
    pm__hub_publish(h);
    unsigned got = 0;
    for (int round = 0; round < 100000 && got < sent; round++) {
        pm__frame_hdr r;
        const void *data;
        while (pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &r, &data) == 1) {
            pm__announce a;
            ck_assert_int_eq(pm__announce_decode(data, r.len, &a), 0);
            ck_assert_uint_eq(r.request_id, ++got);
            ck_assert_uint_eq(a.seq, got);
            int big = -1;
            ck_assert_int_eq(pm__bigmsg_recv(worker.sock, a.seq, &big), 0);
            close(big);
            pm__ring_consume(&worker.rx);
        }
        pm__ring_release(&worker.rx);
        pm__hub_port_service(h, 1);
        pm__hub_publish(h);
    }
    ck_assert_uint_eq(got, sent);
    ck_assert_ptr_null(d->q_head);
    ck_assert_int_eq(d->sock_full, 0);
    ck_assert_uint_eq(h->ports[0].held_fds, 0);
    ck_assert_int_eq(fds_open(), fds0);
    pm__hub_delete(h);
}
END_TEST

/*
 * A destination whose worker shut its socket down refuses a large
 * message: pushed into its ring, the push fails -EBADMSG (the caller
 * faults the port), nothing is left in its ring or queue and the fd is
 * still the caller's; one already queued for it faults the port
 * (PM_REASON_CORRUPT_RING, once) when the flush finds out.
 */
START_TEST(test_lone_big_refused_by_worker)
{
    pm__hub *h = lone_hub_with(2, &lone_fault_ops);
    lone_faults = 0;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    pm__frame_hdr f = lone_msg_to(1);
    unsigned fillers = 0;
    if (_i == 1) {
        fillers = lone_ring_full(h, 1);
        ck_assert_int_eq(pm__hub_push_fd(h, d, &f, lone_big_fd(-1), LONE_BIG_LEN, 0), 0);
        ck_assert_uint_eq(d->q_frames, 1);
    }
    ck_assert_int_eq(shutdown(worker.sock, SHUT_RDWR), 0);
    if (_i == 0) {
        int fd = lone_big_fd(-1);
        ck_assert_int_eq(pm__hub_push_fd(h, d, &f, fd, LONE_BIG_LEN, 0), -EBADMSG);
        ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
        close(fd);
        ck_assert_ptr_null(d->q_head);
        ck_assert_uint_eq(d->big_owed, 0);
        ck_assert_uint_eq(lone_read_frames(h, &worker), 0);
        ck_assert_int_eq(lone_faults, 0);
    } else {
        ck_assert_uint_eq(lone_read_frames(h, &worker), fillers);
        pm__hub_port_service(h, 1);
        ck_assert_int_eq(lone_faults, 1);
        ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
        ck_assert_uint_eq(lone_read_frames(h, &worker), 0);
    }
    ck_assert_uint_eq(h->fd_refused, 0);
    pm__hub_delete(h);
}
END_TEST

/* This program's sendmsg: the real call, or, while lone_sendmsg_errno is
 * set, a refusal of any send that passes fds with that errno (what the
 * kernel answers an fd send under memory pressure, which no test can make
 * happen on purpose). Defined here, it is the one the library's fd sends
 * call in this program. */
static int lone_sendmsg_errno;

ssize_t sendmsg(int fd, const struct msghdr *msg, int flags)
{
    if (lone_sendmsg_errno != 0 && msg->msg_controllen > 0) {
        errno = lone_sendmsg_errno;
        return -1;
    }
    return syscall(SYS_sendmsg, fd, msg, flags);
}

/*
 * An fd send the kernel refuses for now (send_big, hub_queue.c):
 * ETOOMANYREFS, and ENOBUFS or ENOMEM under memory pressure, all mean
 * "not now, whatever the destination does": the push fails -ETOOMANYREFS
 * (its caller answers the sender -EAGAIN and does not charge the
 * destination), counted in fd_refused, nothing left in the ring or the
 * queue, the fd still the caller's; the destination is not faulted. Any
 * other refusal (here EPIPE) is the destination's: -EBADMSG.
 */
static const int lone_refusals[] = {ETOOMANYREFS, ENOBUFS, ENOMEM, EPIPE};

START_TEST(test_lone_big_refused_for_now)
{
    const int err = lone_refusals[_i];
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    pm__frame_hdr f = lone_msg_to(1);
    int fd = lone_big_fd(-1);
    lone_sendmsg_errno = err;
    int rc = pm__hub_push_fd(h, d, &f, fd, LONE_BIG_LEN, 0);
    lone_sendmsg_errno = 0;
    ck_assert_int_eq(rc, err == EPIPE ? -EBADMSG : -ETOOMANYREFS);
    ck_assert_uint_eq(h->fd_refused, err != EPIPE);
    ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
    ck_assert_ptr_null(d->q_head);
    ck_assert_uint_eq(h->ports[0].held_fds, 0);
    ck_assert_uint_eq(d->big_owed, 0);
    ck_assert_uint_eq(lone_read_frames(h, &worker), 0);
    /* The kernel willing again: the same fd goes, and one at fd 0 (stdin
     * closed) goes like any other, its record with it. */
    ck_assert_int_eq(pm__hub_push_fd(h, d, &f, fd, LONE_BIG_LEN, 0), 0);
    int stdin_copy = dup(0);
    ck_assert_int_ge(stdin_copy, 0);
    ck_assert_int_eq(pm__hub_push_fd(h, d, &f, lone_big_fd(0), LONE_BIG_LEN, 0), 0);
    ck_assert_int_eq(fcntl(0, F_GETFD), -1); /* the hub's, sent and closed */
    ck_assert_int_eq(dup2(stdin_copy, 0), 0);
    close(stdin_copy);
    pm__hub_publish(h);
    for (uint32_t seq = 1; seq <= 2; seq++) {
        pm__frame_hdr r;
        const void *data;
        ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &r, &data), 1);
        pm__announce a;
        ck_assert_int_eq(pm__announce_decode(data, r.len, &a), 0);
        ck_assert_uint_eq(a.seq, seq);
        int big = -1;
        ck_assert_int_eq(pm__bigmsg_recv(worker.sock, seq, &big), 0);
        close(big);
        pm__ring_consume(&worker.rx);
    }
    pm__hub_delete(h);
}
END_TEST

/* ---------------------------------------------------------------- the router */

/* What main's on_message got on a lone hub. */
static int lone_main_calls;
static pm_message lone_main_msg;

static void lone_on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)arg;
    lone_main_calls++;
    lone_main_msg = *m;
}

/* The next frame in a lone worker's down ring, taken: 1, or 0 if none. */
static int lone_take(pm__hub *h, pm__channel *worker, pm__frame_hdr *f)
{
    pm__hub_publish(h);
    const void *payload;
    int rc = pm__frame_recv(&worker->rx, PM__CHANNEL_MAX_FRAME, f, &payload);
    ck_assert_int_ge(rc, 0);
    if (rc == 1) {
        pm__ring_consume(&worker->rx);
        pm__ring_release(&worker->rx);
    }
    return rc;
}

/* A frame of `type` from a lone worker, for (dst, dst_inc), request id 9,
 * two bytes "hi". */
static void lone_frame_from(pm__channel *worker, int type, uint32_t dst, uint64_t dst_inc,
                            int64_t deadline_ms)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.dst = dst;
    f.dst_inc = dst_inc;
    f.request_id = 9;
    f.deadline_ms = deadline_ms;
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, "hi", 2), 0);
}

/*
 * The router's rules for a worker's message or request (hub_route.c
 * pm__hub_relay), one row each, on a lone hub: port 1 sends, port 2 is
 * ready, port 3 closed, port 7 none. To main: main's callback, with the
 * sender's address. To no such port, a port not ready, another
 * incarnation: an undeliverable notice at once (-ENOENT, -EHOSTDOWN,
 * -ESTALE), with the request's id and the incarnation asked for. To a
 * ready port: there, the destination's incarnation and the sender's
 * stamped; a request remembered in flight. A request past the sender's
 * PM__INFLIGHT_PER_REQUESTER: -EBUSY to it alone. A full destination:
 * the sender held (counted in ring_full_waits), a request not remembered
 * (it is read again). A corrupt destination ring: the destination
 * faulted; a message's sender told -EHOSTDOWN (id 0), a request's not
 * (its answer comes with the destination's death). Whatever is relayed
 * is counted in the sender's relayed frames and bytes.
 */
enum { RL_MAIN, RL_UNKNOWN, RL_NOT_READY, RL_STALE, RL_MSG, RL_REQUEST, RL_OVER_CAP, RL_FULL_MSG,
       RL_FULL_REQUEST, RL_CORRUPT_MSG, RL_CORRUPT_REQUEST, RL_ROWS };

START_TEST(test_lone_relay_rules)
{
    pm__hub *h = lone_hub_with(4, &lone_fault_ops);
    lone_faults = 0;
    lone_main_calls = 0;
    h->on_message = lone_on_message;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *s = &h->ports[1], *d = &h->ports[2];
    int type = _i == RL_REQUEST || _i == RL_OVER_CAP || _i == RL_FULL_REQUEST || _i == RL_CORRUPT_REQUEST
                   ? PM__FT_REQUEST
                   : PM__FT_MSG;
    uint32_t dst = _i == RL_MAIN ? PM__NODE_MAIN : _i == RL_UNKNOWN ? 7 : _i == RL_NOT_READY ? 3 : 2;
    uint64_t inflight0 = 0;
    if (_i == RL_OVER_CAP) {
        for (uint64_t id = 100; id < 100 + PM__INFLIGHT_PER_REQUESTER; id++)
            ck_assert_int_eq(pm__hub_add_inflight(h, d, 1, 1, id, 0), 0);
        inflight0 = PM__INFLIGHT_PER_REQUESTER;
    }
    unsigned fillers = 0;
    if (_i >= RL_FULL_MSG)
        fillers = lone_ring_full(h, 2);
    if (_i >= RL_CORRUPT_MSG)
        atomic_store(&worker[1].rx.sh->tail, 3); /* no index a frame can start at */
    lone_frame_from(&worker[0], type, dst, _i == RL_STALE ? 5 : 0, 0);
    pm__hub_port_service(h, 1);

    int delivered = _i == RL_MAIN || _i == RL_MSG || _i == RL_REQUEST;
    int err = _i == RL_UNKNOWN     ? -ENOENT
              : _i == RL_NOT_READY ? -EHOSTDOWN
              : _i == RL_STALE     ? -ESTALE
              : _i == RL_OVER_CAP  ? -EBUSY
              : _i == RL_CORRUPT_MSG ? -EHOSTDOWN
                                     : 0;
    ck_assert_uint_eq(s->relayed, (uint64_t)delivered);
    ck_assert_uint_eq(s->relayed_bytes, delivered ? 2u : 0u);
    ck_assert_int_eq(lone_main_calls, _i == RL_MAIN);
    if (_i == RL_MAIN) {
        ck_assert_uint_eq(lone_main_msg.from.port, 11); /* the names' first port, 10, + slot 1 */
        ck_assert_uint_eq(lone_main_msg.from.incarnation, 1);
        ck_assert_uint_eq(lone_main_msg.len, 2);
    }
    pm__frame_hdr f;
    if (err != 0) {
        ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
        ck_assert_uint_eq(f.type, PM__FT_UNDELIVERABLE);
        ck_assert_int_eq(f.error, err);
        ck_assert_uint_eq(f.src, dst);
        ck_assert_uint_eq(f.src_inc, _i == RL_STALE ? 5 : _i >= RL_OVER_CAP ? 1 : 0);
        ck_assert_uint_eq(f.dst_inc, 1);
        ck_assert_uint_eq(f.request_id, _i == RL_CORRUPT_MSG ? 0 : 9);
    }
    ck_assert_int_eq(lone_take(h, &worker[0], &f), 0); /* nothing else for the sender */
    if (_i == RL_MSG || _i == RL_REQUEST) {
        ck_assert_int_eq(lone_take(h, &worker[1], &f), 1);
        ck_assert_uint_eq(f.type, type);
        ck_assert_uint_eq(f.src, 1);
        ck_assert_uint_eq(f.src_inc, 1);
        ck_assert_uint_eq(f.dst_inc, 1);
        ck_assert_uint_eq(f.request_id, 9);
    } else if (_i < RL_FULL_MSG) {
        ck_assert_int_eq(lone_take(h, &worker[1], &f), 0);
    }
    int held = _i == RL_FULL_MSG || _i == RL_FULL_REQUEST;
    ck_assert_uint_eq(h->ring_full_waits, (uint64_t)held);
    ck_assert_int_eq(s->blocked_on, held ? 2 : -1);
    ck_assert_int_eq(s->left, held);
    ck_assert_int_eq(lone_faults, _i >= RL_CORRUPT_MSG);
    if (_i >= RL_CORRUPT_MSG) {
        ck_assert_int_eq(lone_fault_port, 2);
        ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
    }
    int remembered = _i == RL_REQUEST || _i == RL_CORRUPT_REQUEST;
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), inflight0 + (uint64_t)remembered);
    (void)fillers;
    pm__hub_delete(h);
}
END_TEST

/*
 * A sender held back by its hold (blocked_on set, its frame not left in
 * its ring) is not read while it is held, even when it is serviced (its
 * doorbell rang: a worker may ring it whenever it likes): its hold has
 * room again before it is half free, and a read would queue its next
 * frame there, past the hysteresis of test_lone_hold_half_free. Its
 * frame stays in its ring, its hold as it was (port.c read_ring: the
 * loop stops at a blocked port).
 */
START_TEST(test_lone_held_sender_not_read)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_port_at(h, 0, &hub_end[0], &worker[0]);
    lone_port_at(h, 1, &hub_end[1], &worker[1]);
    (void)lone_ring_full(h, 0);
    unsigned queued = PM__HOLD_MAX_FRAMES / 2 + 2; /* room for more, not half free */
    lone_queue_for(h, 1, queued, 0, 0);
    pm__port *t = &h->ports[1];
    lone_hold_back(t, 0);
    ck_assert_uint_eq(t->held_frames, queued);
    lone_frame_from(&worker[1], PM__FT_MSG, 0, 1, 0);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(t->held_frames, queued);
    ck_assert_int_eq(t->blocked_on, 0);
    ck_assert_uint_eq(t->relayed, 0);
    ck_assert(!pm__ring_empty(&hub_end[1].rx)); /* the frame waits where it was */
    /* On no work list either: a held port is read again when its hold is
     * half free (unblocking marks it), not by the loop's turns. */
    ck_assert(!t->busy);
    ck_assert_int_eq(pm__hub_any_busy(h), 0);
    ck_assert_uint_eq(h->arm.n, 0);
    pm__hub_delete(h);
}
END_TEST

/* A lone hub's owner that does what the cluster's does with a fault
 * (reap.c pm__cluster_fault): counts it once per incarnation and cuts the
 * port off (never read from it again). */
static pm__hub *lone_cut_hub;

static void lone_fault_cut(void *owner, unsigned p, int reason)
{
    (void)owner;
    if (!pm__hub_port_reading(lone_cut_hub, p))
        return;
    lone_faults++;
    lone_fault_port = (int)p;
    lone_fault_reason = reason;
    pm__hub_port_cut(lone_cut_hub, p);
}

static const pm__hub_ops lone_cut_ops = {lone_fault_cut, lone_control, lone_drain, NULL};

/*
 * A worker fenced in the middle of its batch is read no further: port 1
 * sends a message to itself with its own ring corrupt (found when full),
 * which faults it (the owner cuts it off), then a message to port 2. The
 * second frame is never relayed: a fenced incarnation can no longer reach
 * anyone (port.c read_ring stops at a port no longer read, whatever the
 * frame before returned).
 */
START_TEST(test_lone_fenced_mid_batch)
{
    pm__hub *h = lone_hub_with(3, &lone_cut_ops);
    lone_cut_hub = h;
    lone_faults = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    (void)lone_ring_full(h, 1);
    atomic_store(&worker[0].rx.sh->tail, 3); /* no index a frame can start at */
    lone_frame_from(&worker[0], PM__FT_MSG, 1, 1, 0);
    lone_frame_from(&worker[0], PM__FT_MSG, 2, 1, 0);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_faults, 1);
    ck_assert_int_eq(lone_fault_port, 1);
    ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker[1], &f), 0); /* nothing reached port 2 */
    ck_assert_uint_eq(h->ports[1].relayed, 0);
    ck_assert(!pm__ring_empty(&hub_end[0].rx)); /* the second frame not even read */
    pm__hub_delete(h);
}
END_TEST

/*
 * The router's rules for a worker's reply (hub_route.c relay_reply), one
 * row each: port 2 answers port 1's request 9. Remembered in flight, to a
 * requester of the same incarnation: delivered, its incarnation stamped,
 * counted as relayed; the record taken (a second reply is late). Not
 * remembered, past its deadline, or for a requester gone or of another
 * incarnation: late, counted in late_replies, nothing delivered. The
 * requester's answers at their bound: dropped, counted in
 * replies_dropped, never waits (the replier is read on). The requester's
 * ring corrupt: the requester faulted.
 */
enum { RP_OK, RP_TWICE, RP_NONE, RP_EXPIRED, RP_GONE, RP_OTHER_INC, RP_ANSWERS_FULL, RP_CORRUPT,
       RP_ROWS };

START_TEST(test_lone_reply_rules)
{
    pm__hub *h = lone_hub_with(4, &lone_fault_ops);
    lone_faults = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *d = &h->ports[2];
    uint32_t requester = _i == RP_GONE ? 3 : 1;
    uint64_t requester_inc = _i == RP_OTHER_INC ? 7 : 1;
    int64_t deadline = _i == RP_EXPIRED ? 1 : (int64_t)pm__now_ms() + 600000;
    if (_i != RP_NONE)
        ck_assert_int_eq(pm__hub_add_inflight(h, d, requester, requester_inc, 9, deadline), 0);
    if (_i == RP_ANSWERS_FULL || _i == RP_CORRUPT) {
        (void)lone_ring_full(h, 1);
        for (unsigned k = 0; _i == RP_ANSWERS_FULL && k < PM__HOLD_MAX_FRAMES; k++)
            pm__hub_notice_at(h, 1, 1, 0, 5, 1, 1, -EHOSTDOWN);
        if (_i == RP_CORRUPT)
            atomic_store(&worker[0].rx.sh->tail, 3);
    }
    lone_frame_from(&worker[1], PM__FT_REPLY, requester, 0, 0);
    if (_i == RP_TWICE)
        lone_frame_from(&worker[1], PM__FT_REPLY, requester, 0, 0);
    pm__hub_port_service(h, 2);

    int ok = _i == RP_OK || _i == RP_TWICE;
    ck_assert_uint_eq(d->relayed, (uint64_t)ok);
    ck_assert_uint_eq(d->relayed_bytes, ok ? 2u : 0u);
    int late = _i == RP_TWICE || _i == RP_NONE || _i == RP_EXPIRED || _i == RP_GONE || _i == RP_OTHER_INC;
    ck_assert_uint_eq(h->late_replies, (uint64_t)late);
    ck_assert_uint_eq(h->replies_dropped, _i == RP_ANSWERS_FULL);
    ck_assert_int_eq(lone_faults, _i == RP_CORRUPT);
    if (_i == RP_CORRUPT)
        ck_assert_int_eq(lone_fault_port, 1);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    ck_assert_int_eq(d->blocked_on, -1);
    pm__frame_hdr f;
    if (_i < RP_ANSWERS_FULL) {
        if (ok) {
            ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
            ck_assert_uint_eq(f.type, PM__FT_REPLY);
            ck_assert_uint_eq(f.src, 2);
            ck_assert_uint_eq(f.src_inc, 1);
            ck_assert_uint_eq(f.dst_inc, 1);
            ck_assert_uint_eq(f.request_id, 9);
        }
        ck_assert_int_eq(lone_take(h, &worker[0], &f), 0);
    }
    pm__hub_delete(h);
}
END_TEST

/* Lone worker's large frame of `type` (PM_MAX_PAYLOAD + 1 bytes, its
 * record sequence seq) for port dst, request id 9: the record on its
 * socket, then the announcing frame. */
static void lone_big_with_id(pm__channel *worker, int type, uint32_t dst, uint32_t seq,
                             uint64_t id);

static void lone_big_from(pm__channel *worker, int type, uint32_t dst, uint32_t seq)
{
    lone_big_with_id(worker, type, dst, seq, type == PM__FT_MSG ? 0 : 9);
}

/* The same, request id `id`. */
static void lone_big_with_id(pm__channel *worker, int type, uint32_t dst, uint32_t seq,
                             uint64_t id)
{
    static unsigned char big[PM_MAX_PAYLOAD + 1];
    int fd = pm__bigmsg_create(big, sizeof(big));
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pm__bigmsg_send(worker->sock, fd, seq), 0);
    close(fd);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = (uint8_t)type;
    f.flags = PM__FF_MEMFD;
    f.dst = dst;
    f.request_id = id;
    unsigned char a[PM__ANNOUNCE_SIZE];
    pm__announce an = {sizeof(big), seq};
    pm__announce_encode(&an, a);
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, a, sizeof(a)), 0);
}

/*
 * A large message or request whose fd the destination's socket refuses
 * for now (hub_route.c relay_message, ETOOMANYREFS from send_big): its
 * sender is told -EAGAIN (a message's notice with id 0), the destination
 * is neither charged nor faulted, a request is not remembered, and what
 * else the destination holds in flight stays (port 3's request to it).
 */
START_TEST(test_lone_big_refused_for_now_relayed)
{
    pm__hub *h = lone_hub_with(4, &lone_fault_ops);
    lone_faults = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    h->max_message = 2 * PM_MAX_PAYLOAD;
    pm__port *d = &h->ports[2];
    ck_assert_int_eq(pm__hub_add_inflight(h, d, 3, 1, 77, 0), 0);
    int type = _i == 0 ? PM__FT_REQUEST : PM__FT_MSG;
    lone_big_from(&worker[0], type, 2, 1);
    lone_sendmsg_errno = ETOOMANYREFS;
    pm__hub_port_service(h, 1);
    lone_sendmsg_errno = 0;
    ck_assert_int_eq(lone_faults, 0);
    ck_assert_uint_eq(h->fd_refused, 1);
    ck_assert_uint_eq(h->ports[1].relayed, 0);
    ck_assert_uint_eq(d->q_frames, 0);
    ck_assert_uint_eq(d->ninflight, 1);
    ck_assert_uint_eq(d->inflight[0].request_id, 77);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 1);
    pm__frame_hdr n;
    ck_assert_int_eq(lone_take(h, &worker[0], &n), 1);
    ck_assert_uint_eq(n.type, PM__FT_UNDELIVERABLE);
    ck_assert_int_eq(n.error, -EAGAIN);
    ck_assert_uint_eq(n.src, 2);
    ck_assert_uint_eq(n.request_id, type == PM__FT_MSG ? 0 : 9);
    ck_assert_int_eq(lone_take(h, &worker[1], &n), 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * A large reply whose fd the requester's socket refuses for now
 * (hub_route.c relay_reply; hub_queue.c send_big: ETOOMANYREFS, ENOBUFS,
 * ENOMEM): the reply is dropped and counted (replies_dropped), the
 * requester told -EAGAIN about it (its request fails, not its worker),
 * and nobody is faulted; the replier is read on. Port 2 answers port 1's
 * request 9 with PM_MAX_PAYLOAD + 1 bytes.
 */
START_TEST(test_lone_big_reply_refused_for_now)
{
    pm__hub *h = lone_hub_with(3, &lone_fault_ops);
    lone_faults = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *d = &h->ports[2];
    h->max_message = 2 * PM_MAX_PAYLOAD;
    ck_assert_int_eq(pm__hub_add_inflight(h, d, 1, 1, 9, 0), 0);
    lone_big_from(&worker[1], PM__FT_REPLY, 1, 1);
    lone_sendmsg_errno = lone_refusals[_i];
    pm__hub_port_service(h, 2);
    lone_sendmsg_errno = 0;
    ck_assert_msg(lone_faults == 0, "port %d faulted (%d)", lone_fault_port, lone_fault_reason);
    ck_assert_uint_eq(h->replies_dropped, 1);
    ck_assert_uint_eq(h->fd_refused, 1);
    ck_assert_uint_eq(d->relayed, 0);
    ck_assert_int_eq(d->blocked_on, -1);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    pm__frame_hdr n;
    ck_assert_int_eq(lone_take(h, &worker[0], &n), 1);
    ck_assert_uint_eq(n.type, PM__FT_UNDELIVERABLE);
    ck_assert_int_eq(n.error, -EAGAIN);
    ck_assert_uint_eq(n.src, 2);
    ck_assert_uint_eq(n.src_inc, 1);
    ck_assert_uint_eq(n.request_id, 9);
    ck_assert_int_eq(lone_take(h, &worker[0], &n), 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * A reply at its request's deadline, to the millisecond, is on time
 * (hub_route.c relay_reply: late only past it). The hub reads the clock
 * itself, so the test brackets its service between two reads of the same
 * clock: only an attempt whose two reads agree (the hub's read was that
 * millisecond too) decides; one that crossed a millisecond is tried again,
 * so the outcome never depends on how fast the machine is.
 */
START_TEST(test_lone_reply_at_its_deadline)
{
    int decided = 0;
    for (int attempt = 0; attempt < 10000 && !decided; attempt++) {
        pm__hub *h = lone_hub(3);
        pm__channel hub_end[2], worker[2];
        lone_ports_1_2(h, hub_end, worker);
        pm__port *d = &h->ports[2];
        lone_frame_from(&worker[1], PM__FT_REPLY, 1, 0, 0);
        int64_t t0 = (int64_t)pm__now_ms();
        ck_assert_int_eq(pm__hub_add_inflight(h, d, 1, 1, 9, t0), 0);
        pm__hub_port_service(h, 2);
        int64_t t1 = (int64_t)pm__now_ms();
        if (t1 == t0) {
            decided = 1;
            ck_assert_uint_eq(h->late_replies, 0);
            ck_assert_uint_eq(d->relayed, 1);
            pm__frame_hdr f;
            ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
            ck_assert_uint_eq(f.type, PM__FT_REPLY);
        }
        pm__hub_delete(h);
    }
    ck_assert_msg(decided, "no attempt stayed within one millisecond");
}
END_TEST

/*
 * A reply the hub has no record of, from a port to one it shares a direct
 * lane with (hub_route.c lane_reply): the answer to a request that came
 * by the lane, too large for it. Relayed as PM__FT_LANE_REPLY, counted as
 * relayed, not late; charged to its sender's hold, and past that bound
 * dropped and counted (replies_dropped), never waiting. To a node past the
 * last port, or to a port it shares no lane with: late, as any reply to
 * nothing.
 */
START_TEST(test_lone_lane_reply)
{
    pm__hub *h = lone_hub(3);
    ck_assert_int_eq(pm__hub_lanes_enable(h), 0);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    for (unsigned i = 1; i <= 2; i++) {
        pm__hub_port_lanes_ok(h, i, 1);
        pm__hub_port_lane_notes(h, i, 1);
    }
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_MSG;
    f.dst = 2;
    for (unsigned i = 0; i < PM_DIRECT_LANE_AFTER; i++) {
        ck_assert_int_eq(pm__frame_send(&worker[0].tx, &f, "x", 1), 0);
        pm__hub_port_service(h, 1);
    }
    ck_assert(pm__hub_lane_between(h, 1, 1, 2, 1));
    (void)lone_read_frames(h, &worker[0]);
    (void)lone_read_frames(h, &worker[1]);
    pm__port *r = &h->ports[2];
    uint64_t relayed0 = r->relayed;
    if (_i == 2) {
        (void)lone_ring_full(h, 1);
        pm__frame_hdr g = lone_msg_to(1);
        for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
            ck_assert_int_eq(pm__hub_push(h, &h->ports[1], &g, NULL, 0, 2), 0);
    }
    lone_frame_from(&worker[1], PM__FT_REPLY, _i == 1 ? 3 : 1, 1, 0); /* to the incarnation asking */
    pm__hub_port_service(h, 2);
    ck_assert_uint_eq(h->late_replies, _i == 1);
    ck_assert_uint_eq(h->replies_dropped, _i == 2);
    ck_assert_uint_eq(r->relayed - relayed0, _i == 0);
    ck_assert_int_eq(r->blocked_on, -1); /* a reply never waits */
    if (_i == 0) {
        pm__frame_hdr got;
        ck_assert_int_eq(lone_take(h, &worker[0], &got), 1);
        ck_assert_uint_eq(got.type, PM__FT_LANE_REPLY);
        ck_assert_uint_eq(got.src, 2);
        ck_assert_uint_eq(got.request_id, 9);
        ck_assert_uint_eq(h->ports[2].held_frames, 0);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's sends (hub_route.c pm__hub_main_send), one row each, to a lone
 * hub's port 1 unless the row says: data NULL with a length: -EINVAL
 * (without one: an empty message, sent); one byte past max_message:
 * -EMSGSIZE, exactly max_message: sent; an
 * address of another system: -ENOENT; main itself: -EINVAL; a closed
 * port: -EHOSTDOWN; another incarnation: -ESTALE. Sent: in the worker's
 * ring at once (published, no turn of the loop needed), from main to the
 * port's incarnation, PM_MAX_PAYLOAD bytes still inline, one more a large
 * message with its record. To a full ring, a message queued charged to
 * main, a reply charged to the port's answers; main's hold at its bound:
 * -EAGAIN; the answers at theirs: the reply dropped, counted, 0. A
 * corrupt ring: -EHOSTDOWN, the port faulted.
 */
enum { MS_NULL_DATA, MS_TOO_LONG, MS_MAX_LEN, MS_OTHER_SYSTEM, MS_TO_MAIN, MS_CLOSED, MS_STALE,
       MS_SENT, MS_EMPTY, MS_INLINE_MAX, MS_LARGE, MS_LARGE_FD0, MS_QUEUED_MSG, MS_QUEUED_REPLY,
       MS_MAIN_HOLD_FULL, MS_ANSWERS_FULL, MS_CORRUPT, MS_ROWS };

START_TEST(test_lone_main_send)
{
    pm__hub *h = lone_hub_with(3, &lone_fault_ops);
    lone_faults = 0;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    static unsigned char data[PM_MAX_PAYLOAD + 1];
    size_t len = 2;
    int type = _i == MS_QUEUED_REPLY || _i == MS_ANSWERS_FULL ? PM__FT_REPLY : PM__FT_MSG;
    pm_address to;
    pm__node_address(&h->names, _i == MS_TO_MAIN ? PM__NODE_MAIN : _i == MS_CLOSED ? 2 : 1,
                     _i == MS_STALE ? 5 : 0, &to);
    if (_i == MS_OTHER_SYSTEM)
        snprintf(to.system, sizeof(to.system), "u");
    if (_i == MS_TOO_LONG || _i == MS_MAX_LEN) {
        h->max_message = 100;
        len = _i == MS_TOO_LONG ? 101 : 100;
    }
    if (_i == MS_INLINE_MAX || _i == MS_LARGE || _i == MS_LARGE_FD0) {
        h->max_message = 2 * PM_MAX_PAYLOAD;
        len = PM_MAX_PAYLOAD + (_i != MS_INLINE_MAX);
    }
    int stdin_copy = -1;
    if (_i == MS_LARGE_FD0) {
        /* fd 0 free: the large message's memfd is made there. */
        stdin_copy = dup(0);
        ck_assert_int_ge(stdin_copy, 0);
        close(0);
    }
    if (_i == MS_EMPTY)
        len = 0;
    if (_i >= MS_QUEUED_MSG)
        (void)lone_ring_full(h, 1);
    if (_i == MS_MAIN_HOLD_FULL)
        for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
            ck_assert_int_eq(pm__hub_main_send(h, &to, PM__FT_MSG, 0, "q", 1), 0);
    if (_i == MS_ANSWERS_FULL)
        for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
            ck_assert_int_eq(pm__hub_main_send(h, &to, PM__FT_REPLY, 0, "q", 1), 0);
    if (_i == MS_CORRUPT)
        atomic_store(&worker.rx.sh->tail, 3);
    int want = _i == MS_NULL_DATA      ? -EINVAL
               : _i == MS_TOO_LONG     ? -EMSGSIZE
               : _i == MS_OTHER_SYSTEM ? -ENOENT
               : _i == MS_TO_MAIN      ? -EINVAL
               : _i == MS_CLOSED       ? -EHOSTDOWN
               : _i == MS_STALE        ? -ESTALE
               : _i == MS_MAIN_HOLD_FULL ? -EAGAIN
               : _i == MS_CORRUPT      ? -EHOSTDOWN
                                       : 0;
    uint64_t dropped0 = h->replies_dropped;
    ck_assert_int_eq(pm__hub_main_send(h, &to, type, 7,
                                       _i == MS_NULL_DATA || _i == MS_EMPTY ? NULL : data, len),
                     want);
    if (stdin_copy >= 0) {
        ck_assert_int_eq(fcntl(0, F_GETFD), -1); /* the hub's memfd at 0 went with its record */
        ck_assert_int_eq(dup2(stdin_copy, 0), 0);
        close(stdin_copy);
    }
    ck_assert_uint_eq(h->replies_dropped - dropped0, _i == MS_ANSWERS_FULL);
    ck_assert_int_eq(lone_faults, _i == MS_CORRUPT);
    if (_i == MS_QUEUED_MSG || _i == MS_QUEUED_REPLY) {
        ck_assert_uint_eq(d->q_frames, 1);
        ck_assert_uint_eq(h->main_held_frames, _i == MS_QUEUED_MSG);
        ck_assert_uint_eq(d->ans_frames, _i == MS_QUEUED_REPLY);
    }
    pm__frame_hdr f;
    const void *payload;
    int sent = want == 0 && _i < MS_QUEUED_MSG;
    /* No pm__hub_publish here: main's send publishes what it wrote. */
    int rc = _i < MS_QUEUED_MSG ? pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &payload) : 0;
    ck_assert_int_eq(rc, sent);
    if (sent) {
        ck_assert_uint_eq(f.type, PM__FT_MSG);
        ck_assert_uint_eq(f.src, PM__NODE_MAIN);
        ck_assert_uint_eq(f.dst, 1);
        ck_assert_uint_eq(f.dst_inc, 1);
        ck_assert_uint_eq(f.request_id, 7);
        ck_assert_int_eq(d->dirty, 0);
        lone_expect_payload(&worker, &f, payload, len, _i == MS_LARGE || _i == MS_LARGE_FD0);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * A port's incarnation ends (hub_route.c pm__hub_port_close): the
 * requests in flight to it are answered -EHOSTDOWN at once, each to its
 * requester, about that incarnation; its own requests to others are
 * forgotten (their replies will be late); the frames waiting for it (a
 * message and an answer) are dropped, every count of its queue back to 0,
 * and their sender, held by it, is read again; it is read no
 * more, and frames for it are answered -EHOSTDOWN; the next incarnation
 * starts with no any-worker record. A stop request sets the stop flag in
 * its control block and puts a STOP frame in its ring at once; a port
 * with no channel gets neither (nor a control frame: -EHOSTDOWN).
 */
START_TEST(test_lone_port_close)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *s = &h->ports[1], *d = &h->ports[2];
    ck_assert_int_eq(pm__hub_add_inflight(h, d, 1, 1, 5, 0), 0);
    ck_assert_int_eq(pm__hub_add_inflight(h, d, 1, 1, 6, 0), 0);
    ck_assert_int_eq(pm__hub_add_inflight(h, s, 2, 1, 8, 0), 0); /* d's own request */
    (void)lone_ring_full(h, 2);
    pm__frame_hdr g = lone_msg_to(2);
    g.type = PM__FT_REPLY;
    ck_assert_int_eq(pm__hub_push(h, d, &g, "r", 1, PM__CHARGE_ANSWER), 0); /* an answer waits too */
    ck_assert_uint_eq(d->ans_frames, 1);
    lone_frame_from(&worker[0], PM__FT_MSG, 2, 0, 0);
    lone_frame_from(&worker[0], PM__FT_MSG, 0, 0, 0); /* behind: not for d */
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(d->q_frames, 2);
    lone_hold_back(s, 2);
    d->any_held = 2;
    d->stuck = 1;
    d->busy = 1;
    d->want_arm = 1;
    pm__hub_stop_request(h, 2);
    struct pm__ctl *ctl = hub_end[1].map;
    ck_assert_int_eq(atomic_load(&ctl->stop), 1);
    ck_assert_int_eq(d->dirty, 0);
    ck_assert_uint_eq(d->q_frames, 3); /* behind the frames waiting: its ring is full */
    (void)lone_take(h, &worker[0], &(pm__frame_hdr){0}); /* slot 0's -EHOSTDOWN for port 1 */

    /* What its incarnation leaves: its drain clock (its queue stalled),
     * its own hold as a sender, its socket's state. */
    ck_assert_uint_ne(d->stall_since_ms, 0);
    d->drain_reported = 1;
    d->sock_full = 1;
    d->blocked_on = 1;
    d->left = 1;
    d->scan_pos = 5;
    d->dirty = 1;
    pm__hub_port_lanes_ok(h, 2, 1);
    pm__hub_port_lane_notes(h, 2, 1);
    pm__hub_port_close(h, 2);
    /* No incarnation: closed, and the next starts with no lanes until its
     * own hello says it speaks them. */
    ck_assert_int_eq(d->state, PM__PORT_CLOSED);
    ck_assert_int_eq(d->lanes_ok, 0);
    ck_assert_int_eq(d->lane_notes, 0);
    ck_assert_ptr_null(d->q_head);
    ck_assert_ptr_null(d->q_tail);
    ck_assert_uint_eq(d->q_frames, 0);
    ck_assert_uint_eq(d->q_bytes, 0);
    ck_assert_uint_eq(d->ans_frames, 0);
    ck_assert_uint_eq(d->ans_bytes, 0);
    ck_assert_uint_eq(d->stall_since_ms, 0);
    ck_assert_int_eq(d->drain_reported, 0);
    ck_assert_int_eq(d->sock_full, 0);
    ck_assert_int_eq(d->blocked_on, -1);
    ck_assert_int_eq(d->left, 0);
    ck_assert_uint_eq(d->scan_pos, 0);
    ck_assert_int_eq(d->dirty, 0);
    ck_assert_ptr_null(d->channel);
    ck_assert_int_eq(d->reading, 0);
    ck_assert_int_eq(d->busy, 0);
    ck_assert_int_eq(d->want_arm, 0);
    ck_assert_uint_eq(d->any_held, 0);
    ck_assert_uint_eq(d->stuck, 0);
    ck_assert_int_eq(s->blocked_on, -1); /* read again */
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    pm__frame_hdr f;
    for (uint64_t id = 5; id <= 6; id++) {
        ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
        ck_assert_uint_eq(f.type, PM__FT_UNDELIVERABLE);
        ck_assert_int_eq(f.error, -EHOSTDOWN);
        ck_assert_uint_eq(f.src, 2);
        ck_assert_uint_eq(f.src_inc, 1);
        ck_assert_uint_eq(f.request_id, id);
    }
    ck_assert_int_eq(lone_take(h, &worker[0], &f), 0);
    lone_frame_from(&worker[0], PM__FT_MSG, 2, 0, 0);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
    ck_assert_int_eq(f.error, -EHOSTDOWN);
    pm__hub_stop_request(h, 2); /* no channel: nothing */
    ck_assert_int_eq(pm__hub_send_control(h, 2, PM__FT_MSG, NULL, 0), -EHOSTDOWN);
    pm__hub_delete(h);
}
END_TEST

/* The not-draining reports a lone hub made. */
static int lone_not_draining, lone_not_draining_port;

static void lone_not_draining_cb(void *owner, unsigned p)
{
    (void)owner;
    lone_not_draining++;
    lone_not_draining_port = (int)p;
}

static const pm__hub_ops lone_not_draining_ops = {lone_fault, lone_control, lone_not_draining_cb, NULL};

/*
 * The hub's next deadline (hub_route.c pm__hub_next_deadline): the
 * earliest of its broadcasts', main's next request due, the purge of the
 * requests in flight (only while there is one), and each queued port's
 * drain timeout (its stall's start + drain_timeout_ms, while the timeout
 * is on and the stall not reported); a 0 is no deadline, never the
 * earliest. At the drain timeout exactly (pm__hub_fire), a queue that made
 * no progress is reported once (the owner's not_draining, the count), not
 * one millisecond earlier, not again in the same stall, never with the
 * timeout off; a port whose queue emptied leaves the timed list.
 */
START_TEST(test_lone_deadlines_and_draining)
{
    pm__hub *h = lone_hub_with(2, &lone_not_draining_ops);
    lone_not_draining = 0;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    ck_assert_uint_eq(pm__hub_next_deadline(h), 0);
    h->next_purge_ms = 5000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 0); /* nothing in flight: no purge */
    lone_bcast_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 600000, lone_bcast_done, NULL), 0);
    uint64_t bdl = (uint64_t)h->bcasts->deadline_ms;
    ck_assert_uint_gt(bdl, 600000);
    h->next_purge_ms = 0; /* (the request in flight set one) */
    ck_assert_uint_eq(pm__hub_next_deadline(h), bdl); /* main's due 0 after it: not a deadline */
    h->next_purge_ms = 5000; /* the broadcast's request is in flight */
    ck_assert_uint_eq(pm__hub_next_deadline(h), 5000);
    h->main_request_due_ms = 4000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 4000);
    h->main_request_due_ms = 6000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 5000);

    (void)lone_ring_full(h, 1);
    pm__frame_hdr f = lone_msg_to(1);
    ck_assert_int_eq(pm__hub_push(h, d, &f, "x", 1, PM__NODE_MAIN), 0);
    ck_assert_int_eq(d->in_timed, 1);
    d->stall_since_ms = 1000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 5000); /* the timeout off */
    h->drain_timeout_ms = 500;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 1500);

    pm__hub_fire(h, 1499);
    ck_assert_int_eq(lone_not_draining, 0);
    pm__hub_fire(h, 1500);
    ck_assert_int_eq(lone_not_draining, 1);
    ck_assert_int_eq(lone_not_draining_port, 1);
    ck_assert_uint_eq(h->not_draining, 1);
    ck_assert_int_eq(d->drain_reported, 1);
    ck_assert_uint_eq(pm__hub_next_deadline(h), 5000); /* reported: no deadline of its own */
    pm__hub_fire(h, 2500);
    ck_assert_int_eq(lone_not_draining, 1); /* once a stall */
    ck_assert_int_eq(d->in_timed, 1);
    d->drain_reported = 0;
    h->drain_timeout_ms = 0;
    pm__hub_fire(h, 4500);
    ck_assert_int_eq(lone_not_draining, 0 + 1);
    h->drain_timeout_ms = 500;

    /* Emptied: off the timed list at the next fire; until then its
     * stall is over and it gives no deadline. */
    (void)lone_flush_all(h, 1, &worker);
    ck_assert_uint_eq(d->stall_since_ms, 0);
    ck_assert_int_eq(d->in_timed, 1);
    ck_assert_uint_eq(pm__hub_next_deadline(h), 5000);
    pm__hub_fire(h, 4600);
    ck_assert_int_eq(d->in_timed, 0);
    ck_assert_uint_eq(h->timed.n, 0);
    ck_assert_int_eq(lone_not_draining, 1);
    pm__hub_delete(h);
}
END_TEST

/*
 * A broadcast at its deadline (hub_route.c pm__hub_fire, given the time):
 * not a millisecond before it; at it, every result still pending is
 * -ETIMEDOUT, the callback runs once, and the worker's entry for it is
 * forgotten, so that its answer after that is late and counted.
 */
START_TEST(test_lone_broadcast_at_its_deadline)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    lone_bcast_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 600000, lone_bcast_done, NULL), 0);
    uint64_t dl = (uint64_t)h->bcasts->deadline_ms;
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 2);
    pm__hub_fire(h, dl - 1);
    ck_assert_int_eq(lone_bcast_calls, 0);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 2);
    pm__hub_fire(h, dl);
    ck_assert_int_eq(lone_bcast_calls, 1);
    ck_assert_uint_eq(lone_bcast_n, 2);
    ck_assert_int_eq(lone_bcast_err, -ETIMEDOUT);
    ck_assert_ptr_null(h->bcasts);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    ck_assert_uint_eq(h->ports[1].main_inflight, 0);
    (void)lone_answer_with(h, &worker[0], "late", NULL);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(h->late_replies, 1);
    ck_assert_int_eq(lone_bcast_calls, 1);
    pm__hub_delete(h);
}
END_TEST

/*
 * A worker's answer to main's broadcast past its entry's deadline, before
 * the broadcast's timer ran: the broadcast, still open, takes it (not
 * late). After pm__hub_cancel_all ended the broadcast (-ECANCELED): late,
 * counted once (hub_main.c main_answer, hub_route.c relay_reply).
 */
enum { BL_PAST_ENTRY, BL_CANCELLED, BL_ROWS };

START_TEST(test_lone_broadcast_late_rules)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    lone_bcast_calls = 0;
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 600000, lone_bcast_done, NULL), 0);
    ck_assert_uint_eq(h->ports[1].ninflight, 1);
    if (_i == BL_PAST_ENTRY)
        h->ports[1].inflight[0].deadline_ms = 1;
    else {
        pm__hub_cancel_all(h);
        ck_assert_int_eq(lone_bcast_calls, 1);
        ck_assert_int_eq(lone_bcast_err, -ECANCELED);
    }
    lone_answer(h, &worker);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(lone_bcast_calls, 1);
    ck_assert_uint_eq(h->late_replies, _i == BL_CANCELLED);
    if (_i == BL_PAST_ENTRY) {
        ck_assert_uint_eq(lone_bcast_n, 1);
        ck_assert_int_eq(lone_bcast_err, 0);
        ck_assert_str_eq(lone_bcast_data, "pong");
    }
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    pm__hub_delete(h);
}
END_TEST

/* A request's callback run as the hub is freed starts a broadcast, whose
 * callback (run when the hub ends the broadcasts) starts another; that
 * one's callback, run after main's table of requests is gone, asks to
 * cancel one of main's requests: the answer is -ENOENT. */
static pm__hub *lone_freeing;
static int lone_free_cancel = 1;

static void lone_free_bcast_done(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)r, (void)n;
    if (arg != NULL)
        ck_assert_int_eq(pm__hub_broadcast(lone_freeing, "b", 1, 600000, lone_free_bcast_done, NULL),
                         0);
    else
        lone_free_cancel = pm__hub_cancel(lone_freeing, 1);
}

static void lone_free_req_done(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)m;
    if (arg != NULL)
        ck_assert_int_eq(pm__hub_broadcast(lone_freeing, "b", 1, 600000, lone_free_bcast_done,
                                           lone_freeing),
                         0);
}

START_TEST(test_lone_callbacks_while_freed)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    lone_freeing = h;
    for (int k = 0; k < 100; k++) /* the table grown: buckets to look in */
        ck_assert_int_gt(pm__hub_request(h, NULL, "r", 1, 600000, lone_free_req_done,
                                         k == 0 ? h : NULL),
                         0);
    lone_free_cancel = 1;
    pm__hub_delete(h);
    ck_assert_int_eq(lone_free_cancel, -ENOENT);
}
END_TEST

/*
 * The next deadline with every port of the hub on the timed list (both
 * ports of a two-port hub stalled): each one's drain deadline is seen,
 * the earliest wins, and nothing past the list is read (the sanitizer
 * build would report a read one past it).
 */
START_TEST(test_lone_deadline_every_port_timed)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end[2], worker[2];
    lone_port_at(h, 0, &hub_end[0], &worker[0]);
    lone_port_at(h, 1, &hub_end[1], &worker[1]);
    pm__frame_hdr f = lone_msg_to(0);
    for (unsigned i = 0; i < 2; i++) {
        (void)lone_ring_full(h, i);
        f.dst = i;
        ck_assert_int_eq(pm__hub_push(h, &h->ports[i], &f, "x", 1, PM__NODE_MAIN), 0);
    }
    ck_assert_uint_eq(h->timed.n, 2);
    h->drain_timeout_ms = 500;
    h->ports[0].stall_since_ms = 2000;
    h->ports[1].stall_since_ms = 1000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 1500);
    h->ports[1].stall_since_ms = 3000;
    ck_assert_uint_eq(pm__hub_next_deadline(h), 2500);
    pm__hub_delete(h);
}
END_TEST

/*
 * A mesh's host table (hub_route.c pm__hub_host_index): outside peer mode,
 * for a name that is not one, or for this host's own name: -EINVAL. A new
 * name gets the next index and is published to every port with a channel
 * (its control block's table, count last), a closed port left alone; a
 * known name its index again; past PM__MAX_HOSTS: -ENOSPC, the table
 * unchanged. A port opened later gets the whole table (pm__hub_hosts_copy).
 */
START_TEST(test_lone_host_index)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    ck_assert_int_eq(pm__hub_host_index(h, "b"), -EINVAL);
    pm__hub_peer_mode(h);
    ck_assert_int_eq(pm__hub_host_index(h, "a"), -EINVAL); /* its own */
    ck_assert_int_eq(pm__hub_host_index(h, "no such/name"), -EINVAL);
    ck_assert_int_eq(pm__hub_host_index(h, ""), -EINVAL);
    struct pm__ctl *ctl = hub_end.map;
    ck_assert_int_eq(pm__hub_host_index(h, "b"), 1);
    ck_assert_int_eq(pm__hub_host_index(h, "c"), 2);
    ck_assert_int_eq(pm__hub_host_index(h, "b"), 1);
    ck_assert_uint_eq(atomic_load(&ctl->hosts.count), 3);
    ck_assert_str_eq(ctl->hosts.name[1], "b");
    ck_assert_str_eq(ctl->hosts.name[2], "c");
    char name[16];
    for (unsigned i = 3; i < PM__MAX_HOSTS; i++) {
        snprintf(name, sizeof(name), "h%u", i);
        ck_assert_int_eq(pm__hub_host_index(h, name), (int)i);
    }
    ck_assert_int_eq(pm__hub_host_index(h, "one-more"), -ENOSPC);
    ck_assert_uint_eq(atomic_load(&h->hosts.count), PM__MAX_HOSTS);
    ck_assert_uint_eq(atomic_load(&ctl->hosts.count), PM__MAX_HOSTS);
    snprintf(name, sizeof(name), "h%u", PM__MAX_HOSTS - 1);
    ck_assert_str_eq(ctl->hosts.name[PM__MAX_HOSTS - 1], name);
    /* Every address of another host is named by the table (pm__hub_names,
     * which the hub's messages and answers to main use). */
    pm_address ab;
    pm__node_address_at(pm__hub_names(h), 1, 11, 7, &ab);
    ck_assert_str_eq(ab.host, "b");
    ck_assert_uint_eq(ab.port, 11);
    pm__channel hub2, worker2;
    lone_port_at(h, 2, &hub2, &worker2);
    h->unreachable = UINT64_MAX; /* what follows the hub's own table, made visible */
    pm__hub_hosts_copy(h, &hub2);
    struct pm__ctl *ctl2 = hub2.map;
    static const unsigned char zero_name[PM_NAME_MAX];
    ck_assert_mem_eq((const unsigned char *)(&ctl2->hosts + 1), zero_name, PM_NAME_MAX); /* nothing past it */
    ck_assert_int_eq(ctl2->peer_mode, 1);
    ck_assert_uint_eq(atomic_load(&ctl2->hosts.count), PM__MAX_HOSTS);
    ck_assert_str_eq(ctl2->hosts.name[1], "b");
    ck_assert_str_eq(ctl2->hosts.name[PM__MAX_HOSTS - 1], name);
    pm__hub_delete(h);
}
END_TEST

/* A link that takes every frame (nothing comes back on it). */
static int lone_link_accept(void *arg, const void *frame, size_t len)
{
    (void)arg, (void)frame, (void)len;
    return 0;
}

static void lone_mesh_done(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)r, (void)n, (void)arg;
}

/*
 * What a fork-mode child must not keep of other workers' traffic
 * (hub_route.c): pm__hub_child_fds names every large message's fd the hub
 * holds in a queue (fd 0 included) and says whether any queue holds
 * frames; pm__hub_wipe_data zeroes the queued frames (when asked to walk
 * the ports), a broadcast's copies of the replies, and the scratch buffer
 * when the kernel did not wipe it on fork (MADV_WIPEONFORK refused).
 */
START_TEST(test_lone_child_fds_and_wipe)
{
    pm__hub *h = lone_hub(3);
    /* The scratch buffer is marked wipe-on-fork whenever the kernel takes
     * the advice (probed on a page of the test's own): a fork child finds
     * it zeroed with nothing for the hub to do. */
    void *probe = mmap(NULL, 4096, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(probe != MAP_FAILED);
    int wipes = madvise(probe, 4096, MADV_WIPEONFORK) == 0;
    munmap(probe, 4096);
    ck_assert_int_eq(h->scratch_mapped, wipes);
    if (wipes) {
        memset(h->scratch, 'x', 16);
        pid_t child = fork();
        ck_assert_int_ge(child, 0);
        if (child == 0)
            _exit(h->scratch[0] == 0 ? 0 : 1);
        int st;
        ck_assert_int_eq(waitpid(child, &st, 0), child);
        ck_assert(WIFEXITED(st) && WEXITSTATUS(st) == 0);
    }
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    lone_child_nfds = 0;
    ck_assert_int_eq(pm__hub_child_fds(h, lone_child_fd, NULL), 0);
    ck_assert_int_eq(lone_child_nfds, 0);
    (void)lone_ring_full(h, 1);
    pm__frame_hdr f = lone_msg_to(1);
    ck_assert_int_eq(pm__hub_push(h, &h->ports[1], &f, "secret", 6, 0), 0);
    int stdin_copy = dup(0);
    ck_assert_int_ge(stdin_copy, 0);
    ck_assert_int_eq(pm__hub_push_fd(h, &h->ports[1], &f, lone_big_fd(0), LONE_BIG_LEN, 0), 0);
    ck_assert_int_eq(pm__hub_child_fds(h, lone_child_fd, NULL), 1);
    ck_assert_int_eq(lone_child_nfds, 1);
    ck_assert_int_eq(lone_child_fds[0], 0);
    /* Fd 0 held as the frame being read of a sender held back (rx_fd),
     * and as a waiting large request of main's: named too. */
    h->ports[2].rx_fd = 0;
    lone_child_nfds = 0;
    (void)pm__hub_child_fds(h, lone_child_fd, NULL);
    ck_assert_int_eq(lone_child_nfds, 2);
    ck_assert_int_eq(lone_child_fds[1], 0);
    h->ports[2].rx_fd = -1;
    pm__main_request held = {.fd = 0};
    h->waiting = &held;
    lone_child_nfds = 0;
    (void)pm__hub_child_fds(h, lone_child_fd, NULL);
    ck_assert_int_eq(lone_child_nfds, 2);
    ck_assert_int_eq(lone_child_fds[1], 0);
    h->waiting = NULL;

    /* A broadcast with one reply in hand (port 2's), port 1's pending. */
    ck_assert_int_eq(pm__hub_broadcast(h, "b", 1, 60000, lone_bcast_done, NULL), 0);
    (void)lone_answer_with(h, &worker[1], "reply-secret", NULL);
    pm__hub_port_service(h, 2);
    ck_assert_ptr_nonnull(h->bcasts);
    const pm__bcast *b = h->bcasts;
    size_t got = b->n;
    for (size_t i = 0; i < b->n; i++)
        if (b->bufs[i] != NULL)
            got = i;
    ck_assert_uint_lt(got, b->n);
    ck_assert_mem_eq(b->bufs[got], "reply-secret", 12);

    /* A mesh broadcast whose local part is over (port 2 answered, its
     * copy kept) while host b's part is pending. */
    pm__hub_peer_mode(h);
    int host_b = pm__hub_host_index(h, "b");
    ck_assert_int_ge(host_b, 1);
    pm__hub_link_up(h, (uint16_t)host_b, lone_link_accept, NULL);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING); /* the local part: port 2 alone */
    ck_assert_int_eq(pm__hub_broadcast_mesh(h, "m", 1, 60000, lone_mesh_done, NULL), 0);
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    (void)lone_answer_with(h, &worker[1], "mesh-secret", NULL);
    pm__hub_port_service(h, 2);
    const pm__mesh_broadcast *mb = h->mesh_broadcasts;
    ck_assert_ptr_nonnull(mb);
    size_t mgot = mb->n;
    for (size_t i = 0; i < mb->n; i++)
        if (mb->bufs[i] != NULL)
            mgot = i;
    ck_assert_uint_lt(mgot, mb->n);
    ck_assert_mem_eq(mb->bufs[mgot], "mesh-secret", 11);

    pm__qframe *q = h->ports[1].q_head;
    memset(h->scratch, 'x', 16);
    h->scratch_mapped = 1; /* the kernel wipes it in the child: left alone */
    pm__hub_wipe_data(h, 0);
    ck_assert_mem_eq(q->data + PM__FRAME_HDR_SIZE, "secret", 6); /* the ports not walked */
    ck_assert_int_eq(h->scratch[0], 'x');
    static const unsigned char zero[16];
    ck_assert_mem_eq(b->bufs[got], zero, 12);
    ck_assert_mem_eq(mb->bufs[mgot], zero, 11);
    h->scratch_mapped = 0;
    unsigned char waiting_data[6];
    memcpy(waiting_data, "secret", 6);
    pm__main_request waiting = {.fd = -1, .data = waiting_data, .len = 6};
    h->waiting = &waiting; /* a request of main's waiting with its copy */
    pm__hub_wipe_data(h, 1);
    h->waiting = NULL;
    ck_assert_mem_eq(waiting_data, zero, 6);
    ck_assert_mem_eq(q->data, zero, 16);
    ck_assert_mem_eq(q->data + PM__FRAME_HDR_SIZE, zero, 6);
    ck_assert_mem_eq(h->scratch, zero, 16);
    pm__hub_delete(h);
    ck_assert_int_eq(dup2(stdin_copy, 0), 0);
    close(stdin_copy);
}
END_TEST

/* ---------------------------------------------------------------- main's requests */

/* What main's request callbacks got on a lone hub (hub_main.c), and what
 * pm__hub_outcome said inside them. */
static pm__hub *lone_req_hub;
static int lone_req_calls;
static pm_message lone_req_msg;
static char lone_req_data[8];
static int lone_req_outcome_null;
static pm_request_outcome lone_req_outcome;
static uint64_t lone_req_ids[512]; /* the request ids, in callback order */

static void lone_req_done(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)arg;
    if (lone_req_calls < (int)ARRAY_LEN(lone_req_ids))
        lone_req_ids[lone_req_calls] = m->request_id;
    lone_req_calls++;
    lone_req_msg = *m;
    memset(lone_req_data, 0, sizeof(lone_req_data));
    if (m->data != NULL && m->len > 0)
        memcpy(lone_req_data, m->data, m->len < sizeof(lone_req_data) ? m->len : sizeof(lone_req_data) - 1);
    const pm_request_outcome *o = pm__hub_outcome(lone_req_hub, m);
    lone_req_outcome_null = o == NULL;
    if (o != NULL)
        lone_req_outcome = *o;
    lone_req_msg.data = NULL; /* (valid during the callback only) */
}

static void lone_req_reset(pm__hub *h)
{
    lone_req_hub = h;
    lone_req_calls = 0;
    memset(&lone_req_msg, 0, sizeof(lone_req_msg));
    memset(&lone_req_outcome, 0, sizeof(lone_req_outcome));
    lone_req_outcome_null = -1;
}

/* Main's request id on a lone hub: its record, NULL if none. */
static pm__main_request *lone_request_of(pm__hub *h, int id)
{
    return pm_test_main_request(h, id);
}

static pm_address lone_addr(pm__hub *h, uint32_t node, uint64_t inc)
{
    pm_address a;
    pm__node_address(&h->names, node, inc, &a);
    return a;
}

/* A lone worker's reply to main's request id, "hi", then its port serviced. */
static void lone_answer_main(pm__hub *h, unsigned port, pm__channel *worker, uint64_t id)
{
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REPLY;
    f.dst = PM__NODE_MAIN;
    f.request_id = id;
    ck_assert_int_eq(pm__frame_send(&worker->tx, &f, "hi", 2), 0);
    pm__hub_port_service(h, port);
}

/* The from address of the last answer: the worker's port and incarnation,
 * 0 0 when it never left main. */
static void lone_req_from(unsigned port, uint64_t inc)
{
    ck_assert_uint_eq(lone_req_msg.from.port, port);
    ck_assert_uint_eq(lone_req_msg.from.incarnation, inc);
    ck_assert_uint_eq(lone_req_msg.to.port, 0); /* main: t@main:0 */
    ck_assert_str_eq(lone_req_msg.to.host, "main");
    ck_assert_str_eq(lone_req_msg.to.system, "t");
    ck_assert_int_eq(lone_req_msg.kind, PM_MSG_REPLY);
}

/*
 * Main's requests (hub_main.c pm__hub_request), one row each, on a lone
 * hub whose port 1 is ready and port 2 closed: no callback, a timeout of
 * 0 or below, data NULL with a length: -EINVAL; one byte past
 * max_message: -EMSGSIZE, exactly max_message: sent; after
 * pm__hub_cancel_all: -ESHUTDOWN; main itself: -EINVAL; another system:
 * -ENOENT; a closed port: -EHOSTDOWN; another incarnation: -ESTALE; main's
 * hold full behind a full ring: -EAGAIN; a corrupt ring: -EHOSTDOWN and
 * the port faulted. Refused: nothing remembered, no callback ever. Sent,
 * named or to any worker: an id > 0, the frame in the worker's ring at
 * once (no turn of the loop), from main, with the id, the deadline and
 * the payload (a large one as a memfd, also when the memfd is fd 0), in
 * flight to that incarnation
 * (an any-worker one held against its port); behind a full ring, queued.
 * Cancelled: one -ECANCELED callback naming the worker, everything
 * released, and the worker's answer after it is late.
 */
enum { RQ_NO_CB, RQ_ZERO_TIMEOUT, RQ_NEG_TIMEOUT, RQ_NULL_DATA, RQ_TOO_LONG, RQ_MAX_LEN,
       RQ_EMPTY, RQ_SHUT, RQ_TO_MAIN, RQ_OTHER_SYSTEM, RQ_CLOSED, RQ_STALE, RQ_HOLD_FULL,
       RQ_CORRUPT, RQ_NAMED, RQ_ANY, RQ_LARGE, RQ_LARGE_FD0, RQ_QUEUED, RQ_ROWS };

START_TEST(test_lone_request_rules)
{
    pm__hub *h = lone_hub_with(3, &lone_fault_ops);
    lone_faults = 0;
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__port *d = &h->ports[1];
    static unsigned char data[PM_MAX_PAYLOAD + 1];
    memset(data, 'd', sizeof(data));
    size_t len = 2;
    pm_address to = lone_addr(h, _i == RQ_TO_MAIN ? PM__NODE_MAIN : _i == RQ_CLOSED ? 2 : 1,
                              _i == RQ_STALE ? 5 : 0);
    if (_i == RQ_OTHER_SYSTEM)
        snprintf(to.system, sizeof(to.system), "u");
    if (_i == RQ_TOO_LONG || _i == RQ_MAX_LEN) {
        h->max_message = 100;
        len = _i == RQ_TOO_LONG ? 101 : 100;
    }
    int large = _i == RQ_LARGE || _i == RQ_LARGE_FD0;
    if (large) {
        h->max_message = 2 * PM_MAX_PAYLOAD;
        len = PM_MAX_PAYLOAD + 1;
    }
    int stdin_copy = -1;
    if (_i == RQ_LARGE_FD0) {
        /* fd 0 free: the request's memfd is made there. */
        stdin_copy = dup(0);
        ck_assert_int_ge(stdin_copy, 0);
        close(0);
    }
    if (_i == RQ_EMPTY)
        len = 0;
    if (_i == RQ_SHUT)
        pm__hub_cancel_all(h);
    if (_i == RQ_HOLD_FULL || _i == RQ_CORRUPT || _i == RQ_QUEUED)
        (void)lone_ring_full(h, 1);
    if (_i == RQ_HOLD_FULL)
        for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
            ck_assert_int_eq(pm__hub_main_send(h, &to, PM__FT_MSG, 0, "q", 1), 0);
    if (_i == RQ_CORRUPT)
        atomic_store(&worker.rx.sh->tail, 3);
    int want = _i == RQ_NO_CB || _i == RQ_ZERO_TIMEOUT || _i == RQ_NEG_TIMEOUT ||
                       _i == RQ_NULL_DATA || _i == RQ_TO_MAIN
                   ? -EINVAL
               : _i == RQ_TOO_LONG     ? -EMSGSIZE
               : _i == RQ_SHUT         ? -ESHUTDOWN
               : _i == RQ_OTHER_SYSTEM ? -ENOENT
               : _i == RQ_CLOSED       ? -EHOSTDOWN
               : _i == RQ_STALE        ? -ESTALE
               : _i == RQ_HOLD_FULL    ? -EAGAIN
               : _i == RQ_CORRUPT      ? -EHOSTDOWN
                                       : 0;
    int timeout = _i == RQ_ZERO_TIMEOUT ? 0 : _i == RQ_NEG_TIMEOUT ? -1 : 600000;
    const void *payload = _i == RQ_NULL_DATA || _i == RQ_EMPTY ? NULL : data;
    int64_t before = (int64_t)pm__now_ms();
    int id = pm__hub_request(h, _i == RQ_ANY ? NULL : &to, payload, len, timeout,
                             _i == RQ_NO_CB ? NULL : lone_req_done, NULL);
    int64_t after = (int64_t)pm__now_ms();
    ck_assert_int_eq(lone_faults, _i == RQ_CORRUPT);
    ck_assert_int_eq(lone_req_calls, 0);
    if (want < 0) {
        ck_assert_int_eq(id, want);
        ck_assert_uint_eq(h->main_request_count, 0);
        ck_assert_uint_eq(d->main_inflight, 0);
        ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
        ck_assert_uint_eq(d->any_held, 0);
        ck_assert_uint_eq(h->nwaiting, 0);
        ck_assert_int_eq(pm__hub_port_holds_main(h, 1), 0);
        if (_i != RQ_HOLD_FULL && _i != RQ_CORRUPT)
            ck_assert_int_eq(lone_take(h, &worker, &(pm__frame_hdr){0}), 0);
        if (_i == RQ_CORRUPT)
            ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
        pm__hub_delete(h);
        return;
    }
    ck_assert_int_gt(id, 0);
    pm__main_request *r = lone_request_of(h, id);
    ck_assert_ptr_nonnull(r);
    ck_assert_uint_eq(r->port, 1);
    ck_assert_uint_eq(r->target_inc, 1);
    ck_assert_int_eq(r->any, _i == RQ_ANY);
    ck_assert_int_eq(r->fd, -1);
    ck_assert_ptr_null(r->data);
    ck_assert_int_ge(r->deadline_ms, before + timeout);
    ck_assert_int_le(r->deadline_ms, after + timeout);
    ck_assert_int_eq(h->main_request_due_ms, r->deadline_ms);
    ck_assert_uint_eq(h->main_request_count, 1);
    ck_assert_uint_eq(d->any_held, _i == RQ_ANY);
    ck_assert_uint_eq(d->main_inflight, 1);
    ck_assert_int_eq(pm__hub_port_holds_main(h, 1), 1);
    ck_assert_int_eq(pm__hub_port_holds_main(h, 2), 0);
    ck_assert_uint_eq(h->nwaiting, 0);
    if (_i == RQ_QUEUED) {
        ck_assert_uint_eq(d->q_frames, 1);
        ck_assert_uint_eq(h->main_held_frames, 1);
    } else {
        /* No pm__hub_publish: the request is published as it is sent. */
        pm__frame_hdr f;
        const void *got;
        ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &got), 1);
        ck_assert_int_eq(d->dirty, 0);
        ck_assert_uint_eq(f.type, PM__FT_REQUEST);
        ck_assert_uint_eq(f.src, PM__NODE_MAIN);
        ck_assert_uint_eq(f.dst, 1);
        ck_assert_uint_eq(f.dst_inc, 1);
        ck_assert_uint_eq(f.request_id, (uint64_t)id);
        ck_assert_int_eq(f.deadline_ms, r->deadline_ms);
        lone_expect_payload(&worker, &f, got, len, large);
        ck_assert(large || len == 0 || memcmp(got, data, len) == 0);
        pm__ring_consume(&worker.rx);
        pm__ring_release(&worker.rx);
    }
    int64_t deadline = r->deadline_ms;
    ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id), 0);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_int_eq(lone_req_msg.error, -ECANCELED);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)id);
    ck_assert_uint_eq(lone_req_msg.len, 0);
    ck_assert_int_eq(lone_req_msg.deadline_ms, deadline);
    lone_req_from(11, 1);
    ck_assert_int_eq(lone_req_outcome_null, 0);
    ck_assert_int_eq(lone_req_outcome.error, -ECANCELED);
    ck_assert_uint_eq(lone_req_outcome.worker.port, 11);
    ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id), -ENOENT);
    ck_assert_uint_eq(h->main_request_count, 0);
    ck_assert_uint_eq(d->any_held, 0);
    ck_assert_uint_eq(d->main_inflight, 0);
    ck_assert_int_eq(pm__hub_port_holds_main(h, 1), 0);
    if (_i != RQ_QUEUED) {
        lone_answer_main(h, 1, &worker, (uint64_t)id);
        ck_assert_uint_eq(h->late_replies, 1);
        ck_assert_int_eq(lone_req_calls, 1);
    }
    pm__hub_delete(h);
    if (stdin_copy >= 0) {
        ck_assert_int_eq(dup2(stdin_copy, 0), 0);
        close(stdin_copy);
    }
}
END_TEST

/*
 * The worker an any-worker request goes to (hub_main.c pick_worker), one
 * row each, ports 1 and 2 ready (port 3 closed): port 1 unless the row
 * makes it unfit: not ready (starting, stopping), no longer read, holding
 * any_per_worker of main's any-worker requests (one below: still fit),
 * owing an answer to a request that timed out, or with more of main's
 * requests in flight than port 2; ties go round robin from after the
 * port picked last (the pick remembered), wrapping past the last port.
 * None fits: the request waits in main, sent to nobody.
 */
enum { PK_FIRST, PK_STARTING, PK_STOPPING, PK_NOT_READING, PK_HELD, PK_HELD_BELOW, PK_STUCK,
       PK_BUSIER, PK_LESS_BUSY, PK_ROUND_ROBIN, PK_WRAP, PK_NONE, PK_ROWS };

START_TEST(test_lone_pick_worker)
{
    pm__hub *h = lone_hub(4);
    lone_req_reset(h);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *p1 = &h->ports[1], *p2 = &h->ports[2];
    if (_i == PK_STARTING)
        pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    if (_i == PK_STOPPING)
        pm__hub_port_set_state(h, 1, PM__PORT_STOPPING);
    if (_i == PK_NOT_READING)
        p1->reading = 0;
    if (_i == PK_HELD || _i == PK_HELD_BELOW)
        p1->any_held = 1;
    if (_i == PK_HELD_BELOW)
        h->any_per_worker = 2;
    if (_i == PK_STUCK || _i == PK_NONE)
        p1->stuck = 1;
    if (_i == PK_NONE)
        p2->stuck = 1;
    if (_i == PK_BUSIER)
        ck_assert_int_eq(pm__hub_add_inflight(h, p1, PM__NODE_MAIN, 0, PM__BCAST_ID_BASE, 0), 0);
    if (_i == PK_LESS_BUSY) {
        ck_assert_int_eq(pm__hub_add_inflight(h, p2, PM__NODE_MAIN, 0, PM__BCAST_ID_BASE, 0), 0);
        h->main_request_rr = 1; /* port 2 would come first */
    }
    if (_i == PK_ROUND_ROBIN)
        h->main_request_rr = 1;
    if (_i == PK_WRAP)
        h->main_request_rr = 2; /* 3 (closed), 0 (main), then 1 */
    unsigned want = _i == PK_NONE ? 0
                    : _i == PK_STARTING || _i == PK_STOPPING || _i == PK_NOT_READING ||
                              _i == PK_HELD || _i == PK_STUCK || _i == PK_BUSIER ||
                              _i == PK_ROUND_ROBIN
                        ? 2
                        : 1;
    unsigned rr0 = h->main_request_rr;
    int id = pm__hub_request(h, NULL, "x", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(id, 0);
    pm__main_request *r = lone_request_of(h, id);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker[0], &f), want == 1);
    ck_assert_int_eq(lone_take(h, &worker[1], &f), want == 2);
    if (want == 0) {
        ck_assert_uint_eq(r->port, PM__MAIN_REQUEST_WAITING);
        ck_assert_ptr_eq(h->waiting, r);
        ck_assert_ptr_eq(h->waiting_tail, r);
        ck_assert_uint_eq(h->nwaiting, 1);
        ck_assert_uint_eq(h->main_request_rr, rr0);
        ck_assert_uint_eq(r->len, 1);
        ck_assert_int_eq(r->data[0], 'x');
    } else {
        ck_assert_uint_eq(r->port, want);
        ck_assert_uint_eq(f.request_id, (uint64_t)id);
        ck_assert_uint_eq(h->main_request_rr, want);
        ck_assert_uint_eq(h->ports[want].any_held, 1u + (_i == PK_HELD_BELOW));
        ck_assert_uint_eq(h->nwaiting, 0);
        ck_assert_ptr_null(h->waiting);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's waiting requests (hub_main.c): with no ready worker, any-worker
 * requests wait in arrival order, each with a private copy of its payload,
 * up to queue_max (past it -EAGAIN at once; a named request never waits
 * there). A cancelled one leaves the list wherever it is (head, middle,
 * tail), the list and its tail kept whole. When a worker is ready they go
 * out oldest first, one per free worker, and a new any-worker request
 * never overtakes them; a worker that answers takes the next.
 */
START_TEST(test_lone_waiting_requests)
{
    pm__hub *h = lone_hub(3);
    lone_req_reset(h);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    pm__hub_port_set_state(h, 2, PM__PORT_STARTING);
    h->queue_max = 4;
    char text[5][4] = {"a", "bb", "ccc", "d", "e"};
    int id[5];
    for (int k = 0; k < 4; k++) {
        id[k] = pm__hub_request(h, NULL, text[k], strlen(text[k]), 600000, lone_req_done, NULL);
        ck_assert_int_gt(id[k], 0);
        pm__main_request *r = lone_request_of(h, id[k]);
        ck_assert_uint_eq(r->port, PM__MAIN_REQUEST_WAITING);
        ck_assert_uint_eq(r->len, strlen(text[k]));
        ck_assert_ptr_ne(r->data, (unsigned char *)text[k]);
        ck_assert(memcmp(r->data, text[k], r->len) == 0);
    }
    ck_assert_int_eq(pm__hub_request(h, NULL, "e", 1, 600000, lone_req_done, NULL), -EAGAIN);
    pm_address to = lone_addr(h, 1, 0);
    ck_assert_int_eq(pm__hub_request(h, &to, "n", 1, 600000, lone_req_done, NULL), -EHOSTDOWN);
    ck_assert_uint_eq(h->nwaiting, 4);
    ck_assert_uint_eq(h->main_request_count, 4);

    /* Out of the list: the middle (bb), the tail (d), the head (a). */
    ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id[1]), 0);
    ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id[3]), 0);
    ck_assert_uint_eq(h->nwaiting, 2);
    ck_assert_ptr_eq(h->waiting, lone_request_of(h, id[0]));
    ck_assert_ptr_eq(h->waiting->wnext, lone_request_of(h, id[2]));
    ck_assert_ptr_eq(h->waiting_tail, lone_request_of(h, id[2]));
    ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id[0]), 0);
    ck_assert_ptr_eq(h->waiting, lone_request_of(h, id[2]));
    ck_assert_ptr_eq(h->waiting_tail, h->waiting);
    ck_assert_int_eq(lone_req_calls, 3);
    ck_assert_int_eq(lone_req_msg.error, -ECANCELED);
    ck_assert_uint_eq(lone_req_msg.from.port, 0); /* it never left main */
    ck_assert_uint_eq(lone_req_msg.from.incarnation, 0);
    ck_assert_str_eq(lone_req_msg.from.system, "");
    ck_assert_int_eq(lone_req_outcome.ended, 0);
    /* Appended behind the one left: ccc, then d2. */
    id[3] = pm__hub_request(h, NULL, "d2", 2, 600000, lone_req_done, NULL);
    ck_assert_ptr_eq(h->waiting->wnext, lone_request_of(h, id[3]));
    ck_assert_ptr_eq(h->waiting_tail, lone_request_of(h, id[3]));
    ck_assert_uint_eq(h->nwaiting, 2);

    /* Port 1 ready: ccc goes, d2 waits (one any-worker request a worker). */
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    pm__hub_main_request_dispatch_waiting(h);
    pm__frame_hdr f;
    const void *got;
    pm__hub_publish(h);
    ck_assert_int_eq(pm__frame_recv(&worker[0].rx, PM__CHANNEL_MAX_FRAME, &f, &got), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)id[2]);
    ck_assert_uint_eq(f.len, 3);
    ck_assert(memcmp(got, "ccc", 3) == 0);
    pm__ring_consume(&worker[0].rx);
    pm__ring_release(&worker[0].rx);
    pm__main_request *c = lone_request_of(h, id[2]);
    ck_assert_uint_eq(c->port, 1);
    ck_assert_ptr_null(c->data);
    ck_assert_ptr_null(c->wnext);
    ck_assert_uint_eq(h->nwaiting, 1);
    ck_assert_ptr_eq(h->waiting, lone_request_of(h, id[3]));
    ck_assert_ptr_eq(h->waiting_tail, h->waiting);

    /* Port 2 ready: a new request sends d2 first and waits itself. */
    pm__hub_port_set_state(h, 2, PM__PORT_READY);
    id[4] = pm__hub_request(h, NULL, "e", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(id[4], 0);
    ck_assert_int_eq(lone_take(h, &worker[1], &f), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)id[3]);
    ck_assert_ptr_eq(h->waiting, lone_request_of(h, id[4]));
    ck_assert_uint_eq(h->nwaiting, 1);
    /* Port 1 answers ccc: e goes to it at the next dispatch. */
    lone_answer_main(h, 1, &worker[0], (uint64_t)id[2]);
    ck_assert_int_eq(lone_req_calls, 4);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)id[2]);
    ck_assert_int_eq(lone_req_msg.error, 0);
    ck_assert_str_eq(lone_req_data, "hi");
    ck_assert_uint_eq(h->ports[1].any_held, 0);
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)id[4]);
    ck_assert_ptr_null(h->waiting);
    ck_assert_ptr_null(h->waiting_tail);
    ck_assert_uint_eq(h->nwaiting, 0);
    ck_assert_uint_eq(h->main_request_count, 2);
    pm__hub_delete(h);
}
END_TEST

/*
 * A waiting request that cannot go out (hub_main.c
 * pm__hub_main_request_dispatch_waiting): its worker's ring corrupt, the
 * worker is faulted and the request answered -EHOSTDOWN at once, off the
 * list and the table; main's hold full behind a full ring, it waits on,
 * payload and place kept, sent once the worker reads.
 */
START_TEST(test_lone_waiting_not_sent)
{
    pm__hub *h = lone_hub_with(2, &lone_fault_ops);
    lone_faults = 0;
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    int id = pm__hub_request(h, NULL, "w", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(id, 0);
    (void)lone_ring_full(h, 1);
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    if (_i == 0) {
        atomic_store(&worker.rx.sh->tail, 3);
        pm__hub_main_request_dispatch_waiting(h);
        ck_assert_int_eq(lone_faults, 1);
        ck_assert_int_eq(lone_fault_reason, PM_REASON_CORRUPT_RING);
        ck_assert_int_eq(lone_req_calls, 1);
        ck_assert_int_eq(lone_req_msg.error, -EHOSTDOWN);
        ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)id);
        ck_assert_ptr_null(h->waiting);
        ck_assert_ptr_null(h->waiting_tail);
        ck_assert_uint_eq(h->nwaiting, 0);
        ck_assert_uint_eq(h->main_request_count, 0);
        ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
        ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)id), -ENOENT);
        pm__hub_delete(h);
        return;
    }
    pm_address to = lone_addr(h, 1, 0);
    for (unsigned k = 0; k < PM__HOLD_MAX_FRAMES; k++)
        ck_assert_int_eq(pm__hub_main_send(h, &to, PM__FT_MSG, 0, "q", 1), 0);
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_int_eq(lone_req_calls, 0);
    pm__main_request *r = lone_request_of(h, id);
    ck_assert_uint_eq(r->port, PM__MAIN_REQUEST_WAITING);
    ck_assert_ptr_eq(h->waiting, r);
    ck_assert_uint_eq(h->nwaiting, 1);
    ck_assert_int_eq(r->data[0], 'w');
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    ck_assert_uint_eq(h->ports[1].any_held, 0);
    /* The worker reads it all: the request goes. */
    unsigned n = lone_flush_all(h, 1, &worker);
    ck_assert_uint_gt(n, 0);
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_uint_eq(r->port, 1);
    ck_assert_uint_eq(h->nwaiting, 0);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker, &f), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)id);
    pm__hub_delete(h);
}
END_TEST

/*
 * A large any-worker request that waited (no worker ready) keeps its
 * sealed memfd, not a copy; when a worker is ready it goes out as that
 * memfd, which is the hub's from then on (the request keeps no fd: its
 * answer closes nothing twice); answered, nothing of it is left open.
 * The same with the worker's ring corrupt: answered -EHOSTDOWN, its
 * memfd closed; and with the memfd made at fd 0, no copy either
 * (hub_main.c pm__hub_request, pm__hub_main_request_dispatch_waiting).
 */
START_TEST(test_lone_waiting_large)
{
    pm__hub *h = lone_hub_with(2, &lone_fault_ops);
    lone_faults = 0;
    lone_req_reset(h);
    h->max_message = 2 * PM_MAX_PAYLOAD;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    static unsigned char data[PM_MAX_PAYLOAD + 1];
    memset(data, 'L', sizeof(data));
    int stdin_copy = -1;
    if (_i == 2) {
        stdin_copy = dup(0); /* fd 0 free: the request's memfd is made there */
        ck_assert_int_ge(stdin_copy, 0);
        close(0);
    }
    int id = pm__hub_request(h, NULL, data, sizeof(data), 600000, lone_req_done, NULL);
    ck_assert_int_gt(id, 0);
    pm__main_request *r = lone_request_of(h, id);
    ck_assert_uint_eq(r->port, PM__MAIN_REQUEST_WAITING);
    ck_assert_ptr_null(r->data);
    int fd = r->fd;
    ck_assert_int_eq(fd == 0, _i == 2);
    ck_assert_int_ge(fd, 0);
    ck_assert_int_ge(fcntl(fd, F_GETFD), 0);
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    if (_i == 1) {
        (void)lone_ring_full(h, 1); /* a full ring whose consumer index lies */
        atomic_store(&worker.rx.sh->tail, 3);
    }
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_ptr_null(h->waiting);
    if (_i == 1) {
        ck_assert_int_eq(lone_faults, 1);
        ck_assert_int_eq(lone_req_calls, 1);
        ck_assert_int_eq(lone_req_msg.error, -EHOSTDOWN);
        ck_assert_int_eq(fcntl(fd, F_GETFD), -1); /* closed with its request */
        pm__hub_delete(h);
        return;
    }
    ck_assert_uint_eq(r->port, 1);
    ck_assert_int_eq(r->fd, -1); /* the hub's now */
    pm__frame_hdr f;
    const void *got;
    pm__hub_publish(h);
    ck_assert_int_eq(pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &got), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)id);
    lone_expect_payload(&worker, &f, got, sizeof(data), 1);
    pm__ring_consume(&worker.rx);
    pm__ring_release(&worker.rx);
    lone_answer_main(h, 1, &worker, (uint64_t)id);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_int_eq(lone_req_msg.error, 0);
    pm__hub_delete(h);
    if (stdin_copy >= 0) {
        ck_assert_int_eq(dup2(stdin_copy, 0), 0);
        close(stdin_copy);
    }
}
END_TEST

/* The timed_out calls a lone hub made. */
static int lone_timed_out, lone_timed_out_port;

static void lone_timed_out_cb(void *owner, unsigned p)
{
    (void)owner;
    lone_timed_out++;
    lone_timed_out_port = (int)p;
}

static const pm__hub_ops lone_timeout_ops = {lone_fault_count, lone_control, lone_drain,
                                             lone_timed_out_cb};

/*
 * The answers to main's request (hub_main.c main_answer, relay_reply's
 * part), one row each: port 1 holds a named request, port 2 is ready. Its
 * worker's reply: one callback with the payload, from that worker to main,
 * the id, the deadline; its outcome (the worker, no exit, not killed);
 * nothing left in flight. Past the request's deadline before the timer saw
 * it: -ETIMEDOUT and no payload (the entry's deadline passed too: the reply
 * is also counted late). The same id answered by port 2, which does not hold
 * it: late, the request still waits for port 1. Twice: one callback, one
 * late. The worker ends: -EHOSTDOWN, the outcome telling how it ended (the
 * ending the owner set for that port and incarnation only), also past the
 * request's deadline (only a reply turns into -ETIMEDOUT there). Timed out, then
 * answered: late, and the worker owes no more (stuck back to 0), its
 * any-worker picks again; a late answer with an id of the broadcasts'
 * (PM__BCAST_ID_BASE, the lowest, nobody's) leaves it owing.
 */
enum { AN_REPLY, AN_DEADLINE, AN_BOTH_DEADLINES, AN_OTHER_WORKER, AN_TWICE, AN_ENDED,
       AN_ENDED_PAST_DEADLINE, AN_OTHER_ENDING, AN_TIMED_OUT_LATE, AN_BCAST_LATE, AN_ROWS };

START_TEST(test_lone_main_answers)
{
    pm__hub *h = lone_hub_with(3, &lone_timeout_ops);
    lone_req_reset(h);
    lone_timed_out = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *d = &h->ports[1];
    pm_address to = lone_addr(h, 1, 0);
    int id = pm__hub_request(h, &to, "q", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(id, 0);
    pm__main_request *r = lone_request_of(h, id);
    int64_t deadline = r->deadline_ms;
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker[0], &f), 1);
    int want_calls = 1, err = 0;
    uint64_t late = 0;
    switch (_i) {
    case AN_REPLY:
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        break;
    case AN_DEADLINE:
        r->deadline_ms = deadline = 1;
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        err = -ETIMEDOUT;
        late = 1; /* dropped and counted (pm_cluster_request(3)) */
        break;
    case AN_BOTH_DEADLINES:
        r->deadline_ms = deadline = 1;
        ck_assert_uint_eq(d->ninflight, 1);
        d->inflight[0].deadline_ms = 1;
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        err = -ETIMEDOUT;
        late = 1;
        break;
    case AN_OTHER_WORKER:
        lone_answer_main(h, 2, &worker[1], (uint64_t)id);
        ck_assert_int_eq(lone_req_calls, 0);
        ck_assert_uint_eq(h->late_replies, 1);
        ck_assert_ptr_eq(lone_request_of(h, id), r);
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        late = 1;
        break;
    case AN_TWICE:
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        lone_answer_main(h, 1, &worker[0], (uint64_t)id);
        late = 1;
        break;
    case AN_ENDED:
    case AN_ENDED_PAST_DEADLINE:
    case AN_OTHER_ENDING: {
        if (_i == AN_ENDED_PAST_DEADLINE)
            r->deadline_ms = deadline = 1; /* before the timer saw it: still how it ended */
        pm_crash_report crash;
        memset(&crash, 0, sizeof(crash));
        crash.state = PM_CRASH_RECORDED;
        crash.incarnation = 1;
        pm__ending e = {_i == AN_OTHER_ENDING ? 2 : 1, 1, -1, 11, 1, PM_REASON_SIGNAL, &crash};
        pm__hub_set_ending(h, &e);
        pm__hub_port_close(h, 1);
        pm__hub_set_ending(h, NULL);
        err = -EHOSTDOWN;
        break;
    }
    case AN_TIMED_OUT_LATE:
    case AN_BCAST_LATE:
        pm__hub_main_request_expire(h, deadline);
        ck_assert_int_eq(lone_req_calls, 1);
        ck_assert_int_eq(lone_req_msg.error, -ETIMEDOUT);
        ck_assert_uint_eq(d->stuck, 1);
        lone_answer_main(h, 1, &worker[0],
                         _i == AN_BCAST_LATE ? PM__BCAST_ID_BASE : (uint64_t)id);
        ck_assert_uint_eq(d->stuck, _i == AN_BCAST_LATE);
        err = -ETIMEDOUT;
        late = 1;
        break;
    }
    ck_assert_int_eq(lone_req_calls, want_calls);
    ck_assert_uint_eq(h->late_replies, late);
    /* Owing: only the worker whose late answer was a broadcast's id; a late
     * answer from a worker that owes nothing leaves it owing nothing. */
    ck_assert_uint_eq(d->stuck, _i == AN_BCAST_LATE);
    ck_assert_uint_eq(h->ports[2].stuck, 0);
    /* Relayed to main (on time or not), counted with its bytes; a late
     * answer or another worker's is not. */
    int relayed = _i == AN_REPLY || _i == AN_DEADLINE || _i == AN_OTHER_WORKER || _i == AN_TWICE;
    ck_assert_uint_eq(d->relayed, (uint64_t)relayed);
    ck_assert_uint_eq(d->relayed_bytes, relayed ? 2u : 0u);
    ck_assert_int_eq(lone_req_msg.error, err);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)id);
    ck_assert_int_eq(lone_req_msg.deadline_ms, deadline);
    lone_req_from(11, 1);
    ck_assert_uint_eq(lone_req_msg.len, err == 0 ? 2u : 0u);
    ck_assert_str_eq(lone_req_data, err == 0 ? "hi" : "");
    ck_assert_int_eq(lone_req_outcome_null, 0);
    ck_assert_int_eq(lone_req_outcome.error, err);
    ck_assert_uint_eq(lone_req_outcome.worker.port, 11);
    ck_assert_uint_eq(lone_req_outcome.worker.incarnation, 1);
    ck_assert_int_eq(lone_req_outcome.killed, 0);
    int ended = _i == AN_ENDED || _i == AN_ENDED_PAST_DEADLINE;
    ck_assert_int_eq(lone_req_outcome.ended, ended);
    if (ended) {
        ck_assert_int_eq(lone_req_outcome.exit_code, -1);
        ck_assert_int_eq(lone_req_outcome.signal, 11);
        ck_assert_int_eq(lone_req_outcome.core_dumped, 1);
        ck_assert_int_eq(lone_req_outcome.reason_code, PM_REASON_SIGNAL);
        ck_assert_str_eq(lone_req_outcome.reason, "signal");
        ck_assert_int_eq(lone_req_outcome.crash.state, PM_CRASH_RECORDED);
    } else {
        ck_assert_int_eq(lone_req_outcome.exit_code, -1);
        ck_assert_int_eq(lone_req_outcome.signal, 0);
        ck_assert_int_eq(lone_req_outcome.crash.state, PM_CRASH_NONE);
    }
    /* Outside the callback there is no outcome, for any message. */
    ck_assert_ptr_null(pm__hub_outcome(h, &lone_req_msg));
    ck_assert_ptr_null(pm__hub_outcome(h, NULL));
    ck_assert_uint_eq(h->main_request_count, 0);
    ck_assert_uint_eq(d->main_inflight, 0);
    ck_assert_uint_eq(pm_test_hub_inflight_total(h), 0);
    ck_assert_int_eq(lone_timed_out, 0);
    if (_i == AN_TIMED_OUT_LATE) {
        /* It picks again. */
        int again = pm__hub_request(h, NULL, "q", 1, 600000, lone_req_done, NULL);
        ck_assert_uint_eq(lone_request_of(h, again)->port, 1);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's requests past their deadline (hub_main.c
 * pm__hub_main_request_expire), one row each: request A (1 s) and B (600
 * s), A held by port 1 unless the row says. Not a millisecond before A's
 * deadline; at it, A alone gets -ETIMEDOUT, its entry forgotten, and the
 * next due time is B's. Held by its worker's incarnation: the worker owes
 * an answer (stuck); with kill_on_timeout the owner is asked to kill it
 * (once, before the callback, whose outcome says killed), not when the
 * worker is no longer read or the owner has no timed_out call. Its port
 * now another incarnation: nobody owes. A and B waiting: A off the list,
 * which keeps B as head and tail (a new request goes behind it).
 */
enum { EX_HELD, EX_KILL, EX_KILL_NOT_READING, EX_KILL_NO_CALL, EX_OTHER_INC, EX_WAITING,
       EX_ROWS };

START_TEST(test_lone_request_expire)
{
    pm__hub *h = lone_hub_with(3, _i == EX_KILL_NO_CALL ? &lone_fault_ops : &lone_timeout_ops);
    lone_req_reset(h);
    lone_timed_out = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm__port *p1 = &h->ports[1];
    h->kill_on_timeout = _i == EX_KILL || _i == EX_KILL_NOT_READING || _i == EX_KILL_NO_CALL;
    if (_i == EX_WAITING) {
        pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
        pm__hub_port_set_state(h, 2, PM__PORT_STARTING);
    }
    pm_address a1 = lone_addr(h, 1, 0), a2 = lone_addr(h, 2, 0);
    int a = pm__hub_request(h, _i == EX_WAITING ? NULL : &a1, "a", 1, 1000, lone_req_done, NULL);
    int b = pm__hub_request(h, _i == EX_WAITING ? NULL : &a2, "b", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(a, 0);
    ck_assert_int_gt(b, a);
    int64_t da = lone_request_of(h, a)->deadline_ms, db = lone_request_of(h, b)->deadline_ms;
    int64_t dc = 0; /* EX_WAITING's third request */
    ck_assert_int_eq(h->main_request_due_ms, da);
    if (_i == EX_KILL_NOT_READING)
        p1->reading = 0;
    if (_i == EX_OTHER_INC)
        p1->incarnation = 2;
    pm__hub_main_request_expire(h, da - 1);
    ck_assert_int_eq(lone_req_calls, 0);
    ck_assert_int_eq(h->main_request_due_ms, da);
    pm__hub_main_request_expire(h, da);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)a);
    ck_assert_int_eq(lone_req_msg.error, -ETIMEDOUT);
    ck_assert_int_eq(h->main_request_due_ms, db);
    ck_assert_uint_eq(h->main_request_count, 1);
    ck_assert_ptr_null(lone_request_of(h, a));
    int kill = _i == EX_KILL;
    ck_assert_int_eq(lone_timed_out, kill);
    if (kill)
        ck_assert_int_eq(lone_timed_out_port, 1);
    ck_assert_int_eq(lone_req_outcome.killed, kill);
    int owes = _i == EX_HELD || _i == EX_KILL || _i == EX_KILL_NOT_READING || _i == EX_KILL_NO_CALL;
    ck_assert_uint_eq(p1->stuck, (uint32_t)owes);
    /* (another incarnation's entry stays until the purge) */
    ck_assert_int_eq(pm__hub_port_holds_main(h, 1), owes || _i == EX_OTHER_INC);
    if (_i == EX_WAITING) {
        ck_assert_uint_eq(lone_req_msg.from.port, 0);
        pm__main_request *rb = lone_request_of(h, b);
        ck_assert_ptr_eq(h->waiting, rb);
        ck_assert_ptr_eq(h->waiting_tail, rb);
        ck_assert_ptr_null(rb->wnext);
        ck_assert_int_eq(rb->taken, 0);
        ck_assert_uint_eq(h->nwaiting, 1);
        int c = pm__hub_request(h, NULL, "c", 1, 700000, lone_req_done, NULL); /* after b's */
        ck_assert_ptr_eq(rb->wnext, lone_request_of(h, c));
        ck_assert_ptr_eq(h->waiting_tail, lone_request_of(h, c));
        dc = lone_request_of(h, c)->deadline_ms;
    } else {
        lone_req_from(11, 1);
        ck_assert_uint_eq(p1->main_inflight, _i == EX_OTHER_INC); /* the old entry: purged later */
        ck_assert_uint_eq(h->ports[2].main_inflight, 1);
    }
    /* B at its deadline, and nothing after it. */
    pm__hub_main_request_expire(h, db);
    ck_assert_int_eq(lone_req_calls, 2);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)b);
    ck_assert_int_eq(h->main_request_due_ms, dc);
    pm__hub_delete(h);
}
END_TEST

/*
 * The next due time after a timeout is the earliest deadline left, not
 * the first one the table's walk meets: A (600 s) was made before C (2
 * s), B (1 s) times out first; then C at its own deadline, A not
 * (hub_main.c main_request_take_due).
 */
START_TEST(test_lone_request_next_due)
{
    pm__hub *h = lone_hub(2);
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm_address to = lone_addr(h, 1, 0);
    int a = pm__hub_request(h, &to, "a", 1, 600000, lone_req_done, NULL);
    int b = pm__hub_request(h, &to, "b", 1, 1000, lone_req_done, NULL);
    int c = pm__hub_request(h, &to, "c", 1, 2000, lone_req_done, NULL);
    ck_assert(a > 0 && b > a && c > b);
    int64_t db = lone_request_of(h, b)->deadline_ms, dc = lone_request_of(h, c)->deadline_ms;
    pm__hub_main_request_expire(h, db);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)b);
    ck_assert_int_eq(h->main_request_due_ms, dc);
    pm__hub_main_request_expire(h, dc);
    ck_assert_int_eq(lone_req_calls, 2);
    ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)c);
    ck_assert_ptr_nonnull(lone_request_of(h, a));
    pm__hub_delete(h);
}
END_TEST

/*
 * Every waiting request times out: the list is empty, head and tail, and
 * the next request that waits is its head, sent when a worker is ready
 * (hub_main.c main_request_take_due's pass over the waiting list).
 */
START_TEST(test_lone_waiting_all_expire)
{
    pm__hub *h = lone_hub(2);
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    int a = pm__hub_request(h, NULL, "a", 1, 1000, lone_req_done, NULL);
    ck_assert_int_gt(a, 0);
    pm__hub_main_request_expire(h, lone_request_of(h, a)->deadline_ms);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_int_eq(lone_req_msg.error, -ETIMEDOUT);
    ck_assert_ptr_null(h->waiting);
    ck_assert_ptr_null(h->waiting_tail);
    ck_assert_uint_eq(h->nwaiting, 0);
    int c = pm__hub_request(h, NULL, "c", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(c, 0);
    ck_assert_ptr_eq(h->waiting, lone_request_of(h, c));
    ck_assert_ptr_eq(h->waiting_tail, h->waiting);
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_uint_eq(lone_request_of(h, c)->port, 1);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker, &f), 1);
    ck_assert_uint_eq(f.request_id, (uint64_t)c);
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's first request finds no memory for the request table (or for the
 * request itself): -ENOMEM, no callback ever, nothing left in the table;
 * once memory is there, the request goes to its worker and gets its
 * answer. A lone hub with port 1 ready (row 0) or starting (row 1: the
 * request waits with a copy of its payload), every allocation of one
 * pm__hub_request failing in turn (hub_main.c main_request_reserve,
 * main_request_new, the in-flight entry's, the copy).
 */
START_TEST(test_lone_request_out_of_memory)
{
    if (!pm_failalloc_here("test_lone_request_out_of_memory"))
        return;
    long enomem = 0;
    for (long k = 1;; k++) {
        ck_assert_int_lt(k, 100);
        pm__hub *h = lone_hub(2);
        lone_req_reset(h);
        pm__channel hub_end, worker;
        lone_port(h, &hub_end, &worker);
        if (_i == 1)
            pm__hub_port_set_state(h, 1, PM__PORT_STARTING); /* it waits: a copy of its payload */
        pm_failalloc_arm(k);
        int id = pm__hub_request(h, NULL, "q", 1, 600000, lone_req_done, NULL);
        int hit = pm_failalloc_disarm();
        if (id < 0) {
            ck_assert(hit);
            ck_assert_int_eq(id, -ENOMEM);
            ck_assert_uint_eq(h->main_request_count, 0);
            ck_assert_uint_eq(h->nwaiting, 0);
            ck_assert_ptr_null(h->waiting);
            ck_assert_uint_eq(h->ports[1].any_held, 0);
            enomem++;
        } else {
            ck_assert_int_gt(id, 0);
            if (_i == 1) {
                ck_assert_ptr_eq(h->waiting, lone_request_of(h, id));
                pm__hub_port_set_state(h, 1, PM__PORT_READY);
                pm__hub_main_request_dispatch_waiting(h);
            }
            ck_assert_uint_eq(lone_request_of(h, id)->port, 1);
            lone_answer_main(h, 1, &worker, (uint64_t)id);
            ck_assert_int_eq(lone_req_calls, 1);
            ck_assert_int_eq(lone_req_msg.error, 0);
            ck_assert_str_eq(lone_req_data, "hi");
        }
        pm__hub_delete(h);
        ck_assert_int_eq(lone_req_calls, id < 0 ? 0 : 1); /* none at the hub's end either */
        if (!hit)
            break;
    }
    ck_assert_int_ge(enomem, 2 + _i); /* the table's first buckets, the request (its copy) */
}
END_TEST

/* What a nested callback's outcome says (pm_cluster_request_outcome: for
 * that request and no other). Request A's callback (its worker ended)
 * cancels request B, whose own callback runs inside it. */
static pm__hub *nest_hub;
static int nest_b_id;
static int nest_calls;
static pm_request_outcome nest_a_before, nest_b, nest_a_after;
static int nest_a_after_null;

static void nest_b_done(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)arg;
    nest_calls++;
    const pm_request_outcome *o = pm__hub_outcome(nest_hub, m);
    ck_assert_ptr_nonnull(o);
    nest_b = *o;
}

static void nest_a_done(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)arg;
    nest_calls++;
    const pm_request_outcome *o = pm__hub_outcome(nest_hub, m);
    ck_assert_ptr_nonnull(o);
    nest_a_before = *o;
    ck_assert_int_eq(pm__hub_cancel(nest_hub, (uint64_t)nest_b_id), 0);
    o = pm__hub_outcome(nest_hub, m);
    nest_a_after_null = o == NULL;
    if (o != NULL)
        nest_a_after = *o;
}

/*
 * Outcomes are per request: A (held by port 1, which ends with an ending
 * the owner set) says ended, signal 11; B, cancelled inside A's callback,
 * says -ECANCELED and not ended; A's, asked again after B's callback, is
 * A's still. A request whose worker ends with no ending set (the owner had
 * none to give) is -EHOSTDOWN, not ended. A lone hub, ports 1 and 2 ready.
 */
START_TEST(test_lone_outcome_nested)
{
    pm__hub *h = lone_hub_with(3, &lone_timeout_ops);
    nest_hub = h;
    nest_calls = 0;
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    pm_address to1 = lone_addr(h, 1, 0), to2 = lone_addr(h, 2, 0);
    int a = pm__hub_request(h, &to1, "a", 1, 600000, nest_a_done, NULL);
    ck_assert_int_gt(a, 0);
    nest_b_id = pm__hub_request(h, &to2, "b", 1, 600000, nest_b_done, NULL);
    ck_assert_int_gt(nest_b_id, 0);
    pm_crash_report crash;
    memset(&crash, 0, sizeof(crash));
    crash.state = PM_CRASH_RECORDED;
    crash.incarnation = 1;
    pm__ending e = {1, 1, -1, 11, 1, PM_REASON_SIGNAL, &crash};
    pm__hub_set_ending(h, &e);
    pm__hub_port_close(h, 1);
    pm__hub_set_ending(h, NULL);
    ck_assert_int_eq(nest_calls, 2);
    ck_assert_int_eq(nest_a_before.error, -EHOSTDOWN);
    ck_assert_int_eq(nest_a_before.ended, 1);
    ck_assert_int_eq(nest_a_before.signal, 11);
    ck_assert_int_eq(nest_b.error, -ECANCELED);
    ck_assert_int_eq(nest_b.ended, 0);
    ck_assert_int_eq(nest_b.signal, 0);
    ck_assert_uint_eq(nest_b.worker.port, 12);
    ck_assert_int_eq(nest_a_after_null, 0);
    ck_assert_int_eq(nest_a_after.error, -EHOSTDOWN);
    ck_assert_int_eq(nest_a_after.ended, 1);
    ck_assert_int_eq(nest_a_after.signal, 11);
    ck_assert_uint_eq(nest_a_after.worker.port, 11);
    ck_assert_int_eq(nest_a_after.crash.state, PM_CRASH_RECORDED);

    /* Port 2 ends with no ending set: -EHOSTDOWN, not ended. */
    lone_req_reset(h);
    int c2 = pm__hub_request(h, &to2, "c", 1, 600000, lone_req_done, NULL);
    ck_assert_int_gt(c2, 0);
    pm__hub_port_close(h, 2);
    ck_assert_int_eq(lone_req_calls, 1);
    ck_assert_int_eq(lone_req_msg.error, -EHOSTDOWN);
    ck_assert_int_eq(lone_req_outcome_null, 0);
    ck_assert_int_eq(lone_req_outcome.ended, 0);
    ck_assert_int_eq(lone_req_outcome.signal, 0);
    ck_assert_uint_eq(lone_req_outcome.worker.port, 12);
    pm__hub_delete(h);
}
END_TEST

/* A reply to main's request at its deadline to the millisecond is on time
 * (hub_main.c main_answer: late only past it). The hub's clock read is
 * bracketed between two of the test's; an attempt decides only when they
 * agree. */
START_TEST(test_lone_main_reply_at_its_deadline)
{
    int decided = 0;
    for (int attempt = 0; attempt < 10000 && !decided; attempt++) {
        pm__hub *h = lone_hub(2);
        lone_req_reset(h);
        pm__channel hub_end, worker;
        lone_port(h, &hub_end, &worker);
        pm_address to = lone_addr(h, 1, 0);
        int id = pm__hub_request(h, &to, "q", 1, 600000, lone_req_done, NULL);
        ck_assert_int_gt(id, 0);
        pm__frame_hdr f;
        ck_assert_int_eq(lone_take(h, &worker, &f), 1);
        int64_t t0 = (int64_t)pm__now_ms();
        lone_request_of(h, id)->deadline_ms = t0;
        h->ports[1].inflight[0].deadline_ms = t0;
        lone_answer_main(h, 1, &worker, (uint64_t)id);
        int64_t t1 = (int64_t)pm__now_ms();
        ck_assert_int_eq(lone_req_calls, 1);
        if (t1 == t0) {
            decided = 1;
            ck_assert_int_eq(lone_req_msg.error, 0);
            ck_assert_str_eq(lone_req_data, "hi");
            ck_assert_uint_eq(h->late_replies, 0);
        }
        pm__hub_delete(h);
    }
    ck_assert_msg(decided, "no attempt stayed within one millisecond");
}
END_TEST

/* The permissions of the mapping that holds addr ("r--s"), from
 * /proc/self/maps; "" when none does. */
static void maps_perms_at(const void *addr, char perms[5])
{
    perms[0] = '\0';
    FILE *fp = fopen("/proc/self/maps", "r");
    ck_assert_ptr_nonnull(fp);
    char line[512];
    while (fgets(line, sizeof(line), fp) != NULL) {
        unsigned long lo, hi;
        char p[5];
        if (sscanf(line, "%lx-%lx %4s", &lo, &hi, p) == 3 && (uintptr_t)addr >= lo &&
            (uintptr_t)addr < hi) {
            memcpy(perms, p, 5);
            break;
        }
    }
    fclose(fp);
}

static pm__hub *bigr_hub;
static int bigr_calls, bigr_error, bigr_same;
static size_t bigr_len;
static char bigr_perms[5];
static int bigr_scratch;
static unsigned char bigr_want[PM_MAX_PAYLOAD + 100];

static void bigr_done(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)c, (void)arg;
    bigr_calls++;
    bigr_error = m->error;
    bigr_len = m->len;
    bigr_scratch = m->data == (const void *)bigr_hub->scratch;
    bigr_same = m->data != NULL && m->len == sizeof(bigr_want) &&
                memcmp(m->data, bigr_want, m->len) == 0;
    maps_perms_at(m->data, bigr_perms);
}

/*
 * A large reply to main's request (hub_main.c main_answer, sealed): the
 * callback reads the sealed memfd's read-only mapping itself, whole, not
 * a copy in the scratch buffer (which holds PM_MAX_PAYLOAD bytes, fewer
 * than the reply's).
 */
START_TEST(test_lone_big_reply_to_main)
{
    pm__hub *h = lone_hub(2);
    bigr_hub = h;
    bigr_calls = 0;
    h->max_message = 2 * PM_MAX_PAYLOAD;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm_address to = lone_addr(h, 1, 0);
    int id = pm__hub_request(h, &to, "q", 1, 600000, bigr_done, NULL);
    ck_assert_int_gt(id, 0);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker, &f), 1);
    for (size_t i = 0; i < sizeof(bigr_want); i++)
        bigr_want[i] = (unsigned char)(i * 7 + 3);
    int fd = pm__bigmsg_create(bigr_want, sizeof(bigr_want));
    ck_assert_int_ge(fd, 0);
    ck_assert_int_eq(pm__bigmsg_send(worker.sock, fd, 1), 0);
    close(fd);
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_REPLY;
    f.flags = PM__FF_MEMFD;
    f.dst = PM__NODE_MAIN;
    f.request_id = (uint64_t)id;
    unsigned char a[PM__ANNOUNCE_SIZE];
    pm__announce an = {sizeof(bigr_want), 1};
    pm__announce_encode(&an, a);
    ck_assert_int_eq(pm__frame_send(&worker.tx, &f, a, sizeof(a)), 0);
    pm__hub_port_service(h, 1);
    ck_assert_int_eq(bigr_calls, 1);
    ck_assert_int_eq(bigr_error, 0);
    ck_assert_uint_eq(bigr_len, sizeof(bigr_want));
    ck_assert(bigr_same);
    ck_assert_int_eq(bigr_scratch, 0);
    ck_assert_str_eq(bigr_perms, "r--s");
    pm__hub_delete(h);
}
END_TEST

/*
 * A large message for main that main cannot map (its address space full:
 * this program's mmap refuses that length), one row each (hub_main.c
 * main_refuse): skipped and counted (big_unmapped), never delivered. A
 * message's sender is told -EMSGSIZE (id 0), a request's with its id; a
 * large reply to main's request answers that request -EMSGSIZE, without
 * data.
 */
enum { BU_MSG, BU_REQUEST, BU_REPLY, BU_ROWS };

START_TEST(test_lone_big_to_main_unmapped)
{
    pm__hub *h = lone_hub(2);
    lone_req_reset(h);
    lone_main_calls = 0;
    h->on_message = lone_on_message;
    h->max_message = 2 * PM_MAX_PAYLOAD;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__frame_hdr f;
    int id = 0;
    if (_i == BU_REPLY) {
        pm_address to = lone_addr(h, 1, 0);
        id = pm__hub_request(h, &to, "q", 1, 600000, lone_req_done, NULL);
        ck_assert_int_gt(id, 0);
        ck_assert_int_eq(lone_take(h, &worker, &f), 1);
    }
    lone_big_with_id(&worker, _i == BU_MSG ? PM__FT_MSG : _i == BU_REQUEST ? PM__FT_REQUEST : PM__FT_REPLY,
                     PM__NODE_MAIN, 1, _i == BU_MSG ? 0 : _i == BU_REQUEST ? 9 : (uint64_t)id);
    pm_test_mmap_fail_len = PM_MAX_PAYLOAD + 1;
    pm__hub_port_service(h, 1);
    pm_test_mmap_fail_len = 0;
    ck_assert_uint_eq(h->big_unmapped, 1);
    ck_assert_int_eq(lone_main_calls, 0);
    if (_i == BU_REPLY) {
        ck_assert_int_eq(lone_req_calls, 1);
        ck_assert_int_eq(lone_req_msg.error, -EMSGSIZE);
        ck_assert_uint_eq(lone_req_msg.len, 0);
        ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)id);
        lone_req_from(11, 1);
        ck_assert_int_eq(lone_take(h, &worker, &f), 0);
    } else {
        ck_assert_int_eq(lone_take(h, &worker, &f), 1);
        ck_assert_uint_eq(f.type, PM__FT_UNDELIVERABLE);
        ck_assert_int_eq(f.error, -EMSGSIZE);
        ck_assert_uint_eq(f.src, PM__NODE_MAIN);
        ck_assert_uint_eq(f.dst, 1);
        ck_assert_uint_eq(f.dst_inc, 1);
        ck_assert_uint_eq(f.request_id, _i == BU_MSG ? 0u : 9u);
    }
    pm__hub_delete(h);
}
END_TEST

/*
 * A worker refuses main's large plain message (it cannot map it: its
 * refusal, an UNDELIVERABLE about id 0 to main, port.c refusal): main has
 * no request to answer, so the refusal is counted late
 * (pm_cluster_stats.late_replies, pm_cluster(3)), and the large message
 * owed is spent. A lone hub, port 1 ready.
 */
START_TEST(test_lone_main_message_refused)
{
    pm__hub *h = lone_hub(2);
    h->max_message = 2 * PM_MAX_PAYLOAD;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    static unsigned char big[PM_MAX_PAYLOAD + 1];
    pm_address to = lone_addr(h, 1, 0);
    ck_assert_int_eq(pm__hub_main_send(h, &to, PM__FT_MSG, 0, big, sizeof(big)), 0);
    ck_assert_uint_eq(h->ports[1].big_owed, 1);
    pm__frame_hdr f;
    ck_assert_int_eq(lone_take(h, &worker, &f), 1);
    ck_assert(f.flags & PM__FF_MEMFD);
    memset(&f, 0, sizeof(f));
    f.type = PM__FT_UNDELIVERABLE;
    f.dst = PM__NODE_MAIN;
    f.error = -EMSGSIZE;
    ck_assert_int_eq(pm__frame_send(&worker.tx, &f, NULL, 0), 0);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(h->late_replies, 1);
    ck_assert_uint_eq(h->ports[1].big_owed, 0);
    ck_assert_uint_eq(h->ports[1].malformed, 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's table of requests (hub_main.c): 300 waiting requests get ids 1
 * to 300, the table growing past one request a bucket with every request
 * still found (each cancelled once: -ECANCELED with its own id, then
 * -ENOENT; an id of a broadcast or 0: -ENOENT). Ids wrap at INT_MAX back
 * to 1, skipping the ones still pending. The requests left go out in
 * their order once a worker takes them all; pm__hub_cancel_all answers
 * every one -ECANCELED exactly once, releases what they held, and from
 * then on main's requests are refused -ESHUTDOWN.
 */
START_TEST(test_lone_request_table)
{
    pm__hub *h = lone_hub(3);
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__hub_port_set_state(h, 1, PM__PORT_STARTING);
    for (int k = 1; k <= 300; k++)
        ck_assert_int_eq(pm__hub_request(h, NULL, "r", 1, 600000, lone_req_done, NULL), k);
    ck_assert_uint_eq(h->main_request_buckets, 512);
    ck_assert_uint_eq(h->main_request_count, 300);
    int calls = 0;
    for (int k = 3; k <= 300; k += 3) {
        ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)k), 0);
        calls++;
        ck_assert_int_eq(lone_req_calls, calls);
        ck_assert_uint_eq(lone_req_msg.request_id, (uint64_t)k);
        ck_assert_int_eq(pm__hub_cancel(h, (uint64_t)k), -ENOENT);
    }
    ck_assert_int_eq(pm__hub_cancel(h, 0), -ENOENT);
    ck_assert_int_eq(pm__hub_cancel(h, PM__BCAST_ID_BASE + 1), -ENOENT);
    ck_assert_uint_eq(h->main_request_count, 200);
    ck_assert_uint_eq(h->nwaiting, 200);

    /* The wrap: INT_MAX, then 3 (1 and 2 are pending). */
    h->main_request_last_id = INT_MAX - 1;
    ck_assert_int_eq(pm__hub_request(h, NULL, "r", 1, 600000, lone_req_done, NULL), INT_MAX);
    ck_assert_int_eq(pm__hub_request(h, NULL, "r", 1, 600000, lone_req_done, NULL), 3);

    /* A worker that takes them all: in order, the cancelled ones gone. */
    h->any_per_worker = 1000;
    pm__hub_port_set_state(h, 1, PM__PORT_READY);
    pm__hub_main_request_dispatch_waiting(h);
    ck_assert_uint_eq(h->nwaiting, 0);
    pm__hub_publish(h);
    pm__frame_hdr f;
    const void *payload;
    uint64_t prev = 0;
    unsigned n = 0;
    while (pm__frame_recv(&worker.rx, PM__CHANNEL_MAX_FRAME, &f, &payload) == 1) {
        if (n < 200) {
            ck_assert_uint_gt(f.request_id, prev);
            ck_assert_uint_ne(f.request_id % 3, 0);
            prev = f.request_id;
        }
        n++;
        pm__ring_consume(&worker.rx);
    }
    pm__ring_release(&worker.rx);
    ck_assert_uint_eq(n, 202);
    ck_assert_uint_eq(f.request_id, 3); /* the last, after INT_MAX */
    ck_assert_uint_eq(h->ports[1].any_held, 202);
    ck_assert_uint_eq(h->ports[1].main_inflight, 202);
    /* One more goes straight to it (below any_per_worker). */
    ck_assert_int_gt(pm__hub_request(h, NULL, "r", 1, 600000, lone_req_done, NULL), 0);

    lone_req_calls = 0;
    pm__hub_cancel_all(h);
    ck_assert_int_eq(lone_req_calls, 203);
    ck_assert_int_eq(lone_req_msg.error, -ECANCELED);
    ck_assert_uint_eq(h->main_request_count, 0);
    ck_assert_int_eq(h->main_request_due_ms, 0);
    ck_assert_uint_eq(h->ports[1].any_held, 0);
    ck_assert_uint_eq(h->ports[1].main_inflight, 0);
    ck_assert_uint_eq(h->ports[1].stuck, 0); /* cancelled, not timed out */
    ck_assert_int_eq(pm__hub_requests_closed(h), 1);
    ck_assert_int_eq(pm__hub_request(h, NULL, "r", 1, 600000, lone_req_done, NULL), -ESHUTDOWN);
    ck_assert_int_eq(lone_req_calls, 203);
    pm__hub_delete(h);
}
END_TEST

/*
 * Main's request ids (hub_main.c main_request_next_id, main_request_insert):
 * two pending ids in one bucket are both found (65 beside 1 in a table
 * of 64); past INT_MAX the ids start again at 1 when it is free; with
 * INT_MAX - 1 requests pending (every id but one taken) a request is
 * refused -EAGAIN, named or to any worker, and one fewer is taken.
 */
START_TEST(test_lone_request_ids)
{
    pm__hub *h = lone_hub(2);
    lone_req_reset(h);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    h->any_per_worker = 1000;
    pm_address to = lone_addr(h, 1, 0);
    ck_assert_int_eq(pm__hub_request(h, &to, "a", 1, 600000, lone_req_done, NULL), 1);
    ck_assert_uint_eq(h->main_request_buckets, 64);
    h->main_request_last_id = 64;
    ck_assert_int_eq(pm__hub_request(h, &to, "b", 1, 600000, lone_req_done, NULL), 65);
    ck_assert_ptr_nonnull(lone_request_of(h, 1));
    ck_assert_ptr_nonnull(lone_request_of(h, 65));
    ck_assert_int_eq(pm__hub_cancel(h, 1), 0);
    ck_assert_uint_eq(lone_req_msg.request_id, 1);
    ck_assert_int_eq(pm__hub_cancel(h, 65), 0);
    ck_assert_uint_eq(lone_req_msg.request_id, 65);
    ck_assert_int_eq(lone_req_calls, 2);
    h->main_request_last_id = INT_MAX;
    ck_assert_int_eq(pm__hub_request(h, &to, "c", 1, 600000, lone_req_done, NULL), 1);
    h->main_request_count = INT_MAX - 1; /* (1 really) */
    ck_assert_int_eq(pm__hub_request(h, &to, "d", 1, 600000, lone_req_done, NULL), -EAGAIN);
    ck_assert_int_eq(pm__hub_request(h, NULL, "d", 1, 600000, lone_req_done, NULL), -EAGAIN);
    h->main_request_count = INT_MAX - 2;
    ck_assert_int_eq(pm__hub_request(h, &to, "e", 1, 600000, lone_req_done, NULL), 2);
    h->main_request_count = 2;
    pm__hub_cancel_all(h);
    ck_assert_int_eq(lone_req_calls, 4);
    ck_assert_uint_eq(h->main_request_count, 0);
    pm__hub_delete(h);
}
END_TEST

/*
 * What reaches main that is not an answer (hub_main.c deliver), one row
 * each, from port 1. With no on_message: dropped and counted in the
 * sender's malformed frames; a request is answered -ENOENT at once (from
 * main, its id, to the sender's incarnation) so the requester does not
 * wait for its deadline. With on_message: one call with a private copy,
 * from the sender (its incarnation stamped), to main, with its id, kind and
 * deadline; an empty payload still has a valid data pointer.
 */
enum { OM_NONE_MSG, OM_NONE_REQUEST, OM_MSG, OM_REQUEST, OM_EMPTY, OM_ROWS };

START_TEST(test_lone_main_on_message)
{
    pm__hub *h = lone_hub(3);
    lone_main_calls = 0;
    memset(&lone_main_msg, 0, sizeof(lone_main_msg));
    int listen = _i >= OM_MSG;
    if (listen)
        h->on_message = lone_on_message;
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__frame_hdr f;
    memset(&f, 0, sizeof(f));
    f.type = _i == OM_NONE_REQUEST || _i == OM_REQUEST ? PM__FT_REQUEST : PM__FT_MSG;
    f.dst = PM__NODE_MAIN;
    f.request_id = 9;
    f.deadline_ms = 12345;
    ck_assert_int_eq(pm__frame_send(&worker.tx, &f, "hi", _i == OM_EMPTY ? 0 : 2), 0);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(h->ports[1].malformed, !listen);
    ck_assert_int_eq(lone_main_calls, listen);
    pm__frame_hdr n;
    ck_assert_int_eq(lone_take(h, &worker, &n), _i == OM_NONE_REQUEST);
    if (_i == OM_NONE_REQUEST) {
        ck_assert_uint_eq(n.type, PM__FT_UNDELIVERABLE);
        ck_assert_int_eq(n.error, -ENOENT);
        ck_assert_uint_eq(n.src, PM__NODE_MAIN);
        ck_assert_uint_eq(n.src_inc, 0);
        ck_assert_uint_eq(n.dst, 1);
        ck_assert_uint_eq(n.dst_inc, 1);
        ck_assert_uint_eq(n.request_id, 9);
    }
    if (listen) {
        ck_assert_uint_eq(lone_main_msg.from.port, 11);
        ck_assert_uint_eq(lone_main_msg.from.incarnation, 1);
        ck_assert_str_eq(lone_main_msg.from.system, "t");
        ck_assert_uint_eq(lone_main_msg.to.port, 0);
        ck_assert_str_eq(lone_main_msg.to.host, "main");
        ck_assert_uint_eq(lone_main_msg.request_id, 9);
        ck_assert_int_eq(lone_main_msg.kind, _i == OM_REQUEST ? PM_MSG_REQUEST : PM_MSG_PLAIN);
        ck_assert_int_eq(lone_main_msg.deadline_ms, 12345);
        ck_assert_int_eq(lone_main_msg.error, 0);
        ck_assert_uint_eq(lone_main_msg.len, _i == OM_EMPTY ? 0 : 2);
        ck_assert_ptr_nonnull(lone_main_msg.data);
        ck_assert_ptr_eq(lone_main_msg.data, h->scratch); /* the copy, not the ring */
        if (_i != OM_EMPTY)
            ck_assert(memcmp(lone_main_msg.data, "hi", 2) == 0);
    }
    pm__hub_delete(h);
}
END_TEST

/* The arm protocol (port.c, doc/design.md "Life of a frame"), on a port
 * read dry: it is on the arm list, not armed yet, so a frame published now
 * rings nothing; the spin (pm__hub_any_arrived) finds it and puts the
 * port on the ready list, and so does arming it before the loop sleeps
 * (pm__hub_arm_idle, which looks again after setting the flag). A port
 * armed with nothing there is left armed: the worker's next publish rings
 * the doorbell. */
START_TEST(test_hub_arm_protocol)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    pm__hub_port_service(h, 1); /* empty: drained, on the arm list */
    ck_assert_int_eq(pm__hub_any_busy(h), 0);
    ck_assert_int_eq(pm__hub_any_arrived(h), 0);
    lone_send(&worker);
    ck_assert_uint_eq(doorbell_count(hub_end.hub_efd), 0); /* not armed: no ring */
    ck_assert_int_eq(pm__hub_any_arrived(h), 1);
    ck_assert_int_eq(pm__hub_any_busy(h), 1);

    /* Another port read dry: a frame published before it is armed is
     * found by the arm's second look. */
    pm__hub *h2 = lone_hub(2);
    pm__channel hub2, worker2;
    lone_port(h2, &hub2, &worker2);
    pm__hub_port_service(h2, 1);
    lone_send(&worker2);
    ck_assert_int_eq(pm__hub_arm_idle(h2), 1);
    ck_assert_int_eq(pm__hub_any_busy(h2), 1);

    /* Nothing published: armed, and the next publish rings. */
    pm__hub *h3 = lone_hub(2);
    pm__channel hub3, worker3;
    lone_port(h3, &hub3, &worker3);
    pm__hub_port_service(h3, 1);
    (void)doorbell_count(hub3.hub_efd);
    ck_assert_int_eq(pm__hub_arm_idle(h3), 0);
    ck_assert_int_eq(pm__hub_any_busy(h3), 0);
    ck_assert_int_eq(pm__ring_consumer_parked(&worker3.tx), 1);
    lone_send(&worker3);
    ck_assert_uint_ge(doorbell_count(hub3.hub_efd), 1);
    /* Read now: traffic flowed this turn (what lets the hub spin). */
    ck_assert_int_eq(pm__hub_take_active(h3), 0);
    pm__hub_port_service(h3, 1);
    ck_assert_int_eq(pm__hub_take_active(h3), 1);
    ck_assert_int_eq(pm__hub_take_active(h3), 0);

    /* The spin sees an arrival on a drained ring before it asks the
     * owner's loop. */
    if (pm__spin_cpus() >= 2) {
        pm__hub *h4 = lone_hub(2);
        pm__channel hub4, worker4;
        lone_port(h4, &hub4, &worker4);
        pm__hub_port_service(h4, 1);
        lone_send(&worker4);
        struct spin_probe s = {0};
        uint64_t t0;
        pm_test_hub_set_spin_budget(h4, 1000000000u);
        ck_assert_int_eq(pm__hub_spin(h4, 1000000, spin_ready, &s, &t0), 1);
        ck_assert_int_eq(s.calls, 0);
        ck_assert_int_eq(pm__hub_any_busy(h4), 1);
        pm__hub_delete(h4);
    }
    pm__hub_delete(h);
    pm__hub_delete(h2);
    pm__hub_delete(h3);
}
END_TEST

/*
 * The hub's work lists hold each port at most once, so that a list of
 * nports entries never overflows (hub_core.h, pm__portlist): a sender held
 * with its frame left in its ring (port 2's ring full) and serviced again
 * and again in one pass (a worker may ring its doorbell whenever it
 * likes), each time with nothing behind its frame for anyone else, is on
 * the arm list once; armed, the list is empty again.
 */
START_TEST(test_lone_held_sender_armed_once)
{
    pm__hub *h = lone_hub(3);
    pm__channel hub_end[2], worker[2];
    lone_ports_1_2(h, hub_end, worker);
    (void)lone_ring_full(h, 2);
    lone_frame_from(&worker[0], PM__FT_MSG, 2, 1, 0);
    pm__hub_port_service(h, 1);
    pm__port *p = &h->ports[1];
    ck_assert_int_eq(p->blocked_on, 2);
    ck_assert_int_eq(p->left, 1);
    ck_assert_uint_eq(h->arm.n, 1);
    ck_assert_int_eq(pm__hub_arm_idle(h), 0);
    ck_assert_uint_eq(h->arm.n, 0);
    for (int k = 0; k < 4; k++) { /* more than the list holds */
        pm__hub_port_service(h, 1);
        ck_assert_uint_eq(h->arm.n, 1);
        ck_assert_uint_eq(h->arm.v[0], 1);
    }
    ck_assert_int_eq(pm__hub_any_arrived(h), 0);
    ck_assert_int_eq(pm__hub_arm_idle(h), 0);
    ck_assert_uint_eq(h->arm.n, 0);
    ck_assert_int_eq(p->blocked_on, 2); /* still held, nothing delivered */
    pm__hub_delete(h);
}
END_TEST

/* Every port of a hub on the arm list at once (each read dry in one
 * turn): the spin's look and the arming visit the nports entries and no
 * more (a read past the list's end is a heap overflow the sanitizer build
 * reports), and each port is left armed. */
START_TEST(test_lone_every_port_armed)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end[2], worker[2];
    lone_port_at(h, 0, &hub_end[0], &worker[0]);
    lone_port_at(h, 1, &hub_end[1], &worker[1]);
    pm__hub_port_service(h, 0);
    pm__hub_port_service(h, 1);
    ck_assert_uint_eq(h->arm.n, 2);
    ck_assert_int_eq(pm__hub_any_arrived(h), 0);
    ck_assert_int_eq(pm__hub_arm_idle(h), 0);
    ck_assert_uint_eq(h->arm.n, 0);
    ck_assert_int_eq(pm__ring_consumer_parked(&worker[0].tx), 1);
    ck_assert_int_eq(pm__ring_consumer_parked(&worker[1].tx), 1);
    pm__hub_delete(h);
}
END_TEST

/* A port opened on a ring that has work already (the worker published
 * before the hub took its port: hub.h pm__hub_port_open) returns 1 and is
 * on the ready list, read this turn: its doorbell is not armed, and the
 * frame would otherwise wait for a ring that never comes. One with an
 * empty ring returns 0, armed: its first publish rings. */
START_TEST(test_lone_open_with_work)
{
    pm__hub *h = lone_hub(3);
    pm__channel_params cp = {.ring_cap = 1u << 20, .supervisor_pid = getpid(),
                             .max_message = PM_MAX_PAYLOAD};
    pm__channel hub_end[2], worker[2];
    for (unsigned k = 0; k < 2; k++) {
        ck_assert_int_eq(pm__channel_create(&hub_end[k], k + 1, 1, &cp), 0);
        ck_assert_int_eq(pm__channel_adopt(&worker[k], &hub_end[k]), 0);
    }
    lone_send(&worker[0]);
    ck_assert_int_eq(pm__hub_port_open(h, 1, &hub_end[0], 1), 1);
    ck_assert_int_eq(pm__hub_any_busy(h), 1);
    ck_assert_int_eq(pm__hub_port_open(h, 2, &hub_end[1], 1), 0);
    ck_assert_int_eq(pm__ring_consumer_parked(&worker[1].tx), 1);
    pm__hub_delete(h);
}
END_TEST

/* The records on the fd socket of a port no longer read (cut off: fenced,
 * or its incarnation ended) are not taken: a bad one there is no fault of
 * the incarnation that follows, and the port's close drops what waits
 * (hub.h pm__hub_port_records; port.c). The lone hub's owner fails the
 * test on any fault. */
START_TEST(test_lone_records_of_cut_port)
{
    pm__hub *h = lone_hub(2);
    pm__channel hub_end, worker;
    lone_port(h, &hub_end, &worker);
    int fd = lone_big_fd(-1);
    ck_assert_int_eq(pm__bigmsg_send(worker.sock, fd, 7), 0); /* not the next sequence */
    close(fd);
    pm__hub_port_cut(h, 1);
    pm__hub_port_records(h, 1);
    ck_assert_uint_eq(h->ports[1].malformed, 0);
    ck_assert_uint_eq(h->ports[1].ahead_n, 0);
    pm__hub_delete(h);
}
END_TEST

/* ---------------------------------------------------------------- restart_slot */

START_TEST(test_restart_slot)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(2);
    /* A backoff far longer than the test: the replacement can only come
     * in time if restart_slot really skips it. */
    pm_options_set_restart_min_backoff_ms(o, 60000);
    pm_options_set_restart_max_backoff_ms(o, 60000);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pm_cluster_restart_slot(NULL, 0), -EINVAL);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 2), -EINVAL);
    for (int round = 1; round <= 3; round++) {
        ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
        /* Stopping, not ready: a second request is refused. */
        ck_assert_int_eq(pm_cluster_restart_slot(c, 0), -EBUSY);
        PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == (uint64_t)round + 1,
                  20000);
        const rec *r = find(PM_EVENT_RESTART_SCHEDULED, 0, round - 1);
        ck_assert_ptr_nonnull(r);
        ck_assert_str_eq(r->reason, "replace");
        ck_assert_uint_eq(r->delay, 0);
        pm_slot_info si = info(c, 0);
        ck_assert_uint_eq(si.restarts_total, 0); /* not charged */
        ck_assert_uint_eq(si.restarts_in_window, 0);
    }
    ck_assert_msg(!overlap, "a replacement started while its predecessor still existed");
    ck_assert_uint_eq(info(c, 1).incarnation, 1); /* the other slot untouched */
    /* Not ready (starting, backoff, retired...): -EBUSY. */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 1), 0);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 1), -EBUSY);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_restart_slot_starting_is_busy)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    role[0] = W_NEVER_READY; /* the replacement never gets ready */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_STARTING, 10000);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), -EBUSY);
    ck_assert_int_eq(pm_cluster_terminate(c), 1); /* the starting one is killed */
    pm_options_free(o);
}
END_TEST

/* pm_cluster(3), pm_cluster_send: -EHOSTDOWN to a slot that is not ready,
 * here one whose replacement runs its handshake (the hub already holds
 * its channel: hub_core.c pm__hub_check_dest judges by the port's state,
 * not by its channel alone), and nothing reaches that process. */
START_TEST(test_send_to_starting_slot)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    role[0] = W_NEVER_READY; /* the replacement never gets ready */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_STARTING && pm_test_port_attached(c, 0), 10000);
    pm_address a = pm_test_slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a, "x", 1), -EHOSTDOWN);
    ck_assert_int_eq(pm_cluster_terminate(c), 1); /* the starting one is killed */
    pm_options_free(o);
}
END_TEST

/* ---------------------------------------------------------------- kill_pending, core_dumped */

START_TEST(test_kill_pending)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_options_set_stop_timeout_ms(o, 0); /* the stop request is SIGKILL at once */
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(info(c, 0).kill_pending, 0);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    /* SIGKILL sent, nothing reaped yet (the loop has not run). */
    ck_assert_int_eq(info(c, 0).kill_pending, 1);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 10000);
    ck_assert_int_eq(info(c, 0).kill_pending, 0);
    /* SIGTERM (the stop request) and SIGKILL went out together. */
    int sig = find(PM_EVENT_EXITED, 0, 0)->signal;
    ck_assert_msg(sig == SIGTERM || sig == SIGKILL, "died by signal %d", sig);
    ck_assert_int_eq(pm_cluster_terminate(c), 1);
    pm_options_free(o);
}
END_TEST

/* Would this machine write a core for `cmd`? Probed with the same command
 * outside procmesh: the kernel's core_pattern decides, not procmesh. */
static int dumps_core(const char *cmd)
{
    pid_t p = pm_test_fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        execl("/bin/sh", "sh", "-c", cmd, (char *)NULL);
        _exit(127);
    }
    int st = pm_test_reap(p, 20000);
    ck_assert_msg(st != -1 && WIFSIGNALED(st), "the probe did not die by a signal");
    return WCOREDUMP(st) ? 1 : 0;
}

START_TEST(test_core_dumped)
{
    char dir[] = "/tmp/pm-core-XXXXXX";
    ck_assert_ptr_nonnull(mkdtemp(dir));
    char cmd[256];
    /* _i = 0: core limit 0 (no core); 1: unlimited, in a scratch directory. */
    snprintf(cmd, sizeof(cmd), "ulimit -c %s 2>/dev/null; cd %s && kill -SEGV $$",
             _i ? "unlimited" : "0", dir);
    int want = dumps_core(cmd);
    if (_i == 0)
        ck_assert_int_eq(want, 0);
    pm_options *o = opts_base(1);
    char *argv[] = {"sh", "-c", cmd, NULL};
    pm_options_set_exec(o, "/bin/sh", argv);
    pm_options_set_ready_mode(o, PM_READY_EXEC);
    pm_options_set_restart_policy(o, PM_RESTART_NEVER);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) == 1, 20000);
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_int_eq(e->signal, SIGSEGV);
    ck_assert_int_eq(e->exit_code, -1);
    ck_assert_int_eq(e->core, want);
    if (_i == 1 && !want)
        fprintf(stderr, "note: this machine writes no core (core_pattern); core_dumped=1 unseen\n");
    ck_assert_int_ge(pm_cluster_terminate(c), 0);
    pm_options_free(o);
    char rm[300];
    snprintf(rm, sizeof(rm), "rm -rf %s", dir);
    ck_assert_int_eq(system(rm), 0);
}
END_TEST

/* ---------------------------------------------------------------- signals */

START_TEST(test_sighup_interrupts_run)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_options_set_handle_signals(o, 1); /* opt-in for the library */
    pm_cluster *c = pm_test_spawn(o);
    static const int sigs[] = {SIGHUP, SIGTERM, SIGINT};
    for (size_t i = 0; i < ARRAY_LEN(sigs); i++) {
        ck_assert_int_eq(kill(getpid(), sigs[i]), 0);
        ck_assert_int_eq(pm_cluster_run(c, 10000), -EINTR);
        ck_assert_int_eq(pm_cluster_last_signal(c), sigs[i]);
        /* Nothing else happened to the workers. */
        ck_assert_int_eq(info(c, 0).state, PM_SLOT_READY);
        ck_assert_uint_eq(info(c, 0).incarnation, 1);
    }
    pm_test_finish(c, o);
}
END_TEST

static void term_on_last_start(pm_cluster *c, const pm_event *e, void *arg)
{
    record(c, e, arg);
    if (e->type == PM_EVENT_STARTED && e->slot == 2)
        kill(getpid(), SIGTERM);
}

START_TEST(test_sigterm_during_spawn)
{
    memset(role, 0, sizeof(role));
    role[2] = W_NEVER_READY;
    pm_options *o = role_opts(3);
    pm_options_set_on_event(o, term_on_last_start, NULL);
    pm_options_set_handle_signals(o, 1);
    pm_cluster *c = (pm_cluster *)1;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINTR);
    ck_assert_ptr_null(c);
    ck_assert_int_eq(count(PM_EVENT_STARTED, -1), 3);
    /* Every worker it started is reaped: no child of ours is left. */
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
    pm_options_free(o);
}
END_TEST

static volatile sig_atomic_t app_hups;

static void app_on_hup(int sig)
{
    (void)sig;
    app_hups++;
}

START_TEST(test_handle_signals_off)
{
    memset(role, 0, sizeof(role));
    /* The application's own SIGHUP handler, installed before the cluster. */
    struct sigaction sa, old_sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = app_on_hup;
    sigemptyset(&sa.sa_mask);
    ck_assert_int_eq(sigaction(SIGHUP, &sa, &old_sa), 0);
    app_hups = 0;
    pm_options *o = role_opts(1);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 0), 0);
    sigset_t before, after;
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < ARRAY_LEN(sigs); i++)
        ck_assert_int_eq(sigismember(&after, sigs[i]), sigismember(&before, sigs[i]));
    /* Exits are still seen (by pidfd): a killed worker is restarted. */
    pid_t pid = info(c, 0).pid;
    ck_assert_int_eq(kill(pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 10000);
    /* A real SIGHUP to this process is not the cluster's to take: the
     * application's handler runs, and the cluster neither returns -EINTR
     * nor records it nor restarts anything for it (the daemon's SIGHUP
     * restarts every worker). */
    ck_assert_int_eq(kill(getpid(), SIGHUP), 0);
    for (int i = 0; i < 1000 && app_hups == 0; i++)
        ck_assert_int_ge(pm_cluster_run(c, 10), 0);
    ck_assert_int_eq(app_hups, 1);
    for (int i = 0; i < 5; i++)
        ck_assert_int_ge(pm_cluster_run(c, 10), 0);
    ck_assert_int_eq(pm_cluster_last_signal(c), 0);
    pm_slot_info si = info(c, 0);
    ck_assert_int_eq(si.state, PM_SLOT_READY);
    ck_assert_uint_eq(si.incarnation, 2);
    pm_test_finish(c, o);
    ck_assert_int_eq(sigaction(SIGHUP, &old_sa, NULL), 0);
}
END_TEST

/* Orphan reaping needs SIGCHLD, which only handle_signals takes: the setter
 * takes the value (options may be set in any order), validation and spawn
 * refuse the combination, naming it, before any worker starts. */
START_TEST(test_reap_orphans_needs_signals)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 0), 0);
    ck_assert_int_eq(pm_options_set_reap_orphans(o, 1), 0);
    char why[256] = "";
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), -EINVAL);
    ck_assert_msg(strstr(why, "reap_orphans") != NULL && strstr(why, "handle_signals") != NULL,
                  "the reason does not name both options: '%s'", why);
    pm_cluster *c = (pm_cluster *)o; /* any non-NULL value: spawn must set it to NULL */
    ck_assert_int_eq(pm_cluster_spawn(o, &c), -EINVAL);
    ck_assert_ptr_null(c);
    /* No worker was forked: this test process has no child at all. */
    ck_assert_int_eq(waitpid(-1, NULL, WNOHANG), -1);
    ck_assert_int_eq(errno, ECHILD);
    /* With handle_signals on, the same options are accepted. */
    ck_assert_int_eq(pm_options_set_handle_signals(o, 1), 0);
    ck_assert_int_eq(pm_options_validate(o, why, sizeof(why)), 0);
    pm_options_free(o);
}
END_TEST

/* ---------------------------------------------------------------- pm_cluster_stop */

static pm_cluster *stop_target;
static int stops;

static void stop_from_watch(pm_cluster *c, int fd, void *arg)
{
    (void)fd;
    (void)arg;
    stops++;
    pm_cluster_stop(c);
}

static void *stop_thread(void *arg)
{
    pm_cluster_stop(arg);
    return NULL;
}

static void stop_handler(int sig)
{
    (void)sig;
    stops++;
    pm_cluster_stop(stop_target);
}

START_TEST(test_stop_everywhere)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);

    /* From a callback (a watched fd's). */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], stop_from_watch, NULL), 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    ck_assert_int_eq(pm_cluster_run(c, -1), 0);
    ck_assert_int_eq(stops, 1);
    ck_assert_int_eq(pm_cluster_unwatch_fd(c, p[0]), 0);

    /* From another thread. */
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, stop_thread, c), 0);
    ck_assert_int_eq(pm_cluster_run(c, -1), 0);
    pthread_join(t, NULL);

    /* From a signal handler (SIGALRM in 100 ms, while run waits). */
    stop_target = c;
    struct sigaction sa;
    memset(&sa, 0, sizeof(sa));
    sa.sa_handler = stop_handler;
    ck_assert_int_eq(sigaction(SIGALRM, &sa, NULL), 0);
    struct itimerval it = {{0, 0}, {0, 100000}};
    ck_assert_int_eq(setitimer(ITIMER_REAL, &it, NULL), 0);
    ck_assert_int_eq(pm_cluster_run(c, -1), 0);
    ck_assert_int_eq(stops, 2);

    ck_assert_int_eq(info(c, 0).state, PM_SLOT_READY);
    ck_assert_int_eq(pm_cluster_terminate(c), 0);
    close(p[0]);
    close(p[1]);
    pm_options_free(o);
}
END_TEST

/* ---------------------------------------------------------------- watch_fd */

static int fired;
static int rewatch;

static void on_readable(pm_cluster *c, int fd, void *arg)
{
    (void)arg;
    fired++;
    char b[16];
    ssize_t k = read(fd, b, sizeof(b));
    (void)k;
    if (rewatch)
        pm_cluster_watch_fd(c, fd, on_readable, NULL);
}

START_TEST(test_watch_fd)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    ck_assert_int_eq(pm_cluster_watch_fd(NULL, p[0], on_readable, NULL), -EINVAL);
    ck_assert_int_eq(pm_cluster_watch_fd(c, -1, on_readable, NULL), -EINVAL);
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], NULL, NULL), -EINVAL);
    fired = 0;
    rewatch = 0;
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], on_readable, NULL), 0);
    ck_assert_int_eq(pm_cluster_unwatch_fd(c, p[1]), -ENOENT); /* never watched */
    ck_assert_int_eq(pm_cluster_run(c, 50), 0);
    ck_assert_int_eq(fired, 0); /* not readable yet */
    ck_assert_int_eq(write(p[1], "a", 1), 1);
    PM_RUN_UNTIL(c, fired == 1, 5000);
    /* One-shot: without a new watch, more data is not reported. */
    ck_assert_int_eq(write(p[1], "b", 1), 1);
    ck_assert_int_eq(pm_cluster_run(c, 200), 0);
    ck_assert_int_eq(fired, 1);
    /* Watched again (here from outside; the callback may do it too). */
    rewatch = 1;
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], on_readable, NULL), 0);
    PM_RUN_UNTIL(c, fired == 2, 5000);
    ck_assert_int_eq(write(p[1], "c", 1), 1);
    PM_RUN_UNTIL(c, fired == 3, 5000); /* re-armed from the callback */
    /* Unwatched: nothing more, and the fd may be closed at once. */
    ck_assert_int_eq(pm_cluster_unwatch_fd(c, p[0]), 0);
    ck_assert_int_eq(write(p[1], "d", 1), 1);
    ck_assert_int_eq(pm_cluster_run(c, 200), 0);
    ck_assert_int_eq(fired, 3);
    close(p[0]);
    close(p[1]);
    /* At most 1024 fds. */
    int fds[1025];
    int ok = 0, rc = 0;
    for (int i = 0; i < 1025; i++) {
        fds[i] = eventfd(0, EFD_CLOEXEC);
        if (fds[i] < 0) {
            fds[i] = -1;
            continue;
        }
        rc = pm_cluster_watch_fd(c, fds[i], on_readable, NULL);
        if (rc == 0)
            ok++;
        else
            break;
    }
    if (ok == 1024)
        ck_assert_int_eq(rc, -ENOSPC);
    for (int i = 0; i < 1025; i++)
        if (fds[i] >= 0) {
            pm_cluster_unwatch_fd(c, fds[i]);
            close(fds[i]);
        }
    pm_test_finish(c, o);
}
END_TEST

/* ---------------------------------------------------------------- raw worker: handshake and protocol */

static pm_options *raw_opts(const char *mode, const char *arg, int later)
{
    pm_options *o = opts_base(1);
    char *argv[5] = {"pm-raw-worker", (char *)mode, NULL, NULL, NULL};
    int k = 2;
    if (arg != NULL)
        argv[k++] = (char *)arg;
    if (later)
        argv[k++] = "later";
    ck_assert_int_eq(pm_options_set_exec(o, PM_RAW_WORKER, argv), 0);
    pm_options_set_max_restarts(o, 1);
    return o;
}

/* design.md, Handshake: "Anything out of order is a protocol fault": a
 * second HELLO, or a READY before HELLO, kills the worker with reason
 * protocol and charges the failure. */
START_TEST(test_handshake_fault_charged)
{
    static const char *const modes[] = {"hello-twice", "ready-first"};
    const char *mode = modes[_i];
    /* A first start: pm_cluster_spawn gives up, and says why. */
    pm_options *o = raw_opts(mode, NULL, 0);
    pm_cluster *c;
    ck_assert_int_eq(pm_cluster_spawn(o, &c), _i == 0 ? 0 : -ECHILD);
    if (_i == 0) {
        /* HELLO, READY, HELLO: ready, then fenced in the same read; so is
         * its replacement, and the budget (1) retires the slot. */
        PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_RETIRED, 20000);
        ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 2);
        ck_assert_str_eq(find(PM_EVENT_FENCED, 0, 0)->reason, "protocol");
        ck_assert_uint_eq(info(c, 0).restarts_total, 1);
        ck_assert_int_eq(pm_cluster_terminate(c), 0);
    } else {
        ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 1);
        ck_assert_str_eq(find(PM_EVENT_FENCED, 0, 0)->reason, "protocol");
    }
    pm_options_free(o);
    /* A later incarnation: fenced "protocol", the restart charged (backoff,
     * budget), then retired by the budget (1). */
    o = raw_opts(mode, NULL, 1);
    ck_assert_int_eq(pm_cluster_spawn(o, &c), 0);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_RETIRED, 20000);
    ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 2); /* incarnations 2 and 3 */
    for (int i = 0; i < 2; i++)
        ck_assert_str_eq(find(PM_EVENT_FENCED, 0, i)->reason, "protocol");
    ck_assert_str_eq(find(PM_EVENT_RESTART_SCHEDULED, 0, 0)->reason, "replace");
    ck_assert_str_eq(find(PM_EVENT_RESTART_SCHEDULED, 0, 1)->reason, "backoff");
    pm_slot_info si = info(c, 0);
    ck_assert_uint_eq(si.restarts_total, 1);
    ck_assert_uint_eq(si.fences, 2);
    ck_assert_str_eq(si.last_fence_reason, "protocol");
    struct pm_cluster_stats st;
    pm_cluster_stats(c, &st);
    ck_assert_uint_eq(st.fences_protocol, 2);
    pm_test_finish(c, o);
}
END_TEST

/*
 * doc/protocol.md, the handshake: a HELLO is exactly a u32 version, this
 * protocol's, once, before READY. One row per condition, each broken alone
 * in a later incarnation (the first is a plain HELLO and READY), all else
 * valid; the fence reason that row must give ("" for the valid row, which
 * must get ready). A new condition is a new row.
 */
static const struct {
    const char *mode, *arg;
    const char *reason;
} hello_rows[] = {
    {"hello-len", "4", ""},            /* all valid: ready, nothing fenced */
    {"hello-len", "0", "protocol"},    /* no version at all */
    {"hello-len", "3", "protocol"},    /* short */
    {"hello-len", "5", "protocol"},    /* the right version, a byte more */
    {"hello-len", "16", "protocol"},
    {"hello-len", "64", "protocol"},   /* the most the hub copies for its owner */
    {"hello-len", "65", "protocol"},   /* more than that: refused by the hub itself */
    {"hello-len", "4096", "protocol"}, /* far more: nothing of it copied */
    {"hello-version", "7", "version"}, /* another protocol */
    {"hello-version", "0", "version"},
    {"hello-twice", NULL, "protocol"}, /* a second HELLO (after its READY) */
    {"ready-first", NULL, "protocol"}, /* READY before HELLO */
};

START_TEST(test_hello_each_condition)
{
    pm_options *o = raw_opts(hello_rows[_i].mode, hello_rows[_i].arg, 1);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    if (hello_rows[_i].reason[0] == '\0') {
        PM_RUN_UNTIL(c, count(PM_EVENT_READY, 0) == 2, 20000);
        ck_assert_uint_eq(info(c, 0).incarnation, 2);
        ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 0);
    } else {
        PM_RUN_UNTIL(c, count(PM_EVENT_FENCED, 0) >= 1, 20000);
        ck_assert_msg(strcmp(find(PM_EVENT_FENCED, 0, 0)->reason, hello_rows[_i].reason) == 0,
                      "%s %s: fenced %s, want %s", hello_rows[_i].mode,
                      hello_rows[_i].arg ? hello_rows[_i].arg : "",
                      find(PM_EVENT_FENCED, 0, 0)->reason, hello_rows[_i].reason);
        ck_assert_uint_eq(find(PM_EVENT_FENCED, 0, 0)->inc, 2);
        /* The fenced incarnation (2) was never ready, but in the row
         * whose fault comes after READY. Counted for incarnation 2 only:
         * the next one may be ready already (the slot restarts at once),
         * which is the machine's speed, not the rule. */
        int ready2 = 0;
        for (int k = 0; find(PM_EVENT_READY, 0, k) != NULL; k++)
            ready2 += find(PM_EVENT_READY, 0, k)->inc == 2;
        ck_assert_int_eq(ready2, strcmp(hello_rows[_i].mode, "hello-twice") == 0);
    }
    /* Let the budget settle before stopping (terminate's 1 on a slot
     * mid-restart). */
    if (hello_rows[_i].reason[0] != '\0')
        PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_RETIRED, 20000);
    pm_test_finish(c, o);
}
END_TEST

/* design.md, Handshake: a fork-mode worker does not run the handshake; it
 * has its slot, address and init data from the fork, its first frame is
 * READY, and a HELLO from it is a protocol fault like a second HELLO. */
START_TEST(test_fork_mode_ready_without_handshake)
{
    pm_options *o = opts_base(2);
    role[0] = W_WHO;
    role[1] = W_WHO;
    pm_options_set_bootstrap(o, worker, NULL);
    ck_assert_int_eq(pm_options_set_init_data(o, "seeds", 5), 0);
    pm_options_set_max_restarts(o, 1);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, got_text("#who slot=0 inc=1 init=seeds") && got_text("#who slot=1 inc=1 init=seeds"),
              10000);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    /* The replacement knows its new incarnation without an INIT, says
     * ready, then sends a HELLO: fenced "protocol", the other slot
     * untouched. */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 1), 0);
    PM_RUN_UNTIL(c, got_text("#who slot=1 inc=2 init=seeds") && count(PM_EVENT_FENCED, 1) >= 1, 10000);
    ck_assert_str_eq(find(PM_EVENT_FENCED, 1, 0)->reason, "protocol");
    ck_assert_uint_eq(find(PM_EVENT_FENCED, 1, 0)->inc, 2);
    ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 0);
    ck_assert_int_eq(info(c, 0).state, PM_SLOT_READY);
    /* The fence is charged: incarnation 3 says HELLO too, and the budget
     * (1) retires the slot. Terminated before that, it could find slot 1
     * mid-restart and have to kill it (terminate's 1, seen on CI); once
     * retired, only slot 0 is left, and it stops when asked. */
    PM_RUN_UNTIL(c, info(c, 1).state == PM_SLOT_RETIRED, 20000);
    ck_assert_int_eq(count(PM_EVENT_FENCED, 1), 2);
    ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 0);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_wrong_version_charged)
{
    char v[16];
    snprintf(v, sizeof(v), "%u", (unsigned)PM_PROTOCOL_VERSION + 1);
    pm_options *o = raw_opts("hello-version", v, 1);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_RETIRED, 20000);
    ck_assert_int_eq(count(PM_EVENT_FENCED, 0), 2);
    ck_assert_str_eq(find(PM_EVENT_FENCED, 0, 0)->reason, "version");
    ck_assert_str_eq(find(PM_EVENT_RESTART_SCHEDULED, 0, 1)->reason, "backoff");
    ck_assert_uint_eq(info(c, 0).restarts_total, 1);
    pm_test_finish(c, o);
}
END_TEST

/* design.md, Handshake: an exec'd worker finds INIT in its ring before it
 * says HELLO (written when its port opened), and no second INIT answers
 * the HELLO; for the first incarnation and for a restart. The worker waits
 * up to 30 s for that first frame before it says HELLO, so the outcome
 * does not depend on which side is faster. */
START_TEST(test_init_before_hello)
{
    pm_options *o = raw_opts("init-first", NULL, 0);
    pm_cluster *c = pm_test_spawn(o);
    pm_address a0;
    ck_assert_int_eq(pm_cluster_addresses(c, &a0, 1), 1);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "go", 2), 0);
    PM_RUN_UNTIL(c, ntexts >= 1, 30000);
    ck_assert_str_eq(texts[0], "init 1 first 1 slot 0 inc 1");
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 30000);
    ck_assert_int_eq(pm_cluster_addresses(c, &a0, 1), 1);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "go", 2), 0);
    PM_RUN_UNTIL(c, ntexts >= 2, 30000);
    ck_assert_str_eq(texts[1], "init 1 first 1 slot 0 inc 2");
    pm_test_finish(c, o);
}
END_TEST

/* design.md, Validation: "a frame type a worker may not send (INIT, STOP;
 * UNDELIVERABLE except as a refusal of a large message it was sent), or
 * traffic before the worker is ready is dropped and counted per slot"
 * (malformed_dropped), not fenced. This worker was sent nothing large. */
START_TEST(test_forbidden_types_dropped)
{
    static const int types[] = {PM__FT_INIT, PM__FT_UNDELIVERABLE, PM__FT_STOP};
    char t[8];
    snprintf(t, sizeof(t), "%d", types[_i]);
    pm_options *o = raw_opts("forbidden", t, 0);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, got_text("after"), 10000);
    ck_assert_int_eq(ntexts, 1);
    struct pm_cluster_stats st;
    pm_cluster_stats(c, &st);
    ck_assert_uint_eq(st.malformed_dropped, 1);
    ck_assert_uint_eq(pm_test_slot_malformed(c, 0), 1);
    ck_assert_uint_eq(st.fences_protocol, 0);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    ck_assert_int_eq(info(c, 0).state, PM_SLOT_READY);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_traffic_before_ready_dropped)
{
    pm_options *o = raw_opts("early-traffic", NULL, 0);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, got_text("after"), 10000);
    ck_assert_msg(!got_text("before"), "a message sent before READY was delivered");
    struct pm_cluster_stats st;
    pm_cluster_stats(c, &st);
    ck_assert_uint_eq(st.malformed_dropped, 1);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    pm_test_finish(c, o);
}
END_TEST

/* ---------------------------------------------------------------- messaging limits */

START_TEST(test_inflight_cap)
{
    memset(role, 0, sizeof(role));
    role[0] = W_REQUESTS;
    role[1] = W_READY; /* never reads, never answers */
    pm_options *o = role_opts(2);
    /* Room for more small requests in slot 1's ring than one requester may
     * have in flight, so that the hub's per-requester cap
     * (PM__INFLIGHT_PER_REQUESTER), not backpressure, is what stops them. */
    pm_options_set_ring_size(o, 1 << 21);
    pm_cluster *c = pm_test_spawn(o);
    pm_address a0;
    ck_assert_int_eq(pm_address_parse("procmesh@worker:1", &a0), 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "go", 2), 0);
    PM_RUN_UNTIL(c, ntexts >= 1, 30000);
    char want[64];
    snprintf(want, sizeof(want), "#undeliverable id=%u error=%d", PM__INFLIGHT_PER_REQUESTER + 1,
             -EBUSY);
    ck_assert_str_eq(texts[0], want);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), PM__INFLIGHT_PER_REQUESTER);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_main_send_eagain)
{
    memset(role, 0, sizeof(role));
    role[0] = W_READY; /* never reads */
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    pm_address to;
    ck_assert_int_eq(pm_address_parse("procmesh@worker:1", &to), 0);
    static char buf[1000];
    int rc = 0;
    unsigned sent = 0;
    /* Ring (256 KiB) plus the hub's queue (1024 frames) fill; then -EAGAIN,
     * never a block and never a drop. */
    while (sent < 100000 && (rc = pm_cluster_send(c, &to, buf, sizeof(buf))) == 0)
        sent++;
    ck_assert_int_eq(rc, -EAGAIN);
    ck_assert_uint_gt(sent, 1024);
    ck_assert_uint_eq(pm_test_slot_queued_frames(c, 0), 1024);
    ck_assert_int_eq(pm_cluster_send(c, &to, buf, sizeof(buf)), -EAGAIN);
    ck_assert_int_eq(pm_cluster_run(c, 50), 0);
    ck_assert_int_eq(info(c, 0).state, PM_SLOT_READY);
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_request_keeps_messages)
{
    memset(role, 0, sizeof(role));
    ask_keeps_messages(role_opts(1));
}
END_TEST

/* A request whose store cannot take a message for want of memory can no
 * longer reach its reply (pm_node_request: -ENOBUFS at once, as with the
 * store full); the message is left for pm_node_recv, with the others. */
START_TEST(test_request_store_without_memory)
{
    if (!pm_failalloc_here("test_request_store_without_memory"))
        return;
    memset(role, 0, sizeof(role));
    role[0] = W_ASK_MAIN_NOMEM;
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, ntexts >= 1, 10000);
    ck_assert_str_eq(texts[0], "#ask rc=-105 kept=m1,m2,m3 fired=1");
    pm_test_finish(c, o);
}
END_TEST

START_TEST(test_send_after_stop)
{
    memset(role, 0, sizeof(role));
    role[0] = W_SEND_AFTER_STOP;
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pm_cluster_terminate(c), 0); /* it ended by itself */
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->exit_code, 7);
    pm_options_free(o);
}
END_TEST

/* ---------------------------------------------------------------- pm_node_join */

START_TEST(test_join_errors)
{
    pm_node *n = NULL;
    unsetenv("PROCMESH_NODE");
    ck_assert_int_eq(pm_node_join(&n), -ENOENT);
    ck_assert_ptr_null(n);
    ck_assert_int_eq(pm_node_join(NULL), -EINVAL);
    /* A supervisor (this test) whose INIT is nonsense: -EPROTO. */
    pm__channel l;
    pm__channel_zero(&l);
    const pm__channel_params params = {.ring_cap = 1 << 18, .supervisor_pid = getpid()};
    ck_assert_int_eq(pm__channel_create(&l, 0, 1, &params), 0);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_INIT;
    ck_assert_int_eq(pm__frame_send(&l.tx, &h, "??", 2), 0);
    char env[64];
    snprintf(env, sizeof(env), "%d,%d,%d", l.memfd, l.node_efd, l.hub_efd);
    pid_t p = pm_test_fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        /* The fds are close-on-exec, not close-on-fork: the child has them. */
        setenv("PROCMESH_NODE", env, 1);
        int rc = pm_node_join(&n);
        _exit(rc == -EPROTO ? 0 : 1);
    }
    int st = pm_test_reap(p, 20000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "pm_node_join did not return -EPROTO for a malformed INIT");
    pm__channel_close(&l);
}
END_TEST

/*
 * The INIT payload's decoder (proto.c pm__init_decode), one condition per
 * row, the rest of a valid INIT around it (issue 27: hostile inputs tried
 * in full). Refused with -EBADMSG, *m untouched: shorter than its fixed
 * part; a reserved byte after the port set (6, 7); a name not ended
 * within its 64 bytes, or with bytes after its end (byte 63 set); a name
 * with a character a name may not have, or empty; init data longer than
 * PM_MAX_INIT_DATA; a size that is not the fixed part plus the data's
 * length (one short, one over). Taken: the longest names (63 bytes),
 * data of 0 bytes (data NULL) and of PM_MAX_INIT_DATA, every field as
 * encoded.
 */
enum { IR_SHORT, IR_RES6, IR_RES7, IR_SYS_UNENDED, IR_HOST_UNENDED, IR_SYS_TAIL, IR_HOST_TAIL,
       IR_SYS_BAD, IR_HOST_BAD, IR_SYS_EMPTY, IR_HOST_EMPTY, IR_DATA_OVER, IR_SIZE_SHORT,
       IR_SIZE_OVER, IR_OK_LONGEST, IR_OK_EMPTY, IR_OK_MAX_DATA, IR_ROWS };

START_TEST(test_init_decode_rows)
{
    static unsigned char data[PM_MAX_INIT_DATA + 1];
    static unsigned char buf[PM__INIT_FIXED + PM_MAX_INIT_DATA + 8];
    memset(data, 'd', sizeof(data));
    pm__init_msg m;
    memset(&m, 0, sizeof(m));
    m.slot = 0x01020304;
    m.addr.port = 0xbeef;
    m.addr.incarnation = 0x1122334455667788ull;
    strcpy(m.addr.system, "sys-a");
    strcpy(m.addr.host, "host.b");
    m.len = 5;
    m.data = data;
    if (_i == IR_OK_LONGEST) {
        memset(m.addr.system, 's', PM_NAME_MAX - 1);
        memset(m.addr.host, 'h', PM_NAME_MAX - 1);
    }
    if (_i == IR_OK_EMPTY) {
        m.len = 0;
        m.data = NULL;
    }
    if (_i == IR_OK_MAX_DATA || _i == IR_DATA_OVER)
        m.len = PM_MAX_INIT_DATA;
    size_t size = pm__init_size(m.len);
    memset(buf, 0, sizeof(buf));
    pm__init_encode(&m, buf);
    switch (_i) {
    case IR_SHORT: size = PM__INIT_FIXED - 1; break;
    case IR_RES6: buf[6] = 1; break;
    case IR_RES7: buf[7] = 0x80; break;
    case IR_SYS_UNENDED: memset(buf + 16, 's', PM_NAME_MAX); break;
    case IR_HOST_UNENDED: memset(buf + 80, 'h', PM_NAME_MAX); break;
    case IR_SYS_TAIL: buf[16 + PM_NAME_MAX - 1] = 'x'; break;
    case IR_HOST_TAIL: buf[80 + PM_NAME_MAX - 1] = 'x'; break;
    case IR_SYS_BAD: buf[16 + 1] = '/'; break;
    case IR_HOST_BAD: buf[80 + 2] = ' '; break;
    case IR_SYS_EMPTY: memset(buf + 16, 0, PM_NAME_MAX); break;
    case IR_HOST_EMPTY: memset(buf + 80, 0, PM_NAME_MAX); break;
    case IR_DATA_OVER:
        /* The length field one over, and the bytes there. */
        buf[144] = (unsigned char)((PM_MAX_INIT_DATA + 1) & 0xff);
        buf[145] = (unsigned char)(((PM_MAX_INIT_DATA + 1) >> 8) & 0xff);
        buf[146] = (unsigned char)(((PM_MAX_INIT_DATA + 1) >> 16) & 0xff);
        size = pm__init_size(PM_MAX_INIT_DATA + 1);
        break;
    case IR_SIZE_SHORT: size -= 1; break;
    case IR_SIZE_OVER: size += 1; break;
    default: break;
    }
    int ok = _i >= IR_OK_LONGEST;
    pm__init_msg out;
    memset(&out, 0xa5, sizeof(out));
    pm__init_msg untouched = out;
    /* Decoded from a copy of exactly size bytes: nothing past them may be
     * read (the sanitizer build reports a read past a heap block). */
    unsigned char *exact = malloc(size);
    ck_assert_ptr_nonnull(exact);
    memcpy(exact, buf, size);
    int rc = pm__init_decode(exact, size, &out);
    if (!ok) {
        free(exact);
        ck_assert_msg(rc == -EBADMSG, "row %d taken (%d)", _i, rc);
        ck_assert(memcmp(&out, &untouched, sizeof(out)) == 0);
        return;
    }
    ck_assert_int_eq(rc, 0);
    ck_assert_uint_eq(out.slot, m.slot);
    ck_assert_uint_eq(out.addr.port, m.addr.port);
    ck_assert_uint_eq(out.addr.incarnation, m.addr.incarnation);
    ck_assert_str_eq(out.addr.system, m.addr.system);
    ck_assert_str_eq(out.addr.host, m.addr.host);
    ck_assert_uint_eq(out.len, m.len);
    if (m.len == 0) {
        ck_assert_ptr_null(out.data);
    } else {
        ck_assert_ptr_eq(out.data, exact + PM__INIT_FIXED);
        ck_assert(memcmp(out.data, data, m.len) == 0);
    }
    free(exact);
}
END_TEST

/* A record shorter than a frame's header (a worker may publish any
 * length) at the very end of a ring's data, with nothing readable past the
 * ring (a page without access after it, where the channel's mapping
 * ends: the up ring is its last part): pm__frame_recv drops it, -EINVAL,
 * consumed, without reading a header's worth of bytes from it. The
 * records before it are zeros: frames of another version, dropped too. */
START_TEST(test_frame_recv_short_at_end)
{
    const uint64_t cap = 4096;
    size_t rs = pm__ring_region_size(cap), page = 4096;
    unsigned char *m = mmap(NULL, rs + page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert(m != MAP_FAILED);
    ck_assert_int_eq(mprotect(m + rs, page, PROT_NONE), 0);
    ck_assert_int_eq(pm__ring_format(m, cap, 1024), 0);
    pm__ring prod, cons;
    ck_assert_int_eq(pm__ring_attach(&prod, m, cap, 1024, PM__RING_PRODUCER, -1, -1), 0);
    ck_assert_int_eq(pm__ring_attach(&cons, m, cap, 1024, PM__RING_CONSUMER, -1, -1), 0);
    /* 3 x (8 + 1016) + (8 + 1000) = 4080: the short record's 16 bytes end
     * the data area exactly. */
    static const size_t fill[] = {1016, 1016, 1016, 1000, 3};
    void *at;
    for (size_t i = 0; i < ARRAY_LEN(fill); i++) {
        ck_assert_int_eq(pm__ring_reserve(&prod, fill[i], &at), 0);
        memset(at, 0, fill[i]);
        pm__ring_commit(&prod, fill[i]);
    }
    ck_assert_ptr_eq((unsigned char *)at + 8, m + rs); /* its padded end is the ring's */
    pm__ring_publish(&prod);
    pm__frame_hdr h;
    const void *payload;
    for (int i = 0; i < 4; i++)
        ck_assert_int_lt(pm__frame_recv(&cons, 1024, &h, &payload), 0);
    ck_assert_int_eq(pm__frame_recv(&cons, 1024, &h, &payload), -EINVAL);
    ck_assert_int_eq(pm__frame_recv(&cons, 1024, &h, &payload), 0); /* consumed */
    /* A header-only frame, sent without a payload pointer at all (NULL, 0:
     * nothing is copied from it), comes out whole. */
    pm__ring_release(&cons);
    pm__frame_hdr e;
    memset(&e, 0, sizeof(e));
    e.type = PM__FT_MSG;
    e.dst = 4;
    static const char any[1];
    ck_assert_int_eq(pm__frame_send(&prod, &e, any, SIZE_MAX), -EMSGSIZE); /* no wrap */
    ck_assert_int_eq(pm__frame_send(&prod, &e, any, (size_t)UINT32_MAX), -EMSGSIZE);
    ck_assert_int_eq(pm__frame_send(&prod, &e, NULL, 0), 0);
    ck_assert_int_eq(pm__frame_recv(&cons, 1024, &h, &payload), 1);
    ck_assert_uint_eq(h.type, PM__FT_MSG);
    ck_assert_uint_eq(h.dst, 4);
    ck_assert_uint_eq(h.len, 0);
    munmap(m, rs + page);
}
END_TEST

/* A channel larger than RLIMIT_FSIZE allows is refused -EFBIG before any
 * memfd is sized: the supervisor makes every channel, and SIGXFSZ (left at
 * its default here, which ends the process) must never reach it; a
 * cluster's spawn says the same. Within the limit it is made. */
START_TEST(test_channel_over_fsize)
{
    pm__channel_params cp = {.ring_cap = 1u << 20, .supervisor_pid = getpid(),
                             .max_message = PM_MAX_PAYLOAD};
    struct rlimit was, small;
    ck_assert_int_eq(getrlimit(RLIMIT_FSIZE, &was), 0);
    small = was;
    small.rlim_cur = 64 * 1024;
    pm__channel l;
    pm__channel_zero(&l);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &small), 0);
    int rc = pm__channel_create(&l, 1, 1, &cp);
    pm_cluster *c = NULL;
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    int spawned = pm_cluster_spawn(o, &c);
    ck_assert_int_eq(setrlimit(RLIMIT_FSIZE, &was), 0);
    ck_assert_int_eq(rc, -EFBIG);
    ck_assert_int_eq(spawned, -EFBIG);
    ck_assert_ptr_null(c);
    pm_options_free(o);
    ck_assert_int_eq(pm__channel_create(&l, 1, 1, &cp), 0);
    pm__channel_close(&l);
}
END_TEST

/* A channel as a supervisor makes one, with a well-formed INIT for slot
 * in its down ring, and PROCMESH_NODE naming it: what pm_node_join needs. */
static void channel_for_join(pm__channel *l, unsigned slot, const char *data)
{
    pm__channel_zero(l);
    const pm__channel_params params = {.ring_cap = 1 << 18, .supervisor_pid = getppid()};
    ck_assert_int_eq(pm__channel_create(l, slot, 1, &params), 0);
    pm__init_msg m;
    memset(&m, 0, sizeof(m));
    m.slot = slot;
    strcpy(m.addr.system, "sys");
    strcpy(m.addr.host, "host");
    m.addr.port = (uint16_t)slot;
    m.addr.incarnation = 1;
    m.data = data;
    m.len = (uint32_t)strlen(data);
    unsigned char buf[PM__INIT_FIXED + 64];
    ck_assert_uint_le(pm__init_size(m.len), sizeof(buf));
    pm__init_encode(&m, buf);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_INIT;
    ck_assert_int_eq(pm__frame_send(&l->tx, &h, buf, pm__init_size(m.len)), 0);
    char env[64];
    snprintf(env, sizeof(env), "%d,%d,%d", l->memfd, l->node_efd, l->hub_efd);
    ck_assert_int_eq(setenv("PROCMESH_NODE", env, 1), 0);
}

/* 0 when n is a node of slot whose init data is data. */
static int node_is(pm_node *n, unsigned slot, const char *data)
{
    const void *d;
    size_t len;
    return n != NULL && pm_node_slot(n) == slot && pm_node_init_data(n, &d, &len) == 0 &&
                   len == strlen(data) && (len == 0 || memcmp(d, data, len) == 0)
               ? 0
               : 1;
}

/* pm_node_join's first node is static storage (node.c: no malloc on an
 * exec'd worker's way to ready), a second one while the first is open
 * comes from the heap, and a join after the first's close takes the
 * static one again: three joins in one process, each node its own, the
 * INIT without data copied on the stack and one with data from the heap. */
START_TEST(test_join_three_nodes)
{
    pid_t p = pm_test_fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        pm__channel l1, l2, l3;
        pm_node *n1 = NULL, *n2 = NULL, *n3 = NULL;
        int bad = 0;
        channel_for_join(&l1, 1, "");
        bad |= pm_node_join(&n1) != 0 || node_is(n1, 1, "");
        channel_for_join(&l2, 2, "second");
        bad |= (pm_node_join(&n2) != 0 || node_is(n2, 2, "second") || n2 == n1) << 1;
        pm_node_close(n1);
        bad |= node_is(n2, 2, "second") << 2;
        channel_for_join(&l3, 3, "third");
        /* The static node again: n1's storage, a node of slot 3 now. */
        bad |= (pm_node_join(&n3) != 0 || node_is(n3, 3, "third") || n3 != n1) << 3;
        pm_node_close(n2);
        pm_node_close(n3);
        _exit(bad);
    }
    int st = pm_test_reap(p, 20000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0,
                  "three joins in one process: failures 0x%x", st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

/* A received message's fields, each from its frame. First the sender it
 * names, in peer mode, from frames the hub stamped: a remote sender's host comes from the frame's host index, so
 * two hosts' nodes of the same port and incarnation stay apart, before
 * and after a local sender's (whose address the receiver keeps between
 * frames: node_messaging.c fill_msg). A worker joined by hand, the frames
 * written into its down ring as its hub would. */
static int from_is(const pm_message *m, const char *host, unsigned port, uint64_t inc)
{
    return strcmp(m->from.host, host) == 0 && m->from.port == port && m->from.incarnation == inc;
}

START_TEST(test_recv_message_fields)
{
    pid_t p = pm_test_fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        pm__channel l;
        pm_node *n = NULL;
        channel_for_join(&l, 1, "");
        struct pm__ctl *ctl = l.map;
        ctl->peer_mode = 1;
        strcpy(ctl->hosts.name[0], "host");
        strcpy(ctl->hosts.name[1], "b");
        strcpy(ctl->hosts.name[2], "c");
        atomic_store(&ctl->hosts.count, 3);
        if (pm_node_join(&n) != 0)
            _exit(100);
        static const struct {
            uint16_t host;
            uint32_t src;
            uint64_t inc;
            const char *want_host;
            unsigned want_port;
        } rows[] = {
            /* First, a frame from node 0 of incarnation 0 (a notice about
             * a message to slot 0 sent while no incarnation was ready
             * carries those): the receiver's kept address is empty yet,
             * and must not be taken for it. */
            {PM__HOST_LOCAL, 0, 0, "host", 0},
            {1, 10, 5, "b", 10}, {2, 10, 5, "c", 10}, {PM__HOST_LOCAL, 3, 5, "host", 3},
            {1, 10, 5, "b", 10}, {1, 10, 6, "b", 10}, {2, 10, 6, "c", 10},
            /* Local senders: the same slot's next incarnation, then another
             * slot of that incarnation. */
            {PM__HOST_LOCAL, 3, 6, "host", 3}, {PM__HOST_LOCAL, 3, 7, "host", 3},
            {PM__HOST_LOCAL, 4, 7, "host", 4},
        };
        int bad = 0;
        for (unsigned i = 0; i < ARRAY_LEN(rows); i++) {
            pm__frame_hdr h = {.type = PM__FT_MSG, .src_host = rows[i].host, .src = rows[i].src,
                               .src_inc = rows[i].inc};
            if (pm__frame_send(&l.tx, &h, "x", 1) != 0)
                _exit(101);
            pm_message m;
            if (pm_node_recv(n, &m, 5000) != 0 ||
                !from_is(&m, rows[i].want_host, rows[i].want_port, rows[i].inc))
                bad = bad != 0 ? bad : 1 + (int)i;
        }
        /* Every field of the message from its frame, none left as the
         * caller's memory had it: a request (its id and deadline), a
         * notice about a message (its error), a plain message. */
        static const struct {
            uint8_t type;
            uint64_t id;
            int64_t deadline;
            int error, kind;
        } kinds[] = {
            {PM__FT_REQUEST, 77, 123456, 0, PM_MSG_REQUEST},
            {PM__FT_UNDELIVERABLE, 0, 0, -ESTALE, PM_MSG_UNDELIVERABLE},
            {PM__FT_MSG, 0, 0, 0, PM_MSG_PLAIN},
        };
        for (unsigned i = 0; i < ARRAY_LEN(kinds); i++) {
            pm__frame_hdr h = {.type = kinds[i].type, .src_host = PM__HOST_LOCAL, .src = 2, .src_inc = 9,
                               .request_id = kinds[i].id, .deadline_ms = kinds[i].deadline,
                               .error = kinds[i].error};
            if (pm__frame_send(&l.tx, &h, "yz", 2) != 0)
                _exit(102);
            pm_message m;
            memset(&m, 0x5a, sizeof(m));
            const pm_address *self = pm_node_self(n);
            if (pm_node_recv(n, &m, 5000) != 0 || !from_is(&m, "host", 2, 9) ||
                strcmp(m.to.host, self->host) != 0 || strcmp(m.to.system, self->system) != 0 ||
                m.to.port != self->port || m.to.incarnation != self->incarnation ||
                m.request_id != kinds[i].id || m.deadline_ms != kinds[i].deadline ||
                m.error != kinds[i].error || m.kind != kinds[i].kind || m.len != 2 ||
                memcmp(m.data, "yz", 2) != 0)
                bad = bad != 0 ? bad : 1 + (int)(ARRAY_LEN(rows) + i);
        }
        _exit(bad);
    }
    int st = pm_test_reap(p, 20000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "row %d wrong (1 = the first)",
                  st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : -1);
}
END_TEST

/* An INIT for slot 1 with len bytes of init data, sent on l's down ring. */
static void send_init(pm__channel *l, size_t len)
{
    static char data[512];
    memset(data, 'd', sizeof(data));
    ck_assert_uint_le(len, sizeof(data));
    pm__init_msg m;
    memset(&m, 0, sizeof(m));
    m.slot = 1;
    strcpy(m.addr.system, "sys");
    strcpy(m.addr.host, "host");
    m.addr.port = 1;
    m.addr.incarnation = 1;
    m.data = data;
    m.len = (uint32_t)len;
    static unsigned char buf[PM__INIT_FIXED + sizeof(data)];
    pm__init_encode(&m, buf);
    pm__frame_hdr h;
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_INIT;
    ck_assert_int_eq(pm__frame_send(&l->tx, &h, buf, pm__init_size(m.len)), 0);
}

/* A channel made by this process (the worker's supervisor: its parent),
 * PROCMESH_NODE naming it. */
static void join_channel(pm__channel *l)
{
    pm__channel_zero(l);
    const pm__channel_params params = {.ring_cap = 1 << 18, .supervisor_pid = getpid()};
    ck_assert_int_eq(pm__channel_create(l, 1, 1, &params), 0);
    char env[64];
    snprintf(env, sizeof(env), "%d,%d,%d", l->memfd, l->node_efd, l->hub_efd);
    ck_assert_int_eq(setenv("PROCMESH_NODE", env, 1), 0);
}

/* Forks a worker that joins: its pid; it exits with -rc of pm_node_join
 * (after checking, on success, that it has slot 1 and len bytes of init
 * data: 99 if not). */
static pid_t join_worker(size_t len)
{
    pid_t p = pm_test_fork();
    ck_assert_int_ge(p, 0);
    if (p == 0) {
        pm_node *n = NULL;
        int rc = pm_node_join(&n);
        const void *d;
        size_t got;
        /* pm_node(3): "NULL with 0 when there are none"; EINVAL for a
         * NULL pointer to either. */
        if (rc == 0 && (pm_node_slot(n) != 1 || pm_node_init_data(n, &d, &got) != 0 || got != len ||
                        (len == 0) != (d == NULL) || pm_node_init_data(n, NULL, &got) != -EINVAL ||
                        pm_node_init_data(n, &d, NULL) != -EINVAL))
            _exit(99);
        _exit(-rc);
    }
    return p;
}

static int join_status(pid_t p)
{
    int st = pm_test_reap(p, 20000);
    ck_assert_msg(st != -1 && WIFEXITED(st), "the joining worker did not exit (status %d)", st);
    return WEXITSTATUS(st);
}

/* pm_node(3) ERRORS, pm_node_join, one handshake fault per row with the
 * rest of a good channel: the worker's HELLO finds its up ring full
 * (EPROTO); the down ring's shared head is nonsense (EPROTO); a record
 * too short for a frame comes first (EPROTO); frames that are not INIT
 * come first (skipped: joined); a STOP comes first (ESHUTDOWN: stopped
 * during the handshake); the INIT comes only after the worker
 * waited for it a while (joined); the supervisor goes away before any
 * INIT (ESHUTDOWN); the worker's memory fails for the copy of a large
 * INIT or for its init data (ENOMEM, failalloc.h, each in turn). */
START_TEST(test_join_handshake_rows)
{
    pm__channel l;
    /* Up ring full before the HELLO. */
    join_channel(&l);
    pm__ring prod;
    ck_assert_int_eq(pm__ring_attach(&prod, (void *)l.rx.sh, l.rx.cap, l.rx.max_frame,
                                     PM__RING_PRODUCER, -1, -1),
                     0);
    void *at;
    while (pm__ring_reserve(&prod, 1000, &at) == 0) {
        memset(at, 0, 1000);
        pm__ring_commit(&prod, 1000);
    }
    pm__ring_publish(&prod);
    send_init(&l, 0);
    ck_assert_int_eq(join_status(join_worker(0)), EPROTO);
    pm__channel_close(&l);
    /* A memory of a channel's size that is not sealed against
     * shrinking: no channel procmesh made (EPERM). */
    join_channel(&l);
    struct stat mst;
    ck_assert_int_eq(fstat(l.memfd, &mst), 0);
    int unsealed = memfd_create("not-a-channel", MFD_CLOEXEC);
    ck_assert_int_ge(unsealed, 0);
    ck_assert_int_eq(ftruncate(unsealed, mst.st_size), 0);
    char env[64];
    snprintf(env, sizeof(env), "%d,%d,%d", unsealed, l.node_efd, l.hub_efd);
    ck_assert_int_eq(setenv("PROCMESH_NODE", env, 1), 0);
    ck_assert_int_eq(join_status(join_worker(0)), EPERM);
    close(unsealed);
    pm__channel_close(&l);
    /* The down ring's head not a record boundary: at the attach, and
     * while the worker waits for its INIT (after its HELLO). */
    join_channel(&l);
    atomic_store(&l.tx.sh->head, 12345);
    ck_assert_int_eq(join_status(join_worker(0)), EPROTO);
    pm__channel_close(&l);
    join_channel(&l);
    pm__frame_hdr h;
    const void *payload;
    pid_t w = join_worker(0);
    uint64_t end = pm_test_ms() + 20000;
    int rc;
    while ((rc = pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload)) == 0 && pm_test_ms() < end)
        usleep(1000);
    ck_assert_int_eq(rc, 1);
    ck_assert_int_eq(h.type, PM__FT_HELLO);
    atomic_store(&l.tx.sh->head, 12345);
    ck_assert_int_eq(join_status(w), EPROTO);
    pm__channel_close(&l);
    /* A record of 3 bytes first. */
    join_channel(&l);
    ck_assert_int_eq(pm__ring_reserve(&l.tx, 3, &at), 0);
    memset(at, 0, 3);
    pm__ring_commit(&l.tx, 3);
    pm__ring_publish(&l.tx);
    send_init(&l, 0);
    ck_assert_int_eq(join_status(join_worker(0)), EPROTO);
    pm__channel_close(&l);
    /* A good INIT without data. */
    join_channel(&l);
    send_init(&l, 0);
    ck_assert_int_eq(join_status(join_worker(0)), 0);
    pm__channel_close(&l);
    /* A message and a credit before the INIT: skipped. */
    join_channel(&l);
    memset(&h, 0, sizeof(h));
    h.type = PM__FT_MSG;
    ck_assert_int_eq(pm__frame_send(&l.tx, &h, "x", 1), 0);
    h.type = PM__FT_CREDIT;
    ck_assert_int_eq(pm__frame_send(&l.tx, &h, NULL, 0), 0);
    send_init(&l, 5);
    ck_assert_int_eq(join_status(join_worker(5)), 0);
    pm__channel_close(&l);
    /* A STOP before the INIT: the supervisor stopped the worker during
     * the handshake. */
    join_channel(&l);
    h.type = PM__FT_STOP;
    ck_assert_int_eq(pm__frame_send(&l.tx, &h, NULL, 0), 0);
    send_init(&l, 5);
    ck_assert_int_eq(join_status(join_worker(5)), ESHUTDOWN);
    pm__channel_close(&l);
    /* The INIT late: the worker sent its HELLO and sleeps waiting (its
     * waits time out every PM__NODE_POLL_MS and go on while its
     * supervisor lives). */
    join_channel(&l);
    w = join_worker(300);
    end = pm_test_ms() + 20000;
    while ((rc = pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload)) == 0 && pm_test_ms() < end)
        usleep(1000);
    ck_assert_int_eq(rc, 1);
    ck_assert_int_eq(h.type, PM__FT_HELLO);
    const long futex_nr[] = {__NR_futex, __NR_poll, __NR_ppoll};
    ck_assert_int_eq(pm_test_wait_in(w, futex_nr, ARRAY_LEN(futex_nr)), 0);
    /* Two of its waits end empty (each made again is one more sleep). */
    ck_assert_int_eq(pm_test_wait_sleeps(w, 2), 0);
    send_init(&l, 300);
    ck_assert_int_eq(join_status(w), 0);
    pm__channel_close(&l);
    /* The supervisor gone before any INIT: a process between this test
     * and the worker makes the channel, starts the worker, and exits once
     * the worker waits; the worker tells its result through a pipe. */
    int pfd[2];
    ck_assert_int_eq(pipe2(pfd, O_CLOEXEC), 0);
    pid_t mid = pm_test_fork();
    ck_assert_int_ge(mid, 0);
    if (mid == 0) {
        join_channel(&l);
        pid_t k = fork();
        if (k == 0) {
            pm_node *n = NULL;
            int r = pm_node_join(&n);
            ssize_t wr = write(pfd[1], &r, sizeof(r));
            _exit(wr == (ssize_t)sizeof(r) ? 0 : 1);
        }
        ssize_t wr = write(pfd[1], &k, sizeof(k));
        (void)wr;
        if (k < 0 || pm_test_wait_in(k, futex_nr, ARRAY_LEN(futex_nr)) != 0)
            _exit(1);
        _exit(0); /* no INIT, ever */
    }
    close(pfd[1]);
    pid_t k = 0;
    ck_assert_int_eq(read(pfd[0], &k, sizeof(k)), (ssize_t)sizeof(k));
    ck_assert_int_gt(k, 0);
    ck_assert_int_eq(join_status(mid), 0);
    struct pollfd pw = {pfd[0], POLLIN, 0};
    int r = 1;
    if (poll(&pw, 1, 20000) == 1)
        ck_assert_int_eq(read(pfd[0], &r, sizeof(r)), (ssize_t)sizeof(r));
    if (r == 1)
        kill(k, SIGKILL); /* it hung: killed (it reported otherwise, and is gone) */
    close(pfd[0]);
    ck_assert_int_eq(r, -ESHUTDOWN);
    /* pm_node_ready, through the up ring as the supervisor reads it: a
     * second call sends nothing (one READY, "idempotent"); a ring with
     * room for the HELLO only is waited on until the supervisor makes
     * room, past the wait's own second; a poisoned one (the supervisor's
     * tail nonsense) is -EPROTO. The worker exits with -rc of its first
     * pm_node_ready, else 0 if the second says 0. */
    for (int row = 0; row < 3; row++) {
        join_channel(&l);
        send_init(&l, 0);
        if (row >= 1) {
            /* 72 bytes left: the HELLO's record (8 + 56 + 4, aligned), not
             * the READY's after it (8 + 56). */
            ck_assert_int_eq(pm__ring_attach(&prod, (void *)l.rx.sh, l.rx.cap, l.rx.max_frame,
                                             PM__RING_PRODUCER, -1, -1),
                             0);
            uint64_t left = l.rx.cap - 72;
            while (left > 0) {
                size_t len = left >= 2008 ? 1000 : (size_t)left - PM__RING_REC_HDR;
                ck_assert_int_eq(pm__ring_reserve(&prod, len, &at), 0);
                memset(at, 0, len);
                pm__ring_commit(&prod, len);
                left -= PM__RING_REC_HDR + len;
            }
            pm__ring_publish(&prod);
        }
        pid_t rw = pm_test_fork();
        ck_assert_int_ge(rw, 0);
        if (rw == 0) {
            pm_node *n = NULL;
            if (pm_node_join(&n) != 0)
                _exit(98);
            int r1 = pm_node_ready(n);
            _exit(r1 < 0 ? -r1 : pm_node_ready(n) == 0 ? 0 : 97);
        }
        if (row >= 1)
            ck_assert_int_eq(pm_test_wait_in(rw, futex_nr, ARRAY_LEN(futex_nr)), 0);
        if (row == 2) {
            atomic_store(&l.rx.sh->tail, 12345); /* seen when its wait ends */
            ck_assert_int_eq(join_status(rw), EPROTO);
            pm__channel_close(&l);
            continue;
        }
        if (row == 1) /* its wait for room (1 s) ends empty once, and is made again */
            ck_assert_int_eq(pm_test_wait_sleeps(rw, 1), 0);
        /* The HELLO (behind the filler in row 1), then room. */
        end = pm_test_ms() + 20000;
        while ((rc = pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload)) != 1 ||
               h.type != PM__FT_HELLO) {
            ck_assert_int_lt(pm_test_ms(), end);
            if (rc == 0)
                usleep(1000);
        }
        pm__ring_consume(&l.rx);
        pm__ring_release(&l.rx);
        ck_assert_int_eq(join_status(rw), 0);
        ck_assert_int_eq(pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload), 1);
        ck_assert_int_eq(h.type, PM__FT_READY);
        pm__ring_consume(&l.rx);
        ck_assert_int_eq(pm__frame_recv(&l.rx, PM__CHANNEL_MAX_FRAME, &h, &payload), 0);
        pm__channel_close(&l);
    }
    /* A join in a child of a process that joined before (which counted
     * forks from then on): the child's node is its own, usable there. */
    join_channel(&l);
    send_init(&l, 0);
    pid_t p1 = pm_test_fork();
    ck_assert_int_ge(p1, 0);
    if (p1 == 0) {
        pm_node *n1 = NULL;
        if (pm_node_join(&n1) != 0 || pm_node_slot(n1) != 1)
            _exit(1);
        pm_node_close(n1);
        /* Closed (the static node: its memory stays), it is no node any
         * more: -EINVAL, nothing of it, a second close harmless. */
        if (pm_node_slot(n1) != 0 || pm_node_self(n1) != NULL || pm_node_ready(n1) != -EINVAL)
            _exit(4);
        pm_node_close(n1);
        pm__channel l2;
        join_channel(&l2);
        send_init(&l2, 0);
        int st = pm_test_reap(join_worker(0), 20000);
        _exit(st != -1 && WIFEXITED(st) ? WEXITSTATUS(st) : 2);
    }
    ck_assert_int_eq(join_status(p1), 0);
    pm__channel_close(&l);
    /* Memory: each allocation of a join failing in turn, then none: with
     * a large INIT its copy and its init data, with a small one (copied
     * on the stack) its init data. */
    if (!PM_FAILALLOC)
        return;
    /* 256 bytes: the largest INIT copied on the stack (PM__INIT_FIXED +
     * 256), one allocation. */
    static const size_t init_len[] = {300, 100, 256};
    for (int big = 0; big < 3; big++) {
    int failed = 0;
    for (long a = 1;; a++) {
        ck_assert_int_lt(a, 10);
        join_channel(&l);
        send_init(&l, init_len[big]);
        pid_t p = pm_test_fork();
        ck_assert_int_ge(p, 0);
        if (p == 0) {
            pm_node *n = NULL;
            pm_failalloc_arm(a);
            int jr = pm_node_join(&n);
            int hit = pm_failalloc_disarm();
            _exit(hit ? (jr == -ENOMEM && n == NULL ? 1 : 3) : (jr == 0 ? 2 : 4));
        }
        int st = join_status(p);
        pm__channel_close(&l);
        ck_assert_msg(st == 1 || st == 2, "allocation %ld: status %d", a, st);
        if (st == 2)
            break;
        failed++;
    }
    ck_assert_int_eq(failed, big == 0 ? 2 : 1);
    }
    /* A second node while the first (static) one is open comes from the
     * heap: that allocation refused, -ENOMEM, *out untouched. */
    pid_t p2 = pm_test_fork();
    ck_assert_int_ge(p2, 0);
    if (p2 == 0) {
        pm__channel l2, l3;
        join_channel(&l2);
        send_init(&l2, 0);
        pm_node *n1 = NULL, *n2 = (pm_node *)(void *)&l3;
        if (pm_node_join(&n1) != 0)
            _exit(1);
        join_channel(&l3);
        send_init(&l3, 0);
        pm_failalloc_arm(1);
        int jr = pm_node_join(&n2);
        int hit = pm_failalloc_disarm();
        _exit(jr == -ENOMEM && hit && n2 == (pm_node *)(void *)&l3 ? 0 : 3);
    }
    ck_assert_int_eq(join_status(p2), 0);
}
END_TEST

/* pm_node(3): pm_node_ready "is idempotent" (a second call says 0 and the
 * supervisor sees one READY); once the stop request came, pm_node_recv
 * "and every later call returns -ESHUTDOWN", pm_node_beat included
 * ("ESHUTDOWN once the worker should stop"). The worker ignores SIGTERM
 * and reports by its exit code. */
START_TEST(test_ready_twice_and_calls_after_stop)
{
    memset(role, 0, sizeof(role));
    role[0] = W_AFTER_STOP;
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, got_text("#ready twice"), 10000);
    ck_assert_int_eq(count(PM_EVENT_READY, 0), 1);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    ck_assert_int_eq(pm_cluster_terminate(c), 0); /* it ended by itself */
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_msg(e->exit_code == 7, "exit code %d (20 + a bit per call that did not say -ESHUTDOWN)",
                  e->exit_code);
    pm_options_free(o);
}
END_TEST

/* pm_options(3), pm_options_set_on_permanently_down: called "exactly once
 * per slot that is retired"; "Without one, procmesh prints one line on
 * stderr." The callback removed (NULL), a budget of 0, the worker killed:
 * one line naming the slot, its address and its restart count. */
START_TEST(test_default_permanently_down_line)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(2);
    ck_assert_int_eq(pm_options_set_on_permanently_down(o, NULL, NULL), 0);
    ck_assert_int_eq(pm_options_set_max_restarts(o, 0), 0);
    char path[32];
    int saved = pm_test_stderr_to_file(path);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(kill(info(c, 1).pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, info(c, 1).state == PM_SLOT_RETIRED, 10000);
    ck_assert_int_eq(pm_cluster_run(c, 100), 0);
    int rc = pm_cluster_terminate(c);
    pm_test_stderr_restore(saved);
    static char text[8192];
    pm_test_read_file(path, text, sizeof(text));
    unlink(path);
    ck_assert_int_eq(rc, 0);
    ck_assert_int_eq(count(PM_EVENT_RETIRED, 1), 1);
    int lines = 0;
    for (const char *p = text; (p = strstr(p, "permanently down")) != NULL; p++)
        lines++;
    ck_assert_msg(lines == 1, "%d lines about a retired slot on stderr:\n%s", lines, text);
    ck_assert_msg(strstr(text, "procmesh: slot 1 (procmesh@worker:2#1) is permanently down after 0 restarts\n") != NULL,
                  "stderr:\n%s", text);
    pm_options_free(o);
}
END_TEST

/* pm_cluster(3), NOTES: with handle_signals the cluster blocks SIGCHLD,
 * SIGTERM, SIGINT and SIGHUP in the spawning thread "until
 * pm_cluster_terminate() restores the mask". */
START_TEST(test_handle_signals_mask_restored)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 1), 0);
    sigset_t before, during, after;
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &before), 0);
    static const int sigs[] = {SIGCHLD, SIGTERM, SIGINT, SIGHUP};
    for (size_t i = 0; i < ARRAY_LEN(sigs); i++)
        ck_assert_int_eq(sigismember(&before, sigs[i]), 0);
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &during), 0);
    for (size_t i = 0; i < ARRAY_LEN(sigs); i++)
        ck_assert_int_eq(sigismember(&during, sigs[i]), 1);
    pm_test_finish(c, o);
    ck_assert_int_eq(pthread_sigmask(SIG_SETMASK, NULL, &after), 0);
    for (int sig = 1; sig < NSIG; sig++)
        ck_assert_msg(sigismember(&after, sig) == sigismember(&before, sig),
                      "signal %d: blocked %d before the cluster, %d after terminate", sig,
                      sigismember(&before, sig), sigismember(&after, sig));
}
END_TEST

static void *term_self(void *arg)
{
    (void)arg;
    kill(getpid(), SIGTERM); /* blocked in every thread: the cluster's signalfd takes it */
    return NULL;
}

/* pm_cluster(3), pm_cluster_terminate: "A SIGTERM, SIGINT or SIGHUP that
 * arrives meanwhile (with handle_signals) skips the rest of the grace."
 * The worker ignores both the stop request and SIGTERM; the stop timeout
 * is 60 s. A SIGTERM sent by a thread (before or during terminate: either
 * way it waits in the cluster's signalfd) ends the grace: the worker is
 * SIGKILLed, terminate returns 1 long before the timeout. */
START_TEST(test_terminate_signal_skips_grace)
{
    memset(role, 0, sizeof(role));
    role[0] = W_STUBBORN;
    pm_options *o = role_opts(1);
    ck_assert_int_eq(pm_options_set_handle_signals(o, 1), 0);
    ck_assert_int_eq(pm_options_set_stop_timeout_ms(o, 60000), 0);
    /* Its silence must not end it either: no fence within the test. */
    ck_assert_int_eq(pm_options_set_heartbeat_timeout_ms(o, 120000), 0);
    pm_cluster *c = pm_test_spawn(o);
    pid_t pid = info(c, 0).pid;
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, term_self, NULL), 0);
    uint64_t t0 = pm_test_ms();
    ck_assert_int_eq(pm_cluster_terminate(c), 1);
    ck_assert_uint_lt(pm_test_ms() - t0, 30000);
    pthread_join(t, NULL);
    ck_assert_int_eq(kill(pid, 0), -1); /* reaped */
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_ptr_nonnull(e);
    ck_assert_int_eq(e->signal, SIGKILL);
    pm_options_free(o);
}
END_TEST

/* pm_node(3), ERRORS, pm_node_join: EINVAL when PROCMESH_NODE is
 * malformed; *out untouched, no fd of the caller's closed. */
START_TEST(test_join_malformed_env)
{
    /* None may parse as three or four fds: join would then take them. */
    static const char *const bad[] = {"",       "x",      "3",         "3,4",   "3,4,x",
                                      "3,4,5,", "3,4,5x", "3,4,5,6,7", "3;4;5", "-3,4,5",
                                      "+3,4,5", " 3,4,5", "3, 4,5", ",98,97", "99,,97",
                                      "99,98,", "16777217,98,97", "99,98,97,16777217",
                                      "99999999999999999999,98,97", "99x,98,97", "99:,98,97",
                                      "99,98,97,", "99,98,97x", "99,98,97,96x"};
    /* Fd 0 closed (this test's process ends with the test), so that a
     * field read as 0 would fail the attach with EBADF, not pass. */
    close(0);
    int fds_before = pm_test_count_fds();
    for (size_t i = 0; i < ARRAY_LEN(bad); i++) {
        ck_assert_int_eq(setenv("PROCMESH_NODE", bad[i], 1), 0);
        pm_node *n = (pm_node *)(void *)&bad;
        ck_assert_msg(pm_node_join(&n) == -EINVAL, "PROCMESH_NODE='%s' not refused -EINVAL", bad[i]);
        ck_assert_ptr_eq(n, (void *)&bad);
    }
    /* Well-formed, every digit and the bound (1 << 24) taken: the first
     * fd is not open (fd 0 closed above; the others above any process's
     * fd limit, nr_open at most 1 << 20), so the attach fails on it
     * (EBADF). */
    static const char *const closed[] = {"9999999,98,97", "0,98,97", "16777216,98,97",
                                         "1234567,98,97", "9999999,98,97,96"};
    for (size_t i = 0; i < ARRAY_LEN(closed); i++) {
        ck_assert_int_eq(setenv("PROCMESH_NODE", closed[i], 1), 0);
        pm_node *n = NULL;
        int rc = pm_node_join(&n);
        ck_assert_msg(rc == -EBADF, "PROCMESH_NODE='%s': %d, not -EBADF", closed[i], rc);
        ck_assert_ptr_null(n);
    }
    unsetenv("PROCMESH_NODE");
    ck_assert_int_eq(pm_test_count_fds(), fds_before);
}
END_TEST

/* pm_cluster_peers(3), RETURN VALUE: both calls return how many entries
 * there are, 0 outside peer mode, and -EINVAL for a NULL or foreign
 * cluster or NULL arrays with a cap above 0. */
START_TEST(test_peers_outside_peer_mode)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    pm_peer_info p[2];
    const char *names[4];
    uint64_t counts[4];
    ck_assert_int_eq(pm_cluster_peers(c, p, 2), 0);
    ck_assert_int_eq(pm_cluster_peers(c, NULL, 0), 0);
    ck_assert_int_eq(pm_cluster_peer_failures(c, names, counts, 4), 0);
    ck_assert_int_eq(pm_cluster_peer_failures(c, NULL, NULL, 0), 0);
    ck_assert_int_eq(pm_cluster_peers(c, NULL, 1), -EINVAL);
    ck_assert_int_eq(pm_cluster_peer_failures(c, NULL, counts, 1), -EINVAL);
    ck_assert_int_eq(pm_cluster_peer_failures(c, names, NULL, 1), -EINVAL);
    ck_assert_int_eq(pm_cluster_peers(NULL, p, 2), -EINVAL);
    ck_assert_int_eq(pm_cluster_peer_failures(NULL, names, counts, 4), -EINVAL);
    ck_assert_int_eq(pm_cluster_peers((const pm_cluster *)(const void *)o, p, 2), -EINVAL);
    pm_test_finish(c, o);
}
END_TEST

/* doc/design.md, Backpressure, Stop: after the stop request "pm_node_send,
 * try_send and request return -ESHUTDOWN while pm_node_reply still answers
 * the requests in hand"; pm_node(3): a request carries its requester's
 * deadline. Slot 1 asks slot 0, which holds the request; slot 0 alone is
 * then stopped (pm_cluster_restart_slot) and answers once it sees
 * -ESHUTDOWN: slot 1 gets that answer. */
START_TEST(test_reply_after_stop)
{
    memset(role, 0, sizeof(role));
    role[0] = W_HOLDER;
    role[1] = W_ASK_SLOT0;
    pm_options *o = role_opts(2);
    pm_options_set_stop_timeout_ms(o, 20000);
    pm_cluster *c = pm_test_spawn(o);
    pm_address a1 = pm_test_slot_addr(1, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a1, "go", 2), 0);
    PM_RUN_UNTIL(c, pm_test_slot_inflight(c, 0) == 1, 10000); /* slot 0 holds it */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, ntexts >= 1 && count(PM_EVENT_EXITED, 0) == 1, 25000);
    ck_assert_str_eq(texts[0], "#asked rc=0 reply=late-ok");
    const rec *e = find(PM_EVENT_EXITED, 0, 0);
    ck_assert_msg(e->exit_code == 7, "slot 0 exited %d (7: its reply after the stop said 0)",
                  e->exit_code);
    ck_assert_int_eq(count(PM_EVENT_FENCED, -1), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 10000);
    pm_test_finish(c, o);
}
END_TEST

/*
 * How long the hub remembers a request in flight (hub_core.c,
 * pm__hub_add_inflight; design.md, Requests): a worker's request without
 * a deadline, or with one past the maximum lifetime, until the lifetime
 * ends; one with a nearer deadline, until that deadline; main's
 * broadcast keeps its own deadline even past the lifetime. Each entry is
 * then forgotten exactly when it is due, not a millisecond before, and
 * with it its count against its requester's cap and the hub's total (a
 * total left above 0 keeps the purge timer waking the supervisor). The
 * purge is run here by hand at those instants (pm_test_purge_at): its
 * timer fires at most every second, and waiting for it would decide by
 * the machine's speed. The lifetime is 120 s and the nearest deadline
 * 60 s away: the real timer meets none of them while the test runs.
 */
static void on_bcast_ignored(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c, (void)r, (void)n, (void)arg;
}

START_TEST(test_inflight_expiry)
{
    memset(role, 0, sizeof(role));
    role[0] = W_DEADLINES;
    role[1] = W_READY; /* never reads: every request to it stays in flight */
    pm_options *o = role_opts(2);
    pm_cluster *c = pm_test_spawn(o);
    const uint64_t life = 120000;
    pm_test_set_inflight_lifetime(c, life);
    int64_t t0 = (int64_t)pm__now_ms();
    pm_address a0 = pm_test_slot_addr(0, 0);
    ck_assert_int_eq(pm_cluster_send(c, &a0, "go", 2), 0);
    PM_RUN_UNTIL(c, ntexts >= 1 && pm_test_slot_inflight(c, 1) == 3, 20000);
    long long d2, d3;
    ck_assert_int_eq(sscanf(texts[0], "#deadlines %lld %lld", &d2, &d3), 2);
    int64_t tb = (int64_t)pm__now_ms();
    ck_assert_int_eq(pm_cluster_broadcast(c, "b", 1, 600000, on_bcast_ignored, NULL), 0);
    PM_RUN_UNTIL(c, pm_test_slot_inflight(c, 1) == 4, 20000);
    int64_t t1 = (int64_t)pm__now_ms();
    ck_assert_uint_eq(pm_test_main_inflight(c, 1), 1);
    ck_assert_uint_eq(pm_test_requests_out(c, 0), 3);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 1); /* the broadcast's */
    ck_assert_uint_eq(pm_test_inflight_total(c), 5);
    for (uint32_t i = 0; i < 4; i++) {
        pm_test_inflight e = pm_test_inflight_entry(c, 1, i);
        if (e.requester == PM__NODE_MAIN) {
            /* Its own deadline, though past the lifetime. */
            ck_assert_int_ge(e.deadline_ms, tb + 600000);
            ck_assert_int_le(e.deadline_ms, t1 + 600000);
            ck_assert_int_eq(e.expires_ms, e.deadline_ms);
            continue;
        }
        ck_assert_uint_eq(e.requester, 0);
        ck_assert_int_eq(e.deadline_ms, e.id == 1 ? 0 : e.id == 2 ? d2 : d3);
        if (e.id == 2) { /* the nearer deadline */
            ck_assert_int_eq(e.expires_ms, d2);
        } else { /* none, or one past the lifetime: the lifetime */
            ck_assert_int_ge(e.expires_ms, t0 + (int64_t)life);
            ck_assert_int_le(e.expires_ms, t1 + (int64_t)life);
        }
    }
    /* Forgotten when due, earliest first, none before. */
    for (uint32_t left = 4; left > 0;) {
        int64_t x = INT64_MAX;
        for (uint32_t i = 0; i < left; i++)
            if (pm_test_inflight_entry(c, 1, i).expires_ms < x)
                x = pm_test_inflight_entry(c, 1, i).expires_ms;
        uint32_t due = 0;
        for (uint32_t i = 0; i < left; i++)
            due += pm_test_inflight_entry(c, 1, i).expires_ms == x;
        pm_test_purge_at(c, (uint64_t)x - 1);
        ck_assert_uint_eq(pm_test_slot_inflight(c, 1), left);
        pm_test_purge_at(c, (uint64_t)x);
        ck_assert_uint_eq(pm_test_slot_inflight(c, 1), left - due);
        left -= due;
    }
    ck_assert_uint_eq(pm_test_requests_out(c, 0), 0);
    ck_assert_uint_eq(pm_test_main_inflight(c, 1), 0);
    /* Slot 0 did not answer the broadcast either: main's entry in its
     * table had the same deadline, and went at the same purge. */
    ck_assert_uint_eq(pm_test_slot_inflight(c, 0), 0);
    ck_assert_uint_eq(pm_test_inflight_total(c), 0);
    pm_test_finish(c, o);
}
END_TEST

/* A request in flight is forgotten with its requester's incarnation and
 * with its target's (hub_core.c pm__hub_forget_requests_of,
 * pm__hub_detach_inflight), and only those: slots 0 and 2 (both
 * incarnation 1) each have three requests in flight to slot 1, which
 * never answers. Slot 0 restarts: its three go, slot 2's stay, and slot
 * 0's count against its cap is back to 0. Slot 1 restarts: slot 2's go
 * (answered as undeliverable), and every count with them. The hub's total
 * ends at 0: left above, its purge timer would wake the idle
 * supervisor every second. */
START_TEST(test_inflight_forgotten_with_incarnations)
{
    memset(role, 0, sizeof(role));
    role[0] = W_DEADLINES;
    role[1] = W_READY;
    role[2] = W_DEADLINES;
    pm_options *o = role_opts(3);
    pm_cluster *c = pm_test_spawn(o);
    for (unsigned i = 0; i <= 2; i += 2) {
        pm_address a = pm_test_slot_addr(i, 0);
        ck_assert_int_eq(pm_cluster_send(c, &a, "go", 2), 0);
    }
    PM_RUN_UNTIL(c, pm_test_slot_inflight(c, 1) == 6, 20000);
    ck_assert_uint_eq(pm_test_requests_out(c, 0), 3);
    ck_assert_uint_eq(pm_test_requests_out(c, 2), 3);
    ck_assert_uint_eq(pm_test_inflight_total(c), 6);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 0), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 10000);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), 3);
    for (uint32_t i = 0; i < 3; i++)
        ck_assert_uint_eq(pm_test_inflight_entry(c, 1, i).requester, 2);
    ck_assert_uint_eq(pm_test_requests_out(c, 0), 0);
    ck_assert_uint_eq(pm_test_requests_out(c, 2), 3);
    ck_assert_uint_eq(pm_test_inflight_total(c), 3);
    ck_assert_int_eq(pm_cluster_restart_slot(c, 1), 0);
    PM_RUN_UNTIL(c, info(c, 1).state == PM_SLOT_READY && info(c, 1).incarnation == 2, 10000);
    ck_assert_uint_eq(pm_test_slot_inflight(c, 1), 0);
    ck_assert_uint_eq(pm_test_requests_out(c, 2), 0);
    ck_assert_uint_eq(pm_test_inflight_total(c), 0);
    pm_test_finish(c, o);
}
END_TEST

/* pm_node(3): a request to a node the mesh does not have is answered at
 * once as undeliverable, -ENOENT. Raw frames, so that nothing in the
 * worker's library refuses the address first: the first number past the
 * last slot (the hub's bound, hub_core.c pm__hub_check_dest, at its
 * edge), one further, and the largest local node. */
START_TEST(test_request_to_no_such_node)
{
    const uint32_t to[] = {2, 3, 0xFFFFFFFEu};
    for (size_t i = 0; i < sizeof(to) / sizeof(to[0]); i++) {
        memset(role, 0, sizeof(role));
        role[0] = W_TO_NOWHERE;
        nowhere = to[i];
        ntexts = 0;
        pm_options *o = role_opts(2);
        pm_cluster *c = pm_test_spawn(o);
        pm_address a = pm_test_slot_addr(0, 0);
        ck_assert_int_eq(pm_cluster_send(c, &a, "go", 2), 0);
        PM_RUN_UNTIL(c, ntexts >= 1, 20000);
        ck_assert_msg(strcmp(texts[0], "#nowhere error=-2") == 0, "node %u: %s", to[i], texts[0]);
        struct pm_cluster_stats st;
        ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
        ck_assert_uint_eq(st.undeliverable, 1); /* the notice, counted */
        pm_test_finish(c, o);
    }
}
END_TEST

/* pm_node(3): an answer reaches the requester it answers. The hub finds
 * a reply's entry by its requester and request id together: two workers'
 * first requests carry the same id (each counts its own from 1), and the
 * target answers them in the reverse of their order in the hub's table,
 * so a hub that matched by id alone would hand the first answer the
 * other requester's entry (whose incarnation, 1 against the restarted
 * requester's 2, then fails the check: the answer is dropped) and the
 * requesters would time out. */
START_TEST(test_same_id_answers_in_reverse)
{
    memset(role, 0, sizeof(role));
    role[0] = W_REVERSE;
    role[1] = W_ASK_SLOT0;
    role[2] = W_ASK_SLOT0;
    pm_options *o = role_opts(3);
    pm_cluster *c = pm_test_spawn(o);
    /* Requesters of different incarnations: the entry of one is then
     * not the other's in any field the answer is checked against. */
    ck_assert_int_eq(pm_cluster_restart_slot(c, 2), 0);
    PM_RUN_UNTIL(c, info(c, 2).state == PM_SLOT_READY && info(c, 2).incarnation == 2, 10000);
    for (unsigned i = 1; i <= 2; i++) {
        pm_address a = pm_test_slot_addr(i, 0);
        ck_assert_int_eq(pm_cluster_send(c, &a, "go", 2), 0);
    }
    PM_RUN_UNTIL(c, ntexts >= 3, 20000);
    int reversed = 0, asked = 0;
    for (int i = 0; i < ntexts; i++) {
        if (strncmp(texts[i], "#reversed", 9) == 0) {
            ck_assert_str_eq(texts[i], "#reversed 1 1"); /* the same id, twice */
            reversed++;
            continue;
        }
        unsigned port;
        unsigned long long inc;
        ck_assert_msg(sscanf(texts[i], "#asked rc=0 reply=for-%u#%llu", &port, &inc) == 2,
                      "a requester: %s", texts[i]);
        unsigned slot = port - 1; /* an address's port is its slot + 1 */
        ck_assert_msg(slot == 1 || slot == 2, "%s", texts[i]);
        ck_assert_uint_eq(inc, info(c, slot).incarnation);
        asked |= 1 << slot;
    }
    ck_assert_int_eq(reversed, 1);
    ck_assert_int_eq(asked, 6); /* each requester its own answer */
    ck_assert_ptr_eq(on_message_arg, texts); /* pm_options_set_on_message's arg, given back */
    /* pm_cluster_stats counted them: at least the two requests ("q") and
     * the two answers ("for-P#I", 7 bytes or more) between workers. */
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_ge(st.frames_relayed, 4);
    ck_assert_uint_ge(st.bytes_relayed, 2 * 1 + 2 * 7);
    pm_test_finish(c, o);
}
END_TEST

static int watched_a, watched_b;

static void on_watch_a(pm_cluster *c, int fd, void *arg)
{
    (void)c, (void)fd, (void)arg;
    watched_a++;
}

static void on_watch_b(pm_cluster *c, int fd, void *arg)
{
    (void)c, (void)arg;
    char b[8];
    ssize_t k = read(fd, b, sizeof(b));
    (void)k;
    watched_b++;
}

/* pm_cluster(3), pm_cluster_watch_fd: "Watching an fd that is already
 * watched replaces its callback." */
START_TEST(test_watch_fd_replaces)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(1);
    pm_cluster *c = pm_test_spawn(o);
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    watched_a = watched_b = 0;
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], on_watch_a, NULL), 0);
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], on_watch_b, NULL), 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    PM_RUN_UNTIL(c, watched_b == 1, 5000);
    ck_assert_int_eq(watched_a, 0);
    /* One-shot, one watch: the fd was watched once, not twice. */
    ck_assert_int_eq(write(p[1], "y", 1), 1);
    ck_assert_int_eq(pm_cluster_run(c, 100), 0);
    ck_assert_int_eq(watched_b, 1);
    ck_assert_int_eq(watched_a, 0);
    (void)pm_cluster_unwatch_fd(c, p[0]);
    close(p[0]);
    close(p[1]);
    pm_test_finish(c, o);
}
END_TEST

/* The first field of an event that is set where pm_cluster(3) says it does
 * not apply ("Fields that do not apply are 0"), and how many events. */
static char wrong_field[160];
static int checked_events;

static void check_fields(pm_cluster *c, const pm_event *e, void *arg)
{
    record(c, e, arg);
    checked_events++;
    const char *bad = NULL;
    if (e->peer_host != NULL || e->peer_incarnation != 0 || e->peer_address != NULL ||
        e->peer_failures != 0)
        bad = "a peer field";
    else if (e->type != PM_EVENT_EXITED && (e->signal != 0 || e->core_dumped != 0 || e->oom_kills != 0))
        bad = "signal, core_dumped or oom_kills";
    else if (e->type != PM_EVENT_EXITED && e->type != PM_EVENT_SPAWN_FAILED && e->exit_code != 0)
        bad = "exit_code";
    else if (e->type != PM_EVENT_RESTART_SCHEDULED && e->type != PM_EVENT_STALLED && e->delay_ms != 0)
        bad = "delay_ms";
    else if (e->type != PM_EVENT_FENCED && e->worker_version != 0)
        bad = "worker_version";
    else if (e->type != PM_EVENT_STOPPED && e->detail != NULL)
        bad = "detail";
    if (bad != NULL && wrong_field[0] == '\0')
        snprintf(wrong_field, sizeof(wrong_field), "event %d (slot %u, reason %s): %s is set", e->type,
                 e->slot, e->reason, bad);
}

/* pm_cluster(3), EVENTS: "Fields that do not apply are 0." A life with
 * every slot event but the failures of a start: STARTED, READY, EXITED,
 * RESTART_SCHEDULED (a kill, a replacement), RETIRED (a budget of 1 spent)
 * and what terminate reports. */
START_TEST(test_event_fields_not_applying_are_0)
{
    memset(role, 0, sizeof(role));
    pm_options *o = role_opts(2);
    ck_assert_int_eq(pm_options_set_on_event(o, check_fields, NULL), 0);
    ck_assert_int_eq(pm_options_set_max_restarts(o, 1), 0);
    wrong_field[0] = '\0';
    checked_events = 0;
    pm_cluster *c = pm_test_spawn(o);
    ck_assert_int_eq(kill(info(c, 0).pid, SIGKILL), 0);
    PM_RUN_UNTIL(c, info(c, 0).state == PM_SLOT_READY && info(c, 0).incarnation == 2, 10000);
    for (int k = 0; k < 2; k++) {
        uint64_t inc = info(c, 1).incarnation;
        ck_assert_int_eq(kill(info(c, 1).pid, SIGKILL), 0);
        PM_RUN_UNTIL(c, info(c, 1).state == PM_SLOT_RETIRED ||
                            (info(c, 1).state == PM_SLOT_READY && info(c, 1).incarnation > inc),
                     10000);
    }
    ck_assert_int_eq(info(c, 1).state, PM_SLOT_RETIRED);
    pm_test_finish(c, o);
    ck_assert_int_eq(count(PM_EVENT_RESTART_SCHEDULED, 0), 1);
    ck_assert_int_eq(count(PM_EVENT_RETIRED, 1), 1);
    ck_assert_int_ge(checked_events, 8);
    ck_assert_msg(wrong_field[0] == '\0', "%s", wrong_field);
}
END_TEST

/* pm_options(3), pm_options_set_on_message: "Without a callback, a
 * message to main is dropped and counted, and a request to main ... is
 * answered at once with an undeliverable notice, ENOENT." The worker's
 * plain message and request are both counted (malformed_dropped); its
 * request ends -ENOENT (exit 7), not at its 10 s deadline. */
START_TEST(test_main_without_on_message)
{
    memset(role, 0, sizeof(role));
    role[0] = W_MAIN_GONE;
    pm_options *o = role_opts(1);
    ck_assert_int_eq(pm_options_set_on_message(o, NULL, NULL), 0);
    ck_assert_int_eq(pm_options_set_restart_policy(o, PM_RESTART_NEVER), 0);
    pm_cluster *c = pm_test_spawn(o);
    PM_RUN_UNTIL(c, count(PM_EVENT_EXITED, 0) == 1, 20000);
    /* 7: -ENOENT, the notice; its 10 s deadline would have been -ETIMEDOUT. */
    ck_assert_int_eq(find(PM_EVENT_EXITED, 0, 0)->exit_code, 7);
    struct pm_cluster_stats st;
    ck_assert_int_eq(pm_cluster_stats(c, &st), 0);
    ck_assert_uint_eq(st.malformed_dropped, 2);
    ck_assert_int_eq(ntexts, 0);
    pm_test_finish(c, o);
}
END_TEST

static long map_rc_in_callback = 1;
static pm_map_result map_res_in_callback;

static void map_from_watch(pm_cluster *c, int fd, void *arg)
{
    (void)fd, (void)arg;
    pm_map_input in = {"x", 1};
    map_rc_in_callback = pm_cluster_map(c, &in, 1, 1000, &map_res_in_callback);
}

/* pm_cluster_map(3), ERRORS and RETURN VALUE: EINVAL for NULL arrays with
 * n > 0, timeout_ms <= 0, an input with NULL data and a length, a handle
 * that is not a cluster; EDEADLK from inside a procmesh callback; EPERM in
 * a fork of the supervisor; a negative errno leaves results untouched.
 * An input the pool refuses outright gets that error (-EMSGSIZE above the
 * cluster's maximum message) while the others are answered. */
START_TEST(test_map_errors)
{
    memset(role, 0, sizeof(role));
    role[0] = W_ECHO;
    role[1] = W_ECHO;
    pm_options *o = role_opts(2);
    pm_options_set_max_message(o, PM_MAX_PAYLOAD);
    pm_cluster *c = pm_test_spawn(o);
    pm_map_input in[3] = {{"a", 1}, {"b", 1}, {NULL, 1}};
    pm_map_result res[3], sentinel;
    memset(&sentinel, 0x5a, sizeof(sentinel));
    for (int i = 0; i < 3; i++)
        res[i] = sentinel;
    ck_assert_int_eq(pm_cluster_map(c, NULL, 2, 1000, res), -EINVAL);
    ck_assert_int_eq(pm_cluster_map(c, in, 2, 1000, NULL), -EINVAL);
    ck_assert_int_eq(pm_cluster_map(c, in, 2, 0, res), -EINVAL);
    ck_assert_int_eq(pm_cluster_map(c, in, 2, -1, res), -EINVAL);
    ck_assert_int_eq(pm_cluster_map(c, in, 3, 1000, res), -EINVAL); /* NULL data, len 1 */
    ck_assert_int_eq(pm_cluster_map((pm_cluster *)(void *)o, in, 2, 1000, res), -EINVAL);
    ck_assert_int_eq(pm_cluster_map(NULL, in, 2, 1000, res), -EINVAL);
    for (int i = 0; i < 3; i++)
        ck_assert_msg(memcmp(&res[i], &sentinel, sizeof(sentinel)) == 0, "results[%d] written", i);
    /* Inside a callback (a watched fd's): -EDEADLK, nothing written. */
    int p[2];
    ck_assert_int_eq(pipe(p), 0);
    map_res_in_callback = sentinel;
    ck_assert_int_eq(pm_cluster_watch_fd(c, p[0], map_from_watch, NULL), 0);
    ck_assert_int_eq(write(p[1], "x", 1), 1);
    PM_RUN_UNTIL(c, map_rc_in_callback != 1, 5000);
    ck_assert_int_eq(map_rc_in_callback, -EDEADLK);
    ck_assert_int_eq(memcmp(&map_res_in_callback, &sentinel, sizeof(sentinel)), 0);
    (void)pm_cluster_unwatch_fd(c, p[0]);
    close(p[0]);
    close(p[1]);
    /* In a fork of the supervisor: -EPERM. */
    pid_t pid = pm_test_fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0) {
        pm_map_result r1;
        _exit(pm_cluster_map(c, in, 1, 1000, &r1) == -EPERM ? 0 : 1);
    }
    int st = pm_test_reap(pid, 20000);
    ck_assert_msg(st != -1 && WIFEXITED(st) && WEXITSTATUS(st) == 0, "map in a fork was not -EPERM");
    /* An input above the cluster's maximum: that input's error, the others answered. */
    static char big[PM_MAX_PAYLOAD + 1];
    pm_map_input mixed[3] = {{"a", 1}, {big, sizeof(big)}, {"b", 1}};
    ck_assert_int_eq(pm_cluster_map(c, mixed, 3, 10000, res), 2);
    ck_assert_int_eq(res[0].error, 0);
    ck_assert_int_eq(res[1].error, -EMSGSIZE);
    ck_assert_int_eq(res[2].error, 0);
    ck_assert_uint_eq(res[0].len, 2);
    ck_assert_int_eq(memcmp(res[0].reply, "ok", 2), 0);
    pm_map_results_free(res, 3);
    for (int i = 0; i < 3; i++) {
        ck_assert_ptr_null(res[i].reply);
        ck_assert_ptr_null(res[i].outcome);
        ck_assert_uint_eq(res[i].len, 0);
        ck_assert_int_eq(res[i].error, 0);
    }
    pm_test_finish(c, o);
}
END_TEST

/* pm_strerror(3): "An unknown error code gives 'Unknown error'", for the
 * negative value as returned and the positive one; never NULL. */
START_TEST(test_strerror_unknown)
{
    ck_assert_str_eq(pm_strerror(-100000), "Unknown error");
    ck_assert_str_eq(pm_strerror(100000), "Unknown error");
    ck_assert_str_eq(pm_strerror(-EHOSTDOWN), pm_strerror(EHOSTDOWN));
}
END_TEST

int main(void)
{
    Suite *s = suite_create("api");
    PM_ADD_TEST(s, test_header_defaults, 10);
    PM_ADD_TEST(s, test_hub_spin_us, 30);
    PM_ADD_TEST(s, test_hub_spin_off_or_nothing_learnt, 30);
    PM_ADD_TEST(s, test_hub_spin_one_cpu, 30);
    PM_ADD_TEST(s, test_hub_spin_outcomes, 30);
    PM_ADD_TEST(s, test_hub_arm_protocol, 30);
    PM_ADD_TEST(s, test_lone_held_sender_armed_once, 30);
    PM_ADD_TEST(s, test_lone_every_port_armed, 30);
    PM_ADD_TEST(s, test_lone_open_with_work, 30);
    PM_ADD_TEST(s, test_lone_records_of_cut_port, 30);
    PM_ADD_TEST(s, test_restart_slot, 60);
    PM_ADD_TEST(s, test_send_to_starting_slot, 60);
    PM_ADD_TEST(s, test_restart_slot_starting_is_busy, 30);
    PM_ADD_TEST(s, test_kill_pending, 30);
    PM_ADD_LOOP_TEST(s, test_core_dumped, 0, 2, 60);
    PM_ADD_TEST(s, test_sighup_interrupts_run, 30);
    PM_ADD_TEST(s, test_sigterm_during_spawn, 30);
    PM_ADD_TEST(s, test_handle_signals_off, 30);
    PM_ADD_TEST(s, test_reap_orphans_needs_signals, 30);
    PM_ADD_TEST(s, test_stop_everywhere, 30);
    PM_ADD_TEST(s, test_watch_fd, 30);
    PM_ADD_LOOP_TEST(s, test_handshake_fault_charged, 0, 2, 60);
    PM_ADD_LOOP_TEST(s, test_hello_each_condition, 0, (int)ARRAY_LEN(hello_rows), 60);
    PM_ADD_TEST(s, test_fork_mode_ready_without_handshake, 60);
    PM_ADD_TEST(s, test_wrong_version_charged, 60);
    PM_ADD_TEST(s, test_init_before_hello, 60);
    PM_ADD_LOOP_TEST(s, test_forbidden_types_dropped, 0, 3, 30);
    PM_ADD_TEST(s, test_traffic_before_ready_dropped, 30);
    PM_ADD_TEST(s, test_inflight_cap, 60);
    PM_ADD_TEST(s, test_main_send_eagain, 30);
    PM_ADD_TEST(s, test_request_keeps_messages, 30);
    PM_ADD_TEST(s, test_request_store_without_memory, 30);
    PM_ADD_TEST(s, test_send_after_stop, 30);
    PM_ADD_LOOP_TEST(s, test_init_decode_rows, 0, IR_ROWS, 30);
    PM_ADD_TEST(s, test_frame_recv_short_at_end, 30);
    PM_ADD_TEST(s, test_channel_over_fsize, 30);
    PM_ADD_TEST(s, test_join_errors, 30);
    PM_ADD_TEST(s, test_ready_twice_and_calls_after_stop, 30);
    PM_ADD_TEST(s, test_default_permanently_down_line, 30);
    PM_ADD_TEST(s, test_strerror_unknown, 10);
    PM_ADD_TEST(s, test_handle_signals_mask_restored, 30);
    PM_ADD_TEST(s, test_terminate_signal_skips_grace, 60);
    PM_ADD_TEST(s, test_join_malformed_env, 10);
    PM_ADD_TEST(s, test_join_three_nodes, 20);
    PM_ADD_TEST(s, test_recv_message_fields, 30);
    PM_ADD_TEST(s, test_join_handshake_rows, 90);
    PM_ADD_TEST(s, test_peers_outside_peer_mode, 30);
    PM_ADD_TEST(s, test_same_id_answers_in_reverse, 60);
    PM_ADD_TEST(s, test_inflight_expiry, 60);
    PM_ADD_TEST(s, test_inflight_table_cannot_grow, 30);
    PM_ADD_TEST(s, test_hub_new_out_of_memory, 30);
    PM_ADD_TEST(s, test_hub_free_twice, 30);
    PM_ADD_TEST(s, test_lone_broadcast_out_of_memory, 30);
    PM_ADD_TEST(s, test_lone_notices_dropped, 60);
    PM_ADD_TEST(s, test_lone_broadcast_arguments, 30);
    PM_ADD_TEST(s, test_lone_broadcast_results_once, 30);
    PM_ADD_TEST(s, test_lone_broadcasts_overlap, 30);
    PM_ADD_TEST(s, test_lone_broadcast_corrupt_ring, 30);
    PM_ADD_TEST(s, test_lone_mesh_results_cannot_grow, 30);
    PM_ADD_TEST(s, test_lone_mesh_result_out_of_memory, 30);
    PM_ADD_TEST(s, test_lone_mesh_overlap, 30);
    PM_ADD_TEST(s, test_lone_mesh_arguments_and_memory, 30);
    PM_ADD_LOOP_TEST(s, test_lone_lane_offer_conditions, 0, LANE_ROWS, 30);
    PM_ADD_TEST(s, test_lone_lanes_enable_and_free, 30);
    PM_ADD_LOOP_TEST(s, test_lone_lane_revoked_at_other_end, 0, 2, 30);
    PM_ADD_TEST(s, test_lone_broadcast_copies_wiped, 30);
    PM_ADD_LOOP_TEST(s, test_lone_queue_bounds, 0, (int)ARRAY_LEN(lone_bound_rows), 60);
    PM_ADD_TEST(s, test_lone_fd_bound_only_fds, 30);
    PM_ADD_TEST(s, test_lone_local_frames_no_credit, 30);
    PM_ADD_LOOP_TEST(s, test_lone_hold_half_free, 0, (int)ARRAY_LEN(lone_half_rows), 30);
    PM_ADD_TEST(s, test_lone_total_half_free, 30);
    PM_ADD_TEST(s, test_lone_held_sender_not_read, 30);
    PM_ADD_LOOP_TEST(s, test_lone_notice_at, 0, NOTE_ROWS, 30);
    PM_ADD_LOOP_TEST(s, test_lone_scan_not_for, 0, (int)ARRAY_LEN(lone_scan_rows), 10);
    PM_ADD_LOOP_TEST(s, test_lone_left_in_ring, 0, LEFT_ROWS, 30);
    PM_ADD_TEST(s, test_lone_held_not_left, 30);
    PM_ADD_TEST(s, test_lone_flush_progress, 30);
    PM_ADD_TEST(s, test_lone_big_socket_full, 60);
    PM_ADD_LOOP_TEST(s, test_lone_big_refused_by_worker, 0, 2, 30);
    PM_ADD_LOOP_TEST(s, test_lone_big_refused_for_now, 0, (int)ARRAY_LEN(lone_refusals), 30);
    PM_ADD_LOOP_TEST(s, test_lone_relay_rules, 0, RL_ROWS, 30);
    PM_ADD_TEST(s, test_lone_fenced_mid_batch, 30);
    PM_ADD_LOOP_TEST(s, test_lone_reply_rules, 0, RP_ROWS, 30);
    PM_ADD_TEST(s, test_lone_reply_at_its_deadline, 60);
    PM_ADD_LOOP_TEST(s, test_lone_big_reply_refused_for_now, 0, 3, 30);
    PM_ADD_LOOP_TEST(s, test_lone_big_refused_for_now_relayed, 0, 2, 30);
    PM_ADD_LOOP_TEST(s, test_lone_lane_reply, 0, 3, 30);
    PM_ADD_LOOP_TEST(s, test_lone_main_send, 0, MS_ROWS, 30);
    PM_ADD_TEST(s, test_lone_port_close, 30);
    PM_ADD_TEST(s, test_lone_deadlines_and_draining, 30);
    PM_ADD_TEST(s, test_lone_deadline_every_port_timed, 30);
    PM_ADD_TEST(s, test_lone_broadcast_at_its_deadline, 30);
    PM_ADD_LOOP_TEST(s, test_lone_broadcast_late_rules, 0, BL_ROWS, 30);
    PM_ADD_TEST(s, test_lone_callbacks_while_freed, 30);
    PM_ADD_TEST(s, test_lone_host_index, 30);
    PM_ADD_TEST(s, test_lone_child_fds_and_wipe, 30);
    PM_ADD_LOOP_TEST(s, test_lone_request_rules, 0, RQ_ROWS, 30);
    PM_ADD_LOOP_TEST(s, test_lone_pick_worker, 0, PK_ROWS, 30);
    PM_ADD_TEST(s, test_lone_waiting_requests, 30);
    PM_ADD_LOOP_TEST(s, test_lone_request_out_of_memory, 0, 2, 60);
    PM_ADD_TEST(s, test_lone_outcome_nested, 30);
    PM_ADD_TEST(s, test_lone_main_reply_at_its_deadline, 60);
    PM_ADD_TEST(s, test_lone_big_reply_to_main, 30);
    PM_ADD_LOOP_TEST(s, test_lone_big_to_main_unmapped, 0, BU_ROWS, 30);
    PM_ADD_TEST(s, test_lone_main_message_refused, 30);
    PM_ADD_LOOP_TEST(s, test_lone_waiting_not_sent, 0, 2, 30);
    PM_ADD_LOOP_TEST(s, test_lone_waiting_large, 0, 3, 30);
    PM_ADD_LOOP_TEST(s, test_lone_main_answers, 0, AN_ROWS, 30);
    PM_ADD_LOOP_TEST(s, test_lone_request_expire, 0, EX_ROWS, 30);
    PM_ADD_TEST(s, test_lone_request_next_due, 30);
    PM_ADD_TEST(s, test_lone_waiting_all_expire, 30);
    PM_ADD_TEST(s, test_lone_request_table, 30);
    PM_ADD_TEST(s, test_lone_request_ids, 30);
    PM_ADD_LOOP_TEST(s, test_lone_main_on_message, 0, OM_ROWS, 30);
    PM_ADD_TEST(s, test_inflight_forgotten_with_incarnations, 60);
    PM_ADD_TEST(s, test_request_to_no_such_node, 90);
    PM_ADD_TEST(s, test_reply_after_stop, 60);
    PM_ADD_TEST(s, test_watch_fd_replaces, 30);
    PM_ADD_TEST(s, test_event_fields_not_applying_are_0, 60);
    PM_ADD_TEST(s, test_main_without_on_message, 60);
    PM_ADD_TEST(s, test_map_errors, 60);
    return pm_test_main(s);
}
