"""The log-signature catalogue: ``checks/log_signatures.toml``, validated at load.

A typo in the data file is one clear :class:`~blackwell_doctor.ruledata.checkdata.CatalogueError`
naming the file, the entry and the field, never a silently wrong verdict.
"""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools
import re
from typing import Any, Literal

import msgspec

from blackwell_doctor.facts import regexcache
from blackwell_doctor.ruledata import dismissal, records
from blackwell_doctor.ruledata.checkdata import (
    CatalogueError,
    convert,
    read_shipped,
    shipped_source,
)
from blackwell_doctor.ruledata.vocabulary import Term, load_vocabulary

CATALOGUE_FILE = "log_signatures.toml"

LogSeverity = Literal["info", "warn", "fail"]

LogCheck = Literal[
    "logs.moe_kernels",
    "logs.arch_support",
    "logs.p2p",
    "logs.platform",
    "logs.kernel_events",
    "logs.inputs",
]
ContextRule = Literal[
    "autotuner-wrapped",
    "autotuner-summary",
    "marlin-requested",
    "not-nvidia",
    "unrecognised-fatal",
    "unrecognised-error",
    "liveness",
    "log-end",
    "xid",
    "xid-fatal",
]
# The generic detector's rules (what no literal names): a known signature wins over them.
GENERIC_RULES = frozenset({"unrecognised-fatal", "unrecognised-error"})

SEVERITY_RANK: dict[str, int] = {"info": 0, "warn": 1, "fail": 2}
# A vocabulary term's last characters: the prefilter's literal for the term broken over
# two lines of a wrapped record (collect/logs/matcher.py).
SEAM_TAIL_CHARS = 8
# Rules whose entry is found by structure, not by literals: the scanner's log-end run, and
# the rules' reading of an Xid line's number in NVIDIA's Xid table (rule xid-fatal: what a
# rule xid finding becomes when the table marks its number fatal; rules/logs.py).
STRUCTURE_RULES = frozenset({"log-end", "xid-fatal"})

_ID = r"^[a-z0-9_]+(\.[a-z0-9_]+)+$"


