#!/bin/sh
# The wheels CI installs offline: this package's dependencies and build backend for CI's own
# Python and platform, made by the documented command (tools/wheelhouse.py build, against
# the index), for tests/test_offline_install.py (a fresh venv, the index unreachable),
# tests/test_install_tools.py (pipx, uv tool) and tests/test_image.py (the Dockerfile's
# wheel stage inside the test engine, which reaches no index). Plus one foreign wheel
# (msgspec for CPython 3.12 on aarch64): the wheelhouse the install must refuse.
#
#   sh ci/wheelhouse.sh install     # once per dependency set, cached (below); prints the path
#   sh ci/wheelhouse.sh home        # the cache directory
#
# Layout: $HOME_DIR/host/*.whl (every dependency; this package's own wheel is removed: the
# tests build it from the checkout), $HOME_DIR/foreign/*.whl. The cache key is the hash of
# [project].dependencies and [build-system].requires, so a changed dependency fetches anew;
# the cache survives between runs ($BD_WHEELHOUSE_HOME, default ${XDG_CACHE_HOME:-$HOME/
# .cache}/blackwell-doctor-ci/wheelhouse-<key>), is guarded by flock (several checkouts may
# run CI at once) and marked complete only at its end.
set -eu
HERE=$(cd "$(dirname "$0")/.." && pwd)
PY=${PYTHON:-python3}
KEY=$("$PY" - "$HERE/pyproject.toml" <<'EOF'
import hashlib, json, sys, tomllib
with open(sys.argv[1], "rb") as fh:
    p = tomllib.load(fh)
deps = [p["project"]["dependencies"], p["build-system"]["requires"], sys.version_info[:2]]
print(hashlib.sha256(json.dumps(deps).encode()).hexdigest()[:12])
EOF
)
HOME_DIR=${BD_WHEELHOUSE_HOME:-${XDG_CACHE_HOME:-$HOME/.cache}/blackwell-doctor-ci/wheelhouse-$KEY}

install() {
    mkdir -p "$(dirname "$HOME_DIR")"
    exec 9>"$HOME_DIR.lock"
    flock 9
    if [ -f "$HOME_DIR/.complete" ]; then
        echo "$HOME_DIR"
        return 0
    fi
    rm -rf "$HOME_DIR"
    mkdir -p "$HOME_DIR"
    "$PY" "$HERE/tools/wheelhouse.py" build -o "$HOME_DIR/host" "$HERE" -- --quiet >&2
    rm -f "$HOME_DIR"/host/blackwell_doctor-*.whl "$HOME_DIR/host/TARGET.json" \
        "$HOME_DIR/host/wheelhouse.py"
    msgspec=$(cd "$HOME_DIR/host" && ls msgspec-*.whl | cut -d- -f2)
    "$PY" -m pip download --quiet --disable-pip-version-check --no-deps --only-binary=:all: \
        --python-version 3.12 --platform manylinux_2_17_aarch64 --implementation cp \
        -d "$HOME_DIR/foreign" "msgspec==$msgspec" >&2
    touch "$HOME_DIR/.complete"
    echo "$HOME_DIR"
}

case ${1:-} in
install) install ;;
home) echo "$HOME_DIR" ;;
*) echo "usage: $0 install|home" >&2; exit 2 ;;
esac
