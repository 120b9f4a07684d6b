"""The fleet view in each format: rich (a terminal), markdown (a ticket), json (machines;
schema: schemas/fleet.schema.json), prometheus (a central textfile) and html (one page with
its groups drawn: render.fleet_html). Text from facts
files (hostnames, summaries) is data: sanitised, never markup."""

from __future__ import annotations

import itertools
from collections.abc import Iterable, Iterator, Sequence
from typing import TYPE_CHECKING, TypeVar, assert_never

import msgspec

from blackwell_doctor.facts import regexcache
from blackwell_doctor.render.common import (
    FINDING_STATUSES,
    NOT_EVALUATED,
    json_document,
    json_safe,
    sanitize,
    sanitize_line,
    scrub,
    title_as_shown,
)
from blackwell_doctor.render.formats import FleetFormat
from blackwell_doctor.report.check import gate_threshold
from blackwell_doctor.report.fleet import FleetGroup, FleetNode, FleetReport
from blackwell_doctor.report.results import Status

if TYPE_CHECKING:
    from prometheus_client.core import Metric

    from blackwell_doctor.render.timing import RunTiming


# How many node names the terminal view lists per group before "+N more" (all with -v).
NODES_SHOWN = 20

_WORD = {Status.FAIL: "FAIL", Status.WARN: "WARN", Status.ERROR: NOT_EVALUATED.upper()}
_STYLE = {Status.FAIL: "bold red", Status.WARN: "yellow", Status.ERROR: "magenta"}

_T = TypeVar("_T")

_NUMBERED = regexcache.lazy(r"^(.*?)(\d+)$")


def hostlist(names: Sequence[str]) -> list[str]:
    """Names in Slurm hostlist notation where they are numbered alike: ``gpu[001-003,007]``
    for gpu001, gpu002, gpu003, gpu007 (``scontrol update NodeName=`` takes it as is).
    Names that are not prefix+digits stay as they are. Order: first appearance of a prefix."""
    runs: dict[tuple[str, int], list[int]] = {}
    out: list[tuple[str, int] | str] = []
    for name in names:
        m = _NUMBERED().match(name)
        if m is None or any(c in name for c in "[],"):
            out.append(name)
            continue
        key = (m.group(1), len(m.group(2)))
        if key not in runs:
            runs[key] = []
            out.append(key)
        runs[key].append(int(m.group(2)))
    result: list[str] = []
    for item in out:
        if isinstance(item, str):
            result.append(item)
            continue
        prefix, width = item
        numbers = sorted(set(runs[item]))
        if len(numbers) == 1:
            result.append(f"{prefix}{numbers[0]:0{width}d}")
            continue
        spans: list[str] = []
        start = prev = numbers[0]
        for n in [*numbers[1:], None]:
            if n is not None and n == prev + 1:
                prev = n
                continue
            spans.append(
                f"{start:0{width}d}" if start == prev else f"{start:0{width}d}-{prev:0{width}d}"
            )
            if n is not None:
                start = prev = n
        result.append(f"{prefix}[{','.join(spans)}]")
    return result


def _nodes_phrase(n: int) -> str:
    return f"{n} node" if n == 1 else f"{n} nodes"


def headline(report: FleetReport) -> str:
    s = report.summary
    parts = [f"{_nodes_phrase(s.nodes)} judged"]
    if s.unjudged:
        parts.append(f"{s.unjudged} not judged")
    worst = f"{s.worst_fail} fail, {s.worst_warn} warn, {s.worst_ok} ok (worst status)"
    verdicts = [f"{s.findings} at or above the gate"]
    if s.not_evaluated:
        verdicts.append(f"{s.not_evaluated} not fully evaluated")
    gate = gate_threshold(report.fail_on, report.strict)
    return f"{', '.join(parts)}: {worst}; {', '.join(verdicts)} (exit {report.exit_code}, {gate})"


