"""collect_gpu: the child process, its deadline, its failures, and the no-driver fast path."""

from __future__ import annotations

import contextlib
import ctypes
import json
import os
import select
import signal
import subprocess
import sys
import time
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.gpu import CHILD_MODULE, GpuDocument, collect_gpu
from blackwell_doctor.facts.document import NvmlFacts, NvmlGpu, Unavailable


def _python(code: str) -> list[str]:
    return [sys.executable, "-c", code]


def _driver_present() -> bool:
    for name in ("libnvidia-ml.so.1", "libcuda.so.1"):
        try:
            ctypes.CDLL(name)
        except OSError:
            continue
        return True
    return False


# How long the hanging children sleep: the deadlines below, not this, must end them.
HANG_S = 600
# A deadline that a child's interpreter start (and its grandchild's launch) never reaches,
# however loaded the machine: 1.5 s gave a loaded 2-core VM little room.
ROOM_S = 30.0


def test_a_child_that_hangs_is_cut_off_at_the_deadline() -> None:
    # A start slower than the 0.5 s deadline ends the same way.
    started = time.monotonic()

    nvml, cuda = collect_gpu(0.5, child_argv=_python(f"import time; time.sleep({HANG_S})"))

    elapsed = time.monotonic() - started
    assert nvml == Unavailable("gpu-collector-timeout:0.5s")
    assert cuda == Unavailable("gpu-collector-timeout:0.5s")
    assert 0.5 <= elapsed < HANG_S / 10


def test_the_deadline_also_ends_what_the_child_started(tmp_path: Path) -> None:
    """A grandchild holding the output pipe must neither block the parent nor survive it."""
    pid_file = tmp_path / "grandchild.pid"
    code = (
        "import subprocess, sys, time\n"
        f"p = subprocess.Popen([sys.executable, '-c', 'import time; time.sleep({HANG_S})'])\n"
        f"open({str(pid_file)!r}, 'w').write(str(p.pid))\n"
        f"time.sleep({HANG_S})\n"
    )
    started = time.monotonic()

    # ROOM_S: the grandchild is started (and its pid written) before the deadline.
    nvml, _cuda = collect_gpu(ROOM_S, child_argv=_python(code))

    assert time.monotonic() - started < HANG_S / 10
    assert nvml == Unavailable(f"gpu-collector-timeout:{ROOM_S:g}s")
    grandchild = int(pid_file.read_text())
    ended = _ends_within(grandchild, ROOM_S)
    if not ended:  # a failed test leaves nothing behind
        with contextlib.suppress(OSError):
            os.kill(grandchild, signal.SIGKILL)
    assert ended


def _ends_within(pid: int, timeout_s: float) -> bool:
    """Whether the process ``pid`` (not a child of ours) has ended or ends within
    ``timeout_s``: its pidfd becomes readable when it exits."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True  # gone, and reaped
    try:
        return bool(select.select([fd], [], [], timeout_s)[0])
    finally:
        os.close(fd)


def test_garbage_output_is_a_bad_output_reason() -> None:
    nvml, cuda = collect_gpu(10, child_argv=_python("print('Segmentation fault (core dumped)')"))
    assert nvml == cuda == Unavailable("gpu-collector-bad-output")


def test_json_of_the_wrong_shape_is_a_bad_output_reason() -> None:
    doc = json.dumps({"nvml": {"status": "ok"}, "cuda": 7})
    nvml, _cuda = collect_gpu(10, child_argv=_python(f"print({doc!r})"))
    assert nvml == Unavailable("gpu-collector-bad-output")


def test_a_nonzero_exit_is_a_crash_with_its_code() -> None:
    nvml, cuda = collect_gpu(10, child_argv=_python("import sys; print('{}'); sys.exit(3)"))
    assert nvml == cuda == Unavailable("gpu-collector-crashed:rc=3")


def test_death_by_signal_is_a_crash_with_the_signal() -> None:
    nvml, _cuda = collect_gpu(10, child_argv=_python("import os; os.abort()"))
    assert nvml == Unavailable("gpu-collector-crashed:signal-6")


def test_a_child_that_cannot_start_is_a_reason_not_an_exception(tmp_path: Path) -> None:
    nvml, _cuda = collect_gpu(10, child_argv=[str(tmp_path / "no-such-python")])
    assert nvml == Unavailable("gpu-collector-start-failed:FileNotFoundError")


def test_the_childs_document_is_decoded_with_both_halves() -> None:
    document = GpuDocument(
        nvml=NvmlFacts(
            driver_version="580.95.05",
            cuda_driver_version="13.0",
            nvml_version=Unavailable("nvml-function-not-found"),
            gpus=[
                NvmlGpu(
                    index=0,
                    name="NVIDIA GB10",
                    uuid="GPU-0",
                    pci_bus_id="000f:01:00.0",
                    compute_capability=(12, 1),
                    memory_total_bytes=Unavailable("not-supported"),
                )
            ],
        ),
        cuda=Unavailable("cuda-error-no-device"),
    )
    wire = msgspec.json.encode(document).decode()

    nvml, cuda = collect_gpu(10, child_argv=_python(f"print({wire!r})"))

    assert nvml == document.nvml
    assert cuda == Unavailable("cuda-error-no-device")


def test_the_real_child_runs_and_reports_this_host() -> None:
    nvml, cuda = collect_gpu(60, child_argv=[sys.executable, "-m", CHILD_MODULE])
    if _driver_present():
        assert not isinstance(nvml, Unavailable) or not nvml.reason.startswith("gpu-collector")
        assert not isinstance(cuda, Unavailable) or not cuda.reason.startswith("gpu-collector")
    else:
        assert nvml == Unavailable("nvml-library-not-found")
        assert cuda == Unavailable("libcuda-not-found")


def test_without_a_driver_the_answer_is_immediate_and_imports_no_binding() -> None:
    if _driver_present():
        pytest.skip("this host has an NVIDIA driver library: no fast path")
    code = (
        "import json, sys, time\n"
        "from blackwell_doctor.collect.gpu import collect_gpu\n"
        "started = time.perf_counter()\n"
        "nvml, cuda = collect_gpu(child_argv=None)\n"
        "print(json.dumps({'seconds': time.perf_counter() - started,\n"
        "  'nvml': nvml.reason, 'cuda': cuda.reason,\n"
        "  'bindings': sorted(m for m in sys.modules\n"
        "     if m == 'pynvml' or m.startswith('cuda') or m.endswith(('.nvml', '.cuda')))}))\n"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, check=True, timeout=60, env=env
    )

    result = json.loads(done.stdout)
    assert result["nvml"] == "nvml-library-not-found"
    assert result["cuda"] == "libcuda-not-found"
    assert result["bindings"] == []
    assert result["seconds"] < 0.05
