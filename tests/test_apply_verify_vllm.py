"""`apply --verify` end to end: real vLLM INSIDE the private Docker engine (markers `docker`
and `vllm`).

The image is ci/vllm-docker-image.sh's: a ~35 kB rootfs of mount points; the test catalogue
below bind-mounts READ-ONLY the host's /usr, the Python the CPU venv was made from and the
venv itself (ci/vllm-cpu-server.sh's cache), and apply mounts the tiny random Qwen3-MoE
read-only at /model. Port published on 127.0.0.1 only; one vLLM container runs at a time
(apply stops the old one before it starts the new one).

The three cases share one baseline container, in order (the module holds the state):
1. a change that keeps performance (another runtime id, the same server: a new, empty JIT
   cache volume, so the warm start is cold then warm) is kept: exit 0;
2. a clearly slower change (--max-num-seqs 1) is rolled back by itself: exit 5, the
   previous container serving again;
3. Ctrl-C (a real SIGINT to a real `blackwell-doctor` process) during the after-bench
   leaves the previous container running: exit 130;
4. at request rates (--rate --slo, issue 35) the gate is the capacity at SLO: the change
   (--max-num-seqs 1) is kept or rolled back by what the two sweeps measured, and the
   record, the compare, the exit code and the engine's containers all say the same.
"""

from __future__ import annotations

import contextlib
import json
import os
import socket
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.app.verify import first_token
from blackwell_doctor.apply import docker as ap
from tests.child import child
from tests.conftest import FACTS_FIXTURES, require_component

pytestmark = [pytest.mark.docker, pytest.mark.vllm]

VLLM_HOME_ENV = "BLACKWELL_DOCTOR_TEST_VLLM_HOME"
IMAGE = "bd-vllm:latest"
FACTS = FACTS_FIXTURES / "sm120-driver580.json"
SHAPES = """
[shape.concurrent]
input_tokens = 48
output_tokens = 24
concurrency = 16
requests = 32
warmup = 4
[shape.queued]
input_tokens = 16
output_tokens = 128
concurrency = 32
requests = 32
warmup = 2
[shape.paced]
input_tokens = 16
output_tokens = 48
requests = 16
warmup = 1
[shape.burst]
input_tokens = 16
output_tokens = 48
concurrency = 16
requests = 16
warmup = 1
[shape.alone]
input_tokens = 16
output_tokens = 48
concurrency = 1
requests = 3
warmup = 1
"""
# The change that keeps performance and the one that does not: two runtimes of one server.
SLOW = ["--max-num-seqs", "1"]
# The gate on this machine: TTFT p50 and output tokens/s of the shape verified, at 50%.
# The default metrics (ITL p50 and tokens/s) are the unit tests' (test_apply_gate.py); here
# ITL p50 cannot be: vLLM's CPU build streams most tokens in bursts, so it is a burst's gap
# or a step's, and two runs of one unchanged server measured 0.014 ms and 10.2 ms. The 2
# cores are shared with other CI jobs (load averages of 10 and more): two runs of one server
# measured tokens/s -30% (interval [-37.7%, -22.5%]) and TTFT p50 +91% ([+28.5%, +147.6%]).
# --max-num-seqs 1 queues the users, so TTFT is what it hurts whatever the load (+117%
# [+77%, +218%] on a saturated machine, +1024% otherwise); its tokens/s cost shrinks when the
# CPU is saturated (-29% then, -70% to -90% otherwise). 16 users make the queue longer.
GATE_ARGS = ["--gate-metric", "ttft_ms.p50", "--gate-metric", "output_tokens_per_s"]
MAX_REGRESSION = "50"
# At request rates (the shape `paced`: 16 requests a rate, sent at constant intervals) the
# gate holds the capacity at SLO. Which way it goes is the machine's: twice a fixed outcome
# was tried and taken out (4ff092a: an absolute TTFT SLO of 2.5 s that the baseline itself
# missed at load 12-22; 8a0cef5: an SLO calibrated from the baseline's burst just before,
# which held at low load, but under CI's load the baseline's own 16 requests at 50/s waited
# 3.6 s for a first token where its burst had waited 394 ms, and the change was kept). So
# the SLO is calibrated as in 8cfb90d (3 x max(B, T): B the TTFT p90 of 16 requests at once,
# T one answer alone), under which a quiet machine rolls the change back, and the test holds
# the decision to what was measured, whichever it is: the gate row is the two capacities of
# compare.json, its verdict follows from them by the gate's stated rule, and the exit code,
# the record and the containers follow the verdict.
RATES = "1,50"
RATE_SHAPE = "paced"
CALIBRATION = 3.0


