"""The Python GPU stack of a container image, read WITHOUT running anything of it
(``audit --image``).

Through the Docker API (collect.dockerapi: DOCKER_HOST, a ping): a container is created
from the image, never started, with no network, and removed at the end whatever happens.
Its files are read with the archive endpoint (``HEAD`` for a path's stat, ``GET`` for a
tar stream of a path):

1. the interpreter the runtime would use: the entrypoint (+ command) when it is a Python or
   a script whose ``#!`` names one (``vllm`` -> ``#!/opt/venv/bin/python3``), else
   ``python3`` / ``python`` on the image's PATH (its ``Env``, else Docker's default);
2. its site directories, in ``sys.path`` order: PYTHONPATH, then a venv's
   (``pyvenv.cfg`` beside the interpreter or one level up; the base's too with
   ``include-system-site-packages = true``), the user site of root, then the prefix's
   (Debian's ``dist-packages`` for a ``/usr`` Python, ``lib`` and ``lib64``
   ``site-packages``), each kept when it exists in the image;
3. each site directory streamed once as a tar (``tarfile`` in stream mode ``r|``): the
   ``*.dist-info`` / ``*.egg-info`` files and ``torch/version.py`` are written to a private
   temporary mirror of the directory (so the inventory of ``audit`` reads them as it reads
   a venv, with the same caps; a FIFO or a device there is mirrored as a FIFO, which it
   refuses as on a host), and each shared object or cubin is spooled to one temporary file
   at a time, scanned by the same fatbin reader, and deleted: memory stays bounded whatever
   the size of libtorch_cuda.so. One that is not a regular file, or that the reader finds
   malformed, is a file that could not be read, with its reason, as on a host. The
   temporary directory is removed at the end.

The image's Triton ptxas and nvcc cannot run without starting the image. The ptxas
Triton would pick (the same choice as on a host, its TRITON_PTXAS_* variables from the
image's Env) is judged by the CUDA release its binary carries (the string ``ptxas
--version`` prints, read from the stream) against the release that added the target;
without a readable release it is "not run" (checks/stack.toml [image]). nvcc is found by
path (CUDA_HOME, PATH, /usr/local/cuda) and its release read from the toolkit's
``version.json``. Engine down,
image missing, no permission, a deadline passed: ``Unavailable`` with the reason in words.
"""

from __future__ import annotations

import base64
import contextlib
import errno
import io
import json
import os
import posixpath
import re
import shutil
import tarfile
import tempfile
import time
import uuid
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from blackwell_doctor.collect.dockerapi import (
    EngineUnavailable,
    connect,
    engine_reason,
    one_line,
)
from blackwell_doctor.collect.regularfile import NotRegularFile
from blackwell_doctor.collect.stack.cache import CachedImage, load_image_cache, save_image
from blackwell_doctor.collect.stack.fatbin import Malformed
from blackwell_doctor.collect.stack.inventory import (
    MAX_RECORD_BYTES,
    SHARED_OBJECT,
    Scan,
    inventory,
    scan_triples,
)
from blackwell_doctor.collect.stack.ptxas import BINARY_RELEASE, triton_ptxas
from blackwell_doctor.collect.stack.toolchain import host_memory_bytes
from blackwell_doctor.facts.document import Unavailable
from blackwell_doctor.facts.stack import (
    GpuPackage,
    ImageSource,
    NvccFacts,
    NvccSource,
    PtxasTarget,
    StackFacts,
)
from blackwell_doctor.ruledata.stack import StackData, version_pair

