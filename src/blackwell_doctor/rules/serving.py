"""Family serving: what a ``bench`` run measured on the server, judged.

The facts hold the run's figures (``facts.bench``: ``check --bench run.json``, or the
section ``collect --bench`` stores); the expectations and thresholds are checks/serving.toml.
The model is the served name the bench recorded; the GPUs and their count are the facts'
(the bench result does not say how many GPUs the server uses, so a server that uses fewer
than the host has is compared as if it used them all: the evidence says so).
"""

from __future__ import annotations

import functools

from blackwell_doctor.facts.bench import BenchFacts, BenchShapeFacts
from blackwell_doctor.facts.document import Facts, NvmlFacts
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
    skipped,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.ruledata.serving import Expectation, ServingData
from blackwell_doctor.rules import view
from blackwell_doctor.rules.absent import NO_BENCH
from blackwell_doctor.rules.registry import check, requires

USAGE = "usage"  # token counts from the server's usage (bench's token_source)
# Error kinds in words (bench/client.py's names).
_KINDS = {
    "unreachable": "unreachable",
    "http_3xx": "HTTP 3xx (redirect, not followed)",
    "http_4xx": "HTTP 4xx",
    "http_5xx": "HTTP 5xx",
    "early_close": "stream closed early (truncated)",
    "stalled": "past the request deadline",
    "malformed_sse": "malformed stream",
    "malformed_usage": "impossible usage counts",
    "stream_error": "error in the stream",
    "no_tokens": "no tokens",
}


def _bench(facts: Facts) -> BenchFacts | Outcome:
    if facts.bench is None:
        return skipped(NO_BENCH)
    return facts.bench


def _judgeable(facts: Facts, rules: RuleData) -> BenchFacts | Outcome:
    """The bench run, when its figures describe a server that answered: not when
    serving.errors fails it (the server could not be asked, or a shape lost at least the
    fail fraction of its requests)."""
    bench = _bench(facts)
    if isinstance(bench, Outcome):
        return bench
    if type(bench) is not BenchFacts:  # a traced copy (rules/memo.py): it reads it all
        return _judged_bench(bench, rules)
    kept = _LAST_JUDGEABLE[0] if _LAST_JUDGEABLE else None  # one read: no other's answer
    if kept is not None and kept[0] is bench and kept[1] is rules:
        return kept[2]
    found = _judged_bench(bench, rules)
    _LAST_JUDGEABLE[:] = [(bench, rules, found)]
    return found


# The last bench run asked about, by its identity (and the rule data's), with the answer:
# three checks ask for it on each node of a fleet. The bench run is frozen and held here, so
# an identity is never another run's; a traced copy is a subclass, never kept (each check's
# run over it must read what it reads).
_LAST_JUDGEABLE: list[tuple[BenchFacts, RuleData, BenchFacts | Outcome]] = []


def _judged_bench(bench: BenchFacts, rules: RuleData) -> BenchFacts | Outcome:
    limit = rules.serving.errors.fail_fraction
    failing = bench.server_error is not None
    if not failing:
        for s in bench.shapes:
            if s.requests and _failed(s) / s.requests >= limit:
                failing = True
                break
    if failing:
        return skipped(rules.word("reasons", "serving_requests_failed"))
    return bench


def _rate(value: float) -> str:
    return f"{value:,.1f}"


def _users(n: int) -> str:
    return view.plural(n, "user")


def _measured(bench: BenchFacts) -> list[BenchShapeFacts]:
    """Shapes with at least one successful request."""
    return [s for s in bench.shapes if s.completed > 0]


def _failed(shape: BenchShapeFacts) -> int:
    return max(shape.requests - shape.completed, sum(shape.errors.values()))


def _kinds(errors: dict[str, int]) -> str:
    return ", ".join(f"{_KINDS.get(k, k)} {n}" for k, n in sorted(errors.items()) if n)


# --------------------------------------------------------------------------- errors


