"""Family health: is the hardware healthy, judged without DCGM (issue 39).

From ``facts.health``: what NVML answered at collection (temperatures and their thresholds,
power limits, ECC, the row remapper, retired pages, the replay counter, the driver's own
recovery action), what it said while the probe kernels ran (clock event reasons), and the
PCIe AER counters of sysfs before and after the run. Nothing is ever set on a GPU: every
failing case the tests judge comes from facts captured or reconstructed from public
reports. A value NVML does not support on a GPU (GeForce has no ECC or row remapper, GB10
reports no power limits) is a skip with its reason for that GPU, never a pass; a value it
could not read for another reason is "not evaluated".

Each finding's step for the node (checks/catalogue.toml ``action``: reset the GPU, reboot,
service) feeds the node verdict (:mod:`blackwell_doctor.rules.verdict`).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from blackwell_doctor.facts.document import (
    AerCounts,
    ClockSample,
    DeviceAer,
    EccCounts,
    Facts,
    GpuHealth,
    HealthFacts,
    LoadedGpu,
    RemappedRows,
    RetiredPages,
    Unavailable,
)
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    RemedyAction,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.health import HealthData, load_health_data, worst_action
from blackwell_doctor.ruledata.rules import RuleData, fill
from blackwell_doctor.rules import view
from blackwell_doctor.rules.absent import NO_HEALTH
from blackwell_doctor.rules.registry import check, requires

NOT_SUPPORTED = "not-supported"


def _section(facts: Facts) -> HealthFacts | Outcome:
    return view.section(facts.health, NO_HEALTH, "health facts unavailable: {reason}")


# The last node's GPU labels and readings under load, by the identity of its facts (and
# health section): the health checks each asked for them again on every node of a fleet.
# The facts are frozen and held here, so an identity is never another node's; the values
# are only read. Not for a traced copy (rules/memo.py: a subclass of Facts, shared by the
# checks learnt on one node): each check's run over it must read what it reads.
_LAST_LABELS: list[tuple[Facts, dict[int, str]]] = []
_LAST_LOADED: list[tuple[Facts, HealthFacts, dict[int, LoadedGpu]]] = []


def _labels(facts: Facts) -> dict[int, str]:
    if type(facts) is not Facts:
        return _labels_of(facts)
    if _LAST_LABELS and _LAST_LABELS[0][0] is facts:
        return _LAST_LABELS[0][1]
    labels = _labels_of(facts)
    _LAST_LABELS[:] = [(facts, labels)]
    return labels


def _labels_of(facts: Facts) -> dict[int, str]:
    n = view.nvml(facts)
    if n is None:
        return {}
    return {
        g.index: f"GPU{g.index} {g.name}" if isinstance(g.name, str) else f"GPU{g.index}"
        for g in n.gpus
    }


def _gpus(facts: Facts) -> tuple[HealthFacts, list[GpuHealth]] | Outcome:
    """The GPUs' NVML health, or the outcome of a check that has none to judge."""
    health = _section(facts)
    if isinstance(health, Outcome):
        return health
    if view.is_wsl(facts):
        return skipped(f"{facts.platform.wsl.kind}: NVML's health counters are the host's")
    if isinstance(health.gpus, Unavailable):
        if not view.pci_gpus(facts) and health.gpus.reason in (
            "nvml-library-not-found",
            "nvml-driver-not-loaded",
        ):
            return skipped(f"no NVIDIA GPU (NVML: {health.gpus.reason})")
        return not_evaluated(f"NVML did not answer: {health.gpus.reason}")
    if not health.gpus:
        return skipped("no GPU")
    return health, health.gpus


