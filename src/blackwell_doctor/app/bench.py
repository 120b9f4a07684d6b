"""A ``bench`` run: ask the server what it serves, then measure each shape.

The run fills a :class:`RunState` as it goes, so whatever stops it (the end, a failure,
Ctrl-C) the caller can still build and write the document of what was measured.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import dataclasses
import datetime as dt
import ipaddress
import math
import re
import time
import urllib.parse
from array import array
from collections import deque
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

import aiohttp
import msgspec
import yarl

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.app import clients
from blackwell_doctor.collect.bench import client, prompts, schedule
from blackwell_doctor.collect.bench.server_env import (
    NotPrometheus,
    config_hash,
    info_metrics,
    server_info,
    version_of,
)
from blackwell_doctor.collect.bench.server_metrics import MetricsParseError, Snapshot, delta, parse
from blackwell_doctor.facts.document import Facts, ToolInfo
from blackwell_doctor.facts.redact import redact_url
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.bench import (
    BENCH_SCHEMA_VERSION,
    ESTIMATED,
    USAGE,
    BenchRun,
    EquivalenceOutput,
    RequestSample,
    ServerInfo,
    ShapeResult,
    SweepResult,
)
from blackwell_doctor.report.bench_env import (
    MAX_FINGERPRINTS,
    Environment,
    HostPin,
    ModelPin,
    ServerArgs,
    cut,
    host_from_facts,
)
from blackwell_doctor.report.bench_metrics import shape_metrics
from blackwell_doctor.report.sample_table import SampleTable
from blackwell_doctor.ruledata import samples as sample_rules
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.ruledata.shapes import Shape
from blackwell_doctor.rules import degenerate, drift
from blackwell_doctor.rules import sweep as sweeps

# A prompt capped by max_model_len keeps this share of the room left by max_tokens free:
# prompts of one shape differ by a few tokens (different words), and a prompt that leaves
# less than max_tokens ends early with finish_reason "length", shortening the answer.
_CAP_SHARE = 0.9
_EQUIVALENCE_MAX_TOKENS = 48
# A max_model_len above this is no context length (vLLM keeps it in an int32).
_MAX_MODEL_LEN = 2**31 - 1
# Prompt calibration against /tokenize. A count is plausible only between 0.5 and 8 tokens
# a word (the words are common English words: at least one token each in every tokenizer
# that splits on spaces, at most one a byte) plus a chat template of at most 4,096 tokens;
# a server whose counts are not is not counting, and the size is estimated instead. Each
# round changes the word count by a factor of at most 4, within the range those bounds
# give for the target, for at most 5 rounds: the prompt never outgrows the shape.
_MIN_TOKENS_PER_WORD = 0.5
_MAX_TOKENS_PER_WORD = 8.0
_TEMPLATE_TOKENS = 4096
_CALIBRATION_ROUNDS = 5
_CALIBRATION_STEP = 4.0
# Up to this many words of prompts in all (about 6.5 bytes a word), a shape's request
# bodies are built before its clock starts; beyond, each just before it is sent, so that
# only the requests in flight hold one.
_PREBUILT_WORDS = 4_000_000
_PROBE_DEADLINE_S = 15.0
# A client TTFT above twice the server's own plus this is worth a note.
_TTFT_GAP_MS = 50.0
_POLL_INTERVAL_S = 1.0
# What the record keeps of /v1/models: ids up to this long (a served name may be a path),
# the first this many of them.
MAX_MODEL_ID_CHARS = 1024
MAX_MODELS_KEPT = 64


class UrlError(Exception):
    """An unusable --url (one line, never with its credentials)."""


# The longest --url taken (browsers and servers refuse far shorter request lines).
MAX_URL_CHARS = 2048
# A host name's characters: letters (IDN included), digits, ".", "-", "_".
_HOST = re.compile(r"[\w.-]+")


def _valid_host(host: str) -> bool:
    """A name the resolver takes (labels of 1 to 63 characters once IDNA-encoded, 253 in
    all) or a dotted IPv4 address."""
    if not _HOST.fullmatch(host):
        return False
    if re.fullmatch(r"[0-9.]+", host):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            return False
        return True
    try:
        encoded = host.encode("idna")
    except UnicodeError:
        return False
    return len(encoded.rstrip(b".")) <= 253


@dataclass(frozen=True)
class Endpoint:
    base: str  # scheme://host:port[/prefix], credentials removed
    display: str  # the same with path segments that may be credentials hidden: kept, shown
    authorization: str | None  # "Basic ..." from user:password@ in the URL

    def url(self, path: str) -> str:
        return self.base + path


def parse_url(url: str) -> Endpoint:
    """``--url``: the server's root or its /v1; user:password@ becomes Basic auth and is
    never shown. Anything but an http(s) URL with a host and a port in 1..65535 (or none),
    without control characters, query or fragment, is a UrlError that shows the URL with
    its credentials, query and secret-looking path segments redacted."""
    text = url.strip()
    shown = redact_url(text)  # redacted whole, then cut: a cut could hide an "@"
    shown = ascii(shown[:200] + ("..." if len(shown) > 200 else ""))
    if len(text) > MAX_URL_CHARS:
        raise UrlError(f"--url is longer than {MAX_URL_CHARS} characters: {shown}")
    bad = next((c for c in text if c.isspace() or not c.isprintable()), None)
    if bad is not None:
        raise UrlError(f"--url has a control character or a space ({bad!a}): {shown}")
    try:
        parts = urllib.parse.urlsplit(text)
        hostname = parts.hostname
    except ValueError:
        raise UrlError(f"--url is not a valid URL: {shown}") from None
    if parts.scheme not in ("http", "https") or not hostname:
        raise UrlError(f"--url must be an http:// or https:// URL with a host, got {shown}")
    try:
        port = parts.port
    except ValueError:
        raise UrlError(f"--url has an invalid port (1 to 65535): {shown}") from None
    if port == 0:
        raise UrlError(f"--url has port 0: give the server's port (none for 80/443): {shown}")
    if parts.query or text.endswith("?"):
        raise UrlError(f"--url takes the server's base URL, without a query (?...): {shown}")
    if parts.fragment or text.endswith("#"):
        raise UrlError(f"--url takes the server's base URL, without a fragment (#...): {shown}")
    if parts.netloc.rpartition("@")[2].startswith("["):  # an IP literal: IPv6 only
        try:  # a zone (RFC 6874) is written %25 in a URL
            host = f"[{ipaddress.IPv6Address(hostname.replace('%25', '%')).compressed}]"
        except ValueError:
            raise UrlError(f"--url is not a valid URL: {shown}") from None
    elif _valid_host(hostname):
        host = hostname
    else:
        raise UrlError(f"--url has an invalid host: {shown}")
    netloc = host + (f":{port}" if port else "")
    path = parts.path.rstrip("/")
    path = path.removesuffix("/v1")
    authorization = None
    if parts.username or parts.password:
        pair = (
            f"{urllib.parse.unquote(parts.username or '')}:"
            f"{urllib.parse.unquote(parts.password or '')}"
        )
        authorization = "Basic " + base64.b64encode(pair.encode()).decode("ascii")
    base = urllib.parse.urlunsplit((parts.scheme, netloc, path, "", ""))
    try:  # as aiohttp will read it (an IDN host is encoded, then decoded for display)
        parsed = yarl.URL(base + "/v1/models")
        valid = bool(parsed.raw_host and parsed.host)
    except (ValueError, UnicodeError):
        valid = False
    if not valid:
        raise UrlError(f"--url has an invalid host: {shown}")
    return Endpoint(base=base, display=redact_url(base), authorization=authorization)


@dataclass
class BenchConfig:
    url: str
    model: str | None
    api_key: str | None
    shapes: list[Shape]
    seed: int = 0
    requests: int | None = None  # overrides each shape's count
    duration_s: float | None = None  # per shape: no new request after this
    deadline_s: float = 300.0  # per request
    equivalence: bool = True
    # The serving host's facts (bench --facts FILE, read by the flow) and where they came
    # from; None: collected here when the server is on this host (a loopback URL).
    host_facts: Facts | None = None
    host_source: str | None = None
    container_image: str | None = None  # apply --verify: the image the server runs from
    # apply --verify: how it launched the server (its spec's container); None: read from
    # this host when the server is on it (collect/bench/server_args.py).
    server_args: ServerArgs | None = None
    # bench --rate: one shape at several loads (app/sweep.py) instead of each shape once.
    load: RateLoad | None = None
    # bench --multi-turn N: each user's requests are conversations of N turns (app.multiturn).
    multi_turn: int = 1
    # --client-processes N: the client processes that send each shape (None: app/clients.py's
    # auto count; a conversation of --multi-turn is always sent from this process).
    client_processes: int | None = None


@dataclass(frozen=True)
class RateLoad:
    """``bench --rate``'s loads: the rates given, or (``rates`` None) a sweep that finds
    its own (rules/sweep.py), and the SLOs their requests are judged against."""

    rates: tuple[float, ...] | None
    arrival: str  # collect/bench/schedule.py's ARRIVALS
    burstiness: float | None  # gamma only
    slo: dict[str, float] = field(default_factory=dict)
    level: float = 0.9
    points: int = 6  # a sweep's grid (checks/bench_sweep.toml)
    refine: int = 2
    rise_pct: float = 50.0
    # The loads to measure as they are, in order (the runs after a sweep's first: --repeat,
    # the other server of --compare-urls, apply --verify's new container).
    plan: tuple[tuple[sweeps.Load, str], ...] | None = None


@dataclass
class SweepState:
    """A rate run in progress: its loads measured so far (the last one maybe partial),
    each point's peak in flight and send lateness (seconds), and notes."""

    load: RateLoad
    shape: str
    loads: list[tuple[sweeps.Load, str]] = field(default_factory=list)
    extras: dict[str, tuple[int | None, Sequence[float] | None]] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)


