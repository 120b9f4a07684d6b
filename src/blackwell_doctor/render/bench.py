"""The ``bench`` documents (a run, a soak, a compare) in each format: rich (the terminal's
text), Markdown, JSON (schemas: schemas/bench.schema.json, bench-compare.schema.json) and
HTML (one page with plots: render.bench_html, which escapes every value it places).

Their strings come from the server (model ids, error bodies, notes quoting it) and from run
files (shape names, file names): :func:`render_bench`, the one way in, takes the document
through the renderers' one sanitising step first (``scrub``: for text every control
character, bidirectional override and newline shown escaped; for JSON lone surrogates, and
the characters a terminal acts on written as ``\\u`` escapes), and the Markdown renderer
escapes each such value's Markdown syntax where it is placed (``render.markdown.prose``,
``cell``), so no value can rewrite the terminal or add a heading, a link or a table row.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from typing import assert_never

import msgspec

from blackwell_doctor.render.common import (
    change_cells,
    counts_text,
    json_chunks,
    json_document,
    rollup_reasons,
    shape_head,
)
from blackwell_doctor.render.formats import BenchFormat
from blackwell_doctor.render.markdown import cell, prose
from blackwell_doctor.render.terminal import Item, Table, write_plain
from blackwell_doctor.report.bench import (
    ESTIMATED,
    SYNCHRONOUS,
    THROUGHPUT,
    USAGE,
    BenchRun,
    Calibration,
    Capacity,
    CompareDocument,
    Comparison,
    Scorecard,
    ShapeResult,
    SoakResult,
    Stats,
    SweepComparison,
    SweepPoint,
    SweepResult,
    TraceResult,
    group_reasons,
)
from blackwell_doctor.report.bench_env import Environment, EnvironmentComparison, command_line
from blackwell_doctor.report.bench_ladder import LadderDocument
from blackwell_doctor.report.sanitize import json_safe, sanitize_line, scrub


def render_bench(
    doc: BenchRun | CompareDocument | LadderDocument, fmt: BenchFormat, *, width: int | None = None
) -> str:
    """A bench or soak run, or a compare document, in ``fmt``, through the one sanitising
    step first. ``width``: the terminal's, which the rich text is fitted to (None: not
    fitted; the HTML page's text never is, a browser wraps it)."""
    match fmt:
        case BenchFormat.JSON:
            return json_document(scrub(doc, json_safe))
        case BenchFormat.RICH:
            return _text(scrub(doc, sanitize_line), markdown=False, width=width)
        case BenchFormat.MARKDOWN:
            return _text(scrub(doc, sanitize_line), markdown=True)
        case BenchFormat.HTML:
            from blackwell_doctor.render.bench_html import (
                render_compare_html,
                render_ladder_html,
                render_run_html,
            )

            clean = scrub(doc, sanitize_line)
            text = _text(clean, markdown=False)
            if isinstance(clean, BenchRun):
                return render_run_html(clean, text)
            if isinstance(clean, LadderDocument):
                return render_ladder_html(clean, text, what_changed=what_changed)
            return render_compare_html(clean, text)
        case _:
            assert_never(fmt)


def encode(doc: BenchRun | CompareDocument | LadderDocument) -> str:
    """A bench, soak or compare document as JSON (what ``--output`` writes): exact (it
    decodes to the same strings, but a lone surrogate, which UTF-8 cannot carry, is shown
    escaped as every renderer shows it), and safe to print to a terminal."""
    return render_bench(doc, BenchFormat.JSON)


def encode_parts(doc: BenchRun | CompareDocument | LadderDocument) -> Iterator[str]:
    """:func:`encode` in pieces (render/common.py's json_chunks): a run's measured samples
    are written a batch at a time, never held as one text."""
    return json_chunks(scrub(doc, json_safe))


def render_run(doc: BenchRun, *, markdown: bool = False) -> str:
    """A bench or soak run as text (the terminal's) or Markdown."""
    return render_bench(doc, BenchFormat.MARKDOWN if markdown else BenchFormat.RICH)


def render_compare(
    doc: CompareDocument, *, markdown: bool = False, width: int | None = None
) -> str:
    """A compare document as text (the terminal's, fitted to ``width``) or Markdown."""
    return render_bench(doc, BenchFormat.MARKDOWN if markdown else BenchFormat.RICH, width=width)


