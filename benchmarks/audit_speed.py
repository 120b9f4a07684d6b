"""How fast `audit` reads an environment's GPU code, beside cuobjdump over the same files,
and whether the two agree on every file's target list.

For the environment of ``--python`` (default: this interpreter) it lists the shared objects
of every GPU distribution the audit reads, then measures

- cold: the fatbin scan of every file with an empty scan cache (the OS page cache is as it
  is: on a freshly started machine the first run reads the disk);
- warm: the same scan again, answered from the scan cache (file identity unchanged);
- the whole `blackwell-doctor audit` command, cold cache and warm, as a user runs it;
- `cuobjdump --list-elf` (and `--list-ptx`) over the same files, one process per file, as
  a script over cuobjdump would;

and counts the files whose SASS and PTX lists equal cuobjdump's (in order; cuobjdump 13.x
prints family cubins without their ``f``, which Target.cuobjdump_name matches).

    python benchmarks/audit_speed.py [--python PATH] [--cuobjdump PATH] [--facts FILE]
        [--json OUT.json]
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from blackwell_doctor.collect.stack.fatbin import NotElf, scan_file
from blackwell_doctor.collect.stack.interpreter import ask_interpreter, this_interpreter
from blackwell_doctor.collect.stack.inventory import gpu_distributions, read_stack, shared_objects
from blackwell_doctor.ruledata.stack import load_stack_data

_LISTED = re.compile(r"^(?:ELF|PTX) file\s+\d+: .*\.(sm_\w+?)\.(?:cubin|ptx)$", re.M)


def _cuobjdump(tool: str, option: str, path: Path) -> list[str]:
    out = subprocess.run([tool, option, str(path)], capture_output=True, text=True)
    return _LISTED.findall(out.stdout)


def main() -> int:
    ap = argparse.ArgumentParser()
    ap.add_argument("--python", type=Path)
    ap.add_argument("--cuobjdump", default="cuobjdump")
    ap.add_argument("--facts", type=Path, help="GPU facts for the CLI runs (default: this host)")
    ap.add_argument("--json", type=Path)
    ap.add_argument("--no-oracle", action="store_true", help="skip cuobjdump")
    args = ap.parse_args()

    interp = ask_interpreter(args.python) if args.python else this_interpreter()
    data = load_stack_data()
    paths = [p for p in interp.paths if os.path.isdir(p)]
    files = sorted({p for d in gpu_distributions(paths, data).values() for p in shared_objects(d)})
    files = [p for p in files if p.is_file()]
    size = sum(p.stat().st_size for p in files)
    result: dict[str, object] = {
        "python": interp.executable,
        "files": len(files),
        "bytes": size,
    }
    with tempfile.TemporaryDirectory() as tmp:
        cache = Path(tmp) / "scans.json"
        t = time.perf_counter()
        cold = read_stack(interp, data, ptxas_targets=[], environ={}, cache_path=cache)
        result["scan_cold_s"] = round(time.perf_counter() - t, 3)
        t = time.perf_counter()
        warm = read_stack(interp, data, ptxas_targets=[], environ={}, cache_path=cache)
        result["scan_warm_s"] = round(time.perf_counter() - t, 3)
        result["warm_cached_files"] = warm.cached_files
        result["files_with_gpu_code"] = sum(len(p.files) for p in cold.packages)
        # Files with fatbins in their data, which the library loads itself (libcufft.so.12).
        result["files_with_loaded_fatbins"] = [
            f.path for p in cold.packages for f in p.files if f.loaded
        ]

        argv = [sys.executable, "-m", "blackwell_doctor", "audit", "-f", "json"]
        if args.python:
            argv += ["--python", str(args.python)]
        if args.facts:
            argv += ["--facts", str(args.facts)]
        env = {**os.environ, "XDG_CACHE_HOME": str(Path(tmp) / "cli")}
        for label in ("cli_cold_s", "cli_warm_s"):
            t = time.perf_counter()
            subprocess.run(argv, capture_output=True, env=env)
            result[label] = round(time.perf_counter() - t, 3)

    if not args.no_oracle:
        agree, differ = 0, []
        t_elf = t_ptx = 0.0
        for p in files:
            t = time.perf_counter()
            elf = _cuobjdump(args.cuobjdump, "--list-elf", p)
            t_elf += time.perf_counter() - t
            t = time.perf_counter()
            ptx = _cuobjdump(args.cuobjdump, "--list-ptx", p)
            t_ptx += time.perf_counter() - t
            try:
                targets = scan_file(str(p)).targets
            except NotElf:
                targets = []
            mine_elf = [x.cuobjdump_name for x in targets if x.kind == "sass"]
            mine_ptx = [x.cuobjdump_name for x in targets if x.kind == "ptx"]
            if (mine_elf, mine_ptx) == (elf, ptx):
                agree += 1
            else:
                differ.append(str(p))
        result.update(
            cuobjdump_list_elf_s=round(t_elf, 3),
            cuobjdump_list_ptx_s=round(t_ptx, 3),
            cuobjdump_agree=agree,
            cuobjdump_differ=differ[:20],
        )
    print(json.dumps(result, indent=2))
    if args.json:
        args.json.write_text(json.dumps(result, indent=2) + "\n")
    return 0 if not result.get("cuobjdump_differ") else 1


if __name__ == "__main__":
    sys.exit(main())
