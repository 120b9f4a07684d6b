"""Host pre-flight on real GPUs (issue 26): NVML's PCIe link and BAR1, links read under a
host-to-device load, the module's flavour, and the NCCL all-reduce over every pair and all
GPUs through the libnccl.so.2 found on the host; a real hang (one rank left out, so NCCL
waits for ever) killed at its deadline and mapped to NCCL_P2P_DISABLE=1, and a real wrong
sum caught by the comparison; symmetric memory's peer path (a cuMemCreate allocation
shared as a POSIX fd, imported, mapped and written by the peer process, then system-scope
atomic adds through it; never multicast) per pair, with a forced wrong landing, a forced
hang and atomics forced short caught and mapped to VLLM_ALLREDUCE_USE_SYMM_MEM=0."""

from __future__ import annotations

import ctypes
import functools
import sys
import time
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.nccl import find_nccl_library
from blackwell_doctor.collect.nvml import RealNvml, collect_nvml
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.collect.probe.collective import (
    CHILD_MODULE,
    gpu_sets,
    library_label,
    run_collective,
    run_link_load,
    run_pair,
)
from blackwell_doctor.collect.probe.collective_protocol import TEST_FAULT_ENV
from blackwell_doctor.facts.document import (
    CollectiveFacts,
    CollectiveRun,
    LinkLoadFacts,
    ModuleFlavour,
    NvmlFacts,
    NvmlPcieLink,
    decode_facts,
)
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.collective import collective_allreduce

pytestmark = pytest.mark.gpu


@functools.cache
def _gpu_count() -> int:
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return 0
    if nvml.nvmlInit_v2() != 0:
        return 0
    count = ctypes.c_uint(0)
    rc = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    nvml.nvmlShutdown()
    return count.value if rc == 0 else 0


def _nccl_loads() -> bool:
    try:
        ctypes.CDLL(find_nccl_library())
    except OSError:
        return False
    return True


@pytest.fixture(autouse=True)
def _gpus(monkeypatch: pytest.MonkeyPatch) -> None:
    if _gpu_count() < 1:
        pytest.skip("needs an NVIDIA GPU")
    monkeypatch.delenv(TEST_FAULT_ENV, raising=False)


def _need_two() -> None:
    if _gpu_count() < 2:
        pytest.skip(f"needs two GPUs, this host has {_gpu_count()}")
    if not _nccl_loads():
        pytest.skip(f"no NCCL library loads ({find_nccl_library()})")


def test_nvml_reports_each_gpus_link_and_bar1() -> None:
    facts = collect_nvml(RealNvml())
    assert isinstance(facts, NvmlFacts)
    for g in facts.gpus:
        assert isinstance(g.pcie, NvmlPcieLink), g.pcie
        assert g.pcie.max_gen is not None
        assert g.pcie.max_width is not None
        assert isinstance(g.bar1_total_bytes, int)
        assert g.bar1_total_bytes > 0


def test_links_read_under_load_for_every_gpu() -> None:
    facts = run_link_load(_gpu_count())
    assert isinstance(facts, LinkLoadFacts), facts
    assert sorted(g.gpu for g in facts.gpus) == list(range(_gpu_count()))
    for g in facts.gpus:
        assert g.error is None, g
        assert g.current_gen is not None
        assert g.current_width is not None
        assert g.h2d_gbps is not None, g
        assert g.h2d_gbps > 1.0, g


def test_module_flavour_is_told_from_the_loaded_module() -> None:
    platform = collect_platform(HostFS(Path("/")), {})
    flavour = platform.nvidia_module_flavour
    assert isinstance(flavour, ModuleFlavour), flavour
    assert flavour.flavour in ("open", "proprietary"), flavour


def test_every_pair_and_all_gpus_all_reduce_correctly() -> None:
    _need_two()
    facts = run_collective(_gpu_count(), run_timeout_s=60, timeout_s=240)
    assert isinstance(facts, CollectiveFacts), facts
    assert facts.library == library_label(find_nccl_library())
    nccl = [r for r in facts.runs if r.path == "nccl"]
    assert [r.gpus for r in nccl] == gpu_sets(_gpu_count())
    ipc = [r for r in facts.runs if r.path == "cuda-ipc"]
    assert [r.gpus for r in ipc] == [p for p in gpu_sets(_gpu_count()) if len(p) == 2]
    for run in ipc:
        assert run.failure is None, run
        assert run.correct is True, run
    symm = [r for r in facts.runs if r.path == "symm-mem"]
    assert [r.gpus for r in symm] == [p for p in gpu_sets(_gpu_count()) if len(p) == 2]
    for run in symm:
        assert run.failure is None, run
        assert run.correct is True, run
        assert run.multicast in (True, False), run  # the attribute was read
        assert run.atomic is True, run  # every system-scope add through the mapping landed
    for run in nccl:
        assert run.failure is None, run
        assert run.correct is True
        assert run.busbw_gbps is not None, run
        assert run.busbw_gbps > 1.0, run


def _forced(fault: str, deadline: float) -> tuple[CollectiveFacts, float]:
    started = time.monotonic()
    facts = run_collective(
        2, run_timeout_s=deadline, timeout_s=120, env={TEST_FAULT_ENV: fault}, ipc=False
    )
    elapsed = time.monotonic() - started
    assert isinstance(facts, CollectiveFacts), facts
    return facts, elapsed


