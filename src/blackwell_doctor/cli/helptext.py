"""--help's words that are not an option's: each command's line in the command list (a
sentence that fits beside its name at 80 columns: click cuts a longer one mid-sentence) and
its examples, one command a line, shown under its options (issue 40). Imported by each
command module at start-up: plain strings only."""

SUMMARIES = {
    "check": "Judge this host (or a facts file) and report: the CI gate.",
    "collect": "Write this host's facts document, to judge anywhere.",
    "probe": "Measure the GPU's limits and run the tile probes.",
    "scan-logs": "Scan logs for fallback and failure signatures.",
    "recommend": "Ordered fixes and a runtime launch for this host.",
    "apply": "Run the recommended runtime via Docker, or plan it.",
    "model": "What a model is and whether it fits these GPUs.",
    "fleet": "Judge many nodes' facts at once, grouped by finding.",
    "slurm-health": "Drain or resume this Slurm node by its findings.",
    "bench": "Measure a serving endpoint; compare runs.",
    "audit": "Audit the Python GPU stack's kernels for this GPU.",
    "examples": "List the shipped examples (no GPU needed).",
}

EXAMPLES = {
    "check": """
blackwell-doctor check
blackwell-doctor check --fail-on warn -f junit -o report.xml
blackwell-doctor check --facts node7.json --select driver,platform
blackwell-doctor check --example wsl2-rtxpro6000x4
""",
    "collect": """
blackwell-doctor collect -o facts.json --redact
blackwell-doctor check --facts facts.json
""",
    "probe": """
blackwell-doctor probe
blackwell-doctor probe --p2p -f json -o probe.json
""",
    "scan-logs": """
blackwell-doctor scan-logs vllm.log
docker logs vllm 2>&1 | blackwell-doctor scan-logs -
blackwell-doctor scan-logs --container vllm --fail-on warn
""",
    "recommend": """
blackwell-doctor recommend --example wsl2-rtxpro6000x4
blackwell-doctor recommend -f markdown > ticket.md
blackwell-doctor recommend --model-dir /models/qwen -f compose
""",
    "apply": """
blackwell-doctor apply --model-dir /models/qwen
blackwell-doctor apply --model-dir /models/qwen --yes --verify
blackwell-doctor apply --example wsl2-rtxpro6000x4
""",
    "model": """
blackwell-doctor model /models/qwen
blackwell-doctor model openai/gpt-oss-120b --hub
blackwell-doctor model --example dgx-spark
""",
    "fleet": """
blackwell-doctor fleet facts/*.json
blackwell-doctor fleet facts/ -f markdown > fleet.md
blackwell-doctor fleet --example lab
""",
    "slurm-health": """
blackwell-doctor slurm-health --facts node7.json --fail-on warn
blackwell-doctor slurm-health --no-probe --fail-on fail
""",
    "bench": """
blackwell-doctor bench --url http://127.0.0.1:8000 -o before.json
blackwell-doctor bench --compare before.json after.json
blackwell-doctor bench --url http://127.0.0.1:8000 --rate sweep
blackwell-doctor bench --example max-num-seqs-1 -f html > compare.html
""",
    "audit": """
blackwell-doctor audit
blackwell-doctor audit --python /opt/venv/bin/python
blackwell-doctor audit --image vllm/vllm-openai:latest
""",
    "examples": """
blackwell-doctor examples
blackwell-doctor check --example h200x2
""",
}
