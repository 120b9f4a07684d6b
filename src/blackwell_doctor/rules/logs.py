"""Family logs: what the runtime and kernel logs say, judged per signature group.

A finding's severity and the check that judges it are decided here (:func:`judge_findings`),
from what the facts saw (signature ids, counts, the markers of each source) and the signature
catalogue this tool ships: a capture made with an older catalogue is judged with this one.
A marker that shows Marlin was asked for makes the Marlin warning info; ``warn_at`` turns an
info signature seen that often into a warning; signatures only AMD's RCCL prints are no
finding here (REFERENCE.md §0.3); a signature with the ``autotuner-wrapped`` rule seen on an
autotuner Skipping line or inside its record (the hit's context markers) is a tactic the
autotuner skipped, counted under ``autotuner.tactic_skipped``, not a finding of its own; a
finding seen last inside the error run a source ends with (``runtime.log_ends_in_error``,
rule log-end: the process died or the log was cut there) is ``fail``, an unrecognised
error-level record then reading as an unrecognised fatal error. A finding of a rule ``xid``
signature (``kernel.xid``: the scanner keeps one per Xid number, its first line) is read
here: the number (the signature's ``xid`` group, on the excerpt) is looked up in NVIDIA's
Xid table (``checks/log_vocabulary.toml`` ``[[xid]]``); a number the table marks fatal is
the rule ``xid-fatal`` entry (``kernel.xid_fatal``), ``fail``, and the excerpt of a number
the table lists leads with it and its name (``Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE, fatal in
NVIDIA's Xid table) | line: ...``); a number the table does not list stays as it was seen.
A line of a non-fatal Xid that says it was "caused by previous Xid N" (NVRM's Xid 45, a
preemptive cleanup after an error) takes N's verdict: fail where the table marks N fatal.
A rule ``daemon-stop`` finding (a GPU daemon that shut down: nvidia-persistenced's
``Shutdown (N)``) is ``fail`` unless the same source shows the stop was ordered (its
``ordered_by`` marker: systemd's stop job for the unit) or the daemon started again after it
(its ``restarted_by`` signature, rule ``daemon-start``, seen on a later line): then ``info``.
Each check looks only at the findings whose signature names it; ``scan-logs`` reports the
same judged findings.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, get_args

import msgspec

from blackwell_doctor.facts import regexcache
from blackwell_doctor.facts.document import Facts, LogFacts, LogFinding, SkipReason
from blackwell_doctor.report.results import (
    Evidence,
    Outcome,
    Status,
    not_evaluated,
    passed,
)
from blackwell_doctor.report.results import RemedyAction as Action
from blackwell_doctor.ruledata.health import worst_action
from blackwell_doctor.ruledata.logs import (
    GENERIC_RULES,
    SEVERITY_RANK,
    Catalogue,
    InputProblem,
    LogCheck,
    LogSeverity,
    Signature,
    load_catalogue,
)
from blackwell_doctor.ruledata.rules import RuleData
from blackwell_doctor.ruledata.vocabulary import Xid, load_vocabulary
from blackwell_doctor.rules import view
from blackwell_doctor.rules.absent import NO_LOGS
from blackwell_doctor.rules.registry import check

if TYPE_CHECKING:
    from blackwell_doctor.ruledata.health import HealthData

_STATUS = {"fail": Status.FAIL, "warn": Status.WARN}
# NVRM's Xid 45 (preemptive cleanup) line names the error it cleans up after: "... caused by
# previous Xid 149". NVIDIA's Xid catalogue: Xid 45 is "preemptive cleanup, due to previous
# errors" (robust channel teardown), the consequence of the Xid it names, so the line attests
# that Xid too and takes its verdict.
_CAUSED_BY = regexcache.lazy(r"\bcaused by previous Xid (\d+)\b")
_UNREAD_NAMED = 3
# A check's summary names each signature's first finding and counts the rest; its evidence
# keeps this many findings of a signature, then counts (issue 40: a scan of thousands of
# files keeps a check's result readable; the scan's own findings list keeps them all).
EVIDENCE_PER_SIGNATURE = 5
# How a report names what a directory scan skipped (collect/logs/walk.py), one and many.
SKIPPED_WORDS: dict[SkipReason, tuple[str, str]] = {
    "vcs": ("VCS directory", "VCS directories"),
    "virtualenv": ("virtual environment", "virtual environments"),
    "cache": ("cache directory", "cache directories"),
    "pseudo-filesystem": ("pseudo filesystem", "pseudo filesystems"),
    "tool-data": ("folder of this tool's own data", "folders of this tool's own data"),
    "not-log-named": ("file not named like a log", "files not named like a log"),
    "binary": ("binary file", "binary files"),
}
# Markers (checks/log_signatures.toml [[marker]]) that make a Marlin choice deliberate.
MARLIN_MARKERS = frozenset({"marlin-requested", "w4a16-checkpoint"})
# A hit's context markers (logs/context.py) that put it inside an autotuner record.
AUTOTUNER_CONTEXT = frozenset({"autotuner-line", "autotuner-record"})


class JudgedFinding(msgspec.Struct, frozen=True, kw_only=True):
    """A log finding with the severity and the check the rules gave it, and the step it asks
    of the node (issue 39): an Xid's from NVIDIA's resolution bucket for its number
    (checks/health.toml [xid_actions]), a signature's own ``action``; None: its remedy."""

    signature: str
    severity: LogSeverity
    check: str  # the logs.* check that judges it
    path: str
    line: int
    last_line: int
    count: int
    excerpt: str
    action: Action | None = None


