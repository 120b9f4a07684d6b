"""`bench` logic that needs no real server: vLLM's arithmetic, the SSE client against
misbehaving streams no real server produces on demand, the compare statistics, and the
command-line contract (bad input, secrets). The real-vLLM tests are test_bench_vllm.py."""

from __future__ import annotations

import asyncio
import json
import threading
from collections.abc import Awaitable, Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.render.bench import encode
from blackwell_doctor.report.bench import (
    BenchRun,
    EquivalenceOutput,
    RequestSample,
    ShapeResult,
    decode_run,
)
from blackwell_doctor.report.bench_metrics import shape_metrics, tpot_s
from blackwell_doctor.report.stats import percentile
from blackwell_doctor.ruledata.shapes import BUILTIN_SHAPES, ShapeError, parse_shapes
from blackwell_doctor.rules.compare import compare
from tests.benchdocs import bench_run
from tests.conftest import skip_without

try:
    import aiohttp
    from aiohttp import web

    from blackwell_doctor.app.bench import parse_url
    from blackwell_doctor.collect.bench import client
except ModuleNotFoundError as exc:
    skip_without(exc)

# --- vLLM's definitions ------------------------------------------------------------------


@pytest.mark.parametrize(
    ("values", "p", "expected"),
    [
        # numpy.percentile(values, p) with the default linear method, worked by hand:
        # rank = (n - 1) * p / 100, interpolated between its neighbours.
        ([1.0, 2.0, 3.0, 4.0], 50, 2.5),
        ([1.0, 2.0, 3.0, 4.0], 90, 3.7),
        ([1.0, 2.0, 3.0, 4.0], 99, 3.97),
        ([5.0], 99, 5.0),
        ([0.0, 10.0], 95, 9.5),
    ],
)
def test_percentiles_are_numpys_linear_method(
    values: list[float], p: float, expected: float
) -> None:
    assert percentile(values, p) == pytest.approx(expected)


def sample(**kw: Any) -> RequestSample:
    base: dict[str, Any] = {"ok": True, "ttft_ms": 100.0, "e2e_ms": 1000.0, "itl_ms": [100.0] * 9}
    base.update(kw)
    return RequestSample(**base)


def test_tpot_is_latency_after_the_first_token_over_the_remaining_tokens() -> None:
    # vLLM: (latency - ttft) / (output_len - 1), only when output_len > 1.
    assert tpot_s(sample(output_tokens=10)) == pytest.approx(0.1)
    assert tpot_s(sample(output_tokens=1)) is None
    # Output tokens come from usage, not chunks: 4 chunks may carry 19 tokens.
    assert tpot_s(sample(output_tokens=19, itl_ms=[300.0] * 3)) == pytest.approx(0.05)


def test_shape_metrics_count_usage_tokens_and_keep_reasoning_apart() -> None:
    samples = [
        sample(output_tokens=10, reasoning_tokens=4),
        sample(output_tokens=10, reasoning_tokens=6, ttft_ms=300.0),
        RequestSample(ok=False, error=client.STALLED, detail="x"),
    ]
    m = shape_metrics(
        samples,
        duration_s=2.0,
        reasoning_estimates=[None, None, None],
        server_generation_tokens=20.0,
    )
    assert (m.output_tokens, m.reasoning_tokens, m.answer_tokens) == (20, 10, 10)
    assert m.output_tokens_per_s == 10.0  # all output tokens / the shape's duration
    assert m.answer_tokens_per_s == 5.0  # thinking excluded
    assert m.requests_per_s == 1.0  # successful requests only
    assert m.ttft_ms.mean == 200.0
    assert m.ttft_ms.p50 == 200.0
    assert m.itl_ms.p99 == 100.0  # pooled over both requests
    assert (m.token_source, m.reasoning_source) == ("usage", "usage")


def test_a_server_without_usage_gives_estimated_counts() -> None:
    m = shape_metrics(
        [sample(output_tokens=None)],
        duration_s=1.0,
        reasoning_estimates=[3],
        server_generation_tokens=None,
    )
    assert m.output_tokens == 10  # 1 + 9 intervals: chunks, labelled as such
    assert m.token_source == "estimated"
    assert m.reasoning_tokens == 3
    assert m.reasoning_source == "estimated"


