"""Pure parsers for host files: text or bytes in, plain values out, never an exception.

The collectors (``platform.py``, ``pci.py``) do the reading through :class:`HostFS`; every
function here takes what was read and is total over arbitrary input (property-tested in
``tests/test_parsers_props.py``), because a host file can hold anything.
"""

from __future__ import annotations

import re
import shlex
import struct
from collections.abc import Mapping

from blackwell_doctor.facts.document import (
    ACS_BITS,
    AcsFacts,
    CpuFacts,
    ModuleFlavourName,
    OsRelease,
    Unavailable,
    WslKind,
)

# --------------------------------------------------------------------------- os-release

_OS_RELEASE_KEY = re.compile(r"[A-Za-z_][A-Za-z0-9_]*\Z")


def parse_os_release(text: str) -> dict[str, str]:
    """``KEY=value`` lines of os-release(5) → dict; later keys override earlier ones.

    os-release(5): values follow shell quoting rules (double or single quotes; in double
    quotes ``\\$ \\" \\\\ \\``` are escapes), lines starting with ``#`` are comments, and
    a line that does not parse is ignored rather than failing the whole file.
    """
    out: dict[str, str] = {}
    for raw in text.splitlines():
        line = raw.strip()
        if not line or line.startswith("#") or "=" not in line:
            continue
        key, _, value = line.partition("=")
        key = key.strip()
        if not _OS_RELEASE_KEY.match(key):
            continue
        out[key] = _unquote_shell(value.strip())
    return out


def _unquote_shell(value: str) -> str:
    """Undo shell-style quoting as os-release(5) prescribes: single quotes are literal;
    in double quotes a backslash escapes ``$ " \\ ``` only; outside quotes it escapes any
    character. An unterminated quote keeps what follows it rather than losing the value.
    (shlex is not enough: it leaves ``\\$`` escaped inside double quotes.)"""
    out: list[str] = []
    quote: str | None = None
    i = 0
    while i < len(value):
        char = value[i]
        following = value[i + 1] if i + 1 < len(value) else None
        if quote == "'":
            if char == "'":
                quote = None
            else:
                out.append(char)
        elif char == "\\" and following is not None and (quote is None or following in '$"\\`'):
            out.append(following)
            i += 1
        elif char == '"' and quote == '"':
            quote = None
        elif char in "\"'" and quote is None:
            quote = char
        else:
            out.append(char)
        i += 1
    return "".join(out)


def os_release_facts(text: str) -> OsRelease:
    fields = parse_os_release(text)
    return OsRelease(
        id=fields.get("ID") or None,
        version_id=fields.get("VERSION_ID") or None,
        pretty_name=fields.get("PRETTY_NAME") or None,
    )


# --------------------------------------------------------------------------- kernel cmdline

# The options REFERENCE §4 names. Kernel spellings of the same parameter: dashes and
# underscores are equivalent in parameter names (kernel/params.c, parameq()).
IOMMU_CMDLINE_KEYS: frozenset[str] = frozenset(
    {"iommu", "amd_iommu", "intel_iommu", "iommu.passthrough", "iommu.strict"}
)


def split_kernel_cmdline(cmdline: str) -> list[tuple[str, str | None]]:
    """Split like the kernel's ``next_arg()`` (lib/cmdline.c): whitespace separates, double
    quotes group (``param="a b"`` or ``"param=a b"``), ``--`` ends the kernel's own
    arguments (the rest goes to init). A bare word has value None."""
    args: list[tuple[str, str | None]] = []
    i, n = 0, len(cmdline)
    while i < n:
        while i < n and cmdline[i].isspace():
            i += 1
        if i >= n:
            break
        start, in_quote = i, False
        while i < n and (in_quote or not cmdline[i].isspace()):
            if cmdline[i] == '"':
                in_quote = not in_quote
            i += 1
        token = cmdline[start:i]
        if token == "--":  # noqa: S105 (the end-of-options marker, not a password)
            break
        # next_arg() drops one leading quote of the whole argument, and the quotes around
        # the value; other quote characters stay.
        if token.startswith('"'):
            token = token[1:]
            if token.endswith('"'):
                token = token[:-1]
        name, eq, value = token.partition("=")
        if not eq:
            args.append((name, None))
            continue
        if value.startswith('"'):
            value = value[1:]
            if value.endswith('"'):
                value = value[:-1]
        args.append((name, value))
    return args


