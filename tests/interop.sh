#!/bin/sh
# SPDX-License-Identifier: MIT
# interop.sh - the independent implementation of the link protocol
# (tests/interop/pmlink.py, written from doc/protocol.md alone) against a
# real procmesh: handshake both ways, requests, heartbeats, rekey, close, a
# wrong psk. Exit 0 pass, 1 fail, 77 (with the reason) without python3 or
# libsodium's shared object.
set -u

src=$(cd "$(dirname "$0")" && pwd)
build=${PM_BUILD_DIR:-.}
py=$(command -v python3 2>/dev/null) || { echo "SKIP: python3 is not installed (tools/quickstart.sh installs it)"; exit 77; }
"$py" -c 'import sys; sys.path.insert(0, sys.argv[1]); import pmlink; sys.exit(0 if pmlink.load_sodium() else 1)' "$src/interop" \
    || { echo "SKIP: python3 cannot load libsodium's shared object (libsodium.so.23)"; exit 77; }
for f in "$build/src/daemon/procmesh" "$build/tests/pm-test-worker"; do
    [ -x "$f" ] || { echo "FAIL: $f is not built"; exit 1; }
done
tmp=$(mktemp -d) || exit 1
trap 'rm -rf "$tmp"' EXIT
# The script bounds itself (28 s); timeout(1) is the backstop.
timeout -k 2 40 "$py" "$src/interop/run.py" "$build/src/daemon/procmesh" "$build/tests/pm-test-worker" "$tmp"