API_TIMEOUT_S = 60.0  # each Docker API call and each read of a stream
DEFAULT_DEADLINE_S = 900.0  # the whole reading of one image
CHUNK_BYTES = 1 << 20
# One METADATA/RECORD file is copied to the mirror up to one byte past the inventory's cap
# (torch's RECORD is ~2 MB), so that the inventory says it is larger than the cap.
MAX_METADATA_BYTES = MAX_RECORD_BYTES + 1
MAX_SCRIPT_BYTES = 64 << 10  # an entrypoint read for its #! line
MAX_LINK_HOPS = 8
MAX_PTXAS_BYTES = 256 << 20  # a ptxas binary searched for its release (31 MB in CUDA 12.8)
# Docker's default PATH for an image that sets none (the engine's oci defaults).
DEFAULT_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# The entrypoint given to the container that is never started: an image without CMD or
# ENTRYPOINT could not be created otherwise.
NEVER_STARTED = "/blackwell-doctor-audit-never-started"
LABEL = "blackwell-doctor.audit"
_PYTHON = re.compile(r"^python(\d+(\.\d+)?)?$")
_VERSION_IN_NAME = re.compile(r"^python(\d+\.\d+)$")
_DIR = 1 << 31  # Go's os.ModeDir, as the archive stat header carries it
_SYMLINK = 1 << 27


class _Deadline(Exception):
    pass


class _NoInterpreter(Exception):
    pass


@dataclass
class _Container:
    """The created container's files, through the archive endpoint."""

    api: Any
    id: str
    deadline: float
    # path -> its stat: a container that never starts never changes, so each path is asked
    # once however many lookups (interpreter, site folders, ptxas, nvcc) pass through it.
    _stats: dict[str, dict[str, Any] | None] = field(default_factory=dict)

    def stat(self, path: str) -> dict[str, Any] | None:
        """The archive stat of ``path`` (name, size, mode, linkTarget: the link resolved in
        the image, every hop); None when it does not exist. The engine answers 404 for a
        missing path and 500 for one that runs through a file (``/bin/python3/x``)."""
        if path not in self._stats:
            self._stats[path] = self._ask_stat(path)
        return self._stats[path]

    def _ask_stat(self, path: str) -> dict[str, Any] | None:
        response = self.api.head(
            self.api._url("/containers/{0}/archive", self.id),
            params={"path": path},
            timeout=API_TIMEOUT_S,
        )
        with contextlib.closing(response):
            if response.status_code in (404, 500):
                return None
            self.api._raise_for_status(response)
            header = response.headers.get("X-Docker-Container-Path-Stat")
        if not header:
            return None
        stat: dict[str, Any] = json.loads(base64.b64decode(header))
        return stat

    def follow(self, path: str) -> tuple[str, dict[str, Any] | None]:
        """Where ``path``'s symbolic links lead, and the stat of what is there (None when
        it is missing or more than MAX_LINK_HOPS links lead on): one walk of the chain."""
        for _ in range(MAX_LINK_HOPS):
            st = self.stat(path)
            if st is None or not int(st.get("mode", 0)) & _SYMLINK or not st.get("linkTarget"):
                return path, st
            path = str(st["linkTarget"])
        return path, None

    def resolved(self, path: str) -> dict[str, Any] | None:
        """The stat of what ``path`` names, symbolic links followed."""
        return self.follow(path)[1]

    def is_dir(self, path: str) -> bool:
        st = self.resolved(path)
        return st is not None and bool(int(st.get("mode", 0)) & _DIR)

    def is_file(self, path: str) -> bool:
        st = self.resolved(path)
        return st is not None and not int(st.get("mode", 0)) & _DIR

    @contextlib.contextmanager
    def tar(self, path: str) -> Iterator[tarfile.TarFile]:
        """The tar stream of ``path`` (its members named under its base name), read as it
        arrives; the response is closed on leaving, read to its end or not."""
        api = self.api
        # identity: otherwise the engine gzips the archive (requests asks for gzip). The
        # client's timeout stays on each read (the SDK's get_archive turns it off).
        response = api._get(
            api._url("/containers/{0}/archive", self.id),
            params={"path": path},
            stream=True,
            headers={"Accept-Encoding": "identity"},
        )
        try:
            api._raise_for_status(response)
            chunks = response.raw.stream(CHUNK_BYTES, decode_content=False)
            reader = io.BufferedReader(_ChunkReader(chunks, self.deadline), CHUNK_BYTES)
            with tarfile.open(fileobj=reader, mode="r|") as tar:
                yield tar
        finally:
            response.close()

    def read_small(self, path: str, limit: int) -> bytes | None:
        """The bytes of the regular file at ``path`` (links followed), or None when it is
        missing, not a regular file or larger than ``limit``."""
        real, st = self.follow(path)
        if st is None or int(st.get("mode", 0)) & (_DIR | _SYMLINK) or st.get("size", 0) > limit:
            return None
        with self.tar(real) as tar:
            for member in tar:
                if member.isfile() and member.size <= limit:
                    f = tar.extractfile(member)
                    return f.read() if f is not None else None
        return None

    def search(self, path: str, pattern: re.Pattern[bytes], limit: int) -> bytes | None:
        """The first group of ``pattern`` in the regular file at ``path`` (links followed),
        read as a stream in chunks (the tail of each kept for a match across two), at most
        ``limit`` bytes of it; None when it is missing or nothing matches."""
        real, st = self.follow(path)
        if st is None or int(st.get("mode", 0)) & _DIR:
            return None
        with self.tar(real) as tar:
            for member in tar:
                f = tar.extractfile(member) if member.isfile() else None
                if f is None:
                    continue
                tail, seen = b"", 0
                while seen < limit and (chunk := f.read(CHUNK_BYTES)):
                    seen += len(chunk)
                    m = pattern.search(tail + chunk)
                    if m:
                        return m.group(1)
                    tail = chunk[-256:]
                return None
        return None


