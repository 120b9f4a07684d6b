"""What is running now, compared with what the launch spec wants (read-only).

The comparison is field by field over what a user would call "the same container": image
id, environment, command, entrypoint, published ports, mounts, IPC mode, shared memory and
GPU requests. It serves both the plan (a diff to show) and idempotency (no change → "up to
date"). Secret values take part in the comparison but are never shown.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from blackwell_doctor.facts.redact import REDACTED, redact_value
from blackwell_doctor.recommend.launch import LaunchSpec


@dataclass(frozen=True)
class Change:
    field: str
    current: str
    wanted: str


def _env_dict(items: list[str] | None) -> dict[str, str]:
    out: dict[str, str] = {}
    for item in items or []:
        key, _, value = item.partition("=")
        out[key] = value
    return out


def _show_env(name: str, value: str | None) -> str:
    if value is None:
        return "(unset)"
    return REDACTED if redact_value(name, value) != value else value


def parse_size(text: str) -> int:
    units = {"b": 1, "k": 1 << 10, "m": 1 << 20, "g": 1 << 30}
    last = text[-1].lower()
    if last in units:
        return int(text[:-1]) * units[last]
    return int(text)


def wanted_env(spec: LaunchSpec, image_attrs: dict[str, Any]) -> dict[str, str]:
    """The container's environment as Docker will set it: the image's, overlaid by ours."""
    return {**_env_dict(image_attrs.get("Config", {}).get("Env")), **spec.env}


def _ports(attrs: dict[str, Any]) -> list[str]:
    bindings = attrs.get("HostConfig", {}).get("PortBindings") or {}
    out = []
    for container_port, hosts in sorted(bindings.items()):
        for h in hosts or []:
            out.append(f"{h.get('HostIp') or '0.0.0.0'}:{h.get('HostPort')}->{container_port}")  # noqa: S104 (shown, not bound)
    return out


def _mounts(attrs: dict[str, Any]) -> list[str]:
    out = []
    for m in attrs.get("HostConfig", {}).get("Mounts") or []:
        ro = ":ro" if m.get("ReadOnly") else ""
        out.append(f"{m.get('Type')}:{m.get('Source')}->{m.get('Target')}{ro}")
    return sorted(out)


def _gpus(attrs: dict[str, Any]) -> str:
    reqs = attrs.get("HostConfig", {}).get("DeviceRequests") or []
    caps = [c for r in reqs for group in (r.get("Capabilities") or []) for c in group]
    return "all GPUs" if "gpu" in caps else "none"


def spec_ports(spec: LaunchSpec) -> list[str]:
    return [f"{spec.bind}:{spec.host_port}->{spec.container_port}/tcp"]


def spec_mounts(spec: LaunchSpec) -> list[str]:
    return sorted(
        f"{m.type}:{m.source}->{m.target}{':ro' if m.read_only else ''}" for m in spec.mounts
    )


def diff(
    spec: LaunchSpec,
    container_attrs: dict[str, Any],
    image_id: str | None,
    image_attrs: dict[str, Any] | None,
) -> list[Change]:
    """What differs between the running container and the spec; [] means up to date.

    ``image_id``/``image_attrs`` are the wanted image's (None when it is not pulled yet)."""
    changes: list[Change] = []
    config = container_attrs.get("Config", {})
    host = container_attrs.get("HostConfig", {})
    current_image = str(container_attrs.get("Image", ""))
    if image_id is None:
        changes.append(Change("image", current_image[:19], f"{spec.image} (not pulled yet)"))
    elif current_image != image_id:
        changes.append(Change("image", current_image[:19], f"{spec.image} ({image_id[:19]})"))
    image_cfg = (image_attrs or {}).get("Config", {})
    want_cmd = spec.command or list(image_cfg.get("Cmd") or [])
    if list(config.get("Cmd") or []) != want_cmd:
        changes.append(Change("command", " ".join(config.get("Cmd") or []), " ".join(want_cmd)))
    want_ep = spec.entrypoint or list(image_cfg.get("Entrypoint") or [])
    if list(config.get("Entrypoint") or []) != want_ep:
        changes.append(
            Change("entrypoint", " ".join(config.get("Entrypoint") or []), " ".join(want_ep))
        )
    have_env = _env_dict(config.get("Env"))
    # Without the image we cannot tell its own variables from leftovers: compare ours only.
    want_env = wanted_env(spec, image_attrs) if image_attrs is not None else dict(spec.env)
    keys = set(want_env) | (set(have_env) if image_attrs is not None else set())
    for key in sorted(keys):
        if have_env.get(key) != want_env.get(key):
            changes.append(
                Change(
                    f"env {key}",
                    _show_env(key, have_env.get(key)),
                    _show_env(key, want_env.get(key)),
                )
            )
    if _ports(container_attrs) != spec_ports(spec):
        changes.append(
            Change("ports", ", ".join(_ports(container_attrs)), ", ".join(spec_ports(spec)))
        )
    if _mounts(container_attrs) != spec_mounts(spec):
        changes.append(
            Change("mounts", ", ".join(_mounts(container_attrs)), ", ".join(spec_mounts(spec)))
        )
    if host.get("IpcMode") != spec.ipc_mode:
        changes.append(Change("ipc", str(host.get("IpcMode")), spec.ipc_mode))
    if spec.sized_shm is not None and host.get("ShmSize") != parse_size(spec.sized_shm):
        changes.append(Change("shm_size", str(host.get("ShmSize")), str(parse_size(spec.shm_size))))
    want_gpus = "all GPUs" if spec.gpus else "none"
    if _gpus(container_attrs) != want_gpus:
        changes.append(Change("gpus", _gpus(container_attrs), want_gpus))
    return changes
