"""``python -m blackwell_doctor`` and the ``blackwell-doctor`` console script.

Start-up pauses the cyclic garbage collector: importing the CLI and the command that runs
allocates tens of thousands of objects that all stay alive (modules, classes, functions),
and each of the collections they set off walks them all to free nothing (about 15 ms of a
~110 ms ``check --facts``: docs/performance.md). Once the command is registered, what was
allocated is frozen (``gc.freeze``: never scanned again) and the collector resumes for
the command itself, so a long ``bench`` or ``fleet`` run collects its cycles as before.
"""

from __future__ import annotations

import gc


def main() -> int:
    """Entry point: the CLI, started with the collector paused."""
    gc.disable()
    try:
        from blackwell_doctor.cli import main as cli_main
    except BaseException:
        gc.enable()
        raise
    return cli_main(gc_paused=True)


if __name__ == "__main__":
    raise SystemExit(main())
