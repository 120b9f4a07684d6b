"""One streamed chat completion, timed exactly as ``vllm bench serve`` times it.

The definitions follow vLLM 0.32.0's ``async_request_openai_chat_completions``
(vllm/benchmarks/lib/endpoint_request_func.py):

- the clock starts just before the POST (``st = time.perf_counter()``);
- every SSE data message except ``[DONE]`` is timestamped when parsed; a message whose
  ``choices`` is non-empty is a *token chunk* (content, reasoning, or the role-only first
  chunk alike);
- TTFT is the first token chunk's timestamp minus ``st``; each later token chunk appends
  ``timestamp - most_recent_timestamp`` to the ITL list; only token chunks advance
  ``most_recent_timestamp`` (the trailing usage chunk carries no token);
- end-to-end latency is ``most_recent_timestamp - st``;
- output tokens are ``usage.completion_tokens`` (TPOT is derived from them in
  :mod:`blackwell_doctor.report.bench_metrics`).

Beyond vLLM: reasoning deltas (``reasoning``, or the older ``reasoning_content``) are kept
apart from answer text, and ``usage.completion_tokens_details.reasoning_tokens`` is read
when the server reports it; every failure is a named error kind, never an exception.

Client: aiohttp, as vLLM's own benchmark uses, one session per shape with a pool of
keep-alive connections as large as the shape's concurrency (:class:`Pool`), as vLLM 0.32.0's
``benchmark()`` keeps one (vllm/benchmarks/serve.py: ``TCPConnector(limit=max_concurrency,
keepalive_timeout=60, force_close=False)``). SSE framing is parsed here (events end at a blank
line; ``data:`` lines joined; ``:`` comments skipped) because the per-event cost is what this
client must keep below vLLM's; each payload is decoded by msgspec into typed structs, which
also rejects a malformed chunk.
"""

from __future__ import annotations

import asyncio
import base64
import binascii
import contextlib
import functools
import math
import time
import weakref
from collections.abc import Mapping
from contextvars import ContextVar
from typing import TYPE_CHECKING, Any

import aiohttp
import msgspec

from blackwell_doctor.facts.redact import Scrubber, redact_url
from blackwell_doctor.report.bench import TokenLogprob, TopLogprob

if TYPE_CHECKING:
    from aiohttp.client_reqrep import ClientRequest
    from aiohttp.connector import Connection
    from aiohttp.tracing import Trace

# Named error kinds (a contract: they appear in the JSON and the README).
UNREACHABLE = "unreachable"  # no TCP connection (refused, DNS, connect timeout)
HTTP_3XX = "http_3xx"  # the server redirected the request (never followed)
HTTP_4XX = "http_4xx"  # the server refused the request
HTTP_5XX = "http_5xx"  # the server failed the request
EARLY_CLOSE = "early_close"  # the stream ended before [DONE] (server died, connection reset)
STALLED = "stalled"  # no complete response within the per-request deadline
MALFORMED_SSE = "malformed_sse"  # not an SSE stream of chat-completion chunks (or too large)
MALFORMED_USAGE = "malformed_usage"  # usage counts no request can have (< 0, > max_tokens)
STREAM_ERROR = "stream_error"  # the server sent an error object inside the stream
NO_TOKENS = "no_tokens"  # a complete stream without a single token chunk

ERROR_KINDS = (
    UNREACHABLE,
    HTTP_3XX,
    HTTP_4XX,
    HTTP_5XX,
    EARLY_CLOSE,
    STALLED,
    MALFORMED_SSE,
    MALFORMED_USAGE,
    STREAM_ERROR,
    NO_TOKENS,
)
# A probe (/v1/models, /tokenize, /metrics) whose answer is over MAX_PROBE_BODY_BYTES.
TOO_LARGE = "too_large"

