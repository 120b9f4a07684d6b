"""Collectors: the only code that touches the host, the GPU and the clock.

``collect_facts`` gathers everything into one :class:`~blackwell_doctor.facts.document.Facts`; no
collector raises for a host problem (missing driver, no permission): those become
``Unavailable`` values with a reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Collection, Mapping
from pathlib import Path
from typing import TYPE_CHECKING

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.collect.env import collect_env
from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.facts.document import (
    NOT_COLLECTED,
    SCHEMA_VERSION,
    CollectiveFacts,
    CudaFacts,
    DeviceAer,
    Facts,
    LinkLoadFacts,
    NvmlFacts,
    NvmlPcieLink,
    P2PProbeFacts,
    PlatformFacts,
    ProbeFacts,
    Section,
    ToolInfo,
    Unavailable,
)
from blackwell_doctor.facts.redact import redact_identity, redact_text

if TYPE_CHECKING:
    from blackwell_doctor.collect.gpu import GpuRun
    from blackwell_doctor.facts.document import HealthFacts


def collect_facts(
    *,
    host_root: Path,
    environ: Mapping[str, str],
    gpu_timeout_s: float = 20.0,
    probes: bool = True,
    probe_timeout_s: float = 60.0,
    redact: bool = False,
    now: dt.datetime | None = None,
    sections: Collection[Section] | None = None,
    left_out: str = f"{NOT_COLLECTED}:--select",
) -> Facts:
    """This host's facts. ``sections``: the parts of the facts to read (None: all; the
    platform is always read); a part left out is ``Unavailable(left_out)``, and where no
    part needs the GPU (NVML, CUDA, the probes) no GPU child starts."""
    from blackwell_doctor.collect.pci import collect_pci
    from blackwell_doctor.collect.platform import collect_platform

    def wanted(section: Section) -> bool:
        return sections is None or section in sections

    skipped = Unavailable(left_out)
    fs = HostFS(host_root)
    platform = collect_platform(fs, environ)
    pci = collect_pci(fs, platform.kernel_cmdline) if wanted("pci") else skipped
    aer_first = None
    if wanted("health"):
        from blackwell_doctor.collect.health import collect_aer

        # The AER counters before anything runs on the GPUs: the run's deltas start here.
        on_pci = pci if wanted("pci") else collect_pci(fs, platform.kernel_cmdline)
        aer_first = collect_aer(fs, on_pci)
    on_gpu: tuple[Section, ...] = ("nvml", "cuda", "health", *_PROBE_SECTIONS)
    nvml: NvmlFacts | Unavailable = skipped
    cuda: CudaFacts | Unavailable = skipped
    probe_facts: ProbeFacts | Unavailable = skipped
    run: GpuRun | None = None
    if any(wanted(s) for s in on_gpu):
        # The tile probes share the GPU facts' child (one CUDA initialisation, not two).
        run = _collect_gpu(
            gpu_timeout_s=gpu_timeout_s,
            probes=probes and wanted("probes"),
            probe_timeout_s=probe_timeout_s,
            health=wanted("health"),
            not_run=left_out if probes else "skipped:--no-probe",
        )
        nvml, cuda, probe_facts = run.nvml, run.cuda, run.probes
        if not wanted("probes"):
            probe_facts = skipped
    p2p_facts = (
        _collect_p2p(cuda, enabled=probes, timeout_s=probe_timeout_s)
        if wanted("p2p_transfers")
        else skipped
    )
    link_load, collective = _collect_preflight(
        cuda,
        nvml,
        enabled=probes,
        link_load=wanted("link_load"),
        collective=wanted("collective"),
        left_out=skipped,
    )
    health: HealthFacts | Unavailable = skipped
    if aer_first is not None and run is not None:
        health = _health(fs, run, aer_first, probed=probes and wanted("probes"))
    facts = Facts(
        schema_version=SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        collected_at=(now or dt.datetime.now(dt.UTC)).isoformat(timespec="seconds"),
        host_root=str(host_root),
        redacted=False,
        platform=_scrub_platform(platform),
        pci=pci,
        nvml=nvml,
        cuda=cuda,
        env=collect_env(environ),
        probes=probe_facts,
        p2p_transfers=p2p_facts,
        link_load=link_load,
        collective=collective,
        health=health,
    )
    return redact_identity(facts) if redact else facts


def _health(
    fs: HostFS, run: GpuRun, aer_first: list[DeviceAer] | Unavailable, *, probed: bool
) -> HealthFacts:
    """The health section (issue 39): NVML's answers with the facts, its readings under the
    probes' load, and the AER counters read again now that the probes are done."""
    from blackwell_doctor.collect.health import aer_after, health_facts

    gpus = run.health if run.health is not None else Unavailable("not-collected")
    return health_facts(
        gpus,
        run.samples,
        aer_after(fs, aer_first) if probed else aer_first,
        run.sampling_errors,
    )


# The parts of the facts that the probe children measure (each needs the CUDA facts first).
_PROBE_SECTIONS: tuple[Section, ...] = ("probes", "p2p_transfers", "link_load", "collective")


