"""NVML: the only module that imports ``pynvml`` (nvidia-ml-py), and only inside functions.

Like nvitop's ``libnvml``: a thin adapter (:class:`NvmlApi`, :class:`RealNvml`) turns every
NVML error into this program's own vocabulary, a reason token (:func:`nvml_error_reason`);
:func:`collect_nvml` is pure logic over the adapter, so fakes test it without a GPU. One
failed call makes one fact unavailable, never the whole collection (GB10 answers
NOT_SUPPORTED for memory, REFERENCE §1).
"""

from __future__ import annotations

import contextlib
import ctypes
import functools
import sys
import traceback
from collections.abc import Callable
from typing import Any, Literal, Protocol

from blackwell_doctor.collect.calls import CallError, attempt
from blackwell_doctor.facts.document import (
    P2P_STATUS_NAMES,
    ClockSample,
    EccCounts,
    GpuHealth,
    NvmlFacts,
    NvmlGpu,
    NvmlPcieLink,
    P2PPair,
    RemappedRows,
    RetiredPages,
    Unavailable,
)
from blackwell_doctor.facts.pciaddr import normalize_pci_bus_id

# nvmlGpuP2PCapsIndex_t (nvml.h): READ=0 WRITE=1 NVLINK=2 ATOMICS=3 PCI=4. Our own plain
# ints on purpose: nvidia-ml-py 13.615 defines ``NVML_P2P_CAPS_INDEX_READ = 0,`` with a
# trailing comma, so that constant is the tuple ``(0,)`` and passing it to
# nvmlDeviceGetP2PStatus raises ctypes.ArgumentError (REFERENCE §4). Keys are P2PPair fields.
P2P_CAPS_INDEX: dict[str, int] = {"read": 0, "write": 1, "nvlink": 2, "atomics": 3}

# nvmlReturn_t values (nvml.h) whose tokens other modules rely on by name.
_NVML_REASONS: dict[int, str] = {
    3: "not-supported",
    4: "permission-denied:nvml",
    9: "nvml-driver-not-loaded",
    12: "nvml-library-not-found",
    13: "nvml-function-not-found",
    18: "nvml-driver-library-mismatch",
}

# The rest of nvmlReturn_t, for ``nvml-error-<name>`` tokens.
_NVML_ERROR_NAMES: dict[int, str] = {
    1: "uninitialized",
    2: "invalid-argument",
    5: "already-initialized",
    6: "not-found",
    7: "insufficient-size",
    8: "insufficient-power",
    10: "timeout",
    11: "irq-issue",
    14: "corrupted-inforom",
    15: "gpu-is-lost",
    16: "reset-required",
    17: "operating-system",
    19: "in-use",
    20: "memory",
    21: "no-data",
    22: "vgpu-ecc-not-supported",
    23: "insufficient-resources",
    24: "freq-not-supported",
    25: "argument-version-mismatch",
    26: "deprecated",
    27: "not-ready",
    28: "gpu-not-found",
    29: "invalid-state",
    30: "reset-type-not-supported",
    999: "unknown",
}


def nvml_error_reason(code: int) -> str:
    """The reason token for an ``nvmlReturn_t`` error code."""
    if code in _NVML_REASONS:
        return _NVML_REASONS[code]
    return f"nvml-error-{_NVML_ERROR_NAMES.get(code, str(code))}"


class NvmlCallError(CallError):
    """An NVML call failed; ``reason`` is the token to record as :class:`Unavailable`."""


class NvmlApi(Protocol):
    """What :func:`collect_nvml` asks of NVML. Every method may raise :class:`NvmlCallError`.

    Devices are named by NVML index; the adapter keeps the handles.
    """

    def init(self) -> None: ...
    def shutdown(self) -> None: ...
    def driver_version(self) -> str: ...
    def cuda_driver_version(self) -> int: ...
    def nvml_version(self) -> str: ...
    def device_count(self) -> int: ...
    def device_name(self, index: int) -> str: ...
    def device_uuid(self, index: int) -> str: ...
    def device_pci_bus_id(self, index: int) -> str: ...
    def device_compute_capability(self, index: int) -> tuple[int, int]: ...
    def device_memory_total(self, index: int) -> int: ...
    def device_pcie(self, index: int, field: PcieField) -> int: ...
    def device_bar1_total(self, index: int) -> int: ...
    def p2p_status(self, index_a: int, index_b: int, caps_index: int) -> int: ...


