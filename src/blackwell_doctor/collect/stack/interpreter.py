"""Where another Python interpreter's packages live, asked without running any code of its
environment.

The interpreter runs :data:`PROGRAM` as ``PYTHON -I -S -B -c PROGRAM`` (``-B``: no byte-code written
into the audited environment). ``-I``: no PYTHON*
variable, no user site, neither the working directory nor the script's on sys.path. ``-S``:
the ``site`` module's start-up does not run, so no ``.pth`` file's ``import`` line and no
``sitecustomize``/``usercustomize`` is executed (``-I`` alone still runs them: a ``.pth``
in the audited site-packages would run as the auditor). The program then does what that
start-up would do to sys.path, as data: it reads the venv's ``pyvenv.cfg`` as text (beside
the interpreter or one level up, as ``site.venv`` finds it; its
``include-system-site-packages``, true when absent), asks ``site.getsitepackages`` (a pure
function of the prefixes: Debian's ``dist-packages`` included) for the venv's site
directories and, when the base's are included, the base's, and adds the directory lines of
their ``.pth`` files (read as text; the ``import`` lines are skipped, never run). Only the
standard library is imported; nothing of the environment's packages.

The child is one of :func:`~blackwell_doctor.collect.childproc.run_isolated`'s: a fresh
temporary directory, an environment of PATH and LD_LIBRARY_PATH alone, a deadline, and at
most :data:`MAX_OUTPUT_BYTES` of its output kept (past that it is killed).
"""

from __future__ import annotations

import json
import sys
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from blackwell_doctor.collect.childproc import run_isolated

DEFAULT_TIMEOUT_S = 10.0
# The answer is one JSON line of sys.path: kilobytes. Past this the child is killed.
MAX_OUTPUT_BYTES = 1 << 20

# Run by the audited interpreter (any Python 3: no f-string, no walrus). ``site`` is
# imported for getsitepackages alone: under -S its import runs nothing (its main() is
# guarded by sys.flags.no_site). sys.prefix is set to the venv (the folder above the
# interpreter's, wherever pyvenv.cfg was found), as site.venv sets it: Debian's
# getsitepackages reads it to tell a venv from the system Python.
PROGRAM = """\
import json, os, site, sys
exe_dir = os.path.dirname(os.path.abspath(sys.executable))
prefixes = [sys.prefix, sys.exec_prefix]
venv = os.path.dirname(exe_dir)
for cfg in (os.path.join(exe_dir, 'pyvenv.cfg'), os.path.join(venv, 'pyvenv.cfg')):
    if os.path.isfile(cfg):
        system = 'true'
        with open(cfg, 'rb') as f:
            text = f.read(65536).decode('utf-8', 'replace')
        for line in text.splitlines():
            key, eq, value = line.partition('=')
            if eq and key.strip().lower() == 'include-system-site-packages':
                system = value.strip().lower()
        sys.prefix = sys.exec_prefix = venv
        prefixes = [venv] + (prefixes if system == 'true' else [])
        break
path = []
for p in sys.path:
    if p and os.path.abspath(p) not in path:
        path.append(os.path.abspath(p))
done = []
for sitedir in site.getsitepackages(prefixes):
    sitedir = os.path.abspath(sitedir)
    if sitedir in done or not os.path.isdir(sitedir):
        continue
    done.append(sitedir)
    if sitedir not in path:
        path.append(sitedir)
    try:
        names = sorted(os.listdir(sitedir))
    except OSError:
        names = []
    for name in names:
        pth = os.path.join(sitedir, name)
        if not name.endswith('.pth') or name.startswith('.') or not os.path.isfile(pth):
            continue
        try:
            fd = os.open(pth, os.O_RDONLY | os.O_NONBLOCK)
            try:
                data = os.read(fd, 1048576)
            finally:
                os.close(fd)
        except OSError:
            continue
        for line in data.decode('utf-8-sig', 'replace').splitlines():
            if not line.strip() or line.startswith(('#', 'import ', 'import\\t')):
                continue
            d = os.path.abspath(os.path.join(sitedir, line.rstrip()))
            if d not in path and os.path.exists(d):
                path.append(d)
print(json.dumps({'executable': sys.executable,
                  'version': '%d.%d.%d' % sys.version_info[:3], 'path': path}))
"""


@dataclass(frozen=True)
class Interpreter:
    executable: str
    version: str
    paths: tuple[str, ...]  # sys.path: the directories importlib.metadata searches


class InterpreterError(Exception):
    """The interpreter could not be run or did not answer (one line, for the user)."""


def this_interpreter() -> Interpreter:
    return Interpreter(
        sys.executable,
        ".".join(str(n) for n in sys.version_info[:3]),
        tuple(p for p in sys.path if p),
    )


def ask_interpreter(
    python: Path,
    timeout_s: float = DEFAULT_TIMEOUT_S,
    *,
    environ: Mapping[str, str] | None = None,
) -> Interpreter:
    """The sys.path the interpreter ``python`` would start with (see the module's
    docstring); InterpreterError when it does not answer. ``environ``: where PATH and
    LD_LIBRARY_PATH come from (default: ours)."""
    result = run_isolated(
        [str(python), "-I", "-S", "-B", "-c", PROGRAM],
        timeout_s,
        max_stdout_bytes=MAX_OUTPUT_BYTES,
        environ=environ,
    )
    if result.ending == "output-limit":
        raise InterpreterError(
            f"--python {python}: printed more than {MAX_OUTPUT_BYTES >> 20} MiB "
            "(not the answer of a Python interpreter): stopped"
        )
    if result.ending == "start-failed":
        raise InterpreterError(f"--python {python}: {_not_started(python, result.start_errno)}")
    if result.ending != "exited":
        raise InterpreterError(f"--python {python}: {result.ending} after {timeout_s:g} s")
    if result.returncode != 0:
        tail = result.stderr_tail.decode("utf-8", "replace").strip().splitlines()
        raise InterpreterError(
            f"--python {python}: exited {result.returncode}" + (f": {tail[-1]}" if tail else "")
        )
    try:
        doc = json.loads(result.stdout.decode("utf-8").strip().splitlines()[-1])
        paths = tuple(str(p) for p in doc["path"] if isinstance(p, str) and p)
        return Interpreter(str(doc["executable"]), str(doc["version"]), paths)
    except (ValueError, KeyError, IndexError, TypeError, RecursionError):
        raise InterpreterError(f"--python {python}: not a Python interpreter") from None


def _not_started(python: Path, errno_: int | None) -> str:
    """Why ``python`` could not be started, in words (issue 40: a missing path read as
    "start-failed after 10 s"), from the exec's errno (execve(2))."""
    import errno
    import os

    if errno_ == errno.ENOENT:
        if os.path.islink(python):
            return "a dangling symbolic link (no such file)"
        if os.sep not in str(python):
            return "no such file (not found on PATH)"
        return "no such file"
    if errno_ in (errno.EACCES, errno.EPERM):
        if python.is_dir():
            return "a directory, not a Python interpreter"
        return "not executable (permission denied)"
    if errno_ == errno.ENOEXEC:
        return "not a program this machine can run (exec format error)"
    name = errno.errorcode.get(errno_ or 0, "unknown error")
    return f"could not be started ({name})"