@dataclass
class _PerGpu:
    """What a check made of each GPU: findings, unsupported values, unreadable ones."""

    evidence: Evidence
    findings: list[str]
    unsupported: list[str]
    unreadable: list[str]
    judged_count: int
    # The probed GPUs' readings under load, by NVML index (:func:`_loaded_by_index`).
    loaded: dict[int, LoadedGpu]

    def aside(self, label: str, what: str, value: Unavailable) -> None:
        """A value NVML did not give: unsupported (a skip for that GPU) or unreadable."""
        if value.reason == NOT_SUPPORTED:
            self.unsupported.append(f"{label}: {what} not supported by NVML")
        else:
            self.unreadable.append(f"{label}: {what} unreadable ({value.reason})")

    def unjudged(self, passed_summary: str) -> Outcome:
        """The outcome when there is no finding: a pass only when every GPU was judged."""
        if self.unreadable:
            return not_evaluated("; ".join(self.unreadable), **self.evidence)
        if self.unsupported and len(self.unsupported) >= self.judged_count:
            return skipped("; ".join(self.unsupported), **self.evidence)
        return passed(passed_summary, **self.evidence)

    def outcome(
        self,
        passed_summary: str,
        *,
        status: Status = Status.WARN,
        prefix: str = "",
        case: str | None = None,
        remedy_vars: dict[str, str] | None = None,
        commands: list[str] | None = None,
        action: RemedyAction | None = None,
    ) -> Outcome:
        """The findings, joined after ``prefix``, with the check's remedy fields; with none,
        :meth:`unjudged`."""
        if not self.findings:
            return self.unjudged(passed_summary)
        return Outcome(
            status=status,
            summary=prefix + "; ".join(self.findings),
            evidence=self.evidence,
            case=case,
            remedy_vars=remedy_vars or {},
            commands=commands or [],
            action=action,
        )


def _each_gpu(facts: Facts, judge: Callable[[_PerGpu, str, GpuHealth], None]) -> _PerGpu | Outcome:
    """``judge`` run on each GPU's NVML health with its label, into one record of what it
    made of them; or the outcome of a check that has none to judge."""
    got = _gpus(facts)
    if isinstance(got, Outcome):
        return got
    health, gpus = got
    labels = _labels(facts)
    per = _PerGpu(
        evidence={},
        findings=[],
        unsupported=[],
        unreadable=[],
        judged_count=len(gpus),
        loaded=_loaded_by_index(facts, health),
    )
    for g in gpus:
        judge(per, labels.get(g.index, f"GPU{g.index}"), g)
    return per


def _watts(mw: int) -> str:
    return f"{mw / 1000:.0f} W"


# --------------------------------------------------------------------------- clocks


def _loaded_by_index(facts: Facts, health: HealthFacts) -> dict[int, LoadedGpu]:
    """The probed GPUs' readings under load, by NVML index (matched on the PCI bus id)."""
    if type(facts) is not Facts:  # a traced copy (above)
        return _loaded_of(facts, health)
    if _LAST_LOADED and _LAST_LOADED[0][0] is facts and _LAST_LOADED[0][1] is health:
        return _LAST_LOADED[0][2]
    loaded = _loaded_of(facts, health)
    _LAST_LOADED[:] = [(facts, health, loaded)]
    return loaded


def _loaded_of(facts: Facts, health: HealthFacts) -> dict[int, LoadedGpu]:
    n = view.nvml(facts)
    if n is None or isinstance(health.under_load, Unavailable):
        return {}
    by_bus = {
        normalize_pci_bus_id(g.pci_bus_id).lower(): g.index
        for g in n.gpus
        if isinstance(g.pci_bus_id, str)
    }
    out: dict[int, LoadedGpu] = {}
    for loaded in health.under_load:
        index = by_bus.get(normalize_pci_bus_id(loaded.pci_bus_id).lower())
        if index is not None:
            out[index] = loaded
    return out


def _counts(samples: list[ClockSample], data: HealthData) -> dict[str, int]:
    """How many samples carried each named reason (in bit order)."""
    counts: dict[str, int] = {}
    carried = [s.reasons for s in samples if s.reasons]
    mask = 0
    for bits in carried:
        mask |= bits
    if not mask:  # no sample carried a reason (the usual case): nothing to count
        return counts
    for reason in data.clocks.reasons:
        bit = reason.bit
        if mask & bit:
            n = sum(1 for bits in carried if bits & bit)
            if n:
                counts[reason.name] = n
    return counts


