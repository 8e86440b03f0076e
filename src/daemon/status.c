/* SPDX-License-Identifier: MIT */
/* status.c - the slot status fields, written as /status JSON and read back
 * into the `procmesh status` table; see status.h. */
#define _GNU_SOURCE
#include "status.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sbuf.h"

/* The fields of one slot object, in order. All are integers but the state,
 * which is written as its name (pm_slot_state_name), and the incarnation,
 * a string of digits: a 63-bit number, which a JSON reader such as
 * JavaScript could not hold exactly as a number. */
enum field { F_SLOT, F_STATE, F_PID, F_INCARNATION, F_RESTARTS, F_EXIT_CODE, F_SIGNAL, F_HB_AGE,
             F_COUNT };
static const char *const field_names[F_COUNT] = {
    [F_SLOT] = "slot",         [F_STATE] = "state",
    [F_PID] = "pid",           [F_INCARNATION] = "incarnation",
    [F_RESTARTS] = "restarts", [F_EXIT_CODE] = "last_exit_code",
    [F_SIGNAL] = "last_signal", [F_HB_AGE] = "heartbeat_age_ms",
};

static const char *const crash_states[] = {
    [PM_CRASH_NONE] = "none", [PM_CRASH_RECORDED] = "recorded",
    [PM_CRASH_UNRECORDED] = "unrecorded", [PM_CRASH_INVALID] = "invalid"};

/* The last crash, compactly (the health endpoint budgets 512 bytes a slot):
 * state, incarnation, signal, si_code, fault address and pc as
 * module+offset (its last path component, at most 63 characters). The
 * frames are in the log line and pm_cluster_slot_info. Every string is
 * from the validated report: printable, no quote or backslash. */
static void crash_json(pmd_sbuf *b, const pm_crash_report *r)
{
    int st = r->state >= 0 && r->state <= PM_CRASH_INVALID ? r->state : PM_CRASH_NONE;
    pmd_sb_printf(b, ",\"crash_state\":\"%s\"", crash_states[st]);
    if (st == PM_CRASH_NONE)
        return;
    pmd_sb_printf(b, ",\"crash_incarnation\":\"%llu\",\"crash_signal\":%d",
                  (unsigned long long)r->incarnation, r->signal);
    if (st != PM_CRASH_RECORDED)
        return;
    char pc[96];
    if (r->pc_module >= 0 && (unsigned)r->pc_module < r->nmodules) {
        const char *path = r->modules[r->pc_module];
        const char *base = strrchr(path, '/');
        snprintf(pc, sizeof(pc), "%.63s+0x%llx", base != NULL ? base + 1 : path,
                 (unsigned long long)r->pc_offset);
    } else {
        snprintf(pc, sizeof(pc), "0x%llx", (unsigned long long)r->pc);
    }
    /* '{' and '}' would confuse pmd_status_print's reading of the object. */
    for (char *p = pc; *p != '\0'; p++)
        if (*p == '{' || *p == '}')
            *p = '?';
    pmd_sb_printf(b, ",\"crash_code\":\"%s\",\"crash_fault_addr\":\"0x%llx\",\"crash_pc\":\"%s\"",
                  r->code_name, (unsigned long long)r->fault_addr, pc);
}

/* The peer links (peer mode; nothing otherwise): one object per connection,
 * and the ended ones by reason. Host names follow the name rule: no quote,
 * no brace. */
static void peers_json(pmd_sbuf *b, pm_cluster *c)
{
    enum { MAXP = 64, MAXR = 32 };
    if (pm_cluster_peer_failures(c, NULL, NULL, 0) <= 0)
        return; /* not in peer mode: the slots only, as before */
    pm_peer_info *p = calloc(MAXP, sizeof(*p));
    int n = p != NULL ? pm_cluster_peers(c, p, MAXP) : 0;
    pmd_sb_printf(b, ",\"peers\":[");
    for (int i = 0; i < n && i < MAXP; i++)
        pmd_sb_printf(b,
                      "%s{\"peer_host\":\"%s\",\"peer_state\":\"%s\",\"initiator\":%d,"
                      "\"peer_incarnation\":\"%llu\",\"rtt_us\":%lld,\"age_ms\":%llu,"
                      "\"frames_in\":%llu,\"frames_out\":%llu,\"bytes_in\":%llu,\"bytes_out\":%llu,"
                      "\"records_in\":%llu,\"records_out\":%llu}",
                      i ? "," : "", p[i].host, p[i].state, p[i].initiator,
                      (unsigned long long)p[i].incarnation, (long long)p[i].rtt_us,
                      (unsigned long long)p[i].age_ms, (unsigned long long)p[i].frames_in,
                      (unsigned long long)p[i].frames_out, (unsigned long long)p[i].bytes_in,
                      (unsigned long long)p[i].bytes_out, (unsigned long long)p[i].records_in,
                      (unsigned long long)p[i].records_out);
    free(p);
    const char *why[MAXR];
    uint64_t count[MAXR];
    int r = pm_cluster_peer_failures(c, why, count, MAXR);
    pmd_sb_printf(b, "],\"peer_failures\":{");
    for (int i = 0; i < r && i < MAXR; i++)
        pmd_sb_printf(b, "%s\"%s\":%llu", i ? "," : "", why[i], (unsigned long long)count[i]);
    pmd_sb_printf(b, "}");
}

