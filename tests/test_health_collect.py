"""Hardware health collection (issue 39): NVML's answers through the adapter, the readings
taken while the probe kernels run, and the PCIe AER counters of sysfs.

The fake NVML answers each call with a value or an nvmlReturn_t error, as the binding does;
the real adapter is exercised over nvidia-ml-py's own functions with their return shapes (a
ctypes field-value array, the old and new clock-reason names). The AER files are laid out
as Linux's drivers/pci/pcie/aer.c prints them (``aer_stats_dev_attr``: a ``%s %llu`` line
per named bit, ``<array>_bit[N]`` for an unnamed one with a count, ``TOTAL_ERR_*`` last).
"""

from __future__ import annotations

import importlib
from dataclasses import dataclass, field
from pathlib import Path
from types import ModuleType
from typing import Any

import pytest

from blackwell_doctor.collect.health import aer_after, collect_aer, health_facts, read_aer
from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.nvml import (
    ClockSampler,
    NvmlCallError,
    PowerName,
    RealNvml,
    ThresholdName,
    collect_gpu_health,
    collect_nvml_and_health,
    nvml_error_reason,
    sample_clocks,
)
from blackwell_doctor.collect.parsers import parse_aer_counters
from blackwell_doctor.facts.document import (
    AerCounts,
    ClockSample,
    EccCounts,
    GpuHealth,
    NvmlFacts,
    PciFacts,
    PciGpu,
    RemappedRows,
    RetiredPages,
    Unavailable,
)
from tests.hosttree import HostTree

NOT_SUPPORTED = 3  # nvmlReturn_t
FUNCTION_NOT_FOUND = 13
GPU_IS_LOST = 15


@dataclass
class FakeHealth:
    """A GPU's health answers; an int in ``errors`` is the nvmlReturn_t a call raises."""

    temperature: int = 45
    thresholds: dict[str, int] = field(
        default_factory=lambda: {"shutdown": 95, "slowdown": 90, "gpu_max": 87}
    )
    margin: int = 45
    fans: list[int] = field(default_factory=lambda: [30, 31])
    power: dict[str, int] = field(
        default_factory=lambda: {"limit": 600_000, "default": 600_000, "usage": 30_000}
    )
    constraints: tuple[int, int] = (150_000, 600_000)
    reasons: int = 0x1
    sm_clock: int = 180
    sm_clock_max: int = 3090
    ecc_mode: tuple[bool, bool] = (True, True)
    ecc: dict[tuple[bool, bool], int] = field(
        default_factory=lambda: {
            (False, False): 3,
            (True, False): 0,
            (False, True): 7,
            (True, True): 1,
        }
    )
    rows: tuple[int, int, bool, bool] = (0, 1, True, False)
    pages: dict[bool, int] = field(default_factory=lambda: {False: 0, True: 0})
    pages_pending: bool = False
    replays: int = 12
    recovery: int = 0
    errors: dict[str, int] = field(default_factory=dict)