# How many of the latest requests the live display's running p50 is over.
LIVE_RECENT = 1000


@dataclass
class Live:
    """Progress of the shape being measured (read by the CLI's display)."""

    shape: str = ""
    phase: str = ""
    total: int = 0
    done: int = 0
    errors: int = 0
    # The last LIVE_RECENT requests' TTFT and E2E (the display's running p50: bounded, so
    # that neither memory nor the display's sort grows with the run).
    ttft_s: deque[float] = field(default_factory=lambda: deque(maxlen=LIVE_RECENT))
    e2e_s: deque[float] = field(default_factory=lambda: deque(maxlen=LIVE_RECENT))

    def count(self, sample: RequestSample) -> None:
        """One request ended (a shape's or a trace replay's): done, and its TTFT and E2E in
        the running p50, or an error."""
        self.done += 1
        if sample.ok:
            assert sample.ttft_ms is not None
            assert sample.e2e_ms is not None
            self.ttft_s.append(sample.ttft_ms / 1000.0)
            self.e2e_s.append(sample.e2e_ms / 1000.0)
        else:
            self.errors += 1


@dataclass
class _Current:
    shape: Shape
    input_tokens: int
    size_source: str
    notes: list[str]
    total: int
    t0: float = 0.0
    # Each request as it ended (its answer judged then, and not kept), held as columns.
    samples: SampleTable = field(default_factory=SampleTable)
    # Answers with reasoning text the server did not count: (their place in samples, the
    # text, its chunks), counted with the server's /tokenize once the shape is measured.
    uncounted: list[tuple[int, str, int]] = field(default_factory=list)
    before: Snapshot | None = None
    peaks: list[Snapshot] = field(default_factory=list)
    multi_turn: int | None = None  # --multi-turn: the turns asked
    resent: int = 0  # requests written again on a new connection (client.stream_chat)


@dataclass
class RunState:
    started_at: str = ""
    seed: int = 0
    server: ServerInfo | None = None
    findings: list[str] = field(default_factory=list)
    shapes: list[ShapeResult] = field(default_factory=list)
    current: _Current | None = None
    stopped: bool = False  # measuring stopped short (a finding says why)
    environment: Environment | None = None  # the pin, without the fingerprints
    fingerprints: list[str] = field(default_factory=list)  # system_fingerprint, distinct
    sweep: SweepState | None = None  # bench --rate


def note_fingerprint(state: RunState, fp: str | None) -> None:
    """Keep an answer's system_fingerprint (the first MAX_FINGERPRINTS distinct ones)."""
    if fp and fp not in state.fingerprints and len(state.fingerprints) < MAX_FINGERPRINTS:
        state.fingerprints.append(fp)


def pinned_environment(state: RunState) -> Environment | None:
    """The run's environment: what discovery pinned, with the answers' fingerprints."""
    env = state.environment
    if env is None:
        return None
    hashes = {h for h in map(config_hash, state.fingerprints) if h is not None}
    return msgspec.structs.replace(
        env,
        system_fingerprints=list(state.fingerprints),
        config_hash=hashes.pop() if len(hashes) == 1 else None,
    )


Progress = Callable[[Live], None]


def _degenerate(o: client.Outcome, max_tokens: int) -> str | None:
    """Why a successful answer is degenerate (rules/degenerate.py), else None."""
    if not o.ok:
        return None
    return degenerate.judge(o.text, o.reasoning_text, tokens_asked=max_tokens > 0)


def _sample(
    o: client.Outcome, t0: float, max_tokens: int, turn: int | None = None
) -> RequestSample:
    ms = 1000.0
    return RequestSample(
        turn=turn,
        ok=o.ok,
        error=o.error,
        detail=o.detail,
        start_ms=(o.start_s - t0) * ms,
        ttft_ms=None if o.ttft_s is None else o.ttft_s * ms,
        e2e_ms=None if o.latency_s is None else o.latency_s * ms,
        itl_ms=[v * ms for v in o.itl_s] if o.ok else [],
        prompt_tokens=o.prompt_tokens,
        output_tokens=o.completion_tokens,
        reasoning_tokens=o.reasoning_tokens,
        degenerate=_degenerate(o, max_tokens),
    )


