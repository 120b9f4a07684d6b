"""How a live ``audit`` reads what it judges (issue 36): the GPU facts beside the stack (the
GPU child's half second while the interpreter is asked and the files are scanned), only the
sections its checks and its header read, ptxas for the GPUs' own targets once their facts
are in."""

from __future__ import annotations

import json
import subprocess
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import read_stack
from blackwell_doctor.facts.document import decode_facts
from blackwell_doctor.ruledata.stack import load_stack_data
from tests.cli import run
from tests.conftest import FIXTURES
from tests.test_audit_hostile import _install

# ----------------------------------------------------------------- ptxas after the GPU facts


def _triton(site: Path, log: Path) -> None:
    """A Triton whose bundled ptxas binaries (shell scripts) log each run and answer
    ``--version`` as CUDA 12.8's does."""
    script = (
        "#!/bin/sh\n"
        f'echo "$(basename "$0") $1" >> {log}\n'
        'if [ "$1" = --version ]; then echo "Cuda compilation tools, release 12.8, V12.8.93"; fi\n'
    ).encode()
    bin_dir = "triton/backends/nvidia/bin"
    _install(
        site, "triton", "3.3.1", {f"{bin_dir}/ptxas": script, f"{bin_dir}/ptxas-blackwell": script}
    )
    for name in ("ptxas", "ptxas-blackwell"):
        (site / bin_dir / name).chmod(0o755)


def test_the_gpus_own_targets_are_compiled_after_the_catalogues_asking_each_binary_once(
    tmp_path: Path,
) -> None:
    site, log = tmp_path / "site", tmp_path / "ptxas.log"
    _triton(site, log)
    asked_after: list[list[str]] = []

    def gpu_targets() -> Sequence[str]:
        asked_after.append(log.read_text().splitlines())
        return ["sm_100a", "sm_90a", "sm_121a"]  # sm_121a: the catalogue's already

    stack = read_stack(
        Interpreter(sys.executable, "3", (str(site),)),
        load_stack_data(),
        ptxas_targets=["sm_120a", "sm_121a"],
        more_targets=gpu_targets,
        environ={},
        cache_path=None,
    )

    assert [r.target for r in stack.ptxas] == ["sm_120a", "sm_121a", "sm_100a", "sm_90a"]
    assert all(r.ok and r.version == "12.8" for r in stack.ptxas), stack.ptxas
    runs = log.read_text().splitlines()
    assert asked_after == [runs[:3]]  # the catalogue's targets first
    assert runs == [
        "ptxas-blackwell --version",
        "ptxas-blackwell --gpu-name=sm_120a",
        "ptxas-blackwell --gpu-name=sm_121a",
        "ptxas-blackwell --gpu-name=sm_100a",  # its version already known
        "ptxas --version",
        "ptxas --gpu-name=sm_90a",
    ]


# ------------------------------------------------------------------------------ a live audit

H200 = decode_facts((FIXTURES / "facts" / "h200x2-captured.json").read_bytes())
# How long the GPU facts wait to see the stack's reading start: far past a thread's start
# on a loaded machine. Read one after the other, the GPU facts would wait it out.
MEETING_S = 30.0


@pytest.fixture(scope="module")
def bare_python(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A venv whose one GPU distribution (a cuda-bindings record with no files) makes it an
    environment audit reads (issue 40: one with none is exit 2) in milliseconds."""
    venv = tmp_path_factory.mktemp("bare") / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run(
        [str(python), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
        capture_output=True, text=True, check=True,
    ).stdout.strip()  # fmt: skip
    info = Path(site) / "cuda_bindings-0.0.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: cuda-bindings\nVersion: 0.0\n")
    (info / "RECORD").write_text("")
    return python


class _Live:
    """The GPU child and the AER counters faked with an H200 pair's facts: what a live run
    asked of them, and whether the GPU facts saw the stack's reading under way."""

    def __init__(self, monkeypatch: pytest.MonkeyPatch) -> None:
        from blackwell_doctor.collect import gpu, health
        from blackwell_doctor.collect.stack import inventory

        self.health_asked: list[bool] = []
        self.gpu_facts_read = 0
        self.aer_read = 0
        self.met: list[bool] = []
        self.stack_started = threading.Event()
        real_read_stack = inventory.read_stack

        def collect_gpu_document(*args: Any, health: bool = False, **kwargs: Any) -> Any:
            self.health_asked.append(health)
            self.met.append(self.stack_started.wait(MEETING_S))
            self.gpu_facts_read += 1
            return gpu.GpuDocument(nvml=H200.nvml, cuda=H200.cuda)

        def collect_aer(*args: Any, **kwargs: Any) -> Any:
            self.aer_read += 1
            return []

        def read_stack(*args: Any, **kwargs: Any) -> Any:
            self.stack_started.set()
            return real_read_stack(*args, **kwargs)

        monkeypatch.setattr(gpu, "drivers_load", lambda: True)
        monkeypatch.setattr(gpu, "collect_gpu_document", collect_gpu_document)
        monkeypatch.setattr(health, "collect_aer", collect_aer)
        monkeypatch.setattr(inventory, "read_stack", read_stack)


def test_a_live_audit_reads_the_gpu_facts_beside_the_stack_without_their_health(
    bare_python: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    live = _Live(monkeypatch)

    r = run(["audit", "--python", str(bare_python), "-f", "json"], capsys)

    assert r.code in (0, 1), r.err
    assert live.met == [True]  # the stack's reading was under way while the GPU facts were read
    assert (live.health_asked, live.aer_read) == ([False], 0)
    doc = json.loads(r.out)
    assert doc["host"]["gpus"] == ["NVIDIA H200", "NVIDIA H200"]  # the header's NVML names
    assert {x["id"] for x in doc["results"]} == {
        "stack.kernels", "stack.triton_ptxas", "stack.flashinfer_cache", "stack.backends",
    }  # fmt: skip


def test_an_audit_that_embeds_its_facts_reads_all_of_them(
    bare_python: Path,
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))
    live = _Live(monkeypatch)

    r = run(["audit", "--python", str(bare_python), "-f", "json", "--embed-facts"], capsys)

    assert r.code in (0, 1), r.err
    assert (live.health_asked, live.aer_read) == ([True], 1)
    facts = json.loads(r.out)["facts"]
    assert "not-collected:--select" not in json.dumps(facts)


def test_a_live_audit_of_an_interpreter_that_does_not_answer_is_a_usage_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    # The interpreter is asked on the main thread while the GPU facts are read on another:
    # its error is still one line and exit 2.
    live = _Live(monkeypatch)
    live.stack_started.set()  # no stack is read: the GPU facts need not wait for one
    bogus = tmp_path / "python"
    bogus.write_text("#!/bin/sh\nexit 3\n")
    bogus.chmod(0o755)

    r = run(["audit", "--python", str(bogus)], capsys)

    assert r.code == 2
    assert "exited 3" in r.err
    assert "Traceback" not in r.err
    assert r.err.count("\n") == 1
    assert live.gpu_facts_read == 1
