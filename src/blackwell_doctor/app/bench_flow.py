"""The ``bench`` command's flow: its options checked, one run (the shapes measured, or a
soak held) with its progress sent to a display, and ``--compare``.

The measuring is :mod:`blackwell_doctor.app.bench` and :mod:`blackwell_doctor.app.soak`; the
CLI turns typer's options into a :class:`BenchRequest`, draws the progress (a
:class:`Display`) and writes the document. Importing this module costs the standard library
only: ``--compare`` never imports the HTTP client.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO, Protocol, TypeVar

from blackwell_doctor.app.rate_options import RateOptions
from blackwell_doctor.app.shape_options import ShapeOptions
from blackwell_doctor.facts.errors import UserError

if TYPE_CHECKING:
    from blackwell_doctor.app.bench import BenchConfig, Live, RateLoad
    from blackwell_doctor.app.replay import ReplayState
    from blackwell_doctor.app.soak import SoakState
    from blackwell_doctor.report.bench import BenchRun, CompareDocument
    from blackwell_doctor.report.bench_ladder import LadderDocument
    from blackwell_doctor.ruledata.shapes import Shape
    from blackwell_doctor.rules.soak_trend import SoakRules


# The shape bench --rate measures when no --shape is given.
RATE_SHAPE = "short"


@dataclass(frozen=True, kw_only=True)
class BenchRequest:
    """``bench``'s options as given (None: not given)."""

    url: str | None = None
    model: str | None = None
    api_key: str | None = None
    shape_options: ShapeOptions = field(default_factory=ShapeOptions)
    equivalence: bool = True
    soak: str | None = None  # --soak DURATION
    soak_interval: str | None = None
    # --compare BEFORE AFTER [MORE...]: two runs compared, three or more a ladder.
    compare: tuple[Path, ...] | None = None
    # How the compare names its two runs (--example NAME: not their paths on disk).
    compare_labels: tuple[str, str] | None = None
    fail_on_regression_pct: float | None = None
    threshold_pct: float = 5.0
    resamples: int = 2000
    # --repeat N: each configuration measured N times (one URL: the A/A calibration of its
    # noise floor; --compare-urls: A B A B ...).
    repeat: int = 1
    compare_urls: tuple[str, str] | None = None  # --compare-urls A B: measure both, compare
    # --facts FILE: the serving host's facts (collect -o), pinned in the run's environment.
    facts_file: Path | None = None
    # bench --rate R[,R...]|sweep (app/sweep.py): one shape at each load, with its arrival
    # process, and the SLOs its requests are judged against (rules/goodput.py).
    rate_options: RateOptions = field(default_factory=RateOptions)
    sweep_points: int | None = None  # default checks/bench_sweep.toml's
    # --trace FILE: replay a request trace (Mooncake JSONL, BurstGPT CSV) at its timestamps
    # x time_scale; trace_block_tokens: the tokens of a Mooncake hash id.
    trace: Path | None = None
    trace_format: str = "auto"
    time_scale: float = 1.0
    trace_block_tokens: int = 512
    client_processes: int | None = None  # --client-processes N (None: auto)
    # --multi-turn N: each user's requests are conversations of N turns carrying history.
    multi_turn: int = 1


class Display(Protocol):
    """Where a run's progress goes, shown while the run is inside ``with display``:
    ``display(live)`` after each step of a shape, ``display.message(line)`` for a line of its
    own (the soak's, one per interval), and ``display.status``, the live line while no shape
    runs (set by the soak)."""

    status: Callable[[], str] | None

    def __enter__(self) -> Display: ...

    def __exit__(self, *exc: object) -> None: ...

    def __call__(self, live: Live) -> None: ...

    def message(self, line: str) -> None: ...


@dataclass(frozen=True)
class Soak:
    """A soak's part of a :class:`Plan`."""

    state: SoakState
    rules: SoakRules


