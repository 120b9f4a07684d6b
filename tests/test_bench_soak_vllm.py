"""`bench --soak` against the real vLLM CPU server that .ci/run starts (tiny Qwen3-MoE, see
test_bench_vllm.py): per-interval figures that add up to what the server itself counted,
KV-cache use sampled from its /metrics, no trend, and Ctrl-C that keeps what was gathered.

30 s in 3 s intervals is enough for what is tested here: 10 intervals, 9 fitted after the
warm-up one (the verdict needs 6), 3 /metrics samples in each. A longer soak would say no
more about the code and cost CI time; the README shows a 60 s one.
"""

from __future__ import annotations

import json
import subprocess
import sys
import urllib.request
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.report.bench import BENCH_SCHEMA_VERSION
from blackwell_doctor.ruledata.resources import schema_text
from tests.child import child
from tests.conftest import skip_without

try:
    import jsonschema
except ModuleNotFoundError as exc:
    skip_without(exc)

pytestmark = pytest.mark.vllm

# Ctrl-C to exit: bench/loop.py's 5 s grace, with room for a loaded 2-core machine.
SIGINT_BOUND_S = 30.0

SHAPE = """
[shape.tiny-soak]
input_tokens = 64
output_tokens = 24
concurrency = 8
warmup = 2
"""


def generation_tokens(url: str) -> float:
    from prometheus_client.parser import text_string_to_metric_families

    with urllib.request.urlopen(f"{url}/metrics", timeout=10) as r:
        text = r.read().decode()
    return sum(
        s.value
        for f in text_string_to_metric_families(text)
        if f.name == "vllm:generation_tokens"
        for s in f.samples
        if s.name.endswith("_total")
    )


def soak_argv(url: str, shapes: Path, out: Path, *extra: str) -> list[str]:
    return [
        sys.executable,
        "-m",
        "blackwell_doctor",
        "bench",
        "--url",
        url,
        "--shapes",
        str(shapes),
        "--shape",
        "tiny-soak",
        "-o",
        str(out),
        *extra,
    ]


def test_a_short_soak_reports_every_interval_and_no_trend(vllm_url: str, tmp_path: Path) -> None:
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPE)
    out = tmp_path / "soak.json"
    before = generation_tokens(vllm_url)
    r = subprocess.run(
        soak_argv(
            vllm_url, shapes, out, "--soak", "30s", "--soak-interval", "3s", "-f", "markdown"
        ),
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert r.returncode == 0, r.stdout + r.stderr
    doc: dict[str, Any] = json.loads(out.read_text())
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)
    assert doc["schema_version"] == BENCH_SCHEMA_VERSION  # 2 brought the soak
    assert doc["shapes"] == []
    soak = doc["soak"]
    assert soak["complete"] is True
    assert soak["duration_s"] == pytest.approx(30.0)
    intervals = soak["intervals"]
    assert [iv["index"] for iv in intervals] == list(range(10))
    for iv in intervals:
        assert iv["partial"] is False
        assert iv["end_s"] - iv["start_s"] == pytest.approx(3.0)
        # ignore_eos: every request generates exactly max_tokens.
        assert iv["output_tokens"] == 24 * iv["completed"]
        assert iv["errors"] == {}
        assert iv["kv_samples"] >= 2  # about one /metrics read a second
        assert 0.0 <= iv["kv_cache_usage_pct"] <= iv["kv_cache_usage_peak_pct"] <= 100.0
        assert iv["preemptions"] == 0
        if iv["completed"]:
            assert iv["output_tokens_per_s"] == pytest.approx(iv["output_tokens"] / 3.0)
            assert 0.0 <= iv["itl_ms"]["p50"] <= iv["itl_ms"]["p99"]
    # Every request counted once: in an interval, or in the drain after the end.
    assert sum(iv["requests"] for iv in intervals) + soak["drain_requests"] == soak["requests"]
    assert soak["completed"] == soak["requests"] > 0
    assert soak["errors"] == {}
    # The server's own counter: every measured request and the 2 warm-up ones.
    assert generation_tokens(vllm_url) - before == 24 * (soak["completed"] + 2)
    assert soak["kv_cache"] == "sampled"
    verdicts = {t["quantity"]: t for t in soak["trends"]}
    assert verdicts["kv_cache_usage_pct"]["verdict"] == "no trend"
    assert verdicts["kv_cache_usage_pct"]["intervals"] == 9  # the warm-up interval not fitted
    assert verdicts["itl_p50_ms"]["verdict"] in ("no trend", "too few intervals")
    if soak["gpu_memory"] == "sampled":  # a machine with a GPU: its memory is no trend either
        assert all(t["verdict"] == "no trend" for q, t in verdicts.items() if q.startswith("gpu"))
    else:
        assert soak["gpu_memory"].startswith("unavailable: ")
        assert verdicts["gpu_memory_used_mib"]["verdict"] == "unavailable"
    assert soak["findings"] == []
    assert doc["exit_code"] == 0
    # The rendering carries the same intervals and verdicts.
    assert "### soak tiny-soak: 30 of 30 s, 10 intervals of 3 s" in r.stdout
    assert r.stdout.count("\n| ") >= 10 + 3
    # Names are Markdown prose there (an underscore escaped: `kv\_cache...` reads the same).
    assert "| kv_cache_usage_pct |" in r.stdout.replace("\\_", "_")
    # One progress line per interval on standard error.
    assert r.stderr.count("soak tiny-soak: interval ") == 10


def test_ctrl_c_ends_a_soak_with_the_intervals_gathered_and_exit_130(
    vllm_slow_url: str, tmp_path: Path
) -> None:
    # The --max-num-seqs 1 server, as bench's own Ctrl-C test: requests cut off here do not
    # touch the main server's counters that other tests compare.
    shapes = tmp_path / "shapes.toml"
    shapes.write_text(SHAPE)
    out = tmp_path / "partial.json"
    argv = soak_argv(vllm_slow_url, shapes, out, "--soak", "1h", "--soak-interval", "2s")
    with child(argv) as proc:
        proc.wait_for_line(lambda line: "soak tiny-soak: interval 3/1800 " in line, deadline_s=240)
        proc.interrupt()
        code, stdout, err = proc.finish(timeout_s=60)
    print(f"soak: exit {code} {proc.exited_after_sigint_s:.2f} s after SIGINT")
    assert code == 130, err
    assert proc.exited_after_sigint_s is not None
    assert proc.exited_after_sigint_s < SIGINT_BOUND_S
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert doc["exit_code"] == 130
    soak = doc["soak"]
    assert soak["complete"] is False
    assert soak["duration_s_requested"] == 3600.0
    assert 6.0 <= soak["duration_s"] < 60.0
    full = [iv for iv in soak["intervals"] if not iv["partial"]]
    assert len(full) >= 3
    assert all(iv["partial"] for iv in soak["intervals"][len(full) :])
    assert sum(iv["requests"] for iv in soak["intervals"]) <= soak["requests"]
    # Too short for a verdict, and it says so rather than guessing.
    assert {t["verdict"] for t in soak["trends"]} <= {"too few intervals", "unavailable"}
    assert "soak tiny-soak:" in stdout
    assert "interrupted: partial result" in stdout
