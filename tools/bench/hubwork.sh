#!/bin/sh
# SPDX-License-Identifier: MIT
# hubwork.sh - the hub's instructions and cache misses per relayed frame vs N, counted by callgrind.
#
#   tools/bench/hubwork.sh [--frames F] [--max N] [--annotate K] [--keep DIR]
#
# Runs `pm-bench scale --runs 1` under valgrind --tool=callgrind with the
# instrumentation off at start: scale.c turns it on in the supervisor around
# each N's stream phase only and dumps one profile per N (its description
# names N and the frames relayed), so neither the start-up, the spawn, the
# forked workers (valgrind follows the fork, but they inherit "off") nor the
# other phases are counted. Instruction counts do not depend on the load of
# the machine; the time the workers take does, and with it how many frames
# the hub finds per wake-up, so Ir/frame still moves a little from run to run.
#
# Prints: N | frames | hub Ir/frame | D1 misses/frame | LL misses/frame, from
# callgrind's cache simulation: D1 = D1mr + D1mw, LL = ILmr + DLmr + DLmw.
# Callgrind counts user-space instructions only (the kernel's side of the
# hub's system calls is not in Ir), and simulates only the hub's own
# accesses (the workers' writes to the rings do not evict its lines).
#
# The LL cache simulated is 32 MiB, 16-way (one Zen 4 CCD's L3, this VM's
# CPU), or $PM_HUBWORK_LL as valgrind's --LL=size,assoc,line: this VM's
# CPUID reports a 512 MiB direct-mapped L3, which callgrind would take as is
# and which hides every miss of a working set below 512 MiB.
#
# pm-bench is $PM_BENCH, else TOP/_build/tools/pm-bench; the ring size is
# pm-bench's PM_BENCH_RING (default 1 MiB).
#
#   --frames F    stream frames in all per N (default 500000; at least 50 per
#                 worker keeps the start-up of a phase out of the figure)
#   --max N       the largest N (2, 4, 8, 16, 64; default 64). Keep N below
#                 128 on a shared machine: each worker is a valgrind process.
#   --annotate K  also print each N's K costliest functions (callgrind_annotate),
#                 Ir and LL misses per frame, to find what grows
#   --keep DIR    write the callgrind profiles to DIR and keep them (its old
#                 cg.* files are removed first, so no stale profile is read)
# Exit: 0 done (or --help), 1 the run failed, 2 bad command line.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
bench=${PM_BENCH:-$top/_build/tools/pm-bench}
ll=${PM_HUBWORK_LL:-33554432,16,64}
frames=500000
max=64
annotate=0
keep=

usage() {
    sed -n 's/^#   \{0,1\}//p' "$0" | sed -n '/^tools\/bench\/hubwork.sh/,/^Exit/p'
    exit 0
}
number() {
    case $2 in
    '' | *[!0-9]*)
        echo "hubwork.sh: $1: '$2' is not a number" >&2
        exit 2
        ;;
    esac
}
while [ $# -gt 0 ]; do
    case $1 in
    --frames | --max | --annotate | --keep)
        [ $# -ge 2 ] || {
            echo "hubwork.sh: $1 needs a value" >&2
            exit 2
        }
        case $1 in
        --frames) number "$1" "$2"; frames=$2 ;;
        --max) number "$1" "$2"; max=$2 ;;
        --annotate) number "$1" "$2"; annotate=$2 ;;
        --keep) keep=$2 ;;
        esac
        shift 2
        ;;
    -h | --help) usage ;;
    *)
        echo "hubwork.sh: unknown option '$1' (see --help)" >&2
        exit 2
        ;;
    esac
done
if [ "$max" -lt 2 ] || [ "$max" -gt 64 ]; then
    echo "hubwork.sh: --max: '$max' is not from 2 to 64 (N = 128 and up would start that many valgrind processes)" >&2
    exit 2
fi
command -v valgrind >/dev/null 2>&1 || {
    echo "hubwork.sh: valgrind is not on PATH" >&2
    exit 1
}
[ -x "$bench" ] || {
    echo "hubwork.sh: no pm-bench at '$bench' (build it, or set PM_BENCH)" >&2
    exit 1
}