@dataclass(frozen=True)
class Plan:
    """A run ready to start: the bench's configuration and, for ``--soak``, the soak."""

    config: BenchConfig
    soak: Soak | None = None
    repeat: int = 1
    other: BenchConfig | None = None  # --compare-urls: the second server (B)
    replay: ReplayState | None = None  # --trace: the trace read, to replay


def check_options(request: BenchRequest) -> None:
    """The options that do not go together, as UserErrors, before anything is read."""
    require_finite(
        (
            ("--duration", request.shape_options.duration_s),
            ("--request-timeout", request.shape_options.request_timeout_s),
            ("--fail-on-regression", request.fail_on_regression_pct),
            ("--threshold", request.threshold_pct),
            ("--burstiness", request.rate_options.burstiness),
            ("--slo-level", request.rate_options.slo_level_pct),
        )
    )
    _check_rate_options(request)
    _check_trace_options(request)
    if request.compare is not None:
        if len(request.compare) < 2:
            raise UserError("--compare needs two run files or more: BEFORE AFTER [MORE...]")
        if request.facts_file is not None:
            raise UserError("--facts pins a measured run; --compare reads run files")
        if request.url is not None:
            raise UserError("--compare reads two run files; it does not take --url")
        if request.compare_urls is not None:
            raise UserError("--compare reads two run files; --compare-urls measures two servers")
        if request.repeat != 1:
            raise UserError("--repeat measures; --compare reads run files (give --repeat to bench)")
        return
    if request.compare_urls is not None:
        if request.url is not None:
            raise UserError("--compare-urls measures its two URLs; it does not take --url")
        if request.soak is not None:
            raise UserError("--soak holds one server's load; it does not take --compare-urls")
    elif request.fail_on_regression_pct is not None:
        raise UserError("--fail-on-regression applies to --compare and --compare-urls")
    elif request.url is None:
        raise UserError("bench needs --url (or --compare BEFORE AFTER, or --compare-urls A B)")
    if request.soak is not None and request.repeat != 1:
        raise UserError("--soak runs once until its DURATION; it does not take --repeat")
    if request.soak is not None:
        for name, given in (
            ("--requests", request.shape_options.requests),
            ("--duration", request.shape_options.duration_s),
        ):
            if given is not None:
                raise UserError(f"--soak runs until its DURATION; it does not take {name}")
    elif request.soak_interval is not None:
        raise UserError("--soak-interval applies to --soak")


def require_finite(options: Iterable[tuple[str, float | None]]) -> None:
    """Each given (option, value) a finite number (a UserError for the first that is not);
    None: not given."""
    for name, value in options:
        if value is not None and not math.isfinite(value):
            raise UserError(f"{name} must be a finite number, got {value}")


def _check_rate_options(request: BenchRequest) -> None:
    """The options of bench --rate that do not go together (before anything is read)."""
    opts = request.rate_options
    if opts.rate is None:
        for name, given in (
            ("--arrival", opts.arrival),
            ("--burstiness", opts.burstiness),
            ("--sweep-points", request.sweep_points),
        ):
            if given is not None:
                raise UserError(f"{name} applies to --rate")
        if request.compare is None and (opts.slo or opts.slo_level_pct is not None):
            raise UserError(
                "--slo judges the requests of a rate run: give --rate (or --compare two of them)"
            )
        return
    if request.compare is not None:
        raise UserError("--rate measures; --compare reads run files (give --rate to bench)")
    if request.soak is not None:
        raise UserError("--soak holds one shape's closed-loop load; it does not take --rate")
    if len(request.shape_options.names) > 1:
        raise UserError("--rate measures one shape at several loads: give at most one --shape")
    if opts.slo_level_pct is not None and not opts.slo:
        raise UserError("--slo-level is the share of requests meeting --slo: give --slo")
    rates_from(request)  # each rate, the arrival and the SLOs checked now
    if request.sweep_points is not None and opts.rate.strip() != SWEEP_WORD:
        raise UserError("--sweep-points applies to --rate sweep")


