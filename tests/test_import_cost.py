"""Each command imports only what it runs: the modules a command imports beyond `python -c
"import typer"` may grow by at most 20% over the committed figure
(``benchmarks/figures/import-cost.json``, written by ``benchmarks/import_cost.py --write``).

The module list is the deterministic measure of import cost: the same on a loaded machine as
on an idle one, so this test cannot be flaky where a timing would be; the timings live in
the benchmark. A failure names the modules that are new; a module that a command now needs
is recorded by running the benchmark with ``--write`` (and the reason given in the commit).
"""

from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[1]
FACTS_FIXTURES = REPO / "tests" / "fixtures" / "facts"
FIGURES = json.loads((REPO / "benchmarks" / "figures" / "import-cost.json").read_text())
GROWTH = 1.2


def _imported(args: list[str]) -> set[str]:
    """The modules a run of ``args`` imports, its caches warm (the figures are a warm run's:
    a first run parses the catalogues' TOML and writes their cache, with tempfile)."""
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPROFILEIMPORTTIME"}
    env["PYTHONPATH"] = str(REPO / "src")
    if args[:2] == ["-m", "blackwell_doctor"]:
        subprocess.run([sys.executable, *args], capture_output=True, cwd=REPO, env=env, timeout=120)
    proc = subprocess.run(
        [sys.executable, "-X", "importtime", *args],
        capture_output=True,
        cwd=REPO,
        env=env,
        timeout=120,
        check=False,
    )
    assert proc.returncode in (0, 1, 3), proc.stderr.decode()[-2000:]
    lines = proc.stderr.decode(errors="replace").splitlines()
    names = (
        line.split("|")[2].strip()
        for line in lines
        if line.startswith("import time:") and "self [us]" not in line
    )
    # As benchmarks/import_cost.py counts: other packages by their top-level name.
    return {n if n.startswith("blackwell_doctor") else n.split(".")[0] for n in names}


@pytest.fixture(scope="module")
def floor() -> set[str]:
    return _imported(["-c", "import typer"])


@pytest.mark.parametrize("name", sorted(FIGURES["commands"]))
def test_a_command_imports_no_more_than_its_figure(name: str, floor: set[str]) -> None:
    entry = FIGURES["commands"][name]
    extra = _imported(["-m", "blackwell_doctor", *entry["argv"]]) - floor
    allowed = math.floor(entry["modules"] * GROWTH)
    new = sorted(extra - set(entry["imports"]))
    assert len(extra) <= allowed, (
        f"{name}: {len(extra)} modules beyond typer's, figure {entry['modules']} (+20%: "
        f"{allowed}); new: {new}"
    )


def test_check_on_facts_imports_no_collector_nor_network(floor: set[str]) -> None:
    """What `check --facts` must never pay for: the live collectors, a socket, Hyperscan."""
    extra = _imported(["-m", "blackwell_doctor", *FIGURES["commands"]["check-facts"]["argv"]])
    collectors = {m for m in extra if m.startswith("blackwell_doctor.collect.")}
    # cachefile: the user's cache of the decoded catalogues, not a collector.
    assert collectors <= {
        "blackwell_doctor.collect.inputfile",
        "blackwell_doctor.collect.cachefile",
    }
    assert not extra & {"socket", "hyperscan", "pynvml", "cuda"}


def test_a_run_registers_only_the_command_it_names() -> None:
    from blackwell_doctor.cli.commands import COMMANDS, commands_for

    assert commands_for(["check", "--facts", "f"]) == ("check",)
    assert commands_for(["scan-logs", "x.log"]) == ("scan_logs",)
    assert commands_for(["slurm-health"]) == ("slurm_health",)
    assert commands_for(["--version"]) == ()
    for everything in ([], ["--help"], ["chek"], ["scan_logs"]):
        assert commands_for(everything) == COMMANDS


@pytest.mark.parametrize("name", ["check-facts", "scan-logs", "fleet"])
def test_msgspec_does_not_load_typing_extensions(name: str, floor: set[str]) -> None:
    """msgspec takes typing's names instead (cli/boundary.py's _LeanMsgspec): ~4% of
    ``import typer`` (issue 36). A failed import attempt shows in -X importtime's list, so
    the module's file must not have run: its own module dict is never made."""
    argv = ["-m", "blackwell_doctor", *FIGURES["commands"][name]["argv"]]
    code = (
        "import runpy, sys\n"
        f"sys.argv = {argv[1:]!r}\n"
        "try:\n    runpy.run_module('blackwell_doctor', run_name='__main__')\n"
        "except SystemExit:\n    pass\n"
        "sys.stdout = sys.__stderr__\n"
        "print('typing_extensions loaded:', sys.modules.get('typing_extensions') is not None)\n"
    )
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    proc = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, cwd=REPO, env=env, timeout=120
    )
    assert b"typing_extensions loaded: False" in proc.stderr, proc.stderr[-2000:]