def _catalogue(home: Path, runtime_id: str, extra: list[str]) -> str:
    python_home = ""
    for line in (home / "venv" / "pyvenv.cfg").read_text().splitlines():
        key, _, value = line.partition("=")
        if key.strip() == "home":
            python_home = str(Path(value.strip()).parent)  # .../bin -> the prefix
    mounts = list(dict.fromkeys(["/usr", python_home, str(home)]))
    command = [
        "serve",
        "{model}",
        "--host",
        "0.0.0.0",
        "--port",
        "{port}",
        "--served-model-name",
        "tiny-moe",
        "--max-model-len",
        "2048",
        "--dtype",
        "bfloat16",
        "--enforce-eager",
        *extra,
    ]
    return f"""
schema_version = 1
[[runtime]]
id = "{runtime_id}"
title = "vLLM CPU (tests)"
preference = 1
image = "{IMAGE}"
entrypoint = {json.dumps([str(home / "venv/bin/python"), str(home / "vllm_cli.py")])}
command = {json.dumps(command)}
container_port = 8000
jit_cache = "/jit"
host_mounts = {json.dumps(mounts)}
shm_size = "1g"
source = "tests"
effect = "serves the tiny model"
confidence = "test"
[runtime.env]
VLLM_CPU_KVCACHE_SPACE = "1"
VLLM_CACHE_ROOT = "/jit"
HF_HUB_OFFLINE = "1"
OMP_NUM_THREADS = "2"
"""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class Case:
    """The shared state of the module: engine, names, files."""

    def __init__(self, docker_host: str, home: Path, root: Path) -> None:
        self.docker_host = docker_host
        self.home = home
        self.root = root
        self.name = f"bdverify-{uuid.uuid4().hex[:8]}"
        self.port = _free_port()
        self.url = f"http://127.0.0.1:{self.port}"
        self.runtimes = [f"{self.name}-a", f"{self.name}-b"]
        (root / "shapes.toml").write_text(SHAPES)

    def catalogue(self, runtime_id: str, extra: list[str]) -> Path:
        path = self.root / f"{runtime_id}{'-slow' if extra else ''}.toml"
        path.write_text(_catalogue(self.home, runtime_id, extra))
        return path

    def argv(self, runtime_id: str, extra: list[str], *more: str) -> list[str]:
        return [
            sys.executable,
            "-m",
            "blackwell_doctor",
            "apply",
            "--facts",
            str(FACTS),
            "--facts-from-another-host",
            "--catalogue",
            str(self.catalogue(runtime_id, extra)),
            "--model-dir",
            str(self.home / "tinymoe"),
            "--name",
            self.name,
            "--port",
            str(self.port),
            "--env",
            "OMP_NUM_THREADS=2",
            "--health-timeout",
            "420",
            "--stop-timeout",
            "10",
            "--yes",
            *more,
        ]

    def verify_args(self, tag: str, shape: str = "concurrent") -> list[str]:
        return [
            "--verify",
            "--shapes",
            str(self.root / "shapes.toml"),
            "--shape",
            shape,
            "--max-regression",
            MAX_REGRESSION,
            *(arg if arg == "--gate-metric" else f"{shape}:{arg}" for arg in GATE_ARGS),
            "--record-dir",
            str(self.root / f"records-{tag}"),
            "--report-md",
            str(self.root / f"{tag}.md"),
        ]

    def rate_args(self, tag: str, slo_ms: float) -> list[str]:
        """--verify at RATES with its SLO: the gate is the capacity at SLO (the default)."""
        return [
            "--verify",
            "--shapes",
            str(self.root / "shapes.toml"),
            "--shape",
            RATE_SHAPE,
            "--rate",
            RATES,
            "--arrival",
            "constant",
            "--slo",
            f"ttft_ms:{slo_ms:.0f}",
            "--no-warm-start",
            "--record-dir",
            str(self.root / f"records-{tag}"),
            "--report-md",
            str(self.root / f"{tag}.md"),
        ]

    def calibrate(self) -> tuple[float, float, float]:
        """(B, T, SLO) in ms, measured on the serving baseline now (see CALIBRATION)."""
        out = self.root / "calibration.json"
        argv = [sys.executable, "-m", "blackwell_doctor", "bench", "--url", self.url]
        argv += ["--shapes", str(self.root / "shapes.toml"), "--shape", "burst"]
        argv += ["--shape", "alone", "--no-equivalence", "--output", str(out)]
        done = self.run([*argv, "--format", "json"], timeout=600)
        assert out.is_file(), done.stderr[-3000:]
        shapes = {s["name"]: s for s in json.loads(out.read_text())["shapes"]}
        assert set(shapes) == {"burst", "alone"}, done.stderr[-3000:]
        assert shapes["burst"]["completed"] == 16, done.stderr[-3000:]
        assert shapes["alone"]["completed"] == 3, done.stderr[-3000:]
        burst = float(shapes["burst"]["metrics"]["ttft_ms"]["p90"])
        alone = float(shapes["alone"]["metrics"]["e2e_ms"]["p50"])
        return burst, alone, CALIBRATION * max(burst, alone)

    def env(self) -> dict[str, str]:
        return {**os.environ, "DOCKER_HOST": self.docker_host}

    def run(self, argv: list[str], timeout: float = 900) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            argv, capture_output=True, text=True, timeout=timeout, env=self.env(), check=False
        )

    def record(self, tag: str) -> tuple[Path, dict[str, Any]]:
        [where] = (self.root / f"records-{tag}").iterdir()
        return where, json.loads((where / "verify.json").read_text())


