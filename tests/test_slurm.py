"""``slurm-health``: drain on findings with a reason naming the check ids, resume only nodes
blackwell-doctor drained itself. The policy as a pure function first, then against a real
single-node Slurm (ci/slurm.sh; marker `slurm`), with the sbatch recipe that collects facts."""

from __future__ import annotations

import os
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from blackwell_doctor.evaluate import evaluate
from blackwell_doctor.slurm import REASON_MAX, Action, NodeState, decide, drain_reason
from tests.conftest import FACTS_FIXTURES, REPO
from tests.factsutil import load

FAILING = FACTS_FIXTURES / "sm120-driver580.json"  # driver.version fails
PASSING = FACTS_FIXTURES / "h200x2-captured.json"  # nothing at or above the gate
ADMIN_REASON = "maintenance: swap PSU (ticket 4711)"


def node(state: str = "idle", reason: str = "") -> NodeState:
    return NodeState(name="n1", state=state, reason=reason)


# --------------------------------------------------------------------------- policy


def test_findings_drain_with_the_failing_ids() -> None:
    d = decide(node(), evaluate(load("sm120-driver580")))
    assert d.action is Action.DRAIN
    assert d.reason == "blackwell-doctor: driver.version"


def test_warnings_drain_only_under_fail_on_warn() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")  # warnings only
    assert decide(node(), evaluate(facts)).action is Action.KEEP
    d = decide(node(), evaluate(facts, fail_on="warn"))
    assert d.action is Action.DRAIN
    assert "pci.acs" in d.reason


def test_healthy_resumes_only_our_own_drain() -> None:
    healthy = evaluate(load("h200x2-captured"))
    ours = node("drained", "blackwell-doctor: driver.version")
    assert decide(ours, healthy).action is Action.RESUME
    assert decide(node("drained", ADMIN_REASON), healthy).action is Action.LEAVE
    assert decide(node("idle"), healthy).action is Action.KEEP


def test_another_reason_is_never_overwritten_by_a_drain() -> None:
    # Re-draining would replace the admin's reason with ours, and the next healthy run
    # would then resume a node the admin took out.
    failing = evaluate(load("sm120-driver580"))
    assert decide(node("drained", ADMIN_REASON), failing).action is Action.LEAVE
    assert decide(node("down", "Not responding"), failing).action is Action.LEAVE


def test_our_drain_is_updated_when_the_findings_change() -> None:
    failing = evaluate(load("sm120-driver580"))
    same = node("drained", "blackwell-doctor: driver.version")
    assert decide(same, failing).action is Action.KEEP
    other = node("drained", "blackwell-doctor: pci.acs")
    assert decide(other, failing).action is Action.DRAIN


def test_a_long_reason_names_the_first_ids_and_counts_the_rest() -> None:
    ids = [f"pci.check{i:02d}" for i in range(20)]
    reason = drain_reason(ids)
    assert len(reason) <= REASON_MAX
    shown = reason.removeprefix("blackwell-doctor: ").split(" +")[0].split(", ")
    assert shown == ids[: len(shown)]
    assert len(shown) > 1
    assert reason.endswith(f" +{20 - len(shown)} more")
    assert drain_reason(ids[:2]) == "blackwell-doctor: pci.check00, pci.check01"


# --------------------------------------------------------------------------- real Slurm

NODE = os.environ.get("BLACKWELL_DOCTOR_TEST_SLURM_NODE", "bdnode")
BIN = Path(sys.executable).parent


def slurm(conf: Path, *argv: str, check: bool = True) -> str:
    proc = subprocess.run(
        list(argv),
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
        env={**os.environ, "SLURM_CONF": str(conf)},
    )
    if check and proc.returncode != 0:
        raise AssertionError(f"{argv}: {proc.stderr}")
    return proc.stdout


def state_and_reason(conf: Path) -> tuple[str, str]:
    out = slurm(conf, "sinfo", "--noheader", f"--nodes={NODE}", "--format=%T|%E")
    state, _, reason = out.splitlines()[0].partition("|")
    return state.rstrip("*~#!%$@^-"), reason


