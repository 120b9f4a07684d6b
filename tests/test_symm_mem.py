"""Symmetric memory's peer path (issue 26): the collective child's VMM export/import over a
fake driver whose GPU memory is bytearrays, with a real Unix socket and real file
descriptors passed by SCM_RIGHTS; the parent's pair runner over scripted children; the
collective.allreduce rule's symm_mem case. The same child runs on GPUs in
tests/test_preflight_gpu.py."""

from __future__ import annotations

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
from blackwell_doctor.collect.probe.collective import run_collective, run_symm_pair
from blackwell_doctor.collect.probe.collective_protocol import (
    SYMM_PATTERN,
    DoneLine,
    ErrorLine,
    HandleLine,
    ResultLine,
    StageLine,
    SymmExportJob,
    SymmImportJob,
)
from blackwell_doctor.facts.document import (
    CollectiveFacts,
    CollectiveRun,
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


_D = types.SimpleNamespace(
    CUdeviceptr=int,
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
        self.next = 0x10_0000_0000
        self.lock = threading.Lock()

    def address(self, size: int) -> int:
        with self.lock:
            self.next += max(size, GRANULARITY) * 2
            return self.next


class _VmmDriver:
    """A driver for one process: its own mappings and access rights over the world's
    allocations. ``vmm``/``posix_fd``/``multicast`` are the attributes it reports;
    ``fail`` names a call that fails with CUDA_ERROR_NOT_SUPPORTED; ``corrupt`` a word the
    peer copy gets wrong."""

    def __init__(
        self,
        world: _World,
        *,
        vmm: int = 1,
        posix_fd: int = 1,
        multicast: int = 0,
        fail: str = "",
        corrupt: int | None = None,
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

    def alloc(self, size: int) -> int:
        pointer = self.world.address(size)
        self.mapped[pointer] = bytearray(size)
        self.access[pointer] = {self.current}
        return pointer

    def download(self, pointer: int, size: int) -> bytes:
        memory, at = self._resolve(pointer, size)
        return bytes(memory[at : at + size])


def _pair(
    tmp_path: Path, owner: _VmmDriver, writer: _VmmDriver, size: int = 4 << 20
) -> tuple[list[object], list[object]]:
    """Both sides as the parent runs them: the writer once the owner said it listens."""
    where = str(tmp_path / "s")
    owner_lines: list[object] = []
    ready = threading.Event()

    def owner_emit(line: object) -> None:
        owner_lines.append(line)
        if isinstance(line, (HandleLine, ErrorLine)):
            ready.set()

    job = SymmExportJob(gpu=0, peer=1, socket=where, size_bytes=size, wait_s=5.0)
    thread = threading.Thread(
        target=child.run_symm_export,
        args=(job, owner_emit, owner),
        daemon=True,
    )
    thread.start()
    assert ready.wait(10)
    writer_lines: list[object] = []
    child.run_symm_import(
        SymmImportJob(gpu=1, socket=where, size_bytes=size, wait_s=5.0),
        writer_lines.append,
        writer,  # type: ignore[arg-type]
    )
    thread.join(10)
    assert not thread.is_alive()
    return owner_lines, writer_lines


def _stages(lines: list[object]) -> list[str]:
    return [line.stage for line in lines if isinstance(line, StageLine)]


def test_the_peer_writes_through_the_imported_allocation_and_the_owner_sees_every_word(
    tmp_path: Path,
) -> None:
    world = _World()
    owner, writer = _VmmDriver(world, multicast=1), _VmmDriver(world, multicast=1)

    owner_lines, writer_lines = _pair(tmp_path, owner, writer)

    assert ResultLine(correct=True) in owner_lines
    assert isinstance(owner_lines[-1], DoneLine)
    assert isinstance(writer_lines[-1], DoneLine)
    assert _stages(owner_lines) == ["symm-export", "symm-wait"]
    assert _stages(writer_lines) == ["symm-import", "symm-write"]
    handle = next(line for line in owner_lines if isinstance(line, HandleLine))
    assert handle.multicast is True
    # The writer mapped the owner's physical allocation, not a copy of it, and gave its own
    # GPU the access (the fake refuses writes from a GPU without it).
    (allocation,) = world.allocations.values()
    assert bytes(allocation[:8]) == SYMM_PATTERN.to_bytes(4, "little") * 2
    assert any(1 in gpus for gpus in writer.access.values())
    assert "cuMemImportFromShareableHandle" in writer.calls
    assert {"cuMemUnmap", "cuMemAddressFree", "cuMemRelease"} <= set(writer.calls)
    # Nothing here ever creates a multicast object.
    assert not [c for c in owner.calls + writer.calls if c.startswith("cuMulticast")]


def test_a_word_that_lands_wrong_is_named(tmp_path: Path) -> None:
    world = _World()

    owner_lines, _ = _pair(tmp_path, _VmmDriver(world), _VmmDriver(world, corrupt=7))

    result = next(line for line in owner_lines if isinstance(line, ResultLine))
    assert result.correct is False
    assert result.detail == "symm: differs from the pattern at word 7"


def test_an_export_the_driver_refuses_is_an_error_at_export(tmp_path: Path) -> None:
    world = _World()
    lines: list[object] = []
    job = SymmExportJob(gpu=0, peer=1, socket=str(tmp_path / "s"), size_bytes=4096, wait_s=1)

    child.run_symm_export(
        job,
        lines.append,
        _VmmDriver(world, fail="cuMemExportToShareableHandle"),  # type: ignore[arg-type]
    )

    assert lines[-1] == ErrorLine(stage="symm-export", reason="cuda-error-not-supported")
    assert not (tmp_path / "s").exists()  # never listened: the parent starts no writer


@pytest.mark.parametrize(
    ("attributes", "reason"),
    [
        ({"vmm": 0}, "symm-vmm-not-supported"),
        ({"posix_fd": 0}, "symm-posix-fd-not-supported"),
    ],
)
def test_a_gpu_without_vmm_or_fd_handles_says_which(
    tmp_path: Path, attributes: dict[str, int], reason: str
) -> None:
    lines: list[object] = []
    job = SymmExportJob(gpu=0, peer=1, socket=str(tmp_path / "s"), size_bytes=4096, wait_s=1)

    child.run_symm_export(job, lines.append, _VmmDriver(_World(), **attributes))  # type: ignore[arg-type]

    assert lines[-1] == ErrorLine(stage="symm-export", reason=reason)


def test_an_import_the_driver_refuses_is_an_error_at_import(tmp_path: Path) -> None:
    world = _World()

    owner_lines, writer_lines = _pair(
        tmp_path, _VmmDriver(world), _VmmDriver(world, fail="cuMemImportFromShareableHandle")
    )

    assert writer_lines[-1] == ErrorLine(stage="symm-import", reason="cuda-error-not-supported")
    owner_error = next(line for line in owner_lines if isinstance(line, ErrorLine))
    assert owner_error.reason == "symm-write-not-seen:5s"


def test_a_writer_with_no_owner_to_reach_names_the_socket_error(tmp_path: Path) -> None:
    lines: list[object] = []
    job = SymmImportJob(gpu=1, socket=str(tmp_path / "absent"), size_bytes=4096, wait_s=1)

    child.run_symm_import(job, lines.append, _VmmDriver(_World()))  # type: ignore[arg-type]

    assert lines[-1] == ErrorLine(stage="symm-import", reason="symm-socket:ENOENT")


def test_the_fd_crosses_the_socket_as_a_descriptor_of_the_same_file(tmp_path: Path) -> None:
    import socket

    where = str(tmp_path / "s")
    fd = os.memfd_create("probe")
    os.write(fd, b"the owner's allocation")
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as server:
        server.bind(where)
        server.listen(1)

        def serve() -> None:
            conn, _ = server.accept()
            with conn:
                socket.send_fds(conn, [child._SIZE.pack(1 << 21)], [fd])

        thread = threading.Thread(target=serve, daemon=True)
        thread.start()
        received, size = child.receive_fd(where, 5.0)
        thread.join(5)
    try:
        assert size == 1 << 21
        assert received != fd
        assert os.fstat(received).st_ino == os.fstat(fd).st_ino
        assert os.pread(received, 64, 0) == b"the owner's allocation"
    finally:
        os.close(received)
        os.close(fd)


# --------------------------------------------------------------------- the parent's runner

# Both sides as processes speaking the protocol: the owner listens on the socket the job
# names and hands a real fd across; the writer receives it and writes through it (a memfd
# standing in for the allocation) unless told to hang; the owner checks what landed.
_SYMM_CHILD = textwrap.dedent(
    """
    import json, os, socket, sys, time
    job = json.loads(sys.argv[-1])
    def say(**line):
        sys.stdout.write(json.dumps(line) + "\\n"); sys.stdout.flush()
    if job["job"] == "symm-export":
        say(event="stage", stage="symm-export")
        fd = os.memfd_create("allocation")
        server = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        server.bind(job["socket"]); server.listen(1)
        say(event="handle", handle=job["socket"], multicast=False)
        say(event="stage", stage="symm-wait")
        conn, _ = server.accept()
        socket.send_fds(conn, [b"size"], [fd]); conn.close()
        while os.pread(fd, 4, 0) != b"mark":
            time.sleep(0.01)
        say(event="result", correct=True)
        say(event="done")
    else:
        say(event="stage", stage="symm-import")
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM); conn.connect(job["socket"])
        _, fds, _, _ = socket.recv_fds(conn, 8, 1)
        say(event="stage", stage="symm-write")
        if os.environ.get("WRITER_HANGS"):
            time.sleep(600)
        os.pwrite(fds[0], b"mark", 0)
        say(event="done")
    """
)


def test_symm_pair_passes_the_fd_in_a_private_folder_and_checks_what_landed(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)

    run = run_symm_pair(0, 1, timeout_s=10, argv=[sys.executable, "-c", _SYMM_CHILD])

    assert run.path == "symm-mem"
    assert run.gpus == [0, 1]
    assert run.failure is None, run
    assert run.correct is True
    assert run.multicast is False
    assert list(tmp_path.iterdir()) == []  # the socket's folder is removed


def test_symm_writer_that_hangs_is_killed_and_named(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("WRITER_HANGS", "1")
    started = time.monotonic()

    # 8 s: room for two interpreter starts on a loaded machine before the writer hangs.
    run = run_symm_pair(0, 1, timeout_s=8, argv=[sys.executable, "-c", _SYMM_CHILD])

    assert run.failure == "collective-timeout:8s at symm-write"
    assert run.correct is None
    assert time.monotonic() - started < 60  # the writer sleeps 600 s: it was killed


def test_run_collective_tests_symmetric_memory_per_pair_only_when_asked() -> None:
    facts = run_collective(
        3, timeout_s=60, run_timeout_s=10, child_argv=[sys.executable, "-c", _SYMM_CHILD],
        ipc=False, symm=True,
    )  # fmt: skip

    assert isinstance(facts, CollectiveFacts)
    symm = [r for r in facts.runs if r.path == "symm-mem"]
    assert [r.gpus for r in symm] == [[0, 1], [0, 2], [1, 2]]
    assert all(r.correct is True for r in symm)
    assert not [r for r in facts.runs if r.path == "cuda-ipc"]


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
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blackwell_doctor.collect.probe.collective_protocol import TEST_FAULT_ENV

    monkeypatch.setenv(TEST_FAULT_ENV, "symm-wrong")
    world = _World()

    owner_lines, writer_lines = _pair(tmp_path, _VmmDriver(world), _VmmDriver(world))

    assert isinstance(writer_lines[-1], DoneLine)
    result = next(line for line in owner_lines if isinstance(line, ResultLine))
    assert result == ResultLine(correct=False, detail="symm: differs from the pattern at word 1")


def test_the_real_child_without_a_driver_says_so_in_one_line(tmp_path: Path) -> None:
    import json
    import subprocess

    from blackwell_doctor.collect.childproc import child_env

    job = {"job": "symm-import", "gpu": 1, "socket": str(tmp_path / "s"), "wait_s": 1}
    env = child_env({"LD_LIBRARY_PATH": str(tmp_path), "CUDA_VISIBLE_DEVICES": ""})
    done = subprocess.run(
        [sys.executable, "-m", child.__name__, json.dumps(job)],
        capture_output=True,
        env=env,
        timeout=120,
        check=False,
    )

    assert done.returncode == 0, done.stderr
    lines = [json.loads(raw) for raw in done.stdout.splitlines()]
    assert lines[0] == {"event": "stage", "stage": "symm-import"}
    assert lines[-1]["event"] in ("fatal", "error")  # no GPU here: a reason, no traceback
    assert b"Traceback" not in done.stderr


def test_an_owner_that_dies_before_it_listens_ends_the_pair_at_once() -> None:
    dies = 'import sys; print(\'{"event": "stage", "stage": "symm-export"}\'); sys.exit(3)'
    started = time.monotonic()

    run = run_symm_pair(0, 1, timeout_s=30, argv=[sys.executable, "-c", dies])

    assert run.failure == "collective-child-exited-early:rc=3 at symm-export"
    assert run.correct is None
    assert time.monotonic() - started < 25  # not the 30 s deadline: no writer was started


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


def test_a_pairs_ipc_and_symm_tests_run_side_by_side_and_are_listed_by_path(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from blackwell_doctor.collect.probe import collective

    # Each side waits for the other at a barrier: run one after the other, it would break.
    barrier = threading.Barrier(2, timeout=20)

    def side(path: Any) -> Any:
        def test(a: int, b: int, **_: Any) -> CollectiveRun:
            barrier.wait()
            return CollectiveRun(gpus=[a, b], path=path, correct=True)

        return test

    monkeypatch.setattr(collective, "run_ipc_pair", side("cuda-ipc"))
    monkeypatch.setattr(collective, "run_symm_pair", side("symm-mem"))

    facts = run_collective(
        3, timeout_s=120, run_timeout_s=30, child_argv=[sys.executable, "-c", _ALLREDUCE_CHILD]
    )

    assert isinstance(facts, CollectiveFacts)
    assert [(r.path, r.gpus) for r in facts.runs if r.path != "nccl"] == [
        ("cuda-ipc", [0, 1]), ("cuda-ipc", [0, 2]), ("cuda-ipc", [1, 2]),
        ("symm-mem", [0, 1]), ("symm-mem", [0, 2]), ("symm-mem", [1, 2]),
    ]  # fmt: skip
