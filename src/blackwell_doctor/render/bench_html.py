"""The ``bench`` documents as one HTML page each (``-f html``): a run (latency CDFs per
shape, throughput against concurrency), a soak (each per-interval series with its fitted
trend) and a compare (the intervals as a forest plot). Every figure has its numbers as a
table under it, and the terminal's report of the same document is folded in at the end.

The document arrives already through the dispatcher's one sanitising step
(:func:`render.bench.render_bench`); here every value is placed with ``esc``.
"""

from __future__ import annotations

import statistics
from collections.abc import Callable, Sequence

import msgspec

from blackwell_doctor.render.common import change_cells, counts_text, rollup_reasons, shape_head
from blackwell_doctor.render.html import (
    Table,
    figure,
    heading,
    page,
    paragraph,
    text_report,
)
from blackwell_doctor.render.svg import (
    BAD,
    GOOD,
    NEUTRAL,
    PALETTE,
    Axis,
    ForestRow,
    Kind,
    Series,
    forest,
    legend,
    xy_plot,
)
from blackwell_doctor.report.bench import (
    BenchRun,
    Capacity,
    CompareDocument,
    Comparison,
    RequestSample,
    ShapeResult,
    SoakInterval,
    SoakResult,
    SweepPoint,
    SweepResult,
    TraceResult,
    Trend,
    group_reasons,
)
from blackwell_doctor.report.bench_ladder import LadderDocument
from blackwell_doctor.report.bench_metrics import tpot_s
from blackwell_doctor.report.stats import mean, percentile

# A CDF is drawn through at most this many of its samples (evenly spaced in rank); the
# table under it gives the exact quantiles of all of them.
CDF_POINTS = 400
# The log axis cannot show 0: latencies below this (ITL of tokens that arrived together)
# are drawn at it, and the caption says how many.
LOG_FLOOR_MS = 0.01
QUANTILES = (0, 10, 25, 50, 75, 90, 95, 99, 100)


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def render_run_html(doc: BenchRun, text: str) -> str:
    """A bench or soak run as a page; ``text`` is its terminal report (sanitised)."""
    server = doc.server
    title = f"bench {server.url} model {server.model or '-'}"
    state = (
        "interrupted: partial result"
        if doc.interrupted
        else "complete"
        if doc.complete
        else "partial"
    )
    subtitle = (
        f"{doc.tool.name} {doc.tool.version} · started {doc.started_at} · seed {doc.seed} · "
        f"{state} · exit {doc.exit_code}"
    )
    body: list[str] = []
    if server.error:
        body.append(paragraph(f"error: {server.error}", "finding"))
    body += [paragraph(f"finding: {f}", "finding") for f in doc.findings]
    if not isinstance(doc.sweep, msgspec.UnsetType):
        body += sweep_section([("", doc.sweep)])
    if not isinstance(doc.trace, msgspec.UnsetType):
        body += _trace_section(doc.trace)
    if doc.shapes:
        body.append(heading(2, "Latency distributions"))
        for n, shape in enumerate(doc.shapes):
            body += _shape_section(shape, n)
        if isinstance(doc.sweep, msgspec.UnsetType):  # a rate run has its own curves above
            body += _throughput_section(doc.shapes)
    if doc.soak is not None:
        body += _soak_section(doc.soak)
    body.append(text_report(text, "The terminal report of this run"))
    return page(title, body, subtitle=subtitle)


# --------------------------------------------------------------------------- a run


# Send lateness is drawn on a log axis from this floor up (a request sent within a
# microsecond of its time is drawn at it); the bar the client is held to is 1 ms.
LATENESS_FLOOR_MS = 0.001
LATE_MS = 1.0


def _trace_section(trace: TraceResult) -> list[str]:
    """A replay's send lateness: its CDF (the document's order statistics) against the 1 ms
    bar, and the figures under it."""
    name = trace.file.rsplit("/", 1)[-1]
    out = [
        heading(2, "Send lateness"),
        paragraph(
            f"{trace.format} trace {name}: {trace.sent:,}/{trace.requests:,} requests sent over "
            f"{trace.span_s:,.1f} s at time scale {trace.time_scale:g} by "
            f"{trace.client_processes} client process(es); peak {trace.peak_in_flight:,} in "
            "flight. A request's lateness: the moment its POST began less its due time."
        ),
    ]
    s = trace.lateness_ms
    over = trace.late_over_1ms / trace.sent if trace.sent else 0.0
    table = Table(
        ["sent", "mean ms", "p50", "p90", "p95", "p99", "max", f"over {LATE_MS:g} ms"],
        [
            [
                f"{trace.sent:,}",
                _f(s.mean, 3),
                _f(s.p50, 3),
                _f(s.p90, 3),
                _f(s.p95, 3),
                _f(s.p99, 3),
                _f(trace.lateness_max_ms, 3),
                f"{trace.late_over_1ms:,} ({over:.2%})",
            ]
        ],
    )
    points = trace.lateness_cdf_ms
    if not points:
        out += [
            paragraph(
                "This document keeps the lateness percentiles only (written before the "
                "distribution was kept): no curve to draw.",
                "note",
            ),
            table.markup(),
        ]
        return out
    n = len(points)
    below = sum(1 for v in points if v < LATENESS_FLOOR_MS)
    cdf = Series(
        "send lateness",
        [(max(points[0], LATENESS_FLOOR_MS), 0.0)]
        + [(max(v, LATENESS_FLOOR_MS), (j + 1) / n) for j, v in enumerate(points)],
        "step",
        PALETTE[0],
    )
    bar = Series(
        f"{LATE_MS:g} ms", [(LATE_MS, 0.0), (LATE_MS, 1.0)], "dashed", BAD, [f"{LATE_MS:g} ms"] * 2
    )
    svg = xy_plot(
        [cdf, bar],
        Axis("milliseconds late (log scale)", log=True),
        Axis("fraction of requests sent at most that late", low=0.0, high=1.0),
        title=f"send lateness of {name}",
    )
    caption = (
        f"Send lateness of the {trace.sent:,} requests replayed: its distribution through "
        f"{n} order statistics kept by the run (evenly spaced in rank, the least and the most "
        f"late included), and the {LATE_MS:g} ms bar."
    )
    if below:
        caption += f" {below} of them below {LATENESS_FLOOR_MS} ms are drawn at it."
    out.append(figure("send-lateness", svg, caption, legend([cdf, bar]), table))
    return out


