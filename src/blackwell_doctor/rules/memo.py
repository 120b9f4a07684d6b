"""Results remembered by what each check read: an engine that judges thousands of nodes
(``fleet``) runs a check again only for a node where a field that check reads differs.

A check is a pure function of the facts and the rule data (no I/O, no environment, no
clock: DESIGN.md), so two runs that read the same values take the same path and return the
same outcome. What a check reads is learnt by running it: on a miss it runs over a *traced*
copy of the facts, where the document and each of its sections are instances of subclasses
of their own types (every ``isinstance`` and ``match`` of the checks holds) that record the
fields read, two levels deep: ``nvml`` (compared by its type: NvmlFacts, Unavailable, or a
value such as ``None``) and ``nvml.driver_version`` (compared by its value). A value below
the second level is part of its field's (``nvml.gpus`` is the whole list, compared as its
MessagePack encoding: exact, and 1, 1.0 and True differ).

The result is remembered under the fields that run read (its *read set*) and their values.
A node whose values on that read set are the same gets that result: the run read those
fields one after another, and the node would have given it the same value at each read, so
it would have taken the same path to the same result. A check keeps a table per read set it
has met (a check reads other fields on another path: ``pci.iommu`` reads the kernel command
line only where the IOMMU translates), and a node is looked up in each. The GPUs' UUIDs are
left out of ``nvml.gpus``'s value (no check reads an identity field: tests/test_fleet.py),
so machines of one kind share it.

What the tracer cannot see is a read that bypasses attribute access on the document or a
section (a section passed whole to msgspec, or compared with ``==``); no check does either.
tests/test_rules_memo.py holds that: every check, on every fixture, returns through the
tracer what it returns without it, changing any field it was not seen to read changes
nothing, and a fleet judged with the memo equals one judged without.

A check whose results are seldom reused (its fields differ on most nodes: a bench run's
figures, a command line of its own) stops being remembered after ``PROBATION`` misses, or
after ``UNSHARED`` misses when no result of it was asked for again: it then runs as in any
engine, without tracing or keys.

A check whose results are reused on some nodes but whose misses land in a read set that
never repeats (``link.pcie`` or ``probe.tiles`` on the nodes with their own probe figures:
the nodes without probes share a result) keeps its tables for the lookups but stops
learning: after ``RARE_RUN`` misses in a row landed in a read set of at least
``PROBATION`` results of which fewer than 1 in ``RARE`` were asked for again, a miss runs
the check as any engine does (no traced copy, no keys: ~100 us of each such miss), and one
miss in ``RELEARN`` is learnt again to see whether the read sets now repeat. Either way the
result is the check's own.
"""

from __future__ import annotations

import operator
from collections.abc import Callable, Sequence
from typing import Any

import msgspec

from blackwell_doctor.facts.document import Facts
from blackwell_doctor.report.results import Result
from blackwell_doctor.ruledata.rules import CheckSpec, RuleData
from blackwell_doctor.rules.engine import Engine, judged
from blackwell_doctor.rules.registry import CheckFn

# A check's results remembered at most, and the bytes of their keys in all; past either the
# check's (or every check's) tables start over. Read sets a check keeps at most (past it,
# they start over).
MEMO_MAX = 1024
MEMO_BYTES = 64 << 20
READ_SETS = 8
# Misses before a check whose results are seldom reused (fewer than 1 in RARE of its runs)
# is no longer remembered.
PROBATION = 64
RARE = 8
# Misses, none of them followed by a hit, before a check is no longer remembered: a check
# whose every node's result is its own (the serving checks' bench figures, the health
# checks' readings) would otherwise be learnt PROBATION times (a traced run and its keys:
# ~40-100 us each, ~14 such checks in a fleet of varied nodes).
UNSHARED = 16
# Nodes judged as any engine judges them before the memo starts: a fleet of a few nodes
# (tests/fixtures/facts' 12) gains nothing from remembering, and would pay for the tracing.
PLAIN_RUNS = 16
# Misses in a row that landed in a read set whose results are seldom asked for again before
# a check stops learning; then one miss in RELEARN is learnt.
RARE_RUN = 8
RELEARN = 16

_encode = msgspec.msgpack.Encoder().encode


class _Trace:
    """The fields the traced run in progress has read (None: no run is traced)."""

    reads: set[str] | None = None


def _traced_type(cls: type[msgspec.Struct], section: str | None) -> type[msgspec.Struct]:
    """A subclass of ``cls`` whose reads of its fields are recorded as ``section.field``
    (``field`` for the document itself)."""
    paths = {f: f if section is None else f"{section}.{f}" for f in cls.__struct_fields__}
    get = object.__getattribute__

    def __getattribute__(self: object, name: str) -> Any:
        path = paths.get(name)
        if path is not None and _Trace.reads is not None:
            _Trace.reads.add(path)
        return get(self, name)

    config = cls.__struct_config__
    namespace = {"__getattribute__": __getattribute__, "__module__": cls.__module__}
    meta: Any = type(cls)
    traced: type[msgspec.Struct] = meta(cls.__name__, (cls,), namespace, frozen=config.frozen)
    return traced