def _shape_result(
    cur: _Current,
    *,
    end: float,
    complete: bool,
    after: Snapshot | None,
    equivalence: list[EquivalenceOutput],
    reasoning_estimates: list[int | None] | None = None,
) -> ShapeResult:
    samples = cur.samples
    errors = samples.error_counts()
    server = None
    if cur.before is not None and after is not None:
        server = delta(cur.before, after, cur.peaks)
    estimates = reasoning_estimates or chunk_estimates(cur)
    with spill_sorted():
        metrics = shape_metrics(
            samples,
            duration_s=max(0.0, end - cur.t0) if cur.t0 else 0.0,
            reasoning_estimates=estimates,
            server_generation_tokens=None if server is None else server.generation_tokens,
        )
    notes = list(cur.notes)
    if cur.resent:
        notes.append(resent_note(cur.resent))
    if metrics.token_source != USAGE:
        notes.append(
            "the server sent no usage for some requests: their output tokens are counted "
            "from token chunks (estimated)"
        )
    if metrics.reasoning_source == ESTIMATED:
        notes.append("reasoning tokens are estimated (the server did not count them)")
    if (
        server is not None
        and server.generation_tokens is not None
        and complete
        and server.generation_tokens != metrics.output_tokens
    ):
        notes.append(
            f"the server counted {server.generation_tokens:g} generated tokens, the client "
            f"{metrics.output_tokens} (other traffic on the server, or failed requests?)"
        )
    client_ttft = metrics.ttft_ms.mean
    if (
        server is not None
        and server.ttft is not None
        and server.ttft.mean_ms is not None
        and client_ttft is not None
        and client_ttft > 2 * server.ttft.mean_ms + _TTFT_GAP_MS
    ):
        notes.append(
            f"mean TTFT is {client_ttft:.0f} ms here but {server.ttft.mean_ms:.0f} ms in the "
            "server's own histogram: the time goes between the engine and this client "
            "(HTTP front end, network, or a CPU-starved server or client)"
        )
    return ShapeResult(
        name=cur.shape.name,
        description=cur.shape.description,
        concurrency=cur.shape.concurrency,
        input_tokens=cur.input_tokens,
        input_tokens_requested=cur.shape.input_tokens,
        input_size_source=cur.size_source,
        output_tokens_max=cur.shape.output_tokens,
        requests=len(samples),
        completed=samples.completed(),
        errors=errors,
        duration_s=max(0.0, end - cur.t0) if cur.t0 else 0.0,
        complete=complete,
        metrics=metrics,
        server=server,
        equivalence=equivalence,
        samples=samples,
        notes=notes,
        requests_planned=cur.total,
        quantiles=cur.shape.asked_quantiles(),
        requests_needed=sample_rules.needed(cur.shape.asked_quantiles())[1],
        turns=cur.multi_turn,
    )


def spill_sorted() -> contextlib.AbstractContextManager[None]:
    """A run's long series sorted on disk while its percentiles are taken (report/stats.py's
    Ascending: an unnamed temporary file, not a second 8-byte copy of the token gaps)."""
    import tempfile

    from blackwell_doctor.report.stats import spilling

    return spilling(tempfile.TemporaryFile)


def chunk_estimates(cur: _Current) -> list[int | None]:
    """Each sample's reasoning tokens as its reasoning chunks, where the server counted none
    (None elsewhere): the estimate of a shape whose texts were not counted."""
    estimates: list[int | None] = [None] * len(cur.samples)
    for place, _, chunks in cur.uncounted:
        estimates[place] = chunks
    return estimates


def resent_note(count: int) -> str:
    """The note of a shape whose ``count`` requests were written again (client.stream_chat)."""
    return (
        f"{count} requests were written again on a new connection: the server had closed the "
        "pooled keep-alive connection they were first written to, before answering (timed "
        "from the first attempt)"
    )


def _sample_notes(shape: Shape, planned: int, completed: int) -> list[str]:
    """What a shape's completed requests leave unjudged: its percentiles that have fewer
    than checks/bench_samples.toml's samples beyond them."""
    rules = sample_rules.load_sample_rules()
    short = [q for q in shape.asked_quantiles() if completed < sample_rules.samples_for(q)]
    if not short:
        return []
    top = max(short)
    return [
        f"{completed} requests measured (of {planned} planned); "
        f"{', '.join(sample_rules.label(q) for q in short)} "
        f"{'need' if len(short) > 1 else 'needs'} at least "
        f"{sample_rules.samples_for(top):,} ({rules.beyond_quantile} beyond "
        f"{sample_rules.label(top)}, checks/bench_samples.toml): bench --compare calls "
        "them too few samples"
    ]


def build_document(state: RunState, *, interrupted: bool) -> BenchRun:
    """The run document from whatever ``state`` holds (a shape in progress included)."""
    shapes = list(state.shapes)
    if state.current is not None and state.current.samples:
        shapes.append(
            _shape_result(
                state.current, end=time.perf_counter(), complete=False, after=None, equivalence=[]
            )
        )
    server = state.server or ServerInfo(
        url="",
        model=None,
        models=[],
        max_model_len=None,
        metrics_endpoint=False,
        tokenize_endpoint=False,
        error="not contacted",
    )
    # A degenerate answer (rules/degenerate.py) is a finding that fails the run.
    degenerate_findings = [line for s in shapes for line in degenerate.shape_findings(s)]
    findings = list(state.findings) + degenerate_findings
    failed = server.error is not None or any(s.errors for s in shapes) or bool(degenerate_findings)
    complete = (
        not interrupted
        and not state.stopped
        and server.error is None
        and all(s.complete for s in shapes)
    )
    code = exitcodes.run(interrupted=interrupted, findings=failed or not complete)
    extra: dict[str, Any] = {}
    if state.sweep is not None:
        extra["sweep"] = sweep_section(state.sweep, shapes, seed=state.seed)
    return BenchRun(
        schema_version=BENCH_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        started_at=state.started_at,
        seed=state.seed,
        server=server,
        complete=complete,
        interrupted=interrupted,
        findings=findings,
        shapes=shapes,
        exit_code=int(code),
        environment=pinned_environment(state),
        **extra,
    )


def sweep_section(sweep: SweepState, shapes: list[ShapeResult], *, seed: int) -> SweepResult:
    """The run document's ``sweep`` from what ``sweep`` measured into ``shapes``."""
    load = sweep.load
    return sweeps.summarise(
        shape=sweep.shape,
        mode=sweeps.SWEEP if load.rates is None and load.plan is None else sweeps.RATES,
        arrival=load.arrival,
        burstiness=load.burstiness,
        slo=load.slo,
        level=load.level,
        loads=sweep.loads,
        runs=[{s.name: s for s in shapes}],
        extras=sweep.extras,
        rise_pct=load.rise_pct,
        seed=seed,
        notes=sweep.notes,
    )