def _collect_gpu(
    *,
    gpu_timeout_s: float,
    probes: bool,
    probe_timeout_s: float,
    health: bool = False,
    not_run: str = "skipped:--no-probe",
) -> GpuRun:
    """The GPU facts and the tile probes: with probes one child process does both (one
    CUDA initialisation, not two); without, the GPU facts child alone, or no child at all
    where no driver library loads. ``health``: every GPU's health with the facts, and the
    clock event reasons read while the probe kernels run (issue 39). ``not_run``: why the
    probes did not run when ``probes`` is false (--no-probe, or a selection without them)."""
    from blackwell_doctor.collect.gpu import (
        GpuRun,
        collect_gpu_document,
        drivers_load,
        skipped_for,
    )

    if probes and drivers_load():
        from blackwell_doctor.collect.probe.runner import collect_gpu_run

        return collect_gpu_run(
            gpu_timeout_s=gpu_timeout_s, probe_timeout_s=probe_timeout_s, health=health
        )
    document = collect_gpu_document(gpu_timeout_s, health=health)
    skipped = skipped_for(document.cuda) if probes else Unavailable(not_run)
    skipped = skipped or Unavailable("skipped:no CUDA device")
    return GpuRun(document.nvml, document.cuda, skipped, document.health, skipped)


def _collect_p2p(
    cuda: CudaFacts | Unavailable, *, enabled: bool, timeout_s: float
) -> P2PProbeFacts | Unavailable:
    if not enabled:
        return Unavailable("skipped:--no-probe")
    if isinstance(cuda, Unavailable):
        return Unavailable(f"skipped:no CUDA device ({cuda.reason})")
    if len(cuda.devices) < 2:
        return Unavailable("skipped:one GPU: no pair")
    from blackwell_doctor.collect.probe.p2p import run_p2p_probes

    # Each pair runs in its own child (about 1 s on a healthy pair): scale the overall budget
    # with the pair count so an 8-GPU host (28 pairs) is not cut off, but keep it bounded.
    pairs = len(cuda.devices) * (len(cuda.devices) - 1) // 2
    return run_p2p_probes(timeout_s=min(max(timeout_s, 10.0 + 4.0 * pairs), 300.0))


def links_to_confirm(nvml: NvmlFacts | Unavailable) -> bool:
    """Whether a GPU's link read at collection is below its maximum generation or width:
    only then is it read again under load (a GPU lowers its generation when idle; a link at
    its maximum at idle is at its maximum). On an H100 the load child cost ~0.6 s of a
    1.9 s `check` (benchmarks/device/probe_walltime.sh), for a link already at Gen5 x16."""
    if isinstance(nvml, Unavailable):
        return False
    for g in nvml.gpus:
        link = g.pcie
        if not isinstance(link, NvmlPcieLink):
            continue
        for now, most in ((link.current_gen, link.max_gen), (link.current_width, link.max_width)):
            if now is not None and most is not None and now < most:
                return True
    return False


def _collect_preflight(
    cuda: CudaFacts | Unavailable,
    nvml: NvmlFacts | Unavailable,
    *,
    enabled: bool,
    link_load: bool = True,
    collective: bool = True,
    left_out: Unavailable | None = None,
) -> tuple[LinkLoadFacts | Unavailable, CollectiveFacts | Unavailable]:
    """Links under load (when one is below its maximum at collection) and the all-reduce
    path (issue 26), with the collective's sizes and deadlines from checks/preflight.toml.
    ``link_load``/``collective`` false: that part is ``left_out``, not run."""
    skipped = left_out or Unavailable(f"{NOT_COLLECTED}:--select")
    if not (link_load or collective):
        return skipped, skipped
    if not enabled:
        no_probe = Unavailable("skipped:--no-probe")
        return (no_probe if link_load else skipped), (no_probe if collective else skipped)
    if isinstance(cuda, Unavailable):
        why = Unavailable(f"skipped:no CUDA device ({cuda.reason})")
        return (why if link_load else skipped), (why if collective else skipped)
    from blackwell_doctor.collect.probe.collective import run_collective, run_link_load
    from blackwell_doctor.ruledata.preflight import load_preflight

    count = len(cuda.devices)
    load: LinkLoadFacts | Unavailable = skipped
    if link_load:
        load = (
            run_link_load(count)
            if links_to_confirm(nvml)
            else Unavailable("skipped:every link at its maximum at collection")
        )
    if not collective:
        return load, skipped
    data = load_preflight().collective
    sets = count * (count - 1) // 2 + (1 if count > 2 else 0)
    return load, run_collective(
        count,
        size_bytes=data.size_bytes,
        iterations=data.iterations,
        run_timeout_s=data.run_timeout_s,
        # A healthy NCCL run and a pair's IPC write take 1-2 s each; a failed run its
        # deadline (then the fallback): the budget grows with the runs, within bounds.
        timeout_s=min(max(60.0, 10.0 + 6.0 * sets), 300.0),
        # Symmetric memory only where vLLM sets it up (checks/preflight.toml symm_mem_ccs).
        symm=any(
            data.uses_symm_mem(d.compute_capability)
            for d in cuda.devices
            if not isinstance(d.compute_capability, Unavailable)
        ),
    )


def _scrub_platform(platform: PlatformFacts) -> PlatformFacts:
    """Secrets can sit on a kernel command line (rare, but never worth leaking)."""
    if isinstance(platform.kernel_cmdline, str):
        return msgspec.structs.replace(
            platform, kernel_cmdline=redact_text(platform.kernel_cmdline)
        )
    return platform
