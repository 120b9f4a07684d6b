"""The built log catalogue, cached (ruledata/logs.py's load_catalogue through
collect/cachefile.py's CatalogueCache.get_built/put_built): a kept file is used only when it
can be trusted and is of these inputs (the three files and the building code's
source), else the catalogue is built as if there were none, and kept again. Real files in
a temporary cache folder; what a hit gives is compared with what a build gives. The key
stands on the inputs' stamps (checkdata.stamp: path, device, inode, size, modification and
change times), not their bytes."""

from __future__ import annotations

import os
import shutil
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect import cachefile
from blackwell_doctor.collect.cachefile import CatalogueCache
from blackwell_doctor.ruledata import checkdata, decodedcache, logs, vocabulary
from blackwell_doctor.ruledata.resources import data_dir

PATTERN = f"{logs.BUILT_NAME}-*.msgpack"


def _fresh(monkeypatch: pytest.MonkeyPatch) -> None:
    """As a new process: nothing loaded."""
    logs.load_catalogue.cache_clear()
    monkeypatch.setattr(vocabulary, "_LOADED", [])


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("BLACKWELL_DOCTOR_NO_CACHE", raising=False)
    decodedcache.install(CatalogueCache)
    _fresh(monkeypatch)
    yield tmp_path / "blackwell-doctor" / "catalogues"
    decodedcache.install(None)
    logs.load_catalogue.cache_clear()


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """One element per catalogue built (a hit builds none)."""
    calls: list[int] = []
    real = logs._build

    def counted() -> logs.Catalogue:
        calls.append(1)
        return real()

    monkeypatch.setattr(logs, "_build", counted)
    return calls


def _load(monkeypatch: pytest.MonkeyPatch) -> logs.Catalogue:
    _fresh(monkeypatch)
    return logs.load_catalogue()


def _the_file(cache: Path) -> Path:
    (path,) = cache.glob(PATTERN)
    return path


def _assert_same(got: logs.Catalogue, want: logs.Catalogue) -> None:
    assert got.signatures == want.signatures
    assert got.markers == want.markers
    assert got.inputs == want.inputs
    assert got.by_id == want.by_id
    assert got.generic == want.generic
    assert got.generic_by_rule == want.generic_by_rule
    assert got.terms == want.terms
    assert got.literals == want.literals
    assert got.owners == want.owners
    assert got.max_literal == want.max_literal


def _built_without_cache(monkeypatch: pytest.MonkeyPatch) -> tuple[logs.Catalogue, Any]:
    decodedcache.install(None)
    try:
        cat = _load(monkeypatch)
        voc = vocabulary.load_vocabulary()
    finally:
        decodedcache.install(CatalogueCache)
    _fresh(monkeypatch)
    return cat, voc


def test_a_hit_is_the_built_catalogue_without_building_it(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    want, want_vocab = _built_without_cache(monkeypatch)
    builds.clear()
    first = _load(monkeypatch)
    assert builds == [1]
    path = _the_file(cache)
    assert path.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    hit = _load(monkeypatch)
    assert builds == [1]
    # The literal index is decoded only when asked for (fleet and check never ask).
    assert "literals" not in vars(hit)
    assert "_index" not in vars(hit)
    _assert_same(hit, want)
    _assert_same(first, want)
    # The vocabulary came with it: the same terms, Xid table and sources.
    got_vocab = vocabulary.load_vocabulary()
    assert got_vocab.terms == want_vocab.terms
    assert got_vocab.xids == want_vocab.xids
    assert got_vocab.sources == want_vocab.sources
    assert hit.entry("kernel.xid") == want.entry("kernel.xid")


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


def _foreign(path: Path) -> None:
    # A sealed file of the right name but other inputs' key.
    path.write_bytes(cachefile.sealed(CatalogueCache.BUILT_MAGIC, b"\0" * 32, b"\x90"))


def _other_shape(path: Path) -> None:
    # Sealed with this very key (only this user could write it), but not a built catalogue:
    # the typed decode refuses it.
    blob = path.read_bytes()
    head = len(CatalogueCache.BUILT_MAGIC)
    key = blob[head : head + 32]
    payload = msgspec.msgpack.encode({"signatures": []})
    path.write_bytes(cachefile.sealed(CatalogueCache.BUILT_MAGIC, key, payload))


def _planted_entry(path: Path) -> None:
    # This key, a payload of the right shape whose entry has a severity no struct allows.
    blob = path.read_bytes()
    head = len(CatalogueCache.BUILT_MAGIC)
    key = blob[head : head + 32]
    raw = msgspec.msgpack.decode(cachefile.unseal(blob, CatalogueCache.BUILT_MAGIC, key) or b"")
    raw[0][0]["severity"] = "catastrophic"
    payload = msgspec.msgpack.encode(raw)
    path.write_bytes(cachefile.sealed(CatalogueCache.BUILT_MAGIC, key, payload))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-10]),  # truncated
        _flip,  # a flipped bit in the payload
        _foreign,  # another key's file
        _other_shape,
        _planted_entry,
        lambda p: p.chmod(0o666),  # writable by others
        lambda p: os.chmod(p.parent, 0o777),  # in a folder others may write
        lambda p: p.write_bytes(b""),
    ],
    ids=[
        "truncated",
        "flipped",
        "foreign",
        "other-shape",
        "planted-entry",
        "world-writable",
        "open-folder",
        "empty",
    ],
)
def test_a_file_that_cannot_be_trusted_is_built_again(
    cache: Path,
    builds: list[int],
    monkeypatch: pytest.MonkeyPatch,
    spoil: Callable[[Path], None],
) -> None:
    first = _load(monkeypatch)
    spoil(_the_file(cache))
    again = _load(monkeypatch)
    assert builds == [1, 1]
    _assert_same(again, first)
    os.chmod(cache, 0o700)
    _assert_same(_load(monkeypatch), first)  # rewritten: now a hit
    assert builds == [1, 1]


