"""The `probe` command's document and its text rendering."""

from __future__ import annotations

from typing import Literal

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.exitcodes import ExitCode
from blackwell_doctor.facts import (
    P2PProbeFacts,
    ProbeFacts,
    TileProbe,
    ToolInfo,
    Unavailable,
)
from blackwell_doctor.rules.p2p import pair_verdict
from blackwell_doctor.rules.probe import probe_findings
from blackwell_doctor.tiles.plan import MIN_STAGES

# 2: the measured P2P pairs carry no verdict (facts schema 2); ``p2p_verdicts`` holds the
# p2p.transfer check's verdict per pair.
PROBE_SCHEMA_VERSION = 2

DISCLAIMER = (
    "The timings come from blackwell-doctor's probe kernel: a multi-stage block-scaled "
    "mainloop laid out like CUTLASS's storage, dequantising E2M1 values with E4M3 scales on "
    "CUDA cores. It measures this GPU's limits and how a tile shape behaves, not the "
    "production MoE kernel; it promises no speed-up for a runtime."
)


class P2PPairVerdict(msgspec.Struct, frozen=True, kw_only=True):
    """One tested pair's verdict, as the p2p.transfer check decides it from the facts."""

    gpu_a: int
    gpu_b: int
    verdict: str  # works, granted-but-broken, slower-than-host, not-supported, error
    detail: str | None = None


class ProbeReport(msgspec.Struct, frozen=True, kw_only=True):
    schema_version: int
    tool: ToolInfo
    mode: Literal["plan", "measured", "p2p"]
    # plan: the limit given; measured: the first probed device's opt-in limit.
    smem_limit: int | None
    # measured: the first probed device's attribute and bisected launch limit.
    smem_optin_attribute: int | None
    smem_launch_limit: int | None
    tiles: list[TileProbe]
    # measured: everything the probes recorded, per device (or why they could not run).
    probes: ProbeFacts | Unavailable | None
    exit_code: int
    # mode "p2p": the verified peer-transfer test per GPU pair (what was measured)...
    p2p: P2PProbeFacts | Unavailable | None = None
    # ... and the verdict the rules give each pair.
    p2p_verdicts: list[P2PPairVerdict] = msgspec.field(default_factory=list)


def k64_vs_k128(tiles: list[TileProbe]) -> float | None:
    """MAC rate of 128x128x64 over 128x128x128, when both were measured."""
    by = {(t.m, t.n, t.k): t for t in tiles}
    k64, k128 = by.get((128, 128, 64)), by.get((128, 128, 128))
    if k64 is None or k128 is None or not k64.macs_per_s or not k128.macs_per_s:
        return None
    return k64.macs_per_s / k128.macs_per_s


def _report(
    mode: Literal["plan", "measured", "p2p"],
    exit_code: ExitCode,
    *,
    smem_limit: int | None = None,
    smem_optin_attribute: int | None = None,
    smem_launch_limit: int | None = None,
    tiles: list[TileProbe] | None = None,
    probes: ProbeFacts | Unavailable | None = None,
    p2p: P2PProbeFacts | Unavailable | None = None,
    p2p_verdicts: list[P2PPairVerdict] | None = None,
) -> ProbeReport:
    """The fields every probe document carries, plus what its mode fills in."""
    return ProbeReport(
        schema_version=PROBE_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        mode=mode,
        smem_limit=smem_limit,
        smem_optin_attribute=smem_optin_attribute,
        smem_launch_limit=smem_launch_limit,
        tiles=tiles if tiles is not None else [],
        probes=probes,
        exit_code=int(exit_code),
        p2p=p2p,
        p2p_verdicts=p2p_verdicts or [],
    )


def build_measured(facts: ProbeFacts | Unavailable) -> ProbeReport:
    if isinstance(facts, Unavailable) or not facts.devices:
        return _report("measured", ExitCode.NOT_EVALUATED, probes=facts)
    first = facts.devices[0]
    attr = first.smem_optin_attribute if isinstance(first.smem_optin_attribute, int) else None
    limit = first.smem_launch_limit if isinstance(first.smem_launch_limit, int) else None
    found = [f for d in facts.devices for f in probe_findings(d)]
    return _report(
        "measured",
        ExitCode.FINDINGS if found else ExitCode.OK,
        smem_limit=attr,
        smem_optin_attribute=attr,
        smem_launch_limit=limit,
        tiles=list(first.tiles),
        probes=facts,
    )


def build_plan(smem_limit: int, tiles: list[TileProbe]) -> ProbeReport:
    return _report("plan", ExitCode.OK, smem_limit=smem_limit, tiles=tiles)


def build_p2p(facts: P2PProbeFacts | Unavailable) -> ProbeReport:
    """Exit 0: every pair works or has no peer access by design; 1: a pair is broken or
    slower than the host-staged control; 3: the test could not run (one GPU is 0)."""
    judged = verdicts(facts) if isinstance(facts, P2PProbeFacts) else []
    found = {j.verdict for j in judged}
    if isinstance(facts, Unavailable):
        code = ExitCode.OK if facts.reason.startswith("skipped:one GPU") else ExitCode.NOT_EVALUATED
    elif found & {"granted-but-broken", "slower-than-host"}:
        code = ExitCode.FINDINGS
    elif "error" in found or not facts.pairs:
        code = ExitCode.NOT_EVALUATED
    else:
        code = ExitCode.OK
    return _report("p2p", code, p2p=facts, p2p_verdicts=judged)


