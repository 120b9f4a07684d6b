"""The estimator measured honestly (issue 34, item 4): 38 publisher config.json files with
published parameter counts, gathered and frozen before the count was run on them
(tests/fixtures/model-configs-heldout, sources in its README). The README's table and the
summary quoted in docs/model.md are recomputed here: a figure that drifts from what the code
gives fails.

    PYTHONPATH=src python -m tests.test_model_heldout   # prints the table and the summary
"""

from __future__ import annotations

import json
import statistics
import tomllib
from dataclasses import dataclass
from pathlib import Path

from blackwell_doctor.collect.model.config import (
    ConfigError,
    arch_from_config,
    params_from_config,
)

HELDOUT = Path(__file__).parent / "fixtures" / "model-configs-heldout"
DOCS = Path(__file__).parents[1] / "docs" / "model.md"


@dataclass(frozen=True)
class Row:
    model: str
    repo: str
    published: str
    ours: str
    error: str
    how: str  # the family, "estimated", or why there is no figure
    errors: tuple[float, ...]  # |error| of each figure (total, and active for MoE)

    def markdown(self) -> str:
        return (
            f"| `{self.model}` | `{self.repo}` | {self.published} | {self.ours} | "
            f"{self.error} | {self.how} |"
        )


def _b(n: float) -> str:
    return f"{n / 1e9:.3f}B"


def rows() -> list[Row]:
    table = tomllib.loads((HELDOUT / "published.toml").read_text(encoding="utf-8"))
    out = []
    for m in table["model"]:
        raw = json.loads((HELDOUT / m["dir"] / "config.json").read_text(encoding="utf-8"))
        published = _b(m["total"]) + (f" / {_b(m['active'])}" if "active" in m else "")
        if m["compare"] == "without-embedding":
            published += " (without the embedding)"
        try:
            arch = arch_from_config(raw)
            p = params_from_config(raw, arch)
        except ConfigError as exc:  # NotModelled included: no figure
            why = str(exc).rsplit("covers it, and ", 1)[-1]
            out.append(Row(m["dir"], m["repo"], published, "none", "-", f"not modelled: {why}", ()))
            continue
        less = p.embedding if m["compare"] == "without-embedding" else 0
        total = p.total - less
        errs = [total / m["total"] - 1]
        ours = _b(total)
        if "active" in m and p.active is not None:
            errs.append((p.active - less) / m["active"] - 1)
            ours += f" / {_b(p.active - less)}"
        how = arch.family or (arch.estimate.label if arch.estimate else "?")
        shown = " / ".join(f"{e * 100:+.2f}%" for e in errs)
        out.append(
            Row(m["dir"], m["repo"], published, ours, shown, how, tuple(abs(e) for e in errs))
        )
    return out


def summary(table: list[Row]) -> str:
    errs = [e for r in table for e in r.errors]
    worst = max((r for r in table if r.errors), key=lambda r: max(r.errors))
    none = [r.model for r in table if not r.errors]
    estimated = [r for r in table if r.how.startswith("estimated")]
    est_errs = [e for r in estimated for e in r.errors]
    moe = sum(1 for r in table if len(r.errors) > 1)
    return (
        f"{len(table)} models, {len(errs)} published figures ({moe} "
        f"of them MoE active counts): median error {statistics.median(errs) * 100:.2f}%, worst "
        f"{max(errs) * 100:.2f}% (`{worst.model}`), {sum(e <= 0.03 for e in errs)} of "
        f"{len(errs)} within 3%; {len(estimated)} models of no verified family estimated "
        f"(median {statistics.median(est_errs) * 100:.2f}%, {sum(e <= 0.03 for e in est_errs)} "
        f"of {len(est_errs)} within 3%); no figure for {len(none)} "
        f"({', '.join(f'`{n}`' for n in none) or 'none'})"
    )


def markdown_table(table: list[Row]) -> str:
    head = (
        "| model | Hugging Face repository | published total / active | ours | error "
        "| counted as |\n"
        "|---|---|---|---|---|---|"
    )
    return head + "\n" + "\n".join(r.markdown() for r in table)


def test_the_readme_table_is_what_the_code_gives() -> None:
    readme = (HELDOUT / "README.md").read_text(encoding="utf-8")
    table = rows()
    assert markdown_table(table) in readme
    assert summary(table) in readme


def test_docs_quote_the_summary_the_code_gives() -> None:
    text = " ".join(DOCS.read_text(encoding="utf-8").split())
    assert summary(rows()) in text


def test_the_set_is_at_least_30_models_none_of_them_a_test_fixture() -> None:
    table = tomllib.loads((HELDOUT / "published.toml").read_text(encoding="utf-8"))
    dirs = {m["dir"] for m in table["model"]}
    assert len(dirs) == len(table["model"]) >= 30
    fixtures = {p.name for p in (HELDOUT.parent / "models").iterdir()}
    assert not dirs & fixtures
    assert all((HELDOUT / d / "config.json").is_file() for d in dirs)


if __name__ == "__main__":
    t = rows()
    print(markdown_table(t))
    print()
    print(summary(t))
