/* SPDX-License-Identifier: MIT */
/* main.c - pm-bench's entry: the usage, the subcommand table and the dispatch. */
#include "bench.h"

#include <stdio.h>
#include <string.h>

static const char usage[] =
    "usage: pm-bench ring [--frames N] [--size S] [--runs R] [--rounds K]\n"
    "       pm-bench restart [--rounds K] [--privileges on|off] [--row R] [--settle-ms S]\n"
    "       pm-bench spawn [--runs R] [--max N] [--row R]\n"
    "       pm-bench relay [--frames N] [--rounds K] [--runs R] [--pause-us P]\n"
    "       pm-bench lane [--frames N] [--size S] [--runs R] [--rounds K]\n"
    "       pm-bench daemon [--runs R]\n"
    "       pm-bench compare [--frames N] [--rounds K] [--runs R] [--quick] [--csv FILE]\n"
    "       pm-bench scale [--frames N] [--rounds K] [--runs R] [--max N] [--quick] [--csv FILE]\n"
    "       pm-bench bigcall [--rounds K]\n"
    "       pm-bench peer [--frames N] [--rounds K] [--quick]\n"
    "       pm-bench batch [--frames N] [--quick]\n"
    "\n"
    "  lane   direct lanes (issue 26): a stream of N frames of S bytes\n"
    "         (default 1000000 of 64) on a bare lane between two processes,\n"
    "         between two workers of a cluster (the lane brokered after 64\n"
    "         frames) and through the hub (lanes off); then K request/reply\n"
    "         round trips (default 20000) awake and parked, beside the hub's,\n"
    "         a pipe relay's, a direct pipe's and the bare ring's; then a\n"
    "         lane's set-up and tear-down; all in the same run.\n"
    "\n"
    "  ring   stream N frames of S bytes from one process to another over the\n"
    "         shared-memory ring, a pipe and a Unix socketpair (one write per\n"
    "         frame), then ping-pong K round trips over each (ring awake and\n"
    "         parked). Prints frames/s, MB/s, ratios and p50/p99 latencies.\n"
    "\n"
    "  --frames N   frames per stream run (default 2000000)\n"
    "  --size S     frame payload bytes, 1..65536 (default 64)\n"
    "  --runs R     stream runs per transport; the median is printed (default 3)\n"
    "  --rounds K   ping-pong round trips per transport (default 50000)\n"
    "\n"
    "  restart  crash-to-ready latency: SIGKILL a worker and time until its\n"
    "           replacement is ready (backoff 0), K rounds (default 300), fork\n"
    "           mode (also with a warm standby) and exec mode, 10 ms after each\n"
    "           ready, beside a bare fork+exit+wait (and fork+exec+wait)\n"
    "           baseline and the floor of any restart of this design (a child\n"
    "           killed, its death heard by pidfd, reaped, the replacement forked\n"
    "           or exec'd, ready through a shared page and an eventfd: no\n"
    "           procmesh), alone and with the replacement in a cgroup of its own\n"
    "           (joined by a write, or born in it in exec mode), and as a standby\n"
    "           (forked ahead, let go by an eventfd); fork mode with process\n"
    "           groups too. --privileges on: each mode also with the workers under\n"
    "           --user nobody and seccomp basic (when root and built with\n"
    "           libseccomp), in the same run. Under each procmesh row: the\n"
    "           p50 of its phases (kill->reaped, reaped->forked, forked->ready)\n"
    "           and the page faults and context switches per round. --row R:\n"
    "           only procmesh row R, no baseline (for strace -c): 1 fork mode,\n"
    "           2 warm standby, 3 standby + process group, 4-6 exec with process\n"
    "           group / cgroup / cgroup+limits, 7 fork mode + process group.\n"
    "           --settle-ms S: S ms from each ready to the next kill instead of 10\n"
    "           (0..10000). A crash that comes long after the last restart can\n"
    "           cost more: on a kernel whose cgroup2 is not mounted with\n"
    "           favordynmods, a fork-mode child's join of its cgroup waits for an\n"
    "           RCU grace period once no migration happened for some 10-20 ms\n"
    "           (doc/benchmarks.md, stop 62); try --settle-ms 100.\n"
    "  spawn    time for pm_cluster_spawn to bring N = 1, 8, 64 (and 256, 1024\n"
    "           with --max) workers to ready, median of R runs (default 5), fork\n"
    "           and exec mode, beside N bare forks (and fork+execs) that each\n"
    "           report over a pipe, and the same children each in a cgroup made\n"
    "           for it (the floor of containment), and those children\n"
    "           with a channel each as procmesh makes it (sealed memfd ring,\n"
    "           eventfd, doorbell and fd socket pairs, pidfd) and the cluster's\n"
    "           loop, each child dropping every such fd but its own and mapping\n"
    "           its ring (the floor of this design). Raises its soft RLIMIT_NOFILE\n"
    "           to the hard one.\n"
    "           --row 1: fork mode only, 2: exec mode only, no baseline.\n"
    "  relay    worker -> hub -> worker streams and round trips beside a relay\n"
    "           process over pipes and sockets; then min(K, 1500) requests,\n"
    "           each after a pause of P us (default 1000, 0 skips them), beside\n"
    "           the pipe relay with the same pauses; then the same requests as a\n"
    "           user writes them (a cluster of the options' defaults, main\n"
    "           blocked in pm_cluster_run(c, -1)) beside a user's pipe relay,\n"
    "           with a sleep before each request and with an absolute schedule.\n"
    "  compare  the same workloads side by side: relay stream (64 B and 4 KiB),\n"
    "           request/reply through a broker, crash-to-ready; procmesh fork\n"
    "           and exec mode, pipe and Unix-socket relay processes, Node.js\n"
    "           worker_threads and cluster (skipped without node on PATH);\n"
    "           medians of R runs (default 3), speed-up over each baseline.\n"
    "  scale    N = 2 .. 256 workers: ring stream (each to the next) and all\n"
    "           requesting from one: throughput, round trip, hub CPU per frame,\n"
    "           supervisor anonymous RSS and ring memory idle and after traffic;\n"
    "           spawn-to-ready for N up to 1024. --max N: no point above N\n"
    "           workers (2..1024), for a machine that others share.\n"
    "  --quick      tiny counts and one run: checks it works, measures nothing\n"
    "  --csv FILE   also append every figure to FILE as CSV\n"
    "  bigcall  a 16 MiB pm_cluster_call round trip to a fork-mode worker as a\n"
    "           sealed memfd each way, against the same bytes as 64 KiB frames\n"
    "           through the rings, K rounds of each interleaved (default 20).\n"
    "  peer     two supervisors (two processes) linked over loopback TCP:\n"
    "           request/reply p50/p99 (K round trips, default 20000) and\n"
    "           streams of N 64 B frames (default 500000) and N/8 4 KiB\n"
    "           frames, with ChaChaPoly and with a null cipher built into\n"
    "           pm-bench only, beside plain TCP between two processes; the\n"
    "           handshake (connect to link up; in memory); the link code's\n"
    "           CPU per frame in memory; idle CPU of the pair;\n"
    "           the load average before and after.\n"
    "\n"
    "  batch    N small inputs (default 100000, --quick 2000) through 2 and 8\n"
    "           fork-mode workers with pm_cluster_map, 1 % crashing their\n"
    "           worker: inputs/s, the time each crash costs the batch, exact\n"
    "           outcomes; beside one fork per input at the same concurrency\n"
    "           and Python's multiprocessing.Pool (skipped without python3).\n"
    "\n"
    "exit status: 0 done, 1 a measurement failed, 2 bad command line\n";

