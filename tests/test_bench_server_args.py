"""Issue 40: a compare's environment difference names the launch flag that changed. Two
runs against ``vllm serve M`` and ``vllm serve M --max-num-seqs 1`` differed only by
"server config hash"; the run now records the server's launch arguments where they can be
read (a process on this host through /proc, a container through the Docker API, the spec
apply --verify launched) and the compare shows the flag in every view."""

from __future__ import annotations

import html
import json
import os
import subprocess
import sys
from pathlib import Path
from types import SimpleNamespace

import msgspec
import pytest

from blackwell_doctor.collect.bench import server_args
from blackwell_doctor.render.bench import render_bench
from blackwell_doctor.render.formats import BenchFormat
from blackwell_doctor.render.markdown import prose
from blackwell_doctor.report.bench import decode_run
from blackwell_doctor.report.bench_env import (
    FLAG_GIVEN,
    Environment,
    ServerArgs,
    flatten,
    launch_flags,
)
from blackwell_doctor.rules.compare import compare
from blackwell_doctor.rules.environment import UNSET, compare_environments, words

EXAMPLES = Path(__file__).resolve().parents[1] / "examples" / "bench"
NO_DOCKER = {"DOCKER_HOST": "unix:///nonexistent/blackwell-doctor-test/docker.sock"}


# --- the flags of a command line ----------------------------------------------------------


def test_flags_are_read_token_by_token() -> None:
    positional, flags = launch_flags(
        [
            "/venv/bin/python",
            "/venv/bin/vllm",
            "serve",
            "Qwen/Qwen3-8B",
            "--max-num-seqs",
            "1",
            "--enforce-eager",
            "--dtype=bfloat16",
            "--max_model_len",
            "4096",
            "--seed",
            "-1",
            "-tp",
            "2",
            "--middleware",
            "a",
            "--middleware",
            "b",
            "--",
            "--not-a-flag",
        ]
    )
    assert positional == [
        "/venv/bin/python",
        "/venv/bin/vllm",
        "serve",
        "Qwen/Qwen3-8B",
        "--not-a-flag",
    ]
    assert flags == {
        "--max-num-seqs": "1",
        "--enforce-eager": FLAG_GIVEN,
        "--dtype": "bfloat16",
        "--max-model-len": "4096",  # vLLM reads --max_model_len as --max-model-len
        "--seed": "-1",
        "-tp": "2",
        "--middleware": "a, b",
    }


def _env(argv: list[str], hash8: str) -> Environment:
    return Environment(
        server_version="0.32.0",
        config_hash=hash8,
        server_config={"vllm:cache_config_info.block_size": "16"},
        server_args=ServerArgs(source="process 1 on this host", argv=argv),
    )


SERVE = ["vllm", "serve", "M"]


def test_one_flag_added_is_one_difference_the_hash_follows_from() -> None:
    before = _env(SERVE, "d64a44e8")
    after = _env([*SERVE, "--max-num-seqs", "1"], "a5a93bca")
    env = compare_environments(before, after)
    shown = [(c.key, c.before, c.after) for c in env.differences]
    assert shown == [
        ("server arg --max-num-seqs", UNSET, "1"),
        # The config hash row is kept, shown beside the flag it follows from.
        ("server config hash", "d64a44e8", "a5a93bca"),
    ]
    assert env.verdict == "one difference"
    assert any("server arg --max-num-seqs: (not set) -> 1" in n for n in env.notes)
    assert any(n.startswith("server config hash follow(s) from") for n in env.notes)


def test_without_launch_arguments_the_hash_is_the_difference() -> None:
    # What a run document before issue 40 holds: only the hash differs, and it counts.
    before = msgspec.structs.replace(_env(SERVE, "d64a44e8"), server_args=msgspec.UNSET)
    after = msgspec.structs.replace(_env(SERVE, "a5a93bca"), server_args=msgspec.UNSET)
    env = compare_environments(before, after)
    assert env.verdict == "one difference"
    assert [c.key for c in env.differences] == ["server config hash"]
    assert not any("follow(s) from" in n for n in env.notes)


def test_two_flags_changed_are_confounded_and_a_changed_value_is_shown() -> None:
    before = _env([*SERVE, "--max-num-seqs=8", "--enforce-eager"], "d64a44e8")
    after = _env([*SERVE, "--max-num-seqs", "1"], "a5a93bca")
    env = compare_environments(before, after)
    assert [(c.key, c.before, c.after) for c in env.differences][:2] == [
        ("server arg --enforce-eager", FLAG_GIVEN, UNSET),
        ("server arg --max-num-seqs", "8", "1"),
    ]
    assert env.verdict == "confounded"
    assert env.notes[-1].startswith("2 recorded differences")


