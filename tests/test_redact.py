"""Secrets never reach a report."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor.collect.env import collect_env
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.facts.document import SCHEMA_VERSION, Facts, ToolInfo, Unavailable
from blackwell_doctor.facts.redact import (
    REDACTED,
    pseudonym,
    redact_build_host,
    redact_env_identity,
    redact_home_dirs,
    redact_identity,
    redact_kernel_cmdline_identity,
    redact_text,
    redact_value,
)
from tests.conftest import skip_without
from tests.hosttree import PROC_VERSION_UBUNTU_2204, no_gpu

try:
    from hypothesis import assume, given
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

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


# --------------------------------------------------------------------------- HTTP credentials

JWT = "eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjM0NTY3ODkwIn0.dozjgNryP4J3jVmNHl0w5N_XgL0n3I9PlFUP0THsR8U"


@pytest.mark.parametrize(
    ("text", "leak", "kept"),
    [
        ("curl -H 'Authorization: Bearer abc.DEF-123_xyz' http://x", "abc.DEF-123_xyz", "Bearer "),
        (
            'curl -H "Authorization: Basic dXNlcjpwYXNzd29yZA==" http://x',
            "dXNlcjpwYXNzd29yZA==",
            "Basic ",
        ),
        ("Authorization: token s3cr3tvalue", "s3cr3tvalue", "Authorization: token "),
        ("authorization:rawkey123456", "rawkey123456", "authorization:"),
        ("Proxy-Authorization: Basic Zm9vOmJhcg==", "Zm9vOmJhcg==", "Proxy-Authorization: "),
        ("request failed with header bearer   opaque~token+/=", "opaque~token+/=", "bearer"),
        (f"OPENAI_HEADERS=Authorization=Bearer {JWT}", JWT, "Bearer "),
    ],
)
def test_http_credentials_are_redacted_anywhere(text: str, leak: str, kept: str) -> None:
    out = redact_text(text)
    assert leak not in out
    assert REDACTED in out
    assert kept in out


# --------------------------------------------------------------------------- flags


@pytest.mark.parametrize(
    ("text", "expected"),
    [
        ("--api-key  s3cr3t --port 8000", f"--api-key  {REDACTED} --port 8000"),
        ("--api-key\ts3cr3t", f"--api-key\t{REDACTED}"),
        ('--api-key "two words" --port 1', f"--api-key {REDACTED} --port 1"),
        ("--token='x y' --port 1", f"--token={REDACTED} --port 1"),
        ('--password="a b c"', f"--password={REDACTED}"),
        ("--api-key 'never closed --port 1", f"--api-key {REDACTED}"),
        ("HF_TOKEN='a b' python", f"HF_TOKEN={REDACTED} python"),
        # A secret flag's value is never the next secret flag: each keeps its own value.
        ("--auth-required --api-key s3cr3t", f"--auth-required --api-key {REDACTED}"),
        ("--token --api-key s3cr3t", f"--token --api-key {REDACTED}"),
        # One pattern's match never hides a secret from another.
        ('--token " --api-key "s3cr3t"', f"--token {REDACTED}"),
        ("Authorization: Bearer --api-key s3cr3t", f"Authorization: Bearer {REDACTED} {REDACTED}"),
    ],
)
def test_flag_values_with_spaces_and_quotes_are_redacted_whole(text: str, expected: str) -> None:
    assert redact_text(text) == expected


_SECRET_FLAGS = [
    "--api-key",
    "--api_key",
    "--apikey",
    "--token",
    "--hf-token",
    "--password",
    "--passwd",
    "--secret",
    "--client-secret",
    "--auth",
    "--credential",
    "-token",
]
_SECRETS = st.text(
    alphabet="abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789_./+:@!$%^&*(){}[]",
    min_size=8,
    max_size=40,
)


@st.composite
def _flag_and_value(draw: st.DrawFn) -> tuple[str, str]:
    """A secret flag and its value as a shell or a config would write it."""
    secret = draw(_SECRETS)
    flag = draw(st.sampled_from(_SECRET_FLAGS))
    sep = draw(st.one_of(st.just("="), st.text(alphabet=" \t", min_size=1, max_size=4)))
    quote = draw(st.sampled_from(["", '"', "'"]))
    inner = secret
    if quote:
        # Inside quotes a value may have spaces: split the secret at random points.
        cut = draw(st.integers(0, len(secret)))
        inner = secret[:cut] + draw(st.text(alphabet=" \t", max_size=3)) + secret[cut:]
    return f"{flag}{sep}{quote}{inner}{quote}", secret


# What may come just before the flag: text ending in an open quote, another secret flag, a
# header or a URL's userinfo, each of which has consumed a following flag in the past.
_TAILS = st.sampled_from(
    ["", '"', "'", "--token", '--token "', "--token='", "Authorization: Bearer", "x://u:", "a="]
)


@given(st.text(max_size=80), _TAILS, _flag_and_value(), st.text(max_size=80))
def test_any_secret_after_a_secret_flag_never_survives(
    text_before: str, tail: str, flag_and_value: tuple[str, str], suffix: str
) -> None:
    prefix = text_before + tail
    text, secret = flag_and_value
    assume(secret not in prefix and secret not in suffix and secret not in REDACTED)
    out = redact_text(f"{prefix} {text} {suffix}")
    for part in secret.split():
        if len(part) >= 8:
            assert part not in out
    assert secret not in out


# --------------------------------------------------------------------------- identity (--redact)


@pytest.mark.parametrize(
    ("cmdline", "expected"),
    [
        (
            "BOOT_IMAGE=/vmlinuz root=UUID=0b4c1a2e-8d3f-4a5b-9c6d-7e8f9a0b1c2d ro quiet",
            f"BOOT_IMAGE=/vmlinuz root=UUID={REDACTED} ro quiet",
        ),
        (
            "root=PARTUUID=1234abcd-02 resume=UUID=99aa",
            f"root=PARTUUID={REDACTED} resume=UUID={REDACTED}",
        ),
        ("root=/dev/disk/by-uuid/0b4c rw", f"root=/dev/disk/by-uuid/{REDACTED} rw"),
        (
            "ip=10.1.2.3::10.1.2.1:255.255.255.0:gpu-07:eth0:off nfsroot=10.1.2.1:/srv/gpu-07 rw",
            f"ip={REDACTED} nfsroot={REDACTED} rw",
        ),
        (
            "hostname=gpu-07 systemd.hostname=gpu-07",
            f"hostname={REDACTED} systemd.hostname={REDACTED}",
        ),
        (
            "cryptdevice=UUID=1234:cryptroot root=/dev/mapper/cryptroot",
            f"cryptdevice={REDACTED} root=/dev/mapper/cryptroot",
        ),
        ('"ip=10.0.0.9:::::eth0:dhcp" quiet', f'"ip={REDACTED} quiet'),
        ("BOOTIF=01-aa-bb-cc-dd-ee-ff", f"BOOTIF={REDACTED}"),
        # Kept: what the checks read, and what only looks alike.
        (
            "root=/dev/mapper/ubuntu--vg-ubuntu--lv ro iommu=pt amd_iommu=on noip=1 myhostname=x",
            "root=/dev/mapper/ubuntu--vg-ubuntu--lv ro iommu=pt amd_iommu=on noip=1 myhostname=x",
        ),
    ],
)
def test_kernel_cmdline_identity(cmdline: str, expected: str) -> None:
    assert redact_kernel_cmdline_identity(cmdline) == expected


def test_build_user_and_host_in_proc_version() -> None:
    assert redact_build_host(PROC_VERSION_UBUNTU_2204).startswith(
        f"Linux version 5.15.0-91-generic ({REDACTED}) (gcc (Ubuntu 11.4.0-1ubuntu1~22.04)"
    )
    custom = "Linux version 6.6.36-custom (alice@alice-desktop) (gcc (GCC) 13.2.0) #1 SMP"
    assert "alice" not in redact_build_host(custom)
    assert redact_build_host("Linux version 6.6.36 #1 SMP") == "Linux version 6.6.36 #1 SMP"


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("/home/alice/.venv/lib:/usr/lib", f"/home/{REDACTED}/.venv/lib:/usr/lib"),
        ("/Users/bob", f"/Users/{REDACTED}"),
        ("/data/home/carol/x", "/data/home/carol/x"),  # not a home directory root
        ("/opt/Users/x:/home/dave", f"/opt/Users/x:/home/{REDACTED}"),
        ("/root/.cache/huggingface", "/root/.cache/huggingface"),
    ],
)
def test_home_directories(value: str, expected: str) -> None:
    assert redact_home_dirs(value) == expected


def test_env_identity_keeps_names_and_redacts_homes() -> None:
    env = {"LD_LIBRARY_PATH": "/home/alice/cuda/lib64", "NCCL_P2P_DISABLE": "1"}
    assert redact_env_identity(env) == {
        "LD_LIBRARY_PATH": f"/home/{REDACTED}/cuda/lib64",
        "NCCL_P2P_DISABLE": "1",
    }


def test_redact_identity_scrubs_cmdline_build_host_and_env(tmp_path: Path) -> None:
    tree = no_gpu(tmp_path)
    tree.write(
        "/proc/cmdline",
        "BOOT_IMAGE=/boot/vmlinuz root=UUID=0b4c ro ip=10.0.0.7::10.0.0.1:255.0.0.0:build-07::off"
        "\n",
    )
    tree.write("/proc/version", "Linux version 6.1.0-26-amd64 (ops@build-07) (gcc-12) #1 SMP\n")
    facts = Facts(
        schema_version=SCHEMA_VERSION,
        tool=ToolInfo(name="blackwell-doctor", version="0"),
        collected_at="2025-01-01T00:00:00+00:00",
        host_root=str(tmp_path),
        redacted=False,
        platform=collect_platform(tree.fs, {}),
        pci=Unavailable("skipped"),
        nvml=Unavailable("skipped"),
        cuda=Unavailable("skipped"),
        env=collect_env({"HF_HOME": "/home/build-07-user/hf", "CUDA_VISIBLE_DEVICES": "0"}),
    )
    out = redact_identity(facts)
    assert out.redacted is True
    assert out.platform.hostname == REDACTED
    assert out.platform.kernel_cmdline == (
        f"BOOT_IMAGE=/boot/vmlinuz root=UUID={REDACTED} ro ip={REDACTED}"
    )
    assert (
        out.platform.kernel_version == f"Linux version 6.1.0-26-amd64 ({REDACTED}) (gcc-12) #1 SMP"
    )
    assert out.env == {"CUDA_VISIBLE_DEVICES": "0", "HF_HOME": f"/home/{REDACTED}/hf"}
    # Checks still judge the same platform: nothing else changed.
    assert out.platform.wsl == facts.platform.wsl
    assert out.platform.virtualization == facts.platform.virtualization


@given(
    secret=st.text(min_size=6, max_size=40).filter(lambda s: s.strip() == s and s),
    before=st.binary(max_size=5),
    after=st.binary(max_size=5),
    urlsafe=st.booleans(),
    padded=st.booleans(),
)
def test_a_known_secret_goes_inside_the_base64_of_any_longer_text(
    secret: str, before: bytes, after: bytes, urlsafe: bool, padded: bool
) -> None:
    """Issue 19 (audit): a server echoed base64 of the credentials at another alignment
    (a byte in front), unpadded or URL-safe, and they survived; so did a percent-encoded
    key. Whatever surrounds the secret, nothing that decodes back to it is left."""
    import base64

    from blackwell_doctor.facts.redact import REDACTED, Scrubber

    raw = secret.encode("utf-8", "surrogatepass")
    assume(len(raw) >= 8)
    encode = base64.urlsafe_b64encode if urlsafe else base64.b64encode
    echoed = encode(before + raw + after).decode("ascii")
    if not padded:
        echoed = echoed.rstrip("=")
    out = Scrubber([secret])(echoed, patterns=False)
    assert REDACTED in out
    # What is left is the text around it, its edges' characters and the padding.
    assert len(out) - len(REDACTED) <= (len(before) + len(after)) * 4 // 3 + 6


@pytest.mark.parametrize("echo", ["sk-TOPSECRET+/=%2B", "sk-TOPSECRET%2B%2F%3D%252B"])
def test_a_known_secret_goes_percent_encoded(echo: str) -> None:
    from blackwell_doctor.facts.redact import REDACTED, Scrubber

    out = Scrubber(["sk-TOPSECRET+/=%2B"])(f"key={echo}&x=1", patterns=False)
    assert out == f"key={REDACTED}&x=1"
