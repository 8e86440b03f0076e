#!/bin/sh
# SPDX-License-Identifier: MIT
# interop.sh - the independent implementation of the link protocol
# (tests/interop/pmlink.py, written from doc/protocol.md alone) against a
# real procmesh: handshake both ways, requests, heartbeats, rekey, close, a
# wrong psk, CLOSE 1 after a refused record, a first record of frames. Exit 0 pass, 1 fail, 77 (with the reason) without python3 or
# libsodium's shared object.
set -u

src=$(cd "$(dirname "$0")" && pwd)
build=${PM_BUILD_DIR:-.}
py=$(command -v python3 2>/dev/null) || { echo "SKIP: python3 is not installed (tools/quickstart.sh installs it)"; exit 77; }
for f in "$build/src/daemon/procmesh" "$build/tests/pm-test-worker"; do
    [ -x "$f" ] || { echo "FAIL: $f is not built"; exit 1; }
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The script bounds itself (50 s) and skips (77) without libsodium's
# shared object; timeout(1) is the backstop. -B: no __pycache__ in the
# source tree (read-only under make distcheck).
timeout -k 2 90 "$py" -B "$src/interop/run.py" "$build/src/daemon/procmesh" "$build/tests/pm-test-worker" "$tmp"
