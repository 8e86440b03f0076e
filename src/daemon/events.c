/* SPDX-License-Identifier: MIT */
/* events.c - cluster events as log lines and exit counters, with OOM
 * attribution from the memory cgroup; see events.h. */
#define _GNU_SOURCE
#include "events.h"

#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "clock.h"
#include "log.h"

#define PM__LEN(a) (sizeof(a) / sizeof((a)[0]))

/* The oom_kill count of our memory cgroup, or -1: cgroup v2 memory.events,
 * else the v1 memory controller's memory.oom_control. Only the fallback for
 * slots without a memory cgroup of their own (no --memory-max, or process
 * groups): workers then live in our cgroup, so a rise between two exits
 * means the kernel's OOM killer took one of them, or another process of
 * ours. */
static long long oom_kill_count(void)
{
    char line[512], v2[600] = "", v1[600] = "";
    FILE *f = fopen("/proc/self/cgroup", "re");
    if (f == NULL)
        return -1;
    while (fgets(line, sizeof(line), f) != NULL) {
        line[strcspn(line, "\n")] = '\0';
        char *path = strchr(line, ':') ? strchr(strchr(line, ':') + 1, ':') : NULL;
        if (path == NULL)
            continue;
        path++;
        const char *rel = strcmp(path, "/") == 0 ? "" : path;
        if (strncmp(line, "0::", 3) == 0)
            snprintf(v2, sizeof(v2), "/sys/fs/cgroup%s/memory.events", rel);
        else if (strstr(line, ":memory:") != NULL)
            snprintf(v1, sizeof(v1), "/sys/fs/cgroup/memory%s/memory.oom_control", rel);
    }
    fclose(f);
    const char *files[] = {v2, v1};
    for (int i = 0; i < 2; i++) {
        if (files[i][0] == '\0' || (f = fopen(files[i], "re")) == NULL)
            continue;
        long long n = -1;
        while (fgets(line, sizeof(line), f) != NULL)
            if (sscanf(line, "oom_kill %lld", &n) == 1)
                break;
        fclose(f);
        if (n >= 0)
            return n;
    }
    return -1;
}

void pmd_events_init(pmd_events *ev, pmd_health_state *hs)
{
    memset(ev, 0, sizeof(*ev));
    ev->hs = hs;
    ev->oom_kills = oom_kill_count();
}

void pmd_events_free(pmd_events *ev)
{
    free(ev->slots);
    ev->slots = NULL;
    ev->nslots = 0;
}

/* ------------------------------------------------------------------ rate limit */

static pmd_slot_log slot_log_new(uint64_t now)
{
    pmd_slot_log l;
    memset(&l, 0, sizeof(l));
    l.worker = pmd_log_bucket_new(PMD_LOG_BURST, PMD_LOG_PER_S, now);
    l.life = pmd_log_bucket_new(PMD_LIFE_BURST, PMD_LIFE_PER_S, now);
    return l;
}

/* Slot i's limits, grown on first use; the shared fallback ones when memory
 * runs out (the limits then hold for those slots together). */
static pmd_slot_log *slot_log(pmd_events *ev, unsigned slot, uint64_t now)
{
    if (slot >= ev->nslots) {
        unsigned n = slot + 1 > 2 * ev->nslots ? slot + 1 : 2 * ev->nslots;
        pmd_slot_log *l = realloc(ev->slots, n * sizeof(*l));
        if (l == NULL) {
            if (ev->fallback.worker.burst == 0)
                ev->fallback = slot_log_new(now);
            return &ev->fallback;
        }
        for (unsigned i = ev->nslots; i < n; i++)
            l[i] = slot_log_new(now);
        ev->slots = l;
        ev->nslots = n;
    }
    return &ev->slots[slot];
}

pmd_log_bucket pmd_log_bucket_new(unsigned burst, unsigned per_s, uint64_t now_ms)
{
    return (pmd_log_bucket){(double)burst, now_ms, 0, burst, per_s};
}

int pmd_log_bucket_take(pmd_log_bucket *b, uint64_t now_ms)
{
    if (now_ms > b->at_ms) {
        b->tokens += (double)(now_ms - b->at_ms) * b->per_s / 1000.0;
        if (b->tokens > b->burst)
            b->tokens = b->burst;
        b->at_ms = now_ms;
    }
    if (b->tokens < 1.0)
        return 0;
    b->tokens -= 1.0;
    return 1;
}