def _cdf_series(name: str, values_ms: list[float], colour: str) -> tuple[Series, int]:
    """The empirical CDF of ``values_ms`` as a step series (at most CDF_POINTS points), and
    how many values lie below the log axis' floor."""
    ordered = sorted(values_ms)
    n = len(ordered)
    if n > CDF_POINTS:
        ranks = sorted({round(j * (n - 1) / (CDF_POINTS - 1)) for j in range(CDF_POINTS)})
    else:
        ranks = list(range(n))
    floor = sum(1 for v in ordered if v < LOG_FLOOR_MS)
    first = max(ordered[0], LOG_FLOOR_MS)
    points = [(first, 0.0)] + [(max(ordered[i], LOG_FLOOR_MS), (i + 1) / n) for i in ranks]
    return Series(name, points, "step", colour), floor


def _latencies(samples: Sequence[RequestSample]) -> list[tuple[str, list[float]]]:
    ok = [s for s in samples if s.ok]
    tpots = [t * 1000.0 for t in (tpot_s(s) for s in ok) if t is not None]
    return [
        ("TTFT", [s.ttft_ms for s in ok if s.ttft_ms is not None]),
        ("TPOT", tpots),
        ("ITL", [v for s in ok for v in s.itl_ms]),
        ("E2E", [s.e2e_ms for s in ok if s.e2e_ms is not None]),
    ]


def _shape_section(shape: ShapeResult, n: int) -> list[str]:
    m = shape.metrics
    head = shape_head(shape)
    size = "" if shape.input_size_source == "tokenize" else " (estimated)"
    out = [
        heading(3, head),
        paragraph(
            f"{shape.concurrency} concurrent, ~{shape.input_tokens} tokens in{size}, up to "
            f"{shape.output_tokens_max} out, {shape.duration_s:.1f} s; "
            f"{_f(m.output_tokens_per_s, 1)} output tok/s"
        ),
    ]
    series: list[Series] = []
    rows: list[list[str]] = []
    below = 0
    for i, (name, values) in enumerate(_latencies(shape.samples)):
        if not values:
            rows.append([name, "0", *["-"] * (len(QUANTILES) + 1)])
            continue
        s, floor = _cdf_series(name, values, PALETTE[i])
        series.append(s)
        below += floor
        ordered = sorted(values)
        rows.append(
            [name, f"{len(values):,}", _f(mean(values))]
            + [_f(percentile(ordered, q)) for q in QUANTILES]
        )
    if series:
        svg = xy_plot(
            series,
            Axis("milliseconds (log scale)", log=True),
            Axis("fraction at or below", low=0.0, high=1.0),
            title=f"latency CDFs of {shape.name}",
        )
        caption = (
            f"Latency CDFs of {shape.name}: TTFT, TPOT and E2E per successful request, ITL per "
            "token gap (all requests pooled), from the document's samples."
        )
        if below:
            caption += f" {below} values below {LOG_FLOOR_MS} ms are drawn at {LOG_FLOOR_MS} ms."
        head_row = [
            "ms",
            "samples",
            "mean",
            "min",
            "p10",
            "p25",
            "p50",
            "p75",
            "p90",
            "p95",
            "p99",
            "max",
        ]
        out.append(figure("latency-cdf", svg, caption, legend(series), Table(head_row, rows)))
    else:
        out.append(
            paragraph(
                "No per-request samples in this document (a reconstructed or summarised run): "
                "no distribution to draw; the run's own figures:",
                "note",
            )
        )
        stats = [("TTFT", m.ttft_ms), ("TPOT", m.tpot_ms), ("ITL", m.itl_ms), ("E2E", m.e2e_ms)]
        out.append(
            Table(
                ["ms", "mean", "p50", "p90", "p95", "p99"],
                [[k, _f(s.mean), _f(s.p50), _f(s.p90), _f(s.p95), _f(s.p99)] for k, s in stats],
            ).markup()
        )
    out += [paragraph(f"note: {note}", "note") for note in shape.notes]
    return out


