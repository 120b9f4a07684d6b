"""A measured shape's samples held as columns (report/sample_table.py): read back as the
same RequestSample objects, the same metrics to the last bit, the same JSON byte for byte,
and a few hundred bytes a request instead of kilobytes; past a bound every column
(report/column.py) goes on in an unnamed temporary file, read back bit for bit.

The end-to-end figures (peak RSS of `bench --trace` at 10,000 to 160,000 requests) are
benchmarks/bench_client.py's --memory (RSS also counts the sender's sockets, as many as
requests were in flight, which is how fast the machine sends). Asserted here, by tracemalloc:
the table's own allocations, and the Python heap that the package's own code holds over a
real `bench --trace` against the benchmark's instant server, for N and 4N requests."""

from __future__ import annotations

import contextlib
import gc
import importlib.util
import io
import json
import math
import pickle
import random
import socket
import struct
import subprocess
import sys
import tempfile
import tracemalloc
from array import array
from collections.abc import Iterator, Sequence
from pathlib import Path
from typing import IO, Any

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.render.bench import encode, encode_parts
from blackwell_doctor.render.common import json_chunks, json_document
from blackwell_doctor.report.bench import BenchRun, RequestSample, ShapeResult, decode_run
from blackwell_doctor.report.bench_metrics import shape_metrics, stats_ms
from blackwell_doctor.report.sample_table import SampleTable
from blackwell_doctor.report.stats import Ascending, percentile, rank_points, spilling
from tests.conftest import FIXTURES, skip_without

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

# Times as a clock gives them: 0, or at least a nanosecond (in milliseconds).
times = st.one_of(st.just(0.0), st.floats(min_value=1e-6, max_value=1e6))
counts = st.one_of(st.none(), st.integers(min_value=0, max_value=1 << 40))
text = st.text(max_size=12)


@st.composite
def samples(draw: st.DrawFn) -> RequestSample:
    ok = draw(st.booleans())
    return RequestSample(
        ok=ok,
        error=None if ok else draw(st.sampled_from(["stalled", "early_close", "http_5xx"])),
        detail=None if ok else draw(text),
        start_ms=draw(times),
        ttft_ms=draw(times) if ok else draw(st.one_of(st.none(), times)),
        e2e_ms=draw(times) if ok else None,
        # A failed request keeps no gaps when measured; a document may still carry some.
        itl_ms=draw(st.lists(times, max_size=6)) if ok or draw(st.booleans()) else [],
        prompt_tokens=draw(counts),
        output_tokens=draw(counts),
        reasoning_tokens=draw(counts),
        degenerate=draw(st.one_of(st.none(), st.sampled_from(["'!' repeated 20 times", "x"]))),
        turn=draw(st.one_of(st.none(), st.integers(min_value=1, max_value=9))),
    )


def table_of(items: Sequence[RequestSample]) -> SampleTable:
    table = SampleTable()
    for s in items:
        table.append(s)
    return table


@settings(max_examples=50, deadline=None)
@given(st.lists(samples(), max_size=20))
def test_a_table_reads_back_the_samples_it_was_given(items: list[RequestSample]) -> None:
    table = table_of(items)
    assert list(table) == items
    assert len(table) == len(items)
    assert table[-1:] == items[-1:]
    assert table.completed() == sum(1 for s in items if s.ok)
    order = list(reversed(range(len(items))))
    assert list(table.ordered(order)) == [items[i] for i in order]


@settings(max_examples=50, deadline=None)
@given(
    st.lists(samples(), max_size=20),
    st.data(),
    st.floats(min_value=0.0, max_value=100.0, allow_nan=False),
)
def test_metrics_of_a_table_are_those_of_its_samples(
    items: list[RequestSample], data: st.DataObject, duration: float
) -> None:
    estimates = data.draw(
        st.lists(
            st.one_of(st.none(), st.integers(min_value=0, max_value=50)),
            min_size=len(items),
            max_size=len(items),
        )
    )
    want = shape_metrics(
        items, duration_s=duration, reasoning_estimates=estimates, server_generation_tokens=None
    )
    got = shape_metrics(
        table_of(items),
        duration_s=duration,
        reasoning_estimates=estimates,
        server_generation_tokens=None,
    )
    assert msgspec.json.encode(got) == msgspec.json.encode(want)


