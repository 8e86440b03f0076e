#!/bin/sh
# SPDX-License-Identifier: MIT
# run.sh - build and install libprocmesh into a staging prefix, then build the
# consumer project in tests/consumer against it with PKG_CHECK_MODULES, exactly
# as a downstream autotools project would, and run it.
# Exit status: 0 when the consumer builds and runs, non-zero otherwise.
set -eu
top=$(cd "$(dirname "$0")/../.." && pwd)
work=$(mktemp -d /tmp/pm-consumer.XXXXXX)
trap 'rm -rf "$work"' EXIT INT TERM
stage="$work/prefix"

mkdir "$work/lib"
(cd "$work/lib" && "$top/configure" --prefix="$stage" --disable-tests >/dev/null &&
    make -j2 >/dev/null && make install >/dev/null)

cp -R "$top/tests/consumer" "$work/app"
cd "$work/app"
autoreconf --install >/dev/null 2>&1
# A machine where only procmesh's own .pc is visible (none of liburing's,
# libsodium's or libseccomp's: their -dev packages need not be installed to
# build against procmesh): PKG_CONFIG_LIBDIR replaces the default search
# path with a directory that holds procmesh.pc and procmesh-worker.pc alone.
mkdir "$work/pc"
cp "$stage/lib/pkgconfig/procmesh.pc" "$stage/lib/pkgconfig/procmesh-worker.pc" "$work/pc/"
PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= pkg-config --cflags --libs procmesh >/dev/null
PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= ./configure >/dev/null
make >/dev/null
LD_LIBRARY_PATH="$stage/lib" ./consumer
# The worker linked with procmesh-worker.pc carries libprocmesh inside: no
# libprocmesh.so to find (no LD_LIBRARY_PATH), none in its NEEDED.
if objdump -p consumer-worker | grep -q 'NEEDED *libprocmesh'; then
    echo "consumer: consumer-worker needs libprocmesh.so" >&2; exit 1
fi
./consumer-worker
# The shared library records none of liburing, libsodium, libseccomp: it
# loads them on first use (src/os/deps.h), so a program that links it and
# never supervises (an exec'd worker, this consumer) maps none of them.
needed=$(objdump -p "$stage/lib/libprocmesh.so" | sed -n 's/^ *NEEDED *//p')
case "$needed" in *liburing* | *libsodium* | *libseccomp*)
    echo "consumer: libprocmesh.so still needs: $needed" >&2; exit 1 ;;
esac
# A static link (pkg-config --static): libprocmesh.a and its Libs.private.
static_libs=$(PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= pkg-config --static --libs procmesh |
    sed "s|-lprocmesh|$stage/lib/libprocmesh.a|")
${CC:-cc} -o consumer-static consumer.c $(PKG_CONFIG_LIBDIR="$work/pc" PKG_CONFIG_PATH= \
    pkg-config --cflags procmesh) $static_libs
./consumer-static
# Only the public header may be installed.
test "$(ls "$stage/include")" = "procmesh.h"
echo "consumer: built against the installed libprocmesh with PKG_CHECK_MODULES (and statically with pkg-config --static), a worker with procmesh-worker.pc, only their .pc files visible: ok"
