"""Context rules: the same line means different things in different places (REFERENCE §0.3).

What is seen is decided here, while reading (which record a line belongs to, which markers a
source shows, which autotuner markers each hit was seen with: :func:`hit_context`); what it
means, its severity or whether it is a finding at all, is decided by the rules
(``rules/logs.py``) from the facts, so a capture is judged again with the catalogue of
whichever tool reads it.

- ``autotuner-wrapped``: ``Failed to initialize cutlass TMA WS grouped gemm`` (and the other
  MoE tactic failures) inside FlashInfer/TRT-LLM's ``[Autotuner]: Skipping tactic ... due to
  failure while profiling: ...`` is one skipped tactic. It is counted once, under
  ``autotuner.tactic_skipped`` (info; warn from its ``warn_at`` count), and not as a failure.
  The scanner records every hit with the markers that say where it stood
  (:data:`ON_AUTOTUNER_LINE`, :data:`IN_AUTOTUNER_RECORD`); the rules drop a signature with
  this rule where one of them is present.
  "Inside" means on the Skipping line itself, or on a *continuation line* of that record: a
  line with no log-record prefix of its own (traceback text, an indented line, the exception
  message carried on), written through the same per-line transport (vLLM's ``(Worker_TP0
  pid=N)``, docker compose's ``service  |`` or ``kubectl logs --prefix``'s
  ``[pod/name/container]``), at most :data:`AUTOTUNER_CONTINUATION_LINES`
  lines after it, with only continuation lines between. A line with its own record prefix
  (the grammar table of :mod:`blackwell_doctor.ruledata.records`: vLLM, Python logging,
  glog, tracing, logfmt, JSON, syslog ``<N>``, ...; journald, docker or syslog timestamps,
  dmesg; not TensorRT-LLM's, NCCL's or a bracketed tag, which a runtime also prints inside
  the record above) starts a new record and is never wrapped: the real run
  failing right after tuning, ``(EngineCore pid=282) ERROR 06-01 21:52:10 [core.py:700]
  RuntimeError: ... Failed to initialize cutlass TMA WS grouped gemm``, is ``fail``.
  Anywhere else it is ``fail``.
- ``autotuner-summary``: FlashInfer >= 0.6.8 logs each failure at DEBUG and one INFO line
  ``[Autotuner]: Skipped N unsupported tactic(s) for <op>``; the finding's count is the sum
  of N, and ``warn_at`` applies to it.
- ``marlin-requested``: vLLM choosing Marlin for NVFP4 is a slow-path warning unless the same
  source shows it was asked for or the checkpoint is W4A16 (weight-only: Marlin is the right
  kernel); then it is info. The markers (checks/log_signatures.toml) count only where vLLM
  prints its configuration (``moe_backend='marlin'`` on the engine config line,
  ``'moe_backend': 'marlin'`` in non-default args, ``--moe-backend marlin`` on a ``vllm
  serve`` command line, a ``...a16`` quantization or W4A16 checkpoint there), not free text.
- prose (every signature): a line that is no log record (no record prefix after its
  transport) and either quotes the message (inside a Markdown code span or typographic
  quotes: ``If this were a crash you would see `EngineCore encountered a fatal error```) or
  dismisses it (``... this warning can be safely ignored``, ``... is expected``) is a
  person's text about the message, not the message: it is not counted. A person quoting a
  log and dismissing it on a line of its own (``This warning is expected and can be safely
  ignored.`` under a pasted record, within :data:`PROSE_LOOKBACK_LINES` lines) retracts what
  was found in the lines above it. The runtime's own lines carry no backticks and no such
  words (:mod:`blackwell_doctor.ruledata.dismissal`), and a record prefix never reads as prose.
- ``log-end``: a log whose last records are an error (the process died there, or the log was
  cut there): walking back from the end over blank lines, the lines of an error report (an
  indented line, a traceback's own lines, a C++ backtrace frame: :func:`continues_error`)
  and error lines (an error-level record or a fatal form, as the grammar table reads
  them: :func:`blackwell_doctor.ruledata.records.classify`; not NCCL's ``WARN``, a warning
  level; or a line holding a vocabulary term, checks/log_vocabulary.toml), until the first other
  line: a record that shows the program went on. When that run holds an error line, the
  scanner records ``runtime.log_ends_in_error`` (its first and last error line), and the
  rules judge every finding seen last inside that run as ``fail``: an error the engine
  survives has other records after it (or, once it serves, ``runtime.engine_ready``). At
  most :data:`TAIL_BYTES` / :data:`TAIL_LINES` of the end are read; lines of an autotuner
  Skipping record are no error (a skipped tactic).
- wrapped records: a line under a per-line transport (docker compose, ``kubectl logs
  --prefix``, vLLM's per-process prefix, a docker ``--timestamps`` stamp) with no record
  prefix of its own continues the record above it through the same transport
  (:func:`wraps`): a vocabulary term broken over the two lines is found in them joined
  (matcher.py, "Wrapped records"), and the log-end walk passes over the second line of a
  wrapped error line.
- ``daemon-stop`` / ``daemon-start``: a GPU daemon's shutdown line (nvidia-persistenced's
  ``Shutdown (N)``) is counted like any signature; the rules (rules/logs.py) judge it with the
  source's marker of an ordered stop (systemd's stop job) and the daemon's later start line.
- ``not-nvidia``: lines only AMD's RCCL prints (``NCCL WARN Missing "iommu=pt" ...``) are
  recognised and dropped: they are no finding on an NVIDIA host.
"""

