#!/bin/sh
# SPDX-License-Identifier: MIT
# bench-smoke.sh - pm-bench compare, batch, lane, scale and peer run end to end (--quick: tiny
# counts, one run) and print every table line; without node on PATH the
# Node.js rows are replaced by the skip line. Checks that the tools work,
# never how fast anything is. Exit: 0 pass, 1 fail.
set -u
bench=${PM_BUILD_DIR:-.}/tools/pm-bench
out=$(mktemp)
trap 'rm -f "$out"' EXIT
status=0

# Each line must appear in the output of the command just run.
expect() {
    for line in "$@"; do
        if ! grep -q -e "$line" "$out"; then
            echo "FAIL: '$what' printed no line matching '$line'" >&2
            status=1
        fi
    done
}

# A bound, not a timing: a hung benchmark fails here instead of hanging make check.
what="pm-bench compare --quick"
if ! timeout 120 "$bench" compare --quick --csv "$out.csv" >"$out" 2>&1; then
    echo "FAIL: $what exited with an error" >&2
    status=1
fi
cat "$out"
expect '^relay stream, 64 B' '^relay stream, 4096 B' '^request/reply round trip' \
    '^crash-to-replacement-ready' '^  procmesh fork  *[0-9]' '^  procmesh exec  *[0-9]' \
    '^  pipes relay  *[0-9]' '^  unix relay  *[0-9]' '^  fork+exit+wait  *[0-9]'
if command -v node >/dev/null 2>&1 && [ "${PM_BENCH_NODE-unset}" != "" ]; then
    expect '^  node worker_threads  *[0-9]' '^  node cluster  *[0-9]'
else
    expect '^node: skipped: node not on PATH' '^  node cluster  *skipped'
fi
if ! grep -q '^compare,stream,64,procmesh fork,frames_per_s,' "$out.csv"; then
    echo "FAIL: $what --csv wrote no procmesh stream row" >&2
    status=1
fi
if ! grep -q '^compare,crash,0,procmesh fork standby,p50_ns,' "$out.csv"; then
    echo "FAIL: $what --csv wrote no warm-standby crash row" >&2
    status=1
fi
rm -f "$out.csv"

what="pm-bench lane --frames 2000 --runs 1 --rounds 200"
if ! timeout 120 "$bench" lane --frames 2000 --runs 1 --rounds 200 >"$out" 2>&1; then
    echo "FAIL: $what exited with an error (frames lost, reordered or refused)" >&2
    status=1
fi
cat "$out"
expect '^  lane  *[0-9]' '^  through the hub  *[0-9]' '^  lane awake  *[0-9]' \
    '^  lane parked  *[0-9]' '^  hub parked  *[0-9]' '^  pipe direct  *[0-9]' \
    '^  lanes: ready  *[0-9]' '^  lanes off: first answer  *[0-9]'

what="pm-bench batch --frames 300"
if ! timeout 300 "$bench" batch --frames 300 >"$out" 2>&1; then
    echo "FAIL: $what exited with an error (or an outcome was not exact)" >&2
    status=1
fi
cat "$out"
expect '^  procmesh pm_cluster_map  *[0-9].*outcomes exact: all' '^  fork per input  *[0-9].*exact: all' \
    '^  procmesh / fork per input'
if command -v python3 >/dev/null 2>&1; then
    expect '^  python multiprocessing.Pool  *[0-9]'
else
    expect '^  python multiprocessing.Pool  skipped'
fi

what="pm-bench scale --quick"
if ! timeout 120 "$bench" scale --quick >"$out" 2>&1; then
    echo "FAIL: $what exited with an error" >&2
    status=1
fi
cat "$out"
expect '^  *2  *[0-9][0-9]*  ' '^  *4  *[0-9][0-9]*  ' '^spawn-to-ready' '^  *8  *[0-9.]*  *[0-9.]*$'

what="pm-bench peer --quick"
if ! timeout 120 "$bench" peer --quick >"$out" 2>&1; then
    echo "FAIL: $what exited with an error" >&2
    status=1
fi
cat "$out"
expect '^load average at start: ' '^request/reply round trip' '^  procmesh chachapoly  *[0-9]' \
    '^  procmesh null cipher  *[0-9]' '^  tcp ping-pong  *[0-9]' '^stream, 64 B' '^stream, 4096 B' \
    '^  tcp stream  *[0-9]' '^  CPU ns per frame' '^  XXpsk3 over TCP  *[0-9]' '^  XXpsk3 in memory, CPU  *[0-9]' '^idle linked pair' '^load average at end: '
what="pm-bench restart --rounds 3 --row 1 --settle-ms 0"
if ! timeout 120 "$bench" restart --rounds 3 --row 1 --settle-ms 0 >"$out" 2>&1; then
    echo "FAIL: $what exited with an error" >&2
    status=1
fi
cat "$out"
expect '^restart: crash-to-ready latency, 3 rounds, backoff 0, 0 ms from ready to kill' \
    '^  procmesh fork mode  *[0-9]' '^    phases p50 ms: kill->reaped'

# A bad value is refused by name, and nothing runs.
what="pm-bench restart --settle-ms 10001"
if timeout 20 "$bench" restart --settle-ms 10001 >"$out" 2>&1; then
    echo "FAIL: $what was accepted" >&2
    status=1
fi
expect "^pm-bench: --settle-ms: '10001' is not a whole number in 0..10000"
exit "$status"
