"""Process exit codes: a contract with CI users, documented in the README, never renumbered."""

from __future__ import annotations

import enum


class ExitCode(enum.IntEnum):
    OK = 0  # nothing at or above the --fail-on gate
    FINDINGS = 1  # findings at or above --fail-on
    USAGE = 2  # bad flags, malformed facts, unreadable input
    NOT_EVALUATED = 3  # --strict and some check could not be evaluated
    INTERNAL = 4  # a bug in blackwell-doctor; a crash log path is printed
    APPLY_FAILED = 5  # apply or its verification failed (what was rolled back is said)
    INTERRUPTED = 130  # Ctrl-C
