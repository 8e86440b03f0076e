/* SPDX-License-Identifier: MIT */
/*
 * batch.c - pm-bench batch: N small inputs (default 100,000) through a pool
 * of W = 2 and 8 fork-mode workers with pm_cluster_map, 1 % of them
 * crashing their worker (SIGSEGV): inputs/s, the wall-clock time each
 * crash costs the batch (against the same batch without crashes), and
 * whether every outcome was exact (answers right, each crash blamed on its
 * own input and no other). Beside it: the same batch with one fork per
 * input at the same concurrency (forkeach.c), and Python's
 * multiprocessing.Pool (skipped with a line without python3), which loses
 * a crashed input's task and can only report it as a timeout.
 */
#define _GNU_SOURCE
#include "bench.h"

#include <signal.h>
#include <stdlib.h>
#include <string.h>

size_t batch_answer(const char *in, char *out, size_t cap)
{
    long v = strtol(in + 2, NULL, 10);
    int k = snprintf(out, cap, "%ld", v * 2);
    return k < 0 ? 0 : (size_t)k;
}

static int batch_worker(pm_node *n, void *arg)
{
    (void)arg;
    pm_node_ready(n);
    pm_message m;
    while (pm_node_recv(n, &m, -1) == 0) {
        if (m.kind != PM_MSG_REQUEST)
            continue;
        char in[32], out[32];
        size_t len = m.len < sizeof(in) - 1 ? m.len : sizeof(in) - 1;
        memcpy(in, m.data, len);
        in[len] = '\0';
        if (strcmp(in, "crash") == 0)
            raise(SIGSEGV);
        pm_node_reply(n, &m, out, batch_answer(in, out, sizeof(out)));
    }
    return 0;
}

/* The inputs: "n:K", every 100th "crash" when crashing. */
static char **make_inputs(size_t n, int crashing, size_t *ncrash)
{
    char **v = calloc(n, sizeof(*v));
    if (v == NULL)
        die("calloc");
    *ncrash = 0;
    for (size_t i = 0; i < n; i++) {
        if (crashing && i % 100 == 99) {
            v[i] = strdup("crash");
            (*ncrash)++;
        } else if (asprintf(&v[i], "n:%zu", i) < 0) {
            v[i] = NULL;
        }
        if (v[i] == NULL)
            die("input");
    }
    return v;
}

static void free_inputs(char **v, size_t n)
{
    for (size_t i = 0; i < n; i++)
        free(v[i]);
    free(v);
}

/* One pm_cluster_map of the inputs through W workers: seconds, and the
 * outcomes that were not exact in *wrong. */
static double procmesh_batch(char **inputs, size_t n, unsigned w, size_t *wrong)
{
    pm_options *o = pm_options_new();
    pm_options_set_workers(o, (int)w);
    pm_options_set_bootstrap(o, batch_worker, NULL);
    pm_options_set_handle_signals(o, 0);
    pm_options_set_ring_size(o, 256 * 1024);
    pm_cluster *c;
    if (pm_cluster_spawn(o, &c) < 0)
        die("pm_cluster_spawn");
    pm_options_free(o);
    pm_map_input *in = calloc(n, sizeof(*in));
    pm_map_result *res = calloc(n, sizeof(*res));
    if (in == NULL || res == NULL)
        die("calloc");
    for (size_t i = 0; i < n; i++) {
        in[i].data = inputs[i];
        in[i].len = strlen(inputs[i]);
    }
    uint64_t t0 = pm__now_ns();
    long answered = pm_cluster_map(c, in, n, 10000, res);
    uint64_t t1 = pm__now_ns();
    if (answered < 0)
        die("pm_cluster_map");
    *wrong = 0;
    for (size_t i = 0; i < n; i++) {
        if (strcmp(inputs[i], "crash") == 0) {
            if (res[i].error != -EHOSTDOWN || res[i].outcome == NULL ||
                res[i].outcome->signal != SIGSEGV)
                (*wrong)++;
            continue;
        }
        char want[32];
        size_t wn = batch_answer(inputs[i], want, sizeof(want));
        if (res[i].error != 0 || res[i].len != wn || memcmp(res[i].reply, want, wn) != 0)
            (*wrong)++;
    }
    pm_map_results_free(res, n);
    free(res);
    free(in);
    pm_cluster_terminate(c);
    return (double)(t1 - t0) / 1e9;
}

/* Python's multiprocessing.Pool on the same inputs: a task whose worker
 * died is lost (the pool replaces the process, never answers the task),
 * so it is counted when nothing completed for 2 s. Prints "rate ok lost". */
