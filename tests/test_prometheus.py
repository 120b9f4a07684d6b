"""``check --format prometheus``: the textfile collector format, read back by Prometheus' own
parser (prometheus_client.parser) and served by a real node_exporter (marker `node_exporter`)."""

from __future__ import annotations

import os
import socket
import subprocess
import sys
import time
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest

from blackwell_doctor.render import Format, render
from blackwell_doctor.render.timing import RunTiming
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, skip_without
from tests.factsutil import load, replace

try:
    from prometheus_client.parser import text_string_to_metric_families
    from prometheus_client.samples import Sample
except ModuleNotFoundError as exc:
    skip_without(exc)

FIXTURES = sorted(FACTS_FIXTURES.glob("*.json"))


def samples(text: str) -> list[Sample]:
    return [s for family in text_string_to_metric_families(text) for s in family.samples]


def status_of(text: str, check_id: str) -> dict[str, float]:
    return {
        s.labels["status"]: s.value
        for s in samples(text)
        if s.name == "blackwell_doctor_check_status" and s.labels["check"] == check_id
    }


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_every_check_has_exactly_one_status_set(fixture: Path) -> None:
    report = evaluate(load(fixture.stem))
    text = render(report, Format.PROMETHEUS, color=False)
    for result in report.results:
        states = status_of(text, result.id)
        assert set(states) == {s.value for s in Status}
        assert [k for k, v in states.items() if v == 1.0] == [result.status.value]
    [exit_code] = [s for s in samples(text) if s.name == "blackwell_doctor_exit_code"]
    assert exit_code.value == report.exit_code
    counts = {
        s.labels["status"]: s.value for s in samples(text) if s.name == "blackwell_doctor_checks"
    }
    assert counts["fail"] == report.summary.fail
    assert sum(counts.values()) == report.summary.total


def test_family_and_severity_are_labels_of_the_status_gauge() -> None:
    report = evaluate(load("sm120-driver580"))
    text = render(report, Format.PROMETHEUS, color=False)
    [failing] = [
        s
        for s in samples(text)
        if s.name == "blackwell_doctor_check_status"
        and s.labels["check"] == "driver.version"
        and s.labels["status"] == "fail"
    ]
    assert failing.labels["family"] == "driver"
    assert failing.labels["severity"] == "high"
    assert failing.value == 1.0


def test_timing_gauges_are_in_seconds() -> None:
    report = evaluate(load("no-gpu"))
    text = render(
        report, Format.PROMETHEUS, color=False, timing=RunTiming(started_at=1.8e9, duration_s=0.25)
    )
    values = {s.name: s.value for s in samples(text)}
    assert values["blackwell_doctor_last_run_timestamp_seconds"] == 1.8e9
    assert values["blackwell_doctor_last_run_duration_seconds"] == 0.25
    # Without timing (goldens, fleet replays) the gauges are absent, not zero.
    untimed = {s.name for s in samples(render(report, Format.PROMETHEUS, color=False))}
    assert "blackwell_doctor_last_run_timestamp_seconds" not in untimed


def test_hostile_driver_string_survives_the_parser() -> None:
    facts = load("sm120-driver580")
    nvml = replace(facts.nvml, driver_version='580.1"} evil 1\n# TYPE x counter\x1b[2J')
    text = render(evaluate(replace(facts, nvml=nvml)), Format.PROMETHEUS, color=False)
    assert "\x1b" not in text
    [info] = [s for s in samples(text) if s.name == "blackwell_doctor_info"]
    assert info.labels["driver_version"] == '580.1"} evil 1\n# TYPE x counter\\x1b[2J'
    assert not [s for s in samples(text) if s.name in ("evil", "x")]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_writes_the_textfile_atomically_and_exits_as_check(tmp_path: Path) -> None:
    out = tmp_path / "blackwell_doctor.prom"
    out.write_text("old\n")
    os.chmod(out, 0o644)
    proc = run_cli(
        "check", "--facts", str(FACTS_FIXTURES / "sm120-driver580.json"),
        "--format", "prometheus", "-o", str(out),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    text = out.read_text()
    assert status_of(text, "driver.version")["fail"] == 1.0
    names = {s.name for s in samples(text)}
    assert {
        "blackwell_doctor_last_run_timestamp_seconds",
        "blackwell_doctor_last_run_duration_seconds",
    } <= names
    # Renamed into place: no temporary file left beside it, permissions kept.
    assert sorted(p.name for p in tmp_path.iterdir()) == ["blackwell_doctor.prom"]
    assert out.stat().st_mode & 0o777 == 0o644


# --------------------------------------------------------------------------- real node_exporter


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def scrape(url: str, deadline_s: float = 15.0) -> str:
    end = time.monotonic() + deadline_s
    while True:
        try:
            with urllib.request.urlopen(url, timeout=2) as resp:
                body: bytes = resp.read()
                return body.decode("utf-8")
        except OSError:
            if time.monotonic() > end:
                raise
            time.sleep(0.1)


@pytest.fixture
def node_exporter(node_exporter_bin: str, tmp_path: Path) -> Iterator[tuple[str, Path]]:
    textdir = tmp_path / "textfile"
    textdir.mkdir()
    port = free_port()
    proc = subprocess.Popen(
        [
            node_exporter_bin,
            f"--web.listen-address=127.0.0.1:{port}",
            "--collector.disable-defaults",
            "--collector.textfile",
            f"--collector.textfile.directory={textdir}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=open(tmp_path / "node_exporter.log", "wb"),  # noqa: SIM115 (lives with proc)
    )
    try:
        url = f"http://127.0.0.1:{port}/metrics"
        scrape(url)  # up
        yield url, textdir
    finally:
        proc.terminate()
        proc.wait(timeout=10)


@pytest.mark.node_exporter
def test_node_exporter_serves_the_textfile(node_exporter: tuple[str, Path]) -> None:
    url, textdir = node_exporter
    proc = run_cli(
        "check", "--facts", str(FACTS_FIXTURES / "sm120-driver580.json"),
        "--format", "prometheus", "-o", str(textdir / "blackwell_doctor.prom"),
    )  # fmt: skip
    assert proc.returncode == 1, proc.stderr
    scraped = scrape(url)
    got = samples(scraped)
    # node_exporter read the file without complaint...
    [error] = [s for s in got if s.name == "node_textfile_scrape_error"]
    assert error.value == 0.0
    assert any(
        s.name == "node_textfile_mtime_seconds"
        and s.labels["file"].endswith("blackwell_doctor.prom")
        for s in got
    )
    # ...and serves our series as written.
    assert status_of(scraped, "driver.version")["fail"] == 1.0
    assert status_of(scraped, "gpu.present")["pass"] == 1.0
    [duration] = [s for s in got if s.name == "blackwell_doctor_last_run_duration_seconds"]
    assert 0 < duration.value < 120


@pytest.mark.node_exporter
def test_node_exporter_reports_a_broken_textfile(node_exporter: tuple[str, Path]) -> None:
    # The control: what node_exporter does with a file that is not valid exposition text,
    # so the zero scrape error above means something.
    url, textdir = node_exporter
    (textdir / "blackwell_doctor.prom").write_text("blackwell_doctor_check_status{ 1\n")
    [error] = [s for s in samples(scrape(url)) if s.name == "node_textfile_scrape_error"]
    assert error.value == 1.0