def _throughput_section(shapes: Sequence[ShapeResult]) -> list[str]:
    """Output and answer tokens/s of each shape against its concurrency: a figure where the
    shapes differ in concurrency, the table always."""
    rows = [
        [
            s.name,
            str(s.concurrency),
            f"{s.completed}/{s.requests}",
            _f(s.metrics.output_tokens_per_s, 1),
            _f(s.metrics.answer_tokens_per_s, 1),
            _f(s.metrics.output_tokens_per_s_per_user.p50, 1),
            _f(s.metrics.requests_per_s, 2),
        ]
        for s in shapes
    ]
    table = Table(
        [
            "shape",
            "concurrency",
            "ok",
            "output tok/s",
            "answer tok/s",
            "per user p50 tok/s",
            "req/s",
        ],
        rows,
    )
    out = [heading(2, "Throughput")]
    if len({s.concurrency for s in shapes}) < 2:
        out.append(paragraph("Every shape ran at one concurrency: no curve to draw.", "note"))
        out.append(table.markup())
        return out
    ordered = sorted(shapes, key=lambda s: s.concurrency)
    # A line joins the shapes only when each concurrency has one (else points, one a shape).
    kind: Kind = "linepoints" if len({s.concurrency for s in shapes}) == len(shapes) else "points"
    series: list[Series] = []
    rates: tuple[tuple[str, Callable[[ShapeResult], float | None]], ...] = (
        ("output tok/s", lambda s: s.metrics.output_tokens_per_s),
        ("answer tok/s", lambda s: s.metrics.answer_tokens_per_s),
    )
    for i, (name, get) in enumerate(rates):
        kept = [(s, v) for s in ordered if (v := get(s)) is not None]
        series.append(
            Series(
                name,
                [(float(s.concurrency), v) for s, v in kept],
                kind,
                PALETTE[i],
                [f"{s.name}: {v:,.1f} {name} at concurrency {s.concurrency}" for s, v in kept],
            )
        )
    svg = xy_plot(
        series,
        Axis("concurrent requests (log scale)", log=True),
        Axis("tokens per second", low=0.0),
        title="throughput against concurrency",
    )
    caption = (
        "Throughput against concurrency: each shape's output tokens/s (reasoning included) and "
        "answer tokens/s over its wall-clock duration; hover a point for its shape."
    )
    out.append(figure("throughput", svg, caption, legend(series), table))
    return out


# --------------------------------------------------------------------------- a rate run

_LOAD_WORDS = {"synchronous": "one at a time", "throughput": "all at once"}


def _load(p: SweepPoint) -> str:
    return _LOAD_WORDS.get(p.load, f"{_g(p.offered_rate)}/s")


def _load_order(p: SweepPoint) -> tuple[int, float]:
    """One at a time, the rates upward, all at once: the order of the load offered."""
    return (
        0 if p.load == "synchronous" else 2 if p.load == "throughput" else 1,
        p.offered_rate or 0.0,
    )


