"""Mine the inference runtimes' own sources for the warnings that say they fall back.

Issue 33, item 4: a fallback vocabulary. For each runtime at a pinned version this lists the
logging calls it makes (Python via :mod:`ast`; C, C++ and CUDA with a small tokenizer; Rust's
``tracing`` macros likewise), renders each message with its placeholders as wildcards, keeps
the warning-level ones whose text says the runtime falls back, lacks support, disables
something or will be slower (:data:`FALLBACK_WORDS`), and writes them as ``[[signature]]``
entries in the schema of ``checks/log_signatures.toml`` to ``checks/log_fallbacks.toml``.

A dev-time tool: the CLI never imports it. Regenerate (each DIR is a pinned runtime's source
tree, obtained as :data:`RUNTIMES` and the generated file's header say)::

    PYTHONPATH=src python tools/logvocab/fallbacks.py \\
        --src vllm=DIR --src sglang=DIR --src flashinfer=DIR ... -o checks/log_fallbacks.toml
"""

from __future__ import annotations

import argparse
import ast
import hashlib
import re
import sys
import textwrap
import tomllib
from collections import Counter
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

# A message is a list of parts: constant text, or None where the runtime substitutes a value.
Part = str | None
Level = Literal["warning", "info", "debug", "stderr"]

# --------------------------------------------------------------------------- the word rule

# A warning "says it falls back" when its text (case-insensitive) has one of these. "Using X
# backend" alone is deliberately not here: vLLM and SGLang print it on every healthy start.
FALLBACK_WORDS = re.compile(
    r"\bfall(?:s|ing)?[ -]?back\b"
    r"|\bnot (?:yet |currently |be )?supported\b|\bunsupported\b"
    r"|\binstead\b"
    r"|\bdisabl(?:e|ed|es|ing)\b"
    r"|\bslow(?:er|ly|down)?\b|\bdegrad(?:e|ed|es|ing|ation)\b"
    r"|\bsub-?optimal\b|\bnot (?:be )?optimi[sz]ed\b"
    # the GPU not used at all: llama.cpp common/arg.cpp "warning: no usable GPU found,
    # --gpu-layers option will be ignored", "not compiled with GPU offload support"
    r"|\bno (?:usable |compatible |supported |available )?(?:GPUs?|CUDA devices?)\b"
    r"|\bGPUs? (?:will |would )?not (?:be )?used\b|\bnot compiled with (?:GPU|CUDA)\b"
    r"|\b(?:running|runs|run|falling back to|using) (?:on )?(?:the )?CPU\b",
    re.IGNORECASE,
)
# ... unless it is advice about the user's own command line or code, not a path the runtime
# took: a deprecation, or "use X instead" said to the reader.
ADVICE_WORDS = re.compile(
    r"\bdeprecat|\bwill (?:likely )?be removed\b|\bremoved in (?:a )?future\b|\byou should\b"
    r"|(?:^|[.;:,!]\s*|\bplease\s+)use\b[^.;]*?\binstead\b",
    re.IGNORECASE,
)


# Command-line flags are names, not words: "--disable-shared-experts-fusion is automatically
# set" says nothing fell back.
FLAGS = re.compile(r"(?<![\w-])--?[A-Za-z][\w-]*")


def says_it_falls_back(text: str) -> bool:
    """The word rule: :data:`FALLBACK_WORDS` and not :data:`ADVICE_WORDS`, outside
    command-line flags (:data:`FLAGS`)."""
    words = FLAGS.sub(" ", text)
    return FALLBACK_WORDS.search(words) is not None and ADVICE_WORDS.search(words) is None


# Which kind of fallback a message reports: the first family its words match, for `meaning`.
_KINDS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bfall(?:s|ing)?[ -]?back\b", re.I), "it falls back"),
    (re.compile(r"\binstead\b", re.I), "uses something else instead"),
    (re.compile(r"supported\b", re.I), "something is not supported"),
    (re.compile(r"\bdisabl", re.I), "it disables a feature"),
    (re.compile(r".", re.S), "it may be slower than it should be"),
)

# The check a rule belongs to: the first whose words the message has; else logs.moe_kernels
# (the fast-kernel check: an attention or GEMM fallback is the same question as a MoE one).
_CHECKS: tuple[tuple[re.Pattern[str], str], ...] = (
    (re.compile(r"\bp2p\b|\bpeer\b|all-?reduce|\bnccl\b|nvlink|custom_ar", re.I), "logs.p2p"),
    (re.compile(r"\bWSL\b|pin(?:ned)? memory", re.I), "logs.platform"),
    (re.compile(r"\bmoe\b|expert|marlin|grouped gemm", re.I), "logs.moe_kernels"),
    (
        re.compile(
            r"compute capability|\bsm_?\d{2,3}\b|architecture|\barch\b|blackwell|hopper|ampere",
            re.I,
        ),
        "logs.arch_support",
    ),
)
DEFAULT_CHECK = "logs.moe_kernels"

MIN_LITERAL = 12  # the shortest constant run that may serve as a rule's prefilter literal
WILDCARD = ".*?"
FILLER = "x7"  # what a composed sample line puts where the runtime substitutes a value

