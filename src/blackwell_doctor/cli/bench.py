"""``bench``: serving performance of an OpenAI-compatible server, and ``bench --compare``.
The measuring lives in ``blackwell_doctor.app.bench`` and prints nothing."""

from __future__ import annotations

import math
import os
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from blackwell_doctor.render.formats import BenchFormat

if TYPE_CHECKING:
    from rich.live import Live as RichLive

    from blackwell_doctor.app.bench import Live


_HELP = """Measure serving performance of an OpenAI-compatible server (vLLM, SGLang,
trtllm-serve, llama.cpp) the way `vllm bench serve` does: TTFT, TPOT, ITL and E2E (mean,
p50/p90/p95/p99), output tokens from the server's usage with reasoning tokens apart, greedy
outputs for equivalence, the server's /metrics beside the client's.

`bench --compare before.json after.json` reports every change with a bootstrap interval
and a verdict, and a scorecard.

`bench --soak 8h` holds one shape's load (default: concurrent) for that long and reports
per interval latency, throughput, the server's KV-cache use and each GPU's used memory,
then whether any of them grows (Theil-Sen slope per hour, thresholds in checks/soak.toml).

Exit codes: 0 every request succeeded (compare: no regression past --fail-on-regression;
soak: nothing grows); 1 some requests failed or the server could not be reached (compare:
a regression; soak: a growing trend); 2 bad input (compare: two runs with no shape in
common); 130 interrupted (the partial result is written)."""


class _Display:
    """Progress on standard error: a rich live line on a terminal (redrawn 4 times a
    second from the run's state, so the run itself pays nothing per request), plain lines
    when piped (one per phase and per tenth of a shape)."""

    def __init__(self) -> None:
        self.tty = sys.stderr.isatty() and os.environ.get("TERM") != "dumb"
        self._state: Live | None = None
        self._last: tuple[str, str] = ("", "")
        self._step = -1
        self._live: RichLive | None = None
        self.status: Callable[[], str] | None = None  # the live line when no shape runs

    def line(self) -> str:
        from blackwell_doctor.report.stats import percentile

        live = self._state
        if live is None:
            return self.status() if self.status else "asking the server what it serves..."

        def p50(values: list[float]) -> str:
            return "-" if not values else f"{percentile(sorted(values), 50) * 1000:.1f}"

        return (
            f"{live.shape}: {live.phase} {live.done}/{live.total} requests"
            + (f", {live.errors} failed" if live.errors else "")
            + f", running p50 TTFT {p50(list(live.ttft_s))} ms, "
            f"E2E {p50(list(live.e2e_s))} ms"
        )

    def __rich__(self) -> str:
        return self.line()

    def __enter__(self) -> _Display:
        if self.tty:
            from rich.console import Console
            from rich.live import Live as RichLive

            self._live = RichLive(
                self, console=Console(stderr=True), refresh_per_second=4, transient=True
            )
            self._live.start()
        return self

    def __exit__(self, *exc: object) -> None:
        if self._live is not None:
            self._live.stop()

    def message(self, line: str) -> None:
        """A progress line of its own (the soak's, one per interval)."""
        if self._live is not None:
            self._live.console.print(line, markup=False, highlight=False)
        else:
            sys.stderr.write(line + "\n")
            sys.stderr.flush()

    def __call__(self, live: Live) -> None:
        self._state = live
        if self._live is not None:
            if live.phase == "done":
                self._live.console.print(self.line(), markup=False, highlight=False)
            return
        step = live.done * 10 // max(1, live.total)
        if (live.shape, live.phase) != self._last or step != self._step:
            self._last, self._step = (live.shape, live.phase), step
            sys.stderr.write(self.line() + "\n")
            sys.stderr.flush()


