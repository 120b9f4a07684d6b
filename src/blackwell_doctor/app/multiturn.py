"""``bench --multi-turn N``: each user's requests are conversations of N turns, and every
turn's prompt carries the conversation so far.

As vLLM's multi-turn benchmark does (``benchmarks/multi_turn/benchmark_serving_multi_turn.py``:
the server's answer "will be used as part of the context for the next user turn"), turn k
sends the earlier k - 1 user messages with the server's answers to them, then a new user
message of the shape's size; the next turn goes when the answer is in. A server with a
prefix cache finds the conversation so far in it, which its prefix-cache counters show
(``server.prefix_cache_hit_rate``). A turn that fails ends its conversation (vLLM's drops
it too): the turns after it are not sent.

The history is the answer's text only (``content``), not its reasoning: OpenAI's chat
format, and what chat templates that strip earlier reasoning expect (Qwen3's).
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from blackwell_doctor.collect.bench import client
from blackwell_doctor.report.stats import percentile
from blackwell_doctor.ruledata.shapes import Shape

Message = dict[str, str]
# Of max_model_len, what the longest turn (every earlier prompt and answer) may fill: the
# prompts of one shape differ by a few tokens, as app.bench's _CAP_SHARE says.
_FILL = 0.9


def fit(shape: Shape, turns: int, max_model_len: int | None) -> tuple[Shape, str | None]:
    """``shape`` with each turn's new prompt small enough that the last turn (``turns``
    prompts and ``turns - 1`` answers, then its own answer) fits ``max_model_len``; and
    why it was made smaller, or None."""
    if max_model_len is None:
        return shape, None
    room = int(max_model_len * _FILL) - turns * shape.output_tokens
    most = max(1, room // turns)
    if shape.input_tokens <= most:
        return shape, None
    from msgspec.structs import replace

    return replace(shape, input_tokens=most), (
        f"each turn's prompt capped from {shape.input_tokens} to {most} tokens: {turns} turns "
        f"of it and {turns} answers of {shape.output_tokens} fit the server's max_model_len "
        f"{max_model_len}"
    )


async def run_conversations(
    total: int,
    turns: int,
    width: int,
    *,
    prompt: Callable[[int], str],
    ask: Callable[[list[Message], int], Awaitable[client.Outcome | None]],
    each: Callable[[int, int, Callable[[int], Awaitable[bool]]], Awaitable[None]],
) -> int:
    """``total`` requests as conversations of ``turns`` turns, ``width`` at once: request
    ``c * turns + t`` is turn ``t + 1`` of conversation ``c``, its new message
    ``prompt(index)``. ``ask(messages, turn)`` sends one turn and gives its outcome (None:
    stop, e.g. --duration reached). ``each(count, width, send)`` runs ``send(0)`` ..
    ``send(count - 1)``, ``width`` at once, until one returns False (app.bench's
    send_each). Returns the turns not sent because an earlier turn of theirs failed."""
    lost = 0

    async def converse(conversation: int) -> bool:
        nonlocal lost
        history: list[Message] = []
        for t in range(turns):
            index = conversation * turns + t
            if index >= total:
                return True
            messages = [*history, {"role": "user", "content": prompt(index)}]
            outcome = await ask(messages, t + 1)
            if outcome is None:
                return False
            if not outcome.ok:
                lost += min(turns, total - conversation * turns) - (t + 1)
                return True
            history = [*messages, {"role": "assistant", "content": outcome.text}]
        return True

    await each(-(-total // turns), width, converse)
    return lost


def ttft_by_turn(ttfts_s: list[tuple[int, float]], turns: int) -> str:
    """ "TTFT p50 by turn: 1: 56.2, 2: 31.0 ms" from (turn, TTFT seconds) pairs."""
    parts = []
    for turn in range(1, turns + 1):
        values = sorted(v for t, v in ttfts_s if t == turn)
        shown = f"{percentile(values, 50) * 1000:.1f}" if values else "-"
        parts.append(f"{turn}: {shown}")
    return "TTFT p50 by turn: " + ", ".join(parts) + " ms"
