"""Under CI=true a missing real component is an error, never a skip (tests/conftest.py):
.ci/run is meant to provide every one, and a skip would hide a broken setup. Each
component's fixture is run by an inner pytest with its variable unset."""

from __future__ import annotations

from pathlib import Path

import pytest

pytest_plugins = ("pytester",)

FIXTURES = {
    "docker_host": "BLACKWELL_DOCTOR_TEST_DOCKER_HOST",
    "docker_host_no_gpu": "BLACKWELL_DOCTOR_TEST_DOCKER_HOST_NO_GPU",
    "vllm_url": "BLACKWELL_DOCTOR_TEST_VLLM_URL",
    "vllm_slow_url": "BLACKWELL_DOCTOR_TEST_VLLM_SLOW_URL",
    "vllm_f32_url": "BLACKWELL_DOCTOR_TEST_VLLM_F32_URL",
    "slurm_conf": "BLACKWELL_DOCTOR_TEST_SLURM_CONF",
    "wheelhouse_cache": "BLACKWELL_DOCTOR_TEST_WHEELHOUSE",
    "base_image": "BLACKWELL_DOCTOR_TEST_BASE_IMAGE",
}


def _run(pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch) -> pytest.RunResult:
    """One inner test per fixture, every variable unset."""
    for name in FIXTURES.values():
        monkeypatch.delenv(name, raising=False)
    pytester.makeconftest("from tests.conftest import *  # noqa: F403\n")
    pytester.makepyfile(
        "".join(f"def test_{fixture}({fixture}):\n    pass\n\n\n" for fixture in FIXTURES)
    )
    return pytester.runpytest_inprocess("-p", "no:cacheprovider", "-rs")


def test_a_missing_component_is_an_error_under_ci(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("CI", "true")
    result = _run(pytester, monkeypatch)
    result.assert_outcomes(errors=len(FIXTURES))
    result.stdout.fnmatch_lines(
        [f"*CI=true but no *{name} unset*" for name in FIXTURES.values()], consecutive=False
    )


def test_a_missing_component_is_a_skip_elsewhere(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("CI", raising=False)
    _run(pytester, monkeypatch).assert_outcomes(skipped=len(FIXTURES))


def test_a_child_gets_sigint_even_where_pytest_ignores_it() -> None:
    # A background job of a shell without job control (`.ci/run &` in a script) runs with
    # SIGINT ignored; a plain child inherits that and never sees Ctrl-C (the Ctrl-C tests
    # then watched the command run to its end). tests/child.py's children get it.
    import signal
    import subprocess
    import sys

    from tests.child import child

    probe = "import signal; print(signal.getsignal(signal.SIGINT) is signal.default_int_handler)"
    old = signal.signal(signal.SIGINT, signal.SIG_IGN)
    try:
        plain = subprocess.run(
            [sys.executable, "-c", probe], capture_output=True, text=True, check=True
        )
        with child([sys.executable, "-c", probe]) as proc:
            code, out, err = proc.finish(timeout_s=60)
        assert signal.getsignal(signal.SIGINT) is signal.SIG_IGN  # put back as it was
    finally:
        signal.signal(signal.SIGINT, old)
    assert plain.stdout.strip() == "False"  # what the old Popen calls got
    assert (code, out.strip()) == (0, "True"), err


def test_the_suite_catches_sigint_even_when_started_with_it_ignored(tmp_path: Path) -> None:
    """A .ci/run started as a background job (``&`` in a script, nohup) runs pytest with
    SIGINT ignored; the in-process Ctrl-C tests (tests/test_interrupt.py) then saw nothing
    happen and failed 15 s later (seen on a clean-clone run beside two busy loops). The
    suite's conftest gives its process Python's own Ctrl-C handler back."""
    import signal
    import subprocess
    import sys

    from tests.conftest import REPO

    (tmp_path / "test_probe.py").write_text(
        "import signal\n\n\ndef test_sigint():\n"
        "    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler\n"
    )
    (tmp_path / "conftest.py").write_text("from tests.conftest import *  # noqa: F403\n")
    done = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", str(tmp_path)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        preexec_fn=lambda: signal.signal(signal.SIGINT, signal.SIG_IGN),
    )
    assert done.returncode == 0, done.stdout + done.stderr
