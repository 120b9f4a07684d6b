"""``bench --repeat N`` and ``bench --compare-urls A B`` against in-process fake servers
(issue 21): the runs are kept, take turns between two servers, and carry their noise
floor; the options that do not go together are exit 2."""

from __future__ import annotations

import itertools
import json
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.ruledata.resources import schema_text
from tests.conftest import skip_without

try:
    import jsonschema
    from aiohttp import web

    from tests import hostile_http as h
except ModuleNotFoundError as exc:
    skip_without(exc)


@pytest.fixture
def shapes(tmp_path: Path) -> Path:
    path = tmp_path / "s.toml"
    path.write_text("[shape.one]\ninput_tokens = 8\noutput_tokens = 7\nrequests = 4\nwarmup = 1\n")
    return path


def _args(shapes: Path, *extra: str) -> list[str]:
    return [
        "bench",
        "--shapes",
        str(shapes),
        "--shape",
        "one",
        "--no-equivalence",
        "--request-timeout",
        "20",
        *extra,
    ]


def _validate(doc: dict[str, Any], schema: str) -> None:
    jsonschema.Draft202012Validator(json.loads(schema_text(schema))).validate(doc)


def _logging(name: str, log: list[str]) -> h.Handler:
    good = h.good_stream()

    async def handler(request: web.Request) -> web.StreamResponse:
        log.append(name)
        return await good(request)

    return handler


def test_repeat_keeps_every_run_and_their_noise_floor(
    capsys: pytest.CaptureFixture[str], shapes: Path
) -> None:
    log: list[str] = []
    with h.serving({("POST", "/v1/chat/completions"): _logging("a", log)}) as url:
        code = main(_args(shapes, "--url", url, "--repeat", "3", "-f", "json"))
    out = capsys.readouterr()
    assert code == 0, out.err
    doc = json.loads(out.out)
    _validate(doc, "bench.schema.json")
    assert doc["schema_version"] == 6  # 3 brought repeats, 4 the environment, 5 sweeps, 6 trace
    assert [r["index"] for r in doc["repeats"]] == [2, 3]
    assert all(len(r["shapes"][0]["samples"]) == 4 for r in doc["repeats"])
    cal = doc["calibration"]
    assert cal["runs"] == 3
    assert cal["interleaved_with"] is None
    floors = {f["metric"]: f for f in cal["floors"]}
    assert len(floors["ttft_ms.p50"]["values"]) == 3
    assert floors["ttft_ms.p50"]["floor_pct"] is not None
    assert log.count("a") == 15  # 3 runs of 1 warm-up and 4 measured requests
    assert [line for line in out.err.splitlines() if line.startswith("bench run")] == [
        "bench run 1/3",
        "bench run 2/3",
        "bench run 3/3",
    ]


def test_compare_urls_takes_turns_and_compares_with_the_runs(
    capsys: pytest.CaptureFixture[str], shapes: Path, tmp_path: Path
) -> None:
    log: list[str] = []
    out_path = tmp_path / "ab.json"
    with (
        h.serving({("POST", "/v1/chat/completions"): _logging("a", log)}) as a,
        h.serving({("POST", "/v1/chat/completions"): _logging("b", log)}) as b,
    ):
        code = main(
            _args(
                shapes,
                "--compare-urls",
                a,
                b,
                "--repeat",
                "2",
                "--fail-on-regression",
                "1000",
                "-o",
                str(out_path),
            )
        )
    out = capsys.readouterr()
    assert code == 0, out.out + out.err
    # A B A B: each run's requests together, the servers in turns.
    assert [k for k, _ in itertools.groupby(log)] == ["a", "b", "a", "b"]
    doc = json.loads(out_path.read_text())
    _validate(doc, "bench-compare.schema.json")
    assert doc["runs"] == {"before": 2, "after": 2}
    assert doc["between_run_noise"].startswith("measured: 2 runs before, 2 after")
    assert doc["noise_floor_source"] == "measured"
    before = json.loads((tmp_path / "ab.before.json").read_text())
    after = json.loads((tmp_path / "ab.after.json").read_text())
    assert before["calibration"]["interleaved_with"] == b
    assert after["calibration"]["interleaved_with"] == a
    assert "resamples by run, then by request" in out.out


@pytest.mark.parametrize(
    ("extra", "message"),
    [
        (["--url", "http://127.0.0.1:9", "--repeat", "2", "--soak", "60s"], "--repeat"),
        (["--compare", "a.json", "b.json", "--repeat", "2"], "--repeat"),
        (
            ["--compare-urls", "http://127.0.0.1:9", "http://127.0.0.1:9", "--url", "x"],
            "--url",
        ),
        (["--url", "http://127.0.0.1:9", "--repeat", "0"], "--repeat"),
        (["--url", "http://127.0.0.1:9", "--fail-on-regression", "5"], "--compare-urls"),
    ],
)
def test_options_that_do_not_go_together_are_exit_2(
    capsys: pytest.CaptureFixture[str], shapes: Path, extra: list[str], message: str
) -> None:
    assert main(_args(shapes, *extra)) == 2
    assert message in capsys.readouterr().err


def test_apply_verify_benches_each_side_repeat_times(shapes: Path) -> None:
    from blackwell_doctor.app import verify
    from blackwell_doctor.app.bench_flow import load_shapes
    from blackwell_doctor.ruledata.shapes import select_shapes

    lines: list[str] = []
    settings = verify.VerifySettings(
        shapes=select_shapes(load_shapes(shapes), ["one"]), request_timeout_s=20.0, repeat=3
    )
    log: list[str] = []
    with h.serving({("POST", "/v1/chat/completions"): _logging("a", log)}) as url:
        doc, interrupted = verify.bench(url, settings, say=lines.append, label="baseline")
    assert not interrupted
    assert len(doc.repeats) == 2
    assert doc.calibration is not None
    assert doc.calibration.runs == 3
    assert [line.split(":")[0] for line in lines if "shapes one" in line] == [
        "bench baseline (run 1 of 3)",
        "bench baseline (run 2 of 3)",
        "bench baseline (run 3 of 3)",
    ]


def test_compare_of_runs_that_could_not_take_turns_keeps_the_whole_floor() -> None:
    from blackwell_doctor.rules.compare import compare
    from tests.test_bench_noise import A_AGAIN, A_LEVELS, _doc

    before, after = _doc(A_LEVELS, 1), _doc(A_AGAIN, 2)
    turns = compare(before, after, before_name="b", after_name="a", resamples=200)
    apart = compare(
        before, after, before_name="b", after_name="a", resamples=200, interleaved=False
    )
    floor = {c.metric: c.noise_floor_pct for c in turns.comparisons}
    whole = {c.metric: c.noise_floor_pct for c in apart.comparisons}
    assert whole["itl_ms.p50"] == pytest.approx(floor["itl_ms.p50"] / (1 / 3) ** 0.5)
    assert "could not take turns" in apart.between_run_noise


def test_apply_repeat_without_verify_is_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["apply", "--repeat", "2"]) == 2
    assert "--repeat applies to --verify" in capsys.readouterr().err
