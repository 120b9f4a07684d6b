"""A fresh held-out measurement of the log rules, set A (issue 33, item 5): 50 real
excerpts from public GitHub issues and pull requests (tests/fixtures/logs-fresh-a/README.md
names each source), gathered on 2026-11-28 before issue 33's rule changes by someone who
changed no rule, from runtimes and log formats the corpus has few of. None of them was used
to write or tune the catalogue or the generic detector. Each file's expected worst severity
was judged from its source and committed before the rules were first run on it; the
measured one is what the rules give today, misses included. FIRST keeps the first
measurement (rules of commit 0e89716) for good, whatever the rules do later; the README's
figures are checked against it, and its table against MEASURED and FIRST."""

from __future__ import annotations

import re

import pytest

from tests.conftest import FIXTURES
from tests.logmeasure import ORDER, confusion, worst

FRESH = FIXTURES / "logs-fresh-a"
README = FRESH / "README.md"

# file -> (expected worst severity, judged from the source; worst severity the rules give now)
MEASURED: dict[str, tuple[str, str]] = {
    # Fatal: the process died, could not start, or a request failed with a crash.
    "aphrodite-engine-522-ray-worker-load-model-oom.log": ("fail", "fail"),
    "bumblebee-554-nvrm-fallen-off-the-bus.log": ("fail", "fail"),
    "chia-gigahorse-301-xid-31-62-45.log": ("fail", "fail"),
    "comfyui-4936-allocation-on-device.log": ("fail", "fail"),
    "gpu-burn-123-couldnt-init-cuda-error-unknown.log": ("fail", "fail"),
    "gpu-operator-414-dcgm-exporter-fatal.log": ("fail", "fail"),
    "hunyuanvideo-114-nccl-unhandled-system-error.log": ("fail", "fail"),
    "jax-21396-cudnn-handle-internal-error.log": ("fail", "fail"),
    "k8s-device-plugin-303-nvml-not-loaded.log": ("fail", "fail"),
    "koboldcpp-705-cublas-undefined-symbol.log": ("fail", "fail"),
    "llamacpp-13909-illegal-memory-access-abort.log": ("fail", "fail"),
    "llamacpp-27430-illegal-memory-access-tensor-split.log": ("fail", "fail"),
    "localai-1701-backends-fail-to-load.log": ("fail", "fail"),
    "megatron-lm-935-dist-backend-error-watchdog.log": ("fail", "fail"),
    "nccl-1039-tensorflow-communication-aborted.log": ("fail", "fail"),
    "nccl-1657-torchrun-child-failed.log": ("fail", "fail"),
    "nvidia-persistenced-2-signal-15-shutdown.log": ("fail", "fail"),
    "ollama-10265-illegal-memory-access-runner-terminated.log": ("fail", "fail"),
    "open-gpu-kernel-modules-1150-xid-45-after-149.log": ("fail", "fail"),
    "pywhispercpp-95-cuda-init-error.log": ("fail", "fail"),
    "ray-14344-dashboard-exited-processes-killed.log": ("fail", "fail"),
    "tf-to-trt-34-tensorrt-cuda-error-terminate.log": ("fail", "fail"),
    "tgi-1383-nccl-watchdog-timeout.log": ("fail", "fail"),
    "tgi-1627-shard-signal-4-cannot-start.log": ("fail", "fail"),
    "tgi-620-sharded-llama-requires-cuda.log": ("fail", "fail"),
    "whisper-standalone-win-50-cuda-failed-out-of-memory.log": ("fail", "fail"),
    "whisperjav-118-cuda-out-of-memory.log": ("fail", "fail"),
    "xinference-3203-failed-to-load-model.log": ("fail", "fail"),
    # Degraded: a CPU fallback or a feature unavailable.
    "deepface-739-cuda-drivers-not-found-cpu.log": ("warn", "warn"),
    "deepspeed-6972-async-io-op-incompatible.log": ("warn", "info"),
    "llamacpp-22748-no-usable-gpu-cpu-fallback.log": ("warn", "warn"),
    "llamacpp-9153-not-compiled-with-gpu-offload.log": ("warn", "warn"),
    "topaz-154-no-nvidia-driver-falling-back-to-cpu.log": ("warn", "warn"),
    # Healthy, scary words included (or the healthy lines before a thread's problem).
    "comfyui-11845-healthy-startup-backends.log": ("none", "none"),
    "deepspeed-6723-healthy-ds-report-factory-registration.log": ("none", "none"),
    "koboldcpp-1590-healthy-embeddings-model-load.log": ("none", "none"),
    "localai-1112-healthy-restart-starts.log": ("none", "none"),
    "localai-720-healthy-compose-start.log": ("none", "none"),
    "meta-tegra-952-healthy-trtexec-passed.log": ("none", "none"),
    "mlc-llm-3246-healthy-serve-start.log": ("none", "none"),
    "nccl-352-healthy-socket-transport-init.log": ("none", "none"),
    "physicsnemo-568-healthy-nccl-async-error-handling-deprecated.log": ("none", "none"),
    "ray-4269-healthy-ray-init.log": ("none", "none"),
    "tensorflow-56456-healthy-numa-node-info.log": ("none", "none"),
    "text-generation-webui-3361-healthy-start-warnings.log": ("none", "none"),
    "tgi-2828-healthy-shards-ready.log": ("none", "none"),
    "torchserve-2483-healthy-model-server-config.log": ("none", "none"),
    "whispercpp-1472-healthy-cuda-backend.log": ("none", "none"),
    "whispercpp-3212-healthy-bench-timings.log": ("none", "none"),
    "xinference-976-healthy-supervisor-debug.log": ("none", "none"),
}

