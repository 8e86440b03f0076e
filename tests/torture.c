/* SPDX-License-Identifier: MIT */
/* torture.c - the soak test behind `make torture`: a mesh under mixed traffic and a nemesis, its invariants checked after every round. */

/*
 * One round (doc/reliability.md, "Torture"):
 *  1. every slot is ready; main tells half of the workers (the requesters,
 *     by parity of slot + round) to go: each streams 12 checksummed plain
 *     frames to one server and makes 6 requests (3 to main, 3 to another
 *     server), then reports its counts to main; main broadcasts a request;
 *  2. the nemesis strikes 0, 1 or 2 slots within the round's first 20 ms
 *     (SIGKILL, SIGSEGV, a short SIGSTOP/SIGCONT, a long SIGSTOP, a spin
 *     without procmesh calls, a scribbled ring), or, every 50th round, stops
 *     the supervisor itself (alone, or with its workers); main broadcasts
 *     again once the nemesis has struck;
 *  3. main runs the cluster until the round is settled: every broadcast has
 *     its results, every requester reported or its incarnation ended, every
 *     fault had its outcome, every slot is ready again (10 s at most);
 *  4. the invariants are checked: each fault had its expected outcome and
 *     nothing else happened, no zombie, the supervisor's fd count and RSS are
 *     flat after the warm-up (fds equal, RSS within 2 MiB).
 * All along, every frame is checked where it arrives: checksum, the stamped
 * sender against the one the payload claims, no incarnation older than one
 * already seen, stream frames gapless and in order between two incarnations,
 * every request and broadcast answered exactly once. A worker reports what
 * it finds wrong to main (T_VIOL); main counts every violation by kind.
 *
 * Then the retirement phase: a small cluster with a budget of 2 restarts
 * whose slot 0 is killed until it is retired, exactly once.
 *
 * --standby: every slot keeps a warm standby (pm_options_set_warm_standby),
 * so that each restart the nemesis causes takes one (and the supervisor's
 * fd count, zombies and RSS are checked with them in place).
 *
 * Usage: torture [--rounds N] [--seed S] [--workers W] [--standby]. Exit 0 when no
 * invariant was violated, 1 otherwise, 2 on bad usage or an interruption.
 */
#include "helpers.h"

#include <ctype.h>
#include <dirent.h>
#include <fcntl.h>
#include <stdatomic.h>
#include <sys/resource.h>

#include "internals.h"

#define MAXW 64
#define HEARTBEAT_MS 300
#define REQ_TIMEOUT_MS 200   /* a request is settled well inside its round */
#define BCAST_TIMEOUT_MS 250
#define SETTLE_MS 10000      /* a round that is not settled by then fails */
#define BODY_MAX 2048
#define WARMUP_ROUNDS 100    /* fds and RSS are compared with the end of this round */
#define RSS_DRIFT_KIB 2048
#define SUP_EVERY 50         /* the supervisor is stopped every 50th round */
#define SUP_STOP_MS 400      /* for longer than the heartbeat timeout */

/* ------------------------------------------------------------ payloads */

#define T_MAGIC 0x54525452u
#define T_MAIN 0xffffffffu

enum { T_GO = 1, T_SPIN, T_SCRIBBLE, T_BCAST, T_BREPLY, T_STREAM, T_REQ, T_REPLY, T_REPORT,
       T_VIOL };

/* The head of every payload: who the sender believes it is (slot, or
 * T_MAIN, and incarnation), what it is, and a checksum of the body. */
typedef struct tmsg {
    uint32_t magic;
    uint32_t kind;
    uint32_t slot;
    uint32_t round;
    uint64_t inc;
    uint64_t seq;  /* T_REQ: the sender's request number */
    uint64_t arg;  /* T_STREAM: position in the stream; T_REPLY: the request's seq;
                      T_BCAST, T_BREPLY: the broadcast id */
    uint32_t a, b, c, d, e, f; /* T_GO: peers; T_REPORT: counts; T_VIOL: kind */
    uint32_t body_len;
    uint32_t sum;
} tmsg;

static uint32_t fnv(const unsigned char *p, size_t n)
{
    uint32_t h = 2166136261u;
    for (size_t i = 0; i < n; i++)
        h = (h ^ p[i]) * 16777619u;
    return h;
}

/* Header t and a body (text, or len random bytes when text is NULL) into
 * buf; returns the payload's length. */
static size_t encode(unsigned char *buf, tmsg *t, const char *text, size_t len, uint64_t *rng)
{
    unsigned char *body = buf + sizeof(*t);
    if (len > BODY_MAX)
        len = BODY_MAX;
    if (text != NULL)
        memcpy(body, text, len);
    else
        for (size_t i = 0; i < len; i++)
            body[i] = (unsigned char)pm_test_rand(rng);
    t->magic = T_MAGIC;
    t->body_len = (uint32_t)len;
    t->sum = fnv(body, len);
    memcpy(buf, t, sizeof(*t));
    return sizeof(*t) + len;
}

static int decode(const pm_message *m, tmsg *t)
{
    if (m->len < sizeof(*t))
        return -1;
    memcpy(t, m->data, sizeof(*t));
    if (t->magic != T_MAGIC || t->body_len != m->len - sizeof(*t))
        return -1;
    return fnv((const unsigned char *)m->data + sizeof(*t), t->body_len) == t->sum ? 0 : -1;
}

/* 1 when the hub's stamp names the sender the payload claims to be. */
static int stamp_matches(const pm_address *from, const tmsg *t)
{
    if (strcmp(from->system, "procmesh") != 0)
        return 0;
    if (t->slot == T_MAIN)
        return strcmp(from->host, "main") == 0 && from->port == 0;
    return strcmp(from->host, "worker") == 0 && t->slot < MAXW && from->port == t->slot + 1 &&
           from->incarnation == t->inc && t->inc != 0;
}

static pm_address main_addr(void)
{
    pm_address a;
    memset(&a, 0, sizeof(a));
    strcpy(a.system, "procmesh");
    strcpy(a.host, "main");
    return a;
}

/* ---------------------------------------------------------- violations */

enum { V_CHECKSUM, V_IDENTITY, V_STALE, V_LOSS, V_DUP, V_STRAY, V_REPLY, V_ERRNO, V_BCAST,
       V_REPORT, V_OUTCOME, V_UNEXPECTED, V_SETTLE, V_ZOMBIE, V_FDS, V_RSS, V_RETIRE, V_END,
       V__COUNT };

static const char *const viol_name[V__COUNT] = {
    [V_CHECKSUM] = "checksum",     [V_IDENTITY] = "identity",   [V_STALE] = "stale",
    [V_LOSS] = "stream-loss",      [V_DUP] = "duplicate",       [V_STRAY] = "stray-answer",
    [V_REPLY] = "wrong-reply",     [V_ERRNO] = "unexpected-errno", [V_BCAST] = "broadcast",
    [V_REPORT] = "request-report", [V_OUTCOME] = "fault-outcome", [V_UNEXPECTED] = "unexpected-event",
    [V_SETTLE] = "not-settled",    [V_ZOMBIE] = "zombie",       [V_FDS] = "fd-drift",
    [V_RSS] = "rss-drift",         [V_RETIRE] = "retirement",   [V_END] = "end-state",
};

