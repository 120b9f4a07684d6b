"""The engine: crash isolation, prerequisites, selection, rule data, the gate."""

from __future__ import annotations

import pytest

from blackwell_doctor.facts.document import Facts
from blackwell_doctor.report.exitcodes import ExitCode, results_gate
from blackwell_doctor.report.results import Outcome, Result, Severity, Status
from blackwell_doctor.ruledata import checkdata
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.rules import RuleData, load_rule_data
from blackwell_doctor.rules.engine import Engine, SelectionError, registered_checks, select_ids
from tests.factsutil import load


def _engine_with(check_id: str, fn: object) -> Engine:
    checks = dict(registered_checks())
    checks[check_id] = fn  # type: ignore[assignment]
    return Engine(rules=load_rule_data(), checks=checks)


def test_a_crashing_check_is_an_error_result_and_the_others_still_run() -> None:
    def boom(facts: Facts, rules: RuleData) -> Outcome:
        raise ZeroDivisionError("division by zero")

    results = _engine_with("platform.wsl", boom).run(load("b200-x8"))
    crashed = next(r for r in results if r.id == "platform.wsl")
    assert crashed.status is Status.ERROR
    assert "check crashed: ZeroDivisionError" in crashed.summary
    assert len(results) == len(load_rule_data().checks)
    assert next(r for r in results if r.id == "pci.iommu").status is Status.PASS


def test_a_failed_prerequisite_blocks_dependents_with_a_skip_naming_it() -> None:
    results = Engine(load_rule_data(), registered_checks()).run(load("no-gpu"))
    arch = next(r for r in results if r.id == "gpu.architecture")
    assert arch.status is Status.SKIP
    assert arch.summary == "blocked by gpu.present"


def test_prerequisites_run_even_when_not_selected() -> None:
    results = Engine(load_rule_data(), registered_checks()).run(
        load("no-gpu"), select=["driver.version"]
    )
    assert [r.id for r in results] == ["driver.version"]
    assert results[0].summary == "blocked by gpu.present"


@pytest.mark.parametrize(
    ("select", "ignore", "expected"),
    [
        (["driver"], [], ["driver.version", "driver.cuda_version", "driver.consistency"]),
        (["driver.version"], [], ["driver.version"]),
        (["driver", "pci"], ["driver.consistency", "pci.acs"], None),
        (
            [],
            [
                "gpu",
                "driver",
                "pci",
                "p2p",
                "probe",
                "link",
                "bar1",
                "module",
                "collective",
                "memory",
                "health",
                "logs",
                "model",
                "serving",
                "stack",
            ],
            ["platform.wsl"],
        ),
    ],
)
def test_selection_by_dotted_prefix(
    select: list[str], ignore: list[str], expected: list[str] | None
) -> None:
    ids = list(load_rule_data().checks)
    got = select_ids(ids, select, ignore)
    if expected is None:
        expected = ["driver.version", "driver.cuda_version", "pci.iommu"]
    assert got == expected


@pytest.mark.parametrize("pattern", ["drive", "drivers", "driver.versio", "nope"])
def test_a_pattern_matching_nothing_is_a_usage_error(pattern: str) -> None:
    with pytest.raises(SelectionError, match=pattern):
        select_ids(list(load_rule_data().checks), [pattern], [])


def _result(status: Status) -> Result:
    return Result(
        id="x.y", family="x", status=status, severity=Severity.LOW, title="t", summary="s"
    )


@pytest.mark.parametrize(
    ("statuses", "fail_on", "strict", "code"),
    [
        ([Status.PASS, Status.SKIP], "fail", False, ExitCode.OK),
        ([Status.WARN], "fail", False, ExitCode.OK),
        ([Status.WARN], "warn", False, ExitCode.FINDINGS),
        ([Status.FAIL], "fail", False, ExitCode.FINDINGS),
        ([Status.ERROR], "fail", False, ExitCode.OK),
        ([Status.ERROR], "fail", True, ExitCode.NOT_EVALUATED),
        ([Status.ERROR, Status.FAIL], "fail", True, ExitCode.FINDINGS),
        ([Status.ERROR, Status.WARN], "fail", True, ExitCode.NOT_EVALUATED),
    ],
)
def test_gate_exit_codes(
    statuses: list[Status], fail_on: str, strict: bool, code: ExitCode
) -> None:
    assert results_gate(statuses, fail_on, strict) is code  # type: ignore[arg-type]


def test_catalogue_and_code_must_agree() -> None:
    checks = dict(registered_checks())
    del checks["pci.acs"]
    with pytest.raises(RuntimeError, match=r"no code for \['pci.acs'\]"):
        Engine(rules=load_rule_data(), checks=checks)


