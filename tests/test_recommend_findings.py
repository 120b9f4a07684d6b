"""Which action takes which finding: every warn/fail finding appears in an action that can
clear it (the runtime only clears its own kernels' findings), and the NCCL_P2P_DISABLE rule
(measured transfers decide; the driver's answer alone is said to be only that)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import msgspec
import pytest
from markdown_it import MarkdownIt

from blackwell_doctor import cli
from blackwell_doctor.facts.document import (
    Facts,
    LogFacts,
    LogFinding,
    LogSource,
    NvmlFacts,
    P2PProbeFacts,
    P2PTransfer,
    PciFacts,
    decode_facts,
)
from blackwell_doctor.recommend.plan import LaunchOptions, Recommendation, build_recommendation
from blackwell_doctor.recommend.settings import derive
from blackwell_doctor.render.recommend import RecommendFormat, render_recommendation
from blackwell_doctor.report.results import Status
from blackwell_doctor.ruledata import validate
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.runtimes import RUNTIME_CLEARABLE, load_catalogue, parse_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.p2p import P2PVerdict
from tests.conftest import FACTS_FIXTURES
from tests.factsutil import made_pair

RTXPRO = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
SM120 = FACTS_FIXTURES / "sm120-driver580.json"
LOGS = FACTS_FIXTURES.parent / "logs"
PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]
FINDING = (Status.WARN, Status.FAIL)
LOG_CHECKS = (
    "logs.moe_kernels",
    "logs.arch_support",
    "logs.p2p",
    "logs.platform",
    "logs.kernel_events",
)


# Every command is registered when blackwell_doctor.cli is imported.
_main = cli.main


def _facts(path: Path = RTXPRO) -> Facts:
    return decode_facts(path.read_bytes(), source=path.name)


def _recommend(facts: Facts, model_dir: str | None = None, **kw: object) -> Recommendation:
    options = LaunchOptions(model_dir=model_dir, **kw)  # type: ignore[arg-type]
    rec, _ = build_recommendation(facts, evaluate(facts), load_catalogue(), options)
    return rec


def _log_finding(signature: str) -> LogFinding:
    """One occurrence of ``signature``; its severity and check are the catalogue's."""
    return LogFinding(
        signature=signature,
        path="serve.log",
        line=3,
        last_line=3,
        count=1,
        excerpt=signature,
    )


def _with_all_log_findings(facts: Facts) -> Facts:
    findings = [
        _log_finding("moe.tma_ws_init_failed"),
        _log_finding("cuda.no_kernel_image"),
        _log_finding("vllm.custom_allreduce_no_p2p"),
        _log_finding("vllm.wsl_no_pin_memory"),
        _log_finding("kernel.xid_fallen_off_bus"),
        _log_finding("kernel.amd_vi_io_page_fault"),
    ]
    logs = LogFacts(
        sources=[LogSource(name="serve.log", kind="file", lines=10, bytes=100)],
        findings=findings,
    )
    return msgspec.structs.replace(facts, logs=logs)


def _action_of(rec: Recommendation, finding_id: str) -> list[str]:
    return [a.id for a in rec.actions if finding_id in a.why]


def _assert_every_finding_in_an_action(facts: Facts, rec: Recommendation) -> None:
    """Each warn/fail finding is in an action that can clear it: its own, a group's (which
    carries its remedy), or the runtime's only for what a runtime change clears."""
    report = evaluate(facts)
    for r in report.results:
        if r.status in FINDING:
            clearing = [
                a
                for a in rec.actions
                if r.id in a.why and (a.id != "runtime" or r.id in RUNTIME_CLEARABLE)
            ]
            assert clearing, f"{r.id} ({r.status}) is in no action that can clear it"


# --------------------------------------------------------------------------- 1. consumption