# --- the streaming client against misbehaving servers -----------------------------------


Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


@pytest.fixture
def serve() -> Iterator[Callable[[Handler], str]]:
    """Start an aiohttp server on 127.0.0.1 in a thread; yields a function that installs a
    handler for /v1/chat/completions (and a minimal /v1/models) and returns the base URL."""
    loop = asyncio.new_event_loop()
    thread = threading.Thread(target=loop.run_forever, daemon=True)
    thread.start()
    runners: list[web.AppRunner] = []

    def start(handler: Handler) -> str:
        async def models(_: web.Request) -> web.Response:
            return web.json_response({"data": [{"id": "fake", "max_model_len": 4096}]})

        async def up() -> str:
            app = web.Application()
            app.router.add_post("/v1/chat/completions", handler)
            app.router.add_get("/v1/models", models)
            runner = web.AppRunner(app)
            await runner.setup()
            site = web.TCPSite(runner, "127.0.0.1", 0)
            await site.start()
            runners.append(runner)
            port = runner.addresses[0][1]
            return f"http://127.0.0.1:{port}"

        return asyncio.run_coroutine_threadsafe(up(), loop).result(10)

    yield start
    for runner in runners:
        asyncio.run_coroutine_threadsafe(runner.cleanup(), loop).result(10)
    loop.call_soon_threadsafe(loop.stop)
    thread.join(10)


def stream_of(*pieces: bytes, delay: float = 0.0) -> Handler:
    async def handler(request: web.Request) -> web.StreamResponse:
        await request.read()
        response = web.StreamResponse(headers={"Content-Type": "text/event-stream"})
        await response.prepare(request)
        for piece in pieces:
            await response.write(piece)
            if delay:
                await asyncio.sleep(delay)
        await response.write_eof()
        return response

    return handler


def chunk(**delta: str) -> bytes:
    return json.dumps({"choices": [{"index": 0, "delta": delta}]}).encode()


USAGE = json.dumps(
    {
        "choices": [],
        "usage": {
            "prompt_tokens": 5,
            "completion_tokens": 7,
            "completion_tokens_details": {"reasoning_tokens": 2},
        },
    }
).encode()


def fetch(url: str, deadline: float = 5.0) -> client.Outcome:
    async def go() -> client.Outcome:
        async with aiohttp.ClientSession() as session:
            body = client.request_body(model="fake", prompt="hi", max_tokens=7, ignore_eos=True)
            return await client.stream_chat(
                session, url + "/v1/chat/completions", body, {}, deadline_s=deadline
            )

    return asyncio.run(go())


def test_sse_framing_split_anywhere_crlf_comments_and_multiline_data(
    serve: Callable[[Handler], str],
) -> None:
    events = (
        b": keep-alive comment\r\n\r\n"
        + b"data: "
        + chunk(role="assistant", content="")
        + b"\r\n\r\n"
        + b"data: "
        + chunk(reasoning="think")
        + b"\n\n"
        + b"data:"
        + chunk(content="Hel")
        + b"\n\n"  # no space after the colon
        + b'data: {"choices": [{"index": 0,\ndata: "delta": {"content": "lo"}}]}\n\n'
        + b"data: "
        + USAGE
        + b"\n\n"
        + b"data: [DONE]\n\n"
    )
    # Split into 3-byte pieces: every boundary (inside "data:", inside \r\n, inside JSON).
    pieces = [events[i : i + 3] for i in range(0, len(events), 3)]
    out = fetch(serve(stream_of(*pieces)))
    assert out.ok, out.detail
    assert out.text == "Hello"
    assert out.reasoning_text == "think"
    assert (out.prompt_tokens, out.completion_tokens, out.reasoning_tokens) == (5, 7, 2)
    assert len(out.itl_s) == 3  # 4 token chunks: TTFT + 3 intervals (the role chunk counts)
    assert out.ttft_s is not None
    assert out.latency_s is not None
    assert out.latency_s >= out.ttft_s + sum(out.itl_s) - 1e-9


