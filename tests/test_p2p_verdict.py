"""The verdict per GPU pair from made-up measurements (judge), and the text report."""

from __future__ import annotations

import msgspec
import pytest

from blackwell_doctor.collect.probe.p2p import PairRun, to_transfer
from blackwell_doctor.collect.probe.p2p_protocol import (
    AccessLine,
    DoneLine,
    ErrorLine,
    FaultLine,
    VerifyLine,
)
from blackwell_doctor.facts.document import P2PProbeFacts, P2PTransfer, Unavailable
from blackwell_doctor.render import Format, render
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.p2p import P2PVerdict
from blackwell_doctor.rules.presets import judge_p2p
from tests.factsutil import Judged, load


def judge(run: PairRun) -> Judged:
    """The facts the run gives, and the verdict the rules give them."""
    return Judged(to_transfer(run))


def _run(
    *,
    uni: tuple[float, float] = (370.0, 368.0),
    host: tuple[float, float] = (50.0, 51.0),
    bidi: float | None = 700.0,
    copy: bool = True,
    write: bool = True,
    after: bool = True,
    done: bool = True,
) -> PairRun:
    run = PairRun(gpu_a=0, gpu_b=1, count=2)
    run.stages = ["init", "access", "enable", "setup", "copy", "peer-write", "bandwidth"]
    run.access = AccessLine(a_to_b=True, b_to_a=True)
    for check, ok in (("copy", copy), ("peer-write", write), ("after-load", after)):
        detail = None if ok else f"mismatch:a-to-b:7/67108864 words, first at word 3 ({check})"
        run.verified[check] = VerifyLine(check=check, verified=ok, detail=detail)  # type: ignore[index,arg-type]
    run.bandwidth[("uni", "a-to-b")], run.bandwidth[("uni", "b-to-a")] = uni
    run.bandwidth[("host", "a-to-b")], run.bandwidth[("host", "b-to-a")] = host
    if bidi is not None:
        run.bandwidth[("bidi", "both")] = bidi
    if done:
        run.done = DoneLine(size_bytes=256 << 20)
    return run


def test_verified_and_faster_than_host_works() -> None:
    t = judge(_run())
    assert t.verdict == "works"
    assert (t.can_access_peer, t.peer_copy_verified, t.peer_write_verified) == (True, True, True)
    # The direction that fares worst against its control is the one reported.
    assert (t.unidirectional_gbps, t.host_staged_gbps) == (368.0, 51.0)
    assert t.bidirectional_gbps == 700.0
    assert t.detail is None


def test_verified_but_slower_than_the_host_staged_control() -> None:
    t = judge(_run(uni=(4.0, 24.0), host=(12.0, 12.0)))
    assert t.verdict == "slower-than-host"
    assert (t.unidirectional_gbps, t.host_staged_gbps) == (4.0, 12.0)
    assert t.detail == "0->1 peer copy 4.0 GB/s < host-staged 12.0 GB/s"


def test_one_slow_direction_is_enough() -> None:
    t = judge(_run(uni=(24.0, 8.0), host=(12.0, 12.0)))
    assert t.verdict == "slower-than-host"
    assert t.detail == "1->0 peer copy 8.0 GB/s < host-staged 12.0 GB/s"


def test_equal_to_the_control_is_not_slower() -> None:
    assert judge(_run(uni=(12.0, 12.0), host=(12.0, 12.0))).verdict == "works"


@pytest.mark.parametrize("broken", ["copy", "write", "after"])
def test_any_mismatch_is_broken_whatever_the_bandwidth(broken: str) -> None:
    t = judge(_run(**{broken: False}))  # type: ignore[arg-type]
    assert t.verdict == "granted-but-broken"
    assert t.detail is not None
    assert t.detail.startswith("mismatch:a-to-b:7/67108864 words")


def test_a_fault_is_broken() -> None:
    run = _run(done=False)
    run.fault = FaultLine(stage="bandwidth", reason="cuda-error-illegal-address")
    t = judge(run)
    assert (t.verdict, t.detail) == (
        "granted-but-broken",
        "cuda-error-illegal-address at bandwidth",
    )


def test_a_hang_on_the_peer_path_is_broken_elsewhere_an_error() -> None:
    run = _run(done=False)
    run.failure, run.failure_on_peer_path = "p2p-timeout:20s at bandwidth", True
    assert (judge(run).verdict, judge(run).detail) == (
        "granted-but-broken",
        "p2p-timeout:20s at bandwidth",
    )
    run.failure_on_peer_path = False
    assert judge(run).verdict == "error"


def test_not_allowed_either_way_is_not_supported() -> None:
    run = PairRun(gpu_a=2, gpu_b=3, count=4)
    run.access = AccessLine(a_to_b=False, b_to_a=False)
    run.done = DoneLine(size_bytes=1)
    t = judge(run)
    assert (t.verdict, t.can_access_peer, t.detail) == ("not-supported", False, None)
    assert t.unidirectional_gbps is None


def test_an_access_query_that_failed_is_an_error() -> None:
    run = PairRun(gpu_a=0, gpu_b=1)
    run.access = AccessLine(a_to_b=True, b_to_a=None, reason="cuda-error-invalid-device")
    t = judge(run)
    assert t.verdict == "error"
    assert t.can_access_peer == Unavailable("cuda-error-invalid-device")


def test_a_test_error_is_an_error_and_says_where() -> None:
    run = _run(done=False)
    run.verified.clear()
    run.bandwidth.clear()
    run.error = ErrorLine(stage="setup", reason="nvrtc-library-not-found")
    t = judge(run)
    assert (t.verdict, t.detail) == ("error", "nvrtc-library-not-found at setup")


