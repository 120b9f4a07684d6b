"""How CUTLASS sizes an SM120 block-scaled (NVFP4) grouped GEMM tile: pure arithmetic.

Two numbers matter and they disagree:

* the **stage count** CUTLASS picks, from ``sm100_compute_stage_count_or_override_blockscaled``
  (used by the SM120 builder): ``stage_bytes = bits(A)*M*K/8 + bits(B)*N*K/8 + SFA + SFB +
  sizeof(PipelineTmaUmmaAsync<1>::SharedStorage)`` and ``stages = (capacity - carveout) /
  stage_bytes``;
* the **real size** of the mainloop's ``SharedStorage``
  (``sm120_blockscaled_mma_array_tma.hpp``): A and B ``alignas(1024)``, SFA and SFB
  ``alignas(16)``, four 128-byte TMA descriptors, 8-byte full/empty barriers per stage, the
  whole struct padded to 1024 bytes. The formula ignores that padding (NVIDIA/cutlass#3096).

This module computes both for any shared-memory limit, so ``probe --plan`` works anywhere;
the probe kernels then lay their shared memory out the same way and let the driver decide.

REFERENCE.md §2 derives per-stage bytes with the pipeline rounded up to 128 B (18,560 B for
128x128x128); the CUTLASS source charges sizeof(PipelineTmaUmmaAsync<1>::SharedStorage) =
16 B (18,448 B). No stage count in the catalogue differs between the two; this module follows
the source.
"""

from __future__ import annotations

from dataclasses import dataclass

from blackwell_doctor.ruledata.tilelimits import MIN_STAGES as MIN_STAGES

# sizeof(PipelineTmaUmmaAsync<1>::SharedStorage): one full and one empty 8-byte barrier.
PIPELINE_BYTES_PER_STAGE = 16
# TensorMapStorage: smem_tensormap_A, _B, _SFA, _SFB, 128 bytes each (cute::TmaDescriptor).
TENSORMAP_BYTES = 4 * 128
# SM120 scale-factor layouts cover whole 128-row/column blocks (Sm1xxBlockScaledConfig Blk_MN).
SF_BLOCK_MN = 128
# MIN_STAGES (static_assert(DispatchPolicy::Stages >= 2)) lives in ruledata/tilelimits.py.

# What the grouped (ptr-array) kernel keeps beside the mainloop and epilogue storage, per
# sm120_blockscaled_mma_builder.inl: scheduler pipeline PipelineAsyncSharedStorage<8> (128 B),
# two epilogue tensormaps (256 B), tensormap-ready PipelineAsync<3> (48 B). CUTLASS subtracts
# these from the capacity before choosing stages since NVIDIA/cutlass#3092; before that they
# were not counted. The kernel's SharedStorage then pads to 1024 bytes: CUTLASS example 79d
# printed mainloop 74,752 + epilogue 11,264 and a kernel total of 87,040 (NVIDIA/cutlass#2692).
KERNEL_EXTRA_BYTES = 128 + 256 + 48