@check("serving.errors", reads=("bench",))
@requires(_bench)
def serving_errors(facts: Facts, rules: RuleData, bench: BenchFacts) -> Outcome:
    evidence: Evidence = {"bench": bench.source, "model": bench.model, "tool": bench.tool}
    if bench.server_error is not None:
        return Outcome(
            status=Status.FAIL,
            summary=f"the bench could not ask the server: {bench.server_error}",
            evidence=evidence,
            case="unreachable",
            remedy_vars={"url": bench.url},
        )
    if not bench.shapes:
        return not_evaluated(
            "the bench run measured no shape (a --soak run is judged by its own trend "
            "verdicts in bench's output)",
            **evidence,
        )
    limit = rules.serving.errors.fail_fraction
    failing: list[str] = []
    some: list[str] = []
    total = sum(s.requests for s in bench.shapes)
    for s in bench.shapes:
        failed = _failed(s)
        evidence[f"shape:{s.name}"] = f"{s.completed}/{s.requests} ok" + (
            f"; failed: {_kinds(s.errors)}" if failed else ""
        )
        if not failed:
            continue
        line = f"{s.name}: {failed} of {s.requests} failed ({_kinds(s.errors) or 'unnamed'})"
        (failing if s.requests and failed / s.requests >= limit else some).append(line)
    evidence["fail_fraction"] = limit
    partial = (
        "; the run was interrupted: its figures cover the requests done before"
        if bench.interrupted
        else ""
    )
    if failing:
        return Outcome(
            status=Status.FAIL,
            summary="; ".join(failing + some)
            + f" (at or above {limit:.0%} of a shape's requests, its figures are not judged)"
            + partial,
            evidence=evidence,
            case="failing",
            remedy_vars={"url": bench.url},
        )
    if some:
        return Outcome(
            status=Status.WARN,
            summary="; ".join(some) + partial,
            evidence=evidence,
            case="some_failed",
            remedy_vars={"url": bench.url},
        )
    if bench.interrupted:
        return Outcome(
            status=Status.WARN,
            summary=f"the bench was interrupted: its figures cover the {total} requests done "
            "before, all of which succeeded",
            evidence=evidence,
            case="interrupted",
        )
    return passed(
        f"all {total} requests of {view.plural(len(bench.shapes), 'shape')} succeeded",
        **evidence,
    )


# --------------------------------------------------------------------------- throughput


def _gpu_names(facts: Facts) -> tuple[str, ...]:
    """Every GPU's name, as the facts give it (NVML's, else CUDA's); empty: none."""
    names: tuple[str, ...] = ()
    if isinstance(facts.nvml, NvmlFacts) and facts.nvml.gpus:
        names = tuple(g.name if isinstance(g.name, str) else "" for g in facts.nvml.gpus)
    else:
        cuda = view.cuda(facts)
        if cuda is not None:
            names = tuple(d.name if isinstance(d.name, str) else "" for d in cuda.devices)
    return names


# Per-host words and choices made once, at most this many kept: a fleet's thousands of
# nodes are a few kinds of host serving a few models.
_HERE_MAX = 256


@functools.lru_cache(maxsize=_HERE_MAX)
def _host(names: tuple[str, ...]) -> tuple[str, tuple[str, ...]]:
    """The host of GPUs ``names`` in words ("2 x NVIDIA H200") and the names normalised, made
    once per set of names."""
    label = f"{len(names)} x {' + '.join(sorted(set(names)))}"
    return label, tuple(_normal(n) for n in names)


def _normal(text: str) -> str:
    return text.casefold().replace("_", "-")


def _serving_host(e: Expectation, served: str, gpus: list[str]) -> bool:
    """``e`` is of the served model (its name normalised) on these GPUs (theirs)."""
    return (
        any(_normal(n) in served for n in e.model_names)
        and len(gpus) == e.gpu_count
        and all(_normal(e.gpu) in n for n in gpus)
    )


# The expectations of a served model on a host's GPUs (both normalised), with the data they
# were chosen from: a fleet's thousands of bench runs serve a few models on a few kinds of
# host, and choosing them (every expectation's names normalised and compared) was most of
# the check's time on a node. At most _HERE_MAX pairs; past it, chosen again.
_HERE: dict[tuple[str, tuple[str, ...]], tuple[ServingData, list[Expectation]]] = {}


def _expected_here(data: ServingData, served: str, gpus: tuple[str, ...]) -> list[Expectation]:
    """The expectations of ``data`` of model ``served`` on ``gpus`` (:func:`_serving_host`)."""
    found = _HERE.get((served, gpus))
    if found is not None and found[0] is data:
        return found[1]
    here = [e for e in data.expectation if _serving_host(e, served, list(gpus))]
    if len(_HERE) >= _HERE_MAX:
        _HERE.clear()
    _HERE[served, gpus] = (data, here)
    return here


def _matches(e: Expectation, shape: BenchShapeFacts) -> bool:
    """``e``, of the served model on these GPUs, is of ``shape``'s load."""
    return shape.concurrency == e.concurrency and shape.input_tokens <= e.max_input_tokens


