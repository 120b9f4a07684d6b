"""Log-record grammars: which logger wrote a line, at which level, where its message starts,
and whether the message has the shape of a process dying (issue 33, items 2 and 3).

A line is read from its start (after colour codes are stripped) in three layers:

1. *transports* (:data:`TRANSPORTS`), any number, that carry a line without being a record:
   docker compose's ``service  | ``, ``kubectl logs --prefix``'s ``[pod/name/container] ``,
   vLLM's per-process ``(EngineCore pid=N) ``, torch's ``[rankN]:``;
2. *envelopes* (:data:`ENVELOPES`), at most two, timestamps that say when but not how bad
   (docker ``--timestamps``, journald short-iso, syslog, dmesg, SGLang's ``[ts]``), and
   *grammars* (:data:`GRAMMARS`): the prefix a logger prints with its level;
3. the message: a *fatal form* at its start (:data:`FATAL_FORMS`: an exception line, a
   signal, ``terminate called ...``), or after a prefix a *fatal phrase* anywhere in it
   (:data:`FATAL_PHRASES`: ``exited with code 1``, ``with signal 4``).

Each grammar is derived from the format string its logger prints, cited beside it; every
regex is RE2-compatible (no look-around, no back-reference). :func:`classify` gives a line's
class for the generic detector and the log-end rule: ``fatal`` (a fatal level or a fatal
form), ``error`` (an error-level record, or a process's last words ``Error: <Name>``),
``warn-record`` (NCCL's ``WARN``: an error candidate that is no error line at a log's end)
or None. :data:`LITERALS` are the texts one of which every error-level record of these
grammars holds: the prefilter's literals (the catalogue numbers them, owner ``record``).
Kept free of imports from collect (rule data: the catalogue numbers the literals, the
context rules use the table) so neither side imports the other.
"""

from __future__ import annotations

import functools
import re

from blackwell_doctor.facts import regexcache


class Grammar:
    """One logger's record prefix: ``pattern`` matches it at the message's position with the
    level in group ``l`` (absent: a record with no level); ``search``: the message follows in
    fields (logfmt, JSON, NCCL's function names), so fatal forms are searched in the rest,
    not only at its start; ``starts``: the prefix starts a record of its own for the context
    rules (:func:`prefix_at`); TensorRT-LLM's, NCCL's and bracketed tags are also what a
    runtime prints inside the record above (the autotuner's assertion under its Skipping
    line), so they do not. (A plain class: dataclasses cost start-up, docs/performance.md.)"""

    __slots__ = ("name", "pattern", "search", "source", "starts")

    def __init__(
        self, name: str, pattern: str, source: str, *, search: bool = False, starts: bool = True
    ) -> None:
        self.name = name
        self.pattern = pattern
        self.source = source
        self.search = search
        self.starts = starts


# Level words as loggers print them, upper or lower case (a partial (?i) is no RE2).
_WORDS = (
    "TRACE|DEBUG|INFO|NOTICE|WARNING|WARN|ERROR|ERR|CRITICAL|CRIT|FATAL|PANIC|DPANIC|EMERG|ALERT"
)
LEVEL_WORD = f"(?:{_WORDS}|{_WORDS.lower()}|Trace|Debug|Info|Warning|Warn|Error|Critical|Fatal)"
_PY_LEVEL = "(?:CRITICAL|FATAL|ERROR|WARNING|WARN|INFO|DEBUG|TRACE|NOTSET)"
_TS = r"\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d(?:[.,]\d+)?(?:Z|[+-]\d\d:?\d\d)?"

TRANSPORTS = (
    # docker compose cmd/formatter/logs.go: fmt.Sprintf("%-"+width+"s | ", name), "vllm-1  | "
    r"[\w.-]+ +\| ",
    # kubectl logs --prefix (kubectl/pkg/cmd/logs/logs.go addPrefixIfNeeded):
    # fmt.Sprintf("[pod/%s/%s] ", ref.Name, containerName)
    r"\[pod/[^\]/\s]+/[^\]\s]+\] ",
    # vLLM vllm/utils/system_utils.py _add_prefix (vllm/utils/__init__.py before):
    # f"({worker_name} pid={pid}) ", "(EngineCore_DP0 pid=N) "
    r"\([\w.-]+(?:,? \w+=[\w.]+)+\) ?",
    # torch: c10/util/Logging.cpp MessageLogger "[rank" << GLOBAL_RANK << "]:" before its
    # record; torch/_logging/_internal.py TorchLogsFormatter rankprefix f"[rank{rank}]:";
    # torch/distributed/distributed_c10d.py init_process_group's _distributed_excepthook
    # f"{excepthook_prefix}: {s}" before each traceback line ("[rank0]: Traceback ...")
    r"\[rank\d+\]: ?",
    # torch/distributed/elastic/multiprocessing/tail_log.py TailLog (tee/redirects):
    # header f"[{self._name}{local_rank}]:" before each line of a local rank's output
    # ("[default0]:"; "[1]:" with no role), and torchx/cli/cmd_log.py's
    # f"{role_name}/{replica_id} " before it (`torchx log`)
    r"(?:[\w-]+/\d+ )?\[[A-Za-z_]*\d+\]:",
    # a process id before torch's rank prefix ("[pid] [rankN]:"), as launchers that tag each
    # child's lines with its pid print it
    r"\[\d+\] \[rank\d+\]: ?",
)

