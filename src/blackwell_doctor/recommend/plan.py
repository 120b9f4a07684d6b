"""Findings → ordered, deduplicated actions, and the runtime launch for this host.

Each action says why (the finding ids), what to run, the expected effect with its source
and how sure that is, and how to verify afterwards. No action promises a speed-up
(REFERENCE §0.2: the K=64 image measured within about ±6% of stock): the tool recommends,
then the operator measures.
"""

from __future__ import annotations

import dataclasses
import shlex
from dataclasses import dataclass

import msgspec
from packaging.version import Version

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import Facts, ToolInfo
from blackwell_doctor.recommend.launch import (
    MODEL_DIR_PLACEHOLDER,
    ContainerChoices,
    LaunchSpec,
    build_launch,
    docker_run_argv,
    reachable_host,
)
from blackwell_doctor.recommend.settings import Derived, derive, p2p_decision, p2p_findings
from blackwell_doctor.report.check import HostLine, Report
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.rules import ActionSpec, fill, load_rule_data
from blackwell_doctor.ruledata.runtimes import RUNTIME_CLEARABLE, Catalogue, Runtime
from blackwell_doctor.rules import view

RECOMMENDATION_SCHEMA_VERSION = 1
_FINDING = frozenset({Status.WARN, Status.FAIL})


class Effect(msgspec.Struct, frozen=True, kw_only=True):
    summary: str
    source: str
    confidence: str


