"""The shipped examples (issue 23): every command on real hosts without a GPU, from the files
the installed package carries; the no-GPU dead ends point to them; and the small fixes that
came with them (collect says what it wrote, fleet counts nodes by worst status, recommend's
no-GPU action is titled as an action)."""

from __future__ import annotations

import importlib.util
import json
import re
import shlex
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.model.scan import read_model_dir
from blackwell_doctor.ruledata.examples import Example, example_path, load_examples
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.ruledata.serving import load_serving_data
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES, REPO

EXAMPLES = REPO / "examples"
# Files in examples/ that are no example's part: how the captured ones were made.
NOT_PARTS = {"README.md", "bench/capture.sh", "bench/shapes.toml"}


def test_every_example_file_exists_and_every_file_is_an_example() -> None:
    named: set[str] = set()
    for example in load_examples().example:
        for name in example.files():
            assert example_path(name).exists(), f"{example.name}: {name}"
            path = EXAMPLES / name
            named |= {
                str(p.relative_to(EXAMPLES))
                for p in ([path] if path.is_file() else path.rglob("*"))
            }
    on_disk = {str(p.relative_to(EXAMPLES)) for p in EXAMPLES.rglob("*") if p.is_file()}
    assert on_disk - NOT_PARTS == named


def test_copies_of_fixtures_are_identical() -> None:
    """An example file with a fixture's name is that fixture (one real artefact, two uses)."""
    fixtures = {p.name: p for p in FIXTURES.rglob("*") if p.is_file()}
    copies = 0
    for path in EXAMPLES.rglob("*"):
        if path.is_file() and path.name in fixtures and path.name != "README.md":
            if path.parent.parent.name == "models":  # config.json of a model: same model dir
                original = FIXTURES / "models" / path.parent.name / path.name
            else:
                original = fixtures[path.name]
            assert path.read_bytes() == original.read_bytes(), path
            copies += 1
    assert copies >= 8


def test_reconstructed_example_hosts_are_what_the_generator_writes() -> None:
    spec = importlib.util.spec_from_file_location(
        "make_fixtures", FACTS_FIXTURES / "make_fixtures.py"
    )
    assert spec is not None
    assert spec.loader is not None
    gen = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(gen)
    for name, make in gen.EXAMPLE_HOSTS.items():
        data = gen.document(name, make())
        assert (EXAMPLES / "hosts" / name).read_bytes() == data, name


@pytest.mark.parametrize(
    "argv",
    [
        [verb, "--example", e.name, *shlex.split(rest)]
        for e in load_examples().example
        for verb, _, rest in (c.partition(" ") for c in e.commands)
    ],
    ids=lambda a: " ".join(a),
)
def test_every_listed_command_runs(argv: list[str], capsys: pytest.CaptureFixture[str]) -> None:
    r = run(argv, capsys)
    assert r.code in (0, 1), r.err
    assert r.out.strip()
    assert not r.err.startswith("blackwell-doctor: error")


def test_examples_lists_every_example_with_its_origin(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["examples"], capsys)
    assert r.code == 0
    for e in load_examples().example:
        assert f"\n{e.name}: " in r.out
    assert "blackwell-doctor check --example wsl2-rtxpro6000x4" in r.out
    assert "captured on a real 2x H200 machine" in r.out
    # A fleet's nodes are host examples, named (their files are theirs).
    assert "  nodes: wsl2-rtxpro6000x4, fixed-rtxpro6000x4, dgx-spark, h200x2\n" in r.out


def test_check_on_the_wsl2_example(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["check", "--example", "wsl2-rtxpro6000x4", "--format", "json"], capsys)
    assert r.code == 1
    import json

    doc = json.loads(r.out)
    status = {res["id"]: res["status"] for res in doc["results"]}
    assert status["driver.version"] == "fail"
    assert status["platform.wsl"] == "warn"
    assert status["serving.throughput"] == "warn"  # the article's 55 tok/s, below 60
    assert status["logs.platform"] == "warn"  # the real WSL pinned-memory line
    assert status["model.fit"] == "pass"
    assert doc["host"]["source"] == "example wsl2-rtxpro6000x4"


def test_the_fixed_host_passes_what_the_wsl2_host_fails(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["check", "--example", "fixed-rtxpro6000x4", "--select", "driver,platform,pci"], capsys)
    assert r.code == 0
    assert "[FAIL]" not in r.out
    assert "[warn]" not in r.out