static const char *const python_script =
    "import sys, os, signal, time, multiprocessing as mp\n"
    "def work(s):\n"
    "    if s == 'crash': os.kill(os.getpid(), signal.SIGSEGV)\n"
    "    return str(int(s[2:]) * 2)\n"
    "if __name__ == '__main__':\n"
    "    n, w = int(sys.argv[1]), int(sys.argv[2])\n"
    "    ins = ['crash' if i % 100 == 99 else 'n:%d' % i for i in range(n)]\n"
    "    last = [time.monotonic()]\n"
    "    def done(_): last[0] = time.monotonic()\n"
    "    t0 = time.monotonic(); ok = lost = 0\n"
    "    with mp.Pool(w) as p:\n"
    "        rs = [p.apply_async(work, (s,), callback=done) for s in ins]\n"
    "        for s, r in zip(ins, rs):\n"
    "            while True:\n"
    "                try:\n"
    "                    v = r.get(timeout=0.05); ok += v == str(int(s[2:]) * 2); break\n"
    "                except mp.TimeoutError:\n"
    "                    if time.monotonic() - last[0] > 2.0: lost += 1; break\n"
    "        t = time.monotonic() - t0\n"
    "    print('%.0f %d %d %.2f' % (n / t, ok, lost, t))\n";

static void python_batch(size_t n, unsigned w)
{
    if (system("command -v python3 >/dev/null 2>&1") != 0) {
        printf("  python multiprocessing.Pool  skipped: python3 not on PATH\n");
        return;
    }
    char path[] = "/tmp/pm-bench-batch-XXXXXX.py";
    int fd = mkstemps(path, 3);
    if (fd < 0 || write_all(fd, python_script, strlen(python_script)) < 0)
        die("python script");
    close(fd);
    char cmd[256];
    snprintf(cmd, sizeof(cmd), "python3 %s %zu %u", path, n, w);
    FILE *f = popen(cmd, "r");
    double rate = 0, t = 0;
    unsigned long ok = 0, lost = 0;
    int got = f != NULL ? fscanf(f, "%lf %lu %lu %lf", &rate, &ok, &lost, &t) : 0;
    if (f != NULL)
        pclose(f);
    unlink(path);
    if (got != 4) {
        printf("  python multiprocessing.Pool  failed to run\n");
        return;
    }
    printf("  python multiprocessing.Pool  %10.0f inputs/s  %zu answered, %lu crashed inputs seen "
           "only as a 2 s silence (no signal, no worker)\n", rate, (size_t)ok, lost);
}

static void print_load(const char *when)
{
    double la[3];
    if (getloadavg(la, 3) == 3)
        printf("load average %s: %.2f %.2f %.2f\n", when, la[0], la[1], la[2]);
}

int cmd_batch(const bench_opts *opts)
{
    size_t n = opts->quick ? 2000 : (size_t)opts->frames;
    static const unsigned ws[] = {2, 8};
    size_t ncrash, nclean;
    char **crashing = make_inputs(n, 1, &ncrash);
    char **clean = make_inputs(n, 0, &nclean);
    printf("batch: %zu inputs, %zu (1 %%) crash their worker (SIGSEGV); %ld CPUs\n", n, ncrash,
           sysconf(_SC_NPROCESSORS_ONLN));
    print_load("before");
    int status = 0;
    for (size_t k = 0; k < PM__ARRAY_SIZE(ws); k++) {
        unsigned w = ws[k];
        size_t wrong = 0, wrong0 = 0, wrongf = 0;
        double t0 = procmesh_batch(clean, n, w, &wrong0);
        double t1 = procmesh_batch(crashing, n, w, &wrong);
        uint64_t f0 = pm__now_ns();
        int fr = forkeach_batch((const char *const *)crashing, n, w, &wrongf);
        double tf = (double)(pm__now_ns() - f0) / 1e9;
        printf("W = %u workers\n", w);
        printf("  procmesh pm_cluster_map      %10.0f inputs/s  (%.0f without crashes); "
               "each crash costs the batch %.3f ms; outcomes exact: %s\n",
               (double)n / t1, (double)n / t0, (t1 - t0) * 1e3 / (double)ncrash,
               wrong + wrong0 == 0 ? "all" : "NO");
        printf("  fork per input               %10.0f inputs/s  outcomes exact: %s\n",
               (double)n / tf, fr == 0 ? "all" : "NO");
        printf("  procmesh / fork per input    %10.1fx\n", tf / t1);
        python_batch(n, w);
        if (wrong + wrong0 + wrongf != 0)
            status = 1;
    }
    print_load("after");
    free_inputs(crashing, n);
    free_inputs(clean, n);
    return status;
}
