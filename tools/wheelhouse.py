"""A wheelhouse for hosts with no route to a package index (docs/install.md, "Offline").

On a machine that reaches the index, for the Python and platform of the target hosts:

    python3 tools/wheelhouse.py build --python 3.11 --platform manylinux_2_28_x86_64 -o wheelhouse

builds this checkout's wheel (or takes the wheels / requirements named instead of ``.``) and
downloads every dependency as a wheel for that target (``pip download --only-binary=:all:``),
plus the build backend's own requirements (so the container image builds offline too:
Dockerfile) and pip's wheel (so the install needs no pip on the target). It writes
``TARGET.json`` and a copy of this script into the wheelhouse. Then, on the target:

    python3 wheelhouse/wheelhouse.py install /opt/blackwell-doctor

checks every wheel's tags against the Python that runs it (``packaging.tags``, imported
from the wheelhouse's own packaging wheel: a pure-Python wheel is importable as a zip), and
refuses a wheelhouse built for another Python or platform in one line, exit 2, before
anything is installed; otherwise it makes a virtual environment there and installs with
``pip install --no-index --find-links`` (pip run from its wheel: python pip.whl/pip).

pip's target options select wheels by their tags and Requires-Python; environment markers
(``; sys_platform == 'linux'``) are still judged on the Python running pip
(pip/_internal/req/req_install.py, ``match_markers``, pip 23.2): build on the target's
operating system. Extra arguments after ``--`` go to pip as they are (``--no-index
--find-links DIR``: build the wheelhouse from another one, as CI does from its cache).

This file runs on the target's Python before anything is installed, so the install path
uses no syntax or module newer than Python 3.8: an old Python is told it is too old.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path
from typing import Any

TARGET_FILE = "TARGET.json"
SCRIPT_NAME = "wheelhouse.py"
PROJECT = "blackwell-doctor"
USAGE = 2

# PEP 600 manylinux_<glibc major>_<glibc minor>_<arch>; the legacy aliases (PEP 513, 571,
# 599) are the same glibc floors: manylinux1 = 2.5, manylinux2010 = 2.12, manylinux2014 = 2.17.
MANYLINUX = re.compile(r"^manylinux_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>[a-z0-9_]+)$")
MUSLLINUX = re.compile(r"^musllinux_(?P<major>\d+)_(?P<minor>\d+)_(?P<arch>[a-z0-9_]+)$")
LEGACY_MANYLINUX = {(2, 5): "manylinux1", (2, 12): "manylinux2010", (2, 17): "manylinux2014"}
PYTHON_VERSION = re.compile(r"^(?P<major>\d)\.(?P<minor>\d{1,2})$")


class Refused(Exception):
    """Bad input or a wheelhouse that does not fit: one line, exit 2."""


# --------------------------------------------------------------------------- build


def platform_ladder(platform: str) -> list[str]:
    """Every platform tag a host of ``platform`` accepts, newest glibc first: pip download
    takes a wheel only when one of its tags is given, and manylinux_2_28 hosts also run
    the manylinux2014 and manylinux_2_17 wheels (most of the index)."""
    m = MANYLINUX.match(platform)
    if m is None:
        if MUSLLINUX.match(platform) or re.match(r"^(macosx_\d+_\d+_|win_|linux_)", platform):
            return [platform]
        raise Refused(
            f"--platform {platform!r} is not a platform tag (manylinux_2_28_x86_64, "
            "manylinux_2_17_aarch64, musllinux_1_2_x86_64...)"
        )
    major, minor, arch = int(m["major"]), int(m["minor"]), m["arch"]
    if major != 2:
        raise Refused(f"--platform {platform!r}: manylinux tags name glibc 2.x")
    # The same ladder as packaging's own for a running host (packaging/_manylinux.py,
    # platform_tags, 26.4): down to glibc 2.5 on x86, 2.17 elsewhere, each legacy alias
    # right after its glibc floor (tests/test_offline_install.py compares the two).
    oldest = 5 if arch in ("x86_64", "i686") else 17
    tags = []
    for floor in range(minor, oldest - 1, -1):
        tags.append(f"manylinux_2_{floor}_{arch}")
        legacy = LEGACY_MANYLINUX.get((2, floor))
        if legacy:
            tags.append(f"{legacy}_{arch}")
    return tags


def this_platform() -> str:
    """The running host's newest manylinux tag (the default target: this very host)."""
    libc, version = _glibc()
    if libc != "glibc":
        raise Refused("this Python is not on glibc: give --platform")
    major, minor = version
    return f"manylinux_{major}_{minor}_{_arch()}"


def _glibc() -> tuple[str, tuple[int, int]]:
    import platform as _platform

    libc, version = _platform.libc_ver()
    m = re.match(r"^(\d+)\.(\d+)", version)
    if libc != "glibc" or m is None:
        return libc or "unknown", (0, 0)
    return "glibc", (int(m[1]), int(m[2]))