def _known(data: ServingData) -> str:
    """What ``data`` has expectations for, in words (made once per data: a fleet's nodes
    without one ask for it each)."""
    found = _KNOWN.get("")
    if found is None or found[0] is not data:
        found = _KNOWN[""] = (data, _known_text(data))
    return found[1]


_KNOWN: dict[str, tuple[ServingData, str]] = {}


def _known_text(data: ServingData) -> str:
    by_model: dict[tuple[str, str, int], list[int]] = {}
    for e in data.expectation:
        by_model.setdefault((e.model, e.gpu, e.gpu_count), []).append(e.concurrency)
    return "; ".join(
        f"{model} on {count} x {gpu} at {', '.join(map(str, sorted(c)))} users"
        for (model, gpu, count), c in by_model.items()
    )


@functools.lru_cache(maxsize=_HERE_MAX)
def _bounds(floor: float, typical: float) -> tuple[str, str]:
    """An expectation's floor and its bounds (floor and typical) in words, made once per
    pair of rates (the rule data's: every node that matches the expectation asks)."""
    floor_text = _rate(floor)
    return floor_text, f"floor {floor_text}, typical {_rate(typical)}"


@check("serving.throughput", reads=("nvml", "cuda", "bench"))
def serving_throughput(facts: Facts, rules: RuleData) -> Outcome:
    data = rules.serving
    bench = _judgeable(facts, rules)
    if isinstance(bench, Outcome):
        return bench
    evidence: Evidence = {"bench": bench.source, "model": bench.model}
    if bench.model is None:
        return skipped("the bench result names no model (the server could not be asked)")
    names = _gpu_names(facts)
    if not names:
        return skipped(rules.word("reasons", "serving_no_host"), **evidence)
    label, gpus = _host(names)
    evidence["gpus"] = label
    evidence["gpu_count_basis"] = (
        "the GPUs of the facts; the bench result does not say how many the server uses"
    )
    shapes = [s for s in _measured(bench) if s.output_tokens_per_s is not None]
    here = _expected_here(data, _normal(bench.model), gpus) if shapes else []
    judged: list[tuple[BenchShapeFacts, Expectation, float]] = []
    for s in shapes:
        found = next((e for e in here if _matches(e, s)), None)
        if found is not None and s.output_tokens_per_s is not None:
            judged.append((s, found, s.output_tokens_per_s))
    if not judged:
        asked = ", ".join(sorted({str(s.concurrency) for s in shapes}, key=int)) or "no"
        return skipped(
            f"no throughput expectation for model {bench.model!r} on {label} at {asked} "
            f"users (checks/serving.toml knows: {_known(data)})",
            **evidence,
        )
    slow: list[str] = []
    lines: list[str] = []
    for s, e, rate in judged:
        rated = _rate(rate)
        where = f"{s.name} ({_users(s.concurrency)}): {rated} output tok/s"
        floor, typical = e.floor.output_tokens_per_s, e.typical.output_tokens_per_s
        floor_text, bounds = _bounds(floor, typical)
        evidence[f"shape:{s.name}"] = f"{rated} tok/s; {bounds} ({e.id})"
        if rate < floor:
            slow.append(f"{where}, below the floor of {floor_text}")
        elif rate < typical:
            lines.append(f"{where}, above the floor, below typical ({bounds})")
        else:
            lines.append(f"{where}, at or above typical ({bounds})")
    first = judged[0][1]
    evidence["expectation"] = f"{first.model} on {first.gpu_count} x {first.gpu}"
    evidence["floor_source"] = first.floor.source
    evidence["typical_source"] = first.typical.source
    evidence["confidence"] = first.floor.confidence
    if slow:
        return Outcome(
            status=Status.WARN,
            summary="; ".join(slow + lines) + f" ({first.model} on {label})",
            evidence=evidence,
            case="slow_path",
            remedy_vars={"model": first.model},
        )
    return passed("; ".join(lines) + f" ({first.model} on {label})", **evidence)


# --------------------------------------------------------------------------- latency tail


