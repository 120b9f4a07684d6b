"""The serving checks on a run of the real vLLM CPU server (.ci/run's "main" server: tiny
random Qwen3-MoE, qwen3 reasoning parser): bench, then check --bench, then collect --bench
and check --facts on the stored figures, which must judge the same."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

pytestmark = pytest.mark.vllm

SHAPES = """
[shape.one-user]
input_tokens = 64
output_tokens = 32
requests = 6
[shape.four-users]
input_tokens = 64
output_tokens = 32
concurrency = 4
requests = 8
"""


def cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *args],
        capture_output=True,
        text=True,
        timeout=300,
        check=False,
    )


def serving(doc: dict[str, Any]) -> dict[str, tuple[str, str]]:
    return {r["id"]: (r["status"], r["summary"]) for r in doc["results"]}


def test_a_real_run_is_judged_and_replayed_from_the_facts(vllm_url: str, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPES)
    run = tmp_path / "run.json"
    r = cli("bench", "--url", vllm_url, "--shapes", str(shapes), "--shape", "one-user",
            "--shape", "four-users", "--no-equivalence", "-o", str(run))  # fmt: skip
    assert r.returncode == 0, r.stderr
    live = cli("check", "--no-probe", "--bench", str(run), "--select", "serving", "-f", "json")
    assert live.returncode in (0, 1), live.stderr
    judged = serving(json.loads(live.stdout))
    assert judged["serving.errors"] == ("pass", "all 14 requests of 2 shapes succeeded")
    # Every token of the tiny model's answers is counted by the server; the reasoning
    # parser splits thinking out, and the summary gives the answer rate apart.
    status, summary = judged["serving.reasoning_accounting"]
    assert status == "pass"
    doc = json.loads(run.read_text())
    for shape in doc["shapes"]:
        m = shape["metrics"]
        if m["reasoning_tokens"]:
            assert f"{m['reasoning_tokens']:,} of {m['output_tokens']:,} output tokens" in summary
    # No expectation covers tiny-moe (and this machine may have no GPU at all).
    assert judged["serving.throughput"][0] == "skip"
    assert judged["serving.latency_tail"][0] in ("pass", "warn", "skip")

    facts = tmp_path / "facts.json"
    c = cli("collect", "--no-probe", "--bench", str(run), "-o", str(facts))
    assert c.returncode == 0, c.stderr
    stored = json.loads(facts.read_text())["bench"]
    assert stored["model"] == "tiny-moe"
    assert [s["name"] for s in stored["shapes"]] == ["one-user", "four-users"]
    replay = cli("check", "--facts", str(facts), "--select", "serving", "-f", "json")
    assert serving(json.loads(replay.stdout)) == judged
