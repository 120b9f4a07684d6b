"""Runs the registered checks over facts: selection, prerequisites, crash isolation."""

from __future__ import annotations

import traceback
from collections.abc import Collection, Iterable, Sequence
from typing import NamedTuple, get_args

import msgspec

from blackwell_doctor.facts.document import NOT_COLLECTED, Facts, Section, Unavailable
from blackwell_doctor.report.results import (
    Outcome,
    Remedy,
    Result,
    Status,
    not_evaluated,
    skipped,
)
from blackwell_doctor.ruledata.rules import CheckSpec, RemedyText, RuleData, fill
from blackwell_doctor.rules.absent import SECTIONS
from blackwell_doctor.rules.mounts import in_container, name_mounts
from blackwell_doctor.rules.registry import READS, REGISTRY, CheckFn

# The module under rules/ that registers each check family's checks (rules/families.py
# imports them all; tests/test_engine.py checks that the two agree with the catalogue).
FAMILY_MODULES = {
    "bar1": "bar1",
    "collective": "collective",
    "driver": "driver",
    "gpu": "gpu",
    "health": "health",
    "link": "link",
    "logs": "logs",
    "memory": "memory",
    "model": "checkpoint",
    "module": "module",
    "p2p": "p2p",
    "pci": "pci",
    "platform": "platform",
    "probe": "probe",
    "serving": "serving",
    "stack": "stack",
}


def family(check_id: str) -> str:
    return check_id.split(".", 1)[0]


def registered_checks(families: Collection[str] | None = None) -> dict[str, CheckFn]:
    """The checks of ``families`` (default: all). Importing a family's module registers its
    checks: a run that judges some families imports only theirs (``scan-logs``: the logs
    checks, not the whole engine)."""
    if families is None:
        from blackwell_doctor.rules import families as _all  # noqa: F401

        return dict(REGISTRY)
    for name in sorted(families):
        # The import statement's own path (not importlib.import_module): -X importtime, and
        # so benchmarks/import_cost.py and tests/test_import_cost.py, see what it loads.
        __import__(f"blackwell_doctor.rules.{FAMILY_MODULES[name]}")
    return {i: fn for i, fn in REGISTRY.items() if family(i) in families}


class SelectionError(ValueError):
    """A --select/--ignore pattern that names no check or family."""


def _matches(check_id: str, pattern: str) -> bool:
    # Prefixes match on dotted boundaries: "driver" and "driver.version" match
    # driver.version; "drive" does not.
    return check_id == pattern or check_id.startswith(pattern.rstrip(".") + ".")


def _nearest(pattern: str, ids: list[str]) -> str:
    """ "; did you mean 'x'?" for the check id or family nearest a misspelt pattern (difflib's
    ratio, its default cutoff 0.6), else ""."""
    import difflib

    names = sorted({*ids, *(i.split(".", 1)[0] for i in ids)})
    close = difflib.get_close_matches(pattern.rstrip("."), names, n=1)
    return f"; did you mean {close[0]!r}?" if close else ""


def select_ids(all_ids: Iterable[str], select: Sequence[str], ignore: Sequence[str]) -> list[str]:
    ids = list(all_ids)
    for pattern in [*select, *ignore]:
        if not any(_matches(i, pattern) for i in ids):
            raise SelectionError(
                f"no check id or family matches {pattern!r}{_nearest(pattern, ids)}"
            )
    chosen = [i for i in ids if not select or any(_matches(i, p) for p in select)]
    chosen = [i for i in chosen if not any(_matches(i, p) for p in ignore)]
    if not chosen:
        raise SelectionError("--select/--ignore leave no check to run")
    return chosen


def needed_checks(rules: RuleData, select: Sequence[str], ignore: Sequence[str]) -> set[str]:
    """The checks a run of ``select``/``ignore`` evaluates: the chosen ones and, transitively,
    what they require. Raises :class:`SelectionError` as :meth:`Engine.run` does."""
    chosen = set(select_ids(rules.checks, select, ignore))
    stack = list(chosen)
    while stack:
        for dep in rules.checks[stack.pop()].requires:
            if dep not in chosen:
                chosen.add(dep)
                stack.append(dep)
    return chosen


def needed_sections(
    rules: RuleData, select: Sequence[str], ignore: Sequence[str]
) -> frozenset[Section]:
    """The sections of the facts that a run of ``select``/``ignore`` reads: what its checks
    and their prerequisites declare (``reads=`` of each ``@check``; only their families'
    code is imported). Raises :class:`SelectionError` as :meth:`Engine.run` does."""
    ids = needed_checks(rules, select, ignore)
    registered_checks(frozenset(family(i) for i in ids))
    return frozenset(s for i in ids for s in READS[i])


