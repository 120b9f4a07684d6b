"""Shared test configuration. GPU tests (marker ``gpu``) skip cleanly without a usable GPU."""

from __future__ import annotations

import ctypes
import functools
from pathlib import Path
from typing import Any, NoReturn

import pytest

try:
    from hypothesis import HealthCheck, settings
except ImportError:  # an optional dev package: the GPU tests collect without it
    pass
else:
    # Hypothesis's clocks are not the behaviour under test: on CI's loaded machine (load 20+)
    # an example can take seconds to draw or to run, which its deadline and its too_slow
    # health check would report as a failure (tests/test_markdown_commonmark.py did, at load
    # 24). Every property keeps its examples and its assertions; only the timing checks are off.
    settings.register_profile(
        "load-proof", deadline=None, suppress_health_check=[HealthCheck.too_slow]
    )
    settings.load_profile("load-proof")

REPO = Path(__file__).resolve().parents[1]
FIXTURES = REPO / "tests" / "fixtures"
FACTS_FIXTURES = FIXTURES / "facts"
HOST_TREES = FIXTURES / "hosts"
GOLDEN = REPO / "tests" / "golden"


def pytest_addoption(parser: pytest.Parser) -> None:
    parser.addoption(
        "--update-goldens",
        action="store_true",
        default=False,
        help="rewrite tests/golden/* from the current output instead of comparing",
    )


@functools.cache
def gpu_unusable_reason() -> str | None:
    """None when NVML initialises and sees at least one GPU, else why not."""
    try:
        nvml = ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        return "libnvidia-ml.so.1 not found (no NVIDIA driver on this machine)"
    if nvml.nvmlInit_v2() != 0:
        return "nvmlInit failed (driver not loaded?)"
    count = ctypes.c_uint(0)
    rc = nvml.nvmlDeviceGetCount_v2(ctypes.byref(count))
    nvml.nvmlShutdown()
    if rc != 0 or count.value == 0:
        return "NVML sees no GPU"
    return None


def pytest_configure(config: pytest.Config) -> None:
    # A shell without job control (`.ci/run &` in a script, nohup, a CI runner's background
    # job) starts pytest with SIGINT ignored: a test that sends Ctrl-C to a command in this
    # process would see nothing happen, and every child would inherit the ignored signal.
    # The suite tests Ctrl-C, so it gives itself Python's own: a caught signal, which exec
    # resets to the default in every child it starts (an ignored one it would keep).
    import os
    import signal

    if signal.getsignal(signal.SIGINT) is signal.SIG_IGN:
        signal.signal(signal.SIGINT, signal.default_int_handler)
    # A pytest-xdist worker (.ci/run's deadline tests) runs with COLUMNS=80 set (a terminal
    # width the commands follow, issue 40), a plain run with none: the tests see one
    # environment either way, and a test that wants a width sets it itself.
    for name in ("COLUMNS", "LINES"):
        os.environ.pop(name, None)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    # A test that kills a shared server runs after all the others (stable sort).
    items.sort(key=lambda item: "kills_server" in item.keywords)
    reason = gpu_unusable_reason()
    if reason is None:
        return
    skip = pytest.mark.skip(reason=f"gpu test: {reason}")
    for item in items:
        if "gpu" in item.keywords:
            item.add_marker(skip)


# The test Docker engines: ci/docker-engine.sh starts private dockerds (Debian docker.io) and
# .ci/run exports their sockets here: one with a fake NVIDIA hook, one without. Tests marked
# `docker` skip cleanly without them, except under CI=true, where that is an error.
DOCKER_HOST_ENV = "BLACKWELL_DOCTOR_TEST_DOCKER_HOST"
DOCKER_HOST_NO_GPU_ENV = "BLACKWELL_DOCTOR_TEST_DOCKER_HOST_NO_GPU"


@pytest.fixture(scope="session")
def docker_host() -> str:
    """The engine with the fake NVIDIA hook (GPU device requests accepted)."""
    import os

    host = os.environ.get(DOCKER_HOST_ENV)
    if not host:
        require_component(
            f"no test Docker engine ({DOCKER_HOST_ENV} unset; see ci/docker-engine.sh)"
        )
    return host


@pytest.fixture(scope="session")
def docker_host_no_gpu() -> str:
    """The engine without it (the missing-runtime finding)."""
    import os

    host = os.environ.get(DOCKER_HOST_NO_GPU_ENV)
    if not host:
        require_component(f"no engine without the NVIDIA hook ({DOCKER_HOST_NO_GPU_ENV} unset)")
    return host


