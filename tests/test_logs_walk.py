"""A directory scan reads log files only (issue 40: ``scan-logs /tmp`` read 241,399 files of
virtual environments, ``.git`` and bytecode in 4 min 13 s, and reported the example lines of
the tool's own ``log_signatures.toml`` as findings).

The tree is real: a virtual environment made by ``python -m venv``, a repository made by
``git init``, a copy of the package's shipped ``checks/`` (every signature's text is in its
TOML), the package's own data folders linked in, a real ELF binary and bytecode named like
logs, caches, and real log excerpts from ``tests/fixtures/logs`` in every format a walk
reads (plain, rotated and gzipped, Docker json-file, a journal export). The log findings
must all be found, and nothing else."""

from __future__ import annotations

import gzip
import json
import os
import py_compile
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.scan import ScanProgress, scan_sources
from blackwell_doctor.collect.logs.walk import log_named
from blackwell_doctor.facts.document import LogFacts
from blackwell_doctor.ruledata.resources import data_dir
from tests.cli import run
from tests.conftest import FIXTURES, REPO

LOGS = FIXTURES / "logs"
ESCAPED = LOGS / "flashinfer-2077-tma-escaped.log"  # moe.tma_ws_init_failed, line 2
WSL = LOGS / "vllm-1084-wsl-pin-memory.log"  # vllm.wsl_no_pin_memory, line 1
DOCKER = LOGS / "composed-sglang-custom-ar-v2-docker-json.log"  # Docker json-file


def _scan(path: Path, progress: list[ScanProgress] | None = None) -> LogFacts:
    def seen(state: ScanProgress) -> None:
        assert progress is not None
        progress.append(ScanProgress(state.sources, state.bytes, state.skipped, state.current))

    return scan_sources(
        paths=[str(path)],
        containers=[],
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
        progress=None if progress is None else seen,
    )


@pytest.fixture(scope="module")
def tree(tmp_path_factory: pytest.TempPathFactory) -> Path:
    root = tmp_path_factory.mktemp("tree")
    escaped = ESCAPED.read_bytes()
    # Real logs, in the forms a walk reads.
    (root / "serving").mkdir()
    shutil.copy(ESCAPED, root / "serving" / "vllm.log")
    (root / "serving" / "vllm.log.1.gz").write_bytes(gzip.compress(WSL.read_bytes()))
    shutil.copy(DOCKER, root / "serving" / "0123abcd-json.log")
    (root / "serving" / "slurm-4242.out").write_bytes(escaped)
    export = "".join(
        f"__CURSOR=s;i={n}\n__REALTIME_TIMESTAMP={n}\nPRIORITY=3\nMESSAGE={line}\n\n"
        for n, line in enumerate(escaped.decode().splitlines(), 1)
    )
    (root / "serving" / "boot.export").write_text(export)
    # A real virtual environment, with a log inside it that must not be read.
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(root / "venv")], check=True)
    (root / "venv" / "pip.log").write_bytes(escaped)
    # A real repository, with a log-named file in its .git.
    subprocess.run(["git", "init", "-q", str(root / "repo")], check=True)
    (root / "repo" / ".git" / "fetch.log").write_bytes(escaped)
    shutil.copy(WSL, root / "repo" / "notes.txt")  # a worktree's own log is read
    # A copy of the package's catalogues: every signature's text, in TOML.
    shutil.copytree(data_dir("checks"), root / "data-copy" / "checks")
    # The package's own data folders themselves, linked into the tree.
    (root / "own-checks").symlink_to(data_dir("checks"), target_is_directory=True)
    (root / "own-examples").symlink_to(data_dir("examples"), target_is_directory=True)
    # Caches: bytecode of a module holding a signature's text, node_modules, a tagged cache.
    src = root / "app" / "mod.py"
    src.parent.mkdir()
    src.write_text(f"MESSAGE = {escaped.decode()!r}\n")
    py_compile.compile(str(src), cfile=str(root / "app" / "__pycache__" / "mod.cpython.log"))
    (root / "app" / "node_modules").mkdir()
    (root / "app" / "node_modules" / "npm-debug.log").write_bytes(escaped)
    (root / "build-cache").mkdir()
    (root / "build-cache" / "CACHEDIR.TAG").write_bytes(
        b"Signature: 8a477f597d28d172789f06886806bc55\n# a cache, per bford.info/cachedir\n"
    )
    (root / "build-cache" / "run.log").write_bytes(escaped)
    # Binary files named like logs: a real ELF (this interpreter) and a gzipped one.
    shutil.copy(os.path.realpath(sys.executable), root / "python.log")
    (root / "core.log.2.gz").write_bytes(gzip.compress(Path(sys.executable).read_bytes()[:65536]))
    # Not named like a log, with a signature's text: passed over by name.
    (root / "app" / "config.json").write_text(json.dumps({"note": escaped.decode()}))
    (root / "app" / "messages.json").write_text(json.dumps({"note": escaped.decode()}) + "\n")
    return root


