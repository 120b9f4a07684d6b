"""Platform facts: kernel, OS, WSL, container, virtual machine, CPU and the loaded NVIDIA
kernel module.

Every read goes through :class:`HostFS`; a failed read becomes the Unavailable it returns.
"""

from __future__ import annotations

from collections.abc import Mapping

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.parsers import (
    classify_wsl_kernel,
    cpuinfo_flags,
    dmi_hypervisor,
    nvidia_module_signals,
    os_release_facts,
    parse_cpuinfo,
    parse_meminfo,
    parse_nvidia_driver_version,
)
from blackwell_doctor.facts.document import (
    ContainerFacts,
    MemInfo,
    ModuleFlavour,
    OsRelease,
    PlatformFacts,
    Unavailable,
    VirtualizationFacts,
    WslFacts,
    WslKind,
)

NVIDIA_VERSION_PATH = "/proc/driver/nvidia/version"
# The kernel's taint flags for the loaded module (kernel/module/main.c): P for a
# proprietary license. Present whenever the module is loaded, readable without root.
NVIDIA_TAINT_PATH = "/sys/module/nvidia/taint"
MEMINFO_PATH = "/proc/meminfo"
# os-release(5): /etc/os-release takes precedence, /usr/lib/os-release is the fallback.
OS_RELEASE_PATHS = ("/etc/os-release", "/usr/lib/os-release")
# Substrings of /proc/1/cgroup that name a container runtime (cgroup v1 paths such as
# "12:pids:/docker/<id>" or "/kubepods/burstable/pod..."; under cgroup v2 a namespaced
# container sees only "0::/", so the marker files below matter more).
CONTAINER_CGROUP_MARKERS = ("docker", "kubepods", "containerd", "libpod")
# The kernel's machine architecture, as uname -m prints it (kernel/sysctl: "arch" in
# kern_table, Linux 6.1+; older kernels lack it, and then the fact stays unavailable).
ARCH_PATH = "/proc/sys/kernel/arch"
# SMBIOS (DMI) strings the firmware gives the system; a hypervisor writes its own name
# there (drivers/firmware/dmi-id.c exports them world-readable, no root needed).
DMI_ID = "/sys/class/dmi/id"
DMI_FIELDS = ("sys_vendor", "product_name", "board_vendor", "bios_vendor")
# Xen guests (and dom0) get /sys/hypervisor/type = "xen" (drivers/xen/sys-hypervisor.c);
# no other hypervisor populates it on Linux.
HYPERVISOR_TYPE = "/sys/hypervisor/type"


def collect_platform(fs: HostFS, environ: Mapping[str, str]) -> PlatformFacts:
    kernel_release = _read_line(fs, "/proc/sys/kernel/osrelease")
    kernel_version = _read_line(fs, "/proc/version")
    cpuinfo = fs.read_text("/proc/cpuinfo", limit=1 << 24)  # 512-thread hosts exceed 1 MiB
    return PlatformFacts(
        hostname=_read_line(fs, "/proc/sys/kernel/hostname"),
        kernel_release=kernel_release,
        kernel_version=kernel_version,
        kernel_cmdline=_read_line(fs, "/proc/cmdline"),
        os_release=_os_release(fs),
        wsl=_wsl(fs, environ, kernel_version, kernel_release),
        container=_container(fs, environ),
        virtualization=_virtualization(fs, cpuinfo),
        machine=_machine(fs),
        cpu=cpuinfo if isinstance(cpuinfo, Unavailable) else parse_cpuinfo(cpuinfo),
        nvidia_kernel_module=_nvidia_kernel_module(fs),
        nvidia_module_flavour=_nvidia_module_flavour(fs),
        meminfo=_meminfo(fs),
    )


