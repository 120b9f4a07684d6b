"""Verified, hang-proof peer-to-peer tests per GPU pair: :func:`run_p2p_probes`.

A driver that says "peer access allowed" is not proof (REFERENCE §4): under a translating
IOMMU transfers page-fault or hang, and ACS redirect sends peer traffic through the root
complex, slower than staging through host memory. So every unordered pair (i < j) is
tested by moving data, in a child process of its own
(:mod:`blackwell_doctor.collect.probe._p2p_child`) under a deadline: a pair that hangs is killed
and named (``p2p-timeout:20s at copy``), and the remaining pairs still run.

The first child (pair 0-1) also says how many GPUs the driver sees: fewer than two and the
whole result is ``Unavailable("skipped:one GPU: no pair")``. Without libcuda the answer is
immediate and no CUDA binding is imported.

:func:`to_transfer` turns what a child said (a :class:`PairRun`) into the pair's facts:
what was measured and seen. The verdict is the rules' (``rules/p2p.py``), so a capture is
judged again by the rules of whichever tool reads it.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.collect.childproc import ChildResult, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.collect.probe.p2p_protocol import (
    AccessLine,
    BandwidthKind,
    BandwidthLine,
    DevicesLine,
    Direction,
    DoneLine,
    ErrorLine,
    FatalLine,
    FaultLine,
    P2PJob,
    Stage,
    StageLine,
    VerifyCheck,
    VerifyLine,
    decode_line,
)
from blackwell_doctor.facts.document import P2PProbeFacts, P2PTransfer, Unavailable

CUDA_LIBRARY = "libcuda.so.1"
CHILD_MODULE = "blackwell_doctor.collect.probe._p2p_child"
SINGLE_GPU = "skipped:one GPU: no pair"
DEFAULT_SIZE_BYTES = 256 << 20

# A hang or a crash in these stages happened on the peer path: the pair is broken. In the
# others (contexts, buffers, the host-staged control) the test could not run.
PEER_STAGES: frozenset[Stage] = frozenset(
    {"enable", "copy", "peer-write", "bandwidth", "after-load"}
)


@dataclass
class PairRun:
    """Everything one pair's child said, and how it ended."""

    gpu_a: int
    gpu_b: int
    count: int | None = None
    fatal: str | None = None
    stages: list[Stage] = field(default_factory=list)
    access: AccessLine | None = None
    verified: dict[VerifyCheck, VerifyLine] = field(default_factory=dict)
    bandwidth: dict[tuple[BandwidthKind, Direction], float] = field(default_factory=dict)
    fault: FaultLine | None = None
    error: ErrorLine | None = None
    done: DoneLine | None = None
    # Why the child stopped short of DoneLine: "p2p-timeout:20s at copy",
    # "p2p-crashed:signal-11 at bandwidth", "p2p-overall-timeout:60s", ...
    failure: str | None = None
    # The failure is the pair's (a hang or crash on the peer path), not the test's.
    failure_on_peer_path: bool = False
    # The end of the child's stderr (diagnostics only; never parsed, not in the facts).
    stderr_tail: bytes = b""

    def feed(self, raw: bytes) -> None:
        line = decode_line(raw)
        if isinstance(line, DevicesLine):
            self.count = line.count
        elif isinstance(line, FatalLine):
            self.fatal = line.reason
        elif isinstance(line, StageLine):
            self.stages.append(line.stage)
        elif isinstance(line, AccessLine):
            self.access = line
        elif isinstance(line, VerifyLine):
            self.verified[line.check] = line
        elif isinstance(line, BandwidthLine):
            self.bandwidth[(line.kind, line.direction)] = line.gbps
        elif isinstance(line, FaultLine):
            self.fault = line
        elif isinstance(line, ErrorLine):
            self.error = line
        elif isinstance(line, DoneLine):
            self.done = line

    @property
    def stage(self) -> Stage | None:
        return self.stages[-1] if self.stages else None


_ONE_WAY: tuple[Direction, Direction] = ("a-to-b", "b-to-a")


