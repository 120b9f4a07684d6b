"""`check --select`/`--ignore` collect only what the checks they leave read (issue 32).

Each check declares the sections of the facts it reads (``@check(id, reads=...)``). The
declarations are verified two ways on every facts fixture, plain and with logs, a model, a
bench run and a stack audit added: a check judged on facts where every section it and its
prerequisites do not declare is unavailable gives the same result as on the full facts, and
no check so much as reads a section it did not declare. Then, through the collector seams
(the functions that start the GPU children), a live ``check --select FAMILY`` starts only
the collectors that family's declarations call for, and none of the GPU children for a
family that reads no GPU fact.
"""

from __future__ import annotations

import json
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any, get_args

import msgspec
import pytest

from blackwell_doctor.facts.document import (
    NvmlFacts,
    Section,
    Unavailable,
    decode_facts,
)
from blackwell_doctor.facts.stack import GpuPackage, StackFacts
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.rules.engine import FAMILY_MODULES, needed_sections, registered_checks
from blackwell_doctor.rules.evaluate import evaluate
from blackwell_doctor.rules.registry import READS
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES

LEFT_OUT = "not-collected:--select"
# Sections a live run may leave out (the platform is always read).
MASKABLE = [s for s in get_args(Section) if s != "platform"]
HOSTS = sorted(p.stem for p in FACTS_FIXTURES.glob("*.json"))
LOGS = [
    "composed-vllm-marlin-auto.log",
    "composed-xid-13.log",
    "nccl-1214-p2p-disabled.log",
    "composed-open-modules-required.log",
]


def _host(name: str) -> Any:
    return decode_facts((FACTS_FIXTURES / f"{name}.json").read_bytes(), source=name)


@cache
def _inputs() -> dict[str, Any]:
    """Logs, a W4A16 MoE model, a bench run and a stack with vLLM: the sections only
    options fill, so that the checks that read them (and what else they read) run."""
    from blackwell_doctor.collect.logs.scan import collect_logs
    from blackwell_doctor.collect.model.scan import read_model_dir
    from blackwell_doctor.report.bench_facts import read_bench

    logs = collect_logs(
        paths=[str(FIXTURES / "logs" / name) for name in LOGS],
        containers=(),
        journal=False,
        kernel_log=False,
        host_root=Path("/"),
        stdin=None,
    )
    model = read_model_dir(FIXTURES / "models" / "qwen3-235b-a22b")
    w4a16 = msgspec.structs.replace(
        model, quantization=msgspec.structs.replace(model.quantization, method="w4a16")
    )
    bench_file = FIXTURES / "bench" / "article-native-119tps.json"
    bench = read_bench(bench_file.read_bytes(), source=bench_file.name)
    stack = StackFacts(
        python="/venv/bin/python",
        python_version="3.12.3",
        site_dirs=["/venv/lib/python3.12/site-packages"],
        packages=[
            GpuPackage(name="vllm", version="0.13.0"),
            GpuPackage(name="torch", version="2.9.0", cuda="12.8"),
        ],
        environment={},
    )
    return {"logs": logs, "model": w4a16, "bench": bench, "stack": stack}


def _variants() -> Iterator[tuple[str, Any]]:
    for host in HOSTS:
        facts = _host(host)
        yield host, facts
        yield f"{host}+inputs", msgspec.structs.replace(facts, **_inputs())


def _masked(facts: Any, keep: frozenset[str]) -> Any:
    """``facts`` with every section outside ``keep`` left out as a live run leaves it out
    (bench, which only ``--bench`` fills, is absent)."""
    changes: dict[str, Any] = {}
    for section in MASKABLE:
        if section not in keep:
            changes[section] = None if section == "bench" else Unavailable(LEFT_OUT)
    return msgspec.structs.replace(facts, **changes)


def _results(facts: Any, select: list[str]) -> list[bytes]:
    return [msgspec.json.encode(r) for r in evaluate(facts, select=select).results]


CHECK_IDS = list(load_rule_data().checks)


@pytest.mark.parametrize("selection", [[c] for c in CHECK_IDS] + [[f] for f in FAMILY_MODULES])
def test_a_selection_judged_without_what_it_does_not_declare_is_judged_the_same(
    selection: list[str],
) -> None:
    """The declarations are complete: leaving out every undeclared section changes no
    result, on any fixture."""
    keep = needed_sections(load_rule_data(), selection, ())
    differ = []
    for name, facts in _variants():
        if _results(_masked(facts, keep), selection) != _results(facts, selection):
            differ.append(name)
    assert differ == [], f"{selection} reads more than {sorted(keep)}"


