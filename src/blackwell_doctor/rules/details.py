"""The detail sections of a preset's report: what ``probe`` and ``scan-logs`` measured, laid
out for a reader under the results. Built here, beside the verdicts, when the preset's report
is built (:mod:`blackwell_doctor.rules.presets`): a section carries what the rules decided (a
pair's verdict, a probe's findings) and the catalogues' words (a case's summary, a
signature's meaning); the renderers only place them, and the JSON carries the measurements
themselves.

- ``probe``: per GPU its limits and the tile table (CUTLASS's arithmetic beside the
  driver's answer and the probe's timing), the K=64 vs K=128 rate;
- ``probe --plan``: the tile table of the arithmetic;
- ``probe --p2p``: the pair matrix (access, verification, bandwidth against host staging,
  each pair's verdict as ``p2p.transfer`` decides it);
- ``scan-logs``: each signature's hits (source, lines, count, the first line seen), what it
  means and its source, then every source read.
"""

from __future__ import annotations

from blackwell_doctor.facts.document import (
    LogSource,
    P2PProbeFacts,
    P2PTransfer,
    ProbeFacts,
    SkipReason,
    TileProbe,
    Unavailable,
)
from blackwell_doctor.report.check import Section
from blackwell_doctor.ruledata.logs import SEVERITY_RANK, load_catalogue
from blackwell_doctor.ruledata.rules import load_rule_data
from blackwell_doctor.ruledata.tilelimits import MIN_STAGES
from blackwell_doctor.rules.logs import JudgedFinding, skipped_words

UNITS = (
    "NVFP4 block-scaled grouped GEMM tiles (E2M1 A/B, one E4M3 scale per 16 elements). "
    "M, N, K in elements; 'K bytes' is K as FlashInfer/TRT-LLM tile names give it "
    "(CtaShape128x128x64B = K 128)."
)
DISCLAIMER = (
    "The timings come from blackwell-doctor's probe kernel: a multi-stage block-scaled "
    "mainloop laid out like CUTLASS's storage, dequantising E2M1 values with E4M3 scales on "
    "CUDA cores. It measures this GPU's limits and how a tile shape behaves, not the "
    "production MoE kernel; it promises no speed-up for a runtime."
)
# Sources listed one by one up to this many in "Sources", and per signature (the rest are
# counted: a scan of a whole tree keeps each signature's section short, issue 40).
LISTED = 20
LISTED_PER_SIGNATURE = 5


# --------------------------------------------------------------------------- probe


def k64_vs_k128(tiles: list[TileProbe]) -> float | None:
    """MAC rate of 128x128x64 over 128x128x128, when both were measured."""
    by = {(t.m, t.n, t.k): t for t in tiles}
    k64, k128 = by.get((128, 128, 64)), by.get((128, 128, 128))
    if k64 is None or k128 is None or not k64.macs_per_s or not k128.macs_per_s:
        return None
    return k64.macs_per_s / k128.macs_per_s


def _fmt_int(n: int | None) -> str:
    return "-" if n is None else f"{n:,}"


def tile_table(tiles: list[TileProbe], limit: int, *, measured: bool) -> Section:
    """The tile table: one row per tile; why a tile does not fit or did not launch under it."""
    # Imported where used (below): scan-logs' sections need neither the probe nor the p2p
    # family.
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
            row += [
                {True: "yes", False: "NO", None: "-"}[t.launched],
                f"{t.time_us:,.1f}" if t.time_us is not None else "-",
                f"{t.macs_per_s / 1e9:,.0f}" if t.macs_per_s else "-",
            ]
        rows.append(row)
    lines: list[str] = []
    for t in tiles:
        if t.reason:
            lines.append(f"{t.m}x{t.n}x{t.k}: {t.reason}")
        if t.launch_error:
            lines.append(f"{t.m}x{t.n}x{t.k}: launch failed: {t.launch_error}")
    return Section(
        title="Tiles", columns=head, numeric=frozenset(range(1, 6)), rows=rows, lines=lines
    )


def plan_sections(limit: int, tiles: list[TileProbe]) -> list[Section]:
    """``probe --plan``: the tile table of CUTLASS's arithmetic under ``limit``."""
    table = tile_table(tiles, limit, measured=False)
    section = Section(
        title=f"Tiles for a {limit:,} B shared-memory limit (arithmetic)",
        columns=table.columns,
        numeric=table.numeric,
        rows=table.rows,
        lines=table.lines,
        notes=[UNITS],
    )
    return [section]


