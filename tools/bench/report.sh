#!/bin/sh
# SPDX-License-Identifier: MIT
# report.sh - make bench-report: run the benchmarks, write CSV, draw SVG, regenerate doc/benchmarks.md's figures.
#
#   tools/bench/report.sh [TOP] [--quick] [--estimate] [--runs R] [--frames N]
#       [--rounds K] [--scale-rounds K] [--ring-frames N] [--max N] [--cap S]
#       [--settle S]
#
# TOP is the source tree (default: this script's ../..). pm-bench is
# $PM_BENCH, else TOP/_build/tools/pm-bench. Writes TOP/doc/img/bench.csv
# (every figure, long format), TOP/doc/img/*.svg (with gnuplot; skipped with
# a note when it is absent) and the part of TOP/doc/benchmarks.md between
# the markers "<!-- bench-report:begin -->" and "<!-- bench-report:end -->"
# (appended at the end the first time); the hand-written sections stay.
#
# The quiet-machine check: a 1-minute load average above 0.5 before the run,
# or other processes taking more than 10% of the CPUs during it (/proc/stat
# busy time minus this script's children's CPU time), puts a BUSY MACHINE
# banner on the section and the charts. --settle S first waits up to S
# seconds for the load average to fall below 0.5 (after a build, say).
#
#   --quick          tiny counts, one run, N <= 8, spawn <= 32: checks the
#                    script and the tools, measures nothing (about 1 minute)
#   --estimate       print the estimated duration of this run and exit
#   --runs R         invocations per figure, the median printed (default 3)
#   --frames N       relay stream frames of compare (each size) and scale
#                    (default: compare 1,000,000 of 64 B and 200,000 of 4 KiB,
#                    scale 1,000,000)
#   --rounds K       compare's round trips; its crash rounds are K / 10
#                    (default 5000)
#   --scale-rounds K scale's requests in all (default 20000)
#   --ring-frames N  pm-bench ring frames per size below 4 KiB, a fifth of it
#                    from 4 KiB up (default 1,000,000)
#   --max N          scale's largest N, spawn-to-ready's too (default 1024)
#   --cap S          the most one phase (stream, requests) of one scale point
#                    may take, in seconds; a capped point is marked (default 20; pm-bench alone: 60)
# Exit: 0 done, 1 a benchmark failed, 2 bad command line.
set -eu

top=$(cd "$(dirname "$0")/../.." && pwd)
quick=""
estimate=""
runs=3
frames=""
rounds=""
srounds=""
rframes=1000000
max=1024
settle=0
cap=20
usage="allowed: --help, --quick, --estimate, --runs R, --frames N, --rounds K, --scale-rounds K, --ring-frames N, --max N, --cap S, --settle S"
# number OPTION VALUE: VALUE if it is a positive whole number, else exit 2.
number() {
    case "$2" in
    '' | *[!0-9]* | 0) echo "report.sh: $1: '$2' is not a positive whole number" >&2; exit 2 ;;
    esac
    echo "$2"
}
while [ $# -gt 0 ]; do
    case "$1" in
    -h | --help) sed -n '3,/^# Exit:/s/^# \{0,1\}//p' "$0"; exit 0 ;;
    --quick) quick="--quick" ;;
    --estimate) estimate=yes ;;
    --runs | --frames | --rounds | --scale-rounds | --ring-frames | --max | --cap | --settle)
        [ $# -ge 2 ] || { echo "report.sh: $1 needs a number ($usage)" >&2; exit 2; }
        v=$(number "$1" "$2") || exit 2
        case "$1" in
        --runs) runs=$v ;;
        --frames) frames=$v ;;
        --rounds) rounds=$v ;;
        --scale-rounds) srounds=$v ;;
        --ring-frames) rframes=$v ;;
        --max) max=$v ;;
        --cap) cap=$v ;;
        --settle) settle=$v ;;
        esac
        shift
        ;;
    -*) echo "report.sh: unknown option '$1' ($usage)" >&2; exit 2 ;;
    *) top=$(cd "$1" && pwd) ;;
    esac
    shift
