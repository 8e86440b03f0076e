#!/bin/sh
# SPDX-License-Identifier: MIT
# supervisors.sh - the same child killed and restarted under procmesh, daemontools,
# runit and s6: kill-to-up time, p50 and p99, interleaved in one run.
#
#   tools/bench/supervisors.sh [--rounds N] [--up-ms MS] [--procmesh PATH]
#
# The child is one shell script for all of them: it writes its pid into a
# FIFO (that write is "up") and execs sleep. Each round kills every
# supervisor's child in turn (SIGKILL), and the time from the kill to the
# next pid read from that supervisor's FIFO is its restart. The rounds are
# interleaved, so a burst of load lands on all of them alike. Each child is
# left up for --up-ms (default 1100) before its kill: runit and s6 wait until
# a second has passed since the last start before starting again, and a
# child killed sooner would measure that pause, not the restart.
#
# procmesh runs as `procmesh run --workers 1 --ready exec --restart always`,
# without backoff (--backoff-min 0), default containment; s6 with readiness
# notification (its notification-fd), since it otherwise waits a second after
# every death. A supervisor that is
# not installed is skipped with a line (Debian packages daemontools, runit,
# s6); needs python3 for the clock and the percentiles.
set -eu

rounds=300
up_ms=1100
procmesh=""
while [ $# -gt 0 ]; do
    case "$1" in
    --rounds) rounds=$2; shift 2 ;;
    --up-ms) up_ms=$2; shift 2 ;;
    --procmesh) procmesh=$2; shift 2 ;;
    -h|--help) sed -n '3,20p' "$0"; exit 0 ;;
    *) echo "supervisors.sh: unknown option '$1' (--rounds N, --up-ms MS, --procmesh PATH)" >&2; exit 2 ;;
    esac
done
case "$rounds" in ''|*[!0-9]*) echo "supervisors.sh: --rounds wants a number, got '$rounds'" >&2; exit 2 ;; esac
case "$up_ms" in ''|*[!0-9]*) echo "supervisors.sh: --up-ms wants a number, got '$up_ms'" >&2; exit 2 ;; esac
if [ -z "$procmesh" ]; then
    here=$(cd "$(dirname "$0")/../.." && pwd)
    for p in "$here/_build/src/daemon/procmesh" "$here/src/daemon/procmesh" "$(command -v procmesh || true)"; do
        if [ -n "$p" ] && [ -x "$p" ]; then procmesh=$p; break; fi
    done
fi
command -v python3 >/dev/null || { echo "supervisors.sh: needs python3" >&2; exit 2; }

work=$(mktemp -d /tmp/pm-supervisors.XXXXXX)
cleanup() {
    # Every supervisor, then every child it may have started since.
    for f in "$work"/*/sup.pid "$work"/*/child.pid; do
        [ -f "$f" ] && kill -KILL "$(cat "$f")" 2>/dev/null || true
    done
    rm -rf "$work"
}
trap cleanup EXIT INT TERM

# name command...: one service directory each, with the child as ./run.
names=""
add() {
    name=$1
    mkdir -p "$work/$name"
    mkfifo "$work/$name/fifo"
    notify=""
    if [ "$name" = s6 ]; then
        # Readiness notification: s6-supervise waits a second after a
        # death unless the service said it was ready (notification-fd).
        echo 3 >"$work/$name/notification-fd"
        notify='echo >&3; exec 3>&-'
    fi
    cat >"$work/$name/run" <<EOF
#!/bin/sh
echo \$\$ >"$work/$name/child.pid"
$notify
echo \$\$ >"$work/$name/fifo"
exec sleep 100000
EOF
    chmod +x "$work/$name/run"
    names="$names $name"
}

if [ -n "$procmesh" ]; then add procmesh; else echo "procmesh: skipped (not built: give --procmesh PATH)"; fi
if command -v supervise >/dev/null; then add daemontools; else echo "daemontools: skipped (not installed)"; fi
if command -v runsv >/dev/null; then add runit; else echo "runit: skipped (not installed)"; fi
if command -v s6-supervise >/dev/null; then add s6; else echo "s6: skipped (not installed)"; fi
[ -n "$names" ] || { echo "supervisors.sh: nothing to run"; exit 0; }

