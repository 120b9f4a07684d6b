"""The stack.* verdicts' compatibility rules (CUDA C++ Programming Guide: binary and PTX
compatibility; Blackwell compatibility guide: a and f targets). The real artefacts are
judged in tests/test_audit_real.py."""

from __future__ import annotations

import pytest
from msgspec.structs import replace

from blackwell_doctor.facts.stack import GpuPackage, KernelFile, KernelUnit
from blackwell_doctor.ruledata.stack import load_stack_data
from blackwell_doctor.rules.stack import Verdict, judge_file, judge_package, runs_on


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


def test_units_loaded_by_the_library_count_and_lto_only_units_do_not() -> None:
    # libcufft.so.12: an sm_75 stub in .nv_fatbin, the kernels in the data it loads itself.
    f = KernelFile(
        path="libcufft.so.12",
        size=1,
        units=[KernelUnit(sass=["sm_75"])],
        loaded=[
            KernelUnit(sass=["sm_90"], count=393),
            KernelUnit(sass=["sm_120"], count=420),
            KernelUnit(lto=["lto_75"], count=12728),
        ],
    )
    v = judge_file(f, (9, 0), (9, 0))
    assert (v.verdict, v.units, v.loaded, v.units_without) == (Verdict.NATIVE, 814, 813, 421)
    assert judge_file(f, (12, 1), (9, 0)).verdict is Verdict.NATIVE
    # No SASS or PTX for 10.0 here (the real one has sm_100), only the lto_75 LTO-IR it loads
    # itself: it must link that through nvJitLink at first use, a JIT.
    lto = judge_file(f, (10, 0), (9, 0))
    assert lto.verdict is Verdict.JIT
    assert "nvJitLink at first use" in lto.reason
    # Without the LTO-IR, a library that chooses what it loads is not judged; one without
    # loaded fatbins fails.
    no_lto = replace(f, loaded=f.loaded[:2])
    assert judge_file(no_lto, (10, 0), (9, 0)).verdict is Verdict.NOT_JUDGED
    assert judge_file(_file(KernelUnit(sass=["sm_75"])), (10, 0), None).verdict is Verdict.NO_KERNEL


def test_lto_ir_is_compiled_only_by_nvjitlink_never_by_the_driver() -> None:
    """CUDA 12.0+ drivers JIT-compile PTX only, never NVVM IR (LTO-IR): in .nv_fatbin alone
    it is no kernel; loaded by the library itself it is its nvJitLink link at first use,
    brief under [jit] warn_bytes; LTO-IR follows PTX's forward rule (lto_75 for 12.0, an
    lto_90a only for 9.0)."""
    in_fatbin = _file(KernelUnit(sass=["sm_80"]), KernelUnit(lto=["lto_90"], lto_bytes=6792))
    v = judge_file(in_fatbin, (12, 0), (9, 0), 2**20)
    assert v.verdict is Verdict.NO_KERNEL
    assert "LTO-IR in .nv_fatbin, which the driver does not load" in v.reason
    # The same file also loading fatbins itself (none for 12.0): it chooses, not judged.
    chooses = replace(in_fatbin, loaded=[KernelUnit(sass=["sm_90"])])
    assert judge_file(chooses, (12, 0), (9, 0), 2**20).verdict is Verdict.NOT_JUDGED
    loaded = KernelFile(
        path="libx.so",
        size=1,
        units=[KernelUnit(sass=["sm_80"])],
        loaded=[KernelUnit(lto=["lto_75"], count=3, lto_bytes=3 * 6792)],
    )
    v = judge_file(loaded, (12, 0), (9, 0), 2**20)
    assert (v.verdict, v.lto_bytes, v.units) == (Verdict.JIT_BRIEF, 20376, 1)
    assert judge_file(loaded, (12, 0), (9, 0), 2**14).verdict is Verdict.JIT
    specific = replace(loaded, loaded=[KernelUnit(lto=["lto_90a"], lto_bytes=1)])
    assert judge_file(specific, (12, 0), (9, 0), 2**20).verdict is Verdict.NOT_JUDGED
    assert judge_file(specific, (9, 0), (9, 0), 2**20).verdict is Verdict.JIT_BRIEF
    line = judge_package(
        GpuPackage(name="x", version="1", files=[loaded]), (12, 0), (9, 0), load_stack_data()
    ).line()
    assert "20 KiB of LTO-IR to link through nvJitLink at first use" in line
    assert "only LTO-IR (lto_75) for it" in line


