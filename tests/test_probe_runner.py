"""run_probes and collect_gpu_and_probes (check's one child for the GPU facts and the
probes): the parent's logic over fake children that hang, crash, print garbage or finish,
and the no-driver fast path. No GPU needed."""

from __future__ import annotations

import ctypes
import json
import subprocess
import sys
import textwrap
import time
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.gpu import CHILD_MODULE as GPU_CHILD
from blackwell_doctor.collect.gpu import GpuRun, collect_gpu, skipped_for
from blackwell_doctor.collect.probe.protocol import LIMIT_STEP
from blackwell_doctor.collect.probe.runner import (
    CHILD_MODULE,
    collect_gpu_and_probes,
    collect_gpu_run,
    run_probes,
)
from blackwell_doctor.facts.document import CudaFacts, NvmlFacts, ProbeFacts, Unavailable
from blackwell_doctor.ruledata.tileplan import Tile, plan_tile

TILES = [
    Tile(m=128, n=128, k=64, epilogue_bytes=11264),
    Tile(m=128, n=128, k=128, epilogue_bytes=11264),
    Tile(m=128, n=256, k=256, epilogue_bytes=11264),
]
SM120_OPTIN = 101376
# A deadline that a healthy fake child never reaches, however loaded the machine. A step
# deadline counts from the child's start too (its first line must come within it), and the
# fake's interpreter start and imports took 0.3 s idle, 2-3 s on the 2-core VM beside six
# busy loops and once 9.5 s under load (2 s per step timed a healthy child out). A hang
# test waits it out once: the fake hangs for HANG_S, so the deadline is still what ends it.
ROOM_S = 30.0
# The overall deadline of the runs in which nothing hangs: its default step deadline (a
# third of it) is ROOM_S. Never reached, so it costs nothing.
ROOMY_S = 3 * ROOM_S
HANG_S = 3600  # how long the fake hangs (and sleeps after its garbage)

