"""``fleet``: many nodes' facts judged by the same evaluation as ``check --facts``, grouped by
finding, worst first; unreadable inputs listed, not fatal; exit codes as ``check``."""

from __future__ import annotations

import json
import re
import subprocess
import sys
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.app.fleet import expand_inputs, judge_fleet, judgment_key
from blackwell_doctor.facts.document import SCHEMA_VERSION, Facts, NvmlFacts, encode_facts
from blackwell_doctor.render.fleet import hostlist, render_fleet
from blackwell_doctor.render.formats import FleetFormat
from blackwell_doctor.report.fleet import FleetReport
from blackwell_doctor.report.results import Status
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, REPO, optional
from tests.factsutil import load, replace

FINDINGS = (Status.FAIL, Status.WARN, Status.ERROR)


def named(facts: Facts, hostname: str) -> Facts:
    renamed: Facts = replace(
        facts, redacted=False, platform=replace(facts.platform, hostname=hostname)
    )
    return renamed


def write_node(directory: Path, fixture: str, hostname: str, file: str | None = None) -> Path:
    path = directory / f"{file or hostname}.json"
    path.write_bytes(encode_facts(named(load(fixture), hostname)))
    return path


def judge(*args: str | Path, **kw: object) -> FleetReport:
    paths, missing = expand_inputs([str(a) for a in args])
    return judge_fleet(paths, missing, **kw)  # type: ignore[arg-type]


@pytest.fixture
def fleet_dir(tmp_path: Path) -> Path:
    """12 nodes on driver 580 (gpu001-gpu012), 3 healthy H200 nodes (gpu013-gpu015)."""
    for i in range(1, 13):
        write_node(tmp_path, "sm120-driver580", f"gpu{i:03d}")
    for i in range(13, 16):
        write_node(tmp_path, "h200x2-captured", f"gpu{i:03d}")
    return tmp_path


def test_groups_are_exactly_what_check_says_about_each_node() -> None:
    # The fleet is a grouping of `check --facts` reports, not a second evaluation.
    report = judge(FACTS_FIXTURES)
    assert report.summary.nodes == len(list(FACTS_FIXTURES.glob("*.json")))
    by_node = {n.name: n for n in report.nodes}
    # A group is one finding: the same check, status, summary and action.
    expected: dict[tuple[str, Status, str, bytes], set[str]] = {}
    for path in sorted(FACTS_FIXTURES.glob("*.json")):
        single = evaluate(load(path.stem))
        assert by_node[path.stem].exit_code == single.exit_code
        assert by_node[path.stem].fail == single.summary.fail
        for r in single.results:
            if r.status in FINDINGS:
                key = (r.id, r.status, r.summary, msgspec.json.encode(r.remedy))
                expected.setdefault(key, set()).add(path.stem)
    got = {
        (g.id, g.status, g.summary, msgspec.json.encode(g.remedy)): set(g.nodes)
        for g in report.groups
    }
    assert len(got) == len(report.groups)
    assert got == expected


def test_identical_findings_form_one_group_with_the_node_list(fleet_dir: Path) -> None:
    report = judge(fleet_dir)
    [driver] = [g for g in report.groups if g.id == "driver.version"]
    assert driver.status is Status.FAIL
    assert driver.nodes == [f"gpu{i:03d}" for i in range(1, 13)]
    assert driver.remedy is not None
    assert driver.remedy.commands
    assert report.summary.ok == 3
    assert report.summary.findings == 12
    assert report.exit_code == 1
    text = render_fleet(report, FleetFormat.RICH)
    assert "12 nodes: driver.version (high)" in text
    assert "nodes: gpu[001-012]" in text


def with_identity(facts: Facts, n: int) -> Facts:
    """``facts`` as another machine of the same kind: other name, time and GPU UUIDs."""
    nvml = facts.nvml
    if isinstance(nvml, NvmlFacts):
        gpus = [replace(g, uuid=f"GPU-{n:04d}-{g.index}") for g in nvml.gpus]
        nvml = replace(nvml, gpus=gpus)
    other: Facts = replace(
        facts,
        platform=replace(facts.platform, hostname=f"other{n}"),
        collected_at=f"2030-01-01T00:00:{n % 60:02d}Z",
        nvml=nvml,
    )
    return other


