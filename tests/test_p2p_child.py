"""The P2P child's own code (stages, verification, timing, error classes) over a fake
driver (tests/test_p2p_fakecuda.py): no GPU needed. The real thing runs in test_p2p_gpu.py."""

from __future__ import annotations

import struct

import pytest

from blackwell_doctor.collect.probe import _p2p_child
from blackwell_doctor.collect.probe._p2p_child import (
    HangSeam,
    buffer_size,
    pattern_bytes,
    pattern_word,
    run_job,
    spot_windows,
)
from blackwell_doctor.collect.probe.p2p import PairRun, to_transfer
from blackwell_doctor.collect.probe.p2p_protocol import (
    TEST_HANG_ENV,
    AccessLine,
    BandwidthLine,
    DevicesLine,
    DoneLine,
    ErrorLine,
    FatalLine,
    FaultLine,
    Line,
    P2PJob,
    StageLine,
    VerifyLine,
    decode_line,
    encode_line,
)
from tests.factsutil import Judged
from tests.test_p2p_fakecuda import FakeCuda, Knobs, fake_compile, fake_driver

SIZE = 64 << 10


@pytest.fixture(autouse=True)
def _no_nvrtc(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(_p2p_child, "compile_probes", fake_compile)
    monkeypatch.delenv(TEST_HANG_ENV, raising=False)


def _run(knobs: Knobs | None = None, size: int = SIZE) -> tuple[list[Line], FakeCuda]:
    driver, fake = fake_driver(knobs)
    lines: list[Line] = []

    def emit(line: Line) -> None:  # through the wire format, as the parent reads it
        decoded = decode_line(encode_line(line).rstrip(b"\n"))
        assert decoded == line
        lines.append(line)

    assert run_job(P2PJob(gpu_a=0, gpu_b=1, size_bytes=size, iterations=3), emit, driver) == 0
    return lines, fake


def _pair_run(lines: list[Line]) -> PairRun:
    run = PairRun(gpu_a=0, gpu_b=1)
    for line in lines:
        run.feed(encode_line(line))
    return run


def test_the_pattern_hash_matches_the_kernel_source_constants() -> None:
    # Same constants as p2p_probe.cu; a few values pinned so a change to either is seen.
    assert pattern_word(0, 0) == 0
    words = [pattern_word(i, 0x1111) for i in range(8)]
    assert len(set(words)) == 8
    assert pattern_bytes(2, 2, 7) == struct.pack("<2I", pattern_word(2, 7), pattern_word(3, 7))
    # The high half of a 64-bit index changes the word (buffers over 16 GiB).
    assert pattern_word(5, 1) != pattern_word(5 + (1 << 32), 1)


def test_buffer_sizes_and_spot_windows() -> None:
    assert buffer_size(1) == 4096
    assert buffer_size((256 << 20) + 5) == 256 << 20
    assert spot_windows(16384) == [(0, 4096), (6144, 4096), (12288, 4096)]
    assert spot_windows(1024) == [(0, 1024)]


def test_a_healthy_pair_runs_every_stage_and_measures_everything() -> None:
    lines, fake = _run()
    stages = [line.stage for line in lines if isinstance(line, StageLine)]
    assert stages == [
        "init", "access", "enable", "setup", "copy", "peer-write", "bandwidth",
        "after-load", "host-staged",
    ]  # fmt: skip
    assert isinstance(lines[0], DevicesLine)
    assert lines[0].count == 2
    assert AccessLine(a_to_b=True, b_to_a=True) in lines
    verifies = {line.check: line for line in lines if isinstance(line, VerifyLine)}
    assert {c: v.verified for c, v in verifies.items()} == {
        "copy": True,
        "peer-write": True,
        "after-load": True,
    }
    bandwidth = {
        (line.kind, line.direction): line.gbps for line in lines if isinstance(line, BandwidthLine)
    }
    assert bandwidth[("uni", "a-to-b")] == pytest.approx(100.0, rel=1e-3)
    assert bandwidth[("uni", "b-to-a")] == pytest.approx(100.0, rel=1e-3)
    assert bandwidth[("host", "a-to-b")] == pytest.approx(20.0, rel=1e-3)
    assert ("bidi", "both") in bandwidth
    assert lines[-1] == DoneLine(size_bytes=SIZE)
    assert fake.peer_enabled == {(0, 1), (1, 0)}
    # The peer write really ran on A into B's memory (the fake enforces peer access).
    assert fake.sticky is None
    transfer = Judged(to_transfer(_pair_run(lines)))
    assert transfer.verdict == "works"
    assert transfer.detail is None


def test_a_refused_pair_stops_after_the_access_query() -> None:
    lines, fake = _run(Knobs(can_access=lambda a, b: a == 0))
    assert AccessLine(a_to_b=True, b_to_a=False) in lines
    assert isinstance(lines[-1], DoneLine)
    assert "cuCtxEnablePeerAccess" not in fake.calls
    transfer = Judged(to_transfer(_pair_run(lines)))
    assert transfer.verdict == "not-supported"
    assert transfer.detail == "asymmetric: only 0->1 allowed"


def test_a_corrupting_peer_copy_is_a_mismatch_and_the_test_stops() -> None:
    lines, _fake = _run(Knobs(corrupt_peer_copy=True))
    [verify] = [line for line in lines if isinstance(line, VerifyLine)]
    assert verify.check == "copy"
    assert verify.verified is False
    assert verify.detail is not None
    assert "mismatch:a-to-b:1/16384 words" in verify.detail
    assert "mismatch:b-to-a:1/16384 words" in verify.detail
    assert not any(isinstance(line, DoneLine | BandwidthLine) for line in lines)
    transfer = Judged(to_transfer(_pair_run(lines)))
    assert transfer.verdict == "granted-but-broken"
    assert transfer.peer_copy_verified is False


def test_a_peer_write_that_loses_data_is_caught_by_the_device_check() -> None:
    lines, _fake = _run(Knobs(corrupt_peer_write=True))
    verifies = {line.check: line for line in lines if isinstance(line, VerifyLine)}
    assert verifies["copy"].verified is True
    assert verifies["peer-write"].verified is False
    assert Judged(to_transfer(_pair_run(lines))).verdict == "granted-but-broken"


def test_a_fault_on_the_peer_path_is_a_fault() -> None:
    lines, _fake = _run(Knobs(peer_copy_error="CUDA_ERROR_ILLEGAL_ADDRESS"))
    assert lines[-1] == FaultLine(stage="copy", reason="cuda-error-illegal-address")
    transfer = Judged(to_transfer(_pair_run(lines)))
    assert transfer.verdict == "granted-but-broken"
    assert transfer.detail == "cuda-error-illegal-address at copy"


def test_enable_refused_although_granted_is_broken() -> None:
    lines, _fake = _run(Knobs(enable_error="CUDA_ERROR_PEER_ACCESS_UNSUPPORTED"))
    assert lines[-1] == FaultLine(
        stage="enable", reason="enable-peer-access:cuda-error-peer-access-unsupported"
    )
    assert Judged(to_transfer(_pair_run(lines))).verdict == "granted-but-broken"


def test_short_memory_halves_the_buffers_down_to_the_floor(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_p2p_child, "MIN_FALLBACK_BYTES", 16 << 10)
    lines, _fake = _run(Knobs(alloc_limit=32 << 10), size=128 << 10)
    # 128 KiB refused, 64 KiB refused, 32 KiB fits.
    assert lines[-1] == DoneLine(size_bytes=32 << 10)


def test_memory_too_short_even_at_the_floor_is_an_error_not_a_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(_p2p_child, "MIN_FALLBACK_BYTES", 16 << 10)
    lines, _fake = _run(Knobs(alloc_limit=8 << 10), size=64 << 10)
    assert lines[-1] == ErrorLine(stage="setup", reason="cuda-error-out-of-memory")
    assert Judged(to_transfer(_pair_run(lines))).verdict == "error"


def test_no_device_is_fatal() -> None:
    lines, _fake = _run(Knobs(no_device=True))
    assert lines == [FatalLine(reason="cuda-error-no-device")]


def test_one_gpu_answers_the_count_and_stops() -> None:
    lines, _fake = _run(Knobs(gpus=1))
    assert lines == [DevicesLine(count=1)]


def test_a_bug_in_the_child_is_an_error_of_the_test(monkeypatch: pytest.MonkeyPatch) -> None:
    def boom(self: object) -> None:
        raise ZeroDivisionError

    monkeypatch.setattr(_p2p_child.PairTest, "_peer_write", boom)
    lines, _fake = _run()
    assert lines[-1] == ErrorLine(stage="peer-write", reason="p2p-child-error:ZeroDivisionError")
    assert Judged(to_transfer(_pair_run(lines))).verdict == "error"


def test_the_hang_seam_parses() -> None:
    seam = HangSeam.parse("sleep:copy@0-2")
    assert seam == HangSeam(action="sleep", stage="copy", pair=(0, 2))
    assert seam.applies("copy", (0, 2))
    assert not seam.applies("copy", (0, 1))
    assert not seam.applies("bandwidth", (0, 2))
    assert HangSeam.parse("gpu:peer-write") == HangSeam("gpu", "peer-write", None)
    assert HangSeam.parse("") is None
    assert HangSeam.parse(None) is None
