"""Platform facts: kernel, OS, WSL, container, CPU and the loaded NVIDIA kernel module.

Every read goes through :class:`HostFS`; a failed read becomes the Unavailable it returns.
"""

from __future__ import annotations

from collections.abc import Mapping

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.parsers import (
    classify_wsl_kernel,
    os_release_facts,
    parse_cpuinfo,
    parse_nvidia_driver_version,
)
from blackwell_doctor.facts import (
    ContainerFacts,
    CpuFacts,
    OsRelease,
    PlatformFacts,
    Unavailable,
    WslFacts,
    WslKind,
)

NVIDIA_VERSION_PATH = "/proc/driver/nvidia/version"
# os-release(5): /etc/os-release takes precedence, /usr/lib/os-release is the fallback.
OS_RELEASE_PATHS = ("/etc/os-release", "/usr/lib/os-release")
# Substrings of /proc/1/cgroup that name a container runtime (cgroup v1 paths such as
# "12:pids:/docker/<id>" or "/kubepods/burstable/pod..."; under cgroup v2 a namespaced
# container sees only "0::/", so the marker files below matter more).
CONTAINER_CGROUP_MARKERS = ("docker", "kubepods", "containerd", "libpod")


def collect_platform(fs: HostFS, environ: Mapping[str, str]) -> PlatformFacts:
    kernel_release = _read_line(fs, "/proc/sys/kernel/osrelease")
    kernel_version = _read_line(fs, "/proc/version")
    return PlatformFacts(
        hostname=_read_line(fs, "/proc/sys/kernel/hostname"),
        kernel_release=kernel_release,
        kernel_version=kernel_version,
        kernel_cmdline=_read_line(fs, "/proc/cmdline"),
        os_release=_os_release(fs),
        wsl=_wsl(fs, environ, kernel_version, kernel_release),
        container=_container(fs, environ),
        cpu=_cpu(fs),
        nvidia_kernel_module=_nvidia_kernel_module(fs),
    )


def _read_line(fs: HostFS, host_path: str) -> str | Unavailable:
    text = fs.read_text(host_path)
    return text if isinstance(text, Unavailable) else text.strip()


def _os_release(fs: HostFS) -> OsRelease | Unavailable:
    first: Unavailable | None = None
    for path in OS_RELEASE_PATHS:
        # /etc/os-release is usually a symlink to ../usr/lib/os-release, on some distros an
        # absolute one, which a plain open() under --host-root would follow out of the
        # host root; HostFS.realpath re-roots it.
        resolved = fs.realpath(path)
        # (When resolving fails, read the path itself for a reason that names it.)
        text = fs.read_text(resolved if isinstance(resolved, str) else path)
        if not isinstance(text, Unavailable):
            return os_release_facts(text)
        if first is None:
            first = text
    return first if first is not None else Unavailable("not-found:/etc/os-release")


def _wsl(
    fs: HostFS,
    environ: Mapping[str, str],
    kernel_version: str | Unavailable,
    kernel_release: str | Unavailable,
) -> WslFacts:
    signals: list[str] = []
    kinds: list[WslKind] = []
    for name, text in (("proc-version", kernel_version), ("osrelease", kernel_release)):
        if isinstance(text, Unavailable):
            continue
        kind = classify_wsl_kernel(text)
        if kind == "wsl2":
            # Modern kernels say "-WSL2"; 4.19-era WSL2 kernels only "-microsoft-standard".
            modern = "microsoft-standard-WSL2" in text
            signals.append(f"{name}:microsoft-standard{'-WSL2' if modern else ''}")
        elif kind == "wsl1":
            signals.append(f"{name}:Microsoft")
        kinds.append(kind)
    for path, token in (
        ("/proc/sys/fs/binfmt_misc/WSLInterop", "binfmt:WSLInterop"),
        ("/proc/sys/fs/binfmt_misc/WSLInterop-late", "binfmt:WSLInterop-late"),
        ("/dev/dxg", "dev-dxg"),
        ("/usr/lib/wsl/lib", "usr-lib-wsl-lib"),
    ):
        if fs.exists(path):
            signals.append(token)
    # Absent under systemd services (REFERENCE §4), so never the only evidence we need.
    signals.extend(f"env:{var}" for var in ("WSL_DISTRO_NAME", "WSL_INTEROP") if environ.get(var))

    if "wsl2" in kinds:
        verdict: WslKind = "wsl2"
    elif "wsl1" in kinds:
        verdict = "wsl1"
    elif signals:
        # WSL1's kernel strings come from lxcore and always say "Microsoft", so WSL
        # markers with a kernel that names neither mean WSL2 with a custom kernel
        # (/dev/dxg and /usr/lib/wsl/lib exist only under WSL2's GPU paravirtualization).
        verdict = "wsl2"
    else:
        verdict = "none"
    return WslFacts(kind=verdict, signals=signals)


def _container(fs: HostFS, environ: Mapping[str, str]) -> ContainerFacts:
    signals: list[str] = []
    if fs.exists("/.dockerenv"):
        signals.append("dockerenv")
    if fs.exists("/run/.containerenv"):  # podman
        signals.append("containerenv")
    cgroup = fs.read_text("/proc/1/cgroup")
    if not isinstance(cgroup, Unavailable):
        signals.extend(f"cgroup:{m}" for m in CONTAINER_CGROUP_MARKERS if m in cgroup)
    # systemd's container interface: the manager sets $container (podman, docker, lxc...).
    if environ.get("container"):
        signals.append(f"env:container={environ['container']}")
    return ContainerFacts(in_container=bool(signals), signals=signals)


def _cpu(fs: HostFS) -> CpuFacts | Unavailable:
    text = fs.read_text("/proc/cpuinfo", limit=1 << 24)  # 512-thread hosts exceed 1 MiB
    return text if isinstance(text, Unavailable) else parse_cpuinfo(text)


def _nvidia_kernel_module(fs: HostFS) -> str | Unavailable:
    text = fs.read_text(NVIDIA_VERSION_PATH)
    if isinstance(text, Unavailable):
        return text
    version = parse_nvidia_driver_version(text)
    return version if version is not None else Unavailable(f"unparsed:{NVIDIA_VERSION_PATH}")
