"""Facts files in, the fleet report out: each node judged as ``check --facts`` judges it.

There is no second evaluation path: every document goes through the engine of
:func:`blackwell_doctor.rules.evaluate.evaluate` (one for the run, rule data loaded once; it
remembers each check's results by the fields the check read:
:func:`blackwell_doctor.rules.evaluate.memo_engine`) and the report's gate, and the fleet view
is only a grouping of those results. Per node, only counts and the finding keys
are kept, so memory grows with the number of distinct findings, not with results x nodes.
"""

from __future__ import annotations

import functools
import glob
import itertools
import os
from array import array
from collections.abc import Callable, Iterable, Iterator, Sequence
from pathlib import Path
from typing import IO, Any, NamedTuple, ParamSpec

import msgspec

from blackwell_doctor import TOOL_NAME, __version__
from blackwell_doctor.app.obtain import FactsFileError, decode_facts_file, read_facts_bytes
from blackwell_doctor.collect.cachefile import digest
from blackwell_doctor.facts.document import (
    SCHEMA_VERSION,
    Facts,
    NvmlFacts,
    NvmlGpu,
    PlatformFacts,
    ToolInfo,
    Unavailable,
)
from blackwell_doctor.report import exitcodes
from blackwell_doctor.report.exitcodes import ExitCode
from blackwell_doctor.report.fleet import (
    FLEET_SCHEMA_VERSION,
    FleetBench,
    FleetBenchShape,
    FleetGroup,
    FleetNode,
    FleetReport,
    FleetSummary,
    Unjudged,
)
from blackwell_doctor.report.results import FailOn, Result, Severity, Status
from blackwell_doctor.rules.engine import Engine, select_ids
from blackwell_doctor.rules.evaluate import memo_engine

# Worst first: a failure before a warning before "could not be evaluated".
_STATUS_RANK = {Status.FAIL: 0, Status.WARN: 1, Status.ERROR: 2}
_SEVERITY_RANK = {s: i for i, s in enumerate(reversed(Severity))}

_P = ParamSpec("_P")
_GroupKey = tuple[str, Status, str, tuple[str, tuple[str, ...], tuple[str, ...]] | None]


def _has_magic(pattern: str) -> bool:
    return any(c in pattern for c in "*?[")


def expand_inputs(args: Iterable[str]) -> tuple[list[str], list[Unjudged]]:
    """Files as given, directories searched for ``*.json`` (recursively), globs expanded
    (``**`` recursive), each named as :class:`~pathlib.Path` writes it. What names nothing is
    returned as unjudged, not raised: one bad path must not hide the rest of the fleet. Each
    file is judged once."""
    paths: list[str] = []
    missing: list[Unjudged] = []
    seen: set[str] = set()
    for arg in args:
        path = Path(arg)
        found: list[str]
        if path.is_dir():
            # Names joined to the directory as Path writes it are as Path writes them (no
            # Path per file: 2 us of a node's ~40), but for "./": Path drops it.
            root = str(path)
            found = _json_files(root)
            if root == ".":
                found = [p.removeprefix("./") for p in found]
            if not found:
                missing.append(Unjudged(source=arg, reason="directory holds no *.json file"))
        elif path.is_file():
            found = [str(path)]
        elif path.exists():
            missing.append(Unjudged(source=arg, reason="not a regular file"))
            found = []
        elif _has_magic(arg):
            matches = sorted(Path(m) for m in glob.glob(arg, recursive=True) if Path(m).is_file())
            found = [str(m) for m in matches]
            if not found:
                missing.append(Unjudged(source=arg, reason="pattern matched no file"))
        else:
            missing.append(Unjudged(source=arg, reason="no such file or directory"))
            found = []
        for p in found:
            key = os.path.normpath(p)
            if key not in seen:
                seen.add(key)
                paths.append(p)
    return paths, missing


