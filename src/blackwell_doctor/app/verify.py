"""``apply --verify --yes``: prove the change with a before/after benchmark, or undo it.

1. Bench the running container (the baseline) with the bench library (the same runner,
   shapes and seed as ``bench``); without a running container, say so.
2. Apply (blackwell_doctor.apply.docker: create, swap, start, health, log scan).
3. Warm start: time from the new container's start to its first streamed token (cold or
   warm, from the state of its JIT cache volume), then restart it and time it again (warm).
4. Bench the new container with the same seed and shapes; compare (bench.compare's
   bootstrap intervals); judge the gate (apply.gate).
5. The gate fails: roll back (the previous container renamed back and started) and time
   its first token again. Ctrl-C at any point after the swap rolls back the same way.

Both runs, the comparison and a record of the verification are written into one directory
(``--record-dir``), whatever the ending. Nothing here prints: lines go to ``say``.
"""

from __future__ import annotations

import asyncio
import datetime as dt
import os
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any

import msgspec

from blackwell_doctor import TOOL_NAME
from blackwell_doctor.app.rate_options import RateOptions
from blackwell_doctor.app.shape_options import ShapeOptions
from blackwell_doctor.recommend.launch import LaunchSpec, reachable_host
from blackwell_doctor.report.bench import BenchRun, CompareDocument
from blackwell_doctor.report.bench_env import ServerArgs
from blackwell_doctor.ruledata.shapes import Shape
from blackwell_doctor.rules import gate as gates
from blackwell_doctor.rules.compare import CAPACITY

if TYPE_CHECKING:
    from blackwell_doctor.app.bench import RateLoad
    from blackwell_doctor.app.sweep import Plan
    from blackwell_doctor.render.terminal import Item

# The shape apply --verify --rate benches when no --shape is given (bench --rate's).
RATE_SHAPE = "short"

VERIFY_SCHEMA_VERSION = 1
# Between two tries of the first-token probe while the server loads.
_FIRST_TOKEN_POLL_S = 0.25
# One try of the probe: the server is up when a one-token answer streams within this.
_FIRST_TOKEN_TRY_S = 30.0


@dataclass(frozen=True)
class VerifySettings:
    shapes: list[Shape]
    seed: int = 0
    requests: int | None = None
    request_timeout_s: float = 300.0
    metrics: list[gates.GateMetric] = field(
        default_factory=lambda: [gates.GateMetric(None, m) for m in gates.DEFAULT_METRICS]
    )
    max_regression_pct: float = 10.0
    divergence_after: int | None = None
    resamples: int = 2000
    warm_start: bool = True
    first_token_timeout_s: float = 1800.0
    record_dir: Path | None = None  # None: default_record_root()
    report_md: Path | None = None
    repeat: int = 1  # bench runs of the baseline and of the new container each
    # --rate: bench one shape at these loads (app/sweep.py); the gate holds its capacity at
    # SLO. The new container meets the loads the baseline measured.
    load: RateLoad | None = None


@dataclass(frozen=True, kw_only=True)
class VerifyRequest:
    """``apply``'s verification options as given (``verify``: ``--verify``)."""

    verify: bool = False
    max_regression_pct: float = 10.0
    gate_metrics: Sequence[str] = ()
    divergence_after: int | None = None
    shape_options: ShapeOptions = field(default_factory=ShapeOptions)
    warm_start: bool = True
    record_dir: Path | None = None
    report_md: Path | None = None
    repeat: int = 1
    # --rate and its options, as bench's.
    rate_options: RateOptions = field(default_factory=RateOptions)


