"""Every read of /proc, /sys, /dev, /etc and /usr/lib/wsl goes through one host root.

Like node_exporter's ``--path.rootfs``: in a container that mounts the host at /host, pass
``--host-root /host``; tests point it at a small tree built from real file contents.
A failed read is a reason token, never an exception: ``not-found:/proc/cmdline``,
``permission-denied:/sys/bus/pci/devices/0000:41:00.0/config``.
"""

from __future__ import annotations

import errno
import os
from dataclasses import dataclass
from pathlib import Path

from blackwell_doctor.facts import Unavailable


def _reason(exc: OSError, host_path: str) -> Unavailable:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        return Unavailable(f"not-found:{host_path}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Unavailable(f"permission-denied:{host_path}")
    name = errno.errorcode.get(exc.errno or 0, "EIO").lower()
    return Unavailable(f"os-error-{name}:{host_path}")


@dataclass(frozen=True)
class HostFS:
    root: Path = Path("/")

    def path(self, host_path: str) -> Path:
        """Map an absolute host path (``/proc/cmdline``) under the root."""
        if not host_path.startswith("/"):
            raise ValueError(f"host paths are absolute, got {host_path!r}")
        return self.root / host_path.lstrip("/")

    def read_bytes(self, host_path: str, limit: int = 1 << 20) -> bytes | Unavailable:
        try:
            with self.path(host_path).open("rb") as fh:
                return fh.read(limit)
        except OSError as exc:
            return _reason(exc, host_path)

    def read_text(self, host_path: str, limit: int = 1 << 20) -> str | Unavailable:
        data = self.read_bytes(host_path, limit)
        if isinstance(data, Unavailable):
            return data
        return data.decode("utf-8", errors="replace")

    def exists(self, host_path: str) -> bool:
        return os.path.lexists(self.path(host_path))

    def listdir(self, host_path: str) -> list[str] | Unavailable:
        try:
            return sorted(os.listdir(self.path(host_path)))
        except OSError as exc:
            return _reason(exc, host_path)

    def realpath(self, host_path: str) -> str | Unavailable:
        """Resolve symlinks inside the root (sysfs links are relative; absolute ones are
        re-rooted), returning a host path."""
        parts = [p for p in host_path.split("/") if p]
        resolved: list[str] = []
        hops = 0
        while parts:
            part = parts.pop(0)
            if part == ".":
                continue
            if part == "..":
                if resolved:
                    resolved.pop()
                continue
            candidate = "/" + "/".join([*resolved, part])
            try:
                target = os.readlink(self.path(candidate))
            except OSError as exc:
                if exc.errno == errno.EINVAL:  # not a link
                    resolved.append(part)
                    continue
                return _reason(exc, candidate)
            hops += 1
            if hops > 40:
                return Unavailable(f"symlink-loop:{host_path}")
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
        return "/" + "/".join(resolved)
