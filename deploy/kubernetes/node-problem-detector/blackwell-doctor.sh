#!/bin/sh
# node-problem-detector custom plugin: maps blackwell-doctor's verdict on this node to NPD's
# exit-code contract (0 OK, 1 problem, 2 unknown) with a one-line message on stdout.
#
# It does not run the checks itself (NPD's image has no blackwell-doctor): it reads the Node
# Feature Discovery feature file that the blackwell-doctor DaemonSet rewrites every 10
# minutes (`check --format nfd`), so NPD and NFD always agree:
#   verdict=ok             -> 0
#   verdict=findings       -> 1, message: the node verdict (blackwell-doctor.node: degraded,
#                             needs-reset, needs-reboot, needs-service) and the failing check ids
#   verdict=not-evaluated, no file, an unreadable one, or one past its
#   "# +expiry-time" (the checks stopped running) -> 2
# Usage: blackwell-doctor.sh [FEATURE_FILE]
file=${1:-/etc/kubernetes/node-feature-discovery/features.d/blackwell-doctor}

if [ ! -r "$file" ]; then
    echo "blackwell-doctor: no verdict ($file missing)"
    exit 2
fi
expiry=$(sed -n 's/^# +expiry-time=\(.*\)$/\1/p' "$file")
now=$(date -u +%Y-%m-%dT%H:%M:%SZ)
if [ -n "$expiry" ] && [ "$(printf '%s\n%s\n' "$expiry" "$now" | sort | head -1)" = "$expiry" ]; then
    echo "blackwell-doctor: verdict expired at $expiry (checks not running?)"
    exit 2
fi
verdict=$(sed -n 's/^blackwell-doctor\.verdict=\(.*\)$/\1/p' "$file")
case $verdict in
ok)
    echo "blackwell-doctor: ok"
    exit 0
    ;;
findings)
    failed=$(sed -n 's/^blackwell-doctor\.check\.\(.*\)=fail$/\1/p' "$file" | paste -sd, -)
    node=$(sed -n 's/^blackwell-doctor\.node=\(.*\)$/\1/p' "$file")
    echo "blackwell-doctor: ${node:+$node: }${failed:-findings}"
    exit 1
    ;;
*)
    echo "blackwell-doctor: ${verdict:-no verdict in $file}"
    exit 2
    ;;
esac