def test_a_small_ptx_jit_is_brief_and_a_large_one_or_an_unknown_size_is_not() -> None:
    small = _file(KernelUnit(sass=["sm_86"], ptx=["compute_86"], ptx_bytes=9998), isa="7.1")
    large = _file(KernelUnit(sass=["sm_86"], ptx=["compute_86"], ptx_bytes=2**21), isa="7.1")
    unknown = _file(KernelUnit(sass=["sm_86"], ptx=["compute_86"]), isa="7.1")
    assert judge_file(small, (9, 0), (9, 0), 2**20).verdict is Verdict.JIT_BRIEF
    assert judge_file(large, (9, 0), (9, 0), 2**20).verdict is Verdict.JIT
    assert judge_file(unknown, (9, 0), (9, 0), 2**20).verdict is Verdict.JIT


def _package(name: str, *files: KernelFile) -> GpuPackage:
    return GpuPackage(name=name, version="1", files=list(files))


def test_an_nvidia_cuda_library_without_code_read_for_a_documented_gpu_is_not_judged() -> None:
    data = load_stack_data()
    stub = KernelFile(
        path="nvidia/cu13/lib/libcufftw.so.12", size=1, units=[KernelUnit(sass=["sm_75"])]
    )
    native = KernelFile(
        path="nvidia/cu13/lib/libcufft.so.12", size=1, units=[KernelUnit(sass=["sm_90"])]
    )
    alone = judge_package(_package("nvidia-cufft", stub), (9, 0), (9, 0), data)
    assert alone.verdict is Verdict.NOT_JUDGED
    assert "CUDA 13 libraries are documented for compute capability 7.5 to 12.1" in alone.line()
    both = judge_package(_package("nvidia-cufft", native, stub), (9, 0), (9, 0), data)
    assert both.verdict is Verdict.NATIVE
    assert "1 native, 1 not judged from its fatbins" in both.line()
    # Outside the documented range (CUDA 13 dropped Volta), and any other package: no kernel.
    assert judge_package(_package("nvidia-cufft", stub), (7, 0), None, data).verdict is (
        Verdict.NO_KERNEL
    )
    other = KernelFile(path="vllm/_C.abi3.so", size=1, units=[KernelUnit(sass=["sm_75"])])
    assert judge_package(_package("vllm", other), (9, 0), None, data).verdict is Verdict.NO_KERNEL


def test_a_packages_cubins_are_judged_together_as_per_gpu_variants() -> None:
    # flashinfer-cubin ships one cubin per target and loads the one for the GPU.
    files = [
        KernelFile(path=f"cubins/k_{t}.cubin", size=1, units=[KernelUnit(sass=[t])])
        for t in ("sm_90a", "sm_100a", "sm_120")
    ]
    pv = judge_package(GpuPackage(name="flashinfer-cubin", version="0", files=files), (12, 1), None)
    assert pv.verdict is Verdict.NATIVE
    (only,) = pv.files
    assert only[1].units_without == 2
    hopper = judge_package(
        GpuPackage(name="flashinfer-cubin", version="0", files=files[:2]), (12, 0), None
    )
    assert hopper.verdict is Verdict.NO_KERNEL


def test_an_image_ptxas_is_judged_by_its_release_or_said_not_run() -> None:
    """audit --image runs nothing of the image: its ptxas answer is its CUDA release
    (PtxasTarget.by = "release"), or, without one, "not evaluated" (never a pass)."""
    from blackwell_doctor.facts.stack import GpuPackage, PtxasTarget, StackFacts
    from blackwell_doctor.report.results import Status
    from tests.factsutil import load, replace, result

    triton = GpuPackage(name="triton", version="3.3.1")
    base = StackFacts(python="/opt/venv/bin/python3", python_version="3.11", site_dirs=[])
    words = load_stack_data().image.ptxas_not_run.format(image="img:1")
    facts = replace(load("sm120-driver580"), stack=replace(base, packages=[triton]))
    not_run = replace(facts, stack=replace(facts.stack, ptxas_not_run=words))
    got = result(not_run, "stack.triton_ptxas")
    assert got.status is Status.ERROR
    assert "not run: the image was not started" in got.summary
    known = PtxasTarget(
        target="sm_120a", path="/x/ptxas-blackwell", source="bundled", version="12.8",
        ok=True, by="release",
    )  # fmt: skip
    got = result(replace(facts, stack=replace(facts.stack, ptxas=[known])), "stack.triton_ptxas")
    assert got.status is Status.PASS
    assert "knows it by its CUDA release" in got.summary