def _g(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"


def sweep_section(sides: Sequence[tuple[str, SweepResult]]) -> list[str]:
    """One rate run (``sides`` of one, labelled "") or two (before, after): latency against
    throughput and goodput against the offered rate, each with its table."""
    first = sides[0][1]
    two = len(sides) > 1
    out = [heading(2, "Load: latency and goodput against the rate")]
    for label, sw in sides:
        arrival = sw.arrival + (f" (burstiness {sw.burstiness:g})" if sw.burstiness else "")
        line = (
            f"{label + ': ' if label else ''}{sw.mode} of {sw.shape}, {len(sw.points)} loads, "
            f"{arrival} arrivals; knee: {sw.knee.verdict}"
            + (f" at {_g(sw.knee.rate)} req/s" if sw.knee.rate is not None else "")
        )
        if sw.capacity is not None:
            line += f"; capacity at SLO: {_capacity(sw.capacity)}"
        out.append(paragraph(line))
    if first.slo:
        limits = ", ".join(f"{k} <= {v:g} ms" for k, v in first.slo.items())
        out.append(paragraph(f"SLO: {limits} for {first.slo_level:.0%} of requests"))
    out += _latency_figure(sides, two)
    out += _goodput_figure(sides, two)
    return out


def _capacity(c: Capacity) -> str:
    if c.bound == "crossing":
        ci = f" [{_g(c.ci_low)}, {_g(c.ci_high)}]" if c.ci_low is not None else ""
        return f"{_g(c.rate)} req/s{ci}"
    if c.bound in ("at least", "below"):
        return f"{c.bound} {_g(c.rate)} req/s"
    return c.bound


_Curve = tuple[str, Callable[[SweepPoint], float | None]]


def _curves(
    points: Sequence[SweepPoint],
    label: str,
    curves: Sequence[_Curve],
    x: Callable[[SweepPoint], float],
    tip: Callable[[str, SweepPoint, float], str],
    *,
    colour: int,
    positive: bool = False,
) -> list[Series]:
    """A line of each named curve over ``points`` (a sweep's, in the order to join them):
    at ``x`` of each point where the curve has a value (above 0 where ``positive``: a log
    axis), named with the run's ``label``, its colour the palette's next from ``colour``."""
    out: list[Series] = []
    for name, get in curves:
        kept = [(p, v) for p in points if (v := get(p)) is not None and (v > 0 or not positive)]
        if kept:
            title = f"{name} {label}".strip()
            out.append(
                Series(
                    title,
                    [(x(p), v) for p, v in kept],
                    "linepoints",
                    PALETTE[(colour + len(out)) % len(PALETTE)],
                    [tip(title, p, v) for p, v in kept],
                )
            )
    return out


def _latency_figure(sides: Sequence[tuple[str, SweepResult]], two: bool) -> list[str]:
    """Median and tail latency against the achieved request rate, a point per load."""
    series: list[Series] = []
    rows: list[list[str]] = []
    metrics: tuple[_Curve, ...] = (
        (
            ("E2E p50", lambda p: p.metrics.e2e_ms.p50),
            ("TTFT p50", lambda p: p.metrics.ttft_ms.p50),
        )
        if two
        else (
            ("E2E p50", lambda p: p.metrics.e2e_ms.p50),
            ("E2E p99", lambda p: p.metrics.e2e_ms.p99),
            ("TTFT p50", lambda p: p.metrics.ttft_ms.p50),
        )
    )
    for label, sw in sides:
        ordered = sorted((p for p in sw.points if p.achieved_rate), key=_load_order)
        series += _curves(
            ordered,
            label,
            metrics,
            lambda p: p.achieved_rate or 0.0,
            lambda title, p, v: f"{_load(p)}: {title} {v:,.1f} ms at {p.achieved_rate:,.3g} req/s",
            colour=len(series),
            positive=True,
        )
        for p in sw.points:
            m = p.metrics
            rows.append(
                ([label] if two else [])
                + [
                    _load(p),
                    _f(p.achieved_rate),
                    _f(m.output_tokens_per_s, 1),
                    _f(m.ttft_ms.p50),
                    _f(m.tpot_ms.p50),
                    _f(m.e2e_ms.p50),
                    _f(m.e2e_ms.p99),
                ]
            )
    head = (["run"] if two else []) + [
        "load",
        "achieved req/s",
        "out tok/s",
        "TTFT p50 ms",
        "TPOT p50 ms",
        "E2E p50 ms",
        "E2E p99 ms",
    ]
    table = Table(head, rows, text_columns=frozenset({0, 1} if two else {0}))
    if not series:
        return [paragraph("No load answered: no curve to draw.", "note"), table.markup()]
    svg = xy_plot(
        series,
        Axis("achieved requests per second"),
        Axis("milliseconds (log scale)", log=True),
        title="latency against throughput",
    )
    caption = (
        "Latency against throughput: each load's median (and tail) latency at the request rate "
        "the server achieved (successful requests over the load's duration), joined in the "
        "order of the load: one request at a time, each rate upward, every request at once. "
        "A curve that turns back has passed what the server serves."
    )
    return [figure("latency-throughput", svg, caption, legend(series), table)]


def _goodput_figure(sides: Sequence[tuple[str, SweepResult]], two: bool) -> list[str]:
    """The achieved rate and the goodput against the offered rate (rate loads only), with
    the capacity at SLO and the knee marked."""
    series: list[Series] = []
    rows: list[list[str]] = []
    top = 0.0
    for label, sw in sides:
        rates = sorted(
            (p for p in sw.points if p.load == "rate" and p.offered_rate),
            key=lambda p: p.offered_rate or 0.0,
        )
        lines = _curves(
            rates,
            label,
            (("achieved", lambda p: p.achieved_rate), ("goodput", lambda p: p.goodput)),
            lambda p: p.offered_rate or 0.0,
            lambda title, p, v: f"{title}: {v:,.3g} req/s at {p.offered_rate:,.3g} offered",
            colour=len(series),
        )
        top = max([top, *(v for line in lines for point in line.points for v in point)])
        series += lines
        for p in rates:
            rows.append(
                ([label] if two else [])
                + [
                    _g(p.offered_rate),
                    _f(p.achieved_rate),
                    _f(p.goodput),
                    "-" if p.goodput_share is None else f"{p.goodput_share:.0%}",
                    f"{p.completed}/{p.requests}",
                    "-" if p.send_lateness_ms is None else _f(p.send_lateness_ms.p99),
                ]
            )
    marks: list[Series] = []
    for label, sw in sides:
        cap = sw.capacity
        for what, at in (
            ("capacity", cap.rate if cap is not None and cap.bound == "crossing" else None),
            ("knee", sw.knee.rate),
        ):
            if at is not None and top > 0:
                title = f"{what} {label}".strip()
                marks.append(
                    Series(
                        title,
                        [(at, 0.0), (at, top)],
                        "dashed" if label == "before" else "line",
                        NEUTRAL if what == "knee" else BAD,
                        [f"{title}: {at:,.3g} req/s"] * 2,
                    )
                )
    head = (["run"] if two else []) + [
        "offered req/s",
        "achieved req/s",
        "goodput req/s",
        "in SLO",
        "ok",
        "send lateness p99 ms",
    ]
    table = Table(head, rows, text_columns=frozenset({0} if two else set()))
    if not series:
        return [
            paragraph("No load at a rate was measured: no goodput curve to draw.", "note"),
            table.markup(),
        ]
    svg = xy_plot(
        [*series, *marks],
        Axis("offered requests per second"),
        Axis("requests per second", low=0.0),
        title="goodput against the offered rate",
    )
    caption = (
        "Goodput against the offered rate: the requests per second the server completed "
        "(achieved) and those that met every SLO (goodput) at each rate sent; vertical lines "
        "mark the capacity at SLO and the knee where latency left its floor"
        + (" (the before run's dashed)." if two else ".")
    )
    return [figure("goodput-rate", svg, caption, legend([*series, *marks]), table)]


# --------------------------------------------------------------------------- a soak

_TIME_UNITS = ((3600.0 * 2, "h", 3600.0), (120.0, "min", 60.0), (0.0, "s", 1.0))


def _interval_value(quantity: str) -> Callable[[SoakInterval], float | None] | None:
    """How a trend's quantity is read from one interval (None: not a per-interval series
    this page knows)."""
    if quantity == "kv_cache_usage_pct":
        return lambda iv: iv.kv_cache_usage_pct
    if quantity == "itl_p50_ms":
        return lambda iv: iv.itl_ms.p50
    if quantity.startswith("gpu") and quantity.endswith("_memory_used_mib"):
        index = quantity[3 : -len("_memory_used_mib")]
        if index.isdigit():
            gpu = int(index)
            return lambda iv: (
                iv.gpu_memory_used_mib[gpu]
                if iv.gpu_memory_used_mib and gpu < len(iv.gpu_memory_used_mib)
                else None
            )
    return None


def _soak_section(soak: SoakResult) -> list[str]:
    unit_name, unit_s = next((u, s) for limit, u, s in _TIME_UNITS if soak.duration_s >= limit)
    head = (
        f"Soak {soak.shape}: {soak.duration_s:,.0f} of {soak.duration_s_requested:,.0f} s, "
        f"{len(soak.intervals)} intervals of {soak.interval_s:g} s"
        + ("" if soak.complete else " (partial)")
    )
    out = [
        heading(2, head),
        paragraph(
            f"{soak.concurrency} concurrent, up to {soak.output_tokens_max} out; "
            f"{soak.completed}/{soak.requests} requests ok; {_f(soak.output_tokens_per_s, 1)} "
            f"output tok/s. KV cache: {soak.kv_cache}; GPU memory: {soak.gpu_memory}"
        ),
    ]
    out += [paragraph(f"finding: {f}", "finding") for f in soak.findings]

    def at(iv: SoakInterval) -> float:
        return (iv.start_s + iv.end_s) / 2.0 / unit_s

    x_axis = Axis(f"time since the soak's first request ({unit_name})")
    for trend in soak.trends:
        out += _trend_figure(soak, trend, at, x_axis, unit_s)
    out += _plain_series(
        soak,
        "soak-throughput",
        "output tok/s",
        [("output tok/s", lambda iv: iv.output_tokens_per_s)],
        at,
        x_axis,
    )
    out += _plain_series(
        soak,
        "soak-ttft",
        "TTFT (ms)",
        [("TTFT p50", lambda iv: iv.ttft_ms.p50), ("TTFT p99", lambda iv: iv.ttft_ms.p99)],
        at,
        x_axis,
    )
    trend_rows = [
        [
            t.quantity,
            t.unit,
            str(t.intervals),
            "-" if t.slope_per_hour is None else f"{t.slope_per_hour:+,.3f}",
            "-"
            if t.ci_low_per_hour is None or t.ci_high_per_hour is None
            else f"[{t.ci_low_per_hour:+,.3f}, {t.ci_high_per_hour:+,.3f}]",
            t.verdict,
        ]
        for t in soak.trends
    ]
    out.append(heading(3, "Trends"))
    out.append(
        Table(
            [
                "quantity",
                "unit",
                "fitted intervals",
                "slope per hour",
                f"{soak.per_trend_confidence:.2%} interval",
                "verdict",
            ],
            trend_rows,
            text_columns=frozenset({0, 1, 5}),
        ).markup()
    )
    out += [paragraph(t.reason, "finding" if t.verdict == "growing" else "") for t in soak.trends]
    out += [paragraph(f"note: {note}", "note") for note in soak.notes]
    return out


def _fitted(
    soak: SoakResult, trend: Trend, get: Callable[[SoakInterval], float | None]
) -> list[SoakInterval]:
    """The intervals the trend was fitted on: the last ``trend.intervals`` full intervals
    with a value (the warm-up ones come first, a partial one last)."""
    full = [iv for iv in soak.intervals if not iv.partial and get(iv) is not None]
    return full[len(full) - trend.intervals :] if trend.intervals else []


def _trend_figure(
    soak: SoakResult,
    trend: Trend,
    at: Callable[[SoakInterval], float],
    x_axis: Axis,
    unit_s: float,
) -> list[str]:
    get = _interval_value(trend.quantity)
    level = "%" if trend.unit == "pp" else trend.unit
    label = f"{trend.quantity} ({level})"
    if get is None or not any(get(iv) is not None for iv in soak.intervals):
        return [heading(3, label), paragraph(trend.reason, "note")]
    observed = [(iv, v) for iv in soak.intervals if (v := get(iv)) is not None]
    fitted = _fitted(soak, trend, get)
    fitted_ids = {iv.index for iv in fitted}
    series = [
        Series(
            "per interval",
            [(at(iv), v) for iv, v in observed],
            "linepoints",
            PALETTE[0],
            [
                f"interval {iv.index + 1}{' (partial)' if iv.partial else ''}: {v:,.2f} {level}"
                for iv, v in observed
            ],
        )
    ]
    fit_at: dict[int, float] = {}
    if trend.slope_per_hour is not None and len(fitted) >= 2:
        # The document keeps the slope, not the intercept: Theil-Sen's line passes through
        # the medians of the fitted points (scipy's intercept), so it is drawn through them.
        hours = [(iv.start_s + iv.end_s) / 2.0 / 3600.0 for iv in fitted]
        ys = [v for iv in fitted if (v := get(iv)) is not None]
        mx, my = statistics.median(hours), statistics.median(ys)
        per_unit = unit_s / 3600.0
        x0, x1 = at(fitted[0]), at(fitted[-1])
        mxu = mx / per_unit

        def line(slope_per_hour: float, x: float) -> float:
            return my + slope_per_hour * per_unit * (x - mxu)

        for iv in fitted:
            fit_at[iv.index] = line(trend.slope_per_hour, at(iv))
        if trend.ci_low_per_hour is not None and trend.ci_high_per_hour is not None:
            lo, hi = trend.ci_low_per_hour, trend.ci_high_per_hour
            series.append(
                Series(
                    f"{soak.per_trend_confidence:.2%} interval of the slope",
                    [
                        (x0, line(lo, x0)),
                        (x1, line(lo, x1)),
                        (x1, line(hi, x1)),
                        (x0, line(hi, x0)),
                    ],
                    "area",
                    PALETTE[1],
                )
            )
        series.append(
            Series(
                f"Theil-Sen fit {trend.slope_per_hour:+,.3f} {trend.unit}/h",
                [(x0, line(trend.slope_per_hour, x0)), (x1, line(trend.slope_per_hour, x1))],
                "dashed",
                PALETTE[1],
            )
        )
    rows = [
        [
            f"{iv.index + 1}{'*' if iv.partial else ''}",
            f"{iv.start_s:,.0f}-{iv.end_s:,.0f}",
            _f(v),
            "yes" if iv.index in fitted_ids else "no",
            _f(fit_at.get(iv.index)),
        ]
        for iv, v in observed
    ]
    hlines: list[tuple[float, str]] = []
    if trend.quantity.startswith("gpu") and trend.unit == "MiB":
        gpu = trend.quantity[3 : -len("_memory_used_mib")]
        if gpu.isdigit() and int(gpu) < len(soak.gpu_total_mib):
            total = soak.gpu_total_mib[int(gpu)]
            if total is not None:
                hlines.append((total, f"total {total:,.0f} MiB"))
    svg = xy_plot(
        series, x_axis, Axis(label), title=f"{trend.quantity} per interval", hlines=hlines
    )
    caption = (
        f"{trend.reason}. Fitted: the full intervals after the warm-up (* partial: shown, not "
        "fitted); the line is the document's slope through the medians of those intervals."
    )
    table = Table(["#", "s", label, "fitted", "fit"], rows, text_columns=frozenset({0, 3}))
    return [heading(3, label), figure("soak-trend", svg, caption, legend(series), table)]


def _plain_series(
    soak: SoakResult,
    kind: str,
    y_label: str,
    getters: Sequence[tuple[str, Callable[[SoakInterval], float | None]]],
    at: Callable[[SoakInterval], float],
    x_axis: Axis,
) -> list[str]:
    series = []
    for i, (name, get) in enumerate(getters):
        kept = [(iv, v) for iv in soak.intervals if (v := get(iv)) is not None]
        if kept:
            series.append(
                Series(
                    name,
                    [(at(iv), v) for iv, v in kept],
                    "linepoints",
                    PALETTE[i],
                    [f"interval {iv.index + 1}: {v:,.2f}" for iv, v in kept],
                )
            )
    if not series:
        return []
    rows = [
        [f"{iv.index + 1}{'*' if iv.partial else ''}", f"{iv.start_s:,.0f}-{iv.end_s:,.0f}"]
        + [_f(get(iv)) for _, get in getters]
        for iv in soak.intervals
    ]
    svg = xy_plot(series, x_axis, Axis(y_label, low=0.0), title=f"{y_label} per interval")
    caption = f"{y_label} per interval of the soak (no trend is judged on it)."
    table = Table(["#", "s", *(n for n, _ in getters)], rows)
    return [heading(3, y_label), figure(kind, svg, caption, legend(series), table)]


# --------------------------------------------------------------------------- a compare


# A compare's axis runs no further than this either side of 0 (percent): a change past it
# (a tail that grew tenfold) ends at the edge with its value, so that the other rows' -80%
# stays readable; the table gives every value.
FOREST_CLIP_PCT = 200.0


def _colour(verdict: str) -> str:
    return GOOD if verdict == "better" else BAD if verdict == "worse" else NEUTRAL


def _forest_row(c: Comparison, change: float, why: str, step: str | None = None) -> ForestRow:
    """``c`` (whose ``change`` is measured) as a row of the intervals plot, named by its
    ladder ``step`` where given, its shape and its metric; ``why`` in its tip's parentheses."""
    names = [c.shape, c.metric] if step is None else [step, c.shape, c.metric]
    return ForestRow(
        " · ".join(names),
        change,
        c.ci_low_pct,
        c.ci_high_pct,
        _colour(c.verdict),
        f"{' '.join(names)}: {change:+.1f}% ({why})",
        c.noise_floor_pct,
    )


def render_compare_html(doc: CompareDocument, text: str) -> str:
    """A compare document as a page; ``text`` is its terminal report (sanitised)."""
    title = f"compare {doc.before} -> {doc.after}"
    runs = ", ".join(f"{k}: {v} runs" for k, v in sorted(doc.runs.items()))
    subtitle = (
        f"{doc.tool.name} {doc.tool.version} · intervals hold together at {doc.confidence:.0%} "
        f"({doc.per_comparison_confidence:.2%} each) · {doc.resamples} bootstrap resamples, "
        f"seed {doc.seed}" + (f" · {runs}" if runs else "")
    )
    sc = doc.scorecard
    body = [
        heading(2, "Scorecard"),
        Table(
            ["scorecard", "verdict"],
            [
                ["latency", sc.latency],
                ["throughput", sc.throughput],
                ["equivalence", sc.equivalence],
                ["errors", sc.errors],
                ["overall", sc.overall],
            ],
            text_columns=frozenset({0, 1}),
            verdict_columns=frozenset({1}),
        ).markup(),
        # The exit code under the verdict it follows from (issue 40: "exit 0" stood in the
        # subtitle, above "overall worse").
        paragraph(f"exit {doc.exit_code}", "exit"),
    ]
    if not isinstance(sc.reasons, msgspec.UnsetType):
        body[2:2] = [
            paragraph(f"{label}: {reason}", "note")
            for label, reason in rollup_reasons(sc, sc.reasons)
        ]
    body += [paragraph(f"regression: {r}", "finding") for r in doc.regressions]
    body += [
        paragraph(f"errors {side}: " + counts_text(errors))
        for side, errors in doc.errors.items()
        if errors
    ]
    body.append(heading(2, "Changes"))
    drawn = [c for c in doc.comparisons if c.change_pct is not None]
    rows = []
    for c in doc.comparisons:
        rows.append(
            [
                c.shape,
                c.metric,
                c.better,
                _f(c.before),
                _f(c.after),
                *change_cells(c),
                c.verdict,
                "-" if c.noise_floor_pct is None else f"{c.noise_floor_pct:.1f}%",
            ]
        )
    table = Table(
        [
            "shape",
            "metric",
            "better",
            "before",
            "after",
            "change",
            f"{doc.per_comparison_confidence:.2%} CI",
            "verdict",
            "noise floor",
        ],
        rows,
        text_columns=frozenset({0, 1, 2, 7}),
        verdict_columns=frozenset({7}),
    )
    if drawn:
        forest_rows = [
            _forest_row(c, c.change_pct, f"{c.verdict}; {c.better} is better")
            for c in drawn
            if c.change_pct is not None
        ]
        svg = forest(
            forest_rows,
            x_label="change after vs before (% of before)",
            band=doc.threshold_pct or None,
            title="compare intervals",
            unit="%",
            clip=FOREST_CLIP_PCT,
        )
        left_out = len(doc.comparisons) - len(drawn)
        caption = (
            f"Each change with its {doc.per_comparison_confidence:.2%} bootstrap interval: "
            "green better, vermillion worse, grey neither (latency: lower is better; throughput: "
            f"higher). Dashed: ±{doc.threshold_pct:g}%, the smallest change given a verdict; "
            "shaded: the row's noise floor, inside which no change is called better or worse. "
            f"The axis stops at ±{FOREST_CLIP_PCT:g}%: a change beyond it ends at the edge in "
            "a triangle, with its value."
            + (f" {left_out} rows without a value are in the table only." if left_out else "")
        )
        body.append(figure("forest", svg, caption, "", table))
    else:
        body.append(paragraph("No change could be computed: nothing to draw.", "note"))
        body.append(table.markup())
    body += _reason_paragraphs(doc.comparisons, "")
    if doc.equivalence:
        body.append(heading(2, "Equivalence"))
        body.append(
            Table(
                ["shape", "greedy prompts", "identical", "verdict", "first divergence"],
                [
                    [
                        e.shape,
                        str(e.prompts),
                        "-" if e.exact_match_rate is None else f"{e.exact_match_rate:.0%}",
                        e.verdict,
                        ", ".join(
                            f"{k} at char {v}" for k, v in sorted(e.first_divergence.items())
                        ),
                    ]
                    for e in doc.equivalence
                ],
                text_columns=frozenset({0, 3, 4}),
            ).markup()
        )
        body += [
            paragraph(f"{e.verdict}: {e.shape}: {e.reason}", "note")
            for e in doc.equivalence
            if not isinstance(e.reason, msgspec.UnsetType)
        ]
    if doc.between_run_noise:
        body.append(paragraph(f"between-run noise: {doc.between_run_noise}", "note"))
    if not isinstance(doc.sweep, msgspec.UnsetType):
        body += sweep_section([("before", doc.sweep.before), ("after", doc.sweep.after)])
        body += [paragraph(f"note: {n}", "note") for n in doc.sweep.notes]
    body += _environment_section(doc)
    body.append(text_report(text, "The terminal report of this compare"))
    return page(title, body, subtitle=subtitle)


def _reason_paragraphs(rows: Sequence[Comparison], where: str) -> list[str]:
    """A line under the table for each reason of a shape (a "not comparable" row's): what
    was found, the terminal's words (issue 40)."""
    return [
        paragraph(f"{verdict}{where}: {shape} {', '.join(metrics)}: {reason}", "note")
        for (shape, verdict, reason), metrics in group_reasons(rows).items()
    ]


def _environment_section(doc: CompareDocument) -> list[str]:
    """What differs between the two runs' pinned environments (absent when neither pinned
    one)."""
    env = doc.environment
    if isinstance(env, msgspec.UnsetType):
        return []
    body = [heading(2, f"Environment: {env.verdict}")]
    if env.differences:
        body.append(
            Table(
                ["what", "before", "after"],
                [[c.key, c.before, c.after] for c in env.differences],
                text_columns=frozenset({0, 1, 2}),
            ).markup()
        )
    kind = "finding" if env.verdict == "confounded" else "note"
    body += [paragraph(note, kind) for note in env.notes]
    return body


# --------------------------------------------------------------------------- a ladder


def render_ladder_html(
    doc: LadderDocument, text: str, *, what_changed: Callable[[CompareDocument], str]
) -> str:
    """A ladder as a page: its steps with what changed at each, every step's and the
    first-to-last change as a forest plot with the table under it; ``text`` is its terminal
    report (sanitised)."""
    n = len(doc.runs)
    title = "ladder " + " -> ".join(doc.runs)
    subtitle = (
        f"{doc.tool.name} {doc.tool.version} · every interval holds together at "
        f"{doc.confidence:.0%} (each of the {n} compares at {doc.per_compare_confidence:.2%}) "
        f"· exit {doc.exit_code}"
    )
    labelled = [(str(k), step) for k, step in enumerate(doc.steps, start=1)]
    labelled.append((f"1-{n}", doc.cumulative))
    body = [
        heading(2, "Steps"),
        Table(
            ["step", "from", "to", "overall", "what changed"],
            [
                [label, s.before, s.after, s.scorecard.overall, what_changed(s)]
                for label, s in labelled
            ],
            text_columns=frozenset({0, 1, 2, 3, 4}),
        ).markup(),
    ]
    body += [paragraph(f"regression: {r}", "finding") for r in doc.regressions]
    for label, step in labelled:
        env = step.environment
        if not isinstance(env, msgspec.UnsetType) and env.verdict == "confounded":
            body += [paragraph(f"step {label}: {note}", "finding") for note in env.notes]
    body.append(heading(2, "Changes"))
    rows: list[list[str]] = []
    forest_rows: list[ForestRow] = []
    for label, step in labelled:
        for c in step.comparisons:
            rows.append(
                [label, c.shape, c.metric, _f(c.before), _f(c.after), *change_cells(c), c.verdict]
            )
            if c.change_pct is not None:
                forest_rows.append(_forest_row(c, c.change_pct, c.verdict, f"step {label}"))
    table = Table(
        ["step", "shape", "metric", "before", "after", "change", "CI", "verdict"],
        rows,
        text_columns=frozenset({0, 1, 2, 7}),
    )
    if forest_rows:
        svg = forest(
            forest_rows,
            x_label="change against the step's first run (% of it)",
            band=doc.cumulative.threshold_pct or None,
            title="ladder intervals",
            unit="%",
            clip=FOREST_CLIP_PCT,
        )
        caption = (
            "Each step's change (and first to last) with its interval: green better, "
            "vermillion worse, grey neither; shaded: the row's noise floor."
        )
        body.append(figure("forest", svg, caption, "", table))
    else:
        body.append(paragraph("No change could be computed: nothing to draw.", "note"))
        body.append(table.markup())
    for label, step in labelled:
        body += _reason_paragraphs(step.comparisons, f", step {label}")
    body.append(text_report(text, "The terminal report of this ladder"))
    return page(title, body, subtitle=subtitle)
