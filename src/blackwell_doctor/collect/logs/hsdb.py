"""The Hyperscan database of the catalogue's literals, serialized once per catalogue.

Where: ``$XDG_CACHE_HOME/blackwell-doctor/hyperscan/`` (``~/.cache/...`` when unset; beside
the probe's ``nvrtc/``), one file per literal set and Hyperscan version,
``hyperscan-<key>.db``, where ``key`` is the SHA-256 of the Hyperscan version and the
literals. ``BLACKWELL_DOCTOR_NO_CACHE=1``
neither reads nor writes it. Deleting the folder is always safe: the next scan rebuilds.

A cache file is something else may have written, so it is loaded only when all of these
hold, else the database is built from the catalogue as if there were no file (and the file
is rewritten):

- a regular file (not a link), owned by this user, writable by no one else, in a folder
  that is the same (the rules ssh applies to its keys), at most :data:`MAX_BYTES`;
- its header names this key (so a file of another catalogue or Hyperscan is not used), and
  the SHA-256 of its payload equals the one in the header (truncated or damaged);
- Hyperscan deserializes it (its own checks: the platform, the CRC of the bytecode);
- the loaded database finds every literal where it is, in a line of all of them (a
  database of other patterns, however it was made, is refused).

Writes go to a temporary file in the folder, then ``os.replace``: a reader never sees half
a file. Any error on the way (a read-only home, a full disk) only costs the build.
"""

from __future__ import annotations

import hashlib
import os
import stat
import tempfile
from pathlib import Path
from typing import Any

MAGIC = b"blackwell-doctor hyperscan 1\n"
MAX_BYTES = 16 << 20
_DIGEST = 32


def cache_dir() -> Path | None:
    """The cache folder, or None when caching is off."""
    if os.environ.get("BLACKWELL_DOCTOR_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "blackwell-doctor" / "hyperscan"


def cache_key(version: str, literals: list[bytes]) -> bytes:
    digest = hashlib.sha256(version.encode() + b"\0")
    for lit in literals:
        digest.update(len(lit).to_bytes(4, "big") + lit)
    return digest.digest()


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def _read(path: Path) -> bytes | None:
    """The file's bytes if it may be trusted as this user's own, else None. The folder is
    opened first and the file through it, so that neither can be swapped for a link between
    the checks and the read."""
    nofollow = os.O_NOFOLLOW | os.O_CLOEXEC
    try:
        folder = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | nofollow)
    except OSError:
        return None
    try:
        if not _private(os.fstat(folder)):
            return None
        fd = os.open(path.name, os.O_RDONLY | nofollow, dir_fd=folder)
    except OSError:
        return None
    finally:
        os.close(folder)
    with os.fdopen(fd, "rb") as fh:
        st = os.fstat(fh.fileno())
        if not stat.S_ISREG(st.st_mode) or not _private(st) or st.st_size > MAX_BYTES:
            return None
        return fh.read(MAX_BYTES + 1)


def _write(path: Path, blob: bytes) -> None:
    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=".hyperscan-", dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


def _finds_every_literal(db: Any, literals: list[bytes]) -> bool:
    line = b"\n".join(literals)
    expected: set[tuple[int, int]] = set()
    at = 0
    for n, lit in enumerate(literals):
        expected.add((at + len(lit), n))
        at += len(lit) + 1
    found: set[tuple[int, int]] = set()

    def on_match(n: int, _from: int, to: int, _flags: int, _ctx: object) -> None:
        found.add((to, n))

    db.scan(line, match_event_handler=on_match)
    return expected <= found


def _build(hyperscan: Any, literals: list[bytes]) -> Any:
    db = hyperscan.Database(mode=hyperscan.HS_MODE_BLOCK)
    db.compile(expressions=literals, ids=list(range(len(literals))), flags=0, literal=True)
    return db


def _load(hyperscan: Any, blob: bytes, key: bytes, literals: list[bytes]) -> Any | None:
    head = len(MAGIC)
    if not blob.startswith(MAGIC) or blob[head : head + _DIGEST] != key:
        return None
    payload = blob[head + 2 * _DIGEST :]
    if hashlib.sha256(payload).digest() != blob[head + _DIGEST : head + 2 * _DIGEST]:
        return None
    try:
        db = hyperscan.loadb(payload, hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)
        if not _finds_every_literal(db, literals):
            return None
    except Exception:  # any refusal of the file means: build instead
        return None
    return db


def literal_database(hyperscan: Any, literals: list[bytes]) -> Any:
    """A block-mode database of ``literals`` (id = index): from the cache when a trusted
    file of this key is there, else compiled (and cached)."""
    folder = cache_dir()
    if folder is None or not literals:
        return _build(hyperscan, literals)
    key = cache_key(str(getattr(hyperscan, "__version__", "?")), literals)
    path = folder / f"hyperscan-{key.hex()[:32]}.db"
    blob = _read(path)
    if blob is not None:
        db = _load(hyperscan, blob, key, literals)
        if db is not None:
            return db
    db = _build(hyperscan, literals)
    payload = hyperscan.dumpb(db)
    _write(path, MAGIC + key + hashlib.sha256(payload).digest() + payload)
    return db
