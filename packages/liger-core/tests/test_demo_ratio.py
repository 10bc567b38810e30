"""The demo's speed ratio reads as words with significant digits, never ``0.00x``."""

from __future__ import annotations

from liger_core.demo import speed_ratio


def test_a_much_slower_liger_is_not_printed_as_zero():
    assert speed_ratio(0.002, 1.5) == "liger 750x slower"
    assert speed_ratio(0.01, 0.012) == "liger 1.2x slower"


def test_a_faster_liger_gives_its_speedup():
    assert speed_ratio(1.5, 1.0) == "liger 1.50x as fast"
    assert speed_ratio(1.0, 0.0) == "no ratio: a zero time"
