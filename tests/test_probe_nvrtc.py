"""NVRTC compilation: target choice, the cache (keys, corrupt entries, atomic writes), and
the failure reasons. A fake NVRTC everywhere; the real one where its library is present
(NVRTC needs no GPU)."""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.probe import nvrtc as nv
from blackwell_doctor.collect.probe.nvrtc import (
    CompiledProbes,
    ImageKind,
    NvrtcError,
    RealNvrtc,
    Target,
    cache_key,
    choose_target,
    compile_probes,
    first_log_line,
    read_entry,
    write_entry,
)
from blackwell_doctor.facts.document import Unavailable

EXPR = ["blockscaled_mainloop<128, 128, 64, 2>"]
ALL_ARCHS = [75, 80, 86, 87, 88, 89, 90, 100, 103, 110, 120, 121]


class FakeNvrtc:
    def __init__(self, archs: Sequence[int] = ALL_ARCHS, version: tuple[int, int] = (13, 0)):
        self.archs = list(archs)
        self._version = version
        self.compiles: list[tuple[list[str], ImageKind]] = []
        self.fail_with: str | None = None

    def version(self) -> tuple[int, int]:
        return self._version

    def supported_archs(self) -> list[int]:
        return self.archs

    def compile(
        self,
        source: bytes,
        name: str,
        options: Sequence[str],
        name_expressions: Sequence[str],
        kind: ImageKind,
    ) -> tuple[bytes, dict[str, str]]:
        if self.fail_with:
            raise NvrtcError(self.fail_with)
        self.compiles.append((list(options), kind))
        image = b"IMAGE:" + " ".join(options).encode() + b":" + source
        return image, {e: f"_Z{len(e)}mangled" for e in name_expressions}


def _compile(tmp_path: Path, api: FakeNvrtc, arch: int = 90, source: bytes = b"src") -> Any:
    return compile_probes(arch, EXPR, api=api, cache_dir=tmp_path, source=source)


# --------------------------------------------------------------------------- targets


def test_a_known_architecture_gets_a_cubin() -> None:
    target = choose_target(90, ALL_ARCHS)
    assert target == Target(arch=90, kind="cubin")
    assert isinstance(target, Target)
    assert target.option == "--gpu-architecture=sm_90"
    assert target.compiled_as == "sm_90 cubin"


def test_an_unknown_architecture_falls_back_to_ptx_for_the_newest_older_one() -> None:
    # An NVRTC from before SM 12.x on an RTX 5090: PTX for compute_100, JIT by the driver.
    target = choose_target(120, [75, 80, 86, 89, 90, 100])
    assert target == Target(arch=100, kind="ptx")
    assert isinstance(target, Target)
    assert target.option == "--gpu-architecture=compute_100"
    assert target.compiled_as == "compute_100 PTX (driver JIT)"
    # Never a newer architecture than the device: PTX does not compile backwards.
    assert choose_target(121, [90, 120, 130]) == Target(arch=120, kind="ptx")


def test_a_device_older_than_everything_nvrtc_knows_is_unavailable() -> None:
    assert choose_target(70, [75, 80, 90]) == Unavailable("nvrtc-arch-unsupported:sm_70")


def test_the_fallback_reaches_compile_probes(tmp_path: Path) -> None:
    api = FakeNvrtc(archs=[80, 90])
    compiled = _compile(tmp_path, api, arch=120)
    assert isinstance(compiled, CompiledProbes)
    assert compiled.compiled_as == "compute_90 PTX (driver JIT)"
    assert api.compiles == [(["--std=c++17", "--gpu-architecture=compute_90"], "ptx")]


# --------------------------------------------------------------------------- the cache


def test_a_second_compile_is_a_cache_hit(tmp_path: Path) -> None:
    api = FakeNvrtc()
    first = _compile(tmp_path, api)
    second = _compile(tmp_path, api)
    assert isinstance(first, CompiledProbes)
    assert isinstance(second, CompiledProbes)
    assert (first.cache, second.cache) == ("miss", "hit")
    assert second.image == first.image
    assert second.lowered_names == first.lowered_names
    assert len(api.compiles) == 1


