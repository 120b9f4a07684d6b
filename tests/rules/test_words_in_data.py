"""Every word a user reads for a check or a recommend action lives in checks/ (issue 9, part 3):
the advice and commands are data, the code only picks which and fills the placeholders.

Two halves: every name the code uses for a piece of wording (an [action.notes] or [launch]
key, a [check.command_sets] set) is in the catalogue and every one there is used; and no
advice is left as a string literal anywhere in the package (an AST scan for prose that tells
the user to do something: a command, or a clause opening with an imperative), bar the
allowances below, each with its reason.
"""

from __future__ import annotations

import ast
import re
from pathlib import Path

from blackwell_doctor.ruledata.checkdata import load_shipped
from blackwell_doctor.ruledata.rules import Distros, load_rule_data

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "blackwell_doctor"

# Advice: a command, or a clause that opens with an imperative ("...; run X", "then reboot").
_ADVICE = re.compile(
    r"(^|[:;.(]\s*|\bthen\s+|\bor\s+)(run|install|upgrade|downgrade|set|remove|pin|give|"
    r"measure|fix|use|clear|add|disable|enable|report|capture|mount|see|try|reboot|serve|"
    r"check|put)\b|\b(sudo|nvidia-smi|docker|export [A-Z_]+=|blackwell-doctor [a-z])",
    re.IGNORECASE,
)

# (file under the package, function) -> why its advice-looking literals stay in code.
ALLOWED = {
    ("rules/engine.py", "_judge"): "'check crashed': the engine's own error line",
    # The document formats' own chrome (headings, shell and compose comments), not a
    # check's or an action's words; a renderer loads no rule data (import-linter), so these
    # stay until the recommendation document carries them.
    ("render/recommend.py", "render_terminal"): "'Run command': the run command's label",
    ("render/recommend.py", "render_markdown"): "'Run command': the run command's label",
    ("render/recommend.py", "render_shell"): "the script's comments on MODEL_DIR and secrets",
    ("render/recommend.py", "render_compose"): "the compose file's comments on the image's "
    "pin and MODEL_DIR",
    ("render/nfd.py", "render_nfd"): "the NFD file's header comment (which command writes it)",
    ("render/model.py", "_text"): "'see the problems below': a pointer to the section that follows",
}


def _prose(text: str) -> bool:
    return sum(1 for w in text.split() if re.search("[A-Za-z]{2}", w)) >= 3


_HELP_NAMES = {"_HELP", "SUMMARIES", "EXAMPLES"}


def _help_texts(tree: ast.AST) -> set[ast.AST]:
    """The ``help=`` of every call (typer's options and commands), the ``_HELP`` a command
    is declared with, and the --help pages' ``SUMMARIES`` and ``EXAMPLES`` (cli/options.py,
    issue 40: each command's line in the command list and its examples, string values of
    one dict each): the CLI's documentation, as a docstring is a function's."""
    out: set[ast.AST] = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            out |= {k.value for k in node.keywords if k.arg == "help"}
        elif isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id in _HELP_NAMES for t in node.targets
        ):
            value = node.value
            out |= set(value.values) if isinstance(value, ast.Dict) else {value}
    # help="a" "b" is one constant; help=("a " f"{b}") a JoinedStr; help=X if c else Y both.
    for node in list(out):
        if isinstance(node, ast.IfExp):
            out |= {node.body, node.orelse}
    return out


def advice_literals(source: str) -> list[tuple[int, str, str]]:
    """(line, enclosing function, text) of every advice-looking string literal: not
    docstrings, not typer help (an option's docstring), not error messages (``raise``),
    f-strings read with ``{}`` for their values."""
    tree = ast.parse(source)
    parents = {child: node for node in ast.walk(tree) for child in ast.iter_child_nodes(node)}
    helps = _help_texts(tree)

    def enclosing(node: ast.AST) -> tuple[str, bool]:
        name, raised = "<module>", False
        p = parents.get(node)
        while p is not None:
            raised = raised or isinstance(p, ast.Raise)
            if isinstance(p, ast.FunctionDef | ast.AsyncFunctionDef) and name == "<module>":
                name = p.name
            p = parents.get(p)
        return name, raised

    found: list[tuple[int, str, str]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.JoinedStr):
            text = "".join(
                str(v.value) if isinstance(v, ast.Constant) else "{}" for v in node.values
            )
        elif isinstance(node, ast.Constant) and isinstance(node.value, str):
            text = node.value
        else:
            continue
        if isinstance(parents.get(node), ast.JoinedStr | ast.Expr) or node in helps:
            continue  # a part of an f-string (seen whole), a docstring, an option's help
        function, raised = enclosing(node)
        if not raised and _prose(text) and _ADVICE.search(text):
            found.append((node.lineno, function, text))
    return found


def _scanned_files() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


def test_the_scan_finds_advice_and_passes_observations() -> None:
    sample = '''
REMEDY = "Install driver 595 or newer, then reboot."
SEEN = "the Docker engine is not reachable at the socket"
FIX = "the engine has no GPU runtime: docker info shows it"
def f(bdf):
    """Docstrings may say: run the tests."""
    observed = f"driver {bdf} is older than 595"
    cmd = f"sudo setpci -s {bdf} ECAP_ACS+0x6.w=0000:000c"
    note = "the figures are one report; measure your own workload"
    raise ValueError("refusing: set --model-dir first")
'''
    found = {(function, text[:12]) for _, function, text in advice_literals(sample)}
    assert found == {
        ("<module>", "Install driv"),
        ("<module>", "the Docker e"),
        ("<module>", "the engine h"),
        ("f", "sudo setpci "),
        ("f", "the figures "),
    }


