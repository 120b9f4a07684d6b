"""Report renderers: one module per format, the format list from one enum.

Renderers only read a :class:`~blackwell_doctor.report.check.Report` (and a preset's detail
sections, as the rules laid them out) and return text; nothing here prints or judges. Each
renderer module is imported only when its format is asked for, so ``--format json`` never
pays for importing ``rich``.
"""

from __future__ import annotations

from typing import TYPE_CHECKING, assert_never

from blackwell_doctor.render.formats import Format, ProbeFormat, ScanLogsFormat

if TYPE_CHECKING:  # the CLI declares --format from Format without loading the report model
    from blackwell_doctor.render.timing import RunTiming
    from blackwell_doctor.report.check import PresetDocument, PresetReport, Report


def render(
    document: Report | PresetDocument[PresetReport],
    fmt: Format,
    *,
    color: bool,
    verbose: bool = False,
    width: int = 100,
    timing: RunTiming | None = None,
) -> str:
    """``document`` as ``fmt`` text. ``color``, ``verbose`` and ``width`` matter to "rich" only:
    the machine formats are complete and identical whatever the terminal. ``timing`` (when
    the run started, how long it took) matters to "prometheus" only.

    Strings in a report come from other hosts (facts files, logs, file names): each format
    gets one sanitising step here, over the whole document, before its renderer sees it
    (terminal, Markdown, XML and Prometheus: unsafe characters shown escaped; JSON: lone
    surrogates). The renderers then only escape what their syntax needs where a value is
    placed. A preset's document (``probe``, ``scan-logs``) is its report and the detail
    sections the rules built with it (tile table, transfer matrix, log hits): the JSON is the
    report alone; the text formats place the sections, sanitised with it, under the
    results."""
    from blackwell_doctor.render.common import json_safe, sanitize, scrub
    from blackwell_doctor.report.check import PresetDocument

    report: Report = document.report if isinstance(document, PresetDocument) else document
    sections = document.sections if isinstance(document, PresetDocument) else []
    if fmt is Format.JSON:
        report = scrub(report, json_safe)
    else:
        report, sections = scrub(report, sanitize), scrub(sections, sanitize)
    match fmt:
        case Format.RICH:
            from blackwell_doctor.render.text import render_text

            return render_text(report, color=color, verbose=verbose, width=width, details=sections)
        case Format.JSON:
            from blackwell_doctor.render.json_out import render_json

            return render_json(report)
        case Format.JUNIT:
            from blackwell_doctor.render.junit import render_junit

            return render_junit(report)
        case Format.MARKDOWN:
            from blackwell_doctor.render.markdown import render_markdown

            return render_markdown(report, sections)
        case Format.PROMETHEUS:
            from blackwell_doctor.render.prometheus import render_prometheus

            return render_prometheus(report, timing)
        case Format.NFD:
            from blackwell_doctor.render.nfd import render_nfd

            return render_nfd(report, timing)
        case _:
            assert_never(fmt)


def render_preset(
    document: PresetDocument[PresetReport],
    fmt: ScanLogsFormat | ProbeFormat,
    *,
    color: bool,
    width: int = 100,
) -> str:
    """``scan-logs``'s or ``probe``'s document (a preset of the logs or probe checks, with its
    log hits, tile table or transfer matrix) in ``fmt``, through :func:`render` and so its
    sanitising step."""
    match fmt:
        case ScanLogsFormat.RICH | ProbeFormat.RICH:
            return render(document, Format.RICH, color=color, width=width)
        case ScanLogsFormat.JSON | ProbeFormat.JSON:
            return render(document, Format.JSON, color=False)
        case _:
            assert_never(fmt)


# The two commands' names for it (their formats are the same two, in enums of their own).
render_scan_logs = render_preset
render_probe = render_preset


__all__ = ["Format", "render", "render_preset", "render_probe", "render_scan_logs"]
