"""run_p2p_probes: the parent over child processes that hang, crash, print garbage or
finish. The children run the real P2P child code over a fake driver
(tests/test_p2p_fakecuda.py), or are tiny scripts. No GPU needed."""

from __future__ import annotations

import sys
import textwrap
import time
from typing import TypedDict

import pytest

from blackwell_doctor.collect.probe import p2p
from blackwell_doctor.collect.probe.p2p import SINGLE_GPU, measure_p2p, run_p2p_probes
from blackwell_doctor.collect.probe.p2p_protocol import TEST_HANG_ENV
from blackwell_doctor.facts.document import P2PProbeFacts, Unavailable
from tests.factsutil import Judged, judged
from tests.test_p2p_fakecuda import child_argv

SIZE = 64 << 10
# The pair deadline of the hang tests. It is every pair's, the healthy ones' too, and it
# counts from the child's start: a fake child's interpreter start, imports and pair took
# 0.4 s idle and up to 5.3 s with the 2-core VM at load 74 (5 s timed a healthy pair out
# at load ~15). A hang test waits it out once; the hung child sleeps HANG_S, so the
# deadline is still what ends it.
PAIR_S = 30
# The overall deadline of the test that every pair hangs in: the first pair's deadline,
# then 10 s for the second pair (any part of it ends that pair as an overall timeout).
OVERALL_S = PAIR_S + 10
HANG_S = 3600  # how long the seam's "sleep" sleeps (_p2p_child._misbehave)


class _Deadlines(TypedDict):
    timeout_s: float
    pair_timeout_s: float


# The deadlines of the tests in which nothing hangs: never reached, so they cost nothing.
ROOMY: _Deadlines = {"timeout_s": 600.0, "pair_timeout_s": 120.0}


@pytest.fixture(autouse=True)
def _no_seam(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.delenv(TEST_HANG_ENV, raising=False)


def _facts(result: P2PProbeFacts | Unavailable) -> P2PProbeFacts:
    assert isinstance(result, P2PProbeFacts), result
    return result


def _by_pair(facts: P2PProbeFacts) -> dict[tuple[int, int], Judged]:
    return {(p.gpu_a, p.gpu_b): p for p in judged(facts)}


def test_every_unordered_pair_is_tested_once_in_order() -> None:
    facts = _facts(run_p2p_probes(size_bytes=SIZE, child_argv=child_argv(gpus=3), **ROOMY))
    assert [(p.gpu_a, p.gpu_b) for p in facts.pairs] == [(0, 1), (0, 2), (1, 2)]
    for pair in judged(facts):
        assert pair.verdict == "works", pair
        assert pair.can_access_peer is True
        assert pair.peer_copy_verified is True
        assert pair.peer_write_verified is True
        assert pair.unidirectional_gbps == pytest.approx(100.0, rel=1e-3)
        assert pair.host_staged_gbps == pytest.approx(20.0, rel=1e-3)
        assert pair.bidirectional_gbps is not None
        assert pair.detail is None
    assert facts.wall_s > 0


def test_a_pair_that_hangs_is_named_within_its_deadline_and_the_others_still_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "sleep:copy@0-2")
    started = time.monotonic()
    facts = _facts(
        run_p2p_probes(
            timeout_s=600, pair_timeout_s=PAIR_S, size_bytes=SIZE, child_argv=child_argv(gpus=3)
        )
    )
    elapsed = time.monotonic() - started
    pairs = _by_pair(facts)
    hung = pairs[(0, 2)]
    assert hung.verdict == "granted-but-broken"
    assert hung.detail == f"p2p-timeout:{PAIR_S}s at copy"
    assert hung.can_access_peer is True
    assert hung.peer_copy_verified is None
    assert pairs[(0, 1)].verdict == "works"
    assert pairs[(1, 2)].verdict == "works"
    # The hang cost its pair deadline (30 s, ~35 s with the healthy pairs), not the 3600 s
    # the child sleeps nor the 600 s overall.
    assert elapsed < HANG_S / 10


def test_a_hang_in_the_host_staged_control_is_an_error_not_a_broken_pair(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "sleep:host-staged")
    facts = _facts(run_p2p_probes(pair_timeout_s=PAIR_S, size_bytes=SIZE, child_argv=child_argv()))
    [pair] = judged(facts)
    assert pair.verdict == "error"
    assert pair.detail == f"p2p-timeout:{PAIR_S}s at host-staged"
    assert pair.peer_copy_verified is True  # what was measured before the hang is kept
    assert pair.unidirectional_gbps is not None


def test_a_child_killed_mid_pair_is_a_crash_and_the_rest_run(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "crash:bandwidth@0-1")
    facts = _facts(run_p2p_probes(size_bytes=SIZE, child_argv=child_argv(gpus=3), **ROOMY))
    pairs = _by_pair(facts)
    assert pairs[(0, 1)].verdict == "granted-but-broken"
    assert pairs[(0, 1)].detail == "p2p-crashed:signal-9 at bandwidth"
    assert pairs[(0, 1)].peer_write_verified is True
    assert pairs[(0, 2)].verdict == "works"
    assert pairs[(1, 2)].verdict == "works"


