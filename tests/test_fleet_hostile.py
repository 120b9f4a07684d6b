"""`fleet` against what other hosts and file systems hand it: a file name whose bytes are
not UTF-8, a newline or an escape in a file name or in a facts string, and a run that judges
nothing while --output names a good report. Every format (rich, markdown, json, prometheus)
shows the same escaped text; nothing is written raw; exit 2 clobbers no file."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path

import pytest
from markdown_it import MarkdownIt

from blackwell_doctor.facts.document import encode_facts
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, skip_without
from tests.factsutil import load, replace

try:
    from prometheus_client.parser import text_string_to_metric_families
except ModuleNotFoundError as exc:
    skip_without(exc)

FORMATS = ["rich", "markdown", "json", "prometheus"]
CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f-\x9f\u202a-\u202e\u2066-\u2069\ud800-\udfff]")
C0 = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\ud800-\udfff]")
B200 = str(FACTS_FIXTURES / "b200-x8.json")


def node(directory: Path, file: bytes, hostname: str, *, redacted: bool) -> None:
    facts = load("sm120-driver580")
    facts = replace(facts, redacted=redacted, platform=replace(facts.platform, hostname=hostname))
    with open(os.path.join(os.fsencode(directory), file), "wb") as fh:
        fh.write(encode_facts(facts))


def assert_clean(fmt: str, out: str) -> None:
    """No control character but newline and tab, no forged line, a valid document. JSON
    escapes controls itself and carries other text as data (the project's rule for it:
    UTF-8 that parses back)."""
    unsafe = C0 if fmt == "json" else CONTROL
    assert not unsafe.search(out), unsafe.search(out)
    for line in out.splitlines():
        assert not re.match(r"\s*(#+ |- |> )?FORGED", line), line
    if fmt == "json":
        json.loads(out.encode("utf-8"))
    elif fmt == "prometheus":
        assert list(text_string_to_metric_families(out))
    elif fmt == "markdown":
        headings = [t for t in MarkdownIt("commonmark").parse(out) if t.type == "heading_open"]
        assert all("FORGED" not in out.split("\n")[t.map[0]] for t in headings if t.map)


@pytest.mark.parametrize("fmt", FORMATS)
def test_a_file_name_that_is_not_utf8_is_shown_escaped_in_every_format(
    fmt: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node(tmp_path, b"gpu\xff.json", "ignored", redacted=True)  # redacted: named by its file
    code, out, err = run(["fleet", str(tmp_path), "-f", fmt, "-v"], capsys)
    assert code in (0, 1), err
    assert_clean(fmt, out)
    if fmt == "json":
        doc = json.loads(out)
        assert doc["nodes"][0]["name"] == "gpu\\xff"
        assert doc["nodes"][0]["source"].endswith("gpu\\xff.json")
    elif fmt == "prometheus":
        labels = {
            s.labels["node"]
            for f in text_string_to_metric_families(out)
            for s in f.samples
            if "node" in s.labels
        }
        assert labels == {"gpu\\xff"}
    else:
        assert "gpu\\xff" in out


@pytest.mark.parametrize("fmt", FORMATS)
@pytest.mark.parametrize(
    ("file", "hostname", "redacted"),
    [
        (b"a\n# FORGED.json", "x", True),
        (b"b\x1b[2J\x1b]0;T\x07.json", "x", True),
        (b"c.json", "evil\n# FORGED\x1b[2J\x1b]0;T\x07\u202e", False),
        (b"d\nFORGED.json", "same", False),  # two files claim one host: the files are named
    ],
    ids=["newline in file name", "escape in file name", "hostname", "file name of a twin"],
)
def test_verbose_writes_no_newline_or_escape_raw(
    fmt: str,
    file: bytes,
    hostname: str,
    redacted: bool,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    node(tmp_path, file, hostname, redacted=redacted)
    if hostname == "same":
        node(tmp_path, b"e.json", "same", redacted=False)
    code, out, err = run(["fleet", str(tmp_path), "-f", fmt, "-v"], capsys)
    assert code in (0, 1), err
    assert_clean(fmt, out)
    if fmt != "prometheus":  # node names appear there only as escaped label values
        assert any(e in out for e in ("\\n", "\\x1b", "\\u001b"))  # shown, escaped


@pytest.mark.parametrize(
    "argv",
    [
        ["fleet", "/nonexistent"],
        ["fleet", "/dev/zero"],
        ["check", "--facts", "/dev/zero"],
        ["check", "--facts", "/nonexistent.json"],
        ["collect", "--no-probe", "--host-root", "/nonexistent"],
        ["recommend", "--facts", "/nonexistent.json"],
        ["recommend", "--facts", B200, "--catalogue", "/dev/zero"],
        ["model", "/nonexistent", "--facts", B200],
        ["scan-logs", "/nonexistent.log"],
        ["bench", "--compare", "/dev/zero", "/dev/zero"],
        ["bench", "--url", "http://127.0.0.1:9", "--shapes", "/dev/zero"],
    ],
    ids=lambda a: " ".join(a[:3]),
)
def test_exit_2_leaves_the_output_file_as_it_was(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "k"
    out.write_text("the last good report\n")
    code, _, err = run([*argv, "-o", str(out)], capsys)
    assert code == 2, err
    assert out.read_text() == "the last good report\n"
    assert sorted(p.name for p in tmp_path.iterdir()) == ["k"]  # no temporary left either