static uint64_t violations[V__COUNT];
static uint32_t cur_round;

static void violation(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void violation(int kind, const char *fmt, ...)
{
    if (kind < 0 || kind >= V__COUNT)
        kind = V_IDENTITY;
    /* The first few of each kind are printed; all are counted. */
    if (violations[kind]++ < 5) {
        va_list ap;
        va_start(ap, fmt);
        fprintf(stderr, "torture: round %u: VIOLATION %s: ", cur_round, viol_name[kind]);
        vfprintf(stderr, fmt, ap);
        fputc('\n', stderr);
        va_end(ap);
    }
}

/* --------------------------------------------------------- worker side */

/* A fork-mode worker's state. The child starts from a copy of the
 * supervisor's memory, so this is reset at the top of the bootstrap. */
static struct wstate {
    pm_node *n;
    unsigned slot;
    uint64_t inc;
    uint64_t seq;
    uint64_t tx_pos[MAXW];   /* stream position per destination */
    uint64_t seen_inc[MAXW]; /* the newest incarnation seen per sender */
    uint64_t rx_inc[MAXW];   /* the stream being received per sender: incarnation */
    uint64_t rx_pos[MAXW];   /* ... and its last position */
    uint64_t rng;
    unsigned char buf[sizeof(tmsg) + BODY_MAX];
} W;

static void wviol(int kind, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void wviol(int kind, const char *fmt, ...)
{
    char text[256];
    va_list ap;
    va_start(ap, fmt);
    int len = vsnprintf(text, sizeof(text), fmt, ap);
    va_end(ap);
    if (len < 0)
        len = 0;
    if ((size_t)len >= sizeof(text))
        len = sizeof(text) - 1;
    tmsg t = {.kind = T_VIOL, .slot = W.slot, .inc = W.inc, .a = (uint32_t)kind};
    size_t n = encode(W.buf, &t, text, (size_t)len, &W.rng);
    pm_address to = main_addr();
    pm_node_send(W.n, &to, W.buf, n);
}

/* Decodes and checks what the hub delivered: checksum, stamped identity,
 * and no incarnation older than one already seen from that slot. */
static int wcheck(const pm_message *m, tmsg *t)
{
    char from[PM_ADDRESS_STRLEN];
    if (pm_address_format(&m->from, from, sizeof(from)) < 0)
        strcpy(from, "?");
    if (decode(m, t) != 0) {
        wviol(V_CHECKSUM, "slot %u: a payload of %zu bytes from %s fails its checksum", W.slot,
              m->len, from);
        return -1;
    }
    if (!stamp_matches(&m->from, t)) {
        wviol(V_IDENTITY, "slot %u: stamped %s, payload claims port %d incarnation %llu",
              W.slot, from, t->slot == T_MAIN ? 0 : (int)t->slot + 1,
              (unsigned long long)t->inc);
        return -1;
    }
    if (t->slot != T_MAIN) {
        if (t->inc < W.seen_inc[t->slot]) {
            wviol(V_STALE, "slot %u: a frame from %s after one from incarnation %llu", W.slot,
                  from, (unsigned long long)W.seen_inc[t->slot]);
            return -1;
        }
        W.seen_inc[t->slot] = t->inc;
    }
    return 0;
}

static int allowed_request_error(int rc)
{
    return rc == -ETIMEDOUT || rc == -EHOSTDOWN || rc == -EAGAIN;
}

/* T_GO: stream to one server, request main and another server, report. */
static int wgo(const tmsg *g)
{
    unsigned rpeer = g->a, speer = g->b;
    pm_address m_addr = main_addr(), r_addr = pm_test_slot_addr(rpeer, 0),
               s_addr = pm_test_slot_addr(speer, 0);
    uint32_t issued = 0, ok = 0, err = 0, streamed = 0;
    for (int i = 0; i < 6; i++) {
        for (int k = 0; k < 2; k++) {
            tmsg t = {.kind = T_STREAM, .slot = W.slot, .inc = W.inc, .round = g->round,
                      .arg = W.tx_pos[speer] + 1};
            size_t len = encode(W.buf, &t, NULL, pm_test_rand(&W.rng) % BODY_MAX, &W.rng);
            int rc = pm_node_send(W.n, &s_addr, W.buf, len);
            if (rc == -ESHUTDOWN)
                return -1;
            if (rc != 0)
                wviol(V_ERRNO, "slot %u: pm_node_send to slot %u: %d", W.slot, speer, rc);
            else
                W.tx_pos[speer]++, streamed++;
        }
        int to_main = i % 2 == 0;
        tmsg t = {.kind = T_REQ, .slot = W.slot, .inc = W.inc, .round = g->round, .seq = ++W.seq};
        size_t len = encode(W.buf, &t, NULL, pm_test_rand(&W.rng) % 256, &W.rng);
        pm_message r;
        int rc = pm_node_request(W.n, to_main ? &m_addr : &r_addr, W.buf, len, REQ_TIMEOUT_MS, &r);
        issued++;
        if (rc == -ESHUTDOWN)
            return -1;
        if (rc == 0) {
            tmsg a;
            if (wcheck(&r, &a) != 0) {
                err++;
            } else if (a.kind != T_REPLY || a.arg != t.seq ||
                       a.slot != (to_main ? T_MAIN : rpeer)) {
                wviol(V_REPLY, "slot %u: request %llu to %s answered by kind %u for %llu from %d",
                      W.slot, (unsigned long long)t.seq, to_main ? "main" : "a server", a.kind,
                      (unsigned long long)a.arg, a.slot == T_MAIN ? -1 : (int)a.slot);
                err++;
            } else {
                ok++;
            }
        } else {
            err++;
            if (!allowed_request_error(rc))
                wviol(V_ERRNO, "slot %u: pm_node_request: %d (%s)", W.slot, rc, pm_strerror(rc));
        }
    }
    tmsg t = {.kind = T_REPORT, .slot = W.slot, .inc = W.inc, .round = g->round, .a = issued,
              .b = ok, .c = err, .d = (uint32_t)pm_test_node_late_replies(W.n), .e = streamed};
    size_t len = encode(W.buf, &t, NULL, 0, &W.rng);
    int rc = pm_node_send(W.n, &m_addr, W.buf, len);
    return rc == -ESHUTDOWN ? -1 : 0;
}

static void wstream(const tmsg *t)
{
    unsigned s = t->slot;
    if (t->inc != W.rx_inc[s]) {
        /* The first frame from this incarnation: the stream may begin
         * anywhere (we may be a replacement that missed its start). */
        W.rx_inc[s] = t->inc;
    } else if (t->arg != W.rx_pos[s] + 1) {
        wviol(t->arg <= W.rx_pos[s] ? V_DUP : V_LOSS,
              "slot %u: stream from slot %u#%llu at %llu after %llu", W.slot, s,
              (unsigned long long)t->inc, (unsigned long long)t->arg,
              (unsigned long long)W.rx_pos[s]);
    }
    W.rx_pos[s] = t->arg;
}

/* Never returns: the hub fences it (heartbeat) and kills it. */
static void wspin(void)
{
    for (volatile uint64_t i = 0;; i++)
        ;
}

/* Never returns: the producer index of our own up ring jumps past its
 * capacity, the hub finds it corrupt, fences us and kills us. */
static void wscribble(void)
{
    atomic_store(&pm_test_node_tx(W.n)->sh->head, (uint64_t)1 << 40);
    uint64_t one = 1;
    if (write(pm_test_node_hub_efd(W.n), &one, sizeof(one)) != sizeof(one))
        _exit(21);
    for (;;)
        pause();
}

/* One message from the recv loop; -1 to end the worker. */
static int whandle(const pm_message *m)
{
    if (m->kind == PM_MSG_REPLY || (m->kind == PM_MSG_UNDELIVERABLE && m->request_id != 0)) {
        /* pm_node_request takes its own answer; one that reaches recv
         * answers a request a second time, or nobody's. */
        wviol(V_STRAY, "slot %u: recv returned a %s for request %llu", W.slot,
              m->kind == PM_MSG_REPLY ? "reply" : "notice", (unsigned long long)m->request_id);
        return 0;
    }
    if (m->kind == PM_MSG_UNDELIVERABLE)
        return 0; /* a stream frame to a server that was down: allowed */
    tmsg t;
    if (wcheck(m, &t) != 0)
        return 0;
    int want_request = t.kind == T_REQ || t.kind == T_BCAST;
    if (want_request != (m->kind == PM_MSG_REQUEST)) {
        wviol(V_IDENTITY, "slot %u: payload kind %u arrived as message kind %d", W.slot, t.kind,
              m->kind);
        return 0;
    }
    switch (t.kind) {
    case T_STREAM:
        wstream(&t);
        return 0;
    case T_REQ:
    case T_BCAST: {
        tmsg a = {.kind = t.kind == T_REQ ? T_REPLY : T_BREPLY, .slot = W.slot, .inc = W.inc,
                  .round = t.round, .arg = t.kind == T_REQ ? t.seq : t.arg};
        size_t len = encode(W.buf, &a, NULL, pm_test_rand(&W.rng) % 64, &W.rng);
        int rc = pm_node_reply(W.n, m, W.buf, len);
        return rc == -ESHUTDOWN ? -1 : 0;
    }
    case T_GO:
        if (t.slot != T_MAIN)
            break;
        return wgo(&t);
    case T_SPIN:
        if (t.slot == T_MAIN)
            wspin();
        break;
    case T_SCRIBBLE:
        if (t.slot == T_MAIN)
            wscribble();
        break;
    default:
        break;
    }
    wviol(V_IDENTITY, "slot %u: unexpected payload kind %u from slot %d", W.slot, t.kind,
          t.slot == T_MAIN ? -1 : (int)t.slot);
    return 0;
}

static int worker(pm_node *n, void *arg)
{
    (void)arg;
    signal(SIGTERM, SIG_DFL);
    signal(SIGINT, SIG_DFL);
    memset(&W, 0, sizeof(W));
    W.n = n;
    W.slot = pm_node_slot(n);
    W.inc = pm_node_self(n)->incarnation;
    W.rng = (W.inc << 8 | W.slot) * 0x9E3779B97F4A7C15ULL + 1;
    if (pm_node_ready(n) != 0)
        return 31;
    for (;;) {
        pm_message m;
        int rc = pm_node_recv(n, &m, -1);
        if (rc == -ESHUTDOWN)
            return 0;
        if (rc < 0)
            return 30;
        if (whandle(&m) < 0)
            return 0;
    }
}

/* ----------------------------------------------------------- main side */

enum { F_NONE = 0, F_KILL, F_SEGV, F_STOP_SHORT, F_STOP_LONG, F_SPIN, F_SCRIBBLE, F_SUP_STOP,
       F_SUP_STOP_ALL, F__COUNT };

static const char *const fault_name[F__COUNT] = {
    [F_NONE] = "none",
    [F_KILL] = "SIGKILL",
    [F_SEGV] = "SIGSEGV",
    [F_STOP_SHORT] = "SIGSTOP+SIGCONT (30-100 ms)",
    [F_STOP_LONG] = "SIGSTOP (fenced)",
    [F_SPIN] = "spin",
    [F_SCRIBBLE] = "ring scribble",
    [F_SUP_STOP] = "supervisor SIGSTOP 400 ms",
    [F_SUP_STOP_ALL] = "supervisor + workers SIGSTOP",
};

/* What happened to a slot in the current round. */
typedef struct rslot {
    uint64_t inc;       /* its incarnation when the round began */
    int go;             /* told to go: a report is due from inc */
    int reported;
    int fault;          /* F_* planned against inc */
    uint64_t inject_at; /* ms */
    uint64_t cont_at;   /* F_STOP_SHORT: SIGCONT due (ms), 0 once sent */
    int injected;
    int exited;         /* inc was reaped ... */
    int exit_signal;
    int fenced;         /* ... fenced, and why */
    int fence_reason;
} rslot;

typedef struct bcast {
    uint64_t bid;
    size_t expect;      /* ready slots when it was sent */
    int done;
} bcast;

static struct {
    pm_cluster *c;
    unsigned nw;
    int phase_retire;
    int ending;                /* terminate: every worker exits on request */
    uint64_t live_inc[MAXW];   /* STARTED .. EXITED */
    uint64_t ended_inc[MAXW];  /* the newest incarnation reaped */
    uint64_t req_inc[MAXW];    /* the last request seen per slot */
    uint64_t req_seq[MAXW];
    rslot s[MAXW];
    bcast bc[2];
    int nbc;
    uint64_t next_bid;
    int sup_fault;             /* F_SUP_STOP*, or 0 */
    pid_t helper;
    int stalls_round;
    /* Totals. */
    uint64_t faults[F__COUNT];
    uint64_t bc_sent, bc_results[4]; /* ok, -ETIMEDOUT, -EHOSTDOWN, -EAGAIN */
    uint64_t req_issued, req_ok, req_err, late_at_workers, streamed, main_answered;
    uint64_t exits, fences_hb, fences_ring, stalls, stalls_starved, starts, retired, pd_calls;
    uint64_t fences_starved;
    uint64_t starved_inc[MAXW]; /* the last incarnation fenced for starvation */
    uint64_t reports, go_sent;
} M;

static int interrupted;

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_STALLED) {
        /* Not only the nemesis stops the supervisor: on a loaded machine it
         * is starved too, and saying so (with nobody fenced) is right. */
        M.stalls++;
        M.stalls_round++;
        if (M.sup_fault == 0)
            M.stalls_starved++;
        return;
    }
    if (e->slot >= M.nw)
        return;
    rslot *s = &M.s[e->slot];
    int ours = s->fault != F_NONE && e->incarnation == s->inc;
    switch (e->type) {
    case PM_EVENT_STARTED:
        M.starts++;
        M.live_inc[e->slot] = e->incarnation;
        break;
    case PM_EVENT_EXITED:
        M.exits++;
        if (M.live_inc[e->slot] == e->incarnation)
            M.live_inc[e->slot] = 0;
        if (e->incarnation > M.ended_inc[e->slot])
            M.ended_inc[e->slot] = e->incarnation;
        if (ours) {
            s->exited = 1;
            s->exit_signal = e->signal;
        } else if (M.starved_inc[e->slot] == e->incarnation) {
            /* the exit of a starved worker's fence, counted there */
        } else if (!M.phase_retire && !M.ending) {
            violation(V_UNEXPECTED, "slot %u#%llu exited (%s, code %d, signal %d) unprovoked",
                      e->slot, (unsigned long long)e->incarnation, e->reason, e->exit_code,
                      e->signal);
        }
        break;
    case PM_EVENT_FENCED:
        if (e->reason_code == PM_REASON_HEARTBEAT)
            M.fences_hb++;
        else if (e->reason_code == PM_REASON_CORRUPT_RING)
            M.fences_ring++;
        if (ours) {
            s->fenced = 1;
            s->fence_reason = e->reason_code;
        } else if (!M.phase_retire && M.sup_fault == 0 &&
                   e->reason_code == PM_REASON_HEARTBEAT) {
            /* A worker the machine did not run for a heartbeat timeout is
             * hung by definition (300 ms is short on purpose): counted.
             * Its exit follows, also counted. In a round that stopped the
             * supervisor it would be the stall blamed on a worker: that
             * one is a violation (below). */
            M.fences_starved++;
            M.starved_inc[e->slot] = e->incarnation;
        } else if (!M.phase_retire) {
            violation(V_UNEXPECTED, "slot %u#%llu fenced (%s) unprovoked%s", e->slot,
                      (unsigned long long)e->incarnation, e->reason,
                      M.sup_fault ? " in a round that stopped the supervisor" : "");
        }
        break;
    case PM_EVENT_RETIRED:
        M.retired++;
        if (!M.phase_retire)
            violation(V_UNEXPECTED, "slot %u retired under an unlimited budget", e->slot);
        break;
    case PM_EVENT_SPAWN_FAILED:
        violation(V_UNEXPECTED, "slot %u: a start failed (%d)", e->slot, e->exit_code);
        break;
    default:
        break;
    }
}

