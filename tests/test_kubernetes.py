"""deploy/kubernetes: the manifests validated against the Kubernetes OpenAPI schemas
(kubernetes-validate, strict: unknown fields are errors), the DaemonSet's privilege as
documented, its commands run for real with this CLI, the Node Feature Discovery file, and
the node-problem-detector plugin's exit-code contract (0 OK, 1 problem, 2 unknown) run
under /bin/sh. What needs a cluster (scheduling, the NVIDIA runtime class, nfd-worker and
NPD reading the files) is not run here."""

from __future__ import annotations

import datetime as dt
import json
import re
import shlex
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.render import Format, render
from blackwell_doctor.render.timing import RunTiming
from blackwell_doctor.rules.evaluate import evaluate
from tests.conftest import FACTS_FIXTURES, REPO, skip_without
from tests.factsutil import load

try:
    import kubernetes_validate
    import yaml
except ModuleNotFoundError as exc:
    skip_without(exc)

K8S = REPO / "deploy" / "kubernetes"
PYPROJECT = tomllib.loads((REPO / "pyproject.toml").read_text())
NPD = K8S / "node-problem-detector"
MANIFESTS = sorted(K8S.rglob("*.yaml"))
# The oldest Kubernetes still in support when this was written, and the newest the
# validator ships: the manifests must hold for both.
VERSIONS = ["1.31.0", kubernetes_validate.latest_version()]


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def daemonset() -> dict[str, Any]:
    [ds] = [d for d in documents(K8S / "daemonset.yaml") if d["kind"] == "DaemonSet"]
    return ds


@pytest.mark.parametrize("version", VERSIONS)
@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: p.name)
def test_manifests_follow_the_kubernetes_schemas(path: Path, version: str) -> None:
    for doc in documents(path):
        kubernetes_validate.validate(doc, version, strict=True)


def test_the_validator_rejects_what_kubernetes_would() -> None:
    # The control: a misspelt field and a wrong type fail, so a pass above means something.
    ds = daemonset()
    ds["spec"]["template"]["spec"]["containers"][0]["securityContext"]["privilegd"] = False
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)
    ds = daemonset()
    ds["spec"]["template"]["spec"]["volumes"][0]["hostPath"]["path"] = ["/proc"]
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(ds, VERSIONS[-1], strict=True)


def test_daemonset_privilege_is_what_the_comments_say() -> None:
    pod = daemonset()["spec"]["template"]["spec"]
    for key in ("hostNetwork", "hostPID", "hostIPC"):
        assert not pod.get(key)
    assert pod["automountServiceAccountToken"] is False
    [container] = pod["containers"]
    sc = container["securityContext"]
    assert sc["privileged"] is False
    assert sc["allowPrivilegeEscalation"] is False
    assert sc["readOnlyRootFilesystem"] is True
    assert sc["capabilities"] == {"drop": ["ALL"]}
    assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
    volumes = {v["name"]: v for v in pod["volumes"]}
    writable = set()
    for mount in container["volumeMounts"]:
        host = volumes[mount["name"]].get("hostPath")
        if host is None:
            continue
        if mount["mountPath"].startswith("/host/"):
            # --host-root /host reads these, and only reads them.
            assert mount.get("readOnly") is True, mount
            assert mount["mountPath"] == "/host" + host["path"]
        else:
            writable.add(host["path"])
    assert writable == {
        "/var/lib/prometheus/node-exporter",
        "/etc/kubernetes/node-feature-discovery/features.d",
    }
    # What the DaemonSet's checks read under --host-root, and no more (the comments' table):
    # not the host's /dev, not all of its /etc.
    host_mounts = {m["mountPath"] for m in container["volumeMounts"]} - {
        "/textfile", "/features.d", "/tmp",
    }  # fmt: skip
    assert host_mounts == {"/host/proc", "/host/sys", "/host/etc/os-release"}
    assert volumes["host-os-release"]["hostPath"]["type"] == "File"


