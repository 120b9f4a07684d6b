"""An input the user named that cannot be used is exit 2, on every command, in one line on
standard error (docs/exit-codes.md; issue 40: ``check --model-dir DIR`` with no usable
config.json gave three ``[error]`` rows and exit 0 while ``model DIR`` gave exit 2;
``scan-logs /nonexistent.log`` printed the error and a 37-line report; ``bench --url`` where
nothing listens printed to stdout with exit 1; ``audit --python /usr/bin/nonexistent`` said
"start-failed after 10 s")."""

from __future__ import annotations

import socket
import subprocess
import sys
from pathlib import Path

import pytest

from blackwell_doctor.cli.commands import COMMANDS, command_name
from tests.cli import run
from tests.conftest import FIXTURES

B200 = str(FIXTURES / "facts" / "b200-x8.json")


@pytest.fixture(scope="module")
def inputs(tmp_path_factory: pytest.TempPathFactory) -> dict[str, str]:
    """Inputs that cannot be used: each exists (or not) as a user would name it."""
    root = tmp_path_factory.mktemp("inputs")
    no_config = root / "model-without-config"
    no_config.mkdir()
    (no_config / "README.md").write_text("# weights not downloaded yet\n")
    bad_config = root / "model-bad-config"
    bad_config.mkdir()
    (bad_config / "config.json").write_text('{"architectures": ["Qwen3MoeForCausalLM"],')
    no_logs = root / "no-logs"
    (no_logs / ".git").mkdir(parents=True)
    (no_logs / "notes.md").write_text("nothing logged here\n")
    bare_venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(bare_venv)], check=True)
    with socket.socket() as s:  # a port nothing listens on once it is closed
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    return {
        "missing": str(root / "missing.json"),
        "no_config": str(no_config),
        "bad_config": str(bad_config),
        "no_logs": str(no_logs),
        "missing_log": str(root / "missing.log"),
        "bare_python": str(bare_venv / "bin" / "python"),
        "closed_url": f"http://127.0.0.1:{port}",
        "not_a_dir": B200,
        "unwritable": str(root / "no-such-dir" / "out.txt"),
    }