static void on_pd(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg)
{
    (void)c;
    (void)slot;
    (void)a;
    (void)restarts;
    (void)arg;
    M.pd_calls++;
}

/* Frames for main: requests from workers (answered at once), their
 * reports and the violations they saw. */
static void on_message(pm_cluster *c, const pm_message *m, void *arg)
{
    (void)arg;
    if (m->kind == PM_MSG_UNDELIVERABLE)
        return;
    char from[PM_ADDRESS_STRLEN];
    if (pm_address_format(&m->from, from, sizeof(from)) < 0)
        strcpy(from, "?");
    tmsg t;
    if (decode(m, &t) != 0) {
        violation(V_CHECKSUM, "main: a payload of %zu bytes from %s fails its checksum", m->len,
                  from);
        return;
    }
    if (t.slot == T_MAIN || !stamp_matches(&m->from, &t) || t.slot >= M.nw) {
        violation(V_IDENTITY, "main: stamped %s, payload claims port %d incarnation %llu", from,
                  t.slot == T_MAIN ? 0 : (int)t.slot + 1, (unsigned long long)t.inc);
        return;
    }
    unsigned slot = t.slot;
    if (t.inc != M.live_inc[slot]) {
        violation(V_STALE, "main: a frame from %s, whose live incarnation is %llu", from,
                  (unsigned long long)M.live_inc[slot]);
        return;
    }
    if ((t.kind == T_REQ) != (m->kind == PM_MSG_REQUEST)) {
        violation(V_IDENTITY, "main: payload kind %u from %s arrived as message kind %d", t.kind,
                  from, m->kind);
        return;
    }
    rslot *s = &M.s[slot];
    switch (t.kind) {
    case T_REQ: {
        /* A worker's requests are sequential: a number not above the last
         * one seen from the same incarnation is a duplicate delivery. */
        if (M.req_inc[slot] == t.inc && t.seq <= M.req_seq[slot])
            violation(V_DUP, "main: request %llu from %s after %llu", (unsigned long long)t.seq,
                      from, (unsigned long long)M.req_seq[slot]);
        M.req_inc[slot] = t.inc;
        M.req_seq[slot] = t.seq;
        static unsigned char buf[sizeof(tmsg) + 64];
        static uint64_t rng = 77;
        tmsg a = {.kind = T_REPLY, .slot = T_MAIN, .round = t.round, .arg = t.seq};
        size_t len = encode(buf, &a, NULL, pm_test_rand(&rng) % 64, &rng);
        int rc = pm_cluster_reply(c, m, buf, len);
        if (rc == 0)
            M.main_answered++;
        else if (rc != -EHOSTDOWN && rc != -ESTALE && rc != -EAGAIN)
            violation(V_ERRNO, "main: pm_cluster_reply to %s: %d", from, rc);
        break;
    }
    case T_REPORT:
        M.reports++;
        if (t.round != cur_round || !s->go || s->inc != t.inc || s->reported) {
            violation(V_REPORT, "main: a report for round %u from %s (go %d, reported %d)", t.round,
                      from, s->go, s->reported);
            break;
        }
        s->reported = 1;
        if (t.a != t.b + t.c)
            violation(V_REPORT, "main: %s issued %u requests, %u ok + %u failed", from, t.a, t.b,
                      t.c);
        M.req_issued += t.a;
        M.req_ok += t.b;
        M.req_err += t.c;
        M.streamed += t.e;
        if (t.d > 0 && t.d > M.late_at_workers)
            M.late_at_workers = t.d; /* cumulative per incarnation: keep the largest seen */
        break;
    case T_VIOL: {
        const char *text = (const char *)m->data + sizeof(tmsg);
        violation((int)t.a, "%.*s", (int)t.body_len, text);
        break;
    }
    default:
        violation(V_IDENTITY, "main: unexpected payload kind %u from %s", t.kind, from);
        break;
    }
}

