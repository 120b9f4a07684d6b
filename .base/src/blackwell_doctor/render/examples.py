"""``blackwell-doctor examples``: the shipped examples, each with where it came from, the
commands to try on it and its files."""

from __future__ import annotations

import textwrap

from blackwell_doctor.render.common import sanitize_line
from blackwell_doctor.ruledata.examples import ExampleCatalogue

_WIDTH = 100


def render_examples(catalogue: ExampleCatalogue, folder: str) -> str:
    """The listing; ``folder`` is where the example files are on this machine."""
    words = catalogue.words
    lines = [sanitize_line(words.heading), ""]
    for e in catalogue.example:
        lines.append(f"{sanitize_line(e.name)}: {sanitize_line(e.title)}")
        lines += textwrap.wrap(
            f"{words.origin} {sanitize_line(e.origin)}",
            _WIDTH,
            initial_indent="  ",
            subsequent_indent="    ",
        )
        for command in e.commands:
            verb, _, rest = command.partition(" ")
            tail = f" {rest}" if rest else ""
            lines.append(f"  {words.commands}: blackwell-doctor {verb} --example {e.name}{tail}")
        files = ", ".join(sanitize_line(f) for f in e.files())
        lines += textwrap.wrap(
            f"{words.files}: {files}", _WIDTH, initial_indent="  ", subsequent_indent="    "
        )
        lines.append("")
    lines.append(f"{words.files}: {sanitize_line(folder)}")
    return "\n".join(lines) + "\n"