# What one request may make this client hold, whatever the server sends (issue 19: endless
# events of 1 MB each grew to 1.2 GB in 5 s). A chat-completion chunk is a few hundred
# bytes; an answer of the largest shape (1,000,000 tokens) is about 4 MiB of text.
MAX_EVENT_BYTES = 4 << 20  # one SSE event, still unfinished: longer is malformed_sse
MAX_TEXT_CHARS = 4 << 20  # answer and reasoning text of one request: more is malformed_sse
# Kept of what the server says: a failure's detail, an error body's first bytes, a
# finish_reason. The probes' answers (/v1/models, /tokenize, /metrics) are read up to
# MAX_PROBE_BODY_BYTES (vLLM's /metrics is ~100 kB; a listing of thousands of models fits).
MAX_DETAIL_CHARS = 300
ERROR_BODY_BYTES = 2048
MAX_FINISH_REASON_CHARS = 64
MAX_PROBE_BODY_BYTES = 8 << 20
# Log-probabilities kept of one answer (a greedy prompt asks for 48 tokens): at most this
# many tokens, each with at most MAX_TOP_LOGPROBS candidates and tokens of at most
# MAX_TOKEN_CHARS characters; more is not kept (the answer is still measured).
MAX_LOGPROB_TOKENS = 4096
MAX_TOP_LOGPROBS = 20
MAX_TOKEN_CHARS = 64
# Counts no request can have when it sets no max_tokens (and a prompt's tokens beyond its
# bytes, for the chat template's own, e.g. a default system prompt).
_MAX_COUNT = 1 << 40
_TEMPLATE_TOKENS = 1 << 16


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class _Top(msgspec.Struct):
    token: str
    logprob: float | None = None


class _TokenLogprob(msgspec.Struct):
    token: str
    logprob: float | None = None
    top_logprobs: list[_Top] | None = None


class _Logprobs(msgspec.Struct):
    # OpenAI's chat-completion logprobs (vLLM 0.32: ChatCompletionLogProbs): one entry per
    # token of the chunk, each with the top_logprobs asked for.
    content: list[_TokenLogprob] | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None
    # Read only where it has the shape asked for (_keep_logprobs): a server's odd field
    # there does not fail a request that did not ask for it.
    logprobs: Any = None


class _Details(msgspec.Struct):
    reasoning_tokens: int | None = None


class _Usage(msgspec.Struct):
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    completion_tokens_details: _Details | None = None


class _Chunk(msgspec.Struct):
    choices: list[_Choice] | None = None
    usage: _Usage | None = None
    error: Any = None  # vLLM: {"message", "type", "code"}; others: a string
    # vLLM: on the last chunk, "vllm-<version>[-tp<N>...]-<config hash8>" (the run's pin).
    system_fingerprint: Any = None


_decode_chunk = msgspec.json.Decoder(_Chunk).decode
_decode_chunks = msgspec.json.Decoder(list[_Chunk]).decode
_TOO_MUCH_TEXT = f"more than {MAX_TEXT_CHARS >> 20} Mi characters of text in one answer"


class Outcome(msgspec.Struct, kw_only=True):
    """What one request produced: the timings, the server's counts, or a named error."""

    ok: bool = False
    error: str | None = None
    detail: str | None = None
    start_s: float = 0.0  # perf_counter at the POST
    ttft_s: float | None = None
    latency_s: float | None = None
    itl_s: list[float] = msgspec.field(default_factory=list)
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    reasoning_tokens: int | None = None  # the server's own count, when it gives one
    text: str = ""
    reasoning_text: str = ""
    reasoning_chunks: int = 0
    finish_reason: str | None = None
    # Per token, when the request asked for logprobs and the server sent them: else None.
    logprobs: list[TokenLogprob] | None = None
    system_fingerprint: str | None = None  # the server's, when it sent one (a str)
    # Times the request was written again on another connection: the pooled keep-alive
    # connection it was written to had been closed by the server before answering
    # (:func:`stream_chat`).
    resent: int = 0


def _fail(out: Outcome, kind: str, detail: str) -> Outcome:
    """``out`` failed; the detail is scrubbed and cut by :func:`stream_chat`."""
    out.ok = False
    out.error = kind
    out.detail = detail
    return out