static void on_bcast(pm_cluster *c, const pm_message *r, size_t n, void *arg)
{
    (void)c;
    bcast *b = arg;
    if (b->done++ != 0) {
        violation(V_BCAST, "broadcast %llu: results delivered %d times", (unsigned long long)b->bid,
                  b->done);
        return;
    }
    if (n != b->expect)
        violation(V_BCAST, "broadcast %llu: %zu results for %zu ready workers",
                  (unsigned long long)b->bid, n, b->expect);
    uint64_t seen = 0;
    for (size_t i = 0; i < n; i++) {
        unsigned port = r[i].from.port;
        if (port < 1 || port > M.nw || (seen & (1ull << (port - 1)))) {
            violation(V_BCAST, "broadcast %llu: result %zu from port %u (twice or unknown)",
                      (unsigned long long)b->bid, i, port);
            continue;
        }
        seen |= 1ull << (port - 1);
        int e = r[i].error;
        if (e == 0) {
            tmsg t;
            if (decode(&r[i], &t) != 0 || !stamp_matches(&r[i].from, &t) || t.kind != T_BREPLY ||
                t.arg != b->bid)
                violation(V_BCAST, "broadcast %llu: a wrong answer from port %u#%llu",
                          (unsigned long long)b->bid, port,
                          (unsigned long long)r[i].from.incarnation);
            M.bc_results[0]++;
        } else if (e == -ETIMEDOUT) {
            M.bc_results[1]++;
        } else if (e == -EHOSTDOWN) {
            M.bc_results[2]++;
        } else if (e == -EAGAIN) {
            M.bc_results[3]++;
        } else {
            violation(V_BCAST, "broadcast %llu: port %u answered %d", (unsigned long long)b->bid,
                      port, e);
        }
    }
}

