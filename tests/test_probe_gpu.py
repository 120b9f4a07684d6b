"""The probes on a real GPU: the bisected limit, every tile's launch and timing, and the
block-scaled mainloop's arithmetic against a host reference."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from blackwell_doctor.collect.gpu import collect_gpu
from blackwell_doctor.collect.probe.runner import collect_gpu_and_probes, run_probes
from blackwell_doctor.facts.document import CudaFacts, NvmlFacts, ProbeFacts
from blackwell_doctor.ruledata.tileplan import Tile, plan_tile
from blackwell_doctor.ruledata.tiles import load_catalogue

pytestmark = pytest.mark.gpu

E2M1 = [0.0, 0.5, 1.0, 1.5, 2.0, 3.0, 4.0, 6.0]


def _e2m1(nibble: int) -> float:
    value = E2M1[nibble & 7]
    return -value if nibble & 8 else value


def _e4m3(byte: int) -> float:
    exponent, mantissa = (byte >> 3) & 15, byte & 7
    value = mantissa / 8 * 2.0**-6 if exponent == 0 else (1 + mantissa / 8) * 2.0 ** (exponent - 7)
    return -value if byte & 0x80 else value


@pytest.fixture(scope="module")
def probes(tmp_path_factory: pytest.TempPathFactory) -> ProbeFacts:
    cache = tmp_path_factory.mktemp("nvrtc-cache")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLACKWELL_DOCTOR_CACHE_DIR", str(cache))
        _fmt, tiles = load_catalogue()
        facts = run_probes(tiles=tiles, timeout_s=120)
    assert isinstance(facts, ProbeFacts), facts
    return facts


def test_the_bisected_limit_is_the_opt_in_attribute(probes: ProbeFacts) -> None:
    assert probes.devices
    for device in probes.devices:
        assert isinstance(device.smem_optin_attribute, int)
        assert device.smem_launch_limit == device.smem_optin_attribute
        assert isinstance(device.compiled_as, str)


def test_every_tile_that_fits_launches_and_is_timed(probes: ProbeFacts) -> None:
    for device in probes.devices:
        assert device.tiles
        for tile in device.tiles:
            if not tile.fits:
                continue
            assert tile.launched is True, (tile.m, tile.n, tile.k, tile.launch_error)
            assert tile.launch_error is None
            assert tile.time_us is not None
            assert tile.time_us > 0
            assert tile.macs_per_s is not None
            assert tile.macs_per_s > 0
            assert tile.k_iterations == 8192 // tile.k


def test_k64_and_k128_are_both_measured(probes: ProbeFacts) -> None:
    for device in probes.devices:
        rates = {(t.m, t.n, t.k): t.macs_per_s for t in device.tiles}
        assert rates.get((128, 128, 64))
        assert rates.get((128, 128, 128))


@pytest.mark.parametrize(("m", "n", "k"), [(128, 128, 64), (128, 256, 256), (256, 128, 128)])
def test_the_mainloop_matches_a_host_reference(
    m: int, n: int, k: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    from blackwell_doctor.collect.cuda_driver import Driver
    from blackwell_doctor.collect.probe import _child
    from blackwell_doctor.collect.probe.nvrtc import CompiledProbes, compile_probes

    monkeypatch.setenv("BLACKWELL_DOCTOR_CACHE_DIR", str(tmp_path))
    driver = Driver()
    driver.call("cuInit", 0)
    session = _child.DeviceSession(driver, 0)
    major = driver.attribute(session.device, "COMPUTE_CAPABILITY_MAJOR")
    minor = driver.attribute(session.device, "COMPUTE_CAPABILITY_MINOR")
    optin = driver.attribute(session.device, "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN")
    tile = Tile(m=m, n=n, k=k, epilogue_bytes=11264)
    plan = plan_tile(tile, optin)
    assert plan.layout is not None
    compiled = compile_probes(major * 10 + minor, [_child.name_expression(tile, plan.stages)])
    assert isinstance(compiled, CompiledProbes), compiled
    session.load(compiled)
    k_iterations = max(3, plan.stages + 2)  # wrap the stage ring at least once
    run = session.run_mainloop(
        plan, grid=2, k_iterations=k_iterations, timed_launches=0, seed=7, keep_output=True
    )
    assert run.launched, run.launch_error
    assert run.out_block0 is not None
    got = struct.unpack(f"<{m * n}f", run.out_block0)
    data = _child.make_data(tile, k_iterations, 7)
    a_rows, b_rows = (
        _dequantised(data.a, data.sfa, m, k, k_iterations),
        _dequantised(data.b, data.sfb, n, k, k_iterations),
    )
    for row in (0, 1, 17, m - 1):
        for col in (0, 5, 16, 100, n - 1):
            terms = [x * y for x, y in zip(a_rows[row], b_rows[col], strict=True)]
            want = sum(terms)
            scale = sum(abs(t) for t in terms) or 1.0
            assert abs(got[row * n + col] - want) <= 1e-5 * scale, (row, col)


def _dequantised(
    packed: bytes, scales: bytes, rows: int, k_tile: int, k_iterations: int
) -> list[list[float]]:
    """Full-K rows of dequantised values from the tile-major layout (see the .cu header)."""
    row_bytes, sf_k = k_tile // 2, k_tile // 16
    rows_padded = -(-rows // 128) * 128
    out: list[list[float]] = [[] for _ in range(rows)]
    for kt in range(k_iterations):
        tile = packed[kt * rows * row_bytes : (kt + 1) * rows * row_bytes]
        sf = scales[kt * rows_padded * sf_k : (kt + 1) * rows_padded * sf_k]
        for r in range(rows):
            for c in range(row_bytes):
                byte = tile[r * row_bytes + c]
                scale = _e4m3(sf[r * sf_k + (2 * c) // 16])
                out[r].append(_e2m1(byte & 15) * scale)
                out[r].append(_e2m1(byte >> 4) * scale)
    return out


def test_checks_one_child_reads_the_facts_and_probes_in_one_go(tmp_path: Path) -> None:
    # check's path: one child, one CUDA initialisation, for the GPU facts and the probes.
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv("BLACKWELL_DOCTOR_CACHE_DIR", str(tmp_path))
        nvml, cuda, probes = collect_gpu_and_probes(gpu_timeout_s=60, probe_timeout_s=120)
    nvml_alone, cuda_alone = collect_gpu(60)

    assert isinstance(cuda, CudaFacts), cuda
    assert isinstance(cuda_alone, CudaFacts), cuda_alone
    assert [(d.ordinal, d.name, d.pci_bus_id) for d in cuda.devices] == [
        (d.ordinal, d.name, d.pci_bus_id) for d in cuda_alone.devices
    ]
    assert isinstance(nvml, NvmlFacts), nvml
    assert isinstance(nvml_alone, NvmlFacts), nvml_alone
    assert [g.uuid for g in nvml.gpus] == [g.uuid for g in nvml_alone.gpus]
    assert isinstance(probes, ProbeFacts), probes
    assert probes.devices
    for device in probes.devices:
        assert device.smem_launch_limit == device.smem_optin_attribute
        assert all(t.launched for t in device.tiles if t.fits)