# The readings under load ride on the tile probes' timed launches: selecting this check
# runs the probes (what it reads), unless --no-probe.
@check("health.clocks", reads=("health", "nvml", "platform", "pci", "probes"))
@requires(_gpus)
def health_clocks(
    facts: Facts, rules: RuleData, judged: tuple[HealthFacts, list[GpuHealth]]
) -> Outcome:
    health, _gpu_list = judged
    if isinstance(health.under_load, Unavailable):
        why = health.under_load.reason.removeprefix("skipped:")
        return skipped(
            f"clock event reasons are read while the probe kernels run, and they did not ({why})"
        )
    loaded = _loaded_by_index(facts, health)
    if not loaded:
        return skipped("no GPU was probed: no reading under load")
    data = load_health_data()
    labels = _labels(facts)
    evidence: Evidence = {}
    found: list[str] = []
    kinds: set[str] = set()
    unread: list[str] = []
    for index, gpu in sorted(loaded.items()):
        label = labels.get(index, f"GPU{index}")
        read = [s for s in gpu.samples if s.reasons is not None]
        if not read:
            unread.append(f"{label}: {gpu.error or 'no reading while the kernels ran'}")
            continue
        counts = _counts(read, data)
        temps = [s.temperature_c for s in read if s.temperature_c is not None]
        clocks = [s.sm_clock_mhz for s in read if s.sm_clock_mhz is not None]
        seen = ", ".join(f"{name} {n}/{len(read)}" for name, n in counts.items()) or "none"
        detail = f"{len(read)} readings under load; reasons: {seen}"
        if clocks:
            detail += f"; SM clock {min(clocks)}-{max(clocks)} MHz"
        if temps:
            detail += f"; up to {max(temps)} °C"
        evidence[label] = detail
        bad = [
            r for r in data.clocks.named(_or(read)) if r.kind in ("hardware", "software-thermal")
        ]
        if bad:
            kinds.update(r.name for r in bad)
            found.append(
                f"{label}: "
                + "; ".join(f"{r.words} ({counts.get(r.name, 0)} of {len(read)})" for r in bad)
            )
    probed_all = len(loaded) == len(labels)
    if not probed_all:
        evidence["not probed"] = sorted(
            labels[i] for i in labels if i not in loaded
        )  # one GPU per model is probed
    if found:
        if "HwPowerBrakeSlowdown" in kinds:
            case = "power_brake"
        elif kinds & {"HwThermalSlowdown", "SwThermalSlowdown"}:
            case = "thermal"
        else:
            case = "hardware"
        return Outcome(
            status=Status.WARN,
            summary="clocks held down under load: " + "; ".join(found),
            evidence=evidence,
            case=case,
            remedy_vars={"gpus": ", ".join(f.split(":", 1)[0] for f in found)},
        )
    if unread and len(unread) == len(loaded):
        return not_evaluated("; ".join(unread), **evidence)
    if unread:
        evidence["unread"] = unread
    return passed(
        "no hardware or thermal slowdown while the probe kernels ran "
        f"({view.plural(len(loaded) - len(unread), 'GPU')} read under load)",
        **evidence,
    )


def _or(samples: list[ClockSample]) -> int:
    mask = 0
    for s in samples:
        mask |= s.reasons or 0
    return mask


# --------------------------------------------------------------------------- power


@check("health.power", reads=("health", "nvml", "platform", "pci"))
def health_power(facts: Facts, rules: RuleData) -> Outcome:
    data = load_health_data()
    capped_indexes: list[str] = []
    defaults: list[str] = []

    def judge(per: _PerGpu, label: str, g: GpuHealth) -> None:
        limit, default = g.power_limit_mw, g.power_default_mw
        if isinstance(limit, Unavailable):
            per.aside(label, "power limit", limit)
            return
        if isinstance(default, Unavailable):
            per.aside(label, "default power limit", default)
            return
        top = g.power_max_mw if isinstance(g.power_max_mw, int) else None
        text = f"limit {_watts(limit)}, default {_watts(default)}"
        if top is not None:
            text += f", max {_watts(top)}"
        capping = (
            _counts(per.loaded[g.index].samples, data).get("SwPowerCap", 0)
            if (g.index in per.loaded)
            else 0
        )
        if capping:
            text += f"; SwPowerCap in {capping} readings under load"
        per.evidence[label] = text
        if default - limit >= data.power.below_default_mw:
            held = " and it held the clocks under the probes' load" if capping else ""
            per.findings.append(
                f"{label} capped at {_watts(limit)} of its {_watts(default)} default{held}"
            )
            capped_indexes.append(str(g.index))
            defaults.append(f"{g.index}:{default // 1000}")

    per = _each_gpu(facts, judge)
    if isinstance(per, Outcome):
        return per
    return per.outcome(
        "every GPU's power limit is its default",
        prefix="power limit below the default: ",
        remedy_vars={"indexes": ",".join(capped_indexes)},
        commands=[
            fill(line, {"index": index, "watts": watts})
            for index, watts in (d.split(":") for d in defaults)
            for line in rules.checks["health.power"].command_sets["per_gpu"]
        ],
    )


