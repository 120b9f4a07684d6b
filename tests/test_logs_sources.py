"""Inputs the scanner must survive: gzip, docker json-file, stdin, directories, globs,
unreadable paths, long lines, chunk boundaries, the kernel log, journal and containers."""

from __future__ import annotations

import gzip
import io
import json
import os
import random
from pathlib import Path

import msgspec
import pytest

from blackwell_doctor.collect.logs import matcher, sources
from blackwell_doctor.collect.logs.matcher import SourceScanner
from blackwell_doctor.collect.logs.scan import collect_logs, scan_sources
from blackwell_doctor.facts.document import LogFacts, LogFinding, Unavailable
from blackwell_doctor.ruledata.logs import load_catalogue
from blackwell_doctor.rules.logs import judge_findings
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"
ESCAPED = (LOGS / "flashinfer-2077-tma-escaped.log").read_bytes()


# The log-end rule's record (the source ends in an error line: ESCAPED does): a structural
# fact, tested on its own below (test_log_end_is_seen_through_every_transport).
LOG_END = "runtime.log_ends_in_error"


def facts(paths: list[str], *, log_end: bool = False, **kw: object) -> LogFacts:
    """The scan's facts; the log-end record left out unless ``log_end``."""
    args: dict[str, object] = {
        "containers": [], "journal": False, "kernel_log": False, "host_root": Path("/"),
    }  # fmt: skip
    args.update(kw)
    got = scan_sources(paths=paths, **args)  # type: ignore[arg-type]
    if log_end:
        return got
    kept = [f for f in got.findings if f.signature != LOG_END]
    return msgspec.structs.replace(got, findings=kept)


GENERIC = {"runtime.unrecognised_error", "runtime.unrecognised_fatal_error"}


def sigs(f: LogFacts) -> set[tuple[str, int]]:
    return {(x.signature, x.line) for x in f.findings}


def test_rotated_gzip_is_read_by_its_magic(tmp_path: Path) -> None:
    path = tmp_path / "vllm.log.1"  # no .gz extension: the magic bytes decide
    path.write_bytes(gzip.compress(ESCAPED))
    got = facts([str(path)])
    assert got.sources[0].kind == "gzip"
    assert sigs(got) == {("moe.tma_ws_init_failed", 2)}


