"""ORG/NAME[@REVISION] as users hold models: resolved in the local Hugging Face cache.

The layout is the one ``huggingface_hub`` writes and reads (its ``file_download`` and
``_snapshot_download`` modules, 2.4): ``<HF_HUB_CACHE>/models--ORG--NAME/`` holds
``refs/<revision>`` (a file with the commit hash), ``snapshots/<commit>/<file>`` (links into
``../../blobs/<etag>``, or the files themselves where links are not possible) and
``blobs/``. The cache folder, the folder name and the checks of a repo id and a commit hash
are the library's own (``constants.HF_HUB_CACHE`` from HF_HUB_CACHE / HF_HOME /
XDG_CACHE_HOME as it reads them, ``repo_folder_name``, ``validate_repo_id``,
``REGEX_COMMIT_HASH``). Its resolvers are not used to read the cache because they trust it:
``try_to_load_from_cache`` and ``snapshot_download(local_files_only=True)`` read a ref file
whole and follow a snapshot's links wherever they point, and ``snapshot_download`` refuses a
snapshot its tree cache calls incomplete (config and index downloaded first: exactly the
state ``model`` sizes from the index). A cache is input: here each ref is read bounded, and a
ref that names no snapshot, a link out of the repository's folder or a config or index past
the size any real one has is a :class:`CacheError`, one line, before anything is read.

No network: this module never opens a connection (``--hub`` is ``collect.model.hub``).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from blackwell_doctor.collect.model.scan import MAX_JSON_BYTES, ModelDirError
from blackwell_doctor.facts.model import ModelSource

# What can be a repo id with an optional revision, checked before the library is imported
# (a path that is no directory and has no slash is said so without it): ORG/NAME, then
# ``@REVISION``. The library's validate_repo_id is the full check.
_SPEC = re.compile(r"([A-Za-z0-9][\w.-]*/[\w.-]+)(?:@([\w./-]{1,255}))?")
# A ref file holds a 40-hex commit (and maybe a newline): anything longer is no ref.
_MAX_REF_BYTES = 4096
# Entries of one snapshot folder looked at (the largest checkpoints have ~1,000 shards).
_MAX_SNAPSHOT_ENTRIES = 100_000
_JSON_NAMES = ("config.json", "hf_quant_config.json")


class CacheError(ModelDirError):
    """The cache cannot be read for this repo; one line, exit 2."""


class NotCached(CacheError):
    """The repo (or the revision asked for) is not in the cache at all."""


@dataclass(frozen=True)
class RepoSpec:
    repo: str  # ORG/NAME
    revision: str  # "main" when none was given
    text: str  # as the user wrote it


def parse_repo_spec(text: str) -> RepoSpec | None:
    """``ORG/NAME`` or ``ORG/NAME@REVISION`` as a RepoSpec; None when ``text`` is not of
    that form. A form the library's ``validate_repo_id`` refuses is a CacheError naming
    why."""
    m = _SPEC.fullmatch(text)
    if m is None:
        return None
    repo, revision = m.group(1), m.group(2) or "main"
    if ".." in revision.split("/") or revision.startswith("/") or revision.endswith("/"):
        raise CacheError(f"{text}: revision {revision!r} is not a branch, tag or commit name")
    from huggingface_hub.errors import HFValidationError

    # Public (the library's reference documents huggingface_hub.utils.validate_repo_id); its
    # lazy __init__ re-exports it in a form mypy does not count as an export.
    from huggingface_hub.utils import validate_repo_id  # type: ignore[attr-defined]

    try:
        validate_repo_id(repo)
    except HFValidationError as exc:
        raise CacheError(
            f"{text} is not a directory, nor a Hugging Face repo id "
            f"({' '.join(str(exc).split())[:200]})"
        ) from None
    return RepoSpec(repo=repo, revision=revision, text=text)


def hub_cache_dir() -> Path:
    """The cache folder as huggingface_hub reads it from the environment (HF_HUB_CACHE,
    else HUGGINGFACE_HUB_CACHE, else HF_HOME/hub, else $XDG_CACHE_HOME/huggingface/hub)."""
    from huggingface_hub import constants

    return Path(constants.HF_HUB_CACHE)


@dataclass(frozen=True)
class CachedSnapshot:
    folder: Path  # snapshots/<commit>
    repo_folder: Path  # models--ORG--NAME, with its symlinks resolved: links stay inside
    source: ModelSource


def _inside(folder: str, path: str) -> bool:
    return os.path.commonpath([folder, path]) == folder


def _commit_of(spec: RepoSpec, repo_folder: Path) -> str:
    from huggingface_hub.file_download import REGEX_COMMIT_HASH

    if REGEX_COMMIT_HASH.fullmatch(spec.revision):
        return spec.revision
    refs = repo_folder / "refs"
    ref = refs / spec.revision
    shown = f"refs/{spec.revision}"
    if not ref.exists():
        known = (
            sorted(p.relative_to(refs).as_posix() for p in refs.rglob("*") if p.is_file())[:8]
            if refs.is_dir()
            else []
        )
        raise NotCached(
            f"{spec.repo}: revision {spec.revision!r} is not in the Hugging Face cache "
            f"({repo_folder} has no {shown}; cached refs: {', '.join(known) or 'none'})"
        )
    if not _inside(os.path.realpath(refs), os.path.realpath(ref)):
        raise CacheError(
            f"{spec.repo}: {shown} in the Hugging Face cache is a link to "
            f"{os.path.realpath(ref)}, outside its refs folder: a corrupt or hostile cache"
        )
    from blackwell_doctor.collect.regularfile import read_regular

    try:
        data, size = read_regular(ref, _MAX_REF_BYTES)
    except OSError as exc:
        raise CacheError(f"{spec.repo}: cannot read {shown}: {exc.strerror or exc}") from None
    text = data.decode("ascii", "replace").strip()
    if size > _MAX_REF_BYTES or not REGEX_COMMIT_HASH.fullmatch(text):
        raise CacheError(
            f"{spec.repo}: {shown} in the Hugging Face cache holds {size} bytes, not a commit "
            "hash: a corrupt or hostile cache"
        )
    return text


def resolve_cached(spec: RepoSpec, cache_dir: Path | None = None) -> CachedSnapshot:
    """The snapshot folder of ``spec`` in the cache (``cache_dir``, else the library's), with
    its files checked: every entry a file or a link that stays inside the repository's
    folder, config and index files within MAX_JSON_BYTES. NotCached when the repo or the
    revision is not there; CacheError when the cache is broken or hostile."""
    from huggingface_hub.file_download import repo_folder_name

    cache = cache_dir if cache_dir is not None else hub_cache_dir()
    repo_folder = cache / repo_folder_name(repo_id=spec.repo, repo_type="model")
    if not repo_folder.is_dir():
        raise NotCached(
            f"{spec.text} is not a directory, and {spec.repo} is not in the Hugging Face cache "
            f"at {cache} (HF_HUB_CACHE / HF_HOME): download its config and index "
            f"(hf download {spec.repo} config.json model.safetensors.index.json) or read it "
            "from the Hub with --hub"
        )
    commit = _commit_of(spec, repo_folder)
    real = os.path.realpath(repo_folder)
    snapshot = repo_folder / "snapshots" / commit
    where = f"snapshots/{commit}"
    if not snapshot.is_dir():
        again = f"download it again (hf download {spec.repo}) or read it from the Hub with --hub"
        if commit == spec.revision:
            raise NotCached(
                f"{spec.repo}: commit {commit} is not in the Hugging Face cache: {again}"
            )
        raise CacheError(
            f"{spec.repo}: refs/{spec.revision} in the Hugging Face cache names commit {commit} "
            f"but {where} is not there (a pruned or interrupted download): {again}"
        )
    if not _inside(real, os.path.realpath(snapshot)):
        raise CacheError(
            f"{spec.repo}: {where} is a link to {os.path.realpath(snapshot)}, outside the "
            "cache's folder for the repo: a corrupt or hostile cache"
        )
    with os.scandir(snapshot) as it:
        for count, entry in enumerate(it):
            if count >= _MAX_SNAPSHOT_ENTRIES:
                raise CacheError(
                    f"{spec.repo}: {where} holds more than {_MAX_SNAPSHOT_ENTRIES:,} entries: "
                    "a corrupt or hostile cache"
                )
            _check_entry(spec, where, real, entry)
    source = ModelSource(
        kind="hf-cache",
        repo=spec.repo,
        revision=spec.revision,
        commit=commit,
        location=str(snapshot),
    )
    return CachedSnapshot(folder=snapshot, repo_folder=Path(real), source=source)


def _check_entry(spec: RepoSpec, where: str, real: str, entry: os.DirEntry[str]) -> None:
    shown = f"{where}/{entry.name}"
    if entry.is_symlink():
        target = os.path.realpath(entry.path)
        if not _inside(real, target):
            raise CacheError(
                f"{spec.repo}: {shown} in the Hugging Face cache is a link to {target}, "
                "outside the cache's folder for the repo: a corrupt or hostile cache (not read)"
            )
    if entry.name in _JSON_NAMES or entry.name.endswith(".safetensors.index.json"):
        try:
            size = entry.stat().st_size
        except OSError:
            return  # a dangling link: the scan names it
        if size > MAX_JSON_BYTES:
            raise CacheError(
                f"{spec.repo}: {shown} in the Hugging Face cache is {size:,} bytes, above the "
                f"{MAX_JSON_BYTES:,} any config or index has: a corrupt or hostile cache "
                "(not read)"
            )