@pytest.fixture(scope="module")
def case(docker_host: str, tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[Case, Any]]:
    home = os.environ.get(VLLM_HOME_ENV)
    if not home:
        require_component(f"no vLLM CPU install ({VLLM_HOME_ENV} unset; see .ci/run)")
    os.environ["DOCKER_HOST"] = docker_host
    client = ap.connect()
    try:
        client.images.get(IMAGE)
    except Exception:
        require_component(f"no {IMAGE} in the test engine (see ci/vllm-docker-image.sh)")
    c = Case(docker_host, Path(home), tmp_path_factory.mktemp("verify"))
    # The baseline: runtime "a", applied without verification.
    done = c.run(c.argv(c.runtimes[0], []))
    assert done.returncode == 0, done.stderr[-3000:]
    yield c, client
    for suffix in ("", ap.PREVIOUS_SUFFIX, ap.NEXT_SUFFIX, ap.ROLLED_BACK_SUFFIX):
        with contextlib.suppress(Exception):
            client.containers.get(c.name + suffix).remove(force=True)
    for runtime_id in c.runtimes:
        with contextlib.suppress(Exception):
            client.volumes.get(f"blackwell-doctor-jit-{runtime_id}").remove(force=True)


def _serving(url: str) -> float:
    # A restarted container loads for 40-130 s on the busy 2-core CI machine.
    return first_token(url, since=time.perf_counter(), deadline_s=300)


def test_a_change_that_keeps_performance_is_kept(case: tuple[Case, Any]) -> None:
    c, client = case
    before = client.containers.get(c.name)
    # Three runs a side (issue 21): with one, two runs of one server failed this gate (TTFT
    # p50 "at least 103.6% worse", a CI run) as often as 7 in 30 A/A gates replayed from
    # this host's real vLLM runs; with three and the two-stage bootstrap, 0 in 10.
    done = c.run(c.argv(c.runtimes[1], [], *c.verify_args("kept"), "--repeat", "3"))
    sys.stderr.write(done.stdout + done.stderr)
    assert done.returncode == 0, done.stderr[-3000:]
    now = client.containers.get(c.name)
    assert now.id != before.id
    assert now.status == "running"
    assert now.labels["io.github.blackwell-doctor.runtime"] == c.runtimes[1]
    assert _serving(c.url) > 0
    where, record = c.record("kept")
    assert record["outcome"] == "kept"
    assert record["gate"]["holds"] is True
    gated = {(r["shape"], r["metric"]) for r in record["gate"]["rows"]}
    assert gated == {("concurrent", "ttft_ms.p50"), ("concurrent", "output_tokens_per_s")}
    for row in record["gate"]["rows"]:
        assert row["ci_low_pct"] <= row["change_pct"] <= row["ci_high_pct"]
    for name in ("baseline.json", "after.json", "compare.json"):
        assert json.loads((where / name).read_text())["schema_version"] >= 1
    for name in ("baseline.json", "after.json"):
        assert len(json.loads((where / name).read_text())["repeats"]) == 2
    assert any("cannot take turns" in n for n in record["gate"]["notes"])
    # A new runtime id: a new JIT cache volume, so the first start is cold, then warm.
    warm = record["warm_start"]
    assert warm["first_start_kind"] == "cold"
    assert warm["jit_cache_volume"] == f"blackwell-doctor-jit-{c.runtimes[1]}"
    assert warm["first_start_s"] > 1
    assert warm["restart_s"] > 1
    ticket = (c.root / "kept.md").read_text()
    assert "**Verdict: KEPT" in ticket
    assert "| concurrent | output_tokens_per_s |" in ticket
    assert "first start (cold)" in ticket
    assert "KEPT" in done.stdout


