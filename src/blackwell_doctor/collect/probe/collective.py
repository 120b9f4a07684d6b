"""The collective path, tested by running it: :func:`run_collective` and
:func:`run_link_load` (issue 26).

All-reduce, in the order a tensor-parallel runtime depends on it: NCCL over every GPU pair,
then over all GPUs, each in a child of its own
(:mod:`blackwell_doctor.collect.probe._collective_child`) under a deadline, its sum checked
on every rank. A run that hangs (killed at its deadline, as the P2P runner's children are),
errs or sums wrong is run again with ``NCCL_P2P_DISABLE=1``: which of the two works is what
the collective.* rules map to a setting. The library is the NCCL the runtime ships
(:func:`~blackwell_doctor.collect.nccl.find_nccl_library`).

The link load reads each GPU's PCIe link while host-to-device copies keep it busy (a GPU
idles at a lower generation), for the link.* rules.
"""

from __future__ import annotations

import os
import shutil
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.collect.childproc import ChildResult, child_env, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.collect.nccl import find_nccl_library
from blackwell_doctor.collect.probe.collective_protocol import (
    AllReduceJob,
    DoneLine,
    ErrorLine,
    FatalLine,
    HandleLine,
    IpcExportJob,
    IpcImportJob,
    LinkLine,
    LinkLoadJob,
    ResultLine,
    Stage,
    StageLine,
    SymmExportJob,
    SymmImportJob,
    VersionLine,
    decode_line,
)
from blackwell_doctor.facts.document import (
    CollectiveFacts,
    CollectivePath,
    CollectiveRun,
    LinkLoadFacts,
    LoadedLink,
    Unavailable,
)

CUDA_LIBRARY = "libcuda.so.1"
CHILD_MODULE = "blackwell_doctor.collect.probe._collective_child"
FALLBACK_ENV = {"NCCL_P2P_DISABLE": "1"}
# NVML numbers GPUs by PCI bus id; so must CUDA, for the indices to agree.
_ORDER_ENV = {"CUDA_DEVICE_ORDER": "PCI_BUS_ID"}


@dataclass
class ChildRun:
    """Everything one child said, and how it ended."""

    stages: list[Stage] = field(default_factory=list)
    version: VersionLine | None = None
    fatal: str | None = None
    result: ResultLine | None = None
    error: ErrorLine | None = None
    links: list[LinkLine] = field(default_factory=list)
    handle: str | None = None
    multicast: bool | None = None
    handle_seen: threading.Event = field(default_factory=threading.Event)
    done: bool = False

    def feed(self, raw: bytes) -> None:
        line = decode_line(raw)
        if isinstance(line, StageLine):
            self.stages.append(line.stage)
        elif isinstance(line, VersionLine):
            self.version = line
        elif isinstance(line, FatalLine):
            self.fatal = line.reason
        elif isinstance(line, ResultLine):
            self.result = line
        elif isinstance(line, ErrorLine):
            self.error = line
        elif isinstance(line, LinkLine):
            self.links.append(line)
        elif isinstance(line, HandleLine):
            self.handle = line.handle
            self.multicast = line.multicast
            self.handle_seen.set()
        elif isinstance(line, DoneLine):
            self.done = True


def _ended(result: ChildResult, run: ChildRun, limit: float) -> str:
    where = f" at {run.stages[-1]}" if run.stages else ""
    if result.ending == "start-failed":
        return f"collective-start-failed:{result.start_error}"
    if result.ending in ("timeout", "idle-timeout"):
        return f"collective-timeout:{limit:g}s{where}"
    code = result.returncode or 0
    if code < 0:
        return f"collective-crashed:signal-{-code}{where}"
    return f"collective-child-exited-early:rc={code}{where}"


Job = AllReduceJob | LinkLoadJob | IpcExportJob | IpcImportJob | SymmExportJob | SymmImportJob