ENVELOPES = (
    # docker --timestamps (RFC 3339 nano), journald short-iso "<ts> host ident[pid]: "
    r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\S*\s(?:\S+ \S+?:\s)?",
    # journald short / RFC 3164 syslog: "Nov 28 12:00:00 host ident[pid]: "
    r"[A-Z][a-z]{2} [ \d]\d \d\d:\d\d:\d\d \S+ \S+?:\s",
    # SGLang python/sglang/srt/utils/common.py (utils.py before) configure_logger:
    # format=f"[%(asctime)s{prefix}] %(message)s", datefmt "%Y-%m-%d %H:%M:%S"
    r"\[\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d[^\]]*\]\s?",
    r"\[\s*\d+\.\d+\]\s",  # dmesg: "[   12.345678] "
    # Go's standard logger, log.LstdFlags (src/log/log.go formatHeader): "2009/01/23 01:23:23 "
    # (".123123" with Lmicroseconds); also what a job runner that wraps a child's lines in
    # Go's log puts before each of them
    r"\d{4}/\d\d/\d\d \d\d:\d\d:\d\d(?:\.\d+)? ",
)

GRAMMARS = (
    Grammar(
        "vllm",
        rf"(?P<l>{_PY_LEVEL})\s+\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? ?"
        r"(?:\[[^\]]*\]|[\w.-]+:\d+\])? ?",
        'vllm/logger.py _FORMAT "%(levelname)s %(asctime)s [%(fileinfo)s:%(lineno)d] '
        '%(message)s", _DATE_FORMAT "%m-%d %H:%M:%S" (older: "%(filename)s:%(lineno)d]")',
    ),
    Grammar(
        "python-asctime-dash",
        rf"\d{{4}}-\d\d-\d\d[ T]\d\d:\d\d:\d\d\S*\s+-\s+(?:[\w.]+\s+-\s+)?(?P<l>{_PY_LEVEL})\s+-\s+"
        r"(?:\[pid=\d+ ppid=\d+\]\s+-\s+)?(?:[\w.]+:\d+\s+-\s+)?",
        'Python Logging HOWTO / cookbook "%(asctime)s - %(name)s - %(levelname)s - %(message)s" '
        "(asctime: Formatter.default_time_format '%Y-%m-%d %H:%M:%S' + ',%03d'); LMDeploy "
        'lmdeploy/utils.py _FORMAT "%(asctime)s - %(name)s - %(levelname)s - %(filename)s:'
        '%(lineno)d - %(message)s" (LMDEPLOY_LOG_PID=1: "... - %(levelname)s - [pid=%(process)d '
        'ppid=%(ppid)d] - %(filename)s:%(lineno)d - %(message)s")',
    ),
    Grammar(
        "env-logger",
        rf"\[{_TS}\s+(?P<l>{LEVEL_WORD})\s+[\w:.-]+\]\s?",
        "Rust env_logger src/fmt/mod.rs ConfigurableFormatWriter::write (DefaultFormat up to "
        '0.11.5): "[" then timestamp, {level:<5} and the target (the module path unless the record '
        'names another), joined by spaces, then "] " and the message',
    ),
    Grammar(
        "timestamp-level",
        rf"\[?{_TS}\]?\s+\[?(?P<l>{LEVEL_WORD})\]?(?::\s*|\s+|$)",
        'Rust tracing-subscriber fmt/format/mod.rs Format<Full>: "{timestamp} {level} {spans}'
        '{target}: {fields}", level FmtLevel "TRACE" "DEBUG" " INFO" " WARN" "ERROR" (RFC 3339 '
        "time, ANSI colour codes stripped first); zap zapcore/console_encoder.go (tab-separated) "
        "with config.go NewDevelopmentEncoderConfig (ISO8601TimeEncoder "
        '"2006-01-02T15:04:05.000Z0700", CapitalLevelEncoder): "<time>\\t<LEVEL>\\t<logger>\\t'
        '<caller>\\t<msg>"; Python "%(asctime)s %(levelname)s ..." and "[%(asctime)s] '
        '%(levelname)s ..."',
    ),
    Grammar(
        "python-basic",
        rf"(?P<l>{_PY_LEVEL}):",
        'Python Lib/logging/__init__.py BASIC_FORMAT "%(levelname)s:%(name)s:%(message)s" '
        "(also its '{' and '$' styles); uvicorn/logging.py ColourizedFormatter "
        '"%(levelprefix)s %(message)s", levelprefix "LEVEL:" padded to 9 columns',
    ),
    Grammar(
        "python-padded",
        rf"(?P<l>{_PY_LEVEL}) +[\w.]+:[\w.-]+:\d+ ",
        "pytest src/_pytest/logging.py DEFAULT_LOG_FORMAT (LoggingPlugin's default log_format) "
        '"%(levelname)-8s %(name)s:%(filename)s:%(lineno)d %(message)s"',
    ),
    Grammar(
        "tracing-no-time",
        r" ?(?P<l>ERROR|WARN|INFO|DEBUG|TRACE) +(?:(?:[\w.-]+(?:\{[^}]*\})?:)+ )?"
        r"(?:[\w-]+::)*[\w-]+: ",
        "Rust tracing-subscriber fmt/format/mod.rs Format<Full> with .without_time(): "
        '"{level} {spans}{target}: {fields}", level FmtLevel " INFO"/" WARN" padded to 5 (so '
        'the line starts with a space), each span "name{field=value}:" and one space after the '
        "last (text-generation-inference's launcher prints .compact() with the time: "
        "timestamp-level above)",
    ),
    Grammar(
        "glog",
        r"(?P<l>[IWEFCV])(?:\d{4})?\d{4} \d\d:\d\d:\d\d\.\d+ +\d+ [^\s:\]]+:\d+\] ?"
        r"(?:\[[^\]]*\] )?",
        "glog src/logging.cc LogMessage::Init / absl log/internal/log_format.cc "
        'FormatBoundedFields: "<I|W|E|F><yyyy?><mmdd> <hh:mm:ss.uuuuuu> <tid> <file>:<line>] "; '
        'torch/_logging/_internal.py TorchLogsFormatter: f"{rankprefix}{shortlevel}{asctime}.'
        '{usec:06d} {pid} {path}:{lineno}]{traceid}", shortlevel V I W E C for DEBUG INFO '
        'WARNING ERROR CRITICAL, asctime "%m%d %H:%M:%S", traceid " [0/0]"',
    ),
    Grammar(
        "c10-logging",
        r"\[(?P<l>[FEWIV])(?:\d{3,4} \d\d:\d\d:\d\d\.\d+)? [^\s:\]]+:\d+\] ?",
        'PyTorch c10/util/logging_is_not_google_glog.h CAFFE2_SEVERITY_PREFIX "FEWIV" and '
        'c10/util/Logging.cpp MessageLogger: ("[rank" << GLOBAL_RANK << "]:", a transport) "[" '
        '<< prefix << (tm_mon + 1) * 100 + tm_mday (unpadded: 3 or 4 digits) << " " << '
        'hh:mm:ss << "." << setw(9) ns << " " << StripBasename(file) << ":" << line << "] " '
        '("[E321 02:07:08.408271257 ProcessGroupNCCL.cpp:607] "); older releases "[" << prefix '
        '<< " " << file << ":" << line << "] " ("[W socket.cpp:558] ")',
    ),
    Grammar(
        "onnxruntime-trt",
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[[VIWEF]:onnxruntime:[^\]]*\] "
        r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d +(?P<l>BUG|ERROR|WARNING|INFO|VERBOSE|UNKNOWN)\] ",
        "ONNX Runtime's TensorRT EP onnxruntime/core/providers/tensorrt/"
        'tensorrt_execution_provider.h TensorrtLogger::log: LOGS_DEFAULT(...) << "[" << '
        'strftime("%Y-%m-%d %H:%M:%S") << " " << sevstr << "] " << msg, sevstr "    BUG" '
        '(kINTERNAL_ERROR), "  ERROR", "WARNING", "   INFO", else "UNKNOWN" (kVERBOSE): '
        "TensorRT's own level inside ONNX Runtime's record, logged at E up to kERROR and W "
        "above (older releases log all of them at W); VERBOSE is never printed",
    ),
    Grammar(
        "onnxruntime",
        r"\d{4}-\d\d-\d\d \d\d:\d\d:\d\d\.\d+ \[(?P<l>[VIWEF]):onnxruntime:[^\]]*\] ",
        "ONNX Runtime onnxruntime/core/common/logging/sinks/ostream_sink.cc OStreamSink::SendImpl: "
        'timestamp << " [" << severity letter (V, I, W, E, F) << ":" << category << ":" << '
        'logger_id << ", " << location (file:line function) << "] " << message (clog_sink.h '
        "and cerr_sink.h are OStreamSinks)",
    ),
    Grammar(
        "stable-diffusion-cpp",
        r"\[(?P<l>DEBUG|INFO|WARN|ERROR) ?\] [\w.-]+:\d+ *- ",
        'stable-diffusion.cpp src/core/util.cpp log_printf: snprintf("%s:%-4d - ", '
        "sd_basename(file), line) before the message; its CLI examples/common/log.cpp log_print "
        'puts fprintf("[%-5s] ", level_str) before that, level_str "DEBUG" "INFO" "WARN" "ERROR"',
    ),
    Grammar(
        "tensorrt",
        r"(?:\d\d-\d\d-\d{4} \d\d:\d\d:\d\d\.\d+ )?(?:\[[^\]]+\] ?)*"
        r"\[(?:TensorRT-LLM|TRT-LLM|TRT)\] ?(?:\[(?:RANK|MPI_Rank) \d+\] ?)?"
        r"(?:\[(?P<l>[A-Z]+)\] ?)?(?:\[[\w.-]+ *\] )?(?:\[RANK \d+\] ?)?",
        "TensorRT-LLM cpp/include/tensorrt_llm/common/logger.h Logger::getPrefix, as it changed: "
        '"[TensorRT-LLM][%s] "; fmtstr("%s %s %s ", getCurrentTimestamp() (timestampUtils.cpp '
        '"%m-%d-%Y %H:%M:%S" + ".uuuuuu"), "[TRT-LLM]", "[E]"); now "[TRT-LLM] [E] [module  ] '
        '[RANK N] "; tensorrt_llm/logger.py "[%(asctime)s] [TRT-LLM] [E] " ("[TRT-LLM] [MPI_Rank '
        'N] [E] " with more than one MPI rank; "[TRT-LLM] [RANK N] [I] " in the logs of later '
        'releases); TensorRT ILogger samples "[TRT] [E] "',
        starts=False,
    ),
    Grammar(
        "turbomind",
        r"\[TM\]\[(?P<l>TRACE|DEBUG|INFO|WARNING|WARN|ERROR|FATAL)\](?:\[[^\]]*\])* ?",
        "LMDeploy TurboMind src/turbomind/core/logger.cc Logger::Prefix (v0.14+): "
        'fmt::format("[TM][{}][{}]", LevelName(level), Timestamp()) + "[{file}:{line}]" + " ", '
        'LevelName TRACE DEBUG INFO WARN ERROR FATAL, Timestamp "MMDD.HH:MM:SS.uuuuuu"; before it '
        'src/turbomind/utils/logger.h getPrefix "[TM][" + level + "] " (+ "[rank] "), levels '
        'TRACE DEBUG INFO WARNING ERROR; src/turbomind/core/check.cc TM_CHECK "[TM][FATAL] "',
    ),
    Grammar(
        "logfmt",
        r'(?:[\w.@-]+=(?:"(?:[^"\\]|\\.)*"|[^\s"]*)\s+)*?(?:level|lvl|severity)="?(?P<l>[A-Za-z]+)"?(?:\s|$)',
        'Go log/slog TextHandler "time=... level=ERROR source=... msg=..."; logrus '
        'text_formatter.go (no TTY) "time=\\"...\\" level=error msg=\\"...\\""; go-kit log '
        '"level=error"; log15 "lvl=eror"',
        search=True,
    ),
    Grammar(
        "zerolog-console",
        r"(?:\d{1,2}:\d\d[AP]M|\d{4}-\d\d-\d\d[T ]\d\d:\d\d:\d\d\S*) "
        r"(?P<l>TRC|DBG|INF|WRN|ERR|FTL|PNC) ",
        'zerolog console.go ConsoleWriter: "<time> <LVL> <message>", consoleDefaultTimeFormat '
        'time.Kitchen "3:04PM", consoleDefaultFormatLevel from globals.go FormattedLevels "TRC DBG '
        "INF WRN ERR FTL PNC\" (LocalAI and other Go servers' console logs)",
    ),
    Grammar(
        "logrus-tty",
        r"(?P<l>PANI|FATA|ERRO|WARN|INFO|DEBU|TRAC)\[[^\]]+\] ?",
        'logrus text_formatter.go printColored (TTY): "%s[%04d]%s %-44s " (levelText, seconds, '
        'callerText, message; "%s[%s]%s %-44s " with FullTimestamp), levelText levelPrefix: '
        "strings.ToUpper(level.String()) cut to 4 characters unless DisableLevelTruncation",
    ),
    Grammar(
        "json",
        r'\{.*?"(?:level|lvl|severity|levelname|level_name|loglevel|log\.level|@l|PRIORITY|'
        r'priority)"\s*:\s*"?(?P<l>[A-Za-z]+|\d)"?',
        'zap JSON encoder "level":"error" (zapcore/json_encoder.go, LowercaseLevelEncoder); '
        'logrus JSONFormatter "level":"error"; GCP structured logging "severity":"ERROR"; '
        'python-json-logger "levelname"; ECS "log.level"; Serilog "@l"; journalctl -o json '
        '"PRIORITY":"3"',
        search=True,
    ),
    Grammar(
        "nccl",
        r"\S+:\d+:\d+ \[\d+\] (?:\S+:\d+ (?:\([^)]*\) )?)?NCCL (?P<l>[A-Z]+) ",
        "NCCL src/debug.cc ncclDebugLog (src/include/debug.h's WARN and INFO macros pass "
        '__FILE__, __LINE__): WARN "\\n%s:%d:%d [%d] %s:%d NCCL WARN " (host:pid:tid, device, '
        'file:line), INFO "%s:%d:%d [%d] NCCL INFO "; from v2.26.2-1 a WARN line starts with '
        'NCCL_DEBUG_TIMESTAMP_FORMAT\'s default "[%F %T] " (an envelope); from v2.30.7-1 "[%d] '
        '%s:%d (%s) NCCL WARN " with the function',
        search=True,
        starts=False,
    ),
    Grammar(
        "bracket-tag",
        r"\[(?P<l>ERR!?|ERROR|FATAL|CRITICAL|WARN|WARNING|INFO|DEBUG|TRACE)\] ?",
        'plain C/C++ programs and benchmarks: "[INFO] ...", "[ERROR] ...", "[ERR!] ..." '
        "(CUDA_Bench, tests/fixtures/logs-heldout; not npm, whose npmlog prefix is the "
        'unbracketed "npm ERR! ")',
        starts=False,
    ),
    Grammar(
        "syslog-pri",
        r"<(?P<l>\d{1,3})>",
        'RFC 5424/3164 PRI <facility*8+severity>; sd-daemon.h SD_ERR "<3>" on a service\'s '
        'stderr; printk KERN_ERR "<3>" (dmesg -r); journal entries read by scan-logs carry '
        "<PRIORITY> when it is err or worse (collect/logs/sources.py)",
    ),
)