@pytest.mark.parametrize(
    ("pieces", "kind"),
    [
        ((b"data: " + chunk(content="a") + b"\n\n", b"data: {not json}\n\n"), client.MALFORMED_SSE),
        ((b"data: " + chunk(content="a") + b"\n\n",), client.EARLY_CLOSE),  # no [DONE]
        ((b'data: {"error": {"message": "engine dead", "code": 500}}\n\n',), client.STREAM_ERROR),
        ((b"data: " + USAGE + b"\n\n", b"data: [DONE]\n\n"), client.NO_TOKENS),
    ],
)
def test_broken_streams_are_named_errors(
    serve: Callable[[Handler], str], pieces: tuple[bytes, ...], kind: str
) -> None:
    out = fetch(serve(stream_of(*pieces)))
    assert not out.ok
    assert out.error == kind


def test_http_errors_are_named_by_class(serve: Callable[[Handler], str]) -> None:
    async def busy(request: web.Request) -> web.Response:
        return web.Response(status=503, text="overloaded")

    out = fetch(serve(busy))
    assert (out.error, out.detail) == (client.HTTP_5XX, "HTTP 503: overloaded")


def test_a_stream_that_stalls_hits_the_deadline(serve: Callable[[Handler], str]) -> None:
    url = serve(stream_of(b"data: " + chunk(content="a") + b"\n\n", b"", delay=3.0))
    out = fetch(url, deadline=0.5)
    assert out.error == client.STALLED
    assert "0.5 s deadline" in (out.detail or "")


class OneAnswerPerConnection:
    """A raw HTTP/1.1 server (asyncio streams, in a thread) that answers the first request of
    each connection with a complete SSE stream and keeps the connection open; a later request
    on it (``close_reused``), or every request (``close_all``), is read and the connection
    closed without an answer: what a client that reuses connections meets when the server
    closes one as the request is written (uvicorn's keep-alive timeout)."""

    def __init__(self, *, close_all: bool = False, dies: bool = False) -> None:
        self.close_all = close_all
        self.dies = dies  # stops listening as it closes the first connection unanswered
        self.connections = 0
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        self.server = asyncio.run_coroutine_threadsafe(
            asyncio.start_server(self.handle, "127.0.0.1", 0), self.loop
        ).result(10)
        self.url = f"http://127.0.0.1:{self.server.sockets[0].getsockname()[1]}"

    async def handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self.connections += 1
        answered = 0
        while True:
            try:
                head = await reader.readuntil(b"\r\n\r\n")
            except (asyncio.IncompleteReadError, ConnectionError):
                break
            length = 0
            for line in head.split(b"\r\n"):
                name, _, value = line.partition(b":")
                if name.strip().lower() == b"content-length":
                    length = int(value)
            await reader.readexactly(length)
            if self.close_all or answered:
                if self.dies:
                    self.server.close()  # a server killed with the request read: refused next
                break  # read whole, then closed: a FIN, no answer
            body = b"data: " + chunk(content="ok") + b"\n\n" + b"data: " + USAGE + b"\n\n"
            body += b"data: [DONE]\n\n"
            writer.write(
                b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n"
                + f"{len(body):x}\r\n".encode()
                + body
                + b"\r\n0\r\n\r\n"
            )
            await writer.drain()
            answered += 1
        writer.close()

    def close(self) -> None:
        self.server.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join(10)


def fetch_in_turn(url: str, count: int) -> list[client.Outcome]:
    """``count`` requests one after the other through one session of bench's pool."""

    async def go() -> list[client.Outcome]:
        async with aiohttp.ClientSession(connector=client.Pool(4)) as session:
            body = client.request_body(model="fake", prompt="hi", max_tokens=7, ignore_eos=True)
            return [
                await client.stream_chat(
                    session, url + "/v1/chat/completions", body, {}, deadline_s=5.0
                )
                for _ in range(count)
            ]

    return asyncio.run(go())


def test_a_reused_connection_closed_before_an_answer_is_written_again_on_a_new_one() -> None:
    # The failure of CI on eb7fa0e (ecd6614): a request written on a pooled keep-alive
    # connection that the server closed got "Server disconnected" and was counted failed.
    server = OneAnswerPerConnection()
    try:
        first, second, third = fetch_in_turn(server.url, 3)
    finally:
        server.close()
    assert (first.ok, first.resent) == (True, 0)
    # Each later request met the connection its predecessor left, closed unanswered, and
    # was answered on a new one, timed from its first attempt.
    for later in (second, third):
        assert (later.ok, later.resent, later.text) == (True, 1, "ok"), later
        assert later.ttft_s is not None
        assert later.latency_s is not None
    assert server.connections == 3


