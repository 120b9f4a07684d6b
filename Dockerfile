# blackwell-doctor as a container image (docs/container.md): Debian bookworm's python3, the
# package installed as a wheel into /opt/blackwell-doctor by a build stage that is thrown
# away (the image has no pip, no build backend, no compiler), a non-root user, and
# `blackwell-doctor` as the entry point. Any Docker (BuildKit or the classic builder) or
# Podman builds it:
#
#   docker build -t blackwell-doctor --build-arg VERSION="$(python3 -m setuptools_scm)" .
#
# Offline (an air-gapped builder; CI, whose engine reaches no index): make a wheelhouse
# first (tools/wheelhouse.py build -o wheelhouse), then add --build-arg WHEELHOUSE=wheelhouse.
# Another base: --build-arg BASE=... (a Debian or Ubuntu image; CI builds from its own
# debootstrap of the same Debian packages: ci/debian-base.sh).

# Debian's dated tags are never rebuilt (docker-library's debian images); pin by digest with
# --build-arg BASE=debian@sha256:... where the registry is reachable.
ARG BASE=docker.io/library/debian:bookworm-20251229-slim

FROM ${BASE} AS python
# python3 from Debian's packages, installed only when the base lacks it (as
# ci/apt-packages.sh does): CI's base has it already, and its engine reaches no mirror.
RUN missing=; \
    for p in python3; do \
        dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q 'install ok installed' \
            || missing="$missing $p"; \
    done; \
    if [ -n "$missing" ]; then \
        apt-get update \
        && DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends $missing \
        && rm -rf /var/lib/apt/lists/*; \
    fi

FROM python AS build
# The version: the build context has no .git (hatch-vcs' source), so it is given here; left
# empty, the wheel says 0.0 (pyproject.toml, [tool.hatch.version]).
ARG VERSION=
# Empty: pip from Debian (python3-pip, this stage only) and every wheel from the index.
# A folder of the build context made by tools/wheelhouse.py: pip from its own pip wheel and
# every wheel (the build backend's too) from there, --no-index.
ARG WHEELHOUSE=
COPY . /src
RUN set -eu; \
    export PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_NO_CACHE_DIR=1 PIP_ROOT_USER_ACTION=ignore; \
    if [ -n "$WHEELHOUSE" ]; then \
        pip="python3 $(ls /src/$WHEELHOUSE/pip-*.whl | sort -V | tail -1)/pip"; \
        export PIP_NO_INDEX=1 PIP_FIND_LINKS="/src/$WHEELHOUSE"; \
    else \
        apt-get update; \
        DEBIAN_FRONTEND=noninteractive apt-get install -y --no-install-recommends python3-pip; \
        pip="python3 -m pip"; \
    fi; \
    if [ -n "$VERSION" ]; then export SETUPTOOLS_SCM_PRETEND_VERSION="$VERSION"; fi; \
    $pip wheel --no-deps -w /dist /src; \
    python3 -m venv --without-pip /opt/blackwell-doctor; \
    $pip --python /opt/blackwell-doctor/bin/python install /dist/*.whl; \
    /opt/blackwell-doctor/bin/blackwell-doctor --version

FROM python
ARG BASE
ARG VERSION=
ARG REVISION=
ARG SOURCE=https://github.com/blackwell-doctor/blackwell-doctor
LABEL org.opencontainers.image.title="blackwell-doctor" \
      org.opencontainers.image.description="Is this GPU inference host on the fast path for NVFP4 MoE serving on workstation Blackwell (SM 12.x)? Why not, and what fixes it." \
      org.opencontainers.image.source="${SOURCE}" \
      org.opencontainers.image.url="${SOURCE}" \
      org.opencontainers.image.documentation="${SOURCE}/blob/main/docs/container.md" \
      org.opencontainers.image.version="${VERSION}" \
      org.opencontainers.image.revision="${REVISION}" \
      org.opencontainers.image.licenses="Apache-2.0" \
      org.opencontainers.image.base.name="${BASE}"
COPY --from=build /opt/blackwell-doctor /opt/blackwell-doctor
# A user of its own (no login, no home): every check reads world-readable files, NVML and
# the CUDA driver; what needs root or a capability is in docs/container.md.
RUN useradd --system --uid 10001 --user-group --no-create-home --home-dir /nonexistent \
        --shell /usr/sbin/nologin doctor
# XDG_CACHE_HOME: the catalogue and Hyperscan caches (collect/cachefile.py) go to /tmp,
# writable where the root filesystem is read-only (the DaemonSet mounts a tmpfs there).
ENV PATH=/opt/blackwell-doctor/bin:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin \
    XDG_CACHE_HOME=/tmp/.cache \
    PYTHONDONTWRITEBYTECODE=1
USER 10001:10001
ENTRYPOINT ["blackwell-doctor"]
CMD ["check"]
