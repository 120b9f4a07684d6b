"""``audit`` on an environment that lies (issue 32): the files a package installed and its
metadata are untrusted input. A fatbin that would not let the scan go forward, an ELF whose
section count or offsets run past the file, a FIFO named like a library, a RECORD or
METADATA that is not UTF-8, a metadata folder that is a symbolic link to itself, a RECORD of
a million rows: each is a file the audit could not read, with its reason, and the audit
completes (exit 0 or 1, as the verdict says; never 4, never a hang).

The files are made here, byte by byte, in the documented layouts (the gABI's ELF header and
section header; the fatbin container and entry headers of collect.stack.fatbin). What could
hang (a reader that never ends) is run in a child process under a deadline, so that a
regression fails instead of stopping the suite. The readers' agreement with the real thing
is checked too: the distributions found equal importlib.metadata's on this interpreter's own
sys.path, and the sections read equal pyelftools' for every shared object installed here."""

from __future__ import annotations

import contextlib
import importlib.metadata
import io
import json
import os
import re
import struct
import subprocess
import sys
import tarfile
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path, PurePosixPath
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect.stack import inventory as inv
from blackwell_doctor.collect.stack.fatbin import (
    FATBIN_MAGIC,
    Malformed,
    NotElf,
    read_elf,
    scan_file,
)
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import (
    MAX_RECORD_ROWS,
    SHARED_OBJECT,
    distributions,
    read_stack,
    shared_objects,
)
from blackwell_doctor.facts.stack import GpuPackage
from blackwell_doctor.ruledata.stack import load_stack_data, normalise
from tests.conftest import FACTS_FIXTURES

# A child that reads an environment must answer within this (it takes well under a second;
# the old readers never answered).
CHILD_DEADLINE_S = 120


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


# -- files in their documented layouts ------------------------------------------------------

EM_X86_64, EM_CUDA = 62, 190
_EHDR = struct.Struct("<HHIQQQIHHHHHH")  # ELF64 after e_ident
_SHDR = struct.Struct("<IIQQQQIIQQ")


def _elf(
    sections: Sequence[tuple[str, bytes]],
    *,
    machine: int = EM_X86_64,
    shnum: int | None = None,
    shstrndx: int | None = None,
    shentsize: int = _SHDR.size,
    section0_size: int = 0,
    moved: dict[str, int] | None = None,
    name_at: dict[str, int] | None = None,
) -> bytes:
    """A little-endian ELF64 shared object: the header, each section's bytes, the section
    name table, then the section headers (the null section first, the name table last).
    The keywords put a lie in it: ``shnum`` for e_shnum, ``section0_size`` for section 0's
    sh_size (the count when e_shnum is 0), ``moved`` a section's sh_offset, ``name_at`` a
    section's sh_name."""
    moved, name_at = moved or {}, name_at or {}
    body = bytearray(64)
    placed = []
    for name, data in sections:
        body += bytes(-len(body) % 16)
        placed.append((name, moved.get(name, len(body)), len(data)))
        body += data
    names = bytearray(b"\0")
    name_offsets = {}
    for name, _ in [*sections, (".shstrtab", b"")]:
        name_offsets[name] = name_at.get(name, len(names))
        names += name.encode() + b"\0"
    names_at = len(body)
    body += names
    body += bytes(-len(body) % 8)
    shoff = len(body)
    body += _SHDR.pack(0, 0, 0, 0, 0, section0_size, 0, 0, 0, 0)
    for name, offset, size in placed:
        body += _SHDR.pack(name_offsets[name], 1, 2, 0, offset, size, 0, 0, 16, 0)
    body += _SHDR.pack(name_offsets[".shstrtab"], 3, 0, 0, names_at, len(names), 0, 0, 1, 0)
    count = len(placed) + 2
    body[:16] = b"\x7fELF\x02\x01\x01" + bytes(9)
    body[16:64] = _EHDR.pack(
        3,  # ET_DYN
        machine,
        1,
        0,
        0,
        shoff,
        0,
        64,
        56,
        0,
        shentsize,
        count if shnum is None else shnum,
        count - 1 if shstrndx is None else shstrndx,
    )
    return bytes(body)


def _container(arch: int = 120, header_size: int = 16) -> bytes:
    """One fatbin container holding one ELF (SASS) entry for sm_``arch``, payload empty."""
    entry = struct.pack("<HHIQ8xHHI8xQ8xQ", 2, 0, 64, 0, 8, 1, arch, 0, 0)
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, header_size, len(entry)) + entry


