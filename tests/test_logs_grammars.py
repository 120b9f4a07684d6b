"""The log-record grammars, process deaths and the error vocabulary (issue 33, items 2, 3, 6).

Every line below is COMPOSED here from the format its logger's source prints (cited beside
it, as in src/blackwell_doctor/ruledata/records.py), not copied from any log: the held-out
sets stay unseen.
"""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor.collect.logs.matcher import CHUNK_BYTES, SourceScanner
from blackwell_doctor.collect.logs.scan import scan_sources
from blackwell_doctor.ruledata import records
from blackwell_doctor.ruledata.checkdata import CatalogueError
from blackwell_doctor.ruledata.logs import load_catalogue
from blackwell_doctor.ruledata.vocabulary import load_vocabulary, parse_vocabulary
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings

FATAL = "runtime.unrecognised_fatal_error"
ERROR = "runtime.unrecognised_error"
READY = "(APIServer pid=1) INFO:     Application startup complete.\n"
LATER = "INFO 06-01 21:52:30 [loggers.py:1] Engine 000: Avg prompt throughput: 0.0 tokens/s\n"

# ------------------------------------------------------------------ A: levels per grammar

ERROR_RECORDS = [
    # Python logging BASIC_FORMAT "%(levelname)s:%(name)s:%(message)s"
    "ERROR:root:could not open the shard",
    # Logging HOWTO "%(asctime)s - %(name)s - %(levelname)s - %(message)s"
    "2025-11-11 06:41:27,319 - engine - ERROR - could not open the shard",
    # "%(asctime)s %(levelname)s %(name)s: %(message)s"
    "2025-11-11 06:41:27,319 ERROR engine: could not open the shard",
    # pytest DEFAULT_LOG_FORMAT "%(levelname)-8s %(name)s:%(filename)s:%(lineno)d %(message)s"
    "ERROR    engine:loader.py:12 could not open the shard",
    # glog LogMessage::Init "<sev><mmdd> <hh:mm:ss.uuuuuu> <tid> <file>:<line>] "
    "E1128 12:00:00.123456  1234 file.cc:12] could not open the shard",
    # glog 0.7 with the year in the prefix
    "E20241128 12:00:00.123456  1234 file.cc:12] could not open the shard",
    # torch.distributed rank prefix before a glog-style record
    "[rank0]:E0701 14:28:21.083000 911603 api.py:539] could not open the shard",
    # tracing-subscriber Full "{timestamp} {level:>5} {spans}{target}: {fields}"
    "2024-01-01T00:00:00.000000Z ERROR text_generation_launcher: could not open the shard",
    "2024-01-01T00:00:00.000000Z ERROR shard-manager{rank=0}: text_generation_launcher: no shard",
    # the same with its ANSI colours (dimmed time, red level, italic span fields)
    "\x1b[2m2024-01-01T00:00:00.000000Z\x1b[0m \x1b[31mERROR\x1b[0m \x1b[1mshard\x1b[0m"
    "\x1b[1m{\x1b[0m\x1b[3mrank\x1b[0m\x1b[2m=\x1b[0m0\x1b[1m}\x1b[0m\x1b[2m:\x1b[0m "
    "launcher: no shard",
    # tracing without time
    "ERROR text_generation_launcher: could not open the shard",
    # env_logger "[{timestamp} {level:<5} {module_path}] {args}"
    "[2024-01-01T00:00:00Z ERROR my_server::load] could not open the shard",
    # zap console encoder "<ISO8601>\t<LEVEL>\t<logger>\t<msg>"
    "2024-01-01T00:00:00.000Z\tERROR\tserver\tcould not open the shard",
    # Go slog TextHandler
    'time=2024-01-01T00:00:00.000Z level=ERROR source=server.go:12 msg="could not open the shard"',
    # logrus TextFormatter without a TTY
    'time="2024-01-01T00:00:00Z" level=error msg="could not open the shard"',
    # go-kit / log15
    'level=error ts=2024-01-01T00:00:00Z caller=main.go:12 msg="could not open the shard"',
    'lvl=eror msg="could not open the shard"',
    # logrus TextFormatter on a TTY "%s[%04d] %-44s "
    "ERRO[0001] could not open the shard",
    # zap / logrus JSON
    '{"level":"error","ts":1704067200.0,"caller":"server.go:12","msg":"could not open the shard"}',
    '{"level": "error", "msg": "could not open the shard"}',
    # GCP structured logging, python-json-logger, ECS, Serilog
    '{"severity":"ERROR","message":"could not open the shard"}',
    '{"asctime": "2024-01-01", "levelname": "ERROR", "message": "could not open the shard"}',
    '{"@timestamp":"2024-01-01T00:00:00Z","log.level":"error","message":"no shard"}',
    '{"@t":"2024-01-01T00:00:00Z","@l":"Error","@m":"could not open the shard"}',
    # journalctl -o json (read as a plain file here: not the journal's own keys)
    '{"PRIORITY":"3","MESSAGE":"could not open the shard"}',
    # sd-daemon.h SD_ERR, printk KERN_ERR (dmesg -r), a user.err PRI (8 + 3)
    "<3>could not open the shard",
    "<11>could not open the shard",
    # kubectl logs --prefix, docker compose around a vLLM record
    "[pod/vllm-0/engine] ERROR 06-01 21:52:09 [core.py:1] could not open the shard",
    "vllm-1  | ERROR 06-01 21:52:09 [core.py:1] could not open the shard",
    # zerolog ConsoleWriter "<time.Kitchen> <LVL> <message>" (LocalAI and other Go servers)
    "9:25PM ERR could not open the shard",
    "2024-01-01T00:00:00Z ERR could not open the shard",
    # Go's log.LstdFlags envelope ("2009/01/23 01:23:23 ") around a glog record, as a job
    # runner that logs its child's lines through Go's log prints them
    "2023/10/26 12:12:06 E1026 12:12:06.704113  12 x.cc:4] could not open the shard",
]

