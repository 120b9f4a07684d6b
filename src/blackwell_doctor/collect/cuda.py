"""CUDA driver API facts: :func:`collect_cuda`, pure logic over :class:`CudaApi`.

:class:`RealCuda` implements it over the one CUDA adapter
(:mod:`blackwell_doctor.collect.cuda_driver`), which turns every CUresult error into a reason token
(``cuda-error-no-device``). The attribute
that decides SM12x tile fits is ``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`` (REFERENCE §1), read
here, never assumed from a table.
"""

from __future__ import annotations

from typing import Any, Protocol

from blackwell_doctor.collect.calls import CallError, attempt
from blackwell_doctor.collect.cuda_driver import CudaFailure, Driver, c_string
from blackwell_doctor.collect.nvml import format_cuda_version
from blackwell_doctor.facts.document import CudaDevice, CudaFacts, Unavailable
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

# CudaDevice field → CUdevice_attribute name without its CU_DEVICE_ATTRIBUTE_ prefix.
DEVICE_ATTRIBUTES: dict[str, str] = {
    "sm_count": "MULTIPROCESSOR_COUNT",
    "max_threads_per_sm": "MAX_THREADS_PER_MULTIPROCESSOR",
    "l2_cache_bytes": "L2_CACHE_SIZE",
    "smem_per_block": "MAX_SHARED_MEMORY_PER_BLOCK",
    "smem_per_block_optin": "MAX_SHARED_MEMORY_PER_BLOCK_OPTIN",
    "smem_per_sm": "MAX_SHARED_MEMORY_PER_MULTIPROCESSOR",
    "reserved_smem_per_block": "RESERVED_SHARED_MEMORY_PER_BLOCK",
}


class CudaCallError(CallError):
    """A driver API call failed; ``reason`` is the token to record as :class:`Unavailable`."""


class CudaApi(Protocol):
    """What :func:`collect_cuda` asks of the driver API. Every method may raise
    :class:`CudaCallError`. Devices are named by CUDA ordinal (after CUDA_VISIBLE_DEVICES).
    """

    def init(self) -> None: ...
    def driver_version(self) -> int: ...
    def device_count(self) -> int: ...
    def device_name(self, ordinal: int) -> str: ...
    def device_pci_bus_id(self, ordinal: int) -> str: ...
    def device_attribute(self, ordinal: int, attribute: str) -> int: ...


def collect_cuda(api: CudaApi) -> CudaFacts | Unavailable:
    """cuInit, the driver's CUDA version, and each device's identity and limits."""
    try:
        api.init()
        count = api.device_count()
    except CudaCallError as exc:
        return Unavailable(exc.reason)
    version = attempt(api.driver_version)
    return CudaFacts(
        driver_version=(
            version if isinstance(version, Unavailable) else format_cuda_version(version)
        ),
        devices=[_collect_device(api, ordinal) for ordinal in range(count)],
    )


def _collect_device(api: CudaApi, ordinal: int) -> CudaDevice:
    def attribute(name: str) -> int | Unavailable:
        return attempt(lambda: api.device_attribute(ordinal, name))

    major = attribute("COMPUTE_CAPABILITY_MAJOR")
    minor = attribute("COMPUTE_CAPABILITY_MINOR")
    capability: tuple[int, int] | Unavailable
    if isinstance(major, Unavailable):
        capability = major
    elif isinstance(minor, Unavailable):
        capability = minor
    else:
        capability = (major, minor)
    bus_id = attempt(lambda: api.device_pci_bus_id(ordinal))
    limits = {field: attribute(name) for field, name in DEVICE_ATTRIBUTES.items()}
    return CudaDevice(
        ordinal=ordinal,
        name=attempt(lambda: api.device_name(ordinal)),
        pci_bus_id=bus_id if isinstance(bus_id, Unavailable) else normalize_pci_bus_id(bus_id),
        compute_capability=capability,
        sm_count=limits["sm_count"],
        max_threads_per_sm=limits["max_threads_per_sm"],
        l2_cache_bytes=limits["l2_cache_bytes"],
        smem_per_block=limits["smem_per_block"],
        smem_per_block_optin=limits["smem_per_block_optin"],
        smem_per_sm=limits["smem_per_sm"],
        reserved_smem_per_block=limits["reserved_smem_per_block"],
    )


# --------------------------------------------------------------------------- the real one


class RealCuda:
    """:class:`CudaApi` over the one CUDA adapter,
    :class:`blackwell_doctor.collect.cuda_driver.Driver`."""

    def __init__(self) -> None:
        self._driver: Driver | None = None
        self._devices: dict[int, Any] = {}

    def _call(self, function: str, *args: Any) -> Any:
        """The call's value(s) after the CUresult; raises CudaCallError on an error."""
        if self._driver is None:
            try:
                self._driver = Driver()
            except ImportError:
                raise CudaCallError("cuda-binding-not-installed") from None
        try:
            return self._driver.call(function, *args)
        except CudaFailure as exc:
            raise CudaCallError(exc.reason) from None

    def _device(self, ordinal: int) -> Any:
        if ordinal not in self._devices:
            self._devices[ordinal] = self._call("cuDeviceGet", ordinal)
        return self._devices[ordinal]

    def init(self) -> None:
        self._call("cuInit", 0)

    def driver_version(self) -> int:
        return int(self._call("cuDriverGetVersion"))

    def device_count(self) -> int:
        return int(self._call("cuDeviceGetCount"))

    def device_name(self, ordinal: int) -> str:
        return c_string(self._call("cuDeviceGetName", 256, self._device(ordinal))).strip()

    def device_pci_bus_id(self, ordinal: int) -> str:
        return c_string(self._call("cuDeviceGetPCIBusId", 64, self._device(ordinal))).strip()

    def device_attribute(self, ordinal: int, attribute: str) -> int:
        device = self._device(ordinal)
        assert self._driver is not None  # _device called the driver
        try:
            return self._driver.attribute(device, attribute)
        except CudaFailure as exc:
            raise CudaCallError(exc.reason) from None
