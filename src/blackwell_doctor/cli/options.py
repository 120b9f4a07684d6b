"""Options more than one command takes, declared once (typer ``Annotated`` aliases).

Importing this module costs typer and the standard library only: commands import it at
start-up, before knowing which of them runs. ``recommend`` and ``apply`` word a few of them
more briefly (``...Brief``); the behaviour is the same.
"""

from __future__ import annotations

import functools
import inspect
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple, TypeVar

import typer

# The rate and shape options' values (standard library only, as this module).
from blackwell_doctor.app.rate_options import RateOptions as RateOptions
from blackwell_doctor.app.shape_options import ShapeOptions as ShapeOptions

# ``--fail-on``: the lowest status (check) or severity (scan-logs) that makes exit 1; one
# definition, the documents' (typer offers a Literal's values as the choices).
from blackwell_doctor.report.status import FailOn as FailOn

if TYPE_CHECKING:
    from blackwell_doctor.app.obtain import FactsRequest, Obtained
    from blackwell_doctor.recommend.options import LaunchRequest
    from blackwell_doctor.report.check import Report


def split(values: list[str] | None) -> list[str]:
    """Repeatable options that also take comma-separated lists (``--select a,b``)."""
    return [v.strip() for item in values or [] for v in item.split(",") if v.strip()]


@contextmanager
def selection_errors() -> Iterator[None]:
    """A --select/--ignore that names no check is a usage error (one line, exit 2)."""
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.rules.engine import SelectionError

    try:
        yield
    except SelectionError as exc:
        raise UserError(str(exc)) from None


class Judging(NamedTuple):
    """How a command chooses and judges checks, as given (:data:`CheckJudging` and the
    groups like it), typed: --fail-on, --strict and, where the command takes them,
    --select/--ignore."""

    fail_on: FailOn
    strict: bool
    select: list[str] | None = None
    ignore: list[str] | None = None


def judge(obtained: Obtained, judging: Judging, *, embed_facts: bool = False) -> Report:
    """The report on the facts a command obtained, with its judging options as given."""
    from blackwell_doctor.rules.evaluate import evaluate

    with selection_errors():
        return evaluate(
            obtained.facts,
            select=split(judging.select),
            ignore=split(judging.ignore),
            fail_on=judging.fail_on,
            strict=judging.strict,
            source=obtained.source,
            embed_facts=embed_facts,
        )


# How check, slurm-health and fleet choose and judge checks. slurm-health words --fail-on and
# --strict by what they do there (drain the node), fleet says what --strict adds: those take
# the option from the factories below with their own help.
def fail_on_option(help: str = "Lowest status that makes the exit code 1.") -> Any:
    return typer.Option("--fail-on", help=help)


def strict_option(help: str = "Exit 3 when a check could not be evaluated.") -> Any:
    return typer.Option("--strict", help=help)


# Every command's --format, over the command's own format enum (render/formats.py).
def format_option(help: str = "Output format.", *, show_default: bool = True) -> Any:
    return typer.Option("--format", "-f", help=help, show_default=show_default)


FailOnStatus = Annotated[FailOn, fail_on_option()]
Strict = Annotated[bool, strict_option()]


# bench --rate and apply --verify --rate: one shape's load at request rates, read for both
# by app/bench_flow.py's rates_from. Declared here once (name, metavar, type, default help:
# bench's); apply words each for its gate and shows it in its verification panel.
def rate_option(
    help: str = "Send one shape's requests at each rate (requests/s), or 'sweep': one at a "
    "time, all at once, then rates between up to the knee.",
    panel: str | None = None,
) -> Any:
    return typer.Option("--rate", metavar="R[,R...]|sweep", help=help, rich_help_panel=panel)


def arrival_option(
    help: str = "With --rate: the arrival process (default poisson, as vllm bench serve).",
    panel: str | None = None,
) -> Any:
    return typer.Option(
        "--arrival",
        metavar="constant|poisson|gamma",
        help=help,
        rich_help_panel=panel,
        show_default=False,
    )


def burstiness_option(
    help: str = "With --arrival gamma: its shape (vLLM's --burstiness; below 1 burstier than "
    "Poisson, above 1 more even).",
    panel: str | None = None,
) -> Any:
    return typer.Option("--burstiness", metavar="SHAPE", help=help, rich_help_panel=panel)