def _arch() -> str:
    import platform as _platform

    machine = _platform.machine().lower()
    return {"amd64": "x86_64", "arm64": "aarch64"}.get(machine, machine)


def build_requirements(source: Path) -> list[str]:
    """The ``[build-system] requires`` of a project directory."""
    import tomllib

    with (source / "pyproject.toml").open("rb") as fh:
        requires = tomllib.load(fh).get("build-system", {}).get("requires", [])
    return [str(r) for r in requires]


def pip(args: list[str], *, python: str = sys.executable) -> None:
    cmd = [python, "-m", "pip", "--disable-pip-version-check", *args]
    proc = subprocess.run(cmd, check=False)
    if proc.returncode != 0:
        raise Refused(f"pip failed (exit {proc.returncode}): {' '.join(cmd)}")


def build(args: argparse.Namespace) -> int:
    m = PYTHON_VERSION.match(args.python)
    if m is None:
        raise Refused(f"--python {args.python!r} is not a Python version like 3.11")
    if (int(m["major"]), int(m["minor"])) < (3, 11):
        raise Refused(f"--python {args.python}: {PROJECT} needs Python 3.11 or newer")
    platform = args.platform or this_platform()
    ladder = platform_ladder(platform)
    out = Path(args.output)
    if out.exists() and any(out.iterdir()):
        raise Refused(f"-o {out}: not empty (a wheelhouse is built into an empty folder)")
    out.mkdir(parents=True, exist_ok=True)
    extra = list(args.pip_args)

    wheels: list[str] = []
    build_reqs: list[str] = []
    for source in args.sources:
        path = Path(source)
        if path.is_dir():
            # This checkout (or another project): its wheel, as `pip install DIR` builds it.
            before = set(out.glob("*.whl"))
            pip(["wheel", "--no-deps", "-w", str(out), *extra, str(path)])
            wheels += [str(w) for w in sorted(set(out.glob("*.whl")) - before)]
            build_reqs += build_requirements(path)
        else:
            wheels.append(source)  # a wheel file or a requirement (blackwell-doctor==0.2.0)
    target = [
        "--only-binary=:all:",
        "--python-version",
        args.python,
        "--implementation",
        "cp",
        "--abi",
        f"cp{args.python.replace('.', '')}",
        *(a for tag in ladder for a in ("--platform", tag)),
    ]
    pip(["download", "-d", str(out), *target, *extra, *wheels])
    # The build backend (the Dockerfile's wheel stage builds offline from this folder), pip
    # (`install` runs pip from its wheel: the target needs no pip of its own) and packaging
    # (`install` checks the tags with it, imported from its wheel).
    pip(["download", "-d", str(out), *target, *extra, *build_reqs, "pip", "packaging"])

    names = sorted(w.name for w in out.glob("*.whl"))
    ours = [n for n in names if n.startswith(PROJECT.replace("-", "_") + "-")]
    if len(ours) != 1:
        raise Refused(f"expected one {PROJECT} wheel in {out}, found {ours or 'none'}")
    version = ours[0].split("-")[1]
    (out / TARGET_FILE).write_text(
        json.dumps(
            {
                "project": PROJECT,
                "version": version,
                "python": args.python,
                "implementation": "cp",
                "platform": platform,
                "platforms": ladder,
                "wheels": names,
            },
            indent=2,
        )
        + "\n",
        encoding="utf-8",
    )
    shutil.copyfile(__file__, out / SCRIPT_NAME)
    print(
        f"wheelhouse: {out} ({len(names)} wheels, {PROJECT} {version}, "
        f"CPython {args.python}, {platform}); on the target host: "
        f"python3 {out / SCRIPT_NAME} install /opt/{PROJECT}"
    )
    return 0


# --------------------------------------------------------------------------- install


def load_target(house: Path) -> dict[str, Any]:
    path = house / TARGET_FILE
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise Refused(f"{house} is not a wheelhouse ({TARGET_FILE} missing)") from None
    except (OSError, ValueError) as exc:
        raise Refused(f"{path}: unreadable ({exc})") from None
    if not isinstance(data, dict) or data.get("project") != PROJECT:
        raise Refused(f"{path}: not a {PROJECT} wheelhouse")
    return data


def packaging_from(house: Path) -> Any:
    """packaging, imported from the wheelhouse's own wheel (pure Python: zipimport reads it),
    so the check needs nothing installed on the target."""
    wheels = sorted(house.glob("packaging-*-py3-none-any.whl"))
    if not wheels:
        raise Refused(f"{house}: no packaging wheel (build the wheelhouse with {SCRIPT_NAME})")
    sys.path.insert(0, str(wheels[-1]))
    import packaging.tags
    import packaging.utils

    return packaging


def misfits(house: Path, wheel_names: list[str]) -> list[str]:
    """The wheels none of whose tags this Python accepts, with what they were built for."""
    packaging = packaging_from(house)
    accepted = set(packaging.tags.sys_tags())
    bad = []
    for name in wheel_names:
        try:
            _, _, _, tags = packaging.utils.parse_wheel_filename(name)
        except packaging.utils.InvalidWheelFilename:
            bad.append(f"{name} (not a wheel file name)")
            continue
        if not tags & accepted:
            bad.append(name)
    return bad