class NvmlHealthApi(NvmlApi, Protocol):
    """What :func:`collect_gpu_health` and :func:`sample_clocks` ask of NVML (issue 39):
    reads only, never a setter. Every method may raise :class:`NvmlCallError`."""

    def device_temperature(self, index: int) -> int: ...
    def device_temperature_threshold(self, index: int, which: ThresholdName) -> int: ...
    def device_margin_temperature(self, index: int) -> int: ...
    def device_fan_speeds(self, index: int) -> list[int]: ...
    def device_power(self, index: int, which: PowerName) -> int: ...
    def device_power_constraints(self, index: int) -> tuple[int, int]: ...
    def device_clock_event_reasons(self, index: int) -> int: ...
    def device_sm_clock(self, index: int, *, maximum: bool) -> int: ...
    def device_ecc_mode(self, index: int) -> tuple[bool, bool]: ...
    def device_ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int: ...
    def device_remapped_rows(self, index: int) -> tuple[int, int, bool, bool]: ...
    def device_retired_pages(self, index: int, *, double_bit: bool) -> int: ...
    def device_retired_pages_pending(self, index: int) -> bool: ...
    def device_pcie_replays(self, index: int) -> int: ...
    def device_recovery_action(self, index: int) -> int: ...


# nvmlTemperatureThresholds_t (nvml.h): SHUTDOWN=0 SLOWDOWN=1 MEM_MAX=2 GPU_MAX=3.
ThresholdName = Literal["shutdown", "slowdown", "gpu_max"]
TEMPERATURE_THRESHOLDS: dict[ThresholdName, int] = {"shutdown": 0, "slowdown": 1, "gpu_max": 3}
PowerName = Literal["limit", "default", "usage"]
POWER_CALLS: dict[PowerName, str] = {
    "limit": "nvmlDeviceGetEnforcedPowerLimit",
    "default": "nvmlDeviceGetPowerManagementDefaultLimit",
    "usage": "nvmlDeviceGetPowerUsage",
}
# nvml.h: NVML_TEMPERATURE_GPU=0, NVML_CLOCK_SM=1, NVML_MEMORY_ERROR_TYPE_CORRECTED=0 /
# _UNCORRECTED=1, NVML_VOLATILE_ECC=0 / NVML_AGGREGATE_ECC=1,
# NVML_PAGE_RETIREMENT_CAUSE_MULTIPLE_SINGLE_BIT_ECC_ERRORS=0 / _DOUBLE_BIT_ECC_ERROR=1,
# NVML_FI_DEV_GET_GPU_RECOVERY_ACTION=230 (nvidia-ml-py 13.615's values of the same names).
_TEMPERATURE_GPU = 0
_CLOCK_SM = 1
_FI_GPU_RECOVERY_ACTION = 230
# A temperature NVML can truthfully report (GpuHealth's range); a fan above 255 % is noise.
_CELSIUS = range(-100, 301)


PcieField = Literal["current_gen", "current_width", "max_gen", "max_width", "gpu_max_gen"]

# The NVML call behind each NvmlPcieLink field (nvml.h). Max* is what this GPU and this
# system allow together; GpuMax* the GPU's own maximum, whatever the slot.
PCIE_CALLS: dict[PcieField, str] = {
    "current_gen": "nvmlDeviceGetCurrPcieLinkGeneration",
    "current_width": "nvmlDeviceGetCurrPcieLinkWidth",
    "max_gen": "nvmlDeviceGetMaxPcieLinkGeneration",
    "max_width": "nvmlDeviceGetMaxPcieLinkWidth",
    "gpu_max_gen": "nvmlDeviceGetGpuMaxPcieLinkGeneration",
}
# Link generations and widths NVML can truthfully report; anything else is not recorded.
_LINK_RANGE: dict[PcieField, range] = {
    "current_gen": range(1, 17),
    "current_width": range(1, 33),
    "max_gen": range(1, 17),
    "max_width": range(1, 33),
    "gpu_max_gen": range(1, 17),
}


def format_cuda_version(version: int) -> str:
    """13000 → "13.0", 12080 → "12.8" (the encoding of cuDriverGetVersion and NVML)."""
    return f"{version // 1000}.{(version % 1000) // 10}"


def collect_nvml(api: NvmlApi) -> NvmlFacts | Unavailable:
    """Read driver, versions, GPUs and the P2P matrix; shuts NVML down whatever happens."""
    try:
        api.init()
    except NvmlCallError as exc:
        return Unavailable(exc.reason)
    try:
        return _collect_initialised(api)
    finally:
        with contextlib.suppress(NvmlCallError):  # nothing left to do with NVML either way
            api.shutdown()


