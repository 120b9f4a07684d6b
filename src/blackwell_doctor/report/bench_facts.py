"""A bench run document as the facts keep it (``collect --bench``, ``check --bench``).

Apart from :mod:`blackwell_doctor.facts.bench` (the facts' own types) so that the facts
document does not import the bench's, which import the facts (ToolInfo).
"""

from __future__ import annotations

from typing import Any

import msgspec

from blackwell_doctor.facts.bench import BenchFacts, BenchShapeFacts, BenchStats
from blackwell_doctor.facts.redact import redact_url
from blackwell_doctor.report.bench import BenchRun, RunFileError, decode_run


class BenchFileError(Exception):
    """A --bench file that is not a bench run document (one line)."""


# The BenchShapeFacts fields a ShapeResult gives as they are, those its ShapeMetrics give as
# they are, and the metrics' figures (Stats) the facts keep as BenchStats: each of the same
# name and meaning on both sides (read_bench validates the whole against BenchFacts).
_FROM_SHAPE = (
    "input_tokens",
    "output_tokens_max",
    "requests",
    "completed",
    "duration_s",
    "complete",
)
_FROM_METRICS = (
    "output_tokens",
    "reasoning_tokens",
    "answer_tokens",
    "output_tokens_per_s",
    "answer_tokens_per_s",
    "requests_per_s",
    "token_source",
    "reasoning_source",
    "server_generation_tokens",
)
_STATS = ("ttft_ms", "tpot_ms", "itl_ms", "e2e_ms", "output_tokens_per_s_per_user")


def from_run(run: BenchRun, *, source: str) -> BenchFacts:
    """The measurements of ``run`` as the facts keep them."""
    shapes: list[BenchShapeFacts] = []
    for s in run.shapes:
        m = s.metrics
        server = s.server
        # Any: each value is the field of its name (read_bench validates the whole document).
        copied: dict[str, Any] = {f: getattr(s, f) for f in _FROM_SHAPE}
        copied |= {f: getattr(m, f) for f in _FROM_METRICS}
        copied |= {f: _stats(getattr(m, f)) for f in _STATS}
        shapes.append(
            BenchShapeFacts(
                name=s.name,
                concurrency=max(1, s.concurrency),
                errors=dict(s.errors),
                itl_samples=sum(len(r.itl_ms) for r in s.samples if r.ok),
                server_itl_mean_ms=server.itl.mean_ms if server and server.itl else None,
                server_preemptions=server.preemptions if server else None,
                **copied,
            )
        )
    return BenchFacts(
        source=source,
        started_at=run.started_at,
        tool=f"{run.tool.name} {run.tool.version}",
        # A run file from before issue 19 may keep a token of the URL's path.
        url=redact_url(run.server.url),
        model=run.server.model,
        max_model_len=run.server.max_model_len,
        server_error=run.server.error,
        complete=run.complete,
        interrupted=run.interrupted,
        shapes=shapes,
    )


def read_bench(data: bytes, *, source: str) -> BenchFacts:
    """A bench run document (``bench -o``) as facts; BenchFileError when it is not one."""
    try:
        run = decode_run(data, source=source)
        return msgspec.convert(msgspec.to_builtins(from_run(run, source=source)), BenchFacts)
    except RunFileError as exc:
        raise BenchFileError(str(exc)) from None
    except msgspec.ValidationError as exc:
        raise BenchFileError(f"{source}: not a usable bench run: {exc}") from None


def _stats(s: object) -> BenchStats:
    return msgspec.convert(msgspec.to_builtins(s), BenchStats)
