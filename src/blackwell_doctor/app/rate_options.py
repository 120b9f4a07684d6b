"""``bench --rate`` and ``apply --verify --rate``: the options of a run at request rates,
as given. One typed value both commands' options are read into (cli/options.py's
:func:`~blackwell_doctor.cli.options.rate_group`) and both requests carry
(:class:`~blackwell_doctor.app.bench_flow.BenchRequest`,
:class:`~blackwell_doctor.app.verify.VerifyRequest`); app/bench_flow.py's ``rates_from``
checks and reads it for both.

Importing this module costs the standard library only: the CLI declares its options with it
at start-up.
"""

from __future__ import annotations

from typing import NamedTuple


class RateOptions(NamedTuple):
    """The options as given (None: not given)."""

    rate: str | None = None  # --rate R[,R...]|sweep
    arrival: str | None = None  # constant, poisson (the default) or gamma
    burstiness: float | None = None  # gamma's shape
    slo: str | None = None  # ttft_ms:500,tpot_ms:50[,e2e_ms:...]
    slo_level_pct: float | None = None  # default checks/bench_sweep.toml's
