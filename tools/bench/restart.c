/* restart.c - pm-bench restart: crash-to-ready latency of a worker beside a bare fork+exit+wait. */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <sys/wait.h>

static void print_lat(const char *name, uint64_t *v, size_t n, uint64_t base_p50)
{
    sort_u64(v, n);
    uint64_t p50 = percentile(v, n, 0.5), p99 = percentile(v, n, 0.99);
    char ratio[32];
    format_ratio(ratio, sizeof(ratio), p50, base_p50, 2);
    printf("  %-26s %10.3f %10.3f %14s\n", name, (double)p50 / 1e6, (double)p99 / 1e6, ratio);
}

/* Bare fork + _exit + waitpid (or fork + exec + wait): the floor of any
 * restart, measured the same way. */
static void baseline_restart(int exec_mode, unsigned rounds, uint64_t *v)
{
    for (unsigned i = 0; i < rounds; i++) {
        uint64_t t0 = pm__now_ns();
        pid_t pid = fork();
        if (pid == 0) {
            if (exec_mode) {
                char *argv[] = {"pm-bench", "__child", NULL};
                execv(self_exe, argv);
            }
            _exit(0);
        }
        waitpid(pid, NULL, 0);
        v[i] = pm__now_ns() - t0;
    }
}

int cmd_restart(const bench_opts *opts)
{
    unsigned rounds = opts->rounds;
    print_machine();
    printf("restart: crash-to-ready latency, %u rounds, backoff 0 (ms)\n", rounds);
    printf("  %-26s %10s %10s %14s\n", "what", "p50 ms", "p99 ms", "vs baseline");
    uint64_t *v = calloc(rounds, sizeof(*v)), *b = calloc(rounds, sizeof(*b));
    /* Rows: fork mode; exec mode with containment off (process group),
     * on (its cgroup), on with limits (memory and pids: on hybrid hosts the
     * v1 cgroups are joined too), all in the same run. A row whose
     * containment this host cannot give is said and skipped. */
    static const struct {
        int exec_mode, containment, limits;
        const char *name;
    } rows[] = {
        {0, 0, 0, "procmesh fork mode"},
        {1, PM_CONTAIN_PROCESS_GROUP, 0, "exec, process group"},
        {1, PM_CONTAIN_CGROUP, 0, "exec, cgroup"},
        {1, PM_CONTAIN_CGROUP, 1, "exec, cgroup+limits"},
    };
    uint64_t base = 0;
    for (size_t r = 0; r < sizeof(rows) / sizeof(rows[0]); r++) {
        int exec_mode = rows[r].exec_mode;
        if (r < 2) {
            baseline_restart(exec_mode, rounds, b);
            print_lat(exec_mode ? "baseline fork+exec+wait" : "baseline fork+exit+wait", b, rounds, 0);
            base = percentile(b, rounds, 0.5);
        }
        pm_options *o = bench_options(1, exec_mode);
        pm_options_set_containment(o, rows[r].containment);
        if (rows[r].limits) {
            pm_options_set_memory_max(o, 1ull << 30);
            pm_options_set_pids_max(o, 1024);
        }
        pm_cluster *c;
        int rc = pm_cluster_spawn(o, &c);
        if (rc == -EOPNOTSUPP) {
            printf("  %-26s (not available here)\n", rows[r].name);
            pm_options_free(o);
            continue;
        }
        if (rc < 0) {
            fprintf(stderr, "pm-bench: spawn: %s\n", pm_strerror(rc));
            return 1;
        }
        for (unsigned i = 0; i < rounds; i++) {
            pm_slot_info si;
            pm_cluster_slot_info(c, 0, &si);
            uint64_t want = si.incarnation + 1;
            uint64_t t0 = pm__now_ns();
            kill(si.pid, SIGKILL);
            while (ready_inc != want) {
                if (pm_cluster_run(c, 1000) < 0 || pm__now_ns() - t0 > 10000000000ull) {
                    fprintf(stderr, "pm-bench: no replacement became ready\n");
                    return 1;
                }
            }
            v[i] = pm__now_ns() - t0;
        }
        pm_cluster_terminate(c);
        pm_options_free(o);
        print_lat(rows[r].name, v, rounds, base);
    }
    free(v);
    free(b);
    return 0;
}
