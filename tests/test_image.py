"""The container image (Dockerfile, docs/container.md), built and run in the real test
engine (ci/docker-engine.sh; marker `docker`).

The engine reaches no registry and no index: the Dockerfile is built on CI's Debian base
(ci/debian-base.sh: debootstrap of the same Debian packages as the public base, python3
included) with --build-arg WHEELHOUSE=wheelhouse, the wheelhouse the documented offline
command makes (tests/conftest.py offline_wheelhouse), in exactly the build context
.dockerignore lets through. Then the image is run as users run it: a facts file replayed,
`check` on the engine with a GPU device request (the engine's NVIDIA hook is a fake: no GPU
arrives, so the GPU checks fail and say why, never crash), `--host-root /host` over a host
tree mounted read-only, container logs through the engine's socket, and the DaemonSet's own
privileges and mounts (deploy/kubernetes/daemonset.yaml).
"""

from __future__ import annotations

import contextlib
import json
import os
import shutil
import stat
import tomllib
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, REPO
from tests.factsutil import load
from tests.hosttree import threadripper_4x_rtx_pro_6000

pytestmark = pytest.mark.docker

TAG = f"blackwell-doctor-test:{uuid.uuid4().hex[:8]}"
LOG_IMAGE = os.environ.get("BLACKWELL_DOCTOR_TEST_IMAGE", "bd-test:latest")
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
# A real FlashInfer failure line (as tests/test_logs_docker.py), for the socket test.
FAILURE = (
    "(Worker_PP0 pid=38385) ERROR 11-11 06:43:10 [multiproc_executor.py:671] RuntimeError: "
    "[TensorRT-LLM][ERROR] Assertion failed: Failed to initialize cutlass TMA WS grouped gemm. "
    "Error: Error Internal"
)


@dataclass(frozen=True)
class Built:
    client: Any
    tag: str
    version: str


@dataclass(frozen=True)
class Ran:
    code: int
    out: str
    err: str


def build_context(target: Path, wheelhouse: Path) -> Path:
    """What `docker build .` sends from this checkout (.dockerignore applied by docker's own
    matcher), plus the wheelhouse as ./wheelhouse."""
    from docker.utils.build import exclude_paths

    patterns = [
        line.strip()
        for line in (REPO / ".dockerignore").read_text().splitlines()
        if line.strip() and not line.startswith("#")
    ]
    for rel in sorted(exclude_paths(str(REPO), patterns)):
        src, dst = REPO / rel, target / rel
        if src.is_dir() and not src.is_symlink():
            dst.mkdir(parents=True, exist_ok=True)
        elif src.is_file():
            dst.parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(src, dst)
    shutil.copytree(wheelhouse, target / "wheelhouse")
    return target


@pytest.fixture(scope="module")
def image(
    docker_host: str,
    base_image: str,
    offline_wheelhouse: Path,
    built_dist: Path,
    tmp_path_factory: pytest.TempPathFactory,
) -> Iterator[Built]:
    import docker
    from docker.errors import BuildError

    [wheel] = built_dist.glob("blackwell_doctor-*.whl")
    version = wheel.name.split("-")[1]
    context = build_context(tmp_path_factory.mktemp("context"), offline_wheelhouse)
    assert not (context / "tests").exists()  # .dockerignore kept the rest out
    client = docker.DockerClient(base_url=docker_host, timeout=900)
    try:
        client.images.build(
            path=str(context),
            tag=TAG,
            buildargs={"BASE": base_image, "VERSION": version, "WHEELHOUSE": "wheelhouse"},
            rm=True,
            forcerm=True,
            pull=False,
        )
    except BuildError as exc:
        log = "".join(str(chunk.get("stream", chunk)) for chunk in exc.build_log)
        pytest.fail(f"the Dockerfile did not build:\n{log[-6000:]}", pytrace=False)
    try:
        yield Built(client=client, tag=TAG, version=version)
    finally:
        with contextlib.suppress(Exception):
            client.images.remove(TAG, force=True)
        with contextlib.suppress(Exception):
            client.images.prune(filters={"dangling": True})
        client.close()


def run(built: Built, args: list[str], **kwargs: Any) -> Ran:
    """The image run to its end (its entry point unless ``entrypoint`` is given)."""
    container = built.client.containers.run(built.tag, args, detach=True, **kwargs)
    try:
        code = container.wait(timeout=300)["StatusCode"]
        out = container.logs(stdout=True, stderr=False).decode()
        err = container.logs(stdout=False, stderr=True).decode()
    finally:
        container.remove(force=True)
    return Ran(code=int(code), out=out, err=err)


# --------------------------------------------------------------------------- the image itself


