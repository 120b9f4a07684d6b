"""Validation of everything that ends up in a container definition or a command to paste.

Image references follow the grammar of distribution/reference (reference.go) that the Docker
engine parses; container and volume names the engine's own pattern
(``[a-zA-Z0-9][a-zA-Z0-9_.-]+``, daemon/names). A value that does not match is refused with
a one-line reason, never quoted into something that would parse differently.
"""

from __future__ import annotations

import ipaddress
import posixpath
import re
import unicodedata
from pathlib import PurePosixPath


class ValidationError(ValueError):
    """A value that must not reach Docker or a command line."""


_DOMAIN_COMPONENT = r"(?:[a-zA-Z0-9]|[a-zA-Z0-9][a-zA-Z0-9-]*[a-zA-Z0-9])"
_DOMAIN = rf"{_DOMAIN_COMPONENT}(?:\.{_DOMAIN_COMPONENT})*(?::[0-9]+)?"
_PATH_COMPONENT = r"[a-z0-9]+(?:(?:[._]|__|-+)[a-z0-9]+)*"
_NAME = rf"(?:{_DOMAIN}/)?{_PATH_COMPONENT}(?:/{_PATH_COMPONENT})*"
_TAG = r"[\w][\w.-]{0,127}"
_DIGEST = r"[A-Za-z][A-Za-z0-9]*(?:[-_+.][A-Za-z][A-Za-z0-9]*)*:[0-9a-fA-F]{32,}"
_REFERENCE = re.compile(rf"^(?P<name>{_NAME})(?::(?P<tag>{_TAG}))?(?:@(?P<digest>{_DIGEST}))?$")
_SHA256_DIGEST = re.compile(r"^sha256:[0-9a-f]{64}$")
_NAME_MAX = 255  # reference.go NameTotalLengthMax

# daemon/names/names.go RestrictedNameChars; 2 characters at least.
_CONTAINER_NAME = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]+$")
_CONTAINER_NAME_MAX = 100  # leaves room for "-previous" and friends
_ENV_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_SHM_SIZE = re.compile(r"^[1-9][0-9]{0,12}[bkmgBKMG]?$")


def image_reference(ref: str) -> str:
    """``ref`` when it is a valid image reference (name[:tag][@digest])."""
    m = _REFERENCE.fullmatch(ref)
    if m is None:
        raise ValidationError(f"not a valid image reference: {ref!r}")
    first, sep, _ = m["name"].partition("/")
    # As the engine normalises it: the first component is a registry only when it looks
    # like one (a dot, a port or "localhost"); otherwise it is a lower-case path component.
    domain_like = "." in first or ":" in first or first == "localhost"
    if sep and not domain_like and not re.fullmatch(_PATH_COMPONENT, first):
        raise ValidationError(
            f"not a valid image reference (repository must be lower-case): {ref!r}"
        )
    if len(m["name"]) > _NAME_MAX:
        raise ValidationError(f"image name longer than {_NAME_MAX} characters: {ref!r}")
    return ref


def _whole(pattern: re.Pattern[str], value: str, words: str) -> str:
    """``value`` when ``pattern`` matches all of it; else ValidationError(``words``)."""
    if not pattern.fullmatch(value):
        raise ValidationError(words)
    return value


def digest(value: str) -> str:
    """An image digest as the catalogue pins it: ``sha256:`` and 64 lower-case hex digits."""
    return _whole(_SHA256_DIGEST, value, f"not a sha256 digest (sha256:<64 hex>): {value!r}")


def container_name(name: str) -> str:
    if len(name) > _CONTAINER_NAME_MAX or not _CONTAINER_NAME.fullmatch(name):
        raise ValidationError(
            f"not a valid container name: {name!r} (letters, digits, '_', '.', '-'; "
            f"starting with a letter or digit; 2 to {_CONTAINER_NAME_MAX} characters)"
        )
    return name


def volume_name(name: str) -> str:
    if not _CONTAINER_NAME.fullmatch(name) or len(name) > _CONTAINER_NAME_MAX:
        raise ValidationError(f"not a valid volume name: {name!r}")
    return name


def _utf8(kind: str, text: str) -> None:
    # Undecodable bytes from argv or the file system arrive as lone surrogates; Docker's
    # API, compose files and reports are UTF-8, so they cannot be passed on as they are.
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        shown = text.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        raise ValidationError(f"{kind} is not valid UTF-8: {shown!r}") from None


