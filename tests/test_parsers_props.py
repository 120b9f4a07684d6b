"""Property and example tests for every host-file parser in collect/parsers.py.

Host files can hold anything: each parser must be total (never raise) on arbitrary input,
round-trip where a writer exists, and give the documented values on real examples.
"""

from __future__ import annotations

import struct

import pytest

from blackwell_doctor.collect.parsers import (
    IOMMU_CMDLINE_KEYS,
    acs_bit_names,
    classify_wsl_kernel,
    cpuinfo_flags,
    dmi_hypervisor,
    is_bdf,
    os_release_facts,
    parse_acs,
    parse_cpuinfo,
    parse_iommu_cmdline,
    parse_nvidia_driver_version,
    parse_os_release,
    parse_sysfs_int,
    render_os_release,
    split_kernel_cmdline,
    upstream_bridges,
    walk_ext_capabilities,
)
from blackwell_doctor.facts.document import ACS_BITS, AcsFacts, CpuFacts, OsRelease, Unavailable
from tests.conftest import skip_without
from tests.hosttree import (
    ACS_CAP_TYPICAL,
    GB10_PARTS,
    NVIDIA_VERSION_OPEN_580,
    NVIDIA_VERSION_OPEN_580_ARM64,
    NVIDIA_VERSION_PROPRIETARY_550,
    OS_RELEASE_UBUNTU_2404,
    PROC_VERSION_DGX_SPARK,
    PROC_VERSION_UBUNTU_2204,
    PROC_VERSION_WSL1,
    PROC_VERSION_WSL2,
    PROC_VERSION_WSL2_OLD,
    acs_body,
    arm64_cpuinfo,
    config_space,
    ext_cap,
    root_port_config,
    x86_cpuinfo,
)

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

SRC = "/sys/bus/pci/devices/0000:40:01.1/config"

# --------------------------------------------------------------------------- os-release


def test_os_release_real_ubuntu() -> None:
    fields = parse_os_release(OS_RELEASE_UBUNTU_2404)
    assert fields["VERSION"] == "24.04.3 LTS (Noble Numbat)"
    assert fields["UBUNTU_CODENAME"] == "noble"
    assert os_release_facts(OS_RELEASE_UBUNTU_2404) == OsRelease(
        id="ubuntu", version_id="24.04", pretty_name="Ubuntu 24.04.3 LTS"
    )


def test_os_release_quoting_rules() -> None:
    text = (
        "# comment\n"
        "NAME='Arch Linux'\n"
        'PRETTY_NAME="Say \\"hi\\" for \\$5"\n'
        "ID=arch\n"
        "ID=arch2\n"  # later wins
        "not a line\n"
        "BAD KEY=1\n"
        'BROKEN="unterminated\n'
    )
    assert parse_os_release(text) == {
        "NAME": "Arch Linux",
        "PRETTY_NAME": 'Say "hi" for $5',
        "ID": "arch2",
        "BROKEN": "unterminated",
    }


@given(st.text())
def test_os_release_never_raises(text: str) -> None:
    fields = parse_os_release(text)
    assert all(isinstance(k, str) and isinstance(v, str) for k, v in fields.items())
    os_release_facts(text)


_KEYS = st.from_regex(r"[A-Z_][A-Z0-9_]{0,15}", fullmatch=True)
# One line per key: no characters str.splitlines() breaks on.
_LINE_VALUES = st.text(
    st.characters(
        blacklist_categories=("Cs", "Zl", "Zp"),
        blacklist_characters="\n\r\x0b\x0c\x1c\x1d\x1e\x85",
    )
)


@given(st.dictionaries(_KEYS, _LINE_VALUES, max_size=8))
def test_os_release_round_trips(fields: dict[str, str]) -> None:
    assert parse_os_release(render_os_release(fields)) == fields


# --------------------------------------------------------------------------- kernel cmdline


def test_iommu_cmdline_last_occurrence_wins_and_dashes_equal_underscores() -> None:
    cmdline = (
        "BOOT_IMAGE=/vmlinuz-6.8.0 root=UUID=1 ro iommu=nopt amd-iommu=off "
        'iommu.passthrough=1 "intel_iommu=on,sm_on" iommu=pt iommu.strict=0 amd_iommu=on '
        "-- iommu=off"
    )
    assert parse_iommu_cmdline(cmdline) == {
        "iommu": "pt",  # "iommu=off" after "--" belongs to init, not the kernel
        "amd_iommu": "on",
        "intel_iommu": "on,sm_on",
        "iommu.passthrough": "1",
        "iommu.strict": "0",
    }