def judge_findings(
    logs: LogFacts, catalogue: Catalogue | None = None, *, w4a16_checkpoint: bool = False
) -> list[JudgedFinding]:
    """Every finding of ``logs`` judged with ``catalogue`` (the shipped one by default), worst
    first. A signature the catalogue does not know (a capture from a newer tool) or one that
    is no finding on an NVIDIA host (rule ``not-nvidia``) is left out. ``w4a16_checkpoint``:
    the model given with --model-dir is W4A16 (model.w4a16), so Marlin is its own kernel."""
    cat = catalogue if catalogue is not None else load_catalogue()
    markers = {s.name: set(s.markers) for s in logs.sources}
    counted = _counted(logs.findings, cat)
    # The last line per source where the engine showed it serves (rule liveness), and the
    # first line of the error run a source ends with (rule log-end).
    alive: dict[str, int] = {}
    ends: dict[str, int] = {}
    # The last line per source and rule daemon-start signature (a daemon that came back).
    started: dict[tuple[str, str], int] = {}
    for f in counted:
        entry = cat.entry(f.signature)
        if isinstance(entry, Signature) and entry.rule == "liveness":
            alive[f.path] = max(alive.get(f.path, 0), f.last_line)
        if isinstance(entry, Signature) and entry.rule == "daemon-start":
            key = (f.path, f.signature)
            started[key] = max(started.get(key, 0), f.last_line)
        if isinstance(entry, Signature) and entry.rule == "log-end":
            ends[f.path] = min(ends.get(f.path, f.line), f.line)
    out: list[JudgedFinding] = []
    for f in counted:
        entry = cat.entry(f.signature)
        if entry is None:
            continue
        severity: LogSeverity = entry.severity
        if not isinstance(entry, InputProblem):
            if entry.rule in ("not-nvidia", "liveness", "log-end", "daemon-start"):
                continue
            if entry.rule == "daemon-stop" and (
                entry.ordered_by in markers.get(f.path, set())
                or started.get((f.path, entry.restarted_by or ""), 0) > f.last_line
            ):
                severity = "info"  # a stop job ordered it, or the daemon started again after
            if entry.rule in GENERIC_RULES and alive.get(f.path, 0) > f.last_line:
                severity = "info"  # the engine served after its last error: survived
            if entry.rule == "marlin-requested" and (
                w4a16_checkpoint or markers.get(f.path, set()) & MARLIN_MARKERS
            ):
                severity = "info"
            often = entry.warn_at is not None and f.count >= entry.warn_at
            if often and SEVERITY_RANK[severity] < SEVERITY_RANK["warn"]:
                severity = "warn"
            if f.path in ends and f.last_line >= ends[f.path]:
                severity = "fail"  # seen last where the log ends in an error: not survived
        seen = msgspec.structs.asdict(f)
        del seen["context"]
        action = entry.action if isinstance(entry, Signature) else None
        out.append(JudgedFinding(**seen, severity=severity, check=entry.check, action=action))
    xids = load_vocabulary().xids
    out = [_read_xid(j, cat, xids) for j in out]
    out = [_as_fatal(j, cat) for j in _known_wins(out, cat)]
    out.sort(key=lambda j: (-SEVERITY_RANK[j.severity], j.signature, j.path, j.line))
    return out


def _generic(signature: str, cat: Catalogue) -> str | None:
    entry = cat.entry(signature)
    if isinstance(entry, Signature) and entry.rule in GENERIC_RULES:
        return entry.rule
    return None


