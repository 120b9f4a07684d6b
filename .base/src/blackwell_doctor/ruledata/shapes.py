"""Shapes: named sets of requests. Three are built in; users add their own in TOML.

A shapes file (``bench --shapes FILE``) holds one table per shape::

    [shape.chat-8k]
    input_tokens = 8192       # prompt size in the server's tokens (capped by max_model_len)
    output_tokens = 256       # max_tokens of each request
    concurrency = 16          # requests in flight at once (users)
    requests = 64             # measured requests (--requests overrides); without it, from:
    quantiles = [50, 99]      # the percentiles to be judged (default: checks/bench_samples.toml)
    warmup = 2                # requests sent first and not counted
    ignore_eos = true         # ask the server to generate exactly output_tokens (vLLM, SGLang)
    [shape.chat-8k.extra_body]  # merged into every request body of this shape
    chat_template_kwargs = { enable_thinking = false }

A file's shape with a built-in's name replaces the built-in.

Limits (each a one-line error, exit 2): input_tokens 1..10,000,000, output_tokens
1..1,000,000, concurrency 1..10,000, requests 1..1,000,000, warmup 0..10,000; and what the
client holds in memory: concurrency x input_tokens at most 50,000,000 (the prompts in
flight) and requests x output_tokens at most 20,000,000 (every token's time is kept);
quantiles each above 0 and below 100.

Enough samples by design: a shape that does not set ``requests`` measures the fewest that
give its highest quantile ``beyond_quantile`` samples beyond it (checks/bench_samples.toml,
the rule ``bench --compare`` judges percentiles by): 1,000 for a p99.
"""

from __future__ import annotations

from typing import Any

import msgspec

from blackwell_doctor.ruledata import samples


class ShapeError(Exception):
    """A shapes file that cannot be used (one line, for the CLI)."""