def test_log_findings_the_runtime_cannot_clear_keep_their_own_actions() -> None:
    facts = _with_all_log_findings(_facts())
    report = evaluate(facts)
    statuses = {r.id: r.status for r in report.results}
    assert all(statuses[c] in FINDING for c in LOG_CHECKS), statuses
    rec = _recommend(facts)
    runtime = next(a for a in rec.actions if a.id == "runtime")
    assert "logs.moe_kernels" in runtime.why
    assert "logs.arch_support" in runtime.why
    for own in ("logs.p2p", "logs.platform", "logs.kernel_events"):
        assert own not in runtime.why, own
        [action] = [a for a in rec.actions if a.id == own]
        assert action.why == [own]
        result = next(r for r in report.results if r.id == own)
        assert result.remedy is not None
        assert action.commands == result.remedy.commands
        assert result.remedy.summary in action.effect.summary
    kernel = next(a for a in rec.actions if a.id == "logs.kernel_events")
    assert any("power" in c for c in kernel.commands)  # the Xid 79 remedy, not an image
    _assert_every_finding_in_an_action(facts, rec)


def test_runtime_never_takes_what_it_cannot_clear_even_if_its_catalogue_says_so() -> None:
    # A Runtime built past validation (as a library caller could) claiming everything.
    facts = _with_all_log_findings(_facts())
    cat = load_catalogue()
    greedy = [
        msgspec.structs.replace(r, addresses=[*LOG_CHECKS, "pci.iommu", "gpu.shared_memory"])
        for r in cat.runtime
    ]
    cat = msgspec.structs.replace(cat, runtime=greedy)
    rec, _ = build_recommendation(facts, evaluate(facts), cat, LaunchOptions())
    runtime = next(a for a in rec.actions if a.id == "runtime")
    assert "logs.kernel_events" not in runtime.why
    assert "logs.platform" not in runtime.why
    assert _action_of(rec, "logs.kernel_events") == ["logs.kernel_events"]
    _assert_every_finding_in_an_action(facts, rec)


@pytest.mark.parametrize("fixture", sorted(p.name for p in FACTS_FIXTURES.glob("*.json")))
def test_every_finding_of_every_fixture_is_in_an_action(fixture: str) -> None:
    facts = _with_all_log_findings(_facts(FACTS_FIXTURES / fixture))
    _assert_every_finding_in_an_action(facts, _recommend(facts))


def test_shipped_runtimes_address_only_what_a_runtime_change_clears() -> None:
    for r in load_catalogue().runtime:
        assert set(r.addresses) <= {"probe.tiles", "logs.moe_kernels", "logs.arch_support"}


_CATALOGUE = """
schema_version = 1
[[runtime]]
id = "mine"
title = "t"
preference = 1
image = "registry.example/team/vllm:v1"
digest = "{digest}"
verified = {verified}
addresses = {addresses}
source = "s"
effect = "e"
confidence = "c"
"""


@pytest.mark.parametrize(
    "addresses", ['["logs."]', '["logs.kernel_events"]', '["gpu.shared_memory"]', '["p2p."]']
)
def test_catalogue_refuses_addresses_a_runtime_cannot_clear(addresses: str) -> None:
    text = _CATALOGUE.format(digest="", verified="false", addresses=addresses)
    with pytest.raises(CatalogueError, match="not something a runtime change can clear"):
        parse_catalogue(text, source="mine.toml")


# --------------------------------------------------------------------------- 4. verified


def test_verified_needs_a_digest() -> None:
    text = _CATALOGUE.format(digest="", verified="true", addresses="[]")
    with pytest.raises(CatalogueError, match=r"mine\.toml: runtime 'mine': verified = true needs"):
        parse_catalogue(text, source="mine.toml")
    pinned = _CATALOGUE.format(digest="sha256:" + "a" * 64, verified="true", addresses="[]")
    assert parse_catalogue(pinned, source="mine.toml").runtime[0].verified


def test_cli_verified_without_digest_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "cat.toml"
    path.write_text(_CATALOGUE.format(digest="", verified="true", addresses="[]"))
    assert _main(["recommend", "--facts", str(SM120), "--catalogue", str(path)]) == 2
    err = capsys.readouterr().err
    assert "verified = true needs `digest`" in err
    assert err.count("\n") == 1


# --------------------------------------------------------------------------- 2. NCCL_P2P


def _pair(a: int, b: int, verdict: P2PVerdict) -> P2PTransfer:
    return made_pair(a, b, verdict)


