"""The logs family: findings judged per check, advice split into prose and commands."""

from __future__ import annotations

from blackwell_doctor.facts import LogFacts, LogFinding, LogSource, Unavailable
from blackwell_doctor.rules.logs import split_steps
from blackwell_doctor.rules.model import Status
from tests.factsutil import load, replace, result


def _finding(signature: str, severity: str, check: str) -> LogFinding:
    return LogFinding(
        signature=signature,
        severity=severity,  # type: ignore[arg-type]
        check=check,
        path="vllm.log",
        line=12,
        last_line=40,
        count=3,
        excerpt="...",
    )


def _with(findings: list[LogFinding], sources: list[LogSource] | None = None) -> object:
    logs = LogFacts(
        sources=sources or [LogSource(name="vllm.log", kind="file", lines=100, bytes=5000)],
        findings=findings,
    )
    return replace(load("sm120-driver580"), logs=logs)


def test_an_escaped_tma_ws_failure_fails_its_check_only() -> None:
    facts = _with([_finding("moe.tma_ws_init_failed", "fail", "logs.moe_kernels")])
    r = result(facts, "logs.moe_kernels")  # type: ignore[arg-type]
    assert r.status is Status.FAIL
    assert "moe.tma_ws_init_failed (3x, first at vllm.log:12)" in r.summary
    assert r.remedy is not None
    assert any("flashinfer-python>=0.6.11" in c for c in r.remedy.commands)
    assert result(facts, "logs.p2p").status is Status.PASS  # type: ignore[arg-type]


def test_info_findings_pass_and_are_shown() -> None:
    facts = _with([_finding("autotuner.tactic_skipped", "info", "logs.moe_kernels")])
    r = result(facts, "logs.moe_kernels")  # type: ignore[arg-type]
    assert r.status is Status.PASS
    assert "only informational" in r.summary


def test_no_logs_given_is_a_skip_and_unreadable_logs_are_not_a_pass() -> None:
    assert result(load("sm120-driver580"), "logs.moe_kernels").status is Status.SKIP
    unread = _with([], [LogSource(name="gone.log", kind="file", error="not-found:gone.log")])
    assert result(unread, "logs.moe_kernels").status is Status.ERROR  # type: ignore[arg-type]
    failed = replace(load("sm120-driver580"), logs=Unavailable("no-log-readable:x"))
    assert result(failed, "logs.kernel_events").status is Status.ERROR


def test_advice_steps_split_into_prose_and_pasteable_commands() -> None:
    prose, commands = split_steps(
        [
            "Upgrade FlashInfer: pip install -U 'flashinfer-python>=0.6.11'",
            "Or disable P2P for NCCL: NCCL_P2P_DISABLE=1",
            "Add iommu=pt to the kernel command line (then reboot)",
            "vllm serve ... --moe-backend flashinfer_cutlass",
        ]
    )
    assert prose == [
        "Upgrade FlashInfer.",
        "Or disable P2P for NCCL.",
        "Add iommu=pt to the kernel command line (then reboot)",
    ]
    assert commands == [
        "pip install -U 'flashinfer-python>=0.6.11'",
        "export NCCL_P2P_DISABLE=1",
        "vllm serve ... --moe-backend flashinfer_cutlass",
    ]
