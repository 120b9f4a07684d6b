"""The decoded shipped catalogues, cached per file content (collect/cachefile.py's
CatalogueCache, which the CLI installs for ruledata/checkdata.py): a file is used only when
it can be trusted and is of this content, else the TOML is parsed as if there were none.
Real files in a temporary cache folder."""

from __future__ import annotations

import os
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect import cachefile
from blackwell_doctor.collect.cachefile import CatalogueCache
from blackwell_doctor.ruledata import checkdata, decodedcache
from blackwell_doctor.ruledata.resources import data_dir

NAME = "catalogue.toml"


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("BLACKWELL_DOCTOR_NO_CACHE", raising=False)
    decodedcache.install(CatalogueCache)
    yield tmp_path / "blackwell-doctor" / "catalogues"
    decodedcache.install(None)


@pytest.fixture
def parses(monkeypatch: pytest.MonkeyPatch) -> list[str]:
    """The sources tomllib parsed (a cache hit parses none)."""
    calls: list[str] = []
    real = checkdata.parse_toml

    def counted(text: str, *, source: str) -> dict[str, Any]:
        calls.append(source)
        return real(text, source=source)

    monkeypatch.setattr(checkdata, "parse_toml", counted)
    return calls


def _the_file(cache: Path) -> Path:
    (path,) = cache.glob(f"{NAME}-*.msgpack")
    return path


def test_the_second_read_is_the_first_without_parsing(cache: Path, parses: list[str]) -> None:
    first = checkdata.read_shipped(NAME)
    assert parses == [f"checks/{NAME}"]
    path = _the_file(cache)
    assert path.stat().st_mode & 0o777 == 0o600
    assert cache.stat().st_mode & 0o777 == 0o700
    second = checkdata.read_shipped(NAME)
    assert parses == [f"checks/{NAME}"]
    assert second == first
    assert second == checkdata.parse_toml(
        (data_dir("checks") / NAME).read_text(encoding="utf-8"), source="x"
    )


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


def _foreign(path: Path) -> None:
    # A sealed file of the right name but another content's key.
    blob = cachefile.sealed(CatalogueCache.MAGIC, b"\0" * 32, b"\x80")
    path.write_bytes(blob)


def _forged(path: Path) -> None:
    # Another document under this key with a matching payload hash: refused by where it
    # lies (a folder others may write), not by its header.
    os.chmod(path.parent, 0o777)


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-10]),  # truncated
        _flip,  # a flipped bit in the payload
        _foreign,  # another content's file
        lambda p: p.chmod(0o666),  # writable by others
        _forged,
        lambda p: p.write_bytes(b""),
    ],
    ids=["truncated", "flipped", "foreign", "world-writable", "open-folder", "empty"],
)
def test_a_file_that_cannot_be_trusted_is_parsed_again(
    cache: Path, parses: list[str], spoil: Any
) -> None:
    first = checkdata.read_shipped(NAME)
    path = _the_file(cache)
    spoil(path)
    again = checkdata.read_shipped(NAME)
    assert parses == [f"checks/{NAME}"] * 2
    assert again == first
    os.chmod(cache, 0o700)
    assert checkdata.read_shipped(NAME) == first  # rewritten: now a hit
    assert len(parses) == 2


def test_a_link_is_not_followed(cache: Path, parses: list[str], tmp_path: Path) -> None:
    first = checkdata.read_shipped(NAME)
    path = _the_file(cache)
    elsewhere = tmp_path / "elsewhere.msgpack"
    path.rename(elsewhere)
    path.symlink_to(elsewhere)
    assert checkdata.read_shipped(NAME) == first
    assert parses == [f"checks/{NAME}"] * 2


def test_another_content_is_another_key(cache: Path) -> None:
    assert CatalogueCache.key(b"a = 1\n") != CatalogueCache.key(b"a = 2\n")


def test_no_cache_neither_reads_nor_writes(
    cache: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLACKWELL_DOCTOR_NO_CACHE", "1")
    checkdata.read_shipped(NAME)
    checkdata.read_shipped(NAME)
    assert parses == [f"checks/{NAME}"] * 2
    assert not cache.exists()


def test_an_unwritable_cache_only_costs_the_parse(
    tmp_path: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    blocker = tmp_path / "a-file"
    blocker.write_text("not a folder")
    monkeypatch.setenv("XDG_CACHE_HOME", str(blocker))
    monkeypatch.delenv("BLACKWELL_DOCTOR_NO_CACHE", raising=False)
    decodedcache.install(CatalogueCache)
    try:
        assert checkdata.read_shipped(NAME)["check"]
    finally:
        decodedcache.install(None)
    assert parses == [f"checks/{NAME}"]


def test_a_value_messagepack_would_change_is_not_cached(cache: Path) -> None:
    import datetime

    CatalogueCache().put("x.toml", b"x", {"when": datetime.date(2026, 1, 1)})
    CatalogueCache().put("y.toml", b"y", {"n": float("nan")})
    assert not list(cache.glob("*.msgpack"))


def test_without_an_installed_cache_nothing_is_read_or_written(
    tmp_path: Path, parses: list[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    # What a library caller (and the rest of the test suite) gets: ruledata reads no
    # environment of its own.
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    checkdata.read_shipped(NAME)
    assert parses == [f"checks/{NAME}"]
    assert not (tmp_path / "blackwell-doctor").exists()


def test_the_cli_reads_through_the_cache(tmp_path: Path) -> None:
    import subprocess
    import sys

    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("BLACKWELL_DOCTOR_NO_CACHE", None)
    facts = Path(__file__).parent / "fixtures" / "facts" / "b200-x8.json"
    argv = [sys.executable, "-m", "blackwell_doctor", "check", "--facts", str(facts)]
    first = subprocess.run([*argv, "--format", "json"], env=env, capture_output=True, timeout=120)
    assert list((tmp_path / "blackwell-doctor" / "catalogues").glob(f"{NAME}-*.msgpack"))
    second = subprocess.run([*argv, "--format", "json"], env=env, capture_output=True, timeout=120)
    assert first.returncode == second.returncode
    assert first.stdout == second.stdout
    assert b'"results"' in first.stdout