def http_kind(status: int) -> str:
    """The error kind of an HTTP status that is not a success."""
    if status >= 500:
        return HTTP_5XX
    if 300 <= status < 400:
        return HTTP_3XX
    return HTTP_4XX


@functools.lru_cache(maxsize=16)
def scrubber(authorization: str | None) -> Scrubber:
    """What removes the credentials of an ``Authorization`` header value from text a
    server sends back: a bearer token, or Basic's ``user:password`` and password, each as
    itself and in base64 (:func:`blackwell_doctor.facts.redact.secret_forms`)."""
    if not authorization:
        return Scrubber()
    scheme, _, value = authorization.strip().partition(" ")
    secrets = [value.strip() or scheme]
    if scheme.lower() == "basic":
        try:
            pair = base64.b64decode(value.strip(), validate=True).decode("utf-8")
        except (binascii.Error, UnicodeDecodeError):
            pair = ""
        if pair:
            secrets += [pair, pair.partition(":")[2]]
    return Scrubber(secrets)


def kept(text: str, scrub: Scrubber, limit: int = MAX_DETAIL_CHARS) -> str:
    """Server-sent ``text`` as this client keeps it: without the known credentials or
    secret-looking spans, at most ``limit`` characters."""
    return scrub(text, cut=True)[:limit]


async def read_capped(response: aiohttp.ClientResponse, limit: int = MAX_PROBE_BODY_BYTES) -> bytes:
    """The body of ``response``, or BodyTooLarge past ``limit`` bytes (announced or sent)."""
    announced = response.content_length
    if announced is not None and announced > limit:
        raise BodyTooLarge(limit)
    parts: list[bytes] = []
    size = 0
    async for piece in response.content.iter_any():
        size += len(piece)
        if size > limit:
            raise BodyTooLarge(limit)
        parts.append(piece)
    return b"".join(parts)


class BodyTooLarge(Exception):
    def __init__(self, limit: int) -> None:
        super().__init__(f"more than {_size(limit)}")
        self.limit = limit


def _size(n: int) -> str:
    return f"{n >> 20} MiB" if n >= 1 << 20 and not n % (1 << 20) else f"{n:,} bytes"


# A pooled connection idle this long is closed rather than reused: below the idle limit of
# the servers bench meets, so that the server seldom closes one as a request is written on
# it (uvicorn's --timeout-keep-alive, 5 s by default and as vLLM 0.32.0 sets it through
# VLLM_HTTP_TIMEOUT_KEEP_ALIVE; aiohttp's server and nginx: 75 s). vLLM's own benchmark
# keeps them 60 s, past uvicorn's 5, and counts such a request failed.
KEEPALIVE_S = 2.0
# How many times one request may be written again after a pooled connection turned out to
# be closed (each time on another connection; the pool holds a bounded number of them).
MAX_RESENDS = 3

# Whether the connection the running request took had carried an earlier request (set by
# Pool.connect in the request's own task, read by stream_chat in the same task).
_reused: ContextVar[bool] = ContextVar("blackwell_doctor_reused", default=False)