FATAL_RECORDS = [
    "F1128 12:00:00.123456  1234 file.cc:12] Check failed: x == y",  # glog FATAL
    '{"level":"fatal","msg":"could not open the shard"}',  # zap/logrus
    '{"level":"panic","msg":"could not open the shard"}',
    '{"level":"dpanic","msg":"could not open the shard"}',
    "FATA[0001] could not open the shard",  # logrus TTY
    "PANI[0001] could not open the shard",
    'level=fatal msg="could not open the shard"',
    "<2>could not open the shard",  # PRI crit
    "CRITICAL:root:could not open the shard",  # Python BASIC_FORMAT
    "9:25PM FTL could not open the shard",  # zerolog ConsoleWriter
    "9:25PM PNC could not open the shard",
    # nvidia-smi; k8s-device-plugin klog.Errorf("Failed to initialize NVML: %v.", ret) in Go's
    # log envelope; go-nvml callers' fmt.Errorf("failed to initialize NVML: %v", ret)
    "Failed to initialize NVML: Driver/library version mismatch",
    "2022/05/13 23:09:23 Failed to initialize NVML: ERROR_LIBRARY_NOT_FOUND.",
    "E0513 23:09:23.000000       1 main.go:12] failed to initialize NVML: ERROR_UNKNOWN",
]

HEALTHY = [
    'level=info msg="retrying after error"',  # logfmt at info, a scary word in its message
    'time=2024-01-01T00:00:00Z level=INFO msg="0 errors in the last hour"',
    '{"level":"info","msg":"cuda error count 0"}',
    '{"level":"info","config":{"error_handling":"strict","on_error":"retry"}}',
    '  "error_handling": "strict",',  # a config dump
    "non-default args: {'error_handling': 'strict'}",
    "0 errors, 0 warnings",
    "NCCL_ASYNC_ERROR_HANDLING=1",
    "TORCH_NCCL_ASYNC_ERROR_HANDLING=1 NCCL_DEBUG=WARN",
    "INFO 06-01 21:52:09 [core.py:1] error budget: 0.1 %",
    "2024-01-01T00:00:00.000000Z  INFO text_generation_launcher: error rate 0",
    "W1128 12:00:00.123456  1234 file.cc:12] slow path: retrying after error",
    "I1128 12:00:00.123456  1234 file.cc:12] errors: 0",
    # TensorFlow's "%s.%06d: %c %s:%d] %s" (tsl logging.cc) is no grammar here: every TF 2.14+
    # start prints E records that are harmless ("Unable to register cuFFT factory: ...")
    "2023-10-26 12:12:06.704113: E external/local_xla/xla/stream_executor/cuda/cuda_fft.cc:477]"
    " Unable to register cuFFT factory: Attempting to register factory for plugin cuFFT when"
    " one has already been registered",
    "WARN[0001] retrying after error",
    "<6>retrying after error",
    "<14>Error handling enabled",  # user.info
    '{"PRIORITY":"6","MESSAGE":"Error handling enabled"}',
    "[pod/vllm-0/engine] INFO 06-01 21:52:09 [core.py:1] error handling: strict",
    "The log said ERROR only once, and that was expected.",  # prose
    "9:25PM INF error budget: 0 errors",  # zerolog at info
    "9:25PM WRN retrying after error",
    "2022/05/13 23:09:23 Loading NVML",  # Go's log envelope, no level
    "2022/05/13 23:09:23 Initialized NVML: 8 devices",
]


