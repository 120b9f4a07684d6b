"""A crash never reads as healthy (issue 22).

1. Every log file under tests/fixtures that shows a fatal error, by a simple definition of
   this test's own (not the product's matcher or its regexes), is judged ``fail``.
2. The log-end rule (collect/logs/context.py): a log whose last records are an error (the
   process died there, or the log was cut there) is ``fail``; an error the engine survives
   (records of its own after it, an autotuner skip, serving) stays warn or info.
"""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.ruledata.logs import load_catalogue
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings
from tests.conftest import FIXTURES
from tests.logmeasure import worst

# ------------------------------------------------------------------ an independent definition
# What a person reading a log calls a fatal error, written plainly. Two exclusions keep it
# honest without the product's structure rules: lines of an autotuner "Skipping tactic"
# record (a skipped tactic: the Skipping line and the C++ backtrace frames under it), and
# lines a person wrote about an error (a Markdown code span or typographic quotes).
_FATAL = {
    "critical": re.compile(r"\bCRITICAL\b"),
    "crash": re.compile(r"Segmentation fault|core dumped|SIGSEGV|SIGABRT|Fatal Python error"),
    "assertion": re.compile(r"Assertion failed|GGML_ASSERT"),
    "died": re.compile(
        r"\b(?:worker|engine|enginecore|process|runner|scheduler|llama-server)\b[^.]{0,60}?"
        r"\b(?:died|terminated|exited|failed to start|initiali[sz]ation failed"
        r"|encountered a fatal error)",
        re.IGNORECASE,
    ),
    "cuda": re.compile(
        r"CUDA error|CUDA_ERROR_|cudaError\w+|illegal memory access"
        r"|no kernel image is available|NCCL error"
    ),
}
_EXCEPTION_LINE = re.compile(r"\b[A-Za-z_][\w.]*(?:Error|Exception)(?::|\s*$)")
_ERROR_LEVEL = re.compile(r"\bERROR\b|\[E\]|level=ERROR")
_AUTOTUNER_FRAME = re.compile(r"^\S*\s*(?:\(\w+ pid=\d+\) )?\d+\s+0x[0-9a-f]+ ")


def fatal_kinds(text: str) -> set[str]:
    """The kinds of fatal error a log shows: a Traceback with an exception line after it,
    CRITICAL, a crash, a failed assertion, a worker or engine that died, a CUDA/NCCL error
    string, or a last line (of the non-blank ones) at ERROR level: nothing after it."""
    lines = [
        line
        for line in text.splitlines()
        if "[Autotuner]" not in line
        and not _AUTOTUNER_FRAME.match(line)
        and not re.search(r"`|\u201c|\u2018", line)
    ]
    kinds = {kind for kind, rx in _FATAL.items() if any(rx.search(line) for line in lines)}
    for at, line in enumerate(lines):
        if "Traceback (most recent call last)" in line and any(
            _EXCEPTION_LINE.search(rest) for rest in lines[at + 1 :]
        ):
            kinds.add("traceback")
    filled = [line for line in lines if line.strip()]
    if filled and _ERROR_LEVEL.search(filled[-1]):
        kinds.add("error-last")
    return kinds


# The corpus and the first held-out set. The fresh sets of issue 33 (logs-fresh-a, -b) are
# measurements: their misses are recorded, file by file, in their own MEASURED tables
# (tests/test_logs_fresh_*.py), not asserted away here.
ALL_LOGS = sorted(p for d in ("logs", "logs-heldout") for p in (FIXTURES / d).rglob("*.log"))
FLAGGED = [p for p in ALL_LOGS if fatal_kinds(p.read_text("utf-8", errors="replace"))]


def test_the_walk_sees_every_fixture_log() -> None:
    dirs = {p.parent.name for p in ALL_LOGS}
    assert {"logs", "logs-heldout"} == dirs
    assert len(ALL_LOGS) >= 98
    # The definition is not vacuous: about a third of the files show a fatal error.
    assert len(FLAGGED) >= 30
    assert {p.parent.name for p in FLAGGED} == {"logs", "logs-heldout"}


@pytest.mark.parametrize("path", FLAGGED, ids=[f"{p.parent.name}/{p.name}" for p in FLAGGED])
def test_no_fatal_error_in_any_test_log_reads_less_than_fail(path: Path) -> None:
    kinds = fatal_kinds(path.read_text("utf-8", errors="replace"))
    assert worst(path) == "fail", sorted(kinds)


