"""One path to facts (issue 20): ``fleet`` reads each node's file through the reader of
``check --facts`` (one cap, one decode, one wording), and ``model DIR`` sizes a model with
the verdict of ``check --model-dir``."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.collect.inputfile import FACTS
from tests.conftest import FACTS_FIXTURES, FIXTURES

MODELS = sorted(p for p in (FIXTURES / "models").iterdir() if p.is_dir())


def _bad_files(tmp_path: Path) -> dict[str, Path]:
    oversized = tmp_path / "oversized.json"
    with oversized.open("wb") as fh:  # sparse: refused from its size, never read
        fh.truncate(FACTS.limit + 1)
    malformed = tmp_path / "malformed.json"
    malformed.write_text('{"schema_version": 4, "platform": [')
    future = tmp_path / "future.json"
    future.write_text('{"schema_version": 999}')
    not_utf8 = tmp_path / "latin1.json"
    not_utf8.write_bytes(b'{"schema_version": 4, "x": "\xe9"}')
    return {"oversized": oversized, "malformed": malformed, "future": future, "utf8": not_utf8}


@pytest.mark.parametrize("kind", ["oversized", "malformed", "future", "utf8"])
def test_fleet_and_check_facts_refuse_a_bad_file_in_the_same_words(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = _bad_files(tmp_path)[kind]
    assert main(["check", "--facts", str(path), "-f", "json"]) == 2
    check_error = capsys.readouterr().err.strip().removeprefix("blackwell-doctor: error: ")

    assert main(["fleet", str(path), "-f", "json"]) == 2
    doc = json.loads(capsys.readouterr().out)
    [unjudged] = doc["unjudged"]
    reason = unjudged["reason"]
    # check names the file; fleet lists it beside the file: the same reason otherwise.
    if reason.startswith("cannot read: "):
        detail = reason.removeprefix("cannot read: ")
        assert check_error == f"cannot read facts file {path}: {detail}"
    else:
        assert check_error == f"{path}: {reason}"


def test_an_oversized_facts_file_is_refused_at_the_one_cap(tmp_path: Path) -> None:
    from blackwell_doctor.app.obtain import FactsFileError, read_facts_file

    path = _bad_files(tmp_path)["oversized"]
    with pytest.raises(FactsFileError, match="larger than 64 MiB"):
        read_facts_file(path)


@pytest.mark.parametrize("facts", sorted(FACTS_FIXTURES.glob("*.json")), ids=lambda p: p.stem)
def test_model_and_check_model_dir_give_the_same_fit(
    facts: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for model in MODELS:
        code = main(["model", str(model), "--facts", str(facts), "-f", "json"])
        doc = json.loads(capsys.readouterr().out)
        main(
            [
                "check",
                "--facts",
                str(facts),
                "--model-dir",
                str(model),
                "--select",
                "model.fit",
                "-f",
                "json",
            ]
        )
        [result] = json.loads(capsys.readouterr().out)["results"]
        entries = {f"TP {e['tensor_parallel']}": e["reason"] for e in doc["fit"]}
        evidence = result["evidence"]
        assert {k: v for k, v in evidence.items() if k.startswith("TP ")} == entries, model
        fits = any(e["fits"] for e in doc["fit"])
        if not doc["fit"]:  # no size: model says why, check does not evaluate
            assert result["status"] == "error", model
            assert doc["fit_note"] is None or doc["fit_note"] in result["summary"], model
        else:
            assert result["status"] in (("pass", "warn") if fits else ("fail",)), model
            assert code == (0 if fits else 1), model
