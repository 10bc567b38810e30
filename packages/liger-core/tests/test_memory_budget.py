"""The fused linear memory budget (`liger_core.memory_budget`): parsing and its errors, where the
budget comes from (call, module, environment, vendor default), and the chunk-row plan."""

from __future__ import annotations

import inspect

import pytest
import torch

from liger_core import functional as F
from liger_core import memory_budget as M
from liger_core.nn.losses import LigerFusedLinearCrossEntropyLoss, LigerFusedLinearJSD


@pytest.mark.parametrize(
    "text, expected",
    [
        (536870912, 512 * 2**20),
        ("536870912", 512 * 2**20),
        ("512MiB", 512 * 2**20),
        ("512 mib", 512 * 2**20),
        ("1GiB", 2**30),
        ("1.5GiB", 3 * 2**29),
        ("64KiB", 64 * 1024),
        ("500MB", 500 * 10**6),
        ("2GB", 2 * 10**9),
        ("100B", 100),
    ],
)
def test_parse(text, expected):
    assert M.parse_memory_budget(text) == expected


@pytest.mark.parametrize(
    "value, error, match",
    [
        ("lots", ValueError, r"memory_budget must be a positive number of bytes.*got 'lots'"),
        ("512 parsecs", ValueError, r"got '512 parsecs'"),
        ("0MiB", ValueError, r"got '0MiB' \(0 bytes\)"),
        (0, ValueError, r"got 0 \(0 bytes\)"),
        (-5, ValueError, r"got -5"),
        ("-5", ValueError, r"got '-5'"),
        (1.5, TypeError, r"got float 1.5"),
        (True, TypeError, r"got bool True"),
        (None, TypeError, r"got NoneType None"),
    ],
)
def test_parse_errors_name_the_argument_the_expected_and_the_actual(value, error, match):
    with pytest.raises(error, match=match):
        M.parse_memory_budget(value)
    with pytest.raises(error, match="LIGER_FLCE_MEMORY_BUDGET must be"):
        M.parse_memory_budget(value, "LIGER_FLCE_MEMORY_BUDGET")


def test_sources_in_order(monkeypatch):
    monkeypatch.delenv(M.MEMORY_BUDGET_ENV, raising=False)
    assert M.current_memory_budget(123) == 123 and not M.budget_is_set()
    assert M.current_memory_budget(None) is None
    monkeypatch.setenv(M.MEMORY_BUDGET_ENV, "256MiB")
    assert M.current_memory_budget(123) == 256 * 2**20 and M.budget_is_set()
    with M.fused_linear_memory_budget("1KiB"):
        assert M.current_memory_budget(123) == 1024
        with M.fused_linear_memory_budget(None):  # None changes nothing
            assert M.current_memory_budget(123) == 1024
        with M.fused_linear_memory_budget(7):
            assert M.current_memory_budget(123) == 7
        assert M.current_memory_budget(123) == 1024
    assert M.current_memory_budget(123) == 256 * 2**20
    monkeypatch.setenv(M.MEMORY_BUDGET_ENV, "12 apples")
    with pytest.raises(ValueError, match="LIGER_FLCE_MEMORY_BUDGET must be a positive number of bytes.*'12 apples'"):
        M.current_memory_budget(123)


def test_context_resets_on_error():
    with pytest.raises(RuntimeError), M.fused_linear_memory_budget(5):
        raise RuntimeError
    assert M.current_memory_budget(9) == 9


@pytest.mark.parametrize("multiple", [128, 256])
def test_chunk_rows_multiple_of_the_tile_and_within_the_budget(multiple):
    for vocab in (128256, 151936, 262144):
        for itemsize in (2, 4):
            for mib in (64, 128, 256, 512, 1024):
                budget = mib * 2**20
                rows = M.chunk_rows(16384, vocab * itemsize, budget, multiple)
                assert rows * vocab * itemsize <= budget, "the formula keeps the buffers within the budget"
                if budget >= multiple * vocab * itemsize:
                    assert rows % multiple == 0 and rows > 0
                    assert (rows + multiple) * vocab * itemsize > budget, "the largest such multiple"


def test_chunk_rows_edges():
    assert M.chunk_rows(100, 1000, 10**9, 256) == 100  # never more rows than there are
    assert M.chunk_rows(100, 1000, 1, 256) == 1  # below one row: one row, never zero
    assert M.chunk_rows(10**6, 1000, 200 * 1000, 256) == 200  # below one tile: whole rows that fit
    assert M.chunk_rows(0, 1000, 10**9, 256) == 1  # no rows: a step of 1 for an empty range
    assert M.logits_budget_elements(1000, 4) == 250


def test_functional_and_modules_take_the_budget(monkeypatch):
    seen = []
    monkeypatch.setattr(F, "resolve", lambda op, dev: lambda *a: seen.append(M.current_memory_budget(None)))
    x, w, t = torch.zeros(2, 3), torch.zeros(5, 3), torch.zeros(2, dtype=torch.long)
    F.liger_fused_linear_cross_entropy(x, w, t, memory_budget="2KiB")
    F.liger_fused_linear_cross_entropy(x, w, t)
    LigerFusedLinearCrossEntropyLoss(memory_budget=4096)(w, x, t)
    LigerFusedLinearJSD(memory_budget="3KiB")(x, w, x, w)
    assert seen == [2048, None, 4096, 3072]
    assert inspect.signature(F.liger_fused_linear_grpo).parameters["memory_budget"].default is None
    with pytest.raises(ValueError, match=r"memory_budget must be a positive number of bytes.*got 'big'"):
        F.liger_fused_linear_cross_entropy(x, w, t, memory_budget="big")
    with pytest.raises(ValueError, match=r"LigerFusedLinearCrossEntropyLoss: memory_budget must be.*got 0"):
        LigerFusedLinearCrossEntropyLoss(memory_budget=0)


def test_every_fused_linear_module_takes_the_budget(monkeypatch):
    from liger_core import nn as N

    classes = [
        getattr(N, name)
        for name in dir(N)
        if name.startswith("LigerFusedLinear") and isinstance(getattr(N, name), type)
    ]
    assert len(classes) >= 10, classes
    for cls in classes:
        assert cls(memory_budget="1MiB").memory_budget == 2**20, cls
        assert cls().memory_budget is None, cls
        with pytest.raises(ValueError, match=rf"{cls.__name__}: memory_budget must be"):
            cls(memory_budget="lots")
