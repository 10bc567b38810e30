"""The shared memory-budget check (`liger_core.conformance.memory_budget`) against this package's
backend, and this package's chunk plan under a budget."""

from liger_core.conformance.memory_budget import *
from liger_core.memory_budget import fused_linear_memory_budget, logits_budget

from liger_ops_xpu import hardware
from liger_ops_xpu._tiling import plan_chunks


def test_plan_rows_multiple_of_the_tile_within_the_budget(monkeypatch):
    monkeypatch.delenv("LIGER_FLCE_MEMORY_BUDGET", raising=False)
    vocab, multiple = 128256, hardware.FUSED_LINEAR_ROW_MULTIPLE
    for mib in (128, 256, 512, 1024):
        budget = mib * 2**20
        with fused_linear_memory_budget(budget):
            rows = plan_chunks(16384, vocab, bytes_per_logit=2)
        assert rows % multiple == 0 and rows * vocab * 2 <= budget < (rows + multiple) * vocab * 2
    # The default: 256 MiB of bf16 logits at LLaMA-3's vocabulary is 1024 rows.
    assert plan_chunks(16384, vocab, bytes_per_logit=2) == 1024
    assert logits_budget(1234, 4) == 1234
    with fused_linear_memory_budget("1KiB"):
        assert plan_chunks(100, vocab) == 1  # below one row: one row per chunk
        assert logits_budget(1234, 4) == 256