SWEEP_WORD = "sweep"
# At most this many rates in one --rate, and none above this many requests per second.
MAX_RATES = 100
MAX_RATE = 1_000_000.0


def rates_from(request: BenchRequest) -> RateLoad:
    """``--rate`` and its options as the run's loads (UserError for bad input): no plan
    yet, the rules of checks/bench_sweep.toml."""
    from blackwell_doctor.app.bench import RateLoad
    from blackwell_doctor.collect.bench.schedule import ARRIVALS, GAMMA, POISSON
    from blackwell_doctor.rules import goodput as goodputs
    from blackwell_doctor.rules import sweep as sweeps

    opts = request.rate_options
    assert opts.rate is not None
    text = opts.rate.strip()
    rates: tuple[float, ...] | None = None
    if text != SWEEP_WORD:
        values: list[float] = []
        for part in text.split(","):
            try:
                value = float(part)
            except ValueError:
                raise UserError(
                    f"--rate {text!r}: {part.strip()!r} is not a number of requests per second "
                    f"(give R[,R...] or {SWEEP_WORD})"
                ) from None
            if not (math.isfinite(value) and 0 < value <= MAX_RATE):
                raise UserError(
                    f"--rate {text!r}: a rate is a number of requests per second above 0 and "
                    f"at most {MAX_RATE:,.0f}, got {part.strip()}"
                )
            if sweeps.rate_label(value) in {sweeps.rate_label(v) for v in values}:
                raise UserError(f"--rate {text!r}: {part.strip()} is given twice")
            values.append(value)
        if len(values) > MAX_RATES:
            raise UserError(f"--rate: at most {MAX_RATES} rates, got {len(values)}")
        rates = tuple(values)
    arrival = POISSON if opts.arrival is None else opts.arrival.strip()
    if arrival not in ARRIVALS:
        raise UserError(f"--arrival {arrival!r}: one of {', '.join(ARRIVALS)}")
    if arrival == GAMMA and opts.burstiness is None:
        raise UserError("--arrival gamma needs --burstiness (its shape; 1 is Poisson)")
    if opts.burstiness is not None:
        if arrival != GAMMA:
            raise UserError("--burstiness is the shape of --arrival gamma")
        if not 0 < opts.burstiness <= 1000:
            raise UserError(
                f"--burstiness must be above 0 and at most 1000, got {opts.burstiness:g}"
            )
    rules = goodputs.load_sweep_rules()
    try:
        slo = goodputs.parse_slo(opts.slo) if opts.slo else {}
        level = goodputs.parse_level(
            rules.slo.level_pct if opts.slo_level_pct is None else opts.slo_level_pct
        )
    except goodputs.SloError as exc:
        raise UserError(str(exc)) from None
    points = rules.sweep.points if request.sweep_points is None else request.sweep_points
    return RateLoad(
        rates=rates,
        arrival=arrival,
        burstiness=opts.burstiness,
        slo=slo,
        level=level,
        points=points,
        refine=rules.sweep.refine,
        rise_pct=rules.sweep.rise_pct,
    )


