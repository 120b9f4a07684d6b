"""checks/health.toml: what the health.* checks judge with, and the node verdict's ladder
(issue 39)."""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools
from collections.abc import Iterable
from typing import Literal, get_args

import msgspec

from blackwell_doctor.report.results import RemedyAction as Action
from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped

# The steps a finding asks of the node, smallest first (the order of the ladder).
ACTIONS: tuple[Action, ...] = get_args(Action)
# What a finding with that step makes of the node (a finding with no step: "degraded").
Verdict = Literal["healthy", "degraded", "needs-reset", "needs-reboot", "needs-service"]
VERDICTS: tuple[Verdict, ...] = (
    "healthy",
    "degraded",
    "needs-reset",
    "needs-reboot",
    "needs-service",
)
VERDICT_OF: dict[Action, Verdict] = {
    "restart-app": "degraded",
    "reset-gpu": "needs-reset",
    "reboot": "needs-reboot",
    "service": "needs-service",
}


def worst_action(actions: Iterable[Action | None]) -> Action | None:
    """The largest step of ``actions`` in the ladder's order (None: none asks one)."""
    ranked = [ACTIONS.index(a) for a in actions if a is not None]
    return ACTIONS[max(ranked)] if ranked else None


ReasonKind = Literal["idle", "setting", "power-cap", "hardware", "software-thermal"]


class ClockReason(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    bit: int
    name: str
    kind: ReasonKind
    words: str


class ClockData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: str
    reasons: list[ClockReason]

    def named(self, mask: int) -> list[ClockReason]:
        """The reasons whose bit is set in ``mask``, in bit order."""
        return [r for r in self.reasons if mask & r.bit]

    def unknown_bits(self, mask: int) -> int:
        known = 0
        for r in self.reasons:
            known |= r.bit
        return mask & ~known


class ThermalData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    warn_margin_c: int
    source: str


class PowerData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    below_default_mw: int
    source: str


class MemoryData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    retired_pages_limit: int
    source: str


class RecoveryAction(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    code: int
    name: str
    action: Action | Literal["none"]


class RecoveryData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    source: str
    actions: list[RecoveryAction]

    def find(self, code: int) -> RecoveryAction | None:
        return next((a for a in self.actions if a.code == code), None)


class HealthData(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    clocks: ClockData
    thermal: ThermalData
    power: PowerData
    memory: MemoryData
    recovery: RecoveryData
    # NVIDIA's Xid resolution bucket (checks/log_vocabulary.toml [[xid]] action) -> step.
    xid_actions: dict[str, Action | Literal["none"]]
    # How each step reads beside an Xid ("none" too).
    action_words: dict[str, str]
    # Words per step ("degraded" and "healthy" too), {checks} filled by the verdict.
    ladder: dict[str, str]

    def xid_action(self, bucket: str) -> Action | None:
        """The step an Xid's bucket asks for; a bucket the table lacks asks for service
        (NVSentinel's default, CONTACT_SUPPORT): never silently nothing."""
        got = self.xid_actions.get(bucket.strip(), "service")
        return None if got == "none" else got


@functools.cache
def load_health_data() -> HealthData:
    data = load_shipped("health.toml", HealthData)
    missing = sorted({"degraded", "healthy", *ACTIONS} - set(data.ladder))
    if missing:
        raise CatalogueError(f"checks/health.toml: [ladder] lacks {missing}")
    missing = sorted({"none", *ACTIONS} - set(data.action_words))
    if missing:
        raise CatalogueError(f"checks/health.toml: [action_words] lacks {missing}")
    return data
