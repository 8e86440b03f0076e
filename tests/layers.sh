#!/bin/sh
# SPDX-License-Identifier: MIT
# layers.sh - the hub never calls up into the supervisor: neither hub.c,
# hub_queue.c nor port.c includes cluster.h, and their objects reference no pm__cluster_*,
# pm__slot_*, pm__incarnation_* or pm__liveness_* symbol (include graph by
# grep, call graph by nm -u of the compiled objects). And no object of the
# library or the daemon calls pm__noise_bench_set_aead: the null cipher
# that replaces ChaChaPoly exists only in pm-bench (tools/bench/peer.c).
set -eu
src=$(cd "$(dirname "$0")/../src" && pwd)
obj=${PM_BUILD_DIR:-.}/src
status=0
for f in hub hub_queue port; do
    if grep -n '#include "cluster.h"' "$src/$f.c"; then
        echo "FAIL: src/$f.c includes cluster.h" >&2
        status=1
    fi
    o="$obj/$f.o"
    [ -f "$o" ] || o="$obj/.libs/$f.o"
    if [ ! -f "$o" ]; then
        echo "FAIL: no object for src/$f.c under $obj" >&2
        status=1
        continue
    fi
    up=$(nm -u "$o" | grep -E 'pm__(cluster|slot|incarnation|liveness|watch)_' || true)
    if [ -n "$up" ]; then
        echo "FAIL: src/$f.c calls up into the supervisor: $up" >&2
        status=1
    fi
done
for o in "$obj"/*.o "$obj"/.libs/*.o "$obj"/daemon/*.o; do
    [ -f "$o" ] || continue
    if nm -u "$o" | grep -q 'pm__noise_bench_set_aead'; then
        echo "FAIL: $o replaces the transport cipher (pm-bench only)" >&2
        status=1
    fi
done
[ "$status" -eq 0 ] && echo "layers: hub.c, hub_queue.c and port.c stay below the supervisor"
exit "$status"
