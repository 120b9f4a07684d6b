"""``bench``: serving performance of an OpenAI-compatible server, and ``bench --compare``.

The flow is :mod:`blackwell_doctor.app.bench_flow` (the measuring, in ``app.bench`` and
``app.soak``, prints nothing); here, its options, the progress display
(:mod:`blackwell_doctor.cli.progress`) and the output."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from blackwell_doctor.cli.basics import EXAMPLES, SUMMARIES, format_option, grouped
from blackwell_doctor.cli.options import (
    BenchRate,
    ShapeOptions,
    bench_option,
    shape_group,
    shape_option,
)
from blackwell_doctor.render.formats import BenchFormat

if TYPE_CHECKING:
    from blackwell_doctor.app.bench_flow import BenchRequest
    from blackwell_doctor.report.bench import BenchRun, CompareDocument
    from blackwell_doctor.report.bench_ladder import LadderDocument


_HELP = """Measure serving performance of an OpenAI-compatible server (vLLM, SGLang,
trtllm-serve, llama.cpp) the way `vllm bench serve` does: TTFT, TPOT, ITL and E2E (mean,
p50/p90/p95/p99), output tokens from the server's usage with reasoning tokens apart, greedy
outputs for equivalence, the server's /metrics beside the client's.

`bench --compare before.json after.json` reports every change with a bootstrap interval
and a verdict, and a scorecard, and what else differs between the runs' pinned
environments. `bench --compare a.json b.json c.json ...` is a ladder: each run against the
one before it and the first against the last, in one table, with what changed at each step.

`bench --rate 1,2,4` sends one shape's requests at each rate (Poisson arrivals by default,
seeded); `bench --rate sweep` finds the range itself (one request at a time, every request
at once, rates between up to the knee where latency leaves its floor). With `--slo
ttft_ms:500,tpot_ms:50` each point has its goodput, and the run its capacity at SLO.

`bench --trace FILE` replays a request trace (Mooncake JSONL, BurstGPT CSV), each request
at its timestamp, prompts sharing the trace's blocks token for token; the document's `trace`
gives each request's send lateness.

`bench --soak 8h` holds one shape's load (default: concurrent) for that long and reports
per interval latency, throughput, the server's KV-cache use and each GPU's used memory,
then whether any of them grows (Theil-Sen slope per hour, thresholds in checks/soak.toml).