def this_python() -> str:
    import platform as _platform

    libc, (major, minor) = _glibc()
    where = f"{libc} {major}.{minor}" if libc == "glibc" else libc
    return (
        f"{_platform.python_implementation()} {sys.version_info[0]}.{sys.version_info[1]} "
        f"on {sys.platform} {_arch()} ({where})"
    )


def install(args: argparse.Namespace) -> int:
    house = Path(args.wheelhouse).resolve()
    target = load_target(house)
    wheels = sorted(p.name for p in house.glob("*.whl"))
    built_for = f"CPython {target.get('python')} on {target.get('platform')}"
    # The target's Python may be older than this project's floor: tell it, in words.
    if sys.version_info < (3, 11):  # noqa: UP036
        raise Refused(
            f"{house} was built for {built_for}; this is {this_python()}, and {PROJECT} "
            "needs Python 3.11 or newer: run it with that Python"
        )
    bad = misfits(house, wheels)
    if bad:
        shown = ", ".join(bad[:3]) + (f" and {len(bad) - 3} more" if len(bad) > 3 else "")
        raise Refused(
            f"{house} was built for {built_for}; this is {this_python()}: {shown} cannot "
            f"be installed here. Build one for this host where the index is reachable: "
            f"python3 tools/{SCRIPT_NAME} build --python "
            f"{sys.version_info[0]}.{sys.version_info[1]} --platform {this_platform_or_hint()}"
        )
    pip_wheels = sorted(house.glob("pip-*.whl"))
    if not pip_wheels:
        raise Refused(f"{house}: no pip wheel (build the wheelhouse with {SCRIPT_NAME})")
    pip_wheel = pip_wheels[-1]  # one: `build` downloads pip once
    venv = Path(args.venv)
    if venv.exists() and any(venv.iterdir()) and not (venv / "pyvenv.cfg").is_file():
        raise Refused(f"{venv}: exists and is not a virtual environment")
    import venv as _venv

    _venv.EnvBuilder(with_pip=False, clear=False, symlinks=os.name != "nt").create(venv)
    python = venv / "bin" / "python"
    # pip runs from its wheel (pip's documented zip entry point) for the venv's Python.
    cmd = [
        sys.executable,
        str(pip_wheel / "pip"),
        "--disable-pip-version-check",
        "--python",
        str(python),
        "install",
        "--no-index",
        "--find-links",
        str(house),
        f"{PROJECT}=={target['version']}",
    ]
    env = {k: v for k, v in os.environ.items() if not k.startswith("PIP_")}
    env["PIP_CONFIG_FILE"] = os.devnull  # no index or find-links from a pip.conf
    proc = subprocess.run(cmd, env=env, check=False)
    if proc.returncode != 0:
        raise Refused(f"pip install --no-index failed (exit {proc.returncode})")
    print(f"installed {PROJECT} {target['version']}: {venv / 'bin' / PROJECT}")
    return 0


def this_platform_or_hint() -> str:
    try:
        return this_platform()
    except Refused:
        return "<this host's platform tag>"


# --------------------------------------------------------------------------- command line


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    pip_args: list[str] = []
    if "--" in argv:
        cut = argv.index("--")
        argv, pip_args = argv[:cut], argv[cut + 1 :]
    parser = argparse.ArgumentParser(
        prog=SCRIPT_NAME, description=__doc__.split("\n\n")[0] if __doc__ else None
    )
    sub = parser.add_subparsers(dest="command", required=True)
    b = sub.add_parser("build", help="build a wheelhouse for a target Python and platform")
    b.add_argument(
        "sources",
        nargs="*",
        default=["."],
        help="project folders (built), wheel files or requirements (default: .)",
    )
    b.add_argument("-o", "--output", default="wheelhouse", help="an empty or new folder")
    b.add_argument(
        "--python",
        default=f"{sys.version_info[0]}.{sys.version_info[1]}",
        help="the target's Python version (default: this one's)",
    )
    b.add_argument(
        "--platform",
        help="the target's platform tag, e.g. manylinux_2_28_x86_64 (default: this host's)",
    )
    i = sub.add_parser("install", help="check the wheelhouse against this Python, install it")
    i.add_argument("venv", help="the virtual environment to make (e.g. /opt/blackwell-doctor)")
    i.add_argument(
        "--wheelhouse",
        default=str(Path(__file__).resolve().parent),
        help="the wheelhouse (default: the folder this script is in)",
    )
    args = parser.parse_args(argv)
    args.pip_args = pip_args
    try:
        return build(args) if args.command == "build" else install(args)
    except Refused as exc:
        sys.stderr.write(f"{SCRIPT_NAME}: error: {exc}\n")
        return USAGE


if __name__ == "__main__":
    raise SystemExit(main())