size_t pmd_status_json(pm_cluster *c, int ready, int draining, char *buf, size_t size)
{
    pmd_sbuf b = {buf, size, 0};
    buf[0] = '\0';
    unsigned n = pm_cluster_slots(c);
    pmd_sb_printf(&b, "{\"ready\":%s,\"draining\":%s,", ready ? "true" : "false",
                  draining ? "true" : "false");
    /* How a slot's process tree is held (cgroup or process group), and the
     * detail in words; quotes and backslashes cannot come from procmesh's
     * own words but may from a path: replaced. */
    char detail[320];
    int mode = pm_cluster_containment(c, detail, sizeof(detail));
    for (char *p = detail; *p != '\0'; p++)
        if (*p == '"' || *p == '\\' || (unsigned char)*p < 0x20)
            *p = '?';
    pmd_sb_printf(&b, "\"containment\":\"%s\",\"containment_detail\":\"%s\",\"slots\":[",
                  mode == PM_CONTAIN_CGROUP ? "cgroup" : "process-group", mode > 0 ? detail : "");
    for (unsigned i = 0; i < n; i++) {
        pm_slot_info si;
        pm_cluster_slot_info(c, i, &si);
        const long long v[F_COUNT] = {
            [F_SLOT] = i,
            [F_STATE] = si.state,
            [F_PID] = si.pid,
            [F_INCARNATION] = (long long)si.incarnation,
            [F_RESTARTS] = si.restarts_total,
            [F_EXIT_CODE] = si.last_exit_code,
            [F_SIGNAL] = si.last_signal,
            [F_HB_AGE] = si.heartbeat_age_ms,
        };
        pmd_sb_printf(&b, "%s{", i ? "," : "");
        for (int f = 0; f < F_COUNT; f++) {
            pmd_sb_printf(&b, "%s\"%s\":", f ? "," : "", field_names[f]);
            if (f == F_STATE)
                pmd_sb_printf(&b, "\"%s\"", pm_slot_state_name((int)v[f]));
            else if (f == F_INCARNATION)
                pmd_sb_printf(&b, "\"%llu\"", (unsigned long long)si.incarnation);
            else
                pmd_sb_printf(&b, "%lld", v[f]);
        }
        crash_json(&b, &si.last_crash);
        pmd_sb_printf(&b, "}");
    }
    pmd_sb_printf(&b, "]");
    peers_json(&b, c);
    pmd_sb_printf(&b, "}\n");
    return b.len;
}

/* Reads the slot object at obj (which starts with '{') into v. 0, or -1
 * when a field is missing or malformed. */
static int read_slot(const char *obj, long long v[F_COUNT])
{
    const char *end = strchr(obj, '}');
    if (end == NULL)
        return -1;
    for (int f = 0; f < F_COUNT; f++) {
        char key[40];
        snprintf(key, sizeof(key), "\"%s\":", field_names[f]);
        const char *p = strstr(obj, key);
        if (p == NULL || p > end)
            return -1;
        p += strlen(key);
        if (f == F_STATE) {
            v[f] = -1;
            for (int s = 0; s <= PM_SLOT_STOPPING && v[f] < 0; s++) {
                const char *name = pm_slot_state_name(s);
                size_t len = strlen(name);
                if (p[0] == '"' && strncmp(p + 1, name, len) == 0 && p[1 + len] == '"')
                    v[f] = s;
            }
            if (v[f] < 0)
                return -1;
            continue;
        }
        char *e;
        if (f == F_INCARNATION && *p == '"')
            p++; /* a string of digits (an older procmesh wrote a number) */
        v[f] = strtoll(p, &e, 10);
        if (e == p || e > end)
            return -1;
    }
    return 0;
}

/* The string value of key in the slot object obj (up to its '}') into buf,
 * or "" when absent. */
static void read_string(const char *obj, const char *key, char *buf, size_t size)
{
    const char *end = strchr(obj, '}');
    char k[40];
    snprintf(k, sizeof(k), "\"%s\":\"", key);
    const char *p = strstr(obj, k);
    buf[0] = '\0';
    if (p == NULL || end == NULL || p > end)
        return;
    p += strlen(k);
    const char *q = strchr(p, '"');
    if (q == NULL || q > end)
        return;
    snprintf(buf, size, "%.*s", (int)(q - p), p);
}

