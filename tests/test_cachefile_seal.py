"""The seal of a cache file (collect/cachefile.py's sealed/unseal): the payload's length
and CRC-32 after the file's magic and key. A payload is given back only as it was sealed."""

from __future__ import annotations

from blackwell_doctor.collect import cachefile
from blackwell_doctor.collect.cachefile import CatalogueCache
from tests.conftest import skip_without

try:
    from hypothesis import given
    from hypothesis import strategies as st
except ModuleNotFoundError as exc:
    skip_without(exc)


@given(
    payload=st.binary(min_size=1, max_size=4096),
    where=st.integers(min_value=0),
    bit=st.integers(min_value=0, max_value=7),
    cut=st.integers(min_value=0),
)
def test_a_seal_refuses_every_changed_bit_cut_or_growth(
    payload: bytes, where: int, bit: int, cut: int
) -> None:
    """The seal (length and CRC-32 of the payload) refuses a payload with any one bit
    changed (a CRC-32 finds every error of up to 32 bits in a row), one cut short at any
    length, or one with bytes after it; it gives back the payload it sealed."""
    key = bytes(range(32))
    blob = cachefile.sealed(CatalogueCache.MAGIC, key, payload)
    assert cachefile.unseal(blob, CatalogueCache.MAGIC, key) == payload
    head = len(blob) - len(payload)
    at = head + where % len(payload)
    flipped = blob[:at] + bytes([blob[at] ^ (1 << bit)]) + blob[at + 1 :]
    assert cachefile.unseal(flipped, CatalogueCache.MAGIC, key) is None
    assert cachefile.unseal(blob[: head + cut % len(payload)], CatalogueCache.MAGIC, key) is None
    assert cachefile.unseal(blob + b"\0", CatalogueCache.MAGIC, key) is None
    assert cachefile.unseal(blob, CatalogueCache.MAGIC, bytes(32)) is None  # another key
