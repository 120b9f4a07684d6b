"""The tile catalogue (checks/tiles.toml), validated at load."""

from __future__ import annotations

import functools

import msgspec

from blackwell_doctor.facts.document import TileProbe
from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped
from blackwell_doctor.ruledata.tileplan import BlockScaledFormat, Tile, TilePlan, plan_tile


class _Format(msgspec.Struct, forbid_unknown_fields=True):
    name: str
    a_bits: int
    b_bits: int
    sf_vector: int
    sf_bytes: int


class _Tile(msgspec.Struct, forbid_unknown_fields=True):
    m: int
    n: int
    k: int
    epilogue_bytes: int
    note: str = ""


class _File(msgspec.Struct, forbid_unknown_fields=True):
    format: _Format
    tile: list[_Tile]


@functools.cache
def load_catalogue() -> tuple[BlockScaledFormat, tuple[Tile, ...]]:
    raw = load_shipped("tiles.toml", _File)
    fmt = BlockScaledFormat(**msgspec.structs.asdict(raw.format))
    tiles: list[Tile] = []
    for t in raw.tile:
        if t.k % fmt.sf_vector or t.m % 16 or t.n % 16 or min(t.m, t.n, t.k) <= 0:
            raise CatalogueError(f"checks/tiles.toml: tile {t.m}x{t.n}x{t.k} is not a valid shape")
        tiles.append(Tile(m=t.m, n=t.n, k=t.k, epilogue_bytes=t.epilogue_bytes, note=t.note))
    return fmt, tuple(tiles)


def tile_probe(plan: TilePlan) -> TileProbe:
    """The arithmetic part of a TileProbe (a plan: nothing measured)."""
    layout = plan.layout
    return TileProbe(
        m=plan.tile.m,
        n=plan.tile.n,
        k=plan.tile.k,
        k_bytes=plan.k_bytes,
        stage_bytes=plan.stage_bytes,
        stages=plan.stages,
        mainloop_bytes=layout.mainloop_bytes if layout is not None else 0,
        epilogue_bytes=plan.tile.epilogue_bytes,
        smem_bytes=plan.smem_bytes,
        fits=plan.fits,
        reason=plan.reason,
    )


def plan_catalogue(smem_limit: int) -> list[TileProbe]:
    fmt, tiles = load_catalogue()
    return [tile_probe(plan_tile(t, smem_limit, fmt)) for t in tiles]
