"""Release hygiene (issue 37): the sdist and wheel `python -m build` makes pass `twine check
--strict`, carry the metadata an index shows (classifiers, project URLs, licence), and their
version comes from git: a tag gives its version, a clone with no tag in reach (shallow, or
before the first release) a dev version of its commit, a tree with no git the fallback."""

from __future__ import annotations

import re
import shutil
import subprocess
import sys
import tomllib
import zipfile
from email.parser import Parser
from pathlib import Path

import pytest
from packaging.version import Version

from tests.conftest import REPO, optional

PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
CHANGELOG = (REPO / "CHANGELOG.md").read_text()


def _wheel(built_dist: Path) -> Path:
    [wheel] = built_dist.glob("blackwell_doctor-*-py3-none-any.whl")
    return wheel


def test_twine_check_strict_passes_the_sdist_and_the_wheel(built_dist: Path) -> None:
    optional("twine")
    files = sorted(str(p) for p in built_dist.iterdir())
    assert len(files) == 2  # the sdist and the wheel
    proc = subprocess.run(
        [sys.executable, "-m", "twine", "check", "--strict", *files],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert proc.stdout.count("PASSED") == 2


def test_the_wheel_metadata_is_what_an_index_shows(built_dist: Path) -> None:
    trove = optional("trove_classifiers")
    wheel = _wheel(built_dist)
    with zipfile.ZipFile(wheel) as z:
        [meta_name] = [n for n in z.namelist() if n.endswith(".dist-info/METADATA")]
        meta = Parser().parsestr(z.read(meta_name).decode())
        version_py = z.read("blackwell_doctor/_version.py").decode()
        shipped = set(z.namelist())
    version = wheel.name.split("-")[1]
    assert meta["Version"] == version
    assert f"__version__ = version = '{version}'" in version_py
    assert meta["License-Expression"] == "Apache-2.0"
    assert meta.get_all("License-File") == ["LICENSE"]
    classifiers = meta.get_all("Classifier") or []
    assert classifiers == PYPROJECT["project"]["classifiers"]
    assert not set(classifiers) - trove.classifiers
    urls = dict(u.split(", ", 1) for u in meta.get_all("Project-URL") or [])
    assert urls == PYPROJECT["project"]["urls"]
    assert meta["Requires-Python"] == ">=3.11"
    # The shipped data (rule data, probe kernels, examples) is in the wheel.
    assert {"blackwell_doctor/_data/checks/catalogue.toml", "blackwell_doctor/py.typed"} <= shipped


def test_a_tagged_build_has_a_changelog_section() -> None:
    headings = re.findall(r"^## \[([^\]]+)\]", CHANGELOG, re.MULTILINE)
    assert headings, "CHANGELOG.md has no release section"
    for heading in headings:
        if heading != "Unreleased":
            Version(heading)  # each one a PEP 440 version
    from blackwell_doctor import __version__

    version = Version(__version__)
    if not (version.is_devrelease or version.local or __version__ == "0.0"):
        assert str(version) in headings, f"CHANGELOG.md has no section for {version}"
        assert not re.search(rf"^## \[{re.escape(str(version))}\] - unreleased", CHANGELOG, re.M)


# --------------------------------------------------------------------------- version from git


def _git(*args: str, cwd: Path) -> str:
    proc = subprocess.run(
        ["git", *args], capture_output=True, text=True, cwd=cwd, timeout=120, check=True
    )
    return proc.stdout.strip()


def _version_of(tree: Path) -> str:
    for module in ("hatchling", "hatch_vcs"):
        optional(module)
    proc = subprocess.run(
        [sys.executable, "-m", "hatchling", "version"],
        capture_output=True,
        text=True,
        cwd=tree,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    return proc.stdout.strip()


@pytest.fixture
def shallow_clone(tmp_path: Path) -> Path:
    if shutil.which("git") is None or not (REPO / ".git").exists():
        pytest.skip("not a git checkout (an sdist): no history to clone")
    clone = tmp_path / "clone"
    _git("clone", "--quiet", "--depth", "1", "--no-tags", REPO.as_uri(), str(clone), cwd=tmp_path)
    return clone


def test_a_shallow_clone_without_tags_builds_a_dev_version_of_its_commit(
    shallow_clone: Path,
) -> None:
    assert _git("tag", cwd=shallow_clone) == ""
    commit = _git("rev-parse", "--short=9", "HEAD", cwd=shallow_clone)
    version = _version_of(shallow_clone)
    assert re.fullmatch(rf"0\.1\.dev\d+\+g{commit[:7]}[0-9a-f]*", version), version
    assert Version(version) < Version("0.1.0")  # below every release


def test_a_tag_is_the_version(shallow_clone: Path) -> None:
    _git("-c", "user.name=t", "-c", "user.email=t@t", "tag", "-a", "v2.3.4", "-m", "r",
         cwd=shallow_clone)  # fmt: skip
    assert _version_of(shallow_clone) == "2.3.4"


def test_a_tree_without_git_builds_as_the_fallback(shallow_clone: Path, tmp_path: Path) -> None:
    bare = tmp_path / "no-git"
    shutil.copytree(shallow_clone, bare, ignore=shutil.ignore_patterns(".git"))
    (bare / ".git_archival.txt").unlink()  # not a git archive either
    assert _version_of(bare) == PYPROJECT["tool"]["hatch"]["version"]["fallback-version"]
