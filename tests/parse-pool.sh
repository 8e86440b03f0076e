#!/bin/sh
# SPDX-License-Identifier: MIT
# parse-pool.sh - runs examples/parse-pool (the README's batch example),
# which checks every outcome itself. Exit: the example's.
#
# In a sanitizer build, LeakSanitizer is off for this program alone: its
# workers are fork-mode children of the example, and the one that calls
# exit(3) (a parser library that exits on bad input) runs LeakSanitizer's
# at-exit check over the heap it inherited. The fork child's start wipes
# the supervisor's frames from its copy of the stack (os/scrub.c), so the
# example's own pm_options, still live in the parent, is unreachable in the
# child and reported as a leak there, and the report turns the worker's
# exit code 3 into 1. The library's leaks are checked by the Check
# programs, whose workers leave by _exit.
ASAN_OPTIONS="${ASAN_OPTIONS:+$ASAN_OPTIONS:}detect_leaks=0"
export ASAN_OPTIONS
exec "${PM_BUILD_DIR:-.}/examples/parse-pool"