def _text(
    doc: BenchRun | CompareDocument | LadderDocument, *, markdown: bool, width: int | None = None
) -> str:
    if isinstance(doc, BenchRun):
        out = _run(doc, markdown=markdown)
    elif isinstance(doc, LadderDocument):
        out = _ladder(doc, markdown=markdown)
    else:
        out = _compare(doc, markdown=markdown)
    # Markdown is all lines of text, never fitted (a ticket wraps it).
    return write_plain(out, None if markdown else width)


def _plain(text: str) -> str:
    return text


def _words(markdown: bool) -> Callable[[str], str]:
    """How a value from outside (already sanitised) is placed in the output."""
    return prose if markdown else _plain


def _heading(text: str, markdown: bool, level: str = "###") -> list[Item]:
    """A section's first line: a Markdown heading of ``level``, or the line itself."""
    return [f"{level} {text}" if markdown else text]


def _notes(notes: Sequence[str], w: Callable[[str], str]) -> list[Item]:
    return [f"note: {w(note)}" for note in notes]


def _f(value: float | None, digits: int = 1) -> str:
    return "-" if value is None else f"{value:,.{digits}f}"


def _g(value: float | None) -> str:
    """A small figure that may be of any magnitude (a log-probability difference)."""
    return "-" if value is None else f"{value:.3g}"


def _stats_row(label: str, s: Stats) -> list[str]:
    return [label, _f(s.mean, 2), _f(s.p50, 2), _f(s.p90, 2), _f(s.p95, 2), _f(s.p99, 2)]


def _table(
    rows: list[list[str]], *, markdown: bool, left: int = 1, keys: int | None = None
) -> list[Item]:
    """``rows`` (the first the header) as a Markdown table, or as text: the first ``left``
    columns aligned left, the others right (numbers). A text table wider than the terminal
    is split into parts, each led by the first ``keys`` columns (default ``left``)."""
    if markdown:
        head = "| " + " | ".join(map(cell, rows[0])) + " |"
        out: list[Item] = [head, "|" + "|".join("---" for _ in rows[0]) + "|"]
        out += ["| " + " | ".join(map(cell, r)) + " |" for r in rows[1:]]
        return out
    right = frozenset(range(left, len(rows[0])))
    return [Table(rows, right=right, keys=left if keys is None else keys)]


def _shape_lines(shape: ShapeResult, *, markdown: bool) -> list[Item]:
    w = _words(markdown)
    m = shape.metrics
    out = _heading(shape_head(shape, w), markdown)
    size = "" if shape.input_size_source == "tokenize" else " (estimated)"
    out.append(
        f"{shape.concurrency} concurrent, ~{shape.input_tokens} tokens in{size}, up to "
        f"{shape.output_tokens_max} out, {shape.duration_s:.1f} s"
    )
    if markdown:
        out.append("")
    rows = [["ms", "mean", "p50", "p90", "p95", "p99"]]
    rows.append(_stats_row("TTFT", m.ttft_ms))
    rows.append(_stats_row("TPOT", m.tpot_ms))
    rows.append(_stats_row("ITL", m.itl_ms))
    rows.append(_stats_row("E2E", m.e2e_ms))
    out += _table(rows, markdown=markdown)
    if markdown:
        out.append("")
    estimated = "" if m.token_source == USAGE else " (estimated)"
    out.append(
        f"output: {m.output_tokens} tokens{estimated} = {m.answer_tokens} answer + "
        f"{m.reasoning_tokens} reasoning"
        + (" (reasoning estimated)" if m.reasoning_source == ESTIMATED else "")
    )
    out.append(
        f"throughput: {_f(m.output_tokens_per_s)} output tok/s, of which "
        f"{_f(m.answer_tokens_per_s)} answer tok/s; {_f(m.requests_per_s, 2)} req/s; "
        f"per user {_f(m.output_tokens_per_s_per_user.p50)} tok/s (p50)"
    )
    if shape.server is not None:
        s = shape.server
        parts = [f"generation tokens {_f(s.generation_tokens, 0)}"]
        if s.ttft is not None:
            parts.append(f"TTFT mean {_f(s.ttft.mean_ms, 2)} ms")
        if s.itl is not None:
            parts.append(f"ITL mean {_f(s.itl.mean_ms, 2)} ms")
        parts.append(f"preemptions {_f(s.preemptions, 0)}")
        parts.append(f"peak KV cache {_f(s.kv_cache_usage_peak_pct)}%")
        if s.prefix_cache_hit_rate is not None:
            parts.append(
                f"prefix cache hits {s.prefix_cache_hit_rate * 100:.1f}% of "
                f"{_f(s.prefix_cache_queries, 0)} prompt tokens"
            )
        out.append("server /metrics: " + ", ".join(parts))
    out += _notes(shape.notes, w)
    failed = [s for s in shape.samples if not s.ok]
    for sample in failed[:3]:
        out.append(f"error: {w(str(sample.error))}: {w(str(sample.detail))}")
    if len(failed) > 3:
        out.append(f"... and {len(failed) - 3} more failed requests")
    bad = [(i, s.degenerate) for i, s in enumerate(shape.samples) if s.degenerate]
    for index, why in bad[:3]:
        out.append(f"degenerate: request {index + 1}: {w(why or '')}")
    if len(bad) > 3:
        out.append(f"... and {len(bad) - 3} more degenerate answers")
    for e in shape.equivalence:
        if e.degenerate:
            out.append(f"degenerate: greedy {w(e.prompt_id)}: {w(e.degenerate)}")
    return out