def test_the_masking_is_seen_by_the_checks() -> None:
    """The test above can fail: with a section it reads left out, a check judges
    otherwise (gpu.present without NVML, probe.tiles without the probes)."""
    facts = _host("rtxpro6000x4-preflight")
    for check_id, section in (("gpu.present", "nvml"), ("probe.tiles", "probes")):
        keep = needed_sections(load_rule_data(), [check_id], ()) - {section}
        assert _results(_masked(facts, keep), [check_id]) != _results(facts, [check_id])


class _Reading:
    """Facts that record which of their attributes a check reads."""

    def __init__(self, facts: Any, seen: set[str]) -> None:
        object.__setattr__(self, "_facts", facts)
        object.__setattr__(self, "_seen", seen)

    def __getattr__(self, name: str) -> Any:
        self._seen.add(name)
        return getattr(self._facts, name)


@pytest.mark.parametrize("check_id", CHECK_IDS)
def test_no_check_reads_a_section_it_does_not_declare(check_id: str) -> None:
    from blackwell_doctor.rules.engine import family

    fn = registered_checks({family(check_id)})[check_id]
    rules = load_rule_data()
    seen: set[str] = set()
    for _, facts in _variants():
        fn(_Reading(facts, seen), rules)  # type: ignore[arg-type]
    sections = set(get_args(Section))
    assert (seen & sections) - READS[check_id] == set()


def test_every_check_declares_what_it_reads_and_only_known_sections() -> None:
    from blackwell_doctor.rules.registry import check

    registered_checks()
    assert set(READS) == set(CHECK_IDS)
    with pytest.raises(RuntimeError, match="unknown sections"):
        check("gpu.nothing", reads=("gpus",))  # type: ignore[arg-type]


# --------------------------------------------------------------------------- collection

FIXTURE = "rtxpro6000x4-preflight"  # 4 GPUs, a link below its maximum: every child runs
ALL = {"pci", "gpu", "tiles", "p2p", "link_load", "collective"}
# What a live `check` with these options starts ("gpu": the GPU facts child; "tiles": the
# tile probes in that child; "p2p", "link_load", "collective": the probe children). The PCI
# tree is read for every report's header.
COLLECTS: list[tuple[list[str], set[str]]] = [
    (["--select", "platform"], {"pci"}),
    (["--select", "pci"], {"pci"}),
    (["--select", "logs"], {"pci"}),
    (["--select", "platform,pci,logs"], {"pci"}),
    (["--select", "gpu"], {"pci", "gpu"}),
    (["--select", "driver"], {"pci", "gpu"}),
    (["--select", "p2p"], {"pci", "gpu", "p2p"}),
    (["--select", "p2p.nvml_status"], {"pci", "gpu"}),
    (["--select", "probe"], {"pci", "gpu", "tiles"}),
    (["--select", "link"], {"pci", "gpu", "link_load"}),
    (["--select", "bar1"], {"pci", "gpu"}),
    (["--select", "module"], {"pci", "gpu"}),
    (["--select", "collective"], {"pci", "gpu", "link_load", "collective"}),
    (["--select", "memory"], {"pci", "gpu"}),
    (["--select", "model"], {"pci", "gpu"}),
    (["--select", "stack"], {"pci", "gpu"}),
    (["--select", "serving"], {"pci", "gpu"}),
    # The pre-flight (docs/preflight.md): no tile probes, no peer transfers.
    (["--select", "link,bar1,module,collective,memory"], {"pci", "gpu", "link_load", "collective"}),
    # health.clocks reads the clock reasons during the tile probes' launches, and
    # health.pcie_errors joins the link read under load (issue 39): they run for health.
    (["--select", "health"], {"pci", "gpu", "tiles", "link_load"}),
    (["--select", "health.ecc"], {"pci", "gpu"}),
    (["--ignore", "probe"], ALL),
    (["--ignore", "probe,health"], ALL - {"tiles"}),
    (["--ignore", "probe,p2p.transfer,link,collective"], {"pci", "gpu", "tiles", "link_load"}),
    (["--ignore", "probe,p2p.transfer,link,collective,health"], {"pci", "gpu"}),
    (["--select", "probe,p2p", "--no-probe"], {"pci", "gpu"}),
    ([], ALL),
]