@dataclass(frozen=True)
class P2PRun:
    """The facts, and each pair's raw run (per-direction numbers, for the benchmark)."""

    facts: P2PProbeFacts
    runs: list[PairRun]


def run_p2p_probes(
    *,
    timeout_s: float = 60.0,
    pair_timeout_s: float = 20.0,
    size_bytes: int = DEFAULT_SIZE_BYTES,
    child_argv: Sequence[str] | None = None,
) -> P2PProbeFacts | Unavailable:
    """Test every GPU pair within ``timeout_s`` overall, each pair within ``pair_timeout_s``.

    ``size_bytes`` is each buffer (the child halves it, down to 16 MiB, when memory is
    short). ``child_argv`` replaces the child's command line, which then gets the job as
    its last argument (tests: children that hang or crash); it also skips the no-driver
    fast path.
    """
    run = measure_p2p(
        timeout_s=timeout_s,
        pair_timeout_s=pair_timeout_s,
        size_bytes=size_bytes,
        child_argv=child_argv,
    )
    return run if isinstance(run, Unavailable) else run.facts


def measure_p2p(
    *,
    timeout_s: float = 60.0,
    pair_timeout_s: float = 20.0,
    size_bytes: int = DEFAULT_SIZE_BYTES,
    child_argv: Sequence[str] | None = None,
    iterations: int = 5,
) -> P2PRun | Unavailable:
    """:func:`run_p2p_probes`, keeping each pair's raw run as well."""
    started = time.monotonic()
    deadline = started + timeout_s
    if child_argv is None:
        if not _can_dlopen(CUDA_LIBRARY):
            return Unavailable("libcuda-not-found")
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    count: int | None = None
    queue: list[tuple[int, int]] = [(0, 1)]
    runs: list[PairRun] = []
    while queue:
        gpu_a, gpu_b = queue.pop(0)
        run = PairRun(gpu_a=gpu_a, gpu_b=gpu_b)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            run.failure = f"p2p-not-run:overall-timeout:{timeout_s:g}s"
            runs.append(run)
            continue
        limit = min(pair_timeout_s, remaining)
        job = P2PJob(gpu_a=gpu_a, gpu_b=gpu_b, size_bytes=size_bytes, iterations=iterations)
        result = run_child(
            [*child_argv, msgspec.json.encode(job).decode()], limit, on_line=run.feed
        )
        run.stderr_tail = result.stderr_tail
        if count is None:
            if run.fatal is not None:
                return Unavailable(run.fatal)
            if run.count is None:  # died before it could even count the devices
                return Unavailable(_failure_reason(result, run, pair_timeout_s, timeout_s, limit))
            count = run.count
            if count < 2:
                return Unavailable(SINGLE_GPU if count == 1 else "cuda-error-no-device")
            queue = [(i, j) for i in range(count) for j in range(i + 1, count) if (i, j) != (0, 1)]
        if run.done is None and run.fatal is None and run.error is None and run.fault is None:
            run.failure = _failure_reason(result, run, pair_timeout_s, timeout_s, limit)
            stage = run.stage
            overall = run.failure.startswith("p2p-overall-timeout")
            run.failure_on_peer_path = stage in PEER_STAGES and not overall
        runs.append(run)
    transfers = [to_transfer(run) for run in runs]
    facts = P2PProbeFacts(wall_s=round(time.monotonic() - started, 3), pairs=transfers)
    return P2PRun(facts=facts, runs=runs)


def _failure_reason(
    result: ChildResult, run: PairRun, pair_timeout_s: float, timeout_s: float, limit: float
) -> str:
    where = f" at {run.stage}" if run.stage is not None else ""
    if result.ending == "start-failed":
        return f"p2p-start-failed:{result.start_error}"
    if result.ending in ("timeout", "idle-timeout"):
        if limit < pair_timeout_s:  # cut short by the overall deadline, not the pair's own
            return f"p2p-overall-timeout:{timeout_s:g}s{where}"
        return f"p2p-timeout:{pair_timeout_s:g}s{where}"
    crash = result.crash()
    return f"p2p-crashed:{crash}{where}" if crash else f"p2p-child-exited-early{where}"


