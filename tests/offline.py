"""A package index that cannot be reached, for the offline-install tests (issue 37).

Every installer run by these tests gets :func:`offline_env`: no pip configuration file
(this machine's pip.conf names local indexes and find-links), no PIP_/UV_/PIPX_ variable
of the caller's, and an index URL on a closed port of 127.0.0.1, so a download that the
install would need fails at once (``Connection refused``) instead of quietly succeeding.
"""

from __future__ import annotations

import os
import socket
from pathlib import Path


def closed_port() -> int:
    """A port of 127.0.0.1 that nothing listens on (bound, then closed)."""
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def offline_env(home: Path) -> dict[str, str]:
    """The environment of an installer with the index unreachable; its caches and tool
    folders under ``home`` (fresh: nothing in them was downloaded before)."""
    env = {
        k: v
        for k, v in os.environ.items()
        if not k.startswith(("PIP_", "UV_", "PIPX_")) and k.lower() not in PROXIES
    }
    index = f"http://127.0.0.1:{closed_port()}/simple/"
    env.update(
        {
            "PIP_CONFIG_FILE": os.devnull,
            "PIP_INDEX_URL": index,
            "PIP_DISABLE_PIP_VERSION_CHECK": "1",
            "PIP_NO_CACHE_DIR": "1",
            "PIP_DEFAULT_TIMEOUT": "5",
            "PIP_RETRIES": "0",
            "UV_DEFAULT_INDEX": index,
            "UV_NO_CONFIG": "1",
            "UV_CACHE_DIR": str(home / "uv-cache"),
            "UV_PYTHON_DOWNLOADS": "never",
            "XDG_CACHE_HOME": str(home / "cache"),
            "XDG_DATA_HOME": str(home / "data"),
            "XDG_CONFIG_HOME": str(home / "config"),
            "HOME": str(home),
        }
    )
    return env


PROXIES = frozenset({"http_proxy", "https_proxy", "all_proxy", "no_proxy"})
