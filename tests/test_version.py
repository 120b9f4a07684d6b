"""``--version`` says what a bug report needs (issue 40): before, it printed only the
number. Each line is ``key: value``, plain, read here against where each value comes from."""

from __future__ import annotations

import subprocess
import sys
import types
from importlib import metadata

import pytest

import blackwell_doctor
from blackwell_doctor import __version__
from blackwell_doctor.collect import about
from blackwell_doctor.facts.document import SCHEMA_VERSION
from blackwell_doctor.report.bench import BENCH_SCHEMA_VERSION, COMPARE_SCHEMA_VERSION
from blackwell_doctor.report.check import REPORT_SCHEMA_VERSION
from blackwell_doctor.report.fleet import FLEET_SCHEMA_VERSION
from blackwell_doctor.report.model import MODEL_SCHEMA_VERSION
from blackwell_doctor.ruledata.resources import data_dir
from tests.cli import run
from tests.conftest import REPO


def _lines(capsys: pytest.CaptureFixture[str]) -> tuple[str, dict[str, str]]:
    code, out, err = run(["--version"], capsys)
    assert (code, err) == (0, "")
    first, *rest = out.splitlines()
    return first, dict(line.split(": ", 1) for line in rest)


def test_version_names_commit_data_schemas_python_and_bindings(
    capsys: pytest.CaptureFixture[str],
) -> None:
    first, fields = _lines(capsys)
    assert first == f"blackwell-doctor {__version__}"
    assert list(fields) == [
        "commit",
        "catalogue",
        "schemas",
        "python",
        "nvidia-ml-py",
        "cuda-bindings",
        "nvidia-cuda-nvrtc",
    ]
    head = subprocess.run(
        ["git", "-C", str(REPO), "rev-parse", "--short=12", "HEAD"],
        capture_output=True,
        text=True,
        check=True,
        timeout=30,
    ).stdout.strip()
    if (about._CHECKOUT / ".git").exists():  # run from src/ (PYTHONPATH=src)
        assert fields["commit"] == f"{head} (source checkout)"
    else:  # the installed wheel (.ci/run): the commit it was built from, this checkout's
        assert len(fields["commit"]) >= 7
        assert head.startswith(fields["commit"]) or fields["commit"].startswith(head)
    files = len(list(data_dir("checks").glob("*.toml")))
    assert fields["catalogue"].startswith(f"checks/ ({files} files) sha256 ")
    schemas = dict(s.rsplit(" ", 1) for s in fields["schemas"].split(", "))
    assert {k: int(v) for k, v in schemas.items()}.items() >= {
        "facts": SCHEMA_VERSION,
        "report": REPORT_SCHEMA_VERSION,
        "bench": BENCH_SCHEMA_VERSION,
        "bench-compare": COMPARE_SCHEMA_VERSION,
        "fleet": FLEET_SCHEMA_VERSION,
        "model": MODEL_SCHEMA_VERSION,
    }.items()
    assert fields["python"].startswith(f"{sys.version.split()[0]} ")
    for name in ("nvidia-ml-py", "cuda-bindings", "nvidia-cuda-nvrtc"):
        assert fields[name] == metadata.version(name)


def test_version_of_a_built_install_gives_the_build_commit(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # hatch-vcs writes _version.py with setuptools-scm's template: __commit_id__ = "g<hash>".
    built = types.ModuleType("blackwell_doctor._version")
    built.__commit_id__ = "g1a2b3c4d"  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "blackwell_doctor._version", built)
    # A `from blackwell_doctor import _version` reads the package's attribute first, set
    # once the real module (a build's, or a stale one in a checkout) has been imported.
    monkeypatch.setattr(blackwell_doctor, "_version", built, raising=False)
    monkeypatch.setattr(about, "_checkout_commit", lambda: None)  # installed: no checkout
    assert about.read_about("0.2.1").commit == "1a2b3c4d"


@pytest.mark.parametrize(
    ("version", "commit"),
    [
        ("0.1.dev659+gbfb2f62f2", "bfb2f62f2"),
        ("0.1.dev659+gbfb2f62f2.d20261128", "bfb2f62f2"),
        ("0.2.1", None),  # a tagged build: no local part
    ],
)
def test_a_build_without_a_commit_id_takes_it_from_the_versions_local_part(
    monkeypatch: pytest.MonkeyPatch, version: str, commit: str | None
) -> None:
    # hatch-vcs wrote __commit_id__ = None in CI's wheel; its version still said +g<hash>.
    built = types.ModuleType("blackwell_doctor._version")
    built.__commit_id__ = None  # type: ignore[attr-defined]
    monkeypatch.setitem(sys.modules, "blackwell_doctor._version", built)
    monkeypatch.setattr(blackwell_doctor, "_version", built, raising=False)
    monkeypatch.setattr(about, "_checkout_commit", lambda: None)
    expected = commit if commit is not None else "unknown (not built from git)"
    assert about.read_about(version).commit == expected


def test_version_says_a_missing_binding_is_not_installed(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(about, "BINDINGS", ("nvidia-ml-py", "no-such-distribution-xyz"))
    assert about.read_about("0.2.1").bindings["no-such-distribution-xyz"] == "not installed"


def test_version_imports_no_gpu_binding() -> None:
    code = (
        "import sys; from blackwell_doctor.cli import main; main(['--version']); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in ('pynvml', 'cuda')))"
    )
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
        env={"PYTHONPATH": str(REPO / "src")},
    ).stdout
    assert out.splitlines()[-1] == "[]"