if [ -n "$keep" ]; then
    mkdir -p "$keep"
    rm -f "$keep"/cg.*
    dir=$keep
else
    dir=$(mktemp -d)
    trap 'rm -rf "$dir"' EXIT
fi
log=$dir/pm-bench.log

echo "hubwork: $(nproc) cpus, Linux $(uname -r), $(valgrind --version), LL simulated as --LL=$ll"
echo "  pm-bench scale --runs 1 --frames $frames --max $max under callgrind, the supervisor's stream phase only"
# The cap is scale's per phase: a run under valgrind is slower than native.
if ! PM_BENCH_SCALE_CAP=${PM_BENCH_SCALE_CAP:-600} valgrind --tool=callgrind -q --instr-atstart=no \
    --cache-sim=yes --LL="$ll" --callgrind-out-file="$dir/cg.%p" \
    "$bench" scale --runs 1 --frames "$frames" --max "$max" >"$log" 2>&1; then
    # pidfd_open (434) is unknown to valgrind before 3.20; procmesh falls back.
    grep -v -e 'syscall: 434' -e 'You may be able' -e 'README_MISSING' -e 'Nevertheless' \
        -e 'bug_reports' -e 'LL cache' -e 'L3 cache found' "$log" >&2
    echo "hubwork.sh: pm-bench scale failed under valgrind (its output above)" >&2
    exit 1
fi
sed -n 's/^scale: /  /p' "$log"
grep -e '^  (N = .* capped' -e '^ *[0-9]*  failed' "$log" || true

printf '%5s %10s %14s %18s %18s\n' N frames "hub Ir/frame" "D1 misses/frame" "LL misses/frame"
profiles=$(grep -l '^desc: Trigger: Client Request: pm-bench scale stream' "$dir"/cg.* || true)
[ -n "$profiles" ] || {
    echo "hubwork.sh: no stream profile was dumped (pm-bench built without valgrind/callgrind.h?)" >&2
    exit 1
}
for f in $profiles; do
    awk '
        /^desc: Trigger: Client Request: pm-bench scale stream/ {
            for (i = 1; i <= NF; i++) {
                if ($i ~ /^N=/) n = substr($i, 3)
                if ($i ~ /^frames=/) fr = substr($i, 8)
            }
        }
        /^events:/ { for (i = 2; i <= NF; i++) ev[$i] = i }
        /^totals:/ { for (i = 2; i <= NF; i++) tot[i] = $i }
        END {
            if (fr == 0) { printf "%5d %10d  (no frames relayed)\n", n, 0; exit }
            ir = tot[ev["Ir"]]
            d1 = tot[ev["D1mr"]] + tot[ev["D1mw"]]
            ll = tot[ev["ILmr"]] + tot[ev["DLmr"]] + tot[ev["DLmw"]]
            printf "%5d %10d %14.1f %18.3f %18.3f\n", n, fr, ir / fr, d1 / fr, ll / fr
        }' "$f"
done | sort -n
if [ "$annotate" -gt 0 ]; then
    for f in $profiles; do
        desc=$(sed -n 's/^desc: Trigger: Client Request: //p' "$f")
        fr=${desc##*frames=}
        [ "$fr" -gt 0 ] || continue
        echo
        echo "$desc: the $annotate costliest functions (self cost), per frame"
        printf '  %10s %10s  %s\n' Ir "LL misses" file:function
        callgrind_annotate --threshold=100 --show=Ir,DLmr,DLmw "$f" 2>/dev/null |
            awk -v fr="$fr" -v k="$annotate" '
                /^-+$/ { dash++; next }
                dash >= 4 && shown < k {
                    gsub(/\( *[0-9.]+%\)/, "")
                    sub(/ \[[^]]*\]$/, "")
                    if (NF < 4) next
                    for (i = 1; i <= 3; i++) { v[i] = $i; gsub(/,/, "", v[i]); if (v[i] == ".") v[i] = 0 }
                    if (v[1] !~ /^[0-9]+$/ || $NF == "TOTALS") next
                    printf "  %10.1f %10.3f  %s\n", v[1] / fr, (v[2] + v[3]) / fr, $NF
                    shown++
                }'
    done
fi
