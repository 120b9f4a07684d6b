"""`probe --plan` needs no GPU; probe results are replayable facts judged by family probe."""

from __future__ import annotations

import json

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.facts.document import DeviceProbe, ProbeFacts, TileProbe, Unavailable
from blackwell_doctor.render import Format, render
from blackwell_doctor.report.check import PresetDocument
from blackwell_doctor.report.results import Status
from blackwell_doctor.rules.presets import PROBE_SCHEMA_VERSION, ProbeReport, judge_probe
from tests.conftest import optional
from tests.factsutil import load, replace, result, status


def build_measured(probes: ProbeFacts | Unavailable) -> PresetDocument[ProbeReport]:
    """``probe`` on an SM 12.0 host's facts with these measurements (its report and
    detail sections)."""
    return judge_probe(load("sm120-driver580"), probes)


def render_text(document: PresetDocument[ProbeReport]) -> str:
    return render(document, Format.RICH, color=False)


def test_plan_json_has_the_contract_fields(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["probe", "--plan", "--smem-limit", "101376", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    assert doc["schema_version"] == PROBE_SCHEMA_VERSION == 3
    assert doc["mode"] == "plan"
    assert doc["preset"] == "probe --plan"
    assert doc["results"] == []  # arithmetic: no verdict
    assert doc["exit_code"] == 0
    assert doc["smem_limit"] == 101376
    for tile in doc["tiles"]:
        assert {"m", "n", "k", "k_bytes", "stages", "smem_bytes", "fits"} <= set(tile)
    by = {(t["m"], t["n"], t["k"]): t for t in doc["tiles"]}
    assert by[(128, 128, 128)]["smem_bytes"] == 87040
    assert by[(128, 256, 256)]["fits"] is False


def test_plan_json_validates_against_the_shipped_schema(
    capsys: pytest.CaptureFixture[str],
) -> None:
    from blackwell_doctor.ruledata.resources import schema_text

    jsonschema = optional("jsonschema")

    assert main(["probe", "--plan", "--smem-limit", "101376", "--format", "json"]) == 0
    doc = json.loads(capsys.readouterr().out)
    jsonschema.validate(doc, json.loads(schema_text("probe.schema.json")))
    doc["tiles"][0]["stages"] = "nine"
    with pytest.raises(jsonschema.ValidationError):
        jsonschema.validate(doc, json.loads(schema_text("probe.schema.json")))


def test_plan_text_names_the_limit_and_says_nothing_ran(
    capsys: pytest.CaptureFixture[str],
) -> None:
    assert main(["probe", "--plan", "--smem-limit", "232448"]) == 0
    out = capsys.readouterr().out
    assert "PLAN for a 232,448 B" in out
    assert "nothing was launched" in out
    assert "128x128x64" in out


@pytest.mark.parametrize(
    ("argv", "message"),
    [
        (["probe", "--plan"], "--plan needs --smem-limit"),
        (["probe", "--plan", "--smem-limit", "12"], "outside"),
        (["probe", "--smem-limit", "101376"], "applies to --plan"),
        (["probe", "--plan", "--smem-limit", "lots"], "is not a valid int"),
    ],
)
def test_probe_usage_errors(
    argv: list[str], message: str, capsys: pytest.CaptureFixture[str]
) -> None:
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert message in err
    assert err.count("\n") == 1


def _device(tiles: list[TileProbe], attr: int = 101376, limit: int = 101376) -> DeviceProbe:
    return DeviceProbe(
        ordinal=0,
        name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
        compute_capability=(12, 0),
        smem_optin_attribute=attr,
        smem_launch_limit=limit,
        compiled_as="sm_120 cubin",
        tiles=tiles,
    )


def _with_probes(name: str, probes: ProbeFacts | Unavailable) -> object:
    return replace(load(name), probes=probes)


def _measured_tiles() -> list[TileProbe]:
    facts = load("sm120-driver580")
    assert isinstance(facts.probes, ProbeFacts)
    return [
        msgspec.structs.replace(t, launched=t.fits, time_us=100.0, macs_per_s=1e12)
        for t in facts.probes.devices[0].tiles
    ]


def test_launch_limit_below_the_attribute_warns() -> None:
    probes = ProbeFacts(
        nvrtc_version="13.0",
        cache="hit",
        wall_s=1.0,
        devices=[_device(_measured_tiles(), limit=99 * 1000)],
    )
    r = result(_with_probes("sm120-driver580", probes), "probe.smem_limit")  # type: ignore[arg-type]
    assert r.status is Status.WARN
    assert "99,000 B" in r.summary


def test_a_fitting_tile_the_driver_rejects_is_a_finding() -> None:
    tiles = _measured_tiles()
    tiles[0] = msgspec.structs.replace(
        tiles[0], launched=False, launch_error="CUDA_ERROR_INVALID_VALUE"
    )
    probes = ProbeFacts(nvrtc_version="13.0", cache="hit", wall_s=1.0, devices=[_device(tiles)])
    r = result(_with_probes("sm120-driver580", probes), "probe.tiles")  # type: ignore[arg-type]
    assert r.status is Status.WARN
    assert "CUDA_ERROR_INVALID_VALUE" in r.summary
    report = build_measured(probes)
    assert report.report.exit_code == 1
    assert "fits by arithmetic but did not run" in render_text(report)


def test_probes_skipped_or_failed() -> None:
    skipped = _with_probes("b200-x8", Unavailable("skipped:--no-probe"))
    assert status(skipped, "probe.tiles") is Status.SKIP  # type: ignore[arg-type]
    failed = _with_probes("b200-x8", Unavailable("probe-timeout:60s"))
    r = result(failed, "probe.tiles")  # type: ignore[arg-type]
    assert r.status is Status.ERROR
    assert "probe-timeout:60s" in r.summary


def test_probes_that_could_not_run_exit_3_and_say_why() -> None:
    report = build_measured(Unavailable("libcuda-not-found"))
    assert report.report.exit_code == 3
    assert "Probes could not run: libcuda-not-found" in render_text(report)


def test_k64_vs_k128_ratio_is_measured_not_assumed() -> None:
    tiles = _measured_tiles()
    by = {(t.m, t.n, t.k): i for i, t in enumerate(tiles)}
    tiles[by[(128, 128, 64)]] = msgspec.structs.replace(tiles[by[(128, 128, 64)]], macs_per_s=2e12)
    probes = ProbeFacts(nvrtc_version="13.0", cache="hit", wall_s=1.0, devices=[_device(tiles)])
    text = render_text(build_measured(probes))
    assert "K=64 vs K=128" in text
    assert "2.00x" in text
    assert "not the production MoE kernel" in text


def _measured(tiles: list[TileProbe]) -> ProbeFacts:
    return ProbeFacts(nvrtc_version="13.0", cache="hit", wall_s=1.0, devices=[_device(tiles)])


def test_tiles_that_cannot_run_are_cleared_by_runtime_logs_without_fallback() -> None:
    from blackwell_doctor.facts.document import LogFacts, LogFinding, LogSource

    facts = load("sm120-driver580")
    assert status(facts, "probe.tiles") is Status.WARN  # no logs: cannot tell
    clean = LogFacts(sources=[LogSource(name="vllm.log", kind="file", lines=900, bytes=9000)])
    assert status(replace(facts, logs=clean), "probe.tiles") is Status.PASS
    fallback = LogFacts(
        sources=clean.sources,
        findings=[
            LogFinding(
                signature="moe.tma_ws_init_failed",
                path="vllm.log",
                line=5,
                last_line=5,
                count=1,
                excerpt="Failed to initialize cutlass TMA WS grouped gemm",
            )
        ],
    )
    assert status(replace(facts, logs=fallback), "probe.tiles") is Status.WARN


def test_a_hung_tile_probe_is_not_evaluated_not_blamed_on_shared_memory() -> None:
    tiles = _measured_tiles()
    tiles[0] = msgspec.structs.replace(tiles[0], launched=False, launch_error="probe-timeout:12s")
    r = result(_with_probes("sm120-driver580", _measured(tiles)), "probe.tiles")  # type: ignore[arg-type]
    assert r.status is Status.ERROR
    assert "probe-timeout:12s" in r.summary
    assert "99 KB" not in r.summary


def test_measured_device_with_no_tiles_or_unlaunched_tiles_is_not_a_pass() -> None:
    empty = _with_probes("b200-x8", _measured([]))
    assert status(empty, "probe.tiles") is Status.ERROR  # type: ignore[arg-type]
    tiles = [msgspec.structs.replace(t, launched=None) for t in _measured_tiles()]
    unlaunched = _with_probes("b200-x8", _measured(tiles))
    assert status(unlaunched, "probe.tiles") is Status.ERROR  # type: ignore[arg-type]


def test_a_hostile_device_name_is_shown_escaped_never_obeyed() -> None:
    """A device name comes from the driver (or a facts file): its escape sequences, bidi
    overrides and newlines are shown escaped in probe's text, and cannot forge a line."""
    hostile = "RTX\x1b[2J\x1b]0;pwned\x07\u202eevil\nGPU9 FAKE (CC 9.9), probe kernels: none"
    tiles = _measured_tiles()
    device = msgspec.structs.replace(_device(tiles), name=hostile, compiled_as="sm_120\r\ncubin")
    probes = ProbeFacts(nvrtc_version="13.0\x1b[31m", cache="hit", wall_s=1.0, devices=[device])
    text = render_text(build_measured(probes))
    assert "\x1b" not in text
    assert "\x07" not in text
    assert "\u202e" not in text
    assert "\r" not in text
    assert "RTX\\x1b[2J\\x1b]0;pwned\\x07\\u202eevil\\nGPU9 FAKE" in text
    assert "sm_120\\x0d\\ncubin" in text
    assert "NVRTC 13.0\\x1b[31m" in text
    assert not any(line.startswith("GPU9") for line in text.splitlines())
