"""facts -> report: the pure middle of the pipeline (no I/O, no environment, no clock)."""

from __future__ import annotations

from collections.abc import Sequence

from blackwell_doctor.facts.document import Facts
from blackwell_doctor.report.check import Report, build_report
from blackwell_doctor.report.results import FailOn
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.engine import Engine, family, needed_checks, registered_checks


def default_engine(select: Sequence[str] = (), ignore: Sequence[str] = ()) -> Engine:
    """The engine of every check (importing a family's code when a check first needs it:
    :class:`Engine`'s ``on_demand``); with ``select``, of the families that the selected checks
    and their prerequisites belong to (only their modules are imported)."""
    rules = load_rule_data()
    if not select:
        # Each family's code is imported when one of its checks first needs it.
        return Engine(rules=rules, checks={}, on_demand=True)
    families = frozenset(family(i) for i in needed_checks(rules, select, ignore))
    return Engine(rules=rules, checks=registered_checks(families), families=families)


def memo_engine() -> Engine:
    """The engine of every check that remembers each check's results by the fields it read
    (:mod:`blackwell_doctor.rules.memo`): for callers that judge many documents (``fleet``),
    where most nodes share most checks' inputs even when no two are alike."""
    from blackwell_doctor.rules.memo import MemoEngine

    return MemoEngine(load_rule_data(), {})


def evaluate(
    facts: Facts,
    *,
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    fail_on: FailOn = "fail",
    strict: bool = False,
    source: str = "live",
    embed_facts: bool = False,
    engine: Engine | None = None,
) -> Report:
    """The report on ``facts``. ``engine``: one built by :func:`default_engine`, passed in by
    callers that judge many documents (``fleet``) so the rule data is loaded once."""
    from blackwell_doctor.rules.verdict import node_verdict

    results = (engine or default_engine(select, ignore)).run(facts, select=select, ignore=ignore)
    return build_report(
        facts,
        results,
        fail_on=fail_on,
        strict=strict,
        source=source,
        embed_facts=embed_facts,
        node=node_verdict(results),
    )
