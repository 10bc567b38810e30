"""Shared check for vendor backends: the fused linear memory budget (`liger_core.memory_budget`)
reaches every fused linear loss. Under a budget of one byte each chunk holds the fewest rows,
sequences or pairs a backend allows, so every chunk loop runs many times, and every output and
gradient must still match the float64 oracle; fused_linear_cross_entropy's logits chunks (torch
GEMMs on every vendor) are counted to show the budget was obeyed.

The reference backend computes all logits at once (it is the oracle), so core's own suite does not
run this. A vendor package runs it from its tests:

    # tests/test_memory_budget.py
    from liger_core.conformance.memory_budget import *  # noqa: F403
"""

from __future__ import annotations

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from liger_core.conformance import require_op
from liger_core.conformance.check import check, check_sample, make_args
from liger_core.interface import CATALOGUE
from liger_core.memory_budget import fused_linear_memory_budget

__all__ = ["test_one_byte_budget_matches_reference", "test_one_byte_budget_chunks_cross_entropy"]

FUSED_LINEAR = sorted(name for name in CATALOGUE if name.startswith("fused_linear_"))
_MM = {torch.ops.aten.mm.default, torch.ops.aten.mm.out, torch.ops.aten.addmm.default, torch.ops.aten.addmm.out}


class _LogitsGemms(TorchDispatchMode):
    """Records the row count of every matmul whose output is ``(rows, vocab)``, the float64
    oracle's aside."""

    def __init__(self, vocab: int) -> None:
        super().__init__()
        self.vocab, self.rows = vocab, []

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if (
            func in _MM
            and isinstance(out, torch.Tensor)
            and out.dtype != torch.float64
            and out.ndim == 2
            and out.shape[1] == self.vocab
        ):
            self.rows.append(out.shape[0])
        return out


def _samples():
    for name in FUSED_LINEAR:
        for s in CATALOGUE[name].smoke:
            yield pytest.param(name, s, id=f"{name}-{s.id}")


@pytest.mark.parametrize("op, sample", list(_samples()))
def test_one_byte_budget_matches_reference(conformance_backend, conformance_device, op, sample):
    require_op(conformance_backend, op)
    with fused_linear_memory_budget(1):
        check_sample(conformance_backend, op, sample, conformance_device)


@pytest.mark.parametrize("reduction", ["mean", "none"])
def test_one_byte_budget_chunks_cross_entropy(conformance_backend, conformance_device, reduction):
    """One token per chunk (a budget below one row still runs one row at a time), more tokens than
    hidden units (the chunked path), and the results match the oracle."""
    require_op(conformance_backend, "fused_linear_cross_entropy")
    tokens, hidden, vocab = 13, 8, 30
    args = make_args("fused_linear_cross_entropy", conformance_device, shape=(tokens, hidden, vocab), seed=7, bias=True)
    seen = _LogitsGemms(vocab)
    with fused_linear_memory_budget(1), seen:
        check(conformance_backend, "fused_linear_cross_entropy", args, grad_scalar=0.5, reduction=reduction)
    assert seen.rows, "no (rows, vocab) logits GEMM seen"
    assert max(seen.rows) == 1, f"a one-byte budget gave chunks of {sorted(set(seen.rows))} rows"
    assert len(seen.rows) >= tokens, f"{len(seen.rows)} logits GEMMs for {tokens} one-token chunks"