def env_name(name: str) -> str:
    _utf8("an environment variable name", name)
    return _whole(_ENV_NAME, name, f"not a valid environment variable name: {name!r}")


def env_value(name: str, value: str) -> str:
    """A value that prints as itself: no control character (NUL, CR, LF, ESC, DEL, C1 ...)
    nor line/paragraph separator, which a terminal, a shell script or a markdown ticket
    would act on instead of showing (an ESC sequence can rewrite what the reader sees)."""
    _utf8(f"environment variable {name}", value)
    for c in value:
        if unicodedata.category(c) in ("Cc", "Zl", "Zp"):
            raise ValidationError(
                f"environment variable {name} has a control character ({c!a}) in its value"
            )
    return value


def _mount_path(kind: str, path: str) -> str:
    _utf8(kind, path)
    # "," and ":" would change the meaning of a --mount/-v specification; "$" is compose
    # interpolation; control characters have no business in a path to paste.
    if not path.startswith("/"):
        raise ValidationError(f"{kind} must be an absolute path: {path!r}")
    if any(c in path for c in ",:$\"'\\") or any(ord(c) < 0x20 or ord(c) == 0x7F for c in path):
        raise ValidationError(
            f"{kind} contains a character that Docker mount syntax or compose would "
            f"misread (, : $ quotes backslash or a control character): {path!r}"
        )
    if ".." in PurePosixPath(path).parts:
        raise ValidationError(f"{kind} must not contain '..': {path!r}")
    return path


def host_path(path: str) -> str:
    return _mount_path("the model directory", path)


def host_mount(path: str) -> str:
    """A host directory a runtime mounts read-only at the same path (catalogue
    ``host_mounts``): absolute, and neither / nor /model (it would hide the image or the
    model)."""
    _mount_path("a host mount", path)
    normal = "/" + posixpath.normpath(path).lstrip("/")
    if normal in ("/", "/model", "/proc", "/sys", "/dev") or normal.startswith("/model/"):
        raise ValidationError(f"{path!r} cannot be mounted over the container's own {normal}")
    return normal


# Directories of the image a volume must not cover: mounted over, they hide the runtime's
# own files (a volume at / replaces the whole image), or they are the kernel's (/proc).
# /model is where the model directory is mounted.
_SYSTEM_DIRS = frozenset(
    (
        *("/", "/bin", "/boot", "/dev", "/etc", "/home", "/lib", "/lib32", "/lib64", "/libx32"),
        *("/model", "/opt", "/proc", "/root", "/run", "/sbin", "/srv", "/sys", "/tmp"),  # noqa: S108
        *("/usr", "/usr/bin", "/usr/lib", "/usr/local", "/usr/local/bin", "/usr/local/lib"),
        *("/usr/sbin", "/usr/share", "/var", "/var/lib", "/var/run"),
    )
)


def container_path(path: str) -> str:
    _mount_path("a path inside the container", path)
    normal = posixpath.normpath(path)
    normal = "/" + normal.lstrip("/")  # POSIX keeps a leading "//"; Docker does not
    if normal in _SYSTEM_DIRS or normal.startswith(("/proc/", "/sys/")):
        raise ValidationError(
            f"{path!r} is a system directory of the image: a volume there would hide it "
            "(use a directory of its own, e.g. /root/.cache)"
        )
    if "/model".startswith(normal + "/") or normal.startswith("/model/"):
        raise ValidationError(f"{path!r} overlaps /model, where the model is mounted")
    return path


def shm_size(value: str) -> str:
    if not _SHM_SIZE.fullmatch(value):
        # Raised here, not through _whole: an error message ("docker") is words of code only
        # where it is raised (tests/rules/test_words_in_data.py).
        raise ValidationError(f"not a size docker understands (e.g. 16g, 512m): {value!r}")
    return value


def bind_address(value: str) -> str:
    """An IP address to publish the port on (127.0.0.1 by default; 0.0.0.0 is everywhere)."""
    try:
        return str(ipaddress.ip_address(value))
    except ValueError:
        raise ValidationError(f"--bind must be an IP address, got {value!r}") from None


def port(value: int) -> int:
    if not 1 <= value <= 65535:
        raise ValidationError(f"port {value} is outside 1..65535")
    return value