@pytest.mark.parametrize("line", ERROR_RECORDS)
def test_an_error_level_record_of_every_grammar_is_an_error(line: str) -> None:
    from blackwell_doctor.collect.logs.matcher import clean_line

    assert records.classify(clean_line(line.encode())) == "error", line


@pytest.mark.parametrize("line", FATAL_RECORDS)
def test_a_fatal_level_record_is_fatal(line: str) -> None:
    assert records.classify(line) == "fatal", line


@pytest.mark.parametrize("line", HEALTHY)
def test_healthy_lines_with_scary_words_are_no_error(line: str) -> None:
    assert records.classify(line) is None, line


@pytest.mark.parametrize("line", ERROR_RECORDS + FATAL_RECORDS)
def test_the_scanner_finds_each_record_by_its_literals(line: str) -> None:
    """The prefilter's literals (the generic signatures' and the grammar table's) hold every
    error-level record: a record the literals miss would never reach the grammar table."""
    got = _scan_lines([line, "INFO 06-01 21:52:30 [x.py:1] later"])
    assert got & {FATAL, ERROR}, line


@pytest.mark.parametrize("line", HEALTHY)
def test_the_scanner_finds_nothing_in_healthy_lines(line: str) -> None:
    assert _scan_lines([line]) == set(), line


def test_every_grammar_cites_its_source_and_compiles_under_re2_rules() -> None:
    for grammar in records.GRAMMARS:
        assert len(grammar.source) > 20, grammar.name
        # RE2 has no look-around and no back-reference
        for banned in ("(?=", "(?!", "(?<=", "(?<!", "(?P="):
            assert banned not in grammar.pattern, (grammar.name, banned)
    for pattern in (*records.FATAL_FORMS, *records.FATAL_PHRASES, *records.ENVELOPES):
        assert "(?=" not in pattern
        assert "(?<" not in pattern


def test_a_traceback_line_under_a_record_still_continues_it() -> None:
    from blackwell_doctor.collect.logs import context

    assert context.continues_error('vllm-1  |   File "x.py", line 1, in f')
    assert context.continues_error("[pod/a/b]     x = f()")
    assert not context.continues_error("[pod/a/b] INFO 06-01 21:52:10 [x.py:1] serving")


# ------------------------------------------------------------------ B: process death

DEATHS = [
    # libstdc++ vterminate.cc
    "terminate called after throwing an instance of 'std::runtime_error'",
    "  what():  NCCL error in: comm.cpp:12, remote process exited or there was a network error",
    "terminate called recursively",
    # bash's report of a signalled child (strsignal)
    "Aborted (core dumped)",
    "Segmentation fault (core dumped)",
    "Killed",
    "Bus error (core dumped)",
    "Illegal instruction (core dumped)",
    "Floating point exception",
    "run.sh: line 3:  1234 Killed                  python -m vllm serve x",
    # Rust std panicking.rs default hook; Go runtime printpanics / throw
    "thread 'main' panicked at src/main.rs:2:5:",
    "panic: runtime error: invalid memory address or nil pointer dereference",
    "fatal error: all goroutines are asleep - deadlock!",
    # Python
    "Fatal Python error: Segmentation fault",
    "torch.AcceleratorError: CUDA error: out of memory",
    # container runtimes
    "vllm-1 exited with code 137",
    "command terminated with exit code 137",
    # a signal or its exit code inside a record
    "2024-01-01T00:00:00.000000Z ERROR shard-manager: text_generation_launcher: Shard process "
    "was signaled to shutdown with signal 4 rank=0",
    "INFO 06-01 21:52:09 [launcher.py:1] worker 3 killed by signal 9",
    'time=2024-01-01T00:00:00Z level=WARN msg="runner exited" error="exit status 139"',
    'time=2024-01-01T00:00:00Z level=ERROR msg="child exited with exit code 137"',
]


