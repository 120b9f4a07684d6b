#!/bin/sh
# The container image's base for CI, made from Debian's own packages: the private test engine
# (ci/docker-engine.sh) reaches no registry, so `FROM debian:bookworm-...-slim` cannot be
# pulled there. debootstrap builds the same Debian bookworm root filesystem, with python3
# already in it (the Dockerfile installs python3 from Debian's mirror only when its base
# lacks it, and the engine reaches no mirror either), trimmed as Debian's slim images are
# (no documentation but the copyright files, no man pages or translations, no apt lists).
#
#   sh ci/debian-base.sh build                          # once, cached (below); prints the tar
#   DOCKER_HOST=unix://... sh ci/debian-base.sh import [IMAGE]   # default bd-debian-python:bookworm
#
# Run as root (debootstrap chroots). The mirror is this host's own Debian mirror (the first
# URIs: of /etc/apt/sources.list.d/debian.sources, as apt-get uses it for ci/apt-packages.sh),
# else deb.debian.org; $DEBIAN_MIRROR overrides. The root filesystem tar is cached between
# runs ($BD_DEBIAN_BASE_HOME, default ${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/
# debian-base-<suite>-<key>), guarded by flock and marked complete only at its end.
# Measured on the shared 2-core VM under load: debootstrap 2 min 39 s (66 s of CPU) cold;
# the import of the cached tar, every run, a few seconds.
set -eu
SUITE=bookworm
PACKAGES=python3
KEY=1 # bump to rebuild the cached base (e.g. for Debian's point-release updates)
HOME_DIR=${BD_DEBIAN_BASE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/debian-base-$SUITE-$KEY}
HERE=$(cd "$(dirname "$0")" && pwd)

mirror() {
    if [ -n "${DEBIAN_MIRROR:-}" ]; then
        echo "$DEBIAN_MIRROR"
        return
    fi
    m=$(sed -n 's/^URIs:[[:space:]]*\(.*\/debian\)[[:space:]]*$/\1/p' \
        /etc/apt/sources.list.d/debian.sources 2>/dev/null | head -1)
    echo "${m:-http://deb.debian.org/debian}"
}

build() {
    mkdir -p "$(dirname "$HOME_DIR")"
    exec 9>"$HOME_DIR.lock"
    flock 9
    if [ -f "$HOME_DIR/.complete" ]; then
        echo "$HOME_DIR/rootfs.tar"
        return 0
    fi
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR"
    sh "$HERE/apt-packages.sh" debootstrap
    r=$HOME_DIR/rootfs
    debootstrap --variant=minbase --include="$PACKAGES" --arch="$(dpkg --print-architecture)" \
        "$SUITE" "$r" "$(mirror)" >"$HOME_DIR/debootstrap.log" 2>&1 || {
        tail -20 "$HOME_DIR/debootstrap.log" >&2
        echo "debian-base: debootstrap failed (log: $HOME_DIR/debootstrap.log)" >&2
        exit 1
    }
    # As Debian's slim images (debuerreotype's --slimify: /etc/dpkg/dpkg.cfg.d/docker).
    rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/*.log \
        "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/usr/share/lintian
    find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
    tar --numeric-owner -C "$r" -cf "$HOME_DIR/rootfs.tar" .
    rm -rf "$r"
    touch "$HOME_DIR/.complete"
    echo "$HOME_DIR/rootfs.tar"
}

import() {
    image=${1:-bd-debian-python:$SUITE}
    : "${DOCKER_HOST:?set DOCKER_HOST to the test engine}"
    tar=$(build)
    docker import \
        -c 'ENV PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
        -c 'CMD ["bash"]' "$tar" "$image" >/dev/null
    echo "debian-base: $image imported into $DOCKER_HOST" >&2
    echo "$image"
}

case ${1:-} in
build) build ;;
import) shift; import "$@" ;;
home) echo "$HOME_DIR" ;;
*) echo "usage: $0 build | import [IMAGE] | home" >&2; exit 2 ;;
esac