Exit codes: 0 every request succeeded (compare: no regression past --fail-on-regression;
soak: nothing grows); 1 some requests failed or the server answered with an error (compare:
a regression; soak: a growing trend); 2 bad input (a --url where nothing answers; compare:
two runs with no shape in common); 130 interrupted (the partial result is written)."""


# The shapes measured and their requests (app/shape_options.py), worded for bench.
_Shapes = Annotated[
    ShapeOptions,
    shape_group(
        shape_option("shapes_file", help="A TOML file of extra shapes ([shape.NAME] tables)."),
        shape_option(
            "shape_names", help="Measure this shape (repeatable; default short, long, concurrent)."
        ),
        shape_option("seed", help="Seed of the synthetic prompts."),
        shape_option("requests", help="Measured requests per shape."),
        (
            "duration_s",
            Annotated[
                float | None,
                typer.Option(
                    "--duration",
                    metavar="SECONDS",
                    min=0.1,
                    help="Per shape: send no new request after S seconds.",
                ),
            ],
            None,
        ),
        shape_option(
            "request_timeout_s",
            help="Deadline of each request in seconds; past it the request is 'stalled'.",
        ),
    ),
]


def register(app: typer.Typer) -> None:
    """Add ``bench`` to ``app``."""

    @app.command("bench", help=_HELP, short_help=SUMMARIES["bench"], epilog=EXAMPLES["bench"])
    @grouped
    def bench(
        *,
        url: Annotated[
            str | None,
            typer.Option(
                "--url", metavar="URL", help="The server's base URL, e.g. http://127.0.0.1:8000."
            ),
        ] = None,
        model: Annotated[
            str | None,
            typer.Option(
                "--model", metavar="NAME", help="Model name (default: the one /v1/models lists)."
            ),
        ] = None,
        output: Annotated[
            Path | None,
            typer.Option(
                "--output", "-o", help="Write the JSON run document (for --compare) here."
            ),
        ] = None,
        fmt: Annotated[BenchFormat, format_option("Output format on stdout.")] = BenchFormat.RICH,
        shape_options: _Shapes,
        api_key: Annotated[
            str | None,
            typer.Option(
                "--api-key",
                metavar="KEY",
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
                help="Compare two run documents: BEFORE AFTER; more run files after them "
                "make a ladder (each against the one before, and the first against the last).",
                metavar="BEFORE AFTER",
            ),
        ] = None,
        more_runs: Annotated[
            list[Path] | None,
            typer.Argument(
                help="With --compare BEFORE AFTER: the ladder's further runs, in order.",
                metavar="[MORE]...",
                show_default=False,
            ),
        ] = None,
        facts: Annotated[
            Path | None,
            typer.Option(
                "--facts",
                help="The serving host's facts (collect -o FILE on that host): its GPUs, "
                "driver, CUDA and environment variables are pinned in the run document.",
            ),
        ] = None,
        fail_on_regression: Annotated[
            float | None,
            typer.Option(
                "--fail-on-regression",
                metavar="PCT",
                min=0.0,
                help="With --compare: exit 1 when a metric is significantly worse by more "
                "than PCT percent, outputs drifted, or more requests failed.",
            ),
        ] = None,
        threshold: Annotated[
            float,
            typer.Option(
                "--threshold",
                metavar="PCT",
                min=0.0,
                help="With --compare: smallest change in percent called better or worse.",
            ),
        ] = 5.0,
        resamples: Annotated[
            int,
            typer.Option(
                "--resamples",
                metavar="N",
                min=100,
                max=100_000,
                help="With --compare: bootstrap resamples.",
            ),
        ] = 2000,
        repeat: Annotated[
            int,
            bench_option(
                "--repeat",
                help="Measure each server N times (taking turns with --compare-urls); the "
                "document keeps every run and their noise floor (A/A calibration).",
            ),
        ] = 1,
        compare_urls: Annotated[
            tuple[str, str] | None,
            typer.Option(
                "--compare-urls",
                help="Measure two servers in turns (A B A B ... with --repeat) and compare "
                "them (A before, B after); -o writes the comparison, and each run beside it.",
                metavar="A B",
            ),
        ] = None,
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
        rate_options: BenchRate,
        sweep_points: Annotated[
            int | None,
            typer.Option(
                "--sweep-points",
                metavar="N",
                min=1,
                max=100,
                help="With --rate sweep: the rates placed between one at a time and all at "
                "once (default 6).",
                show_default=False,
            ),
        ] = None,
        trace: Annotated[
            Path | None,
            typer.Option(
                "--trace",
                metavar="FILE",
                help="Replay a request trace, each request at its timestamp: Mooncake's JSON "
                "Lines (timestamp ms, input_length, output_length, hash_ids: shared prompt "
                "blocks) or BurstGPT's CSV.",
            ),
        ] = None,
        trace_format: Annotated[
            str,
            typer.Option(
                "--trace-format",
                metavar="auto|mooncake|burstgpt",
                help="With --trace: the file's format (auto: told from its first line).",
            ),
        ] = "auto",
        time_scale: Annotated[
            float,
            typer.Option(
                "--time-scale",
                metavar="FACTOR",
                help="With --trace: send each request at its timestamp times this "
                "(0.5: twice as fast).",
            ),
        ] = 1.0,
        trace_block_tokens: Annotated[
            int,
            typer.Option(
                "--trace-block-tokens",
                metavar="N",
                min=1,
                max=1_000_000,
                help="With --trace: the prompt tokens each Mooncake hash id stands for.",
            ),
        ] = 512,
        client_processes: Annotated[
            int | None,
            typer.Option(
                "--client-processes",
                min=1,
                max=64,
                metavar="N",
                help="Client processes that send the requests, each with its own event loop "
                "(default: one per 256 users of a shape, one per 200 requests in the busiest "
                "second of a --rate point or a --trace, at most one per CPU but one).",
                show_default=False,
            ),
        ] = None,
        multi_turn: Annotated[
            int,
            typer.Option(
                "--multi-turn",
                min=1,
                max=1000,
                metavar="N",
                help="Each user holds conversations of N turns: every turn's prompt carries "
                "the earlier turns and the server's answers (its prefix cache at work).",
            ),
        ] = 1,
        example: Annotated[
            str | None,
            typer.Option(
                "--example",
                metavar="NAME",
                help="Compare a shipped example's before and after runs (real captured "
                "runs, as --compare BEFORE AFTER); with --url, replay its request trace. "
                "`blackwell-doctor examples` lists them.",
            ),
        ] = None,
    ) -> None:
        from blackwell_doctor.app import bench_flow as flow
        from blackwell_doctor.facts.errors import UserError

        labels: tuple[str, str] | None = None
        if example is not None:
            from blackwell_doctor.app.examples import replace_options

            if url is not None and _has_trace(example):
                part = "trace"  # --example NAME --url URL: replay its trace against URL
            elif soak is None and _has_part(example, "soak"):
                # An example that is one run (a soak): shown as bench showed it when it ran
                # (issue 40: soak-60s could be shown by no command).
                part = "soak"
            else:
                part = "compare"
            command, refused = _EXAMPLE_PARTS[part]
            given = {
                "trace": trace,
                "compare": compare,
                "url": url,
                "compare_urls": compare_urls,
                "soak": soak,
            }
            ex = replace_options(example, given, part=part, command=command, conflicting=refused)
            if part == "trace":
                trace = ex.trace
            elif part == "soak":
                assert ex.soak is not None
                shown = flow.read_run(ex.soak, stdin=sys.stdin.buffer)
                _write_document(shown, fmt, output)
                raise typer.Exit(shown.exit_code)
            else:
                compare = ex.compare
                labels = (f"example {ex.name} (before)", f"example {ex.name} (after)")

        if more_runs and compare is None:
            raise UserError("the run files after the options are --compare's: give --compare")
        request = flow.BenchRequest(
            url=url,
            model=model,
            api_key=api_key,
            shape_options=shape_options,
            equivalence=not no_equivalence,
            soak=soak,
            soak_interval=soak_interval,
            compare=None if compare is None else (*compare, *(more_runs or ())),
            compare_labels=labels,
            facts_file=facts,
            fail_on_regression_pct=fail_on_regression,
            threshold_pct=threshold,
            resamples=resamples,
            repeat=repeat,
            compare_urls=compare_urls,
            rate_options=rate_options,
            sweep_points=sweep_points,
            trace=trace,
            trace_format=trace_format,
            time_scale=time_scale,
            trace_block_tokens=trace_block_tokens,
            client_processes=client_processes,
            multi_turn=multi_turn,
        )
        if compare_urls is not None:
            _compare_urls(request, fmt, output)
        if compare is not None:
            doc = flow.compare(request, stdin=sys.stdin.buffer)
            _write_document(doc, fmt, output)
            raise typer.Exit(doc.exit_code)
        from blackwell_doctor.cli.progress import BenchDisplay

        run = flow.run(flow.plan(request), BenchDisplay())
        _write_document(run, fmt, output)
        if output is not None:
            sys.stderr.write(f"wrote {output} (exit {run.exit_code})\n")
        raise typer.Exit(run.exit_code)


# bench --example NAME uses one part of the example (its trace, its one run, or its two
# runs to compare): the command that part is for, and the options it replaces, which are
# refused beside it.
_EXAMPLE_PARTS = {
    "trace": ("bench --url", ("--trace", "--compare", "--compare-urls", "--soak")),
    "soak": ("bench", ("--compare", "--url", "--compare-urls")),
    "compare": ("bench", ("--compare", "--url", "--compare-urls", "--soak")),
}


def _has_trace(example: str) -> bool:
    return _has_part(example, "trace")


def _has_part(example: str, part: str) -> bool:
    from blackwell_doctor.app.examples import has_part

    return has_part(example, part)


def _compare_urls(request: BenchRequest, fmt: BenchFormat, output: Path | None) -> None:
    """``--compare-urls A B``: the comparison on standard output (and ``-o``), each server's
    run document beside ``-o`` (OUT.before.json, OUT.after.json)."""
    from blackwell_doctor.app import bench_flow as flow
    from blackwell_doctor.cli.output import write
    from blackwell_doctor.cli.progress import BenchDisplay
    from blackwell_doctor.render.bench import encode_parts
    from blackwell_doctor.report.exitcodes import ExitCode

    before, after, doc = flow.compare_urls(request, BenchDisplay())
    if output is not None:
        for run, side in ((before, "before"), (after, "after")):
            path = output.with_name(f"{output.stem}.{side}.json")
            write(encode_parts(run), path)
            sys.stderr.write(f"wrote {path}\n")
    _write_document(doc, fmt, output)
    if before.interrupted or after.interrupted:
        raise typer.Exit(int(ExitCode.INTERRUPTED))
    raise typer.Exit(doc.exit_code)


def _write_document(
    doc: BenchRun | CompareDocument | LadderDocument, fmt: BenchFormat, output: Path | None
) -> None:
    """The JSON document to ``output`` when given; on standard output, the document in
    ``fmt`` (through its one dispatcher), except JSON already written to ``output``."""
    from blackwell_doctor.cli.output import terminal_width, write
    from blackwell_doctor.render.bench import encode_parts, render_bench

    if output is not None:
        write(encode_parts(doc), output)
        if fmt is BenchFormat.JSON:
            return
    if fmt is BenchFormat.JSON:
        write(encode_parts(doc), None)
        return
    write(render_bench(doc, fmt, width=terminal_width(None)), None)
