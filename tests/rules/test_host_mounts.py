"""A containerised run that lacks a host mount names the mount to add (issue 37;
checks/host_mounts.toml, rules/mounts.py), in docker run and DaemonSet terms; a host's
report is unchanged (tests/test_golden.py keeps the fixtures' outputs byte-identical).

The facts here are COMPOSED, not captured: a realistic fixture with the reasons
collect/hostfs.py gives when the host's /proc or /sys is not under the root
(``not-mounted:<path>``: tests/test_hostfs.py and tests/test_collect_platform.py read them
from host trees; tests/test_image.py runs the image without those mounts)."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.facts.document import (
    ContainerFacts,
    Facts,
    ModuleFlavour,
    Unavailable,
    WslFacts,
    decode_facts,
)
from blackwell_doctor.report.results import Result, Severity, Status
from blackwell_doctor.ruledata.mounts import load_host_mounts
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.mounts import mount_summary, unreadable_targets
from tests.conftest import FACTS_FIXTURES, REPO

COMPOSED = REPO / "tests" / "fixtures" / "container" / "no-host-mounts.json"


def _remedies(facts: Facts) -> dict[str, str]:
    return {
        r.id: r.remedy.summary if r.remedy is not None else ""
        for r in evaluate(facts).results
        if r.status in (Status.ERROR, Status.FAIL)
    }


def test_the_composed_daemonset_without_proc_and_sys_names_both_volumes() -> None:
    facts = decode_facts(COMPOSED.read_bytes())
    assert facts.provenance is not None
    assert facts.provenance.startswith("composed")
    remedies = _remedies(facts)
    # gpu.present: the PCI bus (/sys) unread; its own words stay, the mount is added.
    assert "-v /sys:/host/sys:ro" in remedies["gpu.present"]
    assert "the host-sys volume (hostPath /sys)" in remedies["gpu.present"]
    assert remedies["gpu.present"].startswith("The driver does not answer")
    # platform.wsl: "not evaluated" on /proc/version, now with the mount.
    assert "-v /proc:/host/proc:ro" in remedies["platform.wsl"]
    assert "the host-proc volume (hostPath /proc)" in remedies["platform.wsl"]
    # Read through --host-root /host already: not told to pass it again.
    assert "--host-root" not in remedies["platform.wsl"].split(": run it with ")[1]


def _in_container(facts: Facts, *, proc: bool, sys: bool, container: bool = True) -> Facts:
    """``facts`` as the image run at "/" would read them with the host's ``/proc`` or
    ``/sys`` not mounted (an empty mount point: hostfs says ``not-mounted``): its own
    container (unless ``container`` is False: the same facts read on a host), those files
    unreadable."""
    platform = facts.platform
    if container:
        platform = msgspec.structs.replace(
            platform, container=ContainerFacts(in_container=True, signals=["dockerenv"])
        )
    if not proc:
        gone = Unavailable("not-mounted:/proc/driver/nvidia/version")
        platform = msgspec.structs.replace(
            platform,
            kernel_cmdline=Unavailable("not-mounted:/proc/cmdline"),
            kernel_version=Unavailable("not-mounted:/proc/version"),
            kernel_release=Unavailable("not-mounted:/proc/sys/kernel/osrelease"),
            wsl=WslFacts(kind="unknown"),  # what collect/platform.py makes of neither string
            nvidia_kernel_module=gone,
            # Neither the version nor /sys/module/nvidia/taint read (collect/platform.py).
            nvidia_module_flavour=gone if not sys else platform.nvidia_module_flavour,
        )
    facts = msgspec.structs.replace(facts, platform=platform)
    if not sys:
        facts = msgspec.structs.replace(facts, pci=Unavailable("not-mounted:/sys/bus/pci/devices"))
    return facts


HOST = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"


def test_the_checks_that_read_sys_name_its_mount_in_a_container() -> None:
    remedies = _remedies(_in_container(decode_facts(HOST.read_bytes()), proc=True, sys=False))
    named = {i: s for i, s in remedies.items() if "In a container, the host's" in s}
    assert set(named) == {"pci.iommu", "pci.acs"}, remedies
    assert "-v /sys:/host/sys:ro --host-root /host" in named["pci.iommu"]
    assert "the host-sys volume (hostPath /sys)" in named["pci.acs"]
    # A "not evaluated" with no unreadable host path gets no remedy.
    assert remedies["probe.smem_limit"] == ""


def test_the_checks_that_read_proc_name_its_mount_in_a_container() -> None:
    remedies = _remedies(_in_container(decode_facts(HOST.read_bytes()), proc=False, sys=True))
    named = {i: s for i, s in remedies.items() if "In a container, the host's" in s}
    assert "platform.wsl" in named, remedies
    # Read at "/": told to read through a host root as well.
    assert "-v /proc:/host/proc:ro --host-root /host" in named["platform.wsl"]
    assert "the host-proc volume (hostPath /proc)" in named["platform.wsl"]


@pytest.mark.parametrize("fixture", sorted(FACTS_FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_outside_a_container_no_result_names_a_mount(fixture: object) -> None:
    facts = decode_facts(fixture.read_bytes())  # type: ignore[attr-defined]
    for result in evaluate(facts).results:
        assert result.remedy is None or "In a container, the host's" not in result.remedy.summary


# --------------------------------------------------------------------------- /proc left out
# A container without the host's /proc reads neither kernel string, so the WSL verdict is
# "unknown". That is not WSL: the checks that skip under WSL judge what they can read, and
# those whose input was under /proc say "not evaluated" with the mount (issue 37).

THERMAL = FACTS_FIXTURES / "rtxpro6000x4-power-thermal.json"  # 4 GPUs, PCI, AER, NVML health
PROC_MOUNT = "-v /proc:/host/proc:ro --host-root /host"


def _results(facts: Facts) -> dict[str, Result]:
    return {r.id: r for r in evaluate(facts).results}


def _mount_named(result: Result) -> str:
    """The sentence rules/mounts.py added to ``result``'s remedy ("" when none)."""
    summary = result.remedy.summary if result.remedy is not None else ""
    at = summary.find("In a container, the host's ")
    return summary[at:] if at >= 0 else ""


