"""The one error boundary: every outcome of a command becomes a documented exit code.

Usage errors (click's, and :class:`~blackwell_doctor.facts.errors.UserError` from anywhere below)
are one line and exit 2, Ctrl-C is 130, a bug is exit 4 with the path of a crash log, never
a bare traceback. This module imports no command.

Running out of memory (a MemoryError, under ``ulimit -v`` say) is a crash too, and the
handler itself needs memory to write its message and crash log: what filled memory is
usually held only by the frames the error unwound (their locals), which are cleared first,
and a reserve of address space taken at start is given back. Should the crash log still
fail, a message written in advance is printed: exit 4, never a traceback.
"""

from __future__ import annotations

import contextlib
import os
import sys
from collections.abc import Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path
from types import ModuleType
from typing import TYPE_CHECKING, Any

import typer

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.errors import UserError
from blackwell_doctor.report.exitcodes import ExitCode

if TYPE_CHECKING:
    from importlib.machinery import ModuleSpec

    from blackwell_doctor.collect.cachefile import CatalogueCache, RegexProgramCache


def _crash_log(exc: BaseException, argv: list[str] | None = None) -> Path:
    """The traceback, for a bug report: argv redacted as every other output (the message
    asks users to share this file)."""
    import datetime as dt
    import tempfile
    import traceback

    from blackwell_doctor.facts.redact import redact_argv, redact_text

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    fd, name = tempfile.mkstemp(prefix=f"{TOOL_NAME}-crash-{stamp}-", suffix=".log")
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        args = redact_argv(sys.argv[1:] if argv is None else argv)
        fh.write(f"{TOOL_NAME} {__version__}\nargv: {args!r}\n\n")
        fh.write(redact_text("".join(traceback.format_exception(exc))))
    return Path(name)


# Address space held back for the crash handler, given back when memory runs out. bytes(n)
# is calloc'd: the pages are mapped, never touched, so it costs no resident memory.
_RESERVE_BYTES = 4 << 20
_reserve: list[bytes] = []
# Written when even the crash handler ran out of memory: nothing left to format.
_OUT_OF_MEMORY = (
    f"{TOOL_NAME}: internal error: MemoryError: out of memory (no crash log could be written)\n"
)
_OUT_OF_MEMORY_BYTES = _OUT_OF_MEMORY.encode()


def _crash(exc: BaseException, argv: list[str] | None) -> int:
    """A bug: one line naming it, the crash log's path, exit 4."""
    from blackwell_doctor.facts.redact import redact_text

    path = _crash_log(exc, argv)
    message = redact_text(str(exc)) or ("out of memory" if isinstance(exc, MemoryError) else "")
    sys.stderr.write(
        f"{TOOL_NAME}: internal error: {type(exc).__name__}: {message}\n"
        f"This is a bug in {TOOL_NAME}; the details are in {path}\n"
    )
    return int(ExitCode.INTERNAL)


def _out_of_memory(exc: MemoryError, argv: list[str] | None) -> int:
    """:func:`_crash` for a MemoryError, with the memory it needs freed first: the unwound
    frames' locals (a traceback keeps its frames, and so what they held, alive) and the
    reserve."""
    _reserve.clear()
    tb = exc.__traceback__
    while tb is not None:
        with contextlib.suppress(RuntimeError):  # a frame still running (this one's caller)
            tb.tb_frame.clear()
        tb = tb.tb_next
    try:
        return _crash(exc, argv)
    except MemoryError:
        _write_out_of_memory()
        return int(ExitCode.INTERNAL)


def _write_out_of_memory() -> None:
    """:data:`_OUT_OF_MEMORY` on standard error: through ``sys.stderr`` (where a test
    captures it), else, should that need memory there is not, its bytes made in advance
    straight to file descriptor 2."""
    try:
        sys.stderr.write(_OUT_OF_MEMORY)
        sys.stderr.flush()
    except (OSError, ValueError, MemoryError):
        with contextlib.suppress(OSError):
            os.write(2, _OUT_OF_MEMORY_BYTES)


def _catalogue_cache() -> CatalogueCache:
    """The decoded shipped catalogues, read from this user's cache (collect/cachefile.py)."""
    from blackwell_doctor.collect.cachefile import CatalogueCache

    return CatalogueCache()


def _regex_programs() -> RegexProgramCache:
    """The compiled regular expressions' programs, read from this user's cache."""
    from blackwell_doctor.collect.cachefile import RegexProgramCache

    return RegexProgramCache()


# Modules msgspec's package imports that this package never uses (its YAML and TOML codecs,
# its type inspection, which only JSON Schema generation reads): loaded when first used.
_MSGSPEC_LAZY = frozenset({"msgspec.inspect", "msgspec.yaml", "msgspec.toml"})
# msgspec's helper module, which takes get_type_hints, Required and NotRequired from
# typing_extensions when it can, else from typing (msgspec/_utils.py, 0.19-0.22).
_MSGSPEC_UTILS = "msgspec._utils"


