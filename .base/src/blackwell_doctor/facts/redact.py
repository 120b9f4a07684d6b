"""Secrets never leave the host: redaction of env values, command lines and identities.

Always applied: secret-looking environment values and command-line arguments. With
``--redact``: host identity too (hostname, GPU UUIDs become stable pseudonyms so a facts
file still pairs NVML and CUDA views of the same GPU; identity-bearing kernel parameters,
the kernel's build user@host, home directories in paths).
"""

from __future__ import annotations

import re
import urllib.parse
from collections.abc import Iterable, Mapping
from typing import TYPE_CHECKING
from urllib.parse import urlsplit, urlunsplit

from blackwell_doctor.facts import regexcache

if TYPE_CHECKING:
    from blackwell_doctor.facts.bench import BenchFacts
    from blackwell_doctor.facts.document import Facts, LogFacts, Unavailable
    from blackwell_doctor.facts.model import ModelFacts

REDACTED = "<redacted>"


# Patterns compile when first used (what a run does not redact it never compiles), through
# the CLI's cache of compiled patterns (start-up: docs/performance.md).
_lazy = regexcache.lazy


# Names that hold credentials: HF_TOKEN, VLLM_API_KEY, NCCL_..._PASSWORD, AWS_SECRET_ACCESS_KEY,
# VLLM_PASSPHRASE, MYSQL_PWD, TLS_PRIVATE_KEY, SESSION_SECRET, HF_HUB_COOKIE, SENTRY_DSN (its
# URL carries the key), CI_JOB_JWT. Checked against a table of real names in
# tests/test_secret_names.py; TOKENIZERS_PARALLELISM and PWD (the working directory) are not.
_SECRET_NAME = _lazy(
    r"(TOKEN(?!IZER)|SECRET|PASSW(OR)?D?|PASSPHRASE|(^|_)PASS($|_)|_PWD$|API_?KEY|(^|_)KEY($|_)|"
    r"PRIVATE|CREDENTIAL|AUTH|COOKIE|SESSION|(^|_)DSN$|(^|_)JWT($|_))",
    re.IGNORECASE,
)
# Values that are credentials whatever the variable is called.
_SECRET_VALUE = _lazy(
    r"(hf_[A-Za-z0-9]{20,}|gh[pousr]_[A-Za-z0-9]{20,}|github_pat_[A-Za-z0-9_]{20,}|"
    r"sk-[A-Za-z0-9_-]{20,}|AKIA[0-9A-Z]{16}|xox[abprs]-[A-Za-z0-9-]{10,}|"
    r"eyJ[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,}\.[A-Za-z0-9_-]{10,})"
)
# user:password@ in URLs.
_URL_CREDENTIALS = _lazy(r"[a-zA-Z][a-zA-Z0-9+.-]*://(?P<value>[^/\s:@]+:[^/\s@]+)@")
# A flag's or pair's value: a quoted string (to its closing quote, or to the end when the
# quote is never closed: better too much redacted than a leak) or a word.
_VALUE = r"""(?:"[^"]*"?|'[^']*'?|[^\s"']\S*)"""
_FLAG_WORDS = (
    r"(?:token|secret|passw(?:or)?d|passphrase|api[-_]?key|auth|credential|private[-_]?key|"
    r"cookie|session)"
)
_FLAG_NAME = rf"--?[A-Za-z0-9_-]*{_FLAG_WORDS}[A-Za-z0-9_-]*"
# --api-key X, --api-key  X, --token=X, --password "two words", --token='x y'.
_SECRET_FLAG = _lazy(_FLAG_NAME, re.IGNORECASE)
# What follows a secret flag: "=" or whitespace, then the value. A value after whitespace
# is never itself a secret flag: in "--auth-required --api-key X", X is --api-key's.
_FLAG_VALUE = _lazy(rf"(?:=|\s+(?!{_FLAG_NAME}))(?P<value>{_VALUE})", re.IGNORECASE)
# key=value pairs with a secret-looking key (HF_TOKEN=x, db.password='x y').
_SECRET_PAIR = _lazy(
    r"\b[A-Za-z0-9_.-]*(?:token|secret|passw(?:or)?d|passphrase|api[-_]?key|credential|"
    r"private[-_]?key|cookie)[A-Za-z0-9_.-]*(?==)",
    re.IGNORECASE,
)
_PAIR_VALUE = _lazy(rf"=(?P<value>{_VALUE})")
# HTTP credentials (RFC 9110 §11.6.2): "Authorization: <scheme> <credentials>" (also
# Proxy-Authorization, and as a key=value) whatever the scheme, and a bare "Bearer <token>"
# or "Basic <base64>" anywhere (RFC 6750 b64token characters). "Basic authentication" in a
# log line loses its second word: too much redacted, never too little.
_AUTH_HEADER = _lazy(
    r"\b(?:proxy-)?authorization\s*[:=]\s*"
    r"(?:(?:bearer|basic|token|digest|negotiate|ntlm|apikey)\s+)?"
    r"(?P<value>[^\s\"',<]+)",
    re.IGNORECASE,
)
_AUTH_SCHEME = _lazy(r"\b(?:bearer|basic)\s+(?P<value>[A-Za-z0-9._~+/-]+=*)", re.IGNORECASE)


