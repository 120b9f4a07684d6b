"""The logs family: findings judged per check, advice split into prose and commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from blackwell_doctor.facts import (
    SCHEMA_VERSION,
    LogFacts,
    LogFinding,
    LogSource,
    Unavailable,
    decode_facts,
    encode_facts,
)
from blackwell_doctor.logs.collect import collect_logs
from blackwell_doctor.rules.logs import split_steps
from blackwell_doctor.rules.model import Status
from tests.conftest import FIXTURES
from tests.factsutil import load, replace, result
from tests.rules.rulesutil import edited_checks


def _finding(signature: str) -> LogFinding:
    """Three occurrences of ``signature``; its severity and check are the catalogue's."""
    return LogFinding(
        signature=signature,
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
    facts = _with([_finding("moe.tma_ws_init_failed")])
    r = result(facts, "logs.moe_kernels")  # type: ignore[arg-type]
    assert r.status is Status.FAIL
    assert "moe.tma_ws_init_failed (3x, first at vllm.log:12)" in r.summary
    assert r.remedy is not None
    assert any("flashinfer-python>=0.6.11" in c for c in r.remedy.commands)
    assert result(facts, "logs.p2p").status is Status.PASS  # type: ignore[arg-type]


def test_info_findings_pass_and_are_shown() -> None:
    facts = _with([_finding("autotuner.tactic_skipped")])
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


# ------------------------------------------------ a capture is judged by the reader's rules


LOGS = FIXTURES / "logs"


def _capture(log: str) -> bytes:
    """A facts file made with the shipped catalogue: the fixture log scanned once."""
    scanned = collect_logs(
        paths=[str(LOGS / log)], containers=[], journal=False, kernel_log=False,
        host_root=Path("/"),
    )  # fmt: skip
    assert isinstance(scanned, LogFacts)
    return encode_facts(replace(load("sm120-driver580"), logs=scanned))


def _in_entry(signature: str, old: str, new: str) -> Callable[[str], str]:
    """An edit of checks/log_signatures.toml: the first ``old`` after the signature's id."""

    def edit(text: str) -> str:
        block = f'id = "{signature}"'
        head, tail = text.split(block, 1)
        return head + block + tail.replace(old, new, 1)

    return edit


def test_a_capture_is_judged_again_after_a_signature_severity_changes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    capture = _capture("vllm-4770-custom-allreduce-no-p2p.log")
    assert result(decode_facts(capture), "logs.p2p").status is Status.WARN

    fail_it = _in_entry("vllm.custom_allreduce_no_p2p", 'severity = "warn"', 'severity = "fail"')
    with edited_checks(monkeypatch, tmp_path, "log_signatures.toml", fail_it):
        r = result(decode_facts(capture), "logs.p2p")
        assert r.status is Status.FAIL
        assert "vllm.custom_allreduce_no_p2p" in r.summary
    assert result(decode_facts(capture), "logs.p2p").status is Status.WARN


def test_a_capture_is_judged_again_after_a_context_rule_changes(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """Marlin asked for on the command line makes vLLM's Marlin choice info; a catalogue
    that drops the marlin-requested rule judges the same capture a slow-path warning."""
    capture = _capture("composed-vllm-marlin-requested.log")
    facts = decode_facts(capture)
    assert isinstance(facts.logs, LogFacts)
    assert "marlin-requested" in facts.logs.sources[0].markers  # seen, not judged
    assert result(facts, "logs.moe_kernels").status is Status.PASS

    no_rule = _in_entry("vllm.nvfp4_moe_marlin", 'rule = "marlin-requested"\n', "")
    with edited_checks(monkeypatch, tmp_path, "log_signatures.toml", no_rule):
        r = result(decode_facts(capture), "logs.moe_kernels")
        assert r.status is Status.WARN
        assert "vllm.nvfp4_moe_marlin" in r.summary


def test_a_version_1_severity_is_not_replayed() -> None:
    """Version 1 froze each finding's severity and check; read today, the catalogue decides
    (a TMA WS failure recorded as info by an old tool is a failure)."""
    doc = json.loads(_capture("flashinfer-2077-tma-escaped.log"))
    doc["schema_version"] = 1
    for finding in doc["logs"]["findings"]:
        finding.update(severity="info", check="logs.platform")
    facts = decode_facts(json.dumps(doc).encode())
    assert facts.schema_version == SCHEMA_VERSION
    assert result(facts, "logs.moe_kernels").status is Status.FAIL
    assert result(facts, "logs.platform").status is Status.PASS
