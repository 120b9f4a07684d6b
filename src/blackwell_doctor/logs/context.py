"""Context rules: the same line means different things in different places (REFERENCE §0.3).

- ``autotuner-wrapped``: ``Failed to initialize cutlass TMA WS grouped gemm`` (and the other
  MoE tactic failures) inside FlashInfer/TRT-LLM's ``[Autotuner]: Skipping tactic ... due to
  failure while profiling: ...`` is one skipped tactic. It is counted once, under
  ``autotuner.tactic_skipped`` (info; warn from its ``warn_at`` count), and not as a failure.
  "Inside" means on the Skipping line itself, or within :data:`AUTOTUNER_WINDOW_LINES` after
  one (the exception text may continue on the next lines). Anywhere else it is ``fail``.
- ``autotuner-summary``: FlashInfer >= 0.6.8 logs each failure at DEBUG and one INFO line
  ``[Autotuner]: Skipped N unsupported tactic(s) for <op>``; the finding's count is the sum
  of N, and ``warn_at`` applies to it.
- ``marlin-requested``: vLLM choosing Marlin for NVFP4 is a slow-path warning unless the same
  source shows it was asked for (``moe_backend='marlin'``, ``--moe-backend marlin``) or the
  checkpoint is W4A16 (weight-only: Marlin is the right kernel); then it is info.
- ``not-nvidia``: lines only AMD's RCCL prints (``NCCL WARN Missing "iommu=pt" ...``) are
  recognised and dropped: they are no finding on an NVIDIA host.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from blackwell_doctor.facts import LogFinding
from blackwell_doctor.logs.catalogue import SEVERITY_RANK

if TYPE_CHECKING:
    from blackwell_doctor.logs.matcher import SourceScanner

AUTOTUNER_SKIPPED = "autotuner.tactic_skipped"
AUTOTUNER_WRAPPER = "[Autotuner]: Skipping tactic"
AUTOTUNER_WINDOW_LINES = 3
MARLIN_MARKERS = frozenset({"marlin-requested", "w4a16-checkpoint"})


def inside_autotuner(scanner: SourceScanner, text: str, line: int) -> bool:
    if AUTOTUNER_WRAPPER in text:
        return True
    return 0 <= line - scanner.last_autotuner_line <= AUTOTUNER_WINDOW_LINES


def judge(scanner: SourceScanner) -> list[LogFinding]:
    """The findings of one source once it has been read to the end."""
    out: list[LogFinding] = []
    signatures = scanner.catalogue.signatures
    for n, occ in sorted(scanner.occurrences.items(), key=lambda kv: kv[1].first_line):
        sig = signatures[n]
        if sig.rule == "not-nvidia":
            continue
        severity = sig.severity
        count = occ.n_sum if sig.rule == "autotuner-summary" else occ.count
        if sig.rule == "marlin-requested" and scanner.markers & MARLIN_MARKERS:
            severity = "info"
        if sig.warn_at is not None and count >= sig.warn_at and SEVERITY_RANK[severity] < 1:
            severity = "warn"
        out.append(
            LogFinding(
                signature=sig.id,
                severity=severity,
                check=sig.check,
                path=scanner.name,
                line=occ.first_line,
                last_line=occ.last_line,
                count=count,
                excerpt=occ.excerpt,
            )
        )
    return out