def verify_settings(
    request: VerifyRequest, *, yes: bool, rollback: bool, first_token_timeout_s: float
) -> VerifySettings:
    """--verify's options, checked before anything is touched (UserError, exit 2)."""
    from blackwell_doctor.app.bench_flow import load_shapes, require_finite
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.ruledata.shapes import ShapeError, select_shapes
    from blackwell_doctor.rules.compare import LATENCY_METRICS

    if request.verify and (rollback or not yes):
        raise UserError("--verify goes with --yes (it changes the host), not with --rollback")
    if not request.verify:
        used = [
            name
            for name, value in (
                ("--gate-metric", request.gate_metrics),
                ("--shapes", request.shape_options.shapes_file),
                ("--shape", request.shape_options.shape_names),
                ("--requests", request.shape_options.requests),
                ("--record-dir", request.record_dir),
                ("--report-md", request.report_md),
                ("--divergence-after", request.divergence_after),
                ("--repeat", request.repeat != 1),
                ("--rate", request.rate_options.rate),
                ("--arrival", request.rate_options.arrival),
                ("--burstiness", request.rate_options.burstiness),
                ("--slo", request.rate_options.slo),
                ("--slo-level", request.rate_options.slo_level_pct is not None),
            )
            if value
        ]
        if used:
            raise UserError(f"{', '.join(used)} appl{'ies' if len(used) == 1 else 'y'} to --verify")
    require_finite(
        (
            ("--max-regression", request.max_regression_pct),
            ("--request-timeout", request.shape_options.request_timeout_s),
        )
    )
    known = frozenset({*LATENCY_METRICS, "output_tokens_per_s", CAPACITY})
    load = _rate_load(request)
    names_given = list(request.shape_options.names)
    if load is not None and not names_given:
        names_given = [RATE_SHAPE]
    try:
        shapes = select_shapes(load_shapes(request.shape_options.shapes_file), names_given)
        metrics = [gates.parse_gate_metric(m, known) for m in request.gate_metrics]
    except (ShapeError, gates.GateSpecError) as exc:
        raise UserError(str(exc)) from None
    names = {s.name for s in shapes}
    if load is not None:
        # The gate of a rate run is its capacity at SLO, always (the rate shape's: the
        # compare's row is named after it, not after a point); --gate-metric adds a point's
        # own metrics (its points are shapes named SHAPE@LOAD).
        capacity = gates.GateMetric(shapes[0].name, CAPACITY)
        metrics = [capacity if m.metric == CAPACITY and m.shape is None else m for m in metrics]
        if not any(m.metric == CAPACITY for m in metrics):
            metrics.insert(0, capacity)
    for m in metrics:
        if m.metric == CAPACITY and load is None:
            raise UserError(f"--gate-metric {m.label}: the capacity at SLO needs --rate and --slo")
        if (
            m.shape is not None
            and m.shape not in names
            and not (load is not None and m.shape.startswith(f"{shapes[0].name}@"))
        ):
            raise UserError(f"--gate-metric {m.label}: shape {m.shape!r} is not benched")
    return VerifySettings(
        shapes=shapes,
        seed=request.shape_options.seed,
        requests=request.shape_options.requests,
        request_timeout_s=request.shape_options.request_timeout_s,
        metrics=metrics or [gates.GateMetric(None, m) for m in gates.DEFAULT_METRICS],
        max_regression_pct=request.max_regression_pct,
        divergence_after=request.divergence_after,
        warm_start=request.warm_start,
        first_token_timeout_s=first_token_timeout_s,
        record_dir=request.record_dir,
        report_md=request.report_md,
        repeat=request.repeat,
        load=load,
    )


def _rate_load(request: VerifyRequest) -> RateLoad | None:
    """--rate and its options, checked as bench checks them; None without --rate. The gate
    holds a capacity at SLO, so --rate needs --slo."""
    from blackwell_doctor.app.bench_flow import BenchRequest, check_options, rates_from
    from blackwell_doctor.facts.errors import UserError

    as_bench = BenchRequest(
        url="http://127.0.0.1",
        shape_options=ShapeOptions(shape_names=request.shape_options.shape_names),
        rate_options=request.rate_options,
    )
    opts = request.rate_options
    if opts.rate is None:
        for name, given in (("--arrival", opts.arrival), ("--burstiness", opts.burstiness)):
            if given is not None:
                raise UserError(f"{name} applies to --rate")
        if opts.slo or opts.slo_level_pct is not None:
            raise UserError("--slo is the gate of --rate: give --rate")
        return None
    check_options(as_bench)
    if not opts.slo:
        raise UserError(
            "apply --verify --rate keeps a change only if its capacity at SLO did not drop: "
            "give --slo (e.g. ttft_ms:500,tpot_ms:50)"
        )
    return rates_from(as_bench)


