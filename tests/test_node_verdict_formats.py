"""The node verdict (issue 39) is in every format of the check report, as each format says
things: a line in the text and Markdown, a field in the JSON, a property in JUnit, a label
for Node Feature Discovery, an enum gauge for Prometheus."""

from __future__ import annotations

import json
import xml.etree.ElementTree as ET

import pytest

from blackwell_doctor.render import Format, render
from blackwell_doctor.report.check import Report
from blackwell_doctor.rules.evaluate import evaluate
from tests.factsutil import load

STEP = "Drain the node and reboot it (logs.kernel_events)"


@pytest.fixture(scope="module")
def report() -> Report:
    return evaluate(load("rtx5090-xid79-riser"))


def test_every_format_carries_the_verdict(report: Report) -> None:
    for fmt in Format:
        assert "needs-reboot" in render(report, fmt, color=False), fmt


def test_json_has_the_verdict_its_step_and_the_findings_behind_it(report: Report) -> None:
    node = json.loads(render(report, Format.JSON, color=False))["node"]
    assert node["verdict"] == "needs-reboot"
    assert node["step"].startswith(STEP)
    assert node["because"] == ["logs.kernel_events"]
    assert "health.pcie_errors" in node["findings"]


def test_text_and_markdown_say_the_step(report: Report) -> None:
    text = render(report, Format.RICH, color=False, width=400)
    assert f"Node: needs-reboot - {STEP}" in text
    markdown = render(report, Format.MARKDOWN, color=False)
    # An underscore inside a word is not emphasis in CommonMark, so the step reads verbatim.
    assert f"**Node: needs-reboot** — {STEP}" in markdown


def test_junit_keeps_it_as_a_suite_property_once(report: Report) -> None:
    root = ET.fromstring(render(report, Format.JUNIT, color=False))
    props = {p.get("name"): p.get("value") for p in root.iter("property")}
    assert props["node.verdict"] == "needs-reboot"
    assert len(root.findall(".//properties")) == 1


def test_nfd_label_and_prometheus_enum(report: Report) -> None:
    assert "blackwell-doctor.node=needs-reboot\n" in render(report, Format.NFD, color=False)
    prom = render(report, Format.PROMETHEUS, color=False)
    assert 'blackwell_doctor_node_verdict{verdict="needs-reboot"} 1.0' in prom
    for other in ("healthy", "degraded", "needs-reset", "needs-service"):
        assert f'blackwell_doctor_node_verdict{{verdict="{other}"}} 0.0' in prom
