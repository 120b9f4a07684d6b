"""A fleet whose every node differs, generated from the facts fixtures (seeded, reproducible).

Issue 36: real fleets differ per node: kernel release and command line, driver version, the
probes' figures, bench runs. ``fleet_scale.py --distinct`` only gave each node its own
``host_root`` (a field no check reads); here each node ``i`` takes fixture ``i % 12`` and then,
from its own random stream (``random.Random(f"{seed}:{i}")``: node ``i`` is the same whatever
the fleet's size, so the 1,000-node fleet is the first 1,000 of the 100,000-node one):

- its own name, collection time and GPU UUIDs (what ``fleet_scale.py`` varied);
- its own kernel: the ABI number of the fixture's release drawn again, a build number and
  date in ``/proc/version``, the command line's ``BOOT_IMAGE`` naming that release and its
  root file system by a UUID of its own (or, where the fixture's line names none,
  ``systemd.machine_id=``), so no two command lines are equal;
- its own driver, drawn from NVIDIA's Linux releases of the fixture's branch and the next
  (R570 ... R595; the Windows one of the WSL2 fixture from its own branch), carried
  consistently by NVML, the kernel module (1 node in 40: still the previous one, a driver
  upgraded without a reboot), CUDA's driver version and NVML's version;
- its own probe figures (the probes' wall time; each measured tile's time and rate, +-10%),
  health readings (temperature, power draw, SM clock, fan), peer-transfer, link-load and
  collective bandwidths where the fixture has them (+-10%);
- its own bench run: one of the bench fixtures (``tests/fixtures/bench``) read as
  ``collect --bench`` reads it, with its start time and every latency and rate figure
  drawn +-15% (a node without a GPU has none).

Every node is therefore judged: no two share a judgment key (``--check-distinct``
verifies it). Files are written one at a time (a 100,000-node fleet is never in memory).

    python benchmarks/fleet_varied.py write DIR --nodes 10000 [--seed 36] [--check-distinct]

``measure`` times ``fleet DIR --format json`` on such fleets against the floor, a process
that only reads and msgspec-decodes the same files (``decode``, below), for each tree given
(``--tree LABEL=SRC``: main's ``src`` and this one's, say), in interleaved rounds (tree,
floor, tree..., the order reversed every other round), the medians of ``--rounds``:

- in-process: one child process per tree and round imports the package, judges the facts
  fixtures once (the families' code and the rule data loaded, then the engine made afresh,
  as a run starts), then times ``decode`` and the fleet (expand, judge, the JSON text) in
  CPU seconds; per node, and the ratio;
- the whole command: ``python -m blackwell_doctor fleet DIR --format json`` and the floor
  as a command (``python -c FLOOR DIR``), CPU (user + system, ``wait4``) and
  wall seconds, and the peak resident memory of each (``ru_maxrss``).

    python benchmarks/fleet_varied.py measure --nodes 1000 10000 --rounds 5 \
        --tree before=MAIN/src --tree after=src [--cache /tmp/fleet-varied] [--json FILE]
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import msgspec

from blackwell_doctor.facts.bench import BenchFacts, BenchShapeFacts, BenchStats
from blackwell_doctor.facts.document import (
    CollectiveFacts,
    CudaFacts,
    Facts,
    GpuHealth,
    HealthFacts,
    LinkLoadFacts,
    NvmlFacts,
    P2PProbeFacts,
    ProbeFacts,
    decode_facts,
    encode_facts,
)
from blackwell_doctor.report.bench_facts import read_bench

ROOT = Path(__file__).resolve().parents[1]
FIXTURES = ROOT / "tests" / "fixtures" / "facts"
BENCH_FIXTURES = [
    ROOT / "tests" / "fixtures" / "bench" / name
    for name in (
        "tiny-moe-vllm-cpu.json",
        "sm120-moe-bench-stock-mtp0.json",
        "sm120-moe-bench-stock-mtp3.json",
        "article-native-119tps.json",
    )
]

# NVIDIA's Linux driver releases per branch (https://www.nvidia.com/en-us/drivers/unix/ and
# the data-center release notes), and the CUDA version each branch's driver reports.
DRIVERS = {
    "570": ["570.86.15", "570.124.06", "570.133.20", "570.148.08", "570.158.01", "570.172.08"],
    "575": ["575.51.03", "575.57.08", "575.64.03", "575.64.05"],
    "580": ["580.65.06", "580.76.05", "580.82.07", "580.82.09", "580.95.05", "580.105.08"],
    "590": ["590.44.01", "590.48.01"],
    "595": ["595.45.04"],
}
CUDA_OF_BRANCH = {"570": "12.8", "575": "12.9", "580": "13.0", "590": "13.1", "595": "13.2"}
# The Windows drivers of the WSL2 fixture's branch (R570's Game Ready releases).
WINDOWS_DRIVERS = ["572.16", "572.42", "572.47", "572.60", "572.70", "572.83"]


def _jitter(rng: random.Random, value: float | None, spread: float) -> float | None:
    return None if value is None else value * rng.uniform(1 - spread, 1 + spread)


def _scaled(value: float | None, factor: float) -> float | None:
    return None if value is None else value * factor


def _int_jitter(rng: random.Random, value: Any, low: int, high: int) -> Any:
    return value + rng.randint(low, high) if isinstance(value, int) else value


def _driver(rng: random.Random, current: str) -> str:
    if current in WINDOWS_DRIVERS:
        return rng.choice(WINDOWS_DRIVERS)
    branches = list(DRIVERS)
    branch = current.split(".", 1)[0]
    at = branches.index(branch) if branch in branches else len(branches) - 1
    pool = DRIVERS[branches[at]] + DRIVERS[branches[min(at + 1, len(branches) - 1)]]
    return rng.choice(pool)


def _kernel(rng: random.Random, facts: Facts) -> Any:
    p = facts.platform
    release, version, cmdline = p.kernel_release, p.kernel_version, p.kernel_cmdline
    if not isinstance(release, str):
        return p
    # The last number before the flavour: Ubuntu's ABI (6.8.0-57-generic), Debian's
    # (6.1.0-18-amd64), WSL2's fourth part (5.15.167.4-...), a custom build's patch level.
    m = re.search(r"(\d+)(\D*)$", release) or re.search(r"(\d+)", release)
    assert m is not None
    new_release = release[: m.start(1)] + str(rng.randint(11, 140)) + release[m.end(1) :]
    build = rng.randint(1, 200)
    date = (
        f"{rng.choice(['Mon', 'Tue', 'Wed', 'Thu', 'Fri'])} "
        f"{rng.choice(['Jan', 'Mar', 'May', 'Jul', 'Sep', 'Nov'])} {rng.randint(1, 28)} "
        f"{rng.randint(0, 23):02d}:{rng.randint(0, 59):02d}:{rng.randint(0, 59):02d} UTC "
        f"{rng.choice([2024, 2025, 2026])}"
    )
    if isinstance(version, str):
        version = version.replace(release, new_release)
        version = re.sub(r"#\d+", f"#{build}", version, count=1) + f" ({date})"
    if isinstance(cmdline, str):
        cmdline = cmdline.replace(release, new_release)
        if re.search(r"\broot=\S+", cmdline):
            cmdline = re.sub(
                r"\broot=\S+", f"root=UUID={uuid.UUID(int=rng.getrandbits(128))}", cmdline
            )
        else:
            cmdline += f" systemd.machine_id={rng.getrandbits(128):032x}"
    return msgspec.structs.replace(
        p, kernel_release=new_release, kernel_version=version, kernel_cmdline=cmdline
    )


def _with_driver(rng: random.Random, facts: Facts, platform: Any) -> tuple[Any, Any, Any]:
    nvml, cuda = facts.nvml, facts.cuda
    if not isinstance(nvml, NvmlFacts) or not isinstance(nvml.driver_version, str):
        return platform, nvml, cuda
    driver = _driver(rng, nvml.driver_version)
    branch = driver.split(".", 1)[0]
    cuda_version = CUDA_OF_BRANCH.get(branch, nvml.cuda_driver_version)
    module = platform.nvidia_kernel_module
    if isinstance(module, str):
        # One node in 40 still runs the module of the driver before (upgraded, no reboot).
        module = _driver(rng, module) if rng.random() < 1 / 40 else driver
        platform = msgspec.structs.replace(platform, nvidia_kernel_module=module)
    major = cuda_version.split(".", 1)[0] if isinstance(cuda_version, str) else "12"
    nvml = msgspec.structs.replace(
        nvml,
        driver_version=driver,
        cuda_driver_version=cuda_version,
        nvml_version=f"{major}.{driver}",
        gpus=[
            msgspec.structs.replace(g, uuid=f"GPU-{uuid.UUID(int=rng.getrandbits(128))}")
            for g in nvml.gpus
        ],
    )
    if isinstance(cuda, CudaFacts) and isinstance(cuda_version, str):
        cuda = msgspec.structs.replace(cuda, driver_version=cuda_version)
    return platform, nvml, cuda


def _probes(rng: random.Random, probes: Any) -> Any:
    if not isinstance(probes, ProbeFacts):
        return probes
    devices = []
    for d in probes.devices:
        tiles = []
        for t in d.tiles:
            if t.time_us is not None:
                f = rng.uniform(0.9, 1.1)
                t = msgspec.structs.replace(
                    t,
                    time_us=t.time_us * f,
                    macs_per_s=None if t.macs_per_s is None else t.macs_per_s / f,
                )
            tiles.append(t)
        devices.append(msgspec.structs.replace(d, tiles=tiles))
    return msgspec.structs.replace(
        probes, wall_s=probes.wall_s * rng.uniform(0.8, 1.25), devices=devices
    )


def _health(rng: random.Random, health: Any) -> Any:
    if not isinstance(health, HealthFacts) or not isinstance(health.gpus, list):
        return health
    gpus: list[GpuHealth] = []
    for g in health.gpus:
        temperature = _int_jitter(rng, g.temperature_c, -4, 4)
        usage = g.power_usage_mw
        if isinstance(usage, int):
            usage = max(0, int(usage * rng.uniform(0.9, 1.1)))
        clock = g.sm_clock_mhz
        if isinstance(clock, int) and isinstance(g.sm_clock_max_mhz, int):
            clock = min(g.sm_clock_max_mhz, max(0, clock + rng.randint(-45, 45)))
        fans = g.fans_percent
        if isinstance(fans, list):
            fans = [min(100, max(0, f + rng.randint(-3, 3))) for f in fans]
        gpus.append(
            msgspec.structs.replace(
                g,
                temperature_c=temperature,
                margin_c=_margin(g, temperature),
                power_usage_mw=usage,
                sm_clock_mhz=clock,
                fans_percent=fans,
            )
        )
    return msgspec.structs.replace(health, gpus=gpus)


def _margin(g: GpuHealth, temperature: Any) -> Any:
    # The margin to slowdown moves with the temperature.
    if isinstance(g.margin_c, int) and isinstance(g.temperature_c, int):
        return g.margin_c - (temperature - g.temperature_c)
    return g.margin_c


def _bandwidths(rng: random.Random, facts: Facts) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if isinstance(facts.p2p_transfers, P2PProbeFacts):
        pairs = [
            msgspec.structs.replace(
                p,
                unidirectional_gbps=_jitter(rng, p.unidirectional_gbps, 0.1),
                bidirectional_gbps=_jitter(rng, p.bidirectional_gbps, 0.1),
                host_staged_gbps=_jitter(rng, p.host_staged_gbps, 0.1),
            )
            for p in facts.p2p_transfers.pairs
        ]
        out["p2p_transfers"] = msgspec.structs.replace(facts.p2p_transfers, pairs=pairs)
    if isinstance(facts.link_load, LinkLoadFacts):
        links = [
            msgspec.structs.replace(g, h2d_gbps=_jitter(rng, g.h2d_gbps, 0.1))
            for g in facts.link_load.gpus
        ]
        out["link_load"] = msgspec.structs.replace(facts.link_load, gpus=links)
    if isinstance(facts.collective, CollectiveFacts):
        runs = []
        for r in facts.collective.runs:
            f = rng.uniform(0.9, 1.1)
            runs.append(
                msgspec.structs.replace(
                    r,
                    time_s=None if r.time_s is None else r.time_s * f,
                    algbw_gbps=None if r.algbw_gbps is None else r.algbw_gbps / f,
                    busbw_gbps=None if r.busbw_gbps is None else r.busbw_gbps / f,
                )
            )
        out["collective"] = msgspec.structs.replace(facts.collective, runs=runs)
    return out


def _stats(rng: random.Random, s: BenchStats, spread: float) -> BenchStats:
    f = rng.uniform(1 - spread, 1 + spread)
    return BenchStats(
        **{k: None if v is None else v * f for k, v in msgspec.structs.asdict(s).items()}
    )


def _bench(rng: random.Random, runs: list[BenchFacts], name: str, at: str) -> BenchFacts:
    base = rng.choice(runs)
    shapes: list[BenchShapeFacts] = []
    for s in base.shapes:
        f = rng.uniform(0.85, 1.15)
        shapes.append(
            msgspec.structs.replace(
                s,
                duration_s=s.duration_s / f,
                ttft_ms=_stats(rng, s.ttft_ms, 0.15),
                tpot_ms=_stats(rng, s.tpot_ms, 0.15),
                itl_ms=_stats(rng, s.itl_ms, 0.15),
                e2e_ms=_stats(rng, s.e2e_ms, 0.15),
                output_tokens_per_s=_scaled(s.output_tokens_per_s, f),
                answer_tokens_per_s=_scaled(s.answer_tokens_per_s, f),
                requests_per_s=_scaled(s.requests_per_s, f),
                output_tokens_per_s_per_user=_stats(rng, s.output_tokens_per_s_per_user, 0.15),
                server_itl_mean_ms=_jitter(rng, s.server_itl_mean_ms, 0.15),
            )
        )
    return msgspec.structs.replace(
        base, source=f"/var/lib/bench/{name}.json", started_at=at, shapes=shapes
    )


def templates() -> list[Facts]:
    return [decode_facts(p.read_bytes()) for p in sorted(FIXTURES.glob("*.json"))]


def bench_runs() -> list[BenchFacts]:
    return [read_bench(p.read_bytes(), source=p.name) for p in BENCH_FIXTURES]


def node(i: int, seed: int, bases: list[Facts], runs: list[BenchFacts]) -> Facts:
    """Node ``i`` of the fleet of ``seed`` (0-based; named ``gpu-000001`` ...)."""
    rng = random.Random(f"{seed}:{i}")
    facts = bases[i % len(bases)]
    name = f"gpu-{i + 1:06d}"
    day, hour, minute, second = (rng.randint(1, 28), rng.randint(0, 23), *rng.sample(range(60), 2))
    at = f"2026-11-{day:02d}T{hour:02d}:{minute:02d}:{second:02d}Z"
    platform = msgspec.structs.replace(_kernel(rng, facts), hostname=name)
    platform, nvml, cuda = _with_driver(rng, facts, platform)
    has_gpu = isinstance(nvml, NvmlFacts) and bool(nvml.gpus)
    return msgspec.structs.replace(
        facts,
        redacted=False,
        collected_at=at,
        platform=platform,
        nvml=nvml,
        cuda=cuda,
        probes=_probes(rng, facts.probes),
        health=_health(rng, facts.health),
        bench=_bench(rng, runs, name, at) if has_gpu else facts.bench,
        **_bandwidths(rng, facts),
    )


def nodes(count: int, seed: int = 36) -> Iterator[tuple[str, bytes]]:
    """``(file name, facts JSON)`` of each node, one at a time."""
    bases, runs = templates(), bench_runs()
    for i in range(count):
        yield f"gpu-{i + 1:06d}.json", encode_facts(node(i, seed, bases, runs))


def write(
    directory: Path, count: int, seed: int = 36, progress: Callable[[int], None] | None = None
) -> int:
    """Write the fleet into ``directory`` (files already there of the same name are kept:
    a node's file depends only on its index and the seed). Returns the bytes written."""
    directory.mkdir(parents=True, exist_ok=True)
    total = 0
    for i, (name, data) in enumerate(nodes(count, seed)):
        path = directory / name
        if not path.exists():
            path.write_bytes(data)
        total += len(data)
        if progress is not None and i % 10000 == 0:
            progress(i)
    return total


def check_distinct(directory: Path) -> int:
    """How many judgment keys the files in ``directory`` share (0: every node differs),
    each file also decoded as ``check --facts`` decodes it."""
    from blackwell_doctor.app.fleet import judgment_key

    seen: set[bytes] = set()
    files = sorted(directory.glob("*.json"))
    for path in files:
        seen.add(judgment_key(decode_facts(path.read_bytes(), source=str(path))))
    return len(files) - len(seen)


# The floor: read every *.json file under a directory and decode it as Facts with msgspec,
# nothing else (a command of its own: ``python -c FLOOR DIR``; in-process: decode()).
FLOOR = """
import os, sys
import msgspec
from blackwell_doctor.facts.document import Facts

def decode(directory):
    decoder = msgspec.json.Decoder(Facts)
    count = 0
    stack = [directory]
    while stack:
        with os.scandir(stack.pop()) as entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".json"):
                    with open(entry.path, "rb") as f:
                        decoder.decode(f.read())
                    count += 1
    return count

if __name__ == "__main__":
    print(decode(sys.argv[1]))
"""


def decode(directory: Path) -> int:
    """The floor in this process (FLOOR's ``decode``). Returns the files decoded."""
    namespace: dict[str, Any] = {"__name__": "floor"}
    exec(FLOOR, namespace)
    count: int = namespace["decode"](str(directory))
    return count


def _cpu() -> float:
    return time.process_time()


def child(directory: Path, nodes: int, floor_first: bool) -> int:
    """One in-process round (``--child``): the fixtures judged once (code and rule data
    loaded), a fresh engine, then the floor and the fleet timed in CPU seconds."""
    from blackwell_doctor.app import fleet
    from blackwell_doctor.render.fleet import render_fleet
    from blackwell_doctor.render.formats import FleetFormat

    warm, missing = fleet.expand_inputs([str(FIXTURES)])
    render_fleet(fleet.judge_fleet(warm, missing), FleetFormat.JSON)
    fleet._engine.cache_clear()  # as a run starts: nothing remembered

    def timed_fleet() -> float:
        start = _cpu()
        paths, unjudged = fleet.expand_inputs([str(directory)])
        report = fleet.judge_fleet(paths, unjudged)
        text = render_fleet(report, FleetFormat.JSON)
        spent = _cpu() - start
        if report.summary.nodes != nodes or report.unjudged or not text:
            sys.exit(f"judged {report.summary.nodes} of {nodes}: {report.unjudged[:3]}")
        return spent

    def timed_floor() -> float:
        start = _cpu()
        if decode(directory) != nodes:
            sys.exit(f"the floor did not decode {nodes} files")
        return _cpu() - start

    if floor_first:
        floor = timed_floor()
        spent = timed_fleet()
    else:
        spent = timed_fleet()
        floor = timed_floor()
    print(json.dumps({"floor": floor, "fleet": spent}))
    return 0


GNU_TIME = "/usr/bin/time"  # Debian's package "time"


def _wait(argv: list[str], env: dict[str, str]) -> tuple[float, float, int, bytes]:
    """Wall and CPU seconds, peak RSS (KiB) and standard output of ``argv``. The peak RSS is
    GNU time's (``%M``) for a child it starts: wait4's ``ru_maxrss`` of a child this process
    starts is at least this process's RSS when it forked (Linux keeps the high-water mark
    across exec), and this process holds the fleets' outputs it compares (the peaks recorded
    before 2026-11-28 18:15 read 25 / 67 / 116 MiB for a floor that peaks at ~15 MiB)."""
    start = time.perf_counter()
    with tempfile.TemporaryFile() as out, tempfile.NamedTemporaryFile("r") as peak:
        argv = [GNU_TIME, "-f", "%M", "-o", peak.name, *argv]
        proc = subprocess.Popen(argv, stdout=out, stderr=subprocess.PIPE, env=env)
        assert proc.stderr is not None
        err = proc.stderr.read()
        _, status, usage = os.wait4(proc.pid, 0)
        wall = time.perf_counter() - start
        code = os.waitstatus_to_exitcode(status)
        if code not in (0, 1) or b"Traceback" in err:
            sys.exit(f"{argv} exited {code}: {err.decode(errors='replace')[-600:]}")
        out.seek(0)
        rss = int(peak.read().split()[-1])
        return wall, usage.ru_utime + usage.ru_stime, rss, out.read()


def measure(args: argparse.Namespace) -> int:
    trees = dict(t.split("=", 1) for t in args.tree)
    os.environ.pop("PYTHONDONTWRITEBYTECODE", None)  # byte-code written, as installed
    print(
        f"python {sys.version.split()[0]}, {os.cpu_count()} CPUs, load "
        f"{os.getloadavg()[0]:.1f}; trees: {trees}; rounds: {args.rounds}"
    )
    rows = []
    for n in args.nodes:
        directory = args.cache / f"seed{args.seed}" / f"{n}"
        write(directory, n, args.seed)
        rounds = args.rounds if n <= args.full_rounds_up_to else 1
        inproc: dict[str, list[dict[str, float]]] = {t: [] for t in trees}
        whole: dict[str, list[tuple[float, float, int]]] = {t: [] for t in [*trees, "floor"]}
        outputs: dict[str, bytes] = {}
        loads = [os.getloadavg()[0]]
        for r in range(rounds):
            order = list(trees) if r % 2 == 0 else list(reversed(trees))
            for label in order:
                # The tree first; what PYTHONPATH held after it (a wheels' site, say).
                path = [str(Path(trees[label]).resolve()), os.environ.get("PYTHONPATH", "")]
                env = {**os.environ, "PYTHONPATH": os.pathsep.join(p for p in path if p)}
                # In-process, then the whole command, then the floor command.
                argv = [sys.executable, __file__, "child", str(directory), str(n)]
                if r % 2:
                    argv.append("--floor-first")
                out = subprocess.run(
                    argv, capture_output=True, text=True, env=env, check=True, timeout=3600
                ).stdout
                inproc[label].append(json.loads(out.splitlines()[-1]))
                cmd = [sys.executable, "-m", "blackwell_doctor", "fleet", str(directory)]
                wall, cpu, rss, text = _wait([*cmd, "--format", "json"], env)
                whole[label].append((wall, cpu, rss))
                outputs[label] = text
                floor_argv = [sys.executable, "-c", FLOOR, str(directory)]
                whole["floor"].append(_wait(floor_argv, env)[:3])
            loads.append(os.getloadavg()[0])
        same = len({_without_tool(o) for o in outputs.values()}) == 1
        for label in trees:
            floor_cpu = statistics.median(r["floor"] for r in inproc[label])
            fleet_cpu = statistics.median(r["fleet"] for r in inproc[label])
            w = [statistics.median(x[i] for x in whole[label]) for i in range(3)]
            f = [statistics.median(x[i] for x in whole["floor"]) for i in range(3)]
            row = {
                "label": f"{label} {n}",
                "tree": label,
                "nodes": n,
                "rounds": rounds,
                "load": [round(min(loads), 1), round(max(loads), 1)],
                "floor_us_per_node": round(floor_cpu / n * 1e6, 1),
                "fleet_us_per_node": round(fleet_cpu / n * 1e6, 1),
                "in_process_ratio": round(fleet_cpu / floor_cpu, 2),
                "whole_cpu_s": round(w[1], 3),
                "floor_cpu_s": round(f[1], 3),
                "whole_cpu_ratio": round(w[1] / f[1], 2),
                "whole_wall_s": round(w[0], 3),
                "floor_wall_s": round(f[0], 3),
                "whole_wall_ratio": round(w[0] / f[0], 2),
                "peak_rss_mib": round(w[2] / 1024, 1),
                "floor_peak_rss_mib": round(f[2] / 1024, 1),
                "outputs_equal": same,
            }
            rows.append(row)
            print(json.dumps(row))
    if args.json is not None:
        doc = {
            "source": "benchmarks/fleet_varied.py measure " + " ".join(sys.argv[2:]),
            "floor": "a process that reads and msgspec-decodes the same files (decode)",
            "python": sys.version.split()[0],
            "cpus": os.cpu_count(),
            "rows": rows,
        }
        args.json.write_text(json.dumps(doc, indent=1) + "\n", encoding="utf-8")
    return 0


def _without_tool(text: bytes) -> bytes:
    """The fleet document without its tool version (two trees may carry two versions)."""
    doc = json.loads(text)
    doc.pop("tool", None)
    return json.dumps(doc, sort_keys=True).encode()


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    sub = ap.add_subparsers(dest="what", required=True)
    w = sub.add_parser("write", help="write a fleet")
    w.add_argument("directory", type=Path)
    w.add_argument("--nodes", type=int, default=1000)
    w.add_argument("--seed", type=int, default=36)
    w.add_argument("--check-distinct", action="store_true")
    d = sub.add_parser("decode", help="the floor: read and decode every file")
    d.add_argument("directory", type=Path)
    c = sub.add_parser("child", help=argparse.SUPPRESS)
    c.add_argument("directory", type=Path)
    c.add_argument("nodes", type=int)
    c.add_argument("--floor-first", action="store_true")
    m = sub.add_parser("measure", help="time fleet against the floor")
    m.add_argument("--nodes", type=int, nargs="+", default=[1000, 10000])
    m.add_argument("--rounds", type=int, default=5)
    m.add_argument("--full-rounds-up-to", type=int, default=10000, help="larger fleets: one round")
    m.add_argument("--tree", action="append", required=True, help="LABEL=SRC")
    m.add_argument("--seed", type=int, default=36)
    m.add_argument("--cache", type=Path, default=Path(tempfile.gettempdir()) / "fleet-varied")
    m.add_argument("--json", type=Path)
    args = ap.parse_args()
    if args.what == "decode":
        print(decode(args.directory))
        return 0
    if args.what == "child":
        return child(args.directory, args.nodes, args.floor_first)
    if args.what == "measure":
        return measure(args)
    total = write(args.directory, args.nodes, args.seed)
    print(f"{args.nodes} nodes, {total / 1e6:.1f} MB in {args.directory}")
    if args.check_distinct:
        shared = check_distinct(args.directory)
        print(f"nodes sharing a judgment key: {shared}")
        return 1 if shared else 0
    return 0


if __name__ == "__main__":
    sys.exit(main())
