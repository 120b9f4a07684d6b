"""checks/host_mounts.toml: the host mount a containerised run needs for each host path the
checks read, in `docker run` and DaemonSet terms (issue 37)."""

# Annotations are evaluated at class creation (no `from __future__ import annotations`):
# msgspec would otherwise eval every struct's strings when the catalogue is converted.
import functools

import msgspec

from blackwell_doctor.ruledata.checkdata import CatalogueError, load_shipped


class HostMount(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    """One [[mount]]: the host path (or log source label) it covers, the checks that read
    it and why, and the mount to add."""

    prefix: str
    reads: str
    under_root: bool
    docker: str
    kubernetes: str

    def covers(self, target: str) -> bool:
        """``target`` is this prefix, or lies under it on a path boundary."""
        if target == self.prefix or self.prefix.endswith(":"):
            return target.startswith(self.prefix)
        return target.startswith(self.prefix.rstrip("/") + "/") or (
            # /dev/nvidia covers /dev/nvidia0, /dev/nvidiactl, /dev/nvidia-uvm.
            self.prefix.startswith("/dev/") and target.startswith(self.prefix)
        )


class MountWords(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    summary: str
    host_root: str
    separator: str


class HostMounts(msgspec.Struct, frozen=True, kw_only=True, forbid_unknown_fields=True):
    default_root: str
    words: MountWords
    mount: list[HostMount]

    def find(self, target: str) -> HostMount | None:
        """The entry of the longest prefix that covers ``target``."""
        found = [m for m in self.mount if m.covers(target)]
        return max(found, key=lambda m: len(m.prefix)) if found else None


@functools.cache
def load_host_mounts() -> HostMounts:
    mounts = load_shipped("host_mounts.toml", HostMounts)
    prefixes = [m.prefix for m in mounts.mount]
    duplicate = sorted({p for p in prefixes if prefixes.count(p) > 1})
    if duplicate:
        raise CatalogueError(f"checks/host_mounts.toml: duplicate prefix {duplicate}")
    return mounts