def _check_trace_options(request: BenchRequest) -> None:
    """--trace and --multi-turn against the options they do not go with."""
    if request.trace is None:
        for name, given in (
            ("--trace-format", request.trace_format != "auto"),
            ("--time-scale", request.time_scale != 1.0),
            ("--trace-block-tokens", request.trace_block_tokens != 512),
        ):
            if given:
                raise UserError(f"{name} applies to --trace FILE")
    else:
        if request.trace_format not in ("auto", "mooncake", "burstgpt"):
            raise UserError(
                f"--trace-format is auto, mooncake or burstgpt, got {request.trace_format!r}"
            )
        if not math.isfinite(request.time_scale) or request.time_scale <= 0:
            raise UserError(f"--time-scale must be a number above 0, got {request.time_scale}")
        for name, given in (
            ("--compare", request.compare is not None),
            ("--compare-urls", request.compare_urls is not None),
            ("--soak", request.soak is not None),
            ("--shape", bool(request.shape_options.shape_names)),
            ("--shapes", request.shape_options.shapes_file is not None),
            ("--repeat", request.repeat != 1),
            ("--multi-turn", request.multi_turn != 1),
            ("--rate", request.rate_options.rate is not None),
        ):
            if given:
                raise UserError(f"--trace replays a trace's requests; it does not take {name}")
    if request.client_processes is not None:
        for name, given in (
            ("--soak", request.soak is not None),
            ("--multi-turn", request.multi_turn != 1),
            ("--compare", request.compare is not None),
        ):
            if given:
                raise UserError(
                    f"--client-processes sends a measured load from several processes; it "
                    f"does not go with {name}"
                )
    if request.multi_turn != 1 and request.soak is not None:
        raise UserError("--multi-turn applies to shapes; --soak does not take it")
    if request.multi_turn != 1 and request.rate_options.rate is not None:
        raise UserError(
            "--multi-turn holds conversations, each turn sent when the last is answered; "
            "--rate sends on a schedule and does not take it"
        )


def load_shapes(path: Path | None) -> dict[str, Shape]:
    """The built-in shapes, plus (and overridden by) those of the file at ``path``, read by
    the one bounded reader of user-named files; a bad file is a UserError."""
    from blackwell_doctor.ruledata.shapes import BUILTIN_SHAPES, ShapeError, parse_shapes

    if path is None:
        return dict(BUILTIN_SHAPES)
    from blackwell_doctor.collect.inputfile import SHAPES, read_input

    text = read_input(path, SHAPES).decode("utf-8")  # bounded, a file or a pipe, UTF-8
    try:
        return parse_shapes(text, source=str(path))
    except ShapeError as exc:
        raise UserError(str(exc)) from None