def parse_iommu_cmdline(cmdline: str) -> dict[str, str]:
    """IOMMU options from /proc/cmdline; the last occurrence wins, as in the kernel (each
    ``__setup``/``early_param`` handler runs per occurrence, the last one overwriting).
    A bare option (``iommu`` without ``=``) is recorded with an empty value."""
    out: dict[str, str] = {}
    for name, value in split_kernel_cmdline(cmdline):
        key = name.replace("-", "_")
        if key in IOMMU_CMDLINE_KEYS:
            out[key] = "" if value is None else value
    return out


# --------------------------------------------------------------------------- /proc/cpuinfo

# arm64 /proc/cpuinfo has no "model name"; "CPU implementer" and "CPU part" are MIDR fields.
# Names from Linux arch/arm64/include/asm/cputype.h and util-linux sys-utils/lscpu-arm.c.
ARM_IMPLEMENTERS: dict[int, str] = {
    0x41: "ARM",
    0x42: "Broadcom",
    0x43: "Cavium",
    0x48: "HiSilicon",
    0x4E: "NVIDIA",
    0x51: "Qualcomm",
    0x61: "Apple",
    0xC0: "Ampere",
}
ARM_PARTS: dict[tuple[int, int], str] = {
    (0x41, 0xD0C): "Neoverse-N1",
    (0x41, 0xD40): "Neoverse-V1",
    (0x41, 0xD42): "Cortex-A78AE",  # Jetson AGX Orin
    (0x41, 0xD49): "Neoverse-N2",
    (0x41, 0xD4F): "Neoverse-V2",  # Grace (GH200, GB200)
    (0x41, 0xD84): "Neoverse-V3",
    (0x41, 0xD85): "Cortex-X925",  # GB10 (DGX Spark) big cores
    (0x41, 0xD87): "Cortex-A725",  # GB10 (DGX Spark) little cores
    (0x41, 0xD8E): "Neoverse-N3",
    (0x4E, 0x000): "Denver",
    (0x4E, 0x003): "Denver 2",
    (0x4E, 0x004): "Carmel",  # Jetson AGX Xavier
}


def _int_auto(text: str) -> int | None:
    try:
        return int(text.strip(), 0)
    except ValueError:
        return None


def parse_cpuinfo(text: str) -> CpuFacts:
    """x86: ``vendor_id`` and ``model name``; arm64: vendor from ``CPU implementer`` and a
    model from the distinct ``CPU part`` values in order of appearance (GB10 has two core
    types: "Cortex-X925 + Cortex-A725"). ``logical_cpus`` counts ``processor`` stanzas."""
    vendor: str | None = None
    model: str | None = None
    processors = 0
    implementer: int | None = None
    parts: list[tuple[int, int]] = []
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if not sep:
            continue
        key, value = key.strip(), value.strip()
        if key == "processor" and value.isdigit():
            processors += 1
        elif key == "vendor_id" and vendor is None and value:
            vendor = value
        elif key == "model name" and model is None and value:
            model = value
        elif key == "CPU implementer":
            implementer = _int_auto(value)
        elif key == "CPU part":
            part = _int_auto(value)
            if implementer is not None and part is not None and (implementer, part) not in parts:
                parts.append((implementer, part))
    if vendor is None and implementer is not None:
        vendor = ARM_IMPLEMENTERS.get(implementer)
    if model is None and parts:
        names = [ARM_PARTS.get(p) for p in parts]
        # All or nothing: a half-named mix would read as the whole CPU.
        if all(names):
            model = " + ".join(n for n in names if n)
    return CpuFacts(vendor=vendor, model=model, logical_cpus=processors or None)


def cpuinfo_flags(text: str) -> frozenset[str] | None:
    """The CPU feature flags of x86 /proc/cpuinfo (first ``flags`` line), None when there is
    none (arm64 says ``Features``, with no hypervisor bit)."""
    for line in text.splitlines():
        key, sep, value = line.partition(":")
        if sep and key.strip() == "flags":
            return frozenset(value.split())
    return None


# --------------------------------------------------------------------------- DMI

