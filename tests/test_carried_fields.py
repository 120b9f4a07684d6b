"""Fields carried from one record into another by name (issue 38): where a struct takes a
source's same-named fields in one loop (``**{name: getattr(src, name) for name in NAMES}``)
instead of a keyword each, mypy no longer sees those fields' types at the call. This test
does instead: every carried name is a field of both, of the same type (or, where the code
gives None when there is no source, the target's type is the source's or None), and the
names are those the code carries, read from the modules themselves. (It found one that
was not: rules/memory.py's budget took /proc/meminfo's MemAvailable, ``int | None``, into an
``int`` field, which the explicit keyword had narrowed by the ``is None`` test above it; that
carry was taken back.)"""

from __future__ import annotations

import dataclasses
import typing
from typing import Any

import msgspec
import pytest

from tests.conftest import skip_without

try:  # app/soak imports the bench client (aiohttp: the dev extra)
    from blackwell_doctor.app import soak
except ModuleNotFoundError as exc:
    skip_without(exc)
from blackwell_doctor.collect.probe import runner
from blackwell_doctor.collect.probe.protocol import TileLine
from blackwell_doctor.facts.document import TileProbe
from blackwell_doctor.facts.model import ArchFacts, ModelFacts
from blackwell_doctor.report import model as report_model
from blackwell_doctor.report.bench import Comparison, SoakInterval
from blackwell_doctor.rules import gate


def _hints(cls: type) -> dict[str, Any]:
    return typing.get_type_hints(cls)


def _fields(cls: type) -> tuple[str, ...]:
    if dataclasses.is_dataclass(cls):
        return tuple(f.name for f in dataclasses.fields(cls))
    return tuple(f.name for f in msgspec.structs.fields(cls))


# (what carries, the names, source type, target type, the target may be the source's | None)
CARRIED = [
    ("rules/gate._row", gate._AS_COMPARED, Comparison, gate.GateRow, False),
    ("collect/probe/runner._tile_probe", runner._MEASURED, TileLine, TileProbe, False),
    ("app/soak interval", soak._COUNTED, soak._Bucket, SoakInterval, False),
    (
        "report/model summary",
        report_model._ARCH_FIELDS,
        ArchFacts,
        report_model.ModelSummary,
        True,
    ),
    (
        "report/model report",
        report_model._MODEL_FIELDS,
        ModelFacts,
        report_model.ModelReport,
        False,
    ),
]


@pytest.mark.parametrize(
    ("names", "source", "target", "or_none"),
    [pytest.param(*row[1:], id=row[0]) for row in CARRIED],
)
def test_every_carried_field_has_one_type_on_both_sides(
    names: tuple[str, ...], source: type, target: type, or_none: bool
) -> None:
    assert names, "nothing carried"
    assert len(set(names)) == len(names)
    src, dst = _hints(source), _hints(target)
    for name in names:
        assert name in _fields(source), f"{source.__name__} has no field {name}"
        assert name in _fields(target), f"{target.__name__} has no field {name}"
        want = {src[name], src[name] | None} if or_none else {src[name]}
        assert dst[name] in want, f"{name}: {src[name]} -> {dst[name]}"


def test_a_type_that_differs_is_caught() -> None:
    """The check above can fail: a name whose types differ between two records."""

    class A(msgspec.Struct):
        x: int

    class B(msgspec.Struct):
        x: str

    assert _hints(B)["x"] not in {_hints(A)["x"]}