def slo_option(
    help: str = "With --rate (or --compare of rate runs): the SLOs each request must meet "
    "(ttft_ms, tpot_ms, e2e_ms), e.g. ttft_ms:500,tpot_ms:50.",
    panel: str | None = None,
) -> Any:
    return typer.Option("--slo", metavar="METRIC:MS[,...]", help=help, rich_help_panel=panel)


def slo_level_option(
    help: str = "With --slo: the share of requests that must meet them for a rate to count "
    "toward capacity (default 90).",
    panel: str | None = None,
) -> Any:
    return typer.Option(
        "--slo-level", metavar="PCT", help=help, rich_help_panel=panel, show_default=False
    )


# bench and apply --verify (which benches): the shapes, their prompts and requests, and
# the runs' repetition, declared once (name, metavar, bounds: the same bench under both);
# each command words the help, apply in its verification panel.
_BENCH_OPTIONS: dict[str, dict[str, Any]] = {
    "--shapes": {},
    "--shape": {"metavar": "SHAPE"},
    "--seed": {"metavar": "N"},
    "--requests": {"metavar": "N", "min": 1, "max": 1_000_000},
    "--request-timeout": {"metavar": "SECONDS", "min": 0.1, "max": 86400.0},
    "--repeat": {"metavar": "N", "min": 1, "max": 100},
}


def bench_option(name: str, *, help: str, panel: str | None = None) -> Any:
    return typer.Option(name, help=help, rich_help_panel=panel, **_BENCH_OPTIONS[name])


# The shapes and their requests as app/shape_options.py's fields: each one's option and type
# once; bench and apply word them (bench adds its --duration).
_SHAPE_FIELDS: dict[str, tuple[str, Any, object]] = {
    "shapes_file": ("--shapes", Path | None, None),
    "shape_names": ("--shape", list[str] | None, None),
    "seed": ("--seed", int, 0),
    "requests": ("--requests", int | None, None),
    "request_timeout_s": ("--request-timeout", float, 300.0),
}


def shape_option(field: str, *, help: str, panel: str | None = None) -> tuple[str, Any, object]:
    """A row of :func:`shape_group`: ``field``'s option with this help."""
    name, kind, default = _SHAPE_FIELDS[field]
    return (field, Annotated[kind, bench_option(name, help=help, panel=panel)], default)


def shape_group(*rows: tuple[str, Any, object]) -> OptionGroup:
    """The group of a command's shape options, read into one :class:`ShapeOptions`."""
    return OptionGroup(ShapeOptions, rows)


Rate = Annotated[str | None, rate_option()]
Arrival = Annotated[str | None, arrival_option()]
Burstiness = Annotated[float | None, burstiness_option()]
Slo = Annotated[str | None, slo_option()]
SloLevel = Annotated[float | None, slo_level_option()]
Select = Annotated[
    list[str] | None,
    typer.Option(
        "--select", metavar="ID", help="Only these check ids or families (prefixes, repeatable)."
    ),
]
Ignore = Annotated[
    list[str] | None,
    typer.Option(
        "--ignore", metavar="ID", help="Skip these check ids or families (prefixes, repeatable)."
    ),
]

# check and audit: the evidence of the checks that passed too (fleet words its own).
Verbose = Annotated[
    bool, typer.Option("--verbose", "-v", help="Show evidence for passing checks too.")
]
Output = Annotated[
    Path | None,
    typer.Option("--output", "-o", help="Write to this file instead of standard output."),
]
NoProbe = Annotated[
    bool, typer.Option("--no-probe", help="Do not run the probe kernels on the GPU.")
]
HostRoot = Annotated[
    Path | None,
    typer.Option(
        "--host-root",
        help="Read /proc, /sys, /dev, /etc and /usr/lib/wsl under this directory "
        "(e.g. /host when the host is mounted into a container). Default: /.",
    ),
]
HostRootBrief = Annotated[
    Path | None,
    typer.Option("--host-root", help="Read /proc, /sys, ... under this directory. Default: /."),
]


# --gpu-timeout's bounds, once: check, collect, audit and slurm-health word it in full;
# recommend, apply and model briefly.
def _gpu_timeout(help: str) -> Any:
    return typer.Option("--gpu-timeout", metavar="SECONDS", min=1.0, max=3600.0, help=help)


GpuTimeout = Annotated[
    float | None,
    _gpu_timeout(
        "Seconds NVML and the CUDA driver get to answer; a hung GPU becomes a finding (default 20)."
    ),
]
GpuTimeoutBrief = Annotated[float | None, _gpu_timeout("Seconds NVML/CUDA get to answer.")]