# Level token (as the grammar captured it, upper-cased) -> class.
_FATAL_LEVELS = frozenset(
    {"FATAL", "FATA", "F", "FTL", "PNC", "CRITICAL", "CRIT", "PANIC", "PANI", "DPANIC", "EMERG"}
    | {"ALERT", "C"}
)
# "C": torch TorchLogsFormatter's CRITICAL (glog grammar).
# "BUG": TensorRT's kINTERNAL_ERROR as ONNX Runtime's TensorRT EP prints it (grammar above).
_ERROR_LEVELS = frozenset({"ERROR", "ERRO", "ERR", "ERR!", "EROR", "E", "BUG"})

# The shapes a process's death takes at the start of a message (after the prefixes),
# as libc, the kernel, the shells, Python, C++, Rust, Go and the GPU libraries print them.
FATAL_FORMS = (
    # Python Lib/traceback.py TracebackException.format_exception_only ->
    # _format_final_exc_line: f"{etype}: {valuestr}", etype "module.ExcType" (outside builtins)
    r"(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception)(?::\s|:?$)",
    # the same line indented, with its message: a logging handler that renders a record in a
    # level column and its traceback under it (rich/logging.py RichHandler) indents every line
    # (rich.traceback itself prints the exception line at column 0: the form above)
    r"\s+(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception): \S",
    r"(?:[\w:]+::)?\w*Exception: ",  # C++ "c10::Exception: ", "tensorrt_llm::...Exception: "
    r"Traceback \(most recent call last\)",
    # Python/pylifecycle.c fatal_error and Modules/faulthandler.c: PUTS(fd, "Fatal Python error: ")
    r"Fatal Python error",
    # TensorRT-LLM cpp/include/tensorrt_llm/common/assert.h throwRuntimeError "[TensorRT-LLM]
    # [ERROR] Assertion failed: %s"; ggml.h GGML_ASSERT -> ggml_abort "GGML_ASSERT(%s) failed"
    r"Assertion failed|GGML_ASSERT",
    # libstdc++ vterminate.cc: "terminate called after throwing an instance of '%s'\n"
    # "  what():  %s" (and "terminate called recursively" / "without an active exception")
    r"terminate called (?:after throwing|recursively|without an active exception)",
    r"\s*what\(\):\s",
    # bash/zsh strsignal() of the signal that ended a child: "Segmentation fault (core dumped)",
    # "Aborted", "Killed", "Bus error", "Illegal instruction", "Floating point exception"
    r"Segmentation fault",
    # (at a line's end, or padded before the command in bash's job report)
    r"(?:Aborted|Killed|Bus error|Illegal instruction|Floating point exception"
    r"|Trace/breakpoint trap)(?: \(core dumped\))?(?:\s*$|\s{2,}\S)",
    r"\*\*\* SIG(?:SEGV|ABRT|BUS|FPE|ILL)",  # absl/glog failure signal handler "*** SIGSEGV"
    r"panic: |fatal error: ",  # Go runtime/panic.go printpanics "panic: ", throw "fatal error: "
    # Rust library/std/src/panicking.rs default_hook: "thread '{name}' panicked at {location}:"
    # ("thread '{name}' ({tid}) panicked at" from Rust 1.91, rust-lang/rust#115746)
    r"thread '[^']*' (?:\(\d+\) )?panicked at ",
    r"CUDA error(?: at|:| \d)|CUDA_ERROR_\w+|NCCL error",
    # kubectl exec/attach: client-go tools/remotecommand/v4.go errorDecoderV4.decode
    # fmt.Errorf("command terminated with exit code %d", rc): "... with exit code 137"
    r"command terminated with exit code [1-9]",
    # A program that cannot load NVML sees no GPU: nvidia-smi "Failed to initialize NVML:
    # Driver/library version mismatch"; NVIDIA/k8s-device-plugin's resource manager
    # klog.Errorf("Failed to initialize NVML: %v.", ret); go-nvml callers (container
    # toolkit, CDI, DRA driver) fmt.Errorf("failed to initialize NVML: %v", ret)
    r"[Ff]ailed to initialize NVML: ",
    # ggml ggml/src/ggml.c ggml_abort: snprintf(message, "%s:%d: ", file, line), the message
    # after it, fprintf(stderr, "%s\n", message), abort() (older releases fprintf the same);
    # ggml-cuda.cu ggml_cuda_error ends in GGML_ABORT(GGML_CUDA_NAME " error"), "CUDA error"
    r"\S+:\d+: (?:CUDA error$|GGML_ASSERT)",
    # libnvidia-container src/cli: warnx("<stage> error: %s", ...) then exit: the container
    # never starts ("nvidia-container-cli: requirement error: unsatisfied condition:
    # cuda>=12.6", "initialization error: nvml error: driver not loaded", "mount error: ...")
    r"nvidia-container-cli: (?:[a-z]+ )?error: ",
    # docker CLI (moby client): "Error response from daemon: " before the daemon's error; where
    # that is runc's (libcontainer) "OCI runtime create failed" or containerd's "failed to
    # create (shim) task", the container was never started
    r"Error response from daemon: (?:.*\bOCI runtime \w+ failed|failed to create (?:shim )?task)",
    # Triton Inference Server src/main.cc FAIL_IF_ERR(TRITONSERVER_ServerNew(...), "creating
    # server") (src/common.h: std::cerr << "error: " << MSG << ": " << code << " - " << message,
    # exit(1)): "error: creating server: Internal - failed to load all models"
    r"error: creating server: ",
    # Triton core's model status table (src/server.cc InferenceServer::
    # PrintBackendAndModelSummary, triton::common::TablePrinter): "| name
    # | version | status |", status ModelReadyStateString + ": " + reason; a load failure's
    # reason is a Status::AsString "<Code>: <msg>" ("UNAVAILABLE: Internal: unable to create
    # TensorRT engine"): the model cannot serve. (An unloaded model: "UNAVAILABLE: unloaded".)
    r"\|[^|]+\|[^|]+\| UNAVAILABLE: [A-Z]",
    # ray/scripts/scripts.py `ray start --block`: cli_logger.error("Some Ray subprcesses exited
    # unexpectedly:") (so spelt up to Ray 2.x, "subprocesses" later), each dead process,
    # cli_logger.error("Remaining processes will be killed."), then sys.exit(1)
    r"Some Ray subpro?cesses exited unexpectedly|Remaining processes will be killed\.",
    # Bumblebee src/optirun.c: bb_log(LOG_ERR, "Aborting because fallback start is
    # disabled.\n") where the secondary GPU could not be used, then the program exits
    r"Aborting because fallback start is disabled",
    # gpu-burn gpu_burn-drv.cpp: a child that cannot set its GPU up prints "Couldn't init a GPU
    # test: %s" and exits; that GPU never runs the test (the summary's OK reads 0 errors of 0)
    r"Couldn't init a GPU test: ",
)
# After a record prefix (any level) or a weak prefix, anywhere in the message.
FATAL_PHRASES = (
    r"\b(?:core dumped|died unexpectedly|exited unexpectedly|terminated unexpectedly)\b",
    r"\billegal memory access\b",
    r"\bexited with (?:exit )?code [1-9]|\bhas terminated: exit status [1-9]",
    # A model that does not load: llama.cpp src/llama.cpp "error loading model: ", its server
    # "failed to load model"; LocalAI pkg/model/loader.go fmt.Errorf("could not load model:
    # %w", ...) (and "could not load model - all backends returned error: %s" once every
    # backend failed; each failure is logged at INF: "[%s] Fails: %s"), go-llama.cpp's
    # fmt.Errorf("failed loading model"). Survived where a liveness line follows (LocalAI's
    # "[%s] Loads OK": runtime.engine_ready).
    r"\berror loading model\b|\bfailed to load model\b|\bcould not load model\b"
    r"|\bfailed loading model\b",
    # A child that a signal ended: "was signaled to shutdown with signal 4" (TGI launcher),
    # "killed by signal 9", "terminated by signal SIGSEGV", "received signal 11"
    r"\b(?:with|by|received|got|on) signal:? (?:4|6|7|8|9|11|SIG(?:ILL|ABRT|BUS|FPE|KILL|SEGV))\b",
    r"\bexit (?:code|status):? 1(?:3[4-9])\b",  # 128 + SIGABRT..SIGSEGV: 134, 137, 139
    r"\bpanicked at\b",  # Rust, inside a record
    # PyTorch torch/csrc/distributed/c10d/ProcessGroupNCCL.cpp: the watchdog's "Watchdog caught
    # collective operation timeout: WorkNCCL(...) ran for N milliseconds before timing out.";
    # with async error handling (the default) it then takes the process down ("To avoid
    # data inconsistency, we are taking the entire process down.")
    r"\bWatchdog caught collective operation timeout\b",
    # PyTorch torch/csrc/distributed/c10d/socket.cpp: the TCPStore client gives up,
    # "The client socket has timed out after {} while trying to connect to ({}, {})."
    # (raised as DistNetworkError / DistStoreError)
    r"\bThe client socket has timed out after\b",
)
# Prefixes that are no logger's but let a fatal form or phrase count: llama.cpp's
# "llama_model_load: ", a progress line's dots, bash "script.sh: line 3:  1234 Killed".
WEAK_PREFIXES = (r"\.+", r"[a-z_]+: ", r"\S+: line \d+: +\d+ ")
# docker compose's own line about a service that stopped: "vllm-1 exited with code 1".
_COMPOSE_EXIT = r"[\w.-]+ exited with code [1-9]"
# Rust's main returning Err (std Termination for Result: "Error: {err:?}"), a CLI's last
# words: "Error: ShardCannotStart". An error line, fail where the log ends in it.
_LAST_WORDS = r"Error: \S"