# A fake child. Each invocation appends its job to JOBS, then runs the job's steps, doing
# what BEHAVIOUR says at the step named (first invocation only, unless ALWAYS).
_FAKE = textwrap.dedent(
    """
    import json, os, signal, sys, time
    from blackwell_doctor.facts.document import Unavailable
    from blackwell_doctor.collect.probe.protocol import *

    JOBS, BEHAVIOUR, AT, ALWAYS = {jobs!r}, {behaviour!r}, {at!r}, {always!r}
    job = json.loads(sys.argv[1])
    with open(JOBS, "a") as f:
        f.write(json.dumps(job) + "\\n")
    first = sum(1 for _ in open(JOBS)) == 1
    act = first or ALWAYS

    def out(line):
        sys.stdout.buffer.write(encode_line(line))
        sys.stdout.flush()

    def misbehave(where):
        if not act or where != AT:
            return
        if BEHAVIOUR == "hang":
            time.sleep({hang})
        if BEHAVIOUR == "segfault":
            os.kill(os.getpid(), signal.SIGSEGV)
        if BEHAVIOUR == "exit3":
            sys.exit(3)
        if BEHAVIOUR == "fatal":
            out(FatalLine(reason="cuda-error-no-device"))
            sys.exit(0)

    if job.get("gpu_facts"):  # the first child of a check: the GPU facts line first
        misbehave("facts")
        import msgspec
        from blackwell_doctor.collect.gpu import GpuDocument
        from blackwell_doctor.facts.document import CudaDevice, CudaFacts
        if BEHAVIOUR == "garbage-facts":
            print("Segmentation fault (core dumped)", flush=True)
            time.sleep({hang})
        na = Unavailable("not-read")
        devices = [] if BEHAVIOUR == "no-device" else [CudaDevice(
            ordinal=0, name="NVIDIA RTX PRO 6000", pci_bus_id=na, compute_capability=(12, 0),
            sm_count=188, max_threads_per_sm=na, l2_cache_bytes=na, smem_per_block=na,
            smem_per_block_optin={optin}, smem_per_sm=na, reserved_smem_per_block=na)]
        health = [] if job.get("health") else None  # what the child read, as it says it
        document = GpuDocument(nvml=Unavailable("nvml-library-not-found"),
                               cuda=CudaFacts(driver_version="13.0", devices=devices),
                               health=health)
        sys.stdout.buffer.write(msgspec.json.encode(document) + b"\\n")
        sys.stdout.flush()
        if not devices:
            sys.exit(0)
    misbehave("start")
    ordinals = job["devices"] if job["devices"] is not None else [0]
    print("Segmentation fault? no: just garbage", flush=True)
    out(DevicesLine(ordinals=ordinals))
    steps = job["steps"]
    if steps is None:
        steps = [[o, s] for o in ordinals for s in [-1] + list(range(len(job["tiles"])))]
    done_setup = set()
    for ordinal, step in steps:
        if ordinal not in done_setup:
            misbehave("setup")
            sampling = job.get("sample_clocks")
            out(DeviceLine(ordinal=ordinal, name="NVIDIA RTX PRO 6000", compute_capability=(12, 0),
                           smem_optin_attribute={optin}, sm_count=188, compiled_as="sm_120 cubin",
                           cache="miss" if first else "hit", nvrtc_version="13.0",
                           pci_bus_id="0000:0{{}}:00.0".format(ordinal + 1) if sampling else None))
            done_setup.add(ordinal)
        misbehave(step)
        if step == -1:
            out(LimitLine(ordinal=ordinal, smem_launch_limit={optin}))
            continue
        if BEHAVIOUR == "sticky" and act and step == AT:
            out(TileLine(ordinal=ordinal, index=step, launched=False,
                         launch_error="CUDA_ERROR_ILLEGAL_ADDRESS"))
            out(RestartLine(reason="CUDA_ERROR_ILLEGAL_ADDRESS"))
            sys.exit(0)
        sys.stdout.write("{{not json\\n")
        from blackwell_doctor.facts.document import ClockSample
        taken = [ClockSample(reasons=0x4, sm_clock_mhz=2000 - step, temperature_c=70 + step,
                             power_mw=300000, pcie_replays=step)] * 5
        out(TileLine(ordinal=ordinal, index=step, launched=True, time_us=100.0 + step,
                     k_iterations=8192 // job["tiles"][step][2], macs_per_s=1e12,
                     samples=taken if job.get("sample_clocks") else []))
    """
)


def _fake(
    tmp_path: Path, behaviour: str = "none", at: object = None, *, always: bool = False
) -> list[str]:
    code = _FAKE.format(
        jobs=str(tmp_path / "jobs.jsonl"),
        behaviour=behaviour,
        at=at,
        always=always,
        optin=SM120_OPTIN,
        hang=HANG_S,
    )
    return [sys.executable, "-c", code]


def _jobs(tmp_path: Path) -> list[dict[str, object]]:
    lines = (tmp_path / "jobs.jsonl").read_text().splitlines()
    return [json.loads(line) for line in lines]


def _probe(tmp_path: Path, behaviour: str = "none", at: object = None, **kw: object) -> object:
    always = bool(kw.pop("always", False))
    return run_probes(
        tiles=TILES,
        child_argv=_fake(tmp_path, behaviour, at, always=always),
        **kw,  # type: ignore[arg-type]
    )


