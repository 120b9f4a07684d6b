"""The serving.* checks: a bench run judged (check --bench), stored in the facts (collect
--bench) and judged again from them (check --facts), and what recommend makes of it.

Fixtures (tests/fixtures/bench/README.md): two runs of the real vLLM CPU server (the tiny
random Qwen3-MoE model) and four runs reconstructed from the field reports REFERENCE.md §0
cites. Goldens of the serving family per (host, run) pair: tests/golden/serving/.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.facts.bench import BenchFacts
from blackwell_doctor.facts.document import SCHEMA_VERSION, Facts, decode_facts
from blackwell_doctor.recommend.plan import LaunchOptions, Recommendation, build_recommendation
from blackwell_doctor.render import Format, render
from blackwell_doctor.report.bench_facts import read_bench
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.ruledata.runtimes import load_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES, GOLDEN, REPO, as_documented, optional
from tests.rules.rulesutil import edited_checks

BENCH = FIXTURES / "bench"
HOST_4X = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
NO_GPU = FACTS_FIXTURES / "no-gpu.json"
REAL = BENCH / "tiny-moe-vllm-cpu.json"
REAL_TIMEOUTS = BENCH / "tiny-moe-vllm-cpu-timeouts.json"
WSL2 = BENCH / "article-wsl2-55tps.json"
NATIVE = BENCH / "article-native-119tps.json"
MTP3 = BENCH / "sm120-moe-bench-stock-mtp3.json"
MTP0 = BENCH / "sm120-moe-bench-stock-mtp0.json"

# (golden name, host facts, bench run)
PAIRS = [
    ("real-tiny-moe-no-gpu", NO_GPU, REAL),
    ("real-tiny-moe-4x-rtx-pro-6000", HOST_4X, REAL),
    ("real-tiny-moe-timeouts", NO_GPU, REAL_TIMEOUTS),
    ("article-wsl2-55tps", HOST_4X, WSL2),
    ("article-native-119tps", HOST_4X, NATIVE),
    ("sm120-moe-bench-stock-mtp3", HOST_4X, MTP3),
    ("sm120-moe-bench-stock-mtp0", HOST_4X, MTP0),
]


def rel(path: Path) -> str:
    return path.relative_to(REPO).as_posix()


def with_bench(host: Path, bench: Path) -> Facts:
    facts = decode_facts(host.read_bytes(), source=rel(host))
    return msgspec.structs.replace(facts, bench=read_bench(bench.read_bytes(), source=rel(bench)))


def serving(host: Path, bench: Path) -> dict[str, Result]:
    report = evaluate(with_bench(host, bench), select=["serving"])
    return {r.id: r for r in report.results}


# --------------------------------------------------------------------------- goldens


@pytest.mark.parametrize(("name", "host", "bench"), PAIRS, ids=[p[0] for p in PAIRS])
@pytest.mark.parametrize("fmt", [Format.RICH, Format.JSON])
def test_serving_golden(
    name: str, host: Path, bench: Path, fmt: Format, update_goldens: bool
) -> None:
    report = evaluate(with_bench(host, bench), select=["serving"], source=rel(host))
    out = as_documented(render(report, fmt, color=False, verbose=True))
    golden = GOLDEN / "serving" / f"{name}.{fmt.extension}"
    if update_goldens:
        golden.parent.mkdir(parents=True, exist_ok=True)
        golden.write_text(out, encoding="utf-8")
        return
    assert out == golden.read_text(encoding="utf-8"), (
        f"{golden.relative_to(REPO)} differs; run `pytest --update-goldens` and review the diff"
    )


# --------------------------------------------------------------------------- verdicts


def test_the_real_server_run_is_judged_from_its_own_figures() -> None:
    got = serving(NO_GPU, REAL)
    assert got["serving.errors"].status is Status.PASS
    assert "all 48 requests of 3 shapes succeeded" in got["serving.errors"].summary
    # The bench ran on a CPU-only VM: no GPU to look an expectation up with.
    assert got["serving.throughput"].status is Status.SKIP
    assert "GPUs the server runs on are unknown" in got["serving.throughput"].summary
    # One user on a 2-core VM: the front end hands the client several tokens at once
    # (ITL p50 0.00 ms while the server's own ITL mean is 3.95 ms).
    tail = got["serving.latency_tail"]
    assert tail.status is Status.WARN
    assert "short (1 user): ITL p50 0.00 ms" in tail.summary
    assert "the server's own ITL mean is 3.95 ms" in tail.summary
    assert tail.remedy is not None
    assert "proxy_buffering off" in tail.remedy.summary
    # 32 users: p99 4.8x the p50, within the 6x a healthy server's interleaved prefill allows.
    assert "concurrent (32 users): ITL p99 52.94 ms is 4.8x the p50 11.13 ms (within 6x)" in (
        tail.summary
    )
    # The qwen3 reasoning parser split thinking out; the honest rate is the answer's.
    reasoning = got["serving.reasoning_accounting"]
    assert reasoning.status is Status.PASS
    assert "short: 1,801 of 2,048 output tokens (88%) were reasoning" in reasoning.summary
    assert "238.0 output tok/s counts them" in reasoning.summary
    assert "the answer came at 28.7 tok/s" in reasoning.summary


def test_a_model_without_expectation_is_a_skip_that_says_what_is_known() -> None:
    throughput = serving(HOST_4X, REAL)["serving.throughput"]
    assert throughput.status is Status.SKIP
    assert "no throughput expectation for model 'tiny-moe' on 4 x NVIDIA RTX PRO 6000" in (
        throughput.summary
    )
    assert "Qwen3.5-397B-A17B (NVFP4) on 4 x RTX PRO 6000 at 1, 2, 4, 8 users" in (
        throughput.summary
    )


def test_requests_that_failed_block_the_figures() -> None:
    got = serving(NO_GPU, REAL_TIMEOUTS)
    errors = got["serving.errors"]
    assert errors.status is Status.FAIL
    assert "short: 5 of 16 failed (past the request deadline 5)" in errors.summary
    assert "concurrent: 16 of 16 failed" in errors.summary
    for check_id in ("serving.throughput", "serving.latency_tail", "serving.reasoning_accounting"):
        assert got[check_id].status is Status.SKIP
        assert got[check_id].summary == (
            "not judged: requests failed during the run (see serving.errors)"
        )


def test_the_wsl2_report_is_below_the_floor() -> None:
    throughput = serving(HOST_4X, WSL2)["serving.throughput"]
    assert throughput.status is Status.WARN
    assert "single-user (1 user): 55.0 output tok/s, below the floor of 60.0" in throughput.summary
    assert throughput.remedy is not None
    assert "recommend" in throughput.remedy.summary
    assert "withdrawn" in str(throughput.evidence["confidence"])


@pytest.mark.parametrize("bench", [NATIVE, MTP3, MTP0], ids=lambda p: p.stem)
def test_healthy_field_reports_pass(bench: Path) -> None:
    throughput = serving(HOST_4X, bench)["serving.throughput"]
    assert throughput.status is Status.PASS
    assert "above the floor" in throughput.summary


def test_a_healthy_server_without_speculative_decoding_is_not_called_slow() -> None:
    """The article's floor (100 tok/s) would call this stock, MTP=0 server broken: 73.71
    tok/s in the same author's controlled run. The shipped floor is below it."""
    throughput = serving(HOST_4X, MTP0)["serving.throughput"]
    assert "single-user (1 user): 73.7 output tok/s, above the floor" in throughput.summary
    assert "eight-users (8 users): 376.3 output tok/s, above the floor" in throughput.summary