class _ChunkReader(io.RawIOBase):
    """The SDK's chunk generator as a file, for tarfile; past the deadline, a _Deadline."""

    def __init__(self, chunks: Iterable[bytes], deadline: float) -> None:
        self._chunks: Iterator[bytes] = iter(chunks)
        self._left = b""
        self._deadline = deadline

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        while not self._left:
            if time.monotonic() > self._deadline:
                raise _Deadline()
            try:
                self._left = next(self._chunks)
            except StopIteration:
                return 0
        n = min(len(buffer), len(self._left))
        buffer[:n] = self._left[:n]
        self._left = self._left[n:]
        return n


@dataclass
class _ImageScans:
    """The scans of the files streamed out of the image, by their path in the mirror (where
    the inventory's ``locate_file`` puts them); links resolved to their targets."""

    scans: dict[str, tuple[int, Scan]] = field(default_factory=dict)
    links: dict[str, str] = field(default_factory=dict)
    # Files that could not be read, as the host's reader says it (not a regular file; a
    # malformed ELF or fatbin), raised again for the inventory.
    failed: dict[str, OSError | Malformed] = field(default_factory=dict)

    def scan(self, path: Path) -> tuple[int, Scan]:
        key = os.path.normpath(str(path))
        for _ in range(MAX_LINK_HOPS):
            if key in self.scans:
                return self.scans[key]
            if key in self.failed:
                raise self.failed[key]
            if key not in self.links:
                break
            key = self.links[key]
        raise FileNotFoundError(errno.ENOENT, "not in the image", str(path))


def _env(config: Mapping[str, Any]) -> dict[str, str]:
    env: dict[str, str] = {}
    for item in config.get("Env") or []:
        name, sep, value = str(item).partition("=")
        if sep:
            env[name] = value
    return env


def _which(box: _Container, name: str, dirs: list[str]) -> str | None:
    if name.startswith("/"):
        return name if box.is_file(name) else None
    for d in dirs:
        candidate = posixpath.join(d, name)
        if d and box.is_file(candidate):
            return candidate
    return None