def test_a_clean_child_fills_the_facts_exactly(tmp_path: Path) -> None:
    facts = _probe(tmp_path, timeout_s=ROOMY_S)

    assert isinstance(facts, ProbeFacts)
    assert facts.cache == "miss"
    assert facts.nvrtc_version == "13.0"
    assert facts.wall_s > 0
    [device] = facts.devices
    assert device.ordinal == 0
    assert device.name == "NVIDIA RTX PRO 6000"
    assert device.compute_capability == (12, 0)
    assert device.smem_optin_attribute == SM120_OPTIN
    assert device.smem_launch_limit == SM120_OPTIN
    assert device.compiled_as == "sm_120 cubin"
    assert len(device.tiles) == len(TILES)
    for tile, probe in zip(TILES, device.tiles, strict=True):
        plan = plan_tile(tile, SM120_OPTIN)
        assert (probe.m, probe.n, probe.k, probe.k_bytes) == (tile.m, tile.n, tile.k, tile.k // 2)
        assert probe.stages == plan.stages
        assert probe.smem_bytes == plan.smem_bytes
        assert probe.fits == plan.fits
        assert probe.reason == plan.reason
        assert probe.launched is True
        assert probe.k_iterations == 8192 // tile.k
    assert [t.time_us for t in device.tiles] == [100.0, 101.0, 102.0]
    assert len(_jobs(tmp_path)) == 1


def test_a_child_that_hangs_mid_stream_loses_one_step_and_the_rest_rerun(tmp_path: Path) -> None:
    started = time.monotonic()
    # ROOM_S per step: 0.5 s, then 2 s, timed a healthy start or step out on the loaded VM.
    facts = _probe(tmp_path, "hang", 1, timeout_s=600, step_timeout_s=ROOM_S)
    elapsed = time.monotonic() - started

    assert isinstance(facts, ProbeFacts)
    [device] = facts.devices
    assert device.smem_launch_limit == SM120_OPTIN  # finished before the hang: kept
    assert device.tiles[0].launched is True
    assert device.tiles[1].launched is False
    assert device.tiles[1].launch_error == f"probe-timeout:{ROOM_S:g}s"
    assert device.tiles[2].launched is True  # run by a fresh child
    jobs = _jobs(tmp_path)
    assert len(jobs) == 2
    assert jobs[0]["steps"] is None
    assert jobs[1]["steps"] == [[0, 2]]
    assert jobs[1]["devices"] == [0]
    assert elapsed < 600 / 2  # the step deadline (~30 s), not the 600 s total


def test_a_child_that_crashes_after_two_lines_names_the_signal(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "segfault", LIMIT_STEP, timeout_s=ROOMY_S)

    assert isinstance(facts, ProbeFacts)
    [device] = facts.devices
    assert device.smem_launch_limit == Unavailable("probe-crashed:signal-11")
    assert device.compiled_as == "sm_120 cubin"
    assert [t.launched for t in device.tiles] == [True, True, True]
    assert _jobs(tmp_path)[1]["steps"] == [[0, 0], [0, 1], [0, 2]]


def test_a_crash_while_setting_the_device_up_fails_that_device(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "exit3", "setup", always=True, timeout_s=ROOMY_S)

    assert isinstance(facts, ProbeFacts)
    [device] = facts.devices
    assert device.compiled_as == Unavailable("probe-crashed:rc=3")
    assert device.smem_launch_limit == Unavailable("probe-crashed:rc=3")
    assert device.smem_optin_attribute == Unavailable("probe-crashed:rc=3")
    assert device.tiles == []  # no limit known, so no plan either
    assert len(_jobs(tmp_path)) == 1  # nothing left to rerun


def test_a_sticky_error_restarts_the_child_without_blaming_the_next_step(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "sticky", 0, timeout_s=ROOMY_S)

    assert isinstance(facts, ProbeFacts)
    tiles = facts.devices[0].tiles
    assert tiles[0].launched is False
    assert tiles[0].launch_error == "CUDA_ERROR_ILLEGAL_ADDRESS"
    assert tiles[1].launched is True
    assert tiles[2].launched is True
    assert _jobs(tmp_path)[1]["steps"] == [[0, 1], [0, 2]]


def test_garbage_lines_are_ignored(tmp_path: Path) -> None:
    # The fake prints a garbage line before DevicesLine and before every tile line.
    facts = _probe(tmp_path, timeout_s=ROOMY_S)
    assert isinstance(facts, ProbeFacts)
    assert all(t.launched for t in facts.devices[0].tiles)


def test_the_overall_deadline_is_honoured_quickly(tmp_path: Path) -> None:
    started = time.monotonic()
    # ROOM_S overall: the limit step comes before it however slow the start (1.5 s did not).
    facts = _probe(tmp_path, "hang", 0, always=True, timeout_s=ROOM_S, step_timeout_s=600)
    elapsed = time.monotonic() - started

    assert isinstance(facts, ProbeFacts)
    tiles = facts.devices[0].tiles
    assert facts.devices[0].smem_launch_limit == SM120_OPTIN
    assert [t.launch_error for t in tiles] == [f"probe-timeout:{ROOM_S:g}s"] * 3
    assert elapsed < 600 / 2  # the overall deadline (30 s), not the 600 s step deadline


def test_a_child_that_hangs_before_listing_devices_is_unavailable(tmp_path: Path) -> None:
    # A start slower than the 1 s deadline ends the same way: no device was listed.
    started = time.monotonic()
    facts = _probe(tmp_path, "hang", "start", timeout_s=1.0)
    assert facts == Unavailable("probe-timeout:1s")
    assert time.monotonic() - started < HANG_S / 10  # the deadline, not the hang


def test_a_fatal_line_makes_the_whole_result_unavailable(tmp_path: Path) -> None:
    facts = _probe(tmp_path, "fatal", "start", timeout_s=ROOMY_S)
    assert facts == Unavailable("cuda-error-no-device")


def test_a_child_that_cannot_start_is_a_reason(tmp_path: Path) -> None:
    facts = run_probes(tiles=TILES, child_argv=[str(tmp_path / "no-such-python")])
    assert facts == Unavailable("probe-start-failed:FileNotFoundError")


def test_explicit_devices_are_passed_to_the_child(tmp_path: Path) -> None:
    argv = _fake(tmp_path)
    facts = run_probes(tiles=TILES[:1], devices=[3], child_argv=argv, timeout_s=ROOMY_S)
    assert isinstance(facts, ProbeFacts)
    assert [d.ordinal for d in facts.devices] == [3]
    assert _jobs(tmp_path)[0]["devices"] == [3]


# --------------------------------------------------------------------------- check's one child
# collect_gpu_and_probes: the GPU facts and the probes in one child, over the same fake (given
# gpu_facts, it prints the facts document first), and the real child on this host.


def _check(
    tmp_path: Path, behaviour: str = "none", at: object = None, **kw: float
) -> tuple[NvmlFacts | Unavailable, CudaFacts | Unavailable, ProbeFacts | Unavailable]:
    deadlines = {"gpu_timeout_s": ROOM_S, "probe_timeout_s": ROOMY_S, **kw}
    argv = _fake(tmp_path, behaviour, at)
    return collect_gpu_and_probes(tiles=TILES, child_argv=argv, **deadlines)


def test_one_child_gives_the_gpu_facts_and_every_probe(tmp_path: Path) -> None:
    nvml, cuda, probes = _check(tmp_path)

    assert nvml == Unavailable("nvml-library-not-found")
    assert isinstance(cuda, CudaFacts)
    assert [d.name for d in cuda.devices] == ["NVIDIA RTX PRO 6000"]
    (tmp_path / "alone").mkdir()
    alone = run_probes(tiles=TILES, child_argv=_fake(tmp_path / "alone"), timeout_s=ROOMY_S)
    assert isinstance(probes, ProbeFacts)
    assert isinstance(alone, ProbeFacts)
    assert msgspec.structs.replace(probes, wall_s=0.0) == msgspec.structs.replace(alone, wall_s=0.0)
    [job] = _jobs(tmp_path)  # one child did it all
    assert job["gpu_facts"] is True
    assert job["steps"] is None


def test_without_a_device_the_child_stops_after_the_facts(tmp_path: Path) -> None:
    _nvml, cuda, probes = _check(tmp_path, "no-device")

    assert cuda == CudaFacts(driver_version="13.0", devices=[])
    assert probes == Unavailable("skipped:no CUDA device")
    assert len(_jobs(tmp_path)) == 1


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("hang", f"gpu-collector-timeout:{ROOM_S:g}s"),
        ("segfault", "gpu-collector-crashed:signal-11"),
        ("exit3", "gpu-collector-crashed:rc=3"),
    ],
)
def test_a_child_that_fails_before_the_facts_gives_collect_gpus_reasons(
    tmp_path: Path, behaviour: str, reason: str
) -> None:
    started = time.monotonic()
    # ROOM_S: the child gets to its hang or crash (and says it started) however slow its
    # start; 1.5 s for the hang killed it before it had written its job, under load.
    nvml, cuda, probes = _check(tmp_path, behaviour, "facts", gpu_timeout_s=ROOM_S)

    assert nvml == cuda == Unavailable(reason)
    assert probes == Unavailable(f"skipped:no CUDA device ({reason})")
    assert len(_jobs(tmp_path)) == 1  # no probe child after it
    assert time.monotonic() - started < HANG_S / 10  # the deadline, not the hang


