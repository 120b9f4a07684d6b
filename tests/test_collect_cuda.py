"""collect_cuda over fake adapters, and the real adapter against the installed cuda-bindings."""

from __future__ import annotations

import ctypes
import importlib
from dataclasses import dataclass, field
from types import ModuleType
from typing import Any

import msgspec
import pytest

from blackwell_doctor.collect.cuda import DEVICE_ATTRIBUTES, CudaCallError, RealCuda, collect_cuda
from blackwell_doctor.collect.cuda_driver import reason_token as cuda_error_reason
from blackwell_doctor.facts.document import CudaDevice, CudaFacts, Unavailable

# RTX PRO 6000 Blackwell (CC 12.0): REFERENCE §1 (188 SMs, 100 KB SMEM/SM, 101,376 opt-in).
RTX_PRO_6000: dict[str, int] = {
    "COMPUTE_CAPABILITY_MAJOR": 12,
    "COMPUTE_CAPABILITY_MINOR": 0,
    "MULTIPROCESSOR_COUNT": 188,
    "MAX_THREADS_PER_MULTIPROCESSOR": 1536,
    "L2_CACHE_SIZE": 134_217_728,
    "MAX_SHARED_MEMORY_PER_BLOCK": 49_152,
    "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN": 101_376,
    "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR": 102_400,
    "RESERVED_SHARED_MEMORY_PER_BLOCK": 1_024,
}


@dataclass
class FakeDevice:
    name: str | CudaCallError = "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    bus_id: str | CudaCallError = "0000:41:00.0"
    attributes: dict[str, int | CudaCallError] = field(default_factory=lambda: dict(RTX_PRO_6000))


@dataclass
class FakeCuda:
    """A CudaApi; a CudaCallError where a value belongs is raised by that call."""

    devices: list[FakeDevice] = field(default_factory=list)
    init_error: CudaCallError | None = None
    version: int | CudaCallError = 13000
    calls: list[str] = field(default_factory=list)

    def init(self) -> None:
        self.calls.append("init")
        if self.init_error is not None:
            raise self.init_error

    def driver_version(self) -> int:
        if isinstance(self.version, CudaCallError):
            raise self.version
        return self.version

    def device_count(self) -> int:
        self.calls.append("count")
        return len(self.devices)

    def device_name(self, ordinal: int) -> str:
        name = self.devices[ordinal].name
        if isinstance(name, CudaCallError):
            raise name
        return name

    def device_pci_bus_id(self, ordinal: int) -> str:
        bus_id = self.devices[ordinal].bus_id
        if isinstance(bus_id, CudaCallError):
            raise bus_id
        return bus_id

    def device_attribute(self, ordinal: int, attribute: str) -> int:
        value = self.devices[ordinal].attributes[attribute]
        if isinstance(value, CudaCallError):
            raise value
        return value


def test_two_rtx_pro_6000_give_every_limit() -> None:
    fake = FakeCuda(devices=[FakeDevice(), FakeDevice(bus_id="0000:C1:00.0")])

    facts = collect_cuda(fake)

    def rtx_pro_6000(ordinal: int, bus_id: str) -> CudaDevice:
        return CudaDevice(
            ordinal=ordinal,
            name="NVIDIA RTX PRO 6000 Blackwell Workstation Edition",
            pci_bus_id=bus_id,
            compute_capability=(12, 0),
            sm_count=188,
            max_threads_per_sm=1536,
            l2_cache_bytes=134_217_728,
            smem_per_block=49_152,
            smem_per_block_optin=101_376,
            smem_per_sm=102_400,
            reserved_smem_per_block=1_024,
        )

    assert facts == CudaFacts(
        driver_version="13.0",
        devices=[rtx_pro_6000(0, "0000:41:00.0"), rtx_pro_6000(1, "0000:c1:00.0")],
    )
    assert fake.calls[:2] == ["init", "count"]


def test_no_device_at_init_makes_cuda_unavailable() -> None:
    fake = FakeCuda(init_error=CudaCallError(cuda_error_reason("CUDA_ERROR_NO_DEVICE")))
    assert collect_cuda(fake) == Unavailable("cuda-error-no-device")
    assert fake.calls == ["init"]


def test_no_driver_library_makes_cuda_unavailable() -> None:
    fake = FakeCuda(devices=[FakeDevice()], init_error=CudaCallError("libcuda-not-found"))
    assert collect_cuda(fake) == Unavailable("libcuda-not-found")


def test_a_device_whose_name_fails_keeps_its_limits_and_the_other_devices() -> None:
    broken = FakeDevice(name=CudaCallError("cuda-error-unknown"))

    facts = collect_cuda(FakeCuda(devices=[FakeDevice(), broken]))

    assert isinstance(facts, CudaFacts)
    assert facts.devices[0].name == "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"
    assert facts.devices[1].name == Unavailable("cuda-error-unknown")
    assert facts.devices[1].smem_per_block_optin == 101_376
    assert facts.devices[1].compute_capability == (12, 0)