class WarmStart(msgspec.Struct, kw_only=True):
    """Seconds from a container start to its first streamed token."""

    jit_cache_volume: str | None
    first_start_s: float | None = None
    first_start_kind: str = "unknown"  # "cold", "warm" or "unknown" (see why)
    why: str = ""
    restart_s: float | None = None  # a second start: the JIT cache is filled
    error: str | None = None


class GateRecord(msgspec.Struct, kw_only=True):
    max_regression_pct: float
    divergence_after: int | None
    holds: bool | None  # None: not judged (no baseline, or interrupted before)
    rows: list[gates.GateRow]
    failures: list[str]
    notes: list[str]


class VerifyRecord(msgspec.Struct, kw_only=True):
    """verify.json, beside baseline.json, after.json and compare.json."""

    schema_version: int
    container: str
    image: str
    runtime: str
    started_at: str
    changes: list[str]
    baseline: str | None  # file name in the record directory; None: no baseline
    baseline_note: str
    after: str | None
    compare: str | None
    gate: GateRecord | None
    warm_start: WarmStart | None
    outcome: str  # "kept", "rolled back", "interrupted", "failed", "up to date"
    message: str
    rolled_back: list[str]
    previous_serving_s: float | None = None  # first token of the restored container
    previous_serving_error: str | None = None


# Writes a whole file (the CLI's atomic writer: a temporary file, then a rename).
WriteFile = Callable[[str, Path], None]


class GateRejected(Exception):
    """The change did not prove itself; apply rolls it back."""


# --------------------------------------------------------------------------- first token


class FirstTokenTimeout(Exception):
    pass


async def _first_token_async(base: str, since: float, deadline_s: float) -> float:
    import aiohttp

    from blackwell_doctor.collect.bench import client

    end = since + deadline_s
    last = "no answer yet"
    timeout = aiohttp.ClientTimeout(total=None)
    async with aiohttp.ClientSession(timeout=timeout) as session:
        while True:
            left = end - time.perf_counter()
            if left <= 0:
                raise FirstTokenTimeout(f"no token within {deadline_s:g} s ({last})")
            try:
                async with asyncio.timeout(min(left, 5.0)):
                    async with session.get(base + "/v1/models", allow_redirects=False) as r:
                        listing = (
                            msgspec.json.decode(await client.read_capped(r))
                            if r.status == 200
                            else {}
                        )
                data = listing.get("data") if isinstance(listing, dict) else None
                model = data[0].get("id") if isinstance(data, list) and data else None
            except (
                TimeoutError,
                aiohttp.ClientError,
                OSError,
                msgspec.DecodeError,
                client.BodyTooLarge,
            ) as exc:
                model, last = None, f"{type(exc).__name__}"
            if isinstance(model, str):
                body = client.request_body(
                    model=model, prompt="Hello", max_tokens=1, ignore_eos=True, greedy=True
                )
                out = await client.stream_chat(
                    session,
                    base + "/v1/chat/completions",
                    body,
                    {"Content-Type": "application/json"},
                    deadline_s=max(0.1, min(left, _FIRST_TOKEN_TRY_S)),
                )
                if out.ok and out.ttft_s is not None:
                    return out.start_s + out.ttft_s - since
                last = f"{out.error}: {out.detail}" if out.error else "no token streamed"
            await asyncio.sleep(_FIRST_TOKEN_POLL_S)


def first_token(base: str, *, since: float, deadline_s: float) -> float:
    """Seconds from ``since`` (time.perf_counter) until ``base`` streamed its first token of
    a one-token greedy chat completion; retried while the server loads, never past
    ``deadline_s`` after ``since`` (FirstTokenTimeout)."""
    from blackwell_doctor.collect.bench import loop

    return loop.run(_first_token_async(base.rstrip("/"), since, deadline_s))