def test_garbage_instead_of_the_facts_ends_the_child_at_once(tmp_path: Path) -> None:
    started = time.monotonic()
    # The fake sleeps HANG_S after the garbage: only the parent's decision ends it before
    # the 600 s deadline.
    nvml, cuda, probes = _check(tmp_path, "garbage-facts", gpu_timeout_s=600)

    assert nvml == cuda == Unavailable("gpu-collector-bad-output")
    assert probes == Unavailable("skipped:no CUDA device (gpu-collector-bad-output)")
    assert time.monotonic() - started < 600 / 10  # at once, not at the deadline


def test_after_the_facts_a_hang_is_the_steps_deadline_not_the_facts_one(tmp_path: Path) -> None:
    # The hung step outlasts the facts' deadline (ROOM_S from the start): it is named by the
    # step deadline (40 s from its last line), the facts are kept, and a fresh probe child
    # (without gpu_facts) runs the rest. Both deadlines leave room for a slow start.
    probe_timeout_s = 4 * ROOM_S
    step = f"probe-timeout:{probe_timeout_s / 3:g}s"
    _nvml, cuda, probes = _check(
        tmp_path, "hang", 1, gpu_timeout_s=ROOM_S, probe_timeout_s=probe_timeout_s
    )

    assert isinstance(cuda, CudaFacts)
    assert isinstance(probes, ProbeFacts)
    [device] = probes.devices
    assert device.smem_launch_limit == SM120_OPTIN
    assert [t.launch_error for t in device.tiles] == [None, step, None]
    assert [t.launched for t in device.tiles] == [True, False, True]
    jobs = _jobs(tmp_path)
    assert [j["gpu_facts"] for j in jobs] == [True, False]
    assert jobs[1]["steps"] == [[0, 2]]