static unsigned ready_count(pm_cluster *c)
{
    unsigned k = 0;
    for (unsigned i = 0; i < M.nw; i++) {
        pm_slot_info si;
        if (pm_cluster_slot_info(c, i, &si) == 0 && si.state == PM_SLOT_READY)
            k++;
    }
    return k;
}

static void broadcast(pm_cluster *c)
{
    if (M.nbc >= 2)
        return;
    bcast *b = &M.bc[M.nbc];
    memset(b, 0, sizeof(*b));
    b->bid = ++M.next_bid;
    b->expect = ready_count(c);
    static unsigned char buf[sizeof(tmsg)];
    static uint64_t rng = 99;
    tmsg t = {.kind = T_BCAST, .slot = T_MAIN, .round = cur_round, .arg = b->bid};
    size_t len = encode(buf, &t, NULL, 0, &rng);
    int rc = pm_cluster_broadcast(c, buf, len, BCAST_TIMEOUT_MS, on_bcast, b);
    if (rc != 0) {
        violation(V_ERRNO, "pm_cluster_broadcast: %d", rc);
        return;
    }
    M.nbc++;
    M.bc_sent++;
}

static int main_send(pm_cluster *c, unsigned slot, uint64_t inc, uint32_t kind, uint32_t a,
                     uint32_t b)
{
    static unsigned char buf[sizeof(tmsg)];
    static uint64_t rng = 5;
    tmsg t = {.kind = kind, .slot = T_MAIN, .round = cur_round, .a = a, .b = b};
    size_t len = encode(buf, &t, NULL, 0, &rng);
    pm_address to = pm_test_slot_addr(slot, inc);
    int rc = pm_cluster_send(c, &to, buf, len);
    if (rc != 0)
        violation(V_ERRNO, "pm_cluster_send to ready slot %u#%llu: %d", slot,
                  (unsigned long long)inc, rc);
    return rc;
}

/* ------------------------------------------------------------- nemesis */

static void inject(pm_cluster *c, unsigned slot, uint64_t now, uint64_t *rng)
{
    rslot *s = &M.s[slot];
    pm_slot_info si;
    s->injected = 1;
    /* Only this round's fault touches the slot, and only pm_cluster_run
     * reaps: while the incarnation is the one planned against, its pid is
     * still its own. */
    if (pm_cluster_slot_info(c, slot, &si) != 0 || si.incarnation != s->inc || si.pid <= 0) {
        violation(V_UNEXPECTED, "slot %u changed before its fault", slot);
        s->fault = F_NONE;
        return;
    }
    M.faults[s->fault]++;
    switch (s->fault) {
    case F_KILL:
        kill(si.pid, SIGKILL);
        break;
    case F_SEGV:
        kill(si.pid, SIGSEGV);
        break;
    case F_STOP_SHORT:
        kill(si.pid, SIGSTOP);
        s->cont_at = now + 30 + pm_test_rand(rng) % 71;
        break;
    case F_STOP_LONG:
        kill(si.pid, SIGSTOP); /* the fence's SIGKILL ends it stopped */
        break;
    case F_SPIN:
        if (main_send(c, slot, s->inc, T_SPIN, 0, 0) != 0)
            s->fault = F_NONE;
        break;
    case F_SCRIBBLE:
        if (main_send(c, slot, s->inc, T_SCRIBBLE, 0, 0) != 0)
            s->fault = F_NONE;
        break;
    default:
        break;
    }
}

/* A child that stops the supervisor (this process) for SUP_STOP_MS, and
 * with `all` its workers too: stopped first, resumed after it, as a frozen
 * cgroup or a suspended VM would (see test_supervisor_stopped_no_fence). */
static pid_t stop_supervisor(pm_cluster *c, int all)
{
    pid_t pids[MAXW];
    for (unsigned i = 0; i < M.nw; i++) {
        pm_slot_info si;
        pids[i] = pm_cluster_slot_info(c, i, &si) == 0 ? si.pid : 0;
    }
    pid_t sup = getpid();
    pid_t pid = pm_test_fork();
    if (pid != 0)
        return pid;
    if (all) {
        for (unsigned i = 0; i < M.nw; i++)
            if (pids[i] > 0)
                kill(pids[i], SIGSTOP);
        usleep(100000);
    }
    kill(sup, SIGSTOP);
    usleep(SUP_STOP_MS * 1000);
    kill(sup, SIGCONT);
    if (all) {
        /* The supervisor looks first: its stall is measured before any
         * worker could beat again. */
        usleep(150000);
        for (unsigned i = 0; i < M.nw; i++)
            if (pids[i] > 0)
                kill(pids[i], SIGCONT);
    }
    _exit(0);
}

/* ---------------------------------------------------------- invariants */

static int open_fds(void)
{
    int n = 0;
    DIR *d = opendir("/proc/self/fd");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL)
        n += e->d_name[0] != '.';
    closedir(d);
    return n - 1; /* the DIR's own fd */
}

/* Resident KiB from /proc/self/statm: all of it (*total), and the private
 * part (resident - shared), which is what a leak grows. The shared part is
 * the workers' rings the supervisor has touched: each new incarnation's
 * rings start cold, so it swings by up to workers x 2 rings. */
static long rss_kib(long *total)
{
    FILE *f = fopen("/proc/self/statm", "re");
    long size = 0, res = -1, shared = 0;
    *total = -1;
    if (f == NULL)
        return -1;
    if (fscanf(f, "%ld %ld %ld", &size, &res, &shared) != 3)
        res = -1;
    fclose(f);
    if (res < 0)
        return -1;
    long kib = sysconf(_SC_PAGESIZE) / 1024;
    *total = res * kib;
    return (res - shared) * kib;
}

/* Children of this process in state Z. */
static int zombies(void)
{
    pid_t me = getpid();
    int n = 0;
    DIR *d = opendir("/proc");
    if (d == NULL)
        return -1;
    struct dirent *e;
    while ((e = readdir(d)) != NULL) {
        if (!isdigit((unsigned char)e->d_name[0]))
            continue;
        char path[300], buf[512];
        snprintf(path, sizeof(path), "/proc/%s/stat", e->d_name);
        int fd = open(path, O_RDONLY | O_CLOEXEC);
        if (fd < 0)
            continue;
        ssize_t k = read(fd, buf, sizeof(buf) - 1);
        close(fd);
        if (k <= 0)
            continue;
        buf[k] = '\0';
        /* "pid (comm) S ppid": comm may hold spaces and parentheses. */
        char *p = strrchr(buf, ')');
        char st;
        int ppid;
        if (p != NULL && sscanf(p + 1, " %c %d", &st, &ppid) == 2 && st == 'Z' && ppid == me)
            n++;
    }
    closedir(d);
    return n;
}

