"""`bench --trace`: the Mooncake and BurstGPT readers (each bad line one error naming file and
line, exit 2, nothing sent), prompts that share a trace's blocks word for word and are sized
in the server's tokens, the pacer, and a whole replay against a real aiohttp server on
127.0.0.1 whose /tokenize counts as a word-level tokenizer would. The real-vLLM replay is
tests/test_bench_trace_vllm.py."""

from __future__ import annotations

import asyncio
import json
import time
from pathlib import Path
from typing import Any

import pytest

from blackwell_doctor.cli import main
from blackwell_doctor.ruledata.resources import data_dir, schema_text
from tests.conftest import skip_without

try:
    import jsonschema

    from blackwell_doctor.collect.bench import blocks, pacer
    from blackwell_doctor.collect.bench.trace import (
        BURSTGPT,
        MOONCAKE,
        TraceError,
        read_trace,
    )
    from tests.benchfake import Fake, fake, word_tokens  # noqa: F401 (fake: a fixture)
except ModuleNotFoundError as exc:
    skip_without(exc)

# Mooncake FAST25-release/README.md's own two example requests (one line each).
MOONCAKE_README = (
    '{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 48, '
    "49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]}\n"
    '{"timestamp": 30535, "input_length": 6472, "output_length": 26, "hash_ids": [46, 47, 48, '
    "49, 50, 51, 52, 53, 54, 55, 56, 57, 2366]}\n"
)
BURSTGPT_HEADER = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"


def write(tmp_path: Path, text: str, name: str = "trace.jsonl") -> Path:
    path = tmp_path / name
    path.write_text(text)
    return path


# --- the readers ----------------------------------------------------------------------------


def test_mooncake_readme_lines_read_with_their_blocks_and_times(tmp_path: Path) -> None:
    trace = read_trace(write(tmp_path, MOONCAKE_README))
    assert trace.format == MOONCAKE
    assert trace.block_tokens == 512
    assert len(trace) == 2
    # Times are since the first request, in seconds (the file's are milliseconds).
    assert list(trace.offsets_s) == pytest.approx([0.0, 3.053])
    assert list(trace.input_tokens) == [6955, 6472]
    assert list(trace.output_tokens) == [52, 26]
    assert list(trace.hashes(0)) == [46, 47, 48, 49, 50, 51, 52, 53, 54, 55, 56, 57, 2353, 2354]
    assert list(trace.hashes(1))[:12] == list(trace.hashes(0))[:12]


def test_the_shipped_mooncake_trace_reads(tmp_path: Path) -> None:
    path = data_dir("examples") / "traces" / "mooncake-conversation-60s.jsonl"
    trace = read_trace(path)
    assert trace.format == MOONCAKE
    assert 100 < len(trace) == trace.rows
    assert trace.offsets_s[-1] < 60.0
    # The conversation trace's first block (id 0) is shared by its opening requests.
    assert all(trace.hashes(i)[0] == 0 for i in range(5))


def test_burstgpt_rows_read_and_failed_requests_are_skipped(tmp_path: Path) -> None:
    text = BURSTGPT_HEADER + (
        "5,ChatGPT,472,18,490,Conversation log\n"
        "45,ChatGPT,1087,0,1087,Conversation log\n"  # a failure in the traced service
        "110.5,GPT-4,417,505,922,API log\n"
    )
    trace = read_trace(write(tmp_path, text, "burst.csv"))
    assert trace.format == BURSTGPT
    assert trace.block_tokens is None
    assert (trace.rows, trace.skipped, len(trace)) == (3, 1, 2)
    assert list(trace.offsets_s) == pytest.approx([0.0, 105.5])
    assert list(trace.input_tokens) == [472, 417]
    assert len(trace.hashes(0)) == 0


def test_newer_burstgpt_columns_are_read_by_name(tmp_path: Path) -> None:
    text = (
        "Timestamp,Session ID,Elapsed time,Model,Request tokens,Response tokens,Total tokens,"
        "Log Type\n3,abc,1.5,GPT-4,20,30,50,Conversation log\n"
    )
    trace = read_trace(write(tmp_path, text, "burst3.csv"))
    assert (list(trace.input_tokens), list(trace.output_tokens)) == ([20], [30])


def test_requests_and_duration_replay_the_start_of_a_trace(tmp_path: Path) -> None:
    lines = "".join(
        json.dumps({"timestamp": 1000 * i, "input_length": 10, "output_length": 2}) + "\n"
        for i in range(10)
    )
    path = write(tmp_path, lines)
    assert len(read_trace(path, requests=3)) == 3
    by_time = read_trace(path, duration_s=4.0)
    assert (len(by_time), by_time.cut) == (5, 5)


