"""Family collective: the all-reduce path the runtimes take, tested by running it (issue 26).

collect's probes run an NCCL all-reduce over every GPU pair and over all GPUs, each in a
child under a deadline with its sum checked on every rank (``facts.collective``); a run
that hangs or sums wrong is run again with ``NCCL_P2P_DISABLE=1``. Which setting fixes a
failure follows from which runs failed: NVIDIA/nccl#2079 (a silent spin-wait on PCIe-only
hosts until NCCL_P2P_DISABLE=1), NVIDIA/nccl#1637, vllm-project/vllm#14452 and RFC #51513.
vLLM's custom all-reduce (CUDA IPC peer writes) and symmetric memory take the same peer
path as NCCL's P2P transport, so where that path is broken they are turned off too. Per
pair, a CUDA IPC write and (on the compute capabilities where vLLM sets it up) a write
through a cuMemCreate allocation shared by POSIX fd, PyTorch's symmetric memory without
multicast, are tested on their own (through the latter also system-scope atomic adds, as
its peer signals use them): either failing while NCCL works turns off only the
runtime feature that takes that path (--disable-custom-all-reduce,
VLLM_ALLREDUCE_USE_SYMM_MEM=0; vllm/distributed/device_communicators/symm_mem.py).
"""

from __future__ import annotations

from itertools import combinations

from blackwell_doctor.facts.document import CollectiveFacts, CollectiveRun, Facts
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.rules import link, view
from blackwell_doctor.rules.absent import NO_COLLECTIVE
from blackwell_doctor.rules.pci import bridges_between
from blackwell_doctor.rules.registry import check, requires

P2P_DISABLE = "NCCL_P2P_DISABLE"


def _name(run: CollectiveRun) -> str:
    return "-".join(str(g) for g in run.gpus)


def _ok(run: CollectiveRun) -> bool:
    return run.failure is None and run.correct is True


def _what(run: CollectiveRun) -> str:
    if run.failure is not None:
        return run.failure
    if run.correct is False:
        return "wrong sum"
    return "no result"


def _grouped(runs: list[CollectiveRun]) -> str:
    """ "GPUs 0-1, 0-2 (collective-timeout:15s at allreduce)": runs grouped by what went wrong."""
    by_what: dict[str, list[str]] = {}
    for r in runs:
        by_what.setdefault(_what(r), []).append(_name(r))
    return "; ".join(f"GPUs {', '.join(names)} ({what})" for what, names in by_what.items())


def _collective(facts: Facts) -> CollectiveFacts | Outcome:
    return view.probed(
        facts.collective,
        absent=NO_COLLECTIVE,
        not_run="the collective test did not run: {why}",
        failed="the collective test could not run: {reason}",
        measured=lambda c: c.runs,
        nothing="the collective test ran nothing",
    )


def default_runs(c: CollectiveFacts) -> list[CollectiveRun]:
    """The NCCL runs as the runtime gets it (no fallback setting)."""
    return [r for r in c.runs if not r.env and r.path == "nccl"]


def fallback_runs(c: CollectiveFacts) -> dict[str, CollectiveRun]:
    return {_name(r): r for r in c.runs if r.env.get(P2P_DISABLE) == "1" and r.path == "nccl"}


def ipc_runs(c: CollectiveFacts) -> list[CollectiveRun]:
    """Writes through CUDA IPC mappings: vLLM's custom all-reduce path."""
    return [r for r in c.runs if r.path == "cuda-ipc"]


def symm_runs(c: CollectiveFacts) -> list[CollectiveRun]:
    """Writes through a cuMemCreate allocation shared by POSIX fd: PyTorch's CUDA symmetric
    memory, which vLLM's symmetric-memory all-reduce allocates and rendezvouses at start-up."""
    return [r for r in c.runs if r.path == "symm-mem"]


