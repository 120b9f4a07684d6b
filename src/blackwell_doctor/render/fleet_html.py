"""The fleet view as one HTML page (``fleet -f html``): the nodes by verdict and the fleet's
groups (one per check and status, worst first) as bar charts, each with its table, and the
bench figures of nodes whose facts carry a run. The report arrives through the fleet's one
sanitising step (:func:`render.fleet.render_fleet`); every value is placed with ``esc``."""

from __future__ import annotations

from blackwell_doctor.render.common import NOT_EVALUATED
from blackwell_doctor.render.html import Table, figure, heading, page, paragraph, text_report
from blackwell_doctor.render.svg import BAD, GOOD, NEUTRAL, PALETTE, Bar, bars
from blackwell_doctor.report.fleet import FleetReport
from blackwell_doctor.report.results import Status

_WORD = {Status.FAIL: "FAIL", Status.WARN: "WARN", Status.ERROR: NOT_EVALUATED.upper()}
_COLOUR = {Status.FAIL: BAD, Status.WARN: PALETTE[4], Status.ERROR: PALETTE[3]}


def render_fleet_html(
    report: FleetReport, *, text: str, headline: str, node_lists: list[str]
) -> str:
    """``report`` as a page: ``text`` is its terminal report (verbose), ``headline`` its
    one-line summary and ``node_lists`` each group's nodes in hostlist notation (from
    render.fleet, which imports this module, not the other way round)."""
    s = report.summary
    body = [heading(2, "Nodes")]
    verdicts = [
        ("ok", s.ok, GOOD),
        ("with findings", s.findings, BAD),
        ("not fully evaluated", s.not_evaluated, PALETTE[3]),
        ("not judged", s.unjudged, NEUTRAL),
    ]
    body.append(
        figure(
            "fleet-verdicts",
            bars(
                [Bar(k, float(n), c, f"{n} {k}") for k, n, c in verdicts],
                x_label="nodes",
                title="nodes by verdict",
            ),
            f"Nodes by verdict under the gate ({report.fail_on}"
            + (", strict" if report.strict else "")
            + "): ok exits 0, with findings 1, not fully evaluated 3 (--strict); not judged: "
            "facts that could not be read.",
            "",
            Table(["verdict", "nodes"], [[k, str(n)] for k, n, _ in verdicts]),
        )
    )
    body.append(heading(2, "Groups"))
    if report.groups:
        rows = [
            [
                _WORD[g.status],
                g.id,
                g.severity.value,
                str(len(g.nodes)),
                g.title,
                g.summary,
                "" if g.remedy is None else g.remedy.summary,
                nodes,
            ]
            for g, nodes in zip(report.groups, node_lists, strict=True)
        ]
        chart = bars(
            [
                Bar(
                    f"{_WORD[g.status]} {g.id}",
                    float(len(g.nodes)),
                    _COLOUR[g.status],
                    f"{g.id} ({g.severity.value}) on {len(g.nodes)} nodes: {g.summary}",
                )
                for g in report.groups
            ],
            x_label="nodes",
            title="the fleet's groups",
        )
        body.append(
            figure(
                "fleet-groups",
                chart,
                "The fleet's groups, worst first: one per check and status, with the nodes it "
                "holds (vermillion fail, orange warn, purple not evaluated).",
                "",
                Table(
                    [
                        "status",
                        "check",
                        "severity",
                        "nodes",
                        "expected",
                        "found",
                        "fix",
                        "node names",
                    ],
                    rows,
                    text_columns=frozenset({0, 1, 2, 4, 5, 6, 7}),
                ),
            )
        )
    else:
        body.append(paragraph("No findings on any node." if s.nodes else "No node judged.", "note"))
    benched = [(n, n.bench) for n in report.nodes if n.bench is not None]
    if benched:
        body.append(heading(2, "Bench runs"))
        items = [
            (node.name, bench.model or "-", shape)
            for node, bench in benched
            for shape in bench.shapes
        ]
        shown = [(n, m, sh) for n, m, sh in items if sh.output_tokens_per_s is not None]
        if shown:
            chart = bars(
                [
                    Bar(
                        f"{n} · {sh.name} ×{sh.concurrency}",
                        sh.output_tokens_per_s or 0.0,
                        PALETTE[0],
                        f"{n} ({m}) {sh.name} at concurrency {sh.concurrency}",
                    )
                    for n, m, sh in shown
                ],
                x_label="output tokens per second",
                title="bench throughput per node",
            )
        else:
            chart = ""
        table = Table(
            [
                "node",
                "model",
                "shape",
                "concurrency",
                "requests",
                "failed",
                "output tok/s",
                "answer tok/s",
                "TTFT p50 ms",
                "ITL p50 ms",
            ],
            [
                [
                    n,
                    m,
                    sh.name,
                    str(sh.concurrency),
                    str(sh.requests),
                    str(sh.failed),
                    _f(sh.output_tokens_per_s),
                    _f(sh.answer_tokens_per_s),
                    _f(sh.ttft_p50_ms),
                    _f(sh.itl_p50_ms),
                ]
                for n, m, sh in items
            ],
            text_columns=frozenset({0, 1, 2}),
        )
        if chart:
            body.append(
                figure(
                    "fleet-bench",
                    chart,
                    "Output tokens/s of each node's last bench run (collect --bench), per shape.",
                    "",
                    table,
                )
            )
        else:
            body.append(table.markup())
    if report.unjudged:
        body.append(heading(2, f"Not judged ({len(report.unjudged)})"))
        body.append(
            Table(
                ["facts", "why"],
                [[u.source, u.reason] for u in report.unjudged],
                text_columns=frozenset({0, 1}),
            ).markup()
        )
    body.append(text_report(text, "The terminal report of this fleet"))
    subtitle = f"{report.tool.name} {report.tool.version} · {headline}"
    return page("blackwell-doctor fleet", body, subtitle=subtitle)


def _f(value: float | None) -> str:
    return "-" if value is None else f"{value:,.1f}"
