"""The documents the HTML report tests render (tests/test_html_report.py, and in a real
browser tests/test_html_browser.py): a captured bench run, a soak, a compare of two runs with
per-request samples, a fleet, and the same with hostile strings where a server, a run file
or another host's facts put text. Each comes with the plots it must draw and the series each
of them must have."""

from __future__ import annotations

import math
from dataclasses import dataclass
from functools import cache

import msgspec

from blackwell_doctor.render.bench import render_bench
from blackwell_doctor.render.fleet import render_fleet
from blackwell_doctor.render.formats import BenchFormat, FleetFormat
from blackwell_doctor.report.bench import (
    BenchRun,
    CompareDocument,
    RequestSample,
    SweepResult,
    decode_run,
)
from blackwell_doctor.report.fleet import FleetReport
from blackwell_doctor.report.sanitize import sanitize_line
from tests.conftest import FIXTURES, skip_without

CAPTURED = FIXTURES / "bench" / "tiny-moe-vllm-cpu.json"
# bench --compare-urls MAIN SLOW --rate sweep --slo ... against the real vLLM CPU servers
# (tests/fixtures/bench/README.md): the default server's sweep and the one-sequence one's at
# the same loads.
SWEEP = FIXTURES / "bench" / "tiny-moe-vllm-cpu-sweep.json"
SWEEP_SEQS1 = FIXTURES / "bench" / "tiny-moe-vllm-cpu-sweep-seqs1.json"
# bench --trace of a Poisson trace of 150 requests against the real vLLM CPU server: its send
# lateness (tests/fixtures/bench/README.md).
REPLAY = FIXTURES / "bench" / "tiny-moe-vllm-cpu-replay.json"

# What a model id, a shape or file name, or a node name could carry into a page.
IMG = "<img src=x onerror=window.__pwned=1>"
SCRIPT = "</script><script>window.__pwned=1</script>"
COMMENT = "<!--\u2028--><svg onload=window.__pwned=1>"
HOSTILE = (IMG, SCRIPT, COMMENT)


@dataclass(frozen=True)
class Page:
    name: str
    html: str
    # data-plot of each figure, in page order, with its expected number of series
    plots: tuple[tuple[str, int], ...]
    # strings that must show on the page as text (as the sanitising step shows them: a line
    # separator escaped)
    shown: tuple[str, ...] = ()


def captured() -> BenchRun:
    return decode_run(CAPTURED.read_bytes(), source=str(CAPTURED))


def _with_samples(run: BenchRun, samples: list[list[RequestSample]]) -> BenchRun:
    """``run`` with each shape's samples replaced and its metrics computed from them."""
    from blackwell_doctor.report.bench_metrics import shape_metrics

    shapes = [
        msgspec.structs.replace(
            sh,
            samples=ss,
            metrics=shape_metrics(
                ss,
                duration_s=sh.duration_s,
                reasoning_estimates=[None] * len(ss),
                server_generation_tokens=None,
            ),
        )
        for sh, ss in zip(run.shapes, samples, strict=True)
    ]
    return msgspec.structs.replace(run, shapes=shapes)


def _more(run: BenchRun, times: int) -> BenchRun:
    """The captured run with each shape's samples ``times`` over (with a small wobble), so
    that medians have enough samples for an interval."""

    def wobble(s: RequestSample, k: int) -> RequestSample:
        if not s.ok or s.ttft_ms is None or s.e2e_ms is None:
            return s
        f = 1.0 + 0.01 * k
        return msgspec.structs.replace(s, ttft_ms=s.ttft_ms * f, e2e_ms=s.e2e_ms * f)

    return _with_samples(
        run, [[wobble(s, k) for k in range(times) for s in sh.samples] for sh in run.shapes]
    )


def _slower(run: BenchRun) -> BenchRun:
    """The run with TTFT twice and ITL 10% longer on every request (an "after")."""

    def slow(s: RequestSample, i: int) -> RequestSample:
        if not s.ok or s.ttft_ms is None:
            return s
        wobble = 1.0 + 0.02 * math.sin(i)
        itl = [v * 1.1 for v in s.itl_ms]
        ttft = s.ttft_ms * 2.0 * wobble
        e2e = None if s.e2e_ms is None else s.e2e_ms + (ttft - s.ttft_ms) + 0.1 * sum(s.itl_ms)
        return msgspec.structs.replace(s, ttft_ms=ttft, e2e_ms=e2e, itl_ms=itl)

    return _with_samples(run, [[slow(s, i) for i, s in enumerate(sh.samples)] for sh in run.shapes])


