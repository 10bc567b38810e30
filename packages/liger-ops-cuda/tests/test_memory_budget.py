"""The shared memory-budget check (`liger_core.conformance.memory_budget`) against this package's
backend, and this package's chunk plan under a budget."""

import pytest

from liger_core.conformance.memory_budget import *  # noqa: F403
from liger_core.memory_budget import fused_linear_memory_budget, logits_budget
from liger_ops_cuda import hardware
from liger_ops_cuda._tiling import plan_chunks


def test_plan_rows_multiple_of_the_tile_within_the_budget():
    vocab = 128256
    for mib in (128, 256, 512, 1024):
        budget = mib * 2**20
        with fused_linear_memory_budget(budget):
            rows = plan_chunks(16384, vocab, bytes_per_logit=2)
        assert rows % hardware.FUSED_LINEAR_ROW_MULTIPLE == 0
        assert rows * vocab * 2 <= budget < (rows + hardware.FUSED_LINEAR_ROW_MULTIPLE) * vocab * 2
    # The default: 1 GiB of bf16 logits at LLaMA-3's vocabulary is 4096 rows.
    assert plan_chunks(16384, vocab, bytes_per_logit=2) == 4096
    assert plan_chunks(100, vocab) == 100  # never more rows than tokens
    with fused_linear_memory_budget(1):
        assert plan_chunks(100, vocab) == 1  # below one row: one row per chunk, never zero


def test_env_budget_reaches_the_plan(monkeypatch):
    monkeypatch.setenv("LIGER_FLCE_MEMORY_BUDGET", "256MiB")
    assert plan_chunks(16384, 128256, bytes_per_logit=2) == 1024
    # An element count an op keeps as its default gives way to a budget that was set.
    assert logits_budget(1234, 4) == 2**28 // 4
    monkeypatch.delenv("LIGER_FLCE_MEMORY_BUDGET")
    assert logits_budget(1234, 4) == 1234


def test_bad_env_budget_names_the_variable(monkeypatch):
    monkeypatch.setenv("LIGER_FLCE_MEMORY_BUDGET", "lots")
    with pytest.raises(ValueError, match="LIGER_FLCE_MEMORY_BUDGET must be a positive number of bytes.*'lots'"):
        plan_chunks(10, 10)


def test_frontier_records_the_chunks_each_budget_gives(monkeypatch, device):
    """`liger bench --frontier` through this backend: the logits GEMMs' row counts follow the budget
    (fp32 logits of 96 classes: 3072 bytes hold 8 rows, 6144 bytes 16)."""
    from dataclasses import replace

    import torch

    from liger_core.bench import frontier
    from liger_core.bench.configs import get_config

    shape = replace(get_config("tiny"), name="t", tokens=40, hidden=16, vocab=96)
    result = frontier.run_frontier(
        shapes=[shape], budgets_mib=(3072 / 2**20, 6144 / 2**20), providers=[], dtype=torch.float32,
        device=device, backend="cuda", timer="wall", rep_ms=1, progress=False, gemm_bound=False,
    )  # fmt: skip
    points = result["fused_linear_cross_entropy"]["points"]
    assert [p["status"] for p in points] == ["ok", "ok"], points
    assert [p["chunk_rows"] for p in points] == [[8], [8, 16]]