class _Server:
    def __init__(
        self,
        session: aiohttp.ClientSession,
        endpoint: Endpoint,
        key: str | None,
        deadline_s: float,
    ) -> None:
        self.session = session
        # Probes (/v1/models, /tokenize, /metrics) get the request deadline, at most 15 s.
        self.deadline_s = min(_PROBE_DEADLINE_S, deadline_s)
        self.endpoint = endpoint
        self.headers = {"Content-Type": "application/json"}
        if key:
            self.headers["Authorization"] = f"Bearer {key}"
        elif endpoint.authorization:
            self.headers["Authorization"] = endpoint.authorization
        # What the server's answers may echo of the credentials, scrubbed from what is kept.
        self.scrub = client.scrubber(self.headers.get("Authorization"))
        # Why a probe last failed, by path (for the findings).
        self.failed: dict[str, str] = {}

    def reason(self, exc: BaseException) -> str:
        """Why a probe failed, in a few words (kept: scrubbed and short)."""
        if isinstance(exc, _HttpStatus):
            return f"HTTP {exc.status}" + (
                " redirect, not followed" if 300 <= exc.status < 400 else ""
            )
        if isinstance(exc, client.BodyTooLarge):
            return f"answered {exc}"
        if isinstance(exc, TimeoutError):
            return f"no answer within {self.deadline_s:g} s"
        if isinstance(exc, msgspec.DecodeError):
            return "not JSON"
        if isinstance(exc, MetricsParseError):
            return "not Prometheus text"
        return client.kept(" ".join(f"{type(exc).__name__}: {exc}".split()), self.scrub)

    async def _json(self, method: str, path: str, data: bytes | None = None) -> Any:
        async with asyncio.timeout(self.deadline_s):
            async with self.session.request(
                method,
                self.endpoint.url(path),
                data=data,
                headers=self.headers,
                allow_redirects=False,
            ) as r:
                if r.status != 200:
                    raise _HttpStatus(r.status)
                return msgspec.json.decode(await client.read_capped(r))

    async def get_json(self, path: str) -> Any:
        return await self._json("GET", path)

    async def get_text(self, path: str) -> str:
        async with asyncio.timeout(self.deadline_s):
            async with self.session.get(
                self.endpoint.url(path), headers=self.headers, allow_redirects=False
            ) as r:
                if r.status != 200:
                    raise _HttpStatus(r.status)
                return (await client.read_capped(r)).decode("utf-8", "replace")

    async def post_json(self, path: str, body: dict[str, Any]) -> Any:
        return await self._json("POST", path, msgspec.json.encode(body))

    async def metrics(self, model: str | None, *, quick: bool = False) -> Snapshot | None:
        try:
            async with asyncio.timeout(self.deadline_s):
                async with self.session.get(
                    self.endpoint.url("/metrics"), headers=self.headers, allow_redirects=False
                ) as r:
                    if r.status != 200:
                        raise _HttpStatus(r.status)
                    text = (await client.read_capped(r)).decode("utf-8", "replace")
            # In a thread: prometheus_client's parser took 45-73 ms for vLLM's 56 kB on the
            # loaded 2-core VM, and on the event loop, once a second, it held every request
            # due meanwhile: at 8 req/s (constant arrivals, 40 requests) the sends were 647
            # to 981 ms late at p99; with the parse here 9 to 37 ms, as without polling at
            # all (14 to 47 ms, the host's own scheduling).
            return await asyncio.to_thread(parse, text, model=model, quick=quick)
        except (
            _HttpStatus,
            TimeoutError,
            aiohttp.ClientError,
            OSError,
            MetricsParseError,
            client.BodyTooLarge,
        ) as exc:
            self.failed["/metrics"] = self.reason(exc)
            return None

    async def count_tokens(self, model: str, text: str, *, chat: bool) -> int | None:
        body: dict[str, Any] = {"model": model}
        if chat:
            body["messages"] = [{"role": "user", "content": text}]
        else:
            body["prompt"] = text
            body["add_special_tokens"] = False
        try:
            answer = await self.post_json("/tokenize", body)
        except _PROBE_ERRORS as exc:
            self.failed["/tokenize"] = self.reason(exc)
            return None
        count = answer.get("count") if isinstance(answer, dict) else None
        return count if isinstance(count, int) and not isinstance(count, bool) else None


class _HttpStatus(Exception):
    def __init__(self, status: int) -> None:
        super().__init__(f"HTTP {status}")
        self.status = status


_PROBE_ERRORS = (
    _HttpStatus,
    TimeoutError,
    aiohttp.ClientError,
    OSError,
    msgspec.DecodeError,
    client.BodyTooLarge,
)


def _describe(exc: BaseException, srv: _Server) -> str:
    if isinstance(exc, aiohttp.ClientConnectorError):
        text = f"{client.UNREACHABLE}: cannot connect to {exc.host}:{exc.port}: {exc.os_error}"
    elif isinstance(exc, TimeoutError):
        text = f"{client.STALLED}: /v1/models did not answer within {srv.deadline_s:g} s"
    elif isinstance(exc, _HttpStatus):
        text = f"{client.http_kind(exc.status)}: /v1/models answered {srv.reason(exc)}"
    elif isinstance(exc, client.BodyTooLarge):
        text = f"{client.TOO_LARGE}: /v1/models {srv.reason(exc)}"
    else:
        text = f"{client.EARLY_CLOSE}: {type(exc).__name__}: {exc}"
    return client.kept(" ".join(text.split()), srv.scrub)


def _context_length(value: object, state: RunState) -> int | None:
    """The server's max_model_len when it is one (an integer 1..2^31-1); else a finding,
    and prompts are not capped by it."""
    if value is None:
        return None
    if isinstance(value, int) and not isinstance(value, bool) and 1 <= value <= _MAX_MODEL_LEN:
        return value
    try:
        shown = repr(value)
    except ValueError:  # an integer of more digits than Python converts
        shown = "a huge integer"
    if len(shown) > 40:
        shown = shown[:40] + "..."
    state.findings.append(
        f"the server's max_model_len ({shown}) is not a context length "
        f"(1..{_MAX_MODEL_LEN}): prompts are not capped by it"
    )
    return None


def _unused(srv: _Server, path: str, name: str, consequence: str) -> str:
    """The finding for the endpoint ``path`` the bench cannot use: why it failed, or, when
    it answered 404/405 or was not asked, that the server has no ``name``; then what that
    costs."""
    why = srv.failed.get(path, "")
    if why and not why.startswith(("HTTP 404", "HTTP 405")):
        return f"{path} could not be used ({why}): {consequence}"
    return f"the server has no {name}: {consequence}"