def _shebang(box: _Container, exe: str, dirs: list[str]) -> tuple[str, str] | None:
    """The Python a script's ``#!`` line names (``/usr/bin/env python3`` looked up on the
    image's PATH) and the line as written, or None."""
    head = box.read_small(exe, MAX_SCRIPT_BYTES)
    if not head or not head.startswith(b"#!"):
        return None
    line = head[2:].split(b"\n", 1)[0].decode("utf-8", "replace").strip()
    words = line.split()
    if not words:
        return None
    interp = words[0]
    if posixpath.basename(interp) == "env":
        rest = [w for w in words[1:] if not w.startswith("-")]
        if not rest:
            return None
        interp = _which(box, rest[0], dirs) or ""
    if not interp or not _PYTHON.match(posixpath.basename(interp)):
        return None
    return interp, line[:200]


def choose_interpreter(
    box: _Container, config: Mapping[str, Any], dirs: list[str]
) -> tuple[str, str]:
    """The interpreter the image's entrypoint would run, and how it was chosen."""
    entry = [str(w) for w in config.get("Entrypoint") or []]
    argv = entry + [str(w) for w in config.get("Cmd") or []]
    if argv:
        first = argv[0]
        exe = _which(box, first, dirs)
        if exe is not None:
            if _PYTHON.match(posixpath.basename(first)):
                return exe, f"entrypoint {first}"
            found = _shebang(box, exe, dirs)
            if found is not None:
                return found[0], f"entrypoint {first}: #!{found[1]}"
    for name in ("python3", "python"):
        exe = _which(box, name, dirs)
        if exe is not None:
            return exe, f"{name} on PATH"
    raise _NoInterpreter()


def _cfg(text: bytes) -> dict[str, str]:
    out: dict[str, str] = {}
    for line in text.decode("utf-8", "replace").splitlines():
        key, sep, value = line.partition("=")
        if sep:
            out[key.strip().lower()] = value.strip()
    return out


def _base_sites(prefix: str, xy: str, home: str | None) -> list[str]:
    """Where a non-venv Python at ``prefix`` looks, in sys.path order (CPython's site.py;
    Debian adds dist-packages for the system Python, Fedora lib64 first)."""
    dirs = [f"{home}/.local/lib/python{xy}/site-packages"] if home else []
    if prefix == "/usr":
        dirs += [
            f"/usr/local/lib/python{xy}/dist-packages",
            "/usr/lib/python3/dist-packages",
            f"/usr/lib/python{xy}/dist-packages",
            f"/usr/local/lib64/python{xy}/site-packages",
            f"/usr/local/lib/python{xy}/site-packages",
        ]
    dirs += [
        f"{prefix}/lib64/python{xy}/site-packages",
        f"{prefix}/lib/python{xy}/site-packages",
        f"{prefix}/lib/python{xy}/dist-packages",
    ]
    return dirs


def site_dirs(
    box: _Container, python: str, env: Mapping[str, str], user: str
) -> tuple[list[str], str]:
    """The site directories of ``python`` in the image, in sys.path order, that exist, and
    its version ("3.12.3" from a venv's pyvenv.cfg, else "3.12" from its file name)."""
    exe_dir = posixpath.dirname(python)
    venv: str | None = None
    cfg: dict[str, str] = {}
    for candidate in (exe_dir, posixpath.dirname(exe_dir)):
        text = box.read_small(posixpath.join(candidate, "pyvenv.cfg"), MAX_SCRIPT_BYTES)
        if text is not None:
            venv, cfg = candidate, _cfg(text)
            break
    st = box.stat(python)
    real = str(st.get("linkTarget") or python) if st else python
    prefix = posixpath.dirname(posixpath.dirname(real))
    version = cfg.get("version") or cfg.get("version_info") or ""
    m = _VERSION_IN_NAME.match(posixpath.basename(real))
    if not version and m:
        version = m.group(1)
    if not version:
        version = env.get("PYTHON_VERSION", "")
    xy = ".".join(version.split(".")[:2])
    if not re.fullmatch(r"\d+\.\d+", xy):
        root = venv or prefix
        xy = next((f"3.{n}" for n in range(16, 5, -1) if box.is_dir(f"{root}/lib/python3.{n}")), "")
        version = xy
    home = env.get("HOME") or ("/root" if user in ("", "root", "0") else None)
    wanted = [p for p in env.get("PYTHONPATH", "").split(":") if p.startswith("/")]
    if venv is not None:
        wanted += [f"{venv}/lib/python{xy}/site-packages", f"{venv}/lib64/python{xy}/site-packages"]
        if cfg.get("include-system-site-packages", "").lower() == "true":
            wanted += _base_sites(prefix, xy, home)
    else:
        wanted += _base_sites(prefix, xy, home)
    found: list[str] = []
    for d in wanted:
        d = posixpath.normpath(d)
        if d not in found and box.is_dir(d):
            found.append(d)
    return found, version


