"""``audit --image``: an image's stack read through the Docker API, never started.

The image is made here, without network, by ``docker import`` of a root filesystem holding
REAL artefacts: the wheels ci/gpu-wheels.sh caches (nvidia-nccl-cu12 2.27.7's libnccl with
its SASS for sm_50..sm_120, nvidia-cufile's small PTX, Triton 3.3.1) installed in a venv
at /opt/venv (pyvenv.cfg, a ``python3`` link to the real CPython binary this test runs
with), whose entrypoint is a script with ``#!/opt/venv/bin/python3``. What ``audit
--image`` reads must equal what ``audit`` reads from the same files on disk, and libnccl's
SASS list equal ``cuobjdump --list-elf`` (NVIDIA's own reader), and its Triton ptxas, judged
by its release, agree with that ptxas compiling here. A second image has a Debian-style
system Python. Against the test engine of .ci/run (marker ``docker``); the engine-down and
bad-input cases need no engine."""

from __future__ import annotations

import io
import json
import os
import sys
import tarfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.collect.stack.interpreter import Interpreter
from blackwell_doctor.collect.stack.inventory import read_stack
from blackwell_doctor.ruledata.stack import load_stack_data
from tests.cli import run
from tests.conftest import FACTS_FIXTURES, REPO
from tests.test_audit_real import _cached, _cuobjdump

SM120 = str(FACTS_FIXTURES / "sm120-driver580.json")
NO_ENGINE = "unix:///nonexistent/blackwell-doctor-test/docker.sock"
SITE = "opt/venv/lib/python3.11/site-packages"
PACKAGES = ("nvidia_nccl_cu12-2.27.7", "nvidia_cufile-1.15.1.6", "triton-3.3.1")