# --------------------------------------------------------------------------- bench


def bench(
    url: str,
    settings: VerifySettings,
    *,
    say: Callable[[str], None],
    label: str,
    image: str | None = None,
    plan: Plan | None = None,
    server_args: ServerArgs | None = None,
) -> tuple[BenchRun, bool]:
    """``settings.repeat`` bench runs against ``url``, one document (with more than one,
    its runs and their noise floor); (document, interrupted). Ctrl-C is re-raised after
    the partial document is returned through the KeyboardInterrupt's ``partial``. With
    ``settings.load`` each run measures ``plan`` (the loads the baseline measured), or the
    loads the first run placed."""
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app import sweep as sweeping
    from blackwell_doctor.app.repeat import combine
    from blackwell_doctor.collect.bench import loop

    config = runner.BenchConfig(
        url=url,
        model=None,
        api_key=None,
        shapes=settings.shapes,
        seed=settings.seed,
        requests=settings.requests,
        deadline_s=settings.request_timeout_s,
        container_image=image,
        server_args=server_args,
        load=settings.load,
    )
    runs: list[BenchRun] = []

    def progress(live: runner.Live) -> None:
        if live.phase == "done":
            say(f"bench {label}: {live.shape} measured ({live.done} requests)")

    for i in range(settings.repeat):
        state = runner.RunState()
        try:
            # Inside: a Ctrl-C from the moment the line is out leaves an (empty) partial run.
            which = f" (run {i + 1} of {settings.repeat})" if settings.repeat > 1 else ""
            say(f"bench {label}{which}: {url}, shapes {', '.join(s.name for s in settings.shapes)}")
            measured = (
                config if plan is None or config.load is None else sweeping.with_plan(config, plan)
            )
            try:
                loop.run(sweeping.run(measured, state, progress))
            finally:
                if plan is None:
                    plan = sweeping.plan_of(state)
        except KeyboardInterrupt as exc:
            runs.append(runner.build_document(state, interrupted=True))
            exc.partial = combine(runs)  # type: ignore[attr-defined]
            raise
        runs.append(runner.build_document(state, interrupted=False))
        if runs[-1].server.error is not None:
            break  # unreachable: the runs left would say the same
    return combine(runs), False


def image_of(container: Any) -> str | None:
    """The image a container runs from, as the bench run pins it: the reference it was
    created with and the image's id (its digest), from the Docker API's attributes."""
    attrs = getattr(container, "attrs", None)
    if not isinstance(attrs, dict):
        return None
    config = attrs.get("Config")
    ref = config.get("Image") if isinstance(config, dict) else None
    ident = attrs.get("Image")
    parts = [p for p in (ref, ident) if isinstance(p, str) and p]
    if not parts:
        return None
    return parts[0] if len(parts) == 1 or parts[0] == parts[1] else f"{parts[0]} ({parts[1]})"


def launch_args(container: Any, source: str) -> ServerArgs | None:
    """How a container runs its server (the Docker API's Path and Args: for the new one,
    the spec apply --verify launched), as the bench run pins it."""
    from blackwell_doctor.collect.bench.server_args import from_container

    attrs = getattr(container, "attrs", None)
    return from_container(attrs, source) if isinstance(attrs, dict) else None


# --------------------------------------------------------------------------- record


def default_record_root(environ: dict[str, str] | os._Environ[str] = os.environ) -> Path:
    """$XDG_STATE_HOME/blackwell-doctor/apply (default ~/.local/state/...)."""
    state = environ.get("XDG_STATE_HOME") or str(Path.home() / ".local" / "state")
    return Path(state) / "blackwell-doctor" / "apply"


def _record_dir(settings: VerifySettings, name: str, stamp: str) -> Path:
    root = settings.record_dir or default_record_root()
    path = root / f"{name}-{stamp}"
    path.mkdir(parents=True, exist_ok=False)
    return path


