r"""``audit --image``: the Python version an image's environment states, taken only when it
is a plain version (issue 32: "3.12\n" passed a ``^\d+\.\d+$`` check, "$" matching before a
final newline, and the site directories were looked for under "python3.12\n")."""

from __future__ import annotations

from typing import Any, cast

from blackwell_doctor.collect.stack import image


class _Files:
    """The few calls ``site_dirs`` makes of the never-started container, over a set of
    directories."""

    def __init__(self, dirs: set[str]) -> None:
        self.dirs = dirs

    def read_small(self, path: str, limit: int) -> bytes | None:
        return None

    def stat(self, path: str) -> dict[str, Any] | None:
        return None

    def is_dir(self, path: str) -> bool:
        return path in self.dirs


def test_a_stated_version_with_a_trailing_newline_is_not_taken() -> None:
    files = _Files({"/usr/lib/python3.12", "/usr/local/lib/python3.12/dist-packages"})
    box = cast(image._Container, files)
    env = {"PYTHON_VERSION": "3.12\n"}
    found, version = image.site_dirs(box, "/usr/bin/python3", env, "root")
    assert version == "3.12"  # from the image's own lib/python3.N
    assert found == ["/usr/local/lib/python3.12/dist-packages"]
    found, version = image.site_dirs(box, "/usr/bin/python3", {"PYTHON_VERSION": "3.12"}, "")
    assert (found, version) == (["/usr/local/lib/python3.12/dist-packages"], "3.12")