def _child(
    argv: Sequence[str],
    job: Job,
    limit: float,
    extra: dict[str, str],
    run: ChildRun | None = None,
) -> tuple[ChildRun, ChildResult]:
    run = run or ChildRun()
    env = child_env({**_ORDER_ENV, **extra})
    result = run_child([*argv, msgspec.json.encode(job).decode()], limit, on_line=run.feed, env=env)
    return run, result


def gpu_sets(count: int) -> list[list[int]]:
    """Every pair, then all GPUs (when that is more than a pair)."""
    pairs = [[a, b] for a in range(count) for b in range(a + 1, count)]
    return pairs + ([list(range(count))] if count > 2 else [])


def _to_run(
    gpus: list[int], extra: dict[str, str], job: AllReduceJob, run: ChildRun, failure: str | None
) -> CollectiveRun:
    result = run.result
    time_s = result.time_s if result is not None else None
    algbw = busbw = None
    if time_s and result is not None and result.correct:
        n = len(gpus)
        algbw = job.size_bytes / time_s / 1e9
        busbw = algbw * 2 * (n - 1) / n  # nccl-tests' all-reduce bus bandwidth
    if failure is None and run.error is not None:
        failure = f"{run.error.reason} at {run.error.stage}"
    if failure is None and result is not None and not result.correct:
        failure = f"wrong-sum:{result.detail or 'unknown'}"
    return CollectiveRun(
        gpus=gpus,
        env=dict(extra),
        size_bytes=job.size_bytes,
        correct=result.correct if result is not None else None,
        iterations=result.iterations if result is not None else 0,
        time_s=time_s,
        algbw_gbps=round(algbw, 2) if algbw is not None else None,
        busbw_gbps=round(busbw, 2) if busbw is not None else None,
        failure=failure,
        stage=run.stages[-1] if run.stages else None,
    )


def library_label(path: str) -> str:
    """The library as the facts name it: from the Python packages folder on (a home
    directory in the path would name the user in a facts file meant for sharing)."""
    for folder in ("site-packages/", "dist-packages/"):
        if folder in path:
            return folder + path.split(folder, 1)[1]
    return path


def run_collective(
    gpu_count: int,
    *,
    size_bytes: int = 64 << 20,
    iterations: int = 5,
    run_timeout_s: float = 15.0,
    timeout_s: float = 120.0,
    library: str | None = None,
    child_argv: Sequence[str] | None = None,
    env: dict[str, str] | None = None,
    ipc: bool = True,
    symm: bool | None = None,
) -> CollectiveFacts | Unavailable:
    """All-reduce over every pair and all GPUs, each run within ``run_timeout_s`` and all
    within ``timeout_s``; a failed run is retried with NCCL_P2P_DISABLE=1. Then, per pair,
    a peer write through CUDA IPC (``ipc``) and through symmetric memory's fd-shared VMM
    allocation (``symm``; None: as ``ipc``). ``env`` is added to every child's environment
    (the device script's test seam)."""
    if gpu_count < 2:
        return Unavailable("skipped:one GPU: no collective")
    if child_argv is None:
        if not _can_dlopen(CUDA_LIBRARY):
            return Unavailable("libcuda-not-found")
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    library = library or find_nccl_library()
    ipc_runs: list[CollectiveRun] = []
    started = time.monotonic()
    deadline = started + timeout_s
    runs: list[CollectiveRun] = []
    version: str | Unavailable = Unavailable("not-reached")
    for gpus in gpu_sets(gpu_count):
        for extra in ({}, FALLBACK_ENV):
            remaining = deadline - time.monotonic()
            job = AllReduceJob(
                gpus=gpus, size_bytes=size_bytes, iterations=iterations, library=library
            )
            if remaining <= 1.0:
                runs.append(
                    CollectiveRun(
                        gpus=gpus,
                        env=dict(extra),
                        size_bytes=size_bytes,
                        failure=f"collective-not-run:overall-timeout:{timeout_s:g}s",
                    )
                )
                break
            limit = min(run_timeout_s, remaining)
            child, result = _child(child_argv, job, limit, {**(env or {}), **extra})
            if child.version is not None:
                version = child.version.nccl
            if child.fatal is not None:
                return Unavailable(child.fatal)
            failure = (
                None
                if (child.done or child.result or child.error)
                else _ended(result, child, limit)
            )
            collective = _to_run(gpus, extra, job, child, failure)
            runs.append(collective)
            if collective.failure is None and collective.correct:
                break  # works as the runtime gets it: no fallback to try
    pair_tests: list[tuple[CollectivePath, Callable[..., CollectiveRun]]] = []
    if ipc:
        pair_tests.append(("cuda-ipc", run_ipc_pair))
    if ipc if symm is None else symm:
        pair_tests.append(("symm-mem", run_symm_pair))
    by_path: dict[CollectivePath, list[CollectiveRun]] = {path: [] for path, _ in pair_tests}
    for a, b in (pair for pair in gpu_sets(gpu_count) if len(pair) == 2):
        remaining = deadline - time.monotonic()
        if remaining <= 1.0:
            for path, _ in pair_tests:
                by_path[path].append(
                    CollectiveRun(
                        gpus=[a, b],
                        path=path,
                        failure=f"collective-not-run:overall-timeout:{timeout_s:g}s",
                    )
                )
            continue
        limit = min(run_timeout_s, remaining)
        # The pair's IPC and symmetric-memory tests run side by side (each its own two
        # children, its own buffers and deadline): their start-ups overlap, which halves
        # what the second costs.
        with ThreadPoolExecutor(max_workers=max(1, len(pair_tests))) as pool:
            futures = [
                (path, pool.submit(test, a, b, timeout_s=limit, argv=child_argv, env=env))
                for path, test in pair_tests
            ]
            for path, future in futures:
                by_path[path].append(future.result())
    for found in by_path.values():
        ipc_runs += found
    runs += ipc_runs
    return CollectiveFacts(
        library=library_label(library),
        nccl_version=version,
        wall_s=round(time.monotonic() - started, 3),
        runs=runs,
    )