def verdicts(facts: P2PProbeFacts) -> list[P2PPairVerdict]:
    """Each pair's verdict, as the p2p.transfer check decides it."""
    out: list[P2PPairVerdict] = []
    for p in facts.pairs:
        judged = pair_verdict(p)
        out.append(
            P2PPairVerdict(
                gpu_a=p.gpu_a, gpu_b=p.gpu_b, verdict=judged.verdict, detail=judged.detail
            )
        )
    return out


def render_json(report: ProbeReport) -> str:
    return (msgspec.json.format(msgspec.json.encode(report), indent=2) + b"\n").decode()


def _fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def _tile_table(tiles: list[TileProbe], limit: int, measured: bool) -> list[str]:
    head = ["tile MxNxK", "K bytes", "stages", "stage B", "smem B", "margin B", "fits"]
    if measured:
        head += ["launched", "time us", "GMAC/s"]
    rows: list[list[str]] = []
    for t in tiles:
        row = [
            f"{t.m}x{t.n}x{t.k}",
            str(t.k_bytes),
            str(t.stages),
            _fmt_int(t.stage_bytes),
            # Below MIN_STAGES no kernel exists, so there is no size to compare.
            _fmt_int(t.smem_bytes) if t.stages >= MIN_STAGES else "-",
            _fmt_int(limit - t.smem_bytes) if t.stages >= MIN_STAGES else "-",
            "yes" if t.fits else "NO",
        ]
        if measured:
            launched = {True: "yes", False: "NO", None: "-"}[t.launched]
            row += [
                launched,
                f"{t.time_us:,.1f}" if t.time_us is not None else "-",
                f"{t.macs_per_s / 1e9:,.0f}" if t.macs_per_s else "-",
            ]
        rows.append(row)
    widths = [max(len(r[i]) for r in [head, *rows]) for i in range(len(head))]
    lines = [
        ("  " + "  ".join(c.ljust(w) for c, w in zip(r, widths, strict=True))).rstrip()
        for r in [head, *rows]
    ]
    for t in tiles:
        if t.reason:
            lines.append(f"  {t.m}x{t.n}x{t.k}: {t.reason}")
        if t.launch_error:
            lines.append(f"  {t.m}x{t.n}x{t.k}: launch failed: {t.launch_error}")
    return lines


def render_text(report: ProbeReport) -> str:
    lines = [f"{TOOL_NAME} {__version__} probe"]
    units = (
        "NVFP4 block-scaled grouped GEMM tiles (E2M1 A/B, one E4M3 scale per 16 elements). "
        "M, N, K in elements; 'K bytes' is K as FlashInfer/TRT-LLM tile names give it "
        "(CtaShape128x128x64B = K 128)."
    )
    if report.mode == "plan":
        limit = report.smem_limit or 0
        lines += [
            f"PLAN for a {limit:,} B shared-memory limit: CUTLASS's arithmetic only, nothing "
            "was launched.",
            units,
            "",
            *_tile_table(report.tiles, limit, measured=False),
        ]
        return "\n".join(lines) + "\n"
    probes = report.probes
    if not isinstance(probes, ProbeFacts):
        reason = probes.reason if isinstance(probes, Unavailable) else "no device probed"
        lines += [f"Probes could not run: {reason}"]
        return "\n".join(lines) + "\n"
    nvrtc = probes.nvrtc_version if isinstance(probes.nvrtc_version, str) else "unavailable"
    lines += [
        f"Measured on this host (NVRTC {nvrtc}, kernel cache {probes.cache}, "
        f"{probes.wall_s:.2f} s).",
        units,
    ]
    for d in probes.devices:
        name = d.name if isinstance(d.name, str) else "GPU"
        cc = (
            f"CC {d.compute_capability[0]}.{d.compute_capability[1]}"
            if isinstance(d.compute_capability, tuple)
            else "CC unknown"
        )
        attr = d.smem_optin_attribute
        launch_limit = d.smem_launch_limit
        compiled = d.compiled_as if isinstance(d.compiled_as, str) else d.compiled_as.reason
        lines += [
            "",
            f"GPU{d.ordinal} {name} ({cc}), probe kernels: {compiled}",
            "  opt-in shared memory per block (attribute): "
            + (f"{attr:,} B" if isinstance(attr, int) else f"unavailable: {attr.reason}"),
            "  largest launch accepted (bisected):         "
            + (
                f"{launch_limit:,} B"
                if isinstance(launch_limit, int)
                else f"unavailable: {launch_limit.reason}"
            ),
            "",
            *_tile_table(d.tiles, attr if isinstance(attr, int) else 0, measured=True),
        ]
        ratio = k64_vs_k128(d.tiles)
        if ratio is not None:
            lines.append(
                f"  K=64 vs K=128 (128x128 tiles, at the stages each gets): {ratio:.2f}x the "
                "probe's MAC rate"
            )
        lines += [f"  finding: {f}" for f in probe_findings(d)]
    lines += ["", DISCLAIMER]
    return "\n".join(lines) + "\n"
