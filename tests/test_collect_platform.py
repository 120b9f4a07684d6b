"""collect_platform over fake host trees built from real file contents (tests/hosttree.py)."""

from __future__ import annotations

from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.facts import (
    ContainerFacts,
    CpuFacts,
    OsRelease,
    PlatformFacts,
    Unavailable,
    WslFacts,
)
from tests.hosttree import (
    PROC_VERSION_UBUNTU_2204,
    PROC_VERSION_WSL2_OLD,
    HostTree,
    dgx_spark,
    no_gpu,
    threadripper_4x_rtx_pro_6000,
    wsl1,
    wsl2_rtx_5090,
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
    assert facts == PlatformFacts(
        hostname=Unavailable("not-found:/proc/sys/kernel/hostname"),
        kernel_release=Unavailable("not-found:/proc/sys/kernel/osrelease"),
        kernel_version=Unavailable("not-found:/proc/version"),
        kernel_cmdline=Unavailable("not-found:/proc/cmdline"),
        os_release=Unavailable("not-found:/etc/os-release"),
        wsl=WslFacts(kind="none", signals=[]),
        container=ContainerFacts(in_container=False, signals=[]),
        cpu=Unavailable("not-found:/proc/cpuinfo"),
        nvidia_kernel_module=Unavailable("not-found:/proc/driver/nvidia/version"),
    )


def test_a_directory_where_a_file_should_be_is_an_os_error_reason(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.mkdir("/proc/cmdline")
    facts = collect_platform(tree.fs, {})
    assert facts.kernel_cmdline == Unavailable("os-error-eisdir:/proc/cmdline")


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
