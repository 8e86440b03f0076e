#!/bin/sh
# SPDX-License-Identifier: MIT
# leftovers.sh - the suite's last test: no process started by `make check`
# may outlive it. Every test process carries PM_TEST_RUN (exported by
# AM_TESTS_ENVIRONMENT, unique to this build directory) in its environment,
# and so does everything it starts; this script runs once every other test
# has finished (Makefile.am makes its log depend on theirs), so any process
# still marked, other than this script and the make/test-driver chain that
# runs it, was left behind by a test. Such processes are listed, killed and
# the check fails. Exit: 0 none left, 1 some were, 77 outside the suite.
set -u

[ -n "${PM_TEST_RUN:-}" ] || { echo "SKIP: PM_TEST_RUN is not set (not run by make check)"; exit 77; }
mark="PM_TEST_RUN=$PM_TEST_RUN"

# Our ancestors (make's recipe shell, the test driver) carry the mark too.
ancestors=" "
p=$$
while [ "$p" -gt 1 ] 2>/dev/null; do
    ancestors="$ancestors$p "
    p=$(awk '/^PPid:/ { print $2 }' "/proc/$p/status" 2>/dev/null || echo 0)
done

# Prints the marked processes that are neither us, our ancestors, nor our
# own short-lived children (the commands of this very scan).
scan() {
    for d in /proc/[0-9]*; do
        pid=${d#/proc/}
        case "$ancestors" in *" $pid "*) continue ;; esac
        ppid=$(awk '/^PPid:/ { print $2 }' "$d/status" 2>/dev/null) || continue
        [ -n "$ppid" ] && [ "$ppid" != "$$" ] || continue
        { tr '\0' '\n' <"$d/environ"; } 2>/dev/null | grep -qxF "$mark" || continue
        cmd=$({ tr '\0' ' ' <"$d/cmdline"; } 2>/dev/null)
        [ -n "$cmd" ] || continue # a zombie, or gone meanwhile
        echo "$pid $ppid $cmd"
    done
}

# A helper killed with its test (PR_SET_PDEATHSIG) may take a moment to go.
end=$(( $(date +%s) + 5 ))
while :; do
    left=$(scan)
    [ -n "$left" ] || { echo "no process of the suite outlived it"; exit 0; }
    [ "$(date +%s)" -lt "$end" ] || break
    sleep 0.2
done
echo "FAIL: processes started by the suite outlived it (pid ppid command):"
echo "$left"
echo "$left" | while read -r pid _; do kill -9 "$pid" 2>/dev/null; done
exit 1
