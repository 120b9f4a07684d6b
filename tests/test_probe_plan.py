"""CUTLASS's SM120 block-scaled sizing, reproduced from its source and its printed figures."""

from __future__ import annotations

import pytest

from blackwell_doctor.ruledata.tileplan import (
    KERNEL_EXTRA_BYTES,
    MIN_STAGES,
    NVFP4,
    Tile,
    auto_stage_count,
    plan_tile,
    stage_buffers,
    storage_layout,
)
from blackwell_doctor.ruledata.tiles import load_catalogue, plan_catalogue
from tests.conftest import skip_without

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)

SM12X = 101_376
SM90 = 232_448
EPILOGUE_79D = 11_264


def test_cutlass_example_79d_figures_are_reproduced_exactly() -> None:
    # NVIDIA/cutlass#2692: 79d (NVFP4 grouped, 128x128x128) printed mainloop SharedStorage
    # 74,752 B, epilogue 11,264 B, kernel total 87,040 B on an RTX PRO 6000.
    tile = Tile(m=128, n=128, k=128, epilogue_bytes=EPILOGUE_79D)
    stages = auto_stage_count(tile, SM12X)
    layout = storage_layout(tile, stages)
    assert stages == 4
    assert layout.mainloop_bytes == 74_752
    assert layout.epilogue_bytes == 11_264
    assert layout.total_bytes == 87_040


def test_k_in_elements_and_in_bytes() -> None:
    # REFERENCE §0.1: CtaShape128x128x128B is K = 256 FP4 elements.
    assert Tile(128, 128, 256, 0).k_bytes(NVFP4) == 128
    assert Tile(128, 128, 64, 0).k_bytes(NVFP4) == 32


@pytest.mark.parametrize(
    ("m", "n", "k", "a", "b", "sfa", "sfb"),
    [
        (128, 128, 64, 4096, 4096, 512, 512),
        (128, 128, 128, 8192, 8192, 1024, 1024),
        (256, 128, 128, 16384, 8192, 2048, 1024),
        # scale tiles cover whole 128-row blocks: a 64-row tile still pays for 128 rows
        (64, 256, 128, 4096, 16384, 1024, 2048),
    ],
)
def test_stage_buffers(m: int, n: int, k: int, a: int, b: int, sfa: int, sfb: int) -> None:
    buf = stage_buffers(Tile(m, n, k, 0))
    assert (buf.a, buf.b, buf.sfa, buf.sfb) == (a, b, sfa, sfb)
    assert buf.formula_bytes == a + b + sfa + sfb + 16


def test_alignment_padding_is_what_the_formula_misses() -> None:
    # 9 stages of 128x128x64: the formula charges 9 x 9,232 = 83,088 B; the struct with its
    # 1024-aligned members, 512 B of tensormaps and barriers is 83,968 B.
    tile = Tile(128, 128, 64, EPILOGUE_79D)
    layout = storage_layout(tile, 9)
    assert 9 * stage_buffers(tile).formula_bytes == 83_088
    assert layout.mainloop_bytes == 83_968
    assert layout.b_offset % 1024 == 0
    assert layout.sfa_offset % 16 == 0
    assert layout.total_bytes % 1024 == 0


def test_a_tile_with_one_stage_is_not_built() -> None:
    plan = plan_tile(Tile(128, 256, 256, EPILOGUE_79D), SM12X)
    assert plan.stages == 1
    assert not plan.fits
    assert plan.reason is not None
    assert "needs 2" in plan.reason


def test_overflow_is_reported_with_the_bytes_over() -> None:
    # A limit that the formula's stage choice fits but the padded struct does not.
    tile = Tile(128, 128, 128, EPILOGUE_79D)
    for limit in range(85_000, 92_000, 16):
        plan = plan_tile(tile, limit)
        if plan.stages >= MIN_STAGES and plan.smem_bytes > limit:
            assert plan.reason is not None
            assert f"{plan.smem_bytes - limit:,} B over" in plan.reason
            return
    pytest.fail("expected some limit where padding makes the chosen stages overflow")


def test_catalogue_plans_on_sm12x_and_227kb_parts() -> None:
    sm12x = {(t.m, t.n, t.k): t for t in plan_catalogue(SM12X)}
    sm90 = {(t.m, t.n, t.k): t for t in plan_catalogue(SM90)}
    assert set(sm12x) >= {(128, 128, 64), (128, 128, 128), (128, 128, 256), (256, 128, 128)}
    assert all(t.fits for t in sm90.values())
    assert not sm12x[(128, 256, 256)].fits
    assert sm12x[(128, 128, 64)].stages == 9
    assert sm90[(128, 128, 128)].stages == 11


def test_catalogue_loads_and_every_tile_is_nvfp4() -> None:
    fmt, tiles = load_catalogue()
    assert fmt.name == "NVFP4"
    assert (fmt.a_bits, fmt.sf_vector, fmt.sf_bytes) == (4, 16, 1)
    assert len(tiles) >= 5


@given(
    m=st.sampled_from([64, 128, 256]),
    n=st.sampled_from([64, 128, 256]),
    k=st.sampled_from([64, 128, 256, 512]),
    limit=st.integers(min_value=16_384, max_value=300_000),
    epilogue=st.integers(min_value=0, max_value=40_000),
)
def test_plan_invariants(m: int, n: int, k: int, limit: int, epilogue: int) -> None:
    tile = Tile(m, n, k, epilogue)
    plan = plan_tile(tile, limit)
    if plan.stages >= 1:
        layout = storage_layout(tile, plan.stages)
        # the real storage is never smaller than what the formula charged
        assert layout.mainloop_bytes >= plan.stages * plan.stage_bytes - 16 * plan.stages
        assert layout.total_bytes >= layout.mainloop_bytes + epilogue + KERNEL_EXTRA_BYTES
        # one more stage would not have fitted the formula's budget
        assert (plan.stages + 1) * plan.stage_bytes > limit - epilogue - KERNEL_EXTRA_BYTES
    assert plan.fits == (plan.stages >= MIN_STAGES and 0 < plan.smem_bytes <= limit)


def test_cutlass_3144_is_reproduced_by_padding_not_by_the_formula() -> None:
    # TRT-LLM's CtaShape128x256x64B on GB10: "requires 102400 bytes shared memory but device
    # supports 101376" (NVIDIA/cutlass#3144). The formula's 3 stages fit its budget; the
    # padded storage does not.
    plan = {(t.m, t.n, t.k): t for t in plan_catalogue(SM12X)}[(128, 256, 128)]
    assert plan.stages == 3
    assert plan.smem_bytes == 102_400
    assert not plan.fits
    assert plan.reason is not None
    assert "1,024 B over" in plan.reason
    assert 3 * plan.stage_bytes + plan.epilogue_bytes + KERNEL_EXTRA_BYTES <= SM12X


def test_the_k64_tile_fits_sm12x_where_the_256_wide_tiles_do_not() -> None:
    plans = {(t.m, t.n, t.k): t for t in plan_catalogue(SM12X)}
    assert plans[(128, 128, 64)].fits
    assert not plans[(256, 128, 128)].fits
    assert not plans[(128, 256, 128)].fits
