"""scan-logs: formats, exit codes, source errors, run through the real CLI and its error
boundary (tests/cli.py)."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.cli import run
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"
ESCAPED = LOGS / "flashinfer-2077-tma-escaped.log"
HEALTHY = LOGS / "vllm-31085-healthy-sm120-startup.log"
MARLIN = LOGS / "composed-vllm-marlin-auto.log"
B200 = FIXTURES / "facts" / "b200-x8.json"


def test_json_document(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["scan-logs", "--format", "json", str(ESCAPED)], capsys)
    doc = json.loads(out)
    assert code == 1 == doc["exit_code"]
    assert doc["schema_version"] == 2
    assert doc["tool"]["name"] == "blackwell-doctor"
    # The logs checks' results, as `check --logs` gives them, beside the judged findings.
    assert doc["preset"] == "scan-logs"
    results = {r["id"]: r for r in doc["results"]}
    assert set(results) == {
        "logs.moe_kernels", "logs.arch_support", "logs.p2p", "logs.platform",
        "logs.kernel_events", "logs.inputs",
    }  # fmt: skip
    assert results["logs.moe_kernels"]["status"] == "fail"
    assert "moe.tma_ws_init_failed" in results["logs.moe_kernels"]["summary"]
    assert doc["summary"]["fail"] == 1
    (finding,) = doc["findings"]
    assert finding == {
        "signature": "moe.tma_ws_init_failed",
        "severity": "fail",
        "check": "logs.moe_kernels",
        "path": str(ESCAPED),
        "line": 2,
        "last_line": 2,
        "count": 1,
        "excerpt": finding["excerpt"],
        "action": None,  # no step for the node: its remedy fixes it (issue 39)
    }
    assert doc["sources"][0]["lines"] == 2
    assert doc["node"]["verdict"] == "degraded"


def test_healthy_log_exits_0(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["scan-logs", str(HEALTHY)], capsys)
    assert code == 0
    assert "No signatures found." in out


def test_fail_on_warn(capsys: pytest.CaptureFixture[str]) -> None:
    assert run(["scan-logs", str(MARLIN)], capsys)[0] == 0
    assert run(["scan-logs", "--fail-on", "warn", str(MARLIN)], capsys)[0] == 1


def test_text_groups_by_signature_with_meaning_and_remedy(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["scan-logs", str(ESCAPED), str(ESCAPED)], capsys)
    assert code == 1
    assert out.count("moe.tma_ws_init_failed (fail, logs.moe_kernels): 2 occurrence(s)") == 1
    assert out.count("line 2, 1x, fail") == 2
    assert "  | (Worker_PP0 pid=38385) ERROR 11-11 06:43:10" in out
    assert "What it means:" in out
    # The remedy is logs.moe_kernels', as `check --logs` prints it.
    assert re.search(r"\[FAIL\] +logs\.moe_kernels", out)
    assert "Upgrade FlashInfer" in out
    assert "$ pip install -U 'flashinfer-python>=0.6.11'" in out
    assert "exit 1 (non-zero on a failure)" in out


def test_unreadable_among_readable_is_shown_not_fatal(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "gone.log"
    code, out, _ = run(["scan-logs", "-f", "json", str(HEALTHY), str(missing)], capsys)
    assert code == 0
    assert json.loads(out)["sources"][1]["error"] == f"not-found:{missing}"


@pytest.mark.parametrize("fmt", ["rich", "json"])
def test_nothing_readable_is_one_line_as_check_logs_says_it(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: scan-logs printed its error and a 37-line report; `check --logs` one line.
    One behaviour: the same line (bar the option's name), exit 2, nothing on stdout."""
    gone = tmp_path / "gone.log"
    code, out, err = run(["scan-logs", "-f", fmt, str(gone)], capsys)
    assert (code, out) == (2, "")
    assert err == f"blackwell-doctor: error: no log could be read (not-found:{gone})\n"
    code, out, check_err = run(["check", "--facts", str(B200), "--logs", str(gone)], capsys)
    assert (code, out) == (2, "")
    assert check_err == err.replace("error: ", "error: --logs: ")


def test_no_input_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["scan-logs"], capsys)
    assert code == 2
    # The error boundary's one line, on standard error (the test's own boundary, before
    # tests/cli.py, printed it to standard output).
    assert out == ""
    assert err.startswith("blackwell-doctor: error: ")
    assert "needs a PATH" in err


def test_output_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    target = tmp_path / "scan.json"
    code, out, _ = run(["scan-logs", "-f", "json", "-o", str(target), str(ESCAPED)], capsys)
    assert code == 1
    assert out == ""
    assert json.loads(target.read_text())["findings"][0]["line"] == 2


def test_unreadable_among_readable_is_a_warn_finding(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    missing = tmp_path / "gone.log"
    # The line that names the path is as long as the temporary folder's path: wide enough
    # for any (under pytest-xdist a worker's folder is one level deeper, and at 80 columns
    # the line wrapped).
    monkeypatch.setenv("COLUMNS", str(len(str(missing)) + 80))
    code, out, _ = run(["scan-logs", "-f", "json", "--fail-on", "warn", str(HEALTHY),
                        str(missing)], capsys)  # fmt: skip
    assert code == 1
    (finding,) = json.loads(out)["findings"]
    assert finding["signature"] == "input.unreadable"
    assert (finding["severity"], finding["path"]) == ("warn", str(missing))
    code, out, _ = run(["scan-logs", str(HEALTHY), str(missing)], capsys)
    assert code == 0
    assert "input.unreadable (warn, logs.inputs): 1 occurrence(s)" in out
    assert re.search(r"\[warn\] +logs\.inputs", out)
    assert f"{missing}: not read, 1x, warn" in out
    assert "What it means: A log input could not be read at all" in out
