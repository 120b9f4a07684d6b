"""Strings from other hosts (facts files, log lines, file names) cannot rewrite the reader's
terminal, forge Markdown structure, break JSON or make JUnit ill-formed.

Property: put a hostile string at both ends of EVERY string field of a real report
(`check`), recommendation (`recommend`), scan report (`scan-logs`) and fleet report
(`fleet`), render every format,
and hold each output kind to its rule:
- terminal: no control character but newline, no bidirectional override, no lone
  surrogate; an injected newline never starts a line of its own at the left margin;
- Markdown: the same, and the document's structure (headings, table rows, links, HTML)
  is the one of the clean document;
- JSON: encodes as UTF-8 and parses back;
- JUnit: ElementTree parses it, no character XML forbids.
"""

from __future__ import annotations

import enum
import json
import re
import typing
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import cache
from pathlib import Path
from typing import Any, Literal, get_args, get_origin

import msgspec
import pytest
from markdown_it import MarkdownIt

from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.recommend.plan import LaunchOptions, Recommendation, build_recommendation
from blackwell_doctor.render import Format, render
from blackwell_doctor.render.fleet import render_fleet
from blackwell_doctor.render.formats import FleetFormat, RecommendFormat
from blackwell_doctor.render.recommend import render_recommendation
from blackwell_doctor.report.check import PresetDocument, Report
from blackwell_doctor.report.fleet import FleetReport
from blackwell_doctor.ruledata.runtimes import load_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.presets import (
    ProbeReport,
    ScanReport,
    judge_logs,
    judge_p2p,
    judge_probe,
)
from tests.conftest import FACTS_FIXTURES, FIXTURES, skip_without

try:
    from hypothesis import HealthCheck, example, given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

MARK = "FORGED"
# Pieces an attacker would use; hypothesis combines them with arbitrary text.
PIECES = [
    "\x1b[2J",
    "\x1b]0;T\x07",
    "\x9b31m",
    "\r",
    "\x00",
    "\x08",
    f"\n{MARK}",
    f"\n# {MARK}",
    f"\n## {MARK}",
    f"\n\n{MARK}\n===",
    f"\n- {MARK}",
    f"\n1. {MARK}",
    f"\n> {MARK}",
    f"\n    {MARK}",
    f"\n```\n{MARK}",
    "<script>alert(1)</script>",
    "<img src=x onerror=alert(1)>",
    "[click](https://evil.example)",
    "![i](https://evil.example/i.png)",
    "<https://evil.example>",
    "|",
    "`",
    "```",
    "*",
    "_",
    "\\",
    "&lt;b&gt;",
    "\u202e",
    "\u2066",
    "\ufffe",
    "\uffff",
    "\udcff",
    "\ud800",
    "#",
    "]]>",
]
HOSTILE = st.lists(
    st.one_of(st.sampled_from(PIECES), st.text(max_size=4)), min_size=1, max_size=6
).map("".join)

CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")
SGR = re.compile(r"\x1b\[[0-9;]*m")  # rich's own colours, in the colour output only
XML_FORBIDDEN = re.compile("[^\t\n\r\x20-\ud7ff\ue000-\ufffd\U00010000-\U0010ffff]")


# --------------------------------------------------------------------------- documents


def _is_literal(hint: Any) -> bool:
    if get_origin(hint) is Literal:
        return True
    return any(_is_literal(a) for a in get_args(hint))


@cache
def _literal_fields(cls: type) -> frozenset[str]:
    hints = typing.get_type_hints(cls)
    return frozenset(name for name, hint in hints.items() if _is_literal(hint))


def inject(obj: Any, wrap: Callable[[str], str]) -> Any:
    """``obj`` with ``wrap`` applied to every free-text string: struct fields, list items,
    dict keys and values; enum values and Literal-typed fields keep their meaning."""
    if isinstance(obj, enum.Enum):
        return obj
    if isinstance(obj, str):
        return wrap(obj)
    if isinstance(obj, msgspec.Struct):
        skip = _literal_fields(type(obj))
        changes = {
            name: inject(getattr(obj, name), wrap)
            for name in obj.__struct_fields__
            if name not in skip
        }
        return msgspec.structs.replace(obj, **changes)
    if isinstance(obj, list):
        return [inject(x, wrap) for x in obj]
    if isinstance(obj, tuple):
        return tuple(inject(x, wrap) for x in obj)
    if isinstance(obj, dict):
        return {inject(k, wrap): inject(v, wrap) for k, v in obj.items()}
    return obj


@cache
def report() -> Report:
    path = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
    facts = decode_facts(path.read_bytes())
    return evaluate(facts, source=str(path), embed_facts=True)