def _json_files(root: str) -> list[str]:
    """Regular ``*.json`` files under ``root``, sorted; directory symlinks are not followed
    (no loops). scandir's cached entry types, not a stat per file: 10,000 files cost
    milliseconds, not a second."""
    found: list[str] = []
    stack = [root]
    while stack:
        try:
            entries = os.scandir(stack.pop())
        except OSError:
            continue
        with entries:
            for entry in entries:
                if entry.is_dir(follow_symlinks=False):
                    stack.append(entry.path)
                elif entry.name.endswith(".json") and entry.is_file():
                    found.append(entry.path)
    return sorted(found)


def node_name(facts: Facts, path: str | Path) -> str:
    """The hostname the facts carry, or the file's name when redacted or unreadable."""
    return _name(facts.platform.hostname, facts.redacted, path)


def _name(hostname: str | Unavailable, redacted: bool, path: str | Path) -> str:
    if redacted or not isinstance(hostname, str) or not hostname.strip():
        return Path(path).stem
    return hostname.strip()


def _group_key(result: Result) -> _GroupKey:
    remedy = result.remedy
    remedy_key = (
        None if remedy is None else (remedy.summary, tuple(remedy.commands), tuple(remedy.links))
    )
    return (result.id, result.status, result.summary, remedy_key)


class Judged(NamedTuple):
    """What the fleet keeps of one node's report: counts and the results that are findings."""

    source: str
    name: str
    exit_code: int
    fail: int
    warn: int
    error: int
    findings: list[Result]
    bench: FleetBench | None = None


def node_bench(facts: Facts) -> FleetBench | None:
    """The figures of the bench run ``facts`` carry, for the fleet's outputs."""
    if facts.bench is None:
        return None
    return FleetBench(
        model=facts.bench.model,
        started_at=facts.bench.started_at,
        shapes=[
            FleetBenchShape(
                name=s.name,
                concurrency=s.concurrency,
                requests=s.requests,
                failed=max(s.requests - s.completed, sum(s.errors.values())),
                output_tokens_per_s=s.output_tokens_per_s,
                answer_tokens_per_s=s.answer_tokens_per_s,
                ttft_p50_ms=s.ttft_ms.p50,
                ttft_p99_ms=s.ttft_ms.p99,
                itl_p50_ms=s.itl_ms.p50,
                itl_p99_ms=s.itl_ms.p99,
            )
            for s in facts.bench.shapes
        ],
    )


@functools.cache
def _engine() -> Engine:
    return memo_engine()


# Fields that name a node but that no check reads (tests/test_fleet.py holds rules/ to that):
# identical nodes differ only in them, so their facts without them judge the same.
IDENTITY_FIELDS = ("platform.hostname", "collected_at", "nvml.gpus[].uuid")
# Distinct judgments remembered per process, and the bytes of their keys; past either the
# memo starts over. Views are no longer read after PROBATION nodes of which fewer than 1 in
# RARE took a verdict judged before.
MEMO_MAX = 4096
MEMO_BYTES = 64 << 20
PROBATION = 256
RARE = 8
# ... or after UNSHARED nodes of which none did: a fleet whose every node differs read a
# view of each of its first 256 (~40-75 us a node) for nothing.
UNSHARED = 32

# exit code, fail, warn, error, findings, the bench figures
_Verdict = tuple[int, int, int, int, list[Result], FleetBench | None]


def judgment_key(facts: Facts) -> bytes:
    """What the checks see of ``facts``: the document without IDENTITY_FIELDS, hashed."""
    nvml = facts.nvml
    if isinstance(nvml, NvmlFacts):
        nvml = msgspec.structs.replace(
            nvml, gpus=[msgspec.structs.replace(g, uuid="") for g in nvml.gpus]
        )
    anonymous = msgspec.structs.replace(
        facts,
        collected_at="",
        platform=msgspec.structs.replace(facts.platform, hostname=""),
        nvml=nvml,
    )
    # MessagePack, not JSON: the same fields in the same order, in under half the time
    # (an 8-GPU node's key cost 70% of its decode as JSON, 30% so).
    return digest(msgspec.msgpack.encode(anonymous))


