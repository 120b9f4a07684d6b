"""Files this user's own runs wrote under ``$XDG_CACHE_HOME/blackwell-doctor/`` (``~/.cache``
when unset), read back only when they may be trusted: the Hyperscan database of the log
catalogue (collect/logs/hsdb.py), the decoded shipped catalogues and the built log
catalogue (:class:`CatalogueCache`, which the CLI installs for ruledata/checkdata.py and
ruledata/logs.py) and the programs of the regular
expressions the CLI compiled (:class:`RegexProgramCache`, for facts/regexcache.py).

``BLACKWELL_DOCTOR_NO_CACHE=1`` neither reads nor writes any of them; deleting the folder is
always safe (the next run rebuilds).

A cache file is something else may have written, so :func:`read_private` returns its bytes
only when it is a regular file (not a link), owned by this user, writable by no one else, in
a folder that is the same (the rules ssh applies to its keys), at most ``limit`` bytes; the
caller then checks its header and its seal (:func:`sealed` / :func:`unseal`). Writes go
to a temporary file in the folder, then ``os.replace``: a reader never sees half a file. Any
error on the way (a read-only home, a full disk) only costs the rebuild.

The seal is the payload's length and CRC-32, as gzip and zip seal theirs: it finds a file
cut short, grown or damaged. A cryptographic hash there would guard against nothing more:
whoever can write this user's private folder can write a matching digest too (the trust is
the folder's, above). The keys stay BLAKE2b digests of what a file was made from
(:func:`digest`): a key must not meet another input's by chance. Hashing the payloads with
BLAKE2b took ~2 ms of every scan-logs start-up (1.6 MB: the built log catalogue and the
Hyperscan database) and ~1.4 ms of fleet's; CRC-32 takes ~0.4 ms (issue 36).
"""

from __future__ import annotations

import os
import stat
import sys
import zlib
from pathlib import Path
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from blackwell_doctor.facts.regexcache import Program

try:  # the built-in BLAKE2 (hashlib's own): importing hashlib loads OpenSSL, ~5 ms
    from _blake2 import blake2b as _blake2b  # type: ignore[import-not-found,unused-ignore]
except ImportError:  # pragma: no cover - a build without it
    from hashlib import blake2b as _blake2b  # type: ignore[assignment,no-redef,unused-ignore]

_DIGEST = 32


def digest(*parts: bytes) -> bytes:
    """The BLAKE2b-256 of ``parts`` one after the other: the cache files' keys. (BLAKE2b, not
    SHA-256: CPython's built-in SHA-256 took ~3 times as long over the same bytes, issue 36.)"""
    h = _blake2b(digest_size=_DIGEST)
    for part in parts:
        h.update(part)
    return bytes(h.digest())


def cache_dir(kind: str) -> Path | None:
    """The cache folder of ``kind`` (``hyperscan``, ``catalogues``), or None when caching is off."""
    if os.environ.get("BLACKWELL_DOCTOR_NO_CACHE"):
        return None
    base = os.environ.get("XDG_CACHE_HOME", "")
    root = Path(base) if os.path.isabs(base) else Path.home() / ".cache"
    return root / "blackwell-doctor" / kind


def _private(st: os.stat_result) -> bool:
    return st.st_uid == os.geteuid() and not st.st_mode & (stat.S_IWGRP | stat.S_IWOTH)


def read_private(path: Path, limit: int) -> bytes | None:
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
        if not stat.S_ISREG(st.st_mode) or not _private(st) or st.st_size > limit:
            return None
        # Its size and one byte more (a file that grew fails its seal), not ``limit``:
        # read(n) takes n bytes of memory before it reads, 8 MiB for a 21 kB file.
        return fh.read(st.st_size + 1)