@pytest.fixture
def children(monkeypatch: pytest.MonkeyPatch) -> set[str]:
    """The collector seams faked with the fixture's facts: what each live run started."""
    from blackwell_doctor.collect import gpu, pci
    from blackwell_doctor.collect.probe import collective, p2p, runner

    facts = _host(FIXTURE)
    started: set[str] = set()
    real_pci = pci.collect_pci

    def collect_pci(*args: Any, **kwargs: Any) -> Any:
        started.add("pci")
        return real_pci(*args, **kwargs)

    def collect_gpu_document(*args: Any, **kwargs: Any) -> Any:
        started.add("gpu")
        return gpu.GpuDocument(nvml=facts.nvml, cuda=facts.cuda)

    def collect_gpu_run(*args: Any, **kwargs: Any) -> Any:
        started.update(("gpu", "tiles"))
        return gpu.GpuRun(facts.nvml, facts.cuda, facts.probes)

    def start(name: str, value: Any) -> Any:
        def child(*args: Any, **kwargs: Any) -> Any:
            started.add(name)
            return value

        return child

    monkeypatch.setattr(pci, "collect_pci", collect_pci)
    monkeypatch.setattr(gpu, "drivers_load", lambda: True)
    monkeypatch.setattr(gpu, "collect_gpu_document", collect_gpu_document)
    monkeypatch.setattr(runner, "collect_gpu_run", collect_gpu_run)
    monkeypatch.setattr(p2p, "run_p2p_probes", start("p2p", Unavailable("test-fake")))
    monkeypatch.setattr(collective, "run_link_load", start("link_load", facts.link_load))
    monkeypatch.setattr(collective, "run_collective", start("collective", facts.collective))
    return started


def _collect_id(value: list[str] | set[str]) -> str:
    """A case's id: the same in every process (a set's order is not)."""
    return " ".join(sorted(value) if isinstance(value, set) else value) or "all"


@pytest.mark.parametrize(("options", "expected"), COLLECTS, ids=_collect_id)
def test_a_live_check_starts_only_the_collectors_its_checks_read(
    options: list[str],
    expected: set[str],
    children: set[str],
    capsys: pytest.CaptureFixture[str],
) -> None:
    out = run(["check", *options, "-f", "json", "--embed-facts"], capsys)
    assert out.code in (0, 1), out.err

    assert children == expected
    facts = json.loads(out.out)["facts"]
    if "gpu" not in expected:
        assert facts["nvml"] == {"status": "unavailable", "reason": LEFT_OUT}
        assert facts["cuda"] == {"status": "unavailable", "reason": LEFT_OUT}
    else:
        assert facts["nvml"]["status"] == "ok"
    if not options:
        assert "not-collected:" not in out.out


def test_a_section_left_out_is_never_judged_a_pass(
    children: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    """What a selection left out is unavailable with the reason. Judged from such facts
    (check --facts of what check --select --embed-facts wrote), a check that reads it is not
    evaluated, naming it, whatever its code would make of an unavailable value (gpu.present
    read "NVML: not-collected" as no usable driver, a failure); those behind it are blocked."""
    out = run(["check", "--select", "platform", "-f", "json", "--embed-facts"], capsys)
    facts = decode_facts(json.dumps(json.loads(out.out)["facts"]).encode())
    assert isinstance(facts.nvml, Unavailable)
    judged = {r.id: r for r in evaluate(facts).results}

    present = judged["gpu.present"]
    assert present.status == "error"
    assert present.summary == (
        "not evaluated: cuda not in these facts (not-collected:--select), "
        "nvml not in these facts (not-collected:--select)"
    )
    for r in judged.values():
        if READS[r.id] & {"nvml", "cuda", "probes", "p2p_transfers", "link_load", "collective"}:
            # Not evaluated for what was left out; else blocked, or a section never given.
            assert r.status in ("error", "skip"), r
            assert r.status == "skip" or "not-collected:--select" in r.summary, r
    assert judged["platform.wsl"].status == "pass"


def test_a_check_whose_section_was_left_out_is_not_evaluated() -> None:
    facts = _host("rtxpro6000x4-preflight")
    left = msgspec.structs.replace(facts, collective=Unavailable("not-collected:--ignore"))
    [result] = evaluate(left, select=["collective.allreduce"]).results
    assert result.status == "error"
    assert result.summary == (
        "not evaluated: collective not in these facts (not-collected:--ignore)"
    )
    # Not a section a selection leaves out: the check's own words.
    other = msgspec.structs.replace(facts, collective=Unavailable("collective-crashed"))
    [result] = evaluate(other, select=["collective.allreduce"]).results
    assert "collective-crashed" in result.summary


def test_nfd_reads_nvml_whatever_is_selected(
    children: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(["check", "--select", "platform", "-f", "nfd"], capsys)
    assert out.code in (0, 1), out.err
    assert children == {"pci", "gpu"}
    assert "sm" in out.out.lower()


def test_a_selection_that_names_no_check_is_refused_before_collecting(
    children: set[str], capsys: pytest.CaptureFixture[str]
) -> None:
    out = run(["check", "--select", "nothing-here"], capsys)
    assert out.code == 2
    assert "no check id or family matches 'nothing-here'" in out.err
    assert children == set()


def test_collect_reads_everything(children: set[str], capsys: pytest.CaptureFixture[str]) -> None:
    out = run(["collect"], capsys)
    assert out.code == 0, out.err
    assert children == ALL
    assert isinstance(decode_facts(out.out.encode()).nvml, NvmlFacts)
