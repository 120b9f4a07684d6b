"""Contracts a user reads (README: exit codes, -o, the apply plan) held against what the
commands do, for the cases an audit found them broken."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.recommend.launch import docker_run_argv
from blackwell_doctor.recommend.plan import LaunchOptions, build_recommendation
from blackwell_doctor.render.formats import RecommendFormat
from blackwell_doctor.render.recommend import render_recommendation
from blackwell_doctor.ruledata.runtimes import load_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES, REPO, gpu_unusable_reason

B200 = str(FACTS_FIXTURES / "b200-x8.json")
RTXPRO = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
NO_ENGINE = "unix:///nonexistent/blackwell-doctor-test/docker.sock"


def cli(args: list[str], **env: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        cwd=REPO,
        env={**os.environ, **env},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


# --------------------------------------------------------------------------- exit codes


def test_an_unreadable_log_path_is_a_usage_error(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, err = run(["check", "--facts", B200, "--logs", "/nonexistent.log"], capsys)
    assert code == 2
    assert out == ""
    assert err.count("\n") == 1
    assert "not-found:/nonexistent.log" in err


def test_a_readable_log_beside_a_missing_one_is_judged(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    good = tmp_path / "vllm.log"
    good.write_text("INFO starting\n")
    code, _, err = run(
        ["check", "--facts", B200, "--logs", str(good), "--logs", str(tmp_path / "gone.log")],
        capsys,
    )
    assert code in (0, 1), err


@pytest.mark.parametrize("strict", [[], ["--strict"]])
def test_a_selection_that_leaves_nothing_to_judge_is_exit_2(
    strict: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    args = ["check", "--facts", B200, "--select", "pci", "--ignore", "pci", *strict]
    code, out, err = run(args, capsys)
    assert (code, out) == (2, "")
    assert "leave no check" in err


# --------------------------------------------------------------------------- apply


def test_a_rollback_plan_without_an_engine_is_still_a_plan(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, out, err = run(["apply", "--rollback"], capsys)
    assert code == 0, err
    assert "rollback plan" in out
    assert "not reachable" in out
    assert "Nothing was changed" in out


def test_docker_errors_are_one_line_in_words(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, _, err = run(["apply", "--rollback", "--yes"], capsys)
    assert code == 5
    assert err.count("\n") == 1
    assert "no Docker engine socket at /nonexistent/blackwell-doctor-test/docker.sock" in err
    assert not re.search(r"\w+Error\(|\('", err), err  # no exception reprs


def test_the_plan_describes_the_container_where_it_says(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    args = ["apply", "--facts", str(RTXPRO), "--model-dir", str(tmp_path)]
    code, out, err = run([*args, "--facts-from-another-host"], capsys)
    assert code == 0, err
    lines = out.splitlines()
    described = next(i for i, line in enumerate(lines) if "container to create" in line)
    [step] = [i for i, line in enumerate(lines) if "create blackwell-doctor-vllm (as" in line]
    assert "(as above)" in lines[step]
    assert described < step


def test_docker_run_with_ipc_host_does_not_also_size_shm() -> None:
    # --ipc host shares the host's /dev/shm: a --shm-size beside it is ignored by Docker
    # and tells the reader something false.
    facts = decode_facts(RTXPRO.read_bytes())
    rec, spec = build_recommendation(
        facts, evaluate(facts), load_catalogue(), LaunchOptions(model_dir="/srv/models/m")
    )
    assert spec is not None
    assert spec.ipc_mode == "host"
    argv = docker_run_argv(spec)
    assert argv[argv.index("--ipc") + 1] == "host"
    assert "--shm-size" not in argv
    compose = render_recommendation(rec, RecommendFormat.COMPOSE, spec)
    assert "ipc:" in compose
    assert "shm_size" not in compose


# --------------------------------------------------------------------------- -o FILE


def test_a_failed_scan_leaves_an_existing_output_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me\n")
    code, _, err = run(["scan-logs", str(tmp_path / "nope"), "-o", str(existing)], capsys)
    assert code == 2
    assert existing.read_text() == "keep me\n"
    # Nothing named could be read: the one usage error, before anything is written.
    assert err == f"blackwell-doctor: error: no log could be read (not-found:{tmp_path / 'nope'})\n"


@pytest.mark.skipif(gpu_unusable_reason() is None, reason="a GPU here: the probe would run")
def test_a_probe_that_could_not_run_leaves_an_existing_output_untouched(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    existing = tmp_path / "existing.txt"
    existing.write_text("keep me\n")
    code, _, err = run(["probe", "-o", str(existing)], capsys)
    assert code == 3
    assert existing.read_text() == "keep me\n"
    assert "not written" in err


@pytest.mark.skipif(os.geteuid() != 0, reason="only root can write onto another user's file")
def test_writing_as_root_onto_a_users_file_keeps_its_owner_and_mode(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "report.json"
    target.write_text("old\n")
    os.chown(target, 1234, 2345)
    target.chmod(0o640)
    code, _, err = run(["check", "--facts", B200, "-f", "json", "-o", str(target)], capsys)
    assert code in (0, 1), err
    st = target.stat()
    assert (st.st_uid, st.st_gid, st.st_mode & 0o7777) == (1234, 2345, 0o640)
    assert json.loads(target.read_text())["schema_version"]


# --------------------------------------------------------------------------- text output


def test_the_report_follows_the_terminal_width() -> None:
    narrow = cli(["check", "--facts", str(RTXPRO)], COLUMNS="60").stdout.splitlines()
    wide = cli(["check", "--facts", str(RTXPRO)], COLUMNS="160").stdout.splitlines()
    assert len(narrow) > len(wide)
    # Commands, links and paths are never broken (they must paste whole); all prose fits.
    prose = [
        line
        for line in narrow
        if not line.strip().startswith(("$ ", "See: ")) and " " in line.strip()
    ]
    assert max(len(line) for line in prose) <= 60, [line for line in prose if len(line) > 60]
    assert max(len(line) for line in wide) > 100


def test_the_scan_summary_counts_one_kind_of_thing(
    capsys: pytest.CaptureFixture[str],
) -> None:
    _, out, _ = run(["scan-logs", str(FIXTURES / "logs")], capsys)
    found = re.search(r"Found (\d+) signature\(s\): (\d+) fail, (\d+) warn, (\d+) info", out)
    assert found is not None, out[-500:]
    total, fail, warn, info = map(int, found.groups())
    assert total == fail + warn + info
    # One detail section per signature, titled "<id> (<worst>, <check>): N occurrence(s)"
    # (a title longer than the width wraps, its next line hanging 4 in: joined here).
    heading = r"[a-z0-9_.]+ \((fail|warn|info), logs\.[a-z0-9_]+\): \d+ occurrence\(s\)$"
    joined = re.sub(r"\n {4}(?=\S)", " ", out)
    listed = [line for line in joined.splitlines() if re.match(heading, line)]
    assert len(listed) == total


def test_a_scan_of_many_files_is_summarised(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    for n in range(2000):
        (tmp_path / f"{n:05}.log").write_text("INFO nothing to see\n")
    (tmp_path / "zz-unreadable.log").mkdir()  # a directory: walked, nothing in it
    os.symlink(tmp_path / "gone", tmp_path / "zz-broken.log")
    code, out, _ = run(["scan-logs", str(tmp_path)], capsys)
    assert code == 0
    # The six logs checks, the unreadable input's section, then the sources counted.
    assert len(out.splitlines()) < 60, out[:2000]
    assert "00001.log" not in out
    assert "2000 sources read" in out
    assert "zz-broken.log" in out  # what could not be read is still named


def test_no_wsl_advice_when_the_platform_is_unknown() -> None:
    facts = decode_facts((FACTS_FIXTURES / "no-gpu.json").read_bytes())
    platform = msgspec.structs.replace(
        facts.platform, wsl=msgspec.structs.replace(facts.platform.wsl, kind="unknown")
    )
    facts = msgspec.structs.replace(facts, platform=platform)
    [present] = [r for r in evaluate(facts).results if r.id == "gpu.present"]
    assert present.remedy is not None
    assert "WSL" not in present.remedy.summary


# --------------------------------------------------------------------------- trailing newline
# Issue 32: `audit --image $'ubuntu\n'` passed the image-reference check ("$" matches before a
# final newline) and exited 0 where `Ubuntu` is refused with 2. Every value checked against a
# pattern is checked whole (fullmatch).

SM120 = str(FACTS_FIXTURES / "sm120-driver580.json")
PINNED = "sha256:" + "0" * 64


def _catalogue(path: Path, key: str, value: str) -> Path:
    """The shipped runtime catalogue's first runtime, with ``key`` set to ``value``."""
    text = (REPO / "checks" / "runtimes.toml").read_text()
    starts = [m.start() for m in re.finditer(r"(?m)^\[\[runtime\]\]$", text)]
    first = starts[0]
    runtime = text[first : starts[1] if len(starts) > 1 else len(text)]
    line = f"{key} = {json.dumps(value)}"
    runtime = re.sub(rf"(?m)^{key} = .*$", lambda _: line, runtime, count=1)
    assert json.dumps(value) in runtime
    path.write_text(text[:first] + runtime)
    return path