def plan(request: BenchRequest) -> Plan:
    """The run ``request`` asks for (a measured bench or a soak), its options checked
    (UserError) before anything is sent."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.ruledata.shapes import ShapeError, select_shapes

    check_options(request)
    url = request.url if request.compare_urls is None else request.compare_urls[0]
    assert url is not None  # check_options
    if request.trace is not None:
        return _plan_replay(request, url, request.trace)
    soak: Soak | None = None
    timing = None  # the soak's (duration, interval)
    try:
        if request.soak is None:
            names = list(request.shape_options.names)
            if request.rate_options.rate is not None and not names:
                names = [RATE_SHAPE]
            shapes = select_shapes(
                load_shapes(request.shape_options.shapes_file),
                names,
                requests=request.shape_options.requests,
            )
        else:
            timing = _soak_timing(request.soak, request.soak_interval, request.shape_options.names)
            shapes = select_shapes(
                load_shapes(request.shape_options.shapes_file),
                list(request.shape_options.names) or ["concurrent"],
            )
        runner.parse_url(url)
        if request.compare_urls is not None:
            runner.parse_url(request.compare_urls[1])
    except (ShapeError, runner.UrlError) as exc:
        raise UserError(str(exc)) from None
    config = runner.BenchConfig(
        url=url,
        model=request.model,
        api_key=request.api_key or None,
        shapes=shapes,
        seed=request.shape_options.seed,
        requests=request.shape_options.requests,
        duration_s=request.shape_options.duration_s,
        deadline_s=request.shape_options.request_timeout_s,
        equivalence=request.equivalence and request.soak is None,
        multi_turn=request.multi_turn,
        client_processes=request.client_processes,
    )
    if request.rate_options.rate is not None:
        from blackwell_doctor.ruledata.shapes import MAX_PROMPT_TOKENS_IN_FLIGHT

        (shape,) = shapes
        total = request.shape_options.requests or shape.planned_requests()
        if total * shape.input_tokens > MAX_PROMPT_TOKENS_IN_FLIGHT:
            raise UserError(
                f"--rate: {total} requests x {shape.input_tokens} input tokens of shape "
                f"{shape.name} is above {MAX_PROMPT_TOKENS_IN_FLIGHT:,} tokens (at a rate, "
                "every request may be in flight at once, each holding its own prompt)"
            )
        config = replace(config, load=rates_from(request))
    if request.facts_file is not None:
        from blackwell_doctor.app.obtain import read_facts_file

        facts = read_facts_file(request.facts_file)  # a FactsFileError is a UserError
        config = replace(config, host_facts=facts, host_source=str(request.facts_file))
    if timing is not None:
        from blackwell_doctor.app import soak as soaking
        from blackwell_doctor.rules.soak_trend import load_rules

        duration_s, interval_s = timing
        state = soaking.SoakState(shape=shapes[0], duration_s=duration_s, interval_s=interval_s)
        soak = Soak(state, load_rules())
    other = None
    if request.compare_urls is not None:
        # The same shapes, seed and options: only the server differs.
        other = replace(config, url=request.compare_urls[1])
    return Plan(config, soak, repeat=request.repeat, other=other)


def _plan_replay(request: BenchRequest, url: str, path: Path) -> Plan:
    """``--trace FILE``: the trace read and checked whole (a TraceError, exit 2, before
    anything is sent), and the server's configuration."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app.replay import ReplayState, client_processes
    from blackwell_doctor.collect.bench.trace import read_trace

    try:
        runner.parse_url(url)
    except runner.UrlError as exc:
        raise UserError(str(exc)) from None
    # --duration S cuts the schedule at S seconds of the replay (after --time-scale).
    trace = read_trace(
        path,
        format=request.trace_format,
        block_tokens=request.trace_block_tokens,
        requests=request.shape_options.requests,
        duration_s=None
        if request.shape_options.duration_s is None
        else request.shape_options.duration_s / request.time_scale,
    )
    config = runner.BenchConfig(
        url=url,
        model=request.model,
        api_key=request.api_key or None,
        shapes=[],
        seed=request.shape_options.seed,
        requests=request.shape_options.requests,
        deadline_s=request.shape_options.request_timeout_s,
        equivalence=False,
    )
    if request.facts_file is not None:
        from blackwell_doctor.app.obtain import read_facts_file

        facts = read_facts_file(request.facts_file)
        config = replace(config, host_facts=facts, host_source=str(request.facts_file))
    processes = client_processes(trace, request.time_scale, request.client_processes)
    replay = ReplayState(trace=trace, time_scale=request.time_scale, processes=processes)
    return Plan(config, replay=replay)


def _soak_timing(
    soak: str, interval: str | None, shape_names: Sequence[str]
) -> tuple[float, float]:
    """(duration, interval) in seconds of ``--soak`` and ``--soak-interval``."""
    from blackwell_doctor.app import soak as soaking

    try:
        duration_s = soaking.parse_duration(soak, option="--soak")
        interval_s = (
            soaking.default_interval(duration_s)
            if interval is None
            else soaking.parse_duration(interval, option="--soak-interval")
        )
        soaking.check_interval(duration_s, interval_s)
    except soaking.SoakError as exc:
        raise UserError(str(exc)) from None
    if len(shape_names) > 1:
        raise UserError("--soak holds the load of one shape: give at most one --shape")
    return duration_s, interval_s


