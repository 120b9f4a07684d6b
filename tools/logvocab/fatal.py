"""Write checks/log_vocabulary.toml: the fatal vocabulary of the GPU stack (issue 33, item 1).

Every term is generated from the enumeration that produces the text, read from a pinned
source (a wheel of a recorded version, a git tag or commit, or a dump of a recorded driver),
and the data file records each source as `where@version:path`. Dev-time only: the CLI never
imports this module (it reads the TOML it writes).

    sh tools/logvocab/regenerate.sh     # downloads/clones the pins, then runs this module
    python tools/logvocab/fatal.py --help

A wheel argument may also be an unpacked site directory holding the wheel's .dist-info
(ci/gpu-wheels.sh keeps one). cudaGetErrorString and the enum members come from the
installed cuda-bindings (a runtime dependency: its runtime module carries a static cudart,
so it answers without a GPU or driver); its version is recorded. The exact command that
wrote the committed file is in that file's first lines.
"""

from __future__ import annotations

import argparse
import csv
import json
import re
import subprocess
import sys
import zipfile
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Literal

import msgspec

SCRIPT = "tools/logvocab/fatal.py"

# --------------------------------------------------------------------------- the data format


class Source(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    id: str  # the family id the terms name; a family may have several sources
    pinned: str  # "<repo-or-wheel>@<version-or-commit>:<path>"


class Term(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    text: str
    family: str
    kind: Literal["name", "message"]
    fatal: bool
    meaning: str


class Xid(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    number: int
    name: str
    fatal: bool
    source: str
    # NVIDIA's "Resolution Bucket (Immediate Action)" as the source gives it (RESTART_APP,
    # RESET_GPU, RESTART_BM, ...): checks/health.toml [xid_actions] says what each asks.
    action: str = ""


class Vocabulary(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source: list[Source]
    term: list[Term]
    xid: list[Xid]


# --------------------------------------------------------------------------- the rules

# Statuses that mean "no error", "not yet" or "already so": a healthy program logs them
# (a query that polls, an idempotent enable). Matched anywhere they would fire on healthy
# logs, so they are never terms. The reasons are written into the data file.
BENIGN: dict[str, str] = {
    "cudaSuccess": "success",
    "CUDA_SUCCESS": "success",
    "cudaErrorNotReady": "query pending (cudaStreamQuery/cudaEventQuery), not an error",
    "CUDA_ERROR_NOT_READY": "query pending (cuStreamQuery/cuEventQuery), not an error",
    "cudaErrorPeerAccessAlreadyEnabled": "peer access already on: the wanted state",
    "CUDA_ERROR_PEER_ACCESS_ALREADY_ENABLED": "peer access already on: the wanted state",
    "cudaErrorHostMemoryAlreadyRegistered": "memory already registered: the wanted state",
    "CUDA_ERROR_HOST_MEMORY_ALREADY_REGISTERED": "memory already registered: the wanted state",
    "CUDA_ERROR_CONTEXT_ALREADY_CURRENT": (
        "deprecated: no longer an error to make a current context current"
    ),
    "cudaErrorProfilerAlreadyStarted": "deprecated: no longer an error (header doc)",
    "cudaErrorProfilerAlreadyStopped": "deprecated: no longer an error (header doc)",
    "CUDA_ERROR_PROFILER_ALREADY_STARTED": "deprecated: no longer an error (header doc)",
    "CUDA_ERROR_PROFILER_ALREADY_STOPPED": "deprecated: no longer an error (header doc)",
    "cudaErrorApiFailureBase": "a numbering base, not a status any call returns",
    "ncclSuccess": "success",
    "ncclInProgress": "non-blocking communicator still initialising: poll again",
    "ncclNumResults": "the enum's count, not a status",
    "NVRTC_SUCCESS": "success",
    "CUDNN_STATUS_RUNTIME_IN_PROGRESS": "cudnnQueryRuntimeError: the kernels have not finished yet",
}


def is_benign(name: str) -> bool:
    """A status that is no error: listed above, or any `*_SUCCESS` / `*_STATUS_SUCCESS`."""
    return name in BENIGN or name.endswith("_SUCCESS")


def benign_reason(name: str) -> str:
    return BENIGN.get(name, "success")


# CUDA documents a sticky error in the status's own comment (driver_types.h, cuda.h):
# "This leaves the process in an inconsistent state and any further CUDA work will return
# the same error. To continue using CUDA, the process must be terminated and relaunched."
_STICKY = "terminated and relaunched"
# Hardware faults the header documents without that sentence: the GPU's memory or link lost
# data, so the context's results cannot be trusted (the driver reports them as Xid 48/74).
CUDA_HARDWARE_FATAL = frozenset(
    {
        "cudaErrorECCUncorrectable",
        "CUDA_ERROR_ECC_UNCORRECTABLE",
        "cudaErrorNvlinkUncorrectable",
        "CUDA_ERROR_NVLINK_UNCORRECTABLE",
    }
)


def cuda_is_fatal(name: str, doc: str) -> bool:
    return name in CUDA_HARDWARE_FATAL or _STICKY in " ".join(doc.split())


# NCCL: after these the communicator is broken (a peer died, the network or the system
# failed, NCCL's own state is inconsistent, or a CUDA call under it failed: NCCL aborts);
# invalid argument/usage and timeout are returned to a caller that can go on.
NCCL_FATAL = frozenset(
    {"ncclUnhandledCudaError", "ncclSystemError", "ncclInternalError", "ncclRemoteError"}
)

_TECHNICAL = re.compile(r"[_()=/:.]\w|\b[A-Z]{2,}\b|\d|__")


def is_distinctive(text: str) -> bool:
    """May an error string be matched bare, anywhere in a line?

    Yes when it has at least 5 words, or at least 4 and a technical token (an identifier
    with `_`, a call `f()`, an acronym such as PTX/MPS/NCCL, a digit). Shorter strings are
    phrases prose uses ("invalid argument", "out of memory", "unknown error", "operation
    not supported"): they are emitted only inside a library's print form.
    """
    words = text.split()
    if len(words) >= 5:
        return True
    return len(words) >= 4 and _TECHNICAL.search(text) is not None


# Print forms (prefix + the library's error string), each where the prefix is written:
PRINT_FORMS: dict[str, tuple[str, str]] = {
    # c10_cuda_check_implementation: "CUDA error: " + cudaGetErrorString(err); ggml_cuda_error:
    # GGML_CUDA_NAME " error: %s" with GGML_CUDA_NAME "CUDA" and the runtime's string.
    "cuda_runtime": (
        "CUDA error: ",
        "pytorch/pytorch@d545da44552b660793a620aae8af2f1a45ad12bb:c10/cuda/CUDAException.cpp ; "
        "ggml-org/llama.cpp@f6d77a1ba0ac794e950bd3abb630b904bdcd8fb8:ggml/src/ggml-cuda/ggml-cuda.cu",
    ),
    # gpuAssert: prefix "Triton Error [CUDA]: " strcat'd with cuGetErrorString's text, raised
    # by PyErr_SetString(PyExc_RuntimeError, err) (the pinned driver.c, and the 3.3.1 wheel's)
    "cuda_driver": (
        "Triton Error [CUDA]: ",
        "triton-lang/triton@7649d87cce6c12361bb9da234b9b227b2880b499:third_party/nvidia/backend/driver.c",
    ),
}

# cudnn-frontend: "[cudnn_frontend] Error: ..." literals. Per-candidate filtering while a
# plan is chosen ("Deselecting execution plan ...", "Skipping plan since ...") is logged by
# a graph that still finds a plan, so only the rest are terms.
_CUDNN_FE_MESSAGE = re.compile(r'"(\[cudnn_frontend\] Error: [^"]*)"')
CUDNN_FE_SKIP = ("Deselecting ", "Skipping ")
CUDNN_FE_FILES = ("include/cudnn_frontend/plans.h",)

# --------------------------------------------------------------------------- parsing


@dataclass(frozen=True)
class EnumEntry:
    name: str
    value: str
    doc: str


_COMMENT_OR_ENTRY = re.compile(
    r"/\*(?P<block>.*?)\*/|//(?P<line>[^\n]*)|(?P<name>[A-Za-z_]\w*)(?P<rest>[^,/]*)",
    re.S,
)


def _clean_doc(text: str) -> str:
    text = re.sub(r"^[/*!<]+", "", text.strip())
    lines = [re.sub(r"^\s*\*+\s?", "", ln).strip() for ln in text.splitlines()]
    out = " ".join(ln for ln in lines if ln).strip().lstrip("<").strip()
    return re.sub(r"\s*@since\s.*$", "", out).strip()


def parse_c_enum(source: str, type_name: str) -> list[EnumEntry]:
    """The members of a C enum, in order, each with its doc comment.

    Finds `typedef enum [tag] { ... } type_name;` or `enum [attrs] type_name { ... };`.
    A comment before a member (`/** ... */`) documents the next member; a comment on the
    member's own line or a trailing Doxygen one (`/**< */`, `///<`) documents that member.
    Preprocessor lines inside the body are ignored.
    """
    body = _enum_body(source, type_name)
    body = "\n".join(ln for ln in body.splitlines() if not ln.lstrip().startswith("#"))
    entries: list[list[str]] = []  # [name, value, doc]
    pending = ""
    last_end = -1
    for m in _COMMENT_OR_ENTRY.finditer(body):
        comment = m.group("block") if m.group("block") is not None else m.group("line")
        if comment is not None:
            trailing = comment.startswith(("<", "*<", "/<", "!<"))
            same_line = last_end >= 0 and "\n" not in body[last_end : m.start()]
            if entries and (trailing or same_line):
                entries[-1][2] = _clean_doc(comment)  # the member's own comment wins
            elif not trailing:
                pending = _clean_doc(comment)
            continue
        rest = m.group("rest")
        value = rest.split("=", 1)[1].strip() if "=" in rest else ""
        entries.append([m.group("name"), value, pending])
        pending = ""
        last_end = m.end()
    return [EnumEntry(n, v, d) for n, v, d in entries]


def _enum_body(source: str, type_name: str) -> str:
    typedef = re.search(
        r"typedef\s+enum\s*\w*\s*\{(.*?)\}\s*" + re.escape(type_name) + r"\s*;", source, re.S
    )
    if typedef:
        return typedef.group(1)
    tagged = re.search(
        r"enum\s+(?:\w+\s+)*" + re.escape(type_name) + r"\s*\{(.*?)\}\s*;", source, re.S
    )
    if tagged:
        return tagged.group(1)
    raise ValueError(f"enum {type_name} not found")


_NCCL_CASE = re.compile(r'case\s+(\w+)\s*:\s*return\s+"([^"]*)"\s*;')


def parse_nccl_error_strings(init_cc: str) -> dict[str, str]:
    """ncclGetErrorString's switch (src/init.cc): {ncclResult_t name: string}."""
    start = init_cc.index("ncclGetErrorString(ncclResult_t")
    end = init_cc.index("\n}", start)
    return dict(_NCCL_CASE.findall(init_cc[start:end]))


def parse_cudnn_frontend_messages(text: str) -> list[str]:
    found = []
    for m in _CUDNN_FE_MESSAGE.finditer(text):
        msg = m.group(1)
        tail = msg.removeprefix("[cudnn_frontend] Error: ")
        if not tail.startswith(CUDNN_FE_SKIP) and msg not in found:
            found.append(msg)
    return found


_TRITON_STR = re.compile(r'return f"(out of resource: )\{self\.name\}(, Required: )')
_TRITON_RAISE = re.compile(r'OutOfResources\([^()]*?,[^()]*?,\s*"([^"]+)"\)')


def parse_triton_out_of_resources(errors_py: str, compiler_py: str) -> list[str]:
    """The fixed part of Triton's OutOfResources message, once per resource it is raised for:
    errors.py formats f"out of resource: {self.name}, Required: {self.required}, ..." and
    compiler.py raises it with the names ("shared memory", "tensor memory")."""
    fmt = _TRITON_STR.search(errors_py)
    if fmt is None:
        raise ValueError("OutOfResources.__str__ not found")
    names = list(dict.fromkeys(_TRITON_RAISE.findall(compiler_py)))
    return [f"{fmt.group(1)}{n}{fmt.group(2)}" for n in names]


_WHEEL_VERSION = re.compile(r"^([A-Za-z0-9_.]+?)-(\d[^-]*)-")


class Package:
    """A wheel file or an unpacked site directory: its name@version and its files."""

    def __init__(self, path: Path) -> None:
        self.path = path
        if path.is_file():
            m = _WHEEL_VERSION.match(path.name)
            if m is None:
                raise ValueError(f"not a wheel name: {path.name}")
            self.dist, self.version = m.group(1).replace("_", "-"), m.group(2)
            self._zip: zipfile.ZipFile | None = zipfile.ZipFile(path)
        else:
            self._zip = None
            infos = sorted(path.glob("*.dist-info"))
            if not infos:
                raise ValueError(f"{path}: no .dist-info")
            self.dist, self.version = "", ""
            self._infos = infos

    def select(self, dist: str) -> Package:
        """For a site directory: the distribution whose files are read."""
        if self._zip is None:
            for info in self._infos:
                name, _, version = info.name.removesuffix(".dist-info").partition("-")
                if name.replace("_", "-").lower() == dist.lower():
                    self.dist, self.version = name.replace("_", "-"), version
                    return self
            raise ValueError(f"{self.path}: no {dist}")
        return self

    def find(self, suffix: str) -> str:
        names = (
            self._zip.namelist()
            if self._zip
            else [str(p.relative_to(self.path)) for p in self.path.rglob("*") if p.is_file()]
        )
        hits = sorted(n for n in names if n.endswith(suffix))
        if not hits:
            raise FileNotFoundError(f"{self.path}: no file ending {suffix}")
        return hits[0]

    def read(self, member: str) -> str:
        if self._zip is not None:
            return self._zip.read(member).decode("utf-8", "replace")
        return (self.path / member).read_text(encoding="utf-8", errors="replace")

    def pinned(self, member: str) -> str:
        return f"{self.dist}@{self.version}:{member}"


def git_show(repo: Path, ref: str, path: str) -> tuple[str, str]:
    """(text, commit) of `path` at `ref` in a bare or normal git repository (git on PATH:
    a dev-time tool, like the rest of this module)."""
    commit = subprocess.run(
        ["git", "-C", str(repo), "rev-parse", f"{ref}^{{commit}}"],  # noqa: S607
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout.strip()
    text = subprocess.run(
        ["git", "-C", str(repo), "show", f"{commit}:{path}"],  # noqa: S607
        check=True,
        capture_output=True,
        text=True,
        timeout=60,
    ).stdout
    return text, commit


# --------------------------------------------------------------------------- building


@dataclass
class Builder:
    sources: list[Source] = field(default_factory=list)
    terms: list[Term] = field(default_factory=list)
    xids: list[Xid] = field(default_factory=list)
    excluded: list[tuple[str, str, str]] = field(default_factory=list)  # family, text, reason
    seen: set[str] = field(default_factory=set)
    notes: dict[int, str] = field(default_factory=dict)  # source index: what it gave

    def source(self, family: str, pinned: str, note: str = "") -> None:
        if note:
            self.notes[len(self.sources)] = note
        self.sources.append(Source(id=family, pinned=pinned))

    def add(
        self, text: str, family: str, kind: Literal["name", "message"], fatal: bool, meaning: str
    ) -> None:
        if is_benign(text):
            self.excluded.append((family, text, "benign: " + benign_reason(text)))
            return
        if text in self.seen:
            self.excluded.append((family, text, "same text already emitted by an earlier family"))
            return
        self.seen.add(text)
        self.terms.append(
            Term(text=text, family=family, kind=kind, fatal=fatal, meaning=one_line(meaning))
        )

    def enum_names(
        self,
        family: str,
        entries: Iterable[EnumEntry],
        type_name: str,
        fatal: Callable[[EnumEntry], bool],
    ) -> None:
        for e in entries:
            self.add(e.name, family, "name", fatal(e), e.doc or f"{type_name} {e.value}".strip())

    def messages(self, family: str, strings: Iterable[tuple[str, str, bool]]) -> None:
        """(enum name, error string, fatal): the print form, and the bare string if distinctive."""
        prefix = PRINT_FORMS[family][0] if family in PRINT_FORMS else None
        for name, text, fatal in strings:
            if is_benign(name):
                self.excluded.append((family, text, f"benign: {name}: " + benign_reason(name)))
                continue
            meaning = f"{name}: {text}"
            if prefix is not None:
                self.add(prefix + text, family, "message", fatal, meaning)
            if is_distinctive(text):
                self.add(text, family, "message", fatal, meaning)
            else:
                self.excluded.append((family, text, "bare string too generic (is_distinctive)"))


def one_line(text: str) -> str:
    text = " ".join(text.split())
    first = re.split(r"(?<=[a-z0-9)])\. ", text, maxsplit=1)[0]
    return first if len(first) <= 200 else first[:197] + "..."


def add_cuda(b: Builder) -> dict[str, str]:
    """cuda_runtime and nvrtc terms, cuda_driver names; returns the CUresult docs by name."""
    from cuda.bindings import driver, nvrtc, runtime  # noqa: TID251 - dev-time generator

    version = metadata.version("cuda-bindings")
    b.source(
        "cuda_runtime",
        f"cuda-bindings@{version}:cuda/bindings/runtime.pyx",
        "cudaError_t members and docs; cudaGetErrorString (static cudart, no GPU needed)",
    )
    _print_form_sources(b, "cuda_runtime")
    rt: list[EnumEntry] = []
    strings: list[tuple[str, str, bool]] = []
    for m in runtime.cudaError_t:
        doc = m.__doc__ or ""
        rt.append(EnumEntry(m.name, str(m.value), doc))
        _, text = runtime.cudaGetErrorString(m)
        strings.append((m.name, text.decode(), cuda_is_fatal(m.name, doc)))
    b.enum_names("cuda_runtime", rt, "cudaError_t", lambda e: cuda_is_fatal(e.name, e.doc))
    b.messages("cuda_runtime", strings)

    b.source(
        "cuda_driver",
        f"cuda-bindings@{version}:cuda/bindings/driver.pyx",
        "CUresult members and docs",
    )
    drv = [EnumEntry(m.name, str(m.value), m.__doc__ or "") for m in driver.CUresult]
    b.enum_names("cuda_driver", drv, "CUresult", lambda e: cuda_is_fatal(e.name, e.doc))

    b.source(
        "nvrtc",
        f"cuda-bindings@{version}:cuda/bindings/nvrtc.pyx",
        "nvrtcResult; nvrtcGetErrorString (it returns the name itself)",
    )
    for m in nvrtc.nvrtcResult:
        _, text = nvrtc.nvrtcGetErrorString(m)
        b.add(m.name, "nvrtc", "name", False, f"nvrtcResult {m.value}")
        if text.decode() != m.name:  # nvrtcGetErrorString returns the name itself
            b.messages("nvrtc", [(m.name, text.decode(), False)])
    return {e.name: e.doc for e in drv}


def _print_form_sources(b: Builder, family: str) -> None:
    prefix, where = PRINT_FORMS[family]
    for pinned in where.split(" ; "):
        b.source(family, pinned, f"print form {prefix!r} + the error string")


def add_driver_strings(b: Builder, dump_path: Path, docs: dict[str, str]) -> None:
    dump = json.loads(dump_path.read_text(encoding="utf-8"))
    b.source(
        "cuda_driver",
        f"{dump['library']}@{dump['driver_version']}:cuGetErrorString",
        "cuGetErrorString of that driver, dumped by tools/logvocab/driver_strings.py into "
        f"tools/logvocab/sources/{dump_path.name}",
    )
    _print_form_sources(b, "cuda_driver")
    items = sorted(dump["errors"].items(), key=lambda kv: kv[1]["value"])
    b.messages(
        "cuda_driver", [(n, v["string"], cuda_is_fatal(n, docs.get(n, ""))) for n, v in items]
    )


def add_header_enum(b: Builder, family: str, pkg: Package, header: str, type_name: str) -> None:
    member = pkg.find(header)
    b.source(family, pkg.pinned(member))
    b.enum_names(family, parse_c_enum(pkg.read(member), type_name), type_name, lambda e: False)


def add_nccl(b: Builder, wheel: Package, repo: Path | None, ref: str) -> None:
    member = wheel.find("include/nccl.h")
    b.source("nccl", wheel.pinned(member))
    entries = parse_c_enum(wheel.read(member), "ncclResult_t")
    if repo is not None:
        # Statuses newer than the wheel (ncclTimeout): the repository's header at the same ref.
        header, commit = git_show(repo, ref, "src/nccl.h.in")
        b.source(
            "nccl", f"NVIDIA/nccl@{ref}={commit}:src/nccl.h.in", "statuses newer than the wheel"
        )
        known = {e.name for e in entries}
        entries += [e for e in parse_c_enum(header, "ncclResult_t") if e.name not in known]
    b.enum_names("nccl", entries, "ncclResult_t", lambda e: e.name in NCCL_FATAL)
    if repo is None:
        return
    text, commit = git_show(repo, ref, "src/init.cc")
    b.source("nccl", f"NVIDIA/nccl@{ref}={commit}:src/init.cc", "ncclGetErrorString")
    strings = parse_nccl_error_strings(text)
    b.messages(
        "nccl",
        [(e.name, strings[e.name], e.name in NCCL_FATAL) for e in entries if e.name in strings],
    )


def add_cudnn_frontend(b: Builder, repo: Path, refs: Sequence[str]) -> None:
    for ref in refs:
        for path in CUDNN_FE_FILES:
            text, commit = git_show(repo, ref, path)
            b.source("cudnn_frontend", f"NVIDIA/cudnn-frontend@{ref}={commit}:{path}")
            for msg in parse_cudnn_frontend_messages(text):
                if msg not in b.seen:
                    b.add(
                        msg,
                        "cudnn_frontend",
                        "message",
                        False,
                        "cuDNN frontend: " + msg.split("Error: ", 1)[1],
                    )


def add_triton(b: Builder, pkg: Package) -> None:
    errors, compiler = "triton/runtime/errors.py", "triton/compiler/compiler.py"
    b.source("triton", pkg.pinned(errors))
    b.source("triton", pkg.pinned(compiler))
    for text in parse_triton_out_of_resources(pkg.read(errors), pkg.read(compiler)):
        b.add(
            text,
            "triton",
            "message",
            False,
            "Triton OutOfResources: the kernel config needs more of this resource than the GPU has "
            "(the autotuner skips such a config; outside it the launch fails)",
        )


# NVIDIA's resolution buckets that end the application or the GPU's service.
XID_APP_FATAL_ACTIONS = frozenset({"RESTART_APP"})


def parse_xid_csv(text: str) -> list[tuple[int, str, str, bool]]:
    """NVSentinel's xiderrorsmapping.csv: number,mnemonic,immediate action,FATAL|NONFATAL."""
    rows = []
    for row in csv.reader(text.splitlines()):
        if len(row) < 4 or not row[0].strip().isdigit():
            continue
        rows.append((int(row[0]), row[1].strip(), row[2].strip(), row[3].strip() == "FATAL"))
    return rows


def xid_is_fatal(action: str, source_fatal: bool) -> bool:
    """Fatal to the GPU (the source's FATAL: reset, reboot or report) or to the application
    (NVIDIA's immediate action RESTART_APP: the process that hit it cannot go on)."""
    return source_fatal or action in XID_APP_FATAL_ACTIONS


def add_xids(b: Builder, csv_path: Path, pinned: str) -> None:
    b.source("xid", pinned)
    for number, name, action, fatal in parse_xid_csv(csv_path.read_text(encoding="utf-8")):
        if not name:
            b.excluded.append(("xid", str(number), "no mnemonic in the source"))
            continue
        b.xids.append(
            Xid(
                number=number,
                name=name,
                fatal=xid_is_fatal(action, fatal),
                source=pinned,
                action=" ".join(action.split()),
            )
        )


# --------------------------------------------------------------------------- writing


def _s(text: str) -> str:
    return json.dumps(text, ensure_ascii=False)


def render(b: Builder, command: str) -> str:
    out = [
        f"# generated by {SCRIPT} — do not edit; regenerate with:",
        *(f"#   {line.strip()}" for line in command.split(" ;; ")),
        "#",
        "# The fatal vocabulary of the GPU stack: enum names and error strings, each from the",
        "# enumeration that produces it (issue 33). Every `text` is an exact, case-sensitive",
        "# literal safe to match anywhere in a line. kind = name: an enum member's name;",
        "# kind = message: an error string in a form a library prints. fatal = true: the",
        "# process/context cannot go on. A family may have several [[source]] entries.",
        "#",
        "# Rules (tools/logvocab/fatal.py):",
        "#   benign statuses (success, query pending, already in the wanted state): never terms;",
        "#   fatal: CUDA statuses whose header comment says the process must be terminated and",
        "#     relaunched, plus ECC/NVLink uncorrectable; NCCL unhandled-cuda, system, internal,",
        "#     remote;",
        "#     Xid: NVSentinel's FATAL, or NVIDIA's immediate action RESTART_APP;",
        "#   a bare error string only when is_distinctive (>= 5 words, or >= 4 with a technical",
        "#     token); otherwise only inside a print form (prefix and its source in [[source]]).",
        "#",
        "# Left out:",
    ]
    for family, text, reason in b.excluded:
        out.append(f"#   {family}: {text!r}: {reason}")
    out.append("")
    for i, s in enumerate(b.sources):
        if i in b.notes:
            out.append(f"# {b.notes[i]}")
        out += ["[[source]]", f"id = {_s(s.id)}", f"pinned = {_s(s.pinned)}", ""]
    for t in b.terms:
        out += [
            "[[term]]",
            f"text = {_s(t.text)}",
            f"family = {_s(t.family)}",
            f"kind = {_s(t.kind)}",
            f"fatal = {str(t.fatal).lower()}",
            f"meaning = {_s(t.meaning)}",
            "",
        ]
    out += render_xids(b.xids)
    return "\n".join(out)


def render_xids(xids: Iterable[Xid]) -> list[str]:
    """The [[xid]] entries, the last part of the file (``--xid-only`` rewrites them alone)."""
    out: list[str] = []
    for x in xids:
        out += [
            "[[xid]]",
            f"number = {x.number}",
            f"name = {_s(x.name)}",
            f"fatal = {str(x.fatal).lower()}",
            f"source = {_s(x.source)}",
            f"action = {_s(x.action)}",
            "",
        ]
    return out


def rewrite_xids(path: Path, csv_path: Path, pinned: str) -> int:
    """``path``'s [[xid]] entries (the file's last part) generated again from the CSV, the
    rest of the file left as it is: what the full run writes there, without the other pins'
    downloads. Returns how many entries were written."""
    b = Builder()
    add_xids(b, csv_path, pinned)
    text = path.read_text(encoding="utf-8")
    start = text.index("[[xid]]\n")
    path.write_text(text[:start] + "\n".join(render_xids(b.xids)), encoding="utf-8")
    load(path)
    return len(b.xids)


def load(path: Path) -> Vocabulary:
    import tomllib

    return msgspec.convert(tomllib.loads(path.read_text(encoding="utf-8")), Vocabulary)


def counts(b: Builder) -> dict[str, dict[str, int]]:
    table: dict[str, dict[str, int]] = {}
    for t in b.terms:
        row = table.setdefault(t.family, {"name": 0, "message": 0, "fatal": 0, "left_out": 0})
        row[t.kind] += 1
        row["fatal"] += t.fatal
    for family, _, _ in b.excluded:
        table.setdefault(family, {"name": 0, "message": 0, "fatal": 0, "left_out": 0})[
            "left_out"
        ] += 1
    return table


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    p.add_argument("--libcuda-json", type=Path)
    p.add_argument("--nccl-wheel", type=Path)
    p.add_argument("--nccl-repo", type=Path)
    p.add_argument("--nccl-ref", default="v2.30.7-1")
    for lib in ("cublas", "cudnn", "cusparse", "cufft", "curand", "cusolver"):
        p.add_argument(f"--{lib}-wheel", type=Path)
    p.add_argument("--cudnn-frontend-repo", type=Path)
    p.add_argument("--cudnn-frontend-refs", default="v1.4.0,v1.23.0")
    p.add_argument("--triton-wheel", type=Path)
    p.add_argument("--xid-csv", type=Path)
    p.add_argument("--xid-pinned", default="")
    p.add_argument("--out", type=Path, default=Path("checks/log_vocabulary.toml"))
    p.add_argument(
        "--xid-only",
        action="store_true",
        help="rewrite only the [[xid]] entries of --out from --xid-csv (no other pin needed)",
    )
    p.add_argument("--command", default="", help="the command line to record (default: this one)")
    a = p.parse_args(argv)
    if a.xid_only:
        if a.xid_csv is None:
            p.error("--xid-only needs --xid-csv")
        count = rewrite_xids(a.out, a.xid_csv, a.xid_pinned or str(a.xid_csv))
        print(f"xid              {count} entries", file=sys.stderr)
        return 0
    if a.nccl_wheel is None:
        p.error("--nccl-wheel is required (except with --xid-only)")

    b = Builder()
    driver_docs = add_cuda(b)
    if a.libcuda_json:
        add_driver_strings(b, a.libcuda_json, driver_docs)
    add_nccl(b, Package(a.nccl_wheel).select("nvidia-nccl-cu12"), a.nccl_repo, a.nccl_ref)
    headers = {
        "cublas": ("nvidia-cublas-cu12", "include/cublas_api.h", "cublasStatus_t"),
        "cudnn": ("nvidia-cudnn-cu12", "include/cudnn_graph.h", "cudnnStatus_t"),
        "cusparse": ("nvidia-cusparse-cu12", "include/cusparse.h", "cusparseStatus_t"),
        "cufft": ("nvidia-cufft-cu12", "include/cufft.h", "cufftResult"),
        "curand": ("nvidia-curand-cu12", "include/curand.h", "curandStatus"),
        "cusolver": ("nvidia-cusolver-cu12", "include/cusolver_common.h", "cusolverStatus_t"),
    }
    for family, (dist, header, type_name) in headers.items():
        path = getattr(a, f"{family}_wheel")
        if path is not None:
            add_header_enum(b, family, Package(path).select(dist), header, type_name)
    if a.cudnn_frontend_repo:
        add_cudnn_frontend(b, a.cudnn_frontend_repo, a.cudnn_frontend_refs.split(","))
    if a.triton_wheel:
        add_triton(b, Package(a.triton_wheel).select("triton"))
    if a.xid_csv:
        add_xids(b, a.xid_csv, a.xid_pinned or str(a.xid_csv))
    command = a.command or " ".join(
        ["python", SCRIPT, *(argv if argv is not None else sys.argv[1:])]
    )
    a.out.write_text(render(b, command), encoding="utf-8")
    load(a.out)  # the file decodes into the schema
    for family, row in counts(b).items():
        print(f"{family:16} {row}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
