/* SPDX-License-Identifier: MIT */
/* parse-pool.c - untrusted input parsed in parallel in a pool of
 * crash-isolated workers, one call for the whole batch: an input that
 * crashes, aborts, hangs or exits its parser costs one worker for a moment
 * and gets the blame, exactly; every other input gets its answer. Built
 * and run by `make check`, which checks every outcome. */
#include <errno.h>
#include <procmesh.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

/* ------------------------------------------------------------- the parser */

/* A deliberately fragile parser of commands such as "sum 1 2 3". Commands
 * are looked up by their first letter, and the bug is the missing check
 * for a letter with no handler: "zap ..." calls through a NULL pointer and
 * the process dies of SIGSEGV. Three more bugs of the kind untrusted input
 * finds: "assert ..." trips an assertion (abort), "wait ..." loops forever
 * on input it never consumes, "quit ..." exits in the middle of a parse. */
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

static int cmd_assert(const char *args, char *out, size_t cap)
{
    (void)out;
    (void)cap;
    if (args[0] != '\0')
        abort(); /* "cannot happen" */
    return 0;
}

static int cmd_wait(const char *args, char *out, size_t cap)
{
    (void)out;
    (void)cap;
    for (volatile const char *p = args; *p != '\0';)
        ; /* forgets to advance p */
    return 0;
}

static int cmd_quit(const char *args, char *out, size_t cap)
{
    (void)args;
    (void)out;
    (void)cap;
    exit(3); /* a library that exits on bad input */
}

static handler handlers[26] = {['s' - 'a'] = cmd_sum,    ['u' - 'a'] = cmd_upper,
                               ['l' - 'a'] = cmd_len,    ['a' - 'a'] = cmd_assert,
                               ['w' - 'a'] = cmd_wait,   ['q' - 'a'] = cmd_quit};

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

/* One input and what must become of it. */
struct input {
    const char *text;
    const char *answer; /* NULL: it must fail */
    int error;          /* the error it must get */
    int signal;         /* -EHOSTDOWN: the signal that ended its worker (0: exit) */
};

static const struct input inputs[] = {
    {"sum 1 2 3", "6", 0, 0},           {"upper hello", "HELLO", 0, 0},
    {"zap now", NULL, -EHOSTDOWN, SIGSEGV}, {"len abcdef", "6", 0, 0},
    {"assert x", NULL, -EHOSTDOWN, SIGABRT}, {"sum 40 2", "42", 0, 0},
    {"wait forever", NULL, -ETIMEDOUT, 0}, {"upper still serving", "STILL SERVING", 0, 0},
    {"quit now", NULL, -EHOSTDOWN, 0},     {"len x", "1", 0, 0},
    {"sum 5", "5", 0, 0},                  {"upper done", "DONE", 0, 0},
};
#define NINPUTS (sizeof(inputs) / sizeof(inputs[0]))

/* Prints one outcome; 1 when it is the one expected. */
static int report(const struct input *want, const pm_map_result *r)
{
    if (r->error == 0) {
        printf("%-20s -> %.*s\n", want->text, (int)r->len, (const char *)r->reply);
        return want->answer != NULL && r->len == strlen(want->answer) &&
               memcmp(r->reply, want->answer, r->len) == 0;
    }
    const pm_request_outcome *oc = r->outcome;
    printf("%-20s -> %s", want->text, pm_strerror(r->error));
    if (oc != NULL && oc->ended) {
        /* Which worker, and how it ended: for this input and no other. */
        char who[PM_ADDRESS_STRLEN];
        pm_address_format(&oc->worker, who, sizeof(who));
        if (oc->signal != 0)
            printf(": %s died of signal %d", who, oc->signal);
        else
            printf(": %s exited with code %d", who, oc->exit_code);
        const pm_crash_report *cr = &oc->crash;
        if (cr->state == PM_CRASH_RECORDED) {
            printf(", %s at 0x%llx", cr->code_name, (unsigned long long)cr->fault_addr);
            /* frames[0] is the faulting pc; a call through a bad pointer
             * faults at an address in no module, and frames[1] is then
             * the return address in the function that made the call. */
            const pm_crash_frame *f = cr->nframes > 0 ? &cr->frames[0] : NULL;
            const char *where = " in";
            if (f != NULL && f->module < 0 && cr->nframes > 1) {
                printf(" (pc 0x%llx)", (unsigned long long)f->addr);
                where = ", called from";
                f++;
            }
            if (f != NULL && f->module >= 0)
                printf("%s %s+0x%llx", where, cr->modules[f->module],
                       (unsigned long long)f->offset);
        }
    } else if (oc != NULL && oc->killed) {
        printf(": its worker was killed");
    }
    printf("\n");
    if (r->error != want->error || want->answer != NULL || oc == NULL)
        return 0;
    if (r->error == -EHOSTDOWN)
        return oc->ended && oc->signal == want->signal &&
               (want->signal != 0 || oc->exit_code == 3);
    return oc->killed; /* -ETIMEDOUT: killed at once, kill_on_timeout */
}

int main(void)
{
    pm_options *o = pm_options_new();
    if (o == NULL)
        return 1;
    pm_options_set_workers(o, 4);
    pm_options_set_bootstrap(o, worker, NULL);
    /* A hung parse is killed at its deadline and its worker replaced (the
     * gunicorn rule), instead of holding the worker until the heartbeat. */
    pm_options_set_kill_on_timeout(o, 1);
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    pm_options_free(o);
    if (rc < 0) {
        fprintf(stderr, "spawn: %s\n", pm_strerror(rc));
        return 1;
    }
    pm_map_input in[NINPUTS];
    pm_map_result out[NINPUTS];
    for (size_t i = 0; i < NINPUTS; i++) {
        in[i].data = inputs[i].text;
        in[i].len = strlen(inputs[i].text);
    }
    /* The whole batch, 2 s per input; outcomes in input order. */
    long answered = pm_cluster_map(c, in, NINPUTS, 2000, out);
    if (answered < 0) {
        fprintf(stderr, "map: %s\n", pm_strerror((int)answered));
        pm_cluster_terminate(c);
        return 1;
    }
    int exact = 0;
    for (size_t i = 0; i < NINPUTS; i++)
        exact += report(&inputs[i], &out[i]);
    pm_map_results_free(out, NINPUTS);
    printf("%ld answered, %zu failed, %d of %zu outcomes as expected\n", answered,
           NINPUTS - (size_t)answered, exact, NINPUTS);
    pm_cluster_terminate(c);
    return exact == (int)NINPUTS ? 0 : 1;
}