def _run(doc: BenchRun, *, markdown: bool) -> list[Item]:
    w = _words(markdown)
    server = doc.server
    title = f"bench {w(server.url)} model {w(server.model or '-')}"
    out = _heading(title, markdown, "##")
    if server.error:
        out.append(f"error: {w(server.error)}")
    if doc.interrupted:
        out.append("interrupted: partial result")
    for finding in doc.findings:
        out.append(f"finding: {w(finding)}")
    if doc.environment is not None:
        out += _environment_lines(doc.environment, markdown=markdown)
    if not isinstance(doc.sweep, msgspec.UnsetType):
        out.append("")
        out += sweep_lines(doc.sweep, markdown=markdown)
        if doc.shapes:
            out.append("")
            out.append("## each point" if markdown else "each point:")
    if not isinstance(doc.trace, msgspec.UnsetType):
        out.append("")
        out += _trace_lines(doc.trace, markdown=markdown)
    for shape in doc.shapes:
        out.append("")
        out += _shape_lines(shape, markdown=markdown)
    if doc.calibration is not None:
        out.append("")
        out += _calibration_lines(doc.calibration, markdown=markdown)
    if doc.soak is not None:
        out.append("")
        out += _soak_lines(doc.soak, markdown=markdown)
    return out


def slo_text(slo: dict[str, float], level: float) -> str:
    """``ttft_ms <= 500, tpot_ms <= 50 for 90% of requests``."""
    limits = ", ".join(f"{k} <= {v:g}" for k, v in slo.items())
    return f"{limits} for {level:.0%} of requests"


def load_text(p: SweepPoint) -> str:
    if p.load == SYNCHRONOUS:
        return "one at a time"
    if p.load == THROUGHPUT:
        return "all at once"
    return f"{_g3(p.offered_rate)}/s"


def _g3(value: float | None) -> str:
    return "-" if value is None else f"{value:,.3g}" if value < 1000 else f"{value:,.0f}"


def capacity_text(c: Capacity) -> str:
    """The capacity at SLO in a few words: ``2.4 req/s [2.1, 2.9]``, ``at least 8 req/s``."""
    if c.bound == "crossing" and c.rate is not None:
        ci = (
            f" [{_g3(c.ci_low)}, {_g3(c.ci_high)}]"
            if c.ci_low is not None and c.ci_high is not None
            else ""
        )
        return f"{_g3(c.rate)} req/s{ci}"
    if c.bound == "at least":
        return f"at least {_g3(c.rate)} req/s"
    if c.bound == "below":
        return f"below {_g3(c.rate)} req/s"
    return "not measured"


