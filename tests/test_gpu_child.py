"""The GPU facts child's document (collect._gpu_child.gpu_document) over fake NVML and CUDA
APIs: NVML read on a thread of its own while CUDA initialises (issue 36), the document the
same as reading the two one after the other, and what runs first on the NVML thread. The
real child runs on GPUs in tests/test_probe_gpu.py and tests/test_gpu_real.py."""

from __future__ import annotations

import threading
from dataclasses import dataclass, field

import pytest

from blackwell_doctor.collect._gpu_child import gpu_document
from blackwell_doctor.collect.cuda import collect_cuda
from blackwell_doctor.collect.gpu import GpuDocument
from blackwell_doctor.collect.nvml import collect_nvml, collect_nvml_and_health
from tests.test_collect_cuda import FakeCuda, FakeDevice
from tests.test_health_collect import FakeHealth, FakeNvml

# How long one side waits to see the other start: far past a thread's start on a loaded
# machine; read one after the other, the first side would wait it out and say so.
MEETING_S = 20.0


@dataclass
class _Meeting:
    """Each side says it started, then waits to see the other start."""

    nvml: threading.Event = field(default_factory=threading.Event)
    cuda: threading.Event = field(default_factory=threading.Event)
    met: dict[str, bool] = field(default_factory=dict)
    threads: dict[str, str] = field(default_factory=dict)


class _MeetingNvml(FakeNvml):
    def __init__(self, meeting: _Meeting, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.meeting = meeting

    def init(self) -> None:
        self.calls.append("init")
        self.meeting.threads.setdefault("nvml", threading.current_thread().name)
        self.meeting.nvml.set()
        self.meeting.met.setdefault("nvml", self.meeting.cuda.wait(MEETING_S))
        super().init()


class _MeetingCuda(FakeCuda):
    def __init__(self, meeting: _Meeting, **kwargs: object) -> None:
        super().__init__(**kwargs)  # type: ignore[arg-type]
        self.meeting = meeting

    def init(self) -> None:
        self.meeting.threads["cuda"] = threading.current_thread().name
        self.meeting.cuda.set()
        self.meeting.met["cuda"] = self.meeting.nvml.wait(MEETING_S)
        super().init()


def _apis(meeting: _Meeting) -> tuple[_MeetingNvml, _MeetingCuda]:
    return (
        _MeetingNvml(meeting, gpus=[FakeHealth(), FakeHealth()]),
        _MeetingCuda(meeting, devices=[FakeDevice(), FakeDevice(bus_id="0000:02:00.0")]),
    )


@pytest.mark.parametrize("health", [False, True])
def test_nvml_is_read_while_cuda_initialises_and_the_document_is_the_same(health: bool) -> None:
    meeting = _Meeting()
    nvml, cuda = _apis(meeting)

    document = gpu_document(health=health, nvml=nvml, cuda=cuda)

    assert meeting.met == {"nvml": True, "cuda": True}  # each saw the other under way
    assert meeting.threads["nvml"] != meeting.threads["cuda"]
    # What one reads after the other gives (fresh fakes: the same answers).
    alone_nvml = FakeNvml(gpus=[FakeHealth(), FakeHealth()])
    alone_cuda = FakeCuda(devices=[FakeDevice(), FakeDevice(bus_id="0000:02:00.0")])
    if health:
        both = collect_nvml_and_health(alone_nvml)
        expected = GpuDocument(nvml=both[0], cuda=collect_cuda(alone_cuda), health=both[1])
    else:
        expected = GpuDocument(nvml=collect_nvml(alone_nvml), cuda=collect_cuda(alone_cuda))
    assert document == expected
    assert nvml.calls.count("shutdown") == 1  # one NVML session


def test_what_runs_first_on_the_nvml_thread_runs_before_nvml_is_read() -> None:
    meeting = _Meeting()
    nvml, cuda = _apis(meeting)
    seen: list[tuple[str, list[str]]] = []

    gpu_document(
        nvml=nvml,
        cuda=cuda,
        first_on_nvml=lambda: seen.append((threading.current_thread().name, list(nvml.calls))),
    )

    assert seen == [(meeting.threads["nvml"], [])]


def test_what_the_first_step_raises_is_raised_once_both_halves_are_read() -> None:
    meeting = _Meeting()
    nvml, cuda = _apis(meeting)

    def broken() -> None:
        raise RuntimeError("the sampler's bug")

    with pytest.raises(RuntimeError, match="the sampler's bug"):
        gpu_document(nvml=nvml, cuda=cuda, first_on_nvml=broken)

    assert "init" in nvml.calls
    assert "init" in cuda.calls