def test_a_side_without_launch_arguments_makes_them_unknown_not_unset() -> None:
    before = msgspec.structs.replace(_env(SERVE, "d64a44e8"), server_args=msgspec.UNSET)
    env = compare_environments(before, _env([*SERVE, "--max-num-seqs", "1"], "d64a44e8"))
    assert "server arg --max-num-seqs" in env.unknown
    assert env.verdict == "same"


def test_the_derived_words_are_the_catalogues() -> None:
    assert "{keys}" in words().derived


# --- a real process on this host -----------------------------------------------------------


def test_the_process_listening_on_a_port_gives_its_argv(tmp_path: Path) -> None:
    argv = [
        sys.executable,
        "-u",
        "-m",
        "http.server",
        "--bind",
        "127.0.0.1",
        "--directory",
        str(tmp_path),
        "0",
    ]
    child = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert child.stdout is not None
        line = child.stdout.readline()  # "Serving HTTP on 127.0.0.1 port N (http://...) ..."
        port = int(line.split(" port ", 1)[1].split()[0])
        args, why = server_args.on_this_host(port, environ=NO_DOCKER)
        assert why is None
        assert args is not None
        assert args.source == f"process {child.pid} on this host"
        assert args.argv == argv
        assert args.image is None
        flags = flatten(
            Environment(server_args=args)  # the compare's keys
        )
        assert flags["server arg --bind"] == "127.0.0.1"
        assert flags["server arg --directory"] == str(tmp_path)
        assert flags["server arg -m"] == "http.server"
    finally:
        child.kill()
        child.wait()


def test_nothing_listening_says_so_without_docker() -> None:
    import socket

    with socket.socket() as s:  # a port that was free a moment ago: nothing listens
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    args, why = server_args.on_this_host(port, environ=NO_DOCKER)
    assert args is None
    assert why is not None
    assert why.startswith(f"no process of this network namespace listens on port {port}, and ")
    assert "no container engine to ask" in why