# What every error-level or fatal record of the grammars above holds (the prefilter's
# literals, beside the generic signatures' own in checks/log_signatures.toml).
LITERALS: tuple[str, ...] = (
    "ERROR", "ERRO[", "FATA[", "PANI[", "CRITICAL", "FATAL", "[ERR", "[E]",
    "level=err", "level=ERR", "level=fatal", "level=FATAL", "level=panic", "level=PANIC",
    "level=crit", "level=CRIT", "level=\"err", "level=\"fatal", "lvl=eror", "lvl=crit",
    '"error"', '"fatal"', '"Fatal"', '"panic"', '"dpanic"', '"critical"', '"Critical"', '"crit"',
    '"err"', '"emerg"', '"alert"', "Error",
    '"PRIORITY":"0"', '"PRIORITY":"1"', '"PRIORITY":"2"', '"PRIORITY":"3"',
    # glog/absl E and F records: the severity letter and the month (or the year, glog 0.7)
    "E0", "E1", "E2", "F0", "F1", "F2",
    # torch TorchLogsFormatter's CRITICAL records ("C1128 12:00:00.123456 ..."); TensorRT-LLM
    # logger.py's INTERNAL_ERROR "[F]"
    "C0", "C1", "C2", "[F]",
    "panicked at", "fatal error: ", "what():", "signal", "exit code", "Bus error",
    " ERR ", " FTL ", " PNC ", "ailed to initialize NVML: ",
    # c10 logging's E and F records: "[E socket.cpp:610] ", "[E321 02:07:08.4 file.cpp:1] "
    "[E ", "[F ", *(f"[{s}{m}" for s in "EF" for m in range(1, 10)), "| UNAVAILABLE: ",
    "Illegal instruction", "Floating point exception",
    *(f"<{facility * 8 + severity}>" for facility in range(24) for severity in range(4)),
)  # fmt: skip


