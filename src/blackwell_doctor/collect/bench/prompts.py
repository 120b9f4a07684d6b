"""Synthetic, seeded prompts, and the fixed greedy prompts of the equivalence check.

Each request's prompt is words drawn from a fixed list by ``random.Random`` seeded from
(--seed, shape, request index): the same seed gives the same prompts on every machine, and
no two requests share a prefix (a prefix cache would otherwise turn the long shape into a
cache benchmark).
"""

from __future__ import annotations

import random

_WORDS = (  # noqa: SIM905 (a paragraph reads better than 200 quoted words)
    "time year people way day man thing woman life child world school state family student "
    "group country problem hand part place case week company system program question work "
    "government number night point home water room mother area money story fact month lot "
    "right study book eye job word business issue side kind head house service friend father "
    "power hour game line end member law car city community name president team minute idea "
    "kid body information back parent face others level office door health person art war "
    "history party result change morning reason research girl guy moment air teacher force "
    "education foot boy age policy process music market sense nation plan college interest "
    "death experience effect use class control care field development role effort rate heart "
    "drug show leader light voice wife police mind price report decision son view relationship "
    "town road arm difference value building action model season society tax director position "
    "player record paper space ground form event official matter center couple site project "
    "activity star table need court oil situation cost industry figure street image phone data "
    "picture practice piece land product doctor wall patient worker news test movie north love "
    "support technology step baby computer type attention film tree source organization hair "
    "window evidence population site river kernel memory tensor expert router token cache"
).split()

# The word list, for other prompt builders (collect/bench/blocks.py).
WORDS: tuple[str, ...] = tuple(_WORDS)

# Fixed prompts for output equivalence (sent greedy, temperature 0, in every run).
EQUIVALENCE_PROMPTS: tuple[tuple[str, str], ...] = (
    ("count", "Count from one to twenty in words, separated by commas."),
    ("planets", "List the planets of the solar system in order from the sun."),
    ("explain", "Explain in two sentences what a mixture-of-experts model is."),
)

# Rough tokens per word for English text, used only when the server has no /tokenize.
TOKENS_PER_WORD_ESTIMATE = 1.3


def words(seed: int, shape: str, index: int, count: int) -> str:
    rng = random.Random(f"{seed}:{shape}:{index}")  # noqa: S311 (test data, not secrets)
    head = f"Request {index} of {shape}. Continue this text:"
    return head + " " + " ".join(rng.choices(_WORDS, k=max(1, count)))