def _group_line(g: FleetGroup) -> str:
    return f"{_nodes_phrase(len(g.nodes))}: {g.id} ({g.severity.value}) - {sanitize(g.summary)}"


def render_rich(
    report: FleetReport, *, color: bool, verbose: bool, width: int | None = None
) -> str:
    """The terminal's view, fitted to ``width`` (None: one line per line, as the HTML page
    shows it)."""
    from blackwell_doctor.render.terminal import Item, Line, command, write_plain, write_styled

    def line(text: str = "", style: str = "", indent: int = 0) -> Line:
        return Line(indent, ((text, style),), hang=indent + 4 if indent else 6)

    out: list[Item] = [line(f"blackwell-doctor fleet: {headline(report)}", "bold")]
    for g in report.groups:
        out.append(line())
        out.append(line(f"{_WORD[g.status]}  {_group_line(g)}", _STYLE[g.status]))
        out.append(line(sanitize(title_as_shown(g.status, g.title)), indent=6))
        if g.remedy is not None:
            if g.remedy.summary:
                out.append(line(f"fix: {sanitize(g.remedy.summary)}", indent=6))
            out += [command(8, sanitize(cmd)) for cmd in g.remedy.commands]
        names = hostlist(g.nodes)
        shown = names if verbose else names[:NODES_SHOWN]
        more = len(names) - len(shown)
        tail = f" (+{more} more; all with --verbose or --format json)" if more else ""
        out.append(line(f"nodes: {sanitize(', '.join(shown))}{tail}", indent=6))
    if report.unjudged:
        out.append(line())
        out.append(line(f"Not judged ({len(report.unjudged)}):", "bold"))
        out += [
            line(f"{sanitize(u.source)}: {sanitize(u.reason)}", indent=2) for u in report.unjudged
        ]
    if not report.groups and report.summary.nodes:
        out.append(line())
        out.append(line("No findings on any node.", "green"))
    return write_styled(out, width) if color else write_plain(out, width)


def render_markdown(report: FleetReport) -> str:
    from blackwell_doctor.render.markdown import code, prose

    out = ["# blackwell-doctor fleet", "", prose(headline(report)), ""]
    for g in report.groups:
        out.append(f"## {_WORD[g.status]}: {code(g.id)} on {_nodes_phrase(len(g.nodes))}")
        out.append("")
        out.append(
            f"{prose(title_as_shown(g.status, g.title))} ({g.severity.value}); "
            f"found: {prose(g.summary)}"
            if g.status in FINDING_STATUSES
            else f"{prose(g.title)} ({g.severity.value}): {prose(g.summary)}"
        )
        out.append("")
        if g.remedy is not None:
            if g.remedy.summary:
                out.append(f"Fix: {prose(g.remedy.summary)}")
                out.append("")
            for cmd in g.remedy.commands:
                out.append(f"- {code(cmd)}")
            if g.remedy.commands:
                out.append("")
        out.append(f"Nodes: {', '.join(code(n) for n in hostlist(g.nodes))}")
        out.append("")
    if report.unjudged:
        out.append(f"## Not judged ({len(report.unjudged)})")
        out.append("")
        out.extend(f"- {code(u.source)}: {prose(u.reason)}" for u in report.unjudged)
        out.append("")
    return "\n".join(out)


def render_json(report: FleetReport) -> str:
    return json_document(report)


# Nodes formatted per piece of the streamed JSON document (:func:`json_pieces`).
NODES_PER_PIECE = 256