# (command, argv with {placeholders}, what the one line says). Every command that takes an
# input is here (test_every_command_is_covered).
CASES: list[tuple[str, list[str], str]] = [
    ("check", ["--facts", "{missing}"], "cannot read facts file {missing}: No such file"),
    (
        "check",
        ["--facts", B200, "--model-dir", "{no_config}"],
        "--model-dir {no_config}: no usable config.json (missing",
    ),
    (
        "check",
        ["--facts", B200, "--model-dir", "{bad_config}"],
        "--model-dir {bad_config}: no usable config.json (not valid JSON",
    ),
    (
        "check",
        ["--facts", B200, "--logs", "{missing_log}"],
        "--logs: no log could be read (not-found:{missing_log})",
    ),
    (
        "check",
        ["--facts", B200, "--logs", "{no_logs}"],
        "--logs: no log could be read (no-log-file:{no_logs}; skipped: 1 VCS directory",
    ),
    ("check", ["--facts", B200, "--bench", "{missing}"], "cannot read bench file {missing}"),
    (
        "check",
        ["--host-root", "{not_a_dir}", "--no-probe"],
        "--host-root {not_a_dir} is not a directory",
    ),
    (
        "check",
        ["--facts", B200, "--stack", "--python", "{missing}"],
        "--python {missing}: no such file",
    ),
    (
        "collect",
        ["--no-probe", "--model-dir", "{no_config}", "-o", "{unwritable}"],
        "--model-dir {no_config}: no usable config.json",
    ),
    (
        "collect",
        ["--no-probe", "--host-root", "{missing}"],
        "--host-root {missing} is not a directory",
    ),
    (
        "probe",
        ["--plan", "--smem-limit", "101376", "-o", "{unwritable}"],
        "cannot write {unwritable}",
    ),
    ("scan-logs", ["{missing_log}"], "no log could be read (not-found:{missing_log})"),
    (
        "scan-logs",
        ["{no_logs}"],
        "(no-log-file:{no_logs}; skipped: 1 VCS directory, 1 file not named like a log)",
    ),
    ("recommend", ["--facts", "{missing}"], "cannot read facts file {missing}"),
    (
        "recommend",
        ["--facts", B200, "--logs", "{missing_log}"],
        "--logs: no log could be read (not-found:{missing_log})",
    ),
    ("recommend", ["--facts", B200, "--bench", "{missing}"], "cannot read bench file {missing}"),
    (
        "apply",
        ["--facts", "{missing}", "--model-dir", "{no_config}"],
        "cannot read facts file {missing}",
    ),
    (
        "apply",
        [
            "--facts",
            B200,
            "--facts-from-another-host",
            "--model-dir",
            "{no_config}",
            "--logs",
            "{no_logs}",
        ],
        "--logs: no log could be read (no-log-file:{no_logs}",
    ),
    ("model", ["{no_config}", "--facts", B200], "{no_config}: no usable config.json (missing"),
    ("model", ["{missing}", "--facts", B200], "{missing} is not a directory"),
    ("fleet", ["{missing}"], "not one node could be judged: {missing}: no such file or directory"),
    ("slurm-health", ["--facts", "{missing}", "--dry-run"], "cannot read facts file {missing}"),
    (
        "bench",
        ["--url", "{closed_url}"],
        "--url {closed_url}: nothing answers there (cannot connect to",
    ),
    ("bench", ["--compare", "{missing}", B200], "cannot read bench file {missing}"),
    ("audit", ["--python", "{missing}", "--facts", B200], "--python {missing}: no such file"),
    (
        "audit",
        ["--python", "{no_config}", "--facts", B200],
        "--python {no_config}: a directory, not a Python interpreter",
    ),
    ("audit", ["--python", "{bare_python}", "--facts", B200], "nothing to audit: "),
    (
        "audit",
        ["--facts", B200, "--model-dir", "{no_config}"],
        "--model-dir {no_config}: no usable config.json",
    ),
]


@pytest.mark.parametrize(
    ("command", "argv", "says"), CASES, ids=[f"{c} {' '.join(a)}" for c, a, _ in CASES]
)
def test_an_input_that_cannot_be_used_is_exit_2_in_one_line(
    command: str,
    argv: list[str],
    says: str,
    inputs: dict[str, str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    args = [a.format(**inputs) for a in argv]
    code, out, err = run([command, *args], capsys)
    assert code == 2, (out[-800:], err)
    assert err.startswith("blackwell-doctor: error: "), err
    assert err.count("\n") == 1, err
    assert says.format(**inputs) in err
    assert "Traceback" not in err
    # fleet lists each file it could not judge in its document; the others print nothing.
    assert out == "" or command == "fleet"
    assert not Path(inputs["unwritable"]).exists()


def test_a_model_directory_not_downloaded_yet_is_a_launch_not_sized(
    inputs: dict[str, str], capsys: pytest.CaptureFixture[str]
) -> None:
    """recommend and apply mount the directory for the runtime: one with no config.json yet
    is a launch that is not sized (tests/test_recommend_model.py), while the commands that
    judge the model refuse it (above)."""
    code, out, err = run(["recommend", "--facts", B200, "--model-dir", inputs["no_config"]], capsys)
    assert code in (0, 1), err
    assert "the model was not sized" in out


def test_every_command_is_covered() -> None:
    """A command added later gets its row (``examples`` takes no input)."""
    covered = {c for c, _, _ in CASES}
    assert covered == {command_name(m) for m in COMMANDS} - {"examples"}


def test_the_exit_codes_page_says_it_for_every_command() -> None:
    page = (Path(__file__).resolve().parents[1] / "docs" / "exit-codes.md").read_text()
    section = page[page.index("## An input that cannot be used") :]
    for name in {command_name(m) for m in COMMANDS} - {"examples"}:
        assert f"| `{name}` |" in section, name