def test_a_new_connection_closed_before_an_answer_is_the_requests_failure() -> None:
    # What vLLM's benchmark counts failed is counted failed: a server that closes a fresh
    # connection unanswered is not asked again.
    server = OneAnswerPerConnection(close_all=True)
    try:
        (only,) = fetch_in_turn(server.url, 1)
    finally:
        server.close()
    assert (only.ok, only.error, only.resent) == (False, client.EARLY_CLOSE, 0)
    assert "before answering" in (only.detail or "")
    assert server.connections == 1


def test_a_resend_that_finds_no_server_keeps_the_close_it_met() -> None:
    # CI at bfb2f62: a vLLM server killed mid-run had read its two in-flight requests and
    # closed their reused connections unanswered; each was written again, refused, and
    # counted "unreachable" instead of the early close it met.
    server = OneAnswerPerConnection(dies=True)
    try:
        first, second = fetch_in_turn(server.url, 2)
    finally:
        server.close()
    assert (first.ok, first.resent) == (True, 0)
    assert (second.ok, second.error, second.resent) == (False, client.EARLY_CLOSE, 1), second
    assert server.connections == 1


# --- the command line --------------------------------------------------------------------


def test_the_api_key_is_sent_and_never_echoed(
    serve: Callable[[Handler], str],
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    seen: list[str] = []

    async def handler(request: web.Request) -> web.StreamResponse:
        seen.append(request.headers.get("Authorization", ""))
        return await stream_of(
            b"data: " + chunk(content="ok") + b"\n\n",
            b"data: " + USAGE + b"\n\n",
            b"data: [DONE]\n\n",
        )(request)

    url = serve(handler)
    secret = "sk-test-0123456789abcdefghijklmnop"
    monkeypatch.setenv("OPENAI_API_KEY", secret)
    shapes = tmp_path / "s.toml"
    shapes.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nrequests = 2\n")
    out = tmp_path / "run.json"
    url_with_password = url.replace("http://", "http://user:hunter2pw@")
    code = main(
        [
            "bench",
            "--url",
            url_with_password,
            "--shapes",
            str(shapes),
            "--shape",
            "one",
            "-o",
            str(out),
        ]
    )
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert seen
    assert all(h == f"Bearer {secret}" for h in seen)
    written = out.read_text()
    for text in (captured.out, captured.err, written):
        assert secret not in text
        assert "hunter2pw" not in text
    assert json.loads(written)["server"]["url"] == url


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["bench"], "bench needs --url"),
        (["bench", "--url", "ftp://x"], "must be an http:// or https:// URL"),
        (["bench", "--url", "http://127.0.0.1:1", "--shape", "nope"], "unknown shape 'nope'"),
        (["bench", "--url", "http://x", "--fail-on-regression", "5"], "applies to --compare"),
        (["bench", "--compare", "a.json", "b.json", "--url", "http://x"], "does not take --url"),
        (["bench", "--compare", "/nonexistent/a.json", "b.json"], "cannot read"),
    ],
)
def test_bad_input_is_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def test_a_bad_shapes_file_is_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "bad.toml"
    bad.write_text("[shape.x]\ninput_tokens = 0\noutput_tokens = 4\n")
    assert main(["bench", "--url", "http://127.0.0.1:1", "--shapes", str(bad)]) == 2
    assert "input_tokens = 0 is outside" in capsys.readouterr().err
    bad.write_text("[shape.x]\ninput_tokens = 4\noutput_tokens = 4\ncolour = 'red'\n")
    with pytest.raises(ShapeError, match="colour"):
        parse_shapes(bad.read_text(), source=str(bad))


def test_a_file_that_is_not_a_run_is_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    other = tmp_path / "facts.json"
    other.write_text('{"schema_version": 7}')
    assert main(["bench", "--compare", str(other), str(other)]) == 2
    assert "not a bench run of schema_version 1 or 2" in capsys.readouterr().err


