"""Family driver: version floor on SM 12.x, CUDA level, and one driver everywhere."""

from __future__ import annotations

import re

from blackwell_doctor.facts.document import CpuFacts, Facts, OsRelease, Unavailable
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData, fill
from blackwell_doctor.rules import view
from blackwell_doctor.rules.registry import check


def _sm12x_labels(facts: Facts) -> list[str]:
    return [g.label for g in view.gpus(facts) if view.is_sm12x(g.cc)]


def _not_sm12x(facts: Facts) -> Outcome:
    gpus = view.gpus(facts)
    unknown = [g.label for g in gpus if g.cc is None]
    if unknown:
        # Cannot tell whether the SM 12.x floor applies: never a skip that hides a failure.
        return not_evaluated(f"compute capability unknown for {', '.join(unknown)}")
    ccs = sorted({view.cc_str(g.cc) for g in gpus})
    return skipped(f"applies to SM 12.x GPUs; this host has CC {', '.join(ccs) or 'unknown'}")


_VERSION_ID = re.compile(r"^[0-9]{1,3}(\.[0-9]{1,3})?$")


def _cuda_arch(facts: Facts, rules: RuleData) -> str:
    """The CUDA repository's architecture folder for this host ("" when it has none)."""
    machine = facts.platform.machine
    if isinstance(machine, str):
        return rules.distros.cuda.arch.get(machine, "")
    # Facts from before the machine was collected: judge by the CPU's vendor.
    cpu = facts.platform.cpu
    arm = isinstance(cpu, CpuFacts) and cpu.vendor in ("ARM", "NVIDIA", "Ampere", "APM")
    return rules.distros.cuda.arch["aarch64" if arm else "x86_64"]


def driver_install_commands(
    facts: Facts, rules: RuleData
) -> tuple[str, str | None, dict[str, str]]:
    """How to get the SM 12.x driver floor on this host: the case whose words say it and
    the command set for this host's repository (both in driver.version's entry in
    checks/catalogue.toml; which set: checks/distros.toml), and the values they take."""
    values = {"floor": rules.thresholds.driver.min_version_sm12x}
    if view.is_wsl(facts):
        case = "windows_driver"  # its commands are the case's
        return case, None, values
    if any("GB10" in g.label for g in view.gpus(facts)):
        case = "dgx_os"  # its commands are the case's
        return case, None, values
    case = "cuda_repository"
    arch = _cuda_arch(facts, rules)
    os = facts.platform.os_release
    # Facts files are untrusted: only a plain version number goes into a URL to paste.
    if (
        not arch
        or not isinstance(os, OsRelease)
        or os.id is None
        or os.version_id is None
        or not _VERSION_ID.fullmatch(os.version_id)
    ):
        return case, "unknown", values
    major = os.version_id.split(".")[0]
    distro = rules.distros.find(os.id, int(major))
    if distro is None or distro.cuda_folder is None or distro.packages is None:
        return case, "unknown", values
    folder = fill(
        distro.cuda_folder, {"major": major, "version_digits": os.version_id.replace(".", "")}
    )
    values["folder"] = folder
    values["repo"] = f"{rules.distros.cuda.repos}/{folder}/{arch}"
    return case, distro.packages, values


@check("driver.version", reads=("platform", "nvml", "cuda"))
def driver_version(facts: Facts, rules: RuleData) -> Outcome:
    sm12x = _sm12x_labels(facts)
    if not sm12x:
        return _not_sm12x(facts)
    text = view.driver_version(facts)
    version = view.parse_version(text)
    floor = rules.thresholds.driver.min_version_sm12x
    if version is None:
        return not_evaluated(f"driver version unreadable ({text or view.reason(facts.nvml)})")
    evidence: Evidence = {
        "driver": text,
        "minimum": floor,
        "gpus": sm12x,
    }
    if view.at_least(version, floor):
        return passed(f"driver {text} on SM 12.x (>= {floor})", **evidence)
    case, command_set, values = driver_install_commands(facts, rules)
    cuda_driver = rules.thresholds.driver.cuda_13_2_driver
    return Outcome(
        status=Status.FAIL,
        summary=(
            f"driver {text} is older than {floor}: CUDA 13.2 builds for SM 12.x (the patched "
            f"runtime images) need {cuda_driver} or newer"
        ),
        evidence=evidence,
        case=case,
        remedy_vars=values,
        command_set=command_set,
    )


