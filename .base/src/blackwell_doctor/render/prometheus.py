"""``--format prometheus``: the report as node_exporter's textfile collector reads it.

Written with ``prometheus_client``'s own exposition code (text format 0.0.4), not by hand:
label values from facts files (GPU names, summaries) are escaped the way Prometheus' parser
expects, and the HELP/TYPE lines are what the library emits for every other exporter.

Metric names and labels follow https://prometheus.io/docs/practices/naming/: a base unit in
the name (``_seconds``), no ``_total`` on gauges, an enum as one series per state with the
value 1 for the current state and 0 for the others (like the DCGM exporter's and the
Kubernetes state metrics' ``status`` labels), so ``blackwell_doctor_check_status{status="fail"}
== 1`` alerts on any failing check. Save it with ``-o DIR/blackwell_doctor.prom``; the file
is written to a temporary name in DIR and renamed, so node_exporter never reads half of it.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import get_args

from prometheus_client.core import GaugeMetricFamily, Metric
from prometheus_client.exposition import generate_latest
from prometheus_client.registry import Collector, CollectorRegistry

from blackwell_doctor.render.common import sanitize
from blackwell_doctor.render.timing import RunTiming
from blackwell_doctor.report.check import NodeVerdictName, Report
from blackwell_doctor.report.results import Status

PREFIX = "blackwell_doctor"


def timing_metrics(prefix: str, timing: RunTiming | None) -> list[Metric]:
    """The last-run timestamp and duration gauges (none when ``timing`` is None: goldens)."""
    if timing is None:
        return []
    return [
        GaugeMetricFamily(
            f"{prefix}_last_run_timestamp_seconds",
            "When the last run started, in seconds since the Unix epoch.",
            value=timing.started_at,
        ),
        GaugeMetricFamily(
            f"{prefix}_last_run_duration_seconds",
            "How long the last run took to collect and judge the facts, in seconds.",
            value=timing.duration_s,
        ),
    ]


def exposition(metrics: list[Metric]) -> str:
    """``metrics`` in the text exposition format."""

    class _Fixed(Collector):
        def collect(self) -> Iterator[Metric]:
            yield from metrics

    registry = CollectorRegistry(auto_describe=False)
    registry.register(_Fixed())
    return generate_latest(registry).decode("utf-8")


def report_metrics(report: Report) -> list[Metric]:
    status = GaugeMetricFamily(
        f"{PREFIX}_check_status",
        "Status of each check: 1 for the status it has, 0 for the others.",
        labels=["check", "family", "severity", "status"],
    )
    for result in report.results:
        for value in Status:
            status.add_metric(
                [result.id, result.family, result.severity.value, value.value],
                1.0 if result.status is value else 0.0,
            )
    counts = GaugeMetricFamily(
        f"{PREFIX}_checks",
        "How many checks ended with each status.",
        labels=["status"],
    )
    s = report.summary
    for value, n in (
        (Status.PASS, s.pass_),
        (Status.WARN, s.warn),
        (Status.FAIL, s.fail),
        (Status.SKIP, s.skip),
        (Status.ERROR, s.error),
    ):
        counts.add_metric([value.value], float(n))
    exit_code = GaugeMetricFamily(
        f"{PREFIX}_exit_code",
        "The exit code of the run: 0 nothing at or above the gate, 1 findings, "
        "3 not evaluated under --strict.",
        value=float(report.exit_code),
    )
    info = GaugeMetricFamily(
        f"{PREFIX}_info",
        "The tool version, the gate, and the driver the facts report (value always 1).",
        labels=["version", "fail_on", "driver_version"],
    )
    # The driver string comes from the facts file: no control characters into a terminal.
    driver = sanitize(report.host.driver_version or "")
    info.add_metric([report.tool.version, report.fail_on, driver], 1.0)
    metrics: list[Metric] = [status, counts, exit_code, info]
    if report.node is not None:
        node = GaugeMetricFamily(
            f"{PREFIX}_node_verdict",
            "The node verdict: 1 for the one it has, 0 for the others (healthy < degraded < "
            "needs-reset < needs-reboot < needs-service).",
            labels=["verdict"],
        )
        for value in get_args(NodeVerdictName):
            node.add_metric([value], 1.0 if report.node.verdict == value else 0.0)
        metrics.append(node)
    return metrics


def render_prometheus(report: Report, timing: RunTiming | None = None) -> str:
    return exposition([*report_metrics(report), *timing_metrics(PREFIX, timing)])
