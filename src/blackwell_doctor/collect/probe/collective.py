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

import contextlib
import functools
import socket
import sys
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.collect.childproc import ChildResult, Gate, Rearm, child_env, run_child
from blackwell_doctor.collect.childproc import can_dlopen as _can_dlopen
from blackwell_doctor.collect.nccl import find_nccl_library
from blackwell_doctor.collect.probe.collective_protocol import (
    AllReduceJob,
    DoneLine,
    ErrorLine,
    FatalLine,
    HandleLine,
    LinkLine,
    LinkLoadJob,
    PairCheck,
    PairJob,
    PairPath,
    PairRole,
    ResultLine,
    Stage,
    StageLine,
    VersionLine,
    decode_line,
)
from blackwell_doctor.facts.document import (
    CollectiveFacts,
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
    errors: list[ErrorLine] = field(default_factory=list)
    checks: dict[PairCheck, ResultLine] = field(default_factory=dict)
    links: list[LinkLine] = field(default_factory=list)
    multicast: bool | None = None
    done: bool = False

    def feed(self, raw: bytes) -> None:
        line = decode_line(raw)
        if isinstance(line, StageLine):
            self.stages.append(line.stage)
        elif isinstance(line, VersionLine):
            self.version = line
        elif isinstance(line, FatalLine):
            self.fatal = line.reason
        elif isinstance(line, ResultLine) and line.check is not None:
            self.checks[line.check] = line
        elif isinstance(line, ResultLine):
            self.result = line
        elif isinstance(line, ErrorLine):
            self.error = line
            self.errors.append(line)
        elif isinstance(line, LinkLine):
            self.links.append(line)
        elif isinstance(line, HandleLine):
            self.multicast = line.multicast
        elif isinstance(line, DoneLine):
            self.done = True


def _command(child_argv: Sequence[str] | None) -> Sequence[str] | None:
    """The child's command: ``child_argv`` as given (a test's), else this interpreter running
    CHILD_MODULE; None where libcuda does not load (no child need start)."""
    if child_argv is not None:
        return child_argv
    return [sys.executable, "-m", CHILD_MODULE] if _can_dlopen(CUDA_LIBRARY) else None


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


Job = AllReduceJob | LinkLoadJob | PairJob


def _child(
    argv: Sequence[str],
    job: Job,
    limit: float,
    extra: dict[str, str],
    run: ChildRun | None = None,
    pass_fds: Sequence[int] = (),
    gate: Gate | None = None,
) -> tuple[ChildRun, ChildResult]:
    run = run or ChildRun()
    env = child_env({**_ORDER_ENV, **extra})
    argv = [*argv, msgspec.json.encode(job).decode()]
    result = run_child(argv, limit, on_line=run.feed, env=env, pass_fds=pass_fds, gate=gate)
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
    (the device script's test seam).

    The first pair's two children start with the all-reduce, so that their CUDA start-up
    (~0.5 s on an H200) overlaps it, and wait at a gate until the all-reduce runs are over:
    nothing crosses between the GPUs for them while NCCL is measured (issue 36). Their
    deadlines start at the gate, as a pair's run later would."""
    if gpu_count < 2:
        return Unavailable("skipped:one GPU: no collective")
    child_argv = _command(child_argv)
    if child_argv is None:
        return Unavailable("libcuda-not-found")
    library = library or find_nccl_library()
    started = time.monotonic()
    deadline = started + timeout_s
    symm = ipc if symm is None else symm
    pairs = [(p[0], p[1]) for p in gpu_sets(gpu_count) if len(p) == 2] if ipc or symm else []
    early: _GatedPair | None = None
    if pairs:
        pair = functools.partial(
            run_pair, argv=child_argv, env=env, ipc=ipc, symm=symm, timeout_s=run_timeout_s
        )
        early = _GatedPair(pair, pairs[0], cap_s=timeout_s)
    try:
        found = _all_reduce_runs(
            gpu_count,
            child_argv,
            AllReduceJob(gpus=[], size_bytes=size_bytes, iterations=iterations, library=library),
            run_timeout_s,
            timeout_s,
            deadline,
            env,
        )
    except BaseException:
        if early is not None:
            early.cancel()
        raise
    if isinstance(found, Unavailable):
        if early is not None:
            early.cancel()
        return found
    runs, version = found
    by_path: dict[PairPath, list[CollectiveRun]] = {"cuda-ipc": [], "symm-mem": []}
    for a, b in pairs:
        remaining = deadline - time.monotonic()
        if remaining <= 1.0:
            if early is not None:
                early.cancel()
                early = None
            for path in pair_paths(ipc, symm):
                by_path[path].append(
                    CollectiveRun(
                        gpus=[a, b],
                        path=path,
                        failure=f"collective-not-run:overall-timeout:{timeout_s:g}s",
                    )
                )
            continue
        limit = min(run_timeout_s, remaining)
        if early is not None:
            pair_runs, early = early.go(limit), None
        else:
            pair_runs = run_pair(
                a, b, timeout_s=limit, argv=child_argv, env=env, ipc=ipc, symm=symm
            )
        for path, run in zip(pair_paths(ipc, symm), pair_runs, strict=True):
            by_path[path].append(run)
    runs += by_path["cuda-ipc"] + by_path["symm-mem"]
    return CollectiveFacts(
        library=library_label(library),
        nccl_version=version,
        wall_s=round(time.monotonic() - started, 3),
        runs=runs,
    )


def _all_reduce_runs(
    gpu_count: int,
    child_argv: Sequence[str],
    each: AllReduceJob,
    run_timeout_s: float,
    timeout_s: float,
    deadline: float,
    env: dict[str, str] | None,
) -> tuple[list[CollectiveRun], str | Unavailable] | Unavailable:
    """The all-reduce (``each`` over each GPU set; the fallback's too where the first
    fails) and the NCCL version; Unavailable when nothing could run (a fatal line)."""
    runs: list[CollectiveRun] = []
    version: str | Unavailable = Unavailable("not-reached")
    for gpus in gpu_sets(gpu_count):
        for extra in ({}, FALLBACK_ENV):
            remaining = deadline - time.monotonic()
            job = msgspec.structs.replace(each, gpus=gpus)
            if remaining <= 1.0:
                runs.append(
                    CollectiveRun(
                        gpus=gpus,
                        env=dict(extra),
                        size_bytes=job.size_bytes,
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
    return runs, version


class _GatedPair:
    """A pair's :func:`run_pair` started ahead of its turn, on a thread of its own, its
    children waiting at a gate: :meth:`go` opens it and gives the runs, :meth:`cancel`
    ends the children unheard (their turn did not come)."""

    def __init__(
        self, pair: Callable[..., list[CollectiveRun]], gpus: tuple[int, int], *, cap_s: float
    ) -> None:
        self.gate = Gate()
        self.pool = ThreadPoolExecutor(max_workers=1)
        self.future = self.pool.submit(pair, *gpus, gate=self.gate, cap_s=cap_s)

    def go(self, limit: float) -> list[CollectiveRun]:
        self.gate.open(Rearm(limit))
        try:
            return self.future.result()
        finally:
            self._close()

    def cancel(self) -> None:
        self.gate.open(Rearm(0.0))
        with contextlib.suppress(Exception):
            self.future.result()
        self._close()

    def _close(self) -> None:
        self.pool.shutdown()
        self.gate.close()


def pair_paths(ipc: bool, symm: bool) -> list[PairPath]:
    """The peer-write paths a pair is tested on, in the order its runs are listed."""
    return [path for path, on in ((_IPC, ipc), (_SYMM, symm)) if on]


_IPC: PairPath = "cuda-ipc"
_SYMM: PairPath = "symm-mem"


def run_pair(
    owner: int,
    writer: int,
    *,
    timeout_s: float,
    argv: Sequence[str],
    size_bytes: int = 16 << 20,
    env: dict[str, str] | None = None,
    ipc: bool = True,
    symm: bool = True,
    gate: Gate | None = None,
    cap_s: float | None = None,
) -> list[CollectiveRun]:
    """One pair's peer writes, as the runtimes take the path: a process on ``writer``
    writes buffers of ``owner``'s that another process shares with it, through CUDA IPC
    (``ipc``: vLLM's custom all-reduce) and through a cuMemCreate allocation shared by
    POSIX fd (``symm``: PyTorch's CUDA symmetric memory, vLLM's symmetric-memory
    all-reduce, without multicast), where it also adds to a counter with system-scope
    atomics; the owner checks every word and the count. Two children, started together
    (the writer's start-up overlaps the owner's) and joined by a socket pair made here:
    the owner sends the IPC handle and the fd (SCM_RIGHTS) over it, the writer reports
    each write back. Both live under ``timeout_s``; one that ends closes its end here, so
    the other sees it gone at once. One run per path tested, IPC first.

    With ``gate``, both start now and wait at it (PairJob.gate) under ``cap_s`` alone; their
    deadlines are those the gate opens with, and ``timeout_s`` is what the writer's and the
    owner's own waits are sized by."""
    paths = pair_paths(ipc, symm)
    if not paths:
        return []
    wait = max(1.0, timeout_s - 2.0)
    owner_end, writer_end = socket.socketpair(socket.AF_UNIX, socket.SOCK_SEQPACKET)

    def job(role: PairRole, gpu: int, peer: int, end: socket.socket) -> PairJob:
        return PairJob(
            role=role,
            gpu=gpu,
            peer=peer,
            channel=end.fileno(),
            size_bytes=size_bytes,
            wait_s=wait,
            ipc=ipc,
            symm=symm,
            gate=gate.fd if gate is not None else None,
        )

    sides = {
        "owner": (job("owner", owner, writer, owner_end), owner_end, ChildRun()),
        "writer": (job("writer", writer, owner, writer_end), writer_end, ChildRun()),
    }
    ended: dict[str, ChildResult] = {}
    first_limit = timeout_s if gate is None or cap_s is None else cap_s

    def side(name: str) -> None:
        job, end, run = sides[name]
        try:
            _, ended[name] = _child(
                argv, job, first_limit, env or {}, run, (end.fileno(),), gate=gate
            )
        finally:
            end.close()  # this side's only other copy went with its child

    with owner_end, writer_end, ThreadPoolExecutor(max_workers=2) as pool:
        list(pool.map(side, sides))
    owner_run, writer_run = sides["owner"][2], sides["writer"][2]
    # The deadline the children ran under: the gate's, once it opened.
    limit = gate.rearm.timeout_s if gate is not None and gate.rearm is not None else timeout_s
    return [
        _pair_run(path, [owner, writer], owner_run, writer_run, ended, limit, size_bytes)
        for path in paths
    ]


def _abnormal(result: ChildResult | None) -> bool:
    """A child killed at its deadline, crashed or failed, not one that ended on its own."""
    return result is not None and (result.ending != "exited" or (result.returncode or 0) != 0)


def _pair_run(
    path: PairPath,
    gpus: list[int],
    owner: ChildRun,
    writer: ChildRun,
    ended: dict[str, ChildResult],
    limit: float,
    size_bytes: int,
) -> CollectiveRun:
    """One path's run from what both children said: the writer's own error first (it
    names where a write failed), then a writer that never finished, the owner's error or
    ending, and last what the owner found (a wrong word, a short count of atomics)."""
    prefix = "ipc-" if path == "cuda-ipc" else "symm-"

    def error(run: ChildRun, channel: bool = False) -> str | None:
        for line in run.errors:
            if not line.stage.startswith(prefix) or line.reason.startswith("atomic-module:"):
                continue  # another path's, or a driver without a PTX compiler: not the path
            if line.reason.startswith("pair-") == channel:
                return f"{line.reason} at {line.stage}"
        return None

    result = owner.checks.get(path)
    atomic = owner.checks.get("symm-atomic") if path == "symm-mem" else None
    failure = error(writer) or writer.fatal
    if failure is None and result is None and _abnormal(ended.get("writer")):
        failure = _ended(ended["writer"], writer, limit)
    failure = failure or error(owner) or owner.fatal
    if failure is None and result is None and _abnormal(ended.get("owner")):
        failure = _ended(ended["owner"], owner, limit)
    if failure is None and result is None:
        failure = error(writer, channel=True) or f"collective-no-result:{prefix}check"
    if failure is None and result is not None and not result.correct:
        failure = f"wrong-data:{result.detail or 'unknown'}"
    if failure is None and atomic is not None and not atomic.correct:
        failure = f"wrong-atomic:{atomic.detail or 'unknown'}"
    stages = [s for s in owner.stages + writer.stages if s.startswith(prefix)]
    return CollectiveRun(
        gpus=gpus,
        path=path,
        size_bytes=size_bytes,
        correct=result.correct if result is not None else None,
        failure=failure,
        stage=stages[-1] if stages else None,
        multicast=owner.multicast if path == "symm-mem" else None,
        atomic=atomic.correct if atomic is not None else None,
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
    child_argv = _command(child_argv)
    if child_argv is None:
        return Unavailable("libcuda-not-found")
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
