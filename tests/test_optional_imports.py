"""`pytest -m gpu` collects on a GPU machine whose image lacks the dev extra (issue 32).

The device image has CUDA, cuda-bindings, nvidia-ml-py, typer, rich, packaging and pytest;
jsonschema, hypothesis, safetensors, PyYAML, grimp, kubernetes-validate (dev) and aiohttp or
prometheus_client (used only by bench and the Prometheus output) may all be missing. A test
module that imports one at import time skips there (``tests.conftest.skip_without``), and
under CI=true, where the dev extra is installed, fails instead of skipping.

Here a child pytest runs with an import hook that hides every optional package, as that
image does, so CI checks it without a second environment.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

from tests.conftest import OPTIONAL_PACKAGES, REPO

_HIDDEN_PYTEST = textwrap.dedent(
    """
    import sys
    from importlib.abc import MetaPathFinder

    HIDDEN = set(sys.argv[1].split(","))

    class Hide(MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name.split(".")[0] in HIDDEN:
                raise ModuleNotFoundError(f"No module named {name!r}", name=name)
            return None

    sys.meta_path.insert(0, Hide())
    import pytest

    sys.exit(pytest.main(sys.argv[2:]))
    """
)


def _collect(
    *args: str, hide: frozenset[str], ci: bool = False
) -> subprocess.CompletedProcess[str]:
    env = {k: v for k, v in os.environ.items() if k != "CI"}
    # Plugins a package installs (hypothesis' own) are not loaded: the image has none.
    env["PYTEST_DISABLE_PLUGIN_AUTOLOAD"] = "1"
    env["PYTHONPATH"] = os.pathsep.join([str(REPO / "src"), str(REPO)])
    if ci:
        env["CI"] = "true"
    argv = [sys.executable, "-c", _HIDDEN_PYTEST, ",".join(sorted(hide)) or "-"]
    argv += ["--collect-only", "-q", "-p", "no:cacheprovider", "--rootdir", str(REPO), *args]
    return subprocess.run(
        argv, capture_output=True, text=True, cwd=REPO, env=env, timeout=600, check=False
    )


def _ids(out: str) -> set[str]:
    return {line for line in out.splitlines() if "::" in line and " " not in line}


def test_the_gpu_tests_collect_without_any_optional_package() -> None:
    bare = _collect("-m", "gpu", "tests", hide=OPTIONAL_PACKAGES)
    full = _collect("-m", "gpu", "tests", hide=frozenset())

    assert bare.returncode == 0, bare.stdout[-3000:] + bare.stderr[-2000:]
    assert full.returncode == 0, full.stdout[-3000:] + full.stderr[-2000:]
    # Every GPU test is still there; the modules that need a hidden package said why.
    assert _ids(bare.stdout) == _ids(full.stdout)
    assert len(_ids(full.stdout)) >= 30
    assert "jsonschema is not installed" in bare.stdout
    assert "hypothesis is not installed" in bare.stdout


@pytest.mark.parametrize("module", ["tests/test_layers.py", "tests/test_kubernetes.py"])
def test_under_ci_a_missing_dev_package_is_an_error_not_a_skip(module: str) -> None:
    bare = _collect(module, hide=OPTIONAL_PACKAGES, ci=True)

    assert bare.returncode != 0
    assert "CI=true but" in bare.stdout