@pytest.mark.parametrize("line", DEATHS)
def test_every_form_of_process_death_is_fatal(line: str) -> None:
    assert records.classify(line) == "fatal", line


@pytest.mark.parametrize(
    "line",
    [
        "INFO 06-01 21:52:09 [launcher.py:1] Received signal 15, shutting down",  # SIGTERM
        'level=info msg="exit code 0"',
        "The process was killed by signal 9 last week, says the README.",  # no record
    ],
)
def test_a_graceful_stop_or_prose_about_a_signal_is_no_death(line: str) -> None:
    assert records.classify(line) != "fatal", line


def test_rust_main_returning_err_is_the_processes_last_words(tmp_path: Path) -> None:
    # text-generation-inference's launcher: tracing ERROR records, then main's Err
    # (std Termination for Result: "Error: {err:?}").
    log = (
        "2024-01-01T00:00:00.000000Z  INFO text_generation_launcher: Starting shard rank=0\n"
        "2024-01-01T00:00:01.000000Z ERROR text_generation_launcher: Shard 0 failed to start\n"
        "2024-01-01T00:00:01.000000Z  INFO text_generation_launcher: Shutting down shards\n"
        "Error: ShardCannotStart\n"
    )
    got = _judged(tmp_path, log)
    assert got[FATAL][0] == "fail"


def test_error_name_mid_log_then_serving_is_survived(tmp_path: Path) -> None:
    got = _judged(tmp_path, "Error: ConfigMissing\n" + READY + LATER)
    assert got.get(ERROR, ("info",))[0] == "info"


def test_cpp_terminate_with_an_nccl_what_fails(tmp_path: Path) -> None:
    # libstdc++'s terminate handler around a std::runtime_error whose what() is NCCL's.
    log = (
        "INFO 06-01 21:52:09 [core.py:1] all-reduce warm-up\n"
        "terminate called after throwing an instance of 'std::runtime_error'\n"
        "  what():  NCCL error: remote process exited or there was a network error, NCCL "
        "version 2.27.3\nncclRemoteError: A call failed possibly due to a network error or a "
        "remote process exiting prematurely.\n"
    )
    got = _judged(tmp_path, log)
    assert got[FATAL][0] == "fail"
    assert got[FATAL][1] == 2


# ------------------------------------------------------------------ C: the vocabulary


def test_the_shipped_vocabulary_loads_and_is_in_the_prefilter() -> None:
    vocab = load_vocabulary()
    assert vocab.terms
    cat = load_catalogue()
    for term in vocab.terms:
        owners = cat.owners[cat.literals.index(term.text.encode())]
        assert any(kind == "term" for kind, _ in owners), term.text


def test_a_term_glued_to_model_output_is_found_with_its_family(tmp_path: Path) -> None:
    # llama.cpp ggml-cuda.cu CUDA_CHECK: "CUDA error: %s" then "  current device: %d, in
    # function %s at %s:%d", printed on stderr right after the streamed tokens.
    log = (
        "llama_print_timings: load time = 1200.00 ms\n"
        "The capital of France is ParisCUDA error: unspecified launch failure\n"
        "  current device: 0, in function ggml_cuda_op_mul_mat at ggml-cuda.cu:1234\n"
        "  cudaStreamSynchronize(stream)\n"
        "ggml-cuda.cu:123: CUDA error\n"
    )
    findings = _scan(tmp_path, log)
    fatal = [f for f in findings if f.signature == FATAL]
    assert fatal
    assert fatal[0].severity == "fail"
    assert fatal[0].line == 2
    assert "CUDA error: unspecified launch failure (CUDA runtime):" in fatal[0].excerpt


