#!/bin/sh
# SPDX-License-Identifier: MIT
# report.sh - make bench-report: run the benchmarks, write CSV, draw SVG, regenerate doc/benchmarks.md's figures.
#
#   tools/bench/report.sh [TOP] [--quick] [--runs R]
#
# TOP is the source tree (default: this script's ../..). pm-bench is
# $PM_BENCH, else TOP/_build/tools/pm-bench. Writes TOP/doc/img/bench.csv
# (every figure, long format), TOP/doc/img/*.svg (with gnuplot; skipped with
# a note when it is absent) and the part of TOP/doc/benchmarks.md between
# the markers "<!-- bench-report:begin -->" and "<!-- bench-report:end -->"
# (appended at the end the first time); the hand-written sections stay.
# A 1-minute load average above 0.5 before the run puts a BUSY MACHINE
# banner on the figures. --quick: tiny counts, to check the script itself.
# Exit: 0 done, 1 a benchmark failed, 2 bad command line.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
quick=""
runs=3
while [ $# -gt 0 ]; do
    case "$1" in
    --quick) quick="--quick" ;;
    --runs)
        [ $# -ge 2 ] || { echo "report.sh: --runs needs a number" >&2; exit 2; }
        case "$2" in ''|*[!0-9]*) echo "report.sh: --runs: '$2' is not a whole number" >&2; exit 2 ;; esac
        runs=$2
        shift
        ;;
    -*) echo "report.sh: unknown option '$1' (allowed: --quick, --runs R)" >&2; exit 2 ;;
    *) top=$(cd "$1" && pwd) ;;
    esac
    shift
done
bench=${PM_BENCH:-$top/_build/tools/pm-bench}
[ -x "$bench" ] || { echo "report.sh: no pm-bench at $bench (build first, or set PM_BENCH)" >&2; exit 1; }
img=$top/doc/img
md=$top/doc/benchmarks.md
mkdir -p "$img"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
csv=$img/bench.csv
rm -f "$csv"

# --- the machine, before anything runs ------------------------------------
load=$(cut -d' ' -f1-3 /proc/loadavg)
load1=${load%% *}
busy=$(awk -v l="$load1" 'BEGIN { print (l > 0.5) ? "yes" : "no" }')
freq=$(cat /sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq 2>/dev/null |
    awk '{ printf "%.0f MHz (cpufreq)", $1 / 1000 }')
[ -n "$freq" ] || freq=$(awk -F: '/^cpu MHz/ { printf "%.0f MHz (/proc/cpuinfo)", $2; exit }' /proc/cpuinfo)
[ -n "$freq" ] || freq="not readable"
cc=${PM_BENCH_CC:-cc}
machine="nproc $(nproc), $(uname -sr) $(uname -m), $($cc --version 2>/dev/null | head -n 1 || echo "$cc"), CFLAGS '${PM_BENCH_CFLAGS:-?}', $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "report: $machine; load average $load; CPU $freq"
[ "$busy" = yes ] && echo "report: BUSY MACHINE (1-minute load average $load1 > 0.5): the figures are not a measurement"

# --- throughput vs frame size (pm-bench ring: ring, pipe, socketpair) ----
if [ -n "$quick" ]; then sizes="64 4096"; frames=20000; else sizes="16 64 256 1024 4096 16384"; frames=1000000; fi
for s in $sizes; do
    f=$frames
    [ "$s" -ge 4096 ] && f=$((frames / 5))
    echo "report: pm-bench ring --size $s"
    "$bench" ring --size "$s" --frames "$f" --runs "$runs" --rounds 100 >"$work/ring.out" || exit 1
    awk -v s="$s" '/^stream:/ { on = 1; next } /^round trip/ { on = 0 }
        on && $1 != "transport" { printf "ring,stream,%s,%s,frames_per_s,%s\n", s, $1, $2 }' \
        "$work/ring.out" >>"$work/ring.csv"
done

# --- compare and scale ----------------------------------------------------
echo "report: pm-bench compare"
"$bench" compare $quick --runs "$runs" --csv "$csv" | tee "$work/compare.out" || exit 1
echo "report: pm-bench scale"
"$bench" scale $quick --runs "$runs" --csv "$csv" | tee "$work/scale.out" || exit 1
cat "$work/ring.csv" >>"$csv"

