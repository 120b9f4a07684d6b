"""The document ``--version`` prints (issue 40): this install, as a bug report needs it.
Read by :func:`blackwell_doctor.collect.about.read_about`, laid out by
:mod:`blackwell_doctor.render.about`."""

from __future__ import annotations

from typing import NamedTuple


class About(NamedTuple):
    """This install, as ``--version`` states it."""

    version: str
    commit: str  # short hash, or "unknown (...)" with why
    catalogue_sha256: str  # of checks/*.toml, names and bytes, in name order (12 hex)
    catalogue_files: int
    schemas: dict[str, int]  # each shipped JSON Schema's document and the version it describes
    python: str  # "3.11.7 CPython (Linux x86_64) /path/to/python"
    bindings: dict[str, str]  # distribution -> its version, or "not installed"
