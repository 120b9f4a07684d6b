"""Every file a user names on the command line goes through one bounded reader
(blackwell_doctor.collect.inputfile): a device is refused before a byte is read, a pipe or standard
input is refused after its kind's cap + 1 bytes, a regular file over the cap from its size,
bytes that are not UTF-8 are a usage error; a pipe under the cap (``<(...)``) and ``-`` keep
working. Each is one line on stderr and exit 2, never a crash (exit 4) or gigabytes read."""

from __future__ import annotations

import io
import os
import sys
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from blackwell_doctor.collect import inputfile
from blackwell_doctor.collect.inputfile import InputError, InputKind, read_input
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, FIXTURES, REPO

B200 = str(FACTS_FIXTURES / "b200-x8.json")
RUN = str(FIXTURES / "bench" / "run-v1.json")
SHAPES = "[shape.s]\ninput_tokens = 16\noutput_tokens = 8\nconcurrency = 1\nrequests = 1\n"


class Writer:
    """A pipe whose writer sends ``chunk`` until ``total`` bytes are written or the reader
    goes away; ``written`` says how far it got. The read end is ``/dev/fd/N``, as bash's
    ``<(...)`` names it."""

    def __init__(self, total: int, chunk: bytes = b"\0" * (1 << 16)) -> None:
        self.read_fd, self.write_fd = os.pipe()
        self.written = 0
        self.total = total
        self.chunk = chunk
        self.thread = threading.Thread(target=self._run, daemon=True)
        self.thread.start()

    @property
    def path(self) -> str:
        return f"/dev/fd/{self.read_fd}"

    def _run(self) -> None:
        try:
            while self.written < self.total:
                self.written += os.write(self.write_fd, self.chunk)
        except OSError:  # EPIPE: the reader closed its end
            pass
        finally:
            os.close(self.write_fd)

    def close(self) -> None:
        os.close(self.read_fd)  # a writer blocked on a full pipe gets EPIPE
        self.thread.join(timeout=30)
        assert not self.thread.is_alive()


@contextmanager
def pipe(total: int, chunk: bytes = b"\0" * (1 << 16)) -> Iterator[Writer]:
    writer = Writer(total, chunk)
    try:
        yield writer
    finally:
        writer.close()


# --------------------------------------------------------------------------- the reader


def test_a_character_device_is_refused_before_a_byte_is_read() -> None:
    with pytest.raises(InputError, match=r"not a regular file or a pipe \(a character device\)"):
        read_input("/dev/zero", inputfile.FACTS)


def test_a_directory_is_refused(tmp_path: Path) -> None:
    with pytest.raises(InputError, match="is a directory"):
        read_input(tmp_path, inputfile.FACTS)


def test_a_pipe_larger_than_the_cap_is_refused_after_cap_plus_one_bytes() -> None:
    kind = InputKind("test file", 1 << 20)
    with (
        pipe(total=64 << 20) as writer,
        pytest.raises(InputError, match="more than 1 MiB: not a test file"),
    ):
        read_input(writer.path, kind)
    # What the writer got rid of: the bytes read (cap + 1, in chunks) and what the pipe's
    # buffer held when the reader stopped. Never the 64 MiB on offer.
    assert writer.written <= kind.limit + (1 << 20) + (1 << 17)


def test_standard_input_larger_than_the_cap_is_refused() -> None:
    kind = InputKind("test file", 1000)
    with pytest.raises(InputError, match="more than 1000 bytes"):
        read_input("-", kind, stdin=io.BytesIO(b"x" * 10_000))


def test_a_pipe_under_the_cap_is_read_whole() -> None:
    data = Path(B200).read_bytes()
    with pipe(total=len(data), chunk=data) as writer:
        assert read_input(writer.path, inputfile.FACTS) == data


def test_a_regular_file_over_the_cap_is_refused_from_its_size(tmp_path: Path) -> None:
    big = tmp_path / "big.json"
    with open(big, "wb") as fh:
        fh.truncate(inputfile.FACTS.limit + 1)  # sparse: nothing to read, nothing read
    with pytest.raises(InputError, match="larger than 64 MiB: not a facts file"):
        read_input(big, inputfile.FACTS)


@pytest.mark.parametrize(
    ("data", "offset"),
    [(b'{"a": "\xff"}', 7), (b"x" * ((1 << 20) - 1) + "é".encode(), None), (b'{"\xc3', None)],
)
def test_bytes_that_are_not_utf8_are_named(tmp_path: Path, data: bytes, offset: int | None) -> None:
    path = tmp_path / "x.json"
    path.write_bytes(data)
    if offset is None and data.endswith("é".encode()):  # split across two chunks: fine
        assert read_input(path, inputfile.FACTS) == data
        return
    with pytest.raises(InputError, match="not UTF-8 text") as caught:
        read_input(path, inputfile.FACTS)
    if offset is not None:
        assert f"at offset {offset}" in str(caught.value)


# --------------------------------------------------------------------------- every entry point

