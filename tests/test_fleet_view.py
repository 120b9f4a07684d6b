"""``fleet`` finds a node like one it judged before from a raw view of its file (issue 24): the
view's key must see every field a check can read and nothing else, a node found that way must
still be refused when its own identity fields are not valid, and a fleet of identical machines
is decoded and evaluated once per configuration."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.app import fleet
from blackwell_doctor.app.fleet import expand_inputs, judge_fleet, seen_key
from blackwell_doctor.app.obtain import FactsFileError, decode_facts_file, read_facts_file
from blackwell_doctor.facts.document import NvmlFacts, encode_facts
from blackwell_doctor.rules.memo import MemoEngine
from tests.conftest import FACTS_FIXTURES
from tests.factsutil import load, replace

FIXTURES = [p.stem for p in sorted(FACTS_FIXTURES.glob("*.json"))]
IDENTITY = {("platform", "hostname"), ("collected_at",), ("nvml", "gpus", "uuid")}


def current(fixture: str, n: int = 0) -> dict[str, Any]:
    """``fixture`` as a current document (older fixtures are upgraded on decode), as another
    machine of its kind for ``n`` > 0: other name, collection time and GPU UUIDs."""
    facts = replace(load(fixture), redacted=False)
    if n:
        nvml = facts.nvml
        if isinstance(nvml, NvmlFacts):
            nvml = replace(nvml, gpus=[replace(g, uuid=f"GPU-{n}-{g.index}") for g in nvml.gpus])
        facts = replace(
            facts,
            platform=replace(facts.platform, hostname=f"other{n}"),
            collected_at=f"2031-01-01T00:00:{n:02d}Z",
            nvml=nvml,
        )
    doc: dict[str, Any] = json.loads(encode_facts(facts))
    return doc


def key(doc: dict[str, Any]) -> bytes | None:
    seen = seen_key(json.dumps(doc).encode())
    return None if seen is None else seen.key


def edits(doc: dict[str, Any]) -> list[tuple[str, dict[str, Any]]]:
    """``doc`` with one field the view reads as text removed, or its value changed: at the
    top, in platform, in nvml and in each GPU (the objects that hold identity fields)."""
    out: list[tuple[str, dict[str, Any]]] = []
    places: list[tuple[tuple[str, ...], list[str | int]]] = [((), [])]
    places.append((("platform",), ["platform"]))
    places.append((("nvml",), ["nvml"]))
    for i, _ in enumerate(doc["nvml"].get("gpus", [])):
        places.append((("nvml", "gpus"), ["nvml", "gpus", i]))
    for names, where in places:
        holder: Any = doc
        for step in where:
            holder = holder[step]
        for field in list(holder):
            if (*names, field) in IDENTITY or field == "schema_version":
                continue
            for label, change in (("removed", None), ("changed", ["changed"])):
                edited = json.loads(json.dumps(doc))
                target: Any = edited
                for step in where:
                    target = target[step]
                if change is None:
                    del target[field]
                else:
                    target[field] = change
                out.append((f"{'.'.join(map(str, where))}.{field} {label}", edited))
    return out


@pytest.mark.parametrize("fixture", FIXTURES)
def test_the_view_key_sees_every_field_but_the_identity_ones(fixture: str) -> None:
    doc = current(fixture)
    base = key(doc)
    assert base is not None
    assert key(current(fixture, 7)) == base  # only IDENTITY_FIELDS differ
    cases = edits(doc)
    assert len(cases) >= 2 * 10
    for label, edited in cases:
        assert key(edited) != base, label


def test_the_view_key_reads_a_document_of_this_schema_only() -> None:
    doc = current("sm120-driver580")
    doc["schema_version"] -= 1
    assert key(doc) is None
    assert seen_key(b"{") is None
    assert seen_key(b"[]") is None


@pytest.mark.parametrize(
    ("label", "edit"),
    [
        ("collected_at", lambda d: d.__setitem__("collected_at", 5)),
        ("hostname", lambda d: d["platform"].__setitem__("hostname", 3)),
        ("uuid", lambda d: d["nvml"]["gpus"][1].__setitem__("uuid", 17)),
        ("uuid object", lambda d: d["nvml"]["gpus"][1].__setitem__("uuid", {"a": 1})),
        ("redacted", lambda d: d.__setitem__("redacted", "no")),
        ("gpus null", lambda d: d["nvml"].__setitem__("gpus", None)),
    ],
)
def test_a_node_like_a_judged_one_but_invalid_is_refused_as_check_refuses_it(
    label: str, edit: Any, tmp_path: Path
) -> None:
    good = current("b200-x8")
    (tmp_path / "a-good.json").write_text(json.dumps(good))
    bad = current("b200-x8", 3)
    edit(bad)
    bad_path = tmp_path / "b-bad.json"
    bad_path.write_text(json.dumps(bad))
    with pytest.raises(FactsFileError) as refused:
        read_facts_file(bad_path)
    paths, missing = expand_inputs([str(tmp_path)])
    report = judge_fleet(paths, missing)
    assert report.summary.nodes == 1, label
    [unjudged] = report.unjudged
    assert unjudged.source == str(bad_path)
    assert unjudged.reason == refused.value.reason


def test_identical_machines_are_decoded_and_evaluated_once_per_configuration(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    for n in range(1, 11):
        for fixture in ("b200-x8", "sm120-driver580"):
            doc = current(fixture, n)
            doc["platform"]["hostname"] = f"{fixture[:4]}-{n:02d}"
            (tmp_path / f"{fixture}-{n:02d}.json").write_text(json.dumps(doc))
    calls = {"decode": 0, "evaluate": 0}
    run = MemoEngine.run

    def counted_decode(*args: Any, **kw: Any) -> Any:
        calls["decode"] += 1
        return decode_facts_file(*args, **kw)

    def counted_run(*args: Any, **kw: Any) -> Any:
        calls["evaluate"] += 1
        return run(*args, **kw)

    monkeypatch.setattr("blackwell_doctor.app.fleet.decode_facts_file", counted_decode)
    monkeypatch.setattr(MemoEngine, "run", counted_run)
    paths, missing = expand_inputs([str(tmp_path)])
    report = judge_fleet(paths, missing)
    assert calls == {"decode": 2, "evaluate": 2}
    assert report.summary.nodes == 20
    names = sorted(n.name for n in report.nodes)
    assert names == sorted(f"{f}-{n:02d}" for n in range(1, 11) for f in ("b200", "sm12"))
    # The same report as judging each node on its own (no memo).
    alone = [fleet.judge_node(p, select=(), ignore=(), fail_on="fail", strict=False) for p in paths]
    assert [msgspec.json.encode(j) for j in alone] == [
        msgspec.json.encode(
            fleet.judge_node(p, select=(), ignore=(), fail_on="fail", strict=False, memo=memo)
        )
        for memo in [fleet.Memo()]
        for p in paths
    ]


def test_views_stop_after_unshared_nodes_of_which_none_repeated() -> None:
    # A fleet whose every node differs stops reading views after UNSHARED nodes; one whose
    # nodes repeat keeps them past it (PROBATION decides there).
    verdict: Any = (0, 0, 0, 0, [], None)
    differ, repeat = fleet.Memo(), fleet.Memo()
    assert fleet.UNSHARED < fleet.PROBATION
    for n in range(fleet.UNSHARED):
        assert differ.viewing
        assert repeat.viewing
        for memo, key in ((differ, b"node-%d" % n), (repeat, b"node-%d" % (n % 4))):
            if memo.get(key) is None:
                memo.put(key, verdict)
    assert not differ.viewing
    assert repeat.viewing
    assert repeat.hits == fleet.UNSHARED - 4