BAD_MOONCAKE = [
    ('{"timestamp": 0, "input_length": 10, "output_length": 2', 1, "not JSON"),
    ('{"timestamp": 0, "output_length": 2}', 1, "input_length"),
    ('{"timestamp": -5, "input_length": 10, "output_length": 2}', 1, "timestamp -0.005"),
    ('{"timestamp": "soon", "input_length": 10, "output_length": 2}', 1, "timestamp"),
    ('{"timestamp": 0, "input_length": 20000000, "output_length": 2}', 1, "input length 20000000"),
    ('{"timestamp": 0, "input_length": 10, "output_length": 5000000}', 1, "output length 5000000"),
    ('{"timestamp": 0, "input_length": 10, "output_length": -1}', 1, "output length -1"),
    ('{"timestamp": 1e300, "input_length": 10, "output_length": 2}', 1, "past"),
    ('{"timestamp": 0, "input_length": 10, "output_length": true}', 1, "output_length"),
    # 2 hash ids of 512 tokens hold 513..1024 tokens, not 10.
    ('{"timestamp": 0, "input_length": 10, "output_length": 2, "hash_ids": [1, 2]}', 1, "513"),
    ("[1, 2, 3]", 1, "not a Mooncake request"),
]


@pytest.mark.parametrize(("line", "number", "words"), BAD_MOONCAKE)
def test_a_bad_mooncake_line_is_one_error_naming_file_and_line(
    tmp_path: Path, line: str, number: int, words: str
) -> None:
    path = write(tmp_path, line + "\n")
    with pytest.raises(TraceError) as caught:
        read_trace(path, format=MOONCAKE)
    message = str(caught.value)
    assert f"trace {path}, line {number}:" in message, message
    assert words in message, message
    assert "\n" not in message


def test_a_timestamp_before_the_previous_one_is_an_error_on_its_line(tmp_path: Path) -> None:
    text = (
        '{"timestamp": 0, "input_length": 10, "output_length": 2}\n'
        "\n"
        '{"timestamp": 5000, "input_length": 10, "output_length": 2}\n'
        '{"timestamp": 4000, "input_length": 10, "output_length": 2}\n'
    )
    path = write(tmp_path, text)
    with pytest.raises(TraceError, match=r"line 4: timestamp 4 s comes before .* 5 s"):
        read_trace(path)


@pytest.mark.parametrize(
    ("row", "words"),
    [
        ("5,ChatGPT,472", "3 columns"),
        ("soon,ChatGPT,472,18,490,API log", "Timestamp 'soon'"),
        ("5,ChatGPT,4.5,18,490,API log", "Request tokens '4.5'"),
        ("5,ChatGPT,472,-3,490,API log", "output length -3"),
        ("-1,ChatGPT,472,3,490,API log", "timestamp -1"),
        ("5,ChatGPT,472,²,490,API log", "Response tokens"),
    ],
)
def test_a_bad_burstgpt_row_is_one_error_naming_file_and_line(
    tmp_path: Path, row: str, words: str
) -> None:
    path = write(tmp_path, BURSTGPT_HEADER + "1,ChatGPT,10,2,12,API log\n" + row + "\n", "b.csv")
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert f"trace {path}, line 3:" in str(caught.value)
    assert words in str(caught.value)


def test_a_file_of_neither_format_asks_for_trace_format(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="give --trace-format"):
        read_trace(write(tmp_path, "time,in,out\n1,2,3\n", "x.csv"))
    with pytest.raises(TraceError, match="Request tokens"):
        read_trace(write(tmp_path, "a,b\n1,2\n", "y.csv"), format=BURSTGPT)


# --- prompts from blocks ------------------------------------------------------------------


def test_requests_that_share_hash_ids_share_those_blocks_word_for_word() -> None:
    builder = blocks.BlockPrompts(["a", "b", "c", "d"], seed=7, words_per_block=16)
    first = builder.text([1, 2, 3], 40, request=0).split()
    second = builder.text([1, 2, 9], 48, request=1).split()
    third = builder.text([5], 16, request=2).split()
    assert len(first) == 40
    assert len(second) == 48
    assert len(third) == 16
    assert first[:32] == second[:32]  # blocks 1 and 2 in common
    assert first[32:40] != second[32:40]  # block 3 against block 9
    assert first[:16] != third  # another first block
    # A partial last block is the start of the whole block.
    assert builder.text([3], 16, request=3).split()[:8] == first[32:40]
    # The same seed gives the same text; another seed another.
    again = blocks.BlockPrompts(["a", "b", "c", "d"], seed=7, words_per_block=16)
    assert again.text([1, 2, 3], 40, request=0).split() == first
    other = blocks.BlockPrompts(["a", "b", "c", "d"], seed=8, words_per_block=16)
    assert other.text([1, 2, 3], 40, request=0).split() != first