def _stalled_container() -> bytes:
    """A container whose header size and payload size are both 0: the next container
    would be looked for where this one starts."""
    return struct.pack("<IHHQ", FATBIN_MAGIC, 1, 0, 0)


def _install(
    site: Path,
    name: str,
    version: str,
    files: Mapping[str, bytes | None],
    *,
    metadata: bytes | None = None,
    record: bytes | None = None,
) -> Path:
    """A distribution as pip leaves it: its files (None: a FIFO there), METADATA and a
    RECORD listing them."""
    info = site / f"{name.replace('-', '_')}-{version}.dist-info"
    info.mkdir(parents=True)
    (info / "METADATA").write_bytes(
        metadata or f"Metadata-Version: 2.1\nName: {name}\nVersion: {version}\n".encode()
    )
    for rel, data in files.items():
        (site / rel).parent.mkdir(parents=True, exist_ok=True)
        if data is None:
            os.mkfifo(site / rel)
        else:
            (site / rel).write_bytes(data)
    if record is None:
        rows = [f"{rel},," for rel in files] + [f"{info.name}/METADATA,,", f"{info.name}/RECORD,,"]
        record = ("\n".join(rows) + "\n").encode()
    (info / "RECORD").write_bytes(record)
    return info


def _read(site: Path) -> dict[str, GpuPackage]:
    """The GPU packages ``audit`` reads in ``site``, in this process (for readers that
    ended, with an exception, before their fix)."""
    stack = read_stack(
        Interpreter(sys.executable, "3", (str(site),)),
        load_stack_data(),
        ptxas_targets=[],
        environ={},
        cache_path=None,
    )
    return {p.name: p for p in stack.packages}


_CHILD = """
import sys
import msgspec
from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import read_stack
from blackwell_doctor.ruledata.stack import load_stack_data
stack = read_stack(Interpreter(sys.executable, "3", (sys.argv[1],)), load_stack_data(),
                   ptxas_targets=[], environ={}, cache_path=None)
sys.stdout.buffer.write(msgspec.json.encode(stack.packages))
"""


def _read_in_child(site: Path) -> dict[str, GpuPackage]:
    """:func:`_read` in a child process under CHILD_DEADLINE_S (for readers that never
    ended before their fix)."""
    try:
        done = subprocess.run(
            [sys.executable, "-c", _CHILD, str(site)],
            capture_output=True,
            timeout=CHILD_DEADLINE_S,
            check=False,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"reading {site} did not end within {CHILD_DEADLINE_S} s")
    assert done.returncode == 0, done.stderr.decode(errors="replace")
    packages = msgspec.json.decode(done.stdout, type=list[GpuPackage])
    return {p.name: p for p in packages}


# -- 1. a fatbin container that does not go forward -----------------------------------------


