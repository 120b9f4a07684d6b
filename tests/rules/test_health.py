"""Family health and the node verdict (issue 39), replayed on facts.

The failing cases are facts reconstructed from public reports (tests/fixtures/facts/README.md
names the sources of each host): ``rtx5090-xid79-riser`` (open-gpu-kernel-modules#1010 and
#1151: Gen1 fallback, RxErr before Xid 79), ``rtxpro6000x4-power-thermal`` (a 600 W card
capped at 300 W as server-gear.com measured it; SW power cap and SW thermal slowdown as in
ollama#6163 and #13552), ``h200x2-row-remap`` (the Xid 63 line of stas00/ml-engineering,
row remapping as NVIDIA's memory error management guide defines it). Variants change one
value each; nothing is set on a GPU.
"""

from __future__ import annotations

from typing import Any

import pytest

from blackwell_doctor.facts.document import (
    AerCounts,
    ClockSample,
    DeviceAer,
    Facts,
    GpuHealth,
    HealthFacts,
    LoadedGpu,
    RemappedRows,
    RetiredPages,
    Unavailable,
)
from blackwell_doctor.report.results import Remedy, Result, Severity, Status
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.verdict import node_verdict
from tests.factsutil import load, replace, result, status

NS = Unavailable("not-supported")


def _health(facts: Facts) -> HealthFacts:
    assert isinstance(facts.health, HealthFacts)
    return facts.health


def _gpus(facts: Facts) -> list[GpuHealth]:
    gpus = _health(facts).gpus
    assert isinstance(gpus, list)
    return gpus


def _with_gpus(facts: Facts, **changes: Any) -> Facts:
    """Every GPU's health with ``changes``."""
    gpus = [replace(g, **changes) for g in _gpus(facts)]
    out: Facts = replace(facts, health=replace(_health(facts), gpus=gpus))
    return out


def _with_gpu(facts: Facts, index: int, **changes: Any) -> Facts:
    gpus = [replace(g, **changes) if g.index == index else g for g in _gpus(facts)]
    out: Facts = replace(facts, health=replace(_health(facts), gpus=gpus))
    return out


def _with_samples(facts: Facts, samples: list[ClockSample]) -> Facts:
    health = _health(facts)
    assert isinstance(health.under_load, list)
    loaded = [replace(health.under_load[0], samples=samples)]
    out: Facts = replace(facts, health=replace(health, under_load=loaded))
    return out


# --------------------------------------------------------------------------- clocks


def test_software_thermal_slowdown_under_load_is_named() -> None:
    r = result(load("rtxpro6000x4-power-thermal"), "health.clocks")
    assert r.status is Status.WARN
    assert "software thermal slowdown" in r.summary
    assert "(12 of 30)" in r.summary
    assert r.remedy is not None
    assert "slows its clocks" in r.remedy.summary


def test_a_power_brake_is_its_own_case_with_power_delivery_in_the_remedy() -> None:
    facts = load("rtxpro6000x4-power-thermal")
    brake = [ClockSample(reasons=0x8 | 0x80, sm_clock_mhz=900, temperature_c=60)] * 4
    r = result(_with_samples(facts, brake), "health.clocks")
    assert r.status is Status.WARN
    assert "hardware power brake" in r.summary
    assert r.remedy is not None
    assert "12V-2x6" in r.remedy.summary


def test_only_a_power_cap_under_load_is_no_clock_finding() -> None:
    facts = load("rtxpro6000x4-power-thermal")
    capped = [ClockSample(reasons=0x4, sm_clock_mhz=1900, temperature_c=70)] * 4
    r = result(_with_samples(facts, capped), "health.clocks")
    assert r.status is Status.PASS
    assert "SwPowerCap 4/4" in str(r.evidence)


def test_clock_reasons_skip_with_the_reason_when_the_probes_did_not_run() -> None:
    r = result(load("h200x2-row-remap"), "health.clocks")
    assert r.status is Status.SKIP
    assert "--no-probe" in r.summary


def test_clock_readings_that_nvml_could_not_give_are_not_a_pass() -> None:
    facts = load("rtxpro6000x4-power-thermal")
    health = _health(facts)
    assert isinstance(health.under_load, list)
    lost = [LoadedGpu(pci_bus_id=health.under_load[0].pci_bus_id, error="nvml-error-gpu-is-lost")]
    r = result(replace(facts, health=replace(health, under_load=lost)), "health.clocks")
    assert r.status is Status.ERROR
    assert "gpu-is-lost" in r.summary


# --------------------------------------------------------------------------- power