def is_secret_name(name: str) -> bool:
    return bool(_SECRET_NAME().search(name))


def redact_value(name: str, value: str) -> str:
    """The value of environment variable ``name`` as it may appear in a report."""
    if value and is_secret_name(name):
        return REDACTED
    return redact_text(value)


# One command-line argument that is an assignment: NAME=VALUE, or --env=NAME=VALUE.
_ARG_ASSIGNMENT = _lazy(r"^(?P<flag>--?[A-Za-z0-9-]+=)?(?P<name>[A-Za-z_][A-Za-z0-9_]*)=")


def redact_argv(argv: list[str]) -> list[str]:
    """A command line, argument by argument, as it may be written to a log: the value after
    a secret-looking flag (``--api-key X``), the value of a secret-looking assignment
    (``-e VLLM_PASSPHRASE=x``, ``--env=HF_TOKEN=x``), and secrets inside any argument."""
    out: list[str] = []
    after_flag = False
    for arg in argv:
        assignment = _ARG_ASSIGNMENT().match(arg)
        if after_flag and not arg.startswith("-"):
            out.append(REDACTED)
        elif assignment and is_secret_name(assignment["name"]):
            out.append(arg[: assignment.end()] + REDACTED)
        else:
            out.append(redact_text(arg))
        after_flag = "=" not in arg and bool(_SECRET_FLAG().fullmatch(arg))
    return out


def redact_text(text: str) -> str:
    """Redact secrets inside free text: command lines, log lines, URLs.

    Every pattern runs on the original text and the spans found are merged before any is
    replaced, so no pattern can hide a secret from another (a quoted value that swallows
    the next flag, a header whose "credential" is a flag)."""
    spans: list[tuple[int, int]] = []
    for pattern in (_URL_CREDENTIALS(), _AUTH_HEADER(), _AUTH_SCHEME()):
        spans.extend(m.span("value") for m in pattern.finditer(text))
    for names, values in ((_SECRET_FLAG(), _FLAG_VALUE()), (_SECRET_PAIR(), _PAIR_VALUE())):
        for name in names.finditer(text):
            value = values.match(text, name.end())
            if value is not None:
                spans.append(value.span("value"))
    spans.extend(m.span() for m in _SECRET_VALUE().finditer(text))
    return _replace_spans(text, spans)


def _replace_spans(text: str, spans: list[tuple[int, int]]) -> str:
    """Each maximal run of overlapping spans becomes one REDACTED."""
    out: list[str] = []
    position = 0
    for start, end in sorted(spans):
        if end <= position and start < position:
            continue  # inside the run already replaced
        if start < position:  # overlaps the run just replaced: extend it
            position = end
            continue
        out.append(text[position:start])
        out.append(REDACTED)
        position = end
    out.append(text[position:])
    return "".join(out)


# --------------------------------------------------------------------------- known secrets

# A cut excerpt that ends with this many characters of a secret (or more) loses them.
_CUT_PREFIX = 4


# A base64 form shorter than this is not looked for inside other text (too likely to occur
# by chance); the secret itself always is.
_MIN_EMBEDDED_FORM = 8


