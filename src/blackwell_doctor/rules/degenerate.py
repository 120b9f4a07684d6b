"""Degenerate answers: an empty answer, or one unit said again and again.

A server can answer every request quickly and still be broken: a kernel that writes garbage
logits under CUDA graphs makes every token the same one (the ``!!!!`` of FlashInfer issue
#4841). ``bench`` judges each successful request of every shape and each greedy equivalence
answer with :func:`judge`; a degenerate answer is a finding that fails ``bench`` and the
``apply --verify`` gate (:func:`shape_findings`). The thresholds and their source are in
``checks/degenerate.toml``.

Nothing here measures or prints.
"""

from __future__ import annotations

import functools
import math
import operator
import re
from typing import Annotated

import msgspec

from blackwell_doctor.report.bench import ShapeResult
from blackwell_doctor.ruledata.checkdata import load_shipped

# The text a degenerate request's evidence quotes, at most.
_QUOTE_CHARS = 8


class DegenerateRules(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    min_repeats: Annotated[int, msgspec.Meta(ge=2)]
    min_share: Annotated[float, msgspec.Meta(gt=0, le=1)]
    max_unit_chars: Annotated[int, msgspec.Meta(ge=1, le=64)]


class DegenerateCatalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    degenerate: DegenerateRules


@functools.cache
def load_rules() -> DegenerateRules:
    """``checks/degenerate.toml``."""
    return load_shipped("degenerate.toml", DegenerateCatalogue).degenerate


def longest_repeat(text: str, max_unit: int) -> tuple[str, int]:
    """The unit of 1..``max_unit`` characters whose back-to-back repetition covers the most
    of ``text``, and how many times it is repeated there ("", 0 for an empty text).

    For each unit length u, ``same[i]`` says whether ``text[i + u] == text[i]`` (one pass in
    C: ``map(operator.eq)`` into bytes); a run of L such positions from i makes
    ``text[i : i + u + L]`` the unit ``text[i : i + u]`` said again, ``(u + L) // u`` times.
    The first longest cover wins (shortest unit, then earliest). Every answer of every shape
    is judged: a character-by-character walk took ~1.2 ms of CPU per 128-token answer, this
    ~0.2 ms (benchmarks/bench_client.py's answers)."""
    best_unit, best_repeats, best_cover = "", 0, 0
    for u in range(1, min(max_unit, len(text)) + 1):
        same = bytes(map(operator.eq, text[u:], text))
        for run in _runs(u).finditer(same):
            repeats = (run.end() - run.start() + u) // u
            if repeats * u > best_cover:
                start = run.start()
                best_unit, best_repeats, best_cover = text[start : start + u], repeats, repeats * u
    if not best_unit and text:
        return text[0], 1
    return best_unit, best_repeats


@functools.cache
def _runs(unit: int) -> re.Pattern[bytes]:
    """At least ``unit`` positions in a row whose character equals the one ``unit`` before:
    the unit said at least twice."""
    return re.compile(b"\x01{%d,}" % unit)


def _may_repeat(text: str, rules: DegenerateRules) -> bool:
    """False when no unit's run can cover min_share of ``text``: a quick test that spares
    most answers :func:`longest_repeat`.

    A run covering c >= min_share x n of the n characters, wherever it starts, contains the
    stretch ``text[n - c : c]``, and a run of a unit of u characters repeats with period u
    (``s[u:] == s[:-u]`` of any stretch inside it). With min_share above 1/2 that stretch
    of the shortest such cover is not empty: when it has no period up to max_unit_chars,
    no run covers enough."""
    n = len(text)
    least = math.ceil(rules.min_share * n)  # the shortest cover share() accepts
    while least > 0 and (least - 1) / n >= rules.min_share:
        least -= 1
    while least / n < rules.min_share:
        least += 1
    middle = text[n - least : least]
    if len(middle) <= rules.max_unit_chars:
        return True
    return any(middle[u:] == middle[:-u] for u in range(1, rules.max_unit_chars + 1))


def judge(text: str, reasoning: str, *, tokens_asked: bool) -> str | None:
    """Why this answer is degenerate (one line), or None when it is not."""
    if not text.strip() and not reasoning.strip():
        return "empty answer (no text and no reasoning)" if tokens_asked else None
    rules = load_rules()
    joined = "".join(text.split()) + "".join(reasoning.split())
    if not _may_repeat(joined, rules):
        return None
    unit, repeats = longest_repeat(joined, rules.max_unit_chars)
    share = len(unit) * repeats / len(joined)
    if repeats < rules.min_repeats or share < rules.min_share:
        return None
    quote = unit[:_QUOTE_CHARS]
    return (
        f"{quote!r} repeated {repeats} times in a row ({share:.0%} of the answer, "
        "whitespace removed)"
    )


def shape_findings(shape: ShapeResult) -> list[str]:
    """One line per shape with degenerate answers: how many, and the first one's evidence."""
    out: list[str] = []
    bad = [(i, s.degenerate) for i, s in enumerate(shape.samples) if s.degenerate]
    judged = sum(1 for s in shape.samples if s.ok)
    if bad:
        index, why = bad[0]
        out.append(
            f"{shape.name}: {len(bad)} of {judged} answers degenerate (request {index + 1}: {why})"
        )
    greedy = [(e.prompt_id, e.degenerate) for e in shape.equivalence if e.degenerate]
    if greedy:
        pid, why = greedy[0]
        out.append(
            f"{shape.name}: {len(greedy)} of {len(shape.equivalence)} greedy answers "
            f"degenerate ({pid}: {why})"
        )
    return out
