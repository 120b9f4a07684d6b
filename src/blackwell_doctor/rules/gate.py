"""``apply --verify``'s gate: does the change keep the running container's performance?

It reads what ``bench --compare`` computed (blackwell_doctor.rules.compare: per-metric
change with a Bonferroni-adjusted bootstrap interval, output equivalence, error counts) and
decides, for the chosen metrics only:

- a regression is *significant* when the whole interval of the change lies beyond the
  allowed regression: for a lower-is-better metric (a latency) its lower bound is above
  ``+max_regression_pct``; for a higher-is-better one (tokens/s) its upper bound is below
  ``-max_regression_pct``. A point estimate past the threshold with an interval that
  reaches back inside it is noise, not a regression; a metric the compare could not put
  an interval on (too few samples, nothing measured) fails the gate: it proves nothing;
- the allowed regression is never below the noise floor measured by ``--repeat`` (the
  spread of runs of one configuration), when the compare has one: a change smaller than two
  runs of one configuration differ is not a regression. Without a measurement the gate
  keeps the allowed regression and notes that between-run noise is unknown;
- greedy outputs are equivalent: identical, or (``divergence_after``) identical on at
  least their first N characters; and no greedy prompt's log-probabilities drifted beyond
  tolerance (blackwell_doctor.rules.drift) where that divergence is not allowed;
- the new container answered every request (no errors, nothing unmeasured), and no answer
  is degenerate (empty, or one unit repeated: blackwell_doctor.rules.degenerate).

Nothing here measures or prints.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec

from blackwell_doctor.report.bench import BenchRun, Capacity, CompareDocument, Comparison
from blackwell_doctor.rules import degenerate, drift

DEFAULT_METRICS = ("itl_ms.p50", "output_tokens_per_s")
DEFAULT_SHAPE = "concurrent"


class GateSpecError(Exception):
    """A --gate-metric that names nothing measurable (one line, for the CLI)."""


@dataclass(frozen=True)
class GateMetric:
    shape: str | None  # None: the most concurrent shape measured
    metric: str

    @property
    def label(self) -> str:
        return f"{self.shape or '(most concurrent shape)'}:{self.metric}"


def parse_gate_metric(text: str, known_metrics: frozenset[str]) -> GateMetric:
    """``METRIC`` or ``SHAPE:METRIC`` (e.g. ``itl_ms.p50``, ``short:ttft_ms.p50``)."""
    shape, sep, metric = text.rpartition(":")
    if metric not in known_metrics:
        raise GateSpecError(
            f"--gate-metric {text!r}: unknown metric {metric!r}; known: "
            + ", ".join(sorted(known_metrics))
        )
    if sep and not shape:
        raise GateSpecError(f"--gate-metric {text!r}: empty shape name before ':'")
    return GateMetric(shape=shape or None, metric=metric)


class GateRow(msgspec.Struct, frozen=True, kw_only=True):
    """One gated metric: what was compared and what the gate made of it."""

    shape: str
    metric: str
    before: float | None
    after: float | None
    change_pct: float | None
    ci_low_pct: float | None
    ci_high_pct: float | None
    regression_pct: float | None  # how far the interval's best case lies past no change
    holds: bool
    reason: str
    # max(the allowed regression, the row's noise floor): what the interval is held to.
    allowed_pct: float | None = None


@dataclass(frozen=True)
class GateResult:
    holds: bool
    rows: list[GateRow] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)  # one line each
    notes: list[str] = field(default_factory=list)


def default_shape(run: BenchRun) -> str | None:
    """The shape the default metrics are judged on: ``concurrent`` when measured, else the
    measured shape with the most users."""
    names = [s.name for s in run.shapes]
    if DEFAULT_SHAPE in names:
        return DEFAULT_SHAPE
    if not run.shapes:
        return None
    return max(run.shapes, key=lambda s: s.concurrency).name


# What a gate row is of its comparison row as it is (its interval, reason and verdict are
# the gate's own).
_AS_COMPARED = ("shape", "metric", "before", "after", "change_pct")


def _row(c: Comparison, max_regression_pct: float, floor_source: str) -> GateRow:
    low, high, least = c.ci_low_pct, c.ci_high_pct, None
    # The allowed regression follows the noise floor when it is larger: a change smaller
    # than two runs of one configuration differ is not told apart from the host.
    floor = c.noise_floor_pct if floor_source == "measured" else None
    if floor is not None and c.better != "lower":
        # A floor is a ratio (larger over smaller): for a fall, a floor of 100% is -50%.
        floor = (1.0 - 1.0 / (1.0 + floor / 100.0)) * 100.0
    allowed = max_regression_pct if floor is None else max(max_regression_pct, floor)
    if floor is not None and floor > max_regression_pct:
        limit = (
            f"the allowed {allowed:.1f}% (the noise floor measured by --repeat, above "
            f"{max_regression_pct:g}%)"
        )
    else:
        limit = f"the allowed {max_regression_pct:g}%"
    if low is None or high is None or c.change_pct is None:
        low = high = None
        holds = False
        reason = f"no interval ({c.verdict}): the gate cannot tell"
    else:
        lower_better = c.better == "lower"
        # The least regression the interval allows, in percent of the before value (a
        # negative figure: the interval reaches an improvement).
        least = low if lower_better else -high
        holds = least <= allowed
        if not holds:
            direction = "slower" if lower_better else "lower"
            reason = f"significantly {direction}: at least {least:.1f}% worse, beyond {limit}"
        elif least > 0:
            reason = f"at least {least:.1f}% worse: within {limit}"
        else:
            reason = "no significant regression"
    return GateRow(
        **{name: getattr(c, name) for name in _AS_COMPARED},
        ci_low_pct=low,
        ci_high_pct=high,
        regression_pct=least,
        holds=holds,
        reason=reason,
        allowed_pct=allowed,
    )


def judge(
    doc: CompareDocument,
    after: BenchRun,
    *,
    metrics: list[GateMetric],
    max_regression_pct: float,
    divergence_after: int | None = None,
) -> GateResult:
    """The gate over ``doc`` (baseline -> new container's compare) and the new run."""
    rows: list[GateRow] = []
    failures: list[str] = []
    notes: list[str] = []
    fallback = default_shape(after)
    for gm in metrics:
        shape = gm.shape or fallback
        match = [c for c in doc.comparisons if c.shape == shape and c.metric == gm.metric]
        if not match:
            failures.append(f"{shape or '(no shape)'}:{gm.metric} was not measured in both runs")
            continue
        row = _row(match[0], max_regression_pct, doc.noise_floor_source)
        if gm.metric == CAPACITY and row.ci_low_pct is None:
            row = _capacity_bound_row(row, doc)
        rows.append(row)
        if not row.holds:
            failures.append(f"{row.shape} {row.metric}: {row.reason}")
    failures += _equivalence_failures(doc, divergence_after, notes)
    if doc.noise_floor_source != "measured" and rows:
        notes.append(
            f"between-run noise unknown ({doc.runs.get('before', 1)} run(s) before, "
            f"{doc.runs.get('after', 1)} after, no --repeat calibration): the allowed "
            f"{max_regression_pct:g}% may be inside this host's run-to-run variation"
        )
    elif rows:
        notes.append(
            "the allowed regression of each metric is at least its noise floor measured by "
            f"--repeat ({doc.between_run_noise})"
        )
    failures += errors_of(after)
    return GateResult(holds=not failures, rows=rows, failures=failures, notes=notes)


# The compare's row of two rate runs' capacity at SLO (rules/compare.py).
CAPACITY = "capacity_at_slo"


def _capacity_bound_row(row: GateRow, doc: CompareDocument) -> GateRow:
    """The capacity row when a side's capacity is a bound (rules/goodput.py: every rate met
    the SLOs, "at least" the highest; or the lowest already missed them, "below" it): no
    interval, but a drop can still be ruled out or seen. It holds when the new container's
    capacity cannot be below the baseline's: it met the SLOs at every rate measured, at
    least as high as the baseline's capacity; or the baseline missed them already at its
    lowest rate and the new container met them there; or both missed them at their lowest
    rate."""
    if isinstance(doc.sweep, msgspec.UnsetType):
        return row
    before, after = doc.sweep.before.capacity, doc.sweep.after.capacity
    if before is None or after is None or before.rate is None or after.rate is None:
        return row
    if after.bound == "at least" and after.rate >= before.rate:
        holds, reason = (
            True,
            (
                f"no drop: the new container met the SLOs at every rate measured, up to "
                f"{after.rate:.3g} req/s, at or above the baseline's capacity ({before.rate:.3g})"
            ),
        )
    elif before.bound == "below" and after.bound == "crossing" and after.rate >= before.rate:
        holds, reason = (
            True,
            (
                f"no drop: the baseline missed the SLOs already at its lowest rate (capacity "
                f"below {before.rate:.3g} req/s), the new container met them up to "
                f"{after.rate:.3g} req/s"
            ),
        )
    elif after.bound == "below" and before.bound == "below":
        holds, reason = (
            True,
            (
                "no drop measurable: both missed the SLOs already at their lowest rate "
                f"({before.rate:.3g} and {after.rate:.3g} req/s)"
            ),
        )
    elif after.bound == "below" or (before.bound == "at least" and after.rate < before.rate):
        holds, reason = (
            False,
            (
                f"capacity dropped: the new container's is {_bound_words(after)} req/s, the "
                f"baseline's {_bound_words(before)}"
            ),
        )
    else:
        return row
    return msgspec.structs.replace(row, holds=holds, reason=reason)


def _bound_words(c: Capacity) -> str:
    """``5.12``, ``at least 15.8``, ``below 5.08``."""
    return f"{c.rate:.3g}" if c.bound == "crossing" else f"{c.bound} {c.rate:.3g}"


def _equivalence_failures(
    doc: CompareDocument, divergence_after: int | None, notes: list[str]
) -> list[str]:
    out: list[str] = []
    for e in doc.equivalence:
        if e.prompts == 0:
            out.append(f"{e.shape}: greedy outputs could not be compared (none answered in both)")
            continue
        early = {
            pid: pos
            for pid, pos in e.first_divergence.items()
            if divergence_after is None or pos < divergence_after
        }
        if early:
            where = ", ".join(f"{pid} at char {pos}" for pid, pos in sorted(early.items()))
            out.append(f"{e.shape}: greedy outputs differ ({where})")
        elif e.first_divergence:
            notes.append(
                f"{e.shape}: {len(e.first_divergence)} greedy output(s) differ after their "
                f"first {divergence_after} characters (allowed by --divergence-after)"
            )
        # Log-probabilities (rules/drift.py): a token the other run did not even consider
        # fails, unless its answer's divergence is one --divergence-after allows.
        for d in e.logprobs:
            allowed = d.prompt_id in e.first_divergence and d.prompt_id not in early
            if d.verdict == drift.BEYOND and not allowed:
                out.append(f"{e.shape}: greedy log-probabilities of {d.prompt_id}: {d.why}")
    return out


def errors_of(run: BenchRun) -> list[str]:
    """Why the new container's run is not clean: unreachable, interrupted, failed requests,
    degenerate answers."""
    out: list[str] = []
    if run.server.error is not None:
        out.append(f"the new container could not be measured: {run.server.error}")
    # A rate run's loads are meant to reach past what the server serves: their failures
    # count against their goodput (the capacity at SLO), not as a broken container.
    loaded = (
        set()
        if isinstance(run.sweep, msgspec.UnsetType)
        else {p.shape for p in run.sweep.points if p.load != "synchronous"}
    )
    for s in run.shapes:
        if s.errors and s.name in loaded:
            out += degenerate.shape_findings(s)
            continue
        if s.errors:
            kinds = ", ".join(f"{k} {n}" for k, n in sorted(s.errors.items()))
            out.append(f"{s.name}: {sum(s.errors.values())} failed request(s) ({kinds})")
        elif not s.complete:
            out.append(f"{s.name}: not measured to the end")
        out += degenerate.shape_findings(s)
    return out
