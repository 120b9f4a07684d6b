"""collect_platform over fake host trees built from real file contents (tests/hosttree.py)."""

from __future__ import annotations

import shutil
from collections.abc import Callable
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.facts.document import (
    ContainerFacts,
    CpuFacts,
    MemInfo,
    ModuleFlavour,
    OsRelease,
    PlatformFacts,
    Unavailable,
    VirtualizationFacts,
    WslFacts,
)
from tests.hosttree import (
    DMI_QEMU_I440FX,
    GB10_PARTS,
    PROC_VERSION_DGX_SPARK,
    PROC_VERSION_UBUNTU_2204,
    PROC_VERSION_WSL2_OLD,
    HostTree,
    arm64_cpuinfo,
    dgx_spark,
    no_gpu,
    switch_2x_rtx_pro_6000,
    threadripper_4x_rtx_pro_6000,
    vm_2x_h200,
    wsl1,
    wsl2_rtx_5090,
    x86_cpuinfo,
)


def test_threadripper_workstation_reads_every_platform_fact(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    facts = collect_platform(tree.fs, {})
    assert facts.hostname == "tr-pro-ws"
    assert facts.kernel_release == "5.15.0-91-generic"
    assert facts.kernel_version == PROC_VERSION_UBUNTU_2204.strip()
    assert facts.kernel_cmdline == (
        "BOOT_IMAGE=/vmlinuz-5.15.0-91-generic root=/dev/mapper/ubuntu--vg-ubuntu--lv ro "
        "quiet splash vt.handoff=7"
    )
    # /etc/os-release is a relative symlink to ../usr/lib/os-release, as on Ubuntu.
    assert facts.os_release == OsRelease(
        id="ubuntu", version_id="22.04", pretty_name="Ubuntu 22.04.4 LTS"
    )
    assert facts.wsl == WslFacts(kind="none", signals=[])
    assert facts.container == ContainerFacts(in_container=False, signals=[])
    assert facts.cpu == CpuFacts(
        vendor="AuthenticAMD",
        model="AMD Ryzen Threadripper PRO 5975WX 32-Cores",
        logical_cpus=64,
    )
    assert facts.nvidia_kernel_module == "580.95.05"


def test_wsl2_records_every_signal_in_order(tmp_path: Path) -> None:
    tree = wsl2_rtx_5090(tmp_path)
    facts = collect_platform(tree.fs, tree.environ)
    assert facts.wsl == WslFacts(
        kind="wsl2",
        signals=[
            "proc-version:microsoft-standard-WSL2",
            "osrelease:microsoft-standard-WSL2",
            "binfmt:WSLInterop",
            "dev-dxg",
            "usr-lib-wsl-lib",
            "env:WSL_DISTRO_NAME",
            "env:WSL_INTEROP",
        ],
    )
    # Under WSL2 the NVIDIA kernel module lives in Windows: no /proc/driver/nvidia.
    assert facts.nvidia_kernel_module == Unavailable("not-found:/proc/driver/nvidia/version")
    assert facts.cpu == CpuFacts(
        vendor="AuthenticAMD", model="AMD Ryzen 9 9950X 16-Core Processor", logical_cpus=32
    )


def test_wsl2_under_a_systemd_service_has_no_env_but_is_still_wsl2(tmp_path: Path) -> None:
    tree = wsl2_rtx_5090(tmp_path)
    facts = collect_platform(tree.fs, {})
    assert facts.wsl.kind == "wsl2"
    assert not any(s.startswith("env:") for s in facts.wsl.signals)


def test_older_wsl2_kernel_string_is_wsl2(tmp_path: Path) -> None:
    tree = wsl2_rtx_5090(tmp_path)
    tree.write("/proc/version", PROC_VERSION_WSL2_OLD)
    tree.write("/proc/sys/kernel/osrelease", "4.19.67-microsoft-standard\n")
    facts = collect_platform(tree.fs, {})
    assert facts.wsl.kind == "wsl2"
    assert facts.wsl.signals[:2] == [
        "proc-version:microsoft-standard",
        "osrelease:microsoft-standard",
    ]


def test_custom_wsl2_kernel_is_recognised_by_dxg_alone(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/version", "Linux version 6.6.36-custom (me@box) #1 SMP\n")
    tree.write("/dev/dxg", b"")
    facts = collect_platform(tree.fs, {})
    assert facts.wsl == WslFacts(kind="wsl2", signals=["dev-dxg"])


def test_wsl1(tmp_path: Path) -> None:
    tree = wsl1(tmp_path)
    facts = collect_platform(tree.fs, tree.environ)
    assert facts.wsl == WslFacts(
        kind="wsl1",
        signals=[
            "proc-version:Microsoft",
            "osrelease:Microsoft",
            "binfmt:WSLInterop",
            "env:WSL_DISTRO_NAME",
        ],
    )
    assert facts.kernel_release == "4.4.0-18985-Microsoft"
    assert facts.os_release == OsRelease(
        id="ubuntu", version_id="18.04", pretty_name="Ubuntu 18.04.6 LTS"
    )


def test_wsl_interop_late_is_a_signal(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/sys/fs/binfmt_misc/WSLInterop-late", "enabled\n")
    facts = collect_platform(tree.fs, {})
    assert facts.wsl == WslFacts(kind="wsl2", signals=["binfmt:WSLInterop-late"])


def test_dgx_spark_arm64_cpu_has_no_model_name_but_a_model(tmp_path: Path) -> None:
    tree = dgx_spark(tmp_path)
    facts = collect_platform(tree.fs, {})
    assert facts.cpu == CpuFacts(vendor="ARM", model="Cortex-X925 + Cortex-A725", logical_cpus=20)
    assert facts.nvidia_kernel_module == "580.95.05"
    assert facts.os_release == OsRelease(
        id="ubuntu", version_id="24.04", pretty_name="Ubuntu 24.04.3 LTS"
    )


def test_os_release_falls_back_to_usr_lib(tmp_path: Path) -> None:
    tree = no_gpu(tmp_path)
    assert not tree.fs.exists("/etc/os-release")
    facts = collect_platform(tree.fs, {})
    assert facts.os_release == OsRelease(
        id="debian", version_id="12", pretty_name="Debian GNU/Linux 12 (bookworm)"
    )
    assert facts.cpu == CpuFacts(
        vendor="GenuineIntel", model="Intel(R) Xeon(R) Gold 6254 CPU @ 3.10GHz", logical_cpus=72
    )


def test_absolute_os_release_symlink_is_read_inside_the_host_root(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/usr/lib/os-release", 'ID=fakeos\nVERSION_ID="0.1"\n')
    # Followed naively, this link would read the test machine's own /usr/lib/os-release.
    tree.link("/etc/os-release", "/usr/lib/os-release", absolute=True)
    facts = collect_platform(tree.fs, {})
    assert facts.os_release == OsRelease(id="fakeos", version_id="0.1", pretty_name=None)


def test_empty_root_gives_reasons_not_exceptions(tmp_path: Path) -> None:
    facts = collect_platform(HostFS(tmp_path), {})
    # Nothing is mounted under the root: every read says so (not-mounted), none says the
    # host lacks the file (issue 37: a container run without the host's mounts).
    assert facts == PlatformFacts(
        hostname=Unavailable("not-mounted:/proc/sys/kernel/hostname"),
        kernel_release=Unavailable("not-mounted:/proc/sys/kernel/osrelease"),
        kernel_version=Unavailable("not-mounted:/proc/version"),
        kernel_cmdline=Unavailable("not-mounted:/proc/cmdline"),
        os_release=Unavailable("not-mounted:/etc/os-release"),
        # Nothing read: not "none" (an empty host root is no evidence of native Linux).
        wsl=WslFacts(kind="unknown", signals=[]),
        container=ContainerFacts(in_container=False, signals=[]),
        virtualization=VirtualizationFacts(in_vm=None, signals=[]),
        machine=Unavailable("not-mounted:/proc/sys/kernel/arch"),
        cpu=Unavailable("not-mounted:/proc/cpuinfo"),
        # Not "no module loaded": neither its version nor its taint could be read.
        nvidia_kernel_module=Unavailable("not-mounted:/proc/driver/nvidia/version"),
        nvidia_module_flavour=Unavailable("not-mounted:/proc/driver/nvidia/version"),
        meminfo=Unavailable("not-mounted:/proc/meminfo"),
    )


def _without(tree: HostTree, top: str) -> HostTree:
    """``tree`` as a container reads it when the host's ``top`` (proc, sys) is not mounted
    under the host root."""
    shutil.rmtree(tree.root / top)
    return tree


def test_without_proc_the_module_flavour_is_read_from_sys(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path)
    # A loaded module has its taint flags in sysfs (kernel/module/main.c); the open module
    # is out of tree and unsigned here: O and E, no P.
    tree.write("/sys/module/nvidia/taint", "OE\n")
    facts = collect_platform(_without(tree, "proc").fs, {})
    assert facts.wsl == WslFacts(kind="unknown", signals=[])
    assert facts.nvidia_kernel_module == Unavailable("not-mounted:/proc/driver/nvidia/version")
    assert facts.nvidia_module_flavour == ModuleFlavour(flavour="open", signals=["taint:OE"])


def test_without_proc_and_no_module_in_sysfs_no_module_is_loaded(tmp_path: Path) -> None:
    # /sys is there and has no /sys/module/nvidia: that is the host's answer.
    facts = collect_platform(_without(threadripper_4x_rtx_pro_6000(tmp_path), "proc").fs, {})
    assert facts.nvidia_module_flavour == Unavailable("not-found:/sys/module/nvidia/taint")


def test_without_sys_the_module_flavour_is_read_from_proc(tmp_path: Path) -> None:
    facts = collect_platform(_without(threadripper_4x_rtx_pro_6000(tmp_path), "sys").fs, {})
    assert facts.nvidia_kernel_module == "580.95.05"
    assert facts.nvidia_module_flavour == ModuleFlavour(flavour="open", signals=["version:open"])
    assert facts.wsl.kind == "none"


def test_without_proc_and_sys_the_module_is_unread_not_absent(tmp_path: Path) -> None:
    tree = _without(_without(threadripper_4x_rtx_pro_6000(tmp_path), "proc"), "sys")
    facts = collect_platform(tree.fs, {})
    gone = Unavailable("not-mounted:/proc/driver/nvidia/version")
    assert (facts.nvidia_kernel_module, facts.nvidia_module_flavour) == (gone, gone)


def test_a_directory_where_a_file_should_be_is_not_a_regular_file(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.mkdir("/proc/cmdline")
    facts = collect_platform(tree.fs, {})
    assert facts.kernel_cmdline == Unavailable("not-a-regular-file:/proc/cmdline")


@pytest.mark.parametrize(
    ("files", "environ", "signals"),
    [
        ({"/.dockerenv": ""}, {}, ["dockerenv"]),
        (
            {"/run/.containerenv": ""},
            {"container": "podman"},
            ["containerenv", "env:container=podman"],
        ),
        (
            {"/proc/1/cgroup": "12:pids:/docker/3f2a9c1d0e7b\n11:memory:/docker/3f2a9c1d0e7b\n"},
            {},
            ["cgroup:docker"],
        ),
        (
            {"/proc/1/cgroup": "0::/kubepods/burstable/pod1c2d/cri-containerd-9a8b\n"},
            {},
            ["cgroup:kubepods", "cgroup:containerd"],
        ),
        ({"/proc/1/cgroup": "0::/init.scope\n"}, {}, []),
    ],
)
def test_container_signals(
    tmp_path: Path, files: dict[str, str], environ: dict[str, str], signals: list[str]
) -> None:
    tree = HostTree(tmp_path)
    for path, content in files.items():
        tree.write(path, content)
    facts = collect_platform(tree.fs, environ)
    assert facts.container == ContainerFacts(in_container=bool(signals), signals=signals)


def test_unrecognised_nvidia_version_file_is_unavailable(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/driver/nvidia/version", "something else entirely\n")
    facts = collect_platform(tree.fs, {})
    assert facts.nvidia_kernel_module == Unavailable("unparsed:/proc/driver/nvidia/version")


def test_platform_facts_survive_a_json_round_trip(tmp_path: Path) -> None:
    tree = wsl2_rtx_5090(tmp_path)
    facts = collect_platform(tree.fs, tree.environ)
    decoded = msgspec.json.decode(msgspec.json.encode(facts), type=PlatformFacts)
    assert decoded == facts


# --------------------------------------------------------------------------- WSL "unknown"


@pytest.mark.parametrize(
    ("files", "kind"),
    [
        ({}, "unknown"),
        ({"/proc/version": PROC_VERSION_UBUNTU_2204}, "none"),
        ({"/proc/sys/kernel/osrelease": "5.15.0-91-generic\n"}, "none"),
        ({"/dev/dxg": ""}, "wsl2"),  # a WSL marker decides even without kernel strings
    ],
)
def test_wsl_is_unknown_only_when_no_kernel_string_and_no_marker(
    tmp_path: Path, files: dict[str, str], kind: str
) -> None:
    tree = HostTree(tmp_path)
    for path, content in files.items():
        tree.write(path, content)
    assert collect_platform(tree.fs, {}).wsl.kind == kind


def test_wsl_env_alone_is_a_signal_not_unknown(tmp_path: Path) -> None:
    facts = collect_platform(HostTree(tmp_path).fs, {"WSL_DISTRO_NAME": "Ubuntu"})
    assert facts.wsl == WslFacts(kind="wsl2", signals=["env:WSL_DISTRO_NAME"])


# --------------------------------------------------------------------------- machine


@pytest.mark.parametrize(
    ("build", "machine"),
    [
        (dgx_spark, "aarch64"),
        (no_gpu, "x86_64"),
        (vm_2x_h200, "x86_64"),
        # Ubuntu 22.04's 5.15 kernel predates /proc/sys/kernel/arch (Linux 6.1).
        (threadripper_4x_rtx_pro_6000, Unavailable("not-found:/proc/sys/kernel/arch")),
    ],
)
def test_machine_comes_from_proc_sys_kernel_arch(
    tmp_path: Path, build: Callable[[Path], HostTree], machine: str | Unavailable
) -> None:
    assert collect_platform(build(tmp_path).fs, {}).machine == machine


def test_empty_arch_file_is_unparsed(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/sys/kernel/arch", "\n")
    assert collect_platform(tree.fs, {}).machine == Unavailable("unparsed:/proc/sys/kernel/arch")


# --------------------------------------------------------------------------- virtualization


@pytest.mark.parametrize(
    ("build", "expected"),
    [
        # Bare metal: x86 flags without "hypervisor", and a real vendor's DMI.
        (threadripper_4x_rtx_pro_6000, VirtualizationFacts(in_vm=False, signals=[])),
        (switch_2x_rtx_pro_6000, VirtualizationFacts(in_vm=False, signals=[])),
        (no_gpu, VirtualizationFacts(in_vm=False, signals=[])),
        # arm64 has no hypervisor flag; the DMI strings are NVIDIA's.
        (dgx_spark, VirtualizationFacts(in_vm=False, signals=[])),
        # WSL2 runs in a Hyper-V VM without SMBIOS: the CPU flag says so.
        (wsl2_rtx_5090, VirtualizationFacts(in_vm=True, signals=["cpuinfo:hypervisor"])),
        # The H200 capture's guest (Firecracker: no SMBIOS).
        (vm_2x_h200, VirtualizationFacts(in_vm=True, signals=["cpuinfo:hypervisor"])),
    ],
)
def test_virtualization_of_the_ready_made_hosts(
    tmp_path: Path, build: Callable[[Path], HostTree], expected: VirtualizationFacts
) -> None:
    assert collect_platform(build(tmp_path).fs, {}).virtualization == expected


def test_qemu_guest_with_smbios_has_a_dmi_signal_too(tmp_path: Path) -> None:
    facts = collect_platform(vm_2x_h200(tmp_path, smbios=True).fs, {})
    assert facts.virtualization == VirtualizationFacts(
        in_vm=True,
        signals=["cpuinfo:hypervisor", f"dmi:sys_vendor={DMI_QEMU_I440FX['sys_vendor']}"],
    )


def _arm64_host(tmp_path: Path) -> HostTree:
    tree = HostTree(tmp_path)
    tree.write("/proc/version", PROC_VERSION_DGX_SPARK)
    tree.write("/proc/cpuinfo", arm64_cpuinfo(GB10_PARTS))
    return tree


def test_arm64_without_dmi_cannot_tell(tmp_path: Path) -> None:
    facts = collect_platform(_arm64_host(tmp_path).fs, {})
    assert facts.virtualization == VirtualizationFacts(in_vm=None, signals=[])


def test_arm64_kvm_guest_is_told_by_dmi(tmp_path: Path) -> None:
    tree = _arm64_host(tmp_path)
    # QEMU's "virt" machine with edk2 (arm64 cloud guests).
    tree.dmi({"sys_vendor": "QEMU", "product_name": "KVM Virtual Machine"})
    facts = collect_platform(tree.fs, {})
    assert facts.virtualization == VirtualizationFacts(
        in_vm=True, signals=["dmi:sys_vendor=QEMU", "dmi:product_name=KVM Virtual Machine"]
    )


def test_hyper_v_guest_and_azure(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.dmi(
        {
            "sys_vendor": "Microsoft Corporation",
            "product_name": "Virtual Machine",
            "bios_vendor": "Microsoft Corporation",
        }
    )
    facts = collect_platform(tree.fs, {})
    assert facts.virtualization == VirtualizationFacts(
        in_vm=True,
        signals=["dmi:sys_vendor=Microsoft Corporation", "dmi:product_name=Virtual Machine"],
    )


def test_xen_guest_is_told_by_sys_hypervisor(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/sys/hypervisor/type", "xen\n")
    facts = collect_platform(tree.fs, {})
    assert facts.virtualization == VirtualizationFacts(in_vm=True, signals=["sys-hypervisor:xen"])


def test_x86_flags_alone_say_bare_metal(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write(
        "/proc/cpuinfo",
        x86_cpuinfo(
            vendor_id="AuthenticAMD",
            family=25,
            model=8,
            model_name="AMD EPYC 7763 64-Core Processor",
            logical=2,
            cores=2,
            mhz="2450.000",
        ),
    )
    facts = collect_platform(tree.fs, {})
    assert facts.virtualization == VirtualizationFacts(in_vm=False, signals=[])


# /proc/driver/nvidia/version first lines as printed: the open module (a public 580.95.05
# report) and the proprietary one (a public dmesg of 580.105.08 loading, as NVRM prints it).
OPEN_VERSION = (
    "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  580.95.05  Release Build  "
    "(dvs-builder@U22-I3-AE18-23-3)  Tue Sep 23 09:55:41 UTC 2025\n"
    "GCC version:  gcc version 13.3.0 (Ubuntu 13.3.0-6ubuntu2~24.04)\n"
)
PROPRIETARY_VERSION = (
    "NVRM version: NVIDIA UNIX x86_64 Kernel Module  580.105.08  Wed Oct 29 23:15:11 UTC 2025\n"
)


@pytest.mark.parametrize(
    ("version", "taint", "flavour"),
    [
        (OPEN_VERSION, "OE\n", "open"),
        (PROPRIETARY_VERSION, "POE\n", "proprietary"),
        (None, "POE\n", "proprietary"),  # /proc/driver/nvidia/version hidden (a container)
    ],
)
def test_module_flavour_from_version_and_taint(
    tmp_path: Path, version: str | None, taint: str, flavour: str
) -> None:
    tree = HostTree(tmp_path)
    if version is not None:
        tree.write("/proc/driver/nvidia/version", version)
    tree.write("/sys/module/nvidia/taint", taint)
    facts = collect_platform(tree.fs, {})
    assert isinstance(facts.nvidia_module_flavour, ModuleFlavour)
    assert facts.nvidia_module_flavour.flavour == flavour


def test_meminfo_of_a_dgx_spark_sized_host(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write(
        "/proc/meminfo",
        "MemTotal:       125515168 kB\nMemFree:        22439144 kB\n"
        "MemAvailable:   64011540 kB\nBuffers:          120036 kB\n"
        "Cached:         43208540 kB\nSwapFree:       16777212 kB\n",
    )
    facts = collect_platform(tree.fs, {})
    assert facts.meminfo == MemInfo(
        total_bytes=125515168 * 1024,
        available_bytes=64011540 * 1024,
        free_bytes=22439144 * 1024,
        cached_bytes=43208540 * 1024,
        swap_free_bytes=16777212 * 1024,
    )