@pytest.mark.parametrize(
    "change",
    ["source", "arch", "nvrtc_version", "expressions"],
)
def test_the_key_changes_with_everything_that_changes_the_binary(change: str) -> None:
    base: dict[str, Any] = {
        "source": b"src",
        "options": ["--std=c++17"],
        "name_expressions": EXPR,
        "target": Target(90, "cubin"),
        "nvrtc_version": "13.0",
    }
    changed = dict(base)
    if change == "source":
        changed["source"] = b"src "
    elif change == "arch":
        changed["target"] = Target(100, "cubin")
    elif change == "nvrtc_version":
        changed["nvrtc_version"] = "13.1"
    else:
        changed["name_expressions"] = ["blockscaled_mainloop<128, 128, 64, 3>"]
    assert cache_key(**base) == cache_key(**base)
    assert cache_key(**changed) != cache_key(**base)


def test_a_new_nvrtc_version_recompiles(tmp_path: Path) -> None:
    _compile(tmp_path, FakeNvrtc(version=(13, 0)))
    api = FakeNvrtc(version=(13, 2))
    compiled = _compile(tmp_path, api)
    assert isinstance(compiled, CompiledProbes)
    assert compiled.cache == "miss"
    assert compiled.nvrtc_version == "13.2"
    assert len(api.compiles) == 1


def _entry(tmp_path: Path) -> Path:
    [entry] = [p for p in tmp_path.iterdir() if not p.name.endswith(".tmp")]
    return entry


@pytest.mark.parametrize("damage", ["truncate", "flip-image-byte", "garbage", "empty"])
def test_a_corrupt_entry_is_rebuilt_not_trusted(tmp_path: Path, damage: str) -> None:
    api = FakeNvrtc()
    good = _compile(tmp_path, api)
    assert isinstance(good, CompiledProbes)
    entry = _entry(tmp_path)
    data = entry.read_bytes()
    if damage == "truncate":
        entry.write_bytes(data[: len(data) - 5])
    elif damage == "flip-image-byte":
        entry.write_bytes(data[:-1] + bytes([data[-1] ^ 0xFF]))
    elif damage == "garbage":
        entry.write_bytes(b"\x00garbage\nnot an entry")
    else:
        entry.write_bytes(b"")

    rebuilt = _compile(tmp_path, api)

    assert isinstance(rebuilt, CompiledProbes)
    assert rebuilt.cache == "rebuilt"
    assert rebuilt.image == good.image
    assert len(api.compiles) == 2
    assert entry.read_bytes() == data  # repaired
    again = _compile(tmp_path, api)
    assert isinstance(again, CompiledProbes)
    assert again.cache == "hit"


def test_an_entry_under_another_key_is_not_used(tmp_path: Path) -> None:
    path = tmp_path / "entry.cubin"
    write_entry(path, "key-a", "cubin", b"image", {"e": "n"})
    assert read_entry(path, "key-a") == (b"image", {"e": "n"})
    assert read_entry(path, "key-b") is None


