"""Family p2p: what the driver grants (p2p.nvml_status) and what the verified transfer test
found per pair (p2p.transfer), as verdicts."""

from __future__ import annotations

import json

import pytest

from blackwell_doctor.facts.document import (
    SCHEMA_VERSION,
    NvmlFacts,
    P2PProbeFacts,
    P2PTransfer,
    Unavailable,
    decode_facts,
)
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.p2p import P2PVerdict
from blackwell_doctor.rules.presets import judge_p2p
from tests.conftest import FACTS_FIXTURES
from tests.factsutil import Judged, judged, load, made_pair, replace, result, status

# the Threadripper fixture has 4 GPUs: 6 pairs
PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def _pair(a: int, b: int, verdict: P2PVerdict, detail: str | None = None) -> P2PTransfer:
    return made_pair(a, b, verdict, detail)


def _facts(verdicts: list[P2PVerdict], detail: str | None = None) -> object:
    verdicts = verdicts + ["works"] * (len(PAIRS) - len(verdicts))
    if all(v == "not-supported" for v in verdicts[:3]):
        verdicts = ["not-supported"] * len(PAIRS)
    pairs = [_pair(a, b, v, detail) for (a, b), v in zip(PAIRS, verdicts, strict=True)]
    return replace(
        load("rtxpro6000x4-threadripper-iommu"),
        p2p_transfers=P2PProbeFacts(wall_s=3.0, pairs=pairs),
    )


@pytest.mark.parametrize(
    ("verdicts", "expected"),
    [
        (["works", "works", "works"], Status.PASS),
        (["works", "slower-than-host", "works"], Status.WARN),
        (["works", "granted-but-broken", "slower-than-host"], Status.FAIL),
        (["works", "error", "works"], Status.ERROR),
        (["not-supported", "not-supported", "not-supported"], Status.SKIP),
        (["works", "not-supported", "works"], Status.PASS),
    ],
)
def test_verdicts_become_statuses(verdicts: list[P2PVerdict], expected: Status) -> None:
    assert result(_facts(verdicts), "p2p.transfer").status is expected  # type: ignore[arg-type]


def test_a_hang_is_named_and_the_remedy_points_at_the_path() -> None:
    r = result(
        _facts(["works", "granted-but-broken", "works"], detail="p2p-timeout:20s"),  # type: ignore[arg-type]
        "p2p.transfer",
    )
    assert r.status is Status.FAIL
    assert "GPU0-GPU2 (p2p-timeout:20s)" in r.summary
    assert r.remedy is not None
    assert "iommu=pt" in r.remedy.summary
    assert "NCCL_P2P_DISABLE=1" in r.remedy.summary


def test_slower_than_host_names_acs_and_iommu() -> None:
    r = result(_facts(["slower-than-host", "works", "works"]), "p2p.transfer")  # type: ignore[arg-type]
    assert r.status is Status.WARN
    assert r.remedy is not None
    assert "pci.acs" in r.remedy.summary
    assert "host-staged 20.0 GB/s" in str(r.evidence["GPU0-GPU1"])


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        (None, Status.SKIP),
        (Unavailable("skipped:one GPU: no pair"), Status.SKIP),
        (Unavailable("skipped:--no-probe"), Status.SKIP),
        (Unavailable("p2p-timeout:60s"), Status.ERROR),
    ],
)
def test_not_run_or_not_applicable(value: object, expected: Status) -> None:
    facts = replace(load("rtxpro6000x4-threadripper-iommu"), p2p_transfers=value)
    assert result(facts, "p2p.transfer").status is expected


