/* SPDX-License-Identifier: MIT */
/* parse-pool.c - untrusted input parsed in a pool of crash-isolated workers:
 * an input that crashes the parser costs one worker, never the caller.
 * Built and run by `make check`. */
#include <errno.h>
#include <procmesh.h>
#include <stdio.h>
#include <string.h>

/* ------------------------------------------------------------- the parser */

/* A deliberately fragile parser of commands such as "sum 1 2 3". Commands
 * are looked up by their first letter, and the bug is the missing check
 * for a letter with no handler: "zap ..." calls through a NULL pointer and
 * the process dies of SIGSEGV. Untrusted input finds bugs like this one. */
typedef int (*handler)(const char *args, char *out, size_t cap);

static int cmd_sum(const char *args, char *out, size_t cap)
{
    long total = 0, v;
    int used;
    while (sscanf(args, "%ld%n", &v, &used) == 1) {
        total += v;
        args += used;
    }
    return snprintf(out, cap, "%ld", total);
}

static int cmd_upper(const char *args, char *out, size_t cap)
{
    size_t n = 0;
    for (; args[n] != '\0' && n + 1 < cap; n++)
        out[n] = (char)(args[n] >= 'a' && args[n] <= 'z' ? args[n] - 32 : args[n]);
    out[n] = '\0';
    return (int)n;
}

static int cmd_len(const char *args, char *out, size_t cap)
{
    return snprintf(out, cap, "%zu", strlen(args));
}

static handler handlers[26] = {['s' - 'a'] = cmd_sum, ['u' - 'a'] = cmd_upper,
                               ['l' - 'a'] = cmd_len};

static int parse(const char *in, char *out, size_t cap)
{
    if (in[0] < 'a' || in[0] > 'z' || strchr(in, ' ') == NULL)
        return snprintf(out, cap, "error: not a command");
    return handlers[in[0] - 'a'](strchr(in, ' ') + 1, out, cap); /* the bug */
}

/* ------------------------------------------------------------- the worker */

static int worker(pm_node *node, void *arg)
{
    (void)arg;
    pm_node_ready(node);
    pm_message m;
    while (pm_node_recv(node, &m, -1) == 0) { /* until the stop request */
        if (m.kind != PM_MSG_REQUEST)
            continue;
        char in[256], out[256];
        size_t n = m.len < sizeof(in) - 1 ? m.len : sizeof(in) - 1;
        memcpy(in, m.data, n);
        in[n] = '\0';
        parse(in, out, sizeof(out)); /* a crash here costs this worker only */
        pm_node_reply(node, &m, out, strlen(out));
    }
    return 0;
}

/* ------------------------------------------------------------- the caller */

static int exited_slot = -1; /* the slot whose worker exited last */

static void on_event(pm_cluster *c, const pm_event *e, void *arg)
{
    (void)c;
    (void)arg;
    if (e->type == PM_EVENT_EXITED)
        exited_slot = (int)e->slot;
}

int main(void)
{
    static const char *const inputs[] = {
        "sum 1 2 3", "upper hello", "zap now", "len abcdef",
        "sum 40 2",  "zap again",   "upper still serving",
    };
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, 2);
    pm_options_set_bootstrap(o, worker, NULL);
    pm_options_set_on_event(o, on_event, NULL);
    pm_options_set_restart_min_backoff_ms(o, 50);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc < 0) {
        fprintf(stderr, "spawn: %s\n", pm_strerror(rc));
        return 1;
    }
    int good = 0, crashed = 0, failed = 0;
    for (size_t i = 0; i < sizeof(inputs) / sizeof(inputs[0]); i++) {
        const char *in = inputs[i];
        char out[256];
        size_t n;
        /* Any ready worker; the loop keeps supervising while we wait. */
        rc = pm_cluster_call(c, NULL, in, strlen(in), 2000, out, sizeof(out), &n);
        if (rc == 0) {
            printf("%-20s -> %.*s\n", in, (int)n, out);
            good++;
        } else if (rc == -EHOSTDOWN && exited_slot >= 0) {
            /* The worker died holding this input; it is not retried on
             * another. Its crash report says where it died: the fault
             * address, the signal's code, and the frames as module+offset
             * for addr2line. */
            pm_slot_info si;
            pm_cluster_slot_info(c, (unsigned)exited_slot, &si);
            const pm_crash_report *cr = &si.last_crash;
            printf("%-20s -> worker crashed (%s): slot %d, signal %d", in, pm_strerror(rc),
                   exited_slot, si.last_signal);
            if (cr->state == PM_CRASH_RECORDED) {
                printf(" %s at 0x%llx", cr->code_name, (unsigned long long)cr->fault_addr);
                if (cr->nframes > 0 && cr->frames[0].module >= 0)
                    printf(", in %s+0x%llx", cr->modules[cr->frames[0].module],
                           (unsigned long long)cr->frames[0].offset);
            }
            printf("; restarting\n");
            crashed++;
            exited_slot = -1;
        } else if (rc == -EINTR) {
            break; /* SIGTERM or SIGINT: stop serving */
        } else {
            printf("%-20s -> %s\n", in, pm_strerror(rc));
            failed++;
        }
    }
    printf("%d answered, %d crashed a worker, %d failed otherwise\n", good, crashed, failed);
    pm_cluster_terminate(c);
    pm_options_free(o);
    return good == 5 && crashed == 2 && failed == 0 ? 0 : 1;
}