def test_the_image_is_labelled_non_root_and_starts_the_command(image: Built) -> None:
    attrs = image.client.images.get(image.tag).attrs
    config = attrs["Config"]
    labels = config["Labels"]
    assert labels["org.opencontainers.image.source"] == PYPROJECT["project"]["urls"]["Source"]
    assert labels["org.opencontainers.image.licenses"] == PYPROJECT["project"]["license"]
    assert labels["org.opencontainers.image.version"] == image.version
    assert labels["org.opencontainers.image.title"] == PYPROJECT["project"]["name"]
    assert config["Entrypoint"] == ["blackwell-doctor"]
    assert config["User"] == "10001:10001"
    ran = run(image, ["--version"])
    assert ran.code == 0
    assert ran.out.splitlines()[0] == f"blackwell-doctor {image.version}"  # then commit, ...
    whoami = run(image, ["-c", "import os; print(os.getuid(), os.getgid())"],
                 entrypoint=["python3"])  # fmt: skip
    assert whoami.out == "10001 10001\n"


def test_no_build_tool_is_left_in_the_image(image: Built) -> None:
    probe = (
        "import importlib.util as u, shutil; "
        "print([m for m in ('pip', 'hatchling', 'hatch_vcs', 'setuptools', 'build') "
        "if u.find_spec(m)], [t for t in ('pip', 'pip3', 'gcc', 'cc', 'make', 'apt-get') "
        "if shutil.which(t) and t != 'apt-get'])"
    )
    ran = run(image, ["-c", probe], entrypoint=["/opt/blackwell-doctor/bin/python"])
    assert ran.out == "[] []\n", ran.err
    dpkg = run(image, ["-W", "python3-pip", "gcc", "python3-venv"], entrypoint=["dpkg-query"])
    assert dpkg.code != 0
    assert "no packages found" in dpkg.err


def test_the_image_size_is_what_the_docs_say(image: Built) -> None:
    size = image.client.images.get(image.tag).attrs["Size"]
    # docs/container.md gives the size measured when the Dockerfile was written: 346 MB,
    # the Debian base 118 MB and NVRTC 142 MB of it. A dependency that adds a quarter (the
    # cuda-python metapackage's numpy and cuda-core did: 434 MB) is a decision to make in
    # the open, not an accident.
    assert size < 430 * 10**6, size


# --------------------------------------------------------------------------- running it


def test_check_replays_a_facts_file_inside_the_image(image: Built) -> None:
    ran = run(
        image,
        ["check", "--facts", "/facts/sm120-driver580.json", "--format", "json"],
        volumes={str(FACTS_FIXTURES): {"bind": "/facts", "mode": "ro"}},
    )
    assert ran.code == 1, ran.err
    doc = json.loads(ran.out)
    expected = evaluate(load("sm120-driver580"))
    assert {r["id"]: r["status"] for r in doc["results"]} == {
        r.id: r.status for r in expected.results
    }
    assert doc["tool"]["version"] == image.version


def test_check_on_the_engine_with_a_gpu_request_fails_the_gpu_and_says_why(
    image: Built,
) -> None:
    from docker.types import DeviceRequest

    ran = run(
        image,
        ["check", "--no-probe", "--format", "json", "--embed-facts"],
        device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
    )
    # The engine's hook accepted the request and gave no GPU: a finding, not a crash.
    assert ran.code == 1, ran.err
    assert "Traceback" not in ran.err
    doc = json.loads(ran.out)
    present = next(r for r in doc["results"] if r["id"] == "gpu.present")
    assert present["status"] == "fail"
    assert "--gpus all" in present["remedy"]["summary"]
    container = doc["facts"]["platform"]["container"]
    assert container["in_container"] is True
    assert "dockerenv" in container["signals"]


def test_host_root_reads_a_host_mounted_read_only(image: Built, tmp_path: Path) -> None:
    import subprocess
    import sys

    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host").root
    ran = run(
        image,
        ["collect", "--host-root", "/host", "--no-probe"],
        volumes={str(tree): {"bind": "/host", "mode": "ro"}},
    )
    assert ran.code == 0, ran.err
    inside = json.loads(ran.out)
    # The same tree read by this checkout on the host: the same platform and PCI facts.
    outside = json.loads(
        subprocess.run(
            [sys.executable, "-m", "blackwell_doctor", "collect", "--host-root", str(tree),
             "--no-probe"],
            capture_output=True, text=True, timeout=120, check=True,
        ).stdout
    )  # fmt: skip
    assert inside["host_root"] == "/host"
    assert inside["pci"] == outside["pci"]
    assert inside["platform"] == outside["platform"]
    assert len(inside["pci"]["gpus"]) == 4