/* The count of a slot's worker-controlled lines not written since the
 * last report, as one line of its own. */
static void report_suppressed(pmd_slot_log *l, unsigned slot)
{
    if (l->worker.suppressed == 0)
        return;
    char s[16], n[24];
    snprintf(s, sizeof(s), "%u", slot);
    snprintf(n, sizeof(n), "%llu", (unsigned long long)l->worker.suppressed);
    const char *kv[] = {"slot", s, "lines", n};
    pmd_log(PMD_LOG_WARN, "log_suppressed", kv, 2);
    l->worker.suppressed = 0;
}

/* The same for lifecycle lines: how many, how many of them were exits,
 * and which incarnations they were about. */
static void report_life_suppressed(pmd_slot_log *l, unsigned slot, uint64_t now)
{
    if (l->life.suppressed == 0)
        return;
    char s[16], n[24], x[24], a[24], b[24];
    snprintf(s, sizeof(s), "%u", slot);
    snprintf(n, sizeof(n), "%llu", (unsigned long long)l->life.suppressed);
    snprintf(x, sizeof(x), "%llu", (unsigned long long)l->life_exits);
    snprintf(a, sizeof(a), "%llu", (unsigned long long)l->inc_first);
    snprintf(b, sizeof(b), "%llu", (unsigned long long)l->inc_last);
    const char *kv[] = {"slot", s, "lines", n, "exits", x, "incarnation_first", a,
                        "incarnation_last", b};
    pmd_log(PMD_LOG_WARN, "lifecycle_suppressed", kv, 5);
    l->life_reported_ms = now;
    l->life.suppressed = 0;
    l->life_exits = 0;
    l->inc_first = l->inc_last = 0;
}

/* Lines a worker can make procmesh write as fast as it likes (STOPPING=1
 * in a loop): a log that floods hides everything else and fills the disk. */
static int worker_driven(int type)
{
    return type == PM_EVENT_STOPPING || type == PM_EVENT_NOT_DRAINING;
}

/* Written whatever came before: one per slot and stop or retirement (the
 * last line of a drain), or no worker's doing (a stall, a peer link,
 * bounded by the redial backoff). */
static int always_logged(int type)
{
    return type == PM_EVENT_STOPPED || type == PM_EVENT_RETIRED || type == PM_EVENT_STALLED ||
           type == PM_EVENT_PEER_UP || type == PM_EVENT_PEER_DOWN || type == PM_EVENT_PEER_REFUSED;
}

/* 1 when the line for e may be written now. Per slot, so that one worker
 * cannot silence the lines of another. A worker-driven line takes a token
 * of the slot's worker bucket (PMD_LOG_BURST, then PMD_LOG_PER_S); a
 * lifecycle line one of its lifecycle bucket. What is held back is counted
 * in /metrics, and in a line of its own: log_suppressed rides along with
 * the next worker-driven line written or comes once a token is back;
 * lifecycle_suppressed comes at the next tick (at most one a second: a
 * loop held at the limit would otherwise get one per line written). Both
 * come before the slot's stopped or retired line at the latest. */
static int may_log(pmd_events *ev, const pm_event *e)
{
    uint64_t now = pmd_now_ms();
    if (always_logged(e->type)) {
        if (e->type == PM_EVENT_STOPPED || e->type == PM_EVENT_RETIRED) {
            pmd_slot_log *l = slot_log(ev, e->slot, now);
            report_suppressed(l, e->slot);
            report_life_suppressed(l, e->slot, now);
        }
        return 1;
    }
    pmd_slot_log *l = slot_log(ev, e->slot, now);
    int worker = worker_driven(e->type);
    pmd_log_bucket *b = worker ? &l->worker : &l->life;
    if (!pmd_log_bucket_take(b, now)) {
        b->suppressed++;
        ev->hs->log_suppressed++;
        if (!worker) {
            l->life_exits += e->type == PM_EVENT_EXITED;
            if (e->incarnation != 0) {
                if (l->inc_first == 0)
                    l->inc_first = e->incarnation;
                l->inc_last = e->incarnation;
            }
        }
        return 0;
    }
    /* The report rides along with the line that may be written: at most
     * one more line per token. */
    if (worker)
        report_suppressed(l, e->slot);
    return 1;
}