@pytest.mark.parametrize(
    ("value", "code"),
    [
        (P2PProbeFacts(wall_s=1.0, pairs=[_pair(0, 1, "works")]), 0),
        (P2PProbeFacts(wall_s=1.0, pairs=[_pair(0, 1, "not-supported")]), 0),
        (P2PProbeFacts(wall_s=1.0, pairs=[_pair(0, 1, "slower-than-host")]), 1),
        (P2PProbeFacts(wall_s=1.0, pairs=[_pair(0, 1, "granted-but-broken")]), 1),
        (P2PProbeFacts(wall_s=1.0, pairs=[_pair(0, 1, "error")]), 3),
        (Unavailable("skipped:one GPU: no pair"), 0),
        (Unavailable("libcuda-not-found"), 3),
    ],
)
def test_probe_p2p_exit_codes(value: P2PProbeFacts | Unavailable, code: int) -> None:
    """``probe --p2p``: p2p.transfer judged on a two-GPU host with the pairs measured."""
    assert judge_p2p(load("h200x2-captured"), value).report.exit_code == code


def test_pairs_missing_from_the_test_are_not_evaluated_never_a_pass() -> None:
    pairs = [_pair(0, 1, "works")]
    facts = replace(
        load("rtxpro6000x4-threadripper-iommu"),
        p2p_transfers=P2PProbeFacts(wall_s=1.0, pairs=pairs),
    )
    r = result(facts, "p2p.transfer")
    assert r.status is Status.ERROR
    assert "only 1 of 6 GPU pairs" in r.summary


# ------------------------------------------------ a capture is judged by the reader's rules


def test_a_capture_is_judged_again_after_the_p2p_threshold_changes() -> None:
    """The captured 2x H200 pair (392 GB/s peer, 52 GB/s host-staged) works under the
    shipped threshold; demand 10x the host path (rule data given to the engine) and the
    same capture is slower-than-host."""
    import msgspec

    from blackwell_doctor.ruledata.rules import load_rule_data
    from blackwell_doctor.rules.engine import Engine, registered_checks
    from blackwell_doctor.rules.p2p import pair_verdict

    capture = (FACTS_FIXTURES / "h200x2-captured.json").read_bytes()
    assert result(decode_facts(capture), "p2p.transfer").status is Status.PASS

    shipped = load_rule_data()
    demand_10x = msgspec.structs.replace(shipped.thresholds.p2p, min_peer_vs_host=10.0)
    rules = msgspec.structs.replace(
        shipped, thresholds=msgspec.structs.replace(shipped.thresholds, p2p=demand_10x)
    )
    facts = decode_facts(capture)
    [r] = Engine(rules=rules, checks=registered_checks()).run(facts, select=["p2p.transfer"])
    assert r.status is Status.WARN
    assert "GPU0-GPU1" in r.summary
    assert "< 10x host-staged 52.1 GB/s" in str(r.evidence["GPU0-GPU1"])
    t = facts.p2p_transfers
    assert isinstance(t, P2PProbeFacts)
    [pair] = t.pairs
    assert pair_verdict(pair, demand_10x).verdict == "slower-than-host"
    assert result(decode_facts(capture), "p2p.transfer").status is Status.PASS


def judged_pairs(capture: bytes) -> list[Judged]:
    t = decode_facts(capture).p2p_transfers
    assert isinstance(t, P2PProbeFacts)
    return judged(t)


def test_a_version_1_verdict_is_not_replayed_but_judged_from_its_measurements() -> None:
    """Version 1 froze "works" beside a peer copy slower than the host path: read today,
    the measurements decide."""
    doc = json.loads((FACTS_FIXTURES / "h200x2-captured.json").read_bytes())
    assert doc["schema_version"] == 1
    [pair] = doc["p2p_transfers"]["pairs"]
    assert pair["verdict"] == "works"
    pair["unidirectional_gbps"] = 30.0  # < host_staged_gbps 52.1
    facts = decode_facts(json.dumps(doc).encode())
    assert facts.schema_version == SCHEMA_VERSION == 4
    r = result(facts, "p2p.transfer")
    assert r.status is Status.WARN
    assert "slower-than-host" in str(r.evidence["GPU0-GPU1"])


