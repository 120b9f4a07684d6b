"""Symmetric memory's peer path (issue 26): the collective child's VMM export/import over a
fake driver whose GPU memory is bytearrays, with a real Unix socket and real file
descriptors passed by SCM_RIGHTS; the parent's pair runner over scripted children; the
collective.allreduce rule's symm_mem case. The same child runs on GPUs in
tests/test_preflight_gpu.py."""

from __future__ import annotations

import ctypes
import os
import sys
import textwrap
import threading
import time
import types
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect.cuda_driver import CudaFailure
from blackwell_doctor.collect.probe import _collective_child as child
from blackwell_doctor.collect.probe.collective import run_collective, run_pair
from blackwell_doctor.collect.probe.collective_protocol import (
    ATOMIC_BLOCKS,
    ATOMIC_THREADS,
    IPC_PATTERN,
    SYMM_PATTERN,
    DoneLine,
    ErrorLine,
    HandleLine,
    PairJob,
    ResultLine,
    StageLine,
)
from blackwell_doctor.facts.document import (
    CollectiveFacts,
    CollectiveRun,
    Unavailable,
    decode_facts,
)
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.collective import collective_allreduce
from tests.conftest import FIXTURES

GRANULARITY = 2 << 20


class _Obj:
    """A cuda-bindings struct stand-in: CUmemAllocationProp, CUmemAccessDesc."""

    def __init__(self) -> None:
        self.location = types.SimpleNamespace(type=None, id=None)


class _IpcHandle:
    """CUipcMemHandle as cuda-bindings 13 gives it: 64 bytes behind ``getPtr()``."""

    def __init__(self) -> None:
        self.raw = ctypes.create_string_buffer(64)

    def getPtr(self) -> int:
        return ctypes.addressof(self.raw)


_D = types.SimpleNamespace(
    CUdeviceptr=int,
    CUipcMemHandle=_IpcHandle,
    CUmemAllocationProp=_Obj,
    CUmemAccessDesc=_Obj,
    CUmemAllocationType=types.SimpleNamespace(CU_MEM_ALLOCATION_TYPE_PINNED="pinned"),
    CUmemLocationType=types.SimpleNamespace(CU_MEM_LOCATION_TYPE_DEVICE="device"),
    CUmemAllocationHandleType=types.SimpleNamespace(CU_MEM_HANDLE_TYPE_POSIX_FILE_DESCRIPTOR="fd"),
    CUmemAccess_flags=types.SimpleNamespace(CU_MEM_ACCESS_FLAGS_PROT_READWRITE="rw"),
    CUmemAllocationGranularity_flags=types.SimpleNamespace(
        CU_MEM_ALLOC_GRANULARITY_RECOMMENDED="recommended"
    ),
)


class _World:
    """What both processes' drivers share: physical allocations, and which one an exported
    fd stands for (by the fd's inode, which survives SCM_RIGHTS)."""

    def __init__(self) -> None:
        self.allocations: dict[int, bytearray] = {}
        self.by_inode: dict[int, int] = {}
        self.ipc: dict[int, bytearray] = {}
        self.next = 0x10_0000_0000
        self.lock = threading.Lock()

    def address(self, size: int) -> int:
        with self.lock:
            self.next += max(size, GRANULARITY) * 2
            return self.next


