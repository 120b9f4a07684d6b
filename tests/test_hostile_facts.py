"""Facts files and catalogues come from other hosts and other people: values out of range,
absurd counts, a byte-order mark and deep nesting are one-line errors (exit 2) or accepted,
never a crash, a hang, gigabytes of memory, or a launch with nonsense in it."""

from __future__ import annotations

import copy
import json
import re
import tracemalloc
from collections.abc import Callable
from typing import Any

import msgspec
import pytest

from blackwell_doctor.facts.document import MAX_GPUS, FactsError, decode_facts
from blackwell_doctor.facts.stack import IsaVersion, LtoName, TargetName
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.runtimes import load_catalogue, parse_catalogue
from blackwell_doctor.rules.evaluate import evaluate
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, REPO

B200 = json.loads((FACTS_FIXTURES / "b200-x8.json").read_text())
RUNTIMES = (REPO / "checks" / "runtimes.toml").read_text()


def mutated(change: Callable[[dict[str, Any]], None]) -> bytes:
    doc = copy.deepcopy(B200)
    change(doc)
    return json.dumps(doc).encode()


def with_gpus(n: int, *, pairs: bool) -> dict[str, Any]:
    """b200-x8 with ``n`` GPUs in every inventory (and NVML's status for every pair)."""
    doc: dict[str, Any] = copy.deepcopy(B200)
    nvml, cuda, pci = doc["nvml"], doc["cuda"], doc["pci"]
    nvml["gpus"] = [
        {
            **nvml["gpus"][i % 8],
            "index": i,
            "pci_bus_id": f"00000000:{i % 256:02X}:{i // 256:02X}.0",
        }
        for i in range(n)
    ]
    cuda["devices"] = [{**cuda["devices"][i % 8], "ordinal": i} for i in range(n)]
    pci["gpus"] = [
        {**pci["gpus"][i % 8], "bdf": f"0000:{i % 256:02x}:{i // 256:02x}.0"} for i in range(n)
    ]
    template = nvml["p2p"][0]
    nvml["p2p"] = (
        [{**template, "gpu_a": a, "gpu_b": b} for a in range(n) for b in range(n) if a != b]
        if pairs
        else []
    )
    return doc


# --------------------------------------------------------------------------- counts