def test_unknown_gpu_count_or_model_never_matches_another_host() -> None:
    # The same Qwen run on the 8x B200 fixture: no expectation for that host.
    got = serving(FACTS_FIXTURES / "b200-x8.json", WSL2)["serving.throughput"]
    assert got.status is Status.SKIP
    assert "on 8 x NVIDIA B200" in got.summary


def test_without_bench_results_the_family_skips() -> None:
    facts = decode_facts(HOST_4X.read_bytes())
    for r in evaluate(facts, select=["serving"]).results:
        assert r.status is Status.SKIP
        assert r.summary == "no bench results given (--bench run.json)"


# --------------------------------------------------------------------------- planted figures


def planted(**shape: Any) -> BenchFacts:
    base: dict[str, Any] = {
        "name": "s",
        "concurrency": 1,
        "input_tokens": 128,
        "output_tokens_max": 128,
        "requests": 100,
        "completed": 100,
        "duration_s": 10.0,
        "complete": True,
        "itl_ms": {"p50": 10.0, "p99": 20.0},
        "itl_samples": 12700,
        "output_tokens": 12800,
        "reasoning_tokens": 0,
        "answer_tokens": 12800,
        "output_tokens_per_s": 1280.0,
        "answer_tokens_per_s": 1280.0,
        "token_source": "usage",
        "reasoning_source": "none",
    }
    base.update(shape)
    run = {
        "source": "planted.json",
        "started_at": "",
        "tool": "test",
        "url": "http://127.0.0.1:8000",
        "model": "m",
        "complete": True,
        "interrupted": False,
        "shapes": [base],
    }
    return msgspec.convert(run, BenchFacts)