def test_a_prompt_without_blocks_has_words_of_its_own() -> None:
    builder = blocks.BlockPrompts(["a", "b", "c", "d"], seed=0, words_per_block=None)
    one, two = builder.text([], 30, request=0), builder.text([], 30, request=1)
    assert len(one.split()) == len(two.split()) == 30
    assert one != two


def test_single_token_words_are_found_by_halving() -> None:
    asked: list[str] = []

    async def count(text: str) -> int:
        asked.append(text)
        return sum(word_tokens(w) for w in text.split())

    found = asyncio.run(blocks.single_token_words(count, ["cat", "elephant", "dog", "hippo"]))
    assert found == ["cat", "dog", "hippo"]
    assert len(asked) < 8

    async def none(text: str) -> int | None:
        return None

    assert asyncio.run(blocks.single_token_words(none, ["a"])) is None


# --- the pacer ------------------------------------------------------------------------------


def test_the_pacer_hands_each_request_over_in_order_and_never_early() -> None:
    fired: list[tuple[int, float, float]] = []

    async def go() -> None:
        start = time.perf_counter() + 0.01
        offsets = [0.0, 0.0, 0.002, 0.005, 0.03]

        def fire(index: int, due: float) -> bool:
            fired.append((index, due, time.perf_counter()))
            return True

        await pacer.pace(len(offsets), lambda i: start + offsets[i], fire)

    asyncio.run(go())
    assert [f[0] for f in fired] == [0, 1, 2, 3, 4]
    assert all(now >= due for _, due, now in fired)


def test_a_cancelled_schedule_hands_over_nothing_more() -> None:
    fired: list[int] = []

    async def go() -> None:
        start = time.perf_counter()

        def fire(index: int, due: float) -> bool:
            fired.append(index)
            return True

        task = asyncio.create_task(
            pacer.pace(3, lambda i: start + (0.0 if i == 0 else 3600.0), fire)
        )
        while not fired:
            await asyncio.sleep(0.001)
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task

    asyncio.run(go())
    assert fired == [0]


def test_a_fire_that_declines_ends_the_schedule_there() -> None:
    # send_on_schedule's stop() and a request that raised end the pacing this way.
    fired: list[int] = []

    async def go() -> None:
        start = time.perf_counter()

        def fire(index: int, due: float) -> bool:
            fired.append(index)
            return index < 1

        # Due at once, then an hour later: only a schedule that ends at the False returns.
        await asyncio.wait_for(
            pacer.pace(4, lambda i: start + (0.0 if i < 3 else 3600.0), fire), timeout=30
        )

    asyncio.run(go())
    assert fired == [0, 1]


# --- a whole replay against a server on 127.0.0.1 -------------------------------------------


def replay(
    fake: Fake, path: Path, capsys: pytest.CaptureFixture[str], *extra: str
) -> tuple[int, dict[str, Any], str]:
    code = main(["bench", "--url", fake.url, "--trace", str(path), "-f", "json", *extra])
    captured = capsys.readouterr()
    assert "Traceback" not in captured.err
    return code, json.loads(captured.out) if captured.out else {}, captured.err