# The first measurement (rules of commit 0e89716, before any rule saw these files). It never
# changes: a later rule change updates MEASURED's "now" column, not this.
FIRST: dict[str, str] = {
    "aphrodite-engine-522-ray-worker-load-model-oom.log": "fail",
    "bumblebee-554-nvrm-fallen-off-the-bus.log": "none",
    "chia-gigahorse-301-xid-31-62-45.log": "warn",
    "comfyui-4936-allocation-on-device.log": "fail",
    "gpu-burn-123-couldnt-init-cuda-error-unknown.log": "none",
    "gpu-operator-414-dcgm-exporter-fatal.log": "none",
    "hunyuanvideo-114-nccl-unhandled-system-error.log": "fail",
    "jax-21396-cudnn-handle-internal-error.log": "fail",
    "k8s-device-plugin-303-nvml-not-loaded.log": "none",
    "koboldcpp-705-cublas-undefined-symbol.log": "fail",
    "llamacpp-13909-illegal-memory-access-abort.log": "fail",
    "llamacpp-27430-illegal-memory-access-tensor-split.log": "none",
    "localai-1701-backends-fail-to-load.log": "none",
    "megatron-lm-935-dist-backend-error-watchdog.log": "fail",
    "nccl-1039-tensorflow-communication-aborted.log": "none",
    "nccl-1657-torchrun-child-failed.log": "fail",
    "nvidia-persistenced-2-signal-15-shutdown.log": "none",
    "ollama-10265-illegal-memory-access-runner-terminated.log": "fail",
    "open-gpu-kernel-modules-1150-xid-45-after-149.log": "warn",
    "pywhispercpp-95-cuda-init-error.log": "fail",
    "ray-14344-dashboard-exited-processes-killed.log": "none",
    "tf-to-trt-34-tensorrt-cuda-error-terminate.log": "fail",
    "tgi-1383-nccl-watchdog-timeout.log": "fail",
    "tgi-1627-shard-signal-4-cannot-start.log": "none",
    "tgi-620-sharded-llama-requires-cuda.log": "fail",
    "whisper-standalone-win-50-cuda-failed-out-of-memory.log": "fail",
    "whisperjav-118-cuda-out-of-memory.log": "fail",
    "xinference-3203-failed-to-load-model.log": "fail",
    "deepface-739-cuda-drivers-not-found-cpu.log": "none",
    "deepspeed-6972-async-io-op-incompatible.log": "none",
    "llamacpp-22748-no-usable-gpu-cpu-fallback.log": "none",
    "llamacpp-9153-not-compiled-with-gpu-offload.log": "none",
    "topaz-154-no-nvidia-driver-falling-back-to-cpu.log": "none",
    "comfyui-11845-healthy-startup-backends.log": "none",
    "deepspeed-6723-healthy-ds-report-factory-registration.log": "none",
    "koboldcpp-1590-healthy-embeddings-model-load.log": "none",
    "localai-1112-healthy-restart-starts.log": "none",
    "localai-720-healthy-compose-start.log": "none",
    "meta-tegra-952-healthy-trtexec-passed.log": "none",
    "mlc-llm-3246-healthy-serve-start.log": "none",
    "nccl-352-healthy-socket-transport-init.log": "none",
    "physicsnemo-568-healthy-nccl-async-error-handling-deprecated.log": "none",
    "ray-4269-healthy-ray-init.log": "none",
    "tensorflow-56456-healthy-numa-node-info.log": "none",
    "text-generation-webui-3361-healthy-start-warnings.log": "none",
    "tgi-2828-healthy-shards-ready.log": "none",
    "torchserve-2483-healthy-model-server-config.log": "none",
    "whispercpp-1472-healthy-cuda-backend.log": "none",
    "whispercpp-3212-healthy-bench-timings.log": "none",
    "xinference-976-healthy-supervisor-debug.log": "none",
}