def judged(bench: BenchFacts, check_id: str) -> Result:
    facts = msgspec.structs.replace(decode_facts(NO_GPU.read_bytes()), bench=bench)
    [r] = [r for r in evaluate(facts, select=[check_id]).results if r.id == check_id]
    return r


@pytest.mark.parametrize(
    ("users", "p99", "status"),
    [
        (1, 29.0, Status.PASS),
        (1, 31.0, Status.WARN),
        (8, 59.0, Status.PASS),
        (8, 61.0, Status.WARN),
    ],
)
def test_latency_tail_limits_one_user_and_several(users: int, p99: float, status: Status) -> None:
    r = judged(planted(concurrency=users, itl_ms={"p50": 10.0, "p99": p99}), "serving.latency_tail")
    assert r.status is status
    if status is Status.WARN:
        assert r.remedy is not None
        assert "stalled" in r.remedy.summary


def test_a_p99_over_too_few_gaps_is_not_judged() -> None:
    r = judged(planted(itl_ms={"p50": 10.0, "p99": 90.0}, itl_samples=500), "serving.latency_tail")
    assert r.status is Status.SKIP
    assert "500 gaps, too few for a p99 (needs 1000)" in r.summary


def test_one_failed_request_is_a_warning_with_its_kind() -> None:
    r = judged(planted(completed=99, errors={"early_close": 1}), "serving.errors")
    assert r.status is Status.WARN
    assert "1 of 100 failed (stream closed early (truncated) 1)" in r.summary


def test_an_interrupted_run_is_a_warning() -> None:
    bench = msgspec.structs.replace(planted(), interrupted=True, complete=False)
    r = judged(bench, "serving.errors")
    assert r.status is Status.WARN
    assert "interrupted" in r.summary


def test_a_server_that_sent_no_usage_makes_the_counts_suspect() -> None:
    r = judged(planted(token_source="estimated"), "serving.reasoning_accounting")
    assert r.status is Status.WARN
    assert "chunks" in r.summary


def test_an_unreachable_server_fails_with_the_url() -> None:
    bench = msgspec.structs.replace(planted(), server_error="unreachable: connection refused")
    r = judged(bench, "serving.errors")
    assert r.status is Status.FAIL
    assert r.remedy is not None
    assert "http://127.0.0.1:8000" in r.remedy.summary


# --------------------------------------------------------------------------- the CLI


