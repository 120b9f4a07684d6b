"""The P2P test on real GPUs (two or more): every pair measured and verified, a real child
blocked inside the driver killed at the pair's deadline, a real crash mid-transfer, and the
device-side check kernel counting one corrupted word exactly."""

from __future__ import annotations

import ctypes
import functools
import time
from typing import Any

import pytest

from blackwell_doctor.collect.probe import _p2p_child
from blackwell_doctor.collect.probe.p2p import run_p2p_probes
from blackwell_doctor.collect.probe.p2p_protocol import TEST_HANG_ENV, Line, P2PJob, VerifyLine
from blackwell_doctor.facts.document import P2PProbeFacts, Unavailable
from tests.factsutil import judged

pytestmark = pytest.mark.gpu

SIZE = 64 << 20


@functools.cache
def _gpu_count() -> int:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    if nvml.nvmlInit_v2() != 0:
        return 0
    count = ctypes.c_uint(0)
    rc = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    nvml.nvmlShutdown()
    return count.value if rc == 0 else 0


@pytest.fixture(autouse=True)
def _two_gpus(monkeypatch: pytest.MonkeyPatch, tmp_path_factory: pytest.TempPathFactory) -> None:
    if _gpu_count() < 2:
        pytest.skip(f"needs two GPUs, this host has {_gpu_count()}")
    monkeypatch.delenv(TEST_HANG_ENV, raising=False)
    monkeypatch.setenv("BLACKWELL_DOCTOR_CACHE_DIR", str(tmp_path_factory.getbasetemp() / "nvrtc"))


def _facts(result: P2PProbeFacts | Unavailable) -> P2PProbeFacts:
    assert isinstance(result, P2PProbeFacts), result
    return result


def test_every_pair_is_tested_and_granted_pairs_are_verified() -> None:
    facts = _facts(run_p2p_probes(timeout_s=120, size_bytes=SIZE))
    n = _gpu_count()
    assert len(facts.pairs) == n * (n - 1) // 2
    for pair in judged(facts):
        assert pair.verdict != "error", pair
        if pair.can_access_peer is True and pair.verdict != "granted-but-broken":
            assert pair.peer_copy_verified is True
            assert pair.peer_write_verified is True
            for gbps in (pair.unidirectional_gbps, pair.bidirectional_gbps, pair.host_staged_gbps):
                assert gbps is not None
                assert gbps > 0.5


def test_a_child_blocked_in_the_driver_is_killed_at_the_pair_deadline(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The seam launches a kernel on GPU 0 spinning on a flag in GPU 1's memory (through the
    # peer mapping) and waits for it: the child sits inside cuCtxSynchronize, as on a wedged
    # peer transfer.
    monkeypatch.setenv(TEST_HANG_ENV, "gpu:peer-write@0-1")
    started = time.monotonic()
    facts = _facts(run_p2p_probes(timeout_s=60, pair_timeout_s=8, size_bytes=SIZE))
    elapsed = time.monotonic() - started
    first = judged(facts)[0]
    if first.can_access_peer is not True:
        pytest.skip("GPUs 0 and 1 have no peer access: nothing to hang on")
    assert (first.verdict, first.detail) == ("granted-but-broken", "p2p-timeout:8s at peer-write")
    assert first.peer_copy_verified is True
    assert elapsed < 8 + 6 * len(facts.pairs)
    # The GPUs are usable again at once: the killed child's kernel went with it.
    monkeypatch.delenv(TEST_HANG_ENV)
    again = _facts(run_p2p_probes(timeout_s=60, size_bytes=SIZE))
    assert judged(again)[0].verdict in ("works", "slower-than-host"), again.pairs[0]


def test_a_child_killed_mid_transfer_is_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "crash:bandwidth@0-1")
    facts = _facts(run_p2p_probes(timeout_s=60, size_bytes=SIZE))
    first = judged(facts)[0]
    if first.can_access_peer is not True:
        pytest.skip("GPUs 0 and 1 have no peer access")
    assert (first.verdict, first.detail) == (
        "granted-but-broken",
        "p2p-crashed:signal-9 at bandwidth",
    )


def test_the_check_kernel_counts_one_corrupted_word(monkeypatch: pytest.MonkeyPatch) -> None:
    """In this process, with the real driver: after the peer copy, one word of B's copy is
    overwritten; the device-side count must be exactly 1, at that word."""
    original = _p2p_child.PairTest.verify
    corrupted: list[int] = []

    def corrupting(self: Any, owner: Any, address: int, seed: int, label: str) -> str | None:
        if self.stage == "copy" and label == "a-to-b" and not corrupted:
            self.ctx(owner)
            self.driver.call("cuMemsetD32", self.ptr(address + 12345 * 4), 0xDEADBEEF, 1)
            self.driver.synchronize()
            corrupted.append(1)
        result: str | None = original(self, owner, address, seed, label)
        return result

    monkeypatch.setattr(_p2p_child.PairTest, "verify", corrupting)
    lines: list[Line] = []
    _p2p_child.run_job(P2PJob(gpu_a=0, gpu_b=1, size_bytes=SIZE, iterations=2), lines.append)
    verifies = [line for line in lines if isinstance(line, VerifyLine)]
    if not verifies:
        pytest.skip(f"no peer copy ran: {lines}")
    [copy] = verifies
    assert copy.verified is False
    assert copy.detail == f"mismatch:a-to-b:1/{SIZE // 4} words, first at word 12345"
