"""Where a command's document goes: standard output or ``--output FILE``."""

from __future__ import annotations

import contextlib
import os
import stat
import sys
from pathlib import Path

from blackwell_doctor.errors import UserError


def writes_to_file(output: Path | None) -> bool:
    return output is not None and str(output) not in ("-", "/dev/stdout")


def write(text: str, output: Path | None = None) -> None:
    """Standard output, or the file ``output``.

    A regular file (or a new one) is written whole: a temporary file beside it, then a
    rename, so a reader never sees half a report; the old file's permissions are kept (and,
    written by root, its owner).
    Anything else (a device such as /dev/null, a FIFO, a terminal) is written in place and
    never replaced: renaming over /dev/null as root would destroy it.
    """
    if output is None or not writes_to_file(output):
        _write_stdout(text)
        return
    try:
        try:
            st: os.stat_result | None = os.stat(output)
        except FileNotFoundError:
            st = None
        if st is not None and not stat.S_ISREG(st.st_mode):
            with open(output, "w", encoding="utf-8") as fh:
                fh.write(text)
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
                fh.write(text)
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
    ``-o /dev/full`` is; what is left unwritten is dropped so that the interpreter's flush
    at exit does not fail a second time."""
    from blackwell_doctor.render.common import encodable

    try:
        sys.stdout.write(encodable(text, sys.stdout.encoding or "utf-8"))
        sys.stdout.flush()
    except OSError as exc:
        with contextlib.suppress(OSError, ValueError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
            os.close(devnull)
        raise UserError(f"cannot write standard output: {exc.strerror or exc}") from None


def say(line: str) -> None:
    """One line of progress or failure on standard error (apply's narration)."""
    sys.stderr.write(f"{line}\n")
    sys.stderr.flush()