from __future__ import annotations

from collections.abc import Callable

from blackwell_doctor.facts import regexcache
from blackwell_doctor.ruledata import dismissal, records
from blackwell_doctor.ruledata.logs import Catalogue

AUTOTUNER_SKIPPED = "autotuner.tactic_skipped"
AUTOTUNER_WRAPPER = "[Autotuner]: Skipping tactic"
# The context markers a hit can carry (facts: LogFinding.context): seen on a Skipping line
# itself, or on a continuation line of a Skipping record.
ON_AUTOTUNER_LINE = "autotuner-line"
IN_AUTOTUNER_RECORD = "autotuner-record"
HIT_CONTEXT = (ON_AUTOTUNER_LINE, IN_AUTOTUNER_RECORD)
# A traceback or a C++ backtrace under the record fits; a run never extends further.
AUTOTUNER_CONTINUATION_LINES = 48
# Enough of a line's start to see its prefixes.
HEAD_BYTES = 256
# A dismissal line retracts what was found at most this many lines above it.
PROSE_LOOKBACK_LINES = 8

# Per-line transport prefixes that do not start a record by themselves: docker compose
# ("vllm-1  | "), kubectl logs --prefix ("[pod/name/container] ") and vLLM's per-process
# prefix, which it writes on every line a worker prints (the backtrace lines under a
# Skipping record carry it too). Record prefixes: the grammar table of
# :mod:`blackwell_doctor.ruledata.records`.
_TRANSPORT = regexcache.lazy(
    r"(?:[\w.-]+ +\| )?(?:\[pod/[^\]/\s]+/[^\]\s]+\] )?(?:\([\w.-]+ pid=\d+\) ?)?"
)


def transport(head: str) -> str:
    """The per-line transport prefix of a line (``""`` when it has none)."""
    match = _TRANSPORT().match(head)
    return match.group() if match else ""