# --------------------------------------------------------------------------- the runtimes


@dataclass(frozen=True)
class Runtime:
    key: str  # the id's second part and the --src name
    name: str
    repo: str  # owner/name on GitHub
    version: str  # the release the tree is
    commit: str  # as far as the release records it
    ref: str  # what source URLs point at: the full commit where known, else the release tag
    obtained: str  # how the tree was had: the command, for the header
    repo_prefix: str  # the tree's path inside the repository
    python: tuple[str, ...] = ()  # folders (relative to the tree) whose *.py are read
    native: tuple[str, ...] = ()  # folders whose C/C++/CUDA files are read
    rust: tuple[str, ...] = ()  # folders whose *.rs are read
    exclude: tuple[str, ...] = ()  # folders under those that are not the serving runtime


RUNTIMES: tuple[Runtime, ...] = (
    Runtime(
        key="vllm",
        name="vLLM",
        repo="vllm-project/vllm",
        version="0.33.0",
        commit="4ba787ec9 (vllm/_version.py of the wheel)",
        ref="v0.33.0",
        obtained=(
            "pip download --no-deps --only-binary :all: vllm==0.33.0; unzip the wheel's vllm/*.py"
        ),
        repo_prefix="",
        python=("vllm",),
    ),
    Runtime(
        key="sglang",
        name="SGLang",
        repo="sgl-project/sglang",
        version="0.5.23",
        commit="not recorded by the wheel (sglang/_version.py: commit_id = None)",
        ref="v0.5.23",
        obtained=(
            "pip download --no-deps --only-binary :all: sglang==0.5.23; "
            "unzip the wheel's sglang/*.py"
        ),
        repo_prefix="python/",
        python=("sglang",),
        exclude=("sglang/lang",),  # the frontend language's client backends (OpenAI, VertexAI)
    ),
    Runtime(
        key="flashinfer",
        name="FlashInfer",
        repo="flashinfer-ai/flashinfer",
        version="nightly-v0.6.18-20260819-27-gfb28d7242 (version.txt 0.6.18)",
        commit="fb28d7242b3506a2348265962041acc1fb56cca4",
        ref="fb28d7242b3506a2348265962041acc1fb56cca4",
        obtained="git archive of that commit (github:flashinfer-ai/flashinfer)",
        repo_prefix="",
        python=("flashinfer",),
        native=("csrc", "include"),
    ),
    Runtime(
        key="llamacpp",
        name="llama.cpp",
        repo="ggml-org/llama.cpp",
        version="0c1e57098 (vendored by llama-cpp-python 0.3.36, its CHANGELOG)",
        commit="0c1e57098",
        ref="0c1e57098",
        obtained="pip download --no-deps llama-cpp-python==0.3.36; its vendor/llama.cpp",
        repo_prefix="",
        native=(
            "src",
            "common",
            "ggml/src",
            "tools/server",
            "tools/cli",
            "tools/completion",
            "tools/mtmd",
        ),
    ),
    Runtime(
        key="tgi",
        name="text-generation-inference",
        repo="huggingface/text-generation-inference",
        version="v3.3.7-1-gdb931fcf",
        commit="db931fcf42da018a3657580c64bf2720f167f9ab",
        ref="db931fcf42da018a3657580c64bf2720f167f9ab",
        obtained="git archive of that commit (github:huggingface/text-generation-inference)",
        repo_prefix="",
        python=("server/text_generation_server",),
        rust=("router", "launcher", "backends"),
    ),
    Runtime(
        key="trtllm",
        name="TensorRT-LLM",
        repo="NVIDIA/TensorRT-LLM",
        version="v0.16.0 (tensorrt_llm/version.py 0.16.0)",
        commit="42a7b0922fc9e095f173eab9a7efa0bcdceadd0d",
        ref="42a7b0922fc9e095f173eab9a7efa0bcdceadd0d",
        obtained=(
            "git archive of that commit, upstream's v0.16 release (github:StudyingShao/"
            "TensorRT-LLM carries it on release/v0.16.0; NVIDIA/TensorRT-LLM's own snapshot is "
            "2.5 GB, over what can be fetched, and PyPI's tensorrt-llm is a stub)"
        ),
        repo_prefix="",
        python=("tensorrt_llm",),
        native=("cpp/include", "cpp/tensorrt_llm"),
    ),
)
BY_KEY = {r.key: r for r in RUNTIMES}
# What a reader of the counts must know about a pin (written into the generated header).
PIN_NOTES = (
    "TensorRT-LLM is pinned at v0.16.0, the newest release whose tree could be had here:",
    "  NVIDIA/TensorRT-LLM's snapshot (2.5 GB) is over what can be fetched, forks that carry",
    "  later releases are as large, and PyPI's tensorrt-llm is a stub that installs from",
    "  NVIDIA's own index. v0.16.0 has no PyTorch backend (tensorrt_llm/_torch) and no sm_100",
    "  or sm_120 code: the warnings TensorRT-LLM 1.x prints from those are not in these rules;",
    "  its TensorRT engine, C++ runtime, plugin and kernel warnings are. FlashInfer's vendored",
    "  copy of TensorRT-LLM's kernels (csrc/nv_internal/tensorrt_llm) is read as FlashInfer.",
)