def _join(parts: tuple[str, ...]) -> str:
    return "|".join(f"(?:{p})" for p in parts)


_TRANSPORT = regexcache.lazy(f"(?:{_join(TRANSPORTS)})+")
_ENVELOPE = regexcache.lazy(_join(ENVELOPES))
_FATAL_FORM = regexcache.lazy(_join(FATAL_FORMS))
_FATAL_PHRASE = regexcache.lazy(_join(FATAL_PHRASES))
_WEAK = regexcache.lazy(_join(WEAK_PREFIXES))
_COMPOSE = regexcache.lazy(_COMPOSE_EXIT)
_LAST = regexcache.lazy(_LAST_WORDS)


@functools.cache
def _grammar() -> re.Pattern[str]:
    """One alternation of every grammar, group ``g<i>`` around grammar i, its level ``l<i>``."""
    parts = [
        f"(?P<g{i}>{g.pattern.replace('(?P<l>', f'(?P<l{i}>')})" for i, g in enumerate(GRAMMARS)
    ]
    return regexcache.compile("|".join(parts))


class Record:
    """What the start of a line says: the grammar that matched (None: none), the level word
    it carries ("" where it has none), where the message starts, whether any prefix (a
    grammar's or an envelope) stood before it."""

    __slots__ = ("grammar", "level", "message_at", "prefixed", "transport_end")

    def __init__(
        self,
        grammar: Grammar | None,
        level: str,
        message_at: int,
        prefixed: bool,
        transport_end: int,
    ) -> None:
        self.grammar = grammar
        self.level = level
        self.message_at = message_at
        self.prefixed = prefixed
        self.transport_end = transport_end


