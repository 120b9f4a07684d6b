"""What the probe parent and its child say to each other: one JSON job in, JSON lines out.

The child prints one line per finished step, flushed, so the parent keeps every finished
step when a later one hangs or kills the child, knows which step was running (the first
one not yet reported), and can start a fresh child for the rest.

A job with ``gpu_facts`` (the first child of a ``check`` with probes) first prints the GPU
facts, one :class:`~blackwell_doctor.collect.gpu.GpuDocument` line as the GPU facts child
prints it, and probes only where :func:`~blackwell_doctor.collect.gpu.skipped_for` finds a
device: one process and one CUDA initialisation for both.
"""

from __future__ import annotations

import msgspec

from blackwell_doctor.collect.probe.lines import FatalLine as FatalLine
from blackwell_doctor.collect.probe.lines import LineCodec
from blackwell_doctor.facts.document import ClockSample, Unavailable

# Elements of K each block streams: the same work for every K_TILE (8192/64 = 128 K tiles
# of 64, 64 of 128, 32 of 256).
K_TOTAL = 8192
THREADS_PER_BLOCK = 256
TIMED_LAUNCHES = 5

LIMIT_STEP = -1  # the step index of the shared-memory bisection; tiles are 0, 1, ...


class TileSpec(msgspec.Struct, frozen=True, array_like=True):
    m: int
    n: int
    k: int
    epilogue_bytes: int


class Job(msgspec.Struct, frozen=True, kw_only=True):
    tiles: list[TileSpec]
    # None: one device per distinct (name, compute capability), the first ordinal of each.
    devices: list[int] | None = None
    # (ordinal, step) pairs still to do, in order; None: every step of every device.
    steps: list[tuple[int, int]] | None = None
    timing: bool = True
    k_total: int = K_TOTAL
    # Print the GPU facts first (and stop there when gpu.skipped_for names a reason).
    gpu_facts: bool = False
    # With the GPU facts, every GPU's health (issue 39); and read NVML's clock event
    # reasons (with clock, temperature, power, replays) while each timed launch runs.
    health: bool = False
    sample_clocks: bool = False


class DevicesLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="devices"):
    ordinals: list[int]


class DeviceLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="device"):
    ordinal: int
    name: str | Unavailable
    compute_capability: tuple[int, int] | Unavailable
    smem_optin_attribute: int | Unavailable
    sm_count: int | Unavailable
    compiled_as: str | Unavailable
    cache: str | None = None
    nvrtc_version: str | Unavailable | None = None
    # The device's PCI address (the key of its NVML samples) and, when NVML could not be
    # read during its launches, why (a reason token).
    pci_bus_id: str | None = None
    sampling_error: str | None = None


class LimitLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="limit"):
    ordinal: int
    smem_launch_limit: int | Unavailable


class TileLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="tile"):
    ordinal: int
    index: int
    launched: bool | None = None
    launch_error: str | None = None
    time_us: float | None = None
    k_iterations: int | None = None
    macs_per_s: float | None = None
    # NVML readings taken while this tile's timed launches ran (Job.sample_clocks).
    samples: list[ClockSample] = msgspec.field(default_factory=list)


class RestartLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="restart"):
    """The child's context is unusable (a sticky CUDA error): start a fresh child for the
    rest. The step that caused it has already been reported."""

    reason: str


Line = DevicesLine | DeviceLine | LimitLine | TileLine | FatalLine | RestartLine


_LINES: LineCodec[Line] = LineCodec(Line)
encode_line = _LINES.encode
decode_line = _LINES.decode
