"""config.json as Python's ``json`` writes it (issue 34, item 1): ``NaN``, ``Infinity`` and
``-Infinity`` for floats that are not finite, which NVIDIA's Nemotron-H configs carry
(``"time_step_limit": [0.0, Infinity]``) and transformers reads. They are read; everything
else msgspec refuses stays refused with its own message, and the caps stay."""

from __future__ import annotations

import json
import math
from pathlib import Path

import pytest

from blackwell_doctor.collect.model.header import HeaderError
from blackwell_doctor.collect.model.jsondoc import decode_json
from blackwell_doctor.collect.model.scan import read_model_dir
from tests.cli import run

MODELS = Path(__file__).parent / "fixtures" / "models"


def _nemotron_with_infinity(tmp_path: Path) -> Path:
    cfg = json.loads((MODELS / "nemotron-3-nano-30b-a3b" / "config.json").read_text())
    cfg["time_step_limit"] = [0.0, math.inf]  # as NVIDIA's configs have it
    root = tmp_path / "nemotron"
    root.mkdir()
    text = json.dumps(cfg, indent=2)  # Python's json: allow_nan=True writes Infinity
    assert "Infinity" in text
    (root / "config.json").write_text(text)
    return root


def test_a_config_with_infinity_is_counted_as_without_it(tmp_path: Path) -> None:
    facts = read_model_dir(_nemotron_with_infinity(tmp_path))
    plain = read_model_dir(MODELS / "nemotron-3-nano-30b-a3b")
    assert facts.problems == []
    assert facts.parameters == plain.parameters
    assert facts.parameters is not None
    assert facts.parameters.total == 31_577_940_288


def test_the_three_constants_decode_as_python_reads_them() -> None:
    doc = decode_json(b'{"a": [NaN, Infinity, -Infinity], "b": "NaN"}')
    a = doc["a"]
    assert math.isnan(a[0])
    assert a[1] == math.inf
    assert a[2] == -math.inf
    assert doc["b"] == "NaN"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        # A syntax error that mentions the word in a string keeps msgspec's message.
        (b'{"a": "Infinity",}', "not valid JSON: JSON is malformed"),
        # A lone surrogate escape: msgspec refuses it, the standard library would not.
        (b'{"a": "\\ud800", "b": Infinity}', None),
        (b'{"a": "\\ud800"}', "not valid JSON:"),
        (b'{"a": Infinity', "not valid JSON: JSON is malformed"),
        (b"[" * 200_000 + b"Infinity" + b"]" * 200_000, "nested too deeply"),
        (b'{"a": "\xff", "b": NaN}', "not valid JSON: not UTF-8 (byte 0xff at offset 7)"),
    ],
)
def test_what_msgspec_refuses_for_another_reason_stays_refused(
    data: bytes, message: str | None
) -> None:
    if message is None:  # with a constant present, the standard library's reading stands
        assert decode_json(data)["b"] == math.inf
        return
    with pytest.raises(HeaderError) as err:
        decode_json(data)
    assert str(err.value).startswith(message)
    assert "\n" not in str(err.value)


def test_a_count_that_is_infinity_is_a_corrupt_config_one_line_and_exit_2(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    root = tmp_path / "m"
    root.mkdir()
    (root / "config.json").write_text(
        '{"model_type": "llama", "hidden_size": Infinity, "num_hidden_layers": 2,'
        ' "num_attention_heads": 2, "vocab_size": 10}'
    )
    code, out, err = run(["model", str(root)], capsys)
    assert code == 2
    assert "hidden_size = inf: not a count (corrupt)" in err
    assert len(err.strip().splitlines()) == 1
    assert "Traceback" not in err + out