def test_cmdline_quotes_group_words_like_next_arg() -> None:
    assert split_kernel_cmdline('a="b c" "d=e f" g') == [("a", "b c"), ("d", "e f"), ("g", None)]


@given(st.text())
def test_cmdline_parsers_never_raise(text: str) -> None:
    options = parse_iommu_cmdline(text)
    assert set(options) <= IOMMU_CMDLINE_KEYS
    split_kernel_cmdline(text)


_WORD = st.from_regex(r"[A-Za-z0-9_.,/:+]{1,12}", fullmatch=True)


@given(
    st.lists(
        st.tuples(st.sampled_from(sorted(IOMMU_CMDLINE_KEYS)), _WORD), min_size=0, max_size=10
    ),
    st.lists(st.tuples(st.from_regex(r"[a-z]{2,8}", fullmatch=True), _WORD), max_size=5),
)
def test_cmdline_options_round_trip_last_wins(
    options: list[tuple[str, str]], noise: list[tuple[str, str]]
) -> None:
    words = [f"{k}={v}" for k, v in noise if k.replace("-", "_") not in IOMMU_CMDLINE_KEYS]
    words += [f"{k}={v}" for k, v in options]
    assert parse_iommu_cmdline(" ".join(words)) == dict(options)


# --------------------------------------------------------------------------- cpuinfo


def test_cpuinfo_x86() -> None:
    text = x86_cpuinfo(
        vendor_id="AuthenticAMD",
        family=25,
        model=8,
        model_name="AMD Ryzen Threadripper PRO 5975WX 32-Cores",
        logical=64,
        cores=32,
        mhz="3600.000",
    )
    assert parse_cpuinfo(text) == CpuFacts(
        vendor="AuthenticAMD",
        model="AMD Ryzen Threadripper PRO 5975WX 32-Cores",
        logical_cpus=64,
    )


def test_cpuinfo_arm64_gb10_grace_and_nvidia_carmel() -> None:
    assert parse_cpuinfo(arm64_cpuinfo(GB10_PARTS)) == CpuFacts(
        vendor="ARM", model="Cortex-X925 + Cortex-A725", logical_cpus=20
    )
    assert parse_cpuinfo(arm64_cpuinfo([0xD4F] * 72)) == CpuFacts(
        vendor="ARM", model="Neoverse-V2", logical_cpus=72
    )
    assert parse_cpuinfo(arm64_cpuinfo([0x004] * 8, implementer=0x4E)) == CpuFacts(
        vendor="NVIDIA", model="Carmel", logical_cpus=8
    )
    # An unknown part: vendor known, no guessed model.
    assert parse_cpuinfo(arm64_cpuinfo([0xFFF] * 2)) == CpuFacts(
        vendor="ARM", model=None, logical_cpus=2
    )


@given(st.text())
def test_cpuinfo_never_raises(text: str) -> None:
    facts = parse_cpuinfo(text)
    assert facts.logical_cpus is None or facts.logical_cpus >= 1


@given(st.lists(st.sampled_from([0xD85, 0xD87, 0xD4F, 0x123]), min_size=1, max_size=40))
def test_cpuinfo_counts_every_arm64_stanza(parts: list[int]) -> None:
    facts = parse_cpuinfo(arm64_cpuinfo(parts))
    assert facts.logical_cpus == len(parts)
    assert facts.vendor == "ARM"


def _xeon(*, hypervisor: bool) -> str:
    return x86_cpuinfo(
        vendor_id="GenuineIntel",
        family=6,
        model=143,
        model_name="Intel(R) Xeon(R) Processor",
        logical=2,
        cores=2,
        mhz="2000.000",
        hypervisor=hypervisor,
    )


def test_cpuinfo_flags_x86_guest_and_host_arm64_has_none() -> None:
    guest = cpuinfo_flags(_xeon(hypervisor=True))
    host = cpuinfo_flags(_xeon(hypervisor=False))
    assert guest is not None
    assert host is not None
    assert "hypervisor" in guest
    assert "hypervisor" not in host
    assert guest - host == {"hypervisor"}
    assert cpuinfo_flags(arm64_cpuinfo(GB10_PARTS)) is None  # "Features", not "flags"


@given(st.text())
def test_cpuinfo_flags_never_raise(text: str) -> None:
    flags = cpuinfo_flags(text)
    assert flags is None or all(flag and not flag.isspace() for flag in flags)


# --------------------------------------------------------------------------- DMI