@dataclass
class FakeNvml:
    """An NvmlHealthApi over :class:`FakeHealth` GPUs (and the few NvmlApi calls needed)."""

    gpus: list[FakeHealth] = field(default_factory=list)
    init_error: int | None = None
    calls: list[str] = field(default_factory=list)

    def _answer(self, index: int, call: str, value: Any) -> Any:
        self.calls.append(call)
        code = self.gpus[index].errors.get(call)
        if code is not None:
            raise NvmlCallError(nvml_error_reason(code))
        return value

    # NvmlApi
    def init(self) -> None:
        if self.init_error is not None:
            raise NvmlCallError(nvml_error_reason(self.init_error))

    def shutdown(self) -> None:
        self.calls.append("shutdown")

    def driver_version(self) -> str:
        return "595.45.04"

    def cuda_driver_version(self) -> int:
        return 13020

    def nvml_version(self) -> str:
        return "13.595.45.04"

    def device_count(self) -> int:
        return len(self.gpus)

    def device_name(self, index: int) -> str:
        return "NVIDIA RTX PRO 6000 Blackwell Workstation Edition"

    def device_uuid(self, index: int) -> str:
        return f"GPU-{index}"

    def device_pci_bus_id(self, index: int) -> str:
        return f"00000000:{index + 1:02X}:00.0"

    def device_compute_capability(self, index: int) -> tuple[int, int]:
        return (12, 0)

    def device_memory_total(self, index: int) -> int:
        return 97887 << 20

    def device_pcie(self, index: int, field: Any) -> int:
        return 5 if "gen" in field else 16

    def device_bar1_total(self, index: int) -> int:
        return 128 << 30

    def p2p_status(self, index_a: int, index_b: int, caps_index: int) -> int:
        return 0

    # NvmlHealthApi
    def device_temperature(self, index: int) -> int:
        return int(self._answer(index, "temperature", self.gpus[index].temperature))

    def device_temperature_threshold(self, index: int, which: ThresholdName) -> int:
        return int(self._answer(index, f"threshold:{which}", self.gpus[index].thresholds[which]))

    def device_margin_temperature(self, index: int) -> int:
        return int(self._answer(index, "margin", self.gpus[index].margin))

    def device_fan_speeds(self, index: int) -> list[int]:
        return list(self._answer(index, "fans", self.gpus[index].fans))

    def device_power(self, index: int, which: PowerName) -> int:
        return int(self._answer(index, f"power:{which}", self.gpus[index].power[which]))

    def device_power_constraints(self, index: int) -> tuple[int, int]:
        low, high = self._answer(index, "constraints", self.gpus[index].constraints)
        return int(low), int(high)

    def device_clock_event_reasons(self, index: int) -> int:
        return int(self._answer(index, "reasons", self.gpus[index].reasons))

    def device_sm_clock(self, index: int, *, maximum: bool) -> int:
        gpu = self.gpus[index]
        return int(self._answer(index, "clock", gpu.sm_clock_max if maximum else gpu.sm_clock))

    def device_ecc_mode(self, index: int) -> tuple[bool, bool]:
        current, pending = self._answer(index, "ecc_mode", self.gpus[index].ecc_mode)
        return bool(current), bool(pending)

    def device_ecc_errors(self, index: int, *, uncorrected: bool, aggregate: bool) -> int:
        key = (uncorrected, aggregate)
        return int(self._answer(index, f"ecc:{key}", self.gpus[index].ecc[key]))

    def device_remapped_rows(self, index: int) -> tuple[int, int, bool, bool]:
        corr, unc, pending, failure = self._answer(index, "rows", self.gpus[index].rows)
        return int(corr), int(unc), bool(pending), bool(failure)

    def device_retired_pages(self, index: int, *, double_bit: bool) -> int:
        return int(self._answer(index, "pages", self.gpus[index].pages[double_bit]))

    def device_retired_pages_pending(self, index: int) -> bool:
        return bool(self._answer(index, "pages_pending", self.gpus[index].pages_pending))

    def device_pcie_replays(self, index: int) -> int:
        return int(self._answer(index, "replays", self.gpus[index].replays))

    def device_recovery_action(self, index: int) -> int:
        return int(self._answer(index, "recovery", self.gpus[index].recovery))


# GeForce (RTX 5090) and GB10 answer NOT_SUPPORTED for what their boards lack.
GEFORCE_NOT_SUPPORTED = dict.fromkeys(
    ("ecc_mode", "rows", "pages", "pages_pending", "recovery"), NOT_SUPPORTED
)
GB10_NOT_SUPPORTED = dict.fromkeys(
    (
        "power:limit",
        "power:default",
        "constraints",
        "fans",
        "margin",
        "ecc_mode",
        "rows",
        "pages",
        "replays",
        "recovery",
    ),
    NOT_SUPPORTED,
)


def test_a_healthy_board_answers_every_value() -> None:
    got = collect_gpu_health(FakeNvml([FakeHealth()]), 0)
    assert got.temperature_c == 45
    assert (got.slowdown_c, got.shutdown_c, got.gpu_max_c, got.margin_c) == (90, 95, 87, 45)
    assert got.fans_percent == [30, 31]
    assert (got.power_limit_mw, got.power_default_mw) == (600_000, 600_000)
    assert (got.power_min_mw, got.power_max_mw) == (150_000, 600_000)
    assert (got.ecc_enabled, got.ecc_pending_enabled) == (True, True)
    assert got.ecc_errors == EccCounts(
        volatile_corrected=3, volatile_uncorrected=0, aggregate_corrected=7, aggregate_uncorrected=1
    )
    assert got.remapped_rows == RemappedRows(
        correctable=0, uncorrectable=1, pending=True, failure=False
    )
    assert got.retired_pages == RetiredPages(single_bit=0, double_bit=0, pending=False)
    assert (got.pcie_replays, got.recovery_action) == (12, 0)