@pytest.mark.parametrize(
    ("v1", "expected"),
    [
        ({"verdict": "works"}, ("works", None)),
        (
            {"verdict": "slower-than-host", "unidirectional_gbps": 8.0,
             "detail": "1->0 peer copy 8.0 GB/s < host-staged 52.1 GB/s"},
            ("slower-than-host", "1->0 peer copy 8.0 GB/s < host-staged 52.1 GB/s"),
        ),
        (
            {"verdict": "granted-but-broken", "peer_copy_verified": None,
             "detail": "p2p-timeout:20s at copy"},
            ("granted-but-broken", "p2p-timeout:20s at copy"),
        ),
        (
            {"verdict": "granted-but-broken", "peer_copy_verified": False,
             "detail": "mismatch:a-to-b:7/67108864 words"},
            ("granted-but-broken", "mismatch:a-to-b:7/67108864 words"),
        ),
        (
            {"verdict": "not-supported", "can_access_peer": False,
             "detail": "asymmetric: only 0->1 allowed"},
            ("not-supported", "asymmetric: only 0->1 allowed"),
        ),
        (
            {"verdict": "error", "detail": "p2p-timeout:20s at host-staged"},
            ("error", "p2p-timeout:20s at host-staged"),
        ),
        (
            {"verdict": "error", "detail": "p2p-incomplete:host:a-to-b,host:b-to-a"},
            ("error", "p2p-incomplete:host:a-to-b,host:b-to-a"),
        ),
    ],
)  # fmt: skip
def test_version_1_pairs_convert_to_the_same_verdict_under_the_same_rules(
    v1: dict[str, object], expected: tuple[str, str | None]
) -> None:
    doc = json.loads((FACTS_FIXTURES / "h200x2-captured.json").read_bytes())
    doc["p2p_transfers"]["pairs"][0].update(v1)
    [pair] = judged_pairs(json.dumps(doc).encode())
    assert (pair.verdict, pair.detail) == expected


# --------------------------------------------------------------------- p2p.nvml_status


def test_p2p_refused_names_the_status_and_its_short_form() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    pairs = list(nvml.p2p)
    pairs[0] = replace(pairs[0], read="CHIPSET_NOT_SUPPORTED")
    r = result(replace(facts, nvml=replace(nvml, p2p=pairs)), "p2p.nvml_status")
    assert r.status is Status.WARN
    assert "CHIPSET_NOT_SUPPORTED (CNS)" in r.summary
    assert "GPU0-GPU1" in r.summary


def test_p2p_on_geforce_says_stock_drivers_have_none() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    gpus = [replace(g, name="NVIDIA GeForce RTX 5090") for g in nvml.gpus]
    pairs = [replace(p, read="GPU_NOT_SUPPORTED", write="GPU_NOT_SUPPORTED") for p in nvml.p2p]
    r = result(replace(facts, nvml=replace(nvml, gpus=gpus, p2p=pairs)), "p2p.nvml_status")
    # Nothing to fix on stock drivers: not applicable, so --fail-on warn stays usable.
    assert r.status is Status.SKIP
    assert "GeForce" in r.summary


def test_p2p_with_pairs_missing_is_not_evaluated_never_a_pass() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(nvml.p2p, Unavailable)
    r = result(replace(facts, nvml=replace(nvml, p2p=nvml.p2p[:1])), "p2p.nvml_status")
    assert r.status is Status.ERROR
    assert "1 of 6 pairs" in r.summary


def test_p2p_status_unavailable_is_not_evaluated() -> None:
    facts = load("b200-x8")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(facts, nvml=replace(nvml, p2p=Unavailable("nvml-function-not-found")))
    assert status(facts, "p2p.nvml_status") is Status.ERROR


def test_nvlink_not_supported_alone_is_not_a_finding() -> None:
    # PCIe-only workstations report NVLINK NOT_SUPPORTED for every pair; that is normal.
    r = result(load("rtxpro6000x4-threadripper-iommu"), "p2p.nvml_status")
    assert r.status is Status.PASS
    assert any("nvlink=NS" in str(v) for v in r.evidence.values())
