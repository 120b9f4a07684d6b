"""collect -> facts file -> check --facts, through the real CLI over fake host trees.

GPU facts come from whatever this machine has (none in CI: NVML/libcuda not found), so
these tests assert what the host trees decide: platform and PCI verdicts, redaction and
replay equivalence.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor.cli import main
from tests.hosttree import threadripper_4x_rtx_pro_6000, wsl2_rtx_5090

SECRET = "hf_" + "Zz9Yy8Xx7Ww6Vv5Uu4Tt3Ss2Rr1"


def _collect(root: Path, out: Path, *extra: str) -> None:
    assert main(["collect", "--host-root", str(root), "-o", str(out), *extra]) == 0


def _check(facts: Path, capsys: pytest.CaptureFixture[str]) -> dict[str, str]:
    capsys.readouterr()
    main(["check", "--facts", str(facts), "--format", "json"])
    doc = json.loads(capsys.readouterr().out)
    return {r["id"]: r["status"] for r in doc["results"]}


def test_threadripper_translating_iommu_warns_on_iommu_and_acs(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    facts = tmp_path / "facts.json"
    _collect(tree.root, facts)
    statuses = _check(facts, capsys)
    assert statuses["pci.iommu"] == "warn"
    assert statuses["pci.acs"] == "warn"
    assert statuses["platform.wsl"] == "pass"


def test_threadripper_with_iommu_pt_passes_the_iommu_check(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host", iommu_pt=True)
    facts = tmp_path / "facts.json"
    _collect(tree.root, facts)
    assert _check(facts, capsys)["pci.iommu"] == "pass"


def test_non_root_reader_cannot_judge_acs_and_strict_says_so(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host", config_readable=64)
    facts = tmp_path / "facts.json"
    _collect(tree.root, facts)
    capsys.readouterr()
    code = main(["check", "--facts", str(facts), "--select", "pci.acs", "--strict"])
    out = capsys.readouterr().out
    assert code == 3
    assert "run as root" in " ".join(out.split())  # however the row wraps


def test_wsl2_host_warns_and_skips_pci(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    tree = wsl2_rtx_5090(tmp_path / "host")
    facts = tmp_path / "facts.json"
    _collect(tree.root, facts)
    statuses = _check(facts, capsys)
    assert statuses["platform.wsl"] == "warn"
    assert statuses["pci.iommu"] == "skip"
    assert statuses["pci.acs"] == "skip"


def test_live_check_and_replayed_facts_give_the_same_verdicts(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    capsys.readouterr()
    main(["check", "--host-root", str(tree.root), "--format", "json"])
    live = {r["id"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    facts = tmp_path / "facts.json"
    _collect(tree.root, facts)
    capsys.readouterr()
    main(["check", "--facts", str(facts), "--format", "json"])
    replay = {r["id"]: r for r in json.loads(capsys.readouterr().out)["results"]}
    assert live == replay


def test_collect_redacts_secrets_always_and_identity_with_redact(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("HF_TOKEN", SECRET)
    monkeypatch.setenv("VLLM_SERVE_ARGS", f"--api-key {SECRET} --port 8000")
    monkeypatch.setenv("NCCL_P2P_DISABLE", "1")
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    plain, redacted = tmp_path / "plain.json", tmp_path / "redacted.json"
    _collect(tree.root, plain)
    _collect(tree.root, redacted, "--redact")
    plain_text, redacted_text = plain.read_text(), redacted.read_text()
    assert SECRET not in plain_text
    assert SECRET not in redacted_text
    assert json.loads(plain_text)["env"]["NCCL_P2P_DISABLE"] == "1"
    assert json.loads(plain_text)["platform"]["hostname"] == "tr-pro-ws"
    assert "tr-pro-ws" not in redacted_text
    doc = json.loads(redacted_text)
    assert doc["redacted"] is True
    assert doc["platform"]["hostname"] == "<redacted>"


def test_collect_to_stdout_is_a_valid_facts_document(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    from blackwell_doctor.facts.document import decode_facts

    tree = wsl2_rtx_5090(tmp_path / "host")
    capsys.readouterr()
    assert main(["collect", "--host-root", str(tree.root)]) == 0
    facts = decode_facts(capsys.readouterr().out.encode())
    assert facts.platform.wsl.kind == "wsl2"
    assert facts.host_root == str(tree.root)


def test_a_capture_carries_the_logs_collect_was_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log = Path(__file__).parent / "fixtures" / "logs" / "flashinfer-2077-tma-escaped.log"
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    bare, with_log = tmp_path / "bare.json", tmp_path / "with-log.json"
    _collect(tree.root, bare)
    _collect(tree.root, with_log, "--logs", str(log))
    assert json.loads(bare.read_text())["logs"] is None
    (source,) = json.loads(with_log.read_text())["logs"]["sources"]
    assert source["name"] == str(log)
    assert _check(bare, capsys)["logs.moe_kernels"] == "skip"
    assert _check(with_log, capsys)["logs.moe_kernels"] == "fail"
    # The capture judges as check does live with the same log.
    capsys.readouterr()
    main(["check", "--host-root", str(tree.root), "--logs", str(log), "--format", "json"])
    live = {r["id"]: r["status"] for r in json.loads(capsys.readouterr().out)["results"]}
    assert live["logs.moe_kernels"] == "fail"


def test_collect_refuses_stdin_twice_for_logs(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["collect", "--logs", "-", "--logs", "-"]) == 2
    assert "- (standard input) can be given only once" in capsys.readouterr().err


def test_collect_redact_hides_the_host_in_the_logs_it_carries(tmp_path: Path) -> None:
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    log = tmp_path / "tr-pro-ws-vllm.log"
    log.write_text(
        "INFO tr-pro-ws worker 0 started\n"
        "ERROR Failed to initialize cutlass TMA WS grouped gemm on tr-pro-ws\n"
    )
    plain, redacted = tmp_path / "plain.json", tmp_path / "redacted.json"
    _collect(tree.root, plain, "--logs", str(log))
    _collect(tree.root, redacted, "--logs", str(log), "--redact")
    assert "tr-pro-ws" in plain.read_text()
    text = redacted.read_text()
    assert "tr-pro-ws" not in text
    (finding,) = json.loads(text)["logs"]["findings"]
    assert finding["signature"] == "moe.tma_ws_init_failed"
    assert finding["excerpt"].endswith("grouped gemm on <redacted>")
    (source,) = json.loads(text)["logs"]["sources"]
    assert source["name"] == finding["path"]
    assert source["name"] == str(tmp_path / "<redacted>-vllm.log")