def test_check_and_scan_logs_skip_what_their_input_does_not_need(floor: set[str]) -> None:
    """Facts without a model, bench results, a stack audit or logs load none of those
    families' code or catalogues; a plain log file needs no socket, temporary file or queue;
    release-number versions need no packaging."""
    for name in ("check-facts", "fleet"):
        extra = _imported(["-m", "blackwell_doctor", *FIGURES["commands"][name]["argv"]]) - floor
        unneeded = {
            "blackwell_doctor.ruledata.stack",
            "blackwell_doctor.ruledata.serving",
            "blackwell_doctor.ruledata.logs",
            "packaging",
        }
        if name == "fleet" and any(
            json.loads(f.read_bytes()).get("logs") for f in FACTS_FIXTURES.glob("*.json")
        ):
            # Issue 39's hosts carry a kernel log (Xid 79, Xid 63): their logs are judged.
            unneeded.discard("blackwell_doctor.ruledata.logs")
        assert not extra & unneeded
    extra = _imported(["-m", "blackwell_doctor", *FIGURES["commands"]["scan-logs"]["argv"]]) - floor
    assert not extra & {"socket", "tempfile", "queue", "packaging"}


def test_msgspec_modules_this_package_does_not_use_load_when_first_used() -> None:
    # In a fresh process (msgspec already imported here): under the CLI's finder msgspec's
    # inspect, yaml and toml modules are lazy, and what reads them gets the same answers.
    code = """
import sys
from blackwell_doctor.cli.boundary import _lean_msgspec
with _lean_msgspec():
    import msgspec
    lazy = sorted(n for n in ("msgspec.inspect", "msgspec.yaml", "msgspec.toml")
                  if type(sys.modules[n]).__name__ == "_LazyModule")
    from blackwell_doctor.facts.document import Facts
    schema = msgspec.json.schema(Facts)
    info = repr(msgspec.inspect.type_info(int))
    toml = msgspec.toml.decode(b"a = 1")
print(lazy)
print(repr((schema, info, toml)))
"""
    env = {**os.environ, "PYTHONPATH": str(REPO / "src")}
    lean = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, env=env, timeout=120, check=True
    ).stdout
    plain = subprocess.run(
        [sys.executable, "-c", code.replace("with _lean_msgspec():", "if True:")],
        capture_output=True,
        env=env,
        timeout=120,
        check=True,
    ).stdout
    lean_lazy, lean_answers = lean.splitlines()
    plain_lazy, plain_answers = plain.splitlines()
    assert lean_lazy == b"['msgspec.inspect', 'msgspec.toml', 'msgspec.yaml']"
    assert plain_lazy == b"[]"
    assert lean_answers == plain_answers


@pytest.mark.parametrize("name", ["check-facts", "scan-logs", "fleet"])
def test_the_start_up_loads_no_openssl_nor_dataclasses(name: str, floor: set[str]) -> None:
    """Issue 36: the caches' digests and the fleet's node signature are BLAKE2b from
    CPython's built-in ``_blake2`` (``hashlib`` loads OpenSSL, ~3-5 ms); the CLI's option
    records are NamedTuples and the scan's progress a plain class (importing
    ``dataclasses`` and making three cost ~3-5 ms). The fleet's health checks still make
    dataclasses (rules/health.py)."""
    extra = _imported(["-m", "blackwell_doctor", *FIGURES["commands"][name]["argv"]]) - floor
    assert not extra & {"hashlib", "_hashlib", "_sha256"}
    if name != "fleet":
        assert "dataclasses" not in extra


def test_fleet_judges_log_findings_without_the_scanners_data(floor: set[str]) -> None:
    """Issue 36: fleet judges its hosts' log findings with the log catalogue's entries alone,
    from the built catalogue's cache (ruledata/logs.py): the literal index, and with it the
    grammars' record texts and the prose dismissals, is made only where a log is scanned;
    no TOML is parsed on a warm cache."""
    extra = _imported(["-m", "blackwell_doctor", *FIGURES["commands"]["fleet"]["argv"]]) - floor
    assert "blackwell_doctor.ruledata.logs" in extra  # the fixtures' kernel logs are judged
    unneeded = {
        "blackwell_doctor.ruledata.records",
        "blackwell_doctor.ruledata.dismissal",
        "blackwell_doctor.collect.logs.matcher",
        "tomllib",
    }
    assert not extra & unneeded
