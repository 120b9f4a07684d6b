"""Words with which a person dismisses a log message in prose ("this warning can be safely
ignored"): the rule in :mod:`blackwell_doctor.collect.logs.context`. Runtime messages do not
say these: NCCL's "You can repress this message ...", vLLM's "To silence this warning ..."
and llama.cpp's "--gpu-layers option will be ignored" match none of them. Kept apart (no
imports) so that the catalogue can number the literals and the context rules can use the
pattern without an import cycle."""

from __future__ import annotations

import re

from blackwell_doctor.facts import regexcache

# Exact, lower-case texts: a line holding one is read and tested with DISMISSAL below.
LITERALS: tuple[str, ...] = (
    "be ignored",
    "be safely ignored",
    "safe to ignore",
    "safely ignore",
    "is harmless",
    "are harmless",
    "is benign",
    "are benign",
    "is expected",
    "are expected",
    "is normal",
    "nothing to worry",
    "don't worry",
    "ignore this warning",
    "ignore the warning",
    "ignore these warnings",
    "no impact on",
)

# The patterns (``DISMISSAL``, ``DEICTIC``) compile when first used (module __getattr__): a
# log with no dismissal literal never needs them (start-up: docs/performance.md).
_SOURCES = {
    "DISMISSAL": (
        # ("will be ignored" is a program saying what it does with an option: llama.cpp
        # common/arg.cpp "--gpu-layers option will be ignored"; a person says "can be")
        r"\b(?:can|could|may|should)\s+(?:\w+\s+)?(?:be\s+)?(?:safely\s+)?ignored\b"
        r"|\bsafe(?:ly)?\s+(?:to\s+)?ignore\b"
        r"|\b(?:is|are|was|were|seems?|looks?)\s+[*_]*(?:completely\s+|totally\s+|perfectly\s+|just\s+)?"
        r"(?:harmless|benign|expected|normal)\b"
        r"|\bnothing\s+to\s+worry\b|\bdon'?t\s+worry\b|\bno\s+impact\s+on\b"
        r"|\bignore\s+(?:this|the|that|these|those)\s+(?:warnings?|messages?|lines?|errors?)\b"
    ),
    # A dismissal on its own line refers back to the message: "This warning ...", "the
    # error above", "it is expected".
    "DEICTIC": (
        r"\b(?:this|that|these|those|the|above)\s+(?:\w+\s+)?(?:warnings?|messages?|errors?|lines?|logs?)\b"
        r"|^\W*(?:it|they)\b"
    ),
}


def __getattr__(name: str) -> re.Pattern[str]:
    if name not in _SOURCES:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    pattern = regexcache.compile(_SOURCES[name], re.IGNORECASE)
    globals()[name] = pattern
    return pattern