# The judgment key read from a file's bytes, before decoding it into Facts (and, for a node
# like one judged before, instead of it): a *view* of the document in which every field is
# its JSON text as written (msgspec.Raw, which the decoder only skips over) but the identity
# fields, decoded with their own types, and the objects that hold them. Two files with equal
# views differ at most in IDENTITY_FIELDS: every other field is the same text, hence the same
# value, and a field the view does not name is one Facts does not read either (a view names
# every field of every variant it stands for, and their tag field). The key is the view
# encoded again with the identity fields blanked, the raw text copied as it is. Reading the
# view costs about a third of decoding Facts: a node of a known configuration costs its read
# and its view.


def _view(
    name: str,
    variants: tuple[type[msgspec.Struct], ...],
    typed: dict[str, tuple[Any] | tuple[Any, Any]],
) -> type[msgspec.Struct]:
    """A struct that reads the fields of ``variants`` (and their tag field) as raw JSON text,
    left out where absent (``null`` is text, not absence), except those in ``typed``:
    ``(type,)`` (required) or ``(type, default)``."""
    raw: Any = msgspec.Raw | msgspec.UnsetType
    fields: dict[str, tuple[str, Any] | tuple[str, Any, Any]] = {}
    forbid = False
    for struct in variants:
        config = struct.__struct_config__
        forbid = forbid or config.forbid_unknown_fields
        if config.tag_field is not None:
            fields[config.tag_field] = (config.tag_field, raw, msgspec.UNSET)
        for field in msgspec.structs.fields(struct):
            # A view is keyed by the names fields are encoded with: Facts renames none.
            if field.encode_name != field.name:  # pragma: no cover - a guard for later
                raise AssertionError(f"{struct.__name__}.{field.name} is renamed")
            fields[field.name] = (field.name, raw, msgspec.UNSET)
    for field_name, spec in typed.items():
        if field_name not in fields:  # pragma: no cover - a guard for later
            raise AssertionError(f"{name}: no field {field_name}")
        fields[field_name] = (field_name, *spec)
    return msgspec.defstruct(
        name, list(fields.values()), kw_only=True, forbid_unknown_fields=forbid
    )


@functools.cache
def _view_codec() -> tuple[msgspec.json.Decoder[Any], msgspec.json.Encoder]:
    gpu = _view("_GpuView", (NvmlGpu,), {"uuid": (str | Unavailable,)})
    nvml = _view(
        "_NvmlView",
        (NvmlFacts, Unavailable),
        {"gpus": (list[gpu] | msgspec.UnsetType, msgspec.UNSET)},  # type: ignore[valid-type]
    )
    platform = _view("_PlatformView", (PlatformFacts,), {"hostname": (str | Unavailable,)})
    facts = _view(
        "_FactsView",
        (Facts,),
        {
            "schema_version": (int,),
            "collected_at": (str,),
            "redacted": (bool,),
            "platform": (platform,),
            "nvml": (nvml,),
        },
    )
    return msgspec.json.Decoder(facts), msgspec.json.Encoder()


class Seen(NamedTuple):
    """What a file's view tells before it is decoded: its judgment key and its node's name."""

    key: bytes
    hostname: str | Unavailable
    redacted: bool


def seen_key(data: bytes) -> Seen | None:
    """The judgment key of the facts document ``data`` read from its view, or None where the
    view cannot tell (a document of another schema version, or not a facts document: its
    decoding then says what is wrong). Equal keys: documents equal but for IDENTITY_FIELDS,
    each of which is of its type in both."""
    decoder, encoder = _view_codec()
    try:
        view = decoder.decode(data)
    except (msgspec.DecodeError, RecursionError):
        return None
    if view.schema_version != SCHEMA_VERSION:  # an older one is upgraded as it is decoded
        return None
    seen = Seen(b"", view.platform.hostname, view.redacted)
    view.collected_at = ""
    view.platform.hostname = ""
    if view.nvml.gpus is not msgspec.UNSET:
        for gpu in view.nvml.gpus:
            gpu.uuid = ""
    return seen._replace(key=encoder.encode(view))


