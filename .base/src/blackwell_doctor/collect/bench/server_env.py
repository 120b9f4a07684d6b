"""What a server says about its own build and configuration, read from its answers (the
bench's environment pin, issue 21). Pure functions of the text and JSON the server sent;
the requests are :mod:`blackwell_doctor.app.bench`'s.

Read from vLLM's source (v0.32.0, the version CI runs; the same since v0.8):

- ``GET /version`` answers ``{"version": VLLM_VERSION}``
  (vllm/entrypoints/serve/instrumentator/basic.py ``show_version``).
- ``/metrics`` carries "info" gauges, each a gauge set to 1 whose labels are the values:
  ``vllm:cache_config_info`` (every field of the CacheConfig, plus ``engine``: the
  ``log_metrics_info`` of vllm/v1/metrics/loggers.py, emulating a Prometheus Info with a
  gauge because multiprocess mode has none), and prometheus_client's own ``python_info``.
  ``vllm:lora_requests_info`` is set to a timestamp, not 1: it is state, not
  configuration, and is left out.
- The last chunk of a streamed answer carries ``system_fingerprint``:
  ``vllm-<version>[-tp<N>][-pp<N>][-dp<N>][-ep]-<hash8>``, hash8 the first 8 hex digits
  of ``vllm_config.compute_hash()`` (vllm/entrypoints/serve/utils/fingerprint.py, default
  ``--fingerprint-mode full``).
- ``GET /server_info?config_format=json`` (only with ``VLLM_SERVER_DEV_MODE=1``) answers
  ``{"vllm_config": {...}, "vllm_env": {"VLLM_...": ...}, "system_env": {...}}``
  (vllm/entrypoints/serve/dev/server_info/api_router.py).
"""

from __future__ import annotations

import re
from typing import Any

from prometheus_client.parser import text_string_to_metric_families

from blackwell_doctor.facts.redact import redact_value
from blackwell_doctor.report.bench_env import MAX_CONFIG_KEYS, cut

# Labels of an info gauge that tell engines or models apart, not the configuration.
_NOT_CONFIG_LABELS = frozenset({"engine", "model_name"})
_FINGERPRINT_HASH = re.compile(r"^vllm-.+-([0-9a-f]{8})$")


class NotPrometheus(Exception):
    pass


def info_metrics(text: str) -> dict[str, str]:
    """``"<family>.<label>" -> value`` of every info gauge (a gauge named ``*_info`` set
    to 1) of a Prometheus text; an engine's labels beyond the first engine's are kept only
    where they differ (``<family>.<label>[engine N]``). NotPrometheus for other text."""
    try:
        families = list(text_string_to_metric_families(text))
    except (ValueError, TypeError, IndexError) as exc:
        raise NotPrometheus(str(exc)) from None
    out: dict[str, str] = {}
    for family in families:
        if not family.name.endswith("_info") or family.type not in ("gauge", "info", "unknown"):
            continue
        for sample in family.samples:
            if sample.value != 1.0:
                continue
            engine = sample.labels.get("engine", "")
            for label, value in sorted(sample.labels.items()):
                if label in _NOT_CONFIG_LABELS:
                    continue
                key = f"{family.name}.{label}"
                shown = cut(value)
                if key not in out:
                    out[key] = shown
                elif out[key] != shown:
                    out[f"{key}[engine {engine}]"] = shown
            if len(out) >= MAX_CONFIG_KEYS:
                return out
    return out


def version_of(answer: Any) -> str | None:
    """``/version``'s version string, or None when the answer is not vLLM's shape."""
    if isinstance(answer, dict):
        version = answer.get("version")
        if isinstance(version, str) and version.strip():
            return cut(version.strip(), 128)
    return None


def config_hash(fingerprint: str) -> str | None:
    """The config hash (8 hex digits) of a vLLM ``system_fingerprint``, or None."""
    match = _FINGERPRINT_HASH.match(fingerprint)
    return None if match is None or match.group(1) == "nohash" else match.group(1)


def server_info(answer: Any) -> dict[str, str]:
    """``"server_info.<path>" -> value`` of ``/server_info``'s ``vllm_config`` (its scalars,
    dotted paths) and ``vllm_env`` (secret-looking values redacted), at most
    MAX_CONFIG_KEYS."""
    out: dict[str, str] = {}
    if not isinstance(answer, dict):
        return out

    def walk(prefix: str, value: Any, depth: int) -> None:
        if len(out) >= MAX_CONFIG_KEYS or depth > 8:
            return
        if isinstance(value, dict):
            for k, v in sorted(value.items(), key=lambda kv: str(kv[0])):
                walk(f"{prefix}.{cut(str(k), 64)}", v, depth + 1)
        elif isinstance(value, list):
            out[prefix] = cut(",".join(str(v) for v in value[:64]))
        else:
            name = prefix.rpartition(".")[2]
            out[prefix] = cut(redact_value(name, "null" if value is None else str(value)))

    walk("server_info.vllm_config", answer.get("vllm_config"), 0)
    env = answer.get("vllm_env")
    if isinstance(env, dict):
        for name, value in sorted(env.items(), key=lambda kv: str(kv[0])):
            if len(out) >= MAX_CONFIG_KEYS:
                break
            out[f"server_info.env.{cut(str(name), 64)}"] = cut(redact_value(str(name), str(value)))
    return out