def run(plan: Plan, display: Display) -> BenchRun:
    """Carry out ``plan``, its progress sent to ``display``; the run document. Ctrl-C ends
    the run early: the document keeps what was measured and says it was interrupted."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app import soak as soaking
    from blackwell_doctor.app import sweep as sweeping
    from blackwell_doctor.collect.bench import loop

    if plan.repeat > 1 or plan.other is not None:
        return run_repeated(plan, display)[0]
    if plan.replay is not None:
        return _run_replay(plan, plan.replay, display)
    state = runner.RunState()
    interrupted = False
    soak = plan.soak
    try:
        with display:
            if soak is None:
                loop.run(sweeping.run(plan.config, state, display))
            else:
                soak_state = soak.state
                display.status = lambda: soaking.live_line(soak_state)
                loop.run(soaking.run_soak(plan.config, state, soak.state, display.message))
    except KeyboardInterrupt:
        interrupted = True
    except MemoryError:  # what was measured is kept, as after Ctrl-C, but as a finding
        if soak is None:
            raise
        shape = soak.state.shape
        state.findings.append(
            f"this machine ran out of memory holding {shape.concurrency} requests of "
            f"~{shape.input_tokens} tokens in flight: the soak stopped"
        )
    if soak is None:
        return refuse_unreachable(runner.build_document(state, interrupted=interrupted))
    return refuse_unreachable(
        soaking.build_document(state, soak.state, soak.rules, interrupted=interrupted)
    )


def refuse_unreachable(run: BenchRun) -> BenchRun:
    """``run``, unless nothing answered at its URL (no TCP connection: refused, no such
    host) and so nothing was measured: then the usage error every command gives for an
    input that cannot be used (issue 40: this was a report on stdout and exit 1, the code
    of failed requests), one line on stderr, exit 2, with the URL to try."""
    from blackwell_doctor.collect.bench import client

    error = run.server.error or ""
    if not error.startswith(f"{client.UNREACHABLE}:") or any(s.requests for s in run.shapes):
        return run
    url = run.server.url or ""
    raise UserError(
        f"--url {url}: nothing answers there ({error.removeprefix(client.UNREACHABLE + ': ')})"
        f"; is the server up? Try: curl -sS {url}/v1/models (vLLM and SGLang also "
        f"answer {url}/health)"
    )


def _run_replay(plan: Plan, replay: ReplayState, display: Display) -> BenchRun:
    """``--trace``: the trace replayed; Ctrl-C keeps what was measured."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app import replay as replaying
    from blackwell_doctor.collect.bench import loop

    state = runner.RunState()
    interrupted = False
    try:
        with display:
            loop.run(replaying.run_replay(plan.config, replay, state, display))
    except KeyboardInterrupt:
        interrupted = True
    return replaying.build_document(state, replay, interrupted=interrupted)