@pytest.fixture(autouse=True)
def _own_scan_cache(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg-cache"))


def _add(tar: tarfile.TarFile, name: str, data: bytes, mode: int = 0o644) -> None:
    info = tarfile.TarInfo(name)
    info.size, info.mode = len(data), mode
    tar.addfile(info, io.BytesIO(data))


def _link(tar: tarfile.TarFile, name: str, target: str) -> None:
    info = tarfile.TarInfo(name)
    info.type, info.linkname = tarfile.SYMTYPE, target
    tar.addfile(info)


def _rootfs(site: Path, out: Path) -> None:
    """A root filesystem: a venv at /opt/venv holding the cached wheels' installed files
    (each distribution's RECORD), the real CPython binary, an entrypoint script."""
    python = Path(os.path.realpath(sys.executable))
    with tarfile.open(out, "w") as tar:
        tar.add(python, arcname="usr/local/bin/python3.11")
        _link(tar, "usr/local/bin/python3", "python3.11")
        _link(tar, "opt/venv/bin/python3", "/usr/local/bin/python3.11")
        _link(tar, "opt/venv/bin/python", "python3")
        cfg = b"home = /usr/local/bin\ninclude-system-site-packages = false\nversion = 3.11.7\n"
        _add(tar, "opt/venv/pyvenv.cfg", cfg)
        _add(tar, "opt/venv/bin/serve", b"#!/opt/venv/bin/python3\nimport sys\n", 0o755)
        for dist in PACKAGES:
            record = (site / f"{dist}.dist-info" / "RECORD").read_text()
            for line in record.splitlines():
                rel = line.rsplit(",", 2)[0]
                if rel and not rel.startswith("..") and (site / rel).is_file():
                    tar.add(site / rel, arcname=f"{SITE}/{rel}", recursive=False)


@pytest.fixture(scope="module")
def wheels() -> Path:
    return _cached("gpu-wheels.sh", "the GPU wheels") / "site"


@pytest.fixture(scope="module")
def venv_image(
    docker_host: str, wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    import docker

    client = docker.DockerClient(base_url=docker_host, timeout=300)
    rootfs = tmp_path_factory.mktemp("image") / "rootfs.tar"
    _rootfs(wheels, rootfs)
    name = f"bd-audit-image-{uuid.uuid4().hex[:8]}"
    client.api.import_image(
        src=str(rootfs),
        repository=name,
        tag="test",
        changes=[
            "ENV PATH=/opt/venv/bin:/usr/local/bin:/usr/bin:/bin",
            'ENTRYPOINT ["serve"]',
        ],
    )
    rootfs.unlink()
    try:
        yield f"{name}:test"
    finally:
        client.images.remove(f"{name}:test", force=True)
        client.close()


DIST_PACKAGES = "usr/lib/python3/dist-packages"


@pytest.fixture(scope="module")
def debian_image(
    docker_host: str, wheels: Path, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """A Debian-style system Python (/usr/bin/python3 -> python3.11, no PATH in the image:
    Docker's default), its packages in /usr/lib/python3/dist-packages, an entrypoint
    script with ``#!/usr/bin/env python3``, and libcufile.so.0 a symbolic link to the real
    file beside it (as conda and distribution packages install libraries)."""
    import docker

    python = Path(os.path.realpath(sys.executable))
    rootfs = tmp_path_factory.mktemp("debian") / "rootfs.tar"
    dist = "nvidia_cufile-1.15.1.6"
    with tarfile.open(rootfs, "w") as tar:
        tar.add(python, arcname="usr/bin/python3.11")
        _link(tar, "usr/bin/python3", "python3.11")
        _add(tar, "usr/local/bin/serve", b"#!/usr/bin/env python3\nimport sys\n", 0o755)
        for line in (wheels / f"{dist}.dist-info" / "RECORD").read_text().splitlines():
            rel = line.rsplit(",", 2)[0]
            if rel.endswith("libcufile.so.0"):
                tar.add(wheels / rel, arcname=f"{DIST_PACKAGES}/{rel}.15.1")
                _link(tar, f"{DIST_PACKAGES}/{rel}", "libcufile.so.0.15.1")
            elif rel and (wheels / rel).is_file():
                tar.add(wheels / rel, arcname=f"{DIST_PACKAGES}/{rel}", recursive=False)
    client = docker.DockerClient(base_url=docker_host, timeout=300)
    name = f"bd-audit-debian-{uuid.uuid4().hex[:8]}"
    client.api.import_image(
        src=str(rootfs), repository=name, tag="test", changes=['CMD ["serve", "--port", "1"]']
    )
    try:
        yield f"{name}:test"
    finally:
        client.images.remove(f"{name}:test", force=True)
        client.close()


def _audit(argv: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, dict[str, Any]]:
    code, out, err = run(["audit", *argv, "--facts", SM120, "-f", "json", "--embed-facts"], capsys)
    assert code in (0, 1), err
    doc: dict[str, Any] = json.loads(out)
    return code, doc


def _audit_containers(docker_host: str) -> list[Any]:
    """The containers audit --image made (its label) still in the engine, stopped or not."""
    import docker

    from blackwell_doctor.collect.stack.image import LABEL

    client = docker.DockerClient(base_url=docker_host)
    try:
        return list(client.containers.list(all=True, filters={"label": LABEL}))
    finally:
        client.close()


def _result(doc: dict[str, Any], check: str) -> dict[str, Any]:
    [result] = [r for r in doc["results"] if r["id"] == check]
    assert isinstance(result, dict)
    return result


@pytest.mark.docker
def test_the_image_stack_equals_the_same_files_read_on_disk(
    venv_image: str,
    wheels: Path,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    _, doc = _audit(["--image", venv_image], capsys)
    stack = doc["facts"]["stack"]
    assert stack["status"] == "ok", stack
    assert stack["python"] == "/opt/venv/bin/python3"
    assert stack["python_version"] == "3.11.7"
    assert stack["site_dirs"] == [f"/{SITE}"]
    assert stack["image"]["ref"] == venv_image
    assert stack["image"]["interpreter_from"] == "entrypoint serve: #!/opt/venv/bin/python3"
    on_disk = read_stack(
        Interpreter(sys.executable, "3", (str(wheels),)),
        load_stack_data(),
        ptxas_targets=[],
        environ={},
        cache_path=None,
    )
    local = {p.name: p for p in on_disk.packages}
    got = {p["name"]: p for p in stack["packages"]}
    assert sorted(got) == ["nvidia-cufile", "nvidia-nccl-cu12", "triton"]
    for name, package in got.items():
        mine = local[name]
        assert package["version"] == mine.version
        assert package["shared_objects"] == mine.shared_objects
        assert package["unreadable"] == []
        assert package["files"] == json.loads(
            json.dumps([msgspec_to_builtins(f) for f in mine.files])
        ), name
    # libnccl's SASS targets: as NVIDIA's cuobjdump lists them from the file on disk.
    [nccl] = got["nvidia-nccl-cu12"]["files"]
    assert nccl["path"] == "nvidia/nccl/lib/libnccl.so.2"
    sass = {s for unit in nccl["units"] for s in unit["sass"]}
    cuobjdump = wheels / "nvidia" / "cu13" / "bin" / "cuobjdump"
    listed = _cuobjdump(cuobjdump, "--list-elf", wheels / nccl["path"])
    assert {"sm_90", "sm_100", "sm_120"} <= set(listed)
    assert {s.removesuffix("f") for s in sass} == set(listed)
    assert _result(doc, "stack.kernels")["status"] == "pass"


@pytest.mark.docker
def test_the_image_ptxas_judged_by_its_release_agrees_with_compiling_it(
    venv_image: str,
    wheels: Path,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """Nothing of the image runs: its Triton 3.3.1 ptxas-blackwell is judged by the CUDA
    release in its binary (12.8). The same binary, run here on the same files, compiles
    sm_120a and refuses sm_121a: the judgement must say the same."""
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    compiled = read_stack(
        Interpreter(sys.executable, "3", (str(wheels),)),
        load_stack_data(),
        ptxas_targets=["sm_120a", "sm_121a"],
        environ={},
        cache_path=None,
    )
    ran = {r.target: r.ok for r in compiled.ptxas}
    assert ran == {"sm_120a": True, "sm_121a": False}
    gb10 = str(FACTS_FIXTURES / "dgx-spark-gb10.json")
    code, out, err = run(
        ["audit", "--image", venv_image, "--facts", gb10, "-f", "json", "--embed-facts"], capsys
    )
    assert code == 1, err
    doc = json.loads(out)
    judged = {r["target"]: r for r in doc["facts"]["stack"]["ptxas"]}
    assert {t: r["ok"] for t, r in judged.items()} == ran
    assert all(r["by"] == "release" and r["version"] == "12.8" for r in judged.values())
    assert judged["sm_121a"]["path"] == f"/{SITE}/triton/backends/nvidia/bin/ptxas-blackwell"
    ptxas = _result(doc, "stack.triton_ptxas")
    assert ptxas["status"] == "fail"
    assert "CUDA 12.8 has no sm_121a: it came with CUDA 12.9" in ptxas["summary"]
    assert "audit --image does not run" in ptxas["summary"]
    _, doc = _audit(["--image", venv_image], capsys)
    ptxas = _result(doc, "stack.triton_ptxas")
    assert ptxas["status"] == "pass"
    assert "knows it by its CUDA release" in ptxas["summary"]


def msgspec_to_builtins(value: Any) -> Any:
    import msgspec

    return msgspec.to_builtins(value)


@pytest.mark.docker
def test_a_system_python_and_a_linked_library_are_read_as_on_disk(
    debian_image: str,
    wheels: Path,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    _, doc = _audit(["--image", debian_image], capsys)
    stack = doc["facts"]["stack"]
    assert stack["python"] == "/usr/bin/python3"
    assert stack["python_version"] == "3.11"
    assert stack["site_dirs"] == [f"/{DIST_PACKAGES}"]
    assert stack["image"]["interpreter_from"] == "entrypoint serve: #!/usr/bin/env python3"
    [package] = stack["packages"]
    on_disk = read_stack(
        Interpreter(sys.executable, "3", (str(wheels),)),
        load_stack_data(),
        ptxas_targets=[],
        environ={},
        cache_path=None,
    )
    [mine] = [p for p in on_disk.packages if p.name == "nvidia-cufile"]
    assert package["name"] == "nvidia-cufile"
    assert package["unreadable"] == []
    assert package["files"] == [msgspec_to_builtins(f) for f in mine.files]
    assert [f["path"] for f in package["files"]] == ["nvidia/cu13/lib/libcufile.so.0"]


@pytest.mark.docker
def test_memory_stays_bounded_while_a_430_mb_library_streams(
    venv_image: str, docker_host: str
) -> None:
    """libnccl.so.2 (430 MB) passes through a temporary file, never whole in memory."""
    import tracemalloc

    from blackwell_doctor.collect.stack.image import read_image_stack
    from blackwell_doctor.facts.stack import StackFacts

    tracemalloc.start()
    try:
        read = read_image_stack(
            venv_image,
            load_stack_data(),
            ptxas_targets=["sm_120a"],
            environ={"DOCKER_HOST": docker_host},
        )
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert isinstance(read, StackFacts)
    assert any(f.size > 400 << 20 for p in read.packages for f in p.files)
    assert peak < 64 << 20, peak


@pytest.mark.docker
def test_a_deadline_passed_is_a_reason_and_leaves_nothing_behind(
    venv_image: str, docker_host: str, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    import tempfile

    from blackwell_doctor.collect.stack.image import read_image_stack
    from blackwell_doctor.facts.document import Unavailable

    scratch = tmp_path / "tmp"
    scratch.mkdir()
    monkeypatch.setattr(tempfile, "tempdir", str(scratch))
    read = read_image_stack(
        venv_image,
        load_stack_data(),
        ptxas_targets=[],
        environ={"DOCKER_HOST": docker_host},
        deadline_s=0.0,
    )
    assert isinstance(read, Unavailable)
    assert read.reason == (
        f"reading image {venv_image} took longer than 0 s (the deadline of audit --image)"
    )
    assert list(scratch.iterdir()) == []
    assert _audit_containers(docker_host) == []


@pytest.mark.docker
def test_a_second_audit_of_the_same_image_reads_it_from_the_cache(
    venv_image: str,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    """The image id names its content: the second audit streams nothing (every shared
    object from the cache) and finds the same; --no-cache reads it again."""
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    _, first = _audit(["--image", venv_image], capsys)
    _, second = _audit(["--image", venv_image], capsys)
    _, again = _audit(["--image", venv_image, "--no-cache"], capsys)
    stacks = [doc["facts"]["stack"] for doc in (first, second, again)]
    assert [s["cached_files"] for s in stacks] == [0, 14, 0]
    assert stacks[0]["packages"] == stacks[1]["packages"] == stacks[2]["packages"]
    assert stacks[0]["ptxas"] == stacks[1]["ptxas"]


@pytest.mark.docker
def test_no_container_is_left_behind(
    venv_image: str,
    docker_host: str,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture[str],
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    _audit(["--image", venv_image], capsys)
    assert _audit_containers(docker_host) == []


@pytest.mark.docker
def test_an_image_not_in_the_engine_is_a_finding_with_its_reason(
    docker_host: str, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", docker_host)
    code, doc = _audit(["--image", "bd-no-such-image:never"], capsys)
    assert code == 0
    kernels = _result(doc, "stack.kernels")
    assert kernels["status"] == "error"
    assert "image bd-no-such-image:never is not in the Docker engine" in kernels["summary"]
    assert "docker pull bd-no-such-image:never" in kernels["summary"]


def test_an_engine_that_is_down_is_a_finding_with_its_reason(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    code, doc = _audit(["--image", "vllm/vllm-openai:latest"], capsys)
    assert code == 0
    summary = _result(doc, "stack.kernels")["summary"]
    assert "no Docker engine socket at /nonexistent/blackwell-doctor-test/docker.sock" in summary
    code, _, err = run(["audit", "--image", "x:1", "--facts", SM120, "--strict"], capsys)
    assert code == 3, err


def test_check_and_collect_take_image_too(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """--image implies --stack: the stack section is the image's (here: why it is not)."""
    monkeypatch.setenv("DOCKER_HOST", NO_ENGINE)
    args = ["--facts", SM120, "--image", "x:1", "--select", "stack", "-f", "json"]
    code, out, err = run(["check", *args], capsys)
    assert code == 0, err
    assert "no Docker engine socket" in _result(json.loads(out), "stack.kernels")["summary"]
    facts = tmp_path / "facts.json"
    code, _, err = run(["collect", "--image", "x:1", "--no-probe", "-o", str(facts)], capsys)
    assert code == 0, err
    stack = json.loads(facts.read_text())["stack"]
    assert stack["status"] == "unavailable"
    assert "no Docker engine socket" in stack["reason"]


@pytest.mark.parametrize(
    ("argv", "words"),
    [
        (["--image", ""], "is not an image reference"),
        (["--image", "Bad Name"], "is not an image reference"),
        (["--image", "x:1", "--python", sys.executable], "give one"),
    ],
)
def test_bad_image_arguments_are_one_line_errors(
    argv: list[str], words: str, capsys: pytest.CaptureFixture[str]
) -> None:
    code, out, err = run(["audit", *argv, "--facts", SM120], capsys)
    assert (code, out) == (2, "")
    assert words in err
    assert err.count("\n") == 1
    assert str(REPO) not in err