/* "SEGV_MAPERR 0x0 check_crash+0x1234" for a recorded crash, the state's
 * name for another, "-" for none. */
static void crash_cell(const char *obj, char *buf, size_t size)
{
    char state[16], code[24], addr[24], pc[96];
    read_string(obj, "crash_state", state, sizeof(state));
    if (state[0] == '\0' || strcmp(state, "none") == 0) {
        snprintf(buf, size, "-");
        return;
    }
    if (strcmp(state, "recorded") != 0) {
        snprintf(buf, size, "(%s)", state);
        return;
    }
    read_string(obj, "crash_code", code, sizeof(code));
    read_string(obj, "crash_fault_addr", addr, sizeof(addr));
    read_string(obj, "crash_pc", pc, sizeof(pc));
    snprintf(buf, size, "%s %s %s", code, addr, pc);
}

/* The integer value of key in the object at obj (up to its '}'), or -1. */
static long long read_int(const char *obj, const char *key)
{
    const char *end = strchr(obj, '}');
    char k[40];
    snprintf(k, sizeof(k), "\"%s\":", key);
    const char *p = strstr(obj, k);
    if (p == NULL || end == NULL || p > end)
        return -1;
    return strtoll(p + strlen(k), NULL, 10);
}

/* The peers of /status as a second table (none outside peer mode). */
static void peers_print(FILE *out, const char *body)
{
    const char *key = "{\"peer_host\":";
    const char *p = strstr(body, key);
    if (p == NULL)
        return;
    fprintf(out, "\n%-16s %-10s %-20s %-10s %-21s %-21s %s\n", "PEER", "STATE", "INCARNATION",
            "RTT", "FRAMES IN/OUT", "RECORDS IN/OUT", "BYTES IN/OUT");
    for (; p != NULL; p = strstr(p + 1, key)) {
        char host[64], state[16], rtt[24], frames[48], records[48];
        read_string(p, "peer_host", host, sizeof(host));
        read_string(p, "peer_state", state, sizeof(state));
        long long us = read_int(p, "rtt_us");
        if (us < 0)
            snprintf(rtt, sizeof(rtt), "-");
        else
            snprintf(rtt, sizeof(rtt), "%.3fms", (double)us / 1000.0);
        snprintf(frames, sizeof(frames), "%lld/%lld", read_int(p, "frames_in"), read_int(p, "frames_out"));
        snprintf(records, sizeof(records), "%lld/%lld", read_int(p, "records_in"),
                 read_int(p, "records_out"));
        char inc[24];
        read_string(p, "peer_incarnation", inc, sizeof(inc));
        fprintf(out, "%-16s %-10s %-20s %-10s %-21s %-21s %lld/%lld\n", host[0] ? host : "-",
                state, inc[0] ? inc : "0", rtt, frames, records,
                read_int(p, "bytes_in"), read_int(p, "bytes_out"));
    }
}

int pmd_status_print(FILE *out, const char *body)
{
    int rows = 0;
    fprintf(out, "%-5s %-9s %-8s %-11s %-8s %-10s %-13s %s\n", "SLOT", "STATE", "PID",
            "INCARNATION", "RESTARTS", "LAST EXIT", "HEARTBEAT AGE", "LAST CRASH");
    char key[16];
    snprintf(key, sizeof(key), "{\"%s\":", field_names[F_SLOT]);
    for (const char *p = strstr(body, key); p != NULL; p = strstr(p + 1, key)) {
        long long v[F_COUNT];
        if (read_slot(p, v) < 0)
            continue;
        char last[32] = "-";
        if (v[F_SIGNAL] != 0)
            pmd_signal_name((int)v[F_SIGNAL], last, sizeof(last));
        else if (v[F_EXIT_CODE] >= 0)
            snprintf(last, sizeof(last), "exit %lld", v[F_EXIT_CODE]);
        char age[24] = "-", crash[160];
        if (v[F_HB_AGE] > 0) /* 0: no heartbeat (exec, notify before WATCHDOG=1) */
            snprintf(age, sizeof(age), "%.1fs", (double)v[F_HB_AGE] / 1000.0);
        crash_cell(p, crash, sizeof(crash));
        fprintf(out, "%-5lld %-9s %-8lld %-11lld %-8lld %-10s %-13s %s\n", v[F_SLOT],
                pm_slot_state_name((int)v[F_STATE]), v[F_PID], v[F_INCARNATION], v[F_RESTARTS],
                last, age, crash);
        rows++;
    }
    peers_print(out, body);
    return rows;
}
