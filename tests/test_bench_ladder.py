"""``bench --compare A B C ...``: a ladder of steps and the first-to-last change, each with
its interval, and what changed at each step from the runs' pinned environments (issue 21);
two files stay exactly today's compare."""

from __future__ import annotations

import itertools
import json
import math
from pathlib import Path

import pytest

from blackwell_doctor.render.bench import encode
from blackwell_doctor.report.bench import BenchRun, Comparison, RequestSample, ShapeResult
from blackwell_doctor.report.bench_env import Environment, HostPin
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules.environment import words
from blackwell_doctor.rules.ladder import ladder
from tests.benchdocs import bench_run
from tests.cli import run
from tests.conftest import as_documented, skip_without

try:
    import jsonschema
except ModuleNotFoundError as exc:
    skip_without(exc)

FIXTURES = Path(__file__).parent / "fixtures" / "bench"
GOLDEN = Path(__file__).parent / "golden" / "bench-compare"
THROUGHPUT = "output_tokens_per_s"
RESAMPLES = 200  # the bootstrap's smallest: these tests are about the ladder, not its intervals


def _shape(scale: float, *, name: str = "s", n: int = 40) -> ShapeResult:
    """``n`` requests whose latencies are ``scale`` times a fixed spread: output tokens/s
    is 1/scale times that of scale 1."""
    samples = [
        RequestSample(
            ok=True,
            ttft_ms=scale * (50.0 + i % 7),
            e2e_ms=scale * (500.0 + 3 * (i % 11)),
            itl_ms=[scale * (10.0 + (i + k) % 5) for k in range(30)],
            output_tokens=31,
        )
        for i in range(n)
    ]
    # One user: the run lasts as long as its requests, one after the other.
    duration_s = sum(s.e2e_ms or 0.0 for s in samples) / 1000.0
    metrics = shape_metrics(
        samples,
        duration_s=duration_s,
        reasoning_estimates=[None] * n,
        server_generation_tokens=None,
    )
    return ShapeResult(
        name=name,
        description="",
        concurrency=1,
        input_tokens=64,
        input_tokens_requested=64,
        input_size_source="tokenize",
        output_tokens_max=31,
        requests=n,
        completed=n,
        errors={},
        duration_s=10.0,
        complete=True,
        metrics=metrics,
        server=None,
        equivalence=[],
        samples=samples,
        notes=[],
    )


def _env(*, kernel: str, mtp: str, util: str, driver: str, cuda: str, image: str) -> Environment:
    return Environment(
        server_version="0.17.1",
        server_config={
            "server_info.vllm_config.speculative_config.num_speculative_tokens": mtp,
            "vllm:cache_config_info.gpu_memory_utilization": util,
        },
        host=HostPin(
            source="this host",
            gpus=["NVIDIA RTX PRO 6000 Blackwell Workstation Edition"] * 4,
            driver_version=driver,
            cuda_driver_version=cuda,
            kernel_release=kernel,
            container_image=image,
        ),
    )


# The article's ladder, honestly: 55 -> 119 -> 134 -> 142 -> 283 tok/s, each step a run of
# 40 requests, each environment pinned as the article tells its steps: WSL2 -> native
# Linux (the kernel), "+ MTP=5 + config tuning" (two settings at once), "+ Driver 595 + CUDA
# 13.2" (two at once), "+ K=64 kernel" (another image).
ARTICLE = (55.0, 119.0, 134.0, 142.0, 283.0)
WSL2 = "6.6.87.2-microsoft-standard-WSL2"
NATIVE = "6.8.0-60-generic"
STOCK = "vllm/vllm-openai:v0.17.1"
K64 = "example.org/vllm-k64:v0.17.1"
ENVS = (
    _env(kernel=WSL2, mtp="0", util="0.9", driver="590.44", cuda="13.1", image=STOCK),
    _env(kernel=NATIVE, mtp="0", util="0.9", driver="590.44", cuda="13.1", image=STOCK),
    _env(kernel=NATIVE, mtp="5", util="0.95", driver="590.44", cuda="13.1", image=STOCK),
    _env(kernel=NATIVE, mtp="5", util="0.95", driver="595.12", cuda="13.2", image=STOCK),
    _env(kernel=NATIVE, mtp="5", util="0.95", driver="595.12", cuda="13.2", image=K64),
)


def _runs(
    rates: tuple[float, ...] = ARTICLE, envs: tuple[Environment, ...] = ENVS
) -> list[BenchRun]:
    return [
        bench_run(_shape(ARTICLE[0] / rate), schema_version=4, environment=env)
        for rate, env in zip(rates, envs, strict=True)
    ]


