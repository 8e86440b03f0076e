#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - runs one libFuzzer harness for a given time and appends its final numbers to summary.txt.
#
#   run.sh NAME BUILDDIR SRCDIR SECONDS [LIBFUZZER FLAGS...]
#
# The seed corpus (SRCDIR/corpus/NAME) is read; new inputs go to
# BUILDDIR/corpus/NAME, a crash to BUILDDIR/artifacts/NAME-crash-*. Exit
# status: libFuzzer's (0 when it found nothing).
set -eu
name=$1 b=$2 s=$3 secs=$4
shift 4
mkdir -p "$b/corpus/$name" "$b/artifacts" "$b/logs"
dict= seeds=
[ -f "$s/$name.dict" ] && dict="-dict=$s/$name.dict"
[ -d "$s/corpus/$name" ] && seeds="$s/corpus/$name"
log="$b/logs/$name.log"
echo "fuzz: $name for $secs s (log $log)"
rc=0
"$b/fuzz_$name" -max_total_time="$secs" -print_final_stats=1 -timeout=10 \
    -artifact_prefix="$b/artifacts/$name-" $dict "$@" \
    "$b/corpus/$name" $seeds >"$log" 2>&1 || rc=$?
if [ "$rc" -ne 0 ]; then
    tail -60 "$log"
    echo "fuzz: $name FAILED (exit $rc); the input is in $b/artifacts/" >&2
    exit "$rc"
fi
# The last status line ("#N DONE cov: C ft: F corp: ...") and the rate.
done_line=$(grep -E '^#[0-9]+[[:space:]]+DONE' "$log" | tail -1)
cov=$(echo "$done_line" | sed -n 's/.* cov: \([0-9]*\).*/\1/p')
ft=$(echo "$done_line" | sed -n 's/.* ft: \([0-9]*\).*/\1/p')
corp=$(echo "$done_line" | sed -n 's/.* corp: \([0-9]*\).*/\1/p')
execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$log")
rate=$(sed -n 's/^stat::average_exec_per_sec: *//p' "$log")
line="$name: ${secs}s execs=$execs exec/s=$rate cov=$cov ft=$ft corpus=$corp"
echo "fuzz: $line"
echo "$line" >>"$b/summary.txt"