def test_the_daemonset_runs_the_projects_image_at_a_released_version() -> None:
    # The image the Dockerfile builds (docs/container.md), named after the project's
    # source repository, at a version the CHANGELOG records.
    [container] = daemonset()["spec"]["template"]["spec"]["containers"]
    repository, _, tag = container["image"].rpartition(":")
    source = PYPROJECT["project"]["urls"]["Source"].removeprefix("https://github.com/")
    assert repository == f"ghcr.io/{source}"
    assert f"## [{tag}]" in (REPO / "CHANGELOG.md").read_text()
    assert f"{repository}:{tag}" in (REPO / "docs" / "container.md").read_text()


def test_npd_reads_the_file_the_daemonset_writes() -> None:
    # The DaemonSet writes <features hostPath>/<name of its -o file>; the NPD plugin reads
    # /host-features.d/<the same name>, which the NPD snippet of docs/fleets.md mounts from
    # that same hostPath.
    pod = daemonset()["spec"]["template"]["spec"]
    volumes = {v["name"]: v for v in pod["volumes"]}
    [mount] = [m for m in pod["containers"][0]["volumeMounts"] if m["mountPath"] == "/features.d"]
    [nfd_out] = [c[c.index("-o") + 1] for c in daemonset_commands() if "nfd" in c]
    written = volumes[mount["name"]]["hostPath"]["path"] + nfd_out.removeprefix("/features.d")
    [rule] = json.loads((NPD / "blackwell-doctor-monitor.json").read_text())["rules"]
    [read] = rule["args"]
    snippet = (REPO / "docs" / "fleets.md").read_text()
    assert "{name: nfd-features, mountPath: /host-features.d, readOnly: true}" in snippet
    host_dir = re.search(r"\{name: nfd-features, hostPath: \{path: ([^}]+)\}\}", snippet)
    assert host_dir is not None
    assert read.replace("/host-features.d", host_dir.group(1).strip()) == written


def daemonset_commands() -> list[list[str]]:
    script = daemonset()["spec"]["template"]["spec"]["containers"][0]["args"][0]
    joined = script.replace("\\\n", " ")
    return [shlex.split(line) for line in joined.splitlines() if "blackwell-doctor check" in line]


def test_daemonset_commands_run_with_this_cli(tmp_path: Path) -> None:
    # The same argument lists, with this machine's / as the host root and tmp_path as the
    # two host directories: every option exists and both files are written.
    commands = daemonset_commands()
    assert len(commands) == 2
    for argv in commands:
        assert argv[0] == "blackwell-doctor"
        args = [
            a.replace("/textfile", str(tmp_path)).replace("/features.d", str(tmp_path))
            for a in argv[1:]
        ]
        args[args.index("--host-root") + 1] = "/"
        proc = subprocess.run(
            [sys.executable, "-m", "blackwell_doctor", *args],
            capture_output=True,
            text=True,
            timeout=180,
            check=False,
        )
        assert proc.returncode in (0, 1, 3), proc.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "blackwell-doctor",
        "blackwell_doctor.prom",
    ]


# --------------------------------------------------------------------------- NFD feature file

LABEL_NAME = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?$")
LABEL_VALUE = re.compile(r"^(?:[A-Za-z0-9](?:[A-Za-z0-9._-]{0,61}[A-Za-z0-9])?)?$")


def nfd_file(fixture: str, *, started_at: float | None = None) -> str:
    report = evaluate(load(fixture), embed_facts=True)
    timing = None if started_at is None else RunTiming(started_at=started_at, duration_s=1.0)
    return render(report, Format.NFD, color=False, timing=timing)


@pytest.mark.parametrize("fixture", [p.stem for p in sorted(FACTS_FIXTURES.glob("*.json"))])
def test_nfd_lines_are_valid_labels(fixture: str) -> None:
    for line in nfd_file(fixture, started_at=1.8e9).splitlines():
        if line.startswith("#"):
            continue
        name, _, value = line.partition("=")
        assert LABEL_NAME.match(name), line
        assert LABEL_VALUE.match(value), line


