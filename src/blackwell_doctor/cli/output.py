"""Where a command's document goes: standard output or ``--output FILE``."""

from __future__ import annotations

import contextlib
import io
import os
import stat
import sys
from collections.abc import Iterable, Iterator
from pathlib import Path
from typing import TYPE_CHECKING

from blackwell_doctor.facts.errors import UserError

if TYPE_CHECKING:
    from _typeshed import ReadableBuffer


def writes_to_file(output: Path | None) -> bool:
    return output is not None and str(output) not in ("-", "/dev/stdout")


def write(text: str, output: Path | None = None) -> None:
    """:func:`write_parts` of one text."""
    write_parts((text,), output)


def write_parts(parts: Iterable[str], output: Path | None = None) -> None:
    """Standard output, or the file ``output``: ``parts`` one after the other (a document
    too large to hold whole is written as it is made: render/common.py's json_chunks).

    A regular file (or a new one) is written whole: a temporary file beside it, then a
    rename, so a reader never sees half a report; the old file's permissions are kept (and,
    written by root, its owner).
    Anything else (a device such as /dev/null, a FIFO, a terminal) is written in place and
    never replaced: renaming over /dev/null as root would destroy it.
    """
    if output is None or not writes_to_file(output):
        for text in parts:
            _write_stdout(text)
        return
    try:
        try:
            st: os.stat_result | None = os.stat(output)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(output, "w", encoding="utf-8") as fh:
                fh.writelines(parts)
            return
        import tempfile

        target = output.resolve()
        if st is not None:
            mode = stat.S_IMODE(st.st_mode)
        else:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        fd, tmp = tempfile.mkstemp(prefix=f".{target.name}.", dir=target.parent)
        try:
            with os.fdopen(fd, "w", encoding="utf-8") as fh:
                fh.writelines(parts)
            if st is not None and os.geteuid() == 0:
                # root writing onto a user's report: it stays theirs, not root's.
                os.chown(tmp, st.st_uid, st.st_gid)
            os.chmod(tmp, mode)
            os.replace(tmp, target)
        except BaseException:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
            raise
    except OSError as exc:
        raise UserError(f"cannot write {output}: {exc.strerror or exc}") from None


def text_style(output: Path | None) -> tuple[bool, int]:
    """(colour, width) of a text report written to ``output``: colour only on a terminal and
    without ``NO_COLOR`` (no-color.org: set to a non-empty value); the terminal's width
    (``COLUMNS``, else the terminal's, never under 40), 100 in pipes and files."""
    import shutil

    if writes_to_file(output):
        return False, 100
    color = sys.stdout.isatty() and not os.environ.get("NO_COLOR")
    return color, max(40, shutil.get_terminal_size((100, 24)).columns)


def on_terminal(output: Path | None) -> bool:
    """Whether a command's document goes to a terminal (not to a pipe nor a file)."""
    return not writes_to_file(output) and sys.stdout.isatty()


def terminal_width(output: Path | None) -> int | None:
    """The width a command's terminal view is fitted to (issue 40): the terminal's
    (``COLUMNS``, else the terminal's size, never under 40) when standard output is a
    terminal or ``COLUMNS`` is set; ``None``, not fitted, in pipes and files, whose text
    stays as it was before views were fitted (``check`` keeps its 100: :func:`text_style`)."""
    import shutil

    if writes_to_file(output) or not (on_terminal(output) or os.environ.get("COLUMNS")):
        return None
    return max(40, shutil.get_terminal_size((100, 24)).columns)


def write_outcome(text: str, output: Path | None, *, failed: str | None) -> None:
    """:func:`write`, except that a command that failed (``failed``: why) leaves an existing
    ``--output`` file as it was: a report of nothing must not replace a good one. Standard
    output still gets the document."""
    if failed is not None and writes_to_file(output):
        from blackwell_doctor import TOOL_NAME

        sys.stderr.write(f"{TOOL_NAME}: {output} not written: {failed}\n")
        return
    write(text, output)


def _write_stdout(text: str) -> None:
    """Standard output in its own encoding (ASCII glyphs where it cannot take others). One
    that cannot be written (``> /dev/full``, a closed pipe) is a usage error, exit 2, as
    ``-o /dev/full`` is (see :func:`checked_stdout`)."""
    from blackwell_doctor.render.common import encodable

    try:
        sys.stdout.write(encodable(text, sys.stdout.encoding or "utf-8"))
        sys.stdout.flush()
    except OSError as exc:  # standard output not under checked_stdout (in-process callers)
        raise _unwritable(exc) from None


def _unwritable(exc: OSError) -> UserError:
    """The usage error for standard output that cannot be written. What is left unwritten
    is dropped (standard output now goes to /dev/null) so that a later flush, the
    interpreter's at exit included, does not fail a second time."""
    with contextlib.suppress(OSError, ValueError):
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.__stdout__.fileno() if sys.__stdout__ else 1)
        os.close(devnull)
    return UserError(f"cannot write standard output: {exc.strerror or exc}")


class _CheckedBuffer(io.BufferedWriter):
    """Standard output's buffer: a write or flush that fails raises the usage error, from
    whichever writer it came (ours, click's help, rich's console, the final flush)."""

    def write(self, buffer: ReadableBuffer, /) -> int:
        try:
            return super().write(buffer)
        except OSError as exc:
            raise _unwritable(exc) from None

    def flush(self) -> None:
        try:
            super().flush()
        except OSError as exc:
            raise _unwritable(exc) from None


@contextlib.contextmanager
def checked_stdout() -> Iterator[None]:
    """While a command runs, the process's standard output is checked: a write that fails
    (``> /dev/full``: ENOSPC; a closed pipe: EPIPE) is a one-line usage error, exit 2,
    whoever wrote, never an internal error. What is pending is flushed on the way out,
    inside the check. Standard output that is not the process's own (a test's capture) is
    left as it is."""
    original = sys.stdout
    if original is not sys.__stdout__ or original is None or not original.writable():
        yield
        return
    try:
        original.flush()
        raw = io.FileIO(original.fileno(), "w", closefd=False)
    except (OSError, ValueError, io.UnsupportedOperation):
        yield
        return
    checked = io.TextIOWrapper(
        _CheckedBuffer(raw),
        encoding=original.encoding,
        errors=original.errors,
        line_buffering=original.line_buffering,
    )
    sys.stdout = checked
    try:
        yield
        checked.flush()
    finally:
        sys.stdout = original
        with contextlib.suppress(Exception):
            checked.flush()


def say(line: str) -> None:
    """One line of progress or failure on standard error (apply's narration)."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