class Shape(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    name: str = ""
    description: str = ""
    input_tokens: int
    output_tokens: int
    concurrency: int = 1
    requests: int | None = None  # None: from the quantiles (planned_requests)
    quantiles: list[float] | None = None  # None: checks/bench_samples.toml's
    warmup: int = 1
    ignore_eos: bool = True
    extra_body: dict[str, Any] = msgspec.field(default_factory=dict)

    def asked_quantiles(self) -> list[float]:
        """The percentiles this shape is measured for: its own, or the catalogue's."""
        if self.quantiles:
            return list(self.quantiles)
        return list(samples.load_sample_rules().quantiles)

    def planned_requests(self) -> int:
        """Its ``requests``; without, the fewest its highest quantile needs (at most what
        the client may hold: MAX_TOKENS_KEPT tokens, and 1,000,000 requests)."""
        if self.requests is not None:
            return self.requests
        _, count = samples.needed(self.asked_quantiles())
        return max(1, min(count, MAX_TOKENS_KEPT // self.output_tokens, _MAX_REQUESTS))


# The seed article's checklist: short, long-context and high-concurrency shapes.
BUILTIN_SHAPES: dict[str, Shape] = {
    "short": Shape(
        name="short",
        description="one user, ~128 tokens in and 128 out: latency of a small turn "
        "(p50 and p90: 100 requests)",
        input_tokens=128,
        output_tokens=128,
        concurrency=1,
        quantiles=[50.0, 90.0],
    ),
    "long": Shape(
        name="long",
        description="one user, a long context (16k tokens, capped by the server's "
        "max_model_len): prefill (p50: 20 requests)",
        input_tokens=16384,
        output_tokens=128,
        concurrency=1,
        quantiles=[50.0],
    ),
    "concurrent": Shape(
        name="concurrent",
        description="32 users at once, ~128 in and 128 out each: batching and decode "
        "(p50 and p99: 1,000 requests)",
        input_tokens=128,
        output_tokens=128,
        concurrency=32,
        warmup=4,
    ),
}

_MAX_REQUESTS = 1_000_000
_LIMITS = {
    "input_tokens": (1, 10_000_000),
    "output_tokens": (1, 1_000_000),
    "concurrency": (1, 10_000),
    "requests": (1, _MAX_REQUESTS),
    "warmup": (0, 10_000),
}
# What a shape may make the client hold in memory (README, "bench"; chosen for a machine of
# a few GB free, measured with benchmarks/bench_inputs_memory.py):
# - the prompts in flight: each request's prompt is its own text (no two share a prefix),
#   5 to 13 bytes a token as JSON, so concurrency x input_tokens tokens of it at once;
# - every token's arrival time of every request (what --compare resamples), 32 bytes a
#   token in memory and about 20 in the JSON: requests x output_tokens.
MAX_PROMPT_TOKENS_IN_FLIGHT = 50_000_000
MAX_TOKENS_KEPT = 20_000_000


def _check(shape: Shape, where: str) -> Shape:
    for field, (low, high) in _LIMITS.items():
        value = getattr(shape, field)
        if value is not None and not low <= value <= high:
            raise ShapeError(f"{where}: {field} = {value} is outside {low}..{high}")
    if not shape.name or not shape.name.replace("-", "").replace("_", "").isalnum():
        raise ShapeError(f"{where}: a shape name is letters, digits, - and _ only")
    if shape.concurrency * shape.input_tokens > MAX_PROMPT_TOKENS_IN_FLIGHT:
        raise ShapeError(
            f"{where}: concurrency x input_tokens = {shape.concurrency} x "
            f"{shape.input_tokens} is above {MAX_PROMPT_TOKENS_IN_FLIGHT:,} tokens (every "
            "request in flight holds its own prompt in memory)"
        )
    for q in shape.quantiles or []:
        if not 0 < q < 100:
            raise ShapeError(f"{where}: quantiles: {q:g} is not a percentile above 0 and below 100")
    return _check_kept(shape, shape.planned_requests(), where)


def _check_kept(shape: Shape, requests: int, where: str) -> Shape:
    if requests * shape.output_tokens > MAX_TOKENS_KEPT:
        raise ShapeError(
            f"{where}: requests x output_tokens = {requests} x {shape.output_tokens} is "
            f"above {MAX_TOKENS_KEPT:,} tokens (the time of every token is kept)"
        )
    return shape


def parse_shapes(text: str, *, source: str) -> dict[str, Shape]:
    """The built-in shapes, plus (and overridden by) those of a shapes file's ``text``
    (``source`` names it in errors). The file is read by the caller (the app, through the
    one bounded reader of user-named files)."""
    from blackwell_doctor.ruledata.checkdata import CatalogueError, parse_toml

    shapes = dict(BUILTIN_SHAPES)
    try:  # the one TOML decoder: nesting and dotted keys bounded (checkdata)
        data = parse_toml(text, source=source)
    except CatalogueError as exc:
        raise ShapeError(str(exc)) from None
    table = data.get("shape")
    if not isinstance(table, dict) or not table or set(data) - {"shape"}:
        raise ShapeError(f"{source}: expected only [shape.NAME] tables")
    for name, body in table.items():
        if not isinstance(body, dict):
            raise ShapeError(f"{source}: shape.{name} is not a table")
        try:
            shape = msgspec.convert({**body, "name": name}, Shape)
        except msgspec.ValidationError as exc:
            raise ShapeError(f"{source}: shape.{name}: {exc}") from None
        except RecursionError:
            raise ShapeError(f"{source}: shape.{name}: nested too deeply") from None
        shapes[name] = _check(shape, f"{source}: shape.{name}")
    return shapes


def select_shapes(
    shapes: dict[str, Shape], names: list[str], *, requests: int | None = None
) -> list[Shape]:
    """The shapes named (in the order given), or every built-in one when none is;
    ``requests`` (``--requests``) replaces each one's count, within the limits."""
    if not names:
        chosen = [shapes[n] for n in BUILTIN_SHAPES]
    else:
        chosen = []
        for name in names:
            if name not in shapes:
                raise ShapeError(f"unknown shape {name!r}; known: {', '.join(sorted(shapes))}")
            if shapes[name] not in chosen:
                chosen.append(shapes[name])
    if requests is not None:
        for shape in chosen:
            _check_kept(shape, requests, f"--requests {requests}: shape {shape.name}")
    return chosen