def _align(offset: int, alignment: int) -> int:
    return -(-offset // alignment) * alignment


@dataclass(frozen=True)
class BlockScaledFormat:
    name: str
    a_bits: int
    b_bits: int
    sf_vector: int
    sf_bytes: int


NVFP4 = BlockScaledFormat(name="NVFP4", a_bits=4, b_bits=4, sf_vector=16, sf_bytes=1)


@dataclass(frozen=True)
class Tile:
    m: int
    n: int
    k: int  # elements
    epilogue_bytes: int
    note: str = ""

    @property
    def name(self) -> str:
        return f"{self.m}x{self.n}x{self.k}"

    def k_bytes(self, fmt: BlockScaledFormat) -> int:
        """K as FlashInfer/TRT-LLM tile names give it: bytes of A data per row."""
        return self.k * fmt.a_bits // 8


@dataclass(frozen=True)
class StageBuffers:
    """Bytes of one pipeline stage of each buffer."""

    a: int
    b: int
    sfa: int
    sfb: int

    @property
    def formula_bytes(self) -> int:
        """What the stage-count formula charges per stage (no alignment padding)."""
        return self.a + self.b + self.sfa + self.sfb + PIPELINE_BYTES_PER_STAGE


def stage_buffers(tile: Tile, fmt: BlockScaledFormat = NVFP4) -> StageBuffers:
    sf_k = tile.k // fmt.sf_vector
    rows_a = _align(tile.m, SF_BLOCK_MN)
    cols_b = _align(tile.n, SF_BLOCK_MN)
    return StageBuffers(
        a=tile.m * tile.k * fmt.a_bits // 8,
        b=tile.n * tile.k * fmt.b_bits // 8,
        sfa=rows_a * sf_k * fmt.sf_bytes,
        sfb=cols_b * sf_k * fmt.sf_bytes,
    )


def auto_stage_count(tile: Tile, capacity: int, fmt: BlockScaledFormat = NVFP4) -> int:
    """StageCountAutoCarveout<epilogue_bytes> in today's SM120 builder for this capacity."""
    usable = capacity - KERNEL_EXTRA_BYTES - tile.epilogue_bytes
    return max(0, usable // stage_buffers(tile, fmt).formula_bytes)


@dataclass(frozen=True)
class StorageLayout:
    """Byte offsets of the mainloop SharedStorage members for a stage count."""

    stages: int
    a_offset: int
    b_offset: int
    sfa_offset: int
    sfb_offset: int
    tensormap_offset: int
    barrier_offset: int
    mainloop_bytes: int  # sizeof(CollectiveMainloop::SharedStorage)
    epilogue_offset: int
    epilogue_bytes: int
    total_bytes: int  # the kernel's SharedStorage: its dynamic shared memory request


def storage_layout(tile: Tile, stages: int, fmt: BlockScaledFormat = NVFP4) -> StorageLayout:
    buf = stage_buffers(tile, fmt)
    a_offset = 0
    b_offset = _align(a_offset + buf.a * stages, 1024)
    sfa_offset = _align(b_offset + buf.b * stages, 16)
    sfb_offset = _align(sfa_offset + buf.sfa * stages, 16)
    # TensorStorage is aligned_struct<128> holding alignas(1024) members: sizeof pads to 1024.
    tensormap_offset = _align(sfb_offset + buf.sfb * stages, 1024)
    barrier_offset = _align(tensormap_offset + TENSORMAP_BYTES, 16)
    end = barrier_offset + PIPELINE_BYTES_PER_STAGE * stages
    mainloop_bytes = _align(end, 1024)
    return StorageLayout(
        stages=stages,
        a_offset=a_offset,
        b_offset=b_offset,
        sfa_offset=sfa_offset,
        sfb_offset=sfb_offset,
        tensormap_offset=tensormap_offset,
        barrier_offset=barrier_offset,
        mainloop_bytes=mainloop_bytes,
        epilogue_offset=mainloop_bytes,
        epilogue_bytes=tile.epilogue_bytes,
        total_bytes=_align(mainloop_bytes + tile.epilogue_bytes + KERNEL_EXTRA_BYTES, 1024),
    )


@dataclass(frozen=True)
class TilePlan:
    tile: Tile
    k_bytes: int
    stage_bytes: int  # the formula's per-stage charge
    stages: int  # what StageCountAutoCarveout picks for the limit
    layout: StorageLayout | None  # None when no stage fits at all
    smem_limit: int

    @property
    def smem_bytes(self) -> int:
        return self.layout.total_bytes if self.layout is not None else 0

    @property
    def fits(self) -> bool:
        return (
            self.stages >= MIN_STAGES
            and self.layout is not None
            and self.layout.total_bytes <= self.smem_limit
        )

    @property
    def reason(self) -> str | None:
        """Why the tile does not fit, in words an operator can act on; None when it fits."""
        if self.stages < MIN_STAGES:
            return (
                f"only {self.stages} stage(s) fit in {self.smem_limit:,} B; CUTLASS's SM120 "
                f"mainloop needs {MIN_STAGES} (no kernel is built for this tile)"
            )
        if self.smem_bytes > self.smem_limit:
            return (
                f"the formula picked {self.stages} stages, but with alignment padding and TMA "
                f"descriptors the storage is {self.smem_bytes:,} B, "
                f"{self.smem_bytes - self.smem_limit:,} B over the limit (initialize() fails: "
                "'Failed to initialize cutlass TMA WS grouped gemm')"
            )
        return None


def plan_tile(tile: Tile, smem_limit: int, fmt: BlockScaledFormat = NVFP4) -> TilePlan:
    stages = auto_stage_count(tile, smem_limit, fmt)
    layout = storage_layout(tile, stages, fmt) if stages >= 1 else None
    return TilePlan(
        tile=tile,
        k_bytes=tile.k_bytes(fmt),
        stage_bytes=stage_buffers(tile, fmt).formula_bytes,
        stages=stages,
        layout=layout,
        smem_limit=smem_limit,
    )