void pmd_events_tick(pmd_events *ev)
{
    uint64_t now = pmd_now_ms();
    for (unsigned i = 0; i < ev->nslots; i++) {
        pmd_slot_log *l = &ev->slots[i];
        if (l->worker.suppressed > 0 && pmd_log_bucket_take(&l->worker, now))
            report_suppressed(l, i);
        /* At most one a second (procmesh(1)): the loop comes round more
         * often than that under a short systemd watchdog (WATCHDOG_USEC)
         * or during a rolling restart, and a slot held at the limit would
         * get a line per turn. */
        if (l->life_reported_ms == 0 || now >= l->life_reported_ms + 1000)
            report_life_suppressed(l, i, now);
    }
}

/* Counts an exit by its cause; 1 when it was the OOM killer's. */
static int count_exit(pmd_events *ev, const pm_event *e)
{
    pmd_health_state *hs = ev->hs;
    switch (e->reason_code) {
    case PM_REASON_READY_TIMEOUT:
        hs->exits_ready_timeout++;
        return 0;
    case PM_REASON_HEARTBEAT:
    case PM_REASON_CORRUPT_RING:
    case PM_REASON_PROTOCOL:
    case PM_REASON_NOT_DRAINING:
        hs->exits_fenced++;
        return 0;
    case PM_REASON_STOP:
        /* Ended because we asked it to (its own exit, or our SIGTERM): an
         * orderly end, whatever the status says. One that had to be
         * SIGKILLed after the stop timeout is counted as a signal exit. */
        if (e->signal != SIGKILL) {
            hs->exits_clean++;
            return 0;
        }
        break;
    case PM_REASON_SIGNAL:
        if (e->signal == SIGKILL) {
            /* A SIGKILL procmesh did not send: the OOM killer's if the
             * slot's own memory cgroup counted one in this incarnation
             * (exact), else, without one, if our cgroup's count rose since
             * the last look. */
            int oom;
            if (ev->slot_oom) {
                oom = e->oom_kills > 0;
            } else {
                long long now = oom_kill_count();
                oom = now >= 0 && ev->oom_kills >= 0 && now > ev->oom_kills;
                ev->oom_kills = now;
            }
            if (oom) {
                hs->exits_oom++;
                return 1;
            }
        }
        break;
    default:
        break;
    }
    if (e->signal != 0)
        hs->exits_signal++;
    else if (e->exit_code == 0)
        hs->exits_clean++;
    else
        hs->exits_failed++;
    return 0;
}

/* "name+0xOFFSET" for a frame in a known module (its path's last
 * component; the full paths are in the crash_modules line), else the
 * absolute "0xADDRESS". */
static void frame_text(const pm_crash_report *r, int module, uint64_t offset, uint64_t addr,
                       char *buf, size_t size)
{
    if (module < 0 || (unsigned)module >= r->nmodules) {
        snprintf(buf, size, "0x%llx", (unsigned long long)addr);
        return;
    }
    const char *path = r->modules[module];
    const char *base = strrchr(path, '/');
    snprintf(buf, size, "%s+0x%llx", base != NULL ? base + 1 : path, (unsigned long long)offset);
}

/* The crash record of the exit e reports, as log fields after the exit's
 * own: where it faulted and the frames (module+offset, for addr2line), then
 * a second line with the modules' full paths. A report that is missing or
 * failed validation says so and shows nothing of the record. */
