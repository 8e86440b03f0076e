#!/bin/sh
# SPDX-License-Identifier: MIT
# deploy-check.sh - the deployment files say what they should, and the
# systemd unit passes systemd-analyze verify.
#
# 1. deploy/procmesh.service: systemd-analyze verify on a copy whose paths
#    name this build's procmesh and pm-echo-worker, with no complaint
#    (one about DelegateSubgroup= on systemd older than 254 is still let
#    through, for a unit edited to carry it). Skipped (77, with the reason)
#    without systemd-analyze.
# 2. The settings the unit, the Containerfile and doc/kubernetes.yaml must
#    carry (grep: none of the three can be run here).
# Paths: the sources from this script's place, the build from PM_BUILD_DIR
# (default: the current directory, where make check runs it).
# Exit: 0 good, 1 a problem (named on stderr), 77 skipped.
set -eu

top_srcdir=$(cd "$(dirname "$0")/.." && pwd)
build=$(cd "${PM_BUILD_DIR:-.}" && pwd)
unit=$top_srcdir/deploy/procmesh.service
status=0

fail() {
    echo "FAIL: $*" >&2
    status=1
}

need() { # file pattern what
    grep -Eq -- "$2" "$1" || fail "$(basename "$1"): $3 (no line matching '$2')"
}

need "$unit" '^Type=notify$' "Type=notify"
need "$unit" '^WatchdogSec=' "WatchdogSec="
need "$unit" '^Delegate=yes$' "Delegate=yes"
# procmesh moves itself into a leaf of its delegated cgroup (cgroup.c
# leave_own): DelegateSubgroup= would only nest it one level deeper.
if grep -Eq '^DelegateSubgroup=' "$unit"; then
    fail "procmesh.service: DelegateSubgroup= is not needed (procmesh makes its own leaf)"
fi
need "$unit" '^KillMode=mixed$' "KillMode=mixed"
need "$unit" '^ExecReload=.*-USR2' "key reload by SIGUSR2"
need "$unit" '--user ' "workers under --user"
cf=$top_srcdir/deploy/Containerfile
need "$cf" '^FROM .* AS build$' "a build stage"
need "$cf" '^FROM debian:[0-9]+-slim$' "a slim runtime stage"
need "$cf" '^ENTRYPOINT \["/usr/local/bin/procmesh"\]$' "procmesh as ENTRYPOINT"
k8s=$top_srcdir/doc/kubernetes.yaml
need "$k8s" 'drop: \["ALL"\]' "all capabilities dropped"
need "$k8s" 'add: \["SETUID", "SETGID", "KILL"\]' "only SETUID, SETGID and KILL added back"
need "$k8s" 'allowPrivilegeEscalation: false' "allowPrivilegeEscalation: false"
need "$k8s" 'readOnlyRootFilesystem: true' "a read-only root filesystem"
need "$k8s" 'type: RuntimeDefault' "RuntimeDefault seccomp"
need "$k8s" 'PROCMESH_USER' "workers under --user"
need "$k8s" 'kill -USR2 1' "key rotation by SIGUSR2"

if ! command -v systemd-analyze >/dev/null 2>&1; then
    [ $status -eq 0 ] || exit 1
    echo "SKIP: no systemd-analyze: deploy/procmesh.service not verified" >&2
    exit 77
fi
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
sed -e "s|/usr/local/bin/procmesh|$build/src/daemon/procmesh|" \
    -e "s|/usr/local/bin/pm-echo-worker|$build/tools/pm-echo-worker|" "$unit" >"$tmp/procmesh.service"
version=$(systemd-analyze --version | sed -n '1s/^systemd \([0-9]*\).*/\1/p')
if ! systemd-analyze verify --man=no "$tmp/procmesh.service" >"$tmp/out" 2>&1; then
    fail "systemd-analyze verify failed:"
    cat "$tmp/out" >&2
fi
# Every line of its output must be an allowed one.
while IFS= read -r line; do
    case $line in
    *"Unknown key"*"'DelegateSubgroup'"*)
        [ "${version:-0}" -lt 254 ] || fail "systemd $version does not know DelegateSubgroup: $line" ;;
    "") ;;
    *) fail "systemd-analyze verify: $line" ;;
    esac
done <"$tmp/out"
exit $status
