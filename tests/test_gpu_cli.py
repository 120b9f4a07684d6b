"""The whole tool on a real GPU host: collect through NVML and the CUDA driver, then judge.

Marked ``gpu``: skipped where no NVIDIA driver answers (CI). Run on the device machine;
the printed output is committed under benchmarks/evidence/.
"""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

pytestmark = pytest.mark.gpu


def _check_json() -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "check", "--format", "json", "--embed-facts"],
        capture_output=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr.decode()
    doc: dict[str, object] = json.loads(proc.stdout)
    return proc.returncode, doc


def test_check_on_this_gpu_host_judges_real_facts() -> None:
    code, doc = _check_json()
    results = {r["id"]: r for r in doc["results"]}  # type: ignore[attr-defined]
    facts = doc["facts"]
    assert isinstance(facts, dict)
    nvml, cuda = facts["nvml"], facts["cuda"]
    assert nvml["status"] == "ok"
    assert cuda["status"] == "ok"
    assert results["gpu.present"]["status"] == "pass"
    assert results["gpu.architecture"]["status"] == "pass"
    # The architecture table must agree with what this driver grants, byte for byte.
    assert results["gpu.shared_memory"]["status"] == "pass", results["gpu.shared_memory"]
    assert results["driver.consistency"]["status"] == "pass", results["driver.consistency"]
    ccs = {tuple(g["compute_capability"]) for g in nvml["gpus"]}
    if all(cc[0] != 12 for cc in ccs):
        assert results["driver.version"]["status"] == "skip"
    if len(nvml["gpus"]) >= 2:
        assert results["p2p.nvml_status"]["status"] in ("pass", "warn")
        assert len(nvml["p2p"]) == len(nvml["gpus"]) * (len(nvml["gpus"]) - 1) // 2
    assert doc["exit_code"] == code


def test_collect_redact_on_a_real_gpu_hides_uuids_and_hostname() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "collect", "--redact"],
        capture_output=True,
        timeout=120,
        check=True,
    )
    doc = json.loads(proc.stdout)
    uuids = [g["uuid"] for g in doc["nvml"]["gpus"]]
    assert uuids
    assert all(u.startswith("GPU-redacted-") for u in uuids)
    assert doc["platform"]["hostname"] == "<redacted>"


def _probe_json(*args: str) -> tuple[int, dict[str, object]]:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "probe", "--format", "json", *args],
        capture_output=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode in (0, 1), proc.stderr.decode()
    doc: dict[str, object] = json.loads(proc.stdout)
    return proc.returncode, doc


def test_probe_on_this_gpu_is_the_probe_checks_on_what_it_measured() -> None:
    """`probe`: the probe checks judge the measurements, beside this host's facts (the
    GPUs in the header), through the check report; the exit code is the probe's own."""
    code, doc = _probe_json()
    assert doc["schema_version"] == 3
    assert doc["mode"] == "measured"
    assert doc["exit_code"] == code
    assert doc["host"]["gpus"]  # type: ignore[index]
    results = {r["id"]: r for r in doc["results"]}  # type: ignore[attr-defined]
    assert set(results) == {"probe.smem_limit", "probe.tiles"}
    # The bisected limit is the driver's attribute on every GPU this tool supports.
    assert results["probe.smem_limit"]["status"] == "pass", results["probe.smem_limit"]
    devices = doc["probes"]["devices"]  # type: ignore[index]
    assert devices
    assert all(d["tiles"] for d in devices)
    text = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "probe"],
        capture_output=True,
        timeout=600,
        check=False,
    ).stdout.decode()
    assert "tile MxNxK" in text
    assert "not the production MoE kernel" in text
    assert "probe.tiles" in text


def test_probe_p2p_on_this_host_judges_every_pair_with_p2p_transfer() -> None:
    code, doc = _probe_json("--p2p")
    assert doc["mode"] == "p2p"
    results = {r["id"]: r for r in doc["results"]}  # type: ignore[attr-defined]
    assert set(results) == {"p2p.transfer"}
    p2p = doc["p2p"]
    assert isinstance(p2p, dict)
    if p2p["status"] == "unavailable":  # one GPU
        assert p2p["reason"].startswith("skipped:")
        assert code == 0
        return
    assert p2p["pairs"]
    assert results["p2p.transfer"]["status"] in ("pass", "warn", "fail", "skip")