async def _discover(srv: _Server, config: BenchConfig, state: RunState) -> bool:
    endpoint = srv.endpoint
    models: list[str] = []
    listed = 0
    too_long = 0
    max_len: int | None = None
    entry_of_model: dict[str, Any] | None = None
    error: str | None = None
    try:
        listing = await srv.get_json("/v1/models")
        data = listing.get("data", []) if isinstance(listing, dict) else []
        for entry in data if isinstance(data, list) else []:
            if isinstance(entry, dict) and isinstance(entry.get("id"), str):
                if len(entry["id"]) > MAX_MODEL_ID_CHARS:
                    too_long += 1
                    continue
                # An id is server text: what it echoes of the credentials goes.
                name = srv.scrub(entry["id"])
                listed += 1
                if len(models) < MAX_MODELS_KEPT:
                    models.append(name)
                chosen = config.model or (models[0] if listed == 1 else None)
                if name == chosen and entry_of_model is None:
                    entry_of_model = entry
                if name == chosen and "max_model_len" in entry:
                    max_len = _context_length(entry["max_model_len"], state)
    except _PROBE_ERRORS as e:
        # Without --model nothing can be asked; with it, only a server that cannot be
        # reached at all stops the run (a stalled or failing server is measured failing).
        if config.model is None or isinstance(e, aiohttp.ClientConnectorError):
            error = _describe(e, srv)
        else:
            state.findings.append(f"/v1/models could not be read ({_describe(e, srv)})")
    if too_long:
        state.findings.append(
            f"/v1/models lists {too_long} model id(s) longer than {MAX_MODEL_ID_CHARS} "
            "characters: ignored"
        )
    if listed > len(models):
        state.findings.append(
            f"/v1/models lists {listed} models: the first {len(models)} are kept in the record"
        )
    model = config.model
    if error is None and model is None:
        if not models:
            error = "the server lists no model at /v1/models; pass --model"
        else:
            model = models[0]
            if listed > 1:
                state.findings.append(
                    load_rule_data().word("bench", "models_listed", listed=str(listed), model=model)
                )
    tokenize = False
    metrics = False
    if error is None and model is not None:
        tokenize = await srv.count_tokens(model, "hello", chat=True) is not None
        metrics = await srv.metrics(model) is not None
        if not tokenize:
            state.findings.append(
                _unused(
                    srv,
                    "/tokenize",
                    "/tokenize",
                    f"prompt sizes are estimated (~{prompts.TOKENS_PER_WORD_ESTIMATE} tokens "
                    "per word)",
                )
            )
        if not metrics:
            state.findings.append(
                _unused(srv, "/metrics", "Prometheus /metrics", "no server-side cross-check")
            )
    state.server = ServerInfo(
        url=endpoint.display,
        model=model,
        models=models,
        max_model_len=max_len,
        metrics_endpoint=metrics,
        tokenize_endpoint=tokenize,
        error=error,
    )
    if error is None:
        state.environment = await _pin(srv, config, model, entry_of_model, max_len)
    return error is None


def _text_of(value: object) -> str | None:
    return cut(value) if isinstance(value, str) and value else None


async def _pin(
    srv: _Server,
    config: BenchConfig,
    model: str | None,
    entry: dict[str, Any] | None,
    max_len: int | None,
) -> Environment:
    """What the server and its host say of their build and configuration (the run's
    environment pin): each answer it does not give is noted, never a failure."""
    unavailable: list[str] = []
    version = None
    try:
        version = version_of(await srv.get_json("/version"))
        if version is None:
            unavailable.append("/version: not vLLM's answer")
    except _PROBE_ERRORS as exc:
        unavailable.append(f"/version: {srv.reason(exc)}")
    server_config: dict[str, str] = {}
    try:
        server_config.update(info_metrics(await srv.get_text("/metrics")))
    except NotPrometheus:
        unavailable.append("/metrics: not Prometheus text")
    except _PROBE_ERRORS as exc:
        unavailable.append(f"/metrics: {srv.reason(exc)}")
    # vLLM's development endpoint (VLLM_SERVER_DEV_MODE=1): absent as a rule.
    with contextlib.suppress(*_PROBE_ERRORS):
        server_config.update(server_info(await srv.get_json("/server_info?config_format=json")))
    pin = None
    if model is not None:
        entry = entry or {}
        pin = ModelPin(
            id=srv.scrub(model),
            root=_text_of(entry.get("root")),
            parent=_text_of(entry.get("parent")),
            max_model_len=max_len,
            owned_by=_text_of(entry.get("owned_by")),
        )
    host, missing = await _host_pin(config, srv.endpoint)
    args, no_args = await _server_args(config, srv.endpoint)
    if no_args is not None:
        unavailable.append(f"launch arguments: {no_args}")
    return Environment(
        server_version=version,
        model=pin,
        server_config={k: srv.scrub(v) for k, v in server_config.items()},
        server_unavailable=[srv.scrub(u) for u in unavailable],
        host=host,
        host_missing=missing,
        server_args=(
            msgspec.UNSET
            if args is None
            else msgspec.structs.replace(args, argv=[srv.scrub(a) for a in args.argv])
        ),
    )


async def _server_args(
    config: BenchConfig, endpoint: Endpoint
) -> tuple[ServerArgs | None, str | None]:
    """The server's launch arguments: apply --verify's, else read on this host when the
    server is on it (in a thread: /proc and the Docker API); (None, None) for a remote one."""
    if config.server_args is not None:
        return config.server_args, None
    if not is_loopback(endpoint):
        return None, None
    from blackwell_doctor.collect.bench import server_args

    parts = urllib.parse.urlsplit(endpoint.base)
    try:
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        return None, None
    return await asyncio.to_thread(server_args.on_this_host, port)


def is_loopback(endpoint: Endpoint) -> bool:
    """Whether ``endpoint``'s host is this machine (a loopback address or localhost)."""
    host = urllib.parse.urlsplit(endpoint.base).hostname or ""
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


async def _host_pin(config: BenchConfig, endpoint: Endpoint) -> tuple[HostPin | None, str | None]:
    """The serving host's GPU stack: from --facts, else collected here when the server is
    on this host (NVML in a child under a deadline); else None and why."""
    if config.host_facts is not None:
        source = config.host_source or "--facts"
        return host_from_facts(config.host_facts, source=source, image=config.container_image), None
    if not is_loopback(endpoint):
        return None, "the server is not on this host and no --facts FILE was given"
    facts = await asyncio.to_thread(_live_facts)
    return host_from_facts(facts, source="this host", image=config.container_image), None


def _live_facts() -> Facts:
    """This host's platform, NVML and environment facts (no probes, no PCI walk)."""
    import os
    from pathlib import Path

    from blackwell_doctor.collect.env import collect_env
    from blackwell_doctor.collect.gpu import collect_gpu
    from blackwell_doctor.collect.hostfs import HostFS
    from blackwell_doctor.collect.platform import collect_platform
    from blackwell_doctor.facts.document import Unavailable
    from blackwell_doctor.rules.presets import assembled_facts

    platform = collect_platform(HostFS(Path("/")), os.environ)
    nvml, _cuda = collect_gpu(_HOST_GPU_DEADLINE_S)
    return assembled_facts(
        platform=platform,
        pci=Unavailable("not-collected"),
        nvml=nvml,
        cuda=Unavailable("not-collected"),
        env=collect_env(os.environ),
    )


_HOST_GPU_DEADLINE_S = 20.0