def _row(doc_comparisons: list[Comparison], metric: str = THROUGHPUT) -> Comparison:
    return next(r for r in doc_comparisons if r.metric == metric)


def test_each_step_against_the_one_before_and_the_first_against_the_last() -> None:
    names = [f"r{i}.json" for i in range(len(ARTICLE))]
    doc = ladder(_runs(), names, resamples=RESAMPLES)
    assert [(s.before, s.after) for s in doc.steps] == list(itertools.pairwise(names))
    assert (doc.cumulative.before, doc.cumulative.after) == (names[0], names[-1])
    for step, (a, b) in zip(doc.steps, itertools.pairwise(ARTICLE), strict=True):
        row = _row(step.comparisons)
        assert row.change_pct == pytest.approx((b / a - 1) * 100, rel=1e-6)
        low, change, high = row.ci_low_pct, row.change_pct, row.ci_high_pct
        assert low is not None
        assert change is not None
        assert high is not None
        assert low <= change <= high
    total = _row(doc.cumulative.comparisons)
    assert total.change_pct == pytest.approx((283 / 55 - 1) * 100, rel=1e-6)
    assert total.verdict == "better"
    # 55 -> 119 is far past the default noise floor (30%); 134 -> 142 (+6%) is not.
    assert _row(doc.steps[0].comparisons).verdict == "better"
    assert _row(doc.steps[2].comparisons).verdict != "better"
    # Five compares, each at 1 - 0.05/5: every interval of the table holds at 95%.
    assert doc.per_compare_confidence == pytest.approx(0.99)
    assert all(s.confidence == pytest.approx(0.99) for s in [*doc.steps, doc.cumulative])


def test_what_changed_at_each_step_comes_from_the_pinned_environments() -> None:
    doc = ladder(_runs(), [f"r{i}" for i in range(5)], resamples=RESAMPLES)
    envs = [s.environment for s in doc.steps]
    assert [getattr(e, "verdict", None) for e in envs] == [
        "one difference",
        "confounded",
        "confounded",
        "one difference",
    ]
    step4 = doc.steps[2].environment
    assert not isinstance(step4, type(None))
    keys = [c.key for c in step4.differences]  # type: ignore[union-attr]
    assert keys == ["CUDA (driver)", "GPU driver"]
    text = encode(doc)
    assert '"verdict": "confounded"' in text


