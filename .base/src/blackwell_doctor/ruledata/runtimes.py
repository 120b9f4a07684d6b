"""The runtime catalogue (checks/runtimes.toml, or the user's ``--catalogue FILE``).

Validated at load: a wrong field is one error line naming the file, the runtime and the
field. Nothing in the shipped catalogue is verified by this project (see the file's header).
"""

from __future__ import annotations

import re
from typing import Any

import msgspec
from packaging.specifiers import InvalidSpecifier, SpecifierSet
from packaging.version import Version

from blackwell_doctor.ruledata import validate
from blackwell_doctor.ruledata.checkdata import (
    CatalogueError,
    convert,
    parse_toml,
    read_shipped,
    shipped_source,
)

CATALOGUE_SCHEMA_VERSION = 1
# Placeholders a command argument may be (whole arguments only: no string building).
PLACEHOLDERS = frozenset(
    {
        "{model}",
        "{model_name}",
        "{tp}",
        "{port}",
        "{moe_backend}",
        # From the model's fit (--model-dir); with no model sized, the placeholder and the
        # option word before it are left out.
        "{max_model_len}",
        "{gpu_memory_utilization}",
    }
)
_ID = re.compile(r"^[a-z0-9][a-z0-9.-]{0,62}$")
# The findings a change of serving runtime can clear, and so the only ones a runtime may
# claim in `addresses`: the runtime's own kernels (its MoE GEMM tiles, its architecture
# support). Platform, driver, PCI, P2P and kernel-log findings (Xid, IOMMU faults, WSL) are
# not cleared by another image: a runtime claiming them would hide their real remedies.
RUNTIME_CLEARABLE = frozenset({"probe.tiles", "logs.moe_kernels", "logs.arch_support"})