@pytest.mark.parametrize("fixture", [p.stem for p in sorted(FACTS_FIXTURES.glob("*.json"))])
def test_identity_fields_never_change_a_verdict(fixture: str) -> None:
    # What lets the fleet judge identical machines once: no check reads IDENTITY_FIELDS.
    facts = load(fixture)
    other = with_identity(facts, 7)
    assert judgment_key(other) == judgment_key(facts)
    assert evaluate(other).results == evaluate(facts).results


def test_no_rule_reads_an_identity_field() -> None:
    # The checks: every family module rules/families.py registers, and what they share.
    from blackwell_doctor.rules import families

    rules = REPO / "src" / "blackwell_doctor" / "rules"
    names = [*re.findall(r"^    (\w+),$", Path(families.__file__).read_text(), re.M), "view"]
    assert len(names) >= 9, names
    for path in (rules / f"{name}.py" for name in names):
        text = path.read_text()
        for name in ("hostname", "collected_at", "uuid"):
            assert name not in text, f"{path.name} reads {name}: drop it from IDENTITY_FIELDS"


def test_the_memo_never_joins_nodes_that_differ(tmp_path: Path) -> None:
    facts = load("sm120-driver580")
    newer = replace(facts, nvml=replace(facts.nvml, driver_version="595.45.04"))
    assert judgment_key(newer) != judgment_key(facts)
    (tmp_path / "old.json").write_bytes(encode_facts(named(facts, "old")))
    (tmp_path / "new.json").write_bytes(encode_facts(named(newer, "new")))
    report = judge(tmp_path)
    failing = {n for g in report.groups if g.id == "driver.version" for n in g.nodes}
    assert failing == {"old"}


def test_worker_processes_give_the_serial_report(fleet_dir: Path) -> None:
    for i in range(20):
        write_node(fleet_dir, "rtxpro6000x4-threadripper-iommu", f"tr{i:03d}")
    (fleet_dir / "zz-bad.json").write_text("{")
    serial = judge(fleet_dir, jobs=1)
    parallel = judge(fleet_dir, jobs=3)
    assert msgspec.json.encode(parallel) == msgspec.json.encode(serial)
    assert parallel.summary.nodes == 35


def test_worst_first(fleet_dir: Path) -> None:
    write_node(fleet_dir, "rtxpro6000x4-threadripper-iommu", "tr001")
    report = judge(fleet_dir)
    ranks = [{Status.FAIL: 0, Status.WARN: 1, Status.ERROR: 2}[g.status] for g in report.groups]
    assert ranks == sorted(ranks)
    assert report.groups[0].status is Status.FAIL
    assert report.groups[-1].status is Status.ERROR


def test_unreadable_and_future_facts_are_listed_not_fatal(fleet_dir: Path) -> None:
    (fleet_dir / "broken.json").write_text('{"schema_version": 1, "tool": ')
    future = json.loads(encode_facts(named(load("no-gpu"), "future")))
    future["schema_version"] = SCHEMA_VERSION + 1
    (fleet_dir / "future.json").write_text(json.dumps(future))
    report = judge(fleet_dir, fleet_dir / "absent.json", fleet_dir / "nope-*.json")
    reasons = {Path(u.source).name: u.reason for u in report.unjudged}
    assert set(reasons) == {"broken.json", "future.json", "absent.json", "nope-*.json"}
    assert "not a facts document" in reasons["broken.json"]
    assert f"schema_version {SCHEMA_VERSION + 1} is newer" in reasons["future.json"]
    assert reasons["absent.json"] == "no such file or directory"
    assert reasons["nope-*.json"] == "pattern matched no file"
    assert report.summary.nodes == 15
    assert report.exit_code == 1  # the findings of the judged nodes decide
    text = render_fleet(report, FleetFormat.RICH)
    assert "Not judged (4):" in text


def test_strict_makes_an_unjudged_node_exit_3(tmp_path: Path) -> None:
    write_node(tmp_path, "h200x2-captured", "ok1")
    (tmp_path / "bad.json").write_text("[]")
    assert judge(tmp_path).exit_code == 0
    assert judge(tmp_path, strict=True).exit_code == 3


