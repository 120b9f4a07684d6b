"""The fresh held-out measurement of the log rules, set B (issue 33, item 5, second half):
29 real excerpts from public GitHub issues (tests/fixtures/logs-fresh-b/README.md names each
source), gathered sealed on 2026-11-28 by someone who did not read or write the rules, and
first scanned with the rules frozen at commit 6cfb82c. This is the figure that counts for
issue 33: no rule was written from these files before FIRST was recorded. FIRST stays as it
is whatever the rules do later; MEASURED's second column is what the rules give now."""

from __future__ import annotations

import re

import pytest

from tests.conftest import FIXTURES
from tests.logmeasure import confusion, worst

FRESH = FIXTURES / "logs-fresh-b"
README = FRESH / "README.md"

# file -> (expected worst severity, judged from the source; worst severity the rules give now)
MEASURED: dict[str, tuple[str, str]] = {
    "bumblebee-550-optirun-cannot-access-secondary-gpu.log": ("fail", "fail"),
    "candle-353-driver-error-named-symbol-not-found.log": ("fail", "fail"),
    "facefusion-docker-36-nvidia-container-cli-requirement-cuda.log": ("fail", "fail"),
    "grl-image-restoration-27-c10d-client-socket-timeout.log": ("fail", "fail"),
    "llamafactory-7396-watchdog-collective-timeout.log": ("fail", "fail"),
    "lmcache-412-vllm-xformers-backend-500-error.log": ("fail", "fail"),
    "mistralrs-715-cudarc-illegal-address-panic.log": ("fail", "fail"),
    "onnxruntime-3240-trt-ep-jetson-cuda-error-find-fastest-tactic.log": ("fail", "fail"),
    "sglang-1693-dist-backend-error-terminate.log": ("fail", "fail"),
    "stable-diffusion-cpp-1773-cublas-sgemm-launch-failed.log": ("fail", "fail"),
    "tabbyapi-304-model-switch-cuda-oom.log": ("fail", "fail"),
    "tabbyapi-465-exllamav3-cudahostregister-invalid-argument.log": ("fail", "fail"),
    "tensorflow-9489-cublas-status-not-initialized.log": ("fail", "fail"),
    "triton-server-3786-unavailable-tensorrt-engine.log": ("fail", "fail"),
    "a1111-webui-12174-torch-not-compiled-with-cuda-cpu.log": ("warn", "warn"),
    "fluxgym-411-bitsandbytes-compiled-without-gpu.log": ("warn", "warn"),
    "invokeai-4788-xformers-cannot-load-cpu-torch.log": ("warn", "warn"),
    "onnxruntime-21425-cuda-ep-load-failed-cpu-fallback.log": ("warn", "warn"),
    "onnxruntime-7238-force-fallback-to-cpu-nodes.log": ("warn", "warn"),
    "xformers-982-info-extensions-unavailable.log": ("warn", "warn"),
    "a1111-webui-9328-healthy-no-xformers-model-loaded.log": ("none", "none"),
    "deeplabcut-2115-healthy-tf-trt-warning.log": ("none", "none"),
    "elasticdl-2160-healthy-tf-libnvinfer-missing.log": ("none", "none"),
    "fast-stable-diffusion-1580-healthy-tensorflow-msg.log": ("none", "none"),
    "pytorch-61138-healthy-omp-num-threads-banner.log": ("none", "none"),
    "semantic-router-784-healthy-classifier-init-fallback.log": ("none", "warn"),
    "sglang-4826-healthy-flashinfer-jit-backend.log": ("none", "none"),
    "tabbyapi-250-healthy-startup-experimental-warnings.log": ("none", "none"),
    "triton-server-2477-healthy-model-ready.log": ("none", "none"),
}

