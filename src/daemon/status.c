/* status.c - the slot status fields, written as /status JSON and read back
 * into the `procmesh status` table; see status.h. */
#define _GNU_SOURCE
#include "status.h"

#include <stdlib.h>
#include <string.h>

#include "log.h"
#include "sbuf.h"

/* The fields of one slot object, in order. All are integers but the state,
 * which is written as its name (pm_slot_state_name). */
enum field { F_SLOT, F_STATE, F_PID, F_INCARNATION, F_RESTARTS, F_EXIT_CODE, F_SIGNAL, F_HB_AGE,
             F_COUNT };
static const char *const field_names[F_COUNT] = {
    [F_SLOT] = "slot",         [F_STATE] = "state",
    [F_PID] = "pid",           [F_INCARNATION] = "incarnation",
    [F_RESTARTS] = "restarts", [F_EXIT_CODE] = "last_exit_code",
    [F_SIGNAL] = "last_signal", [F_HB_AGE] = "heartbeat_age_ms",
};

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
        /* incarnation is a uint64_t: beyond 2^63 restarts it would print
         * negative, which no slot lives to see. */
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
            else
                pmd_sb_printf(&b, "%lld", v[f]);
        }
        pmd_sb_printf(&b, "}");
    }
    pmd_sb_printf(&b, "]}\n");
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
        v[f] = strtoll(p, &e, 10);
        if (e == p || e > end)
            return -1;
    }
    return 0;
}

int pmd_status_print(FILE *out, const char *body)
{
    int rows = 0;
    fprintf(out, "%-5s %-9s %-8s %-11s %-8s %-10s %s\n", "SLOT", "STATE", "PID", "INCARNATION",
            "RESTARTS", "LAST EXIT", "HEARTBEAT AGE");
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
        fprintf(out, "%-5lld %-9s %-8lld %-11lld %-8lld %-10s %.1fs\n", v[F_SLOT],
                pm_slot_state_name((int)v[F_STATE]), v[F_PID], v[F_INCARNATION], v[F_RESTARTS],
                last, (double)v[F_HB_AGE] / 1000.0);
        rows++;
    }
    return rows;
}