def test_a_fatbin_container_that_does_not_go_forward_ends_the_scan_as_malformed(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    good = _elf([(".nv_fatbin", _container(120))])
    # Header size 0 and payload size 0, after a good container: the scan stopped forever
    # at the second, its list of units growing.
    bad = _elf([(".nv_fatbin", _container(120) + _stalled_container())])
    _install(site, "nvidia-demo-cu12", "1.0", {"lib/libgood.so": good, "lib/libbad.so": bad})
    (p,) = _read_in_child(site).values()
    assert p.unreadable == [
        "lib/libbad.so: malformed: .nv_fatbin: fatbin container at 0x90: header size 0"
    ]
    # The other file of the package is read as ever.
    assert [(f.path, f.units[0].sass) for f in p.files] == [("lib/libgood.so", ["sm_120"])]
    assert p.shared_objects == 2


# -- 2. an ELF whose counts and offsets run past the file -----------------------------------


@pytest.mark.parametrize(
    ("lie", "reason"),
    [
        # e_shnum 0: the count is section 0's sh_size (the gABI's extension), here 2**40.
        ({"shnum": 0, "section0_size": 1 << 40}, "1099511627776 sections, more than 65536"),
        ({"shnum": 1000}, r"1000 section headers at 0x\w+ run past the end of the file"),
        ({"shstrndx": 7}, "section name table 7 of 3 sections"),
        ({"shentsize": 32}, "section header size 32, not 64"),
        (
            {"moved": {".nv_fatbin": 1 << 30}},
            r"\.nv_fatbin: 80 bytes at 0x40000000, past the end of the file",
        ),
        (
            {"name_at": {".nv_fatbin": 4000}},
            r"a section name at 4000, past the name table \(22 bytes\)",
        ),
    ],
)
def test_an_elf_whose_headers_run_past_the_file_is_malformed(
    tmp_path: Path, lie: dict[str, Any], reason: str
) -> None:
    path = tmp_path / "libx.so"
    path.write_bytes(_elf([(".nv_fatbin", _container(120))], **lie))
    with pytest.raises(Malformed, match=reason):
        scan_file(str(path))


def test_a_sparse_elf_claiming_2_to_the_40_sections_is_not_walked(tmp_path: Path) -> None:
    """The file seems to hold all the section headers it claims (a sparse file of 64 GiB,
    4 KiB of it on disk): pyelftools walked them, zeros, for as long as there seemed to be
    more (a real 64 MiB file took 90 s)."""
    site = tmp_path / "site"
    _install(site, "nvidia-sparse-cu12", "1.0", {"lib/libsparse.so": b""})
    lib = site / "lib" / "libsparse.so"
    lib.write_bytes(_elf([(".nv_fatbin", _container(120))], shnum=0, section0_size=1 << 40))
    try:
        os.truncate(lib, 64 << 30)
    except OSError as exc:
        pytest.skip(f"no sparse 64 GiB file here: {exc}")
    (p,) = _read_in_child(site).values()
    assert p.unreadable == ["lib/libsparse.so: malformed: 1099511627776 sections, more than 65536"]


def test_the_sections_read_equal_pyelftools_for_every_shared_object_here() -> None:
    """The oracle: pyelftools (which read them before) on the shared objects installed in
    this interpreter's environment, each section the audit reads."""
    from elftools.elf.elffile import ELFFile
    from elftools.elf.enums import ENUM_E_MACHINE

    wanted = {".nv_fatbin", ".rodata", ".lrodata", ".data", ".ldata", ".data.rel.ro"}
    compared = 0
    for path in _installed_shared_objects():
        fd = os.open(path, os.O_RDONLY)
        try:
            try:
                mine = read_elf(fd, os.fstat(fd).st_size)
            except NotElf:
                continue
        finally:
            os.close(fd)
        with path.open("rb") as f:
            elf = ELFFile(f)
            theirs = [
                (s.name, s["sh_offset"], s["sh_size"])
                for s in elf.iter_sections()
                if s.name in wanted and s["sh_type"] != "SHT_NOBITS"
            ]
            header = (ENUM_E_MACHINE[elf["e_machine"]], elf["e_flags"])
            assert (mine.machine, mine.flags) == header, path
        assert [(s.name, s.offset, s.size) for s in mine.sections] == theirs, path
        compared += 1
    assert compared >= 20


def _installed_shared_objects() -> Iterator[Path]:
    seen = 0
    for dist in importlib.metadata.distributions():
        for f in dist.files or ():
            if SHARED_OBJECT.search(f.name):
                path = Path(str(dist.locate_file(f)))
                if path.is_file():
                    yield path
                    seen += 1
                    if seen >= 400:
                        return


# -- 3. a FIFO where a library or a cubin should be -----------------------------------------


def test_a_fifo_named_like_a_library_or_a_cubin_is_not_a_regular_file(tmp_path: Path) -> None:
    site = tmp_path / "site"
    _install(
        site,
        "flashinfer-cubin",
        "0.6.11",
        {"flashinfer_cubin/lib/libx.so": None, "flashinfer_cubin/cubins/k.cubin": None},
    )
    # A FIFO as RECORD itself, on another GPU distribution.
    info = _install(site, "nvidia-fifo-cu12", "1.0", {})
    (info / "RECORD").unlink()
    os.mkfifo(info / "RECORD")
    packages = _read_in_child(site)
    assert packages["flashinfer-cubin"].unreadable == [
        "flashinfer_cubin/lib/libx.so: not a regular file",
        "flashinfer_cubin/cubins/k.cubin: not a regular file",
    ]
    assert packages["nvidia-fifo-cu12"].unreadable == [
        "nvidia_fifo_cu12-1.0.dist-info/RECORD: not a regular file"
    ]


# -- 4. METADATA and RECORD that are not UTF-8 ----------------------------------------------


def test_metadata_and_record_that_are_not_utf8_are_reasons_not_a_crash(tmp_path: Path) -> None:
    site = tmp_path / "site"
    # Not a GPU distribution: its folder's name says so, and its METADATA is not read.
    _install(site, "left-pad", "1.0", {}, metadata=b"Metadata-Version: 2.1\nName: left\xe9pad\n")
    # A GPU one whose header fields are not UTF-8: its folder's name and version stand.
    _install(
        site,
        "nvidia-latin1-cu12",
        "2.0",
        {"lib/liblatin.so": _elf([(".nv_fatbin", _container(90))])},
        metadata=b"Metadata-Version: 2.1\nName: nvidia-latin1-cu12\nSummary: caf\xe9\n",
    )
    # Only the description is not UTF-8: the fields are read, the description is not.
    _install(
        site,
        "nvidia-body-cu12",
        "3.0",
        {},
        metadata=b"Metadata-Version: 2.1\nName: nvidia-body-cu12\nVersion: 3.0\n\ncaf\xe9\n",
    )
    # A RECORD with one row that is not UTF-8 among rows that are.
    lib = _elf([(".nv_fatbin", _container(120))])
    record = b"lib/caf\xe9.so,,\nlib/libok.so,,\n"
    _install(site, "nvidia-record-cu12", "4.0", {"lib/libok.so": lib}, record=record)
    packages = _read(site)
    assert sorted(packages) == [
        "nvidia-body-cu12",
        "nvidia-latin1-cu12",
        "nvidia-record-cu12",
    ]
    latin = packages["nvidia-latin1-cu12"]
    assert (latin.version, latin.unreadable) == (
        "2.0",
        ["nvidia_latin1_cu12-2.0.dist-info/METADATA: not UTF-8 (byte 0xe9 at offset 59)"],
    )
    assert [f.path for f in latin.files] == ["lib/liblatin.so"]
    assert (packages["nvidia-body-cu12"].version, packages["nvidia-body-cu12"].unreadable) == (
        "3.0",
        [],
    )
    rec = packages["nvidia-record-cu12"]
    assert rec.unreadable == [
        "nvidia_record_cu12-4.0.dist-info/RECORD: 1 row(s) not UTF-8, left out "
        "(the first: row 1, byte 0xe9 at offset 7)"
    ]
    assert [f.path for f in rec.files] == ["lib/libok.so"]


# -- 5. symbolic links that loop -----------------------------------------------------------


def test_a_metadata_folder_or_file_that_links_to_itself_is_a_reason_not_a_crash(
    tmp_path: Path,
) -> None:
    site = tmp_path / "site"
    site.mkdir()
    (site / "nvidia_loop_cu12-1.0.dist-info").symlink_to("nvidia_loop_cu12-1.0.dist-info")
    (site / "not_gpu-1.0.dist-info").symlink_to("not_gpu-1.0.dist-info")
    info = _install(site, "nvidia-metaloop-cu12", "2.0", {})
    (info / "METADATA").unlink()
    (info / "METADATA").symlink_to("METADATA")
    info = _install(site, "nvidia-recordloop-cu12", "3.0", {})
    (info / "RECORD").unlink()
    (info / "RECORD").symlink_to("RECORD")
    packages = _read(site)
    eloop = os.strerror(40)
    assert {n: (p.version, p.unreadable) for n, p in packages.items()} == {
        # The folder itself: neither its METADATA nor its RECORD can be opened.
        "nvidia-loop-cu12": (
            "1.0",
            [
                f"nvidia_loop_cu12-1.0.dist-info/METADATA: {eloop}",
                f"nvidia_loop_cu12-1.0.dist-info/RECORD: {eloop}",
            ],
        ),
        "nvidia-metaloop-cu12": (
            "2.0",
            [f"nvidia_metaloop_cu12-2.0.dist-info/METADATA: {eloop}"],
        ),
        "nvidia-recordloop-cu12": (
            "3.0",
            [f"nvidia_recordloop_cu12-3.0.dist-info/RECORD: {eloop}"],
        ),
    }


# -- 6. a RECORD past its cap ---------------------------------------------------------------


def test_a_record_past_its_row_cap_is_read_to_the_cap_and_says_so(tmp_path: Path) -> None:
    site = tmp_path / "site"
    lib = _elf([(".nv_fatbin", _container(120))])
    rows = [f"nvidia/x/f{i}.py,," for i in range(MAX_RECORD_ROWS - 1)]
    # The cap's last row is read; the row past it is not.
    rows += ["lib/libin.so,,", "lib/libpast.so,,"]
    record = ("\n".join(rows) + "\n").encode()
    files = {"lib/libin.so": lib, "lib/libpast.so": lib}
    _install(site, "nvidia-huge-cu12", "1.0", files, record=record)
    (p,) = _read(site).values()
    assert p.unreadable == [
        f"nvidia_huge_cu12-1.0.dist-info/RECORD: more than {MAX_RECORD_ROWS} rows: "
        "not read past them"
    ]
    assert [f.path for f in p.files] == ["lib/libin.so"]


def test_a_record_past_its_byte_cap_is_read_to_the_cap_and_says_so(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(inv, "MAX_RECORD_BYTES", 1 << 20)
    site = tmp_path / "site"
    lib = _elf([(".nv_fatbin", _container(120))])
    # One row of 2 MiB (no newline): memory stays at the cap, not at the row.
    record = b"lib/libin.so,,\n" + b"x" * (2 << 20) + b".so,,\n"
    _install(site, "nvidia-wide-cu12", "1.0", {"lib/libin.so": lib}, record=record)
    (p,) = _read(site).values()
    assert p.unreadable == [
        "nvidia_wide_cu12-1.0.dist-info/RECORD: larger than 1 MiB: not read past it"
    ]
    assert [f.path for f in p.files] == ["lib/libin.so"]


# -- the same through audit --image ---------------------------------------------------------


class _Image:
    """A stand-in for the never-started container: a site directory's tar stream, as the
    archive endpoint sends it (members under the folder's base name)."""

    def __init__(self, data: bytes) -> None:
        self.data = data

    def follow(self, path: str) -> tuple[str, dict[str, Any]]:
        return path, {"mode": 1 << 31}

    @contextlib.contextmanager
    def tar(self, path: str) -> Iterator[tarfile.TarFile]:
        with tarfile.open(fileobj=io.BytesIO(self.data), mode="r|") as tar:
            yield tar


def _member(tar: tarfile.TarFile, name: str, data: bytes | None) -> None:
    """A regular file, or (None) a FIFO."""
    info = tarfile.TarInfo(f"site-packages/{name}")
    if data is None:
        info.type = tarfile.FIFOTYPE
        tar.addfile(info)
        return
    info.size = len(data)
    tar.addfile(info, io.BytesIO(data))


def test_the_image_reader_says_what_the_host_reader_says(tmp_path: Path) -> None:
    """audit --image streams the files out of the image (collect.stack.image): a FIFO
    there is not spooled, a malformed ELF is scanned by the same reader, METADATA and RECORD
    are mirrored for the same inventory, a FIFO among them mirrored as a FIFO."""
    from blackwell_doctor.collect.stack.image import _ImageScans, _stream_site

    buf = io.BytesIO()
    with tarfile.open(fileobj=buf, mode="w") as tar:
        info = "nvidia_img_cu12-1.0.dist-info"
        _member(tar, f"{info}/METADATA", b"Metadata-Version: 2.1\nName: nvidia-img-cu12\n")
        rows = "lib/libgood.so,,\nlib/libcount.so,,\nlib/libfifo.so,,\n"
        _member(tar, f"{info}/RECORD", rows.encode())
        _member(tar, "lib/libgood.so", _elf([(".nv_fatbin", _container(120))]))
        _member(tar, "lib/libcount.so", _elf([], shnum=0, section0_size=1 << 40))
        _member(tar, "lib/libfifo.so", None)
        _member(tar, "other-1.0.dist-info/METADATA", b"Name: caf\xe9\n")
        _member(tar, "nvidia_rec_cu12-1.0.dist-info/METADATA", b"Name: nvidia-rec-cu12\n")
        _member(tar, "nvidia_rec_cu12-1.0.dist-info/RECORD", b"caf\xe9.so,,\n")
        _member(tar, "nvidia_fifo_cu12-1.0.dist-info/METADATA", b"Name: nvidia-fifo-cu12\n")
        _member(tar, "nvidia_fifo_cu12-1.0.dist-info/RECORD", None)
    mirror, work = tmp_path / "mirror", tmp_path / "work"
    mirror.mkdir()
    work.mkdir()
    scans = _ImageScans()
    box: Any = _Image(buf.getvalue())
    _stream_site(box, "/opt/venv/lib/python3.11/site-packages", mirror, work, scans)
    _, packages = inv.inventory([str(mirror)], load_stack_data(), scans)
    got = {p.name: p.unreadable for p in packages}
    assert got == {
        "nvidia-fifo-cu12": ["nvidia_fifo_cu12-1.0.dist-info/RECORD: not a regular file"],
        "nvidia-img-cu12": [
            "lib/libcount.so: malformed: 1099511627776 sections, more than 65536",
            "lib/libfifo.so: not a regular file",
        ],
        "nvidia-rec-cu12": [
            "nvidia_rec_cu12-1.0.dist-info/RECORD: 1 row(s) not UTF-8, left out "
            "(the first: row 1, byte 0xe9 at offset 3)"
        ],
    }
    (img,) = (p for p in packages if p.name == "nvidia-img-cu12")
    assert [f.path for f in img.files] == ["lib/libgood.so"]


# -- the readers against the real thing ----------------------------------------------------


def test_the_distributions_found_equal_importlib_metadata_on_this_environment() -> None:
    """Names from folder names (not from every METADATA), versions from METADATA, files
    from RECORD: the same as importlib.metadata on this interpreter's sys.path (every
    distribution, not only GPU ones)."""
    paths = [p for p in sys.path if p and os.path.isdir(p)]
    expected: dict[str, tuple[str, str, list[str]]] = {}
    for dist in importlib.metadata.distributions(path=paths):
        name = normalise(dist.metadata["Name"] or "")
        if name and name not in expected:
            files = [str(f) for f in dist.files or () if SHARED_OBJECT.search(f.name)]
            expected[name] = (dist.version, str(dist.locate_file("")), files)
    found = {
        name: (
            d.version,
            str(d.locate_file("")),
            [str(PurePosixPath(p).relative_to(d.locate_file(""))) for p in shared_objects(d)],
        )
        for name, d in distributions(paths, lambda _: True).items()
    }
    assert len(found) >= 20
    assert found == expected


# -- the exit-code contract, end to end ------------------------------------------------------


def test_audit_of_a_hostile_environment_completes_with_its_verdict(tmp_path: Path) -> None:
    """Every lie above in one environment, through the CLI in a child process: the audit
    completes (0 or 1), names each file it could not read, and judges the rest."""
    site = tmp_path / "site"
    sm120 = _elf([(".nv_fatbin", _container(120))])
    _install(
        site,
        "nvidia-hostile-cu12",
        "1.0",
        {
            "lib/libgood.so": sm120,
            "lib/libstall.so": _elf([(".nv_fatbin", _stalled_container())]),
            "lib/libcount.so": _elf([], shnum=0, section0_size=1 << 40),
            "lib/libfifo.so": None,
        },
    )
    _install(site, "other", "1.0", {}, metadata=b"Metadata-Version: 2.1\nName: caf\xe9\n")
    _install(site, "nvidia-record-cu12", "1.0", {}, record=b"caf\xe9.so,,\n")
    (site / "nvidia_loop_cu12-1.0.dist-info").symlink_to("nvidia_loop_cu12-1.0.dist-info")
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True)
    (pure,) = venv.glob("lib/python*/site-packages")
    (pure / "hostile.pth").write_text(f"{site}\n")
    argv = [sys.executable, "-m", "blackwell_doctor", "audit", "--python", str(venv / "bin/python")]
    argv += ["--facts", str(FACTS_FIXTURES / "sm120-driver580.json"), "-f", "json"]
    try:
        done = subprocess.run(
            [*argv, "--embed-facts"],
            capture_output=True,
            text=True,
            timeout=CHILD_DEADLINE_S,
            check=False,
            env={**os.environ, "XDG_CACHE_HOME": str(tmp_path / "xdg")},
        )
    except subprocess.TimeoutExpired:
        pytest.fail(f"audit did not end within {CHILD_DEADLINE_S} s")
    assert done.returncode in (0, 1), done.stderr
    assert "Traceback" not in done.stderr
    doc = json.loads(done.stdout)
    packages = {p["name"]: p for p in doc["facts"]["stack"]["packages"]}
    assert sorted(packages) == ["nvidia-hostile-cu12", "nvidia-loop-cu12", "nvidia-record-cu12"]
    hostile = packages["nvidia-hostile-cu12"]
    assert [f["path"] for f in hostile["files"]] == ["lib/libgood.so"]
    reasons = {line.partition(": ")[0]: line.partition(": ")[2] for line in hostile["unreadable"]}
    assert reasons == {
        "lib/libstall.so": "malformed: .nv_fatbin: fatbin container at 0x40: header size 0",
        "lib/libcount.so": "malformed: 1099511627776 sections, more than 65536",
        "lib/libfifo.so": "not a regular file",
    }
    kernels = next(r for r in doc["results"] if r["id"] == "stack.kernels")
    assert kernels["status"] == "pass", kernels
    assert kernels["evidence"]["nvidia-hostile-cu12 1.0: not read"] == hostile["unreadable"]
    assert re.search(r"RECORD: 1 row\(s\) not UTF-8", str(packages["nvidia-record-cu12"]))


# -- issue 32's review: what the first fixes left -------------------------------------------


def test_a_record_row_with_a_nul_byte_is_a_reason_not_a_crash(tmp_path: Path) -> None:
    # csv takes a NUL; Path.stat() then raised ValueError (exit 4).
    site = tmp_path / "site"
    good = _elf([(".nv_fatbin", _container(120))])
    info = _install(site, "nvidia-demo-cu12", "1.0", {"lib/libgood.so": good})
    (info / "RECORD").write_bytes(b"lib/libgood.so,,\nlib/a\0b.so,,\n")
    (p,) = _read(site).values()
    assert p.unreadable == ["lib/a\0b.so: a NUL byte in its name"]
    assert [f.path for f in p.files] == ["lib/libgood.so"]


def test_a_library_listed_under_several_spellings_is_scanned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    site = tmp_path / "site"
    good = _elf([(".nv_fatbin", _container(120))])
    info = _install(site, "nvidia-demo-cu12", "1.0", {"lib/libgood.so": good})
    rows = ["lib/libgood.so", "lib/../lib/libgood.so", "./lib/libgood.so", "lib//libgood.so"]
    (info / "RECORD").write_text("".join(f"{r},,\n" for r in rows))
    scans: list[str] = []
    real = inv.scan_triples

    def counted(path: str) -> Any:
        scans.append(path)
        return real(path)

    monkeypatch.setattr(inv, "scan_triples", counted)
    (p,) = _read(site).values()
    assert len(scans) == 1, scans
    assert p.shared_objects == 4
    assert [f.path for f in p.files] == ["lib/libgood.so"]


def test_sections_naming_the_same_bytes_are_scanned_once(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # 65,534 .data headers over one span of fatbin magic would each have walked it again.
    import blackwell_doctor.collect.stack.fatbin as fatbin

    data = _container(90) + bytes(16)
    path = tmp_path / "libx.so"
    path.write_bytes(_elf([(".data", data)] * 50, moved={".data": 64}))
    walks: list[tuple[int, int]] = []
    real = fatbin.scan_loaded

    def counted(buf: Any, start: int, end: int, *rest: Any) -> Any:
        walks.append((start, end))
        return real(buf, start, end, *rest)

    monkeypatch.setattr(fatbin, "scan_loaded", counted)
    found = scan_file(str(path))
    assert len(walks) == 1, walks
    assert [[t.name for t in unit] for unit in found.loaded] == [["sm_90"]]


def test_a_walk_past_the_entry_budget_is_malformed(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Would-be containers whose chains run on and then break: each walked to its end, from
    # each magic number (quadratic: 4 MiB ~20 minutes). The file's walk has a budget.
    import blackwell_doctor.collect.stack.fatbin as fatbin

    entry = struct.pack("<HHIQ8xHHI8xQ8xQ", 2, 0, 64, 0, 8, 1, 90, 0, 0)
    broken = struct.pack("<IHHQ", FATBIN_MAGIC, 1, 16, 100 * 64 + 8) + entry * 100 + bytes(8)
    path = tmp_path / "libx.so"
    path.write_bytes(_elf([(".data", broken)]))
    assert scan_file(str(path)).loaded == ()  # within the budget: not a container, no unit
    monkeypatch.setattr(fatbin, "MAX_LOADED_STEPS", 50)
    with pytest.raises(Malformed, match="more than 50 entry headers walked"):
        scan_file(str(path))


def test_a_version_past_ints_digit_limit_matches_nothing() -> None:
    # packaging's Version raised a plain ValueError (int() of more than 4,300 digits), not
    # InvalidVersion, from the version an audited METADATA gives.
    from blackwell_doctor.ruledata.stack import _in

    assert _in("1" * 5000, ">=0") is False
    assert _in("2.8.0", ">=2.7") is True
