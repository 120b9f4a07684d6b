#!/bin/sh
# Other Pythons for the tests that read CPython's internals or count imports (issue 36): the
# regular-expression program cache (facts/regexcache.py reads re._parser, re._compiler and
# _sre) and the import-cost test, on each CPython the package supports besides CI's own.
# Each Python is a distribution's own python3 in a root filesystem made by debootstrap from
# that distribution's packages (the private test engine reaches no registry or mirror):
#
#   trixie  Debian 13, python3 3.13 (deb.debian.org, Debian's archive keyring)
#   noble   Ubuntu 24.04, python3 3.12 (archive.ubuntu.com, Ubuntu's archive keyring: Debian
#           ships none, so ubuntu-keyring's package is fetched from the archive's pool and
#           used only when its SHA-256 is the one pinned below, the noble release's)
#
#   sh ci/python-versions.sh build SUITE        # once, cached (below); prints the tar
#   sh ci/python-versions.sh wheels SUITE       # the wheels the tests install there, cached
#   DOCKER_HOST=unix://... sh ci/python-versions.sh test SUITE [PYTEST ARGS]
#
#   sh ci/python-versions.sh prepared SUITE     # rootfs + venv with the wheels, cached
#
# `prepared` makes, once per dependency set, the root filesystem with a venv at /opt/bd-venv
# holding the package's dependencies and pytest, installed from the wheelhouse alone
# (--no-index) in a chroot: python-SUITE-KEY/venv-DEPS.tar, DEPS the SHA-256 of the
# wheelhouse's file names (a changed pin is another file, so another tar). `test` imports
# it into the engine as bd-python:SUITE-DEPS unless the engine has that image already, then
# runs the tests in a container without network: the checkout mounted read-only at /src,
# `/opt/bd-venv/bin/python -m pytest -p no:cacheprovider TESTS` with PYTHONPATH=/src/src and
# the bytecode under /opt/bd-pycache (PYTHONPYCACHEPREFIX; the standard library's and the
# venv's compiled there once, the checkout's written there by the first interpreter of a
# run, in the container's own layer): the import-cost tests
# start dozens of interpreters, and without bytecode each compiled the package again (on
# this 2-core VM at load ~20: 38 s of CPU and 4m43s for the two files, against 11 s and
# ~1m20s with it). Making the venv in every run was ~58 s of wall time per Python at that
# load. Default tests: tests/test_regexcache.py tests/test_import_cost.py.
#
# Caches ($BD_PYTHONS_HOME, default ${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/):
# python-SUITE-KEY/rootfs.tar, python-SUITE-KEY/wheels/ and python-SUITE-KEY/venv-DEPS.tar,
# each guarded by flock and marked complete only at its end (several checkouts may run CI
# at once). Run as root.
set -eu
KEY=1 # bump to rebuild the cached root filesystems (a point release's updates)
HERE=$(cd "$(dirname "$0")/.." && pwd)
BASE=${BD_PYTHONS_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci}
PY=${PYTHON:-python3}

suite_of() {
    case $1 in
    trixie) echo "trixie ${DEBIAN_MIRROR:-http://deb.debian.org/debian} 3.13" ;;
    noble) echo "noble ${UBUNTU_MIRROR:-http://archive.ubuntu.com/ubuntu} 3.12" ;;
    *) echo "python-versions: unknown suite $1 (trixie, noble)" >&2; exit 2 ;;
    esac
}

home() { echo "$BASE/python-$1-$KEY"; }

# ubuntu-keyring 2023.11.28.1 (noble's): its SHA-256 as noble's Packages index lists it;
# its ubuntu-archive-keyring.gpg holds the archive's 2018 key, F6EC B376 2474 EDA9 D21B
# 7022 8719 20D1 991B C93C.
UBUNTU_KEYRING_DEB=pool/main/u/ubuntu-keyring/ubuntu-keyring_2023.11.28.1_all.deb
UBUNTU_KEYRING_SHA256=36de43b15853ccae0028e9a767613770c704833f82586f28eb262f0311adb8a8

ubuntu_keyring() {
    dir=$BASE/ubuntu-keyring-2023.11.28.1
    if [ ! -f "$dir/ubuntu-archive-keyring.gpg" ]; then
        mkdir -p "$dir"
        deb=$dir/keyring.deb
        curl -fsS -m 120 -o "$deb" "$1/$UBUNTU_KEYRING_DEB"
        echo "$UBUNTU_KEYRING_SHA256  $deb" | sha256sum -c --quiet - || {
            echo "python-versions: $UBUNTU_KEYRING_DEB is not the pinned package" >&2
            rm -f "$deb"
            exit 1
        }
        dpkg-deb --fsys-tarfile "$deb" |
            tar -xO ./usr/share/keyrings/ubuntu-archive-keyring.gpg >"$dir/keyring.tmp"
        mv "$dir/keyring.tmp" "$dir/ubuntu-archive-keyring.gpg"
    fi
    echo "$dir/ubuntu-archive-keyring.gpg"
}