@pytest.mark.parametrize(
    ("text", "kinds"),
    [
        ("INFO 06-01 21:51:58 [api.py:1] up\nERROR 06-01 21:52:09 [x.py:1] boom\n\n",
         {"error-last"}),
        ("ERROR 06-01 21:52:09 [x.py:1] boom\nINFO 06-01 21:52:10 [x.py:1] on\n", set()),
        ("Traceback (most recent call last):\n  File \"x.py\", line 1, in f\nValueError: v\n",
         {"traceback"}),
        ("Then it printed `Segmentation fault (core dumped)`\n", set()),
        ("(W pid=1) 2025-11-11 06:41:27,319 - WARNING - a.py:1 - [Autotuner]: Skipping tactic 1,"
         " due to failure while profiling: [TensorRT-LLM][ERROR] Assertion failed: x\n"
         "(W pid=1) 1       0x7c6dd0a58b16 tensorrt_llm::common::throwRuntimeError + 97\n"
         "(W pid=1) INFO 06-01 21:52:10 [x.py:1] on\n", set()),
    ],
)  # fmt: skip
def test_the_definition_itself(text: str, kinds: set[str]) -> None:
    assert fatal_kinds(text) == kinds


# ------------------------------------------------------------------ the log-end rule

FATAL = "runtime.unrecognised_fatal_error"
ERROR = "runtime.unrecognised_error"


def scan_text(tmp_path: Path, text: str) -> list[JudgedFinding]:
    log = tmp_path / "engine.log"
    log.write_text(text, encoding="utf-8")
    facts = scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    return judge_findings(facts)


def judged(tmp_path: Path, text: str) -> dict[str, tuple[str, int]]:
    return {f.signature: (f.severity, f.line) for f in scan_text(tmp_path, text)}


START = "(APIServer pid=1) INFO 06-01 21:51:58 [api_server.py:1880] vLLM API server 0.10.1\n"

# One error-level record per runtime's logger, none of them a catalogue literal.
ERROR_RECORDS = [
    "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [kv_cache_utils.py:712] Failed to load the "
    "KV cache connector.",  # vLLM
    "2025-04-09 10:12:31,402 - lmdeploy - ERROR - base.py:53 - engine stopped: no free blocks",
    "ERROR:root:the model server could not bind its port",  # logging.basicConfig, uvicorn
    "[TensorRT-LLM][ERROR] Failed to deserialize the engine plan",  # cpp logger
    "[03/03/2026-11:06:07] [TRT-LLM] [E] Failed to build the engine",  # tensorrt_llm/logger.py
    'time=2026-03-03T11:06:07.000Z level=ERROR source=server.go:12 msg="load failed"',  # Ollama
]


@pytest.mark.parametrize("record", ERROR_RECORDS)
def test_an_error_record_that_ends_the_log_is_an_unrecognised_fatal_error(
    tmp_path: Path, record: str
) -> None:
    assert judged(tmp_path, START + record + "\n") == {FATAL: ("fail", 2)}


@pytest.mark.parametrize("record", ERROR_RECORDS)
def test_an_error_record_with_the_engines_records_after_it_stays_a_warning(
    tmp_path: Path, record: str
) -> None:
    after = "(EngineCore_0 pid=282) INFO 06-01 21:52:10 [gpu_model_runner.py:1953] Loading model\n"
    got = judged(tmp_path, START + record + "\n" + after)
    assert got in ({ERROR: ("warn", 2)}, {FATAL: ("fail", 2)})
    # The one form the generic detector reads as fatal by itself is none of these.
    assert got == {ERROR: ("warn", 2)}


@pytest.mark.parametrize(
    ("after", "first"),
    [
        ("", 2),
        ("\n\n", 2),  # blank lines
        # Its traceback, without the prefix (Python logging's exc_info), then blank lines: the
        # generic finding quotes the traceback (a fatal form by itself).
        ('Traceback (most recent call last):\n  File "/x/engine.py", line 9, in run\n'
         "    self.step()\n    ^^^^^^^^^^^\nKeyError: 'block'\n\n", 3),
        # vLLM repeats its record prefix on every line of the message.
        ("(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9]   File \"/x/a.py\", line 3\n"
         "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9]     g()\n", 2),
        # A C++ backtrace under it (docker compose's prefix on every line).
        ("vllm-1  | 1       0x7c6dd0a58b16 tensorrt_llm::common::throwRuntimeError + 97\n"
         "vllm-1  | 2       0x7c6dd11ca0ad /x/fused_moe_120.so(+0x9080ad) [0x7c6dd11ca0ad]\n", 2),
    ],
)  # fmt: skip
def test_an_error_record_followed_only_by_its_report_ends_the_log(
    tmp_path: Path, after: str, first: int
) -> None:
    record = "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9] EngineCore stopped.\n"
    if after.startswith("vllm-1"):
        record = "vllm-1  | " + record
    assert judged(tmp_path, START + record + after) == {FATAL: ("fail", first)}