class _VmmDriver:
    """A driver for one process: its own mappings and access rights over the world's
    allocations (CUDA IPC handles among them). ``vmm``/``posix_fd``/``multicast`` are the
    attributes it reports; ``fail`` names a call that fails with CUDA_ERROR_NOT_SUPPORTED;
    ``corrupt`` a word the peer copy gets wrong; ``lost`` atomic adds that never land."""

    def __init__(
        self,
        world: _World,
        *,
        vmm: int = 1,
        posix_fd: int = 1,
        multicast: int = 0,
        fail: str = "",
        corrupt: int | None = None,
        lost: int = 0,
    ) -> None:
        self.d = _D
        self.world = world
        self.attributes = {
            "VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED": vmm,
            "HANDLE_TYPE_POSIX_FILE_DESCRIPTOR_SUPPORTED": posix_fd,
            "MULTICAST_SUPPORTED": multicast,
        }
        self.fail = fail
        self.corrupt = corrupt
        self.lost = lost
        self.current = -1
        self.mapped: dict[int, bytearray] = {}
        self.access: dict[int, set[int]] = {}
        self.calls: list[str] = []

    def _resolve(self, pointer: int, size: int) -> tuple[bytearray, int]:
        for base, memory in self.mapped.items():
            if base <= pointer and pointer + size <= base + len(memory):
                return memory, pointer - base
        raise CudaFailure("CUDA_ERROR_INVALID_VALUE")

    def _writable(self, pointer: int) -> None:
        for base, memory in self.mapped.items():
            inside = base <= pointer < base + len(memory)
            if inside and self.current not in self.access.get(base, set()):
                raise CudaFailure("CUDA_ERROR_ILLEGAL_ADDRESS")

    def call(self, function: str, *args: Any) -> Any:
        self.calls.append(function)
        if function == self.fail:
            raise CudaFailure("CUDA_ERROR_NOT_SUPPORTED")
        if function == "cuDeviceGet":
            return args[0]
        if function == "cuDevicePrimaryCtxRetain":
            return ("context", args[0])
        if function == "cuCtxSetCurrent":
            context = args[0]
            self.current = int(context[1])
            return None
        if function == "cuMemGetAllocationGranularity":
            prop = args[0]
            assert prop.requestedHandleTypes == "fd"
            return GRANULARITY
        if function == "cuMemCreate":
            size, prop, _ = args
            assert size % GRANULARITY == 0  # rounded up to the granularity, as PyTorch does
            assert prop.type == "pinned"
            assert prop.location.type == "device"
            assert prop.location.id == self.current
            handle = self.world.address(size)
            self.world.allocations[handle] = bytearray(size)
            return handle
        if function == "cuMemAddressReserve":
            size = args[0]
            return self.world.address(size)
        if function == "cuMemMap":
            pointer, size, _, handle, _ = args
            memory = self.world.allocations[handle]
            assert size == len(memory)  # the whole allocation, as map_block maps it
            self.mapped[pointer] = memory
            return None
        if function == "cuMemSetAccess":
            pointer, _, descs, count = args
            for desc in descs:
                assert desc.flags == "rw"
                self.access.setdefault(pointer, set()).add(desc.location.id)
            return None
        if function == "cuMemExportToShareableHandle":
            handle, kind, _ = args
            assert kind == "fd"
            fd = os.memfd_create("fake-vmm-allocation")
            self.world.by_inode[os.fstat(fd).st_ino] = handle
            return fd
        if function == "cuIpcGetMemHandle":
            memory, _ = self._resolve(args[0], 4)
            key = self.world.address(len(memory))
            self.world.ipc[key] = memory
            ipc_handle = _IpcHandle()
            ctypes.memmove(ipc_handle.raw, key.to_bytes(8, "little"), 8)
            return ipc_handle
        if function == "cuIpcOpenMemHandle":
            handle, _ = args
            memory = self.world.ipc[int.from_bytes(handle.raw[:8], "little")]
            pointer = self.world.address(len(memory))
            self.mapped[pointer] = memory
            self.access[pointer] = {self.current}  # lazily enabled peer access
            return pointer
        if function == "cuModuleLoadData":
            assert args[0].endswith(b"\0")
            assert b"atom.global.sys.add.u32" in args[0]
            return "module"
        if function == "cuModuleGetFunction":
            return args[1]
        if function == "cuMemImportFromShareableHandle":
            fd, kind = args
            assert kind == "fd"
            return self.world.by_inode[os.fstat(fd).st_ino]
        if function == "cuMemsetD32":
            pointer, value, count = args
            self._writable(pointer)
            memory, at = self._resolve(pointer, count * 4)
            memory[at : at + count * 4] = value.to_bytes(4, "little") * count
            return None
        if function == "cuMemcpyDtoD":
            dst, src, size = args
            self._writable(dst)
            source, s_at = self._resolve(src, size)
            target, t_at = self._resolve(dst, size)
            target[t_at : t_at + size] = source[s_at : s_at + size]
            if self.corrupt is not None:
                word = t_at + self.corrupt * 4
                target[word : word + 4] = b"\0\0\0\0"
            return None
        return None

    def attribute(self, device: object, name: str) -> int:
        return self.attributes[name]

    def launch(self, function: object, grid: int, block: int, smem: int, params: Any) -> None:
        """bd_peer_add: one add of 1 per thread at the counter's address; ``lost`` adds
        are dropped, as a path without working atomics could drop them."""
        self.calls.append("cuLaunchKernel")
        assert function == b"bd_peer_add"
        (counter,) = params
        self._writable(counter.value)
        memory, at = self._resolve(counter.value, 4)
        value = int.from_bytes(memory[at : at + 4], "little") + grid * block - self.lost
        memory[at : at + 4] = value.to_bytes(4, "little")

    def free(self, pointer: int) -> None:
        self.mapped.pop(pointer)

    def alloc(self, size: int) -> int:
        pointer = self.world.address(size)
        self.mapped[pointer] = bytearray(size)
        self.access[pointer] = {self.current}
        return pointer

    def download(self, pointer: int, size: int) -> bytes:
        memory, at = self._resolve(pointer, size)
        return bytes(memory[at : at + size])

    def download_into(self, pointer: int, buffer: bytearray) -> None:
        buffer[:] = self.download(pointer, len(buffer))