ENTRY_POINTS = [
    pytest.param(lambda p: ["check", "--facts", p], id="check --facts"),
    pytest.param(lambda p: ["check", "--facts", B200, "--bench", p], id="check --bench"),
    pytest.param(
        lambda p: ["model", str(FIXTURES / "models" / "gpt-oss-120b"), "--facts", p],
        id="model --facts",
    ),
    pytest.param(lambda p: ["recommend", "--facts", p], id="recommend --facts"),
    pytest.param(lambda p: ["recommend", "--facts", B200, "--catalogue", p], id="recommend --cat"),
    pytest.param(lambda p: ["recommend", "--facts", B200, "--bench", p], id="recommend --bench"),
    pytest.param(lambda p: ["bench", "--compare", p, RUN], id="bench --compare"),
    pytest.param(
        lambda p: ["bench", "--url", "http://127.0.0.1:9", "--shapes", p], id="bench --shapes"
    ),
    pytest.param(lambda p: ["collect", "--no-probe", "--bench", p], id="collect --bench"),
]


@pytest.mark.parametrize("argv", ENTRY_POINTS)
def test_dev_zero_is_a_usage_error_at_every_entry_point(
    argv: object, capsys: pytest.CaptureFixture[str]
) -> None:
    assert callable(argv)
    code, _, err = run(argv("/dev/zero"), capsys)
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert err.startswith("blackwell-doctor: error: cannot read ")
    assert "/dev/zero: not a regular file or a pipe (a character device)" in err


@pytest.mark.parametrize("argv", ENTRY_POINTS)
def test_a_pipe_over_the_cap_is_a_usage_error_at_every_entry_point(
    argv: object, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    assert callable(argv)
    for name in ("FACTS", "BENCH_RUN", "CATALOGUE", "SHAPES"):
        kind = getattr(inputfile, name)
        monkeypatch.setattr(inputfile, name, InputKind(kind.what, 1 << 16))
    with pipe(total=16 << 20) as writer:
        code, _, err = run(argv(writer.path), capsys)
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert "more than 65536 bytes: not a" in err
    assert writer.written < 1 << 20


@pytest.mark.parametrize(
    ("argv", "data"),
    [
        (["check", "--facts"], Path(B200).read_bytes()),
        (["bench", "--compare", RUN], Path(RUN).read_bytes()),
        (
            ["recommend", "--facts", B200, "--catalogue"],
            (REPO / "checks/runtimes.toml").read_bytes(),
        ),
    ],
    ids=["check --facts", "bench --compare", "recommend --catalogue"],
)
def test_process_substitution_keeps_working(
    argv: list[str], data: bytes, capsys: pytest.CaptureFixture[str]
) -> None:
    with pipe(total=len(data), chunk=data) as writer:
        code, out, err = run([*argv, writer.path], capsys)
    assert code in (0, 1), err
    assert out


def test_standard_input_keeps_working(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    stdin = io.TextIOWrapper(io.BytesIO(Path(B200).read_bytes()))
    monkeypatch.setattr(sys, "stdin", stdin)
    code, out, err = run(["check", "--facts", "-", "-f", "json"], capsys)
    assert code in (0, 1), err
    assert '"schema_version"' in out


@pytest.mark.parametrize(
    "argv",
    [
        ["check", "--facts"],
        ["bench", "--compare", RUN],
        ["recommend", "--facts", B200, "--bench"],
        ["recommend", "--facts", B200, "--catalogue"],
        ["bench", "--url", "http://127.0.0.1:9", "--shapes"],
    ],
    ids=["check --facts", "bench --compare", "recommend --bench", "recommend --cat", "shapes"],
)
def test_a_file_that_is_not_utf8_is_a_usage_error(
    argv: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "bad"
    path.write_bytes(b'{"schema_version": 3, "x\xff": 1}\n')
    code, _, err = run([*argv, str(path)], capsys)
    assert code == 2, err
    assert err.count("\n") == 1, err
    assert "not UTF-8 text (byte 0xff at offset 24)" in err


def test_endless_standard_input_is_read_with_bounded_memory(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """Zeros on standard input without end: refused at the 64 MiB cap, the memory traced
    well under what was offered (before: read whole, 5.1 GB RSS and MemoryError, exit 4;
    here the writer stops at 256 MiB so that the unfixed tool cannot eat the machine)."""
    with pipe(total=256 << 20, chunk=b"\0" * (1 << 20)) as writer:
        stdin = open(writer.read_fd, closefd=False)  # noqa: SIM115 - the pipe closes it
        monkeypatch.setattr(sys, "stdin", stdin)
        tracemalloc.start()
        try:
            code, _, err = run(["check", "--facts", "-"], capsys)
            _, peak = tracemalloc.get_traced_memory()
        finally:
            tracemalloc.stop()
    assert code == 2, err
    assert (
        err
        == "blackwell-doctor: error: cannot read facts file -: more than 64 MiB: not a facts file\n"
    )
    assert writer.written < 80 << 20
    assert peak < 100 << 20  # the 64 MiB read and refused, and no copy of it
