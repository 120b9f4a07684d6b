"""Every read of /proc, /sys, /dev, /etc and /usr/lib/wsl goes through one host root.

Like node_exporter's ``--path.rootfs``: in a container that mounts the host at /host, pass
``--host-root /host``; tests point it at a small tree built from real file contents.
A failed read is a reason token, never an exception: ``not-found:/proc/cmdline``,
``permission-denied:/sys/bus/pci/devices/0000:41:00.0/config``. A path whose top-level
directory is absent or empty under the root is ``not-mounted:/proc/cmdline``: that host
filesystem was not mounted there (a container run without ``-v /proc:/host/proc``), so the
path's absence says nothing about the host, unlike ``not-found`` (no module loaded, no AER
counters) on a filesystem that is there (issue 37).

A host root is untrusted input (a bug report's tree, a container's bind mount): a read never
blocks on a FIFO or a device that sits where a file should be (``not-a-regular-file:``), and
under a root other than ``/`` it never follows an absolute symlink out of the root (links
are resolved by :meth:`HostFS.realpath`, which re-roots them).
"""

from __future__ import annotations

import errno
import os
import stat
from dataclasses import dataclass
from pathlib import Path

from blackwell_doctor.collect.regularfile import read_upto
from blackwell_doctor.facts.document import Unavailable


def _reason(exc: OSError, host_path: str, root: Path) -> Unavailable:
    if exc.errno in (errno.ENOENT, errno.ENOTDIR):
        kind = "not-mounted" if _unmounted(root, host_path) else "not-found"
        return Unavailable(f"{kind}:{host_path}")
    if exc.errno in (errno.EACCES, errno.EPERM):
        return Unavailable(f"permission-denied:{host_path}")
    name = errno.errorcode.get(exc.errno or 0, "EIO").lower()
    return Unavailable(f"os-error-{name}:{host_path}")


def _unmounted(root: Path, host_path: str) -> bool:
    """``host_path``'s top-level directory (``/proc``, ``/sys``, ``/etc``) is absent or an
    empty directory under ``root``: no filesystem is mounted there. procfs and sysfs are
    never empty, and a host's ``/etc`` never is; a bind mount that was left out leaves no
    directory (docker run -v, a Kubernetes hostPath volume) or an empty mount point."""
    top = host_path.strip("/").partition("/")[0]
    if not top:
        return False
    where = root / top
    try:
        # lstat: a top-level symlink (usr-merged /lib) is resolved by realpath, not here.
        if not stat.S_ISDIR(os.lstat(where).st_mode):
            return False
        with os.scandir(where) as entries:
            return next(entries, None) is None
    except OSError as exc:
        return exc.errno in (errno.ENOENT, errno.ENOTDIR)


_SLASH = Path("/")


@dataclass(frozen=True)
class HostFS:
    root: Path = Path("/")

    def path(self, host_path: str) -> Path:
        """Map an absolute host path (``/proc/cmdline``) under the root."""
        if not host_path.startswith("/"):
            raise ValueError(f"host paths are absolute, got {host_path!r}")
        return self.root / host_path.lstrip("/")

    def read_bytes(self, host_path: str, limit: int = 1 << 20) -> bytes | Unavailable:
        """At most ``limit`` bytes of a regular file. procfs and sysfs files are regular
        files (S_ISREG) too; FIFOs, sockets, devices and directories are refused."""
        target = self._target(host_path)
        if isinstance(target, Unavailable):
            return target
        # O_NONBLOCK: opening a FIFO for reading would otherwise wait for a writer forever
        # (and a device's open may block); O_NOCTTY: a terminal never becomes ours.
        flags = os.O_RDONLY | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC
        if self.root != _SLASH:
            # Every component was resolved inside the root: a link appearing now is refused.
            flags |= os.O_NOFOLLOW
        try:
            # Look before opening: opening a device can have effects (a tape rewinds, a
            # modem hangs up) and a socket cannot be opened at all (ENXIO).
            if not stat.S_ISREG(os.stat(target).st_mode):
                return Unavailable(f"not-a-regular-file:{host_path}")
            fd = os.open(target, flags)
        except OSError as exc:
            return _reason(exc, host_path, self.root)
        try:
            # Again on what was opened: the path may have been replaced in between.
            if not stat.S_ISREG(os.fstat(fd).st_mode):
                return Unavailable(f"not-a-regular-file:{host_path}")
            return read_upto(fd, limit)
        except OSError as exc:
            return _reason(exc, host_path, self.root)
        finally:
            os.close(fd)

    def _target(self, host_path: str, *, follow_last: bool = True) -> Path | Unavailable:
        """The path to open for ``host_path``. Under ``/`` the path itself (the kernel
        resolves links, fast). Under another root, links are resolved here, inside the
        root: an absolute link names a host path (``/usr/lib/os-release``), which the
        kernel would look up outside the root."""
        if self.root == _SLASH:
            return self.path(host_path)
        if follow_last:
            resolved = self._resolve(host_path)
            return resolved if isinstance(resolved, Unavailable) else self.path(resolved)
        head, _, name = host_path.rstrip("/").rpartition("/")
        parent = self._resolve(head or "/")
        if isinstance(parent, Unavailable):
            return parent
        return self.path(parent) / name

    def _resolve(self, host_path: str) -> str | Unavailable:
        """:meth:`realpath`, with a failure reason that names ``host_path`` itself rather
        than the component that failed (``not-found:/proc/cmdline``, not ``/proc``)."""
        resolved = self.realpath(host_path)
        if isinstance(resolved, str):
            return resolved
        kind = resolved.reason.partition(":")[0]
        return Unavailable(f"{kind}:{host_path}")

    def read_text(self, host_path: str, limit: int = 1 << 20) -> str | Unavailable:
        data = self.read_bytes(host_path, limit)
        if isinstance(data, Unavailable):
            return data
        return data.decode("utf-8", errors="replace")

    def exists(self, host_path: str) -> bool:
        """Whether the path exists (a dangling link counts: the link itself exists)."""
        target = self._target(host_path, follow_last=False)
        return not isinstance(target, Unavailable) and os.path.lexists(target)

    def listdir(self, host_path: str) -> list[str] | Unavailable:
        target = self._target(host_path)
        if isinstance(target, Unavailable):
            return target
        try:
            return sorted(os.listdir(target))
        except OSError as exc:
            return _reason(exc, host_path, self.root)

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
                return _reason(exc, candidate, self.root)
            hops += 1
            if hops > 40:
                return Unavailable(f"symlink-loop:{host_path}")
            if target.startswith("/"):
                resolved = []
            parts = [p for p in target.split("/") if p] + parts
        return "/" + "/".join(resolved)
