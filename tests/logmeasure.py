"""The one measurement the held-out log sets share (tests/test_logs_heldout.py,
test_logs_fresh_a.py, test_logs_fresh_b.py) and the log-end property test: a log file's
worst severity under today's rules, and the confusion counts of a set's results."""

from __future__ import annotations

from pathlib import Path

from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.rules.logs import judge_findings

ORDER = {"none": 0, "info": 1, "warn": 2, "fail": 3}


def worst(path: Path) -> str:
    """The worst severity the rules give the log at ``path`` scanned alone ("none": none)."""
    facts = scan_sources(
        paths=[str(path)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    assert all(s.error is None for s in facts.sources), facts.sources
    return max((f.severity for f in judge_findings(facts)), key=ORDER.__getitem__, default="none")


def confusion(
    measured: dict[str, tuple[str, str]], got: dict[str, str]
) -> tuple[int, int, int, int]:
    """(true pos., false pos., false neg., true neg.) of ``got`` against the expected
    severities of ``measured``: a problem is an expected warn or fail, flagged a got one."""
    problem = {n: ORDER[e] >= ORDER["warn"] for n, (e, _) in measured.items()}
    flagged = {n: ORDER[got[n]] >= ORDER["warn"] for n in measured}
    tp = sum(problem[n] and flagged[n] for n in measured)
    fp = sum(flagged[n] and not problem[n] for n in measured)
    fn = sum(problem[n] and not flagged[n] for n in measured)
    return tp, fp, fn, len(measured) - tp - fp - fn