def register(app: typer.Typer) -> None:
    """Add ``bench`` to ``app``."""

    @app.command("bench", help=_HELP)
    def bench(
        url: Annotated[
            str | None,
            typer.Option("--url", help="The server's base URL, e.g. http://127.0.0.1:8000."),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option("--model", help="Model name (default: the one /v1/models lists)."),
        ] = None,
        output: Annotated[
            Path | None,
            typer.Option(
                "--output", "-o", help="Write the JSON run document (for --compare) here."
            ),
        ] = None,
        fmt: Annotated[
            BenchFormat, typer.Option("--format", "-f", help="Output format on stdout.")
        ] = BenchFormat.RICH,
        shapes_file: Annotated[
            Path | None,
            typer.Option("--shapes", help="A TOML file of extra shapes ([shape.NAME] tables)."),
        ] = None,
        shape_names: Annotated[
            list[str] | None,
            typer.Option(
                "--shape", help="Measure this shape (repeatable; default short, long, concurrent)."
            ),
        ] = None,
        seed: Annotated[int, typer.Option("--seed", help="Seed of the synthetic prompts.")] = 0,
        requests: Annotated[
            int | None,
            typer.Option("--requests", min=1, max=1_000_000, help="Measured requests per shape."),
        ] = None,
        duration: Annotated[
            float | None,
            typer.Option(
                "--duration", min=0.1, help="Per shape: send no new request after S seconds."
            ),
        ] = None,
        request_timeout: Annotated[
            float,
            typer.Option(
                "--request-timeout",
                min=0.1,
                max=86400.0,
                help="Deadline of each request in seconds; past it the request is 'stalled'.",
            ),
        ] = 300.0,
        api_key: Annotated[
            str | None,
            typer.Option(
                "--api-key",
                envvar="OPENAI_API_KEY",
                show_default=False,
                show_envvar=True,
                help="Bearer token sent to the server; never printed or written.",
            ),
        ] = None,
        no_equivalence: Annotated[
            bool, typer.Option("--no-equivalence", help="Skip the greedy equivalence prompts.")
        ] = False,
        compare: Annotated[
            tuple[Path, Path] | None,
            typer.Option(
                "--compare",
                help="Compare two run documents: BEFORE AFTER.",
                metavar="BEFORE AFTER",
            ),
        ] = None,
        fail_on_regression: Annotated[
            float | None,
            typer.Option(
                "--fail-on-regression",
                min=0.0,
                help="With --compare: exit 1 when a metric is significantly worse by more "
                "than PCT percent, outputs drifted, or more requests failed.",
            ),
        ] = None,
        threshold: Annotated[
            float,
            typer.Option(
                "--threshold",
                min=0.0,
                help="With --compare: smallest change in percent called better or worse.",
            ),
        ] = 5.0,
        resamples: Annotated[
            int,
            typer.Option(
                "--resamples", min=100, max=100_000, help="With --compare: bootstrap resamples."
            ),
        ] = 2000,
        soak: Annotated[
            str | None,
            typer.Option(
                "--soak",
                metavar="DURATION",
                help="Hold one shape's load this long (60s, 30m, 8h, 1h30m) and report per "
                "interval, with KV-cache and GPU memory growth per hour.",
            ),
        ] = None,
        soak_interval: Annotated[
            str | None,
            typer.Option(
                "--soak-interval",
                metavar="DURATION",
                help="With --soak: the interval (default: about 30 of them, 5 s to 60 s).",
            ),
        ] = None,
    ) -> None:
        from blackwell_doctor.facts.errors import UserError

        for name, value in (
            ("--duration", duration),
            ("--request-timeout", request_timeout),
            ("--fail-on-regression", fail_on_regression),
            ("--threshold", threshold),
        ):
            if value is not None and not math.isfinite(value):
                raise UserError(f"{name} must be a finite number, got {value}")
        if compare is not None:
            if url is not None:
                raise UserError("--compare reads two run files; it does not take --url")
            _compare(compare, fmt, output, fail_on_regression, threshold, resamples, seed)
            return
        if fail_on_regression is not None:
            raise UserError("--fail-on-regression applies to --compare")
        if url is None:
            raise UserError("bench needs --url (or --compare BEFORE AFTER)")
        if soak is not None:
            for name, given in (("--requests", requests), ("--duration", duration)):
                if given is not None:
                    raise UserError(f"--soak runs until its DURATION; it does not take {name}")
            _soak(
                url=url,
                model=model,
                output=output,
                fmt=fmt,
                shapes_file=shapes_file,
                shape_names=shape_names or [],
                seed=seed,
                request_timeout=request_timeout,
                api_key=api_key,
                soak=soak,
                soak_interval=soak_interval,
            )
            return
        if soak_interval is not None:
            raise UserError("--soak-interval applies to --soak")
        _run(
            url=url,
            model=model,
            output=output,
            fmt=fmt,
            shapes_file=shapes_file,
            shape_names=shape_names or [],
            seed=seed,
            requests=requests,
            duration=duration,
            request_timeout=request_timeout,
            api_key=api_key,
            equivalence=not no_equivalence,
        )


def _run(
    *,
    url: str,
    model: str | None,
    output: Path | None,
    fmt: BenchFormat,
    shapes_file: Path | None,
    shape_names: list[str],
    seed: int,
    requests: int | None,
    duration: float | None,
    request_timeout: float,
    api_key: str | None,
    equivalence: bool,
) -> None:
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.cli.output import write
    from blackwell_doctor.collect.bench import loop
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.render import bench as render
    from blackwell_doctor.ruledata.shapes import ShapeError, load_shapes, select_shapes

    try:
        shapes = select_shapes(load_shapes(shapes_file), shape_names, requests=requests)
        runner.parse_url(url)
    except (ShapeError, runner.UrlError) as exc:
        raise UserError(str(exc)) from None
    config = runner.BenchConfig(
        url=url,
        model=model,
        api_key=api_key or None,
        shapes=shapes,
        seed=seed,
        requests=requests,
        duration_s=duration,
        deadline_s=request_timeout,
        equivalence=equivalence,
    )
    state = runner.RunState()
    interrupted = False
    try:
        with _Display() as display:
            loop.run(runner.run_bench(config, state, display))
    except KeyboardInterrupt:
        interrupted = True
    doc = runner.build_document(state, interrupted=interrupted)
    if output is not None:
        write(render.encode(doc), output)
    if fmt is BenchFormat.JSON:
        if output is None:
            write(render.encode(doc), None)
    else:
        write(render.render_bench(doc, fmt), None)
    if output is not None:
        sys.stderr.write(f"wrote {output} (exit {doc.exit_code})\n")
    raise typer.Exit(doc.exit_code)