def test_apply_example_is_a_plan_only(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["apply", "--example", "wsl2-rtxpro6000x4"], capsys)
    assert r.code == 0
    assert "--tensor-parallel-size 4" in r.out
    assert "Nothing was changed" in r.out
    for flag in ("--yes", "--rollback"):
        r = run(["apply", "--example", "wsl2-rtxpro6000x4", flag], capsys)
        assert r.code == 2
        assert "plan only" in r.err


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--example", "h200x2", "--facts", "x.json"],
        ["recommend", "--example", "h200x2", "--host-root", "/"],
        ["model", "examples/models/x", "--example", "h200x2"],
        ["fleet", "a.json", "--example", "lab"],
        ["bench", "--example", "max-num-seqs-1", "--url", "http://127.0.0.1:1"],
    ],
)
def test_example_beside_what_it_replaces_is_a_usage_error(
    argv: list[str], capsys: pytest.CaptureFixture[str]
) -> None:
    r = run(argv, capsys)
    assert r.code == 2
    assert "give one or the other" in r.err
    assert "Traceback" not in r.err


def test_unknown_example_and_missing_part(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["check", "--example", "nope"], capsys)
    assert r.code == 2
    assert "no example named 'nope'" in r.err
    assert "wsl2-rtxpro6000x4" in r.err
    r = run(["bench", "--example", "dgx-spark"], capsys)
    assert r.code == 2
    assert "examples with one: same-server, max-num-seqs-1" in r.err


def test_bench_compare_example(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["bench", "--example", "max-num-seqs-1", "--fail-on-regression", "10"], capsys)
    assert r.code == 1  # the one-sequence server is worse, beyond its noise
    assert "scorecard" in r.out
    assert "5 runs before, 5 after" in r.out
    r = run(["bench", "--example", "same-server", "--fail-on-regression", "10"], capsys)
    assert r.code == 0  # A/A: no regression
    assert "3 runs before, 3 after" in r.out


def test_model_example_sizes_on_the_example_gpus(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["model", "--example", "dgx-spark"], capsys)
    assert r.code == 0  # gpt-oss-120b (MXFP4) fits one GB10's unified memory
    assert "fit on 1x NVIDIA GB10" in r.out
    r = run(["model", "--example", "h200x2"], capsys)
    assert r.code == 0
    assert "fit on 2x NVIDIA H200" in r.out
    r = run(["model"], capsys)
    assert r.code == 2
    assert "--example" in r.err


def test_fleet_counts_nodes_by_worst_status(capsys: pytest.CaptureFixture[str]) -> None:
    """The fixed host has a warning (model.kernel_path: its NVFP4 MoE model on SM 12.x): it
    is not "ok" (issue 23)."""
    r = run(["fleet", "--example", "lab", "--format", "json"], capsys)
    import json

    s = json.loads(r.out)["summary"]
    assert (s["worst_fail"], s["worst_warn"], s["worst_ok"]) == (2, 1, 1)
    assert s["ok"] == 2  # exit 0 at the fail gate: the warning node too
    r = run(["fleet", "--example", "lab"], capsys)
    assert "4 nodes judged: 2 fail, 1 warn, 1 ok (worst status)" in r.out


