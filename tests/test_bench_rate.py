"""``bench --rate`` (issue 35, items 1 and 2): the arrival processes, the open-loop sender,
the SLOs and goodput, the knee and the capacity at SLO, and the command against in-process
servers (a real aiohttp server on 127.0.0.1, tests/hostile_http.py): its document, its
bad input (one line, exit 2, nothing sent) and Ctrl-C in a sweep (a real SIGINT)."""

from __future__ import annotations

import asyncio
import json
import math
import statistics
import time
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.report.bench import RequestSample, ShapeResult, SweepPoint
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.rules import goodput as goodputs
from blackwell_doctor.rules import sweep as sweeps
from tests.child import cli_child
from tests.conftest import skip_without

try:
    import jsonschema
    from aiohttp import web

    from blackwell_doctor.collect.bench import schedule
    from tests import hostile_http as h
except ModuleNotFoundError as exc:
    skip_without(exc)


# --------------------------------------------------------------------------- arrivals


def _intervals(offsets: list[float]) -> list[float]:
    return [b - a for a, b in zip([0.0, *offsets], offsets, strict=False)]


def test_constant_arrivals_are_one_interval_apart_from_the_first() -> None:
    assert schedule.arrivals("constant", 4.0, 5) == [0.25, 0.5, 0.75, 1.0, 1.25]


@pytest.mark.parametrize(
    ("kind", "burstiness", "cv"), [("poisson", 1.0, 1.0), ("gamma", 0.25, 2.0), ("gamma", 4.0, 0.5)]
)
def test_random_arrivals_have_vllms_mean_and_spread(
    kind: str, burstiness: float, cv: float
) -> None:
    # vLLM's gamma(shape=burstiness, scale=1/(rate*burstiness)): mean 1/rate, coefficient of
    # variation 1/sqrt(burstiness); the last offset is count/rate exactly (normalize_factor).
    stats = pytest.importorskip("scipy.stats")  # a dev dependency: the oracle

    rate, n = 8.0, 4000
    offsets = schedule.arrivals(kind, rate, n, burstiness=burstiness, seed=3)
    gaps = _intervals(offsets)
    assert offsets == sorted(offsets)
    assert offsets[-1] == pytest.approx(n / rate, rel=1e-12)
    assert statistics.fmean(gaps) == pytest.approx(1 / rate, rel=1e-9)
    assert statistics.stdev(gaps) / statistics.fmean(gaps) == pytest.approx(cv, rel=0.1)
    # The shape of the distribution, not only its moments (scale-free: gaps over their mean).
    mean = statistics.fmean(gaps)
    ks = stats.kstest([g / mean for g in gaps], stats.gamma(burstiness, scale=1 / burstiness).cdf)
    assert ks.pvalue > 0.01, ks


def test_arrivals_are_the_seeds_and_every_rate_the_same_pattern_scaled() -> None:
    a = schedule.arrivals("poisson", 2.0, 50, seed=7)
    assert a == schedule.arrivals("poisson", 2.0, 50, seed=7)
    assert a != schedule.arrivals("poisson", 2.0, 50, seed=8)
    b = schedule.arrivals("poisson", 4.0, 50, seed=7)
    assert b == pytest.approx([t / 2 for t in a])


@pytest.mark.parametrize(
    ("kind", "rate", "burstiness"),
    [
        ("uniform", 1.0, 1.0),
        ("poisson", -1.0, 1.0),
        ("poisson", math.inf, 1.0),
        ("gamma", 1.0, 0.0),
    ],
)
def test_bad_arrivals_are_refused(kind: str, rate: float, burstiness: float) -> None:
    with pytest.raises(ValueError, match=r"unknown arrival|positive finite"):
        schedule.arrivals(kind, rate, 3, burstiness=burstiness)


# --------------------------------------------------------------------------- the sender