done
[ "$runs" -le 101 ] || { echo "report.sh: --runs: $runs is above pm-bench's limit of 101" >&2; exit 2; }
[ "$cap" -le 3600 ] || { echo "report.sh: --cap: $cap s is above pm-bench's limit of 3600" >&2; exit 2; }
[ "$max" -ge 2 ] || { echo "report.sh: --max: $max workers is below the smallest point, 2" >&2; exit 2; }
if [ -n "$quick" ]; then
    # pm-bench compare and scale --quick fix their own tiny counts and one run.
    runs=1
    rframes=20000
    sizes="64 4096"
else
    sizes="16 64 256 1024 4096 16384"
fi

# --- how long it takes ----------------------------------------------------
# Seconds per unit of work, measured on the 2-core development machine at a
# load average of 8 to 10 (an upper bound for a quiet one; the quiet run of
# the lead is the measure); the run prints each step's real time.
# ring: per run and size, 3 + 14 per million frames.
# compare: per run, 20 + 25 per default stream counts + 15 per 5,000 round
#   trips (their tenth are crash rounds, the longest part).
# scale: per run and point N, 2 + 0.1 N per million frames (the stream
#   slows with N) + 0.1 per 1,000 requests; spawn-to-ready: per run, 20 ms
#   per worker in each mode. A capped phase costs up to --cap per run.
est_s=$(awk -v q="${quick:+1}" -v runs="$runs" -v rf="$rframes" -v fr="${frames:-0}" \
    -v ro="${rounds:-5000}" -v sr="${srounds:-20000}" -v max="$max" -v sizes="$sizes" 'BEGIN {
    if (q) { print 40, 0, 0; exit }
    n = split(sizes, s, " ")
    for (i = 1; i <= n; i++) ring += runs * (3 + 14 * (s[i] >= 4096 ? rf / 5 : rf) / 1e6)
    cmp = runs * (20 + 25 * (fr > 0 ? fr / 1e6 : 1) + 15 * ro / 5000)
    sf = fr > 0 ? fr / 1e6 : 1
    split("2 4 8 16 64 256", pts, " ")
    for (i = 1; i <= 6; i++) if (pts[i] + 0 <= max) { sc += runs * (2 + 0.1 * pts[i] * sf + 0.1 * sr / 1000); np++ }
    split("2 16 64 256 1024", sp, " ")
    for (i = 1; i <= 5; i++) if (sp[i] + 0 <= max) sc += runs * 2 * 0.02 * sp[i]
    printf "%d %d %d %d\n", ring, cmp, sc, np }')
if [ -n "$quick" ]; then
    est="about 40 s (--quick)"
else
    # shellcheck disable=SC2086 # four numbers, split on purpose
    set -- $est_s
    est="about $((($1 + $2 + $3 + 59) / 60)) minutes (ring $((($1 + 30) / 60)), compare $((($2 + 30) / 60)), scale $((($3 + 30) / 60))); at worst $((($1 + $2 + $3 + $4 * runs * 2 * cap + 59) / 60)) if every scale phase hits its cap of $cap s"
fi
echo "report: estimated duration: $est"
[ -z "$estimate" ] || exit 0

bench=${PM_BENCH:-$top/_build/tools/pm-bench}
[ -x "$bench" ] || { echo "report.sh: no pm-bench at $bench (build first, or set PM_BENCH)" >&2; exit 1; }
img=$top/doc/img
md=$top/doc/benchmarks.md
[ -f "$md" ] || { echo "report.sh: no $md (is $top the procmesh source tree?)" >&2; exit 1; }
mkdir -p "$img"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
csv=$img/bench.csv
rm -f "$csv"

