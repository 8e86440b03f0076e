#!/bin/sh
# SPDX-License-Identifier: MIT
# under-load.sh - runs Check programs beside two busy loops pinned to the
# same CPU as the program, so the supervisor, its workers and the test get
# about a third of one CPU between them: a test that decides by how fast
# something ran rather than by the event it waits for fails here
# (doc/reliability.md, "Under load").
#
#   tests/under-load.sh [--runs N] [--cpu C] [--quota PCT] [PROGRAM...]
#
# --quota PCT also limits the program (the supervisor, its workers, the
# test) to PCT % of one CPU over every 100 ms, in a cpu cgroup of its own
# (cgroup v2 cpu.max, or v1 cpu.cfs_quota_us; root, and removed at the end):
# the supervisor's share is then both small and given in bursts.
#
# Run from the build directory. PROGRAM is a path such as tests/check_spare;
# without any, the programs about processes (the list below). Each program
# runs N times (default 1), one at a time, under nice; its log goes to
# tests/NAME.under-load.log. Prints PASS/FAIL/SKIP per run and a summary;
# exits 1 if any run failed. The busy loops are this script's children and
# end with it, however it ends.
set -u

runs=1
cpu=0
quota=
while [ $# -gt 0 ]; do
    case $1 in
    --runs) runs=$2; shift 2 ;;
    --cpu) cpu=$2; shift 2 ;;
    --quota) quota=$2; shift 2 ;;
    --) shift; break ;;
    -*) echo "under-load.sh: unknown option $1" >&2; exit 2 ;;
    *) break ;;
    esac
done
if [ $# -eq 0 ]; then
    set -- tests/check_spare tests/check_exec_ready tests/check_restart tests/check_spawn \
        tests/check_stop tests/check_output tests/check_liveness tests/check_crash \
        tests/check_request tests/check_api tests/check_tree tests/check_daemon \
        tests/check_daemon_api tests/check_pid1 tests/check_mesh3 tests/check_peerops
fi
if ! command -v taskset >/dev/null 2>&1; then
    echo "SKIP: under-load.sh needs taskset (util-linux)" >&2
    exit 77
fi

# The cgroup of --quota: made here, the program moved in by the shell that
# then execs it, removed at the end (empty by then: every test's processes
# are gone when its program exits).
cg=""
if [ -n "$quota" ]; then
    if [ -f /sys/fs/cgroup/cgroup.controllers ]; then
        cg=/sys/fs/cgroup/pm-under-load-$$
        mkdir "$cg" && echo "$((quota * 1000)) 100000" >"$cg/cpu.max" || cg=""
    elif [ -d /sys/fs/cgroup/cpu ]; then
        cg=/sys/fs/cgroup/cpu/pm-under-load-$$
        mkdir "$cg" && echo 100000 >"$cg/cpu.cfs_period_us" &&
            echo "$((quota * 1000))" >"$cg/cpu.cfs_quota_us" || cg=""
    fi
    if [ -z "$cg" ]; then
        echo "SKIP: under-load.sh --quota needs a writable cpu cgroup" >&2
        exit 77
    fi
fi

hogs=""
stop_hogs() {
    for h in $hogs; do kill "$h" 2>/dev/null; done
    for h in $hogs; do wait "$h" 2>/dev/null; done
    hogs=""
    if [ -n "$cg" ]; then
        rmdir "$cg" 2>/dev/null
        cg=""
    fi
}
trap 'stop_hogs' EXIT
trap 'stop_hogs; exit 130' INT TERM
for i in 1 2; do
    taskset -c "$cpu" sh -c 'while :; do :; done' &
    hogs="$hogs $!"
done

# What the suite's harness sets (Makefile.am, AM_TESTS_ENVIRONMENT).
CK_FORK=yes
CK_VERBOSITY=normal
PM_TEST_RUN=${PM_TEST_RUN:-$(pwd)}
ASAN_OPTIONS="handle_segv=0:handle_sigbus=0:handle_abort=0${ASAN_OPTIONS:+:$ASAN_OPTIONS}"
export CK_FORK CK_VERBOSITY PM_TEST_RUN ASAN_OPTIONS

failed=""
npass=0
nfail=0
nskip=0
for prog in "$@"; do
    if [ ! -x "$prog" ]; then
        echo "under-load.sh: $prog is not built (run make check first)" >&2
        failed="$failed $prog(missing)"
        nfail=$((nfail + 1))
        continue
    fi
    log="$prog.under-load.log"
    : >"$log"
    r=1
    while [ "$r" -le "$runs" ]; do
        t0=$(date +%s)
        echo "== run $r" >>"$log"
        if [ -n "$cg" ]; then
            nice -n 0 taskset -c "$cpu" sh -c 'echo $$ >"$1/cgroup.procs" && shift && exec "$@"' \
                sh "$cg" "$prog" >>"$log" 2>&1
        else
            nice -n 0 taskset -c "$cpu" "$prog" >>"$log" 2>&1
        fi
        rc=$?
        t=$(($(date +%s) - t0))
        case $rc in
        0) echo "PASS: $prog (run $r, ${t} s)"; npass=$((npass + 1)) ;;
        77) echo "SKIP: $prog (run $r)"; nskip=$((nskip + 1)) ;;
        *)
            echo "FAIL: $prog (run $r, exit $rc, ${t} s; $log)"
            grep -E ':[EF]:' "$log" | tail -5
            failed="$failed $prog"
            nfail=$((nfail + 1))
            ;;
        esac
        r=$((r + 1))
    done
done
stop_hogs
echo "under load${quota:+ (a ${quota} % CPU quota)}: $npass passed, $nfail failed, $nskip skipped${failed:+; failed:$failed}"
[ "$nfail" -eq 0 ]