def _hung_or_wrong(run: CollectiveRun) -> bool:
    """A run that hung, crashed or wrote wrong data, as opposed to a call that failed
    cleanly (vLLM catches a failed symmetric-memory rendezvous and goes on without it)."""
    failure = run.failure or ""
    return (
        run.correct is False
        or failure.startswith(
            ("collective-timeout", "collective-crashed", "wrong-data", "wrong-atomic")
        )
        or "-not-seen:" in failure
    )


def _crosses_root(facts: Facts, gpus: list[int]) -> bool | None:
    """Whether any two of these GPUs reach each other only through the root complex (no
    shared switch below it); None when the PCI facts cannot say."""
    n, p = view.nvml(facts), view.pci(facts)
    if n is None or p is None:
        return None
    by_bus = {g.index: g.pci_bus_id for g in n.gpus}
    pci_by_bdf = {g.bdf: g for g in p.gpus}
    found = []
    for idx in gpus:
        bus = by_bus.get(idx)
        if not isinstance(bus, str):
            return None
        g = pci_by_bdf.get(normalize_pci_bus_id(bus))
        if g is None or not g.upstream:
            return None
        found.append(g)
    for a, b in combinations(found, 2):
        if not set(a.upstream[:-1]) & set(b.upstream[:-1]) and bridges_between(a, b):
            return True
    return False


@check("collective.allreduce", reads=("pci", "nvml", "collective"))
@requires(_collective)
def collective_allreduce(facts: Facts, rules: RuleData, c: CollectiveFacts) -> Outcome:
    runs = default_runs(c)
    if not runs:
        return not_evaluated("no all-reduce ran with the runtime's own settings")
    fallback = fallback_runs(c)
    evidence: Evidence = {
        "library": c.library,
        "nccl": view.reason(c.nccl_version)
        if not isinstance(c.nccl_version, str)
        else c.nccl_version,
    }
    for r in c.runs:
        label = f"GPUs {_name(r)}" + (f" with {P2P_DISABLE}=1" if r.env else "")
        if r.path == "cuda-ipc":
            label = f"GPU{r.gpus[1]} writes GPU{r.gpus[0]} through CUDA IPC"
        if r.path == "symm-mem":
            label = f"GPU{r.gpus[1]} writes GPU{r.gpus[0]} through symmetric memory"
        evidence[label] = (
            f"ok, {r.busbw_gbps:.1f} GB/s bus bandwidth, {r.time_s * 1e3:.2f} ms"
            if _ok(r) and r.busbw_gbps is not None and r.time_s is not None
            else ("ok" if _ok(r) else _what(r))
        ) + (", system-scope atomics through it add up" if _ok(r) and r.atomic else "")
    failed = [r for r in runs if not _ok(r)]
    ipc_failed = [r for r in ipc_runs(c) if not _ok(r)]
    if not failed and ipc_failed:
        names = "; ".join(f"GPU{r.gpus[1]} -> GPU{r.gpus[0]} ({_what(r)})" for r in ipc_failed)
        return Outcome(
            status=Status.FAIL,
            summary=(
                f"NCCL all-reduce works, but writes through CUDA IPC mappings fail: {names}; "
                "vLLM's custom all-reduce takes that path"
            ),
            evidence=evidence,
            case="custom_allreduce",
            remedy_vars={"runs": names},
        )
    symm_failed = [r for r in symm_runs(c) if not _ok(r)]
    if not failed and not ipc_failed and symm_failed:
        names = "; ".join(f"GPU{r.gpus[1]} -> GPU{r.gpus[0]} ({_what(r)})" for r in symm_failed)
        hung = any(_hung_or_wrong(r) for r in symm_failed)
        how = "hang or land wrong" if hung else "fail"
        return Outcome(
            status=Status.FAIL if hung else Status.WARN,
            summary=(
                "NCCL all-reduce and CUDA IPC writes work, but writes through a symmetric-"
                f"memory allocation shared by file descriptor {how}: {names}; vLLM's "
                "symmetric-memory all-reduce sets that up at start-up"
            ),
            evidence=evidence,
            case="symm_mem",
            remedy_vars={"runs": names},
        )
    if not failed:
        return passed(
            f"NCCL all-reduce correct on {view.plural(len(runs), 'GPU set')} "
            "(every pair and all GPUs)",
            **evidence,
        )
    names = _grouped(failed)
    rescued = [r for r in failed if _name(r) in fallback and _ok(fallback[_name(r)])]
    if len(rescued) < len(failed):
        return Outcome(
            status=Status.FAIL,
            summary=f"NCCL all-reduce fails on {names}, also with {P2P_DISABLE}=1",
            evidence=evidence,
            case="nccl_broken",
            remedy_vars={"runs": names},
        )
    working = [r for r in runs if _ok(r) and len(r.gpus) == 2]
    failing_cross = [_crosses_root(facts, r.gpus) for r in failed]
    working_cross = [_crosses_root(facts, r.gpus) for r in working]
    if working and all(x is True for x in failing_cross) and all(x is False for x in working_cross):
        return Outcome(
            status=Status.FAIL,
            summary=(
                f"NCCL all-reduce hangs or sums wrong on {names}, each across the root "
                "complex, while GPUs under a shared switch work: P2P through the CPU is broken"
            ),
            evidence=evidence,
            case="p2p_level",
            remedy_vars={"runs": names},
        )
    return Outcome(
        status=Status.FAIL,
        summary=(
            f"NCCL all-reduce hangs or sums wrong on {names}; with {P2P_DISABLE}=1 it is "
            "correct: the GPU peer-to-peer path is broken"
        ),
        evidence=evidence,
        case="p2p_path",
        remedy_vars={"runs": names},
    )