# --- the machine, before anything runs ------------------------------------
# Compiler and flags: from make (PM_BENCH_CC, PM_BENCH_CFLAGS), else from the
# Makefile of the build pm-bench lives in.
mk=$(dirname "$bench")/../Makefile
cc=${PM_BENCH_CC:-$(sed -n 's/^CC = //p' "$mk" 2>/dev/null | head -n 1)}
cflags=${PM_BENCH_CFLAGS-$(sed -n 's/^PM_CFLAGS = //p; s/^CFLAGS = //p' "$mk" 2>/dev/null | head -n 2 | tr '\n' ' ' | sed 's/ $//')}
cc=${cc:-cc}
# cpu_mhz: the current frequency of cpu0, where the kernel tells it.
cpu_mhz() {
    f=$(awk '{ printf "%.0f MHz (cpufreq)", $1 / 1000 }' /sys/devices/system/cpu/cpu0/cpufreq/scaling_cur_freq 2>/dev/null || true)
    [ -n "$f" ] || f=$(awk -F: '/^cpu MHz/ { printf "%.0f MHz (/proc/cpuinfo)", $2; exit }' /proc/cpuinfo)
    echo "${f:-not readable}"
}
# cpu_busy: jiffies the CPUs spent not idle (all processes), from /proc/stat.
cpu_busy() { awk '/^cpu / { print $2 + $3 + $4 + $7 + $8 + $9; exit }' /proc/stat; }
# children_cpu: clock ticks of user + system time of this shell's reaped
# children (cutime + cstime of /proc/$$/stat; "times" in a command
# substitution would see the subshell's, which start at zero).
children_cpu() { sed 's/.*) //' "/proc/$$/stat" | awk '{ print $14 + $15 }'; }
if [ "$settle" -gt 0 ]; then
    waited=0
    while awk '{ exit !($1 > 0.5) }' /proc/loadavg && [ "$waited" -lt "$settle" ]; do
        [ "$waited" -eq 0 ] && echo "report: waiting up to $settle s for the load average ($(cut -d' ' -f1 /proc/loadavg)) to fall below 0.5"
        sleep 5
        waited=$((waited + 5))
    done
fi
load=$(cut -d' ' -f1-3 /proc/loadavg)
load1=${load%% *}
freq=$(cpu_mhz)
machine="nproc $(nproc), $(uname -sr) $(uname -m), $($cc --version 2>/dev/null | head -n 1 || echo "$cc"), CFLAGS '${cflags:-?}', $(date -u '+%Y-%m-%d %H:%M UTC')"
echo "report: $machine; load average $load; CPU $freq"
busy=$(awk -v l="$load1" 'BEGIN { print (l > 0.5) ? "yes" : "no" }')
[ "$busy" = yes ] && echo "report: BUSY MACHINE (1-minute load average $load1 > 0.5): the figures are not a measurement"
t_start=$(date +%s)
busy0=$(cpu_busy)
ours0=$(children_cpu)

# Into a pipe pm-bench's stdout is block-buffered: stdbuf makes each line
# show up when it is printed, so a long step shows its progress. Not for a
# sanitizer build: stdbuf works by LD_PRELOAD, and ASan refuses to start
# when another library comes before its runtime.
linebuf=""
if command -v stdbuf >/dev/null 2>&1 && ! ldd "$bench" 2>/dev/null | grep -q 'libasan'; then
    linebuf="stdbuf -oL"
fi
# step [-k] NAME COMMAND...: runs a benchmark with its output shown and kept
# in $work/NAME.out, prints its duration; exits 1 when it fails (a pipe into
# tee would hide pm-bench's exit status). -k: a failure is kept in
# $work/failed and the run goes on (scale: a failed point, e.g. a spawn of
# 1,024 past its timeout, leaves the other points' figures good).
step() {
    keep=""
    [ "$1" = -k ] && { keep=yes; shift; }
    name=$1
    shift
    echo "report: $name: $*"
    t0=$(date +%s)
    { rc=0; $linebuf "$@" 2>&1 || rc=$?; echo "$rc" >"$work/$name.rc"; } | tee "$work/$name.out"
    rc=$(cat "$work/$name.rc")
    echo "report: $name took $(($(date +%s) - t0)) s"
    [ "$rc" -eq 0 ] && return 0
    if [ -n "$keep" ]; then
        echo "report: $name: a point failed (exit $rc, reason above); the others are reported" >&2
        grep -E '^pm-bench:|failed' "$work/$name.out" >>"$work/failed" || true
        return 0
    fi
    echo "report: $name failed (exit $rc); the section is not regenerated" >&2
    exit 1
}

# --- throughput vs frame size (pm-bench ring: ring, pipe, socketpair) ----
t_ring=$(date +%s)
for s in $sizes; do
    f=$rframes
    [ "$s" -ge 4096 ] && f=$((rframes / 5))
    step "ring-$s" "$bench" ring --size "$s" --frames "$f" --runs "$runs" --rounds 100
    awk -v s="$s" '/^stream:/ { on = 1; next } /^round trip/ { on = 0 }
        on && $1 != "transport" { printf "ring,stream,%s,%s,frames_per_s,%s\n", s, $1, $2 }' \
        "$work/ring-$s.out" >>"$work/ring.csv"
