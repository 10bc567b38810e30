"""XPU-specific cross-entropy paths: several vocabulary blocks per row (a ragged last block)
with every option on, and in_place. The block is lowered so shapes stay small; checked against
the declaration's float64 oracle."""

import pytest
import torch
from liger_core.conformance.check import check
from liger_core.ops import cross_entropy

from liger_ops_xpu import BACKEND, hardware
from liger_ops_xpu._cross_entropy import plan_vocab


@pytest.fixture
def small_vocab_blocks(monkeypatch):
    monkeypatch.setattr(hardware, "LOSS_VOCAB_BLOCK", 16)


@pytest.mark.parametrize("reduction", ["mean", "none"])
@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16], ids=["fp32", "bf16"])
def test_cross_entropy_several_vocab_blocks(small_vocab_blocks, device, reduction, dtype):
    assert plan_vocab(70).n_chunks == 5
    check(
        BACKEND, "cross_entropy", cross_entropy.args(device, shape=(13, 70), dtype=dtype, weighted=True),
        lse_square_scale=1e-3, label_smoothing=0.2, reduction=reduction, softcap=5.0, return_z_loss=True,
        grad_scalar=0.5,
    )  # fmt: skip


@pytest.mark.parametrize("layout", ["rows", "sliced"])
def test_cross_entropy_in_place_several_vocab_blocks(small_vocab_blocks, device, layout):
    # Contiguous logits take the gradient in their own memory; sliced rows get a buffer of their own.
    args = cross_entropy.args(device, shape=(13, 70), layout=layout, weighted=True)
    check(BACKEND, "cross_entropy", args, label_smoothing=0.1, in_place=True)
