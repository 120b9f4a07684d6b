"""What the collective child (:mod:`blackwell_doctor.collect.probe._collective_child`) and
its parent (:mod:`blackwell_doctor.collect.probe.collective`) say to each other: one JSON
object per line, flushed at once, so the stage a child last entered names where it hung.

The jobs: :class:`AllReduceJob` (an NCCL all-reduce over some GPUs, its sum checked on
every rank, then timed), :class:`LinkLoadJob` (each GPU's PCIe link read by NVML while
host-to-device copies keep it busy), and per pair the two sides of the peer-write tests
(:class:`PairJob`, one per side): through a CUDA IPC mapping, and through a
CUDA VMM allocation shared by file descriptor as symmetric memory shares it, with atomics
through the latter.
"""

from __future__ import annotations

from typing import Literal

import msgspec

from blackwell_doctor.collect.probe.lines import FatalLine as FatalLine
from blackwell_doctor.collect.probe.lines import LineCodec

Stage = Literal[
    "init",  # cuInit, libnccl loaded, the devices
    "buffers",  # primary contexts, streams, send/receive buffers filled per rank
    "comm",  # ncclCommInitAll
    "allreduce",  # the first all-reduce, waited for
    "verify",  # every rank's result read back and compared
    "timing",  # the timed all-reduces
    "verify-after",  # the result compared once more after timing
    "load",  # link-load job: copies running, NVML read
    "ipc-export",  # CUDA IPC: the owner's buffer and its cuIpcGetMemHandle
    "ipc-wait",  # the owner waits for the peer's write to land
    "ipc-open",  # the peer's cuIpcOpenMemHandle (peer access enabled with it)
    "ipc-write",  # the peer writes the owner's memory through the mapping
    "symm-export",  # symmetric memory: cuMemCreate (POSIX fd handle), mapped, exported as an fd
    "symm-wait",  # the owner passed the fd (SCM_RIGHTS) and waits for the peer's write
    "symm-import",  # the peer receives the fd, cuMemImportFromShareableHandle, maps, sets access
    "symm-write",  # the peer writes the owner's memory through its own mapping
    "symm-atomic",  # the peer's system-scope atomicAdds on a counter through that mapping
]

# Test seam (tests and the device script only): "hang" leaves one rank out of the first
# all-reduce, so NCCL really waits for it; "wrong-sum" gives the last rank other data than
# the sum expects, so the real comparison fails. Either acts only while NCCL_P2P_DISABLE is
# not "1": the shape of a broken peer path that the fallback fixes (NVIDIA/nccl#2079).
# For symmetric memory's writer: "symm-hang" stops it after the import, mapped, before it
# writes (the parent kills it at its deadline); "symm-wrong" copies the pattern with zero
# in word 1 through the mapping, so the owner's real comparison fails; "symm-atomic-short"
# launches one block of atomics fewer than the owner counts on, so its real count falls short.
TEST_FAULT_ENV = "BLACKWELL_DOCTOR_COLLECTIVE_TEST_FAULT"


class AllReduceJob(msgspec.Struct, frozen=True, kw_only=True, tag_field="job", tag="allreduce"):
    gpus: list[int]
    size_bytes: int
    iterations: int = 5
    library: str = "libnccl.so.2"


class LinkLoadJob(msgspec.Struct, frozen=True, kw_only=True, tag_field="job", tag="link-load"):
    gpus: list[int]
    seconds: float = 0.3  # copies per GPU before NVML is read
    size_bytes: int = 32 << 20


PairRole = Literal["owner", "writer"]


class PairJob(msgspec.Struct, frozen=True, kw_only=True, tag_field="job", tag="pair"):
    """One side of a pair's peer-write tests, both started together (the writer's start-up
    overlaps the owner's) and joined by a socket pair the parent made (``channel``: this
    side's end, an inherited fd; AF_UNIX, SOCK_SEQPACKET).

    The owner (``role="owner"``, on ``gpu``) allocates a buffer shared by CUDA IPC (vLLM's
    custom all-reduce, ``ipc``) and a cuMemCreate allocation with a POSIX file-descriptor
    handle (PyTorch's CUDA symmetric memory, what vLLM's symmetric-memory all-reduce
    allocates, ``symm``), and sends both in one message: the IPC handle's bytes and the fd
    (SCM_RIGHTS). The writer (``role="writer"``, on ``gpu``; ``peer`` is the owner's GPU)
    writes through each mapping, adds to a counter after the symmetric buffer's pattern
    with system-scope atomics, and reports each back over the channel; the owner then
    checks every word that landed, and the count.

    ``gate``: an inherited fd (a pipe's read end: collect.childproc.Gate) to read to its end
    before anything crosses between the GPUs: the parent starts the pair beside the
    all-reduce, so that CUDA starts in both while NCCL runs, and opens the gate when the
    all-reduce is done. The owner prepares its buffers first, the writer nothing."""

    role: PairRole
    gpu: int
    peer: int  # the other side's GPU (the owner reads its multicast attribute)
    channel: int
    size_bytes: int = 16 << 20
    wait_s: float = 10.0
    ipc: bool = True
    symm: bool = True
    gate: int | None = None


Job = AllReduceJob | LinkLoadJob | PairJob


class HandleLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="handle"):
    """The pair owner sent the writer what it needs over their socket pair (the IPC handle
    and the symmetric-memory fd), with whether both GPUs report multicast support (an
    attribute read)."""

    multicast: bool | None = None


class StageLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="stage"):
    stage: Stage


class VersionLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="version"):
    nccl: str
    library: str


# What a pair owner's result line judges: the IPC write, the symmetric write, or the
# counter the writer's atomics added to through the symmetric mapping.
PairPath = Literal["cuda-ipc", "symm-mem"]
PairCheck = PairPath | Literal["symm-atomic"]


class ResultLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="result"):
    """The all-reduce: whether every rank got the sum, and the median time of one. A pair
    owner's: whether what the writer wrote (``check``) landed right."""

    correct: bool
    check: PairCheck | None = None
    detail: str | None = None  # "rank1: 3/16777216 floats differ, first at 5"
    iterations: int = 0
    time_s: float | None = None


class ErrorLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="error"):
    """An NCCL or CUDA call failed: ``reason`` is a token (``nccl-error-2``)."""

    stage: Stage
    reason: str


class LinkLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="link"):
    gpu: int
    current_gen: int | None = None
    current_width: int | None = None
    max_gen: int | None = None
    max_width: int | None = None
    h2d_gbps: float | None = None
    error: str | None = None


class DoneLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="done"):
    pass


Line = (
    FatalLine | StageLine | VersionLine | ResultLine | ErrorLine | LinkLine | HandleLine | DoneLine
)

# The pattern the peer writes through the IPC mapping (a 32-bit word, everywhere).
IPC_PATTERN = 0x5EED1DC0
# The pattern the peer writes through its symmetric-memory mapping (a different word, so a
# stale IPC buffer can never pass for it).
SYMM_PATTERN = 0x5133E3A1
# The writer's atomics on the counter after the symmetric buffer's pattern: one
# atom.global.sys.add.u32 of 1 per thread, ATOMIC_BLOCKS x ATOMIC_THREADS of them.
ATOMIC_BLOCKS = 64
ATOMIC_THREADS = 256

_LINES: LineCodec[Line] = LineCodec(Line)
encode_line = _LINES.encode
decode_line = _LINES.decode