# --- data files for gnuplot and the tables -------------------------------
# get WHO-or-empty BENCH WORKLOAD METRIC: "size value" lines of matching rows.
get() {
    awk -F, -v b="$1" -v w="$2" -v who="$3" -v m="$4" \
        '$1 == b && $2 == w && (who == "" || $4 == who) && $5 == m { print $3, $6 }' "$csv"
}
for t in ring pipe socketpair; do get ring stream "$t" frames_per_s >"$work/size-$t.dat"; done
get scale stream "" frames_per_s >"$work/scale-fps.dat"
get scale stream "" hub_cpu_ns_per_frame >"$work/scale-cpu-stream.dat"
get scale rtt "" hub_cpu_ns_per_frame >"$work/scale-cpu-rtt.dat"
get scale rtt "" p50_ns >"$work/scale-p50.dat"
get scale rtt "" p99_ns >"$work/scale-p99.dat"
get scale memory "" anon_idle_kib >"$work/mem-anon-idle.dat"
get scale memory "" anon_after_kib >"$work/mem-anon-after.dat"
get scale memory "" target_kib >"$work/mem-target.dat"
get scale memory "" ring_idle_kib_per_worker >"$work/mem-ring-idle.dat"
get scale memory "" ring_after_kib_per_worker >"$work/mem-ring-after.dat"
get scale spawn "procmesh fork" ms >"$work/spawn-fork.dat"
get scale spawn "procmesh exec" ms >"$work/spawn-exec.dat"
# join needs its inputs sorted as text; the tables sort them as numbers.
for f in "$work"/size-*.dat "$work"/spawn-*.dat; do sort -k1,1 -o "$f" "$f"; done
# Round trip distributions: one line per transport, p50 p90 p99 p999 in us.
awk -F, '$1 == "compare" && $2 == "rtt" { v[$4, $5] = $6; if (!($4 in seen)) { seen[$4] = 1; order[n++] = $4 } }
    END { for (i = 0; i < n; i++) { t = order[i]; gsub(/ /, "_", t);
          printf "%s %g %g %g %g\n", t, v[order[i], "p50_ns"] / 1e3, v[order[i], "p90_ns"] / 1e3,
                 v[order[i], "p99_ns"] / 1e3, v[order[i], "p999_ns"] / 1e3 } }' "$csv" >"$work/rtt.dat"

# --- pictures -------------------------------------------------------------
banner=""
[ "$busy" = yes ] && banner="BUSY MACHINE (load $load1): not a measurement"
if command -v gnuplot >/dev/null 2>&1; then
    gnuplot -e "dir='$work'; img='$img'; banner='$banner'" "$top/tools/bench/report.gp"
    pictures="yes"
    echo "report: SVG charts in $img"
else
    pictures="no"
    echo "report: gnuplot not found (install gnuplot-nox): no SVG charts drawn"
fi