def _published_url(container: Any) -> str | None:
    """Where the running container's first published TCP port answers on this host."""
    bindings = (container.attrs.get("HostConfig") or {}).get("PortBindings") or {}
    for _, hosts in sorted(bindings.items()):
        for h in hosts or []:
            port = h.get("HostPort")
            if port:
                return f"http://{reachable_host(h.get('HostIp') or '0.0.0.0')}:{port}"  # noqa: S104
    return None


def _jit_volume(spec: LaunchSpec) -> str | None:
    for m in spec.mounts:
        if m.type == "volume":
            return m.source
    return None


def _volume_state(client: Any, name: str | None) -> tuple[str, str]:
    """(kind of the coming first start, why): "cold" when the JIT cache volume is new or
    empty, "warm" when it already holds files, "unknown" when it cannot be looked into."""
    from docker.errors import NotFound

    if name is None:
        return "unknown", "the runtime has no JIT cache volume"
    try:
        volume = client.volumes.get(name)
    except NotFound:
        return "cold", f"the JIT cache volume {name} is new"
    except Exception as exc:  # the measurement goes on; the kind stays unknown
        return "unknown", f"the JIT cache volume {name} could not be inspected ({exc})"
    where = Path(str(volume.attrs.get("Mountpoint", "")))
    try:
        empty = not any(where.iterdir())
    except OSError:
        return "unknown", f"the JIT cache volume {name} exists; its files are not visible here"
    if empty:
        return "cold", f"the JIT cache volume {name} is empty"
    return "warm", f"the JIT cache volume {name} already holds files"


# --------------------------------------------------------------------------- the flow


@dataclass
class _Progress:
    baseline: BenchRun | None = None
    after: BenchRun | None = None
    compare: CompareDocument | None = None
    gate: gates.GateResult | None = None
    warm: WarmStart | None = None
    reached: bool = False  # the new container was healthy and verification began


