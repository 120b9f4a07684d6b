"""A containerised run that lacks a host mount names the mount to add (issue 37;
checks/host_mounts.toml, rules/mounts.py), in docker run and DaemonSet terms; a host's
report is unchanged (tests/test_golden.py keeps the fixtures' outputs byte-identical)."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.facts.document import (
    ContainerFacts,
    Facts,
    Unavailable,
    WslFacts,
    decode_facts,
)
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.evaluate import evaluate
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


def _in_container(facts: Facts, *, proc: bool, sys: bool) -> Facts:
    """``facts`` as the image run at "/" would read them without the host's ``/proc`` or
    ``/sys``: its own container, those files unreadable."""
    platform = msgspec.structs.replace(
        facts.platform, container=ContainerFacts(in_container=True, signals=["dockerenv"])
    )
    if not proc:
        gone = "not-found:/proc/driver/nvidia/version"
        platform = msgspec.structs.replace(
            platform,
            kernel_cmdline=Unavailable("not-found:/proc/cmdline"),
            kernel_version=Unavailable("not-found:/proc/version"),
            kernel_release=Unavailable("not-found:/proc/sys/kernel/osrelease"),
            wsl=WslFacts(kind="unknown"),  # what collect/platform.py makes of neither string
            nvidia_kernel_module=Unavailable(gone),
            nvidia_module_flavour=Unavailable(gone),
        )
    facts = msgspec.structs.replace(facts, platform=platform)
    if not sys:
        facts = msgspec.structs.replace(
            facts, pci=Unavailable("permission-denied:/sys/bus/pci/devices")
        )
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
