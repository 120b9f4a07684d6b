"""``audit --python`` runs nothing of the audited environment as the auditor: no ``.pth``
line, no ``sitecustomize`` (the interpreter starts with ``-I -S``, and its site directories
are worked out as data), and the binaries it does run (the interpreter, Triton's ptxas,
nvcc) get a fresh temporary directory and an environment without our tokens, credentials
or proxies. An interpreter that floods its output is stopped at a cap: a one-line usage
error, in bounded memory."""

from __future__ import annotations

import contextlib
import json
import os
import resource
import signal
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.childproc import run_child
from blackwell_doctor.collect.stack.interpreter import ask_interpreter
from blackwell_doctor.collect.stack.ptxas import compile_probe
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, REPO
from tests.test_audit_runtimes import _install

GB10 = str(FACTS_FIXTURES / "dgx-spark-gb10.json")
SECRETS = {
    "HF_TOKEN": "hf_secret_token",
    "AWS_SECRET_ACCESS_KEY": "aws-secret",
    "https_proxy": "http://user:pass@proxy:3128",
}


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _venv(where: Path, *, system_site: bool = False) -> tuple[Path, Path]:
    """A real venv (no pip): its interpreter and its site-packages."""
    flags = ["--system-site-packages"] if system_site else []
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", *flags, str(where)], check=True)
    (site,) = where.glob("lib/python*/site-packages")
    return where / "bin" / "python", site


def _script(path: Path, text: str) -> Path:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(text)
    path.chmod(0o755)
    return path


