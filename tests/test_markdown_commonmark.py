"""The Markdown output renders as what it says (issue 40), read by a real CommonMark
renderer (markdown-it-py, rich's own dependency; GFM tables and strikethrough on, as GitHub
has them): escaped only where Markdown would act, so the source reads as plainly as it
renders (no ``&lt;redacted>``, no ``NOT\\_SUPPORTED``, no ``\\```), and commands stay code.

On main before issue 40: a hostname ``<redacted>`` was written ``&lt;redacted>``, every
``_`` escaped, and a summary's ```blackwell-doctor probe --p2p``` rendered as text with
literal backticks, not as code.
"""

from __future__ import annotations

import html
import json
import re
from collections.abc import Iterator
from typing import Any

import pytest

from blackwell_doctor.render.markdown import prose
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, skip_without

try:
    from hypothesis import given
    from hypothesis import strategies as st
    from markdown_it import MarkdownIt
except ModuleNotFoundError as exc:
    skip_without(exc)

MD = MarkdownIt("commonmark").enable("table").enable("strikethrough")
FIXTURES = sorted(FACTS_FIXTURES.glob("*.json"))
EXAMPLES = ["wsl2-rtxpro6000x4", "fixed-rtxpro6000x4", "dgx-spark", "h200x2"]
# One code span as the catalogue writes it: `command`.
CODE_SPAN = re.compile(r"`([^`]+)`")


def _strings(value: Any) -> Iterator[str]:
    """Every string of a JSON document."""
    if isinstance(value, str):
        yield value
    elif isinstance(value, dict):
        for v in value.values():
            yield from _strings(v)
    elif isinstance(value, list):
        for v in value:
            yield from _strings(v)


def _shown(inline: str) -> str:
    """What a renderer shows of one line of inline Markdown: its text and code, which must
    be all it has (no emphasis, link, image, strikethrough nor raw HTML)."""
    [paragraph] = [t for t in MD.parseInline(inline) if t.type == "inline"]
    children = paragraph.children or []
    kinds = {c.type for c in children}
    assert kinds <= {"text", "code_inline"}, (inline, kinds)
    return "".join(c.content for c in children)


def _code_blocks(rendered: str) -> list[list[str]]:
    blocks = re.findall(r"<pre><code[^>]*>(.*?)</code></pre>", rendered, re.DOTALL)
    return [html.unescape(b).splitlines() for b in blocks]


def _text_of(rendered: str) -> str:
    """The rendered page's text, as a reader sees it."""
    return html.unescape(re.sub(r"<[^>]+>", "", rendered))


def _assert_reads_as_written(markdown: str, document: Any) -> str:
    """``markdown`` shows every string of ``document`` (its JSON) as written; returns the
    rendered HTML."""
    # The source: nothing escaped that Markdown would not act on.
    assert "&lt;" not in markdown
    assert "\\`" not in markdown
    assert not re.search(r"[A-Za-z0-9]\\_[A-Za-z0-9]", markdown), "an intraword _ escaped"
    rendered: str = MD.render(markdown)
    text = _text_of(rendered)
    # Nothing escaped twice: no entity nor backslash escape left for the reader.
    assert not re.search(r"&(lt|gt|amp|quot);", text)
    assert not re.search(r"\\[_`*<>\[\]]", text)
    # Each code span of the document's text renders as code, exactly.
    spans = {m for s in _strings(document) for m in CODE_SPAN.findall(s)}
    for span in spans:
        assert f"<code>{html.escape(span, quote=False)}</code>" in rendered, span
    return rendered


@pytest.mark.parametrize("fixture", FIXTURES, ids=lambda p: p.stem)
def test_check_markdown_reads_as_written(fixture: Any, capsys: pytest.CaptureFixture[str]) -> None:
    facts = ["--facts", str(fixture)]
    markdown = run(["check", *facts, "-f", "markdown"], capsys).out
    document = json.loads(run(["check", *facts, "-f", "json"], capsys).out)
    rendered = _assert_reads_as_written(markdown, document)
    # Each remedy's commands: lines of a code block, exactly.
    blocks = _code_blocks(rendered)
    for result in document["results"]:
        remedy = result.get("remedy")
        if result["status"] in ("warn", "fail") and remedy and remedy["commands"]:
            assert any(block == remedy["commands"] for block in blocks), result["id"]
    hostname = document["host"]["hostname"]
    if hostname:
        assert f"<code>{html.escape(hostname, quote=False)}</code>" in rendered


@pytest.mark.parametrize("example", EXAMPLES)
def test_recommend_markdown_reads_as_written(
    example: str, capsys: pytest.CaptureFixture[str]
) -> None:
    # Piped: Markdown without asking (a terminal gets the rich view).
    markdown = run(["recommend", "--example", example], capsys).out
    document = json.loads(run(["recommend", "--example", example, "-f", "json"], capsys).out)
    rendered = _assert_reads_as_written(markdown, document)
    blocks = _code_blocks(rendered)
    for action in document["actions"]:
        for commands in (action["commands"], action["verify"]):
            if commands:
                assert commands in blocks, action["id"]
    assert f"<code>{html.escape(document['host']['hostname'], quote=False)}</code>" in rendered


def test_fleet_and_bench_markdown_read_as_written(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (
        ["fleet", "--example", "lab"],
        ["bench", "--example", "max-num-seqs-1", "--resamples", "200"],
    ):
        markdown = run([*argv, "-f", "markdown"], capsys).out
        document = json.loads(run([*argv, "-f", "json"], capsys).out)
        rendered = _assert_reads_as_written(markdown, document)
        if argv[0] == "fleet":
            for group in document["groups"]:
                for command in (group.get("remedy") or {}).get("commands", []):
                    assert f"<code>{html.escape(command, quote=False)}</code>" in rendered


def test_every_text_of_the_reports_renders_as_itself(capsys: pytest.CaptureFixture[str]) -> None:
    # Titles, summaries, evidence, remedies, notes: each string placed as prose shows as
    # written, its `code` spans as code (their backticks the only characters not shown).
    strings: set[str] = set()
    for fixture in FIXTURES:
        strings |= set(
            _strings(json.loads(run(["check", "--facts", str(fixture), "-f", "json"], capsys).out))
        )
    for example in EXAMPLES:
        doc = json.loads(run(["recommend", "--example", example, "-f", "json"], capsys).out)
        strings |= set(_strings(doc))
    checked = 0
    for s in sorted(strings):
        if "\n" in s or "``" in s or s.count("`") % 2:
            continue
        assert _shown(prose(s)) == CODE_SPAN.sub(r"\1", s.strip(" \t")), s
        checked += 1
    assert checked > 500


# Text with every character Markdown may act on, and the words around them.
MARKDOWN_TEXT = st.lists(
    st.sampled_from([*"ab1_*~[]()!<>/&#;:-+=.\\|\"' ", "http:", "x@y.z", "&amp;", "`"]),
    max_size=30,
).map("".join)


@given(text=MARKDOWN_TEXT)
def test_prose_shows_any_text_as_typed(text: str) -> None:
    expected = text.strip(" \t")
    if not expected or "`" in expected:  # code spans: the test above, on real text
        return
    assert _shown(prose(text)) == expected