# docker logs --timestamps (and compose logs --timestamps after the service): RFC 3339 with
# nanoseconds before every line the container wrote (daemon/logger jsonfilelog read path).
_DOCKER_TIMESTAMP = regexcache.lazy(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?(?:Z|[+-]\d\d:\d\d) ")


def wrap_key(text: str) -> tuple[str, int]:
    """The per-line transport a line was written through for the wrapped-record rule, and
    where its message starts: the transport prefix (:func:`transport`), then a docker
    ``--timestamps`` stamp (any stamp: the same key). ``("", 0)``: none."""
    prefix = transport(text)
    at = len(prefix)
    key = prefix.strip()
    stamp = _DOCKER_TIMESTAMP().match(text, at)
    if stamp is not None:
        key, at = f"{key} <timestamp>".strip(), stamp.end()
    return key, at


def wraps(text: str, key: str) -> int:
    """Where the message of a line (its :func:`line_head` or cleaned text) starts when it
    continues a record written through transport ``key`` (not empty): the same key and no
    record prefix after it; -1 when it does not."""
    mine, at = wrap_key(text)
    if not key or mine != key or records.prefix_at(text, at) is not None:
        return -1
    return at


def continues(head: str, key: str) -> bool:
    """Whether a line (its :func:`line_head`) can be a continuation of a record that was
    written through transport ``key``: the same transport, and no record prefix after it."""
    prefix = transport(head)
    if prefix.strip() != key.strip():
        return False
    return records.prefix_at(head, len(prefix)) is None


# Marks that open a quotation in prose, just before the quoted message: a Markdown code span,
# typographic quotes, an emphasised quote (*"...").
_QUOTE_OPEN = ("`", "\u201c", "\u2018", "\u00ab", '*"', '_"')


# What stands before a message on a line with no record prefix when a person wrote the line:
# two or more plain words ("As the log says, ..."), not a program's prefix (those hold
# digits, brackets, paths or end in a colon: "host:1:2 [0] NCCL WARN", "UserWarning:").
# A program's level words ("NCCL WARN") are no prose: one all-lower-case word is required.
_PROSE_LEAD = regexcache.lazy(r"[>*\-\s]*[A-Za-z][A-Za-z']*(?:,?\s+[A-Za-z][A-Za-z']*)+,?")
_LOWER_WORD = regexcache.lazy(r"\b[a-z]{2,}\b")


def is_record(head: str) -> bool:
    """Whether a line (its :func:`line_head`) starts with a log-record prefix after its
    transport prefix."""
    return records.prefix_at(head, len(transport(head))) is not None


def is_prose(text: str, anchor: str, *, lead_words: bool = True) -> bool:
    """Whether a line is a person's prose about a message rather than the message: no log
    record prefix, and the message quoted in it (code span, typographic or emphasised
    quotes) or dismissed by it ("can be safely ignored", "is expected", ...), or, with
    ``lead_words``, led by plain words ("As the log says, ..."). A vocabulary term passes
    ``lead_words=False``: programs print an enum name after words of their own ("cuDNN
    returned CUDNN_STATUS_NOT_SUPPORTED"), so only quotes and dismissals make it prose."""
    if is_record(text):
        return False
    at = text.find(anchor) if anchor else -1
    # Text glued to the message ("...ParisCUDA error: ...") is a program's output run
    # together with it (model output, a missing newline), never a person's words about it.
    if at > 0 and text[at - 1].isalnum():
        return dismissal.DISMISSAL.search(text) is not None
    if at != -1:
        before = text[:at].rstrip()
        if before.endswith(_QUOTE_OPEN):
            return True
        lead = before[len(transport(before)) :]
        if lead_words and _PROSE_LEAD().fullmatch(lead) and _LOWER_WORD().search(lead):
            return True
    return dismissal.DISMISSAL.search(text) is not None


def dismisses_above(text: str) -> bool:
    """Whether a line is a person's dismissal of a message shown just above it ("This
    warning is expected and can be safely ignored"): no record prefix, a dismissal, and a
    word pointing back at the message."""
    return (
        not is_record(text)
        and dismissal.DISMISSAL.search(text) is not None
        and dismissal.DEICTIC.search(text) is not None
    )


def hit_context(text: str, *, in_record: bool) -> tuple[str, ...]:
    """The autotuner markers of one hit (empty: none): on the Skipping line itself, or on a
    continuation line of a Skipping record (``in_record``, as the scanner followed it)."""
    if AUTOTUNER_WRAPPER in text:
        return (ON_AUTOTUNER_LINE,)
    if in_record:
        return (IN_AUTOTUNER_RECORD,)
    return ()


# A Python traceback frame: '  File "/x/y.py", line 12, in f' (after any per-line prefix).
_FRAME = regexcache.lazy(r'File "[^"]+", line \d+, in \S+')
# The exception line that ends a Python traceback ("RuntimeError: ...", "torch.X.FooError").
_EXCEPTION = regexcache.lazy(r"\b[A-Z]\w*(?:Error|Exception)(?::|$)")
# The frame is at most this many lines above the exception line (code line, carets).
FRAME_LOOKBACK_LINES = 4


def frame_of(text: str) -> str:
    """The frame a traceback line names (``""`` when it is no frame line)."""
    match = _FRAME().search(text)
    return match.group() if match is not None else ""


def frame_above(last: tuple[int, str], line: int, text: str) -> str:
    """The traceback's last frame for an exception line (``""`` for any other line, or
    when the last frame seen is not just above it): what the generic finding quotes beside
    the error line itself."""
    frame_line, frame = last
    if not frame or not 0 < line - frame_line <= FRAME_LOOKBACK_LINES:
        return ""
    return frame if _EXCEPTION().search(text) else ""


# How much of a source's end the log-end rule reads (bytes kept, lines walked back).
TAIL_BYTES = 64 << 10
TAIL_LINES = 256
LOG_ENDS_IN_ERROR = "runtime.log_ends_in_error"
# The lines of an error report that are not records of their own, after the transport:
# indented text (traceback frames and code, Go stack frames), Python's traceback lines and
# the exception line, the carets under a code line, C++ backtrace frames (glibc/boost
# "0x...", gdb/c10 "#N", "frame #N:", c10's "Exception raised from"), Go's "goroutine N [".
_ERROR_REPORT = regexcache.lazy(
    r"\s"
    r"|Traceback \(most recent call last\)|File \"|During handling of the above exception"
    r"|The above exception was the direct cause"
    r"|(?:[A-Za-z_]\w*\.)*[A-Z]\w*(?:Error|Exception|Exit|Interrupt)\b"
    r"|[\^~]+\s*$"
    r"|\d+\s+0x[0-9a-fA-F]+|#\d+\s|frame #\d+:|Exception raised from |goroutine \d+ \["
)


def _message_at(text: str) -> int:
    """Where a line's message starts: after its transports, envelopes and record prefix
    (:func:`blackwell_doctor.ruledata.records.parse`), and the spaces that separate it from
    the padding uvicorn puts after "INFO:" (to 10 columns)."""
    record = records.parse(text)
    at = record.message_at
    if record.grammar is not None and record.grammar.name == "python-basic":
        return len(text) - len(text[at:].lstrip(" "))
    return at


def continues_error(text: str) -> bool:
    """Whether a line (ANSI stripped, not stripped of its indentation) can be part of an
    error report above it rather than a record that shows the program went on: its message
    (after any transport and record prefix, :func:`_message_at`) is empty or has the shape
    of a traceback or backtrace line."""
    at = _message_at(text)
    return _ERROR_REPORT().match(text, at) is not None or not text[at:].strip()


def is_error_line(catalogue: Catalogue, text: str) -> bool:
    """Whether a line (cleaned) is an error line for the log-end rule: an error-level record
    or a fatal form (:func:`blackwell_doctor.ruledata.records.classify`), not NCCL's
    ``WARN`` record (a warning level: a log cut after one is a cut log)."""
    del catalogue  # the grammar table decides, not the generic signatures' literals
    return records.classify(text) in ("fatal", "error")


def _wraps_error(above: tuple[int, str], text: str, is_error: Callable[[str], bool]) -> bool:
    """Whether a line is the second line of an error record a transport wrapped: it
    continues the line above (:func:`wraps`), and that line is an error line."""
    upper = above[1]
    return wraps(text, wrap_key(upper)[0]) >= 0 and is_error(upper.strip())


def error_tail(
    lines: list[tuple[int, str]], is_error: Callable[[str], bool], skipped: Callable[[int], bool]
) -> tuple[int, int, int, str] | None:
    """The error run a source ends with: ``lines`` are its last lines (number, text), in
    order; walking back from the last one, blank lines and :func:`continues_error` lines
    are passed over, error lines (``is_error``; ``skipped``: a line of an autotuner
    Skipping record, no error) counted, and the first other line ends the walk. Returns
    (first error line, last error line, error lines, the first one's text), or None when
    the run holds no error line."""
    first = last = count = 0
    text_first = ""
    walked = lines[-TAIL_LINES:]
    for k in range(len(walked) - 1, -1, -1):
        number, text = walked[k]
        if not text.strip():
            continue
        if not skipped(number) and is_error(text.strip()):
            first, text_first, count = number, text.strip(), count + 1
            last = last or number
            continue
        if continues_error(text) or (k > 0 and _wraps_error(walked[k - 1], text, is_error)):
            continue
        break
    return (first, last, count, text_first) if count else None
