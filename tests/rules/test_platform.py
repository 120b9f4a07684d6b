"""Family platform: native Linux, not WSL."""

from __future__ import annotations

from blackwell_doctor.facts.document import Unavailable, WslFacts
from blackwell_doctor.report.results import Status
from tests.factsutil import load, replace, result, status


def test_wsl1_fails_and_native_passes() -> None:
    facts = load("rtx5090-wsl2")
    wsl1 = replace(facts, platform=replace(facts.platform, wsl=WslFacts(kind="wsl1")))
    assert status(wsl1, "platform.wsl") is Status.FAIL
    native = replace(facts, platform=replace(facts.platform, wsl=WslFacts(kind="none")))
    assert status(native, "platform.wsl") is Status.PASS


def test_wsl_unknown_when_kernel_strings_are_unreadable_is_not_evaluated() -> None:
    facts = load("sm120-driver580")
    platform = replace(
        facts.platform,
        wsl=WslFacts(kind="unknown"),
        kernel_version=Unavailable("permission-denied:/proc/version"),
        kernel_release=Unavailable("permission-denied:/proc/sys/kernel/osrelease"),
    )
    r = result(replace(facts, platform=platform), "platform.wsl")
    assert r.status is Status.ERROR
    assert "permission-denied:/proc/version" in r.summary
