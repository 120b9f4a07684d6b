"""The kinds of fatbin container in a file (collect.stack.inventory._units), worked out once
per list of target names (issue 36: sorting each container's names again was ~490 ms of a
warm audit), are those counted one container at a time."""

from __future__ import annotations

from collections import Counter
from typing import Any

from blackwell_doctor.collect.stack.inventory import Triples, _kind, _units
from blackwell_doctor.facts.stack import KernelUnit
from tests.conftest import skip_without

try:
    from hypothesis import given, settings
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)


def _one_at_a_time(scan: Triples) -> tuple[list[KernelUnit], tuple[int, int] | None]:
    """The definition: each container's names sorted into its kind, its largest PTX and
    LTO-IR entries added to its kind's bytes, the newest PTX ISA of any entry."""
    counts: Counter[Any] = Counter()
    ptx_bytes: Counter[Any] = Counter()
    lto_bytes: Counter[Any] = Counter()
    isa: tuple[int, int] | None = None
    for unit in scan:
        names = {n for n, _, _ in unit}
        key = (_kind(names, "sm_"), _kind(names, "compute_"), _kind(names, "lto_"))
        for n, v, _ in unit:
            if n.startswith("compute_"):
                major, minor = (int(x) for x in v.split("."))
                isa = max(isa or (major, minor), (major, minor))
        counts[key] += 1
        ptx_bytes[key] += max((b for n, _, b in unit if n.startswith("compute_")), default=0)
        lto_bytes[key] += max((b for n, _, b in unit if n.startswith("lto_")), default=0)
    units = [
        KernelUnit(
            sass=list(s),
            ptx=list(p),
            lto=list(lt),
            count=c,
            ptx_bytes=ptx_bytes[(s, p, lt)],
            lto_bytes=lto_bytes[(s, p, lt)],
        )
        for (s, p, lt), c in sorted(counts.items())
    ]
    return units, isa


_SASS = ["sm_50", "sm_80", "sm_90", "sm_90a", "sm_100f", "sm_120", "sm_120a", "sm_121a"]
_NAMES = st.sampled_from(
    [*_SASS, "compute_80", "compute_90", "compute_120", "compute_121a", "lto_75", "lto_90"]
)
_ENTRY = st.tuples(_NAMES, st.sampled_from(["7.1", "8.0", "8.7", "9.0"]), st.integers(0, 1 << 30))
# Few distinct containers, repeated (as a library's are), and any list of entries.
_SCAN = st.lists(st.lists(_ENTRY, max_size=6), min_size=1, max_size=6).flatmap(
    lambda kinds: st.lists(st.sampled_from(kinds), max_size=80)
)


@settings(max_examples=300, deadline=None)
@given(_SCAN | st.lists(st.lists(_ENTRY, max_size=6), max_size=40))
def test_containers_are_counted_as_one_at_a_time(scan: Triples) -> None:
    assert _units(scan) == _one_at_a_time(scan)