def test_a_missing_host_mount_is_a_finding_that_names_it(image: Built, tmp_path: Path) -> None:
    # /host/proc mounted, /host/sys forgotten: the GPU check says to mount /sys.
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host").root
    ran = run(
        image,
        ["check", "--host-root", "/host", "--no-probe", "--format", "json"],
        volumes={str(tree / "proc"): {"bind": "/host/proc", "mode": "ro"}},
    )
    assert ran.code == 1, ran.err
    doc = json.loads(ran.out)
    present = next(r for r in doc["results"] if r["id"] == "gpu.present")
    assert present["status"] == "fail"
    assert "mount the host's /sys" in present["remedy"]["summary"]
    # ...and names the mount in docker run and DaemonSet terms (checks/host_mounts.toml).
    assert "-v /sys:/host/sys:ro" in present["remedy"]["summary"]
    assert "the host-sys volume (hostPath /sys)" in present["remedy"]["summary"]
    # No host root at all: one line, exit 2.
    bad = run(image, ["check", "--host-root", "/host"])
    assert bad.code == 2
    assert bad.err == "blackwell-doctor: error: --host-root /host is not a directory\n"


def _mount_named(result: dict[str, Any]) -> str:
    """The sentence rules/mounts.py added to a JSON result's remedy ("" when none)."""
    summary: str = (result.get("remedy") or {}).get("summary", "")
    at = summary.find("In a container, the host's ")
    return summary[at:] if at >= 0 else ""


def test_a_missing_proc_mount_names_it_for_the_checks_not_evaluated(
    image: Built, tmp_path: Path
) -> None:
    # /host/sys mounted, /host/proc left out: no kernel string, so the platform is
    # "unknown", which is not WSL. The checks judge what sysfs holds; those that needed
    # /proc say "not evaluated" (or carry the unread part) with the mount to add.
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host")
    # The loaded module's taint flags, in sysfs (kernel/module/main.c): the open module is
    # out of tree and unsigned here, O and E, no P.
    tree.write("/sys/module/nvidia/taint", "OE\n")
    ran = run(
        image,
        ["check", "--host-root", "/host", "--no-probe", "--format", "json"],
        volumes={str(tree.root / "sys"): {"bind": "/host/sys", "mode": "ro"}},
    )
    assert ran.code == 1, ran.err
    assert "Traceback" not in ran.err
    results = {r["id"]: r for r in json.loads(ran.out)["results"]}
    for result in results.values():
        assert "paravirtualised" not in result["summary"], result
        assert "Windows host" not in result["summary"], result
    wsl = results["platform.wsl"]
    assert wsl["status"] == "error"
    assert "not-mounted:/proc/version" in wsl["summary"]
    assert "-v /proc:/host/proc:ro" in _mount_named(wsl)
    assert "the host-proc volume (hostPath /proc)" in _mount_named(wsl)
    # The IOMMU groups are in sysfs (DMA-FQ: translating); the command line that would say
    # whether iommu=pt was asked for is not.
    iommu = results["pci.iommu"]
    assert iommu["status"] == "warn"
    assert "the kernel command line is unreadable (not-mounted:/proc/cmdline)" in iommu["summary"]
    assert "-v /proc:/host/proc:ro" in _mount_named(iommu)
    assert results["pci.acs"]["status"] == "warn"  # ACS from the bridges' config space
    assert _mount_named(results["pci.acs"]) == ""
    # The flavour from the taint flags alone.
    flavour = results["module.flavour"]
    assert (flavour["status"], flavour["summary"]) == ("pass", "open kernel module")
    # No AER counter in this tree's sysfs: the host's answer (a mounted /sys), not a mount.
    pcie = results["health.pcie_errors"]
    assert pcie["status"] == "skip"
    assert pcie["summary"].startswith("no AER counters in sysfs")
    # The kernel module's version is in /proc: not "no driver", not a pass.
    consistency = results["driver.consistency"]
    assert consistency["status"] == "error"
    assert "not-mounted:/proc/driver/nvidia/version" in consistency["summary"]
    assert "the host-proc volume (hostPath /proc)" in _mount_named(consistency)