# --------------------------------------------------------------------------- the facts


def _can_access(run: PairRun) -> bool | Unavailable:
    access = run.access
    if access is None:
        return Unavailable(run.fatal or _stopped(run) or "not-reached")
    if access.a_to_b is None or access.b_to_a is None:
        return Unavailable(access.reason or "cuda-device-can-access-peer-failed")
    return access.a_to_b and access.b_to_a


def _stopped(run: PairRun) -> str | None:
    if run.error is not None:
        return f"{run.error.reason} at {run.error.stage}"
    return run.failure


def _verified(run: PairRun, check: VerifyCheck) -> bool | None:
    line = run.verified.get(check)
    return line.verified if line is not None else None


def _bandwidths(run: PairRun) -> tuple[float | None, float | None, Direction | None]:
    """(unidirectional, host-staged, direction) of the direction that fares worst against
    its host-staged control; without a control, the slower direction."""
    uni = {d: run.bandwidth.get(("uni", d)) for d in _ONE_WAY}
    host = {d: run.bandwidth.get(("host", d)) for d in _ONE_WAY}
    paired = [
        (u / h, u, h, d)
        for d in _ONE_WAY
        if (u := uni[d]) is not None and (h := host[d]) is not None and h > 0
    ]
    if paired:
        _ratio, u, h, direction = min(paired)
        return u, h, direction
    measured = [(u, d) for d, u in uni.items() if u is not None]
    if measured:
        u, direction = min(measured)
        return u, None, direction
    return None, None, None


def to_transfer(run: PairRun) -> P2PTransfer:
    """What the pair's child measured and saw, as facts. The verdict is the rules'
    (:func:`blackwell_doctor.rules.p2p.pair_verdict`)."""
    uni, host, direction = _bandwidths(run)
    access = run.access
    access_only: str | None = None
    directions = (access.a_to_b, access.b_to_a) if access is not None else (None, None)
    if None not in directions and directions[0] != directions[1]:
        access_only = _arrow(run, "a-to-b" if directions[0] else "b-to-a")
    mismatches = [line.detail or line.check for line in run.verified.values() if not line.verified]
    fault: str | None = None
    if run.fault is not None:
        fault = f"{run.fault.reason} at {run.fault.stage}"
    elif run.failure is not None and run.failure_on_peer_path:
        fault = run.failure
    error = (run.fatal or _stopped(run)) if fault is None else None
    return P2PTransfer(
        gpu_a=run.gpu_a,
        gpu_b=run.gpu_b,
        can_access_peer=_can_access(run),
        access_only=access_only,
        peer_copy_verified=_verified(run, "copy"),
        peer_write_verified=_verified(run, "peer-write"),
        after_load_verified=_verified(run, "after-load"),
        unidirectional_gbps=uni,
        bidirectional_gbps=run.bandwidth.get(("bidi", "both")),
        host_staged_gbps=host,
        direction=_arrow(run, direction) if direction is not None else None,
        mismatch=mismatches[0] if mismatches else None,
        fault=fault,
        error=error,
        not_measured=_missing(run),
    )


def _arrow(run: PairRun, direction: Direction) -> str:
    if direction == "b-to-a":
        return f"{run.gpu_b}->{run.gpu_a}"
    return f"{run.gpu_a}->{run.gpu_b}"


def _missing(run: PairRun) -> list[str]:
    missing: list[str] = [c for c in ("copy", "peer-write", "after-load") if c not in run.verified]
    missing += [f"{k}:{d}" for k, d in _EXPECTED_BANDWIDTH if (k, d) not in run.bandwidth]
    return missing


_EXPECTED_BANDWIDTH: tuple[tuple[BandwidthKind, Direction], ...] = (
    ("uni", "a-to-b"),
    ("uni", "b-to-a"),
    ("bidi", "both"),
    ("host", "a-to-b"),
    ("host", "b-to-a"),
)