def write_atomic(path: Path, blob: bytes, *, prefix: str) -> None:
    """``blob`` into ``path`` (folder made 0700, file 0600 by ``mkstemp``); errors ignored."""
    import tempfile  # ~2 ms: only when a file is written

    try:
        path.parent.mkdir(mode=0o700, parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(prefix=prefix, dir=path.parent)
    except OSError:
        return
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(blob)
        os.replace(tmp, path)
    except OSError:
        Path(tmp).unlink(missing_ok=True)


_SEAL = 12  # the payload's length (8 bytes) and its CRC-32 (4), big-endian


def _seal(payload: bytes) -> bytes:
    return len(payload).to_bytes(8, "big") + zlib.crc32(payload).to_bytes(4, "big")


def sealed(magic: bytes, key: bytes, payload: bytes) -> bytes:
    """A cache file: ``magic``, the 32-byte ``key`` it was made for, the payload's seal
    (its length and CRC-32), the payload."""
    return magic + key + _seal(payload) + payload


def unseal(blob: bytes, magic: bytes, key: bytes) -> bytes | None:
    """The payload of a :func:`sealed` file when it is of this ``magic`` and ``key`` and its
    seal holds (not cut short, not grown, not damaged); else None."""
    head = len(magic)
    if not blob.startswith(magic) or blob[head : head + _DIGEST] != key:
        return None
    start = head + _DIGEST + _SEAL
    payload = blob[start:]
    if _seal(payload) != blob[head + _DIGEST : start]:
        return None
    return payload


def read_sealed(path: Path | None, magic: bytes, key: bytes, limit: int) -> bytes | None:
    """The payload of the :func:`sealed` file at ``path`` when it may be trusted
    (:func:`read_private`) and is intact and of this ``magic`` and ``key``; else None (also
    for no path: caching is off)."""
    blob = read_private(path, limit) if path is not None else None
    return unseal(blob, magic, key) if blob is not None else None


class CatalogueCache:
    """The decoded shipped ``checks/*.toml``, one file per content in
    ``catalogues/<name>-<key>.msgpack``: the MessagePack of what tomllib returned, sealed
    with its key, the :func:`digest` of this format, the Python version (tomllib's), the
    limits checkdata.parse_toml applies and the TOML file's bytes. An edited file is another key;
    a file that cannot be trusted (see above) is parsed again and rewritten."""

    MAGIC = b"blackwell-doctor toml 3\n"  # 2: BLAKE2b keys and seals; 3: CRC-32 seals
    MAX_BYTES = 4 << 20

    @classmethod
    def key(cls, data: bytes) -> bytes:
        from blackwell_doctor.ruledata.checkdata import MAX_KEY_PARTS, MAX_NESTING

        head = f"{sys.version}\0{MAX_KEY_PARTS}\0{MAX_NESTING}\0".encode()
        return digest(cls.MAGIC, head, data)

    def _path(self, name: str, key: bytes) -> Path | None:
        folder = cache_dir("catalogues")
        return None if folder is None else folder / f"{name}-{key.hex()[:32]}.msgpack"

    def get(self, name: str, data: bytes) -> dict[str, Any] | None:
        import msgspec

        key = self.key(data)
        payload = read_sealed(self._path(name, key), self.MAGIC, key, self.MAX_BYTES)
        if payload is None:
            return None
        try:
            raw = msgspec.msgpack.decode(payload)
        except msgspec.DecodeError:
            return None
        return raw if isinstance(raw, dict) else None

    def put(self, name: str, data: bytes, raw: dict[str, Any]) -> None:
        import msgspec

        key = self.key(data)
        path = self._path(name, key)
        if path is None:
            return
        try:
            payload = msgspec.msgpack.encode(raw)
        except (TypeError, OverflowError):  # not cached: a value MessagePack cannot hold
            return
        # MessagePack keeps str, int, float, bool, list and dict as they are; a TOML date or
        # time would come back as another type (and NaN unequal): such a file is not cached.
        if msgspec.msgpack.decode(payload) != raw:
            return
        write_atomic(path, sealed(self.MAGIC, key, payload), prefix=".toml-")

    # A built catalogue (ruledata/logs.py's log catalogue: its entries converted into their
    # structs and its literal index, typed MessagePack), ``<name>-<key>.msgpack`` beside the
    # decoded files. Its key: the digest of this format, the Python version, msgspec's and
    # the inputs (the catalogue's files and the source of the code that builds it), each
    # led by its length.
    BUILT_MAGIC = b"blackwell-doctor built 2\n"  # 2: CRC-32 seals

    @classmethod
    def built_key(cls, inputs: tuple[bytes, ...]) -> bytes:
        import msgspec

        head = f"{sys.version}\0{msgspec.__version__}\0{len(inputs)}\0"
        lengths = ",".join(str(len(part)) for part in inputs)
        return digest(cls.BUILT_MAGIC, head.encode(), lengths.encode(), b"\0", *inputs)

    def get_built(self, name: str, inputs: tuple[bytes, ...]) -> bytes | None:
        key = self.built_key(inputs)
        return read_sealed(self._path(name, key), self.BUILT_MAGIC, key, self.MAX_BYTES)

    def put_built(self, name: str, inputs: tuple[bytes, ...], payload: bytes) -> None:
        key = self.built_key(inputs)
        path = self._path(name, key)
        if path is not None and len(payload) <= self.MAX_BYTES // 2:
            write_atomic(path, sealed(self.BUILT_MAGIC, key, payload), prefix=".built-")


class RegexProgramCache:
    """The programs of the regular expressions the CLI compiled (facts/regexcache.py), one
    file per interpreter build in ``regex/programs-<key>.msgpack``: their MessagePack,
    sealed with its key, the :func:`digest` of this format, the Python version and build
    and the regular-expression engine's own version (``_sre.MAGIC``). Another interpreter is
    another key; a file that cannot be trusted (see above) or decoded is compiled again."""

    # 2: a program's arguments after its index group; 3: BLAKE2b keys and seals; 4: CRC-32
    # seals
    MAGIC = b"blackwell-doctor sre 4\n"
    MAX_BYTES = 8 << 20

    @classmethod
    def key(cls) -> bytes:
        from blackwell_doctor.facts import regexcache

        head = f"{sys.version}\0{sys.implementation.cache_tag}\0{regexcache.engine_version()}"
        return digest(cls.MAGIC, head.encode())

    def _path(self, key: bytes) -> Path | None:
        folder = cache_dir("regex")
        return None if folder is None else folder / f"programs-{key.hex()[:32]}.msgpack"

    def load(self) -> dict[str, Program] | None:
        import msgspec

        from blackwell_doctor.facts import regexcache

        key = self.key()
        payload = read_sealed(self._path(key), self.MAGIC, key, self.MAX_BYTES)
        if payload is None:
            return None
        try:
            return msgspec.msgpack.decode(payload, type=dict[str, regexcache.Program])
        except msgspec.DecodeError:  # ValidationError is one
            return None

    def save(self, programs: dict[str, Program]) -> None:
        import msgspec

        key = self.key()
        path = self._path(key)
        if path is None:
            return
        try:
            payload = msgspec.msgpack.encode(programs)
        except (TypeError, OverflowError, UnicodeEncodeError):  # not kept: compiled again
            return
        write_atomic(path, sealed(self.MAGIC, key, payload), prefix=".sre-")
