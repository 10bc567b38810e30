"""`vocab_parallel_cross_entropy` across processes (two CPU ranks over gloo, the reference
backend) and its nn module; the single-process cases run in the conformance suite."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F

from liger_core.conformance.distributed import check_vocab_parallel
from liger_core.nn import LigerVocabParallelCrossEntropy


def test_two_ranks_equal_one_process():
    """Loss and every rank's shard gradient equal the full-vocabulary float64 reference."""
    check_vocab_parallel("reference")


@pytest.mark.parametrize("reduction", ["none", "mean"])
def test_module_one_process(reduction):
    """liger-kernel's module shape: (seq, batch, vocab) logits, (seq, batch) targets."""
    g = torch.Generator().manual_seed(0)
    logits = torch.randn(3, 4, 11, generator=g, dtype=torch.float64).float().requires_grad_(True)
    target = torch.randint(0, 11, (3, 4), generator=g)
    target[0, 1] = -100
    loss = LigerVocabParallelCrossEntropy(reduction=reduction)(logits, target)
    ref_logits = logits.detach().double().requires_grad_(True)
    ref = F.cross_entropy(ref_logits.reshape(-1, 11), target.reshape(-1), reduction=reduction)
    ref = ref.reshape(3, 4) if reduction == "none" else ref
    assert loss.shape == ref.shape
    up = torch.randn(ref.shape, generator=g, dtype=torch.float64)
    loss.backward(up.float())
    ref.backward(up)
    torch.testing.assert_close(loss.double(), ref.detach(), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(logits.grad.double(), ref_logits.grad, rtol=1e-5, atol=1e-6)


def test_module_options():
    with pytest.raises(ValueError, match=r"LigerVocabParallelCrossEntropy: reduction must be one of"):
        LigerVocabParallelCrossEntropy(reduction="avg")
    with pytest.raises(TypeError, match=r"ignore_index must be an int; got 'x'"):
        LigerVocabParallelCrossEntropy(ignore_index="x")
    assert "reduction='none'" in repr(LigerVocabParallelCrossEntropy())