def sweep_lines(sweep: SweepResult, *, markdown: bool) -> list[Item]:
    """A rate run: its points, the knee and the capacity at SLO."""
    w = _words(markdown)
    arrival = sweep.arrival + (
        f" (burstiness {sweep.burstiness:g})" if sweep.burstiness is not None else ""
    )
    head = (
        f"{'sweep' if sweep.mode == 'sweep' else 'rates'} of {w(sweep.shape)}: "
        f"{len(sweep.points)} loads, {w(arrival)} arrivals"
    )
    out = _heading(head, markdown)
    if sweep.slo:
        out.append(f"SLO: {w(slo_text(sweep.slo, sweep.slo_level))}")
    if markdown:
        out.append("")
    rows = [
        [
            "load",
            "req/s offered",
            "achieved",
            "ok",
            "TTFT p50",
            "TPOT p50",
            "E2E p50",
            "E2E p99",
            "out tok/s",
            "goodput",
            "in SLO",
            "late p99 ms",
        ]
    ]
    for p in sweep.points:
        m = p.metrics
        rows.append(
            [
                load_text(p) + ("" if p.complete else " (partial)"),
                _g3(p.offered_rate),
                _f(p.achieved_rate, 2),
                f"{p.completed}/{p.requests}",
                _f(m.ttft_ms.p50, 2),
                _f(m.tpot_ms.p50, 2),
                _f(m.e2e_ms.p50, 2),
                _f(m.e2e_ms.p99, 2),
                _f(m.output_tokens_per_s),
                _f(p.goodput, 2),
                "-" if p.goodput_share is None else f"{p.goodput_share:.0%}",
                "-" if p.send_lateness_ms is None else _f(p.send_lateness_ms.p99, 2),
            ]
        )
    out += _table(rows, markdown=markdown)
    if markdown:
        out.append("")
    out.append(f"knee: {w(sweep.knee.verdict)}: {w(sweep.knee.reason)}")
    if sweep.capacity is not None:
        out.append(f"capacity at SLO: {capacity_text(sweep.capacity)}: {w(sweep.capacity.reason)}")
    out += _notes(sweep.notes, w)
    return out


def sweep_compare_lines(sw: SweepComparison, *, markdown: bool) -> list[Item]:
    """Two sweeps' curves side by side, load by load, and their knees and capacities."""
    w = _words(markdown)
    head = f"sweeps of {w(sw.before.shape)}, before -> after"
    out = _heading(head, markdown)
    if sw.slo:
        out.append(f"SLO: {w(slo_text(sw.slo, sw.slo_level))}")
    if markdown:
        out.append("")
    after = {p.shape: p for p in sw.after.points}

    def pair(b: float | None, a: float | None, digits: int = 2) -> str:
        return f"{_f(b, digits)} -> {_f(a, digits)}"

    rows = [["load", "achieved req/s", "E2E p50 ms", "TTFT p50 ms", "out tok/s", "in SLO"]]
    for p in sw.before.points:
        q = after.get(p.shape)
        if q is None:
            continue
        share = (
            "-"
            if p.goodput_share is None or q.goodput_share is None
            else f"{p.goodput_share:.0%} -> {q.goodput_share:.0%}"
        )
        rows.append(
            [
                load_text(p),
                pair(p.achieved_rate, q.achieved_rate),
                pair(p.metrics.e2e_ms.p50, q.metrics.e2e_ms.p50),
                pair(p.metrics.ttft_ms.p50, q.metrics.ttft_ms.p50),
                pair(p.metrics.output_tokens_per_s, q.metrics.output_tokens_per_s, 1),
                share,
            ]
        )
    out += _table(rows, markdown=markdown)
    if markdown:
        out.append("")
    for side, sweep in (("before", sw.before), ("after", sw.after)):
        out.append(f"knee {side}: {w(sweep.knee.verdict)}: {w(sweep.knee.reason)}")
    for side, sweep in (("before", sw.before), ("after", sw.after)):
        if sweep.capacity is not None:
            out.append(f"capacity at SLO {side}: {capacity_text(sweep.capacity)}")
    for name in sw.only_before:
        out.append(f"only before: {w(name)}")
    for name in sw.only_after:
        out.append(f"only after: {w(name)}")
    out += _notes(sw.notes, w)
    return out


def _trace_lines(trace: TraceResult, *, markdown: bool) -> list[Item]:
    w = _words(markdown)
    blocks = "" if trace.block_tokens is None else f", blocks of {trace.block_tokens} tokens"
    head = f"trace {w(trace.file)} ({w(trace.format)}{blocks})"
    out = _heading(head, markdown)
    left = trace.skipped + trace.not_replayed
    out.append(
        f"{trace.sent}/{trace.requests} requests sent over {trace.span_s:.1f} s at time scale "
        f"{trace.time_scale:g}; {trace.rows} rows in the file"
        + (f", {left} not replayed" if left else "")
        + f"; peak {trace.peak_in_flight} in flight"
        + (f"; {trace.client_processes} client processes" if trace.client_processes > 1 else "")
    )
    if markdown:
        out.append("")
    row = [*_stats_row("lateness", trace.lateness_ms), _f(trace.lateness_max_ms, 2)]
    out += _table([["ms", "mean", "p50", "p90", "p95", "p99", "max"], row], markdown=markdown)
    if markdown:
        out.append("")
    late = trace.late_over_1ms
    whom = (
        "1 request sent more than 1 ms after its"
        if late == 1
        else (f"{late} requests sent more than 1 ms after their")
    )
    out.append(f"send lateness: {whom} time")
    if trace.prompt_tokens:
        size = "" if trace.size_source == "tokenize" else " (estimated)"
        out.append(
            f"prompt tokens{size}: {trace.prompt_tokens:,}, of which "
            f"{trace.reusable_prompt_tokens / trace.prompt_tokens * 100:.1f}% in blocks an "
            "earlier request carried (what a prefix cache keeping every block could serve)"
        )
    if trace.capped:
        out.append(f"capped: {trace.capped} prompts cut to fit the server's max_model_len")
    return out


