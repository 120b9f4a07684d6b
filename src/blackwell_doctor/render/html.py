"""Pieces of the HTML reports (``bench -f html``, ``bench --compare -f html``, a soak's run,
``fleet -f html``): one self-contained page, its tables and figures.

A page carries no script at all and loads nothing: its Content-Security-Policy allows no
script, no connection, no font and no image beyond ``data:``, so it looks the same offline,
from a CI artefact or an e-mail attachment, and a string that slipped through unescaped
still could not run. Every value from outside (already through the dispatcher's sanitising
step, which shows control characters escaped) is placed with :func:`esc`, as text or as a
quoted attribute value, never as markup. The figures are SVG drawn here (render.svg): each
carries its numbers as a table beside it.
"""

from __future__ import annotations

import html
from collections.abc import Sequence
from dataclasses import dataclass

# No script, no network: the page's whole policy.
CSP = (
    "default-src 'none'; style-src 'unsafe-inline'; img-src data:; base-uri 'none'; "
    "form-action 'none'"
)

_STYLE = """
:root { color-scheme: light; --fg: #1b1b1b; --muted: #5a5a5a; --rule: #d0d0d0; }
body { font: 14px/1.45 system-ui, -apple-system, "Segoe UI", sans-serif; color: var(--fg);
  max-width: 1100px; margin: 1.5em auto; padding: 0 1em; }
h1 { font-size: 1.4em; margin: 0 0 .2em; } h2 { font-size: 1.2em; margin: 1.6em 0 .4em; }
h3 { font-size: 1.05em; margin: 1.2em 0 .3em; }
.meta, figcaption, .note { color: var(--muted); }
.finding { color: #a01010; }
table { border-collapse: collapse; margin: .4em 0 1em; font-variant-numeric: tabular-nums; }
th, td { border-bottom: 1px solid var(--rule); padding: 2px 8px; text-align: right;
  vertical-align: top; }
th:first-child, td:first-child, td.text, th.text { text-align: left; }
figure.plot { margin: 1em 0; } figure.plot svg { max-width: 100%; height: auto; }
svg text { font: 11px system-ui, sans-serif; fill: #333; }
svg .grid { stroke: #e6e6e6; } svg .axis { stroke: #777; }
.legend { list-style: none; padding: 0; margin: .2em 0; display: flex; flex-wrap: wrap;
  gap: .3em 1.2em; }
.swatch { display: inline-block; width: 1.6em; height: .5em; margin-right: .4em;
  vertical-align: middle; border-radius: 2px; }
details { margin: 1em 0; } pre { white-space: pre-wrap; font-size: 12px; }
.scroll { max-width: 100%; overflow-x: auto; }
td.v-better { color: #009E73; } td.v-worse { color: #D55E00; font-weight: 600; }
td.v-not-comparable, td.v-too-few-samples { color: #5a5a5a; font-style: italic; }
code { font-size: 12px; }
"""


def esc(value: object) -> str:
    """``value`` as HTML text or a double-quoted attribute value: ``& < > " '`` escaped, and
    the line and paragraph separators written as character references (the same characters
    on the page; raw, they end a line in a script, should the page ever be pasted into one)."""
    return html.escape(str(value), quote=True).translate(_SEPARATORS)


_SEPARATORS = str.maketrans({"\u2028": "&#x2028;", "\u2029": "&#x2029;"})


def page(title: str, body: Sequence[str], *, subtitle: str = "") -> str:
    """A whole HTML document: ``title`` (text) and ``body`` (markup built with :func:`esc`)."""
    head = [
        "<!DOCTYPE html>",
        '<html lang="en">',
        "<head>",
        '<meta charset="utf-8">',
        f'<meta http-equiv="Content-Security-Policy" content="{esc(CSP)}">',
        '<meta name="viewport" content="width=device-width, initial-scale=1">',
        '<meta name="referrer" content="no-referrer">',
        f"<title>{esc(title)}</title>",
        f"<style>{_STYLE}</style>",
        "</head>",
        "<body>",
        f"<h1>{esc(title)}</h1>",
    ]
    if subtitle:
        head.append(f'<p class="meta">{esc(subtitle)}</p>')
    return "\n".join([*head, *body, "</body>", "</html>"]) + "\n"


@dataclass(frozen=True)
class Table:
    """A table of text cells (escaped when placed); ``text_columns`` are left-aligned."""

    head: Sequence[str]
    rows: Sequence[Sequence[str]]
    caption: str = ""
    text_columns: frozenset[int] = frozenset({0})
    # Columns of verdicts ("better", "worse", ...): each cell gets the class v-<verdict>,
    # coloured as the figures colour them (svg.py GOOD, BAD; issue 40: verdicts were black).
    verdict_columns: frozenset[int] = frozenset()

    def markup(self, css_class: str = "") -> str:
        def cells(tag: str, row: Sequence[str]) -> str:
            out = []
            for i, c in enumerate(row):
                classes = ["text"] if i in self.text_columns else []
                if tag == "td" and i in self.verdict_columns:
                    classes.append("v-" + "-".join(c.split()))
                klass = f' class="{esc(" ".join(classes))}"' if classes else ""
                out.append(f"<{tag}{klass}>{esc(c)}</{tag}>")
            return "".join(out)

        klass = f' class="{esc(css_class)}"' if css_class else ""
        # A table wider than the page scrolls inside it (issue 40: a compare's table ran
        # past a 700 px window).
        out = [f'<div class="scroll"><table{klass}>']
        if self.caption:
            out.append(f"<caption>{esc(self.caption)}</caption>")
        out.append(f"<thead><tr>{cells('th', self.head)}</tr></thead>")
        out.append("<tbody>")
        out += [f"<tr>{cells('td', r)}</tr>" for r in self.rows]
        out.append("</tbody></table></div>")
        return "\n".join(out)


# A figure's table longer than this (a long soak's intervals) is folded under its figure.
FOLD_ROWS = 60


def figure(kind: str, svg: str, caption: str, legend: str, table: Table) -> str:
    """A plot and its numbers: the SVG, its legend and caption, then the same figures as a
    table (``data-plot`` names the kind of plot, for tests and readers' scripts)."""
    return "\n".join(
        [
            f'<figure class="plot" data-plot="{esc(kind)}">',
            svg,
            legend,
            f"<figcaption>{esc(caption)}</figcaption>",
            "</figure>",
            table.markup("figure-data")
            if len(table.rows) <= FOLD_ROWS
            else f"<details><summary>{len(table.rows):,} rows</summary>"
            f"{table.markup('figure-data')}</details>",
        ]
    )


def paragraph(text: str, css_class: str = "") -> str:
    klass = f' class="{esc(css_class)}"' if css_class else ""
    return f"<p{klass}>{esc(text)}</p>"


def heading(level: int, text: str) -> str:
    return f"<h{level}>{esc(text)}</h{level}>"


def text_report(text: str, summary: str) -> str:
    """The terminal's report of the same document, folded: every line the text formats
    show, so the page leaves nothing out."""
    return f"<details><summary>{esc(summary)}</summary><pre>{esc(text)}</pre></details>"