# --------------------------------------------------------------------------- thermal


@check("health.thermal", reads=("health", "nvml", "platform", "pci"))
def health_thermal(facts: Facts, rules: RuleData) -> Outcome:
    data = load_health_data()

    def judge(per: _PerGpu, label: str, g: GpuHealth) -> None:
        temps = [g.temperature_c] if isinstance(g.temperature_c, int) else []
        if g.index in per.loaded:
            temps += [s.temperature_c for s in per.loaded[g.index].samples if s.temperature_c]
        if not temps:
            per.aside(label, "temperature", _unavailable(g.temperature_c))
            return
        hottest = max(temps)
        slowdown = g.slowdown_c if isinstance(g.slowdown_c, int) else None
        shutdown = g.shutdown_c if isinstance(g.shutdown_c, int) else None
        margin = g.margin_c if isinstance(g.margin_c, int) else None
        fans = g.fans_percent if isinstance(g.fans_percent, list) else None
        parts = [f"{hottest} °C" + (" (under load)" if len(temps) > 1 else "")]
        if slowdown is not None:
            parts.append(f"slowdown {slowdown} °C")
        if shutdown is not None:
            parts.append(f"shutdown {shutdown} °C")
        if margin is not None:
            parts.append(f"margin {margin} °C")
        if fans:
            parts.append("fans " + "/".join(f"{f} %" for f in fans))
        elif isinstance(g.fans_percent, Unavailable):
            parts.append(f"fans: {g.fans_percent.reason}")
        per.evidence[label] = ", ".join(parts)
        if slowdown is None and margin is None:
            per.aside(label, "slowdown threshold", _unavailable(g.slowdown_c))
            return
        left = margin if margin is not None else None
        if slowdown is not None:
            from_slowdown = slowdown - hottest
            left = from_slowdown if left is None else min(left, from_slowdown)
        assert left is not None
        if left <= 0 or (shutdown is not None and hottest >= shutdown):
            per.findings.append(f"{label} at {hottest} °C, at or past its slowdown threshold")
        elif left <= data.thermal.warn_margin_c:
            per.findings.append(f"{label} at {hottest} °C, {left} °C from its slowdown threshold")
        hot = per.findings and per.findings[-1].startswith(label)
        if fans is not None and hot and any(f == 0 for f in fans):
            per.findings[-1] += " with a fan at 0 %"

    per = _each_gpu(facts, judge)
    if isinstance(per, Outcome):
        return per
    return per.outcome(
        f"every GPU more than {data.thermal.warn_margin_c} °C below its slowdown threshold",
        remedy_vars={"gpus": ", ".join(f.split(" at ", 1)[0] for f in per.findings)},
    )


def _unavailable(value: object) -> Unavailable:
    return value if isinstance(value, Unavailable) else Unavailable("unknown")


# --------------------------------------------------------------------------- ECC


@check("health.ecc", reads=("health", "nvml", "platform", "pci"))
def health_ecc(facts: Facts, rules: RuleData) -> Outcome:
    pending: list[str] = []

    def judge(per: _PerGpu, label: str, g: GpuHealth) -> None:
        if isinstance(g.ecc_enabled, Unavailable):
            per.aside(label, "ECC", g.ecc_enabled)
            return
        counts = g.ecc_errors if isinstance(g.ecc_errors, EccCounts) else None
        text = "ECC on" if g.ecc_enabled else "ECC off"
        if isinstance(g.ecc_pending_enabled, bool) and g.ecc_pending_enabled != g.ecc_enabled:
            text += f", {'on' if g.ecc_pending_enabled else 'off'} after the next reboot"
            pending.append(label)
        if counts is not None:
            text += (
                f"; since the driver loaded: {counts.volatile_corrected} corrected, "
                f"{counts.volatile_uncorrected} uncorrected; over the board's life: "
                f"{counts.aggregate_corrected} corrected, {counts.aggregate_uncorrected} "
                "uncorrected"
            )
        elif isinstance(g.ecc_errors, Unavailable) and g.ecc_enabled:
            per.aside(label, "ECC error counts", g.ecc_errors)
        per.evidence[label] = text
        if counts is not None and (counts.volatile_uncorrected or 0) > 0:
            per.findings.append(
                f"{label}: {counts.volatile_uncorrected} uncorrected ECC errors since the "
                "driver loaded"
            )

    per = _each_gpu(facts, judge)
    if isinstance(per, Outcome):
        return per
    if pending and not per.findings:
        return Outcome(
            status=Status.WARN,
            summary=f"an ECC mode change waits for a reboot: {', '.join(pending)}",
            evidence=per.evidence,
            case="mode_pending",
        )
    return per.outcome("no uncorrected ECC error since the driver loaded", case="uncorrected")