class Pool(aiohttp.TCPConnector):
    """aiohttp's connection pool (keep-alive, at most ``limit`` connections, idle ones
    closed after KEEPALIVE_S) that tells the request taking a connection whether that
    connection had carried an earlier request: only then can a close before any answer be
    the server's idle close rather than the request's failure (:func:`stream_chat`)."""

    def __init__(self, limit: int) -> None:
        super().__init__(
            limit=limit, limit_per_host=limit, ttl_dns_cache=300, keepalive_timeout=KEEPALIVE_S
        )
        self._used: weakref.WeakSet[object] = weakref.WeakSet()

    async def connect(
        self, req: ClientRequest, traces: list[Trace], timeout: aiohttp.ClientTimeout
    ) -> Connection:
        conn = await super().connect(req, traces, timeout)
        protocol = conn.protocol
        _reused.set(protocol in self._used)
        if protocol is not None:
            self._used.add(protocol)
        return conn


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    deadline_s: float,
    max_tokens: int | None = None,
) -> Outcome:
    """POST ``body`` to ``url`` (a chat-completions endpoint) and time the streamed answer.

    Never raises for a server or network failure: the outcome names it. ``deadline_s``
    bounds each attempt, connection included.

    A request written on a pooled keep-alive connection that the server closed before
    sending a single byte of an answer (a clean close: aiohttp's ServerDisconnectedError;
    or a reset as it was written) is written again on another connection, up to
    MAX_RESENDS times, still timed from the first attempt (``resent`` counts them). Such a
    request never reached the server's application: a server that had read it would have
    answered, or closed with it unread, which is a reset of the next write, not a clean
    close. A server that drops connections races a client that reuses them; this is how
    browsers, urllib3 and aiohttp (for idempotent methods, RFC 9112 section 9.3.1) resend.
    The same close on a new connection is the request's failure (``early_close``), as vLLM
    counts it.

    A redirect is never followed (``http_3xx``). ``max_tokens`` (the request's) bounds the
    usage counts the server may claim (``malformed_usage`` beyond). What the server sent
    is kept without the credentials of ``headers``' Authorization (an echo of them in an
    error body or an answer is scrubbed) and bounded (MAX_EVENT_BYTES, MAX_TEXT_CHARS).
    """
    limits = (
        _MAX_COUNT if max_tokens is None else max_tokens,
        len(body) + _TEMPLATE_TOKENS,
    )
    st = time.perf_counter()
    resent = 0
    first: Outcome | None = None
    while True:
        _reused.set(False)
        out, unanswered = await _stream_once(
            session, url, body, headers, deadline_s=deadline_s, limits=limits, st=st
        )
        if first is not None and out.error == UNREACHABLE:
            # The resend found no server: it had died with the request read and unanswered
            # (queued behind others), not dropped an idle connection. The request's failure
            # is the close it met (CI at bfb2f62: a server killed mid-run counted its two
            # in-flight requests unreachable).
            out = first
            break
        if not (unanswered and _reused.get() and resent < MAX_RESENDS):
            break
        first = first or out
        resent += 1
    out.resent = resent
    scrub = scrubber(headers.get("Authorization"))
    if out.detail is not None:
        out.detail = kept(out.detail, scrub)
    if scrub.forms:
        out.text = scrub(out.text, patterns=False)
        out.reasoning_text = scrub(out.reasoning_text, patterns=False)
    if out.finish_reason is not None:
        out.finish_reason = kept(out.finish_reason, scrub, MAX_FINISH_REASON_CHARS)
    if scrub.forms and out.logprobs:
        out.logprobs = [
            TokenLogprob(
                token=scrub(t.token, patterns=False),
                logprob=t.logprob,
                top=[
                    TopLogprob(token=scrub(c.token, patterns=False), logprob=c.logprob)
                    for c in t.top
                ],
            )
            for t in out.logprobs
        ]
    if out.system_fingerprint is not None:
        out.system_fingerprint = kept(out.system_fingerprint, scrub, MAX_FINISH_REASON_CHARS)
    return out


def _keep_logprobs(out: Outcome, raw: Any) -> None:
    """Append a chunk's token log-probabilities to ``out`` (bounded: MAX_LOGPROB_TOKENS,
    MAX_TOP_LOGPROBS, MAX_TOKEN_CHARS); a chunk whose logprobs are not OpenAI's shape adds
    none."""
    try:
        entries = msgspec.convert(raw, _Logprobs).content or []
    except msgspec.ValidationError:
        return
    kept_ = out.logprobs if out.logprobs is not None else []
    out.logprobs = kept_
    for e in entries[: max(0, MAX_LOGPROB_TOKENS - len(kept_))]:
        top = [
            TopLogprob(token=c.token[:MAX_TOKEN_CHARS], logprob=c.logprob)
            for c in (e.top_logprobs or [])[:MAX_TOP_LOGPROBS]
            if c.logprob is not None and math.isfinite(c.logprob)
        ]
        lp = e.logprob if e.logprob is not None and math.isfinite(e.logprob) else None
        kept_.append(TokenLogprob(token=e.token[:MAX_TOKEN_CHARS], logprob=lp, top=top))


