#!/usr/bin/env bash
# SPDX-License-Identifier: MIT
# pm-demo.sh [BUILD_DIR] - the procmesh demo: 4 echo workers behind one TCP
# port, a client whose traffic includes CRASH lines, the log showing every
# crash contained and the worker restarted while the port keeps answering,
# then a graceful stop and a summary. Ends by itself; exit 0 on success.
set -euo pipefail
build=${1:-_build}
procmesh="$build/src/daemon/procmesh"
worker="$build/tools/pm-echo-worker"
port=$((20000 + $$ % 20000))
health=$((port + 1))
log=$(mktemp)
trap 'rm -f "$log"' EXIT

http_get() { # PATH -> body on stdout
    exec 5<>"/dev/tcp/127.0.0.1/$health" || return 1
    printf 'GET %s HTTP/1.1\r\nHost: demo\r\n\r\n' "$1" >&5
    sed '1,/^\r$/d' <&5
    exec 5>&-
}

echo "== starting: procmesh run --workers 4 --listen web=tcp:127.0.0.1:$port --health 127.0.0.1:$health -- pm-echo-worker"
"$procmesh" run --workers 4 --listen "web=tcp:127.0.0.1:$port" --health "127.0.0.1:$health" \
    --backoff-min 100 --backoff-max 1000 -- "$worker" 2>"$log" &
pm=$!
for _ in $(seq 100); do
    if http_get /readyz 2>/dev/null | grep -q ready; then break; fi
    sleep 0.1
done

echo "== client: 24 requests, every 6th one is CRASH"
answered=0 crashed=0
for i in $(seq 24); do
    if [ $((i % 6)) -eq 0 ]; then line=CRASH; else line="hello $i"; fi
    reply=""
    if exec 3<>"/dev/tcp/127.0.0.1/$port"; then
        printf '%s\n' "$line" >&3
        IFS= read -r -t 3 reply <&3 || true
        exec 3>&-
    fi
    if [ -n "$reply" ]; then
        answered=$((answered + 1))
        printf '  %-9s -> %s\n' "$line" "$reply"
    else
        crashed=$((crashed + 1))
        printf '  %-9s -> (no answer: that worker crashed; procmesh restarts it)\n' "$line"
    fi
    sleep 0.05
done

# The last crash's replacement is still in its backoff: wait (up to 10 s)
# until every worker is ready again, so the stop below is the graceful one.
ready=""
for _ in $(seq 100); do
    ready=$(http_get /metrics 2>/dev/null | awk '/^procmesh_workers_ready / {print $2}')
    [ "${ready:-0}" = 4 ] && break
    sleep 0.1
done

echo "== what procmesh logged about the crashes"
grep -E 'event=(exited|restart_scheduled|ready)' "$log" | grep -v 'incarnation=1$' | tail -n 12 || true
restarts=$(http_get /metrics | awk '/^procmesh_slot_restarts_total/ {s += $2} END {print s + 0}')

echo "== graceful stop (SIGTERM)"
kill -TERM "$pm"
status=0
wait "$pm" || status=$?
grep -E 'event=drain_(begin|end)' "$log" || true

echo "== summary"
echo "  requests answered:     $answered of 24"
echo "  crashes contained:     $crashed (restarts counted by procmesh: $restarts)"
echo "  workers ready at end:  ${ready:-?} of 4"
echo "  procmesh exit status:  $status (0 = every worker stopped by itself)"
[ "$status" -eq 0 ] && [ "$answered" -ge 20 ] && [ "$restarts" -ge 4 ]