def test_the_ladder_in_every_format(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for i, r in enumerate(_runs()):
        path = tmp_path / f"step{i}.json"
        path.write_text(encode(r))
        paths.append(str(path))
    argv = ["bench", "--compare", *paths, "--resamples", str(RESAMPLES)]
    res = run([*argv, "-f", "json"], capsys)
    assert res.code == 0, res.err
    doc = json.loads(res.out)
    jsonschema.Draft202012Validator(json.loads(schema_text("bench-ladder.schema.json"))).validate(
        doc
    )
    assert doc["runs"] == paths
    assert len(doc["steps"]) == 4
    text = run(argv, capsys)
    assert text.code == 0
    lines = text.out.splitlines()
    # The steps table: each step, the cumulative row, what changed.
    step_rows = [ln for ln in lines if ln.startswith(("1 ", "2 ", "3 ", "4 ", "1-5 "))]
    assert len(step_rows) == 5
    assert f"kernel: {WSL2} -> {NATIVE}" in step_rows[0]
    assert "CONFOUNDED: server server_info.vllm_config.speculative_config" in step_rows[1]
    assert "CONFOUNDED: CUDA (driver): 13.1 -> 13.2; GPU driver: 590.44 -> 595.12" in step_rows[2]
    assert f"container image: {STOCK} -> {K64}" in step_rows[3]
    assert "and 3 more" in step_rows[4]  # first to last: all six differences
    # One table of changes: a row per metric and step, and first to last.
    throughput = [ln for ln in lines if THROUGHPUT in ln]
    assert [ln.split()[2] for ln in throughput] == ["1", "2", "3", "4", "1-5"]
    assert "+116.4%" in throughput[0]
    assert "+414.5%" in throughput[4]
    confounded = words().confounded.replace("{count}", "2")
    assert f"warning: step 3: {confounded}" in lines
    page = run([*argv, "-f", "html"], capsys)
    assert page.code == 0
    assert "Steps</h2>" in page.out
    assert "<svg" in page.out
    assert "CONFOUNDED: CUDA (driver): 13.1 -&gt; 13.2" in page.out
    md = run([*argv, "-f", "markdown"], capsys)
    assert md.code == 0
    assert md.out.startswith("## ladder ")
    assert "| step | from | to | overall | what changed |" in md.out
    assert "| shape | metric | step | before | after | change | CI | verdict |" in md.out


def test_a_step_that_regressed_fails_the_gate_even_when_the_ladder_gained(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rates = (55.0, 119.0, 60.0, 283.0)  # step 2 loses half
    runs = [bench_run(_shape(ARTICLE[0] / r), schema_version=4) for r in rates]
    paths = []
    for i, r in enumerate(runs):
        path = tmp_path / f"r{i}.json"
        path.write_text(encode(r))
        paths.append(str(path))
    res = run(
        [
            "bench",
            "--compare",
            *paths,
            "--fail-on-regression",
            "10",
            "-f",
            "json",
            "--resamples",
            str(RESAMPLES),
        ],
        capsys,
    )
    assert res.code == 1
    doc = json.loads(res.out)
    assert doc["exit_code"] == 1
    assert any(r.startswith(f"step 2 ({paths[1]} -> {paths[2]}): ") for r in doc["regressions"])
    assert not any(r.startswith("first to last") for r in doc["regressions"])
    cumulative = _row_json(doc["cumulative"])
    assert cumulative["verdict"] == "better"
    # Without the gate, the same ladder exits 0.
    assert run(["bench", "--compare", *paths, "--resamples", str(RESAMPLES)], capsys).code == 0


def _row_json(compare: dict, metric: str = THROUGHPUT) -> dict:  # type: ignore[type-arg]
    return next(r for r in compare["comparisons"] if r["metric"] == metric)


def test_bad_ladders_are_one_line_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    a = tmp_path / "a.json"
    a.write_text(encode(bench_run(_shape(1.0))))
    other = tmp_path / "other.json"
    other.write_text(encode(bench_run(_shape(1.0, name="elsewhere"))))
    res = run(["bench", "--compare", str(a), str(a), str(other)], capsys)
    assert res.code == 2
    assert res.err.startswith("blackwell-doctor: error: step 2: ")
    assert len(res.err.strip().splitlines()) == 1
    res = run(["bench", "--compare", "-", str(a), "-"], capsys)
    assert res.code == 2
    assert "standard input (-) once" in res.err
    res = run(["bench", "--url", "http://127.0.0.1:9", str(a)], capsys)
    assert res.code == 2
    assert "--compare" in res.err


PAIRS = [
    ("article-wsl2-55tps", "article-native-119tps"),
    ("sm120-moe-bench-stock-mtp0", "sm120-moe-bench-stock-mtp3"),
    ("tiny-moe-vllm-cpu", "tiny-moe-vllm-cpu-timeouts"),
    ("run-v1", "tiny-moe-vllm-cpu"),
]


@pytest.mark.parametrize("fmt", ["rich", "markdown", "json", "html"])
@pytest.mark.parametrize(("before", "after"), PAIRS)
def test_two_files_are_exactly_the_compare_before_the_ladder(
    before: str,
    after: str,
    fmt: str,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
    update_goldens: bool,
) -> None:
    """The golden files are the output of main just before issue 21's ladder and
    environments (`bench --compare BEFORE AFTER -f FMT --fail-on-regression 10`, then its
    exit code; regenerated at the merge, since h21a's drift rows came first) for these
    fixture pairs: runs that pinned no environment compare byte for
    byte as they did, in every format."""
    monkeypatch.chdir(Path(__file__).parents[1])
    res = run(
        [
            "bench",
            "--compare",
            f"tests/fixtures/bench/{before}.json",
            f"tests/fixtures/bench/{after}.json",
            "-f",
            fmt,
            "--fail-on-regression",
            "10",
        ],
        capsys,
    )
    golden = GOLDEN / f"{before}-{after}.{fmt}"
    if update_goldens:  # one command regenerates every golden (tests/test_golden_commands.py)
        golden.write_text(as_documented(res.out) + f"rc={res.code}\n", encoding="utf-8")
        return
    assert as_documented(res.out) + f"rc={res.code}\n" == golden.read_text()


def test_a_compare_of_pinned_runs_lists_what_else_differs(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    runs = _runs()
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(encode(runs[2]))
    b.write_text(encode(runs[3]))
    res = run(["bench", "--compare", str(a), str(b)], capsys)
    assert res.code == 0
    assert "environment: confounded" in res.out
    assert "  GPU driver: 590.44 -> 595.12" in res.out
    assert math.isfinite(1.0)
    res = run(["bench", "--compare", str(a), str(b), "-f", "json"], capsys)
    doc = json.loads(res.out)
    assert doc["environment"]["verdict"] == "confounded"
    page = run(["bench", "--compare", str(a), str(b), "-f", "html"], capsys).out
    assert "Environment: confounded</h2>" in page
    assert "595.12" in page
    jsonschema.Draft202012Validator(json.loads(schema_text("bench-compare.schema.json"))).validate(
        doc
    )
