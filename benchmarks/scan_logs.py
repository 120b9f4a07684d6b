"""scan-logs against ``grep -E -c -f`` on the same generated runtime logs, in the same run:
speed, memory at two sizes, plain and gzip, and whether both found the same lines.

For each size (default 256 and 1024 MiB) it generates a vLLM-like log (request, throughput,
scheduler lines) with real signature lines planted in it: every line of
``tests/fixtures/logs/`` that the scanner counts for exactly one signature (but the
autotuner summary, whose count is a number of tactics, not lines). It writes the
catalogue's literals as an ERE pattern file and times, best of ``--repeat``, interleaved:

* ``grep -E -c -f`` (the baseline; its output to a file: GNU grep stops at the first match
  when its output is /dev/null);
* ``blackwell-doctor scan-logs --format json`` with the engine it picks here (Hyperscan);
* the same command with ``hyperscan`` made unimportable: the fallback (RE2) a host without
  the wheel gets;
* for gzip (``--gzip``, default on): ``zcat | grep -E -c -f`` against scan-logs on the
  ``.gz``.

Memory: each command's peak RSS (``ru_maxrss`` of the child; scan-logs reads with
``read()``, no mmap, so its RSS holds no page cache of the log), and scan-logs' peak
anonymous memory: ``RssAnon`` of ``/proc/self/status`` sampled every 2 ms in the CLI's own
process, in an extra untimed run. Flat in the log size means the same at 256 and 1024 MiB.

Correctness, untimed: the set of line numbers ``grep -n`` prints must equal the set of
planted lines and the set of lines the scanner counts (the same scanner in-process, with
its per-occurrence hook), grep's count must equal the number of planted lines, and so must
the sum of the CLI's per-signature counts (each planted line carries exactly one signature
and nothing else matches), for every engine and for the ``.gz``. A mismatch exits 1.

    .venv/bin/python benchmarks/scan_logs.py [--mib 256 1024] [--repeat 3] [--no-gzip]
        [--keep DIR]

Run it on an otherwise idle host; ``taskset -c 0,1`` gives the 2-core figures.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blackwell_doctor.collect.logs.matcher import CHUNK_BYTES, SourceScanner, engine_name
from blackwell_doctor.ruledata.logs import load_catalogue

FIXTURES = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "logs"

_TEMPLATES = [
    "(EngineCore pid={p}) INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [loggers.py:{l}] "
    "Engine 000: Avg prompt throughput: {a:.1f} tokens/s, Avg generation throughput: {b:.1f} "
    "tokens/s, Running: {r} reqs, Waiting: 0 reqs, GPU KV cache usage: {c:.1f}%, Prefix cache "
    "hit rate: {d:.1f}%",
    '(APIServer pid={p}) INFO:     172.17.0.{r}:{l} - "POST /v1/chat/completions HTTP/1.1" 200 OK',
    "(APIServer pid={p}) INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [logger.py:{l}] Received "
    "request chatcmpl-{x:032x}: prompt: '<|im_start|>user\\nSummarise the following text in {r} "
    "words', params: SamplingParams(n=1, temperature={a:.2f}, top_p=0.95, max_tokens={l}), "
    "lora_request: None.",
    "(EngineCore pid={p}) DEBUG {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} [core.py:{l}] "
    "EngineCore loop active, {r} requests scheduled, {c:.3f} ms step",
    "\x1b[32m(Worker_TP{r} pid={p})\x1b[0m INFO {mm:02d}-{dd:02d} {h:02d}:{m:02d}:{s:02d} "
    "[gpu_model_runner.py:{l}] Graph capturing finished in {a:.0f} secs, took {c:.2f} GiB",
]
_BLOCK_BYTES = 4 << 20
_SIGNATURE_RATE = 1e-4  # about one signature line per 10,000 lines


def _literals() -> list[str]:
    cat = load_catalogue()
    found = {lit for s in cat.signatures for lit in s.literals}
    return sorted(found | {lit for m in cat.markers for lit in m.literals})


def scan_lines(path: Path) -> dict[int, list[str]]:
    """line number -> signatures the scanner counts there (in-process, untimed)."""
    got: dict[int, list[str]] = {}
    scanner = SourceScanner(
        load_catalogue(), path.name, on_occurrence=lambda sig, n: got.setdefault(n, []).append(sig)
    )
    with open(path, "rb") as fh:
        while chunk := fh.read(CHUNK_BYTES):
            scanner.feed(chunk)
    scanner.finish()
    return got


def planted_lines() -> list[bytes]:
    """Every fixture line the scanner counts for exactly one signature, except the autotuner
    summary (its finding's count is the sum of the N tactics it reports, not lines) and the
    generic detector's (the rules leave its findings out in a source that shows known
    failures, as this log does) and the liveness lines (never a finding)."""
    left_out = {"autotuner-summary", "unrecognised-fatal", "unrecognised-error", "liveness"}
    summary = {s.id for s in load_catalogue().signatures if s.rule in left_out}
    out: list[bytes] = []
    for path in sorted(FIXTURES.glob("*.log")):
        lines = path.read_bytes().splitlines()
        for n, sigs in sorted(scan_lines(path).items()):
            if len(sigs) == 1 and sigs[0] not in summary:
                out.append(lines[n - 1].rstrip(b"\r"))
    return out


def generate(path: Path, mib: int, seed: int = 1) -> set[int]:
    """Write ``mib`` MiB built from 8 distinct 4 MiB blocks; returns the planted line numbers."""
    rng = random.Random(seed)
    signatures = planted_lines()
    blocks: list[tuple[bytes, list[int], int]] = []  # data, planted line offsets, lines
    for _ in range(8):
        out: list[bytes] = []
        planted: list[int] = []
        size = 0
        while size < _BLOCK_BYTES:
            if rng.random() < _SIGNATURE_RATE:
                line = rng.choice(signatures)
                planted.append(len(out))
            else:
                line = rng.choice(_TEMPLATES).format(
                    p=rng.randint(100, 99999), mm=6, dd=1, h=rng.randint(0, 23),
                    m=rng.randint(0, 59), s=rng.randint(0, 59), l=rng.randint(10, 9999),
                    a=rng.random() * 1000, b=rng.random() * 1000, r=rng.randint(0, 7),
                    c=rng.random() * 100, d=rng.random() * 100, x=rng.getrandbits(128),
                ).encode()  # fmt: skip
            out.append(line)
            size += len(line) + 1
        blocks.append((b"\n".join(out) + b"\n", planted, len(out)))
    where: set[int] = set()
    offset = 0
    with open(path, "wb") as fh:
        for _ in range(mib // 4):
            data, planted, count = blocks[rng.randrange(len(blocks))]
            fh.write(data)
            where.update(offset + n + 1 for n in planted)
            offset += count
    return where


def first_mib(path: Path) -> None:
    """The start-up rows' 1 MiB vLLM log (issue 36: callgrind_startup.sh, device/*.sh): the
    first MiB of :func:`generate`'s 4 MiB log (seed 1), cut at its last line's end."""
    big = path.with_suffix(".4mib")
    generate(big, 4)
    data = big.read_bytes()[: 1 << 20]
    path.write_bytes(data[: data.rindex(b"\n") + 1])
    big.unlink()


def write_patterns(path: Path) -> None:
    escaped = [re.sub(r"([][\\.^$*+?(){}|])", r"\\\1", lit) for lit in _literals()]
    path.write_text("\n".join(escaped) + "\n", encoding="utf-8")


# The CLI in a fresh interpreter, optionally without hyperscan, optionally sampling RssAnon.
_CLI = """
import runpy, sys, threading, time
if {hide_hs!r}:
    sys.modules["hyperscan"] = None  # import fails: the engine a host without the wheel gets
