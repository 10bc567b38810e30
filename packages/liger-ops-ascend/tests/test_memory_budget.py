"""The shared memory-budget check (`liger_core.conformance.memory_budget`) against this package's
backend, and this package's chunk plan under a budget."""

from liger_core.conformance.memory_budget import *
from liger_core.memory_budget import fused_linear_memory_budget, logits_budget

from liger_ops_ascend import hardware
from liger_ops_ascend._tiling import chunk_tokens


def test_plan_rows_multiple_of_the_tile_within_the_budget(monkeypatch):
    monkeypatch.delenv("LIGER_FLCE_MEMORY_BUDGET", raising=False)
    vocab, multiple = 128256, hardware.FUSED_LINEAR_ROW_MULTIPLE
    for mib in (128, 256, 512, 1024):
        budget = mib * 2**20
        with fused_linear_memory_budget(budget):
            rows = chunk_tokens(16384, 2048, vocab, 2)
        assert rows % multiple == 0 and rows * vocab * 2 <= budget < (rows + multiple) * vocab * 2
    # No budget set: the earlier rule, logits about as many elements as the input (a power of two).
    assert hardware.FUSED_LINEAR_MEMORY_BUDGET is None
    assert chunk_tokens(16384, 2048, vocab, 2) == 512
    assert logits_budget(1234, 4) == 1234
    monkeypatch.setenv("LIGER_FLCE_MEMORY_BUDGET", "1KiB")
    assert chunk_tokens(100, 8, vocab) == 1  # below one row: one row per chunk
    assert logits_budget(1234, 4) == 256