def _as_fatal(judged: JudgedFinding, cat: Catalogue) -> JudgedFinding:
    """An unrecognised error-level record judged fail (the log ends in it: rule log-end) is
    an unrecognised fatal error, and reads as one (its meaning and remedy)."""
    if judged.severity != "fail" or _generic(judged.signature, cat) != "unrecognised-error":
        return judged
    fatal = next((s.id for s in cat.signatures if s.rule == "unrecognised-fatal"), None)
    return judged if fatal is None else msgspec.structs.replace(judged, signature=fatal)


def _read_xid(judged: JudgedFinding, cat: Catalogue, xids: dict[int, Xid]) -> JudgedFinding:
    """A finding whose signature names an Xid number (an ``xid`` group in its regex, read on
    the excerpt) read in NVIDIA's Xid table: the number's name and NVIDIA's immediate action
    lead the excerpt, and the finding asks the step that action calls for (issue 39:
    checks/health.toml [xid_actions]). A rule ``xid`` finding is the rule ``xid-fatal``
    entry, ``fail``, where the table marks it fatal. A number the table does not list, or
    an excerpt the regex no longer finds it in, is left as is."""
    entry = cat.entry(judged.signature)
    if not isinstance(entry, Signature) or not entry.regex or "(?P<xid>" not in entry.regex:
        return judged
    match = regexcache.compile(entry.regex).search(judged.excerpt)
    xid = xids.get(int(match.group("xid"))) if match is not None else None
    if xid is None:
        return judged
    from blackwell_doctor.ruledata.health import load_health_data  # only with an Xid

    health = load_health_data()
    fatal = next((s.id for s in cat.signatures if s.rule == "xid-fatal"), None)
    cause = _CAUSED_BY().search(judged.excerpt)
    before = xids.get(int(cause.group(1))) if cause is not None else None
    if entry.rule == "xid" and not xid.fatal and before is not None and before.fatal and fatal:
        excerpt = (
            f"Xid {xid.number} ({xid.name}) caused by Xid {before.number} ({before.name}, fatal "
            f"in NVIDIA's Xid table; {_action_words(before, health)}) | line: {judged.excerpt}"
        )
        return msgspec.structs.replace(
            judged,
            signature=fatal,
            severity="fail",
            excerpt=excerpt,
            action=_worst_action(health.xid_action(before.action), judged.action),
        )
    action = _worst_action(health.xid_action(xid.action), judged.action)
    words = _action_words(xid, health)
    if entry.rule != "xid" or not xid.fatal or fatal is None:
        excerpt = f"Xid {xid.number} ({xid.name}; {words}) | line: {judged.excerpt}"
        return msgspec.structs.replace(judged, excerpt=excerpt, action=action)
    excerpt = (
        f"Xid {xid.number} ({xid.name}, fatal in NVIDIA's Xid table; {words}) | line: "
        f"{judged.excerpt}"
    )
    return msgspec.structs.replace(
        judged, signature=fatal, severity="fail", excerpt=excerpt, action=action
    )


def _action_words(xid: Xid, health: HealthData) -> str:
    """``NVIDIA's action RESET_GPU: reset the GPU``."""
    step = health.xid_action(xid.action) if xid.action else None
    what = health.action_words.get(step or "none", "")
    bucket = xid.action or "none given"
    return f"NVIDIA's action {bucket}: {what}" if what else f"NVIDIA's action {bucket}"


def _worst_action(a: Action | None, b: Action | None) -> Action | None:
    return worst_action((a, b))


def _known_wins(judged: list[JudgedFinding], cat: Catalogue) -> list[JudgedFinding]:
    """The generic detector speaks only where the catalogue is silent: an unrecognised error
    is left out where the same source has a known finding at least as severe (its meaning
    and remedy are the better story), and an unrecognised error-level record where the
    same source has an unrecognised fatal error (that is the story)."""
    worst_known: dict[str, int] = {}
    fatal: set[str] = set()
    for j in judged:
        rule = _generic(j.signature, cat)
        if rule is None:
            rank = SEVERITY_RANK[j.severity]
            worst_known[j.path] = max(worst_known.get(j.path, -1), rank)
        elif rule == "unrecognised-fatal":
            fatal.add(j.path)
    kept: list[JudgedFinding] = []
    for j in judged:
        rule = _generic(j.signature, cat)
        if rule is not None:
            if worst_known.get(j.path, -1) >= SEVERITY_RANK[j.severity]:
                continue
            if rule == "unrecognised-error" and j.path in fatal:
                continue
        kept.append(j)
    return kept


