"""Compiled regular expressions kept between runs (facts/regexcache.py, with
collect/cachefile.py's RegexProgramCache, which the CLI installs): a kept program rebuilds
exactly the pattern ``re.compile`` makes (``Pattern.__eq__`` compares the program), a file
that cannot be trusted or a program the engine refuses is compiled again, and nothing is
kept without an installed cache. Real files in a temporary cache folder."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect import cachefile
from blackwell_doctor.collect.cachefile import RegexProgramCache
from blackwell_doctor.collect.logs import context
from blackwell_doctor.facts import redact, regexcache
from blackwell_doctor.report import sanitize
from blackwell_doctor.ruledata import dismissal
from blackwell_doctor.ruledata.logs import load_catalogue

pytestmark = pytest.mark.skipif(
    regexcache.engine_version() == "", reason="not CPython's regular-expression engine"
)


def _shipped() -> list[tuple[str, int]]:
    """Every pattern the log scan compiles through the cache, with its flags."""
    cat = load_catalogue()
    out = [(p, 0) for s in cat.signatures for p in (s.regex, s.unless) if p is not None]
    out += [(m.regex, 0) for m in cat.markers]
    out += [(source, re.IGNORECASE) for source in dismissal._SOURCES.values()]
    out += [(sanitize._UNSAFE, 0), (sanitize._SURROGATE, 0)]
    for module in (context, redact):
        for name, value in vars(module).items():
            # A regexcache.lazy: _UPPER_CASE, a functools.cache of no arguments.
            if name.lstrip("_").isupper() and hasattr(value, "cache_info"):
                pattern = value()
                if isinstance(pattern, re.Pattern):
                    out.append((pattern.pattern, pattern.flags & ~re.UNICODE))
    return list(dict.fromkeys(out))


@pytest.fixture
def cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    monkeypatch.delenv("BLACKWELL_DOCTOR_NO_CACHE", raising=False)
    regexcache.install(RegexProgramCache)
    yield tmp_path / "blackwell-doctor" / "regex"
    regexcache.install(None)


def _the_file(cache: Path) -> Path:
    (path,) = cache.glob("programs-*.msgpack")
    return path


def _round(patterns: list[tuple[str, int]]) -> list[re.Pattern[str]]:
    """One run: the store read afresh, every pattern compiled, the programs kept."""
    regexcache.install(RegexProgramCache)
    out = [regexcache.compile(p, f) for p, f in patterns]
    regexcache.flush()
    return out


def test_a_kept_program_is_the_pattern_re_compile_makes(cache: Path) -> None:
    patterns = _shipped()
    assert len(patterns) > 30
    first = _round(patterns)
    path = _the_file(cache)
    assert path.stat().st_mode & 0o777 == 0o600
    kept = msgspec.msgpack.decode(
        cachefile.unseal(path.read_bytes(), RegexProgramCache.MAGIC, RegexProgramCache.key()) or b""
    )
    assert len(kept) == len(set(patterns))
    re.purge()
    second = _round(patterns)
    for (pattern, flags), a, b in zip(patterns, first, second, strict=True):
        fresh = re.compile(pattern, flags)
        # Equal patterns have equal programs: the kept one rebuilt the compiler's own.
        assert b == fresh, pattern[:60]
        assert a == fresh
        assert (b.groups, b.groupindex, b.flags) == (fresh.groups, fresh.groupindex, fresh.flags)
    # The second run made nothing new, so it wrote nothing.
    assert regexcache._STATE["changed"] is False


def test_a_pattern_of_lone_surrogates_is_kept_too(cache: Path) -> None:
    # report/sanitize.py's pattern names U+D800-U+DFFF, which UTF-8 cannot hold: the key
    # is the pattern's repr (the pattern itself is what the caller passes).
    pattern = "[\x00-\x08\ud800-\udfff]"
    _round([(pattern, 0)])
    (again,) = _round([(pattern, 0)])
    assert again == re.compile(pattern)
    assert regexcache._STATE["changed"] is False
    assert again.search("a\udc80b")


def test_a_rebuilt_pattern_matches_what_re_compile_matches(cache: Path) -> None:
    line = "ERROR 11-26 12:00:00 [core.py:1] RuntimeError: CUDA error: an illegal memory access"
    _round(_shipped())
    cat = load_catalogue()
    for n in cat.generic:
        rebuilt = regexcache.compile(cat.signatures[n].regex or "")
        fresh = re.compile(cat.signatures[n].regex or "")
        a, b = rebuilt.search(line), fresh.search(line)
        assert (a and (a.span(), a.groupdict())) == (b and (b.span(), b.groupdict()))


def test_a_program_the_engine_refuses_is_compiled_again(cache: Path) -> None:
    pattern = r"(?P<word>\w+) (?P=word)"
    _round([(pattern, 0)])
    path = _the_file(cache)
    key = RegexProgramCache.key()
    programs = msgspec.msgpack.decode(
        cachefile.unseal(path.read_bytes(), RegexProgramCache.MAGIC, key) or b""
    )
    (name,) = programs
    flags, code, groups, groupindex, indexgroup, extra = programs[name]
    programs[name] = [flags, [999_999, *code[1:]], groups, groupindex, indexgroup, extra]
    path.write_bytes(
        cachefile.sealed(RegexProgramCache.MAGIC, key, msgspec.msgpack.encode(programs))
    )
    (again,) = _round([(pattern, 0)])
    assert again == re.compile(pattern)
    assert again.search("the the end")
    # Replaced by a good program: the next run rebuilds it.
    (third,) = _round([(pattern, 0)])
    assert third == re.compile(pattern)


def _flip(path: Path) -> None:
    data = bytearray(path.read_bytes())
    data[-3] ^= 0x01
    path.write_bytes(bytes(data))


@pytest.mark.parametrize(
    "spoil",
    [
        lambda p: p.write_bytes(p.read_bytes()[:-10]),
        _flip,
        lambda p: p.chmod(0o666),
        lambda p: p.write_bytes(b""),
        lambda p: p.write_bytes(
            cachefile.sealed(RegexProgramCache.MAGIC, RegexProgramCache.key(), b"\x93\x01\x02\x03")
        ),
    ],
    ids=["truncated", "flipped", "world-writable", "empty", "not-programs"],
)
def test_a_file_that_cannot_be_trusted_is_not_read(cache: Path, spoil: object) -> None:
    patterns = _shipped()[:5]
    _round(patterns)
    path = _the_file(cache)
    assert callable(spoil)
    spoil(path)
    assert RegexProgramCache().load() is None
    for (pattern, flags), got in zip(patterns, _round(patterns), strict=True):
        assert got == re.compile(pattern, flags)


def test_without_an_installed_cache_it_is_re_compile(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    regexcache.install(None)
    pattern = r"x+y"
    assert regexcache.compile(pattern) is re.compile(pattern)
    regexcache.flush()
    assert not (tmp_path / "blackwell-doctor").exists()


def test_no_cache_keeps_nothing(cache: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("BLACKWELL_DOCTOR_NO_CACHE", "1")
    (got,) = _round([(r"a|b", 0)])
    assert got == re.compile(r"a|b")
    assert not cache.exists()


def test_the_cli_keeps_and_reuses_the_programs(tmp_path: Path) -> None:
    env = {**os.environ, "XDG_CACHE_HOME": str(tmp_path), "PYTHONPATH": os.pathsep.join(sys.path)}
    env.pop("BLACKWELL_DOCTOR_NO_CACHE", None)
    log = tmp_path / "vllm.log"
    log.write_text(
        "INFO 11-26 12:00:00 [api_server.py:1] Starting vLLM API server\n"
        "ERROR 11-26 12:00:01 [core.py:2] RuntimeError: CUDA error: an illegal memory access\n"
    )
    argv = [sys.executable, "-m", "blackwell_doctor", "scan-logs", str(log), "--format", "json"]
    first = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    (path,) = (tmp_path / "blackwell-doctor" / "regex").glob("programs-*.msgpack")
    written = path.stat().st_mtime_ns
    second = subprocess.run(argv, env=env, capture_output=True, timeout=120)
    assert first.returncode == second.returncode == 1, first.stderr
    assert first.stdout == second.stdout
    assert b"runtime.unrecognised_fatal_error" in first.stdout
    # Everything the second run compiled was kept by the first: it wrote nothing.
    assert path.stat().st_mtime_ns == written


# Where CPython's internals are not those regexcache reads (another version's), the first
# compile of the process finds out and every pattern is re.compile's: nothing read, nothing
# kept, and no pattern parsed a second time.


class _Spy:
    """Counts the calls that reach the wrapped function."""

    def __init__(self, fn: object) -> None:
        self.fn, self.calls = fn, 0

    def __call__(self, *args: object, **kw: object) -> object:
        self.calls += 1
        assert callable(self.fn)
        return self.fn(*args, **kw)


class _OtherCompiler:
    """re._compiler as a version this module does not know: _code returns a new shape."""

    def __init__(self, real: object) -> None:
        self.real = real

    def _code(self, tree: object, flags: int) -> object:
        return ("a program", "in another shape")


class _OtherSre:
    """_sre whose compile takes other arguments than those regexcache passes."""

    def __init__(self, real: object) -> None:
        self.real = real
        self.MAGIC = getattr(real, "MAGIC", 0)
        self.CODESIZE = getattr(real, "CODESIZE", 4)

    def compile(self, *args: object) -> object:
        raise TypeError(f"compile() takes exactly 8 arguments ({len(args)} given)")


@pytest.fixture
def unknown(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(regexcache, "_USABLE", [])


@pytest.mark.parametrize("differs", ["compiler", "sre"])
def test_where_the_internals_differ_every_pattern_is_re_compiles(
    cache: Path, monkeypatch: pytest.MonkeyPatch, unknown: None, differs: str
) -> None:
    patterns = _shipped()[:8]
    _round(patterns)  # a file kept by a run whose internals were known
    kept = _the_file(cache).read_bytes()
    monkeypatch.setattr(regexcache, "_USABLE", [])
    if differs == "compiler":
        monkeypatch.setattr(regexcache, "_compiler", _OtherCompiler(regexcache._compiler))
    else:
        monkeypatch.setattr(regexcache, "_sre", _OtherSre(regexcache._sre))
    parse = _Spy(regexcache._parser.parse)
    monkeypatch.setattr(regexcache._parser, "parse", parse)
    load = _Spy(RegexProgramCache.load)
    monkeypatch.setattr(RegexProgramCache, "load", load)
    re.purge()
    got = _round(patterns)
    for (pattern, flags), pattern_got in zip(patterns, got, strict=True):
        assert pattern_got == re.compile(pattern, flags)
    assert regexcache.usable() is False
    # re.compile's parse of each pattern and the probe's: no pattern parsed a second time.
    assert parse.calls == len(patterns) + 1
    assert load.calls == 0  # the kept programs are not read ...
    assert _the_file(cache).read_bytes() == kept  # ... nor written


def test_the_program_shape_after_3_13_is_read(
    cache: Path, monkeypatch: pytest.MonkeyPatch, unknown: None
) -> None:
    # CPython after 3.13 (python/cpython main): _code returns the program with its REPEAT
    # count, which _sre.compile takes as a seventh argument. Played over this one's own.
    real_compiler, real_sre = regexcache._compiler, regexcache._sre

    class Data:
        def __init__(self, code: list[int]) -> None:
            self.code, self.repeat_count = code, 3

    class Compiler:
        def _code(self, tree: object, flags: int) -> Data:
            data = real_compiler._code(tree, flags)
            assert isinstance(data, list)  # this interpreter's shape
            return Data(data)

    seen: list[object] = []

    class Sre(_OtherSre):
        def compile(self, *args: object) -> object:
            assert len(args) == 7, args
            seen.append(args[6])
            return real_sre.compile(*args[:6])

    if not isinstance(real_compiler._code(regexcache._parser.parse("a"), 0), list):
        pytest.skip("this interpreter has the new shape itself")
    monkeypatch.setattr(regexcache, "_compiler", Compiler())
    monkeypatch.setattr(regexcache, "_sre", Sre(real_sre))
    patterns = _shipped()[:5]
    _round(patterns)
    assert regexcache.usable() is True
    kept = msgspec.msgpack.decode(
        cachefile.unseal(
            _the_file(cache).read_bytes(), RegexProgramCache.MAGIC, RegexProgramCache.key()
        )
        or b""
    )
    assert {tuple(p[5]) for p in kept.values()} == {(3,)}
    seen.clear()
    for (pattern, flags), got in zip(patterns, _round(patterns), strict=True):
        assert got == re.compile(pattern, flags)
    assert seen == [3] * len(patterns)  # rebuilt from the kept programs, with their count