def test_percentiles_of_many_values_are_read_in_eight_bytes_a_value_and_equal_sorted() -> None:
    rng = random.Random(7)
    values = [rng.lognormvariate(0, 2) for _ in range(150_001)] + [0.0, 0.0, 5e-324]
    ordered = sorted(values)
    many = Ascending(values)
    assert len(many) == len(values)
    for k in (0, 1, 2, 77_777, len(values) // 2, len(values) - 2, len(values) - 1):
        assert many[k] == ordered[k]
    for q in (50, 90, 95, 99):
        assert percentile(many, q) == percentile(ordered, q)
    # stats_ms takes them so past its chunk: the figures of sorted().
    few = stats_ms(values[:1000])
    assert few.p99 == percentile(sorted(values[:1000]), 99) * 1000.0
    assert stats_ms(values).p50 == percentile(ordered, 50) * 1000.0


def test_a_long_series_is_sorted_on_disk_not_copied_in_memory() -> None:
    """Inside spilling (a bench run's, app/bench.py's spill_sorted) the sorted chunks live
    in a temporary file: what the process keeps of 300,000 values is their positions, not
    8 bytes a value (2.4 MB); outside it, a pure caller's, they are kept in memory."""
    import tempfile
    from array import array

    from blackwell_doctor.report.stats import spilling

    values = array("d", (float((k * 7919) % 300_007) for k in range(300_000)))
    ordered = sorted(values)
    for spill, bound in ((True, 100_000), (False, 10_000_000)):
        tracemalloc.start()
        before = tracemalloc.get_traced_memory()[0]
        if spill:
            with spilling(tempfile.TemporaryFile):
                many = Ascending(values)
        else:
            many = Ascending(values)
        held = tracemalloc.get_traced_memory()[0] - before
        tracemalloc.stop()
        assert held < bound, (spill, held)
        if not spill:
            assert held > 2_000_000  # the 8-byte copy
        for q in (50, 90, 95, 99):
            assert percentile(many, q) == percentile(ordered, q)


def test_a_file_that_cannot_be_written_leaves_the_series_sorted_in_memory() -> None:
    from blackwell_doctor.report.stats import spilling

    def refused() -> IO[bytes]:
        raise OSError(28, "No space left on device")

    values = [float((k * 7919) % 1009) for k in range(140_000)]
    with spilling(refused):
        many = Ascending(values)
    ordered = sorted(values)
    for k in (0, 65_536, 99_999, 139_999):
        assert many[k] == ordered[k]


# A real run (the vLLM CPU server's fixture): its first shape carries the samples tried.
REAL = decode_run((FIXTURES / "bench" / "tiny-moe-vllm-cpu.json").read_bytes(), source="real")


def shape(samples_: Sequence[RequestSample], name: str = "s") -> ShapeResult:
    return msgspec.structs.replace(REAL.shapes[0], name=name, samples=samples_)


def bench_run() -> BenchRun:
    return REAL


@settings(max_examples=40, deadline=None)
@given(st.lists(samples(), max_size=12), st.lists(samples(), max_size=3))
def test_the_json_of_a_table_is_that_of_its_samples_byte_for_byte(
    first: list[RequestSample], second: list[RequestSample]
) -> None:
    as_lists = msgspec.structs.replace(bench_run(), shapes=[shape(first, "a"), shape(second)])
    as_tables = msgspec.structs.replace(
        bench_run(), shapes=[shape(table_of(first), "a"), shape(table_of(second))]
    )
    assert "".join(encode_parts(as_tables)) == encode(as_lists)
    assert encode(as_tables) == encode(as_lists)


def test_a_table_of_more_than_one_batch_is_written_as_one_list() -> None:
    items = [
        RequestSample(ok=True, start_ms=float(i), ttft_ms=1.0, e2e_ms=2.0, itl_ms=[0.5] * 3)
        for i in range(2500)
    ]
    doc = msgspec.structs.replace(bench_run(), shapes=[shape(table_of(items))])
    parts = list(json_chunks(doc))
    assert len(parts) > 3  # written a batch at a time
    assert "".join(parts) == json_document(msgspec.structs.replace(doc, shapes=[shape(items)]))
    assert len(json.loads("".join(parts))["shapes"][0]["samples"]) == 2500


def test_a_server_string_cannot_stand_for_a_table() -> None:
    # The stand-in carries a nonce of the call: a detail that spells one is only text.
    forged = RequestSample(
        ok=False, error="http_5xx", detail="\x00sample-table:0\x00", start_ms=1.0
    )
    doc = msgspec.structs.replace(
        bench_run(), shapes=[shape(table_of([forged]), "a"), shape(table_of([]))]
    )
    written = json.loads("".join(encode_parts(doc)))
    assert written["shapes"][0]["samples"][0]["detail"] == "\x00sample-table:0\x00"
    assert written["shapes"][1]["samples"] == []


def test_a_tables_strings_go_through_the_sanitiser() -> None:
    bad = RequestSample(ok=False, error="http_5xx", detail="lone \ud800 surrogate", start_ms=1.0)
    doc = msgspec.structs.replace(bench_run(), shapes=[shape(table_of([bad]))])
    assert encode(doc) == encode(msgspec.structs.replace(doc, shapes=[shape([bad])]))
    json.loads(encode(doc))  # written as the sanitiser shows it (UTF-8 cannot carry it)


def test_a_table_holds_a_request_of_16_tokens_in_under_200_bytes() -> None:
    # The columns of 10,000 requests of 15 token gaps each: 8 bytes a float or count,
    # no object per request (a RequestSample and its list took ~2.7 KB).
    one = RequestSample(
        ok=True,
        start_ms=1.5,
        ttft_ms=20.25,
        e2e_ms=80.5,
        itl_ms=[4.0 + k / 7 for k in range(15)],
        prompt_tokens=32,
        output_tokens=16,
        degenerate="'tok' repeated 16 times in a row (100% of the answer, whitespace removed)",
    )
    table = SampleTable()
    tracemalloc.start()
    before = tracemalloc.get_traced_memory()[0]
    for _ in range(10_000):
        table.append(one)
    held = tracemalloc.get_traced_memory()[0] - before
    tracemalloc.stop()
    per_request = held / 10_000
    assert per_request < 200, per_request
    assert not math.isnan(table[9_999].e2e_ms or math.nan)


@pytest.mark.parametrize("n", [0, 1, 65_536, 65_537])
def test_ascending_reads_every_size(n: int) -> None:
    values = [float((k * 7919) % 1009) for k in range(n)]
    many = Ascending(values)
    ordered = sorted(values)
    for k in {0, n // 3, n - 1} if n else set():
        assert many[k] == ordered[k]
    with pytest.raises(IndexError):
        many[n]


def test_rank_points_are_a_bounded_cdf_from_the_least_to_the_most() -> None:
    values = [float((k * 7919) % 100_003) for k in range(100_003)]
    points = rank_points(values, 201)
    ordered = sorted(values)
    assert len(points) == 201
    assert (points[0], points[-1], points[100]) == (ordered[0], ordered[-1], ordered[50_001])
    assert rank_points([3.0, 1.0], 201) == [1.0, 3.0]
    assert rank_points([], 201) == []


# --- past the bound: columns in a file (report/column.py) ----------------------------------


@contextlib.contextmanager
def small_bounds(
    kept: int, block: int, chunk: int | None = None, sort: int | None = None
) -> Iterator[None]:
    """Columns that keep ``kept`` values in memory and write ``block`` at a time (and, with
    ``chunk``, samples written as JSON and the live display's latencies ``chunk`` at a time,
    percentiles sorted ``sort`` (else ``chunk``) at a time): a few hundred requests then
    cross every bound a run of a million crosses."""
    from blackwell_doctor.app import bench
    from blackwell_doctor.render import common
    from blackwell_doctor.report import column, stats

    with pytest.MonkeyPatch.context() as mp:
        mp.setattr(column, "KEPT", kept)
        mp.setattr(column, "BLOCK", block)
        if chunk is not None:
            mp.setattr(stats, "_CHUNK", sort or chunk)
            mp.setattr(common, "_SAMPLE_BATCH", chunk)
            mp.setattr(bench, "LIVE_RECENT", chunk)  # the progress display's running p50
        yield


@settings(max_examples=40, deadline=None)
@given(
    st.lists(st.floats(allow_nan=False) | st.just(-0.0), max_size=80),
    st.integers(min_value=0, max_value=9),
    st.integers(min_value=1, max_value=7),
    st.data(),
)
def test_a_column_past_its_bound_reads_back_every_value_exactly(
    values: list[float], kept: int, block: int, data: st.DataObject
) -> None:
    from blackwell_doctor.report.column import Spill, floats

    with small_bounds(kept, block), tempfile.TemporaryFile() as f:
        column = floats(Spill(lambda: f), values)
        want = array("d", values)
        assert len(column) == len(want)
        assert array("d", column) == want  # a sequential pass, bit for bit (-0.0 included)
        assert [struct.pack("d", column[k]) for k in range(len(want))] == [
            struct.pack("d", v) for v in want
        ]
        start = data.draw(st.integers(min_value=0, max_value=len(want)))
        stop = data.draw(st.integers(min_value=start, max_value=len(want)))
        assert column.read(start, stop) == want[start:stop]
        assert column[start:stop] == want[start:stop]
        if want:
            k = data.draw(st.integers(min_value=0, max_value=len(want) - 1))
            column[k] = want[k] = 12.5  # written through to its block
            assert array("d", column) == want
            assert column[-1] == want[-1]
        if len(values) >= max(kept, 1) + block:  # past the bound: in the file
            assert f.seek(0, 2) >= 8 * block
        assert list(pickle.loads(pickle.dumps(column))) == list(want)


@settings(max_examples=40, deadline=None)
@given(st.lists(samples(), max_size=40))
def test_a_table_past_its_bound_reads_back_every_sample_and_the_same_metrics(
    items: list[RequestSample],
) -> None:
    with small_bounds(3, 2, chunk=4):
        spilled = SampleTable(spill=tempfile.TemporaryFile)
        for s in items:
            spilled.append(s)
        assert list(spilled) == items
        order = list(reversed(range(len(items))))
        assert list(spilled.ordered(order)) == [items[i] for i in order]
        estimates: list[int | None] = [None] * len(items)
        want = shape_metrics(
            items, duration_s=2.0, reasoning_estimates=estimates, server_generation_tokens=None
        )
        with spilling(tempfile.TemporaryFile):
            got = shape_metrics(
                spilled,
                duration_s=2.0,
                reasoning_estimates=estimates,
                server_generation_tokens=None,
            )
        assert msgspec.json.encode(got) == msgspec.json.encode(want)
        doc = msgspec.structs.replace(bench_run(), shapes=[shape(spilled)])
        assert encode(doc) == encode(msgspec.structs.replace(doc, shapes=[shape(items)]))


def test_a_spill_file_that_cannot_be_written_keeps_the_values_in_memory() -> None:
    from blackwell_doctor.report.column import Spill, ints

    def refused() -> IO[bytes]:
        raise OSError(28, "No space left on device")

    with small_bounds(4, 2):
        column = ints(Spill(refused), range(50))
        assert list(column) == list(range(50))
        assert column.read(3, 41) == array("q", range(3, 41))

    class Filling(io.BytesIO):  # room for three blocks of two, then a full disk
        def write(self, data: Any) -> int:
            if self.tell() + len(data) > 48:
                raise OSError(28, "No space left on device")
            return super().write(data)

    with small_bounds(4, 2):
        column = ints(Spill(Filling), range(50))
        assert list(column) == list(range(50))
        assert [column[k] for k in range(50)] == list(range(50))
        assert column.read(3, 41) == array("q", range(3, 41))


# --- the whole client: `bench --trace` against an instant server -----------------------------


def _instant_server() -> str:
    """benchmarks/bench_client.py's instant server (an asyncio protocol answering 16 tokens
    at once), its source."""
    spec = importlib.util.spec_from_file_location(
        "bench_client", Path(__file__).resolve().parents[1] / "benchmarks/bench_client.py"
    )
    assert spec is not None
    assert spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    source: str = module.SERVER
    return source


@pytest.fixture(scope="module")
def instant() -> Iterator[str]:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = subprocess.Popen(
        [sys.executable, "-c", _instant_server(), str(port), "16", "1"],
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert server.stdout is not None
        assert server.stdout.readline().split() == ["listening", str(port)]
        yield f"http://127.0.0.1:{port}"
    finally:
        server.kill()
        server.wait()


# Where the run's own allocations are made (the sender's sockets and buffers are aiohttp's and
# asyncio's, as many as requests were in flight at once: how fast this machine sends, not
# how many requests the run holds).
OURS = tracemalloc.Filter(True, "*/blackwell_doctor/*")


def _heap(url: str, tmp_path: Path, n: int, monkeypatch: pytest.MonkeyPatch) -> tuple[int, int]:
    """`bench --trace` of ``n`` requests 20 ms apart, sent by this process, under tracemalloc:
    the Python heap this package's own code holds once every request has ended (the
    measured requests, the trace, the schedule), and the heap's peak over building and
    writing the run document from them."""
    from blackwell_doctor.app import replay

    trace = tmp_path / f"even-{n}.jsonl"
    trace.write_text(
        "".join(
            json.dumps({"timestamp": 10 * i, "input_length": 32, "output_length": 16}) + "\n"
            for i in range(n)
        )
    )
    seen: dict[str, int] = {}
    build = replay.build_document

    def measured(state: Any, run: Any, *, interrupted: bool) -> Any:
        # What is held, not what awaits the cycle collector: without this, 1 run in a few
        # under pytest-xdist counted ~40 KB more at 400 requests than at 100 (.ci/run 24).
        gc.collect()
        held = tracemalloc.take_snapshot().filter_traces([OURS])
        seen["held"] = sum(stat.size for stat in held.statistics("filename"))
        seen["before"] = tracemalloc.get_traced_memory()[0]
        tracemalloc.reset_peak()
        return build(state, run, interrupted=interrupted)

    monkeypatch.setattr(replay, "build_document", measured)
    out = tmp_path / f"run-{n}.json"
    argv = ["bench", "--url", url, "--model", "m", "--trace", str(trace)]
    tracemalloc.start()
    try:
        code = main([*argv, "--client-processes", "1", "-f", "json", "-o", str(out)])
        peak = tracemalloc.get_traced_memory()[1] - seen["before"]
    finally:
        tracemalloc.stop()
    doc = json.loads(out.read_text())
    assert code in (0, 1), doc  # 1: a serving finding about the instant server itself
    assert (doc["trace"]["sent"], doc["shapes"][0]["completed"]) == (n, n)
    return seen["held"], peak


def test_the_bench_processes_heap_is_flat_in_the_number_of_requests(
    instant: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Every per-request column (the trace's, the schedule's, the measured requests', the
    document's order and lateness, the series of each percentile) past its first values
    lives in a file: 4x the requests leave the heap where it was. The bounds are scaled down
    (32 values in memory, 16 a block, samples written 32 at a time, percentiles sorted 256
    at a time) so that 100 and 400 requests cross them as a run of a million crosses the
    real ones."""
    with small_bounds(32, 16, chunk=32, sort=256):  # (sorted 32 at a time: minutes of seeks)
        _heap(instant, tmp_path, 20, monkeypatch)  # the run's imports and caches, once
        few = _heap(instant, tmp_path, 100, monkeypatch)
        many = _heap(instant, tmp_path, 400, monkeypatch)
    # Before the columns spilled, the 300 more requests held ~90 KB more (~300 bytes each:
    # the trace's and the senders' arrays, the samples' columns); now what grows is each
    # column's list of its blocks in the file (8 bytes a block) and the schedule's lateness.
    assert many[0] - few[0] < 30_000, (few, many)
    assert many[1] - few[1] < 100_000, (few, many)