# How long _pair's owner waits for the writer's reports: never reached, so it costs nothing
# (the two sides are threads of this process, which a loaded machine can stall).
PAIR_WAIT_S = 60.0


def _pair(
    owner: _VmmDriver,
    writer: _VmmDriver,
    size: int = 4 << 20,
    *,
    ipc: bool = True,
    symm: bool = True,
) -> tuple[list[object], list[object]]:
    """Both sides as the parent runs them: started together, joined by a socket pair. The
    owner waits up to PAIR_WAIT_S for each report (one comes at once unless a test says
    otherwise)."""
    import socket

    owner_end, writer_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    owner_lines: list[object] = []
    sizes = {"size_bytes": size, "wait_s": PAIR_WAIT_S, "ipc": ipc, "symm": symm}
    job = PairJob(role="owner", gpu=0, peer=1, channel=owner_end.detach(), **sizes)  # type: ignore[arg-type]
    thread = threading.Thread(
        target=child.run_pair, args=(job, owner_lines.append, owner), daemon=True
    )
    thread.start()
    writer_lines: list[object] = []
    child.run_pair(
        PairJob(role="writer", gpu=1, peer=0, channel=writer_end.detach(), **sizes),  # type: ignore[arg-type]
        writer_lines.append,
        writer,  # type: ignore[arg-type]
    )
    thread.join(2 * PAIR_WAIT_S)
    assert not thread.is_alive()
    return owner_lines, writer_lines


def _stages(lines: list[object]) -> list[str]:
    return [line.stage for line in lines if isinstance(line, StageLine)]


def _checks(lines: list[object]) -> dict[str | None, ResultLine]:
    return {line.check: line for line in lines if isinstance(line, ResultLine)}


def test_both_writes_and_the_atomics_land_and_the_owner_checks_every_word() -> None:
    world = _World()
    owner, writer = _VmmDriver(world, multicast=1), _VmmDriver(world, multicast=1)

    owner_lines, writer_lines = _pair(owner, writer)

    assert _checks(owner_lines) == {
        "cuda-ipc": ResultLine(correct=True, check="cuda-ipc"),
        "symm-mem": ResultLine(correct=True, check="symm-mem"),
        "symm-atomic": ResultLine(correct=True, check="symm-atomic"),
    }
    assert isinstance(owner_lines[-1], DoneLine)
    assert isinstance(writer_lines[-1], DoneLine)
    assert _stages(owner_lines) == ["ipc-export", "symm-export", "ipc-wait", "symm-wait"]
    assert _stages(writer_lines) == [
        "ipc-open", "ipc-write", "symm-import", "symm-write", "symm-atomic",
    ]  # fmt: skip
    handle = next(line for line in owner_lines if isinstance(line, HandleLine))
    assert handle.multicast is True
    # The writer mapped the owner's physical allocation, not a copy of it, and gave its own
    # GPU the access (the fake refuses writes from a GPU without it); the counter after the
    # pattern got one add per thread.
    (allocation,) = world.allocations.values()
    size = 4 << 20
    assert bytes(allocation[:8]) == SYMM_PATTERN.to_bytes(4, "little") * 2
    counter = int.from_bytes(allocation[size : size + 4], "little")
    assert counter == ATOMIC_BLOCKS * ATOMIC_THREADS
    (ipc_buffer,) = world.ipc.values()
    assert bytes(ipc_buffer[-4:]) == IPC_PATTERN.to_bytes(4, "little")
    assert any(1 in gpus for gpus in writer.access.values())
    assert "cuMemImportFromShareableHandle" in writer.calls
    assert "cuIpcOpenMemHandle" in writer.calls
    assert {"cuMemUnmap", "cuMemAddressFree", "cuMemRelease"} <= set(writer.calls)
    # Nothing here ever creates a multicast object.
    assert not [c for c in owner.calls + writer.calls if c.startswith("cuMulticast")]


def test_a_word_that_lands_wrong_is_named_per_path() -> None:
    world = _World()

    owner_lines, _ = _pair(_VmmDriver(world), _VmmDriver(world, corrupt=7))

    checks = _checks(owner_lines)
    assert checks["cuda-ipc"].correct is False
    assert checks["cuda-ipc"].detail == "ipc: differs from the pattern at word 7"
    assert checks["symm-mem"].correct is False
    assert checks["symm-mem"].detail == "symm: differs from the pattern at word 7"


