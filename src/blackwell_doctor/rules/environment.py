"""What differs between two bench runs' pinned environments besides the change measured
(issue 21, seed checklist step 1), and whether the change is confounded: with more than
one recorded difference, no difference in the figures can be attributed to one of them.
The sentences are checks/bench_env.toml's (its header cites the source)."""

from __future__ import annotations

import functools

import msgspec

from blackwell_doctor.report.bench_env import (
    HASH,
    SERVER_ARGS,
    SERVER_CONFIG,
    EnvChange,
    Environment,
    EnvironmentComparison,
    flatten,
    section_of,
    sections,
)
from blackwell_doctor.ruledata.checkdata import load_shipped
from blackwell_doctor.ruledata.rules import fill

SAME = "same"
ONE = "one difference"
CONFOUNDED = "confounded"
NOT_PINNED = "not pinned"
# A key a side recorded the section of but not the key itself (an unset variable, a label
# the other build does not have).
UNSET = "(not set)"
_UNKNOWN_SHOWN = 5


class _Words(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    same: str
    one_difference: str
    confounded: str
    not_pinned: str
    unknown: str
    derived: str


class _Catalogue(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    words: _Words


@functools.cache
def words() -> _Words:
    """checks/bench_env.toml's sentences."""
    return load_shipped("bench_env.toml", _Catalogue).words


def compare_environments(
    before: Environment | None, after: Environment | None
) -> EnvironmentComparison:
    """Every key both runs recorded with different values (a key missing from a side that
    recorded its section is unset there), the keys only one side could tell, and the
    verdict with its sentences."""
    w = words()
    fb, fa = flatten(before), flatten(after)
    sb, sa = sections(before), sections(after)
    differences: list[EnvChange] = []
    unknown: list[str] = []
    for key in sorted(set(fb) | set(fa)):
        vb, va = fb.get(key), fa.get(key)
        if vb == va:
            continue
        section = section_of(key)
        if vb is None and section in sb:
            vb = UNSET
        if va is None and section in sa:
            va = UNSET
        if vb is None or va is None:
            unknown.append(key)
        else:
            differences.append(EnvChange(key=key, before=vb, after=va))
    notes: list[str] = []
    # The config hash and the configuration the server reports follow from its launch
    # arguments: where those differ, the rows derived from them are shown, not counted as
    # causes of their own (one flag changed is one difference, not "confounded" with the
    # hash it changed).
    counted = differences
    if any(section_of(c.key) == SERVER_ARGS for c in differences):
        counted = [c for c in differences if section_of(c.key) not in (HASH, SERVER_CONFIG)]
        derived = [c.key for c in differences if c not in counted]
        if derived:
            notes.append(fill(w.derived, {"keys": ", ".join(derived)}))
    missing = [side for side, env in (("before", before), ("after", after)) if env is None]
    for side in missing:
        notes.append(fill(w.not_pinned, {"side": side}))
    if missing:
        verdict = NOT_PINNED
    elif not counted:
        verdict = SAME
        notes.append(w.same)
    elif len(counted) == 1:
        verdict = ONE
        change = counted[0]
        notes.append(
            fill(w.one_difference, {"change": f"{change.key}: {change.before} -> {change.after}"})
        )
    else:
        verdict = CONFOUNDED
        notes.append(fill(w.confounded, {"count": str(len(counted))}))
    if unknown and not missing:
        shown = ", ".join(unknown[:_UNKNOWN_SHOWN]) + (
            f" and {len(unknown) - _UNKNOWN_SHOWN} more" if len(unknown) > _UNKNOWN_SHOWN else ""
        )
        notes.append(fill(w.unknown, {"count": str(len(unknown)), "keys": shown}))
    return EnvironmentComparison(
        verdict=verdict, differences=differences, unknown=unknown, notes=notes
    )
