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

from blackwell_doctor.apply.slurm import (
    REASON_MAX,
    Action,
    NodeState,
    SlurmError,
    decide,
    drain_reason,
    node_name_problem,
    parse_sinfo,
)
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.rules.evaluate import evaluate
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
    # The node verdict's step leads (issue 39): a driver to upgrade leaves it degraded.
    assert d.reason == "blackwell-doctor: degraded: driver.version"


def test_the_drain_reason_leads_with_the_step_and_the_findings_that_set_it() -> None:
    # A failed row remapping (service) outranks a pending one (reset) and the driver's own
    # recovery action (reset): the node needs service, for health.memory_replace first.
    d = decide(node(), evaluate(load("h200x2-row-remap")))
    assert d.action is Action.DRAIN
    assert d.reason.startswith("blackwell-doctor: needs-service: health.memory_replace, ")
    assert node("drained", d.reason).ours
    # Xid 79 in the kernel log: NVIDIA's RESTART_BM, a reboot.
    d = decide(node(), evaluate(load("rtx5090-xid79-riser")))
    assert d.reason.startswith("blackwell-doctor: needs-reboot: logs.kernel_events")


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
    same = node("drained", "blackwell-doctor: degraded: driver.version")
    assert decide(same, failing).action is Action.KEEP
    # A reason an earlier version wrote (no step) is ours, and is brought up to date.
    assert decide(node("drained", "blackwell-doctor: driver.version"), failing).action is (
        Action.DRAIN
    )
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


def test_an_admins_reason_that_is_literally_none_is_a_reason() -> None:
    # sinfo prints "none" for no reason and for Reason=none alike; the time tells them apart.
    assert parse_sinfo("n1", "n1|drained|2026-11-25T17:40:38|none\n").reason == "none"
    assert parse_sinfo("n1", "n1|idle|Unknown|none\n").reason == ""
    for facts in ("sm120-driver580", "h200x2-captured"):  # failing, healthy
        assert decide(node("drained", "none"), evaluate(load(facts))).action is Action.LEAVE


def test_a_drained_node_without_a_reason_of_ours_is_left_alone() -> None:
    failing, healthy = evaluate(load("sm120-driver580")), evaluate(load("h200x2-captured"))
    for state in ("drained", "draining", "down", "down+drain", "fail"):
        assert decide(node(state, ""), failing).action is Action.LEAVE
        assert decide(node(state, ""), healthy).action is Action.LEAVE


@pytest.mark.parametrize(
    "reason",
    [
        "blackwell-doctor: keep out until the PSU swap",
        "blackwell-doctor:",
        "blackwell-doctor: driver.version ",
        " blackwell-doctor: driver.version",
        "blackwell-doctor: driver.version\nadmin: keep out",
        "BLACKWELL-DOCTOR: driver.version",
        "blackwell-doctor: driver.version; admin: keep out",
    ],
)
def test_only_a_reason_exactly_as_we_write_it_is_ours(reason: str) -> None:
    healthy = evaluate(load("h200x2-captured"))
    assert not node("drained", reason).ours
    assert decide(node("drained", reason), healthy).action is Action.LEAVE


def test_the_reasons_we_write_are_ours() -> None:
    ids = [f"pci.check{i:02d}" for i in range(20)]
    for reason in (
        drain_reason(ids),
        drain_reason(ids[:1]),
        drain_reason(ids, "needs-reset"),
        "blackwell-doctor: logs.moe_kernels",
        "blackwell-doctor: needs-reboot: logs.kernel_events",
    ):
        assert node("drained", reason).ours, reason
    assert len(drain_reason(ids, "needs-service")) <= REASON_MAX
    assert not node("drained", "blackwell-doctor: needs-a-nap: logs.kernel_events").ours


@pytest.mark.parametrize(
    "name", ["n1,n2", "gpu[001-128]", "n1 n2", "n1\tn2", "n1\n", "n1\x1b[31m", "n1]", ""]
)
def test_a_node_list_or_a_name_with_control_characters_is_refused(name: str) -> None:
    assert node_name_problem(name) is not None