# The logs scanned into the facts (check, collect, recommend, apply).
Logs = Annotated[
    list[str] | None,
    typer.Option(
        "--logs",
        metavar="PATH",
        help="Scan these runtime logs too (files, .gz, directories, globs; - for stdin). "
        "Repeatable.",
    ),
]
Containers = Annotated[
    list[str] | None,
    typer.Option(
        "--container", metavar="NAME", help="Scan this container's logs (Docker API). Repeatable."
    ),
]
Journal = Annotated[bool, typer.Option("--journal", help="Scan the systemd journal of this boot.")]
KernelLog = Annotated[
    bool,
    typer.Option("--kernel-log", help="Scan the kernel log for Xid and IOMMU faults."),
]


class FactsOptions(NamedTuple):
    """A command's facts options as it declared them (the aliases of this module, by the
    same names), typed: check, collect, recommend, apply, slurm-health and audit give the
    ones they take; the rest keep their defaults. :meth:`request` is the one reader of them."""

    host_root: Path | None = None
    gpu_timeout: float | None = None
    no_probe: bool = False
    facts_file: Path | None = None
    # --example NAME: the example's name as the facts' source.
    facts_label: str | None = None
    logs: list[str] | None = None
    containers: list[str] | None = None
    journal: bool = False
    kernel_log: bool = False
    redact: bool = False
    model_dir: Path | None = None
    # recommend, apply: the model directory is the runtime's mount.
    model_mount: bool = False
    hub: bool = False
    bench: Path | None = None
    stack: bool = False
    python: Path | None = None
    image: str | None = None
    # audit --no-cache: every shared object of the stack read again.
    no_cache: bool = False
    # check: a live run collects only what the checks these leave read.
    select: list[str] | None = None
    ignore: list[str] | None = None

    def request(self) -> FactsRequest:
        """The request :func:`blackwell_doctor.app.obtain.obtain_facts` takes."""
        from blackwell_doctor.app.obtain import FactsRequest, LogRequest

        return FactsRequest(
            facts_file=self.facts_file,
            host_root=self.host_root,
            gpu_timeout_s=self.gpu_timeout,
            probes=not self.no_probe,
            redact=self.redact,
            model_dir=self.model_dir,
            model_mount=self.model_mount,
            model_hub=self.hub,
            bench_file=self.bench,
            stack=self.stack or self.image is not None,
            python=self.python,
            image=self.image,
            stack_cache=not self.no_cache,
            label=self.facts_label,
            select=tuple(split(self.select)),
            ignore=tuple(split(self.ignore)),
            logs=LogRequest(
                paths=tuple(self.logs or ()),
                containers=tuple(self.containers or ()),
                journal=self.journal,
                kernel_log=self.kernel_log,
            ),
        )

    def with_example(
        self,
        name: str | None,
        *,
        command: str,
        conflicting: tuple[str, ...],
        reads_bench: bool = True,
    ) -> FactsOptions:
        """These options with ``--example``'s files in place of ``--facts``, ``--logs``,
        ``--bench`` (where the command reads one: ``reads_bench``) and ``--model-dir``
        (those the user gave win, bar ``conflicting``, which are refused beside it);
        unchanged without ``--example``."""
        if name is None:
            return self
        from blackwell_doctor.app.examples import replace_options

        given = self._asdict()
        ex = replace_options(name, given, part="facts", command=command, conflicting=conflicting)
        return self._replace(
            facts_file=ex.facts,
            facts_label=f"example {name}",
            logs=self.logs or list(ex.logs),
            bench=ex.bench if self.bench is None and reads_bench else self.bench,
            model_dir=ex.model if self.model_dir is None else self.model_dir,
        )


class LaunchFlags(NamedTuple):
    """``recommend``'s and ``apply``'s launch options as given (:data:`Launch`), typed;
    :meth:`request` makes them recommend/options.py's LaunchRequest (checked there, then
    recommend/plan.py's LaunchOptions)."""

    runtime: str | None
    catalogue: Path | None
    name: str
    bind: str
    port: int
    shm_size: str | None
    env: list[str] | None

    def request(self, model_dir: Path | None) -> LaunchRequest:
        """The launch as one request, checked where it is used."""
        from blackwell_doctor.recommend.options import LaunchRequest

        return LaunchRequest(
            model_dir=model_dir,
            runtime=self.runtime,
            name=self.name,
            bind=self.bind,
            port=self.port,
            shm_size=self.shm_size,
            env=tuple(self.env or ()),
        )