def run_verified(
    spec: LaunchSpec,
    client: Any,
    settings: VerifySettings,
    change: Callable[..., str],
    *,
    stop_timeout_s: int,
    say: Callable[[str], None],
    write: WriteFile,
) -> tuple[str, VerifyRecord, Path, CompareDocument | None]:
    """Baseline, apply, warm start, after-bench, gate; roll back when it fails. ``change``:
    apply/docker.py's apply of ``spec`` through ``client``, given the verification hook.

    Returns (ending: "kept" / "rolled back" / "interrupted" / "failed" / "up to date", the
    record, its directory, the comparison when there was one)."""
    from blackwell_doctor.apply import docker as run
    from blackwell_doctor.render.bench import encode
    from blackwell_doctor.rules.compare import compare

    stamp = dt.datetime.now(dt.UTC).strftime("%Y%m%dT%H%M%SZ")
    started_at = dt.datetime.now(dt.UTC).isoformat(timespec="seconds")
    where = _record_dir(settings, spec.name, stamp)
    progress = _Progress()
    plan = run.make_plan(spec, client)
    changes = [f"{c.field}: {c.current or '(none)'} -> {c.wanted}" for c in plan.changes]
    current = run._get_container(client, spec.name)
    baseline_url = _published_url(current) if current is not None else None
    rolled: list[str] = []
    record_files: dict[str, str] = {}

    def save(name: str, doc: BenchRun | CompareDocument) -> None:
        write(encode(doc), where / name)
        record_files[name] = name

    def bench_container(
        url: str, container: Any, label: str, launched_by: str, *, loads: Plan | None
    ) -> BenchRun:
        """``bench`` of a container's server, its image and launch recorded with the run
        (the running one for the baseline, the new one after the change)."""
        doc, _ = bench(
            url,
            settings,
            say=say,
            label=label,
            image=image_of(container),
            plan=loads,
            server_args=launch_args(container, launched_by),
        )
        return doc

    def finish(outcome: str, message: str) -> VerifyRecord:
        g = progress.gate
        gate_record = GateRecord(
            max_regression_pct=settings.max_regression_pct,
            divergence_after=settings.divergence_after,
            holds=None if g is None else g.holds,
            rows=list(g.rows) if g else [],
            failures=list(g.failures) if g else [],
            notes=list(g.notes) if g else [],
        )
        return VerifyRecord(
            schema_version=VERIFY_SCHEMA_VERSION,
            container=spec.name,
            image=spec.image,
            runtime=spec.runtime,
            started_at=started_at,
            changes=changes,
            baseline=record_files.get("baseline.json"),
            baseline_note=baseline_note,
            after=record_files.get("after.json"),
            compare=record_files.get("compare.json"),
            gate=gate_record,
            warm_start=progress.warm,
            outcome=outcome,
            message=message,
            rolled_back=rolled,
        )

    # 1. the baseline
    if current is None or current.status != "running":
        state = "no container" if current is None else f"{spec.name} is {current.status}"
        baseline_note = (
            f"no baseline: {state} named {spec.name} is running; benching the new one only"
        )
        if current is not None:
            baseline_note = f"no baseline: {state}, not running; benching the new one only"
        say(baseline_note)
    elif baseline_url is None:
        baseline_note = f"no baseline: {spec.name} publishes no port; benching the new one only"
        say(baseline_note)
    elif plan.up_to_date:
        baseline_note = "nothing to verify: the running container matches the spec"
    else:
        baseline_note = f"baseline: the running {spec.name} at {baseline_url}"
        say(baseline_note)
        try:
            # A container that was just (re)started runs but does not serve yet: wait for
            # its first token rather than call it unmeasurable.
            first_token(
                baseline_url, since=time.perf_counter(), deadline_s=settings.first_token_timeout_s
            )
            doc = bench_container(
                baseline_url, current, "baseline", f"container {spec.name}", loads=None
            )
        except FirstTokenTimeout as exc:
            doc = None
            baseline_note = (
                f"no baseline: the running {spec.name} serves no token ({exc}); "
                "benching the new one only"
            )
            say(baseline_note)
        except KeyboardInterrupt as exc:
            partial = getattr(exc, "partial", None)
            if partial is not None:
                save("baseline.json", partial)
            record = finish("interrupted", "interrupted during the baseline bench: nothing changed")
            write(_encode(record), where / "verify.json")
            return "interrupted", record, where, None
        if doc is None:
            pass
        elif doc.server.error is not None:
            save("baseline.json", doc)
            baseline_note = (
                f"no baseline: the running {spec.name} could not be measured "
                f"({doc.server.error}); benching the new one only"
            )
            say(baseline_note)
        else:
            save("baseline.json", doc)
            progress.baseline = doc

    if plan.up_to_date:
        record = finish("up to date", f"{spec.name} is up to date: nothing changed")
        write(_encode(record), where / "verify.json")
        return "up to date", record, where, None

    volume = _jit_volume(spec)
    kind, why = _volume_state(client, volume)
    new_url = f"http://{reachable_host(spec.bind)}:{spec.host_port}"

    def verify(container: Any, started: float) -> None:
        progress.reached = True
        if settings.warm_start:
            warm = WarmStart(jit_cache_volume=volume, first_start_kind=kind, why=why)
            progress.warm = warm
            try:
                warm.first_start_s = first_token(
                    new_url, since=started, deadline_s=settings.first_token_timeout_s
                )
                say(f"warm start: first token {warm.first_start_s:.1f} s after start ({kind})")
                container.stop(timeout=stop_timeout_s)
                again = time.perf_counter()
                container.start()
                warm.restart_s = first_token(
                    new_url, since=again, deadline_s=settings.first_token_timeout_s
                )
                say(f"warm start: first token {warm.restart_s:.1f} s after a restart (warm)")
            except FirstTokenTimeout as exc:
                warm.error = str(exc)
                raise GateRejected(f"the new container served no token: {exc}") from None
        try:
            after = bench_container(
                new_url,
                container,
                "new",
                f"apply --verify's launch spec (container {spec.name})",
                loads=_plan_of(progress.baseline),
            )
        except KeyboardInterrupt as exc:
            partial = getattr(exc, "partial", None)
            if partial is not None:
                save("after.json", partial)
            raise
        save("after.json", after)
        progress.after = after
        if progress.baseline is None:
            problems = gates.errors_of(after)
            progress.gate = gates.GateResult(holds=not problems, failures=problems)
        else:
            doc = compare(
                progress.baseline,
                after,
                before_name="baseline.json",
                after_name="after.json",
                resamples=settings.resamples,
                seed=settings.seed,
                threshold_pct=settings.max_regression_pct,
                # The baseline's runs, then the new container's: they cannot take turns.
                interleaved=False,
            )
            progress.compare = doc
            save("compare.json", doc)
            progress.gate = gates.judge(
                doc,
                after,
                metrics=settings.metrics,
                max_regression_pct=settings.max_regression_pct,
                divergence_after=settings.divergence_after,
            )
            if settings.repeat > 1:
                line = (
                    f"{settings.repeat} runs each of the baseline and the new container, one "
                    "side after the other (they cannot take turns: the new container replaces "
                    "the old): each allowed regression is widened to the whole noise floor "
                    "the runs measured"
                )
                progress.gate.notes.append(line)
                say(line)
        if not progress.gate.holds:
            raise GateRejected("the gate failed: " + "; ".join(progress.gate.failures))

    try:
        message = change(verify=verify)
        ending = "kept"
    except run.ApplyFailed as exc:
        rolled = exc.rolled_back
        message = exc.message + "".join(f"; finding {f}" for f in exc.findings)
        ending = "rolled back" if progress.reached else "failed"
    except run.ApplyInterrupted as exc:
        rolled = exc.rolled_back
        message = f"interrupted during {exc.step}"
        ending = "interrupted"
    record = finish(ending, message)
    restored = any("started the previous" in r for r in rolled)
    if ending == "interrupted" and restored:
        # Ctrl-C means "stop now": the previous container is started, not waited for.
        say(f"the previous {spec.name} was started again; not waiting for it to serve")
    elif ending != "kept" and restored and baseline_url is not None:
        since = time.perf_counter()
        try:
            record.previous_serving_s = first_token(
                baseline_url, since=since, deadline_s=settings.first_token_timeout_s
            )
            say(
                f"the previous {spec.name} serves again: first token "
                f"{record.previous_serving_s:.1f} s after the rollback"
            )
        except (FirstTokenTimeout, KeyboardInterrupt) as exc:
            record.previous_serving_error = str(exc) or "interrupted"
    write(_encode(record), where / "verify.json")
    return ending, record, where, progress.compare