def test_a_real_nccl_hang_is_killed_at_its_deadline_and_maps_to_p2p_disable() -> None:
    _need_two()
    facts, elapsed = _forced("hang", 10.0)
    default, fallback = facts.runs
    assert default.failure == "collective-timeout:10s at allreduce", default
    assert fallback.env == {"NCCL_P2P_DISABLE": "1"}
    assert fallback.correct is True, fallback
    assert fallback.failure is None, fallback
    assert elapsed < 10.0 + 30.0
    # Judged by the shipped rules on a real host's facts carrying this run.
    fixture = Path(__file__).parent / "fixtures" / "facts" / "h200x2-captured.json"
    host = msgspec.structs.replace(decode_facts(fixture.read_bytes()), collective=facts)
    outcome = collective_allreduce(host, load_rule_data())
    assert outcome.status == "fail"
    assert outcome.case == "p2p_path"
    words = load_rule_data().checks["collective.allreduce"].cases["p2p_path"]
    assert words.commands[0] == "export NCCL_P2P_DISABLE=1"


def test_a_real_wrong_sum_is_caught_and_the_fallback_is_tried() -> None:
    _need_two()
    facts, _ = _forced("wrong-sum", 30.0)
    default, fallback = facts.runs
    assert default.correct is False
    assert default.failure is not None
    assert default.failure.startswith("wrong-sum:rank"), default
    assert fallback.correct is True, fallback


def test_facts_round_trip() -> None:
    _need_two()
    facts = run_collective(2, run_timeout_s=60)
    assert isinstance(facts, CollectiveFacts)
    data = msgspec.json.encode(facts)
    assert msgspec.json.decode(data, type=CollectiveFacts) == facts


def _symm(pair: tuple[int, int], fault: str | None, deadline: float) -> tuple[CollectiveRun, float]:
    started = time.monotonic()
    env = {TEST_FAULT_ENV: fault} if fault else None
    argv = [sys.executable, "-m", CHILD_MODULE]
    (run,) = run_pair(*pair, timeout_s=deadline, argv=argv, env=env, ipc=False, symm=True)
    return run, time.monotonic() - started


def test_symmetric_memory_writes_and_atomics_land_on_every_pair() -> None:
    _need_two()
    for a, b in (p for p in gpu_sets(_gpu_count()) if len(p) == 2):
        for owner, writer in ((a, b), (b, a)):
            run, elapsed = _symm((owner, writer), None, 60.0)
            assert run.failure is None, run
            assert run.correct is True, run
            assert run.atomic is True, run
            assert elapsed < 60.0


def test_atomics_that_fall_short_map_to_symm_mem_off() -> None:
    _need_two()
    run, _ = _symm((0, 1), "symm-atomic-short", 60.0)
    assert run.correct is True, run  # the words landed
    assert run.atomic is False, run
    assert run.failure is not None, run
    assert run.failure.startswith("wrong-atomic:atomic: 16128 of 16384 adds landed"), run
    fixture = Path(__file__).parent / "fixtures" / "facts" / "h200x2-captured.json"
    host = decode_facts(fixture.read_bytes())
    nccl = CollectiveRun(gpus=[0, 1], correct=True, time_s=0.0003, busbw_gbps=200.0)
    ipc = CollectiveRun(gpus=[0, 1], path="cuda-ipc", correct=True)
    facts = CollectiveFacts(library="x", nccl_version="2.28.9", wall_s=1.0, runs=[nccl, ipc, run])
    outcome = collective_allreduce(
        msgspec.structs.replace(host, collective=facts), load_rule_data()
    )
    assert (outcome.status, outcome.case) == ("fail", "symm_mem")


def test_a_forced_wrong_landing_through_symmetric_memory_maps_to_symm_mem_off() -> None:
    _need_two()
    facts = run_collective(
        2, run_timeout_s=60, timeout_s=180, env={TEST_FAULT_ENV: "symm-wrong"}, symm=True
    )
    assert isinstance(facts, CollectiveFacts), facts
    nccl, ipc, symm = facts.runs
    assert (nccl.path, ipc.path, symm.path) == ("nccl", "cuda-ipc", "symm-mem")
    assert nccl.correct is True, nccl
    assert ipc.correct is True, ipc
    assert symm.correct is False, symm
    assert symm.failure == "wrong-data:symm: differs from the pattern at word 1", symm
    fixture = Path(__file__).parent / "fixtures" / "facts" / "h200x2-captured.json"
    host = msgspec.structs.replace(decode_facts(fixture.read_bytes()), collective=facts)
    outcome = collective_allreduce(host, load_rule_data())
    assert outcome.status == "fail"
    assert outcome.case == "symm_mem"
    words = load_rule_data().checks["collective.allreduce"].cases["symm_mem"]
    assert words.commands[0] == "export VLLM_ALLREDUCE_USE_SYMM_MEM=0"


def test_a_forced_symmetric_memory_hang_is_killed_at_its_deadline() -> None:
    _need_two()
    run, elapsed = _symm((0, 1), "symm-hang", 8.0)
    assert run.failure == "collective-timeout:8s at symm-write", run
    assert elapsed < 8.0 + 30.0


def test_a_symmetric_memory_hang_past_the_gate_is_killed_at_the_runs_deadline() -> None:
    # The first pair starts beside the all-reduce and waits at its gate (issue 36): its
    # deadline is the run's from the gate, not the overall one from its start.
    _need_two()
    started = time.monotonic()
    facts = run_collective(
        2, run_timeout_s=8, timeout_s=120, env={TEST_FAULT_ENV: "symm-hang"}, symm=True
    )
    elapsed = time.monotonic() - started
    assert isinstance(facts, CollectiveFacts), facts
    nccl, ipc, symm = facts.runs
    assert nccl.correct is True, nccl
    assert ipc.correct is True, ipc
    assert symm.failure == "collective-timeout:8s at symm-write", symm
    assert elapsed < 8.0 + 30.0