@cache
def recommendation() -> Recommendation:
    path = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"
    facts = decode_facts(path.read_bytes())
    options = LaunchOptions(model_dir="/models/qwen3", extra_env=(("HF_HOME", "/models/hf"),))
    rec, _ = build_recommendation(facts, evaluate(facts), load_catalogue(), options)
    return rec


@cache
def scan() -> PresetDocument[ScanReport]:
    facts = scan_sources(
        paths=[str(FIXTURES / "logs")],
        containers=[],
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
    )
    return judge_logs(facts, fail_on="warn")


@cache
def probes() -> list[PresetDocument[ProbeReport]]:
    """``probe`` and ``probe --p2p`` on a captured host: every device string, tile reason,
    launch error and pair detail is text to inject into."""
    from blackwell_doctor.facts.document import P2PProbeFacts, P2PTransfer, ProbeFacts

    facts = decode_facts((FACTS_FIXTURES / "sm120-driver580.json").read_bytes())
    assert isinstance(facts.probes, ProbeFacts)
    device = facts.probes.devices[0]
    tiles = [
        msgspec.structs.replace(t, launched=False, launch_error="CUDA_ERROR_INVALID_VALUE")
        for t in device.tiles
    ]
    measured = msgspec.structs.replace(
        facts.probes, devices=[msgspec.structs.replace(device, tiles=tiles)]
    )
    pairs = P2PProbeFacts(
        wall_s=1.0,
        pairs=[
            P2PTransfer(gpu_a=0, gpu_b=1, can_access_peer=True, fault="p2p-timeout:20s at copy"),
            P2PTransfer(gpu_a=0, gpu_b=2, can_access_peer=False, access_only="0->2"),
        ],
    )
    return [judge_probe(facts, measured), judge_p2p(facts, pairs)]


def scan_text(report: PresetDocument[ScanReport]) -> str:
    return render(report, Format.RICH, color=False)


def scan_json(report: PresetDocument[ScanReport]) -> str:
    return render(report, Format.JSON, color=False)


def test_the_documents_have_findings_to_inject_into() -> None:
    assert any(r.remedy for r in report().results)
    assert recommendation().actions
    assert scan().report.findings
    assert all(any(r.remedy for r in p.report.results) for p in probes())


# --------------------------------------------------------------------------- rules per kind


def assert_no_unsafe_characters(text: str) -> None:
    assert not CONTROL.search(text), CONTROL.search(text)
    text.encode("utf-8")  # no lone surrogate


def assert_terminal_safe(text: str) -> None:
    assert_no_unsafe_characters(text)
    for line in text.splitlines():
        assert not re.match(rf"\s{{0,2}}(#+ |- |> |1\. )?{MARK}", line), line


def markdown_shape(text: str) -> tuple[list[str], int]:
    """The structure a reader sees: the block tokens (headings by level, table rows, list
    items, code blocks, HTML blocks), and how many links, images and inline HTML there are."""
    md = MarkdownIt("commonmark").enable("table")
    blocks: list[str] = []
    inline = 0
    for token in md.parse(text):
        if token.type == "inline":
            kinds = ("link_open", "image", "html_inline")
            inline += sum(1 for child in token.children or [] if child.type in kinds)
        elif token.nesting >= 0:
            blocks.append(token.tag if token.type == "heading_open" else token.type)
    return blocks, inline


def assert_markdown_safe(text: str, clean: str) -> None:
    assert_no_unsafe_characters(text)  # a forged line would show in the structure
    blocks, inline = markdown_shape(text)
    clean_blocks, clean_inline = markdown_shape(clean)
    assert blocks == clean_blocks
    # A link may turn into text when a hostile value is part of its address; none appears.
    assert inline <= clean_inline


def assert_json_safe(text: str) -> None:
    json.loads(text.encode("utf-8"))


def assert_junit_safe(text: str) -> None:
    assert not XML_FORBIDDEN.search(text)
    ET.fromstring(text.encode("utf-8"))


def hostile(payload: str) -> Callable[[str], str]:
    return lambda value: f"{payload}{value}{payload}"


EXAMPLES = settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])


@EXAMPLES
@given(payload=HOSTILE)
@example(payload="\t")  # a leading tab made an indented code block of a Markdown paragraph
def test_check_report_every_format(payload: str) -> None:
    clean = report()
    evil = inject(clean, hostile(payload))
    assert_terminal_safe(render(evil, Format.RICH, color=False, verbose=True))
    assert_terminal_safe(SGR.sub("", render(evil, Format.RICH, color=True, verbose=True)))
    assert_markdown_safe(
        render(evil, Format.MARKDOWN, color=False), render(clean, Format.MARKDOWN, color=False)
    )
    assert_json_safe(render(evil, Format.JSON, color=False))
    assert_junit_safe(render(evil, Format.JUNIT, color=False))