class FindingRef(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    status: str
    severity: str
    summary: str


class Action(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    title: str
    why: list[str]  # finding ids
    findings: list[FindingRef]
    commands: list[str]
    effect: Effect
    verify: list[str]
    notes: list[str] = msgspec.field(default_factory=list)


class Setting(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    value: str
    why: str


class RuntimeInfo(msgspec.Struct, frozen=True, kw_only=True):
    id: str
    title: str
    image: str
    digest: str
    pinned: bool
    verified: bool
    min_driver: str
    cuda: str
    flashinfer: str
    source: str
    notes: str


class Launch(msgspec.Struct, frozen=True, kw_only=True):
    runtime: RuntimeInfo
    gpu_count: int
    tensor_parallel_size: int
    settings: list[Setting]
    # The container (secret values replaced) and its `docker run` argv; None without
    # --model-dir.
    container: LaunchSpec | None
    docker_run: list[str] | None
    notes: list[str] = msgspec.field(default_factory=list)


class Recommendation(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    host: HostLine
    actions: list[Action]
    launch: Launch | None
    notes: list[str]


@dataclass(frozen=True, kw_only=True)
class LaunchOptions(ContainerChoices):
    """What the user chose for the container (the rest is derived)."""

    model_dir: str | None = None
    runtime_id: str | None = None
    extra_env: tuple[tuple[str, str], ...] = ()


def _verify(ids: list[str]) -> str:
    return shlex.join([TOOL_NAME, "check", *[a for i in ids for a in ("--select", i)]])


def _finding_ref(r: Result) -> FindingRef:
    return FindingRef(id=r.id, status=r.status.value, severity=r.severity.value, summary=r.summary)


def _dedupe(items: list[str]) -> list[str]:
    return list(dict.fromkeys(items))


def _driver_ok(runtime: Runtime, driver: Version | None) -> bool | None:
    if not runtime.min_driver or driver is None:
        return None
    return driver >= Version(runtime.min_driver)


def choose_runtime(
    catalogue: Catalogue, facts: Facts, runtime_id: str | None
) -> tuple[Runtime, list[str]]:
    """The runtime to recommend and notes on the choice. ``runtime_id`` forces one.

    Otherwise the most preferred runtime whose driver requirement this host meets; with an
    unknown driver, the most preferred one, said so."""
    words = load_rule_data().launch
    text = view.driver_version(facts)
    try:
        driver = Version(text) if text else None
    except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
        driver = None
    notes: list[str] = []
    if runtime_id is not None:
        chosen = catalogue.by_id(runtime_id)
    else:
        ordered = catalogue.ordered()
        fitting = [r for r in ordered if _driver_ok(r, driver) is not False]
        chosen = fitting[0] if fitting else ordered[0]
        if driver is None:
            notes.append(words.note("driver_unknown"))
    if _driver_ok(chosen, driver) is False:
        notes.append(
            words.note(
                "needs_driver",
                runtime=chosen.id,
                min_driver=chosen.min_driver,
                cuda=chosen.cuda,
                driver=str(text),
            )
        )
    if not chosen.pinned:
        notes.append(words.note("unpinned", image=chosen.image))
    if not chosen.verified:
        notes.append(words.note("unverified", runtime=chosen.id, tool=TOOL_NAME))
    return chosen, notes


def _runtime_info(r: Runtime) -> RuntimeInfo:
    # Every field of RuntimeInfo is the catalogue entry's attribute of the same name
    # (``pinned`` its property): msgspec reads them by name, so a field added to both is
    # carried without a line here.
    return msgspec.convert(r, RuntimeInfo, from_attributes=True)


def launch_spec(runtime: Runtime, derived: Derived, options: LaunchOptions) -> LaunchSpec:
    """The container for these options (raises validate.ValidationError)."""
    if options.model_dir is None:
        raise ValueError("a launch spec needs the model directory")
    return build_launch(
        runtime,
        derived,
        model_dir=options.model_dir,
        name=options.name,
        bind=options.bind,
        port=options.port,
        shm_size=options.shm_size,
        extra_env=dict(options.extra_env),
    )


def runtime_clears(runtime: Runtime, finding_id: str) -> bool:
    """The runtime claims the finding and a runtime change can clear it at all (a user
    catalogue is validated for this too; this keeps the plan right whatever it says)."""
    return finding_id in RUNTIME_CLEARABLE and runtime.addresses_finding(finding_id)


@dataclass(frozen=True)
class _Measured:
    """What serving.throughput says of the bench run: a slow path (its finding), or a
    healthy one (its pass), or neither (no bench, no expectation)."""

    slow: Result | None
    healthy: Result | None


def _measured(report: Report) -> _Measured:
    throughput = next((r for r in report.results if r.id == THROUGHPUT), None)
    tail = next((r for r in report.results if r.id == LATENCY_TAIL), None)
    if throughput is None:
        return _Measured(slow=None, healthy=None)
    if throughput.status in _FINDING:
        return _Measured(slow=throughput, healthy=None)
    stalled = tail is not None and tail.status in _FINDING
    ok = throughput.status is Status.PASS and not stalled
    return _Measured(slow=None, healthy=throughput if ok else None)


def _runtime_action(
    runtime: Runtime,
    derived: Derived,
    report: Report,
    spec: LaunchSpec | None,
    runtime_notes: list[str],
) -> tuple[Action, list[str]]:
    """The action, and the ids of the findings it clears (the only ones it consumes: the
    P2P findings it lists are the p2p action's to clear). A measured slow path
    (serving.throughput below its floor) is the runtime's to clear too."""
    words = load_rule_data().launch
    measured = _measured(report)
    serving = _serving_action_spec()
    addressed = [
        r for r in report.results if r.status in _FINDING and runtime_clears(runtime, r.id)
    ]
    if measured.slow is not None:
        addressed.append(measured.slow)
    p2p: list[Result] = []
    if "NCCL_P2P_DISABLE" in derived.env:
        broken = set(p2p_findings(report))
        p2p = [r for r in report.results if r.id in broken]
    findings = addressed + [r for r in p2p if r not in addressed]
    image = runtime.reference
    commands = [shlex.join(["docker", "pull", image])]
    if runtime.flashinfer:
        probe = ["docker", "run", "--rm", "--entrypoint", "python3", image, "-c"]
        probe.append("import flashinfer; print(flashinfer.__version__)")
        commands.append(
            words.note("expect_version", command=shlex.join(probe), version=runtime.flashinfer)
        )
    notes = [*runtime_notes, *derived.notes]
    if measured.slow is not None and serving is not None:
        notes.insert(0, serving.note("slow_path", figures=measured.slow.summary))
    elif measured.healthy is not None and serving is not None:
        notes.insert(0, serving.note("healthy", figures=measured.healthy.summary))
    if spec is not None:
        for k, v in spec.env.items():
            if spec.is_secret(k):
                notes.append(words.note("secret", name=k))
            else:
                commands.append(shlex.join(["export", f"{k}={v}"]))
        commands.append(shlex.join(docker_run_argv(spec)))
        notes.append(words.note("apply_instead", tool=TOOL_NAME))
    else:
        notes.append(words.note("no_model_dir"))
    name = spec.name if spec is not None else "blackwell-doctor-vllm"
    port = spec.host_port if spec is not None else 8000
    host = reachable_host(spec.bind if spec is not None else "127.0.0.1")
    verify = [
        shlex.join(["curl", "-fsS", f"http://{host}:{port}{runtime.health_path}"]),
        words.note("scan_logs", name=shlex.quote(name), tool=TOOL_NAME),
    ]
    if p2p:
        verify.append(_verify([r.id for r in p2p]))
    if any(r.id.startswith("probe.") for r in addressed):
        notes.append(words.note("tiles_stay"))
    if runtime.notes:
        notes.append(runtime.notes)
    if measured.healthy is not None and serving is not None:
        summary = serving.note("healthy_effect")
    elif addressed:
        summary = runtime.effect
    else:
        summary = words.note("no_runtime_finding")

    action = Action(
        id="runtime",
        title=fill(words.title, {"runtime": runtime.title}),
        why=[r.id for r in findings],
        findings=[_finding_ref(r) for r in findings],
        commands=commands,
        effect=Effect(summary=summary, source=runtime.source, confidence=runtime.confidence),
        verify=verify,
        notes=_dedupe(notes),
    )
    return action, [r.id for r in addressed]


THROUGHPUT = "serving.throughput"
LATENCY_TAIL = "serving.latency_tail"


def _serving_action_spec() -> ActionSpec | None:
    return next((a for a in load_rule_data().actions if a.key == "serving"), None)


def build_recommendation(
    facts: Facts,
    report: Report,
    catalogue: Catalogue,
    options: LaunchOptions,
) -> tuple[Recommendation, LaunchSpec | None]:
    """The recommendation, and the launch spec (with secret values): the real one for
    apply, or without ``options.model_dir`` one with the MODEL_DIR placeholder that only the
    shell and compose formats render (``launch.is_placeholder``; apply refuses it)."""
    rules = load_rule_data()
    derived = derive(facts, report)
    p2p = p2p_decision(facts, report)
    findings = [r for r in report.results if r.status in _FINDING]
    runtime: Runtime | None = None
    runtime_notes: list[str] = []
    if derived is not None:
        runtime, runtime_notes = choose_runtime(catalogue, facts, options.runtime_id)
    elif options.runtime_id is not None:
        catalogue.by_id(options.runtime_id)  # still report an unknown id
    consumed: set[str] = set()
    ordered: list[tuple[int, int, Action]] = []
    for group in load_rule_data().actions:
        hits = [r for r in findings if group.matches(r.id)]
        if not hits:
            continue
        consumed.update(r.id for r in hits)
        commands: list[str] = []
        notes: list[str] = []
        for r in hits:
            if r.remedy is not None:
                commands += r.remedy.commands
                notes.append(f"{r.id}: {r.remedy.summary}")
        if group.key == "p2p" and derived is not None and "NCCL_P2P_DISABLE" in derived.env:
            basis = group.note(
                "export_measured" if p2p is not None and p2p.measured else "export_driver_only"
            )
            commands.append(group.note("export", basis=basis))
            notes.append(derived.why["NCCL_P2P_DISABLE"])
        elif group.key == "p2p" and p2p is not None:
            notes.append(p2p.why)
        verify = [_verify([r.id for r in hits]), *group.verify]
        ordered.append(
            (
                group.order,
                0,
                Action(
                    id=group.key,
                    title=group.title,
                    why=[r.id for r in hits],
                    findings=[_finding_ref(r) for r in hits],
                    commands=_dedupe(commands),
                    effect=Effect(**msgspec.structs.asdict(group.effect)),
                    verify=verify,
                    notes=_dedupe(notes),
                ),
            )
        )
    spec: LaunchSpec | None = None
    template: LaunchSpec | None = None
    launch: Launch | None = None
    if derived is not None and runtime is not None:
        if options.model_dir is not None:
            spec = launch_spec(runtime, derived, options)
        else:
            # Shell and compose are still written, with a MODEL_DIR placeholder; the actions,
            # the markdown and the JSON show no docker run without a real directory.
            template = launch_spec(
                runtime,
                derived,
                dataclasses.replace(options, model_dir=MODEL_DIR_PLACEHOLDER),
            )
        shown = msgspec.structs.replace(spec, env=spec.shown_env()) if spec is not None else None
        action, cleared = _runtime_action(runtime, derived, report, spec, runtime_notes)
        consumed.update(cleared)
        serving = _serving_action_spec()
        if THROUGHPUT in cleared and serving is not None:
            # A measured slow path: the runtime change comes before the serving action's
            # place, just after the driver (checks/catalogue.toml [[action]] serving).
            ordered.append((serving.order, -1, action))
        else:
            ordered.append((50, 0, action))
        settings = [
            Setting(
                name="tensor_parallel_size",
                value=str(derived.tensor_parallel_size),
                why=derived.why["tensor_parallel_size"],
            )
        ]
        if derived.max_model_len is not None:  # the model was sized (--model-dir)
            settings.append(
                Setting(
                    name="max_model_len",
                    value=str(derived.max_model_len),
                    why=derived.why["max_model_len"],
                )
            )
        if derived.max_model_len is not None or derived.memory_budget:
            settings.append(
                Setting(
                    name="gpu_memory_utilization",
                    value=f"{derived.gpu_memory_utilization:g}",
                    why=derived.why["gpu_memory_utilization"],
                )
            )
        if derived.moe_backend is not None:
            settings.append(
                Setting(
                    name="moe_backend", value=derived.moe_backend, why=derived.why["moe_backend"]
                )
            )
        env = shown.env if shown is not None else derived.env
        for k, v in env.items():
            settings.append(
                Setting(
                    name=k,
                    value=v,
                    why=derived.why.get(
                        k,
                        rules.launch.reason(
                            "from_catalogue" if k in runtime.env else "from_env_option"
                        ),
                    ),
                )
            )
        launch = Launch(
            runtime=_runtime_info(runtime),
            gpu_count=derived.gpu_count,
            tensor_parallel_size=derived.tensor_parallel_size,
            settings=settings,
            container=shown,
            docker_run=docker_run_argv(shown) if shown is not None else None,
            notes=_dedupe([*runtime_notes, *derived.notes]),
        )
    severity_rank = {"critical": 0, "high": 1, "medium": 2, "low": 3, "info": 4}
    for r in findings:
        if r.id in consumed:
            continue
        spec_ = rules.checks.get(r.id)
        source = spec_.source if spec_ is not None and spec_.source else f"check {r.id}"
        ordered.append(
            (
                90,
                severity_rank.get(r.severity.value, 5),
                Action(
                    id=r.id,
                    title=rules.launch.note("finding_title", id=r.id),
                    why=[r.id],
                    findings=[_finding_ref(r)],
                    commands=list(r.remedy.commands) if r.remedy else [],
                    effect=Effect(
                        summary=rules.launch.note(
                            "finding_effect",
                            id=r.id,
                            remedy=r.remedy.summary if r.remedy else r.summary,
                        ),
                        source=source,
                        confidence=rules.launch.note("finding_confidence"),
                    ),
                    verify=[_verify([r.id])],
                ),
            )
        )
    ordered.sort(key=lambda t: (t[0], t[1]))
    notes = [rules.launch.note("no_speedup")]
    if derived is None:
        notes.append(rules.launch.note("no_gpu"))
    rec = Recommendation(
        schema_version=RECOMMENDATION_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        host=report.host,
        actions=[a for _, _, a in ordered],
        launch=launch,
        notes=notes,
    )
    return rec, spec if spec is not None else template


__all__ = [
    "CatalogueError",
    "LaunchOptions",
    "Recommendation",
    "build_recommendation",
    "choose_runtime",
]