def test_ordinary_node_names_are_accepted() -> None:
    for name in ("bdnode", "gpu-001", "node_7.cluster", "n1"):
        assert node_name_problem(name) is None


def test_sinfo_lines_must_be_about_the_node_and_agree() -> None:
    with pytest.raises(SlurmError, match="unexpected sinfo output"):
        parse_sinfo("n1", "n2|drained|2026-11-25T17:40:38|blackwell-doctor: driver.version\n")
    with pytest.raises(SlurmError, match="different states or reasons"):
        parse_sinfo("n1", "n1|idle|Unknown|none\nn1|drained|2026-11-25T17:40:38|x\n")
    with pytest.raises(SlurmError, match="knows no node"):
        parse_sinfo("n1", "")
    # One line per partition, the same: one node.
    two = "n1|drained|2026-11-25T17:40:38|blackwell-doctor: driver.version\n" * 2
    assert parse_sinfo("n1", two).ours
    # A reason with a newline (an admin's): the next line continues it; the | in it stay.
    wrapped = "n1|drained*|2026-11-25T17:40:38|blackwell-doctor: driver.version\nkeep|out\n"
    got = parse_sinfo("n1", wrapped)
    assert (got.state, got.reason) == ("drained", "blackwell-doctor: driver.version\nkeep|out")
    assert not got.ours


# --------------------------------------------------------------------------- a fake Slurm
# sinfo and scontrol as small programs on PATH that log their argv: what the command asks
# of Slurm and in which order, where the real cluster cannot show it (two nodes, a resume
# that must not happen). The real cluster's tests are below.

FAKE = """#!{python}
import sys
with open({log!r}, "a") as fh:
    fh.write(" ".join(sys.argv[1:]) + "\\n")
if sys.argv[0].endswith("sinfo"):
    sys.stdout.write({sinfo!r})
"""


def fake_slurm(tmp_path: Path, sinfo: str) -> tuple[dict[str, str], Path]:
    bin_dir, log = tmp_path / "bin", tmp_path / "calls.log"
    bin_dir.mkdir()
    log.touch()
    for tool in ("sinfo", "scontrol"):
        path = bin_dir / tool
        path.write_text(FAKE.format(python=sys.executable, log=str(log), sinfo=sinfo))
        path.chmod(0o755)
    return {**os.environ, "PATH": f"{bin_dir}:{os.environ['PATH']}"}, log


def fake_health(
    env: dict[str, str], *argv: str, stdout: int = subprocess.PIPE
) -> subprocess.CompletedProcess[bytes]:
    return subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "slurm-health", *argv],
        stdout=stdout, stderr=subprocess.PIPE, timeout=120, check=False, env=env, cwd=REPO,
    )  # fmt: skip


# Every node of the list drained by us, but n2's line says an admin's: never resumed.
TWO_NODES = (
    "n1|drained|2026-11-25T17:40:38|blackwell-doctor: driver.version\n"
    "n2|drained|2026-11-25T17:40:38|none\n"
)


@pytest.mark.parametrize("name", ["n1,n2", "n[1-2]", "n1 n2", "n1\x1b]0;x\x07", ""])
def test_a_node_list_is_exit_2_before_slurm_is_asked_anything(tmp_path: Path, name: str) -> None:
    env, log = fake_slurm(tmp_path, TWO_NODES)
    proc = fake_health(env, "--node", name, "--facts", str(PASSING))
    assert proc.returncode == 2, proc.stderr
    assert proc.stdout == b""
    (line,) = proc.stderr.decode().splitlines()
    assert line.startswith("blackwell-doctor: error: --node ")
    assert "\x1b" not in line
    assert log.read_text() == ""