def test_nfd_labels_say_verdict_sm_and_failing_checks() -> None:
    text = nfd_file("sm120-driver580", started_at=1.8e9)
    labels = dict(line.split("=", 1) for line in text.splitlines() if not line.startswith("#"))
    assert labels["blackwell-doctor.verdict"] == "findings"
    assert labels["blackwell-doctor.sm"] == "12.0"
    assert labels["blackwell-doctor.check.driver.version"] == "fail"
    assert labels["blackwell-doctor.failed"] == "1"
    expires = dt.datetime.fromtimestamp(1.8e9, dt.UTC) + dt.timedelta(hours=1)
    assert f"# +expiry-time={expires:%Y-%m-%dT%H:%M:%SZ}" in text.splitlines()
    healthy = nfd_file("h200x2-captured")
    assert "blackwell-doctor.verdict=ok" in healthy.splitlines()
    assert "blackwell-doctor.sm=9.0" in healthy.splitlines()


# --------------------------------------------------------------------------- node-problem-detector


def run_plugin(feature_file: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["/bin/sh", str(NPD / "blackwell-doctor.sh"), str(feature_file)],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def write_verdict(tmp_path: Path, fixture: str, *, expired: bool = False) -> Path:
    # Written by the CLI, as the DaemonSet writes it (its expiry is an hour from now).
    path = tmp_path / "blackwell-doctor"
    proc = subprocess.run(
        [sys.executable, "-m", "blackwell_doctor", "check", "--facts",
         str(FACTS_FIXTURES / f"{fixture}.json"), "--format", "nfd", "-o", str(path)],
        capture_output=True, text=True, timeout=120, check=False,
    )  # fmt: skip
    assert proc.returncode in (0, 1), proc.stderr
    if expired:
        past = dt.datetime.now(dt.UTC) - dt.timedelta(minutes=1)
        text = re.sub(
            r"(?m)^# \+expiry-time=.*$",
            f"# +expiry-time={past:%Y-%m-%dT%H:%M:%SZ}",
            path.read_text(),
        )
        path.write_text(text)
    return path


def test_npd_plugin_maps_our_verdict_to_its_exit_codes(tmp_path: Path) -> None:
    ok = run_plugin(write_verdict(tmp_path, "h200x2-captured"))
    assert (ok.returncode, ok.stdout) == (0, "blackwell-doctor: ok\n")
    problem = run_plugin(write_verdict(tmp_path, "sm120-driver580"))
    assert (problem.returncode, problem.stdout) == (
        1,
        "blackwell-doctor: degraded: driver.version\n",
    )
    service = run_plugin(write_verdict(tmp_path, "h200x2-row-remap"))
    assert service.returncode == 1
    assert service.stdout.startswith("blackwell-doctor: needs-service: ")
    expired = run_plugin(write_verdict(tmp_path, "sm120-driver580", expired=True))
    assert expired.returncode == 2
    assert "expired" in expired.stdout
    missing = run_plugin(tmp_path / "absent")
    assert missing.returncode == 2
    (tmp_path / "garbage").write_text("hello\n")
    assert run_plugin(tmp_path / "garbage").returncode == 2


def test_npd_monitor_config_and_configmap_agree_with_the_plugin() -> None:
    config = json.loads((NPD / "blackwell-doctor-monitor.json").read_text())
    assert config["plugin"] == "custom"
    [rule] = config["rules"]
    assert rule["condition"] == config["conditions"][0]["type"]
    assert rule["path"] == "/config/blackwell-doctor/blackwell-doctor.sh"
    [cm] = documents(NPD / "configmap.yaml")
    assert cm["data"] == {
        "blackwell-doctor.sh": (NPD / "blackwell-doctor.sh").read_text(),
        "blackwell-doctor-monitor.json": (NPD / "blackwell-doctor-monitor.json").read_text(),
    }