def test_collect_stores_the_run_and_check_facts_replays_it(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    stored = tmp_path / "facts.json"
    code, _, _ = run(
        ["collect", "--no-probe", "--redact", "--bench", str(REAL), "-o", str(stored)], capsys
    )
    assert code == 0
    doc = json.loads(stored.read_text())
    assert doc["schema_version"] == SCHEMA_VERSION >= 3  # bench since version 3
    schema = json.loads(schema_text("facts.schema.json"))
    optional("jsonschema").Draft202012Validator(schema).validate(doc)
    # Measurements only: no verdict, no per-request samples, the host hidden by --redact.
    assert doc["bench"]["url"] == "http://<redacted>:18471"
    assert doc["bench"]["shapes"][0]["itl_samples"] == 1858
    assert "samples" not in doc["bench"]["shapes"][0]
    assert not {"status", "verdict", "severity"} & set(doc["bench"]["shapes"][0])
    live = run(["check", "--bench", str(REAL), "--select", "serving", "-f", "json"], capsys)
    replay = run(["check", "--facts", str(stored), "--select", "serving", "-f", "json"], capsys)
    verdicts = [
        [(r["id"], r["status"], r["summary"]) for r in json.loads(out)["results"]]
        for _, out, _ in (live, replay)
    ]
    assert verdicts[0] == verdicts[1]
    assert verdicts[1][2][:2] == ("serving.latency_tail", "warn")


def test_a_stored_run_is_judged_by_the_thresholds_of_the_reading_tool(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    host = decode_facts(HOST_4X.read_bytes())
    stored = tmp_path / "node.json"
    from blackwell_doctor.facts.document import encode_facts

    stored.write_bytes(
        encode_facts(
            msgspec.structs.replace(
                host, bench=read_bench(NATIVE.read_bytes(), source="native.json")
            )
        )
    )
    argv = ["check", "--facts", str(stored), "--select", "serving.throughput", "-f", "json"]
    before = json.loads(run(argv, capsys)[1])["results"][0]
    assert before["status"] == "pass"
    # The floor for one user is raised above the stored 119 tok/s: the same file, judged
    # again, is now a slow path.
    with edited_checks(
        monkeypatch,
        tmp_path,
        "serving.toml",
        lambda t: t.replace("output_tokens_per_s = 60\n", "output_tokens_per_s = 130\n", 1),
    ):
        after = json.loads(run(argv, capsys)[1])["results"][0]
    assert after["status"] == "warn"
    assert "119.0 output tok/s, below the floor of 130.0" in after["summary"]


def test_an_older_facts_file_is_still_read(capsys: pytest.CaptureFixture[str]) -> None:
    """A version 2 document (before ``bench``) is a version 3 one without it."""
    from blackwell_doctor.facts.document import encode_facts

    host = decode_facts(HOST_4X.read_bytes())
    v2 = encode_facts(msgspec.structs.replace(host, schema_version=2))
    assert json.loads(v2)["schema_version"] == 2
    facts = decode_facts(v2)
    assert facts.schema_version == SCHEMA_VERSION
    assert facts.bench is None
    assert msgspec.structs.replace(facts, schema_version=2) == msgspec.structs.replace(
        host, schema_version=2
    )


@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"{not json", "is not JSON"),
        (b'{"schema_version": 7}', "not a bench run of schema_version 1"),
        (b'{"schema_version": 1, "shapes": 3}', "not a valid bench run"),
        (b"[1, 2]", "is not JSON"),
    ],
)
def test_a_bad_bench_file_is_one_line_and_exit_2(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, content: bytes, message: str
) -> None:
    bad = tmp_path / "run.json"
    bad.write_bytes(content)
    for command in (["check", "--facts", str(NO_GPU)], ["collect", "--no-probe"]):
        code, out, err = run([*command, "--bench", str(bad)], capsys)
        assert code == 2
        assert out == ""
        assert err.count("\n") == 1
        assert message in err
        assert "Traceback" not in err


def test_a_missing_bench_file_is_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code, _, err = run(
        ["check", "--facts", str(NO_GPU), "--bench", str(tmp_path / "no.json")], capsys
    )
    assert code == 2
    assert err.startswith("error: cannot read bench file") or "cannot read bench file" in err


# --------------------------------------------------------------------------- recommend


