"""Options more than one command takes, declared once (typer ``Annotated`` aliases).

Importing this module costs typer and the standard library only: commands import it at
start-up, before knowing which of them runs. ``recommend`` and ``apply`` word a few of them
more briefly (``...Brief``); the behaviour is the same.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer

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


def judge(
    obtained: Obtained,
    *,
    select: list[str] | None,
    ignore: list[str] | None,
    fail_on: FailOn,
    strict: bool,
    embed_facts: bool = False,
) -> Report:
    """The report on the facts a command obtained, with its judging options as given."""
    from blackwell_doctor.rules.evaluate import evaluate

    with selection_errors():
        return evaluate(
            obtained.facts,
            select=split(select),
            ignore=split(ignore),
            fail_on=fail_on,
            strict=strict,
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
    return typer.Option("--burstiness", help=help, rich_help_panel=panel)


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


Rate = Annotated[str | None, rate_option()]
Arrival = Annotated[str | None, arrival_option()]
Burstiness = Annotated[float | None, burstiness_option()]
Slo = Annotated[str | None, slo_option()]
SloLevel = Annotated[float | None, slo_level_option()]
Select = Annotated[
    list[str] | None,
    typer.Option("--select", help="Only these check ids or families (prefixes, repeatable)."),
]
Ignore = Annotated[
    list[str] | None,
    typer.Option("--ignore", help="Skip these check ids or families (prefixes, repeatable)."),
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
GpuTimeout = Annotated[
    float | None,
    typer.Option(
        "--gpu-timeout",
        min=1.0,
        max=3600.0,
        help="Seconds NVML and the CUDA driver get to answer; a hung GPU becomes a finding "
        "(default 20).",
    ),
]
GpuTimeoutBrief = Annotated[
    float | None,
    typer.Option("--gpu-timeout", min=1.0, max=3600.0, help="Seconds NVML/CUDA get to answer."),
]

# The logs scanned into the facts (check, collect, recommend, apply).
Logs = Annotated[
    list[str] | None,
    typer.Option(
        "--logs",
        help="Scan these runtime logs too (files, .gz, directories, globs; - for stdin). "
        "Repeatable.",
    ),
]
Containers = Annotated[
    list[str] | None,
    typer.Option("--container", help="Scan this container's logs (Docker API). Repeatable."),
]
Journal = Annotated[bool, typer.Option("--journal", help="Scan the systemd journal of this boot.")]
KernelLog = Annotated[
    bool,
    typer.Option("--kernel-log", help="Scan the kernel log for Xid and IOMMU faults."),
]


def facts_request(params: Mapping[str, Any]) -> FactsRequest:
    """A command's facts options as the request :func:`blackwell_doctor.app.obtain.obtain_facts`
    takes. ``params``: the command's parameters by name (its ``locals()``), declared with the
    aliases of this module under these names: ``host_root``, ``gpu_timeout``, ``no_probe``,
    and where the command takes them ``facts_file``, ``logs``, ``containers``, ``journal``,
    ``kernel_log``, ``redact``, ``model_dir``, ``model_mount`` (recommend, apply: the model
    directory is the runtime's mount), ``hub``, ``bench``, ``select``, ``ignore`` (a live run
    collects only what the checks they leave read). The one reader of those names for check,
    collect, recommend, apply and slurm-health."""
    from blackwell_doctor.app.obtain import FactsRequest, LogRequest

    return FactsRequest(
        facts_file=params.get("facts_file"),
        host_root=params["host_root"],
        gpu_timeout_s=params["gpu_timeout"],
        probes=not params["no_probe"],
        redact=params.get("redact", False),
        model_dir=params.get("model_dir"),
        model_mount=params.get("model_mount", False),
        model_hub=params.get("hub", False),
        bench_file=params.get("bench"),
        stack=params.get("stack", False) or params.get("image") is not None,
        python=params.get("python"),
        image=params.get("image"),
        label=params.get("facts_label"),
        select=tuple(split(params.get("select"))),
        ignore=tuple(split(params.get("ignore"))),
        logs=LogRequest(
            paths=tuple(params.get("logs") or ()),
            containers=tuple(params.get("containers") or ()),
            journal=params.get("journal", False),
            kernel_log=params.get("kernel_log", False),
        ),
    )


def launch_request(params: Mapping[str, Any]) -> LaunchRequest:
    """``recommend``'s and ``apply``'s launch options (``params``: the command's parameters
    by name, as for :func:`facts_request`: ``model_dir``, ``runtime``, ``name``, ``bind``,
    ``port``, ``shm_size``, ``env``) as one request, checked where it is used."""
    from blackwell_doctor.recommend.options import LaunchRequest

    return LaunchRequest(
        model_dir=params["model_dir"],
        runtime=params["runtime"],
        name=params["name"],
        bind=params["bind"],
        port=params["port"],
        shm_size=params["shm_size"],
        env=tuple(params["env"] or ()),
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


def with_example(
    params: Mapping[str, Any], *, command: str, conflicting: tuple[str, ...]
) -> dict[str, Any]:
    """``params`` (a command's ``locals()``) with ``--example``'s files in place of
    ``--facts``, ``--logs``, ``--bench`` and ``--model-dir`` (those the user gave win, bar
    ``conflicting``, which are refused beside it); unchanged without ``--example``."""
    name = params.get("example")
    out = dict(params)
    if name is None:
        return out
    from blackwell_doctor.app.examples import replace_options

    ex = replace_options(name, params, part="facts", command=command, conflicting=conflicting)
    out["facts_file"] = ex.facts
    out["facts_label"] = f"example {name}"
    if "logs" in out and not out.get("logs"):
        out["logs"] = list(ex.logs)
    if "bench" in out and out.get("bench") is None:
        out["bench"] = ex.bench
    if "model_dir" in out and out.get("model_dir") is None:
        out["model_dir"] = ex.model
    return out


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
    typer.Option("--runtime", help="A runtime id from the catalogue (default: the preferred one)."),
]
CatalogueFile = Annotated[
    Path | None,
    typer.Option(
        "--catalogue", help="Your own runtime catalogue (format of checks/runtimes.toml)."
    ),
]
Name = Annotated[str, typer.Option("--name", help="The container's name.")]
Bind = Annotated[
    str,
    typer.Option("--bind", help="Address to publish the port on (0.0.0.0: every interface)."),
]
Port = Annotated[int, typer.Option("--port", help="Host port for the API.")]
ShmSize = Annotated[
    str | None, typer.Option("--shm-size", help="Shared memory (default: the catalogue's).")
]
EnvVars = Annotated[
    list[str] | None,
    typer.Option(
        "--env",
        "-e",
        help="Extra environment NAME=VALUE, or NAME to take it from this environment "
        "(repeatable). Secret-looking values are never printed.",
    ),
]
DEFAULT_NAME = "blackwell-doctor-vllm"
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8000