@pytest.mark.parametrize(
    ("dmi", "matched"),
    [
        ({"sys_vendor": "QEMU", "product_name": "Standard PC (Q35 + ICH9, 2009)"}, ["sys_vendor"]),
        (
            {"sys_vendor": "QEMU", "product_name": "KVM Virtual Machine"},
            ["sys_vendor", "product_name"],
        ),
        ({"sys_vendor": "Red Hat", "product_name": "KVM"}, ["product_name"]),
        (
            {"sys_vendor": "VMware, Inc.", "product_name": "VMware7,1"},
            ["sys_vendor", "product_name"],
        ),
        (
            {"sys_vendor": "innotek GmbH", "product_name": "VirtualBox"},
            ["sys_vendor", "product_name"],
        ),
        ({"sys_vendor": "Xen", "product_name": "HVM domU"}, ["sys_vendor"]),
        ({"sys_vendor": "Amazon EC2", "product_name": "p5.48xlarge"}, ["sys_vendor"]),
        ({"sys_vendor": "Google", "product_name": "Google Compute Engine"}, ["product_name"]),
        (
            {"sys_vendor": "OpenStack Foundation", "product_name": "OpenStack Nova"},
            ["sys_vendor", "product_name"],
        ),
        (
            {
                "sys_vendor": "Parallels Software International Inc.",
                "product_name": "Parallels Virtual Platform",
            },
            ["sys_vendor", "product_name"],
        ),
        (
            {"sys_vendor": "Microsoft Corporation", "product_name": "Virtual Machine"},
            ["sys_vendor", "product_name"],
        ),
        # Real hardware: a Surface laptop, an EC2 bare-metal instance, servers, DGX Spark.
        ({"sys_vendor": "Microsoft Corporation", "product_name": "Surface Laptop 5"}, []),
        ({"sys_vendor": "Amazon EC2", "product_name": "i3.metal", "bios_vendor": "Amazon EC2"}, []),
        ({"sys_vendor": "Dell Inc.", "product_name": "PowerEdge R740"}, []),
        ({"sys_vendor": "NVIDIA", "product_name": "NVIDIA_DGX_Spark"}, []),
        ({"sys_vendor": "LENOVO", "product_name": "30E0CTO1WW"}, []),
    ],
)
def test_dmi_hypervisor_table(dmi: dict[str, str], matched: list[str]) -> None:
    assert dmi_hypervisor(dmi) == matched


@given(
    st.dictionaries(
        st.sampled_from(["sys_vendor", "product_name", "board_vendor", "bios_vendor"]), st.text()
    )
)
def test_dmi_hypervisor_is_total_and_returns_its_keys(dmi: dict[str, str]) -> None:
    assert set(dmi_hypervisor(dmi)) <= set(dmi)


# --------------------------------------------------------------------------- NVIDIA version


def test_nvidia_version_open_and_proprietary() -> None:
    assert parse_nvidia_driver_version(NVIDIA_VERSION_OPEN_580) == "580.95.05"
    assert parse_nvidia_driver_version(NVIDIA_VERSION_OPEN_580_ARM64) == "580.95.05"
    assert parse_nvidia_driver_version(NVIDIA_VERSION_PROPRIETARY_550) == "550.54.14"
    # nix-community/nixGL#121: a two-part version and a local build host
    assert (
        parse_nvidia_driver_version(
            "NVRM version: NVIDIA UNIX Open Kernel Module for x86_64  525.60.11  Release Build"
            "  (archlinux-builder@localhost)  \nGCC version:  gcc version 12.2.0 (GCC) \n"
        )
        == "525.60.11"
    )
    assert parse_nvidia_driver_version("GCC version: 13.3.0\n") is None


@given(st.text())
def test_nvidia_version_never_raises(text: str) -> None:
    result = parse_nvidia_driver_version(text)
    assert result is None or result[0].isdigit()


@given(
    st.integers(100, 999),
    st.integers(0, 255),
    st.one_of(st.none(), st.integers(0, 99)),
    st.sampled_from(["x86_64", "aarch64", "ppc64le"]),
    st.booleans(),
)
def test_nvidia_version_round_trips(
    major: int, minor: int, patch: int | None, arch: str, open_module: bool
) -> None:
    version = f"{major}.{minor:02d}" + ("" if patch is None else f".{patch:02d}")
    line = (
        f"NVRM version: NVIDIA UNIX Open Kernel Module for {arch}  {version}  Release Build  "
        "(dvs-builder@U16-I3-B03-4-3)  Tue Sep 23 09:48:11 UTC 2025\n"
        if open_module
        else f"NVRM version: NVIDIA UNIX {arch} Kernel Module  {version}  Thu Feb 22 2024\n"
    )
    assert parse_nvidia_driver_version(line) == version


