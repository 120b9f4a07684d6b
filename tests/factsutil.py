"""Helpers for tests that derive variants from the realistic facts fixtures."""

from __future__ import annotations

from typing import Any

import msgspec

from blackwell_doctor.facts.document import Facts, P2PProbeFacts, P2PTransfer, decode_facts
from blackwell_doctor.report.results import Result, Status
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.p2p import pair_verdict
from tests.conftest import FACTS_FIXTURES


def load(name: str) -> Facts:
    return decode_facts((FACTS_FIXTURES / f"{name}.json").read_bytes(), source=name)


def replace(obj: Any, **changes: Any) -> Any:
    return msgspec.structs.replace(obj, **changes)


def result(facts: Facts, check_id: str) -> Result:
    report = evaluate(facts, select=[check_id])
    [found] = [r for r in report.results if r.id == check_id]
    return found


def status(facts: Facts, check_id: str) -> Status:
    return result(facts, check_id).status


class Judged:
    """A tested GPU pair's facts with the verdict the rules give them (p2p.transfer), for
    assertions: ``.verdict`` and ``.detail`` are the rules', the rest the facts'."""

    def __init__(self, transfer: P2PTransfer) -> None:
        self.transfer = transfer
        judged = pair_verdict(transfer)
        self.verdict: str = judged.verdict
        self.detail: str | None = judged.detail

    def __getattr__(self, name: str) -> Any:
        return getattr(self.transfer, name)

    def __repr__(self) -> str:
        return f"Judged({self.verdict}, {self.detail}, {self.transfer})"


def judged(facts: P2PProbeFacts) -> list[Judged]:
    return [Judged(p) for p in facts.pairs]


def made_pair(
    a: int, b: int, verdict: str, detail: str | None = None, *, uni: float | None = None
) -> P2PTransfer:
    """A tested pair whose measurements give ``verdict`` under the shipped rules (``detail``:
    the fault or error seen, for the verdicts that have one)."""
    if verdict == "not-supported":
        return P2PTransfer(gpu_a=a, gpu_b=b, can_access_peer=False)
    ok = verdict in ("works", "slower-than-host")
    measured = verdict != "error"
    return P2PTransfer(
        gpu_a=a,
        gpu_b=b,
        can_access_peer=True,
        peer_copy_verified=ok if measured else None,
        peer_write_verified=ok if measured else None,
        after_load_verified=ok if measured else None,
        unidirectional_gbps=uni if uni is not None else (50.0 if verdict == "works" else 8.0),
        bidirectional_gbps=95.0 if verdict == "works" else 12.0,
        host_staged_gbps=20.0,
        direction=f"{a}->{b}",
        fault=(detail or "p2p-timeout:20s at copy") if verdict == "granted-but-broken" else None,
        error=(detail or "cuda-error-out-of-memory at buffers") if verdict == "error" else None,
    )
