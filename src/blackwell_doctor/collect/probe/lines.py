"""The JSON-lines codec the probe protocols use (:mod:`.protocol`, :mod:`.p2p_protocol`,
:mod:`.collective_protocol`): one line per message, and a line the parent cannot decode is
ignored, not an error; and the one message all three send alike, :class:`FatalLine`.

Imported by the children at start-up: msgspec only."""

from __future__ import annotations

from typing import Any, Generic, TypeVar

import msgspec

L = TypeVar("L")


class LineCodec(Generic[L]):
    """Encodes and decodes the lines of one protocol, whose messages are ``union``."""

    def __init__(self, union: Any) -> None:
        self._decoder: msgspec.json.Decoder[L] = msgspec.json.Decoder(union)

    def encode(self, line: L) -> bytes:
        return msgspec.json.encode(line) + b"\n"

    def decode(self, raw: bytes) -> L | None:
        """A line of the child's output, or None for anything else (garbage is ignored)."""
        try:
            return self._decoder.decode(raw)
        except msgspec.DecodeError:
            return None


class FatalLine(msgspec.Struct, frozen=True, kw_only=True, tag_field="event", tag="fatal"):
    """Nothing could run in the child (cuInit failed, no device, no NCCL, a GPU missing): a
    reason token, and the whole result is unavailable."""

    reason: str