def test_the_overall_deadline_bounds_the_whole_run(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv(TEST_HANG_ENV, "sleep:copy")  # every pair hangs
    started = time.monotonic()
    facts = _facts(
        run_p2p_probes(
            timeout_s=OVERALL_S,
            pair_timeout_s=PAIR_S,
            size_bytes=SIZE,
            child_argv=child_argv(gpus=4),
        )
    )
    elapsed = time.monotonic() - started
    # ~40 s: the overall deadline, not six pair deadlines (180 s) nor the hangs (3600 s).
    assert elapsed < 3 * PAIR_S
    assert len(facts.pairs) == 6  # every pair is reported, run or not
    first, second, *rest = judged(facts)
    assert (first.verdict, first.detail) == ("granted-but-broken", f"p2p-timeout:{PAIR_S}s at copy")
    assert second.verdict == "error"
    assert second.detail is not None
    assert second.detail.startswith(f"p2p-overall-timeout:{OVERALL_S}s")
    for pair in rest:
        assert (pair.verdict, pair.detail) == ("error", f"p2p-not-run:overall-timeout:{OVERALL_S}s")


def test_refused_and_slow_pairs(monkeypatch: pytest.MonkeyPatch) -> None:
    argv = child_argv(gpus=3, deny=[(1, 2)], peer_gbps=5.0)
    facts = _facts(run_p2p_probes(size_bytes=SIZE, child_argv=argv, **ROOMY))
    pairs = _by_pair(facts)
    assert pairs[(1, 2)].verdict == "not-supported"
    assert pairs[(1, 2)].can_access_peer is False
    assert pairs[(1, 2)].peer_copy_verified is None
    slow = pairs[(0, 1)]
    assert slow.verdict == "slower-than-host"
    assert slow.detail == "0->1 peer copy 5.0 GB/s < host-staged 20.0 GB/s"


def test_a_corrupting_pair_is_broken() -> None:
    argv = child_argv(corrupt_peer_copy=True)
    facts = _facts(run_p2p_probes(size_bytes=SIZE, child_argv=argv, **ROOMY))
    [pair] = judged(facts)
    assert pair.verdict == "granted-but-broken"
    assert pair.peer_copy_verified is False
    assert pair.detail is not None
    assert pair.detail.startswith("mismatch:a-to-b:1/16384 words")


def test_one_gpu_is_not_applicable() -> None:
    result = run_p2p_probes(size_bytes=SIZE, child_argv=child_argv(gpus=1), **ROOMY)
    assert result == Unavailable(SINGLE_GPU)


def test_no_device_is_unavailable_with_the_drivers_reason() -> None:
    result = run_p2p_probes(size_bytes=SIZE, child_argv=child_argv(no_device=True), **ROOMY)
    assert result == Unavailable("cuda-error-no-device")


def test_no_libcuda_answers_at_once_without_a_child(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(p2p, "_can_dlopen", lambda name: False)
    monkeypatch.setattr(p2p, "run_child", _no_child)
    assert run_p2p_probes() == Unavailable("libcuda-not-found")


def _no_child(*args: object, **kwargs: object) -> object:
    raise AssertionError("no child should start")


def _script(code: str) -> list[str]:
    return [sys.executable, "-c", textwrap.dedent(code)]


def test_a_first_child_that_hangs_before_counting_is_unavailable() -> None:
    # A start slower than the 1 s deadline ends the same way: nothing was counted.
    started = time.monotonic()
    code = f"import time; time.sleep({HANG_S})"
    result = run_p2p_probes(pair_timeout_s=1, child_argv=_script(code))
    assert result == Unavailable("p2p-timeout:1s")
    assert time.monotonic() - started < HANG_S / 10  # the deadline, not the sleep


def test_garbage_output_is_ignored_and_a_child_saying_nothing_is_unavailable() -> None:
    code = """
        import sys
        print("Segmentation fault (core dumped)")
        print('{"event": "devices", "count": "two"}')
        print('{"event": "nonsense"}')
        sys.stdout.write("\\x00\\xff not json")
    """
    assert run_p2p_probes(child_argv=_script(code), **ROOMY) == Unavailable(
        "p2p-child-exited-early"
    )


def test_garbage_between_valid_lines_does_not_disturb_the_result() -> None:
    code = """
        import sys
        sys.path.insert(0, {repo!r})
        from tests.test_p2p_fakecuda import Knobs, fake_compile, fake_driver
        from blackwell_doctor.collect.probe import _p2p_child
        _p2p_child.compile_probes = fake_compile
        real = _p2p_child._emit
        def noisy(line):
            print("WARNING: something from the driver", flush=True)
            print('{{"event": "bandwidth", "kind": "uni", "direction": "a-to-b", "gbps": "fast"}}')
            print("{{\\"event\\": \\"verify\\", \\"check\\": \\"copy\\"", flush=True)
            real(line)
        driver, _ = fake_driver(Knobs())
        job = _p2p_child.msgspec.json.decode(sys.argv[1], type=_p2p_child.P2PJob)
        sys.exit(_p2p_child.run_job(job, noisy, driver))
    """
    from tests.test_p2p_fakecuda import REPO

    argv = _script(code.format(repo=str(REPO)))
    facts = _facts(run_p2p_probes(size_bytes=SIZE, child_argv=argv, **ROOMY))
    [pair] = judged(facts)
    assert pair.verdict == "works"


def test_a_child_that_exits_with_an_error_code_before_counting() -> None:
    result = run_p2p_probes(child_argv=_script("import sys; sys.exit(3)"), **ROOMY)
    assert result == Unavailable("p2p-crashed:rc=3")


def test_a_child_that_cannot_start() -> None:
    result = run_p2p_probes(child_argv=["/nonexistent/python3"])
    assert result == Unavailable("p2p-start-failed:FileNotFoundError")


def test_measure_keeps_each_directions_numbers() -> None:
    run = measure_p2p(size_bytes=SIZE, child_argv=child_argv(), iterations=2, **ROOMY)
    assert not isinstance(run, Unavailable)
    [pair] = run.runs
    assert set(pair.bandwidth) == {
        ("uni", "a-to-b"),
        ("uni", "b-to-a"),
        ("bidi", "both"),
        ("host", "a-to-b"),
        ("host", "b-to-a"),
    }
    assert pair.done is not None
    assert pair.done.size_bytes == SIZE
