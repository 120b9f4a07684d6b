"""kernel.xid read in NVIDIA's Xid table (checks/log_vocabulary.toml [[xid]]; issue 33).

Every line here is COMPOSED: no public log was copied. The formats are the kernel log's
``NVRM: Xid (PCI:<bus id>): <number>, pid=<pid>, name=<process>, <message>`` as NVIDIA's Xid
catalogue describes it (https://docs.nvidia.com/deploy/xid-errors/), under a dmesg prefix
(``[  123.456] ``), a journald short prefix (``Nov 28 12:00:00 host kernel: ``) and the
newer drivers' form with the process named (``pid=1234, name=python, ...``).
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.facts.document import LogFacts
from blackwell_doctor.report.results import Status
from blackwell_doctor.ruledata.vocabulary import load_vocabulary
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings
from tests.factsutil import load, replace, result

DMESG_79 = (
    "[  123.456] NVRM: Xid (PCI:0000:01:00): 79, pid=2211, name=python3, "
    "GPU has fallen off the bus."
)
JOURNALD_48 = (
    "Nov 28 12:00:00 host kernel: NVRM: Xid (PCI:0000:3b:00): 48, pid='<unknown>', "
    "name=<unknown>, An uncorrectable double bit error (DBE) has been detected on GPU in the "
    "framebuffer at partition 0, subpartition 0."
)
NEWER_13 = (
    "Nov 28 12:00:01 host kernel: NVRM: Xid (PCI:0000:01:00): 13, pid=1234, name=python, "
    "Graphics SM Warp Exception on (GPC 0, TPC 1, SM 0): Out Of Range Address"
)
DMESG_63 = (
    "[ 4125.378] NVRM: Xid (PCI:0000:3b:00): 63, pid='<unknown>', name=<unknown>, "
    "Row Remapper: New row (0x00000000000a5c27) marked for remapping, reset gpu to activate."
)
# A number NVIDIA's table does not list (composed: no such Xid exists today).
DMESG_UNKNOWN = "[  200.000] NVRM: Xid (PCI:0000:01:00): 999, pid=1, name=x, Something new."


def _logs(tmp_path: Path, *lines: str) -> LogFacts:
    log = tmp_path / "kern.log"
    log.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )


def _scan(tmp_path: Path, *lines: str) -> list[JudgedFinding]:
    return judge_findings(_logs(tmp_path, *lines))


def _xid(judged: list[JudgedFinding]) -> list[JudgedFinding]:
    return [j for j in judged if j.signature.startswith("kernel.xid")]


# What the table says of the numbers issue 33 names. Its fatal is NVSentinel's FATAL or
# NVIDIA's immediate action RESTART_APP: 13 and 31 kill the application, 48, 79 or 95 need
# the GPU reset; the table does not keep which, so kernel.xid_fatal's one wording says both.
TABLE = {
    13: True,
    31: True,
    43: False,
    45: False,
    48: True,
    63: False,
    64: True,
    74: True,
    79: True,
    92: False,
    94: True,
    95: True,
    119: True,
    154: False,
}


@pytest.mark.parametrize(("number", "fatal"), sorted(TABLE.items()))
def test_the_table_marks_the_named_numbers(number: int, fatal: bool) -> None:
    assert load_vocabulary().xids[number].fatal is fatal


def test_a_fatal_xid_is_fail_named_from_the_table(tmp_path: Path) -> None:
    (got,) = _xid(_scan(tmp_path, JOURNALD_48))
    assert (got.signature, got.severity, got.line, got.count) == ("kernel.xid_fatal", "fail", 1, 1)
    assert got.check == "logs.kernel_events"
    assert got.excerpt.startswith(
        "Xid 48 (ROBUST_CHANNEL_GPU_ECC_DBE, fatal in NVIDIA's Xid table; NVIDIA's action "
        "WORKFLOW_XID_48: reset the GPU) | line: "
    )
    assert "double bit error" in got.excerpt
    assert got.action == "reset-gpu"


def test_the_newer_drivers_form_is_read(tmp_path: Path) -> None:
    (got,) = _xid(_scan(tmp_path, NEWER_13))
    assert (got.signature, got.severity) == ("kernel.xid_fatal", "fail")
    assert got.excerpt.startswith("Xid 13 (ROBUST_CHANNEL_GR_EXCEPTION")


def test_a_non_fatal_xid_stays_a_warning_with_its_name(tmp_path: Path) -> None:
    (got,) = _xid(_scan(tmp_path, DMESG_63))
    assert (got.signature, got.severity) == ("kernel.xid", "warn")
    assert got.excerpt.startswith(
        "Xid 63 (INFOROM_DRAM_RETIREMENT_EVENT; NVIDIA's action IGNORE: no action) | line: "
    )
    assert got.action is None  # IGNORE: the node needs nothing for it


def test_an_unknown_number_is_as_before(tmp_path: Path) -> None:
    assert 999 not in load_vocabulary().xids
    (got,) = _xid(_scan(tmp_path, DMESG_UNKNOWN))
    assert (got.signature, got.severity) == ("kernel.xid", "warn")
    assert got.excerpt == DMESG_UNKNOWN


def test_xid_79_keeps_its_own_signature(tmp_path: Path) -> None:
    (got,) = _xid(_scan(tmp_path, DMESG_79))
    assert (got.signature, got.severity) == ("kernel.xid_fallen_off_bus", "fail")


def test_each_number_is_its_own_finding(tmp_path: Path) -> None:
    """A fatal Xid after a non-fatal one in the same log is not hidden behind the first
    excerpt: the facts keep each number's first line."""
    logs = _logs(tmp_path, DMESG_63, DMESG_63, JOURNALD_48, DMESG_63)
    seen = sorted((f.signature, f.line, f.count) for f in logs.findings)
    assert seen == [("kernel.xid", 1, 3), ("kernel.xid", 3, 1)]
    got = sorted((j.signature, j.severity, j.line, j.count) for j in _xid(judge_findings(logs)))
    assert got == [("kernel.xid", "warn", 1, 3), ("kernel.xid_fatal", "fail", 3, 1)]