def _calibration_lines(cal: Calibration, *, markdown: bool) -> list[Item]:
    """The noise floor of ``bench --repeat N``: each metric's figure in every run."""
    w = _words(markdown)
    head = f"noise floor: {cal.runs} runs of one configuration (the shapes above are run 1)"
    if cal.interleaved_with:
        head += f", taking turns with {w(cal.interleaved_with)}"
    out = _heading(head, markdown)
    if markdown:
        out.append("")
    rows = [["shape", "metric", "runs", "spread", "CV", "floor"]]
    for f in cal.floors:
        rows.append(
            [
                w(f.shape),
                w(f.metric),
                " ".join(_f(v, 2) for v in f.values),
                "-" if f.spread_pct is None else f"{f.spread_pct:.1f}%",
                "-" if f.cv_pct is None else f"{f.cv_pct:.1f}%",
                "-" if f.floor_pct is None else f"{f.floor_pct:.1f}%",
            ]
        )
    out += _table(rows, markdown=markdown, keys=2)
    out.append(f"floor: {w(cal.method)}")
    return out


def _soak_lines(soak: SoakResult, *, markdown: bool) -> list[Item]:
    w = _words(markdown)
    head = (
        f"soak {w(soak.shape)}: {soak.duration_s:,.0f} of {soak.duration_s_requested:,.0f} s, "
        f"{len(soak.intervals)} intervals of {soak.interval_s:g} s"
    )
    if not soak.complete:
        head += " (partial)"
    out = _heading(head, markdown)
    size = "" if soak.input_size_source == "tokenize" else " (estimated)"
    errors = " — errors: " + counts_text(soak.errors, w) if soak.errors else ""
    out.append(
        f"{soak.concurrency} concurrent, ~{soak.input_tokens} tokens in{size}, up to "
        f"{soak.output_tokens_max} out; {soak.completed}/{soak.requests} requests ok{errors}; "
        f"{_f(soak.output_tokens_per_s)} output tok/s; {soak.drain_requests} finished after "
        "the end (in the totals only)"
    )
    out.append(f"KV cache: {w(soak.kv_cache)}; GPU memory: {w(soak.gpu_memory)}")
    if markdown:
        out.append("")
    rows = [
        [
            "#",
            "s",
            "requests",
            "errors",
            "out tok/s",
            "TTFT p50",
            "TTFT p99",
            "ITL p50",
            "ITL p99",
            "KV %",
            "KV peak %",
            "preempt",
            "GPU MiB",
        ]
    ]
    for iv in soak.intervals:
        gpu = (
            "/".join("-" if v is None else f"{v:,.0f}" for v in iv.gpu_memory_used_mib)
            if iv.gpu_memory_used_mib
            else "-"
        )
        rows.append(
            [
                f"{iv.index + 1}{'*' if iv.partial else ''}",
                f"{iv.start_s:,.0f}-{iv.end_s:,.0f}",
                str(iv.requests),
                str(sum(iv.errors.values())),
                _f(iv.output_tokens_per_s),
                _f(iv.ttft_ms.p50, 2),
                _f(iv.ttft_ms.p99, 2),
                _f(iv.itl_ms.p50, 2),
                _f(iv.itl_ms.p99, 2),
                _f(iv.kv_cache_usage_pct, 2),
                _f(iv.kv_cache_usage_peak_pct, 2),
                _f(iv.preemptions, 0),
                gpu,
            ]
        )
    out += _table(rows, markdown=markdown, keys=2)
    if any(iv.partial for iv in soak.intervals):
        out.append("* partial interval: shown, not fitted")
    if markdown:
        out.append("")
    rows = [["trend", "per hour", f"{soak.per_trend_confidence:.2%} interval", "verdict"]]
    for t in soak.trends:
        per_hour = "-" if t.slope_per_hour is None else f"{t.slope_per_hour:+,.2f} {w(t.unit)}"
        ci = (
            "-"
            if t.ci_low_per_hour is None or t.ci_high_per_hour is None
            else f"[{t.ci_low_per_hour:+,.2f}, {t.ci_high_per_hour:+,.2f}]"
        )
        rows.append([w(t.quantity), per_hour, ci, w(t.verdict)])
    out += _table(rows, markdown=markdown)
    if markdown:
        out.append("")
    for t in soak.trends:
        out.append(f"{'finding' if t.verdict == 'growing' else 'trend'}: {w(t.reason)}")
    out.append(
        f"growing needs the interval above 0 and the rates of checks/soak.toml; the "
        f"intervals hold together at {soak.confidence:.0%}"
    )
    out += _notes(soak.notes, w)
    return out