def test_only_the_logs_are_read_and_every_log_finding_is_found(tree: Path) -> None:
    got = _scan(tree)
    read = sorted(str(Path(s.name).relative_to(tree)) for s in got.sources)
    assert read == [
        "repo/notes.txt",
        "serving/0123abcd-json.log",
        "serving/boot.export",
        "serving/slurm-4242.out",
        "serving/vllm.log",
        "serving/vllm.log.1.gz",
    ]
    assert all(s.error is None for s in got.sources)
    found = {(str(Path(f.path).relative_to(tree)), f.signature) for f in got.findings}
    assert {
        ("serving/vllm.log", "moe.tma_ws_init_failed"),
        ("serving/slurm-4242.out", "moe.tma_ws_init_failed"),
        ("serving/boot.export", "moe.tma_ws_init_failed"),
        ("serving/vllm.log.1.gz", "vllm.wsl_no_pin_memory"),
        ("repo/notes.txt", "vllm.wsl_no_pin_memory"),
    } <= found
    # The Docker json-file excerpt's own finding, as a scan of the file alone gives it.
    alone = {f.signature for f in _scan(tree / "serving" / "0123abcd-json.log").findings}
    assert alone
    assert alone <= {sig for path, sig in found if path.endswith("-json.log")}
    # Nothing from the catalogue copy, the tool's own data, the venv, .git, caches, binaries.
    assert {path.split("/")[0] for path, _ in found} == {"serving", "repo"}


def test_what_was_skipped_is_counted_by_reason(tree: Path) -> None:
    got = _scan(tree)
    toml_files = len(list(data_dir("checks").glob("*")))
    assert got.skipped == {
        "vcs": 1,
        "virtualenv": 1,
        "cache": 3,  # __pycache__, node_modules, the CACHEDIR.TAG directory
        "tool-data": 2,
        # the catalogue copy's files, mod.py, config.json, messages.json (no journal record)
        "not-log-named": toml_files + 3,
        "binary": 2,  # python.log, core.log.2.gz (after gunzip)
    }


def test_the_scan_reports_its_progress(tree: Path) -> None:
    seen: list[ScanProgress] = []
    got = _scan(tree, seen)
    last = seen[-1]
    assert (last.sources, last.skipped) == (len(got.sources), sum(got.skipped.values()))
    assert last.bytes == sum(s.bytes for s in got.sources)
    assert [p.sources + p.skipped for p in seen] == list(range(1, len(seen) + 1))


def test_every_format_says_what_was_skipped(tree: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["scan-logs", "-f", "json", str(tree)], capsys)
    assert code == 1
    doc = json.loads(out)
    assert doc["skipped"]["virtualenv"] == 1
    inputs = next(r for r in doc["results"] if r["id"] == "logs.inputs")
    assert "skipped in directories: 1 VCS directory, 1 virtual environment" in inputs["summary"]
    code, out, _ = run(["scan-logs", str(tree)], capsys)
    assert "Skipped in directories: 1 VCS directory, 1 virtual environment, 3 cache" in out
    # check --logs judges the same scan: its logs.inputs result says it too.
    facts = str(FIXTURES / "facts" / "b200-x8.json")
    code, out, _ = run(["check", "--facts", facts, "--logs", str(tree), "-f", "json"], capsys)
    result = next(r for r in json.loads(out)["results"] if r["id"] == "logs.inputs")
    assert "2 binary files" in result["summary"]


