"""The container to run: one value that `recommend` renders and `apply` creates.

Everything is an argument list; no shell string is built anywhere. Secret-looking
environment values (redact.py) are carried for `apply` but never rendered.
"""

from __future__ import annotations

import hashlib
import ipaddress
import re
from dataclasses import dataclass
from pathlib import PurePosixPath
from typing import Literal

import msgspec

from blackwell_doctor.facts.redact import REDACTED, redact_value
from blackwell_doctor.recommend.settings import Derived
from blackwell_doctor.ruledata import validate
from blackwell_doctor.ruledata.runtimes import Runtime

DEFAULT_NAME = "blackwell-doctor-vllm"
DEFAULT_BIND = "127.0.0.1"
DEFAULT_PORT = 8000
MODEL_TARGET = "/model"


@dataclass(frozen=True, kw_only=True)
class ContainerChoices:
    """The container's name, address, port and shared memory as the user chose them, with
    :func:`build_launch`'s defaults: the part of ``recommend``'s and ``apply``'s launch
    options that is the same as given (:class:`~blackwell_doctor.recommend.options.
    LaunchRequest`) and as checked (:class:`~blackwell_doctor.recommend.plan.LaunchOptions`)."""

    name: str = DEFAULT_NAME
    bind: str = DEFAULT_BIND
    port: int = DEFAULT_PORT
    shm_size: str | None = None


# Without --model-dir, shell and compose are written with a placeholder for the model
# directory (MODEL_DIR) and the served name (MODEL_NAME). The spec carries this sentinel path;
# only those renderers turn it into ${MODEL_DIR}, and apply refuses it (it needs a real
# directory). Its characters are all shell-safe, so shlex leaves it as it is.
MODEL_DIR_PLACEHOLDER = "/__blackwell_doctor_MODEL_DIR__"
LABEL_PREFIX = "io.github.blackwell-doctor"
LABEL_MANAGED = f"{LABEL_PREFIX}.managed"
LABEL_RUNTIME = f"{LABEL_PREFIX}.runtime"
LABEL_SPEC = f"{LABEL_PREFIX}.spec"
_MODEL_NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._-]{0,127}$")


class Mount(msgspec.Struct, frozen=True, kw_only=True):
    type: Literal["bind", "volume"]
    source: str
    target: str
    read_only: bool = False


class LaunchSpec(msgspec.Struct, frozen=True, kw_only=True):
    name: str
    runtime: str
    image: str
    pinned: bool
    entrypoint: list[str]
    command: list[str]
    env: dict[str, str]
    bind: str
    host_port: int
    container_port: int
    mounts: list[Mount]
    ipc_mode: str = "host"
    shm_size: str
    gpus: bool = True
    restart: str = "unless-stopped"
    health_path: str
    ready_log: str
    labels: dict[str, str] = msgspec.field(default_factory=dict)

    def is_secret(self, name: str) -> bool:
        value = self.env[name]
        return redact_value(name, value) != value

    def shown_env(self) -> dict[str, str]:
        """The environment as it may be printed: secret values replaced."""
        return {k: (REDACTED if self.is_secret(k) else v) for k, v in self.env.items()}

    @property
    def sized_shm(self) -> str | None:
        """The /dev/shm size to ask Docker for; None with ``ipc: host``, where the container
        shares the host's /dev/shm and a size would be ignored (and say something false)."""
        return None if self.ipc_mode == "host" else self.shm_size

    @property
    def published(self) -> str:
        host = f"[{self.bind}]" if ":" in self.bind else self.bind
        return f"{host}:{self.host_port}:{self.container_port}"


def reachable_host(bind: str) -> str:
    """Where to reach a port published on ``bind`` from this host (URL form)."""
    ip = ipaddress.ip_address(bind)
    if ip.is_unspecified:
        ip = ipaddress.ip_address("::1" if ip.version == 6 else "127.0.0.1")
    return f"[{ip}]" if ip.version == 6 else str(ip)


def model_name(model_dir: str) -> str:
    base = PurePosixPath(model_dir).name
    return base if _MODEL_NAME.fullmatch(base) else "model"


def _fill(args: list[str], values: dict[str, str | None]) -> list[str]:
    """The command with its placeholders filled; a placeholder without a value (None) is
    left out with the option word before it (``--max-model-len {max_model_len}``)."""
    out: list[str] = []
    for a in args:
        if a in values:
            value = values[a]
            if value is None:
                if out and out[-1].startswith("--"):
                    out.pop()
                continue
            out.append(value)
        else:
            out.append(a)
    return out