/* 1 when everything the round started is over. */
static int settled(pm_cluster *c)
{
    for (unsigned i = 0; i < M.nw; i++) {
        rslot *s = &M.s[i];
        if (s->fault != F_NONE && (!s->injected || s->cont_at != 0))
            return 0;
        /* An exit or a fence is due: wait for the reaping. */
        if (s->fault != F_NONE && s->fault != F_STOP_SHORT && !s->exited)
            return 0;
        if (s->go && !s->reported && M.ended_inc[i] < s->inc)
            return 0;
    }
    for (int i = 0; i < M.nbc; i++)
        if (!M.bc[i].done)
            return 0;
    if (M.helper > 0) {
        if (waitpid(M.helper, NULL, WNOHANG) != M.helper)
            return 0;
        M.helper = 0;
    }
    if (M.sup_fault != 0 && M.stalls_round == 0)
        return 0;
    return ready_count(c) == M.nw;
}

static void check_outcomes(void)
{
    for (unsigned i = 0; i < M.nw; i++) {
        rslot *s = &M.s[i];
        int ok = 1;
        switch (s->fault) {
        case F_NONE:
            continue;
        case F_KILL:
            ok = s->exited && s->exit_signal == SIGKILL && !s->fenced;
            break;
        case F_SEGV:
            ok = s->exited && s->exit_signal == SIGSEGV && !s->fenced;
            break;
        case F_STOP_SHORT:
            ok = !s->exited && !s->fenced;
            break;
        case F_STOP_LONG:
        case F_SPIN:
            ok = s->fenced && s->fence_reason == PM_REASON_HEARTBEAT;
            break;
        case F_SCRIBBLE:
            ok = s->fenced && s->fence_reason == PM_REASON_CORRUPT_RING;
            break;
        default:
            break;
        }
        if (!ok)
            violation(V_OUTCOME, "slot %u#%llu after %s: exited %d (signal %d), fenced %d (%s)", i,
                      (unsigned long long)s->inc, fault_name[s->fault], s->exited, s->exit_signal,
                      s->fenced, s->fenced ? pm_reason_name(s->fence_reason) : "-");
    }
}

static void dump(pm_cluster *c)
{
    for (unsigned i = 0; i < M.nw; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        rslot *s = &M.s[i];
        fprintf(stderr,
                "  slot %2u %-8s #%llu pid %d fault %s injected %d exited %d fenced %d go %d "
                "reported %d\n",
                i, pm_slot_state_name(si.state), (unsigned long long)si.incarnation, (int)si.pid,
                fault_name[s->fault], s->injected, s->exited, s->fenced, s->go, s->reported);
    }
    for (int i = 0; i < M.nbc; i++)
        fprintf(stderr, "  broadcast %llu done %d\n", (unsigned long long)M.bc[i].bid,
                M.bc[i].done);
    fprintf(stderr, "  supervisor fault %d helper %d stalls this round %d\n", M.sup_fault,
            (int)M.helper, M.stalls_round);
}

/* --------------------------------------------------------------- rounds */

static int pick_fault(uint64_t *rng)
{
    /* Weights: the heartbeat fences (long stop, spin) are the slow ones. */
    static const int kinds[] = {F_KILL, F_KILL, F_KILL, F_KILL, F_KILL, F_SEGV, F_SEGV, F_SEGV,
                                F_SEGV, F_STOP_SHORT, F_STOP_SHORT, F_STOP_SHORT, F_STOP_SHORT,
                                F_STOP_LONG, F_STOP_LONG, F_SPIN, F_SPIN, F_SCRIBBLE,
                                F_SCRIBBLE, F_SCRIBBLE};
    return kinds[pm_test_rand(rng) % ARRAY_LEN(kinds)];
}

/* One round; 0, or -1 when it could not settle (the run stops there). */
static int round_once(pm_cluster *c, uint32_t r, uint64_t *rng)
{
    cur_round = r;
    memset(M.s, 0, sizeof(M.s));
    M.nbc = 0;
    M.sup_fault = 0;
    M.stalls_round = 0;
    uint64_t t0 = pm_test_ms();
    for (unsigned i = 0; i < M.nw; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        M.s[i].inc = si.incarnation;
    }
    /* The plan. */
    if (r % SUP_EVERY == SUP_EVERY - 1) {
        M.sup_fault = (r / SUP_EVERY) % 2 == 0 ? F_SUP_STOP : F_SUP_STOP_ALL;
    } else {
        unsigned x = (unsigned)(pm_test_rand(rng) % 10), nf = x < 4 ? 0 : x < 8 ? 1 : 2;
        for (unsigned k = 0; k < nf; k++) {
            unsigned slot = (unsigned)(pm_test_rand(rng) % M.nw);
            if (M.s[slot].fault != F_NONE)
                continue;
            M.s[slot].fault = pick_fault(rng);
            M.s[slot].inject_at = t0 + pm_test_rand(rng) % 21;
        }
    }
    /* Traffic: requesters by parity, each with two servers of the other. */
    unsigned half = M.nw / 2;
    for (unsigned i = 0; i < M.nw; i++) {
        if ((i + r) % 2 != 0)
            continue;
        unsigned rpeer = (i + 1 + 2 * (r % half)) % M.nw;
        unsigned speer = (i + 3 + 2 * (r % half)) % M.nw;
        if (main_send(c, i, M.s[i].inc, T_GO, rpeer, speer) == 0) {
            M.s[i].go = 1;
            M.go_sent++;
        }
    }
    broadcast(c);
    if (M.sup_fault != 0) {
        M.faults[M.sup_fault]++;
        M.helper = stop_supervisor(c, M.sup_fault == F_SUP_STOP_ALL);
    }
    int second = 0;
    for (;;) {
        uint64_t now = pm_test_ms();
        int pending = 0;
        for (unsigned i = 0; i < M.nw; i++) {
            rslot *s = &M.s[i];
            if (s->fault != F_NONE && !s->injected) {
                if (now >= s->inject_at)
                    inject(c, i, now, rng);
                else
                    pending = 1;
            }
            if (s->cont_at != 0 && now >= s->cont_at) {
                pm_slot_info si;
                if (pm_cluster_slot_info(c, i, &si) == 0 && si.incarnation == s->inc && si.pid > 0)
                    kill(si.pid, SIGCONT);
                s->cont_at = 0;
            }
        }
        /* Once the nemesis has struck, a second broadcast meets its
         * victims still counted ready, or already gone. */
        if (!second && !pending) {
            broadcast(c);
            second = 1;
        }
        if (second && settled(c))
            break;
        if (now > t0 + SETTLE_MS) {
            violation(V_SETTLE, "round not settled after %d ms", SETTLE_MS);
            dump(c);
            return -1;
        }
        int rc = pm_cluster_run(c, 5);
        if (rc == -EINTR) {
            interrupted = 1;
            return -1;
        }
        if (rc < 0) {
            violation(V_ERRNO, "pm_cluster_run: %d", rc);
            return -1;
        }
    }
    check_outcomes();
    return 0;
}