# The real vLLM CPU servers (ci/vllm-cpu-server.sh): .ci/run starts them and exports their
# URLs here. Tests that need them (marker `vllm`) skip cleanly without them, except under
# CI=true, where a missing server is an error: CI must run them.
VLLM_URL_ENV = "BLACKWELL_DOCTOR_TEST_VLLM_URL"
VLLM_SLOW_URL_ENV = "BLACKWELL_DOCTOR_TEST_VLLM_SLOW_URL"
VLLM_SLOW_PIDFILE_ENV = "BLACKWELL_DOCTOR_TEST_VLLM_SLOW_PIDFILE"
VLLM_F32_URL_ENV = "BLACKWELL_DOCTOR_TEST_VLLM_F32_URL"


def _vllm_env(name: str) -> str:
    import os

    value = os.environ.get(name)
    if not value:
        require_component(f"no test vLLM server ({name} unset; see ci/vllm-cpu-server.sh)")
    return value


@pytest.fixture(scope="session")
def vllm_url() -> str:
    """The main server: tiny Qwen3-MoE, qwen3 reasoning parser."""
    return _vllm_env(VLLM_URL_ENV)


@pytest.fixture(scope="session")
def vllm_slow_url() -> str:
    """The same model and parser with --max-num-seqs 1: one request at a time."""
    return _vllm_env(VLLM_SLOW_URL_ENV)


@pytest.fixture(scope="session")
def vllm_f32_url() -> str:
    """The main server's model and parser in float32 (main: bfloat16): numerically
    different, for the logprob drift test."""
    return _vllm_env(VLLM_F32_URL_ENV)


@pytest.fixture(scope="session")
def vllm_slow_pidfile() -> str:
    return _vllm_env(VLLM_SLOW_PIDFILE_ENV)


@pytest.fixture
def update_goldens(request: pytest.FixtureRequest) -> bool:
    return bool(request.config.getoption("--update-goldens"))


# The version that golden files and the documentation's example blocks show where the tool
# prints its own version. The running one comes from git (pyproject.toml, hatch-vcs:
# 0.1.devN+g<commit> between tags, 0.0 in a source tree never built), so every comparison
# with committed text puts this one in its place, only where the tool names itself: the
# header ("blackwell-doctor V"), JSON's "version" (the report's tool), Prometheus'
# version="V". A facts file's own version (the tool that collected it) is data: kept.
DOCUMENTED_VERSION = "0.1.0"


def as_documented(text: str) -> str:
    """``text`` with the running version written as :data:`DOCUMENTED_VERSION`."""
    import re

    from blackwell_doctor import __version__

    if __version__ == DOCUMENTED_VERSION:
        return text
    v = re.escape(__version__)
    return re.sub(
        rf'(?<=blackwell-doctor ){v}(?![\w.+])|(?<="version": "){v}(?=")|(?<=version="){v}(?=")',
        DOCUMENTED_VERSION,
        text,
    )


# What a test module may import that a bare GPU machine's image lacks (it has CUDA, cuda-
# bindings, nvidia-ml-py, typer, rich, packaging, pytest, and torch's or transformers' own
# dependencies at best): pyproject's dev extra, and the run-time dependencies that only
# bench, fleet's Prometheus output, scan-logs or audit use. `pytest -m gpu` must collect
# there; CI installs all of them (pip install -e '.[dev]').
OPTIONAL_PACKAGES = frozenset(
    {
        "aiohttp",
        "build",
        "docker",
        "elftools",
        "grimp",
        "hatch_vcs",
        "hatchling",
        "hyperscan",
        "hypothesis",
        "importlinter",
        "jsonschema",
        "kubernetes_validate",
        "numpy",
        "playwright",
        "prometheus_client",
        "re2",
        "safetensors",
        "scipy",
        "twine",
        "yaml",
        "yarl",
    }
)


def skip_without(exc: ModuleNotFoundError) -> NoReturn:
    """For a test module whose import of an optional package (OPTIONAL_PACKAGES) failed:

        try:
            import jsonschema
        except ModuleNotFoundError as exc:
            skip_without(exc)

    skips the module (pytest.importorskip's effect), except under CI=true, where the dev
    extra is installed and a skip would hide a broken setup: there it is an error. Any
    other missing module is raised as it is (a bug, not an optional tool)."""
    import os

    top = (exc.name or "").split(".")[0]
    if top not in OPTIONAL_PACKAGES:
        raise exc
    missing = f"{top} is not installed (pip install -e '.[dev]')"
    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {missing}", pytrace=False)
    pytest.skip(missing, allow_module_level=True)


def optional(name: str) -> Any:
    """The module ``name`` of an optional package, imported inside the test that needs it
    (the module's other tests run without it): where it is missing, the test skips, as
    :func:`skip_without` says."""
    import importlib

    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as exc:
        skip_without(exc)