_TRACED: dict[tuple[type[msgspec.Struct], str | None], type[msgspec.Struct]] = {}


def _retyped(cls: type[msgspec.Struct], section: str | None, **fields: Any) -> Any:
    traced = _TRACED.get((cls, section))
    if traced is None:
        traced = _TRACED[cls, section] = _traced_type(cls, section)
    return traced(**fields)


def traced_facts(facts: Facts) -> Facts:
    """``facts`` with every read of its fields and of its sections' fields recorded while a
    traced run is in progress (:func:`reads_of`)."""
    fields: dict[str, Any] = {}
    for name in Facts.__struct_fields__:
        value = getattr(facts, name)
        if isinstance(value, msgspec.Struct):
            value = _retyped(
                type(value), name, **{f: getattr(value, f) for f in value.__struct_fields__}
            )
        fields[name] = value
    traced: Facts = _retyped(Facts, None, **fields)
    return traced


def reads_of(fn: Callable[[], Any]) -> tuple[Any, frozenset[str]]:
    """What ``fn`` returns and the fields of traced facts it read."""
    _Trace.reads = set()
    try:
        return fn(), frozenset(_Trace.reads)
    finally:
        _Trace.reads = None


class _Absent:
    """The value of a field the section at hand lacks (Unavailable has only ``reason``)."""


_ABSENT = _Absent()
_CRASHED = _Absent()


def _gpus_as_judged(gpus: list[Any]) -> bytes:
    # Machines of one kind differ in their GPUs' UUIDs, which no check reads.
    return _encode([msgspec.structs.replace(g, uuid="") for g in gpus])


def value_getter(path: str) -> Callable[[Facts], object]:
    """What a run that read ``path`` of the facts saw, as a hashable value: a section by its
    type (its fields are read, and compared, one by one), a field by its value (a string as
    it is, anything else as its MessagePack encoding)."""
    section, _, name = path.partition(".")
    if not name:

        def document_field(facts: Facts) -> object:
            value = getattr(facts, section)
            if isinstance(value, msgspec.Struct):
                return type(value)
            return value if type(value) is str else _encode(value)

        return document_field
    if path == "nvml.gpus":

        def gpus(facts: Facts) -> object:
            value = getattr(facts.nvml, "gpus", _ABSENT)
            return _ABSENT if value is _ABSENT else _gpus_as_judged(value)  # type: ignore[arg-type]

        return gpus

    def section_field(facts: Facts) -> object:
        value = getattr(getattr(facts, section), name, _ABSENT)
        return value if type(value) is str or value is _ABSENT else _encode(value)

    return section_field


class _Table:
    """The results of runs that read ``paths``, by the values they read."""

    __slots__ = ("hits", "key", "paths", "results", "reused", "stores", "unused")

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.paths = paths
        self.key: Callable[[dict[str, object]], object] = (
            operator.itemgetter(*paths) if paths else _no_key
        )
        self.results: dict[object, Result] = {}
        self.hits = 0
        # Results kept, those asked for again, the keys of those not (yet).
        self.stores = 0
        self.reused = 0
        self.unused: set[object] = set()

    def rare(self) -> bool:
        """Its results are seldom asked for again (a table's hits may all be on a few)."""
        return self.stores >= PROBATION and self.reused * RARE < self.stores

    def clear(self) -> None:
        self.results.clear()
        self.unused.clear()


def _no_key(values: dict[str, object]) -> object:
    return ()


class _Memo:
    """One check's remembered results: a table per read set, the most used first."""

    __slots__ = ("hits", "learning", "misses", "on", "rare_run", "tables", "unlearnt")

    def __init__(self) -> None:
        self.tables: list[_Table] = []
        self.hits = 0
        self.misses = 0
        self.on = True
        # Misses in a row learnt into a rare table; whether misses are learnt; misses run
        # without learning since the last learnt one.
        self.rare_run = 0
        self.learning = True
        self.unlearnt = 0

    def table(self, read: frozenset[str]) -> tuple[_Table, bool]:
        """The table of the read set ``read``; True when it is new."""
        paths = tuple(sorted(read))
        for table in self.tables:
            if table.paths == paths:
                return table, False
        if len(self.tables) >= READ_SETS:
            self.tables.clear()
        self.tables.append(_Table(paths))
        return self.tables[-1], True


