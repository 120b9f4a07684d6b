"""The exit codes are a contract (docs/exit-codes.md, linked from the README): every ExitCode
member is in that page's table with its meaning, and the table lists no other code."""

from __future__ import annotations

import re

from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.report.results import Status
from tests.conftest import REPO


def _readme_table() -> dict[int, str]:
    section = (REPO / "docs" / "exit-codes.md").read_text(encoding="utf-8")
    rows = re.findall(r"^\| (\d+) \| (.+) \|$", section, flags=re.MULTILINE)
    return {int(code): meaning for code, meaning in rows}


def test_the_readme_table_lists_every_exit_code_with_its_meaning() -> None:
    table = _readme_table()
    assert set(table) == {int(c) for c in ExitCode}
    assert all(meaning.strip(" -") for meaning in table.values()), table


def test_slurm_failures_have_their_own_code() -> None:
    assert exitcodes.slurm_failed() is ExitCode.SLURM_FAILED
    assert ExitCode.SLURM_FAILED not in (ExitCode.APPLY_FAILED, ExitCode.USAGE)
    assert "slurm-health" in _readme_table()[ExitCode.SLURM_FAILED]


def test_the_codes_are_never_renumbered() -> None:
    assert {c.name: int(c) for c in ExitCode} == {
        "OK": 0,
        "FINDINGS": 1,
        "USAGE": 2,
        "NOT_EVALUATED": 3,
        "INTERNAL": 4,
        "APPLY_FAILED": 5,
        "SLURM_FAILED": 6,
        "INTERRUPTED": 130,
    }


def test_findings_win_over_not_evaluated_which_counts_only_under_strict() -> None:
    gate = exitcodes.gate
    assert gate(findings=True, not_evaluated=True, strict=True) is ExitCode.FINDINGS
    assert gate(findings=False, not_evaluated=True, strict=True) is ExitCode.NOT_EVALUATED
    assert gate(findings=False, not_evaluated=True, strict=False) is ExitCode.OK
    assert exitcodes.results_gate([Status.ERROR, Status.WARN], "warn", True) is ExitCode.FINDINGS
    assert exitcodes.fleet_gate(nodes=0, findings=False, not_evaluated=False, strict=False) == 2


def test_runs_and_actions() -> None:
    assert exitcodes.run(interrupted=True, findings=True) is ExitCode.INTERRUPTED
    assert exitcodes.run(interrupted=False, findings=True) is ExitCode.FINDINGS
    assert exitcodes.action(failed=True, interrupted=False) is ExitCode.APPLY_FAILED
    assert exitcodes.action(failed=True, interrupted=True) is ExitCode.INTERRUPTED
    assert exitcodes.action(failed=False, interrupted=False) is ExitCode.OK
