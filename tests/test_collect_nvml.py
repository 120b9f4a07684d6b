"""collect_nvml over fake adapters, and the real adapter's translation of nvidia-ml-py."""

from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect.nvml import (
    P2P_CAPS_INDEX,
    NvmlCallError,
    PcieField,
    RealNvml,
    collect_nvml,
    nvml_error_reason,
)
from blackwell_doctor.facts.document import NvmlFacts, NvmlGpu, NvmlPcieLink, P2PPair, Unavailable
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

# nvmlReturn_t and nvmlGpuP2PStatus_t values (nvml.h).
NOT_SUPPORTED = 3
DRIVER_NOT_LOADED = 9
GPU_IS_LOST = 15
LIB_RM_VERSION_MISMATCH = 18
P2P_OK = 0
P2P_CHIPSET_NOT_SUPPORTED = 1
P2P_NOT_SUPPORTED = 5

RTX_PRO_6000_MEMORY = 102_641_958_912  # 97887 MiB, as nvidia-smi reports the card


@dataclass
class FakeGpu:
    name: str | int = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    uuid: str | int = "GPU-00000000-0000-0000-0000-000000000000"
    bus_id: str | int = "00000000:41:00.0"
    capability: tuple[int, int] | int = (12, 0)
    memory_total: int | None = RTX_PRO_6000_MEMORY  # None: NOT_SUPPORTED (GB10)
    # PcieField -> value, or an nvmlReturn_t error; a Gen5 x16 link running at Gen1 (idle).
    pcie: dict[str, tuple[str, int] | int] = field(
        default_factory=lambda: {
            "current_gen": 1,
            "current_width": 16,
            "max_gen": 5,
            "max_width": 16,
            "gpu_max_gen": 5,
        }
    )
    bar1_total: int | None = 128 << 30  # None: NOT_SUPPORTED