# --------------------------------------------------------------------------- WSL


def test_wsl_kernel_strings() -> None:
    assert classify_wsl_kernel(PROC_VERSION_WSL2) == "wsl2"
    assert classify_wsl_kernel("5.15.167.4-microsoft-standard-WSL2") == "wsl2"
    assert classify_wsl_kernel(PROC_VERSION_WSL2_OLD) == "wsl2"
    assert classify_wsl_kernel(PROC_VERSION_WSL1) == "wsl1"
    assert classify_wsl_kernel("4.4.0-18985-Microsoft") == "wsl1"
    assert classify_wsl_kernel(PROC_VERSION_UBUNTU_2204) == "none"
    assert classify_wsl_kernel(PROC_VERSION_DGX_SPARK) == "none"


@given(st.text(), st.text())
def test_wsl_classification_is_total_and_wsl2_wins(prefix: str, suffix: str) -> None:
    assert classify_wsl_kernel(prefix + suffix) in {"none", "wsl1", "wsl2"}
    assert classify_wsl_kernel(prefix + "microsoft-standard-WSL2" + suffix) == "wsl2"


# --------------------------------------------------------------------------- ACS


def test_acs_on_a_real_layout_root_port() -> None:
    assert parse_acs(root_port_config(0x1483), SRC) == AcsFacts(
        capability_offset=0x2A0,
        capability=ACS_CAP_TYPICAL,
        control=0x001D,
        enabled=["SrcValid", "ReqRedir", "CmpltRedir", "UpstreamFwd"],
    )


def test_acs_control_all_off_enables_nothing() -> None:
    facts = parse_acs(root_port_config(0x1483, acs_control=0), SRC)
    assert isinstance(facts, AcsFacts)
    assert facts.enabled == []


def test_acs_truncated_config_says_so() -> None:
    # 64 bytes: what sysfs gives a reader without root (128 for CardBus). The token has
    # no spaces, and keeps "truncated", which the ACS check keys its "run as root" hint on.
    for length in (0, 64, 128):
        assert parse_acs(root_port_config(0x1483)[:length], SRC) == Unavailable(
            f"config-space-truncated:{SRC}:{length}-bytes"
        )


def test_acs_config_root_could_not_extend_is_incomplete_not_truncated() -> None:
    # 256 bytes: a root read of a device without extended config space (no ECAM in the
    # VM, conventional PCI); 300: a chain pointing past the data. Root would not see more,
    # so the reason must not say "truncated" (the check would then tell to run as root).
    for length in (129, 256, 300):
        result = parse_acs(root_port_config(0x1483)[:length], SRC)
        assert result == Unavailable(f"config-space-incomplete:{SRC}:{length}-bytes")


def test_acs_registers_cut_off_is_incomplete_not_a_guess() -> None:
    config = root_port_config(0x1483)[: 0x2A0 + 6]
    assert parse_acs(config, SRC) == Unavailable(f"config-space-incomplete:{SRC}:{0x2A0 + 6}-bytes")


def test_chain_running_past_the_data_is_incomplete_not_absent() -> None:
    # 512 bytes read, but the chain continues to ACS at 0x2a0: "no ACS" would be a guess.
    result = parse_acs(root_port_config(0x1483)[:0x200], SRC)
    assert result == Unavailable(f"config-space-incomplete:{SRC}:512-bytes")


def test_no_acs_capability_is_none() -> None:
    config = config_space(0x1000, 0xC030, 0x060400, ext_caps=[(0x100, ext_cap(0x0001, 2))])
    assert parse_acs(config, SRC) is None
    assert parse_acs(bytes(4096), SRC) is None  # no extended capabilities at all
    assert parse_acs(b"\xff" * 4096, SRC) is None  # device gone: all ones


def test_capability_loop_terminates() -> None:
    config = bytearray(4096)
    # AER at 0x100 pointing at 0x140, which points back at 0x100.
    struct.pack_into("<I", config, 0x100, 0x0001 | (2 << 16) | (0x140 << 20))
    struct.pack_into("<I", config, 0x140, 0x0019 | (1 << 16) | (0x100 << 20))
    assert [c[0] for c in walk_ext_capabilities(bytes(config))] == [0x100, 0x140]
    assert parse_acs(bytes(config), SRC) is None


def test_next_pointer_below_0x100_or_past_the_end_stops() -> None:
    config = bytearray(0x200)
    struct.pack_into("<I", config, 0x100, 0x0001 | (1 << 16) | (0x040 << 20))
    assert walk_ext_capabilities(bytes(config)) == [(0x100, 0x0001, 1)]
    struct.pack_into("<I", config, 0x100, 0x0001 | (1 << 16) | (0xFFC << 20))
    assert walk_ext_capabilities(bytes(config)) == [(0x100, 0x0001, 1)]
    assert isinstance(parse_acs(bytes(config), SRC), Unavailable)