def _collect_initialised(api: NvmlApi) -> NvmlFacts | Unavailable:
    cuda_version = attempt(api.cuda_driver_version)
    try:
        count = api.device_count()
    except NvmlCallError as exc:
        # Without a count, an empty GPU list would read as "no GPU": say so instead.
        return Unavailable(exc.reason)
    gpus = [_collect_gpu(api, index) for index in range(count)]
    return NvmlFacts(
        driver_version=attempt(api.driver_version),
        cuda_driver_version=(
            cuda_version
            if isinstance(cuda_version, Unavailable)
            else format_cuda_version(cuda_version)
        ),
        nvml_version=attempt(api.nvml_version),
        gpus=gpus,
        p2p=[_collect_pair(api, a, b) for a in range(count) for b in range(a + 1, count)],
    )


def _collect_gpu(api: NvmlApi, index: int) -> NvmlGpu:
    bus_id = attempt(lambda: api.device_pci_bus_id(index))
    return NvmlGpu(
        index=index,
        name=attempt(lambda: api.device_name(index)),
        uuid=attempt(lambda: api.device_uuid(index)),
        pci_bus_id=bus_id if isinstance(bus_id, Unavailable) else normalize_pci_bus_id(bus_id),
        compute_capability=attempt(lambda: api.device_compute_capability(index)),
        memory_total_bytes=attempt(lambda: api.device_memory_total(index)),
        pcie=collect_pcie_link(api, index),
        bar1_total_bytes=attempt(lambda: api.device_bar1_total(index)),
    )


def collect_pcie_link(api: NvmlApi, index: int) -> NvmlPcieLink | Unavailable:
    """The link fields NVML answers; Unavailable (the first reason) when it answers none."""
    values: dict[str, int | None] = {}
    reasons: list[str] = []
    for name in PCIE_CALLS:
        got = attempt(functools.partial(api.device_pcie, index, name))
        if isinstance(got, Unavailable):
            reasons.append(got.reason)
            values[name] = None
        else:
            values[name] = got if got in _LINK_RANGE[name] else None
    if all(v is None for v in values.values()):
        return Unavailable(reasons[0] if reasons else "nvml-no-pcie-link")
    return NvmlPcieLink(**values)


def _collect_pair(api: NvmlApi, a: int, b: int) -> P2PPair:
    def status(caps_index: int) -> str | Unavailable:
        code = attempt(lambda: api.p2p_status(a, b, caps_index))
        if isinstance(code, Unavailable):
            return code
        return P2P_STATUS_NAMES.get(code, "UNKNOWN")

    return P2PPair(
        gpu_a=a,
        gpu_b=b,
        read=status(P2P_CAPS_INDEX["read"]),
        write=status(P2P_CAPS_INDEX["write"]),
        nvlink=status(P2P_CAPS_INDEX["nvlink"]),
        atomics=status(P2P_CAPS_INDEX["atomics"]),
    )


def collect_nvml_and_health(
    api: NvmlHealthApi,
) -> tuple[NvmlFacts | Unavailable, list[GpuHealth] | Unavailable]:
    """:func:`collect_nvml` and every GPU's :func:`collect_gpu_health` in one NVML session
    (nvmlInit is the slow part of a short one)."""
    try:
        api.init()
    except NvmlCallError as exc:
        return Unavailable(exc.reason), Unavailable(exc.reason)
    try:
        nvml = _collect_initialised(api)
        if isinstance(nvml, Unavailable):
            return nvml, nvml
        try:
            health = [collect_gpu_health(api, g.index) for g in nvml.gpus]
        except Exception as exc:  # a bug here costs the health facts, not the GPU facts
            traceback.print_exc(file=sys.stderr)
            return nvml, Unavailable(f"internal-error:{type(exc).__name__}")
        return nvml, health
    finally:
        with contextlib.suppress(NvmlCallError):
            api.shutdown()


def _in_range(value: int | Unavailable, allowed: range) -> int | Unavailable:
    if isinstance(value, Unavailable) or value in allowed:
        return value
    return Unavailable(f"nvml-out-of-range:{value}")