def _audit(python: Path, capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    r = run(
        ["audit", "--python", str(python), "--facts", GB10, "-f", "json", "--embed-facts"], capsys
    )
    assert r.code in (0, 1), r.err
    return r.code, json.loads(r.out)["facts"]["stack"]


# --------------------------------------------------------------------------- no code run


def test_a_pth_file_or_sitecustomize_of_the_audited_environment_is_not_run(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    python, site = _venv(tmp_path / "venv")
    marker = tmp_path / "ran"
    (site / "evil.pth").write_text(f"import pathlib; pathlib.Path({str(marker)!r}).touch()\n")
    (site / "sitecustomize.py").write_text(
        f"import pathlib; pathlib.Path({str(marker) + '-sitecustomize'!r}).touch()\n"
    )
    # A GPU distribution in the venv's own site-packages, and one in a folder that a .pth
    # file's directory line adds (read as text, as site.py reads it).
    _install(site, "nvidia-cublas-cu12", "12.8.4.1", {"nvidia/cublas/lib/libcublas.so.12": "x"})
    extra = tmp_path / "extra"
    _install(extra, "nvidia-nccl-cu12", "2.27.7", {"nvidia/nccl/lib/libnccl.so.2": "x"})
    (site / "extra.pth").write_text(f"# a comment\n{extra}\n")

    _, stack = _audit(python, capsys)

    assert not marker.exists(), "a .pth line of the audited environment ran"
    assert not Path(str(marker) + "-sitecustomize").exists(), "its sitecustomize ran"
    assert str(site) in stack["site_dirs"]
    assert str(extra) in stack["site_dirs"]
    names = {p["name"]: p["version"] for p in stack["packages"]}
    assert names["nvidia-cublas-cu12"] == "12.8.4.1"
    assert names["nvidia-nccl-cu12"] == "2.27.7"


def _started_with(python: Path) -> list[str]:
    """The sys.path ``python -I`` really starts with (site.py run: .pth lines executed)."""
    out = subprocess.run(
        [str(python), "-I", "-c", "import json, sys; print(json.dumps(sys.path))"],
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    return [p for p in json.loads(out) if p]


def test_a_venv_yields_the_sys_path_its_interpreter_starts_with(tmp_path: Path) -> None:
    python, site = _venv(tmp_path / "venv")
    extra = tmp_path / "extra"
    extra.mkdir()
    (site / "extra.pth").write_text(f"{extra}\n")
    asked = ask_interpreter(python)
    assert list(asked.paths) == _started_with(python)
    assert str(site) in asked.paths
    assert asked.executable == str(python)


def _sites(paths: list[str] | tuple[str, ...]) -> list[str]:
    return [p for p in paths if p.endswith(("site-packages", "dist-packages"))]


def test_a_venv_with_system_site_packages_yields_the_bases_too(tmp_path: Path) -> None:
    python, site = _venv(tmp_path / "with", system_site=True)
    asked = ask_interpreter(python)
    # The base's own .pth files may run code that changes sys.path: the site directories
    # themselves are compared, in order.
    started = _started_with(python)
    assert _sites(asked.paths) == _sites(started)
    assert _sites(asked.paths)[0] == str(site)
    assert len(_sites(asked.paths)) > 1  # the base's site-packages, after the venv's
    without, own = _venv(tmp_path / "without")
    assert _sites(ask_interpreter(without).paths) == [str(own)]


# --------------------------------------------------------------------------- environment


def _dumper(path: Path, dump: Path, answer: str, then: str = "") -> Path:
    """A script that appends its argv, working directory and environment to ``dump``."""
    return _script(
        path,
        f'#!/bin/sh\n{{ echo "== $0"; echo "cwd=$(pwd)"; env; }} >> {dump}\n'
        f"echo '{answer}'\n{then}",
    )


def _records(dump: Path) -> list[tuple[str, str, dict[str, str]]]:
    """(program, working directory, environment) of each run the dump saw."""
    out = []
    for block in dump.read_text().split("== ")[1:]:
        program, cwd, *lines = block.splitlines()
        env = dict(line.split("=", 1) for line in lines if "=" in line)
        out.append((program, cwd.removeprefix("cwd="), env))
    return out


def test_binaries_of_the_audited_environment_run_without_our_environment(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    venv_python, site = _venv(tmp_path / "venv")
    dump = tmp_path / "dump.txt"
    # Triton's bundled ptxas (its RECORD lists it), flashinfer-python (so its JIT's nvcc is
    # looked for, in CUDA_HOME), and the interpreter itself: each dumps what it was given.
    bundled = "triton/backends/nvidia/bin/ptxas"
    _install(site, "triton", "3.5.0", {"triton/__init__.py": "", bundled: ""})
    _dumper(site / bundled, dump, "Cuda compilation tools, release 12.9, V12.9.86")
    _install(site, "flashinfer-python", "0.6.11", {"flashinfer/__init__.py": ""})
    cuda = tmp_path / "cuda"
    _dumper(cuda / "bin" / "nvcc", dump, "Cuda compilation tools, release 12.9, V12.9.86")
    python = _dumper(tmp_path / "wrapper" / "python", dump, "", f'exec {venv_python} "$@"\n')
    for name, value in SECRETS.items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("CUDA_HOME", str(cuda))
    auditor = tmp_path / "auditor"
    auditor.mkdir()
    monkeypatch.chdir(auditor)

    _, stack = _audit(python, capsys)

    targets = len(stack["ptxas"])  # sm_120a, sm_121a
    assert targets
    assert all(r["ok"] for r in stack["ptxas"]), stack["ptxas"]  # it ran and answered
    assert stack["nvcc"]["version"] == "12.9"
    records = _records(dump)
    programs = sorted(Path(program).name for program, _, _ in records)
    # ptxas: --version once, then a compile per target.
    assert programs == ["nvcc", *["ptxas"] * (1 + targets), "python"]
    allowed = {"PATH", "LD_LIBRARY_PATH", "HOME", "TMPDIR", "LANG", "LC_ALL"}
    shell = {"PWD", "OLDPWD", "SHLVL", "_"}  # what sh itself sets
    cwds = set()
    for program, cwd, env in records:
        assert not set(SECRETS) & set(env), program
        assert not any(v in "\n".join(env.values()) for v in SECRETS.values()), program
        assert set(env) - shell <= allowed, (program, sorted(env))
        assert (env["LANG"], env["LC_ALL"]) == ("C", "C")
        # A fresh temporary directory: its working directory, HOME and TMPDIR, removed.
        assert Path(cwd) != auditor
        assert Path(cwd).name.startswith("bd-child-"), cwd
        assert env["HOME"] == env["TMPDIR"] == cwd
        assert not Path(cwd).exists()
        cwds.add(cwd)
    assert len(cwds) == len(records)  # one per run


# --------------------------------------------------------------------------- bounded output


def test_a_child_that_prints_past_the_cap_is_stopped_and_says_so() -> None:
    result = run_child(["yes"], 60.0, max_stdout_bytes=1 << 20)
    assert result.ending == "output-limit"
    assert len(result.stdout) == 1 << 20


# A child writing 50 MB to stderr and then answering, in a process whose files may not
# grow past 10 MB (RLIMIT_FSIZE, which the child inherits): stderr kept in a file killed
# the writer with SIGXFSZ; read from its pipe, only the last 4 kB are kept.
_STDERR_FLOOD = """
import resource, sys
from blackwell_doctor.collect.childproc import run_child
resource.setrlimit(resource.RLIMIT_FSIZE, (10 << 20, 10 << 20))
script = "head -c 50000000 /dev/zero >&2; printf END >&2; echo answer"
r = run_child(["sh", "-ec", script], 120.0)
tail = r.stderr_tail
print(r.ending, r.returncode, r.stdout.strip().decode(), len(tail), tail[-3:].decode())
"""


def test_a_child_that_floods_its_stderr_writes_nothing_to_disk() -> None:
    proc = subprocess.run(
        [sys.executable, "-c", _STDERR_FLOOD], capture_output=True, text=True, timeout=120
    )
    assert proc.returncode == 0, proc.stderr
    assert proc.stdout.split() == ["exited", "0", "answer", "4096", "END"]


def test_a_process_left_holding_stderr_does_not_hold_up_the_result() -> None:
    # sh answers and exits; the sleep it started keeps stderr (not stdout) open.
    result = run_child(["sh", "-c", "sleep 600 >/dev/null & echo $!"], 60.0)
    leftover = int(result.stdout)
    os.kill(leftover, signal.SIGKILL)
    assert (result.ending, result.returncode) == ("exited", 0)


def test_a_ptxas_that_floods_its_output_is_stopped(tmp_path: Path) -> None:
    _script(tmp_path / "ptxas", "#!/bin/sh\nexec yes\n")
    (r,) = compile_probe(tmp_path, [("sm_120a", "8.7")], {})
    assert not r.ok
    assert r.detail == "ptxas printed more than 1 MiB: stopped"


def _limit_memory() -> None:
    resource.setrlimit(resource.RLIMIT_AS, (1 << 30, 1 << 30))


def test_an_interpreter_that_floods_its_output_is_a_one_line_usage_error(
    tmp_path: Path,
) -> None:
    flood = _script(tmp_path / "python", "#!/bin/sh\nexec yes\n")
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "blackwell_doctor",
            "audit",
            "--python",
            str(flood),
            "--facts",
            GB10,
        ],
        cwd=REPO,
        env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg-cache")},
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=_limit_memory,  # 1 GiB of address space: the auditor grew to 2.5 GB
    )
    assert proc.returncode == 2, proc.stderr
    assert "Traceback" not in proc.stderr
    assert proc.stderr.count("\n") == 1, proc.stderr
    assert proc.stderr == (
        f"blackwell-doctor: error: --python {flood}: printed more than 1 MiB "
        "(not the answer of a Python interpreter): stopped\n"
    )


def _gone(pid: int) -> bool:
    """Whether ``pid`` has ended (reaped, or a zombie waiting for init)."""
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (FileNotFoundError, ProcessLookupError):
        return True
    return state in ("Z", "X")


def test_what_an_isolated_binary_leaves_running_is_killed_when_it_exits() -> None:
    # Issue 32's review: a binary of the audited environment that daemonised a helper left
    # it running, in a working directory already removed.
    from blackwell_doctor.collect.childproc import run_isolated

    result = run_isolated(
        ["sh", "-c", "sleep 600 >/dev/null 2>&1 & echo $!"], 60.0, max_stdout_bytes=1 << 10
    )
    leftover = int(result.stdout)
    try:
        assert (result.ending, result.returncode) == ("exited", 0)
        # SIGKILL was sent before run_isolated returned: the kernel ends the process as the
        # signal is delivered, so its state is Z (or gone) at once, or within the reap.
        assert _gone(leftover) or _waited_gone(leftover)
    finally:
        with contextlib.suppress(ProcessLookupError):
            os.kill(leftover, signal.SIGKILL)


def _waited_gone(pid: int) -> bool:
    """:func:`_gone`, asked again as the process's exit is observed (pidfd), 10 s at most."""
    try:
        fd = os.pidfd_open(pid)
    except ProcessLookupError:
        return True
    try:
        import select

        return bool(select.select([fd], [], [], 10.0)[0]) or _gone(pid)
    finally:
        os.close(fd)


def test_an_interpreter_that_prints_deeply_nested_json_is_a_usage_error(
    tmp_path: Path,
) -> None:
    # json.loads raised RecursionError, which ask_interpreter did not catch: exit 4.
    nested = _script(tmp_path / "python", "#!/bin/sh\nprintf '%0100000d' 0 | tr 0 '['\necho\n")
    from blackwell_doctor.collect.stack.interpreter import InterpreterError

    with pytest.raises(InterpreterError, match="not a Python interpreter"):
        ask_interpreter(nested)