def _stream_site(box: _Container, site: str, mirror: Path, work: Path, scans: _ImageScans) -> None:
    """One site directory, streamed once: metadata to ``mirror``, shared objects scanned."""
    real = box.follow(site)[0]
    spool = work / "object"
    with box.tar(real) as tar:
        for member in tar:
            parts = member.name.split("/", 1)
            if len(parts) < 2 or not parts[1]:
                continue
            rel = posixpath.normpath(parts[1])
            if rel.startswith(("..", "/")):
                continue
            key = os.path.normpath(str(mirror / rel))
            base = posixpath.basename(rel)
            top = rel.split("/", 1)[0]
            if member.issym() or member.islnk():
                name = member.linkname
                if member.islnk():
                    target = posixpath.normpath(name.split("/", 1)[1] if "/" in name else name)
                elif name.startswith("/"):
                    if not name.startswith(real.rstrip("/") + "/"):
                        continue
                    target = posixpath.relpath(name, real)
                else:
                    target = posixpath.normpath(posixpath.join(posixpath.dirname(rel), name))
                if not target.startswith(".."):
                    scans.links[key] = os.path.normpath(str(mirror / target))
                continue
            metadata = top.endswith((".dist-info", ".egg-info")) or rel == "torch/version.py"
            if not member.isfile():
                if member.isfifo() or member.isdev():
                    if metadata:
                        (mirror / rel).parent.mkdir(parents=True, exist_ok=True)
                        os.mkfifo(mirror / rel)
                    elif SHARED_OBJECT.search(base):
                        scans.failed[key] = NotRegularFile(key)
                continue
            if metadata:
                out = mirror / rel
                out.parent.mkdir(parents=True, exist_ok=True)
                _copy(tar, member, out, MAX_METADATA_BYTES)
            elif SHARED_OBJECT.search(base):
                _copy(tar, member, spool)
                try:
                    scans.scans[key] = (member.size, scan_triples(str(spool)))
                except Malformed as exc:
                    scans.failed[key] = exc
                finally:
                    spool.unlink(missing_ok=True)


def _copy(
    tar: tarfile.TarFile, member: tarfile.TarInfo, out: Path, limit: int | None = None
) -> None:
    """``member`` written to ``out``, its first ``limit`` bytes when given (the stream
    skips the rest)."""
    source = tar.extractfile(member)
    if source is None:
        return
    with open(out, "wb") as f:
        if limit is None:
            shutil.copyfileobj(source, f, CHUNK_BYTES)
            return
        left = limit
        while left > 0 and (chunk := source.read(min(left, CHUNK_BYTES))):
            f.write(chunk)
            left -= len(chunk)


