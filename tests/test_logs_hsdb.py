"""The serialized Hyperscan database: cached per catalogue, loaded only when it can be
trusted, else built (collect/logs/hsdb.py). Real Hyperscan, real files."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect import cachefile
from blackwell_doctor.collect.logs import hsdb
from blackwell_doctor.ruledata.logs import load_catalogue

hyperscan: Any = pytest.importorskip("hyperscan")
LITERALS = list(load_catalogue().literals)


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Path:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("BLACKWELL_DOCTOR_NO_CACHE", raising=False)
    return tmp_path / "blackwell-doctor" / "hyperscan"


@pytest.fixture
def builds(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    """Counts the compilations (a load from the cache compiles nothing)."""
    calls: list[int] = []
    real = hsdb._build

    def counted(hs: Any, literals: list[bytes]) -> Any:
        calls.append(len(literals))
        return real(hs, literals)

    monkeypatch.setattr(hsdb, "_build", counted)
    return calls


def _hits(db: Any, data: bytes) -> set[tuple[int, int]]:
    out: set[tuple[int, int]] = set()
    db.scan(data, match_event_handler=lambda n, _f, to, _fl, _c: out.add((to, n)))
    return out


def _the_file(cache: Path) -> Path:
    (path,) = cache.glob("hyperscan-*.db")
    return path


SAMPLE = b"x " + LITERALS[0] + b" y\n" + LITERALS[-1] + b"\n"


def test_the_second_scan_loads_what_the_first_built(cache: Path, builds: list[int]) -> None:
    first = hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]
    path = _the_file(cache)
    assert path.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    second = hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]  # no second compilation
    assert _hits(second, SAMPLE) == _hits(first, SAMPLE) != set()


def test_another_catalogue_has_its_own_file(cache: Path, builds: list[int]) -> None:
    hsdb.literal_database(hyperscan, LITERALS)
    hsdb.literal_database(hyperscan, LITERALS[:-1])
    assert len(list(cache.glob("hyperscan-*.db"))) == 2
    assert len(builds) == 2


def test_another_file_format_keeps_its_own_file(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Two versions of the tool that seal the database differently (another MAGIC) share a
    cache folder: each keeps its own file and loads it, neither rebuilds the other's."""
    hsdb.literal_database(hyperscan, LITERALS)
    ours = _the_file(cache)
    mine, magic = ours.read_bytes(), hsdb.MAGIC
    monkeypatch.setattr(hsdb, "MAGIC", b"blackwell-doctor hyperscan, another format\n")
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS), len(LITERALS)]  # the other format built its own
    assert len(list(cache.glob("hyperscan-*.db"))) == 2
    assert ours.read_bytes() == mine  # not overwritten
    builds.clear()
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == []  # and loads it
    monkeypatch.setattr(hsdb, "MAGIC", magic)
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == []  # ours still loads


def _plant(cache: Path, blob: bytes) -> Path:
    hsdb.literal_database(hyperscan, LITERALS)
    path = _the_file(cache)
    path.write_bytes(blob)
    return path


def _rebuilt(cache: Path, builds: list[int], path: Path) -> None:
    builds.clear()
    db = hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]
    assert _hits(db, SAMPLE) == _hits(hsdb._build(hyperscan, LITERALS), SAMPLE)
    # rewritten good: the next one loads
    builds.clear()
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == []


@pytest.mark.parametrize(
    "damage",
    [
        lambda blob: blob[: len(blob) // 2],  # truncated
        lambda blob: blob[:-1] + bytes([blob[-1] ^ 1]),  # one bit of the payload
        lambda blob: blob[:200] + bytes([blob[200] ^ 0x80]) + blob[201:],  # one inside it
        lambda blob: blob + b"\0",  # grown
        lambda blob: b"garbage" * 100,
        lambda blob: b"",
    ],
    ids=["truncated", "bit-flip", "bit-flip-inside", "grown", "garbage", "empty"],
)
def test_a_damaged_file_is_rebuilt(cache: Path, builds: list[int], damage: Any) -> None:
    hsdb.literal_database(hyperscan, LITERALS)
    path = _the_file(cache)
    path.write_bytes(damage(path.read_bytes()))
    _rebuilt(cache, builds, path)


def test_a_planted_database_with_a_matching_hash_is_refused(cache: Path, builds: list[int]) -> None:
    """Whoever writes the file can write its hash too: the loaded database must still find
    the sampled literals of this catalogue, each under its id, or it is not used."""
    other = hsdb._build(hyperscan, [b"nothing of the catalogue"])
    path = _plant(cache, _sealed_for(LITERALS, other))
    _rebuilt(cache, builds, path)


def _sealed_for(literals: list[bytes], db: Any) -> bytes:
    payload: bytes = hyperscan.dumpb(db)
    key = hsdb.cache_key(str(hyperscan.__version__), literals)
    return cachefile.sealed(hsdb.MAGIC, key, payload)


@pytest.mark.parametrize("how", ["a sampled literal left out", "the ids shifted by one"])
def test_a_planted_database_of_almost_these_literals_is_refused(
    cache: Path, builds: list[int], how: str
) -> None:
    """A database of this catalogue's literals but one sampled literal (or of all of them
    under other ids) is refused; the sample (every SAMPLE_EVERY-th and the last) is what a
    load checks beyond the seal (collect/logs/hsdb.py's docstring says why)."""
    if how == "a sampled literal left out":
        gone = hsdb.SAMPLE_EVERY
        planted = [b"not a literal" if n == gone else t for n, t in enumerate(LITERALS)]
    else:
        planted = [LITERALS[-1], *LITERALS[:-1]]
    path = _plant(cache, _sealed_for(LITERALS, hsdb._build(hyperscan, planted)))
    _rebuilt(cache, builds, path)


def test_a_file_others_may_write_is_not_read(cache: Path, builds: list[int]) -> None:
    hsdb.literal_database(hyperscan, LITERALS)
    path = _the_file(cache)
    path.chmod(0o666)
    _rebuilt(cache, builds, path)
    path.chmod(0o600)
    cache.chmod(0o777)
    builds.clear()
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]


def test_a_link_is_not_followed(cache: Path, builds: list[int], tmp_path: Path) -> None:
    hsdb.literal_database(hyperscan, LITERALS)
    path = _the_file(cache)
    target = tmp_path / "elsewhere.db"
    path.rename(target)
    path.symlink_to(target)
    builds.clear()
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]
    assert not path.is_symlink()  # replaced by a file of its own
    assert target.is_file()


def test_no_cache_writes_nothing(
    cache: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLACKWELL_DOCTOR_NO_CACHE", "1")
    hsdb.literal_database(hyperscan, LITERALS)
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)] * 2
    assert not cache.exists()


def test_an_unwritable_cache_only_costs_the_build(
    tmp_path: Path, builds: list[int], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")  # no folder can be made under it, root or not
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    db = hsdb.literal_database(hyperscan, LITERALS)
    assert _hits(db, SAMPLE)
    assert builds == [len(LITERALS)]
    assert blocker.read_text() == "not a folder"


def test_a_linked_folder_is_not_read(cache: Path, builds: list[int], tmp_path: Path) -> None:
    hsdb.literal_database(hyperscan, LITERALS)
    real = tmp_path / "real-folder"
    cache.rename(real)
    cache.symlink_to(real)
    builds.clear()
    hsdb.literal_database(hyperscan, LITERALS)
    assert builds == [len(LITERALS)]
