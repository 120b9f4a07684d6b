"""Numerical drift of the greedy prompts between two runs, from their log-probabilities.

``bench`` asks each greedy prompt for the log-probability of every token and of the
``top_logprobs`` most likely tokens of its step (checks/drift.toml). ``bench --compare``
then measures, per prompt (:func:`prompt_drift`):

- the first divergent token: the first position whose chosen token differs; the tokens
  before it are the shared prefix;
- the mean and max ``|logprob before - logprob after|`` of the chosen token over the shared
  prefix;
- a top-k estimate of ``KL(before || after)`` at each step whose context is the same (the
  shared prefix and the divergent step): the distributions are coarsened to the before
  run's top-k tokens and one bucket for everything else. A token missing from the after
  run's top-k is given the after run's smallest top-k probability (the most it can have),
  and the rest bucket what is left of each. Coarsening never adds divergence (the
  data-processing inequality, Cover and Thomas, Elements of Information Theory, 2nd ed.,
  theorem 2.8.1), so with exact values this is a lower bound of the step's KL; it is
  clipped at 0.

The verdict follows vLLM's check_logprobs_close (checks/drift.toml gives the source).
Nothing here measures or prints.
"""

from __future__ import annotations

import functools
import math
import statistics
from collections.abc import Sequence
from typing import Annotated

import msgspec

from blackwell_doctor.report.bench import LogprobDrift, ShapeResult, TokenLogprob
from blackwell_doctor.ruledata.checkdata import load_shipped

IDENTICAL = "identical"
WITHIN = "within tolerance"
BEYOND = "beyond tolerance"
NOT_MEASURED = "not measured"
# From the least to the most severe: a shape's (and a compare's) verdict is its worst.
_ORDER = (NOT_MEASURED, IDENTICAL, WITHIN, BEYOND)
# A probability this small stands for "none" in the rest bucket (log of 0 is undefined).
_TINY = 1e-12


class DriftRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    top_logprobs: Annotated[int, msgspec.Meta(ge=1, le=20)]
    identical_max_abs: Annotated[float, msgspec.Meta(ge=0)]


class DriftCatalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    drift: DriftRules


@functools.cache
def load_rules() -> DriftRules:
    """``checks/drift.toml``."""
    return load_shipped("drift.toml", DriftCatalogue).drift


def _step(t: TokenLogprob) -> dict[str, float]:
    """A step's known log-probabilities by token: its top-k and the chosen token."""
    out = {c.token: c.logprob for c in t.top}
    if t.logprob is not None:
        out.setdefault(t.token, t.logprob)
    return out


def topk_kl(before: TokenLogprob, after: TokenLogprob) -> float | None:
    """The top-k estimate of KL(before || after) at one step, in nats (the module's
    docstring says how); None when either step has no log-probabilities."""
    p, q = _step(before), _step(after)
    if not p or not q:
        return None
    floor_q = min(q.values())
    kl = 0.0
    p_mass = q_mass = 0.0
    for token, lp in p.items():
        lq = q.get(token, floor_q)
        prob = math.exp(lp)
        kl += prob * (lp - lq)
        p_mass += prob
        q_mass += math.exp(lq)
    p_rest = 1.0 - p_mass
    if p_rest > _TINY:
        q_rest = max(_TINY, 1.0 - q_mass)
        kl += p_rest * (math.log(p_rest) - math.log(q_rest))
    return max(0.0, kl)


def prompt_drift(
    prompt_id: str, before: Sequence[TokenLogprob], after: Sequence[TokenLogprob]
) -> LogprobDrift:
    """One greedy prompt's drift between two runs' answers (both with log-probabilities)."""
    rules = load_rules()
    n = min(len(before), len(after))
    diverge = next((i for i in range(n) if before[i].token != after[i].token), None)
    shared = n if diverge is None else diverge
    diffs = [
        abs(b.logprob - a.logprob)
        for b, a in zip(before[:shared], after[:shared], strict=True)
        if b.logprob is not None and a.logprob is not None
    ]
    kls = [
        kl
        for b, a in zip(before[: min(n, shared + 1)], after[: min(n, shared + 1)], strict=True)
        if (kl := topk_kl(b, a)) is not None
    ]
    mean_abs = statistics.fmean(diffs) if diffs else None
    max_abs = max(diffs) if diffs else None
    if diverge is None:
        if (max_abs or 0.0) <= rules.identical_max_abs and max(kls, default=0.0) <= 0.0:
            verdict, why = IDENTICAL, f"all {n} tokens and their log-probabilities agree"
        else:
            verdict = WITHIN
            why = f"all {n} tokens agree; their log-probabilities differ (max {max_abs or 0:.3g})"
    else:
        b, a = before[diverge], after[diverge]
        in_after = b.token in {c.token for c in a.top}
        in_before = a.token in {c.token for c in b.top}
        if in_after and in_before:
            verdict = WITHIN
            why = (
                f"token {diverge} differs ({b.token!r} -> {a.token!r}), each among the "
                f"other's top {rules.top_logprobs}: a near-tie broken the other way"
            )
        else:
            verdict = BEYOND
            missing = [
                f"{tok!r} is not in the {side} run's top {rules.top_logprobs}"
                for tok, side, ok in ((b.token, "after", in_after), (a.token, "before", in_before))
                if not ok
            ]
            why = f"token {diverge} differs: " + "; ".join(missing)
    return LogprobDrift(
        prompt_id=prompt_id,
        tokens=n,
        first_divergent_token=diverge,
        token_before=None if diverge is None else before[diverge].token,
        token_after=None if diverge is None else after[diverge].token,
        mean_abs_logprob_diff=mean_abs,
        max_abs_logprob_diff=max_abs,
        topk_kl_mean=statistics.fmean(kls) if kls else None,
        topk_kl_max=max(kls) if kls else None,
        verdict=verdict,
        why=why,
    )


def shape_drift(before: ShapeResult, after: ShapeResult) -> tuple[list[LogprobDrift], str]:
    """Every greedy prompt both runs answered with log-probabilities, and the worst verdict
    ("not measured" when there is none)."""
    b = {e.prompt_id: e for e in before.equivalence if e.ok and e.logprobs}
    a = {e.prompt_id: e for e in after.equivalence if e.ok and e.logprobs}
    rows = []
    for pid in sorted(set(b) & set(a)):
        lb, la = b[pid].logprobs, a[pid].logprobs
        assert lb is not None
        assert la is not None
        rows.append(prompt_drift(pid, lb, la))
    return rows, worst([r.verdict for r in rows])


def worst(verdicts: Sequence[str]) -> str:
    """The most severe of ``verdicts`` ("not measured" when there is none)."""
    return max(verdicts, key=_ORDER.index, default=NOT_MEASURED)
