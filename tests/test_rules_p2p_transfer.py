"""p2p.transfer: what the verified transfer test found, per pair, as a verdict."""

from __future__ import annotations

import pytest

from blackwell_doctor.facts import P2PProbeFacts, P2PTransfer, P2PVerdict, Unavailable
from blackwell_doctor.probe.report import build_p2p
from blackwell_doctor.rules.model import Status
from tests.factsutil import load, replace, result

# the Threadripper fixture has 4 GPUs: 6 pairs
PAIRS = [(0, 1), (0, 2), (0, 3), (1, 2), (1, 3), (2, 3)]


def _pair(a: int, b: int, verdict: P2PVerdict, detail: str | None = None) -> P2PTransfer:
    works = verdict in ("works", "slower-than-host")
    return P2PTransfer(
        gpu_a=a,
        gpu_b=b,
        can_access_peer=verdict != "not-supported",
        peer_copy_verified=works if verdict != "not-supported" else None,
        peer_write_verified=works if verdict != "not-supported" else None,
        unidirectional_gbps=50.0 if verdict == "works" else 8.0,
        bidirectional_gbps=95.0 if verdict == "works" else 12.0,
        host_staged_gbps=20.0,
        verdict=verdict,
        detail=detail,
    )


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
    assert build_p2p(value).exit_code == code


def test_pairs_missing_from_the_test_are_not_evaluated_never_a_pass() -> None:
    pairs = [_pair(0, 1, "works")]
    facts = replace(
        load("rtxpro6000x4-threadripper-iommu"),
        p2p_transfers=P2PProbeFacts(wall_s=1.0, pairs=pairs),
    )
    r = result(facts, "p2p.transfer")
    assert r.status is Status.ERROR
    assert "only 1 of 6 GPU pairs" in r.summary