def _drift_lines(doc: CompareDocument, *, markdown: bool) -> list[Item]:
    """The greedy prompts' log-probabilities compared (rules/drift.py), where measured."""
    w = _words(markdown)
    rows = [
        [
            "shape",
            "prompt",
            "tokens",
            "first divergent token",
            "mean |dlogprob|",
            "max |dlogprob|",
            "top-k KL mean",
            "top-k KL max",
            "numerics",
        ]
    ]
    for e in doc.equivalence:
        for d in e.logprobs:
            first = (
                "-"
                if d.first_divergent_token is None
                else f"{d.first_divergent_token} ({w(repr(d.token_before))} -> "
                f"{w(repr(d.token_after))})"
            )
            rows.append(
                [
                    w(e.shape),
                    w(d.prompt_id),
                    str(d.tokens),
                    first,
                    _g(d.mean_abs_logprob_diff),
                    _g(d.max_abs_logprob_diff),
                    _g(d.topk_kl_mean),
                    _g(d.topk_kl_max),
                    w(d.verdict),
                ]
            )
    if len(rows) == 1:
        return []
    out: list[Item] = ["", "greedy log-probabilities (nats; tolerance: checks/drift.toml):"]
    out += _table(rows, markdown=markdown, keys=2)
    out += [
        f"numerics {w(e.shape)} {w(d.prompt_id)}: {w(d.why)}"
        for e in doc.equivalence
        for d in e.logprobs
        if d.verdict == "beyond tolerance"
    ]
    out.append("")
    return out


def _compare(doc: CompareDocument, *, markdown: bool) -> list[Item]:
    w = _words(markdown)
    title = f"compare {w(doc.before)} -> {w(doc.after)}"
    out = _heading(title, markdown, "##")
    sc = doc.scorecard
    out.append("")
    card = [
        ["scorecard", "verdict"],
        ["latency", w(sc.latency)],
        ["throughput", w(sc.throughput)],
        ["equivalence", w(sc.equivalence)],
        ["numerics", w(sc.numerics)],
        ["errors", w(sc.errors)],
        ["overall", w(sc.overall)],
    ]
    out += _table(card, markdown=markdown)
    out += _rollup_reason_lines(sc, markdown=markdown)
    out.append("")
    rows = [
        [
            "shape",
            "metric",
            "before",
            "after",
            "change",
            f"{doc.per_comparison_confidence:.2%} CI",
            "verdict",
        ]
    ]
    rows += [_comparison_cells(r, w) for r in doc.comparisons]
    out += _table(rows, markdown=markdown, keys=2)
    out += _reason_lines(doc.comparisons, "", markdown=markdown)
    out.append("")
    if not isinstance(doc.sweep, msgspec.UnsetType):
        out += sweep_compare_lines(doc.sweep, markdown=markdown)
        out.append("")
    for e in doc.equivalence:
        rate = "-" if e.exact_match_rate is None else f"{e.exact_match_rate:.0%}"
        line = f"equivalence {w(e.shape)}: {rate} of {e.prompts} greedy prompts identical"
        if e.first_divergence:
            line += (
                " (first divergence: "
                + ", ".join(f"{w(k)} at char {v}" for k, v in sorted(e.first_divergence.items()))
                + ")"
            )
        if not isinstance(e.reason, msgspec.UnsetType):
            line += f": {w(e.verdict)}: {w(e.reason)}"
        out.append(line)
    out += _drift_lines(doc, markdown=markdown)
    for phase, errors in doc.errors.items():
        if errors:
            out.append(f"errors {w(phase)}: " + counts_text(errors, w))
    out.append(
        f"verdicts need the interval to exclude 0 and a change of at least "
        f"{doc.threshold_pct:g}%; the intervals hold together at {doc.confidence:.0%} "
        f"({doc.resamples} bootstrap resamples "
        f"{'by run, then by request' if max(doc.runs.values(), default=1) > 1 else 'by request'}, "
        f"seed {doc.seed})"
    )
    if doc.between_run_noise:
        out.append(f"between-run noise: {w(doc.between_run_noise)}")
    for sub in doc.subsamples:
        out.append(
            f"bootstrap {w(sub.shape)} {w(sub.run)}: a seeded subsample of {sub.requests:,} of "
            f"{sub.requests_of:,} requests, ITL from {sub.itl_gaps:,} of {sub.itl_gaps_of:,} "
            f"gaps (at most {doc.max_bootstrap_requests:,} requests and "
            f"{doc.max_bootstrap_gaps:,} gaps per run and shape; the values use every request)"
        )
    for regression in doc.regressions:
        out.append(f"regression: {w(regression)}")
    if not isinstance(doc.environment, msgspec.UnsetType):
        out += env_compare_lines(doc.environment, markdown=markdown)
    return out


