#!/bin/sh
# A private Docker engine for the `docker`-marked tests (Debian's docker.io, dockerd 20.10),
# modelled on ../shared/scripts/docker-engine.sh. Run as root. No registry is needed: the
# test image is a static busybox imported from a local rootfs.
#
#   ci/docker-engine.sh start     # start an engine, print DOCKER_HOST=unix://... last
#   ci/docker-engine.sh stop      # remove its containers, stop it, delete its state
#
# Settings (environment):
#   ENGINE_DIR      state, sockets and logs (default ${TMPDIR:-/tmp}/bd-docker-engine)
#   ENGINE_GPU      1 (default): put a fake nvidia-container-runtime-hook on dockerd's PATH,
#                   so DeviceRequest(capabilities=[["gpu"]]) is accepted (the hook does
#                   nothing); 0: a plain engine that answers such requests with
#                   'could not select device driver "" with capabilities: [[gpu]]'.
#   ENGINE_BRIDGE   the bridge for the engine's default network (default docker0). A second
#                   engine beside the first needs its own: any other name is created here
#                   with ENGINE_BRIDGE_CIDR (default 172.31.254.1/24) and deleted on stop.
#   ENGINE_IMAGE    the test image's name (default bd-test:latest): busybox with /www/health
#                   (so `httpd -f -p 8000 -h /www` answers GET /health with 200).
#   ENGINE_KEEP_DATA=1   keep the data root on stop (for debugging).
#
# Nothing outside ENGINE_DIR is touched except: the bridge interface, /usr/sbin/policy-rc.d
# (only when absent, so the package's postinst does not start a system dockerd), and
# /etc/docker/key.json, which dockerd 20.10 writes on start (removed on stop when this
# script's engine created it).
set -eu

ENGINE_DIR=${ENGINE_DIR:-${TMPDIR:-/tmp}/bd-docker-engine}
ENGINE_GPU=${ENGINE_GPU:-1}
ENGINE_BRIDGE=${ENGINE_BRIDGE:-docker0}
ENGINE_BRIDGE_CIDR=${ENGINE_BRIDGE_CIDR:-172.31.254.1/24}
ENGINE_IMAGE=${ENGINE_IMAGE:-bd-test:latest}
SOCK=$ENGINE_DIR/docker.sock
export DOCKER_HOST=unix://$SOCK

log() { printf '%s\n' "docker-engine: $*" >&2; }

install_packages() {
    if command -v dockerd >/dev/null 2>&1 && [ -x /bin/busybox ]; then
        return
    fi
    export DEBIAN_FRONTEND=noninteractive
    if [ ! -e /usr/sbin/policy-rc.d ]; then
        printf '#!/bin/sh\nexit 101\n' > /usr/sbin/policy-rc.d
        chmod +x /usr/sbin/policy-rc.d
    fi
    log "installing docker.io and busybox-static"
    apt-get update -qq
    apt-get install -y -qq --no-install-recommends docker.io busybox-static iproute2 >/dev/null
}

engine_up() {
    # The CLI here may be newer than the daemon; `docker version` negotiates the API.
    docker version >/dev/null 2>&1
}