class Engine:
    """The checks of ``checks`` over facts, with the catalogue's words (``rules``).

    ``families``: the families whose code is loaded (None: all); a run needing another is a
    bug. ``on_demand``: the engine of every check (check, fleet): it starts with no code,
    imports a family's module when one of its checks first runs, and skips a check of a
    family of absent.SECTIONS whose section the facts lack without its code (``checks``
    grows). A plain class, not a dataclass: ~0.6 ms less start-up (docs/performance.md).
    """

    __slots__ = ("_fixed", "_plans", "checks", "families", "on_demand", "rules")

    def __init__(
        self,
        rules: RuleData,
        checks: dict[str, CheckFn],
        families: frozenset[str] | None = None,
        *,
        on_demand: bool = False,
    ) -> None:
        self.rules = rules
        self.checks = checks
        self.families = families
        self.on_demand = on_demand
        # (select, ignore) -> what :meth:`_plan` worked out for them.
        self._plans: dict[tuple[tuple[str, ...], tuple[str, ...]], _Plan] = {}
        # Results that depend on no fact of the node (blocked by a prerequisite, skipped for
        # a section the facts lack), by check and reason: made once (they are frozen).
        self._fixed: dict[tuple[str, str], Result] = {}
        if not on_demand:
            _agree(rules, checks, families)

    def _load(self, families: set[str]) -> None:
        """Import ``families``' modules into an on-demand engine's checks."""
        loaded = registered_checks(families)
        _agree(self.rules, loaded, frozenset(families))
        self.checks.update(loaded)

    def run(
        self, facts: Facts, select: Sequence[str] = (), ignore: Sequence[str] = ()
    ) -> list[Result]:
        plan = self._plan(tuple(select), tuple(ignore))
        if plan.unloaded:
            # Families an on-demand engine has not loaded yet, whose section these facts
            # hold (a family of absent.SECTIONS skips without its code when they lack it).
            missing = {
                family(c)
                for c, _, _, _, absent in plan.unloaded
                if absent is None or getattr(facts, absent[0]) is not None
            }
            if missing:
                self._load(missing)
                plan.unloaded[:] = [u for u in plan.unloaded if u[0] not in self.checks]
        left_out = _left_out(facts)
        done: dict[str, Result] = {}
        judge, fixed, decided = self._judge, self._fixed, self._decided
        if left_out:  # a --select run's facts: each step as _decided says
            for check_id, spec, _, _, absent in plan.steps:
                result = decided(spec, absent, facts, done, left_out)
                done[check_id] = judge(spec, facts) if result is None else result
        else:
            for check_id, spec, requires, section, absent in plan.steps:
                # _decided's cases tested here first (a call for each step was ~15 us of a
                # fleet's node): most checks have prerequisites that passed, and a check
                # skipped for a section the facts lack has its result made already.
                blocked = False
                for dep in requires:
                    prior = done.get(dep)
                    if prior is not None and prior.status not in _GOING_ON:
                        blocked = True
                        break
                if not blocked and section is not None and getattr(facts, section) is None:
                    skip = fixed.get((check_id, ""))
                    if skip is not None:
                        done[check_id] = skip
                        continue
                    blocked = True
                if blocked:
                    result = decided(spec, absent, facts, done, left_out)
                    if result is not None:
                        done[check_id] = result
                        continue
                done[check_id] = judge(spec, facts)
        if not in_container(facts):
            return [done[i] for i in plan.chosen]
        # In a container, a result whose input was an unreadable host path names the mount
        # to add (rules/mounts.py; checks/host_mounts.toml): only a finding or an error can.
        rules = self.rules
        return [
            name_mounts(r, facts, rules) if r.status in _MOUNTABLE else r
            for r in map(done.__getitem__, plan.chosen)
        ]

    def _plan(self, select: tuple[str, ...], ignore: tuple[str, ...]) -> _Plan:
        """The checks a run evaluates, in catalogue order (report order), and those it
        reports: worked out once per selection (``fleet`` runs one engine over thousands of
        nodes; this was ~20 us of each node's ~460)."""
        plan = self._plans.get((select, ignore))
        if plan is not None:
            return plan
        order = list(self.rules.checks)  # catalogue order is report order
        chosen = set(select_ids(order, select, ignore))
        # Prerequisites run even when not selected, so "blocked by" is always decidable.
        needed = chosen.union(*(self._all_requires(c) for c in chosen))
        # An on-demand engine loads what a run needs in run() (it depends on the facts).
        if not self.on_demand and not needed <= set(self.checks):
            raise RuntimeError(f"no code loaded for {sorted(needed - set(self.checks))}")
        steps: list[_Step] = []
        for i in order:
            if i in needed:
                spec = self.rules.checks[i]
                absent = SECTIONS.get(family(i)) if self.on_demand else None
                steps.append((i, spec, tuple(spec.requires), absent and absent[0], absent))
        plan = _Plan(
            steps=steps,
            chosen=[i for i in order if i in chosen],
            unloaded=[s for s in steps if s[0] not in self.checks] if self.on_demand else [],
        )
        self._plans[select, ignore] = plan
        return plan

    def _all_requires(self, check_id: str) -> set[str]:
        out: set[str] = set()
        stack = list(self.rules.checks[check_id].requires)
        while stack:
            dep = stack.pop()
            if dep not in out:
                out.add(dep)
                stack.extend(self.rules.checks[dep].requires)
        return out

    def _decided(
        self,
        spec: CheckSpec,
        absent: tuple[str, str] | None,
        facts: Facts,
        done: dict[str, Result],
        left_out: dict[str, str],
    ) -> Result | None:
        """The result of a check that does not run: blocked by a prerequisite, skipped for
        a section the facts lack, not evaluated for a part a --select run left out; None
        when it runs."""
        for dep in spec.requires:
            prior = done.get(dep)
            if prior is not None and prior.status not in _GOING_ON:
                fixed = self._fixed.get((spec.id, dep))
                if fixed is None:
                    fixed = self._fixed[spec.id, dep] = _result(
                        spec, Outcome(status=Status.SKIP, summary=f"blocked by {dep}")
                    )
                return fixed
        if absent is not None and getattr(facts, absent[0]) is None:
            fixed = self._fixed.get((spec.id, ""))
            if fixed is None:
                fixed = self._fixed[spec.id, ""] = _result(spec, skipped(absent[1]))
            return fixed
        if left_out:
            unread = [s for s in READS[spec.id] if s in left_out]
            if unread:
                # Facts a --select run collected without a part this check reads: not
                # judged, whatever its code would make of an unavailable value.
                return _result(
                    spec,
                    not_evaluated(
                        ", ".join(f"{s} not in these facts ({left_out[s]})" for s in sorted(unread))
                    ),
                )
        return None

    def _judge(self, spec: CheckSpec, facts: Facts) -> Result:
        """The check's own verdict on ``facts`` (what a memo may remember)."""
        try:
            outcome = self.checks[spec.id](facts, self.rules)
        except Exception as exc:  # a crashing check is a result, never a traceback
            where = traceback.extract_tb(exc.__traceback__)[-1]
            return _result(
                spec,
                Outcome(
                    status=Status.ERROR,
                    summary=f"not evaluated: check crashed: {type(exc).__name__}: {exc}",
                    evidence={"at": f"{where.filename}:{where.lineno}"},
                ),
            )
        return judged(spec, outcome)