@cache
def compared(before_name: str = "before.json", after_name: str = "after.json") -> CompareDocument:
    from blackwell_doctor.rules.compare import compare

    run = _more(captured(), 4)
    return compare(
        run,
        _slower(run),
        before_name=before_name,
        after_name=after_name,
        resamples=200,
        fail_on_regression_pct=10.0,
    )


@cache
def soaked() -> BenchRun:
    """A 24-interval soak: KV cache use growing with noise, GPU memory flat with noise, ITL
    a slow wobble; warm-up intervals first and a partial interval last."""
    try:  # bench's client (aiohttp) and the soak tests' hypothesis: skip where missing
        from blackwell_doctor.app.soak import soak_result
        from tests.test_bench_soak import RULES, planted_soak
    except ModuleNotFoundError as exc:
        skip_without(exc)

    n = 24
    kv = [10.0 + 0.8 * i + 1.5 * math.sin(1.7 * i) for i in range(n)]
    gpu = [60_000.0 + 4.0 * ((i * 7) % 5) for i in range(n)]
    itl = [5.0 + 0.3 * math.sin(i / 3.0) for i in range(n)]
    soak = soak_result(planted_soak(kv, gpu, itl), RULES, interrupted=False)
    return msgspec.structs.replace(captured(), shapes=[], soak=soak)


def fleet_report() -> FleetReport:
    from tests.test_output_injection import fleet

    return fleet()


def _cdf_plots(run: BenchRun) -> list[tuple[str, int]]:
    plots = []
    if not isinstance(run.sweep, msgspec.UnsetType):
        plots += _sweep_plots([run.sweep])
    if not isinstance(run.trace, msgspec.UnsetType) and run.trace.lateness_cdf_ms:
        plots.append(("send-lateness", 2))  # the CDF and the 1 ms bar
    for shape in run.shapes:
        ok = [s for s in shape.samples if s.ok]
        if ok:
            plots.append(("latency-cdf", 4 if any(s.itl_ms for s in ok) else 3))
    if len({s.concurrency for s in run.shapes}) > 1 and isinstance(run.sweep, msgspec.UnsetType):
        plots.append(("throughput", 2))
    return plots


def _soak_plots(run: BenchRun) -> list[tuple[str, int]]:
    assert run.soak is not None
    plots = []
    for t in run.soak.trends:
        if t.verdict == "unavailable":
            continue
        fit = t.slope_per_hour is not None
        band = fit and t.ci_low_per_hour is not None and t.ci_high_per_hour is not None
        plots.append(("soak-trend", 1 + int(fit) + int(band)))
    return [*plots, ("soak-throughput", 1), ("soak-ttft", 2)]


def _compare_plots(doc: CompareDocument) -> list[tuple[str, int]]:
    plots = [("forest", sum(1 for c in doc.comparisons if c.change_pct is not None))]
    if not isinstance(doc.sweep, msgspec.UnsetType):
        plots += _sweep_plots([doc.sweep.before, doc.sweep.after])
    return plots


def _sweep_plots(sweeps: list[SweepResult]) -> list[tuple[str, int]]:
    """A rate run's two figures (render/bench_html.py: sweep_section): latency against the
    achieved rate (E2E p50, E2E p99, TTFT p50 of one run; E2E and TTFT p50 of each of two),
    goodput against the offered rate (achieved and goodput per run, then a line for each
    capacity crossing and each knee)."""
    two = len(sweeps) > 1
    latency = 0
    curves = 0
    marks = 0
    for sw in sweeps:
        loads = [p for p in sw.points if p.achieved_rate]
        stats = (
            ["e2e_ms.p50", "ttft_ms.p50"] if two else ["e2e_ms.p50", "e2e_ms.p99", "ttft_ms.p50"]
        )
        for stat in stats:
            key, q = stat.split(".")
            latency += any((getattr(getattr(p.metrics, key), q) or 0) > 0 for p in loads)
        rates = [p for p in sw.points if p.load == "rate" and p.offered_rate]
        curves += any(p.achieved_rate is not None for p in rates)
        curves += any(p.goodput is not None for p in rates)
        marks += sw.capacity is not None and sw.capacity.bound == "crossing"
        marks += sw.knee.rate is not None
    plots = [("latency-throughput", latency)] if latency else []
    return plots + ([("goodput-rate", curves + marks)] if curves else [])


def replayed() -> BenchRun:
    return decode_run(REPLAY.read_bytes(), source=str(REPLAY))


def swept() -> BenchRun:
    return decode_run(SWEEP.read_bytes(), source=str(SWEEP))