def test_a_fatal_term_then_serving_is_survived(tmp_path: Path) -> None:
    got = _judged(tmp_path, "worker 1 reported ncclRemoteError, restarting it\n" + READY + LATER)
    assert got[FATAL][0] == "info"


def test_a_non_fatal_term_mid_log_warns_and_at_the_end_fails(tmp_path: Path) -> None:
    line = "cudnn returned CUDNN_STATUS_NOT_SUPPORTED for conv 3, falling back\n"
    assert _judged(tmp_path, line + LATER)[ERROR][0] == "warn"
    assert _judged(tmp_path, LATER + line)[FATAL][0] == "fail"


def test_a_markdown_error_report_with_a_term_fails(tmp_path: Path) -> None:
    # ComfyUI's error report (app/logger + its "## Error Details" template), Markdown.
    log = (
        "# ComfyUI Error Report\n"
        "## Error Details\n"
        "- **Node ID:** 3\n"
        "- **Exception Type:** torch.AcceleratorError\n"
        "- **Exception Message:** CUDA error: out of memory\n"
    )
    got = _judged(tmp_path, log)
    assert FATAL in got
    assert got[FATAL][0] == "fail"


def test_a_term_quoted_in_prose_is_no_finding(tmp_path: Path) -> None:
    log = "If you see `cudaErrorIllegalAddress` in your log, file a bug.\n" + LATER
    assert _judged(tmp_path, log) == {}


def test_a_known_signature_on_the_same_line_wins(tmp_path: Path) -> None:
    log = (
        "RuntimeError: CUDA error: no kernel image is available for execution on the device "
        "(cudaErrorIllegalAddress)\n"
    )
    got = _judged(tmp_path, log)
    assert FATAL not in got
    assert ERROR not in got


def test_a_term_split_by_chunking_is_found_the_same(tmp_path: Path) -> None:
    data = (b"x" * (CHUNK_BYTES - 5)) + b" ncclSystemError happened\n" + LATER.encode()
    whole = SourceScanner(load_catalogue(), "a")
    whole.feed(data)
    pieces = SourceScanner(load_catalogue(), "a")
    for at in range(0, len(data), 7919):
        pieces.feed(data[at : at + 7919])
    assert whole.finish() == pieces.finish()


def test_a_vocabulary_with_an_unknown_family_is_refused() -> None:
    raw = {
        "source": [{"id": "nccl", "pinned": "x"}],
        "term": [{"text": "x", "family": "cuda", "kind": "name", "fatal": True, "meaning": "m"}],
    }
    with pytest.raises(CatalogueError, match="family"):
        parse_vocabulary(raw)


# ------------------------------------------------------------------ helpers


def _scan(tmp_path: Path, text: str) -> list[JudgedFinding]:
    log = tmp_path / "engine.log"
    log.write_text(text, encoding="utf-8")
    facts = scan_sources(
        paths=[str(log)], containers=[], journal=False, kernel_log=False, host_root=Path("/")
    )
    return judge_findings(facts)


def _judged(tmp_path: Path, text: str) -> dict[str, tuple[str, int]]:
    return {f.signature: (f.severity, f.line) for f in _scan(tmp_path, text)}


def _scan_lines(lines: list[str]) -> set[str]:
    scanner = SourceScanner(load_catalogue(), "t")
    scanner.feed(("\n".join(lines) + "\n").encode())
    return {f.signature for f in scanner.finish()} - {"runtime.log_ends_in_error"}


