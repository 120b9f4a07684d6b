"""What a bench run pins of its environment (issue 21, seed checklist step 1): everything
that could change its result besides the change being measured, so that ``bench --compare``
can list what else differs between two runs.

The server half comes from the server itself (vLLM's ``/version``, the ``*_info`` gauges of
its ``/metrics``, ``/v1/models``, the ``system_fingerprint`` of its answers, and
``/server_info`` when its development endpoints are on); the host half from the facts of
the serving host (``bench --facts FILE``, or collected here when the server is on this
host). :func:`flatten` turns an :class:`Environment` into the ``key -> value`` pairs the
comparison (``rules/environment.py``) lines up.
"""

from __future__ import annotations

import re
import shlex
from collections.abc import Sequence

import msgspec

from blackwell_doctor.facts.document import Facts, Unavailable

# Bounds on what a run keeps of the server's own answers (untrusted text).
MAX_CONFIG_KEYS = 2000
MAX_VALUE_CHARS = 256
MAX_FINGERPRINTS = 8
MAX_ARGS = 512


class ModelPin(msgspec.Struct, frozen=True, kw_only=True):
    """The served model as ``/v1/models`` lists it (vLLM's ModelCard)."""

    id: str
    root: str | None = None  # vLLM: the model path or hub id the server loaded
    parent: str | None = None  # vLLM: the base model of a LoRA adapter
    max_model_len: int | None = None
    owned_by: str | None = None


class HostPin(msgspec.Struct, frozen=True, kw_only=True):
    """The serving host's GPU stack, from its facts."""

    source: str  # "this host" (a loopback server) or the facts file as given to --facts
    gpus: list[str] = msgspec.field(default_factory=list)  # NVML names, by index
    driver_version: str | None = None
    cuda_driver_version: str | None = None  # the CUDA version the driver supports
    kernel_release: str | None = None
    in_container: bool | None = None
    container_image: str | None = None  # the image (and digest) the server runs from
    # The variables of the checks (collect's list: CUDA_*, NCCL_*, VLLM_*, ...), secrets
    # redacted.
    env: dict[str, str] = msgspec.field(default_factory=dict)
    unavailable: list[str] = msgspec.field(default_factory=list)  # what could not be read


class ServerArgs(msgspec.Struct, frozen=True, kw_only=True):
    """How the server was launched (issue 40: two runs against ``vllm serve M`` and ``vllm
    serve M --max-num-seqs 1`` differed only by the config hash): its command line, argument
    by argument, secrets redacted (facts/redact.py ``redact_argv``)."""

    # Where it was read: "process 4242 on this host" (its /proc/<pid>/cmdline), "container
    # NAME" (the Docker API's Path and Args), "apply --verify's launch spec (container NAME)".
    source: str
    argv: list[str]
    image: str | None = None  # the container's image, when the server runs in one


class Environment(msgspec.Struct, frozen=True, kw_only=True):
    """What could change a run's result besides the change it measures."""

    # vLLM's GET /version {"version": ...}; None when the server has no such endpoint.
    server_version: str | None = None
    # The system_fingerprint of the server's answers: vLLM's is
    # "vllm-<version>[-tp<N>][-pp<N>][-dp<N>][-ep]-<8 hex of its config hash>".
    system_fingerprints: list[str] = msgspec.field(default_factory=list)
    config_hash: str | None = None  # those 8 hex digits, when one fingerprint has them
    model: ModelPin | None = None
    # The configuration the server reports: "<info gauge>.<label>" of /metrics (e.g.
    # "vllm:cache_config_info.block_size"), and "server_info.<path>" of /server_info.
    server_config: dict[str, str] = msgspec.field(default_factory=dict)
    # What the server was asked for and did not answer ("/version: HTTP 404").
    server_unavailable: list[str] = msgspec.field(default_factory=list)
    host: HostPin | None = None
    # Why there is no host half: neither --facts nor a server on this host.
    host_missing: str | None = None
    # The server's launch arguments, where they could be read (a process or a container on
    # this host, or the spec apply --verify launched); absent otherwise, so a run document
    # without them is byte for byte what it was. Why they could not be read, when the
    # server is on this host, is in server_unavailable ("launch arguments: ...").
    server_args: ServerArgs | msgspec.UnsetType = msgspec.UNSET