def _soak(
    *,
    url: str,
    model: str | None,
    output: Path | None,
    fmt: BenchFormat,
    shapes_file: Path | None,
    shape_names: list[str],
    seed: int,
    request_timeout: float,
    api_key: str | None,
    soak: str,
    soak_interval: str | None,
) -> None:
    from blackwell_doctor.app import bench as runner
    from blackwell_doctor.app import soak as soaking
    from blackwell_doctor.cli.output import write
    from blackwell_doctor.collect.bench import loop
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.render import bench as render
    from blackwell_doctor.ruledata.shapes import ShapeError, load_shapes, select_shapes
    from blackwell_doctor.rules.soak_trend import load_rules

    try:
        duration_s = soaking.parse_duration(soak, option="--soak")
        interval_s = (
            soaking.default_interval(duration_s)
            if soak_interval is None
            else soaking.parse_duration(soak_interval, option="--soak-interval")
        )
        soaking.check_interval(duration_s, interval_s)
        if len(shape_names) > 1:
            raise UserError("--soak holds the load of one shape: give at most one --shape")
        shapes = select_shapes(load_shapes(shapes_file), shape_names or ["concurrent"])
        runner.parse_url(url)
    except (soaking.SoakError, ShapeError, runner.UrlError) as exc:
        raise UserError(str(exc)) from None
    rules = load_rules()
    config = runner.BenchConfig(
        url=url,
        model=model,
        api_key=api_key or None,
        shapes=shapes,
        seed=seed,
        deadline_s=request_timeout,
        equivalence=False,
    )
    state = runner.RunState()
    soak_state = soaking.SoakState(shape=shapes[0], duration_s=duration_s, interval_s=interval_s)
    interrupted = False
    try:
        with _Display() as display:
            display.status = lambda: soaking.live_line(soak_state)
            loop.run(soaking.run_soak(config, state, soak_state, display.message))
    except KeyboardInterrupt:
        interrupted = True
    except MemoryError:  # what was measured is kept, as after Ctrl-C, but as a finding
        state.findings.append(
            f"this machine ran out of memory holding {shapes[0].concurrency} requests of "
            f"~{shapes[0].input_tokens} tokens in flight: the soak stopped"
        )
    doc = soaking.build_document(state, soak_state, rules, interrupted=interrupted)
    if output is not None:
        write(render.encode(doc), output)
    if fmt is BenchFormat.JSON:
        if output is None:
            write(render.encode(doc), None)
    else:
        write(render.render_bench(doc, fmt), None)
    if output is not None:
        sys.stderr.write(f"wrote {output} (exit {doc.exit_code})\n")
    raise typer.Exit(doc.exit_code)


def _compare(
    files: tuple[Path, Path],
    fmt: BenchFormat,
    output: Path | None,
    fail_on_regression: float | None,
    threshold: float,
    resamples: int,
    seed: int,
) -> None:
    from blackwell_doctor.cli.output import write
    from blackwell_doctor.collect.inputfile import BENCH_RUN, read_input
    from blackwell_doctor.facts.errors import UserError
    from blackwell_doctor.render import bench as render
    from blackwell_doctor.report import bench as report
    from blackwell_doctor.rules.compare import NotComparable, compare

    runs = []
    for path in files:
        data = read_input(path, BENCH_RUN, stdin=sys.stdin.buffer)
        try:
            runs.append(report.decode_run(data, source=str(path)))
        except report.RunFileError as exc:
            raise UserError(str(exc)) from None
    try:
        doc = compare(
            runs[0],
            runs[1],
            before_name=str(files[0]),
            after_name=str(files[1]),
            resamples=resamples,
            seed=seed,
            threshold_pct=threshold,
            fail_on_regression_pct=fail_on_regression,
        )
    except NotComparable as exc:
        raise UserError(str(exc)) from None
    if output is not None:
        write(render.encode(doc), output)
    if fmt is BenchFormat.JSON:
        if output is None:
            write(render.encode(doc), None)
    else:
        write(render.render_bench(doc, fmt), None)
    raise typer.Exit(doc.exit_code)
