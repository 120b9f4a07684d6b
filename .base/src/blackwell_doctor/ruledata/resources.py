"""Data shipped with the package: rule data (checks/), probe sources (kernels_probe/), schemas.

In a wheel the top-level folders live under ``blackwell_doctor/_data``; in a source checkout
they are read where they are, so editing ``checks/*.toml`` takes effect without a reinstall.

Paths are built from this file's place, not with ``importlib.resources`` (whose import,
zipfile and tempfile with it, cost every command ~10 ms of start-up): the package is
installed as files (a wheel unpacked or a checkout), never imported from a zip.
"""

from __future__ import annotations

from pathlib import Path

_PACKAGE = Path(__file__).resolve().parents[1]


def data_dir(name: str) -> Path:
    """The shipped folder ``name`` (``checks`` or ``kernels_probe``)."""
    packaged = _PACKAGE / "_data" / name
    if packaged.is_dir():
        return packaged
    checkout = _PACKAGE.parents[1] / name
    if checkout.is_dir():
        return checkout
    raise FileNotFoundError(f"blackwell-doctor data folder {name!r} is missing from the install")


def schema_text(name: str) -> str:
    """A JSON Schema shipped in ``blackwell_doctor/schemas`` (e.g. ``report.schema.json``)."""
    return (_PACKAGE / "schemas" / name).read_text(encoding="utf-8")
