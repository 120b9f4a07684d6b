"""CUDA driver API: the only collector that imports ``cuda.bindings.driver``, inside functions.

A thin adapter (:class:`CudaApi`, :class:`RealCuda`) turns every CUresult error into a reason
token (``cuda-error-no-device``); :func:`collect_cuda` is pure logic over it. The attribute
that decides SM12x tile fits is ``MAX_SHARED_MEMORY_PER_BLOCK_OPTIN`` (REFERENCE §1), read
here, never assumed from a table.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Protocol, TypeVar

from blackwell_doctor.collect.nvml import format_cuda_version
from blackwell_doctor.facts import CudaDevice, CudaFacts, Unavailable
from blackwell_doctor.pciaddr import normalize_pci_bus_id

_T = TypeVar("_T")

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


def cuda_error_reason(result_name: str) -> str:
    """``CUDA_ERROR_NO_DEVICE`` → ``cuda-error-no-device``."""
    return "cuda-error-" + result_name.removeprefix("CUDA_ERROR_").lower().replace("_", "-")


class CudaCallError(Exception):
    """A driver API call failed; ``reason`` is the token to record as :class:`Unavailable`."""

    def __init__(self, reason: str) -> None:
        super().__init__(reason)
        self.reason = reason


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


def _attempt(call: Callable[[], _T]) -> _T | Unavailable:
    try:
        return call()
    except CudaCallError as exc:
        return Unavailable(exc.reason)


def collect_cuda(api: CudaApi) -> CudaFacts | Unavailable:
    """cuInit, the driver's CUDA version, and each device's identity and limits."""
    try:
        api.init()
        count = api.device_count()
    except CudaCallError as exc:
        return Unavailable(exc.reason)
    version = _attempt(api.driver_version)
    return CudaFacts(
        driver_version=(
            version if isinstance(version, Unavailable) else format_cuda_version(version)
        ),
        devices=[_collect_device(api, ordinal) for ordinal in range(count)],
    )


def _collect_device(api: CudaApi, ordinal: int) -> CudaDevice:
    def attribute(name: str) -> int | Unavailable:
        return _attempt(lambda: api.device_attribute(ordinal, name))

    major = attribute("COMPUTE_CAPABILITY_MAJOR")
    minor = attribute("COMPUTE_CAPABILITY_MINOR")
    capability: tuple[int, int] | Unavailable
    if isinstance(major, Unavailable):
        capability = major
    elif isinstance(minor, Unavailable):
        capability = minor
    else:
        capability = (major, minor)
    bus_id = _attempt(lambda: api.device_pci_bus_id(ordinal))
    limits = {field: attribute(name) for field, name in DEVICE_ATTRIBUTES.items()}
    return CudaDevice(
        ordinal=ordinal,
        name=_attempt(lambda: api.device_name(ordinal)),
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


def _c_string(value: object) -> str:
    raw = value if isinstance(value, bytes) else str(value).encode()
    return raw.split(b"\0", 1)[0].decode("utf-8", "replace").strip()


class _NeverRaised(Exception):
    pass


class RealCuda:
    """:class:`CudaApi` over cuda-bindings. ``Any`` from the untyped binding stays in here."""

    def __init__(self) -> None:
        self._driver: Any = None
        self._lib_not_found: type[Exception] = _NeverRaised
        self._devices: dict[int, Any] = {}

    def _binding(self) -> Any:
        if self._driver is None:
            try:
                import cuda.bindings.driver as driver  # noqa: TID251 -- the CUDA adapter
            except ImportError:
                raise CudaCallError("cuda-binding-not-installed") from None
            try:
                from cuda.pathfinder import DynamicLibNotFoundError  # noqa: TID251
            except ImportError:  # cuda-bindings before pathfinder: nothing raises it
                pass
            else:
                self._lib_not_found = DynamicLibNotFoundError
            self._driver = driver
        return self._driver

    def _call(self, function: str, *args: Any) -> Any:
        """The call's value(s) after the CUresult; raises CudaCallError on an error."""
        driver = self._binding()
        try:
            result, *values = getattr(driver, function)(*args)
        except self._lib_not_found:
            # Without a driver, cuda-bindings 13 raises cuda.pathfinder's
            # DynamicLibNotFoundError at the first call instead of returning a CUresult.
            raise CudaCallError("libcuda-not-found") from None
        if int(result) != 0:
            name = getattr(result, "name", None)
            raise CudaCallError(cuda_error_reason(name) if name else f"cuda-error-{int(result)}")
        return values[0] if len(values) == 1 else tuple(values)

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
        return _c_string(self._call("cuDeviceGetName", 256, self._device(ordinal)))

    def device_pci_bus_id(self, ordinal: int) -> str:
        return _c_string(self._call("cuDeviceGetPCIBusId", 64, self._device(ordinal)))

    def device_attribute(self, ordinal: int, attribute: str) -> int:
        enum = self._driver_enum("CUdevice_attribute", f"CU_DEVICE_ATTRIBUTE_{attribute}")
        return int(self._call("cuDeviceGetAttribute", enum, self._device(ordinal)))

    def _driver_enum(self, enum_type: str, member: str) -> Any:
        value = getattr(getattr(self._binding(), enum_type), member, None)
        if value is None:  # a cuda-bindings older than the attribute
            raise CudaCallError(f"cuda-binding-missing:{member}")
        return value