def _usage_problem(usage: _Usage, limits: tuple[int, int]) -> str | None:
    """Why ``usage`` is impossible for the request, or None."""
    most_out, most_in = limits
    completion = usage.completion_tokens
    reasoning = (
        None
        if usage.completion_tokens_details is None
        else usage.completion_tokens_details.reasoning_tokens
    )
    for name, value, most in (
        ("completion_tokens", completion, most_out),
        ("prompt_tokens", usage.prompt_tokens, most_in),
        ("reasoning_tokens", reasoning, most_out if completion is None else completion),
    ):
        if value is not None and not 0 <= value <= most:
            shown = str(value) if len(str(value)) <= 24 else f"{str(value)[:20]}... "
            return f"usage.{name} {shown} is outside 0..{most} for this request"
    return None


async def _stream_once(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: Mapping[str, str],
    *,
    deadline_s: float,
    limits: tuple[int, int],
    st: float,
) -> tuple[Outcome, bool]:
    """One attempt of :func:`stream_chat`, timed from ``st``: its outcome, and whether it
    failed on a connection closed or reset before the answer's status line arrived."""
    out = Outcome()
    out.start_s = st
    most_recent = st
    first = False
    done = False
    text_parts: list[str] = []
    reasoning_parts: list[str] = []
    text_chars = 0
    itl = out.itl_s
    began = False
    clock = time.perf_counter

    def take(chunk: _Chunk, timestamp: float) -> tuple[str, str] | None:
        """One chunk, parsed at ``timestamp``, into ``out``: None, or why it fails."""
        nonlocal first, most_recent, text_chars
        if chunk.error is not None:
            message = msgspec.json.encode(chunk.error)[:ERROR_BODY_BYTES]
            return STREAM_ERROR, f"the server reported: {message.decode('utf-8', 'replace')}"
        if chunk.choices:
            if not first:
                first = True
                out.ttft_s = timestamp - st
            else:
                itl.append(timestamp - most_recent)
            most_recent = timestamp
            choice = chunk.choices[0]
            delta = choice.delta
            if delta is not None:
                content = delta.content
                if content:
                    text_parts.append(content)
                    text_chars += len(content)
                thought = delta.reasoning or delta.reasoning_content
                if thought:
                    reasoning_parts.append(thought)
                    text_chars += len(thought)
                    out.reasoning_chunks += 1
                if text_chars > MAX_TEXT_CHARS:
                    return MALFORMED_SSE, _TOO_MUCH_TEXT
            if choice.finish_reason is not None:
                out.finish_reason = choice.finish_reason[:MAX_DETAIL_CHARS]
            if choice.logprobs is not None:
                _keep_logprobs(out, choice.logprobs)
        fingerprint = chunk.system_fingerprint
        if fingerprint is not None and isinstance(fingerprint, str):
            out.system_fingerprint = fingerprint[:MAX_DETAIL_CHARS]
        if chunk.usage is not None:
            usage = chunk.usage
            problem = _usage_problem(usage, limits)
            if problem is not None:
                return MALFORMED_USAGE, problem
            out.prompt_tokens = usage.prompt_tokens
            out.completion_tokens = usage.completion_tokens
            if usage.completion_tokens_details is not None:
                out.reasoning_tokens = usage.completion_tokens_details.reasoning_tokens
        return None

    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(
                url, data=body, headers=headers, allow_redirects=False
            ) as response:
                began = True
                status = response.status
                if 300 <= status < 400:
                    where = redact_url(response.headers.get("Location", ""))[:200]
                    return _fail(
                        out, HTTP_3XX, f"HTTP {status} redirect to {where!r} (not followed)"
                    ), False
                if status >= 400:
                    raw = await response.content.read(ERROR_BODY_BYTES)
                    msg = raw.decode("utf-8", "replace").strip()
                    return _fail(out, http_kind(status), f"HTTP {status}: {msg}"), False
                # The unfinished tail of the stream: appended to in place, searched only
                # where a new event end can be, emptied up to the last complete event, so
                # each byte is copied and scanned a bounded number of times.
                buf = bytearray()
                cr = False  # the last piece ended with "\r" (maybe half of "\r\n")
                async for piece in response.content.iter_any():
                    if cr:
                        piece = b"\r" + piece
                    cr = piece.endswith(b"\r")
                    if cr:
                        piece = piece[:-1]
                    if b"\r" in piece:  # CRLF or CR line ends
                        piece = piece.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                    if not buf and piece.startswith(b"data: {"):
                        # The common piece: whole events of one "data: {...}" line each (a
                        # JSON text holds no raw newline), decoded in one call as one JSON
                        # array; each event is still timestamped in turn as it is taken.
                        cut = piece.rfind(b"\n\n") + 2
                        events = piece[:cut]
                        if events.endswith(b"\ndata: [DONE]\n\n"):
                            events, ended = events[:-14], True
                        else:
                            ended = False
                        joined = events[6:-2].replace(b"\n\ndata: ", b",")
                        chunks = None
                        if cut > 1 and events.endswith(b"}\n\n") and b"\n" not in joined:
                            # A bad one is read again event by event below, which names it.
                            with contextlib.suppress(msgspec.DecodeError):
                                chunks = _decode_chunks(b"[" + joined + b"]")
                        if chunks is not None:
                            for chunk in chunks:
                                timestamp = clock()
                                choices = chunk.choices
                                if (
                                    first
                                    and choices
                                    and chunk.usage is None
                                    and chunk.error is None
                                    and chunk.system_fingerprint is None
                                ):
                                    choice = choices[0]
                                    delta = choice.delta
                                    if (
                                        delta is not None
                                        and choice.finish_reason is None
                                        and choice.logprobs is None
                                        and delta.reasoning is None
                                        and delta.reasoning_content is None
                                    ):
                                        # A token of answer text, the first one past.
                                        itl.append(timestamp - most_recent)
                                        most_recent = timestamp
                                        content = delta.content
                                        if content:
                                            text_parts.append(content)
                                            text_chars += len(content)
                                        continue
                                failure = take(chunk, timestamp)
                                if failure is not None:
                                    return _fail(out, *failure), False
                            if text_chars > MAX_TEXT_CHARS:
                                return _fail(out, MALFORMED_SSE, _TOO_MUCH_TEXT), False
                            done = done or ended
                            piece = piece[cut:]
                            if not piece:
                                continue
                    scan = max(0, len(buf) - 1)
                    buf += piece
                    start = 0
                    while True:
                        end = buf.find(b"\n\n", scan)
                        if end < 0:
                            break
                        # The common event, one "data: " line (vLLM's, SGLang's), is sliced
                        # once, in place; any other goes through the general reader.
                        payload: bytes | bytearray | None
                        if buf.startswith(b"data: ", start) and buf.find(b"\n", start, end) < 0:
                            payload = buf[start + 6 : end]
                        else:
                            payload = _sse_data(buf[start:end])
                        start = scan = end + 2
                        if payload is None:
                            continue
                        if payload == b"[DONE]":
                            done = True
                            continue
                        timestamp = clock()
                        try:
                            chunk = _decode_chunk(payload)
                        except msgspec.DecodeError as exc:
                            return _fail(
                                out,
                                MALFORMED_SSE,
                                f"not a chat-completion chunk ({exc}): {bytes(payload[:120])!r}",
                            ), False
                        failure = take(chunk, timestamp)
                        if failure is not None:
                            return _fail(out, *failure), False
                    if start:
                        del buf[:start]
                    if len(buf) > MAX_EVENT_BYTES:
                        return _fail(
                            out,
                            MALFORMED_SSE,
                            f"an SSE event longer than {_size(MAX_EVENT_BYTES)}: "
                            f"{bytes(buf[:80])!r}",
                        ), False
                if buf.strip():
                    # The last event may lack its blank line when the server closes.
                    payload = _sse_data(buf)
                    if payload == b"[DONE]":
                        done = True
    except TimeoutError:
        waited = time.perf_counter() - most_recent
        return _fail(
            out,
            STALLED,
            f"no complete response within the {deadline_s:g} s deadline "
            f"(nothing new for the last {waited:.1f} s)",
        ), False
    except aiohttp.ClientConnectorError as exc:
        return _fail(
            out, UNREACHABLE, f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}"
        ), False
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        if not began:  # closed before the status line: aiohttp's "Server disconnected"
            detail = f"the server closed the connection before answering: {exc}"
            return _fail(out, EARLY_CLOSE, detail), True
        return _fail(out, EARLY_CLOSE, f"the server closed the stream: {exc}"), False
    except (aiohttp.ClientOSError, aiohttp.ClientConnectionError, ConnectionError) as exc:
        # Connected, then reset: the server went away during the request.
        when = "the stream" if began else "the request, before answering"
        detail = f"the server closed the connection during {when}: {exc}"
        return _fail(out, EARLY_CLOSE, detail), not began
    except aiohttp.ClientResponseError as exc:
        return _fail(out, MALFORMED_SSE, f"not a valid HTTP response: {exc.message}"), False
    out.text = "".join(text_parts)
    out.reasoning_text = "".join(reasoning_parts)
    if not done:
        return _fail(out, EARLY_CLOSE, "the stream ended without data: [DONE]"), False
    if not first:
        return _fail(out, NO_TOKENS, "the stream finished without a single token chunk"), False
    out.latency_s = most_recent - st
    out.ok = True
    return out, False