def test_the_sender_never_waits_for_a_request_to_start_the_next() -> None:
    # Request 0 ends only when request 9 has started: a closed loop would wait for ever.
    started: list[tuple[int, float]] = []
    last = asyncio.Event()

    async def send(i: int) -> None:
        started.append((i, time.perf_counter()))
        if i == 9:
            last.set()
        await last.wait()

    async def go() -> schedule.Sent:
        start = time.perf_counter()
        offsets = [0.002 * (i + 1) for i in range(10)]
        sent = await asyncio.wait_for(
            schedule.send_on_schedule(offsets, send, start=start), timeout=30
        )
        for (i, at), offset in zip(started, offsets, strict=True):
            assert at >= start + offset, i  # never before its time
        return sent

    sent = asyncio.run(go())
    assert [i for i, _ in started] == list(range(10))
    assert sent.peak_in_flight == 10
    assert len(sent.lateness_s) == 10
    assert all(v >= 0 for v in sent.lateness_s)
    assert not sent.stopped


def test_the_sender_stops_where_told_and_lets_the_started_requests_finish() -> None:
    finished: list[int] = []

    async def send(i: int) -> None:
        await asyncio.sleep(0)
        finished.append(i)

    calls = iter([False, False, True])
    sent = asyncio.run(schedule.send_on_schedule([0.0] * 6, send, stop=lambda: next(calls)))
    assert sorted(finished) == [0, 1]
    assert sent.stopped


def test_a_request_that_raises_ends_the_load_and_nothing_is_left_running() -> None:
    left: list[asyncio.Task[Any]] = []

    async def send(i: int) -> None:
        if i == 1:
            raise MemoryError("test")
        await asyncio.sleep(30)

    async def go() -> None:
        try:
            await schedule.send_on_schedule([0.0, 0.001, 0.002, 0.5], send)
        finally:
            left.extend(t for t in asyncio.all_tasks() if t is not asyncio.current_task())

    with pytest.raises(MemoryError):
        asyncio.run(go())
    assert left == []


# --------------------------------------------------------------------------- SLOs, goodput


def test_slo_parsing() -> None:
    assert goodputs.parse_slo("ttft_ms:500,tpot_ms:50") == {"ttft_ms": 500.0, "tpot_ms": 50.0}
    assert goodputs.parse_slo(" e2e_ms : 2.5 ") == {"e2e_ms": 2.5}
    for bad, why in [
        ("itl_ms:5", "unknown metric 'itl_ms'"),
        ("ttft:500", "unknown metric 'ttft'"),
        ("ttft_ms:500,ttft_ms:400", "given twice"),
        ("ttft_ms:-1", "above 0"),
        ("ttft_ms:nan", "above 0"),
        ("ttft_ms:fast", "not a number"),
        ("ttft_ms", "METRIC:MILLISECONDS"),
    ]:
        with pytest.raises(goodputs.SloError, match=why):
            goodputs.parse_slo(bad)


def _sample(ttft: float, e2e: float, tokens: int = 5, *, ok: bool = True) -> RequestSample:
    if not ok:
        return RequestSample(ok=False, error="http_5xx")
    return RequestSample(ok=True, ttft_ms=ttft, e2e_ms=e2e, output_tokens=tokens, itl_ms=[1.0])


def test_a_request_meets_the_slos_as_vllm_judges_goodput() -> None:
    slo = {"ttft_ms": 100.0, "tpot_ms": 10.0}
    assert goodputs.meets(_sample(100, 140), slo)  # TPOT (140-100)/4 = 10: at the limit
    assert not goodputs.meets(_sample(100, 141), slo)
    assert not goodputs.meets(_sample(101, 120), slo)
    assert goodputs.meets(_sample(50, 50_000, tokens=1), slo)  # one token: TPOT 0 (vLLM)
    assert not goodputs.meets(_sample(1, 2, ok=False), slo)


