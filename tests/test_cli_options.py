"""The options several commands share are declared once (``blackwell_doctor.cli.options``):
the same flag means the same thing, in the same words, wherever it appears; where a
command's words differ, they say what the option does there."""

from __future__ import annotations

from pathlib import Path

import typer
from typer.core import TyperGroup, TyperOption
from typer.testing import CliRunner

from blackwell_doctor.cli import app
from blackwell_doctor.cli.basics import grouped
from blackwell_doctor.cli.options import FactsOptions, HostFacts, Launch, LaunchFlags

_JUDGING = ("check", "fleet", "slurm-health")


def _options(command: str) -> dict[str, TyperOption]:
    group = typer.main.get_command(app)
    assert isinstance(group, TyperGroup)
    cmd = group.commands[command]
    return {
        p.opts[0]: p for p in cmd.params if isinstance(p, TyperOption) and p.opts[0][:2] == "--"
    }


def _help(command: str, flag: str) -> str:
    text = _options(command)[flag].help
    assert text
    return text


def test_select_and_ignore_read_alike_in_every_judging_command() -> None:
    for flag in ("--select", "--ignore"):
        helps = {_help(c, flag) for c in _JUDGING}
        assert len(helps) == 1, helps
        assert "prefixes, repeatable" in helps.pop()


def test_fail_on_and_strict_say_what_they_do_in_each_command() -> None:
    assert _help("check", "--fail-on") == _help("fleet", "--fail-on")
    assert "exit code 1" in _help("check", "--fail-on")
    assert "drains the node" in _help("slurm-health", "--fail-on")
    assert "drain" in _help("slurm-health", "--strict")
    assert "Exit 3" in _help("check", "--strict")
    assert _help("fleet", "--strict").startswith(_help("check", "--strict").rstrip("."))
    for command in _JUDGING:  # the same choices and default everywhere
        option = _options(command)["--fail-on"]
        assert list(getattr(option.type, "choices", ())) == ["warn", "fail"]
        assert option.default == "fail"
        assert _options(command)["--strict"].default is False


def test_recommend_and_apply_take_the_same_launch_options() -> None:
    shared = set(_options("recommend")) & set(_options("apply"))
    assert {"--facts", "--runtime", "--catalogue", "--name", "--bind", "--port"} <= shared
    for flag in shared:
        assert _help("recommend", flag) == _help("apply", flag), flag


def test_an_option_group_stands_where_the_command_names_it() -> None:
    # check names its facts group between --ignore and --embed-facts (cli/check.py):
    # --help lists the group's options there, in the group's order (issue 38).
    assert list(_options("check")) == [
        "--facts",
        "--format",
        "--output",
        "--fail-on",
        "--strict",
        "--select",
        "--ignore",
        "--no-probe",
        "--host-root",
        "--gpu-timeout",
        "--logs",
        "--container",
        "--journal",
        "--kernel-log",
        "--model-dir",
        "--hub",
        "--stack",
        "--python",
        "--image",
        "--bench",
        "--embed-facts",
        "--verbose",
        "--example",
    ]


def test_a_grouped_command_gets_the_group_typed() -> None:
    # The annotations are read as typer reads them: names of this module.
    got: list[object] = []

    @grouped
    def command(*, launch: Launch, facts: HostFacts, verbose: bool = False) -> None:
        got.extend((launch, facts, verbose))

    toy = typer.Typer()
    toy.command()(command)
    toy.command("other")(lambda: None)  # two commands: typer keeps the name in the args
    args = ["command", "--port", "9000", "--host-root", "/host", "--journal", "-e", "A=1"]
    result = CliRunner().invoke(toy, [*args, "--verbose"])
    assert result.exit_code == 0, result.output
    launch, facts, verbose = got
    assert isinstance(launch, LaunchFlags)
    assert isinstance(facts, FactsOptions)
    assert (launch.port, launch.name, launch.env) == (9000, "blackwell-doctor-vllm", ["A=1"])
    assert (facts.host_root, facts.journal, facts.no_probe, facts.logs) == (
        Path("/host"),
        True,
        False,
        None,
    )
    assert verbose is True


def test_a_group_whose_option_is_no_field_of_its_class_fails_where_declared() -> None:
    import pytest

    from blackwell_doctor.cli.basics import OptionGroup
    from blackwell_doctor.cli.options import NoProbe

    wrong = OptionGroup(LaunchFlags, (("no_probe", NoProbe, False),))
    with pytest.raises(TypeError, match="LaunchFlags has no field no_probe"):
        wrong.check_fields()
    mistyped = OptionGroup(FactsOptions, (("host_root", NoProbe, False),))  # bool, not a Path
    with pytest.raises(TypeError, match="FactsOptions has no field host_root"):
        mistyped.check_fields()
