"""Where checks register: ``@check("id")`` on each check's logic.

Apart from the engine so that the check modules do not import the engine, whose
:func:`~blackwell_doctor.rules.engine.registered_checks` imports every check module (that
was an import cycle).
"""

from __future__ import annotations

from collections.abc import Callable

from blackwell_doctor.facts.document import Facts
from blackwell_doctor.report.results import Outcome
from blackwell_doctor.ruledata.rules import RuleData

CheckFn = Callable[[Facts, RuleData], Outcome]

REGISTRY: dict[str, CheckFn] = {}


def check(check_id: str) -> Callable[[CheckFn], CheckFn]:
    """Register ``fn`` as the logic of ``check_id`` (its text lives in checks/catalogue.toml)."""

    def register(fn: CheckFn) -> CheckFn:
        if check_id in REGISTRY:
            raise RuntimeError(f"check {check_id} registered twice")
        REGISTRY[check_id] = fn
        return fn

    return register