def test_six_thousand_gpus_are_refused_with_a_clear_error(
    tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "many.json"
    path.write_text(json.dumps(with_gpus(6000, pairs=False)))
    tracemalloc.start()
    try:
        code, _, err = run(["check", "--facts", str(path), "-f", "json"], capsys)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert code == 2
    assert err.count("\n") == 1
    assert re.search(r"\$\.(nvml|pci|cuda)\.(gpus|devices)", err)
    assert f"at most {MAX_GPUS}" in err
    assert peak < 200 << 20  # before: 1.9 GB RSS and 42 s


def test_the_largest_accepted_host_is_judged_in_bounded_memory() -> None:
    facts = decode_facts(json.dumps(with_gpus(MAX_GPUS, pairs=True)).encode())
    tracemalloc.start()
    try:
        report = evaluate(facts)
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert {r.id for r in report.results} >= {"pci.acs", "p2p.nvml_status"}
    assert peak < 64 << 20, peak


def test_missing_pairs_are_counted_not_listed_one_by_one() -> None:
    doc = with_gpus(MAX_GPUS, pairs=False)
    doc["nvml"]["p2p"] = [B200["nvml"]["p2p"][0]]
    report = evaluate(decode_facts(json.dumps(doc).encode()))
    [p2p] = [r for r in report.results if r.id == "p2p.nvml_status"]
    assert len(p2p.summary) < 2000
    assert "more" in p2p.summary


# --------------------------------------------------------------------------- ranges


def _set(path: str, value: Any) -> Callable[[dict[str, Any]], None]:
    def change(doc: dict[str, Any]) -> None:
        *head, last = path.split(".")
        node: Any = doc
        for key in head:
            node = node[int(key)] if key.isdigit() else node[key]
        node[int(last) if last.isdigit() else last] = value

    return change


OUT_OF_RANGE = [
    ("platform.cpu.logical_cpus", 9223372036854775807),
    ("platform.cpu.logical_cpus", 0),
    ("platform.cpu.logical_cpus", -4),
    ("cuda.devices.0.smem_per_block_optin", -5),
    ("cuda.devices.0.smem_per_block", -1),
    ("cuda.devices.0.smem_per_sm", 1 << 40),
    ("cuda.devices.0.sm_count", -1),
    ("cuda.devices.0.ordinal", -1),
    ("cuda.devices.0.l2_cache_bytes", -1),
    ("nvml.gpus.0.index", -3),
    ("nvml.gpus.0.memory_total_bytes", -1),
    ("nvml.gpus.0.compute_capability", [-12, 0]),
    ("nvml.gpus.0.compute_capability", [1200, 0]),
    ("nvml.p2p.0.gpu_a", -1),
]


@pytest.mark.parametrize(("path", "value"), OUT_OF_RANGE)
def test_values_out_of_range_are_refused(path: str, value: Any) -> None:
    with pytest.raises(FactsError) as raised:
        decode_facts(mutated(_set(path, value)))
    message = str(raised.value)
    assert "\n" not in message
    assert path.split(".")[-1] in message


def test_a_pci_address_with_a_trailing_newline_is_refused() -> None:
    # Issue 32: msgspec matches a pattern with Python's re.search, whose `$` also matches
    # before a final newline; an address ends up in commands a user pastes.
    bdf = B200["pci"]["gpus"][0]["bdf"]
    decode_facts(mutated(_set("pci.gpus.0.bdf", bdf)))
    with pytest.raises(FactsError) as raised:
        decode_facts(mutated(_set("pci.gpus.0.bdf", bdf + "\n")))
    assert "bdf" in str(raised.value)


@pytest.mark.parametrize(
    ("kind", "value"),
    [(TargetName, "sm_120a"), (LtoName, "lto_120"), (IsaVersion, "8.7")],
)
def test_stack_names_with_a_trailing_newline_are_refused(kind: Any, value: str) -> None:
    assert msgspec.convert(value, kind) == value
    with pytest.raises(msgspec.ValidationError):
        msgspec.convert(value + "\n", kind)


def test_a_byte_order_mark_is_accepted() -> None:
    data = (FACTS_FIXTURES / "b200-x8.json").read_bytes()
    assert decode_facts(b"\xef\xbb\xbf" + data) == decode_facts(data)


def test_a_utf16_facts_file_is_named_as_such() -> None:
    data = (FACTS_FIXTURES / "b200-x8.json").read_text().encode("utf-16")
    with pytest.raises(FactsError, match="UTF-16"):
        decode_facts(data)


# --------------------------------------------------------------------------- catalogue


@pytest.mark.parametrize(
    "path", ["/", "/usr", "/etc", "/proc", "/sys", "/dev", "/bin", "/lib", "/model", "//", "/."]
)
def test_a_jit_cache_over_a_system_directory_is_refused(path: str) -> None:
    text = RUNTIMES.replace('jit_cache = "/root/.cache"', f"jit_cache = {json.dumps(path)}", 1)
    assert text != RUNTIMES
    with pytest.raises(CatalogueError, match="jit_cache"):
        parse_catalogue(text, source="evil.toml")


def test_the_shipped_jit_cache_is_accepted() -> None:
    assert all(r.jit_cache in ("", "/root/.cache") for r in load_catalogue().runtime)


@pytest.mark.parametrize("depth", [5000, 100_000])
def test_a_deeply_nested_catalogue_is_a_usage_error(
    depth: int, tmp_path: Any, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "deep.toml"
    path.write_text("x = " + "[" * depth + "]" * depth + "\n")
    with pytest.raises(CatalogueError, match="nested too deeply"):
        parse_catalogue(path.read_text(), source=str(path))
    code, _, err = run(
        ["recommend", "--facts", str(FACTS_FIXTURES / "b200-x8.json"), "--catalogue", str(path)],
        capsys,
    )
    assert code == 2
    assert "nested too deeply" in err