def _point(name: str, samples: list[RequestSample], duration_s: float = 2.0) -> ShapeResult:
    metrics = shape_metrics(
        samples,
        duration_s=duration_s,
        reasoning_estimates=[None] * len(samples),
        server_generation_tokens=None,
    )
    return ShapeResult(
        name=name,
        description="",
        concurrency=1,
        input_tokens=8,
        input_tokens_requested=8,
        input_size_source="tokenize",
        output_tokens_max=5,
        requests=len(samples),
        completed=sum(s.ok for s in samples),
        errors={"http_5xx": sum(not s.ok for s in samples)}
        if not all(s.ok for s in samples)
        else {},
        duration_s=duration_s,
        complete=True,
        metrics=metrics,
        server=None,
        equivalence=[],
        samples=samples,
        notes=[],
    )


def test_goodput_counts_failures_as_missing_the_slo() -> None:
    shape = _point(
        "p", [_sample(10, 20)] * 6 + [_sample(900, 950)] * 2 + [_sample(0, 0, ok=False)] * 2
    )
    rate, share = goodputs.goodput(shape, {"ttft_ms": 100.0})
    assert share == 0.6  # 6 of 10 sent; the 2 failures count (aiperf's good_request_fraction)
    assert rate == 3.0  # 6 good / 2 s (vLLM's request_goodput)
    assert goodputs.goodput(shape, {}) == (None, None)


def _sweep_of(
    shares: dict[float, float], n: int = 20
) -> tuple[list[SweepPoint], dict[str, ShapeResult]]:
    """Rate points whose requests meet an e2e_ms:100 SLO in the share given per rate."""
    points, shapes = [], {}
    for rate, share in shares.items():
        good = round(share * n)
        samples = [_sample(10, 50)] * good + [_sample(10, 500)] * (n - good)
        name = sweeps.Load("rate", rate).name("s")
        shapes[name] = _point(name, samples)
        points.append(
            SweepPoint(
                shape=name,
                load="rate",
                offered_rate=rate,
                achieved_rate=rate,
                requests=n,
                completed=n,
                errors={},
                complete=True,
                goodput=None,
                goodput_share=share,
                meets_slo=None,
                peak_in_flight=None,
                send_lateness_ms=None,
                metrics=shapes[name].metrics,
            )
        )
    return points, shapes


def test_capacity_is_where_the_share_first_falls_below_the_level() -> None:
    points, shapes = _sweep_of({1.0: 1.0, 2.0: 0.95, 3.0: 0.75, 4.0: 0.95})
    cap, draws = goodputs.capacity(points, [shapes], {"e2e_ms": 100.0}, 0.9, resamples=400)
    assert cap.bound == "crossing"
    # Between 2 req/s (95%) and 3 req/s (75%): 2 + (0.95 - 0.9) / (0.95 - 0.75) = 2.25. The
    # later 4 req/s at 95% does not count: the share did not *stay* above the level.
    assert cap.rate == pytest.approx(2.25)
    assert cap.rate is not None
    assert cap.ci_low is not None
    assert cap.ci_high is not None
    assert cap.ci_low <= cap.rate <= cap.ci_high
    assert cap.ci_low >= 1.0
    assert cap.ci_high <= 4.0
    assert len(draws) == 400
    assert cap.per_run == [pytest.approx(2.25)]


def test_capacity_bounds() -> None:
    slo = {"e2e_ms": 100.0}
    points, shapes = _sweep_of({1.0: 1.0, 2.0: 0.95})
    cap, draws = goodputs.capacity(points, [shapes], slo, 0.9)
    assert (cap.bound, cap.rate, draws) == ("at least", 2.0, [])
    points, shapes = _sweep_of({1.0: 0.5, 2.0: 0.95})
    cap, _ = goodputs.capacity(points, [shapes], slo, 0.9)
    assert (cap.bound, cap.rate) == ("below", 1.0)
    assert "below" in cap.reason


