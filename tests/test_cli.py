"""The command-line contract: exit codes, one-line errors, files written whole."""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from packaging.version import Version

from blackwell_doctor import __version__
from blackwell_doctor.cli import main
from blackwell_doctor.facts.document import SCHEMA_VERSION
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, skip_without

try:
    from hypothesis import HealthCheck, given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

TR = str(FACTS_FIXTURES / "rtxpro6000x4-threadripper-iommu.json")
NO_GPU = str(FACTS_FIXTURES / "no-gpu.json")


def test_warnings_pass_the_default_gate(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["check", "--facts", TR], capsys)
    assert code == 0
    assert re.search(r"\[warn\] +pci\.iommu +expected: ", out)


def test_fail_on_warn_turns_warnings_into_exit_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(["check", "--facts", TR, "--fail-on", "warn"], capsys)
    assert code == 1


def test_a_failing_check_exits_1(capsys: pytest.CaptureFixture[str]) -> None:
    code, _, _ = run(["check", "--facts", str(FACTS_FIXTURES / "sm120-driver580.json")], capsys)
    assert code == 1


def test_strict_exits_3_when_something_was_not_evaluated(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = json.loads(Path(TR).read_text())
    for bridge in doc["pci"]["bridges"]:
        bridge["acs"] = {"status": "unavailable", "reason": "config-space-truncated:/sys/x"}
    facts = tmp_path / "nonroot.json"
    facts.write_text(json.dumps(doc))
    assert run(["check", "--facts", str(facts)], capsys)[0] == 0
    assert run(["check", "--facts", str(facts), "--strict"], capsys)[0] == 3


def test_json_report_is_complete_and_carries_the_exit_code(
    capsys: pytest.CaptureFixture[str],
) -> None:
    code, out, _ = run(["check", "--facts", NO_GPU, "--format", "json", "--embed-facts"], capsys)
    doc = json.loads(out)
    assert code == 1
    assert doc["exit_code"] == 1
    assert doc["schema_version"] == 1
    assert doc["tool"]["name"] == "blackwell-doctor"
    assert doc["summary"]["fail"] == 1
    assert doc["facts"]["nvml"] == {"status": "unavailable", "reason": "nvml-library-not-found"}
    first = doc["results"][0]
    assert set(first) >= {"id", "family", "status", "severity", "title", "summary", "evidence"}


def test_output_file_is_written_whole_and_stdout_stays_empty(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    target = tmp_path / "junit.xml"
    code, out, err = run(["check", "--facts", NO_GPU, "-f", "junit", "-o", str(target)], capsys)
    assert code == 1
    assert out == ""
    assert "exit 1" in err
    assert target.read_text().startswith("<?xml")
    assert [p.name for p in tmp_path.iterdir()] == ["junit.xml"]  # no temp file left


def test_select_and_ignore(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(
        ["check", "--facts", TR, "-f", "json", "--select", "pci,driver", "--ignore", "pci.acs"],
        capsys,
    )
    ids = [r["id"] for r in json.loads(out)["results"]]
    assert ids == ["driver.version", "driver.cuda_version", "driver.consistency", "pci.iommu"]
    assert code == 0


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--format", "xml"], "'xml' is not one of"),
        (["check", "--bogus"], "No such option: --bogus"),
        (["check", "--fail-on", "error"], "'error' is not one of"),
        (["check", "--facts", "/nonexistent/facts.json"], "cannot read facts file"),
        (["check", "--facts", NO_GPU, "--select", "drvier"], "no check id or family matches"),
        (["check", "--host-root", "/nonexistent-root"], "is not a directory"),
        (["collect", "--host-root", "/nonexistent-root"], "is not a directory"),
        (["check", "--facts", NO_GPU, "-o", "/nonexistent/dir/out.txt"], "cannot write"),
        (["nonsense"], "No such command"),
    ],
)
def test_usage_errors_are_one_line_and_exit_2(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(argv, capsys)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1
    assert "Traceback" not in err + out


def _facts_doc() -> dict[str, object]:
    doc: dict[str, object] = json.loads(Path(NO_GPU).read_text())
    return doc


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda d: d.update(schema_version=SCHEMA_VERSION + 1), "newer than this tool"),
        (lambda d: d.update(schema_version=0), "not valid"),
        (lambda d: d.pop("platform"), "missing required field `platform`"),
        (lambda d: d.update(nvml={"status": "maybe"}), "$.nvml"),
        (lambda d: d.update(env={"A": 1}), "$.env"),
    ],
)
def test_malformed_facts_exit_2_naming_the_problem(
    mutate: object, message: str, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    doc = _facts_doc()
    mutate(doc)  # type: ignore[operator]
    path = tmp_path / "facts.json"
    path.write_text(json.dumps(doc))
    code, _, err = run(["check", "--facts", str(path)], capsys)
    assert code == 2
    assert message in err
    assert err.count("\n") == 1


def test_truncated_facts_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    data = Path(TR).read_bytes()
    path = tmp_path / "truncated.json"
    path.write_bytes(data[: len(data) // 2])
    code, _, err = run(["check", "--facts", str(path)], capsys)
    assert code == 2
    assert "malformed" in err or "truncated" in err


@settings(
    max_examples=150, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(data=st.binary(max_size=2048))
def test_any_bytes_as_facts_exit_2_with_one_line(
    data: bytes, tmp_path_factory: pytest.TempPathFactory
) -> None:
    path = tmp_path_factory.mktemp("fuzz") / "facts.json"
    path.write_bytes(data)
    import contextlib
    import io

    err = io.StringIO()
    with contextlib.redirect_stderr(err), contextlib.redirect_stdout(io.StringIO()):
        code = main(["check", "--facts", str(path)])
    assert code == 2
    assert err.getvalue().count("\n") == 1


@settings(
    max_examples=60, deadline=None, suppress_health_check=[HealthCheck.function_scoped_fixture]
)
@given(
    value=st.recursive(
        st.none() | st.booleans() | st.integers() | st.text(max_size=8),
        lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner),
        max_leaves=12,
    )
)
def test_any_json_value_in_a_facts_field_is_rejected_or_judged_never_a_crash(
    value: object,
) -> None:
    import contextlib
    import io

    doc = _facts_doc()
    doc["pci"] = value
    stdin = io.BytesIO(json.dumps(doc).encode())
    err = io.StringIO()
    fake_stdin = io.TextIOWrapper(stdin)
    with (
        contextlib.redirect_stderr(err),
        contextlib.redirect_stdout(io.StringIO()),
        pytest.MonkeyPatch.context() as mp,
    ):
        mp.setattr(sys, "stdin", fake_stdin)
        code = main(["check", "--facts", "-"])
    assert code in (0, 1, 2), err.getvalue()


def test_internal_error_exits_4_with_a_crash_log(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import blackwell_doctor.rules.evaluate as evaluate_module

    def broken(*args: object, **kwargs: object) -> None:
        raise RuntimeError("simulated bug")

    monkeypatch.setattr(evaluate_module, "evaluate", broken)
    code, _, err = run(["check", "--facts", NO_GPU], capsys)
    assert code == 4
    assert "internal error: RuntimeError: simulated bug" in err
    log = Path(err.split("details are in ")[1].strip())
    assert "simulated bug" in log.read_text()
    log.unlink()


# A check run that fills the address space until MemoryError, in a child whose RLIMIT_AS
# is its size then plus 256 MiB: filled in ever smaller pieces, down to 64 bytes, so that
# what is left is what the crash handler frees or holds back. ``local``: what filled
# memory is held by the failing frame (a child's output read without a bound was);
# ``global``: by a module, past the handler's reach.
_FILL_MEMORY = """
import resource, sys
import blackwell_doctor.rules.evaluate as evaluate_module
from packaging.version import Version

from blackwell_doctor import __version__
from blackwell_doctor.cli import main

HELD = []


def fill(*args, **kwargs):
    held = HELD if sys.argv[1] == "global" else []
    size = 1 << 20
    while True:
        try:
            held.append(bytes(size))
        except MemoryError:
            if size <= 64:
                raise
            size //= 4


evaluate_module.evaluate = fill
with open("/proc/self/status") as fh:
    vm = next(int(line.split()[1]) << 10 for line in fh if line.startswith("VmSize:"))
resource.setrlimit(resource.RLIMIT_AS, (vm + (256 << 20), vm + (256 << 20)))
sys.exit(main(sys.argv[2:]))
"""


@pytest.mark.parametrize("held", ["local", "global"])
def test_out_of_memory_exits_4_with_one_line_and_a_crash_log(held: str, tmp_path: Path) -> None:
    env = {**os.environ, "TMPDIR": str(tmp_path), "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    argv = ["check", "--facts", NO_GPU]
    # A run before, as on any user's machine: the caches the crash handler reads are there.
    before = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", *argv], env=env, capture_output=True
    )
    assert before.returncode in (0, 1), before.stderr
    assert list((tmp_path / "xdg").rglob("*.msgpack"))
    proc = subprocess.run(
        [sys.executable, "-c", _FILL_MEMORY, held, *argv],
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert proc.returncode == 4, proc.stderr
    assert "Traceback" not in proc.stderr
    first, second = proc.stderr.splitlines()
    assert first == "blackwell-doctor: internal error: MemoryError: out of memory"
    log = Path(second.split("details are in ")[1])
    assert log.parent == tmp_path
    assert "in fill" in log.read_text()  # the traceback, down to where memory ran out


def test_interrupt_exits_130(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import blackwell_doctor.rules.evaluate as evaluate_module

    def interrupted(*args: object, **kwargs: object) -> None:
        raise KeyboardInterrupt

    monkeypatch.setattr(evaluate_module, "evaluate", interrupted)
    code, _, err = run(["check", "--facts", NO_GPU], capsys)
    assert code == 130
    assert err == "blackwell-doctor: interrupted\n"


def test_the_installed_entry_point_runs_as_a_process() -> None:
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "check", "--facts", TR, "-f", "json"],
        capture_output=True,
        timeout=60,
        check=False,
    )
    assert proc.returncode == 0, proc.stderr
    assert json.loads(proc.stdout)["summary"]["warn"] == 3  # pci.iommu, pci.acs, probe.tiles


def test_version_and_help(capsys: pytest.CaptureFixture[str]) -> None:
    code, out, _ = run(["--version"], capsys)
    assert code == 0
    assert out.splitlines()[0] == f"blackwell-doctor {__version__}"  # tests/test_version.py
    Version(__version__)  # PEP 440, as the build wrote it (or the fallback)
    code, out, _ = run(["check", "--help"], capsys)
    assert code == 0
    for option in ("--facts", "--fail-on", "--strict", "--select", "--no-probe", "--host-root"):
        assert option in out


def test_the_cli_format_choices_are_exactly_the_renderers(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blackwell_doctor.render import Format

    for fmt in Format:
        code, out, _ = run(["check", "--facts", NO_GPU, "--format", fmt.value], capsys)
        assert code == 1, fmt
        assert out, fmt
    code, _, err = run(["check", "--facts", NO_GPU, "--format", "yaml"], capsys)
    assert code == 2
    assert "'yaml' is not one of 'rich', 'json', 'junit', 'markdown', 'prometheus'" in err


def test_output_into_a_fifo_writes_into_it_and_keeps_it_a_fifo(tmp_path: Path) -> None:
    import os
    import stat
    import threading

    fifo = tmp_path / "report.fifo"
    os.mkfifo(fifo)
    received: list[bytes] = []
    reader = threading.Thread(target=lambda: received.append(fifo.read_bytes()))
    reader.start()
    assert main(["check", "--facts", NO_GPU, "-f", "json", "-o", str(fifo)]) == 1
    reader.join(timeout=10)
    assert stat.S_ISFIFO(os.stat(fifo).st_mode)
    assert json.loads(received[0])["exit_code"] == 1


def test_output_into_a_character_device_never_replaces_it(tmp_path: Path) -> None:
    import os
    import stat

    if os.geteuid() != 0:
        pytest.skip("creating a device node needs root")
    node = tmp_path / "null"
    os.mknod(node, 0o666 | stat.S_IFCHR, os.makedev(1, 3))  # a private /dev/null
    assert main(["check", "--facts", NO_GPU, "-o", str(node)]) == 1
    assert stat.S_ISCHR(os.stat(node).st_mode)


def test_output_over_an_existing_file_keeps_its_permissions(tmp_path: Path) -> None:
    import os

    target = tmp_path / "report.txt"
    target.write_text("old")
    os.chmod(target, 0o644)
    assert main(["check", "--facts", NO_GPU, "-o", str(target)]) == 1
    assert os.stat(target).st_mode & 0o777 == 0o644
    assert "gpu.present" in target.read_text()


def test_stdout_path_and_dash_write_to_standard_output(
    capsys: pytest.CaptureFixture[str],
) -> None:
    for out in ("-", "/dev/stdout"):
        code, stdout, err = run(["check", "--facts", NO_GPU, "-f", "json", "-o", out], capsys)
        assert code == 1
        assert json.loads(stdout)["exit_code"] == 1
        assert "wrote" not in err


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["check", "--gpu-timeout", "nan"], "finite"),
        (["collect", "--gpu-timeout", "inf"], "--gpu-timeout"),
        (["check", "--facts", NO_GPU, "--host-root", "/"], "not to --facts"),
        (["check", "--facts", NO_GPU, "--select", "gpu", "--ignore", "gpu"], "no check to run"),
    ],
)
def test_more_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, _, err = run(argv, capsys)
    assert code == 2
    assert message in err


def test_deeply_nested_facts_exit_2(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    path = tmp_path / "deep.json"
    path.write_text('{"schema_version": 1, "tool": ' + "[" * 50000 + "]" * 50000 + "}")
    code, _, err = run(["check", "--facts", str(path)], capsys)
    assert code == 2
    assert err.count("\n") == 1
