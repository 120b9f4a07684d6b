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
  :mod:`blackwell_doctor.bench.metrics`).

Beyond vLLM: reasoning deltas (``reasoning``, or the older ``reasoning_content``) are kept
apart from answer text, and ``usage.completion_tokens_details.reasoning_tokens`` is read
when the server reports it; every failure is a named error kind, never an exception.

Client: aiohttp, as vLLM's own benchmark uses, one session per shape with a connection
pool as large as the shape's concurrency. SSE framing is parsed here (events end at a blank
line; ``data:`` lines joined; ``:`` comments skipped) because the per-event cost is what this
client must keep below vLLM's; each payload is decoded by msgspec into typed structs, which
also rejects a malformed chunk.
"""

from __future__ import annotations

import asyncio
import time
from typing import Any

import aiohttp
import msgspec

from blackwell_doctor.redact import redact_text

# Named error kinds (a contract: they appear in the JSON and the README).
UNREACHABLE = "unreachable"  # no TCP connection (refused, DNS, connect timeout)
HTTP_4XX = "http_4xx"  # the server refused the request
HTTP_5XX = "http_5xx"  # the server failed the request
EARLY_CLOSE = "early_close"  # the stream ended before [DONE] (server died, connection reset)
STALLED = "stalled"  # no complete response within the per-request deadline
MALFORMED_SSE = "malformed_sse"  # not an SSE stream of chat-completion chunks
STREAM_ERROR = "stream_error"  # the server sent an error object inside the stream
NO_TOKENS = "no_tokens"  # a complete stream without a single token chunk

ERROR_KINDS = (
    UNREACHABLE,
    HTTP_4XX,
    HTTP_5XX,
    EARLY_CLOSE,
    STALLED,
    MALFORMED_SSE,
    STREAM_ERROR,
    NO_TOKENS,
)


class _Delta(msgspec.Struct):
    content: str | None = None
    reasoning: str | None = None
    reasoning_content: str | None = None


class _Choice(msgspec.Struct):
    delta: _Delta | None = None
    finish_reason: str | None = None


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


_decode_chunk = msgspec.json.Decoder(_Chunk).decode


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


def _fail(out: Outcome, kind: str, detail: str) -> Outcome:
    out.ok = False
    out.error = kind
    out.detail = redact_text(detail)[:300]
    return out


# aiohttp's message when a pooled keep-alive connection turns out to be closed by the
# server as the request is written: the request never reached the server.
_STALE_CONNECTION = "Can not write request body"


async def stream_chat(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    deadline_s: float,
) -> Outcome:
    """POST ``body`` to ``url`` (a chat-completions endpoint) and time the streamed answer.

    Never raises for a server or network failure: the outcome names it. ``deadline_s``
    bounds the whole request, connection included. A request that could not even be
    written on a pooled connection the server had just closed is sent once more on a new
    one, timed from the new attempt (what browsers and urllib3 do: nothing was sent).
    """
    out = await _stream_once(session, url, body, headers, deadline_s=deadline_s)
    if out.error == EARLY_CLOSE and _STALE_CONNECTION in (out.detail or ""):
        out = await _stream_once(session, url, body, headers, deadline_s=deadline_s)
    return out


async def _stream_once(
    session: aiohttp.ClientSession,
    url: str,
    body: bytes,
    headers: dict[str, str],
    *,
    deadline_s: float,
) -> Outcome:
    out = Outcome()
    st = time.perf_counter()
    out.start_s = st
    most_recent = st
    first = False
    done = False
    text_parts: list[str] = []
    reasoning_parts: list[str] = []
    itl = out.itl_s
    began = False
    try:
        async with asyncio.timeout(deadline_s):
            async with session.post(url, data=body, headers=headers) as response:
                began = True
                if response.status >= 400:
                    raw = await response.content.read(2048)
                    kind = HTTP_5XX if response.status >= 500 else HTTP_4XX
                    msg = raw.decode("utf-8", "replace").strip()
                    return _fail(out, kind, f"HTTP {response.status}: {msg}")
                buf = b""
                async for piece in response.content.iter_any():
                    # One read may hold hundreds of events: walk them with an offset and
                    # keep only the unfinished tail (slicing the buffer per event would
                    # copy it once per event).
                    buf = buf + piece if buf else piece
                    if b"\r" in buf and not buf.endswith(b"\r"):  # CRLF or CR line ends
                        buf = buf.replace(b"\r\n", b"\n").replace(b"\r", b"\n")
                    start = 0
                    while True:
                        end = buf.find(b"\n\n", start)
                        if end < 0:
                            break
                        event = buf[start:end]
                        start = end + 2
                        payload = _sse_data(event)
                        if payload is None:
                            continue
                        if payload == b"[DONE]":
                            done = True
                            continue
                        timestamp = time.perf_counter()
                        try:
                            chunk = _decode_chunk(payload)
                        except msgspec.DecodeError as exc:
                            return _fail(
                                out,
                                MALFORMED_SSE,
                                f"not a chat-completion chunk ({exc}): {payload[:120]!r}",
                            )
                        if chunk.error is not None:
                            message = msgspec.json.encode(chunk.error).decode()
                            return _fail(out, STREAM_ERROR, f"the server reported: {message}")
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
                                if delta.content:
                                    text_parts.append(delta.content)
                                thought = delta.reasoning or delta.reasoning_content
                                if thought:
                                    reasoning_parts.append(thought)
                                    out.reasoning_chunks += 1
                            if choice.finish_reason is not None:
                                out.finish_reason = choice.finish_reason
                        if chunk.usage is not None:
                            usage = chunk.usage
                            out.prompt_tokens = usage.prompt_tokens
                            out.completion_tokens = usage.completion_tokens
                            if usage.completion_tokens_details is not None:
                                details = usage.completion_tokens_details
                                out.reasoning_tokens = details.reasoning_tokens
                    buf = buf[start:]
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
        )
    except aiohttp.ClientConnectorError as exc:
        return _fail(out, UNREACHABLE, f"cannot connect to {exc.host}:{exc.port}: {exc.os_error}")
    except (aiohttp.ServerDisconnectedError, aiohttp.ClientPayloadError) as exc:
        return _fail(out, EARLY_CLOSE, f"the server closed the stream: {exc}")
    except (aiohttp.ClientOSError, aiohttp.ClientConnectionError, ConnectionError) as exc:
        # Connected, then reset: the server went away during the request.
        when = "the stream" if began else "the request, before answering"
        return _fail(out, EARLY_CLOSE, f"the server closed the connection during {when}: {exc}")
    except aiohttp.ClientResponseError as exc:
        return _fail(out, MALFORMED_SSE, f"not a valid HTTP response: {exc.message}")
    out.text = "".join(text_parts)
    out.reasoning_text = "".join(reasoning_parts)
    if not done:
        return _fail(out, EARLY_CLOSE, "the stream ended without data: [DONE]")
    if not first:
        return _fail(out, NO_TOKENS, "the stream finished without a single token chunk")
    out.latency_s = most_recent - st
    out.ok = True
    return out


def _sse_data(event: bytes) -> bytes | None:
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
) -> bytes:
    """The JSON body of a streamed chat completion with usage in the last chunk.

    No per-request sampling ``seed``, as in ``vllm bench serve``: measured answers need not
    be reproducible (the greedy equivalence prompts are), and a seeded request whose
    prefill is chunked crashes vLLM 0.32's CPU engine ("CPU Generator does not use
    offset"). A shape can still send one through ``extra_body``.
    """
    body: dict[str, Any] = {
        "model": model,
        "messages": [{"role": "user", "content": prompt}],
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
    return msgspec.json.encode(body)