class MoeBackend(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    sm12x: str
    default: str


class Runtime(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    title: str
    preference: int
    image: str
    digest: str = ""
    verified: bool = False
    addresses: list[str] = msgspec.field(default_factory=list)
    min_driver: str = ""
    cuda: str = ""
    flashinfer: str = ""
    entrypoint: list[str] = msgspec.field(default_factory=list)
    command: list[str] = msgspec.field(default_factory=list)
    container_port: int = 8000
    health_path: str = "/health"
    ready_log: str = ""
    jit_cache: str = ""
    host_mounts: list[str] = msgspec.field(default_factory=list)
    shm_size: str = "16g"
    source: str
    effect: str
    confidence: str
    notes: str = ""
    env: dict[str, str] = msgspec.field(default_factory=dict)
    moe_backend: MoeBackend | None = None

    @property
    def pinned(self) -> bool:
        return bool(self.digest)

    @property
    def reference(self) -> str:
        """What to pull and run: pinned by digest when the catalogue has one."""
        return f"{self.image}@{self.digest}" if self.digest else self.image

    @property
    def pin_label(self) -> str:
        return f"pinned {self.digest}" if self.digest else "unpinned"

    def addresses_finding(self, finding_id: str) -> bool:
        # Exact ids only (RUNTIME_CLEARABLE): a family prefix would take in findings that
        # another image cannot clear.
        return finding_id in self.addresses


class Catalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    schema_version: int
    runtime: list[Runtime]

    def by_id(self, runtime_id: str) -> Runtime:
        for r in self.runtime:
            if r.id == runtime_id:
                return r
        known = ", ".join(r.id for r in self.runtime)
        raise CatalogueError(f"no runtime {runtime_id!r} in the catalogue (known: {known})")

    def ordered(self) -> list[Runtime]:
        return sorted(self.runtime, key=lambda r: (r.preference, r.id))


def _check_runtime(r: Runtime) -> None:
    if not _ID.fullmatch(r.id):
        raise validate.ValidationError(f"id {r.id!r}: lower-case letters, digits, '.', '-'")
    validate.image_reference(r.image)
    if "@" in r.image:
        raise validate.ValidationError("image: put the digest in `digest`, not in `image`")
    if r.digest:
        validate.digest(r.digest)
    if r.verified and not r.digest:
        raise validate.ValidationError(
            "verified = true needs `digest` (sha256:<64 hex>): a verification applies to "
            "one image, and a tag can move to another"
        )
    for address in r.addresses:
        if address not in RUNTIME_CLEARABLE:
            raise validate.ValidationError(
                f"addresses: {address!r} is not something a runtime change can clear "
                f"(one of {', '.join(sorted(RUNTIME_CLEARABLE))}); its own check's remedy "
                "stays the action for it"
            )
    if r.min_driver:
        try:
            Version(r.min_driver)
        except ValueError:  # InvalidVersion, or a number past int()'s 4,300 digits
            raise validate.ValidationError(
                f"min_driver {r.min_driver!r} is not a version"
            ) from None
    if r.flashinfer:
        try:
            SpecifierSet(r.flashinfer)
        except InvalidSpecifier:
            raise validate.ValidationError(
                f"flashinfer {r.flashinfer!r} is not a version specifier (e.g. >=0.6.11)"
            ) from None
    for arg in [*r.entrypoint, *r.command]:
        if "\x00" in arg or "\n" in arg:
            raise validate.ValidationError("command/entrypoint: NUL or newline in an argument")
        if ("{" in arg or "}" in arg) and arg not in PLACEHOLDERS:
            raise validate.ValidationError(
                f"command argument {arg!r}: placeholders are whole arguments, one of "
                + ", ".join(sorted(PLACEHOLDERS))
            )
    validate.port(r.container_port)
    if not r.health_path.startswith("/") or any(c.isspace() for c in r.health_path):
        raise validate.ValidationError(f"health_path {r.health_path!r}: an absolute URL path")
    if r.jit_cache:
        try:
            validate.container_path(r.jit_cache)
        except validate.ValidationError as exc:
            raise validate.ValidationError(f"jit_cache: {exc}") from None
    for path in r.host_mounts:
        try:
            validate.host_mount(path)
        except validate.ValidationError as exc:
            raise validate.ValidationError(f"host_mounts: {exc}") from None
    validate.shm_size(r.shm_size)
    for name, value in r.env.items():
        validate.env_name(name)
        validate.env_value(name, value)
    if "{moe_backend}" in r.command and r.moe_backend is None:
        raise validate.ValidationError(
            "command uses {moe_backend} but [runtime.moe_backend] is missing"
        )


def parse_catalogue(text: str, *, source: str) -> Catalogue:
    return _validate(parse_toml(text, source=source), source=source)


def _validate(raw: dict[str, Any], *, source: str) -> Catalogue:
    version = raw.get("schema_version")
    if isinstance(version, int) and version > CATALOGUE_SCHEMA_VERSION:
        raise CatalogueError(
            f"{source}: schema_version {version} is newer than this tool understands "
            f"({CATALOGUE_SCHEMA_VERSION})"
        )
    catalogue = convert(raw, Catalogue, source=source)
    if not catalogue.runtime:
        raise CatalogueError(f"{source}: no [[runtime]] entry")
    seen: set[str] = set()
    for r in catalogue.runtime:
        if r.id in seen:
            raise CatalogueError(f"{source}: duplicate runtime id {r.id!r}")
        seen.add(r.id)
        try:
            _check_runtime(r)
        except validate.ValidationError as exc:
            raise CatalogueError(f"{source}: runtime {r.id!r}: {exc}") from None
    return catalogue


def load_catalogue() -> Catalogue:
    """The shipped checks/runtimes.toml. A user's ``--catalogue`` is read by the app layer
    (blackwell_doctor.collect.inputfile: bounded, a file or a pipe) and given to
    :func:`parse_catalogue`: this layer reads no file a user names."""
    return _validate(read_shipped("runtimes.toml"), source=shipped_source("runtimes.toml"))
