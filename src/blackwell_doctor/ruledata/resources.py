"""Data shipped with the package: rule data (checks/), probe sources (kernels_probe/), schemas.

In a wheel the top-level folders live under ``blackwell_doctor/_data``; in a source checkout
they are read where they are, so editing ``checks/*.toml`` takes effect without a reinstall.
"""

from __future__ import annotations

from importlib.resources import files
from importlib.resources.abc import Traversable
from pathlib import Path


def data_dir(name: str) -> Traversable:
    """The shipped folder ``name`` (``checks`` or ``kernels_probe``)."""
    packaged = files("blackwell_doctor") / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = Path(__file__).resolve().parents[3] / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"blackwell-doctor data folder {name!r} is missing from the install")


def schema_text(name: str) -> str:
    """A JSON Schema shipped in ``blackwell_doctor/schemas`` (e.g. ``report.schema.json``)."""
    return (files("blackwell_doctor") / "schemas" / name).read_text(encoding="utf-8")
