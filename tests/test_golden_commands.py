"""Golden outputs of every command in every format, on the shipped examples and the fixtures.

tests/test_golden.py keeps the check report of each facts fixture; this file keeps what the
commands print end to end (``blackwell-doctor ARGV`` through the one error boundary), so a
refactor's "byte-identical" is a test anyone can run from a commit (issue 38). One command
regenerates every golden of the repository:

    PYTHONPATH=src python -m pytest tests/test_golden.py tests/test_golden_commands.py \
        tests/test_serving.py tests/test_bench_ladder.py --update-goldens

then read the diff of ``tests/golden/`` before committing it. A golden is the command's
standard output, then ``rc=N``: the exit code is part of what a user (a CI job) sees.

Deterministic by construction: the examples' sources are named, not their paths; the
checkout's own path is written as ``<repo>``; the tool's version as the documented one
(conftest.as_documented); no Docker engine is reachable (DOCKER_HOST names a socket that is
not there), so ``apply`` prints the same plan on every machine; output goes to a pipe (no
COLUMNS), whose width is fixed. Where a command fails, what it said on standard error is kept
after ``--- stderr``.
``audit`` has no golden: it reads the running interpreter's packages, which no fixture pins.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import re
from collections.abc import Iterator
from pathlib import Path

import pytest

from blackwell_doctor.render.formats import (
    BenchFormat,
    FleetFormat,
    Format,
    ModelFormat,
    ProbeFormat,
    RecommendFormat,
    ScanLogsFormat,
)
from tests.cli import run
from tests.conftest import as_documented

REPO = Path(__file__).resolve().parents[1]
GOLDEN = REPO / "tests" / "golden" / "commands"
FACTS_FIXTURES = sorted((REPO / "tests" / "fixtures" / "facts").glob("*.json"))
EXAMPLE_LOGS = sorted((REPO / "examples" / "logs").glob("*.log"))

# The examples' names (`blackwell-doctor examples`), by what each one can be given to.
HOST_EXAMPLES = ["wsl2-rtxpro6000x4", "fixed-rtxpro6000x4", "dgx-spark", "h200x2"]
FLEET_EXAMPLES = ["lab", "wsl2-rtxpro6000x4"]
BENCH_EXAMPLES = ["same-server", "max-num-seqs-1"]
# The model directory `apply --facts` is given (a fixture has no model of its own), through
# the examples' link (below): apply names it by its absolute path.
MODEL_DIR = "{examples}/models/gpt-oss-120b"
# Shared memory per block for `probe --plan` (its own help: SM 12.x, then SM 9.0/10.x).
SMEM_LIMITS = [101376, 232448]

# A Docker socket that is not there: apply's plan is the same on every machine.
NO_DOCKER = "unix:///nonexistent/blackwell-doctor-golden/docker.sock"

# The extension a golden of each format is saved with, so that a diff is readable.
EXTENSION = {
    "rich": "txt",
    "json": "json",
    "junit": "xml",
    "markdown": "md",
    "prometheus": "prom",
    "nfd": "nfd",
    "html": "html",
    "shell": "sh",
    "compose": "yaml",
}


def _cases() -> Iterator[tuple[str, list[str]]]:
    """(golden path under tests/golden/commands, argv) for every command x format."""
    for ex in HOST_EXAMPLES:
        for fmt in Format:
            yield f"check/{ex}.{EXTENSION[fmt]}", ["check", "--example", ex, "-f", fmt]
        for rfmt in RecommendFormat:
            yield (
                f"recommend/{ex}.{EXTENSION[rfmt]}",
                ["recommend", "--example", ex, "-f", rfmt],
            )
        yield f"apply/{ex}.txt", ["apply", "--example", ex]
        for mfmt in ModelFormat:
            yield f"model/{ex}.{EXTENSION[mfmt]}", ["model", "--example", ex, "-f", mfmt]
    for fixture in FACTS_FIXTURES:
        rel = fixture.relative_to(REPO).as_posix()
        yield f"recommend/{fixture.stem}.md", ["recommend", "--facts", rel, "-f", "markdown"]
        yield (
            f"apply/{fixture.stem}.txt",
            ["apply", "--facts", rel, "--facts-from-another-host", "--model-dir", MODEL_DIR],
        )
    facts = [f.relative_to(REPO).as_posix() for f in FACTS_FIXTURES]
    for ffmt in FleetFormat:
        yield f"fleet/fixtures.{EXTENSION[ffmt]}", ["fleet", *facts, "-f", ffmt]
        for ex in FLEET_EXAMPLES:
            yield f"fleet/{ex}.{EXTENSION[ffmt]}", ["fleet", "--example", ex, "-f", ffmt]
    for log in EXAMPLE_LOGS:
        rel = log.relative_to(REPO).as_posix()
        for sfmt in ScanLogsFormat:
            yield f"scan-logs/{log.stem}.{EXTENSION[sfmt]}", ["scan-logs", rel, "-f", sfmt]
    for bex in BENCH_EXAMPLES:
        for bfmt in BenchFormat:
            yield f"bench/{bex}.{EXTENSION[bfmt]}", ["bench", "--example", bex, "-f", bfmt]
    for smem in SMEM_LIMITS:
        for pfmt in ProbeFormat:
            yield (
                f"probe/plan-{smem}.{EXTENSION[pfmt]}",
                ["probe", "--plan", "--smem-limit", str(smem), "-f", pfmt],
            )


CASES = dict(_cases())


# The shipped examples are found beside the package (ruledata.examples.data_dir) and
# named by their absolute path, which the rich views wrap at 100 columns: a path of another
# length would wrap elsewhere. So the examples are read through a link of one fixed length
# (one per checkout, so that two checkouts on one machine do not share it).
EXAMPLES_LINK = Path(f"/tmp/blackwell-doctor-golden-{hashlib.sha256(bytes(REPO)).hexdigest()[:12]}")


def examples_link() -> Path:
    if not EXAMPLES_LINK.is_symlink():
        with contextlib.suppress(FileExistsError):  # another worker made it meanwhile
            os.symlink(REPO / "examples", EXAMPLES_LINK)
    assert EXAMPLES_LINK.resolve() == (REPO / "examples").resolve()
    return EXAMPLES_LINK


# What a run stamps with the clock (the facts' own times are data, kept): Prometheus' gauges
# of the run itself (render/prometheus.py) and NFD's expiry time (render/nfd.py).
RUN_TIMES = re.compile(
    r"^(\w+_last_run_(?:timestamp|duration)_seconds|# \+expiry-time=) ?\S+$", re.MULTILINE
)


# The launch spec's hash (recommend and apply's container label) is taken over the launch,
# the model directory's absolute path included: here the examples' link, whose name differs
# per checkout, so the 20 recommend goldens failed in any clone but the one that wrote them.
# The spec itself (the command line beside it) stays compared.
SPEC_HASH = re.compile(r"(blackwell-doctor\.spec(?:=|\"?: \"?))[0-9a-f]{16}\b")


def normalised(text: str) -> str:
    """``text`` without what depends on the machine or the clock: the checkout's path, the
    version, the run's own times, the launch spec's hash over the model's absolute path."""
    text = RUN_TIMES.sub(r"\1 <time>", text.replace(str(EXAMPLES_LINK), "<repo>/examples"))
    text = SPEC_HASH.sub(r"\1<hash>", text)
    return as_documented(text).replace(str(REPO), "<repo>")