def test_a_listener_whose_files_cannot_be_read_is_said_not_a_crash(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A /proc of one listening socket (port 8000 = 0x1F40 on 0.0.0.0, uid 0, inode 4242)
    # held by a process whose fd directory this user cannot list (another user's, hidepid).
    (tmp_path / "net").mkdir()
    head = "  sl  local_address rem_address   st tx_queue rx_queue tr tm->when retrnsmt   uid"
    (tmp_path / "net" / "tcp").write_text(
        f"{head}  timeout inode\n"
        "   0: 00000000:1F40 00000000:0000 0A 00000000:00000000 00:00000000 00000000     0"
        "        0 4242 1 0000000000000000 100 0 0 10 0\n"
    )
    (tmp_path / "77" / "fd").mkdir(parents=True)
    real = os.listdir

    def listdir(path: str | os.PathLike[str]) -> list[str]:
        if Path(path) == tmp_path / "77" / "fd":
            raise PermissionError(13, "Permission denied")
        return real(path)

    monkeypatch.setattr(os, "listdir", listdir)
    sockets = server_args.listening(8000, tmp_path)
    assert [(s.inode, s.uid) for s in sockets] == [(4242, 0)]
    args, why = server_args.on_this_host(8000, tmp_path, environ=NO_DOCKER)
    assert args is None
    assert why is not None
    assert why.startswith(
        "port 8000 is held by a process of uid 0 whose open files this user cannot read "
        "(1 such process; another user's, or /proc's hidepid), and no container engine to ask"
    )


def test_an_ipv6_loopback_listener_is_found(tmp_path: Path) -> None:
    (tmp_path / "net").mkdir()
    (tmp_path / "net" / "tcp6").write_text(
        "  sl  local_address remote_address st tx_queue rx_queue tr tm->when retrnsmt uid "
        "timeout inode\n"
        "   0: 00000000000000000000000001000000:1F40 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000        0 99 1 0 100 0 0 10 0\n"
        # ::1 port 8001, and a non-loopback address on 8000 (not ours)
        "   1: 00000000000000000000000001000000:1F41 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000        0 98 1 0 100 0 0 10 0\n"
        "   2: 0000000000000000000000000200000A:1F40 00000000000000000000000000000000:0000 0A "
        "00000000:00000000 00:00000000 00000000  1000        0 97 1 0 100 0 0 10 0\n"
    )
    assert [(s.inode, s.uid) for s in server_args.listening(8000, tmp_path)] == [(99, 1000)]


def test_a_container_gives_its_path_args_and_image_secrets_redacted() -> None:
    attrs = {
        "Name": "/vllm",
        "Path": "vllm",
        "Args": ["serve", "M", "--api-key", "sk-abcdefghijklmnop1234", "--max-num-seqs", "1"],
        "Config": {"Image": "vllm/vllm-openai:v0.32.0"},
        "NetworkSettings": {"Ports": {"8000/tcp": [{"HostIp": "0.0.0.0", "HostPort": "8000"}]}},
    }
    args = server_args.from_container(attrs, "container vllm")
    assert args is not None
    assert args.argv == ["vllm", "serve", "M", "--api-key", "<redacted>", "--max-num-seqs", "1"]
    assert args.image == "vllm/vllm-openai:v0.32.0"
    assert server_args._published(attrs, 8000)
    assert not server_args._published(attrs, 8001)
    flat = flatten(Environment(server_args=args))
    assert flat["server arg --api-key"] == "<redacted>"
    assert flat["server image"] == "vllm/vllm-openai:v0.32.0"
    assert flat["server command"] == "vllm serve M"


# --- two run documents, one flag apart, in every view ---------------------------------------


def _with_args(path: Path, argv: list[str]) -> bytes:
    run = decode_run(path.read_bytes(), source=str(path))
    assert run.environment is not None
    env = msgspec.structs.replace(
        run.environment, server_args=ServerArgs(source="process 4242 on this host", argv=argv)
    )
    return msgspec.json.encode(msgspec.structs.replace(run, environment=env))


def test_two_runs_one_flag_apart_show_the_flag_in_every_view() -> None:
    # The shipped A/B pair (examples/bench/capture.sh: the CI's vLLM CPU server, the second
    # with --max-num-seqs 1), each with the command line capture.sh started it with.
    serve = ["vllm", "serve", "tinymoe", "--reasoning-parser", "qwen3"]
    before = decode_run(_with_args(EXAMPLES / "max-num-seqs-1.before.json", serve), source="before")
    after = decode_run(
        _with_args(EXAMPLES / "max-num-seqs-1.after.json", [*serve, "--max-num-seqs", "1"]),
        source="after",
    )
    doc = compare(before, after, before_name="before", after_name="after", resamples=200)
    line = "server arg --max-num-seqs: (not set) -> 1"
    views = {fmt: render_bench(doc, fmt) for fmt in BenchFormat}
    env = json.loads(views[BenchFormat.JSON])["environment"]
    assert env["verdict"] == "one difference"
    assert {"key": "server arg --max-num-seqs", "before": "(not set)", "after": "1"} in env[
        "differences"
    ]
    assert {"key": "server config hash", "before": "d64a44e8", "after": "a5a93bca"} in env[
        "differences"
    ]
    assert f"  {line}" in views[BenchFormat.RICH].splitlines()
    assert f"note: one recorded difference ({line})" in views[BenchFormat.RICH]
    assert f"- {prose(line)}" in views[BenchFormat.MARKDOWN].splitlines()
    page = html.unescape(views[BenchFormat.HTML])
    assert "<td>server arg --max-num-seqs</td><td>(not set)</td><td>1</td>" in page.replace(
        '<td class="text">', "<td>"
    )
    # Each run's own view says how its server was launched.
    run_text = render_bench(after, BenchFormat.RICH)
    assert (
        "environment: launched as vllm serve tinymoe --reasoning-parser qwen3 --max-num-seqs 1 "
        "(process 4242 on this host)"
    ) in run_text


def test_a_compare_of_documents_without_launch_arguments_is_unchanged() -> None:
    before = decode_run((EXAMPLES / "max-num-seqs-1.before.json").read_bytes(), source="b")
    after = decode_run((EXAMPLES / "max-num-seqs-1.after.json").read_bytes(), source="a")
    out = render_bench(
        compare(before, after, before_name="b", after_name="a", resamples=200), BenchFormat.JSON
    )
    assert "server arg" not in out
    assert "server_args" not in msgspec.json.encode(before).decode()


def test_apply_verify_records_the_container_it_launched() -> None:
    from blackwell_doctor.app.verify import launch_args

    # A docker SDK Container: its inspect attributes.
    launched = SimpleNamespace(
        attrs={
            "Path": "vllm",
            "Args": ["serve", "M", "--max-num-seqs", "1"],
            "Config": {"Image": "vllm/vllm-openai:v0.32.0"},
        }
    )
    source = "apply --verify's launch spec (container vllm)"
    args = launch_args(launched, source)
    assert args == ServerArgs(
        source=source,
        argv=["vllm", "serve", "M", "--max-num-seqs", "1"],
        image="vllm/vllm-openai:v0.32.0",
    )
    assert launch_args(object(), source) is None