class MemoEngine(Engine):
    """An :class:`Engine` (of every check, on demand) that remembers each check's results by
    the values of the fields it read (above). Its results are the engine's, the same
    objects for every node that shares them (they are frozen)."""

    __slots__ = ("_facts", "_getters", "_key_bytes", "_memos", "_runs", "_traced", "_values")

    def __init__(self, rules: RuleData, checks: dict[str, CheckFn]) -> None:
        super().__init__(rules, checks, on_demand=True)
        self._memos: dict[str, _Memo] = {}
        self._key_bytes = 0
        # What reads each field that a remembered result is keyed on.
        self._getters: dict[str, Callable[[Facts], object]] = {}
        # The node being judged: its facts, the values of its fields, its traced copy.
        self._facts: Facts | None = None
        self._values: dict[str, object] = {}
        self._traced: Facts | None = None
        self._runs = 0

    def run(
        self, facts: Facts, select: Sequence[str] = (), ignore: Sequence[str] = ()
    ) -> list[Result]:
        self._runs += 1
        if self._runs <= PLAIN_RUNS:
            return super().run(facts, select, ignore)  # _judge: as any engine
        self._facts, self._traced = facts, None
        self._values = {p: get(facts) for p, get in self._getters.items()}
        try:
            return super().run(facts, select, ignore)
        finally:
            self._facts = self._traced = None

    def _judge(self, spec: CheckSpec, facts: Facts) -> Result:
        memo = self._memos.get(spec.id)
        if memo is None:
            memo = self._memos[spec.id] = _Memo()
        if not memo.on or facts is not self._facts:
            return super()._judge(spec, facts)
        values = self._values
        for table in memo.tables:
            key = table.key(values)
            found = table.results.get(key)
            if found is not None:
                table.hits += 1
                memo.hits += 1
                if key in table.unused:  # asked for again: not a result of this node alone
                    table.unused.discard(key)
                    table.reused += 1
                return found
        memo.misses += 1
        if (memo.misses >= UNSHARED and not memo.hits) or (
            memo.misses >= PROBATION and memo.hits * RARE < memo.hits + memo.misses
        ):
            memo.on = False  # seldom reused: run it as any engine does from now on
            memo.tables.clear()
            self._gather()
            return super()._judge(spec, facts)
        if not memo.learning:
            memo.unlearnt += 1
            if memo.unlearnt < RELEARN:
                return super()._judge(spec, facts)  # as any engine: nothing to learn
            memo.unlearnt = 0
        return self._learn(memo, spec, facts)

    def _learn(self, memo: _Memo, spec: CheckSpec, facts: Facts) -> Result:
        """Run the check over the traced facts, and remember its result."""
        if self._traced is None:
            self._traced = traced_facts(facts)
        traced = self._traced
        outcome, read = reads_of(lambda: self._outcome(spec, traced))
        result = super()._judge(spec, facts) if outcome is _CRASHED else judged(spec, outcome)
        table, new = memo.table(read)
        memo.rare_run = memo.rare_run + 1 if table.rare() else 0
        memo.learning = memo.rare_run < RARE_RUN
        if new:
            self._gather()
            for path in table.paths:
                if path not in self._values:
                    self._values[path] = self._getters[path](facts)
            memo.tables.sort(key=lambda t: -t.hits)
        key = table.key(self._values)
        parts = key if isinstance(key, tuple) else (key,)
        size = sum(len(k) for k in parts if isinstance(k, bytes | str))
        if len(table.results) >= MEMO_MAX:
            table.clear()
        if self._key_bytes + size > MEMO_BYTES:
            for m in self._memos.values():
                for t in m.tables:
                    t.clear()
            self._key_bytes = 0
        table.results[key] = result
        table.stores += 1
        table.unused.add(key)
        self._key_bytes += size
        return result

    def stats(self) -> dict[str, Any]:
        """How often results were given and checks run again, and which checks are no
        longer remembered (for the tests and the benchmark)."""
        return {
            "hits": sum(m.hits for m in self._memos.values()),
            "misses": sum(m.misses for m in self._memos.values()),
            "off": sorted(i for i, m in self._memos.items() if not m.on),
            "unlearning": sorted(i for i, m in self._memos.items() if m.on and not m.learning),
        }

    def _gather(self) -> None:
        """The getters of the fields that the remembered checks' tables key on."""
        paths = {p for m in self._memos.values() if m.on for t in m.tables for p in t.paths}
        self._getters = {p: self._getters.get(p) or value_getter(p) for p in sorted(paths)}

    def _outcome(self, spec: CheckSpec, facts: Facts) -> Any:
        """The check's outcome on the traced ``facts``; _CRASHED where it raised (the engine
        then runs it again untraced, for the crash's own words: the tracer would be the
        last frame of an AttributeError)."""
        try:
            return self.checks[spec.id](facts, self.rules)
        except Exception:
            return _CRASHED
