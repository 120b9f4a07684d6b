"""Which variable names hold secrets, tested against names that real tools use, and the
crash log (the file users are asked to share) written with the same redaction."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blackwell_doctor.facts.redact import REDACTED, is_secret_name, redact_argv

# Names from the documentation of the tools that set them.
SECRET_NAMES = [
    "HF_TOKEN",  # huggingface_hub
    "HUGGING_FACE_HUB_TOKEN",
    "VLLM_API_KEY",  # vllm serve
    "OPENAI_API_KEY",
    "NGC_API_KEY",  # NVIDIA NGC CLI
    "NGC_CLI_API_KEY",
    "WANDB_API_KEY",
    "GITHUB_TOKEN",
    "AWS_SECRET_ACCESS_KEY",
    "AWS_SESSION_TOKEN",
    "AZURE_CLIENT_SECRET",
    "GOOGLE_APPLICATION_CREDENTIALS",
    "DOCKER_AUTH_CONFIG",  # GitLab runner
    "VLLM_PASSPHRASE",
    "SSL_KEY_PASSPHRASE",
    "GPG_PASSPHRASE",
    "PGPASSWORD",  # libpq
    "MYSQL_PWD",  # mysql client
    "DB_PASSWD",
    "REDIS_PASS",
    "SMTP_PASSWORD",
    "TLS_PRIVATE_KEY",
    "SSH_PRIVATE_KEY",
    "JWT_PRIVATEKEY",
    "SESSION_SECRET",
    "FLASK_SESSION_KEY",
    "SESSION_ID",
    "COOKIE_SECRET",
    "HF_HUB_COOKIE",
    "AUTH_HEADER",
    "BASIC_AUTH",
    "OAUTH_CLIENT_SECRET",
    "NPM_CONFIG__AUTH",
    "SENTRY_DSN",  # the DSN carries its key
    "VAULT_TOKEN",
    "CI_JOB_JWT",
    "ANTHROPIC_API_KEY",
    "MINIO_ROOT_PASSWORD",
    "AWS_ACCESS_KEY_ID",
    "KAGGLE_KEY",
]

# Names that hold no secret and that a diagnosis needs to see.
ORDINARY_NAMES = [
    "CUDA_VISIBLE_DEVICES",
    "NCCL_P2P_DISABLE",
    "NCCL_IB_HCA",
    "NCCL_SOCKET_IFNAME",
    "VLLM_USE_V1",
    "VLLM_ATTENTION_BACKEND",
    "TOKENIZERS_PARALLELISM",
    "HF_HUB_OFFLINE",
    "HF_HOME",
    "PYTORCH_CUDA_ALLOC_CONF",
    "OMP_NUM_THREADS",
    "LD_LIBRARY_PATH",
    "PWD",
    "OLDPWD",
    "FLASHINFER_WORKSPACE_BASE",
    "TORCH_CUDA_ARCH_LIST",
    "NVIDIA_DRIVER_CAPABILITIES",
    "NCCL_IB_GID_INDEX",
]


@pytest.mark.parametrize("name", SECRET_NAMES)
def test_secret_names_of_real_tools_are_recognised(name: str) -> None:
    assert is_secret_name(name)


@pytest.mark.parametrize("name", ORDINARY_NAMES)
def test_ordinary_names_stay_visible(name: str) -> None:
    assert not is_secret_name(name)


SECRET = "hunter2-correct-horse"


@pytest.mark.parametrize(
    "argv",
    [
        ["recommend", "-e", f"VLLM_PASSPHRASE={SECRET}"],
        ["recommend", f"--env=HF_TOKEN={SECRET}"],
        ["recommend", "--env", f"MYSQL_PWD={SECRET}"],
        ["apply", "--api-key", SECRET],
        ["apply", f"--api-key={SECRET}"],
        ["apply", "-e", f"SESSION_SECRET={SECRET}", "--yes"],
        ["check", "--logs", f"https://user:{SECRET}@example.com/x.log"],
    ],
)
def test_argv_is_redacted_element_by_element(argv: list[str]) -> None:
    redacted = redact_argv(argv)
    assert len(redacted) == len(argv)
    assert SECRET not in " ".join(redacted)
    assert REDACTED in " ".join(redacted)
    assert redacted[0] == argv[0]


def test_the_crash_log_holds_no_secret_from_argv(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    from blackwell_doctor import cli
    from blackwell_doctor.recommend import plan

    def crash(*args: object, **kwargs: object) -> object:
        raise RuntimeError("boom")

    monkeypatch.setattr(plan, "build_recommendation", crash)
    monkeypatch.setenv("TMPDIR", str(tmp_path))
    import tempfile

    monkeypatch.setattr(tempfile, "tempdir", None)
    token = "hf_" + "a1B2c3D4e5" * 3
    args = ["recommend", "--facts", "tests/fixtures/facts/b200-x8.json"]
    args += ["-e", f"HF_TOKEN={token}", "-e", f"VLLM_PASSPHRASE={SECRET}"]
    monkeypatch.setattr("sys.argv", ["blackwell-doctor", *args])
    assert cli.main(args) == 4
    err = capsys.readouterr().err
    [path] = re.findall(r"the details are in (\S+)", err)
    text = Path(path).read_text()
    assert "argv" in text
    assert "HF_TOKEN=" in text
    assert token not in text
    assert SECRET not in text
