"""The JSON documents of a model directory (config.json, index files) decoded as the tools
that write and read them do.

msgspec decodes them (fast, and the index of a large checkpoint is megabytes). Python's
``json.dump`` writes a float that is not finite as ``NaN``, ``Infinity`` or ``-Infinity``
(``allow_nan=True`` is its default), and ``transformers`` reads them back with ``json.loads``:
NVIDIA's Nemotron-H configs carry ``"time_step_limit": [0.0, Infinity]`` (issue 34). msgspec
rejects those tokens (JSON has no such literal), so a document msgspec refuses is decoded again
by the standard library, and accepted only when one of the three constants is what made the
difference: anything else msgspec refused (a lone surrogate escape, a syntax error) keeps its
msgspec error. The caller has already capped the size; the depth is capped by both decoders
(``RecursionError``).
"""

from __future__ import annotations

import json
from typing import Any

import msgspec

from blackwell_doctor.collect.model.header import HeaderError, not_utf8

_CONSTANTS = {"NaN": float("nan"), "Infinity": float("inf"), "-Infinity": float("-inf")}


def decode_json(data: bytes) -> Any:
    """``data`` decoded; HeaderError (one line) when it is not JSON as Python writes it."""
    try:
        return msgspec.json.decode(data)
    except msgspec.DecodeError as exc:
        first = f"not valid JSON: {' '.join(str(exc).split())}"
    except UnicodeDecodeError as exc:  # msgspec raises it for a string that is not UTF-8
        raise HeaderError(f"not valid JSON: {not_utf8(data, exc)}") from None
    except RecursionError:
        raise HeaderError("nested too deeply") from None
    if not any(name.encode() in data for name in ("NaN", "Infinity")):
        raise HeaderError(first)
    seen: list[str] = []

    def constant(name: str) -> float:
        seen.append(name)
        return _CONSTANTS[name]

    try:
        doc = json.loads(data.decode("utf-8"), parse_constant=constant)
    except (ValueError, RecursionError):  # JSONDecodeError and UnicodeDecodeError are ValueErrors
        raise HeaderError(first) from None
    if not seen:
        raise HeaderError(first)
    return doc