def test_atomics_that_do_not_all_land_are_counted() -> None:
    world = _World()

    owner_lines, _ = _pair(_VmmDriver(world), _VmmDriver(world, lost=3))

    checks = _checks(owner_lines)
    assert checks["symm-mem"].correct is True
    total = ATOMIC_BLOCKS * ATOMIC_THREADS
    assert checks["symm-atomic"] == ResultLine(
        correct=False, check="symm-atomic", detail=f"atomic: {total - 3} of {total} adds landed"
    )


def test_an_export_the_driver_refuses_is_an_error_at_export_and_ipc_still_runs() -> None:
    world = _World()
    failing = _VmmDriver(world, fail="cuMemExportToShareableHandle")

    owner_lines, writer_lines = _pair(failing, _VmmDriver(world))

    assert ErrorLine(stage="symm-export", reason="cuda-error-not-supported") in owner_lines
    assert set(_checks(owner_lines)) == {"cuda-ipc"}
    assert "symm-import" not in _stages(writer_lines)  # no fd came: nothing to import
    assert isinstance(writer_lines[-1], DoneLine)


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"vmm": 0}, "symm-vmm-not-supported"),
        ({"posix_fd": 0}, "symm-posix-fd-not-supported"),
    ],
)
def test_a_gpu_without_vmm_or_fd_handles_says_which(
    attributes: dict[str, int], reason: str
) -> None:
    world = _World()

    owner = _VmmDriver(world, **attributes)  # type: ignore[arg-type]
    owner_lines, _ = _pair(owner, _VmmDriver(world), ipc=False)

    assert ErrorLine(stage="symm-export", reason=reason) in owner_lines


def test_an_import_the_driver_refuses_ends_the_owners_wait_at_once() -> None:
    world = _World()
    started = time.monotonic()

    owner_lines, writer_lines = _pair(
        _VmmDriver(world), _VmmDriver(world, fail="cuMemImportFromShareableHandle")
    )

    assert ErrorLine(stage="symm-import", reason="cuda-error-not-supported") in writer_lines
    # The writer reported its failure: the owner judged nothing it knew never came, and did
    # not wait out its PAIR_WAIT_S for it.
    assert set(_checks(owner_lines)) == {"cuda-ipc"}
    assert not [line for line in owner_lines if isinstance(line, ErrorLine)]
    assert time.monotonic() - started < PAIR_WAIT_S / 10


def test_a_writer_whose_owner_is_gone_says_so() -> None:
    import socket

    owner_end, writer_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    owner_end.close()
    lines: list[object] = []
    job = PairJob(role="writer", gpu=1, peer=0, channel=writer_end.detach(), wait_s=1)

    child.run_pair(job, lines.append, _VmmDriver(_World()))  # type: ignore[arg-type]

    assert lines[-1] == ErrorLine(stage="ipc-open", reason="pair-owner-gone")


# --------------------------------------------------------------------- the parent's runner

# Both sides as processes speaking the protocol over the socket pair the parent hands them:
# the owner waits for the writer's hello before it sends anything (so the pair only works
# when both run at once), hands a real fd across (a memfd standing in for the memory), and
# checks each mark the writer reports; the writer writes the marks unless told to hang.
_PAIR_CHILD = textwrap.dedent(
    """
    import json, os, socket, struct, sys, time
    job = json.loads(sys.argv[-1])
    conn = socket.socket(fileno=job["channel"])
    def say(**line):
        sys.stdout.write(json.dumps(line) + "\\n"); sys.stdout.flush()
    if job["role"] == "owner":
        say(event="stage", stage="ipc-export")
        if os.environ.get("OWNER_DIES"):
            sys.exit(3)
        assert conn.recv(16) == b"hello"
        fd = os.memfd_create("allocation"); os.ftruncate(fd, 12)
        socket.send_fds(conn, [struct.pack("<Q", 12) + b"h" * 64], [fd])
        say(event="handle", multicast=False)
        say(event="stage", stage="ipc-wait")
        want = {"cuda-ipc": (0, b"ipcw"), "symm-mem": (4, b"symw"), "symm-atomic": (8, b"atom")}
        while want:
            name = conn.recv(64).decode().partition(":")[0]
            if not name:
                break
            at, mark = want.pop(name)
            say(event="result", check=name, correct=os.pread(fd, 4, at) == mark)
        say(event="done")
    else:
        say(event="stage", stage="ipc-open")
        try:
            conn.send(b"hello")
            message, fds, _, _ = socket.recv_fds(conn, 72, 1)
        except OSError:
            message = b""
        if not message:
            say(event="error", stage="ipc-open", reason="pair-owner-gone")
            sys.exit(0)
        say(event="stage", stage="ipc-write")
        os.pwrite(fds[0], b"ipcw", 0); conn.send(b"cuda-ipc:written")
        say(event="stage", stage="symm-import")
        say(event="stage", stage="symm-write")
        if os.environ.get("WRITER_HANGS"):
            time.sleep(600)
        os.pwrite(fds[0], b"symw", 4); conn.send(b"symm-mem:written")
        say(event="stage", stage="symm-atomic")
        os.pwrite(fds[0], b"atom", 8); conn.send(b"symm-atomic:written")
        say(event="done")
    """
)
# A run's deadline that the two sides' interpreter starts and their protocol never reach,
# however loaded the machine: the deadline counts from the children's start (from the gate
# for a held pair, where the all-reduce's start comes first). A hang test waits it out once;
# the writer hangs for 600 s, so the deadline is still what ends it.
ROOM_S = 30.0
ROOMY_S = 120.0  # the deadline of runs in which nothing hangs: never reached, costs nothing