def probe_sections(probes: ProbeFacts | Unavailable | None) -> list[Section]:
    """Per probed GPU: its limits and tile table; then what the numbers are and are not."""
    if not isinstance(probes, ProbeFacts):
        reason = probes.reason if isinstance(probes, Unavailable) else "no device probed"
        return [Section(title="Probes", lines=[f"Probes could not run: {reason}"])]
    out: list[Section] = []
    for d in probes.devices:
        name = d.name if isinstance(d.name, str) else "GPU"
        cc = (
            f"CC {d.compute_capability[0]}.{d.compute_capability[1]}"
            if isinstance(d.compute_capability, tuple)
            else "CC unknown"
        )
        attr, launch = d.smem_optin_attribute, d.smem_launch_limit
        compiled = d.compiled_as if isinstance(d.compiled_as, str) else d.compiled_as.reason
        table = tile_table(d.tiles, attr if isinstance(attr, int) else 0, measured=True)
        lines = list(table.lines)
        ratio = k64_vs_k128(d.tiles)
        if ratio is not None:
            lines.append(
                f"K=64 vs K=128 (128x128 tiles, at the stages each gets): {ratio:.2f}x the "
                "probe's MAC rate"
            )
        # What makes `probe` exit 1: a measurement the driver or the arithmetic contradicts.
        from blackwell_doctor.rules.probe import probe_findings

        lines += [f"finding: {f}" for f in probe_findings(d)]
        out.append(
            Section(
                title=f"GPU{d.ordinal} {name} ({cc}), probe kernels: {compiled}",
                head=[
                    "opt-in shared memory per block (attribute): "
                    + (f"{attr:,} B" if isinstance(attr, int) else f"unavailable: {attr.reason}"),
                    "largest launch accepted (bisected):         "
                    + (
                        f"{launch:,} B"
                        if isinstance(launch, int)
                        else f"unavailable: {launch.reason}"
                    ),
                ],
                columns=table.columns,
                numeric=frozenset({*table.numeric, 8, 9}),
                rows=table.rows,
                lines=lines,
            )
        )
    out.append(Section(title="About these numbers", notes=[UNITS, DISCLAIMER]))
    return out


# --------------------------------------------------------------------------- probe --p2p

P2P_COLUMNS = [
    "pair",
    "driver says",
    "copy",
    "peer write",
    "uni GB/s",
    "bidi GB/s",
    "host-staged GB/s",
    "verdict",
]


def p2p_sections(facts: P2PProbeFacts | Unavailable | None) -> list[Section]:
    """The pair matrix, with each pair's verdict (p2p.transfer's) and what went wrong."""
    if not isinstance(facts, P2PProbeFacts):
        return []  # the subject line and p2p.transfer say why nothing was measured
    if not facts.pairs:
        return [Section(title="Pairs", lines=["no GPU pair was tested"])]
    from blackwell_doctor.rules.p2p import pair_verdict

    judged = [(pair, pair_verdict(pair)) for pair in facts.pairs]
    rows = [
        [
            _pair(p),
            _access(p.can_access_peer),
            _verified(p.peer_copy_verified),
            _verified(p.peer_write_verified),
            _gbps(p.unidirectional_gbps),
            _gbps(p.bidirectional_gbps),
            _gbps(p.host_staged_gbps),
            v.verdict,
        ]
        for p, v in judged
    ]
    # p2p.transfer's remedy carries the words of its worst case (broken, slower); pairs
    # without peer access or whose test failed get their case's words here.
    cases = load_rule_data().checks["p2p.transfer"].cases
    notes: list[str] = []
    for verdict in ("not-supported", "error"):
        named = [_pair(p) for p, v in judged if v.verdict == verdict]
        if named and verdict in cases:
            notes.append(f"{verdict} ({', '.join(named)}): {cases[verdict].summary}")
    return [
        Section(
            title=f"Pairs ({len(facts.pairs)}, {facts.wall_s:.1f} s)",
            columns=P2P_COLUMNS,
            numeric=frozenset({4, 5, 6}),
            rows=rows,
            lines=[f"{_pair(p)}: {v.detail}" for p, v in judged if v.detail],
            notes=notes,
        )
    ]