start() {
    install_packages
    if [ -S "$SOCK" ] && engine_up; then
        log "already running at $DOCKER_HOST"
        echo "DOCKER_HOST=$DOCKER_HOST"
        return
    fi
    mkdir -p "$ENGINE_DIR/data" "$ENGINE_DIR/exec" "$ENGINE_DIR/bin"
    echo '{}' > "$ENGINE_DIR/daemon.json" # ignore any /etc/docker/daemon.json
    [ -e /etc/docker/key.json ] || touch "$ENGINE_DIR/created-key-json"

    dpath=$PATH
    if [ "$ENGINE_GPU" = 1 ]; then
        # dockerd registers its "nvidia" device driver only when this binary is on its PATH
        # (at start-up), then runs it as an OCI prestart hook. This one reads its stdin and
        # does nothing: the engine accepts GPU requests without any GPU.
        printf '#!/bin/sh\ncat >/dev/null\nexit 0\n' > "$ENGINE_DIR/bin/nvidia-container-runtime-hook"
        chmod +x "$ENGINE_DIR/bin/nvidia-container-runtime-hook"
        dpath=$ENGINE_DIR/bin:$PATH
    else
        # A host's real hook would register the driver: keep it off this engine's PATH.
        dpath=$(printf '%s' "$PATH" | tr ':' '\n' | while read -r d; do
            [ -x "$d/nvidia-container-runtime-hook" ] || printf '%s:' "$d"
        done)
        dpath=${dpath%:}
    fi

    bridge_args=""
    if [ "$ENGINE_BRIDGE" != docker0 ]; then
        if ! ip link show "$ENGINE_BRIDGE" >/dev/null 2>&1; then
            ip link add name "$ENGINE_BRIDGE" type bridge
            ip addr add "$ENGINE_BRIDGE_CIDR" dev "$ENGINE_BRIDGE"
            ip link set "$ENGINE_BRIDGE" up
            echo "$ENGINE_BRIDGE" > "$ENGINE_DIR/created-bridge"
        fi
        bridge_args="--bridge $ENGINE_BRIDGE"
    fi

    # --iptables=false: no host firewall changes; published ports still work through the
    # userland proxy (docker-proxy). Private data root, exec root (its containerd too),
    # pid file and socket: nothing is shared with a system engine or a second one.
    # shellcheck disable=SC2086 # bridge_args is empty or two words
    PATH=$dpath nohup dockerd \
        --config-file "$ENGINE_DIR/daemon.json" \
        --data-root "$ENGINE_DIR/data" --exec-root "$ENGINE_DIR/exec" \
        --pidfile "$ENGINE_DIR/dockerd.pid" -H "unix://$SOCK" \
        --storage-driver overlay2 --iptables=false --ip-masq=false $bridge_args \
        > "$ENGINE_DIR/dockerd.log" 2>&1 &
    i=0
    until engine_up; do
        i=$((i + 1))
        if [ $i -gt 300 ]; then
            tail -20 "$ENGINE_DIR/dockerd.log" >&2
            log "dockerd did not answer within 60 s"
            exit 1
        fi
        sleep 0.2
    done

    # The test image: static busybox (~2 MB) and a /www/health page for `httpd`.
    r=$ENGINE_DIR/rootfs
    rm -rf "$r"
    mkdir -p "$r/bin" "$r/etc" "$r/tmp" "$r/proc" "$r/sys" "$r/dev" "$r/www" "$r/root"
    cp /bin/busybox "$r/bin/busybox"
    for a in $(/bin/busybox --list); do
        [ "$a" = busybox ] || ln -s busybox "$r/bin/$a"
    done
    echo 'root:x:0:0:root:/root:/bin/sh' > "$r/etc/passwd"
    echo 'root:x:0:' > "$r/etc/group"
    echo ok > "$r/www/health"
    chmod 1777 "$r/tmp"
    tar --numeric-owner -C "$r" -cf "$ENGINE_DIR/rootfs.tar" .
    docker import -c 'CMD ["/bin/sh"]' -c 'ENV PATH=/bin' \
        "$ENGINE_DIR/rootfs.tar" "$ENGINE_IMAGE" >/dev/null
    log "ready (gpu hook: $ENGINE_GPU, bridge: $ENGINE_BRIDGE, image: $ENGINE_IMAGE)"
    echo "DOCKER_HOST=$DOCKER_HOST"
}

stop() {
    if [ -S "$SOCK" ] && engine_up; then
        ids=$(docker ps -aq 2>/dev/null || true)
        # shellcheck disable=SC2086 # one id per word
        [ -z "$ids" ] || docker rm -f $ids >/dev/null 2>&1 || true
    fi
    if [ -f "$ENGINE_DIR/dockerd.pid" ]; then
        pid=$(cat "$ENGINE_DIR/dockerd.pid")
        kill "$pid" 2>/dev/null || true
        i=0
        while kill -0 "$pid" 2>/dev/null; do # dockerd also stops its containerd
            i=$((i + 1))
            if [ $i -gt 100 ]; then
                kill -9 "$pid" 2>/dev/null || true
                break
            fi
            sleep 0.2
        done
        rm -f "$ENGINE_DIR/dockerd.pid"
    fi
    if [ "$ENGINE_BRIDGE" = docker0 ]; then
        ip link delete docker0 2>/dev/null || true
    elif [ -f "$ENGINE_DIR/created-bridge" ]; then
        ip link delete "$(cat "$ENGINE_DIR/created-bridge")" 2>/dev/null || true
        rm -f "$ENGINE_DIR/created-bridge"
    fi
    if [ -f "$ENGINE_DIR/created-key-json" ]; then
        rm -f /etc/docker/key.json "$ENGINE_DIR/created-key-json"
    fi
    if [ "${ENGINE_KEEP_DATA:-0}" != 1 ]; then
        rm -rf "$ENGINE_DIR/data" "$ENGINE_DIR/exec" "$ENGINE_DIR/rootfs" "$ENGINE_DIR/rootfs.tar"
    fi
    log "stopped ($ENGINE_DIR)"
}

case "${1:-}" in
    start) start ;;
    stop) stop ;;
    *)
        echo "usage: $0 start|stop   (settings: see the top of this file)" >&2
        exit 2
        ;;
esac