@check("serving.latency_tail", reads=("bench",))
def serving_latency_tail(facts: Facts, rules: RuleData) -> Outcome:
    serving = rules.serving
    bench = _judgeable(facts, rules)
    if isinstance(bench, Outcome):
        return bench
    data = serving.latency_tail
    evidence: Evidence = {
        "bench": bench.source,
        "threshold_one_user": data.itl_p99_over_p50_one_user,
        "threshold_concurrent": data.itl_p99_over_p50_concurrent,
    }
    stalls: list[str] = []
    bursts: list[str] = []
    fine: list[str] = []
    unjudged: list[str] = []
    for s in _measured(bench):
        p50, p99 = s.itl_ms.p50, s.itl_ms.p99
        if p50 is None or p99 is None or s.itl_samples == 0:
            unjudged.append(f"{s.name}: no ITL p50 and p99 over counted gaps in the run")
            continue
        p50_ms, p99_ms, users = f"{p50:.2f} ms", f"{p99:.2f} ms", _users(s.concurrency)
        evidence[f"shape:{s.name}"] = (
            f"ITL p50 {p50_ms}, p99 {p99_ms}, {s.itl_samples} gaps, {users}"
        )
        if p50 < data.min_itl_p50_ms:
            server = (
                f"; the server's own ITL mean is {s.server_itl_mean_ms:.2f} ms"
                if s.server_itl_mean_ms is not None
                else ""
            )
            bursts.append(
                f"{s.name} ({users}): ITL p50 {p50_ms}, p99 {p99_ms}: "
                f"tokens reach the client in bursts{server}"
            )
            continue
        if s.itl_samples < data.min_itl_samples:
            unjudged.append(
                f"{s.name}: {s.itl_samples} gaps, too few for a p99 (needs {data.min_itl_samples})"
            )
            continue
        limit = (
            data.itl_p99_over_p50_one_user
            if s.concurrency == 1
            else data.itl_p99_over_p50_concurrent
        )
        ratio = p99 / p50
        line = f"{s.name} ({users}): ITL p99 {p99_ms} is {ratio:.1f}x the p50 {p50_ms}"
        if ratio > limit:
            stalls.append(f"{line} (limit {limit:g}x)")
        else:
            fine.append(f"{line} (within {limit:g}x)")
    if stalls or bursts:
        case = "bursts"
        if stalls:
            case = "stalls"
        return Outcome(
            status=Status.WARN,
            summary="; ".join(stalls + bursts + fine),
            evidence=evidence,
            case=case,
        )
    if not fine:
        return skipped(
            "no shape has enough inter-token gaps to judge its tail: " + "; ".join(unjudged),
            **evidence,
        )
    return passed("; ".join(fine + unjudged), **evidence)


# --------------------------------------------------------------------------- reasoning


@check("serving.reasoning_accounting", reads=("bench",))
def serving_reasoning_accounting(facts: Facts, rules: RuleData) -> Outcome:
    bench = _judgeable(facts, rules)
    if isinstance(bench, Outcome):
        return bench
    evidence: Evidence = {"bench": bench.source}
    shapes = [s for s in _measured(bench) if s.output_tokens > 0]
    if not shapes:
        return not_evaluated("no request of the bench run produced tokens", **evidence)
    estimated = [s.name for s in shapes if s.token_source != USAGE]
    lines: list[str] = []
    for s in shapes:
        counted = "the server's count" if s.reasoning_source == USAGE else "estimated by the client"
        evidence[f"shape:{s.name}"] = (
            f"{s.output_tokens} output tokens = {s.answer_tokens} answer + "
            f"{s.reasoning_tokens} reasoning ({s.reasoning_source}); tokens: {s.token_source}"
        )
        if s.reasoning_tokens == 0 or s.output_tokens_per_s is None:
            continue
        answer = s.answer_tokens_per_s if s.answer_tokens_per_s is not None else 0.0
        lines.append(
            f"{s.name}: {s.reasoning_tokens:,} of {s.output_tokens:,} output tokens "
            f"({s.reasoning_tokens / s.output_tokens:.0%}) were reasoning ({counted}): "
            f"{_rate(s.output_tokens_per_s)} output tok/s counts them, as a count of every "
            f"streamed token does; the answer came at {_rate(answer)} tok/s"
        )
    if estimated:
        return Outcome(
            status=Status.WARN,
            summary=f"the server sent no usage in {', '.join(estimated)}: token counts "
            "there are this client's count of stream chunks, which under-counts a server "
            "that sends several tokens per chunk (speculative decoding)",
            evidence=evidence,
            case="no_usage",
        )
    if not lines:
        return passed(
            "no reasoning tokens: output tokens/s are answer tokens/s (the server's usage)",
            **evidence,
        )
    return passed("; ".join(lines), **evidence)
