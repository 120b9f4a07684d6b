"""Where checks register: ``@check("id", reads=...)`` on each check's logic.

Apart from the engine so that the check modules do not import the engine, whose
:func:`~blackwell_doctor.rules.engine.registered_checks` imports every check module (that
was an import cycle).
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import TypeVar, get_args

from blackwell_doctor.facts.document import Facts, Section
from blackwell_doctor.report.results import Outcome
from blackwell_doctor.ruledata.rules import RuleData

CheckFn = Callable[[Facts, RuleData], Outcome]
T = TypeVar("T")

REGISTRY: dict[str, CheckFn] = {}
# check id -> the sections of the facts its logic reads (prerequisites read their own).
READS: dict[str, frozenset[Section]] = {}


def check(check_id: str, *, reads: tuple[Section, ...]) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the logic of ``check_id`` (its text lives in checks/catalogue.toml),
    reading the sections ``reads`` of the facts and no other: a live run collects only what
    its checks read (:func:`blackwell_doctor.rules.engine.needed_sections`);
    tests/test_collect_selection.py judges every check on facts where every other section
    is unavailable and compares."""
    unknown = sorted(set(reads) - set(get_args(Section)))
    if unknown:
        raise RuntimeError(f"check {check_id} reads unknown sections {unknown}")

    def register(fn: CheckFn) -> CheckFn:
        if check_id in REGISTRY:
            raise RuntimeError(f"check {check_id} registered twice")
        REGISTRY[check_id] = fn
        READS[check_id] = frozenset(reads)
        return fn

    return register


def requires(
    prerequisite: Callable[[Facts], T | Outcome],
) -> Callable[[Callable[[Facts, RuleData, T], Outcome]], CheckFn]:
    """Run the check on what ``prerequisite`` reads from the facts (its section, its
    GPUs); when that is an outcome instead (a skip, "not evaluated": nothing to judge), it is
    the check's outcome and the check's own logic does not run. As scientific-python/
    repo-review's fixtures: the prerequisite is read in one place, and a check it blocks is
    a skip or "not evaluated", never a failure."""

    def wrap(fn: Callable[[Facts, RuleData, T], Outcome]) -> CheckFn:
        @functools.wraps(fn)
        def run(facts: Facts, rules: RuleData) -> Outcome:
            got = prerequisite(facts)
            if isinstance(got, Outcome):
                return got
            return fn(facts, rules, got)

        return run

    return wrap