def test_url_forms() -> None:
    assert parse_url("http://h:8000/v1/").base == "http://h:8000"
    assert parse_url("https://h/prefix").base == "https://h/prefix"
    endpoint = parse_url("http://me:pw@h:1")
    assert endpoint.display == "http://h:1"
    assert endpoint.authorization == "Basic bWU6cHc="  # base64("me:pw"), RFC 7617


def test_builtin_shapes_are_the_three_of_the_checklist() -> None:
    assert list(BUILTIN_SHAPES) == ["short", "long", "concurrent"]
    assert BUILTIN_SHAPES["long"].input_tokens >= 8192
    assert BUILTIN_SHAPES["concurrent"].concurrency >= 8


# --- compare ------------------------------------------------------------------------------


def run_doc(scale: float, *, text: str = "one two three", n: int = 40) -> BenchRun:
    samples = [
        RequestSample(
            ok=True,
            ttft_ms=scale * (50.0 + i % 7),
            e2e_ms=scale * (500.0 + 3 * (i % 11)),
            itl_ms=[scale * (10.0 + (i + k) % 5) for k in range(30)],
            output_tokens=31,
        )
        for i in range(n)
    ]
    m = shape_metrics(
        samples,
        duration_s=scale * 10.0,
        reasoning_estimates=[None] * n,
        server_generation_tokens=None,
    )
    shape = ShapeResult(
        name="s",
        description="",
        concurrency=4,
        input_tokens=64,
        input_tokens_requested=64,
        input_size_source="tokenize",
        output_tokens_max=31,
        requests=n,
        completed=n,
        errors={},
        duration_s=10.0,
        complete=True,
        metrics=m,
        server=None,
        equivalence=[EquivalenceOutput(prompt_id="count", ok=True, text=text)],
        samples=samples,
        notes=[],
    )
    return bench_run(shape, url="u")


def test_compare_calls_a_slower_run_worse_and_gates_on_it() -> None:
    doc = compare(
        run_doc(1.0), run_doc(1.5), before_name="a", after_name="b", fail_on_regression_pct=10.0
    )
    rows = {c.metric: c for c in doc.comparisons}
    assert rows["ttft_ms.p50"].verdict == "worse"
    assert rows["ttft_ms.p50"].change_pct == pytest.approx(50.0)
    assert rows["ttft_ms.p50"].ci_low_pct is not None
    assert rows["ttft_ms.p50"].ci_low_pct > 0
    assert rows["output_tokens_per_s"].verdict == "worse"
    assert doc.scorecard.overall == "worse"
    assert doc.exit_code == 1
    assert any("ttft_ms.p50 +50.0%" in r for r in doc.regressions)
    # Seeded: the same inputs give the same intervals.
    again = compare(
        run_doc(1.0), run_doc(1.5), before_name="a", after_name="b", fail_on_regression_pct=10.0
    )
    assert encode(again) == encode(doc)


def test_compare_reports_drift_with_its_position_and_never_calls_it_a_win() -> None:
    doc = compare(run_doc(1.0), run_doc(0.5, text="one two tree"), before_name="a", after_name="b")
    assert doc.equivalence[0].exact_match_rate == 0.0
    # reasoning "" + "\n" + text: "one two t" matches, the next character differs.
    assert doc.equivalence[0].first_divergence == {"count": 10}
    assert doc.scorecard.latency == "better"
    assert doc.scorecard.overall == "mixed: not a win"


def test_a_run_document_round_trips_through_json() -> None:
    doc = run_doc(1.0)
    assert decode_run(encode(doc).encode(), source="x") == doc
    assert msgspec.json.decode(encode(doc))["schema_version"] == 1


def test_an_after_run_that_measured_nothing_is_a_regression() -> None:
    before = run_doc(1.0)
    unreachable = msgspec.structs.replace(
        run_doc(1.0),
        shapes=[],
        server=msgspec.structs.replace(before.server, error="unreachable: refused"),
    )
    doc = compare(before, unreachable, before_name="a", after_name="b", fail_on_regression_pct=10.0)
    assert doc.scorecard.errors == "worse"
    assert doc.scorecard.overall == "worse"
    assert doc.exit_code == 1
    assert "s: not measured in the after run" in doc.regressions
