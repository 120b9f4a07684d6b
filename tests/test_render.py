"""Renderers, specified against reports built here (independent of the checks' catalogue)."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
import xml.etree.ElementTree as ET
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.facts.document import ToolInfo
from blackwell_doctor.render import Format, render
from blackwell_doctor.report.check import (
    REPORT_SCHEMA_VERSION,
    HostLine,
    Report,
    summarize,
)
from blackwell_doctor.report.exitcodes import results_gate
from blackwell_doctor.report.results import EvidenceValue, FailOn, Remedy, Result, Severity, Status
from blackwell_doctor.ruledata.resources import schema_text
from blackwell_doctor.schemas.generate import SCHEMAS, schema_file_text
from tests.conftest import optional

ANSI = re.compile(r"\x1b\[[0-9;]*m")
LONG_COMMAND = (
    "sudo apt-get install --yes --no-install-recommends nvidia-driver-580-open "
    "nvidia-utils-580 libnvidia-compute-580 && sudo reboot"
)


def result(
    check_id: str,
    status: Status,
    *,
    summary: str | None = None,
    title: str | None = None,
    evidence: dict[str, EvidenceValue] | None = None,
    remedy: Remedy | None = None,
) -> Result:
    return Result(
        id=check_id,
        family=check_id.split(".")[0],
        status=status,
        severity=Severity.HIGH,
        title=title or f"title of {check_id}",
        summary=summary or f"summary of {check_id}",
        evidence=evidence or {},
        remedy=remedy,
    )


def make_report(results: list[Result], *, fail_on: FailOn = "fail", strict: bool = False) -> Report:
    return Report(
        schema_version=REPORT_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        host=HostLine(
            hostname="gpu-node-7",
            gpus=["NVIDIA RTX PRO 6000 Blackwell", "NVIDIA RTX PRO 6000 Blackwell"],
            driver_version="570.86.15",
            source="facts/gpu-node-7.json",
        ),
        fail_on=fail_on,
        strict=strict,
        results=results,
        summary=summarize(results),
        exit_code=int(results_gate((r.status for r in results), fail_on, strict)),
    )


FIX = Remedy(
    summary="Install the R580 open kernel driver, which knows SM 12.0.",
    commands=[LONG_COMMAND, "nvidia-smi --query-gpu=driver_version --format=csv"],
    links=["https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"],
)

EVERY_STATUS = [
    result(
        "driver.version",
        Status.FAIL,
        summary="Driver 570.86.15 predates SM 12.0 support (needs 575 or newer).",
        evidence={"driver_version": "570.86.15", "minimum": "575", "gpus": ["0", "1"]},
        remedy=FIX,
    ),
    result("driver.module", Status.PASS, evidence={"loaded": "570.86.15", "matches": True}),
    result(
        "pci.acs",
        Status.WARN,
        summary="ACS redirects P2P through the root complex on 2 bridges.",
        evidence={"bridges": ["0000:40:01.1", "0000:40:01.2"]},
        remedy=Remedy(summary="Turn ACS redirection off.", commands=["setpci -s 40:01.1 ..."]),
    ),
    result("pci.iommu", Status.SKIP, summary="only one GPU: nothing to pass through"),
    result("gpu.smem", Status.ERROR, summary="not evaluated: nvml-library-not-found"),
]


def test_every_format_has_a_distinct_extension() -> None:
    extensions = [fmt.extension for fmt in Format]
    assert len(set(extensions)) == len(extensions)


@pytest.mark.parametrize("fmt", list(Format))
@pytest.mark.parametrize("color", [False, True])
def test_every_format_renders_every_result(fmt: Format, color: bool) -> None:
    # pip-audit's test_to_format_is_exhaustive: a new Format member without a renderer fails.
    text = render(make_report(EVERY_STATUS), fmt, color=color)
    assert text.endswith("\n")
    for r in EVERY_STATUS:
        assert r.id in text


@pytest.mark.parametrize("fmt", list(Format))
def test_every_format_renders_an_empty_report(fmt: Format) -> None:
    assert render(make_report([]), fmt, color=False).endswith("\n")


@pytest.mark.parametrize("fmt", list(Format))
def test_no_format_but_rich_with_color_writes_escape_codes(fmt: Format) -> None:
    plain = render(make_report(EVERY_STATUS), fmt, color=False, verbose=True)
    assert "\x1b" not in plain
    if fmt is not Format.RICH:
        # Machine formats do not depend on the terminal at all.
        assert render(make_report(EVERY_STATUS), fmt, color=True, verbose=True) == plain


# --------------------------------------------------------------------------- rich / plain text


def text(report: Report, *, color: bool = False, verbose: bool = False, width: int = 100) -> str:
    return render(report, Format.RICH, color=color, verbose=verbose, width=width)


def test_plain_text_is_ascii_with_word_marks() -> None:
    out = text(make_report(EVERY_STATUS))
    assert out.isascii()
    # Marks are padded to one width so ids and titles line up.
    for mark in [
        "  [FAIL]  driver.version  title",
        "  [ok]    driver.module   title",
        "  [warn]  pci.acs         title",
        "  [skip]  pci.iommu       title",
        "  [error] gpu.smem        title",
    ]:
        assert mark in out


def test_color_text_has_styles_and_unicode_marks(monkeypatch: pytest.MonkeyPatch) -> None:
    # The caller decided on colour; NO_COLOR / TERM=dumb in the environment must not undo it.
    monkeypatch.setenv("NO_COLOR", "1")
    monkeypatch.setenv("TERM", "dumb")
    out = text(make_report(EVERY_STATUS), color=True)
    assert "\x1b[" in out
    stripped = ANSI.sub("", out)
    for mark in ["[✗] driver.version", "[✓] driver.module", "[!] pci.acs", "[–] pci.iommu"]:
        assert mark in stripped
    assert "[?] gpu.smem" in stripped


def test_header_names_tool_host_gpus_driver_and_source() -> None:
    head = text(make_report(EVERY_STATUS)).splitlines()[:3]
    assert head == [
        f"blackwell-doctor {__version__} | host gpu-node-7 | driver 570.86.15",
        "GPUs: 2 x NVIDIA RTX PRO 6000 Blackwell",
        "Facts: facts/gpu-node-7.json",
    ]


def test_failure_shows_summary_evidence_fix_commands_and_links() -> None:
    out = text(make_report(EVERY_STATUS))
    block = out[out.index("[FAIL]") :]
    block = block[: block.index("[ok]")]
    details = [line.strip() for line in block.splitlines()[1:]]
    assert details == [
        "Driver 570.86.15 predates SM 12.0 support (needs 575 or newer).",
        "driver_version: 570.86.15",
        "minimum: 575",
        "gpus: 0, 1",
        "Fix: Install the R580 open kernel driver, which knows SM 12.0.",
        f"$ {LONG_COMMAND}",
        "$ nvidia-smi --query-gpu=driver_version --format=csv",
        "See: https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/",
        "",
    ]
    # Commands sit two columns further in than the text around them, ready to paste.
    lines = block.splitlines()
    fix = next(line for line in lines if "Fix:" in line)
    cmd = next(line for line in lines if "$ nvidia-smi" in line)
    assert len(cmd) - len(cmd.lstrip()) == len(fix) - len(fix.lstrip()) + 2


def test_pass_shows_only_its_summary_unless_verbose() -> None:
    quiet = text(make_report(EVERY_STATUS))
    assert "summary of driver.module" in quiet
    assert "loaded: 570.86.15" not in quiet
    loud = text(make_report(EVERY_STATUS), verbose=True)
    assert "loaded: 570.86.15" in loud
    assert "matches: true" in loud
    assert "severity: high" in loud


def test_skip_and_error_show_their_reason() -> None:
    out = text(make_report(EVERY_STATUS))
    assert "only one GPU: nothing to pass through" in out
    assert "not evaluated: nvml-library-not-found" in out


def test_results_are_grouped_by_family_in_report_order() -> None:
    interleaved = [
        result("pci.a", Status.PASS),
        result("driver.a", Status.PASS),
        result("pci.b", Status.PASS),
    ]
    lines = text(make_report(interleaved)).splitlines()
    order = [line.split()[1] if line.startswith("  [") else line for line in lines]
    assert [x for x in order if x in {"pci", "driver", "pci.a", "pci.b", "driver.a"}] == [
        "pci",
        "pci.a",
        "pci.b",
        "driver",
        "driver.a",
    ]


def test_summary_line_counts_every_status_and_states_the_gate() -> None:
    assert text(make_report(EVERY_STATUS)).splitlines()[-1] == (
        "Summary: 1 failed, 1 warning, 1 passed, 1 skipped, 1 not evaluated - exit 1 (gate: fail)"
    )
    passing = [result("a.b", Status.PASS), result("a.c", Status.PASS)]
    assert text(make_report(passing, strict=True)).splitlines()[-1] == (
        "Summary: 2 passed - exit 0 (gate: fail, strict)"
    )
    assert text(make_report([])).splitlines()[-1] == "Summary: no checks ran - exit 0 (gate: fail)"


@pytest.mark.parametrize("color", [False, True])
def test_commands_and_links_are_never_wrapped(color: bool) -> None:
    out = ANSI.sub("", text(make_report(EVERY_STATUS), color=color, width=40))
    lines = [line.strip() for line in out.splitlines()]
    assert f"$ {LONG_COMMAND}" in lines
    # A link that does not fit after its label goes whole on the line under it.
    url = "https://docs.nvidia.com/datacenter/tesla/driver-installation-guide/"
    assert lines[lines.index(url) - 1] == "See:"


@pytest.mark.parametrize("color", [False, True])
def test_prose_wraps_to_the_width_and_keeps_its_indent(color: bool) -> None:
    long = "word " * 40
    out = ANSI.sub("", text(make_report([result("a.b", Status.PASS, summary=long)]), color=color))
    lines = out.splitlines()
    check_line = next(line for line in lines if "a.b" in line)
    under_id = " " * check_line.index("a.b")
    wrapped = [line for line in lines if line.strip().startswith("word")]
    assert len(wrapped) > 1
    assert all(len(line) <= 100 and line.startswith(under_id + "word") for line in wrapped)
    assert all(line == line.rstrip() for line in out.splitlines())


@pytest.mark.parametrize("color", [False, True])
def test_markup_in_data_is_printed_literally(color: bool) -> None:
    nasty = "log: [bold red]boom[/bold red] :thumbs_up: [link=http://x]y[/link]"
    report = make_report(
        [
            result(
                "logs.scan",
                Status.FAIL,
                title="[red]title[/]",
                summary=nasty,
                evidence={"[b]key[/b]": "[i]v[/i]"},
                remedy=Remedy(summary="[dim]r[/dim]", commands=["echo '[bold]x[/bold]'"]),
            )
        ]
    )
    out = ANSI.sub("", text(report, color=color))
    for literal in [nasty, "[red]title[/]", "[b]key[/b]: [i]v[/i]", "[dim]r[/dim]"]:
        assert literal in out
    assert "$ echo '[bold]x[/bold]'" in out


@pytest.mark.parametrize("fmt", list(Format))
def test_control_characters_in_data_are_shown_not_sent(fmt: Format) -> None:
    # A log excerpt carrying escape codes must not repaint the terminal or break the XML.
    report = make_report(
        [result("logs.scan", Status.FAIL, summary="\x1b[2J\x1b[31mred\x07", remedy=FIX)]
    )
    out = render(report, fmt, color=False)
    if fmt is Format.JSON:
        assert json.loads(out)["results"][0]["summary"] == "\x1b[2J\x1b[31mred\x07"
        return
    if fmt in (Format.PROMETHEUS, Format.NFD):
        # Metrics and node labels carry statuses and ids, never the summary text.
        assert "red" not in out
        return
    assert "\x1b" not in out
    assert "\x07" not in out
    if fmt is Format.MARKDOWN:
        # Shown as text: a CommonMark renderer (markdown-it-py, rich's own dependency) shows
        # the escaped characters exactly as the terminal formats write them.
        from markdown_it import MarkdownIt

        assert "\\x1b[31mred\\x07" in MarkdownIt("commonmark").enable("table").render(out)
        return
    assert "\\x1b[31mred\\x07" in out
    if fmt is Format.JUNIT:
        ET.fromstring(out)


def test_color_text_sends_only_its_own_escape_codes() -> None:
    report = make_report([result("logs.scan", Status.FAIL, summary="\x1b[31mred")])
    out = text(report, color=True)
    assert "\\x1b[31mred" in out
    assert "\x1b[31mred" not in out


def test_json_json_and_junit_and_markdown_do_not_import_rich() -> None:
    # Start-up time of `check --format json` in CI matters; rich costs ~40 ms to import.
    code = (
        "import sys\n"
        "from tests.test_render import make_report, EVERY_STATUS\n"
        "from blackwell_doctor.render import Format, render\n"
        "for fmt in (Format.JSON, Format.JUNIT, Format.MARKDOWN):\n"
        "    render(make_report(EVERY_STATUS), fmt, color=False)\n"
        "assert not [m for m in sys.modules if m == 'rich' or m.startswith('rich.')], 'rich'\n"
        "render(make_report(EVERY_STATUS), Format.RICH, color=False)\n"
        "print('plain rich imported:', 'rich' in sys.modules)\n"
    )
    # The child must import this very package and these tests, however the parent got them
    # (installed wheel, PYTHONPATH=src, editable): pass both locations explicitly.
    import blackwell_doctor

    repo = Path(__file__).resolve().parents[1]
    package_parent = Path(blackwell_doctor.__file__).resolve().parents[1]
    paths = [str(package_parent), str(repo), os.environ.get("PYTHONPATH", "")]
    done = subprocess.run(
        [sys.executable, "-c", code],
        cwd=repo,
        env={**os.environ, "PYTHONPATH": os.pathsep.join(p for p in paths if p)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    # Plain text needs no rich either: pipes and NO_COLOR stay fast.
    assert "plain rich imported: False" in done.stdout


# --------------------------------------------------------------------------- JSON


def test_json_validates_against_the_shipped_schema() -> None:
    jsonschema = optional("jsonschema")
    schema = json.loads(schema_text("report.schema.json"))
    for report in [make_report(EVERY_STATUS), make_report([]), make_report(EVERY_STATUS[:1])]:
        document = json.loads(render(report, Format.JSON, color=False))
        jsonschema.Draft202012Validator(schema).validate(document)


def test_json_round_trips_and_keeps_the_contract_keys_in_order() -> None:
    report = make_report(EVERY_STATUS)
    out = render(report, Format.JSON, color=False)
    assert out.startswith('{\n  "schema_version": 1,\n')
    assert msgspec.json.decode(out, type=Report) == report
    document = json.loads(out)
    assert document["summary"] == {
        "pass": 1,
        "warn": 1,
        "fail": 1,
        "skip": 1,
        "error": 1,
        "total": 5,
    }
    assert document["exit_code"] == 1
    assert set(document["results"][0]) >= {
        "id",
        "family",
        "status",
        "severity",
        "title",
        "summary",
        "evidence",
        "remedy",
    }


def test_the_schema_rejects_a_report_missing_its_verdict() -> None:
    jsonschema = optional("jsonschema")
    schema = json.loads(schema_text("report.schema.json"))
    document = json.loads(render(make_report(EVERY_STATUS), Format.JSON, color=False))
    del document["exit_code"]
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.Draft202012Validator(schema).validate(document)


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_shipped_schema_equals_the_generated_one(name: str) -> None:
    assert schema_text(name) == schema_file_text(name), (
        f"{name} is stale: run `python -m blackwell_doctor.schemas.generate` and commit it"
    )


@pytest.mark.parametrize("name", sorted(SCHEMAS))
def test_shipped_schema_is_a_valid_draft_2020_12_schema(name: str) -> None:
    schema: dict[str, Any] = json.loads(schema_text(name))
    assert schema["$schema"] == "https://json-schema.org/draft/2020-12/schema"
    assert schema["$id"].startswith("urn:blackwell-doctor:schema:")
    optional("jsonschema").Draft202012Validator.check_schema(schema)


# --------------------------------------------------------------------------- JUnit


def junit(report: Report) -> ET.Element:
    out = render(report, Format.JUNIT, color=False)
    assert out.startswith('<?xml version="1.0" encoding="UTF-8"?>\n<testsuites ')
    return ET.fromstring(out)


def counts(element: ET.Element) -> dict[str, str]:
    return {k: element.attrib[k] for k in ("tests", "failures", "errors", "skipped")}


def case_kinds(root: ET.Element) -> dict[str, list[tuple[str, str | None]]]:
    return {
        case.attrib["name"]: [(child.tag, child.get("type")) for child in case]
        for case in root.iter("testcase")
    }


def test_junit_maps_each_status_with_the_default_gate() -> None:
    root = junit(make_report(EVERY_STATUS, fail_on="fail"))
    assert root.attrib["name"] == "blackwell-doctor"
    assert counts(root) == {"tests": "5", "failures": "1", "errors": "1", "skipped": "1"}
    assert case_kinds(root) == {
        "driver.version": [("failure", "fail")],
        "driver.module": [("system-out", None)],
        "pci.acs": [("system-out", None)],
        "pci.iommu": [("skipped", None)],
        "gpu.smem": [("error", "error")],
    }
    warn_out = root.find(".//testcase[@name='pci.acs']/system-out")
    assert warn_out is not None
    assert warn_out.text is not None
    assert warn_out.text.startswith("WARN: ")


def test_junit_counts_warnings_as_failures_when_the_gate_is_warn() -> None:
    root = junit(make_report(EVERY_STATUS, fail_on="warn"))
    assert counts(root) == {"tests": "5", "failures": "2", "errors": "1", "skipped": "1"}
    assert case_kinds(root)["pci.acs"] == [("failure", "warn")]


def test_junit_has_one_suite_per_family_with_its_own_counts() -> None:
    root = junit(make_report(EVERY_STATUS))
    suites = {s.attrib["name"]: s for s in root.iter("testsuite")}
    assert list(suites) == ["driver", "pci", "gpu"]
    assert counts(suites["driver"]) == {
        "tests": "2",
        "failures": "1",
        "errors": "0",
        "skipped": "0",
    }
    assert counts(suites["pci"]) == {"tests": "2", "failures": "0", "errors": "0", "skipped": "1"}
    assert counts(suites["gpu"]) == {"tests": "1", "failures": "0", "errors": "1", "skipped": "0"}
    for suite in suites.values():
        for case in suite.iter("testcase"):
            assert case.attrib["classname"] == f"blackwell_doctor.{suite.attrib['name']}"


def test_junit_failure_carries_message_and_the_commands_to_run() -> None:
    root = junit(make_report(EVERY_STATUS))
    failure = root.find(".//testcase[@name='driver.version']/failure")
    assert failure is not None
    assert failure.attrib["message"] == EVERY_STATUS[0].summary
    assert f"  $ {LONG_COMMAND}" in (failure.text or "")
    skipped = root.find(".//testcase[@name='pci.iommu']/skipped")
    assert skipped is not None
    assert skipped.attrib["message"] == "only one GPU: nothing to pass through"


# --------------------------------------------------------------------------- Markdown


def markdown(report: Report) -> str:
    return render(report, Format.MARKDOWN, color=False)


def test_markdown_escapes_pipes_and_joins_lines_in_table_cells() -> None:
    # A newline in a value is a space (as Markdown renders a soft break): it can end
    # neither the row nor, outside a table, the paragraph (a forged "# Heading").
    report = make_report(
        [result("a.b", Status.FAIL, title="a | b", summary="x | y\nz", remedy=FIX)]
    )
    row = next(line for line in markdown(report).splitlines() if "`a.b`" in line)
    assert row == "| **FAIL** | `a.b` | a \\| b | x \\| y z |"
    # Unescaped pipes delimit exactly the four columns.
    assert len(re.findall(r"(?<!\\)\|", row)) == 5


def test_markdown_status_words_are_emoji_free() -> None:
    out = markdown(make_report(EVERY_STATUS))
    table = out[out.index("| Status |") : out.index("## What to fix")]
    rows = table.splitlines()[2:-1]
    assert [row.split("|")[1].strip() for row in rows] == [
        "**FAIL**",
        "pass",
        "**WARN**",
        "skip",
        "error",
    ]


def test_markdown_what_to_fix_lists_failures_first_with_commands_in_sh_fences() -> None:
    out = markdown(make_report(EVERY_STATUS))
    fix = out[out.index("## What to fix") :]
    assert fix.index("`driver.version`") < fix.index("`pci.acs`")
    assert f"```sh\n{LONG_COMMAND}\nnvidia-smi --query-gpu=driver_version --format=csv\n```" in fix
    assert "```sh\nsetpci -s 40:01.1 ...\n```" in fix
    assert "`gpu.smem`" not in fix


def test_markdown_fence_outgrows_backticks_in_commands() -> None:
    remedy = Remedy(summary="r", commands=["echo ```not a fence```"])
    out = markdown(make_report([result("a.b", Status.FAIL, remedy=remedy)]))
    assert "````sh\necho ```not a fence```\n````" in out


def test_markdown_says_when_there_is_nothing_to_fix() -> None:
    out = markdown(make_report([result("a.b", Status.PASS)]))
    assert "Nothing: no check failed or warned." in out


def test_markdown_never_renders_links_or_images_from_data() -> None:
    report = make_report(
        [result("gpu.present", Status.FAIL, summary="[click me](https://evil.example) ![i](x)")]
    )
    out = render(report, Format.MARKDOWN, color=False)
    assert "[click me](https://evil.example)" not in out
    assert "\\[click me\\](https://evil.example)" in out
    assert "![i](x)" not in out
