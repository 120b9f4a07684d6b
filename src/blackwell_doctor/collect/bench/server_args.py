"""How the server a bench run measures was launched (issue 40: two runs against ``vllm serve
M`` and ``vllm serve M --max-num-seqs 1`` differed only by "server config hash"). Read where
it can be, never a failure:

- a server on this host: the socket listening on the URL's port (``/proc/net/tcp`` and
  ``tcp6``: local address, state 0A = LISTEN, uid, inode; proc(5)), the process whose
  ``/proc/<pid>/fd`` holds ``socket:[inode]``, and its ``/proc/<pid>/cmdline`` (NUL-separated
  argv). A process of another user (or /proc mounted with hidepid) cannot be read: that is
  said, with the socket's uid.
- a server in a container publishing that port (Docker's userland proxy, ``docker-proxy``,
  is then the listener, or nothing is with the proxy off): the Docker API's running
  container whose ``NetworkSettings.Ports`` has that ``HostPort``, its ``Path`` and ``Args``
  (the entrypoint and command the engine ran) and ``Config.Image``.

Every argument is redacted as a command line written to a log is (facts/redact.py
``redact_argv``: ``--api-key X``, ``HF_TOKEN=...``, tokens inside any argument).
"""

from __future__ import annotations

import ipaddress
import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from blackwell_doctor.collect.dockerapi import EngineUnavailable, connect, one_line
from blackwell_doctor.facts.redact import redact_argv
from blackwell_doctor.report.bench_env import MAX_ARGS, ServerArgs, cut

_LISTEN = "0A"  # include/net/tcp_states.h: TCP_LISTEN = 10
# The userland proxy Docker runs for a published port (moby cmd/docker-proxy).
_DOCKER_PROXY = "docker-proxy"
_PROXY_NAME = _DOCKER_PROXY
DOCKER_TIMEOUT_S = 5.0


class Socket:
    """A listening TCP socket of /proc/net/tcp{,6}."""

    def __init__(self, inode: int, uid: int) -> None:
        self.inode = inode
        self.uid = uid


def _address(hex_addr: str) -> ipaddress.IPv4Address | ipaddress.IPv6Address:
    """A /proc/net/tcp{,6} address: the kernel's 32-bit words in host (little-endian) order."""
    raw = bytes.fromhex(hex_addr)
    words = b"".join(raw[i : i + 4][::-1] for i in range(0, len(raw), 4))
    return ipaddress.ip_address(words)