@given(st.binary(max_size=4200))
def test_acs_on_random_bytes_is_total(config: bytes) -> None:
    result = parse_acs(config, SRC)
    assert result is None or isinstance(result, AcsFacts | Unavailable)
    if len(config) <= 0x100:
        assert isinstance(result, Unavailable)
    if isinstance(result, Unavailable):
        kind = "truncated" if len(config) <= 128 else "incomplete"
        assert result.reason == f"config-space-{kind}:{SRC}:{len(config)}-bytes"
        assert " " not in result.reason
    if isinstance(result, AcsFacts):
        assert 0x100 <= result.capability_offset <= len(config) - 8
        assert set(result.enabled) <= set(ACS_BITS)


@given(st.binary(min_size=0x104, max_size=4096))
def test_capability_walk_visits_each_offset_once(config: bytes) -> None:
    caps = walk_ext_capabilities(config)
    offsets = [offset for offset, _, _ in caps]
    assert len(offsets) == len(set(offsets))
    assert all(0x100 <= o <= len(config) - 4 for o in offsets)


@given(
    st.lists(st.sampled_from([0x0001, 0x000B, 0x0019, 0x001E, 0x0010]), max_size=6),
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFFFF),
)
def test_acs_found_anywhere_in_a_valid_chain(before: list[int], cap: int, ctrl: int) -> None:
    offsets = [0x100 + 0x40 * i for i in range(len(before) + 1)]
    caps = [(o, ext_cap(cid, 1)) for o, cid in zip(offsets, before, strict=False)]
    caps.append((offsets[-1], ext_cap(0x000D, 1, acs_body(cap, ctrl))))
    config = config_space(0x1022, 0x1483, 0x060400, header_type=1, ext_caps=caps)
    assert parse_acs(config, SRC) == AcsFacts(
        capability_offset=offsets[-1],
        capability=cap,
        control=ctrl,
        enabled=acs_bit_names(ctrl),
    )


@given(st.integers(0, 0xFFFF))
def test_acs_bit_names_match_the_bits(register: int) -> None:
    names = acs_bit_names(register)
    assert names == [
        n for n, b in sorted(ACS_BITS.items(), key=lambda kv: kv[1]) if register >> b & 1
    ]
    assert sum(1 << ACS_BITS[n] for n in names) == register & 0x7F


# --------------------------------------------------------------------------- sysfs values


@given(st.text())
def test_sysfs_int_never_raises(text: str) -> None:
    parse_sysfs_int(text)


@given(st.integers(0, 0xFFFFFF))
def test_sysfs_hex_round_trips(value: int) -> None:
    assert parse_sysfs_int(f"0x{value:06x}\n") == value


def test_sysfs_int_examples() -> None:
    assert parse_sysfs_int("0x10de\n") == 0x10DE
    assert parse_sysfs_int("-1\n") == -1
    assert parse_sysfs_int("0\n") == 0
    assert parse_sysfs_int("\n") is None
    assert parse_sysfs_int("nvidia\n") is None


_BDFS = st.builds(
    "{:04x}:{:02x}:{:02x}.{}".format,
    st.integers(0, 0xFFFF),
    st.integers(0, 0xFF),
    st.integers(0, 0x1F),
    st.integers(0, 7),
)


@given(st.lists(_BDFS, min_size=1, max_size=6))
def test_upstream_bridges_round_trip(chain: list[str]) -> None:
    path = "/sys/devices/pci" + chain[0][:7] + "/" + "/".join(chain)
    assert all(is_bdf(b) for b in chain)
    assert upstream_bridges(path) == list(reversed(chain[:-1]))


def test_upstream_bridges_skip_non_bdf_parts() -> None:
    path = (
        "/sys/devices/LNXSYSTM:00/LNXSYBUS:00/ACPI0004:00/VMBUS:00/"
        "2bec7c4d-1f5a-4b1e-9d8b-3c2a1e0f9a77/pci2bec:00/2bec:00:00.0"
    )
    assert upstream_bridges(path) == []
    assert upstream_bridges("/sys/devices/pci0000:40/0000:40:01.1/0000:41:00.0") == ["0000:40:01.1"]


@given(st.text())
def test_upstream_bridges_never_raise(path: str) -> None:
    assert all(is_bdf(b) for b in upstream_bridges(path))