peak = [0]
def sample():
    while True:
        with open("/proc/self/status") as fh:
            for line in fh:
                if line.startswith("RssAnon:"):
                    peak[0] = max(peak[0], int(line.split()[1]))
        time.sleep(0.002)
if {sample!r}:
    threading.Thread(target=sample, daemon=True).start()
sys.argv = ["blackwell-doctor", *{args!r}]
try:
    runpy.run_module("blackwell_doctor", run_name="__main__", alter_sys=True)
except SystemExit:
    pass
finally:
    if {sample!r}:
        sys.stderr.write("RSSANON %d\\n" % peak[0])
"""


def cli(args: list[str], *, hide_hs: bool = False, sample: bool = False) -> list[str]:
    code = _CLI.format(hide_hs=hide_hs, sample=sample, args=args)
    return [sys.executable, "-c", code]


def measure(args: list[str], out: Path) -> tuple[float, int, int]:
    """Run in a fresh interpreter so RUSAGE_CHILDREN covers only this command: wall seconds,
    peak RSS (KiB), exit status."""
    code = (
        "import resource,subprocess,sys,time,json;"
        "t=time.perf_counter();"
        f"p=subprocess.run({args!r},stdout=open({str(out)!r},'wb'),stderr=subprocess.DEVNULL);"
        "w=time.perf_counter()-t;"
        "print(json.dumps([w,resource.getrusage(resource.RUSAGE_CHILDREN).ru_maxrss,p.returncode]))"
    )
    res = subprocess.run([sys.executable, "-c", code], capture_output=True, check=True, text=True)
    wall, rss, rc = json.loads(res.stdout)
    return float(wall), int(rss), int(rc)


def rss_anon_peak(args: list[str]) -> int:
    """Peak RssAnon (KiB) of scan-logs, sampled inside its process (untimed run)."""
    res = subprocess.run(cli(args, sample=True), capture_output=True, text=True, check=False)
    found = re.search(r"RSSANON (\d+)", res.stderr)
    if found is None:
        raise RuntimeError(f"no RssAnon sample: {res.stderr[-500:]}")
    return int(found.group(1))


def grep_line_numbers(path: Path) -> set[int]:
    with open(path, "rb") as fh:
        return {int(line.split(b":", 1)[0]) for line in fh}


def occurrences(report: Path) -> int:
    return sum(f["count"] for f in json.loads(report.read_text(encoding="utf-8"))["findings"])


def best_of(
    runs: dict[str, tuple[list[str], Path]], repeat: int
) -> dict[str, tuple[float, int, int]]:
    """Each command ``repeat`` times, interleaved; the fastest run of each."""
    best: dict[str, tuple[float, int, int]] = {}
    for _ in range(repeat):
        for name, (args, out) in runs.items():
            result = measure(args, out)
            if name not in best or result[0] < best[name][0]:
                best[name] = result
    return best


def show(name: str, result: tuple[float, int, int], base: float | None, extra: str = "") -> None:
    ratio = f"  {result[0] / base:5.2f}x" if base else "       "
    print(f"  {name:34s} {result[0]:6.2f} s{ratio}  peak RSS {result[1] / 1024:6.1f} MiB{extra}")


def bench(work: Path, mib: int, repeat: int, gz: bool) -> bool:
    log, patterns = work / f"runtime-{mib}.log", work / "patterns.txt"
    t0 = time.perf_counter()
    planted = generate(log, mib)
    write_patterns(patterns)
    print(f"== {log.stat().st_size / 2**20:.0f} MiB: {len(planted)} planted signature lines "
          f"(generated in {time.perf_counter() - t0:.1f} s)")  # fmt: skip
    lc = f"LC_ALL={os.environ.get('BENCH_GREP_LOCALE', 'C.UTF-8')}"
    grep = ["env", lc, "grep", "-E", "-c", "-f", str(patterns)]
    doctor = ["scan-logs", "--format", "json"]
    subprocess.run(["cat", str(log)], stdout=subprocess.DEVNULL, check=True)  # warm the cache
    plain = best_of(
        {
            "grep": ([*grep, str(log)], work / "grep.out"),
            "scan": (cli([*doctor, str(log)]), work / "scan.json"),
            "fallback": (cli([*doctor, str(log)], hide_hs=True), work / "fallback.json"),
        },
        repeat,
    )
    tiny = work / "one-line.log"
    tiny.write_bytes(b"hello\n")
    idle = best_of({"idle": (cli([*doctor, str(tiny)]), work / "idle.json")}, repeat)["idle"]
    engine = engine_name(load_catalogue().literals)
    anon = rss_anon_peak([*doctor, str(log)])
    g = plain["grep"][0]
    print(f"  plain, {engine} engine here; ratio = time / grep's")
    show("grep -E -c -f", plain["grep"], g)
    show(f"scan-logs ({engine})", plain["scan"], g, f", peak RssAnon {anon / 1024:.1f} MiB")
    show("scan-logs (fallback: no hyperscan)", plain["fallback"], g)
    show("scan-logs start-up (one-line log)", idle, g)
    ok = True
    # Correctness: grep -n (untimed) against the planted lines and the scanner's own.
    with open(work / "grep-n.out", "wb") as fh:
        subprocess.run(["env", lc, "grep", "-E", "-n", "-f", str(patterns), str(log)],
                       stdout=fh, check=True)  # fmt: skip
    by_grep = grep_line_numbers(work / "grep-n.out")
    grep_count = int((work / "grep.out").read_text().strip())
    by_scan = set(scan_lines(log))
    counts = {n: occurrences(work / f"{n}.json") for n in ("scan", "fallback")}
    same = planted == by_grep == by_scan and grep_count == len(planted)
    same = same and all(c == len(planted) for c in counts.values())
    print(f"  lines: planted {len(planted)}, grep -n {len(by_grep)}, grep -c {grep_count}, "
          f"scanner {len(by_scan)}, CLI occurrences {counts}: "
          f"{'same' if same else 'DIFFERENT'}")  # fmt: skip
    if not same:
        print(f"  grep only: {sorted(by_grep - by_scan)[:10]}  "
              f"scanner only: {sorted(by_scan - by_grep)[:10]}  "
              f"not found: {sorted(planted - by_grep)[:10]}")  # fmt: skip
    ok = ok and same
    if gz:
        packed = work / f"runtime-{mib}.log.gz"
        with open(packed, "wb") as fh:
            subprocess.run(["gzip", "-6", "-c", str(log)], stdout=fh, check=True)
        subprocess.run(["cat", str(packed)], stdout=subprocess.DEVNULL, check=True)
        zgrep = f"zcat {packed} | env {lc} grep -E -c -f {patterns}"
        packed_runs = best_of(
            {
                "zgrep": (["sh", "-c", zgrep], work / "zgrep.out"),
                "zscan": (cli([*doctor, str(packed)]), work / "zscan.json"),
            },
            repeat,
        )
        zanon = rss_anon_peak([*doctor, str(packed)])
        z = packed_runs["zgrep"][0]
        print(f"  gzip ({packed.stat().st_size / 2**20:.0f} MiB compressed, level 6); "
              "ratio = time / zcat | grep's")  # fmt: skip
        show("zcat | grep -E -c -f", packed_runs["zgrep"], z)
        show(f"scan-logs ({engine}) on the .gz", packed_runs["zscan"], z,
             f", peak RssAnon {zanon / 1024:.1f} MiB")  # fmt: skip
        zcount = int((work / "zgrep.out").read_text().strip())
        zsame = zcount == len(planted) == occurrences(work / "zscan.json")
        print(
            f"  gzip lines: grep -c {zcount}, CLI occurrences "
            f"{occurrences(work / 'zscan.json')}: {'same' if zsame else 'DIFFERENT'}"
        )
        ok = ok and zsame
        packed.unlink()
    log.unlink()
    return ok


def main() -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").splitlines()[0])
    parser.add_argument("--mib", type=int, nargs="+", default=[256, 1024],
                        help="log sizes in MiB (multiples of 4)")  # fmt: skip
    parser.add_argument("--keep", type=Path, help="directory to keep the outputs in")
    parser.add_argument("--repeat", type=int, default=3, help="runs of each; the best is kept")
    parser.add_argument("--no-gzip", dest="gzip", action="store_false",
                        help="skip the gzip comparison")  # fmt: skip
    parser.add_argument("--first-mib", type=Path, metavar="PATH",
                        help="only write the start-up rows' 1 MiB log to PATH")  # fmt: skip
    ns = parser.parse_args()
    if ns.first_mib is not None:
        first_mib(ns.first_mib)
        return 0
    work = ns.keep or Path(tempfile.mkdtemp(prefix="scan-logs-bench-"))
    work.mkdir(parents=True, exist_ok=True)
    affinity = len(os.sched_getaffinity(0))
    print(f"{affinity} of {os.cpu_count()} CPUs, Python {sys.version.split()[0]}, "
          f"{len(_literals())} literals, load {os.getloadavg()[0]:.2f}")  # fmt: skip
    results = [bench(work, mib, ns.repeat, ns.gzip) for mib in ns.mib]  # every size
    if ns.keep is None:
        for p in work.iterdir():
            p.unlink()
        work.rmdir()
    return 0 if all(results) else 1


if __name__ == "__main__":
    raise SystemExit(main())