# The literals that issue 20's narrower pattern (the docker command only, not the word) let
# through, as they stood in code at 03757f9 (f-strings read with {} for their values): the
# pattern is as wide again, so each is a hit; their words now live in checks/catalogue.toml
# ([words.apply], [words.apply_plan], [words.docker]).
NARROWED_AWAY = [
    "{}: apply failed: Docker engine not reachable ({}); nothing was changed",
    "rollback plan (Docker engine not reachable: {}; what would happen):\n",
    "{}: rollback failed: Docker engine not reachable ({})",
    "  Docker engine: not reachable ({}); the plan below is what would happen, without the "
    "comparison with a running container",
    "no Docker engine socket at {}",
    "permission denied on {} (root, or a member of the docker group)",
]


def test_what_the_narrower_pattern_let_through_is_caught_again() -> None:
    source = "\n".join(f"X{i} = {text!r}" for i, text in enumerate(NARROWED_AWAY))
    assert [text for _, _, text in advice_literals(source)] == NARROWED_AWAY


def test_typer_help_is_documentation_but_only_help() -> None:
    # help= is an option's docstring; the same words anywhere else in the call are a hit.
    sample = """
import typer
A = typer.Option("--x", help="Scan this container's logs (Docker API). Repeatable.")
B = typer.Option("--y", callback=say("Scan this container's logs (Docker API). Repeatable."))
_HELP = "Measure serving performance; run it against a server."
"""
    found = [(line, text[:4]) for line, _, text in advice_literals(sample)]
    assert found == [(4, "Scan")]


def test_no_advice_left_in_code_anywhere_in_the_package() -> None:
    left: list[str] = []
    seen_allowed: set[tuple[str, str]] = set()
    for path in _scanned_files():
        rel = path.relative_to(PACKAGE).as_posix()
        for line, function, text in advice_literals(path.read_text(encoding="utf-8")):
            for key in ((rel, function), (rel, "*")):
                if key in ALLOWED:
                    seen_allowed.add(key)
                    break
            else:
                left.append(f"{rel}:{line} ({function}): {text[:80]!r}")
    assert left == [], "advice belongs in checks/catalogue.toml:\n" + "\n".join(left)
    # An allowance nothing needs any more goes: the list only shrinks.
    assert set(ALLOWED) == seen_allowed, set(ALLOWED) - seen_allowed


def _string_constants() -> set[str]:
    out: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.Constant) and isinstance(node.value, str):
                out.add(node.value)
    return out


def _keys_asked_for(method: str) -> set[str]:
    """The literal first arguments of ``X.<method>("key", ...)`` calls (and of
    ``_p2p_note``, the p2p action's) anywhere in the package."""
    keys: set[str] = set()
    for path in PACKAGE.rglob("*.py"):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.Call) or not node.args:
                continue
            name = getattr(node.func, "attr", getattr(node.func, "id", ""))
            if name not in (method, f"_p2p_{method}"):
                continue
            arg = node.args[0]
            # "a" if cond else "b": both are asked for.
            branches = [arg.body, arg.orelse] if isinstance(arg, ast.IfExp) else [arg]
            keys |= {
                b.value
                for b in branches
                if isinstance(b, ast.Constant) and isinstance(b.value, str)
            }
    return keys


def test_every_note_and_reason_the_code_asks_for_is_worded() -> None:
    rules = load_rule_data()
    notes = set(rules.launch.notes).union(*(a.notes for a in rules.actions))
    assert _keys_asked_for("note") - notes == set()
    assert _keys_asked_for("reason") - set(rules.launch.why) == set()
    # The scan sees the calls (a scan that found nothing would pass the lines above).
    assert {"no_speedup", "measured_broken", "scan_logs"} <= _keys_asked_for("note")
    assert {"omp_num_threads", "model_not_sized"} <= _keys_asked_for("reason")


def test_every_note_and_reason_in_the_catalogue_is_used() -> None:
    rules = load_rule_data()
    constants = _string_constants()
    worded = {
        *(f"launch.notes.{k}" for k in rules.launch.notes),
        *(f"launch.why.{k}" for k in rules.launch.why),
        *(f"action {a.key}: notes.{k}" for a in rules.actions for k in a.notes),
    }
    unused = sorted(w for w in worded if w.rsplit(".", 1)[1] not in constants)
    assert unused == []


def test_every_command_set_a_distribution_names_is_worded() -> None:
    rules = load_rule_data()
    distros = load_shipped("distros.toml", Distros)
    sets = {
        "driver.version": {d.packages for d in distros.distro if d.packages} | {"unknown"},
        "pci.iommu": {d.boot for d in distros.distro if d.boot} | {"unknown"},
        "pci.acs": {"per_bridge"},
        "health.power": {"per_gpu"},
    }
    for check_id, named in sets.items():
        # Named and worded are the same sets: no distribution without its commands, and no
        # commands that no distribution reaches.
        assert set(rules.checks[check_id].command_sets) == named, check_id
    for check_id, spec in rules.checks.items():
        if check_id not in sets:
            assert spec.command_sets == {}, f"{check_id}: command sets no code names"