@check("driver.cuda_version", reads=("nvml", "cuda"))
def driver_cuda_version(facts: Facts, rules: RuleData) -> Outcome:
    if not _sm12x_labels(facts):
        return _not_sm12x(facts)
    n = view.nvml(facts)
    c = view.cuda(facts)
    text: str | None = None
    if n is not None and isinstance(n.cuda_driver_version, str):
        text = n.cuda_driver_version
    elif c is not None and isinstance(c.driver_version, str):
        text = c.driver_version
    version = view.parse_version(text)
    want = rules.thresholds.driver.recommended_cuda_sm12x
    if version is None:
        return not_evaluated("the driver's CUDA version is unreadable")
    evidence: Evidence = {
        "driver_cuda": text,
        "recommended": want,
    }
    if view.at_least(version, want):
        return passed(f"driver supports CUDA {text} (>= {want})", **evidence)
    return Outcome(
        status=Status.WARN,
        summary=f"driver supports CUDA {text}; {want} is recommended on SM 12.x",
        evidence=evidence,
        remedy_vars={"cuda": str(text), "driver": rules.thresholds.driver.cuda_13_2_driver},
    )


@check("driver.consistency", reads=("platform", "nvml", "cuda"))
def driver_consistency(facts: Facts, rules: RuleData) -> Outcome:
    n = view.nvml(facts)
    c = view.cuda(facts)
    module = facts.platform.nvidia_kernel_module
    module_v = module if isinstance(module, str) else None
    evidence: Evidence = {
        "kernel_module": module_v or view.reason(module),
        "nvml_driver": (
            n.driver_version
            if n is not None and isinstance(n.driver_version, str)
            else view.reason(facts.nvml if n is None else n.driver_version)
        ),
        "nvml_cuda": (
            n.cuda_driver_version
            if n is not None and isinstance(n.cuda_driver_version, str)
            else None
        ),
        "libcuda": (
            c.driver_version
            if c is not None and isinstance(c.driver_version, str)
            else view.reason(facts.cuda)
        ),
    }
    if isinstance(facts.nvml, Unavailable) and facts.nvml.reason == "nvml-driver-library-mismatch":
        return Outcome(
            status=Status.FAIL,
            summary=f"NVML: driver/library version mismatch (kernel module {module_v or '?'})",
            evidence=evidence,
            case="nvml_library_mismatch",
        )
    if (
        isinstance(module, Unavailable)
        and not module.reason.startswith("not-found:")
        and not view.is_wsl(facts)
    ):
        # Not found: no module loaded. Any other reason (not-mounted: a container without
        # the host's /proc; unparsed) leaves the module's version unknown: NVML and libcuda
        # agreeing say nothing about it, and no answer at all is not "no driver" (issue 37).
        return not_evaluated(
            f"the kernel module's version could not be read ({module.reason})", **evidence
        )
    if n is None and c is None and module_v is None:
        return skipped("no NVIDIA driver on this host")
    nvml_driver = n.driver_version if n is not None else None
    if (
        module_v is not None
        and isinstance(nvml_driver, str)
        and not view.is_wsl(facts)
        and module_v != nvml_driver
    ):
        return Outcome(
            status=Status.FAIL,
            summary=f"kernel module {module_v} but user-space driver {nvml_driver}",
            evidence=evidence,
            case="module_mismatch",
        )
    nvml_cuda = n.cuda_driver_version if n is not None else None
    libcuda = c.driver_version if c is not None else None
    if isinstance(nvml_cuda, str) and isinstance(libcuda, str) and nvml_cuda != libcuda:
        return Outcome(
            status=Status.WARN,
            summary=(
                f"libcuda reports CUDA {libcuda} but the driver (NVML) reports {nvml_cuda}: "
                "another libcuda shadows the driver's"
            ),
            evidence=evidence,
            case="libcuda_shadowed",
        )
    known = [v for v in (module_v, nvml_driver, nvml_cuda, libcuda) if isinstance(v, str)]
    if len(known) < 2:
        return not_evaluated("fewer than two driver components answered", **evidence)
    return passed("kernel module, NVML and libcuda agree", **evidence)