def _reaches_loopback(addr: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """Whether a listener on ``addr`` answers a connection to a loopback address."""
    if isinstance(addr, ipaddress.IPv6Address) and addr.ipv4_mapped is not None:
        addr = addr.ipv4_mapped
    return addr.is_loopback or addr.is_unspecified


def listening(port: int, proc: Path = Path("/proc")) -> list[Socket]:
    """The sockets listening on ``port`` on a loopback or any address of this network
    namespace."""
    found: list[Socket] = []
    for table in ("tcp", "tcp6"):
        try:
            lines = (proc / "net" / table).read_text(encoding="ascii").splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            fields = line.split()
            if len(fields) < 10 or fields[3] != _LISTEN:
                continue
            addr, _, hex_port = fields[1].partition(":")
            try:
                if int(hex_port, 16) != port or not _reaches_loopback(_address(addr)):
                    continue
                found.append(Socket(int(fields[9]), int(fields[7])))
            except ValueError:
                continue
    return found


def holder(inodes: set[int], proc: Path = Path("/proc")) -> tuple[int | None, int]:
    """The pid whose open files hold one of the sockets ``inodes``, and how many processes'
    open files could not be read (another user's, hidepid)."""
    wanted = {f"socket:[{i}]" for i in inodes}
    unreadable = 0
    try:
        pids = sorted(int(p.name) for p in proc.iterdir() if p.name.isdigit())
    except OSError:
        return None, 0
    for pid in pids:
        fd_dir = proc / str(pid) / "fd"
        try:
            fds = os.listdir(fd_dir)
        except PermissionError:
            unreadable += 1
            continue
        except OSError:  # the process ended meanwhile
            continue
        for fd in fds:
            try:
                if os.readlink(fd_dir / fd) in wanted:
                    return pid, unreadable
            except OSError:
                continue
    return None, unreadable


def cmdline(pid: int, proc: Path = Path("/proc")) -> list[str]:
    """The argv of ``pid`` (proc(5): NUL-separated, a trailing NUL)."""
    raw = (proc / str(pid) / "cmdline").read_bytes()
    return [a.decode("utf-8", "replace") for a in raw.split(b"\0")[:-1]] or (
        [raw.decode("utf-8", "replace")] if raw else []
    )


def _kept(argv: list[str]) -> list[str]:
    return [cut(a) for a in redact_argv(argv[:MAX_ARGS])]


def from_container(attrs: Mapping[str, Any], source: str) -> ServerArgs | None:
    """A container's launch arguments from its Docker API attributes (``Path`` and
    ``Args``: the entrypoint and command the engine ran) and its image."""
    path = attrs.get("Path")
    args = attrs.get("Args")
    argv = ([path] if isinstance(path, str) and path else []) + (
        [a for a in args if isinstance(a, str)] if isinstance(args, list) else []
    )
    if not argv:
        return None
    config = attrs.get("Config")
    image = config.get("Image") if isinstance(config, dict) else None
    return ServerArgs(
        source=source,
        argv=_kept(argv),
        image=cut(image) if isinstance(image, str) and image else None,
    )


def _published(attrs: Mapping[str, Any], port: int) -> bool:
    settings = attrs.get("NetworkSettings")
    ports = settings.get("Ports") if isinstance(settings, dict) else None
    if not isinstance(ports, dict):
        return False
    for bindings in ports.values():
        for b in bindings if isinstance(bindings, list) else []:
            if isinstance(b, dict) and str(b.get("HostPort", "")) == str(port):
                return True
    return False


def container_publishing(
    port: int, environ: Mapping[str, str] | None = None
) -> tuple[ServerArgs | None, str | None]:
    """The running container that publishes ``port`` on this host, through the Docker
    engine (under DOCKER_TIMEOUT_S): its launch arguments, or None and why not."""
    try:
        client = connect(DOCKER_TIMEOUT_S, environ)
    except EngineUnavailable as exc:
        return None, f"no container engine to ask ({exc})"
    try:
        for container in client.containers.list():
            attrs = container.attrs
            if isinstance(attrs, dict) and _published(attrs, port):
                name = str(attrs.get("Name", "")).lstrip("/") or container.short_id
                return from_container(attrs, f"container {cut(name, 128)}"), None
    except Exception as exc:
        return None, f"the container engine's list of containers: {one_line(exc)}"
    finally:
        client.close()
    return None, f"no running container publishes port {port}"


def on_this_host(
    port: int, proc: Path = Path("/proc"), environ: Mapping[str, str] | None = None
) -> tuple[ServerArgs | None, str | None]:
    """The launch arguments of the server listening on ``port`` of this host (a process,
    or a container publishing the port), or None and why they could not be read; (None,
    None) when the server is this process itself (a test's in-process server)."""
    sockets = listening(port, proc)
    pid, unreadable = holder({s.inode for s in sockets}, proc) if sockets else (None, 0)
    if pid == os.getpid():
        return None, None
    if pid is not None:
        try:
            argv = cmdline(pid, proc)
        except OSError as exc:
            return None, f"/proc/{pid}/cmdline: {exc.strerror or exc}"
        if argv and Path(argv[0]).name != _DOCKER_PROXY:
            return ServerArgs(source=f"process {pid} on this host", argv=_kept(argv)), None
    # docker-proxy, a listener this user cannot see into (docker-proxy is root's), or none
    # in this network namespace (a published port with the userland proxy off).
    args, why = container_publishing(port, environ)
    if args is not None:
        return args, None
    if pid is None and sockets:
        uids = ", ".join(sorted({str(s.uid) for s in sockets}))
        return None, (
            f"port {port} is held by a process of uid {uids} whose open files this user "
            f"cannot read ({unreadable} such process{'es' if unreadable != 1 else ''}; "
            "another user's, or /proc's hidepid), "
            f"and {why}"
        )
    if pid is None:
        return None, f"no process of this network namespace listens on port {port}, and {why}"
    return None, f"port {port} is a published container port's proxy ({_PROXY_NAME}), and {why}"
