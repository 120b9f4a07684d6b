"""Records a transport wrapped over two lines are judged as one (issue 33).

Every line here is COMPOSED (no public log copied). The transports' formats: docker
compose's ``service  | `` before each line (compose's log printer, cmd/formatter/logs.go:
the service name padded to the widest, then ``| ``), ``kubectl logs --prefix``'s
``[pod/<name>/<container>] `` (kubectl's logs command, --prefix), and ``docker logs
--timestamps``'s RFC 3339 nano stamp and a space before each line. The messages: PyTorch's
``torch.AcceleratorError: CUDA error: ...`` with the CUDA runtime's cudaGetErrorString text,
and NCCL's ncclGetErrorString text, as checks/log_vocabulary.toml lists them.
"""

from __future__ import annotations

import pytest

from blackwell_doctor.collect.logs.matcher import SourceScanner
from blackwell_doctor.facts.document import LogFacts, LogFinding, LogSource
from blackwell_doctor.ruledata.logs import load_catalogue
from blackwell_doctor.rules.logs import JudgedFinding, judge_findings

ILLEGAL = "CUDA error: an illegal memory access was encountered"
VLLM_INFO = "INFO 06-01 21:52:10 [core.py:1] "


def _findings(text: str, *, chunk: int = 0) -> list[LogFinding]:
    scanner = SourceScanner(load_catalogue(), "wrapped.log")
    data = text.encode()
    step = chunk or len(data) or 1
    for at in range(0, len(data), step):
        scanner.feed(data[at : at + step])
    return scanner.finish()


def _judged(text: str) -> list[JudgedFinding]:
    findings = _findings(text)
    lines = text.count("\n")
    logs = LogFacts(
        sources=[LogSource(name="wrapped.log", kind="file", lines=lines)], findings=findings
    )
    return judge_findings(logs)


def _terms(findings: list[LogFinding]) -> list[LogFinding]:
    return [f for f in findings if ILLEGAL in f.excerpt.partition(" | line: ")[0]]


SPLIT_COMPOSE = (
    f"vllm-1  | {VLLM_INFO}starting\n"
    "vllm-1  | torch.AcceleratorError: CUDA error: an illegal memory\n"
    "vllm-1  | access was encountered\n"
    f"vllm-1  | {VLLM_INFO}still here\n"
)


@pytest.mark.parametrize("chunk", [0, 1, 7, 64])
def test_a_term_split_over_two_compose_lines_is_found_once(chunk: int) -> None:
    got = _findings(SPLIT_COMPOSE, chunk=chunk)
    (term,) = _terms(got)
    assert (term.signature, term.line, term.count) == ("runtime.unrecognised_fatal_error", 2, 1)
    # The excerpt is the joined record, its second line without the transport.
    assert term.excerpt.endswith(f"vllm-1  | torch.AcceleratorError: {ILLEGAL}")
    # The record's first line is not counted again by the generic detector.
    assert [f.signature for f in got] == ["runtime.unrecognised_fatal_error"]


def test_a_term_broken_inside_a_word_under_kubectl_is_found() -> None:
    text = (
        f"[pod/vllm-0/vllm] {VLLM_INFO}starting\n"
        "[pod/vllm-0/vllm] ERROR 06-01 21:52:10 [core.py:1] Worker failed: cudaErrorIll\n"
        "[pod/vllm-0/vllm] egalAddress\n"
    )
    got = [f for f in _judged(text) if f.severity == "fail"]
    assert [(f.signature, f.line) for f in got] == [("runtime.unrecognised_fatal_error", 2)]
    assert got[0].excerpt.startswith("cudaErrorIllegalAddress (CUDA runtime)")
    assert got[0].excerpt.endswith("Worker failed: cudaErrorIllegalAddress")


def test_docker_timestamps_are_a_transport() -> None:
    text = (
        "2025-01-01T00:00:00.123456789Z ERROR 06-01 21:52:10 [core.py:1] NCCL error: unhandled\n"
        "2025-01-01T00:00:00.123456790Z cuda error (run with NCCL_DEBUG=INFO for details)\n"
    )
    got = _findings(text)
    fatal = [f for f in got if f.signature == "runtime.unrecognised_fatal_error"]
    assert [(f.line, f.count) for f in fatal] == [(1, 1)]
    assert fatal[0].excerpt.startswith("unhandled cuda error (run with NCCL_DEBUG=INFO")


def test_a_wrapped_fatal_exception_is_fail() -> None:
    text = (
        f"vllm-1  | {VLLM_INFO}starting\n"
        "vllm-1  | RuntimeError: cudaHostRegister(ptr, size, cudaHostRegisterDefault) failed:"
        " invalid\n"
        "vllm-1  | argument\n"
    )
    got = _judged(text)
    assert [(f.signature, f.severity, f.line) for f in got] == [
        ("runtime.unrecognised_fatal_error", "fail", 2)
    ]
    # The log ends in that record: its wrapped second line does not hide the error run.
    assert any(f.signature == "runtime.log_ends_in_error" for f in _findings(text))


def test_two_separate_records_are_not_joined() -> None:
    # The second line has a record prefix of its own: a record, not a continuation.
    text = (
        "vllm-1  | WARNING 06-01 21:52:10 [core.py:1] CUDA error: an illegal memory\n"
        f"vllm-1  | {VLLM_INFO}access was encountered\n"
    )
    assert _terms(_findings(text)) == []


def test_different_services_are_not_joined() -> None:
    text = "vllm-1  | CUDA error: an illegal memory\nproxy-1 | access was encountered\n"
    assert _terms(_findings(text)) == []


def test_a_term_whole_on_one_line_is_not_counted_again() -> None:
    # The second line holds the term's tail (the seam is looked at) but the term found
    # across the seam would be the one already whole on the first line.
    text = f"vllm-1  | torch.AcceleratorError: {ILLEGAL}\nvllm-1  | encountered twice\n"
    got = [f for f in _findings(text) if f.signature != "runtime.log_ends_in_error"]
    assert [(f.signature, f.line, f.count) for f in got] == [
        ("runtime.unrecognised_fatal_error", 1, 1)
    ]


def test_lines_without_a_transport_are_not_joined() -> None:
    text = "CUDA error: an illegal memory\naccess was encountered\n"
    assert _terms(_findings(text)) == []


def test_a_healthy_wrapped_line_stays_clean() -> None:
    text = (
        f"vllm-1  | {VLLM_INFO}Loading safetensors checkpoint shards: 100% Completed | 4/4"
        " [00:03<00:00, 1.10it/s] and the memory profiler found no illegal memory\n"
        "vllm-1  | access was counted\n"
        f"[pod/vllm-0/vllm] {VLLM_INFO}Available KV cache memory: 20.5 GiB, the\n"
        "[pod/vllm-0/vllm] encountered sizes fit\n"
    )
    assert _judged(text) == []