def judged(spec: CheckSpec, outcome: Outcome) -> Result:
    """The result of ``spec``'s check that returned ``outcome``; an outcome naming words the
    catalogue lacks is an error result (a bug, shown as one)."""
    try:
        return _result(spec, outcome)
    except KeyError as exc:
        return _result(spec, Outcome(status=Status.ERROR, summary=f"not evaluated: {exc.args[0]}"))


# The statuses of a prerequisite that let the checks requiring it run.
_GOING_ON = frozenset((Status.PASS, Status.WARN))
# The statuses of a result that rules/mounts.py's name_mounts may add a mount to.
_MOUNTABLE = frozenset((Status.ERROR, Status.FAIL, Status.WARN))

# A step of a plan: the check's id, its catalogue entry, its prerequisites, and in an
# on-demand engine the section whose absence skips it (absent.SECTIONS), by name and whole.
_Step = tuple[str, CheckSpec, tuple[str, ...], str | None, tuple[str, str] | None]


class _Plan(NamedTuple):
    """What :meth:`Engine._plan` works out for a selection."""

    # Each check the run evaluates, in catalogue order (_Step).
    steps: list[_Step]
    chosen: list[str]  # the checks it reports
    # An on-demand engine's steps whose family's code is not loaded yet.
    unloaded: list[_Step]