def test_geforce_not_supported_is_recorded_as_such_not_as_zero() -> None:
    got = collect_gpu_health(FakeNvml([FakeHealth(errors=GEFORCE_NOT_SUPPORTED)]), 0)
    ns = Unavailable("not-supported")
    assert got.ecc_enabled == ns
    assert got.ecc_errors == ns  # no ECC: its counters are not read at all
    assert got.remapped_rows == ns
    assert got.retired_pages == ns
    assert got.recovery_action == ns
    assert got.temperature_c == 45  # what the board does report is kept


def test_gb10_reports_no_power_limits_and_that_is_not_a_crash() -> None:
    nvml = FakeNvml([FakeHealth(errors=GB10_NOT_SUPPORTED)])
    got = collect_gpu_health(nvml, 0)
    assert got.power_limit_mw == got.power_max_mw == Unavailable("not-supported")
    assert got.fans_percent == Unavailable("not-supported")
    assert got.pcie_replays == Unavailable("not-supported")


def test_a_lost_gpu_makes_each_value_unavailable_with_its_reason() -> None:
    errors = dict.fromkeys(
        ("temperature", "reasons", "rows", "replays", "power:limit", "ecc_mode"), GPU_IS_LOST
    )
    got = collect_gpu_health(FakeNvml([FakeHealth(errors=errors)]), 0)
    lost = Unavailable("nvml-error-gpu-is-lost")
    assert (got.temperature_c, got.clock_event_reasons, got.remapped_rows) == (lost, lost, lost)
    assert got.slowdown_c == 90  # other calls still answer


def test_values_outside_what_nvml_can_report_are_not_recorded() -> None:
    got = collect_gpu_health(FakeNvml([FakeHealth(temperature=4000, fans=[40, 999])]), 0)
    assert got.temperature_c == Unavailable("nvml-out-of-range:4000")
    assert got.fans_percent == [40]


def test_retired_pages_need_both_causes_and_keep_an_unreadable_pending_as_unknown() -> None:
    gpu = FakeHealth(pages={False: 3, True: 2}, errors={"pages_pending": GPU_IS_LOST})
    got = collect_gpu_health(FakeNvml([gpu]), 0)
    assert got.retired_pages == RetiredPages(single_bit=3, double_bit=2, pending=None)


def test_nvml_and_health_share_one_session() -> None:
    nvml = FakeNvml([FakeHealth(), FakeHealth()])
    facts, health = collect_nvml_and_health(nvml)
    assert isinstance(facts, NvmlFacts)
    assert isinstance(health, list)
    assert [h.index for h in health] == [0, 1]
    assert nvml.calls.count("shutdown") == 1


def test_nvml_that_does_not_start_leaves_both_unavailable() -> None:
    facts, health = collect_nvml_and_health(FakeNvml(init_error=9))
    assert facts == health == Unavailable("nvml-driver-not-loaded")


def test_a_sample_under_load_keeps_what_answered() -> None:
    gpu = FakeHealth(reasons=0x4 | 0x40, errors={"power:usage": NOT_SUPPORTED})
    got = sample_clocks(FakeNvml([gpu]), 0)
    assert got == ClockSample(
        reasons=0x44, sm_clock_mhz=180, temperature_c=45, power_mw=None, pcie_replays=12
    )


def test_the_sampler_maps_cuda_bus_ids_to_nvml_indices() -> None:
    sampler = ClockSampler(FakeNvml([FakeHealth(), FakeHealth(reasons=0x8)]))
    sampler.start()
    assert sampler.error is None
    index = sampler.index("0000:02:00.0")  # cuDeviceGetPCIBusId's form
    assert index == 1
    assert sampler.sample(index).reasons == 0x8
    assert sampler.index("0000:09:00.0") is None


def test_the_sampler_says_why_when_nvml_does_not_start() -> None:
    sampler = ClockSampler(FakeNvml(init_error=9))
    sampler.start()
    assert sampler.error == "nvml-driver-not-loaded"


# --------------------------------------------------------------------------- the real adapter


@pytest.fixture
def pynvml() -> ModuleType:
    pytest.importorskip("pynvml")
    return importlib.import_module("pynvml")