def run_ipc_pair(
    owner: int,
    writer: int,
    *,
    timeout_s: float,
    argv: Sequence[str],
    size_bytes: int = 16 << 20,
    env: dict[str, str] | None = None,
) -> CollectiveRun:
    """vLLM's custom all-reduce path for one pair: a process on ``writer`` writes a buffer
    of ``owner``'s, shared by CUDA IPC from another process, which checks what landed. Both
    children live under the deadline; the writer starts once the owner printed its handle."""
    export = IpcExportJob(gpu=owner, size_bytes=size_bytes, wait_s=max(1.0, timeout_s - 2.0))
    return _peer_write(
        export,
        lambda handle: IpcImportJob(gpu=writer, handle=handle, size_bytes=size_bytes),
        gpus=[owner, writer],
        path="cuda-ipc",
        timeout_s=timeout_s,
        argv=argv,
        env=env,
    )


def run_symm_pair(
    owner: int,
    writer: int,
    *,
    timeout_s: float,
    argv: Sequence[str],
    size_bytes: int = 16 << 20,
    env: dict[str, str] | None = None,
) -> CollectiveRun:
    """Symmetric memory's peer path for one pair, as PyTorch's CUDA symmetric memory (vLLM's
    symmetric-memory all-reduce) sets it up without multicast: the owner's child allocates
    with cuMemCreate (POSIX fd handle) and passes the fd over a Unix socket (SCM_RIGHTS) in
    a private folder; the writer's child imports, maps and writes it; the owner checks every
    word. Both children live under the deadline, the socket's folder is removed after."""
    folder = tempfile.mkdtemp(prefix="bd-symm-")
    try:
        where = os.path.join(folder, "s")
        wait = max(1.0, timeout_s - 2.0)
        export = SymmExportJob(
            gpu=owner, peer=writer, socket=where, size_bytes=size_bytes, wait_s=wait
        )
        return _peer_write(
            export,
            lambda _: SymmImportJob(gpu=writer, socket=where, size_bytes=size_bytes, wait_s=wait),
            gpus=[owner, writer],
            path="symm-mem",
            timeout_s=timeout_s,
            argv=argv,
            env=env,
        )
    finally:
        shutil.rmtree(folder, ignore_errors=True)


