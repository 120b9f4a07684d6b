"""The SASS and PTX targets of a shared object's embedded fatbins, read from headers only.

The ELF section headers come from pyelftools (pure Python, BSD, maintained since 2011; it
reads the section table lazily and nothing else we do not ask for). LIEF (C++, 20+ MB
wheels) parses the whole binary up front, which for libtorch_cuda is most of a gigabyte of
work we do not need. The fatbin containers in ``.nv_fatbin`` are walked through their
headers with ``struct`` over a memory map: no payload is read or decompressed, so a
gigabyte of kernels costs a few pages.
(``__nv_relfatbin``, relocatable device code for a later device link, is not loaded by the
runtime and is skipped: see FATBIN_SECTIONS.)

Container layout (CUDA's fatbinary format, as cuobjdump reads it; public descriptions:
n-eiling/cuda-fatbin-decompression, GrigoryEvko/nvopen-tools
fatbin/FORMAT_SPECIFICATION.md), little-endian:

- header, 16 bytes: magic 0xBA55ED50, version u16 (1), header size u16 (16), payload size u64;
- entries, back to back: kind u16 (1 PTX, 2 ELF cubin), u16, entry header size u32 (64, 80
  or 112), payload size u64 (the entry's data, 8-aligned, follows its header), ...,
  version minor u16 and major u16 at 24 (PTX: the PTX ISA, 9.0; ELF: the cubin ABI), the
  architecture u32 at 28 (90, 120, 121) and flags u64 at 40.

The flags' architecture variants were read off fatbins nvcc 13.0 wrote for sm_90a, sm_100f,
sm_120a, compute_121a (tests/test_audit_real.py checks them against cuobjdump): 0x100000
marks an ``a`` (architecture-specific) target, 0x200000 an ``f`` (family) target.
"""

from __future__ import annotations

import mmap
import struct
from collections.abc import Iterator
from dataclasses import dataclass
from typing import BinaryIO, Literal

FATBIN_MAGIC = 0xBA55ED50
# Only .nv_fatbin holds what the CUDA runtime registers and loads. __nv_relfatbin carries
# relocatable device code kept for a later device link (-rdc); in libnccl.so.2 it is 127
# containers beside .nv_fatbin's 16, and cuobjdump --list-elf does not list it either.
FATBIN_SECTIONS = (".nv_fatbin",)
_HEADER = struct.Struct("<IHHQ")
_ENTRY = struct.Struct("<HHIQ8xHHI8xQ")  # kind, _, header size, size, minor, major, arch, flags
_ENTRY_MIN = 64
_ARCH_SPECIFIC = 0x100000
_FAMILY = 0x200000
ELF_MAGIC = b"\x7fELF"

Kind = Literal["sass", "ptx"]


@dataclass(frozen=True, order=True)
class Target:
    """One entry of a fatbin: SASS (a cubin) or PTX for an architecture, ``suffix`` "a"
    (that compute capability only), "f" (its family) or ""."""

    kind: Kind
    arch: int  # 90, 120, 121
    suffix: Literal["", "a", "f"]
    # PTX: the PTX ISA version of the text ((9, 0)); SASS: the cubin's ABI version.
    version: tuple[int, int]

    @property
    def name(self) -> str:
        """``sm_120a`` for SASS, ``compute_120a`` for PTX (nvcc's words)."""
        prefix = "sm" if self.kind == "sass" else "compute"
        return f"{prefix}_{self.arch}{self.suffix}"

    @property
    def cuobjdump_name(self) -> str:
        """The name ``cuobjdump --list-elf/--list-ptx`` prints (13.5 prints family cubins
        without their ``f``: ``sm_100``)."""
        return f"sm_{self.arch}{'' if self.suffix == 'f' else self.suffix}"


@dataclass(frozen=True)
class FatbinScan:
    """The fatbin containers of one file, each as the targets it holds, in file order."""

    units: tuple[tuple[Target, ...], ...]

    @property
    def targets(self) -> list[Target]:
        return [t for unit in self.units for t in unit]


class NotElf(Exception):
    """The file is not an ELF object (a script, a linker script named .so, a truncated file)."""


def _entries(buf: mmap.mmap | bytes, start: int, end: int) -> Iterator[Target]:
    off = start
    while off + _ENTRY_MIN <= end:
        kind, _, header_size, size, minor, major, arch, flags = _ENTRY.unpack_from(buf, off)
        if header_size < _ENTRY_MIN:
            return
        if kind in (1, 2):
            suffix: Literal["", "a", "f"] = (
                "a" if flags & _ARCH_SPECIFIC else "f" if flags & _FAMILY else ""
            )
            yield Target("ptx" if kind == 1 else "sass", arch, suffix, (major, minor))
        off += header_size + size


def scan_containers(buf: mmap.mmap | bytes, start: int, end: int) -> list[tuple[Target, ...]]:
    """The containers between ``start`` and ``end`` of ``buf``. Containers follow one another,
    padded to 8 or 16 bytes (the linker aligns each); anything else between them is skipped
    by looking for the next magic."""
    units: list[tuple[Target, ...]] = []
    magic = struct.pack("<I", FATBIN_MAGIC)
    off = start
    while off + _HEADER.size <= end:
        found, _version, header_size, size = _HEADER.unpack_from(buf, off)
        if found != FATBIN_MAGIC:
            nxt = buf.find(magic, off + 1, end)
            if nxt < 0:
                break
            off = nxt
            continue
        first = off + header_size
        stop = min(first + size, end)
        units.append(tuple(_entries(buf, first, stop)))
        off = first + size
    return units


def scan_file(path: str) -> FatbinScan:
    """The fatbin containers of the ELF file at ``path`` (none: no GPU code). Raises NotElf
    for a file that is not ELF, OSError for one that cannot be read."""
    from elftools.common.exceptions import ELFError
    from elftools.elf.elffile import ELFFile

    with open(path, "rb") as f:
        if f.read(4) != ELF_MAGIC:
            raise NotElf(path)
        f.seek(0)
        try:
            spans = _fatbin_spans(f, ELFFile)
        except (ELFError, struct.error, ValueError) as exc:
            raise NotElf(f"{path}: {exc}") from None
        if not spans:
            return FatbinScan(())
        with mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) as buf:
            units: list[tuple[Target, ...]] = []
            for start, end in spans:
                units.extend(scan_containers(buf, start, min(end, len(buf))))
    return FatbinScan(tuple(units))


def _fatbin_spans(f: BinaryIO, elf_file: type) -> list[tuple[int, int]]:
    elf = elf_file(f)
    spans = []
    for section in elf.iter_sections():
        if section.name in FATBIN_SECTIONS and section["sh_type"] != "SHT_NOBITS":
            offset, size = section["sh_offset"], section["sh_size"]
            spans.append((offset, offset + size))
    return spans