def test_without_proc_and_sys_each_check_names_the_mount_it_lacks(
    image: Built, tmp_path: Path
) -> None:
    # The DaemonSet's container with its host-proc and host-sys volumes missing: only
    # /host/etc/os-release (tests/fixtures/container/no-host-mounts.json, composed, is what
    # this run collects).
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host").root
    ran = run(
        image,
        ["check", "--host-root", "/host", "--no-probe", "--format", "json"],
        volumes={str(tree / "etc/os-release"): {"bind": "/host/etc/os-release", "mode": "ro"}},
    )
    assert ran.code == 1, ran.err
    assert "Traceback" not in ran.err
    results = {r["id"]: r for r in json.loads(ran.out)["results"]}
    proc = "-v /proc:/host/proc:ro"
    sys_ = "-v /sys:/host/sys:ro"
    expected = {
        "platform.wsl": ("not-mounted:/proc/version", proc),
        "module.flavour": ("not-mounted:/proc/driver/nvidia/version", proc),
        "driver.consistency": ("not-mounted:/proc/driver/nvidia/version", proc),
        "pci.iommu": ("not-mounted:/sys/bus/pci/devices", sys_),
        "pci.acs": ("not-mounted:/sys/bus/pci/devices", sys_),
        "health.pcie_errors": ("not-mounted:/sys/bus/pci/devices", sys_),
    }
    for check_id, (reason, mount) in expected.items():
        result = results[check_id]
        assert result["status"] == "error", result
        assert result["summary"].startswith("not evaluated: "), result
        assert reason in result["summary"], result
        assert mount in _mount_named(result), result
    # The distribution was mounted: the remedies' package commands know it.
    assert "not-mounted:/etc" not in ran.out


def test_container_logs_are_read_through_the_engines_socket(image: Built, docker_host: str) -> None:
    # The engine's own socket mounted as the Docker default; the image's user reaches it
    # through the socket's group (docs/container.md: --group-add).
    socket_path = docker_host.removeprefix("unix://")
    gid = os.stat(socket_path).st_gid
    assert stat.S_ISSOCK(os.stat(socket_path).st_mode)
    name = f"bd-img-logs-{uuid.uuid4().hex[:8]}"
    logger = image.client.containers.run(
        LOG_IMAGE, ["sh", "-c", f"echo '{FAILURE}' >&2"], name=name, detach=True
    )
    try:
        logger.wait(timeout=60)
        ran = run(
            image,
            ["check", "--no-probe", "--container", name, "--select", "logs", "--format",
             "json"],
            volumes={socket_path: {"bind": "/var/run/docker.sock", "mode": "rw"}},
            group_add=[str(gid)],
        )  # fmt: skip
    finally:
        logger.remove(force=True)
    assert ran.code == 1, ran.err
    statuses = {r["id"]: r["status"] for r in json.loads(ran.out)["results"]}
    assert statuses["logs.moe_kernels"] == "fail"
    assert statuses["logs.inputs"] == "pass"


# --------------------------------------------------------------------------- the DaemonSet's way


def test_the_daemonsets_commands_run_with_its_privileges_and_mounts(
    image: Built, tmp_path: Path
) -> None:
    """deploy/kubernetes/daemonset.yaml's container as the engine can run it: its user, no
    capability, no privilege escalation, a read-only root filesystem with a tmpfs /tmp, its
    host mounts read-only under /host (a host tree's here), the two output folders
    writable, and its GPU request; each of its two commands run once."""
    from docker.types import DeviceRequest

    from tests.test_kubernetes import daemonset, daemonset_commands

    pod = daemonset()["spec"]["template"]["spec"]
    [container] = pod["containers"]
    sc = container["securityContext"]
    tree = threadripper_4x_rtx_pro_6000(tmp_path / "host").root
    outputs = {"/textfile": tmp_path / "textfile", "/features.d": tmp_path / "features"}
    volumes: dict[str, dict[str, str]] = {}
    for mount in container["volumeMounts"]:
        path = mount["mountPath"]
        if path.startswith("/host/"):
            volumes[str(tree / path.removeprefix("/host/"))] = {"bind": path, "mode": "ro"}
        elif path in outputs:
            outputs[path].mkdir()
            volumes[str(outputs[path])] = {"bind": path, "mode": "rw"}
    assert sorted(v["bind"] for v in volumes.values()) == [
        "/features.d", "/host/etc/os-release", "/host/proc", "/host/sys", "/textfile",
    ]  # fmt: skip
    env = {e["name"]: e["value"] for e in container["env"]}
    for argv in daemonset_commands():
        assert argv[0] == "blackwell-doctor"
        ran = run(
            image,
            argv[1:],
            user=str(sc["runAsUser"]),
            cap_drop=sc["capabilities"]["drop"],
            security_opt=["no-new-privileges"],
            read_only=sc["readOnlyRootFilesystem"],
            tmpfs={"/tmp": "size=16m"},
            volumes=volumes,
            environment=env,
            device_requests=[DeviceRequest(count=-1, capabilities=[["gpu"]])],
        )
        assert ran.code in (1, 3), ran.err  # findings (no GPU arrives), never a crash
        assert "Traceback" not in ran.err
    prom = (outputs["/textfile"] / "blackwell_doctor.prom").read_text()
    assert 'blackwell_doctor_check_status{check="gpu.present"' in prom
    nfd = (outputs["/features.d"] / "blackwell-doctor").read_text()
    assert "blackwell-doctor.verdict=findings" in nfd.splitlines()
