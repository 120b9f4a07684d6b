"""The audit's cache of fatbin scans, keyed by file identity: a file whose path, size,
modification time (ns) and inode are unchanged is not read again. One JSON document under
``$XDG_CACHE_HOME/blackwell-doctor/`` (default ``~/.cache``), written atomically; a cache
that cannot be read is started afresh, one that cannot be written is left as it was.
``audit --image`` keeps what it read of an image beside it, by image id."""

from __future__ import annotations

import contextlib
import os
import tempfile
from collections.abc import Mapping
from pathlib import Path
from typing import TypeVar

import msgspec

from blackwell_doctor.facts.stack import GpuPackage

CACHE_VERSION = 2
_F = TypeVar("_F")


class CachedScan(msgspec.Struct, array_like=True):
    size: int
    mtime_ns: int
    inode: int
    # Per container, its targets as (name, "major.minor", bytes); [] for a file without GPU
    # code; None for a file that is not ELF.
    units: list[list[tuple[str, str, int]]] | None
    # The containers in its data sections, which the library loads itself.
    loaded: list[list[tuple[str, str, int]]] = msgspec.field(default_factory=list)


class _CacheFile(msgspec.Struct):
    version: int
    files: dict[str, CachedScan]


def default_cache_path(environ: Mapping[str, str]) -> Path:
    home = environ.get("HOME") or str(Path.home())
    base = environ.get("XDG_CACHE_HOME") or str(Path(home) / ".cache")
    return Path(base) / "blackwell-doctor" / f"audit-scans-v{CACHE_VERSION}.json"


def load_cache(path: Path) -> dict[str, CachedScan]:
    doc = _read(path, _CacheFile)
    return doc.files if doc is not None and doc.version == CACHE_VERSION else {}


def save_cache(path: Path, files: dict[str, CachedScan]) -> None:
    _write(path, msgspec.json.encode(_CacheFile(CACHE_VERSION, files)))


# audit --image: an image id is the digest of its configuration, which names its layers'
# content (rootfs.diff_ids): the same id is the same files, so what was read of an image
# is kept whole by its id (and the site directories read), the newest MAX_IMAGES.
IMAGE_CACHE_VERSION = 1
MAX_IMAGES = 32


class CachedImage(msgspec.Struct):
    sites: list[str]
    packages: list[GpuPackage]
    triton_site: str | None = None


class _ImageCacheFile(msgspec.Struct):
    version: int
    images: dict[str, CachedImage]


def default_image_cache_path(environ: Mapping[str, str]) -> Path:
    return default_cache_path(environ).with_name(f"audit-images-v{IMAGE_CACHE_VERSION}.json")


def load_image_cache(path: Path) -> dict[str, CachedImage]:
    doc = _read(path, _ImageCacheFile)
    return doc.images if doc is not None and doc.version == IMAGE_CACHE_VERSION else {}


def save_image(path: Path, image_id: str, entry: CachedImage) -> None:
    """``entry`` for ``image_id`` added to the cache at ``path`` (the oldest dropped)."""
    images = load_image_cache(path)
    images.pop(image_id, None)
    images[image_id] = entry
    kept = dict(list(images.items())[-MAX_IMAGES:])
    _write(path, msgspec.json.encode(_ImageCacheFile(IMAGE_CACHE_VERSION, kept)))


def _read(path: Path, kind: type[_F]) -> _F | None:
    """The cache file at ``path`` as ``kind``; None when it cannot be read or decoded (the
    cache is started afresh)."""
    try:
        return msgspec.json.decode(path.read_bytes(), type=kind)
    except (OSError, msgspec.DecodeError, msgspec.ValidationError):
        return None


def _write(path: Path, data: bytes) -> None:
    """``data`` written to ``path`` atomically; left as it was when that fails."""
    with contextlib.suppress(OSError):
        path.parent.mkdir(parents=True, exist_ok=True)
        fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".audit-", suffix=".tmp")
        try:
            with os.fdopen(fd, "wb") as f:
                f.write(data)
            os.replace(tmp, path)
        except OSError:
            with contextlib.suppress(OSError):
                os.unlink(tmp)
