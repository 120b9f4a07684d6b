"""Every word a check shows lives in its checks/catalogue.toml entry: each case a check
function returns has its remedy there, and every case there is one a check returns."""

from __future__ import annotations

import ast
from pathlib import Path

from blackwell_doctor.rules.data import load_rule_data
from blackwell_doctor.rules.p2p import P2PVerdict

RULES = Path(__file__).resolve().parents[2] / "src" / "blackwell_doctor" / "rules"


def _cases_in_code() -> dict[str, set[str]]:
    """check id -> the case names its @check function returns (literal ``case="..."``)."""
    out: dict[str, set[str]] = {}
    for path in RULES.glob("*.py"):
        for fn in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(fn, ast.FunctionDef):
                continue
            ids = [
                d.args[0].value
                for d in fn.decorator_list
                if isinstance(d, ast.Call)
                and getattr(d.func, "id", None) == "check"
                and isinstance(d.args[0], ast.Constant)
            ]
            for check_id in ids:
                out.setdefault(str(check_id), set()).update(
                    str(k.value.value)
                    for node in ast.walk(fn)
                    if isinstance(node, ast.Call)
                    for k in node.keywords
                    if k.arg == "case" and isinstance(k.value, ast.Constant)
                )
    return out


def test_the_scan_sees_the_checks() -> None:
    found = _cases_in_code()
    assert {"platform.wsl", "driver.consistency", "p2p.transfer"} <= set(found)
    assert found["platform.wsl"] == {"wsl1", "wsl2"}


def test_every_case_a_check_returns_has_its_words() -> None:
    specs = load_rule_data().checks
    missing = [
        f"{check_id}: [check.cases.{case}]"
        for check_id, cases in _cases_in_code().items()
        for case in cases
        if case not in specs[check_id].cases
    ]
    assert missing == []


def test_every_case_worded_is_returned_by_its_check() -> None:
    """The probe --p2p report also words its two verdicts the check itself does not
    remedy (a pair without peer access, a test that could not run)."""
    in_code = _cases_in_code()
    probe_only = {"p2p.transfer": {"not-supported", "error"}}
    orphans = [
        f"{spec.id}: {case}"
        for spec in load_rule_data().checks.values()
        for case in spec.cases
        if case not in in_code.get(spec.id, set()) | probe_only.get(spec.id, set())
    ]
    assert orphans == []
    verdicts: tuple[P2PVerdict, ...] = ("granted-but-broken", "slower-than-host")
    assert set(verdicts) <= set(load_rule_data().checks["p2p.transfer"].cases)


def test_a_remedy_template_for_every_warning_or_failure() -> None:
    """A check's words are its [check.remedy] summary or its cases: never neither."""
    for spec in load_rule_data().checks.values():
        has_summary = spec.remedy is not None and spec.remedy.summary
        assert has_summary or spec.cases, spec.id