def json_pieces(report: FleetReport, nodes: Iterable[FleetNode] | None = None) -> Iterator[str]:
    """``render_fleet(report, FleetFormat.JSON)`` in pieces that join to the same text, with
    ``nodes`` (in order; default: the report's) as its nodes: the document without its
    nodes, then the nodes :data:`NODES_PER_PIECE` at a time, each sanitised and formatted as
    :func:`json_document` does it (two spaces an indent level: the nodes are at the second,
    and a JSON string holds no raw newline, so each node's lines are indented by four). A
    fleet of 30,000 nodes is ~40 MB of JSON: whole, it was encoded, formatted and decoded
    at once (four copies); ``fleet --format json`` writes these pieces as they come."""
    head = json_document(scrub(msgspec.structs.replace(report, groups=[], nodes=[]), json_safe))
    start, _, rest = head.partition('"groups": []')
    middle, _, end = rest.rpartition('"nodes": []')
    yield start
    yield from _listed("groups", report.groups)
    yield middle
    yield from _listed("nodes", report.nodes if nodes is None else nodes)
    yield end


def _listed(name: str, items: Iterable[msgspec.Struct]) -> Iterator[str]:
    """``"NAME": [...]`` as :func:`json_document` writes a list at the document's first
    level, :data:`NODES_PER_PIECE` items a piece."""
    first = True
    for batch in _batched(items, NODES_PER_PIECE):
        text = json_document(scrub(batch, json_safe))  # "[\n  {...},\n  {...}\n]\n"
        inner = text[2:-3]  # the items at the first level, without the brackets
        yield (f'"{name}": [\n' if first else ",\n") + "  " + inner.replace("\n", "\n  ")
        first = False
    yield f'"{name}": []' if first else "\n  ]"


def _batched(items: Iterable[_T], size: int) -> Iterator[list[_T]]:
    it = iter(items)
    while batch := list(itertools.islice(it, size)):
        yield batch


def render_prometheus(report: FleetReport, timing: RunTiming | None = None) -> str:
    from prometheus_client.core import GaugeMetricFamily

    from blackwell_doctor.render.prometheus import PREFIX, exposition, timing_metrics

    prefix = f"{PREFIX}_fleet"
    s = report.summary
    nodes = GaugeMetricFamily(
        f"{prefix}_nodes",
        "Nodes by verdict: ok, findings, not_evaluated (--strict), unjudged (unreadable facts).",
        labels=["verdict"],
    )
    for verdict, n in (
        ("ok", s.ok),
        ("findings", s.findings),
        ("not_evaluated", s.not_evaluated),
        ("unjudged", s.unjudged),
    ):
        nodes.add_metric([verdict], float(n))
    per_check: dict[tuple[str, str, str, str], int] = {}
    for g in report.groups:
        key = (g.id, g.family, g.severity.value, g.status.value)
        per_check[key] = per_check.get(key, 0) + len(g.nodes)
    checks = GaugeMetricFamily(
        f"{prefix}_check_nodes",
        "Nodes on which a check ended with this status (warn, fail, error).",
        labels=["check", "family", "severity", "status"],
    )
    for key, n in per_check.items():
        checks.add_metric(list(key), float(n))
    node_exit = GaugeMetricFamily(
        f"{prefix}_node_exit_code",
        "What `check --facts` exits with on each node's facts.",
        labels=["node"],
    )
    for node in report.nodes:
        node_exit.add_metric([sanitize(node.name)], float(node.exit_code))
    exit_code = GaugeMetricFamily(
        f"{prefix}_exit_code", "The fleet run's exit code.", value=float(report.exit_code)
    )
    return exposition(
        [
            nodes,
            checks,
            node_exit,
            exit_code,
            *bench_metrics(report),
            *timing_metrics(prefix, timing),
        ]
    )