def transport_end(text: str, at: int = 0) -> int:
    match = _TRANSPORT().match(text, at)
    return match.end() if match else at


def prefix_at(text: str, at: int) -> re.Match[str] | None:
    """A record-starting grammar's or an envelope's prefix at ``at`` (a line that starts a
    record of its own, not one that continues the record above)."""
    match = _grammar().match(text, at)
    if match is not None and GRAMMARS[int((match.lastgroup or "g0")[1:])].starts:
        return match
    return _ENVELOPE().match(text, at)


def parse(text: str) -> Record:
    """Transports, then at most two envelopes and one grammar, from the start of ``text``."""
    at = first = transport_end(text)
    prefixed = False
    for _ in range(3):
        match = _grammar().match(text, at)
        if match is not None and match.end() > at:
            i = int((match.lastgroup or "g0")[1:])
            level = match.group(f"l{i}") or ""
            return Record(GRAMMARS[i], level, match.end(), True, first)
        envelope = _ENVELOPE().match(text, at)
        if envelope is None or envelope.end() == at:
            break
        at, prefixed = envelope.end(), True
        at = transport_end(text, at)
    return Record(None, "", at, prefixed, first)


def level_class(record: Record) -> str | None:
    """``fatal``, ``error``, ``warn-record`` (NCCL WARN) or None for a record's level."""
    level = record.level.upper()
    if not level:
        return None
    if record.grammar is not None and record.grammar.name == "syslog-pri":
        severity = int(level) % 8
        return "fatal" if severity <= 2 else "error" if severity == 3 else None
    if record.grammar is not None and record.grammar.name == "nccl" and level == "WARN":
        return "warn-record"
    if level.isdigit():  # journald JSON "PRIORITY":"3"
        severity = int(level)
        return "fatal" if severity <= 2 else "error" if severity == 3 else None
    if level in _FATAL_LEVELS:
        return "fatal"
    if level in _ERROR_LEVELS:
        return "error"
    return None


def classify(text: str) -> str | None:
    """A cleaned line's class: ``fatal``, ``error``, ``warn-record`` or None (no error)."""
    record = parse(text)
    cls = level_class(record)
    if cls == "fatal":
        return "fatal"
    at = record.message_at
    searching = record.grammar is not None and record.grammar.search
    if _fatal_at(text, at, searching):
        return "fatal"
    if record.prefixed and _FATAL_PHRASE().search(text, at):
        return "fatal"
    if not record.prefixed:
        weak = _WEAK().match(text, at)
        if weak is not None and (
            _fatal_at(text, weak.end(), False) or _FATAL_PHRASE().search(text, weak.end())
        ):
            return "fatal"
        if _COMPOSE().match(text, record.transport_end):
            return "fatal"
        if cls is None and _LAST().match(text, at):
            return "error"
    return cls


def _fatal_at(text: str, at: int, searching: bool) -> bool:
    if searching:
        return _FATAL_FORM().search(text, at) is not None
    return _FATAL_FORM().match(text, at) is not None