# Prefixes of SMBIOS vendor/product strings that only a hypervisor writes, after systemd's
# dmi_vendor_table (src/basic/virt.c), matched like it with a case-sensitive prefix:
# QEMU: "QEMU" / "Standard PC (Q35 + ICH9, 2009)"; KVM: product "KVM"; OpenStack Nova:
# "OpenStack Foundation" / "OpenStack Nova"; VMware: "VMware, Inc." / "VMware7,1"; VirtualBox:
# "innotek GmbH" / "VirtualBox"; Xen HVM: "Xen" / "HVM domU"; Parallels: "Parallels Software
# International Inc."; EC2 Nitro: "Amazon EC2"; GCE: product "Google Compute Engine".
# systemd's "Oracle Corporation" (VirtualBox's board vendor) is left out: Oracle also sells
# physical servers under that name.
DMI_HYPERVISOR_PREFIXES: tuple[str, ...] = (
    "QEMU",
    "KVM",
    "OpenStack",
    "KubeVirt",
    "Amazon EC2",
    "Google Compute Engine",
    "VMware",
    "VMW",
    "innotek GmbH",
    "VirtualBox",
    "Xen",
    "Bochs",
    "Parallels",
    "BHYVE",
    "Hyper-V",
    "Apple Virtualization",
    "Firecracker",
    "Cloud Hypervisor",
)


def dmi_hypervisor(dmi: Mapping[str, str]) -> list[str]:
    """The DMI fields (keys of ``dmi``: sys_vendor, product_name, board_vendor,
    bios_vendor) whose value names a hypervisor, in the mapping's order.

    "Microsoft Corporation" is also the vendor of Surface laptops: only with the product
    "Virtual Machine" is it Hyper-V (Azure, Windows Hyper-V). EC2 bare-metal instances keep
    the vendor "Amazon EC2" with a product such as "i3.metal": not a guest."""
    product = dmi.get("product_name", "")
    hyper_v = product == "Virtual Machine" and dmi.get("sys_vendor", "").startswith(
        "Microsoft Corporation"
    )
    matched: list[str] = []
    for field, value in dmi.items():
        if value.startswith("Amazon EC2") and product.endswith(".metal"):
            continue
        if value.startswith(DMI_HYPERVISOR_PREFIXES) or (
            hyper_v and field in ("sys_vendor", "product_name")
        ):
            matched.append(field)
    return matched


# --------------------------------------------------------------------------- NVIDIA module

# Open module:        "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  ..."
# Proprietary module: "NVRM version: NVIDIA UNIX x86_64 Kernel Module  550.54.14  Thu Feb ..."
# The arch word after "for" comes from the build's TARGET_ARCH (open-gpu-kernel-modules
# utils.mk), so it is any single word (nix-community/nixGL#186).
_NVRM_VERSION = re.compile(r"Kernel Module(?:\s+for\s+\S+)?\s+(\d+(?:\.\d+)+)\b")
_ANY_VERSION = re.compile(r"(?<![\d.])(\d{2,4}\.\d{1,3}(?:\.\d{1,3})?)(?![\d.])")


def parse_nvidia_driver_version(text: str) -> str | None:
    """The loaded kernel module's version from /proc/driver/nvidia/version, or None."""
    for line in text.splitlines():
        if not line.startswith("NVRM version:"):
            continue
        match = _NVRM_VERSION.search(line) or _ANY_VERSION.search(line)
        if match:
            return match.group(1)
    return None


def nvidia_module_signals(
    version_text: str | None, taint: str | None
) -> tuple[ModuleFlavourName, list[str]]:
    """(flavour, signals) of the loaded NVIDIA module, from /proc/driver/nvidia/version
    ("NVIDIA UNIX Open Kernel Module for x86_64" names the open one; the proprietary one
    says "NVIDIA UNIX x86_64 Kernel Module") and /sys/module/nvidia/taint (P: the kernel
    marks a module with a proprietary license; the open one is "Dual MIT/GPL", no P)."""
    signals: list[str] = []
    votes: set[ModuleFlavourName] = set()
    for line in (version_text or "").splitlines():
        if line.startswith("NVRM version:"):
            if "Open Kernel Module" in line:
                signals.append("version:open")
                votes.add("open")
            elif "Kernel Module" in line:
                signals.append("version:proprietary")
                votes.add("proprietary")
            break
    if taint is not None:
        flags = taint.strip()
        if "P" in flags:
            signals.append("taint:P")
            votes.add("proprietary")
        elif flags or taint == "":
            signals.append(f"taint:{flags or 'none'}")
            votes.add("open")
    flavour = votes.pop() if len(votes) == 1 else "unknown"
    return flavour, signals