# --------------------------------------------------------------------------- memory repair


def _memory(
    facts: Facts,
    judge: Callable[[str, RemappedRows | None, RetiredPages | None, _PerGpu], None],
) -> _PerGpu | Outcome:
    def each(per: _PerGpu, label: str, g: GpuHealth) -> None:
        rows = g.remapped_rows if isinstance(g.remapped_rows, RemappedRows) else None
        pages = g.retired_pages if isinstance(g.retired_pages, RetiredPages) else None
        if rows is None and pages is None:
            # Ampere and later remap rows; earlier GPUs retire pages: one of them answers.
            value = g.remapped_rows
            why = value if isinstance(value, Unavailable) else Unavailable("unknown")
            if why.reason == NOT_SUPPORTED and isinstance(g.retired_pages, Unavailable):
                why = g.retired_pages if g.retired_pages.reason != NOT_SUPPORTED else why
            per.aside(label, "row remapper and page retirement", why)
            return
        parts: list[str] = []
        if rows is not None:
            parts.append(
                f"rows remapped: {rows.correctable} correctable, {rows.uncorrectable} "
                f"uncorrectable; pending {'yes' if rows.pending else 'no'}; failure "
                f"{'yes' if rows.failure else 'no'}"
            )
        if pages is not None:
            pending = {True: "yes", False: "no", None: "unknown"}[pages.pending]
            parts.append(
                f"retired pages: {pages.single_bit} single-bit, {pages.double_bit} double-bit; "
                f"pending {pending}"
            )
        per.evidence[label] = "; ".join(parts)
        judge(label, rows, pages, per)

    return _each_gpu(facts, each)


@check("health.memory_reset_needed", reads=("health", "nvml", "platform", "pci"))
def health_memory_reset_needed(facts: Facts, rules: RuleData) -> Outcome:
    def judge(
        label: str, rows: RemappedRows | None, pages: RetiredPages | None, per: _PerGpu
    ) -> None:
        if rows is not None and rows.pending:
            per.findings.append(f"{label}: a row remap waits for a GPU reset")
        if pages is not None and pages.pending:
            per.findings.append(f"{label}: a page retirement waits for a GPU reset")

    per = _memory(facts, judge)
    if isinstance(per, Outcome):
        return per
    indexes = [f.split(" ", 1)[0].removeprefix("GPU").rstrip(":") for f in per.findings]
    return per.outcome(
        "no row remap or page retirement waits for a reset",
        remedy_vars={"indexes": ",".join(dict.fromkeys(indexes))},
    )


@check("health.memory_replace", reads=("health", "nvml", "platform", "pci"))
def health_memory_replace(facts: Facts, rules: RuleData) -> Outcome:
    limit = load_health_data().memory.retired_pages_limit

    def judge(
        label: str, rows: RemappedRows | None, pages: RetiredPages | None, per: _PerGpu
    ) -> None:
        if rows is not None and rows.failure:
            per.findings.append(f"{label}: a row remapping failed (NVIDIA's RMA criterion)")
        if pages is not None and pages.single_bit + pages.double_bit >= limit:
            per.findings.append(
                f"{label}: {pages.single_bit + pages.double_bit} retired pages, at the limit "
                f"of {limit}"
            )

    per = _memory(facts, judge)
    if isinstance(per, Outcome):
        return per
    return per.outcome("no failed row remapping; retired pages below the limit", status=Status.FAIL)