class Signature(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    id: str
    literals: list[str]
    component: str
    severity: LogSeverity
    check: LogCheck
    meaning: str
    remedy: list[str]
    source: str
    regex: str | None = None
    unless: str | None = None
    rule: ContextRule | None = None
    warn_at: int | None = None


class Marker(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A line that is no finding itself but changes how others are judged. ``regex`` is
    required: a marker counts only where the program prints it (a config line, a command
    line), never because its literal turns up in free text."""

    id: str
    literals: list[str]
    regex: str
    source: str


class InputProblem(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """A finding about an input, not about its text: a source that could not be read, whole
    or in part. Never matched against log lines (it has no literals)."""

    id: str
    component: str
    severity: LogSeverity
    check: LogCheck
    meaning: str
    remedy: list[str]
    source: str


class _File(msgspec.Struct, frozen=True, forbid_unknown_fields=True):
    signature: list[Signature]
    marker: list[Marker] = msgspec.field(default_factory=list)
    input: list[InputProblem] = msgspec.field(default_factory=list)


class Catalogue:
    """Signatures and markers, with every literal numbered for the matcher.

    ``literals[i]`` is a distinct byte string; ``owners[i]`` lists what it belongs to:
    ``("sig", index)`` into :attr:`signatures`, ``("marker", index)`` into :attr:`markers`,
    ``("dismissal", 0)``: a word of prose dismissal (:mod:`blackwell_doctor.ruledata.dismissal`),
    ``("frame", 0)``: a traceback frame, ``("record", 0)``: a text every error-level record
    of the log grammars holds (:mod:`blackwell_doctor.ruledata.records`), ``("term", k)``: the
    vocabulary term ``terms[k]``, or ``("seam", k)``: its last :data:`SEAM_TAIL_CHARS`
    characters, where a term a transport wrapped over two lines is looked for
    (:mod:`blackwell_doctor.collect.logs.matcher`).
    """

    def __init__(
        self,
        signatures: list[Signature],
        markers: list[Marker],
        inputs: list[InputProblem] | None = None,
        *,
        compile_all: bool = True,
        terms: list[Term] | None = None,
    ) -> None:
        self.signatures = signatures
        self.markers = markers
        self.inputs = {p.id: p for p in inputs or []}
        self.by_id = {s.id: s for s in signatures}
        # The generic detector's signatures (indexes into signatures), in catalogue order,
        # and the first of each rule: where a line the grammar table classifies is counted.
        self.generic = [n for n, s in enumerate(signatures) if s.rule in GENERIC_RULES]
        self.generic_by_rule: dict[str, int] = {}
        for n in self.generic:
            self.generic_by_rule.setdefault(str(signatures[n].rule), n)
        # A signature's patterns are compiled when a line first needs them (a scan meets a
        # few signatures; compiling all 29 cost ~10 ms of every scan-logs), or all here
        # with ``compile_all`` (a catalogue being validated: a bad one is refused at once).
        self.regex = _Patterns([(s.id, "regex", s.regex) for s in signatures])
        self.unless = _Patterns([(s.id, "unless", s.unless) for s in signatures])
        # The markers' too (every marker has one).
        self.marker_regex = _RequiredPatterns([(m.id, "regex", m.regex) for m in markers])
        if compile_all:
            for n in range(len(signatures)):
                _ = (self.regex[n], self.unless[n])  # compiled now: a bad one raises here
            for n in range(len(markers)):
                _ = self.marker_regex[n]
        index: dict[bytes, int] = {}
        self.literals: list[bytes] = []
        self.owners: list[list[tuple[str, int]]] = []
        numbered = [("sig", n, s.literals) for n, s in enumerate(signatures)]
        numbered += [("marker", n, m.literals) for n, m in enumerate(markers)]
        # Prose dismissals (context rule "prose"): found by the same search, owned by no entry.
        numbered += [("dismissal", 0, list(dismissal.LITERALS))]
        # Python traceback frames: the generic detector quotes the last one above an error.
        numbered += [("frame", 0, ['File "'])]
        # Error-level records and fatal forms of every log grammar (ruledata/records.py):
        # judged by the generic detector like its signatures' own literals.
        numbered += [("record", 0, list(records.LITERALS))]
        # The error vocabulary (checks/log_vocabulary.toml): counted wherever it stands.
        self.terms = list(terms or [])
        numbered += [("term", k, [t.text]) for k, t in enumerate(self.terms)]
        # Their tails: a term broken over two lines of one record leaves its tail whole on
        # the second line (a break inside the tail is not seen).
        numbered += [
            ("seam", k, [t.text[-SEAM_TAIL_CHARS:]])
            for k, t in enumerate(self.terms)
            if len(t.text) > SEAM_TAIL_CHARS
        ]
        for kind, n, texts in numbered:
            for text in texts:
                key = text.encode("utf-8")
                if key not in index:
                    index[key] = len(self.literals)
                    self.literals.append(key)
                    self.owners.append([])
                self.owners[index[key]].append((kind, n))
        self.max_literal = max((len(lit) for lit in self.literals), default=1)

    def entry(self, entry_id: str) -> Signature | InputProblem | None:
        """A signature or an input problem by id (what it means, the remedy, the source)."""
        return self.by_id.get(entry_id) or self.inputs.get(entry_id)


class _Patterns:
    """Each signature's regex (or unless), compiled on first use; None where it has none."""

    def __init__(self, sources: list[tuple[str, str, str | None]]) -> None:
        self._sources = sources
        self._compiled: dict[int, re.Pattern[str] | None] = {}

    def __len__(self) -> int:
        return len(self._sources)

    def __getitem__(self, n: int) -> re.Pattern[str] | None:
        if n not in self._compiled:
            self._compiled[n] = _compile(*self._sources[n])
        return self._compiled[n]


class _RequiredPatterns(_Patterns):
    """Patterns every entry has (the markers'), compiled on first use."""

    def __getitem__(self, n: int) -> re.Pattern[str]:
        compiled = super().__getitem__(n)
        assert compiled is not None
        return compiled


def _compile(sig_id: str, field: str, pattern: str | None) -> re.Pattern[str] | None:
    if pattern is None:
        return None
    try:
        return regexcache.compile(pattern)
    except re.error as exc:
        raise CatalogueError(f"checks/{CATALOGUE_FILE}: {sig_id}: bad {field}: {exc}") from None


def parse_catalogue(
    raw: dict[str, Any],
    *,
    name: str = CATALOGUE_FILE,
    compile_all: bool = True,
    terms: list[Term] | None = None,
) -> Catalogue:
    """Validate a decoded TOML document (also used by tests on broken documents);
    ``compile_all=False`` leaves the signatures' patterns to their first use."""
    data = convert(raw, _File, source=shipped_source(name))
    seen: set[str] = set()
    entries: list[tuple[str, list[str]]] = [(s.id, s.literals) for s in data.signature]
    entries += [(m.id, m.literals) for m in data.marker]
    entries += [(p.id, ["-"]) for p in data.input]
    # The scanner records a rule log-end entry from the end of a source, and the rules make
    # the rule xid-fatal entry from an Xid line's number: neither from literals.
    log_end = {s.id for s in data.signature if s.rule in STRUCTURE_RULES}
    for entry_id, literals in entries:
        where = f"checks/{name}: {entry_id!r}"
        if entry_id in seen:
            raise CatalogueError(f"{where}: duplicate id")
        seen.add(entry_id)
        if entry_id in log_end:
            if literals:
                raise CatalogueError(f"{where}: a rule found by structure has no literals")
            continue
        if not literals or any(not lit.strip() for lit in literals):
            raise CatalogueError(f"{where}: literals must be non-empty texts")
        if any("\n" in lit for lit in literals):
            raise CatalogueError(f"{where}: a literal cannot span lines")
    for sig in data.signature:
        where = f"checks/{name}: {sig.id!r}"
        if not re.fullmatch(_ID, sig.id):
            raise CatalogueError(f"{where}: id is not area.name (lowercase)")
        if sig.warn_at is not None and sig.warn_at < 1:
            raise CatalogueError(f"{where}: warn_at must be >= 1")
        if sig.rule == "autotuner-summary" and (sig.regex is None or "(?P<n>" not in sig.regex):
            raise CatalogueError(f"{where}: rule autotuner-summary needs a regex with (?P<n>...)")
        if sig.rule == "xid" and (sig.regex is None or "(?P<xid>" not in sig.regex):
            raise CatalogueError(f"{where}: rule xid needs a regex with (?P<xid>...)")
    for problem in data.input:
        if not re.fullmatch(_ID, problem.id):
            raise CatalogueError(f"checks/{name}: {problem.id!r}: id is not area.name (lowercase)")
    return Catalogue(data.signature, data.marker, data.input, compile_all=compile_all, terms=terms)


@functools.cache
def load_catalogue() -> Catalogue:
    # The shipped patterns are compiled by the test suite (tests/test_logs_catalogue.py);
    # a run compiles those it meets.
    terms = load_vocabulary().terms
    return parse_catalogue(read_shipped(CATALOGUE_FILE), compile_all=False, terms=terms)