build() {
    set -- $(suite_of "$1")
    suite=$1 mirror=$2
    dir=$(home "$suite")
    mkdir -p "$BASE"
    exec 8>"$dir.lock"
    flock 8
    if [ -f "$dir/.complete" ]; then
        echo "$dir/rootfs.tar"
        return 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    sh "$HERE/ci/apt-packages.sh" debootstrap >&2
    r=$dir/rootfs
    keyring=
    script=
    if [ "$suite" = noble ]; then
        # Debian bookworm's debootstrap knows Ubuntu up to jammy; noble is made the same way.
        # python3-venv is in universe there.
        keyring="--keyring=$(ubuntu_keyring "$mirror") --components=main,universe"
        script=/usr/share/debootstrap/scripts/jammy
    fi
    # shellcheck disable=SC2086
    debootstrap --variant=minbase --include=python3,python3-venv $keyring \
        --arch="$(dpkg --print-architecture)" "$suite" "$r" "$mirror" $script \
        >"$dir/debootstrap.log" 2>&1 || {
        tail -20 "$dir/debootstrap.log" >&2
        echo "python-versions: debootstrap $suite failed (log: $dir/debootstrap.log)" >&2
        exit 1
    }
    rm -rf "$r"/var/cache/apt/archives/*.deb "$r"/var/lib/apt/lists/* "$r"/var/log/*.log \
        "$r"/usr/share/man/* "$r"/usr/share/info/* "$r"/usr/share/locale/* "$r"/usr/share/lintian
    find "$r/usr/share/doc" -mindepth 1 -not -name copyright -not -type d -delete
    find "$r/usr/share/doc" -mindepth 1 -type d -empty -delete
    tar --numeric-owner -C "$r" -cf "$dir/rootfs.tar" .
    rm -rf "$r"
    touch "$dir/.complete"
    echo "$dir/rootfs.tar"
}

wheels() {
    set -- $(suite_of "$1")
    suite=$1 version=$3
    dir=$(home "$suite")/wheels
    mkdir -p "$(dirname "$dir")"
    exec 7>"$dir.lock"
    flock 7
    if [ -f "$dir/.complete" ]; then
        echo "$dir"
        return 0
    fi
    rm -rf "$dir"
    mkdir -p "$dir"
    # What these tests import, pinned as pyproject.toml's dependencies pin it (not the GPU
    # wheels: the tests run no GPU code), and pytest, as wheels for that Python here.
    reqs=$("$PY" -c '
import re, sys, tomllib
with open(sys.argv[1], "rb") as fh:
    deps = tomllib.load(fh)["project"]["dependencies"]
wanted = {"typer", "rich", "packaging", "msgspec", "hyperscan", "google-re2"}
print(" ".join(d.split(";")[0].replace(" ", "") for d in deps
               if re.split(r"[<>=!~\[; ]", d, maxsplit=1)[0] in wanted))
' "$HERE/pyproject.toml")
    # shellcheck disable=SC2086 # one word per requirement
    "$PY" -m pip download --quiet --disable-pip-version-check --only-binary=:all: \
        --python-version "$version" --implementation cp -d "$dir" pytest $reqs >&2
    touch "$dir/.complete"
    echo "$dir"
}

deps_key() {
    # The dependency set: the wheelhouse's file names (name, version, tags), sorted.
    (cd "$1" && ls -1 -- *.whl | LC_ALL=C sort | sha256sum | cut -c1-16)
}

prepared() {
    tar=$(build "$1")
    wh=$(wheels "$1")
    key=$(deps_key "$wh")
    out=$(home "$1")/venv-$key.tar
    exec 6>"$out.lock"
    flock 6
    if [ -f "$out.complete" ]; then
        echo "$out"
        return 0
    fi
    r=$(mktemp -d "${TMPDIR:-/tmp}/bd-python-$1.XXXXXX")
    trap 'rm -rf "$r"' EXIT
    tar -C "$r" -xf "$tar"
    mkdir "$r/wheels"
    cp "$wh"/*.whl "$r/wheels/"
    env -i PATH=/usr/sbin:/usr/bin:/sbin:/bin HOME=/tmp chroot "$r" /bin/sh -ec '
        python3 -m venv /opt/bd-venv
        /opt/bd-venv/bin/pip install --quiet --no-index --disable-pip-version-check \
            --no-compile --find-links /wheels /wheels/*.whl
        # The bytecode of the standard library and the venv where the tests will look for
        # it (PYTHONPYCACHEPREFIX, below: with it set, __pycache__ directories are not read).
        PYTHONPYCACHEPREFIX=/opt/bd-pycache /opt/bd-venv/bin/python -m compileall -q -j 0 \
            /usr/lib/python3.* /opt/bd-venv/lib >/dev/null' >&2
    rm -rf "$r/wheels" "$r/tmp/"* "$r/root/.cache"
    tar --numeric-owner -C "$r" -cf "$out.tmp" .
    mv "$out.tmp" "$out"
    rm -rf "$r"
    trap - EXIT
    touch "$out.complete"
    echo "$out"
}

run_tests() {
    suite=$1
    shift
    : "${DOCKER_HOST:?set DOCKER_HOST to the test engine}"
    tar=$(prepared "$suite")
    key=${tar##*/venv-}
    image=bd-python:$suite-${key%.tar}
    # An engine that kept its images since the last run has this one already.
    if ! docker image inspect "$image" >/dev/null 2>&1; then
        docker import -c 'ENV PATH=/opt/bd-venv/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin' \
            "$tar" "$image" >/dev/null
    fi
    [ $# -gt 0 ] || set -- tests/test_regexcache.py tests/test_import_cost.py
    docker run --rm --network none -v "$HERE:/src:ro" \
        -e PYTHONPYCACHEPREFIX=/opt/bd-pycache -e PYTHONPATH=/src/src -e HOME=/tmp -w /src \
        "$image" sh -ec '/opt/bd-venv/bin/python --version
            exec /opt/bd-venv/bin/python -m pytest -q -p no:cacheprovider "$@"' sh "$@"
}

case ${1:-} in
build) build "$2" ;;
wheels) wheels "$2" ;;
prepared) prepared "$2" ;;
test) shift; run_tests "$@" ;;
home) home "$2" ;;
*) echo "usage: $0 build SUITE | wheels SUITE | prepared SUITE | test SUITE [TESTS] | home SUITE" >&2; exit 2 ;;
esac