def _sse_data(event: bytes | bytearray) -> bytes | bytearray | None:
    """The data of one SSE event (its ``data:`` lines joined by newlines), or None."""
    if event.startswith(b"data:") and b"\n" not in event:  # the common case: one line
        data = event[5:]
        return data[1:] if data.startswith(b" ") else data
    lines = []
    for line in event.split(b"\n"):
        if line.startswith(b"data:"):
            data = line[5:]
            lines.append(data[1:] if data.startswith(b" ") else data)
    return b"\n".join(lines) if lines else None


def request_body(
    *,
    model: str,
    prompt: str,
    max_tokens: int,
    ignore_eos: bool,
    extra: dict[str, Any] | None = None,
    greedy: bool = False,
    top_logprobs: int | None = None,
    messages: list[dict[str, str]] | None = None,
) -> bytes:
    """The JSON body of a streamed chat completion with usage in the last chunk.

    No per-request sampling ``seed``, as in ``vllm bench serve``: measured answers need not
    be reproducible (the greedy equivalence prompts are), and a seeded request whose
    prefill is chunked crashes vLLM 0.32's CPU engine ("CPU Generator does not use
    offset"). A shape can still send one through ``extra_body``. ``top_logprobs`` asks for
    each token's log-probability and that many alternatives (OpenAI's ``logprobs`` and
    ``top_logprobs``), sent in each chunk's ``choices[0].logprobs.content``. ``messages``,
    when given, is the conversation sent in place of one user message of ``prompt``.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": messages or [{"role": "user", "content": prompt}],
        "max_tokens": max_tokens,
        "stream": True,
        "stream_options": {"include_usage": True},
    }
    if ignore_eos:
        body["ignore_eos"] = True
    if extra:
        body.update(extra)
    if greedy:
        body["temperature"] = 0.0
    if top_logprobs is not None:
        body["logprobs"] = True
        body["top_logprobs"] = top_logprobs
    return msgspec.json.encode(body)