# check, recommend, apply, model, fleet, bench: a shipped example instead of this host.
ExampleName = Annotated[
    str | None,
    typer.Option(
        "--example",
        metavar="NAME",
        help="Use a shipped example (a real captured or reconstructed host, its logs, bench "
        "runs, model) instead of this host: no GPU needed. `blackwell-doctor examples` "
        "lists them.",
    ),
]


# check and collect: the model the host is meant to serve (model.* checks).
CheckModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model-dir",
        help="Also read this model (config, quantization, safetensors headers; never the "
        "weights) and run the model checks: does it fit, does the SM 12.x tile problem apply "
        "to it. A directory, or ORG/NAME[@REVISION] from the local Hugging Face cache "
        "(--hub: from the Hub).",
    ),
]
# model, check and collect: ORG/NAME[@REVISION] read from the Hub instead of the cache.
ModelHub = Annotated[
    bool,
    typer.Option(
        "--hub",
        help="Read ORG/NAME[@REVISION] from the Hugging Face Hub (HF_ENDPOINT, HF_TOKEN): "
        "config, index and safetensors headers by HTTP range requests, never the weights. "
        "Without it only the local cache is read (offline).",
    ),
]

# audit: the checkpoint whose backends the runtime will select (stack.backends).
AuditModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model-dir",
        help="The model directory the runtime will serve (config and quantization read; never "
        "the weights): forecast the MoE and attention backend the installed runtime selects "
        "for it on this GPU (checks/backends.toml).",
    ),
]

# audit, check, collect: the Python GPU stack (stack.* checks).
Stack = Annotated[
    bool,
    typer.Option(
        "--stack",
        help="Also audit the Python GPU stack (`blackwell-doctor audit`): the kernels each "
        "GPU package carries for these GPUs, Triton's ptxas.",
    ),
]
StackPython = Annotated[
    Path | None,
    typer.Option(
        "--python",
        help="The interpreter of the environment to audit (e.g. /opt/venv/bin/python); "
        "default: the one running blackwell-doctor. No code of its environment runs: no "
        "package is imported, no .pth line or sitecustomize executed.",
    ),
]
StackImage = Annotated[
    str | None,
    typer.Option(
        "--image",
        metavar="NAME[:TAG]",
        help="Audit the Python GPU stack of this container image instead (NAME[:TAG], already "
        "in the Docker engine of DOCKER_HOST): its files are read through the Docker API, "
        "nothing of it is run, nothing is pulled. Implies --stack where there is one.",
    ),
]

# check, collect, recommend: a bench run judged by the serving.* checks.
BenchFile = Annotated[
    Path | None,
    typer.Option(
        "--bench",
        help="A bench run document (`blackwell-doctor bench -o run.json`; - for stdin): its "
        "figures are judged by the serving checks (collect stores them in the facts).",
    ),
]

# recommend and apply: the launch derived from the facts.
LaunchFactsFile = Annotated[
    Path | None,
    typer.Option(
        "--facts",
        help="Recommend from a facts file written by `collect` (or - for stdin) instead of "
        "this host.",
    ),
]
ModelDir = Annotated[
    Path | None,
    typer.Option(
        "--model-dir",
        help="The model directory on this host, mounted read-only at /model (required for "
        "the run command, shell, compose and apply).",
    ),
]
RuntimeId = Annotated[
    str | None,
    typer.Option(
        "--runtime",
        metavar="ID",
        help="A runtime id from the catalogue (default: the preferred one).",
    ),
]
CatalogueFile = Annotated[
    Path | None,
    typer.Option(
        "--catalogue", help="Your own runtime catalogue (format of checks/runtimes.toml)."
    ),
]
Name = Annotated[str, typer.Option("--name", metavar="NAME", help="The container's name.")]
Bind = Annotated[
    str,
    typer.Option(
        "--bind",
        metavar="ADDRESS",
        help="Address to publish the port on (0.0.0.0: every interface).",
    ),
]
Port = Annotated[int, typer.Option("--port", metavar="PORT", help="Host port for the API.")]
ShmSize = Annotated[
    str | None,
    typer.Option("--shm-size", metavar="SIZE", help="Shared memory (default: the catalogue's)."),
]
EnvVars = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        metavar="NAME[=VALUE]",
        help="Extra environment NAME=VALUE, or NAME to take it from this environment "
        "(repeatable). Secret-looking values are never printed.",
    ),
]
DEFAULT_NAME = "blackwell-doctor-vllm"
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8000


