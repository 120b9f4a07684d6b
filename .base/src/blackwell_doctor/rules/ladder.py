"""``bench --compare A B C ...``: a ladder of changes, as the seed article's
"55 -> 119 -> 134 -> 142 -> 283 tok/s" table should have been (issue 21).

Each step compares a run with the one before it, and the cumulative row the first with the
last, each exactly as ``bench --compare`` of the two runs does (rules/compare.py: the same
bootstrap, noise floors and verdicts), with what else changed at the step taken from the
runs' pinned environments (rules/environment.py). A ladder of n runs makes n compares: each
is taken at confidence 1 - (1 - confidence) / n (Bonferroni again, on top of each compare's
own over its rows), so every interval of the whole table holds together at ``confidence``
and a long ladder does not find a "better" step by looking at many.
"""

from __future__ import annotations

from collections.abc import Sequence

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.bench import BenchRun, CompareDocument
from blackwell_doctor.report.bench_ladder import LADDER_SCHEMA_VERSION, LadderDocument
from blackwell_doctor.rules.compare import NotComparable, compare

MIN_RUNS = 3


def ladder(
    runs: Sequence[BenchRun],
    names: Sequence[str],
    *,
    resamples: int = 2000,
    seed: int = 0,
    confidence: float = 0.95,
    threshold_pct: float = 5.0,
    fail_on_regression_pct: float | None = None,
) -> LadderDocument:
    """The ladder of ``runs`` (named ``names``, in order): NotComparable (naming the step)
    when two runs of a step share no shape."""
    assert len(runs) == len(names) >= MIN_RUNS
    per_compare = 1.0 - (1.0 - confidence) / len(runs)

    def one(i: int, j: int, label: str) -> CompareDocument:
        try:
            return compare(
                runs[i],
                runs[j],
                before_name=names[i],
                after_name=names[j],
                resamples=resamples,
                seed=seed,
                confidence=per_compare,
                threshold_pct=threshold_pct,
                fail_on_regression_pct=fail_on_regression_pct,
            )
        except NotComparable as exc:
            raise NotComparable(f"{label}: {exc}") from None

    steps = [one(i, i + 1, f"step {i + 1}") for i in range(len(runs) - 1)]
    cumulative = one(0, len(runs) - 1, "first to last")
    regressions = [
        f"step {k} ({doc.before} -> {doc.after}): {r}"
        for k, doc in enumerate(steps, start=1)
        for r in doc.regressions
    ] + [
        f"first to last ({cumulative.before} -> {cumulative.after}): {r}"
        for r in cumulative.regressions
    ]
    code = exitcodes.ladder(steps=[d.exit_code for d in steps], cumulative=cumulative.exit_code)
    return LadderDocument(
        schema_version=LADDER_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        runs=list(names),
        confidence=confidence,
        per_compare_confidence=per_compare,
        steps=steps,
        cumulative=cumulative,
        regressions=regressions,
        exit_code=int(code),
    )
