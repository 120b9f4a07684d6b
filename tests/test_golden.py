"""Golden outputs: every facts fixture, evaluated with default options, in every format.

A golden file is the output a reviewer approved. After an intended change, run
``pytest tests/test_golden.py --update-goldens`` and read the diff of ``tests/golden/``
before committing it: that diff is what users will see change.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.render import Format, render
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import as_documented, optional

# The same paths as conftest.py's (tests/ is not a package, so they are not importable).
REPO = Path(__file__).resolve().parents[1]
FACTS_FIXTURES = REPO / "tests" / "fixtures" / "facts"
GOLDEN = REPO / "tests" / "golden"
FIXTURES = sorted(FACTS_FIXTURES.glob("*.json"))


def fixture_id(path: Path) -> str:
    return path.stem


@pytest.mark.parametrize("fixture", FIXTURES, ids=fixture_id)
@pytest.mark.parametrize("fmt", list(Format))
def test_golden(fixture: Path, fmt: Format, update_goldens: bool) -> None:
    # The source is the repository-relative path, so goldens do not depend on the checkout.
    source = fixture.relative_to(REPO).as_posix()
    facts = decode_facts(fixture.read_bytes(), source=source)
    out = as_documented(render(evaluate(facts, source=source), fmt, color=False))
    golden = GOLDEN / f"{fixture.stem}.{fmt.extension}"
    if update_goldens:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(out, encoding="utf-8")
        return
    if not golden.exists():
        pytest.fail(
            f"no golden file {golden.relative_to(REPO)}: run `pytest --update-goldens`, "
            "then review the new file before committing it"
        )
    assert out == golden.read_text(encoding="utf-8"), (
        f"{golden.relative_to(REPO)} differs; if the change is intended, run "
        "`pytest --update-goldens` and review the diff"
    )


@pytest.mark.parametrize("fixture", FIXTURES, ids=fixture_id)
def test_facts_fixture_validates_against_the_shipped_schema(fixture: Path) -> None:
    jsonschema = optional("jsonschema")
    schema = json.loads(schema_text("facts.schema.json"))
    jsonschema.Draft202012Validator(schema).validate(json.loads(fixture.read_bytes()))


def test_every_golden_file_has_a_fixture() -> None:
    # A golden left behind by a renamed or deleted fixture would never be compared again.
    expected = {f"{f.stem}.{fmt.extension}" for f in FIXTURES for fmt in Format}
    orphans = sorted(p.name for p in GOLDEN.glob("*") if p.is_file() and p.name not in expected)
    assert not orphans, f"golden files without a facts fixture: {orphans}"