def _measured(facts: Facts, *verdicts: P2PVerdict) -> Facts:
    full = list(verdicts) + ["works"] * (len(PAIRS) - len(verdicts))
    pairs = [_pair(a, b, v) for (a, b), v in zip(PAIRS, full, strict=True)]
    return msgspec.structs.replace(facts, p2p_transfers=P2PProbeFacts(wall_s=2.0, pairs=pairs))


def _nvml_refuses(facts: Facts) -> Facts:
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert isinstance(nvml.p2p, list)
    pairs = [msgspec.structs.replace(p, read="CHIPSET_NOT_SUPPORTED") for p in nvml.p2p]
    return msgspec.structs.replace(facts, nvml=msgspec.structs.replace(nvml, p2p=pairs))


def _passthrough(facts: Facts) -> Facts:
    pci = facts.pci
    assert isinstance(pci, PciFacts)
    gpus = [msgspec.structs.replace(g, iommu_domain_type="identity") for g in pci.gpus]
    iommu = msgspec.structs.replace(pci.iommu, cmdline_options={"iommu": "pt"})
    return msgspec.structs.replace(facts, pci=msgspec.structs.replace(pci, gpus=gpus, iommu=iommu))


def _status(facts: Facts, check_id: str) -> Status:
    return next(r.status for r in evaluate(facts).results if r.id == check_id)


def test_nvml_refusal_alone_never_disables_p2p_when_transfers_work() -> None:
    facts = _measured(_nvml_refuses(_facts()))
    assert _status(facts, "p2p.nvml_status") is Status.WARN
    assert _status(facts, "p2p.transfer") is Status.PASS
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert "NCCL_P2P_DISABLE" not in derived.env
    assert any("the measurement decides" in n for n in derived.notes)
    rec = _recommend(facts)
    p2p = next(a for a in rec.actions if a.id == "p2p")
    assert not any("NCCL_P2P_DISABLE" in c for c in p2p.commands)
    assert any("the measurement decides" in n for n in p2p.notes)


@pytest.mark.parametrize("passthrough", [False, True])
def test_measured_broken_transfers_disable_p2p_whatever_the_iommu(passthrough: bool) -> None:
    facts = _measured(_facts(), "works", "granted-but-broken")
    if passthrough:
        facts = _passthrough(facts)
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    assert "GPU0-GPU2" in derived.why["NCCL_P2P_DISABLE"]
    assert "measured" in derived.why["NCCL_P2P_DISABLE"]


@pytest.mark.parametrize("passthrough", [False, True])
def test_slower_than_host_disables_p2p(passthrough: bool) -> None:
    facts = _measured(_facts(), "slower-than-host")
    if passthrough:
        facts = _passthrough(facts)
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    assert "slower than staging through host memory" in derived.why["NCCL_P2P_DISABLE"]


def test_driver_only_decision_says_so_and_how_to_measure() -> None:
    facts = _nvml_refuses(_facts())
    assert facts.p2p_transfers is None
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    why = derived.why["NCCL_P2P_DISABLE"]
    assert "the driver's answer (NVML) only" in why
    assert "blackwell-doctor probe --p2p" in why
    rec = _recommend(facts)
    p2p = next(a for a in rec.actions if a.id == "p2p")
    [export] = [c for c in p2p.commands if "NCCL_P2P_DISABLE=1" in c]
    assert "the driver's answer only: measure with blackwell-doctor probe --p2p" in export


def test_transfer_test_that_failed_everywhere_falls_back_to_the_driver() -> None:
    facts = _measured(_nvml_refuses(_facts()), *(["error"] * len(PAIRS)))  # type: ignore[arg-type]
    derived = derive(facts, evaluate(facts))
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    assert "the driver's answer (NVML) only" in derived.why["NCCL_P2P_DISABLE"]


# --------------------------------------------------------------------------- 6. env values


@pytest.mark.parametrize("value", ["a\rb", "\x1b[2Jowned", "a\x7f", "a\x9bb", "a\u2028b", "\t"])
def test_env_values_with_control_characters_are_refused(value: str) -> None:
    with pytest.raises(validate.ValidationError, match="control character"):
        validate.env_value("X", value)