class Memo:
    """Verdicts by judgment key, within one run (the options are the same for every node):
    at most MEMO_MAX of them and MEMO_BYTES of keys (a key read from a view is about the
    size of its file); past either, it starts over. In a fleet where nodes seldom repeat
    (fewer than 1 in RARE of the first PROBATION), views are no longer read: each node is
    decoded and judged, and the engine remembers results check by check
    (:mod:`blackwell_doctor.rules.memo`)."""

    def __init__(self) -> None:
        self._verdicts: dict[bytes, _Verdict] = {}
        self._bytes = 0
        self.tries = 0
        self.hits = 0
        self.viewing = True

    def get(self, key: bytes) -> _Verdict | None:
        self.tries += 1
        found = self._verdicts.get(key)
        if found is not None:
            self.hits += 1
        elif (self.tries >= UNSHARED and not self.hits) or (
            self.tries >= PROBATION and self.hits * RARE < self.tries
        ):
            self.viewing = False
            self._verdicts.clear()
        return found

    def put(self, key: bytes, verdict: _Verdict) -> None:
        if not self.viewing:
            return
        if len(self._verdicts) >= MEMO_MAX or self._bytes + len(key) > MEMO_BYTES:
            self._verdicts.clear()
            self._bytes = 0
        self._verdicts[key] = verdict
        self._bytes += len(key)


def judge_node(
    path: str | Path,
    *,
    select: Sequence[str],
    ignore: Sequence[str],
    fail_on: FailOn,
    strict: bool,
    memo: Memo | None = None,
) -> Judged | Unjudged:
    """One node: its facts read and judged exactly as ``check --facts PATH`` judges them.

    With ``memo``, a node whose facts equal an earlier node's but for IDENTITY_FIELDS gets
    that node's verdict instead of running the checks again (a fleet of identical machines
    is judged once per distinct configuration), and a current document is not even decoded
    into Facts: its view (:func:`seen_key`) finds the verdict. The options are the same
    within a run."""
    source = str(path)
    try:
        data = read_facts_bytes(source)  # the one reader of facts files, as check --facts
    except FactsFileError as exc:
        return Unjudged(source=source, reason=exc.reason)
    if memo is not None and not memo.viewing:
        memo = None
    seen = seen_key(data) if memo is not None else None
    if seen is not None and memo is not None:
        verdict = memo.get(seen.key)
        if verdict is not None:
            return _judged(source, _name(seen.hostname, seen.redacted, source), verdict)
    try:
        facts = decode_facts_file(data, source)  # ... and its one decoder
    except FactsFileError as exc:
        return Unjudged(source=source, reason=exc.reason)
    # A view's key (the JSON of a whole document) and a digest (32 bytes) never meet.
    key = b"" if memo is None else seen.key if seen is not None else judgment_key(facts)
    verdict = memo.get(key) if memo is not None and seen is None else None
    if verdict is None:
        verdict = _verdict(facts, select, ignore, fail_on, strict)
        if memo is not None:
            memo.put(key, verdict)
    return _judged(source, node_name(facts, source), verdict)


def judge_facts(
    facts: Facts,
    source: str,
    *,
    select: Sequence[str],
    ignore: Sequence[str],
    fail_on: FailOn,
    strict: bool,
) -> Judged:
    """One node whose facts were obtained already (``fleet --example``: a host example's
    facts with its logs, bench run and model, as ``check --example`` obtains them), judged
    as :func:`judge_node` judges a file."""
    verdict = _verdict(facts, select, ignore, fail_on, strict)
    return _judged(source, node_name(facts, source), verdict)