def test_a_journal_entry_of_priority_err_is_an_error_record(tmp_path: Path) -> None:
    # journalctl -o json / -o export (systemd.journal-fields(7) PRIORITY=, "3" is err):
    # the level the journal keeps apart from MESSAGE reaches the grammar table as "<3>".
    import json

    def entry(priority: str, message: str) -> str:
        keys = {"__CURSOR": "c", "__REALTIME_TIMESTAMP": "1", "_BOOT_ID": "b"}
        return json.dumps({**keys, "PRIORITY": priority, "MESSAGE": message}) + "\n"

    text = entry("6", "model loaded") + entry("3", "could not open the shard")
    text += entry("6", "still going")
    got = _judged(tmp_path, text)
    assert got == {ERROR: ("warn", 2)}
    export = (
        "__CURSOR=c\n__REALTIME_TIMESTAMP=1\nPRIORITY=6\nMESSAGE=model loaded\n\n"
        "__CURSOR=d\n__REALTIME_TIMESTAMP=2\nPRIORITY=3\nMESSAGE=could not open the shard\n\n"
        "__CURSOR=e\n__REALTIME_TIMESTAMP=3\nPRIORITY=6\nMESSAGE=still going\n\n"
    )
    assert _judged(tmp_path, export) == {ERROR: ("warn", 2)}


def test_a_traceback_in_gos_log_envelope_that_ends_the_log_fails(tmp_path: Path) -> None:
    # Composed: a Python child's traceback as a Go job runner logs each of its lines through
    # log.LstdFlags ("2009/01/23 01:23:23 "); the log ends in it.
    log = (
        "2023/10/26 12:12:20 INFO: starting workers\n"
        "2023/10/26 12:12:20 Traceback (most recent call last):\n"
        '2023/10/26 12:12:20 File "/app/main.py", line 3, in <module>\n'
        "2023/10/26 12:12:20 main()\n"
        "2023/10/26 12:12:20 RuntimeError: no shard\n"
    )
    assert _judged(tmp_path, log)[FATAL][0] == "fail"


def test_a_program_saying_an_option_will_be_ignored_is_no_dismissal(tmp_path: Path) -> None:
    # llama.cpp common/arg.cpp fprintf(stderr, "warning: no usable GPU found, --gpu-layers
    # option will be ignored\n"): "will be ignored" read as a person's dismissal hid it.
    log = "warning: no usable GPU found, --gpu-layers option will be ignored\n"
    got = _judged(tmp_path, log)
    assert [s for s in got if s.startswith("fallback.llamacpp.")], got
    # A person's dismissal still is one.
    prose = "That warning can be safely ignored: " + log
    assert not [s for s in _judged(tmp_path, prose) if s.startswith("fallback.")]