@pytest.mark.parametrize("fmt", ["markdown", "shell", "compose", "json"])
def test_cli_env_control_character_exit_2(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["recommend", "--facts", str(SM120), "--model-dir", str(tmp_path), "--format", fmt]
    assert _main([*args, "-e", "MSG=ok\x1b]0;title\x07\rfake"]) == 2
    err = capsys.readouterr().err
    assert "control character" in err
    assert "\x1b" not in err
    assert "\r" not in err
    assert err.count("\n") == 1


def test_backticks_in_a_value_stay_inside_the_code() -> None:
    value = "a```b````c"
    rec = _recommend(_facts(), "/srv/models/m", extra_env=(("WEIRD", value),))
    text = render_recommendation(rec, RecommendFormat.MARKDOWN, None)
    # Every fence is longer than the longest backtick run in its block.
    for block in re.findall(r"^(`{3,})sh\n(.*?)^\1$", text, flags=re.M | re.S):
        runs = [len(r) for r in re.findall(r"`+", block[1])]
        assert len(block[0]) > max(runs, default=0)
    tokens = MarkdownIt("commonmark").enable("table").parse(text)
    fences = [t.content for t in tokens if t.type == "fence"]
    assert any("export 'WEIRD=a```b````c'" in f for f in fences)
    inline = " ".join(
        child.content
        for t in tokens
        if t.type == "inline"
        for child in t.children or []
        if child.type == "code_inline"
    )
    assert value in inline  # the settings table's cell, whole


# --------------------------------------------------------------------------- 3. logs via CLI


def test_cli_recommend_reads_logs(capsys: pytest.CaptureFixture[str]) -> None:
    logs = [
        "flashinfer-2077-tma-escaped.log",
        "comfyui-16438-no-kernel-image.log",
        "vllm-4770-custom-allreduce-no-p2p.log",
        "vllm-1084-wsl-pin-memory.log",
        "nvsentinel-155-fallen-off-bus.log",
    ]
    args = ["recommend", "--facts", str(RTXPRO), "--format", "json"]
    for name in logs:
        args += ["--logs", str(LOGS / name)]
    assert _main(args) == 0
    doc = json.loads(capsys.readouterr().out)
    by_id = {a["id"]: a for a in doc["actions"]}
    assert {"logs.moe_kernels", "logs.arch_support"} <= set(by_id["runtime"]["why"])
    for own in ("logs.p2p", "logs.platform", "logs.kernel_events"):
        assert by_id[own]["why"] == [own]


def test_cli_recommend_reads_logs_from_stdin(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import io

    data = (LOGS / "nvsentinel-155-fallen-off-bus.log").read_bytes()
    monkeypatch.setattr("sys.stdin", io.TextIOWrapper(io.BytesIO(data)))
    assert _main(["recommend", "--facts", str(RTXPRO), "--format", "json", "--logs", "-"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert "logs.kernel_events" in [a["id"] for a in doc["actions"]]


def test_the_p2p_decision_reads_the_verdicts_from_the_report() -> None:
    """recommend acts on p2p.transfer's result, not on a verdict of its own from the facts:
    the same measurements judged with a stricter host-staging threshold (rule data given to
    the engine) are "slower than host" in the report, so NCCL keeps off P2P."""
    from blackwell_doctor.report.check import build_report
    from blackwell_doctor.ruledata.rules import load_rule_data
    from blackwell_doctor.rules.engine import Engine, registered_checks

    facts = _measured(_facts())
    shipped = load_rule_data()
    strict_p2p = msgspec.structs.replace(shipped.thresholds.p2p, min_peer_vs_host=1000.0)
    rules = msgspec.structs.replace(
        shipped, thresholds=msgspec.structs.replace(shipped.thresholds, p2p=strict_p2p)
    )
    results = Engine(rules=rules, checks=registered_checks()).run(facts)
    report = build_report(
        facts, results, fail_on="fail", strict=False, source="test", embed_facts=False
    )
    assert next(r.status for r in report.results if r.id == "p2p.transfer") is Status.WARN
    derived = derive(facts, report)
    assert derived is not None
    assert derived.env["NCCL_P2P_DISABLE"] == "1"
    assert "slower than staging through host memory" in derived.why["NCCL_P2P_DISABLE"]
    # The shipped threshold: the pairs work and nothing is set.
    plain = derive(facts, evaluate(facts))
    assert plain is not None
    assert "NCCL_P2P_DISABLE" not in plain.env