def test_not_one_node_judged_is_exit_2(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("not json")
    report = judge(tmp_path)
    assert report.summary.nodes == 0
    assert report.exit_code == 2


def test_fail_on_warn_is_the_same_gate_as_check(tmp_path: Path) -> None:
    write_node(tmp_path, "rtxpro6000x4-threadripper-iommu", "tr001")  # warnings only
    assert judge(tmp_path).exit_code == 0
    assert judge(tmp_path, fail_on="warn").exit_code == 1


def test_select_limits_the_groups(fleet_dir: Path) -> None:
    report = judge(fleet_dir, select=["driver.version"])
    assert {g.id for g in report.groups} == {"driver.version"}


def test_two_files_of_one_host_are_told_apart(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "b").mkdir()
    write_node(tmp_path / "a", "no-gpu", "same")
    write_node(tmp_path / "b", "no-gpu", "same")
    report = judge(tmp_path)
    names = sorted(n.name for n in report.nodes)
    assert len(set(names)) == 2
    assert all(n.startswith("same (") for n in names)


def test_a_fifo_is_listed_not_opened(tmp_path: Path) -> None:
    import os

    os.mkfifo(tmp_path / "pipe.json")
    report = judge(tmp_path / "pipe.json")
    assert [u.reason for u in report.unjudged] == ["not a regular file"]


def test_globs_directories_and_files_each_judged_once(fleet_dir: Path) -> None:
    report = judge(fleet_dir, fleet_dir / "gpu001.json", str(fleet_dir / "gpu00*.json"))
    assert report.summary.nodes == 15


def test_json_follows_the_shipped_schema(fleet_dir: Path) -> None:
    (fleet_dir / "bad.json").write_text("{}")
    doc = json.loads(render_fleet(judge(fleet_dir), FleetFormat.JSON))
    assert doc["schema_version"] == 1
    optional("jsonschema").validate(doc, json.loads(schema_text("fleet.schema.json")))
    assert doc["groups"][0]["nodes"][0] == "gpu001"


def test_prometheus_counts_nodes_per_check(fleet_dir: Path) -> None:
    parser = optional("prometheus_client.parser")
    text = render_fleet(judge(fleet_dir), FleetFormat.PROMETHEUS)
    got = [s for f in parser.text_string_to_metric_families(text) for s in f.samples]
    [driver] = [
        s
        for s in got
        if s.name == "blackwell_doctor_fleet_check_nodes" and s.labels["check"] == "driver.version"
    ]
    assert (driver.labels["status"], driver.value) == ("fail", 12.0)
    verdicts = {
        s.labels["verdict"]: s.value for s in got if s.name == "blackwell_doctor_fleet_nodes"
    }
    assert verdicts == {"ok": 3.0, "findings": 12.0, "not_evaluated": 0.0, "unjudged": 0.0}
    node_exits = {
        s.labels["node"]: s.value for s in got if s.name == "blackwell_doctor_fleet_node_exit_code"
    }
    assert node_exits["gpu001"] == 1.0
    assert node_exits["gpu015"] == 0.0


def test_markdown_shows_hostile_hostnames_as_text(tmp_path: Path) -> None:
    write_node(tmp_path, "no-gpu", "[x](https://evil)\x1b[2J", file="evil")
    out = render_fleet(judge(tmp_path), FleetFormat.MARKDOWN)
    assert "\x1b" not in out
    assert "`[x](https://evil)\\x1b[2J`" in out


def test_hostlist_is_slurm_notation() -> None:
    assert hostlist(["gpu001", "gpu002", "gpu003", "gpu007", "gpu009", "gpu010"]) == [
        "gpu[001-003,007,009-010]"
    ]
    assert hostlist(["a1", "b", "a2", "node12"]) == ["a[1-2]", "b", "node12"]
    # Different widths are different series (gpu1 is not gpu001).
    assert hostlist(["gpu1", "gpu001"]) == ["gpu1", "gpu001"]


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def test_cli_exit_codes_and_output_file(fleet_dir: Path, tmp_path: Path) -> None:
    proc = run_cli("fleet", str(fleet_dir), "--format", "json")
    assert proc.returncode == 1, proc.stderr
    assert json.loads(proc.stdout)["summary"]["findings"] == 12
    out = tmp_path / "fleet.md"
    proc = run_cli("fleet", str(fleet_dir / "gpu01[345].json"), "-f", "markdown", "-o", str(out))
    assert proc.returncode == 0, proc.stderr
    assert "3 nodes judged" in out.read_text()
    assert "exit 0" in proc.stderr


def test_cli_bad_selection_is_one_line_exit_2(fleet_dir: Path) -> None:
    proc = run_cli("fleet", str(fleet_dir), "--select", "nosuch")
    assert proc.returncode == 2
    assert proc.stderr.strip() == "blackwell-doctor: error: no check id or family matches 'nosuch'"
    assert run_cli("fleet").returncode == 2  # no input at all: a usage error