def test_truncated_gzip_keeps_what_was_read(tmp_path: Path) -> None:
    data = gzip.compress(ESCAPED * 2000)
    path = tmp_path / "cut.gz"
    path.write_bytes(data[: len(data) // 2])
    got = facts([str(path)])
    source = got.sources[0]
    assert source.error == f"truncated-gzip:{path}"
    assert source.bytes > 0
    # The line cut in the middle is an error record whose known text was cut off: only the
    # generic detector can read it.
    assert {f.signature for f in got.findings} - GENERIC == {
        "moe.tma_ws_init_failed", "input.partially_read",
    }  # fmt: skip
    (partial,) = [f for f in judge_findings(got) if f.signature == "input.partially_read"]
    assert (partial.severity, partial.check, partial.path) == ("warn", "logs.inputs", str(path))
    assert (partial.line, partial.excerpt) == (source.lines, f"truncated-gzip:{path}")


def test_docker_json_file_is_decoded(tmp_path: Path) -> None:
    lines = ESCAPED.decode().splitlines(keepends=True)
    # A long line split by the json-file driver into two records (no newline in the first).
    head, tail = lines[1][:50], lines[1][50:]
    records = [lines[0], head, tail]
    path = tmp_path / "abc-json.log"
    path.write_text(
        "".join(
            json.dumps({"log": r, "stream": "stderr", "time": "2025-11-11T06:41:27.3Z"}) + "\n"
            for r in records
        )
    )
    got = facts([str(path)])
    (finding,) = got.findings
    assert (finding.signature, finding.line) == ("moe.tma_ws_init_failed", 2)
    assert finding.excerpt.startswith("(Worker_PP0 pid=38385) ERROR")


def test_stdin(tmp_path: Path) -> None:
    got = facts(["-"], stdin=io.BytesIO(ESCAPED))
    assert got.sources[0].kind == "stdin"
    assert sigs(got) == {("moe.tma_ws_init_failed", 2)}


def test_directory_and_glob(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.log").write_bytes(ESCAPED)
    (tmp_path / "two.log").write_bytes(ESCAPED)
    by_dir = facts([str(tmp_path)])
    assert sorted(Path(s.name).name for s in by_dir.sources) == ["one.log", "two.log"]
    by_glob = facts([str(tmp_path / "**" / "*.log")])
    assert len(by_glob.findings) == 2


def test_unreadable_path_among_readable_is_a_source_error(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_bytes(ESCAPED)
    missing = tmp_path / "missing.log"
    result = collect_logs(
        paths=[str(good), str(missing)], containers=[], journal=False, kernel_log=False,
        host_root=Path("/"),
    )  # fmt: skip
    assert isinstance(result, LogFacts)
    assert [s.error for s in result.sources] == [None, f"not-found:{missing}"]


def test_nothing_readable_is_unavailable(tmp_path: Path) -> None:
    result = collect_logs(
        paths=[str(tmp_path / "nope.log")], containers=[], journal=False, kernel_log=False,
        host_root=Path("/"),
    )  # fmt: skip
    assert isinstance(result, Unavailable)
    assert result.reason.startswith("no-log-readable:not-found:")


@pytest.mark.skipif(os.geteuid() == 0, reason="root reads everything")
def test_permission_denied(tmp_path: Path) -> None:
    path = tmp_path / "secret.log"
    path.write_bytes(ESCAPED)
    path.chmod(0)
    assert facts([str(path)]).sources[0].error == f"permission-denied:{path}"


def test_fifo_is_refused_not_waited_on(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    assert facts([str(fifo)]).sources[0].error == f"not-a-regular-file:{fifo}"


def test_crlf_nul_and_invalid_utf8(tmp_path: Path) -> None:
    path = tmp_path / "dirty.log"
    path.write_bytes(b"\xff\xfe\x00garbage\r\n" + ESCAPED.replace(b"\n", b"\r\n") + b"\x00\x80")
    got = facts([str(path)])
    assert sigs(got) == {("moe.tma_ws_init_failed", 3)}
    assert got.sources[0].lines == 4


@pytest.mark.parametrize("size", [1, 7, 64, 4096])
def test_any_chunking_gives_the_same_findings(size: int) -> None:
    data = b"".join((LOGS / n).read_bytes() for n in sorted(os.listdir(LOGS)) if n.endswith(".log"))
    whole = SourceScanner(load_catalogue(), "x")
    whole.feed(data)
    pieces = SourceScanner(load_catalogue(), "x")
    for i in range(0, len(data), size):
        pieces.feed(data[i : i + size])
    assert whole.finish() == pieces.finish()
    assert whole.lines == pieces.lines == data.count(b"\n") + (not data.endswith(b"\n"))


def test_a_line_longer_than_the_chunk_is_searched_in_pieces(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setattr(matcher, "LONG_LINE_BYTES", 1 << 16)
    scanner = SourceScanner(load_catalogue(), "long")
    scanner.feed(b"first line\n")
    literal = b"No NvFp4 MoE backend supports the deployment configuration."
    blob = b"x" * (3 << 16)
    # The literal straddles a feed boundary in the middle of a 400 KiB line.
    scanner.feed(blob + literal[:10])
    scanner.feed(literal[10:] + blob)
    assert len(scanner._carry) < (1 << 16) + 8192  # never the whole line
    scanner.feed(b"\nlast\n")
    (finding,) = scanner.finish()
    assert (finding.signature, finding.line, finding.count) == ("vllm.no_nvfp4_moe_backend", 2, 1)
    assert len(finding.excerpt) <= matcher.EXCERPT_CHARS
    assert scanner.lines == 3


def test_kernel_log_from_kmsg_records(tmp_path: Path) -> None:
    (tmp_path / "dev").mkdir()
    (tmp_path / "dev" / "kmsg").write_bytes(
        b"3,1180,1843500000,-;NVRM: Xid (PCI:0000:44:00): 79, GPU has fallen off the bus.\n"
        b" SUBSYSTEM=pci\n DEVICE=+pci:0000:44:00.0\n"
        b"4,1181,1843600000,-;nvidia 0000:44:00.0: AMD-Vi: Event logged [IO_PAGE_FAULT "
        b"domain=0x0012 address=0xff6101b0 flags=0x0070]\n"
    )
    got = facts([], kernel_log=True, host_root=tmp_path)
    assert got.sources[0].kind == "kernel"
    assert got.sources[0].error is None
    assert sigs(got) == {("kernel.xid_fallen_off_bus", 1), ("kernel.amd_vi_io_page_fault", 2)}
    assert got.findings[0].excerpt.startswith("[")


def test_kernel_log_missing_under_a_host_root_is_a_source_error(tmp_path: Path) -> None:
    got = facts([], kernel_log=True, host_root=tmp_path)
    assert got.sources[0].error == "not-found:/dev/kmsg"


def test_missing_journalctl_is_a_source_error(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("PATH", "/nonexistent")
    got = facts([], journal=True)
    assert got.sources[0].error == "not-found:journalctl"


def test_failing_command_is_a_source_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\necho 'Failed to open: Permission denied' >&2\nexit 1\n")
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    assert facts([], journal=True).sources[0].error == "permission-denied:journal"


def test_hung_command_times_out(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from blackwell_doctor.collect.logs import sources

    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\necho 'NCCL INFO P2P is disabled between connected GPUs 1 and 0.'\n"
                    "exec /bin/sleep 30\n")  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    # The deadline counts from the command's start, and the line must be printed before it:
    # 3 s, not 0.5 s, so that a shell started on a loaded CI machine (load 10+, where 0.5 s
    # once passed before `echo` ran) still prints first. The hang itself is 30 s.
    monkeypatch.setattr(sources, "JOURNAL_TIMEOUT_S", 3.0)
    got = facts([], journal=True)
    assert got.sources[0].error == "timeout-3s:journal"
    # What it printed before hanging, and that it broke off.
    assert sigs(got) == {("nccl.p2p_disabled", 1), ("input.partially_read", 1)}


def test_unreachable_docker_engine_is_a_source_error(tmp_path: Path) -> None:
    got = facts([], containers=["vllm"], docker_host=f"unix://{tmp_path}/no.sock")
    (source,) = got.sources
    assert source.name == "container:vllm"
    assert source.kind == "container"
    assert source.error is not None
    assert source.error.endswith("container:vllm")


# --------------------------------------------------------------------------- review fixes


def test_unreadable_among_readable_is_a_finding(tmp_path: Path) -> None:
    good = tmp_path / "good.log"
    good.write_bytes(ESCAPED)
    missing = tmp_path / "missing.log"
    got = facts([str(good), str(missing)])
    (finding,) = [f for f in judge_findings(got) if f.path == str(missing)]
    assert finding.signature == "input.unreadable"
    assert (finding.severity, finding.check) == ("warn", "logs.inputs")
    assert (finding.line, finding.count, finding.excerpt) == (0, 1, f"not-found:{missing}")


def test_corrupt_gzip_is_a_partial_source(tmp_path: Path) -> None:
    # Seeded, and damaged well past the first step of compressed input (_GZIP_STEP): a
    # damaged step loses its own output, so with os.urandom and the damage inside the first
    # step (1 run in about 30: zlib saw the zeros at once) nothing was read ("unreadable").
    text = random.Random(19).randbytes(1 << 19).hex().encode()
    data = bytearray(gzip.compress(text + b"\n" + ESCAPED))
    assert len(data) // 2 > 2 * sources._GZIP_STEP
    data[len(data) // 2 : len(data) // 2 + 64] = b"\x00" * 64
    path = tmp_path / "bad.gz"
    path.write_bytes(bytes(data))
    got = facts([str(path)])
    assert got.sources[0].error == f"corrupt-gzip:{path}"
    assert [f.signature for f in got.findings] == ["input.partially_read"]


def test_gzip_members_and_zero_padding(tmp_path: Path) -> None:
    path = tmp_path / "two.gz"
    path.write_bytes(gzip.compress(ESCAPED) + gzip.compress(ESCAPED) + b"\x00" * 512)
    got = facts([str(path)])
    assert got.sources[0].error is None
    assert sigs(got) == {("moe.tma_ws_init_failed", 2)}
    assert got.findings[0].count == 2
    assert got.sources[0].lines == 4


def test_gzip_on_stdin_is_decoded() -> None:
    got = facts(["-"], stdin=io.BytesIO(gzip.compress(ESCAPED)))
    assert (got.sources[0].kind, got.sources[0].error) == ("stdin", None)
    assert got.sources[0].bytes == len(ESCAPED)
    assert sigs(got) == {("moe.tma_ws_init_failed", 2)}


def test_truncated_gzip_on_stdin_is_partial() -> None:
    data = gzip.compress(ESCAPED * 2000)
    got = facts(["-"], stdin=io.BytesIO(data[: len(data) // 2]))
    assert got.sources[0].error == "truncated-gzip:-"
    # The line cut in the middle is an error record whose known text was cut off: only the
    # generic detector can read it.
    assert {f.signature for f in got.findings} - GENERIC == {
        "moe.tma_ws_init_failed", "input.partially_read",
    }  # fmt: skip


def test_log_end_is_seen_through_every_transport(tmp_path: Path) -> None:
    """ESCAPED ends in its error record (line 2): the log-end rule reads the lines as
    decoded, whether they came plain, in Docker's json-file, gzip or on stdin."""
    plain = tmp_path / "plain.log"
    plain.write_bytes(ESCAPED)
    docker = tmp_path / "c-json.log"
    docker.write_bytes(_docker(ESCAPED.decode().splitlines(keepends=True)))
    rotated = tmp_path / "c-json.log.1.gz"
    rotated.write_bytes(gzip.compress(docker.read_bytes()))
    got = facts([str(plain), str(docker), str(rotated)], log_end=True)
    ends = sorted((f.path, f.line, f.last_line) for f in got.findings if f.signature == LOG_END)
    assert ends == sorted((str(p), 2, 2) for p in (plain, docker, rotated))
    piped = facts(["-"], stdin=io.BytesIO(gzip.compress(ESCAPED)), log_end=True)
    assert [(f.line, f.count) for f in piped.findings if f.signature == LOG_END] == [(2, 1)]
    # The same lines with a record after them: no error run at the end.
    plain.write_bytes(ESCAPED + b"(Worker_PP0 pid=38385) INFO 11-11 06:43:11 [x.py:1] ok\n")
    assert LOG_END not in {f.signature for f in facts([str(plain)], log_end=True).findings}


def _docker(records: list[str]) -> bytes:
    return "".join(json.dumps({"log": r, "stream": "stderr"}) + "\n" for r in records).encode()


def test_docker_json_kind_is_reported(tmp_path: Path) -> None:
    from blackwell_doctor.collect.logs.sources import DOCKER_JSON_KIND

    plain = tmp_path / "plain.log"
    plain.write_bytes(ESCAPED)
    docker = tmp_path / "c-json.log"
    docker.write_bytes(_docker(ESCAPED.decode().splitlines(keepends=True)))
    rotated = tmp_path / "c-json.log.1.gz"  # json-file with compress=true
    rotated.write_bytes(gzip.compress(docker.read_bytes()))
    got = facts([str(plain), str(docker), str(rotated)])
    assert [s.kind for s in got.sources] == ["file", DOCKER_JSON_KIND, "gzip"]
    assert sorted((f.path, f.line) for f in got.findings) == sorted(
        [(str(plain), 2), (str(docker), 2), (str(rotated), 2)]
    )
    # Decoded: the excerpt is the log line, not the JSON record.
    assert all(f.excerpt.startswith("(Worker_PP0 pid=38385) ERROR") for f in got.findings)


def test_directory_walk_reports_what_it_cannot_read(tmp_path: Path) -> None:
    """A log-named entry that cannot be read is a source with its reason; one not named
    like a log is skipped and counted, whatever it is (issue 40)."""
    import socket

    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "one.log").write_bytes(ESCAPED)
    os.mkfifo(tmp_path / "a" / "fifo.log")
    os.mkfifo(tmp_path / "a" / "fifo")
    (tmp_path / "dangling.log").symlink_to(tmp_path / "gone.log")
    (tmp_path / "loop").symlink_to(tmp_path)  # followed once, not forever
    sock = socket.socket(socket.AF_UNIX)
    try:
        sock.bind(str(tmp_path / "s.out"))
        got = facts([str(tmp_path)])
    finally:
        sock.close()
    errors = {Path(s.name).name: s.error for s in got.sources}
    assert errors == {
        "one.log": None,
        "fifo.log": f"not-a-regular-file:{tmp_path / 'a' / 'fifo.log'}",
        "dangling.log": f"broken-symlink:{tmp_path / 'dangling.log'}",
        "s.out": f"not-a-regular-file:{tmp_path / 's.out'}",
    }
    unreadable = {Path(f.path).name for f in got.findings if f.signature == "input.unreadable"}
    assert unreadable == {"fifo.log", "dangling.log", "s.out"}
    assert got.skipped == {"not-log-named": 1}  # a/fifo


def test_unreadable_subdirectory_is_a_source_error(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import errno

    (tmp_path / "ok").mkdir()
    (tmp_path / "ok" / "one.log").write_bytes(ESCAPED)
    (tmp_path / "secret").mkdir()
    (tmp_path / "secret" / "two.log").write_bytes(ESCAPED)
    real = os.scandir

    def scandir(path: str) -> object:
        if str(path).endswith("secret"):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))
        return real(path)

    monkeypatch.setattr(os, "scandir", scandir)
    got = facts([str(tmp_path)])
    assert [(Path(s.name).name, s.error) for s in got.sources] == [
        ("one.log", None), ("secret", f"permission-denied:{tmp_path / 'secret'}"),
    ]  # fmt: skip
    assert {f.signature for f in got.findings} == {"moe.tma_ws_init_failed", "input.unreadable"}


def test_glob_reports_non_regular_matches(tmp_path: Path) -> None:
    (tmp_path / "a.log").write_bytes(ESCAPED)
    os.mkfifo(tmp_path / "b.log")
    got = facts([str(tmp_path / "*.log")])
    assert [s.error for s in got.sources] == [None, f"not-a-regular-file:{tmp_path / 'b.log'}"]


def test_excerpt_of_a_huge_line_is_centred_on_the_match() -> None:
    scanner = SourceScanner(load_catalogue(), "huge")
    literal = b"No NvFp4 MoE backend supports the deployment configuration."
    scanner.feed(b"(EngineCore pid=1) ERROR 06-01 21:52:10 [core.py:1] ")
    blob = b"A" * (1 << 20)
    for _ in range(25):  # 25 MiB before the match, 25 MiB after, one line
        scanner.feed(blob)
    scanner.feed(literal)
    for _ in range(25):
        scanner.feed(blob)
    (finding,) = scanner.finish()
    assert literal.decode() in finding.excerpt
    assert len(finding.excerpt) == matcher.EXCERPT_CHARS
    assert finding.excerpt.startswith("…")
    assert finding.excerpt.endswith("…")
    at = finding.excerpt.index(literal.decode())
    assert abs(at - (len(finding.excerpt) - at - len(literal))) <= 2  # centred


def test_excerpt_keeps_the_line_start_when_the_match_is_near_it() -> None:
    scanner = SourceScanner(load_catalogue(), "long")
    scanner.feed(b"(EngineCore pid=1) ERROR No NvFp4 MoE backend supports the deployment "
                 b"configuration. " + b"B" * 5000 + b"\n")  # fmt: skip
    (finding,) = scanner.finish()
    assert finding.excerpt.startswith("(EngineCore pid=1) ERROR No NvFp4")
    assert finding.excerpt.endswith("…")
    assert len(finding.excerpt) == matcher.EXCERPT_CHARS


def test_decompression_ahead_stops_when_the_scan_stops(tmp_path: Path) -> None:
    """gzip is inflated in a thread ahead of the scan: a consumer that stops early (an
    error, a closed generator) leaves no thread behind, and the file is closed."""
    import threading

    from blackwell_doctor.collect.logs.sources import open_file

    path = tmp_path / "big.log.gz"
    # 34 MiB inflated: more than the chunks the thread may run ahead, so it is blocked.
    path.write_bytes(gzip.compress(b"INFO a log line of text\n" * (3 << 19), compresslevel=1))
    kind, chunks = open_file(path)
    assert kind == "gzip"
    first = next(chunks)
    assert first
    chunks.close()  # type: ignore[attr-defined]
    assert not [t for t in threading.enumerate() if t.name == "scan-logs-gunzip"]


def test_a_long_line_fed_in_small_chunks_is_carried_in_place(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The sources hand 1 MiB chunks: a line of many chunks grows one carry in place (its
    length in copies, not the square of it) and finds what the line fed whole finds."""
    monkeypatch.setattr(matcher, "LONG_LINE_BYTES", 1 << 16)
    literal = b"No NvFp4 MoE backend supports the deployment configuration."
    data = b"first\n" + b"y" * 150_000 + literal + b"z" * 150_000 + b"\nlast\n"
    whole = SourceScanner(load_catalogue(), "long")
    whole.feed(data)
    pieces = SourceScanner(load_catalogue(), "long")
    for at in range(0, len(data), 1000):
        pieces.feed(data[at : at + 1000])
        assert len(pieces._carry) <= (1 << 16) + 1000
    (finding,) = pieces.finish()
    assert [finding] == whole.finish()
    assert (finding.line, pieces.lines) == (2, 3)


# --------------------------------------------------------------------------- lines of hits
# Issue 32: each hit on a long line cleaned the ~8 KiB window around it again: a 2 MB line of
# repeated "ERROR " took 15 s (0.95 s for the same bytes in lines), 10 MB over 60 s.

TMA = (
    b"(EngineCore pid=282) ERROR 06-01 21:52:10 [core.py:700] RuntimeError: "
    b"Failed to initialize cutlass TMA WS grouped gemm "
)
GENERIC_ERROR = b"ERROR 06-01 21:52:10 [core.py:700] boom ERROR Error NCCL WARN [E] "


class EveryHit(SourceScanner):
    """The scanner as it was: every hit examined, whatever was examined before it."""

    def _hit(self, buf: bytes, lo: int, hi: int, pos: int, lit: int, line: int) -> None:
        self._hits_stop.clear()
        super()._hit(buf, lo, hi, pos, lit, line)


def scanned(
    data: bytes, *, step: int = matcher.CHUNK_BYTES, every_hit: bool = False
) -> list[LogFinding]:
    scanner = (EveryHit if every_hit else SourceScanner)(load_catalogue(), "x")
    for i in range(0, len(data), step):
        scanner.feed(data[i : i + step])
    return list(scanner.finish())


def count_cleaning(monkeypatch: pytest.MonkeyPatch) -> list[int]:
    calls = [0]
    clean = matcher.clean_line

    def counted(raw: bytes) -> str:
        calls[0] += 1
        return clean(raw)

    monkeypatch.setattr(matcher, "clean_line", counted)
    return calls


@pytest.mark.parametrize("size", [256 << 10, 9 << 20], ids=["256 KiB", "9 MiB, in pieces"])
def test_a_line_of_hits_is_cleaned_once_a_window_not_once_a_hit(
    size: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    calls = count_cleaning(monkeypatch)
    line = b"ERROR " * (size // 6)
    hits = len(line) // 6
    assert scanned(b"INFO start\n" + line + b"\n") == []  # no record prefix: no finding
    # A window about every half WINDOW_BYTES step (a hit is passed over with half a window
    # after it examined: ~4,950 for 9 MiB, in pieces), linear in the line; before: one a hit
    # (43,690 and 1,572,864).
    assert calls[0] <= len(line) // (matcher.WINDOW_BYTES // 4), (calls[0], hits)


def test_lines_of_hits_are_cleaned_once_a_line(monkeypatch: pytest.MonkeyPatch) -> None:
    calls = count_cleaning(monkeypatch)
    data = (GENERIC_ERROR * 20 + b"\n") * 500
    (finding,) = [f for f in scanned(data) if f.signature == "runtime.unrecognised_error"]
    assert (finding.line, finding.last_line, finding.count) == (1, 500, 500)
    literals = {"ERROR", "Error", "NCCL WARN", "[E]"}
    assert calls[0] <= 500 * len(literals)  # before: a call for each of 100 hits a line


@pytest.mark.parametrize("step", [matcher.CHUNK_BYTES, 777])
@pytest.mark.parametrize(
    "data",
    [
        (TMA * 3 + b"\n" + GENERIC_ERROR * 10 + b"\n") * 50,
        b"INFO start\n" + TMA * 1000 + b"\nINFO next\n" + GENERIC_ERROR * 1000 + b"\n",
        b"x" * 5000 + GENERIC_ERROR * 1000 + b"\n" + b"[Autotuner]: Skipping tactic 3, due "
        b"to failure while profiling: " + TMA * 200 + b"\n",
    ],
    ids=["short lines", "long lines", "long lines, not from their start"],
)
def test_hits_left_unexamined_change_no_finding(data: bytes, step: int) -> None:
    """The findings (counts, lines, excerpts, context) are those of every hit examined."""
    assert scanned(data, step=step) == scanned(data, step=step, every_hit=True)


def test_a_repeat_whose_message_runs_past_the_last_window_is_examined() -> None:
    """Issue 32's review: a literal's second hit 4,050 bytes after its first, its words cut
    by the first hit's window, was passed over and the failure went unseen."""
    line = b"[Fp8 Gemm Runner] ok" + b"x" * 4050 + b"[Fp8 Gemm Runner] failed to initialize\n"
    assert "gemm.fp8_init_failed" in {f.signature for f in scanned(line)}
    assert scanned(line) == scanned(line, every_hit=True)


def test_a_long_line_is_found_as_its_content_split_once_a_line() -> None:
    """The same signature, counted once a line; the long line's excerpt is its first
    record's (then cut). (The log-end rule sees no line it cannot see the start of.)"""
    split = scanned((TMA + b"\n") * 2000)
    whole = scanned(TMA * 2000 + b"\n")
    tma = "moe.tma_ws_init_failed"
    (one,) = [f for f in split if f.signature == tma]
    (long,) = [f for f in whole if f.signature == tma]
    assert (one.line, one.last_line, one.count) == (1, 2000, 2000)
    assert (long.line, long.last_line, long.count) == (1, 1, 1)
    assert long.excerpt.startswith(one.excerpt)
    assert long.excerpt.endswith("…")


def test_the_hits_of_a_region_are_listed_a_chunk_at_a_time() -> None:
    scanner = SourceScanner(load_catalogue(), "x")
    find = scanner._finder
    longest = [0]

    def finder(buf: bytes, start: int, end: int) -> list[tuple[int, int]]:
        hits = find(buf, start, end)
        longest[0] = max(longest[0], len(hits))
        return hits

    scanner._finder = finder
    scanner.feed(b"ERROR " * ((9 << 20) // 6) + b"\n")  # a 9 MiB line, searched in pieces
    scanner.finish()
    over = load_catalogue().max_literal
    assert 0 < longest[0] <= (matcher.CHUNK_BYTES + over) // len(b"ERROR ") + 1, longest