def test_capacity_across_runs_resamples_the_runs_too() -> None:
    # Two runs that disagree: their capacities are 2.25 and 2.75; the interval across runs
    # holds both, wider than either run's own.
    slo = {"e2e_ms": 100.0}
    points, run1 = _sweep_of({1.0: 1.0, 2.0: 0.95, 3.0: 0.75}, n=40)
    _, run2 = _sweep_of({1.0: 1.0, 2.0: 1.0, 3.0: 0.8}, n=40)
    cap, _ = goodputs.capacity(points, [run1, run2], slo, 0.9, resamples=600)
    assert cap.runs == 2
    assert cap.per_run == [pytest.approx(2.25), pytest.approx(2.5)]
    assert cap.ci_low is not None
    assert cap.ci_high is not None
    assert cap.ci_low <= 2.25
    assert cap.ci_high >= 2.5


# --------------------------------------------------------------------------- the knee


def test_the_knee_is_where_e2e_p50_leaves_its_floor_by_half() -> None:
    # Floor 100 ms one at a time at 1 req/s; threshold 150 ms.
    k = sweeps.knee(
        (1.0, 100.0), [(2.0, 110.0), (4.0, 130.0), (6.0, 230.0), (8.0, 900.0)], rise_pct=50
    )
    assert k.verdict == "found"
    assert (k.within, k.beyond) == (4.0, 6.0)
    assert k.rate == pytest.approx(4.0 + (150 - 130) / (230 - 130) * 2.0)
    assert k.threshold_ms == 150.0
    assert sweeps.knee((1.0, 100.0), [(2.0, 120.0)], rise_pct=50).verdict == "not reached"
    assert sweeps.knee(None, [(2.0, 120.0)], rise_pct=50).verdict == "not measured"
    # Already beyond at the first rate: the bracket starts at the one-user rate.
    first = sweeps.knee((1.0, 100.0), [(3.0, 300.0)], rise_pct=50)
    assert (first.within, first.beyond) == (1.0, 3.0)
    assert first.rate == pytest.approx(1.0 + 50 / 200 * 2.0)


def test_the_grid_spans_one_user_to_all_at_once_and_refinements_halve_the_brackets() -> None:
    assert sweeps.grid(2.0, 14.0, 6) == [4.0, 6.0, 8.0, 10.0, 12.0, 14.0]
    assert sweeps.grid(10.0, 10.0, 2) == [12.5, 15.0]  # no batching: up to 1.5x
    assert sweeps.rounded(3.14159) == 3.14
    measured = [(4.0, 105.0, 1.0), (6.0, 120.0, 0.95), (8.0, 400.0, 0.5)]
    assert sweeps.refinements(measured, (2.0, 100.0), rise_pct=50, level=0.9, count=2) == [7.0]
    measured = [(4.0, 105.0, 1.0), (6.0, 160.0, 0.95), (8.0, 400.0, 0.5)]
    assert sweeps.refinements(measured, (2.0, 100.0), rise_pct=50, level=0.9, count=2) == [5.0, 7.0]
    assert sweeps.refinements(measured, (2.0, 100.0), rise_pct=50, level=0.9, count=1) == [5.0]


# --------------------------------------------------------------------------- the command

SHAPES = """
[shape.one]
input_tokens = 8
output_tokens = 7
requests = 8
warmup = 1
[shape.wide]
input_tokens = 100
output_tokens = 7
"""


def _validate(doc: dict[str, Any]) -> None:
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)