_SKIP_DIRS = frozenset({"tests", "test", "testing", "benchmarks", "benchmark", "examples"})

# --------------------------------------------------------------------------- calls found


@dataclass(frozen=True)
class Call:
    """One logging call: where it is, its level and its message as parts."""

    path: str  # relative to the runtime's tree
    line: int
    level: Level
    parts: tuple[Part, ...]


def merge(parts: list[Part]) -> tuple[Part, ...]:
    """Adjacent texts joined, adjacent wildcards collapsed, empty texts dropped."""
    out: list[Part] = []
    for part in parts:
        if part == "":
            continue
        if out and part is not None and out[-1] is not None:
            out[-1] = out[-1] + part
        elif out and part is None and out[-1] is None:
            continue
        else:
            out.append(part)
    return tuple(out)


# printf conversions (C and Python %-format); PRId64-style macros are identifiers between
# literals and become wildcards on their own.
_PRINTF = re.compile(
    r"%%|%(?:\([^)]*\))?[-+ #0']*(?:\*|\d+)?(?:\.(?:\*|\d+))?(?:hh|h|ll|l|j|z|t|L|q)?"
    r"[diouxXeEfFgGaAcspnrb\x00]"  # \x00: a macro between C literals ("%" PRId64)
)
# {} placeholders of str.format, Rust format!, fmt/spdlog; {{ and }} are literal braces.
_BRACES = re.compile(r"\{\{|\}\}|\{[^{}]*\}")


def split_printf(text: str) -> list[Part]:
    return _split(text, _PRINTF, {"%%": "%"})


def split_braces(text: str) -> list[Part]:
    return _split(text, _BRACES, {"{{": "{", "}}": "}"})


def _split(text: str, pattern: re.Pattern[str], escapes: dict[str, str]) -> list[Part]:
    parts: list[Part] = []
    at = 0
    for m in pattern.finditer(text):
        parts.append(text[at : m.start()])
        parts.append(escapes.get(m.group()))
        at = m.end()
    parts.append(text[at:])
    return parts


# ---- Python


_PY_LEVELS: dict[str, Level] = {
    "warning": "warning",
    "warning_once": "warning",
    "warn": "warning",
    "warn_once": "warning",
    "info": "info",
    "info_once": "info",
    "debug": "debug",
    "debug_once": "debug",
}


def _py_parts(node: ast.expr, percent: bool) -> list[Part]:
    """A message expression as parts; ``percent``: %-conversions are substituted."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return split_printf(node.value) if percent else [node.value]
    if isinstance(node, ast.JoinedStr):
        parts: list[Part] = []
        for value in node.values:
            if isinstance(value, ast.Constant) and isinstance(value.value, str):
                parts += split_printf(value.value) if percent else [value.value]
            else:
                parts.append(None)
        return parts
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        return _py_parts(node.left, percent) + _py_parts(node.right, percent)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Mod):
        return _py_parts(node.left, True)
    if (
        isinstance(node, ast.Call)
        and isinstance(node.func, ast.Attribute)
        and node.func.attr == "format"
        and isinstance(node.func.value, ast.Constant)
        and isinstance(node.func.value.value, str)
    ):
        return split_braces(node.func.value.value)
    return [None]


def _py_level(call: ast.Call) -> Level | None:
    func = call.func
    if not isinstance(func, ast.Attribute) or func.attr not in _PY_LEVELS:
        return None
    receiver = ast.unparse(func.value)
    if receiver == "warnings" and func.attr == "warn":
        return "warning"
    if "log" not in receiver.lower():
        return None
    return _PY_LEVELS[func.attr]


def python_calls(source: str, path: str) -> Iterator[Call]:
    """Logging calls of a Python module: ``<...log...>.warning/warning_once/warn/info/
    info_once/debug(...)`` and ``warnings.warn(...)``."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return
    for node in ast.walk(tree):
        if not isinstance(node, ast.Call):
            continue
        level = _py_level(node)
        if level is None:
            continue
        msg: ast.expr | None = node.args[0] if node.args else None
        for kw in node.keywords:
            if kw.arg in ("msg", "message"):
                msg = kw.value
        if msg is None:
            continue
        is_warnings = ast.unparse(node.func) == "warnings.warn"
        # logging substitutes %-conversions only when it is given arguments.
        percent = not is_warnings and len(node.args) > 1
        yield Call(path, node.lineno, level, merge(_py_parts(msg, percent)))


# ---- C, C++, CUDA


@dataclass(frozen=True)
class Token:
    kind: Literal["str", "ident", "punct"]
    text: str  # a string literal's value (decoded), else the token
    line: int


