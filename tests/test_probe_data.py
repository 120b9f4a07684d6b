"""The probe kernels' operands (collect.probe._child.make_data): deterministic, of the sizes
the tile plan gives, and varied where the kernel reads them (no row of a k-slice, and no
k-slice, repeats another), with positive E4M3 scales. A pool repeated rather than every
byte drawn (issue 36); tests/test_probe_gpu.py checks the kernel's sums on them against a
host reference."""

from __future__ import annotations

import pytest

from blackwell_doctor.collect.probe._child import make_data
from blackwell_doctor.ruledata.tileplan import Tile, stage_buffers
from blackwell_doctor.ruledata.tiles import load_catalogue

K_TOTAL = 8192  # the probe's K (Job.k_total)


def _tiles() -> list[Tile]:
    _fmt, tiles = load_catalogue()
    return list(tiles)


@pytest.mark.parametrize("tile", _tiles(), ids=lambda t: f"{t.m}x{t.n}x{t.k}")
def test_each_operand_is_varied_where_the_kernel_reads_it(tile: Tile) -> None:
    k_iterations = K_TOTAL // tile.k
    data = make_data(tile, k_iterations, seed=1)

    buffers = stage_buffers(tile)
    sizes = (buffers.a, buffers.b, buffers.sfa, buffers.sfb)
    got = (data.a, data.b, data.sfa, data.sfb)
    assert [len(x) for x in got] == [size * k_iterations for size in sizes]
    for operand, rows in ((data.a, tile.m), (data.b, tile.n)):
        row_bytes = tile.k // 2  # two E2M1 values a byte, tile-major (the .cu header)
        slices = [
            operand[i : i + rows * row_bytes] for i in range(0, len(operand), rows * row_bytes)
        ]
        assert len(set(slices)) == len(slices) == k_iterations
        for piece in (slices[0], slices[-1]):
            assert len({piece[r * row_bytes : (r + 1) * row_bytes] for r in range(rows)}) == rows
    assert data.a[: len(data.b)] != data.b[: len(data.a)]
    # Positive E4M3 scales, exponent field 5..9 (2^-2 .. 2^2): no zero, no NaN.
    for scales in (data.sfa, data.sfb):
        assert {byte >> 7 for byte in scales} == {0}
        assert {(byte >> 3) & 15 for byte in scales} <= set(range(5, 10))


def test_the_same_seed_gives_the_same_operands_and_another_other_ones() -> None:
    tile = Tile(m=128, n=128, k=64, epilogue_bytes=11264)

    assert make_data(tile, 4, seed=7) == make_data(tile, 4, seed=7)
    assert make_data(tile, 4, seed=7).a != make_data(tile, 4, seed=8).a
