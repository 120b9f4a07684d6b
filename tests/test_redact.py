"""Secrets never reach a report."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from blackwell_doctor.collect.env import collect_env
from blackwell_doctor.redact import REDACTED, pseudonym, redact_text, redact_value

HF = "hf_" + "a1B2c3D4e5F6g7H8i9J0kLmNoPqR"


@pytest.mark.parametrize(
    "name", ["HF_TOKEN", "VLLM_API_KEY", "NCCL_IB_PASSWORD", "AWS_SECRET_ACCESS_KEY", "MY_PASS"]
)
def test_secret_names_are_redacted(name: str) -> None:
    assert redact_value(name, "s3cr3t-value") == REDACTED


@pytest.mark.parametrize(
    ("name", "value"),
    [
        ("NCCL_P2P_DISABLE", "1"),
        ("CUDA_VISIBLE_DEVICES", "0,1,2,3"),
        ("PYTORCH_CUDA_ALLOC_CONF", "expandable_segments:True"),
        ("NCCL_SOCKET_IFNAME", "eth0"),
    ],
)
def test_ordinary_values_are_kept(name: str, value: str) -> None:
    assert redact_value(name, value) == value


@pytest.mark.parametrize(
    ("text", "leak"),
    [
        (f"vllm serve /model --api-key {HF}", HF),
        ("vllm serve --api-key=abc123secret", "abc123secret"),
        ("python -m sglang --token tok_live_123", "tok_live_123"),
        ("--password hunter2", "hunter2"),
        ("https://user:pa55w0rd@registry.example/v2/", "pa55w0rd"),
        ("HF_TOKEN=xyz987 python serve.py", "xyz987"),
        ("key is ghp_0123456789abcdefghijABCDEFGHIJ", "ghp_0123456789abcdefghijABCDEFGHIJ"),
        ("AKIAABCDEFGHIJKLMNOP in a log", "AKIAABCDEFGHIJKLMNOP"),
    ],
)
def test_secrets_in_command_lines_are_redacted(text: str, leak: str) -> None:
    out = redact_text(text)
    assert leak not in out
    assert REDACTED in out


def test_collect_env_keeps_what_matters_and_redacts_secrets() -> None:
    env = collect_env(
        {
            "NCCL_P2P_DISABLE": "1",
            "VLLM_API_KEY": "sk-" + "x" * 30,
            "HF_TOKEN": HF,
            "OMP_NUM_THREADS": "6",
            "HOME": "/root",
            "PATH": "/usr/bin",
            "VLLM_EXTRA": f"--api-key {HF}",
        }
    )
    assert env == {
        "HF_TOKEN": REDACTED,
        "NCCL_P2P_DISABLE": "1",
        "OMP_NUM_THREADS": "6",
        "VLLM_API_KEY": REDACTED,
        "VLLM_EXTRA": f"--api-key {REDACTED}",
    }


def test_pseudonyms_are_stable_and_hide_the_input() -> None:
    uuid = "GPU-b0862b01-763b-fef0-7bdf-8501f24a9282"
    assert pseudonym("GPU", uuid) == pseudonym("GPU", uuid)
    assert pseudonym("GPU", uuid) != pseudonym("GPU", uuid[:-1] + "3")
    assert "b0862b01" not in pseudonym("GPU", uuid)


@given(st.text(max_size=200), st.text(alphabet="abcdefghijklmnopqrstuvwxyz0123456789", min_size=8))
def test_a_secret_after_a_secret_flag_never_survives(prefix: str, secret: str) -> None:
    out = redact_text(f"{prefix} --api-key {secret}")
    assert f"--api-key {secret}" not in out
