"""``blackwell-doctor examples``: the shipped examples, each with where it came from, the
commands to try on it and its files."""

from __future__ import annotations

from blackwell_doctor.render.common import sanitize_line
from blackwell_doctor.render.terminal import Item, Line, write_plain
from blackwell_doctor.ruledata.examples import ExampleCatalogue


def render_examples(catalogue: ExampleCatalogue, folder: str, *, width: int | None = 100) -> str:
    """The listing, fitted to ``width``; ``folder`` is where the example files are on this
    machine. The commands to try are never broken, nor are the file names (wrapped lines
    break at spaces only)."""
    words = catalogue.words
    lines: list[Item] = [sanitize_line(words.heading), ""]
    for e in catalogue.example:
        lines.append(f"{sanitize_line(e.name)}: {sanitize_line(e.title)}")
        lines.append(Line(2, ((f"{words.origin} {sanitize_line(e.origin)}", ""),)))
        for command in e.commands:
            verb, _, rest = command.partition(" ")
            tail = f" {rest}" if rest else ""
            lines.append(
                Line(
                    2,
                    ((f"blackwell-doctor {verb} --example {e.name}{tail}", ""),),
                    wrap=False,
                    lead=((f"{words.commands}: ", ""),),
                    command=True,
                )
            )
        # A fleet's nodes are other examples (their files are theirs).
        label, named = (words.nodes, e.nodes) if e.nodes else (words.files, e.files())
        listed = ", ".join(sanitize_line(f) for f in named)
        lines.append(Line(2, ((f"{label}: {listed}", ""),)))
        lines.append("")
    lines.append(f"{words.files}: {sanitize_line(folder)}")
    return write_plain(lines, width)
