"""`check --select` on a real GPU host collects only what the selected checks read (issue 32).

Marked ``gpu``: skipped where no NVIDIA driver answers (CI, where
tests/test_collect_selection.py drives the same through the collector seams). What a run
left out is in its facts (``--embed-facts``) as ``not-collected:--select``; what it
collected is the real thing.
"""

from __future__ import annotations

import json
import subprocess
import sys
from typing import Any

import pytest

pytestmark = pytest.mark.gpu

LEFT_OUT = {"status": "unavailable", "reason": "not-collected:--select"}
PROBE_SECTIONS = ("probes", "p2p_transfers", "link_load", "collective")


def _check(*args: str) -> tuple[dict[str, Any], dict[str, Any]]:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "check", *args, "-f", "json", "--embed-facts"],
        capture_output=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr.decode()
    doc = json.loads(proc.stdout)
    return {r["id"]: r for r in doc["results"]}, doc["facts"]


def test_a_family_without_probes_starts_no_probe_child() -> None:
    results, facts = _check("--select", "gpu,driver,bar1,module,memory")

    assert facts["nvml"]["status"] == "ok"
    assert facts["cuda"]["status"] == "ok"
    for section in PROBE_SECTIONS:
        assert facts[section] == LEFT_OUT, section
    assert results["gpu.present"]["status"] == "pass"
    assert results["gpu.shared_memory"]["status"] == "pass", results["gpu.shared_memory"]
    assert not any("not-collected" in r["summary"] for r in results.values())


def test_a_family_that_reads_no_gpu_fact_starts_no_gpu_child() -> None:
    results, facts = _check("--select", "platform,pci")

    for section in ("nvml", "cuda", *PROBE_SECTIONS):
        assert facts[section] == LEFT_OUT, section
    # The header still names the GPUs, from the PCI tree.
    assert facts["pci"]["status"] == "ok"
    assert facts["pci"]["gpus"]
    assert set(results) == {"platform.wsl", "pci.iommu", "pci.acs"}


def test_the_preflight_runs_its_probes_and_not_the_tiles_or_the_transfers() -> None:
    results, facts = _check("--select", "link,bar1,module,collective,memory")

    assert facts["probes"] == LEFT_OUT
    assert facts["p2p_transfers"] == LEFT_OUT
    gpus = len(facts["nvml"]["gpus"])
    collective = facts["collective"]
    if gpus >= 2:
        assert collective["status"] == "ok", collective
        assert results["collective.allreduce"]["status"] in ("pass", "warn", "fail")
    else:
        assert collective["reason"].startswith("skipped:"), collective
    assert facts["link_load"] != LEFT_OUT


def test_ignoring_the_probe_checks_skips_the_tile_probes_only() -> None:
    # health.clocks (issue 39) reads the clocks under the probes' timed launches: the probes
    # run while a check that reads them is left, and are skipped once none is.
    results, facts = _check("--ignore", "probe,health.clocks")

    assert facts["probes"] == {"status": "unavailable", "reason": "not-collected:--ignore"}
    assert facts["nvml"]["status"] == "ok"
    assert not any(i.startswith("probe.") for i in results)
    assert "health.clocks" not in results
    if len(facts["nvml"]["gpus"]) >= 2:
        assert facts["p2p_transfers"]["status"] == "ok"
        assert facts["collective"]["status"] == "ok"