def _nvidia_module_flavour(fs: HostFS) -> ModuleFlavour | Unavailable:
    version = fs.read_text(NVIDIA_VERSION_PATH)
    taint = fs.read_text(NVIDIA_TAINT_PATH)
    if isinstance(version, Unavailable) and isinstance(taint, Unavailable):
        # "No module loaded" is said by a filesystem that is there: either file not found
        # on a mounted /proc or /sys (a loaded module has both). Otherwise neither could be
        # read (not-mounted: the container lacks the host's /proc and /sys), which says
        # nothing about the module: the version's reason names what to mount.
        return next(
            (u for u in (version, taint) if u.reason.startswith("not-found:")),
            version,
        )
    flavour, signals = nvidia_module_signals(
        version if isinstance(version, str) else None,
        taint if isinstance(taint, str) else None,
    )
    return ModuleFlavour(flavour=flavour, signals=signals)


def _meminfo(fs: HostFS) -> MemInfo | Unavailable:
    text = fs.read_text(MEMINFO_PATH)
    if isinstance(text, Unavailable):
        return text
    fields = parse_meminfo(text)
    if "MemTotal" not in fields:
        return Unavailable(f"unparsed:{MEMINFO_PATH}")
    return MemInfo(
        total_bytes=fields["MemTotal"],
        available_bytes=fields.get("MemAvailable"),
        free_bytes=fields.get("MemFree"),
        cached_bytes=fields.get("Cached"),
        swap_free_bytes=fields.get("SwapFree"),
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
    elif not kinds:
        # Neither kernel string could be read: "none" would be a guess (and an empty host
        # root would pass as native Linux).
        verdict = "unknown"
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


def _virtualization(fs: HostFS, cpuinfo: str | Unavailable) -> VirtualizationFacts:
    """Whether this kernel is a virtual machine's guest, from three sources:

    - x86 ``/proc/cpuinfo`` ``flags``: ``hypervisor`` is CPUID leaf 1 ECX bit 31, which
      every mainstream hypervisor (KVM, Hyper-V and so WSL2, VMware, Xen HVM, Firecracker)
      sets for its guests and hardware leaves clear. arm64 has no equivalent flag.
    - DMI (``/sys/class/dmi/id/*``): the SMBIOS vendor and product strings, which a
      hypervisor's firmware fills with its own name (``QEMU``, ``VMware, Inc.``,
      ``Amazon EC2``...; table and matching in :func:`dmi_hypervisor`, after systemd's
      ``detect_vm_dmi_vendor``). Firecracker and other minimal VMMs provide no SMBIOS.
    - ``/sys/hypervisor/type``: written by Xen for its guests (and dom0).

    in_vm is True on any signal; False when a source that would show a hypervisor was read
    and showed none (x86 flags, or DMI strings of real hardware); None when nothing could
    be read (arm64 without DMI, an empty host root)."""
    signals: list[str] = []
    negative = False
    if not isinstance(cpuinfo, Unavailable):
        flags = cpuinfo_flags(cpuinfo)
        if flags is not None:
            if "hypervisor" in flags:
                signals.append("cpuinfo:hypervisor")
            else:
                negative = True
    dmi: dict[str, str] = {}
    for field in DMI_FIELDS:
        text = fs.read_text(f"{DMI_ID}/{field}")
        if not isinstance(text, Unavailable) and text.strip():
            dmi[field] = text.strip()
    matched = dmi_hypervisor(dmi)
    signals.extend(f"dmi:{field}={dmi[field]}" for field in matched)
    if dmi and not matched:
        negative = True
    hypervisor = fs.read_text(HYPERVISOR_TYPE)
    if not isinstance(hypervisor, Unavailable) and hypervisor.strip():
        signals.append(f"sys-hypervisor:{hypervisor.strip()}")
    in_vm = True if signals else (False if negative else None)
    return VirtualizationFacts(in_vm=in_vm, signals=signals)


def _machine(fs: HostFS) -> str | Unavailable:
    text = _read_line(fs, ARCH_PATH)
    if isinstance(text, str) and not text:
        return Unavailable(f"unparsed:{ARCH_PATH}")
    return text


def _nvidia_kernel_module(fs: HostFS) -> str | Unavailable:
    text = fs.read_text(NVIDIA_VERSION_PATH)
    if isinstance(text, Unavailable):
        return text
    version = parse_nvidia_driver_version(text)
    return version if version is not None else Unavailable(f"unparsed:{NVIDIA_VERSION_PATH}")
