"""Hardware health on a real GPU (issue 39; marker ``gpu``, skipped cleanly without one).

Read only: nothing here sets a power limit, clock or ECC mode. What must hold on any NVIDIA
host: every value is a number in range or Unavailable with a reason token (never a crash);
the clock event reasons are read while the probe kernels run, without a launch of their own
(the samples ride on the timed launches); the AER counters are read from sysfs or say why
not; the rules judge the result and the node gets a verdict.
"""

from __future__ import annotations

from functools import cache
from pathlib import Path

import pytest

from blackwell_doctor.collect.gpu import GpuRun
from blackwell_doctor.collect.health import collect_aer
from blackwell_doctor.collect.host import collect_facts
from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.pci import collect_pci
from blackwell_doctor.collect.probe.protocol import TIMED_LAUNCHES
from blackwell_doctor.collect.probe.runner import collect_gpu_run
from blackwell_doctor.facts.document import (
    AerCounts,
    Facts,
    GpuHealth,
    HealthFacts,
    NvmlFacts,
    ProbeFacts,
    Unavailable,
)
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.evaluate import evaluate

pytestmark = pytest.mark.gpu

# GpuHealth's scalar fields: an int or Unavailable (a reason token, never an exception).
SCALARS = (
    "temperature_c",
    "slowdown_c",
    "shutdown_c",
    "gpu_max_c",
    "margin_c",
    "power_limit_mw",
    "power_default_mw",
    "power_min_mw",
    "power_max_mw",
    "power_usage_mw",
    "clock_event_reasons",
    "sm_clock_mhz",
    "sm_clock_max_mhz",
    "pcie_replays",
    "recovery_action",
)


@cache
def run() -> GpuRun:
    return collect_gpu_run(gpu_timeout_s=120, probe_timeout_s=240, health=True)


def _health() -> list[GpuHealth]:
    got = run().health
    assert isinstance(got, list), got
    return got


def test_every_gpu_answers_health_values_or_says_why() -> None:
    nvml = run().nvml
    assert isinstance(nvml, NvmlFacts), nvml
    health = _health()
    assert [h.index for h in health] == [g.index for g in nvml.gpus]
    for h in health:
        for name in SCALARS:
            value = getattr(h, name)
            assert isinstance(value, int | Unavailable), (name, value)
            if isinstance(value, Unavailable):
                assert value.reason, name
                assert " " not in value.reason, (name, value)
        assert isinstance(h.temperature_c, int), h.temperature_c  # every board reports it
        if isinstance(h.slowdown_c, int) and isinstance(h.shutdown_c, int):
            assert h.slowdown_c <= h.shutdown_c


def test_the_power_limit_read_lies_within_the_boards_constraints() -> None:
    for h in _health():
        limit, low, high = h.power_limit_mw, h.power_min_mw, h.power_max_mw
        if isinstance(limit, int) and isinstance(low, int) and isinstance(high, int):
            assert low <= limit <= high, (low, limit, high)


def test_clock_reasons_were_read_during_the_timed_launches() -> None:
    got = run()
    assert isinstance(got.probes, ProbeFacts), got.probes
    assert isinstance(got.samples, dict), got.samples
    assert got.samples, got.sampling_errors
    launched = sum(
        1 for d in got.probes.devices for t in d.tiles if t.launched and t.time_us is not None
    )
    for bus, samples in got.samples.items():
        assert len(samples) == launched * TIMED_LAUNCHES, bus
        read = [s for s in samples if s.reasons is not None]
        assert read, bus
        # Under load the GPU is not idle (nvmlClocksEventReasonGpuIdle, 0x1) in most readings.
        busy = [s for s in read if not (s.reasons or 0) & 0x1]
        assert len(busy) >= len(read) // 2, [hex(s.reasons or 0) for s in read]


def test_aer_counters_are_read_or_say_why() -> None:
    fs = HostFS(Path("/"))
    first = collect_aer(fs, collect_pci(fs, Unavailable("not-read")))
    if isinstance(first, Unavailable):
        pytest.skip(f"no PCI view: {first.reason}")
    for device in first:
        assert isinstance(device.before, AerCounts | Unavailable)
        if isinstance(device.before, AerCounts):
            assert device.before.correctable is not None


@cache
def facts() -> Facts:
    import os

    return collect_facts(host_root=Path("/"), environ=dict(os.environ), gpu_timeout_s=120)


def test_a_live_collection_has_the_health_section_and_a_node_verdict() -> None:
    got = facts()
    assert isinstance(got.health, HealthFacts), got.health
    report = evaluate(got)
    health = [r for r in report.results if r.family == "health"]
    assert len(health) == 8
    # Nothing NVML answered makes a check crash; what it does not support is a skip.
    assert all("check crashed" not in r.summary for r in health)
    assert report.node is not None
    assert report.node.verdict in (
        "healthy",
        "degraded",
        "needs-reset",
        "needs-reboot",
        "needs-service",
    )
    statuses = {r.id: r.status for r in health}
    assert statuses["health.clocks"] in (Status.PASS, Status.WARN), statuses