def secret_forms(secret: str) -> list[str]:
    """``secret`` as a server may echo it: itself, percent-encoded (a key in a URL or a form
    body), and its base64 in the RFC 4648 standard and URL-safe alphabets, with and without
    padding, and as it shows inside the base64 of longer text: after 0, 1 or 2 bytes of
    something else (each alignment gives other characters), the characters at its two
    edges, which depend on the bytes around it, left out."""
    import base64  # only with a secret to look for (~1 ms of start-up with struct)

    raw = secret.encode("utf-8", "surrogatepass")
    forms = [secret, urllib.parse.quote(secret, safe=""), urllib.parse.quote_plus(secret)]
    for encode in (base64.b64encode, base64.urlsafe_b64encode):
        exact = encode(raw).decode("ascii")
        forms += [exact, exact.rstrip("=")]
        for before in (0, 1, 2):
            text = encode(b"\0" * before + raw).decode("ascii").rstrip("=")
            # Characters wholly of the secret's bits: from the first after ``before``
            # bytes' bits to the last whose six bits all lie inside the secret.
            start = -(-before * 8 // 6)
            end = (before + len(raw)) * 8 // 6
            core = text[start:end]
            if len(core) >= _MIN_EMBEDDED_FORM:
                forms.append(core)
    return list(dict.fromkeys(forms))


class Scrubber:
    """Removes known secrets (an API key, URL credentials) from text a server sent back,
    in each of their :func:`secret_forms`: what no pattern can recognise, because the
    value itself is known. Every other secret-looking span goes too (:func:`redact_text`).
    """

    def __init__(self, secrets: Iterable[str] = ()) -> None:
        forms = {form for secret in secrets if secret for form in secret_forms(secret)}
        # Longest first: a form that contains another is replaced whole.
        self.forms = sorted((f for f in forms if f), key=len, reverse=True)

    def __call__(self, text: str, *, cut: bool = False, patterns: bool = True) -> str:
        """``text`` without the secrets; ``cut``: the text may have been cut short, so a
        secret's first characters (at least 4) at its very end go as well; ``patterns``:
        secret-looking spans (:func:`redact_text`) go too (not in a model's answer, which
        is compared as it is)."""
        for form in self.forms:
            if form in text:
                text = text.replace(form, REDACTED)
        if cut:
            for form in self.forms:
                for size in range(len(form) - 1, _CUT_PREFIX - 1, -1):
                    if text.endswith(form[:size]):
                        text = text[:-size] + REDACTED
                        break
        return redact_text(text) if patterns else text


# --------------------------------------------------------------------------- URLs kept

# RFC 3986 appendix B: splits any string into the five parts, never fails.
_URI = _lazy(
    r"^(?:(?P<scheme>[^:/?#]+):)?(?://(?P<authority>[^/?#]*))?"
    r"(?P<path>[^?#]*)(?:\?(?P<query>[^#]*))?(?:#(?P<fragment>.*))?$",
    re.DOTALL,
)
# A path segment kept as it is: a plain word (letters, digits, ".", "-", "_", "~") that
# is not long, and not long *and* numeric (a hex or base64 token).
_PLAIN_SEGMENT = _lazy(r"[A-Za-z0-9._~-]{1,40}")
_TOKEN_LIKE_LENGTH = 16


def _secret_segment(segment: str) -> bool:
    if not segment:
        return False
    if not _PLAIN_SEGMENT().fullmatch(segment) or is_secret_name(segment):
        return True
    if _SECRET_VALUE().search(segment):
        return True
    return len(segment) >= _TOKEN_LIKE_LENGTH and any(c.isdigit() for c in segment)


def redact_url_path(path: str) -> str:
    """A URL path as it may be kept: a segment that may be a credential (anything but a
    plain word, a secret-looking name such as ``token`` or ``SECRETKEY``, a long word with
    digits, a known token format) becomes ``<redacted>``, and so does the segment after a
    secret-looking name (``/key/VALUE``). Over-redacts a long model name in a prefix
    (``Llama-3.1-8B-Instruct``): better too much than a gateway's token."""
    out: list[str] = []
    after_name = False
    for segment in path.split("/"):
        secret = _secret_segment(segment)
        out.append(REDACTED if segment and (secret or after_name) else segment)
        after_name = bool(segment) and is_secret_name(segment)
    return "/".join(out)


def redact_url(url: str) -> str:
    """Any text given as a URL, as it may be kept or printed: credentials (``user:pw@``),
    query values and the fragment become ``<redacted>``, so do path segments that may be
    credentials (:func:`redact_url_path`). Never fails, whatever the text."""
    match = _URI().match(url)
    assert match is not None  # every string matches
    scheme, authority, path, query, fragment = match.group(
        "scheme", "authority", "path", "query", "fragment"
    )
    out = f"{scheme}:" if scheme is not None else ""
    if authority is not None:
        host = authority.rpartition("@")[2]
        out += "//" + (f"{REDACTED}@" if "@" in authority else "") + host
    out += redact_url_path(path)
    if query is not None:
        pairs = [p.partition("=") for p in query.split("&")]
        out += "?" + "&".join(
            f"{k}={REDACTED}" if sep else (REDACTED if k else "") for k, sep, _ in pairs
        )
    if fragment is not None:
        out += "#" + (REDACTED if fragment else "")
    return out


def pseudonym(kind: str, value: str) -> str:
    """A stable stand-in for an identifier: the same input gives the same output."""
    import hashlib  # here: importing it loads OpenSSL (~5 ms), which scan-logs never needs

    digest = hashlib.sha256(f"blackwell-doctor:{kind}:{value}".encode()).hexdigest()[:8]
    return f"{kind}-redacted-{digest}"


# --------------------------------------------------------------------------- identity (--redact)

# Kernel parameters that carry an address, a host name or a disk's identity: ip=
# (Documentation/admin-guide/nfs/nfsroot.rst: client/server addresses, hostname),
# nfsroot= (server and path), hostname= and systemd.hostname=, cryptdevice= (dm-crypt
# hooks: device UUID and mapping name), rd.luks.uuid=/rd.luks.name=/luks.uuid=, BOOTIF=
# (the PXE interface's MAC address).
_CMDLINE_IDENTITY = _lazy(
    r"""(?P<pre>(?:^|(?<=\s))"?)"""
    r"(?P<name>ip|nfsroot|hostname|systemd\.hostname|cryptdevice|rd\.luks\.uuid|"
    r"rd\.luks\.name|luks\.uuid|BOOTIF)="
    r"""(?P<value>"[^"]*"?|\S+)"""
)
# root=/resume= name a disk by its identity (UUID=, PARTUUID=, LABEL=, PARTLABEL=, or a
# /dev/disk/by-*/ link); the kind stays, the identity goes: root=UUID=<redacted>.
_CMDLINE_DISK = _lazy(
    r"""(?P<pre>(?:^|(?<=\s))"?(?:root|resume)=)"""
    r"(?P<kind>UUID=|PARTUUID=|LABEL=|PARTLABEL=|/dev/disk/by-[a-z-]+/)"
    r"""(?P<value>"[^"]*"?|\S+)"""
)
# /proc/version: "Linux version 5.15.0-91-generic (buildd@lcy02-amd64-059) (gcc ...)".
_BUILD_USER_HOST = _lazy(r"\((?P<who>[^()\s]*@[^()\s]*)\)")
# Home directories name a user: /home/alice/.venv/lib, /Users/alice/models.
_HOME_DIR = _lazy(r"(?P<base>(?<![A-Za-z0-9_.-])/(?:home|Users)/)(?P<user>[^/\s:;,\"'=]+)")


def redact_kernel_cmdline_identity(cmdline: str) -> str:
    """``ip=``, ``nfsroot=``, ``hostname=``... become ``<redacted>``; ``root=UUID=...`` and
    ``resume=PARTUUID=...`` keep their kind: ``root=UUID=<redacted>``."""
    cmdline = _CMDLINE_DISK().sub(lambda m: f"{m['pre']}{m['kind']}{REDACTED}", cmdline)
    return _CMDLINE_IDENTITY().sub(lambda m: f"{m['pre']}{m['name']}={REDACTED}", cmdline)


def redact_build_host(proc_version: str) -> str:
    """The kernel builder's user@host in /proc/version: ``(me@box)`` → ``(<redacted>)``."""
    return _BUILD_USER_HOST().sub(f"({REDACTED})", proc_version, count=1)


def redact_home_dirs(text: str) -> str:
    """``/home/alice/x`` → ``/home/<redacted>/x``; ``/Users/alice`` likewise."""
    return _HOME_DIR().sub(lambda m: f"{m['base']}{REDACTED}", text)


def redact_env_identity(env: Mapping[str, str]) -> dict[str, str]:
    """``--redact``: user names in home-directory paths (LD_LIBRARY_PATH, HF_HOME...)."""
    return {name: redact_home_dirs(value) for name, value in env.items()}


def redact_identity(facts: Facts) -> Facts:
    """``--redact``: drop what identifies the host; keep what the checks judge."""
    import msgspec

    from blackwell_doctor.facts.document import NvmlFacts

    platform = facts.platform
    if isinstance(platform.hostname, str):
        platform = msgspec.structs.replace(platform, hostname=REDACTED)
    if isinstance(platform.kernel_cmdline, str):
        platform = msgspec.structs.replace(
            platform, kernel_cmdline=redact_kernel_cmdline_identity(platform.kernel_cmdline)
        )
    if isinstance(platform.kernel_version, str):
        platform = msgspec.structs.replace(
            platform, kernel_version=redact_build_host(platform.kernel_version)
        )
    nvml = facts.nvml
    if isinstance(nvml, NvmlFacts):
        nvml = msgspec.structs.replace(
            nvml,
            gpus=[
                msgspec.structs.replace(g, uuid=pseudonym("GPU", g.uuid))
                if isinstance(g.uuid, str)
                else g
                for g in nvml.gpus
            ],
        )
    known = (
        {} if not isinstance(facts.platform.hostname, str) else {facts.platform.hostname: REDACTED}
    )
    if isinstance(facts.nvml, NvmlFacts):
        known |= {
            g.uuid: pseudonym("GPU", g.uuid) for g in facts.nvml.gpus if isinstance(g.uuid, str)
        }
    return msgspec.structs.replace(
        facts,
        platform=platform,
        nvml=nvml,
        env=redact_env_identity(facts.env),
        logs=_redact_log_identity(facts.logs, known),
        model=_redact_model_identity(facts.model),
        bench=_redact_bench_identity(facts.bench),
        redacted=True,
    )


def _redact_model_identity(
    model: ModelFacts | Unavailable | None,
) -> ModelFacts | Unavailable | None:
    """The model directory's path (and the problems that name files in it) may sit in a
    home directory: ``/home/alice/models/x`` becomes ``/home/<redacted>/models/x``."""
    import msgspec

    from blackwell_doctor.facts.model import ModelFacts

    if not isinstance(model, ModelFacts):
        return model
    return msgspec.structs.replace(
        model,
        path=redact_home_dirs(model.path),
        problems=[
            msgspec.structs.replace(p, detail=redact_home_dirs(p.detail)) for p in model.problems
        ],
    )


def _redact_log_identity(
    logs: LogFacts | Unavailable | None, known: Mapping[str, str]
) -> LogFacts | Unavailable | None:
    """Log lines and file names can carry the host's name, its GPUs' UUIDs and home
    directories (``collect --redact --logs``): each becomes what the facts show instead. A
    name is replaced wherever no letter or digit touches it (``node7-vllm.log`` too):
    better a word too many redacted than the host named."""
    import msgspec

    from blackwell_doctor.facts.document import LogFacts

    if not isinstance(logs, LogFacts):
        return logs
    names = sorted((n for n in known if n), key=len, reverse=True)
    pattern = (
        re.compile("|".join(rf"(?<![A-Za-z0-9]){re.escape(n)}(?![A-Za-z0-9])" for n in names))
        if names
        else None
    )

    def scrub(text: str) -> str:
        if pattern is not None:
            text = pattern.sub(lambda m: known[m[0]], text)
        return redact_home_dirs(text)

    return msgspec.structs.replace(
        logs,
        sources=[msgspec.structs.replace(s, name=scrub(s.name)) for s in logs.sources],
        findings=[
            msgspec.structs.replace(f, path=scrub(f.path), excerpt=scrub(f.excerpt))
            for f in logs.findings
        ],
    )


def _redact_bench_identity(bench: BenchFacts | None) -> BenchFacts | None:
    """The bench run's server URL without its host (:func:`redact_url_host`)."""
    if bench is None:
        return None
    import msgspec

    return msgspec.structs.replace(bench, url=redact_url_host(bench.url))


def redact_url_host(url: str) -> str:
    """``url`` with its host hidden (scheme, port and path kept, but for path segments that
    may be credentials: :func:`redact_url_path`): ``--redact``."""
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        return "<redacted>"
    netloc = "<redacted>" + (f":{port}" if port is not None else "")
    return urlunsplit((parts.scheme, netloc, redact_url_path(parts.path), "", ""))