def test_a_crash_after_the_facts_keeps_them_and_names_the_signal(tmp_path: Path) -> None:
    _nvml, cuda, probes = _check(tmp_path, "segfault", LIMIT_STEP)

    assert isinstance(cuda, CudaFacts)
    assert isinstance(probes, ProbeFacts)
    [device] = probes.devices
    assert device.smem_launch_limit == Unavailable("probe-crashed:signal-11")
    assert [t.launched for t in device.tiles] == [True, True, True]
    assert _jobs(tmp_path)[1]["steps"] == [[0, 0], [0, 1], [0, 2]]


def test_a_fatal_line_after_the_facts_makes_the_probes_unavailable(tmp_path: Path) -> None:
    _nvml, cuda, probes = _check(tmp_path, "fatal", "start")

    assert isinstance(cuda, CudaFacts)
    assert probes == Unavailable("cuda-error-no-device")


def test_the_real_child_gives_what_the_gpu_facts_child_gives() -> None:
    # On a host without a GPU (CI) both say why not, in the same words; on a GPU host the
    # same devices. The probes are skipped, or measured, accordingly.
    nvml, cuda, probes = collect_gpu_and_probes(
        tiles=TILES, gpu_timeout_s=60, child_argv=[sys.executable, "-m", CHILD_MODULE]
    )
    nvml_alone, cuda_alone = collect_gpu(60, child_argv=[sys.executable, "-m", GPU_CHILD])

    assert _identity(nvml) == _identity(nvml_alone)
    assert _identity(cuda) == _identity(cuda_alone)
    skipped = skipped_for(cuda)
    if skipped is not None:
        assert probes == skipped
    else:
        assert isinstance(probes, ProbeFacts)


