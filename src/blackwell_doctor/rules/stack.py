"""Family stack: will the installed Python GPU stack run, natively, on these GPUs?

The reading is in ``blackwell_doctor.collect.stack`` (package metadata, fatbin headers,
Triton's ptxas); the verdicts are here, with CUDA's compatibility rules (CUDA C++
Programming Guide, "Binary Compatibility" and "PTX Compatibility"; Blackwell compatibility
guide for the ``a``/``f`` suffixes):

- SASS for ``sm_XY`` runs on compute capability X.z with z >= Y (same major only);
- ``sm_XYa`` runs on exactly X.Y; ``sm_XYf`` on the family X.z, z >= Y;
- PTX for ``compute_XY`` is JIT-compiled by the driver for any CC >= X.Y (``a``: exactly
  X.Y; ``f``: its family), if the driver knows the PTX's ISA version: a slow first start;
- LTO-IR (``lto_XY``, NVVM IR for link-time optimisation, fatbin entry kind 8) is compiled
  for the GPU only by nvJitLink, which the library must call itself: since CUDA 12.0 the
  driver JIT-compiles only PTX, never NVVM IR (NVIDIA's driver team, forums thread 177062;
  nvJitLink's guide: its output cubin is what cuModuleLoadData loads). So LTO-IR that the
  library loads from its own data counts as a JIT (an nvJitLink link at first use), while
  LTO-IR in ``.nv_fatbin`` alone, which the runtime hands to the driver, is no kernel;
- neither: "no kernel image is available for execution on the device" at the first launch.

What the headers cannot settle is said so, never failed: a file whose only code is fatbins
it loads itself (it chooses which), and an NVIDIA CUDA library wheel whose CUDA release
documents the GPU (checks/stack.toml [[cuda_library]]) but whose fatbins read have no code
for it (libcufftw.so.12: a kernel-less sm_75 stub; its kernels are libcufft's) are "not
judged from its fatbins". A JIT of little PTX ([jit] warn_bytes) is a note.

The backend forecast (stack.backends) is a lookup, not a simulation: checks/backends.toml's
rows were read in the runtime's source at a release; a runtime, release or layer without a
row is "not covered", never guessed.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, replace
from enum import IntEnum

from blackwell_doctor.facts.document import Facts, Unavailable
from blackwell_doctor.facts.model import ModelFacts
from blackwell_doctor.facts.stack import GpuPackage, KernelFile, KernelUnit, StackFacts
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.ruledata.stack import ForecastRow, StackData, version_pair
from blackwell_doctor.rules import view
from blackwell_doctor.rules.absent import NOT_AUDITED
from blackwell_doctor.rules.registry import check, requires

_TARGET = re.compile(r"^(sm|compute|lto)_(\d+?)(\d)([af]?)$")


class Verdict(IntEnum):
    """Worst last: a package's verdict is its worst file's."""

    NATIVE = 0
    # Only PTX, but little of it: the driver JIT-compiles it in seconds at first use.
    JIT_BRIEF = 1
    # No code for the GPU in what was read, in an NVIDIA CUDA library documented for it.
    NOT_JUDGED = 2
    JIT = 3
    NO_KERNEL = 4


VERDICT_WORDS = {
    Verdict.NATIVE: "native",
    Verdict.JIT_BRIEF: "JIT at first use",
    Verdict.NOT_JUDGED: "not judged from its fatbins",
    Verdict.JIT: "JIT at start",
    Verdict.NO_KERNEL: "no kernel",
}


def runs_on(target: str, cc: tuple[int, int]) -> bool:
    """Whether code for ``target`` (sm_120a, compute_90, sm_100f, lto_75) runs on ``cc``;
    SASS by the binary rules, PTX and LTO-IR by the JIT rules (the ISA version aside: for
    LTO-IR, nvJitLink compiles it for any later GPU, as the driver does PTX)."""
    m = _TARGET.match(target)
    if m is None:
        return False
    kind, major, minor, suffix = m.group(1), int(m.group(2)), int(m.group(3)), m.group(4)
    if suffix == "a":
        return (major, minor) == cc
    if suffix == "f" or kind == "sm":
        return major == cc[0] and minor <= cc[1]
    return (major, minor) <= cc


@dataclass(frozen=True)
class FileVerdict:
    verdict: Verdict
    # Containers (compilation units) with SASS or PTX, none of it for this GPU: per-GPU
    # variants a library selects by GPU (cuBLAS, cuDNN), not a failure by themselves.
    units_without: int
    units: int  # containers with SASS or PTX
    loaded: int = 0  # of them, kept in data sections and loaded by the library itself
    ptx_bytes: int = 0  # the PTX to JIT when the verdict is a JIT
    reason: str = ""  # why it is not judged, or why LTO-IR decided it
    lto_bytes: int = 0  # the LTO-IR nvJitLink links when the verdict is that JIT


def _unit_verdict(unit: KernelUnit, cc: tuple[int, int], ptx_ok: bool) -> Verdict:
    if any(runs_on(t, cc) for t in unit.sass):
        return Verdict.NATIVE
    if ptx_ok and any(runs_on(t, cc) for t in unit.ptx):
        return Verdict.JIT
    return Verdict.NO_KERNEL


def judge_file(
    f: KernelFile,
    cc: tuple[int, int],
    driver_isa: tuple[int, int] | None,
    jit_warn_bytes: int | None = None,
) -> FileVerdict:
    """The file is native when some container (in .nv_fatbin or loaded by the library from
    its data) has SASS for ``cc``: libraries carry per-GPU containers, e.g. Hopper-only
    kernels, selected at run time. JIT when none has but some PTX does (and the driver knows
    the PTX's ISA): a brief one under ``jit_warn_bytes`` of PTX. Containers of LTO-IR only
    (nvJitLink's input) are not counted among the units; they decide only when no SASS or
    PTX runs: LTO-IR for ``cc`` that the library loads itself is a JIT (nvJitLink at first
    use, brief under ``jit_warn_bytes``), LTO-IR in the .nv_fatbin of a file that loads no
    fatbins itself is no kernel (the driver does not compile NVVM IR). No code at all, in a
    file that loads fatbins itself: not judged (it chooses what it loads)."""
    ptx_ok = f.ptx_isa is None or driver_isa is None or _isa(f.ptx_isa) <= driver_isa
    coded = [(u, loaded) for units, loaded in ((f.units, False), (f.loaded, True)) for u in units]
    coded = [(u, loaded) for u, loaded in coded if u.sass or u.ptx]
    verdicts = [(_unit_verdict(u, cc, ptx_ok), u) for u, _ in coded]
    best = min((v for v, _ in verdicts), default=Verdict.NO_KERNEL)
    without = sum(u.count for v, u in verdicts if v is Verdict.NO_KERNEL)
    ptx_bytes = sum(u.ptx_bytes for v, u in verdicts if v is Verdict.JIT)
    if best is Verdict.JIT and jit_warn_bytes is not None and 0 < ptx_bytes < jit_warn_bytes:
        best = Verdict.JIT_BRIEF
    reason = ""
    lto_bytes = 0
    if best is Verdict.NO_KERNEL:
        best, reason, lto_bytes = _lto_verdict(f, cc, jit_warn_bytes)
    if best is Verdict.NO_KERNEL and f.loaded:
        # The library picks among the fatbins it loads (and may link LTO-IR for this GPU
        # through nvJitLink): that none of them has code here is not a failure we can see.
        best = Verdict.NOT_JUDGED
        reason = (
            "not judged: none of the fatbins it loads itself has code for it, and which it "
            "loads (or links at run time) is its own choice"
        )
    return FileVerdict(
        best,
        without,
        sum(u.count for u, _ in coded),
        sum(u.count for u, loaded in coded if loaded),
        ptx_bytes,
        reason,
        lto_bytes,
    )


def _lto_verdict(
    f: KernelFile, cc: tuple[int, int], jit_warn_bytes: int | None
) -> tuple[Verdict, str, int]:
    """A file with no SASS or PTX for ``cc``, judged by its LTO-IR (see judge_file)."""
    loaded = [u for u in f.loaded if any(runs_on(t, cc) for t in u.lto)]
    if loaded:
        size = sum(u.lto_bytes for u in loaded)
        brief = jit_warn_bytes is not None and 0 < size < jit_warn_bytes
        return (
            Verdict.JIT_BRIEF if brief else Verdict.JIT,
            f"only LTO-IR ({', '.join(sorted({t for u in loaded for t in u.lto}))}) for it, "
            "in fatbins the library loads itself: it must link that for the GPU through "
            "nvJitLink at first use (the driver does not compile LTO-IR)",
            size,
        )
    if not f.loaded and any(runs_on(t, cc) for u in f.units for t in u.lto):
        return (
            Verdict.NO_KERNEL,
            "its only code for it is LTO-IR in .nv_fatbin, which the driver does not load "
            "(CUDA 12.0+ drivers JIT-compile only PTX; LTO-IR needs nvJitLink)",
            0,
        )
    return Verdict.NO_KERNEL, "", 0


def _isa(text: str) -> tuple[int, int]:
    major, minor = text.split(".")
    return int(major), int(minor)


def _kib(n: int) -> str:
    return f"{n / 1024:.0f} KiB" if n < 2**20 else f"{n / 2**20:.1f} MiB"


@dataclass(frozen=True)
class PackageVerdict:
    package: GpuPackage
    cc: tuple[int, int]
    verdict: Verdict
    files: list[tuple[KernelFile, FileVerdict]]

    def line(self) -> str:
        counts = {v: sum(1 for _, fv in self.files if fv.verdict is v) for v in Verdict}
        parts = [f"{counts[v]} {VERDICT_WORDS[v]}" for v in Verdict if counts[v]]
        tail = ""
        shown = {self.verdict, Verdict.NOT_JUDGED} - {Verdict.NATIVE}
        if shown:
            worst = [f.path for f, fv in self.files if fv.verdict in shown][:3]
            tail = f" (e.g. {', '.join(worst)})" if worst else ""
        brief = sum(fv.ptx_bytes for _, fv in self.files if fv.verdict is Verdict.JIT_BRIEF)
        if brief:
            tail += f"; {_kib(brief)} of PTX to JIT-compile at first use (seconds at most)"
        lto = sum(fv.lto_bytes for _, fv in self.files if fv.verdict is Verdict.JIT_BRIEF)
        if lto:
            tail += f"; {_kib(lto)} of LTO-IR to link through nvJitLink at first use"
        reasons = sorted({fv.reason for _, fv in self.files if fv.reason})
        tail += "".join(f"; {r}" for r in reasons)
        loaded = sum(fv.loaded for _, fv in self.files)
        if loaded:
            tail += f"; {loaded} fatbin units read from data the library loads itself"
        without = sum(fv.units_without for _, fv in self.files)
        if without:
            units = sum(fv.units for _, fv in self.files)
            tail += (
                f"; {without} of {units} fatbin units hold code only for other GPUs "
                "(per-GPU variants, which a library that selects kernels by GPU carries)"
            )
        return (
            f"{VERDICT_WORDS[self.verdict]} on {view.cc_str(self.cc)}: "
            f"{len(self.files)} file(s) with GPU code, {', '.join(parts)}{tail}"
        )


def pool_cubins(files: list[KernelFile]) -> list[KernelFile]:
    """``files`` with a package's standalone cubins as one file: each cubin is one GPU's
    variant (flashinfer-cubin ships one per target and loads the one for the GPU), so they
    are judged together, as the per-GPU units of one library are."""
    cubins = [f for f in files if f.path.endswith(".cubin")]
    if not cubins:
        return files
    pooled = KernelFile(
        path=f"{len(cubins)} standalone .cubin file(s) such as {cubins[0].path}",
        size=sum(f.size for f in cubins),
        units=[u for f in cubins for u in f.units],
    )
    return [f for f in files if not f.path.endswith(".cubin")] + [pooled]


def judge_package(
    p: GpuPackage,
    cc: tuple[int, int],
    driver_isa: tuple[int, int] | None,
    data: StackData | None = None,
) -> PackageVerdict:
    """Each file judged (judge_file); a file without code for ``cc`` in an NVIDIA CUDA
    library whose release documents ``cc`` (checks/stack.toml [[cuda_library]]) is not
    judged: what was read is not all there is."""
    library = None if data is None else data.cuda_library_for(p.name, [f.path for f in p.files])
    warn = None if data is None else data.jit.warn_bytes
    files = []
    for f in pool_cubins(p.files):
        fv = judge_file(f, cc, driver_isa, warn)
        if fv.verdict is Verdict.NO_KERNEL and library is not None and library.covers(cc):
            fv = replace(
                fv,
                verdict=Verdict.NOT_JUDGED,
                reason=f"not judged: no code for it in the fatbins read, but CUDA "
                f"{library.cuda} libraries are documented for compute capability "
                f"{library.min_cc} to {library.max_cc} ({', '.join(library.sources)}): "
                "their kernels are kept where the audit does not read (another form, or "
                "a library they link)",
            )
        files.append((f, fv))
    verdicts = [fv.verdict for _, fv in files]
    judged = [v for v in verdicts if v is not Verdict.NOT_JUDGED]
    # A file not judged beside others that are (libcufftw.so.12 beside libcufft.so.12): the
    # package is what the judged files say, the other one a note in its line.
    worst = max(judged or verdicts, default=Verdict.NATIVE)
    return PackageVerdict(p, cc, worst, files)


def _stack(facts: Facts) -> StackFacts | Outcome:
    return view.section(
        facts.stack, NOT_AUDITED, "the Python GPU stack could not be read: {reason}"
    )


def driver_isa(facts: Facts, data: StackData) -> tuple[int, int] | None:
    n, c = view.nvml(facts), view.cuda(facts)
    for text in (
        n.cuda_driver_version if n is not None else None,
        c.driver_version if c is not None else None,
    ):
        if isinstance(text, str):
            return data.driver_ptx_isa(text)
    return None


def _ccs(facts: Facts) -> list[tuple[int, int]]:
    return sorted({g.cc for g in view.gpus(facts) if g.cc is not None})


def _sm(cc: tuple[int, int]) -> str:
    return f"sm_{cc[0]}{cc[1]}"


@check("stack.kernels", reads=("nvml", "cuda", "stack"))
@requires(_stack)
def stack_kernels(facts: Facts, rules: RuleData, s: StackFacts) -> Outcome:
    ccs = _ccs(facts)
    if not ccs:
        return not_evaluated("no GPU compute capability in the facts to judge the stack against")
    isa = driver_isa(facts, rules.stack)
    evidence: Evidence = {
        "python": f"{s.python} ({s.python_version})"
        + (f" in image {s.image.ref} ({s.image.interpreter_from})" if s.image else ""),
        "driver PTX ISA": "unknown" if isa is None else f"{isa[0]}.{isa[1]}",
    }
    worst = Verdict.NATIVE
    bad: dict[Verdict, list[str]] = {Verdict.NO_KERNEL: [], Verdict.JIT: []}
    noted: list[str] = []
    fixes: list[str] = []
    cpu_torch = False
    for p in s.packages:
        label = f"{p.name} {p.version}" + (f" (CUDA {p.cuda})" if p.cuda else "")
        if p.unreadable:
            # Files (or metadata) the audit could not read: what is judged is the rest.
            evidence[f"{label}: not read"] = list(p.unreadable)
        if p.name == "torch" and not p.files:
            evidence[label] = "no CUDA kernels: a CPU-only build"
            cpu_torch = True
            worst = Verdict.NO_KERNEL
            bad[Verdict.NO_KERNEL].append(f"{p.name} (no CUDA kernels)")
            fixes.append(_fix(rules.stack, p.name, ccs[0]))
            continue
        if not p.files:
            continue
        lines = []
        for cc in ccs:
            pv = judge_package(p, cc, isa, rules.stack)
            lines.append(pv.line())
            where = f"{p.name} ({VERDICT_WORDS[pv.verdict]} on {view.cc_str(cc)})"
            if pv.verdict in bad:
                bad[pv.verdict].append(where)
                fix = _fix(rules.stack, p.name, cc)
                if fix not in fixes:
                    fixes.append(fix)
            elif pv.verdict is not Verdict.NATIVE and where not in noted:
                noted.append(where)
            worst = max(worst, pv.verdict)
        evidence[label] = lines if len(lines) > 1 else lines[0]
    judged = sum(1 for p in s.packages if p.files) + (1 if cpu_torch else 0)
    if judged == 0:
        return skipped(
            f"no package in this environment carries GPU code ({len(s.packages)} GPU "
            "package(s) read)",
            **evidence,
        )
    notes = f"; {', '.join(noted)} (details in the evidence)" if noted else ""
    if worst < Verdict.JIT:
        return passed(
            f"{judged} GPU package(s) carry {'native ' if not noted else ''}kernels for "
            f"{_cc_list(ccs)}{notes}",
            **evidence,
        )
    what = []
    if bad[Verdict.NO_KERNEL]:
        if cpu_torch and len(bad[Verdict.NO_KERNEL]) == 1:
            fails = "a CPU-only PyTorch cannot use the GPU (torch.cuda.is_available() is False)"
        else:
            fails = "will fail at the first kernel launch ('no kernel image is available')"
        what.append(f"{', '.join(bad[Verdict.NO_KERNEL])}: {fails}")
    if bad[Verdict.JIT]:
        what.append(
            f"{', '.join(bad[Verdict.JIT])}: only PTX (or LTO-IR, for nvJitLink) to compile "
            "at first start (a slow cold start)"
        )
    # Plain assignments: tests/rules/test_catalogue_words.py reads the cases from them.
    if worst is Verdict.NO_KERNEL:  # noqa: SIM108
        case = "no-kernel"
    else:
        case = "jit"
    return Outcome(
        status=Status.FAIL if worst is Verdict.NO_KERNEL else Status.WARN,
        summary="; ".join(what) + notes,
        evidence=evidence,
        case=case,
        remedy_vars={"fixes": " ".join(fixes)},
    )


def _cc_list(ccs: list[tuple[int, int]]) -> str:
    return ", ".join(f"compute capability {view.cc_str(c)}" for c in ccs)


def _fix(data: StackData, package: str, cc: tuple[int, int]) -> str:
    row = data.fix_for(package)
    text = row.summary.format(package=package, sm=_sm(cc), cc=view.cc_str(cc))
    return f"{package}: {text} (sources: {', '.join(row.sources)})"


# How a target's ptxas answer was had (facts.stack.PtxasTarget.by): a compile on this
# host, or (audit --image, nothing of the image run) the CUDA release in its binary.
_PTXAS_OK = {
    "compiled": "compiles",
    "release": "knows it by its CUDA release (read from the binary; the image was not started)",
}


@check("stack.triton_ptxas", reads=("nvml", "cuda", "stack"))
@requires(_stack)
def stack_triton_ptxas(facts: Facts, rules: RuleData, s: StackFacts) -> Outcome:
    if s.ptxas_not_run is not None:
        return not_evaluated(f"Triton's ptxas was {s.ptxas_not_run}")
    if not s.ptxas:
        return skipped("Triton is not installed in this environment")
    ccs = _ccs(facts)
    wanted = {f"{_sm(cc)}a" for cc in ccs}
    judged = [r for r in s.ptxas if not wanted or r.target in wanted]
    if not judged:
        return not_evaluated(
            f"Triton's ptxas was not asked for {', '.join(sorted(wanted))} (asked: "
            f"{', '.join(r.target for r in s.ptxas)})"
        )
    evidence: Evidence = {
        r.target: f"{r.path} ({r.source}, CUDA {r.version or 'unknown'}): "
        + (_PTXAS_OK[r.by] if r.ok else f"fails: {r.detail}")
        for r in judged
    }
    failed = [r for r in judged if not r.ok]
    if not failed:
        return passed(
            f"Triton's ptxas {_PTXAS_OK[judged[0].by]} for {', '.join(r.target for r in judged)}",
            **evidence,
        )
    first = failed[0]
    return Outcome(
        status=Status.FAIL,
        summary=f"Triton's ptxas (CUDA {first.version or 'unknown'}) cannot compile for "
        f"{', '.join(r.target for r in failed)}: every Triton kernel will fail to compile "
        f"({first.detail})",
        evidence=evidence,
        remedy_vars={"target": first.target, "ptxas": first.path},
    )


@check("stack.flashinfer_cache", reads=("nvml", "cuda", "stack"))
@requires(_stack)
def stack_flashinfer_cache(facts: Facts, rules: RuleData, s: StackFacts) -> Outcome:
    by_name = {p.name: p for p in s.packages}
    fi = by_name.get("flashinfer-python")
    if fi is None:
        return skipped("flashinfer-python is not installed in this environment")
    evidence: Evidence = {"flashinfer-python": fi.version}
    missing = []
    for name in ("flashinfer-cubin", "flashinfer-jit-cache"):
        p = by_name.get(name)
        evidence[name] = "not installed" if p is None else p.version
        if p is None or _base(p.version) != _base(fi.version):
            missing.append(name if p is None else f"{name} {p.version}")
    if not missing:
        return passed(
            f"flashinfer-cubin and flashinfer-jit-cache match flashinfer-python {fi.version}",
            **evidence,
        )
    jit = (
        f"{', '.join(missing)} beside flashinfer-python {fi.version}: FlashInfer's kernels "
        "will be JIT-compiled at first start"
    )
    cs = rules.stack.cold_start
    targets = [f"{_sm(cc)}a" for cc in _ccs(facts)]
    evidence["nvcc"] = (
        "none found (CUDA_HOME, PATH, /usr/local/cuda)"
        if s.nvcc is None
        else f"{s.nvcc.path} ({s.nvcc.source}, CUDA {s.nvcc.version or 'unknown'})"
    )
    jobs_text = s.max_jobs if s.max_jobs is not None else f"unset: one per CPU ({s.cpus})"
    evidence["MAX_JOBS"] = jobs_text
    vars_ = {"version": _base(fi.version)}
    if s.nvcc is None:
        return Outcome(
            status=Status.FAIL,
            summary=f"{jit}, and no nvcc was found: the first start fails",
            evidence=evidence,
            case="no-nvcc",
            remedy_vars=vars_,
        )
    have = version_pair(s.nvcc.version or "")
    old = [
        t
        for t in targets
        if t in cs.min_cuda and (have is None or have < (version_pair(cs.min_cuda[t]) or (0, 0)))
    ]
    if old:
        need = max(cs.min_cuda[t] for t in old)
        return Outcome(
            status=Status.FAIL,
            summary=f"{jit}, with nvcc {s.nvcc.version or 'of unknown version'}, which cannot "
            f"compile for {', '.join(old)} (CUDA {need} or newer is needed)",
            evidence=evidence,
            case="old-nvcc",
            remedy_vars={**vars_, "need": need, "nvcc": s.nvcc.path},
        )
    jobs = _int(s.max_jobs) if s.max_jobs is not None else s.cpus
    if jobs is not None and s.memory_bytes is not None:
        fits = int(s.memory_bytes / (cs.gib_per_job * 2**30))
        evidence["memory"] = f"{s.memory_bytes / 2**30:.0f} GiB: room for {fits} job(s)"
        if jobs > max(fits, 1):
            return Outcome(
                status=Status.WARN,
                summary=f"{jit}, {jobs} compile jobs at once ({jobs_text}) where memory holds "
                f"about {fits}: the build can run the host out of memory",
                evidence=evidence,
                case="max-jobs",
                remedy_vars={**vars_, "jobs": str(max(fits, 1))},
            )
    return Outcome(
        status=Status.WARN,
        summary=f"{jit} (minutes; nvcc {s.nvcc.version or 'unknown'} is there)",
        evidence=evidence,
        remedy_vars=vars_,
    )


def _int(text: str) -> int | None:
    try:
        return max(int(text), 1)
    except ValueError:
        return None


def _base(version: str) -> str:
    return version.split("+", 1)[0]


# ----------------------------------------------------------------------------- backends
# The backend forecast: checks/backends.toml's rows, read in each runtime's source at a
# release, matched against the runtime's version in the stack, the checkpoint's
# quantization (--model-dir) and each GPU's compute capability.

# The serving runtimes whose version picks rows; one without rows for its release (all of
# TensorRT-LLM's: see checks/backends.toml) is reported as "not covered".
RUNTIMES = ("vllm", "sglang", "tensorrt-llm")
_VERDICT_STATUS = {"native": Status.PASS, "fallback": Status.WARN, "fails": Status.FAIL}


@dataclass(frozen=True)
class LayerForecast:
    """What one runtime will select for one layer of the model on one compute capability;
    ``row`` None: checks/backends.toml has no row for it (not covered). ``backend``: the
    row's, with the environment variable that forced it filled in."""

    runtime: str
    version: str
    layer: str
    cc: tuple[int, int]
    row: ForecastRow | None
    backend: str = ""

    def words(self) -> str:
        where = f"{self.layer} on {view.cc_str(self.cc)}"
        if self.row is None:
            return f"{where}: not covered by checks/backends.toml"
        return f"{where}: {self.backend} ({self.row.verdict}): {self.row.why}"


def _backend(row: ForecastRow, environment: dict[str, str]) -> str:
    text = row.backend
    for name in row.env:
        text = text.replace("{" + name + "}", environment.get(name, name))
    return text


def forecast(
    stack: StackFacts, model: ModelFacts, ccs: list[tuple[int, int]], data: StackData
) -> list[LayerForecast]:
    """Per runtime installed (vLLM, SGLang, TensorRT-LLM), layer of the model (MoE when it
    has MoE layers, attention always) and compute capability: the first row of
    checks/backends.toml that holds, or None (not covered)."""
    by_name = {p.name: p for p in stack.packages}
    torch = by_name.get("torch")
    names = set(by_name)
    arch = model.arch
    layers = (["moe"] if arch is not None and arch.moe is not None else []) + ["attention"]
    mla = arch is not None and arch.mla is not None
    out = []
    for runtime in RUNTIMES:
        package = by_name.get(runtime)
        if package is None:
            continue
        for cc in ccs:
            for layer in layers:
                row = next(
                    (
                        r
                        for r in data.backends.forecast
                        if r.holds(
                            runtime=runtime,
                            version=package.version,
                            layer=layer,
                            quantization=model.quantization.method,
                            quant_format=model.quantization.format,
                            architecture=None if arch is None else arch.architecture,
                            mla=mla,
                            cc=cc,
                            packages=names,
                            torch_cuda=None if torch is None else torch.cuda,
                            environment=stack.environment,
                        )
                    ),
                    None,
                )
                backend = "" if row is None else _backend(row, stack.environment)
                out.append(LayerForecast(runtime, package.version, layer, cc, row, backend))
    return out


def _where(f: LayerForecast, runtime: bool) -> str:
    """The layer and GPU (moe on 12.0), led by the runtime when several are installed."""
    where = f"{f.layer} on {view.cc_str(f.cc)}"
    return f"{f.runtime} {where}" if runtime else where


def _row_releases(data: StackData) -> str:
    """The runtime releases checks/backends.toml has rows for ("vllm >=0.13.0,<0.14; ...")."""
    seen: list[str] = []
    for r in data.backends.forecast:
        text = f"{r.runtime} {r.versions}"
        if text not in seen:
            seen.append(text)
    return "; ".join(seen)


@check("stack.backends", reads=("nvml", "cuda", "model", "stack"))
@requires(_stack)
def stack_backends(facts: Facts, rules: RuleData, s: StackFacts) -> Outcome:
    m = facts.model
    if m is None:
        return skipped(
            "no model directory given (--model-dir): the backend forecast needs the "
            "checkpoint's quantization"
        )
    if isinstance(m, Unavailable):
        return not_evaluated(f"the model directory could not be read: {m.reason}")
    ccs = _ccs(facts)
    if not ccs:
        return not_evaluated("no GPU compute capability in the facts to forecast for")
    installed = [p for p in s.packages if p.name in RUNTIMES]
    if not installed:
        return skipped(f"no serving runtime ({', '.join(RUNTIMES)}) in this environment")
    forecasts = forecast(s, m, ccs, rules.stack)
    label = ", ".join(f"{p.name} {p.version}" for p in installed)
    what = f"{label} x {m.quantization.method} checkpoint"
    evidence: Evidence = {"runtime": label, "quantization": m.quantization.format}
    if s.environment:
        evidence["environment"] = ", ".join(f"{k}={v}" for k, v in sorted(s.environment.items()))
    for f in forecasts:
        evidence[f"{f.runtime} {f.layer} on {view.cc_str(f.cc)}"] = (
            f.words() if f.row is None else f"{f.words()} (sources: {', '.join(f.row.sources)})"
        )
    covered = [f for f in forecasts if f.row is not None]
    if not covered:
        return skipped(
            f"not covered: checks/backends.toml has no forecast for {what} on "
            f"{_cc_list(ccs)} (its rows: {_row_releases(rules.stack)})",
            **evidence,
        )
    order = ["native", "fallback", "fails"]
    worst = max((f.row.verdict for f in covered if f.row is not None), key=order.index)
    several = len({f.runtime for f in forecasts}) > 1
    parts = [
        f"{_where(f, several)} -> {f.backend} ({f.row.verdict})"
        for f in covered
        if f.row is not None
    ]
    uncovered = [_where(f, several) for f in forecasts if f.row is None]
    tail = f"; not covered: {', '.join(uncovered)}" if uncovered else ""
    summary = f"{what}: {'; '.join(parts)}{tail}"
    if worst == "native":
        return passed(summary, **evidence)
    fixes = []
    for f in covered:
        if f.row is not None and f.row.verdict != "native" and f.row.fix not in fixes:
            fixes.append(f.row.fix)
    # Plain assignments: tests/rules/test_catalogue_words.py reads the cases from them.
    if worst == "fails":  # noqa: SIM108
        case = "fails"
    else:
        case = "fallback"
    return Outcome(
        status=_VERDICT_STATUS[worst],
        summary=summary,
        evidence=evidence,
        case=case,
        remedy_vars={"fixes": " ".join(fixes)},
    )