static void log_crash(pm_cluster *c, const pm_event *e, int level, const char *const *head,
                      size_t nhead)
{
    pm_slot_info si;
    if (pm_cluster_slot_info(c, e->slot, &si) < 0 || si.last_crash.state == PM_CRASH_NONE ||
        si.last_crash.incarnation != e->incarnation) {
        pmd_log(level, "exited", head, nhead);
        return;
    }
    const pm_crash_report *r = &si.last_crash;
    const char *kv[2 * 12];
    size_t n = 0;
    for (size_t i = 0; i < 2 * nhead; i++)
        kv[n++] = head[i];
    if (r->state != PM_CRASH_RECORDED) {
        kv[n++] = "crash_record";
        kv[n++] = r->state == PM_CRASH_INVALID ? "invalid" : "none";
        pmd_log(level, "exited", kv, n / 2);
        return;
    }
    char addr[24], pc[64], frames[PM_CRASH_FRAMES * 40];
    snprintf(addr, sizeof(addr), "0x%llx", (unsigned long long)r->fault_addr);
    frame_text(r, r->pc_module, r->pc_offset, r->pc, pc, sizeof(pc));
    size_t len = 0;
    frames[0] = '\0';
    for (unsigned i = 0; i < r->nframes && len + 1 < sizeof(frames); i++) {
        char one[PM_CRASH_PATH_MAX + 24];
        frame_text(r, r->frames[i].module, r->frames[i].offset, r->frames[i].addr, one, sizeof(one));
        int k = snprintf(frames + len, sizeof(frames) - len, "%s%s", i ? " " : "", one);
        if (k < 0 || (size_t)k >= sizeof(frames) - len)
            break;
        len += (size_t)k;
    }
    const char *more[] = {"fault_addr", addr, "code", r->code_name, "pc", pc, "frames", frames};
    for (size_t i = 0; i < PM__LEN(more); i++)
        kv[n++] = more[i];
    pmd_log(level, "exited", kv, n / 2);
    char mods[PM_CRASH_MODULES * PM_CRASH_PATH_MAX], slot[16], inc[24];
    len = 0;
    mods[0] = '\0';
    for (unsigned i = 0; i < r->nmodules; i++)
        len += (size_t)snprintf(mods + len, sizeof(mods) - len, "%s%s", i ? " " : "", r->modules[i]);
    snprintf(slot, sizeof(slot), "%u", e->slot);
    snprintf(inc, sizeof(inc), "%llu", (unsigned long long)e->incarnation);
    const char *mkv[] = {"slot", slot, "incarnation", inc, "modules", mods};
    pmd_log(level, "crash_modules", mkv, 3);
}

/* The containment in use, once, at the first event of the start. Each slot
 * has a memory cgroup of its own when the mode names a memory limit
 * (pm_cluster_containment's detail); ev->slot_oom records that. */
static void log_containment_once(pmd_events *ev, pm_cluster *c)
{
    if (ev->contain_logged)
        return;
    char detail[320];
    int mode = pm_cluster_containment(c, detail, sizeof(detail));
    ev->contain_logged = 1;
    ev->slot_oom = mode == PM_CONTAIN_CGROUP && strstr(detail, "memory") != NULL;
    const char *kv[] = {"mode", mode == PM_CONTAIN_CGROUP ? "cgroup" : "process-group", "detail",
                        detail};
    pmd_log(mode == PM_CONTAIN_CGROUP ? PMD_LOG_INFO : PMD_LOG_WARN, "containment", kv, 2);
}

/* Updates the counters the health endpoint reads, for every event, logged
 * or not. Returns 1 when e is an exit the kernel's OOM killer caused. */
static int count_event(pmd_events *ev, const pm_event *e)
{
    switch (e->type) {
    case PM_EVENT_STARTED:
        ev->hs->spawn_failures = 0;
        return 0;
    case PM_EVENT_EXITED:
        return count_exit(ev, e);
    case PM_EVENT_RETIRED:
        ev->retired++;
        return 0;
    case PM_EVENT_SPAWN_FAILED:
        ev->hs->spawn_failures++;
        return 0;
    case PM_EVENT_STOPPED:
        /* The policy stopped it after a failure (a clean end is "exit"). */
        if (e->reason_code == PM_REASON_POLICY)
            ev->failed_stops++;
        /* Kept before the rate limit: procmesh.c logs it with start_failed,
         * since pm_cluster_spawn can only return an errno (-ECHILD says
         * nothing about a worker that exited with code 1). */
        if (e->reason_code == PM_REASON_SPAWN_ABORTED && e->detail != NULL &&
            ev->start_error[0] == '\0')
            snprintf(ev->start_error, sizeof(ev->start_error), "%s", e->detail);
        return 0;
    default:
        return 0;
    }
}

/* One event being logged: the event, its cluster, and the fields most lines
 * start with, formatted once. */
typedef struct ev_line {
    pm_cluster *c;
    const pm_event *e;
    int oom; /* an exit the OOM killer caused (count_event) */
    char slot[16], pid[16], inc[24];
} ev_line;

/* One handler per event kind, each writing that kind's log line. */
static void log_started(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc};
    pmd_log(PMD_LOG_INFO, "started", kv, 3);
}

static void log_ready(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc};
    pmd_log(PMD_LOG_INFO, "ready", kv, 3);
}

