"""The fleet's engine remembers each check's results by the fields the check read
(rules/memo.py). Its soundness rests on the tracer seeing every read a check makes: these
tests hold the checks to it (a traced run is the run, and changing what was not seen read
changes nothing), and hold the memo's results to a plain engine's on a fleet whose every
node differs (benchmarks/fleet_varied.py's)."""

from __future__ import annotations

import importlib.util
import itertools
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.facts.document import Facts, decode_facts
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules import memo
from blackwell_doctor.rules.engine import registered_checks
from blackwell_doctor.rules.evaluate import default_engine, memo_engine
from blackwell_doctor.rules.memo import MemoEngine, reads_of, traced_facts
from blackwell_doctor.rules.registry import REGISTRY
from tests.conftest import FACTS_FIXTURES

REPO = Path(__file__).resolve().parents[1]
FIXTURES = {p.stem: decode_facts(p.read_bytes()) for p in sorted(FACTS_FIXTURES.glob("*.json"))}
CHECKS = registered_checks()


def _varied() -> Any:
    spec = importlib.util.spec_from_file_location(
        "fleet_varied", REPO / "benchmarks" / "fleet_varied.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _outcome(check_id: str, facts: Facts) -> bytes:
    """The check's outcome as bytes (a crash as its type and words)."""
    try:
        return msgspec.msgpack.encode(CHECKS[check_id](facts, load_rule_data()))
    except Exception as exc:  # a crash is an outcome too: the same one, or a difference
        return f"crashed: {type(exc).__name__}: {exc}".encode()


def _read(check_id: str, facts: Facts) -> tuple[bytes, frozenset[str]]:
    traced = traced_facts(facts)
    return reads_of(lambda: _outcome(check_id, traced))


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_a_traced_run_is_the_run(check_id: str) -> None:
    for name, facts in FIXTURES.items():
        outcome, read = _read(check_id, facts)
        assert outcome == _outcome(check_id, facts), (check_id, name)
        # Every check reads at least one field, and every field it reads is one of the
        # sections it declares (reads= of @check, which a live --select collects).
        sections = {p.split(".", 1)[0] for p in read}
        assert read, (check_id, name)
        assert sections <= set(memo_sections(check_id)), (check_id, name, sections)


def test_a_check_reads_the_same_over_a_copy_the_other_checks_read_first() -> None:
    # The memo learns a node's checks over one traced copy (MemoEngine._traced): a helper
    # that remembers what it worked out by the facts' identity (rules/health.py's labels,
    # serving's judgeable run) would let the second check skip the reads it shares with the
    # first, and its results be kept under too few fields.
    for name, facts in [*FIXTURES.items(), *enumerate(_varied_nodes(12))]:
        alone = {check_id: _read(check_id, facts) for check_id in sorted(CHECKS)}
        shared = traced_facts(facts)
        for check_id in sorted(CHECKS):
            after = reads_of(lambda c=check_id, s=shared: _outcome(c, s))  # type: ignore[misc]
            assert after == alone[check_id], (check_id, name)


def memo_sections(check_id: str) -> set[str]:
    from blackwell_doctor.rules.registry import READS

    # The platform section is always collected; the engine reads absent sections itself.
    return {*READS[check_id], "platform"}


def _graft(facts: Facts, other: Facts, keep: frozenset[str]) -> Facts:
    """``facts`` with every field that is not in ``keep`` taken from ``other``: a section
    not read at all is ``other``'s; in a section read, each field not read is ``other``'s
    where both sections are of one type."""
    fields: dict[str, Any] = {}
    for name in Facts.__struct_fields__:
        mine, theirs = getattr(facts, name), getattr(other, name)
        if name not in keep:
            fields[name] = theirs
        elif isinstance(mine, msgspec.Struct) and type(mine) is type(theirs):
            fields[name] = msgspec.structs.replace(
                mine,
                **{
                    f: getattr(theirs, f)
                    for f in mine.__struct_fields__
                    if f"{name}.{f}" not in keep
                },
            )
        else:
            fields[name] = mine
    return Facts(**fields)


@pytest.mark.parametrize("check_id", sorted(CHECKS))
def test_what_a_check_was_not_seen_to_read_changes_nothing(check_id: str) -> None:
    # Every fixture's fields that the check did not read replaced by every other fixture's
    # (and a varied node's): the same outcome. A read the tracer missed would show here.
    sources = [*FIXTURES.values(), *_varied_nodes(12)]
    for (name, facts), other in itertools.product(FIXTURES.items(), sources):
        outcome, read = _read(check_id, facts)
        grafted = _graft(facts, other, read)
        assert _outcome(check_id, grafted) == outcome, (check_id, name)


def _varied_nodes(count: int, seed: int = 36) -> list[Facts]:
    module = _varied()
    return [decode_facts(data) for _, data in module.nodes(count, seed)]


def test_a_small_fleet_is_judged_as_any_engine_judges_it() -> None:
    engine = memo_engine()
    assert isinstance(engine, MemoEngine)
    for facts in itertools.islice(itertools.cycle(FIXTURES.values()), memo.PLAIN_RUNS):
        engine.run(facts)
    assert engine.stats() == {"hits": 0, "misses": 0, "off": [], "unlearning": []}


def test_a_fleet_judged_with_the_memo_is_judged_as_without() -> None:
    plain, remembering = default_engine(), memo_engine()
    nodes = _varied_nodes(400)
    for facts in [*nodes, *FIXTURES.values(), *nodes[:50]]:
        assert remembering.run(facts) == plain.run(facts)
    assert isinstance(remembering, MemoEngine)
    stats = remembering.stats()
    # It remembered: most checks' results were given, not run again.
    assert stats["hits"] > stats["misses"], stats


def test_every_varied_node_differs() -> None:
    from blackwell_doctor.app.fleet import judgment_key

    keys = {judgment_key(facts) for facts in _varied_nodes(300)}
    assert len(keys) == 300


def test_a_check_that_crashes_is_remembered_in_its_own_words(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The traced run's AttributeError would name the tracer's frame: the engine's result
    # comes from a run without it.
    def reads_a_missing_field(facts: Facts, rules: Any) -> Any:
        return facts.nvml.no_such_field  # type: ignore[union-attr]

    monkeypatch.setitem(REGISTRY, "gpu.present", reads_a_missing_field)
    engine = memo_engine()
    assert isinstance(engine, MemoEngine)
    for facts in itertools.islice(itertools.cycle(FIXTURES.values()), memo.PLAIN_RUNS + 30):
        [result] = [r for r in engine.run(facts) if r.id == "gpu.present"]
        assert "check crashed: AttributeError" in result.summary
        where = result.evidence["at"]
        assert isinstance(where, str)
        assert "test_rules_memo.py" in where, where
        assert memo.__file__ not in where


def test_a_seldom_reused_check_is_no_longer_remembered() -> None:
    engine = memo_engine()
    assert isinstance(engine, MemoEngine)
    nodes = _varied_nodes(memo.PLAIN_RUNS + memo.PROBATION + 20)
    for facts in nodes:
        engine.run(facts)
    stats = engine.stats()
    # Each node's bench run is its own: the serving checks run as in any engine.
    assert "serving.errors" in stats["off"], stats
    assert "gpu.architecture" not in stats["off"], stats


def test_a_check_whose_results_are_never_asked_for_again_stops_before_probation() -> None:
    # Past UNSHARED misses without a hit (a bench run of each node's own), well before
    # PROBATION, the serving checks are no longer remembered; a check whose results are
    # shared (the GPUs' architecture) still is, and the results are the engine's.
    plain, remembering = default_engine(), memo_engine()
    assert isinstance(remembering, MemoEngine)
    assert memo.UNSHARED + 8 < memo.PROBATION
    for facts in _varied_nodes(memo.PLAIN_RUNS + memo.UNSHARED + 8):
        assert remembering.run(facts) == plain.run(facts)
    stats = remembering.stats()
    assert "serving.errors" in stats["off"], stats
    assert "serving.throughput" in stats["off"], stats
    assert "gpu.architecture" not in stats["off"], stats


def test_a_check_whose_misses_never_repeat_stops_learning_and_judges_as_without(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # The nodes with their own probe figures miss probe.tiles' and link.pcie's tables every
    # time (the nodes without probes share a result): past a few such misses in a row the
    # check is run as any engine runs it on a miss, and its results stay the engine's.
    monkeypatch.setattr(memo, "PROBATION", 8)
    monkeypatch.setattr(memo, "RARE_RUN", 2)
    monkeypatch.setattr(memo, "RELEARN", 4)
    plain, remembering = default_engine(), memo_engine()
    assert isinstance(remembering, MemoEngine)
    nodes = _varied_nodes(240)
    for facts in [*nodes, *FIXTURES.values(), *nodes[:30]]:
        assert remembering.run(facts) == plain.run(facts)
    stats = remembering.stats()
    assert "probe.tiles" in stats["unlearning"], stats
    assert "gpu.architecture" not in stats["unlearning"], stats
    assert stats["hits"] > stats["misses"], stats