static void usage(void)
{
    fprintf(stderr, "usage: torture [--rounds N] [--seed S] [--workers W] [--standby]\n"
                    "  N >= 1 (default 1000), W even, 4..%d (default 16)\n", MAXW);
    exit(2);
}

static unsigned long long number(const char *opt, const char *v, unsigned long long max)
{
    char *end;
    errno = 0;
    unsigned long long x = strtoull(v != NULL ? v : "", &end, 10);
    if (v == NULL || *v == '\0' || *end != '\0' || errno != 0 || x > max) {
        fprintf(stderr, "torture: %s wants a number up to %llu, got '%s'\n", opt, max,
                v != NULL ? v : "");
        usage();
    }
    return x;
}

static int with_standby;           /* --standby */
static uint64_t standby_starts;    /* starts that took one, read before terminate */

static pm_options *options(unsigned workers)
{
    pm_options *o = pm_options_new();
    if (o == NULL)
        return NULL;
    pm_options_set_workers(o, (int)workers);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_options_set_handle_signals(o, 1); /* SIGTERM/SIGINT end a run (-EINTR) */
    pm_options_set_heartbeat_timeout_ms(o, HEARTBEAT_MS);
    pm_options_set_on_event(o, on_event, NULL);
    pm_options_set_on_message(o, on_message, NULL);
    pm_options_set_on_permanently_down(o, on_pd, NULL);
    pm_options_set_restart_min_backoff_ms(o, 10);
    pm_options_set_restart_max_backoff_ms(o, 50);
    pm_options_set_max_restarts(o, -1);
    pm_options_set_stop_timeout_ms(o, 2000);
    pm_options_set_ring_size(o, 256 * 1024);
    pm_options_set_warm_standby(o, with_standby);
    return o;
}

/* The restart budget: a small cluster whose slot 0 is killed each time it
 * is ready, until it is retired; retired exactly once, never restarted,
 * the others unaffected. */
static void retire_phase(void)
{
    const int budget = 2;
    memset(&M.s, 0, sizeof(M.s));
    M.nw = 4;
    M.phase_retire = 1;
    M.retired = M.pd_calls = 0;
    M.sup_fault = 0;
    cur_round = 0;
    int fds0 = open_fds();
    pm_options *o = options(M.nw);
    pm_options_set_max_restarts(o, budget);
    pm_options_set_restart_window_ms(o, 0);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc != 0) {
        violation(V_RETIRE, "spawn: %d", rc);
        pm_options_free(o);
        return;
    }
    uint64_t killed_inc = 0, kills = 0, end = pm_test_ms() + 20000, starts_at_retire = 0;
    pm_slot_info si;
    for (;;) {
        pm_cluster_slot_info(c, 0, &si);
        if (si.state == PM_SLOT_RETIRED)
            break;
        if (si.state == PM_SLOT_READY && si.incarnation != killed_inc) {
            kill(si.pid, SIGKILL);
            killed_inc = si.incarnation;
            kills++;
        }
        if (pm_test_ms() > end) {
            violation(V_RETIRE, "slot 0 not retired after 20 s and %llu kills",
                      (unsigned long long)kills);
            break;
        }
        pm_cluster_run(c, 5);
    }
    starts_at_retire = M.starts;
    /* Longer than the largest backoff: a restart after retirement would show. */
    for (end = pm_test_ms() + 500; pm_test_ms() < end;)
        pm_cluster_run(c, 10);
    pm_cluster_slot_info(c, 0, &si);
    if (si.state != PM_SLOT_RETIRED || M.retired != 1 || M.pd_calls != 1 ||
        M.starts != starts_at_retire || kills != (uint64_t)budget + 1)
        violation(V_RETIRE,
                  "slot 0 %s after %llu kills: %llu RETIRED events, %llu permanently-down calls, "
                  "%llu starts after retirement",
                  pm_slot_state_name(si.state), (unsigned long long)kills,
                  (unsigned long long)M.retired, (unsigned long long)M.pd_calls,
                  (unsigned long long)(M.starts - starts_at_retire));
    memset(M.bc, 0, sizeof(M.bc));
    M.nbc = 0;
    broadcast(c);
    for (end = pm_test_ms() + 5000; !M.bc[0].done && pm_test_ms() < end;)
        pm_cluster_run(c, 10);
    if (M.bc[0].done != 1 || M.bc[0].expect != M.nw - 1 || ready_count(c) != M.nw - 1)
        violation(V_RETIRE, "after the retirement: %u of %u slots ready, broadcast done %d to %zu",
                  ready_count(c), M.nw - 1, M.bc[0].done, M.bc[0].expect);
    rc = pm_cluster_terminate(c);
    if (rc != 0)
        violation(V_RETIRE, "pm_cluster_terminate: %d", rc);
    pm_options_free(o);
    if (open_fds() != fds0)
        violation(V_RETIRE, "fds %d after the retirement cluster, %d before", open_fds(), fds0);
    M.phase_retire = 0;
}

static uint64_t lanes_made, lanes_revoked;

static void summary(uint32_t rounds, double secs, uint64_t seed, uint32_t warm, int fds0,
                    int fds_warm, int fds_end, long rss_warm, long rss_max, long rss_end,
                    long rss_all_max)
{
    uint64_t total = 0, faults = 0;
    for (int i = 0; i < V__COUNT; i++)
        total += violations[i];
    for (int i = 1; i < F__COUNT; i++)
        faults += M.faults[i];
    printf("torture: %u rounds in %.1f s (seed %llu, %u workers, heartbeat %d ms%s)\n", rounds,
           secs, (unsigned long long)seed, M.nw, HEARTBEAT_MS, with_standby ? ", warm standby" : "");
    printf("faults injected: %llu\n", (unsigned long long)faults);
    for (int i = 1; i < F__COUNT; i++)
        printf("  %-32s %llu\n", fault_name[i], (unsigned long long)M.faults[i]);
    printf("outcomes: %llu exits, fences %llu heartbeat + %llu corrupt-ring, %llu stalls, "
           "%llu starts\n",
           (unsigned long long)M.exits, (unsigned long long)M.fences_hb,
           (unsigned long long)M.fences_ring, (unsigned long long)M.stalls,
           (unsigned long long)M.starts);
    if (with_standby)
        printf("warm standby: %llu restarts took one\n", (unsigned long long)standby_starts);
    /* The workers' requests and streams between them take direct lanes
     * once a pair has exchanged 64 frames (cgroup containment): every
     * fault above then also hits lanes, and every death revokes them. */
    printf("direct lanes: %llu made, %llu revoked at a live end\n", (unsigned long long)lanes_made,
           (unsigned long long)lanes_revoked);
    printf("  starvation (load, not the nemesis): %llu supervisor stalls, %llu workers fenced "
           "\"heartbeat\"\n",
           (unsigned long long)M.stalls_starved, (unsigned long long)M.fences_starved);
    printf("traffic: %llu broadcasts (results: %llu ok, %llu timed out, %llu host down, "
           "%llu again)\n",
           (unsigned long long)M.bc_sent, (unsigned long long)M.bc_results[0],
           (unsigned long long)M.bc_results[1], (unsigned long long)M.bc_results[2],
           (unsigned long long)M.bc_results[3]);
    printf("  %llu go, %llu reports; worker requests %llu issued = %llu answered + %llu failed; "
           "main answered %llu; %llu stream frames; late replies at a worker: %llu at most\n",
           (unsigned long long)M.go_sent, (unsigned long long)M.reports,
           (unsigned long long)M.req_issued, (unsigned long long)M.req_ok,
           (unsigned long long)M.req_err, (unsigned long long)M.main_answered,
           (unsigned long long)M.streamed, (unsigned long long)M.late_at_workers);
    printf("supervisor: fds %d before spawn, %d after round %u and at every round's end since, "
           "%d after terminate\n",
           fds0, fds_warm, warm, fds_end);
    printf("  private RSS %ld KiB after round %u, %ld KiB at most, %ld KiB at the end (allowed: "
           "+%d KiB%s); RSS with the rings %ld KiB at most\n",
           rss_warm, warm, rss_max, rss_end, RSS_DRIFT_KIB,
           pm_test_sanitized() ? ", not checked under ASan" : "", rss_all_max);
    printf("invariant violations: %llu\n", (unsigned long long)total);
    for (int i = 0; i < V__COUNT; i++)
        if (violations[i] != 0)
            printf("  %-18s %llu\n", viol_name[i], (unsigned long long)violations[i]);
    fflush(stdout);
}

