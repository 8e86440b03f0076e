#!/bin/sh
# SPDX-License-Identifier: MIT
# layers.sh - src/ is a stack of folders (tests/layers.py: base, os, channel,
# worker, peer, hub, mesh, supervisor, daemon), each using only those below
# it, with no cycle between files, no file over 800 lines and no function
# over 80. What is still to be fixed is listed in tests/layers.todo, which
# only shrinks. No object of the library or the daemon but cipher.c refers
# to pm__noise_transport_aead: the null cipher that replaces ChaChaPoly
# exists only in pm-bench (tools/bench/peer.c). And the daemon defines no
# pm__ function: it calls the library's. The shared library exports the
# PM_EXTERN calls of include/procmesh.h and the PM__DAEMON_API ones, each
# defined, and nothing else.
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
# One nm for every object (-A names the file on each line): an nm per
# object took 20 s of the suite for 200 objects.
objs=$(find "$obj" -name '*.o' ! -path '*/tools/*' 2>/dev/null)
if [ -n "$objs" ]; then
    # shellcheck disable=SC2086
    for o in $(nm -A -u $objs 2>/dev/null | awk '/[ \t]pm__noise_transport_aead$/ {sub(/:[^:]*$/, ""); print}'); do
        echo "FAIL: $o refers to the transport cipher's table (pm-bench only)" >&2
        status=1
    done
fi
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
# Exported from libprocmesh.so (doc/design.md, Layers): exactly the
# PM_EXTERN declarations of include/procmesh.h and the PM__DAEMON_API ones
# of src/ (-fvisibility=hidden hides the rest). Names the toolchain adds
# (a leading underscore: _init, __bss_start, a sanitizer's) are not ours.
lib=$build/.libs/libprocmesh.so
if [ -f "$lib" ] && command -v nm >/dev/null 2>&1; then
    tmp=${TMPDIR:-/tmp}/layers-syms.$$
    awk '/^PM_EXTERN/ {d = $0; while (d !~ /\(/ && (getline l) > 0) d = d " " l;
                       sub(/\(.*/, "", d); n = split(d, w, /[^A-Za-z0-9_]+/); print w[n]}' \
        "$here/../include/procmesh.h" >"$tmp.want"
    grep -rh '^PM__DAEMON_API' "$src" --include='*.h' |
        awk '{d = $0; sub(/\(.*/, "", d); n = split(d, w, /[^A-Za-z0-9_]+/); print w[n]}' >>"$tmp.want"
    LC_ALL=C sort -u "$tmp.want" -o "$tmp.want"
    nm -D --defined-only "$lib" | awk 'NF >= 3 && $3 !~ /^_/ {sub(/@.*/, "", $3); print $3}' |
        LC_ALL=C sort -u >"$tmp.have"
    if [ "$(wc -l <"$tmp.want")" -lt 100 ]; then
        echo "FAIL: only $(wc -l <"$tmp.want") declarations found in include/procmesh.h and src/ (the parse broke?)" >&2
        status=1
    fi
    extra=$(LC_ALL=C comm -13 "$tmp.want" "$tmp.have")
    missing=$(LC_ALL=C comm -23 "$tmp.want" "$tmp.have")
    if [ -n "$extra" ]; then
        echo "FAIL: $lib exports what no PM_EXTERN or PM__DAEMON_API declares:" $extra >&2
        status=1
    fi
    if [ -n "$missing" ]; then
        echo "FAIL: declared for export but not exported by $lib:" $missing >&2
        status=1
    fi
    rm -f "$tmp.want" "$tmp.have"
else
    echo "note: no shared libprocmesh.so in $build (or no nm): its exports not checked"
fi
[ "$status" -eq 0 ] && echo "layers: every use points down, or is listed in tests/layers.todo"
exit "$status"