def _verdict(
    facts: Facts,
    select: Sequence[str],
    ignore: Sequence[str],
    fail_on: FailOn,
    strict: bool,
) -> _Verdict:
    """What the fleet keeps of a node's results: the exit code ``check --facts`` gives (the
    report's gate, :func:`exitcodes.results_gate`), the counts and the findings. What
    evaluate() runs and gates on, without the report document it would build around the
    results (the fleet keeps counts and findings)."""
    results = _engine().run(facts, select=select, ignore=ignore)
    findings = [r for r in results if r.status in _STATUS_RANK]
    statuses = [r.status for r in findings]
    code = int(exitcodes.results_gate({r.status for r in results}, fail_on, strict))
    return (
        code,
        statuses.count(Status.FAIL),
        statuses.count(Status.WARN),
        statuses.count(Status.ERROR),
        findings,
        node_bench(facts),
    )


def _judged(source: str, name: str, verdict: _Verdict) -> Judged:
    exit_code, fail, warn, error, findings, bench = verdict
    return Judged(
        source=source,
        name=name,
        exit_code=exit_code,
        fail=fail,
        warn=warn,
        error=error,
        findings=findings,
        bench=bench,
    )


class _Judging(NamedTuple):
    """How each node is judged: the fleet's --select, --ignore, --fail-on and --strict."""

    select: tuple[str, ...]
    ignore: tuple[str, ...]
    fail_on: FailOn
    strict: bool


def _judge_chunk(args: tuple[list[str | Path], _Judging]) -> list[Judged | Unjudged]:
    return list(_judge_each(*args))


def _judge_each(paths: Iterable[str | Path], how: _Judging) -> Iterator[Judged | Unjudged]:
    """Each node judged as it is asked for: in this process nothing but the caller keeps a
    node (a list of every node's findings and bench figures was ~5 KB a node, 150 MB at
    30,000)."""
    memo = Memo()
    select, ignore, fail_on, strict = how
    for p in paths:
        yield judge_node(p, select=select, ignore=ignore, fail_on=fail_on, strict=strict, memo=memo)


def default_jobs() -> int:
    """Worker processes for ``--jobs 0``: one per CPU this process may use (at most 32)."""
    try:
        cpus = len(os.sched_getaffinity(0))
    except AttributeError:  # not Linux
        cpus = os.cpu_count() or 1
    return max(1, min(cpus, 32))