# The first measurement (rules of commit 6cfb82c), for good.
FIRST: dict[str, str] = {
    "bumblebee-550-optirun-cannot-access-secondary-gpu.log": "warn",
    "candle-353-driver-error-named-symbol-not-found.log": "fail",
    "facefusion-docker-36-nvidia-container-cli-requirement-cuda.log": "none",
    "grl-image-restoration-27-c10d-client-socket-timeout.log": "none",
    "llamafactory-7396-watchdog-collective-timeout.log": "none",
    "lmcache-412-vllm-xformers-backend-500-error.log": "fail",
    "mistralrs-715-cudarc-illegal-address-panic.log": "fail",
    "onnxruntime-3240-trt-ep-jetson-cuda-error-find-fastest-tactic.log": "none",
    "sglang-1693-dist-backend-error-terminate.log": "fail",
    "stable-diffusion-cpp-1773-cublas-sgemm-launch-failed.log": "warn",
    "tabbyapi-304-model-switch-cuda-oom.log": "fail",
    "tabbyapi-465-exllamav3-cudahostregister-invalid-argument.log": "none",
    "tensorflow-9489-cublas-status-not-initialized.log": "fail",
    "triton-server-3786-unavailable-tensorrt-engine.log": "none",
    "a1111-webui-12174-torch-not-compiled-with-cuda-cpu.log": "none",
    "fluxgym-411-bitsandbytes-compiled-without-gpu.log": "none",
    "invokeai-4788-xformers-cannot-load-cpu-torch.log": "none",
    "onnxruntime-21425-cuda-ep-load-failed-cpu-fallback.log": "none",
    "onnxruntime-7238-force-fallback-to-cpu-nodes.log": "none",
    "xformers-982-info-extensions-unavailable.log": "none",
    "a1111-webui-9328-healthy-no-xformers-model-loaded.log": "none",
    "deeplabcut-2115-healthy-tf-trt-warning.log": "none",
    "elasticdl-2160-healthy-tf-libnvinfer-missing.log": "none",
    "fast-stable-diffusion-1580-healthy-tensorflow-msg.log": "none",
    "pytorch-61138-healthy-omp-num-threads-banner.log": "none",
    "semantic-router-784-healthy-classifier-init-fallback.log": "warn",
    "sglang-4826-healthy-flashinfer-jit-backend.log": "none",
    "tabbyapi-250-healthy-startup-experimental-warnings.log": "none",
    "triton-server-2477-healthy-model-ready.log": "none",
}


def figures(got: dict[str, str]) -> tuple[int, int, int, int]:
    return confusion(MEASURED, got)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_every_fresh_file_is_measured() -> None:
    assert {p.name for p in FRESH.glob("*.log")} == set(MEASURED) == set(FIRST)


def test_readme_table_is_the_measurement() -> None:
    rows = re.findall(
        r"^\| (\S+\.log) \| .*? \| (fail|warn|none) \| (.+?) \|$", readme(), flags=re.M
    )
    assert {name for name, _, _ in rows} == set(MEASURED)
    for name, expected, got in rows:
        assert expected == MEASURED[name][0], name
        assert re.sub(r"^\*\*|\s.*$", "", got) == FIRST[name], name


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_fresh_file_gives_what_was_measured(name: str) -> None:
    """A change that fixes a miss (or breaks a hit) updates MEASURED's "now"; FIRST stays."""
    assert worst(FRESH / name) == MEASURED[name][1]


def test_first_measurement_matches_the_readme() -> None:
    quoted = re.search(
        r"^First measurement \(commit 6cfb82c\): TP (\d+), FP (\d+), FN (\d+), TN (\d+), "
        r"precision ([0-9.]+), recall ([0-9.]+)$",
        readme(),
        flags=re.M,
    )
    assert quoted is not None
    tp, fp, fn, tn = figures(FIRST)
    assert (tp, fp, fn, tn) == tuple(int(x) for x in quoted.groups()[:4])
    assert f"{tp / (tp + fp):.2f}" == quoted.group(5)
    assert f"{tp / (tp + fn):.2f}" == quoted.group(6)
