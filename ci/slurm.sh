#!/bin/sh
# A private single-node Slurm cluster on localhost for the `slurm`-marked tests (Debian's
# slurmctld/slurmd 22.05 with munge). Run as root; .ci/run installs the packages through
# ci/apt-packages.sh, then starts and stops the cluster with this script.
#
#   ci/slurm.sh start     # start munged, slurmctld and slurmd; print SLURM_CONF=... last
#   ci/slurm.sh stop      # stop them and delete their state
#
# Settings (environment):
#   SLURM_DIR   configuration, state, sockets and logs (default ${TMPDIR:-/tmp}/bd-slurm)
#   SLURM_NODE  the node's name in Slurm (default bdnode); slurmd runs as `slurmd -N` it
#
# Nothing outside SLURM_DIR is used: munged gets its own key and socket, the daemons their
# own free ports on 127.0.0.1 and their own slurm.conf (clients find it through SLURM_CONF),
# so two clusters (two CI runs) can run side by side and none touches /etc/slurm.
set -eu

SLURM_DIR=${SLURM_DIR:-${TMPDIR:-/tmp}/bd-slurm}
SLURM_NODE=${SLURM_NODE:-bdnode}
CONF=$SLURM_DIR/slurm.conf
export SLURM_CONF=$CONF

log() { printf '%s\n' "slurm: $*" >&2; }

free_port() {
    python3 -c 'import socket; s = socket.socket(); s.bind(("127.0.0.1", 0)); print(s.getsockname()[1])'
}

wait_for() { # wait_for SECONDS DESCRIPTION COMMAND...
    limit=$1 what=$2
    shift 2
    i=0
    until "$@" >/dev/null 2>&1; do
        i=$((i + 1))
        if [ "$i" -gt $((limit * 5)) ]; then
            log "timed out after ${limit}s waiting for $what"
            for f in "$SLURM_DIR"/log/*.log; do
                [ -e "$f" ] && { log "--- $f"; tail -20 "$f" >&2; }
            done
            return 1
        fi
        sleep 0.2
    done
}

node_ready() {
    state=$(sinfo --noheader --nodes="$SLURM_NODE" --format=%T 2>/dev/null | head -1)
    [ "$state" = idle ]
}

start() {
    if [ -f "$CONF" ] && scontrol ping >/dev/null 2>&1; then
        log "already running ($CONF)"
        echo "SLURM_CONF=$CONF"
        return
    fi
    mkdir -p "$SLURM_DIR/state" "$SLURM_DIR/spool" "$SLURM_DIR/log" "$SLURM_DIR/munge"
    chmod 700 "$SLURM_DIR/munge"
    dd if=/dev/urandom of="$SLURM_DIR/munge/munge.key" bs=1024 count=1 2>/dev/null
    chmod 400 "$SLURM_DIR/munge/munge.key"
    sock=$SLURM_DIR/munge/munge.socket
    # --force: munged refuses to run as root otherwise (this is a throwaway test key).
    munged --force --key-file="$SLURM_DIR/munge/munge.key" --socket="$sock" \
        --pid-file="$SLURM_DIR/munge/munged.pid" --log-file="$SLURM_DIR/log/munged.log" \
        --seed-file="$SLURM_DIR/munge/munged.seed"
    wait_for 10 munged test -S "$sock"

    ctld_port=$(free_port)
    slurmd_port=$(free_port)
    cat > "$CONF" <<CONF
ClusterName=bdtest
SlurmctldHost=$(hostname)(127.0.0.1)
SlurmctldPort=$ctld_port
SlurmdPort=$slurmd_port
AuthType=auth/munge
AuthInfo=socket=$sock
CredType=cred/munge
SlurmUser=root
SlurmdUser=root
StateSaveLocation=$SLURM_DIR/state
SlurmdSpoolDir=$SLURM_DIR/spool
SlurmctldPidFile=$SLURM_DIR/slurmctld.pid
SlurmdPidFile=$SLURM_DIR/slurmd.pid
SlurmctldLogFile=$SLURM_DIR/log/slurmctld.log
SlurmdLogFile=$SLURM_DIR/log/slurmd.log
ProctrackType=proctrack/linuxproc
TaskPlugin=task/none
SelectType=select/linear
SchedulerType=sched/builtin
JobAcctGatherType=jobacct_gather/none
AccountingStorageType=accounting_storage/none
MpiDefault=none
ReturnToService=2
NodeName=$SLURM_NODE NodeHostname=$(hostname) NodeAddr=127.0.0.1 CPUs=1 RealMemory=64 State=UNKNOWN
PartitionName=debug Nodes=$SLURM_NODE Default=YES MaxTime=INFINITE State=UP
CONF
    # -i: ignore state files of an earlier cluster; each start is a fresh one.
    slurmctld -i
    wait_for 30 slurmctld scontrol ping
    slurmd -N "$SLURM_NODE"
    wait_for 30 "node $SLURM_NODE idle" node_ready
    log "running: $CONF"
    echo "SLURM_CONF=$CONF"
}

stop_pid() { # stop_pid PIDFILE
    [ -f "$1" ] || return 0
    pid=$(cat "$1")
    kill "$pid" 2>/dev/null || return 0
    i=0
    while kill -0 "$pid" 2>/dev/null && [ "$i" -lt 50 ]; do
        sleep 0.2
        i=$((i + 1))
    done
    kill -9 "$pid" 2>/dev/null || true
}

stop() {
    stop_pid "$SLURM_DIR/slurmd.pid"
    stop_pid "$SLURM_DIR/slurmctld.pid"
    stop_pid "$SLURM_DIR/munge/munged.pid"
    rm -rf "$SLURM_DIR"
    log "stopped ($SLURM_DIR)"
}

case "${1:-}" in
start) start ;;
stop) stop ;;
*)
    echo "usage: $0 start|stop" >&2
    exit 2
    ;;
esac
