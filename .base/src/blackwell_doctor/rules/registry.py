"""Where checks register: ``@check("id", reads=...)`` on each check's logic.

Apart from the engine so that the check modules do not import the engine, whose
:func:`~blackwell_doctor.rules.engine.registered_checks` imports every check module (that
was an import cycle).
"""

from __future__ import annotations

from collections.abc import Callable
from typing import get_args

from blackwell_doctor.facts.document import Facts, Section
from blackwell_doctor.report.results import Outcome
from blackwell_doctor.ruledata.rules import RuleData

CheckFn = Callable[[Facts, RuleData], Outcome]

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
