"""Issue 34's closing evidence: `model ORG/NAME` from a Hugging Face cache and `--hub` from a
local Hub, as a user runs them (the installed command in its own process), with the requests
the server saw. The Hub is tests/hubserver.py (a real http.server on 127.0.0.1 speaking the
paths huggingface_hub calls); the cache is written by the unmodified library
(snapshot_download from that server); the checkpoint is tests/modeldirs.make_model's
3-shard compressed-tensors NVFP4 MoE.

    PYTHONPATH=src:. python benchmarks/evidence/issue34_hub_demo.py
"""

from __future__ import annotations

import os
import subprocess
import sys
import tempfile
from pathlib import Path

from huggingface_hub import snapshot_download
from tests.hubserver import HubServer, Repo, serve
from tests.modeldirs import make_model

REPO = Path(__file__).resolve().parents[2]
FACTS = str(REPO / "tests/fixtures/facts/rtxpro6000x4-threadripper-iommu.json")


def run(args: list[str], env: dict[str, str]) -> None:
    base = {k: v for k, v in os.environ.items() if not k.startswith(("HF_", "HUGGING"))}
    cmd = [sys.executable, "-m", "blackwell_doctor", *args]
    proc = subprocess.run(
        cmd, capture_output=True, text=True, timeout=120, check=False, cwd=REPO,
        env={**base, "PYTHONPATH": str(REPO / "src"), **env},
    )  # fmt: skip
    print(f"$ blackwell-doctor {' '.join(args)}   (exit {proc.returncode})")
    print("\n".join(proc.stdout.splitlines()[:14]))
    if proc.stderr.strip():
        print("stderr:", proc.stderr.strip())


def main() -> None:
    with tempfile.TemporaryDirectory() as tmp:
        root = Path(tmp)
        ckpt = make_model(root / "src", moe=True, fmt="ct-nvfp4", shards=3)
        files = {p.name: p.read_bytes() for p in sorted(ckpt.iterdir())}
        with serve(HubServer({"org/moe": Repo(files)})) as hub:
            cache = root / "hf" / "hub"
            snapshot_download("org/moe", cache_dir=cache, endpoint=hub.url, token=False)
            hub.reset()
            env = {"HF_HOME": str(root / "hf"), "HF_HUB_DISABLE_TELEMETRY": "1"}
            run(["model", "org/moe", "--facts", FACTS], env)
            print(f"requests the Hub saw for the cache form: {len(hub.requests())}\n")
            hub.reset()
            env = {"HF_HOME": str(root / "empty"), "HF_ENDPOINT": hub.url,
                   "HF_HUB_DISABLE_TELEMETRY": "1"}  # fmt: skip
            run(["model", "org/moe", "--hub", "--facts", FACTS], env)
            print(f"requests the Hub saw for --hub: {len(hub.requests())}")
            for s in hub.requests():
                print(f"  {s.method} {s.path} range={s.range} status={s.status} "
                      f"body={s.body_bytes} B")  # fmt: skip
            weights = sum(len(v) for k, v in files.items() if k.endswith(".safetensors"))
            sent = sum(s.body_bytes for s in hub.requests())
            print(f"shard bytes on the Hub {weights:,}; bytes the Hub sent {sent:,}")


if __name__ == "__main__":
    main()