def test_a_clearly_slower_change_is_rolled_back_by_itself(case: tuple[Case, Any]) -> None:
    c, client = case
    before = client.containers.get(c.name)
    assert before.status == "running"
    # The queued shape (32 users asking 128 tokens at once), as bench's own A/B: with the
    # concurrent shape (16 users of 24 tokens, 64 requests a side) clean-clone CI beside two
    # busy loops measured TTFT p50 only +76.4% [+3.7%, +317.4%] and KEPT the change; here
    # the median user waits for ~16 whole answers (TTFT 17-32 times the default's in
    # bench's A/B under such load).
    done = c.run(c.argv(c.runtimes[1], SLOW, *c.verify_args("slow", "queued"), "--no-warm-start"))
    sys.stderr.write(done.stdout + done.stderr)
    assert done.returncode == 5, done.stderr[-3000:]
    now = client.containers.get(c.name)
    assert now.id == before.id
    assert now.status == "running"
    assert "--max-num-seqs" not in now.attrs["Args"]
    assert _serving(c.url) > 0
    assert not client.containers.list(all=True, filters={"name": c.name + ap.NEXT_SUFFIX})
    where, record = c.record("slow")
    assert record["outcome"] == "rolled back"
    assert record["gate"]["holds"] is False
    # The queue: the first token waits for the users before it (significantly, beyond 50%).
    [ttft] = [r for r in record["gate"]["rows"] if r["metric"] == "ttft_ms.p50"]
    assert ttft["ci_low_pct"] > float(MAX_REGRESSION)
    assert not ttft["holds"]
    assert any("ttft_ms.p50" in f for f in record["gate"]["failures"])
    assert record["previous_serving_s"] is not None
    assert (where / "baseline.json").is_file()
    assert (where / "after.json").is_file()
    assert "ROLLED BACK" in (c.root / "slow.md").read_text()
    assert "rolled back" in done.stderr


def test_ctrl_c_during_the_after_bench_leaves_the_previous_container_running(
    case: tuple[Case, Any],
) -> None:
    c, client = case
    before = client.containers.get(c.name)
    # SIGINT on the line that says the after-bench starts, nothing in between. The bench
    # cannot be over by then: 96 requests one at a time (--max-num-seqs 1), after its
    # probes and warm-up.
    argv = c.argv(
        c.runtimes[1], SLOW, *c.verify_args("sigint"), "--no-warm-start", "--requests", "96"
    )
    with child(argv, env=c.env()) as proc:
        proc.wait_for_line(lambda line: line.startswith("bench new:"), deadline_s=600)
        proc.interrupt()
        code, _out, err = proc.finish(timeout_s=300)
    sys.stderr.write(err)
    print(f"apply --verify: exit {code} {proc.exited_after_sigint_s:.2f} s after SIGINT")
    assert code == 130, err
    now = client.containers.get(c.name)
    assert now.id == before.id
    assert now.status == "running"  # (serving again: the previous test shows it does)
    where, record = c.record("sigint")
    assert record["outcome"] == "interrupted"
    assert record["message"] == "interrupted during verify"
    assert any("started the previous" in r for r in record["rolled_back"])
    # The signal came during the after-bench: its partial run is kept.
    assert record["after"] == "after.json"
    after = json.loads((where / "after.json").read_text())
    assert after["interrupted"] is True
    assert after["exit_code"] == 130