def test_a_directory_with_no_log_is_one_line_saying_what_was_skipped(
    tree: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["scan-logs", str(tree / "data-copy")], capsys)
    assert (code, out) == (2, "")
    n = len(list(data_dir("checks").glob("*")))
    assert err == (
        f"blackwell-doctor: error: no log could be read (no-log-file:{tree / 'data-copy'}; "
        f"skipped: {n} files not named like a log)\n"
    )


@pytest.mark.parametrize(
    ("name", "read"),
    [
        ("vllm.log", True),
        ("server.txt", True),
        ("slurm-77.out", True),
        ("job.err", True),
        ("syslog", True),
        ("syslog.1", True),
        ("messages-20250131", True),
        ("kern.log.3.gz", True),
        ("0.log.20250131-103000", True),  # the kubelet's rotation
        ("vllm.log-20250131.gz", True),  # logrotate dateext, compressed
        ("abc-json.log.1", True),  # Docker json-file, rotated
        ("log_signatures.toml", False),
        ("mod.pyc", False),
        ("config.json", False),  # read only when its first record is a log record
        ("archive.tar.gz", False),
        ("catalog.py", False),
    ],
)
def test_which_names_are_logs(name: str, read: bool) -> None:
    assert log_named(name) is read


def test_a_file_named_on_the_command_line_is_read_whatever_its_name(tmp_path: Path) -> None:
    named = tmp_path / "capture.dat"
    named.write_bytes(ESCAPED.read_bytes())
    got = _scan(named)
    assert {f.signature for f in got.findings} >= {"moe.tma_ws_init_failed"}
    assert got.skipped == {}


def test_many_sources_of_one_signature_are_capped_and_counted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    for n in range(12):
        shutil.copy(ESCAPED, tmp_path / f"worker-{n:02}.log")
    code, out, _ = run(["scan-logs", str(tmp_path)], capsys)
    assert code == 1
    section = out[out.index("moe.tma_ws_init_failed (fail") :]
    assert section.count("| (Worker_PP0") == 5
    assert "... and 7 more not listed here, in 7 source(s) (7 occurrences" in section
    # The check's own summary: the first finding, the rest counted.
    first = f"moe.tma_ws_init_failed (1x, first at {tmp_path / 'worker-00.log'}:2; "
    flat = " ".join(out.split())  # however the row wraps (its indent follows the tag)
    assert first + "11 more finding(s), 11x in 11 source(s))" in flat
    code, out, _ = run(["scan-logs", "-f", "json", str(tmp_path)], capsys)
    doc = json.loads(out)
    assert len([f for f in doc["findings"] if f["signature"] == "moe.tma_ws_init_failed"]) == 12
    moe = next(r for r in doc["results"] if r["id"] == "logs.moe_kernels")
    assert moe["evidence"]["moe.tma_ws_init_failed: more"] == (
        "7 more finding(s), 7x in 7 source(s)"
    )


def _scan_logs_argv(path: Path) -> list[str]:
    return [sys.executable, "-m", "blackwell_doctor", "scan-logs", "-f", "json", str(path)]


def _env() -> dict[str, str]:
    return {**os.environ, "PYTHONPATH": str(REPO / "src"), "TERM": "xterm", "COLUMNS": "100"}


def test_the_live_count_is_shown_on_a_terminal_only(tree: Path) -> None:
    """On a terminal (a pty) standard error shows the count as it goes, drawn at the first
    file; in a pipe it stays empty (the report on stdout is the same)."""
    piped = subprocess.run(_scan_logs_argv(tree), capture_output=True, env=_env(), check=False)
    assert piped.returncode == 1
    assert piped.stderr == b""
    primary, secondary = os.openpty()
    try:
        with subprocess.Popen(
            _scan_logs_argv(tree), stdout=subprocess.PIPE, stderr=secondary, env=_env()
        ) as proc:
            os.close(secondary)
            out, _ = proc.communicate()
            shown = b""
            while True:
                try:
                    data = os.read(primary, 65536)
                except OSError:  # EIO: the child's end is closed, all was read
                    break
                if not data:
                    break
                shown += data
    finally:
        os.close(primary)
    assert proc.returncode == 1
    assert json.loads(out) == json.loads(piped.stdout)
    assert b"scanning: " in shown
    assert b" skipped; " in shown
