"""The installers docs/install.md names, run as written there: `pipx install` and `uv tool
install` (both from the index: the dev extra has them), each from the offline wheelhouse
with the index unreachable (tests/offline.py), each leaving a `blackwell-doctor` that runs;
and the shell completion line, evaluated by a real bash."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from blackwell_doctor.render.formats import Format
from tests.conftest import REPO, optional
from tests.offline import offline_env

DOCS = (REPO / "docs" / "install.md").read_text()


def _example_runs(command: Path) -> None:
    proc = subprocess.run(
        [str(command), "check", "--example", "wsl2-rtxpro6000x4", "--select", "driver"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 1, proc.stderr  # the example's driver finding
    assert re.search(r"\[FAIL\] +driver\.version", proc.stdout)


def test_pipx_installs_it_from_the_wheelhouse_offline(
    offline_wheelhouse: Path, tmp_path: Path
) -> None:
    optional("pipx")
    assert "pipx install --pip-args='--no-index --find-links wheelhouse' blackwell-doctor" in DOCS
    env = offline_env(tmp_path)
    dirs = {"PIPX_HOME": "pipx", "PIPX_BIN_DIR": "bin", "PIPX_MAN_DIR": "man"}
    env |= {name: str(tmp_path / sub) for name, sub in dirs.items()}
    proc = subprocess.run(
        [sys.executable, "-m", "pipx", "install",
         f"--pip-args=--no-index --find-links {offline_wheelhouse}", "blackwell-doctor"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _example_runs(tmp_path / "bin" / "blackwell-doctor")


def test_uv_tool_installs_it_from_the_wheelhouse_offline(
    offline_wheelhouse: Path, tmp_path: Path
) -> None:
    uv = optional("uv")
    assert "uv tool install --offline --no-index --find-links wheelhouse blackwell-doctor" in DOCS
    env = offline_env(tmp_path)
    env |= {"UV_TOOL_DIR": str(tmp_path / "tools"), "UV_TOOL_BIN_DIR": str(tmp_path / "bin")}
    proc = subprocess.run(
        [uv.find_uv_bin(), "tool", "install", "--offline", "--no-index", "--find-links",
         str(offline_wheelhouse), "--python", sys.executable, "blackwell-doctor"],
        capture_output=True, text=True, env=env, timeout=600, check=False,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    _example_runs(tmp_path / "bin" / "blackwell-doctor")


def test_bash_completion_as_documented_completes_commands_and_options(tmp_path: Path) -> None:
    # The documented line, evaluated by bash, then bash's own completion call: the command
    # is on PATH (here a wrapper of this interpreter's module, as the console script is).
    line = 'eval "$(_BLACKWELL_DOCTOR_COMPLETE=source_bash blackwell-doctor)"'
    assert line in DOCS
    bash = shutil.which("bash")
    assert bash is not None
    wrapper = tmp_path / "blackwell-doctor"
    wrapper.write_text(f'#!/bin/sh\nexec "{sys.executable}" -m blackwell_doctor "$@"\n')
    wrapper.chmod(0o755)
    script = (
        f"{line}\n"
        # bash calls the function with the command's name, as it does on <TAB>.
        "COMP_WORDS=(blackwell-doctor ch); COMP_CWORD=1\n"
        "_blackwell_doctor_completion blackwell-doctor ch blackwell-doctor\n"
        'echo "commands: ${COMPREPLY[*]}"\n'
        "COMP_WORDS=(blackwell-doctor check --format ''); COMP_CWORD=3\n"
        "_blackwell_doctor_completion blackwell-doctor '' --format\n"
        'echo "formats: ${COMPREPLY[*]}"\n'
    )
    env = {**os.environ, "PATH": f"{tmp_path}{os.pathsep}{os.environ['PATH']}"}
    proc = subprocess.run(
        [bash, "--norc", "-c", script],
        capture_output=True,
        text=True,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    commands, formats = proc.stdout.splitlines()
    assert commands == "commands: check"
    assert formats.split()[1:] == [f.value for f in Format]


def test_the_slurm_health_check_runs_the_installed_command(tmp_path: Path) -> None:
    # slurmd's PATH is short: the wrapper takes blackwell-doctor from PATH, else the offline
    # install's /opt/blackwell-doctor/bin (docs/fleets.md), else $BLACKWELL_DOCTOR.
    wrapper = REPO / "deploy" / "slurm" / "blackwell-doctor-healthcheck"
    fake = tmp_path / "blackwell-doctor"
    fake.write_text('#!/bin/sh\necho "$0 $*"\n')
    fake.chmod(0o755)
    base = {k: v for k, v in os.environ.items() if k != "BLACKWELL_DOCTOR"}
    on_path = subprocess.run(
        ["/bin/sh", str(wrapper)], capture_output=True, text=True, timeout=60, check=False,
        env={**base, "PATH": f"{tmp_path}:/usr/bin:/bin"},
    )  # fmt: skip
    assert on_path.stdout == f"{fake} slurm-health --no-probe --gpu-timeout 20\n"
    absent = subprocess.run(
        ["/bin/sh", str(wrapper)], capture_output=True, text=True, timeout=60, check=False,
        env={**base, "PATH": "/usr/bin:/bin"},
    )  # fmt: skip
    if not Path("/opt/blackwell-doctor/bin/blackwell-doctor").exists():
        assert absent.returncode == 127
        assert "/opt/blackwell-doctor/bin/blackwell-doctor" in absent.stderr
    given = subprocess.run(
        ["/bin/sh", str(wrapper), "--dry-run"], capture_output=True, text=True, timeout=60,
        check=False, env={**base, "PATH": "/usr/bin:/bin", "BLACKWELL_DOCTOR": str(fake)},
    )  # fmt: skip
    assert given.stdout.endswith("--gpu-timeout 20 --dry-run\n")
