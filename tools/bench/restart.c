/* SPDX-License-Identifier: MIT */
/* restart.c - pm-bench restart: crash-to-ready latency of a worker beside a bare fork+exit+wait. */
#include "bench.h"

#include <errno.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/wait.h>

#include "seccomp_filter.h"

#define NOBODY 65534

static void print_lat(const char *name, uint64_t *v, size_t n, uint64_t base_p50)
{
    sort_u64(v, n);
    uint64_t p50 = percentile(v, n, 0.5), p99 = percentile(v, n, 0.99);
    char ratio[32];
    format_ratio(ratio, sizeof(ratio), p50, base_p50, 2);
    printf("  %-34s %10.3f %10.3f %14s\n", name, (double)p50 / 1e6, (double)p99 / 1e6, ratio);
}

/* Bare fork + _exit + waitpid (or fork + exec + wait): the floor of any
 * restart, measured the same way. */
void restart_baseline(int exec_mode, unsigned rounds, uint64_t *v)
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

/* K crash-to-ready rounds of a one-worker cluster spawned with o. 0, 1,
 * or -EOPNOTSUPP when o asks for a containment this host cannot give. */
int restart_rounds(pm_options *o, unsigned rounds, uint64_t *v)
{
    pm_cluster *c;
    int rc = pm_cluster_spawn(o, &c);
    if (rc == -EOPNOTSUPP)
        return rc; /* this containment is not available on this host */
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
                pm_cluster_terminate(c);
                return 1;
            }
        }
        v[i] = pm__now_ns() - t0;
    }
    pm_cluster_terminate(c);
    return 0;
}

/* --privileges on: the workers under nobody (root only) and seccomp basic
 * (built with libseccomp only); appended to label: which applied. */
static void privileged(pm_options *o, char *label, size_t size)
{
    int user = geteuid() == 0 && pm_options_set_user(o, NOBODY, NOBODY) == 0;
    int sc = pm__seccomp_available() && pm_options_set_seccomp(o, PM_SECCOMP_BASIC) == 0;
    size_t n = strlen(label);
    snprintf(label + n, size - n, " %s%s%s", user ? "+user" : "", sc ? "+seccomp" : "",
             user || sc ? "" : "(none: not root, no libseccomp)");
}

int cmd_restart(const bench_opts *opts)
{
    unsigned rounds = opts->rounds;
    print_machine();
    printf("restart: crash-to-ready latency, %u rounds, backoff 0 (ms)\n", rounds);
    printf("  %-34s %10s %10s %14s\n", "what", "p50 ms", "p99 ms", "vs baseline");
    uint64_t *v = calloc(rounds, sizeof(*v)), *b = calloc(rounds, sizeof(*b));
    /* Rows: fork mode; exec mode with containment off (process group),
     * on (its cgroup), on with limits (memory and pids: on hybrid hosts the
     * v1 cgroups are joined too), all in the same run; with --privileges on
     * each also under nobody and seccomp basic. A row whose containment
     * this host cannot give is said and skipped. */
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
            restart_baseline(exec_mode, rounds, b);
            print_lat(exec_mode ? "baseline fork+exec+wait" : "baseline fork+exit+wait", b, rounds, 0);
            base = percentile(b, rounds, 0.5);
        }
        for (int priv = 0; priv <= opts->privileges; priv++) {
            char label[64];
            pm_options *o = bench_options(1, exec_mode);
            pm_options_set_containment(o, rows[r].containment);
            if (rows[r].limits) {
                pm_options_set_memory_max(o, 1ull << 30);
                pm_options_set_pids_max(o, 1024);
            }
            snprintf(label, sizeof(label), "%s", rows[r].name);
            if (priv)
                privileged(o, label, sizeof(label));
            int rc = restart_rounds(o, rounds, v);
            pm_options_free(o);
            if (rc == -EOPNOTSUPP) {
                printf("  %-34s (not available here)\n", label);
                continue;
            }
            if (rc != 0)
                return rc;
            print_lat(label, v, rounds, base);
        }
    }
    free(v);
    free(b);
    return 0;
}