def test_no_gpu_dead_ends_point_to_the_examples(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    no_gpu = str(FACTS_FIXTURES / "no-gpu.json")
    for fmt in ("shell", "compose"):
        r = run(["recommend", "--facts", no_gpu, "-f", fmt], capsys)
        assert r.code == 2
        assert f"blackwell-doctor recommend -f {fmt} --example " in r.err
    r = run(
        [
            "apply", "--facts", no_gpu, "--facts-from-another-host",
            "--model-dir", str(example_path("models/qwen3-235b-a22b-fp4")),
        ],
        capsys,
    )  # fmt: skip
    assert r.code == 2
    assert "blackwell-doctor apply --example " in r.err


def test_no_gpu_action_is_titled_as_an_action(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["recommend", "--facts", str(FACTS_FIXTURES / "no-gpu.json"), "-f", "json"], capsys)
    import json

    actions = json.loads(r.out)["actions"]
    assert [a["why"] for a in actions] == [["gpu.present"]]
    titles = {spec.title for spec in load_rule_data().checks.values()}
    assert actions[0]["title"] not in titles


def test_collect_says_what_it_wrote_and_how_to_judge_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    out = tmp_path / "facts.json"
    log = example_path("logs/vllm-1084-wsl-pin-memory.log")
    r = run(["collect", "--no-probe", "--logs", str(log), "-o", str(out)], capsys)
    assert r.code == 0
    assert out.is_file()
    assert f"wrote {out}: facts of " in r.err
    assert "1 log source(s)" in r.err
    assert f"blackwell-doctor check --facts {out}" in r.err
    assert run(["check", "--facts", str(out)], capsys).code in (0, 1, 3)


def test_check_without_a_gpu_points_to_the_examples(capsys: pytest.CaptureFixture[str]) -> None:
    r = run(["check", "--facts", str(FACTS_FIXTURES / "no-gpu.json")], capsys)
    assert r.code == 1
    assert "`blackwell-doctor examples` lists the shipped ones" in " ".join(r.out.split())


def test_every_finding_becomes_an_action_titled_as_one(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """No action is titled with a check's title (which states the healthy state): a finding no
    [[action]] takes is "Clear the <id> finding" (issue 23)."""
    import json

    titles = {spec.title for spec in load_rule_data().checks.values()}
    argv = ["recommend", "--example", "wsl2-rtxpro6000x4", "-f", "json"]
    actions = json.loads(run(argv, capsys).out)["actions"]
    assert len(actions) >= 5
    for action in actions:
        assert action["title"] not in titles, action["id"]
    fallback = {a["id"]: a["title"] for a in actions}
    assert fallback["logs.platform"] == "Clear the logs.platform finding"


def _findings(doc: dict[str, Any]) -> set[tuple[str, str, str]]:
    return {
        (r["id"], r["status"], r["summary"])
        for r in doc["results"]
        if r["status"] in ("fail", "warn", "error")
    }


def test_one_host_gets_one_verdict_from_check_and_from_fleet(
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Issue 40: probe.tiles was [ok] for `check --example wsl2-rtxpro6000x4` (its logs show
    no MoE fallback) and WARN for the same host in `fleet --example lab` (its facts file
    alone). Each node of the fleet example is judged as `check --example NAME` judges it:
    the same findings, word for word."""
    r = run(["fleet", "--example", "lab", "--format", "json"], capsys)
    fleet = json.loads(r.out)
    lab = load_examples().named("lab")
    assert lab is not None
    assert [n["name"] for n in fleet["nodes"]] == [f"example {n}" for n in lab.nodes]
    for name in lab.nodes:
        node = f"example {name}"
        in_fleet = {
            (g["id"], g["status"], g["summary"]) for g in fleet["groups"] if node in g["nodes"]
        }
        r = run(["check", "--example", name, "--format", "json"], capsys)
        assert in_fleet == _findings(json.loads(r.out)), name


def test_probe_tiles_says_which_way_the_logs_went(capsys: pytest.CaptureFixture[str]) -> None:
    """The one check whose verdict turns on the runtime's logs says so both ways."""
    with_logs = run(["check", "--example", "wsl2-rtxpro6000x4", "-f", "json"], capsys)
    tiles = next(x for x in json.loads(with_logs.out)["results"] if x["id"] == "probe.tiles")
    assert tiles["status"] == "pass"
    assert "the runtime logs scanned show no MoE kernel fallback" in tiles["summary"]
    facts = str(example_path("hosts/rtxpro6000x4-wsl2-driver580.json"))
    alone = run(["check", "--facts", facts, "-f", "json"], capsys)
    tiles = next(x for x in json.loads(alone.out)["results"] if x["id"] == "probe.tiles")
    assert tiles["status"] == "warn"
    assert "no runtime log was scanned (--logs)" in tiles["summary"]


def _params_in_name(name: str) -> float:
    """``397e9`` for "Qwen3.5-397B-A17B (NVFP4)": the total a model's name states."""
    found = re.search(r"(\d+(?:\.\d+)?)B\b", name)
    assert found is not None, name
    return float(found.group(1)) * 1e9


@pytest.mark.parametrize(
    "example", [e for e in load_examples().example if e.bench], ids=lambda e: e.name
)
def test_every_example_is_one_coherent_host(
    example: Example, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: the WSL example's model directory was Qwen3-235B while its bench run, of
    Qwen3.5-397B, was judged against the Qwen3.5-397B floor. An example's bench run is judged
    against floors (serving.throughput is not skipped), those floors are for the model the
    run served on the example's GPUs, and the example's model directory is that model: its
    name and its parameter count (within 5% of the size the floors' model name states)."""
    r = run(["check", "--example", example.name, "-f", "json"], capsys)
    results = {x["id"]: x for x in json.loads(r.out)["results"]}
    throughput = results["serving.throughput"]
    assert throughput["status"] in ("pass", "warn", "fail"), throughput["summary"]
    judged_as = str(throughput["evidence"]["expectation"]).split(" on ")[0]
    [floors] = {e.model for e in load_serving_data().expectation if e.model == judged_as}
    names = {
        n.casefold()
        for e in load_serving_data().expectation
        if e.model == floors
        for n in e.model_names
    }
    assert example.bench is not None
    served = json.loads(example_path(example.bench).read_text())["server"]["model"]
    assert any(n in served.casefold() for n in names), (served, names)
    assert example.model is not None, f"{example.name}: a bench run and no model"
    model_dir = example_path(example.model)
    assert any(n in model_dir.name.casefold() for n in names), (model_dir.name, names)
    params = read_model_dir(model_dir).parameters
    assert params is not None
    assert params.total == pytest.approx(_params_in_name(floors), rel=0.05)
    assert results["model.fit"]["status"] in ("pass", "warn", "fail")
