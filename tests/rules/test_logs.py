"""The logs family: findings judged per check, advice split into prose and commands."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.scan import collect_logs
from blackwell_doctor.facts.document import (
    SCHEMA_VERSION,
    LogFacts,
    LogFinding,
    LogSource,
    Unavailable,
    decode_facts,
    encode_facts,
)
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.logs import split_steps
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


def test_the_autotuner_context_is_judged_when_read_not_when_scanned(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """A TMA WS failure inside FlashInfer's ``[Autotuner]: Skipping tactic`` record is a
    skipped tactic: the scan keeps the hit with its context markers, and the rules decide.
    A catalogue whose TMA WS signature loses the autotuner-wrapped rule judges the same
    capture a failure; the shipped one again an info."""
    capture = _capture("flashinfer-2077-autotuner-skipping-tactic.log")
    facts = decode_facts(capture)
    assert isinstance(facts.logs, LogFacts)
    wrapped = [f for f in facts.logs.findings if f.signature == "moe.tma_ws_init_failed"]
    assert wrapped, "the scan keeps the hits inside the autotuner record"
    assert all({"autotuner-line", "autotuner-record"} & set(f.context) for f in wrapped)
    assert result(facts, "logs.moe_kernels").status is Status.PASS

    no_rule = _in_entry("moe.tma_ws_init_failed", 'rule = "autotuner-wrapped"\n', "")
    with edited_checks(monkeypatch, tmp_path, "log_signatures.toml", no_rule):
        r = result(decode_facts(capture), "logs.moe_kernels")
        assert r.status is Status.FAIL
        assert "moe.tma_ws_init_failed" in r.summary
    assert result(decode_facts(capture), "logs.moe_kernels").status is Status.PASS


def test_a_signature_that_gains_the_autotuner_rule_is_dropped_inside_the_record(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    """The other direction: a hit recorded with its context under a catalogue where its
    signature has no autotuner rule is judged as such once a later catalogue gives it one."""
    finding = LogFinding(
        signature="moe.tma_ws_init_failed",
        path="vllm.log",
        line=3,
        last_line=3,
        count=1,
        excerpt="RuntimeError: Failed to initialize cutlass TMA WS grouped gemm",
        context=["autotuner-record"],
    )
    facts = _with([finding])
    assert result(facts, "logs.moe_kernels").status is Status.PASS  # type: ignore[arg-type]
    no_rule = _in_entry("moe.tma_ws_init_failed", 'rule = "autotuner-wrapped"\n', "")
    with edited_checks(monkeypatch, tmp_path, "log_signatures.toml", no_rule):
        assert result(facts, "logs.moe_kernels").status is Status.FAIL  # type: ignore[arg-type]


@pytest.mark.parametrize("version", [2, 3])
def test_a_version_2_or_3_capture_reads_with_no_context(version: int) -> None:
    """Version 2 and 3 scanners left the hits inside autotuner records out: their findings
    read with no context and are judged as they were."""
    doc = json.loads(_capture("flashinfer-2077-tma-escaped.log"))
    doc["schema_version"] = version
    for finding in doc["logs"]["findings"]:
        del finding["context"]
    facts = decode_facts(json.dumps(doc).encode())
    assert facts.schema_version == SCHEMA_VERSION == 4
    assert isinstance(facts.logs, LogFacts)
    assert all(f.context == [] for f in facts.logs.findings)
    assert result(facts, "logs.moe_kernels").status is Status.FAIL


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
