"""Ctrl-C is bounded: `bench`, `bench --soak` and `apply --verify`'s bench end within a few
seconds of SIGINT whatever they are waiting for (bench/loop.py).

asyncio.run, which they used, waits without limit after Ctrl-C for its executor threads:
a DNS lookup (aiohttp resolves host names with getaddrinfo in one) or the soak's GPU memory
reader that hangs held the command until it returned. Here both hang on purpose, the test
sends SIGINT once it sees the hung call entered, and measures how long the command takes.
Each hung call is released at the end (or after HANG_S), so a failure is a slow test, not a
stuck one.
"""

from __future__ import annotations

import asyncio
import os
import signal
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import msgspec
import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.collect.bench import loop, soak_gpu

HANG_S = 30.0  # a hung call returns after this at the latest (the old code waited for it)
BOUND_S = loop.INTERRUPT_GRACE_S + 5.0  # SIGINT to exit, with room for a loaded machine
HUNG_HOST = "hangs.blackwell-doctor.test"


class Hang:
    """A call that blocks until released; ``entered`` is set once something is in it."""

    def __init__(self) -> None:
        self.entered = threading.Event()
        self.release = threading.Event()

    def block(self) -> None:
        self.entered.set()
        self.release.wait(HANG_S)


@pytest.fixture
def hang() -> Iterator[Hang]:
    h = Hang()
    try:
        yield h
    finally:
        h.release.set()


class Interrupt:
    """SIGINT to this process (the command runs in it) once ``event`` is set; ``at``: when."""

    def __init__(self, event: threading.Event) -> None:
        self.at: float | None = None

        def fire() -> None:
            if event.wait(60):
                self.at = time.monotonic()
                os.kill(os.getpid(), signal.SIGINT)

        threading.Thread(target=fire, daemon=True).start()

    def since(self) -> float:
        """Seconds since the signal."""
        assert self.at is not None, "the event never came: no SIGINT was sent"
        return time.monotonic() - self.at


@pytest.fixture
def dns_hangs(monkeypatch: pytest.MonkeyPatch, hang: Hang) -> Hang:
    """getaddrinfo of HUNG_HOST blocks, as with a DNS server that does not answer."""
    real = socket.getaddrinfo

    def getaddrinfo(host: Any, *args: Any, **kwargs: Any) -> Any:
        if host == HUNG_HOST:
            hang.block()
            raise socket.gaierror(socket.EAI_AGAIN, "the test's DNS never answered")
        return real(host, *args, **kwargs)

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return hang


def test_ctrl_c_during_a_hung_dns_lookup_ends_bench_at_once(
    dns_hangs: Hang, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    out = tmp_path / "run.json"
    sigint = Interrupt(dns_hangs.entered)
    code = main(["bench", "--url", f"http://{HUNG_HOST}:9", "-o", str(out)])
    took = sigint.since()
    with capsys.disabled():
        print(f"\nbench: exit {code} {took:.2f} s after SIGINT (in a DNS lookup)")
    assert code == 130
    assert took < BOUND_S
    doc = msgspec.json.decode(out.read_bytes())
    assert doc["interrupted"] is True
    assert doc["exit_code"] == 130
    assert "interrupted" in capsys.readouterr().err


def test_ctrl_c_during_a_hung_gpu_memory_read_ends_a_soak_at_once(
    monkeypatch: pytest.MonkeyPatch, hang: Hang, tmp_path: Path
) -> None:
    # A port that accepts and never answers: each request stalls for its 1 s deadline, the
    # soak goes on, and the first interval's end reads the GPUs' memory (a hung driver).
    # 90 s: a lost SIGINT fails the test when the soak ends, never an hour later.
    def sample(**_: Any) -> soak_gpu.Sample | str:
        hang.block()
        return "hung"

    monkeypatch.setattr(soak_gpu, "sample_gpu_memory", sample)
    shapes = tmp_path / "shapes.toml"
    shapes.write_text("[shape.s]\ninput_tokens = 8\noutput_tokens = 4\nwarmup = 0\n")
    out = tmp_path / "soak.json"
    with socket.socket() as listener:
        listener.bind(("127.0.0.1", 0))
        listener.listen(64)
        url = f"http://127.0.0.1:{listener.getsockname()[1]}"
        sigint = Interrupt(hang.entered)
        code = main(
            [
                *("bench", "--url", url, "--model", "m", "--shapes", str(shapes), "--shape", "s"),
                *("--soak", "90s", "--soak-interval", "1s", "--request-timeout", "1"),
                *("-o", str(out)),
            ]
        )
        took = sigint.since()
    print(f"soak: exit {code} {took:.2f} s after SIGINT (in the GPU memory reader)")
    assert code == 130
    assert took < BOUND_S
    doc = msgspec.json.decode(out.read_bytes())
    assert doc["interrupted"] is True
    assert doc["soak"]["complete"] is False


def test_ctrl_c_during_apply_verifys_bench_is_bounded_and_keeps_the_partial_run(
    dns_hangs: Hang,
) -> None:
    from blackwell_doctor.app import verify
    from blackwell_doctor.app.bench_flow import load_shapes
    from blackwell_doctor.ruledata.shapes import select_shapes

    settings = verify.VerifySettings(shapes=select_shapes(load_shapes(None), ["short"]))
    sigint = Interrupt(dns_hangs.entered)
    with pytest.raises(KeyboardInterrupt) as caught:
        verify.bench(f"http://{HUNG_HOST}:9", settings, say=lambda _: None, label="new")
    took = sigint.since()
    print(f"apply --verify bench: KeyboardInterrupt {took:.2f} s after SIGINT (in a DNS lookup)")
    assert took < BOUND_S
    partial = caught.value.partial  # type: ignore[attr-defined]
    assert partial.interrupted is True


def test_the_run_keeps_asyncio_runs_contract() -> None:
    async def answer() -> int:
        await asyncio.sleep(0)
        return await asyncio.to_thread(lambda: 42)

    assert loop.run(answer()) == 42

    async def fails() -> None:
        raise ValueError("inside")

    with pytest.raises(ValueError, match="inside"):
        loop.run(fails())
    # The handler is put back: Ctrl-C outside a run is KeyboardInterrupt again.
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler


def test_a_run_that_swallows_the_cancellation_is_abandoned_after_the_grace() -> None:
    entered = threading.Event()

    async def stubborn() -> None:
        entered.set()
        while True:
            try:
                await asyncio.sleep(3600)
            except asyncio.CancelledError:
                continue  # ignores Ctrl-C's cancellation

    sigint = Interrupt(entered)
    with pytest.raises(KeyboardInterrupt):
        loop.run(stubborn(), grace_s=0.5)
    assert sigint.since() < 0.5 + 5