int main(int argc, char **argv)
{
    uint32_t rounds = 1000;
    uint64_t seed = 20240601;
    unsigned workers = 16;
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : NULL;
        if (strcmp(argv[i], "--rounds") == 0)
            rounds = (uint32_t)number("--rounds", v, 1000000), i++;
        else if (strcmp(argv[i], "--seed") == 0)
            seed = number("--seed", v, UINT64_MAX), i++;
        else if (strcmp(argv[i], "--workers") == 0)
            workers = (unsigned)number("--workers", v, MAXW), i++;
        else if (strcmp(argv[i], "--standby") == 0)
            with_standby = 1;
        else {
            fprintf(stderr, "torture: unknown argument '%s'\n", argv[i]);
            usage();
        }
    }
    if (rounds < 1 || workers < 4 || workers % 2 != 0) {
        fprintf(stderr, "torture: --rounds must be >= 1 and --workers even and >= 4\n");
        usage();
    }
    /* Bounded in time whatever happens: 2 s a round (a round settles in
     * 10 s or stops the run) and two minutes for the rest. */
    alarm(rounds * 2 + 120);
    /* Workers are crashed by the thousand: no core files. */
    struct rlimit nocore = {0, 0};
    setrlimit(RLIMIT_CORE, &nocore);
    setvbuf(stderr, NULL, _IOLBF, 0);

    M.nw = workers;
    uint64_t rng = seed ? seed : 1;
    int fds0 = open_fds(), fds_warm = -1, fds_end = -1;
    long rss_warm = -1, rss_max = 0, rss_end = -1, rss_all_max = 0;
    pm_options *o = options(workers);
    pm_cluster *c;
    int rc = o == NULL ? -ENOMEM : pm_cluster_spawn(o, &c);
    if (rc != 0) {
        fprintf(stderr, "torture: pm_cluster_spawn: %s\n", pm_strerror(rc));
        return 1;
    }
    M.c = c;
    uint64_t t0 = pm_test_ms();
    uint32_t done = 0;
    /* Short runs compare with their middle round instead. */
    uint32_t warm = rounds >= 2 * WARMUP_ROUNDS ? WARMUP_ROUNDS : (rounds + 1) / 2;
    for (uint32_t r = 1; r <= rounds; r++) {
        if (round_once(c, r, &rng) != 0)
            break;
        done = r;
        int z = zombies();
        if (z != 0)
            violation(V_ZOMBIE, "%d zombie children", z);
        int fds = open_fds();
        long rss_all;
        long rss = rss_kib(&rss_all);
        if (rss_all > rss_all_max)
            rss_all_max = rss_all;
        if (r == warm) {
            fds_warm = fds;
            rss_warm = rss;
        } else if (fds_warm >= 0) {
            if (fds != fds_warm)
                violation(V_FDS, "%d fds, %d after the warm-up", fds, fds_warm);
            /* ASan keeps freed memory in quarantine (256 MiB by default):
             * there RSS only grows, and LeakSanitizer checks leaks instead. */
            if (rss > rss_warm + RSS_DRIFT_KIB && !pm_test_sanitized())
                violation(V_RSS, "private RSS %ld KiB, %ld KiB after the warm-up", rss,
                          rss_warm);
        }
        if (rss > rss_max)
            rss_max = rss;
        rss_end = rss;
        if (r % 100 == 0)
            fprintf(stderr, "torture: round %u/%u, %.1f s, fds %d, RSS %ld KiB (private %ld)\n",
                    r, rounds, (double)(pm_test_ms() - t0) / 1000.0, fds, rss_all, rss);
    }
    /* The end state: one more broadcast reaches every worker, and each
     * answers; then every worker stops on request. */
    if (!interrupted && done == rounds) {
        cur_round = rounds + 1;
        M.sup_fault = 0;
        memset(M.s, 0, sizeof(M.s));
        M.nbc = 0;
        broadcast(c);
        uint64_t before_ok = M.bc_results[0];
        for (uint64_t end = pm_test_ms() + 5000; !M.bc[0].done && pm_test_ms() < end;)
            pm_cluster_run(c, 10);
        if (!M.bc[0].done || M.bc[0].expect != workers || M.bc_results[0] - before_ok != workers)
            violation(V_END, "the final broadcast: done %d, %zu expected, %llu answered",
                      M.bc[0].done, M.bc[0].expect,
                      (unsigned long long)(M.bc_results[0] - before_ok));
    }
    double secs = (double)(pm_test_ms() - t0) / 1000.0;
    standby_starts = pm_test_standby_taken(c);
    lanes_made = c->hub->lanes_made;
    lanes_revoked = c->hub->lanes_revoked;
    M.ending = 1;
    rc = pm_cluster_terminate(c);
    M.ending = 0;
    if (rc != 0 && !interrupted)
        violation(V_END, "pm_cluster_terminate: %d (1: some worker had to be killed)", rc);
    pm_options_free(o);
    fds_end = open_fds();
    if (fds_end != fds0)
        violation(V_END, "%d fds after terminate, %d before spawn", fds_end, fds0);
    if (waitpid(-1, NULL, WNOHANG) != -1 || errno != ECHILD)
        violation(V_END, "a child is left after terminate");
    if (!interrupted)
        retire_phase();
    M.nw = workers;
    summary(done, secs, seed, warm, fds0, fds_warm, fds_end, rss_warm, rss_max, rss_end,
            rss_all_max);
    if (interrupted) {
        fprintf(stderr, "torture: interrupted after %u rounds\n", done);
        return 2;
    }
    uint64_t total = 0;
    for (int i = 0; i < V__COUNT; i++)
        total += violations[i];
    return total == 0 && done == rounds ? 0 : 1;
}
