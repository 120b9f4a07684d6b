"""The host mount a containerised run lacks: one place that maps an unreadable host path in
a result's reasons to the mount to add (checks/host_mounts.toml), for every check's
"not evaluated" (and failing) outcome (issue 37).

A collector's failed read is a reason token ``<kind>:<target>`` (collect/hostfs.py
``_reason``, collect/logs/sources.py ``os_reason``, ``command_chunks`` and
``_docker_reason``); the kinds below are theirs that mean "could not be read" (a timeout or
an API's status code is not a missing mount). A path read through the host root
(``under_root``) names its mount only when hostfs said ``not-mounted`` (its top-level
directory is not there): ``not-found`` on a mounted /sys is the host's answer (no module
loaded, no AER counters), and ``permission-denied`` wants root, not a mount. The engine
calls :func:`name_mounts` on each result; only facts read in a container or through a host
root other than "/" are touched, so a host's report is unchanged.
"""

from __future__ import annotations

import msgspec

from blackwell_doctor.facts import regexcache
from blackwell_doctor.facts.document import Facts
from blackwell_doctor.report.results import Remedy, Result, Status
from blackwell_doctor.ruledata.mounts import HostMount, HostMounts
from blackwell_doctor.ruledata.rules import RuleData, fill

# <kind>:<target>, the target a host path (not a URL's "//"), a container log's label, or
# the journal's command.
_UNREADABLE = regexcache.lazy(
    r"(?<![\w-])(not-mounted|not-found|permission-denied|os-error-[a-z0-9]+|"
    r"not-a-regular-file|docker-engine-unreachable):"
    r"(/(?!/)[^\s;,()]*|container:[^\s;,()]+|journalctl\b)"
)
NOT_MOUNTED = "not-mounted"


def in_container(facts: Facts) -> bool:
    return facts.platform.container.in_container or facts.host_root != "/"


def unreadable_targets(result: Result) -> list[tuple[str, str]]:
    """The unreadable paths (and labels) named in ``result``'s summary and evidence, each
    with the kind of its reason, in order of first mention."""
    texts = [result.summary]
    for value in result.evidence.values():
        if isinstance(value, str):
            texts.append(value)
        elif isinstance(value, list):
            texts.extend(value)
    seen: dict[tuple[str, str], None] = {}
    for text in texts:
        for match in _UNREADABLE().finditer(text):
            seen.setdefault((match.group(1), match.group(2).rstrip(".:")), None)
    return list(seen)


def mount_summary(data: HostMounts, host_root: str, targets: list[tuple[str, str]]) -> str | None:
    """The words that name the mounts for ``targets``, (kind, path) pairs (None: no entry
    covers any that a mount would make readable)."""
    mounts: dict[str, tuple[HostMount, list[str]]] = {}
    for kind, target in targets:
        entry = data.find(target)
        if entry is None or (entry.under_root and kind != NOT_MOUNTED):
            continue
        paths = mounts.setdefault(entry.prefix, (entry, []))[1]
        if target not in paths:
            paths.append(target)
    if not mounts:
        return None
    root = data.default_root if host_root == "/" else host_root.rstrip("/")
    values = {"root": root}
    chosen = [entry for entry, _ in mounts.values()]
    docker = [fill(m.docker, values) for m in chosen]
    if host_root == "/" and any(m.under_root for m in chosen):
        docker.append(fill(data.words.host_root, values))
    sep = data.words.separator
    return fill(
        data.words.summary,
        {
            "paths": ", ".join(t for _, paths in mounts.values() for t in paths),
            "reads": sep.join(m.reads for m in chosen),
            "docker": " ".join(docker),
            # The DaemonSet mounts the host at default_root whatever root these facts had.
            "kubernetes": sep.join(fill(m.kubernetes, {"root": data.default_root}) for m in chosen),
        },
    )


def name_mounts(result: Result, facts: Facts, rules: RuleData) -> Result:
    """``result`` with the host mount it lacks named in its remedy: a "not evaluated" gets
    one, a finding's gains the sentence. Unchanged outside a container, for other statuses,
    and where no unreadable host path is named."""
    if result.status not in (Status.ERROR, Status.FAIL, Status.WARN) or not in_container(facts):
        return result
    targets = unreadable_targets(result)
    if not targets:
        return result
    words = mount_summary(rules.host_mounts, facts.host_root, targets)
    if words is None:
        return result
    if result.remedy is None:
        remedy = Remedy(summary=words)
    else:
        joined = f"{result.remedy.summary} {words}" if result.remedy.summary else words
        remedy = msgspec.structs.replace(result.remedy, summary=joined)
    return msgspec.structs.replace(result, remedy=remedy)