def require_component(missing: str) -> NoReturn:
    """Skip a test whose real component is missing, except under CI=true, where .ci/run is
    supposed to provide it and a skip would hide a broken setup: there it is an error."""
    import os

    if os.environ.get("CI") == "true":
        pytest.fail(f"CI=true but {missing}", pytrace=False)
    pytest.skip(missing)


@pytest.fixture(scope="session")
def node_exporter_bin() -> str:
    """Debian's prometheus-node-exporter (.ci/run installs it when root)."""
    import shutil

    path = shutil.which("prometheus-node-exporter") or shutil.which("node_exporter")
    if path is None:
        require_component("no node_exporter on PATH (apt-get install prometheus-node-exporter)")
    return path


@pytest.fixture(scope="session")
def chromium_bin() -> str:
    """Debian's chromium (.ci/run installs it when root), driven by Playwright for the
    `browser` tests (never `playwright install`: no browser download)."""
    import importlib.util
    import shutil

    path = shutil.which("chromium")
    if path is None:
        require_component("no chromium on PATH (apt-get install chromium)")
    if importlib.util.find_spec("playwright") is None:
        require_component("no playwright module (pip install -e '.[dev]')")
    return path


# The test Slurm cluster: ci/slurm.sh starts munged, slurmctld and slurmd on localhost and
# .ci/run exports its slurm.conf here. Tests marked `slurm` skip cleanly without it.
SLURM_CONF_ENV = "BLACKWELL_DOCTOR_TEST_SLURM_CONF"


@pytest.fixture(scope="session")
def slurm_conf() -> Path:
    import os

    conf = os.environ.get(SLURM_CONF_ENV)
    if not conf:
        require_component(f"no test Slurm cluster ({SLURM_CONF_ENV} unset; see ci/slurm.sh)")
    return Path(conf)


# --------------------------------------------------------------------------- shipping (issue 37)
# ci/wheelhouse.sh fills a cache with this package's dependencies for CI's Python and
# platform (made against the index by tools/wheelhouse.py) and .ci/run exports it here; the
# offline-install, pipx/uv and image tests build from it with the index unreachable.
# ci/debian-base.sh imports a Debian base (debootstrap, python3) into the first Docker
# engine: the image tests build the Dockerfile on it. Without them those tests skip; under
# CI=true that is an error.
WHEELHOUSE_ENV = "BLACKWELL_DOCTOR_TEST_WHEELHOUSE"
BASE_IMAGE_ENV = "BLACKWELL_DOCTOR_TEST_BASE_IMAGE"


@pytest.fixture(scope="session")
def wheelhouse_cache() -> Path:
    """CI's cache: ``host/`` (every dependency and the build backend, as wheels for this
    Python) and ``foreign/`` (msgspec for CPython 3.12 on aarch64)."""
    import os

    path = os.environ.get(WHEELHOUSE_ENV)
    if not path:
        require_component(f"no wheelhouse cache ({WHEELHOUSE_ENV} unset; see ci/wheelhouse.sh)")
    return Path(path)


@pytest.fixture(scope="session")
def base_image() -> str:
    """The Debian base imported into the first test engine (ci/debian-base.sh)."""
    import os

    image = os.environ.get(BASE_IMAGE_ENV)
    if not image:
        require_component(f"no Debian base image ({BASE_IMAGE_ENV} unset; see ci/debian-base.sh)")
    return image


@pytest.fixture(scope="session")
def built_dist(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """This checkout's sdist and wheel, as a release builds them (``python -m build``;
    --no-isolation: the dev extra has the backend, and pip's isolated build of the dev
    install has already proved [build-system] complete)."""
    import subprocess
    import sys

    for module in ("build", "hatchling", "hatch_vcs"):
        optional(module)
    out = tmp_path_factory.mktemp("dist")
    proc = subprocess.run(
        [sys.executable, "-m", "build", "--no-isolation", "--outdir", str(out), str(REPO)],
        capture_output=True,
        text=True,
        timeout=600,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out


@pytest.fixture(scope="session")
def offline_wheelhouse(wheelhouse_cache: Path, tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The documented wheelhouse command (docs/install.md) run on this checkout, with
    pip reading only CI's cache: the wheelhouse the offline tests install."""
    import subprocess
    import sys

    from tests.offline import offline_env

    out = tmp_path_factory.mktemp("wheelhouse") / "wheelhouse"
    home = tmp_path_factory.mktemp("wheelhouse-home")
    argv = [sys.executable, str(REPO / "tools" / "wheelhouse.py"), "build", "-o", str(out)]
    argv += [str(REPO), "--", "--no-index", "--find-links", str(wheelhouse_cache / "host")]
    proc = subprocess.run(
        argv,
        capture_output=True,
        text=True,
        env=offline_env(home),
        timeout=900,
        check=False,
    )
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    return out
