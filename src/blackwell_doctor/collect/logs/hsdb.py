"""The Hyperscan database of the catalogue's literals, serialized once per catalogue.

Where: ``$XDG_CACHE_HOME/blackwell-doctor/hyperscan/`` (``~/.cache/...`` when unset; beside
the probe's ``nvrtc/``), one file per file format, literal set and Hyperscan version,
``hyperscan-<key>.db``, where ``key`` is the BLAKE2b-256 (cachefile.digest) of the format's
:data:`MAGIC`, the Hyperscan version and the literals. ``BLACKWELL_DOCTOR_NO_CACHE=1``
neither reads nor writes it. Deleting the folder is always safe: the next scan rebuilds.

A cache file is something else may have written, so it is loaded only when all of these
hold, else the database is built from the catalogue as if there were no file (and the file
is rewritten):

- a regular file (not a link), owned by this user, writable by no one else, in a folder
  that is the same (the rules ssh applies to its keys), at most :data:`MAX_BYTES`;
- its header names this key (so a file of another catalogue or Hyperscan is not used), and
  its seal holds (the payload's length and CRC-32: cut short or damaged);
- Hyperscan deserializes it (its own checks: the platform, the CRC of the bytecode);
- the loaded database runs here and finds a sample of the literals where they are (every
  :data:`SAMPLE_EVERY`-th, the first and the last, in one line: a database of other
  patterns is refused).

The sample, not every literal: finding all 2,236 took 4,591 Python callbacks, ~23M
instructions, 5% of a ``scan-logs`` start-up (issue 36). What the full check added beyond the
seal guarded only against a writer of this user's private folder who wrote a database of
these literals less a few, with its seal: such a writer can as well plant the built log
catalogue (ruledata/logs.py, taken when its types hold) or this user's shell profile; the
cache's trust is the folder's, as ssh's is for its keys.

Writes go to a temporary file in the folder, then ``os.replace``: a reader never sees half
a file. Any error on the way (a read-only home, a full disk) only costs the build.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from blackwell_doctor.collect.cachefile import cache_dir as _cache_dir
from blackwell_doctor.collect.cachefile import digest, read_private, sealed, unseal, write_atomic

MAGIC = b"blackwell-doctor hyperscan 3\n"  # 2: BLAKE2b keys and seals; 3: CRC-32 seals
MAX_BYTES = 16 << 20


def cache_dir() -> Path | None:
    """The cache folder, or None when caching is off."""
    return _cache_dir("hyperscan")


def cache_key(version: str, literals: list[bytes]) -> bytes:
    # This file format (MAGIC) first: the file's name is made of the key, so a tool that
    # writes another format keeps its own file beside this one. Without it two versions of
    # the tool sharing a cache folder (two environments, an upgrade being compared) refused
    # each other's file and compiled the database again on every scan, each overwriting
    # the other's (seen on the device, issue 36: a 591-byte scan-logs took 1.9x the floor).
    # Then the literals' lengths (decimal, comma-separated) and their bytes: a few C calls,
    # not two per literal (2,236 literals: ~1 ms of every scan's start-up, issue 36).
    lengths = ",".join(map(str, map(len, literals))).encode()
    return digest(MAGIC, version.encode() + b"\0", lengths + b"\0", b"".join(literals))


def _read(path: Path) -> bytes | None:
    return read_private(path, MAX_BYTES)


def _write(path: Path, blob: bytes) -> None:
    write_atomic(path, blob, prefix=".hyperscan-")


# Every SAMPLE_EVERY-th literal (and the last) is looked for in a loaded database.
SAMPLE_EVERY = 64


def _finds_sample(db: Any, literals: list[bytes]) -> bool:
    """Whether ``db`` finds every :data:`SAMPLE_EVERY`-th of ``literals`` and the last, each
    under its own id (its index), where it stands in one line of them."""
    ids = [*range(0, len(literals), SAMPLE_EVERY), len(literals) - 1]
    line = b"\n".join(literals[n] for n in ids)
    expected: set[tuple[int, int]] = set()
    at = 0
    for n in ids:
        at += len(literals[n])
        expected.add((at, n))
        at += 1
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
    payload = unseal(blob, MAGIC, key)
    if payload is None:
        return None
    try:
        db = hyperscan.loadb(payload, hyperscan.HS_MODE_BLOCK)
        db.scratch = hyperscan.Scratch(db)
        if not _finds_sample(db, literals):
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
    _write(path, sealed(MAGIC, key, payload))
    return db