def bench_metrics(report: FleetReport) -> list[Metric]:
    """The bench figures of the nodes whose facts carry a run (collect --bench), one
    series per node and shape; none when no node has one. Base units: seconds, tokens/s."""
    from prometheus_client.core import GaugeMetricFamily

    from blackwell_doctor.render.prometheus import PREFIX

    prefix = f"{PREFIX}_fleet_bench"
    labels = ["node", "model", "shape", "concurrency"]
    rate = GaugeMetricFamily(
        f"{prefix}_output_tokens_per_second",
        "Output tokens/s of the node's last bench run per shape (reasoning included).",
        labels=labels,
    )
    answer = GaugeMetricFamily(
        f"{prefix}_answer_tokens_per_second",
        "Answer tokens/s (reasoning tokens left out) of the node's bench run per shape.",
        labels=labels,
    )
    ttft = GaugeMetricFamily(
        f"{prefix}_ttft_seconds",
        "Time to first token of the node's bench run per shape, at the quantile.",
        labels=[*labels, "quantile"],
    )
    itl = GaugeMetricFamily(
        f"{prefix}_itl_seconds",
        "Inter-token latency of the node's bench run per shape, at the quantile.",
        labels=[*labels, "quantile"],
    )
    requests = GaugeMetricFamily(
        f"{prefix}_requests", "Measured requests of the node's bench run per shape.", labels=labels
    )
    failed = GaugeMetricFamily(
        f"{prefix}_failed_requests",
        "Requests that failed in the node's bench run per shape.",
        labels=labels,
    )
    started = GaugeMetricFamily(
        f"{prefix}_started_timestamp_seconds",
        "When the node's bench run started (Unix time).",
        labels=["node", "model"],
    )
    out: list[Metric] = [rate, answer, ttft, itl, requests, failed, started]
    seen = False
    for node in report.nodes:
        bench = node.bench
        if bench is None:
            continue
        seen = True
        model = sanitize(bench.model or "")
        name = sanitize(node.name)
        when = _timestamp(bench.started_at)
        if when is not None:
            started.add_metric([name, model], when)
        for s in bench.shapes:
            key = [name, model, sanitize(s.name), str(s.concurrency)]
            requests.add_metric(key, float(s.requests))
            failed.add_metric(key, float(s.failed))
            if s.output_tokens_per_s is not None:
                rate.add_metric(key, s.output_tokens_per_s)
            if s.answer_tokens_per_s is not None:
                answer.add_metric(key, s.answer_tokens_per_s)
            for family, quantiles in (
                (ttft, (("0.5", s.ttft_p50_ms), ("0.99", s.ttft_p99_ms))),
                (itl, (("0.5", s.itl_p50_ms), ("0.99", s.itl_p99_ms))),
            ):
                for q, ms in quantiles:
                    if ms is not None:
                        family.add_metric([*key, q], ms / 1000.0)
    return out if seen else []


def _timestamp(iso: str) -> float | None:
    from datetime import datetime

    try:
        return datetime.fromisoformat(iso).timestamp()
    except ValueError:
        return None


def render_fleet(
    report: FleetReport,
    fmt: FleetFormat,
    *,
    color: bool = False,
    verbose: bool = False,
    timing: RunTiming | None = None,
    width: int | None = None,
) -> str:
    """``report`` in ``fmt``, through the one sanitising step first: file names and every
    string of the facts files come from other hosts (a newline in a file name must not
    forge a line; bytes that are not UTF-8, kept by surrogateescape, are shown ``\\xff`` in
    every format, JSON included). ``width``: the terminal's, which the rich view is fitted
    to (None: not fitted)."""
    report = scrub(report, json_safe if fmt is FleetFormat.JSON else sanitize_line)
    match fmt:
        case FleetFormat.RICH:
            return render_rich(report, color=color, verbose=verbose, width=width)
        case FleetFormat.MARKDOWN:
            return render_markdown(report)
        case FleetFormat.JSON:
            return render_json(report)
        case FleetFormat.PROMETHEUS:
            return render_prometheus(report, timing)
        case FleetFormat.HTML:
            from blackwell_doctor.render.fleet_html import render_fleet_html

            return render_fleet_html(
                report,
                text=render_rich(report, color=False, verbose=True),
                headline=headline(report),
                node_lists=[", ".join(hostlist(g.nodes)) for g in report.groups],
            )
        case _:
            assert_never(fmt)
