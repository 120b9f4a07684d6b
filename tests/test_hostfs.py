"""HostFS against hostile host roots: FIFOs, sockets, devices and directories where files
should be, and symlinks that lead out of the root."""

from __future__ import annotations

import os
import socket
import threading
from dataclasses import dataclass
from pathlib import Path

import pytest

from blackwell_doctor.collect.hostfs import HostFS
from blackwell_doctor.collect.platform import collect_platform
from blackwell_doctor.facts.document import PlatformFacts, Unavailable
from tests.hosttree import HostTree

# A read that blocks is a hung CI job: each one gets this long before the test fails.
DEADLINE_S = 5.0


def _read_with_deadline(fs: HostFS, host_path: str, fifo: Path) -> bytes | Unavailable:
    """Read in a daemon thread; on a hang, unblock it (open the FIFO's write end and close
    it: the reader sees EOF) and fail."""
    result: list[bytes | Unavailable] = []
    thread = threading.Thread(target=lambda: result.append(fs.read_bytes(host_path)), daemon=True)
    thread.start()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        os.close(os.open(fifo, os.O_WRONLY | os.O_NONBLOCK))
        thread.join(DEADLINE_S)
        pytest.fail(f"reading {host_path} blocked on a FIFO")
    return result[0]


def test_fifo_under_a_host_root_is_refused_without_blocking(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.mkdir("/proc")
    fifo = tmp_path / "proc/cmdline"
    os.mkfifo(fifo)
    assert _read_with_deadline(tree.fs, "/proc/cmdline", fifo) == Unavailable(
        "not-a-regular-file:/proc/cmdline"
    )


def test_fifo_under_slash_is_refused_without_blocking(tmp_path: Path) -> None:
    # Root "/" takes the fast path (no symlink walk): it must not block either.
    fifo = tmp_path / "cmdline"
    os.mkfifo(fifo)
    assert _read_with_deadline(HostFS(), str(fifo), fifo) == Unavailable(
        f"not-a-regular-file:{fifo}"
    )


def test_whole_platform_collection_survives_a_fifo(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/version", "Linux version 6.8.0-45-generic (buildd@lcy02) #45\n")
    os.mkfifo(tmp_path / "proc/cmdline")
    result: list[PlatformFacts] = []
    thread = threading.Thread(
        target=lambda: result.append(collect_platform(tree.fs, {})), daemon=True
    )
    thread.start()
    thread.join(DEADLINE_S)
    if thread.is_alive():
        os.close(os.open(tmp_path / "proc/cmdline", os.O_WRONLY | os.O_NONBLOCK))
        pytest.fail("collect_platform blocked on a FIFO at /proc/cmdline")
    facts = result[0]
    assert facts.kernel_cmdline == Unavailable("not-a-regular-file:/proc/cmdline")


def test_socket_directory_and_device_are_not_regular_files(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.mkdir("/run")
    tree.mkdir("/proc/version")
    with socket.socket(socket.AF_UNIX) as sock:
        sock.bind(str(tmp_path / "run/sock"))
        assert tree.fs.read_bytes("/run/sock") == Unavailable("not-a-regular-file:/run/sock")
    assert tree.fs.read_bytes("/proc/version") == Unavailable("not-a-regular-file:/proc/version")
    # A character device (read naively, /dev/zero would fill the limit with zeros).
    assert HostFS().read_bytes("/dev/zero") == Unavailable("not-a-regular-file:/dev/zero")


def test_procfs_and_sysfs_files_are_regular_and_read(tmp_path: Path) -> None:
    # The real /proc: a procfs file is S_ISREG with st_size 0, and reads in full.
    text = HostFS().read_text("/proc/self/status")
    assert isinstance(text, str)
    assert text.startswith("Name:")


def test_reads_stop_at_the_limit_and_read_past_one_chunk(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    big = b"x" * (3 << 20)
    tree.write("/proc/cpuinfo", big)
    assert tree.fs.read_bytes("/proc/cpuinfo", limit=1 << 24) == big
    assert tree.fs.read_bytes("/proc/cpuinfo", limit=10) == b"x" * 10


# --------------------------------------------------------------------------- symlinks


def _outside_and_inside(tmp_path: Path) -> tuple[HostTree, Path]:
    """A file outside the host root, and the same absolute path re-rooted inside it with
    other content: a read that leaves the root returns the outside one."""
    outside = tmp_path / "outside/cmdline"
    outside.parent.mkdir()
    outside.write_text("OUTSIDE\n")
    tree = HostTree(tmp_path / "host")
    tree.write(str(outside), "inside\n")
    return tree, outside


def test_absolute_symlink_is_read_inside_the_root(tmp_path: Path) -> None:
    tree, outside = _outside_and_inside(tmp_path)
    tree.link("/proc/cmdline", str(outside), absolute=True)
    assert tree.fs.read_text("/proc/cmdline") == "inside\n"


def test_absolute_symlink_to_a_file_only_outside_is_not_found(tmp_path: Path) -> None:
    tree, outside = _outside_and_inside(tmp_path)
    (tree.root / str(outside).lstrip("/")).unlink()
    tree.link("/proc/cmdline", str(outside), absolute=True)
    assert tree.fs.read_text("/proc/cmdline") == Unavailable("not-found:/proc/cmdline")


def test_absolute_symlink_in_a_directory_component_is_re_rooted(tmp_path: Path) -> None:
    tree, outside = _outside_and_inside(tmp_path)
    # /proc itself is an absolute link to the outside directory.
    tree.link("/proc", str(outside.parent), absolute=True)
    assert tree.fs.read_text("/proc/cmdline") == "inside\n"
    assert tree.fs.listdir("/proc") == ["cmdline"]
    assert tree.fs.exists("/proc/cmdline")


def test_relative_symlink_climbing_above_the_root_stays_inside(tmp_path: Path) -> None:
    tree, outside = _outside_and_inside(tmp_path)
    # Enough ".." to reach "/" from anywhere, then down to the outside file.
    tree.link("/proc/cmdline", "../" * 40 + str(outside).lstrip("/"), absolute=True)
    assert tree.fs.read_text("/proc/cmdline") == "inside\n"


def test_symlink_loop_is_a_reason(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.mkdir("/proc")
    os.symlink("cmdline", tmp_path / "proc/cmdline")
    assert tree.fs.read_text("/proc/cmdline") == Unavailable("symlink-loop:/proc/cmdline")


def test_missing_file_names_the_path_asked_for(tmp_path: Path) -> None:
    tree = HostTree(tmp_path)
    tree.write("/proc/version", "Linux version 6.8.0\n")
    assert tree.fs.read_text("/proc/cmdline") == Unavailable("not-found:/proc/cmdline")
    assert tree.fs.read_text("/proc/driver/nvidia/version") == Unavailable(
        "not-found:/proc/driver/nvidia/version"
    )


def test_a_top_level_directory_absent_under_the_root_is_not_mounted(tmp_path: Path) -> None:
    # A container run with -v /sys:/host/sys only: /host/proc does not exist. Resolution
    # fails at /proc; the reason still names the file, and says the filesystem is not there
    # (not "no such file on the host": issue 37).
    tree = HostTree(tmp_path)
    tree.mkdir("/sys/bus/pci/devices")
    fs = tree.fs
    assert fs.read_text("/proc/cmdline") == Unavailable("not-mounted:/proc/cmdline")
    assert fs.listdir("/proc/driver") == Unavailable("not-mounted:/proc/driver")
    assert fs.realpath("/proc/self") == Unavailable("not-mounted:/proc")
    assert fs.read_text("/sys/module/nvidia/taint") == Unavailable(
        "not-found:/sys/module/nvidia/taint"
    )


def test_an_empty_mount_point_is_not_mounted(tmp_path: Path) -> None:
    # The directory a bind mount would cover, with nothing mounted on it (procfs and sysfs
    # are never empty).
    tree = HostTree(tmp_path)
    tree.mkdir("/proc")
    assert tree.fs.read_text("/proc/version") == Unavailable("not-mounted:/proc/version")
    tree.write("/proc/version", "Linux version 6.8.0\n")
    assert tree.fs.read_text("/proc/cmdline") == Unavailable("not-found:/proc/cmdline")


def test_a_top_level_symlink_is_resolved_not_taken_for_a_missing_mount(tmp_path: Path) -> None:
    # usr-merged hosts: /lib -> usr/lib. A file missing behind it is not found.
    tree = HostTree(tmp_path)
    tree.mkdir("/usr/lib/modules")
    os.symlink("usr/lib", tmp_path / "lib")
    assert tree.fs.read_text("/lib/modules/x") == Unavailable("not-found:/lib/modules/x")


@dataclass(frozen=True)
class _CountingFS(HostFS):
    calls: list[str] | None = None

    def realpath(self, host_path: str) -> str | Unavailable:
        assert self.calls is not None
        self.calls.append(host_path)
        return super().realpath(host_path)


def test_root_slash_reads_without_resolving_links(tmp_path: Path) -> None:
    file = tmp_path / "f"
    file.write_text("x")
    calls: list[str] = []
    assert _CountingFS(Path("/"), calls).read_text(str(file)) == "x"
    assert calls == []
    assert _CountingFS(tmp_path, calls).read_text("/f") == "x"
    assert calls == ["/f"]