def _judge_all(
    paths: Sequence[str | Path], how: _Judging, jobs: int
) -> Iterator[Judged | Unjudged]:
    if jobs <= 1 or len(paths) < 2:
        yield from _judge_each(paths, how)
        return
    import multiprocessing
    from concurrent.futures import ProcessPoolExecutor

    # Chunks of files, not single files: a result crosses the pipe once per chunk, and only
    # findings travel (a healthy node is five numbers). Input order is kept.
    size = max(16, len(paths) // (jobs * 8))
    chunks = [(list(paths[i : i + size]), how) for i in range(0, len(paths), size)]
    methods = multiprocessing.get_all_start_methods()
    # fork: the workers inherit the imported rules and loaded rule data instead of paying
    # the start-up again (this process runs no threads of its own).
    context = multiprocessing.get_context("fork" if "fork" in methods else None)
    with ProcessPoolExecutor(max_workers=jobs, mp_context=context) as pool:
        for chunk in pool.map(_judge_chunk, chunks):
            yield from chunk


# Nodes a fleet keeps in memory before it spools them to a temporary file (NodeSpool).
SPOOL_HELD = 1024


_SpoolRecord = tuple[bytes, bytes, int, int, int, int, FleetBench | None]


@functools.cache
def _spool_codec() -> tuple[Callable[[_SpoolRecord], bytes], Callable[[bytes], _SpoolRecord]]:
    """A spooled node's record: (source, name, exit code, fail, warn, error, bench)."""
    return msgspec.msgpack.Encoder().encode, msgspec.msgpack.Decoder(_SpoolRecord).decode


class NodeSpool:
    """A fleet's judged nodes, in order, kept out of memory past the first
    :data:`SPOOL_HELD`: each node's record (source, name, exit code, counts, bench figures:
    ~150 bytes, ~1 KB with a bench run) appended as MessagePack to an unnamed temporary file
    of this process as it is judged (its source and name as UTF-8 bytes with lone
    surrogates passed through: a file name that is not UTF-8 is a str with surrogates;
    4.5 us a node, where a pickle of the node was 26), read back in order for the output.
    A small fleet stays in memory (and start-up imports no tempfile). In memory per node:
    its name (two nodes claiming one host are told apart by their files, :meth:`unique`),
    counted in a dict, and its place in each group of findings it is in (4 bytes)."""

    def __init__(self) -> None:
        self._held: list[FleetNode] = []
        self._file: IO[bytes] | None = None
        self._count = 0
        self._names: dict[str, int] = {}

    def append(self, node: FleetNode) -> None:
        self._count += 1
        self._names[node.name] = self._names.get(node.name, 0) + 1
        if self._file is None:
            self._held.append(node)
            if len(self._held) < SPOOL_HELD:
                return
            import tempfile

            self._file = tempfile.TemporaryFile()  # noqa: SIM115  (closed by close())
            held, self._held = self._held, []
            for n in held:
                self._write(self._file, n)
            return
        self._write(self._file, node)

    @staticmethod
    def _write(file: IO[bytes], node: FleetNode) -> None:
        record = _spool_codec()[0](
            (
                node.source.encode("utf-8", "surrogatepass"),
                node.name.encode("utf-8", "surrogatepass"),
                node.exit_code,
                node.fail,
                node.warn,
                node.error,
                node.bench,
            )
        )
        file.write(len(record).to_bytes(4, "little"))
        file.write(record)

    def __len__(self) -> int:
        return self._count

    def unique(self, name: str, source: str) -> str:
        """The name a node is listed by: its own, or with its file where another claims it."""
        return name if self._names.get(name, 0) <= 1 else f"{name} ({source})"

    def __iter__(self) -> Iterator[FleetNode]:
        """The nodes in the order judged, each under its listed name."""
        for node in self._held if self._file is None else self._spooled(self._file):
            listed = self.unique(node.name, node.source)
            yield node if listed == node.name else msgspec.structs.replace(node, name=listed)

    def _spooled(self, file: IO[bytes]) -> Iterator[FleetNode]:
        decode = _spool_codec()[1]
        file.flush()
        file.seek(0)
        for _ in range(self._count):
            # This process's own unnamed file (unlinked at creation), written by _write().
            record = file.read(int.from_bytes(file.read(4), "little"))
            source, name, exit_code, fail, warn, error, bench = decode(record)
            yield FleetNode(
                name=name.decode("utf-8", "surrogatepass"),
                source=source.decode("utf-8", "surrogatepass"),
                exit_code=exit_code,
                fail=fail,
                warn=warn,
                error=error,
                bench=bench,
            )
        file.seek(0, os.SEEK_END)

    def close(self) -> None:
        if self._file is not None:
            self._file.close()


def judge_fleet_spooled(
    paths: Sequence[str | Path],
    unjudged: Sequence[Unjudged] = (),
    *,
    select: Sequence[str] = (),
    ignore: Sequence[str] = (),
    fail_on: FailOn = "fail",
    strict: bool = False,
    jobs: int = 1,
    obtained: Sequence[tuple[str, Facts]] = (),
) -> tuple[FleetReport, NodeSpool]:
    """:func:`judge_fleet`'s report (the options are its) without its nodes (``nodes`` is
    empty), and the nodes in a :class:`NodeSpool` (the caller closes it): each node is
    judged, folded into the summary and the groups, written to the spool and dropped, so
    that memory does not grow with the fleet but for the groups (one per distinct finding)
    and each node's name."""
    select_ids(_engine().rules.checks, select, ignore)
    workers = default_jobs() if jobs == 0 else jobs
    bad = list(unjudged)
    spool = NodeSpool()
    # A group's members by their place in the fleet, then by (name, source) to list them.
    members: list[tuple[str, str]] = []
    groups: dict[_GroupKey, tuple[Result, array[int]]] = {}
    exits = [0, 0, 0]  # ok, findings, not evaluated
    worst = [0, 0, 0]  # fail, warn, neither
    given: Iterator[Judged | Unjudged] = (
        judge_facts(f, src, select=select, ignore=ignore, fail_on=fail_on, strict=strict)
        for src, f in obtained
    )
    judged = _judge_all(paths, _Judging(tuple(select), tuple(ignore), fail_on, strict), workers)
    for outcome in itertools.chain(given, judged):
        if isinstance(outcome, Unjudged):
            bad.append(outcome)
            continue
        if outcome.findings:
            index = len(members)
            members.append((outcome.name, outcome.source))
            for result in outcome.findings:
                key = _group_key(result)
                entry = groups.get(key)
                if entry is None:
                    # A group shows no evidence: a node's own (its bench figures, its GPUs'
                    # readings) is not kept with it.
                    slim = msgspec.structs.replace(result, evidence={})
                    groups[key] = (slim, array("I", (index,)))
                else:
                    entry[1].append(index)
        spool.append(
            FleetNode(
                name=outcome.name,
                source=outcome.source,
                exit_code=outcome.exit_code,
                fail=outcome.fail,
                warn=outcome.warn,
                error=outcome.error,
                bench=outcome.bench,
            )
        )
        code = outcome.exit_code
        if code == ExitCode.OK:
            exits[0] += 1
        elif code == ExitCode.FINDINGS:
            exits[1] += 1
        elif code == ExitCode.NOT_EVALUATED:
            exits[2] += 1
        worst[0 if outcome.fail else 1 if outcome.warn else 2] += 1
    fleet_groups = [
        FleetGroup(
            id=r.id,
            family=r.family,
            status=r.status,
            severity=r.severity,
            title=r.title,
            summary=r.summary,
            remedy=r.remedy,
            nodes=[spool.unique(*members[i]) for i in indices],
        )
        for r, indices in groups.values()
    ]
    fleet_groups.sort(
        key=lambda g: (
            _STATUS_RANK[g.status],
            _SEVERITY_RANK[g.severity],
            -len(g.nodes),
            g.id,
            g.summary,
        )
    )
    summary = FleetSummary(
        nodes=len(spool),
        ok=exits[0],
        findings=exits[1],
        not_evaluated=exits[2],
        unjudged=len(bad),
        worst_fail=worst[0],
        worst_warn=worst[1],
        worst_ok=worst[2],
    )
    report = FleetReport(
        schema_version=FLEET_SCHEMA_VERSION,
        tool=ToolInfo(name=TOOL_NAME, version=__version__),
        fail_on=fail_on,
        strict=strict,
        summary=summary,
        groups=fleet_groups,
        unjudged=bad,
        nodes=[],
        exit_code=int(
            exitcodes.fleet_gate(
                nodes=summary.nodes,
                findings=summary.findings > 0,
                not_evaluated=summary.not_evaluated + summary.unjudged > 0,
                strict=strict,
            )
        ),
    )
    return report, spool


def _with_nodes(
    spooled: Callable[_P, tuple[FleetReport, NodeSpool]],
) -> Callable[_P, FleetReport]:
    """``spooled``'s report with its spool read back into ``nodes`` (and closed)."""

    @functools.wraps(spooled)
    def whole(*args: _P.args, **kwargs: _P.kwargs) -> FleetReport:
        report, spool = spooled(*args, **kwargs)
        try:
            return msgspec.structs.replace(report, nodes=list(spool))
        finally:
            spool.close()

    return whole


judge_fleet = _with_nodes(judge_fleet_spooled)
judge_fleet.__doc__ = """Judge every file in ``paths``: in this process, or in ``jobs`` worker
processes (0: :func:`default_jobs`). Serial is the default: with identical machines judged
once, reading and decoding dominate and a pool's transfers cost about what it saves on two
cores; it pays off on many cores with many distinct configurations. ``obtained``: nodes
whose facts are read already, (source, facts), judged first (:func:`judge_facts`). Raises
SelectionError for a --select/--ignore pattern that names no check, before reading
anything. The report holds every node (:func:`judge_fleet_spooled` does not)."""
