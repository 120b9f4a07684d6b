"""How a GPU child ends once its answer is written: :func:`leave`.

A child that returns from ``main`` through ``sys.exit`` runs the interpreter's finalisation
and then the C library's exit handlers, where libcuda and libnccl tear down the contexts,
allocations and communicators the process made. The parent waits for that exit (it reaps
the child and reads its status), so it waited for the teardown too: 100-290 ms per GPU
child on an H200 (benchmarks/device/profile36.sh: between a child's last Python exit
handler and its parent going on), for resources the kernel frees with the process anyway.
:func:`leave` flushes what the child wrote and ends the process at once (``os._exit``).

Imports the standard library only: every GPU child imports it first thing.
"""

from __future__ import annotations

import os
import sys
from typing import NoReturn

# The status the interpreter exits with when it cannot flush standard output at exit
# (Python/pylifecycle.c, Py_FinalizeEx: "exit status 120").
FLUSH_FAILED = 120


def leave(code: int) -> NoReturn:
    """Flush standard output and error, then end the process with ``code`` (FLUSH_FAILED
    instead of 0 when what it wrote could not be flushed), skipping every exit handler."""
    for stream in (sys.stdout, sys.stderr):
        try:
            if stream is not None:
                stream.flush()
        except (OSError, ValueError):  # a closed pipe (the parent gone), a closed stream
            code = code or FLUSH_FAILED
    os._exit(code)