def test_sinfo_answering_for_another_node_changes_nothing(tmp_path: Path) -> None:
    env, log = fake_slurm(tmp_path, TWO_NODES)
    proc = fake_health(env, "--node", "n2", "--facts", str(PASSING))
    assert proc.returncode == ExitCode.SLURM_FAILED, proc.stderr
    assert [line.split()[0] for line in log.read_text().splitlines()] == ["--noheader"]


@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_an_output_that_cannot_be_written_is_exit_2_with_slurm_untouched(tmp_path: Path) -> None:
    env, log = fake_slurm(tmp_path, "n1|drained|2026-11-25T17:40:38|blackwell-doctor: pci.acs\n")
    with open("/dev/full", "wb") as full:
        proc = fake_health(env, "--node", "n1", "--facts", str(PASSING), stdout=full.fileno())
    assert proc.returncode == 2, proc.stderr
    (line,) = proc.stderr.decode().splitlines()
    assert line == "blackwell-doctor: error: cannot write standard output: No space left on device"
    assert not any(line.startswith("update") for line in log.read_text().splitlines())
    # Written: the same run resumes the node it drained, after saying so.
    proc = fake_health(env, "--node", "n1", "--facts", str(PASSING))
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.decode().startswith("n1: resume: healthy again")
    assert log.read_text().splitlines()[-1] == "update NodeName=n1 State=RESUME"


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
    assert state_and_reason(cluster) == ("drained", "blackwell-doctor: degraded: driver.version")
    assert f"{NODE}: drain: blackwell-doctor: degraded: driver.version" in proc.stdout

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
    assert "dry run, would drain" in proc.stdout
    assert state_and_reason(cluster)[0] == "idle"


@pytest.mark.slurm
def test_an_unknown_node_is_exit_6_in_one_line(cluster: Path) -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "slurm-health", "--node", "no-such-node",
         "--facts", str(FAILING)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SLURM_CONF": str(cluster)},
    )  # fmt: skip
    assert proc.returncode == ExitCode.SLURM_FAILED
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


@pytest.mark.slurm
def test_an_admins_reason_none_is_left_alone(cluster: Path) -> None:
    slurm(cluster, "scontrol", "update", f"NodeName={NODE}", "State=DRAIN", "Reason=none")
    for facts, code in ((FAILING, 1), (PASSING, 0)):
        proc = health(cluster, facts)
        assert proc.returncode == code, proc.stderr
        assert "left alone" in proc.stdout
        assert state_and_reason(cluster) == ("drained", "none")


@pytest.mark.slurm
@pytest.mark.parametrize("extra", [",{node}", "[1]", " {node}"])
def test_a_node_list_is_refused_before_slurm_is_touched(cluster: Path, extra: str) -> None:
    assert health(cluster, FAILING).returncode == 1
    drained = ("drained", "blackwell-doctor: degraded: driver.version")
    assert state_and_reason(cluster) == drained
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "slurm-health", "--node",
         NODE + extra.format(node=NODE), "--facts", str(PASSING)],
        capture_output=True, text=True, timeout=120, check=False,
        env={**os.environ, "SLURM_CONF": str(cluster)},
    )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert state_and_reason(cluster) == drained  # not resumed


@pytest.mark.slurm
@pytest.mark.skipif(not Path("/dev/full").exists(), reason="no /dev/full here")
def test_an_output_that_cannot_be_written_leaves_the_node_as_it_was(cluster: Path) -> None:
    assert health(cluster, FAILING).returncode == 1
    drained = ("drained", "blackwell-doctor: degraded: driver.version")
    with open("/dev/full", "wb") as full:
        proc = subprocess.run(
            [sys.executable, "-m", "blackwell_doctor", "slurm-health", "--node", NODE,
             "--facts", str(PASSING)],
            stdout=full.fileno(), stderr=subprocess.PIPE, text=True, timeout=120, check=False,
            env={**os.environ, "SLURM_CONF": str(cluster)},
        )  # fmt: skip
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.count("\n") == 1
    assert state_and_reason(cluster) == drained  # not resumed without a word