def test_real_adapter_reads_the_recovery_action_from_a_field_value(
    monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType
) -> None:
    asked: list[list[int]] = []

    def field_values(_handle: object, ids: list[int]) -> Any:
        asked.append(ids)
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        values[0].fieldId = ids[0]
        values[0].nvmlReturn = 0
        values[0].value.uiVal = pynvml.NVML_GPU_RECOVERY_ACTION_DRAIN_AND_RESET
        return values

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", field_values)
    assert RealNvml().device_recovery_action(0) == 4
    assert asked == [[pynvml.NVML_FI_DEV_GET_GPU_RECOVERY_ACTION]]


def test_real_adapter_turns_a_field_values_error_into_its_token(
    monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType
) -> None:
    def field_values(_handle: object, ids: list[int]) -> Any:
        values = (pynvml.c_nvmlFieldValue_t * len(ids))()
        values[0].nvmlReturn = pynvml.NVML_ERROR_NOT_SUPPORTED
        return values

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetFieldValues", field_values)
    with pytest.raises(NvmlCallError) as raised:
        RealNvml().device_recovery_action(0)
    assert raised.value.reason == "not-supported"


def test_real_adapter_falls_back_to_the_older_clock_reasons_name(
    monkeypatch: pytest.MonkeyPatch, pynvml: ModuleType
) -> None:
    def missing(_handle: object) -> int:
        raise pynvml.NVMLError(FUNCTION_NOT_FOUND)

    monkeypatch.setattr(pynvml, "nvmlDeviceGetHandleByIndex", lambda i: i)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksEventReasons", missing)
    monkeypatch.setattr(pynvml, "nvmlDeviceGetCurrentClocksThrottleReasons", lambda _h: 0x40)
    assert RealNvml().device_clock_event_reasons(0) == 0x40


def test_the_thresholds_are_the_bindings_enum_values(pynvml: ModuleType) -> None:
    from blackwell_doctor.collect.nvml import TEMPERATURE_THRESHOLDS

    assert TEMPERATURE_THRESHOLDS == {
        "shutdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SHUTDOWN,
        "slowdown": pynvml.NVML_TEMPERATURE_THRESHOLD_SLOWDOWN,
        "gpu_max": pynvml.NVML_TEMPERATURE_THRESHOLD_GPU_MAX,
    }


# --------------------------------------------------------------------------- AER in sysfs

# As drivers/pci/pcie/aer.c prints them (aer_stats_dev_attr), an RTX 5090 on a riser.
CORRECTABLE = """RxErr 97
BadTLP 21
BadDLLP 0
Rollover 0
Timeout 0
NonFatalErr 0
CorrIntErr 0
HeaderOF 0
TOTAL_ERR_COR 118
"""
NONFATAL = """Undefined 0
DLP 0
SDES 0
TLP 0
FCP 0
CmpltTO 2
CmpltAbrt 0
UnxCmplt 0
RxOF 0
MalfTLP 0
ECRC 0
UnsupReq 0
ACSViol 0
dev_nonfatal_errs_bit[3] 1
TOTAL_ERR_NONFATAL 3
"""
FATAL = "Undefined 0\nDLP 0\nTOTAL_ERR_FATAL 0\n"


def test_aer_files_parse_to_their_total_and_nonzero_counters() -> None:
    assert parse_aer_counters(CORRECTABLE) == (118, {"RxErr": 97, "BadTLP": 21})
    assert parse_aer_counters(NONFATAL) == (3, {"CmpltTO": 2, "dev_nonfatal_errs_bit[3]": 1})
    assert parse_aer_counters("garbage\nTOTAL_ERR_COR x\n") == (None, {})


def _aer_host(tmp_path: Path, correctable: str = CORRECTABLE) -> HostTree:
    tree = HostTree(tmp_path)
    for bdf in ("0000:01:00.0", "0000:00:01.0"):
        base = f"/sys/bus/pci/devices/{bdf}"
        tree.write(f"{base}/aer_dev_correctable", correctable)
        tree.write(f"{base}/aer_dev_nonfatal", NONFATAL)
        tree.write(f"{base}/aer_dev_fatal", FATAL)
    return tree