def _nvcc(box: _Container, env: Mapping[str, str], dirs: list[str]) -> NvccFacts | None:
    """The nvcc FlashInfer's JIT would find in the image (flashinfer/jit/cpp_ext.py:
    CUDA_HOME, PATH, /usr/local/cuda), its release from the toolkit's version.json."""
    candidates: list[tuple[str, NvccSource]] = []
    if env.get("CUDA_HOME"):
        candidates.append((posixpath.join(env["CUDA_HOME"], "bin", "nvcc"), "CUDA_HOME"))
    on_path = _which(box, "nvcc", dirs)
    if on_path:
        candidates.append((on_path, "PATH"))
    candidates.append(("/usr/local/cuda/bin/nvcc", "/usr/local/cuda"))
    for path, source in candidates:
        real, st = box.follow(path)
        if st is None or int(st.get("mode", 0)) & _DIR:  # not a file (box.is_file)
            continue
        root = posixpath.dirname(posixpath.dirname(real))
        version = None
        text = box.read_small(posixpath.join(root, "version.json"), MAX_SCRIPT_BYTES)
        with contextlib.suppress(ValueError, TypeError, AttributeError):
            full = str(json.loads(text or b"")["cuda_nvcc"]["version"])
            version = ".".join(full.split(".")[:2])
        return NvccFacts(path=path, source=source, version=version)
    return None


def _ptxas(
    box: _Container, bin_dir: str, targets: Sequence[str], env: Mapping[str, str], data: StackData
) -> list[PtxasTarget]:
    """Triton's ptxas for each target, judged by the CUDA release written in the binary
    (what ``ptxas --version`` prints) against the release that added the target
    (checks/stack.toml [cold_start.min_cuda]: ptxas and nvcc come in the same release);
    a target without a row, or a ptxas whose release cannot be read, is left out."""
    results: list[PtxasTarget] = []
    releases: dict[str, str | None] = {}
    for target in targets:
        need = data.cold_start.min_cuda.get(target)
        if target not in data.ptxas.isa or need is None:
            continue
        path, source = triton_ptxas(Path(bin_dir), target, env, lambda p: box.is_file(str(p)))
        where = str(path)
        if not box.is_file(where):
            release, ok, detail = None, False, "ptxas not found"
        else:
            if where not in releases:
                found = box.search(where, BINARY_RELEASE, MAX_PTXAS_BYTES)
                releases[where] = found.decode() if found else None
            release = releases[where]
            have = version_pair(release or "")
            if release is None or have is None:
                continue
            ok = have >= (version_pair(need) or (0, 0))
            detail = (
                ""
                if ok
                else data.image.ptxas_too_old.format(release=release, target=target, need=need)
            )
        results.append(
            PtxasTarget(
                target=target,
                path=where,
                source=source,
                version=release,
                ok=ok,
                detail=detail,
                by="release",
            )
        )
    return results


def read_image_stack(
    ref: str,
    data: StackData,
    *,
    ptxas_targets: Sequence[str],
    environ: Mapping[str, str],
    cache_path: Path | None = None,
    deadline_s: float = DEFAULT_DEADLINE_S,
) -> StackFacts | Unavailable:
    """The GPU stack of image ``ref`` (see the module's docstring), or why it could not be
    read. ``cache_path``: the image cache (collect.stack.cache), None for none."""
    words = data.image
    try:
        client = connect(API_TIMEOUT_S, environ)
    except EngineUnavailable as exc:
        return Unavailable(f"Docker engine: {exc}")
    import docker.errors
    import requests

    try:
        try:
            image = client.images.get(ref)
        except docker.errors.ImageNotFound:
            return Unavailable(words.not_found.format(image=ref))
        container = client.containers.create(
            image.id,
            entrypoint=[NEVER_STARTED],
            command=[],
            network_disabled=True,
            network_mode="none",
            labels={LABEL: "never-started"},
            name=f"blackwell-doctor-audit-{uuid.uuid4().hex[:12]}",
        )
        try:
            box = _Container(client.api, str(container.id), time.monotonic() + deadline_s)
            with tempfile.TemporaryDirectory(prefix="bd-audit-image-") as tmp:
                return _read(box, ref, image, data, Path(tmp), ptxas_targets, cache_path)
        except _Deadline:
            return Unavailable(words.deadline.format(image=ref, seconds=f"{deadline_s:g}"))
        finally:
            with contextlib.suppress(docker.errors.DockerException, requests.RequestException):
                container.remove(force=True, v=True)
    except (docker.errors.DockerException, requests.RequestException, OSError) as exc:
        return Unavailable(f"image {ref}: {engine_reason(exc, API_TIMEOUT_S, environ)}")
    except (tarfile.TarError, ValueError) as exc:
        # A stream cut short or not a tar, a stat header that is not JSON.
        return Unavailable(f"image {ref}: {one_line(exc)}")
    finally:
        client.close()