def cut(text: str, limit: int = MAX_VALUE_CHARS) -> str:
    return text if len(text) <= limit else text[: limit - 3] + "..."


def host_from_facts(facts: Facts, *, source: str, image: str | None = None) -> HostPin:
    """The GPU stack of ``facts`` (a live collection or a facts file)."""
    unavailable: list[str] = []
    gpus: list[str] = []
    driver = cuda = None
    if isinstance(facts.nvml, Unavailable):
        unavailable.append(f"nvml: {facts.nvml.reason}")
    else:
        driver = (
            None
            if isinstance(facts.nvml.driver_version, Unavailable)
            else (facts.nvml.driver_version)
        )
        cuda = (
            None
            if isinstance(facts.nvml.cuda_driver_version, Unavailable)
            else (facts.nvml.cuda_driver_version)
        )
        gpus = [g.name if isinstance(g.name, str) else "?" for g in facts.nvml.gpus]
    platform = facts.platform
    release = platform.kernel_release
    return HostPin(
        source=source,
        gpus=[cut(g) for g in gpus],
        driver_version=driver,
        cuda_driver_version=cuda,
        kernel_release=release if isinstance(release, str) else None,
        in_container=platform.container.in_container,
        container_image=image,
        env={cut(k, 128): cut(v) for k, v in sorted(facts.env.items())},
        unavailable=unavailable,
    )


# A flag given with no value (``--enforce-eager``), as :func:`launch_flags` records it.
FLAG_GIVEN = "(given)"
_NUMBER = re.compile(r"^-\d")


def launch_flags(argv: Sequence[str]) -> tuple[list[str], dict[str, str]]:
    """A command line's positional arguments (the program first) and its flags, argv token
    by token, no parser of the program's own: ``--flag value``, ``--flag=value``, a flag
    followed by another flag (or nothing) is FLAG_GIVEN; after ``--`` every token is
    positional; an argument that starts with a digit after ``-`` is a value (``--seed -1``).
    A flag given twice keeps both values, joined by ", ". A long flag's underscores are
    dashes, as vLLM's FlexibleArgumentParser.parse_args reads them (vllm.utils:
    ``--max_num_seqs`` is ``--max-num-seqs``)."""
    positional: list[str] = []
    flags: dict[str, str] = {}
    tokens = list(argv)
    i = 0
    only_positional = False
    while i < len(tokens):
        arg = tokens[i]
        i += 1
        if only_positional or i == 1 or not arg.startswith("-") or arg == "-":
            positional.append(arg)
            continue
        if _NUMBER.match(arg):
            positional.append(arg)
            continue
        if arg == "--":
            only_positional = True
            continue
        name, eq, value = arg.partition("=")
        if not eq:
            following = tokens[i] if i < len(tokens) else None
            if following is not None and (
                not following.startswith("-") or _NUMBER.match(following) or following == "-"
            ):
                value = following
                i += 1
            else:
                value = FLAG_GIVEN
        if name.startswith("--"):
            name = "--" + name[2:].replace("_", "-")
        flags[name] = f"{flags[name]}, {value}" if name in flags else value
    return positional, flags


def command_line(argv: Sequence[str]) -> str:
    """``argv`` as a shell would take it (for display only: shlex.join)."""
    return shlex.join(argv)


