"""Every word a check shows lives in its checks/catalogue.toml entry: each case a check
function returns has its remedy there, and every case there is one a check returns."""

from __future__ import annotations

import ast
from pathlib import Path

from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.p2p import P2PVerdict

RULES = Path(__file__).resolve().parents[2] / "src" / "blackwell_doctor" / "rules"


def _literal_cases(fn: ast.AST) -> set[str]:
    """``case="..."`` keywords and ``case = "..."`` assignments in a function (either
    branch of a conditional expression: ``case="a" if down else "b"``)."""
    out: set[str] = set()
    for node in ast.walk(fn):
        if isinstance(node, ast.keyword) and node.arg == "case":
            value: ast.AST = node.value
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "case" for t in node.targets
        ):
            value = node.value
        else:
            continue
        branches = [value.body, value.orelse] if isinstance(value, ast.IfExp) else [value]
        for branch in branches:
            if isinstance(branch, ast.Constant) and isinstance(branch.value, str):
                out.add(branch.value)
    return out


def _cases_in_code() -> dict[str, set[str]]:
    """check id -> the case names its @check function returns, directly or through the
    module's helper functions it calls."""
    out: dict[str, set[str]] = {}
    for path in RULES.glob("*.py"):
        tree = ast.parse(path.read_text(encoding="utf-8"))
        functions = {f.name: f for f in tree.body if isinstance(f, ast.FunctionDef)}
        for fn in functions.values():
            ids = [
                str(d.args[0].value)
                for d in fn.decorator_list
                if isinstance(d, ast.Call)
                and getattr(d.func, "id", None) == "check"
                and isinstance(d.args[0], ast.Constant)
            ]
            called = {
                functions[c.func.id]
                for c in ast.walk(fn)
                if isinstance(c, ast.Call)
                and isinstance(c.func, ast.Name)
                and c.func.id in functions
            }
            for check_id in ids:
                found = out.setdefault(check_id, set())
                for f in (fn, *called):
                    found |= _literal_cases(f)
    return out


def test_the_scan_sees_the_checks() -> None:
    found = _cases_in_code()
    assert {"platform.wsl", "driver.consistency", "p2p.transfer"} <= set(found)
    assert found["platform.wsl"] == {"wsl1", "wsl2"}
    assert {"hidden", "fallen_off", "wsl", "none_found"} <= found["gpu.present"]


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
