"""Property tests: arbitrary bytes never crash the scanner, and line numbers hold."""

from __future__ import annotations

from blackwell_doctor.collect.logs.matcher import CHUNK_BYTES, SourceScanner
from blackwell_doctor.ruledata.logs import load_catalogue
from tests.conftest import skip_without

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

_CAT = load_catalogue()
# Bytes with a good chance of containing signatures, newlines, CR, NUL, ESC and bad UTF-8.
_PIECES = st.one_of(
    st.binary(max_size=64),
    st.sampled_from([*_CAT.literals, b"\n", b"\r\n", b"\x00", b"\x1b[31m", b"\xff\xfe", b"\xc3"]),
    st.sampled_from([b"[Autotuner]: Skipping tactic <x> 1, due to failure while profiling: "]),
)
_DATA = st.lists(_PIECES, max_size=60).map(b"".join)


def _scan(data: bytes, cuts: list[int]) -> SourceScanner:
    scanner = SourceScanner(_CAT, "fuzz")
    last = 0
    for cut in sorted(c % (len(data) + 1) for c in cuts):
        scanner.feed(data[last:cut])
        last = cut
    scanner.feed(data[last:])
    return scanner


@settings(max_examples=300, deadline=None)
@given(_DATA, st.lists(st.integers(min_value=0), max_size=6))
def test_arbitrary_bytes_never_raise_and_lines_are_consistent(data: bytes, cuts: list[int]) -> None:
    scanner = _scan(data, cuts)
    findings = scanner.finish()
    lines = data.count(b"\n") + (1 if data and not data.endswith(b"\n") else 0)
    assert scanner.lines == lines
    assert scanner.size == len(data)
    for f in findings:
        assert 1 <= f.line <= f.last_line <= max(lines, 1)
        assert f.count >= 1
        assert scanner.catalogue.entry(f.signature) is not None
        assert "\x1b" not in f.excerpt
        assert "\x00" not in f.excerpt


@settings(max_examples=150, deadline=None)
@given(_DATA, st.lists(st.integers(min_value=0), max_size=6))
def test_chunking_never_changes_the_findings(data: bytes, cuts: list[int]) -> None:
    whole = SourceScanner(_CAT, "fuzz")
    whole.feed(data)
    assert _scan(data, cuts).finish() == whole.finish()


@settings(max_examples=100, deadline=None)
@given(_DATA)
def test_both_engines_agree(data: bytes) -> None:
    results = []
    for engine in ("hyperscan", "re2", "find"):
        scanner = SourceScanner(_CAT, "fuzz", engine=engine)
        scanner.feed(data)
        results.append(scanner.finish())
    assert results[0] == results[1] == results[2]


@settings(max_examples=15, deadline=None)
@given(st.lists(st.tuples(st.integers(0, 3 * 2**20), st.sampled_from(_CAT.literals)), max_size=12))
def test_a_region_of_megabytes_finds_the_same_lines_with_every_engine(
    planted: list[tuple[int, bytes]],
) -> None:
    """A region larger than the sources' chunks fed whole (a library caller's block): the
    same findings and line numbers from Hyperscan as from the stdlib engine, also for hits
    right at the edges of 64 KiB blocks (where the newline count was once split)."""
    filler = bytearray(b"INFO step ok, nothing to see\n" * (3 * 2**20 // 29))
    for at, literal in planted:
        at = at - at % (64 << 10) if at % 3 == 0 else at  # some at a block's start
        filler[at : at + len(literal) + 2] = b"\n" + literal + b"\n"
    data = bytes(filler)
    assert len(data) >= 2 * CHUNK_BYTES
    results, lines = [], []
    for engine in ("hyperscan", "find"):
        scanner = SourceScanner(_CAT, "big", engine=engine)
        scanner.feed(data)
        results.append(scanner.finish())
        lines.append(scanner.lines)
    assert results[0] == results[1]
    assert lines[0] == lines[1] == data.count(b"\n")