def test_pair_starts_both_children_together_and_reads_each_check() -> None:
    ipc, symm = run_pair(0, 1, timeout_s=ROOMY_S, argv=[sys.executable, "-c", _PAIR_CHILD])

    assert (ipc.path, symm.path) == ("cuda-ipc", "symm-mem")
    assert ipc.gpus == symm.gpus == [0, 1]
    assert (ipc.failure, ipc.correct) == (None, True), ipc
    assert (symm.failure, symm.correct) == (None, True), symm
    assert symm.atomic is True
    assert symm.multicast is False
    assert (ipc.atomic, ipc.multicast) == (None, None)
    assert (ipc.stage, symm.stage) == ("ipc-write", "symm-atomic")


def test_an_ipc_only_pair_lists_one_run() -> None:
    (ipc,) = run_pair(
        0, 1, timeout_s=ROOMY_S, argv=[sys.executable, "-c", _PAIR_CHILD], ipc=True, symm=False
    )

    assert (ipc.path, ipc.failure, ipc.correct, ipc.atomic) == ("cuda-ipc", None, True, None)


def test_symm_writer_that_hangs_is_killed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRITER_HANGS", "1")
    started = time.monotonic()

    # ROOM_S: two interpreter starts come before the writer hangs, however loaded the machine.
    ipc, symm = run_pair(0, 1, timeout_s=ROOM_S, argv=[sys.executable, "-c", _PAIR_CHILD])

    assert (ipc.failure, ipc.correct) == (None, True), ipc  # written before the hang
    assert symm.failure == f"collective-timeout:{ROOM_S:g}s at symm-write"
    assert symm.correct is None
    assert time.monotonic() - started < 60  # the writer sleeps 600 s: it was killed


