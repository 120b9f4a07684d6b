"""The error vocabulary of the GPU stack: ``checks/log_vocabulary.toml`` (issue 33, item 3).

Every ``[[term]]`` is an exact, case-sensitive literal (an enum member's name, ``kind =
"name"``, or an error string as a library prints it, ``kind = "message"``) that is safe to
match anywhere in a line: the matcher numbers the texts beside the catalogue's literals
(owner ``term``) and counts a hit wherever it stands, glued to model output too, as
``runtime.unrecognised_fatal_error`` (``fatal = true``: the process or its CUDA context
cannot go on) or ``runtime.unrecognised_error`` (an error status a program may survive),
its excerpt led by the term, its family and meaning. ``[[source]]`` names where a family's
texts come from (pinned); ``[[xid]]`` is NVIDIA's Xid table: the rules read a
``kernel.xid`` line's number in it (``rules/logs.py``: fatal there is ``kernel.xid_fatal``,
``fail``, the excerpt led by the number's name and NVIDIA's immediate action).
"""

# Annotations are evaluated at class creation (msgspec; see ruledata/logs.py).
from typing import Any, Literal

import msgspec

from blackwell_doctor.ruledata.checkdata import (
    CatalogueError,
    convert,
    read_shipped,
    shipped_source,
)

VOCABULARY_FILE = "log_vocabulary.toml"

# Words a family id spells in capitals when it is shown ("cuda_runtime" -> "CUDA runtime").
_ACRONYMS = frozenset(
    {"cuda", "nccl", "cudnn", "cublas", "cublaslt", "cufft", "cusparse", "cusolver", "curand"}
    | {"nvrtc", "nvml", "nvjitlink", "ggml", "xid", "gsp"}
)


class Source(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    pinned: str


class Term(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    text: str
    family: str
    kind: Literal["name", "message"]
    fatal: bool
    meaning: str

    def label(self) -> str:
        """How a finding names it: ``cudaErrorIllegalAddress (CUDA runtime): <meaning>``."""
        return f"{self.text} ({family_name(self.family)}): {self.meaning}"


class Xid(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    number: int
    name: str
    fatal: bool
    source: str
    # NVIDIA's "Resolution Bucket (Immediate Action)" (RESTART_APP, RESET_GPU, RESTART_BM,
    # ...): the step checks/health.toml [xid_actions] gives it (issue 39).
    action: str = ""


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    source: list[Source] = msgspec.field(default_factory=list)
    term: list[Term] = msgspec.field(default_factory=list)
    xid: list[Xid] = msgspec.field(default_factory=list)


class Vocabulary:
    """The terms (one per distinct text: the first entry of a text wins), the Xid table by
    number, the sources by family."""

    def __init__(self, terms: list[Term], xids: list[Xid], sources: list[Source]) -> None:
        seen: set[str] = set()
        self.terms: list[Term] = []
        for term in terms:
            if term.text not in seen:
                seen.add(term.text)
                self.terms.append(term)
        self.xids = {x.number: x for x in xids}
        self.sources: dict[str, list[str]] = {}
        for src in sources:
            self.sources.setdefault(src.id, []).append(src.pinned)


def family_name(family: str) -> str:
    words = family.split("_")
    return " ".join(w.upper() if w in _ACRONYMS else w for w in words) or family


def parse_vocabulary(raw: dict[str, Any], *, name: str = VOCABULARY_FILE) -> Vocabulary:
    """Validate a decoded document: a term's text is a non-empty line (no newline, not only
    spaces) and its family has a [[source]] entry."""
    data = convert(raw, _File, source=shipped_source(name))
    families = {s.id for s in data.source}
    for term in data.term:
        if not term.text.strip() or "\n" in term.text:
            raise CatalogueError(
                f"checks/{name}: term {term.text!r}: text must be a non-empty text on one line"
            )
        if term.family not in families:
            raise CatalogueError(
                f"checks/{name}: term {term.text!r}: family {term.family!r} has no [[source]]"
            )
    return Vocabulary(data.term, data.xid, data.source)


_LOADED: list[Vocabulary] = []


def load_vocabulary() -> Vocabulary:
    """The shipped vocabulary, read once a process (or the one :func:`adopt` was given)."""
    if not _LOADED:
        _LOADED.append(parse_vocabulary(read_shipped(VOCABULARY_FILE)))
    return _LOADED[0]


def adopt(vocabulary: Vocabulary) -> None:
    """Take ``vocabulary`` as the shipped one unless it was read already: the log
    catalogue's cache (ruledata/logs.py) keeps it built, from the same file's bytes."""
    if not _LOADED:
        _LOADED.append(vocabulary)