@pytest.mark.parametrize(
    ("command", "argv", "words"),
    [
        ("audit", ["--image", "ubuntu\n", "--facts", SM120], "is not an image reference"),
        ("check", ["--image", "ubuntu:24.04\n", "--facts", SM120], "is not an image reference"),
        ("apply", ["--name", "vllm\n"], "not a valid container name"),
        ("apply", ["--shm-size", "16g\n"], "not a size docker understands"),
        ("apply", ["-e", "HF_HOME\n=/x"], "not a valid environment variable name"),
        ("recommend", ["--name", "vllm\n"], "not a valid container name"),
        ("recommend", ["--shm-size", "16g\n"], "not a size docker understands"),
        ("recommend", ["-e", "HF_HOME\n=/x"], "not a valid environment variable name"),
        ("recommend", ["id", "vllm-upstream\n"], "lower-case letters, digits"),
        ("recommend", ["image", "docker.io/vllm/vllm-openai:latest\n"], "not a valid image"),
        ("recommend", ["digest", PINNED + "\n"], "not a sha256 digest"),
        ("recommend", ["shm_size", "16g\n"], "not a size docker understands"),
    ],
)
def test_a_value_with_a_trailing_newline_is_refused_in_one_line(
    command: str,
    argv: list[str],
    words: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    if not argv[0].startswith("-"):  # a field of a --catalogue file
        argv = ["--catalogue", str(_catalogue(tmp_path / "runtimes.toml", *argv))]
    if command in ("apply", "recommend"):
        argv = ["--facts", SM120, "--model-dir", str(tmp_path), *argv]
        argv += ["--facts-from-another-host"] if command == "apply" else []
    code, out, err = run([command, *argv], capsys)
    assert (code, out) == (2, ""), err
    assert words in err
    assert err.count("\n") == 1