def figures(got: dict[str, str]) -> tuple[int, int, int, int]:
    return confusion(MEASURED, got)


def readme() -> str:
    return README.read_text(encoding="utf-8")


def test_every_fresh_file_is_measured() -> None:
    assert {p.name for p in FRESH.glob("*.log")} == set(MEASURED) == set(FIRST)


def test_readme_table_is_the_measurement() -> None:
    """Each table row states the same expected severity as MEASURED and the same first
    result as FIRST (a miss is written `**none (miss)**`, a fatal excerpt judged warn
    `warn (flagged, below fail)`)."""
    rows = re.findall(
        r"^\| (\S+\.log) \| .*? \| (fail|warn|none) \| (.+?) \|$", readme(), flags=re.M
    )
    assert {name for name, _, _ in rows} == set(MEASURED)
    for name, expected, got in rows:
        assert expected == MEASURED[name][0], name
        assert re.sub(r"^\*\*|\s.*$", "", got) == FIRST[name], name


@pytest.mark.parametrize("name", sorted(MEASURED))
def test_fresh_file_gives_what_was_measured(name: str) -> None:
    """The recorded figure is the rules' real result: a change that fixes a miss (or breaks
    a hit) must update MEASURED's "now" column with it; FIRST stays."""
    assert worst(FRESH / name) == MEASURED[name][1]


def test_first_measurement_matches_the_readme() -> None:
    """The README's quoted first figures are recomputed from FIRST (one source: if either
    moves, this fails)."""
    quoted = re.search(
        r"^First measurement \(commit 0e89716\): TP (\d+), FP (\d+), FN (\d+), TN (\d+), "
        r"precision ([0-9.]+), recall ([0-9.]+)$",
        readme(),
        flags=re.M,
    )
    assert quoted is not None
    tp, fp, fn, tn = figures(FIRST)
    assert (tp, fp, fn, tn) == tuple(int(x) for x in quoted.groups()[:4])
    assert f"{tp / (tp + fp):.2f}" == quoted.group(5)
    assert f"{tp / (tp + fn):.2f}" == quoted.group(6)

    fatal = [n for n, (e, _) in MEASURED.items() if e == "fail"]
    degraded = [n for n, (e, _) in MEASURED.items() if e == "warn"]
    healthy = [n for n, (e, _) in MEASURED.items() if e == "none"]
    counts = re.search(
        r"- (\d+) fatal excerpts: (\d+) came out `fail`, (\d+) came out `warn` "
        r"\(flagged, but below fail\), (\d+) gave\s+no finding at all\.",
        readme(),
    )
    assert counts is not None
    assert (
        len(fatal),
        sum(FIRST[n] == "fail" for n in fatal),
        sum(FIRST[n] == "warn" for n in fatal),
        sum(FIRST[n] == "none" for n in fatal),
    ) == tuple(int(x) for x in counts.groups())
    warned = re.search(r"- (\d+) warn excerpts \(fallback / feature unavailable\): none", readme())
    assert warned is not None
    assert len(degraded) == int(warned.group(1))
    assert not any(ORDER[FIRST[n]] >= ORDER["warn"] for n in degraded)
    clean = re.search(r"- (\d+) healthy excerpts: none was flagged", readme())
    assert clean is not None
    assert len(healthy) == int(clean.group(1))
    assert not any(ORDER[FIRST[n]] >= ORDER["warn"] for n in healthy)