def collect_gpu_health(api: NvmlHealthApi, index: int) -> GpuHealth:
    """One GPU's health as NVML answers it (issue 39); one failed call makes one value
    unavailable with its reason (``not-supported`` on GeForce and GB10), nothing more."""

    def one(call: Callable[[], int]) -> int | Unavailable:
        return attempt(call)

    def celsius(call: Callable[[], int]) -> int | Unavailable:
        return _in_range(attempt(call), _CELSIUS)

    constraints = attempt(lambda: api.device_power_constraints(index))
    mode = attempt(lambda: api.device_ecc_mode(index))
    fans = attempt(lambda: api.device_fan_speeds(index))
    if not isinstance(fans, Unavailable):
        fans = [f for f in fans if 0 <= f <= 255]
    return GpuHealth(
        index=index,
        temperature_c=celsius(lambda: api.device_temperature(index)),
        slowdown_c=celsius(lambda: api.device_temperature_threshold(index, "slowdown")),
        shutdown_c=celsius(lambda: api.device_temperature_threshold(index, "shutdown")),
        gpu_max_c=celsius(lambda: api.device_temperature_threshold(index, "gpu_max")),
        margin_c=celsius(lambda: api.device_margin_temperature(index)),
        fans_percent=fans,
        power_limit_mw=one(lambda: api.device_power(index, "limit")),
        power_default_mw=one(lambda: api.device_power(index, "default")),
        power_min_mw=constraints if isinstance(constraints, Unavailable) else constraints[0],
        power_max_mw=constraints if isinstance(constraints, Unavailable) else constraints[1],
        power_usage_mw=one(lambda: api.device_power(index, "usage")),
        clock_event_reasons=one(lambda: api.device_clock_event_reasons(index)),
        sm_clock_mhz=one(lambda: api.device_sm_clock(index, maximum=False)),
        sm_clock_max_mhz=one(lambda: api.device_sm_clock(index, maximum=True)),
        ecc_enabled=mode if isinstance(mode, Unavailable) else mode[0],
        ecc_pending_enabled=mode if isinstance(mode, Unavailable) else mode[1],
        ecc_errors=_ecc_errors(api, index, mode),
        remapped_rows=_remapped_rows(api, index),
        retired_pages=_retired_pages(api, index),
        pcie_replays=one(lambda: api.device_pcie_replays(index)),
        recovery_action=_in_range(attempt(lambda: api.device_recovery_action(index)), range(256)),
    )


def _ecc_errors(
    api: NvmlHealthApi, index: int, mode: tuple[bool, bool] | Unavailable
) -> EccCounts | Unavailable:
    if isinstance(mode, Unavailable):
        return mode  # no ECC on this GPU (GeForce): the counters say nothing either
    values: dict[str, int | None] = {}
    reasons: list[str] = []
    for name, uncorrected, aggregate in (
        ("volatile_corrected", False, False),
        ("volatile_uncorrected", True, False),
        ("aggregate_corrected", False, True),
        ("aggregate_uncorrected", True, True),
    ):
        got = attempt(
            functools.partial(
                api.device_ecc_errors, index, uncorrected=uncorrected, aggregate=aggregate
            )
        )
        values[name] = None if isinstance(got, Unavailable) else got
        if isinstance(got, Unavailable):
            reasons.append(got.reason)
    if all(v is None for v in values.values()):
        return Unavailable(reasons[0])
    return EccCounts(**values)


def _remapped_rows(api: NvmlHealthApi, index: int) -> RemappedRows | Unavailable:
    got = attempt(lambda: api.device_remapped_rows(index))
    if isinstance(got, Unavailable):
        return got
    correctable, uncorrectable, pending, failure = got
    return RemappedRows(
        correctable=correctable, uncorrectable=uncorrectable, pending=pending, failure=failure
    )


def _retired_pages(api: NvmlHealthApi, index: int) -> RetiredPages | Unavailable:
    single = attempt(lambda: api.device_retired_pages(index, double_bit=False))
    if isinstance(single, Unavailable):
        return single  # Ampere and later remap rows instead: not-supported there
    double = attempt(lambda: api.device_retired_pages(index, double_bit=True))
    if isinstance(double, Unavailable):
        return double
    pending = attempt(lambda: api.device_retired_pages_pending(index))
    return RetiredPages(
        single_bit=single,
        double_bit=double,
        pending=None if isinstance(pending, Unavailable) else pending,
    )