def _environment_lines(env: Environment, *, markdown: bool) -> list[Item]:
    """A run's pinned environment, in a few lines (the document holds all of it)."""
    w = _words(markdown)
    server = [f"version {w(env.server_version or '-')}"]
    if env.config_hash:
        server.append(f"config hash {w(env.config_hash)}")
    if env.model is not None and env.model.root:
        server.append(f"model root {w(env.model.root)}")
    if env.server_config:
        server.append(f"{len(env.server_config)} configuration values")
    out: list[Item] = ["environment: server " + ", ".join(server)]
    if not isinstance(env.server_args, msgspec.UnsetType):
        args = env.server_args
        image = f", image {w(args.image)}" if args.image else ""
        out.append(
            f"environment: launched as {w(command_line(args.argv))} ({w(args.source)}{image})"
        )
    if env.server_unavailable:
        out.append("environment: not answered: " + "; ".join(w(u) for u in env.server_unavailable))
    host = env.host
    if host is None:
        out.append(f"environment: host not recorded ({w(env.host_missing or '-')})")
    else:
        parts = [f"GPUs {w(', '.join(host.gpus) or '-')}"]
        parts.append(f"driver {w(host.driver_version or '-')}")
        parts.append(f"CUDA {w(host.cuda_driver_version or '-')}")
        if host.container_image:
            parts.append(f"image {w(host.container_image)}")
        parts.append(f"{len(host.env)} environment variables")
        out.append(f"environment: host ({w(host.source)}) " + ", ".join(parts))
    return out


def env_compare_lines(env: EnvironmentComparison, *, markdown: bool) -> list[Item]:
    """What differs between two runs' environments, and the verdict's sentences."""
    w = _words(markdown)
    out: list[Item] = [f"environment: {w(env.verdict)}"]
    bullet = "- " if markdown else "  "
    for change in env.differences:
        out.append(f"{bullet}{w(change.key)}: {w(change.before)} -> {w(change.after)}")
    for note in env.notes:
        out.append(f"{'warning' if env.verdict == 'confounded' else 'note'}: {w(note)}")
    return out


# What a ladder's steps table shows of a step's environment differences.
_CHANGES_SHOWN = 3


def what_changed(doc: CompareDocument) -> str:
    """A ladder step's cell of what changed (already sanitised values, placed as text)."""
    return _what_changed(doc, False)


def _what_changed(doc: CompareDocument, markdown: bool) -> str:
    w = _words(markdown)
    env = doc.environment
    if isinstance(env, msgspec.UnsetType):
        return "unknown: neither run pinned its environment"
    if env.verdict == "not pinned":
        return "unknown: a run pinned no environment"
    if not env.differences:
        return "nothing recorded differs"
    shown = [f"{w(c.key)}: {w(c.before)} -> {w(c.after)}" for c in env.differences]
    text = "; ".join(shown[:_CHANGES_SHOWN])
    if len(shown) > _CHANGES_SHOWN:
        text += f"; and {len(shown) - _CHANGES_SHOWN} more"
    return ("CONFOUNDED: " if env.verdict == "confounded" else "") + text