def test_an_error_the_engine_served_after_is_info(tmp_path: Path) -> None:
    record = "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9] optional part missing\n"
    ready = "(APIServer pid=1) INFO:     Application startup complete.\n"
    assert judged(tmp_path, START + record + ready) == {ERROR: ("info", 2)}


def test_an_error_survived_then_another_that_ends_the_log_is_fail(tmp_path: Path) -> None:
    one = "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9] optional part missing\n"
    on = "(EngineCore_0 pid=282) INFO 06-01 21:52:10 [loader.py:1] Loading weights\n"
    two = "(EngineCore_0 pid=282) ERROR 06-01 21:52:30 [core.py:9] weights do not fit\n"
    (finding,) = scan_text(tmp_path, START + one + on + two)
    # The finding quotes the first error line; it ends the log at line 4.
    assert (finding.signature, finding.severity, finding.line, finding.last_line) == (
        FATAL, "fail", 2, 4,
    )  # fmt: skip


def test_an_autotuner_skip_that_ends_the_log_stays_info(tmp_path: Path) -> None:
    skip = (
        "(Worker_TP0 pid=7) 2025-11-11 06:41:27,319 - WARNING - autotuner.py:485 - "
        "flashinfer.jit: [Autotuner]: Skipping tactic <MoERunner object at 0x7c70> 15, due to "
        "failure while profiling:\n"
        "(Worker_TP0 pid=7) Traceback (most recent call last):\n"
        '(Worker_TP0 pid=7)   File "autotuner.py", line 480, in choose_one\n'
        "(Worker_TP0 pid=7) RuntimeError: [CUTLASS] tactic 15 has no kernel for this shape\n"
    )
    assert judged(tmp_path, START + skip) == {"autotuner.tactic_skipped": ("info", 2)}


def test_a_warning_level_record_that_ends_the_log_stays_a_warning(tmp_path: Path) -> None:
    """NCCL's WARN is a warning level: an excerpt cut after one is a cut log."""
    nccl = "host:1:2 [0] NCCL WARN Failed to open libibverbs.so[.1]\n"
    assert judged(tmp_path, START + nccl) == {ERROR: ("warn", 2)}
    moe = (
        "(EngineCore pid=9) WARNING 05-03 17:42:23 [fused_moe.py:668] Using default MoE config. "
        "Performance might be sub-optimal! Config file not found at /x.json\n"
    )
    assert judged(tmp_path, START + moe) == {"vllm.default_moe_config": ("warn", 2)}


def test_a_known_signature_on_the_last_error_record_is_fail_with_its_own_meaning(
    tmp_path: Path,
) -> None:
    raised = (
        "(EngineCore_DP0 pid=310) ERROR 06-16 10:02:11 [core.py:1132] ValueError: NvFp4 MoE "
        "backend 'FLASHINFER_CUTLASS' does not support the deployment configuration since "
        "kernel does not support current device.\n"
    )
    assert judged(tmp_path, START + raised) == {"vllm.moe_backend_unsupported_device": ("fail", 2)}
    # The same text logged while selection goes on (DEBUG, then more records): a warning.
    selection = raised.replace("ERROR", "DEBUG").replace("ValueError: ", "")
    on = "(EngineCore_DP0 pid=310) INFO 06-16 10:02:12 [nvfp4.py:9] Using 'CUTLASS' backend\n"
    got = judged(tmp_path, START + selection + on)
    assert got == {"vllm.moe_backend_unsupported_device": ("warn", 2)}


def test_the_fatal_finding_reads_as_unrecognised_and_asks_for_a_report() -> None:
    entry = load_catalogue().by_id[FATAL]
    assert entry.meaning.startswith("Unrecognised fatal error")
    assert any("upstream" in step for step in entry.remedy)


@pytest.mark.parametrize("size", [1, 7, 4096, 70000])
def test_the_log_end_rule_does_not_depend_on_chunking(size: int) -> None:
    from blackwell_doctor.collect.logs.matcher import SourceScanner

    data = (START * 3000 + "(EngineCore_0 pid=282) ERROR 06-01 21:52:09 [core.py:9] x\n").encode()
    data += b'  File "/x/a.py", line 3, in f\n' * 3
    scanner = SourceScanner(load_catalogue(), "x")
    for i in range(0, len(data), size):
        scanner.feed(data[i : i + size])
    got = [
        (f.line, f.last_line, f.count)
        for f in scanner.finish()
        if f.signature == "runtime.log_ends_in_error"
    ]
    assert got == [(3001, 3001, 1)]