def _pci() -> PciFacts:
    return PciFacts(
        gpus=[
            PciGpu(
                bdf="0000:01:00.0",
                vendor_id=0x10DE,
                device_id=0x2B85,
                class_code=0x030000,
                driver="nvidia",
                numa_node=None,
                iommu_group=None,
                iommu_domain_type=None,
                upstream=["0000:00:01.0"],
            )
        ]
    )


def test_each_gpu_and_its_upstream_port_are_read(tmp_path: Path) -> None:
    first = collect_aer(_aer_host(tmp_path).fs, _pci())
    assert isinstance(first, list)
    assert [(d.bdf, d.role) for d in first] == [
        ("0000:01:00.0", "gpu"),
        ("0000:00:01.0", "upstream"),
    ]
    assert first[0].before == AerCounts(
        correctable=118,
        nonfatal=3,
        fatal=0,
        nonzero={
            "correctable:RxErr": 97,
            "correctable:BadTLP": 21,
            "nonfatal:CmpltTO": 2,
            "nonfatal:dev_nonfatal_errs_bit[3]": 1,
        },
    )
    assert first[0].after is None


def test_a_second_reading_after_the_probes_gives_the_deltas(tmp_path: Path) -> None:
    tree = _aer_host(tmp_path)
    first = collect_aer(tree.fs, _pci())
    tree.write(
        "/sys/bus/pci/devices/0000:01:00.0/aer_dev_correctable",
        CORRECTABLE.replace("RxErr 97", "RxErr 131").replace(
            "TOTAL_ERR_COR 118", "TOTAL_ERR_COR 152"
        ),
    )
    later = aer_after(tree.fs, first)
    assert isinstance(later, list)
    gpu = later[0]
    assert isinstance(gpu.before, AerCounts)
    assert isinstance(gpu.after, AerCounts)
    assert (gpu.before.correctable, gpu.after.correctable) == (118, 152)


def test_a_kernel_without_aer_statistics_is_a_reason_not_zero(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/sys/bus/pci/devices/0000:01:00.0/vendor", "0x10de\n")
    got = read_aer(tree.fs, "0000:01:00.0")
    assert got == Unavailable("not-found:/sys/bus/pci/devices/0000:01:00.0/aer_dev_correctable")
    assert collect_aer(HostFS(tmp_path), Unavailable("permission-denied:/sys")) == Unavailable(
        "permission-denied:/sys"
    )


def test_health_facts_key_the_readings_by_bus_and_keep_the_errors() -> None:
    gpu = collect_gpu_health(FakeNvml([FakeHealth()]), 0)
    sample = ClockSample(reasons=0x4)
    got = health_facts(
        [gpu], {"0000:01:00.0": [sample]}, [], {"0000:02:00.0": "nvml-no-device-at:x"}
    )
    assert isinstance(got.gpus, list)
    assert got.gpus[0] == gpu
    assert isinstance(got.under_load, list)
    assert [(g.pci_bus_id, len(g.samples), g.error) for g in got.under_load] == [
        ("0000:01:00.0", 1, None),
        ("0000:02:00.0", 0, "nvml-no-device-at:x"),
    ]
    skipped = health_facts([gpu], Unavailable("skipped:--no-probe"), [])
    assert skipped.under_load == Unavailable("skipped:--no-probe")


def test_gpu_health_round_trips_through_the_facts_document() -> None:
    import msgspec

    gpu = collect_gpu_health(FakeNvml([FakeHealth(errors=GEFORCE_NOT_SUPPORTED)]), 0)
    assert msgspec.json.decode(msgspec.json.encode(gpu), type=GpuHealth) == gpu


class _Broken(FakeNvml):
    """A binding that breaks in a way the adapter does not translate (a bug, not a host
    problem)."""

    def device_clock_event_reasons(self, index: int) -> int:
        raise RuntimeError("a bug in a reading")


def test_a_bug_in_the_health_readings_costs_them_not_the_gpu_facts() -> None:
    facts, health = collect_nvml_and_health(_Broken([FakeHealth()]))
    assert isinstance(facts, NvmlFacts)
    assert health == Unavailable("internal-error:RuntimeError")


def test_a_bug_in_a_reading_under_load_never_reaches_the_probe() -> None:
    sampler = ClockSampler(_Broken([FakeHealth()]))
    sampler.start()
    assert sampler.sample(0) == ClockSample(reasons=None)
    assert sampler.error == "internal-error:RuntimeError"