# --- the generated section of doc/benchmarks.md --------------------------
sec=$work/section.md
{
    echo "<!-- bench-report:begin -->"
    echo "<!-- Generated by tools/bench/report.sh (make bench-report); edits here are overwritten. -->"
    echo "## Generated figures (make bench-report)"
    echo
    if [ "$busy" = yes ]; then
        echo "> **BUSY MACHINE**: the 1-minute load average was $load1 before the run (other"
        echo "> work shared the CPUs). These figures show that the tools work, not how fast"
        echo "> procmesh is; rerun \`make bench-report\` on a quiet machine."
        echo
    fi
    [ -n "$quick" ] && { echo "> **--quick**: tiny counts, one run: not a measurement."; echo; }
    echo "Machine: $machine. Load average before the run: $load. CPU frequency: $freq."
    echo "Each figure is the median of $runs invocations, baselines measured in the same run."
    echo "Raw data: [img/bench.csv](img/bench.csv)."
    echo
    echo "### Throughput vs frame size (pm-bench ring: one process to another)"
    echo
    [ "$pictures" = yes ] && { echo "![throughput vs frame size](img/throughput-size.svg)"; echo; }
    echo "| size | ring frames/s | pipe frames/s | socketpair frames/s | ring / pipe |"
    echo "|---|---|---|---|---|"
    join "$work/size-ring.dat" "$work/size-pipe.dat" | join - "$work/size-socketpair.dat" | sort -n |
        awk '{ printf "| %s B | %.3g M | %.3g M | %.3g M | %.1fx |\n", $1, $2 / 1e6, $3 / 1e6, $4 / 1e6, $2 / $3 }'
    echo
    echo "### Side by side (pm-bench compare)"
    echo
    echo "Speed-up: how many times faster procmesh (fork / exec mode) is than that row"
    echo "(a rate over the row's rate, or the row's p50 over procmesh's)."
    echo
    echo "| workload | transport | figure | procmesh fork speed-up | procmesh exec speed-up |"
    echo "|---|---|---|---|---|"
    awk -F, '$1 == "compare" { k = $2 SUBSEP $3 SUBSEP $4; v[k, $5] = $6;
            if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
        END { for (i = 0; i < n; i++) { split(order[i], a, SUBSEP); k = order[i];
            if (a[1] == "stream") { w = "relay stream " a[2] " B"; f = sprintf("%.3g M frames/s", v[k, "frames_per_s"] / 1e6) }
            else if (a[1] == "rtt") { w = "round trip " a[2] " B"; f = sprintf("p50 %.1f us, p99 %.1f us", v[k, "p50_ns"] / 1e3, v[k, "p99_ns"] / 1e3) }
            else { w = "crash-to-ready"; f = sprintf("p50 %.2f ms, p99 %.2f ms", v[k, "p50_ns"] / 1e6, v[k, "p99_ns"] / 1e6) }
            fs = ((k, "fork_speedup") in v) ? sprintf("%.2fx", v[k, "fork_speedup"]) : "-";
            es = ((k, "exec_speedup") in v) ? sprintf("%.2fx", v[k, "exec_speedup"]) : "-";
            printf "| %s | %s | %s | %s | %s |\n", w, a[3], f, fs, es } }' "$csv"
    grep -q '^node: skipped' "$work/compare.out" && { echo; echo "Node.js rows: skipped (node was not on PATH)."; }
    echo
    echo "### Round trip distributions (request/reply through the broker, 64 B, us)"
    echo
    [ "$pictures" = yes ] && { echo "![round trip distributions](img/roundtrip.svg)"; echo; }
    echo "| transport | p50 | p90 | p99 | p999 |"
    echo "|---|---|---|---|---|"
    awk '{ t = $1; gsub(/_/, " ", t); printf "| %s | %.1f | %.1f | %.1f | %.1f |\n", t, $2, $3, $4, $5 }' "$work/rtt.dat"
    echo
    echo "### Scale (pm-bench scale: N workers, fork mode, 64 B frames)"
    echo
    [ "$pictures" = yes ] && { echo "![scale](img/scale.svg)"; echo; echo "![memory](img/memory.svg)"; echo; }
    echo "Stream: every worker sends to the next while it receives from the previous one."
    echo "Requests: every worker but slot 0 asks slot 0, one request at a time. Hub CPU:"
    echo "the supervisor thread's getrusage over the phase divided by the frames it relayed."
    echo "Memory: the supervisor's private memory (smaps Private_Clean + Private_Dirty of its"
    echo "non-shared mappings; the rings are shared mappings) against the target 4 MiB + 64 KiB"
    echo "per worker; ring pages resident (mincore of the ring mappings) per worker, idle after"
    echo "the spawn and after both phases. Each phase of a point is capped at 60 s; a capped"
    echo "point is marked (capped) and reports what it did in that time."
    echo
    echo "| N | stream frames/s | hub CPU ns/frame (stream) | requests/s | round trip p50 / p99 us | hub CPU ns/frame (requests) | supervisor private KiB idle / after | target KiB | ring KiB per worker idle / after |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F, '$1 == "scale" && $2 != "spawn" { v[$3, $2 "." $5] = $6; if (!($3 in seen)) { seen[$3] = 1; order[n++] = $3 } }
        END { for (i = 0; i < n; i++) { N = order[i];
            printf "| %s%s | %.3g M | %.0f | %.0f | %.1f / %.1f | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f |\n", N, v[N, "point.capped"] > 0 ? " (capped)" : "",
                v[N, "stream.frames_per_s"] / 1e6, v[N, "stream.hub_cpu_ns_per_frame"], v[N, "rtt.requests_per_s"],
                v[N, "rtt.p50_ns"] / 1e3, v[N, "rtt.p99_ns"] / 1e3, v[N, "rtt.hub_cpu_ns_per_frame"],
                v[N, "memory.anon_idle_kib"], v[N, "memory.anon_after_kib"], v[N, "memory.target_kib"],
                v[N, "memory.ring_idle_kib_per_worker"], v[N, "memory.ring_after_kib_per_worker"] } }' "$csv"
    echo
    echo "Spawn-to-ready (pm_cluster_spawn of N idle workers, ms):"
    echo
    echo "| N | fork mode | exec mode |"
    echo "|---|---|---|"
    join "$work/spawn-fork.dat" "$work/spawn-exec.dat" | sort -n | awk '{ printf "| %s | %.1f | %.1f |\n", $1, $2, $3 }'
    echo "<!-- bench-report:end -->"
} >"$sec"

if grep -q '^<!-- bench-report:begin -->' "$md"; then
    awk -v sec="$sec" '/^<!-- bench-report:begin -->/ { while ((getline l < sec) > 0) print l; skip = 1; next }
        /^<!-- bench-report:end -->/ { skip = 0; next } !skip' "$md" >"$work/md"
else
    { cat "$md"; echo; cat "$sec"; } >"$work/md"
fi
cat "$work/md" >"$md"
echo "report: $md regenerated between its bench-report markers; CSV in $csv"