def _identity(facts: object) -> object:
    """What does not change between two reads: reasons, names, ordinals."""
    if isinstance(facts, CudaFacts):
        return [(d.ordinal, d.name, d.compute_capability) for d in facts.devices]
    if isinstance(facts, NvmlFacts):
        return [(g.index, g.name, g.pci_bus_id) for g in facts.gpus]
    return facts


def _driver_present() -> bool:
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        return False
    return True


@pytest.mark.skipif(_driver_present(), reason="a CUDA driver is present on this machine")
def test_without_libcuda_the_answer_is_immediate_and_imports_no_binding() -> None:
    # Immediate: no child process is started (any would fail the script). A time bound
    # (0.5 s) said it before, and a loaded machine can stall any process that long.
    code = (
        "import subprocess, sys\n"
        "def no_child(*args, **kwargs):\n"
        "    raise AssertionError('a child process was started')\n"
        "subprocess.Popen = no_child\n"
        "from blackwell_doctor.ruledata.tileplan import Tile\n"
        "from blackwell_doctor.collect.probe.runner import run_probes\n"
        "r = run_probes(tiles=[Tile(m=128, n=128, k=64, epilogue_bytes=0)])\n"
        "print(repr(r), any(m == 'cuda' or m.startswith('cuda.') for m in sys.modules))\n"
    )
    src = str(Path(__file__).resolve().parents[1] / "src")
    out = subprocess.run(
        [sys.executable, "-c", code],
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
        env={"PYTHONPATH": src, "PATH": "/usr/bin:/bin"},
    ).stdout
    assert out.strip() == "Unavailable(reason='libcuda-not-found') False"


# --------------------------------------------------------------------------- issue 39: clocks


def _gpu_run(child_argv: list[str], *, health: bool = False) -> GpuRun:
    return collect_gpu_run(
        tiles=TILES,
        child_argv=child_argv,
        health=health,
        gpu_timeout_s=ROOM_S,
        probe_timeout_s=ROOMY_S,
    )


def test_clock_readings_under_load_come_back_by_bus_id_with_the_health_asked_for(
    tmp_path: Path,
) -> None:
    run = _gpu_run(_fake(tmp_path), health=True)
    [job] = _jobs(tmp_path)
    assert (job["gpu_facts"], job["health"], job["sample_clocks"]) == (True, True, True)
    assert run.health == []  # the GPU facts child's answer, passed through
    assert isinstance(run.samples, dict)
    [(bus, taken)] = run.samples.items()
    assert bus == "0000:01:00.0"
    # Five readings per timed tile (one per launch), in step order.
    assert len(taken) == 5 * len(TILES)
    assert [s.pcie_replays for s in taken[::5]] == list(range(len(TILES)))


def test_no_reading_is_asked_for_without_health(tmp_path: Path) -> None:
    run = _gpu_run(_fake(tmp_path))
    [job] = _jobs(tmp_path)
    assert (job["health"], job["sample_clocks"]) == (False, False)
    assert run.health is None
    assert run.samples == {}


def test_readings_of_finished_steps_survive_a_child_that_dies(tmp_path: Path) -> None:
    run = _gpu_run(_fake(tmp_path, "segfault", 1), health=True)
    assert isinstance(run.samples, dict)
    taken = run.samples["0000:01:00.0"]
    # Step 1 killed the first child; the second ran step 2: steps 0 and 2 were read.
    assert sorted({s.pcie_replays or 0 for s in taken}) == [0, 2]
    assert isinstance(run.probes, ProbeFacts)


def test_a_health_run_without_a_device_says_why_for_the_readings(tmp_path: Path) -> None:
    run = _gpu_run(_fake(tmp_path, "no-device"), health=True)
    assert isinstance(run.samples, Unavailable)
    assert run.samples.reason.startswith("skipped:no CUDA device")
