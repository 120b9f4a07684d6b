"""Every member of every format enum (render/formats.py) renders its command's document
through the document's one dispatcher: non-empty, and parsed where the format is for
machines. A hostile string in the documents' text reaches no format as a control
character (the dispatchers' one sanitising step)."""

from __future__ import annotations

import enum
import json
import re
import xml.etree.ElementTree as ET
from collections.abc import Callable
from functools import cache
from typing import Any

import pytest

from blackwell_doctor.render import formats
from blackwell_doctor.render.formats import (
    BenchFormat,
    FleetFormat,
    Format,
    ModelFormat,
    ProbeFormat,
    RecommendFormat,
    ScanLogsFormat,
)
from tests.conftest import FACTS_FIXTURES, FIXTURES, skip_without

try:
    import yaml

    from tests.test_output_injection import (
        bench_documents,
        fleet,
        inject,
        probes,
        recommendation,
        report,
        scan,
    )
except ModuleNotFoundError as exc:
    skip_without(exc)

RTXPRO = FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json"


@cache
def model() -> Any:
    from blackwell_doctor.app.model import inspect_model
    from blackwell_doctor.facts.document import decode_facts

    return inspect_model(FIXTURES / "models" / "deepseek-r1", decode_facts(RTXPRO.read_bytes()))


@cache
def launch() -> Any:
    from blackwell_doctor.facts.document import decode_facts
    from blackwell_doctor.recommend.plan import LaunchOptions, build_recommendation
    from blackwell_doctor.ruledata.runtimes import load_catalogue
    from blackwell_doctor.rules.evaluate import evaluate

    facts = decode_facts(RTXPRO.read_bytes())
    options = LaunchOptions(model_dir="/models/qwen3")
    return build_recommendation(facts, evaluate(facts), load_catalogue(), options)[1]


def _check(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render import render
    from blackwell_doctor.render.timing import RunTiming

    return render(doc, fmt, color=False, verbose=True, timing=RunTiming(1.7e9, 1.5))


def _bench(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render.bench import render_bench

    return "".join(render_bench(d, fmt) for d in doc)


def _model(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render.model import render_model

    return render_model(doc, fmt)


def _fleet(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render.fleet import render_fleet
    from blackwell_doctor.render.timing import RunTiming

    return render_fleet(doc, fmt, verbose=True, timing=RunTiming(1.7e9, 1.5))


def _recommend(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render.recommend import render_recommendation

    return render_recommendation(doc, fmt, launch())


def _scan_logs(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render import render_scan_logs

    return render_scan_logs(doc, fmt, color=False)


def _probe(doc: Any, fmt: Any) -> str:
    from blackwell_doctor.render import render_probe

    return "".join(render_probe(d, fmt, color=False) for d in doc)


# Each format enum: its command's fixture document and the dispatcher that renders it.
DOCUMENTS: dict[type[enum.Enum], tuple[Callable[[], Any], Callable[[Any, Any], str]]] = {
    Format: (report, _check),
    BenchFormat: (bench_documents, _bench),
    ModelFormat: (model, _model),
    FleetFormat: (fleet, _fleet),
    RecommendFormat: (recommendation, _recommend),
    ScanLogsFormat: (scan, _scan_logs),
    ProbeFormat: (probes, _probe),
}
MEMBERS = [member for kind in DOCUMENTS for member in kind]


def test_every_format_enum_has_a_document() -> None:
    declared = {
        v for v in vars(formats).values() if isinstance(v, type) and issubclass(v, enum.Enum)
    }
    assert declared == set(DOCUMENTS)


def test_format_members_are_upper_case() -> None:
    assert all(m.name == m.value.upper() for m in MEMBERS)


def _parses(fmt: enum.Enum, text: str) -> None:
    """Raises unless ``text`` parses as ``fmt`` where ``fmt`` is for machines."""
    from prometheus_client.parser import text_string_to_metric_families

    match fmt.value:
        case "json":
            # Several documents (bench: run, soak, compare; probe: two reports) one after
            # another: each must be a whole JSON value.
            decoder, at = json.JSONDecoder(), 0
            while at < len(text):
                _, at = decoder.raw_decode(text, at)
                while at < len(text) and text[at].isspace():
                    at += 1
        case "junit":
            ET.fromstring(text.encode("utf-8"))
        case "prometheus":
            assert list(text_string_to_metric_families(text))
        case "compose":
            assert isinstance(yaml.safe_load(text), dict)
        case "html":
            # One page per document (bench: run, soak, compare), none with a script.
            assert text.startswith("<!DOCTYPE html>")
            assert "<script" not in text.lower()
        case "nfd":
            for line in text.splitlines():
                assert line.startswith("#") or re.fullmatch(r"[\w.-]+=[\w.-]*", line), line


@pytest.mark.parametrize("fmt", MEMBERS, ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_every_format_renders_its_document(fmt: enum.Enum) -> None:
    document, dispatch = DOCUMENTS[type(fmt)]
    text = dispatch(document(), fmt)
    assert text.strip()
    _parses(fmt, text)


# An ANSI colour, a C1 CSI, a bidi override and a NUL: what a facts file, a log, a server or
# a checkpoint's config.json could carry into finding text, a model id, a model name, a node
# name.
HOSTILE = "\x1b[31m\x9b\u202e\x00"
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u200e\u200f\u202a-\u202e\u2066-\u2069]")


@cache
def hostile(kind: type[enum.Enum]) -> Any:
    document = DOCUMENTS[kind][0]()
    return inject(document, lambda value: f"{HOSTILE}{value}{HOSTILE}")


def test_the_hostile_string_reaches_each_document() -> None:
    assert HOSTILE in report().results[0].title or HOSTILE in hostile(Format).results[0].title
    assert HOSTILE in hostile(BenchFormat)[0].server.model
    assert HOSTILE in hostile(ModelFormat).model.architecture
    assert HOSTILE in hostile(FleetFormat).nodes[0].name
    assert HOSTILE in hostile(RecommendFormat).actions[0].title


@pytest.mark.parametrize("fmt", MEMBERS, ids=lambda m: f"{type(m).__name__}.{m.name}")
def test_no_control_character_reaches_any_format(fmt: enum.Enum) -> None:
    text = DOCUMENTS[type(fmt)][1](hostile(type(fmt)), fmt)
    assert not CONTROL.search(text), (CONTROL.search(text), text[:2000])
    _parses(fmt, text)