def test_without_proc_no_check_skips_as_paravirtualised() -> None:
    results = _results(_in_container(decode_facts(THERMAL.read_bytes()), proc=False, sys=True))
    for result in results.values():
        assert "paravirtualised" not in result.summary, result
        assert "Windows host" not in result.summary, result
    # They read sysfs and NVML, not /proc: the host's verdict, read in the container.
    host = _results(decode_facts(THERMAL.read_bytes()))
    for check_id in ("pci.acs", "health.pcie_errors", "health.thermal", "health.power"):
        assert results[check_id].status is host[check_id].status is not Status.SKIP, check_id
    assert results["pci.iommu"].status is Status.PASS  # identity domains: no cmdline needed


def test_without_proc_a_translating_iommu_warns_and_names_the_proc_mount() -> None:
    results = _results(_in_container(decode_facts(HOST.read_bytes()), proc=False, sys=True))
    iommu = results["pci.iommu"]
    assert iommu.status is Status.WARN
    assert "the kernel command line is unreadable (not-mounted:/proc/cmdline)" in iommu.summary
    named = _mount_named(iommu)
    assert PROC_MOUNT in named
    assert results["pci.acs"].status is Status.WARN  # ACS from config space, as on the host


def test_without_proc_and_sys_module_flavour_is_not_evaluated_naming_the_proc_mount() -> None:
    facts = _in_container(decode_facts(THERMAL.read_bytes()), proc=False, sys=False)
    flavour = _results(facts)["module.flavour"]
    assert flavour.status is Status.ERROR
    assert flavour.summary == (
        "not evaluated: kernel module flavour unreadable: not-mounted:/proc/driver/nvidia/version"
    )
    named = _mount_named(flavour)
    assert PROC_MOUNT in named
    assert "the host-proc volume (hostPath /proc)" in named


def test_without_proc_the_flavour_read_from_sys_is_judged() -> None:
    facts = _in_container(decode_facts(THERMAL.read_bytes()), proc=False, sys=True)
    # /sys/module/nvidia/taint alone (collect/platform.py): P, the proprietary license.
    proprietary = ModuleFlavour(flavour="proprietary", signals=["taint:P"])
    facts = msgspec.structs.replace(
        facts,
        platform=msgspec.structs.replace(facts.platform, nvidia_module_flavour=proprietary),
    )
    flavour = _results(facts)["module.flavour"]
    assert flavour.status is Status.FAIL  # Blackwell needs the open modules
    assert _mount_named(flavour) == ""


@pytest.mark.parametrize("gpus_on_pci", [True, False])
def test_no_module_on_a_mounted_sys_is_the_hosts_answer_not_a_mount(gpus_on_pci: bool) -> None:
    # /proc not mounted, /sys mounted and without /sys/module/nvidia: no module is loaded
    # (collect/platform.py returns that not-found). A mount would change nothing.
    facts = _in_container(decode_facts(THERMAL.read_bytes()), proc=False, sys=True)
    pci = facts.pci if gpus_on_pci else msgspec.structs.replace(facts.pci, gpus=[], bridges=[])
    facts = msgspec.structs.replace(
        facts,
        pci=pci,
        platform=msgspec.structs.replace(
            facts.platform,
            nvidia_module_flavour=Unavailable("not-found:/sys/module/nvidia/taint"),
        ),
    )
    flavour = _results(facts)["module.flavour"]
    if gpus_on_pci:
        assert flavour.status is Status.ERROR
        assert "not-found:/sys/module/nvidia/taint" in flavour.summary
    else:
        assert flavour.status is Status.SKIP
        assert flavour.summary == "no NVIDIA kernel module loaded and no NVIDIA GPU on PCI"
    assert _mount_named(flavour) == ""


