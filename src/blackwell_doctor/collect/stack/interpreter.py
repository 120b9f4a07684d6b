"""Where another Python interpreter's packages live: a child of that interpreter prints its
sys.path as JSON (``-I``: no PYTHONPATH, no user site, nothing of ours imported). Nothing of
the environment is imported. The child is one of
:func:`~blackwell_doctor.collect.childproc.run_isolated`'s: a fresh temporary directory, an
environment of PATH and LD_LIBRARY_PATH alone, a deadline, and at most
:data:`MAX_OUTPUT_BYTES` of its output kept (past that it is killed)."""

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
_PROGRAM = (
    "import json, sys; print(json.dumps({'executable': sys.executable, "
    "'version': '%d.%d.%d' % sys.version_info[:3], 'path': sys.path}))"
)


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
    """The sys.path of the interpreter ``python``; InterpreterError when it does not
    answer. ``environ``: where PATH and LD_LIBRARY_PATH come from (default: ours)."""
    result = run_isolated(
        [str(python), "-I", "-c", _PROGRAM],
        timeout_s,
        max_stdout_bytes=MAX_OUTPUT_BYTES,
        environ=environ,
    )
    if result.ending == "output-limit":
        raise InterpreterError(
            f"--python {python}: printed more than {MAX_OUTPUT_BYTES >> 20} MiB "
            "(not the answer of a Python interpreter): stopped"
        )
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
    except (ValueError, KeyError, IndexError, TypeError):
        raise InterpreterError(f"--python {python}: not a Python interpreter") from None