def test_a_card_capped_below_its_default_says_so_with_the_command_that_shows_it() -> None:
    r = result(load("rtxpro6000x4-power-thermal"), "health.power")
    assert r.status is Status.WARN
    assert "capped at 300 W of its 600 W default" in r.summary
    assert "held the clocks under the probes' load" in r.summary  # SwPowerCap seen on GPU0
    assert r.remedy is not None
    assert "nvidia-smi -q -d POWER    # enforced, default, min and max limits" in r.remedy.commands
    assert "sudo nvidia-smi -i 3 -pl 600    # back to the default limit" in r.remedy.commands


def test_a_limit_at_its_default_passes() -> None:
    facts = _with_gpus(load("rtxpro6000x4-power-thermal"), power_limit_mw=600_000)
    assert status(facts, "health.power") is Status.PASS


def test_gb10_without_power_limits_skips_with_the_reason() -> None:
    facts = _with_gpus(load("rtxpro6000x4-power-thermal"), power_limit_mw=NS)
    r = result(facts, "health.power")
    assert r.status is Status.SKIP
    assert "power limit not supported by NVML" in r.summary


# --------------------------------------------------------------------------- thermal


def test_a_gpu_within_the_margin_of_its_slowdown_warns() -> None:
    r = result(load("rtxpro6000x4-power-thermal"), "health.thermal")
    assert r.status is Status.WARN
    assert "GPU3 NVIDIA RTX PRO 6000 Blackwell Workstation Edition at 87 °C, 3 °C" in r.summary
    assert "GPU1" not in r.summary  # 74 °C: 16 °C of margin


def test_nvmls_own_margin_counts_when_it_is_smaller() -> None:
    facts = _with_gpu(load("rtx5090-xid79-riser"), 0, margin_c=2)
    r = result(facts, "health.thermal")
    assert r.status is Status.WARN
    assert "2 °C from its slowdown threshold" in r.summary


def test_at_the_slowdown_threshold_with_a_stopped_fan() -> None:
    facts = _with_gpu(load("rtxpro6000x4-power-thermal"), 3, temperature_c=91, fans_percent=[0])
    r = result(facts, "health.thermal")
    assert "at or past its slowdown threshold with a fan at 0 %" in r.summary


def test_no_threshold_from_nvml_is_a_skip_not_a_pass() -> None:
    facts = _with_gpus(load("rtx5090-xid79-riser"), slowdown_c=NS, margin_c=NS)
    assert status(facts, "health.thermal") is Status.SKIP


# --------------------------------------------------------------------------- ECC and memory


def test_geforce_has_no_ecc_or_row_remapper_and_each_check_skips_saying_so() -> None:
    facts = load("rtx5090-xid79-riser")
    for check_id in ("health.ecc", "health.memory_reset_needed", "health.memory_replace"):
        r = result(facts, check_id)
        assert r.status is Status.SKIP, check_id
        assert "not supported by NVML" in r.summary
    assert status(facts, "health.recovery_action") is Status.SKIP


def test_reset_needed_and_replace_are_different_findings() -> None:
    facts = load("h200x2-row-remap")
    reset = result(facts, "health.memory_reset_needed")
    replace_ = result(facts, "health.memory_replace")
    assert (reset.status, replace_.status) == (Status.WARN, Status.FAIL)
    assert "GPU0" in reset.summary
    assert "GPU1" not in reset.summary
    assert "GPU1" in replace_.summary
    assert "GPU0" not in replace_.summary
    assert reset.remedy is not None
    assert reset.remedy.action == "reset-gpu"
    assert "sudo nvidia-smi --gpu-reset -i 0    # with no process on the GPU" in (
        reset.remedy.commands
    )
    assert replace_.remedy is not None
    assert replace_.remedy.action == "service"


def test_retired_pages_pending_need_a_reset_and_at_the_limit_service() -> None:
    facts = _with_gpus(
        load("h200x2-row-remap"),
        remapped_rows=NS,
        retired_pages=RetiredPages(single_bit=40, double_bit=24, pending=True),
    )
    assert "page retirement waits" in result(facts, "health.memory_reset_needed").summary
    assert "64 retired pages, at the limit of 64" in result(facts, "health.memory_replace").summary


def test_an_unreadable_row_remapper_is_not_evaluated() -> None:
    lost = Unavailable("nvml-error-gpu-is-lost")
    facts = _with_gpu(load("h200x2-row-remap"), 1, remapped_rows=lost, retired_pages=NS)
    facts = _with_gpu(
        facts,
        0,
        remapped_rows=RemappedRows(correctable=0, uncorrectable=0, pending=False, failure=False),
    )
    r = result(facts, "health.memory_replace")
    assert r.status is Status.ERROR
    assert "gpu-is-lost" in r.summary