def _counting(handler: h.Handler, log: list[str]) -> h.Handler:
    async def counted(request: web.Request) -> web.StreamResponse:
        log.append(request.path)
        return await handler(request)

    return counted


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text(SHAPES)
    return path


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--rate", "-1"], "above 0"),
        (["--rate", "0"], "above 0"),
        (["--rate", "2,fast"], "'fast' is not a number"),
        (["--rate", "2,2.0"], "given twice"),
        (["--rate", "sweep", "--arrival", "uniform"], "--arrival 'uniform': one of"),
        (["--rate", "2", "--arrival", "gamma"], "needs --burstiness"),
        (["--rate", "2", "--burstiness", "2"], "--burstiness is the shape of --arrival gamma"),
        (["--rate", "2", "--slo", "itl_ms:5"], "unknown metric 'itl_ms'"),
        (["--rate", "2", "--slo", "ttft_ms:-5"], "above 0"),
        (["--rate", "2", "--slo-level", "90"], "give --slo"),
        (["--rate", "2", "--slo", "ttft_ms:5", "--slo-level", "0"], "above 0"),
        (["--rate", "2", "--sweep-points", "3"], "applies to --rate sweep"),
        (["--slo", "ttft_ms:5"], "give --rate"),
        (["--arrival", "poisson"], "applies to --rate"),
        (["--rate", "2", "--shape", "one", "--shape", "short"], "at most one --shape"),
        (["--rate", "2", "--soak", "10s"], "does not take --rate"),
        (["--rate", "2", "--shape", "wide", "--requests", "600000"], "may be in flight"),
    ],
)
def test_bad_rate_input_is_one_line_exit_2_and_nothing_is_sent(
    extra: list[str], message: str, shapes: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    log: list[str] = []
    routes = {
        ("POST", "/v1/chat/completions"): _counting(h.good_stream(), log),
        ("GET", "/v1/models"): _counting(h.models_of("fake"), log),
    }
    with h.serving(routes) as url:
        argv = ["bench", "--url", url, "--shapes", str(shapes), *extra]
        if "--shape" not in extra:
            argv += ["--shape", "one"]
        code = main(argv)
    err = capsys.readouterr().err
    assert code == 2, err
    assert message in err
    assert err.count("\n") == 1
    assert log == []


def _run(url: str, shapes: Path, *extra: str) -> tuple[int, dict[str, Any], str]:
    import contextlib
    import io

    out, err = io.StringIO(), io.StringIO()
    with contextlib.redirect_stdout(out), contextlib.redirect_stderr(err):
        code = main(
            ["bench", "--url", url, "--shapes", str(shapes), "--shape", "one", "-f", "json", *extra]
        )
    return code, json.loads(out.getvalue()), err.getvalue()


def test_a_sweep_finds_its_range_and_keeps_every_point_with_its_requests(shapes: Path) -> None:
    log: list[str] = []
    routes = {("POST", "/v1/chat/completions"): _counting(h.queued_stream(2, 0.02), log)}
    with h.serving(routes) as url:
        code, doc, err = _run(
            url, shapes, "--rate", "sweep", "--slo", "e2e_ms:60", "--sweep-points", "4"
        )
    assert code == 0, err
    _validate(doc)
    assert doc["schema_version"] == 6
    sweep = doc["sweep"]
    points = sweep["points"]
    loads = [p["load"] for p in points]
    assert loads[:2] == ["synchronous", "throughput"]
    assert set(loads[2:]) == {"rate"}
    # Every point is a shape of the document, with its requests.
    assert [p["shape"] for p in points] == [s["name"] for s in doc["shapes"]]
    assert [s["requests"] for s in doc["shapes"]] == [8] * len(points)
    # Client and server saw the same requests: 1 warm-up, 3 greedy, 8 a point.
    assert len(log) == 1 + 3 + 8 * len(points)
    sync, most = points[0], points[1]
    grid = sweeps.grid(sync["achieved_rate"], most["achieved_rate"], 4)
    rates = [p["offered_rate"] for p in points[2:]]
    # Upward along the grid, then at most two refinements inside it.
    upward = [r for r in rates if r in grid]
    assert upward == grid[: len(upward)]
    assert len(rates) - len(upward) <= 2
    for p in points[2:]:
        assert p["send_lateness_ms"]["p50"] >= 0
        assert 1 <= p["peak_in_flight"] <= 8
        assert 0 <= p["goodput_share"] <= 1
        assert p["meets_slo"] == (p["goodput_share"] >= 0.9)
    assert sweep["knee"]["floor_ms"] == sync["metrics"]["e2e_ms"]["p50"]
    assert sweep["knee"]["verdict"] in ("found", "not reached")
    assert sweep["capacity"]["level"] == 0.9
    # Only the first point asked the greedy prompts.
    assert [len(s["equivalence"]) for s in doc["shapes"]] == [3] + [0] * (len(points) - 1)


def test_rates_given_are_measured_in_order_with_their_arrivals(shapes: Path) -> None:
    with h.serving({("POST", "/v1/chat/completions"): h.good_stream()}) as url:
        code, doc, err = _run(
            url, shapes, "--rate", "40,80", "--arrival", "gamma", "--burstiness", "0.5"
        )
    assert code == 0, err
    sweep = doc["sweep"]
    assert (sweep["mode"], sweep["arrival"], sweep["burstiness"]) == ("rates", "gamma", 0.5)
    assert [p["shape"] for p in sweep["points"]] == ["one@40/s", "one@80/s"]
    assert sweep["knee"]["verdict"] == "not measured"
    assert sweep["capacity"] is None  # no --slo
    # The requests left on their schedule: the start of the last one is about count/rate.
    for p, shape in zip(sweep["points"], doc["shapes"], strict=True):
        starts = [s["start_ms"] for s in shape["samples"]]
        assert max(starts) >= 1000 * 8 / p["offered_rate"] - 1.0


def test_repeated_rate_runs_and_two_servers_measure_the_loads_of_the_first(
    shapes: Path, tmp_path: Path
) -> None:
    with h.serving({("POST", "/v1/chat/completions"): h.queued_stream(2, 0.01)}) as a:
        code, doc, err = _run(
            a,
            shapes,
            "--rate",
            "sweep",
            "--sweep-points",
            "2",
            "--slo",
            "e2e_ms:40",
            "--repeat",
            "2",
        )
        assert code == 0, err
        _validate(doc)
        names = [s["name"] for s in doc["shapes"]]
        assert [s["name"] for s in doc["repeats"][0]["shapes"]] == names
        assert doc["sweep"]["capacity"]["runs"] == 2
        floors = {(f["shape"], f["metric"]) for f in doc["calibration"]["floors"]}
        assert ("one", "capacity_at_slo") in floors
        with h.serving({("POST", "/v1/chat/completions"): h.queued_stream(1, 0.01)}) as b:
            out = tmp_path / "ab.json"
            argv = [
                "bench",
                "--compare-urls",
                a,
                b,
                "--shapes",
                str(shapes),
                "--shape",
                "one",
                "--rate",
                "sweep",
                "--sweep-points",
                "2",
                "--slo",
                "e2e_ms:40",
                "-o",
                str(out),
            ]
            assert main(argv) in (0, 1)
    cmp = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(schema_text("bench-compare.schema.json"))).validate(
        cmp
    )
    before = json.loads((tmp_path / "ab.before.json").read_text())
    after = json.loads((tmp_path / "ab.after.json").read_text())
    assert [p["shape"] for p in after["sweep"]["points"]] == [
        p["shape"] for p in before["sweep"]["points"]
    ]
    assert cmp["sweep"]["matched"] == [p["shape"] for p in before["sweep"]["points"]]
    assert any(c["metric"] == "capacity_at_slo" for c in cmp["comparisons"])


