"""What a bug report needs to know of this install (``--version``, issue 40): the commit it
was built from, its rule data, the interpreter, and the versions of the NVML and CUDA
bindings it would load. Nothing is imported from those bindings (``--version`` stays fast
and works on a host without a driver): their versions are read from the names of their
installed ``.dist-info`` folders (importlib.metadata would cost --version 30 more modules:
email, zipfile, csv, tempfile; tests/test_import_cost.py)."""

from __future__ import annotations

import hashlib
import json
import os
import platform
import re
import shutil
import subprocess
import sys
from pathlib import Path

from blackwell_doctor.report.about import About
from blackwell_doctor.ruledata.resources import data_dir

# The distributions whose modules the tool loads for the GPU (pyproject.toml: pynvml from
# nvidia-ml-py, cuda.bindings from cuda-bindings) and the NVRTC wheel the probes compile with.
BINDINGS = ("nvidia-ml-py", "cuda-bindings", "nvidia-cuda-nvrtc")
_CHECKOUT = Path(__file__).resolve().parents[3]
_SCHEMAS = Path(__file__).resolve().parents[1] / "schemas"


# setuptools-scm's local part of a version built between tags: "+g<hash>" ("0.1.dev659+
# gbfb2f62f2", "+gbfb2f62f2.d20261128" when the tree was dirty).
_LOCAL_NODE = re.compile(r"\+g([0-9a-f]{7,40})(?:\.|$)")


def _built_commit(version: str) -> str | None:
    """The commit hatch-vcs wrote beside the version at build time (``__commit_id__``:
    setuptools-scm's version-file template, "g" and the short hash), else the one the
    built ``version`` names in its local part (hatch-vcs may leave ``__commit_id__`` None:
    CI's wheel of bfb2f62 did)."""
    try:
        from blackwell_doctor import _version  # type: ignore[attr-defined, unused-ignore]
    except ImportError:
        return None
    node = getattr(_version, "__commit_id__", None)
    if isinstance(node, str) and node:
        return node.removeprefix("g")
    local = _LOCAL_NODE.search(version)
    return local.group(1) if local else None


def _checkout_commit() -> str | None:
    """HEAD of the git checkout the package runs from (PYTHONPATH=src, never built)."""
    git = shutil.which("git")
    if git is None or not (_CHECKOUT / ".git").exists():
        return None
    try:
        done = subprocess.run(
            [git, "-C", str(_CHECKOUT), "rev-parse", "--short=12", "HEAD"],
            capture_output=True,
            text=True,
            timeout=5,
            check=False,
        )
    except (OSError, subprocess.SubprocessError):
        return None
    head = done.stdout.strip()
    return f"{head} (source checkout)" if done.returncode == 0 and head else None


def _catalogue() -> tuple[str, int]:
    digest = hashlib.sha256()
    files = sorted(data_dir("checks").glob("*.toml"))
    for path in files:
        digest.update(path.name.encode() + b"\0" + path.read_bytes() + b"\0")
    return digest.hexdigest()[:12], len(files)


def _schemas() -> dict[str, int]:
    """The shipped schemas' versions, from their ``$id`` (urn:blackwell-doctor:schema:NAME:vN,
    written by schemas/generate.py from each document's schema_version constant)."""
    found = {}
    for path in sorted(_SCHEMAS.glob("*.schema.json")):
        urn = json.loads(path.read_text(encoding="utf-8")).get("$id", "")
        name, _, version = urn.removeprefix("urn:blackwell-doctor:schema:").rpartition(":v")
        if name and version.isdigit():
            found[name] = int(version)
    return found


def _distribution_version(name: str) -> str:
    """The installed version of distribution ``name``: the first ``.dist-info`` folder on
    ``sys.path`` named for it, as the wheel installer names them (NAME-VERSION.dist-info,
    NAME normalised with "_", PyPA's recording-installed-packages spec), as
    importlib.metadata finds them."""
    wanted = re.sub(r"[-_.]+", "_", name).lower()
    for entry in sys.path:
        try:
            names = os.listdir(entry or ".")
        except OSError:
            continue
        for folder in names:
            stem = folder.removesuffix(".dist-info")
            if stem != folder and "-" in stem:
                dist, version = stem.rsplit("-", 1)
                if re.sub(r"[-_.]+", "_", dist).lower() == wanted:
                    return version
    return "not installed"


def read_about(version: str) -> About:
    """This install's :class:`About` (the tool's own ``version`` given)."""
    sha, files = _catalogue()
    return About(
        version=version,
        commit=_checkout_commit() or _built_commit(version) or "unknown (not built from git)",
        catalogue_sha256=sha,
        catalogue_files=files,
        schemas=_schemas(),
        python=(
            f"{platform.python_version()} {platform.python_implementation()} "
            f"({platform.system()} {platform.machine()}) {sys.executable}"
        ),
        bindings={name: _distribution_version(name) for name in BINDINGS},
    )