def _nvlink_pair(facts: Facts, gpus: list[int]) -> bool:
    n = view.nvml(facts)
    if n is None or not isinstance(n.p2p, list):
        return False
    pairs = n.p2p
    wanted = {(a, b) for a, b in combinations(sorted(gpus), 2)}
    got = {(p.gpu_a, p.gpu_b) for p in pairs if p.nvlink == "OK"}
    return bool(wanted) and wanted <= got


@check("collective.bandwidth", reads=("nvml", "link_load", "collective"))
@requires(_collective)
def collective_bandwidth(facts: Facts, rules: RuleData, c: CollectiveFacts) -> Outcome:
    links = link.readings(facts)
    fraction = rules.preflight.collective.min_busbw_vs_link
    evidence: Evidence = {}
    slow: list[str] = []
    judged = 0
    for r in default_runs(c):
        if not _ok(r) or r.busbw_gbps is None:
            continue
        if _nvlink_pair(facts, r.gpus):
            evidence[f"GPUs {_name(r)}"] = (
                f"{r.busbw_gbps:.1f} GB/s over NVLink (not judged against PCIe)"
            )
            continue
        rates = [link.link_gbps(links[g], rules) if g in links else None for g in r.gpus]
        known = [x for x in rates if x is not None]
        if len(known) < len(rates):
            evidence[f"GPUs {_name(r)}"] = f"{r.busbw_gbps:.1f} GB/s; link rate unknown"
            continue
        allowed = min(known)
        judged += 1
        evidence[f"GPUs {_name(r)}"] = (
            f"{r.busbw_gbps:.1f} GB/s bus bandwidth, link allows {allowed:.1f} GB/s"
        )
        if r.busbw_gbps < fraction * allowed:
            slow.append(f"GPUs {_name(r)} {r.busbw_gbps:.1f} of {allowed:.1f} GB/s")
    if slow:
        return Outcome(
            status=Status.WARN,
            summary=(
                f"all-reduce bus bandwidth below {fraction:.0%} of what the PCIe link allows: "
                + "; ".join(slow)
            ),
            evidence=evidence,
            remedy_vars={"runs": "; ".join(slow), "fraction": f"{fraction:.0%}"},
        )
    if not evidence:
        return skipped("no all-reduce succeeded with the runtime's own settings: nothing to time")
    return passed("all-reduce bus bandwidth within what the links allow", **evidence)
