"""Secrets never leave the host: redaction of env values, command lines and identities.

Always applied: secret-looking environment values and command-line arguments. With
``--redact``: host identity too (hostname, GPU UUIDs become stable pseudonyms so a facts
file still pairs NVML and CUDA views of the same GPU).
"""

from __future__ import annotations

import hashlib
import re

REDACTED = "<redacted>"

# Names that hold credentials: HF_TOKEN, VLLM_API_KEY, NCCL_..._PASSWORD, AWS_SECRET_ACCESS_KEY.
_SECRET_NAME = re.compile(
    r"(TOKEN|SECRET|PASSW(OR)?D?|(^|_)PASS($|_)|API_?KEY|(^|_)KEY($|_)|CREDENTIAL|AUTH|COOKIE|"
    r"SESSION|PRIVATE)",
    re.IGNORECASE,
)
# Values that are credentials whatever the variable is called.
_SECRET_VALUE = re.compile(
    r"(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
    r"sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|"
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)
# user:password@ in URLs.
_URL_CREDENTIALS = re.compile(r"(?P<scheme>[a-zA-Z][a-zA-Z0-9+.-]*://)[^/\s:@]+:[^/\s@]+@")
# --api-key X, --token=X, --password X, key=value pairs with a secret-looking key.
_SECRET_FLAG = re.compile(
    r"(?P<flag>--?[A-Za-z0-9_-]*(?:token|secret|passw(?:or)?d|api[-_]?key|auth|credential)"
    r"[A-Za-z0-9_-]*)(?P<sep>[= ])(?P<value>\S+)",
    re.IGNORECASE,
)
_SECRET_PAIR = re.compile(
    r"(?P<key>\b[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|api[-_]?key|credential)"
    r"[A-Za-z0-9_.-]*)=(?P<value>\S+)",
    re.IGNORECASE,
)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME.search(name))


def redact_value(name: str, value: str) -> str:
    """The value of environment variable ``name`` as it may appear in a report."""
    if value and is_secret_name(name):
        return REDACTED
    return redact_text(value)


def redact_text(text: str) -> str:
    """Redact secrets inside free text: command lines, log lines, URLs."""
    text = _URL_CREDENTIALS.sub(lambda m: f"{m['scheme']}{REDACTED}@", text)
    text = _SECRET_FLAG.sub(lambda m: f"{m['flag']}{m['sep']}{REDACTED}", text)
    text = _SECRET_PAIR.sub(lambda m: f"{m['key']}={REDACTED}", text)
    return _SECRET_VALUE.sub(REDACTED, text)


def pseudonym(kind: str, value: str) -> str:
    """A stable stand-in for an identifier: the same input gives the same output."""
    digest = hashlib.sha256(f"blackwell-doctor:{kind}:{value}".encode()).hexdigest()[:8]
    return f"{kind}-redacted-{digest}"