@pytest.mark.parametrize("name", list(CASES))
def test_command_golden(
    name: str,
    update_goldens: bool,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.chdir(REPO)
    monkeypatch.delenv("COLUMNS", raising=False)
    monkeypatch.setenv("DOCKER_HOST", NO_DOCKER)
    link = examples_link()
    monkeypatch.setattr("blackwell_doctor.ruledata.examples.data_dir", lambda _name: link)
    res = run([arg.replace("{examples}", str(link)) for arg in CASES[name]], capsys)
    out = normalised(res.out)
    if res.err:
        out += "--- stderr\n" + normalised(res.err)
    out += f"rc={res.code}\n"
    golden = GOLDEN / name
    if update_goldens:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(out, encoding="utf-8")
        return
    if not golden.exists():
        pytest.fail(f"no golden file {golden.relative_to(REPO)}: run `pytest --update-goldens`")
    assert out == golden.read_text(encoding="utf-8"), (
        f"{golden.relative_to(REPO)} differs; if the change is intended, run "
        "`pytest --update-goldens` and review the diff"
    )


def test_every_command_golden_has_a_case() -> None:
    # A golden left behind by a renamed example or format would never be compared again.
    on_disk = {p.relative_to(GOLDEN).as_posix() for p in GOLDEN.rglob("*") if p.is_file()}
    assert not sorted(on_disk - set(CASES)), "golden files without a case"


def test_the_cases_cover_every_command_that_reads_fixtures_in_every_format() -> None:
    # Each format enum member appears at least once for its command, so a new format
    # cannot ship without a golden.
    exts = {(n.split("/")[0], n.rsplit(".", 1)[1]) for n in CASES}
    for cmd, enum in [
        ("check", Format),
        ("recommend", RecommendFormat),
        ("model", ModelFormat),
        ("fleet", FleetFormat),
        ("scan-logs", ScanLogsFormat),
        ("bench", BenchFormat),
        ("probe", ProbeFormat),
    ]:
        for member in enum:
            assert (cmd, EXTENSION[member]) in exts, (cmd, member)