def _stream(
    box: _Container, sites: list[str], data: StackData, tmp: Path
) -> tuple[list[GpuPackage], str | None]:
    """The GPU packages of ``sites`` (each streamed once) and the site directory that holds
    Triton, if it is there."""
    work = tmp / "work"
    work.mkdir()
    scans = _ImageScans()
    mirrors = []
    for i, site in enumerate(sites):
        folder = tmp / f"site-{i}"
        folder.mkdir()
        mirrors.append(str(folder))
        _stream_site(box, site, folder, work, scans)
    seen, packages = inventory(mirrors, data, scans)
    triton_site = None
    if "triton" in seen:
        # Triton's folder in the image: its distribution's mirror stands for its site dir.
        mirror = os.path.normpath(str(seen["triton"].locate_file("")))
        triton_site = sites[mirrors.index(mirror)] if mirror in mirrors else sites[0]
    return packages, triton_site


def _read(
    box: _Container,
    ref: str,
    image: Any,
    data: StackData,
    tmp: Path,
    targets: Sequence[str],
    cache_path: Path | None,
) -> StackFacts | Unavailable:
    words = data.image
    config: Mapping[str, Any] = image.attrs.get("Config") or {}
    env = _env(config)
    path = env.get("PATH", DEFAULT_PATH)
    dirs = [d for d in path.split(":") if d.startswith("/")]
    try:
        python, how = choose_interpreter(box, config, dirs)
    except _NoInterpreter:
        return Unavailable(words.no_python.format(image=ref, path=path))
    sites, version = site_dirs(box, python, env, str(config.get("User") or ""))
    if not sites:
        return Unavailable(words.no_site.format(python=python, image=ref))
    cache = load_image_cache(cache_path) if cache_path is not None else {}
    hit = cache.get(str(image.id))
    if hit is not None and hit.sites == sites:
        packages, triton_site = hit.packages, hit.triton_site
    else:
        packages, triton_site = _stream(box, sites, data, tmp)
        if cache_path is not None:
            save_image(cache_path, str(image.id), CachedImage(sites, packages, triton_site))
    names = {p.name for p in packages}
    ptxas: list[PtxasTarget] = []
    if triton_site is not None:
        bin_dir = f"{triton_site}/triton/backends/nvidia/bin"
        ptxas = _ptxas(box, bin_dir, targets, env, data)
    return StackFacts(
        python=python,
        python_version=version or "unknown",
        site_dirs=sites,
        packages=packages,
        ptxas=ptxas,
        ptxas_not_run=(
            words.ptxas_not_run.format(image=ref) if "triton" in names and not ptxas else None
        ),
        nvcc=_nvcc(box, env, dirs) if "flashinfer-python" in names else None,
        max_jobs=env.get("MAX_JOBS"),
        cpus=os.cpu_count(),
        memory_bytes=host_memory_bytes(),
        cached_files=sum(p.shared_objects for p in packages) if hit is not None else 0,
        environment={n: env[n][:256] for n in data.backends.environment.names if n in env},
        image=ImageSource(ref=ref, id=str(image.id), interpreter_from=how),
    )