class _LeanMsgspec:
    """An import finder for the CLI's run, for msgspec's package only:

    - the modules of :data:`_MSGSPEC_LAZY` are loaded by :class:`importlib.util.LazyLoader`,
      their code run when an attribute of theirs is first read (``msgspec.json.schema``):
      ~1 ms of every command that reads facts or catalogues (docs/performance.md);
    - ``msgspec._utils`` is run with ``typing_extensions`` out of reach, so it takes
      typing's own names, as it does where typing_extensions is not installed. From Python
      3.11 they are the same: typing_extensions' get_type_hints with ``include_extras``
      (msgspec's only call) is typing's, and typing has Required and NotRequired. The
      4,400 lines of typing_extensions cost ~3 ms of each start-up that imports msgspec
      (~4% of ``python -c "import typer"``); whatever imports it later gets it as usual.

    Every other import is left to the other finders."""

    def find_spec(
        self, name: str, path: Sequence[str] | None = None, target: ModuleType | None = None
    ) -> ModuleSpec | None:
        if name not in _MSGSPEC_LAZY and name != _MSGSPEC_UTILS:
            return None
        import importlib.util
        from importlib.machinery import PathFinder

        spec = PathFinder.find_spec(name, path)
        if spec is None or spec.loader is None:
            return None
        if name == _MSGSPEC_UTILS:
            if "typing_extensions" not in sys.modules and sys.version_info >= (3, 11):
                loader: Any = _WithoutTypingExtensions(spec.loader)
                spec.loader = loader
            return spec
        spec.loader = importlib.util.LazyLoader(spec.loader)
        return spec


class _WithoutTypingExtensions:
    """A loader that runs its module with ``typing_extensions`` not importable (None in
    ``sys.modules``, which makes ``import typing_extensions`` raise ImportError), then puts
    things back."""

    def __init__(self, loader: Any) -> None:
        self._loader = loader

    def create_module(self, spec: ModuleSpec) -> ModuleType | None:
        created: ModuleType | None = self._loader.create_module(spec)
        return created

    def exec_module(self, module: ModuleType) -> None:
        absent = "typing_extensions" not in sys.modules
        if absent:
            sys.modules["typing_extensions"] = None  # type: ignore[assignment]
        try:
            self._loader.exec_module(module)
        finally:
            if absent and sys.modules.get("typing_extensions", 0) is None:
                del sys.modules["typing_extensions"]


@contextmanager
def _lean_msgspec() -> Iterator[None]:
    finder = _LeanMsgspec()
    sys.meta_path.insert(0, finder)
    try:
        yield
    finally:
        sys.meta_path.remove(finder)


def run(app: typer.Typer, argv: list[str] | None = None) -> int:
    """Run ``app`` on ``argv`` (default: the process's) and return the exit code. Standard
    output that cannot be written (``> /dev/full``, a closed pipe) is a usage error, exit 2,
    whichever writer found it (:func:`~blackwell_doctor.cli.output.checked_stdout`). Out of
    memory anywhere, the crash handler's own work included, is exit 4 with one line."""
    _reserve[:] = [bytes(_RESERVE_BYTES)]
    try:
        return _run_outermost(app, argv)
    except MemoryError:  # outside the command's boundary, or in its crash handler
        _reserve.clear()
        _write_out_of_memory()
        return int(ExitCode.INTERNAL)
    finally:
        _reserve.clear()


def _run_outermost(app: typer.Typer, argv: list[str] | None) -> int:
    from blackwell_doctor.cli.output import checked_stdout

    if sys.stderr is None:  # started with standard error closed (2>&-): messages dropped
        sys.stderr = open(os.devnull, "w", encoding="utf-8")  # noqa: SIM115
    if sys.stdout is None:  # started with standard output closed (>&-): nothing may run
        sys.stderr.write(
            f"{TOOL_NAME}: error: standard output is closed; redirect it to a file or "
            "/dev/null to discard it\n"
        )
        return int(ExitCode.USAGE)
    from blackwell_doctor.facts import regexcache
    from blackwell_doctor.ruledata import decodedcache

    decodedcache.install(_catalogue_cache)
    regexcache.install(_regex_programs)
    try:
        with checked_stdout(), _lean_msgspec():
            return _run(app, argv)
    except UserError as exc:  # what was pending at the end could not be written
        sys.stderr.write(f"{TOOL_NAME}: error: {exc}\n")
        return int(ExitCode.USAGE)
    finally:
        regexcache.flush()


def _run(app: typer.Typer, argv: list[str] | None) -> int:
    command = typer.main.get_command(app)
    try:
        # Not standalone: click returns an Exit's code instead of calling sys.exit.
        returned = command.main(args=argv, prog_name=TOOL_NAME, standalone_mode=False)
    except typer.Exit as exc:
        return int(exc.exit_code)
    except typer.TyperException as exc:  # click's usage errors: bad flag, bad value
        sys.stderr.write(f"{TOOL_NAME}: error: {' '.join(exc.format_message().split())}\n")
        return int(ExitCode.USAGE)
    except UserError as exc:
        sys.stderr.write(f"{TOOL_NAME}: error: {exc}\n")
        return int(ExitCode.USAGE)
    except (KeyboardInterrupt, typer.Abort):
        sys.stderr.write(f"{TOOL_NAME}: interrupted\n")
        return int(ExitCode.INTERRUPTED)
    except MemoryError as exc:
        return _out_of_memory(exc, argv)
    except Exception as exc:
        return _crash(exc, argv)
    if returned == ExitCode.INTERRUPTED:  # typer turns Ctrl-C into a silent Exit(130)
        sys.stderr.write(f"{TOOL_NAME}: interrupted\n")
    return returned if isinstance(returned, int) else int(ExitCode.OK)