def test_every_catalogue_entry_has_a_title_severity_and_remedy_for_warn_or_fail() -> None:
    for spec in load_rule_data().checks.values():
        assert spec.title
        assert spec.family in {
            "gpu",
            "driver",
            "platform",
            "pci",
            "p2p",
            "probe",
            "link",
            "bar1",
            "module",
            "collective",
            "memory",
            "health",
            "logs",
            "model",
            "serving",
            "stack",
        }
        assert spec.remedy is not None, f"{spec.id} has no remedy"


def test_malformed_rule_data_is_a_clear_error(
    monkeypatch: pytest.MonkeyPatch, tmp_path: object
) -> None:
    from pathlib import Path

    assert isinstance(tmp_path, Path)
    (tmp_path / "catalogue.toml").write_text('[[check]]\nid = "gpu.present"\ntitle = 3\n')
    monkeypatch.setattr(checkdata, "data_dir", lambda name: tmp_path)
    load_rule_data.cache_clear()
    try:
        with pytest.raises(CatalogueError, match=r"checks/catalogue.toml: .*title"):
            load_rule_data()
    finally:
        load_rule_data.cache_clear()


def test_architecture_table_matches_the_reference_for_sm12x_and_hopper() -> None:
    archs = load_rule_data().architectures
    assert archs[(12, 0)].smem_optin_per_block == 101376
    assert archs[(12, 1)].smem_optin_per_block == 101376
    assert archs[(9, 0)].smem_optin_per_block == 232448
    for arch in archs.values():  # 1 KB per block is reserved by CUDA on every listed arch
        assert arch.smem_per_sm - arch.smem_optin_per_block == 1024


def test_family_modules_register_exactly_their_families() -> None:
    # rules/families.py imports every module; FAMILY_MODULES names, per catalogue family,
    # the one module that registers its checks (a run of some families imports only those).
    from blackwell_doctor.rules import families
    from blackwell_doctor.rules.engine import FAMILY_MODULES, family

    checks = registered_checks()
    assert set(FAMILY_MODULES) == {family(i) for i in load_rule_data().checks}
    for check_id, fn in checks.items():
        assert fn.__module__ == f"blackwell_doctor.rules.{FAMILY_MODULES[family(check_id)]}"
    listed = {n for n in dir(families) if not n.startswith("_")}
    assert set(FAMILY_MODULES.values()) <= listed


def test_a_selected_run_loads_only_the_families_it_needs() -> None:
    from blackwell_doctor.rules.evaluate import default_engine

    engine = default_engine(select=["logs"])
    assert engine.families == frozenset({"logs"})
    assert {i.split(".")[0] for i in engine.checks} == {"logs"}
    engine = default_engine(select=["p2p.transfer"])
    assert engine.families is not None
    assert "gpu" in engine.families  # its prerequisite
    facts = load("b200-x8")
    assert [r.id for r in engine.run(facts, select=["p2p.transfer"])] == ["p2p.transfer"]
    with pytest.raises(SelectionError):
        default_engine(select=["nothing"])


@pytest.mark.parametrize(
    "name", ["b200-x8", "no-gpu", "rtx5090-wsl2", "sm120-driver580", "dgx-spark-gb10"]
)
def test_a_family_whose_section_is_absent_skips_as_its_own_code_does(name: str) -> None:
    # The engine of every check skips these without importing the family: its words must be
    # the code's, for every check of the family, on facts without the section.
    from blackwell_doctor.rules.absent import SECTIONS
    from blackwell_doctor.rules.evaluate import default_engine
    from blackwell_doctor.rules.registry import REGISTRY
    from tests.factsutil import replace

    rules = load_rule_data()
    checks = registered_checks()
    on_demand = default_engine()
    assert on_demand.checks == {}  # nothing imported before a run needs it
    for fam, (attr, summary) in SECTIONS.items():
        facts = replace(load(name), **{attr: None})
        ids = [i for i in rules.checks if i.startswith(fam + ".")]
        assert ids
        for check_id in ids:
            assert checks[check_id](facts, rules) == Outcome(status=Status.SKIP, summary=summary)
        eager = Engine(rules, checks).run(facts, select=[fam])
        assert on_demand.run(facts, select=[fam]) == eager
    full = load(name)
    assert default_engine().run(full) == Engine(rules, dict(REGISTRY)).run(full)


def test_an_on_demand_engine_loads_a_family_when_its_section_is_there() -> None:
    from pathlib import Path

    from blackwell_doctor.report.bench_facts import read_bench
    from blackwell_doctor.rules.evaluate import default_engine

    fixtures = Path(__file__).parent / "fixtures"
    from tests.factsutil import replace

    engine = default_engine()
    facts = load("b200-x8")
    engine.run(facts)
    assert not any(i.startswith("serving.") for i in engine.checks)
    bench = fixtures / "bench" / "tiny-moe-vllm-cpu.json"
    with_bench = replace(facts, bench=read_bench(bench.read_bytes(), source=str(bench)))
    results = engine.run(with_bench, select=["serving"])
    assert any(i.startswith("serving.") for i in engine.checks)
    assert all(r.summary != "no bench results given (--bench run.json)" for r in results)
