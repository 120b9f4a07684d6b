"""Facts → report → recommendation: the pipeline ``recommend`` and ``apply`` share.

Kept outside ``recommend/`` (which stays pure: facts and a report in, actions and a launch
out) because it obtains the facts, which may mean collecting them on this host.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

from blackwell_doctor.app.obtain import FactsRequest, obtain_facts
from blackwell_doctor.facts.errors import UserError

if TYPE_CHECKING:
    from blackwell_doctor.facts.document import Facts
    from blackwell_doctor.recommend.launch import LaunchSpec
    from blackwell_doctor.recommend.plan import LaunchOptions, Recommendation


@dataclass(frozen=True)
class Advice:
    facts: Facts
    recommendation: Recommendation
    spec: LaunchSpec | None  # the real launch (secret values included); None without a GPU


def advise(
    request: FactsRequest,
    options: LaunchOptions,
    *,
    catalogue: Path | None,
    environ: Mapping[str, str],
    stdin: BinaryIO,
    vet: Callable[[Facts], None] | None = None,
) -> Advice:
    """Load the runtime catalogue (``catalogue``, or the shipped one), obtain and judge the
    facts, let ``vet`` refuse them (it raises UserError), and derive the recommendation.
    A bad catalogue or launch option is a UserError."""
    from blackwell_doctor.recommend.plan import build_recommendation
    from blackwell_doctor.ruledata.checkdata import CatalogueError
    from blackwell_doctor.ruledata.runtimes import load_catalogue, parse_catalogue
    from blackwell_doctor.ruledata.validate import ValidationError
    from blackwell_doctor.rules.evaluate import evaluate

    try:
        if catalogue is None:
            runtimes = load_catalogue()
        else:
            from blackwell_doctor.collect.inputfile import CATALOGUE, read_input

            text = read_input(catalogue, CATALOGUE).decode("utf-8")  # bounded, UTF-8
            runtimes = parse_catalogue(text, source=str(catalogue))
    except CatalogueError as exc:
        raise UserError(str(exc)) from None
    obtained = obtain_facts(request, environ=environ, stdin=stdin)
    if vet is not None:
        vet(obtained.facts)
    report = evaluate(obtained.facts, source=obtained.source)
    try:
        recommendation, spec = build_recommendation(obtained.facts, report, runtimes, options)
    except (CatalogueError, ValidationError) as exc:
        raise UserError(str(exc)) from None
    return Advice(obtained.facts, recommendation, spec)