# --------------------------------------------------------------------------- PCIe errors


@dataclass(frozen=True)
class _AerChange:
    label: str
    kind: str  # correctable | nonfatal | fatal
    count: int
    since: str  # "during the run" | "since boot"
    names: list[str]


def _aer_changes(device: DeviceAer, label: str) -> list[_AerChange] | Unavailable:
    first = device.before
    if isinstance(first, Unavailable):
        return first
    after = device.after if isinstance(device.after, AerCounts) else None
    out: list[_AerChange] = []
    for kind in ("fatal", "nonfatal", "correctable"):
        was = getattr(first, kind)
        if after is not None:
            now = getattr(after, kind)
            if was is not None and now is not None and now > was:
                names = [
                    f"{k.split(':', 1)[1]} +{v - first.nonzero.get(k, 0)}"
                    for k, v in after.nonzero.items()
                    if k.startswith(kind + ":") and v > first.nonzero.get(k, 0)
                ]
                out.append(_AerChange(label, kind, now - was, "during the run", names))
                continue
        if was:
            names = [
                f"{k.split(':', 1)[1]} {v}"
                for k, v in first.nonzero.items()
                if k.startswith(kind + ":")
            ]
            out.append(_AerChange(label, kind, was, "since boot", names))
    return out


@check("health.pcie_errors", reads=("health", "nvml", "pci", "platform", "link_load"))
@requires(_section)
def health_pcie_errors(facts: Facts, rules: RuleData, health: HealthFacts) -> Outcome:
    if view.is_wsl(facts):
        return skipped(f"{facts.platform.wsl.kind}: the GPU is paravirtualised, no PCIe link")
    labels = _labels(facts)
    by_bus = _gpu_by_bus(facts)
    evidence: Evidence = {}
    changes: list[_AerChange] = []
    unreadable: list[str] = []
    if isinstance(health.aer, Unavailable):
        unreadable.append(f"AER: {health.aer.reason}")
    else:
        below = {
            (g.upstream[0] if g.upstream else g.bdf).lower(): g.bdf.lower()
            for g in view.pci_gpus(facts)
        }
        for device in health.aer:
            gpu_bdf = device.bdf.lower() if device.role == "gpu" else below.get(device.bdf.lower())
            gpu = by_bus.get(gpu_bdf or "")
            owner = labels.get(gpu, gpu_bdf or "a GPU") if gpu is not None else gpu_bdf
            label = owner or device.bdf
            if device.role != "gpu":
                label = f"{device.bdf} (the port above {owner or 'a GPU'})"
            got = _aer_changes(device, label)
            if isinstance(got, Unavailable):
                unreadable.append(f"{label}: {got.reason}")
                continue
            evidence[f"{label} AER"] = _aer_text(device)
            changes.extend(got)
    replays = _replays(facts, health, labels)
    for label, text, grew in replays:
        evidence[f"{label} replays"] = text
        if grew:
            changes.append(_AerChange(label, "replay", grew, "during the run", []))
    during = [c for c in changes if c.since == "during the run"]
    serious = [c for c in changes if c.kind in ("fatal", "nonfatal")]
    findings = [_change_text(c) for c in [*during, *[c for c in serious if c not in during]]]
    if findings:
        down = _links_down(facts)
        fatal_now = any(c.kind in ("fatal", "nonfatal") and c in during for c in changes)
        status = Status.FAIL if fatal_now else Status.WARN
        if down:
            evidence["link below its maximum (link.pcie)"] = down
        return Outcome(
            status=status,
            summary="PCIe errors: " + "; ".join(findings),
            evidence=evidence,
            case="with_link_down" if down else "errors",
            remedy_vars={
                "links": "; ".join(down),
                "devices": ", ".join(dict.fromkeys(c.label for c in [*during, *serious])),
            },
            action="service" if any(c.kind == "fatal" for c in during) else None,
        )
    no_reading = not evidence
    if no_reading and not unreadable:
        return skipped("no NVIDIA GPU on PCI and no PCIe replay counter from NVML: nothing to read")
    if no_reading and unreadable:
        if all("not-found:" in u for u in unreadable):
            return skipped(
                "no AER counters in sysfs (aer_dev_*: a kernel before 4.19 or AER off) and "
                "no PCIe replay counter from NVML",
                unreadable=unreadable,
            )
        return not_evaluated("; ".join(unreadable))
    if unreadable:
        evidence["unreadable"] = unreadable
    since_boot = [c for c in changes if c.kind == "correctable"]
    note = (
        f" ({len(since_boot)} device(s) with correctable errors since boot, none during the run)"
        if since_boot
        else ""
    )
    return passed(f"no PCIe error during the run{note}", **evidence)


