"""Regular expressions compiled once per interpreter build, not once per run.

``re.compile`` parses a pattern and generates its program in every process: for the ~30
patterns a ``scan-logs`` run meets (the log catalogue's two generic detectors alone are
4,500 characters) that is ~9 ms of a ~100 ms start-up (docs/performance.md). The program
is a list of integers that ``_sre.compile`` turns back into the same compiled pattern in
a few microseconds, so the CLI keeps the programs it made in one file per interpreter
build (``collect/cachefile.py``'s ``RegexProgramCache``, installed like
``ruledata/decodedcache.py``'s cache) and reads them back.

Nothing here can change what a pattern matches:

- a program is kept only after the pattern it rebuilds compares equal to what
  ``re.compile`` returned in this process (``Pattern.__eq__`` compares the flags, the
  pattern and the program itself);
- ``_sre.compile`` checks a program before it accepts it (CPython's ``_validate``), and a
  program it refuses, like a file that is not this user's own or not intact, is compiled
  again with ``re.compile``;
- without a cache installed (the library, the tests), without CPython's ``re._parser`` and
  ``re._compiler``, or with ``BLACKWELL_DOCTOR_NO_CACHE=1``, :func:`compile` is
  ``re.compile``.

The internals differ between CPython versions: 3.11 to 3.13 (3.13.5 checked) have
``re._compiler._code`` return the program as a list and ``_sre.compile`` take six
arguments; python/cpython's main returns the program with the count of its REPEAT
operations (``_CompileData``), which ``_sre.compile`` takes as a seventh (both are read
here). Whatever the version, the first compile of a process checks that a
program made here rebuilds the pattern ``re.compile`` makes (:func:`usable`); where it does
not (internals this module does not know), the store is neither read nor written and every
pattern is ``re.compile``'s, at the cost of that one check (tests/test_regexcache.py forces
it). A kept program is only ever read by the interpreter build and engine version that made
it (the cache file's key).
"""

from __future__ import annotations

import functools
import re
import sys
from collections.abc import Callable
from typing import Any, Protocol

# CPython's own compiler, which ``re`` has loaded (elsewhere every pattern goes through
# re.compile).
_sre: Any = sys.modules.get("_sre")
_compiler: Any = sys.modules.get("re._compiler")
_parser: Any = sys.modules.get("re._parser")
_INTERNALS = None not in (_sre, _compiler, _parser)

# (flags with those the pattern sets inline, program, groups - 1, group index, index group,
# what _sre.compile takes after them: the REPEAT count where it takes one)
Program = tuple[int, list[int], int, dict[str, int], list[str | None], list[int]]


class ProgramStore(Protocol):
    def load(self) -> dict[str, Program] | None:
        """The programs kept for this interpreter build, if any are and they are trusted."""

    def save(self, programs: dict[str, Program]) -> None:
        """Keep ``programs``; failing to is the store's own business."""


_FACTORY: list[Callable[[], ProgramStore]] = []
_STORE: list[ProgramStore] = []
_PROGRAMS: dict[str, Program] = {}
_STATE = {"loaded": False, "changed": False}
_USABLE: list[bool] = []  # the probe's answer, once per process (usable())


def install(factory: Callable[[], ProgramStore] | None) -> None:
    """Compile through the store ``factory`` makes (on the first compile) from now on;
    None: plain ``re.compile``."""
    _FACTORY[:] = [factory] if factory is not None else []
    _STORE.clear()
    _PROGRAMS.clear()
    _STATE.update(loaded=False, changed=False)


def usable() -> bool:
    """Whether this interpreter's internals are those this module reads: a program made
    here for a probe pattern (groups, a named group, a repeat, a back reference) rebuilds
    the pattern ``re.compile`` makes. Asked once per process."""
    if not _USABLE:
        probe = r"(?P<a>x+)(y{2,5}?|z)*\b(?P=a)"
        try:
            ok = bool(_INTERNALS) and _rebuilt(probe, _program(probe, 0)) == re.compile(probe)
        except Exception:  # an internal that is not there, or takes other arguments
            ok = False
        _USABLE.append(ok)
    return _USABLE[0]


def _store() -> ProgramStore | None:
    if not _FACTORY or not _INTERNALS or not usable():
        return None
    if not _STORE:
        _STORE.append(_FACTORY[0]())
    if not _STATE["loaded"]:
        _STATE["loaded"] = True
        _PROGRAMS.update(_STORE[0].load() or {})
    return _STORE[0]


def _program(pattern: str, flags: int) -> Program:
    """What ``re._compiler.compile`` hands to ``_sre.compile`` for ``pattern``."""
    tree = _parser.parse(pattern, flags)
    data = _compiler._code(tree, flags)
    extra: list[int] = []
    if not isinstance(data, list):  # a program with its REPEAT count (after 3.13)
        extra = [int(data.repeat_count)]
        data = data.code
    code = [int(op) for op in data]
    groupindex = dict(tree.state.groupdict)
    indexgroup: list[str | None] = [None] * tree.state.groups
    for name, index in groupindex.items():
        indexgroup[index] = name
    flags = int(flags | tree.state.flags)
    return flags, code, tree.state.groups - 1, groupindex, indexgroup, extra


def _rebuilt(pattern: str, program: Program) -> Any:
    flags, code, groups, groupindex, indexgroup, extra = program
    return _sre.compile(pattern, flags, code, groups, groupindex, tuple(indexgroup), *extra)


def compile(pattern: str, flags: int = 0) -> re.Pattern[str]:
    """``re.compile(pattern, flags)``, from the kept program when there is one."""
    flags = int(flags)
    if _store() is None:
        return re.compile(pattern, flags)
    key = f"{flags}\0{pattern!r}"  # repr: a lone surrogate (sanitize's) as an escape
    program = _PROGRAMS.get(key)
    if program is not None:
        try:
            rebuilt: re.Pattern[str] = _rebuilt(pattern, program)
        except Exception:  # a program _sre refuses: compiled again below
            del _PROGRAMS[key]
        else:
            return rebuilt
    compiled = re.compile(pattern, flags)
    try:
        made = _program(pattern, flags)
        same = _rebuilt(pattern, made) == compiled
    except Exception:  # the compiler's internals are not what this module knows: not kept
        same = False
    if same:
        _PROGRAMS[key] = made
        _STATE["changed"] = True
    return compiled


def lazy(pattern: str, flags: int = 0) -> Callable[[], re.Pattern[str]]:
    """A pattern compiled (through :func:`compile`) when first used."""
    return functools.cache(lambda: compile(pattern, flags))


def engine_version() -> str:
    """What a kept program depends on besides the Python version: the engine's own."""
    return f"{_sre.MAGIC}\0{_sre.CODESIZE}" if _INTERNALS else ""


def flush() -> None:
    """Keep the programs made in this run, if any were."""
    if _STATE["changed"] and _STORE:
        _STATE["changed"] = False
        _STORE[0].save(dict(_PROGRAMS))