@EXAMPLES
@given(payload=HOSTILE)
def test_recommendation_markdown_and_json(payload: str) -> None:
    clean = recommendation()
    evil = inject(clean, hostile(payload))
    assert_markdown_safe(
        render_recommendation(evil, RecommendFormat.MARKDOWN, None),
        render_recommendation(clean, RecommendFormat.MARKDOWN, None),
    )
    assert_json_safe(render_recommendation(evil, RecommendFormat.JSON, None))


@EXAMPLES
@given(payload=HOSTILE)
def test_scan_logs_text_and_json(payload: str) -> None:
    evil = inject(scan(), hostile(payload))
    assert_terminal_safe(scan_text(evil))
    assert_json_safe(scan_json(evil))


@EXAMPLES
@given(payload=HOSTILE)
def test_probe_reports_text_markdown_and_json(payload: str) -> None:
    """The probe's report, detail sections included (device names, tile reasons, launch
    errors, pair details come from the driver), through the renderers' one sanitising step."""
    for clean in probes():
        evil = inject(clean, hostile(payload))
        assert_terminal_safe(render(evil, Format.RICH, color=False))
        assert_terminal_safe(SGR.sub("", render(evil, Format.RICH, color=True)))
        assert_markdown_safe(
            render(evil, Format.MARKDOWN, color=False),
            render(clean, Format.MARKDOWN, color=False),
        )
        assert_json_safe(render(evil, Format.JSON, color=False))


@pytest.mark.parametrize(
    "hostname", ["evil\x1b[2J\x1b]0;T\x07", "a\n# Heading", "<b>x</b>", "x\ufffe\udcff"]
)
def test_the_audits_hostnames(hostname: str) -> None:
    clean = report()
    evil = msgspec.structs.replace(
        clean, host=msgspec.structs.replace(clean.host, hostname=hostname)
    )
    assert_terminal_safe(render(evil, Format.RICH, color=False))
    assert_markdown_safe(
        render(evil, Format.MARKDOWN, color=False), render(clean, Format.MARKDOWN, color=False)
    )
    assert_json_safe(render(evil, Format.JSON, color=False))
    assert_junit_safe(render(evil, Format.JUNIT, color=False))


@cache
def fleet() -> FleetReport:
    """``fleet`` over the captured hosts, with a node that could not be read and a bench."""
    from blackwell_doctor.app.fleet import expand_inputs, judge_fleet

    paths, missing = expand_inputs([str(FACTS_FIXTURES), "/nonexistent.json"])
    return judge_fleet(paths, missing)


# --------------------------------------------------------------------------- bench


@cache
def bench_documents() -> tuple[Any, Any, Any]:
    """A ``bench`` run with a failed request, findings and notes; a soak run (every
    interval and trend); and the compare of two runs (rows, drift, regressions)."""
    from blackwell_doctor.app.soak import soak_result
    from blackwell_doctor.report.bench import BenchRun, RequestSample, decode_run
    from blackwell_doctor.rules.compare import compare
    from tests.test_bench_soak import RULES, planted_soak

    fixtures = FIXTURES / "bench"
    before = decode_run((fixtures / "sm120-moe-bench-stock-mtp0.json").read_bytes(), source="b")
    after = decode_run((fixtures / "sm120-moe-bench-stock-mtp3.json").read_bytes(), source="a")
    shape = before.shapes[0]
    failed = RequestSample(ok=False, error="http_5xx", detail="HTTP 500: engine dead")
    shape = msgspec.structs.replace(
        shape,
        errors={"http_5xx": 1},
        samples=[*shape.samples, failed],
        notes=["input capped from 16384 to 1800 tokens by the server's max_model_len 2048"],
    )
    run = msgspec.structs.replace(
        before,
        server=msgspec.structs.replace(before.server, error="http_4xx: /v1/models"),
        findings=["the server has no /tokenize: prompt sizes are estimated"],
        shapes=[shape, *before.shapes[1:]],
        interrupted=True,
    )
    soak = soak_result(planted_soak([2.0 + i for i in range(12)], [1000.0] * 12, [5.0] * 12),
                       RULES, interrupted=False)  # fmt: skip
    soaked: BenchRun = msgspec.structs.replace(before, shapes=[], soak=soak)
    slower = msgspec.structs.replace(run, shapes=[shape, *after.shapes[1:]], interrupted=False)
    doc = compare(before, slower, before_name="a.json", after_name="b.json",
                  resamples=200, fail_on_regression_pct=0.0)  # fmt: skip
    return run, soaked, doc


def test_the_bench_documents_have_text_to_inject_into() -> None:
    run, soaked, doc = bench_documents()
    assert run.findings
    assert run.server.error
    assert any(not s.ok for s in run.shapes[0].samples)
    assert soaked.soak.trends
    assert doc.comparisons
    assert doc.regressions