def _counted(findings: list[LogFinding], cat: Catalogue) -> list[LogFinding]:
    """The findings that count, one per signature and source: hits of an
    ``autotuner-wrapped`` signature inside an autotuner record left out (the Skipping line
    is counted under autotuner.tactic_skipped), the other contexts of a signature merged
    (counts added, first and last lines and the first excerpt kept)."""
    # One source gives at most one finding per signature and context: a second finding of
    # the same signature, path and context is another source of the same name (a file
    # given twice), kept apart.
    groups: list[tuple[LogFinding, set[tuple[str, ...]]]] = []
    open_groups: dict[tuple[str, str], list[int]] = {}
    for f in findings:
        entry = cat.entry(f.signature)
        if (
            isinstance(entry, Signature)
            and (entry.rule == "autotuner-wrapped" or entry.rule in GENERIC_RULES)
            and AUTOTUNER_CONTEXT.intersection(f.context)
        ):
            continue
        where = tuple(f.context)
        candidates = open_groups.setdefault((f.signature, f.path), [])
        at = next((i for i in candidates if where not in groups[i][1]), None)
        if at is None:
            candidates.append(len(groups))
            groups.append((f, {where}))
            continue
        prior, seen = groups[at]
        first = prior if prior.line <= f.line else f
        merged = msgspec.structs.replace(
            first,
            last_line=max(prior.last_line, f.last_line),
            count=prior.count + f.count,
            context=sorted(set(prior.context) | set(f.context)),
        )
        groups[at] = (merged, seen | {where})
    return [f for f, _ in groups]


_COMMAND_WORDS = frozenset(
    {"pip", "pip3", "python", "python3", "vllm", "sglang", "sudo", "export", "docker", "uv"}
    | {"nvidia-smi", "nvidia-ctk", "journalctl", "dmesg", "setpci", "blackwell-doctor"}
)


# VAR=value: a command's environment (the start of a step), or a whole step of it alone.
_ASSIGNMENT = regexcache.lazy(r"[A-Z][A-Z0-9_]*=\S")
_BARE_ASSIGNMENT = regexcache.lazy(r"[A-Z][A-Z0-9_]*=\S+$")


def _is_command(text: str) -> bool:
    first = text.split(maxsplit=1)[0] if text.strip() else ""
    return first in _COMMAND_WORDS or bool(_ASSIGNMENT().match(text))


def split_steps(steps: list[str]) -> tuple[list[str], list[str]]:
    """Remedy steps as (prose, commands): "Upgrade FlashInfer: pip install -U x" is the
    sentence "Upgrade FlashInfer" and the command "pip install -U x"."""
    prose: list[str] = []
    commands: list[str] = []
    for step in steps:
        head, sep, tail = step.partition(": ")
        if sep and _is_command(tail):
            prose.append(_sentence(head))
            commands.append(_pasteable(tail))
        elif _is_command(step):
            commands.append(_pasteable(step))
        else:
            prose.append(_sentence(step))
    return prose, commands


def _sentence(text: str) -> str:
    text = text.strip()
    return text if text.endswith((".", "!", "?", ")")) and not text.endswith(" )") else text + "."


def _pasteable(command: str) -> str:
    # A bare VAR=value on its own line sets nothing for the next command: export it.
    return f"export {command}" if _BARE_ASSIGNMENT().match(command) else command


def _signature_advice(signature: str) -> tuple[str, list[str]]:
    """(what it means and what to do, commands) from checks/log_signatures.toml."""
    entry = load_catalogue().entry(signature)
    meaning, steps = (entry.meaning, list(entry.remedy)) if entry is not None else ("", [])
    prose, commands = split_steps(steps)
    return " ".join([meaning, *prose]).strip(), commands


