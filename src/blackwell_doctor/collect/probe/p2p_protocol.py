"""What the P2P child (:mod:`blackwell_doctor.collect.probe._p2p_child`) and its parent
(:mod:`blackwell_doctor.collect.probe.p2p`) say to each other: one JSON object per line.

The parent starts one child per GPU pair with a :class:`P2PJob` as its only argument. The
child prints, flushed at once, :class:`DevicesLine` first (how many GPUs the driver sees),
then a :class:`StageLine` as it enters each stage and what it measured as it goes, and
:class:`DoneLine` last. Whatever it printed before it hung or died is kept; the stage it
last entered names where it hung.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from blackwell_doctor.collect.probe.lines import FatalLine as FatalLine
from blackwell_doctor.collect.probe.lines import LineCodec

# Stages, in the order the child runs them.
Stage = Literal[
    "init",  # cuInit, the device count, the two contexts
    "access",  # cuDeviceCanAccessPeer both ways
    "enable",  # cuCtxEnablePeerAccess both ways
    "setup",  # buffers, the probe module, the patterns
    "copy",  # cuMemcpyPeer A->B and B->A, verified
    "peer-write",  # a kernel on each GPU writing the other's memory, verified
    "bandwidth",  # cuMemcpyPeerAsync timed: each direction, then both at once
    "after-load",  # the timed copies' destinations verified once more
    "host-staged",  # the control: device -> pinned host -> other device, timed, verified
]
STAGES: tuple[Stage, ...] = (
    "init",
    "access",
    "enable",
    "setup",
    "copy",
    "peer-write",
    "bandwidth",
    "after-load",
    "host-staged",
)

Direction = Literal["a-to-b", "b-to-a", "both"]
BandwidthKind = Literal["uni", "bidi", "host"]
VerifyCheck = Literal["copy", "peer-write", "after-load"]

# Environment variable of the test seam: ACTION:STAGE[@A-B], ACTION one of "sleep" (the
# child sleeps in Python), "gpu" (the child blocks in the driver on a kernel that spins),
# "crash" (the child kills itself with SIGKILL). Used by tests only.
TEST_HANG_ENV = "BLACKWELL_DOCTOR_P2P_TEST_HANG"


class P2PJob(msgspec.Struct, frozen=True, kw_only=True):
    gpu_a: int
    gpu_b: int
    size_bytes: int
    # Each measurement: one warm-up trial, then `trials` trials of `iterations` copies issued
    # back to back between two events; the bandwidth is that of the median trial.
    iterations: int = 5
    trials: int = 3


class DevicesLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="devices"):
    count: int


class StageLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="stage"):
    stage: Stage


class AccessLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="access"):
    """cuDeviceCanAccessPeer(A, B) and (B, A); None where the query itself failed."""

    a_to_b: bool | None
    b_to_a: bool | None
    reason: str | None = None


class VerifyLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="verify"):
    check: VerifyCheck
    verified: bool
    detail: str | None = None  # "mismatch:a-to-b:3/67108864 words, first at 17", ...


class BandwidthLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="bandwidth"):
    kind: BandwidthKind
    direction: Direction
    gbps: float  # 1e9 bytes per second, from the median of the timed copies


class FaultLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="fault"):
    """The peer path failed (a CUDA error on a peer operation): the pair is broken."""

    stage: Stage
    reason: str


class ErrorLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="error"):
    """The test itself could not go on (out of memory, no NVRTC...): not the pair's fault."""

    stage: Stage
    reason: str


class DoneLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="done"):
    size_bytes: int  # the buffer size used (smaller than asked when memory was short)


Line = (
    DevicesLine
    | FatalLine
    | StageLine
    | AccessLine
    | VerifyLine
    | BandwidthLine
    | FaultLine
    | ErrorLine
    | DoneLine
)


_LINES: LineCodec[Line] = LineCodec(Line)
encode_line = _LINES.encode
decode_line = _LINES.decode
