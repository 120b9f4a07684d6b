"""Options more than one command takes, declared once (typer ``Annotated`` aliases): those
of the commands that read a host, launch a runtime or bench. Those every command shares
are :mod:`blackwell_doctor.cli.basics`'.

Importing this module costs typer and the standard library only: commands import it at
start-up, before knowing which of them runs. ``recommend`` and ``apply`` word a few of them
more briefly (``...Brief``); the behaviour is the same.
"""

from __future__ import annotations

from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any, NamedTuple

import typer

# The rate and shape options' values (standard library only, as this module).
from blackwell_doctor.app.rate_options import RateOptions as RateOptions
from blackwell_doctor.app.shape_options import ShapeOptions as ShapeOptions
from blackwell_doctor.cli.basics import OptionGroup, split

if TYPE_CHECKING:
    from blackwell_doctor.app.obtain import FactsRequest
    from blackwell_doctor.recommend.options import LaunchRequest


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