def test_ctrl_c_in_a_sweep_keeps_the_points_measured(tmp_path: Path) -> None:
    shapes = tmp_path / "s.toml"
    shapes.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nrequests = 12\n")
    out = tmp_path / "partial.json"
    # Two requests at a time, 50 ms each: each point takes a good part of a second.
    with h.serving({("POST", "/v1/chat/completions"): h.queued_stream(2, 0.05)}) as url:
        argv = ["--url", url, "--shapes", str(shapes), "--shape", "one", "--rate", "sweep"]
        with cli_child("bench", *argv, "--slo", "e2e_ms:200", "-o", str(out)) as bench:
            # The throughput point measured: two points are in, a rate is being sent.
            bench.wait_for_line(lambda line: line.startswith("one@max: done"), deadline_s=120)
            bench.interrupt()
            code, _, err = bench.finish(timeout_s=60)
    assert code == 130, err
    doc = json.loads(out.read_text())
    _validate(doc)
    assert doc["interrupted"] is True
    points = doc["sweep"]["points"]
    assert [p["load"] for p in points[:2]] == ["synchronous", "throughput"]
    assert points[0]["complete"]
    assert points[1]["complete"]
    assert points[0]["requests"] == points[1]["requests"] == 12
    assert doc["exit_code"] == 130


