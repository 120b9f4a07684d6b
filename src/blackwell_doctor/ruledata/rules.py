"""Rule data: the check catalogue, the GPU architecture table and thresholds.

Kept as TOML in the top-level ``checks/`` folder (shipped in the wheel), validated here at
load: a typo in a data file is a clear error naming the file and the field, not a wrong verdict.
"""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools
from typing import TYPE_CHECKING, Any

import msgspec

from blackwell_doctor.report.results import RemedyAction, Severity
from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped

if TYPE_CHECKING:
    from blackwell_doctor.ruledata.mounts import HostMounts
    from blackwell_doctor.ruledata.preflight import PreflightData
    from blackwell_doctor.ruledata.serving import ServingData
    from blackwell_doctor.ruledata.stack import StackData


def fill(template: str, values: dict[str, str]) -> str:
    """Fill ``{name}`` placeholders; unknown ones stay visible rather than raising."""
    out = template
    for key, value in values.items():
        out = out.replace("{" + key + "}", value)
    return out


class RemedyText(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A remedy as the catalogue words it: ``{name}`` placeholders are filled from the values
    the check returns with its case."""

    summary: str = ""
    commands: list[str] = msgspec.field(default_factory=list)
    links: list[str] = msgspec.field(default_factory=list)
    # The step this finding asks of the node (issue 39; checks/health.toml's ladder); none:
    # its remedy alone, the node serves meanwhile.
    action: RemedyAction | None = None


class CheckSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One entry of checks/catalogue.toml: everything about a check except its logic."""

    id: str
    title: str
    severity: Severity
    # Checks that must pass first; otherwise this one is a skip "blocked by <id>".
    requires: list[str] = msgspec.field(default_factory=list)
    remedy: RemedyText | None = None
    # The remedy per case a check function returns (Outcome.case): [check.cases.<case>].
    # A case without links takes the check's.
    cases: dict[str, RemedyText] = msgspec.field(default_factory=dict)
    # Commands that depend on the host rather than the case ([check.command_sets]): e.g.
    # one set per package manager; the check names the set (Outcome.command_set), or fills
    # a template per item itself (one setpci line per bridge).
    command_sets: dict[str, list[str]] = msgspec.field(default_factory=dict)
    source: str = ""

    @property
    def family(self) -> str:
        return self.id.split(".", 1)[0]


class EffectText(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    summary: str
    source: str
    confidence: str


class ActionSpec(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One [[action]] of checks/catalogue.toml: what `recommend` makes of some checks'
    findings (its title, the effect of fixing them, where that comes from, how sure)."""

    key: str
    title: str
    # Check ids, or family prefixes ending in "." ("p2p.").
    checks: list[str]
    order: int
    effect: EffectText
    verify: list[str] = msgspec.field(default_factory=list)
    # What recommend says about the settings this action may derive, per case
    # ([action.notes]; placeholders filled by recommend/settings.py and plan.py).
    notes: dict[str, str] = msgspec.field(default_factory=dict)

    def note(self, case: str, **values: str) -> str:
        return fill(self.notes[case], values)

    def matches(self, check_id: str) -> bool:
        return any(
            check_id == p or (p.endswith(".") and check_id.startswith(p)) for p in self.checks
        )


class FixedEnv(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    value: str
    why: str


class LaunchWords(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """[launch] of checks/catalogue.toml: what `recommend` says of the runtime action, of
    each setting it derives (``why``), and of the recommendation as a whole (``notes``)."""

    title: str
    notes: dict[str, str]
    why: dict[str, str]
    # Fixed environment of the launch, in order, each with why it is set.
    env: dict[str, FixedEnv]

    def note(self, key: str, **values: str) -> str:
        return fill(self.notes[key], values)

    def reason(self, key: str, **values: str) -> str:
        return fill(self.why[key], values)


class Architecture(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One compute capability of checks/gpus.toml (CUDA Programming Guide tables)."""

    cc: str
    name: str
    # workstation-blackwell | datacenter-blackwell | hopper | ampere | ada | ...
    klass: str = msgspec.field(name="class")
    products: list[str]
    smem_per_sm: int
    smem_optin_per_block: int
    max_threads_per_sm: int
    source: str

    @property
    def cc_tuple(self) -> tuple[int, int]:
        major, minor = self.cc.split(".")
        return int(major), int(minor)


class DriverThresholds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_version_sm12x: str
    recommended_cuda_sm12x: str
    cuda_13_2_driver: str
    source: str


class P2PThresholds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    # A verified pair is slower-than-host below this fraction of the host-staged control.
    min_peer_vs_host: float = 1.0
    source: str = ""


class Thresholds(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    driver: DriverThresholds
    p2p: P2PThresholds = msgspec.field(default_factory=P2PThresholds)


class Distro(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One [[distro]] of checks/distros.toml: which command sets serve it."""

    ids: list[str]
    from_major: int | None = None
    # The CUDA repository folder; placeholders {major} and {version_digits} of VERSION_ID.
    cuda_folder: str | None = None
    packages: str | None = None  # driver.version's command set
    boot: str | None = None  # pci.iommu's command set


class CudaRepos(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    repos: str
    arch: dict[str, str]


class Distros(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    cuda: CudaRepos
    distro: list[Distro]

    def find(self, os_id: str | None, major: int | None) -> Distro | None:
        """The first entry for this distribution (and version, where an entry asks one)."""
        for d in self.distro:
            if os_id in d.ids and (
                d.from_major is None or (major is not None and major >= d.from_major)
            ):
                return d
        return None


class RuleData(msgspec.Struct, frozen=True, kw_only=True):
    checks: dict[str, CheckSpec]
    # [finding.<id>]: findings outside the check catalogue's checks (apply's, from the
    # Docker engine's answers), worded as a check's remedy is.
    findings: dict[str, RemedyText] = msgspec.field(default_factory=dict)
    # [words.<command>.<key>]: what a command says beside its checks' results.
    words: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)
    actions: list[ActionSpec] = msgspec.field(default_factory=list)
    architectures: dict[tuple[int, int], Architecture]
    thresholds: Thresholds
    launch: LaunchWords
    distros: Distros

    # The catalogues of some families are read when first asked for (start-up:
    # docs/performance.md): scan-logs and a check without those inputs do not need them.
    # Kept in _LOADED once read: the import statement and the cached loader's call were
    # ~2 us a time, asked ~6 times a node of a fleet with bench runs.
    @property
    def preflight(self) -> "PreflightData":
        """checks/preflight.toml: link, BAR1, module, collective and memory thresholds."""
        found = _LOADED.get("preflight")
        if found is None:
            from blackwell_doctor.ruledata.preflight import load_preflight

            found = _LOADED["preflight"] = load_preflight()
        return found

    @property
    def serving(self) -> "ServingData":
        """checks/serving.toml: the serving.* checks' expectations and thresholds, read when
        first asked for (a run without bench results does not need them)."""
        found = _LOADED.get("serving")
        if found is None:
            from blackwell_doctor.ruledata.serving import load_serving_data

            found = _LOADED["serving"] = load_serving_data()
        return found

    @property
    def stack(self) -> "StackData":
        """checks/stack.toml and backends.toml: the stack.* checks' data (`audit`), read when
        first asked for (it imports ``packaging``; a run without a stack audit or a model
        directory does not need it)."""
        found = _LOADED.get("stack")
        if found is None:
            from blackwell_doctor.ruledata.stack import load_stack_data

            found = _LOADED["stack"] = load_stack_data()
        return found

    @property
    def host_mounts(self) -> "HostMounts":
        """checks/host_mounts.toml: the mount to add for an unreadable host path, read when a
        containerised run first cannot read one (rules/mounts.py)."""
        found = _LOADED.get("host_mounts")
        if found is None:
            from blackwell_doctor.ruledata.mounts import load_host_mounts

            found = _LOADED["host_mounts"] = load_host_mounts()
        return found

    def word(self, command: str, key: str, **values: str) -> str:
        """``[words.<command>] <key>`` with its ``{name}`` placeholders filled."""
        return fill(self.words[command][key], values)


class _CatalogueFile(msgspec.Struct, kw_only=True, forbid_unknown_fields=True):
    check: list[CheckSpec]
    action: list[ActionSpec] = msgspec.field(default_factory=list)
    launch: LaunchWords
    finding: dict[str, RemedyText] = msgspec.field(default_factory=dict)
    words: dict[str, dict[str, str]] = msgspec.field(default_factory=dict)


class _GpusFile(msgspec.Struct, forbid_unknown_fields=True):
    arch: list[Architecture]


@functools.cache
def load_rule_data() -> RuleData:
    catalogue = load_shipped("catalogue.toml", _CatalogueFile)
    gpus = load_shipped("gpus.toml", _GpusFile)
    thresholds = load_shipped("thresholds.toml", Thresholds)
    distros = load_shipped("distros.toml", Distros)
    checks: dict[str, CheckSpec] = {}
    for spec in catalogue.check:
        if spec.id in checks:
            raise CatalogueError(f"checks/catalogue.toml: duplicate check id {spec.id!r}")
        if "." not in spec.id:
            raise CatalogueError(f"checks/catalogue.toml: id {spec.id!r} is not family.name")
        checks[spec.id] = spec
    for spec in checks.values():
        for dep in spec.requires:
            if dep not in checks:
                raise CatalogueError(f"checks/catalogue.toml: {spec.id} requires unknown {dep!r}")
    for action in catalogue.action:
        if not any(action.matches(c) for c in checks):
            raise CatalogueError(f"checks/catalogue.toml: action {action.key!r} names no check")
    archs = {a.cc_tuple: a for a in gpus.arch}
    return RuleData(
        checks=checks,
        findings=catalogue.finding,
        words=catalogue.words,
        actions=catalogue.action,
        architectures=archs,
        thresholds=thresholds,
        launch=catalogue.launch,
        distros=distros,
    )


# The catalogues RuleData's properties read, by property name (clear_caches forgets them).
_LOADED: dict[str, Any] = {}


def clear_caches() -> None:
    """Forget every catalogue read (tests that edit checks/)."""
    _LOADED.clear()
    from blackwell_doctor.ruledata.mounts import load_host_mounts
    from blackwell_doctor.ruledata.preflight import load_preflight
    from blackwell_doctor.ruledata.serving import load_serving_data
    from blackwell_doctor.ruledata.stack import load_stack_data

    for cached in (
        load_rule_data,
        load_host_mounts,
        load_preflight,
        load_serving_data,
        load_stack_data,
    ):
        cached.cache_clear()
