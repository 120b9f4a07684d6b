"""Which files a directory scan reads (issue 40: ``scan-logs /tmp`` read 241,399 files of
virtual environments, ``.git`` and bytecode, and found the examples in the tool's own
catalogue).

A directory given to ``scan-logs`` or ``check --logs`` is walked for log files only:

- **names** (:func:`log_named`): ``*.log``, ``*.txt``, ``*.out``, ``*.err`` and the syslog
  files ``syslog``, ``messages``, ``kern.log``, ``dmesg``; each also rotated (logrotate's
  ``.1`` and ``-YYYYMMDD``, the kubelet's ``.YYYYMMDD-hhmmss``) and gzipped (``.gz``).
  Docker's json-file logs (``<id>-json.log``) are ``*.log``. ``*.json``, ``*.jsonl``,
  ``*.ndjson`` and ``*.export`` are read only when their first record is a journal export
  (``journalctl -o export``), a journal JSON entry (``-o json``) or a Docker json-file
  record: a configuration file is not a log.
- **directories skipped** (:func:`skipped_directory`): a VCS's (``.git``, ``.hg``,
  ``.svn``, ``.bzr``, ``_darcs``, ``.jj``, ``CVS``); a virtual environment (``pyvenv.cfg``
  at its root, PEP 405; ``conda-meta/``, conda's environments); a cache (``__pycache__``,
  ``node_modules``, ``site-packages``, ``dist-packages``, ``.cache``, tools' caches, and any
  directory tagged ``CACHEDIR.TAG``, the Cache Directory Tagging Specification); ``/proc``,
  ``/sys`` and ``/dev`` when ``/`` is walked; the tool's own data (its ``checks/`` hold
  every signature's example text).
- **files skipped when opened**: binary ones, a NUL byte in the first
  :data:`BINARY_SNIFF_BYTES` (after gunzip), as git and GNU grep tell binary from text.

What a file named on the command line or matched by a glob is, is the user's choice: only
the walk of a directory applies these rules. Everything skipped is counted by reason
(:class:`~blackwell_doctor.facts.document.LogFacts` ``skipped``), and said in the report.
"""

from __future__ import annotations

import os
from collections.abc import Iterable

from blackwell_doctor.facts import regexcache
from blackwell_doctor.facts.document import SkipReason

LOG_SUFFIXES = (".log", ".txt", ".out", ".err")
# Files /var/log holds under these names, with no suffix (rsyslog's Debian and Red Hat
# defaults: syslog, messages, kern.log; dmesg as written at boot).
LOG_NAMES = frozenset({"syslog", "messages", "dmesg"})
# Read only when their first record is a journal or Docker log record (sources._sniff).
STRUCTURED_SUFFIXES = (".json", ".jsonl", ".ndjson", ".export")
# A rotated file's suffix: logrotate's count (``.1``) and ``dateext`` (``-20250131``, with
# ``dateformat`` ``.2025-01-31``), the kubelet's container log rotation
# (``0.log.20250131-103000``, pkg/kubelet/logs/container_log_manager.go ``timestampFormat``).
_ROTATION = regexcache.lazy(r"[.-](?:\d{1,4}|\d{8}(?:-\d{6})?|\d{4}-\d{2}-\d{2})$")

VCS_DIRS = frozenset({".git", ".hg", ".svn", ".bzr", "_darcs", ".jj", "CVS"})
CACHE_DIRS = frozenset(
    {"__pycache__", "node_modules", "site-packages", "dist-packages", ".cache"}
    | {".mypy_cache", ".pytest_cache", ".ruff_cache", ".tox", ".nox", ".hypothesis"}
)
# https://bford.info/cachedir/: a directory holding a CACHEDIR.TAG that starts with this
# line is a cache (pip's, cargo's, pytest's, ruff's and mypy's caches write one).
CACHEDIR_SIGNATURE = b"Signature: 8a477f597d28d172789f06886806bc55"
# Pseudo filesystems under /: walking them reads the kernel's state, not logs.
PSEUDO_FILESYSTEMS = frozenset({"/proc", "/sys", "/dev"})
# git's buffer_is_binary (xdiff-interface.c: a NUL in the first FIRST_FEW_BYTES, 8000);
# GNU grep also calls a file with a NUL byte binary.
BINARY_SNIFF_BYTES = 8000


def log_named(name: str) -> bool:
    """Whether a walk reads the file ``name`` (a base name) as a log: a log suffix or a
    syslog name, rotated and gzipped or not."""
    stem = name[:-3] if name.endswith(".gz") else name
    stem = _ROTATION().sub("", stem)
    return stem.endswith(LOG_SUFFIXES) or stem in LOG_NAMES


def structured_named(name: str) -> bool:
    """Whether ``name`` may hold journal or Docker records (read only if it does)."""
    stem = name[:-3] if name.endswith(".gz") else name
    return stem.endswith(STRUCTURED_SUFFIXES)


def skipped_directory(path: str, name: str, own: frozenset[tuple[int, int]]) -> SkipReason | None:
    """Why the walk does not go into the directory ``path`` (base name ``name``); None: it
    does. ``own``: the (device, inode) of the tool's own data folders."""
    if name in VCS_DIRS:
        return "vcs"
    if name in CACHE_DIRS:
        return "cache"
    if path in PSEUDO_FILESYSTEMS:
        return "pseudo-filesystem"
    if os.path.isfile(os.path.join(path, "pyvenv.cfg")) or os.path.isdir(
        os.path.join(path, "conda-meta")
    ):
        return "virtualenv"
    if _cache_tagged(path):
        return "cache"
    if own:
        try:
            st = os.stat(path)
        except OSError:
            return None  # the walk reports it when it cannot list it
        if (st.st_dev, st.st_ino) in own:
            return "tool-data"
    return None


def _cache_tagged(path: str) -> bool:
    try:
        with open(os.path.join(path, "CACHEDIR.TAG"), "rb") as fh:
            return fh.read(len(CACHEDIR_SIGNATURE)) == CACHEDIR_SIGNATURE
    except OSError:
        return False


def binary_head(head: bytes) -> bool:
    """A NUL byte in the first :data:`BINARY_SNIFF_BYTES`: not text."""
    return b"\0" in head[:BINARY_SNIFF_BYTES]


def identities(paths: Iterable[str]) -> frozenset[tuple[int, int]]:
    """(device, inode) of each path that exists."""
    out: set[tuple[int, int]] = set()
    for p in paths:
        try:
            st = os.stat(p)
        except OSError:
            continue
        out.add((st.st_dev, st.st_ino))
    return frozenset(out)