SMALL = "".join(
    json.dumps(row) + "\n"
    for row in [
        {"timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3]},
        {"timestamp": 0, "input_length": 20, "output_length": 2, "hash_ids": [1, 2]},
        {"timestamp": 30, "input_length": 45, "output_length": 4, "hash_ids": [1, 2, 3]},
        {"timestamp": 60, "input_length": 12, "output_length": 1, "hash_ids": [7]},
    ]
)


def test_a_replay_sends_every_request_sized_in_server_tokens_with_shared_blocks(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, err = replay(fake, write(tmp_path, SMALL), capsys, "--trace-block-tokens", "16")
    assert code == 0, err
    jsonschema.Draft202012Validator(json.loads(schema_text("bench.schema.json"))).validate(doc)
    assert doc["schema_version"] == 6
    trace = doc["trace"]
    assert (trace["format"], trace["block_tokens"], trace["requests"], trace["sent"]) == (
        "mooncake",
        16,
        4,
        4,
    )
    assert trace["size_source"] == "tokenize"
    assert trace["lateness_ms"]["p50"] >= 0
    assert trace["lateness_max_ms"] >= 0
    # Every request's lateness kept as the distribution's order statistics (4 of them here).
    cdf = trace["lateness_cdf_ms"]
    assert len(cdf) == 4
    assert cdf == sorted(cdf)
    assert cdf[-1] == trace["lateness_max_ms"]
    (shape,) = doc["shapes"]
    assert shape["name"] == "trace"
    assert shape["completed"] == 4
    # Each prompt is the trace's input length in the server's own count (usage).
    assert [s["prompt_tokens"] for s in shape["samples"]] == [40, 20, 45, 12]
    assert [s["output_tokens"] for s in shape["samples"]] == [3, 2, 4, 1]
    assert shape["metrics"]["server_generation_tokens"] == shape["metrics"]["output_tokens"] == 10
    # Sent in the trace's order (the first two, both due at 0, leave together and reach the
    # server in either order), each prompt made of its blocks.
    sent = [c["messages"][0]["content"].split() for c in fake.chats]
    assert sorted(len(t) for t in sent[:2]) == [20 - 7, 40 - 7]
    assert [len(t) for t in sent[2:]] == [45 - 7, 12 - 7]
    texts = sorted(sent[:2], key=len, reverse=True) + sent[2:]
    assert texts[0][:13] == texts[1]  # hash ids 1, 2 (the second's prompt ends inside 2)
    assert texts[0][:32] == texts[2][:32]  # hash ids 1, 2 and most of 3
    assert texts[3][0:5] != texts[0][0:5]
    # Every word is one token to this server: none longer than five letters.
    assert all(len(w) <= 5 for t in texts for w in t)
    assert all(c["ignore_eos"] and c["max_tokens"] >= 1 for c in fake.chats)
    # What an earlier request carried, from the prompt's start (with the template's 7):
    # the second request all of its 13 words, the third blocks 1 and 2 and the one word of
    # block 3 that the first request sent. What a prefix cache could serve.
    assert texts[0][:33] == texts[2][:33]
    assert trace["prompt_tokens"] == 40 + 20 + 45 + 12
    assert trace["reusable_prompt_tokens"] == (13 + 7) + (33 + 7)


def test_a_replay_keeps_the_trace_times(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, doc, err = replay(
        fake, write(tmp_path, SMALL), capsys, "--trace-block-tokens", "16", "--time-scale", "5"
    )
    assert code == 0, err
    starts = [s["start_ms"] for s in doc["shapes"][0]["samples"]]
    # Due at 0, 0, 150 and 300 ms (x 5): none sent before its time.
    assert [round(s) >= due for s, due in zip(starts, [0, 0, 150, 300], strict=True)]
    assert all(s >= due for s, due in zip(starts, [0, 0, 150, 300], strict=True))
    assert doc["trace"]["span_s"] == pytest.approx(0.3)


def test_a_bad_trace_is_exit_2_one_line_and_nothing_is_sent(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    bad = SMALL + '{"timestamp": 10, "input_length": 12, "output_length": 1}\n'
    path = write(tmp_path, bad)
    code, _, err = replay(fake, path, capsys, "--trace-block-tokens", "16")
    assert code == 2
    assert err.startswith("blackwell-doctor: error: "), err
    assert err.count("\n") == 1, err
    assert f"trace {path}, line 5: timestamp 0.01 s comes before" in err
    assert fake.chats == []
    assert fake.tokenized == 0


@pytest.mark.parametrize(
    ("extra", "words"),
    [
        (["--shape", "short"], "does not take --shape"),
        (["--repeat", "2"], "does not take --repeat"),
        (["--time-scale", "0"], "--time-scale must be a number above 0"),
        (["--time-scale", "nan"], "--time-scale must be a number above 0"),
        (["--trace-format", "csv"], "--trace-format is auto, mooncake or burstgpt"),
    ],
)
def test_trace_options_that_do_not_go_together_are_exit_2(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str], extra: list[str], words: str
) -> None:
    code, _, err = replay(fake, write(tmp_path, SMALL), capsys, *extra)
    assert code == 2, err
    assert words in err, err
    assert fake.chats == []


def test_trace_options_without_a_trace_are_exit_2(
    fake: Fake, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(["bench", "--url", fake.url, "--time-scale", "2"])
    assert code == 2
    assert "--time-scale applies to --trace FILE" in capsys.readouterr().err


def test_a_replay_reads_as_text_with_its_lateness(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code = main(
        [
            "bench",
            "--url",
            fake.url,
            "--trace",
            str(write(tmp_path, SMALL)),
            "--trace-block-tokens",
            "16",
        ]
    )
    out = capsys.readouterr().out
    assert code == 0
    assert "trace " in out
    assert "(mooncake, blocks of 16 tokens)" in out
    assert "4/4 requests sent" in out
    assert "lateness" in out
    assert "in blocks an earlier request carried" in out


def test_the_replays_quick_metrics_poll_reads_what_the_full_parse_reads() -> None:
    from blackwell_doctor.collect.bench.server_metrics import only_read_lines, parse
    from tests.conftest import FIXTURES

    text = (FIXTURES / "bench/vllm-0.32.0-cpu/metrics.txt").read_text()
    assert parse(text, model="tiny-moe", quick=True) == parse(text, model="tiny-moe")
    assert len(only_read_lines(text)) < len(text) // 5


def test_a_replay_of_many_close_requests_measures_every_one(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = (
        json.dumps({"timestamp": i * 2, "input_length": 12, "output_length": 2}) for i in range(300)
    )
    code, doc, err = replay(fake, write(tmp_path, "\n".join(rows) + "\n"), capsys)
    assert code == 0, err
    assert doc["complete"]
    assert (doc["trace"]["sent"], doc["shapes"][0]["completed"]) == (300, 300)
    assert len(fake.chats) == 300
    # Sent in order, none before its time (2 ms apart).
    starts = [s["start_ms"] for s in doc["shapes"][0]["samples"]]
    assert all(start >= 2.0 * i for i, start in enumerate(starts))


@pytest.mark.parametrize("processes", ["1", "2"])
def test_ctrl_c_in_a_replay_writes_what_was_measured_and_exits_130(
    fake: Fake, tmp_path: Path, processes: str
) -> None:
    from tests.child import cli_child

    rows = [
        {"timestamp": 0, "input_length": 12, "output_length": 2},
        {"timestamp": 10, "input_length": 12, "output_length": 2},
        *({"timestamp": 3_600_000, "input_length": 12, "output_length": 2} for _ in range(3)),
    ]
    path = write(tmp_path, "".join(json.dumps(r) + "\n" for r in rows))
    out = tmp_path / "partial.json"
    argv = ["--url", fake.url, "--trace", str(path), "--client-processes", processes]
    with cli_child("bench", *argv, "-o", str(out)) as child:
        child.wait_for_line(lambda line: "replaying 2/5 requests" in line, deadline_s=120)
        child.interrupt()
        code, _, err = child.finish(timeout_s=60)
    assert code == 130, err
    doc = json.loads(out.read_text())
    assert doc["interrupted"] is True
    assert doc["complete"] is False
    assert (doc["trace"]["sent"], doc["trace"]["requests"]) == (2, 5)
    assert doc["trace"]["client_processes"] == int(processes)
    assert doc["shapes"][0]["completed"] == 2
    assert len(fake.chats) == 2


def test_client_processes_share_the_replay_and_every_request_is_measured_once(
    fake: Fake, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    rows = (
        json.dumps(
            {"timestamp": i * 2, "input_length": 20, "output_length": 2, "hash_ids": [1, 100 + i]}
        )
        for i in range(200)
    )
    path = write(tmp_path, "\n".join(rows) + "\n")
    code, doc, err = replay(
        fake, path, capsys, "--client-processes", "3", "--trace-block-tokens", "16"
    )
    assert code == 0, err
    trace = doc["trace"]
    assert trace["client_processes"] == 3
    assert (trace["sent"], doc["shapes"][0]["completed"]) == (200, 200)
    samples = doc["shapes"][0]["samples"]
    assert [s["prompt_tokens"] for s in samples] == [20] * 200
    assert all(s["start_ms"] >= 2.0 * i for i, s in enumerate(samples))
    # The shared block is the same text whichever process built the prompt.
    firsts = {tuple(c["messages"][0]["content"].split()[:16]) for c in fake.chats}
    assert len(firsts) == 1
    assert len(fake.chats) == 200


def test_the_busiest_second_sets_the_client_processes(tmp_path: Path) -> None:
    from blackwell_doctor.app.clients import REQUESTS_PER_PROCESS
    from blackwell_doctor.app.replay import client_processes

    rows = "".join(
        json.dumps({"timestamp": i, "input_length": 10, "output_length": 1}) + "\n"
        for i in range(1000)  # 1,000 requests in one second
    )
    trace = read_trace(write(tmp_path, rows))
    assert client_processes(trace, 1.0, 2) == 2
    assert client_processes(trace, 1.0, None) >= 1
    # Ten times slower: 100 a second, one process.
    assert client_processes(trace, 10.0, None) == 1
    assert REQUESTS_PER_PROCESS == 200