def test_writes_are_atomic_and_leave_no_temporary_files(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = tmp_path / "entry.cubin"
    write_entry(path, "k", "cubin", b"old image", {})
    before = path.read_bytes()

    def broken_fsync(fd: int) -> None:
        raise OSError("disk full")

    monkeypatch.setattr(os, "fsync", broken_fsync)
    with pytest.raises(OSError, match="disk full"):
        write_entry(path, "k", "cubin", b"new image that never lands", {})

    assert path.read_bytes() == before  # the old entry is whole, never half-written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["entry.cubin"]


def test_an_unwritable_cache_still_returns_the_compiled_code(tmp_path: Path) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache folder should be")
    api = FakeNvrtc()
    compiled = compile_probes(90, EXPR, api=api, cache_dir=blocker / "nvrtc", source=b"s")
    assert isinstance(compiled, CompiledProbes)
    assert compiled.cache == "miss"


def test_the_cache_folder_follows_the_environment(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("BLACKWELL_DOCTOR_CACHE_DIR", str(tmp_path / "override"))
    assert nv.default_cache_dir() == tmp_path / "override"
    monkeypatch.delenv("BLACKWELL_DOCTOR_CACHE_DIR")
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert nv.default_cache_dir() == tmp_path / "xdg" / "blackwell-doctor" / "nvrtc"
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert nv.default_cache_dir() == tmp_path / "home" / ".cache" / "blackwell-doctor" / "nvrtc"


# --------------------------------------------------------------------------- failures


def test_a_compile_error_is_a_reason_and_nothing_is_cached(tmp_path: Path) -> None:
    api = FakeNvrtc()
    api.fail_with = "nvrtc-compile-failed:probes.cu(3): error: expected a ;"
    compiled = _compile(tmp_path, api)
    assert compiled == Unavailable("nvrtc-compile-failed:probes.cu(3): error: expected a ;")
    assert list(tmp_path.iterdir()) == []


def test_the_first_error_line_of_a_log_is_kept() -> None:
    log = "\nprobes.cu(10): warning: unused\nprobes.cu(12): error: boom\n\n1 error detected\n"
    assert first_log_line(log) == "probes.cu(12): error: boom"
    assert first_log_line("only a remark\n") == "only a remark"
    assert first_log_line("") == "no log"


class _LibNotFound(Exception):
    pass


class _MissingLibraryBinding:
    """cuda-bindings 13 without libnvrtc: the first call raises pathfinder's error."""

    def __getattr__(self, name: str) -> Any:
        def call(*args: object) -> object:
            raise _LibNotFound("Failure finding libnvrtc.so.13")

        return call


def test_a_missing_nvrtc_library_is_a_reason(tmp_path: Path) -> None:
    api = RealNvrtc()
    api._nvrtc = _MissingLibraryBinding()
    api._lib_not_found = _LibNotFound
    assert compile_probes(90, EXPR, api=api, cache_dir=tmp_path) == Unavailable(
        "nvrtc-library-not-found"
    )
    assert nv.nvrtc_version(api) == Unavailable("nvrtc-library-not-found")


def _real_nvrtc_reason() -> str | None:
    version = nv.nvrtc_version()
    return version.reason if isinstance(version, Unavailable) else None


def test_the_real_binding_without_its_library_says_so(tmp_path: Path) -> None:
    reason = _real_nvrtc_reason()
    if reason is None:
        pytest.skip("NVRTC is installed here")
    assert compile_probes(90, EXPR, cache_dir=tmp_path) == Unavailable(reason)
    assert reason in ("nvrtc-library-not-found", "cuda-binding-not-installed")


# --------------------------------------------------------------------------- real NVRTC

needs_nvrtc = pytest.mark.skipif(
    _real_nvrtc_reason() is not None, reason="the NVRTC library is not installed here"
)


@needs_nvrtc
def test_the_shipped_sources_compile_to_a_cubin(tmp_path: Path) -> None:
    compiled = compile_probes(90, EXPR, cache_dir=tmp_path)
    assert isinstance(compiled, CompiledProbes), compiled
    assert compiled.image.startswith(b"\x7fELF")
    assert compiled.compiled_as == "sm_90 cubin"
    assert compiled.lowered_names[EXPR[0]].startswith("_Z20blockscaled_mainloopILi128ELi128E")
    assert compiled.cache == "miss"


@needs_nvrtc
def test_the_real_ptx_fallback_targets_the_older_architecture(tmp_path: Path) -> None:
    class OldNvrtc(RealNvrtc):
        def supported_archs(self) -> list[int]:
            return [75, 80, 86, 89, 90]

    compiled = compile_probes(120, EXPR, api=OldNvrtc(), cache_dir=tmp_path)
    assert isinstance(compiled, CompiledProbes), compiled
    assert compiled.compiled_as == "compute_90 PTX (driver JIT)"
    assert b".target sm_90" in compiled.image
    assert compiled.image.endswith(b"\0")


@needs_nvrtc
def test_a_real_compile_error_names_its_first_line(tmp_path: Path) -> None:
    compiled = compile_probes(90, ["no_such_kernel<1>"], cache_dir=tmp_path)
    assert isinstance(compiled, Unavailable)
    assert compiled.reason.startswith("nvrtc-compile-failed:")
    assert "no_such_kernel" in compiled.reason
    assert os.listdir(tmp_path) == []
