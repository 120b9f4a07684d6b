"""Collectors: the only code that touches the host, the GPU and the clock.

``collect_facts`` gathers everything into one :class:`~blackwell_doctor.facts.Facts`; no
collector raises for a host problem (missing driver, no permission): those become
``Unavailable`` values with a reason.
"""

from __future__ import annotations

import datetime as dt
from collections.abc import Mapping
from pathlib import Path

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.collect.env import collect_env
from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.facts import (
    SCHEMA_VERSION,
    Facts,
    NvmlFacts,
    PlatformFacts,
    ToolInfo,
    Unavailable,
)
from blackwell_doctor.redact import REDACTED, pseudonym, redact_text


def collect_facts(
    *,
    host_root: Path,
    environ: Mapping[str, str],
    gpu_timeout_s: float = 20.0,
    probes: bool = True,
    redact: bool = False,
    now: dt.datetime | None = None,
) -> Facts:
    from blackwell_doctor.collect.pci import collect_pci
    from blackwell_doctor.collect.platform import collect_platform

    fs = HostFS(host_root)
    platform = collect_platform(fs, environ)
    pci = collect_pci(fs, platform.kernel_cmdline)
    from blackwell_doctor.collect.gpu import collect_gpu

    nvml, cuda = collect_gpu(gpu_timeout_s)
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
        # Probe kernels arrive with the probe issue; the facts say so rather than pretend.
        probes=Unavailable("skipped:--no-probe" if not probes else "probes-not-implemented"),
    )
    return redact_identity(facts) if redact else facts


def _scrub_platform(platform: PlatformFacts) -> PlatformFacts:
    """Secrets can sit on a kernel command line (rare, but never worth leaking)."""
    if isinstance(platform.kernel_cmdline, str):
        return msgspec.structs.replace(
            platform, kernel_cmdline=redact_text(platform.kernel_cmdline)
        )
    return platform


def redact_identity(facts: Facts) -> Facts:
    """``--redact``: drop what identifies the host; keep what the checks judge."""
    platform = facts.platform
    if isinstance(platform.hostname, str):
        platform = msgspec.structs.replace(platform, hostname=REDACTED)
    nvml = facts.nvml
    if isinstance(nvml, NvmlFacts):
        nvml = msgspec.structs.replace(
            nvml,
            gpus=[
                msgspec.structs.replace(g, uuid=pseudonym("GPU", g.uuid))
                if isinstance(g.uuid, str)
                else g
                for g in nvml.gpus
            ],
        )
    return msgspec.structs.replace(facts, platform=platform, nvml=nvml, redacted=True)
