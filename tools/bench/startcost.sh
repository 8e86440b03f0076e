#!/bin/sh
# SPDX-License-Identifier: MIT
# startcost.sh - what linking libprocmesh adds to a program's start, against
# a libc-only program: system calls (strace -f -c), page faults and the
# time of fork+exec+wait (tools/bench/startcost.c, rounds interleaved),
# instructions (perf stat, where perf may count).
#
#   sh tools/bench/startcost.sh BUILDDIR [ROUNDS]     # ROUNDS default 1000
#   sh tools/bench/startcost.sh --installed [ROUNDS]
#
# BUILDDIR is a configured and built tree (its .libs/libprocmesh.so), linked
# with an rpath to it: the loader then also searches that folder's hwcaps
# subfolders first, failed openat calls an installed library does not make.
# --installed: the library `make install` put where pkg-config finds it,
# linked as a user's program is (`pkg-config --cflags --libs procmesh`, no
# rpath; found in ld.so.cache, so run ldconfig after the install). The
# programs compared, each `main` returning at once:
#   libc            links libc only
#   procmesh        links libprocmesh (as an exec'd worker does)
#   procmesh.a      libprocmesh linked into the program (procmesh-worker.pc,
#                   README "Linking a worker"): no second library to map
#   procmesh+deps   links libprocmesh, liburing, libsodium and libseccomp
#                   (what every worker mapped when libprocmesh recorded
#                   them as DT_NEEDED, before src/os/deps.c)
# Wall times depend on the machine's load (printed); the system-call and
# fault counts do not.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
where=${1:?usage: startcost.sh BUILDDIR|--installed [ROUNDS]}
rounds=${2:-1000}
case "$rounds" in ''|*[!0-9]*) echo "startcost: ROUNDS wants a number, got '$rounds'" >&2; exit 2 ;; esac
cc=${CC:-cc}
if [ "$where" = --installed ]; then
    pkg-config --exists procmesh ||
        { echo "startcost: pkg-config finds no procmesh (make install, and PKG_CONFIG_PATH if the prefix is not searched)" >&2; exit 2; }
    lib=$(pkg-config --variable=libdir procmesh)
    pmflags="$(pkg-config --cflags procmesh) -Wl,--no-as-needed $(pkg-config --libs procmesh)"
    staticflags="$(pkg-config --cflags --libs procmesh-worker 2>/dev/null || true)"
else
    build=$(cd "$where" && pwd)
    lib="$build/.libs"
    pmflags="-I$top/include -L$lib -Wl,-rpath,$lib -Wl,--no-as-needed -lprocmesh"
    # The build's own procmesh-worker.pc, pointed at the build tree.
    staticflags=""
    [ -e "$lib/libprocmesh.a" ] && [ -e "$build/procmesh-worker.pc" ] &&
        staticflags=$(pkg-config --define-variable=libdir="$lib" --define-variable=includedir="$top/include" \
            --cflags --libs "$build/procmesh-worker.pc" 2>/dev/null || true)
fi
test -e "$lib/libprocmesh.so" || { echo "startcost: no $lib/libprocmesh.so (build first)" >&2; exit 2; }
work=$(mktemp -d /tmp/pm-startcost.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM

printf 'int main(void) { return 0; }\n' >"$work/libc.c"
printf '#include <procmesh.h>\nint main(void) { return pm_version_string() == 0; }\n' >"$work/pm.c"
$cc -O2 -o "$work/libc" "$work/libc.c"
# --no-as-needed: each library is mapped as a worker's would be, used or not.
# shellcheck disable=SC2086
$cc -O2 -o "$work/procmesh" "$work/pm.c" $pmflags
deps=$(pkg-config --libs liburing libsodium 2>/dev/null || echo "-luring -lsodium")
deps="$deps $(pkg-config --libs libseccomp 2>/dev/null || true)"
# shellcheck disable=SC2086
$cc -O2 -o "$work/procmesh+deps" "$work/pm.c" $pmflags $deps
progs="libc procmesh procmesh+deps"
# shellcheck disable=SC2086
if [ -z "$staticflags" ]; then
    echo "startcost: no libprocmesh.a or procmesh-worker.pc (configured --disable-static?): procmesh.a not measured"
elif ! $cc -O2 -o "$work/procmesh.a" "$work/pm.c" $staticflags; then
    echo "startcost: linking libprocmesh.a failed (a sanitizer build?): procmesh.a not measured"
else
    progs="libc procmesh procmesh.a procmesh+deps"
fi
$cc -O2 -o "$work/startcost" "$top/tools/bench/startcost.c"

echo "startcost: $(uname -r), $(nproc) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "libprocmesh.so NEEDED: $(objdump -p "$lib/libprocmesh.so" | sed -n 's/^ *NEEDED *//p' | tr '\n' ' ')"

if command -v strace >/dev/null 2>&1; then
    # openat failed: the loader's search of BUILDDIR/.libs (its hwcaps and
    # tls subfolders) before the library; an installed library is found in
    # ld.so.cache at once.
    printf '\n%-16s %8s %8s %8s %8s %8s %8s\n' "syscalls" "total" "openat" "failed" "mmap" "mprotect" "read"
    for p in $progs; do
        strace -f -c -o "$work/$p.strace" "$work/$p" >/dev/null 2>&1
        awk -v p="$p" '
            $NF == "openat" || $NF == "mmap" || $NF == "mprotect" || $NF == "read" { n[$NF] = $4 }
            $NF == "openat" && NF == 6 { failed = $5 }
            $NF == "total" { t = $4 }
            END { printf "%-16s %8d %8d %8d %8d %8d %8d\n", p, t, n["openat"], failed, n["mmap"], n["mprotect"], n["read"] }
        ' "$work/$p.strace"
    done
else
    echo "strace not found: system calls not counted"
fi

if command -v perf >/dev/null 2>&1 && perf stat -x, -e instructions -- "$work/libc" >/dev/null 2>&1; then
    printf '\n%-16s %14s %14s\n' "instructions" "user" "kernel"
    for p in $progs; do
        u=$(perf stat -x, -r 50 -e instructions:u -- "$work/$p" 2>&1 >/dev/null | cut -d, -f1)
        k=$(perf stat -x, -r 50 -e instructions:k -- "$work/$p" 2>&1 >/dev/null | cut -d, -f1)
        printf '%-16s %14s %14s\n' "$p" "$u" "$k"
    done
else
    echo "perf cannot count instructions here: not measured"
fi

echo
# shellcheck disable=SC2046
(cd "$work" && nice -n 0 ./startcost "$rounds" $(for p in $progs; do printf './%s ' "$p"; done))
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
