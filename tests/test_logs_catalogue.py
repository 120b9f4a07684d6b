"""checks/log_signatures.toml: valid, and every entry is tested against a real excerpt."""

from __future__ import annotations

import tomllib

import pytest

from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.logs import FALLBACKS_FILE, load_catalogue, parse_catalogue
from blackwell_doctor.ruledata.resources import data_dir
from tests.test_logs_fixtures import EXPECTED, NOT_NVIDIA


def _raw() -> dict[str, object]:
    return tomllib.loads((data_dir("checks") / "log_signatures.toml").read_text("utf-8"))


def test_catalogue_loads_with_every_check_family() -> None:
    cat = load_catalogue()
    assert {s.check for s in cat.signatures} == {
        "logs.moe_kernels",
        "logs.arch_support",
        "logs.p2p",
        "logs.platform",
        "logs.kernel_events",
    }


def test_every_signature_has_a_fixture_test() -> None:
    # The generated fallback rules (checks/log_fallbacks.toml) are tested from their own
    # source messages in tests/test_logs_fallbacks.py.
    tested = {sig for expected in EXPECTED.values() for sig in expected} | NOT_NVIDIA
    curated = {s["id"] for s in _raw()["signature"]}  # type: ignore[attr-defined]
    assert curated == tested - _fallback_ids()
    assert {s.id for s in load_catalogue().signatures} - curated == _fallback_ids()


def _fallback_ids() -> set[str]:
    raw = tomllib.loads((data_dir("checks") / FALLBACKS_FILE).read_text("utf-8"))
    return {s["id"] for s in raw["signature"]}


def test_the_articles_signature_is_catalogued_as_fail() -> None:
    sig = load_catalogue().by_id["moe.tma_ws_init_failed"]
    assert sig.severity == "fail"
    assert sig.rule == "autotuner-wrapped"


def test_unknown_field_is_one_clear_error() -> None:
    raw = _raw()
    raw["signature"][0]["colour"] = "red"  # type: ignore[index]
    with pytest.raises(CatalogueError, match=r"log_signatures\.toml.*colour"):
        parse_catalogue(raw)


def test_unknown_check_is_rejected() -> None:
    raw = _raw()
    raw["signature"][0]["check"] = "logs.everything"  # type: ignore[index]
    with pytest.raises(CatalogueError, match="check"):
        parse_catalogue(raw)


def test_duplicate_id_is_rejected() -> None:
    raw = _raw()
    sigs = raw["signature"]
    sigs.append(dict(sigs[0]))  # type: ignore[attr-defined,index]
    with pytest.raises(CatalogueError, match="duplicate id"):
        parse_catalogue(raw)


def test_bad_regex_is_rejected() -> None:
    raw = _raw()
    raw["signature"][0]["regex"] = "([unclosed"  # type: ignore[index]
    with pytest.raises(CatalogueError, match="bad regex"):
        parse_catalogue(raw)


def test_empty_literal_is_rejected() -> None:
    raw = _raw()
    raw["signature"][0]["literals"] = [" "]  # type: ignore[index]
    with pytest.raises(CatalogueError, match="literals"):
        parse_catalogue(raw)


def test_a_marker_needs_a_regex() -> None:
    raw = _raw()
    del raw["marker"][0]["regex"]  # type: ignore[index]
    with pytest.raises(CatalogueError, match="regex"):
        parse_catalogue(raw)


def _signature(raw: dict[str, object], sig_id: str) -> dict[str, object]:
    return next(s for s in raw["signature"] if s["id"] == sig_id)  # type: ignore[attr-defined]


@pytest.mark.parametrize(
    ("field", "value", "message"),
    [
        ("ordered_by", "no-such-marker", "ordered_by naming a marker"),
        ("restarted_by", "runtime.engine_ready", "restarted_by naming a rule daemon-start"),
    ],
)
def test_a_daemon_stop_names_its_marker_and_its_start(field: str, value: str, message: str) -> None:
    raw = _raw()
    _signature(raw, "host.persistence_daemon_stopped")[field] = value
    with pytest.raises(CatalogueError, match=message):
        parse_catalogue(raw)


def test_only_a_daemon_stop_names_an_ordering_marker() -> None:
    raw = _raw()
    _signature(raw, "runtime.engine_ready")["ordered_by"] = "persistence-daemon-stop-job"
    with pytest.raises(CatalogueError, match="are for rule daemon-stop"):
        parse_catalogue(raw)


def test_input_problems_have_advice_and_are_never_matched() -> None:
    cat = load_catalogue()
    assert set(cat.inputs) == {"input.unreadable", "input.partially_read"}
    assert all(p.check == "logs.inputs" and p.severity == "warn" for p in cat.inputs.values())
    entry = cat.entry("input.partially_read")
    assert entry is not None
    assert entry.meaning.startswith("A log input broke off")
    assert entry.remedy
    assert not set(cat.inputs) & {s.id for s in cat.signatures}


def test_every_shipped_pattern_compiles_and_a_run_compiles_them_on_use() -> None:
    # load_catalogue() leaves the patterns to their first use; validating compiles them all.
    eager = parse_catalogue(_raw())
    lazy = load_catalogue()  # log_signatures.toml's entries first, then log_fallbacks.toml's
    assert len(eager.regex) == len(lazy.regex) - len(_fallback_ids()) == len(eager.signatures)
    for n, sig in enumerate(eager.signatures):
        for field, patterns in (
            ("regex", (eager.regex, lazy.regex)),
            ("unless", (eager.unless, lazy.unless)),
        ):
            source = getattr(sig, field)
            compiled = [p[n] for p in patterns]
            if source is None:
                assert compiled == [None, None]
            else:
                assert [c.pattern for c in compiled if c is not None] == [source, source]


@pytest.mark.parametrize("table", ["signature", "input"])
def test_an_id_with_a_trailing_newline_is_rejected(table: str) -> None:
    raw = _raw()
    entry = raw[table][0]  # type: ignore[index]
    entry["id"] += "\n"
    with pytest.raises(CatalogueError, match=r"id is not area\.name"):
        parse_catalogue(raw)