def spec_digest(spec: LaunchSpec) -> str:
    """A fingerprint of the definition (secret values left out: a hash of a weak secret is
    guessable), stored as a label so a later apply can tell its own containers apart."""
    shown = msgspec.structs.replace(spec, env=spec.shown_env(), labels={})
    return hashlib.sha256(msgspec.json.encode(shown)).hexdigest()[:16]


def build_launch(
    runtime: Runtime,
    derived: Derived,
    *,
    model_dir: str,
    name: str = DEFAULT_NAME,
    bind: str = DEFAULT_BIND,
    port: int = DEFAULT_PORT,
    shm_size: str | None = None,
    extra_env: dict[str, str] | None = None,
) -> LaunchSpec:
    """The container for ``runtime`` on a host with ``derived`` settings.

    Raises validate.ValidationError for a value that must not reach Docker."""
    validate.container_name(name)
    validate.host_path(model_dir)
    bind = validate.bind_address(bind)
    validate.port(port)
    size = validate.shm_size(shm_size or runtime.shm_size)
    moe = ""
    if derived.moe_backend is not None:
        moe = derived.moe_backend  # chosen for the model's quantization
    elif runtime.moe_backend is not None:
        moe = runtime.moe_backend.sm12x if derived.sm12x else runtime.moe_backend.default
    sized = derived.max_model_len is not None
    values: dict[str, str | None] = {
        "{model}": MODEL_TARGET,
        "{model_name}": model_name(model_dir),
        "{tp}": str(derived.tensor_parallel_size),
        "{port}": str(runtime.container_port),
        "{moe_backend}": moe,
        "{max_model_len}": str(derived.max_model_len) if sized else None,
        "{gpu_memory_utilization}": (
            f"{derived.gpu_memory_utilization:g}" if sized or derived.memory_budget else None
        ),
    }
    env = {**derived.env, **runtime.env}
    for key, value in (extra_env or {}).items():
        env[validate.env_name(key)] = validate.env_value(key, value)
    mounts = [Mount(type="bind", source=model_dir, target=MODEL_TARGET, read_only=True)]
    if runtime.jit_cache:
        volume = validate.volume_name(f"blackwell-doctor-jit-{runtime.id}")
        mounts.append(Mount(type="volume", source=volume, target=runtime.jit_cache))
    mounts += [
        Mount(type="bind", source=p, target=p, read_only=True)
        for p in map(validate.host_mount, runtime.host_mounts)
    ]
    spec = LaunchSpec(
        name=name,
        runtime=runtime.id,
        image=runtime.reference,
        pinned=runtime.pinned,
        entrypoint=list(runtime.entrypoint),
        command=_fill(runtime.command, values),
        env=env,
        bind=bind,
        host_port=port,
        container_port=runtime.container_port,
        mounts=mounts,
        shm_size=size,
        health_path=runtime.health_path,
        ready_log=runtime.ready_log,
    )
    labels = {
        LABEL_MANAGED: "true",
        LABEL_RUNTIME: runtime.id,
        LABEL_SPEC: spec_digest(spec),
    }
    return msgspec.structs.replace(spec, labels=labels)


def is_placeholder(spec: LaunchSpec) -> bool:
    """The spec was built without a model directory (see MODEL_DIR_PLACEHOLDER)."""
    return any(m.source == MODEL_DIR_PLACEHOLDER for m in spec.mounts)


def docker_run_argv(spec: LaunchSpec) -> list[str]:
    """``docker run`` for the spec. Environment values are not in it: ``-e NAME`` takes each
    from the caller's environment (the shell format exports them first; secrets are never
    printed, the user sets them)."""
    argv = ["docker", "run", "--detach", "--name", spec.name]
    if spec.gpus:
        argv += ["--gpus", "all"]
    argv += ["--ipc", spec.ipc_mode]
    if spec.sized_shm is not None:
        argv += ["--shm-size", spec.sized_shm]
    argv += ["--restart", spec.restart, "--publish", spec.published]
    for m in spec.mounts:
        opts = f"type={m.type},source={m.source},target={m.target}"
        argv += ["--mount", opts + (",readonly" if m.read_only else "")]
    for name in spec.env:
        argv += ["--env", name]
    for key, value in spec.labels.items():
        argv += ["--label", f"{key}={value}"]
    if spec.entrypoint:
        # docker run takes one --entrypoint word; further words go before the command.
        argv += ["--entrypoint", spec.entrypoint[0], spec.image, *spec.entrypoint[1:]]
    else:
        argv.append(spec.image)
    argv += spec.command
    return argv
