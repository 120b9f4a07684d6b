"""The one sanitising step tells a document with nothing to clean from its JSON in one pass
(issue 24: a fleet of 10,000 nodes was walked string by string): it must answer exactly what
the walk answers, for every cleaner and every character the cleaners care about."""

from __future__ import annotations

import msgspec

from blackwell_doctor.report.results import Status
from blackwell_doctor.report.sanitize import (
    _nothing_to_clean,
    _scrub,
    json_safe,
    sanitize,
    sanitize_line,
    scrub,
)
from tests.conftest import skip_without

try:
    from hypothesis import example, given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

CLEANERS = [json_safe, sanitize, sanitize_line]

# Every class of character some cleaner changes or JSON escapes, and plain text around them.
SPECIAL = (
    "\x00\x01\x08\t\n\x0b\x0c\r\x1b\x1f\x7f\x80\x85\x9f\xa0"
    '"\\/bfnrtu'
    "\u200d\u200e\u200f\u2028\u202a\u202e\u202f\u2065\u2066\u2069\u206a"
    "\ud800\udcff\udfff\ufffd\ufffe\uffff\U0001f600"
)
TEXT = st.text(alphabet=st.sampled_from(SPECIAL) | st.characters(), max_size=12)


class Leaf(msgspec.Struct):
    name: str
    status: Status
    count: int
    note: str | None = None


class Doc(msgspec.Struct):
    title: str
    leaves: list[Leaf]
    labels: dict[str, str]
    pair: tuple[str, float]


DOCS = st.builds(
    Doc,
    title=TEXT,
    leaves=st.lists(
        st.builds(
            Leaf, name=TEXT, status=st.sampled_from(Status), count=st.integers(), note=st.none()
        ),
        max_size=4,
    ),
    labels=st.dictionaries(TEXT, TEXT, max_size=3),
    pair=st.tuples(TEXT, st.floats(allow_nan=False)),
)


@settings(max_examples=400, deadline=None)
@given(DOCS)
@example(Doc(title="C:\\users\\b", leaves=[], labels={}, pair=("", 0.0)))
@example(Doc(title="plain", leaves=[], labels={"k\n": "v"}, pair=("\u202e", 1.0)))
def test_the_one_pass_answers_what_the_walk_answers(doc: Doc) -> None:
    for clean in CLEANERS:
        walked = _scrub(doc, clean)
        scrubbed = scrub(doc, clean)
        assert scrubbed == walked
        if _nothing_to_clean(doc, clean):
            assert walked is doc  # the walk changed nothing either


def test_a_clean_document_is_told_in_one_pass_and_a_dirty_one_is_not() -> None:
    clean = Doc(
        title="node 7 ü", leaves=[Leaf("a", Status.FAIL, 1)], labels={"k": "v"}, pair=("x", 1.5)
    )
    for cleaner in CLEANERS:
        assert _nothing_to_clean(clean, cleaner)
        assert scrub(clean, cleaner) is clean
    newline = msgspec.structs.replace(clean, title="a\nFORGED")
    assert _nothing_to_clean(newline, sanitize)
    assert _nothing_to_clean(newline, json_safe)
    assert not _nothing_to_clean(newline, sanitize_line)
    assert scrub(newline, sanitize_line).title == "a\\nFORGED"
    surrogate = msgspec.structs.replace(clean, labels={"k": "\udcff"})
    assert not _nothing_to_clean(surrogate, json_safe)
    assert scrub(surrogate, json_safe).labels == {"k": "\\xff"}
    bidi = msgspec.structs.replace(clean, pair=("\u202eevil", 0.0))
    assert _nothing_to_clean(bidi, json_safe)
    assert not _nothing_to_clean(bidi, sanitize)


def test_every_character_up_to_u2100_and_the_specials_alone() -> None:
    # One character in a plain document, for every code point a cleaner or JSON treats
    # specially (C0, DEL, C1, the bidi marks, surrogates, U+FFFE/U+FFFF) and their neighbours.
    points = [*range(0x2100), *range(0xD7F0, 0xE010), *range(0xFFF0, 0x10000), 0x1F600]
    for point in points:
        for text in (chr(point), f"a{chr(point)}b\\"):
            doc = Doc(title="t", leaves=[Leaf(text, Status.WARN, 0)], labels={}, pair=("", 0.0))
            for clean in CLEANERS:
                assert scrub(doc, clean) == _scrub(doc, clean), (hex(point), clean.__name__)