@pytest.mark.parametrize("container", [True, False], ids=["container", "host"])
def test_driver_consistency_without_the_module_version_is_not_evaluated(container: bool) -> None:
    # NVML and libcuda answer (the image run with --gpus all) and agree; the kernel module's
    # version is under the /proc that was not mounted. Before: "kernel module, NVML and
    # libcuda agree", a pass that never read the module.
    facts = _in_container(
        decode_facts(THERMAL.read_bytes()), proc=False, sys=True, container=container
    )
    consistency = _results(facts)["driver.consistency"]
    assert consistency.status is Status.ERROR
    assert consistency.summary == (
        "not evaluated: the kernel module's version could not be read "
        "(not-mounted:/proc/driver/nvidia/version)"
    )
    assert consistency.evidence["kernel_module"] == "not-mounted:/proc/driver/nvidia/version"
    named = _mount_named(consistency)
    if container:
        assert PROC_MOUNT in named
    else:
        assert named == ""  # read on a host at "/": no mount to add


def test_driver_consistency_with_no_driver_at_all_and_no_proc_is_not_no_driver() -> None:
    # The composed DaemonSet without host-proc/host-sys: no NVML, no libcuda in the image,
    # the module unread. Before: "no NVIDIA driver on this host", a skip.
    consistency = _results(decode_facts(COMPOSED.read_bytes()))["driver.consistency"]
    assert consistency.status is Status.ERROR
    assert "not-mounted:/proc/driver/nvidia/version" in consistency.summary
    named = _mount_named(consistency)
    assert "the host-proc volume (hostPath /proc)" in named


def test_under_wsl2_a_missing_module_is_still_the_windows_hosts() -> None:
    wsl2 = _results(decode_facts((FACTS_FIXTURES / "rtx5090-wsl2.json").read_bytes()))
    assert wsl2["driver.consistency"].status is Status.PASS
    assert wsl2["module.flavour"].status is Status.SKIP
    assert wsl2["pci.iommu"].summary.startswith("wsl2: the GPU is paravirtualised")


def test_an_unknown_platform_gets_the_linux_driver_remedy_not_the_windows_one() -> None:
    facts = _in_container(
        decode_facts((FACTS_FIXTURES / "sm120-driver580.json").read_bytes()), proc=False, sys=True
    )
    version = _results(facts)["driver.version"]
    assert version.status is Status.FAIL
    assert version.remedy is not None
    assert "Windows" not in version.remedy.summary


# --------------------------------------------------------------------------- which reasons
# A path read through the host root names its mount only when hostfs said not-mounted.


@pytest.mark.parametrize(
    ("kind", "target", "named"),
    [
        ("not-mounted", "/proc/cmdline", "-v /proc:/host/proc:ro"),
        ("not-mounted", "/sys/bus/pci/devices", "-v /sys:/host/sys:ro"),
        ("not-mounted", "/etc/os-release", "-v /etc/os-release:/host/etc/os-release:ro"),
        # On a mounted /sys: no module loaded (the host's answer); root, not a mount.
        ("not-found", "/sys/module/nvidia/taint", None),
        ("permission-denied", "/sys/bus/pci/devices/0000:41:00.0/config", None),
        # Not read through the root: not found in the container is the mount to add.
        ("not-found", "/dev/kmsg", "--device /dev/kmsg --cap-add SYSLOG"),
        ("not-found", "/var/log/vllm.log", "-v /var/log:/var/log:ro"),
    ],
)
def test_which_reasons_name_a_mount(kind: str, target: str, named: str | None) -> None:
    words = mount_summary(load_host_mounts(), "/host", [(kind, target)])
    if named is None:
        assert words is None
    else:
        assert named in (words or ""), words


def test_the_reason_kind_is_read_from_the_summary_and_evidence() -> None:
    result = Result(
        id="x.y",
        family="x",
        title="t",
        severity=Severity.MEDIUM,
        status=Status.ERROR,
        summary="not evaluated: a (not-mounted:/proc/version; not-found:/sys/x)",
        evidence={"more": ["permission-denied:/dev/kmsg", "not-mounted:/proc/version"]},
    )
    assert unreadable_targets(result) == [
        ("not-mounted", "/proc/version"),
        ("not-found", "/sys/x"),
        ("permission-denied", "/dev/kmsg"),
    ]
