"""``fleet --format json`` streamed (issue 36): the nodes judged into a spool and written a
few hundred at a time join to exactly the document :func:`render_fleet` writes whole."""

from __future__ import annotations

from pathlib import Path

import pytest

from blackwell_doctor.app import fleet
from blackwell_doctor.app.fleet import expand_inputs, judge_fleet, judge_fleet_spooled
from blackwell_doctor.facts.document import encode_facts
from blackwell_doctor.render import fleet as render
from blackwell_doctor.render.fleet import json_pieces, render_fleet
from blackwell_doctor.render.formats import FleetFormat
from tests.conftest import FACTS_FIXTURES
from tests.factsutil import load
from tests.test_fleet import write_node


def _both(*inputs: Path) -> tuple[str, str]:
    paths, missing = expand_inputs([str(i) for i in inputs])
    whole = render_fleet(judge_fleet(paths, missing), FleetFormat.JSON)
    report, spool = judge_fleet_spooled(paths, missing)
    try:
        assert report.nodes == []
        return whole, "".join(json_pieces(report, spool))
    finally:
        spool.close()


@pytest.mark.parametrize("held", [1, 1024])  # every node spooled to a file / none
@pytest.mark.parametrize("per_piece", [1, 5, 256])
def test_streamed_json_is_the_whole_document(
    per_piece: int, held: int, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # Two files claiming one host (listed with their files), a name a terminal would act
    # on (escaped), a file name that is not UTF-8 (a str with a surrogate: spooled as its
    # UTF-8 bytes, surrogates passed through), and a file that is not facts (unjudged).
    monkeypatch.setattr(fleet, "SPOOL_HELD", held)
    (tmp_path / b"gpu\xff.json".decode("utf-8", "surrogateescape")).write_bytes(
        encode_facts(load("sm120-driver580"))
    )
    write_node(tmp_path, "sm120-driver580", "gpu001", file="a")
    write_node(tmp_path, "sm120-driver580", "gpu001", file="b")
    write_node(tmp_path, "h200x2-captured", "node\u202ex\x9bfoo")
    (tmp_path / "bad.json").write_text("{")
    monkeypatch.setattr(render, "NODES_PER_PIECE", per_piece)
    whole, streamed = _both(FACTS_FIXTURES, tmp_path)
    assert "gpu\\\\xff.json" in whole
    assert "gpu001 (" in whole
    assert "\\u202e" in whole
    assert '"unjudged": [\n' in whole
    assert streamed == whole


def test_streamed_json_of_no_node_and_no_group(tmp_path: Path) -> None:
    (tmp_path / "bad.json").write_text("{")
    whole, streamed = _both(tmp_path)
    assert '"groups": []' in whole
    assert '"nodes": []' in whole
    assert streamed == whole
