"""checks/health.toml and the Xid actions of checks/log_vocabulary.toml agree with their
sources (issue 39): the committed [[xid]] entries are what tools/logvocab/fatal.py writes
from the pinned NVSentinel copy of NVIDIA's Xid catalogue, every resolution bucket there has
a step, and the clock-reason bits and recovery-action codes are nvml.h's (as the installed
nvidia-ml-py names them)."""

from __future__ import annotations

import importlib
import shutil
from pathlib import Path

import pytest
from tools.logvocab import fatal

from blackwell_doctor.ruledata.health import ACTIONS, VERDICT_OF, load_health_data
from blackwell_doctor.ruledata.resources import data_dir
from blackwell_doctor.ruledata.vocabulary import load_vocabulary

REPO = Path(__file__).resolve().parents[1]
CSV = REPO / "tools" / "logvocab" / "sources" / "NVSentinel-6f8b0fcfa8e5-xiderrorsmapping.csv"
PINNED = (
    "NVIDIA/NVSentinel@6f8b0fcfa8e502bdda78fabf96facef729a9285b:distros/kubernetes/nvsentinel/"
    "charts/gpu-health-monitor/xiderrorsmapping.csv"
)


def test_the_xid_entries_are_what_the_generator_writes_from_the_pinned_csv(
    tmp_path: Path,
) -> None:
    committed = data_dir("checks") / "log_vocabulary.toml"
    copy = tmp_path / "log_vocabulary.toml"
    shutil.copy(committed, copy)
    count = fatal.rewrite_xids(copy, CSV, PINNED)
    assert copy.read_bytes() == committed.read_bytes()
    assert count == len(load_vocabulary().xids) == 161
    # The regenerate script pins the same source.
    assert PINNED in (REPO / "tools" / "logvocab" / "regenerate.sh").read_text()


def test_every_resolution_bucket_of_the_catalogue_has_a_step() -> None:
    buckets = {x.action for x in load_vocabulary().xids.values()}
    assert "" not in buckets  # every entry carries its bucket
    assert buckets <= set(load_health_data().xid_actions), buckets - set(
        load_health_data().xid_actions
    )


@pytest.mark.parametrize(
    ("number", "step"),
    [
        (13, "restart-app"),  # graphics engine exception: the application
        (31, "restart-app"),  # MMU fault
        (48, "reset-gpu"),  # double-bit ECC: WORKFLOW_XID_48
        (63, None),  # row remapping recorded: IGNORE
        (79, "reboot"),  # fallen off the bus: RESTART_BM
        (95, "reset-gpu"),  # uncontained ECC
        (119, "reset-gpu"),  # GSP RPC timeout
    ],
)
def test_the_numbers_users_meet_get_the_step_nvidia_names(number: int, step: str | None) -> None:
    xid = load_vocabulary().xids[number]
    assert load_health_data().xid_action(xid.action) == step


def test_a_bucket_the_table_lacks_asks_for_service_never_nothing() -> None:
    assert load_health_data().xid_action("SOMETHING_NEW") == "service"


def test_each_step_makes_a_verdict_and_has_words() -> None:
    data = load_health_data()
    assert set(VERDICT_OF) == set(ACTIONS)
    for step in ACTIONS:
        assert "{checks}" in data.ladder[step]
        assert data.action_words[step]


@pytest.fixture
def pynvml() -> object:
    pytest.importorskip("pynvml")
    return importlib.import_module("pynvml")


def test_clock_reason_bits_are_nvml_h(pynvml: object) -> None:
    for reason in load_health_data().clocks.reasons:
        assert getattr(pynvml, f"nvmlClocksEventReason{reason.name}") == reason.bit, reason.name


def test_recovery_action_codes_are_nvml_h(pynvml: object) -> None:
    for action in load_health_data().recovery.actions:
        assert getattr(pynvml, f"NVML_GPU_RECOVERY_ACTION_{action.name}") == action.code