echo "machine: nproc $(nproc), kernel $(uname -r), load average $(cut -d' ' -f1-3 /proc/loadavg)"
echo "rounds: $rounds, each child up ${up_ms} ms before its kill"

WORK=$work NAMES=$names ROUNDS=$rounds UP_MS=$up_ms PROCMESH=$procmesh python3 - <<'EOF'
import os, signal, subprocess, sys, time, select

work, rounds, up_ms = os.environ["WORK"], int(os.environ["ROUNDS"]), int(os.environ["UP_MS"])
names = os.environ["NAMES"].split()

def command(name):
    d = os.path.join(work, name)
    if name == "procmesh":
        return [os.environ["PROCMESH"], "run", "--workers", "1", "--ready", "exec",
                "--restart", "always", "--backoff-min", "0", "--backoff-max", "0",
                "--backoff-jitter", "0", "--max-restarts", "-1", "--log-level", "error",
                "--", os.path.join(d, "run")]
    return {"daemontools": ["supervise", d], "runit": ["runsv", d],
            "s6": ["s6-supervise", d]}[name]

# O_RDWR: the FIFO never reads end-of-file between two children.
fifo = {n: os.open(os.path.join(work, n, "fifo"), os.O_RDWR) for n in names}
sup = {}
for n in names:
    sup[n] = subprocess.Popen(command(n), stdin=subprocess.DEVNULL,
                              stdout=subprocess.DEVNULL, start_new_session=True)
    with open(os.path.join(work, n, "sup.pid"), "w") as f:
        f.write(str(sup[n].pid))

def next_pid(n, timeout):
    """The pid the next child of n writes, or None after timeout seconds."""
    r, _, _ = select.select([fifo[n]], [], [], timeout)
    if not r:
        return None
    line = b""
    while not line.endswith(b"\n"):
        line += os.read(fifo[n], 64)
    return int(line.split()[-1])

child = {}
for n in names:
    child[n] = next_pid(n, 10)
    if child[n] is None:
        print(f"{n}: its first child never came up within 10 s", file=sys.stderr)
        sys.exit(1)
samples = {n: [] for n in names}
for r in range(rounds):
    for n in names:
        time.sleep(up_ms / 1000.0)
        t0 = time.monotonic_ns()
        os.kill(child[n], signal.SIGKILL)
        pid = next_pid(n, 10)
        t1 = time.monotonic_ns()
        if pid is None:
            print(f"{n}: no restart within 10 s of kill {r + 1}", file=sys.stderr)
            sys.exit(1)
        samples[n].append((t1 - t0) / 1e6)
        child[n] = pid

def rss_kib(pid):
    try:
        for line in open(f"/proc/{pid}/status"):
            if line.startswith("VmRSS:"):
                return int(line.split()[1])
    except OSError:
        pass
    return -1

def pct(v, p):
    v = sorted(v)
    k = max(0, min(len(v) - 1, int(round(p / 100.0 * len(v) + 0.5)) - 1))
    return v[k]

print(f"{'supervisor':<14} {'n':>5} {'p50 ms':>8} {'p99 ms':>8} {'max ms':>8} {'RSS KiB':>8}")
for n in names:
    v = samples[n]
    print(f"{n:<14} {len(v):>5} {pct(v, 50):>8.2f} {pct(v, 99):>8.2f} {max(v):>8.2f} {rss_kib(sup[n].pid):>8}")
base = pct(samples[names[0]], 50) if names[0] == "procmesh" else None
if base:
    print("p50 ratio to procmesh: " + ", ".join(f"{n} {pct(samples[n], 50) / base:.2f}x" for n in names[1:]))
for n in names:
    # procmesh stops its workers and removes its cgroups on SIGTERM; the
    # others are killed, then their last child.
    if n == "procmesh":
        sup[n].terminate()
    else:
        sup[n].kill()
    try:
        sup[n].wait(timeout=15)
    except subprocess.TimeoutExpired:
        sup[n].kill()
        sup[n].wait()
    try:
        os.kill(child[n], signal.SIGKILL)
    except ProcessLookupError:
        pass
EOF