def health(conf: Path, facts: Path, *extra: str) -> subprocess.CompletedProcess[str]:
    argv = ["slurm-health", "--node", NODE, "--facts", str(facts), *extra]
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *argv],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        env={**os.environ, "SLURM_CONF": str(conf)},
    )


@pytest.fixture
def cluster(slurm_conf: Path) -> Iterator[Path]:
    """The test cluster with its node idle and reason-free before and after each test."""

    def reset() -> None:
        state, _ = state_and_reason(slurm_conf)
        if state in ("drained", "draining", "down"):
            slurm(slurm_conf, "scontrol", "update", f"NodeName={NODE}", "State=RESUME")

    reset()
    yield slurm_conf
    reset()


@pytest.mark.slurm
def test_failing_replay_drains_and_passing_replay_resumes(cluster: Path) -> None:
    proc = health(cluster, FAILING)
    assert proc.returncode == 1, proc.stderr
    assert state_and_reason(cluster) == ("drained", "blackwell-doctor: driver.version")
    assert "drained" in proc.stdout

    again = health(cluster, FAILING)  # idempotent: nothing changes, same exit
    assert again.returncode == 1
    assert "unchanged" in again.stdout

    proc = health(cluster, PASSING)
    assert proc.returncode == 0, proc.stderr
    state, reason = state_and_reason(cluster)
    assert state == "idle"
    assert reason == "none"


@pytest.mark.slurm
def test_an_admins_drain_is_left_alone(cluster: Path) -> None:
    slurm(
        cluster, "scontrol", "update", f"NodeName={NODE}", "State=DRAIN", f"Reason={ADMIN_REASON}"
    )
    for facts, code in ((PASSING, 0), (FAILING, 1)):
        proc = health(cluster, facts)
        assert proc.returncode == code, proc.stderr
        assert "left alone" in proc.stdout
        assert state_and_reason(cluster) == ("drained", ADMIN_REASON)


@pytest.mark.slurm
def test_dry_run_changes_nothing(cluster: Path) -> None:
    proc = health(cluster, FAILING, "--dry-run")
    assert proc.returncode == 1
    assert "would be drained" in proc.stdout
    assert state_and_reason(cluster)[0] == "idle"


@pytest.mark.slurm
def test_an_unknown_node_is_exit_5_in_one_line(cluster: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "slurm-health", "--node", "no-such-node",
         "--facts", str(FAILING)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SLURM_CONF": str(cluster)},
    )  # fmt: skip
    assert proc.returncode == 5
    assert proc.stderr.count("\n") == 1
    assert "no-such-node" in proc.stderr


@pytest.mark.slurm
def test_the_sbatch_recipe_collects_every_node_for_fleet(cluster: Path, tmp_path: Path) -> None:
    facts_dir = tmp_path / "facts"
    env = {
        **os.environ,
        "SLURM_CONF": str(cluster),
        "FACTS_DIR": str(facts_dir),
        "BLACKWELL_DOCTOR": str(BIN / "blackwell-doctor"),
    }
    job = subprocess.run(
        ["sbatch", "--parsable", f"--output={tmp_path}/job-%j.out", "--nodes=1",
         str(REPO / "deploy" / "slurm" / "collect-facts.sbatch")],
        capture_output=True, text=True, timeout=30, check=True, env=env,
    ).stdout.strip().split(";")[0]  # fmt: skip
    deadline = time.monotonic() + 90
    while True:
        out = slurm(cluster, "scontrol", "show", "job", job, check=False)
        if "JobState=COMPLETED" in out or "JobState=FAILED" in out:
            break
        assert time.monotonic() < deadline, f"job {job} did not finish: {out}"
        time.sleep(0.5)
    assert "JobState=COMPLETED" in out, (tmp_path / f"job-{job}.out").read_text()
    assert sorted(p.name for p in facts_dir.iterdir()) == [f"{NODE}.json"]
    proc = subprocess.run(
        [str(BIN / "blackwell-doctor"), "fleet", str(facts_dir), "--format", "json"],
        capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert '"nodes": 1' in proc.stdout
    assert '"unjudged": 0' in proc.stdout
