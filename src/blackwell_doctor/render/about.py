"""``--version``: what a bug report needs, one plain ``key: value`` line each (the first
line is the tool and its version, as before issue 40, for scripts that read it)."""

from __future__ import annotations

from blackwell_doctor.report.about import About


def render_about(about: About, tool: str) -> str:
    schemas = ", ".join(f"{name} {version}" for name, version in about.schemas.items())
    lines = [
        f"{tool} {about.version}",
        f"commit: {about.commit}",
        f"catalogue: checks/ ({about.catalogue_files} files) sha256 {about.catalogue_sha256}",
        f"schemas: {schemas}",
        f"python: {about.python}",
        *(f"{name}: {version}" for name, version in about.bindings.items()),
    ]
    return "\n".join(lines) + "\n"