def test_an_owner_that_dies_ends_the_pair_at_once(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("OWNER_DIES", "1")
    started = time.monotonic()

    runs = run_pair(0, 1, timeout_s=600, argv=[sys.executable, "-c", _PAIR_CHILD])

    assert [r.failure for r in runs] == ["collective-child-exited-early:rc=3 at ipc-export"] * 2
    assert all(r.correct is None for r in runs)
    # Not the 600 s deadline: the writer saw the owner's end close with it.
    assert time.monotonic() - started < 600 / 10


def test_run_collective_tests_symmetric_memory_per_pair_only_when_asked() -> None:
    facts = run_collective(
        3, timeout_s=600, run_timeout_s=ROOMY_S, child_argv=[sys.executable, "-c", _PAIR_CHILD],
        ipc=False, symm=True,
    )  # fmt: skip

    assert isinstance(facts, CollectiveFacts)
    symm = [r for r in facts.runs if r.path == "symm-mem"]
    assert [r.gpus for r in symm] == [[0, 1], [0, 2], [1, 2]]
    assert all(r.correct is True and r.atomic is True for r in symm)
    assert not [r for r in facts.runs if r.path == "cuda-ipc"]


# All three children of a 2-GPU run_collective in one script. The pair's sides mark that
# they started, read their gate (PairJob.gate) to its end, mark that they went on, then
# speak the pair protocol as _PAIR_CHILD does. The all-reduce waits (60 s at most) to see
# both sides started, and sums right only if neither went on yet: the pair started beside
# it and was held at its gate while it ran. COLLECTIVE_FATAL makes it a fatal line instead.
_GATED_CHILDREN = (
    textwrap.dedent(
        """
    import json, os, socket, struct, sys, time
    job = json.loads(sys.argv[-1])
    marks = os.environ["MARKS"]
    def say(**line):
        sys.stdout.write(json.dumps(line) + "\\n"); sys.stdout.flush()
    def seen(name):
        return os.path.exists(os.path.join(marks, name))
    def mark(name):
        open(os.path.join(marks, name), "w").close()
    if job["job"] == "allreduce":
        if os.environ.get("COLLECTIVE_FATAL"):
            say(event="fatal", reason="nccl-library-not-found")
            sys.exit(0)
        say(event="stage", stage="allreduce")
        deadline = time.monotonic() + 60
        while not (seen("owner.started") and seen("writer.started")):
            if time.monotonic() > deadline:
                break
            time.sleep(0.01)
        both = seen("owner.started") and seen("writer.started")
        held = both and not (seen("owner.go") or seen("writer.go"))
        say(event="version", nccl="2.27.3", library="x")
        say(event="result", correct=held, iterations=5, time_s=0.001,
            detail=None if held else f"started: {both}, held: {held}")
        say(event="done")
        sys.exit(0)
    mark(job["role"] + ".started")
    if job.get("gate") is not None:
        while os.read(job["gate"], 64):
            pass
    mark(job["role"] + ".go")
    """
    )
    + _PAIR_CHILD.split("\n", 2)[2]
)  # the pair protocol, after its own json/sys imports


def _gated_run(marks: Path, **options: Any) -> CollectiveFacts:
    options = {"timeout_s": 120, "run_timeout_s": 30, **options}
    facts = run_collective(2, child_argv=[sys.executable, "-c", _GATED_CHILDREN], **options)
    assert isinstance(facts, CollectiveFacts), facts
    return facts


def test_the_first_pair_starts_beside_the_all_reduce_and_waits_for_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKS", str(tmp_path))

    facts = _gated_run(tmp_path)

    nccl = [r for r in facts.runs if r.path == "nccl"]
    assert [(r.env, r.correct, r.failure) for r in nccl] == [({}, True, None)], nccl
    pairs = [(r.path, r.correct, r.failure) for r in facts.runs if r.path != "nccl"]
    assert pairs == [("cuda-ipc", True, None), ("symm-mem", True, None)]
    assert {p.name for p in tmp_path.iterdir()} == {
        "owner.started", "writer.started", "owner.go", "writer.go",
    }  # fmt: skip


def test_a_held_pair_that_hangs_after_its_gate_is_killed_at_the_runs_deadline(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKS", str(tmp_path))
    monkeypatch.setenv("WRITER_HANGS", "1")
    started = time.monotonic()

    # ROOM_S a run (the all-reduce's start, then the pair's protocol); 600 s overall.
    facts = _gated_run(tmp_path, run_timeout_s=ROOM_S, timeout_s=600)

    symm = next(r for r in facts.runs if r.path == "symm-mem")
    assert symm.failure == f"collective-timeout:{ROOM_S:g}s at symm-write"
    assert time.monotonic() - started < 120  # the writer sleeps 600 s: killed at the run's


def test_a_held_pair_is_ended_at_once_when_nothing_can_run(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("MARKS", str(tmp_path))
    monkeypatch.setenv("COLLECTIVE_FATAL", "1")
    monkeypatch.setenv("WRITER_HANGS", "1")
    started = time.monotonic()

    facts = run_collective(
        2, timeout_s=600, run_timeout_s=300, child_argv=[sys.executable, "-c", _GATED_CHILDREN]
    )

    assert facts == Unavailable("nccl-library-not-found")
    assert time.monotonic() - started < 120  # not the pair's 300 s, nor the 600 s cap


def test_the_symm_test_runs_only_where_vllm_sets_symmetric_memory_up() -> None:
    data = load_rule_data().preflight.collective
    assert data.uses_symm_mem((9, 0))  # H100, H200
    assert data.uses_symm_mem((10, 0))  # B200
    assert not data.uses_symm_mem((12, 0))  # RTX PRO 6000, RTX 5090: vLLM never sets it up
    assert not data.uses_symm_mem(None)


# ------------------------------------------------------------------------------ the rule


def _host_with(runs: list[CollectiveRun]) -> object:
    host = decode_facts((FIXTURES / "facts" / "h200x2-captured.json").read_bytes())
    collective = CollectiveFacts(library="x", nccl_version="2.27.3", wall_s=1.0, runs=runs)
    return msgspec.structs.replace(host, collective=collective)


_WORKING = [
    CollectiveRun(gpus=[0, 1], correct=True, time_s=0.0003, busbw_gbps=240.0),
    CollectiveRun(gpus=[0, 1], path="cuda-ipc", correct=True),
]


@pytest.mark.parametrize(
    ("failure", "correct", "status"),
    [
        ("cuda-error-not-supported at symm-import", None, "warn"),
        ("collective-timeout:15s at symm-write", None, "fail"),
        ("wrong-data:symm: differs from the pattern at word 7", False, "fail"),
        # The words landed, the peer's atomics did not add up: the signals symmetric
        # memory's barriers take would be lost.
        ("wrong-atomic:atomic: 16128 of 16384 adds landed", True, "fail"),
    ],
)
def test_symm_failure_with_nccl_and_ipc_working_maps_to_vllm_symm_mem_off(
    failure: str, correct: bool | None, status: str
) -> None:
    runs = [
        *_WORKING,
        CollectiveRun(gpus=[0, 1], path="symm-mem", correct=correct, failure=failure),
    ]
    rules = load_rule_data()

    outcome = collective_allreduce(_host_with(runs), rules)  # type: ignore[arg-type]

    assert outcome.status.value == status
    assert outcome.case == "symm_mem"
    assert failure in outcome.summary
    words = rules.checks["collective.allreduce"].cases["symm_mem"]
    assert words.commands[0] == "export VLLM_ALLREDUCE_USE_SYMM_MEM=0"
    joined = " ".join(words.commands)
    assert "--disable-custom-all-reduce" not in joined
    assert "NCCL_P2P_DISABLE" not in joined
    assert "vllm/distributed/device_communicators/symm_mem.py" in words.summary


def test_a_working_symm_write_passes_and_is_in_the_evidence() -> None:
    runs = [*_WORKING, CollectiveRun(gpus=[0, 1], path="symm-mem", correct=True, multicast=False)]

    outcome = collective_allreduce(_host_with(runs), load_rule_data())  # type: ignore[arg-type]

    assert outcome.status.value == "pass"
    assert outcome.evidence["GPU1 writes GPU0 through symmetric memory"] == "ok"

    runs[-1] = msgspec.structs.replace(runs[-1], atomic=True)
    outcome = collective_allreduce(_host_with(runs), load_rule_data())  # type: ignore[arg-type]
    assert outcome.evidence["GPU1 writes GPU0 through symmetric memory"] == (
        "ok, system-scope atomics through it add up"
    )


def test_facts_from_before_the_symm_test_read_as_they_were() -> None:
    # Written by collect on 2x H200 before this test existed (the issue-26 device evidence).
    evidence = Path(__file__).parents[1] / "benchmarks" / "evidence" / "2026-11-26"
    old = decode_facts((evidence / "preflight-h200x2" / "facts-redacted.json").read_bytes())
    assert isinstance(old.collective, CollectiveFacts)
    assert [r.path for r in old.collective.runs] == ["nccl", "cuda-ipc"]
    assert all(r.multicast is None for r in old.collective.runs)
    assert collective_allreduce(old, load_rule_data()).status.value == "pass"

    run = CollectiveRun(gpus=[0, 1], path="symm-mem", correct=True, multicast=True)
    again = msgspec.json.decode(msgspec.json.encode(run), type=CollectiveRun)
    assert again == run


def test_the_wrong_landing_seam_is_caught_by_the_real_comparison(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blackwell_doctor.collect.probe.collective_protocol import TEST_FAULT_ENV

    monkeypatch.setenv(TEST_FAULT_ENV, "symm-wrong")
    world = _World()

    owner_lines, writer_lines = _pair(_VmmDriver(world), _VmmDriver(world))

    assert isinstance(writer_lines[-1], DoneLine)
    checks = _checks(owner_lines)
    assert checks["cuda-ipc"].correct is True
    detail = "symm: differs from the pattern at word 1"
    assert checks["symm-mem"] == ResultLine(correct=False, check="symm-mem", detail=detail)


def test_the_short_atomics_seam_is_caught_by_the_real_count(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blackwell_doctor.collect.probe.collective_protocol import TEST_FAULT_ENV

    monkeypatch.setenv(TEST_FAULT_ENV, "symm-atomic-short")
    world = _World()

    owner_lines, _ = _pair(_VmmDriver(world), _VmmDriver(world))

    checks = _checks(owner_lines)
    assert checks["symm-mem"].correct is True
    total = ATOMIC_BLOCKS * ATOMIC_THREADS
    landed = total - ATOMIC_THREADS  # one block fewer
    assert checks["symm-atomic"].detail == f"atomic: {landed} of {total} adds landed"


def test_the_real_child_without_a_driver_says_so_in_one_line(tmp_path: Path) -> None:
    import json
    import socket
    import subprocess

    from blackwell_doctor.collect.childproc import child_env

    owner_end, writer_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    job = {"job": "pair", "role": "writer", "gpu": 1, "peer": 0, "channel": writer_end.fileno()}
    env = child_env({"LD_LIBRARY_PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})
    with owner_end, writer_end:
        done = subprocess.run(
            [sys.executable, "-m", child.__name__, json.dumps(job)],
            capture_output=True,
            env=env,
            timeout=120,
            check=False,
            pass_fds=(writer_end.fileno(),),
        )

    assert done.returncode == 0, done.stderr
    lines = [json.loads(raw) for raw in done.stdout.splitlines()]
    assert lines[0] == {"event": "stage", "stage": "ipc-open"}
    assert lines[-1]["event"] in ("fatal", "error")  # no GPU here: a reason, no traceback
    assert b"Traceback" not in done.stderr


@pytest.mark.parametrize(
    ("fixture", "symm"),
    [("h200x2-captured.json", True), ("rtxpro6000x4-preflight.json", False)],
)
def test_collect_runs_the_symm_test_only_on_gpus_vllm_sets_it_up_on(
    monkeypatch: pytest.MonkeyPatch, fixture: str, symm: bool
) -> None:
    from blackwell_doctor.collect import host
    from blackwell_doctor.collect.probe import collective
    from blackwell_doctor.facts.document import CudaFacts, Unavailable

    facts = decode_facts((FIXTURES / "facts" / fixture).read_bytes())
    assert isinstance(facts.cuda, CudaFacts)
    asked: dict[str, Any] = {}

    def fake_run(count: int, **kwargs: Any) -> Unavailable:
        asked.update(kwargs)
        return Unavailable("recorded")

    monkeypatch.setattr(collective, "run_collective", fake_run)
    monkeypatch.setattr(collective, "run_link_load", lambda *_, **__: Unavailable("recorded"))

    host._collect_preflight(facts.cuda, facts.nvml, enabled=True)

    assert asked["symm"] is symm


_ALLREDUCE_CHILD = textwrap.dedent(
    """
    import json, sys
    def say(**line):
        sys.stdout.write(json.dumps(line) + "\\n"); sys.stdout.flush()
    say(event="stage", stage="init")
    say(event="version", nccl="2.27.3", library="x")
    say(event="result", correct=True, iterations=5, time_s=0.001)
    say(event="done")
    """
)


def test_a_pairs_runs_are_listed_by_path_after_the_nccl_runs(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blackwell_doctor.collect.probe import collective

    asked: list[tuple[int, int, bool, bool]] = []

    def pair(a: int, b: int, *, ipc: bool, symm: bool, **_: Any) -> list[CollectiveRun]:
        asked.append((a, b, ipc, symm))
        return [
            CollectiveRun(gpus=[a, b], path="cuda-ipc", correct=True),
            CollectiveRun(gpus=[a, b], path="symm-mem", correct=True, atomic=True),
        ]

    monkeypatch.setattr(collective, "run_pair", pair)

    facts = run_collective(
        3, timeout_s=120, run_timeout_s=30, child_argv=[sys.executable, "-c", _ALLREDUCE_CHILD]
    )

    assert isinstance(facts, CollectiveFacts)
    assert asked == [(0, 1, True, True), (0, 2, True, True), (1, 2, True, True)]
    assert [(r.path, r.gpus) for r in facts.runs if r.path != "nccl"] == [
        ("cuda-ipc", [0, 1]), ("cuda-ipc", [0, 2]), ("cuda-ipc", [1, 2]),
        ("symm-mem", [0, 1]), ("symm-mem", [0, 2]), ("symm-mem", [1, 2]),
    ]  # fmt: skip


def test_the_atomics_ptx_assembles_for_hopper_and_blackwell() -> None:
    """The PTX the writer hands the driver's JIT, put through ptxas (the same compiler) for
    the compute capabilities the symmetric-memory test runs on; skipped without a CUDA
    toolkit."""
    import shutil
    import subprocess

    ptxas = shutil.which("ptxas")
    if ptxas is None:
        pytest.skip("no ptxas (CUDA toolkit) on this machine")
    source = child._ATOMIC_PTX.rstrip(b"\0")
    for arch in ("sm_90", "sm_100"):
        done = subprocess.run(
            [ptxas, f"-arch={arch}", "-o", os.devnull, "-"],
            input=source,
            capture_output=True,
            timeout=120,
            check=False,
        )
        assert done.returncode == 0, (arch, done.stderr)