def run_repeated(plan: Plan, display: Display) -> list[BenchRun]:
    """``--repeat N`` (and ``--compare-urls``): each server of ``plan`` measured N times,
    taking turns (A B A B ...), each server's runs one document with their noise floor.
    Ctrl-C ends early: the documents keep the runs measured, the last one partial."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app import repeat as repeating
    from blackwell_doctor.app import sweep as sweeping
    from blackwell_doctor.collect.bench import loop

    configs = [plan.config] if plan.other is None else [plan.config, plan.other]
    # bench --rate: the loads the first run measured (a sweep places its own), measured as
    # they are by every run after it, so that every run's points are the same loads.
    fixed: list[sweeping.Plan] = []

    def once(config: BenchConfig, state: runner.RunState, progress: runner.Progress) -> None:
        if fixed:
            config = sweeping.with_plan(config, fixed[0])
        try:
            loop.run(sweeping.run(config, state, progress))
        finally:
            if not fixed and (measured := sweeping.plan_of(state)) is not None:
                fixed.append(measured)

    try:
        with display:
            runs = repeating.run_repeated(
                configs, plan.repeat, display, say=display.message, run=once
            )
    except KeyboardInterrupt as exc:
        runs = getattr(exc, "partial", None) or [[] for _ in configs]
        runs = [r or [runner.build_document(runner.RunState(), interrupted=True)] for r in runs]
    others = [c.url for c in configs]
    return [
        refuse_unreachable(
            repeating.combine(r, interleaved_with=others[1 - k] if len(configs) > 1 else None)
        )
        for k, r in enumerate(runs)
    ]


def compare_urls(
    request: BenchRequest, display: Display
) -> tuple[BenchRun, BenchRun, CompareDocument]:
    """``bench --compare-urls A B [--repeat N]``: both measured in turns, then compared
    as ``--compare`` compares two files (A before, B after)."""
    from blackwell_doctor.rules.compare import compare as compare_runs

    assert request.compare_urls is not None
    before, after = run_repeated(plan(request), display)
    doc = _judged(
        compare_runs,
        request,
        before,
        after,
        # The URLs as the run documents keep them (without credentials).
        before_name=before.server.url or "A",
        after_name=after.server.url or "B",
    )
    return before, after, doc


def compare(request: BenchRequest, *, stdin: BinaryIO) -> CompareDocument | LadderDocument:
    """``bench --compare BEFORE AFTER [MORE...]``: the run documents read (``-``:
    ``stdin``) and compared, two as a compare, three or more as a ladder; UserError for a
    file that is not a run, or two runs (of a step) with no shape in common."""
    from blackwell_doctor.rules.compare import compare as compare_runs

    check_options(request)
    assert request.compare is not None
    if len(request.compare) > 2:
        return _ladder(request, stdin=stdin)
    before, after = request.compare
    runs = _read_runs((before, after), stdin=stdin)
    slo, level = _compare_slo(request)
    return _judged(
        compare_runs,
        request,
        runs[0],
        runs[1],
        before_name=request.compare_labels[0] if request.compare_labels else str(before),
        after_name=request.compare_labels[1] if request.compare_labels else str(after),
        slo=slo,
        slo_level=level,
    )


_Judged = TypeVar("_Judged")


def _judged(
    judge: Callable[..., _Judged], request: BenchRequest, *runs: object, **named: object
) -> _Judged:
    """``judge`` (a compare, a ladder) of ``runs`` with --compare's statistics options as
    ``request`` gives them; runs it cannot compare are a usage error."""
    from blackwell_doctor.rules.compare import NotComparable

    try:
        return judge(
            *runs,
            resamples=request.resamples,
            seed=request.shape_options.seed,
            threshold_pct=request.threshold_pct,
            fail_on_regression_pct=request.fail_on_regression_pct,
            **named,
        )
    except NotComparable as exc:
        raise UserError(str(exc)) from None


def _compare_slo(request: BenchRequest) -> tuple[dict[str, float] | None, float | None]:
    """--slo and --slo-level given to a compare of rate runs (None: the before run's)."""
    from blackwell_doctor.rules import goodput as goodputs

    try:
        slo = goodputs.parse_slo(request.rate_options.slo) if request.rate_options.slo else None
        level = (
            None
            if request.rate_options.slo_level_pct is None
            else goodputs.parse_level(request.rate_options.slo_level_pct)
        )
    except goodputs.SloError as exc:
        raise UserError(str(exc)) from None
    return slo, level


def _read_runs(paths: Sequence[Path], *, stdin: BinaryIO) -> list[BenchRun]:
    """The run documents at ``paths`` (``-``: ``stdin``), each read through the one bounded
    reader and decoded; UserError for one that is not a run."""
    from blackwell_doctor.collect.inputfile import BENCH_RUN, read_input
    from blackwell_doctor.report import bench as report

    runs = []
    for path in paths:
        data = read_input(path, BENCH_RUN, stdin=stdin)
        try:
            runs.append(report.decode_run(data, source=str(path)))
        except report.RunFileError as exc:
            raise UserError(str(exc)) from None
    return runs


def read_run(path: Path, *, stdin: BinaryIO) -> BenchRun:
    """The run document at ``path``, read and decoded as --compare reads each (bench
    --example of an example that is one run, its soak: soak-60s)."""
    return _read_runs([path], stdin=stdin)[0]


def _ladder(request: BenchRequest, *, stdin: BinaryIO) -> LadderDocument:
    """``bench --compare A B C ...``: each run against the one before it, and the first
    against the last (rules/ladder.py)."""
    from blackwell_doctor.rules.ladder import ladder

    assert request.compare is not None
    if sum(1 for p in request.compare if str(p) == "-") > 1:
        raise UserError("--compare reads standard input (-) once")
    runs = _read_runs(request.compare, stdin=stdin)
    return _judged(ladder, request, runs, [str(p) for p in request.compare])
