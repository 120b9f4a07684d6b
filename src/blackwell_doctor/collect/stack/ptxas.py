"""The ptxas Triton will use, asked to compile a trivial kernel for a target (no GPU needed).

Triton's NVIDIA backend (triton/backends/nvidia/compiler.py, ``_path_to_binary``) takes
``TRITON_<NAME>_PATH`` from the environment, else its bundled ``backends/nvidia/bin/<name>``;
3.3 and 3.4 use a second binary, ``ptxas-blackwell``, for arch >= 100 where it is bundled.
The binary belongs to the audited environment: it runs isolated
(:func:`~blackwell_doctor.collect.childproc.run_isolated`: a fresh temporary directory, an
environment of PATH and LD_LIBRARY_PATH alone, a deadline, its output capped). The
TRITON_*_PATH variables choose it here; they are not passed to it.
"""

from __future__ import annotations

import re
import tempfile
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path

from blackwell_doctor.collect.childproc import ChildResult, run_isolated
from blackwell_doctor.facts.stack import PtxasSource, PtxasTarget

DEFAULT_TIMEOUT_S = 30.0
# `ptxas --version` prints four lines, a compile nothing or its errors: past this, killed.
MAX_OUTPUT_BYTES = 1 << 20
_RELEASE = re.compile(rb"release (\d+\.\d+)")
# What `ptxas --version` prints is a string in the binary itself (ptxas 12.4 to 13.0).
BINARY_RELEASE = re.compile(rb"Cuda compilation tools, release (\d+\.\d+)")


def _ptx(target: str, isa: str) -> str:
    return (
        f".version {isa}\n.target {target}\n.address_size 64\n\n"
        ".visible .entry blackwell_doctor_probe(.param .u64 out)\n{\n"
        "    .reg .u64 %rd<2>;\n    .reg .u32 %r<2>;\n"
        "    ld.param.u64 %rd1, [out];\n    mov.u32 %r1, %tid.x;\n"
        "    st.global.u32 [%rd1], %r1;\n    ret;\n}\n"
    )


def _arch(target: str) -> int:
    return int(re.sub(r"\D", "", target.split("_", 1)[1]))


def triton_ptxas(
    bin_dir: Path,
    target: str,
    environ: Mapping[str, str],
    is_file: Callable[[Path], bool] = Path.is_file,
) -> tuple[Path, PtxasSource]:
    """The ptxas Triton picks for ``target`` (``sm_120a``), and where it came from
    (``is_file``: whether a path is a file there, on this host or in an image)."""
    if _arch(target) >= 100:
        override = environ.get("TRITON_PTXAS_BLACKWELL_PATH")
        if override and is_file(Path(override)):
            return Path(override), "TRITON_PTXAS_BLACKWELL_PATH"
        if is_file(bin_dir / "ptxas-blackwell"):
            return bin_dir / "ptxas-blackwell", "bundled"
    override = environ.get("TRITON_PTXAS_PATH")
    if override and is_file(Path(override)):
        return Path(override), "TRITON_PTXAS_PATH"
    return bin_dir / "ptxas", "bundled"


def _first_error(text: bytes) -> str:
    lines = [ln.strip() for ln in text.decode("utf-8", "replace").splitlines() if ln.strip()]
    errors = [ln for ln in lines if "error" in ln.lower() or "fatal" in ln.lower()]
    return (errors or lines or ["no output"])[0][:400]


def _run(argv: list[str], timeout_s: float, environ: Mapping[str, str]) -> ChildResult:
    return run_isolated(argv, timeout_s, max_stdout_bytes=MAX_OUTPUT_BYTES, environ=environ)


def _ending(result: ChildResult, timeout_s: float) -> str:
    """Why a ptxas that did not exit was stopped, in words."""
    if result.ending == "output-limit":
        return f"ptxas printed more than {MAX_OUTPUT_BYTES >> 20} MiB: stopped"
    return f"ptxas {result.ending} after {timeout_s:g} s"


def compile_probe(
    bin_dir: Path,
    targets: Sequence[tuple[str, str]],
    environ: Mapping[str, str],
    timeout_s: float = DEFAULT_TIMEOUT_S,
    versions: dict[Path, str | None] | None = None,
) -> list[PtxasTarget]:
    """For each (target, PTX ISA) pair: Triton's ptxas compiling a trivial kernel for it.
    ``environ`` chooses the binary (TRITON_*_PATH) and gives it PATH and LD_LIBRARY_PATH.
    ``versions``: what each binary's ``--version`` answered, kept across calls (a binary is
    asked once)."""
    results: list[PtxasTarget] = []
    if versions is None:
        versions = {}
    with tempfile.TemporaryDirectory(prefix="bd-ptxas-", ignore_cleanup_errors=True) as tmp:
        for target, isa in targets:
            ptxas, source = triton_ptxas(bin_dir, target, environ)
            if not ptxas.is_file():
                results.append(
                    PtxasTarget(
                        target=target,
                        path=str(ptxas),
                        source=source,
                        version=None,
                        ok=False,
                        detail="ptxas not found",
                    )
                )
                continue
            if ptxas not in versions:
                v = _run([str(ptxas), "--version"], timeout_s, environ)
                m = _RELEASE.search(v.stdout) if v.ending == "exited" else None
                versions[ptxas] = m.group(1).decode() if m else None
            src = Path(tmp) / f"{target}.ptx"
            src.write_text(_ptx(target, isa))
            argv = [str(ptxas), f"--gpu-name={target}", str(src), "-o", str(src) + ".cubin"]
            r = _run(argv, timeout_s, environ)
            if r.ending != "exited":
                ok, detail = False, _ending(r, timeout_s)
            else:
                ok = r.returncode == 0
                detail = "" if ok else _first_error(r.stderr_tail + r.stdout)
            results.append(
                PtxasTarget(
                    target=target,
                    path=str(ptxas),
                    source=source,
                    version=versions[ptxas],
                    ok=ok,
                    detail=detail,
                )
            )
    return results
