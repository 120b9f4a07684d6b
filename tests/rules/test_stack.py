"""The stack.* verdicts' compatibility rules (CUDA C++ Programming Guide: binary and PTX
compatibility; Blackwell compatibility guide: a and f targets). The real artefacts are
judged in tests/test_audit_real.py."""

from __future__ import annotations

import pytest

from blackwell_doctor.facts.stack import KernelFile, KernelUnit
from blackwell_doctor.rules.stack import Verdict, judge_file, runs_on


@pytest.mark.parametrize(
    ("target", "cc", "runs"),
    [
        ("sm_120", (12, 0), True),
        ("sm_120", (12, 1), True),  # X.y runs on X.z, z >= y
        ("sm_121", (12, 0), False),
        ("sm_90", (12, 0), False),  # never across majors
        ("sm_120a", (12, 1), False),  # a: exactly that one (eugr/spark-vllm-docker#143)
        ("sm_121a", (12, 1), True),
        ("sm_100f", (10, 3), True),  # f: its family
        ("sm_100f", (12, 0), False),
        ("compute_90", (12, 1), True),  # PTX JIT forward
        ("compute_90a", (12, 0), False),
        ("compute_120f", (12, 1), True),
        ("compute_121", (12, 0), False),
    ],
)
def test_runs_on(target: str, cc: tuple[int, int], runs: bool) -> None:
    assert runs_on(target, cc) is runs


def _file(*units: KernelUnit, isa: str | None = None) -> KernelFile:
    return KernelFile(path="lib.so", size=1, units=list(units), ptx_isa=isa)


def test_sm120_only_cubins_with_old_ptx_jit_on_sm121_is_native() -> None:
    f = _file(KernelUnit(sass=["sm_80", "sm_90", "sm_120"], ptx=["compute_90"]))
    assert judge_file(f, (12, 1), (9, 0)).verdict is Verdict.NATIVE


def test_ptx_only_is_jit_when_the_driver_knows_its_isa() -> None:
    f = _file(KernelUnit(sass=["sm_80", "sm_90"], ptx=["compute_90"]), isa="8.8")
    assert judge_file(f, (12, 0), (8, 8)).verdict is Verdict.JIT
    assert judge_file(f, (12, 0), (8, 7)).verdict is Verdict.NO_KERNEL


def test_hopper_only_units_count_but_do_not_sink_the_file() -> None:
    f = _file(KernelUnit(sass=["sm_90a"], count=3), KernelUnit(sass=["sm_120"], count=5))
    v = judge_file(f, (12, 0), None)
    assert (v.verdict, v.units_without, v.units) == (Verdict.NATIVE, 3, 8)
