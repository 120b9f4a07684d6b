"""The user's launch choices as :class:`~blackwell_doctor.recommend.plan.LaunchOptions`, and
where the model directory is.

A launch derived from this host's facts runs here, so ``--model-dir`` must be a directory
here (resolved to an absolute path). With ``--facts`` from another node the launch runs on
that node and the directory lives there: nothing can be checked from here but its form, an
absolute path.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.recommend.launch import ContainerChoices

if TYPE_CHECKING:
    from blackwell_doctor.recommend.plan import LaunchOptions


def model_location(model_dir: Path | None, *, on_this_host: bool) -> str | None:
    """``--model-dir`` as the launch mounts it (see the module's docstring)."""
    if model_dir is None:
        return None
    if on_this_host:
        if not model_dir.is_dir():
            raise UserError(f"--model-dir {model_dir} is not a directory")
        return str(model_dir.resolve())
    if not model_dir.is_absolute():
        raise UserError(
            f"--model-dir {model_dir}: with --facts give the absolute path on that host"
        )
    return str(model_dir)


def env_pairs(values: Sequence[str], environ: Mapping[str, str]) -> tuple[tuple[str, str], ...]:
    """``--env NAME=VALUE`` as given; ``--env NAME`` takes the value from ``environ``."""
    from blackwell_doctor.ruledata import validate

    pairs: list[tuple[str, str]] = []
    for item in values:
        name, sep, value = item.partition("=")
        if not sep:
            if name not in environ:
                raise UserError(f"--env {name}: not set in this environment")
            value = environ[name]
        try:  # checked here, not only when a launch is built: with or without --model-dir
            validate.env_value(validate.env_name(name), value)
        except validate.ValidationError as exc:
            raise UserError(f"--env: {exc}") from None
        pairs.append((name, value))
    return tuple(pairs)


@dataclass(frozen=True, kw_only=True)
class LaunchRequest(ContainerChoices):
    """``recommend``'s and ``apply``'s launch options as given: checked, and the environment
    read, by :func:`launch_options`."""

    model_dir: Path | None = None
    runtime: str | None = None
    env: Sequence[str] = ()


def launch_options(
    request: LaunchRequest, *, environ: Mapping[str, str], on_this_host: bool
) -> LaunchOptions:
    """The choices of ``recommend``/``apply``; ``on_this_host``: the launch is for this
    machine (no ``--facts``, or ``apply``, which always runs here)."""
    from blackwell_doctor.recommend.plan import LaunchOptions

    return LaunchOptions(
        model_dir=model_location(request.model_dir, on_this_host=on_this_host),
        runtime_id=request.runtime,
        name=request.name,
        bind=request.bind,
        port=request.port,
        shm_size=request.shm_size,
        extra_env=env_pairs(request.env, environ),
    )
