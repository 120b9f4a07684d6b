"""The one loader for every TOML file under ``checks/`` (and a user's ``--catalogue FILE``).

The check catalogue, the GPU table, the thresholds, the tiles, the log signatures and the
runtimes are all read here and validated into typed structs with msgspec. A problem is one
:class:`CatalogueError` line naming the file (and, from the caller, the entry and the field),
never a traceback and never a silently wrong verdict.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING, Any, TypeVar

import msgspec

from blackwell_doctor.ruledata import decodedcache
from blackwell_doctor.ruledata.resources import data_dir

if TYPE_CHECKING:
    from pathlib import Path

_T = TypeVar("_T")


class CatalogueError(Exception):
    """A data file under checks/ (or a user's catalogue) is malformed or fails validation.

    For the shipped files this is a packaging or editing bug, not user input."""


def shipped_source(name: str) -> str:
    """How errors name a shipped file: ``checks/<name>``."""
    return f"checks/{name}"


# tomllib keeps every prefix of a dotted key ``a.b.c``: its memory grows with the square of
# the parts (one 20,000-part key, 40 KB of text, took 2.4 GB). No catalogue or shapes file
# needs more than a few; a key of more parts is refused before tomllib sees it.
MAX_KEY_PARTS = 16
# Patterns compiled where used (re caches them): a cache hit parses no TOML.
_LONG_DOTTED_KEY = (
    r"(?:(?:[A-Za-z0-9_-]+|\"[^\"\n]*\"|'[^'\n]*')[ \t]*\.[ \t]*)" + f"{{{MAX_KEY_PARTS},}}"
)


def _has_long_dotted_key(text: str) -> bool:
    if text.count(".") < MAX_KEY_PARTS:
        return False
    return any(
        line.count(".") >= MAX_KEY_PARTS and re.search(_LONG_DOTTED_KEY, line)
        for line in text.split("\n")
    )


# tomllib parses nested arrays and inline tables recursively: 2,000 levels reach Python's
# recursion limit, and objects finalised at that depth then fail in their own hooks (seen:
# pytest's unraisable hook raising RecursionError). Deeper than this is refused before.
MAX_NESTING = 64
# What can hold a bracket that is no nesting: strings (multi-line first) and comments. A
# string left open runs to the end of its line (of the text, multi-line), so that no
# position is scanned twice: linear time whatever the text (the decoder then rejects it).
_TOML_TOKENS = (
    r'"""(?:[^"\\]|\\.|"(?!""))*(?:"""|\Z)|\'\'\'(?:[^\']|\'(?!\'\'))*(?:\'\'\'|\Z)'
    r'|"(?:[^"\\\n]|\\[^\n])*(?:"|$)|\'[^\'\n]*(?:\'|$)|#[^\n]*|[\[{]|[\]}]'
)


def _nesting(text: str) -> int:
    """The deepest nesting of arrays and inline tables in TOML ``text`` (table headers
    count one or two: ``[[x]]`` opens and closes)."""
    depth = deepest = 0
    for match in re.finditer(_TOML_TOKENS, text, re.DOTALL | re.MULTILINE):
        token = match.group()
        if token in ("[", "{"):
            depth += 1
            deepest = max(deepest, depth)
        elif token in ("]", "}"):
            depth -= 1
    return deepest


def parse_toml(text: str, *, source: str) -> dict[str, Any]:
    """Decode TOML text (a shipped file, a user's catalogue or shapes); ``source`` names it
    in the error. What would cost tomllib unbounded memory or recursion is refused first."""
    # A dotted key lies on one line: the regex runs only where a line has the dots for one.
    if _has_long_dotted_key(text):
        raise CatalogueError(
            f"{source}: not accepted: a dotted key of more than {MAX_KEY_PARTS} parts"
        )
    if _nesting(text) > MAX_NESTING:
        raise CatalogueError(
            f"{source}: not valid TOML: nested too deeply (more than {MAX_NESTING} levels)"
        )
    import tomllib  # ~2 ms: only where a TOML text is parsed, not on a cache hit

    try:
        return tomllib.loads(text)
    except tomllib.TOMLDecodeError as exc:
        raise CatalogueError(f"{source}: not valid TOML: {exc}") from None
    except RecursionError:  # tomllib parses nested arrays and tables recursively
        raise CatalogueError(f"{source}: not valid TOML: nested too deeply") from None


def shipped_bytes(name: str) -> bytes:
    """The bytes of the shipped ``checks/<name>`` (a built catalogue's cache key hashes them)."""
    try:
        return (data_dir("checks") / name).read_bytes()
    except OSError as exc:
        raise CatalogueError(f"{shipped_source(name)}: {exc}") from None


def stamp(path: Path) -> bytes | None:
    """What a cache key may stand on instead of ``path``'s bytes: its path, device, inode,
    size and modification and change times (what CPython checks a ``.pyc`` by, and the
    change time, which no writer can set back: an edit, a copy over it or a ``touch -d``
    is another stamp); None where it cannot be stat'ed."""
    try:
        st = path.stat()  # pathlib: rule data touches no os module (.importlinter)
    except OSError:
        return None
    head = f"{st.st_dev}:{st.st_ino}:{st.st_size}:{st.st_mtime_ns}:{st.st_ctime_ns}:"
    return head.encode() + str(path).encode("utf-8", "surrogateescape")


def shipped_stamp(name: str) -> bytes | None:
    """The :func:`stamp` of the shipped ``checks/<name>``."""
    try:
        folder = data_dir("checks")
    except OSError:
        return None
    return stamp(folder / name)


def read_shipped(name: str) -> dict[str, Any]:
    """The decoded TOML of the shipped ``checks/<name>`` (from the cache when a trusted file
    of the same content is there)."""
    source = shipped_source(name)
    data = shipped_bytes(name)
    cache = decodedcache.current()
    if cache is not None:
        # A hit is of these very bytes, which decoded when it was written: the text is only
        # made for a parse (the log catalogue's 860 kB: ~9M instructions a run, issue 36).
        hit = cache.get(name, data)
        if hit is not None:
            return hit
    try:
        # As read_text() did: universal newlines.
        text = data.decode("utf-8").replace("\r\n", "\n").replace("\r", "\n")
    except UnicodeDecodeError as exc:
        raise CatalogueError(f"{source}: {exc}") from None
    raw = parse_toml(text, source=source)
    if cache is not None:
        cache.put(name, data, raw)
    return raw


def convert(raw: Any, kind: type[_T], *, source: str) -> _T:
    """Validate decoded TOML into ``kind``; msgspec's message names the field ($.check[3].id)."""
    try:
        return msgspec.convert(raw, type=kind)
    except msgspec.ValidationError as exc:
        raise CatalogueError(f"{source}: {exc}") from None


def load_shipped(name: str, kind: type[_T]) -> _T:
    """``checks/<name>`` validated into ``kind``."""
    return convert(read_shipped(name), kind, source=shipped_source(name))