def _plan_of(run: BenchRun | None) -> Plan | None:
    """The loads a rate run measured, for the new container to meet the same ones."""
    if run is None or isinstance(run.sweep, msgspec.UnsetType):
        return None
    from blackwell_doctor.rules.sweep import loads_of

    return tuple(loads_of(run.sweep))


def _encode(record: VerifyRecord) -> str:
    return (msgspec.json.format(msgspec.json.encode(record), indent=2) + b"\n").decode()


# --------------------------------------------------------------------------- rendering


def _f(value: float | None, digits: int = 2) -> str:
    return "-" if value is None else f"{value:.{digits}f}"


def render(
    record: VerifyRecord,
    doc: CompareDocument | None,
    where: Path,
    *,
    markdown: bool,
    width: int | None = None,
) -> str:
    """The verification for a terminal (fitted to ``width``: None, not fitted) or an ops
    ticket (Markdown), through the sanitising step: every string of the record and the
    comparison is made safe to show first."""
    from blackwell_doctor.render.bench import render_compare
    from blackwell_doctor.render.common import sanitize, scrub
    from blackwell_doctor.render.terminal import write_plain

    record = scrub(record, sanitize)
    doc = scrub(doc, sanitize) if doc is not None else None
    shown_where = sanitize(str(where))
    verdict = {
        "kept": "KEPT: the change held the gate",
        "rolled back": "ROLLED BACK: the change did not hold the gate",
        "failed": "FAILED: the change did not start; rolled back",
        "interrupted": "INTERRUPTED: rolled back",
        "up to date": "UP TO DATE: nothing changed",
    }.get(record.outcome, record.outcome)
    out: list[Item] = []
    if markdown:
        out += [f"# {TOOL_NAME} apply --verify: {record.container}", ""]
        out += [f"**Verdict: {verdict}**", ""]
    else:
        out += [f"apply --verify {record.container}: {verdict}"]
    bullet = "- " if markdown else "  "
    out.append(f"{bullet}image: {record.image} (runtime {record.runtime})")
    out.append(f"{bullet}started: {record.started_at}")
    out.append(f"{bullet}{record.baseline_note}")
    for c in record.changes:
        out.append(f"{bullet}change: {c}")
    out.append(f"{bullet}{record.message}")
    for r in record.rolled_back:
        out.append(f"{bullet}rolled back: {r}")
    if record.previous_serving_s is not None:
        out.append(
            f"{bullet}the previous container serves again: first token "
            f"{record.previous_serving_s:.1f} s after the rollback"
        )
    elif record.previous_serving_error:
        out.append(
            f"{bullet}the previous container did not answer: {record.previous_serving_error}"
        )
    out.append("")
    g = record.gate
    if g is not None and g.rows:
        head = f"gate: no significant regression beyond {g.max_regression_pct:g}%"
        out += [f"## {head}" if markdown else head, ""]
        interval = "interval" if doc is None else f"{doc.per_comparison_confidence:.2%} CI"
        rows = [["shape", "metric", "before", "after", "change", interval, "gate"]]
        for row in g.rows:
            ci = (
                "-"
                if row.ci_low_pct is None or row.ci_high_pct is None
                else f"[{row.ci_low_pct:+.1f}%, {row.ci_high_pct:+.1f}%]"
            )
            change = "-" if row.change_pct is None else f"{row.change_pct:+.1f}%"
            rows.append(
                [
                    row.shape,
                    row.metric,
                    _f(row.before),
                    _f(row.after),
                    change,
                    ci,
                    ("holds: " if row.holds else "FAILS: ") + row.reason,
                ]
            )
        out += _table(rows, markdown=markdown)
        out.append("")
    if g is not None:
        for f in g.failures:
            out.append(f"{bullet}gate failure: {f}")
        for n in g.notes:
            out.append(f"{bullet}note: {n}")
        if g.failures or g.notes:
            out.append("")
    w = record.warm_start
    if w is not None:
        head = "warm start (container start to first streamed token)"
        out += [f"## {head}" if markdown else head, ""]
        rows = [["start", "seconds", "JIT cache"]]
        rows.append([f"first start ({w.first_start_kind})", _f(w.first_start_s, 1), w.why])
        rows.append(["restart (warm)", _f(w.restart_s, 1), "filled by the first start"])
        out += _table(rows, markdown=markdown)
        if w.error:
            out.append(f"{bullet}warm start: {w.error}")
        out.append("")
    if doc is not None:
        text = render_compare(doc, markdown=markdown, width=None if markdown else width)
        if markdown:
            text = text.replace("## compare", "## compare (every metric)", 1)
        out.append(text.rstrip("\n"))
        out.append("")
    files = [f for f in (record.baseline, record.after, record.compare) if f]
    out.append(f"{bullet}records: {shown_where}/ ({', '.join([*files, 'verify.json'])})")
    return write_plain(out, None if markdown else width)


def _table(rows: list[list[str]], *, markdown: bool) -> list[Item]:
    from blackwell_doctor.render.terminal import Table

    if markdown:
        cells = [[c.replace("|", "\\|") for c in row] for row in rows]
        out: list[Item] = ["| " + " | ".join(cells[0]) + " |", "|" + "---|" * len(cells[0])]
        return out + ["| " + " | ".join(r) + " |" for r in cells[1:]]
    return [Table(rows, indent=2, keys=2)]
