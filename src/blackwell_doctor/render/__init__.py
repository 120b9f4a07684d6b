"""Report renderers: one module per format, the format list from one enum.

Renderers only read a :class:`~blackwell_doctor.report.check.Report` and return text; nothing here
prints. Each renderer module is imported only when its format is asked for, so
``--format json`` never pays for importing ``rich``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from blackwell_doctor.render.formats import Format, ProbeFormat, ScanLogsFormat

if TYPE_CHECKING:  # the CLI declares --format from Format without loading the report model
    from blackwell_doctor.render.timing import RunTiming
    from blackwell_doctor.report.check import PresetReport, Report, Section


def render(
    report: Report,
    fmt: Format,
    *,
    color: bool,
    verbose: bool = False,
    width: int = 100,
    timing: RunTiming | None = None,
) -> str:
    """``report`` as ``fmt`` text. ``color``, ``verbose`` and ``width`` matter to "rich" only:
    the machine formats are complete and identical whatever the terminal. ``timing`` (when
    the run started, how long it took) matters to "prometheus" only.

    Strings in a report come from other hosts (facts files, logs, file names): each format
    gets one sanitising step here, over the whole document, before its renderer sees it
    (terminal, Markdown, XML and Prometheus: unsafe characters shown escaped; JSON: lone
    surrogates). The renderers then only escape what their syntax needs where a value is
    placed. A preset's report (``probe``, ``scan-logs``) gets its detail sections (tile
    table, transfer matrix, log hits) built from the sanitised report, under the results."""
    from blackwell_doctor.render.common import json_safe, sanitize, scrub

    report = scrub(report, json_safe if fmt is Format.JSON else sanitize)
    match fmt:
        case Format.RICH:
            from blackwell_doctor.render.text import render_text

            return render_text(
                report, color=color, verbose=verbose, width=width, details=_details(report)
            )
        case Format.JSON:
            from blackwell_doctor.render.json_out import render_json

            return render_json(report)
        case Format.JUNIT:
            from blackwell_doctor.render.junit import render_junit

            return render_junit(report)
        case Format.MARKDOWN:
            from blackwell_doctor.render.markdown import render_markdown

            return render_markdown(report, _details(report))
        case Format.PROMETHEUS:
            from blackwell_doctor.render.prometheus import render_prometheus

            return render_prometheus(report, timing)
        case Format.NFD:
            from blackwell_doctor.render.nfd import render_nfd

            return render_nfd(report, timing)
        case _:
            assert_never(fmt)


def render_scan_logs(
    report: PresetReport, fmt: ScanLogsFormat, *, color: bool, width: int = 100
) -> str:
    """``scan-logs``'s report (a preset of the logs checks) in ``fmt``, through
    :func:`render` and so its sanitising step."""
    match fmt:
        case ScanLogsFormat.RICH:
            return render(report, Format.RICH, color=color, width=width)
        case ScanLogsFormat.JSON:
            return render(report, Format.JSON, color=False)
        case _:
            assert_never(fmt)


def render_probe(report: Report, fmt: ProbeFormat, *, color: bool, width: int = 100) -> str:
    """``probe``'s report (a preset of the probe checks, with its tile table or transfer
    matrix) in ``fmt``, through :func:`render` and so its sanitising step."""
    match fmt:
        case ProbeFormat.RICH:
            return render(report, Format.RICH, color=color, width=width)
        case ProbeFormat.JSON:
            return render(report, Format.JSON, color=False)
        case _:
            assert_never(fmt)


def _details(report: Report) -> list[Section]:
    """The detail sections of a preset's report (``probe``, ``scan-logs``), built from the
    already sanitised report; a ``check`` report has none."""
    from blackwell_doctor.report.check import PresetReport

    if not isinstance(report, PresetReport):
        return []
    from blackwell_doctor.render.details import sections

    return sections(report)


__all__ = ["Format", "render", "render_probe", "render_scan_logs"]