def _aer_text(device: DeviceAer) -> str:
    def one(counts: AerCounts) -> str:
        return (
            f"correctable {counts.correctable}, non-fatal {counts.nonfatal}, fatal {counts.fatal}"
        )

    first = device.before
    if not isinstance(first, AerCounts):
        return view.reason(first)
    if isinstance(device.after, AerCounts):
        return f"before: {one(first)}; after: {one(device.after)}"
    return one(first)


def _change_text(c: _AerChange) -> str:
    what = "replays" if c.kind == "replay" else f"{c.kind} AER errors"
    names = f" ({', '.join(c.names)})" if c.names else ""
    return f"{c.label}: {c.count} {what} {c.since}{names}"


def _replays(
    facts: Facts, health: HealthFacts, labels: dict[int, str]
) -> list[tuple[str, str, int]]:
    """(label, evidence, growth during the run) of each GPU whose NVML replay counter was
    read: at collection, and in the last reading under the probes' load."""
    if isinstance(health.gpus, Unavailable):
        return []
    loaded = _loaded_by_index(facts, health)
    out: list[tuple[str, str, int]] = []
    for g in health.gpus:
        if not isinstance(g.pcie_replays, int):
            continue
        label = labels.get(g.index, f"GPU{g.index}")
        later = [
            s.pcie_replays
            for s in (loaded[g.index].samples if g.index in loaded else [])
            if s.pcie_replays is not None
        ]
        if later:
            grew = max(0, later[-1] - g.pcie_replays)
            out.append((label, f"{g.pcie_replays} at collection, {later[-1]} after load", grew))
        else:
            out.append((label, f"{g.pcie_replays} since the driver loaded", 0))
    return out


def _gpu_by_bus(facts: Facts) -> dict[str, int]:
    n = view.nvml(facts)
    if n is None:
        return {}
    return {
        normalize_pci_bus_id(g.pci_bus_id).lower(): g.index
        for g in n.gpus
        if isinstance(g.pci_bus_id, str)
    }


def _links_down(facts: Facts) -> list[str]:
    """The GPUs whose link link.pcie finds below its maximum (narrower, or slower under
    load): the errors and the trained-down link are one story (riser, slot, cable)."""
    from blackwell_doctor.rules.link import readings

    out: list[str] = []
    for index, r in sorted(readings(facts).items()):
        narrow = (
            r.current_width is not None
            and r.max_width is not None
            and r.current_width < r.max_width
        )
        slow = r.current_gen is not None and r.max_gen is not None and r.current_gen < r.max_gen
        if narrow or (slow and r.loaded):
            out.append(f"GPU{index} {r.text} of {r.max_text}")
    return out


# --------------------------------------------------------------------------- recovery action


@check("health.recovery_action", reads=("health", "nvml", "platform", "pci"))
def health_recovery_action(facts: Facts, rules: RuleData) -> Outcome:
    data = load_health_data()
    steps: list[RemedyAction] = []

    def judge(per: _PerGpu, label: str, g: GpuHealth) -> None:
        code = g.recovery_action
        if isinstance(code, Unavailable):
            if code.reason in ("nvml-function-not-found", "nvml-error-invalid-argument"):
                code = Unavailable(NOT_SUPPORTED)  # a driver before the field existed
            per.aside(label, "the driver's recovery action", code)
            return
        known = data.recovery.find(code)
        name = known.name if known is not None else f"unknown ({code})"
        per.evidence[label] = name
        if code != 0:
            action: RemedyAction = (
                known.action if known is not None and known.action != "none" else "service"
            )
            steps.append(action)
            per.findings.append(f"{label}: the driver asks for {name}")

    per = _each_gpu(facts, judge)
    if isinstance(per, Outcome):
        return per
    return per.outcome(
        "the driver asks no recovery action of any GPU",
        status=Status.FAIL,
        action=worst_action(steps),
    )