@dataclass
class FakeNvml:
    """An NvmlApi. An int where a value belongs is the nvmlReturn_t error that call raises."""

    gpus: list[FakeGpu] = field(default_factory=list)
    # (a, b, caps index) → P2P status, or ("error", nvmlReturn_t); missing pairs answer OK.
    p2p: dict[tuple[int, int, int], int | tuple[str, int]] = field(default_factory=dict)
    init_error: int | None = None
    count_error: int | None = None
    driver: str = "580.95.05"
    cuda: int = 13000
    calls: list[str] = field(default_factory=list)

    @staticmethod
    def _value(value: Any) -> Any:
        if isinstance(value, int) and not isinstance(value, bool):
            raise NvmlCallError(nvml_error_reason(value))
        return value

    def init(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise NvmlCallError(nvml_error_reason(self.init_error))

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    def driver_version(self) -> str:
        return self.driver

    def cuda_driver_version(self) -> int:
        return self.cuda

    def nvml_version(self) -> str:
        return "13." + self.driver

    def device_count(self) -> int:
        if self.count_error is not None:
            raise NvmlCallError(nvml_error_reason(self.count_error))
        return len(self.gpus)

    def device_name(self, index: int) -> str:
        value: str = self._value(self.gpus[index].name)
        return value

    def device_uuid(self, index: int) -> str:
        value: str = self._value(self.gpus[index].uuid)
        return value

    def device_pci_bus_id(self, index: int) -> str:
        value: str = self._value(self.gpus[index].bus_id)
        return value

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        capability = self.gpus[index].capability
        if isinstance(capability, int):
            raise NvmlCallError(nvml_error_reason(capability))
        return capability

    def device_memory_total(self, index: int) -> int:
        total = self.gpus[index].memory_total
        if total is None:
            raise NvmlCallError(nvml_error_reason(NOT_SUPPORTED))
        return total

    def device_pcie(self, index: int, field: PcieField) -> int:
        answer = self.gpus[index].pcie.get(field, ("error", NOT_SUPPORTED))
        if isinstance(answer, tuple):
            raise NvmlCallError(nvml_error_reason(answer[1]))
        return answer

    def device_bar1_total(self, index: int) -> int:
        total = self.gpus[index].bar1_total
        if total is None:
            raise NvmlCallError(nvml_error_reason(NOT_SUPPORTED))
        return total

    def p2p_status(self, index_a: int, index_b: int, caps_index: int) -> int:
        self.calls.append(f"p2p {index_a} {index_b} {caps_index}")
        answer = self.p2p.get((index_a, index_b, caps_index), P2P_OK)
        if isinstance(answer, tuple):
            raise NvmlCallError(nvml_error_reason(answer[1]))
        return answer


IDLE_GEN5_X16 = NvmlPcieLink(
    current_gen=1, current_width=16, max_gen=5, max_width=16, gpu_max_gen=5
)


def rtx_pro_6000_pair() -> list[FakeGpu]:
    return [
        FakeGpu(uuid="GPU-1d7a0b8e-0000-0000-0000-000000000001", bus_id="00000000:41:00.0"),
        FakeGpu(uuid="GPU-1d7a0b8e-0000-0000-0000-000000000002", bus_id="00000000:C1:00.0"),
    ]


def test_two_rtx_pro_6000_give_every_fact() -> None:
    fake = FakeNvml(gpus=rtx_pro_6000_pair())

    facts = collect_nvml(fake)

    assert facts == NvmlFacts(
        driver_version="580.95.05",
        cuda_driver_version="13.0",
        nvml_version="13.580.95.05",
        gpus=[
            NvmlGpu(
                index=0,
                name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                uuid="GPU-1d7a0b8e-0000-0000-0000-000000000001",
                pci_bus_id="0000:41:00.0",
                compute_capability=(12, 0),
                memory_total_bytes=RTX_PRO_6000_MEMORY,
                pcie=IDLE_GEN5_X16,
                bar1_total_bytes=128 << 30,
            ),
            NvmlGpu(
                index=1,
                name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
                uuid="GPU-1d7a0b8e-0000-0000-0000-000000000002",
                pci_bus_id="0000:c1:00.0",
                compute_capability=(12, 0),
                memory_total_bytes=RTX_PRO_6000_MEMORY,
                pcie=IDLE_GEN5_X16,
                bar1_total_bytes=128 << 30,
            ),
        ],
        p2p=[P2PPair(gpu_a=0, gpu_b=1, read="OK", write="OK", nvlink="OK", atomics="OK")],
    )
    assert fake.calls[0] == "init"
    assert fake.calls[-1] == "shutdown"


@pytest.mark.parametrize(("cuda", "text"), [(13000, "13.0"), (12080, "12.8"), (12090, "12.9")])
def test_cuda_driver_version_is_major_dot_minor(cuda: int, text: str) -> None:
    facts = collect_nvml(FakeNvml(gpus=[FakeGpu()], cuda=cuda))
    assert isinstance(facts, NvmlFacts)
    assert facts.cuda_driver_version == text


def test_gb10_memory_not_supported_leaves_the_rest_intact() -> None:
    gb10 = FakeGpu(name="NVIDIA GB10", bus_id="0000000F:01:00.0", capability=(12, 1))
    gb10.memory_total = None

    facts = collect_nvml(FakeNvml(gpus=[gb10]))

    assert isinstance(facts, NvmlFacts)
    (gpu,) = facts.gpus
    assert gpu.memory_total_bytes == Unavailable("not-supported")
    assert gpu.name == "NVIDIA GB10"
    assert gpu.compute_capability == (12, 1)
    assert gpu.pci_bus_id == "000f:01:00.0"
    assert facts.p2p == []


def test_driver_library_mismatch_at_init_makes_nvml_unavailable() -> None:
    fake = FakeNvml(gpus=rtx_pro_6000_pair(), init_error=LIB_RM_VERSION_MISMATCH)

    assert collect_nvml(fake) == Unavailable("nvml-driver-library-mismatch")
    # NVML never initialised, so there is nothing to shut down.
    assert fake.calls == ["init"]


def test_device_count_failure_is_not_reported_as_zero_gpus() -> None:
    fake = FakeNvml(gpus=rtx_pro_6000_pair(), count_error=DRIVER_NOT_LOADED)

    assert collect_nvml(fake) == Unavailable("nvml-driver-not-loaded")
    assert fake.calls[-1] == "shutdown"


def test_p2p_matrix_mixes_ok_chipset_not_supported_and_errors() -> None:
    read, write, nvlink, atomics = (
        P2P_CAPS_INDEX[k] for k in ("read", "write", "nvlink", "atomics")
    )
    fake = FakeNvml(
        gpus=[*rtx_pro_6000_pair(), FakeGpu(bus_id="00000000:E1:00.0")],
        p2p={
            # 0↔1 share a switch: PCIe P2P works, no NVLink.
            (0, 1, nvlink): P2P_NOT_SUPPORTED,
            (0, 1, atomics): ("error", NOT_SUPPORTED),
            # 2 sits behind another root port of a chipset without P2P.
            **{(a, 2, i): P2P_CHIPSET_NOT_SUPPORTED for a in (0, 1) for i in range(4)},
            (1, 2, atomics): 42,  # a status this tool does not know
        },
    )

    facts = collect_nvml(fake)

    assert isinstance(facts, NvmlFacts)
    assert facts.p2p == [
        P2PPair(
            gpu_a=0,
            gpu_b=1,
            read="OK",
            write="OK",
            nvlink="NOT_SUPPORTED",
            atomics=Unavailable("not-supported"),
        ),
        P2PPair(
            gpu_a=0,
            gpu_b=2,
            read="CHIPSET_NOT_SUPPORTED",
            write="CHIPSET_NOT_SUPPORTED",
            nvlink="CHIPSET_NOT_SUPPORTED",
            atomics="CHIPSET_NOT_SUPPORTED",
        ),
        P2PPair(
            gpu_a=1,
            gpu_b=2,
            read="CHIPSET_NOT_SUPPORTED",
            write="CHIPSET_NOT_SUPPORTED",
            nvlink="CHIPSET_NOT_SUPPORTED",
            atomics="UNKNOWN",
        ),
    ]
    assert read == 0
    assert write == 1


def test_p2p_asks_each_unordered_pair_once_for_the_four_capabilities() -> None:
    fake = FakeNvml(gpus=[FakeGpu() for _ in range(4)])

    facts = collect_nvml(fake)

    assert isinstance(facts, NvmlFacts)
    assert isinstance(facts.p2p, list)
    assert [(p.gpu_a, p.gpu_b) for p in facts.p2p] == [
        (0, 1),
        (0, 2),
        (0, 3),
        (1, 2),
        (1, 3),
        (2, 3),
    ]
    asked = [c for c in fake.calls if c.startswith("p2p")]
    assert len(asked) == 6 * 4
    assert {c.split()[3] for c in asked} == {"0", "1", "2", "3"}


def test_a_device_whose_name_fails_keeps_its_other_facts_and_the_other_gpus() -> None:
    gpus = rtx_pro_6000_pair()
    gpus[1].name = GPU_IS_LOST

    facts = collect_nvml(FakeNvml(gpus=gpus))

    assert isinstance(facts, NvmlFacts)
    assert facts.gpus[0].name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert facts.gpus[1].name == Unavailable("nvml-error-gpu-is-lost")
    assert facts.gpus[1].uuid == "GPU-1d7a0b8e-0000-0000-0000-000000000002"
    assert facts.gpus[1].compute_capability == (12, 0)


def test_shutdown_runs_even_when_collection_raises() -> None:
    class Broken(FakeNvml):
        def device_count(self) -> int:
            raise RuntimeError("a bug, not a host problem")

    fake = Broken(gpus=[FakeGpu()])
    with pytest.raises(RuntimeError):
        collect_nvml(fake)
    assert fake.calls == ["init", "shutdown"]


def test_shutdown_failure_does_not_lose_the_facts() -> None:
    class ShutdownFails(FakeNvml):
        def shutdown(self) -> None:
            raise NvmlCallError("nvml-error-uninitialized")

    facts = collect_nvml(ShutdownFails(gpus=[FakeGpu()]))
    assert isinstance(facts, NvmlFacts)
    assert len(facts.gpus) == 1


def test_facts_survive_the_json_round_trip() -> None:
    gpus = rtx_pro_6000_pair()
    gpus[0].memory_total = None
    facts = collect_nvml(FakeNvml(gpus=gpus, p2p={(0, 1, 3): ("error", NOT_SUPPORTED)}))

    wire = msgspec.json.encode(facts)

    assert msgspec.json.decode(wire, type=NvmlFacts | Unavailable) == facts
    assert b'"memory_total_bytes":{"status":"unavailable","reason":"not-supported"}' in wire


@pytest.mark.parametrize(
    ("code", "reason"),
    [
        (12, "nvml-library-not-found"),
        (9, "nvml-driver-not-loaded"),
        (4, "permission-denied:nvml"),
        (18, "nvml-driver-library-mismatch"),
        (3, "not-supported"),
        (13, "nvml-function-not-found"),
        (15, "nvml-error-gpu-is-lost"),
        (999, "nvml-error-unknown"),
        (4242, "nvml-error-4242"),
    ],
)
def test_nvml_error_reason(code: int, reason: str) -> None:
    assert nvml_error_reason(code) == reason


@pytest.mark.parametrize(
    ("raw", "normal"),
    [
        ("00000000:41:00.0", "0000:41:00.0"),  # NVML
        ("0000:C1:00.0", "0000:c1:00.0"),  # CUDA
        ("00010000:01:00.0", "10000:01:00.0"),  # a VMD domain, as sysfs writes it
        ("garbage", "garbage"),
    ],
)
def test_normalize_pci_bus_id(raw: str, normal: str) -> None:
    assert normalize_pci_bus_id(raw) == normal


# --------------------------------------------------------------------------- the real adapter


@pytest.fixture
def pynvml() -> ModuleType:
    pytest.importorskip("pynvml")
    return importlib.import_module("pynvml")


def test_every_binding_error_gets_the_token_its_name_says(pynvml: ModuleType) -> None:
    """The hand-kept code table agrees with the installed binding's NVML_ERROR_* names."""
    special = {
        "NVML_ERROR_LIBRARY_NOT_FOUND": "nvml-library-not-found",
        "NVML_ERROR_DRIVER_NOT_LOADED": "nvml-driver-not-loaded",
        "NVML_ERROR_NO_PERMISSION": "permission-denied:nvml",
        "NVML_ERROR_LIB_RM_VERSION_MISMATCH": "nvml-driver-library-mismatch",
        "NVML_ERROR_NOT_SUPPORTED": "not-supported",
        "NVML_ERROR_FUNCTION_NOT_FOUND": "nvml-function-not-found",
    }
    names = [n for n in dir(pynvml) if n.startswith("NVML_ERROR_")]
    assert len(names) > 20
    for name in names:
        expected = special.get(name, "nvml-error-" + name[11:].lower().replace("_", "-"))
        assert nvml_error_reason(getattr(pynvml, name)) == expected, name


def test_binding_p2p_read_constant_is_a_tuple_that_ctypes_rejects(pynvml: ModuleType) -> None:
    """Why P2P_CAPS_INDEX exists: ``NVML_P2P_CAPS_INDEX_READ = 0,`` in nvidia-ml-py 13.615."""
    read = pynvml.NVML_P2P_CAPS_INDEX_READ
    if isinstance(read, int):
        pytest.skip("this nvidia-ml-py has fixed the trailing comma")
    assert read == (P2P_CAPS_INDEX["read"],)
    libc = ctypes.CDLL(None)
    with pytest.raises(ctypes.ArgumentError):
        libc.abs(read)  # what nvmlDeviceGetP2PStatus's untyped ctypes call does with it


def test_our_p2p_indices_are_plain_ints_matching_the_binding(pynvml: ModuleType) -> None:
    for name, index in P2P_CAPS_INDEX.items():
        assert type(index) is int
        binding = getattr(pynvml, f"NVML_P2P_CAPS_INDEX_{name.upper()}")
        assert index in (binding if isinstance(binding, tuple) else (binding,))


def _patch_binding(monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType, **calls: Any) -> None:
    for name, value in calls.items():
        monkeypatch.setattr(pynvml, name, value)


def _raise(pynvml: ModuleType, code: int) -> Any:
    def call(*_args: Any) -> Any:
        raise pynvml.NVMLError(code)

    return call


def test_real_adapter_translates_driver_library_mismatch(
    monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType
) -> None:
    _patch_binding(monkeypatch, pynvml, nvmlInit=_raise(pynvml, LIB_RM_VERSION_MISMATCH))
    assert collect_nvml(RealNvml()) == Unavailable("nvml-driver-library-mismatch")


def test_real_adapter_reads_a_gb10_through_the_binding_and_passes_int_p2p_indices(
    monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType
) -> None:
    """The binding's real return shapes (bytes busId, memory struct) on a two-GB10 host."""
    libc = ctypes.CDLL(None)
    seen_indices: list[object] = []
    shutdowns: list[bool] = []

    def p2p(_a: object, _b: object, index: object) -> int:
        seen_indices.append(index)
        libc.abs(index)  # ctypes rejects a tuple here, as the real wrapper's call does
        return P2P_OK

    def pci_info(handle: int) -> Any:
        info = pynvml.nvmlPciInfo_t()
        info.busId = f"0000000F:0{handle + 1}:00.0".encode()
        return info

    _patch_binding(
        monkeypatch,
        pynvml,
        nvmlInit=lambda: None,
        nvmlShutdown=lambda: shutdowns.append(True),
        nvmlSystemGetDriverVersion=lambda: "580.95.05",
        nvmlSystemGetCudaDriverVersion=lambda: 13000,
        nvmlSystemGetNVMLVersion=lambda: "13.580.95.05",
        nvmlDeviceGetCount=lambda: 2,
        nvmlDeviceGetHandleByIndex=lambda index: index,
        nvmlDeviceGetName=lambda _h: "NVIDIA GB10",
        nvmlDeviceGetUUID=lambda h: f"GPU-{h}",
        nvmlDeviceGetPciInfo=pci_info,
        nvmlDeviceGetCudaComputeCapability=lambda _h: (12, 1),
        nvmlDeviceGetMemoryInfo=_raise(pynvml, NOT_SUPPORTED),
        nvmlDeviceGetP2PStatus=p2p,
    )

    facts = collect_nvml(RealNvml())

    assert isinstance(facts, NvmlFacts)
    assert [g.pci_bus_id for g in facts.gpus] == ["000f:01:00.0", "000f:02:00.0"]
    assert [g.memory_total_bytes for g in facts.gpus] == [Unavailable("not-supported")] * 2
    assert facts.gpus[1].uuid == "GPU-1"
    assert facts.p2p == [
        P2PPair(gpu_a=0, gpu_b=1, read="OK", write="OK", nvlink="OK", atomics="OK")
    ]
    assert seen_indices == [0, 1, 2, 3]
    assert all(type(i) is int for i in seen_indices)
    assert shutdowns == [True]


def test_real_adapter_without_a_driver_says_library_not_found() -> None:
    try:
        ctypes.CDLL("libnvidia-ml.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this host has an NVIDIA driver (tests/test_gpu_real.py covers it)")
    assert collect_nvml(RealNvml()) == Unavailable("nvml-library-not-found")


def test_gb10_has_no_pcie_link_or_bar1_and_says_why() -> None:
    gb10 = FakeGpu(
        name="NVIDIA GB10",
        capability=(12, 1),
        memory_total=None,
        pcie={},
        bar1_total=None,
    )

    facts = collect_nvml(FakeNvml(gpus=[gb10]))

    assert isinstance(facts, NvmlFacts)
    assert facts.gpus[0].pcie == Unavailable("not-supported")
    assert facts.gpus[0].bar1_total_bytes == Unavailable("not-supported")


def test_a_link_field_out_of_range_or_refused_is_left_out_not_invented() -> None:
    gpu = FakeGpu(
        pcie={
            "current_gen": 4,
            "current_width": 0xFFFFFFFF,  # NVML's "unknown" on some boards
            "max_gen": 5,
            "max_width": 16,
            "gpu_max_gen": ("error", NOT_SUPPORTED),
        }
    )

    facts = collect_nvml(FakeNvml(gpus=[gpu]))

    assert isinstance(facts, NvmlFacts)
    assert facts.gpus[0].pcie == NvmlPcieLink(
        current_gen=4, current_width=None, max_gen=5, max_width=16, gpu_max_gen=None
    )