def _ladder(doc: LadderDocument, *, markdown: bool) -> list[Item]:
    """A ladder: its steps with what changed at each, then one table of every metric's
    change at each step and first to last, with intervals and verdicts."""
    w = _words(markdown)
    n = len(doc.runs)
    title = "ladder " + " -> ".join(w(r) for r in doc.runs)
    out = [*_heading(title, markdown, "##"), ""]
    labelled = [(str(k), step) for k, step in enumerate(doc.steps, start=1)]
    labelled.append((f"1-{n}", doc.cumulative))
    rows = [["step", "from", "to", "overall", "what changed"]]
    for label, step in labelled:
        rows.append(
            [
                label,
                w(step.before),
                w(step.after),
                w(step.scorecard.overall),
                _what_changed(step, markdown),
            ]
        )
    out += _table(rows, markdown=markdown, left=len(rows[0]), keys=1)
    out.append("")
    rows = [["shape", "metric", "step", "before", "after", "change", "CI", "verdict"]]
    order: list[tuple[str, str]] = []
    by_step: list[dict[tuple[str, str], Comparison]] = []
    for _label, step in labelled:
        found = {(r.shape, r.metric): r for r in step.comparisons}
        by_step.append(found)
        for key in found:
            if key not in order:
                order.append(key)
    for key in order:
        for (label, _step), found in zip(labelled, by_step, strict=True):
            r = found.get(key)
            if r is None:
                rows.append([w(key[0]), w(key[1]), label, "-", "-", "-", "-", "not compared"])
                continue
            rows.append(_comparison_cells(r, w, label))
    out += _table(rows, markdown=markdown, keys=3)
    for label, step in labelled:
        out += _reason_lines(step.comparisons, f", step {label}", markdown=markdown)
    out.append("")
    for label, step in labelled:
        env = step.environment
        if isinstance(env, msgspec.UnsetType):
            continue
        for note in env.notes:
            kind = "warning" if env.verdict == "confounded" else "note"
            out.append(f"{kind}: step {label}: {w(note)}")
    out.append(
        f"each step is `bench --compare` of its two runs; verdicts need the interval to "
        f"exclude 0 and a change of at least {doc.cumulative.threshold_pct:g}%; every interval "
        f"of the table holds together at {doc.confidence:.0%} (each of the {n} compares at "
        f"{doc.per_compare_confidence:.2%}, then Bonferroni over its rows)"
    )
    for label, step in labelled:
        if step.between_run_noise:
            out.append(f"between-run noise, step {label}: {w(step.between_run_noise)}")
    for regression in doc.regressions:
        out.append(f"regression: {w(regression)}")
    return out


def _rollup_reason_lines(sc: Scorecard, *, markdown: bool) -> list[Item]:
    """A line under the scorecard for each "not comparable" roll-up: why (issue 40). In
    Markdown a list after a blank line, as :func:`_reason_lines`."""
    if isinstance(sc.reasons, msgspec.UnsetType):
        return []
    w = _words(markdown)
    lines: list[Item] = [
        f"{'- ' if markdown else ''}{w(label)}: {w(reason)}"
        for label, reason in rollup_reasons(sc, sc.reasons)
    ]
    return ([""] if markdown and lines else []) + lines


def _reason_lines(rows: Sequence[Comparison], where: str, *, markdown: bool) -> list[Item]:
    """A line under the table for each reason of a shape (a "not comparable" row's): what
    was found, with the metrics it holds for (issue 40: such rows gave none). In Markdown a
    list after a blank line: a line right under a GFM table is one more row of it."""
    w = _words(markdown)
    lines: list[Item] = [
        f"{'- ' if markdown else ''}{w(verdict)}{where}: {w(shape)} "
        f"{', '.join(w(m) for m in metrics)}: {w(reason)}"
        for (shape, verdict, reason), metrics in group_reasons(rows).items()
    ]
    return ([""] if markdown and lines else []) + lines


def _comparison_cells(
    r: Comparison, w: Callable[[str], str], label: str | None = None
) -> list[str]:
    """A compare table's row of ``r``: shape, metric, the ladder's step ``label`` where
    given, before, after, change, interval and verdict."""
    change, ci = change_cells(r)
    verdict = w(r.verdict)
    if r.verdict == "within the noise floor" and r.noise_floor_pct is not None:
        verdict += f" ({r.noise_floor_pct:.1f}%)"
    step = [] if label is None else [label]
    return [w(r.shape), w(r.metric), *step, _f(r.before, 2), _f(r.after, 2), change, ci, verdict]