/* An OOM kill, a signal (with the crash record), or an exit code. */
static void log_exited(const ev_line *l)
{
    const pm_event *e = l->e;
    char v1[32], sig[32];
    if (l->oom) {
        const char *kv[] = {"slot",   l->slot,   "pid",    l->pid, "incarnation", l->inc,
                            "signal", "SIGKILL", "reason", "oom"};
        pmd_log(PMD_LOG_WARN, "exited", kv, 5);
    } else if (e->signal != 0) {
        const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc,
                            "signal", pmd_signal_name(e->signal, sig, sizeof(sig)),
                            "core_dumped", e->core_dumped ? "true" : "false",
                            "reason", e->reason};
        log_crash(l->c, e, e->reason_code == PM_REASON_STOP ? PMD_LOG_INFO : PMD_LOG_WARN, kv, 6);
    } else {
        snprintf(v1, sizeof(v1), "%d", e->exit_code);
        const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc,
                            "exit_code", v1, "reason", e->reason};
        pmd_log(e->exit_code == 0 ? PMD_LOG_INFO : PMD_LOG_WARN, "exited", kv, 5);
    }
}

static void log_restart_scheduled(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%u", l->e->delay_ms);
    const char *kv[] = {"slot", l->slot, "delay_ms", v1};
    pmd_log(PMD_LOG_INFO, "restart_scheduled", kv, 2);
}

static void log_retired(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%u", l->e->restarts);
    const char *kv[] = {"slot", l->slot, "restarts", v1};
    pmd_log(PMD_LOG_ERROR, "retired", kv, 2);
}

static void log_stopped(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "reason", l->e->reason, "detail", l->e->detail};
    pmd_log(PMD_LOG_INFO, "stopped", kv, l->e->detail != NULL ? 3 : 2);
}

static void log_spawn_failed(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "error", pm_strerror(l->e->exit_code), "reason",
                        l->e->reason};
    pmd_log(PMD_LOG_ERROR, "spawn_failed", kv, 3);
}

static void log_fenced(const ev_line *l)
{
    const pm_event *e = l->e;
    if (e->reason_code == PM_REASON_VERSION) {
        /* Both versions, so a mismatched deployment says what is wrong. */
        char wv[16], sv[16];
        snprintf(wv, sizeof(wv), "%u", e->worker_version);
        snprintf(sv, sizeof(sv), "%u", (unsigned)PM_PROTOCOL_VERSION);
        const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc, "reason", e->reason,
                            "worker_protocol", wv, "supervisor_protocol", sv};
        pmd_log(PMD_LOG_ERROR, "fenced", kv, 6);
        return;
    }
    const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc, "reason", e->reason};
    pmd_log(PMD_LOG_WARN, "fenced", kv, 4);
}

static void log_stopping(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc};
    pmd_log(PMD_LOG_INFO, "stopping", kv, 3);
}

static void log_not_draining(const ev_line *l)
{
    const char *kv[] = {"slot", l->slot, "pid", l->pid, "incarnation", l->inc, "reason", l->e->reason};
    pmd_log(PMD_LOG_WARN, "not-draining", kv, 4);
}

static void log_stalled(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%u", l->e->delay_ms);
    const char *kv[] = {"stall_ms", v1, "reason", l->e->reason};
    pmd_log(PMD_LOG_WARN, "stall", kv, 2);
}

/* Peer links: bounded by the redial backoff (always_logged). */
static void log_peer_up(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%llu", (unsigned long long)l->e->peer_incarnation);
    const char *kv[] = {"host", l->e->peer_host, "incarnation", v1};
    pmd_log(PMD_LOG_INFO, "peer_up", kv, 2);
}

static void log_peer_down(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%llu", (unsigned long long)l->e->peer_incarnation);
    const char *kv[] = {"host", l->e->peer_host, "incarnation", v1, "reason", l->e->detail};
    pmd_log(PMD_LOG_WARN, "peer_down", kv, 3);
}

/* Rate-limited by the library: one per address and reason a minute, count
 * saying how many refusals the line stands for. */
static void log_peer_refused(const ev_line *l)
{
    char v1[32];
    snprintf(v1, sizeof(v1), "%llu", (unsigned long long)l->e->peer_failures);
    const char *kv[] = {"address", l->e->peer_address, "reason", l->e->detail, "count", v1,
                        "host", l->e->peer_host};
    pmd_log(PMD_LOG_WARN, "peer_refused", kv, l->e->peer_host != NULL ? 4 : 3);
}

/* The log line of each event kind, indexed by PM_EVENT_*; a kind this
 * daemon does not know (a newer library) is counted but not logged. */
