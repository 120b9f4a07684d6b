"""The one way every command obtains its facts.

Live collection on this host (optionally under ``--host-root``), or a facts file written by
``collect`` (``--facts FILE``, ``-`` for standard input); then the runtime and kernel logs
named by ``--logs``/``--container``/``--journal``/``--kernel-log`` scanned into them. The
usage errors of those options are raised here as :class:`~blackwell_doctor.facts.errors.UserError`
so that every command reports them in the same words. Heavy modules (collectors, msgspec
decoding, the log scanner) are imported only when they are needed.
"""

from __future__ import annotations

import contextlib
import functools
import math
import re
import threading
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, BinaryIO

import msgspec

from blackwell_doctor.facts.errors import UserError

if TYPE_CHECKING:
    from blackwell_doctor.collect.logs.scan import Progress
    from blackwell_doctor.facts.document import Facts, LogFacts, Section, Unavailable
    from blackwell_doctor.facts.model import ModelFacts
    from blackwell_doctor.facts.stack import StackFacts

DEFAULT_GPU_TIMEOUT_S = 20.0
STDIN = "-"


class LogRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Which logs to scan: files/directories/globs (``-``: standard input), containers, the
    systemd journal, the kernel log."""

    paths: Sequence[str] = ()
    containers: Sequence[str] = ()
    journal: bool = False
    kernel_log: bool = False

    @property
    def requested(self) -> bool:
        return bool(self.paths or self.containers or self.journal or self.kernel_log)

    @property
    def reads_stdin(self) -> bool:
        return STDIN in self.paths


class FactsRequest(msgspec.Struct, frozen=True, kw_only=True):
    """Where the facts come from. ``facts_file`` set: that file (``-``: standard input);
    otherwise this host, read under ``host_root`` (default ``/``)."""

    facts_file: Path | None = None
    host_root: Path | None = None
    gpu_timeout_s: float | None = None
    probes: bool = True
    redact: bool = False
    logs: LogRequest = msgspec.field(default_factory=LogRequest)
    # --model-dir: read into facts.model (config, quantization, safetensors headers). With
    # --facts the directory is usually on that node: read when it exists here, otherwise the
    # file's own model section (collect --model-dir on that node) stands.
    model_dir: Path | None = None
    # recommend, apply: model_dir is what the runtime will mount and serve. One with nothing
    # to read yet (not downloaded) is a launch that is not sized (a note says so); the
    # commands that judge the model (check, collect, audit, model) refuse it (exit 2).
    model_mount: bool = False
    # --hub: model_dir is ORG/NAME[@REVISION], read from the Hub (or HF_ENDPOINT) over HTTP:
    # config, index and safetensors headers by range requests, never a weight.
    model_hub: bool = False
    # --bench: a bench run document (``bench -o``) read into facts.bench, for the serving.*
    # checks; it replaces the bench section a --facts file carries.
    bench_file: Path | None = None
    # The Python GPU stack (audit, check/collect --stack): read from ``python``'s environment
    # (None: this interpreter's) on this host, also beside a facts file.
    stack: bool = False
    python: Path | None = None
    # audit --image: read the stack from this container image's files instead (through the
    # Docker API; the image is never started).
    image: str | None = None
    stack_cache: bool = True
    # How reports name a facts file (--example NAME: "example NAME", not its path on disk).
    label: str | None = None
    # check/slurm-health --select/--ignore: a live run collects only the sections of the
    # facts that the checks they leave read (and those of ``output_reads``: what the
    # command's output reads beyond its checks, e.g. nfd's compute capability from NVML).
    select: Sequence[str] = ()
    ignore: Sequence[str] = ()
    output_reads: frozenset[Section] = frozenset()


class Obtained(msgspec.Struct, frozen=True):
    facts: Facts
    source: str  # "live", or the facts file as given


def obtain_facts(request: FactsRequest, *, environ: Mapping[str, str], stdin: BinaryIO) -> Obtained:
    """The facts ``request`` asks for, with its logs scanned in (and, with ``redact``, the
    host's identity hidden in both).

    Options that do not combine, a ``--host-root`` that is not a directory and a timeout that
    is not a number are UserErrors raised before anything is read; so is a facts file that
    cannot be read or decoded."""
    _check_request(request)
    stack: StackFacts | Unavailable | None = None
    if request.facts_file is not None:
        facts = read_facts_file(request.facts_file, stdin=stdin)
        source = request.label or str(request.facts_file)
    else:
        from blackwell_doctor.collect.host import collect_facts

        sections, left_out = collected_sections(request)
        collect = functools.partial(
            collect_facts,
            host_root=checked_host_root(request.host_root),
            environ=environ,
            gpu_timeout_s=finite_seconds(
                "--gpu-timeout",
                DEFAULT_GPU_TIMEOUT_S if request.gpu_timeout_s is None else request.gpu_timeout_s,
            ),
            probes=request.probes,
            sections=sections,
            left_out=left_out,
        )
        if request.stack and request.image is None:
            facts, stack = _collect_beside_stack(collect, request, environ=environ)
        else:
            facts = collect()
        source = "live"
    facts = with_logs(facts, request.logs, host_root=request.host_root, stdin=stdin)
    facts = with_model(
        facts,
        request.model_dir,
        required=request.facts_file is None,
        hub=request.model_hub,
        usable=not request.model_mount,
    )
    facts = with_bench(facts, request.bench_file, stdin=stdin)
    if stack is not None:
        facts = msgspec.structs.replace(facts, stack=stack)
    elif request.stack:
        facts = with_stack(facts, request, environ=environ)
    if request.redact:
        from blackwell_doctor.facts.redact import redact_identity

        facts = redact_identity(facts)
    return Obtained(facts, source)


# What every report's header reads besides the checks: the host's name (platform) and its
# GPUs, from NVML, else from PCI (read in milliseconds, so that a run which starts no GPU
# child still names them).
HEADER_READS: frozenset[Section] = frozenset(("platform", "pci"))


def collected_sections(request: FactsRequest) -> tuple[frozenset[Section] | None, str]:
    """The sections of the facts a live run of ``request`` collects (None: all) and the
    reason a section left out carries: with --select/--ignore, those the checks they leave
    read (their declarations: :func:`blackwell_doctor.rules.engine.needed_sections`), the
    header's and the output's. A pattern that names no check is a UserError, said before
    anything is collected."""
    if not (request.select or request.ignore):
        return None, ""
    from blackwell_doctor.facts.document import NOT_COLLECTED
    from blackwell_doctor.ruledata.rules import load_rule_data
    from blackwell_doctor.rules.engine import SelectionError, needed_sections

    try:
        needed = needed_sections(load_rule_data(), request.select, request.ignore)
    except SelectionError as exc:
        raise UserError(str(exc)) from None
    option = "--select" if request.select else "--ignore"
    return needed | HEADER_READS | request.output_reads, f"{NOT_COLLECTED}:{option}"


def _collect_beside_stack(
    collect: Callable[[], Facts], request: FactsRequest, *, environ: Mapping[str, str]
) -> tuple[Facts, StackFacts | Unavailable]:
    """``collect()`` (this host's facts: mostly waiting on the GPU child, ~0.5 s) on a
    thread of its own while this one reads the stack (the interpreter asked, the scan,
    ptxas for the catalogue's targets), then ptxas for the GPUs' own targets once their
    facts are in: ``audit`` costs the longer of the two, not their sum (issue 36). An
    interpreter that does not answer is said once the facts are in, as before; the thread
    is a daemon: Ctrl-C leaves a GPU child to its deadline, as it did before."""
    facts = _Beside(collect)
    try:
        stack = _read_stack_of(request, environ=environ, gpu_facts=facts.result)
    except Exception:
        with contextlib.suppress(Exception):
            facts.result()  # no GPU child left running behind a usage error
        raise
    return facts.result(), stack


class _Beside:
    """``work()`` on a daemon thread; :meth:`result` waits for its value or raises what it
    raised."""

    def __init__(self, work: Callable[[], Facts]) -> None:
        self._value: list[Facts] = []
        self._error: list[BaseException] = []
        self._thread = threading.Thread(target=self._run, args=(work,), daemon=True)
        self._thread.start()

    def _run(self, work: Callable[[], Facts]) -> None:
        try:
            self._value.append(work())
        except BaseException as exc:  # raised where the value is asked for
            self._error.append(exc)

    def result(self) -> Facts:
        self._thread.join()
        if self._error:
            raise self._error[0]
        return self._value[0]


def with_stack(facts: Facts, request: FactsRequest, *, environ: Mapping[str, str]) -> Facts:
    """``facts`` with the Python GPU stack of ``request.python`` (None: this interpreter)
    read into ``facts.stack``; ptxas is asked for the facts' GPUs' targets too. An
    interpreter that does not answer is a UserError (the user named it)."""
    import msgspec

    stack = _read_stack_of(request, environ=environ, gpu_facts=lambda: facts)
    return msgspec.structs.replace(facts, stack=stack)


def _gpu_targets(probe: Sequence[str], facts: Facts) -> list[str]:
    """The ``sm_XYa`` ptxas targets of the facts' GPUs, in order, that ``probe`` (the
    catalogue's) leaves out."""
    from blackwell_doctor.facts.document import NvmlFacts

    targets: list[str] = []
    if isinstance(facts.nvml, NvmlFacts):
        for g in facts.nvml.gpus:
            if isinstance(g.compute_capability, tuple):
                t = f"sm_{g.compute_capability[0]}{g.compute_capability[1]}a"
                if t not in probe and t not in targets:
                    targets.append(t)
    return targets


def _read_stack_of(
    request: FactsRequest, *, environ: Mapping[str, str], gpu_facts: Callable[[], Facts]
) -> StackFacts | Unavailable:
    """The Python GPU stack ``request`` names (see :func:`with_stack`); ``gpu_facts``
    gives the facts whose GPUs' targets ptxas is asked for after the catalogue's, and is
    called only when they are needed."""
    from blackwell_doctor.collect.stack.cache import default_cache_path
    from blackwell_doctor.collect.stack.interpreter import (
        InterpreterError,
        ask_interpreter,
        this_interpreter,
    )
    from blackwell_doctor.collect.stack.inventory import read_stack
    from blackwell_doctor.ruledata.stack import load_stack_data

    data = load_stack_data()
    probe = list(data.ptxas.probe)
    if request.image is not None:
        from blackwell_doctor.collect.stack.cache import default_image_cache_path
        from blackwell_doctor.collect.stack.image import read_image_stack

        return read_image_stack(
            request.image,
            data,
            ptxas_targets=probe + _gpu_targets(probe, gpu_facts()),
            environ=environ,
            cache_path=default_image_cache_path(environ) if request.stack_cache else None,
        )
    if request.python is None:
        interpreter = this_interpreter()
    else:
        try:
            interpreter = ask_interpreter(request.python, environ=environ)
        except InterpreterError as exc:
            raise UserError(str(exc)) from None
    return read_stack(
        interpreter,
        data,
        ptxas_targets=probe,
        more_targets=lambda: _gpu_targets(probe, gpu_facts()),
        environ=environ,
        cache_path=default_cache_path(environ) if request.stack_cache else None,
    )


def require_something_to_audit(facts: Facts) -> None:
    """``audit`` with nothing to audit is a usage error (issue 40: an input the user named,
    or the interpreter it defaults to, that cannot be used is exit 2 on every command):
    an environment (an interpreter, an image's) with none of the GPU packages audit reads
    (checks/stack.toml [inventory]). A stack that could not be read (a Docker engine that is
    down) is the host's state, said in the report as before (``stack.kernels`` not
    evaluated, exit 3 under --strict)."""
    from blackwell_doctor.facts.stack import StackFacts

    stack = facts.stack
    if not isinstance(stack, StackFacts) or stack.packages:
        return
    where = f"image {stack.image.ref}'s {stack.python}" if stack.image else stack.python
    raise UserError(
        f"nothing to audit: {where} (Python {stack.python_version}) has none of the GPU "
        "packages audit reads (torch, vllm, sglang, flashinfer, triton, nvidia-*, ...: "
        "checks/stack.toml [inventory]); give --python the runtime's interpreter, or --image"
    )


def written_words(facts: Facts, path: str) -> str:
    """What ``collect -o PATH`` says it wrote, and how to judge it (checks/catalogue.toml
    [words.collect])."""
    from blackwell_doctor.facts.document import LogFacts, NvmlFacts
    from blackwell_doctor.ruledata.rules import load_rule_data

    rules = load_rule_data()
    gpus = len(facts.nvml.gpus) if isinstance(facts.nvml, NvmlFacts) else 0
    extras = ""
    if isinstance(facts.logs, LogFacts):
        extras += rules.word("collect", "logs", n=str(len(facts.logs.sources)))
    if facts.model is not None:
        extras += rules.word("collect", "model")
    if facts.bench is not None:
        extras += rules.word("collect", "bench")
    return rules.word("collect", "wrote", path=path, gpus=str(gpus), extras=extras)


def with_bench(facts: Facts, bench_file: Path | None, *, stdin: BinaryIO) -> Facts:
    """``facts`` with the bench run in ``bench_file`` (``-``: standard input) as its bench
    section; a file that cannot be read or is not a bench run is a UserError."""
    if bench_file is None:
        return facts
    import msgspec

    from blackwell_doctor.collect.inputfile import BENCH_RUN, read_input
    from blackwell_doctor.report.bench_facts import BenchFileError, read_bench

    data = read_input(bench_file, BENCH_RUN, stdin=stdin)
    try:
        bench = read_bench(data, source=str(bench_file))
    except BenchFileError as exc:
        raise UserError(f"--bench {exc}") from None
    return msgspec.structs.replace(facts, bench=bench)


def with_logs(facts: Facts, logs: LogRequest, *, host_root: Path | None, stdin: BinaryIO) -> Facts:
    """``facts`` with the logs of ``logs`` scanned in (unchanged when none is asked for)."""
    if not logs.requested:
        return facts
    import msgspec

    from blackwell_doctor.collect.logs.scan import readable, scan_sources
    from blackwell_doctor.facts.document import Unavailable

    scanned = scan_sources(
        paths=logs.paths,
        containers=logs.containers,
        journal=logs.journal,
        kernel_log=logs.kernel_log,
        host_root=host_root or Path("/"),
        stdin=stdin if logs.reads_stdin else None,
    )
    if scanned.sources and not any(readable(s) for s in scanned.sources):
        # The user named files and none could be read: a usage error (README: exit 2), not
        # a report whose log checks all say "not evaluated".
        _refuse_unreadable(scanned, logs, option="--logs: ")
        first = scanned.sources[0].error or "unreadable"
        return msgspec.structs.replace(facts, logs=Unavailable(f"no-log-readable:{first}"))
    return msgspec.structs.replace(facts, logs=scanned)


def _refuse_unreadable(scanned: LogFacts, logs: LogRequest, *, option: str = "") -> None:
    """The UserError of ``check --logs`` and ``scan-logs`` alike (issue 40: one behaviour)
    when only files (directories, globs) were named and not one could be read: the first
    source's reason token, and what a directory scan skipped. A container, the journal or
    the kernel log among them: not a usage error (the host's state, said in the report)."""
    from blackwell_doctor.collect.logs.scan import readable
    from blackwell_doctor.rules.logs import skipped_words

    if logs.containers or logs.journal or logs.kernel_log:
        return
    if not scanned.sources or any(readable(s) for s in scanned.sources):
        return
    reason = scanned.sources[0].error or "unreadable"
    skipped = skipped_words(scanned.skipped)
    raise UserError(
        f"{option}no log could be read ({reason}{'; skipped: ' + skipped if skipped else ''})"
    )


def with_model(
    facts: Facts,
    model_dir: Path | None,
    *,
    required: bool,
    hub: bool = False,
    usable: bool = True,
) -> Facts:
    """``facts`` with the model read into ``facts.model``: a directory, or ORG/NAME[@REVISION]
    from the local Hugging Face cache (``hub``: from the Hub over HTTP). ``required``: the
    model must be found here (a live run); otherwise one that is not here leaves the facts
    as they are (it is on the node the facts come from). ``usable``: one found with neither
    a usable config.json nor weights is a UserError (:func:`read_model_arg`)."""
    if model_dir is None:
        return facts
    model = read_model_arg(
        model_dir, hub=hub, required=required, option="--model-dir ", usable=usable
    )
    if model is None:
        return facts
    import msgspec

    return msgspec.structs.replace(facts, model=model)


def read_model_arg(
    model_dir: Path, *, hub: bool, required: bool, option: str = "", usable: bool = True
) -> ModelFacts | None:
    """The model a ``DIR`` / ``ORG/NAME[@REVISION]`` argument names (docs/model.md): an
    existing directory first; else a repo id, from the Hugging Face cache, or with ``hub``
    from the Hub. None when it is not here and not ``required``; UserError (one line, exit
    2) for anything that cannot be read (a hostile cache included), and (``usable``) for a
    model with neither a usable config.json nor safetensors weights; ``option`` (e.g.
    ``"--model-dir "``) leads the message where the argument came from an option."""
    text = str(model_dir)
    if not hub and model_dir.is_dir():
        from blackwell_doctor.collect.model.scan import read_model_dir

        return _usable(read_model_dir(model_dir), f"{option}{text}", usable)
    from blackwell_doctor.collect.model.hfcache import (
        CacheError,
        NotCached,
        parse_repo_spec,
        resolve_cached,
    )

    try:
        spec = parse_repo_spec(text)
        if spec is None:
            if hub:
                raise UserError(f"--hub reads ORG/NAME[@REVISION] from the Hub, not {text}")
            if not required:
                return None
            raise UserError(
                f"{option}{text} is not a directory"
                " (nor a Hugging Face repo id ORG/NAME[@REVISION])"
            )
        if hub:
            from blackwell_doctor.collect.model.hub import read_hub_model

            return _usable(read_hub_model(spec), f"{option}{text}", usable)
        cached = resolve_cached(spec)
    except NotCached as exc:
        if not required:
            return None
        raise UserError(str(exc)) from None
    except CacheError as exc:
        raise UserError(str(exc)) from None
    from blackwell_doctor.collect.model.scan import DirectoryFiles, read_model

    model = read_model(
        DirectoryFiles(cached.folder, confine=cached.repo_folder),
        label=f"{spec.repo}@{spec.revision}",
        source=cached.source,
    )
    return _usable(model, f"{option}{text}", usable)


def _usable(model: ModelFacts, named: str, usable: bool) -> ModelFacts:
    """``model``, unless it has neither a usable config.json nor safetensors weights: then
    the UserError ``model DIR`` and ``check --model-dir DIR`` alike give (issue 40: check
    showed three ``[error]`` rows and exit 0). A config of a family not modelled is usable
    (the model checks say so)."""
    if (
        not usable
        or model.arch is not None
        or model.shards
        or any(p.kind == "not-modelled" for p in model.problems)
    ):
        return model
    detail = next((p.detail for p in model.problems if p.kind == "config"), "missing")
    raise UserError(f"{named}: no usable config.json ({detail}) and no safetensors weights")


def obtain_logs(
    logs: LogRequest,
    *,
    host_root: Path | None,
    stdin: BinaryIO,
    progress: Progress | None = None,
) -> LogFacts:
    """The logs alone (``scan-logs``): every source, an unreadable one with its error.
    Files (and directories, globs) named and none readable is a UserError in
    ``check --logs``'s words (issue 40: one behaviour); a container, the journal or the
    kernel log that could not be read is said in the document (exit 2 by
    :func:`~blackwell_doctor.rules.presets.judge_logs`). ``progress``: called as the scan
    goes (collect/logs/scan.py)."""
    _check_logs(logs)
    root = checked_host_root(host_root)
    from blackwell_doctor.collect.logs.scan import scan_sources

    scanned = scan_sources(
        paths=logs.paths,
        containers=logs.containers,
        journal=logs.journal,
        kernel_log=logs.kernel_log,
        host_root=root,
        stdin=stdin if logs.reads_stdin else None,
        progress=progress,
    )
    _refuse_unreadable(scanned, logs)
    return scanned


def checked_host_root(host_root: Path | None) -> Path:
    root = host_root or Path("/")
    if not root.is_dir():
        raise UserError(f"--host-root {root} is not a directory")
    return root


def finite_seconds(option: str, value: float) -> float:
    """``value``, which must be a number: typer's min=/max= let NaN through (every
    comparison with NaN is false)."""
    if not math.isfinite(value):
        raise UserError(f"{option} must be a finite number of seconds, got {value}")
    return value


def _check_logs(logs: LogRequest) -> None:
    if list(logs.paths).count(STDIN) > 1:
        raise UserError("- (standard input) can be given only once")


# A Docker image reference (distribution/reference's grammar: [host[:port]/]path[:tag]
# [@digest]) or an image id; anything else is a usage error before the engine is asked.
# Compiled when an --image is given (re's cache), not at every command's start-up.
_IMAGE_REF = (
    r"^(?:[a-zA-Z0-9-]+(?:\.[a-zA-Z0-9-]+)*(?::[0-9]+)?/)?"
    r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*(?:/[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*)*"
    r"(?::\w[\w.-]{0,127})?(?:@[a-z0-9]+(?:[-_+.][a-z0-9]+)*:[0-9a-f]{32,})?$"
    r"|^(?:sha256:)?[0-9a-f]{12,64}$"
)


def _check_request(request: FactsRequest) -> None:
    _check_logs(request.logs)
    if request.image is not None:
        if request.python is not None:
            raise UserError("--image and --python both name the environment to audit: give one")
        if len(request.image) > 512 or not re.fullmatch(_IMAGE_REF, request.image):
            raise UserError(f"--image {request.image!r} is not an image reference (NAME[:TAG])")
    if str(request.bench_file) == STDIN and (
        request.logs.reads_stdin or str(request.facts_file) == STDIN
    ):
        raise UserError("--bench - cannot share standard input with --facts - or --logs -")
    if request.facts_file is None:
        return
    for name, given in (
        ("--host-root", request.host_root),
        ("--gpu-timeout", request.gpu_timeout_s),
    ):
        if given is not None:
            raise UserError(f"{name} applies to collecting on this host, not to --facts")
    logs = request.logs
    if logs.containers or logs.journal or logs.kernel_log:
        raise UserError(
            "--container, --journal and --kernel-log read this host; with --facts, "
            "pass that host's log files with --logs"
        )
    if logs.reads_stdin and str(request.facts_file) == STDIN:
        raise UserError("--facts - and --logs - cannot both read standard input")


class FactsFileError(UserError):
    """A facts file that cannot be used. The message names the file (``check --facts``
    says it as it is); ``reason`` does not (``fleet`` lists it beside the file)."""

    def __init__(self, message: str, reason: str) -> None:
        super().__init__(message)
        self.reason = reason


def read_facts_file(path: Path, *, stdin: BinaryIO | None = None) -> Facts:
    """The facts document at ``path`` (``-``: ``stdin``, when given): the one reader of facts
    files, for every command (``check/recommend/apply/model/slurm-health --facts`` and each
    file of ``fleet``). Read by the bounded reader (64 MiB:
    :data:`blackwell_doctor.collect.inputfile.FACTS`) and decoded once;
    :class:`FactsFileError` when it cannot be read or is not a facts document."""
    return decode_facts_file(read_facts_bytes(path, stdin=stdin), path)


def read_facts_bytes(path: Path | str, *, stdin: BinaryIO | None = None) -> bytes:
    """The first half of :func:`read_facts_file`: the bytes of ``path``, read by the bounded
    reader, or :class:`FactsFileError` (``fleet`` looks at them before decoding: a node it
    has seen the like of is not decoded twice)."""
    from blackwell_doctor.collect.inputfile import FACTS, InputError, read_input

    try:
        return read_input(path, FACTS, stdin=stdin)
    except InputError as exc:
        raise FactsFileError(str(exc), f"cannot read: {exc.reason}") from None


def decode_facts_file(data: bytes, path: Path | str) -> Facts:
    """The second half of :func:`read_facts_file`: ``data``, read from ``path``, decoded, or
    :class:`FactsFileError`."""
    from blackwell_doctor.facts.document import FactsError, decode_facts

    source = str(path)
    try:
        return decode_facts(data, source=source)
    except FactsError as exc:
        text = str(exc)
        reason = text.removeprefix(f"{source}: ")
        raise FactsFileError(text, reason) from None
