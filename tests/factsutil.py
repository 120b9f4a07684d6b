"""Helpers for tests that derive variants from the realistic facts fixtures."""

from __future__ import annotations

from typing import Any

import msgspec

from blackwell_doctor.evaluate import evaluate
from blackwell_doctor.facts import Facts, decode_facts
from blackwell_doctor.rules.model import Result, Status
from tests.conftest import FACTS_FIXTURES


def load(name: str) -> Facts:
    return decode_facts((FACTS_FIXTURES / f"{name}.json").read_bytes(), source=name)


def replace(obj: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(obj, **changes)


def result(facts: Facts, check_id: str) -> Result:
    report = evaluate(facts, select=[check_id])
    [found] = [r for r in report.results if r.id == check_id]
    return found


def status(facts: Facts, check_id: str) -> Status:
    return result(facts, check_id).status