def sample_clocks(api: NvmlHealthApi, index: int) -> ClockSample:
    """One reading taken while a kernel runs (the probes call it between a launch and its
    completion): clock event reasons, SM clock, temperature, power, replay counter."""

    def value(call: Callable[[], int], allowed: range | None = None) -> int | None:
        got = attempt(call)
        if isinstance(got, Unavailable) or (allowed is not None and got not in allowed):
            return None
        return got

    return ClockSample(
        reasons=value(lambda: api.device_clock_event_reasons(index)),
        sm_clock_mhz=value(lambda: api.device_sm_clock(index, maximum=False)),
        temperature_c=value(lambda: api.device_temperature(index), _CELSIUS),
        power_mw=value(lambda: api.device_power(index, "usage")),
        pcie_replays=value(lambda: api.device_pcie_replays(index)),
    )


class ClockSampler:
    """NVML opened once for a probe child's launches: the NVML index of each CUDA device
    (by PCI bus id) and :func:`sample_clocks` of it. A failure is a reason token."""

    def __init__(self, api: NvmlHealthApi) -> None:
        self.api = api
        self.by_bus: dict[str, int] = {}
        self.error: str | None = None

    def start(self) -> None:
        try:
            self.api.init()
            for index in range(self.api.device_count()):
                bus = normalize_pci_bus_id(self.api.device_pci_bus_id(index))
                self.by_bus[bus.lower()] = index
        except NvmlCallError as exc:
            self.error = exc.reason

    def index(self, pci_bus_id: str) -> int | None:
        return self.by_bus.get(normalize_pci_bus_id(pci_bus_id).lower())

    def sample(self, index: int) -> ClockSample:
        """A reading; never raises: it runs between a probe launch and its completion, and
        a bug here must not cost the probe (a failed reading has no reasons)."""
        try:
            return sample_clocks(self.api, index)
        except Exception as exc:
            traceback.print_exc(file=sys.stderr)
            self.error = f"internal-error:{type(exc).__name__}"
            return ClockSample(reasons=None)

    def close(self) -> None:
        with contextlib.suppress(NvmlCallError):
            self.api.shutdown()


# --------------------------------------------------------------------------- the real one


def _text(value: object) -> str:
    return value.decode("utf-8", "replace") if isinstance(value, bytes) else str(value)