def recommendation(bench: Path) -> Recommendation:
    facts = with_bench(HOST_4X, bench)
    rec, _ = build_recommendation(facts, evaluate(facts), load_catalogue(), LaunchOptions())
    return rec


def test_a_measured_slow_path_puts_the_runtime_change_first_after_the_driver() -> None:
    ids = [a.id for a in recommendation(WSL2).actions]
    assert ids.index("runtime") < ids.index("iommu")
    runtime = next(a for a in recommendation(WSL2).actions if a.id == "runtime")
    assert "serving.throughput" in runtime.why
    assert runtime.notes[0].startswith("measured slow path: single-user (1 user): 55.0")
    # Without a bench run, the runtime action keeps its place after the host's fixes.
    facts = decode_facts(HOST_4X.read_bytes())
    rec, _ = build_recommendation(facts, evaluate(facts), load_catalogue(), LaunchOptions())
    plain = [a.id for a in rec.actions]
    assert plain.index("runtime") > plain.index("iommu")


def test_a_measured_healthy_path_says_the_runtime_change_is_not_needed() -> None:
    runtime = next(a for a in recommendation(MTP0).actions if a.id == "runtime")
    assert "serving.throughput" not in runtime.why
    assert "no runtime change is needed for speed" in runtime.effect.summary
    assert "runtime change is not needed for speed" in runtime.notes[0]
    ids = [a.id for a in recommendation(MTP0).actions]
    assert ids.index("runtime") > ids.index("iommu")


# --------------------------------------------------------------------------- fleet


def test_fleet_exports_the_bench_figures_of_the_nodes_that_carry_them(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    parser = optional("prometheus_client.parser")

    from blackwell_doctor.facts.document import encode_facts

    for name, bench in (("gpu001", WSL2), ("gpu002", MTP3)):
        facts = with_bench(HOST_4X, bench)
        platform = msgspec.structs.replace(facts.platform, hostname=name)
        (tmp_path / f"{name}.json").write_bytes(
            encode_facts(msgspec.structs.replace(facts, platform=platform))
        )
    (tmp_path / "gpu003.json").write_bytes(HOST_4X.read_bytes())  # no bench run
    _, text, _ = run(["fleet", str(tmp_path), "--format", "prometheus"], capsys)
    samples = {
        (s.name, s.labels.get("node"), s.labels.get("shape"), s.labels.get("quantile")): s.value
        for family in parser.text_string_to_metric_families(text)
        for s in family.samples
        if s.name.startswith("blackwell_doctor_fleet_bench_")
    }
    rate = "blackwell_doctor_fleet_bench_output_tokens_per_second"
    assert samples[(rate, "gpu001", "single-user", None)] == 55.0
    assert samples[(rate, "gpu002", "eight-users", None)] == 651.74
    # Base units: the run's 36.76 ms ITL p50 is 0.03676 s; no p99 in the source, none here.
    itl = "blackwell_doctor_fleet_bench_itl_seconds"
    assert samples[(itl, "gpu002", "eight-users", "0.5")] == pytest.approx(0.03676)
    assert (itl, "gpu002", "eight-users", "0.99") not in samples
    assert not any(node == "gpu003" for _, node, _, _ in samples)
    _, out, _ = run(["fleet", str(tmp_path), "--format", "json"], capsys)
    nodes = {n["name"]: n for n in json.loads(out)["nodes"]}
    assert nodes["gpu001"]["bench"]["shapes"][0]["output_tokens_per_s"] == 55.0
    assert "bench" not in nodes["gpu003"]
    # Without any bench run, the textfile has no bench series at all.
    _, plain, _ = run(["fleet", str(HOST_4X), "--format", "prometheus"], capsys)
    assert "fleet_bench" not in plain


def test_a_run_without_shapes_is_not_evaluated_and_says_why() -> None:
    bench = msgspec.structs.replace(planted(), shapes=[])
    r = judged(bench, "serving.errors")
    assert r.status is Status.ERROR
    assert "measured no shape" in r.summary
    assert "--soak" in r.summary