# --------------------------------------------------------------------------- compare, gate


def _rate_run(shares: dict[float, float], *, n: int = 40) -> Any:
    """A rate run document whose points meet an e2e_ms:100 SLO in the shares given."""
    from tests.benchdocs import bench_run

    _, shapes = _sweep_of(shares, n=n)
    loads = [(sweeps.Load("rate", r), sweeps.Load("rate", r).name("s")) for r in shares]
    sweep = sweeps.summarise(
        shape="s",
        mode="rates",
        arrival="poisson",
        burstiness=None,
        slo={"e2e_ms": 100.0},
        level=0.9,
        loads=loads,
        runs=[shapes],
        extras={},
        rise_pct=50.0,
        seed=0,
        resamples=300,
    )
    return bench_run(*shapes.values(), schema_version=5, sweep=sweep)


def test_two_rate_runs_compare_their_capacity_with_an_interval_and_the_gate_holds_it() -> None:
    from blackwell_doctor.rules import gate as gates
    from blackwell_doctor.rules.compare import CAPACITY, compare

    before = _rate_run({1.0: 1.0, 2.0: 1.0, 3.0: 0.95, 4.0: 0.5})
    same = _rate_run({1.0: 1.0, 2.0: 1.0, 3.0: 0.95, 4.0: 0.5})
    worse = _rate_run({1.0: 1.0, 2.0: 0.5, 3.0: 0.2, 4.0: 0.0})
    metric = [gates.GateMetric("s", CAPACITY)]
    for after, verdict, holds in ((same, "no significant change", True), (worse, "worse", False)):
        doc = compare(before, after, before_name="b", after_name="a", resamples=300)
        (row,) = [c for c in doc.comparisons if c.metric == CAPACITY]
        assert (row.shape, row.better, row.verdict) == ("s", "higher", verdict), row
        assert row.before == pytest.approx(3.0 + 0.05 / 0.45)
        assert row.ci_low_pct is not None
        assert row.ci_high_pct is not None
        assert row.ci_low_pct <= (row.change_pct or 0.0) <= row.ci_high_pct
        assert not isinstance(doc.sweep, msgspec.UnsetType)
        assert doc.sweep.matched == ["s@1/s", "s@2/s", "s@3/s", "s@4/s"]
        # The points of a sweep asked no greedy prompts: no equivalence row for them.
        assert doc.equivalence == []
        gate = gates.judge(doc, after, metrics=metric, max_regression_pct=10.0)
        assert gate.holds is holds, gate


def test_a_capacity_bound_still_tells_a_drop_from_none() -> None:
    from blackwell_doctor.rules import gate as gates
    from blackwell_doctor.rules.compare import CAPACITY, compare

    metric = [gates.GateMetric("s", CAPACITY)]
    crossing = _rate_run({1.0: 1.0, 2.0: 0.5})
    every = _rate_run({1.0: 1.0, 2.0: 1.0})
    none = _rate_run({1.0: 0.2, 2.0: 0.0})
    for before, after, holds, why in (
        (crossing, every, True, "no drop"),
        (every, crossing, False, "capacity dropped"),
        (crossing, none, False, "capacity dropped"),
        (none, none, True, "no drop measurable"),
        # The baseline missed the SLOs at its lowest rate; the new container met them there.
        (none, crossing, True, "no drop"),
        (none, every, True, "no drop"),
    ):
        doc = compare(before, after, before_name="b", after_name="a", resamples=200)
        (row,) = [c for c in doc.comparisons if c.metric == CAPACITY]
        assert row.verdict == "not comparable"
        gate = gates.judge(doc, after, metrics=metric, max_regression_pct=10.0)
        assert gate.holds is holds
        assert why in gate.rows[0].reason


