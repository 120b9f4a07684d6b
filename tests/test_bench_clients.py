"""Client processes (app/clients.py) for a shape's fixed concurrency and for ``--rate``: the
same requests as one process sends, each sent and measured once, each open-loop request
with its send lateness. (A replay's are tests/test_bench_trace.py's.)"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from tests.conftest import skip_without

try:
    from tests.benchfake import Fake, fake  # noqa: F401 (fake: a fixture)
except ModuleNotFoundError as exc:
    skip_without(exc)

SHAPES = """
[shape.wide]
input_tokens = 12
output_tokens = 3
concurrency = 6
requests = 30
warmup = 0
"""


def bench(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> dict[str, Any]:
    shapes = tmp_path / "s.toml"
    shapes.write_text(SHAPES)
    fake.chats.clear()
    argv = ["bench", "--url", fake.url, "--shapes", str(shapes), "--shape", "wide"]
    code = main([*argv, "--no-equivalence", "-f", "json", *extra])
    captured = capsys.readouterr()
    assert code == 0, captured.err
    assert "Traceback" not in captured.err
    doc: dict[str, Any] = json.loads(captured.out)
    return doc


def prompts(fake: Fake) -> list[str]:
    return sorted(c["messages"][0]["content"] for c in fake.chats)


def test_a_shape_from_client_processes_sends_the_requests_one_process_sends(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    one = bench(fake, tmp_path, capsys, "--client-processes", "1")
    alone = prompts(fake)
    three = bench(fake, tmp_path, capsys, "--client-processes", "3")
    # The same 30 prompts (each built from the shape's name and its index), each sent once.
    assert prompts(fake) == alone
    assert len(set(alone)) == 30
    for doc, notes in ((one, []), (three, ["sent by 3 client processes"])):
        (shape,) = doc["shapes"]
        assert (shape["requests"], shape["completed"], shape["concurrency"]) == (30, 30, 6)
        assert [n for n in shape["notes"] if n.startswith("sent by")] == notes
        assert shape["metrics"]["output_tokens"] == 90
        assert shape["metrics"]["server_generation_tokens"] == 90
        assert all(s["start_ms"] >= 0 for s in shape["samples"])


def test_a_rate_from_client_processes_keeps_each_requests_lateness(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    doc = bench(fake, tmp_path, capsys, "--rate", "60", "--arrival", "constant")
    alone = prompts(fake)
    doc2 = bench(
        fake, tmp_path, capsys, "--rate", "60", "--arrival", "constant", "--client-processes", "2"
    )
    assert prompts(fake) == alone
    for run in (doc, doc2):
        (point,) = run["sweep"]["points"]
        (shape,) = run["shapes"]
        assert (point["requests"], point["completed"]) == (30, 30)
        assert point["send_lateness_ms"]["p50"] >= 0
        assert 1 <= point["peak_in_flight"] <= 30
        # Request i is due (i + 1) / 60 s after the start: none left before its time.
        starts = sorted(s["start_ms"] for s in shape["samples"])
        assert all(t >= 1000.0 * (i + 1) / 60 - 1.0 for i, t in enumerate(starts))
    assert "sent by 2 client processes" in doc2["shapes"][0]["notes"]


@pytest.mark.parametrize(
    ("extra", "word"),
    [
        (["--soak", "10s"], "--soak"),
        (["--multi-turn", "2"], "--multi-turn"),
    ],
)
def test_client_processes_refuse_what_they_cannot_share(
    extra: list[str], word: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", "http://127.0.0.1:9", "--client-processes", "2", *extra])
    err = capsys.readouterr().err
    assert code == 2
    assert f"does not go with {word}" in err
    assert err.count("\n") == 1