def judge(check_id: str, facts: Facts, advice: Callable[[str], tuple[str, list[str]]]) -> Outcome:
    logs = view.section(facts.logs, NO_LOGS, "logs could not be read: {reason}")
    if isinstance(logs, Outcome):
        return logs
    # A W4A16 checkpoint (model.w4a16): Marlin is its kernel, not a fallback.
    judged = judge_findings(logs, w4a16_checkpoint=view.marlin_expected(facts))
    mine = [f for f in judged if f.check == check_id]
    evidence = _evidence(mine)
    if check_id == "logs.inputs" and logs.skipped:
        evidence["skipped in directories"] = skipped_words(logs.skipped)
    unread = [f"{s.name} ({s.error})" for s in logs.sources if s.error and not s.lines]
    worst = _worst(mine)
    if worst is not None:
        bad = [f for f in mine if _STATUS.get(f.severity) is worst]
        texts: list[str] = []
        commands: list[str] = []
        for f in bad:
            how, cmds = advice(f.signature)
            if how not in texts:
                texts.append(how)
            commands += [c for c in cmds if c not in commands]
        return Outcome(
            status=worst,
            summary=_summary(bad),
            evidence=evidence,
            remedy_vars={"how": " ".join(texts)},
            commands=commands,
            action=worst_action(f.action for f in bad),
        )
    if unread and len(unread) == len(logs.sources):
        return not_evaluated("no log could be read: " + ", ".join(unread), **evidence)
    scanned = sum(s.lines for s in logs.sources)
    summary = f"no signature of this kind in {scanned:,} lines from {len(logs.sources)} source(s)"
    if mine:
        summary = f"only informational signatures ({len(mine)}) in {scanned:,} lines"
    if unread:
        # Named up to a few, then counted (logs.inputs lists them all): a scan of thousands
        # of files keeps one line per check.
        more = f" and {len(unread) - _UNREAD_NAMED} more" if len(unread) > _UNREAD_NAMED else ""
        summary += "; unreadable: " + ", ".join(unread[:_UNREAD_NAMED]) + more
    if check_id == "logs.inputs" and logs.skipped:
        summary += "; skipped in directories: " + skipped_words(logs.skipped)
    return passed(summary, **evidence)


def skipped_words(skipped: dict[SkipReason, int]) -> str:
    """``"1 virtual environment, 2 VCS directories, 310 files not named like a log"``."""
    parts = []
    for reason, (one, many) in SKIPPED_WORDS.items():
        n = skipped.get(reason, 0)
        if n:
            parts.append(f"{n:,} {one if n == 1 else many}")
    return ", ".join(parts)


def _by_signature(findings: list[JudgedFinding]) -> dict[str, list[JudgedFinding]]:
    groups: dict[str, list[JudgedFinding]] = {}
    for f in findings:
        groups.setdefault(f.signature, []).append(f)
    return groups


def _more(rest: list[JudgedFinding]) -> str:
    """``"9 more finding(s), 14x in 9 source(s)"``: findings of one signature left unnamed."""
    sources = len({f.path for f in rest})
    occurrences = sum(f.count for f in rest)
    return f"{len(rest):,} more finding(s), {occurrences:,}x in {sources:,} source(s)"


def _summary(bad: list[JudgedFinding]) -> str:
    """One item per signature, its first finding: ``sig (Nx, first at PATH:LINE)``, and the
    rest of its findings counted (``; 9 more finding(s), 14x in 9 source(s)``)."""
    parts: list[str] = []
    for hits in _by_signature(bad).values():
        f = hits[0]
        more = f"; {_more(hits[1:])}" if len(hits) > 1 else ""
        parts.append(f"{f.signature} ({f.count}x, first at {f.path}:{f.line}{more})")
    return "; ".join(parts)


def _evidence(mine: list[JudgedFinding]) -> Evidence:
    """Each finding's first line, at most :data:`EVIDENCE_PER_SIGNATURE` per signature,
    the rest of a signature counted under ``SIG: more``."""
    evidence: Evidence = {}
    for sig, hits in _by_signature(mine).items():
        for f in hits[:EVIDENCE_PER_SIGNATURE]:
            # Two findings of one signature and count (two Xid numbers, a file given twice)
            # each keep their line.
            key = f"{f.signature} x{f.count}"
            key = f"{key} at {f.path}:{f.line}" if key in evidence else key
            evidence[key] = f"{f.path}:{f.line}: {f.excerpt}"
        if len(hits) > EVIDENCE_PER_SIGNATURE:
            evidence[f"{sig}: more"] = _more(hits[EVIDENCE_PER_SIGNATURE:])
    return evidence


def _worst(findings: list[JudgedFinding]) -> Status | None:
    if any(f.severity == "fail" for f in findings):
        return Status.FAIL
    if any(f.severity == "warn" for f in findings):
        return Status.WARN
    return None


def _register(check_id: str) -> None:
    def run(facts: Facts, rules: RuleData) -> Outcome:
        return judge(check_id, facts, _signature_advice)

    # The model: a W4A16 checkpoint makes Marlin expected (view.marlin_expected).
    check(check_id, reads=("logs", "model"))(run)


# One list of logs checks: the catalogue's LogCheck (a signature may only name these).
for _id in get_args(LogCheck):
    _register(_id)