static void (*const log_kind[])(const ev_line *) = {
    [PM_EVENT_STARTED] = log_started,
    [PM_EVENT_READY] = log_ready,
    [PM_EVENT_EXITED] = log_exited,
    [PM_EVENT_RESTART_SCHEDULED] = log_restart_scheduled,
    [PM_EVENT_RETIRED] = log_retired,
    [PM_EVENT_STOPPED] = log_stopped,
    [PM_EVENT_SPAWN_FAILED] = log_spawn_failed,
    [PM_EVENT_FENCED] = log_fenced,
    [PM_EVENT_STALLED] = log_stalled,
    [PM_EVENT_STOPPING] = log_stopping,
    [PM_EVENT_NOT_DRAINING] = log_not_draining,
    [PM_EVENT_PEER_UP] = log_peer_up,
    [PM_EVENT_PEER_DOWN] = log_peer_down,
    [PM_EVENT_PEER_REFUSED] = log_peer_refused,
};

/* The library's event callback: containment once, the counters for every
 * event, then the event's own log line unless the rate limit drops it. */
void pmd_on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    pmd_events *ev = arg;
    /* A STOPPED "spawn-aborted" before anything else is a start refused
     * before any worker (no cgroup for --containment cgroup or a limit):
     * no containment was used, and start_failed says why. */
    if (ev->contain_logged || e->type != PM_EVENT_STOPPED ||
        e->reason_code != PM_REASON_SPAWN_ABORTED)
        log_containment_once(ev, c);
    int oom = count_event(ev, e);
    if (!may_log(ev, e))
        return;
    if (e->type < 0 || (size_t)e->type >= PM__LEN(log_kind) || log_kind[e->type] == NULL)
        return;
    ev_line l = {.c = c, .e = e, .oom = oom};
    snprintf(l.slot, sizeof(l.slot), "%u", e->slot);
    snprintf(l.pid, sizeof(l.pid), "%d", (int)e->pid);
    snprintf(l.inc, sizeof(l.inc), "%llu", (unsigned long long)e->incarnation);
    log_kind[e->type](&l);
}

void pmd_on_down(pm_cluster *c, unsigned slot, const pm_address *a, unsigned restarts, void *arg)
{
    (void)c;
    (void)slot;
    (void)restarts;
    (void)arg;
    char text[PM_ADDRESS_STRLEN];
    pm_address_format(a, text, sizeof(text));
    const char *kv[] = {"address", text};
    pmd_log(PMD_LOG_ERROR, "permanently_down", kv, 1);
}

void pmd_on_output(pm_cluster *c, const pm_output_line *l, void *arg)
{
    (void)c;
    pmd_events *ev = arg;
    char slot[16], pid[16], inc[24], sup[24];
    snprintf(slot, sizeof(slot), "%u", l->slot);
    snprintf(pid, sizeof(pid), "%d", (int)l->pid);
    snprintf(inc, sizeof(inc), "%llu", (unsigned long long)l->incarnation);
    snprintf(sup, sizeof(sup), "%llu", (unsigned long long)l->suppressed);
    if (l->suppressed > 0)
        ev->hs->log_suppressed += l->suppressed;
    if (l->stream == PM_OUTPUT_NONE) {
        /* Lines dropped after the last one delivered, at the incarnation's
         * end. */
        const char *kv[] = {"slot", slot, "pid", pid, "incarnation", inc, "lines", sup};
        pmd_log(PMD_LOG_WARN, "output_suppressed", kv, 4);
        return;
    }
    /* The text as one value, with its length: the log's escaping keeps a
     * worker's control characters (NUL too) from forging lines or fields
     * or cutting the line, and makes invalid UTF-8 U+FFFD. */
    const char *kv[2 * 7] = {"slot", slot, "pid", pid, "incarnation", inc, "stream",
                             l->stream == PM_OUTPUT_STDERR ? "stderr" : "stdout"};
    size_t n = 4;
    if (l->truncated) {
        kv[2 * n] = "truncated";
        kv[2 * n + 1] = "true";
        n++;
    }
    if (l->suppressed > 0) {
        kv[2 * n] = "suppressed";
        kv[2 * n + 1] = sup;
        n++;
    }
    kv[2 * n] = "text";
    kv[2 * n + 1] = l->text;
    n++;
    size_t vlen[7] = {(size_t)-1, (size_t)-1, (size_t)-1, (size_t)-1, (size_t)-1, (size_t)-1,
                      (size_t)-1};
    vlen[n - 1] = l->len;
    pmd_logv(PMD_LOG_INFO, "output", kv, vlen, n);
}