def test_the_check_fails_with_the_fatal_meaning(tmp_path: Path) -> None:
    facts = replace(load("sm120-driver580"), logs=_logs(tmp_path, DMESG_63, JOURNALD_48))
    got = result(facts, "logs.kernel_events")
    assert got.status is Status.FAIL
    assert "kernel.xid_fatal (1x, first at" in got.summary
    assert got.remedy is not None
    assert "NVIDIA's Xid table marks fatal" in got.remedy.summary
    # Both numbers' lines are in the evidence.
    assert len([k for k in got.evidence if k.startswith("kernel.xid")]) == 2


@pytest.mark.parametrize(
    "line",
    [
        # open-gpu-kernel-modules osHandleGpuLost: NV_DEV_PRINTF(NV_DBG_ERRORS, nv, "GPU has
        # fallen off the bus.\n"), NV_DEV_PRINTF's prefix "NVRM: GPU %04x:%02x:%02x.%x: "
        "[  49.261458] NVRM: GPU 0000:01:00.0: GPU has fallen off the bus.",
        # the closed drivers before it: "NVRM: GPU at %04x:%02x:%02x.%x has fallen off the bus."
        "[  49.261458] NVRM: GPU at 0000:01:00.0 has fallen off the bus.",
        "Nov 28 12:00:00 host kernel: NVRM: GPU at PCI:0000:3b:00: has fallen off the bus.",
    ],
)
def test_the_drivers_own_off_the_bus_line_without_an_xid_fails(tmp_path: Path, line: str) -> None:
    judged = _scan(tmp_path, line)
    assert [(j.signature, j.severity) for j in judged] == [("kernel.gpu_fallen_off_bus", "fail")]


def test_the_xid_79_line_is_not_counted_twice_as_off_the_bus(tmp_path: Path) -> None:
    judged = _scan(
        tmp_path, "[  9.1] NVRM: Xid (PCI:0000:01:00): 79, pid=1, GPU has fallen off the bus."
    )
    assert {j.signature for j in judged} == {"kernel.xid_fallen_off_bus"}
