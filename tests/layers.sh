#!/bin/sh
# SPDX-License-Identifier: MIT
# layers.sh - src/ is a stack of folders (tests/layers.py: base, os, channel,
# worker, peer, hub, mesh, supervisor, daemon), each using only those below
# it, with no cycle between files, no file over 800 lines and no function
# over 80. What is still to be fixed is listed in tests/layers.todo, which
# only shrinks. No object of the library or the daemon but cipher.c refers
# to pm__noise_transport_aead: the null cipher that replaces ChaChaPoly
# exists only in pm-bench (tools/bench/peer.c). And the daemon defines no
# pm__ function: it calls the library's.
set -eu
here=$(cd "$(dirname "$0")" && pwd)
src=$(cd "$here/../src" && pwd)
obj=${PM_BUILD_DIR:-.}/src
status=0
if ! command -v python3 >/dev/null 2>&1; then
    echo "SKIP: layers.sh needs python3 (tools/quickstart.sh installs it)"
    exit 77
fi
findings=$(python3 "$here/layers.py" "$src" "$obj") || true
todo=$(grep -v -e '^#' -e '^$' "$here/layers.todo" || true)
printf '%s\n' "$findings" | while IFS= read -r line; do
    case "$line" in
    FAIL:*)
        match=$(printf '%s\n' "$todo" | while IFS= read -r t; do
            case "$line" in *"$t"*) echo "$t"; break ;; esac
        done)
        if [ -n "$match" ]; then
            echo "TODO${line#FAIL}"
        else
            echo "$line"
        fi
        ;;
    *) echo "$line" ;;
    esac
done >"${TMPDIR:-/tmp}/layers.$$"
cat "${TMPDIR:-/tmp}/layers.$$"
grep -q '^FAIL' "${TMPDIR:-/tmp}/layers.$$" && status=1
rm -f "${TMPDIR:-/tmp}/layers.$$"
if printf '%s\n' "$findings" | grep -q '^FAIL: no object'; then
    status=1
fi
printf '%s\n' "$todo" | while IFS= read -r t; do
    [ -n "$t" ] || continue
    printf '%s\n' "$findings" | grep '^FAIL' | grep -qF -- "$t" ||
        echo "FAIL: layers.todo lists '$t', which is no longer found: delete its line"
done | { grep . && exit 1 || exit 0; } || status=1
for o in $(find "$obj" -name '*.o' ! -path '*/tools/*' 2>/dev/null); do
    if nm -u "$o" | grep -q 'pm__noise_transport_aead'; then
        echo "FAIL: $o refers to the transport cipher's table (pm-bench only)" >&2
        status=1
    fi
done
# The daemon calls the library's key code, secret allocator and dependency
# loader through the shared library (PM__DAEMON_API, src/base/internal.h):
# linked with a shared libprocmesh it defines no pm__ function, so its
# process holds one copy of each (one allocator of wiped-on-fork memory).
build=${PM_BUILD_DIR:-.}
daemon=$build/src/daemon/.libs/procmesh
[ -f "$daemon" ] || daemon=$build/src/daemon/procmesh
if [ -f "$build/.libs/libprocmesh.so" ] && [ -f "$daemon" ]; then
    own=$(nm --defined-only "$daemon" 2>/dev/null | awk '$2 == "T" && $3 ~ /^pm__/ {print $3}')
    if [ -n "$own" ]; then
        echo "FAIL: the daemon defines its own copy of" $own "(call the library's: PM__DAEMON_API)" >&2
        status=1
    fi
fi
[ "$status" -eq 0 ] && echo "layers: every use points down, or is listed in tests/layers.todo"
exit "$status"