# Options several commands declare alike, in the same order: declared once here and read
# into one typed value. A command names the group by a keyword-only parameter annotated
# with one of the aliases below (``facts: HostFacts``); :func:`grouped` puts the group's
# options in that parameter's place (so --help lists them there) and hands the command
# the value built from them.
_R = TypeVar("_R")


class OptionGroup(NamedTuple):
    """The class ``build`` made from ``options``: (its field, the field's ``Annotated``
    option alias, default)."""

    build: type
    options: tuple[tuple[str, Any, object], ...]

    def check_fields(self) -> None:
        """Each option is a field of ``build`` of the option's type: a row and a field that
        disagree fail where the command is declared, not when a user gives the option."""
        import typing

        fields = typing.get_type_hints(self.build)
        for name, alias, _ in self.options:
            wanted = typing.get_args(alias)[0]
            if fields.get(name) != wanted:
                raise TypeError(f"{self.build.__name__} has no field {name} of type {wanted}")


def grouped(command: Callable[..., _R]) -> Callable[..., _R]:
    """``command`` as typer reads it: each parameter annotated ``Annotated[T, OptionGroup]``
    becomes the group's options, and the command gets the group's ``T``."""
    signature = inspect.signature(command, eval_str=True)
    params: list[inspect.Parameter] = []
    groups: dict[str, OptionGroup] = {}
    for param in signature.parameters.values():
        metadata = getattr(param.annotation, "__metadata__", ())
        group = next((m for m in metadata if isinstance(m, OptionGroup)), None)
        if group is None:
            params.append(param)
            continue
        group.check_fields()
        groups[param.name] = group
        params.extend(
            inspect.Parameter(name, param.kind, default=default, annotation=alias)
            for name, alias, default in group.options
        )

    @functools.wraps(command)
    def read_groups(**kwargs: Any) -> _R:
        for name, group in groups.items():
            kwargs[name] = group.build(**{opt: kwargs.pop(opt) for opt, _, _ in group.options})
        return command(**kwargs)

    read_groups.__signature__ = signature.replace(parameters=params)  # type: ignore[attr-defined]
    read_groups.__annotations__ = {p.name: p.annotation for p in params}
    read_groups.__annotations__["return"] = signature.return_annotation
    return read_groups


# How a live run reads this host, as check, collect and slurm-health word it, and the logs
# it scans (check, collect, recommend, apply).
PROBES: tuple[str, Any, object] = ("no_probe", NoProbe, False)
HOST: tuple[tuple[str, Any, object], ...] = (
    ("host_root", HostRoot, None),
    ("gpu_timeout", GpuTimeout, None),
)
_LOGS: tuple[tuple[str, Any, object], ...] = (
    ("logs", Logs, None),
    ("containers", Containers, None),
    ("journal", Journal, False),
    ("kernel_log", KernelLog, False),
)
# check and collect: the host, and the model, stack and bench run read beside it.
HostFacts = Annotated[
    FactsOptions,
    OptionGroup(
        FactsOptions,
        (
            PROBES,
            *HOST,
            *_LOGS,
            ("model_dir", CheckModelDir, None),
            ("hub", ModelHub, False),
            ("stack", Stack, False),
            ("python", StackPython, None),
            ("image", StackImage, None),
            ("bench", BenchFile, None),
        ),
    ),
]
# recommend and apply: the host the launch is derived from, worded briefly.
LaunchFacts = Annotated[
    FactsOptions,
    OptionGroup(
        FactsOptions,
        (
            PROBES,
            ("host_root", HostRootBrief, None),
            ("gpu_timeout", GpuTimeoutBrief, None),
            *_LOGS,
        ),
    ),
]
Launch = Annotated[
    LaunchFlags,
    OptionGroup(
        LaunchFlags,
        (
            ("runtime", RuntimeId, None),
            ("catalogue", CatalogueFile, None),
            ("name", Name, DEFAULT_NAME),
            ("bind", Bind, DEFAULT_BIND),
            ("port", Port, DEFAULT_PORT),
            ("shm_size", ShmSize, None),
            ("env", EnvVars, None),
        ),
    ),
]


# How check, audit, fleet and slurm-health choose and judge checks: --fail-on and --strict,
# then (bar audit, which judges the stack checks only) --select and --ignore.
_SELECTION: tuple[tuple[str, Any, object], ...] = (
    ("select", Select, None),
    ("ignore", Ignore, None),
)


