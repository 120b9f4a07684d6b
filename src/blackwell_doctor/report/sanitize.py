"""Text from outside (other hosts' facts, logs, file names, servers) made safe to show: the
primitives of the renderers' one sanitising step (``render`` applies them per format,
through :func:`scrub`, before any renderer sees a document)."""

from __future__ import annotations

import enum
import functools
import re
import sys
from collections.abc import Callable
from typing import Any, TypeVar, cast

import msgspec

from blackwell_doctor.facts import regexcache

# What must not reach a reader as it is: control characters other than newline and tab
# (C0, DEL, C1: an escape sequence must not recolour or rewrite the operator's terminal,
# CWE-150), bidirectional overrides and isolates (they reorder what is shown, CVE-2021-42574),
# lone surrogates (undecodable bytes of a file name or variable, kept by Python's
# surrogateescape: not encodable as UTF-8) and U+FFFE/U+FFFF (XML 1.0 forbids them, as it
# does the C0 controls). Results quote log lines, file names and other hosts' facts.
# The patterns compile when first used (~1 ms at start-up: a report with nothing to clean
# never needs them; docs/performance.md).
_UNSAFE = (
    "[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069\ud800-\udfff\ufffe\uffff]"
)
_SURROGATE = "[\ud800-\udfff]"


@functools.cache
def _compiled(pattern: str) -> re.Pattern[str]:
    return regexcache.compile(pattern)


def _shown(match: re.Match[str]) -> str:
    code = ord(match.group())
    if 0xDC80 <= code <= 0xDCFF:  # surrogateescape: the undecodable byte itself
        return f"\\x{code - 0xDC00:02x}"
    return f"\\x{code:02x}" if code < 0x100 else f"\\u{code:04x}"


def sanitize(text: str) -> str:
    """``text`` fit for a terminal, Markdown or XML: every unsafe character (above) shown
    as ``\\xNN`` or ``\\uNNNN``; newline and tab kept."""
    return _compiled(_UNSAFE).sub(_shown, text)


def sanitize_line(text: str) -> str:
    """:func:`sanitize`, and a newline shown as ``\\n``: for values that are one line (a
    host name, a file name, an id), where a newline would forge a line of the report."""
    return sanitize(text).replace("\n", "\\n")


def json_safe(text: str) -> str:
    """``text`` that JSON encoders accept: lone surrogates shown as :func:`sanitize` shows
    them (JSON escapes everything else itself)."""
    return _compiled(_SURROGATE).sub(_shown, text)


T = TypeVar("T")


# What each cleaner would change, as msgspec's JSON shows it: C0 controls are escaped
# (``\b \f \n \r \t \u00XX``), everything else is written as UTF-8, and a lone surrogate
# cannot be encoded at all. A literal backslash before one of these letters matches too:
# that document is only walked, as one with something to clean is. Keep it in step with
# _UNSAFE (tests/test_scrub.py tries every character to U+2100 and the specials past it).
_SHOWN_UNSAFE = (
    rb"\x7f|\xc2[\x80-\x9f]|\xe2\x80[\x8e\x8f\xaa-\xae]|\xe2\x81[\xa6-\xa9]|\xef\xbf[\xbe\xbf]"
)
_ENCODED_UNSAFE: dict[Callable[[str], str], bytes | None] = {
    json_safe: None,  # only lone surrogates, which fail the encoding
    sanitize: rb"\\[bfru]|" + _SHOWN_UNSAFE,
    sanitize_line: rb"\\[bfnru]|" + _SHOWN_UNSAFE,
}


def _nothing_to_clean(document: object, clean: Callable[[str], str]) -> bool:
    """Whether ``clean`` would leave every string of ``document`` as it is, told from its
    JSON in one pass of msgspec instead of a walk in Python (a fleet's thousands of nodes);
    False when unsure (another cleaner, a type JSON does not take)."""
    if clean not in _ENCODED_UNSAFE:
        return False
    try:
        encoded = msgspec.json.encode(document)
    except (TypeError, ValueError, OverflowError):  # a surrogate: UnicodeEncodeError
        return False
    pattern = _ENCODED_UNSAFE[clean]
    if pattern is None or (encoded.isascii() and b"\\" not in encoded and b"\x7f" not in encoded):
        return True
    return re.search(pattern, encoded) is None  # re's own cache keeps it compiled


def scrub(document: T, clean: Callable[[str], str]) -> T:
    """``document`` (msgspec structs, lists, tuples, dicts) with ``clean`` applied to every
    string in it, keys included: the one sanitising step at a renderer's boundary, so that
    no field can be forgotten. Enum members are the tool's own words and stay as they are;
    parts that need no change are shared, not copied (a document with nothing to change is
    returned as it is)."""
    if _nothing_to_clean(document, clean):
        return document
    return _scrub(document, clean)


def _scrub(document: T, clean: Callable[[str], str]) -> T:
    if isinstance(document, str):
        if isinstance(document, enum.Enum):
            return document
        return cast(T, clean(document))
    if isinstance(document, msgspec.Struct):
        changes: dict[str, Any] = {}
        for name in document.__struct_fields__:
            value = getattr(document, name)
            new = _scrub(value, clean)
            if new is not value:
                changes[name] = new
        return msgspec.structs.replace(document, **changes) if changes else document
    if isinstance(document, list | tuple):
        items = [_scrub(x, clean) for x in document]
        if all(a is b for a, b in zip(items, document, strict=True)):
            return document
        return cast(T, items if isinstance(document, list) else tuple(items))
    if isinstance(document, dict):
        pairs = {_scrub(k, clean): _scrub(v, clean) for k, v in document.items()}
        if all(k in document and document[k] is v for k, v in pairs.items()):
            return document
        return cast(T, pairs)
    # A measured shape's samples held as columns (only once their module is loaded).
    tables = sys.modules.get("blackwell_doctor.report.sample_table")
    if tables is not None and isinstance(document, tables.SampleTable):
        if all(clean(text) == text for text in document.strings()):
            return document
        return cast(T, document.scrubbed(clean))
    return document
