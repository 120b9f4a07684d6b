"""Inputs the scanner must survive: gzip, docker json-file, stdin, directories, globs,
unreadable paths, long lines, chunk boundaries, the kernel log, journal and containers."""

from __future__ import annotations

import gzip
import io
import json
import os
from pathlib import Path

import pytest

from blackwell_doctor.facts import LogFacts, Unavailable
from blackwell_doctor.logs import matcher
from blackwell_doctor.logs.catalogue import load_catalogue
from blackwell_doctor.logs.collect import collect_logs, scan_sources
from blackwell_doctor.logs.matcher import SourceScanner
from tests.conftest import FIXTURES

LOGS = FIXTURES / "logs"
ESCAPED = (LOGS / "flashinfer-2077-tma-escaped.log").read_bytes()


def facts(paths: list[str], **kw: object) -> LogFacts:
    args: dict[str, object] = {
        "containers": [], "journal": False, "kernel_log": False, "host_root": Path("/"),
    }  # fmt: skip
    args.update(kw)
    return scan_sources(paths=paths, **args)  # type: ignore[arg-type]


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
    assert got.sources[0].error == f"corrupt-gzip:{path}"
    assert got.findings
    assert got.findings[0].signature == "moe.tma_ws_init_failed"


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
    from blackwell_doctor.logs import sources

    fake = tmp_path / "journalctl"
    fake.write_text("#!/bin/sh\necho 'NCCL INFO P2P is disabled between connected GPUs 1 and 0.'\n"
                    "exec /bin/sleep 30\n")  # fmt: skip
    fake.chmod(0o755)
    monkeypatch.setenv("PATH", str(tmp_path))
    monkeypatch.setattr(sources, "JOURNAL_TIMEOUT_S", 0.5)
    got = facts([], journal=True)
    assert got.sources[0].error == "timeout-0.5s:journal"
    assert sigs(got) == {("nccl.p2p_disabled", 1)}  # what it printed before hanging


def test_unreachable_docker_engine_is_a_source_error(tmp_path: Path) -> None:
    got = facts([], containers=["vllm"], docker_host=f"unix://{tmp_path}/no.sock")
    (source,) = got.sources
    assert source.name == "container:vllm"
    assert source.kind == "container"
    assert source.error is not None
    assert source.error.endswith("container:vllm")