_MEMINFO_LINE = re.compile(r"^([A-Za-z_()]+):\s+(\d{1,16})\s*kB\s*$")


def parse_meminfo(text: str) -> dict[str, int]:
    """/proc/meminfo → {field: bytes} for the ``Name:  123 kB`` lines; others are skipped."""
    out: dict[str, int] = {}
    for line in text.splitlines():
        match = _MEMINFO_LINE.match(line.strip())
        if match:
            out[match.group(1)] = int(match.group(2)) * 1024
    return out


# Link speeds as sysfs prints them ("32.0 GT/s PCIe", older kernels "8 GT/s") → generation.
_GT_PER_GEN = {
    "2.5": 1,
    "5": 2,
    "5.0": 2,
    "8": 3,
    "8.0": 3,
    "16": 4,
    "16.0": 4,
    "32": 5,
    "32.0": 5,
    "64": 6,
    "64.0": 6,
    "128": 7,
    "128.0": 7,
}


def parse_link_speed(text: str) -> int | None:
    """The PCIe generation of a sysfs ``*_link_speed`` value; None for "Unknown" or junk."""
    head = text.strip().split(" ", 1)[0]
    return _GT_PER_GEN.get(head) if text.strip().split(" GT/s", 1)[0] == head else None


def parse_link_width(text: str) -> int | None:
    value = parse_sysfs_int(text)
    return value if value is not None and 1 <= value <= 32 else None


# --------------------------------------------------------------------------- WSL


def classify_wsl_kernel(kernel_string: str) -> WslKind:
    """WSL kind from /proc/version or /proc/sys/kernel/osrelease (REFERENCE §4).

    WSL2 kernels carry ``microsoft-standard-WSL2`` (older: ``-microsoft-standard``, lower
    case); WSL1's emulated kernel says ``Microsoft`` with a capital M
    (``4.4.0-18985-Microsoft``, microsoft/WSL#4555). The WSL2 test comes first and is
    case-sensitive, so the two never collide."""
    if "microsoft-standard" in kernel_string:
        return "wsl2"
    if "Microsoft" in kernel_string:
        return "wsl1"
    return "none"


# --------------------------------------------------------------------------- PCI config space

PCI_EXT_CAP_START = 0x100
PCI_EXT_CAP_ID_ACS = 0x000D
_ACS_REGS_END = 8  # header u32, capability u16 at +4, control u16 at +6


# sysfs ``config`` serves unprivileged readers 64 bytes (128 for CardBus bridges);
# drivers/pci/pci-sysfs.c pci_read_config(). Root reads the device's whole config space.
NON_ROOT_CONFIG_BYTES = 128


def _truncated(source: str, length: int) -> Unavailable:
    """Reason tokens have no spaces. At most 128 bytes is what a reader without root gets
    ("truncated": the ACS check adds the hint to run as root). More than that is all the
    device (or its VM's config access, e.g. no ECAM: 256 bytes) offers, and root would not
    see more: "incomplete"."""
    kind = "truncated" if length <= NON_ROOT_CONFIG_BYTES else "incomplete"
    return Unavailable(f"config-space-{kind}:{source}:{length}-bytes")


def walk_ext_capabilities(config: bytes) -> list[tuple[int, int, int]]:
    """(offset, id, version) of each PCIe extended capability, following the chain from
    0x100 (PCIe base spec §7.6.3: header id bits 0-15, version 16-19, next 20-31).

    Stops on an all-zero or all-ones header (no capabilities / device gone), a next
    pointer of 0, below 0x100 or past the data, or an offset seen before (a loop)."""
    return _walk(config)[0]


def _walk(config: bytes) -> tuple[list[tuple[int, int, int]], bool]:
    """The capabilities, and whether the chain pointed past the end of the data."""
    caps: list[tuple[int, int, int]] = []
    seen: set[int] = set()
    offset = PCI_EXT_CAP_START
    while offset not in seen and offset >= PCI_EXT_CAP_START:
        if offset + 4 > len(config):
            return caps, True
        seen.add(offset)
        (header,) = struct.unpack_from("<I", config, offset)
        if header in (0, 0xFFFFFFFF):
            break
        caps.append((offset, header & 0xFFFF, (header >> 16) & 0xF))
        offset = (header >> 20) & 0xFFC
        if offset == 0:
            break
    return caps, False