def assert_bench_json_safe(text: str) -> None:
    assert_json_safe(text)
    assert_no_unsafe_characters(text)  # escaped as \uXXXX: exact, and inert in a terminal


@EXAMPLES
@given(payload=HOSTILE)
def test_fleet_every_format(payload: str) -> None:
    """Node names, file names, summaries and remedies of other hosts' facts, through the
    fleet's one sanitising step, in rich (with -v), Markdown, JSON and Prometheus."""
    from prometheus_client.parser import text_string_to_metric_families

    clean = fleet()
    evil = inject(clean, hostile(payload))
    for verbose in (False, True):
        assert_terminal_safe(render_fleet(evil, FleetFormat.RICH, verbose=verbose))
        assert_terminal_safe(
            SGR.sub("", render_fleet(evil, FleetFormat.RICH, color=True, verbose=verbose))
        )
    assert_markdown_safe(
        render_fleet(evil, FleetFormat.MARKDOWN), render_fleet(clean, FleetFormat.MARKDOWN)
    )
    assert_json_safe(render_fleet(evil, FleetFormat.JSON))
    prometheus = render_fleet(evil, FleetFormat.PROMETHEUS)
    assert_terminal_safe(prometheus)
    assert list(text_string_to_metric_families(prometheus))


@EXAMPLES
@given(payload=HOSTILE)
def test_bench_soak_and_compare_documents_every_format(payload: str) -> None:
    """Every bench renderer (run, soak, compare; text, Markdown, JSON) through the one
    sanitising step: the run's strings come from the server and the run files."""
    from blackwell_doctor.render.bench import encode, render_compare, render_run

    for clean in bench_documents():
        evil = inject(clean, hostile(payload))
        render = render_compare if hasattr(clean, "comparisons") else render_run
        assert_terminal_safe(render(evil))
        assert_markdown_safe(render(evil, markdown=True), render(clean, markdown=True))
        assert_bench_json_safe(encode(evil))


HOSTILE_ID = "tiny\x1b]0;owned\x07\x1b[2J\x9b31m\u202eevil\u2066\n# Heading\n<b>x</b>[l](https://e)"
HOSTILE_BODY = "engine\x1b]0;title\x07 dead\x1b[31m\n# Heading\n\u202e|x|y|"


def test_bench_with_a_hostile_model_id_and_error_body_every_format(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Issue 19: `bench` printed the server's model id and error bodies raw (ESC, an OSC
    window title, a `# Heading` line). A real server on 127.0.0.1 sends them; every format
    of the command shows them inert, and the JSON keeps the exact strings."""
    import asyncio
    import threading

    from aiohttp import web

    from blackwell_doctor.cli import main

    async def models(_: web.Request) -> web.Response:
        return web.json_response({"data": [{"id": HOSTILE_ID, "max_model_len": 4096}]})

    async def chat(request: web.Request) -> web.Response:
        await request.read()
        return web.Response(status=500, text=HOSTILE_BODY)

    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()

    async def up() -> web.AppRunner:
        app = web.Application()
        app.router.add_get("/v1/models", models)
        app.router.add_post("/v1/chat/completions", chat)
        runner = web.AppRunner(app)
        await runner.setup()
        await web.TCPSite(runner, "127.0.0.1", 0).start()
        return runner

    runner = asyncio.run_coroutine_threadsafe(up(), loop).result(10)
    try:
        url = f"http://127.0.0.1:{runner.addresses[0][1]}"
        shapes = tmp_path / "s.toml"
        shapes.write_text("[shape.s]\ninput_tokens = 8\noutput_tokens = 4\nrequests = 2\n")
        argv = ["bench", "--url", url, "--shapes", str(shapes), "--shape", "s"]
        outputs = {}
        for fmt in ("rich", "markdown", "json"):
            assert main([*argv, "-f", fmt]) == 1  # the requests failed: a finding
            captured = capsys.readouterr()
            assert_no_unsafe_characters(captured.err)
            outputs[fmt] = captured.out
    finally:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
        loop.call_soon_threadsafe(loop.stop)
        thread.join(10)
    assert_terminal_safe(outputs["rich"].replace("Heading", MARK))
    assert "tiny\\x1b]0;owned\\x07" in outputs["rich"]
    md = outputs["markdown"]
    assert_no_unsafe_characters(md)
    blocks, inline = markdown_shape(md)
    assert blocks.count("h2") == 1  # the title; the id's "# Heading" is text in it
    assert "h1" not in blocks
    assert inline == 0  # no link, no HTML
    assert_bench_json_safe(outputs["json"])
    doc = json.loads(outputs["json"])
    assert doc["server"]["model"] == HOSTILE_ID  # exact
    details = [s["detail"] for s in doc["shapes"][0]["samples"]]
    assert all("\x1b" in d and "Heading" in d for d in details)