@cache
def swept_compared(
    before_name: str = "main.json", after_name: str = "seqs1.json"
) -> CompareDocument:
    from blackwell_doctor.rules.compare import compare

    after = decode_run(SWEEP_SEQS1.read_bytes(), source=str(SWEEP_SEQS1))
    return compare(swept(), after, before_name=before_name, after_name=after_name, resamples=200)


def _fleet_plots(report: FleetReport) -> list[tuple[str, int]]:
    plots = [("fleet-verdicts", 4)]
    if report.groups:
        plots.append(("fleet-groups", len(report.groups)))
    return plots


def pages() -> list[Page]:
    """The four reports, each clean and with hostile strings."""
    run, soak, doc, fleet = captured(), soaked(), compared(), fleet_report()
    rated, rated_doc, replay = swept(), swept_compared(), replayed()
    out = [
        Page("run", render_bench(run, BenchFormat.HTML), tuple(_cdf_plots(run))),
        Page("replay", render_bench(replay, BenchFormat.HTML), tuple(_cdf_plots(replay))),
        Page("sweep", render_bench(rated, BenchFormat.HTML), tuple(_cdf_plots(rated))),
        Page(
            "sweep-compare",
            render_bench(rated_doc, BenchFormat.HTML),
            tuple(_compare_plots(rated_doc)),
        ),
        Page("soak", render_bench(soak, BenchFormat.HTML), tuple(_soak_plots(soak))),
        Page("compare", render_bench(doc, BenchFormat.HTML), tuple(_compare_plots(doc))),
        Page("fleet", render_fleet(fleet, FleetFormat.HTML), tuple(_fleet_plots(fleet))),
    ]
    for i, evil in enumerate(HOSTILE):
        bad_run = msgspec.structs.replace(
            run,
            server=msgspec.structs.replace(run.server, model=evil, url=evil),
            shapes=[msgspec.structs.replace(s, name=f"{evil}{s.name}") for s in run.shapes],
            findings=[evil],
        )
        assert not isinstance(rated.sweep, msgspec.UnsetType)
        bad_sweep = msgspec.structs.replace(
            rated,
            server=msgspec.structs.replace(rated.server, model=evil),
            sweep=msgspec.structs.replace(rated.sweep, shape=evil, notes=[evil]),
        )
        assert not isinstance(replay.trace, msgspec.UnsetType)
        bad_replay = msgspec.structs.replace(
            replay,
            server=msgspec.structs.replace(replay.server, model=evil),
            trace=msgspec.structs.replace(replay.trace, file=f"traces/{evil}", format=evil),
        )
        bad_doc = compared(evil, evil)
        bad_doc = msgspec.structs.replace(
            bad_doc,
            comparisons=[msgspec.structs.replace(c, shape=evil) for c in bad_doc.comparisons],
        )
        nodes = [msgspec.structs.replace(n, name=f"{evil}{n.name}") for n in fleet.nodes]
        groups = [
            msgspec.structs.replace(g, id=f"{evil}{g.id}", nodes=[evil, *g.nodes])
            for g in fleet.groups
        ]
        bad_fleet = msgspec.structs.replace(fleet, nodes=nodes, groups=groups)
        assert soak.soak is not None
        bad_soak = msgspec.structs.replace(
            soak,
            server=msgspec.structs.replace(soak.server, model=evil),
            soak=msgspec.structs.replace(
                soak.soak,
                shape=evil,
                notes=[evil],
                trends=[msgspec.structs.replace(t, reason=evil) for t in soak.soak.trends],
            ),
        )
        out += [
            Page(
                f"run-hostile-{i}",
                render_bench(bad_run, BenchFormat.HTML),
                tuple(_cdf_plots(bad_run)),
                (sanitize_line(evil),),
            ),
            Page(
                f"replay-hostile-{i}",
                render_bench(bad_replay, BenchFormat.HTML),
                tuple(_cdf_plots(bad_replay)),
                (sanitize_line(evil),),
            ),
            Page(
                f"sweep-hostile-{i}",
                render_bench(bad_sweep, BenchFormat.HTML),
                tuple(_cdf_plots(bad_sweep)),
                (sanitize_line(evil),),
            ),
            Page(
                f"compare-hostile-{i}",
                render_bench(bad_doc, BenchFormat.HTML),
                tuple(_compare_plots(bad_doc)),
                (sanitize_line(evil),),
            ),
            Page(
                f"soak-hostile-{i}",
                render_bench(bad_soak, BenchFormat.HTML),
                tuple(_soak_plots(bad_soak)),
                (sanitize_line(evil),),
            ),
            Page(
                f"fleet-hostile-{i}",
                render_fleet(bad_fleet, FleetFormat.HTML),
                tuple(_fleet_plots(bad_fleet)),
                (sanitize_line(evil),),
            ),
        ]
    return out
