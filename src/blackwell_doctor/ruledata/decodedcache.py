"""Where the decoded shipped catalogues may come from instead of a TOML parse.

A cache reads and writes files (collect/cachefile.py's ``CatalogueCache``); this layer
reads no environment, so the CLI installs one at start-up and checkdata.read_shipped asks
it. A hit costs a MessagePack decode instead of tomllib's pure-Python parse (~20 ms of
every check's start-up for the seven files it reads, ~15 ms for the log catalogue). This
module imports nothing heavy: installing the cache costs a command that reads no
catalogue nothing.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol


class DecodedCache(Protocol):
    def get(self, name: str, data: bytes) -> dict[str, Any] | None:
        """The decoding of ``data`` (the shipped ``name``) if one is cached and trusted."""

    def put(self, name: str, data: bytes, raw: dict[str, Any]) -> None:
        """Keep ``raw``, the decoding of ``data``; failing to is the cache's own business."""

    def get_built(self, name: str, inputs: tuple[bytes, ...]) -> bytes | None:
        """The payload kept for the catalogue ``name`` built from ``inputs`` (its files'
        bytes and the source of the code that builds it), if one is kept and trusted."""

    def put_built(self, name: str, inputs: tuple[bytes, ...], payload: bytes) -> None:
        """Keep ``payload``, what the catalogue ``name`` built from ``inputs`` encodes to;
        failing to is the cache's own business."""


_FACTORY: list[Callable[[], DecodedCache]] = []
_MADE: list[DecodedCache] = []


def install(factory: Callable[[], DecodedCache] | None) -> None:
    """Read the shipped files through the cache ``factory`` makes (on the first read: a
    command that reads no catalogue imports no cache) from now on; None: parse them."""
    _FACTORY[:] = [factory] if factory is not None else []
    _MADE.clear()


def current() -> DecodedCache | None:
    if not _FACTORY:
        return None
    if not _MADE:
        _MADE.append(_FACTORY[0]())
    return _MADE[0]