def test_uncorrected_ecc_since_the_driver_loaded_warns() -> None:
    r = result(load("h200x2-row-remap"), "health.ecc")
    assert r.status is Status.WARN
    assert "GPU0 NVIDIA H200: 1 uncorrected ECC errors" in r.summary


def test_an_ecc_mode_change_that_waits_asks_for_a_reboot() -> None:
    facts = _with_gpus(load("rtxpro6000x4-power-thermal"), ecc_pending_enabled=True)
    r = result(facts, "health.ecc")
    assert r.status is Status.WARN
    assert r.remedy is not None
    assert r.remedy.action == "reboot"


# --------------------------------------------------------------------------- PCIe errors


def test_errors_during_the_run_and_a_trained_down_link_are_one_remedy() -> None:
    r = result(load("rtx5090-xid79-riser"), "health.pcie_errors")
    assert r.status is Status.WARN
    assert "45 correctable AER errors during the run (RxErr +34, BadTLP +11)" in r.summary
    assert "the port above GPU0" in r.summary  # the link partner's count
    assert "87 replays during the run" in r.summary
    assert r.evidence["link below its maximum (link.pcie)"] == ["GPU0 Gen1 x4 of Gen5 x16"]
    assert r.remedy is not None
    assert "riser or extension cable" in r.remedy.summary
    assert "Gen1 x4 of Gen5 x16" in r.remedy.summary


def _aer_of(facts: Facts, **after: Any) -> Facts:
    health = _health(facts)
    assert isinstance(health.aer, list)
    first = health.aer[0]
    assert isinstance(first.before, AerCounts)
    devices = [replace(first, after=replace(first.before, **after)), *health.aer[1:]]
    out: Facts = replace(facts, health=replace(health, aer=devices))
    return out


def test_a_fatal_aer_error_during_the_run_fails_and_asks_for_service() -> None:
    facts = _aer_of(load("rtx5090-xid79-riser"), fatal=1)
    r = result(facts, "health.pcie_errors")
    assert r.status is Status.FAIL
    assert r.remedy is not None
    assert r.remedy.action == "service"


def test_correctable_errors_since_boot_alone_are_no_finding() -> None:
    facts = load("rtx5090-xid79-riser")
    health = _health(facts)
    assert isinstance(health.aer, list)
    no_after = [replace(d, after=None) for d in health.aer]
    gpus = [replace(g, pcie_replays=Unavailable("not-supported")) for g in _gpus(facts)]
    r = result(
        replace(facts, health=replace(health, aer=no_after, gpus=gpus)), "health.pcie_errors"
    )
    assert r.status is Status.PASS
    assert "correctable errors since boot, none during the run" in r.summary


def test_no_aer_counters_in_sysfs_is_a_skip_that_says_so() -> None:
    facts = load("rtx5090-xid79-riser")
    health = _health(facts)
    gone = [
        DeviceAer(bdf=d.bdf, role=d.role, before=Unavailable(f"not-found:/sys/x/{d.bdf}"))
        for d in (health.aer if isinstance(health.aer, list) else [])
    ]
    gpus = [replace(g, pcie_replays=NS) for g in _gpus(facts)]
    r = result(replace(facts, health=replace(health, aer=gone, gpus=gpus)), "health.pcie_errors")
    assert r.status is Status.SKIP
    assert "no AER counters" in r.summary


# --------------------------------------------------------------------------- recovery action


def test_the_drivers_recovery_action_fails_with_its_step() -> None:
    r = result(load("h200x2-row-remap"), "health.recovery_action")
    assert r.status is Status.FAIL
    assert "GPU_RESET" in r.summary
    assert r.remedy is not None
    assert r.remedy.action == "reset-gpu"
    reboot = _with_gpu(load("h200x2-row-remap"), 0, recovery_action=2)
    got = result(reboot, "health.recovery_action")
    assert got.remedy is not None
    assert got.remedy.action == "reboot"


def test_an_older_driver_without_the_field_skips() -> None:
    old = Unavailable("nvml-function-not-found")
    facts = _with_gpus(load("h200x2-row-remap"), recovery_action=old)
    assert status(facts, "health.recovery_action") is Status.SKIP


# --------------------------------------------------------------------------- the section


def test_facts_from_before_issue_39_skip_every_health_check() -> None:
    report = evaluate(load("sm120-driver580"), select=["health"])
    assert {r.status for r in report.results} == {Status.SKIP}
    assert all("before issue 39" in r.summary for r in report.results)


def test_no_driver_is_not_evaluated_where_a_gpu_is_on_pci() -> None:
    facts = load("rtx5090-xid79-riser")
    lost = replace(_health(facts), gpus=Unavailable("nvml-error-gpu-is-lost"))
    report = evaluate(replace(facts, health=lost), select=["health.thermal", "health.ecc"])
    assert {r.status for r in report.results} == {Status.ERROR}


