"""``audit``: the facts of this host's GPUs (or another host's facts file) with the Python GPU
stack of an environment read into them, for the stack.* checks to judge."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import BinaryIO

from blackwell_doctor.app.obtain import FactsRequest, Obtained, obtain_facts
from blackwell_doctor.facts.errors import UserError


@dataclass(frozen=True, kw_only=True)
class AuditRequest:
    facts: FactsRequest  # the GPUs judged against: this host (no probes) or --facts FILE
    python: Path | None = None  # the environment's interpreter; None: this one
    python_timeout_s: float = 10.0
    cache: bool = True


def audit(request: AuditRequest, *, environ: Mapping[str, str], stdin: BinaryIO) -> Obtained:
    """The facts with ``stack`` read from ``request.python``'s environment. An interpreter
    that does not answer is a UserError (the user named it)."""
    import msgspec

    from blackwell_doctor.collect.stack.cache import default_cache_path
    from blackwell_doctor.collect.stack.interpreter import (
        InterpreterError,
        ask_interpreter,
        this_interpreter,
    )
    from blackwell_doctor.collect.stack.inventory import read_stack
    from blackwell_doctor.facts.document import NvmlFacts
    from blackwell_doctor.ruledata.stack import load_stack_data

    obtained = obtain_facts(request.facts, environ=environ, stdin=stdin)
    if request.python is None:
        interpreter = this_interpreter()
    else:
        try:
            interpreter = ask_interpreter(request.python, request.python_timeout_s)
        except InterpreterError as exc:
            raise UserError(str(exc)) from None
    data = load_stack_data()
    targets = list(data.ptxas.probe)
    nvml = obtained.facts.nvml
    if isinstance(nvml, NvmlFacts):
        for g in nvml.gpus:
            if isinstance(g.compute_capability, tuple):
                t = f"sm_{g.compute_capability[0]}{g.compute_capability[1]}a"
                if t not in targets:
                    targets.append(t)
    stack = read_stack(
        interpreter,
        data,
        ptxas_targets=targets,
        environ=environ,
        cache_path=default_cache_path(environ) if request.cache else None,
    )
    return Obtained(msgspec.structs.replace(obtained.facts, stack=stack), obtained.source)
