"""``bench`` and ``apply --verify``: the shapes measured and their requests, as given. One
typed value both commands' options are read into (cli/options.py's ``OptionGroup``) and both
requests carry (:class:`~blackwell_doctor.app.bench_flow.BenchRequest`,
:class:`~blackwell_doctor.app.verify.VerifyRequest`).

Importing this module costs the standard library only: the CLI declares its options with it
at start-up.
"""

from __future__ import annotations

from pathlib import Path
from typing import NamedTuple


class ShapeOptions(NamedTuple):
    """The options as given (None: not given)."""

    shapes_file: Path | None = None  # --shapes FILE: extra [shape.NAME] tables
    shape_names: list[str] | None = None  # --shape NAME, repeatable
    seed: int = 0
    requests: int | None = None  # measured requests per shape
    duration_s: float | None = None  # bench --duration: per shape
    request_timeout_s: float = 300.0

    @property
    def names(self) -> tuple[str, ...]:
        """The --shape names given, in order (none: the default shapes)."""
        return tuple(self.shape_names or ())