def test_under_wsl_the_health_counters_are_not_judged() -> None:
    facts = load("rtx5090-xid79-riser")
    wsl = replace(
        facts, platform=replace(facts.platform, wsl=replace(facts.platform.wsl, kind="wsl2"))
    )
    assert status(wsl, "health.pcie_errors") is Status.SKIP
    assert status(wsl, "health.thermal") is Status.SKIP


# --------------------------------------------------------------------------- the node verdict


def _result(check_id: str, status: Status, action: str | None = None) -> Result:
    remedy = Remedy(summary="x", action=action) if status in (Status.WARN, Status.FAIL) else None  # type: ignore[arg-type]
    return Result(
        id=check_id,
        family=check_id.split(".")[0],
        status=status,
        severity=Severity.HIGH,
        title="t",
        summary="s",
        remedy=remedy,
    )


@pytest.mark.parametrize(
    ("fixture", "verdict", "because"),
    [
        ("rtx5090-xid79-riser", "needs-reboot", ["logs.kernel_events"]),
        ("h200x2-row-remap", "needs-service", ["health.memory_replace"]),
        ("rtxpro6000x4-power-thermal", "degraded", None),
        ("h200x2-captured", "healthy", []),
    ],
)
def test_the_node_verdict_of_each_host(
    fixture: str, verdict: str, because: list[str] | None
) -> None:
    node = evaluate(load(fixture)).node
    assert node is not None
    assert node.verdict == verdict
    if because is not None:
        assert node.because == because
    assert node.step  # every verdict says what to do


def test_the_smallest_step_that_addresses_every_finding_is_the_largest_asked() -> None:
    results = [
        _result("health.power", Status.WARN),
        _result("health.memory_reset_needed", Status.WARN, "reset-gpu"),
        _result("logs.kernel_events", Status.FAIL, "restart-app"),
    ]
    node = node_verdict(results)
    assert node.verdict == "needs-reset"
    assert node.because == ["health.memory_reset_needed"]
    assert node.findings == ["health.power", "health.memory_reset_needed", "logs.kernel_events"]
    assert "reset it (health.memory_reset_needed)" in node.step


def test_findings_that_ask_no_step_leave_the_node_degraded() -> None:
    node = node_verdict([_result("pci.acs", Status.WARN), _result("probe.tiles", Status.PASS)])
    assert (node.verdict, node.because) == ("degraded", ["pci.acs"])


def test_an_application_restart_is_degraded_with_its_own_words() -> None:
    node = node_verdict([_result("logs.kernel_events", Status.FAIL, "restart-app")])
    assert node.verdict == "degraded"
    assert node.step.startswith("Restart the application")


def test_healthy_says_what_could_not_be_evaluated() -> None:
    node = node_verdict([_result("gpu.present", Status.PASS), _result("health.ecc", Status.ERROR)])
    assert (node.verdict, node.not_evaluated) == ("healthy", ["health.ecc"])


def test_a_pending_remap_alone_needs_a_reset_not_service() -> None:
    facts = _with_gpu(
        load("h200x2-row-remap"),
        1,
        remapped_rows=RemappedRows(correctable=2, uncorrectable=8, pending=False, failure=False),
    )
    node = evaluate(facts).node
    assert node is not None
    assert node.verdict == "needs-reset"
    assert node.because == ["health.memory_reset_needed", "health.recovery_action"]


def test_an_xid_79_alone_in_the_log_needs_a_reboot_in_scan_logs_too() -> None:
    from blackwell_doctor.rules.presets import judge_logs

    logs = load("rtx5090-xid79-riser").logs
    assert logs is not None
    assert not isinstance(logs, Unavailable)
    document = judge_logs(logs, fail_on="fail")
    assert document.report.node is not None
    assert document.report.node.verdict == "needs-reboot"
    [xid] = [f for f in document.report.findings if f.signature == "kernel.xid_fallen_off_bus"]
    assert xid.action == "reboot"
    assert "NVIDIA's action RESTART_BM: reboot the node" in xid.excerpt


def test_no_gpu_on_pci_and_no_replay_counter_is_a_skip_not_a_pass() -> None:
    facts = load("rtx5090-xid79-riser")
    gpus = [replace(g, pcie_replays=NS) for g in _gpus(facts)]
    empty = replace(_health(facts), aer=[], gpus=gpus)
    r = result(replace(facts, health=empty), "health.pcie_errors")
    assert r.status is Status.SKIP
    assert "nothing to read" in r.summary