done
echo "report: ring, all sizes, took $(($(date +%s) - t_ring)) s"

# --- compare and scale ----------------------------------------------------
set -- --runs "$runs" --csv "$csv"
[ -n "$quick" ] && set -- "$@" --quick
[ -n "$frames" ] && set -- "$@" --frames "$frames"
[ -n "$rounds" ] && set -- "$@" --rounds "$rounds"
step compare "$bench" compare "$@"
set -- --runs "$runs" --csv "$csv" --max "$max"
[ -n "$quick" ] && set -- "$@" --quick
[ -n "$frames" ] && set -- "$@" --frames "$frames"
[ -n "$srounds" ] && set -- "$@" --rounds "$srounds"
PM_BENCH_SCALE_CAP=$cap
export PM_BENCH_SCALE_CAP
step -k scale "$bench" scale "$@"
cat "$work/ring.csv" >>"$csv"

# --- the machine, after ---------------------------------------------------
elapsed=$(($(date +%s) - t_start))
load_after=$(cut -d' ' -f1-3 /proc/loadavg)
freq_after=$(cpu_mhz)
# Other processes' share of the CPUs during the run: all busy time minus
# ours. Our own benchmarks keep the load average near 2, so the load after
# says little; this does.
others=$(awk -v b0="$busy0" -v b1="$(cpu_busy)" -v o0="$ours0" -v o1="$(children_cpu)" \
    -v t="$elapsed" -v n="$(nproc)" -v hz="$(getconf CLK_TCK)" 'BEGIN { o = (b1 - b0) - (o1 - o0); if (o < 0) o = 0;
        printf "%.0f", (t > 0 ? 100 * o / (t * n * hz) : 0) }')
echo "report: took $elapsed s (estimate: $est); load average after $load_after; CPU $freq_after; other processes used $others% of the CPUs during the run"
if [ "$others" -gt 10 ]; then
    [ "$busy" = yes ] || echo "report: BUSY MACHINE (other processes used $others% of the CPUs during the run): the figures are not a measurement"
    busy=yes
fi

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
# gnuplot draws the points in file order: sort by size / N as numbers. join
# needs its inputs sorted as text: it gets sorted copies (.txt).
for f in "$work"/size-*.dat "$work"/spawn-*.dat; do
    sort -n -k1,1 -o "$f" "$f"
    sort -k1,1 "$f" >"${f%.dat}.txt"
done
# Round trip distributions: one line per transport, its quoted name, then
# p50 p90 p99 p999 in us.
awk -F, '$1 == "compare" && $2 == "rtt" { v[$4, $5] = $6; if (!($4 in seen)) { seen[$4] = 1; order[n++] = $4 } }
    END { for (i = 0; i < n; i++) { t = order[i];
          printf "\"%s\" %g %g %g %g\n", t, v[t, "p50_ns"] / 1e3, v[t, "p90_ns"] / 1e3,
                 v[t, "p99_ns"] / 1e3, v[t, "p999_ns"] / 1e3 } }' "$csv" >"$work/rtt.dat"