def test_a_compare_can_judge_both_runs_against_other_slos() -> None:
    from blackwell_doctor.rules.compare import CAPACITY, compare

    run = _rate_run({1.0: 1.0, 2.0: 0.95, 3.0: 0.5})
    doc = compare(run, run, before_name="b", after_name="a", resamples=200, slo={"e2e_ms": 1000.0})
    assert not isinstance(doc.sweep, msgspec.UnsetType)
    assert doc.sweep.before.capacity is not None
    assert doc.sweep.before.capacity.bound == "at least"  # every request is within 1 s
    assert any("judged against the same SLOs" in n for n in doc.sweep.notes)
    (row,) = [c for c in doc.comparisons if c.metric == CAPACITY]
    assert row.verdict == "not comparable"


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["apply", "--rate", "2"], "--rate applies to --verify"),
        (["apply", "--verify", "--yes", "--rate", "2"], "give --slo"),
        (["apply", "--verify", "--yes", "--rate", "-2", "--slo", "ttft_ms:5"], "above 0"),
        (["apply", "--verify", "--yes", "--rate", "2", "--slo", "foo:3"], "unknown metric"),
        (["apply", "--verify", "--yes", "--slo", "ttft_ms:4"], "give --rate"),
    ],
)
def test_apply_verify_rate_input_is_checked_first(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


@pytest.mark.parametrize(
    ("given", "gated"),
    [
        ((), ["short:capacity_at_slo"]),
        # A point's own metric is added to the capacity, not put in its place.
        (("short@2/s:ttft_ms.p50",), ["short:capacity_at_slo", "short@2/s:ttft_ms.p50"]),
        # Without a shape, the capacity is the rate shape's (the compare's row is named after
        # it), not the most concurrent point's, which has no capacity row.
        (("capacity_at_slo",), ["short:capacity_at_slo"]),
        (
            ("short@4/s:e2e_ms.p50", "short:capacity_at_slo"),
            ["short@4/s:e2e_ms.p50", "short:capacity_at_slo"],
        ),
    ],
)
def test_apply_verify_rate_always_gates_the_capacity(
    given: tuple[str, ...], gated: list[str]
) -> None:
    from blackwell_doctor.app.rate_options import RateOptions
    from blackwell_doctor.app.verify import VerifyRequest, verify_settings

    request = VerifyRequest(
        verify=True, rate_options=RateOptions(rate="2,4", slo="ttft_ms:500"), gate_metrics=given
    )
    settings = verify_settings(request, yes=True, rollback=False, first_token_timeout_s=60.0)
    assert [m.label for m in settings.metrics] == gated


def test_a_load_sent_late_is_said_to_be_off_its_rate() -> None:
    _, shapes = _sweep_of({2.0: 1.0, 4.0: 1.0})
    loads = [(sweeps.Load("rate", r), sweeps.Load("rate", r).name("s")) for r in (2.0, 4.0)]

    def summary(late_s: float) -> list[str]:
        extras = {name: (3, [0.0] * 19 + [late_s]) for _, name in loads}
        return sweeps.summarise(
            shape="s",
            mode="rates",
            arrival="poisson",
            burstiness=None,
            slo={},
            level=0.9,
            loads=loads,
            runs=[shapes],
            extras=extras,
            rise_pct=50.0,
            seed=0,
        ).notes

    # At 4 req/s the mean interval is 250 ms: 10% of it is 25 ms (checks/bench_sweep.toml).
    assert summary(0.020) == []
    (note,) = summary(0.2)
    assert "at 2 of 2 rates" in note
    assert "worst" in note