def test_a_line_of_a_thousand_term_hits_is_examined_once_per_signature(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    # A signature counts once a line; a 10 MB line of vocabulary hits was 4.5x the same bytes
    # in lines (benchmarks/scan_logs_long_line.py) because every hit's window was searched for
    # prose. Counted, not timed: the prose test runs a bounded number of times.
    from blackwell_doctor.collect.logs import context

    calls = [0]
    real = context.is_prose

    def counting(text: str, anchor: str, *, lead_words: bool = True) -> bool:
        calls[0] += 1
        return real(text, anchor, lead_words=lead_words)

    monkeypatch.setattr(context, "is_prose", counting)
    scanner = SourceScanner(load_catalogue(), "t")
    scanner.feed(b"glued cudaErrorIllegalAddress " * 1000 + b"\n")
    assert calls[0] <= 5, calls[0]  # the scan (the log-end rule reads a bounded tail after it)
    found = {f.signature: f.count for f in scanner.finish()}
    assert found[FATAL] == 1


# ------------------------------------------------------------------ the citation audit
# Lines rendered exactly as the format strings re-read in the citation audit print them
# (docs/scan-logs.md, "Where the grammars come from"); each failed before its regex was
# corrected to the source.

AUDITED = [
    # tracing-subscriber Format<Full> .without_time(): FmtLevel " WARN" (padded to 5, so the
    # line starts with a space), span "name{fields}:", one space, target, ": "
    (
        " WARN worker{id=3}: my_app::supervisor: child exited with code 1",
        "tracing-no-time",
        "fatal",
    ),
    (
        "ERROR worker{id=3}: my_app::supervisor: could not open the shard",
        "tracing-no-time",
        "error",
    ),
    # torch/_logging TorchLogsFormatter: f"{rankprefix}{shortlevel}{asctime}.{usec:06d} {pid}
    # {path}:{lineno}]{traceid}", shortlevel "C" for CRITICAL
    (
        "[rank0]:C1128 12:00:00.123456 911603 torch/_dynamo/convert_frame.py:539] [0/0]"
        " could not compile the graph",
        "glog",
        "fatal",
    ),
    # TensorRT-LLM logger.h getPrefix fmtstr("%s %s %s ", getCurrentTimestamp(), "[TRT-LLM]",
    # "[E]"), the timestamp "%m-%d-%Y %H:%M:%S" + ".uuuuuu"
    ("11-28-2026 10:00:00.123456 [TRT-LLM] [E] could not open the shard", "tensorrt", "error"),
    # ... and its newest "[TRT-LLM] [E] [%-8s] [RANK %d] " (module, rank)
    ("[TRT-LLM] [E] [runtime ] [RANK 3] Assertion failed: x (a.cpp:1)", "tensorrt", "fatal"),
    # tensorrt_llm/logger.py "[%(asctime)s] %(message)s" (datefmt "%m/%d/%Y-%H:%M:%S") with
    # msg f"[TRT-LLM] [MPI_Rank {rank}] {severity} " under MPI, INTERNAL_ERROR "[F]"
    (
        "[11/28/2026-10:00:00] [TRT-LLM] [MPI_Rank 1] [E] could not open the shard",
        "tensorrt",
        "error",
    ),
    ("[11/28/2026-10:00:00] [TRT-LLM] [F] could not open the shard", "tensorrt", "fatal"),
    # LMDeploy TurboMind core/logger.cc Prefix "[TM][{level}][{MMDD.HH:MM:SS.uuuuuu}]" +
    # "[{file}:{line}] "; utils/logger.h (before v0.14) "[TM][" + level + "] "
    (
        "[TM][FATAL][1128.10:00:00.123456][allocator.cc:88] could not open the shard",
        "turbomind",
        "fatal",
    ),
    ("[TM][ERROR] could not open the shard", "turbomind", "error"),
    # lmdeploy/utils.py _FORMAT with LMDEPLOY_LOG_PID=1: "... - %(levelname)s - [pid=%(process)d
    # ppid=%(ppid)d] - %(filename)s:%(lineno)d - %(message)s"
    (
        "2026-08-21 22:31:54,123 - lmdeploy - ERROR - [pid=12 ppid=1] - engine.py:12 -"
        " RuntimeError: could not open the shard",
        "python-asctime-dash",
        "fatal",
    ),
    # Rust >= 1.91 std panicking.rs default_hook: "thread '{name}' ({tid}) panicked at ..."
    ("thread 'main' (12345) panicked at src/main.rs:2:5:", None, "fatal"),
]


@pytest.mark.parametrize(("line", "grammar", "cls"), AUDITED)
def test_a_line_as_the_audited_source_prints_it_is_read(
    line: str, grammar: str | None, cls: str
) -> None:
    record = records.parse(line)
    assert (record.grammar.name if record.grammar else None) == grammar, line
    assert records.classify(line) == cls, line


@pytest.mark.parametrize(("line", "grammar", "cls"), AUDITED)
def test_the_scanner_finds_each_audited_line_by_its_literals(
    line: str, grammar: str | None, cls: str
) -> None:
    assert _scan_lines([line, "INFO 06-01 21:52:30 [x.py:1] later"]) & {FATAL, ERROR}, line


def test_nccl_warn_lines_of_each_release_are_warn_records() -> None:
    # NCCL src/debug.cc ncclDebugLog: "\n%s:%d:%d [%d] %s:%d NCCL WARN " (v2.7-v2.25); from
    # v2.26.2-1 a WARN line leads with NCCL_DEBUG_TIMESTAMP_FORMAT's default "[%F %T] "; from
    # v2.30.7-1 "[%d] %s:%d (%s) NCCL WARN " names the function
    for line in (
        "node1:123:456 [0] init.cc:1234 NCCL WARN Cuda failure 'out of memory'",
        "[2026-06-11 11:44:19] node1:123:456 [0] init.cc:1234 NCCL WARN Cuda failure",
        "[2026-06-11 11:44:19] node1:123:456 [0] init.cc:1234 (ncclCommInitRank) NCCL WARN x",
    ):
        assert records.classify(line) == "warn-record", line
    assert records.classify("node1:123:456 [0] NCCL INFO Bootstrap: Using eth0") is None