# The sections of :func:`flatten`'s keys: a key missing from a side whose section was
# recorded is known to be unset there; one whose section was not recorded is unknown.
VERSION = "server version"
HASH = "server config hash"
SERVER_CONFIG = "server configuration"
MODEL = "model"
HOST = "host"
SERVER_ARGS = "server launch arguments"
ARG_PREFIX = "server arg "
COMMAND = "server command"
IMAGE = "server image"


def section_of(key: str) -> str:
    """The section of a :func:`flatten` key."""
    if key in (VERSION, HASH):
        return key
    if key in (COMMAND, IMAGE) or key.startswith(ARG_PREFIX):
        return SERVER_ARGS
    if key.startswith("server "):
        return SERVER_CONFIG
    if key in ("model", "model root", "model parent", "max_model_len"):
        return MODEL
    return HOST


def sections(env: Environment | None) -> set[str]:
    """The sections ``env`` recorded."""
    if env is None:
        return set()
    known = set()
    if env.server_version is not None:
        known.add(VERSION)
    if env.config_hash is not None:
        known.add(HASH)
    if env.server_config:
        known.add(SERVER_CONFIG)
    if env.model is not None:
        known.add(MODEL)
    if env.host is not None:
        known.add(HOST)
    if not isinstance(env.server_args, msgspec.UnsetType):
        known.add(SERVER_ARGS)
    return known


def _recorded(*pairs: tuple[str, str | None]) -> dict[str, str]:
    """The ``(key, value)`` pairs whose value was recorded (not None), in their order."""
    return {key: value for key, value in pairs if value is not None}


def flatten(env: Environment | None) -> dict[str, str]:
    """``env`` as ``key -> value`` (keys as the comparison shows them); {} for None.
    Only what was recorded: a key absent here was not known, not empty."""
    if env is None:
        return {}
    out: dict[str, str] = {}
    if env.server_version is not None:
        out[VERSION] = env.server_version
    if env.config_hash is not None:
        out[HASH] = env.config_hash
    if env.model is not None:
        m = env.model
        out["model"] = m.id
        out |= _recorded(
            ("model root", m.root),
            ("model parent", m.parent),
            ("max_model_len", None if m.max_model_len is None else str(m.max_model_len)),
        )
    out |= {f"server {key}": value for key, value in env.server_config.items()}
    if not isinstance(env.server_args, msgspec.UnsetType):
        positional, flags = launch_flags(env.server_args.argv)
        if positional:
            out[COMMAND] = command_line(positional)
        for flag, value in flags.items():
            out[f"{ARG_PREFIX}{flag}"] = value
        # The container's image, unless the host half has it already (apply --verify):
        # one image, one key.
        if env.server_args.image and (env.host is None or not env.host.container_image):
            out[IMAGE] = env.server_args.image
    host = env.host
    if host is not None:
        if host.gpus:
            out["GPUs"] = ", ".join(host.gpus)
        out |= _recorded(
            ("GPU driver", host.driver_version),
            ("CUDA (driver)", host.cuda_driver_version),
            ("kernel", host.kernel_release),
            ("container image", host.container_image),
            ("in a container", None if host.in_container is None else str(host.in_container)),
        )
        out |= {f"env {key}": value for key, value in host.env.items()}
    return out


class EnvChange(msgspec.Struct, frozen=True, kw_only=True):
    """One thing the two runs recorded differently."""

    key: str  # as flatten() names it: "server version", "env VLLM_USE_V1", ...
    before: str
    after: str


class EnvironmentComparison(msgspec.Struct, frozen=True, kw_only=True):
    """What differs between two runs' environments besides the change measured."""

    # "same" (nothing recorded differs), "one difference", "confounded" (more than one:
    # no change can be attributed to one of them), "not pinned" (a side recorded none).
    verdict: str
    differences: list[EnvChange]
    # Keys one side recorded and the other did not (e.g. a host half only one side has):
    # whether they differ is unknown.
    unknown: list[str]
    notes: list[str]  # the catalogue's sentences (checks/bench_env.toml) for the verdict