def parse_acs(config: bytes, source: str) -> AcsFacts | Unavailable | None:
    """The ACS capability of a bridge from its config space bytes.

    ``source`` is the host path the bytes came from (it goes into the reason). Returns
    Unavailable when the bytes end at or before 0x100 — a non-root read of sysfs ``config``
    gives 64 bytes — or before the chain (or the ACS registers) ends, since part of the
    extended capabilities was never seen; None when the whole chain has no ACS capability."""
    if len(config) <= PCI_EXT_CAP_START:
        return _truncated(source, len(config))
    caps, cut_short = _walk(config)
    for offset, cap_id, _version in caps:
        if cap_id != PCI_EXT_CAP_ID_ACS:
            continue
        if offset + _ACS_REGS_END > len(config):
            return _truncated(source, len(config))
        capability, control = struct.unpack_from("<HH", config, offset + 4)
        return AcsFacts(
            capability_offset=offset,
            capability=capability,
            control=control,
            enabled=acs_bit_names(control),
        )
    return _truncated(source, len(config)) if cut_short else None


def acs_bit_names(register: int) -> list[str]:
    """Names of the ACS bits set in a capability or control register, in bit order."""
    return [
        name for name, bit in sorted(ACS_BITS.items(), key=lambda kv: kv[1]) if register >> bit & 1
    ]


def parse_sysfs_int(text: str) -> int | None:
    """A sysfs number such as ``0x10de\\n``, ``0x030000\\n`` or ``-1\\n``; None if not one."""
    value = text.strip()
    if not value:
        return None
    try:
        return int(value, 0)
    except ValueError:
        try:  # "0x" values are hex; anything else that int(.., 0) rejects, e.g. "010"
            return int(value, 10)
        except ValueError:
            return None


_BDF = re.compile(r"[0-9a-f]{4,8}:[0-9a-f]{2}:[0-9a-f]{2}\.[0-7]\Z")


def is_bdf(name: str) -> bool:
    """``0000:41:00.0``: a PCI domain:bus:device.function as sysfs spells it (Hyper-V
    under WSL2 uses longer domains such as ``a1b2c3d4:00:00.0``)."""
    return bool(_BDF.match(name))


def upstream_bridges(resolved_path: str) -> list[str]:
    """The bridges above a device from its resolved sysfs path, nearest first:
    ``/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0`` → ``["0000:40:01.1"]``.
    Parts that are not BDFs (``pci0000:40``, Hyper-V VMBus GUIDs) are skipped."""
    parts = [part for part in resolved_path.split("/") if part]
    return [part for part in reversed(parts[:-1]) if is_bdf(part)]


def render_os_release(fields: Mapping[str, str]) -> str:
    """The inverse of :func:`parse_os_release` for round-trip tests and fixtures."""
    return "".join(f"{key}={shlex.quote(value)}\n" for key, value in fields.items())


# Linux drivers/pci/pcie/aer.c (aer_stats_dev_attr): one "%s %llu" line per named error bit
# (unnamed bits with a count as "<array>_bit[N] %llu"), then "TOTAL_ERR_<kind> %llu".
_AER_LINE = re.compile(r"([A-Za-z_][A-Za-z0-9_]*(?:\[\d+\])?) (\d{1,20})")
_COUNTER_MAX = 1 << 63


def parse_aer_counters(text: str) -> tuple[int | None, dict[str, int]]:
    """An ``aer_dev_*`` file: (its TOTAL_ERR_* value, every other counter that is not zero).
    A line that is no ``name count`` is ignored; a count beyond 2**63 is not believed."""
    total: int | None = None
    nonzero: dict[str, int] = {}
    for line in text.splitlines():
        match = _AER_LINE.fullmatch(line.strip())
        if match is None:
            continue
        name, count = match.group(1), int(match.group(2))
        if count >= _COUNTER_MAX:
            continue
        if name.startswith("TOTAL_ERR_"):
            total = count
        elif count:
            nonzero[name] = count
    return total, nonzero