# --- pictures -------------------------------------------------------------
banner=""
[ "$busy" = yes ] && banner="BUSY MACHINE (load $load1, others $others% of the CPUs): not a measurement"
[ -n "$quick" ] && banner="${banner:+$banner; }--quick: tiny counts, not a measurement"
if command -v gnuplot >/dev/null 2>&1; then
    # No chart of an earlier run may stay beside this run's tables.
    rm -f "$img/throughput-size.svg" "$img/roundtrip.svg" "$img/scale.svg" "$img/memory.svg"
    # A chart with no data at all (every scale point failed) stops gnuplot:
    # the tables are still written, without charts.
    if gnuplot -e "dir='$work'; img='$img'; banner='$banner'" "$top/tools/bench/report.gp"; then
        pictures="yes"
        echo "report: SVG charts in $img"
    else
        pictures="no"
        echo "report: gnuplot failed (above): the section has no charts" >&2
        echo "gnuplot failed (a chart had no data): no charts" >>"$work/failed"
    fi
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
        echo "> **BUSY MACHINE**: the 1-minute load average was $load1 before the run and other"
        echo "> processes used $others% of the CPUs during it (other work shared the CPUs)."
        echo "> These figures show that the tools work, not how fast procmesh is; rerun"
        echo "> \`make bench-report\` on a quiet machine."
        echo
    fi
    [ -n "$quick" ] && { echo "> **--quick**: tiny counts, one run: not a measurement."; echo; }
    if [ -s "$work/failed" ]; then
        echo "> **Failures** (their points are left out of the tables and charts):"
        sed 's/^ */> - /' "$work/failed"
        echo
    fi
    echo "Machine: $machine."
    echo "Quiet-machine check: load average $load before the run, $load_after after it"
    echo "(the benchmarks themselves keep about 2 CPUs busy); other processes used $others% of"
    echo "the CPUs during the run; CPU frequency $freq before, $freq_after after."
    echo "The run took $elapsed s. Each figure is the median of $runs invocation(s), its"
    echo "baselines measured in the same invocation. Raw data: [img/bench.csv](img/bench.csv)."
    echo
    command -v gnuplot >/dev/null 2>&1 || { echo "Charts: not drawn (gnuplot was not found; install gnuplot-nox)."; echo; }
    echo "### Throughput vs frame size (pm-bench ring: one process to another)"
    echo
    [ "$pictures" = yes ] && { echo "![throughput vs frame size](img/throughput-size.svg)"; echo; }
    echo "| size | ring frames/s | pipe frames/s | socketpair frames/s | ring / pipe |"
    echo "|---|---|---|---|---|"
    join "$work/size-ring.txt" "$work/size-pipe.txt" | join - "$work/size-socketpair.txt" | sort -n |
        awk '{ printf "| %s B | %.3g M | %.3g M | %.3g M | %.1fx |\n", $1, $2 / 1e6, $3 / 1e6, $4 / 1e6, $2 / $3 }'
    echo
    echo "### Side by side (pm-bench compare)"
    echo
    echo "Relay streams in frames/s (higher is better), round trip and crash-to-ready as"
    echo "p50 (lower is better); the crash baselines are a bare fork (+ exec) + exit + wait."
    echo
    # One column per transport in the order compare ran them; the crash
    # row's baselines have names of their own, put in the matching column.
    awk -F, '$1 != "compare" { next }
        $2 == "stream" && $3 == 64 && $5 == "frames_per_s" { col[n++] = $4 }
        $5 == "frames_per_s" || $5 == "p50_ns" { v[$2, $3, $4] = $6 }
        $2 == "crash" && $5 == "p50_ns" { crash[m++] = $4 }
        END {
            h = "| workload |"; d = "|---|";
            for (i = 0; i < n; i++) { h = h " " col[i] " |"; d = d "---|" }
            print h; print d
            split("stream,64,relay stream 64 B,M frames/s;stream,4096,relay stream 4 KiB,M frames/s;rtt,64,round trip 64 B p50,us;crash,0,crash-to-ready p50,ms", rows, ";")
            for (r = 1; r <= 4; r++) {
                split(rows[r], a, ","); line = "| " a[3] " (" a[4] ") |"
                for (i = 0; i < n; i++) {
                    who = a[1] == "crash" ? crash[i] : col[i]
                    if (!((a[1], a[2], who) in v)) { line = line " - |"; continue }
                    x = v[a[1], a[2], who]
                    cell = a[4] == "M frames/s" ? sprintf("%#.3g", x / 1e6) : a[4] == "us" ? sprintf("%.1f", x / 1e3) : sprintf("%.2f", x / 1e6)
                    if (who != col[i]) cell = cell " (" who ")"
                    line = line " " cell " |"
                }
                print line
            } }' "$csv"
    echo
    echo "Speed-up: how many times faster procmesh (fork / exec mode) is than that row"
    echo "(a rate over the row's rate, or the row's p50 over procmesh's). Crash-to-ready"
    echo "also with a warm standby (fork mode, pm_options_set_warm_standby, opt-in)."
    echo
    echo "| workload | transport | figure | procmesh fork speed-up | procmesh exec speed-up | fork with warm standby speed-up |"
    echo "|---|---|---|---|---|---|"
    awk -F, '$1 == "compare" { k = $2 SUBSEP $3 SUBSEP $4; v[k, $5] = $6;
            if (!(k in seen)) { seen[k] = 1; order[n++] = k } }
        END { for (i = 0; i < n; i++) { split(order[i], a, SUBSEP); k = order[i];
            if (a[1] == "stream") { w = "relay stream " a[2] " B"; f = sprintf("%#.3g M frames/s", v[k, "frames_per_s"] / 1e6) }
            else if (a[1] == "rtt") { w = "round trip " a[2] " B"; f = sprintf("p50 %.1f us, p99 %.1f us", v[k, "p50_ns"] / 1e3, v[k, "p99_ns"] / 1e3) }
            else { w = "crash-to-ready"; f = sprintf("p50 %.2f ms, p99 %.2f ms", v[k, "p50_ns"] / 1e6, v[k, "p99_ns"] / 1e6) }
            fs = ((k, "fork_speedup") in v) ? sprintf("%.2fx", v[k, "fork_speedup"]) : "-";
            es = ((k, "exec_speedup") in v) ? sprintf("%.2fx", v[k, "exec_speedup"]) : "-";
            ss = ((k, "standby_speedup") in v) ? sprintf("%.2fx", v[k, "standby_speedup"]) : "-";
            printf "| %s | %s | %s | %s | %s | %s |\n", w, a[3], f, fs, es, ss } }' "$csv"
    grep -q '^node: skipped' "$work/compare.out" && { echo; echo "Node.js rows: skipped (node was not on PATH)."; }
    echo
    echo "### Round trip distributions (request/reply through the broker, 64 B, us)"
    echo
    [ "$pictures" = yes ] && { echo "![round trip distributions](img/roundtrip.svg)"; echo; }
    echo "| transport | p50 | p90 | p99 | p999 |"
    echo "|---|---|---|---|---|"
    awk -F'" ' '{ t = substr($1, 2); split($2, p, " ");
        printf "| %s | %.1f | %.1f | %.1f | %.1f |\n", t, p[1], p[2], p[3], p[4] }' "$work/rtt.dat"
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
    echo "the spawn and after both phases. Each phase of a point is capped at $cap s; a capped"
    echo "point is marked (capped) and reports what it did in that time."
    echo
    echo "| N | stream frames/s | hub CPU ns/frame (stream) | requests/s | round trip p50 / p99 us | hub CPU ns/frame (requests) | supervisor private KiB idle / after | target KiB | ring KiB per worker idle / after |"
    echo "|---|---|---|---|---|---|---|---|---|"
    awk -F, '$1 == "scale" && $2 != "spawn" { v[$3, $2 "." $5] = $6; if (!($3 in seen)) { seen[$3] = 1; order[n++] = $3 } }
        END { for (i = 0; i < n; i++) { N = order[i];
            printf "| %s%s | %.3g M | %.0f | %.0f | %.1f / %.1f | %.0f | %.0f / %.0f | %.0f | %.0f / %.0f |\n", N, (v[N, "point.capped"] > 0 ? " (capped)" : ""),
                v[N, "stream.frames_per_s"] / 1e6, v[N, "stream.hub_cpu_ns_per_frame"], v[N, "rtt.requests_per_s"],
                v[N, "rtt.p50_ns"] / 1e3, v[N, "rtt.p99_ns"] / 1e3, v[N, "rtt.hub_cpu_ns_per_frame"],
                v[N, "memory.anon_idle_kib"], v[N, "memory.anon_after_kib"], v[N, "memory.target_kib"],
                v[N, "memory.ring_idle_kib_per_worker"], v[N, "memory.ring_after_kib_per_worker"] } }' "$csv"
    echo
    echo "Spawn-to-ready (pm_cluster_spawn of N idle workers, ms):"
    echo
    echo "| N | fork mode | exec mode |"
    echo "|---|---|---|"
    join "$work/spawn-fork.txt" "$work/spawn-exec.txt" | sort -n | awk '{ printf "| %s | %.1f | %.1f |\n", $1, $2, $3 }'
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
if [ -s "$work/failed" ]; then
    echo "report: some points failed (listed in the section); exit 1" >&2
    exit 1
fi