def _pair(pair: P2PTransfer) -> str:
    return f"GPU{pair.gpu_a}<->GPU{pair.gpu_b}"


def _access(value: bool | Unavailable) -> str:
    if isinstance(value, Unavailable):
        return "unknown"
    return "allowed" if value else "not allowed"


def _verified(value: bool | None) -> str:
    if value is None:
        return "-"
    return "verified" if value else "MISMATCH"


def _gbps(value: float | None) -> str:
    return "-" if value is None else f"{value:.1f}"


# --------------------------------------------------------------------------- scan-logs


def log_sections(
    sources: list[LogSource],
    findings: list[JudgedFinding],
    skipped: dict[SkipReason, int] | None = None,
) -> list[Section]:
    """One section per signature found (worst first): where, how often, the first line seen
    (at most :data:`LISTED_PER_SIGNATURE` sources, the rest counted), what it means; then
    the sources read and what a directory scan skipped."""
    catalogue = load_catalogue()
    groups: dict[str, list[JudgedFinding]] = {}
    for finding in findings:
        groups.setdefault(finding.signature, []).append(finding)
    ordered = sorted(
        groups.items(), key=lambda kv: (-max(SEVERITY_RANK[f.severity] for f in kv[1]), kv[0])
    )
    out: list[Section] = []
    for sig_id, hits in ordered:
        worst = max((f.severity for f in hits), key=SEVERITY_RANK.__getitem__)
        total = sum(f.count for f in hits)
        lines: list[str] = []
        for f in hits[:LISTED_PER_SIGNATURE]:
            if f.line == 0:  # input.unreadable: nothing was read
                where = "not read"
            elif f.line == f.last_line:
                where = f"line {f.line}"
            else:
                where = f"lines {f.line}-{f.last_line}"
            lines += [f"{f.path}: {where}, {f.count}x, {f.severity}", f"  | {f.excerpt}"]
        if len(hits) > LISTED_PER_SIGNATURE:
            rest = hits[LISTED_PER_SIGNATURE:]
            lines.append(
                f"... and {len(rest):,} more not listed here, in "
                f"{len({f.path for f in rest}):,} source(s) ({sum(f.count for f in rest):,} "
                "occurrences; --format json lists them all)"
            )
        sig = catalogue.entry(sig_id)
        notes = [f"What it means: {sig.meaning}", f"Source: {sig.source}"] if sig else []
        out.append(
            Section(
                title=f"{sig_id} ({worst}, {hits[0].check}): {total} occurrence(s)",
                lines=lines,
                notes=notes,
            )
        )
    out.append(_sources_section(sources, findings, len(groups), skipped or {}))
    return out


def _sources_section(
    sources: list[LogSource],
    findings: list[JudgedFinding],
    signatures: int,
    skipped: dict[SkipReason, int],
) -> Section:
    failed = [s for s in sources if s.error]
    fine = [s for s in sources if not s.error]
    shown = failed[:LISTED] if len(sources) > LISTED else sources
    rows = [
        [s.name, s.kind, f"{s.lines:,}", f"{s.bytes:,}", f"error: {s.error}" if s.error else "ok"]
        for s in shown
    ]
    lines: list[str] = []
    if len(sources) > LISTED:
        # A scan of thousands of files: the ones that need attention, then a count.
        if len(failed) > LISTED:
            lines.append(f"... and {len(failed) - LISTED} more that could not be read")
        lines.append(
            f"{len(fine)} sources read: {sum(s.lines for s in fine):,} lines, "
            f"{sum(s.bytes for s in fine):,} bytes, ok (--format json lists them all)"
        )
    # Signatures, each counted once under its worst severity: the numbers add up.
    worst: dict[str, int] = {}
    for f in findings:
        worst[f.signature] = max(worst.get(f.signature, 0), SEVERITY_RANK[f.severity])
    counts = {sev: list(worst.values()).count(rank) for sev, rank in SEVERITY_RANK.items()}
    if skipped:
        lines.append(f"Skipped in directories: {skipped_words(skipped)}.")
    if not findings:
        lines.append("No signatures found.")
    else:
        lines.append(
            f"Found {signatures} signature(s): {counts['fail']} fail, {counts['warn']} warn, "
            f"{counts['info']} info."
        )
    return Section(
        title="Sources",
        columns=["source", "kind", "lines", "bytes", "state"],
        numeric=frozenset({2, 3}),
        rows=rows,
        lines=lines,
    )