def test_a_link_is_not_followed(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    first = _load(monkeypatch)
    path = _the_file(cache)
    elsewhere = tmp_path / "elsewhere.msgpack"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    _assert_same(_load(monkeypatch), first)
    assert builds == [1, 1]


def test_a_damaged_index_is_numbered_again(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # The index is decoded apart from the rest (Raw): one that does not decode is numbered.
    want = _load(monkeypatch)
    cat = logs.Catalogue(
        want.signatures, want.markers, list(want.inputs.values()), compile_all=False,
        terms=want.terms, index=msgspec.Raw(b"\xc1"),
    )  # fmt: skip
    assert cat.literals == want.literals
    assert cat.owners == want.owners


def test_an_edited_file_is_another_key(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    _load(monkeypatch)
    copy = tmp_path / "checks"
    shutil.copytree(str(data_dir("checks")), copy)
    vocab = copy / vocabulary.VOCABULARY_FILE
    text = vocab.read_text(encoding="utf-8")
    vocab.write_text(text.replace('text = "cudaErrorIllegalAddress"', 'text = "cudaErrorX"', 1))
    assert vocab.read_text(encoding="utf-8") != text
    monkeypatch.setattr(checkdata, "data_dir", lambda _name: copy)
    edited = _load(monkeypatch)
    assert builds == [1, 1]
    assert b"cudaErrorX" in edited.literals
    assert b"cudaErrorIllegalAddress" not in edited.literals
    assert len(list(cache.glob(PATTERN))) == 2


def test_the_building_code_is_in_the_key() -> None:
    inputs = logs._built_inputs()
    assert inputs is not None
    # The three files, then the modules whose code builds the catalogue.
    assert len(inputs) == 3 + len(logs._BUILT_FROM)
    for name in (logs.CATALOGUE_FILE, logs.FALLBACKS_FILE, vocabulary.VOCABULARY_FILE):
        assert checkdata.stamp(data_dir("checks") / name) in inputs
    for module in ("logs.py", "vocabulary.py", "records.py", "dismissal.py", "checkdata.py"):
        assert checkdata.stamp(Path(logs.__file__).parent / module) in inputs
    edited = (*inputs[:-1], inputs[-1] + b"1")
    assert CatalogueCache.built_key(edited) != CatalogueCache.built_key(inputs)
    # Each input led by its length: moving a byte from one to the next is another key.
    moved = (inputs[0] + inputs[1][:1], inputs[1][1:], *inputs[2:])
    assert CatalogueCache.built_key(moved) != CatalogueCache.built_key(inputs)


@pytest.mark.parametrize(
    "edit",
    [
        "appended",
        "same size and modification time",  # a copy over it with its times kept (cp -p)
        "replaced by a copy",  # another inode
    ],
)
def test_a_stamp_changes_with_any_edit(tmp_path: Path, edit: str) -> None:
    """The key stands on stamps, not bytes: every way of changing a file's bytes changes
    its stamp (the change time is set by the kernel on every write, never by the writer)."""
    path = tmp_path / "logs.py"
    path.write_bytes(b"x = 1\n")
    before = checkdata.stamp(path)
    st = path.stat()
    if edit == "appended":
        with path.open("ab") as fh:
            fh.write(b"# an edit\n")
    elif edit == "same size and modification time":
        # The change time ticks at the kernel's clock resolution: wait for it to move on
        # (an observed change, not a sleep).
        while True:
            path.write_bytes(b"x = 2\n")
            os.utime(path, ns=(st.st_atime_ns, st.st_mtime_ns))
            if path.stat().st_ctime_ns != st.st_ctime_ns:
                break
    else:
        other = tmp_path / "copy"
        other.write_bytes(b"x = 3\n")
        os.replace(other, path)
    after = checkdata.stamp(path)
    assert path.stat().st_size == st.st_size or edit == "appended"
    assert before is not None
    assert after not in (None, before)
    assert checkdata.stamp(tmp_path / "missing") is None


def test_no_cache_neither_reads_nor_writes(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLACKWELL_DOCTOR_NO_CACHE", "1")
    _load(monkeypatch)
    _load(monkeypatch)
    assert builds == [1, 1]
    assert not cache.exists()


def test_the_cli_scans_through_the_built_catalogue(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("BLACKWELL_DOCTOR_NO_CACHE", None)
    log = Path(__file__).parent / "fixtures" / "logs" / "composed-vllm-marlin-auto.log"
    argv = [sys.executable, "-m", "blackwell_doctor", "scan-logs", str(log), "--format", "json"]
    first = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert list((tmp_path / "blackwell-doctor" / "catalogues").glob(PATTERN))
    second = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    env["BLACKWELL_DOCTOR_NO_CACHE"] = "1"
    uncached = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert first.returncode == second.returncode == uncached.returncode
    assert first.stdout == second.stdout == uncached.stdout
    assert b'"signature"' in first.stdout