_C_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<raw>(?:u8|u|U|L)?R"(?P<delim>[^()\\\s]{0,16})\((?P<rawbody>.*?)\)(?P=delim)")
      | (?P<str>(?:u8|u|U|L)?"(?P<body>(?:[^"\\\n]|\\.)*)")
      | (?P<char>'(?:[^'\\\n]|\\.)*')
      | (?P<ident>[A-Za-z_]\w*)
      | (?P<punct>\S)""",
    re.S | re.X,
)
_C_ESCAPES = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "r": "", "0": ""}


def _c_unescape(body: str) -> str:
    return re.sub(r"\\(.)", lambda m: _C_ESCAPES.get(m.group(1), m.group(1)), body)


def c_tokens(source: str) -> list[Token]:
    tokens: list[Token] = []
    line = 1
    at = 0
    for m in _C_TOKEN.finditer(source):
        line += source.count("\n", at, m.start())
        at = m.start()
        if m.group("comment") is not None or m.group("char") is not None:
            continue
        if m.group("raw") is not None:
            tokens.append(Token("str", m.group("rawbody"), line))
        elif m.group("str") is not None:
            tokens.append(Token("str", _c_unescape(m.group("body")), line))
        elif m.group("ident") is not None:
            tokens.append(Token("ident", m.group("ident"), line))
        else:
            tokens.append(Token("punct", m.group("punct"), line))
    return tokens


Style = Literal["printf", "printf-if-args", "stream", "braces"]


@dataclass(frozen=True)
class Macro:
    level: Level
    fmt_arg: int  # which argument is the message (0-based)
    style: Style  # printf; printf only with further arguments (TLLM); << of each argument
    # joined by " " (FLASHINFER_WARN); {} placeholders (spdlog)


_WRN_PREFIXED = {"SRV_WRN", "QUE_WRN", "RES_WRN", "SPC_WRN", "COM_WRN"}
_INF_PREFIXED = {"SRV_INF", "QUE_INF", "RES_INF", "SPC_INF", "COM_INF"}
C_MACROS: dict[str, Macro] = {
    # llama.cpp / ggml (common/log.h, ggml-impl.h, llama-impl.h, tools/server)
    "GGML_LOG_WARN": Macro("warning", 0, "printf"),
    "LLAMA_LOG_WARN": Macro("warning", 0, "printf"),
    "LOG_WRN": Macro("warning", 0, "printf"),
    **{name: Macro("warning", 0, "printf") for name in _WRN_PREFIXED},
    "SLT_WRN": Macro("warning", 1, "printf"),
    "GGML_LOG_INFO": Macro("info", 0, "printf"),
    "LLAMA_LOG_INFO": Macro("info", 0, "printf"),
    "LOG_INF": Macro("info", 0, "printf"),
    **{name: Macro("info", 0, "printf") for name in _INF_PREFIXED},
    "SLT_INF": Macro("info", 1, "printf"),
    # TensorRT-LLM's logger (also vendored by FlashInfer, csrc/nv_internal)
    "TLLM_LOG_WARNING": Macro("warning", 0, "printf-if-args"),
    "TLLM_LOG_INFO": Macro("info", 0, "printf-if-args"),
    # FlashInfer (include/flashinfer/exception.h, logging.h)
    "FLASHINFER_WARN": Macro("warning", 0, "stream"),
    "FLASHINFER_LOG_WARN": Macro("warning", 0, "braces"),
    "FLASHINFER_LOG_INFO": Macro("info", 0, "braces"),
    # fprintf(stderr, ...): level "stderr", a warning only when its text says so
    "fprintf": Macro("stderr", 1, "printf"),
}

_C_MACRO_NAMES = re.compile(r"\b(?:" + "|".join(C_MACROS) + r")\s*\(")
_OPEN = {"(": ")", "[": "]", "{": "}"}


def _arguments(tokens: list[Token], start: int) -> tuple[list[list[Token]], int] | None:
    """The comma-separated arguments of the call whose ``(`` is ``tokens[start]``."""
    if start >= len(tokens) or tokens[start].text != "(" or tokens[start].kind != "punct":
        return None
    args: list[list[Token]] = [[]]
    depth = 0
    for n in range(start + 1, len(tokens)):
        tok = tokens[n]
        if tok.kind == "punct" and tok.text in _OPEN:
            depth += 1
        elif tok.kind == "punct" and tok.text in ")]}":
            if depth == 0:
                return args, n
            depth -= 1
        elif tok.kind == "punct" and tok.text == "," and depth == 0:
            args.append([])
            continue
        args[-1].append(tok)
    return None


def _c_arg_parts(arg: list[Token], style: Style, substitute: bool) -> list[Part]:
    """An argument as parts: adjacent literals concatenated, an identifier between literals
    (``PRId64``) a wildcard; anything else makes the whole argument a wildcard."""
    if not arg or not any(t.kind == "str" for t in arg):
        return [None]
    if any(t.kind == "punct" for t in arg):
        return [None]
    # The literals joined first, a macro as NUL: "%" PRId64 is one conversion.
    text = "".join("\x00" if tok.kind == "ident" else tok.text for tok in arg)
    if style == "braces":
        parts = split_braces(text)
    elif substitute:
        parts = split_printf(text)
    else:
        parts = [text]
    return [q for p in parts for q in ([p] if p is None else _nul_wildcards(p))]


def _nul_wildcards(text: str) -> list[Part]:
    out: list[Part] = []
    for k, piece in enumerate(text.split("\x00")):
        if k:
            out.append(None)
        out.append(piece)
    return out


def c_calls(source: str, path: str) -> Iterator[Call]:
    """The :data:`C_MACROS` calls of a C, C++ or CUDA file (not their ``#define``)."""
    if not _C_MACRO_NAMES.search(source):
        return  # most files log nothing: tokenizing them is most of the run
    tokens = c_tokens(source)
    for n, tok in enumerate(tokens):
        macro = C_MACROS.get(tok.text) if tok.kind == "ident" else None
        if macro is None or (n > 0 and tokens[n - 1].text in ("define", "undef")):
            continue
        found = _arguments(tokens, n + 1)
        if found is None:
            continue
        args, _end = found
        if tok.text == "fprintf" and [t.text for t in args[0]] != ["stderr"]:
            continue
        if len(args) <= macro.fmt_arg:
            continue
        rest = args[macro.fmt_arg + 1 :]
        if macro.style == "stream":
            parts: list[Part] = []
            for k, arg in enumerate(args):
                if k:
                    parts.append(" ")
                parts += _c_arg_parts(arg, "stream", False)
        else:
            substitute = macro.style == "printf" or (macro.style == "printf-if-args" and bool(rest))
            parts = _c_arg_parts(args[macro.fmt_arg], macro.style, substitute)
        level = macro.level
        if level == "stderr":
            text = "".join(p for p in parts if p is not None)
            level = "warning" if re.search(r"\bwarn(?:ing)?\b", text, re.I) else "stderr"
        yield Call(path, tok.line, level, merge(parts))


# ---- Rust


_RS_TOKEN = re.compile(
    r"""(?P<comment>//[^\n]*|/\*.*?\*/)
      | (?P<raw>b?r(?P<hashes>\#*)"(?P<rawbody>.*?)"(?P=hashes))
      | (?P<str>b?"(?P<body>(?:[^"\\]|\\.)*)")
      | (?P<char>'(?:[^'\\]|\\.)')
      | (?P<ident>[A-Za-z_]\w*!?)
      | (?P<punct>\S)""",
    re.S | re.X,
)


def _rs_unescape(body: str) -> str:
    body = re.sub(r"\\\n\s*", "", body)  # a trailing backslash continues the literal
    return re.sub(r"\\(.)", lambda m: _C_ESCAPES.get(m.group(1), m.group(1)), body)


def rust_tokens(source: str) -> list[Token]:
    tokens: list[Token] = []
    line = 1
    at = 0
    for m in _RS_TOKEN.finditer(source):
        line += source.count("\n", at, m.start())
        at = m.start()
        if m.group("comment") is not None or m.group("char") is not None:
            continue
        if m.group("raw") is not None:
            tokens.append(Token("str", m.group("rawbody"), line))
        elif m.group("str") is not None:
            tokens.append(Token("str", _rs_unescape(m.group("body")), line))
        elif m.group("ident") is not None:
            tokens.append(Token("ident", m.group("ident"), line))
        else:
            tokens.append(Token("punct", m.group("punct"), line))
    return tokens


RUST_MACROS: dict[str, Level] = {"warn!": "warning", "info!": "info", "debug!": "debug"}


def rust_calls(source: str, path: str) -> Iterator[Call]:
    """``tracing::warn!`` / ``warn!`` / ``info!`` calls: the first argument that is a lone
    string literal is the format string (fields such as ``target: "x"`` or ``name = %v`` come
    before it); ``{}``/``{name}``/``{:?}`` are wildcards."""
    tokens = rust_tokens(source)
    for n, tok in enumerate(tokens):
        level = RUST_MACROS.get(tok.text) if tok.kind == "ident" else None
        if level is None:
            continue
        found = _arguments(tokens, n + 1)
        if found is None:
            continue
        args, _end = found
        fmt = next(
            (a[0].text for a in args if len(a) == 1 and a[0].kind == "str"),
            None,
        )
        # `target: "x"` is a field, not the message: it is the literal after a ':'.
        for arg in args:
            if len(arg) == 3 and arg[1].text == ":" and arg[2].kind == "str" and fmt == arg[2].text:
                fmt = None
        yield Call(path, tok.line, level, merge(split_braces(fmt) if fmt is not None else [None]))


# --------------------------------------------------------------------------- rules


def regex_text(text: str) -> str:
    """Escape a constant for Python ``re`` and RE2 alike: only the metacharacters (RE2
    refuses an escaped space, which ``re.escape`` writes)."""
    out = re.sub(r"([.^$*+?()\[\]{}|\\])", r"\\\1", text)
    return out.replace("\t", r"\t")


def unregex(pattern: str) -> list[Part]:
    """A rule's regex back as parts (the inverse of :func:`rule_regex`)."""
    parts: list[Part] = []
    for k, chunk in enumerate(pattern.split(WILDCARD)):
        if k:
            parts.append(None)
        parts.append(re.sub(r"\\(.)", lambda m: "\t" if m.group(1) == "t" else m.group(1), chunk))
    return list(merge(parts))


def render(parts: list[Part] | tuple[Part, ...], filler: str = FILLER) -> str:
    return "".join(filler if p is None else p for p in parts)


def rule_regex(parts: tuple[Part, ...]) -> str:
    inner = list(parts)
    while inner and inner[0] is None:
        inner.pop(0)
    while inner and inner[-1] is None:
        inner.pop()
    # The edges' blanks too: a scanner reads a line without its trailing blanks.
    if inner and inner[0] is not None:
        inner[0] = inner[0].lstrip()
    if inner and inner[-1] is not None:
        inner[-1] = inner[-1].rstrip()
    return "".join(WILDCARD if p is None else regex_text(p) for p in inner)


def one_line(parts: tuple[Part, ...]) -> tuple[Part, ...]:
    """The line of a multi-line message with the longest constant run (a log line holds one
    line of it); surrounding blanks trimmed."""
    lines: list[list[Part]] = [[]]
    for part in parts:
        if part is None:
            lines[-1].append(None)
            continue
        pieces = part.split("\n")
        for k, piece in enumerate(pieces):
            if k:
                lines.append([])
            lines[-1].append(piece)
    best = max(lines, key=lambda ps: max((len(p.strip()) for p in ps if p), default=0))
    out = list(merge(best))
    if out and out[0] is not None:
        out[0] = out[0].lstrip()
    if out and out[-1] is not None:
        out[-1] = out[-1].rstrip()
    return merge(out)


# Words that say nothing about which message it is: a literal made only of these (and
# fewer than DISTINCT_CHARS other letters) would match other programs' lines too.
GENERIC_WORDS = frozenset((
    "a", "an", "the", "is", "are", "was", "were", "be", "been", "being", "to", "of", "for",
    "on", "in", "at", "with", "by", "from", "and", "or", "not", "no", "this", "that", "it",
    "its", "as", "so", "because", "due", "since", "when", "while", "using", "use", "used",
    "will", "may", "might", "can", "could", "set", "back", "fall", "falls", "falling",
    "fallback", "disable", "disabled", "disables", "disabling", "enabled", "supported",
    "unsupported", "instead", "slow", "slower", "degraded", "degrade", "type", "pair", "value",
))  # fmt: skip
DISTINCT_CHARS = 8


def distinctive(literal: str) -> bool:
    """At least :data:`DISTINCT_CHARS` letters or digits outside :data:`GENERIC_WORDS`."""
    words = re.findall(r"[A-Za-z0-9_]+", literal)
    return sum(len(w) for w in words if w.lower() not in GENERIC_WORDS) >= DISTINCT_CHARS


def literal_of(parts: tuple[Part, ...]) -> str | None:
    runs = [p.strip() for p in parts if p is not None]
    best = max(runs, key=len, default="")
    return best if len(best) >= MIN_LITERAL else None


def slug(text: str, regex: str) -> str:
    words = re.findall(r"[a-z0-9]+", text.lower())
    base = "_".join(words[:7])[:48].strip("_") or "message"
    return f"{base}_{hashlib.sha256(regex.encode()).hexdigest()[:4]}"


def kind_of(text: str) -> str:
    return next(kind for pattern, kind in _KINDS if pattern.search(text))


def check_of(text: str) -> str:
    return next((check for pattern, check in _CHECKS if pattern.search(text)), DEFAULT_CHECK)


@dataclass
class Rule:
    runtime: Runtime
    call: Call
    parts: tuple[Part, ...]  # the line the rule matches
    literal: str
    regex: str
    id: str = ""
    # Later runtimes that print the same text (one rule: a line is one finding).
    also: list[tuple[Runtime, Call]] = field(default_factory=list)

    def _where(self) -> list[tuple[Runtime, Call]]:
        return [(self.runtime, self.call), *self.also]

    @property
    def names(self) -> str:
        return " or ".join(dict.fromkeys(r.name for r, _ in self._where()))

    @property
    def component(self) -> str:
        return " ; ".join(f"{r.name} {r.repo_prefix}{c.path}" for r, c in self._where())

    @property
    def source(self) -> str:
        return " ; ".join(
            f"https://github.com/{r.repo}/blob/{r.ref}/{r.repo_prefix}{c.path}#L{c.line}"
            for r, c in self._where()
        )

    def message(self) -> str:
        return render(self.call.parts, "…").replace("\n", " ").strip()


@dataclass
class Tally:
    found: int = 0  # warning-level calls
    info: int = 0  # info-level calls (counted, never rules)
    matched: int = 0  # warning-level calls whose text the word rule matches
    info_matched: int = 0
    rules: int = 0
    dropped: Counter[str] = field(default_factory=Counter)


def _files(
    root: Path, folders: tuple[str, ...], suffixes: tuple[str, ...], exclude: tuple[str, ...]
) -> Iterator[Path]:
    for folder in folders:
        base = root / folder
        if not base.is_dir():
            continue
        for path in sorted(base.rglob("*")):
            rel = path.relative_to(root).parts
            if any(path.is_relative_to(root / ex) for ex in exclude):
                continue
            if path.suffix in suffixes and path.is_file() and not _SKIP_DIRS & set(rel[:-1]):
                yield path


def runtime_calls(runtime: Runtime, root: Path) -> Iterator[Call]:
    readers = (
        (runtime.python, (".py",), python_calls),
        (
            runtime.native,
            (".c", ".cc", ".cpp", ".cxx", ".h", ".hpp", ".cu", ".cuh", ".inl"),
            c_calls,
        ),
        (runtime.rust, (".rs",), rust_calls),
    )
    for folders, suffixes, reader in readers:
        for path in _files(root, folders, suffixes, runtime.exclude):
            text = path.read_text("utf-8", errors="replace")
            yield from reader(text, path.relative_to(root).as_posix())


class Curated:
    """checks/log_signatures.toml, to drop what it already knows (literal, regex, unless)."""

    def __init__(self, path: Path) -> None:
        self.entries: list[
            tuple[str, list[str], re.Pattern[str] | None, re.Pattern[str] | None]
        ] = []
        for sig in tomllib.loads(path.read_text("utf-8"))["signature"]:
            rx = re.compile(sig["regex"]) if sig.get("regex") else None
            unless = re.compile(sig["unless"]) if sig.get("unless") else None
            self.entries.append((sig["id"], sig["literals"], rx, unless))

    def known_lines(self, folder: Path) -> list[str]:
        """The lines of the real excerpts in ``folder`` (tests/fixtures/logs) that a curated
        signature matches: a generated rule that matches one of them is left to the curated
        file (its message has a value where the curated literal has text, so the check on
        the rendered line alone does not see it)."""
        lines = []
        for path in sorted(folder.glob("*.log")):
            for line in path.read_text("utf-8", errors="replace").splitlines():
                if self.covering(line) is not None:
                    lines.append(line)
        return lines

    def covering(self, line: str) -> str | None:
        for sig_id, literals, rx, unless in self.entries:
            if not any(lit in line for lit in literals):
                continue
            if rx is not None and not rx.search(line):
                continue
            if unless is not None and unless.search(line):
                continue
            return sig_id
        return None


def _matches(rule: Rule, line: str) -> bool:
    return rule.literal in line and re.search(rule.regex, line) is not None


def build(
    roots: dict[str, Path], curated: Curated, known: list[str] | None = None
) -> tuple[list[Rule], dict[str, Tally]]:
    tallies: dict[str, Tally] = {}
    kept: list[Rule] = []
    by_regex: dict[str, Rule] = {}
    for runtime in RUNTIMES:
        if runtime.key not in roots:
            continue
        tally = tallies[runtime.key] = Tally()
        for call in runtime_calls(runtime, roots[runtime.key]):
            text = render(call.parts, " ")
            says = says_it_falls_back(text)
            if call.level == "info":
                tally.info += 1
                tally.info_matched += says
                continue
            if call.level != "warning":
                continue
            tally.found += 1
            if not says:
                continue
            tally.matched += 1
            parts = one_line(call.parts)
            literal = literal_of(parts)
            if literal is None:
                tally.dropped["no constant run of >= 12 characters"] += 1
                continue
            if not distinctive(literal):
                tally.dropped[
                    f"too generic: its literal has < {DISTINCT_CHARS} letters outside common words"
                ] += 1
                continue
            if not says_it_falls_back(render(parts, " ")):
                tally.dropped["the fallback words are on another line of a multi-line message"] += 1
                continue
            regex = rule_regex(parts)
            if regex in by_regex:
                first = by_regex[regex]
                if first.runtime is runtime:
                    tally.dropped["duplicate text (another call of this runtime)"] += 1
                else:
                    first.also.append((runtime, call))
                    tally.dropped[f"same text as {first.runtime.name}'s: one rule names both"] += 1
                continue
            rule = Rule(runtime, call, parts, literal, regex)
            if curated.covering(render(parts)) is not None or any(
                _matches(rule, line) for line in known or ()
            ):
                tally.dropped["already a curated signature in log_signatures.toml"] += 1
                continue
            by_regex[regex] = rule
            kept.append(rule)
    # A rule whose own line another rule's literal and regex also match is shadowed by that
    # more general one (one finding per line): dropped, its line is still reported.
    shadowed: set[int] = set()
    for n, rule in enumerate(kept):
        line = render(rule.parts)
        if any(m != n and m not in shadowed and _matches(o, line) for m, o in enumerate(kept)):
            shadowed.add(n)
            tallies[rule.runtime.key].dropped[
                "its line is also matched by a more general rule"
            ] += 1
    rules = [r for n, r in enumerate(kept) if n not in shadowed]
    seen: set[str] = set()
    for rule in rules:
        rule.id = f"fallback.{rule.runtime.key}.{slug(rule.literal, rule.regex)}"
        assert rule.id not in seen, rule.id
        seen.add(rule.id)
        tallies[rule.runtime.key].rules += 1
    return rules, tallies


# --------------------------------------------------------------------------- output


def toml_str(text: str) -> str:
    """A TOML basic string (JSON's escapes are TOML's for these characters)."""
    out = text.replace("\\", "\\\\").replace('"', '\\"').replace("\t", "\\t").replace("\n", "\\n")
    out = re.sub(r"[\x00-\x08\x0b-\x1f\x7f]", lambda m: f"\\u{ord(m.group()):04x}", out)
    return f'"{out}"'


def toml_regex(pattern: str) -> str:
    """A literal string where it can be one (no escapes to double), else a basic string."""
    if "'" not in pattern and "\n" not in pattern and not re.search(r"[\x00-\x1f\x7f]", pattern):
        return f"'{pattern}'"
    return toml_str(pattern)


COMMAND = (
    "PYTHONPATH=src python tools/logvocab/fallbacks.py "
    + " ".join(f"--src {r.key}=DIR" for r in RUNTIMES)
    + " -o checks/log_fallbacks.toml"
)


def header(tallies: dict[str, Tally]) -> str:
    lines = [
        "# Fallback vocabulary (issue 33, item 4): the runtimes' own warnings that say they fall",
        "# back, lack support, disable something or will be slower, mined from their sources.",
        "#",
        "# GENERATED by tools/logvocab/fallbacks.py: do not edit. Regenerate with",
        f"#   {COMMAND}",
        "# where each DIR is the runtime's tree, obtained as below. Same [[signature]] schema as",
        "# checks/log_signatures.toml (read by the same loader, ruledata/logs.py); a message that",
        "# file already knows (its rendered line, or a line of tests/fixtures/logs it matches) is",
        "# left to it.",
        "#",
        "# Pinned sources:",
    ]
    for r in RUNTIMES:
        if r.key in tallies:
            lines += [
                f"#   {r.name}: github.com/{r.repo} {r.version}, commit {r.commit}",
                f"#     {r.obtained}",
            ]
    lines += [
        "#",
        "# What is read: Python logging calls (<...log...>.warning, warning_once, warn, info,",
        "# info_once; warnings.warn) with str, f-string, %-format (with arguments), str.format",
        "# and + joins, every substituted value a wildcard; Rust tracing warn!/info!; C, C++ and",
        "# CUDA fprintf(stderr, ...) (a warning when its text says warning) and:",
        *textwrap.wrap(
            ", ".join(sorted(k for k in C_MACROS if k != "fprintf")),
            width=92,
            initial_indent="#   ",
            subsequent_indent="#   ",
        ),
        "# Adjacent literals are joined; printf conversions, PRI* macros and {} placeholders are",
        "# wildcards (regex .*?). Only warning-level calls become rules.",
        "#",
        '# The word rule (case-insensitive; "Using X backend" alone is deliberately not in it):',
        f"#   matches  {FALLBACK_WORDS.pattern}",
        f"#   and not  {ADVICE_WORDS.pattern}",
        "#   (the second: deprecations and 'use X instead' advice to the reader, no path taken)",
        f"#   both on the text without its command-line flags ({FLAGS.pattern}).",
        "#",
        f"# A rule's literal is its message's longest constant run (>= {MIN_LITERAL} characters,",
        f"# >= {DISTINCT_CHARS} of them letters or digits outside common words); its regex is the",
        "# one line of the message holding that run; its id is fallback.<runtime>.<first words",
        "# of the literal>_<4 hex digits of the regex's SHA-256>, stable while the text is.",
        "#",
        "# Counts (warning-level calls found / matching the word rule / became rules; info-level",
        "# calls, never rules: found / matching):",
    ]
    total = Tally()
    for key, t in tallies.items():
        lines.append(
            f"#   {BY_KEY[key].name}: {t.found} / {t.matched} / {t.rules};"
            f" info {t.info} / {t.info_matched}"
        )
        for reason, count in sorted(t.dropped.items()):
            lines.append(f"#     dropped {count}: {reason}")
        total.found += t.found
        total.matched += t.matched
        total.rules += t.rules
    lines.append(f"#   all: {total.found} / {total.matched} / {total.rules}")
    lines += ["#", *(f"# {line}" for line in PIN_NOTES)]
    return "\n".join(lines) + "\n"


def entry(rule: Rule) -> str:
    kind = kind_of(render(rule.call.parts, " "))
    meaning = f'{rule.names} logged that {kind}: "{rule.message()}"'
    return "\n".join(
        [
            "[[signature]]",
            f"id = {toml_str(rule.id)}",
            f"literals = [{toml_str(rule.literal)}]",
            f"regex = {toml_regex(rule.regex)}",
            f"component = {toml_str(rule.component)}",
            'severity = "warn"',
            f"check = {toml_str(check_of(render(rule.call.parts, ' ')))}",
            f"meaning = {toml_str(meaning)}",
            "remedy = []",
            f"source = {toml_str(rule.source)}",
        ]
    )


def generate(roots: dict[str, Path], curated_path: Path, known: Path | None = None) -> str:
    curated = Curated(curated_path)
    rules, tallies = build(roots, curated, curated.known_lines(known) if known else None)
    return header(tallies) + "".join("\n" + entry(r) + "\n" for r in rules)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--src", action="append", default=[], metavar="RUNTIME=DIR")
    parser.add_argument("--curated", type=Path, default=Path("checks/log_signatures.toml"))
    parser.add_argument("--known", type=Path, default=Path("tests/fixtures/logs"))
    parser.add_argument("-o", "--output", type=Path, default=Path("checks/log_fallbacks.toml"))
    args = parser.parse_args(argv)
    roots: dict[str, Path] = {}
    for item in args.src:
        key, _, folder = item.partition("=")
        if key not in BY_KEY or not Path(folder).is_dir():
            parser.error(f"--src {item}: want one of {', '.join(BY_KEY)}=<existing folder>")
        roots[key] = Path(folder)
    args.output.write_text(generate(roots, args.curated, args.known), "utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