def test_one_failed_attribute_costs_only_that_fact() -> None:
    device = FakeDevice()
    device.attributes["RESERVED_SHARED_MEMORY_PER_BLOCK"] = CudaCallError(
        "cuda-error-invalid-value"
    )
    device.attributes["COMPUTE_CAPABILITY_MINOR"] = CudaCallError("cuda-error-invalid-value")

    facts = collect_cuda(FakeCuda(devices=[device]))

    assert isinstance(facts, CudaFacts)
    (got,) = facts.devices
    assert got.reserved_smem_per_block == Unavailable("cuda-error-invalid-value")
    assert got.compute_capability == Unavailable("cuda-error-invalid-value")
    assert got.smem_per_sm == 102_400


def test_driver_version_failure_keeps_the_devices() -> None:
    fake = FakeCuda(devices=[FakeDevice()], version=CudaCallError("cuda-error-invalid-value"))
    facts = collect_cuda(fake)
    assert isinstance(facts, CudaFacts)
    assert facts.driver_version == Unavailable("cuda-error-invalid-value")
    assert len(facts.devices) == 1


def test_cuda_12_8_driver_version() -> None:
    facts = collect_cuda(FakeCuda(version=12080))
    assert facts == CudaFacts(driver_version="12.8", devices=[])


def test_facts_survive_the_json_round_trip() -> None:
    device = FakeDevice()
    device.attributes["L2_CACHE_SIZE"] = CudaCallError("cuda-error-not-supported")
    facts = collect_cuda(FakeCuda(devices=[device]))

    wire = msgspec.json.encode(facts)

    assert msgspec.json.decode(wire, type=CudaFacts | Unavailable) == facts


@pytest.mark.parametrize(
    ("name", "reason"),
    [
        ("CUDA_ERROR_NO_DEVICE", "cuda-error-no-device"),
        ("CUDA_ERROR_SYSTEM_DRIVER_MISMATCH", "cuda-error-system-driver-mismatch"),
        ("CUDA_ERROR_NOT_INITIALIZED", "cuda-error-not-initialized"),
    ],
)
def test_cuda_error_reason(name: str, reason: str) -> None:
    assert cuda_error_reason(name) == reason


# --------------------------------------------------------------------------- the real adapter


@pytest.fixture
def driver() -> ModuleType:
    pytest.importorskip("cuda.bindings")
    return importlib.import_module("cuda.bindings.driver")


def test_every_attribute_we_ask_for_exists_in_the_installed_binding(driver: ModuleType) -> None:
    names = [*DEVICE_ATTRIBUTES.values(), "COMPUTE_CAPABILITY_MAJOR", "COMPUTE_CAPABILITY_MINOR"]
    for name in names:
        assert hasattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{name}"), name


def test_every_curesult_error_becomes_a_token(driver: ModuleType) -> None:
    names = [n for n in dir(driver.CUresult) if n.startswith("CUDA_ERROR_")]
    assert "CUDA_ERROR_NO_DEVICE" in names
    for name in names:
        reason = cuda_error_reason(name)
        assert reason.startswith("cuda-error-")
        assert reason == reason.lower()
        assert "_" not in reason


def test_real_adapter_translates_a_cuinit_error(
    monkeypatch: pytest.MonkeyPatch, driver: ModuleType
) -> None:
    monkeypatch.setattr(driver, "cuInit", lambda _flags: (driver.CUresult.CUDA_ERROR_NO_DEVICE,))
    assert collect_cuda(RealCuda()) == Unavailable("cuda-error-no-device")


def test_real_adapter_reads_values_behind_the_curesult(
    monkeypatch: pytest.MonkeyPatch, driver: ModuleType
) -> None:
    """cuda-bindings' shapes: (CUresult, value) tuples, NUL-padded name bytes."""
    ok = driver.CUresult.CUDA_SUCCESS
    by_enum: dict[Any, int] = {
        getattr(driver.CUdevice_attribute, f"CU_DEVICE_ATTRIBUTE_{k}"): v
        for k, v in RTX_PRO_6000.items()
    }
    calls = {
        "cuInit": lambda _flags: (ok,),
        "cuDriverGetVersion": lambda: (ok, 13000),
        "cuDeviceGetCount": lambda: (ok, 1),
        "cuDeviceGet": lambda ordinal: (ok, driver.CUdevice(ordinal)),
        "cuDeviceGetName": lambda n, _d: (ok, b"NVIDIA RTX PRO 6000".ljust(n, b"\0")),
        "cuDeviceGetPCIBusId": lambda _n, _d: (ok, b"0000:41:00.0\0\0\0"),
        "cuDeviceGetAttribute": lambda attribute, _d: (ok, by_enum[attribute]),
    }
    for name, call in calls.items():
        monkeypatch.setattr(driver, name, call)

    facts = collect_cuda(RealCuda())

    assert isinstance(facts, CudaFacts)
    assert facts.driver_version == "13.0"
    (device,) = facts.devices
    assert device.name == "NVIDIA RTX PRO 6000"
    assert device.pci_bus_id == "0000:41:00.0"
    assert device.compute_capability == (12, 0)
    assert device.smem_per_block_optin == 101_376


def test_real_adapter_without_a_driver_says_libcuda_not_found() -> None:
    """cuda-bindings 13 raises DynamicLibNotFoundError at cuInit; it must become a token."""
    pytest.importorskip("cuda.bindings")
    try:
        ctypes.CDLL("libcuda.so.1")
    except OSError:
        pass
    else:
        pytest.skip("this host has libcuda (tests/test_gpu_real.py covers it)")
    assert collect_cuda(RealCuda()) == Unavailable("libcuda-not-found")