def _capacities(where: Path, slo_ms: float) -> tuple[dict[str, Any], dict[str, Any]]:
    """compare.json's capacity at SLO of the baseline and of the new container, each checked:
    measured at every rate, a crossing with its interval around it or a bound without one."""
    sweep = json.loads((where / "compare.json").read_text())["sweep"]
    assert sweep["matched"] == [f"{RATE_SHAPE}@{r}/s" for r in RATES.split(",")]
    assert sweep["slo"] == {"ttft_ms": float(f"{slo_ms:.0f}")}
    out = []
    for side in (sweep["before"], sweep["after"]):
        assert [p["offered_rate"] for p in side["points"]] == [1.0, 50.0]
        assert all(p["completed"] == 16 for p in side["points"])
        cap = side["capacity"]
        assert cap["level"] == 0.9
        assert cap["bound"] in ("crossing", "at least", "below"), cap
        if cap["bound"] == "crossing":
            assert 1.0 < cap["rate"] < 50.0
            assert cap["ci_low"] <= cap["rate"] <= cap["ci_high"], cap
        out.append(cap)
    return out[0], out[1]


def test_at_rates_the_capacity_at_slo_decides_and_everything_says_so(
    case: tuple[Case, Any],
) -> None:
    c, client = case
    before = client.containers.get(c.name)
    assert "--max-num-seqs" not in before.attrs["Args"]
    # After the Ctrl-C case the previous container was started again, not waited for: the
    # calibration measures it once it serves (a first token), not while it loads (run 24).
    assert _serving(c.url) > 0
    burst, alone, slo = c.calibrate()
    done = c.run(c.argv(c.runtimes[1], SLOW, *c.rate_args("rate", slo)))
    sys.stderr.write(done.stdout + done.stderr)
    assert done.returncode in (0, 5), done.stderr[-3000:]
    where, record = c.record("rate")
    base, new = _capacities(where, slo)
    gate = record["gate"]
    # The decision is the capacity's, and only the capacity's.
    [row] = gate["rows"]
    assert (row["shape"], row["metric"]) == (RATE_SHAPE, "capacity_at_slo")
    assert (row["before"], row["after"]) == (base["rate"], new["rate"])
    assert gate["holds"] is row["holds"]
    if row["holds"]:
        assert gate["failures"] == []
    else:
        assert gate["failures"] == [f"{RATE_SHAPE} capacity_at_slo: {row['reason']}"]
    # ... by the gate's rule (rules/gate.py), from the figures the compare holds.
    if row["ci_low_pct"] is not None:  # two crossings: the interval of the change
        assert row["ci_low_pct"] <= row["change_pct"] <= row["ci_high_pct"]
        assert row["regression_pct"] == -row["ci_high_pct"]
        assert row["holds"] is (row["regression_pct"] <= row["allowed_pct"])
    elif new["bound"] == "at least":  # SLOs met at every rate: it cannot have dropped
        assert row["holds"] is True
    elif new["bound"] == "below" and base["bound"] != "below":  # missed at the lowest rate
        assert row["holds"] is False
    elif base["bound"] == "at least":  # met at every rate before, not after
        assert new["rate"] < base["rate"]
        assert row["holds"] is False
    now = client.containers.get(c.name)
    assert now.status == "running"
    assert _serving(c.url) > 0
    assert not client.containers.list(all=True, filters={"name": c.name + ap.NEXT_SUFFIX})
    ticket = (c.root / "rate.md").read_text()
    assert f"| {RATE_SHAPE} | capacity_at_slo |" in ticket
    if row["holds"]:
        assert done.returncode == 0
        assert record["outcome"] == "kept"
        assert now.id != before.id
        assert "--max-num-seqs" in now.attrs["Args"]
        assert "KEPT" in ticket
    else:
        assert done.returncode == 5
        assert record["outcome"] == "rolled back"
        assert record["previous_serving_s"] is not None
        assert now.id == before.id
        assert "--max-num-seqs" not in now.attrs["Args"]
        assert "ROLLED BACK" in ticket
    print(
        f"calibration: B {burst:.0f} ms, T {alone:.0f} ms -> SLO {slo:.0f} ms; capacity at "
        f"SLO {base['bound']} {base['rate']:.3g} -> {new['bound']} {new['rate']:.3g}: "
        f"{record['outcome']} (exit {done.returncode}): {row['reason']}"
    )