def _left_out(facts: Facts) -> dict[str, str]:
    """The sections a live --select/--ignore run left out of ``facts``, with the reason."""
    out: dict[str, str] = {}
    for section in _LEAVABLE:
        value = getattr(facts, section)
        if isinstance(value, Unavailable) and value.reason.startswith(_LEFT_OUT):
            out[section] = value.reason
    return out


_LEAVABLE: tuple[Section, ...] = tuple(
    s for s in get_args(Section) if s not in ("platform", "bench")
)
_LEFT_OUT = f"{NOT_COLLECTED}:"


def _agree(rules: RuleData, checks: dict[str, CheckFn], families: frozenset[str] | None) -> None:
    catalogued = {i for i in rules.checks if families is None or family(i) in families}
    missing = sorted(set(checks) - catalogued)
    orphans = sorted(catalogued - set(checks))
    if missing or orphans:
        raise RuntimeError(
            f"check catalogue and code disagree: no data for {missing}, no code for {orphans}"
        )


def _result(spec: CheckSpec, outcome: Outcome) -> Result:
    # Most outcomes (a pass, a skip) name no words and show no remedy: nothing to look up.
    remedy = None
    if outcome.case is not None or outcome.command_set is not None or outcome.status in _REMEDIED:
        remedy = _remedy_of(spec, outcome)
    return Result(
        id=spec.id,
        family=_family(spec),
        status=outcome.status,
        severity=spec.severity,
        title=spec.title,
        summary=outcome.summary,
        evidence=dict(outcome.evidence),
        remedy=remedy,
    )


def _remedy_of(spec: CheckSpec, outcome: Outcome) -> Remedy | None:
    """The remedy a result of ``outcome`` shows (None but for a warning or a failure). The
    catalogue's words are looked up for every outcome that names them (a case or command set
    the catalogue lacks is a bug, whatever the status)."""
    case: RemedyText | None = None
    if outcome.case is not None:
        case = spec.cases.get(outcome.case)
        if case is None:  # a check and its catalogue entry disagree: a bug, shown as one
            raise KeyError(f"checks/catalogue.toml has no [check.cases.{outcome.case}]")
    extra: list[str] = []
    if outcome.command_set is not None:
        found = spec.command_sets.get(outcome.command_set)
        if found is None:
            raise KeyError(
                f"checks/catalogue.toml has no {outcome.command_set!r} in {spec.id}'s "
                "[check.command_sets]"
            )
        extra = found
    if outcome.status not in _REMEDIED:
        return None
    # A finding's remedy depends on its words and the values that fill them alone: a
    # fleet's nodes ask for the same few again (a Remedy is frozen; results share them as
    # the memo's results are shared).
    key = (
        spec.id,
        outcome.case,
        outcome.command_set,
        tuple(outcome.remedy_vars.items()),
        tuple(outcome.commands),
        outcome.action,
    )
    made = _REMEDIES.get(key)
    if made is not None and made[0] is spec:
        return made[1]
    remedy = _remedy(spec, case, extra, outcome)
    if len(_REMEDIES) >= _REMEDIES_MAX:
        _REMEDIES.clear()
    _REMEDIES[key] = (spec, remedy)
    return remedy


_REMEDIED = frozenset((Status.WARN, Status.FAIL))
# Each check's family by its id (CheckSpec.family splits the id on every call).
_FAMILIES: dict[str, str] = {}


def _family(spec: CheckSpec) -> str:
    found = _FAMILIES.get(spec.id)
    if found is None:
        found = _FAMILIES[spec.id] = spec.family
    return found


# Remedies made, by what made them (_result): at most _REMEDIES_MAX, then made again.
_REMEDIES: dict[tuple[object, ...], tuple[CheckSpec, Remedy | None]] = {}
_REMEDIES_MAX = 1024


def _remedy(
    spec: CheckSpec, case: RemedyText | None, extra: list[str], outcome: Outcome
) -> Remedy | None:
    """The remedy of a finding of ``spec`` (its case's words or the check's, filled)."""
    words = spec.remedy
    if case is not None:
        links = case.links or (spec.remedy.links if spec.remedy is not None else [])
        words = msgspec.structs.replace(case, links=links)
    templates = [*(words.commands if words is not None else []), *extra]
    commands = [fill(c, outcome.remedy_vars) for c in templates] + list(outcome.commands)
    action = outcome.action or (words.action if words is not None else None)
    if words is not None:
        return Remedy(
            summary=fill(words.summary, outcome.remedy_vars),
            commands=commands,
            links=list(words.links),
            action=action,
        )
    if commands or action is not None:
        return Remedy(summary="", commands=commands, action=action)
    return None