def test_done_without_every_measurement_is_incomplete() -> None:
    run = _run()
    del run.bandwidth[("host", "b-to-a")]
    del run.bandwidth[("host", "a-to-b")]
    t = judge(run)
    assert t.verdict == "error"
    assert t.detail == "p2p-incomplete:host:a-to-b,host:b-to-a"


def test_a_pair_never_reached_is_an_error_with_the_reason() -> None:
    run = PairRun(gpu_a=0, gpu_b=3, failure="p2p-not-run:overall-timeout:60s")
    t = judge(run)
    assert (t.verdict, t.detail) == ("error", "p2p-not-run:overall-timeout:60s")
    assert t.can_access_peer == Unavailable("p2p-not-run:overall-timeout:60s")


# --------------------------------------------------------------------------- the report


def _facts(*pairs: P2PTransfer) -> P2PProbeFacts:
    return P2PProbeFacts(wall_s=2.5, pairs=list(pairs))


def render_p2p_text(facts: P2PProbeFacts | Unavailable) -> str:
    """``probe --p2p`` as text: p2p.transfer judged on a two-GPU host's facts with these
    measurements, through the shared renderer."""
    # Wide enough for the pair table in one piece (a narrower terminal splits its columns).
    return render(judge_p2p(load("h200x2-captured"), facts), Format.RICH, color=False, width=200)


def remedy(verdict: P2PVerdict) -> str | None:
    """The p2p.transfer check's words for ``verdict`` in checks/catalogue.toml."""
    case = load_rule_data().checks["p2p.transfer"].cases.get(verdict)
    return case.summary if case is not None else None


def _row(text: str, pair: str) -> list[str]:
    (line,) = [line for line in text.splitlines() if line.split()[:1] == [pair]]
    return line.split()


def test_the_table_has_every_column_and_a_remedy_per_verdict_present() -> None:
    works = to_transfer(_run())
    slow = to_transfer(_run(uni=(4.0, 24.0), host=(12.0, 12.0)))
    slow = msgspec.structs.replace(slow, gpu_b=2)
    text = render_p2p_text(_facts(works, slow))
    (header,) = [line for line in text.splitlines() if line.split()[:1] == ["pair"]]
    for column in (
        "pair", "driver says", "copy", "peer write", "uni GB/s", "bidi GB/s",
        "host-staged GB/s", "verdict",
    ):  # fmt: skip
        assert column in header
    assert _row(text, "GPU0<->GPU1") == [
        "GPU0<->GPU1", "allowed", "verified", "verified", "368.0", "700.0", "51.0", "works"
    ]  # fmt: skip
    assert _row(text, "GPU0<->GPU2")[-1] == "slower-than-host"
    assert "GPU0<->GPU2: 0->1 peer copy 4.0 GB/s < host-staged 12.0 GB/s" in text
    # The verdict is p2p.transfer's, with its remedy, as `check` shows it.
    assert "[warn]  p2p.transfer" in text
    assert " ".join((remedy("slower-than-host") or "-").split()) in " ".join(text.split())
    assert "pci.acs" in text
    assert "NCCL_P2P_DISABLE=1" in text
    assert "works (" not in text  # nothing to do for working pairs


def test_broken_not_supported_and_error_rows() -> None:
    broken = _run(copy=False)
    refused = PairRun(gpu_a=0, gpu_b=2, access=AccessLine(a_to_b=False, b_to_a=False))
    failed = PairRun(gpu_a=1, gpu_b=2, failure="p2p-not-run:overall-timeout:60s")
    text = render_p2p_text(_facts(to_transfer(broken), to_transfer(refused), to_transfer(failed)))
    assert "MISMATCH" in text
    assert "not allowed" in text
    assert "unknown" in text
    assert "[FAIL]  p2p.transfer" in text
    verdicts: tuple[P2PVerdict, ...] = ("granted-but-broken", "not-supported", "error")
    for verdict in verdicts:
        words = remedy(verdict)
        assert words is not None
        assert " ".join(words.split()) in " ".join(text.split())
    assert "iommu=pt" in text


def test_unavailable_and_single_gpu() -> None:
    one = judge_p2p(load("h200x2-captured"), Unavailable("skipped:one GPU: no pair"))
    assert one.report.exit_code == 0
    assert "GPU peer-to-peer: not applicable (one GPU: no pair)" in render_p2p_text(
        Unavailable("skipped:one GPU: no pair")
    )
    failed = judge_p2p(load("h200x2-captured"), Unavailable("libcuda-not-found"))
    assert failed.report.exit_code == 3
    assert "did not run (libcuda-not-found)" in render_p2p_text(Unavailable("libcuda-not-found"))
    assert "no GPU pair was tested" in render_p2p_text(_facts())
    assert judge_p2p(load("h200x2-captured"), _facts()).report.exit_code == 3


def test_exit_codes_follow_the_pairs_as_before() -> None:
    """0: every pair works; 1: a pair broken or slower than host staging; 3: a pair whose
    test failed (the p2p.transfer gate, warn and strict)."""
    host = load("h200x2-captured")
    works = to_transfer(_run())
    slow = to_transfer(_run(uni=(4.0, 24.0), host=(12.0, 12.0)))
    broken = to_transfer(_run(copy=False))
    failed = to_transfer(PairRun(gpu_a=0, gpu_b=1, failure="p2p-not-run:overall-timeout:60s"))
    assert judge_p2p(host, _facts(works)).report.exit_code == 0
    assert judge_p2p(host, _facts(slow)).report.exit_code == 1
    assert judge_p2p(host, _facts(broken)).report.exit_code == 1
    assert judge_p2p(host, _facts(failed)).report.exit_code == 3