static const struct command {
    const char *name;
    unsigned options; /* OPT_* */
    bench_opts defaults;
    int (*run)(const bench_opts *o);
} commands[] = {
    {"ring", OPT_FRAMES | OPT_SIZE | OPT_RUNS | OPT_ROUNDS,
     {.frames = 2000000, .size = 64, .runs = 3, .rounds = 50000}, cmd_ring},
    {"lane", OPT_FRAMES | OPT_SIZE | OPT_RUNS | OPT_ROUNDS,
     {.frames = 1000000, .size = 64, .runs = 3, .rounds = 20000}, cmd_lane},
    {"restart", OPT_ROUNDS | OPT_PRIVILEGES | OPT_ROW | OPT_SETTLE, {.rounds = 300, .settle_ms = 10},
     cmd_restart},
    {"spawn", OPT_RUNS | OPT_MAX | OPT_ROW, {.runs = 5}, cmd_spawn},
    /* frames 0: each frame size has its own count. */
    {"relay", OPT_FRAMES | OPT_RUNS | OPT_ROUNDS | OPT_PAUSE,
     {.frames = 0, .runs = 3, .rounds = 20000, .pause_us = 1000},
     cmd_relay},
    /* daemon has always accepted --rounds, and ignores it. */
    {"daemon", OPT_RUNS | OPT_ROUNDS, {.runs = 3}, cmd_daemon},
    /* frames 0: each frame size has its own count; rounds: round trips,
     * the crash rounds are a tenth of them. */
    {"compare", OPT_FRAMES | OPT_RUNS | OPT_ROUNDS | OPT_QUICK | OPT_CSV,
     {.frames = 0, .runs = 3, .rounds = 5000}, cmd_compare},
    {"scale", OPT_FRAMES | OPT_RUNS | OPT_ROUNDS | OPT_MAX | OPT_QUICK | OPT_CSV,
     {.frames = 1000000, .runs = 3, .rounds = 20000}, cmd_scale},
    {"bigcall", OPT_ROUNDS, {.rounds = 20}, cmd_bigcall},
    {"peer", OPT_FRAMES | OPT_ROUNDS | OPT_QUICK | OPT_CSV, {.frames = 500000, .rounds = 20000}, cmd_peer},
    {"batch", OPT_FRAMES | OPT_QUICK, {.frames = 100000}, cmd_batch},
};

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "__worker") == 0)
        return worker_main();
    if (argc >= 2 && strcmp(argv[1], "__child") == 0)
        return child_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "__floor") == 0)
        return floor_child_main(argc, argv);
    if (argc >= 2 && strcmp(argv[1], "__compare") == 0)
        return compare_worker_main();
    if (argc < 2 || strcmp(argv[1], "--help") == 0 || strcmp(argv[1], "-h") == 0) {
        fputs(usage, argc < 2 ? stderr : stdout);
        return argc < 2 ? 2 : 0;
    }
    const struct command *cmd = NULL;
    for (size_t i = 0; i < PM__ARRAY_SIZE(commands); i++)
        if (strcmp(argv[1], commands[i].name) == 0)
            cmd = &commands[i];
    if (cmd == NULL) {
        fprintf(stderr,
                "pm-bench: unknown command '%s' (commands: ring, lane, restart, spawn, relay, daemon, compare, scale, bigcall, peer, batch)\n",
                argv[1]);
        return 2;
    }
    bench_opts o = cmd->defaults;
    int rc = parse_options(argc, argv, cmd->options, &o);
    if (rc != 0) {
        if (rc > 0)
            fputs(usage, stdout);
        return rc > 0 ? 0 : 2;
    }
    ssize_t k = readlink("/proc/self/exe", self_exe, sizeof(self_exe) - 1);
    if (k <= 0)
        die("readlink /proc/self/exe");
    self_exe[k] = '\0';
    return cmd->run(&o);
}