def _peer_write(
    export: Job,
    writer_job: Callable[[str], Job],
    *,
    gpus: list[int],
    path: CollectivePath,
    timeout_s: float,
    argv: Sequence[str],
    env: dict[str, str] | None = None,
) -> CollectiveRun:
    """One process writes another's GPU memory: the owner's child first, the writer's once
    the owner said it is ready (its handle line), both under ``timeout_s``."""
    owner_run = ChildRun()
    ended: dict[str, ChildResult] = {}

    def owner_side() -> None:
        try:
            _, ended["owner"] = _child(argv, export, timeout_s, env or {}, owner_run)
        finally:
            # An owner that ends without its handle line ends the wait for it too.
            owner_run.handle_seen.set()

    thread = threading.Thread(target=owner_side, daemon=True)
    thread.start()
    writer_run = ChildRun()
    failure: str | None = None
    if owner_run.handle_seen.wait(timeout_s) and owner_run.handle is not None:
        writer_run, result = _child(argv, writer_job(owner_run.handle), timeout_s, env or {})
        if writer_run.error is not None:
            failure = f"{writer_run.error.reason} at {writer_run.error.stage}"
        elif not writer_run.done and writer_run.fatal is None:
            failure = _ended(result, writer_run, timeout_s)
        elif writer_run.fatal is not None:
            failure = writer_run.fatal
    thread.join(timeout_s + 5.0)
    result_line = owner_run.result
    if failure is None:
        if owner_run.error is not None:
            failure = f"{owner_run.error.reason} at {owner_run.error.stage}"
        elif owner_run.fatal is not None:
            failure = owner_run.fatal
        elif result_line is None:
            owner_end = ended.get("owner")
            failure = (
                _ended(owner_end, owner_run, timeout_s)
                if owner_end is not None
                else f"collective-timeout:{timeout_s:g}s"
            )
        elif not result_line.correct:
            failure = f"wrong-data:{result_line.detail or 'unknown'}"
    stages = owner_run.stages + writer_run.stages
    return CollectiveRun(
        gpus=gpus,
        path=path,
        size_bytes=export.size_bytes,
        correct=result_line.correct if result_line is not None else None,
        failure=failure,
        stage=stages[-1] if stages else None,
        multicast=owner_run.multicast if path == "symm-mem" else None,
    )


def _in(value: int | None, top: int) -> int | None:
    """A generation or width as facts accept it; NVML's "unknown" (0xFFFFFFFF) is None."""
    return value if value is not None and 1 <= value <= top else None


def run_link_load(
    gpu_count: int,
    *,
    seconds: float = 0.3,
    timeout_s: float = 20.0,
    child_argv: Sequence[str] | None = None,
) -> LinkLoadFacts | Unavailable:
    """Each GPU's PCIe link, read under host-to-device copies, within ``timeout_s``."""
    if gpu_count < 1:
        return Unavailable("skipped:no GPU")
    if child_argv is None:
        if not _can_dlopen(CUDA_LIBRARY):
            return Unavailable("libcuda-not-found")
        child_argv = [sys.executable, "-m", CHILD_MODULE]
    started = time.monotonic()
    job = LinkLoadJob(gpus=list(range(gpu_count)), seconds=seconds)
    child, result = _child(child_argv, job, timeout_s, {})
    if child.fatal is not None:
        return Unavailable(child.fatal)
    if not child.links:
        return Unavailable(_ended(result, child, timeout_s))
    return LinkLoadFacts(
        wall_s=round(time.monotonic() - started, 3),
        gpus=[
            LoadedLink(
                gpu=line.gpu,
                current_gen=_in(line.current_gen, 16),
                current_width=_in(line.current_width, 32),
                max_gen=_in(line.max_gen, 16),
                max_width=_in(line.max_width, 32),
                h2d_gbps=line.h2d_gbps,
                error=line.error,
            )
            for line in child.links
        ],
    )
