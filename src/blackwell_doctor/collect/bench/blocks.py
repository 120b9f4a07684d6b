"""Prompts of a replayed trace, built from blocks so that requests that share a block share
its text, and so its tokens.

A Mooncake hash id stands for a block of the trace's prompt tokens (512 in its releases)
that every request carrying the id shares. Here each id becomes a block of words drawn by
``random.Random`` seeded from (--seed, the id): the same id gives the same text in every
request, and a prompt is its blocks in order, so two requests that share their first k ids
share their first k blocks character for character, and a prefix cache sees what the
trace's own service saw. aiperf builds its Mooncake prompts the same way, from token ids
(``aiperf/dataset/generator/prompt.py``, ``_generate_cached_prompt``).

Honest sizes need words that are one token each in the server's tokenizer, in context: a
tokenizer that splits text at spaces before merging (byte-level BPE: GPT-2, Llama 3, Qwen;
SentencePiece with ``split_by_whitespace``) tokenizes " w1 w2 ... wn" as the n pieces " wi",
so n words of one token each are n tokens, and a block boundary never merges two tokens.
:func:`single_token_words` finds such words among :data:`CANDIDATES` with the server's own
``/tokenize``; the caller checks the sum on a whole block before believing it.
"""

from __future__ import annotations

import functools
import random
from collections.abc import Awaitable, Callable, Sequence

from blackwell_doctor.collect.bench.prompts import WORDS

# Common English words, short function words and single letters: in a tokenizer trained on
# English text most are one token with their leading space (Qwen's: nearly all; the tiny
# test model's, trained on one Python file: 58 of these 288).
_SHORT = (  # noqa: SIM905 (a sentence reads better than 47 quoted words)
    "a the of and to in is it for on that with as at by be this from or an are was not but "
    "all can had her his one our out you we he she they them if no so up do go my me us"
).split()
CANDIDATES: tuple[str, ...] = tuple(dict.fromkeys([*WORDS, *_SHORT, *"abcdefghijklmnopqrstuvwxyz"]))
# Blocks kept built (most recently used): about 7 KB each at 512 words.
CACHED_BLOCKS = 1024


async def single_token_words(
    count: Callable[[str], Awaitable[int | None]], candidates: Sequence[str] = CANDIDATES
) -> list[str] | None:
    """The ``candidates`` that the server's tokenizer makes one token each with a leading
    space, found by halving: a group whose text " w1 w2 ..." counts as many tokens as it
    has words is one token a word (each word is at least one). ``count(text)`` is the
    server's count of ``text`` without special tokens; None when it gave none."""
    found: list[str] = []
    groups = [list(candidates)]
    while groups:
        counts = [await count(" " + " ".join(g)) for g in groups]
        if any(c is None for c in counts):
            return None
        split: list[list[str]] = []
        for group, n in zip(groups, counts, strict=True):
            if n == len(group):
                found += group
            elif len(group) > 1:
                half = len(group) // 2
                split += [group[:half], group[half:]]
        groups = split
    order = {w: i for i, w in enumerate(candidates)}
    return sorted(found, key=order.__getitem__)


class BlockPrompts:
    """The text of each request of a trace: ``words_per_block`` words per hash id (the
    block's tokens when every word is one token), seeded by ``seed``."""

    def __init__(self, words: Sequence[str], *, seed: int, words_per_block: int | None) -> None:
        if not words:
            raise ValueError("no words to build prompts from")
        self.words = list(words)
        self.seed = seed
        self.words_per_block = words_per_block
        self._block = functools.lru_cache(maxsize=CACHED_BLOCKS)(self._make_block)

    def _make_block(self, hash_id: int) -> tuple[list[str], str]:
        assert self.words_per_block is not None
        rng = random.Random(f"{self.seed}:block:{hash_id}")  # noqa: S311 (test data)
        words = rng.choices(self.words, k=self.words_per_block)
        return words, " " + " ".join(words)

    def text(self, hash_ids: Sequence[int], n_words: int, *, request: int) -> str:
        """The prompt of request ``request`` (its index: seeds its own words): ``n_words``
        words, the blocks of ``hash_ids`` in order (the last one cut where the prompt ends;
        ids beyond its end unused), then words of its own if the blocks end first."""
        n_words = max(1, n_words)
        parts: list[str] = []
        left = n_words
        if self.words_per_block:
            for hash_id in hash_ids:
                if left <= 0:
                    break
                words, whole = self._block(hash_id)
                if left >= len(words):
                    parts.append(whole)
                    left -= len(words)
                else:
                    parts.append(" " + " ".join(words[:left]))
                    left = 0
        if left > 0:
            rng = random.Random(f"{self.seed}:request:{request}")  # noqa: S311 (test data)
            parts.append(" " + " ".join(rng.choices(self.words, k=left)))
        return "".join(parts)