class RealNvml:
    """:class:`NvmlApi` over nvidia-ml-py. ``Any`` from the untyped binding stays in here."""

    def __init__(self) -> None:
        self._nvml: Any = None
        self._handles: dict[int, Any] = {}

    def _call(self, function: str, *args: Any) -> Any:
        if self._nvml is None:
            try:
                import pynvml  # noqa: TID251 -- this module is the NVML adapter
            except ImportError:
                raise NvmlCallError("nvml-binding-not-installed") from None
            self._nvml = pynvml
        nvml = self._nvml
        wrapper = getattr(nvml, function, None)
        if wrapper is None:  # an nvidia-ml-py too old to have this wrapper
            raise NvmlCallError(f"nvml-binding-missing:{function}")
        try:
            return wrapper(*args)
        except nvml.NVMLError as exc:
            raise NvmlCallError(nvml_error_reason(int(exc.value))) from None
        except ctypes.ArgumentError:
            # The binding passed something ctypes cannot convert (see P2P_CAPS_INDEX).
            raise NvmlCallError(f"nvml-binding-error:{function}") from None

    def _handle(self, index: int) -> Any:
        if index not in self._handles:
            self._handles[index] = self._call("nvmlDeviceGetHandleByIndex", index)
        return self._handles[index]

    def init(self) -> None:
        self._call("nvmlInit")

    def shutdown(self) -> None:
        self._handles.clear()
        self._call("nvmlShutdown")

    def driver_version(self) -> str:
        return _text(self._call("nvmlSystemGetDriverVersion"))

    def cuda_driver_version(self) -> int:
        return int(self._call("nvmlSystemGetCudaDriverVersion"))

    def nvml_version(self) -> str:
        return _text(self._call("nvmlSystemGetNVMLVersion"))

    def device_count(self) -> int:
        return int(self._call("nvmlDeviceGetCount"))

    def device_name(self, index: int) -> str:
        return _text(self._call("nvmlDeviceGetName", self._handle(index)))

    def device_uuid(self, index: int) -> str:
        return _text(self._call("nvmlDeviceGetUUID", self._handle(index)))

    def device_pci_bus_id(self, index: int) -> str:
        return _text(self._call("nvmlDeviceGetPciInfo", self._handle(index)).busId)

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        major, minor = self._call("nvmlDeviceGetCudaComputeCapability", self._handle(index))
        return int(major), int(minor)

    def device_memory_total(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetMemoryInfo", self._handle(index)).total)

    def device_memory_used_total(self, index: int) -> tuple[int, int]:
        """(used, total) bytes: what ``bench --soak`` samples each interval."""
        info = self._call("nvmlDeviceGetMemoryInfo", self._handle(index))
        return int(info.used), int(info.total)

    def device_pcie(self, index: int, field: PcieField) -> int:
        return int(self._call(PCIE_CALLS[field], self._handle(index)))

    def device_bar1_total(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetBAR1MemoryInfo", self._handle(index)).bar1Total)

    def p2p_status(self, index_a: int, index_b: int, caps_index: int) -> int:
        handle_a, handle_b = self._handle(index_a), self._handle(index_b)
        # int(): a plain int reaches ctypes whatever the caller passed (see P2P_CAPS_INDEX).
        return int(self._call("nvmlDeviceGetP2PStatus", handle_a, handle_b, int(caps_index)))

    # -- health (issue 39): reads only; no setter of NVML is ever called from here

    def device_temperature(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetTemperature", self._handle(index), _TEMPERATURE_GPU))

    def device_temperature_threshold(self, index: int, which: ThresholdName) -> int:
        return int(
            self._call(
                "nvmlDeviceGetTemperatureThreshold",
                self._handle(index),
                TEMPERATURE_THRESHOLDS[which],
            )
        )

    def device_margin_temperature(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetMarginTemperature", self._handle(index)))

    def device_fan_speeds(self, index: int) -> list[int]:
        handle = self._handle(index)
        count = int(self._call("nvmlDeviceGetNumFans", handle))
        return [int(self._call("nvmlDeviceGetFanSpeed_v2", handle, fan)) for fan in range(count)]

    def device_power(self, index: int, which: PowerName) -> int:
        return int(self._call(POWER_CALLS[which], self._handle(index)))

    def device_power_constraints(self, index: int) -> tuple[int, int]:
        low, high = self._call("nvmlDeviceGetPowerManagementLimitConstraints", self._handle(index))
        return int(low), int(high)

    def device_clock_event_reasons(self, index: int) -> int:
        handle = self._handle(index)
        try:
            return int(self._call("nvmlDeviceGetCurrentClocksEventReasons", handle))
        except NvmlCallError as exc:
            if exc.reason != "nvml-function-not-found" and not exc.reason.startswith(
                "nvml-binding-missing:"
            ):
                raise
        # Drivers before 535 know the call by its old name (same bits, nvml.h).
        return int(self._call("nvmlDeviceGetCurrentClocksThrottleReasons", handle))

    def device_sm_clock(self, index: int, *, maximum: bool) -> int:
        call = "nvmlDeviceGetMaxClockInfo" if maximum else "nvmlDeviceGetClockInfo"
        return int(self._call(call, self._handle(index), _CLOCK_SM))

    def device_ecc_mode(self, index: int) -> tuple[bool, bool]:
        current, pending = self._call("nvmlDeviceGetEccMode", self._handle(index))
        return bool(current), bool(pending)

    def device_ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int:
        return int(
            self._call(
                "nvmlDeviceGetTotalEccErrors",
                self._handle(index),
                int(uncorrected),
                int(aggregate),
            )
        )

    def device_remapped_rows(self, index: int) -> tuple[int, int, bool, bool]:
        corr, unc, pending, failure = self._call("nvmlDeviceGetRemappedRows", self._handle(index))
        return int(corr), int(unc), bool(pending), bool(failure)

    def device_retired_pages(self, index: int, *, double_bit: bool) -> int:
        return len(self._call("nvmlDeviceGetRetiredPages", self._handle(index), int(double_bit)))

    def device_retired_pages_pending(self, index: int) -> bool:
        return bool(self._call("nvmlDeviceGetRetiredPagesPendingStatus", self._handle(index)))

    def device_pcie_replays(self, index: int) -> int:
        return int(self._call("nvmlDeviceGetPcieReplayCounter", self._handle(index)))

    def device_recovery_action(self, index: int) -> int:
        [value] = self._call(
            "nvmlDeviceGetFieldValues", self._handle(index), [_FI_GPU_RECOVERY_ACTION]
        )
        code = int(value.nvmlReturn)
        if code != 0:
            raise NvmlCallError(nvml_error_reason(code))
        return int(value.value.uiVal)