async def _calibrate(
    srv: _Server, model: str, shape: Shape, target: int, seed: int
) -> tuple[int, str | None]:
    """Words per prompt so that the chat-templated prompt has about ``target`` tokens, and
    None; or the estimate and why, when the server's counts are implausible."""
    estimate = max(1, round(target / prompts.TOKENS_PER_WORD_ESTIMATE))
    fewest = max(1, math.floor(target / _MAX_TOKENS_PER_WORD))
    most = max(1, math.ceil(target / _MIN_TOKENS_PER_WORD))
    n = estimate
    for _ in range(_CALIBRATION_ROUNDS):
        count = await srv.count_tokens(model, prompts.words(seed, shape.name, 0, n), chat=True)
        if count is None:
            return n, None
        # The words asked for plus the head's (prompts.words: "Request 0 of NAME. ...").
        if (
            not n * _MIN_TOKENS_PER_WORD
            <= count
            <= (n + 8) * _MAX_TOKENS_PER_WORD + (_TEMPLATE_TOKENS)
        ):
            return estimate, (
                f"the server's /tokenize counted {count} tokens for a prompt of {n} words, "
                f"which is not {_MIN_TOKENS_PER_WORD:g} to {_MAX_TOKENS_PER_WORD:g} tokens a "
                "word: prompt sizes are estimated "
                f"(~{prompts.TOKENS_PER_WORD_ESTIMATE} tokens per word)"
            )
        if abs(count - target) <= max(2, target // 50):
            return n, None
        step = min(_CALIBRATION_STEP, max(1 / _CALIBRATION_STEP, target / count))
        n = min(most, max(fewest, round(n * step) - (1 if count > target else 0), 1))
    return n, None


@contextlib.asynccontextmanager
async def polled_metrics(
    srv: _Server, model: str | None, peaks: list[Snapshot], *, poll: bool
) -> AsyncIterator[None]:
    """While the block runs (a shape's load, a replay), the server's /metrics every
    _POLL_INTERVAL_S into ``peaks`` (their gauges' peaks), when ``poll``. Only the lines
    read are parsed (server_metrics.parse's ``quick``), in a thread: vLLM's 55 kB took
    prometheus_client 40-73 ms on the loaded 2-core VM, time a paced sender's loop cannot
    give while requests are due."""

    async def every() -> None:
        while True:
            await asyncio.sleep(_POLL_INTERVAL_S)
            snap = await srv.metrics(model, quick=True)
            if snap is not None:
                peaks.append(snap)

    poller = asyncio.create_task(every()) if poll else None
    try:
        yield
    finally:
        if poller is not None:
            poller.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await poller


async def _settled_metrics(srv: _Server, model: str | None) -> Snapshot | None:
    """/metrics once its generation counter stops moving (the server updates its counters
    just after streaming the last token)."""
    last = await srv.metrics(model)
    for _ in range(10):
        await asyncio.sleep(0.2)
        now = await srv.metrics(model)
        if now is None or last is None:
            return now or last
        if now.counters.get("generation_tokens") == last.counters.get("generation_tokens"):
            return now
        last = now
    return last


def usage_limit(max_tokens: int, extra: dict[str, Any] | None) -> int | None:
    """The most completion tokens a request may be answered: its ``max_tokens``, or what
    its ``extra_body`` asks instead; None when that lifts the limit (not an integer)."""
    asked = [max_tokens]
    for key in ("max_tokens", "max_completion_tokens"):
        if extra and key in extra:
            value = extra[key]
            if not isinstance(value, int) or isinstance(value, bool):
                return None
            asked.append(value)
    return max(asked)


@dataclass(frozen=True)
class PromptSize:
    target: int  # tokens asked for, after the server's max_model_len cap
    n_words: int  # synthetic words per prompt that give about that many tokens
    source: str  # "tokenize" (the server's /tokenize) or "estimated"
    notes: list[str]


def served(state: RunState) -> tuple[ServerInfo, str]:
    """The server :func:`connect` asked, and the model it serves (both set whenever connect
    yields a server)."""
    server = state.server
    assert server is not None
    assert server.model is not None
    return server, server.model


async def prompt_size(
    srv: _Server, config: BenchConfig, server: ServerInfo, shape: Shape
) -> PromptSize:
    """How many synthetic words make ``shape``'s prompt, capped by the server's context."""
    assert server.model is not None
    notes: list[str] = []
    target = shape.input_tokens
    if server.max_model_len is not None:
        cap = int((server.max_model_len - shape.output_tokens) * _CAP_SHARE)
        if cap < 1:
            notes.append(
                f"output_tokens {shape.output_tokens} leaves no room for a prompt within "
                f"max_model_len {server.max_model_len}"
            )
            cap = 1
        if target > cap:
            notes.append(
                f"input capped from {target} to {cap} tokens by the server's max_model_len "
                f"{server.max_model_len}"
            )
            target = cap
    if server.tokenize_endpoint:
        n_words, implausible = await _calibrate(srv, server.model, shape, target, config.seed)
        size_source = "tokenize"
        if implausible is not None:
            notes.append(implausible)
            size_source = ESTIMATED
    else:
        n_words = max(1, round(target / prompts.TOKENS_PER_WORD_ESTIMATE))
        size_source = ESTIMATED
    return PromptSize(target=target, n_words=n_words, source=size_source, notes=notes)


async def send_each(count: int, width: int, send: Callable[[int], Awaitable[bool]]) -> None:
    """``send(0)`` .. ``send(count - 1)`` in order, at most ``width`` at once, until one
    returns False: ``width`` workers, not a task per request (a shape may have a million).
    Whatever ends it (an error, a cancellation), every worker is ended and awaited here, so
    none is left running or dies with an exception nobody reads."""
    numbers = iter(range(count))

    async def worker() -> None:
        for index in numbers:
            if not await send(index):
                return

    workers = [asyncio.create_task(worker()) for _ in range(max(1, min(width, count)))]
    try:
        await asyncio.gather(*workers)
    finally:
        for task in workers:
            task.cancel()
        await asyncio.gather(*workers, return_exceptions=True)


@dataclass(frozen=True)
class ChatTarget:
    """Where a bench's requests go: the server's chat-completions URL, the headers (its API
    key), the model asked, and each request's deadline (--request-timeout)."""

    chat_url: str
    headers: dict[str, str]
    model: str
    deadline_s: float

    async def stream(
        self, session: aiohttp.ClientSession, data: bytes, max_tokens: int | None
    ) -> client.Outcome:
        """The request ``data`` sent and its streamed answer timed (client.stream_chat)."""
        return await client.stream_chat(
            session,
            self.chat_url,
            data,
            self.headers,
            deadline_s=self.deadline_s,
            max_tokens=max_tokens,
        )


def chat_target(srv: _Server, model: str, config: BenchConfig) -> ChatTarget:
    """``config``'s requests to ``model`` on the server ``srv`` connected to."""
    url = srv.endpoint.url("/v1/chat/completions")
    return ChatTarget(url, dict(srv.headers), model, config.deadline_s)


@dataclass(frozen=True)
class ShapeShare:
    """The requests of a shape one client process sends (app/clients.py): their indices,
    and what builds and sends each (its prompt is prompts.words of the shape's name and its
    index, as in this process). ``users`` of them at once (a closed loop), or each at its
    send offset after the start (``offsets``, an open loop); none started ``stop_after_s``
    after the start (--duration)."""

    target: ChatTarget
    seed: int
    name: str
    n_words: int
    max_tokens: int
    ignore_eos: bool
    extra_body: dict[str, Any] | None
    usage_limit: int | None
    indices: array[int]
    users: int
    offsets: array[float] | None = None
    stop_after_s: float | None = None

    def body(self, index: int) -> bytes:
        return client.request_body(
            model=self.target.model,
            prompt=prompts.words(self.seed, self.name, index, self.n_words),
            max_tokens=self.max_tokens,
            ignore_eos=self.ignore_eos,
            extra=self.extra_body,
        )


async def send_shape_share(
    share: ShapeShare,
    t0: float,
    session: aiohttp.ClientSession,
    report: clients.Report,
    sent: Callable[[], None],
) -> int:
    """Send ``share`` from ``t0`` (a clients.Sender): each request measured into ``report``
    as it ends (its answer judged there); the most requests in flight at once."""
    count = len(share.indices)
    few = count * share.n_words <= _PREBUILT_WORDS
    bodies = [share.body(i) for i in share.indices] if few else None
    stop_at = None if share.stop_after_s is None else t0 + share.stop_after_s
    done = schedule.Sent()

    async def one(k: int) -> bool:
        if stop_at is not None and time.perf_counter() >= stop_at:
            return False
        data = bodies[k] if bodies is not None else share.body(share.indices[k])
        sent()
        late = done.lateness_s[k] if share.offsets is not None else 0.0
        o = await share.target.stream(session, data, share.usage_limit)
        report(clients.result(share.indices[k], late, o, _sample(o, t0, share.max_tokens)))
        return True

    if share.offsets is None:
        # A closed loop starts at t0 (the processes' common start, just ahead).
        await asyncio.sleep(max(0.0, t0 - time.perf_counter()))
        await send_each(count, share.users, one)
        return min(share.users, count)
    await schedule.send_on_schedule(
        share.offsets,
        one,
        start=t0,
        stop=lambda: stop_at is not None and time.perf_counter() >= stop_at,
        sent=done,
    )
    return done.peak_in_flight


def client_processes(config: BenchConfig, users: int, offsets: Sequence[float] | None) -> int:
    """How many client processes send a shape's requests: --client-processes, else (auto)
    app/clients.py's count for its open loop or its users."""
    if config.client_processes is not None:
        return config.client_processes
    return clients.for_users(users) if offsets is None else clients.for_rate(offsets)


async def measure_shape(
    srv: _Server,
    config: BenchConfig,
    state: RunState,
    shape: Shape,
    live: Live,
    progress: Progress,
    *,
    offsets: Sequence[float] | None = None,
    size: PromptSize | None = None,
    warmup: bool = True,
    equivalence: bool = True,
    sent: schedule.Sent | None = None,
) -> None:
    """Measure ``shape`` into ``state.shapes``: its users in a closed loop (each sends its
    next request when its last one ended), or, with ``offsets``, each request at its send
    offset (collect/bench/schedule.py, an open loop; ``sent`` gets each one's lateness and
    the peak in flight), from this process or from client processes (app/clients.py).
    ``size`` (the prompt size, when already known), ``warmup`` and ``equivalence`` (the
    greedy prompts) let a sweep do those once for all its points."""
    server, model = served(state)
    turns_note = None
    if config.multi_turn > 1:
        from blackwell_doctor.app import multiturn

        assert offsets is None, "offsets with --multi-turn: its conversations are a closed loop"
        shape, turns_note = multiturn.fit(shape, config.multi_turn, server.max_model_len)
    if size is None:
        size = await prompt_size(srv, config, server, shape)
    target, n_words, size_source = size.target, size.n_words, size.source
    notes = list(size.notes)
    if turns_note:
        notes.append(turns_note)
    total = config.requests or shape.planned_requests()
    if offsets is not None:
        offsets = offsets[:total]
    chat = chat_target(srv, model, config)
    most = usage_limit(shape.output_tokens, shape.extra_body)
    share = ShapeShare(
        target=chat,
        seed=config.seed,
        name=shape.name,
        n_words=n_words,
        max_tokens=shape.output_tokens,
        ignore_eos=shape.ignore_eos,
        extra_body=shape.extra_body,
        usage_limit=most,
        indices=array("q", range(total)),
        users=shape.concurrency,
        offsets=None if offsets is None else array("d", offsets),
        stop_after_s=config.duration_s,
    )
    live.shape, live.total, live.done, live.errors = shape.name, total, 0, 0
    live.ttft_s.clear()
    live.e2e_s.clear()

    async def send(data: bytes) -> client.Outcome:
        return await chat.stream(srv.session, data, most)

    if shape.warmup and warmup:
        live.phase = "warm-up"
        progress(live)

        async def warm(index: int) -> bool:
            await send(
                client.request_body(
                    model=model,
                    prompt=prompts.words(config.seed, shape.name + "/warmup", index, n_words),
                    max_tokens=shape.output_tokens,
                    ignore_eos=shape.ignore_eos,
                    extra=shape.extra_body,
                )
            )
            return True

        await send_each(shape.warmup, min(shape.warmup, shape.concurrency), warm)
    cur = _Current(
        shape=shape, input_tokens=target, size_source=size_source, notes=notes, total=total
    )
    state.current = cur
    processes = 1
    if config.multi_turn > 1:
        cur.multi_turn = config.multi_turn
    else:
        users = total if offsets is not None else shape.concurrency
        processes = max(1, min(client_processes(config, shape.concurrency, offsets), users))
    if processes > 1:
        notes.append(f"sent by {processes} client processes")
    if total * n_words > _PREBUILT_WORDS:
        notes.append(
            f"each request's prompt was built just before it was sent ({total} prompts of "
            f"{n_words} words are too many to hold at once)"
        )
    if server.metrics_endpoint:
        cur.before = await _settled_metrics(srv, model)
    # Each request's send lateness, by index (an open loop; NaN: not sent).
    lateness = array("d", [math.nan]) * (total if offsets is not None else 0)

    def take(result: clients.Result) -> None:
        index, late, sample, estimate, fingerprint, resent, reasoning = result
        note_fingerprint(state, fingerprint)
        cur.resent += resent
        if reasoning:
            cur.uncounted.append((len(cur.samples), reasoning, estimate or 0))
        cur.samples.append(sample)
        if offsets is not None:
            lateness[index] = late
        live.count(sample)
        progress(live)

    def record(outcome: client.Outcome, turn: int | None = None) -> None:
        sample = _sample(outcome, cur.t0, shape.output_tokens, turn)
        take(clients.result(0, 0.0, outcome, sample))

    async def turn(messages: list[dict[str, str]], number: int) -> client.Outcome | None:
        if stop_at is not None and time.perf_counter() >= stop_at:
            return None
        outcome = await send(
            client.request_body(
                model=model,
                prompt="",
                messages=messages,
                max_tokens=shape.output_tokens,
                ignore_eos=shape.ignore_eos,
                extra=shape.extra_body,
            )
        )
        record(outcome, number)
        return outcome

    def report(result: clients.Result) -> None:
        take(result)

    live.phase = "measuring"
    progress(live)
    lost = 0
    stop_at: float | None = None
    peak = 0

    def keep_lateness() -> None:  # into ``sent`` (each request's, in order), whatever ended it
        if sent is not None:
            sent.peak_in_flight = peak
            sent.lateness_s[:] = array("d", (v for v in lateness if not math.isnan(v)))

    async with contextlib.AsyncExitStack() as ends:
        ends.callback(keep_lateness)
        await ends.enter_async_context(
            polled_metrics(srv, model, cur.peaks, poll=server.metrics_endpoint)
        )
        if cur.multi_turn is not None:
            from blackwell_doctor.app import multiturn

            cur.t0 = time.perf_counter()
            stop_at = cur.t0 + config.duration_s if config.duration_s else None
            lost = await multiturn.run_conversations(
                total,
                config.multi_turn,
                shape.concurrency,
                prompt=lambda index: prompts.words(config.seed, shape.name, index, n_words),
                ask=turn,
                each=send_each,
            )
        elif processes == 1:
            cur.t0 = time.perf_counter()
            peak = await send_shape_share(share, cur.t0, srv.session, report, lambda: None)
        else:
            shares = [
                dataclasses.replace(
                    share,
                    indices=share.indices[k::processes],
                    users=len(range(k, shape.concurrency, processes)) or 1,
                    offsets=None if share.offsets is None else share.offsets[k::processes],
                )
                for k in range(processes)
            ]
            run = clients.Run(shares, send_shape_share)
            try:
                await run.send(report, lambda _: None)
            finally:
                cur.t0 = run.t0 or time.perf_counter()
                peak = run.peak_in_flight
        # vLLM's benchmark_duration: from before the first request to after the last.
        end = time.perf_counter()
    after = await _settled_metrics(srv, model) if server.metrics_endpoint else None
    stopped = bool(config.duration_s) and len(cur.samples) + lost < total
    if stopped:
        notes.append(
            f"--duration {config.duration_s:g} s reached: {len(cur.samples)} of "
            f"{total} requests sent"
        )
    if cur.multi_turn is not None:
        from blackwell_doctor.app import multiturn

        pairs = [
            (s.turn or 0, s.ttft_ms / 1000.0) for s in cur.samples if s.ok and s.ttft_ms is not None
        ]
        notes.append(multiturn.ttft_by_turn(pairs, config.multi_turn))
        if lost:
            notes.append(f"{lost} turns not sent: an earlier turn of their conversation failed")
    notes += _sample_notes(shape, total, cur.samples.completed())
    estimates = chunk_estimates(cur)
    if server.tokenize_endpoint:
        for place, text, _ in cur.uncounted:
            counted = await srv.count_tokens(model, text, chat=False)
            if counted is not None:
                estimates[place] = counted
    cur.uncounted = []
    greedy_outputs: list[EquivalenceOutput] = []
    if config.equivalence and equivalence:
        live.phase = "equivalence"
        progress(live)
        asked = min(shape.output_tokens, _EQUIVALENCE_MAX_TOKENS)
        # Numerical drift (rules/drift.py): each greedy answer's log-probabilities, where
        # the server gives them; one that refuses them (4xx) is asked without from then on.
        top: int | None = drift.load_rules().top_logprobs

        async def greedy(text: str, top: int | None) -> client.Outcome:
            body = client.request_body(
                model=model,
                prompt=text,
                max_tokens=asked,
                ignore_eos=shape.ignore_eos,
                extra=shape.extra_body,
                greedy=True,
                top_logprobs=top,
            )
            return await chat.stream(srv.session, body, usage_limit(asked, shape.extra_body))

        for prompt_id, text in prompts.EQUIVALENCE_PROMPTS:
            o = await greedy(text, top)
            if top is not None and o.error == client.HTTP_4XX:
                notes.append(
                    f"the server refused logprobs for the greedy prompts ({o.detail}): "
                    "they are compared by their text only"
                )
                top = None
                o = await greedy(text, top)
            note_fingerprint(state, o.system_fingerprint)
            greedy_outputs.append(
                EquivalenceOutput(
                    prompt_id=prompt_id,
                    ok=o.ok,
                    text=o.text,
                    reasoning=o.reasoning_text,
                    output_tokens=o.completion_tokens,
                    finish_reason=o.finish_reason,
                    error=o.error,
                    degenerate=_degenerate(o, asked),
                    logprobs=o.logprobs if o.ok else None,
                )
            )
    state.shapes.append(
        _shape_result(
            cur,
            end=end,
            complete=not stopped,
            after=after,
            equivalence=greedy_outputs,
            reasoning_estimates=estimates,
        )
    )
    state.current = None
    live.phase = "done"
    progress(live)


@contextlib.asynccontextmanager
async def connect(
    config: BenchConfig, state: RunState, *, width: int
) -> AsyncIterator[_Server | None]:
    """A session to the server with room for ``width`` connections, after asking it what
    it serves (into ``state``); None when it could not be asked."""
    endpoint = parse_url(config.url)
    state.started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    state.seed = config.seed
    # Keep-alive connections, as vLLM 0.32.0's benchmark keeps them (collect/bench/client.py:
    # Pool; a request written on one the server had just closed is written again there).
    # A connection per request (force_close) cost about a third of the client's tokens/s at
    # 1,024 streams (benchmarks/evidence/2026-11-28/bench-client-vm/keepalive-ab.txt).
    connector = client.Pool(width)
    async with aiohttp.ClientSession(
        connector=connector,
        timeout=aiohttp.ClientTimeout(total=None),
        read_bufsize=1 << 20,
    ) as session:
        srv = _Server(session, endpoint, config.api_key, config.deadline_s)
        yield srv if await _discover(srv, config, state) else None


async def run_bench(config: BenchConfig, state: RunState, progress: Progress) -> None:
    """Measure every shape of ``config`` into ``state`` (``config.load`` is app/sweep.py's:
    its ``run`` measures either)."""
    assert config.load is None, "config.load set: app/sweep.py measures that"
    width = max(s.concurrency for s in config.shapes) + 4
    async with connect(config, state, width=width) as srv:
        if srv is None:
            return
        live = Live()
        for shape in config.shapes:
            try:
                await measure_shape(srv, config, state, shape, live, progress)
            except MemoryError:
                # Within the shapes' limits only a machine short of memory gets here; what
                # was measured is kept (the shape in progress as partial).
                state.findings.append(
                    f"{shape.name}: this machine ran out of memory building or sending its "
                    f"requests ({shape.concurrency} x ~{shape.input_tokens} tokens in flight): "
                    "measuring stopped"
                )
                state.stopped = True
                return