def judging_options(
    fail_on: Any = FailOnStatus, strict: Any = Strict, *, selects: bool = True
) -> OptionGroup:
    """The group of a command's judging options: ``fail_on`` and ``strict``, its aliases
    (the commands that word them by what they do there give their own)."""
    options = (("fail_on", fail_on, "fail"), ("strict", strict, False))
    return OptionGroup(Judging, options + (_SELECTION if selects else ()))


CheckJudging = Annotated[Judging, judging_options()]


# bench --rate and apply --verify --rate: the rate run's options, read into one typed value
# (app/rate_options.py) both requests carry; apply words them for its gate (its own aliases).
def rate_group(
    rate: Any = Rate,
    arrival: Any = Arrival,
    burstiness: Any = Burstiness,
    slo: Any = Slo,
    slo_level: Any = SloLevel,
) -> OptionGroup:
    """The group of the rate options, ``bench``'s aliases unless given."""
    return OptionGroup(
        RateOptions,
        (
            ("rate", rate, None),
            ("arrival", arrival, None),
            ("burstiness", burstiness, None),
            ("slo", slo, None),
            ("slo_level_pct", slo_level, None),
        ),
    )


BenchRate = Annotated[RateOptions, rate_group()]


# --help's words that are not an option's (issue 40): each command's line in the command
# list (a sentence that fits beside its name at 80 columns: click cuts a longer one
# mid-sentence) and its examples, one command a line, shown under its options.
SUMMARIES = {
    "check": "Judge this host (or a facts file) and report: the CI gate.",
    "collect": "Write this host's facts document, to judge anywhere.",
    "probe": "Measure the GPU's limits and run the tile probes.",
    "scan-logs": "Scan logs for fallback and failure signatures.",
    "recommend": "Ordered fixes and a runtime launch for this host.",
    "apply": "Run the recommended runtime via Docker, or plan it.",
    "model": "What a model is and whether it fits these GPUs.",
    "fleet": "Judge many nodes' facts at once, grouped by finding.",
    "slurm-health": "Drain or resume this Slurm node by its findings.",
    "bench": "Measure a serving endpoint; compare runs.",
    "audit": "Audit the Python GPU stack's kernels for this GPU.",
    "examples": "List the shipped examples (no GPU needed).",
}

EXAMPLES = {
    "check": """
blackwell-doctor check
blackwell-doctor check --fail-on warn -f junit -o report.xml
blackwell-doctor check --facts node7.json --select driver,platform
blackwell-doctor check --example wsl2-rtxpro6000x4
""",
    "collect": """
blackwell-doctor collect -o facts.json --redact
blackwell-doctor check --facts facts.json
""",
    "probe": """
blackwell-doctor probe
blackwell-doctor probe --p2p -f json -o probe.json
""",
    "scan-logs": """
blackwell-doctor scan-logs vllm.log
docker logs vllm 2>&1 | blackwell-doctor scan-logs -
blackwell-doctor scan-logs --container vllm --fail-on warn
""",
    "recommend": """
blackwell-doctor recommend --example wsl2-rtxpro6000x4
blackwell-doctor recommend -f markdown > ticket.md
blackwell-doctor recommend --model-dir /models/qwen -f compose
""",
    "apply": """
blackwell-doctor apply --model-dir /models/qwen
blackwell-doctor apply --model-dir /models/qwen --yes --verify
blackwell-doctor apply --example wsl2-rtxpro6000x4
""",
    "model": """
blackwell-doctor model /models/qwen
blackwell-doctor model openai/gpt-oss-120b --hub
blackwell-doctor model --example dgx-spark
""",
    "fleet": """
blackwell-doctor fleet facts/*.json
blackwell-doctor fleet facts/ -f markdown > fleet.md
blackwell-doctor fleet --example lab
""",
    "slurm-health": """
blackwell-doctor slurm-health --facts node7.json --fail-on warn
blackwell-doctor slurm-health --no-probe --fail-on fail
""",
    "bench": """
blackwell-doctor bench --url http://127.0.0.1:8000 -o before.json
blackwell-doctor bench --compare before.json after.json
blackwell-doctor bench --url http://127.0.0.1:8000 --rate sweep
blackwell-doctor bench --example max-num-seqs-1 -f html > compare.html
""",
    "audit": """
blackwell-doctor audit
blackwell-doctor audit --python /opt/venv/bin/python
blackwell-doctor audit --image vllm/vllm-openai:latest
""",
    "examples": """
blackwell-doctor examples
blackwell-doctor check --example h200x2
""",
}
