"""The offline install (docs/install.md, "Offline"): a wheelhouse built by the documented
command (tools/wheelhouse.py build) installs into a fresh virtual environment with the index
unreachable, and the command runs; a wheelhouse for another Python or platform is refused
in one line before anything is installed.

The wheelhouse is built here from CI's cache of the dependencies (ci/wheelhouse.sh, which
made that cache with the same command against the index) and this checkout's own wheel."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.tags import platform_tags, sys_tags
from packaging.utils import parse_wheel_filename
from tools import wheelhouse as wh

from tests.conftest import REPO
from tests.offline import offline_env

SCRIPT = REPO / "tools" / "wheelhouse.py"


def _run(argv: list[str], home: Path, timeout: int = 600) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        argv, capture_output=True, text=True, env=offline_env(home), timeout=timeout, check=False
    )


def test_the_index_is_unreachable_for_these_tests(tmp_path: Path) -> None:
    # The control: with this environment pip cannot download anything, so an install that
    # succeeds below took every file from the wheelhouse.
    proc = _run(
        [sys.executable, "-m", "pip", "download", "--no-deps", "-d", str(tmp_path), "msgspec"],
        tmp_path,
        timeout=120,
    )
    assert proc.returncode != 0
    # Its only index is the closed port (no pip.conf, no find-links), which gave nothing.
    [looking] = [line for line in proc.stdout.splitlines() if line.startswith("Looking in")]
    assert looking.startswith("Looking in indexes: http://127.0.0.1:"), proc.stdout
    assert "(from versions: none)" in proc.stderr
    assert not list(tmp_path.glob("*.whl"))


def test_the_wheelhouse_holds_the_package_its_dependencies_and_its_target(
    offline_wheelhouse: Path, built_dist: Path
) -> None:
    target = json.loads((offline_wheelhouse / wh.TARGET_FILE).read_text())
    [ours] = offline_wheelhouse.glob("blackwell_doctor-*.whl")
    [released] = built_dist.glob("blackwell_doctor-*.whl")
    assert ours.name == released.name  # the same version as `python -m build` of the checkout
    assert target["version"] == ours.name.split("-")[1]
    assert target["python"] == f"{sys.version_info[0]}.{sys.version_info[1]}"
    assert target["platforms"] == wh.platform_ladder(target["platform"])
    names = {parse_wheel_filename(p.name)[0] for p in offline_wheelhouse.glob("*.whl")}
    # Every runtime dependency of pyproject.toml, the build backend, pip and packaging.
    assert {"typer", "rich", "msgspec", "nvidia-ml-py", "cuda-bindings", "docker"} <= names
    assert {"hatchling", "hatch-vcs", "pip", "packaging"} <= names
    assert (offline_wheelhouse / wh.SCRIPT_NAME).read_bytes() == SCRIPT.read_bytes()


def test_it_installs_with_the_index_unreachable_and_runs(
    offline_wheelhouse: Path, tmp_path: Path
) -> None:
    venv = tmp_path / "opt" / "blackwell-doctor"
    script = offline_wheelhouse / wh.SCRIPT_NAME
    proc = _run([sys.executable, str(script), "install", str(venv)], tmp_path)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    command = venv / "bin" / "blackwell-doctor"
    assert "installed blackwell-doctor" in proc.stdout
    # No pip left in it: it was run from the wheelhouse's wheel.
    assert not list((venv / "lib").glob("python3*/site-packages/pip"))
    example = subprocess.run(
        [str(command), "check", "--example", "wsl2-rtxpro6000x4", "--select", "driver"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert example.returncode == 1, example.stderr  # the example's findings, not a crash
    assert re.search(r"\[FAIL\] +driver\.version", example.stdout)
    target = json.loads((offline_wheelhouse / wh.TARGET_FILE).read_text())
    version = subprocess.run(
        [str(command), "--version"], capture_output=True, text=True, timeout=60, check=True
    )
    assert version.stdout.splitlines()[0] == f"blackwell-doctor {target['version']}"


def test_a_wheelhouse_for_another_python_and_platform_is_refused(
    wheelhouse_cache: Path, built_dist: Path, tmp_path: Path
) -> None:
    # A real one: the documented command for CPython 3.12 on aarch64 (its one binary wheel,
    # msgspec, from CI's cache; --no-deps keeps it small).
    [wheel] = built_dist.glob("blackwell_doctor-*.whl")
    [msgspec] = (wheelhouse_cache / "foreign").glob("msgspec-*.whl")
    house = tmp_path / "wheelhouse-arm"
    build = _run(
        [sys.executable, str(SCRIPT), "build", "--python", "3.12", "--platform",
         "manylinux_2_28_aarch64", "-o", str(house), str(wheel), str(msgspec), "--",
         "--no-deps", "--no-index", "--find-links", str(wheelhouse_cache / "host")],
        tmp_path,
    )  # fmt: skip
    assert build.returncode == 0, build.stderr[-3000:]
    venv = tmp_path / "venv"
    proc = _run([sys.executable, str(house / wh.SCRIPT_NAME), "install", str(venv)], tmp_path)
    assert proc.returncode == 2
    assert proc.stdout == ""
    [line] = proc.stderr.splitlines()
    assert "was built for CPython 3.12 on manylinux_2_28_aarch64" in line
    assert msgspec.name in line
    assert f"python3 tools/wheelhouse.py build --python {sys.version_info[0]}." in line
    assert "Traceback" not in proc.stderr
    assert not venv.exists()  # refused before anything was made


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["build", "--python", "2.7"], "needs Python 3.11 or newer"),
        (["build", "--python", "three"], "is not a Python version"),
        (["build", "--platform", "x86_64"], "is not a platform tag"),
        (["build", "--platform", "manylinux_3_1_x86_64"], "glibc 2.x"),
        (["install", "venv", "--wheelhouse", "."], "is not a wheelhouse"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(argv: list[str], message: str, tmp_path: Path) -> None:
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), *argv],
        capture_output=True,
        text=True,
        cwd=tmp_path,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 2
    [line] = proc.stderr.splitlines()
    assert line.startswith("wheelhouse.py: error: "), line
    assert message in line, line


def test_a_wheelhouse_is_built_into_an_empty_folder(tmp_path: Path) -> None:
    (tmp_path / "old.whl").write_bytes(b"")
    proc = subprocess.run(
        [sys.executable, str(SCRIPT), "build", "-o", str(tmp_path)],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert proc.returncode == 2
    assert "not empty" in proc.stderr


def test_the_platform_ladder_is_packagings_own_for_this_host() -> None:
    # packaging.tags lists the manylinux tags this running host accepts; the ladder the
    # wheelhouse asks pip for, from the host's tag alone, is the same list in the same order.
    ours = wh.platform_ladder(wh.this_platform())
    theirs = [t for t in platform_tags() if t.startswith("manylinux")]
    assert ours == theirs
    # And every tag of it is one this interpreter accepts.
    accepted = {t.platform for t in sys_tags()}
    assert set(ours) <= accepted


def test_the_ladder_of_another_arch_has_its_own_floor() -> None:
    arm = wh.platform_ladder("manylinux_2_28_aarch64")
    assert arm[0] == "manylinux_2_28_aarch64"
    assert arm[-2:] == ["manylinux_2_17_aarch64", "manylinux2014_aarch64"]
    assert not any(t.startswith(("manylinux1_", "manylinux2010_")) for t in arm)
    x86 = wh.platform_ladder("manylinux_2_17_x86_64")
    assert x86[-2:] == ["manylinux_2_5_x86_64", "manylinux1_x86_64"]
    assert "manylinux2010_x86_64" in x86
